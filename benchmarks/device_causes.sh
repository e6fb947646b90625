#!/usr/bin/env bash
# Cause before action (issue 38) on a GPU machine, four scenarios, each judged from its own report folder:
#   healthy    the node alone: every judged test PASSED, no host action
#   host-load  a host process copying memory in 12 threads during -m memory: test_pcie_bandwidth ERROR
#              "disturbed: host busy: pid <load> ..." (figures kept), action rerun [contention], never drain-rma
#   two-runs   a second run started 6 s after the first: its tests ERROR "held by gpuaccept run <first> ...",
#              action rerun [contention]; the first run's figures undisturbed (its tests PASSED)
#   no-pynvml  the node's Python without nvidia-ml-py and torch, gpu_sku declared: ERROR (not FAIL), action
#              fix-config [configuration] naming nvidia-ml-py, never drain-rma
# Prints, per scenario, each test's JUnit outcome and the host's action and cause; reports kept under $OUT.
# usage (GPU machine, repo root): bash benchmarks/device_causes.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
n=$(nvidia-smi -L | grep -c '^GPU')
INV=/tmp/causes.ini
printf 'localhost ansible_connection=local gpu_sku=h200-sxm-141gb gpus_per_node=%d\n' "$n" > "$INV"
run() {  # run NAME ARGS...: one gpuaccept run, its reports in /tmp/rep-NAME
    local name=$1; shift
    python3 -m pytest -p no:cacheprovider --profile quick --history none --reports "/tmp/rep-$name" "$@" \
        > "/tmp/rep-$name.log" 2>&1
}

run healthy --inventory "$INV" -m "health or memory or compute"

python3 - <<'PY' &
import threading, torch
src = torch.empty(1 << 28, dtype=torch.uint8); dst = torch.empty_like(src)  # 256 MiB each, host memory
def copy():
    while True:
        dst.copy_(src)
for _ in range(12):
    threading.Thread(target=copy, daemon=True).start()
threading.Event().wait()
PY
load=$!
sleep 3
run host-load --inventory "$INV" -m memory
kill "$load"; wait "$load" 2>/dev/null

run first --inventory "$INV" -m "memory or compute" &
first=$!
sleep 6
run second --inventory "$INV" -m "memory or compute"
wait "$first"

python3 -m venv --without-pip /tmp/bare-python
printf 'localhost ansible_connection=local ansible_python_interpreter=/tmp/bare-python/bin/python3 gpu_sku=h200-sxm-141gb gpus_per_node=%d\n' "$n" > /tmp/bare.ini
run no-pynvml --inventory /tmp/bare.ini -m "health or memory"

python3 - <<'PY'
import json
for name in ("healthy", "host-load", "first", "second", "no-pynvml"):
    rep = f"/tmp/rep-{name}"
    try:
        doc = json.load(open(f"{rep}/results.json"))
    except OSError as e:
        print(f"== {name}: no results.json ({e})")
        continue
    print(f"== {name}")
    for t in doc["tests"]:
        act = t.get("action") or {}
        first = (t.get("message") or "").splitlines()[0][:150] if t.get("message") else ""
        print(f"  {t['nodeid'].rsplit('::', 1)[-1]:44} {t['outcome']:8} {act.get('action', ''):12} "
              f"{act.get('cause', ''):13} {first}")
    for line in open(f"{rep}/summary.md").read().splitlines():
        if line.startswith("- **") and "`" in line:
            print("  host:", line[:300])
PY
tar czf "$OUT/causes-reports.tgz" -C /tmp rep-healthy rep-host-load rep-first rep-second rep-no-pynvml \
    rep-healthy.log rep-host-load.log rep-first.log rep-second.log rep-no-pynvml.log
