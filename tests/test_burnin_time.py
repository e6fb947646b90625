"""The burn-in judged by time (gpuaccept/judging/burnin_time.py) on the real 2xH200 burn-in capture
(tests/data/h200x2-burnin.json: 120 s, windows of 5 s) altered the way a trial broke it (2026-12-06): a GPU stuck
inside its matmuls (one long slow window), a GPU or every GPU without windows for 30 s, a drift with only a SW
power cap beside it. Each asserts the outcome, the cause class, the action and the GPU named."""
from __future__ import annotations

import json
from pathlib import Path

from gpuaccept.config.thresholds import load_sku_file
from gpuaccept.judging import actions, burnin
from gpuaccept.reporting.folder import run_figures
from project_helpers import burnin_capture as capture, burnin_replay_folder, junit, make_project, run_pytest

SKU = load_sku_file(str(Path(__file__).parents[1] / "thresholds" / "h200-sxm-141gb.yaml"))
GPU1 = "h200-a GPU 1 (00000000:00:07.0, serial 1650000000002): "


def stuck(doc: dict) -> None:
    """ALTERED: GPU 1 stuck 30 s inside its matmuls: its windows from 40 to 75 s merged into one at 1/7 the
    TFLOP/s (CUDA events time the whole stuck batch)."""
    ws = [w for w in doc["windows"] if w["rank"] == 1 and 40 <= w["t0"] < 75]
    keep = ws[0]
    keep["t1"] = max(w["t1"] for w in ws)
    for k in ("bf16_tflops", "fp8_tflops"):
        keep[k] /= 7
    doc["windows"] = [w for w in doc["windows"] if w is keep or w not in ws]


def silent(ranks: tuple[int, ...]):
    """ALTERED: the GPUs of ``ranks`` report no window that starts between 40 and 70 s."""
    def change(doc: dict) -> None:
        doc["windows"] = [w for w in doc["windows"] if not (w["rank"] in ranks and 40 <= w["t0"] < 70)]
    return change


def drifting(doc: dict) -> None:
    """ALTERED: GPU 1's bf16/fp8 TFLOP/s fall linearly to -14 % by the end; no clock event added (the capture's
    SW power cap stays on both GPUs, as it was measured)."""
    end = max(w["t1"] for w in doc["windows"])
    for w in doc["windows"]:
        if w["rank"] == 1:
            for k in ("bf16_tflops", "fp8_tflops"):
                w[k] *= 1 - 0.14 * (w["t0"] / end)


def failing(found: list) -> list:
    return [f for f in found if f.failure]


def test_healthy_capture_records_window_count_and_longest_gap_and_passes():
    doc = capture()
    found = burnin.judge(doc, SKU)
    assert [f.check for r in found for f in failing(found[r])] == [] and burnin.node_findings(doc) == []
    figs = {f.check: f.value for f in found[1]}
    assert figs["burnin_windows_closed"] == 24 and 4.5 < figs["burnin_longest_gap_s"] < 15


def test_one_long_slow_window_fails_that_gpu_by_its_seconds():
    doc = capture()
    stuck(doc)
    found = burnin.judge(doc, SKU)
    assert failing(found[0]) == []
    by = {f.check: f for f in failing(found[1])}
    gap, slow = by["burnin_gap_s"], by["burnin_bf16_tflops_below_node_median_s"]
    assert gap.value > 30 and gap.extra["from_s"] == 40.73 and gap.extra["bound_s"] == 15.0
    assert (gap.cause.cls, gap.cause.kind, gap.cause.gpu) == ("hardware", "burnin_gpu_stall", 1)
    assert slow.value > 30 and (slow.cause.cls, slow.cause.kind) == ("hardware", "burnin_below_node_median")
    act = actions.for_finding("test_burnin", gap.check, gap.value, gap.extra, "00000000:00:07.0", cause=gap.cause)
    assert (act.action, act.cause) == ("drain-rma", "hardware") and "35.12 s from 40.73 s" in act.reason


def test_every_gpu_silent_at_once_is_the_nodes_stall_never_one_gpus():
    doc = capture()
    silent((0, 1))(doc)
    found = burnin.judge(doc, SKU)
    assert [f.check for r in found for f in failing(found[r])] == []
    (node,) = burnin.node_findings(doc)
    assert (node.cause.cls, node.cause.kind, node.cause.gpu) == ("unverified", "burnin_node_stall", None)
    assert node.value > 30 and node.extra["from_s"] == 40.73
    assert actions.for_finding("test_burnin", node.check, cause=node.cause).action == "rerun"


def test_a_gap_beside_a_foreign_process_is_not_proven_the_gpus():
    doc = capture()
    silent((1,))(doc)
    doc["gpus"][0]["foreign_processes"] = {"t": 50.0, "processes": ["pid 4242 python3"]}
    (gap,) = failing(burnin.judge(doc, SKU)[1])
    assert (gap.cause.cls, gap.cause.kind) == ("unverified", "burnin_disturbed")
    assert actions.for_finding("test_burnin", gap.check, cause=gap.cause).action == "rerun"


def test_a_drift_is_hardware_only_with_hardware_evidence_on_its_gpu():
    doc = capture()
    drifting(doc)
    (bf16, fp8) = failing(burnin.judge(doc, SKU)[1])
    assert (bf16.cause.cls, bf16.cause.kind, bf16.cause.gpu) == ("unverified", "burnin_drift", 1)
    assert "coinciding: SW power cap" in bf16.failure and "no Xid of this GPU" in bf16.failure
    assert actions.for_finding("test_burnin", bf16.check, cause=bf16.cause).action == "rerun"
    xid = [{"xid": 79, "pci_bus_id": "0000:00:07.0"}]  # the same GPU's bus id in the kernel's short form
    (bf16, _) = failing(burnin.judge(doc, SKU, xid)[1])
    assert (bf16.cause.cls, bf16.cause.kind) == ("hardware", "burnin_drift_hw") and "Xid 79" in bf16.failure
    assert actions.for_finding("test_burnin", bf16.check, cause=bf16.cause).action == "drain-rma"
    i = doc["telemetry"]["fields"].index("clocks_event_reasons")
    for row in doc["telemetry"]["rows"]:
        if row[1] == 1 and row[0] > 90:
            row[i] |= 0x40  # HW thermal slowdown (nvmlClocksEventReasons)
    found = burnin.judge(doc, SKU)
    (bf16,) = [f for f in found[1] if f.check == "burnin_bf16_tflops_drift_pct"]
    assert bf16.cause.kind == "burnin_drift_hw" and "HW thermal slowdown" in bf16.failure
    assert failing(found[0]) == []  # GPU 0 had the SW power cap too, and did not drift


def _run(tmp_path: Path, change) -> tuple[dict, dict]:
    """``-m burnin`` over the altered capture: (its JUnit case, its results.json test record)."""
    inv = make_project(tmp_path / "proj", [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={burnin_replay_folder(tmp_path, change)} "
                   "gpu_sku=h200-sxm-141gb gpus_per_node=2\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path / "proj", "--inventory", str(inv), "--reports", str(rep), "-m", "burnin",
                     "--burnin-minutes", "2", "--history", "none")
    assert res.returncode in (0, 1), res.stdout[-3000:]
    (case,) = junit(rep / "junit-burnin.xml")
    results = json.loads((rep / "results.json").read_text())
    (t,) = [t for t in results["tests"] if "test_burnin" in t["nodeid"]]
    return case, {**t, "figures": run_figures(results)}


def test_suite_one_gpu_stalled_drains_that_gpu_by_bus_id_and_serial(tmp_path):
    case, t = _run(tmp_path, silent((1,)))
    assert case["outcome"] == "failure"
    assert GPU1 + "no throughput window for 35.1 s from 40.7 s of the burn-in" in case["text"], case["text"]
    assert "GPU 0 (" not in case["text"]
    assert (t["action"]["action"], t["action"]["cause"]) == ("drain-rma", "hardware"), t["action"]
    gaps = {f["gpu"]: f["value"] for f in t["figures"] if f["check"] == "burnin_longest_gap_s"}
    counts = {f["gpu"]: f["value"] for f in t["figures"] if f["check"] == "burnin_windows_closed"}
    assert gaps[1] > 30 and gaps[0] < 15 and counts == {0: 24, 1: 18}


def test_suite_every_gpu_stalled_is_a_node_rerun_and_a_drift_without_evidence_a_rerun(tmp_path):
    case, t = _run(tmp_path / "all", silent((0, 1)))
    assert case["outcome"] == "failure" and "h200-a: no throughput window from any GPU for 35.1 s" in case["text"]
    assert "GPU 1 (" not in case["text"] and "GPU 0 (" not in case["text"]
    assert (t["action"]["action"], t["action"]["cause"]) == ("rerun", "unverified"), t["action"]
    case, t = _run(tmp_path / "drift", drifting)
    assert case["outcome"] == "failure" and GPU1 + "bf16_tflops fell 9.2%" in case["text"], case["text"]
    assert "GPU 0 (" not in case["text"]
    assert (t["action"]["action"], t["action"]["cause"]) == ("rerun", "unverified"), t["action"]
    case, t = _run(tmp_path / "ok", None)
    assert case["outcome"] == "passed", case
