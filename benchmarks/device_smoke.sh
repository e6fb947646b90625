#!/usr/bin/env bash
# Run every node-side probe standalone on a GPU machine, then the main job; collect outputs under $OUT.
# usage (device machine, repo root): bash benchmarks/device_smoke.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-}:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())"
for spec in "gpu_inventory {}" "pcie_link {}" "launch_overhead {}" "hbm_bandwidth {}" "matmul_tflops {}" \
            "pcie_bandwidth {}" 'nvlink {"sample_seconds":1}' 'p2p_bandwidth {}' 'xid_events {}' 'nccl_allreduce {}'; do
  p=${spec%% *}; a=${spec#* }
  s=$(date +%s%N)
  (cd gpuaccept/probes && timeout 300 python3 "$p.py" "$a" > /tmp/p.out 2>> "$OUT/probes.err"); rc=$?
  e=$(date +%s%N); ms=$(( (e - s) / 1000000 ))
  printf '{"probe":"%s","rc":%d,"ms":%d,"doc":%s}\n' "$p" $rc $ms "$(tail -n1 /tmp/p.out || echo null)" >> "$OUT/probes.jsonl"
  echo "== $p rc=$rc ${ms} ms: $(tail -n1 /tmp/p.out | head -c 400)"
done
