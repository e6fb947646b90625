"""Compute-layer judging (pure functions, no I/O): clock-event reasons under load, the node-median rule,
and the full name of a matmul figure.

Sources: nvmlClocksEventReasons bits from nvml.h / NVML API reference "ClocksEventReasons"
(nvmlClocksEventReasonHwSlowdown = 0x8, SwPowerCap = 0x4, SyncBoost = 0x10, SwThermalSlowdown = 0x20,
HwThermalSlowdown = 0x40, HwPowerBrakeSlowdown = 0x80); the node copy of these bits is
``gpuaccept/probes/gpu_inventory.py:CLOCK_EVENT_REASONS``. The median rule is the burn-in rule of the
threshold files' ``below_node_median_pct`` check.
"""
from __future__ import annotations

from gpuaccept.judging.readings import number
from gpuaccept.judging.standouts import median

# Hardware slowdowns fail a GPU under load; the software power cap, software thermal slowdown and sync
# boost are recorded only (a GPU at its power limit works as designed).
CLOCK_REASONS_FAIL = {0x8: "HW slowdown", 0x40: "HW thermal slowdown", 0x80: "HW power brake slowdown"}
#: the hardware reasons no process's load can raise: the power brake is a signal the system (its power supply or
#: BMC) asserts on the GPU (NVML nvmlClocksEventReasonHwPowerBrakeSlowdown: "External Power Brake Assertion");
#: HW slowdown and HW thermal slowdown follow temperature and power draw, which another process's load moves
LOAD_INDEPENDENT_REASONS = frozenset({"HW power brake slowdown"})
CLOCK_REASONS_RECORD = {0x4: "SW power cap", 0x20: "SW thermal slowdown", 0x10: "sync boost"}


def clock_reasons(mask) -> tuple[list[str], list[str]]:
    """Split a clocks-event-reasons bitmask into (failing reasons, recorded reasons), by name. Pure.

    ``mask``: the int NVML reports; None, a bool or an NVML error gives ([], [])."""
    m = number(mask)
    m = int(m) if m is not None else 0
    return ([n for b, n in CLOCK_REASONS_FAIL.items() if m & b],
            [n for b, n in CLOCK_REASONS_RECORD.items() if m & b])


def node_median(values: dict[int, float]) -> float | None:
    """Median of the figures (GPU index -> figure; gpuaccept.judging.standouts.median); None for no figures."""
    return median(values.values())


def below_median_pct(values: dict[int, float]) -> dict[int, float]:
    """Percent by which each GPU's figure is below its node's median (0 when at or above). Pure.

    ``values``: GPU index -> figure (higher is better). Used with the ``below_node_median_pct`` limit.
    """
    med = node_median(values)
    if med is None:
        return {}
    return {i: max(0.0, (med - v) / med * 100.0) if med else 0.0 for i, v in values.items()}


def matmul_label(dtype: str, fig: dict) -> str:
    """``"bf16 8192x8192x8192 matmul"``: the figure's dtype and size (m x n x k), for failure lines."""
    dims = [fig.get(k) for k in ("m", "n", "k")]
    size = "x".join(str(d) for d in dims) if all(isinstance(d, int) for d in dims) else "size unknown"
    return f"{dtype} {size} matmul"
