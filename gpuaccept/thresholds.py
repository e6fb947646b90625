"""Threshold files (``thresholds/<sku>.yaml``): loading, SKU detection and judging.

A file describes one GPU SKU::

    sku: h200-sxm-141gb                     # must equal the file name's stem
    name: NVIDIA H200 SXM 141GB
    detect:                                 # how NVML reports this SKU
      nvml_names: ["NVIDIA H200"]           # nvmlDeviceGetName, compared case-insensitively
      memory_gib: [135, 145]                # nvmlDeviceGetMemoryInfo total, GiB (2**30), inclusive range
      pci_device_ids: ["0x233510de"]        # optional; nvmlDeviceGetPciInfo pciDeviceId
    expect:                                 # facts the checks compare against (see EXPECT_KEYS)
      pcie_gen: 5
    datasheet:                              # vendor figures, with their source
      source: "NVIDIA H200 Tensor Core GPU datasheet, 2024"
      hbm_bw_gbps: 4800
    checks:                                 # per check: exactly one of min/max, a unit and a source
      hbm_read_bw_gbps: {min: 4300, unit: GB/s, source: "...", fraction_of_datasheet: 0.896}

Every key is validated against the tables below, so a typo stops the run before any node is touched.
Judging (:func:`judge`) is a pure function of a :class:`Limit` and a value.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from .errors import ThresholdError
from .yamlload import load_file

# check key -> (unit, direction). Direction "min": the figure must be >= the limit; "max": <= the limit.
CHECKS: dict[str, tuple[str, str]] = {
    # health (NVML)
    "ecc_uncorrected_volatile": ("errors", "max"),
    "ecc_uncorrected_aggregate": ("errors", "max"),
    "remapped_rows_uncorrectable": ("rows", "max"),
    "retired_pages_double_bit": ("pages", "max"),
    "pcie_gen": ("gen", "min"),
    "pcie_width": ("lanes", "min"),
    "temp_c": ("C", "max"),
    # memory
    "hbm_read_bw_gbps": ("GB/s", "min"),
    "hbm_write_bw_gbps": ("GB/s", "min"),
    "hbm_copy_bw_gbps": ("GB/s", "min"),
    "h2d_bw_gbps": ("GB/s", "min"),
    "d2h_bw_gbps": ("GB/s", "min"),
    # compute
    "bf16_tflops": ("TFLOP/s", "min"),
    "fp16_tflops": ("TFLOP/s", "min"),
    "tf32_tflops": ("TFLOP/s", "min"),
    "fp8_tflops": ("TFLOP/s", "min"),
    "fp64_tflops": ("TFLOP/s", "min"),
    "launch_overhead_us": ("us", "max"),
    "below_node_median_pct": ("%", "max"),
    # nvlink
    "nvlink_active_links": ("links", "min"),
    "nvlink_crc_errors_per_s": ("errors/s", "max"),
    "nvlink_replay_errors_per_s": ("errors/s", "max"),
    "p2p_unidir_bw_gbps": ("GB/s", "min"),
    "p2p_bidir_bw_gbps": ("GB/s", "min"),
    # nccl
    "allreduce_busbw_gbps": ("GB/s", "min"),
}
CHECK_FIELDS = {"min", "max", "unit", "source", "fraction_of_datasheet", "at_bytes", "min_by_world_size", "note"}
EXPECT_KEYS = {
    "gpus_per_node", "pcie_gen", "pcie_width", "nvlink_links", "nvswitch", "mig_mode", "fp8", "fp64_tensor",
    "required_nvml", "nccl_transport", "ecc", "persistence_mode", "row_remapping", "cuda_capability",
}
TOP_KEYS = {"sku", "name", "detect", "expect", "datasheet", "checks", "notes"}
DETECT_KEYS = {"nvml_names", "memory_gib", "pci_device_ids"}


@dataclass(frozen=True)
class Limit:
    """One check's limit for one SKU. ``bound`` is the number, ``direction`` "min" or "max"."""

    sku: str
    check: str
    direction: str
    bound: float
    unit: str
    source: str
    at_bytes: int | None = None
    min_by_world_size: dict[int, float] | None = None

    def for_world_size(self, n: int) -> "Limit":
        """This limit with the bound for world size ``n`` when the file gives ``min_by_world_size``."""
        if self.min_by_world_size and n in self.min_by_world_size:
            return Limit(self.sku, self.check, "min", float(self.min_by_world_size[n]), self.unit,
                         self.source, self.at_bytes, None)
        return self

    def describe(self) -> str:
        """``">= 4300 GB/s"`` style text of the bound."""
        return f"{'>=' if self.direction == 'min' else '<='} {self.bound:g} {self.unit}"


@dataclass(frozen=True)
class Verdict:
    """Outcome of :func:`judge`: ``passed`` and a one-line ``message``."""

    passed: bool
    message: str


@dataclass
class SkuSpec:
    """A loaded threshold file. ``checks``: check key -> Limit."""

    sku: str
    name: str
    path: str
    detect: dict[str, Any]
    expect: dict[str, Any]
    datasheet: dict[str, Any]
    checks: dict[str, Limit] = field(default_factory=dict)

    def limit(self, check: str) -> Limit:
        """The Limit for ``check``; ThresholdError when this SKU's file has none (never a silent pass)."""
        if check not in self.checks:
            raise ThresholdError(f"{self.path}: no limit for check '{check}' (SKU {self.sku})")
        return self.checks[check]


def judge(limit: Limit, value: float | None) -> Verdict:
    """Compare ``value`` (in ``limit.unit``) with ``limit``. None (not measured) fails. Pure."""
    if value is None:
        return Verdict(False, f"{limit.check}: no value measured (limit {limit.describe()})")
    ok = value >= limit.bound if limit.direction == "min" else value <= limit.bound
    rel = "<" if limit.direction == "min" else ">"
    if ok:
        return Verdict(True, f"{limit.check} {value:g} {limit.unit} (limit {limit.describe()})")
    return Verdict(False, f"{limit.check} {value:g} {limit.unit} {rel} {limit.direction} {limit.bound:g} {limit.unit}")


def _err(path: str, msg: str) -> ThresholdError:
    return ThresholdError(f"{path}: {msg}")


def load_sku_file(path: str) -> SkuSpec:
    """Load and validate one threshold file. Raises ThresholdError naming the file and the bad key."""
    doc = load_file(path, ThresholdError, "threshold file")  # gpuaccept.yamlload: one loader, file:line errors
    if not isinstance(doc, dict):
        raise _err(path, "expected a mapping at the top level")
    for section in ("detect", "expect", "datasheet", "checks"):  # the shapes the validation below relies on
        if not isinstance(doc.get(section) or {}, dict):
            raise _err(path, f"{section}: expected a mapping, got {type(doc[section]).__name__}")
    stem = os.path.splitext(os.path.basename(path))[0]
    for key in doc:
        if key not in TOP_KEYS:
            raise _err(path, f"unknown key '{key}' (known: {', '.join(sorted(TOP_KEYS))})")
    if doc.get("sku") != stem:
        raise _err(path, f"sku '{doc.get('sku')}' must equal the file name '{stem}'")
    detect = doc.get("detect") or {}
    for key in detect:
        if key not in DETECT_KEYS:
            raise _err(path, f"unknown key 'detect.{key}' (known: {', '.join(sorted(DETECT_KEYS))})")
    for key in ("nvml_names", "pci_device_ids"):
        val = detect.get(key)
        if val is not None and not (isinstance(val, list) and all(isinstance(x, str) for x in val)):
            raise _err(path, f"detect.{key}: expected a list of strings, got {val!r}")
    mem = detect.get("memory_gib")
    if mem is not None and not (isinstance(mem, list) and len(mem) == 2 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in mem) and mem[0] <= mem[1]):
        raise _err(path, f"detect.memory_gib: expected [low, high] in GiB, got {mem!r}")
    expect = doc.get("expect") or {}
    for key in expect:
        if key not in EXPECT_KEYS:
            raise _err(path, f"unknown key 'expect.{key}' (known: {', '.join(sorted(EXPECT_KEYS))})")
    spec = SkuSpec(stem, str(doc.get("name", stem)), path, detect, expect, doc.get("datasheet") or {})
    for check, entry in (doc.get("checks") or {}).items():
        spec.checks[check] = _load_check(path, stem, check, entry)
    return spec


def _load_check(path: str, sku: str, check: str, entry: Any) -> Limit:
    if check not in CHECKS:
        raise _err(path, f"unknown check 'checks.{check}' (known: {', '.join(sorted(CHECKS))})")
    if not isinstance(entry, dict):
        raise _err(path, f"checks.{check}: expected a mapping with min|max, unit, source")
    for key in entry:
        if key not in CHECK_FIELDS:
            raise _err(path, f"unknown key 'checks.{check}.{key}' (known: {', '.join(sorted(CHECK_FIELDS))})")
    unit, direction = CHECKS[check]
    if direction not in entry or ({"min", "max"} - {direction}) & set(entry):
        raise _err(path, f"checks.{check}: needs '{direction}' (and not the other bound)")
    bound = entry[direction]
    if isinstance(bound, bool) or not isinstance(bound, (int, float)):
        raise _err(path, f"checks.{check}.{direction}: expected a number, got {bound!r}")
    if entry.get("unit") != unit:
        raise _err(path, f"checks.{check}.unit: expected '{unit}', got {entry.get('unit')!r}")
    if not entry.get("source"):
        raise _err(path, f"checks.{check}: 'source' is required (datasheet edition or the card measured)")
    mbw = entry.get("min_by_world_size")
    if mbw is not None and not (isinstance(mbw, dict) and all(
            type(k) is int and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in mbw.items())):
        raise _err(path, f"checks.{check}.min_by_world_size: expected a mapping of world size to number")
    for key in ("at_bytes", "fraction_of_datasheet"):
        val = entry.get(key)
        if val is not None and (isinstance(val, bool) or not isinstance(val, (int, float))):
            raise _err(path, f"checks.{check}.{key}: expected a number, got {val!r}")
    return Limit(sku, check, direction, float(bound), unit, str(entry["source"]), entry.get("at_bytes"), mbw)


def load_all(directory: str) -> dict[str, SkuSpec]:
    """Load every ``*.yaml`` in ``directory``; sku -> SkuSpec. Raises ThresholdError on the first bad file."""
    specs: dict[str, SkuSpec] = {}
    if not os.path.isdir(directory):
        raise ThresholdError(f"{directory}: threshold directory not found")
    for fn in sorted(os.listdir(directory)):
        if fn.endswith((".yaml", ".yml")):
            spec = load_sku_file(os.path.join(directory, fn))
            specs[spec.sku] = spec
    return specs


def detect_sku(specs: dict[str, SkuSpec], name: str, memory_bytes: int | None,
               pci_device_id: str | None = None) -> SkuSpec:
    """Pick the SKU whose ``detect`` block matches an NVML reading.

    ``name``: nvmlDeviceGetName; ``memory_bytes``: total memory in bytes; ``pci_device_id``: hex string.
    Raises ThresholdError naming the detected name and the known SKUs when none (or several) match.
    """
    gib = memory_bytes / 2**30 if memory_bytes else None
    hits = []
    for spec in specs.values():
        d = spec.detect
        names = [n.lower() for n in d.get("nvml_names", [])]
        if name.strip().lower() not in names:
            continue
        lo_hi = d.get("memory_gib")
        if lo_hi and gib is not None and not (lo_hi[0] <= gib <= lo_hi[1]):
            continue
        ids = [i.lower() for i in d.get("pci_device_ids", [])]
        if ids and pci_device_id and pci_device_id.lower() not in ids:
            continue
        hits.append(spec)
    if len(hits) == 1:
        return hits[0]
    mem = f"{gib:.1f} GiB" if gib is not None else "unknown memory"
    if not hits:
        raise ThresholdError(f"unknown GPU SKU: NVML reports '{name}' with {mem}; known SKUs: "
                             f"{', '.join(sorted(specs))} (set gpu_sku in the inventory or pass --sku)")
    raise ThresholdError(f"GPU '{name}' with {mem} matches several SKUs: {', '.join(s.sku for s in hits)}")


# nvmlClocksEventReasons bits (NVML API reference, "ClocksEventReasons" / nvml.h
# nvmlClocksEventReasonHwSlowdown etc.). Hardware slowdowns fail a GPU under load; the software power cap
# and software thermal slowdown are recorded only (a GPU at its power limit works as designed).
CLOCK_REASONS_FAIL = {0x8: "HW slowdown", 0x40: "HW thermal slowdown", 0x80: "HW power brake slowdown"}
CLOCK_REASONS_RECORD = {0x4: "SW power cap", 0x20: "SW thermal slowdown", 0x10: "sync boost"}


def clock_reasons(mask: int) -> tuple[list[str], list[str]]:
    """Split a clocks-event-reasons bitmask into (failing reasons, recorded reasons), by name. Pure."""
    mask = int(mask or 0)
    return ([n for b, n in CLOCK_REASONS_FAIL.items() if mask & b],
            [n for b, n in CLOCK_REASONS_RECORD.items() if mask & b])


def below_median_pct(values: dict[int, float]) -> dict[int, float]:
    """Percent by which each GPU's figure is below its node's median (0 when at or above). Pure.

    ``values``: GPU index -> figure (higher is better). Used with the ``below_node_median_pct`` limit.
    """
    if not values:
        return {}
    ordered = sorted(values.values())
    mid = len(ordered) // 2
    med = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {i: max(0.0, (med - v) / med * 100.0) if med else 0.0 for i, v in values.items()}
