#!/usr/bin/env bash
# Where the time of `-m health` goes on a GPU node: one host over SSH (the gpu-node kit carried as .gpu-node,
# wheels as .whl), each remote command's seconds from the gpuaccept.run log, and the controller's start
# (import times, pytest plugins this environment loads). usage (device machine, repo root):
#     bash benchmarks/device_health_timing.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1
n=$(nvidia-smi -L | grep -c '^GPU')
bash .gpu-node/start-sshd.sh 2222 127.0.0.1 > /tmp/sshd.txt || cat /tmp/sshd.txt
py=$(sed -n 's/.*ansible_python_interpreter=//p' /tmp/sshd.txt)
printf 'all:\n  hosts:\n    gpu-node:\n      ansible_host: 127.0.0.1\n      ansible_port: 2222\n      ansible_user: root\n      ansible_ssh_private_key_file: /tmp/gpu-node-ssh/client_ed25519\n      ansible_python_interpreter: %s\n      gpu_sku: h200-sxm-141gb\n      gpus_per_node: %s\n' "$py" "$n" > /tmp/ssh.yml
for i in 1 2; do
  t0=$(date +%s.%N)
  python3 -m pytest -c pytest.ini -p no:cacheprovider --inventory /tmp/ssh.yml --known-hosts /tmp/gpu-node-ssh/known_hosts \
    --reports /tmp/rep-h$i -m health --log-file /tmp/h$i.log --log-file-level DEBUG -q 2>&1 | tail -n 2
  echo "== -m health over SSH, run $i: $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s"
  grep "RUN gpu-node" /tmp/h$i.log | sed -E 's/.* ([a-z_]+\.py) .* rc=([0-9-]+) ([0-9.]+s).*/  \1 rc=\2 \3/; s/^(.{0,160}).*/\1/'
done
python3 -X importtime -m pytest -c pytest.ini -p no:cacheprovider --inventory /tmp/ssh.yml -m health --collect-only -q \
  2>"$OUT/importtime.txt" | tail -n 1
sort -t'|' -k2 -n "$OUT/importtime.txt" | tail -n 12
python3 -m pytest -c pytest.ini --co -q --inventory /tmp/ssh.yml -m health 2>&1 | grep -i "^plugins" | cut -c1-600
cp /tmp/h1.log "$OUT/" 2>/dev/null
