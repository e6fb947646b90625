"""NVML calls under a deadline: a driver that stops answering is a finding, not a hang.

An NVML call that blocks in the kernel (an ioctl into a wedged driver) cannot be cancelled: a thread stuck in it
never returns, and its process, in uninterruptible sleep (``D`` in ``/proc/<pid>/stat``), does not end on SIGKILL
until the call returns. So the NVML work of a probe runs in a forked child (:func:`run_nvml`) that names each
call on a pipe before it makes it (:class:`Traced`); the probe's own process only reads that pipe. When no call
has been named for ``call_deadline_s`` seconds (``init_deadline_s`` while ``nvmlInit`` runs), the last named call
is the one that did not return: the child is SIGKILLed, its state read from ``/proc/<pid>/stat`` before and after
(``D`` and still there after :data:`KILL_WAIT_S`: ``unkillable``), and the probe reports
``driver unresponsive on GPU i (call, seconds)`` in its document and exits. The stuck child holds none of the
probe's output (its stdout and stderr are ``/dev/null``; its logs come through the pipe), and it stays in the
probe's process group, where the node watchdog signals it once more (``_watchdog.kill_group``).

The child also times every call: :func:`latency_summary` gives the seconds per call (mean, max, the slowest call)
for each GPU, the figure the health layer judges at idle.

Sources: NVIDIA's guidance for a GPU or driver that stops responding is a reset, and a reboot where the driver
cannot reset it (NVIDIA Xid Catalog, Xid 79 "GPU has fallen off the bus" and Xid 119/120 "GSP RPC timeout":
immediate action RESTART_BM / RESET_GPU; nvidia-smi(1) ``-r``: "the GPU must not be in use"). The deadlines are
chosen: an NVML query answers in milliseconds on a healthy node (2.4 ms for two calls per GPU, measured on an
H200, _conditions.py), ``nvmlInit`` without persistence mode initialises every GPU (seconds per GPU).
Standard library only (pynvml imported in the child by the caller's body).
"""
from __future__ import annotations

import json
import os
import select
import signal
import sys
import time

#: seconds a single NVML call may take before the driver is called unresponsive (chosen: 1000x a healthy call)
CALL_DEADLINE_S = 10.0
#: seconds nvmlInit may take (chosen: without persistence mode it brings up every GPU of the node)
INIT_DEADLINE_S = 60.0
#: seconds to wait for the SIGKILLed child to be reaped before it is called unkillable (chosen)
KILL_WAIT_S = 2.0
_INIT_CALLS = ("nvmlInit", "nvmlInitWithFlags", "nvmlInit_v2")


def proc_state(pid: int) -> str | None:
    """The state letter of ``pid`` from ``/proc/<pid>/stat`` (R, S, D, Z, T...), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


class Traced:
    """A stand-in for the pynvml module: each ``nvml*`` function reports ``(gpu, name)`` to ``mark`` before it
    runs and its duration (s) to ``timed`` after; constants, structs and exception classes pass through.
    ``gpu``: the NVML index the caller works on now (None: a system call), set by the caller."""

    def __init__(self, nv, mark, timed=None):
        self._nv, self._mark, self._timed, self.gpu = nv, mark, timed, None

    def __getattr__(self, name):
        value = getattr(self._nv, name)
        if not (name.startswith("nvml") and callable(value) and not isinstance(value, type)):
            return value

        def call(*args, **kwargs):
            self._mark(self.gpu, name)
            t0 = time.monotonic()
            try:
                return value(*args, **kwargs)
            finally:
                if self._timed is not None:
                    self._timed(self.gpu, name, time.monotonic() - t0)
        return call


class Latency:
    """Seconds per NVML call, per GPU: ``add(gpu, name, seconds)``; :meth:`summary` for the document."""

    def __init__(self):
        self.by_gpu: dict = {}

    def add(self, gpu, name: str, seconds: float) -> None:
        s = self.by_gpu.setdefault(gpu, {"calls": 0, "total_s": 0.0, "max_s": 0.0, "slowest_call": None})
        s["calls"] += 1
        s["total_s"] += seconds
        if seconds >= s["max_s"]:
            s["max_s"], s["slowest_call"] = seconds, name

    def summary(self, gpu) -> dict | None:
        """``{"calls", "mean_s", "max_s", "slowest_call"}`` of GPU ``gpu``'s calls (s per call), or None."""
        s = self.by_gpu.get(gpu)
        if not s or not s["calls"]:
            return None
        return {"calls": s["calls"], "mean_s": round(s["total_s"] / s["calls"], 6), "max_s": round(s["max_s"], 6),
                "slowest_call": s["slowest_call"]}


def _child(body, w: int) -> None:
    """The forked child: run ``body(mark, timed, log)`` and send its result; never returns."""
    rc = 0
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(null, 2)
        out = os.fdopen(w, "w", buffering=1, encoding="utf-8")

        def send(kind: str, payload) -> None:
            out.write(kind + " " + json.dumps(payload, default=str) + "\n")

        def mark(gpu, name):
            send("C", [gpu, name])

        def log(text: str):
            send("L", str(text))

        try:
            send("R", body(mark, log))
        except BaseException as e:  # noqa: BLE001 - the parent turns it into the probe's failure
            send("F", f"{type(e).__name__}: {e}"[:500])
            rc = 1
        out.flush()
    finally:
        os._exit(rc)


def run_nvml(body, call_deadline_s: float = CALL_DEADLINE_S, init_deadline_s: float = INIT_DEADLINE_S,
             log=None) -> dict:
    """Run ``body(mark, log)`` in a forked child under per-call deadlines; return what happened.

    ``body``: called in the child with ``mark(gpu, call_name)`` (report a call before making it; :class:`Traced`
    does this for every pynvml function) and ``log(text)``; it returns a JSON-safe value. ``log``: where the
    child's log lines go here (default: stderr). Returns ``{"result": value}``; ``{"failed": "<Type>: <msg>"}``
    when ``body`` raised; or ``{"unresponsive": {"gpu", "call", "seconds", "deadline_s", "state", "state_after_kill",
    "unkillable"}}`` when a call did not return in time (``seconds``: how long it had been waiting when the child
    was killed; ``state``: its /proc state then, ``D`` for a call blocked in the driver). Raises nothing else;
    ``OSError`` from ``fork``/``pipe`` propagates."""
    log = log or (lambda text: (sys.stderr.write(text + "\n"), sys.stderr.flush()))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _child(body, w)
    os.close(w)
    buf, last, started = b"", (None, "(before the first call)"), time.monotonic()
    outcome = None
    try:
        while outcome is None:
            limit = init_deadline_s if last[1] in _INIT_CALLS or last[1].startswith("(") else call_deadline_s
            left = started + limit - time.monotonic()
            if left <= 0:
                outcome = {"unresponsive": _kill(pid, last, time.monotonic() - started, limit)}
                break
            ready, _, _ = select.select([r], [], [], left)
            if not ready:
                continue
            chunk = os.read(r, 1 << 16)
            if not chunk:  # the child is gone without a result
                outcome = {"failed": "the NVML child process ended without a result"}
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                kind, _, payload = line.decode("utf-8", "replace").partition(" ")
                value = json.loads(payload)
                if kind == "C":
                    last, started = (value[0], value[1]), time.monotonic()
                elif kind == "L":
                    log(value)
                elif kind == "R":
                    outcome = {"result": value}
                elif kind == "F":
                    outcome = {"failed": value}
    finally:
        os.close(r)
    if "unresponsive" not in outcome:
        os.waitpid(pid, 0)
    return outcome


def _kill(pid: int, last: tuple, waited: float, limit: float) -> dict:
    """SIGKILL the child stuck in call ``last`` = (gpu, name); its state before and after."""
    state = proc_state(pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    end = time.monotonic() + KILL_WAIT_S
    reaped = False
    while time.monotonic() < end:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done == pid:
            reaped = True
            break
        time.sleep(0.05)
    after = None if reaped else proc_state(pid)
    return {"gpu": last[0], "call": last[1], "seconds": round(waited, 3), "deadline_s": limit, "state": state,
            "state_after_kill": after, "unkillable": not reaped}


def describe(unresponsive: dict) -> str:
    """``driver unresponsive on GPU 3 (nvmlDeviceGetTemperature, 10.0 s)`` for an ``unresponsive`` record."""
    where = f"on GPU {unresponsive['gpu']} " if unresponsive.get("gpu") is not None else ""
    tail = ("; the probe process is in uninterruptible sleep (D) and SIGKILL did not end it"
            if unresponsive.get("unkillable") else "")
    return f"driver unresponsive {where}({unresponsive['call']}, {unresponsive['seconds']:g} s){tail}"
