"""Measure a figure as long as it needs and no longer: the stop-when-stable rule of the throughput probes
(hbm_bandwidth, matmul_tflops, pcie_bandwidth, p2p_bandwidth). Standard library only.

A figure is measured in *windows* (a few timed batches/reps/copies each, taken after the probe's own warm-up has
let the clocks settle). After each window :func:`stop_reason` decides:

- ``"stable"``: at least ``min_s`` seconds measured, at least two windows, and this window's median within
  ``tolerance`` (relative, default :data:`TOLERANCE` = 0.5 %; strictly less than) of the previous window's
  median; tolerance 0 is never stable: a fixed-length measurement to ``max_s``;
- ``"settled"``: at least ``min_s`` seconds measured, at least two windows, and the figure itself (the median of
  every sample so far) moved by less than ``tolerance`` when the last window was added, while the window medians
  still swing about a level (they changed direction within the last three windows; a figure drifting one way
  never settles). That is a power-capped card whose clocks oscillate within the second: an H200 at its 700 W limit
  (SM clock 1245-1500 MHz) gave bf16 window medians of 638.6-682.2 TFLOP/s in 0.25 s windows (1xH200, quick
  profile, 2026-12-04); no two successive bf16, tf32, fp8 or fp64 windows of that run agreed within 0.5 % in 2 s,
  while each figure moved by less than 0.5 % from its fifth or sixth window on. Tolerance 0 never settles;
- ``"ceiling"``: ``max_s`` seconds measured and neither stable nor settled (a drifting figure: clocks still moving, a
  foreign load, a throttling card); the figure is then the median over everything measured, as before;
- ``None``: measure another window.

The figure is the median of every sample of every window (the probes' figure before this rule: the median over
one fixed window), so stopping early changes how long, not what, is measured. GPUs measured together decide
together (:class:`Joint`): all keep loading until every one of them may stop, so no GPU is measured alone.

Each figure's record carries :func:`fields`: ``measured_s`` (seconds of timed windows), ``windows`` (how many),
``stop`` (``"stable"`` | ``"settled"`` | ``"ceiling"``). The tolerance 0.5 %: the run-to-run spread of the H200 figures this
suite judges (bf16 664.3/666.5, HBM copy 4302.0/4301.3 on two GPUs of one node, tests/data/h200x2-*.json) is
0.0-0.4 %, and the thresholds sit ~10 % under the measured figures (thresholds/h200-sxm-141gb.yaml).
"""
from __future__ import annotations

import statistics
import threading
import time

from _probe import ProbeFailed

#: relative difference of two successive window medians that counts as stable (0.5 %; see the module docstring)
TOLERANCE = 0.005
STEADY_KEYS = {"min_seconds", "max_seconds", "tolerance_pct"}


def _within(last: float, prev: float, tolerance: float) -> bool:
    return abs(last - prev) < tolerance * abs(prev)


def _swings(window_medians: list[float]) -> bool:
    """True when the window medians changed direction within the last three changes (they swing about a level);
    a drift (each window below or above the one before) never does."""
    steps = [b - a for a, b in zip(window_medians[-4:], window_medians[-3:])]
    return any(x * y < 0 for x, y in zip(steps, steps[1:]))


def stop_reason(window_medians: list[float], elapsed_s: float, min_s: float, max_s: float,
                tolerance: float = TOLERANCE, figures: list[float] | None = None) -> str | None:
    """The stop rule (pure). ``window_medians``: the median of each window measured so far, in order (any unit,
    seconds or GB/s); ``elapsed_s``: seconds measured so far; ``min_s`` <= ``max_s``: the floor and ceiling, s;
    ``tolerance``: relative (0.005 = 0.5 %); ``figures``: the figure (median of every sample so far) after each
    window, in the same unit and order (None: only the windows are compared). Returns "stable", "settled",
    "ceiling" or None (measure another window); see the module docstring. Stability is checked first, so a
    figure stable at the ceiling says "stable"."""
    if len(window_medians) >= 2 and elapsed_s >= min_s:
        if _within(window_medians[-1], window_medians[-2], tolerance):
            return "stable"
        if figures and len(figures) >= 2 and _within(figures[-1], figures[-2], tolerance) \
                and _swings(window_medians):
            return "settled"
    if elapsed_s >= max_s:
        return "ceiling"
    return None


def replay_series(window_medians: list[float], window_s: float, min_s: float, max_s: float,
                  tolerance: float = TOLERANCE) -> tuple[int, str]:
    """(windows taken, stop reason) when windows of ``window_s`` seconds would have given ``window_medians``
    in turn, one sample each (pure; what :func:`run_windows` decides on such a series: the figure after each
    window is the median of the window medians so far). A series that ends before the rule stops returns (its
    length, "ceiling")."""
    figures = [statistics.median(window_medians[:i]) for i in range(1, len(window_medians) + 1)]
    for n in range(1, len(window_medians) + 1):
        why = stop_reason(window_medians[:n], n * window_s, min_s, max_s, tolerance, figures[:n])
        if why:
            return n, why
    return len(window_medians), "ceiling"


class Joint:
    """One stop decision for threads measuring together (one per GPU, sharing a ``threading.Barrier`` of
    exactly those threads): :meth:`agree` returns True for all of them when every one may stop."""

    def __init__(self):
        self.flags: dict = {}

    def gather(self, barrier: threading.Barrier | None, slot, value) -> dict:
        """Every thread's ``value`` as ``{slot: value}`` once all have given theirs (each thread calls it the same
        number of times). ``slot``: this thread's key (GPU index). Without a barrier: ``{slot: value}``."""
        if barrier is None:
            return {slot: value}
        self.flags[slot] = value
        barrier.wait()
        out = dict(self.flags)
        barrier.wait()  # nobody writes the next round's value before everyone has read this one
        return out

    def agree(self, barrier: threading.Barrier | None, slot, done: bool) -> bool:
        """``done``: this thread's own decision; True when every thread's is (:meth:`gather`)."""
        return all(self.gather(barrier, slot, bool(done)).values())


def run_windows(window, min_s: float, max_s: float, tolerance: float = TOLERANCE,
                agree=None) -> dict:
    """Measure windows until :func:`stop_reason` (and ``agree``) says stop.

    ``window()``: measures one window, returns (samples, seconds): the window's samples (a per-call time or a
    rate each; one unit throughout) and the seconds it measured. ``agree(done) -> bool``: the joint decision
    (:meth:`Joint.agree` bound to a barrier and slot), default this thread's own. Returns ``{"samples": every
    sample in order, "window_medians": [...], "measured_s", "windows", "stop"}``; ``stop`` is this thread's own
    reason when the joint decision stopped it ("stable" | "settled" | "ceiling")."""
    samples: list[float] = []
    medians: list[float] = []
    figures: list[float] = []
    elapsed = 0.0
    while True:
        got, seconds = window()
        if not got:
            raise ProbeFailed("a measurement window returned no samples")
        samples.extend(got)
        medians.append(statistics.median(got))
        figures.append(statistics.median(samples))
        elapsed += seconds
        why = stop_reason(medians, elapsed, min_s, max_s, tolerance, figures)
        if (agree or (lambda d: d))(why is not None):
            return {"samples": samples, "window_medians": medians, "measured_s": elapsed,
                    "windows": len(medians), "stop": why or "ceiling"}


def fields(result: dict) -> dict:
    """The fields a figure's record carries from :func:`run_windows`: measured_s (s, 4 digits), windows, stop
    ("stable" | "settled" | "ceiling")."""
    return {"measured_s": round(result["measured_s"], 4), "windows": result["windows"], "stop": result["stop"]}


def timed_window(fn):
    """A ``window`` for :func:`run_windows` from ``fn() -> samples`` timed by the host clock (perf_counter)."""
    def window():
        t0 = time.perf_counter()
        got = fn()
        return got, time.perf_counter() - t0
    return window


def steady_args(args: dict, min_default: float, max_default: float) -> dict:
    """``{"min_s", "max_s", "tolerance"}`` from a probe's ``min_seconds``, ``max_seconds`` (s per figure; the
    defaults given) and ``tolerance_pct`` (%, default 0.5). ProbeFailed unless 0 <= min <= max and
    0 <= tolerance_pct < 100. A ``max_seconds`` below the default floor lowers the floor with it."""
    try:
        max_s = float(args.get("max_seconds", max(max_default, float(args.get("min_seconds", 0)))))
        min_s = float(args.get("min_seconds", min(min_default, max_s)))
        tol = float(args.get("tolerance_pct", TOLERANCE * 100)) / 100
    except (TypeError, ValueError):
        raise ProbeFailed("min_seconds, max_seconds and tolerance_pct must be numbers") from None
    if not 0 <= min_s <= max_s:
        raise ProbeFailed(f"need 0 <= min_seconds <= max_seconds, got {min_s} and {max_s}")
    if not 0 <= tol < 1:
        raise ProbeFailed(f"tolerance_pct must be in [0, 100), got {tol * 100}")
    return {"min_s": min_s, "max_s": max_s, "tolerance": tol}


def describe(steady: dict) -> dict:
    """The document's ``steady`` block: the rule's settings (min_seconds, max_seconds, tolerance_pct)."""
    return {"min_seconds": steady["min_s"], "max_seconds": steady["max_s"],
            "tolerance_pct": round(steady["tolerance"] * 100, 4)}
