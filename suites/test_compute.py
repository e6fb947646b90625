"""compute layer: Tensor Core TFLOP/s on every GPU at once, throttle reasons, kernel launch overhead.

Probes: matmul_tflops, launch_overhead. TFLOP/s = 2*m*n*k / s / 1e12.
"""
from dataclasses import replace

import pytest

from gpuaccept import drift
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
    for slot, g in enumerate(doc["gpus"]):
        nv = drift.nvml_gpu_for(g, gpus)  # the same GPU in NVML, by bus id (torch order may differ)
        for dtype, fig in (g.get("dtypes") or {}).items():
            check = f"{dtype}_tflops"
            verdicts.record(check, fig.get("tflops"), "TFLOP/s", gpu=g, limit=sku.checks.get(check),
                            extra={k: fig.get(k) for k in ("sm_clock_mhz_median", "sm_clock_mhz_min", "power_w_max",
                                                           "temp_c_max", "clocks_event_reasons", "power_limit_w_min",
                                                           "m", "n", "k")})
            if isinstance(fig.get("tflops"), (int, float)):
                per_dtype.setdefault(dtype, {})[slot] = fig["tflops"]
            reasons = fig.get("clocks_event_reasons") or 0
            failing, seen = clock_reasons(reasons)
            for name in failing:
                verdicts.fail(f"{name} while running {dtype} matmul (clocks event reasons 0x{reasons:x})", gpu=g)
            if seen:
                verdicts.record(f"{dtype}_clocks_events", ", ".join(seen), gpu=g)
            bad_clock, note = drift.clock_setting_event(reasons, nv, fig.get("sm_clock_mhz_median"))
            if bad_clock or note:
                verdicts.record(f"{dtype}_applications_clocks_setting", True, gpu=g, extra={"note": note})
            if bad_clock:
                verdicts.fail(f"{bad_clock} while running {dtype} matmul", gpu=g)
            cap = fig.get("power_limit_w_min")  # the limit during the timed window (older probes: NVML's reading)
            for f in drift.power_limit(nv or {}, sku, node.host.vars.get("gpu_power_limit_w"), enforced=cap,
                                       during=f" during {dtype} matmul" if cap is not None else ""):
                verdicts.apply([replace(f, check=f"{dtype}_{f.check}")], gpu=g)
    for dtype, vals in per_dtype.items():
        slowest = min(vals, key=vals.get)
        verdicts.record(f"{dtype}_tflops_node_slowest", vals[slowest], "TFLOP/s", gpu=doc["gpus"][slowest])
        if rule is not None and len(vals) > 1:
            for slot, pct in below_median_pct(vals).items():
                verdicts.record(f"{dtype}_below_node_median_pct", round(pct, 2), "%", gpu=doc["gpus"][slot],
                                limit=rule)
    verdicts.finish()


def test_launch_overhead(node: Node, gpus, sku, verdicts):
    """Empty-kernel launch overhead in microseconds per GPU (wall clock and CUDA events)."""
    doc = node.probe("launch_overhead", {"device": "cuda"})
    for g in doc["gpus"]:
        verdicts.record("launch_overhead_us", g.get("launch_us_wall"), "us", gpu=g,
                        limit=sku.checks.get("launch_overhead_us"), extra={"events_us": g.get("launch_us_events")})
    verdicts.finish()
