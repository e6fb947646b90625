"""compute layer: Tensor Core TFLOP/s on every GPU at once (probe: matmul_tflops)."""
import pytest

from gpuaccept.node import Node

pytestmark = pytest.mark.compute


def test_tensor_tflops(node: Node, gpus, sku, verdicts):
    """bf16 (and the SKU's other dtypes) dense matmul TFLOP/s per GPU, with clock, power and temperature."""
    doc = node.probe("matmul_tflops", {"device": "cuda", "dtypes": ["bf16"]})
    for g in doc["gpus"]:
        for dtype, fig in g.get("dtypes", {}).items():
            check = f"{dtype}_tflops"
            verdicts.record(check, fig.get("tflops"), "TFLOP/s", gpu=g, limit=sku.checks.get(check),
                            extra={k: v for k, v in fig.items() if k != "tflops"})
    verdicts.finish()
