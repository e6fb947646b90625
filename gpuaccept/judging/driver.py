"""Is the driver answering, and what does NVML say about each GPU's own state (pure functions, no I/O).

- :func:`unresponsive`: a gpu_inventory document whose NVML call did not return within its deadline
  (gpuaccept/probes/_deadline.py, ``reason_code: driver_unresponsive``) fails "driver unresponsive on GPU i
  (call, seconds)", cause hardware / ``driver_unresponsive`` (action reboot: gpuaccept/data/actions.yaml);
- :func:`latency`: NVML's seconds per call, at idle (the gpu_inventory probe times each call) and under load
  (the samplers of gpuaccept/probes/_conditions.py), against ``nvml_call_s`` of gpuaccept/data/node_limits.yaml;
- :func:`inforom`: nvmlDeviceValidateInforom (NVML_ERROR_CORRUPTED_INFOROM: hardware, ``inforom_corrupted``);
- :func:`recovery_action`: the field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvmlDeviceGpuRecoveryAction_t): NONE
  passes, any other value fails with the action NVML names (``recovery_action:<name>`` rows); a driver that does
  not know the field ("Not Supported", "Invalid Argument") is recorded as not supported, never a failure.

Readings arrive as the probe wrote them or typed (gpuaccept.judging.readings); a reading absent from the
document (a probe or a capture of an older gpuaccept, which did not read it) returns ``None`` so the suite can say so.
"""
from __future__ import annotations

from functools import lru_cache
from importlib import resources

import yaml

from gpuaccept.causes import Cause
from gpuaccept.config.thresholds import Limit
from gpuaccept.judging.health import Finding
from gpuaccept.judging.readings import error_text, is_error, number

LIMITS_FILE = "node_limits.yaml"


@lru_cache(maxsize=1)
def node_limits() -> dict:
    """gpuaccept/data/node_limits.yaml, parsed once (the limits of the launch environment and of NVML latency)."""
    with resources.files("gpuaccept").joinpath("data", LIMITS_FILE).open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def latency_limit() -> Limit:
    """The ``nvml_call_s`` Limit (max seconds per NVML call) of gpuaccept/data/node_limits.yaml."""
    row = node_limits()["nvml_call_s"]
    return Limit(f"gpuaccept/data/{LIMITS_FILE}", "nvml_call_s", "max", float(row["max"]), row["unit"],
                 row["source"])


def unresponsive(doc: dict) -> list[Finding]:
    """The finding of a gpu_inventory document whose NVML call passed its deadline: ``[]`` when none did.

    ``doc``: the probe's document; ``doc["driver_unresponsive"]``: ``{gpu, call, seconds, deadline_s, state,
    state_after_kill, unkillable}``. The failure says ``driver unresponsive on GPU i (call, seconds)``; its cause
    is ``hardware``/``driver_unresponsive`` with the GPU and the call as evidence (the action row says reboot)."""
    stuck = doc.get("driver_unresponsive") if doc.get("reason_code") == "driver_unresponsive" else None
    if not isinstance(stuck, dict):
        return []
    gpu = stuck.get("gpu") if isinstance(stuck.get("gpu"), int) else None
    evidence = {k: stuck.get(k) for k in ("gpu", "call", "seconds", "deadline_s", "state", "state_after_kill",
                                          "unkillable")}
    return [Finding("driver_unresponsive", stuck.get("seconds"), "s", failure=doc.get("reason"), extra=evidence,
                    cause=Cause("hardware", "driver_unresponsive", gpu=gpu, evidence=evidence))]


def latency(summary, when: str) -> list[Finding]:
    """NVML's slowest call of one GPU against ``nvml_call_s`` (s per call); ``[]`` when the probe did not time its
    calls. ``summary``: ``{"calls", "mean_s", "max_s", "slowest_call"}`` (gpu_inventory's ``nvml_latency_s``, or a
    sampler's); ``when``: ``"idle"`` or ``"load"``, said in the check name (``nvml_call_s_idle``). A slow call
    without a stuck one is ``unverified`` (``nvml_slow``): measure again."""
    if not isinstance(summary, dict) or number(summary.get("max_s")) is None:
        return []
    limit = latency_limit()
    value = summary["max_s"]
    extra = {k: summary.get(k) for k in ("calls", "mean_s", "slowest_call")}
    if value <= limit.bound:
        return [Finding(f"nvml_call_s_{when}", value, "s", limit=limit, extra=extra)]
    return [Finding(f"nvml_call_s_{when}", value, "s", extra={**extra, "limit_s": limit.bound},
                    failure=f"NVML call {summary.get('slowest_call')} took {value:g} s {when}, over the limit of "
                            f"{limit.bound:g} s per call ({limit.source.split(':')[0]})",
                    cause=Cause("unverified", "nvml_slow", evidence={"max_s": value, "when": when}))]


def inforom(gpu: dict) -> list[Finding] | None:
    """InfoROM validity of one GPU (gpu_inventory's ``inforom``): valid passes, NVML_ERROR_CORRUPTED_INFOROM fails
    (hardware, ``inforom_corrupted``), another NVML answer is recorded in its words (Not Supported on parts without
    the check). None when the document has no such reading."""
    v = gpu.get("inforom")
    if v is None:
        return None
    if isinstance(v, dict) and v.get("valid") is True:
        return [Finding("inforom_valid", True)]
    if isinstance(v, dict) and v.get("valid") is False:
        why = v.get("error") or "Corrupted infoROM"
        return [Finding("inforom_valid", False, failure=f"InfoROM corrupted (nvmlDeviceValidateInforom: {why})",
                        cause=Cause("hardware", "inforom_corrupted", evidence={"nvml_error": why}))]
    return [Finding("inforom_valid", f"not read: {error_text(v) or v}")]


def recovery_action(gpu: dict) -> list[Finding] | None:
    """NVML's GPU recovery action of one GPU (gpu_inventory's ``recovery_action``: ``{"code", "name"}``): ``none``
    passes; any other fails naming it, its cause ``hardware``/``recovery_action`` with the name as its check (so
    the ``recovery_action:<name>`` row gives the action NVML asks for). A driver that does not know the field
    answers an NVML error: recorded as not supported, never a failure. None when the document has no such reading."""
    v = gpu.get("recovery_action")
    if v is None:
        return None
    if is_error(v) or not isinstance(v, dict) or "name" not in v:
        return [Finding("recovery_action", f"not supported: {error_text(v) or v}")]
    name = str(v["name"])
    if name == "none":
        return [Finding("recovery_action", name)]
    return [Finding("recovery_action", name, extra={"code": v.get("code")},
                    failure=f"NVML's GPU recovery action is '{name}' (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = "
                            f"{v.get('code')})",
                    cause=Cause("hardware", "recovery_action", check=name, evidence={"code": v.get("code")}))]
