#!/usr/bin/env bash
# On a one-GPU machine (repo root): issue 22's evidence. The healthy node (SKU file as shipped), a foreign
# matmul loop started 20 s into the run, a foreign HBM-copy loop started when the compute test starts, an
# idle foreign process holding a context, a failing figure's confirmation (a thresholds copy with raised
# floors), CUDA_VISIBLE_DEVICES='' on the node. JUnit outcome of every test of each; reports under $OUT.
# usage: bash benchmarks/device_v22.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
SEL="health or memory or compute"
outcomes() { python3 - "$1" <<'PY'
import glob, sys, xml.etree.ElementTree as ET
for f in sorted(glob.glob(sys.argv[1] + "/junit-*.xml")):
    for tc in ET.parse(f).getroot().iter("testcase"):
        out, msg = "PASS", ""
        for tag, word in (("failure", "FAIL"), ("error", "ERROR"), ("skipped", "SKIP")):
            e = tc.find(tag)
            if e is not None:
                out, msg = word, (e.get("message") or "")
        print(f"  {out:5} {tc.get('name'):34} {msg[:230]}")
lines = open(sys.argv[1] + "/summary.md").read().splitlines()
print("  summary:", " | ".join(l for l in lines if l.startswith(("**", "- **")))[:600])
PY
}
run() { local name=$1; shift; local t0=$(date +%s.%N)
  python3 -m pytest -p no:cacheprovider --reports /tmp/rep-$name "$@" > /tmp/log-$name.txt 2>&1; local rc=$?
  echo "== $name: rc $rc, $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"; tail -n 2 /tmp/log-$name.txt; outcomes /tmp/rep-$name; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,compute_mode --format=csv,noheader
run healthy -m "$SEL"
python3 - <<'PY'
import json
d = json.load(open("/tmp/rep-healthy/results.json"))
for f in d["figures"]:
    if f["check"] in ("bf16_tflops", "fp8_tflops", "hbm_read_bw_gbps", "hbm_copy_bw_gbps", "h2d_bw_gbps", "conditions", "node_shape"):
        print("  ", f["check"], f.get("gpu"), f["value"], f["verdict"], json.dumps(f.get("extra", {}).get("foreign", ""))[:120])
PY
# a foreign matmul loop started 20 s into the run
python3 -m pytest -p no:cacheprovider --reports /tmp/rep-matmul20 -m "$SEL" > /tmp/log-matmul20.txt 2>&1 & P=$!
sleep 20; python3 benchmarks/foreign_load.py & L=$!; echo "foreign matmul pid $L started at 20 s"
wait $P; echo "== matmul20: rc $?"; kill $L; wait $L 2>/dev/null; tail -n 2 /tmp/log-matmul20.txt; outcomes /tmp/rep-matmul20
# a foreign HBM-copy loop started when the compute test starts
python3 -m pytest -p no:cacheprovider --reports /tmp/rep-copy -m "$SEL" > /tmp/log-copy.txt 2>&1 & P=$!
until grep -q "test_tensor_tflops started" /tmp/log-copy.txt 2>/dev/null || ! kill -0 $P 2>/dev/null; do sleep 0.2; done
python3 benchmarks/foreign_load.py copy & L=$!; echo "foreign HBM copy pid $L started with test_tensor_tflops"
wait $P; echo "== copy: rc $?"; kill $L; wait $L 2>/dev/null; tail -n 2 /tmp/log-copy.txt; outcomes /tmp/rep-copy
# an idle foreign process holding a context
python3 benchmarks/foreign_load.py idle & L=$!; sleep 4; echo "idle foreign pid $L"
run idle -m "$SEL"; kill $L; wait $L 2>/dev/null
# a failing figure's confirmation: floors raised in a copy of the thresholds
mkdir -p /tmp/thr && cp thresholds/*.yaml /tmp/thr/ && sed -i 's/hbm_read_bw_gbps: {min: 4300/hbm_read_bw_gbps: {min: 6000/; s/bf16_tflops: {min: 600/bf16_tflops: {min: 900/' /tmp/thr/h200-sxm-141gb.yaml
run confirm --thresholds=/tmp/thr -k "test_hbm_bandwidth or test_tensor_tflops or gpu_inventory"
python3 - <<'PY'
import json
d = json.load(open("/tmp/rep-confirm/results.json"))
for f in d["figures"]:
    c = (f.get("extra") or {}).get("confirmation")
    if c:
        print("   confirmation:", f["check"], f["value"], "then", c.get("value"), "took", c.get("seconds"), "s; verdict", f["verdict"])
for t in d["tests"]:
    print("   test", t.get("name"), t.get("outcome"), t.get("duration_s"))
PY
CUDA_VISIBLE_DEVICES= run cvd -m "health or memory" -k "gpu_inventory or hbm"
tar czf "$OUT/reports.tgz" -C /tmp rep-healthy rep-matmul20 rep-copy rep-idle rep-confirm rep-cvd log-healthy.txt log-matmul20.txt log-copy.txt log-idle.txt log-confirm.txt log-cvd.txt
