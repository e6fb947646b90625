"""Pure judging and reporting functions, table-driven; SKU detection on real NVML captures from H200 nodes."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpuaccept.reporting.records import host_of, layer_of, case_file, case_name
from gpuaccept.judging.standouts import outliers
from gpuaccept.reporting.junit import junit_xml_text
from gpuaccept.reporting.records import CaseRecord
from gpuaccept.reporting.summary import summary_markdown
from gpuaccept.scaleout.scheduler import host_scope
from gpuaccept.judging.compute import below_median_pct, clock_reasons
from gpuaccept.judging.sku import detect_sku
from gpuaccept.config.thresholds import Limit, judge, load_all

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"


def lim(direction="min", bound=100.0, **kw):
    return Limit("h200-sxm-141gb", "hbm_read_bw_gbps", direction, bound, "GB/s", "test", **kw)


@pytest.mark.parametrize("direction,bound,value,passed", [
    ("min", 4300, 4606.0, True), ("min", 4300, 4300.0, True), ("min", 4300, 4299.9, False),
    ("max", 0, 0, True), ("max", 0, 1, False), ("max", 20, 7.9, True), ("min", 1, None, False),
])
def test_judge(direction, bound, value, passed):
    v = judge(lim(direction, bound), value)
    assert v.passed is passed
    assert "hbm_read_bw_gbps" in v.message
    if not passed and value is not None:
        assert f"{direction} {bound:g} GB/s" in v.message


def test_limit_for_world_size():
    base = lim("min", 300, min_by_world_size={2: 310, 8: 330})
    assert base.for_world_size(8).bound == 330
    assert base.for_world_size(2).bound == 310
    assert base.for_world_size(4).bound == 300


@pytest.mark.parametrize("mask,failing,recorded", [
    (0x0, [], []), (0x4, [], ["SW power cap"]), (0x1, [], []),
    (0x8 | 0x4, ["HW slowdown"], ["SW power cap"]), (0x40, ["HW thermal slowdown"], []),
    (0x80 | 0x20, ["HW power brake slowdown"], ["SW thermal slowdown"]),
])
def test_clock_reasons(mask, failing, recorded):
    assert clock_reasons(mask) == (failing, recorded)


@pytest.mark.parametrize("values,expected", [
    ({0: 664.0, 1: 671.0}, {0: pytest.approx(0.52, abs=0.01), 1: 0.0}),
    ({i: 700.0 for i in range(8)}, {i: 0.0 for i in range(8)}),
    ({**{i: 700.0 for i in range(7)}, 7: 640.0}, {**{i: 0.0 for i in range(7)}, 7: pytest.approx(8.57, abs=0.01)}),
])
def test_below_median_pct(values, expected):
    assert below_median_pct(values) == expected


def test_median_rule_catches_one_slow_gpu_of_eight():
    values = {i: 665.0 + i for i in range(8)}
    values[5] = 610.0  # above a 600 floor, 8.6% under the node's median
    pct = below_median_pct(values)
    assert [i for i, p in pct.items() if p > 7] == [5]


def test_outliers_peers_and_history():
    figs = [{"host": h, "check": "bf16_tflops", "gpu": 0, "value": v, "unit": "TFLOP/s", "limit": {"min": 600}}
            for h, v in [("a", 660), ("b", 665), ("c", 580), ("d", 662)]]
    prev = [{"host": "a", "check": "bf16_tflops", "gpu": 0, "value": 800}]
    got = {(o["host"], o["against"]) for o in outliers(figs, prev)}
    assert got == {("a", "previous"), ("c", "fleet")}  # the one engine's names (gpuaccept.judging.standouts)
    crc = [{"host": h, "check": "nvlink_crc_errors_per_s", "gpu": 0, "value": v, "limit": {"max": 100}}
           for h, v in [("a", 0.5), ("b", 0.5), ("c", 1.0)]]
    assert outliers(crc, []) == []


def test_junit_has_figures_as_properties():
    fig = {"host": "gpu-07", "layer": "memory", "check": "hbm_read_bw_gbps", "gpu": 3, "value": 3812.0,
           "unit": "GB/s", "verdict": "fail", "limit": {"min": 4300}}
    recs = [CaseRecord("suites/test_memory.py::test_hbm_bandwidth[gpu-07]", "test_hbm_bandwidth[gpu-07]", "gpu-07",
                       "memory", "failed", "gpu-07 GPU 3: hbm_read_bw_gbps 3812 GB/s < min 4300 GB/s", 1.5, [fig]),
            CaseRecord("suites/test_memory.py::test_hbm_bandwidth[gpu-08]", "test_hbm_bandwidth[gpu-08]", "gpu-08",
                       "memory", "error", "gpu-08: cannot connect", 0.1, [])]
    root = ET.fromstring(junit_xml_text("memory", recs).split("\n", 1)[1])
    suite = root.find("testsuite")
    assert suite.get("name") == "memory" and suite.get("failures") == "1" and suite.get("errors") == "1"
    cases = suite.findall("testcase")
    assert [c.get("classname") for c in cases] == ["memory.gpu-07", "memory.gpu-08"]
    props = {p.get("name"): p.get("value") for p in cases[0].iter("property")}
    assert {k: v for k, v in props.items() if not k.startswith("gpuaccept.action")} == {
        "gpu3.hbm_read_bw_gbps": "3812.0", "gpu3.hbm_read_bw_gbps.unit": "GB/s",
        "gpu3.hbm_read_bw_gbps.min": "4300", "gpu3.hbm_read_bw_gbps.verdict": "fail"}
    # the action of the failing figure (a slow figure: gpuaccept/data/actions.yaml), and of the unreachable host
    # taken once, its conditions unchecked: no hardware evidence, measured again (never a drain)
    assert props["gpuaccept.action"] == "rerun" and props["gpuaccept.action.cause"] == "unverified"
    assert "below its floor" in props["gpuaccept.action.reason"]
    assert {p.get("name"): p.get("value") for p in cases[1].iter("property")}["gpuaccept.action"] == "rerun"
    assert cases[0].find("failure").get("message").startswith("gpu-07 GPU 3")
    md = summary_markdown("run", {"inventory": "x"}, recs)
    assert "| gpu-07 | memory | 0 | 1 | 0 | 0 |" in md and "**ERROR**" in md


@pytest.mark.parametrize("nodeid,layer,host,scope", [
    ("suites/test_memory.py::test_hbm_bandwidth[gpu-07]", "memory", "gpu-07", "host:gpu-07"),
    ("suites/test_nccl_gloo.py::test_x[n1]", "nccl", "n1", "host:n1"),
    ("suites/test_health.py::test_fleet_consistency", "health", None, "suites/test_health.py"),
    ("tests/test_other.py::test_y", "other", None, "tests/test_other.py"),
    ("suites/test_health.py::test_ecc[::1]", "health", "::1", "host:::1"),
    ("suites/test_memory.py::test_hbm_bandwidth[fe80::a:1]", "memory", "fe80::a:1", "host:fe80::a:1"),
])
def test_ids(nodeid, layer, host, scope):
    assert layer_of(nodeid) == layer and host_of(nodeid) == host and host_scope(nodeid) == scope


@pytest.mark.parametrize("nodeid,name,file", [
    ("suites/test_health.py::test_ecc[gpu-07]", "test_ecc[gpu-07]", "suites/test_health.py"),
    ("suites/test_health.py::test_ecc[::1]", "test_ecc[::1]", "suites/test_health.py"),
    ("suites/test_nvlink.py::TestLinks::test_up[fe80::2]", "test_up[fe80::2]", "suites/test_nvlink.py"),
    ("suites/test_health.py::test_fleet_consistency", "test_fleet_consistency", "suites/test_health.py"),
])
def test_name_and_file_of_an_id_keep_an_ipv6_host_whole(nodeid, name, file):
    assert case_name(nodeid) == name and case_file(nodeid) == file


def test_sku_detected_from_real_h200_capture():
    doc = json.loads((DATA / "h200-1gpu-nvml.json").read_text())
    specs = load_all(str(REPO / "thresholds"))
    g = doc["gpus"][0]
    assert detect_sku(specs, g["name"], g["memory_total_bytes"]).sku == "h200-sxm-141gb"


def test_profiles_only_use_arguments_the_probes_accept():
    """Every argument a profile sets is one the probe declares (probes reject unknown keys)."""
    import re

    from gpuaccept.config.profiles import PROBE_TIMEOUT_S, PROFILES, probe_args
    assert set(PROBE_TIMEOUT_S) == set(PROFILES)
    for prof, probes in PROFILES.items():
        for probe, args in probes.items():
            src = (REPO / "gpuaccept" / "probes" / f"{probe}.py").read_text()
            for key in args:
                assert re.search(rf'["\']{key}["\']', src), f"{prof}: {probe} has no argument {key}"
    assert probe_args("quick", "matmul_tflops", {"dtypes": ["bf16"]})["dtypes"] == ["bf16"]
    assert probe_args("standard", "matmul_tflops", {"m": 1}) == {"m": 1}


def test_judge_names_the_figure_and_its_context():
    rule = Limit("h200-sxm-141gb", "below_node_median_pct", "max", 7.0, "%", "test")
    v = judge(rule, 38.15, "bf16_below_node_median_pct", "bf16 TFLOP/s 301 against the node's median 488")
    assert v.kind == "fail" and v.message == ("bf16_below_node_median_pct 38.15 % > max 7 % "
                                              "(bf16 TFLOP/s 301 against the node's median 488) "
                                              "[limit: h200-sxm-141gb.yaml checks.below_node_median_pct]")


@pytest.mark.parametrize("value", [None, True, {"nvml_error": "Unknown Error"}, "12"])
def test_judge_never_passes_a_non_number(value):
    v = judge(lim("min", 1), value)
    assert not v.passed and v.kind == "missing" and "no value measured" in v.message


@pytest.mark.parametrize("direction", ["min", "max"])
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_judge_reads_a_non_finite_figure_as_no_measurement(direction, value):
    """Found on 2026-11-30 (third trial): an hbm_bandwidth document with read_gbps Infinity (a timer that read
    0 s) PASSED against the 4300 GB/s floor, and NaN FAILED as if the HBM were slow: neither was measured."""
    v = judge(lim(direction, 100), value)
    assert not v.passed and v.kind == "missing" and f"{value} is no measurement" in v.message


def test_one_registry_serves_the_loader():
    from gpuaccept.config.thresholds import CHECKS, REGISTRY
    assert CHECKS == {k: (c.unit, c.direction) for k, c in REGISTRY.items() if c.var is None}
    assert {c.layer for c in REGISTRY.values() if c.var is None} == {"health", "memory", "compute", "nvlink", "nccl"}
    assert all(c.description for c in REGISTRY.values())
    h200 = load_all(str(REPO / "thresholds"))["h200-sxm-141gb"]
    assert set(h200.required("memory")) == {"hbm_read_bw_gbps", "hbm_write_bw_gbps", "hbm_copy_bw_gbps",
                                            "h2d_bw_gbps", "d2h_bw_gbps"}


def test_inventory_limits_come_from_the_registry():
    """Storage floors, GDS, the IB port rate, inter-node busbw and the pairwise slow percentage: unit and
    direction are the registry's, the var that sets each is one the configure-time check validates."""
    from gpuaccept.config import storage as sl
    from gpuaccept.config.hostvars import VARS
    from gpuaccept.judging.nccl import judge_round
    from gpuaccept.config.thresholds import REGISTRY, inventory_limit
    inv = {k: c for k, c in REGISTRY.items() if c.var}
    assert set(inv) >= set(sl.STORAGE_CHECKS) | {"ib_rate_gbps", "internode_busbw_gbps", "below_round_median_pct"}
    assert {c.var for c in inv.values()} <= set(VARS)
    for key, lim in sl.storage_limits({k: 1.5 for k in sl.STORAGE_CHECKS}).items():
        assert (lim.unit, lim.direction, lim.origin) == (REGISTRY[key].unit, REGISTRY[key].direction, "inventory")
    rate = sl.ib_rate_limit(400)
    assert (rate.unit, rate.direction, rate.bound, rate.source) == ("Gb/s", "min", 400.0, "inventory var ib_rate_gbps")
    assert judge_round({"a": 30.0, "b": 50.0}, 40, 20) == {
        "a": (False, "internode_busbw_gbps 30 GB/s < min 40 GB/s [limit: group var nccl_internode_busbw_gbps]"),
        "b": (True, "internode_busbw_gbps 50 GB/s (limit >= 40 GB/s)")}
    with pytest.raises(KeyError):
        inventory_limit("hbm_read_bw_gbps", 1.0)  # a threshold file's check, never an inventory var's


def test_a_threshold_file_cannot_set_an_inventory_limit(tmp_path):
    from gpuaccept.errors import ThresholdError
    from gpuaccept.config.thresholds import load_sku_file
    f = tmp_path / "x.yaml"
    f.write_text("sku: x\nchecks:\n  seq_read_gbps: {min: 1, unit: GB/s, source: s}\n")
    with pytest.raises(ThresholdError, match="unknown check 'checks.seq_read_gbps'"):
        load_sku_file(str(f))


def test_limit_origin():
    inv = Limit("inventory", "seq_read_gbps", "min", 2.0, "GB/s", "inventory var storage_limits")
    assert inv.origin == "inventory" and inv.sku == "inventory"  # sku: the former name, still readable


def test_an_interrupted_test_reports_what_it_found_before_the_interruption():
    """A multi-host test's per-host recorders (Recorder.for_host) share its lines; those recorded once the run
    was interrupted (the failures of the ranks SIGTERM killed) stay out of the interrupted test's message,
    which the plugin builds from findings(before_interruption=True); the outcome still counts every line."""
    import types
    from gpuaccept.transport import cancel_all, interruption, reset_interruption
    from gpuaccept.judging.recorder import Recorder
    item = types.SimpleNamespace(user_properties=[], originalname="test_allreduce_multinode")
    rec = Recorder(item, "fleet", "nccl", interrupted=interruption)  # as the plugin hands it in
    rec.for_host("f1").fail("transport SHM, expected IB")  # found before the signal
    assert rec.findings(before_interruption=True) == rec.findings() == ["f1: transport SHM, expected IB"]
    try:
        cancel_all("SIGTERM")  # no command in flight: only marks the run interrupted
        rec.for_host("f1").fail("interrupted (SIGTERM) while running on f1: probe (all-reduce over f1, f2)")
        rec.for_host("f2").fail("interrupted (SIGTERM) while running on f2: probe (all-reduce over f1, f2)")
        rec.error("internode_busbw_gbps: no value measured")
    finally:
        reset_interruption()
    assert rec.findings(before_interruption=True) == ["f1: transport SHM, expected IB"]
    assert len(rec.findings()) == 4 and rec.outcome().kind == "failed"
    assert [ln.split(":")[0] for ln in rec.lines()] == ["f1", "f1", "f2"]


def test_skips_count_hosts_without_the_fleet_wide_tests():
    """A skip reason shared by hosts and by a fleet-wide test (no host in its id) counts the hosts alone and
    names the fleet-wide tests beside them, in the terminal's line and in summary.md."""
    from gpuaccept.reporting.verdicts import skip_groups, skip_who
    recs = [CaseRecord(nodeid=f"suites/test_nccl.py::test_x[{h}]", name="test_x", host=h, layer="nccl",
                       outcome="skipped", message="no fabric") for h in ("n1", "n2")]
    recs.append(CaseRecord(nodeid="suites/test_nccl_multinode.py::test_y", name="test_y", host=None, layer="nccl",
                           outcome="skipped", message="no fabric"))
    (hs, n), = skip_groups(recs).values()
    assert (skip_who(hs), n) == ("2 hosts and the fleet-wide tests", 3)
    assert skip_who(["fleet"]) == "the fleet-wide tests" and skip_who(["n1"]) == "1 host"
