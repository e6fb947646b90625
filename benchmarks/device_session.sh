#!/usr/bin/env bash
# On a GPU machine (repo root, gpuaccept importable): the checks of the prefetch, progress-channel and probe-
# prologue work. Part A: the torch probes' shared argument prologue, the main job on a healthy node (prefetch
# on; one host, so nothing is fetched ahead) and the suites over SSH (the gpu-node kit carried as .gpu-node:
# the first probe ships the probes in the same command). Part B: a burn-in with its live progress line captured,
# then a nightly compute/memory run judged against that burn-in in the history database. Part C: the kernel-log
# reader on this node, one machine under two inventory names, and the health layer alone. Part D: the inter-node
# all-reduce over SSH between two sshd "hosts" of this machine, a GPU each. Reports under $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
n=$(nvidia-smi -L | grep -c '^GPU')
printf 'all:\n  hosts:\n    h200-node:\n      ansible_connection: local\n      gpu_sku: h200-sxm-141gb\n      gpus_per_node: %s\n      nccl_env: {NCCL_NVLS_ENABLE: "0"}\n' "$n" > /tmp/inv.yml
part=${1:-A}
if [ "$part" = A ]; then
  ( cd gpuaccept/probes && for p in 'matmul_tflops {"dtypes":["bf16"],"seconds_per_dtype":1}' 'hbm_bandwidth {"bytes":1073741824,"iters":5}' \
      'launch_overhead {"iters":1000}' 'pcie_bandwidth {"bytes":268435456,"iters":3}' 'p2p_bandwidth {"bytes":268435456,"iters":2,"reps":2}' \
      'matmul_tflops {"device":"tpu"}' 'p2p_bandwidth {"bogus":1}'; do set -- $p
      python3 "$1.py" "$2" 2>/dev/null | tail -1 | python3 -c "import json,sys; d=json.load(sys.stdin); g=(d.get('gpus') or [{}]); print('  $1', d.get('msg') or [{k: x.get(k) for k in ('index','name','pci_bus_id')} for x in g])"
  done )
  t0=$(date +%s); python3 -m pytest -c pytest.ini -p no:cacheprovider --inventory /tmp/inv.yml --reports /tmp/rep-main \
     --log-file /tmp/main.log --log-file-level DEBUG -q 2>&1 | tail -n 4
  echo "== main job, healthy node, prefetch on: $(( $(date +%s) - t0 )) s; prefetch log lines: $(grep -c 'gpuaccept.runner.prefetch' /tmp/main.log)"
  head -n 24 /tmp/rep-main/summary.md
  python3 -c "import json;[print('  ',x['check'],'GPU',x['gpu'],x['value'],x.get('unit'),x.get('verdict')) for x in json.load(open('/tmp/rep-main/results.json'))['figures'] if x['check'] in ('bf16_tflops','fp8_tflops','hbm_read_bw_gbps','allreduce_busbw_gbps','p2p_unidir_gbps')]"
  if [ -d .gpu-node ]; then
    bash .gpu-node/start-sshd.sh 2222 127.0.0.1 > /tmp/sshd.txt || cat /tmp/sshd.txt
    py=$(sed -n 's/.*ansible_python_interpreter=//p' /tmp/sshd.txt)
    printf 'all:\n  hosts:\n    gpu-node:\n      ansible_host: 127.0.0.1\n      ansible_port: 2222\n      ansible_user: root\n      ansible_ssh_private_key_file: /tmp/gpu-node-ssh/client_ed25519\n      ansible_python_interpreter: %s\n      gpu_sku: h200-sxm-141gb\n      gpus_per_node: %s\n      nccl_env: {NCCL_NVLS_ENABLE: "0"}\n' "$py" "$n" > /tmp/ssh.yml
    t0=$(date +%s); python3 -m pytest -c pytest.ini -p no:cacheprovider --profile quick --inventory /tmp/ssh.yml --known-hosts /tmp/gpu-node-ssh/known_hosts \
        --reports /tmp/rep-ssh -m "health or compute or nccl" --log-file /tmp/ssh.log --log-file-level DEBUG -q 2>&1 | tail -n 4
    echo "== over SSH: $(( $(date +%s) - t0 )) s"; grep -m1 "RUN gpu-node" /tmp/ssh.log | cut -c1-400
  fi
  tar czf "$OUT/reports-A.tgz" -C /tmp rep-main $( [ -d /tmp/rep-ssh ] && echo rep-ssh ) main.log
elif [ "$part" = C ]; then
  # the kernel-log reader on a healthy node: no init_failed / pcie_uncorrected events; one machine under two names
  ( cd gpuaccept/probes && python3 xid_events.py '{"since_epoch": 0}' | python3 -c "import json,sys; d=json.load(sys.stdin); print('  xid_events', d.get('source'), d.get('lines_scanned'), [(e.get('xid'), e.get('fault'), e.get('pci_bus_id')) for e in d.get('events', [])][:10])" )
  printf 'all:\n  hosts:\n    name-a:\n      ansible_connection: local\n    name-b:\n      ansible_connection: local\n  vars:\n      gpu_sku: h200-sxm-141gb\n      gpus_per_node: %s\n' "$n" > /tmp/two.yml
  python3 -m pytest -c pytest.ini -p no:cacheprovider -m health --inventory /tmp/two.yml --reports /tmp/rep-two -q --forks 0 2>&1 | tail -n 3
  head -n 8 /tmp/rep-two/summary.md | cut -c1-400
  python3 -m pytest -c pytest.ini -p no:cacheprovider -m health --inventory /tmp/inv.yml --reports /tmp/rep-health -q 2>&1 | tail -n 2
  tar czf "$OUT/reports-C.tgz" -C /tmp rep-two rep-health
elif [ "$part" = D ]; then
  # the inter-node all-reduce over SSH on one 2-GPU machine: two sshd "hosts" (127.0.0.1:2222, 127.0.0.2:2223),
  # one rank each, GPU 0 and GPU 1 (CUDA_VISIBLE_DEVICES through nccl_env): the ranks run under the watchdog's --exec
  bash .gpu-node/start-sshd.sh 2222 127.0.0.1 > /tmp/s1.txt && bash .gpu-node/start-sshd.sh 2223 127.0.0.2 > /tmp/s2.txt
  py=$(sed -n 's/.*ansible_python_interpreter=//p' /tmp/s1.txt); key=$(cut -d' ' -f2,3 /tmp/gpu-node-ssh/known_hosts)
  printf '[127.0.0.1]:2222 %s\n[127.0.0.2]:2223 %s\n' "$key" "$key" > /tmp/kh2
  printf 'all:\n  hosts:\n    gpu-a: {ansible_host: 127.0.0.1, ansible_port: 2222, nccl_env: {CUDA_VISIBLE_DEVICES: "0", NCCL_NVLS_ENABLE: "0"}}\n    gpu-b: {ansible_host: 127.0.0.2, ansible_port: 2223, nccl_env: {CUDA_VISIBLE_DEVICES: "1", NCCL_NVLS_ENABLE: "0"}}\n  vars:\n    ansible_user: root\n    ansible_ssh_private_key_file: /tmp/gpu-node-ssh/client_ed25519\n    ansible_python_interpreter: %s\n    gpu_sku: h200-sxm-141gb\n    nccl_ranks_per_node: 1\n' "$py" > /tmp/mn.yml
  t0=$(date +%s); python3 -m pytest -c pytest.ini -p no:cacheprovider --inventory /tmp/mn.yml --known-hosts /tmp/kh2 -k multinode -s \
     --reports /tmp/rep-mn --log-file /tmp/mn.log --log-file-level DEBUG -q 2>&1 | grep -v "^DEBUG" | tail -n 22
  echo "== inter-node over SSH: $(( $(date +%s) - t0 )) s"; grep -m2 "_watchdog.py --watch-stdin --exec" /tmp/mn.log | cut -c1-240
  head -n 12 /tmp/rep-mn/summary.md | cut -c1-300
  tar czf "$OUT/reports-D.tgz" -C /tmp rep-mn mn.log
else
  MIN=${2:-2}
  t0=$(date +%s); python3 -m pytest -c pytest.ini -p no:cacheprovider -m burnin --burnin-minutes "$MIN" --inventory /tmp/inv.yml \
     --reports /tmp/rep-burn --history /tmp/h.sqlite --progress plain 2> /tmp/progress.log | tail -n 4
  echo "== burn-in $MIN min: wall $(( $(date +%s) - t0 )) s"; grep -a 'burnin' /tmp/progress.log | grep -a "min" | tail -n 8
  grep -a -c "ended with" /tmp/rep-burn/summary.md
  python3 -c "import json;[print('  GPU',x['gpu'],x['check'],x['value'],x.get('unit'),x.get('verdict')) for x in json.load(open('/tmp/rep-burn/results.json'))['figures'] if x['check'].startswith(('burnin_bf16','burnin_hbm','burnin_temp','sdc'))]"
  t0=$(date +%s); python3 -m pytest -c pytest.ini -p no:cacheprovider -k "tensor_tflops or hbm_bandwidth" --inventory /tmp/inv.yml --reports /tmp/rep-night \
     --history /tmp/h.sqlite --standout-pct 0.1 -q 2>&1 | tail -n 3
  echo "== nightly against the burn-in: $(( $(date +%s) - t0 )) s"
  python3 -c "import sqlite3; [print('  ', r) for r in sqlite3.connect('/tmp/h.sqlite').execute(\"select subject,check_,round(value,1) from latest where kind='burnin' and (check_ like 'bf16%' or check_ like 'hbm_copy%')\")]"
  grep -A8 -i "stand" /tmp/rep-night/summary.md | head -n 14
  tar czf "$OUT/reports-B.tgz" -C /tmp rep-burn rep-night progress.log h.sqlite
fi
