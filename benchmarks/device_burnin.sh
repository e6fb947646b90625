#!/usr/bin/env bash
# On a GPU machine (repo root): a healthy burn-in of MIN minutes, then a burn-in of 3 minutes with a foreign
# matmul load started on the last GPU halfway through and stopped by its pid. Reports under $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
MIN=${1:-5}
export PYTHONUNBUFFERED=1
n=$(nvidia-smi -L | grep -c '^GPU'); last=$((n - 1))
t0=$(date +%s); python3 -m pytest -p no:cacheprovider --reports /tmp/rep-burnin -m burnin --burnin-minutes "$MIN" -q 2>&1 | tail -n 15
echo "== burn-in $MIN min: wall $(( $(date +%s) - t0 )) s"
ls -la /tmp/rep-burnin/burnin/
python3 - /tmp/rep-burnin <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/results.json"))
for f in d["figures"]:
    if f["check"].startswith(("burnin_", "sdc_")) and f["gpu"] is not None:
        print(f"  GPU {f['gpu']} {f['check']} = {f['value']} {f.get('unit','')} {f.get('verdict')}")
PY
( sleep 70; CUDA_VISIBLE_DEVICES=$last python3 benchmarks/foreign_load.py & echo $! > /tmp/noisy.pid; sleep 60; kill "$(cat /tmp/noisy.pid)"; echo "foreign load pid $(cat /tmp/noisy.pid) on GPU $last: 70 s .. 130 s, stopped" ) &
t0=$(date +%s); python3 -m pytest -p no:cacheprovider --reports /tmp/rep-burnin-sick -m burnin --burnin-minutes 2.5 -q 2>&1 | tail -n 25
echo "== burn-in 2.5 min with a foreign load: wall $(( $(date +%s) - t0 )) s"
wait
tar czf "$OUT/reports-burnin.tgz" -C /tmp rep-burnin rep-burnin-sick
