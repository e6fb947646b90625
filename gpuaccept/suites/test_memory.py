"""memory layer: HBM read/write/copy bandwidth and pinned host<->device bandwidth, every GPU at once.

Probes: hbm_bandwidth, pcie_bandwidth. GB/s = 1e9 B/s throughout. Every NVML GPU must be measured; a check
the SKU file sets a limit for and the probe did not measure is an error. A figure another process disturbed
is an ERROR (gpuaccept.judging.conditions); a figure below its floor is measured once more before it fails
(gpuaccept.judging.confirm).
"""
import pytest

from gpuaccept.judging.confirm import by_bus, confirm_held
from gpuaccept.runner.host import HostRunner
from gpuaccept.judging.readings import number, typed

pytestmark = pytest.mark.memory

HBM_DIRECTION = {"read": "device memory read", "write": "device memory write",
                 "copy": "device memory copy, read + write bytes"}


def test_hbm_bandwidth(node: HostRunner, gpus, sku, verdicts):
    """HBM read, write and copy GB/s per GPU, all GPUs loaded at once; each judged on the SKU's floor, a
    figure below it measured once more (same probe, same GPUs) before it fails."""
    args = {"device": "cuda"}
    doc = typed(node.probe("hbm_bandwidth", args))
    verdicts.conditions(doc, gpus)
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
                            extra={"method": method}, confirm=True)
    confirm_held(verdicts, lambda a: node.probe("hbm_bandwidth", a),
                 lambda d, check, g: (by_bus(d, g) or {}).get(check.replace("hbm_", "").replace("_bw_gbps", "_gbps")),
                 args, gpus, node.profile == "burnin")


def test_pcie_bandwidth(node: HostRunner, gpus, sku, verdicts):
    """Pinned H2D and D2H GB/s per GPU, bound to the GPU's NUMA node; one GPU at a time and all at once."""
    args = {"device": "cuda", "mode": "both"}
    doc = typed(node.probe("pcie_bandwidth", args))
    verdicts.conditions(doc, gpus)
    measured = doc.get("gpus") or []
    verdicts.expect_gpus(gpus, measured, "pcie_bandwidth")
    names = {"h2d": "host to device", "d2h": "device to host"}
    for g in measured:
        for d in ("h2d", "d2h"):
            verdicts.record(f"{d}_bw_gbps", g.get(f"{d}_gbps"), "GB/s", gpu=g, limit=sku.limit(f"{d}_bw_gbps"),
                            context=f"pinned {names[d]}, one GPU at a time", extra={"numa_node": g.get("numa_node")},
                            confirm=True)
            verdicts.record(f"{d}_bw_all_gpus_gbps", g.get(f"{d}_gbps_all"), "GB/s", gpu=g)
    confirm_held(verdicts, lambda a: node.probe("pcie_bandwidth", a),
                 lambda d, check, g: (by_bus(d, g) or {}).get(check.replace("_bw_gbps", "_gbps")),
                 args, gpus, node.profile == "burnin")
