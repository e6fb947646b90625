"""What the inter-node all-reduce (suites' test_allreduce_multinode) says when it cannot be judged or fails:
a host that is down or whose Python has no torch is an ERROR naming that host alone; a ring below its floor
fails naming the size, the world, the hosts and the group var. Real sshd nodes on 127.0.0.41+, .61+ and
.131+, real gloo ranks."""
from __future__ import annotations

import json
import re

from project_helpers import failed_hosts, junit, make_project, run_pytest, strict_json


def _multinode_run(tmp_path, base, sshds, pythons: dict[int, str] | None = None, host_vars: dict[int, str] | None = None):
    """``-k multinode`` (gloo, small) over ``sshds`` (node i's Python ``pythons[i]`` where given, its inventory
    line ending in ``host_vars[i]``); stops the nodes; returns (report folder, the finished process, the test's
    results.json record), asserting exit 1."""
    from project_helpers import make_project
    from sshd import write_known_hosts
    try:
        kh = write_known_hosts(base / "kh", sshds)
        gloo = {"backend": "gloo", "min_bytes": 4096, "max_bytes": 16384, "factor": 4, "iters": 2, "warmup": 1}
        inv = make_project(tmp_path, [], kh, extra_suite="", name="test_zz_none.py",
                           inventory_extra="\n".join(n.inventory_line(**({"python": pythons[i]} if i in (pythons or {})
                                                                           else {})) + (host_vars or {}).get(i, "")
                                                      for i, n in enumerate(sshds))
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
    summary = (rep / "summary.md").read_text()  # u1 and u3 read SKIP saying why, not a bare SKIP
    assert summary.count("not judged by fleet-wide test_allreduce_multinode (ERROR filed under u2): u2: "
                         "unreachable") == 2, summary
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



def test_allreduce_host_whose_torch_fails_to_load_is_an_error_of_its_software(tmp_path, tmp_path_factory):
    """A host whose torch is installed but raises while it loads (a CUDA library missing: the dynamic loader's
    OSError): its ranks die in their setup, before the rendezvous. That host reads ERROR with the cause
    ``import_broken`` (configuration: fix-config), not FAIL check-network as a broken all-reduce would; the
    host waiting for it is not named."""
    import sys

    from sshd import start_sshd
    fake = tmp_path / "brokentorch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise OSError("libcudart.so.12: cannot open shared object file: '
                                      'No such file or directory")\n')
    py = tmp_path / "py-brokentorch"
    py.write_text(f"#!/bin/sh\nPYTHONPATH={fake.parent} exec {sys.executable} \"$@\"\n")
    py.chmod(0o755)
    base = tmp_path_factory.mktemp("brokentorch")
    sshds = [start_sshd(base, address=f"127.0.0.{71 + i}", name=f"b{i + 1}") for i in range(2)]
    rep, res, test = _multinode_run(tmp_path, base, sshds, {1: str(py)})
    assert test["outcome"] == "error", test
    assert test["message"].startswith("b2: rank ") and "(setup)" in test["message"], test
    assert "libcudart.so.12" in test["message"], test
    assert [(c["class"], c["kind"], c["host"]) for c in test["causes"]] == [("configuration", "import_broken", "b2")]
    assert test["action"]["action"] == "fix-config", test["action"]
    assert failed_hosts(rep / "failed-hosts.txt") == ["b2"]

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


# -- a node whose ranks run with a socket-interface setting that names no interface of it ---------------------

def test_missing_gloo_interface_of_one_node_blames_it_alone_as_its_configuration(tmp_path, tmp_path_factory):
    """Three real sshd nodes (127.0.0.191-193); node if2's Python is a wrapper exporting GLOO_SOCKET_IFNAME=eth9
    (no such interface). Before: "fleet: all-reduce over if1, if2, if3 failed and no host is singled out", filed
    under "fleet", check-network [connectivity]. Now if2 alone fails, fix-config [configuration] naming the
    variable and its value, decided from the probe's socket_ifnames facts, and the message names if2."""
    import sys

    from sshd import start_sshd
    base = tmp_path_factory.mktemp("ifname")
    wrap = tmp_path / "pywrap"
    wrap.write_text(f"#!/bin/sh\nexport GLOO_SOCKET_IFNAME=eth9\nexec {sys.executable} \"$@\"\n")
    wrap.chmod(0o755)
    sshds = [start_sshd(base, address=f"127.0.0.{191 + i}", name=f"if{i + 1}") for i in range(3)]
    rep, res, test = _multinode_run(tmp_path, base, sshds, {1: str(wrap)})
    assert test["outcome"] == "failed", test
    assert test["message"].startswith("if2: GLOO_SOCKET_IFNAME=eth9 (node environment) names no interface"), test
    assert "no host is singled out" not in test["message"] and "fleet" not in test["message"], test["message"]
    assert [f["host"] for f in test["failures"]] == ["if2"], test["failures"]
    action = test["failures"][0]["action"]
    assert (action["action"], action["cause"], action["kind"]) == ("fix-config", "configuration",
                                                                  "socket_ifname_missing"), action
    assert action["setting"] == "GLOO_SOCKET_IFNAME=eth9 (node environment)", action
    assert failed_hosts(rep / "failed-hosts.txt") == ["if2"]
    assert failed_hosts(rep / "hosts-fix-config.txt") == ["if2"]
    assert not (rep / "hosts-check-network.txt").exists() or failed_hosts(rep / "hosts-check-network.txt") == []


def test_a_socket_interface_set_in_the_inventory_is_named_as_the_inventorys(tmp_path, tmp_path_factory):
    """The same missing interface, set by host if2's inventory line (``nccl_env``) instead of its environment:
    the finding names the inventory's nccl_env, not "node environment" (an operator would search the node's
    profile files for a setting that only the inventory makes)."""
    from sshd import start_sshd
    base = tmp_path_factory.mktemp("ifname-inv")
    sshds = [start_sshd(base, address=f"127.0.0.{194 + i}", name=f"if{i + 1}") for i in range(2)]
    rep, res, test = _multinode_run(tmp_path, base, sshds, host_vars={1: " nccl_env='{\"GLOO_SOCKET_IFNAME\": \"eth9\"}'"})
    assert test["message"].startswith("if2: GLOO_SOCKET_IFNAME=eth9 (inventory nccl_env) names no interface"), test
    assert [f["host"] for f in test["failures"]] == ["if2"], test["failures"]
    assert test["failures"][0]["action"]["setting"] == "GLOO_SOCKET_IFNAME=eth9 (inventory nccl_env)", test


def test_inventory_nccl_socket_ifname_naming_no_interface_is_that_hosts_setting():
    """The probe's facts (``socket_settings`` over this machine's real interfaces) for the environment the
    controller gives a host whose inventory says nccl_socket_ifname=eth9: the judge names the inventory var
    and the value NCCL got; a prefix that matches, and gloo's own default, are no cause; NCCL's ``^``/``=``
    rules are NCCL's."""
    from gpuaccept.judging.multinode import interface_cause, nccl_environment
    from gpuaccept.probes._allreduce_args import host_interfaces, nccl_ifname_matches, socket_settings

    names = host_interfaces()
    assert "lo" in names and "eth9" not in names, names
    extra = nccl_environment({"nccl_socket_ifname": "eth9"})
    env = {**extra, "GLOO_SOCKET_IFNAME": "lo"}
    facts = socket_settings(env, extra, {}, "nccl", names)
    assert [(f["variable"], f["from"], f["used"], f["matched"]) for f in facts] == [
        ("GLOO_SOCKET_IFNAME", "probe", True, ["lo"]), ("NCCL_SOCKET_IFNAME", "inventory", True, [])], facts
    cause = interface_cause("n7", {"socket_ifnames": facts, "interfaces": names})
    assert (cause.cls, cause.kind, cause.host) == ("configuration", "socket_ifname_missing", "n7"), cause
    assert cause.evidence["setting"] == "nccl_socket_ifname (inventory, as NCCL_SOCKET_IFNAME==eth9)", cause
    # gloo's ranks never read NCCL_SOCKET_IFNAME: no cause of a gloo run
    assert interface_cause("n7", {"socket_ifnames": socket_settings(env, extra, {}, "gloo", names)}) is None
    ok = nccl_environment({"nccl_socket_ifname": "lo"})
    assert interface_cause("n7", {"socket_ifnames": socket_settings({**ok, "GLOO_SOCKET_IFNAME": "lo"}, ok, {},
                                                                     "nccl", names)}) is None
    assert nccl_ifname_matches("eth", ["eth0", "eth10", "lo"]) == ["eth0", "eth10"]
    assert nccl_ifname_matches("=eth1", ["eth1", "eth10"]) == ["eth1"]
    assert nccl_ifname_matches("^lo,docker", ["lo", "docker0", "ib0"]) == ["ib0"]
