#!/usr/bin/env bash
# On a GPU machine (repo root): probe readings, the main job, the noisy-neighbour run (a foreign matmul loop on
# the last GPU while health, memory and compute run), reports under $OUT. usage: bash benchmarks/device_verdicts.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
n=$(nvidia-smi -L | grep -c '^GPU'); last=$((n - 1))
outcomes() { python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/results.json"))
for c in d.get("tests") or d.get("cases") or []:
    print(f"  {c.get('outcome'):8} {c.get('nodeid') or c.get('name')}: {(c.get('message') or '')[:260]!r}")
PY
}
( cd gpuaccept/probes
  python3 gpu_inventory.py '{}' | tail -1 > "$OUT/gpu_inventory.json"
  python3 - "$OUT/gpu_inventory.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for g in d["gpus"]:
    print("GPU", g["index"], g["pci_bus_id"], "power", g.get("power_limit_w"), g.get("power_limits"), "app", g.get("application_clocks"),
          "ecc", (g.get("ecc") or {}).get("mode_current"), (g.get("ecc") or {}).get("mode_pending"), "mig", g.get("mig_mode"), "pending", g.get("pending_modes"))
PY
  python3 nccl_env.py '{}' | tail -1 > "$OUT/nccl_env.json"; head -c 600 "$OUT/nccl_env.json"; echo
  python3 p2p_bandwidth.py '{}' | tail -1 > "$OUT/p2p_bandwidth.json"; head -c 700 "$OUT/p2p_bandwidth.json"; echo
  python3 nvlink.py '{"sample_seconds": 2}' | tail -1 | head -c 400; echo
  python3 xid_events.py '{"sources": ["../../tests/data/kern-sxid-offbus.log"]}' | tail -1 | head -c 600; echo
  python3 rdma.py '{}' | tail -1 | head -c 400; echo )
t0=$(date +%s); python3 -m pytest -p no:cacheprovider --reports /tmp/rep-local -q 2>&1 | tail -n 12
echo "== local main job: $(( $(date +%s) - t0 )) s"; outcomes /tmp/rep-local
python3 -c "import json;[print('  ',f['check'],f.get('gpu'),f['value'],f['verdict']) for f in json.load(open('/tmp/rep-local/results.json'))['figures'] if f['check'] in ('bf16_tflops','fp8_tflops','hbm_read_bw_gbps','allreduce_busbw_gbps','allreduce_default_busbw_gbps','p2p_unidir_bw_gbps_worst_pair','power_limit_w')]"

CUDA_VISIBLE_DEVICES=$last python3 benchmarks/foreign_load.py & NOISY=$!
sleep 10
t0=$(date +%s); python3 -m pytest -p no:cacheprovider --profile quick --reports /tmp/rep-noisy -m "health or memory or compute" -q 2>&1 | tail -n 6
echo "== noisy neighbour (foreign pid $NOISY on GPU $last): $(( $(date +%s) - t0 )) s"; outcomes /tmp/rep-noisy
kill $NOISY; wait $NOISY 2>/dev/null; sleep 1; echo "noisy pid $NOISY: $(kill -0 $NOISY 2>/dev/null && echo still running || echo stopped)"
tar czf "$OUT/reports-verdicts.tgz" -C /tmp rep-local rep-noisy
