#!/usr/bin/env bash
# On a GPU machine (repo root, gpuaccept importable, the gpu-node kit carried as .gpu-node): the main job on a
# healthy node (local connection), the GPU layers over SSH through the per-host agent, then the controller
# SIGKILLed while the HBM probe holds the GPU, alone and with -n 2: seconds until the GPU has no compute
# process of the run and the node no process of it (the promise: probes/_watchdog.py CONTROLLER_GONE_CLEAN_S).
# Reports under $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
n=$(nvidia-smi -L | grep -c '^GPU')
printf 'all:\n  hosts:\n    h200-node:\n      ansible_connection: local\n      gpu_sku: h200-sxm-141gb\n      gpus_per_node: %s\n      nccl_env: {NCCL_NVLS_ENABLE: "0"}\n' "$n" > /tmp/local.yml
figs='import json,sys
sys.path.insert(0, ".")
from gpuaccept.reporting.folder import run_figures
d = json.load(open(sys.argv[1]))
for f in run_figures(d):
    if f["check"] in ("bf16_tflops", "fp8_tflops", "hbm_read_bw_gbps", "hbm_copy_bw_gbps", "h2d_gbps", "launch_overhead_us", "allreduce_busbw_gbps"):
        print("   ", f["check"], "GPU", f.get("gpu"), f["value"], f.get("unit"), f.get("verdict"))
print("    format", d.get("format"), "top-level figures" if "figures" in d else "figures in tests only")'
t0=$(date +%s); python3 -m pytest -c pytest.ini -p no:cacheprovider --inventory /tmp/local.yml --reports /tmp/rep-local -q 2>&1 | tail -n 4
echo "== main job, healthy node, local: $(( $(date +%s) - t0 )) s"; head -n 6 /tmp/rep-local/summary.md | cut -c1-300
python3 -c "$figs" /tmp/rep-local/results.json
[ -d .gpu-node ] || { echo "no .gpu-node: SSH parts skipped"; exit 0; }
bash .gpu-node/start-sshd.sh 2222 127.0.0.1 > /tmp/sshd.txt || cat /tmp/sshd.txt
py=$(sed -n 's/.*ansible_python_interpreter=//p' /tmp/sshd.txt)
printf 'all:\n  hosts:\n    gpu-node:\n      ansible_host: 127.0.0.1\n      ansible_port: 2222\n      ansible_user: root\n      ansible_ssh_private_key_file: /tmp/gpu-node-ssh/client_ed25519\n      ansible_python_interpreter: %s\n      gpu_sku: h200-sxm-141gb\n      gpus_per_node: %s\n      nccl_env: {NCCL_NVLS_ENABLE: "0"}\n' "$py" "$n" > /tmp/ssh.yml
t0=$(date +%s); python3 -m pytest -c pytest.ini -p no:cacheprovider --profile quick --inventory /tmp/ssh.yml --known-hosts /tmp/gpu-node-ssh/known_hosts \
    --reports /tmp/rep-ssh -m "health or compute or memory" -q 2>&1 | tail -n 4
echo "== over SSH (agent), quick: $(( $(date +%s) - t0 )) s"; head -n 4 /tmp/rep-ssh/summary.md | cut -c1-300
python3 -c "$figs" /tmp/rep-ssh/results.json
gpu_apps() { nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c '[0-9]'; }
run_procs() { for p in /proc/[0-9]*; do readlink "$p/cwd" 2>/dev/null; done | grep -c 'gpuaccept\.[0-9a-f]\{12\}'; }
for workers in "" "-n 2"; do
  python3 -m pytest -c pytest.ini -p no:cacheprovider --inventory /tmp/ssh.yml --known-hosts /tmp/gpu-node-ssh/known_hosts \
      --reports /tmp/rep-kill$(echo $workers | tr -d ' -') -k test_hbm_bandwidth --probe-timeout 600 -q $workers > /tmp/kill.log 2>&1 &
  ctl=$!
  for i in $(seq 1 600); do [ "$(gpu_apps)" -ge 1 ] && break; sleep 0.1; done
  sleep 1
  before_apps=$(gpu_apps); before_procs=$(run_procs)
  t0=$(date +%s.%N); kill -9 $ctl
  for i in $(seq 1 600); do [ "$(gpu_apps)" = 0 ] && [ "$(run_procs)" = 0 ] && break; sleep 0.1; done
  t1=$(date +%s.%N)
  echo "== SIGKILL of the controller ${workers:-alone} during the HBM probe: GPU apps $before_apps -> $(gpu_apps), run processes $before_procs -> $(run_procs), clean after $(python3 -c "print(f'{$t1 - $t0:.1f}')") s"
  sleep 1
done
tar czf "$OUT/reports.tgz" -C /tmp rep-local rep-ssh
