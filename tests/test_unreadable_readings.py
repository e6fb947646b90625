"""A reading NVML refused is not hardware evidence: the 2xH200 capture replayed with GPU 1 altered the way a sceptical
operator's trial read it (ECC counts, PCIe gen/width, the row remap state unreadable; a GPU handle denied; a link
the platform caps), each through a real ``python -m pytest -m health`` run. Before: the check's own row of the action
table (meant for a value over its limit) answered, so each drained or reset the GPU. After: the finding carries the
cause of NVML's error (gpuaccept.judging.readings.error_cause) and its action follows it; a GPU that is really lost
("GPU is lost") still drains the node."""
from __future__ import annotations

import json
from pathlib import Path

from project_helpers import alter, make_project, replay_folder, run_pytest

import pytest

from gpuaccept.causes import HARDWARE_ACTIONS
from gpuaccept.judging import actions, blockers
from gpuaccept.judging.readings import NvmlError, error_cause, handle_cause

SKU_VARS = "gpu_sku=h200-sxm-141gb gpus_per_node=2"
COUNTS = ("uncorrected_volatile", "uncorrected_aggregate", "corrected_volatile", "corrected_aggregate")


def _health_run(tmp_path: Path, changes: dict, marks: str = "health") -> tuple[Path, list[dict]]:
    """Replay the capture with ``changes[probe](doc)`` applied; returns the report folder and the host's records
    of results.json (each with its ``action``)."""
    cap = None
    for probe, change in changes.items():
        cap = alter(tmp_path, probe, change, **({"src": cap} if cap is not None else {}))
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={replay_folder(tmp_path, cap)} {SKU_VARS}\n")
    rep = tmp_path / "R"
    res = run_pytest(tmp_path, "--inventory", str(inv), "-m", marks, "--reports", str(rep), "--history", "none")
    assert "Traceback" not in res.stdout + res.stderr, res.stdout[-3000:]
    doc = json.loads((rep / "results.json").read_text())
    return rep, [t for t in doc["tests"] if t.get("host") == "h200-a"]


def _failures(recs: list[dict], check: str) -> list[dict]:
    return [f for t in recs for f in t.get("failures") or [] if f.get("check") == check]


def _assert_no_hardware_action(rep: Path, recs: list[dict], host_action: str) -> None:
    acts = [t["action"] for t in recs if isinstance(t.get("action"), dict)]
    acts += [f["action"] for t in recs for f in t.get("failures") or [] if isinstance(f.get("action"), dict)]
    assert acts, "nothing failed"
    assert not [a for a in acts if a["action"] in HARDWARE_ACTIONS], acts
    assert not [a for a in acts if a.get("cause") == "hardware"], acts
    for act in HARDWARE_ACTIONS:
        assert not (rep / f"hosts-{act}.txt").exists(), act
    assert (rep / f"hosts-{host_action}.txt").read_text() == "h200-a\n"


def _cause(entry: dict) -> tuple[str, str]:
    return entry["cause"]["class"], entry["cause"]["kind"]


def test_ecc_disabled_counts_not_supported_is_configuration(tmp_path):
    def ecc_off(doc):
        g = doc["gpus"][1]
        g["ecc"].update(mode_current=False, mode_pending=False)
        g["ecc"].update({k: {"nvml_error": "Not Supported"} for k in COUNTS})
    rep, recs = _health_run(tmp_path, {"gpu_inventory": ecc_off})
    _assert_no_hardware_action(rep, recs, "fix-config")
    assert _failures(recs, "ecc_mode")[0]["action"]["action"] == "fix-config"
    for check in ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate"):
        (f,) = _failures(recs, check)
        assert _cause(f) == ("configuration", "nvml_not_supported")
        assert f["cause"]["evidence"]["nvml_error"] == "Not Supported" and f["cause"]["gpu"] == 1
        assert f["action"]["action"] == "fix-config" and f["action"]["cause"] == "configuration"


def test_ecc_counts_denied_is_configuration(tmp_path):
    def denied(doc):
        doc["gpus"][1]["ecc"].update({k: {"nvml_error": "Insufficient Permissions"} for k in COUNTS})
    rep, recs = _health_run(tmp_path, {"gpu_inventory": denied})
    _assert_no_hardware_action(rep, recs, "fix-config")
    for check in ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate"):
        (f,) = _failures(recs, check)
        assert _cause(f) == ("configuration", "nvml_no_permission")
        assert f["action"]["action"] == "fix-config"
    assert [t["outcome"] for t in recs if t["name"].startswith("test_ecc[")] == ["failed"]


def test_pcie_gen_width_denied_is_configuration(tmp_path):
    def denied(doc):
        doc["gpus"][1].update(gen={"nvml_error": "Insufficient Permissions"},
                              width={"nvml_error": "Insufficient Permissions"})
    rep, recs = _health_run(tmp_path, {"pcie_link": denied})
    _assert_no_hardware_action(rep, recs, "fix-config")
    for check in ("pcie_gen", "pcie_width"):
        (f,) = _failures(recs, check)
        assert _cause(f) == ("configuration", "nvml_no_permission")
        assert "trained below" not in f["action"]["reason"]


def test_handle_denied_is_configuration_not_a_lost_gpu(tmp_path):
    """A device cgroup denying /dev/nvidia1: gpu_inventory writes the handle failure as ``lost`` with NVML's words."""
    def denied(doc):
        doc["gpus"][1] = {"index": 1, "lost": True, "nvml_error": "Insufficient Permissions"}
    rep, recs = _health_run(tmp_path, {"gpu_inventory": denied}, "health or memory")
    _assert_no_hardware_action(rep, recs, "fix-config")
    handle = _failures(recs, "nvml_handle")
    assert handle and {_cause(f) for f in handle} == {("configuration", "nvml_no_permission")}
    (count,) = _failures(recs, "gpu_count")
    assert _cause(count) == ("configuration", "gpu_count_denied")
    assert "may not open (Insufficient Permissions" in count["line"]
    blocked = [t for t in recs if t["outcome"] == "error"]
    assert blocked and all(t["message"].startswith("blocked by gpu_inventory: GPU 1: no NVML handle (Insufficient "
                                                   "Permissions)") for t in blocked)
    assert {(c["class"], c["kind"]) for t in blocked for c in t["causes"]} == {("configuration", "blocked")}


def test_handle_error_without_evidence_is_unverified(tmp_path):
    def uninitialised(doc):
        doc["gpus"][1] = {"index": 1, "lost": True, "nvml_error": "Uninitialized"}
    rep, recs = _health_run(tmp_path, {"gpu_inventory": uninitialised})
    _assert_no_hardware_action(rep, recs, "rerun")
    assert {_cause(f) for f in _failures(recs, "nvml_handle")} == {("unverified", "nvml_unreadable")}
    assert _cause(_failures(recs, "gpu_count")[0]) == ("unverified", "gpu_count_no_handle")


def test_remap_state_unreadable_is_not_a_reset(tmp_path):
    def unreadable(doc):
        doc["gpus"][1]["remapped_rows"] = {"nvml_error": "Timeout"}
    rep, recs = _health_run(tmp_path, {"gpu_inventory": unreadable})
    _assert_no_hardware_action(rep, recs, "rerun")
    (f,) = _failures(recs, "remapped_rows")
    assert _cause(f) == ("unverified", "nvml_unreadable") and f["action"]["action"] == "rerun"


def test_platform_capped_link_is_configuration(tmp_path):
    """The slot (BIOS, riser, retimer) allows Gen4, the GPU Gen5, the link runs at Gen4: the platform, not the card."""
    def capped(doc):
        doc["gpus"][1].update(gen=4, gen_max=4, gen_idle=4)

    def inventory(doc):
        doc["gpus"][1]["pcie"].update(gen=4, gen_max=4, gen_device_max=5)
    rep, recs = _health_run(tmp_path, {"pcie_link": capped, "gpu_inventory": inventory})
    _assert_no_hardware_action(rep, recs, "fix-config")
    (f,) = _failures(recs, "pcie_gen")
    assert _cause(f) == ("configuration", "pcie_platform_cap")
    assert f["cause"]["evidence"] == {"gen": 4, "gen_max": 4, "gen_device_max": 5, "sku_gen": 5}
    assert "Gen5" in f["action"]["command"] and "reseat" not in f["action"]["reason"]


def test_link_below_its_own_max_is_still_the_card(tmp_path):
    """The platform allows Gen5 and the link trained at Gen4 under load: a seating or card fault (drain-rma)."""
    def low(doc):
        doc["gpus"][1].update(gen=4, gen_idle=4)
    rep, recs = _health_run(tmp_path, {"pcie_link": low})
    (t,) = [t for t in recs if t["name"].startswith("test_pcie_link[")]
    assert t["outcome"] == "failed" and t["action"]["action"] == "drain-rma" and t["action"]["cause"] == "hardware"


def test_really_lost_gpu_still_drains(tmp_path):
    def lost(doc):
        doc["gpus"][1] = {"index": 1, "lost": True, "nvml_error": "GPU is lost"}
    rep, recs = _health_run(tmp_path, {"gpu_inventory": lost})
    assert (rep / "hosts-drain-rma.txt").read_text() == "h200-a\n"
    assert {_cause(f) for f in _failures(recs, "nvml_handle")} == {("hardware", "nvml_gpu_lost")}
    assert {f["action"]["action"] for f in _failures(recs, "nvml_handle")} == {"drain-rma"}
    assert _cause(_failures(recs, "gpu_count")[0]) == ("hardware", "gpu_count_lost")


@pytest.mark.parametrize("said, cls, kind", [
    ("GPU is lost", "hardware", "nvml_gpu_lost"),
    ("Unknown Error", "hardware", "nvml_unknown_error"),
    ("Insufficient Permissions", "configuration", "nvml_no_permission"),
    ("NVML error code 4", "configuration", "nvml_no_permission"),
    ("Not Supported", "configuration", "nvml_not_supported"),
    ("Uninitialized", "unverified", "nvml_unreadable"),
    ("Timeout", "unverified", "nvml_unreadable"),
    ("no sample", "unverified", "nvml_unreadable"),
])
def test_error_cause_reads_nvmls_words(said, cls, kind):
    assert error_cause(said) == error_cause(NvmlError(said)) == error_cause({"nvml_error": said}) == (cls, kind)


def test_a_hardware_check_row_never_answers_for_an_error_value_without_cause():
    """A caller that sets no cause: the check row meant for a count over its limit is gated by the error's class."""
    for check, said in (("ecc_uncorrected_aggregate", "Insufficient Permissions"), ("pcie_gen", "Timeout"),
                        ("fabric_state", "Not Supported")):
        a = actions.for_finding("test_ecc", check, NvmlError(said))
        assert a.action not in HARDWARE_ACTIONS and a.cause != "hardware", (check, a)
    assert actions.for_finding("test_ecc", "ecc_uncorrected_aggregate", 3, direction="max").action == "drain-rma"


def test_blocker_of_a_denied_handle_is_configuration_and_of_a_lost_one_hardware():
    doc = {"nvml_available": True, "gpus": [{"index": 0, "lost": True, "nvml_error": "Insufficient Permissions"},
                                            {"index": 1, "lost": True, "nvml_error": "GPU is lost"}]}
    got = {b.gpu: (b.cls, b.to_cause("h").kind, b.evidence["handle"]) for b in blockers.blockers(doc)}
    assert got == {0: ("configuration", "blocked", "nvml_no_permission"), 1: ("hardware", "blocked", "nvml_gpu_lost")}
    assert handle_cause({"index": 2, "pci_bus_id": "x"}) is None
