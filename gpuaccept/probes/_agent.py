"""Node-side agent: one Python per host and run, running every probe the controller asks for.

The controller (gpuaccept/runner/agent.py) starts it once per host with one command, in a fresh folder
(``$TMPDIR/gpuaccept.<12 hex>``, ``mkdir -m 700``), as ``python3 -c BOOT``: BOOT reads the agent's own files from
stdin (one frame, below), writes them into the folder, imports this file and calls :func:`main`; a probe's
files come with its run request (``texts``) and are written before its first run. The shell of
that command waits for this Python and removes the folder after it, so a start that fails before the agent
serves (BOOT cut off, the files not written, a signal) leaves nothing; the agent itself removes it in every
way it ends (below). The same
session then carries every request, and the agent removes its folder before it exits: one SSH session and one
Python start per host, no Python start per probe and no second session for the cleanup.

Frames, both ways: 4 bytes of length (big-endian, unsigned), then that many bytes of UTF-8 JSON (one object,
at most :data:`MAX_FRAME` bytes). Before its first frame the agent writes :data:`MAGIC` on its stdout (a login
shell may print a banner first; the controller skips to it). Bytes of a probe's output travel as JSON text
decoded as Latin-1 (every byte one character, so nothing is lost).

Controller to agent::

    {"op": "run", "id": 1, "argv": ["gpu_inventory.py", "{...}"], "deadline_s": 300, "grace_s": 15,
     "env": {"NAME": "value"}, "exec": false, "torch": "module" | "function" | null,
     "files": ["gpu_inventory.py", "_probe.py", ...] | null,    # what it needs (null: every file sent)
     "texts": {"gpu_inventory.py": "...", ...}}                   # the files not sent before
    {"op": "kill", "id": 1, "why": "the controller's limit of 300 s passed"}
    {"op": "exit"}

Agent to controller::

    {"op": "ready", "dir": "/tmp/gpuaccept.3f9c2a61d0b4", "pid": 4242, "swept": [...],
     "lock": "/tmp/gpuaccept-node-lock/<key>.4242.held", "took_over": [{...}], "lock_note": "..."}
    {"op": "held", "holder": {"run_id": "...", "controller": "...", "since": "...", "pid": 4100}}  # then exits
    {"op": "started", "id": 1, "pgid": 4250}
    {"op": "progress", "id": 1, "line": "GPUACCEPT-PROGRESS {...}"}      # each progress line, as written
    {"op": "done", "id": 1, "rc": 0, "stdout": "...", "stderr": "...", "pgid": 4250, "seconds": 0.41,
     "started": "warm" | "fresh"}
    {"op": "done", "id": 1, "rc": 1, ..., "unwritable": {"folder", "why", "errno": "ENOSPC", "full": true}}
                                                          # its files could not be written: it never started
    {"op": "warm", "state": "ready" | "dead" | "missing", "pid": 4243, ...}   # the warm child's news, unasked
    {"op": "bye", "removed": true}

Each probe runs under the node-side watchdog's rules (``_watchdog.py``): forked into a process group of its
own (``runpy`` in the forked child, so no interpreter start: the agent imports nothing a probe could mind and
runs one thread, checked before each fork, ``_watchdog.threads``; ``"exec": true``, or an agent found running
more threads, execs ``python PROBE.py ARGS``, for a probe found by its command line), its stdout and stderr on
pipes the agent reads, killed (SIGTERM, :data:`_watchdog.KILL_GRACE_S`, SIGKILL) past ``deadline_s + grace_s``,
on a ``kill`` request, and whatever it left running when it exits; the kill reaches its processes outside its
group as well (``_watchdog.strays``: the agent is their child subreaper, so fio's setsid() job processes are
found even once fio is gone). A killed probe's result is rc 1 with the watchdog's line ``{"failed": true,
"msg": "node watchdog: ..."}`` after what it printed.

Torch probes start warm (``_zygote.py``): the agent keeps a child that has imported torch (and nothing of CUDA)
and forks them from it, so that each pays its CUDA context but not torch's import. ``torch`` in a run request
(the controller reads it from the probe's imports, gpuaccept.runner.ship.torch_import) says whether the probe
imports torch at its top ("module") or only inside a function ("function"). The warm child starts with the agent
on a node that shows an NVIDIA device (else with the first "module" probe; ``GPUACCEPT_WARM`` = on | off |
auto overrides); a "module" probe that comes while it imports waits for it (its own import would take as long),
a "function" probe never waits. A probe starts fresh, forked by the agent as before, when the warm child is off,
died, hung or found no torch (said once in a ``warm`` frame; the probe then fails as it always did, with its own
"No module named 'torch'"), when the probe is exec'd, or when its environment changes a variable read at
import (``_zygote.IMPORT_TIME_ENV``). Either way the probe keeps its own process group, deadline, kill, pipes
and exit status under the rules above; ``GPUACCEPT_STARTED`` in its environment (``warm`` | ``fresh``) puts
how it started into its document (``_probe.run``: ``"started"``). The warm child never holds the node lock nor a
GPU, and it is stopped (SIGKILL, reaped) before the agent exits; it dies with the agent whatever ends it.

A folder removed under the agent (a /tmp cleaner) is written again before the next probe starts, from the files
it was sent. The agent kills every probe's group, removes its folder and exits when its stdin reaches EOF (the
SSH session or the controller is gone), when its parent changes (the sshd session died), on SIGHUP, SIGTERM or
SIGINT, and on ``exit`` (then it answers ``bye`` first). Standard library only; Linux for the process-group scan.

One run per node: given the run's identity (BOOT's argument, JSON ``{"key", "run_id", "controller"[,
"lock_dir"]}``), the agent takes the node's lock (``_nodelock.py``) before its ``ready``, holds it for its
life and releases it once its probes are dead; a node held by a live agent of another run is answered with
``held`` (no probe started, no folder swept) and the agent exits. ``ready`` names the stale holders it took
over (``took_over``) or why it has no lock (``lock_note``: a lock folder it cannot write). Without an identity
(an agent started by hand, a test) no lock is taken.
"""
from __future__ import annotations

import errno
import json
import os
import select
import signal
import sys
import time

import _nodelock
import _watchdog

MAGIC = b"__GPUACCEPT_AGENT__\n"
#: the largest frame either side sends or accepts, bytes (a probe's stdout travels in one)
MAX_FRAME = 256 << 20
#: seconds between looks at deadlines and the parent when nothing arrives
POLL_S = 0.2
#: seconds the agent reads a finished probe's pipes for what is still in them
DRAIN_S = 1.0
PROGRESS_PREFIX = b"GPUACCEPT-PROGRESS "

_signalled: list[int] = []


def encode(doc: dict) -> bytes:
    """One frame: length (4 bytes, big-endian) and the JSON of ``doc``."""
    data = json.dumps(doc, separators=(",", ":")).encode()
    return len(data).to_bytes(4, "big") + data


class Frames:
    """Frames out of a byte stream, fed in pieces (:meth:`feed` returns the objects complete so far).
    Raises ValueError for a frame longer than :data:`MAX_FRAME` or not a JSON object."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[dict]:
        self.buf += data
        out = []
        while len(self.buf) >= 4:
            n = int.from_bytes(self.buf[:4], "big")
            if n > MAX_FRAME:
                raise ValueError(f"frame of {n} bytes is over {MAX_FRAME}")
            if len(self.buf) < 4 + n:
                break
            doc = json.loads(bytes(self.buf[4:4 + n]).decode())
            del self.buf[:4 + n]
            if not isinstance(doc, dict):
                raise ValueError("a frame is not a JSON object")
            out.append(doc)
        return out


def _send(doc: dict) -> None:
    data = memoryview(encode(doc))
    while data:
        data = data[os.write(1, data):]


class Probe:
    """One running probe: its request id, process (and group) id, pipes, what it wrote, its deadline; ``warm``:
    the pid of the warm child it was forked from (None: forked by the agent), ``how``: "warm" | "fresh"."""

    def __init__(self, rid, pid: int, out_fd: int, err_fd: int, end: float, warm: int | None = None):
        self.id, self.pid, self.end, self.warm = rid, pid, end, warm
        self.how = "fresh" if warm is None else "warm"
        self.fds = {out_fd: bytearray(), err_fd: bytearray()}
        self.out_fd, self.err_fd = out_fd, err_fd
        self.line = bytearray()  # stderr since its last newline (progress lines)
        self.started = time.monotonic()
        # a warm probe's end is told by the warm child (its parent), on the socket the loop selects on
        self.pidfd = _watchdog._pidfd(pid) if warm is None else None
        self.status = None
        self.why = ""


#: the agent's handle on its warm child (``_zygote.Zygote``), made by :func:`_serve`; None: none (yet)
_zy = None


def _child(argv: list[str], env: dict, exec_probe: bool, gate: tuple[int, int], out_w: int, err_w: int) -> None:
    """In the forked child: become the probe (``_watchdog.become_probe``) with the pipes as stdout/stderr, run; never returns."""
    _watchdog.become_probe("agent", argv, gate[0], gate[1], std=(out_w, err_w), env=env)
    if exec_probe:
        _watchdog.exec_python("agent", argv)
    _watchdog.run_and_exit(argv)


def how_to_start(req: dict) -> str:
    """How the probe of ``req`` starts: "warm" (fork it from the ready warm child), "wait" (the warm child is
    importing torch and the probe imports it at its top: wait for it), or "fresh" (see the module docstring)."""
    kind = req.get("torch")
    if _zy is None or kind not in ("module", "function") or req.get("exec"):
        return "fresh"
    import _zygote

    if _zygote.import_sensitive(dict(req.get("env") or {})):
        return "fresh"
    if _zy.state == "ready":
        return "warm"
    if kind == "module" and _zy.state in ("idle", "starting"):
        return "wait"
    return "fresh"


def start(req: dict, end: float | None = None) -> Probe:
    """Fork the probe of a ``run`` request into its own process group, from the warm child when it is ready and
    the probe imports torch (:func:`how_to_start`), else here; announce the group (``started``). ``end``: its
    deadline (``time.monotonic()``), default ``deadline_s + grace_s`` from now."""
    argv = [str(a) for a in req["argv"]]
    env = {**{str(k): str(v) for k, v in (req.get("env") or {}).items()}}
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    gate_r, gate_w = os.pipe()
    pid = warm = None
    if how_to_start(req) == "warm":
        pid = _zy.fork(req.get("id"), argv, {**os.environ, **env, "GPUACCEPT_STARTED": "warm"}, os.getcwd(),
                       [gate_r, out_w, err_w], replay=req.get("torch") == "module")
        warm = _zy.pid if pid is not None else None
    if pid is None:
        # a probe that imports no torch runs in a fork of the agent itself (no interpreter start): safe only while
        # the agent runs one thread (it starts none; a library that did would make the child exec the probe)
        exec_probe = bool(req.get("exec")) or _watchdog.threads() > 1
        _watchdog._freeze_gc()
        pid = os.fork()
        if pid == 0:
            _child(argv, {**env, "GPUACCEPT_STARTED": "fresh"}, exec_probe, (gate_r, gate_w), out_w, err_w)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass  # the child did it first
    for fd in (gate_r, out_w, err_w):
        os.close(fd)
    _watchdog.mark_used()
    if end is None:
        end = time.monotonic() + float(req.get("deadline_s") or 300) + float(req.get("grace_s") or 0)
    p = Probe(req.get("id"), pid, out_r, err_r, end, warm)
    _send({"op": "started", "id": p.id, "pgid": pid})
    os.write(gate_w, b"x")
    os.close(gate_w)
    return p


def _status(p: Probe):
    """``p``'s wait status once it ended, else None: from the warm child that reaped it, or reaped here (a probe
    forked here, or a warm one re-parented here when its warm child died)."""
    if p.warm is not None and _zy is not None and p.pid in _zy.exits:
        return _zy.exits.pop(p.pid)
    return _watchdog._reap(p.pid)


def _read(p: Probe, fd: int) -> None:
    """Read what ``fd`` of ``p`` holds; send each complete progress line of its stderr; close it at EOF."""
    try:
        data = os.read(fd, 1 << 16)
    except OSError:
        data = b""
    if not data:
        os.close(fd)
        p.fds[fd] = bytes(p.fds[fd])
        return
    p.fds[fd] += data
    if fd == p.err_fd:
        p.line += data
        *lines, rest = bytes(p.line).split(b"\n")
        p.line = bytearray(rest[-65536:])
        for ln in lines:
            if ln.startswith(PROGRESS_PREFIX):
                _send({"op": "progress", "id": p.id, "line": ln.decode("latin-1")})


def _open_fds(p: Probe) -> list[int]:
    return [fd for fd, buf in p.fds.items() if isinstance(buf, bytearray)]


def finish(p: Probe, why: str = "", keep=(), until: float | None = None) -> None:
    """Kill what is left of ``p`` (all of it when ``why`` says it must be stopped): its group and its
    processes outside it (``_watchdog.strays``; ``keep``: the pids of the other running probes, left alone);
    read its pipes to the end (or :data:`DRAIN_S`), send ``done``. ``until``: the end of a grace shared with
    other probes (``_watchdog.kill_group``)."""
    keep = set(keep) | _spared()
    if why or p.status is None:
        _watchdog.kill_group(p.pid, p.pid, keep=keep, until=until, parent=p.warm)
        p.status = p.status if p.status is not None else _warm_status(p)
    elif _watchdog.group_alive(p.pid) or _watchdog.strays(p.pid, keep, p.warm):  # it left something running
        _watchdog.kill_group(p.pid, p.pid, keep=keep, parent=p.warm)
    end = time.monotonic() + DRAIN_S
    while _open_fds(p) and time.monotonic() < end:
        for fd in select.select(_open_fds(p), [], [], max(0.0, end - time.monotonic()))[0]:
            _read(p, fd)
    for fd in _open_fds(p):
        os.close(fd)
        p.fds[fd] = bytes(p.fds[fd])
    if p.pidfd is not None:
        os.close(p.pidfd)
    st = p.status
    rc = 1 if why else (-1 if st is None else 128 + os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st))
    out, err = bytes(p.fds[p.out_fd]), bytes(p.fds[p.err_fd])
    if p.warm is not None and _zy is not None and p.warm in _zy.died and (st is None or os.WIFSIGNALED(st)):
        err += (b"" if not err or err.endswith(b"\n") else b"\n") + (
            f"agent: the warm child (pid {p.warm}) that this probe was forked from {_zy.died[p.warm]} while it "
            "ran; the probe died with it\n").encode()
    if why:
        out += (b"" if not out or out.endswith(b"\n") else b"\n") + json.dumps(
            {"failed": True, "msg": f"node watchdog: {why}"}).encode() + b"\n"
    _send({"op": "done", "id": p.id, "rc": rc, "pgid": p.pid, "stdout": out.decode("latin-1"),
           "stderr": err.decode("latin-1"), "seconds": round(time.monotonic() - p.started, 3), "started": p.how})


def _warm_status(p: Probe):
    """:func:`_status` after a kill: a warm probe's end comes from its warm child, which reaps it at once; waits up
    to :data:`DRAIN_S` for that word (the child is dead: its group and strays were killed)."""
    end = time.monotonic() + DRAIN_S
    while True:
        st = _status(p)
        if st is not None or p.warm is None or _zy is None or time.monotonic() >= end:
            return st
        for doc in _zy.events():
            _send(doc)
        if _zy.fileno() is None:  # the warm child is gone: p is re-parented here
            time.sleep(0.01)
        else:
            select.select([_zy.fileno()], [], [], max(0.0, end - time.monotonic()))


def _terminate_all(probes: dict) -> float:
    """SIGTERM every running probe's group and strays at once, so that their graces (``finish``, one probe after
    another) run side by side: a stopping agent is done within one :data:`_watchdog.KILL_GRACE_S`, before the
    controller's SIGKILL, however many probes it runs. Returns the instant (``time.monotonic()``) the shared
    grace ends."""
    until = time.monotonic() + _watchdog.KILL_GRACE_S
    for p in probes.values():
        if p.status is None:
            _watchdog.signal_probe(p.pid, p.pid, signal.SIGTERM, _pids(probes) - {p.pid}, p.warm)
    return until


def _pids(probes: dict) -> set[int]:
    """The process ids of the running probes and of the warm child (left alone when another probe's strays are
    killed)."""
    return {q.pid for q in probes.values()} | _spared()


def _spared() -> set[int]:
    """The warm child's pid while it runs (never a probe's stray), else the empty set."""
    return {_zy.live_pid} if _zy is not None and _zy.live_pid is not None else set()


def _remove(folder: str) -> bool:
    try:
        os.chdir(os.path.dirname(folder) or "/")
    except OSError:
        pass
    _watchdog.remove_tree(folder)
    return not os.path.lexists(folder)


def _on_signal(signum, _frame) -> None:
    _signalled.append(signum)


def take_lock(identity: dict | None) -> tuple[_nodelock.NodeLock | None, dict]:
    """The node's lock for the run of ``identity`` (None: no lock) and what ``ready`` says of it. Raises
    ``_nodelock.Held``."""
    if not identity:
        return None, {}
    lock, took, note = _nodelock.acquire(identity, str(identity.get("lock_dir") or _nodelock.DEFAULT_DIR))
    said: dict = {"lock": lock.path if lock is not None else None}
    if took:
        said["took_over"] = took
    if note:
        said["lock_note"] = note
    return lock, said


def serve(folder: str, files: dict | None = None, identity: dict | None = None) -> int:
    """The agent's loop (see the module docstring) in ``folder``; returns the exit status (0 after ``exit``,
    1 when the controller went away, a signal came or another run holds the node). ``identity``: the run's,
    for the node's lock (``_nodelock``)."""
    for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(s, _on_signal)
    try:
        os.write(1, MAGIC)
        lock, said = take_lock(identity)
    except _nodelock.Held as held:
        try:
            _send({"op": "held", "holder": held.holder})
        except OSError:
            pass
        _remove(folder)
        return 1
    except OSError:  # stdout gone: nobody to serve
        _remove(folder)
        return 1
    try:
        return _serve(folder, files, lock, said)
    finally:
        if lock is not None:
            lock.release()


def _serve(folder: str, files: dict | None, lock: _nodelock.NodeLock | None, said: dict) -> int:
    """:func:`serve` once the node is this run's (``lock``; ``said``: what ``ready`` says of it)."""
    global _zy
    _watchdog.become_subreaper()  # a probe's process whose parent dies is re-parented here, and killed with it
    parent = os.getppid()
    probes: dict = {}
    pending: list = []  # (run request, its deadline): "module" torch probes waiting for the warm child's import
    frames = Frames()
    why = ""
    try:
        _send({"op": "ready", "dir": folder, "pid": os.getpid(), "swept": _watchdog.sweep_stale(), **said})
        _zy = _warm_child(folder)
        while not why:
            fds = [0] + [fd for p in probes.values() for fd in _open_fds(p)] + [
                p.pidfd for p in probes.values() if p.pidfd is not None] + (
                [_zy.fileno()] if _zy.fileno() is not None else [])
            now = time.monotonic()
            wait = min([POLL_S] + [max(0.0, p.end - now) for p in probes.values()])
            try:
                ready = set(select.select(fds, [], [], wait)[0])
            except InterruptedError:
                ready = set()
            for p in list(probes.values()):
                for fd in _open_fds(p):
                    if fd in ready:
                        _read(p, fd)
            for doc in _zy.events():
                _send(doc)
            if 0 in ready:
                data = os.read(0, 1 << 16)
                if not data:
                    why = "the controller's connection is gone (stdin closed)"
                    break
                for req in frames.feed(data):
                    if _request(req, folder, files, probes, pending, lock):
                        return 0
            _start_pending(probes, pending)
            for p in list(probes.values()):
                p.status = _status(p)
                if p.status is not None:
                    finish(probes.pop(p.id), keep=_pids(probes))
                elif time.monotonic() >= p.end:
                    finish(probes.pop(p.id), "the probe ran past its deadline; its process group was killed",
                           _pids(probes))
            if _signalled:
                why = f"received {signal.Signals(_signalled[0]).name}"
            elif os.getppid() != parent:
                why = "its parent (the SSH session) is gone"
    except (OSError, ValueError) as e:  # stdout gone (EPIPE), or a frame that is not one: nobody to serve
        why = why or f"{type(e).__name__}: {e}"
    if lock is not None:
        lock.stopping()
    until = _terminate_all(probes)
    for p in probes.values():
        try:
            finish(p, f"{why}; the probe's process group was killed", _pids(probes) - {p.pid}, until)
        except OSError:
            _watchdog.kill_group(p.pid, p.pid, keep=_pids(probes) - {p.pid}, until=until, parent=p.warm)
    for req, _end in pending:
        try:
            _refuse(req, f"{why}; the probe never started")
        except OSError:
            break
    _stop_warm()
    _remove(folder)
    return 1


def _warm_child(folder: str):
    """The agent's handle on its warm child (``_zygote.Zygote``), started now when the mode says so
    (``GPUACCEPT_WARM``: "on", or "auto" on a node that shows an NVIDIA device)."""
    import _zygote

    how = _zygote.mode()
    z = _zygote.Zygote(folder, how)
    if how == "on" or (how == "auto" and _zygote.node_has_gpu()):
        z.spawn()
    return z


def _stop_warm() -> None:
    """Stop the warm child (SIGKILL, reaped) and reap what it left re-parented here; idempotent."""
    if _zy is not None:
        _zy.stop()
        _watchdog._reap_orphans(-1)


def _request(req: dict, folder: str, files: dict | None, probes: dict, pending: list, lock) -> bool:
    """Act on one request of the controller (see the module docstring); True once the agent has said ``bye``."""
    op = req.get("op")
    if op == "run":
        if files is not None:
            files.update(req.get("texts") or {})
        unwritable = place(folder, files, req.get("files"))
        if unwritable:
            _refuse(req, f"cannot write the probe files into {folder}: {unwritable['why']}", unwritable=unwritable)
            return False
        end = time.monotonic() + float(req.get("deadline_s") or 300) + float(req.get("grace_s") or 0)
        if how_to_start(req) == "wait":
            if _zy.state == "idle":
                _zy.spawn()
            pending.append((req, end))
        else:
            p = start(req, end)
            probes[p.id] = p
    elif op == "kill" and req.get("id") in probes:
        p = probes.pop(req["id"])
        finish(p, str(req.get("why") or "killed at the controller's request"), _pids(probes))
    elif op == "kill" and any(r.get("id") == req.get("id") for r, _ in pending):
        pending[:] = [(r, e) for r, e in pending if r.get("id") != req.get("id")]
        said = str(req.get("why") or "killed at the controller's request")
        _refuse(req, f"{said}; it never started")
    elif op == "exit":
        if lock is not None:
            lock.stopping()
        until = _terminate_all(probes)
        for p in probes.values():
            finish(p, "the controller ended the run", _pids(probes) - {p.pid}, until)
        probes.clear()
        for r, _end in pending:
            _refuse(r, "the controller ended the run; the probe never started")
        pending.clear()
        _stop_warm()
        _send({"op": "bye", "removed": _remove(folder)})
        return True
    return False


def _start_pending(probes: dict, pending: list) -> None:
    """Start the waiting probes once the warm child is ready (warm) or gone (fresh); refuse those whose deadline
    passed while they waited."""
    if not pending:
        return
    now = time.monotonic()
    waiting = _zy is not None and _zy.state == "starting"
    keep = []
    for req, end in pending:
        if now >= end:
            _refuse(req, "the probe's deadline passed while it waited for the warm child's torch import; it never "
                         "started")
        elif waiting:
            keep.append((req, end))
        else:
            p = start(req, end)
            probes[p.id] = p
    pending[:] = keep


def _refuse(req: dict, why: str, **extra) -> None:
    """Answer run request ``req`` that never started with ``done``: rc 1 and the watchdog's failure line
    (``extra``: more keys of the frame, ``unwritable``)."""
    line = json.dumps({"failed": True, "msg": f"node watchdog: {why}"}) + "\n"
    _send({"op": "done", "id": req.get("id"), "rc": 1, "pgid": None, "stdout": line, "stderr": "", "seconds": 0.0,
           "started": None, **extra})


#: the names BOOT wrote (the agent's own files), written again with a probe's into a folder made again
_boot: list = []


def main(files: dict | None = None, identity: dict | None = None, written: list | None = None) -> int:
    """Serve in the working directory (the shipped folder); ``files`` (name -> text, as shipped): a probe's are
    written before it runs, and the folder is made again when it vanished under the agent (a /tmp cleaner);
    ``identity``: the run's, for the node's lock; ``written``: the names BOOT wrote already."""
    _boot[:] = list(written or ())
    return serve(os.getcwd(), files, identity)


def place(folder: str, files: dict | None, need: list | None) -> dict | None:
    """Before a probe runs: make ``folder`` again (``mkdir -m 700``, entered) when it is gone, then write each
    file of ``need`` (every file of ``files`` when None) that is not there (never written, or removed by a /tmp
    cleaner), and the agent's own where the folder was made again. Returns None, or what kept a file from being
    written: ``{"folder", "why" (strerror), "errno" (its name), "full" (ENOSPC or EDQUOT: the filesystem or the
    quota is full)}``; a file written in part is removed, so no probe reads it."""
    if not files:
        return None
    path = folder
    names = list(files) if need is None else list(need)
    try:
        if not os.path.isdir(folder):
            os.mkdir(folder, 0o700)
            os.chdir(folder)
            names += _boot
        for name in names:
            path = os.path.join(folder, name)
            if name in files and not os.path.exists(path):
                with open(path, "w", encoding="utf-8") as f:
                    f.write(files[name])
        path = folder
    except OSError as e:
        if path != folder:
            try:
                os.unlink(path)
            except OSError:
                pass
        return {"folder": folder, "why": e.strerror or str(e), "errno": errno.errorcode.get(e.errno or 0),
                "full": e.errno in (errno.ENOSPC, errno.EDQUOT)}
    return None
