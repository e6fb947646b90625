"""Typed NVML readings: a reading is a value or an :class:`NvmlError`, decided once.

The probes write ``{"nvml_error": "<NVML's text>"}`` in place of any reading NVML refused (``"Not
Supported"``, ``"GPU is lost"``, ``"Unknown Error"``; see ``gpuaccept/probes/_nvml.py``). :func:`typed` turns
a probe document into the typed form once, on the controller, before any judging: every such placeholder
becomes an :class:`NvmlError`, which is not a number, not a bool and not a dict, so judging code can not do
arithmetic on it or read it as healthy by accident. :func:`number` is the one accessor judging code uses
for a figure: it gives the int/float, or None for an error, a bool or anything else.

A GPU NVML gave no handle for is written by the gpu_inventory probe as ``{"index": i, "lost": true,
"nvml_error": "GPU is lost"}``; :func:`is_lost` and :func:`lost_reason` read it (older documents wrote the
error into ``handle`` and the identity fields instead; both are understood).

PCI bus ids: :func:`bus_key` is the controller's normal form (NVML's ``DDDDDDDD:BB:DD.F``, upper case), so a
torch probe's figures and NVML's GPUs are matched by bus id, not by index (``CUDA_VISIBLE_DEVICES`` renumbers
torch's devices).
"""
from __future__ import annotations

from gpuaccept.probes._pci import normalize_bus_id

import math
from dataclasses import dataclass
from typing import Any


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


def is_lost(gpu: dict) -> bool:
    """True for a GPU NVML listed but gave no handle for (``lost: true``, or an error in ``handle``)."""
    return bool(gpu.get("lost")) or is_error(gpu.get("handle"))


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
