"""Node-side agent: one Python per host and run, running every probe the controller asks for.

The controller (gpuaccept/runner/agent.py) starts it once per host with one command, in a fresh folder
(``$TMPDIR/gpuaccept.<12 hex>``, ``mkdir -m 700``), as ``python3 -c BOOT``: BOOT reads the probe files from
stdin (one frame, below), writes them into the folder, imports this file and calls :func:`main`. The shell of
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
     "env": {"NAME": "value"}, "exec": false}
    {"op": "kill", "id": 1, "why": "the controller's limit of 300 s passed"}
    {"op": "exit"}

Agent to controller::

    {"op": "ready", "dir": "/tmp/gpuaccept.3f9c2a61d0b4", "pid": 4242, "swept": [...],
     "lock": "/tmp/gpuaccept-node-lock/<key>.4242.held", "took_over": [{...}], "lock_note": "..."}
    {"op": "held", "holder": {"run_id": "...", "controller": "...", "since": "...", "pid": 4100}}  # then exits
    {"op": "started", "id": 1, "pgid": 4250}
    {"op": "progress", "id": 1, "line": "GPUACCEPT-PROGRESS {...}"}      # each progress line, as written
    {"op": "done", "id": 1, "rc": 0, "stdout": "...", "stderr": "...", "pgid": 4250, "seconds": 0.41}
    {"op": "bye", "removed": true}

Each probe runs under the node-side watchdog's rules (``_watchdog.py``): forked into a process group of its
own (``runpy`` in the forked child, so no interpreter start; ``"exec": true`` execs ``python PROBE.py ARGS``
for a probe found by its command line), its stdout and stderr on pipes the agent reads, killed (SIGTERM,
:data:`_watchdog.KILL_GRACE_S`, SIGKILL) past ``deadline_s + grace_s``, on a ``kill`` request, and whatever it
left running when it exits; the kill reaches its processes outside its group as well (``_watchdog.strays``:
the agent is their child subreaper, so fio's setsid() job processes are found even once fio is gone). A
killed probe's result is rc 1 with the watchdog's line ``{"failed": true, "msg": "node watchdog: ..."}``
after what it printed.

A folder removed under the agent (a /tmp cleaner) is written again before the next probe starts, from the
files BOOT read. The agent kills every probe's group, removes its folder and exits when its stdin reaches EOF (the SSH session
or the controller is gone), when its parent changes (the sshd session died), on SIGHUP, SIGTERM or SIGINT, and
on ``exit`` (then it answers ``bye`` first). Standard library only; Linux for the process-group scan.

One run per node: given the run's identity (BOOT's argument, JSON ``{"key", "run_id", "controller"[,
"lock_dir"]}``), the agent takes the node's lock (``_nodelock.py``) before its ``ready``, holds it for its
life and releases it once its probes are dead; a node held by a live agent of another run is answered with
``held`` (no probe started, no folder swept) and the agent exits. ``ready`` names the stale holders it took
over (``took_over``) or why it has no lock (``lock_note``: a lock folder it cannot write). Without an identity
(an agent started by hand, a test) no lock is taken.
"""
from __future__ import annotations

import json
import os
import select
import shutil
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
    """One running probe: its request id, process (and group) id, pipes, what it wrote, its deadline."""

    def __init__(self, rid, pid: int, out_fd: int, err_fd: int, end: float):
        self.id, self.pid, self.end = rid, pid, end
        self.fds = {out_fd: bytearray(), err_fd: bytearray()}
        self.out_fd, self.err_fd = out_fd, err_fd
        self.line = bytearray()  # stderr since its last newline (progress lines)
        self.started = time.monotonic()
        self.pidfd = _watchdog._pidfd(pid)
        self.status = None
        self.why = ""


def _exit_code(code) -> int:
    """A process exit status from ``sys.exit``'s argument, as Python's own exit makes it."""
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    try:
        sys.stderr.write(f"{code}\n")
    except Exception:  # noqa: BLE001
        pass
    return 1


def _child(argv: list[str], env: dict, exec_probe: bool, gate: tuple[int, int], out_w: int, err_w: int) -> None:
    """In the forked child: become the probe (``_watchdog.become_probe``) with the pipes as stdout/stderr, run; never returns."""
    _watchdog.become_probe("agent", argv, gate[0], gate[1], std=(out_w, err_w), env=env)
    if exec_probe:
        _watchdog.exec_python("agent", argv)
    code = 1
    try:
        code = _exit_code(_watchdog._run_probe(argv))
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


def start(req: dict) -> Probe:
    """Fork the probe of a ``run`` request into its own process group; announce the group (``started``)."""
    argv = [str(a) for a in req["argv"]]
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    gate_r, gate_w = os.pipe()
    _watchdog._freeze_gc()
    pid = os.fork()
    if pid == 0:
        _child(argv, dict(req.get("env") or {}), bool(req.get("exec")), (gate_r, gate_w), out_w, err_w)
    for fd in (gate_r, out_w, err_w):
        os.close(fd)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child did it first
    _watchdog.mark_used()
    end = time.monotonic() + float(req.get("deadline_s") or 300) + float(req.get("grace_s") or 0)
    p = Probe(req.get("id"), pid, out_r, err_r, end)
    _send({"op": "started", "id": p.id, "pgid": pid})
    os.write(gate_w, b"x")
    os.close(gate_w)
    return p


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
    if why or p.status is None:
        _watchdog.kill_group(p.pid, p.pid, keep=keep, until=until)
        p.status = p.status if p.status is not None else _watchdog._reap(p.pid)
    elif _watchdog.group_alive(p.pid) or _watchdog.strays(p.pid, keep):  # it left something running
        _watchdog.kill_group(p.pid, p.pid, keep=keep)
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
    out = bytes(p.fds[p.out_fd])
    if why:
        out += (b"" if not out or out.endswith(b"\n") else b"\n") + json.dumps(
            {"failed": True, "msg": f"node watchdog: {why}"}).encode() + b"\n"
    _send({"op": "done", "id": p.id, "rc": rc, "pgid": p.pid, "stdout": out.decode("latin-1"),
           "stderr": bytes(p.fds[p.err_fd]).decode("latin-1"), "seconds": round(time.monotonic() - p.started, 3)})


def _terminate_all(probes: dict) -> float:
    """SIGTERM every running probe's group and strays at once, so that their graces (``finish``, one probe after
    another) run side by side: a stopping agent is done within one :data:`_watchdog.KILL_GRACE_S`, before the
    controller's SIGKILL, however many probes it runs. Returns the instant (``time.monotonic()``) the shared
    grace ends."""
    until = time.monotonic() + _watchdog.KILL_GRACE_S
    for p in probes.values():
        if p.status is None:
            _watchdog.signal_probe(p.pid, p.pid, signal.SIGTERM, _pids(probes) - {p.pid})
    return until


def _pids(probes: dict) -> set[int]:
    """The process ids of the running probes (left alone when another probe's strays are killed)."""
    return {q.pid for q in probes.values()}


def _remove(folder: str) -> bool:
    try:
        os.chdir(os.path.dirname(folder) or "/")
    except OSError:
        pass
    shutil.rmtree(folder, ignore_errors=True)
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
    _watchdog.become_subreaper()  # a probe's process whose parent dies is re-parented here, and killed with it
    parent = os.getppid()
    probes: dict = {}
    frames = Frames()
    why = ""
    try:
        _send({"op": "ready", "dir": folder, "pid": os.getpid(), "swept": _watchdog.sweep_stale(), **said})
        while not why:
            fds = [0] + [fd for p in probes.values() for fd in _open_fds(p)] + [
                p.pidfd for p in probes.values() if p.pidfd is not None]
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
            if 0 in ready:
                data = os.read(0, 1 << 16)
                if not data:
                    why = "the controller's connection is gone (stdin closed)"
                    break
                for req in frames.feed(data):
                    op = req.get("op")
                    if op == "run":
                        restore(folder, files)
                        p = start(req)
                        probes[p.id] = p
                    elif op == "kill" and req.get("id") in probes:
                        p = probes.pop(req["id"])
                        finish(p, str(req.get("why") or "killed at the controller's request"), _pids(probes))
                    elif op == "exit":
                        if lock is not None:
                            lock.stopping()
                        until = _terminate_all(probes)
                        for p in probes.values():
                            finish(p, "the controller ended the run", _pids(probes) - {p.pid}, until)
                        probes.clear()
                        _send({"op": "bye", "removed": _remove(folder)})
                        return 0
            for p in list(probes.values()):
                p.status = _watchdog._reap(p.pid)
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
            _watchdog.kill_group(p.pid, p.pid, keep=_pids(probes) - {p.pid}, until=until)
    _remove(folder)
    return 1


def main(files: dict | None = None, identity: dict | None = None) -> int:
    """Serve in the working directory (the shipped folder); ``files`` (name -> text, as shipped) write it again
    when it vanished under the agent (a /tmp cleaner); ``identity``: the run's, for the node's lock."""
    return serve(os.getcwd(), files, identity)


def restore(folder: str, files: dict | None) -> None:
    """Make ``folder`` again (``mkdir -m 700``) with ``files`` when it is gone, and enter it (best effort)."""
    if not files or os.path.isdir(folder):
        return
    try:
        os.mkdir(folder, 0o700)
        for name, text in files.items():
            with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
                f.write(text)
        os.chdir(folder)
    except OSError:
        pass
