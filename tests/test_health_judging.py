"""Health judgments (gpuaccept/health.py) on a real gpu_inventory capture from 2xH200 (tests/data), and on the
same capture altered the way sick GPUs read: each alteration must fail with the right message, the healthy
capture must pass."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gpuaccept import health
from gpuaccept.thresholds import load_all

REPO = Path(__file__).resolve().parent.parent
DOC = json.loads((REPO / "tests" / "data" / "h200x2-gpu_inventory.json").read_text())
LINK = json.loads((REPO / "tests" / "data" / "h200x2-pcie_link.json").read_text())
SPECS = load_all(str(REPO / "thresholds"))
H200 = SPECS["h200-sxm-141gb"]


def failures(findings) -> list[str]:
    return [f.failure for f in findings if f.failure] + [
        f"{f.check} out of limit" for f in findings
        if f.limit is not None and isinstance(f.value, (int, float)) and not (
            f.value >= f.limit.bound if f.limit.direction == "min" else f.value <= f.limit.bound)]


@pytest.mark.parametrize("judge", [health.ecc, health.row_remapping, health.preflight, health.fabric])
def test_real_healthy_capture_passes(judge):
    for g in DOC["gpus"]:
        assert failures(judge(g, H200)) == []


def test_real_capture_pcie_and_drivers_pass():
    for link in LINK["gpus"]:
        assert failures(health.pcie_link(link, H200)) == []
    assert failures(health.driver_versions(DOC)) == []
    assert health.gpu_count(len(DOC["gpus"]), 2).failure is None


def sick(path: str, value, gpu: int = 1) -> dict:
    """GPU ``gpu`` of the capture with the field at dotted ``path`` set to ``value``."""
    g = copy.deepcopy(DOC["gpus"][gpu])
    *head, last = path.split(".")
    d = g
    for k in head:
        d = d[k]
    d[last] = value
    return g


@pytest.mark.parametrize("judge,path,value,needle", [
    (health.row_remapping, "remapped_rows.pending", True, "row remap pending: reset needed"),
    (health.row_remapping, "remapped_rows.failure", True, "row remap failure: replace the GPU"),
    (health.row_remapping, "remapped_rows.uncorrectable", 9, "remapped_rows_uncorrectable out of limit"),
    (health.row_remapping, "remapped_rows.pending", {"nvml_error": "Not Supported"}, "unreadable"),
    (health.ecc, "ecc.uncorrected_volatile", 1, "ecc_uncorrected_volatile out of limit"),
    (health.ecc, "ecc.uncorrected_aggregate", 3, "ecc_uncorrected_aggregate out of limit"),
    (health.ecc, "ecc.mode_current", False, "ECC is disabled"),
    (health.ecc, "ecc.uncorrected_volatile", {"nvml_error": "Not Supported"}, "unreadable"),
    (health.preflight, "compute_processes", [{"pid": 4242, "name": "python3", "used_memory_bytes": 1}],
     "foreign processes on the GPU: pid 4242 python3"),
    (health.preflight, "persistence_mode", False, "persistence mode is off"),
    (health.preflight, "mig_mode.current", True, "MIG mode is on"),
    (health.fabric, "fabric.state", "IN_PROGRESS", "fabric state IN_PROGRESS"),
    (health.fabric, "fabric", {"nvml_error": "Not Supported"}, "fabric_state"),
])
def test_sick_readings_fail(judge, path, value, needle):
    got = failures(judge(sick(path, value), H200))
    assert any(needle in m for m in got), got


def test_correctable_remaps_are_recorded_not_failed():
    """The H200 in shared/data shows 2 correctable remaps on a healthy card."""
    f = health.row_remapping(sick("remapped_rows.correctable", 2), H200)
    assert failures(f) == []
    assert [x.value for x in f if x.check == "remapped_rows_correctable"] == [2]


@pytest.mark.parametrize("gen,width,needle", [(4, 16, "pcie_gen"), (5, 8, "pcie_width"),
                                              ({"nvml_error": "GPU is lost"}, 16, "unreadable")])
def test_downgraded_pcie_link_fails(gen, width, needle):
    link = {**LINK["gpus"][0], "gen": gen, "width": width}
    assert any(needle in m for m in failures(health.pcie_link(link, H200)))


def test_driver_mismatch_names_both_versions():
    doc = {**DOC, "kernel_driver_version": "570.86.15"}
    msg = failures(health.driver_versions(doc))[0]
    assert "580.159.04" in msg and "570.86.15" in msg


def test_gpu_count_against_declared():
    assert "gpu_count 2 != gpus_per_node 8" in health.gpu_count(2, 8).failure
    assert health.gpu_count(2, None).failure is None


def test_pre_ampere_retired_pages():
    v100_like = copy.deepcopy(SPECS["a100-sxm4-80gb"])
    v100_like.expect = {**v100_like.expect, "row_remapping": False}
    g = sick("retired_pages", {"single_bit": 0, "double_bit": 0, "pending": True})
    assert "page retirement pending: reset needed" in failures(health.row_remapping(g, v100_like))
