"""Shape and scope of NCCL variables: gpuaccept/judging/nccl_scope.py and its table
gpuaccept/data/nccl_scope.yaml, through the nccl suites on replayed captures.

Real captures: tests/data/replay-h200x1 (a healthy one-GPU H200 SXM VM, no NVLink, no fabric), tests/data/replay-h200x2
(2xH200, NVLink, fabric ready, NCCL_NVLS_ENABLE=0 in the ranks' environment), tests/data/h200x2-nccl_env.json (the
nccl_env probe on that machine) and tests/data/nccl-info-h200x2.log (its NCCL INFO lines). ALTERED where a case
needs a state no capture holds: the one-GPU VM given the 2xH200's nccl_env document (its image sets
NCCL_NVLS_ENABLE=0 too); NCCL_P2P_DISABLE=1 added to the ranks' environment and NCCL's lines as NCCL prints them
(``NCCL_P2P_DISABLE set by environment to 1.``, channels ``via SHM/direct/direct`` where P2P is off).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpuaccept.config.thresholds import load_sku_file
from gpuaccept.judging import drift, nccl_scope, shape
from gpuaccept.judging.health import Finding
from gpuaccept.judging.readings import typed
from gpuaccept.probes._nccl_log import parse_nccl_log
from gpuaccept.runner.host import save_probe
from project_helpers import REPO, alter, make_project, replay_project, run_pytest

DATA = Path(__file__).resolve().parent / "data"
ONE = DATA / "replay-h200x1"
TWO = DATA / "replay-h200x2"
H200 = load_sku_file(str(REPO / "thresholds" / "h200-sxm-141gb.yaml"))
ENV_DOC = json.loads((DATA / "h200x2-nccl_env.json").read_text())
REAL_LOG = (DATA / "nccl-info-h200x2.log").read_text().splitlines()


def _inventory(folder: Path) -> dict:
    return json.loads(next(folder.glob("gpu_inventory-*.json")).read_text())["doc"]


def _shape(folder: Path):
    return shape.node_shape(typed(_inventory(folder)), H200)


def _results(rep: Path) -> dict:
    return json.loads((rep / "results.json").read_text())


def _test(res: dict, name: str) -> dict:
    return next(t for t in res["tests"] if t["nodeid"].split("::")[-1].startswith(name + "["))


# -- the table ---------------------------------------------------------------------------------------------

def test_the_table_covers_every_drift_variable_with_its_source():
    table = nccl_scope.load_scope()
    assert set(table["variables"]) == set(drift.NCCL_DRIFT_VARS)
    assert "docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html" in table["source"]


def test_scope_follows_the_shape_of_the_real_captures():
    one = nccl_scope.Features(_shape(ONE), hosts=1, rdma=lambda: False)
    two = nccl_scope.Features(_shape(TWO), hosts=1, rdma=lambda: False)
    applies, why = nccl_scope.scope("NCCL_NVLS_ENABLE", one)
    assert not applies and why == "NVLink SHARP: needs an NVSwitch fabric (NVLink multicast); this node: no NVSwitch fabric"
    assert nccl_scope.scope("NCCL_NVLS_ENABLE", two) == (True, "")
    assert nccl_scope.scope("NCCL_P2P_DISABLE", one)[0] is False and nccl_scope.scope("NCCL_P2P_DISABLE", two)[0]
    assert nccl_scope.scope("NCCL_SHM_DISABLE", one)[1].endswith("this node: 1 GPU")
    # IB needs an RDMA NIC: none here; one selected host more makes NCCL_NET matter; an unread NIC counts as one
    assert nccl_scope.scope("NCCL_IB_DISABLE", two)[0] is False
    assert nccl_scope.scope("NCCL_NET", nccl_scope.Features(_shape(ONE), hosts=2, rdma=lambda: False))[0]
    assert nccl_scope.scope("NCCL_IB_DISABLE", nccl_scope.Features(_shape(ONE), hosts=1, rdma=lambda: None))[0]
    assert nccl_scope.scope("NCCL_ALGO", one)[1].endswith("this node: 1 GPU, no InfiniBand/RoCE device, one host "
                                                          "selected")
    # no shape known (no GPU NVML reads): every variable is judged as before
    assert nccl_scope.scope("NCCL_NVLS_ENABLE", nccl_scope.Features(None))[0]
    assert nccl_scope.scope("NCCL_SOMETHING_NEW", one) == (True, "")


def test_out_of_scope_failures_become_notes_and_the_rest_stay():
    found = drift.nccl_env(ENV_DOC, {})
    assert [f.check for f in found if f.failure] == ["nccl_env NCCL_NVLS_ENABLE"]
    one = nccl_scope.Features(_shape(ONE), hosts=1, rdma=lambda: False)
    kept, notes = nccl_scope.in_scope(found, one, _shape(ONE).describe())
    nvls = next(f for f in kept if f.check == "nccl_env NCCL_NVLS_ENABLE")
    assert nvls.failure is None and nvls.extra["not_applicable"] is True
    assert nvls.extra["note"].startswith("not applicable to this node's shape (1×H200 SXM (of 8 on the board), no "
                                         "NVLink, no fabric")
    assert notes == [f"NCCL_NVLS_ENABLE=0 from environment: {nvls.extra['note']}"]
    two = nccl_scope.Features(_shape(TWO), hosts=1, rdma=lambda: False)
    assert nccl_scope.in_scope(found, two) == (found, [])
    asked = [Finding("nccl_env NCCL_P2P_DISABLE", "1", extra={"from": "/etc/nccl.conf"}, failure="x")]
    assert nccl_scope.in_scope(asked, two)[0] == asked


# -- which variables the ranks ran with, and from where ----------------------------------------------------

def test_seen_variables_name_where_each_was_set():
    doc = json.loads((DATA / "h200x2-nccl_allreduce.json").read_text())
    pin = {"NCCL_ALGO": "Ring"}
    assert nccl_scope.seen_variables(doc, {}, pin) == [
        {"name": "NCCL_NVLS_ENABLE", "value": "0", "from": "environment"}]
    # ALTERED: NCCL also read NCCL_P2P_DISABLE=1, which the workers' environment did not carry: a config file,
    # named by the nccl_env document when it says which (NCCL reads those files only for variables not set)
    doc["nccl_env_seen"].update(NCCL_P2P_DISABLE="1", NCCL_ALGO="Ring")
    env_doc = json.loads(json.dumps(ENV_DOC))
    env_doc["effective"]["NCCL_P2P_DISABLE"] = {"value": "1", "source": "/etc/nccl.conf", "path": "/etc/nccl.conf",
                                                "line": 5}
    assert nccl_scope.seen_variables(doc, {}, pin)[1] == {"name": "NCCL_P2P_DISABLE", "value": "1",
                                                          "from": nccl_scope.CONF_FILES}
    assert nccl_scope.seen_variables(doc, {}, pin, env_doc)[1]["from"] == "/etc/nccl.conf"
    # the inventory's nccl_env reaches the workers' environment
    doc["worker_env"]["NCCL_P2P_DISABLE"] = "1"
    assert nccl_scope.seen_variables(doc, {"NCCL_P2P_DISABLE": "1"}, pin)[1]["from"] == "inventory nccl_env"
    assert nccl_scope.seen_variables(doc, {}, pin)[1]["from"] == "environment"
    # the inventory asks for NCCL_ALGO itself: then it is named
    assert nccl_scope.seen_variables(doc, {"NCCL_ALGO": "Ring"}, {})[0] == {
        "name": "NCCL_ALGO", "value": "Ring", "from": "inventory nccl_env"}
    # no all-reduce document (its ranks died): the node's variables as the nccl_env probe found them
    assert nccl_scope.seen_variables(None, {}, pin, env_doc) == [
        {"name": "NCCL_NVLS_ENABLE", "value": "0", "from": "environment"},
        {"name": "NCCL_P2P_DISABLE", "value": "1", "from": "/etc/nccl.conf"}]


def test_a_variable_explains_only_the_transport_it_switches_off():
    p2p = {"name": "NCCL_P2P_DISABLE", "value": "1", "from": "environment"}
    nvls = {"name": "NCCL_NVLS_ENABLE", "value": "0", "from": "environment"}
    assert nccl_scope.explaining([nvls, p2p], "P2P") == [p2p]
    assert nccl_scope.explaining([{**p2p, "value": "0"}], "P2P") == []
    gdr = {"name": "NCCL_NET_GDR_LEVEL", "value": "LOC", "from": "/etc/nccl.conf"}
    assert nccl_scope.explaining([gdr, p2p], "NET/IB/GDRDMA") == [gdr]
    assert nccl_scope.explaining([{**gdr, "value": "PHB"}], "NET/IB/GDRDMA") == []
    assert nccl_scope.explaining([p2p], None) == []
    cause = nccl_scope.transport_cause(p2p)
    assert (cause.cls, cause.kind, cause.evidence) == ("configuration", "nccl_env_transport", {
        "name": "NCCL_P2P_DISABLE", "value": "1", "from": "environment"})


# -- through the suites ------------------------------------------------------------------------------------

def _one_gpu_with_env(tmp_path: Path, env_doc: dict, rdma: dict | None = None) -> Path:
    """The one-GPU capture with an nccl_env document (ALTERED: the 2xH200 machine's, whose image sets
    NCCL_NVLS_ENABLE=0 in the environment), and an rdma document when given."""
    dst = tmp_path / "one"
    shutil.copytree(ONE, dst)
    save_probe(str(dst), "nccl_env", {}, env_doc)
    if rdma is not None:
        save_probe(str(dst), "rdma", {}, rdma)
    return dst


def _run_one(tmp_path: Path, caps: Path, *args: str):
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"h200-1 ansible_connection=local gpuaccept_replay={caps}\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "--progress", "off", *args)
    assert (rep / "results.json").exists(), res.stdout[-3000:] + res.stderr[-2000:]
    return res, rep


def test_a_one_gpu_vm_with_nvls_off_passes_with_a_note(tmp_path):
    """(a) Before: test_nccl_environment FAILED "NCCL_NVLS_ENABLE=0 from environment ..." -> fix-config on a healthy
    1xH200 VM, whose shape gives NVLS no meaning."""
    caps = _one_gpu_with_env(tmp_path, ENV_DOC)
    res, rep = _run_one(tmp_path, caps, "-m", "health or memory or compute or nvlink or (nccl and not multinode)",
                        "-s")
    assert res.returncode == 0, res.stdout[-3000:]
    t = _test(_results(rep), "test_nccl_environment")
    assert t["outcome"] == "passed", t
    fig = next(f for f in t["figures"] if f["check"] == "nccl_env NCCL_NVLS_ENABLE")
    assert fig["verdict"] == "recorded" and fig["value"] == "0"
    assert "NVLink SHARP: needs an NVSwitch fabric" in fig["extra"]["note"]
    assert "h200-1: note: NCCL_NVLS_ENABLE=0 from environment: not applicable to this node's shape (1×H200 SXM" \
        in res.stdout
    md = (rep / "summary.md").read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("- **") and "`h200-1`" in ln)
    assert line.startswith("- **PASS** `h200-1`"), line


def test_a_variable_the_shape_cannot_rule_out_still_fails(tmp_path):
    """NCCL_IB_DISABLE=1 on the one-GPU VM: it needs an RDMA NIC. With the rdma probe not captured, the NIC cannot be
    ruled out: it fails as before (fix-config). With the rdma probe reading no device: a note."""
    env_doc = json.loads(json.dumps(ENV_DOC))
    env_doc["effective"]["NCCL_IB_DISABLE"] = {"value": "1", "source": "environment", "path": None, "line": None}
    res, rep = _run_one(tmp_path, _one_gpu_with_env(tmp_path, env_doc), "-k", "nccl_environment")
    t = _test(_results(rep), "test_nccl_environment")
    assert t["outcome"] == "failed" and "NCCL_IB_DISABLE=1 from environment" in t["message"], t
    assert "NCCL_NVLS_ENABLE" not in t["message"]
    assert t["action"]["action"] == "fix-config"
    no_nic = {"peermem": {}, "devices": [], "topology": None, "perftest": None, "loopback": []}
    (tmp_path / "b").mkdir()
    res, rep = _run_one(tmp_path / "b", _one_gpu_with_env(tmp_path / "b", env_doc, no_nic), "-k", "nccl_environment")
    t = _test(_results(rep), "test_nccl_environment")
    assert t["outcome"] == "passed", t
    fig = next(f for f in t["figures"] if f["check"] == "nccl_env NCCL_IB_DISABLE")
    assert fig["extra"]["note"].endswith("the InfiniBand/RoCE transport: needs an RDMA NIC; this node: no "
                                         "InfiniBand/RoCE device")


def test_two_gpus_with_nvls_off_still_fail_fix_config(tmp_path):
    """(b) The 2xH200 capture with the nccl_env document that machine's probe printed (h200x2-nccl_env.json):
    NVLink and a fabric, so NCCL_NVLS_ENABLE=0 in the environment matters."""
    inv = replay_project(tmp_path, alter(tmp_path, "nccl_env", lambda d: d.update(ENV_DOC)))
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "nccl_environment")
    t = _test(_results(rep), "test_nccl_environment")
    assert t["outcome"] == "failed", t
    assert "h200-a: NCCL_NVLS_ENABLE=0 from environment (switches NVLink SHARP (NVLS) on or off)" in t["message"]
    assert (t["action"]["action"], t["action"]["cause"]) == ("fix-config", "configuration")


def _p2p_off(doc: dict) -> None:
    """ALTERED as a node with NCCL_P2P_DISABLE=1 in its environment reads: the workers carry it, NCCL says it
    read it, and its channels between the two GPUs go through shared memory (the real INFO lines, P2P/CUMEM
    replaced by NCCL's SHM transport, the ENV lines NCCL prints added)."""
    lines = [ln.replace("via P2P/CUMEM", "via SHM/direct/direct") for ln in REAL_LOG]
    lines += ["vm:720:720 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.",
              "vm:720:720 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0."]
    parsed = parse_nccl_log(lines)
    doc.update(transports=parsed["transports"], transport_classes=parsed["transport_classes"],
               nccl_env_seen=parsed["nccl_env_seen"])
    doc["worker_env"]["NCCL_P2P_DISABLE"] = "1"


def test_p2p_disabled_in_the_environment_is_the_cause_of_the_shm_channels(tmp_path):
    """(c) Before: FAIL "NCCL channels use SHM/direct/direct where h200-sxm-141gb expects P2P", the variable
    unnamed, the action the test's row."""
    inv = replay_project(tmp_path, alter(tmp_path, "nccl_allreduce", _p2p_off))
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "test_allreduce and not multinode")
    t = _test(_results(rep), "test_allreduce")
    assert t["outcome"] == "failed", t
    assert t["message"] == (
        "h200-a: NCCL channels use SHM/direct/direct where h200-sxm-141gb expects P2P: NCCL_P2P_DISABLE=1 "
        "(environment) disables the peer-to-peer (NVLink/PCIe) transport; NCCL variables set: NCCL_NVLS_ENABLE=0 "
        "(environment), NCCL_P2P_DISABLE=1 (environment)")
    (entry,) = t["failures"]
    assert entry["cause"]["class"] == "configuration" and entry["cause"]["kind"] == "nccl_env_transport"
    assert entry["cause"]["evidence"] == {"name": "NCCL_P2P_DISABLE", "value": "1", "from": "environment"}
    act = entry["action"]
    assert (act["action"], act["cause"], act["setting"]) == ("fix-config", "configuration",
                                                             "NCCL_P2P_DISABLE=1 (environment)")
    assert act["command"] == "remove NCCL_P2P_DISABLE from environment, or name it in the inventory's nccl_env"
    assert t["action"]["action"] == "fix-config"


def test_p2p_disabled_by_the_inventory_is_named_as_the_inventorys(tmp_path):
    inv = replay_project(tmp_path, alter(tmp_path, "nccl_allreduce", _p2p_off),
                         "nccl_env='{\"NCCL_P2P_DISABLE\": \"1\"}'")
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "test_allreduce and not multinode")
    t = _test(_results(rep), "test_allreduce")
    assert "NCCL_P2P_DISABLE=1 (inventory nccl_env) disables the peer-to-peer" in t["message"], t
    assert t["failures"][0]["action"]["action"] == "fix-config"


def test_wrong_elements_stay_hardware_whatever_the_variables(tmp_path):
    """(d) Wrong sums with NCCL_P2P_DISABLE=1 and SHM channels: the transport failure is the variable's, the wrong
    elements are the GPUs' (reset-gpu, cause hardware), named with the variables all the same."""
    def wrong(doc):
        _p2p_off(doc)
        doc["rows"][-1]["ip_wrong"] = 12
        doc["wrong_total"] = 12
    inv = replay_project(tmp_path, alter(tmp_path, "nccl_allreduce", wrong))
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "test_allreduce and not multinode")
    t = _test(_results(rep), "test_allreduce")
    assert {e["check"] for e in t["failures"]} == {"allreduce_wrong_elements", "allreduce_transport"}, t["failures"]
    by = {e["check"]: e for e in t["failures"] if "NCCL's own choice" not in e["line"]}  # the at-size call reads alike
    w = by["allreduce_wrong_elements"]
    assert w["line"].startswith("h200-a: all-reduce over 2 GPUs produced 12 wrong elements (#wrong 12 at 4294967296 B")
    assert w["line"].endswith("; NCCL variables set: NCCL_NVLS_ENABLE=0 (environment), NCCL_P2P_DISABLE=1 "
                              "(environment)")
    assert (w["action"]["action"], w["action"]["cause"]) == ("reset-gpu", "hardware")
    assert by["allreduce_transport"]["action"]["action"] == "fix-config"
    assert t["action"]["action"] == "reset-gpu"


@pytest.mark.parametrize("check, action", [("allreduce_wrong_elements", "reset-gpu"), (None, "rerun")])
def test_the_action_rows_of_the_allreduce(check, action):
    from gpuaccept.judging import actions
    a = actions.for_finding("test_allreduce", check)
    assert a.action == action and (a.cause == "hardware") == (action == "reset-gpu")


def test_a_p2p_failure_names_the_nccl_variables_without_taking_them_for_its_cause(tmp_path):
    """ALTERED: the 2xH200 P2P capture with GPU 0 -> GPU 1 at 100 GB/s one way, on a node whose environment sets
    NCCL_P2P_DISABLE=1 (the machine's nccl_env document, that variable added). CUDA peer copies do not read NCCL's
    variables: the line names them, and the cause stays the figure's own."""
    env_doc = json.loads(json.dumps(ENV_DOC))
    env_doc["effective"]["NCCL_P2P_DISABLE"] = {"value": "1", "source": "environment", "path": None, "line": None}
    caps = alter(tmp_path, "nccl_env", lambda d: d.update(env_doc))
    caps = alter(tmp_path, "p2p_bandwidth", lambda d: d["pairs"][0].update(unidir_gbps=100.0), src=caps)
    inv = replay_project(tmp_path, caps)
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "test_p2p_bandwidth")
    t = _test(_results(rep), "test_p2p_bandwidth")
    assert t["outcome"] == "failed", t
    line = next(e["line"] for e in t["failures"] if e["check"] == "p2p_unidir_bw_gbps")
    assert ("GPU 0 (00000000:00:06.0) -> GPU 1 (00000000:00:07.0); NCCL variables set: NCCL_NVLS_ENABLE=0 "
            "(environment), NCCL_P2P_DISABLE=1 (environment) (NCCL's: CUDA peer copies do not read them)") in line
    assert all(e["action"]["cause"] != "configuration" for e in t["failures"])
