"""Node-side watchdog: run one probe in its own process group and make sure nothing of it outlives its run.

    python3 _watchdog.py [--watch-stdin] [--exec] DEADLINE_S GRACE_S PROBE.py [ARGS...]

The controller starts every shipped probe this way (gpuaccept/runner/host.py), as the process group leader of its
command. The watchdog forks the probe into a process group of its own, announces that group on stderr as
``__GPUACCEPT_PGID__=<pgid>`` (before the probe runs; the controller strips the line and kills that group
too when it times out or is interrupted), then waits. It kills the probe's group (SIGTERM, up to
:data:`KILL_GRACE_S` seconds, SIGKILL) when:

* the probe outlives ``DEADLINE_S + GRACE_S`` seconds (the controller's own limit plus a grace: this is the
  guarantee for when the controller cannot kill it);
* ``--watch-stdin`` and its stdin reaches EOF: the controller holds stdin open for the whole run, so EOF
  means the SSH connection (or the controller process) is gone;
* its parent process changes (the sshd session that started it died);
* it receives SIGHUP, SIGTERM or SIGINT.

The probe runs in the forked child itself (``runpy.run_path`` as ``__main__``, ``sys.argv`` and ``sys.path[0]`` as
``python PROBE.py ARGS`` would set them), not in a fresh interpreter: one Python start per probe instead of two
(on a node, each start reads the site-packages of the interpreter that brings torch: 20-40 ms of CPU, measured
with benchmarks/fanout.py). The watchdog imports nothing a probe could mind (no torch, no CUDA, no threads), so
the fork is clean. The watchdog waits on a pidfd (Linux 5.3+, Python 3.9+) beside stdin, so it returns as the
probe exits rather than at the next poll; elsewhere it polls every :data:`POLL_S` s. With ``--exec`` the child
execs ``python PROBE.py ARGS`` instead: for a probe that others find by its command line (the multi-node
all-reduce, whose ranks are aborted with ``pkill -f`` on ``nccl_allreduce.py {...marker...}``; a forked probe
shows the watchdog's command line).

The probe writes to the watchdog's own stdout and stderr (inherited file descriptors, nothing piped through or
buffered here), so its live progress lines (``_probe.progress``) reach the controller as it writes them.

The shipped folder (``$TMPDIR/gpuaccept.<12 hex>``, the watchdog's working directory) has its mtime set at
each probe start (:func:`mark_used`). A run whose controller was SIGKILLed, or whose host froze, cannot remove its
folder; the next run's shipping removes such folders (:func:`sweep_stale`: this user's, unused for
:data:`STALE_S`, no process working in them). A run whose folder vanished under it ships the probes again
(gpuaccept.runner.host).

A kill reaches the probe's processes outside its group too (:func:`strays`): its descendants in other groups or
sessions, and those re-parented to the watchdog, which is their child subreaper (:func:`become_subreaper`) —
fio's job processes each call setsid(), and outlived a killed fio under init before. A probe that exits by
itself leaves nothing behind either: whatever it left running, in its group or not, is killed.
Exit status: the probe's (128 + N when it died of signal N); after a kill, 1 with one JSON line
``{"failed": true, "msg": "node watchdog: ..."}`` on stdout (the probe contract of ``_probe.py``).
Standard library only; Linux (``/proc``) for the group scan, ``kill -0`` semantics elsewhere.
"""
from __future__ import annotations

import gc
import json
import os
import re
import select
import signal
import sys
import time

import _proc

#: seconds between SIGTERM and SIGKILL of the probe's group (below the controller's 2 s, so the watchdog,
#: a member of the controller's kill target, reports before it is killed itself)
KILL_GRACE_S = 1.5
#: seconds between checks of the deadline and parent (and of the probe, where no pidfd can be had)
POLL_S = 0.2
#: seconds within which a node holds no process of a run whose controller is gone, even SIGKILLed (alone or
#: with its xdist workers): the session's stdin reaches EOF as the controller's (or worker's) side of the
#: connection closes, seen at once by select or at the next POLL_S; then SIGTERM, KILL_GRACE_S, SIGKILL of
#: every probe group, and the agent's folder removed. Measured 0.2 s alone and 3.7 s with -n 2 on a busy
#: 2-core machine (benchmarks/timing_bounds.py), 0.4 and 0.6 s on an H200 node holding the HBM probe
#: (benchmarks/scenarios/controller-killed-ssh*.yaml); 5 s promised (chosen).
CONTROLLER_GONE_CLEAN_S = 5.0
#: seconds after the SIGKILL during which the probe's strays re-parented here as their parents die are
#: SIGKILLed too (a parent's death and the re-parenting of its children take microseconds; chosen)
STRAY_KILL_S = 0.3
PGID_MARKER = "__GPUACCEPT_PGID__="
#: seconds since its last probe started after which another run's shipping removes a shipped folder nobody
#: works in (one day: longer than any gap between two probes of one run on one host, burn-ins included, which
#: work in it throughout; systemd-tmpfiles' default for /tmp is 10 days)
STALE_S = 86400.0
_FOLDER_RE = re.compile(r"gpuaccept\.[0-9a-f]{12}")

_signalled: list[int] = []


def _on_signal(signum, _frame) -> None:
    _signalled.append(signum)


def group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process is in process group ``pgid`` (_proc.group_alive)."""
    return _proc.group_alive(pgid)


def become_subreaper() -> None:
    """Make this process the child subreaper of its descendants (``prctl(PR_SET_CHILD_SUBREAPER)``, option 36,
    Linux 3.4+, prctl(2)): a probe's process whose parent dies first is re-parented here rather than to init,
    where :func:`strays` finds it (fio's job processes each call setsid(), leaving the probe's group and
    session; when fio's main process dies they would run on under init). Best effort."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER = 36
    except Exception:  # noqa: BLE001 - not Linux, or no libc: the group kill still holds
        pass


def _children(pid: int) -> list[int]:
    """The child pids of ``pid`` (/proc/<pid>/task/<tid>/children, Linux 3.5+; a /proc scan where the kernel
    lacks that file); [] where /proc cannot be read."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(x) for x in f.read().split()]
        except FileNotFoundError:
            return [p.pid for p in _proc.processes(live_only=False) if p.ppid == pid]
        except (OSError, ValueError):
            continue
    return out


def strays(child: int, keep=(), parent: int | None = None) -> list[int]:
    """The live processes that belong to probe ``child`` whatever their process group: its descendants
    (walked only while ``child`` is still the unreaped child of ``parent``, so a reused pid is never followed),
    and this process's other children (orphans re-parented here, :func:`become_subreaper`) with their
    descendants, but for ``keep`` (the agent's other probes, its warm child) and ``child`` itself. ``parent``:
    the process that forked ``child`` (None: this one; the agent's warm child, ``_zygote.py``, for a probe forked
    from there). Linux /proc; [] elsewhere."""
    me = os.getpid()
    roots = [c for c in _children(me) if c != child and c not in keep]
    st = _proc.stat(child)
    if st is not None and st.ppid == (me if parent is None else parent):
        roots += _children(child)
    out, seen = [], {me, child}
    while roots:
        pid = roots.pop()
        if pid in seen:
            continue
        seen.add(pid)
        st = _proc.stat(pid)
        if st is None:
            continue
        if st.state not in ("Z", "X"):
            out.append(pid)
        roots += _children(pid)
    return out


def _reap_orphans(child: int, keep=()) -> None:
    """Reap this process's exited children but for ``child`` and ``keep`` (orphans re-parented here)."""
    for c in _children(os.getpid()):
        if c != child and c not in keep:
            _reap(c)


def signal_probe(pgid: int, child: int, sig: int, keep=(), parent: int | None = None) -> None:
    """Send ``sig`` to probe ``child``'s :func:`strays` and to its group ``pgid`` (``keep``, ``parent``: as for
    :func:`strays`); what is gone or not ours is passed over."""
    for pid in strays(child, keep, parent):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group(pgid: int, child: int, grace_s: float = KILL_GRACE_S, keep=(), until: float | None = None,
               parent: int | None = None) -> None:
    """SIGTERM group ``pgid`` and the probe's :func:`strays` (its processes in other groups and sessions, such
    as fio's job processes), wait up to ``grace_s`` s for all of them to be gone (reaping ``child``), SIGKILL
    what is left; then SIGKILL, for up to :data:`STRAY_KILL_S` s, the strays that appear as their parents die
    (re-parented here), and reap them. ``keep``: this process's children that are other probes, left alone.
    ``until``: a ``time.monotonic()`` instant the grace ends by at the latest (a grace shared by several probes
    signalled at once). ``parent``: as for :func:`strays`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        signal_probe(pgid, child, sig, keep, parent)
        if sig == signal.SIGKILL:
            break
        end = time.monotonic() + grace_s if until is None else min(until, time.monotonic() + grace_s)
        while time.monotonic() < end:
            _reap(child)
            _reap_orphans(child, keep)
            if not group_alive(pgid) and not strays(child, keep, parent):
                break
            time.sleep(0.05)
    end = time.monotonic() + STRAY_KILL_S
    while True:
        _reap(child)
        _reap_orphans(child, keep)
        left = strays(child, keep, parent)
        if not left or time.monotonic() >= end:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)


def _reap(child: int):
    try:
        pid, status = os.waitpid(child, os.WNOHANG)
    except ChildProcessError:
        return None
    return status if pid == child else None


def _pdeathsig() -> None:
    """Ask Linux to SIGKILL this process when its parent (the watchdog) dies; best effort."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except Exception:  # noqa: BLE001 - not Linux, or no libc: the other checks still hold
        pass


def threads() -> int:
    """How many threads this process runs (``/proc/self/task``, Linux); 1 where /proc cannot be read. A fork
    copies only the calling thread, and a lock another thread held stays held in the child: only a process of
    one thread forks a probe that runs Python (the agent, its warm child); one of more execs it instead."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _freeze_gc() -> None:
    """Before the fork: move the watchdog's objects out of the garbage collector's view (``gc.freeze``,
    Python 3.7+), so that the probe's collections never walk them (nor touch, and so copy, their pages)."""
    freeze = getattr(gc, "freeze", None)
    if freeze is not None:
        freeze()


def mark_used() -> None:
    """Set the shipped folder's mtime to now, where the working directory is one (best effort)."""
    try:
        if _FOLDER_RE.fullmatch(os.path.basename(os.getcwd())):
            os.utime(".")
    except OSError:
        pass


def _cwds() -> set[str]:
    """Working directories of the processes /proc lets this user see."""
    out = set()
    for p in _proc.processes():
        try:
            out.add(os.readlink(f"/proc/{p.pid}/cwd"))
        except OSError:
            continue
    return out


def remove_tree(path: str) -> None:
    """Remove the folder ``path`` and everything in it, as ``shutil.rmtree(path, ignore_errors=True)`` does with
    its fd-based walk: a symlink inside is removed, never followed, and ``path`` itself is never entered through one
    (a symlink or file at ``path`` is unlinked). Best effort, never raises: what cannot be removed stays. Here
    rather than shutil, whose import (bz2, lzma, fnmatch) cost each agent's exit 4 ms of CPU (python -X importtime,
    Python 3.11)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    try:
        _clear(fd)
    finally:
        os.close(fd)
    try:
        os.rmdir(path)
    except OSError:
        pass


def _clear(fd: int, depth: int = 0) -> None:
    """Remove what the folder open as ``fd`` holds (:func:`remove_tree`), at most 64 folders deep."""
    try:
        with os.scandir(fd) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    except OSError:
        return
    for name, is_dir in entries:
        try:
            if not is_dir:
                os.unlink(name, dir_fd=fd)
                continue
            if depth < 64:
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                try:
                    _clear(sub, depth + 1)
                finally:
                    os.close(sub)
            os.rmdir(name, dir_fd=fd)
        except OSError:
            pass


def sweep_stale(parent: str = "..", now: float | None = None, stale_s: float = STALE_S) -> list[str]:
    """Remove ``gpuaccept.<12 hex>`` folders in ``parent`` (default: beside the working directory) that this user
    owns, whose mtime is more than ``stale_s`` s before ``now`` and in which no process works; returns the
    names removed. Never follows a symlink; never raises (what cannot be removed stays)."""
    import stat

    now = time.time() if now is None else now
    try:
        here = os.path.realpath(".")
        names = os.listdir(parent)
    except OSError:
        return []
    stale = []
    for name in names:
        if not _FOLDER_RE.fullmatch(name):
            continue
        path = os.path.join(parent, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
                and now - st.st_mtime > stale_s and os.path.realpath(path) != here):
            stale.append(os.path.realpath(path))
    if not stale:
        return []
    busy = _cwds()
    removed = []
    for path in stale:
        if any(c == path or c.startswith(path + os.sep) for c in busy):
            continue
        remove_tree(path)
        if not os.path.lexists(path):
            removed.append(os.path.basename(path))
    return removed


def become_probe(who: str, probe: list[str], gate_r: int, gate_w: int | None = None,
                 std: tuple[int, int] | None = None, env: dict | None = None, environ: dict | None = None,
                 keep_fds=(), cwd: str | None = None) -> None:
    """Turn a freshly forked child into the probe's process, up to the point where it runs.

    Own process group; wait for the parent's announcement on ``gate_r`` (``gate_w``, the parent's end, is
    closed first when given, so a parent that dies unannounced means EOF, not a hang); SIGHUP and SIGTERM
    at their defaults and SIGINT as a fresh interpreter has it; die with the parent (PR_SET_PDEATHSIG);
    stdin from /dev/null; with ``std`` = (stdout fd, stderr fd) those become 1 and 2 and every other
    descriptor above 2 is closed but for ``keep_fds`` (what the warm child's torch import opened, as a fresh
    import would hold them); ``environ`` replaces the whole environment when given (the warm child's, whose
    own is not the probe's); ``env`` is added to the environment; ``cwd``: the working directory to enter.
    A step that fails writes "<who>: cannot start <probe>: <error>" to stderr and exits 127 (the shell's
    "cannot execute"). Returns in the child only; never raises.
    """
    try:
        os.setpgid(0, 0)
        if gate_w is not None:
            os.close(gate_w)
        os.read(gate_r, 1)
        os.close(gate_r)
        for s in (signal.SIGHUP, signal.SIGTERM):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _pdeathsig()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        if std is not None:
            os.dup2(std[0], 1)
            os.dup2(std[1], 2)
            low = 3
            for fd in sorted(f for f in keep_fds if f > 2):
                os.closerange(low, fd)
                low = fd + 1
            os.closerange(low, 4096)
        if environ is not None:
            os.environ.clear()
            os.environ.update({str(k): str(v) for k, v in environ.items()})
        if env:
            os.environ.update({str(k): str(v) for k, v in env.items()})
        if cwd:
            os.chdir(cwd)
    except BaseException as e:  # noqa: BLE001
        os.write(2, f"{who}: cannot start {probe}: {e}\n".encode())
        os._exit(127)


def exec_python(who: str, probe: list[str]) -> None:
    """Replace this child with ``python probe...`` (the same interpreter); exit 127 naming ``who`` if it cannot."""
    try:
        os.execv(sys.executable, [sys.executable, *probe])
    except OSError as e:
        os.write(2, f"{who}: cannot start {probe}: {e}\n".encode())
        os._exit(127)


def exit_code(code) -> int:
    """A process exit status from ``sys.exit``'s argument, as Python's own exit makes it (None: 0; an int: its
    low 8 bits; anything else: written to stderr, 1)."""
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    try:
        sys.stderr.write(f"{code}\n")
    except Exception:  # noqa: BLE001
        pass
    return 1


def run_and_exit(argv: list[str]) -> None:
    """In a forked child that :func:`become_probe` made the probe: run it (:func:`_run_probe`) and leave with its
    exit status as ``python PROBE.py`` would (an uncaught exception: its traceback on stderr, 1; ^C: 130),
    streams flushed, no interpreter teardown. Never returns."""
    code = 1
    try:
        code = exit_code(_run_probe(argv))
    except BaseException as e:  # noqa: BLE001 - as Python prints an uncaught exception and exits 1 (130: ^C)
        import traceback  # here: 4 ms of imports only a probe that raised pays for

        traceback.print_exc()
        code = 130 if isinstance(e, KeyboardInterrupt) else 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)


def _run_probe(argv: list[str]):
    """In the forked child: run ``argv[0]`` (a probe file) as ``__main__`` with ``sys.argv = argv``, as
    ``python argv[0] argv[1:]`` would; returns its exit code (``sys.exit``'s argument, 0 when it returns).
    An exception the probe does not catch propagates (Python prints it and exits 1, as before)."""
    import runpy

    path = os.path.abspath(argv[0])
    sys.argv = [path, *argv[1:]]
    sys.path.insert(0, os.path.dirname(path))
    sys.stdin = open(os.devnull)  # noqa: SIM115 - fd 0 is /dev/null already; drop what the parent buffered
    try:
        cached = sys.modules.get("_bytecode")
        if cached is not None and cached.folder() is not None:
            cached.run_main(path)  # the probe's code from the node's bytecode cache (_bytecode.py)
        else:
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        return e.code
    return 0


def _pidfd(pid: int):
    """A pidfd for ``pid`` (readable when it exits), or None where Linux or Python lacks them."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _wait(fds: list[int], timeout: float) -> list[int]:
    """The fds of ``fds`` ready to read within ``timeout`` s (sleep when there are none)."""
    if not fds:
        time.sleep(timeout)
        return []
    try:
        return select.select(fds, [], [], timeout)[0]
    except (OSError, ValueError):
        time.sleep(timeout)
        return []


def _fail(msg: str) -> None:
    sys.stdout.write(json.dumps({"failed": True, "msg": f"node watchdog: {msg}"}) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    argv, flags = list(argv), set()
    while argv and argv[0] in ("--watch-stdin", "--exec"):
        flags.add(argv.pop(0))
    watch_stdin, exec_probe = "--watch-stdin" in flags, "--exec" in flags
    if len(argv) < 3:
        sys.stderr.write("usage: _watchdog.py [--watch-stdin] [--exec] DEADLINE_S GRACE_S PROBE.py [ARGS...]\n")
        return 2
    deadline_s, grace_s = float(argv[0]), float(argv[1])
    mark_used()
    probe = argv[2:]
    if os.getpgrp() != os.getpid():
        try:
            os.setpgid(0, 0)  # never treat a caller's group as ours
        except OSError:
            pass
    for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(s, _on_signal)
    become_subreaper()
    parent = os.getppid()
    gate_r, gate_w = os.pipe()
    _freeze_gc()
    child = os.fork()
    gc.enable()  # (the unpacking command turns it off until here; a fresh interpreter has it on)
    if child == 0:  # the probe: own group, dies with us, no stdin, starts once announced
        become_probe("watchdog", probe, gate_r, gate_w)
        if exec_probe:
            exec_python("watchdog", probe)
        return _run_probe(probe)  # the child leaves through the caller's sys.exit, as the probe's own Python would
    os.close(gate_r)
    try:
        os.setpgid(child, child)
    except OSError:
        pass  # the child did it first
    os.write(2, f"{PGID_MARKER}{child}\n".encode())
    os.write(gate_w, b"x")
    os.close(gate_w)
    end = time.monotonic() + deadline_s + grace_s
    exited = _pidfd(child)
    stdin_open = watch_stdin
    why = ""
    while True:
        status = _reap(child)
        if status is not None:
            if exited is not None:
                os.close(exited)
            if group_alive(child) or strays(child):  # the probe left something running, in its group or not
                kill_group(child, child)
            if os.WIFSIGNALED(status):
                return 128 + os.WTERMSIG(status)
            return os.WEXITSTATUS(status)
        if _signalled:
            why = f"received {signal.Signals(_signalled[0]).name}"
        elif time.monotonic() >= end:
            why = (f"the probe ran past its deadline ({deadline_s:g} s + {grace_s:g} s grace); "
                   "its process group was killed")
        elif os.getppid() != parent:
            why = "its parent (the SSH session) is gone; the probe's process group was killed"
        else:
            ready = _wait(([exited] if exited is not None else []) + ([0] if stdin_open else []),
                          min(POLL_S, max(0.0, end - time.monotonic())))
            if 0 in ready:
                try:
                    data = os.read(0, 4096)
                except OSError:
                    data = b""
                if not data:
                    why = "the controller's connection is gone (stdin closed); the probe's process group was killed"
            if not why:
                continue
        kill_group(child, child)
        try:
            _fail(why)
        except OSError:
            pass  # nobody is reading any more
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
