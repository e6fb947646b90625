"""Burn-in: the real probe on the CPU (gloo ranks, tiny sizes, one rank made to flip a bit) and the pure
judging on a real 2xH200 capture (tests/data/h200x2-burnin.json: 120 s, bf16+fp8, 2026-11-30) altered the way
sick nodes read: a clock that sags, a temperature that climbs, counters that grow, a wrong checksum."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gpuaccept.judging import burnin
from gpuaccept.config.thresholds import judge, load_sku_file
from probe_helpers import run_probe
from project_helpers import burnin_capture as capture, burnin_replay_folder

SKU = load_sku_file(str(Path(__file__).parents[1] / "thresholds" / "h200-sxm-141gb.yaml"))


def failures(found: dict) -> dict[int, list[str]]:
    """Per rank the failure lines, as the recorder makes them: a Finding's own failure, or its figure judged
    against its limit by the one judge (gpuaccept.config.thresholds.judge)."""
    out = {}
    for r, fs in found.items():
        lines = [f.failure for f in fs if f.failure]
        for f in fs:
            if f.limit is not None:
                v = judge(f.limit, f.value if isinstance(f.value, (int, float)) else None)
                if not v.passed:
                    lines.append(f"{f.check}: {v.message}")
        out[r] = lines
    return out


def field(doc: dict, name: str) -> int:
    return doc["telemetry"]["fields"].index(name)


def test_healthy_capture_passes():
    doc = capture()
    found = burnin.judge(doc, SKU)
    assert failures(found) == {0: [], 1: []}
    checks = {f.check: f.value for f in found[0]}
    assert checks["burnin_bf16_tflops_start"] > 600 and checks["burnin_fp8_tflops_end"] > 1200
    assert checks["sdc_mismatched_rounds"] == 0 and checks["burnin_temp_c_max"] <= 85
    assert 0 < checks["burnin_nvlink_crc_errors_per_s_per_link"] < 100  # real CRC growth under load, judged per link


def test_clock_sag_with_hw_thermal_slowdown_fails_naming_the_reason():
    doc = capture()
    last_t = max(w["t0"] for w in doc["windows"])
    for w in doc["windows"]:
        if w["rank"] == 1 and w["t0"] > last_t - 30:
            w["bf16_tflops"] *= 0.8
    i = field(doc, "clocks_event_reasons")
    for row in doc["telemetry"]["rows"]:
        if row[1] == 1 and row[0] > last_t - 30:
            row[i] = 0x40 | 0x4
    fails = failures(burnin.judge(doc, SKU))
    assert fails[0] == []
    text = "\n".join(fails[1])
    assert "bf16_tflops fell" in text and "HW thermal slowdown" in text.split("bf16_tflops fell")[1].splitlines()[0]
    assert "HW thermal slowdown during burn-in" in text


def test_one_gpu_slower_than_its_peer_all_along_fails_the_median_rule():
    doc = capture()
    doc["world_size"] = 3  # a third GPU, a copy of GPU 1, so that the node has a median to fall below
    for w in [w for w in doc["windows"] if w["rank"] == 1]:
        doc["windows"].append({**w, "rank": 2})
    for w in doc["windows"]:
        if w["rank"] == 0:
            w["bf16_tflops"] *= 0.85
    for rnd in doc["sdc"]:
        rnd["hashes"]["2"] = rnd["hashes"]["1"]
    fails = failures(burnin.judge(doc, SKU))
    assert any("below the node's median" in m and "bf16_tflops" in m for m in fails[0])
    assert not any("below the node's median" in m for m in fails[1] + fails[2])


def test_temperature_that_climbs_fails():
    doc = capture()
    i = field(doc, "temp_c")
    doc["telemetry"]["rows"][-1][i] = 91  # last sample of GPU 1
    fails = failures(burnin.judge(doc, SKU))
    assert fails[0] == [] and any("burnin_temp_c_max" in m and "91" in m for m in fails[1])


@pytest.mark.parametrize("name,bump,expect", [
    ("ecc_uncorrected_volatile", 1, "new uncorrectable ECC"),
    ("remap_pending", 1, "row remap became pending"),
    ("pcie_replay", 5000, "burnin_pcie_replay_per_hour"),
    ("nvlink_replay", 100000, "burnin_nvlink_replay_errors_per_s_per_link"),
    ("ecc_corrected_volatile", 1000, "burnin_ecc_corrected_per_hour"),
])
def test_counter_that_grows_fails(name, bump, expect):
    doc = capture()
    i = field(doc, name)
    rows = [r for r in doc["telemetry"]["rows"] if r[1] == 0]
    rows[-1][i] = rows[0][i] + bump
    fails = failures(burnin.judge(doc, SKU))
    assert fails[1] == []
    assert any(expect in m for m in fails[0]), fails[0]


def test_a_gpu_with_a_different_checksum_computes_wrong_results():
    doc = capture()
    doc["sdc"][3]["hashes"]["1"] = "0" * 64
    fails = failures(burnin.judge(doc, SKU))
    assert fails[0] == [] and any("computes wrong results" in m and "round(s) 3" in m for m in fails[1])


def test_missing_telemetry_and_missing_sdc_are_failures_not_passes():
    doc = capture()
    doc["telemetry"]["rows"] = [r for r in doc["telemetry"]["rows"] if r[1] == 0]
    doc["sdc"] = []
    fails = failures(burnin.judge(doc, SKU))
    assert any("no NVML telemetry" in m for m in fails[1])
    assert all(any("no silent-data-corruption check" in m for m in fails[r]) for r in (0, 1))


def test_probe_on_cpu_three_ranks_one_flipped_bit_is_named():
    rc, doc, err = run_probe("burnin", {"device": "cpu", "seconds": 2.5, "gpus": 3, "flip_bit_rank": 1}, timeout=180)
    assert rc == 0, doc
    assert doc["world_size"] == 3 and doc["sdc"], doc
    assert {r["round"] for r in doc["sdc"]} and all(len(r["hashes"]) == 3 for r in doc["sdc"])
    assert {w["rank"] for w in doc["windows"]} == {0, 1, 2}
    fails = failures(burnin.sdc_findings(doc["sdc"], 3))
    assert fails[0] == [] and fails[2] == [] and "computes wrong results" in fails[1][0]


def test_probe_on_cpu_two_ranks_disagreeing_fails_both():
    rc, doc, _ = run_probe("burnin", {"device": "cpu", "seconds": 1.5, "gpus": 2, "flip_bit_rank": 0}, timeout=180)
    assert rc == 0, doc
    fails = failures(burnin.sdc_findings(doc["sdc"], 2))
    assert all("disagree" in fails[r][0] for r in (0, 1))


def test_probe_stops_its_load_on_sigterm_and_keeps_what_it_measured(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time
    probes = Path(__file__).parents[1] / "gpuaccept" / "probes"
    p = subprocess.Popen([sys.executable, str(probes / "burnin.py"), json.dumps({"device": "cpu", "seconds": 120})],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    for line in p.stderr:  # the first window's progress line: the load runs
        if line.startswith("burnin "):
            break
    t0 = time.time()
    os.killpg(p.pid, signal.SIGTERM)  # the whole group, as the node-side watchdog does
    out, _ = p.communicate(timeout=90)
    doc = json.loads(out.splitlines()[-1])
    assert doc["interrupted"] == "SIGTERM" and doc["wall_s"] < 110
    assert time.time() - t0 < 60
    series = list(burnin.series_rows(doc))
    assert series, "the windows measured before the signal are kept"


def test_series_rows_cover_telemetry_and_windows():
    doc = capture()
    rows = list(burnin.series_rows(doc))
    figs = {r[2] for r in rows}
    assert {"temp_c", "power_w", "sm_mhz", "bf16_tflops", "hbm_copy_gbps"} <= figs
    assert all(isinstance(r[3], (int, float)) for r in rows)


def test_suite_end_to_end_on_the_replayed_capture(tmp_path):
    from project_helpers import junit, make_project, run_pytest
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={burnin_replay_folder(tmp_path)} "
                   "gpu_sku=h200-sxm-141gb gpus_per_node=2\n")
    rep = tmp_path / "rep"
    plain = run_pytest(tmp_path, "--inventory", str(inv), "--collect-only", "-q")
    assert "test_burnin" not in plain.stdout  # deselected unless -m burnin
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-m", "burnin", "--burnin-minutes", "2")
    assert res.returncode == 0, res.stdout[-3000:]
    case = junit(rep / "junit-burnin.xml")[0]
    assert case["outcome"] == "passed", case
    csv_text = (rep / "burnin" / "h200-a.csv").read_text().splitlines()
    assert csv_text[0] == "time_s,gpu,pci_bus_id,figure,value" and len(csv_text) > 1000
    assert any(",00000000:00:07.0,temp_c," in ln for ln in csv_text)
    figs = json.loads((rep / "results.json").read_text())["figures"]
    start = {f["gpu"]: f["value"] for f in figs if f["check"] == "burnin_bf16_tflops_start"}
    assert set(start) == {0, 1} and all(v > 600 for v in start.values())

    def sick(doc):
        doc["sdc"][2]["hashes"]["0"] = "f" * 64
    rep2 = tmp_path / "rep2"
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={burnin_replay_folder(tmp_path / 's', sick)} "
                   "gpu_sku=h200-sxm-141gb gpus_per_node=2\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep2), "-m", "burnin")
    assert res.returncode == 1
    case = junit(rep2 / "junit-burnin.xml")[0]
    assert case["outcome"] == "failure" and "GPU 0 (00000000:00:06.0" in case["text"]
    assert "computes wrong results" in case["text"] and "GPU 1" not in case["text"]


def test_foreign_load_during_burnin_blocks_instead_of_failing_the_card(tmp_path):
    """A matmul loop from another process on GPU 1 halfway through: GPU 1's windows sag under its peer, but the
    probe saw a second compute process there, so the test is an ERROR "blocked by burnin", figures kept."""
    from project_helpers import junit, make_project, run_pytest

    def foreign(doc):
        t_half = max(w["t0"] for w in doc["windows"]) / 2
        for w in doc["windows"]:
            if w["rank"] == 1 and w["t0"] >= t_half:
                w["bf16_tflops"] *= 0.5
        doc["gpus"][1]["foreign_processes"] = {"t": round(t_half, 1), "processes": ["pid 4242 python3"]}
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={burnin_replay_folder(tmp_path, foreign)} "
                   "gpu_sku=h200-sxm-141gb gpus_per_node=2\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-m", "burnin")
    assert res.returncode == 1
    case = junit(rep / "junit-burnin.xml")[0]
    assert case["outcome"] == "error", case
    assert "blocked by burnin: GPU 1: foreign compute process on the GPU during burn-in" in case["text"]
    assert "pid 4242 python3" in case["text"] and "figure kept" in case["text"]


def test_burnin_stopped_on_the_node_is_an_error_not_a_sick_card(tmp_path):
    """Found on 2026-11-30 (second trial): a burn-in the node stopped early (ALTERED: the capture's document marked
    interrupted by SIGTERM) was a FAILURE "burn-in interrupted (True)"; it did not run its course, which says
    nothing against the card: an ERROR naming the signal and how far it got."""
    from project_helpers import junit, make_project, run_pytest

    def stopped(doc):
        doc["interrupted"] = "SIGTERM"
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={burnin_replay_folder(tmp_path, stopped)} "
                   "gpu_sku=h200-sxm-141gb gpus_per_node=2\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-m", "burnin", "--burnin-minutes", "2")
    assert res.returncode == 1, res.stdout[-2000:]
    case = junit(rep / "junit-burnin.xml")[0]
    assert case["outcome"] == "error", case
    assert "burn-in stopped by SIGTERM after" in case["text"] and "of 120 s" in case["text"], case["text"]
