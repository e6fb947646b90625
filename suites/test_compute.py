"""compute layer: Tensor Core TFLOP/s on every GPU at once, throttle reasons, kernel launch overhead.

Probes: matmul_tflops, launch_overhead. TFLOP/s = 2*m*n*k / s / 1e12.
"""
import pytest

from gpuaccept.node import Node
from gpuaccept.thresholds import below_median_pct, clock_reasons

pytestmark = pytest.mark.compute


def dtypes_for(sku) -> list[str]:
    """The dtypes a SKU is judged on: bf16, fp16, tf32, plus fp8 and fp64 where its file says it has them."""
    out = [d for d in ("bf16", "fp16", "tf32") if f"{d}_tflops" in sku.checks]
    if sku.expect.get("fp8"):
        out.append("fp8")
    if sku.expect.get("fp64_tensor"):
        out.append("fp64")
    return out


def test_tensor_tflops(node: Node, gpus, sku, verdicts):
    """Dense matmul TFLOP/s per dtype per GPU, all GPUs at once, with SM clock, power and temperature; a
    GPU more than the SKU's below_node_median_pct under its node's median fails even above the floor."""
    doc = node.probe("matmul_tflops", {"device": "cuda", "dtypes": dtypes_for(sku)})
    rule = sku.checks.get("below_node_median_pct")
    per_dtype: dict[str, dict[int, float]] = {}
    for g in doc["gpus"]:
        for dtype, fig in (g.get("dtypes") or {}).items():
            check = f"{dtype}_tflops"
            verdicts.record(check, fig.get("tflops"), "TFLOP/s", gpu=g, limit=sku.checks.get(check),
                            extra={k: fig.get(k) for k in ("sm_clock_mhz_median", "sm_clock_mhz_min", "power_w_max",
                                                           "temp_c_max", "clocks_event_reasons", "m", "n", "k")})
            if isinstance(fig.get("tflops"), (int, float)):
                per_dtype.setdefault(dtype, {})[g["index"]] = fig["tflops"]
            reasons = fig.get("clocks_event_reasons") or 0
            failing, seen = clock_reasons(reasons)
            for name in failing:
                verdicts.fail(f"{name} while running {dtype} matmul (clocks event reasons 0x{reasons:x})", gpu=g)
            if seen:
                verdicts.record(f"{dtype}_clocks_events", ", ".join(seen), gpu=g)
    for dtype, vals in per_dtype.items():
        slowest = min(vals, key=vals.get)
        verdicts.record(f"{dtype}_tflops_node_slowest", vals[slowest], "TFLOP/s", gpu=slowest)
        if rule is not None and len(vals) > 1:
            for idx, pct in below_median_pct(vals).items():
                verdicts.record(f"{dtype}_below_node_median_pct", round(pct, 2), "%", gpu=idx, limit=rule)
    verdicts.finish()


def test_launch_overhead(node: Node, gpus, sku, verdicts):
    """Empty-kernel launch overhead in microseconds per GPU (wall clock and CUDA events)."""
    doc = node.probe("launch_overhead", {"device": "cuda"})
    for g in doc["gpus"]:
        verdicts.record("launch_overhead_us", g.get("launch_us_wall"), "us", gpu=g,
                        limit=sku.checks.get("launch_overhead_us"), extra={"events_us": g.get("launch_us_events")})
    verdicts.finish()
