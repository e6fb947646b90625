"""memory layer: HBM read/write/copy bandwidth on every GPU at once (probe: hbm_bandwidth)."""
import pytest

from gpuaccept.node import Node

pytestmark = pytest.mark.memory


def test_hbm_bandwidth(node: Node, gpus, sku, verdicts):
    """HBM read, write and copy GB/s (1e9 B/s) per GPU, all GPUs loaded at once; each judged on its floor."""
    doc = node.probe("hbm_bandwidth", {"device": "cuda"})
    for kind in ("read", "write", "copy"):
        check = f"hbm_{kind}_bw_gbps"
        limit = sku.checks.get(check)
        verdicts.per_gpu(check, doc["gpus"], f"{kind}_gbps", limit=limit, unit="GB/s")
    verdicts.finish()
