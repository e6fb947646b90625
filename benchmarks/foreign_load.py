#!/usr/bin/env python3
"""A foreign load for the provoked-failure runs, on the first visible GPU until killed:

    CUDA_VISIBLE_DEVICES=1 python3 benchmarks/foreign_load.py &          # bf16 8192^3 matmuls
    python3 benchmarks/foreign_load.py copy &                            # HBM copies, 4 GiB buffers
    python3 benchmarks/foreign_load.py idle &                            # a context held, no work

then kill it by its pid. Used by device_verdicts.sh, device_burnin.sh, noisy_neighbour.sh and
device_v22.sh (the "noisy neighbour": another process on a GPU while the suites measure it).
"""
import sys
import time

import torch

kind = sys.argv[1] if len(sys.argv) > 1 else "matmul"
if kind == "idle":
    torch.zeros(1, device="cuda")
    while True:
        time.sleep(1)
elif kind == "copy":
    a = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    while True:
        for _ in range(20):
            b.copy_(a)
        torch.cuda.synchronize()
else:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while True:
        for _ in range(50):
            a @ a
        torch.cuda.synchronize()
