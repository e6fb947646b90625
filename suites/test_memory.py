"""memory layer: HBM read/write/copy bandwidth and pinned host<->device bandwidth, every GPU at once.

Probes: hbm_bandwidth, pcie_bandwidth. GB/s = 1e9 B/s throughout.
"""
import pytest

from gpuaccept.node import Node

pytestmark = pytest.mark.memory


def test_hbm_bandwidth(node: Node, gpus, sku, verdicts):
    """HBM read, write and copy GB/s per GPU, all GPUs loaded at once; each judged on the SKU's floor."""
    doc = node.probe("hbm_bandwidth", {"device": "cuda"})
    for kind in ("read", "write", "copy"):
        check = f"hbm_{kind}_bw_gbps"
        for g in doc["gpus"]:
            verdicts.record(check, g.get(f"{kind}_gbps"), "GB/s", gpu=g, limit=sku.checks.get(check),
                            extra={"method": (g.get("method") or {}).get(kind)})
    verdicts.finish()


def test_pcie_bandwidth(node: Node, gpus, sku, verdicts):
    """Pinned H2D and D2H GB/s per GPU, bound to the GPU's NUMA node; one GPU at a time and all at once."""
    doc = node.probe("pcie_bandwidth", {"device": "cuda", "mode": "both"})
    for g in doc["gpus"]:
        for d in ("h2d", "d2h"):
            verdicts.record(f"{d}_bw_gbps", g.get(f"{d}_gbps"), "GB/s", gpu=g, limit=sku.checks.get(f"{d}_bw_gbps"),
                            extra={"numa_node": g.get("numa_node")})
            verdicts.record(f"{d}_bw_all_gpus_gbps", g.get(f"{d}_gbps_all"), "GB/s", gpu=g)
    verdicts.finish()
