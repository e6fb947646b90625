"""The Slurm launchers: pure parts, then against a real slurmctld with three slurmd on this machine."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from gpuaccept.config.inventory import load_inventory
from gpuaccept.runner.multinode import HostResult
from gpuaccept.scaleout.slurm import (SlurmEnvError, expand_hostlist, find_host, folder_name, layout_arg, node_inventory,
                             slurm_world, take_history, worst_exit)
from gpuaccept.scaleout.slurm_allreduce import job_port, node_addr, node_addrs, probe_args, results_from_outputs
from slurm_cluster import running_cluster

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------------ pure

@pytest.mark.parametrize("text, names", [
    ("n1", ["n1"]),
    ("n[1-3]", ["n1", "n2", "n3"]),
    ("gpu-[01-02,07],login", ["gpu-01", "gpu-02", "gpu-07", "login"]),
    ("r[1-2]n[08-09]", ["r1n08", "r1n09", "r2n08", "r2n09"]),
    ("a[9-11]", ["a9", "a10", "a11"]),
    ("n[01-3],n[1,3-4]", ["n01", "n02", "n03", "n1", "n3", "n4"]),
])
def test_expand_hostlist(text, names):
    assert expand_hostlist(text) == names


@pytest.mark.parametrize("bad", ["n[1-3", "n]1[", "n[3-1]", "n[a-b]"])
def test_expand_hostlist_refuses_malformed(bad):
    with pytest.raises(SlurmEnvError, match="hostlist"):
        expand_hostlist(bad)


def test_folder_name_never_climbs_out():
    assert folder_name("gpu-07.example.org") == "gpu-07.example.org"
    assert folder_name("../etc") == "%2E.%2Fetc"
    assert folder_name("..") == "%2E."
    assert folder_name("a b/c") == "a%20b%2Fc"
    assert folder_name("") == "%00"
    for name in ("..", "../x", "a/b", ".hidden", "x\ny"):
        assert "/" not in folder_name(name) and not folder_name(name).startswith(".")


def _env(**kw):
    return {"SLURM_JOB_NODELIST": "gpu[01-04]", "SLURM_NNODES": "4", "SLURM_NODEID": "2",
            "SLURMD_NODENAME": "gpu03", **kw}


def test_slurm_world_from_env():
    w = slurm_world(_env())
    assert (w.master, w.node_rank, w.nnodes, w.host) == ("gpu01", 2, 4, "gpu03")
    assert w.hosts == ("gpu01", "gpu02", "gpu03", "gpu04")
    # a step over part of the job: the step's variables win
    w = slurm_world(_env(SLURM_STEP_NODELIST="gpu[03-04]", SLURM_STEP_NUM_NODES="2", SLURM_NODEID="0"))
    assert (w.master, w.node_rank, w.nnodes, w.hosts) == ("gpu03", 0, 2, ("gpu03", "gpu04"))


@pytest.mark.parametrize("change, match", [
    ({"SLURM_JOB_NODELIST": None}, "SLURM_JOB_NODELIST is not set"),
    ({"SLURM_NODEID": None}, "SLURM_NODEID"),
    ({"SLURM_NODEID": "4"}, "not below the node count 4"),
    ({"SLURM_NNODES": "3"}, "node count says 3"),
    ({"SLURMD_NODENAME": "gpu04"}, "SLURMD_NODENAME='gpu04' but node 2"),
])
def test_slurm_world_refuses_a_world_that_would_split(change, match):
    env = {k: v for k, v in {**_env(), **change}.items() if v is not None}
    with pytest.raises(SlurmEnvError, match=match):
        slurm_world(env)


def test_node_inventory_copies_the_operators_vars(tmp_path):
    inv_file = tmp_path / "prod.ini"
    inv_file.write_text("[gpu]\ngpu-07 ansible_host=10.0.0.7 ansible_user=ops gpus_per_node=8\n"
                        "[gpu:vars]\ngpu_sku=h200-sxm-141gb\nnccl_env={'NCCL_NVLS_ENABLE': '0'}\n")
    inv = load_inventory(str(inv_file))
    assert find_host(inv, "gpu-07").name == "gpu-07"
    assert find_host(inv, "gpu-07.cluster.local").name == "gpu-07"   # short name
    assert find_host(inv, "10.0.0.7").name == "gpu-07"               # ansible_host
    assert find_host(inv, "gpu-08") is None
    doc = node_inventory("gpu-07", find_host(inv, "gpu-07"))
    out = tmp_path / "node.yml"
    import yaml
    out.write_text(yaml.safe_dump(doc))
    h = load_inventory(str(out)).hosts["gpu-07"]
    assert h.connection == "local"
    assert h.vars["gpu_sku"] == "h200-sxm-141gb" and h.vars["gpus_per_node"] == 8
    assert h.vars["nccl_env"] == {"NCCL_NVLS_ENABLE": "0"}
    assert "ansible_host" not in h.vars and "ansible_user" not in h.vars
    assert "gpu" in h.groups
    assert node_inventory("n1") == {"all": {"hosts": {"n1": {"ansible_connection": "local"}}}}


def test_node_inventory_of_a_host_reached_by_ssh_host_and_sudo(tmp_path):
    """A host written with the older ``ansible_ssh_host`` is found by that address, and its node inventory
    (the local connection) drops sudo and SSH settings: become is refused with the local connection, and the
    node runs as the user Slurm started it as."""
    from gpuaccept.config.hostvars import check_host
    inv_file = tmp_path / "prod.ini"
    inv_file.write_text("[gpu]\ngpu-07 ansible_ssh_host=10.0.0.7 ansible_user=ops ansible_become=yes "
                        "ansible_become_user=root ansible_private_key_file=~/.ssh/id_fleet gpus_per_node=8\n")
    inv = load_inventory(str(inv_file))
    assert find_host(inv, "10.0.0.7").name == "gpu-07"
    doc = node_inventory("gpu-07", find_host(inv, "gpu-07"))
    import yaml
    out = tmp_path / "node.yml"
    out.write_text(yaml.safe_dump(doc))
    h = load_inventory(str(out)).hosts["gpu-07"]
    assert h.connection == "local" and h.vars["gpus_per_node"] == 8
    assert not [v for v in h.vars if v.startswith(("ansible_become", "ansible_ssh", "ansible_private"))]
    assert check_host(h, str(out))["gpus_per_node"] == 8  # not refused as become with the local connection


def test_worst_exit():
    assert worst_exit({"a": 0, "b": 0}) == 0
    assert worst_exit({"a": 0, "b": 1}) == 1
    assert worst_exit({"a": 0, "b": None}) == 3
    assert worst_exit({"a": 5, "b": 0}) == 0    # -k left a node without tests
    assert worst_exit({"a": 5, "b": 5}) == 5    # nothing ran anywhere
    assert worst_exit({}) == 3
    assert worst_exit({"a": 0, "b": -9}) == 3   # b's pytest SIGKILLed (the OOM killer): not a pass


def test_allreduce_pure_parts():
    assert node_addr("NodeName=n1 Arch=x86_64 NodeAddr=127.0.0.2 NodeHostName=localhost") == "127.0.0.2"
    assert node_addr("NodeName=n1 State=IDLE") is None
    assert node_addrs("NodeName=n1 NodeAddr=10.0.0.1 State=IDLE\nNodeName=n2 Arch=x NodeAddr=10.0.0.2\n"
                      "NodeName=n3 State=DOWN\n") == {"n1": "10.0.0.1", "n2": "10.0.0.2"}
    assert job_port("1234", 1) != job_port("1234", 2) and 20000 <= job_port("99999", 3) < 30000
    w = slurm_world(_env())
    a = probe_args({"backend": "gloo", "master_addr": "10.0.0.1", "master_port": 23456}, w)
    assert a == {"backend": "gloo", "master_addr": "10.0.0.1", "master_port": 23456, "nnodes": 4,
                 "node_rank": 2, "host": "gpu03", "hosts": ["gpu01", "gpu02", "gpu03", "gpu04"]}
    ok = json.dumps({"ok": True, "rows": []})
    res = results_from_outputs(["a", "b", "c", "d"], {
        "a": ("log line\n" + ok + "\n", ""),
        "b": (json.dumps({"failed": True, "msg": "unknown argument(s) ['x']"}) + "\n", ""),
        "c": ("", "srun: error: c: task 2: Exited with exit code 127\npython3: not found\n"),
        "d": (json.dumps({"ok": False, "outcome": "hung", "error": "rank 3 hung"}) + "\n", ""),
    }, timed_out=False)
    assert [res[h].kind for h in "abcd"] == ["ok", "crashed", "crashed", "failed"]
    assert res["b"].error == "probe failed: unknown argument(s) ['x']"
    assert res["c"].error == "no probe document: python3: not found"
    assert res["d"].error == "rank 3 hung"
    assert results_from_outputs(["a"], {}, timed_out=True)["a"].kind == "timeout"
    assert isinstance(res["a"], HostResult)


# ------------------------------------------------------------------------------------------------ real Slurm

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """munged + slurmctld + slurmd n1, n2, n3 (NodeAddr 127.0.0.2..4, one port each), torn down after."""
    yield from running_cluster(tmp_path_factory.mktemp("slurm"), n_nodes=3)


def _salloc(cluster, args: list[str], cwd: Path, timeout: float = 300):
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    return cluster.run(["salloc", "-N", "3", "--time=10", *args], timeout=timeout, cwd=str(cwd), env=env)


def test_hostlist_matches_scontrol(cluster):
    for text in ("n[1-3]", "gpu-[01-02,07],login", "r[1-2]n[08-09]", "a[9-11]", "n[01-3],m[1,3-4]"):
        res = cluster.run(["scontrol", "show", "hostnames", text])
        assert res.returncode == 0, res.stderr
        assert expand_hostlist(text) == res.stdout.split(), text


def test_suite_on_every_node_of_the_allocation(cluster, tmp_path):
    """salloc -N 3 + the launcher: three per-node report folders, each node testing itself under its Slurm
    name; n2's operator inventory declares a GPU SKU, so n2 (no GPU here) fails and the others pass."""
    inv = tmp_path / "prod.ini"
    inv.write_text("[gpu]\nn1\nn2 gpu_sku=h200-sxm-141gb\nn3\n")
    run_dir = tmp_path / "run"
    res = _salloc(cluster, [sys.executable, "-m", "gpuaccept.scaleout.slurm", "--reports", str(run_dir),
                            "--inventory", str(inv), "--", "-m", "health", "-k", "test_gpu_inventory",
                            "--history", "none"],
                  cwd=REPO)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    for n in ("n1", "n2", "n3"):
        folder = run_dir / "nodes" / n
        assert (folder / "results.json").is_file(), out
        assert list(folder.glob("junit-*.xml")), out
        results = json.loads((folder / "results.json").read_text())
        assert results["hosts"] == [n] and {t["host"] for t in results["tests"]} == {n}, results
        assert (folder / "exitcode").read_text().strip() == ("1" if n == "n2" else "0"), out
    assert "n2: pytest exit code 1" in out and "n1: pytest exit code 0" in out
    n2 = (run_dir / "nodes" / "n2" / "junit-health.xml").read_text()
    assert "n2: no NVIDIA GPU found" in n2 and "declares gpu_sku=h200-sxm-141gb" in n2, n2[:2000]
    # the join: gpuaccept.scaleout.merge where it is installed, else the launcher says where the node folders are
    import importlib.util
    if importlib.util.find_spec("gpuaccept.scaleout.merge"):
        assert (run_dir / "merged" / "results.json").is_file(), out
    else:
        assert "gpuaccept.scaleout.merge is not installed" in out


def test_node_missing_from_inventory_stops_before_srun(cluster, tmp_path):
    inv = tmp_path / "prod.ini"
    inv.write_text("n1\nn2\n")
    run_dir = tmp_path / "run"
    res = _salloc(cluster, [sys.executable, "-m", "gpuaccept.scaleout.slurm", "--reports", str(run_dir),
                            "--inventory", str(inv), "--", "-m", "health"], cwd=REPO, timeout=120)
    assert res.returncode == 4, res.stdout + res.stderr
    err = [line for line in res.stderr.splitlines() if line.startswith("gpuaccept.scaleout.slurm")]
    assert len(err) == 1 and "n3" in err[0] and str(inv) in err[0] and "Traceback" not in res.stderr
    assert not (run_dir / "nodes").exists()


def test_launcher_outside_an_allocation_is_bad_input(cluster, tmp_path):
    res = cluster.run([sys.executable, "-m", "gpuaccept.scaleout.slurm", "--", "-m", "health"], cwd=str(REPO),
                      env={"PYTHONPATH": str(REPO)})
    assert res.returncode == 4 and "not inside a Slurm allocation" in res.stderr and "Traceback" not in res.stderr


def test_allreduce_through_srun(cluster, tmp_path):
    """The probe's gloo path over 3 nodes, ranks launched by srun, world from SLURM_*; the first port is
    taken on node 0's address, so the collective is retried on the next one."""
    import socket
    blocker = socket.socket()
    blocker.bind(("127.0.0.2", 0))
    blocker.listen()
    taken = blocker.getsockname()[1]
    out = tmp_path / "ar.json"
    try:
        res = _salloc(cluster, [sys.executable, "-m", "gpuaccept.scaleout.slurm_allreduce", "--backend", "gloo",
                                "--port", str(taken), "--deadline-s", "120", "--json", str(out), "--args",
                                json.dumps({"min_bytes": 4096, "max_bytes": 65536, "iters": 2, "warmup": 1,
                                            "reps": 1})], cwd=tmp_path, timeout=400)
    finally:
        blocker.close()
    text = res.stdout + res.stderr
    assert res.returncode == 0, text
    doc = json.loads(out.read_text())
    assert doc["ok"] and doc["passed"] and doc["master_addr"] == "127.0.0.2", text
    assert doc["attempts"] == 2 and doc["master_port"] == taken + 1, doc
    n0 = doc["results"]["n1"]["doc"]
    assert n0["world_size"] == 3 and n0["nnodes"] == 3
    assert sorted((w["node_rank"], w["host"]) for w in n0["world"]) == [(0, "n1"), (1, "n2"), (2, "n3")]
    assert doc["busbw_gbps"] is not None and doc["at_bytes"] == 65536


def test_allreduce_under_min_busbw_fails_naming_that_option_as_its_limit(cluster, tmp_path):
    res = _salloc(cluster, [sys.executable, "-m", "gpuaccept.scaleout.slurm_allreduce", "--backend", "gloo",
                            "--min-busbw", "1000000", "--json", str(tmp_path / "ar.json"), "--args",
                            json.dumps({"min_bytes": 4096, "max_bytes": 65536, "iters": 2, "warmup": 1, "reps": 1})],
                  cwd=tmp_path, timeout=400)
    text = res.stdout + res.stderr
    assert res.returncode == 1, text
    line = next(ln for ln in text.splitlines() if "1e+06" in ln or "1000000" in ln)
    assert "[limit: --min-busbw]" in line and "nccl_internode_busbw_gbps" not in line, line


def test_allreduce_names_the_node_that_failed(cluster, tmp_path):
    """A bad probe argument on every node is a crash named per node, with the probe's message, exit 1."""
    out = tmp_path / "ar.json"
    res = _salloc(cluster, [sys.executable, "-m", "gpuaccept.scaleout.slurm_allreduce", "--backend", "gloo",
                            "--json", str(out), "--args", json.dumps({"dtype": "int7"})], cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    doc = json.loads(out.read_text())
    assert [h for h, _ in doc["culprits"]] == ["n1", "n2", "n3"]
    assert all("dtype must be one of" in why for _, why in doc["culprits"])
    assert "FAIL: n1: probe failed: dtype must be one of" in res.stdout


def _workers_of(cluster, node: str, marker_hint: str = "--worker") -> list[int]:
    """pids of nccl_allreduce workers started by srun for Slurm node ``node`` of ``cluster`` (from /proc:
    another test cluster, under another xdist worker, has its own SLURM_CONF)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            env = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"nccl_allreduce.py") for a in cmd) and marker_hint.encode() in cmd \
                and f"SLURMD_NODENAME={node}".encode() in env \
                and f"SLURM_CONF={cluster.env['SLURM_CONF']}".encode() in env:
            pids.append(int(d.name))
    return pids


def test_allreduce_names_a_stalled_node(cluster, tmp_path):
    """n2's rank is stopped (SIGSTOP) mid-collective: n2's probe sees its own rank stall and is named; the
    other nodes are aborted, not blamed."""
    import signal
    import subprocess
    import time
    out = tmp_path / "ar.json"
    env = {**cluster.now_env(), "PYTHONPATH": str(REPO)}
    cmd = ["salloc", "-N", "3", "--time=10", sys.executable, "-m", "gpuaccept.scaleout.slurm_allreduce", "--backend",
           "gloo", "--deadline-s", "120", "--stall-s", "3", "--json", str(out), "--args",
           json.dumps({"min_bytes": 1 << 20, "max_bytes": 1 << 26, "iters": 50, "warmup": 1, "reps": 5})]
    proc = subprocess.Popen(cmd, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    stopped = []
    try:
        end = time.monotonic() + 180
        while not stopped and time.monotonic() < end and proc.poll() is None:
            pids = _workers_of(cluster, "n2")
            if pids:
                time.sleep(2)  # let the ranks meet and start the collectives
                for pid in _workers_of(cluster, "n2"):
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
            time.sleep(0.2)
        text, _ = proc.communicate(timeout=300)
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
    assert stopped, f"no worker of n2 found to stop\n{text if proc.returncode is not None else ''}"
    assert proc.returncode == 1, text
    doc = json.loads(out.read_text())
    assert [h for h, _ in doc["culprits"]] == ["n2"] and doc["singled_out"], doc["culprits"]
    assert "stall" in doc["culprits"][0][1] or "stopped" in doc["culprits"][0][1], doc["culprits"]
    assert doc["results"]["n1"]["kind"] in ("aborted", "failed") and doc["results"]["n3"]["kind"] != "ok"


# ------------------------------------------------------------------------------------------------ faults

# loaded into every node's pytest (-p): a real SIGKILL after the node's first test, as the OOM killer or a
# scancel of the step would; on n2 only pytest dies (its task records -9), on n3 the node's task dies with it
KILLER = """
import os, signal
def pytest_runtest_logfinish(nodeid, location):
    node = os.environ.get("SLURMD_NODENAME")
    if node == "n3":
        os.kill(os.getppid(), signal.SIGKILL)
    if node in ("n2", "n3"):
        os.kill(os.getpid(), signal.SIGKILL)
"""


def _merged_verdicts(run_dir: Path) -> dict[str, str]:
    head = (run_dir / "merged" / "summary.md").read_text().split("\n## ")[0]
    return {ln.split("`")[1]: ln.split("**")[1] for ln in head.splitlines() if ln.startswith("- **")}


def test_killed_nodes_are_errors_in_the_joined_report(cluster, tmp_path):
    """n2's pytest and n3's whole task are SIGKILLed after their first test. Before: n2's exit code -9 counted
    as a pass (worst exit 0) and its one test made it PASS; n3 (no exit code) was left out of the join, so
    the joined report said PASS for every host it named. After: exit 3, n2 and n3 ERROR 'did not finish'."""
    (tmp_path / "killer_plugin.py").write_text(KILLER)
    run_dir = tmp_path / "run"
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)])}
    res = cluster.run(["salloc", "-N", "3", "--time=10", sys.executable, "-m", "gpuaccept.scaleout.slurm", "--reports",
                       str(run_dir), "--", "-p", "killer_plugin", "-m", "health", "-k", "test_gpu_inventory",
                       "--history", "none"],
                      timeout=300, cwd=str(REPO), env=env)
    out = res.stdout + res.stderr
    assert res.returncode == 3, out
    assert "n2: pytest exit code -9 (killed by signal 9)" in out and "n3: pytest exit code missing" in out, out
    assert _merged_verdicts(run_dir) == {"n1": "SKIP", "n2": "ERROR", "n3": "ERROR"}, out  # no GPU here: skipped
    summary = (run_dir / "merged" / "summary.md").read_text()
    assert "n2: the run in" in summary and "did not finish" in summary and "n3: the run in" in summary
    assert (run_dir / "merged" / "failed-hosts.txt").read_text() == "n2\nn3\n"


def test_a_node_that_cannot_write_its_folder_is_an_error_not_missing(cluster, tmp_path):
    """The shared folder is not writable on n2 (here: a file where its folder goes). Before: a traceback on n2
    and n2 absent from the joined report (n1, n3 only: no host failed). After: one line naming n2 and
    the path, exit 3, n2 ERROR 'no results from this node' in the joined report."""
    run_dir = tmp_path / "run"
    (run_dir / "nodes").mkdir(parents=True)
    (run_dir / "nodes" / "n2").write_text("not a folder\n")
    res = _salloc(cluster, [sys.executable, "-m", "gpuaccept.scaleout.slurm", "--reports", str(run_dir), "--", "-m",
                            "health", "-k", "test_gpu_inventory", "--history=none"], cwd=REPO)
    out = res.stdout + res.stderr
    assert res.returncode == 3, out
    assert "Traceback" not in out and "n2: cannot create its report folder" in out, out
    assert _merged_verdicts(run_dir) == {"n1": "SKIP", "n2": "ERROR", "n3": "SKIP"}, out
    assert "n2: no results from this node" in (run_dir / "merged" / "summary.md").read_text()
    # launching again into the same folder is refused before srun: nothing of the first run is touched
    again = _salloc(cluster, [sys.executable, "-m", "gpuaccept.scaleout.slurm", "--reports", str(run_dir), "--", "-m",
                              "health", "-k", "test_gpu_inventory"], cwd=REPO)
    err = [ln for ln in again.stderr.splitlines() if ln.startswith("gpuaccept.scaleout.slurm")]
    assert again.returncode == 4 and len(err) == 1 and "already holds a run" in err[0], again.stdout + again.stderr
    # a system folder is refused alike, before anything is made there
    sysdir = _salloc(cluster, [sys.executable, "-m", "gpuaccept.scaleout.slurm", "--reports", "/usr/gpuaccept-run",
                               "--", "-m", "health"], cwd=REPO)
    err = [ln for ln in sysdir.stderr.splitlines() if ln.startswith("gpuaccept.scaleout.slurm")]
    assert sysdir.returncode == 4 and len(err) == 1 and "inside the system folder /usr" in err[0], sysdir.stderr
    assert not os.path.exists("/usr/gpuaccept-run")
    assert (run_dir / "nodes" / "n1" / "exitcode").read_text() == "0\n"


def test_an_srun_arg_typo_is_bad_input_not_three_missing_nodes(cluster, tmp_path):
    """--srun-arg=--gpu-per-nodes=1 (srun does not know it). Before: exit 3 and 'no exit code' for every node,
    as if the nodes had died. After: exit 4, one line saying srun stopped before any task started."""
    run_dir = tmp_path / "run"
    res = _salloc(cluster, [sys.executable, "-m", "gpuaccept.scaleout.slurm", "--reports", str(run_dir),
                            "--srun-arg=--gpu-per-nodes=1", "--", "-m", "health"], cwd=REPO, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 4, out
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("gpuaccept.scaleout.slurm")]
    assert len(err) == 1 and "before any node's task started" in err[0] and "--gpu-per-nodes=1" in err[0], out
    assert "no exit code" not in out and not (run_dir / "merged").exists()


@pytest.mark.parametrize("args, bad", [
    (["--gpus-per-node=8", "--ntasks-per-node=2"], "--ntasks-per-node=2"),
    (["--ntasks-per-n=2"], "--ntasks-per-n=2"),  # a unique prefix, as srun's getopt reads it
    (["-n4"], "-n4"), (["-N", "2"], "-N"), (["--nodes=2"], "--nodes=2"), (["--exclude=n3"], "--exclude=n3"),
    (["-w", "n1"], "-w"),
    (["--gpus-per-node=8", "--ntasks-per-gpu=1", "--mem=0", "--exclusive", "--export=ALL", "-l"], None),
])
def test_layout_arg(args, bad):
    assert layout_arg(args) == bad


def test_an_srun_arg_that_changes_the_task_layout_is_refused(cluster, tmp_path):
    """--srun-arg=--ntasks-per-node=2: srun takes the last of two such options, so two tasks per node ran
    pytest into the same node folder (the second refused it, or both wrote it: counted twice). After: exit 4,
    one line, before srun."""
    run_dir = tmp_path / "run"
    res = _salloc(cluster, [sys.executable, "-m", "gpuaccept.scaleout.slurm", "--reports", str(run_dir),
                            "--srun-arg=--ntasks-per-node=2", "--", "-m", "health"], cwd=REPO, timeout=120)
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("gpuaccept.scaleout.slurm")]
    assert res.returncode == 4 and len(err) == 1 and "--ntasks-per-node=2" in err[0], res.stdout + res.stderr
    assert "sets which nodes run a task or how many" in err[0]
    assert not (run_dir / "nodes").exists()


def test_take_history():
    assert take_history(["-m", "health", "--history", "/h.sqlite", "-x"]) == (["-m", "health", "-x"], "/h.sqlite")
    assert take_history(["--history=none", "-k", "x"]) == (["-k", "x"], "none")
    assert take_history(["-m", "health"]) == (["-m", "health"], None)


def test_each_job_is_one_run_in_the_history(cluster, tmp_path):
    """Two jobs, -- --history H. Before: each node recorded its own run into H at once, under the run id of its
    folder's name ('n1', 'n2', 'n3'), so the second job replaced the first job's rows: H held 3 runs named
    after nodes, the first job lost. After: the nodes keep no history; the joined run is recorded once per
    job, under the report folder's name, with every node's tests."""
    import sqlite3
    db = tmp_path / "h.sqlite"
    for job in ("job1", "job2"):
        res = _salloc(cluster, [sys.executable, "-m", "gpuaccept.scaleout.slurm", "--reports", str(tmp_path / job), "--",
                                "-m", "health", "-k", "test_gpu_inventory", "--history", str(db)], cwd=REPO)
        assert res.returncode == 0, res.stdout + res.stderr
    con = sqlite3.connect(db)
    assert con.execute("SELECT run_id FROM runs ORDER BY started").fetchall() == [("job1",), ("job2",)]
    assert con.execute("SELECT run_id, count(*) FROM tests GROUP BY run_id").fetchall() == [("job1", 3), ("job2", 3)]
    assert sorted(h for (h,) in con.execute("SELECT host FROM host_verdicts WHERE run_id='job2'")) == ["n1", "n2", "n3"]


def test_the_joined_run_is_recorded_below_the_folder_the_launcher_runs_in(cluster, tmp_path):
    """No --history: the joined run goes to reports/history.sqlite below the operator's folder, beside the default
    reports/slurm-<job>, as a plain run's history does, never into the checkout (a folder the operator did not
    name). A relative --history is read from that folder too."""
    import sqlite3
    work = tmp_path / "ops"
    work.mkdir()
    before = (REPO / "reports" / "history.sqlite").stat().st_mtime if (REPO / "reports" / "history.sqlite").exists() \
        else None
    res = _salloc(cluster, [sys.executable, "-m", "gpuaccept.scaleout.slurm", "--",
                            "-m", "health", "-k", "test_gpu_inventory"], cwd=work)
    assert res.returncode == 0, res.stdout + res.stderr
    db = work / "reports" / "history.sqlite"
    (run,) = [p.name for p in (work / "reports").iterdir() if p.name.startswith("slurm-")]
    assert sqlite3.connect(db).execute("SELECT run_id FROM runs").fetchall() == [(run,)]
    after = (REPO / "reports" / "history.sqlite").stat().st_mtime if (REPO / "reports" / "history.sqlite").exists() \
        else None
    assert after == before  # the checkout's history untouched
    res = _salloc(cluster, [sys.executable, "-m", "gpuaccept.scaleout.slurm", "--reports", "second", "--",
                            "-m", "health", "-k", "test_gpu_inventory", "--history", "mine.sqlite"], cwd=work)
    assert res.returncode == 0, res.stdout + res.stderr
    assert sqlite3.connect(work / "mine.sqlite").execute("SELECT run_id FROM runs").fetchall() == [("second",)]


def test_a_node_matching_two_inventory_hosts_is_named_as_such(cluster, tmp_path):
    """Slurm node n1, inventory hosts n1.rack-a and n1.rack-b (the same short name). Before: 'node(s) n1 of the
    allocation are not hosts of this inventory', which is untrue and hides the cause. After: one line naming
    both hosts, exit 4, before srun."""
    inv = tmp_path / "prod.ini"
    inv.write_text("n1.rack-a\nn1.rack-b\nn2\nn3\n")
    res = _salloc(cluster, [sys.executable, "-m", "gpuaccept.scaleout.slurm", "--reports", str(tmp_path / "run"),
                            "--inventory", str(inv), "--", "-m", "health"], cwd=REPO, timeout=120)
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("gpuaccept.scaleout.slurm")]
    assert res.returncode == 4 and len(err) == 1, res.stdout + res.stderr
    assert "node n1 of the allocation matches 2 hosts" in err[0] and "n1.rack-a, n1.rack-b" in err[0], err
    assert not (tmp_path / "run" / "nodes").exists()
