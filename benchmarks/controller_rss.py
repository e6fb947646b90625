"""Controller memory and open files at fleet size, with the real pytest plugin. Prints a table.

    PYTHONPATH=. python benchmarks/controller_rss.py [--hosts 100 1000] [--forks 32]

Each host is a replayed 2x H200 node (``ansible_connection=local gpuaccept_replay=tests/data/replay-h200x2``:
every probe is answered from the saved documents, so no sshd and no GPU are needed; the controller does all
its own work: inventory, scheduling, judging, reports, the history database). Runs the GPU layers that the
captures cover (health, memory, compute, nvlink, single-node nccl) as ``python -m pytest`` in a scratch copy of
the suites. Reported: wall time, the controller's peak RSS (``ru_maxrss`` of the child from ``os.wait4``: the
pytest process itself, xdist is not used) and the most file descriptors it held at once (sampled every 0.1 s
from ``/proc/<pid>/fd``; with the local connection no SSH connection is open, so this bounds what the run keeps
open besides the pool's connections).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = "health or memory or compute or nvlink or (nccl and not multinode)"

ap = argparse.ArgumentParser()
ap.add_argument("--hosts", type=int, nargs="+", default=[100, 1000])
ap.add_argument("--forks", type=int, default=None, help="--forks for the run (default: the plugin's)")
a = ap.parse_args()
rows = []
for n in a.hosts:
    with tempfile.TemporaryDirectory() as d:
        for sub in ("suites", "thresholds"):
            shutil.copytree(os.path.join(REPO, sub), os.path.join(d, sub))
        for f in ("pytest.ini", "conftest.py"):
            shutil.copy(os.path.join(REPO, f), d)
        data = os.path.join(REPO, "tests", "data", "replay-h200x2")
        with open(os.path.join(d, "inventory.ini"), "w") as f:
            f.write("[gpu]\n" + "".join(f"h{i:05d} ansible_connection=local gpuaccept_replay={data} "
                                        f"gpu_sku=h200-sxm-141gb gpus_per_node=2\n" for i in range(n)))
        args = [sys.executable, "-m", "pytest", "--inventory", "inventory.ini", "--reports", os.path.join(d, "rep"),
                "-k", LAYERS, "-q", "-p", "no:randomly", "--progress", "off", "-p", "no:cacheprovider"]
        if a.forks is not None:
            args += ["--forks", str(a.forks)]
        env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
        t0 = time.perf_counter()
        with open(os.path.join(d, "out.txt"), "w") as out:
            proc = subprocess.Popen(args, cwd=d, stdout=out, stderr=subprocess.STDOUT, env=env)
            max_fd, ru = 0, None
            while ru is None:
                try:
                    max_fd = max(max_fd, len(os.listdir(f"/proc/{proc.pid}/fd")))
                except OSError:
                    pass
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    ru, proc.returncode = usage, os.waitstatus_to_exitcode(status)
                else:
                    time.sleep(0.1)
        wall = time.perf_counter() - t0
        peak = ru.ru_maxrss / 1024  # KiB -> MiB
        tests = sum(1 for _ in open(os.path.join(d, "rep", "results.jsonl")))
        tail = open(os.path.join(d, "out.txt")).read().strip().splitlines()[-1]
        rows.append(f"| {n} | {tests} | {wall:.0f} | {peak:.0f} | {max_fd} | {tail} |")
        print(rows[-1], flush=True)
print("| hosts | tests | wall s | controller peak RSS (MiB) | most fds open | pytest's last line |")
print("|---|---|---|---|---|---|")
print("\n".join(rows))
