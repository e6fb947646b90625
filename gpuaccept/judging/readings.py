"""Typed NVML readings: a reading is a value or an :class:`NvmlError`, decided once.

The probes write ``{"nvml_error": "<NVML's text>"}`` in place of any reading NVML refused (``"Not
Supported"``, ``"GPU is lost"``, ``"Unknown Error"``; see ``gpuaccept/probes/_nvml.py``). :func:`typed` turns
a probe document into the typed form once, on the controller, before any judging: every such placeholder
becomes an :class:`NvmlError`, which is not a number, not a bool and not a dict, so judging code can not do
arithmetic on it or read it as healthy by accident. :func:`number` is the one accessor judging code uses
for a figure: it gives the int/float, or None for an error, a bool or anything else.

A GPU NVML gave no handle for is written by the gpu_inventory probe as ``{"index": i, "lost": true,
"nvml_error": "<NVML's words>"}`` whatever the error; :func:`is_lost` (no handle: nothing of it can be read) and
:func:`lost_reason` read it (older documents wrote the error into ``handle`` and the identity fields instead;
both are understood). Whether the GPU is *lost* (hardware) is another question, answered once by
:func:`handle_cause`: only an error that is a reading of the part ("GPU is lost", "Unknown Error"...) is;
"Insufficient Permissions" is the probes' user denied the device (a device cgroup, a container), configuration.

What an NVML error says about its cause is decided once, by :func:`error_cause` from NVML's own words (the
probes write ``str(NVMLError)``, nvmlErrorString's text, or ``"NVML error code N"``; :data:`NVML_ERRORS`).

PCI bus ids: :func:`bus_key` is the controller's normal form (NVML's ``DDDDDDDD:BB:DD.F``, upper case), so a
torch probe's figures and NVML's GPUs are matched by bus id, not by index (``CUDA_VISIBLE_DEVICES`` renumbers
torch's devices).
"""
from __future__ import annotations

from gpuaccept.probes._pci import normalize_bus_id

import math
import re
from dataclasses import dataclass
from typing import Any

from gpuaccept.causes import Cause


@dataclass(frozen=True)
class NvmlError:
    """A reading NVML could not give. ``text``: NVML's own words (``"Not Supported"``)."""

    text: str

    def __str__(self) -> str:
        return self.text

    def __bool__(self) -> bool:  # an error is never truthy: `if reading:` cannot take it for a value
        return False

    def to_json(self) -> dict:
        """The probe's placeholder form, ``{"nvml_error": text}``, for results.json."""
        return {"nvml_error": self.text}


def reading(v: Any) -> Any:
    """One field: ``{"nvml_error": x}`` → ``NvmlError(x)``; anything else unchanged (not recursive)."""
    if isinstance(v, dict) and "nvml_error" in v and not v.get("lost"):
        return NvmlError(str(v.get("nvml_error")))
    return v


def typed(doc: Any) -> Any:
    """A probe document (or part of one) with every ``{"nvml_error": ...}`` placeholder, at any depth,
    replaced by an :class:`NvmlError`. A lost-GPU record keeps its shape (``lost``/``nvml_error`` keys)
    with its fields typed. Pure; the input is not changed."""
    if isinstance(doc, dict):
        if "nvml_error" in doc and not doc.get("lost") and "index" not in doc:
            return NvmlError(str(doc.get("nvml_error")))
        return {k: (v if k == "nvml_error" else typed(v)) for k, v in doc.items()}
    if isinstance(doc, list):
        return [typed(v) for v in doc]
    return doc


def is_error(v: Any) -> bool:
    """True for an NVML error, typed or still a placeholder."""
    return isinstance(v, NvmlError) or (isinstance(v, dict) and "nvml_error" in v and "index" not in v)


def error_text(v: Any) -> str | None:
    """NVML's words for an error reading, else None."""
    if isinstance(v, NvmlError):
        return v.text
    if isinstance(v, dict) and "nvml_error" in v and "index" not in v:
        return str(v["nvml_error"])
    return None


def number(v: Any) -> int | float | None:
    """The int/float of a figure or reading, unchanged; None for an NVML error, a bool, None, a non-finite
    float (NaN compares false with every limit, so it would pass any of them) or anything else. The one
    number test of the controller's judging and reports."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return v if not isinstance(v, float) or math.isfinite(v) else None


def to_json(v: Any) -> Any:
    """``v`` with NvmlError values turned back into ``{"nvml_error": ...}`` (for results.json), and non-finite
    floats as the strings ``"nan"``, ``"inf"``, ``"-inf"``: JSON has no such numbers (RFC 8259 section 6), and
    Python's ``NaN``/``Infinity`` tokens make results.json unreadable to jq and other strict parsers."""
    if isinstance(v, NvmlError):
        return v.to_json()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: to_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [to_json(x) for x in v]
    return v


#: NVML's errors whose cause is known, by nvmlReturn_t code: (its nvmlErrorString words, lower case, as the
#: probes write them; cause class; cause kind, a row of gpuaccept/data/actions.yaml ``causes``). Source: NVML API
#: reference, "Error reporting" (nvmlReturn_t, nvmlErrorString), nvml.h of driver 550-580 and nvidia-ml-py 12.x.
#: hardware: a reading of the part itself (it fell off the bus, its firmware stopped answering, it asks for a
#: reset, its interrupts or external power fail, its InfoROM is corrupted). configuration: the node's setting
#: (the probes' user is denied the device: a device cgroup, a container, file permissions; the driver not loaded
#: or of another version). "Not Supported" (3) is configuration too: decided 2026-12-05, see :func:`error_cause`.
#: Every other error (Uninitialized, Timeout, Not Found, In use, an unknown code...) proves nothing about the
#: part or the node: ``unverified``, kind ``nvml_unreadable``, measured again.
NVML_ERRORS = {
    15: (("gpu is lost",), "hardware", "nvml_gpu_lost"),
    999: (("unknown error",), "hardware", "nvml_unknown_error"),
    16: (("gpu requires restart", "gpu requires reset"), "hardware", "nvml_reset_required"),
    11: (("interrupt request issue",), "hardware", "nvml_irq_issue"),
    8: (("insufficient external power",), "hardware", "nvml_external_power"),
    14: (("corrupted inforom",), "hardware", "nvml_corrupted_inforom"),
    4: (("insufficient permissions",), "configuration", "nvml_no_permission"),
    17: (("the operating system has blocked the request",), "configuration", "nvml_no_permission"),
    9: (("driver not loaded",), "configuration", "nvml_unusable"),
    18: (("rm has detected an nvml/rm version mismatch",), "configuration", "nvml_unusable"),
    3: (("not supported",), "configuration", "nvml_not_supported"),
}
#: the cause of any other NVML error: nothing proven, measure again
UNVERIFIED_ERROR = ("unverified", "nvml_unreadable")
_CODE = re.compile(r"nvml error code (-?\d+)")


def error_cause(text: Any) -> tuple[str, str]:
    """``(class, kind)`` of an NVML error from NVML's words (``text``: an :class:`NvmlError`, a placeholder or its
    string; :data:`NVML_ERRORS`), :data:`UNVERIFIED_ERROR` for any other error or for None. Pure.

    "Not Supported" is ``configuration``, never hardware: the SKU file says the part has the feature (it is only
    judged then) and test_gpu_sku checks the part is that SKU, so NVML refusing it is the node's mode or software
    (ECC off makes nvmlDeviceGetTotalEccErrors "Not Supported"; a vGPU or passthrough guest, or a driver that
    lacks the call, refuses it too): nothing was read of the part, and a fix on the node brings the reading back.
    Not ``unverified``: measuring again on an unchanged node reads the same."""
    words = error_text(text) if not isinstance(text, str) else text
    low = str(words or "").strip().lower().rstrip(".")
    m = _CODE.search(low)
    for code, (said, cls, kind) in NVML_ERRORS.items():
        if (m and int(m.group(1)) == code) or any(low == w or low.startswith(w) for w in said):
            return cls, kind
    return UNVERIFIED_ERROR


def unreadable_cause(v: Any, check: str | None = None, gpu: int | None = None, field: str | None = None) -> Cause:
    """The :class:`gpuaccept.causes.Cause` of a reading NVML refused (``v``: the error; None: missing from the
    probe document, a ``tool`` gap of kind ``gap``): its class and kind by :func:`error_cause`, ``check`` and
    ``gpu`` (NVML index) as given, evidence ``{"nvml_error", "field"}``. Hardware only for an error that is a
    reading of the part ("GPU is lost", "Unknown Error"...), never for the field being unreadable as such."""
    text = error_text(v)
    cls, kind = error_cause(text) if text is not None else ("tool", "gap")
    ev = {"nvml_error": text if text is not None else "not in the probe document"}
    if field:
        ev["field"] = field
    return Cause(cls, kind, check=check, gpu=gpu if isinstance(gpu, int) and not isinstance(gpu, bool) else None,
                 evidence=ev)


def is_lost(gpu: dict) -> bool:
    """True for a GPU NVML listed but gave no handle for (``lost: true``, or an error in ``handle``): nothing of it
    can be read. Not by itself a lost *part*: :func:`handle_cause` says why (hardware only for "GPU is lost",
    "Unknown Error" and the like)."""
    return bool(gpu.get("lost")) or is_error(gpu.get("handle"))


def handle_cause(gpu: dict) -> Cause | None:
    """Why NVML gave no handle for ``gpu`` (None when it gave one): the one decision the health judgments
    (gpuaccept.judging.health.lost), the blockers and the GPU count (gpuaccept.judging.gpucount) read.
    :func:`unreadable_cause` of the handle's error with check ``nvml_handle``: ``hardware`` (``nvml_gpu_lost``,
    ``nvml_unknown_error``...) only for an error that is a reading of the part; "Insufficient Permissions" is
    ``configuration`` (``nvml_no_permission``: the probes' user cannot open /dev/nvidiaN); any other error
    ``unverified``. A record with no error text (``lost: true`` alone, written by an old probe for a GPU that fell
    off the bus) is read as "GPU is lost"."""
    if not is_lost(gpu):
        return None
    words = lost_reason(gpu)
    return unreadable_cause(NvmlError("GPU is lost" if words == "no handle" else words), "nvml_handle", gpu.get("index"))


def lost_reason(gpu: dict) -> str:
    """NVML's words for why a lost GPU has no handle (``"GPU is lost"``)."""
    return (error_text(gpu.get("handle")) or (gpu.get("nvml_error") if isinstance(gpu.get("nvml_error"), str)
                                              else None) or "no handle")


def present(gpus: list[dict]) -> list[dict]:
    """The GPUs that NVML gave a handle for (the ones that count toward ``gpus_per_node``)."""
    return [g for g in gpus if not is_lost(g)]


def bus_key(bus_id: Any) -> str | None:
    """NVML's ``DDDDDDDD:BB:DD.F`` (upper case) for a PCI bus id in any form; None for an error or anything
    unparseable. The one normaliser, shared with the probes: gpuaccept/probes/_pci.py."""
    return normalize_bus_id(bus_id)


def describe_gpu(gpu: dict) -> str:
    """``"GPU 1 (00000000:00:07.0)"`` for messages; readable fields only."""
    bus = gpu.get("pci_bus_id")
    return f"GPU {gpu.get('index', '?')}" + (f" ({bus})" if isinstance(bus, str) else "")


def unmeasured(nvml_gpus: list[dict], measured: list[dict]) -> list[dict]:
    """The NVML GPUs (with a handle) that have no entry in a probe's per-GPU list ``measured``.

    Matched by PCI bus id where both sides have one, else by index. Pure. Used so that a probe which
    measured 1 of 2 GPUs (a stray ``CUDA_VISIBLE_DEVICES``) or an empty list is never read as a pass.
    """
    seen_bus = {bus_key(m.get("pci_bus_id")) for m in measured if isinstance(m, dict)} - {None}
    seen_idx = {m.get("index") for m in measured if isinstance(m, dict)}
    out = []
    for g in present(nvml_gpus):
        key = bus_key(g.get("pci_bus_id"))
        if key is not None and seen_bus:
            if key not in seen_bus:
                out.append(g)
        elif g.get("index") not in seen_idx:
            out.append(g)
    return out
