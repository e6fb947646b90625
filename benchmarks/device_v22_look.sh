#!/usr/bin/env bash
# On a one-GPU machine (repo root): what NVML shows of other processes while a probe holds the GPU (pids,
# names, per-process utilization), the node's gpu_inventory document, and the suites as they stand.
# usage: bash benchmarks/device_v22_look.sh   (reports under $OUT)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1; nvidia-smi topo -m 2>&1 | head -5
(cd gpuaccept/probes && python3 gpu_inventory.py '{}' | tail -1 > "$OUT/gpu_inventory.json")
python3 - "$OUT/gpu_inventory.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for g in d["gpus"]:
    print("GPU", g["index"], g.get("pci_bus_id"), "fabric", g.get("fabric"), "nvlink", g.get("nvlink_links"),
          "mode", g.get("compute_mode"), "procs", g.get("compute_processes"))
print("cuda_driver_version", d.get("cuda_driver_version"))
PY
python3 benchmarks/foreign_load.py & LOAD=$!
python3 -c "import torch,time; torch.zeros(1,device='cuda'); time.sleep(40)" & IDLE=$!
sleep 8
python3 - $LOAD $IDLE <<'PY'
import os, sys, time, pynvml as nv, torch
nv.nvmlInit(); h = nv.nvmlDeviceGetHandleByIndex(0)
x = torch.zeros(1, device="cuda")
print("own pid", os.getpid(), "load", sys.argv[1], "idle", sys.argv[2])
print("NSpid", [l for l in open("/proc/self/status") if l.startswith("NSpid")])
for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
    print("proc", p.pid, getattr(p, "usedGpuMemory", None), open(f"/proc/{p.pid}/comm").read().strip() if os.path.exists(f"/proc/{p.pid}/comm") else "?")
t = time.time()
for i in range(3):
    try:
        s = nv.nvmlDeviceGetProcessUtilization(h, int((time.time() - 2) * 1e6))
        print("util", [(u.pid, u.smUtil, u.memUtil, u.timeStamp) for u in s])
    except Exception as e:
        print("util error", type(e).__name__, e)
    time.sleep(0.5)
print("sampling cost s", round((time.time() - t - 1.5) / 3, 4))
try:
    print("utilization", nv.nvmlDeviceGetUtilizationRates(h).gpu)
except Exception as e:
    print("urates err", e)
PY
kill $LOAD $IDLE; wait 2>/dev/null
t0=$(date +%s); python3 -m pytest -p no:cacheprovider --reports /tmp/rep-before -m "health or memory or compute" -q 2>&1 | tail -n 25
echo "== before: $(( $(date +%s) - t0 )) s"
tar czf "$OUT/rep-before.tgz" -C /tmp rep-before
