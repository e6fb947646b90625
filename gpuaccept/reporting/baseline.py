"""A GPU's burn-in as its baseline in the history database (pure functions; gpuaccept.reporting.history uses them).

A passed burn-in (``suites/test_burnin.py``) records per GPU ``burnin_<figure>_start`` (the mean of the first
windows after the warm-up) and ``burnin_<figure>_end`` (the last windows), figure one of bf16/fp8 TFLOP/s, HBM
copy GB/s and all-reduce busbw GB/s (gpuaccept.judging.burnin). Those become the GPU's (serial's) baseline:

- **burn-in against burn-in**: a later burn-in's ``burnin_*`` figures against the same figures of the GPU's last
  passed burn-in; every figure, since they are the same measurement.
- **nightly against burn-in**: a nightly figure against the burn-in figure that measures the same thing
  (:data:`NIGHTLY_FROM_BURNIN`), so a nightly run says "9% slower than at its burn-in on 2026-11-02".

Sustained and short figures differ; which pairs are comparable, and why (each measured on the same 2xH200,
2026-11-29/30: tests/data/h200x2-burnin.json against tests/data/replay-h200x2):

- ``bf16_tflops`` (matmul_tflops: 8192^3 bf16 ``A @ B^T``, both K-major, 2 s per dtype) against
  ``burnin_bf16_tflops_start`` (the same kernel, shape and layout, 2*m*n*k FLOP, first windows after the 30 s
  warm-up): the start windows are the burn-in figure nearest a seconds-long probe's conditions, and a passed
  burn-in held its end within ``burnin_drift_pct`` (5%) of them. Measured: 669.6/666.2 nightly against
  670.4/681.3 burn-in (0.1% and 2.2% apart, inside the 10% stand-out). The shape (m, n, k) is part of both keys,
  so another shape is never compared.
- ``hbm_copy_bw_gbps[method=copy_]`` (hbm_bandwidth: ``copy_`` of 4 GiB fp32, bytes read + written) against
  ``burnin_hbm_copy_gbps_start`` (``copy_`` of 1 GiB fp32, counted the same way; both far above the 50 MiB L2):
  4302.7/4301.4 nightly against 4183.7/4208.0 burn-in: the nightly is 2.2-2.8% higher, so the comparison can only
  be lenient, never a false stand-out.
- not compared: fp8 (matmul_tflops 1207.4/1179.2 against burn-in 1355.6/1369.2 TFLOP/s, 11-14% apart on healthy
  GPUs: the interleaved burn-in load and the 5-dtype probe do not run fp8 alike) and the all-reduce (burn-in:
  256 MiB bf16 between matmul batches, 211-248 GB/s; nightly: 4 GiB alone, 347 GB/s). Those are compared burn-in
  with burn-in only.
"""
from __future__ import annotations

from gpuaccept.judging.burnin import FIGURES
from gpuaccept.judging.standouts import is_throughput

#: the burn-in's own throughput figures (higher is better), compared with the same figure of an earlier burn-in
BURNIN_FIGURES = frozenset(f"burnin_{fig}_{edge}" for fig in FIGURES for edge in ("start", "end"))

#: burn-in figure -> (nightly check it is a baseline for, whether the burn-in key's distinguisher, e.g. the
#: matmul shape ``[k=8192,m=8192,n=8192]``, must be the nightly's too). See the module docstring for why.
NIGHTLY_FROM_BURNIN: dict[str, tuple[str, bool]] = {
    "burnin_bf16_tflops_start": ("bf16_tflops", True),
    "burnin_hbm_copy_gbps_start": ("hbm_copy_bw_gbps[method=copy_]", False),
}
BURNIN_LAYER = "burnin"


def split_key(key: str) -> tuple[str, str]:
    """``"bf16_tflops[k=8192]"`` -> ``("bf16_tflops", "[k=8192]")``."""
    name, sep, rest = key.partition("[")
    return name, sep + rest


def is_burnin_figure(f: dict) -> bool:
    """A numeric burn-in throughput figure (``burnin_bf16_tflops_start`` ...), compared with history like a
    throughput figure although it has no limit of its own."""
    v = f.get("value")
    return (f.get("check") in BURNIN_FIGURES and isinstance(v, (int, float)) and not isinstance(v, bool)
            and f.get("layer", BURNIN_LAYER) == BURNIN_LAYER)


def is_compared(f: dict) -> bool:
    """A figure compared with its own references (previous run, baseline): a throughput figure
    (gpuaccept.judging.standouts.is_throughput) or a burn-in throughput figure (:func:`is_burnin_figure`)."""
    return is_throughput(f) or is_burnin_figure(f)


def nightly_key(burnin_key: str) -> str | None:
    """The history key of the nightly check a burn-in figure's key is a baseline for, else None."""
    name, dist = split_key(burnin_key)
    pair = NIGHTLY_FROM_BURNIN.get(name)
    if pair is None:
        return None
    check, same_dist = pair
    return check + dist if same_dist else check


def burnin_key(nightly: str) -> str | None:
    """The burn-in figure's history key that is the baseline of nightly key ``nightly`` (inverse of
    :func:`nightly_key`), else None."""
    name, dist = split_key(nightly)
    for bname, (check, same_dist) in NIGHTLY_FROM_BURNIN.items():
        if same_dist and check == name:
            return bname + dist
        if not same_dist and check == nightly:
            return bname
    return None


def passed_burnin_hosts(tests) -> set[str]:
    """Hosts whose burn-in test passed in this run (``tests``: dicts with host, layer, outcome): only their
    burn-in figures become baselines (a failed, blocked or interrupted burn-in is nobody's reference)."""
    return {t.get("host") for t in tests if t.get("layer") == BURNIN_LAYER and t.get("outcome") == "passed"}
