"""Judges of the driver's own answers (gpuaccept/judging/driver.py) on the 2xH200 capture
(tests/data/h200x2-gpu_inventory.json) with the driver's readings (InfoROM, recovery action, NVML call latency)
written in the probe's shape: the capture predates them, so each state is the capture altered the way a sick GPU
reads (the probe's own document shape: gpuaccept/probes/gpu_inventory.py inforom(), recovery_action(),
_deadline.Latency.summary)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from gpuaccept.judging import actions, driver
from gpuaccept.judging.readings import typed

DATA = Path(__file__).resolve().parent / "data"


def _gpu(**fields) -> dict:
    g = copy.deepcopy(json.loads((DATA / "h200x2-gpu_inventory.json").read_text())["gpus"][0])
    g.update(fields)
    return typed(g)


def _action(finding, test: str) -> str:
    return actions.for_finding(test, finding.check, finding.value, finding.extra, cause=finding.cause).action


def test_unresponsive_driver_is_a_hardware_finding_with_reboot():
    doc = {"nvml_available": False, "reason_code": "driver_unresponsive",
           "reason": "driver unresponsive on GPU 1 (nvmlDeviceGetTemperature, 10.002 s)",
           "driver_unresponsive": {"gpu": 1, "call": "nvmlDeviceGetTemperature", "seconds": 10.002,
                                   "deadline_s": 10.0, "state": "D", "state_after_kill": "D", "unkillable": True}}
    (f,) = driver.unresponsive(doc)
    assert f.failure == "driver unresponsive on GPU 1 (nvmlDeviceGetTemperature, 10.002 s)"
    assert (f.cause.cls, f.cause.kind, f.cause.gpu) == ("hardware", "driver_unresponsive", 1)
    act = actions.for_finding("test_driver_responsive", f.check, f.value, f.extra, cause=f.cause)
    assert act.action == "reboot" and "nvmlDeviceGetTemperature on GPU 1" in act.reason
    assert driver.unresponsive({"nvml_available": True, "gpus": []}) == []


def test_inforom_valid_corrupted_and_not_supported():
    assert driver.inforom(_gpu()) is None  # the capture predates the reading
    (ok,) = driver.inforom(_gpu(inforom={"valid": True}))
    assert ok.failure is None and ok.value is True
    (bad,) = driver.inforom(_gpu(inforom={"valid": False, "error": "Corrupted infoROM"}))
    assert bad.failure == "InfoROM corrupted (nvmlDeviceValidateInforom: Corrupted infoROM)"
    assert bad.cause.cls == "hardware" and _action(bad, "test_inforom") == "drain-rma"
    (ns,) = driver.inforom(_gpu(inforom={"nvml_error": "Not Supported"}))
    assert ns.failure is None and ns.value == "not read: Not Supported"


def test_recovery_action_none_passes_others_fail_with_nvmls_action():
    (none,) = driver.recovery_action(_gpu(recovery_action={"code": 0, "name": "none"}))
    assert none.failure is None
    for code, name, act in ((1, "gpu reset required", "reset-gpu"), (2, "node reboot required", "reboot"),
                            (3, "drain p2p", "reset-gpu"), (4, "drain and reset", "reset-gpu")):
        (f,) = driver.recovery_action(_gpu(recovery_action={"code": code, "name": name}))
        assert f.failure == f"NVML's GPU recovery action is '{name}' (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = {code})"
        assert _action(f, "test_recovery_action") == act, name
    # a driver that does not know the field: recorded, never a failure
    (old,) = driver.recovery_action(_gpu(recovery_action={"nvml_error": "Invalid Argument"}))
    assert old.failure is None and old.value == "not supported: Invalid Argument"


def test_nvml_latency_against_the_data_file_limit():
    limit = driver.latency_limit()
    assert limit.bound == 1.0 and limit.direction == "max" and "2.4 ms" in limit.source
    (ok,) = driver.latency({"calls": 61, "mean_s": 0.0004, "max_s": 0.012, "slowest_call": "nvmlInit"}, "idle")
    assert ok.limit is limit or ok.limit == limit
    (slow,) = driver.latency({"calls": 61, "mean_s": 0.2, "max_s": 3.5, "slowest_call": "nvmlDeviceGetPowerUsage"},
                             "load")
    assert slow.check == "nvml_call_s_load" and "took 3.5 s load" in slow.failure
    assert slow.cause.cls == "unverified" and _action(slow, "test_nvml_latency") == "rerun"
    assert driver.latency(None, "idle") == []


def test_the_h200_field_capture_reads_clean():
    """The 1×H200 capture (tests/data/h200x1-field): InfoROM valid, recovery action none (field 230 answered 0),
    84 NVML calls under the latency limit; a recovery action of 2 in the same document fails with reboot."""
    doc = json.loads((DATA / "h200x1-field" / "gpu_inventory.json").read_text())
    gpu = typed(doc["gpus"][0])
    assert driver.unresponsive(doc) == []
    (rom,) = driver.inforom(gpu)
    (rec,) = driver.recovery_action(gpu)
    assert rom.failure is None and rom.value is True and rec.failure is None
    assert all(f.failure is None for f in driver.latency(doc["gpus"][0]["nvml_latency_s"], "idle"))
    (bad,) = driver.recovery_action(typed({**doc["gpus"][0], "recovery_action": {"code": 2, "name": "node reboot required"}}))
    assert _action(bad, "test_recovery_action") == "reboot"
