#!/usr/bin/env bash
# On a GPU machine (repo root): device order, the NCCL algorithm rule, an interrupted run, the suites over SSH
# (the gpu-node kit carried as .gpu-node), the storage-to-GPU probes. Reports under $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
n=$(nvidia-smi -L | grep -c '^GPU')
t0=$(date +%s); CUDA_DEVICE_ORDER=FASTEST_FIRST CUDA_VISIBLE_DEVICES=1,0 python3 -m pytest -p no:cacheprovider --profile quick \
  --reports /tmp/rep-order -m "memory or compute or nvlink" -k "hbm_bandwidth or tensor_tflops or p2p_bandwidth" -q 2>&1 | tail -n 3
echo "== CUDA_DEVICE_ORDER=FASTEST_FIRST CUDA_VISIBLE_DEVICES=1,0: $(( $(date +%s) - t0 )) s"
python3 -c "import json;[print('  ',x['check'],'GPU',x['gpu'],x['pci_bus_id'],x['serial'],x['value']) for x in json.load(open('/tmp/rep-order/results.json'))['figures'] if x['check'] in ('bf16_tflops','hbm_read_bw_gbps')]"
grep -ho '"index": [01], "name": "NVIDIA H200", "pci_bus_id": "[^"]*"' /tmp/rep-order/probes/*/matmul_tflops-*.json | head -2
printf 'all:\n  hosts:\n    localhost:\n      ansible_connection: local\n      nccl_env: {NCCL_ALGO: Tree}\n' > /tmp/inv-tree.yml
python3 -m pytest -p no:cacheprovider -k "test_allreduce and not multinode" --inventory /tmp/inv-tree.yml --reports /tmp/rep-tree -q 2>&1 | grep -E "no floor|passed|failed|error" | head -4
( cd gpuaccept/probes && for a in Ring NVLS; do python3 nccl_allreduce.py "{\"min_bytes\":4294967296,\"max_bytes\":4294967296,\"env\":{\"NCCL_ALGO\":\"$a\"}}" 2>/dev/null | tail -1 | python3 -c "import json,sys;d=json.load(sys.stdin);r=(d.get('rows') or [{}])[-1];print('  $a:',d.get('msg'),r.get('ip_algo'),r.get('ip_busbw_gbps'))"; done )
t0=$(date +%s); timeout --preserve-status -s TERM 25 python3 -m pytest -p no:cacheprovider --reports /tmp/rep-int -k "allreduce and not multinode" -q > /tmp/int.log 2>&1; echo "== SIGTERM at 25 s: rc=$? after $(( $(date +%s) - t0 )) s"
sleep 2; pgrep -af "nccl_allreduce|_watchdog" || echo "  no probe process left"
python3 -c "import json;[print('  ',t.get('outcome'),(t.get('message') or '')[:100]) for t in (json.load(open('/tmp/rep-int/results.json')).get('tests') or [])]"
if [ -d .gpu-node ]; then
  bash .gpu-node/start-sshd.sh 2222 127.0.0.1 > /tmp/sshd.txt || cat /tmp/sshd.txt
  py=$(sed -n 's/.*ansible_python_interpreter=//p' /tmp/sshd.txt)
  printf 'all:\n  hosts:\n    gpu-node:\n      ansible_host: 127.0.0.1\n      ansible_port: 2222\n      ansible_user: root\n      ansible_ssh_private_key_file: /tmp/gpu-node-ssh/client_ed25519\n      ansible_python_interpreter: %s\n      gpu_sku: h200-sxm-141gb\n      gpus_per_node: %s\n' "$py" "$n" > /tmp/ssh.yml
  t0=$(date +%s); python3 -m pytest -p no:cacheprovider --profile quick --inventory /tmp/ssh.yml --known-hosts /tmp/gpu-node-ssh/known_hosts \
      --reports /tmp/rep-ssh -m "health or compute or nccl" -q 2>&1 | tail -n 4
  echo "== over SSH: $(( $(date +%s) - t0 )) s"
fi
mkdir -p /root/gpuaccept-storage; D=/root/gpuaccept-storage
( cd gpuaccept/probes && python3 storage_to_gpu.py "{\"path\":\"$D\",\"device\":\"cuda\",\"gpus\":\"all\",\"bytes\":1073741824,\"min_free_bytes\":1073741824}" 2>/dev/null | tail -1 | head -c 500; echo )
tar czf "$OUT/reports-checks.tgz" -C /tmp rep-order rep-tree rep-int $( [ -d /tmp/rep-ssh ] && echo rep-ssh )
