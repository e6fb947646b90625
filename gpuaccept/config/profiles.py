"""Run profiles: how long each probe measures. ``--profile quick|standard|burnin``.

A profile maps a probe name to arguments laid over the suite's own (the profile wins). ``standard`` is the
probes' defaults. ``quick`` is for nightly fleet sweeps and ``pytest -k`` while debugging: shorter sustained
windows and fewer repetitions, the same sizes (so figures stay comparable with the thresholds). ``burnin`` holds
every load long enough for a weak card to heat up, throttle or throw errors: minutes, not seconds.
"""
from __future__ import annotations

PROFILES: dict[str, dict[str, dict]] = {
    "quick": {
        "matmul_tflops": {"seconds_per_dtype": 0.6, "warmup_seconds": 0.5},
        "hbm_bandwidth": {"iters": 10},
        "pcie_bandwidth": {"iters": 4},
        "launch_overhead": {"iters": 2000},
        "pcie_link": {"seconds": 0.6},
        "nccl_allreduce": {"iters": 10, "warmup": 3},
        "p2p_bandwidth": {"reps": 3},
    },
    "standard": {},
    "burnin": {
        "matmul_tflops": {"seconds_per_dtype": 60.0, "warmup_seconds": 5.0},
        "hbm_bandwidth": {"iters": 300},
        "pcie_bandwidth": {"iters": 50},
        "pcie_link": {"seconds": 10.0},
        "nccl_allreduce": {"iters": 200, "warmup": 20},
        "p2p_bandwidth": {"reps": 50},
        "nvlink": {"sample_seconds": 30.0},
    },
}


# Default length of the burn-in layer (``pytest -m burnin``) per profile, minutes; ``--burnin-minutes`` overrides.
BURNIN_MINUTES = {"quick": 2.0, "standard": 10.0, "burnin": 60.0}

# Default wall-clock limit of one probe per profile, seconds (``--probe-timeout`` overrides): a burn-in matmul
# holds five dtypes for a minute each.
PROBE_TIMEOUT_S = {"quick": 180.0, "standard": 300.0, "burnin": 1800.0}


def probe_timeout(config) -> float:
    """``--probe-timeout`` of a pytest config, else its ``--profile``'s default (:data:`PROBE_TIMEOUT_S`), s."""
    return config.getoption("probe_timeout") or PROBE_TIMEOUT_S[config.getoption("profile")]


def probe_args(profile: str, probe: str, args: dict | None) -> dict:
    """``args`` with the profile's arguments for ``probe`` laid over them. KeyError for an unknown profile."""
    return {**(args or {}), **PROFILES[profile].get(probe, {})}
