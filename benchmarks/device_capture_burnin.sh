#!/usr/bin/env bash
# Capture on a GPU machine (repo root): NVML/nvidia-smi readings and a short burn-in, healthy, for the replay
# tests in tests/data/. usage: bash benchmarks/device_capture_burnin.sh SECONDS
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
S=${1:-120}
export PYTHONUNBUFFERED=1
nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1
cd gpuaccept/probes
python3 gpu_inventory.py '{}' > "$OUT/gpu_inventory.json" 2>"$OUT/gpu_inventory.err"
python3 -c "import torch; [print(i, torch.cuda.get_device_properties(i).pci_bus_id) for i in range(torch.cuda.device_count())]"
t0=$(date +%s)
python3 burnin.py "{\"seconds\": $S, \"window_s\": 5, \"sdc_interval_s\": 20, \"dtypes\": [\"bf16\", \"fp8\"]}" \
   > "$OUT/burnin.json" 2> "$OUT/burnin.err"; echo "burnin rc=$? wall=$(( $(date +%s) - t0 )) s"
tail -n 4 "$OUT/burnin.err"
python3 - "$OUT/burnin.json" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
if d.get("failed"): print(d); sys.exit()
print({k: d[k] for k in ("world_size", "wall_s", "load_started_s", "interrupted", "nvml")}, "windows", len(d["windows"]),
      "rows", len(d["telemetry"]["rows"]), "errors", d["telemetry"]["errors"], "gpus", d["gpus"])
for w in d["windows"][:2] + d["windows"][-2:]: print(w)
print("sdc", [(r["round"], len(set(r["hashes"].values()))) for r in d["sdc"]])
print(d["telemetry"]["fields"]); print(d["telemetry"]["rows"][-2:])
PY
