"""The GPU count's cause (gpuaccept/judging/gpucount.py through health.gpu_count), pure: the real 2xH200 capture
(tests/data/replay-h200x2, bus ids 00000000:00:06.0 and 00000000:00:07.0) with GPUs taken out of NVML's list and a
PCI scan beside it in the probe's own form, per state of a short count; each state's action through the action
table (gpuaccept/data/actions.yaml), with drain-rma, reset-gpu and reboot only on hardware evidence."""
from __future__ import annotations

import copy
import json

import pytest

from gpuaccept.causes import HARDWARE_ACTIONS
from gpuaccept.judging import actions, gpucount, health
from gpuaccept.judging.readings import typed
from project_helpers import DATA

CAPTURE = json.loads(next(DATA.glob("gpu_inventory-*.json")).read_text())["doc"]
FIELD_1GPU = json.loads((DATA.parent / "h200x1-field" / "gpu_inventory.json").read_text())
BUS0, BUS1 = "00000000:00:06.0", "00000000:00:07.0"


def scanned(drivers: dict[str, str | None], keep: tuple[int, ...] = (0,), visibility: dict | None = None,
            slots: list | None = None) -> dict:
    """The capture with only NVML GPUs ``keep`` listed, and a PCI scan of ``drivers`` ({bus id: bound driver})."""
    doc = copy.deepcopy(CAPTURE)
    doc["gpus"] = [g for g in doc["gpus"] if g["index"] in keep]
    doc["pci_scan"] = {"sysfs": "/sys", "entries": 40, "truncated": False, "errors": [],
                       "occupied_slots": slots or [],
                       "devices": [{"bus_id": b, "device_id": "0x2335", "class": "0x030200", "driver": d}
                                   for b, d in drivers.items()]}
    doc["gpu_visibility"] = visibility or {"nvidia_visible_devices": None, "confined_by": None, "cgroup": "/",
                                           "device_nodes": [0, 1]}
    return doc


def judged(doc: dict, declared: int = 2, xid: list | None = None, history: int | None = None):
    """(finding, its action) of ``doc``'s GPU count against ``declared``."""
    f = health.gpu_count(typed(doc["gpus"]), declared, typed(doc), xid, history)
    a = actions.for_finding("test_gpu_inventory", f.check, f.value, f.extra, BUS0, cause=f.cause) if f.cause else None
    return f, a


def xid79(bus: str) -> dict:
    """An event as the xid_events probe writes a "fallen off the bus" line (gpuaccept/probes/xid_events.py)."""
    return {"time": "2026-12-05T10:00:00+00:00", "epoch": 1796000000.0, "pci_bus_id": bus, "pci_raw": bus[4:-2],
            "xid": 79, "pid": None, "process_name": None, "msg": "GPU has fallen off the bus.", "continuation": [],
            "uuid": None, "inferred": False, "line": f"NVRM: Xid (PCI:{bus[4:-2]}): 79, GPU has fallen off the bus."}


def test_a_count_as_declared_passes_with_or_without_the_scan():
    assert judged(scanned({BUS0: "nvidia", BUS1: "nvidia"}, keep=(0, 1)))[0].failure is None
    assert health.gpu_count(typed(CAPTURE["gpus"]), 2).failure is None
    assert health.gpu_count(typed(CAPTURE["gpus"]), None).failure is None


def test_nvidia_bound_gpu_nvml_does_not_list_is_hardware_reboot_naming_its_bus_id():
    f, a = judged(scanned({BUS0: "nvidia", BUS1: "nvidia"}))
    assert f.failure.startswith(f"gpu_count 1 != gpus_per_node 2: NVML sees {BUS0}; {BUS1} on the PCI bus, bound to "
                                f"the nvidia driver, not listed by NVML")
    assert (f.cause.cls, f.cause.kind, f.cause.evidence["missing"]) == ("hardware", "gpu_not_initialised", BUS1)
    assert (a.action, a.cause) == ("reboot", "hardware") and BUS1 in a.command


def test_a_gpu_excluded_from_the_driver_is_configuration_naming_the_parameter_never_a_reboot():
    doc = scanned({BUS0: "nvidia", BUS1: "nvidia"})
    doc["nvml_excluded"] = [{"bus_id": BUS1, "uuid": "GPU-e1"}]
    f, a = judged(doc)
    assert (f.cause.cls, f.cause.kind, a.action) == ("configuration", "gpu_excluded", "fix-config")
    assert f"{BUS1} excluded from the driver (NVreg_ExcludedGpus" in f.failure
    assert "NVreg_ExcludedGpus" in a.command and f"{BUS1} (GPU-e1)" in a.setting
    # NVML could not say (an older driver): the GPU bound to nvidia and unlisted stays the driver's failure
    doc["nvml_excluded"] = {"nvml_error": "Function Not Found"}
    assert judged(doc)[0].cause.kind == "gpu_not_initialised"


@pytest.mark.parametrize("drivers, excluded, want", [
    ({BUS0: "vfio-pci", BUS1: "vfio-pci"}, [], ("configuration", "gpu_driver_binding", "fix-config")),
    ({BUS0: "nvidia", BUS1: "nvidia"}, [BUS0, BUS1], ("configuration", "gpu_excluded", "fix-config")),
    ({BUS0: "nvidia", BUS1: "nvidia"}, [], ("hardware", "gpu_not_initialised", "reboot")),
    ({}, [], ("unverified", "gpu_count_unverified", "rerun")),
])
def test_a_loaded_driver_with_no_gpu_is_judged_by_the_pci_scan(drivers, excluded, want):
    """NVML answering with no GPU where the inventory declares two: the short count's judge decides, not 'lost
    GPUs' (a passthrough host binds every GPU to vfio-pci with the nvidia module loaded)."""
    from gpuaccept.judging.blockers import declared_missing_cause
    doc = scanned(drivers, keep=())
    doc.update(nvml_available=False, reason_code="no_gpu", nvml_excluded=[{"bus_id": b, "uuid": ""} for b in excluded])
    c = declared_missing_cause(doc, "node-1", 2)
    assert (c.cls, c.kind, actions.for_cause(c).action) == want and c.host == "node-1"
    old = {k: v for k, v in doc.items() if k != "pci_scan"}  # a capture from before the scan: as before
    assert declared_missing_cause(old, "node-1", 2).kind == "declared_gpu_missing"


def test_rm_init_adapter_failure_in_the_log_names_the_gpu_even_where_a_container_could_hide_it():
    init = {"xid": None, "fault": "init_failed", "pci_bus_id": BUS1, "init_code": "(0x24:0x72:1568)", "repeats": 3}
    vis = {"nvidia_visible_devices": "0", "confined_by": "docker", "cgroup": "/docker/abc", "device_nodes": [0]}
    f, a = judged(scanned({BUS0: "nvidia", BUS1: "nvidia"}, visibility=vis), xid=[init])
    assert (f.cause.cls, f.cause.kind) == ("hardware", "gpu_not_initialised")
    assert f"kernel log: {BUS1}: RmInitAdapter failed" in f.failure and a.action == "reboot"


def test_nvml_lost_gpu_keeps_the_lost_gpu_path():
    doc = scanned({BUS0: "nvidia", BUS1: "nvidia"}, keep=(0, 1))
    doc["gpus"][1] = {"index": 1, "lost": True, "nvml_error": "GPU is lost"}
    f, a = judged(doc)
    assert (f.cause.cls, f.cause.kind, a.action) == ("hardware", "gpu_count_lost", "drain-rma")
    assert "NVML lists 1 GPU(s) it has no handle for (lost)" in f.failure
    old = copy.deepcopy(doc)
    del old["pci_scan"]  # a capture from before the scan: NVML's own lost reading is still the evidence
    assert judged(old)[0].cause.kind == "gpu_count_lost"


@pytest.mark.parametrize("error, cls, kind, act", [
    ("Insufficient Permissions", "configuration", "gpu_count_denied", "fix-config"),
    ("Uninitialized", "unverified", "gpu_count_no_handle", "rerun"),
])
def test_handle_refused_without_loss_is_not_a_lost_gpu(error, cls, kind, act):
    """gpu_inventory writes any handle failure as ``lost`` with NVML's words: only "GPU is lost" and the like are
    lost GPUs (gpuaccept.judging.readings.handle_cause); with or without the scan, never gpu_not_initialised."""
    doc = scanned({BUS0: "nvidia", BUS1: "nvidia"}, keep=(0, 1))
    doc["gpus"][1] = {"index": 1, "lost": True, "nvml_error": error}
    for d in (doc, {k: v for k, v in doc.items() if k != "pci_scan"}):
        f, a = judged(d)
        assert (f.cause.cls, f.cause.kind, a.action) == (cls, kind, act), f.failure
        assert [g.kind for g in gpucount.explain(typed(d["gpus"]), 2, typed(d)).groups] == [kind]
        assert f"GPU 1 ({error})" in f.failure


@pytest.mark.parametrize("vis, said", [
    ({"nvidia_visible_devices": "0", "confined_by": "docker", "cgroup": "/docker/1f2e", "device_nodes": [0]},
     "NVIDIA_VISIBLE_DEVICES='0'"),
    ({"nvidia_visible_devices": None, "confined_by": "slurm", "cgroup": "/system.slice/slurmstepd.scope/job_7",
      "device_nodes": [0, 1]},
     "the probes run in a slurm container or job (cgroup /system.slice/slurmstepd.scope/job_7)"),
], ids=["nvidia-visible-devices", "slurm-cgroup"])
def test_gpus_hidden_from_the_probes_are_configuration(vis, said):
    f, a = judged(scanned({BUS0: "nvidia", BUS1: "nvidia"}, visibility=vis))
    assert (f.cause.cls, f.cause.kind) == ("configuration", "gpu_count_hidden")
    assert said in f.failure and a.action == "fix-config" and said in a.setting


def test_nvidia_visible_devices_all_hides_nothing():
    assert gpucount.hidden_by({"nvidia_visible_devices": "all", "confined_by": None}) is None
    assert gpucount.hidden_by({"nvidia_visible_devices": "void"}) == "NVIDIA_VISIBLE_DEVICES='void'"
    assert gpucount.hidden_by(None) is None


@pytest.mark.parametrize("driver, said", [("vfio-pci", "bound to vfio-pci"), ("nouveau", "bound to nouveau"),
                                          (None, "bound to no driver")])
def test_gpu_bound_to_another_driver_or_none_is_configuration(driver, said):
    f, a = judged(scanned({BUS0: "nvidia", BUS1: driver}))
    assert (f.cause.cls, f.cause.kind) == ("configuration", "gpu_driver_binding")
    assert f"{BUS1} {said}, not the nvidia driver" in f.failure
    assert a.action == "fix-config" and a.setting == f"driver of {BUS1} ({driver or 'none'})"


def test_fewer_gpus_on_the_bus_without_evidence_is_unverified_never_a_drain():
    f, a = judged(scanned({BUS0: "nvidia"}), xid=[])
    assert (f.cause.cls, f.cause.kind) == ("unverified", "gpu_count_unverified")
    assert "1 declared GPU(s) not on the PCI bus (1 NVIDIA GPU(s) there), no evidence that one fell off" in f.failure
    assert a.action == "rerun" and "BMC" in a.reason
    assert "(not read)" in judged(scanned({BUS0: "nvidia"}), xid=None)[0].failure


@pytest.mark.parametrize("evidence, said", [
    ({"xid": [xid79(BUS1)]}, f"kernel log: {BUS1}: Xid 79"),
    ({"history": 2}, "this host had 2 GPUs in an earlier run"),
    ({"slots": [{"slot": "3", "address": BUS1, "device_present": False}]},
     f"a card is seated with no device answering: slot 3 at {BUS1}"),
], ids=["xid79", "history", "seated-card"])
def test_gpu_off_the_bus_with_evidence_is_hardware(evidence, said):
    f, a = judged(scanned({BUS0: "nvidia"}, slots=evidence.get("slots")), xid=evidence.get("xid"),
                  history=evidence.get("history"))
    assert (f.cause.cls, f.cause.kind) == ("hardware", "gpu_off_bus")
    assert said in f.failure and (a.action, a.cause) == ("reboot", "hardware")


def test_an_xid79_of_a_gpu_still_listed_or_history_no_larger_is_no_evidence():
    f, _ = judged(scanned({BUS0: "nvidia"}), xid=[xid79(BUS0)], history=1)
    assert f.cause.kind == "gpu_count_unverified"
    seated = [{"slot": "5", "address": BUS0, "device_present": True}]
    assert judged(scanned({BUS0: "nvidia"}, slots=seated), xid=[])[0].cause.kind == "gpu_count_unverified"


def test_several_causes_are_all_named_and_the_hardware_one_decides():
    doc = scanned({BUS0: "nvidia", BUS1: "vfio-pci"})
    f, a = judged(doc, declared=3, xid=[xid79("00000000:00:08.0")])
    assert f"{BUS1} bound to vfio-pci" in f.failure and "00000000:00:08.0: Xid 79" in f.failure
    assert (f.cause.kind, a.action) == ("gpu_off_bus", "reboot")
    assert [g["kind"] for g in f.extra["groups"]] == ["gpu_driver_binding", "gpu_off_bus"]


def test_more_gpus_than_declared_is_the_inventory():
    f, a = judged(scanned({BUS0: "nvidia", BUS1: "nvidia"}, keep=(0, 1)), declared=1)
    assert f.failure.startswith("gpu_count 2 != gpus_per_node 1: more GPUs than declared")
    assert (f.cause.kind, a.action, a.command) == ("gpu_count_declared", "fix-config", "set gpus_per_node=2")


@pytest.mark.parametrize("change, why", [
    (lambda d: d.pop("pci_scan"), "the document has no PCI scan"),
    (lambda d: d["pci_scan"].update(truncated=True), "the PCI scan was cut short"),
    (lambda d: d["pci_scan"].update(entries=0, devices=[], errors=[{"path": "/sys/bus/pci/devices",
                                                                     "error": "FileNotFoundError: x"}]),
     "sysfs could not be read (FileNotFoundError: x)"),
    (lambda d: d["pci_scan"].update(devices=[]), f"the PCI scan lacks {BUS0} that NVML lists"),
], ids=["capture-before-the-scan", "truncated", "unreadable", "another-namespace"])
def test_no_usable_scan_is_todays_count_but_unverified(change, why):
    doc = scanned({BUS0: "nvidia", BUS1: "nvidia"})
    change(doc)
    f, a = judged(doc, xid=[])
    assert f.failure.startswith(f"gpu_count 1 != gpus_per_node 2: NVML sees {BUS0}; 1 declared GPU(s) missing")
    assert why in f.failure and (f.cause.cls, f.cause.kind) == ("unverified", "gpu_count_unscanned")
    assert a.action == "rerun"
    f, a = judged(doc, xid=[xid79(BUS1)])  # the kernel log still proves a GPU fell off
    assert (f.cause.kind, a.action) == ("gpu_off_bus", "reboot")


def test_the_real_1xh200_capture_declared_as_two_is_unverified():
    """tests/data/h200x1-field: a real document without the scan, one H200 where two are declared."""
    f = health.gpu_count(typed(FIELD_1GPU["gpus"]), 2, typed(FIELD_1GPU))
    assert f.failure.startswith("gpu_count 1 != gpus_per_node 2: NVML sees ")
    assert (f.cause.cls, f.cause.kind) == ("unverified", "gpu_count_unscanned")


def test_a_bare_count_is_judged_as_without_a_scan():
    f = health.gpu_count(2, 8)
    assert "gpu_count 2 != gpus_per_node 8" in f.failure and f.cause.kind == "gpu_count_unscanned"


def test_every_count_kind_has_a_row_and_only_hardware_takes_hardware_out():
    rows = actions.load_table()["causes"]["rows"]
    kinds = ("gpu_count_lost", "gpu_not_initialised", "gpu_off_bus", "gpu_count_hidden", "gpu_driver_binding",
             "gpu_count_unverified", "gpu_count_unscanned", "gpu_count_declared")
    for kind in kinds:
        row = rows[kind]
        assert row["reason"] and (row["action"] not in HARDWARE_ACTIONS or row["class"] == "hardware"), kind
    assert actions.load_table()["checks"]["rows"]["gpu_count"]["action"] not in HARDWARE_ACTIONS
