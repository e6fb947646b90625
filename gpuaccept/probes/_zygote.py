"""The agent's warm child ("zygote"): one Python per node that has imported torch, from which the node-side agent
forks each torch probe, so that a probe pays only its CUDA context and not torch's import (``import
torch`` took 4.3-8.5 s on an H200 node, a first CUDA context in a forked child of a parent that had imported
torch 0.4 s; measured 2026-12-04).

Process tree on the node::

    agent (_agent.py: child subreaper, holds the node lock)
      ├── probe forked by the agent itself        ("fresh": it imports what it needs)
      └── zygote (this file: the agent's process group and session, no lock, no GPU)
            └── probe forked from the zygote      ("warm": torch already imported)

Both sides are here: :class:`Zygote` is the agent's handle (stdlib only, imported by the agent when it first
needs it); :func:`main` is the zygote process, started as ``python _zygote.py FD AGENT_PID`` in the shipped
folder, with stdin and stdout on /dev/null, stderr the agent's, and no other descriptor than FD (so never the
node lock's): one end of an AF_UNIX SOCK_SEQPACKET socket pair, one JSON object per message.

The zygote: dies with the agent (PR_SET_PDEATHSIG SIGKILL, then checks its parent), ignores SIGHUP, SIGTERM and
SIGINT (a signal to the agent's process group must not kill the probes before the agent's own SIGTERM and grace
reach them: the agent stops the zygote itself once its probes are dead), imports torch with its stdout and
stderr caught (what a fresh import prints, numpy's warning say, is written at the start of each warm probe's
own stdout and stderr, as a fresh import would print it there), checks that the import initialised no CUDA
(``torch.cuda.is_initialized()``) and started no thread (a fork copies only the forking thread), and answers

    {"op": "ready", "pid", "torch": "2.5.1", "import_s": 4.3, "threads": 1, "bytecode_tree": null | "/tmp/..."}
    {"op": "failed", "why": "...", "missing_module": "torch" | null}          # then it exits

Nothing else of torch runs in it: no tensor, no CUDA call, no thread pool. Then, per request of the agent::

    agent -> zygote  {"op": "fork", "id": 7, "argv": ["matmul_tflops.py", "{...}"], "environ": {...}, "cwd": "...",
                      "replay": true}   # replay: write what the import printed (a probe importing torch at its top)
                     with three descriptors: the gate's read end, the probe's stdout and stderr write ends
    zygote -> agent  {"op": "forked", "id": 7, "pid": 4250}       # its process group made (setpgid both sides)
    zygote -> agent  {"op": "exit", "pid": 4250, "status": 0}     # waitpid status, reaped here at once

The forked child dies with the zygote (PR_SET_PDEATHSIG, set before anything else), then becomes the probe
exactly as the agent's own children do (``_watchdog.become_probe``: own process group, waits for the gate, signal
dispositions of a fresh interpreter, stdin /dev/null, the pipes as fds 1 and 2, every other descriptor closed but
those the import opened) with ``environ`` as its whole environment (the agent's, the probe's variables laid over:
what a fresh process forked by the agent would see), ``cwd`` as its working directory, ``sys.argv`` and
``sys.path[0]`` as ``python PROBE.py ARGS`` sets them, and runs it (``_watchdog.run_and_exit``). A probe is a copy
(fork): nothing it does reaches the zygote's memory, and it holds no descriptor of the zygote's socket.

EOF on the socket (the agent is gone or stopped it) ends the zygote; its probes die with it. Linux (prctl,
/proc); the agent falls back to forking every probe itself where the zygote cannot run.
"""
from __future__ import annotations

import json
import os
import select
import signal
import sys
import time

import _watchdog

#: the largest message either side sends, bytes (a fork request carries the whole environment; AF_UNIX datagrams
#: up to the socket's send buffer, 208 KiB by default on Linux (net.core.wmem_default), pass in one piece)
MAX_MSG = 192 << 10
#: bytes kept of what the torch import printed on each of stdout and stderr (numpy's warning is ~300; each byte
#: is at most 6 in the ready message's JSON, so both fit in :data:`MAX_MSG`)
IMPORT_OUTPUT_MAX = 8 << 10
#: seconds the agent waits for the zygote's answer to a fork request (a fork of a process holding torch takes
#: milliseconds: page tables of ~1 GB of mappings); past it the zygote counts as dead
FORK_WAIT_S = 10.0
#: seconds a starting zygote gets to import torch (4.3-8.5 s measured on an H200 node, 2026-12-04; ten times
#: that, for a node whose site-packages sit on a slow network file system) before it is killed as hung
START_WAIT_S = 90.0
#: seconds between the zygote's looks at its children where no pidfd can be had
POLL_S = 0.2
#: variables read when torch and its libraries load (the interpreter's own, the dynamic loader's, OpenMP's,
#: MKL's, OpenBLAS's, torch's): a probe whose environment sets one of them to another value than the zygote
#: imported under starts fresh, so that it sees what it asked for
IMPORT_TIME_ENV = ("PYTHON", "LD_", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "TORCH_", "PYTORCH_")
#: the variable that tells a probe how it started ("warm" | "fresh"), for its document (``_probe.run``)
STARTED_ENV = "GPUACCEPT_STARTED"
#: the agent's variable choosing when the zygote starts: "auto" (default: at the agent's start on a node with an
#: NVIDIA device, else at the first probe that imports torch at its top), "on" (at the agent's start), "off"
MODE_ENV = "GPUACCEPT_WARM"


def mode(environ=None) -> str:
    """The zygote's mode from :data:`MODE_ENV` in ``environ`` (default ``os.environ``): "on", "off" or "auto"
    (unset, or any other value). "0", "no", "false" read as "off"; "1", "yes", "true" as "on"."""
    v = str((os.environ if environ is None else environ).get(MODE_ENV, "auto")).strip().lower()
    return "off" if v in ("off", "0", "no", "false") else "on" if v in ("on", "1", "yes", "true") else "auto"


def node_has_gpu() -> bool:
    """Whether the node shows an NVIDIA device (``/dev/nvidiactl``, or a GPU under /proc/driver/nvidia/gpus):
    where torch probes will run, so the zygote starts with the agent."""
    try:
        return os.path.exists("/dev/nvidiactl") or bool(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return False


def import_sensitive(env: dict, environ=None) -> list[str]:
    """The names in ``env`` (a probe's variables) of :data:`IMPORT_TIME_ENV` whose value differs from
    ``environ``'s (default ``os.environ``: what the zygote imported under), sorted."""
    base = os.environ if environ is None else environ
    return sorted(k for k, v in env.items() if k.startswith(IMPORT_TIME_ENV) and base.get(k) != str(v))


# ---------------------------------------------------------------------------------------------------------
# the agent's side
# ---------------------------------------------------------------------------------------------------------

class Zygote:
    """The agent's handle on its warm child. ``state``: "idle" (not started), "starting", "ready", "dead" (it
    died, hung or broke the protocol: ``why``), "missing" (torch cannot be imported on the node: ``why``),
    "off" (not used). ``exits``: the exit statuses of probes it reaped, by pid, until the agent takes them;
    ``died``: why each zygote that died did (by its pid), for the probes that died with it."""

    def __init__(self, folder: str, how: str = "auto"):
        self.folder = folder
        self.state = "off" if how == "off" else "idle"
        self.pid: int | None = None
        self.reaped = False  # its pid is no longer ours to signal
        self.sock: socket.socket | None = None
        self.since = 0.0
        self.why = ""
        self.info: dict = {}
        self.exits: dict[int, int] = {}
        self.died: dict[int, str] = {}

    @property
    def live_pid(self) -> int | None:
        """The zygote's pid while it is this process's unreaped child (never a probe's stray), else None."""
        return None if self.reaped else self.pid

    def fileno(self) -> int | None:
        """The socket's descriptor while a zygote runs (for the agent's select), else None."""
        return self.sock.fileno() if self.sock is not None else None

    def spawn(self) -> None:
        """Start the zygote (``python _zygote.py 3 AGENT_PID`` in the folder); state "starting". Its import runs
        in the background; :meth:`events` says when it is ready. An exec that fails is seen as its death."""
        agent = os.getpid()
        script = os.path.join(self.folder, "_zygote.py")
        try:
            import socket  # here: the agent of a node without a GPU never needs it

            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            pid = os.fork()
        except OSError as e:  # no AF_UNIX sequenced packets, no memory for a fork: the probes start fresh
            self.why, self.state = f"could not be started ({e.strerror or e})", "dead"
            return
        if pid == 0:  # pragma: no cover - the child execs at once
            try:
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, 0)
                os.dup2(null, 1)
                fd = theirs.fileno()
                if fd != 3:
                    os.dup2(fd, 3)
                os.set_inheritable(3, True)
                os.closerange(4, 65536)
                os.execv(sys.executable, [sys.executable, script, "3", str(agent)])
            finally:
                os._exit(127)
        theirs.close()
        self.pid, self.sock, self.since, self.state = pid, ours, time.monotonic(), "starting"

    def events(self) -> list[dict]:
        """Read what the zygote sent (without blocking): note ``ready``/``failed`` (state) and probe exits
        (:attr:`exits`); a zygote gone (EOF) or too long starting (:data:`START_WAIT_S`) is stopped and marked
        dead. Returns the ``warm`` frames for the controller: ``{"op": "warm", "state", "pid", ...}``."""
        out: list[dict] = []
        while self.sock is not None:
            try:
                ready = select.select([self.sock], [], [], 0)[0]
            except (OSError, ValueError):
                ready = [self.sock]
            if not ready:
                break
            msg = self._recv()
            if msg is None:
                out += self._gone(self._end_status())
                break
            out += self._take(msg)
        if self.state == "starting" and time.monotonic() - self.since > START_WAIT_S:
            out += self._gone(f"did not finish importing torch within {START_WAIT_S:g} s", kill=True)
        return out

    def _recv(self) -> dict | None:
        try:
            data = self.sock.recv(MAX_MSG)
            doc = json.loads(data.decode()) if data else None
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def _take(self, msg: dict) -> list[dict]:
        op = msg.get("op")
        if op == "exit":
            self.exits[int(msg["pid"])] = int(msg["status"])
        elif op == "ready" and self.state == "starting":
            keys = ("torch", "import_s", "threads", "bytecode_tree")
            self.state, self.info = "ready", {k: msg.get(k) for k in keys}
            self.info["output"] = (msg.get("stdout") or "", msg.get("stderr") or "")
            return [{"op": "warm", "state": "ready", "pid": self.pid,
                     **{k: v for k, v in self.info.items() if k != "output"}}]
        elif op == "failed":
            missing = msg.get("missing_module")
            self.why = str(msg.get("why") or "failed")
            self._stop()
            self.state = "missing" if missing else "dead"
            return [{"op": "warm", "state": self.state, "pid": self.pid, "why": self.why,
                     **({"missing_module": missing} if missing else {})}]
        return []

    def fork(self, rid, argv: list[str], environ: dict, cwd: str, fds: list[int], replay: bool = True) -> int | None:
        """Ask the ready zygote to fork probe request ``rid`` (``fds``: gate read end, stdout and stderr write
        ends; the caller closes its copies; ``replay``: the probe imports torch at its top, so it gets what the
        import printed); its pid once forked, else None: a request too large for one message (the zygote stays),
        or a zygote that did not answer within :data:`FORK_WAIT_S` (then stopped, dead)."""
        msg = json.dumps({"op": "fork", "id": rid, "argv": argv, "environ": environ, "cwd": cwd,
                          "replay": replay}).encode()
        if len(msg) > MAX_MSG:
            return None
        try:
            import socket

            socket.send_fds(self.sock, [msg], fds)
        except OSError as e:
            self._gone(f"a fork request could not be sent ({e.strerror or e})", kill=True)
            return None
        end = time.monotonic() + FORK_WAIT_S
        while time.monotonic() < end:
            if not select.select([self.sock], [], [], max(0.0, end - time.monotonic()))[0]:
                break
            got = self._recv()
            if got is None:
                self._gone(self._end_status())
                return None
            if got.get("op") == "forked" and got.get("id") == rid:
                return int(got["pid"])
            self._take(got)
        self._gone(f"did not answer a fork request within {FORK_WAIT_S:g} s", kill=True)
        return None

    def _end_status(self) -> str:
        """How the zygote ended, once its socket closed: waits for it (up to 1 s, then SIGKILL) and reaps it."""
        end = time.monotonic() + 1.0
        st = None
        while st is None and time.monotonic() < end:
            st = _watchdog._reap(self.pid)
            if st is None:
                time.sleep(0.01)
        if st is None:
            self._stop()
            return "closed its socket without exiting"
        self.reaped = True
        if os.WIFSIGNALED(st):
            try:
                name = signal.Signals(os.WTERMSIG(st)).name
            except ValueError:
                name = f"signal {os.WTERMSIG(st)}"
            return f"died of {name}"
        return f"exited with rc {os.WEXITSTATUS(st)}"

    def _gone(self, why: str, kill: bool = False) -> list[dict]:
        if kill:
            self._stop()
        else:
            self._close()
        self.why, self.state = why, "dead"
        if self.pid is not None:
            self.died[self.pid] = why
        return [{"op": "warm", "state": "dead", "pid": self.pid, "why": f"the warm child (pid {self.pid}) {why}"}]

    def _close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _stop(self) -> None:
        """SIGKILL the zygote (the probes forked from it die with it) and reap it."""
        self._close()
        if self.pid is None or self.reaped:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self.reaped = True

    def stop(self) -> None:
        """End the zygote for good (the agent stops: its probes are dead already); state "off". Idempotent."""
        if self.state in ("starting", "ready"):
            self._stop()
        self.state = "off"


# ---------------------------------------------------------------------------------------------------------
# the zygote process
# ---------------------------------------------------------------------------------------------------------

def _open_fds() -> set[int]:
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return set()
    out = set()
    for n in names:
        try:
            fd = int(n)
            os.fstat(fd)  # the listing's own directory descriptor is closed by now
        except (ValueError, OSError):
            continue
        out.add(fd)
    return out


def _scratch(name: str) -> int:
    try:
        return os.memfd_create(name)
    except (AttributeError, OSError):
        import tempfile

        return os.dup(tempfile.TemporaryFile().fileno())


def _read_back(fd: int) -> str:
    data = os.pread(fd, IMPORT_OUTPUT_MAX, 0)
    os.close(fd)
    return data.decode("latin-1")


def _keep_bytecode() -> str | None:
    """Where torch ships no bytecode, the folder its import's bytecode is kept in for the next run
    (``_bytecode.use_tree``); None where it has its own, the cache is off, or that fails (the import then
    compiles as it would have)."""
    try:
        import _bytecode

        return _bytecode.use_tree("torch")
    except Exception:  # noqa: BLE001 - a cache that cannot be used is no reason to refuse the import
        return None


def import_torch() -> tuple[dict, set[int]]:
    """Import torch with stdout and stderr caught; ``({"op": "ready"|"failed", ...}, descriptors the import
    opened)``. Fails (``failed`` with ``why``) when torch cannot be imported (``missing_module`` when a module is
    missing), when the import initialised CUDA, or when it left a Python thread running (native threads are
    counted in ``threads``)."""
    before = _open_fds()
    out_f, err_f = _scratch("gpuaccept-import-stdout"), _scratch("gpuaccept-import-stderr")
    saved = os.dup(1), os.dup(2)
    for f in (sys.stdout, sys.stderr):
        f.flush()
    os.dup2(out_f, 1)
    os.dup2(err_f, 2)
    t0 = time.monotonic()
    doc: dict = {"op": "ready"}
    try:
        doc["bytecode_tree"] = _keep_bytecode()
        import torch

        doc.update(torch=torch.__version__)
        if torch.cuda.is_initialized():
            doc = {"op": "failed", "why": "importing torch initialised CUDA: a fork would share its context"}
    except BaseException as e:  # noqa: BLE001 - whatever stops the import stops the zygote, said
        missing = e.name if isinstance(e, ModuleNotFoundError) and e.name else None
        doc = {"op": "failed", "why": f"import torch: {type(e).__name__}: {e}".splitlines()[0][:300],
               "missing_module": missing.split(".")[0] if missing else None}
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:  # noqa: BLE001
                pass
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
    doc["import_s"] = round(time.monotonic() - t0, 3)
    doc["stdout"], doc["stderr"] = _read_back(out_f), _read_back(err_f)
    # A fork copies only the calling thread. Native pools that the import starts (OpenBLAS through numpy: one
    # thread per core, 16 on a 16-core H200 node) re-create themselves in a forked child (pthread_atfork), so
    # they are counted, not refused; a Python thread could hold a lock the child then waits on forever: refused.
    # Seen on a 1xH200 node: 16 threads after `import torch`, and a child forked then got its CUDA context in
    # 0.30-0.51 s and ran a bf16 matmul.
    doc["threads"] = _watchdog.threads()
    import threading

    python_threads = threading.active_count()
    if doc["op"] == "ready" and python_threads > 1:
        doc = {"op": "failed", "why": f"{python_threads} Python threads run after importing torch: a fork copies "
                                      f"only one", "threads": doc["threads"]}
    return doc, _open_fds() - before


def _send(sock: socket.socket, doc: dict) -> None:
    sock.send(json.dumps(doc, separators=(",", ":")).encode())


def _become(req: dict, fds: list[int], me: int, keep: set[int], output: tuple[str, str]) -> None:
    """In the forked child: die with the zygote, become the probe (``_watchdog.become_probe``), write what the
    import printed, run the probe. Never returns."""
    try:
        _watchdog._pdeathsig()
        if os.getppid() != me:  # the zygote died before the line above
            os._exit(1)
        gate_r, out_w, err_w = fds
        argv = [str(a) for a in req["argv"]]
        _watchdog.become_probe("zygote", argv, gate_r, std=(out_w, err_w), environ=req.get("environ") or {},
                               keep_fds=keep, cwd=req.get("cwd"))
        for fd, text in zip((1, 2), output if req.get("replay", True) else ()):
            data = text.encode("latin-1")
            while data:
                data = data[os.write(fd, data):]
        _watchdog.run_and_exit(argv)
    finally:
        os._exit(127)


def serve(sock: socket.socket, keep: set[int], output: tuple[str, str]) -> int:
    """Fork a probe per request, report each one's end; returns 0 at EOF (the agent is gone or stopped it)."""
    me = os.getpid()
    children: dict[int, int | None] = {}  # pid -> its pidfd (None where there is none: polled)
    while True:
        fds = [sock.fileno()] + [f for f in children.values() if f is not None]
        wait = POLL_S if any(f is None for f in children.values()) else None
        try:
            ready = select.select(fds, [], [], wait)[0]
        except InterruptedError:
            ready = []
        if sock.fileno() in ready:
            try:
                import socket

                data, got, _flags, _addr = socket.recv_fds(sock, MAX_MSG, 8)
            except OSError:
                return 0
            if not data:
                return 0
            req = json.loads(data.decode())
            if req.get("op") == "fork" and len(got) == 3:
                _watchdog._freeze_gc()
                pid = os.fork()
                if pid == 0:
                    sock.detach()  # its descriptor is closed in _become, never the zygote's socket object's to close
                    _become(req, got, me, keep, output)
                for fd in got:
                    os.close(fd)
                try:
                    os.setpgid(pid, pid)
                except OSError:
                    pass  # the child did it first
                children[pid] = _watchdog._pidfd(pid)
                _send(sock, {"op": "forked", "id": req.get("id"), "pid": pid})
            else:
                for fd in got:
                    os.close(fd)
        for pid in list(children):
            st = _watchdog._reap(pid)
            if st is not None:
                pfd = children.pop(pid)
                if pfd is not None:
                    os.close(pfd)
                _send(sock, {"op": "exit", "pid": pid, "status": st})


def main(argv: list[str]) -> int:
    """The zygote process (see the module docstring): ``argv`` = [socket fd, agent pid]."""
    fd, agent = int(argv[0]), int(argv[1])
    _watchdog._pdeathsig()
    if os.getppid() != agent:
        return 1
    for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(s, signal.SIG_IGN)
    import socket

    sock = socket.socket(fileno=fd)
    doc, keep = import_torch()
    doc["pid"] = os.getpid()
    try:
        _send(sock, doc)
    except OSError:
        return 1
    if doc["op"] != "ready":
        return 0
    _watchdog._freeze_gc()
    try:
        return serve(sock, keep, (doc["stdout"], doc["stderr"]))
    except OSError:  # the agent is gone (EPIPE): nobody to fork for
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
