#!/usr/bin/env python3
"""GPU-to-GPU (peer-to-peer) copy bandwidth through torch, for every ordered GPU pair.

Run on the node as ``python3 p2p_bandwidth.py '<json args>'``. Args (all optional)::

    {"bytes": int,   # bytes per copy (default 1 GiB = 1073741824)
     "iters": int,   # copies per timed run (default 5)
     "reps": int,    # timed runs per stop-rule window (default 2); the median run is reported
     "min_seconds": 0.05, "max_seconds": 0.4, "tolerance_pct": 0.5}   # stop rule per figure (_steady.py)

Output::

    {"gpu_count": int, "bytes": int, "iters": int, "reps": int,
     "steady": {"min_seconds", "max_seconds", "tolerance_pct"},
     "gpus": [{"index", "name", "pci_bus_id"}],
     "pairs": [{"a": i, "b": j, "peer_access": bool,     # torch.cuda.can_device_access_peer(a, b)
                "unidir_gbps": float | None,             # a -> b alone, GB/s (1e9 bytes/s)
                "bidir_gbps": float | None,              # a -> b and b -> a at once, total GB/s
                "unidir_measure", "bidir_measure": {"measured_s", "windows", "stop": "stable" | "settled" | "ceiling"},
                "error": str}]}                          # only when a figure could not be measured

The probe fails (rc 1) when torch has no CUDA device, and with fewer than two GPUs there are no pairs.
Measurement (see :func:`measure`): ``dst.copy_(src, non_blocking=True)`` from GPU a to GPU b, ``iters``
copies per timed run, timed with CUDA events on a's copy stream after a warm-up, median of the runs of
windows of ``reps`` runs until the figure is stable (_steady.py);
the arithmetic is :func:`copy_gbps`. Standard library + torch. The NVLink link state is the ``nvlink`` probe's.

Link error counters: with two GPUs or more, ``"link_counters": {"start", "end"}`` holds one reading of
the node's NVLink and InfiniBand error counters (_linkcounters.snapshot) right before the copies and one right
after them (a reading that fails is ``{"error": str}``, never the probe's failure); the suite judges their growth
(gpuaccept/judging/linkcounters.py). Both readings are taken while no other thread of the probe calls NVML (the
conditions watch is not running): the NVML calls run in a forked child (_deadline.run_nvml), and a fork while
another thread holds NVML's locks could leave the child waiting on them.
"""
from __future__ import annotations

import statistics
import time

from _conditions import Watch
from _linkcounters import snapshot
from _probe import ProbeFailed, log, reject_unknown, run
from _steady import STEADY_KEYS, TOLERANCE, describe, fields, run_windows, steady_args

ARG_KEYS = {"bytes", "iters", "reps", "attempt"} | STEADY_KEYS
DEFAULT_BYTES = 1 << 30


def copy_gbps(nbytes: int, copies: int, ms: float, directions: int = 1) -> float:
    """Bandwidth in GB/s (1e9 bytes per second) of ``copies`` copies of ``nbytes`` bytes in each of
    ``directions`` directions, taking ``ms`` milliseconds in all (CUDA event time).

    ``directions`` is 2 for a bidirectional run (a->b and b->a at once: twice the bytes in the same time).
    Raises ValueError when ``ms`` is not positive (a timer that did not run is no bandwidth).
    """
    if not ms > 0:
        raise ValueError(f"elapsed time must be positive, got {ms!r} ms")
    return directions * nbytes * copies / (ms / 1e3) / 1e9


def _timed_runs(torch, fn, stream, reps: int) -> tuple[list[float], float]:
    """One stop-rule window: ``reps`` timed runs of ``fn`` (CUDA events on ``stream``); (ms of each run, s)."""
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times, sum(times) / 1e3


def _steady_ms(torch, fn, stream, reps: int, steady: dict) -> tuple[float, dict]:
    """(median ms per run over every window, the stop-rule fields) of runs of ``fn`` (_steady.run_windows)."""
    got = run_windows(lambda: _timed_runs(torch, fn, stream, reps), steady["min_s"], steady["max_s"],
                      steady["tolerance"])
    return statistics.median(got["samples"]), fields(got)


def measure(nbytes: int, iters: int = 5, reps: int = 2, steady: dict | None = None) -> list:
    """GPU-to-GPU copy bandwidth for every ordered pair (records as in the module docstring).

    unidir: a->b, copies on a's stream (torch copies on the source device's current stream and fences the
    destination's current stream, so each direction gets its own pair of streams). bidir: a->b and b->a at
    once on separate streams, total bytes / time; measured once per unordered pair and reported on both
    ordered records. torch enables peer access itself. Each figure: windows of ``reps`` timed runs until the
    stop rule of _steady.py (``steady``: its min_s/max_s/tolerance; default 0.05/0.4 s, 0.5 %) says stop; the
    figure is from the median run; ``unidir_measure``/``bidir_measure`` carry measured_s, windows and stop.
    """
    import torch

    steady = steady or {"min_s": 0.05, "max_s": 0.4, "tolerance": TOLERANCE}

    n = torch.cuda.device_count()
    src = [torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{d}") for d in range(n)]
    dst = [torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{d}") for d in range(n)]
    streams = {(d, k): torch.cuda.Stream(device=d) for d in range(n) for k in ("a", "b")}

    def copy(a, b, sa, sb):
        with torch.cuda.stream(sa), torch.cuda.stream(sb):
            dst[b].copy_(src[a], non_blocking=True)

    def unidir(a, b):
        sa, sb = streams[(a, "a")], streams[(b, "a")]

        def loop():
            for _ in range(iters):
                copy(a, b, sa, sb)

        loop()  # warm-up (also enables peer access)
        torch.cuda.synchronize(a)
        torch.cuda.synchronize(b)
        ms, how = _steady_ms(torch, loop, sa, reps, steady)
        return copy_gbps(nbytes, iters, ms), how

    def bidir(a, b):
        s_ab = (streams[(a, "a")], streams[(b, "a")])  # a->b: copies on a's stream, fences b's
        s_ba = (streams[(b, "b")], streams[(a, "b")])  # b->a: copies on b's stream, fences a's

        def loop():
            start_evt = torch.cuda.Event()
            start_evt.record(s_ab[0])
            s_ba[0].wait_event(start_evt)  # b->a starts when the timed run starts
            for _ in range(iters):
                copy(a, b, *s_ab)
                copy(b, a, *s_ba)
            done_ba = torch.cuda.Event()
            done_ba.record(s_ba[0])
            s_ab[0].wait_event(done_ba)  # the end event on a's stream waits for both directions

        loop()
        torch.cuda.synchronize(a)
        torch.cuda.synchronize(b)
        ms, how = _steady_ms(torch, loop, s_ab[0], reps, steady)
        return copy_gbps(nbytes, iters, ms, directions=2), how

    results = {}
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            rec = {"a": a, "b": b, "peer_access": bool(torch.cuda.can_device_access_peer(a, b))}
            try:
                v, rec["unidir_measure"] = unidir(a, b)
                rec["unidir_gbps"] = round(v, 2)
            except Exception as e:
                rec["unidir_gbps"] = None
                rec["error"] = f"{type(e).__name__}: {e}".splitlines()[0]
            results[(a, b)] = rec
    for a in range(n):
        for b in range(a + 1, n):
            how = None
            try:
                v, how = bidir(a, b)
                v = round(v, 2)
            except Exception as e:
                v = None
                for key in ((a, b), (b, a)):
                    results[key].setdefault("error", f"bidir: {type(e).__name__}: {e}".splitlines()[0])
            results[(a, b)]["bidir_gbps"] = results[(b, a)]["bidir_gbps"] = v
            if how:
                results[(a, b)]["bidir_measure"] = results[(b, a)]["bidir_measure"] = how
    del src, dst
    torch.cuda.empty_cache()
    return [results[k] for k in sorted(results)]


def main(args: dict) -> dict:
    """Probe entry point: the document described in the module docstring."""
    reject_unknown(args, ARG_KEYS)  # no "device": GPU-to-GPU copies need CUDA
    try:
        from _gpu import describe_gpu, gpu_indices  # the torch probes' prologue; _gpu imports torch
    except ImportError as e:
        if not isinstance(e, ModuleNotFoundError) or e.name != "torch":  # a torch that fails as it loads: run()'s
            raise
        raise ProbeFailed("torch not installed", missing_module="torch") from None

    nbytes, iters, reps = int(args.get("bytes") or DEFAULT_BYTES), int(args.get("iters") or 5), int(args.get("reps") or 2)
    steady = steady_args(args, 0.05, 0.4)
    gpus = [describe_gpu("cuda", i) for i in gpu_indices("cuda", "all")]
    n = len(gpus)
    t0 = time.time()
    start = _link_counters() if n > 1 else None  # before the watch's NVML thread starts (module docstring)
    with Watch([g["pci_bus_id"] for g in gpus]) as watch:
        pairs = measure(nbytes, iters, reps, steady) if n > 1 else []
    counters = {"start": start, "end": _link_counters()} if n > 1 else None  # the watch has stopped
    log(f"p2p bandwidth: {len(pairs)} ordered pairs in {time.time() - t0:.1f}s")
    return {"gpu_count": n, "bytes": nbytes, "iters": iters, "reps": reps, "steady": describe(steady),
            "gpus": gpus, "pairs": pairs,
            "conditions": watch.result(), **({"link_counters": counters} if counters else {})}


def _link_counters() -> dict:
    """One snapshot of the node's link error counters (_linkcounters.py); a reading that fails is said
    (``{"error": "<Type>: <msg>"}``), never the bandwidth probe's failure."""
    try:
        return snapshot()
    except Exception as e:  # noqa: BLE001 - the counters are a condition of the measurement, not the measurement
        return {"error": f"{type(e).__name__}: {e}"[:300]}


if __name__ == "__main__":
    run(main)
