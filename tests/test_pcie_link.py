"""pcie_link with GPUs hidden from CUDA: every NVML GPU keeps its record, a GPU no torch device is gets
``"loaded": false`` with why (gpuaccept/probes/pcie_link.py), and the judge (gpuaccept/judging/health.py pcie_link)
says "not measured", cause configuration ``cuda_visible_devices`` (fix-config), never a failing link to drain.

Before: the probe paired torch device i with NVML handle i; under CUDA_VISIBLE_DEVICES=1 it loaded GPU 1 and read
GPU 0's idle link (Gen1): "GPU 0: pcie_gen 1 < min 5" -> drain-rma on a healthy card. The pairing rule itself is
tested in tests/test_gpu_pairing.py. The probe's runs here use the torch CPU build (no CUDA device) and the
pynvml stand-in of tests/probe_helpers.py; the end-to-end runs replay the 2xH200 capture altered as the fixed
probe writes it under CUDA_VISIBLE_DEVICES=1 on that machine.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from probe_helpers import H200X2, FakeNvml, install_fake, load_probe
from project_helpers import alter, make_project, replay_folder, run_pytest

from gpuaccept.causes import HARDWARE_ACTIONS
from gpuaccept.config.thresholds import load_sku_file
from gpuaccept.judging import health
from gpuaccept.judging.readings import typed
from gpuaccept.probes._nvml import pair_by_bus_id

REPO = Path(__file__).resolve().parents[1]
LINK = json.loads((REPO / "tests" / "data" / "h200x2-pcie_link.json").read_text())


class IdleGen1(FakeNvml):
    """The 2xH200 board with GPU 0's idle link downshifted to Gen1 (as the breaker's trial read it, idle)."""

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 1 if h == 0 else 5


def _hidden(doc: dict) -> None:
    """What the fixed probe writes on the 2xH200 machine under CUDA_VISIBLE_DEVICES=1: GPU 0 not loaded (its idle
    link at Gen1), GPU 1 loaded through torch device 0."""
    g0, g1 = doc["gpus"]
    g0.update(gen_idle=1, gen=None, width=None, samples=0, loaded=False, not_loaded="cuda_hidden",
              cuda_visible_devices="1", why="hidden from CUDA by CUDA_VISIBLE_DEVICES='1'")
    g1.update(loaded=True, torch_index=0)
    doc["loaded"] = True


# -- the probe ------------------------------------------------------------------------------------------------
def test_gpus_hidden_by_cuda_visible_devices_keep_their_records(monkeypatch):
    install_fake(monkeypatch, IdleGen1(H200X2))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    doc = load_probe("pcie_link").main({"seconds": 0.1})
    assert [g["pci_bus_id"] for g in doc["gpus"]] == [g["bus"] for g in H200X2]
    g0 = doc["gpus"][0]
    assert g0["loaded"] is False and g0["not_loaded"] == "cuda_hidden" and g0["cuda_visible_devices"] == "1"
    assert g0["gen"] is None and g0["width"] is None and g0["samples"] == 0  # never the idle Gen1 as "under load"
    assert g0["gen_idle"] == 1 and "CUDA_VISIBLE_DEVICES='1'" in g0["why"]
    g1 = doc["gpus"][1]  # idle at its maximum already: a full reading, kept
    assert g1["loaded"] is False and (g1["gen"], g1["width"], g1["samples"]) == (5, 16, 1)
    assert doc["loaded"] is False and doc["sampled_s"] == 0.0


def test_no_cuda_device_and_no_cuda_visible_devices_fails_saying_why(monkeypatch):
    install_fake(monkeypatch, IdleGen1(H200X2))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    probe = load_probe("pcie_link")
    with pytest.raises(probe.ProbeFailed, match="no CUDA device visible to torch"):
        probe.main({"seconds": 0.1})


def test_links_at_their_maximum_are_read_idle_whatever_cuda_shows(monkeypatch):
    """No load runs where every idle link reads its maximum: NVML reads every GPU, hidden or not."""
    install_fake(monkeypatch, FakeNvml(H200X2))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    doc = load_probe("pcie_link").main({"seconds": 0.1})
    assert doc["loaded"] is False and [(g["gen"], g["width"]) for g in doc["gpus"]] == [(5, 16), (5, 16)]
    assert not any("not_loaded" in g for g in doc["gpus"])


def test_a_torch_device_with_no_known_bus_id_leaves_the_others_unpaired_not_hidden():
    probe = load_probe("pcie_link")
    g = {"gen_idle": 1, "width_idle": 16, "gen_max": 5, "width_max": 16}
    rec = probe.not_loaded(g, pair_by_bus_id([None], ["00000000:00:06.0"]), None)
    assert rec["not_loaded"] == "unpaired" and rec["gen"] is None and "torch device(s) [0]" in rec["why"]
    rec = probe.not_loaded(g, pair_by_bus_id([], ["00000000:00:06.0"]), None)
    assert rec["not_loaded"] == "cuda_hidden" and "CUDA_VISIBLE_DEVICES unset" in rec["why"]


# -- the judge ------------------------------------------------------------------------------------------------
def test_judge_says_not_measured_with_the_cause_of_what_hid_the_gpu():
    sku = load_sku_file(str(REPO / "thresholds" / "h200-sxm-141gb.yaml"))
    doc = json.loads(json.dumps(LINK))
    _hidden(doc)
    g0, g1 = typed(doc["gpus"])
    found = health.pcie_link(g0, sku)
    assert [f.check for f in found] == ["pcie_gen", "pcie_width"]
    assert all(f.failure is None and f.limit is None and "not measured" in f.error for f in found)
    assert {(f.cause.cls, f.cause.kind, f.cause.gpu) for f in found} == {("configuration", "cuda_visible_devices", 0)}
    assert found[0].cause.evidence == {"value": "1"}
    assert all(f.failure is None and f.error is None for f in health.pcie_link(g1, sku))
    unpaired = dict(g0, not_loaded="unpaired", cuda_visible_devices=None)
    assert {(f.cause.cls, f.cause.kind) for f in health.pcie_link(unpaired, sku)} == {("tool", "gap")}
    at_max = dict(g0, gen=5, width=16)  # hidden, its idle link at its maximum: a full reading, judged
    assert [(f.check, f.value, f.error) for f in health.pcie_link(at_max, sku)] == [("pcie_gen", 5, None),
                                                                                   ("pcie_width", 16, None)]


def _health_run(tmp_path: Path, changes: dict) -> tuple[Path, dict]:
    """Replay the 2xH200 capture with ``changes[probe](doc)`` applied (``-m health``); the report folder and
    test_pcie_link's record of results.json."""
    cap = None
    for probe, change in changes.items():
        cap = alter(tmp_path, probe, change, **({"src": cap} if cap is not None else {}))
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={replay_folder(tmp_path, cap)} "
                   f"gpu_sku=h200-sxm-141gb gpus_per_node=2\n")
    rep = tmp_path / "R"
    res = run_pytest(tmp_path, "--inventory", str(inv), "-m", "health", "--reports", str(rep), "--history", "none")
    assert "Traceback" not in res.stdout + res.stderr, res.stdout[-3000:]
    doc = json.loads((rep / "results.json").read_text())
    (rec,) = [t for t in doc["tests"] if t["name"] == "test_pcie_link[h200-a]"]
    return rep, rec


def test_hidden_gpu_is_not_measured_and_fixes_the_config_not_the_card(tmp_path):
    """The breaker's cvd state, replayed as the fixed probe writes it: no drain, fix-config naming the variable."""
    rep, rec = _health_run(tmp_path, {"pcie_link": _hidden,
                                      "gpu_inventory": lambda d: d.update(cuda_visible_devices="1")})
    assert rec["outcome"] == "error", rec
    assert "GPU 0" in rec["message"] and "PCIe gen not measured" in rec["message"]
    assert "measured no figure" not in rec["message"]  # every NVML GPU has its record
    assert rec["action"]["action"] == "fix-config" and rec["action"]["setting"] == "CUDA_VISIBLE_DEVICES=1"
    assert {(c["class"], c["kind"], c["gpu"]) for c in rec["causes"]} == {("configuration", "cuda_visible_devices", 0)}
    judged = {(f["gpu"], f["check"]): f["verdict"] for f in rec["figures"]}
    assert judged == {(0, "pcie_gen"): "recorded", (0, "pcie_width"): "recorded",
                      (1, "pcie_gen"): "pass", (1, "pcie_width"): "pass"}
    for act in HARDWARE_ACTIONS:
        assert not (rep / f"hosts-{act}.txt").exists(), act
    assert (rep / "hosts-fix-config.txt").read_text() == "h200-a\n"


def test_older_capture_without_the_fields_replays_as_before(tmp_path):
    """A capture of the probe before this change (no per-GPU ``loaded``): judged on its figures, GPU 0's idle
    Gen1 under load failing as before."""
    def low(doc):
        doc["gpus"][0].update(gen=1, gen_idle=1)
    _, rec = _health_run(tmp_path, {"pcie_link": low})
    assert rec["outcome"] == "failed" and "pcie_gen 1 gen < min 5" in rec["message"]
    # a reading decided by its own row (hardware, drain-rma): no confirmation fields beside it that it never read
    (fig,) = [f for f in rec["figures"] if f["gpu"] == 0 and f["check"] == "pcie_gen"]
    assert fig["verdict"] == "fail" and "evidence" not in (fig.get("extra") or {}), fig
    assert rec["action"]["action"] == "drain-rma" and rec["action"]["cause"] == "hardware"
