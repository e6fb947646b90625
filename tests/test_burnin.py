"""Burn-in: the real probe on the CPU (gloo ranks, tiny sizes, one rank made to flip a bit) and the pure
judging on a real 2xH200 capture (tests/data/h200x2-burnin.json: 120 s, bf16+fp8, 2026-11-30) altered the way
sick nodes read: a clock that sags, a temperature that climbs, counters that grow, a wrong checksum."""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from gpuaccept.judging import burnin
from gpuaccept.config.thresholds import judge, load_sku_file
from gpuaccept.probes._probe import PROCESS_NAME
from gpuaccept.reporting.folder import run_figures
from probe_helpers import load_probe, run_probe
from project_helpers import failed_hosts, burnin_capture as capture, burnin_replay_folder, junit, make_project, run_pytest

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
    # the probe and its ranks (burnin.py --worker) run under the probes' name, as the driver's Xid lines show them
    ranks = [int(d) for d in os.listdir("/proc") if d.isdigit() and _ppid(int(d)) == p.pid
             and b"--worker" in _read(f"/proc/{d}/cmdline", b"")]
    assert len(ranks) == 2 and {_read(f"/proc/{q}/comm", b"").decode().strip() for q in [p.pid, *ranks]} == {PROCESS_NAME}
    t0 = time.time()
    os.killpg(p.pid, signal.SIGTERM)  # the whole group, as the node-side watchdog does
    out, _ = p.communicate(timeout=90)
    doc = json.loads(out.splitlines()[-1])
    assert doc["interrupted"] == "SIGTERM" and doc["wall_s"] < 110
    assert time.time() - t0 < 60
    series = list(burnin.series_rows(doc))
    assert series, "the windows measured before the signal are kept"


def _read(path: str, default: bytes) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:  # the process is gone
        return default


def _ppid(pid: int) -> int | None:
    stat = _read(f"/proc/{pid}/stat", b"").decode(errors="replace")
    return int(stat.rsplit(")", 1)[1].split()[1]) if ")" in stat else None


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
    figs = run_figures(json.loads((rep / "results.json").read_text()))
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


xev = load_probe("xid_events")


# nv.c's Xid line for GPU 1 of the capture (bus 00000000:00:07.0), as the driver writes it (tests/data/kern-xid.log
# has the form); ALTERED: a line the 2xH200 node never logged
XID79_GPU1 = ("2026-11-30T09:10:00+0000 h200-a kernel: NVRM: Xid (PCI:0000:00:07): 79, pid='<unknown>', "
              "name=<unknown>, GPU has fallen off the bus.\n")


# ------------------------------------------------------------------ a worker that dies, a load that hangs (CPU)

def test_probe_keeps_the_windows_of_a_burnin_whose_worker_died_and_names_that_rank():
    """Rank 1 of 3 exits with code 3 twelve seconds into the load (ALTERED: the probe's test-only fault_rank);
    before, the probe failed as a whole (rc 1, no window kept)."""
    rc, doc, err = run_probe("burnin", {"device": "cpu", "seconds": 60, "gpus": 3, "stall_s": 20,
                                        "fault_rank": {"rank": 1, "after_s": 12.0, "how": "exit"}}, timeout=600)
    assert rc == 0, doc
    st = doc["stopped"]
    assert st["rank"] == 1 and st["how"] == "exited with 3", st
    assert "simulated lost device" in st["stderr"]
    assert doc["windows"] and {w["rank"] for w in doc["windows"]} == {0, 1, 2}
    # not run on to the burn-in's end: the load (from its start, whatever the workers' start-up took on a loaded
    # machine) stopped soon after rank 1 died at 12 s of its 60 s
    assert doc["wall_s"] - doc["load_started_s"] < doc["seconds_requested"] - 10, doc["wall_s"]
    rank, line = burnin.stopped(doc)
    assert rank == 1 and line.startswith("burn-in worker of this GPU exited with 3 at ")
    assert "of 60 s" in line and "judged as a partial burn-in" in line


def test_a_rank_is_named_behind_only_two_windows_back():
    """Ranks in lockstep close windows on their own clocks, one window apart at most: no rank is named for
    that; a rank two windows behind every other is the one that stopped first."""
    from gpuaccept.probes.burnin import _behind
    assert _behind({0: 24, 1: 23, 2: 24}) is None
    assert _behind({0: 24, 1: 24, 2: 24}) is None
    assert _behind({0: 24, 1: 21, 2: 23}) == 1
    assert _behind({0: 24, 1: 22, 2: 22}) is None
    assert _behind({0: 5}) is None


def test_probe_reports_a_hung_load_once_no_window_arrives_for_stall_s():
    """Rank 1 of 3 stops answering (ALTERED: fault_rank how=hang): every rank waits on it in the lockstep
    all-reduce; the probe stops the load after stall_s without a window, keeps what was measured, and says
    that it stalled (before: it ran on to seconds + 120 s and failed "rank None (GPU ?) ended with deadline")."""
    rc, doc, _ = run_probe("burnin", {"device": "cpu", "seconds": 120, "gpus": 3, "stall_s": 8,
                                      "fault_rank": {"rank": 1, "after_s": 12.0, "how": "hang"}}, timeout=600)
    assert rc == 0, doc
    st = doc["stopped"]
    assert st["how"] == "stopped reporting (no window from any GPU for 8 s)", st
    # stopped stall_s after the hang at 12 s, not at the end of its 120 s (the load's time, start-up aside)
    assert doc["wall_s"] - doc["load_started_s"] < doc["seconds_requested"] - 30 and doc["windows"]
    rank, line = burnin.stopped(doc)
    assert line.startswith("burn-in load stopped at ") and "a GPU stopped answering" in line
    assert rank == st["rank"]


# ------------------------------------------------------------------ the suite on the altered 2xH200 capture

def _fell_off_at(t_off: float):
    """ALTERED: GPU 1 (rank 1) falls off the bus at ``t_off`` s: its windows end there, its NVML readings after
    it are None (NVML answers "GPU is lost"), the probe says its worker exited with 1, the load stopped then."""
    def change(doc):
        doc["windows"] = [w for w in doc["windows"] if w["t1"] <= t_off]
        for row in doc["telemetry"]["rows"]:
            if row[1] == 1 and row[0] > t_off:
                row[2:] = [None] * (len(row) - 2)
        doc["telemetry"]["rows"] = [r for r in doc["telemetry"]["rows"] if r[0] <= t_off + 2]
        doc["sdc"] = [r for r in doc["sdc"] if r["t"] <= t_off]
        doc["wall_s"] = t_off + 2
        doc["stopped"] = {"rank": 1, "index": 1, "pci_bus_id": "00000000:00:07.0", "how": "exited with 1",
                          "t": t_off + 0.4, "windows": {"0": 12, "1": 12},
                          "stderr": "torch.AcceleratorError: CUDA error: unspecified launch failure"}
    return change


def _burnin_project(tmp_path: Path, change, xid_log: str | None = None) -> Path:
    captures = burnin_replay_folder(tmp_path, change)
    if xid_log is not None:  # the kernel log the node would have: read by the real xid_events probe
        log = tmp_path / "kern.log"
        log.write_text(xid_log)
        (saved_path,) = captures.glob("xid_events-*.json")
        saved = json.loads(saved_path.read_text())
        saved["doc"] = xev.main({"sources": [str(log)]})
        saved_path.write_text(json.dumps(saved))
    inv = make_project(tmp_path / "proj", [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={captures} gpu_sku=h200-sxm-141gb "
                   "gpus_per_node=2\n")
    return inv


def _failed_burnin(tmp_path: Path, change, xid_log: str | None = None) -> dict:
    """``-m burnin`` over the altered capture (:func:`_burnin_project`): asserts exit 1 and a failed burn-in
    test; returns its JUnit case."""
    inv = _burnin_project(tmp_path, change, xid_log)
    res = run_pytest(tmp_path / "proj", "--inventory", str(inv), "--reports", str(tmp_path / "rep"), "-m", "burnin",
                     "--history", "none")
    assert res.returncode == 1, res.stdout[-3000:]
    (case,) = junit(tmp_path / "rep" / "junit-burnin.xml")
    assert case["outcome"] == "failure", case
    return case


def test_a_gpu_that_falls_off_the_bus_mid_burnin_fails_by_bus_id_and_serial(tmp_path):
    inv = _burnin_project(tmp_path, _fell_off_at(60.0), XID79_GPU1)
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path / "proj", "--inventory", str(inv), "--reports", str(rep), "-m", "burnin",
                     "--burnin-minutes", "2", "--history", "none")
    assert res.returncode == 1, res.stdout[-3000:]
    (case,) = junit(rep / "junit-burnin.xml")
    assert case["outcome"] == "failure", case
    gpu1 = "h200-a GPU 1 (00000000:00:07.0, serial 1650000000002): "
    assert gpu1 + "burn-in worker of this GPU exited with 1 at 60.4 s of 120 s (last output: torch." \
                  "AcceleratorError: CUDA error: unspecified launch failure)" in case["text"], case["text"]
    assert gpu1 + "during burn-in: Xid 79 on 00000000:00:07.0" in case["text"], case["text"]
    assert "GPU 0 (" not in case["text"]
    figs = run_figures(json.loads((rep / "results.json").read_text()))
    assert any(f["check"] == "burnin_bf16_tflops_start" and f["gpu"] == 1 for f in figs)  # partial figures kept
    assert failed_hosts(rep / "failed-hosts.txt") == ["h200-a"]


def test_a_hung_load_fails_the_node_and_never_passes(tmp_path):
    def hung(doc):
        _fell_off_at(80.0)(doc)
        for row in doc["telemetry"]["rows"]:  # ALTERED further: a hang, not a lost GPU: NVML still answers
            if row[2] is None:
                row[2:] = [1980, 3201, 120.0, 40, 38, 0, 0, 0, 0, 0, 400, 0, 0]
        doc["stopped"] = {"rank": None, "index": None, "pci_bus_id": None, "t": 80.0, "stderr": "",
                          "how": "stopped reporting (no window from any GPU for 120 s)", "windows": {"0": 15, "1": 15}}
    case = _failed_burnin(tmp_path, hung)
    assert "h200-a: burn-in load stopped at 80.0 s of 120 s: stopped reporting (no window from any GPU for " \
           "120 s); a GPU stopped answering" in case["text"], case["text"]


# ------------------------------------------------------------------ --burnin-minutes too short to be judged

def test_a_burnin_too_short_to_judge_is_refused_before_any_node(tmp_path):
    """--burnin-minutes 0.5 (or anything under warm-up + 6 windows = 1.5 min) measured no steady window, and
    every healthy GPU FAILED "no throughput window after warm-up"; now exit 4 before any node, one line."""
    short = burnin.judge(_capture_cut(36.0), _sku())
    assert any("no throughput window after warm-up" in (f.failure or "") for f in short[0])  # what it read before
    inv = _burnin_project(tmp_path, None)
    for minutes in ("0.5", "1.4"):
        res = run_pytest(tmp_path / "proj", "--inventory", str(inv), "--reports", str(tmp_path / f"r{minutes}"),
                         "-m", "burnin", "--burnin-minutes", minutes, "--history", "none")
        assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
        out = res.stdout + res.stderr
        assert f"--burnin-minutes {minutes}: a burn-in shorter than 1.5 min cannot be judged" in out
        assert "Traceback" not in out and not (tmp_path / f"r{minutes}").exists()
    res = run_pytest(tmp_path / "proj", "--inventory", str(inv), "--reports", str(tmp_path / "ok"), "-m", "burnin",
                     "--burnin-minutes", "1.5", "--history", "none")
    assert res.returncode == 0, res.stdout[-2000:]


def test_the_shortest_judged_burnin_follows_the_probes_window():
    probe = load_probe("burnin")
    assert burnin.WINDOW_S == probe.CUDA_DEFAULTS["window_s"]
    assert burnin.MIN_SECONDS == burnin.WARMUP_S + 2 * burnin.EDGE_WINDOWS * probe.CUDA_DEFAULTS["window_s"]


def _sku():
    from gpuaccept.config.thresholds import load_sku_file
    return load_sku_file(str(Path(__file__).parents[1] / "thresholds" / "h200-sxm-141gb.yaml"))


def _capture_cut(t_end: float) -> dict:
    """ALTERED: the capture cut at ``t_end`` s, as a burn-in of that length reads."""
    from project_helpers import burnin_capture
    doc = burnin_capture()
    doc["windows"] = [w for w in doc["windows"] if w["t1"] <= t_end]
    doc["telemetry"]["rows"] = [r for r in doc["telemetry"]["rows"] if r[0] <= t_end]
    doc["sdc"] = [r for r in doc["sdc"] if r["t"] <= t_end]
    doc["wall_s"], doc["seconds_requested"] = t_end, t_end - doc["load_started_s"]
    return doc


# ------------------------------------------------------------------ a verdict per GPU in the reports

def _eight_gpus(inventory_doc: dict, burnin_doc: dict) -> None:
    """ALTERED: the 2xH200 node made an 8-GPU node: GPUs 2..7 are copies of GPU 1 with their own index, bus id
    (00000000:00:08.0 ...), serial (1650000000003 ...) and UUID, in the NVML inventory and in the burn-in
    (its windows, telemetry rows and checksums copied from rank 1)."""
    g1 = inventory_doc["gpus"][1]
    for i in range(2, 8):
        inventory_doc["gpus"].append({**json.loads(json.dumps(g1)), "index": i, "pci_bus_id": f"00000000:00:0{i + 6:X}.0",
                                      "serial": f"16500000000{i + 1:02d}", "uuid": f"GPU-00000000-0000-0000-0000-0000000000{i + 1:02d}"})
    inventory_doc["gpu_count"] = 8
    b1 = burnin_doc["gpus"][1]
    for i in range(2, 8):
        burnin_doc["gpus"].append({**b1, "rank": i, "index": i, "pci_bus_id": f"00000000:00:0{i + 6:X}.0"})
        burnin_doc["windows"] += [{**w, "rank": i} for w in burnin_doc["windows"] if w["rank"] == 1]
        burnin_doc["telemetry"]["rows"] += [[r[0], i, *r[2:]] for r in burnin_doc["telemetry"]["rows"] if r[1] == 1]
        for rnd in burnin_doc["sdc"]:
            rnd["hashes"][str(i)] = rnd["hashes"]["1"]
    burnin_doc["world_size"] = 8


def test_one_bad_gpu_of_eight_reads_as_that_gpu_and_two_bad_gpus_are_both_named(tmp_path):
    """Before: summary.md's host line gave the first failing *figure* only ("burnin/burnin_temp_c_max GPU 1: 92 C
    vs <= 85"), so a GPU whose failure is no figure (a wrong checksum, a clock event, an Xid) on the same host
    was named nowhere but the test's message; the per-GPU table showed that GPU clean (its only column passed);
    report.html listed the first line of each failed test only. Now the host line says how many of its GPUs
    fail and which (bus id, serial), and "Failing GPUs" gives each one's verdict and every reason."""
    def eight(doc, bad):
        inv_path = next((tmp_path / "captures").glob("gpu_inventory-*.json"))
        saved = json.loads(inv_path.read_text())
        _eight_gpus(saved["doc"], doc)
        inv_path.write_text(json.dumps(saved))
        bad(doc)

    def one_bad(doc):  # ALTERED: rank 5 (bus 00000000:00:0B.0) computes a wrong checksum in round 3
        doc["sdc"][3]["hashes"]["5"] = "0" * 64

    def two_bad(doc):  # ALTERED: and rank 6 (00000000:00:0C.0) runs hot with HW thermal slowdown after 60 s
        one_bad(doc)
        f = doc["telemetry"]["fields"]
        for row in doc["telemetry"]["rows"]:
            if row[1] == 6 and row[0] > 60:
                row[f.index("clocks_event_reasons")] |= 0x40
                row[f.index("temp_c")] = 92

    for name, bad in (("one", one_bad), ("two", two_bad)):
        base = tmp_path / name
        base.mkdir()
        # burnin_replay_folder copies the captures first, then the change: alter the copied inventory there
        captures = tmp_path / "captures"
        if captures.exists():
            shutil.rmtree(captures)
        folder = burnin_replay_folder(tmp_path, lambda doc, bad=bad: eight(doc, bad))
        inv = make_project(base / "proj", [], None, extra_suite="", name="test_zz_empty.py")
        inv.write_text(f"h200-x ansible_connection=local gpuaccept_replay={folder} gpu_sku=h200-sxm-141gb "
                       "gpus_per_node=8\n")
        rep = base / "rep"
        res = run_pytest(base / "proj", "--inventory", str(inv), "--reports", str(rep), "-m", "burnin",
                         "--history", "none")
        assert res.returncode == 1, res.stdout[-3000:]
        md = (rep / "summary.md").read_text()
        host_line = next(ln for ln in md.splitlines() if ln.startswith("- **FAIL** `h200-x`"))
        gpu5 = "GPU 5 (00000000:00:0B.0, serial 1650000000006)"
        gpu6 = "GPU 6 (00000000:00:0C.0, serial 1650000000007)"
        rows = [ln for ln in md.splitlines() if ln.startswith("| h200-x | ") and "| FAIL |" in ln]
        if name == "one":
            # the host line ends with the host's action (gpuaccept/judging/actions.py): wrong results need an RMA
            assert host_line.endswith(f"1 of 8 GPUs failing: {gpu5} → **drain-rma** [hardware] (a fault under sustained load "
                                      "(burn-in))"), host_line
            assert rows == ["| h200-x | 5 | 00000000:00:0B.0 | 1650000000006 | FAIL | test_burnin | computes wrong "
                            "results: deterministic fp32 matmul checksum differs from the node's reference in "
                            "round(s) 3 of 6 |"], md
        else:
            assert host_line.split(" → ")[0].endswith(f"2 of 8 GPUs failing: {gpu5}, {gpu6}"), host_line
            assert host_line.split(" → ")[1].startswith("**drain-rma**"), host_line
            assert [r.split(" | ")[1:4] for r in rows] == [["5", "00000000:00:0B.0", "1650000000006"],
                                                            ["6", "00000000:00:0C.0", "1650000000007"]]
            assert "burnin_temp_c_max 92 C > max 85 C [limit: h200-sxm-141gb.yaml checks.temp_c]; HW thermal slowdown during burn-in" in rows[1]
            tests = json.loads((rep / "results.json").read_text())["tests"]
            failing = {(e["gpu"], e["pci_bus_id"], e["serial"]) for t in tests for e in t.get("failures", [])}
            assert failing == {(5, "00000000:00:0B.0", "1650000000006"), (6, "00000000:00:0C.0", "1650000000007")}
            dom = _render(rep / "report.html", base / "shot.png")
            assert f"2 of 8 GPUs failing: {gpu5}, {gpu6}" in dom
            assert dom.count('class="failing-gpu"') == 2 and 'data-serial="1650000000007"' in dom
            assert "HW thermal slowdown during burn-in" in dom  # GPU 6's own line, not only the test's first


def _render(html: Path, shot: Path) -> str:
    """The DOM after headless Chromium rendered ``html`` from disk (as tests/test_reporting.py drives it)."""
    import subprocess
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium not on PATH (README: apt-get install chromium)"
    base = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={shot.parent / 'chromium-profile'}", "--window-size=1400,2200"]
    dom = subprocess.run(base + ["--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


def test_a_blocked_gpus_line_is_no_gpu_failure():
    from gpuaccept.reporting.records import counted_failures
    e = [{"host": "h", "gpu": 1, "line": "h GPU 1 (b, serial s): x"}, {"host": "h", "gpu": 0, "line": "h GPU 0: y"}]
    msg = "h GPU 0: y\n(also blocked by preflight: ...)\n(blocked GPU) h GPU 1 (b, serial s): x"
    assert counted_failures("failed", msg, e) == [e[1]]
    assert counted_failures("error", msg, e) == []


def test_a_gpu_lost_before_the_first_window_still_fails_by_its_xid(tmp_path):
    """The load never ran (ALTERED: the burn-in document is the probe's failure, a worker that ended before any
    window) and the kernel logged Xid 79 for GPU 1: before, the probe's error ended the test and the Xid was never
    read (ERROR, no GPU named); now the error is kept and the Xid fails GPU 1 by bus id and serial."""
    def failed(doc):
        doc.clear()
        doc.update({"failed": True, "msg": "burn-in worker rank 1 (CUDA device 1, 00000000:00:07.0) ended with 1 "
                                           "before any window was measured: CUDA error: unspecified launch failure"})
    case = _failed_burnin(tmp_path, failed, XID79_GPU1)
    assert "h200-a GPU 1 (00000000:00:07.0, serial 1650000000002): during burn-in: Xid 79" in case["text"]
    assert "burn-in load did not run: " in case["text"] and "ended with 1 before any window" in case["text"]
    md = (tmp_path / "rep" / "summary.md").read_text()
    assert "— 1 GPU failing: GPU 1 (00000000:00:07.0, serial 1650000000002)" in md, md  # no figure counted the GPUs


# NVIDIA's Xid 13 line (tests/data/kern-xid.log has the form) for GPU 1, from two burn-in worker processes;
# ALTERED: lines the 2xH200 node never logged
XID13_GPU1 = "".join(
    f"2026-11-30T09:1{i}:00+0000 h200-a kernel: NVRM: Xid (PCI:0000:00:07): 13, pid={4100 + i}, name=python3, Graphics "
    f"SM Warp Exception on (GPC 3, TPC 1, SM 0): Out Of Range Address\n" for i in range(2))


def test_an_application_xid_repeated_under_the_burnins_own_load_resets_that_gpu(tmp_path):
    """Xid 13 twice on GPU 1 while only the burn-in's own load ran there: NVIDIA's immediate action (restart the
    application) proves nothing of a known-good load; repeated on one GPU it is hardware: reset-gpu, the GPU named
    by bus id and serial, the count and the GPC/TPC said."""
    case = _failed_burnin(tmp_path, lambda doc: None, XID13_GPU1)
    assert "h200-a GPU 1 (00000000:00:07.0, serial 1650000000002): during burn-in: Xid 13" in case["text"], case["text"]
    assert "GPC 3, TPC 1" in case["text"]
    res = json.loads((tmp_path / "rep" / "results.json").read_text())
    (t,) = [t for t in res["tests"] if "test_burnin" in t["nodeid"]]
    assert (t["action"]["action"], t["action"]["cause"]) == ("reset-gpu", "hardware"), t["action"]
