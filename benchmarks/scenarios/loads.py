"""Foreign loads for the scenarios: started in a process group of their own and stopped by it.

Run as a program, one load until it is killed (the runner starts it so)::

    python -m benchmarks.scenarios.loads gpu-matmul   # bf16 8192^3 matmuls on the first visible GPU
    python -m benchmarks.scenarios.loads gpu-copy     # HBM copies, 4 GiB buffers
    python -m benchmarks.scenarios.loads gpu-idle     # a CUDA context held, no work
    python -m benchmarks.scenarios.loads gpu-hold 8   # 8 GiB of GPU memory held, no work
    python -m benchmarks.scenarios.loads host-copy 12 # host memory copied in 12 threads (64 MiB buffers)
    python -m benchmarks.scenarios.loads sleep        # a child `sleep` and a wait: no work (the runner's tests)

The GPU is chosen by CUDA_VISIBLE_DEVICES in its environment (:func:`start`). An armed GPU load
(``GPUACCEPT_LOAD_GO=<path>`` in its environment) imports torch, then waits for that file before it touches CUDA:
the runner starts it ahead and releases it at its time, so that the load is on the GPU within a second of its
trigger rather than after a torch import of several seconds. :class:`LoadSet` stops every load
it started, by its process group (SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`), also when the scenario
fails or the runner is interrupted: nothing it started is left running.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

#: seconds a stopped load's group gets to end after SIGTERM before SIGKILL (chosen: a CUDA context tears down in
#: well under a second on an H200; 5 s is ample)
STOP_GRACE_S = 5.0
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is left (a zombie not yet reaped by its parent counts as gone)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", encoding="ascii", errors="replace") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def stop_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """End the process group that ``proc`` leads (started with ``start_new_session``): SIGTERM, then SIGKILL
    after ``grace_s`` seconds; reaps ``proc``. A group already gone is no error."""
    pgid = proc.pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        end = time.monotonic() + grace_s
        while time.monotonic() < end:
            proc.poll()  # reap the leader: a zombie is gone
            if not group_alive(pgid):
                break
            time.sleep(0.05)
        if not group_alive(pgid):
            break
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass


def command(kind: str, threads: int = 12, gib: float = 8.0) -> list[str]:
    """The argv of a load of ``kind`` run from the repository root."""
    extra = {"host-copy": [str(threads)], "gpu-hold": [str(gib)]}.get(kind, [])
    return [sys.executable, "-m", "benchmarks.scenarios.loads", kind, *extra]


class LoadSet:
    """The loads of one scenario: :meth:`start` each, :meth:`stop_all` at the end (a context manager does it
    on any exit). ``started``: ``[(kind, pid, gpu)]`` for the scenario's notes."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []
        self.started: list[tuple[str, int, str]] = []

    def start(self, kind: str, gpu: str | None = None, threads: int = 12, gib: float = 8.0,
              log: str | None = None, go: str | None = None) -> subprocess.Popen:
        """Start a load of ``kind`` on ``gpu`` (an index as text; None: the process's default), in a session
        and process group of its own, its output to ``log`` (else discarded); ``go``: armed, its CUDA work waits
        for that file (:func:`release`). Returns its Popen."""
        env = dict(os.environ)
        if go is not None:
            env["GPUACCEPT_LOAD_GO"] = go
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        out = open(log, "ab") if log else subprocess.DEVNULL
        try:
            p = subprocess.Popen(command(kind, threads, gib), cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            if log:
                out.close()
        self.procs.append(p)
        self.started.append((kind, p.pid, "" if gpu is None else str(gpu)))
        return p

    def stop(self, p: subprocess.Popen) -> None:
        """Stop one load's process group."""
        stop_group(p)

    def stop_all(self) -> None:
        """Stop every load started here, by its process group."""
        for p in self.procs:
            stop_group(p)

    def __enter__(self) -> "LoadSet":
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()


def release(go: str) -> None:
    """Let the armed load waiting for file ``go`` start its CUDA work."""
    with open(go, "w", encoding="utf-8"):
        pass


# -- the loads themselves (run as a program) -------------------------------------------------------------------
def _host_copy(threads: int) -> None:
    import ctypes
    import threading

    def copy():
        n = 64 << 20
        src, dst = ctypes.create_string_buffer(n), ctypes.create_string_buffer(n)
        while True:
            ctypes.memmove(dst, src, n)  # releases the GIL: one CPU per thread
    for _ in range(threads):
        threading.Thread(target=copy, daemon=True).start()
    threading.Event().wait()


def _gpu(kind: str, gib: float) -> None:
    import torch
    go = os.environ.get("GPUACCEPT_LOAD_GO")
    while go and not os.path.exists(go):  # armed: torch imported, no CUDA context until released
        time.sleep(0.01)
    if kind == "gpu-idle":
        torch.zeros(1, device="cuda")
        while True:
            time.sleep(1)
    if kind == "gpu-hold":
        torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda")
        while True:
            time.sleep(1)
    if kind == "gpu-copy":
        a = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
        b = torch.empty_like(a)
        while True:
            for _ in range(20):
                b.copy_(a)
            torch.cuda.synchronize()
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while True:
        for _ in range(50):
            a @ a
        torch.cuda.synchronize()


def main(argv: list[str]) -> None:
    """Run the load named by ``argv[0]`` until killed (module docstring)."""
    kind = argv[0] if argv else "gpu-matmul"
    print(f"load {kind} pid {os.getpid()} CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}",
          flush=True)
    if kind == "host-copy":
        _host_copy(int(argv[1]) if len(argv) > 1 else 12)
    elif kind == "sleep":
        subprocess.Popen(["sleep", "1000"])
        while True:
            time.sleep(1)
    else:
        _gpu(kind, float(argv[1]) if len(argv) > 1 else 8.0)


if __name__ == "__main__":
    main(sys.argv[1:])
