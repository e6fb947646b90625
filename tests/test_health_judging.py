"""Health judgments (gpuaccept/judging/health.py) on a real gpu_inventory capture from 2xH200 (tests/data), and on the
same capture altered the way sick GPUs read: each alteration must fail with the right message, the healthy
capture must pass."""
from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from gpuaccept.causes import HARDWARE_ACTIONS
from gpuaccept.judging import actions, health
from gpuaccept.judging.blockers import Blocker, blockers, missing_package, readiness_problem
from gpuaccept.errors import ThresholdError
from gpuaccept.judging.readings import NvmlError, is_lost, number, typed, unmeasured
from gpuaccept.judging.sku import detect_gpu, node_sku
from gpuaccept.config.thresholds import judge, load_all
from gpuaccept.judging.recorder import outcome
from gpuaccept.config.thresholds import load_sku_file
from project_helpers import DATA, alter, run_pytest, strict_json

REPO = Path(__file__).resolve().parent.parent
DOC = json.loads((REPO / "tests" / "data" / "h200x2-gpu_inventory.json").read_text())
LINK = json.loads((REPO / "tests" / "data" / "h200x2-pcie_link.json").read_text())
SPECS = load_all(str(REPO / "thresholds"))
H200 = SPECS["h200-sxm-141gb"]


def failures(findings) -> list[str]:
    """Failure texts of findings, figures judged by the product's one judge (gpuaccept.config.thresholds.judge)."""
    return [f.failure for f in findings if f.failure] + [
        f"{f.check} out of limit" for f in findings
        if f.limit is not None and judge(f.limit, f.value).kind == "fail"]


@pytest.mark.parametrize("judge", [health.ecc, health.row_remapping, health.preflight, health.fabric,
                                   health.temperature])
def test_real_healthy_capture_passes(judge):
    for g in typed(DOC["gpus"]):
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


def test_lifetime_uncorrectable_count_is_recorded_on_row_remapping_parts():
    """The healthy H200 on the device machine reads an aggregate (lifetime) uncorrectable count of 1 with no
    remapped row: recorded with its note, judged only on parts without row remapping."""
    import dataclasses
    g = typed(sick("ecc.uncorrected_aggregate", 1))
    found = {f.check: f for f in health.ecc(g, H200)}
    assert found["ecc_uncorrected_aggregate"].limit is None and found["ecc_uncorrected_aggregate"].value == 1
    old = dataclasses.replace(H200, expect={**H200.expect, "row_remapping": False})
    found = {f.check: f for f in health.ecc(g, old)}
    assert found["ecc_uncorrected_aggregate"].limit is not None


@pytest.mark.parametrize("judge,path,value,needle", [
    (health.row_remapping, "remapped_rows.pending", True, "row remap pending: reset needed"),
    (health.row_remapping, "remapped_rows.failure", True, "row remap failure: replace the GPU"),
    (health.row_remapping, "remapped_rows.uncorrectable", 9, "remapped_rows_uncorrectable out of limit"),
    (health.row_remapping, "remapped_rows.pending", {"nvml_error": "Not Supported"},
     "remapped_rows unreadable (NVML: Not Supported); the SKU file requires remapped_rows"),
    (health.ecc, "ecc.uncorrected_volatile", 1, "ecc_uncorrected_volatile out of limit"),
    (health.ecc, "ecc.mode_current", False, "ECC is disabled"),
    (health.ecc, "ecc.uncorrected_volatile", {"nvml_error": "Not Supported"},
     "ecc_uncorrected_volatile unreadable (NVML: Not Supported); the SKU file requires ecc"),
    (health.preflight, "compute_mode", "Prohibited", "compute mode Prohibited: no process can create a CUDA context"),
    (health.preflight, "persistence_mode", False, "persistence mode is off"),
    (health.preflight, "mig_mode.current", True, "MIG mode is on"),
    # found on 2026-11-30 (third trial): HW power brake (0x80) / HW slowdown (0x8) / HW thermal slowdown (0x40)
    # asserted on an idle GPU passed every -m health test (only the compute layer read the mask, under load)
    (health.preflight, "clocks_event_reasons", 0x81, "HW power brake slowdown active while idle"),
    (health.preflight, "clocks_event_reasons", 0x9, "HW slowdown active while idle"),
    (health.preflight, "clocks_event_reasons", 0x41, "HW thermal slowdown active while idle"),
    (health.fabric, "fabric.state", "IN_PROGRESS", "fabric state IN_PROGRESS"),
    (health.fabric, "fabric", {"nvml_error": "Not Supported"}, "fabric_state unreadable (NVML: Not Supported)"),
    (health.temperature, "temp_c", 91, "temp_c out of limit"),
])
def test_sick_readings_fail(judge, path, value, needle):
    got = failures(judge(typed(sick(path, value)), H200))
    assert any(needle in m for m in got), got


@pytest.mark.parametrize("path", ["persistence_mode", "mig_mode.current", "mig_mode"])
def test_unreadable_persistence_or_mig_mode_is_noted_not_passed_silently(path):
    """A mode NVML cannot read ("Not Supported" on GPUs without MIG) is recorded with NVML's words; it fails
    only where the SKU file asks for MIG on."""
    got = health.preflight(typed(sick(path, {"nvml_error": "Not Supported"})), H200)
    check = path.split(".")[0]
    (f,) = [x for x in got if x.check == check]
    assert f.failure is None and f.extra["note"].startswith("unreadable (NVML: Not Supported)"), f
    if check == "mig_mode":
        wants_mig = dataclasses.replace(H200, expect={**H200.expect, "mig_mode": True})
        assert failures(health.preflight(typed(sick(path, {"nvml_error": "Not Supported"})), wants_mig)) == [
            "the SKU file expects MIG mode on, and NVML cannot read it"]


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


# -- typed readings -------------------------------------------------------------------
LOST = {"index": 1, "lost": True, "nvml_error": "GPU is lost"}


def test_typed_readings_are_never_numbers():
    g = typed(sick("memory_total_bytes", {"nvml_error": "Not Supported"}))
    assert isinstance(g["memory_total_bytes"], NvmlError) and str(g["memory_total_bytes"]) == "Not Supported"
    assert number(g["memory_total_bytes"]) is None and not g["memory_total_bytes"]
    assert isinstance(g["retired_pages"]["double_bit"], NvmlError)  # nested placeholders too
    assert number(g["temp_c"]) == 35 and number(True) is None
    assert is_lost(typed(LOST)) and typed(LOST)["nvml_error"] == "GPU is lost"
    # the old lost-GPU form (error in the handle and identity fields) is still read as lost
    assert is_lost(typed({"index": 1, "handle": {"nvml_error": "GPU is lost"}, "name": {"nvml_error": "GPU is lost"}}))


@pytest.mark.parametrize("judge_fn", [health.ecc, health.row_remapping, health.preflight, health.fabric,
                                      health.temperature])
def test_lost_gpu_fails_as_lost_in_every_health_judgment(judge_fn):
    assert failures(judge_fn(typed(LOST), H200)) == ["no NVML handle (GPU is lost)"]


def test_lost_gpu_does_not_count():
    gpus = typed([DOC["gpus"][0], LOST])
    f = health.gpu_count(gpus, 2)
    assert f.failure.startswith("gpu_count 1 != gpus_per_node 2: ")
    assert (f.cause.cls, f.cause.kind) == ("hardware", "gpu_count_lost")  # NVML's own lost reading: the evidence
    assert health.gpu_count(typed(DOC["gpus"]), 2).failure is None


def test_unrequired_field_is_recorded_as_unreadable():
    h100_nvl = SPECS["h100-nvl-94gb"]  # required_nvml has no fabric
    f = health.fabric(typed(sick("fabric", {"nvml_error": "Not Supported"})), h100_nvl)
    assert failures(f) == [] and "unreadable (NVML: Not Supported)" in f[0].extra["note"]
    t = health.temperature(typed(sick("temp_c", {"nvml_error": "Unknown Error"})), H200)
    assert failures(t) == [] and "Unknown Error" in t[0].extra["note"]


# -- SKU detection on the readable keys -----------------------------------------------------------------
@pytest.mark.parametrize("path,value", [
    ("memory_total_bytes", {"nvml_error": "Not Supported"}),   # by name and PCI device id
    ("name", {"nvml_error": "Unknown Error"}),                  # by PCI device id and memory
    ("pci_device_id", {"nvml_error": "Unknown Error"}),         # by name and memory
])
def test_sku_detected_from_the_readable_keys(path, value):
    assert detect_gpu(SPECS, typed(sick(path, value))).sku == "h200-sxm-141gb"


def test_sku_undetectable_names_nvmls_words():
    g = typed(sick("name", {"nvml_error": "Unknown Error"}))
    g["pci_device_id"] = NvmlError("Unknown Error")
    with pytest.raises(ThresholdError, match=r"name unreadable \(Unknown Error\)"):
        detect_gpu(SPECS, g)


def test_node_sku_skips_lost_and_unreadable_gpus():
    unreadable = typed(sick("name", {"nvml_error": "Unknown Error"}))
    unreadable["pci_device_id"] = NvmlError("Unknown Error")
    gpus = [typed(DOC["gpus"][0]), unreadable, typed(LOST)]
    assert node_sku("h", SPECS, None, None, gpus).sku == "h200-sxm-141gb"
    with pytest.raises(ThresholdError, match="no GPU with an NVML handle"):
        node_sku("h", SPECS, None, None, [typed(LOST)])
    with pytest.raises(ThresholdError, match="unknown gpu_sku 'h999'"):
        node_sku("h", SPECS, None, "h999", gpus)


# -- blockers (kind 7) ----------------------------------------------------------------------------------
def _doc_with(gpu1: dict | None = None, **top) -> dict:
    doc = copy.deepcopy(DOC)
    if gpu1 is not None:
        doc["gpus"][1] = gpu1
    doc.update(top)
    return doc


def test_healthy_capture_has_no_blockers():
    assert blockers(DOC, H200) == []


@pytest.mark.parametrize("doc,expected", [
    (_doc_with(sick("compute_processes", [{"pid": 4242, "name": "python3"}])),
     [Blocker("preflight", "busy: pid 4242 (python3) holds a context on the GPU", 1)]),
    # a fabric present but not ready blocks only the layers that need it: never HBM or TFLOP/s
    # its class is the state's: registration in progress proves nothing yet; one that failed is hardware
    (_doc_with(sick("fabric.state", "IN_PROGRESS")), [Blocker("fabric", "fabric state IN_PROGRESS, status Success", 1,
                                                              frozenset({"nvlink", "nccl"}), cls="unverified")]),
    (_doc_with(sick("fabric.status", "Unknown Error")), [Blocker("fabric", "fabric state COMPLETED, status Unknown "
                                                                "Error", 1, frozenset({"nvlink", "nccl"}),
                                                                cls="hardware")]),
    (_doc_with(LOST), [Blocker("gpu_inventory", "no NVML handle (GPU is lost)", 1, cls="hardware")]),
    (_doc_with(kernel_driver_version="570.86.15"),
     [Blocker("driver_versions", "NVML library / kernel driver mismatch: library 580.159.04, kernel module "
                                 "570.86.15 (reboot or reload)", cls="configuration")]),
    (_doc_with(sick("fabric", {"nvml_error": "Not Supported"})), []),  # unreadable: health reports it, no block
    # found on 2026-11-30 (third trial): a GPU left in MIG mode FAILED compute and memory as slow hardware
    # ("bf16_tflops 95 < min 600": CUDA measured a MIG slice), sending a healthy card to RMA
    (_doc_with(sick("mig_mode.current", True)), [Blocker("preflight", "MIG mode is on, the SKU file expects off", 1,
                                                         cls="configuration")]),
    (_doc_with(sick("mig_mode", {"nvml_error": "Not Supported"})), []),
])
def test_blockers(doc, expected):
    got = blockers(doc, H200)
    assert got == expected and [b.cls for b in got] == [b.cls for b in expected]
    # a blocker's cause is hardware only where NVML read the part (a lost GPU, a fabric registration that failed)
    assert all((b.to_cause().cls == "hardware") == (b.check == "gpu_inventory" or "COMPLETED" in b.cause) for b in got)


@pytest.mark.parametrize("state,status,cls,action", [
    ("NOT_STARTED", "Success", "configuration", "fix-config"),   # nvidia-fabricmanager not running
    ("IN_PROGRESS", "Success", "unverified", "rerun"),           # FM just started
    ("COMPLETED", "Unknown Error", "hardware", "reset-gpu"),      # the registration failed
    ("WEIRD", "Success", "unverified", "rerun"),                 # a state NVML does not document
])
def test_the_fabric_states_cause_and_action(state, status, cls, action):
    doc = _doc_with(sick("fabric", {"state": state, "status": status}))
    (f,) = health.fabric(doc["gpus"][1], H200)
    assert f.failure and f.cause.cls == cls
    act = actions.for_finding("test_fabric", f.check, f.value, f.extra, "0000:07:00.0", cause=f.cause)
    assert (act.action, act.cause) == (action, cls)
    if action == "fix-config":
        assert "nvidia-fabricmanager" in act.command
    (b,) = blockers(doc, H200)
    blocked = actions.for_cause(b.to_cause("h"))
    assert blocked.cause == cls and (blocked.action in HARDWARE_ACTIONS) == (cls == "hardware")


def test_fabric_blocks_only_on_nvswitch_skus():
    doc = _doc_with(sick("fabric.state", "NOT_STARTED"))
    assert blockers(doc, SPECS["h100-nvl-94gb"]) == [] and blockers(doc, None) == []
    assert [b.check for b in blockers(doc, H200)] == ["fabric"]


@pytest.mark.parametrize("failures_,errors,blocks,layer,kind,first", [
    ([], [], [], "compute", "passed", ""),
    ([(1, "h GPU 1: bf16_tflops 301 < min 600")], [], [Blocker("preflight", "pid 4242", 1)], "compute", "error",
     "blocked by preflight: GPU 1: pid 4242"),
    ([(0, "h GPU 0: bf16_tflops 301 < min 600")], [], [Blocker("preflight", "pid 4242", 1)], "compute", "failed",
     "h GPU 0: bf16_tflops 301 < min 600"),             # a failure on an unblocked GPU is a failure
    ([(None, "h: busbw 12 < min 310")], [], [Blocker("fabric", "not ready", 0)], "nccl", "error",
     "blocked by fabric: GPU 0: not ready"),            # a node figure involves every GPU
    ([], [], [Blocker("driver_versions", "mismatch")], "memory", "error", "blocked by driver_versions: mismatch"),
    ([(1, "h GPU 1: pid 4242")], [], [Blocker("preflight", "pid 4242", 1)], "health", "failed", "h GPU 1: pid 4242"),
    ([], ["h: fp8_tflops not measured"], [], "compute", "error", "h: fp8_tflops not measured"),
    ([(None, "h: /a and /b are on one drive")], ["h: /a: not enough free space"], [], "storage", "failed",
     "h: /a and /b are on one drive"),                  # a failure with a gap beside it
])
def test_outcome(failures_, errors, blocks, layer, kind, first):
    out = outcome(failures_, errors, blocks, layer, host="h")
    assert out.kind == kind and out.message.split("\n")[0] == first
    # an error carries a cause for each of its blockers and gaps, filed under the host; a failure carries its
    # gaps' (its findings' causes are on their failure entries)
    assert len(out.causes) == (len(out.blocked) + len(errors) if kind == "error" else len(errors))
    assert all(c.host == "h" for c in out.causes)


# -- node readiness (kind 10) ---------------------------------------------------------------------------
@pytest.mark.parametrize("doc,expected", [
    ({"reason_code": "no_driver", "reason": "no NVIDIA driver"}, None),
    ({"reason_code": "no_gpu"}, None),
    ({"reason_code": "no_pynvml", "kernel_driver_version": None}, None),
    ({"reason_code": "no_pynvml", "driver_present": True, "kernel_driver_version": "580.159.04"},
     "driver present (kernel module 580.159.04), nvidia-ml-py (pynvml) missing for /usr/bin/python3"),
    ({"reason_code": "version_mismatch", "reason": "versions differ", "kernel_driver_version": "580.159.04",
      "nvml_library_version": "570.86.15"}, "NVML cannot start: versions differ (NVML library 570.86.15, kernel module 580.159.04)"),
])
def test_readiness_problem(doc, expected):
    got = readiness_problem({"nvml_available": False, **doc}, "/usr/bin/python3")
    assert got == expected if expected is None else str(got).startswith(expected)
    if got is not None:  # software missing on the node is its configuration, never a lost GPU
        assert got.error("gpu-01").cause.cls == "configuration" and got.error("gpu-01").host == "gpu-01"


def test_readiness_with_gpus_declared_and_no_pynvml_is_a_missing_package():
    got = readiness_problem({"nvml_available": False, "reason_code": "no_pynvml"}, "/usr/bin/python3", declared=True)
    err = got.error("gpu-01")
    assert err.cause.kind == "package_missing" and err.evidence["package"] == "nvidia-ml-py"


@pytest.mark.parametrize("code,cls", [("no_pynvml", "configuration"), ("no_driver", "configuration"),
                                      ("driver_not_loaded", "configuration"), ("no_gpu", "hardware")])
def test_declared_gpus_missing_is_hardware_only_when_the_driver_answers_with_none(code, cls):
    from gpuaccept.judging import actions
    from gpuaccept.judging.blockers import declared_missing_cause
    cause = declared_missing_cause({"nvml_available": code == "no_gpu", "reason_code": code}, "gpu-01")
    act = actions.for_cause(cause)
    assert cause.cls == cls and (act.action == "drain-rma") == (cls == "hardware")


def test_missing_package():
    assert missing_package("torch", DOC, "/opt/py/bin/python3").startswith(
        "driver present (kernel module 580.159.04), torch missing for /opt/py/bin/python3")
    assert missing_package("torch", None, "python3").startswith("torch missing for python3")
    assert missing_package("yaml", DOC, "python3") is None


# -- coverage (kind 10) ---------------------------------------------------------------------------------
def test_unmeasured_gpus_matched_by_bus_id():
    nvml = typed(DOC["gpus"])
    assert unmeasured(nvml, [{"index": 0, "pci_bus_id": "00000000:00:06.0"}]) == [nvml[1]]
    # CUDA_VISIBLE_DEVICES=1: torch calls NVML's GPU 1 "0"; matched by bus id, not index
    assert unmeasured(nvml, [{"index": 0, "pci_bus_id": "0000:00:07.0"}]) == [nvml[0]]
    assert unmeasured(nvml, []) == nvml
    assert unmeasured([nvml[0], typed(LOST)], [{"index": 0, "pci_bus_id": "00000000:00:06.0"}]) == []


def test_a_whole_group_unreadable_keeps_nvmls_words():
    g = typed(sick("ecc", {"nvml_error": "Unknown Error"}))
    assert "ecc_uncorrected_volatile unreadable (NVML: Unknown Error); the SKU file requires ecc" in \
        failures(health.ecc(g, H200))
    g = typed(sick("remapped_rows", {"nvml_error": "Not Supported"}))
    assert failures(health.row_remapping(g, H200)) == [
        "remapped_rows unreadable (NVML: Not Supported); the SKU file requires remapped_rows"]


def test_clock_event_bits_on_the_controller_match_the_probes_copy():
    """The node's table (probes/gpu_inventory.py CLOCK_EVENT_REASONS, from nvml.h) is the source; the
    controller's judging tables (gpuaccept/judging/compute.py) must name the same bits."""
    import importlib.util
    import sys
    from pathlib import Path

    from gpuaccept.judging import compute
    probes = Path(__file__).resolve().parents[1] / "gpuaccept" / "probes"
    sys.path.insert(0, str(probes))
    try:
        spec = importlib.util.spec_from_file_location("probe_gpu_inventory_bits", probes / "gpu_inventory.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(probes))
    node = dict(mod.CLOCK_EVENT_REASONS)
    for bit, name in {**compute.CLOCK_REASONS_FAIL, **compute.CLOCK_REASONS_RECORD}.items():
        assert node[name.lower().replace(" ", "_")] == bit, name


def _no_driver(doc):  # ALTERED: the document gpu_inventory writes on a node without the NVIDIA driver
    doc.update(nvml_available=False, gpus=[], driver_present=False, reason_code="no_driver",
               reason="no NVIDIA driver (libnvidia-ml.so not found)")
    for k in ("driver", "nvml_version", "cuda_driver_version", "gpu_count", "kernel_driver_version"):
        doc.pop(k, None)


@pytest.mark.parametrize("declared,args,needle", [
    ("gpus_per_node=2", (), "but the inventory declares gpus_per_node=2"),
    ("", ("--sku", "h200-sxm-141gb"), "but --sku h200-sxm-141gb declares one"),
    ("gpu_sku=l4-24gb gpus_per_node=2", ("--sku", "h200-sxm-141gb"),
     "but --sku h200-sxm-141gb declares one and the inventory declares gpus_per_node=2"),
])
def test_declared_gpu_missing_names_only_what_declared_it(tmp_path, declared, args, needle):
    """the failure read "declares gpu_sku=None gpus_per_node=8", and with
    --sku (no inventory var) "declares gpu_sku=None gpus_per_node=None": the line named declarations that
    were never made and not the one that was."""
    from project_helpers import make_project, replay_folder
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    folder = replay_folder(tmp_path, alter(tmp_path, "gpu_inventory", _no_driver))
    inv.write_text(f"h-a ansible_connection=local gpuaccept_replay={folder} {declared}\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "test_gpu_inventory", *args)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    test = next(t for t in strict_json((rep / "results.json").read_text())["tests"] if "test_gpu_inventory" in t["nodeid"])
    assert test["outcome"] == "failed" and "h-a: no NVIDIA GPU found (no NVIDIA driver" in test["message"], test
    assert needle in test["message"] and "None" not in test["message"], test["message"]


def test_a_field_reading_gpu_is_lost_fails_even_when_not_required():
    doc = typed(json.loads((DATA / "gpu_inventory-bf21a9e8fb.json").read_text())["doc"])
    sku = load_sku_file(str(REPO / "thresholds" / "h200-sxm-141gb.yaml"))
    g = dict(doc["gpus"][1])
    g["temp_c"] = typed({"nvml_error": "GPU is lost"})
    found = health.temperature(g, sku)
    assert found[0].failure and "the GPU is lost" in found[0].failure


def test_a_gpu_another_process_holds_is_not_judged_on_its_heat_or_its_load_made_slowdowns():
    """ALTERED from the 2xH200 capture: GPU 1 at 89 C with SW and HW thermal slowdown (0x60) while pid 4711 holds a
    context on it: the foreign load made the heat, so temperature and HW thermal slowdown are recorded, not judged
    (preflight's "busy" is the finding: contention, rerun); the power brake (0x80), a signal no process asserts,
    still fails, and no line calls the busy GPU idle."""
    busy = sick("compute_processes", [{"pid": 4711, "name": "python3", "used_gpu_memory": 70 << 30}])
    hot = dict(busy, temp_c=89, clocks_event_reasons=0x60)
    (t,) = health.temperature(typed(hot), H200)
    assert t.limit is None and t.failure is None and "not judged: busy: pid 4711" in t.extra["note"]
    (alone,) = health.temperature(typed(dict(hot, compute_processes=[])), H200)
    assert alone.limit is not None  # the same reading on an idle GPU is judged against temp_c
    idle = {f.check: f for f in health.preflight(typed(hot), H200)}
    assert idle["idle_clocks_event_reasons"].failure is None
    assert "HW thermal slowdown (not judged: busy: pid 4711" in str(idle["idle_clocks_event_reasons"].extra)
    assert idle["compute_processes"].error and "pid 4711 (python3)" in idle["compute_processes"].error
    brake = {f.check: f for f in health.preflight(typed(dict(busy, clocks_event_reasons=0xC0)), H200)}
    line = brake["idle_clocks_event_reasons"].failure
    assert line.startswith("HW power brake slowdown active while busy: pid 4711") and "idle" not in line
    quiet = {f.check: f for f in health.preflight(typed(sick("clocks_event_reasons", 0x40)), H200)}
    assert quiet["idle_clocks_event_reasons"].failure.startswith("HW thermal slowdown active while idle")


def test_a_gpu_of_another_sku_than_the_run_expects_blocks_its_figures():
    """The 2xH200 capture judged as the H100 an inventory's gpu_sku names: every GPU's figures are blocked
    (configuration, fix-config: gpu_sku), so an H200-level figure under H100 limits, or an H100 under H200 limits,
    never reads as a slow card; the SKU it is, or no files to detect by, blocks nothing."""
    h100 = SPECS["h100-sxm5-80gb"]
    got = blockers(DOC, h100, SPECS)
    assert [(b.check, b.gpu, b.cls) for b in got] == [("gpu_sku", 0, "configuration"), ("gpu_sku", 1, "configuration")]
    assert got[0].cause.startswith("detected SKU h200-sxm-141gb ('NVIDIA H200'), the run expects h100-sxm5-80gb")
    act = actions.for_cause(got[0].to_cause("h"))
    assert (act.action, act.cause, act.setting) == ("fix-config", "configuration", "gpu_sku")
    assert blockers(DOC, H200, SPECS) == [] and blockers(DOC, h100) == []
