"""What the inter-node all-reduce (suites' test_allreduce_multinode) says when it cannot be judged or fails:
a host that is down or whose Python has no torch is an ERROR naming that host alone; a ring below its floor
fails naming the size, the world, the hosts and the group var. Real sshd nodes on 127.0.0.41+, .61+ and
.131+, real gloo ranks."""
from __future__ import annotations

import json
import re

from project_helpers import failed_hosts, junit, make_project, run_pytest, strict_json


def _multinode_run(tmp_path, base, sshds, pythons: dict[int, str] | None = None):
    """``-k multinode`` (gloo, small) over ``sshds`` (node i's Python ``pythons[i]`` where given); stops the
    nodes; returns (report folder, the finished process, the test's results.json record), asserting exit 1."""
    from project_helpers import make_project
    from sshd import write_known_hosts
    try:
        kh = write_known_hosts(base / "kh", sshds)
        gloo = {"backend": "gloo", "min_bytes": 4096, "max_bytes": 16384, "factor": 4, "iters": 2, "warmup": 1}
        inv = make_project(tmp_path, [], kh, extra_suite="", name="test_zz_none.py",
                           inventory_extra="\n".join(n.inventory_line(**({"python": pythons[i]} if i in (pythons or {})
                                                                           else {})) for i, n in enumerate(sshds))
                           + f"\n[gpu:vars]\nnccl_stall_s=20\nnccl_internode_probe_args={json.dumps(gloo)}\n")
        rep = tmp_path / "rep"
        res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", kh, "--reports", str(rep),
                         "-k", "multinode", "--probe-timeout", "60", timeout=150)
    finally:
        for s in sshds:
            s.stop()
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    test = next(t for t in strict_json((rep / "results.json").read_text())["tests"]
                if t["nodeid"].endswith("test_allreduce_multinode"))
    return rep, res, test


def test_unreachable_host_of_the_inter_node_allreduce_is_an_error_not_a_failure(tmp_path, tmp_path_factory):
    """with one of three sshd nodes down, test_allreduce_multinode FAILED
    "u2: unreachable: ..." (pytest: 1 failed), as if u2's GPUs or network were bad; an unreachable host is an
    error everywhere else. Now the test is an ERROR naming u2, and u2 alone is in failed-hosts.txt."""
    from sshd import start_sshd
    base = tmp_path_factory.mktemp("unreach")
    sshds = [start_sshd(base, address=f"127.0.0.{41 + i}", name=f"u{i + 1}") for i in range(3)]
    sshds[1].stop()
    rep, res, test = _multinode_run(tmp_path, base, sshds)
    assert test["outcome"] == "error" and test["message"].startswith("u2: unreachable"), test
    assert failed_hosts(rep / "failed-hosts.txt") == ["u2"]
    assert "1 error" in res.stdout and "failed" not in res.stdout.splitlines()[-1], res.stdout[-500:]


def test_allreduce_host_without_torch_is_an_error_naming_the_interpreter(tmp_path, tmp_path_factory):
    """A host whose Python has no torch (a real interpreter: a venv made here without it): its ranks each died of
    ModuleNotFoundError and the host was FAILED as if its GPUs or network were bad. Now the probe says so before
    it spawns a rank, and the test is an ERROR naming the host and the interpreter; that host alone is listed."""
    import subprocess
    import sys

    from sshd import start_sshd
    bare = tmp_path / "notorch"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    base = tmp_path_factory.mktemp("notorch")
    sshds = [start_sshd(base, address=f"127.0.0.{61 + i}", name=f"t{i + 1}") for i in range(2)]
    rep, res, test = _multinode_run(tmp_path, base, sshds, {1: str(bare / "bin" / "python")})
    assert test["outcome"] == "error", test
    assert test["message"].startswith("t2: ") and "torch is not installed for " in test["message"], test
    assert str(bare) in test["message"], test
    assert failed_hosts(rep / "failed-hosts.txt") == ["t2"]


# -- the inter-node ring's failure line: size, world, hosts and the group var, as on one node ----------------

def test_ring_below_its_floor_names_size_world_hosts_and_the_var(tmp_path):
    """Two real sshd nodes (127.0.0.131-132) x 1 gloo rank; a floor (group var) no loopback reaches. Before:
    "fleet: internode_busbw_gbps 0.3 GB/s < min 1e+06 GB/s" (no size, no world, no hosts, no var)."""
    from sshd import start_sshd, write_known_hosts
    base = tmp_path / "nodes"
    base.mkdir()
    sshds = [start_sshd(base, address=f"127.0.0.{131 + i}", name=f"rg{i + 1}") for i in range(2)]
    try:
        kh = write_known_hosts(base / "known_hosts", sshds)
        probe_args = {"backend": "gloo", "min_bytes": 4096, "max_bytes": 65536, "factor": 4, "iters": 3, "warmup": 1}
        vars_ = ("[gpu:vars]\nnccl_ranks_per_node=1\nnccl_stall_s=20\nnccl_internode_busbw_gbps=1000000\n"
                 f"nccl_internode_probe_args={json.dumps(probe_args)}\n")
        inv = make_project(tmp_path, sshds, kh, extra_suite="", name="test_zz_none.py", inventory_extra=vars_)
        rep = tmp_path / "rep"
        res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", kh, "--reports", str(rep),
                         "-k", "multinode", "--probe-timeout", "90", timeout=150)
        case = next(c for c in junit(rep / "junit-nccl.xml") if c["name"] == "test_allreduce_multinode")
        assert case["outcome"] == "failure", res.stdout[-3000:]
        assert re.fullmatch(r"fleet: internode_busbw_gbps [\d.e+-]+ GB/s < min 1e\+06 GB/s \(ring: in-place busbw "
                            r"at 65536 B \(64 KiB\), world size 2, gloo; 2 hosts x 1 ranks: rg1, rg2\) "
                            r"\[limit: group var nccl_internode_busbw_gbps\]", case["message"]), case["message"]
    finally:
        for s in sshds:
            s.stop()
