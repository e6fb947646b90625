#!/usr/bin/env bash
# On a GPU machine (repo root; wheels carried as .whl): this session's GPU-touching changes, in one short call.
# 1. the main job, quick profile, on the local connection: pcie_link reads idle links at their maximum without a
#    load, the one-node all-reduce verdict lines, per-GPU failure lines; 2. the burn-in probe with a rank that
#    exits (a GPU lost mid-run) and one that hangs (test-only fault_rank): windows kept, the GPU named, the
#    probe stopping at the stall limit rather than its length. Reports under $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1
n=$(nvidia-smi -L | grep -c '^GPU')
printf 'all:\n  hosts:\n    h200-node:\n      ansible_connection: local\n      gpu_sku: h200-sxm-141gb\n      gpus_per_node: %s\n      nccl_env: {NCCL_NVLS_ENABLE: "0"}\n' "$n" > /tmp/inv.yml
t0=$(date +%s)
timeout 150 python3 -m pytest -c pytest.ini -p no:cacheprovider --profile quick --inventory /tmp/inv.yml --reports /tmp/rep-main -q 2>&1 | tail -n 3
echo "== main job (quick): $(( $(date +%s) - t0 )) s"
head -n 12 /tmp/rep-main/summary.md | cut -c1-300
python3 - <<'PY'
import glob, json
for f in glob.glob("/tmp/rep-main/probes/h200-node/pcie_link-*.json"):
    d = json.load(open(f))["doc"]; print("  pcie_link loaded", d.get("loaded"), "sampled_s", d.get("sampled_s"), [(g["gen"], g["width"]) for g in d["gpus"]])
r = json.load(open("/tmp/rep-main/results.json"))
for x in r["figures"]:
    if x["check"] in ("bf16_tflops", "hbm_read_bw_gbps", "allreduce_busbw_gbps"):
        print("  ", x["check"], "GPU", x.get("gpu"), x["value"], x.get("unit"), x.get("verdict"))
PY
cd gpuaccept/probes
for how in exit hang; do
  t0=$(date +%s)
  timeout 150 python3 burnin.py "{\"device\":\"cuda\",\"seconds\":60,\"stall_s\":20,\"fault_rank\":{\"rank\":1,\"after_s\":20,\"how\":\"$how\"}}" 2>/tmp/burnin-$how.err | tail -1 > "$OUT/burnin-$how.json"
  python3 -c "import json,sys; d=json.load(open('$OUT/burnin-$how.json')); print('  burnin fault $how:', 'stopped', d.get('stopped'), 'windows', len(d.get('windows') or []), 'wall_s', d.get('wall_s'), d.get('msg',''))"
  echo "  ($(( $(date +%s) - t0 )) s)"; tail -n 3 /tmp/burnin-$how.err | cut -c1-300
done
cd ../..; tar czf "$OUT/rep-main.tgz" -C /tmp rep-main
