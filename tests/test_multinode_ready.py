"""The inter-node all-reduce among the hosts that are reachable and ready, and its rendezvous checked before
any rank starts: real sshd nodes on 127.0.0.151+ (tests/sshd.py), real gloo ranks, the node-side
rendezvous check run by the real probe on real sockets.

A host that cannot be reached (its name does not resolve) is an ERROR of that host alone, with its own
connectivity cause, and the pair that works is measured; a rendezvous address that no node can resolve, or a
port nothing listens on, is a connectivity finding within seconds naming the address, never a 180 s hang
blamed on ranks."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from project_helpers import failed_hosts, make_project, run_pytest, strict_json

from gpuaccept.reporting.folder import run_figures

GLOO = {"backend": "gloo", "min_bytes": 4096, "max_bytes": 16384, "factor": 4, "iters": 2, "warmup": 1}
PROBES = Path(__file__).resolve().parent.parent / "gpuaccept" / "probes"


def _run(tmp_path, sshds, kh, extra_lines: str = "", vars_: str = "", timeout: float = 150):
    """``-k multinode`` over ``sshds`` (plus ``extra_lines`` of inventory); the finished process, the report
    folder and the test's results.json record."""
    inv = make_project(tmp_path, sshds, kh, extra_suite="", name="test_zz_none.py",
                       inventory_extra=extra_lines + "\n[gpu:vars]\nnccl_stall_s=20\n"
                                       f"nccl_internode_probe_args={json.dumps(GLOO)}\n" + vars_)
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", kh, "--reports", str(rep),
                     "-k", "multinode", "-s", "--probe-timeout", "60", timeout=timeout)
    doc = strict_json((rep / "results.json").read_text())
    test = next(t for t in doc["tests"] if t["nodeid"].endswith("test_allreduce_multinode"))
    return res, rep, doc, test


def test_pair_is_measured_beside_a_host_whose_name_does_not_resolve(tmp_path, tmp_path_factory):
    """Two reachable nodes and a third whose ansible_host does not resolve: before, the third voided the ring
    (no figure). Now the pair's busbw is measured and recorded, the third host's entry says "cannot resolve"
    with a connectivity cause filed under it, and the two good hosts carry none of its action."""
    from sshd import start_sshd, write_known_hosts
    base = tmp_path_factory.mktemp("ready")
    sshds = [start_sshd(base, address=f"127.0.0.{151 + i}", name=f"rd{i + 1}") for i in range(2)]
    try:
        kh = write_known_hosts(base / "kh", sshds)
        ghost = sshds[0].inventory_line("rd3").replace("ansible_host=127.0.0.151", "ansible_host=no-such-host.invalid")
        res, rep, doc, test = _run(tmp_path, sshds, kh, ghost)
    finally:
        for s in sshds:
            s.stop()
    out = res.stdout[-4000:] + res.stderr[-2000:]
    assert res.returncode == 1, out
    assert test["outcome"] == "error", test
    assert test["message"].startswith("rd3: unreachable: cannot resolve no-such-host.invalid"), test["message"]
    assert "not measured: the all-reduce runs among the 2 ready hosts (rd1, rd2)" in test["message"]
    assert len(test["message"].splitlines()) == 1, test["message"]
    figs = run_figures(doc)
    busbw = next(f for f in figs if f["check"] == "internode_busbw_gbps")
    assert isinstance(busbw["value"], float) and busbw["value"] > 0, busbw
    assert busbw["extra"]["hosts"] == ["rd1", "rd2"], busbw
    print(f"\npair rd1+rd2 beside an unresolvable rd3: busbw {busbw['value']} GB/s at {busbw['extra']['bytes']} B")
    assert "2 hosts x 1 ranks = world 2, gloo, no NCCL (gloo: NCCL_* variables are not read)" in res.stdout, out
    assert "NCCL None" not in res.stdout, out
    causes = test["causes"]
    assert [c["host"] for c in causes] == ["rd3"], causes
    assert causes[0]["class"] == "connectivity" and causes[0]["kind"] == "name_unresolved", causes
    assert failed_hosts(rep / "failed-hosts.txt") == ["rd3"]
    # each host's action comes from its own findings: the two good hosts are in no action list
    for f in rep.glob("hosts-*.txt"):
        listed = failed_hosts(f)
        assert "rd1" not in listed and "rd2" not in listed, (f.name, listed)
    assert "rd3" in failed_hosts(rep / "hosts-check-network.txt")


def test_unresolvable_rendezvous_is_a_connectivity_finding_within_seconds(tmp_path, tmp_path_factory):
    """Two nodes that cannot resolve the rendezvous address (nccl_master_addr names no host they know): before,
    every rank waited for the store until the deadline ("all-reduce hung: ranks [0] did not finish", 180 s at
    the default, blamed on ranks). Now the check before the ranks names each node that cannot resolve it, with a
    connectivity cause filed under that node and the address in its evidence, in seconds; no rank started."""
    from sshd import start_sshd, write_known_hosts
    base = tmp_path_factory.mktemp("rdv")
    sshds = [start_sshd(base, address=f"127.0.0.{154 + i}", name=f"rv{i + 1}") for i in range(2)]
    try:
        kh = write_known_hosts(base / "kh", sshds)
        res, rep, doc, test = _run(tmp_path, sshds, kh, vars_="nccl_master_addr=no-such-rendezvous.invalid\n")
    finally:
        for s in sshds:
            s.stop()
    out = res.stdout[-4000:] + res.stderr[-2000:]
    assert res.returncode == 1, out
    assert test["outcome"] == "error", test
    lines = test["message"].splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["rv1", "rv2"], lines
    for ln in lines:
        assert "cannot reach the rendezvous no-such-rendezvous.invalid:" in ln and "cannot resolve" in ln, ln
        assert "hung" not in ln and "did not finish" not in ln, ln
    assert test["duration_s"] < 30, test["duration_s"]
    print(f"\nrendezvous finding after {test['duration_s']} s (the test's measured duration)")
    causes = {c["host"]: c for c in test["causes"]}
    assert sorted(causes) == ["rv1", "rv2"], test["causes"]
    for h, c in causes.items():
        assert (c["class"], c["kind"]) == ("connectivity", "rendezvous_unreachable"), c
        ev = c["evidence"]
        assert ev["from_host"] == h and ev["address"] == "no-such-rendezvous.invalid" and ev["resolved"] is False, c
        assert isinstance(ev["port"], int) and ev["error"].startswith("cannot resolve"), c
    assert failed_hosts(rep / "failed-hosts.txt") == ["rv1", "rv2"]
    assert sorted(failed_hosts(rep / "hosts-check-network.txt")) == ["rv1", "rv2"]
    fail = next(f for f in run_figures(doc) if f["check"] == "internode_failure")
    assert sorted(fail["extra"]["rendezvous"]) == ["rv1", "rv2"], fail["extra"]
    # no rank was started: no figure of a collective
    assert not [f for f in run_figures(doc) if f["check"] in ("internode_busbw_gbps", "internode_allreduce_table")]


# -- the node side: the real probe's check on real sockets --------------------------------------------------

def _check(args: dict) -> dict:
    res = subprocess.run([sys.executable, str(PROBES / "nccl_allreduce.py"), json.dumps(args)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rendezvous_port_nothing_listens_on_is_reported_within_the_check():
    """Node 1's check against a port where nothing listens: connection refused until the check's end (3 s here),
    then a document saying so (resolved, not connected, the error), not a hang."""
    port = _free_port()
    t0 = time.monotonic()
    doc = _check({"check": "rendezvous", "nnodes": 2, "node_rank": 1, "master_addr": "127.0.0.1",
                  "master_port": port, "marker": "m", "hosts": ["a", "b"], "check_s": 3, "iters": 5})
    took = time.monotonic() - t0
    rv = doc["rendezvous"]
    assert rv["resolved"] is True and rv["connected"] is False and rv["stage"] == "connect", rv
    assert rv["error"] == f"cannot connect to 127.0.0.1 port {port}: Connection refused", rv
    assert 2.5 <= rv["seconds"] <= 4 and took < 10, (rv, took)


def test_rendezvous_check_meets_node_0_and_refuses_another_collective():
    """Node 0 listens and answers with the marker; node 1 (started first: it retries the refused connection)
    reaches it. A node of another collective (another marker) on the same port is not this rendezvous."""
    port = _free_port()
    base = {"check": "rendezvous", "nnodes": 2, "master_addr": "localhost", "master_port": port, "marker": "m1",
            "hosts": ["a", "b"], "check_s": 8}
    p1 = subprocess.Popen([sys.executable, str(PROBES / "nccl_allreduce.py"), json.dumps({**base, "node_rank": 1})],
                          stdout=subprocess.PIPE, text=True)
    time.sleep(2.0)  # node 1 has started and retries the refused connection (its Python starts in < 1.5 s)
    node0 = _check({**base, "node_rank": 0})
    node1 = json.loads(p1.communicate(timeout=60)[0].strip().splitlines()[-1])
    assert node0["rendezvous"]["connected"] and node0["rendezvous"]["seen"] == ["a", "b"], node0
    assert node0["rendezvous"]["seconds"] < 5, node0  # not the whole window: every host said hello
    assert node1["rendezvous"]["connected"] and node1["rendezvous"]["seconds"] >= 0.5, node1
    assert node0["torch"] is True and node0["python"] == sys.executable
    # another collective's node 1 (marker m2) against this one's node 0: answered, but not as its rendezvous
    p2 = subprocess.Popen([sys.executable, str(PROBES / "nccl_allreduce.py"),
                           json.dumps({**base, "node_rank": 1, "marker": "m2", "check_s": 3})],
                          stdout=subprocess.PIPE, text=True)
    node0 = _check({**base, "node_rank": 0, "check_s": 3})
    other = json.loads(p2.communicate(timeout=60)[0].strip().splitlines()[-1])["rendezvous"]
    assert not other["connected"] and other["stage"] == "handshake", other
    assert node0["rendezvous"]["missing"] == ["b"], node0


def test_rendezvous_failures_name_the_node_that_cannot_reach_it():
    """Pure: each node that cannot reach the address is named under its own host with a connectivity cause; when
    node 0 cannot listen, node 0 alone (the others' refused connections follow from it)."""
    from gpuaccept.runner import multinode as mn

    def R(h, **rv):
        base = {"address": "gpu-01", "port": 29500, "resolved": True, "connected": True, "stage": None, "error": None}
        return mn.HostResult(h, "ok", {"ok": True, "rendezvous": {**base, **rv}})
    bad = {"resolved": False, "connected": False, "stage": "resolve", "error": "cannot resolve gpu-01: Name or "
                                                                               "service not known"}
    got = mn.rendezvous_failures({"a": R("a"), "b": R("b", **bad), "c": R("c")}, ["a", "b", "c"])
    assert list(got) == ["b"] and got["b"].kind == "rendezvous"
    c = got["b"].cause
    assert (c.cls, c.kind, c.host) == ("connectivity", "rendezvous_unreachable", "b")
    assert c.evidence["from_host"] == "b" and c.evidence["address"] == "gpu-01" and c.evidence["port"] == 29500
    assert got["b"].error.startswith("cannot reach the rendezvous gpu-01:29500 (node 0, a;")
    refused = {"connected": False, "stage": "connect", "error": "cannot connect to 10.0.0.1 port 29500: Connection "
                                                                "refused"}
    listen = {"connected": False, "stage": "listen", "listening": False, "listen_error": "other",
              "error": "cannot listen on port 29500: Permission denied"}
    got = mn.rendezvous_failures({"a": R("a", **listen), "b": R("b", **refused)}, ["a", "b"])
    assert list(got) == ["a"] and got["a"].error.startswith("cannot host the rendezvous on port 29500")
    assert mn.rendezvous_failures({"a": R("a"), "b": R("b")}, ["a", "b"]) == {}
    assert mn.port_taken(R("a", **{**listen, "listen_error": "addr_in_use"}))
    down = mn.HostResult("a", "unreachable", None, "unreachable: refused")
    assert list(mn.rendezvous_failures({"a": down, "b": R("b", **refused)}, ["a", "b"])) == ["a"]


def test_unready_reads_the_nodes_facts():
    from gpuaccept.errors import PackageMissing
    from gpuaccept.runner import multinode as mn
    e = mn.unready("t2", {"ok": True, "python": "/opt/venv/bin/python", "torch": False})
    assert isinstance(e, PackageMissing) and e.msg.startswith("torch is not installed for /opt/venv/bin/python")
    assert (e.cause.cls, e.cause.kind, e.cause.host) == ("configuration", "package_missing", "t2")
    assert e.cause.evidence["package"] == "torch"
    assert mn.unready("t1", {"ok": True, "python": "/usr/bin/python3", "torch": True}) is None
