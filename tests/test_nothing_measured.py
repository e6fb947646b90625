"""Nothing measured is not PASS: a host whose passed tests recorded only facts (no number, nothing judged) reads SKIP,
and the run says how many GPU figures it judged ("0 GPU figures judged"), in the console and summary.md."""
from __future__ import annotations

from gpuaccept.reporting.records import CaseRecord
from gpuaccept.reporting.verdicts import gpu_figures_judged, host_verdicts
from gpuaccept.plugin.reports import run_line
from project_helpers import make_project, run_pytest


def _fig(host, check, verdict, gpu=None, value=1.0):
    return {"host": host, "check": check, "gpu": gpu, "value": value, "verdict": verdict}


def test_a_pass_that_judged_nothing_leaves_the_host_skip():
    recs = [CaseRecord("s/test_nccl_env.py::test_env[a]", "test_env[a]", "a", "nccl", "passed",
                       figures=[_fig("a", "nccl_env_variables", "recorded", value={"NCCL_DEBUG": "WARN"})]),
            CaseRecord("s/test_health.py::test_ecc[a]", "test_ecc[a]", "a", "health", "skipped", "no NVIDIA GPU"),
            CaseRecord("s/test_x.py::test_assert[b]", "test_assert[b]", "b", "health", "passed"),  # its assert judged
            CaseRecord("s/test_memory.py::test_hbm[c]", "test_hbm[c]", "c", "memory", "passed",
                       figures=[_fig("c", "hbm_read_bw_gbps", "pass", gpu=0)])]
    hv = host_verdicts(recs, ["a", "b", "c"])
    assert {h: v["verdict"] for h, v in hv.items()} == {"a": "SKIP", "b": "PASS", "c": "PASS"}
    assert hv["a"]["reasons"] == ["1 figure recorded, none judged against a limit: the selected tests have no limit "
                                  "for them (limits come from a SKU threshold file: gpu_sku or an NVML-detected GPU; "
                                  "storage_limits; the inventory's own)"]
    assert gpu_figures_judged(recs) == 1
    assert run_line(hv, recs) == "gpuaccept: PASS (2 hosts PASS, 1 host SKIP), 1 GPU figure judged"
    only_a = [r for r in recs if r.host == "a"]
    assert run_line(host_verdicts(only_a, ["a"]), only_a) == "gpuaccept: SKIP (1 host SKIP), 0 GPU figures judged"


def test_figures_recorded_against_no_limit_are_not_a_pass():
    """A CPU all-reduce's busbw and a storage throughput without storage_limits are measurements, but nothing
    judged them: two nodes without a GPU and no SKU read SKIP, never PASS."""
    busbw = {**_fig(None, "busbw_gbps", "recorded", value=3.2), "unit": "GB/s"}
    recs = [CaseRecord("s/test_nccl_multinode.py::test_allreduce_multinode", "test_allreduce_multinode", None, "nccl",
                       "passed", figures=[{**busbw, "host": "n1"}, {**busbw, "host": "n2"}]),
            CaseRecord("s/test_storage.py::test_local_storage_throughput[n1]", "test_local_storage_throughput[n1]",
                       "n1", "storage", "passed", figures=[{**_fig("n1", "seq_read_gbps", "recorded", value=2.1),
                                                           "unit": "GB/s"}])]
    hv = host_verdicts(recs, ["n1", "n2"])
    assert hv["n1"]["verdict"] == hv["n2"]["verdict"] == "SKIP"
    assert hv["n1"]["reasons"][0].startswith("2 figures recorded, none judged")
    assert hv["n2"]["reasons"][0].startswith("1 figure recorded, none judged")
    judged = [CaseRecord(r.nodeid, r.name, r.host, r.layer, "passed",
                         figures=[{**f, "verdict": "pass", "limit": {"min": 1}} for f in r.figures]) for r in recs]
    assert {h: v["verdict"] for h, v in host_verdicts(judged, ["n1", "n2"]).items()} == {
        "n1": "PASS", "n2": "PASS", "fleet": "PASS"}


def test_the_main_job_without_a_gpu_judges_only_the_host(tmp_path):
    """The README's main job on a machine without a GPU: the GPU layers are SKIP; the host reads PASS only through
    the host layer's judged tests (kernel log, filesystems), and the run says it judged no GPU figure. Without the
    host layer nothing is judged and the host reads SKIP, never PASS."""
    import json
    make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    (tmp_path / "local.ini").write_text("localhost ansible_connection=local\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", "local.ini", "--reports", str(rep))
    assert res.returncode == 0, res.stdout[-3000:]
    assert "gpuaccept: PASS (1 host PASS), 0 GPU figures judged" in res.stdout
    tests = json.loads((rep / "results.json").read_text())["tests"]
    judged = {t["layer"] for t in tests for f in t.get("figures") or [] if f.get("verdict") == "pass"}
    assert judged == {"host"}, judged
    assert not [t["nodeid"] for t in tests if t["outcome"] in ("failed", "error")]
    rep2 = tmp_path / "rep2"
    res = run_pytest(tmp_path, "--inventory", "local.ini", "--reports", str(rep2), "-m", "not host")
    assert res.returncode == 0, res.stdout[-3000:]
    assert "gpuaccept: SKIP (1 host SKIP), 0 GPU figures judged" in res.stdout
    summary = (rep2 / "summary.md").read_text()
    assert "**SKIP** 1 host, 0 GPU figures judged" in summary and "**PASS**" not in summary


def test_hosts_a_fleet_wide_failure_does_not_blame_say_why_they_were_not_judged():
    """An inter-node all-reduce that u2 broke (an ERROR filed under u2) judged nothing of u1 and u3: they read SKIP
    with the reason naming the test, the host it is filed under and its first line, not a bare SKIP. A failure
    that singles out no host says so; a host with a verdict of its own keeps it, without that reason."""
    err = CaseRecord("s/test_nccl_multinode.py::test_allreduce_multinode", "test_allreduce_multinode", None, "nccl",
                     "error", "u2: unreachable: connection timed out\nmore", causes=[{"host": "u2", "kind": "unreachable",
                                                                               "class": "connectivity"}])
    own = CaseRecord("s/test_memory.py::test_hbm[u3]", "test_hbm[u3]", "u3", "memory", "passed",
                     figures=[_fig("u3", "hbm_read_bw_gbps", "pass", gpu=0)])
    hv = host_verdicts([err, own], ["u1", "u2", "u3"])
    assert {h: v["verdict"] for h, v in hv.items()} == {"u1": "SKIP", "u2": "ERROR", "u3": "PASS", "fleet": "ERROR"}
    assert hv["u1"]["reasons"] == ["not judged by fleet-wide test_allreduce_multinode (ERROR filed under u2): "
                                   "u2: unreachable: connection timed out"]
    assert not any("not judged" in x for x in hv["u3"]["reasons"] + hv["u2"]["reasons"]), hv
    slow = CaseRecord(err.nodeid, err.name, None, "nccl", "failed", "fleet: internode_busbw_gbps 3 GB/s < min 9 GB/s")
    hv = host_verdicts([slow], ["u1", "u2"])
    assert [v["reasons"] for h, v in sorted(hv.items()) if h != "fleet"] == [
        ["not judged by fleet-wide test_allreduce_multinode (FAIL, no host singled out): fleet: internode_busbw_gbps "
         "3 GB/s < min 9 GB/s"]] * 2


def test_the_fleet_line_takes_no_action_of_a_host_a_fleet_wide_test_filed_its_finding_under():
    """A fleet-wide all-reduce that errored because u2's name does not resolve: u2 reads check-network with its
    getent command; the fleet line reads ERROR without that action (it is u2's, not the fleet's). A failure no
    host is singled out for keeps the record's action on the fleet line."""
    cause = {"class": "connectivity", "kind": "name_unresolved", "host": "u2",
             "evidence": {"address": "gpu-99.nonexistent.invalid"}}
    err = CaseRecord("s/test_nccl_multinode.py::test_allreduce_multinode", "test_allreduce_multinode", None, "nccl",
                     "error", "u2: cannot resolve gpu-99.nonexistent.invalid", causes=[cause])
    hv = host_verdicts([err], ["u1", "u2"])
    assert hv["u2"]["verdict"] == "ERROR" and hv["u2"]["action"]["action"] == "check-network", hv["u2"]
    assert "getent hosts gpu-99.nonexistent.invalid" in hv["u2"]["action"]["command"]
    assert hv["fleet"]["verdict"] == "ERROR" and hv["fleet"]["action"] is None, hv["fleet"]
    # the test's own action (results.json, JUnit) says whose finding it is
    from gpuaccept.reporting.junit import action_properties
    from gpuaccept.reporting.records import record_action
    props = dict(action_properties(record_action(err)))
    assert (props["gpuaccept.action"], props["gpuaccept.action.host"]) == ("check-network", "u2"), props
    slow = CaseRecord(err.nodeid, err.name, None, "nccl", "failed", "fleet: internode_busbw_gbps 3 GB/s < min 9 GB/s",
                      figures=[{"host": "fleet", "check": "internode_busbw_gbps", "value": 3.0, "verdict": "fail",
                                "limit": {"min": 9.0}, "unit": "GB/s"}])
    assert host_verdicts([slow], ["u1", "u2"])["fleet"]["action"]["action"] == "check-network"
