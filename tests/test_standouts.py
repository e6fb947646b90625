"""The one stand-out engine and the one median (gpuaccept.judging.standouts), and that every report takes its
stand-outs from it: summary.md and results.json of a run without history, the history database's comparisons."""
from __future__ import annotations

import math

import pytest

from gpuaccept.judging import standouts as so
from gpuaccept.judging.compute import node_median
from gpuaccept.judging.readings import number
from gpuaccept.reporting import history


def fig(host, value, check="bf16_tflops", gpu=0, serial=None, sku="h200-sxm-141gb", lim=500.0, **extra):
    return {"host": host, "check": check, "gpu": gpu, "serial": serial or f"S-{host}-{gpu}", "sku": sku,
            "value": value, "unit": "TFLOP/s", "limit": {"min": lim}, "verdict": "pass", "extra": extra}


@pytest.mark.parametrize("values,expected", [([], None), ([3.0], 3.0), ([1.0, 9.0, 5.0], 5.0),
                                             ([1.0, 2.0, 4.0, 10.0], 3.0)])
def test_one_median_is_the_middle_or_the_mean_of_the_two_middles(values, expected):
    assert so.median(values) == expected
    assert node_median(dict(enumerate(values))) == expected  # the compute layer's node median is the same one


@pytest.mark.parametrize("v,expected", [(1, 1), (2.5, 2.5), (True, None), (None, None), ("3", None),
                                        (math.nan, None), (math.inf, None)])
def test_the_number_helper(v, expected):
    assert number(v) == expected


def test_standout_pct_sets_the_peer_rule_too():
    """``--standout-pct 5``: a bf16 figure 7 % under a tight fleet's median (above its floor) is a fleet outlier,
    in the run without history (outliers) and in the history's comparisons (fleet_outliers); at
    the default 10 % it is not. It had applied to the references only."""
    figs = [fig(f"h{i}", v) for i, v in enumerate([666.0, 665.0, 667.0, 666.5, 665.5])] + [fig("slow", 619.0)]
    assert [o for o in so.outliers(figs, []) if o["against"] == "fleet"] == []
    assert [(o["host"], o["pct"]) for o in so.outliers(figs, [], pct=5.0)] == [("slow", 7.0)]
    assert [o["host"] for o in history.fleet_outliers(figs, pct=5.0)] == ["slow"]
    assert history.fleet_outliers(figs) == []


def test_peer_rule_needs_both_ten_percent_and_three_mads():
    # a noisy check (storage-like spread): 12 % below the median but inside the fleet's own spread
    noisy = [fig(f"h{i}", v, check="read_gbps") for i, v in enumerate([100, 80, 120, 90, 110, 88])]
    assert so.peer_outliers(so.peer_groups(noisy)) == []
    # a very tight fleet: 1 % below is many MADs away, but not a material slowdown
    tight = [fig(f"h{i}", v) for i, v in enumerate([660.0, 660.1, 659.9, 660.0, 653.0])]
    assert so.peer_outliers(so.peer_groups(tight)) == []
    # 11 % below an otherwise identical fleet (MAD 0): the percentage alone decides
    flat = [fig(f"h{i}", 660.0) for i in range(4)] + [fig("slow", 587.0)]
    got = so.peer_outliers(so.peer_groups(flat))
    assert [(o["host"], o["against"], o["mads"]) for o in got] == [("slow", "fleet", "inf")]
    assert got[0]["reference"] == 660.0 and got[0]["pct"] == pytest.approx(11.1, abs=0.05)


def test_peers_are_compared_like_with_like():
    figs = ([fig(f"h{i}", 300.0 + i, check="busbw_gbps", bytes=8 << 30) for i in range(4)]
            + [fig(f"h{i}", 20.0 + i, check="busbw_gbps", bytes=4096) for i in range(4)]
            + [fig(f"a{i}", 250.0, sku="a100-sxm4-80gb") for i in range(3)] + [fig(f"h{i}", 660.0) for i in range(3)])
    assert so.peer_outliers(so.peer_groups(figs)) == []  # 4 KiB is never compared with 8 GiB, nor an A100 with an H200
    assert so.check_of(fig("h", 1.0, check="p2p_unidir_bw_gbps", pair=[0, 1])) == "p2p_unidir_bw_gbps[pair=0-1]"
    # a storage path's facts of the moment (the fio file's size capped by free space, device numbers) are no part
    # of what was measured: a fuller disk or a reboot keeps the path's series
    one = fig("h", 2.0, check="seq_read_gbps /data", fstype="xfs", numjobs=4, total_bytes=8 << 30, device="259:1")
    two = fig("h", 2.0, check="seq_read_gbps /data", fstype="xfs", numjobs=4, total_bytes=3 << 30, device="254:0")
    assert so.check_of(one) == so.check_of(two) == "seq_read_gbps /data[fstype=xfs,numjobs=4]"
    # the kernel log grows between runs: how many lines a run read is no part of which log was read
    logs = [fig("h", "journalctl", check="kernel_log_source", lines_scanned=n, note="x") for n in (2, 4)]
    assert {so.check_of(f) for f in logs} == {"kernel_log_source"}


def test_against_the_previous_run_same_gpu_same_sku_passing_only():
    prev = [fig("a", 800.0), fig("b", 660.0), fig("c", 800.0, sku="a100-sxm4-80gb")]
    now = [fig("a", 700.0), fig("b", 650.0), fig("c", 600.0), {**fig("d", 100.0), "verdict": "fail"}]
    got = so.outliers(now, prev, previous_run="r0")
    assert [(o["host"], o["against"], o["reference"], o["ref_run"], o["pct"]) for o in got] == [
        ("a", "previous", 800.0, "r0", 12.5)]  # b: 1.5 %; c: another SKU before; d failed: a failure, not a stand-out
    assert so.outliers(now, prev, pct=15.0) == []


def test_history_and_a_run_without_history_find_the_same_stand_outs(tmp_path):
    """The history's comparisons (references from the database) and a run without history (the previous
    results.json) judge one pair of runs alike: the same records, against the same previous figures."""
    before = [fig(f"h{i}", 660.0) for i in range(5)]
    now = [fig(f"h{i}", v) for i, v in enumerate([661.0, 659.0, 660.0, 580.0, 590.0])]
    con = history.connect(str(tmp_path / "h.sqlite"))
    history.record_run(con, {"run_id": "r1", "started": 1000.0, "verdict": "PASS"}, [], before, {})
    refs = history.references(con, now)
    from_db = [o for o in history.standouts(now, refs) if o["against"] == "previous"] + history.fleet_outliers(now)
    without = so.outliers(now, before, previous_run="r1")
    assert from_db == without and {o["host"] for o in without} == {"h3", "h4"}, (from_db, without)
    assert {o["against"] for o in without} == {"previous", "fleet"}
