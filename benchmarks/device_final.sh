#!/usr/bin/env bash
# On a GPU machine (repo root, gpuaccept importable): the main job on a healthy node whose inventory declares
# what the machine is set up with (nccl_env), with every report; the NCCL algorithm rule; the suites over SSH
# (the gpu-node kit carried as .gpu-node). Reports under $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
n=$(nvidia-smi -L | grep -c '^GPU')
printf 'all:\n  hosts:\n    h200-node:\n      ansible_connection: local\n      gpu_sku: h200-sxm-141gb\n      gpus_per_node: %s\n      nccl_env: {NCCL_NVLS_ENABLE: "0"}\n' "$n" > /tmp/local.yml
t0=$(date +%s); python3 -m pytest -c pytest.ini -p no:cacheprovider --inventory /tmp/local.yml --reports /tmp/rep-final \
   --prometheus-textfile /tmp/rep-final/gpuaccept.prom -q 2>&1 | tail -n 6
echo "== main job, healthy node: $(( $(date +%s) - t0 )) s"; head -n 30 /tmp/rep-final/summary.md
printf 'all:\n  hosts:\n    h200-node:\n      ansible_connection: local\n      nccl_env: {NCCL_ALGO: Tree, NCCL_NVLS_ENABLE: "0"}\n' > /tmp/inv-tree.yml
python3 -m pytest -c pytest.ini -p no:cacheprovider -k "test_allreduce and not multinode" --inventory /tmp/inv-tree.yml --reports /tmp/rep-tree -q 2>&1 | grep -E "no floor|passed|failed|error" | head -4
if [ -d .gpu-node ]; then
  bash .gpu-node/start-sshd.sh 2222 127.0.0.1 > /tmp/sshd.txt || cat /tmp/sshd.txt
  py=$(sed -n 's/.*ansible_python_interpreter=//p' /tmp/sshd.txt)
  printf 'all:\n  hosts:\n    gpu-node:\n      ansible_host: 127.0.0.1\n      ansible_port: 2222\n      ansible_user: root\n      ansible_ssh_private_key_file: /tmp/gpu-node-ssh/client_ed25519\n      ansible_python_interpreter: %s\n      gpu_sku: h200-sxm-141gb\n      gpus_per_node: %s\n      nccl_env: {NCCL_NVLS_ENABLE: "0"}\n' "$py" "$n" > /tmp/ssh.yml
  t0=$(date +%s); python3 -m pytest -c pytest.ini -p no:cacheprovider --profile quick --inventory /tmp/ssh.yml --known-hosts /tmp/gpu-node-ssh/known_hosts \
      --reports /tmp/rep-ssh -m "health or compute or nccl" -q 2>&1 | tail -n 5
  echo "== over SSH: $(( $(date +%s) - t0 )) s"; head -n 8 /tmp/rep-ssh/summary.md
fi
cp /tmp/rep-final/report.html /tmp/rep-final/summary.md /tmp/rep-final/gpuaccept.prom "$OUT/" 2>/dev/null
tar czf "$OUT/reports-final.tgz" -C /tmp rep-final rep-tree $( [ -d /tmp/rep-ssh ] && echo rep-ssh )
