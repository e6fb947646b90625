#!/usr/bin/env bash
# benchmarks/fanout.py on the GPU machine: loopback sshd "nodes" on a host with many cores, so that each node's
# probe has a core of its own as on a fleet (on a 2-core controller the 32 nodes' Python probes share its cores).
# The nodes' interpreter is this one (torch, nvidia-ml-py): gpu_inventory reads the real GPUs through NVML.
# usage, on the device machine from the repository root, with the gpu-node kit carried as .gpu-node, the wheels
# as .whl and a `pip install --target` folder of pytest-testinfra as .peers/testinfra-site (optional):
#     bash benchmarks/device_fanout.sh [NODES] [ROUNDS]          # default 32 3
#     bash benchmarks/device_fanout.sh --per-host 32,128 [ROUNDS]  # the controller's cost per host
# FANOUT_NODE_PYTHON=/usr/bin/python3 (the image's system Python, without nvidia-ml-py) makes nodes that read no GPU.
set -eu
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1
bash .gpu-node/start-sshd.sh 2299 127.0.0.1 >/dev/null  # unpacks OpenSSH, makes the sshd user and /run/sshd
root=/tmp/gpu-node-ssh/root
export LD_LIBRARY_PATH=$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu
[ -x /usr/sbin/sshd ] || ln -s "$root/usr/sbin/sshd" /usr/sbin/sshd   # where tests/sshd.py looks
for b in ssh ssh-keygen; do command -v $b >/dev/null || ln -s "$root/usr/bin/$b" /usr/local/bin/$b; done
[ -d .peers/testinfra-site ] && export TESTINFRA_SITE=$PWD/.peers/testinfra-site
echo "$(nproc) cores, $(nvidia-smi -L | wc -l) GPUs, $(python3 -c 'import sys; print(sys.version.split()[0])')"
echo "nodes run ${FANOUT_NODE_PYTHON:-python3}: $(${FANOUT_NODE_PYTHON:-python3} -c "import importlib.util as u; print(\"nvidia-ml-py\", \"present\" if u.find_spec(\"pynvml\") else \"absent\")")"
[ $# -gt 0 ] || set -- 32 3
python3 benchmarks/fanout.py "$@"
