"""memory layer: HBM read/write/copy bandwidth and pinned host<->device bandwidth, every GPU at once.

Probes: hbm_bandwidth, pcie_bandwidth. GB/s = 1e9 B/s throughout. Every NVML GPU must be measured; a check
the SKU file sets a limit for and the probe did not measure is an error.
"""
import pytest

from gpuaccept.runner.host import HostRunner
from gpuaccept.judging.readings import number, typed

pytestmark = pytest.mark.memory

HBM_DIRECTION = {"read": "device memory read", "write": "device memory write",
                 "copy": "device memory copy, read + write bytes"}


def test_hbm_bandwidth(node: HostRunner, gpus, sku, verdicts):
    """HBM read, write and copy GB/s per GPU, all GPUs loaded at once; each judged on the SKU's floor."""
    doc = typed(node.probe("hbm_bandwidth", {"device": "cuda"}))
    measured = doc.get("gpus") or []
    verdicts.expect_gpus(gpus, measured, "hbm_bandwidth")
    size = f"{doc['bytes'] / 2**30:g} GiB buffers" if number(doc.get("bytes")) else "buffer size unknown"
    for kind in ("read", "write", "copy"):
        check = f"hbm_{kind}_bw_gbps"
        limit = sku.limit(check)
        for g in measured:
            method = (g.get("method") or {}).get(kind)
            errs = {k: v for k, v in (g.get("errors") or {}).items() if k.startswith(kind)}
            verdicts.record(check, g.get(f"{kind}_gbps"), "GB/s", gpu=g, limit=limit,
                            context=f"{HBM_DIRECTION[kind]}, {size}, all GPUs loaded"
                                    + (f"; probe errors: {errs}" if errs and g.get(f"{kind}_gbps") is None else ""),
                            extra={"method": method})


def test_pcie_bandwidth(node: HostRunner, gpus, sku, verdicts):
    """Pinned H2D and D2H GB/s per GPU, bound to the GPU's NUMA node; one GPU at a time and all at once."""
    doc = typed(node.probe("pcie_bandwidth", {"device": "cuda", "mode": "both"}))
    measured = doc.get("gpus") or []
    verdicts.expect_gpus(gpus, measured, "pcie_bandwidth")
    names = {"h2d": "host to device", "d2h": "device to host"}
    for g in measured:
        for d in ("h2d", "d2h"):
            verdicts.record(f"{d}_bw_gbps", g.get(f"{d}_gbps"), "GB/s", gpu=g, limit=sku.limit(f"{d}_bw_gbps"),
                            context=f"pinned {names[d]}, one GPU at a time", extra={"numa_node": g.get("numa_node")})
            verdicts.record(f"{d}_bw_all_gpus_gbps", g.get(f"{d}_gbps_all"), "GB/s", gpu=g)
