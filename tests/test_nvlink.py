"""NVLink judging (gpuaccept/judging/nvlink.py) on the real 2xH200 nvlink/p2p_bandwidth documents
(tests/data/replay-h200x2) and copies altered the way sick or differently-built nodes read; the P2P bandwidth
arithmetic as a pure function; the p2p_bandwidth probe on this CUDA-less machine; NVLink pair logic."""
from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from gpuaccept.judging import nvlink as nj
from gpuaccept.errors import ThresholdError
from gpuaccept.config.thresholds import judge, load_sku_file
from probe_helpers import DATA, ROOT, load_probe, run_probe
from project_helpers import alter, junit, replay_project, run_pytest

nvl = load_probe("nvlink")
p2p = load_probe("p2p_bandwidth")

REPLAY = DATA / "replay-h200x2"
H200 = load_sku_file(str(ROOT / "thresholds" / "h200-sxm-141gb.yaml"))
H100_NVL = load_sku_file(str(ROOT / "thresholds" / "h100-nvl-94gb.yaml"))


def saved(name: str) -> dict:
    return json.loads((REPLAY / name).read_text())["doc"]


def nvlink_doc() -> dict:
    return saved("nvlink-80c5152746.json")  # sample_seconds 2.0


def failures(findings) -> list[str]:
    """Every failure the suite would report for these findings (own failures and figures outside limits)."""
    out = [f.failure for f in findings if f.failure]
    out += [judge(f.limit, f.value).message for f in findings
            if f.limit is not None and not judge(f.limit, f.value if isinstance(f.value, (int, float)) else None).passed]
    return out


def with_expect(sku, **expect):
    return dataclasses.replace(sku, expect={**sku.expect, **expect})


# ---------------------------------------------------------------------------------------------------------
# links


def test_healthy_h200_links_pass():
    doc = nvlink_doc()
    for g in doc["gpus"]:
        found = nj.links(g, H200, doc["sample_seconds"])
        assert failures(found) == []
        (count,) = [f for f in found if f.check == "nvlink_active_links"]
        assert count.value == 18 and count.limit.bound == 18


def test_short_count_fails_and_names_the_inactive_slot():
    g = copy.deepcopy(nvlink_doc()["gpus"][0])
    g["links"][5]["active"] = False
    g["active_count"] = 17
    got = failures(nj.links(g, H200, 2.0))
    assert "nvlink_active_links 17 links < min 18 links [limit: h200-sxm-141gb.yaml checks.nvlink_active_links]" in got
    assert any(m.startswith("inactive NVLink slot(s): NVLink 5 inactive (remote FFFFFFFF:FF:FF.0)") for m in got)


def test_h100_nvl_pair_with_12_of_18_slots_not_0_to_11_passes():
    """An H100 NVL bridge pair populates 12 of the 18 slots, not necessarily 0-11: the count decides."""
    g = copy.deepcopy(nvlink_doc()["gpus"][0])
    for lk in g["links"]:
        lk["active"] = lk["link"] >= 6
    g["active_count"] = 12
    assert failures(nj.links(g, H100_NVL, 2.0)) == []


def test_listed_link_ids_are_judged_one_by_one():
    g = copy.deepcopy(nvlink_doc()["gpus"][0])
    for lk in g["links"]:
        lk["active"] = lk["link"] >= 6
    g["active_count"] = 12
    sku = with_expect(H100_NVL, nvlink_link_ids=list(range(12)))
    got = failures(nj.links(g, sku, 2.0))
    assert len(got) == 6
    assert got[0] == ("NVLink 0 inactive (remote FFFFFFFF:FF:FF.0); the SKU file lists links "
                      "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]")
    sku = with_expect(H100_NVL, nvlink_link_ids=list(range(6, 18)))
    assert failures(nj.links(g, sku, 2.0)) == []


def test_unreadable_links_name_nvmls_text():
    g = {"index": 1, "pci_bus_id": "00000000:00:07.0", "active_count": {"nvml_error": "Unknown Error"}, "links": []}
    assert failures(nj.links(g, H200)) == [
        "NVLink state unreadable: NVML says 'Unknown Error' (the SKU expects >= 18 links active)"]
    lost = {"index": 1, "handle": {"nvml_error": "GPU is lost"}, "links": [], "active_count": {"nvml_error": "GPU is lost"}}
    assert failures(nj.links(lost, H200)) == ["no NVML handle (GPU is lost): NVLink not readable"]
    g = copy.deepcopy(nvlink_doc()["gpus"][0])
    g["links"][2]["active"] = {"nvml_error": "Unknown Error"}
    assert failures(nj.links(g, with_expect(H200, nvlink_link_ids=[2]), 2.0)) == [
        "NVLink 2 state unreadable: NVML says 'Unknown Error'"]


def test_growing_error_counters_fail():
    g = copy.deepcopy(nvlink_doc()["gpus"][1])
    g["links"][3]["errors_delta"] = {"replay": 40, "recovery": 1, "crc_flit": 300, "crc_data": 0}
    got = failures(nj.links(g, H200, 2.0))
    assert "NVLink 3 needed 1 link recoveries while watched (2 s)" in got
    assert "nvlink_crc_errors_per_s 150 errors/s > max 100 errors/s [limit: h200-sxm-141gb.yaml checks.nvlink_crc_errors_per_s]" in got
    assert "nvlink_replay_errors_per_s 20 errors/s > max 10 errors/s [limit: h200-sxm-141gb.yaml checks.nvlink_replay_errors_per_s]" in got


def test_every_nvml_gpu_needs_a_reading():
    assert nj.missing_gpus([0, 1], [0, 1], "nvlink") == []
    (f,) = nj.missing_gpus([0, 1, 2], [0], "nvlink")
    assert f.failure == "nvlink: no reading for NVML GPU(s) 1, 2"


def test_topology():
    pairs = nvlink_doc()["pairs"]
    assert failures(nj.topology(pairs, H200)) == []
    sick = copy.deepcopy(pairs)
    sick[0].update(nvlink=False, common_ancestor="SYS")
    sick[0]["p2p"]["read"] = "CHIPSET_NOT_SUPPORTED"
    assert failures(nj.topology(sick, H200)) == [
        "GPU 0 <-> GPU 1 not NVLink-connected (topology SYS); GPU 0 <-> GPU 1 P2P not available: "
        "{'read': 'CHIPSET_NOT_SUPPORTED'}"]


# ---------------------------------------------------------------------------------------------------------
# P2P bandwidth


def p2p_doc() -> dict:
    return saved("p2p_bandwidth-bf21a9e8fb.json")


def test_healthy_p2p_passes_and_names_the_worst_pair():
    found = nj.p2p_bandwidth(p2p_doc(), H200, [0, 1])
    assert failures(found) == []
    worst = {f.check: f for f in found if f.check.endswith("_worst_pair")}
    assert worst["p2p_unidir_bw_gbps_worst_pair"].value == 390.98
    assert worst["p2p_unidir_bw_gbps_worst_pair"].extra == {"pair": "GPU 0 -> GPU 1"}


def test_slow_missing_and_failed_pairs():
    doc = p2p_doc()
    doc["pairs"][0]["unidir_gbps"] = 120.0
    found = nj.p2p_bandwidth(doc, H200, [0, 1])
    got = failures(found)
    # the pair's own figure fails (its action follows its confirmation); the worst pair is recorded, never a second
    # failure of its own (which had no limit, so no slow-figure rule, and fell to the test's hardware row)
    assert got == ["p2p_unidir_bw_gbps 120 GB/s < min 340 GB/s [limit: h200-sxm-141gb.yaml checks.p2p_unidir_bw_gbps]"]
    worst = next(f for f in found if f.check == "p2p_unidir_bw_gbps_worst_pair")
    assert worst.value == 120.0 and worst.failure is None and worst.extra == {"pair": "GPU 0 -> GPU 1"}
    # a pair not measured, or whose copy failed, is an error (nothing measured), not a failure of the part
    doc = p2p_doc()
    doc["pairs"] = doc["pairs"][:1]
    (miss,) = [f for f in nj.p2p_bandwidth(doc, H200, [0, 1]) if f.check == "p2p_pairs_missing"]
    assert miss.failure is None and miss.error == "P2P bandwidth not measured for GPU 1 -> GPU 0"
    assert (miss.cause.cls, miss.cause.kind) == ("tool", "gap")
    doc = p2p_doc()
    doc["pairs"][1].update(unidir_gbps=None, error="RuntimeError: CUDA error: peer access is not supported")
    found = nj.p2p_bandwidth(doc, H200, [0, 1])
    (err,) = [f for f in found if f.check == "p2p_error"]
    assert err.error == "P2P GPU 1 -> GPU 0: RuntimeError: CUDA error: peer access is not supported"
    assert (err.cause.cls, err.cause.kind) == ("unverified", "p2p_error")
    assert "p2p_unidir_bw_gbps: no value measured (limit >= 340 GB/s)" in failures(found)


def test_p2p_without_a_limit_is_an_error_not_a_pass():
    sku = dataclasses.replace(H200, checks={k: v for k, v in H200.checks.items() if k != "p2p_bidir_bw_gbps"})
    with pytest.raises(ThresholdError, match="no limit for check 'p2p_bidir_bw_gbps'"):
        nj.p2p_bandwidth(p2p_doc(), sku, [0, 1])


def test_copy_gbps_arithmetic():
    # 5 copies of 1 GiB in 10 ms = 536.87 GB/s (1e9 bytes/s); bidir moves twice the bytes in the same time
    assert p2p.copy_gbps(1 << 30, 5, 10.0) == pytest.approx(536.870912)
    assert p2p.copy_gbps(1 << 30, 5, 10.0, directions=2) == pytest.approx(1073.741824)
    with pytest.raises(ValueError):
        p2p.copy_gbps(1 << 30, 5, 0.0)


def test_p2p_probe_without_cuda_fails_cleanly():
    rc, doc, stderr = run_probe("p2p_bandwidth", {"bytes": 1 << 20})
    assert rc == 1 and doc["failed"] is True
    assert doc["msg"].startswith(("no CUDA device visible to torch", "torch not installed"))
    assert "Traceback" not in stderr


def test_p2p_probe_refuses_unknown_arguments():
    rc, doc, _ = run_probe("p2p_bandwidth", {"p2p_bandwidth": True})
    assert rc == 1 and doc["msg"] == "unknown argument(s): p2p_bandwidth"


# ---------------------------------------------------------------------------------------------------------
# NVLink pairs (probe-side pure helpers)


def test_pair_nvlink_through_nvswitch():
    links = [{"link": i, "active": True, "remote_pci_bus_id": "00000000:C5:00.0", "remote_device_type": "SWITCH"}
             for i in range(18)]
    links_b = [dict(lk) for lk in links]
    links_b[5]["active"] = False
    got = nvl.pair_nvlink(links, links_b, "00000000:18:00.0", "00000000:2A:00.0",
                          {"00000000:18:00.0", "00000000:2A:00.0"}, "OK")
    assert got == {"nvlink": True, "nvlink_via": "nvswitch", "nvlink_count": 17}
    assert nvl.topo_label(dict(got, common_ancestor="SYS")) == "NV17"
    none = nvl.pair_nvlink([], [], "00000000:18:00.0", "00000000:2A:00.0", set(), None)
    assert nvl.topo_label(dict(none, common_ancestor="SYS")) == "SYS"


def _nvlink_doc() -> dict:
    return json.loads((REPLAY / "nvlink-80c5152746.json").read_text())["doc"]  # sample_seconds 2.0


def _half_speed_link_3_of_gpu_1(doc):
    """ALTERED: GPU 1's NVLink 3 at half the 26562 Mbps all 36 links of the capture read (still active)."""
    lk = doc["gpus"][1]["links"][3]
    assert lk["link"] == 3 and lk["active"] is True and lk["speed_mbps"] == 26562
    lk["speed_mbps"] = 13281


# -- NVLink at a reduced speed ------------------------------------------------------------------------------

def test_node_link_speed_is_what_most_links_trained_at():
    doc = _nvlink_doc()
    assert nj.node_link_speed(doc["gpus"]) == (26562, 36)
    _half_speed_link_3_of_gpu_1(doc)
    assert nj.node_link_speed(doc["gpus"]) == (26562, 35)
    assert nj.node_link_speed([]) is None
    # an unreadable speed (the H200's speed_mbps_common reads "Not Supported") is no reference
    for g in doc["gpus"]:
        for lk in g["links"]:
            lk["speed_mbps"] = {"nvml_error": "Not Supported"}
    assert nj.node_link_speed(doc["gpus"]) is None


def test_healthy_links_have_no_speed_failure():
    doc = _nvlink_doc()
    speed = nj.node_link_speed(doc["gpus"])
    for g in doc["gpus"]:
        assert [f.failure for f in nj.links(g, H200, doc["sample_seconds"], speed) if f.failure] == []


def test_slow_link_fails_naming_link_figures_and_limit_source():
    doc = _nvlink_doc()
    _half_speed_link_3_of_gpu_1(doc)
    speed = nj.node_link_speed(doc["gpus"])
    assert [f.failure for f in nj.links(doc["gpus"][0], H200, 2.0, speed) if f.failure] == []
    got = [f for f in nj.links(doc["gpus"][1], H200, 2.0, speed) if f.failure]
    assert [(f.check, f.value, f.extra["link"]) for f in got] == [("nvlink_link_speed_mbps", 13281, 3)]
    assert got[0].failure == ("NVLink 3 at 13281 Mbps (remote FFFFFFFF:FF:FF.0), below the 26562 Mbps of 35 "
                              "other active links of this node [limit: the node's own links, "
                              "NVML_FI_DEV_NVLINK_GET_SPEED]")


def test_a_sku_link_speed_floor_is_judged_where_the_file_has_one():
    import dataclasses
    from gpuaccept.config.thresholds import Limit
    lim = Limit(origin="h200-sxm-141gb", check="nvlink_link_speed_mbps", direction="min", bound=30000, unit="Mbps", source="test floor")
    sku = dataclasses.replace(H200, checks={**H200.checks, "nvlink_link_speed_mbps": lim})
    doc = _nvlink_doc()
    judged = [f for f in nj.links(doc["gpus"][0], sku, 2.0, nj.node_link_speed(doc["gpus"]))
              if f.check == "nvlink_link_speed_mbps"]
    assert len(judged) == 18 and all(f.limit is lim and f.value == 26562 for f in judged)


def test_half_speed_nvlink_fails_the_nvlink_layer(tmp_path):
    """Before: test_nvlink_links passed on this node (only the active-link count was judged)."""
    inv = replay_project(tmp_path, alter(tmp_path, "nvlink", _half_speed_link_3_of_gpu_1))
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-m", "nvlink")
    cases = {c["name"]: c for c in junit(rep / "junit-nvlink.xml")}
    case = cases["test_nvlink_links[h200-a]"]
    assert case["outcome"] == "failure", case
    assert case["message"].startswith("h200-a GPU 1 (00000000:00:07.0, serial 1650000000002): NVLink 3 at 13281 "
                                      "Mbps (remote FFFFFFFF:FF:FF.0), below the 26562 Mbps of 35 other active "
                                      "links"), case["message"]
    assert cases["test_nvlink_topology[h200-a]"]["outcome"] == "passed"


# -- P2P unsupported between two GPUs: the lines name the pair, and say why ----------------------------------

def _no_peer_access(doc):
    """ALTERED: CUDA says no peer access between the two H200s (as with NVLink P2P off or an IOMMU in the way);
    the copies then go through host memory at PCIe-like speed."""
    for p in doc["pairs"]:
        p["peer_access"] = False
        p["unidir_gbps"], p["bidir_gbps"] = 21.3, 30.2


def test_p2p_without_peer_access_names_each_pair_and_the_cause(tmp_path):
    """Before: four lines 'h200-a: p2p_unidir_bw_gbps 21.3 GB/s < min 340 GB/s [...]', two of each alike, no
    pair, no bus id, and nothing about peer access."""
    inv = replay_project(tmp_path, alter(tmp_path, "p2p_bandwidth", _no_peer_access))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-m", "nvlink")
    case = {c["name"]: c for c in junit(rep / "junit-nvlink.xml")}["test_p2p_bandwidth[h200-a]"]
    assert case["outcome"] == "failure", case
    a, b = "GPU 0 (00000000:00:06.0)", "GPU 1 (00000000:00:07.0)"
    assert case["message"] == (f"h200-a: P2P {a} -> {b}: CUDA peer access not available "
                               "(torch.cuda.can_device_access_peer False): copies staged through host memory; the "
                               "SKU expects NVLink P2P between every pair")
    # each pair's line, told apart by its direction (pytest prints the failure text once more where CI is set)
    lines = {ln for ln in res.stdout.splitlines() if ln.startswith("h200-a: p2p_unidir_bw_gbps")}
    assert lines == {f"h200-a: p2p_unidir_bw_gbps 21.3 GB/s < min 340 GB/s ({x} -> {y}) "
                     "[limit: h200-sxm-141gb.yaml checks.p2p_unidir_bw_gbps]" for x, y in ((a, b), (b, a))}
    # the platform keeps CUDA from the peer path NVML shows (ACS, IOMMU, hypervisor): configuration, never a drain
    (t,) = [t for t in json.loads((rep / "results.json").read_text())["tests"] if "test_p2p_bandwidth" in t["nodeid"]]
    assert (t["action"]["action"], t["action"]["cause"]) == ("fix-config", "configuration"), t["action"]
    assert not (rep / "hosts-drain-rma.txt").exists()


@pytest.mark.parametrize("change, said", [
    (lambda d: d["pairs"][0].update(error="CUDA error: out of memory", unidir_gbps=None, bidir_gbps=None),
     "CUDA error: out of memory"),
    (lambda d: d["pairs"].pop(), "P2P bandwidth not measured for GPU 1 -> GPU 0"),
])
def test_a_p2p_pair_that_measured_nothing_is_an_error_never_a_drain(tmp_path, change, said):
    """ALTERED: one pair's copy failed (CUDA's out of memory), or the pair is missing from the document: nothing was
    measured, so nothing is proven of the part: ERROR, rerun (before: FAIL, drain-rma from the test's row)."""
    inv = replay_project(tmp_path, alter(tmp_path, "p2p_bandwidth", change))
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-m", "nvlink", "-k", "p2p")
    (t,) = [t for t in json.loads((rep / "results.json").read_text())["tests"] if "test_p2p_bandwidth" in t["nodeid"]]
    assert t["outcome"] == "error" and said in t["message"], t
    assert t["action"]["action"] == "rerun" and t["action"]["cause"] in ("tool", "unverified"), t["action"]


def test_healthy_p2p_has_no_failure():
    doc = json.loads((REPLAY / "p2p_bandwidth-bf21a9e8fb.json").read_text())["doc"]
    got = nj.p2p_bandwidth(doc, H200, [0, 1])
    assert [f.failure for f in got if f.failure] == []
    assert [f.context for f in got if f.check == "p2p_unidir_bw_gbps"] == ["GPU 0 -> GPU 1", "GPU 1 -> GPU 0"]


# -- a GPU pair without NVLink P2P: the topology line names both bus ids -------------------------------------

def test_topology_failure_names_bus_ids():
    """ALTERED: the capture's one pair read as NVML would with P2P off (statuses 'not supported') over PHB.
    Before: 'GPU 0 <-> GPU 1 not NVLink-connected ...', no bus id."""
    doc = json.loads((REPLAY / "nvlink-bf21a9e8fb.json").read_text())["doc"]
    pair = doc["pairs"][0]
    pair.update(nvlink=False, p2p={"read": "not supported", "write": "not supported", "nvlink": "not supported"})
    got = [f.failure for f in nj.topology(doc["pairs"], H200, doc["gpus"]) if f.failure]
    assert got == ["GPU 0 (00000000:00:06.0) <-> GPU 1 (00000000:00:07.0) not NVLink-connected (topology PHB); "
                   "GPU 0 (00000000:00:06.0) <-> GPU 1 (00000000:00:07.0) P2P not available: "
                   "{'read': 'not supported', 'write': 'not supported'}"]
    assert [f.failure for f in nj.topology(json.loads((REPLAY / "nvlink-bf21a9e8fb.json").read_text())["doc"]["pairs"],
                                           H200, doc["gpus"])] == [None]
