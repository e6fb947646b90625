"""Threshold files (``thresholds/<sku>.yaml``): the check registry, loading, and the one judge.

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

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any

from gpuaccept.errors import ThresholdError
from gpuaccept.config.bounded import SMALL_BYTES, SMALL_LINE
from gpuaccept.config.shown import shown
from gpuaccept.config.yamlload import YamlMap, load_file


@dataclass(frozen=True)
class Check:
    """One check of the registry: ``unit`` of its figure, ``direction`` ("min": the figure must be >= the
    limit; "max": <=), the ``layer`` that measures it, and a one-line ``description`` of the figure.
    ``var``: the inventory variable that sets the limit (site-bought storage and fabric); None for a check a
    threshold file's ``checks:`` sets."""

    unit: str
    direction: str
    layer: str
    description: str
    var: str | None = None


# The single registry of checks: check key -> Check. Threshold-file validation (the keys without ``var``),
# the inventory-var limits (:func:`inventory_limit`), the judge's messages and "which checks does this SKU
# require in this layer" all read it.
REGISTRY: dict[str, Check] = {
    # health (NVML, gpu_inventory / pcie_link probes)
    "ecc_uncorrected_volatile": Check("errors", "max", "health", "uncorrectable ECC errors since the driver loaded"),
    "ecc_uncorrected_aggregate": Check("errors", "max", "health", "uncorrectable ECC errors over the GPU's life"),
    "remapped_rows_uncorrectable": Check("rows", "max", "health", "rows remapped after uncorrectable errors"),
    "retired_pages_double_bit": Check("pages", "max", "health", "pages retired for double-bit ECC errors (pre-Ampere)"),
    "pcie_gen": Check("gen", "min", "health", "PCIe link generation under load"),
    "pcie_width": Check("lanes", "min", "health", "PCIe link width under load"),
    "temp_c": Check("C", "max", "health", "GPU temperature (NVML), idle and the maximum under matmul load"),
    "power_limit_w": Check("W", "min", "health", "enforced power limit; judged against it when NVML's default "
                                                  "limit is unreadable"),
    # memory
    "hbm_read_bw_gbps": Check("GB/s", "min", "memory", "device memory read bandwidth, all GPUs loaded"),
    "hbm_write_bw_gbps": Check("GB/s", "min", "memory", "device memory write bandwidth, all GPUs loaded"),
    "hbm_copy_bw_gbps": Check("GB/s", "min", "memory", "device memory copy bandwidth (read + write bytes)"),
    "h2d_bw_gbps": Check("GB/s", "min", "memory", "pinned host-to-device copy bandwidth, one GPU at a time"),
    "d2h_bw_gbps": Check("GB/s", "min", "memory", "pinned device-to-host copy bandwidth, one GPU at a time"),
    # compute
    "bf16_tflops": Check("TFLOP/s", "min", "compute", "dense bf16 matmul throughput, all GPUs at once"),
    "fp16_tflops": Check("TFLOP/s", "min", "compute", "dense fp16 matmul throughput, all GPUs at once"),
    "tf32_tflops": Check("TFLOP/s", "min", "compute", "dense tf32 matmul throughput, all GPUs at once"),
    "fp8_tflops": Check("TFLOP/s", "min", "compute", "dense fp8 (e4m3) matmul throughput, all GPUs at once"),
    "fp64_tflops": Check("TFLOP/s", "min", "compute", "dense fp64 matmul throughput, all GPUs at once"),
    "launch_overhead_us": Check("us", "max", "compute", "empty-kernel launch time, wall clock"),
    "below_node_median_pct": Check("%", "max", "compute", "percent a GPU's TFLOP/s is under its node's median"),
    # nvlink
    "nvlink_active_links": Check("links", "min", "nvlink", "active NVLink links per GPU"),
    "nvlink_crc_errors_per_s": Check("errors/s", "max", "nvlink", "NVLink CRC errors per second per link, watched"),
    "nvlink_replay_errors_per_s": Check("errors/s", "max", "nvlink", "NVLink replays per second per link, watched"),
    "nvlink_recovery_errors": Check("errors", "max", "nvlink", "NVLink link recoveries per link over a layer's load "
                                                         "(its growth)"),
    "p2p_unidir_bw_gbps": Check("GB/s", "min", "nvlink", "GPU-to-GPU copy bandwidth, one direction"),
    "p2p_bidir_bw_gbps": Check("GB/s", "min", "nvlink", "GPU-to-GPU copy bandwidth, both directions at once"),
    # nccl
    "allreduce_busbw_gbps": Check("GB/s", "min", "nccl", "all-reduce bus bandwidth (nccl-tests busbw)"),
    "internode_pair_busbw_gbps": Check("GB/s", "min", "nccl", "inter-node all-reduce busbw of one pair of hosts "
                                                              "(Ring, pairwise pattern), by NCCL network transport"),
    # limits set by inventory variables (gpuaccept/config/storage.py, gpuaccept/config/multinode/__init__.py)
    "seq_read_gbps": Check("GB/s", "min", "storage", "per local path, sequential read, 1 MiB blocks",
                           "storage_limits"),
    "seq_write_gbps": Check("GB/s", "min", "storage", "per local path, sequential write, 1 MiB blocks",
                            "storage_limits"),
    "rand_read_iops": Check("IOPS", "min", "storage", "per local path, 4 KiB random read", "storage_limits"),
    "fs_aggregate_read_gbps": Check("GB/s", "min", "storage", "shared filesystem, every host reading at once, "
                                                               "sum", "storage_limits"),
    "fs_aggregate_write_gbps": Check("GB/s", "min", "storage", "shared filesystem, every host writing at once, "
                                                                "sum", "storage_limits"),
    "storage_to_gpu_gbps": Check("GB/s", "min", "storage", "per GPU, file -> pinned host memory -> GPU, end to "
                                                            "end", "storage_limits"),
    "gds_read_gbps": Check("GB/s", "min", "gpudirect", "per GPU, GPUDirect Storage file -> GPU",
                           "storage_limits"),
    "gds_write_gbps": Check("GB/s", "min", "gpudirect", "per GPU, GPUDirect Storage GPU -> file",
                            "storage_limits"),
    "ib_rate_gbps": Check("Gb/s", "min", "gpudirect", "InfiniBand/RoCE port rate, as the kernel writes it in "
                                                      "/sys/class/infiniband/<hca>/ports/<n>/rate", "ib_rate_gbps"),
    "internode_busbw_gbps": Check("GB/s", "min", "nccl", "inter-node all-reduce bus bandwidth (Ring)",
                                  "nccl_internode_busbw_gbps"),
    "below_round_median_pct": Check("%", "max", "nccl", "percent a pair's or rail's busbw is under its round's "
                                                        "median (100 - the var's percentage)",
                                    "nccl_pairwise_slow_pct"),
}
# check key -> (unit, direction) of the checks a threshold file may set, the view the loader reads.
CHECKS: dict[str, tuple[str, str]] = {k: (c.unit, c.direction) for k, c in REGISTRY.items() if c.var is None}

CHECK_FIELDS = {"min", "max", "unit", "source", "fraction_of_datasheet", "at_bytes", "min_by_world_size",
                "min_by_transport", "note"}
EXPECT_KEYS = {
    "gpus_per_node", "pcie_gen", "pcie_width", "nvlink_links", "nvswitch", "mig_mode", "fp8", "fp64_tensor",
    "required_nvml", "nccl_transport", "ecc", "persistence_mode", "row_remapping", "cuda_capability",
    "nvlink_link_ids",  # optional: NVLink link ids that must be active (only where the board fixes them)
}
#: expect keys read as yes/no (the judges test their truth: a quoted "false" is text, and true)
EXPECT_BOOLS = {"nvswitch", "mig_mode", "fp8", "fp64_tensor", "ecc", "persistence_mode", "row_remapping"}
#: expect keys that are counts or generations (whole numbers >= 0)
EXPECT_COUNTS = {"gpus_per_node", "pcie_gen", "pcie_width", "nvlink_links"}
#: the NVML fields ``expect.required_nvml`` may name: the ``field`` argument of every unreadable-reading rule
#: (gpuaccept/judging/health.py, gpuaccept/judging/drift.py), plus ``pcie`` (the PCIe link fails unreadable in any case)
REQUIRED_NVML_FIELDS = {"ecc", "remapped_rows", "retired_pages", "temp_c", "persistence_mode", "mig_mode", "fabric",
                        "power_limits", "application_clocks", "pending_modes", "pcie"}
TOP_KEYS = {"sku", "name", "detect", "expect", "datasheet", "checks", "notes"}
DETECT_KEYS = {"nvml_names", "memory_gib", "pci_device_ids"}


@dataclass(frozen=True)
class Limit:
    """One check's limit. ``bound`` is the number, ``direction`` "min" or "max"; ``origin`` says where it
    came from: the SKU name of a threshold file, or "inventory" for a limit set by an inventory var; ``site``
    the ``file:line`` of a site file's entry that replaced the threshold file's (gpuaccept/config/sitelimits.py)."""

    origin: str
    check: str
    direction: str
    bound: float
    unit: str
    source: str
    at_bytes: int | None = None
    min_by_world_size: dict[int, float] | None = None
    min_by_transport: dict[str, float] | None = None
    site: str | None = None

    @property
    def sku(self) -> str:
        """Former name of :attr:`origin` (kept for callers not yet renamed)."""
        return self.origin

    def for_world_size(self, n: int) -> "Limit":
        """This limit with the bound for world size ``n`` when the file gives ``min_by_world_size``."""
        if self.min_by_world_size and n in self.min_by_world_size:
            return replace(self, direction="min", bound=float(self.min_by_world_size[n]), min_by_world_size=None)
        return self

    def for_transport(self, transport: str | None) -> "Limit":
        """This limit with the bound the file gives for NCCL network transport ``transport`` (a key of
        ``min_by_transport`` as written, e.g. ``"IB"``, ``"NET/IB/GDRDMA"``, ``"Socket"``; None or a key not
        listed: the plain bound)."""
        if transport and self.min_by_transport and transport in self.min_by_transport:
            return replace(self, bound=float(self.min_by_transport[transport]), min_by_transport=None)
        return replace(self, min_by_transport=None) if self.min_by_transport else self

    def describe(self) -> str:
        """``">= 4300 GB/s"`` style text of the bound."""
        return f"{'>=' if self.direction == 'min' else '<='} {self.bound:g} {self.unit}"

    def where(self) -> str:
        """Where the bound comes from, for a failure line: ``"h200-sxm-141gb.yaml checks.bf16_tflops"`` (a
        threshold file, by its SKU name), ``"site.yaml:4 checks.bf16_tflops, over h200-sxm-141gb.yaml"`` (a site
        file's entry), ``"inventory var storage_limits"``, ``"burn-in policy"`` (the table in
        gpuaccept/judging/burnin.py), ``"NVML"`` (the GPU's own threshold); the full source text is in results.json."""
        if self.site:
            return f"{self.site} checks.{self.check}, over {self.origin}.yaml"
        if self.origin == "inventory":
            return self.source
        if self.origin in ("burn-in policy", "NVML"):
            return self.origin
        return f"{self.origin}.yaml checks.{self.check}"


@dataclass(frozen=True)
class Verdict:
    """Outcome of :func:`judge`: ``passed``, a one-line ``message`` and ``kind``: "pass", "fail" (a figure
    outside its limit) or "missing" (no figure to judge: an error of the measurement, not of the GPU)."""

    passed: bool
    message: str
    kind: str = ""


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

    def required(self, layer: str) -> list[str]:
        """The checks of ``layer`` (see :data:`REGISTRY`) this SKU's file sets a limit for: the figures a
        run of that layer must measure and judge (one not measured is an error)."""
        return [c for c in self.checks if c in REGISTRY and REGISTRY[c].layer == layer]


def judge(limit: Limit, value: float | None, figure: str | None = None, context: str | None = None) -> Verdict:
    """Compare ``value`` (in ``limit.unit``) with ``limit``. Pure.

    ``figure`` names the figure in the message (e.g. ``"bf16_below_node_median_pct"``; default
    ``limit.check``); ``context`` is appended in parentheses (dtype, size, direction: ``"bf16 8192x8192x8192
    matmul"``). A value that is not a number (None, a bool, an NVML error) does not pass: kind "missing",
    message "<figure>: no value measured (limit ...)"; nor does a non-finite one (NaN, +-inf: a timer that read
    0 s, a division by zero on the node), kind "missing", "<figure>: inf is no measurement (limit ...)": it is
    neither a pass (inf >= any floor) nor a hardware failure (NaN < nothing). Messages look like
    ``"hbm_read_bw_gbps 3812 GB/s < min 4300 GB/s [limit: h200-sxm-141gb.yaml checks.hbm_read_bw_gbps]"``
    (a failure names where its bound comes from: :meth:`Limit.where`).
    """
    name = figure or limit.check
    ctx = f" ({context})" if context else ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return Verdict(False, f"{name}: no value measured (limit {limit.describe()}){ctx}", "missing")
    if not math.isfinite(value):
        return Verdict(False, f"{name}: {value} is no measurement (limit {limit.describe()}){ctx}", "missing")
    ok = value >= limit.bound if limit.direction == "min" else value <= limit.bound
    rel = "<" if limit.direction == "min" else ">"
    if ok:
        return Verdict(True, f"{name} {value:g} {limit.unit} (limit {limit.describe()}){ctx}", "pass")
    return Verdict(False, f"{name} {value:g} {limit.unit} {rel} {limit.direction} {limit.bound:g} {limit.unit}{ctx} "
                          f"[limit: {limit.where()}]", "fail")


def inventory_limit(check: str, bound: float, source: str | None = None, at_bytes: int | None = None) -> Limit:
    """The Limit an inventory variable sets for ``check`` (a :data:`REGISTRY` key with ``var``): origin
    "inventory", unit and direction from the registry, ``source`` default ``"inventory var <var>"``; ``bound``
    in the registry's unit. Raises KeyError for a check no inventory variable sets (a programming error)."""
    c = REGISTRY[check]
    if c.var is None:
        raise KeyError(f"{check} is set by threshold files, not by an inventory variable")
    return Limit("inventory", check, c.direction, float(bound), c.unit, source or f"inventory var {c.var}",
                 at_bytes)


def inventory_checks(var: str) -> dict[str, Check]:
    """The :data:`REGISTRY` checks whose limit the inventory variable ``var`` sets (e.g. "storage_limits")."""
    return {k: c for k, c in REGISTRY.items() if c.var == var}


def _err(path: str, msg: str, where: Any = None, key: Any = None) -> ThresholdError:
    """``ThresholdError("<path>:<line>: <msg>")``: the line of ``key`` in the loaded mapping ``where``, or of
    ``where`` itself when ``key`` is absent from it (a missing key is named at its enclosing mapping);
    ``"<path>: <msg>"`` when no line is known (``where`` not a :class:`~gpuaccept.config.yamlload.YamlMap`)."""
    line = 0
    if isinstance(where, YamlMap):
        line = where.lines.get(key, 0) if key is not None else 0
        line = line or where.line
    return ThresholdError(f"{path}:{line}: {msg}" if line else f"{path}: {msg}")


def load_sku_file(path: str) -> SkuSpec:
    """Load and validate one threshold file. Raises ThresholdError naming the file, the line and the bad key
    (``thresholds/x.yaml:12: unknown key 'checks.hbm_raed_bw_gbps.min'``)."""
    doc = load_file(path, ThresholdError, "threshold file", max_bytes=SMALL_BYTES, max_line=SMALL_LINE)  # gpuaccept.config.yamlload: one loader, file:line errors
    if not isinstance(doc, dict):
        raise _err(path, "expected a mapping at the top level")
    for section in ("detect", "expect", "datasheet", "checks"):  # the shapes the validation below relies on
        if not isinstance(doc.get(section) or {}, dict):
            raise _err(path, f"{section}: expected a mapping, got {type(doc[section]).__name__}", doc, section)
    stem = os.path.splitext(os.path.basename(path))[0]
    for key in doc:
        if key not in TOP_KEYS:
            raise _err(path, f"unknown key {shown(key)} (known: {', '.join(sorted(TOP_KEYS))})", doc, key)
    if doc.get("sku") != stem:
        raise _err(path, f"sku {shown(doc.get('sku'))} must equal the file name '{stem}'", doc, "sku")
    detect = doc.get("detect") or {}
    for key in detect:
        if key not in DETECT_KEYS:
            raise _err(path, f"unknown key 'detect.{key}' (known: {', '.join(sorted(DETECT_KEYS))})", detect, key)
    for key in ("nvml_names", "pci_device_ids"):
        val = detect.get(key)
        if val is not None and not (isinstance(val, list) and all(isinstance(x, str) for x in val)):
            raise _err(path, f"detect.{key}: expected a list of strings, got {shown(val)}", detect, key)
    mem = detect.get("memory_gib")
    if mem is not None and not (isinstance(mem, list) and len(mem) == 2 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in mem) and mem[0] <= mem[1]):
        raise _err(path, f"detect.memory_gib: expected [low, high] in GiB, got {shown(mem)}", detect, "memory_gib")
    expect = doc.get("expect") or {}
    for key in expect:
        if key not in EXPECT_KEYS:
            raise _err(path, f"unknown key 'expect.{key}' (known: {', '.join(sorted(EXPECT_KEYS))})", expect, key)
    _check_expect(path, expect)
    spec = SkuSpec(stem, str(doc.get("name", stem)), path, detect, expect, doc.get("datasheet") or {})
    checks = doc.get("checks") or {}
    for check, entry in checks.items():
        spec.checks[check] = _load_check(path, stem, check, entry, checks)
    return spec


def _check_expect(path: str, expect: Any) -> None:
    """The values of ``expect:`` have the types the judges read them as. A misspelt ``required_nvml`` field
    silently drops its requirement (an unreadable ECC or row-remap reading is then recorded, not failed), and
    ``mig_mode: "false"`` (quoted: text, so true) expects MIG on and blocks every GPU test of a healthy card.
    Raises ThresholdError naming the file and the line of the key."""
    for key, val in expect.items():
        if key in EXPECT_BOOLS and not isinstance(val, bool):
            raise _err(path, f"expect.{key}: expected true or false, got {type(val).__name__} {val!r}", expect, key)
        if key in EXPECT_COUNTS and (isinstance(val, bool) or not isinstance(val, int) or val < 0):
            raise _err(path, f"expect.{key}: expected a whole number >= 0, got {shown(val)}", expect, key)
    fields = expect.get("required_nvml")
    if fields is not None:
        if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
            raise _err(path, f"expect.required_nvml: expected a list of NVML field names, got {shown(fields)}",
                       expect, "required_nvml")
        unknown = [f for f in fields if f not in REQUIRED_NVML_FIELDS]
        if unknown:
            raise _err(path, f"expect.required_nvml: unknown field {shown(unknown[0])} (known: "
                             f"{', '.join(sorted(REQUIRED_NVML_FIELDS))})", expect, "required_nvml")
    ids = expect.get("nvlink_link_ids")
    if ids is not None and not (isinstance(ids, list) and all(type(i) is int and i >= 0 for i in ids)):
        raise _err(path, f"expect.nvlink_link_ids: expected a list of link numbers, got {shown(ids)}",
                   expect, "nvlink_link_ids")
    transport = expect.get("nccl_transport")
    if transport is not None and (not isinstance(transport, str) or not transport.strip()):
        raise _err(path, f"expect.nccl_transport: expected text such as P2P or NET/IB, got {shown(transport)}",
                   expect, "nccl_transport")


def _load_check(path: str, sku: str, check: str, entry: Any, checks: Any = None) -> Limit:
    """One ``checks:`` entry as a Limit; ``checks``: the loaded mapping holding it (for the line numbers)."""
    if check not in CHECKS:
        raise _err(path, f"unknown check {shown(f'checks.{check}')} (known: {', '.join(sorted(CHECKS))})", checks, check)
    if not isinstance(entry, dict):
        raise _err(path, f"checks.{check}: expected a mapping with min|max, unit, source", checks, check)
    for key in entry:
        if key not in CHECK_FIELDS:
            raise _err(path, f"unknown key {shown(f'checks.{check}.{key}')} (known: {', '.join(sorted(CHECK_FIELDS))})",
                       entry, key)
    unit, direction = CHECKS[check]
    if direction not in entry or ({"min", "max"} - {direction}) & set(entry):
        raise _err(path, f"checks.{check}: needs '{direction}' (and not the other bound)", checks, check)
    bound = entry[direction]
    if isinstance(bound, bool) or not isinstance(bound, (int, float)):
        raise _err(path, f"checks.{check}.{direction}: expected a number, got {shown(bound)}", entry, direction)
    if bound < 0:  # every figure judged is a count, rate, size or temperature >= 0: a negative floor passes all
        raise _err(path, f"checks.{check}.{direction}: {shown(bound)} is negative ("
                         + ("every figure would pass" if direction == "min" else "every figure would fail") + ")",
                   entry, direction)
    if entry.get("unit") != unit:
        raise _err(path, f"checks.{check}.unit: expected '{unit}', got {shown(entry.get('unit'))}",
                   *((entry, "unit") if "unit" in entry else (checks, check)))
    if not entry.get("source"):
        raise _err(path, f"checks.{check}: 'source' is required (datasheet edition or the card measured)",
                   *((entry, "source") if "source" in entry else (checks, check)))
    mbw = entry.get("min_by_world_size")
    if mbw is not None and not (isinstance(mbw, dict) and all(
            type(k) is int and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in mbw.items())):
        raise _err(path, f"checks.{check}.min_by_world_size: expected a mapping of world size to number",
                   entry, "min_by_world_size")
    mbt = entry.get("min_by_transport")
    if mbt is not None and not (isinstance(mbt, dict) and mbt and all(
            isinstance(k, str) and k and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            for k, v in mbt.items())):
        raise _err(path, f"checks.{check}.min_by_transport: expected a mapping of NCCL transport (IB, Socket, "
                         f"NET/IB/GDRDMA...) to a number >= 0", entry, "min_by_transport")
    for key in ("at_bytes", "fraction_of_datasheet"):
        val = entry.get(key)
        if val is not None and (isinstance(val, bool) or not isinstance(val, (int, float))):
            raise _err(path, f"checks.{check}.{key}: expected a number, got {shown(val)}", entry, key)
    return Limit(sku, check, direction, float(bound), unit, str(entry["source"]), entry.get("at_bytes"), mbw,
                 dict(mbt) if mbt else None)


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
