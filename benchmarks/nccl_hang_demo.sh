#!/usr/bin/env bash
# On a GPU machine: freeze one NCCL rank of `pytest -k nccl` mid-sweep and show that the probe's deadline
# fails the test naming the node, kills every rank and leaves nothing on the GPUs.
# usage: bash benchmarks/nccl_hang_demo.sh [probe timeout, s (default 70)]
set -u
to=${1:-70}
python3 -m pytest -k "nccl and not multinode" --probe-timeout "$to" --reports /tmp/r-hang -q > /tmp/hang.log 2>&1 &
runner=$!
sleep 18
w=$(pgrep -f "nccl_allreduce.py --worker" | tail -1)
echo "freezing rank process $w"; kill -STOP "$w"
t0=$(date +%s); wait "$runner"; echo "pytest exited rc=$? $(( $(date +%s) - t0 )) s after the freeze"
grep -E "hung|FAILED|failed|passed" /tmp/hang.log | head -5
echo "rank processes left: $(pgrep -f 'nccl_allreduce.py' | wc -l)"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
