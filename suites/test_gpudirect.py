"""gpudirect layer: GPUDirect Storage (cuFile, nvidia-fs / P2PDMA, file <-> GPU GB/s) and GPUDirect RDMA
readiness (peer memory, InfiniBand/RoCE ports, GPU->NIC PCIe distance, ib_write_bw --use_cuda loopback).

Probes: gds, rdma. Inventory variables: ``gds_paths`` (default: the first of ``storage_paths``),
``gds_allow_compat`` (a GDS run in compat mode fails unless true), ``ib_hcas`` (expected RDMA device
names, e.g. ["mlx5_0", "mlx5_1"]), ``ib_rate_gbps`` (expected port rate, Gb/s as the kernel reports it),
``storage_limits.gds_read_gbps`` / ``gds_write_gbps`` (GB/s = 1e9 B/s floors).
"""
from __future__ import annotations

import pytest

from gpuaccept import storage_limits as sl
from gpuaccept.errors import ConfigError
from gpuaccept.node import Node
from gpuaccept.thresholds import Limit

pytestmark = pytest.mark.gpudirect


def test_gds(node: Node, gpus, verdicts):
    """cuFile and nvidia-fs/P2PDMA present; GPU -> file and file -> GPU GB/s through GdsFile beside the
    bounce-buffer path; data read back verified. compat mode fails unless ``gds_allow_compat: true``."""
    v = node.host.vars
    explicit = sl.path_list(v.get("gds_paths"), "gds_paths", node.name)
    paths = explicit or sl.path_list(v.get("storage_paths"), "storage_paths", node.name)[:1]
    allow_compat = sl.flag(v.get("gds_allow_compat"), "gds_allow_compat", node.name)
    limits = sl.storage_limits(v.get("storage_limits"), node.name)
    doc = node.probe("gds", {"path": paths[0]} if paths else {})
    stack = {k: doc.get(k) for k in ("cufile", "nvidia_fs", "p2pdma", "cufile_json", "allow_compat_mode", "torch_gds")}
    verdicts.record("gds_mode", doc.get("mode"), extra=stack)
    if not doc["cufile"]["found"] and not doc["nvidia_fs"]["loaded"] and not explicit:
        pytest.skip(f"GDS not installed on {node.name} (no libcufile.so, no nvidia-fs) and no gds_paths configured")
    if not doc["cufile"]["found"]:
        verdicts.fail("cuFile (libcufile.so) not found: not on the loader path, not in the nvidia-cufile wheel, "
                      "not in /usr/local/cuda*/lib64")
    if not paths:
        pytest.skip(f"GDS mode on {node.name}: {doc.get('mode')}; no gds_paths (or storage_paths) configured, "
                    "so no GDS transfer measured")
    if not doc.get("gpus"):
        verdicts.fail(f"GDS transfer not run: {doc.get('reason')}")
    for g in doc.get("gpus", []):
        if g.get("error"):
            verdicts.record("gds_read_gbps", None, "GB/s", gpu=g, extra={"error": g["error"]})
            verdicts.fail(g["error"], gpu=g)
            continue
        ex = {"bytes": g.get("bytes"), "bounce_read_gbps": g.get("bounce_read_gbps"), "mode": doc.get("mode"),
              "nvidia_fs_ops": g.get("nvidia_fs_ops"), "path": paths[0]}
        for d in ("read", "write"):
            lim = limits.get(f"gds_{d}_gbps")
            verdicts.record(f"gds_{d}_gbps", g.get(f"gds_{d}_gbps"), "GB/s", gpu=g, limit=lim,
                            extra=ex if lim else {**ex, "note": f"no limit configured (inventory var "
                                                                f"storage_limits.gds_{d}_gbps): recorded, not judged"})
        verdicts.record("bounce_read_gbps", g.get("bounce_read_gbps"), "GB/s", gpu=g)
        if not g.get("verified"):
            verdicts.fail("data read back through GDS differs from what was written", gpu=g)
    if doc.get("gpus") and doc.get("mode") == "compat" and not allow_compat:
        verdicts.fail("GDS ran in compat mode (no nvidia-fs, no P2PDMA): reads go through a bounce buffer; "
                      "set gds_allow_compat: true to accept")
    verdicts.finish()


def _rdma_doc(node: Node) -> dict:
    return node.cached_probe("rdma", {})


def _no_nic(node: Node, doc: dict) -> None:
    if not doc.get("devices"):
        if node.host.vars.get("ib_hcas"):
            pytest.fail(f"{node.name}: no InfiniBand/RoCE device found but the inventory declares "
                        f"ib_hcas={node.host.vars.get('ib_hcas')}", pytrace=False)
        pytest.skip(f"no InfiniBand/RoCE device on {node.name}")


def test_rdma_ports(node: Node, verdicts):
    """Every expected HCA (``ib_hcas``) present; every port ACTIVE and LinkUp at ``ib_rate_gbps``."""
    doc = _rdma_doc(node)
    _no_nic(node, doc)
    v = node.host.vars
    want = v.get("ib_hcas") or []
    rate = v.get("ib_rate_gbps")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))):
        raise ConfigError(f"{node.name}: inventory var ib_rate_gbps: expected a number (Gb/s), got {rate!r}")
    have = {d["name"]: d for d in doc["devices"]}
    missing = [h for h in want if h not in have]
    if missing:
        verdicts.fail(f"expected HCA(s) missing: {', '.join(missing)} (found: {', '.join(sorted(have))})")
    for d in doc["devices"]:
        if want and d["name"] not in want:
            verdicts.record(f"ib_port {d['name']}", "not in ib_hcas", extra=d)
            continue
        for p in d["ports"]:
            who = f"{d['name']} port {p['port']} ({p.get('link_layer')}, {d.get('pci_address')})"
            verdicts.record(f"ib_port {d['name']}/{p['port']}", p.get("state"), extra={**p, "pci_address": d.get("pci_address")})
            if not (p.get("state") or "").endswith("ACTIVE"):
                verdicts.fail(f"{who}: state {p.get('state')}")
            if not (p.get("phys_state") or "").endswith("LinkUp"):
                verdicts.fail(f"{who}: phys_state {p.get('phys_state')}")
            if rate is not None:
                lim = Limit("inventory", f"ib_rate_gbps {d['name']}/{p['port']}", "min", float(rate), "Gb/s",
                            "inventory var ib_rate_gbps")
                verdicts.record(f"ib_rate_gbps {d['name']}/{p['port']}", p.get("rate_gbps"), "Gb/s", limit=lim)
    verdicts.finish()


def test_gpudirect_rdma(node: Node, gpus, verdicts):
    """nvidia_peermem or dma-buf present; each GPU's nearest NIC behind a PCIe switch (PIX/PXB), not through
    the CPU root complex; ``ib_write_bw --use_cuda`` loopback per HCA when perftest is installed."""
    doc = _rdma_doc(node)
    _no_nic(node, doc)
    pm = doc["peermem"]
    verdicts.record("gpudirect_rdma_ready", pm["ready"], extra=pm)
    if not pm["ready"]:
        verdicts.fail("GPUDirect RDMA not ready: nvidia_peermem not loaded and no dma-buf support "
                      "(kernel dma-buf + NVIDIA open kernel module)")
    if doc.get("topology") is None:
        verdicts.record("gpu_nic_topology", None, extra={"reason": doc.get("topology_reason")})
    for row in doc.get("topology") or []:
        verdicts.record("nearest_nic", row.get("path"), gpu=row["gpu_index"], extra=row)
        if row.get("path") not in ("PIX", "PXB"):
            verdicts.fail(f"nearest NIC {row.get('nic')} is {row.get('path') or 'not found'}: traffic crosses the "
                          f"CPU root complex or socket (PIX/PXB expected)", gpu=row["gpu_index"])
    if not doc.get("perftest"):
        verdicts.record("ib_write_bw_loopback", "perftest not installed")
    else:
        lb = node.probe("rdma", {"perftest": True, "hcas": node.host.vars.get("ib_hcas") or []})
        for r in lb.get("loopback", []):
            verdicts.record(f"ib_write_bw_gbps {r['hca']}", r.get("bw_gbps"), "GB/s", gpu=r["gpu"], extra=r)
            if r.get("error"):
                verdicts.fail(f"ib_write_bw --use_cuda loopback on {r['hca']}: {r['error']}", gpu=r["gpu"])
    verdicts.finish()
