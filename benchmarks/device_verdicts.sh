#!/usr/bin/env bash
# On a GPU machine (repo root): the main job locally and over SSH, the noisy-neighbour run (a foreign matmul
# loop on the last GPU while health, memory and compute run), and the suites with CUDA_DEVICE_ORDER=FASTEST_FIRST.
# Reports under $OUT. usage: bash benchmarks/device_verdicts.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
n=$(nvidia-smi -L | grep -c '^GPU'); last=$((n - 1))
summary() { python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/results.json"))
for c in d.get("cases", d.get("tests", [])):
    print(f"  {c.get('outcome'):8} {c.get('nodeid', c.get('name'))}: {(c.get('message') or '')[:300]!r}")
PY
}
t0=$(date +%s); python3 -m pytest -p no:cacheprovider --reports /tmp/rep-local -q 2>&1 | tail -n 15
echo "== local main job: $(( $(date +%s) - t0 )) s"; summary /tmp/rep-local

# noisy neighbour: a matmul loop from another process on the last GPU
cat > /tmp/noisy.py <<'PY'
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t = time.time()
while time.time() - t < 600:
    for _ in range(50):
        a @ a
    torch.cuda.synchronize()
PY
CUDA_VISIBLE_DEVICES=$last python3 /tmp/noisy.py & NOISY=$!
sleep 8
t0=$(date +%s); python3 -m pytest -p no:cacheprovider --reports /tmp/rep-noisy -m "health or memory or compute" -q 2>&1 | tail -n 25
echo "== noisy neighbour run (foreign pid $NOISY on GPU $last): $(( $(date +%s) - t0 )) s"; summary /tmp/rep-noisy
kill $NOISY; wait $NOISY 2>/dev/null; echo "noisy pid $NOISY stopped: $(kill -0 $NOISY 2>&1 || echo gone)"

t0=$(date +%s); CUDA_DEVICE_ORDER=FASTEST_FIRST python3 -m pytest -p no:cacheprovider --reports /tmp/rep-order -m "memory or compute" -q 2>&1 | tail -n 5
echo "== CUDA_DEVICE_ORDER=FASTEST_FIRST: $(( $(date +%s) - t0 )) s"
python3 - <<'PY'
import json
d = json.load(open("/tmp/rep-order/results.json"))
for f in d["figures"]:
    if f["check"] in ("bf16_tflops", "hbm_read_bw_gbps"):
        print("  ", f["check"], "GPU", f["gpu"], f["pci_bus_id"], f["value"])
PY
tar czf "$OUT/reports-verdicts.tgz" -C /tmp rep-local rep-noisy rep-order
