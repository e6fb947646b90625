#!/usr/bin/env python3
"""GPU-to-GPU (peer-to-peer) copy bandwidth through torch, for every ordered GPU pair.

Run on the node as ``python3 p2p_bandwidth.py '<json args>'``. Args (all optional)::

    {"bytes": int,   # bytes per copy (default 1 GiB = 1073741824)
     "iters": int,   # copies per timed run (default 5)
     "reps": int}    # timed runs per figure; the median is reported (default 5)

Output::

    {"gpu_count": int, "bytes": int, "iters": int, "reps": int,
     "gpus": [{"index", "name", "pci_bus_id"}],
     "pairs": [{"a": i, "b": j, "peer_access": bool,     # torch.cuda.can_device_access_peer(a, b)
                "unidir_gbps": float | None,             # a -> b alone, GB/s (1e9 bytes/s)
                "bidir_gbps": float | None,              # a -> b and b -> a at once, total GB/s
                "error": str}]}                          # only when a figure could not be measured

The probe fails (rc 1) when torch has no CUDA device, and with fewer than two GPUs there are no pairs.
Measurement (see :func:`measure`): ``dst.copy_(src, non_blocking=True)`` from GPU a to GPU b, ``iters``
copies per timed run, timed with CUDA events on a's copy stream after a warm-up, median of ``reps`` runs;
the arithmetic is :func:`copy_gbps`. Standard library + torch. The NVLink link state and counters are the
``nvlink`` probe's (one probe, one measurement).
"""
from __future__ import annotations

import statistics
import time

from _conditions import Watch
from _probe import ProbeFailed, log, reject_unknown, run

ARG_KEYS = {"bytes", "iters", "reps", "attempt"}
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


def _median_ms(torch, fn, stream, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure(nbytes: int, iters: int = 5, reps: int = 5) -> list:
    """GPU-to-GPU copy bandwidth for every ordered pair (records as in the module docstring).

    unidir: a->b, copies on a's stream (torch copies on the source device's current stream and fences the
    destination's current stream, so each direction gets its own pair of streams). bidir: a->b and b->a at
    once on separate streams, total bytes / time; measured once per unordered pair and reported on both
    ordered records. torch enables peer access itself.
    """
    import torch

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
        return copy_gbps(nbytes, iters, _median_ms(torch, loop, sa, reps))

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
        return copy_gbps(nbytes, iters, _median_ms(torch, loop, s_ab[0], reps), directions=2)

    results = {}
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            rec = {"a": a, "b": b, "peer_access": bool(torch.cuda.can_device_access_peer(a, b))}
            try:
                rec["unidir_gbps"] = round(unidir(a, b), 2)
            except Exception as e:
                rec["unidir_gbps"] = None
                rec["error"] = f"{type(e).__name__}: {e}".splitlines()[0]
            results[(a, b)] = rec
    for a in range(n):
        for b in range(a + 1, n):
            try:
                v = round(bidir(a, b), 2)
            except Exception as e:
                v = None
                for key in ((a, b), (b, a)):
                    results[key].setdefault("error", f"bidir: {type(e).__name__}: {e}".splitlines()[0])
            results[(a, b)]["bidir_gbps"] = results[(b, a)]["bidir_gbps"] = v
    del src, dst
    torch.cuda.empty_cache()
    return [results[k] for k in sorted(results)]


def main(args: dict) -> dict:
    """Probe entry point: the document described in the module docstring."""
    reject_unknown(args, ARG_KEYS)  # no "device": GPU-to-GPU copies need CUDA
    try:
        from _gpu import describe_gpu, gpu_indices  # the torch probes' prologue; _gpu imports torch
    except ImportError as e:
        if e.name != "torch":
            raise
        raise ProbeFailed("torch not installed") from None

    nbytes, iters, reps = int(args.get("bytes") or DEFAULT_BYTES), int(args.get("iters") or 5), int(args.get("reps") or 5)
    gpus = [describe_gpu("cuda", i) for i in gpu_indices("cuda", "all")]
    n = len(gpus)
    t0 = time.time()
    with Watch([g["pci_bus_id"] for g in gpus]) as watch:
        pairs = measure(nbytes, iters, reps) if n > 1 else []
    log(f"p2p bandwidth: {len(pairs)} ordered pairs in {time.time() - t0:.1f}s")
    return {"gpu_count": n, "bytes": nbytes, "iters": iters, "reps": reps, "gpus": gpus, "pairs": pairs,
            "conditions": watch.result()}


if __name__ == "__main__":
    run(main)
