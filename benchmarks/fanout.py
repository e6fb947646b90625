#!/usr/bin/env python3
"""Fan-out over real sshd nodes on loopback: gpuaccept against a bare paramiko pool and testinfra, in the same run.

    python benchmarks/fanout.py [NODES] [ROUNDS]          # default 16 nodes, 3 rounds
    python benchmarks/fanout.py --per-host 32,128 [ROUNDS]  # the controller's cost per host

``--per-host SIZES``: only the two one-Python pools (a bare paramiko pool, 32 threads wide like --forks, one
``python -c`` per host, its output read: the node's Python importing nvidia-ml-py, :data:`NODE_PYTHON_FLOOR`,
the pool the targets are stated against; and a Python importing nothing, :data:`ONE_PYTHON`) beside
``gpuaccept -m health``, at each size in one run (per_host).

Starts NODES real OpenSSH servers (127.0.0.101 ...; tests/sshd.py), then per round, in this order (each a
whole process, timed from outside, as shared/notes/scale-profile.md measured the peers):
  - bare paramiko: a thread pool of NODES, per host connect (known_hosts checked, RejectPolicy), run `true`,
    close -- the floor for "touch every host once";
  - the same pool running the nodes' Python once per host, importing nvidia-ml-py where it is installed
    (:data:`NODE_PYTHON_FLOOR`): the floor for any tool that runs one Python probe per host. Here the nodes
    share the controller's cores, so their interpreters' CPU is on the controller's clock as well;
  - the same pool running the probes of ``-m health`` on every host with no tool around them
    (:func:`health_probes_command`: gpu_inventory, pcie_link and xid_events, one Python each, from this
    checkout): the floor for reading what the health layer reads; on a GPU machine the loopback nodes share
    its GPUs, so each node's NVML reads wait on the others' (on a fleet every node reads its own);
  - testinfra `-n 8`: ``def test_true(host): assert host.run("true").rc == 0`` over ``--hosts=ssh://...``
    (OpenSSH client, ``StrictHostKeyChecking yes``, ``ControlMaster no``), as the scale profile ran it; only
    where ``import testinfra`` works (``pip install pytest-testinfra``), or with ``TESTINFRA_SITE=DIR`` naming a
    ``pip install --target DIR pytest-testinfra`` folder (put on that run's PYTHONPATH only);
  - ansible `-m raw -a true -f NODES`: Ansible's own fan-out over the same inventory (OpenSSH client,
    host keys checked against the same known_hosts, no ControlMaster); only where ``ansible`` is on PATH or
    ``ANSIBLE_SITE=DIR`` names a ``pip install --target DIR ansible-core`` folder (its bin/ansible is run);
  - gpuaccept `-m health --forks 0`: hosts one at a time as pytest reaches their tests (the old behaviour);
  - gpuaccept `-m health` (default --forks 32): every host connected, shipped and probed (gpu_inventory)
    at once before the tests reach it;
  - gpuaccept `-m storage`, `--forks 0` and default: gpu_inventory as above, then a second real probe on every
    host (test_nvme_inventory's nvme_inventory), which host h1's test fetches ahead on all the others
    (gpuaccept.runner.prefetch); one host at a time, each waits for its test.
  - gpuaccept `-m health` over the same hosts all refusing connections: the cost of reporting an ERROR per test;
  - gpuaccept `-m health --collect-only`: the controller's fixed cost (interpreter, pytest, plugin, inventory,
    threshold files, collection; with an inventory outside the repository pytest is started twice, see
    gpuaccept.plugin.pytest_load_initial_conftests) -- no host is touched.
The nodes' interpreter is this one, or FANOUT_NODE_PYTHON (e.g. a system python3 without nvidia-ml-py on a GPU
machine, so that the nodes read no GPU, as here). Every run gets an operator's shell environment: PYTHONDONTWRITEBYTECODE (set in some sandboxes and CI images) is
removed, so each tool's modules are compiled once and their bytecode cached, as on an operator's machine; one
untimed warm-up run of each comes before the timed rounds (bytecode and page caches warm for every peer alike).
The nodes have no GPU, so this measures connect + ship + probe + verdict plumbing, as shared/notes/
scale-profile.md did. Prints min/median seconds, the ratio to the bare pool of the same round, the controller's
CPU seconds (the process and its children, getrusage) and the whole machine's busy CPU seconds (/proc/stat:
controller, sshd and the "nodes'" processes, which here share the controller's cores).
"""
from __future__ import annotations

import importlib.util
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from sshd import start_sshd, write_known_hosts  # noqa: E402


BARE = r"""
import sys, json, paramiko
from concurrent.futures import ThreadPoolExecutor
nodes, kh = json.loads(sys.argv[1]), sys.argv[2]
command = sys.argv[3] if len(sys.argv) > 3 else "true"
forks = int(sys.argv[4]) if len(sys.argv) > 4 else len(nodes)
def one(n):
    c = paramiko.SSHClient()
    c.load_host_keys(kh)
    c.set_missing_host_key_policy(paramiko.RejectPolicy())
    c.connect(n[0], n[1], username="root", key_filename=n[2], look_for_keys=False, allow_agent=False, timeout=30)
    _, out, _ = c.exec_command(command)
    out.read()
    assert out.channel.recv_exit_status() == 0
    c.close()
with ThreadPoolExecutor(forks) as ex:
    list(ex.map(one, nodes))
"""


def _busy_s() -> float:
    """CPU seconds the whole machine has been busy since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def timed(cmd: list[str], **kw) -> tuple[subprocess.CompletedProcess, tuple[float, float, float]]:
    """Run ``cmd``; returns (its result, (wall s, its CPU s with its children, the machine's busy CPU s))."""
    r0, b0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), _busy_s(), time.perf_counter()
    res = subprocess.run(cmd, **kw)
    t1, b1, r1 = time.perf_counter(), _busy_s(), resource.getrusage(resource.RUSAGE_CHILDREN)
    if os.environ.get("FANOUT_VERBOSE"):  # each run as it ends, on stderr
        print(f"  {' '.join(a for a in cmd[1:] if len(a) < 24)[:120]}: {t1 - t0:.2f} s", file=sys.stderr, flush=True)
    return res, (t1 - t0, r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, b1 - b0)


#: what the "one Python per host" pool runs on each node: the node's interpreter importing nvidia-ml-py where it
#: has it, as gpu_inventory does -- the node-side floor of any tool that runs a Python probe there
NODE_PYTHON_FLOOR = "import importlib.util as u; u.find_spec('pynvml') and __import__('pynvml')"


#: the probes ``-m health`` runs on a node with GPUs (gpuaccept/suites/test_health.py), with its arguments
HEALTH_PROBES = (("gpu_inventory.py", "{}"), ("pcie_link.py", '{"seconds": 1.5}'), ("xid_events.py", "{}"))


def health_probes_command(python: str) -> str:
    """A shell command running each of :data:`HEALTH_PROBES` from this checkout's gpuaccept/probes with
    ``python``, output discarded, exit status 0 whatever the probes answered (a node without a GPU refuses
    some of them: the reading is what is timed)."""
    runs = " ; ".join(shlex.join([python, name, args]) for name, args in HEALTH_PROBES)
    return f"cd {shlex.quote(str(REPO / 'gpuaccept' / 'probes'))} && ( {runs} ) >/dev/null 2>&1 ; true"


def bare_pool(nodes, known_hosts: str, command: str = "true", forks: int | None = None) -> tuple[float, float, float]:
    """The whole process, as the scale profile measured it: interpreter start, paramiko import, the pool (``forks``
    threads, default one per node), each node running ``command`` (a shell command line), its output read."""
    spec = json.dumps([[n.address, n.port, n.key_file] for n in nodes])
    res, t = timed([sys.executable, "-c", BARE, spec, known_hosts, command, str(forks or len(nodes))])
    res.check_returncode()
    return t


TESTINFRA_TEST = 'def test_true(host):\n    assert host.run("true").rc == 0\n'


def testinfra_env() -> dict | None:
    """The environment testinfra runs in, or None where it is not installed."""
    site = os.environ.get("TESTINFRA_SITE")
    if site:
        return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)}
    return dict(os.environ) if importlib.util.find_spec("testinfra") else None


def testinfra(root: Path, nodes, known_hosts: str, env: dict) -> float:
    """``pytest -n 8 --hosts=ssh://...`` running ``host.run("true")`` once per host, as a whole process."""
    d = root / "testinfra"
    if not d.exists():
        d.mkdir()
        (d / "test_true.py").write_text(TESTINFRA_TEST)
        (d / "pytest.ini").write_text("[pytest]\n")  # its own rootdir: not the repository's pytest.ini
        (d / "ssh_config").write_text(
            f"Host *\n  User root\n  IdentityFile {nodes[0].key_file}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {known_hosts}\n  StrictHostKeyChecking yes\n  ControlMaster no\n"
            "  PasswordAuthentication no\n")
    hosts = ",".join(f"ssh://root@{n.address}:{n.port}" for n in nodes)
    res, t = timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "8",
                          f"--hosts={hosts}", f"--ssh-config={d / 'ssh_config'}", "test_true.py"],
                         cwd=d, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"testinfra run failed ({res.returncode}): {res.stdout[-2000:]}{res.stderr[-2000:]}")
    return t


def ansible_cmd() -> tuple[list[str], dict] | None:
    """How to start ``ansible`` here (command prefix, environment), or None where it is not installed."""
    site = os.environ.get("ANSIBLE_SITE")
    if site:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)}
        return [sys.executable, os.path.join(site, "bin", "ansible")], env
    exe = shutil.which("ansible")
    return ([exe], dict(os.environ)) if exe else None


def ansible(root: Path, nodes, known_hosts: str, how: tuple[list[str], dict]) -> tuple:
    """``ansible all -m raw -a true -f N`` over the nodes, as a whole process."""
    inv = root / "ansible.ini"
    if not inv.exists():
        inv.write_text("[all]\n" + "".join(
            f"{n.name} ansible_host={n.address} ansible_port={n.port} ansible_user=root "
            f"ansible_ssh_private_key_file={n.key_file}\n" for n in nodes))
    env = {**how[1], "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_SSH_ARGS": f"-o UserKnownHostsFile={known_hosts} "
           "-o StrictHostKeyChecking=yes -o ControlMaster=no -o IdentitiesOnly=yes", "ANSIBLE_LOCAL_TEMP": str(root / "ans-tmp"),
           "ANSIBLE_HOME": str(root / "ans-home"), "ANSIBLE_NOCOLOR": "1"}
    res, t = timed([*how[0], "all", "-i", str(inv), "-m", "raw", "-a", "true", "-f", str(len(nodes))],
                   cwd=root, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"ansible run failed ({res.returncode}): {res.stdout[-2000:]}{res.stderr[-2000:]}")
    return t


def gpuaccept(root: Path, inv: Path, known_hosts: str, *extra: str, marker: str = "health") -> tuple:
    res, t = timed([sys.executable, "-m", "pytest", "--inventory", str(inv), "--known-hosts", known_hosts,
                    "-m", marker, "-q", "-p", "no:cacheprovider", "--reports", str(root / f"rep{time.time()}"),
                    *extra], cwd=REPO, capture_output=True, text=True)
    if res.returncode not in (0, 1):
        raise SystemExit(f"gpuaccept run failed ({res.returncode}): {res.stdout[-2000:]}{res.stderr[-2000:]}")
    return t


#: what the bare-Python pool runs on each node: one Python that starts, prints and exits (``python3 -c pass``-like)
ONE_PYTHON = "import sys; sys.stdout.write('ok')"


def per_host(sizes: list[int], rounds: int, forks: int = 32) -> None:
    """The controller's cost per host: over ``sizes`` real sshd nodes (all started once, the first N used for
    each size), per round and size: the Python-per-host pool (:data:`BARE`, ``forks`` threads wide, one
    :data:`NODE_PYTHON_FLOOR` per host: the node's Python importing nvidia-ml-py as gpu_inventory does), the same
    pool with a Python that imports nothing (:data:`ONE_PYTHON`), and ``gpuaccept -m health --forks FORKS``, each
    a whole process, side by side. Prints per size the median wall, ms per host, gpuaccept / pool (median of the
    rounds' ratios) for both pools, and the targets of issue 40, stated against the Python-per-host pool: within
    2x (32 hosts) and 1.5x (128), and the largest size no slower per host than the smallest."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    tmp = Path(tempfile.mkdtemp(prefix="fanout-"))
    nodes = []
    kinds = ("pool", "bare", "gpuaccept")
    try:
        for i in range(max(sizes)):
            nodes.append(start_sshd(tmp, address=f"127.0.{1 + i // 200}.{10 + i % 200}", name=f"n{i:03d}"))
        py = os.environ.get("FANOUT_NODE_PYTHON", sys.executable)
        got: dict[int, dict[str, list[float]]] = {n: {k: [] for k in kinds} for n in sizes}
        invs = {}
        for n in sizes:
            kh = write_known_hosts(tmp / f"kh{n}", nodes[:n])
            inv = tmp / f"inv{n}.ini"
            inv.write_text("[cluster]\n" + "".join(x.inventory_line(python=py) + "\n" for x in nodes[:n]))
            invs[n] = (inv, kh)
        for r in range(rounds + 1):  # round 0: the untimed warm-up
            for n in sizes:
                inv, kh = invs[n]
                one = {"pool": bare_pool(nodes[:n], kh, shlex.join([py, "-c", NODE_PYTHON_FLOOR]), forks)[0],
                       "bare": bare_pool(nodes[:n], kh, shlex.join([py, "-c", ONE_PYTHON]), forks)[0],
                       "gpuaccept": gpuaccept(tmp, inv, kh, "--forks", str(forks))[0]}
                if r:
                    for k in kinds:
                        got[n][k].append(one[k])
        print(f"controller cost per host: {rounds} rounds, {os.cpu_count()} cores, --forks {forks}")
        print("| hosts | Python-per-host pool s (imports nvidia-ml-py) | bare-Python pool s | gpuaccept -m health s "
              "| ms/host: pool, bare, gpuaccept | gpuaccept / pool | gpuaccept / bare | target (/ pool) |\n"
              "|---|---|---|---|---|---|---|---|")
        per = {}
        for n in sizes:
            med = {k: statistics.median(got[n][k]) for k in kinds}
            ratio = {k: statistics.median(g / a for a, g in zip(got[n][k], got[n]["gpuaccept"])) for k in ("pool", "bare")}
            per[n] = med["gpuaccept"] / n
            target = {32: 2.0, 128: 1.5}.get(n)
            verdict = f"<= {target}x: {'met' if ratio['pool'] <= target else 'not met'}" if target else "-"
            print(f"| {n} | {med['pool']:.2f} | {med['bare']:.2f} | {med['gpuaccept']:.2f} | "
                  f"{', '.join(f'{1000 * med[k] / n:.0f}' for k in kinds)} | {ratio['pool']:.2f}x | "
                  f"{ratio['bare']:.2f}x | {verdict} |")
        lo, hi = min(sizes), max(sizes)
        print(f"gpuaccept per host: {1000 * per[hi]:.0f} ms at {hi} hosts, {1000 * per[lo]:.0f} ms at {lo} "
              f"({'no slower' if per[hi] <= per[lo] else 'slower'} per host)")
    finally:
        for x in nodes:
            x.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--per-host":  # --per-host SIZES [ROUNDS]: gpuaccept beside the one-Python pool
        per_host([int(x) for x in sys.argv[2].split(",")], int(sys.argv[3]) if len(sys.argv) > 3 else 3)
        return
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # an operator's shell: bytecode cached (see the docstring)
    tmp = Path(tempfile.mkdtemp(prefix="fanout-"))
    nodes = []
    try:
        for i in range(count):
            nodes.append(start_sshd(tmp, address=f"127.0.0.{101 + i}", name=f"n{i:02d}"))
        kh = write_known_hosts(tmp / "known_hosts", nodes)
        inv = tmp / "inventory.ini"
        node_python = os.environ.get("FANOUT_NODE_PYTHON", sys.executable)  # the nodes' interpreter
        inv.write_text("[cluster]\n" + "".join(n.inventory_line(python=node_python) + "\n" for n in nodes))
        dead = tmp / "dead.ini"  # the same hosts, every one refusing connections (port 9, nothing listens there)
        dead.write_text("[cluster]\n" + "".join(f"{n.name} ansible_host={n.address} ansible_port=9\n" for n in nodes))
        tenv = testinfra_env()
        acmd = ansible_cmd()
        names = ["bare paramiko pool, `true` (process)",
                 "bare paramiko pool, the node's Python importing nvidia-ml-py (one Python per host)",
                 "bare paramiko pool running the health probes (one Python per probe, no tool)", "testinfra -n 8, `host.run(\"true\")`",
                 f"ansible -m raw -a true -f {count}",
                 "gpuaccept -m health --collect-only (fixed cost, no host touched)",
                 "gpuaccept -m health --forks 0", "gpuaccept -m health (--forks 32)",
                 "gpuaccept -m storage --forks 0", "gpuaccept -m storage (--forks 32)",
                 "gpuaccept -m health, every host refusing connections (ERROR reports)"]
        if acmd is None:
            names = [k for k in names if not k.startswith("ansible")]
        if tenv is None:
            names = [k for k in names if not k.startswith("testinfra")]
        rows: dict[str, list[tuple]] = {k: [] for k in names}
        ratios: dict[str, list[float]] = {k: [] for k in rows}
        floors: dict[str, list[float]] = {k: [] for k in rows}
        for r in range(rounds + 1):  # round 0: the untimed warm-up
            b = bare_pool(nodes, kh)
            floor = bare_pool(nodes, kh, shlex.join([node_python, "-c", NODE_PYTHON_FLOOR]))
            got = [b, floor, bare_pool(nodes, kh, health_probes_command(node_python))] + ([testinfra(tmp, nodes, kh, tenv)] if tenv is not None else [])
            got += [ansible(tmp, nodes, kh, acmd)] if acmd is not None else []
            got += [gpuaccept(tmp, inv, kh, "--collect-only"),
                    gpuaccept(tmp, inv, kh, "--forks", "0"), gpuaccept(tmp, inv, kh),
                    gpuaccept(tmp, inv, kh, "--forks", "0", marker="storage"), gpuaccept(tmp, inv, kh, marker="storage"),
                    gpuaccept(tmp, dead, kh)]
            if r == 0:
                continue
            for k, v in zip(rows, got):
                rows[k].append(v)
                ratios[k].append(v[0] / b[0])
                floors[k].append(v[0] / floor[0])
        print(f"fan-out over {count} real sshd nodes on loopback, {rounds} rounds, {os.cpu_count()} cores")
        print("| run | min s | median s | / bare pool (median of rounds) | / Python-per-host pool | controller CPU s "
              "| machine busy CPU s |\n|---|---|---|---|---|---|---|")
        for k, v in rows.items():
            wall = [x[0] for x in v]
            print(f"| {k} | {min(wall):.2f} | {statistics.median(wall):.2f} | {statistics.median(ratios[k]):.1f}x | "
                  f"{statistics.median(floors[k]):.1f}x | "
                  f"{statistics.median(x[1] for x in v):.2f} | {statistics.median(x[2] for x in v):.2f} |")
        if acmd is None:
            print("(ansible not installed: pip install --target DIR ansible-core and ANSIBLE_SITE=DIR, to add its row)")
        if tenv is None:
            print("(testinfra not installed: pip install pytest-testinfra, or TESTINFRA_SITE=DIR, to add its row)")
    finally:
        for n in nodes:
            n.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
