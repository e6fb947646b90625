"""Faults found by the seventh new-user trial (2026-11-30): burn-in as a GPU cloud operator accepting new nodes
runs it ("long, every layer under sustained load, a clear verdict per node and per GPU: index, PCI bus id,
serial"), on the real 2xH200 burn-in capture (tests/data/h200x2-burnin.json) altered the way sick nodes read, and
the real burn-in probe on the CPU (gloo ranks) with a rank made to die or hang.

- A burn-in worker that died mid-run (a GPU that falls off the bus: its CUDA calls fail and its process ends)
  failed the whole probe: every window measured was thrown away, the test was an ERROR "burn-in worker rank 1
  (GPU 1) ended with 1" (torch's index, no bus id, no serial), and the burn-in's Xid check never ran, so the
  Xid 79 of that GPU was reported nowhere. A burn-in whose load hung (a hung GPU: every rank waits in the
  all-reduce) ran on until the probe's deadline (the burn-in's length + 120 s) and then read "rank None (GPU ?)
  ended with deadline".
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from gpuaccept import burnin
from probe_helpers import load_probe, run_probe
from project_helpers import DATA, burnin_replay_folder, junit, make_project, run_pytest

xev = load_probe("xid_events")

# nv.c's Xid line for GPU 1 of the capture (bus 00000000:00:07.0), as the driver writes it (tests/data/kern-xid.log
# has the form); ALTERED: a line the 2xH200 node never logged
XID79_GPU1 = ("2026-11-30T09:10:00+0000 h200-a kernel: NVRM: Xid (PCI:0000:00:07): 79, pid='<unknown>', "
              "name=<unknown>, GPU has fallen off the bus.\n")


# ------------------------------------------------------------------ a worker that dies, a load that hangs (CPU)

def test_probe_keeps_the_windows_of_a_burnin_whose_worker_died_and_names_that_rank():
    """Rank 1 of 3 exits with code 3 eight seconds into the load (ALTERED: the probe's test-only fault_rank);
    before, the probe failed as a whole (rc 1, no window kept)."""
    rc, doc, err = run_probe("burnin", {"device": "cpu", "seconds": 60, "gpus": 3, "stall_s": 20,
                                        "fault_rank": {"rank": 1, "after_s": 8.0, "how": "exit"}}, timeout=180)
    assert rc == 0, doc
    st = doc["stopped"]
    assert st["rank"] == 1 and st["how"] == "exited with 3", st
    assert "simulated lost device" in st["stderr"]
    assert doc["windows"] and {w["rank"] for w in doc["windows"]} == {0, 1, 2}
    assert doc["wall_s"] < 50  # not run on to the burn-in's end
    rank, line = burnin.stopped(doc)
    assert rank == 1 and line.startswith("burn-in worker of this GPU exited with 3 at ")
    assert "of 60 s" in line and "judged as a partial burn-in" in line


def test_probe_reports_a_hung_load_once_no_window_arrives_for_stall_s():
    """Rank 1 of 3 stops answering (ALTERED: fault_rank how=hang): every rank waits on it in the lockstep
    all-reduce; the probe stops the load after stall_s without a window, keeps what was measured, and says
    that it stalled (before: it ran on to seconds + 120 s and failed "rank None (GPU ?) ended with deadline")."""
    rc, doc, _ = run_probe("burnin", {"device": "cpu", "seconds": 120, "gpus": 3, "stall_s": 5,
                                      "fault_rank": {"rank": 1, "after_s": 8.0, "how": "hang"}}, timeout=180)
    assert rc == 0, doc
    st = doc["stopped"]
    assert st["how"] == "stopped reporting (no window from any GPU for 5 s)", st
    assert doc["wall_s"] < 60 and doc["windows"]
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
    figs = json.loads((rep / "results.json").read_text())["figures"]
    assert any(f["check"] == "burnin_bf16_tflops_start" and f["gpu"] == 1 for f in figs)  # partial figures kept
    assert (rep / "failed-hosts.txt").read_text().split() == ["h200-a"]


def test_a_hung_load_fails_the_node_and_never_passes(tmp_path):
    def hung(doc):
        _fell_off_at(80.0)(doc)
        for row in doc["telemetry"]["rows"]:  # ALTERED further: a hang, not a lost GPU: NVML still answers
            if row[2] is None:
                row[2:] = [1980, 3201, 120.0, 40, 38, 0, 0, 0, 0, 0, 400, 0, 0]
        doc["stopped"] = {"rank": None, "index": None, "pci_bus_id": None, "t": 80.0, "stderr": "",
                          "how": "stopped reporting (no window from any GPU for 120 s)", "windows": {"0": 15, "1": 15}}
    inv = _burnin_project(tmp_path, hung)
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path / "proj", "--inventory", str(inv), "--reports", str(rep), "-m", "burnin",
                     "--history", "none")
    assert res.returncode == 1, res.stdout[-3000:]
    (case,) = junit(rep / "junit-burnin.xml")
    assert case["outcome"] == "failure", case
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
    from gpuaccept.thresholds import load_sku_file
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
