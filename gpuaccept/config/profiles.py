"""Run profiles: how long each probe measures. ``--profile quick|standard|burnin``.

A profile maps a probe name to arguments laid over the suite's own (the profile wins). ``standard`` is the
probes' defaults. ``quick`` is for nightly fleet sweeps and ``pytest -k`` while debugging: shorter sustained
windows and fewer repetitions, the same sizes (so figures stay comparable with the thresholds). ``burnin`` holds
every load long enough for a weak card to heat up, throttle or throw errors: minutes, not seconds.

The throughput probes (matmul_tflops, hbm_bandwidth, pcie_bandwidth, p2p_bandwidth) stop each figure when it
is stable (gpuaccept/probes/_steady.py: a window's median within 0.5 % of the previous window's, or, where the
windows swing about a level as a power-capped card's do, the figure itself within 0.5 % of what it was one window
before); a profile sets
the floor and ceiling of that rule per figure, ``min_seconds`` and ``max_seconds`` (seconds of timed windows per
dtype, per HBM method, per PCIe direction and mode, per P2P pair and direction). The probes' defaults (standard):
matmul 1.0..4.0 s, HBM 0.05..0.5 s, PCIe 0.2..1.0 s, P2P 0.05..0.4 s. Burn-in sets floor = ceiling: it holds
the load for that long whatever the figure does (the older per-probe repetition counts: 60 s per dtype,
300 HBM reps of ~1-3 ms, 50 PCIe copies of ~20 ms, 50 P2P runs of ~14 ms).
"""
from __future__ import annotations

PROFILES: dict[str, dict[str, dict]] = {
    "quick": {
        # the nightly profile measures each dtype's one default candidate (no trials; gpuaccept.probes.matmul_tflops
        # candidate_set: 8192^3 K-major; on a 132-SM GPU bf16 8448 x 8192 x 8192, fp8 8448 x 8192 x 32768 e4m3-out):
        # a figure's history key holds its shape, and a choice that flips between nights would start a new series
        "matmul_tflops": {"min_seconds": 0.5, "max_seconds": 2.0, "warmup_seconds": 0.5, "search": False},
        "hbm_bandwidth": {"min_seconds": 0.02, "max_seconds": 0.25},
        "pcie_bandwidth": {"iters": 2, "min_seconds": 0.1, "max_seconds": 0.5},
        "launch_overhead": {"iters": 2000},
        "pcie_link": {"seconds": 0.6},
        "nccl_allreduce": {"iters": 10, "warmup": 3},
        "p2p_bandwidth": {"min_seconds": 0.03, "max_seconds": 0.2},
    },
    "standard": {},
    "burnin": {
        "matmul_tflops": {"min_seconds": 60.0, "max_seconds": 60.0, "warmup_seconds": 5.0},
        "hbm_bandwidth": {"min_seconds": 1.0, "max_seconds": 1.0},
        "pcie_bandwidth": {"min_seconds": 1.0, "max_seconds": 1.0},
        "pcie_link": {"seconds": 10.0},
        "nccl_allreduce": {"iters": 200, "warmup": 20},
        "p2p_bandwidth": {"min_seconds": 0.7, "max_seconds": 0.7},
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
