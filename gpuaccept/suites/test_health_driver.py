"""health layer, the driver's own answers (probe: gpu_inventory): is NVML answering within its deadline,
how long its calls take at idle, is each GPU's InfoROM valid, and which recovery action NVML asks for.

Judged by gpuaccept/judging/driver.py; the limits and their sources are gpuaccept/data/node_limits.yaml and the
``causes`` rows of gpuaccept/data/actions.yaml (driver unresponsive: reboot).
"""
import pytest

from gpuaccept.judging import driver
from gpuaccept.judging.readings import is_lost
from gpuaccept.runner.host import HostRunner

pytestmark = pytest.mark.health


def test_driver_responsive(node: HostRunner, verdicts):
    """Every NVML call of the inventory returned within its deadline (gpuaccept/probes/_deadline.py): a call that
    did not fails "driver unresponsive on GPU i (call, seconds)" (hardware: reboot); the slowest call of the
    system part (nvmlInit, the driver's version) is recorded."""
    doc = node.gpu_inventory()
    found = driver.unresponsive(doc)
    if not found and not doc.get("nvml_available"):
        pytest.skip(f"no NVIDIA GPU on {node.name} ({doc.get('reason') or 'NVML sees no GPU'})")
    verdicts.apply(found)
    summary = doc.get("nvml_latency_s")
    if isinstance(summary, dict):
        verdicts.record("nvml_system_call_max_s", summary.get("max_s"), "s", extra=summary)
    verdicts.finish()


def _judged(gpus, judge, what: str, verdicts) -> None:
    read = 0
    for g in gpus:
        if is_lost(g):
            continue
        found = judge(g)
        if found is not None:
            read += 1
            verdicts.apply(found, gpu=g)
    if not read:
        pytest.skip(f"the gpu_inventory document has no {what} reading (a probe or capture of an older gpuaccept, "
                    "which did not read it)")
    verdicts.finish()


def test_nvml_latency(node: HostRunner, gpus, verdicts):
    """NVML's slowest call per GPU at idle (the inventory times each call), against nvml_call_s of
    gpuaccept/data/node_limits.yaml; under load the conditions sampler of each GPU-loading probe times its own
    calls, judged by the same limit in that probe's test (``nvml_call_s_load``, gpuaccept.judging.recorder)."""
    _judged(gpus, lambda g: driver.latency(g.get("nvml_latency_s"), "idle") or None, "NVML latency", verdicts)


def test_inforom(node: HostRunner, gpus, verdicts):
    """Each GPU's InfoROM checksums verify (nvmlDeviceValidateInforom); a corrupted one fails (hardware)."""
    _judged(gpus, driver.inforom, "InfoROM", verdicts)


def test_recovery_action(node: HostRunner, gpus, verdicts):
    """NVML's GPU recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) is NONE on every GPU; any other value fails
    with the action it names, with or without an Xid in the window. A driver without the field: recorded."""
    _judged(gpus, driver.recovery_action, "recovery action", verdicts)
