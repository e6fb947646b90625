"""The stop-when-stable rule of the throughput probes (gpuaccept/probes/_steady.py): the pure rule on series,
the window loop on real timed work, and the joint decision of threads that measure together."""
from __future__ import annotations

import re
import statistics
import threading
import time

import pytest

from probe_helpers import load_probe

steady = load_probe("_steady")


def test_a_stable_series_stops_at_the_floor():
    # 0.1 s windows, floor 0.5 s, ceiling 3 s: stable from the second window on, so it stops when the floor is
    # reached (5 windows), not before and not later
    series = [100.0, 100.1, 100.05, 99.98, 100.02, 100.0, 100.01, 100.0]
    assert steady.replay_series(series, 0.1, 0.5, 3.0) == (5, "stable")
    assert steady.stop_reason(series[:4], 0.4, 0.5, 3.0) is None  # stable but under the floor
    assert steady.stop_reason(series[:5], 0.5, 0.5, 3.0) == "stable"


def test_a_drifting_series_runs_to_the_ceiling():
    # clocks still falling: each window 1 % below the previous one, never within 0.5 %
    series = [100.0 * 0.99 ** i for i in range(40)]
    assert steady.replay_series(series, 0.1, 0.5, 3.0) == (30, "ceiling")
    assert steady.stop_reason(series[:29], 2.9, 0.5, 3.0) is None
    # a drift that settles stops at the first stable window past the floor
    settling = [100.0, 95.0, 92.0, 91.0, 90.2, 90.1, 90.1]
    assert steady.replay_series(settling, 0.1, 0.2, 3.0) == (6, "stable")


def test_tolerance_edges():
    assert steady.stop_reason([100.0], 10.0, 0.0, 20.0) is None  # one window is never stable
    assert steady.stop_reason([100.0], 20.0, 0.0, 20.0) == "ceiling"
    assert steady.stop_reason([100.0, 100.49], 1.0, 0.0, 9.0) == "stable"  # 0.49 % < 0.5 %
    assert steady.stop_reason([100.0, 100.51], 1.0, 0.0, 9.0) is None
    assert steady.stop_reason([100.0, 99.0], 1.0, 0.0, 9.0, tolerance=0.02) == "stable"
    assert steady.stop_reason([100.0, 100.0], 1.0, 0.0, 9.0, tolerance=0.0) is None  # 0: a fixed length
    assert steady.stop_reason([100.0, 100.0], 9.0, 0.0, 9.0, tolerance=0.0) == "ceiling"
    # stable at the ceiling says stable (the figure did settle)
    assert steady.stop_reason([5.0, 5.0], 9.0, 0.0, 9.0) == "stable"


def test_steady_args_defaults_and_refusals():
    assert steady.steady_args({}, 1.0, 4.0) == {"min_s": 1.0, "max_s": 4.0, "tolerance": 0.005}
    assert steady.steady_args({"max_seconds": 0.5}, 1.0, 4.0)["min_s"] == 0.5  # the floor follows a low ceiling
    assert steady.steady_args({"min_seconds": 9}, 1.0, 4.0)["max_s"] == 9.0  # the ceiling follows a high floor
    assert steady.steady_args({"tolerance_pct": 2}, 1.0, 4.0)["tolerance"] == 0.02
    for bad, msg in (({"min_seconds": 2, "max_seconds": 1}, "need 0 <= min_seconds <= max_seconds"),
                     ({"min_seconds": -1}, "need 0 <= min_seconds"),
                     ({"tolerance_pct": 100}, "tolerance_pct must be in [0, 100)"),
                     ({"max_seconds": "long"}, "must be numbers")):
        with pytest.raises(steady.ProbeFailed, match=re.escape(msg)):
            steady.steady_args(bad, 1.0, 4.0)
    assert steady.describe(steady.steady_args({}, 1.0, 4.0)) == {"min_seconds": 1.0, "max_seconds": 4.0,
                                                                 "tolerance_pct": 0.5}


def test_run_windows_on_real_timed_work():
    """Windows of real sleeps (a steady load) stop on stability once the floor is measured; a load that gets
    slower every window runs to the ceiling; the result carries every sample and the fields documents carry."""
    def sleeper(step):
        n = {"i": 0}

        def work():
            n["i"] += 1
            t = 0.004 * (1 + step) ** n["i"]
            t0 = time.perf_counter()
            time.sleep(t)
            return [time.perf_counter() - t0]
        return steady.timed_window(work)

    got = steady.run_windows(sleeper(0.0), 0.02, 1.0, tolerance=0.25)  # sleeps overshoot by ~0.1 ms
    # stable (two windows agree) or settled (the figure agrees with itself): either stops on the figure; a loaded
    # machine's scheduler noise can make one window's sleeps disagree with the next (CI read "settled")
    assert got["stop"] in ("stable", "settled") and got["measured_s"] >= 0.02 and got["windows"] >= 2, got["stop"]
    assert got["measured_s"] < 1.0  # not the ceiling
    assert len(got["samples"]) == got["windows"] == len(got["window_medians"])
    assert steady.fields(got) == {"measured_s": round(got["measured_s"], 4), "windows": got["windows"],
                                  "stop": got["stop"]}
    # a load whose samples double every call never settles, whatever the machine's own noise: the ceiling
    calls = {"i": 0}

    def doubling():
        calls["i"] += 1
        time.sleep(0.002)
        return [float(2 ** calls["i"])], 0.002
    drift = steady.run_windows(doubling, 0.0, 0.05, tolerance=0.1)
    assert drift["stop"] == "ceiling" and drift["measured_s"] >= 0.05
    with pytest.raises(steady.ProbeFailed, match="no samples"):
        steady.run_windows(lambda: ([], 0.0), 0.0, 1.0)


def test_threads_measuring_together_stop_together():
    """Three threads: two stable from the start, one drifting until its ceiling; all stop after the same number
    of windows, each with its own reason."""
    joint, barrier = steady.Joint(), threading.Barrier(3, timeout=30)
    series = {0: [10.0] * 50, 1: [10.0] * 50, 2: [10.0 * 1.1 ** i for i in range(50)]}
    out = {}

    def body(slot):
        it = iter(series[slot])
        out[slot] = steady.run_windows(lambda: ([next(it)], 0.125), 0.25, 1.0,
                                       agree=lambda done: joint.agree(barrier, slot, done))

    threads = [threading.Thread(target=body, args=(s,)) for s in series]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert {s: (r["windows"], r["stop"]) for s, r in out.items()} == {0: (8, "stable"), 1: (8, "stable"),
                                                                      2: (8, "ceiling")}
    assert steady.Joint().gather(None, 3, "x") == {3: "x"}


def test_a_swinging_series_settles_when_its_figure_does():
    """A power-capped H200's bf16 windows (TFLOP/s of 0.25 s windows, 1xH200 quick run 2026-12-04) swing by up to
    6 % and no two successive ones agree within 0.5 %: the figure, the median so far, moves less than 0.5 % at
    the fifth window, and the rule stops there ("settled"); with windows alone it ran to the 2 s ceiling."""
    bf16 = [679.59, 638.63, 668.24, 679.55, 671.67, 641.88, 667.43, 682.17]
    assert steady.replay_series(bf16, 0.25, 0.5, 2.0) == (5, "settled")
    figures = [statistics.median(bf16[:i]) for i in range(1, 9)]
    assert steady.stop_reason(bf16[:5], 1.25, 0.5, 2.0) is None  # without the figures: windows only
    assert steady.stop_reason(bf16[:5], 1.25, 0.5, 2.0, figures=figures[:5]) == "settled"
    assert steady.stop_reason(bf16[:4], 1.0, 0.5, 2.0, figures=figures[:4]) is None  # 0.85 % is not settled
    # the same figures over windows that drift one way (each below the one before) never settle
    drift = sorted(bf16[:5], reverse=True)
    assert steady.stop_reason(drift, 1.25, 0.5, 2.0, figures=figures[:5]) is None
    assert steady.stop_reason(bf16[:5], 1.25, 0.5, 2.0, tolerance=0.0, figures=figures[:5]) is None
    assert steady.stop_reason(bf16[:2], 0.5, 1.0, 2.0, figures=[650.0, 650.0]) is None  # under the floor
    # windows that agree say "stable" first, whatever the figures do
    assert steady.stop_reason([600.0, 650.0, 651.0], 0.75, 0.5, 2.0, figures=[600.0, 625.0, 650.0]) == "stable"
