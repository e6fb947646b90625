#!/usr/bin/env python3
"""A foreign load for the provoked-failure runs: bf16 8192^3 matmuls on the first visible GPU until killed.

    CUDA_VISIBLE_DEVICES=1 python3 benchmarks/foreign_load.py &      # then kill it by its pid

Used by device_verdicts.sh, device_burnin.sh and noisy_neighbour.sh (the "noisy neighbour": another process
on a GPU while the suites measure it).
"""
import torch

a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
while True:
    for _ in range(50):
        a @ a
    torch.cuda.synchronize()
