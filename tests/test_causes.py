"""Cause before action (gpuaccept/causes.py and its flow to the reports): each finding carries the class of its
cause, set where the fact is known, and each host's action comes from its own findings. On real sshd nodes whose
Python lacks torch and nvidia-ml-py beside a name that does not resolve, every host reads its own cause: no host is
drained, no host takes another's action; and the cause travels in results.json, JUnit, summary.md and hosts-*.txt."""
from __future__ import annotations

import json

from gpuaccept.causes import CLASSES, Cause
from gpuaccept.errors import (AuthError, CommandTimeout, HostKeyError, HostUnreachable, InterpreterMissing,
                              Interrupted, NameUnresolved, NodeHeld, PackageMissing, ProbeError,
                              ProbeFolderUnwritable)
from project_helpers import bare_python, hardware_claims_without_evidence, junit, make_project, run_pytest


def test_every_node_error_names_its_cause_class_and_a_subclass_inherits_its_parents():
    want = {HostUnreachable: ("connectivity", "unreachable"), NameUnresolved: ("connectivity", "name_unresolved"),
            HostKeyError: ("connectivity", "host_key"), AuthError: ("connectivity", "auth"),
            CommandTimeout: ("tool", "timeout"), Interrupted: ("interruption", "interrupted"),
            ProbeError: ("tool", "probe_crashed"), PackageMissing: ("configuration", "package_missing"),
            InterpreterMissing: ("configuration", "interpreter_missing"), NodeHeld: ("contention", "held"),
            ProbeFolderUnwritable: ("configuration", "probe_folder_unwritable")}
    for cls, (c, k) in want.items():
        e = cls("gpu-01", "msg", {"x": 1})
        assert (e.cause.cls, e.cause.kind, e.cause.host, e.cause.evidence) == (c, k, "gpu-01", {"x": 1})
    assert isinstance(NameUnresolved("h", "m"), HostUnreachable)  # caught where an unreachable host is
    full = ProbeFolderUnwritable("gpu-01", "msg", {"full": True})  # ENOSPC, EDQUOT: the node's disk is full
    assert (full.cause.cls, full.cause.kind) == ("capacity", "probe_folder_full")


def test_a_cause_round_trips_through_json_and_refuses_an_unknown_class():
    c = Cause("capacity", "free_space", "gpu-01", None, 3, {"path": "/scratch", "free_gib": 0.25})
    assert Cause.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert Cause.from_dict({"class": "gremlins", "kind": "x"}) is None and len(CLASSES) == 8
    try:
        Cause("gremlins", "x")
    except ValueError as e:
        assert "gremlins" in str(e)
    else:
        raise AssertionError("an unknown class was accepted")


def test_each_host_keeps_its_own_cause_and_software_missing_is_never_a_lost_gpu(tmp_path, sshd_nodes, known_hosts):
    """Two nodes whose Python lacks torch and nvidia-ml-py (one declaring 8 H200s) and a name that does not resolve:
    before, all three read check-network "the host name does not resolve", and the declaring node drain-rma."""
    py = bare_python(tmp_path / "bare")
    n1, n2 = sshd_nodes[0], sshd_nodes[1]
    inv = make_project(tmp_path, [], known_hosts)
    inv.write_text("[gpu]\n" + n1.inventory_line("lack1", python=py) + " gpu_sku=h200-sxm-141gb gpus_per_node=8\n"
                   + n2.inventory_line("lack2", python=py) + "\n"
                   + "ghost ansible_host=no-such-host.invalid ansible_user=root\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", known_hosts, "-m", "health or nccl",
                     "--reports", str(rep))
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    lists = {p.name[len("hosts-"):-len(".txt")]: p.read_text().split() for p in rep.glob("hosts-*.txt")}
    assert lists["fix-config"] == ["lack1", "lack2"] and lists["check-network"] == ["ghost"], lists
    assert "drain-rma" not in lists and "reset-gpu" not in lists and "reboot" not in lists, lists  # none: no empty lists
    doc = json.loads((rep / "results.json").read_text())
    assert doc["format"] == 3 and hardware_claims_without_evidence(doc) == []
    by = {t["nodeid"].rsplit("::", 1)[-1]: t for t in doc["tests"]}
    inv1 = by["test_gpu_inventory[lack1]"]  # GPUs declared, no nvidia-ml-py: not measured, not a lost GPU
    assert inv1["outcome"] == "error" and inv1["causes"][0]["kind"] == "package_missing"
    assert inv1["action"]["action"] == "fix-config" and "nvidia-ml-py" in inv1["action"]["command"]
    gloo = by["test_gloo_allreduce[lack2]"]
    assert gloo["causes"][0]["class"] == "configuration" and gloo["causes"][0]["evidence"]["package"] == "torch"
    assert gloo["action"]["command"].startswith(f"{py} -m pip install torch")
    ghost = [t for t in doc["tests"] if t["host"] == "ghost" and t["outcome"] == "error"]
    assert ghost and all(t["causes"][0]["kind"] == "name_unresolved" for t in ghost)
    # the fleet-wide tests blame each host for its own cause only
    for t in doc["tests"]:
        if t["host"] is None and t.get("causes"):
            assert {c.get("host") for c in t["causes"]} <= {"lack1", "lack2", "ghost", None}
    summary = (rep / "summary.md").read_text()
    line = next(ln for ln in summary.splitlines() if "`ghost`" in ln and "→" in ln)
    assert "check-network** [connectivity]" in line and "torch" not in line
    line1 = next(ln for ln in summary.splitlines() if "`lack1`" in ln and "→" in ln)
    assert "fix-config** [configuration]" in line1 and "resolve" not in line1
    props = next(c["props"] for c in junit(rep / "junit-nccl.xml") if c["name"] == "test_gloo_allreduce[lack1]")
    assert props.get("gpuaccept.action.cause") == "configuration", props
