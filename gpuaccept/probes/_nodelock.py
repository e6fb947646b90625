"""Node-side lock: one gpuaccept run per node (the agent, ``_agent.py``, takes it at its start).

The lock lives in a folder shared by every user's runs on the node, :data:`DEFAULT_DIR` (the controller may
name another: ``GPUACCEPT_NODE_LOCK_DIR``, gpuaccept.runner.agent). Made ``mode 1777`` (world-writable,
sticky) when missing. In it:

* ``.mutex``: flock()ed for the moment of "scan the holders, register mine", so that two runs starting at the
  same instant cannot both win;
* one holder file per live agent, ``<run key>.<pid>.held``, holding JSON ``{"run_id", "controller", "since",
  "pid", "key"}`` and kept flock()ed by its agent for its life: the kernel drops that flock when the process
  ends, even on SIGKILL. Renamed ``.stopping`` when its agent begins to stop (its probes are being killed).

:func:`acquire` scans the holders: one whose flock can be taken is stale (its agent is gone) and is removed,
reported as taken over; a live one of the same run key (another agent of the same run: another simulated node
of the same machine, another xdist worker) is no conflict; a live ``.stopping`` one of another run is waited
for (up to ``wait_s``); any other live holder raises :class:`Held`. A folder that cannot be made or written
gives no lock and says why (the run goes on without one rather than no run getting the node).

Standard library only (fcntl: Linux and the other Unixes).
"""
from __future__ import annotations

import fcntl
import json
import os
import stat
import time

#: the lock folder on a node when the controller names none: the same path for every user's run
DEFAULT_DIR = "/tmp/gpuaccept-node-lock"
MUTEX = ".mutex"
#: seconds to wait for the folder's mutex (held only for a scan, milliseconds) before going on without a lock
MUTEX_WAIT_S = 10.0
#: seconds to wait for a stopping holder of another run to end (its agent kills its probes: 1.5 s grace, 1 s
#: of reading their pipes) before the node counts as held by it
STOPPING_WAIT_S = 10.0
HELD, STOPPING = ".held", ".stopping"


class Held(Exception):
    """The node is held by a live agent of another run; ``holder``: its ``{"run_id", "controller", "since",
    "pid"}``."""

    def __init__(self, holder: dict):
        super().__init__(describe(holder))
        self.holder = holder


def describe(holder: dict) -> str:
    """``held by gpuaccept run <run id> from <controller> since <UTC time> (pid N)``."""
    return (f"held by gpuaccept run {holder.get('run_id')} from {holder.get('controller')} since "
            f"{holder.get('since')} (pid {holder.get('pid')})")


class NodeLock:
    """A holder file of this process, flock()ed while this object lives (until :meth:`release`)."""

    def __init__(self, folder: str, path: str, fd: int):
        self.folder, self.path, self.fd = folder, path, fd

    def stopping(self) -> None:
        """Say that this agent is stopping (its probes are being killed): a run starting now waits for it."""
        if self.fd is None or not self.path.endswith(HELD):
            return
        new = self.path[:-len(HELD)] + STOPPING
        try:
            os.rename(self.path, new)
            self.path = new
        except OSError:
            pass

    def release(self) -> None:
        """Remove the holder file and drop its flock (under the mutex: no scan takes it for a stale one)."""
        if self.fd is None:
            return
        try:
            with _Mutex(self.folder, 2.0):
                _unlink(self.path)
        except (OSError, TimeoutError):
            _unlink(self.path)
        os.close(self.fd)
        self.fd = None


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


def folder_problem(folder: str) -> str | None:
    """Make ``folder`` (mode 1777) when missing; why it cannot serve as the lock folder, or None."""
    try:
        os.mkdir(folder, 0o755)
        try:
            os.chmod(folder, 0o1777)  # mkdir's mode passes the umask
        except OSError:
            pass
    except FileExistsError:
        pass
    except OSError as e:
        return f"{folder} could not be made ({e.strerror or e})"
    try:
        st = os.lstat(folder)
    except OSError as e:
        return f"{folder}: {e.strerror or e}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable by uid {os.getuid()}"
    return None


def _open_shared(path: str) -> int:
    """A read-only descriptor of ``path``, made when missing. Never O_CREAT on an existing file: in a sticky
    folder the kernel refuses that for another user's file (fs.protected_regular)."""
    while True:
        try:
            return os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            pass
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            return fd
        except FileExistsError:
            continue


class _Mutex:
    """The lock folder's ``.mutex``, flock()ed exclusively (waiting up to ``wait_s``, else TimeoutError)."""

    def __init__(self, folder: str, wait_s: float = MUTEX_WAIT_S):
        self.path, self.wait_s, self.fd = os.path.join(folder, MUTEX), wait_s, None

    def __enter__(self):
        fd = _open_shared(self.path)
        end = time.monotonic() + self.wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.fd = fd
                return self
            except BlockingIOError:
                if time.monotonic() >= end:
                    os.close(fd)
                    raise TimeoutError(f"{self.path} stayed locked for {self.wait_s:g} s") from None
                time.sleep(0.02)

    def __exit__(self, *_exc) -> None:
        os.close(self.fd)  # drops the flock


def _read(fd: int) -> dict:
    try:
        doc = json.loads(os.pread(fd, 1 << 16, 0).decode("utf-8", "replace") or "{}")
    except (OSError, ValueError):
        doc = {}
    return doc if isinstance(doc, dict) else {}


def _public(doc: dict) -> dict:
    return {k: doc.get(k) for k in ("run_id", "controller", "since", "pid")}


def scan(folder: str, key: str) -> tuple[list[dict], list[dict], list[dict]]:
    """The holders in ``folder`` (the caller holds the mutex): ``(live holders of other runs, stopping ones of
    other runs, stale ones removed)``; each ``{"run_id", "controller", "since", "pid"}``, a stale one with
    ``"removed"`` (False: another user's file in the sticky folder stays, still stale)."""
    live, stopping, stale = [], [], []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return live, stopping, stale
    for name in names:
        if name.startswith(".") or not name.endswith((HELD, STOPPING)):
            continue
        path = os.path.join(folder, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # removed meanwhile (its agent released it)
        try:
            doc = _read(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # its agent lives
                if doc.get("key") != key:
                    (stopping if name.endswith(STOPPING) else live).append(_public(doc))
                continue
            stale.append({**_public(doc), "removed": _unlink(path)})
        finally:
            os.close(fd)
    return live, stopping, stale


def acquire(identity: dict, folder: str = DEFAULT_DIR, wait_s: float = STOPPING_WAIT_S,
            since: str | None = None) -> tuple[NodeLock | None, list[dict], str]:
    """Take the node for the run of ``identity`` (``{"key", "run_id", "controller"}``): ``(lock, stale holders
    taken over, note)``; lock None (and ``note`` saying why) when ``folder`` cannot serve. Raises
    :class:`Held` for a live holder of another run (after up to ``wait_s`` s for one that is stopping)."""
    why = folder_problem(folder)
    if why:
        return None, [], f"no node lock: {why}"
    key = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(identity.get("key") or "run"))[:64]
    since = since or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    mine = {"run_id": identity.get("run_id"), "controller": identity.get("controller"), "since": since,
            "pid": os.getpid(), "key": identity.get("key")}
    took: list[dict] = []
    end = time.monotonic() + wait_s
    while True:
        try:
            with _Mutex(folder):
                live, stopping, stale = scan(folder, str(identity.get("key")))
                took += stale
                if not live and not stopping:
                    path = os.path.join(folder, f"{key}.{os.getpid()}{HELD}")
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    os.write(fd, json.dumps(mine).encode())
                    return NodeLock(folder, path, fd), took, ""
        except TimeoutError as e:
            return None, took, f"no node lock: {e}"
        except OSError as e:
            return None, took, f"no node lock: {folder}: {e.strerror or e}"
        if live or time.monotonic() >= end:
            raise Held((live or stopping)[0])
        time.sleep(0.1)
