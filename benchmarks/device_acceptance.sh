#!/usr/bin/env bash
# The main job on a GPU machine, three ways, with every report kept under $OUT:
#   1. locally (inventory/localhost.ini), 2. over SSH to the machine's own sshd (the gpu-node kit, carried
#   as .gpu-node), 3. a health failure provoked on purpose (gpus_per_node one more than present).
# usage (GPU machine, repo root): bash benchmarks/device_acceptance.sh [pytest args for runs 1 and 2]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
n=$(nvidia-smi -L | grep -c '^GPU')
t0=$(date +%s); python3 -m pytest -p no:cacheprovider --reports /tmp/rep-local "$@" 2>&1 | tail -n 30
echo "== local main job: $(( $(date +%s) - t0 )) s"

if [ -d .gpu-node ]; then
  bash .gpu-node/start-sshd.sh 2222 127.0.0.1 > /tmp/sshd.txt || cat /tmp/sshd.txt
  py=$(sed -n 's/.*ansible_python_interpreter=//p' /tmp/sshd.txt)
  cat > /tmp/ssh.yml <<YML
all:
  children:
    gpu:
      hosts:
        gpu-node:
          ansible_host: 127.0.0.1
          ansible_port: 2222
          ansible_user: root
          ansible_ssh_private_key_file: /tmp/gpu-node-ssh/client_ed25519
          ansible_python_interpreter: $py
      vars:
        gpu_sku: h200-sxm-141gb
        gpus_per_node: $n
        nccl_env: {NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1", NVSHMEM_DISABLE_NVLS: "1"}
YML
  t0=$(date +%s); python3 -m pytest -p no:cacheprovider --inventory /tmp/ssh.yml --known-hosts /tmp/gpu-node-ssh/known_hosts \
      --reports /tmp/rep-ssh "$@" 2>&1 | tail -n 30
  echo "== ssh main job: $(( $(date +%s) - t0 )) s"
fi

mkdir -p /root/gpuaccept-storage
cat > /tmp/storage.yml <<YML
all:
  hosts:
    localhost:
      ansible_connection: local
      storage_paths: [/root/gpuaccept-storage]
      fs_paths: [/root/gpuaccept-storage]
      gds_paths: [/root/gpuaccept-storage]
YML
t0=$(date +%s); python3 -m pytest -p no:cacheprovider --inventory /tmp/storage.yml -m "storage or gpudirect" -s \
    --reports /tmp/rep-storage 2>&1 | tail -n 25
echo "== storage+gpudirect: $(( $(date +%s) - t0 )) s"

printf 'localhost ansible_connection=local gpus_per_node=%d\n' $((n + 1)) > /tmp/bad.ini
python3 -m pytest -p no:cacheprovider --inventory /tmp/bad.ini -k gpu_inventory --reports /tmp/rep-bad 2>&1 | grep -E "gpu_count|passed|failed"
tar czf "$OUT/reports.tgz" -C /tmp rep-local $( [ -d /tmp/rep-ssh ] && echo rep-ssh ) rep-bad rep-storage
