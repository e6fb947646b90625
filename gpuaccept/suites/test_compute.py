"""compute layer: Tensor Core TFLOP/s on every GPU at once, throttle reasons, kernel launch overhead.

Probes: matmul_tflops, launch_overhead. TFLOP/s = 2*m*n*k / s / 1e12. Judging helpers: gpuaccept/judging/compute.py.
"""
from dataclasses import replace

import pytest

from gpuaccept.causes import Cause
from gpuaccept.judging import drift
from gpuaccept.judging.confirm import by_bus, confirm_held
from gpuaccept.judging.compute import (LOAD_INDEPENDENT_REASONS, below_median_pct, clock_reasons, matmul_label,
                                       node_median)
from gpuaccept.runner.host import HostRunner
from gpuaccept.judging.readings import number, typed

pytestmark = pytest.mark.compute


def dtypes_for(sku) -> list[str]:
    """The dtypes a SKU is judged on: bf16, fp16 and tf32 always (every tensor-core SKU has them: a file
    without their limit is an error, never a dtype left unjudged), plus fp8 and fp64 where its ``expect``
    says it has them or its file sets their limit (a missing limit is then an error)."""
    out = ["bf16", "fp16", "tf32"]
    for d, key in (("fp8", "fp8"), ("fp64", "fp64_tensor")):
        if sku.expect.get(key) or f"{d}_tflops" in sku.checks:
            out.append(d)
    return out


def test_tensor_tflops(node: HostRunner, gpus, sku, verdicts):
    """Dense matmul TFLOP/s per dtype per GPU, all GPUs at once, with SM clock, power and temperature (the
    maximum under load judged against temp_c); a GPU more than the SKU's below_node_median_pct under its
    node's median for that dtype fails even above the floor. Every NVML GPU must be measured. A figure
    another process disturbed is an ERROR; one below its floor is measured once more (the held dtypes only,
    every GPU loaded again) before it fails (gpuaccept.judging.confirm)."""
    dtypes = dtypes_for(sku)
    doc = typed(node.probe("matmul_tflops", {"device": "cuda", "dtypes": dtypes}))
    verdicts.conditions(doc, gpus)
    measured = doc.get("gpus") or []
    verdicts.expect_gpus(gpus, measured, "matmul_tflops")
    rule = sku.limit("below_node_median_pct")
    temp = sku.limit("temp_c")
    per_dtype: dict[str, dict[int, float]] = {}
    for slot, g in enumerate(measured):  # slot: position in the document; g["index"] is torch's index
        nv = drift.nvml_gpu_for(g, gpus)  # the same GPU in NVML, by bus id (torch order may differ)
        figs = g.get("dtypes") or {}
        for dtype in dtypes:
            check = f"{dtype}_tflops"
            limit = sku.limit(check)
            fig = figs.get(dtype)
            if not isinstance(fig, dict):
                why = (doc.get("unsupported") or {}).get(dtype)
                if isinstance(why, dict):  # the probe could not run it here: torch's (configuration) or the device's
                    verdicts.error(f"{check} not measured: {why.get('why')}", gpu=g, cause=Cause(
                        "configuration", "torch_lacks_dtype" if why.get("torch") else "dtype_unsupported",
                        evidence={"dtype": dtype, "why": str(why.get("why"))[:200]}))
                    continue
                verdicts.error(f"{check} not measured (matmul_tflops has no {dtype} figure for this GPU)", gpu=g)
                continue
            label = matmul_label(dtype, fig)
            verdicts.record(check, fig.get("tflops"), "TFLOP/s", gpu=g, limit=limit, context=label,
                            extra={k: fig.get(k) for k in ("sm_clock_mhz_median", "sm_clock_mhz_min", "power_w_max",
                                                           "temp_c_max", "clocks_event_reasons", "power_limit_w_min",
                                                           "m", "n", "k")}, confirm=True)
            if number(fig.get("tflops")) is not None:
                per_dtype.setdefault(dtype, {})[slot] = fig["tflops"]
            if "temp_c_max" in fig:
                verdicts.record("temp_c", fig.get("temp_c_max"), "C", gpu=g, limit=temp,
                                figure=f"{dtype}_temp_c_max", context=f"maximum during {label}")
            reasons = fig.get("clocks_event_reasons")
            failing, seen = clock_reasons(reasons)
            for name in failing:  # the brake: a signal no process asserts, so it stands where another disturbed
                verdicts.fail(f"{name} while running {label} (clocks event reasons 0x{int(reasons):x})", gpu=g,
                              check=f"{dtype}_clocks_events", stands_contention=name in LOAD_INDEPENDENT_REASONS,
                              cause=Cause("hardware", "hw_clock_event", evidence={"event": name,
                                                                                  "mask": f"0x{int(reasons):x}"}))
            if seen:
                verdicts.record(f"{dtype}_clocks_events", ", ".join(seen), gpu=g)
            bad_clock, note = drift.clock_setting_event(reasons, nv, fig.get("sm_clock_mhz_median"))
            if bad_clock or note:
                verdicts.record(f"{dtype}_applications_clocks_setting", True, gpu=g, extra={"note": note})
            if bad_clock:
                verdicts.fail(f"{bad_clock} while running {dtype} matmul", gpu=g,
                              check=f"{dtype}_applications_clocks_setting")
            cap = fig.get("power_limit_w_min")  # the limit during the timed window (older probes: NVML's reading)
            for f in drift.power_limit(nv or {}, sku, node.host.vars.get("gpu_power_limit_w"), enforced=cap,
                                       during=f" during {dtype} matmul" if cap is not None else ""):
                verdicts.apply([replace(f, check=f"{dtype}_{f.check}")], gpu=g)
    again = sorted({c.removesuffix("_tflops") for c, _ in verdicts.held()}, key=dtypes.index)
    confirm_held(verdicts, lambda a: node.probe("matmul_tflops", a),
                 lambda d, check, g: ((by_bus(d, g) or {}).get("dtypes") or {}).get(check.removesuffix("_tflops"),
                                                                                  {}).get("tflops"),
                 {"device": "cuda", "dtypes": again}, gpus, node.profile == "burnin")
    for dtype, vals in per_dtype.items():
        slowest = min(vals, key=vals.get)
        verdicts.record(f"{dtype}_tflops_node_slowest", vals[slowest], "TFLOP/s", gpu=measured[slowest])
        if len(vals) > 1:
            med = node_median(vals)
            for slot, pct in below_median_pct(vals).items():
                verdicts.record(f"{dtype}_below_node_median_pct", round(pct, 2), "%", gpu=measured[slot], limit=rule,
                                context=f"{dtype} TFLOP/s {vals[slot]:g} against the node's median {med:g}; "
                                        f"lower is slower")


def test_launch_overhead(node: HostRunner, gpus, sku, verdicts):
    """Empty-kernel launch overhead in microseconds per GPU (wall clock and CUDA events)."""
    args = {"device": "cuda"}
    doc = typed(node.probe("launch_overhead", args))
    verdicts.conditions(doc, gpus)
    measured = doc.get("gpus") or []
    verdicts.expect_gpus(gpus, measured, "launch_overhead")
    limit = sku.limit("launch_overhead_us")
    for g in measured:
        verdicts.record("launch_overhead_us", g.get("launch_us_wall"), "us", gpu=g, limit=limit,
                        context="empty-kernel launch, wall clock", extra={"events_us": g.get("launch_us_events")},
                        confirm=True)
    confirm_held(verdicts, lambda a: node.probe("launch_overhead", a),
                 lambda d, check, g: (by_bus(d, g) or {}).get("launch_us_wall"), args, gpus,
                 node.profile == "burnin")
