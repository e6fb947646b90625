#!/usr/bin/env python3
"""fp8 8192^3 back to back (the matmul probe's way) against mamf-finder's pattern, on one GPU, in one window.

    python benchmarks/matmul_duty.py [--rounds 3] [--seconds 3] [--warmup 20]

The product: ``torch._scaled_mm(A, B, scale, scale, out=C)`` with e4m3 operands and e4m3 output, mamf-finder's
call (stas00/ml-engineering compute/accelerator/benchmarks/mamf-finder.py, ``benchmark_mm``). After a warm-up of
back-to-back products (mamf-finder warms up for 30 s), three segments alternate, each ``--seconds`` long:

  - back to back: batches of 20 products between two CUDA events, as gpuaccept's matmul probe times them;
  - mamf-finder's pattern: before each product ``l2.zero_()`` (256 MiB) and ``C.copy_(C_rand)``, each product
    alone between two events;
  - each product alone between two events, nothing between products.

Each prints the median and best per-product TFLOP/s (2*m*n*k per product) and the mean SM clock (MHz) and power
(W) that NVML read at 20 Hz during it. Under a power cap the memory work between mamf-finder's products lets the
clock sit higher while a product runs: the difference between the first two rows is that rest, not the kernel.
Needs a CUDA GPU with fp8 (sm_89 or later), torch >= 2.5 and nvidia-ml-py.
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time

M = N = K = 8192
#: mamf-finder's cache flush: 256 MiB of int32 zeroed before each product (its l2_cache_size_in_mbs)
FLUSH_BYTES = 256 * 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=20.0)
    a = ap.parse_args()
    import pynvml
    import torch

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    samples: list[tuple[float, int, float]] = []

    def sample() -> None:
        while True:
            samples.append((time.time(), pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                            pynvml.nvmlDeviceGetPowerUsage(handle) / 1000))
            time.sleep(0.05)

    threading.Thread(target=sample, daemon=True).start()
    dev = torch.device("cuda", 0)
    e4 = torch.float8_e4m3fn
    A = torch.randn(M, K, device=dev).to(e4)
    B = torch.randn(N, K, device=dev).to(e4).t()
    scale = torch.tensor([1.0], device=dev)
    C = torch.empty(M, N, device=dev, dtype=e4)
    C_rand = torch.randn(M, N, device=dev).to(e4)
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int, device=dev)
    flop = 2 * M * N * K

    def product() -> None:
        torch._scaled_mm(A, B, scale, scale, out=C)

    def back_to_back(seconds: float) -> list[float]:
        per, t0 = [], time.time()
        while time.time() - t0 < seconds:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(20):
                product()
            e1.record()
            e1.synchronize()
            per.append(e0.elapsed_time(e1) / 1e3 / 20)
        return per

    def each_alone(seconds: float, rest: bool) -> list[float]:
        per, t0 = [], time.time()
        while time.time() - t0 < seconds:
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(100)]
            for e0, e1 in events:
                if rest:
                    flush.zero_()
                    C.copy_(C_rand)
                e0.record()
                product()
                e1.record()
            torch.cuda.synchronize()
            per += [e0.elapsed_time(e1) / 1e3 for e0, e1 in events]
        return per

    def segment(name: str, run) -> None:
        t0 = time.time()
        per = run(a.seconds)
        t1 = time.time()
        clocks = [c for t, c, _ in samples if t0 <= t <= t1]
        watts = [w for t, _, w in samples if t0 <= t <= t1]
        print(f"{name:36s} {flop / statistics.median(per) / 1e12:7.1f} TFLOP/s median {flop / min(per) / 1e12:7.1f} best"
              f"  SM {statistics.mean(clocks):5.0f} MHz  {statistics.mean(watts):4.0f} W  ({len(per)} products)",
              flush=True)

    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, fp8 e4m3 {M}x{N}x{K}, e4m3 out")
    t0 = time.time()
    while time.time() - t0 < a.warmup:
        product()
    torch.cuda.synchronize()
    for _ in range(a.rounds):
        segment("back to back (gpuaccept)", back_to_back)
        segment("flush + copy before each (mamf-finder)", lambda s: each_alone(s, True))
        segment("each alone, nothing between", lambda s: each_alone(s, False))


if __name__ == "__main__":
    main()
