"""Kernel launch overhead per GPU: a one-element in-place add launched back to back.

Args (JSON object, every key optional)::

    {"device": "cuda" | "cpu", "iters": 10000, "gpus": [0, 1] | "all"}

Output::

    {"device", "iters", "gpus": [{"index", "name", "pci_bus_id", "launch_us_wall", "launch_us_events"}]}

``launch_us_wall``: wall-clock time of ``iters`` launches plus one final synchronize, divided by
``iters`` -- what a host loop of tiny ops pays per op (torch dispatch + cudaLaunchKernel).
``launch_us_events``: CUDA-event time from before the first launch to after the last, divided by
``iters`` -- the spacing of the kernels on the GPU, which for kernels this small is set by the host's
launch rate too (on cpu both are perf_counter). GPUs are measured one at a time, not concurrently:
this is a host-side figure, and threads launching together would measure contention for the GIL.
After 1000 warm-up launches; the tensor's final value is checked (every launch really ran).
"""
from __future__ import annotations

import time

import torch

from _conditions import Watch
from _gpu import bus_ids, describe_gpu, gpu_indices, probe_device
from _probe import ProbeFailed, log, run

ARG_KEYS = {"device", "iters", "gpus", "attempt"}
WARMUP = 1000


def per_launch_us(seconds: float, iters: int) -> float:
    """Microseconds per launch."""
    return seconds / iters * 1e6


def measure(dev: torch.device, iters: int) -> dict:
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    x = torch.zeros(1, device=dev, dtype=torch.float32)
    for _ in range(WARMUP):
        x.add_(1)
    sync()
    start = torch.cuda.Event(enable_timing=True) if cuda else None
    end = torch.cuda.Event(enable_timing=True) if cuda else None
    t0 = time.perf_counter()
    if cuda:
        start.record()
    for _ in range(iters):
        x.add_(1)
    if cuda:
        end.record()
    sync()
    wall = time.perf_counter() - t0
    events = start.elapsed_time(end) / 1e3 if cuda else wall
    if x.item() != WARMUP + iters:  # exact in fp32 below 2**24
        raise ProbeFailed(f"expected {WARMUP + iters} after the launches, tensor holds {x.item()}")
    return {"launch_us_wall": round(per_launch_us(wall, iters), 3),
            "launch_us_events": round(per_launch_us(events, iters), 3)}


def main(args: dict) -> dict:
    device = probe_device(args, ARG_KEYS)
    iters = int(args.get("iters", 10000))
    if not 1 <= iters <= 10_000_000:
        raise ProbeFailed(f"iters must be between 1 and 10000000, got {iters}")
    gpus = []
    indices = gpu_indices(device, args.get("gpus"))
    watch = Watch(bus_ids(device, indices)).start()
    for i in indices:
        if device == "cuda":
            torch.cuda.set_device(i)
        info = describe_gpu(device, i)
        info.update(measure(torch.device("cuda", i) if device == "cuda" else torch.device("cpu"), iters))
        log(f"launch_overhead: {info['name']} {info['index']}: {info['launch_us_wall']} us/launch (wall)")
        gpus.append(info)
    watch.stop()
    return {"device": device, "iters": iters, "gpus": gpus, "conditions": watch.result()}


if __name__ == "__main__":
    run(main)
