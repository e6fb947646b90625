"""Sanity of every ``thresholds/<sku>.yaml``, and of the loader's error messages.

Table-driven per file: each file loads, its sku equals its stem, every performance floor sits strictly
below the datasheet peak it relates to and above 0.4 x that peak (catches unit slips such as an HBM floor
written in MB/s), the ``fraction_of_datasheet`` written matches bound / peak, the datasheet's own figures
agree with each other (fp8 = 2 x bf16, fp16 = bf16, tf32 = bf16 / 2), every check cites a source, and
``detect_sku`` picks the file from its own NVML name and memory (and no other file can match the same
reading). Negative tests write broken files to a temp dir and expect a one-line ThresholdError that
names the file and the offending key (or file:line for YAML syntax errors).
"""
from __future__ import annotations

import copy
import functools
import glob
import os
import re
from pathlib import Path

import pytest
import yaml

from gpuaccept.errors import ThresholdError
from gpuaccept.judging.sku import detect_sku
from gpuaccept.config.thresholds import CHECKS, EXPECT_KEYS, SkuSpec, load_all, load_sku_file
from gpuaccept.config.yamlload import load_file  # the product's loader, which refuses duplicate keys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THRESHOLD_DIR = os.path.join(ROOT, "thresholds")
FILES = sorted(glob.glob(os.path.join(THRESHOLD_DIR, "*.yaml")) + glob.glob(os.path.join(THRESHOLD_DIR, "*.yml")))
FILE_IDS = [os.path.basename(p) for p in FILES]
GIB = 2**30

# SKUs the suite is expected to ship (the foundation issue names h100-sxm5-80gb).
EXPECTED_SKUS = {
    "h200-sxm-141gb", "h100-sxm5-80gb", "h100-pcie-80gb", "h100-nvl-94gb", "h200-nvl-141gb",
    "a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-80gb", "gh200-96gb", "gh200-144gb", "b200-180gb",
    "l40s-48gb", "l4-24gb", "a10g-24gb",
}

# Keys every file's expect block must set (the suite decides what applies from them).
REQUIRED_EXPECT = {
    "gpus_per_node", "nvlink_links", "nvswitch", "mig_mode", "fp8", "fp64_tensor", "ecc", "row_remapping",
    "required_nvml", "nccl_transport",
}
# Health checks every SKU must carry.
REQUIRED_HEALTH = {
    "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "temp_c", "launch_overhead_us",
    "below_node_median_pct",
}
NVLINK_CHECKS = {"nvlink_active_links", "p2p_unidir_bw_gbps", "p2p_bidir_bw_gbps", "allreduce_busbw_gbps"}


def _host_link_each_way(ds: dict) -> tuple[str, float | None]:
    """Peak host<->GPU rate each way: NVLink-C2C on Grace Hopper, else PCIe."""
    if "c2c_gbps" in ds:
        return "c2c_gbps / 2", ds["c2c_gbps"] / 2
    return "pcie_gbps_each_way", ds.get("pcie_gbps_each_way")


def _p2p_pair(ds: dict) -> tuple[str, float | None]:
    """Bidirectional NVLink peak between two GPUs (per-peer figure where bridges split the links)."""
    if "nvlink_gbps_per_peer" in ds:
        return "nvlink_gbps_per_peer", ds["nvlink_gbps_per_peer"]
    return "nvlink_gbps", ds.get("nvlink_gbps")


# performance check -> how to find the datasheet peak it is a fraction of: (label, value or None)
PERF_REFERENCE = {
    "hbm_read_bw_gbps": lambda ds: ("hbm_bw_gbps", ds.get("hbm_bw_gbps")),
    "hbm_write_bw_gbps": lambda ds: ("hbm_bw_gbps", ds.get("hbm_bw_gbps")),
    "hbm_copy_bw_gbps": lambda ds: ("hbm_bw_gbps", ds.get("hbm_bw_gbps")),
    "h2d_bw_gbps": _host_link_each_way,
    "d2h_bw_gbps": _host_link_each_way,
    "bf16_tflops": lambda ds: ("bf16_tflops", ds.get("bf16_tflops")),
    "fp16_tflops": lambda ds: ("fp16_tflops", ds.get("fp16_tflops")),
    "tf32_tflops": lambda ds: ("tf32_tflops", ds.get("tf32_tflops")),
    "fp8_tflops": lambda ds: ("fp8_tflops", ds.get("fp8_tflops")),
    "fp64_tflops": lambda ds: ("fp64_tflops", ds.get("fp64_tflops")),
    "p2p_unidir_bw_gbps": lambda ds: (f"{_p2p_pair(ds)[0]} / 2",
                                      None if _p2p_pair(ds)[1] is None else _p2p_pair(ds)[1] / 2),
    "p2p_bidir_bw_gbps": _p2p_pair,
}
assert set(PERF_REFERENCE) <= set(CHECKS)


@functools.lru_cache(maxsize=None)
def _raw(path: str) -> dict:
    """The file as plain YAML (for what SkuSpec does not keep, e.g. fraction_of_datasheet). Do not mutate."""
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506


@functools.lru_cache(maxsize=None)
def _spec(path: str) -> SkuSpec:
    return load_sku_file(path)


def _perf_cases() -> list:
    cases = []
    for path in FILES:
        try:
            doc = _raw(path)
        except (OSError, yaml.YAMLError):
            doc = None  # test_file_loads_and_sku_is_stem reports the file
        checks = doc.get("checks") if isinstance(doc, dict) else None
        checks = checks if isinstance(checks, dict) else {}
        for check in sorted(checks):
            if check in PERF_REFERENCE:
                cases.append(pytest.param(path, check, id=f"{os.path.basename(path)}::{check}"))
    return cases


@pytest.fixture(scope="module")
def specs() -> dict[str, SkuSpec]:
    return load_all(THRESHOLD_DIR)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# ---------------------------------------------------------------------------------------------- per file

def test_threshold_files_present():
    stems = {os.path.splitext(os.path.basename(p))[0] for p in FILES}
    assert EXPECTED_SKUS <= stems, f"missing threshold files: {sorted(EXPECTED_SKUS - stems)}"


@pytest.mark.parametrize("path", FILES, ids=FILE_IDS)
def test_file_loads_and_sku_is_stem(path):
    spec = load_sku_file(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    assert spec.sku == stem
    assert _raw(path)["sku"] == stem
    assert spec.name and spec.name != stem, "give the file a human-readable name"




@pytest.mark.parametrize("path", FILES, ids=FILE_IDS)
def test_no_duplicate_keys(path):
    load_file(path, ThresholdError)


@pytest.mark.parametrize("path", FILES, ids=FILE_IDS)
def test_detect_block(path):
    d = _raw(path)["detect"]
    names = d.get("nvml_names")
    assert isinstance(names, list) and names, "detect.nvml_names must be a non-empty list"
    for n in names:
        assert isinstance(n, str) and n.startswith("NVIDIA ") and n == n.strip(), f"odd NVML name {n!r}"
    lo_hi = d.get("memory_gib")
    assert isinstance(lo_hi, list) and len(lo_hi) == 2 and all(_is_number(x) for x in lo_hi), lo_hi
    lo, hi = lo_hi
    assert 0 < lo < hi, lo_hi
    # The NVML total (GiB) sits a little under the marketed size in GB; a 40/80 swap or a MiB slip fails here.
    mem_gb = _raw(path)["datasheet"]["memory_gb"]
    assert lo < mem_gb * 1.08 and hi > mem_gb * 0.85, f"memory_gib {lo_hi} does not bracket {mem_gb} GB"
    assert hi - lo <= 0.15 * hi, f"memory_gib {lo_hi} is too wide to tell SKUs apart"
    for pid in d.get("pci_device_ids", []):
        assert isinstance(pid, str) and re.fullmatch(r"0x[0-9a-f]{4}10de", pid), \
            f"pci id {pid!r}: want nvmlPciInfo pciDeviceId as 0x<device>10de, lower case"


@pytest.mark.parametrize("path", FILES, ids=FILE_IDS)
def test_datasheet_block(path):
    ds = _raw(path)["datasheet"]
    assert isinstance(ds.get("source"), str) and len(ds["source"].strip()) >= 20, "datasheet.source: name the edition"
    for key in ("memory_gb", "hbm_bw_gbps", "bf16_tflops", "fp16_tflops", "tf32_tflops"):
        assert key in ds, f"datasheet.{key} missing"
    label, host = _host_link_each_way(ds)
    assert host is not None, "datasheet needs pcie_gbps_each_way (or c2c_gbps on Grace Hopper)"
    for key, value in ds.items():
        if key != "source":
            assert _is_number(value) and value > 0, f"datasheet.{key}: expected a positive number, got {value!r}"


@pytest.mark.parametrize("path", FILES, ids=FILE_IDS)
def test_datasheet_ratios(path):
    ds = _raw(path)["datasheet"]
    bf16 = ds["bf16_tflops"]
    assert ds["fp16_tflops"] == pytest.approx(bf16, rel=0.10), "fp16 should equal bf16 (dense)"
    assert ds["tf32_tflops"] == pytest.approx(bf16 / 2, rel=0.10), "tf32 should be half of bf16 (dense)"
    if "fp8_tflops" in ds:
        assert ds["fp8_tflops"] == pytest.approx(2 * bf16, rel=0.10), "fp8 should be twice bf16 (dense)"
    if "fp64_tflops" in ds:
        assert ds["fp64_tflops"] < ds["tf32_tflops"], "fp64 above tf32: sparse/dense or unit slip?"


@pytest.mark.parametrize("path", FILES, ids=FILE_IDS)
def test_every_check_cites_a_source(path):
    for check, entry in (_raw(path).get("checks") or {}).items():
        src = entry.get("source")
        assert isinstance(src, str) and len(src.strip()) >= 20, f"checks.{check}.source too short: {src!r}"


@pytest.mark.parametrize("path,check", _perf_cases())
def test_performance_floor_against_datasheet(path, check):
    raw = _raw(path)
    ds, entry = raw["datasheet"], raw["checks"][check]
    label, peak = PERF_REFERENCE[check](ds)
    assert peak is not None, f"checks.{check} has no datasheet figure to relate to (datasheet.{label})"
    bound = _spec(path).limit(check).bound
    assert bound < peak, f"{check} floor {bound} is not below the datasheet peak {peak} ({label})"
    assert bound > 0.4 * peak, f"{check} floor {bound} is under 0.4 x {peak} ({label}): unit slip?"
    frac = entry.get("fraction_of_datasheet")
    assert _is_number(frac), f"checks.{check}.fraction_of_datasheet missing"
    assert frac == pytest.approx(bound / peak, abs=0.02), \
        f"checks.{check}.fraction_of_datasheet {frac} but {bound}/{peak} = {bound / peak:.3f}"
    stated = re.search(r"floor = ([0-9.]+) x", entry["source"])
    if stated:
        assert float(stated.group(1)) == pytest.approx(bound / peak, abs=0.02), \
            f"checks.{check}.source says floor = {stated.group(1)} x, but {bound}/{peak} = {bound / peak:.3f}"


ALLREDUCE_FILES = [p for p in FILES if "allreduce_busbw_gbps:" in open(p, encoding="utf-8").read()]


def test_every_nvswitch_sku_has_an_allreduce_floor():
    for path in FILES:
        raw = _raw(path)
        if (raw.get("expect") or {}).get("nvswitch"):
            assert path in ALLREDUCE_FILES, f"{path}: NVSwitch SKU without allreduce_busbw_gbps"


@pytest.mark.parametrize("path", ALLREDUCE_FILES, ids=[os.path.basename(p) for p in ALLREDUCE_FILES])
def test_allreduce_floor(path):
    raw = _raw(path)
    entry = raw["checks"]["allreduce_busbw_gbps"]
    ds, expect = raw["datasheet"], raw["expect"]
    assert expect["nvlink_links"] > 0, "all-reduce floor given for a SKU with no NVLink"
    assert entry.get("at_bytes") == 4294967296, "all-reduce floor is defined at 4 GiB"
    ceiling = ds["nvlink_gbps"] / 2  # ring busbw cannot exceed one direction of the GPU's NVLink
    mbw = entry.get("min_by_world_size") or {}
    assert set(mbw) <= {2, 4, 8} and mbw, f"min_by_world_size keys {sorted(mbw)}"
    for n, v in [("base", entry["min"])] + sorted(mbw.items()):
        assert _is_number(v) and 0 < v < ceiling, f"all-reduce floor {v} (world {n}) vs {ceiling} GB/s per direction"
    spec = _spec(path)
    for n, v in mbw.items():
        assert spec.limit("allreduce_busbw_gbps").for_world_size(n).bound == v


@pytest.mark.parametrize("path", FILES, ids=FILE_IDS)
def test_expect_agrees_with_checks_and_datasheet(path):
    raw = _raw(path)
    expect, ds, checks = raw["expect"], raw["datasheet"], raw.get("checks") or {}
    missing = REQUIRED_EXPECT - set(expect)
    assert not missing, f"expect lacks {sorted(missing)}"
    assert set(expect) <= EXPECT_KEYS
    assert isinstance(expect["gpus_per_node"], int) and expect["gpus_per_node"] >= 1
    for key in ("nvswitch", "mig_mode", "fp8", "fp64_tensor", "ecc", "row_remapping"):
        assert isinstance(expect[key], bool), f"expect.{key} must be true/false"
    assert expect["nccl_transport"] in {"P2P", "SHM", "NET"}
    assert isinstance(expect["required_nvml"], list) and expect["required_nvml"]
    missing = REQUIRED_HEALTH - set(checks)
    assert not missing, f"health checks missing: {sorted(missing)}"
    if expect["row_remapping"]:
        assert "remapped_rows_uncorrectable" in checks
    # fp8 / fp64
    assert expect["fp8"] == ("fp8_tflops" in ds), "expect.fp8 and datasheet.fp8_tflops disagree"
    if "fp8_tflops" in checks:
        assert expect["fp8"]
    if "fp64_tflops" in checks:
        assert "fp64_tflops" in ds
    if expect["fp64_tensor"]:
        assert "fp64_tflops" in checks, "an FP64-tensor SKU should check fp64_tflops"
    # PCIe
    if "pcie_gen" in expect or "pcie_gen" in checks:
        assert checks["pcie_gen"]["min"] == expect["pcie_gen"]
        assert checks["pcie_width"]["min"] == expect["pcie_width"]
        assert ds["pcie_gbps_each_way"] == pytest.approx({3: 16, 4: 32, 5: 64, 6: 128}[expect["pcie_gen"]]
                                                         * expect["pcie_width"] / 16)
    else:
        assert "c2c_gbps" in ds, "only a C2C-attached GPU may leave out the PCIe expectations"
    # NVLink
    links = expect["nvlink_links"]
    assert isinstance(links, int) and links >= 0
    if links == 0:
        assert not (NVLINK_CHECKS & set(checks)), f"NVLink checks on a SKU without NVLink: {NVLINK_CHECKS & set(checks)}"
        assert expect["nvswitch"] is False
    else:
        assert checks["nvlink_active_links"]["min"] == links
        assert "nvlink_gbps" in ds
        assert {"p2p_unidir_bw_gbps", "p2p_bidir_bw_gbps", "allreduce_busbw_gbps"} <= set(checks)
        assert expect["nccl_transport"] == "P2P"
        assert checks["p2p_bidir_bw_gbps"]["min"] > checks["p2p_unidir_bw_gbps"]["min"]


@pytest.mark.parametrize("path", FILES, ids=FILE_IDS)
def test_detect_sku_picks_this_file(path, specs):
    spec = _spec(path)
    lo, hi = spec.detect["memory_gib"]
    mid = int((lo + hi) / 2 * GIB)
    ids = spec.detect.get("pci_device_ids") or [None]
    for name in spec.detect["nvml_names"]:
        for pci in ids + [None]:
            assert detect_sku(specs, name, mid, pci).sku == spec.sku
        assert detect_sku(specs, name.lower(), None).sku == spec.sku  # name alone, case-insensitive
        assert detect_sku(specs, f"  {name} ", mid).sku == spec.sku  # stray whitespace from NVML


def test_no_two_skus_can_match_one_reading(specs):
    items = sorted(specs.values(), key=lambda s: s.sku)
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            names = {n.lower() for n in a.detect["nvml_names"]} & {n.lower() for n in b.detect["nvml_names"]}
            if not names:
                continue
            (alo, ahi), (blo, bhi) = a.detect["memory_gib"], b.detect["memory_gib"]
            mem_overlap = alo <= bhi and blo <= ahi
            aids = {x.lower() for x in a.detect.get("pci_device_ids", [])}
            bids = {x.lower() for x in b.detect.get("pci_device_ids", [])}
            # detect_sku ignores the PCI id when the reading has none, so only disjoint memory separates them.
            assert not mem_overlap, (f"{a.sku} and {b.sku} share NVML name(s) {sorted(names)} and overlapping "
                                     f"memory ranges; detect_sku would raise (pci ids {sorted(aids)} / {sorted(bids)})")


# Readings seen on real cards (nvidia-smi memory.total / cuDeviceTotalMem), with the SKU they must map to.
REAL_READINGS = [
    ("NVIDIA H200", 150754820096, "0x233510de", "h200-sxm-141gb"),     # shared/data/h200-1gpu-nvml.json
    ("NVIDIA H200 NVL", 143771 * 2**20, "0x233b10de", "h200-nvl-141gb"),
    ("NVIDIA H100 80GB HBM3", 81559 * 2**20, "0x233010de", "h100-sxm5-80gb"),
    ("NVIDIA H100 PCIe", 81559 * 2**20, "0x233110de", "h100-pcie-80gb"),
    ("NVIDIA H100 NVL", 95830 * 2**20, "0x232110de", "h100-nvl-94gb"),
    ("NVIDIA A100-SXM4-40GB", 40960 * 2**20, "0x20b010de", "a100-sxm4-40gb"),
    ("NVIDIA A100-SXM4-80GB", 81920 * 2**20, "0x20b210de", "a100-sxm4-80gb"),
    ("NVIDIA A100 80GB PCIe", 81920 * 2**20, "0x20b510de", "a100-pcie-80gb"),
    ("NVIDIA GH200 480GB", 97871 * 2**20, "0x234210de", "gh200-96gb"),
    ("NVIDIA GH200 120GB", 97871 * 2**20, "0x234210de", "gh200-96gb"),
    ("NVIDIA GH200 144G HBM3e", 153008209920, "0x234810de", "gh200-144gb"),
    ("NVIDIA B200", 183359 * 2**20, "0x290110de", "b200-180gb"),
    ("NVIDIA L40S", 46068 * 2**20, "0x26b910de", "l40s-48gb"),
    ("NVIDIA L4", 23034 * 2**20, "0x27b810de", "l4-24gb"),
    ("NVIDIA A10G", 23028 * 2**20, "0x223710de", "a10g-24gb"),
]


@pytest.mark.parametrize("name,mem,pci,sku", REAL_READINGS, ids=[r[3] + ":" + r[0] for r in REAL_READINGS])
def test_detect_sku_on_real_readings(specs, name, mem, pci, sku):
    assert detect_sku(specs, name, mem, pci).sku == sku
    assert detect_sku(specs, name, mem, pci.upper().replace("0X", "0x")).sku == sku


def test_h100_sxm5_is_complete(specs):
    h100, h200 = specs["h100-sxm5-80gb"], specs["h200-sxm-141gb"]
    assert set(h100.checks) == set(h200.checks)
    assert set(h100.expect) == set(h200.expect)
    assert set(h100.datasheet) == set(h200.datasheet)


# ---------------------------------------------------------------------------------------------- negative

BASE_DOC = {
    "sku": "test-sku",
    "name": "Test SKU",
    "detect": {"nvml_names": ["NVIDIA Test"], "memory_gib": [10, 12], "pci_device_ids": ["0x000010de"]},
    "expect": {"pcie_gen": 5, "nvlink_links": 0},
    "datasheet": {"source": "a made-up datasheet for the loader tests", "hbm_bw_gbps": 1000},
    "checks": {
        "hbm_read_bw_gbps": {"min": 850, "unit": "GB/s", "fraction_of_datasheet": 0.85,
                             "source": "floor = 0.85 x datasheet 1000 GB/s"},
        "temp_c": {"max": 85, "unit": "C", "source": "made-up fleet action level"},
        "allreduce_busbw_gbps": {"min": 100, "at_bytes": 4294967296, "min_by_world_size": {2: 110},
                                 "unit": "GB/s", "source": "made-up all-reduce floor"},
        "internode_pair_busbw_gbps": {"min": 5, "min_by_transport": {"IB": 40, "NET/IB/GDRDMA": 80, "Socket": 2},
                                      "unit": "GB/s", "source": "made-up inter-node pair floors"},
    },
}


def _write(tmp_path, doc, stem="test-sku"):
    path = tmp_path / f"{stem}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return str(path)


def _mutated(fn):
    doc = copy.deepcopy(BASE_DOC)
    fn(doc)
    return doc


def test_base_doc_loads(tmp_path):
    spec = load_sku_file(_write(tmp_path, BASE_DOC))
    assert spec.limit("hbm_read_bw_gbps").bound == 850
    assert spec.limit("allreduce_busbw_gbps").for_world_size(2).bound == 110
    pair = spec.limit("internode_pair_busbw_gbps")
    assert [pair.for_transport(t).bound for t in ("IB", "NET/IB/GDRDMA", "Socket", "RoCE", None)] == [40, 80, 2, 5, 5]


def _set(d, keys, value):
    for k in keys[:-1]:
        d = d[k]
    d[keys[-1]] = value


def _del(d, keys):
    for k in keys[:-1]:
        d = d[k]
    del d[keys[-1]]


def _rename_check(old, new):
    def fn(doc):
        doc["checks"][new] = doc["checks"].pop(old)
    return fn


BAD_DOCS = [
    ("mistyped check key", _rename_check("hbm_read_bw_gbps", "hbm_raed_bw_gbps"), ["hbm_raed_bw_gbps"]),
    ("wrong unit", lambda d: _set(d, ["checks", "hbm_read_bw_gbps", "unit"], "MB/s"),
     ["hbm_read_bw_gbps", "unit", "MB/s"]),
    ("missing unit", lambda d: _del(d, ["checks", "hbm_read_bw_gbps", "unit"]), ["hbm_read_bw_gbps", "unit"]),
    ("missing source", lambda d: _del(d, ["checks", "hbm_read_bw_gbps", "source"]), ["hbm_read_bw_gbps", "source"]),
    ("empty source", lambda d: _set(d, ["checks", "temp_c", "source"], ""), ["temp_c", "source"]),
    ("bool bound", lambda d: _set(d, ["checks", "hbm_read_bw_gbps", "min"], True), ["hbm_read_bw_gbps", "min"]),
    ("string bound", lambda d: _set(d, ["checks", "hbm_read_bw_gbps", "min"], "850"), ["hbm_read_bw_gbps", "min"]),
    ("max on a min check", lambda d: _set(d, ["checks", "hbm_read_bw_gbps", "max"], 900),
     ["hbm_read_bw_gbps", "min"]),
    ("min on a max check",
     lambda d: d["checks"].update(temp_c={"min": 85, "unit": "C", "source": "made-up fleet action level"}),
     ["temp_c", "max"]),
    ("unknown check field", lambda d: _set(d, ["checks", "hbm_read_bw_gbps", "fraction"], 0.85),
     ["checks.hbm_read_bw_gbps.fraction"]),
    ("check not a mapping", lambda d: _set(d, ["checks", "temp_c"], 85), ["temp_c"]),
    ("world sizes as strings", lambda d: _set(d, ["checks", "allreduce_busbw_gbps", "min_by_world_size"], {"2": 110}),
     ["allreduce_busbw_gbps", "min_by_world_size"]),
    ("transport floors as a list", lambda d: _set(d, ["checks", "internode_pair_busbw_gbps", "min_by_transport"],
                                                  [40, 2]), ["internode_pair_busbw_gbps", "min_by_transport"]),
    ("transport floor not a number", lambda d: _set(d, ["checks", "internode_pair_busbw_gbps", "min_by_transport"],
                                                    {"IB": "40"}), ["min_by_transport", "NCCL transport"]),
    ("unknown top-level key", lambda d: _set(d, ["thresholds"], {}), ["thresholds"]),
    ("unknown expect key", lambda d: _set(d, ["expect", "nvlinks"], 18), ["expect.nvlinks"]),
    ("unknown detect key", lambda d: _set(d, ["detect", "pci_ids"], ["0x233510de"]), ["detect.pci_ids"]),
    ("sku differs from stem", lambda d: _set(d, ["sku"], "other-sku"), ["other-sku", "test-sku"]),
]


# the text of the line each error must name: the bad key's own line, or the check's line for a missing key
BAD_DOC_LINES = {
    "mistyped check key": "hbm_raed_bw_gbps:", "wrong unit": "unit: MB/s", "missing unit": "hbm_read_bw_gbps:",
    "missing source": "hbm_read_bw_gbps:", "empty source": "source: ''", "bool bound": "min: true",
    "string bound": "min: '850'", "max on a min check": "hbm_read_bw_gbps:", "min on a max check": "temp_c:",
    "unknown check field": "fraction:", "check not a mapping": "temp_c: 85",
    "world sizes as strings": "min_by_world_size:", "unknown top-level key": "thresholds:",
    "transport floors as a list": "min_by_transport:", "transport floor not a number": "min_by_transport:",
    "unknown expect key": "nvlinks:", "unknown detect key": "pci_ids:", "sku differs from stem": "sku: other-sku",
}


@pytest.mark.parametrize("label,mutate,fragments", BAD_DOCS, ids=[b[0] for b in BAD_DOCS])
def test_bad_file_raises_one_line_error_naming_file_and_key(tmp_path, label, mutate, fragments):
    path = _write(tmp_path, _mutated(mutate))
    with pytest.raises(ThresholdError) as info:
        load_sku_file(path)
    msg = str(info.value)
    assert "\n" not in msg, f"message is not one line: {msg!r}"
    m = re.match(re.escape(path) + r":(\d+): ", msg)
    assert m, f"message does not name file:line: {msg!r}"
    line = Path(path).read_text().splitlines()[int(m.group(1)) - 1]
    assert line.strip().startswith(BAD_DOC_LINES[label]), f"line {m.group(1)} is {line!r}: {msg}"
    for frag in fragments:
        assert frag in msg, f"message does not name {frag!r}: {msg!r}"


YAML_ERRORS = [
    # (label, text, first line, last line the error may be reported on)
    ("mapping value inside a plain scalar",
     "sku: test-sku\nname: Test SKU\ndetect:\n  nvml_names: NVIDIA: Test\n", 4, 4),
    ("tab indentation", "sku: test-sku\nname: Test SKU\nexpect:\n\tpcie_gen: 5\n", 4, 4),
    # PyYAML's problem_mark for an unclosed quote is where the stream ended (line 4 here), not the line
    # that opened the quote (2); the loader reports problem_mark, so accept anything from 2 to the end.
    ("unclosed quote", 'sku: test-sku\nname: "Test SKU\nexpect: {}\n', 2, 4),
]


@pytest.mark.parametrize("label,text,first,last", YAML_ERRORS, ids=[y[0] for y in YAML_ERRORS])
def test_yaml_syntax_error_names_file_and_line(tmp_path, label, text, first, last):
    path = tmp_path / "test-sku.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ThresholdError) as info:
        load_sku_file(str(path))
    msg = str(info.value)
    assert "\n" not in msg, f"message is not one line: {msg!r}"
    m = re.match(re.escape(str(path)) + r":(\d+): YAML error: \S", msg)
    assert m, f"want '<file>:<line>: YAML error: <problem>', got {msg!r}"
    assert first <= int(m.group(1)) <= last, f"error reported on line {m.group(1)}, expected {first}..{last}: {msg}"


def test_top_level_not_a_mapping(tmp_path):
    path = tmp_path / "test-sku.yaml"
    path.write_text("- just\n- a list\n", encoding="utf-8")
    with pytest.raises(ThresholdError, match="mapping") as info:
        load_sku_file(str(path))
    assert str(path) in str(info.value)


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.yaml")
    with pytest.raises(ThresholdError) as info:
        load_sku_file(path)
    assert path in str(info.value) and "\n" not in str(info.value)


def test_limit_for_missing_check_raises(tmp_path):
    spec = load_sku_file(_write(tmp_path, BASE_DOC))
    with pytest.raises(ThresholdError, match="fp8_tflops"):
        spec.limit("fp8_tflops")


def test_detect_sku_unknown_name_lists_known_skus(specs):
    with pytest.raises(ThresholdError) as info:
        detect_sku(specs, "Tesla V100-SXM2-32GB", 32 * GIB)
    msg = str(info.value)
    assert "\n" not in msg
    assert "Tesla V100-SXM2-32GB" in msg
    for sku in specs:
        assert sku in msg, f"known SKU {sku} not listed: {msg}"


def test_detect_sku_known_name_wrong_memory(specs):
    with pytest.raises(ThresholdError) as info:
        detect_sku(specs, "NVIDIA H100 80GB HBM3", 40 * GIB)
    assert "NVIDIA H100 80GB HBM3" in str(info.value) and "40.0 GiB" in str(info.value)


def test_detect_sku_known_name_wrong_pci_id(specs):
    with pytest.raises(ThresholdError, match="NVIDIA H100 80GB HBM3"):
        detect_sku(specs, "NVIDIA H100 80GB HBM3", 81559 * 2**20, "0x233110de")


def test_detect_sku_ambiguous(tmp_path):
    a = load_sku_file(_write(tmp_path, BASE_DOC, "test-sku"))
    doc_b = copy.deepcopy(BASE_DOC)
    doc_b["sku"] = "test-sku-b"
    b = load_sku_file(_write(tmp_path, doc_b, "test-sku-b"))
    with pytest.raises(ThresholdError) as info:
        detect_sku({a.sku: a, b.sku: b}, "NVIDIA Test", 11 * GIB)
    msg = str(info.value)
    assert "several" in msg and "test-sku" in msg and "test-sku-b" in msg


# ---------------------------------------------------------------------------------------------- loader (gpuaccept.config.yamlload)

def _base_text() -> str:
    return yaml.safe_dump(BASE_DOC, sort_keys=False)


LOADER_ERRORS = [
    # (label, how the base file's text is altered, line the message names, fragment)
    ("inf bound", lambda t: t.replace("min: 850", "min: .inf"), "not a finite number"),
    ("minus inf bound", lambda t: t.replace("max: 85", "max: -.inf"), "not a finite number"),
    ("nan bound", lambda t: t.replace("min: 850", "min: .nan"), "not a finite number"),
    ("overflowing bound", lambda t: t.replace("min: 850", "min: 1.0e+999"), "not a finite number"),
    ("duplicate check", lambda t: t + "  temp_c:\n    max: 95\n    unit: C\n    source: again\n", "written twice"),
    ("duplicate field", lambda t: t.replace("    max: 85\n", "    max: 85\n    max: 99\n"), "written twice"),
    ("control character", lambda t: t.replace("Test SKU", "Test\x07SKU"), "control character U+0007"),
    ("deep nesting", lambda t: t + "notes: " + "[" * 300 + "]" * 300 + "\n", "nested deeper than"),
    ("alias bomb", lambda t: t + "notes:\n" + "".join(
        f"  {c}: &{c} [" + ", ".join([f"*{p}"] * 12 if p else ["x"] * 12) + "]\n"
        for p, c in zip([None, "a", "b", "c", "d", "e", "f"], "abcdefg")), "alias bomb"),
    ("huge integer", lambda t: t.replace("min: 850", "min: " + "9" * 5000), "too many digits"),
]


@pytest.mark.parametrize("label,alter,fragment", LOADER_ERRORS, ids=[e[0] for e in LOADER_ERRORS])
def test_loader_refuses_with_file_and_line(tmp_path, label, alter, fragment):
    text = alter(_base_text())
    path = tmp_path / "test-sku.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ThresholdError) as info:
        load_sku_file(str(path))
    msg = str(info.value)
    assert "\n" not in msg and fragment in msg, msg
    m = re.match(re.escape(str(path)) + r":(\d+): ", msg)
    assert m and 1 <= int(m.group(1)) <= text.count("\n") + 1, msg


def test_non_utf8_byte_names_its_line(tmp_path):
    path = tmp_path / "test-sku.yaml"
    data = _base_text().encode().replace(b"Test SKU", b"Test \xff SKU")
    path.write_bytes(data)
    line = data[: data.index(b"\xff")].count(b"\n") + 1
    with pytest.raises(ThresholdError, match=re.escape(f"{path}:{line}: not UTF-8")):
        load_sku_file(str(path))


def test_section_of_the_wrong_shape(tmp_path):
    path = tmp_path / "test-sku.yaml"
    for section, value in (("checks", "[1, 2]"), ("detect", "5"), ("expect", "text")):
        doc = {**BASE_DOC, section: yaml.safe_load(value)}
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        with pytest.raises(ThresholdError, match=f"{section}: expected a mapping"):
            load_sku_file(str(path))


def test_every_check_key_has_its_row_in_the_docs():
    """docs/checks.md "Every check key" lists each key of the registry (the refusal of an unknown key lists them
    too), with its layer, bound and unit as the registry has them."""
    import re
    from pathlib import Path

    from gpuaccept.config.thresholds import REGISTRY
    text = (Path(__file__).resolve().parents[1] / "docs" / "checks.md").read_text()
    section = text[text.index("## Every check key"):]
    section = section[:section.index("\n## ", 4)] if "\n## " in section[4:] else section
    rows = {}  # a row may name several keys: | `bf16_tflops`, `fp16_tflops` | compute | ...
    for m in re.finditer(r"^\| ((?:`[a-z0-9_]+`(?:, )?)+) \|(.*)\|$", section, re.M):
        for key in re.findall(r"`([a-z0-9_]+)`", m.group(1)):
            rows[key] = [c.strip() for c in m.group(2).split("|")]
    assert sorted(set(REGISTRY) - set(rows)) == []
    for key, check in REGISTRY.items():
        layer, bound, unit = rows[key][:3]
        assert (layer, bound, unit) == (check.layer, check.direction, check.unit), (key, rows[key])
