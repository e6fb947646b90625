"""Stand-outs: figures within their limits that are worse than their peers or than their own past (pure).

The one median and the one stand-out rule of gpuaccept: summary.md, report.html, results.json's
``outliers``, the history database's comparisons (gpuaccept.reporting.history) and the figure keys of the
Prometheus textfile all take them from here.

Two comparisons, one rule for each:

- **Against the peers** (:func:`peer_outliers`): per SKU and check key (:func:`check_of`), a passing
  throughput figure is an outlier when it is more than ``pct`` percent (default :data:`PCT`, 10) below the
  median of the same SKU and check over every host and GPU of the run, *and* more than ``mads`` (default
  :data:`MADS`, 3) scaled median absolute deviations below it; fewer than :data:`MIN_PEERS` figures are not
  judged. Why both: the percentage alone calls the normal spread of a noisy check (storage, a PCIe host's
  all-reduce) an outlier on every run, and the robust z-score alone calls a 0.3 % difference of a very tight
  fleet (MAD near 0) an outlier nobody would act on; a figure both materially slower (the operator's 10 %)
  and outside the fleet's own spread is the node to look at. Median and MAD, not mean and standard
  deviation, because the slow nodes being looked for would pull a mean and inflate a deviation (breakdown
  point 50 %); the scale 1.4826 makes the MAD estimate the standard deviation of normal data, and 3 is the
  usual cut for a robust z-score (Iglewicz & Hoaglin 1993, "How to Detect and Handle Outliers"). With no
  spread at all (MAD 0) the rule is the percentage alone. The median is the middle value, the mean of the
  two middle values for an even count (:func:`median`).
- **Against a reference of the same GPU** (:func:`reference_standouts`): a passing throughput figure more
  than ``pct`` percent below its reference (its previous run, or its baseline: a burn-in, the first pass, an
  explicit run) is a stand-out. One measurement against one earlier measurement has no spread to judge
  with, so the percentage alone is the rule. Like with like: a reference of another SKU is ignored.

The comparison key of a figure: its subject (:func:`subject_of`: the GPU serial, so a GPU moved to another
host keeps its past) and its check with the extras that say what was measured (:func:`check_of`:
``busbw_gbps[bytes=4096]``, ``p2p_unidir_bw_gbps[pair=0-1]``), so a figure is never compared with another
message size, shape or GPU pair. Only :func:`is_throughput` figures are compared (higher is better), and a
failed figure is never a stand-out: it is listed under failures.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Iterable

from gpuaccept.judging.readings import number

#: percent below the reference (peers' median, previous run, baseline) above which a figure stands out
#: (the README's promise; ``--standout-pct`` overrides it, for the peers and the references alike). Chosen.
PCT = 10.0
#: robust z-score cut: distance below the peers' median in scaled MADs (Iglewicz & Hoaglin 1993)
MADS = 3.0
#: the MAD's scale for normal data (1 / the 0.75 quantile of the standard normal, 1/0.6745)
MAD_SCALE = 1.4826
#: figures of one SKU and check needed for a peer median (with two, each is half the median). Chosen.
MIN_PEERS = 3


def median(values: Iterable[float]) -> float | None:
    """The median of ``values``: the middle value, or the mean of the two middle values for an even count;
    None when there are none. Units: those of the values."""
    vals = sorted(values)
    n = len(vals)
    if not n:
        return None
    return vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2.0


def _middle(vals: list[float]) -> float:
    """:func:`median` of values already in order (not empty)."""
    n = len(vals)
    return vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2.0


def pct_below(value: float, reference: Any) -> float | None:
    """Percent by which ``value`` is below ``reference`` (negative when above); None when the reference is no
    number or zero (nothing to compare with)."""
    ref = number(reference)
    if not ref:
        return None
    return (ref - value) / abs(ref) * 100.0


def is_throughput(f: dict) -> bool:
    """A numeric figure judged against a ``min`` limit (bandwidths, TFLOP/s: higher is better). Only these
    are compared with peers and history: error counts against a ``max`` limit are small integers whose
    relative change means nothing (1 CRC error/s is "100% above" 0.5)."""
    return isinstance(f.get("limit"), dict) and "min" in f["limit"] and number(f.get("value")) is not None


def prop_value(v: Any) -> str:
    """A figure's value or extra as text: ``true``/``false``, a number or string as is, ``""`` for None,
    anything else as compact JSON (the JUnit property values, and the parts of :func:`distinguisher`)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, str)) or v is None:
        return "" if v is None else str(v)
    return json.dumps(v, default=str, separators=(",", ":"))


def distinguisher(f: dict) -> str:
    """``[k=v,...]`` of a figure's scalar ``extra`` fields (sorted; values of at most 40 characters), or ``""``:
    what tells figures of one check apart (``[bytes=4096]``)."""
    extra = f.get("extra")
    if not extra:
        return ""
    parts = [f"{k}={prop_value(v)}" for k, v in sorted(extra.items())
             if isinstance(v, (int, float, str, bool)) and len(str(v)) <= 40]
    return f"[{','.join(parts)}]" if parts else ""


# A figure's extras that are readings taken with it (temperatures, clocks, power, other bandwidths, clock-event
# masks, the algorithm NCCL picked) change from run to run: in the key they made every run's key new, so
# bf16_tflops and the all-reduce busbw were never compared with anything. Only extras saying what was measured
# (sizes, shapes, methods, NUMA node, the GPU pair) stay in the key: names ending in a reading's unit are
# dropped, and floats. So are a storage path's facts of the moment: the fio file's size (capped by the free
# space), the free space itself, the device numbers (a loop or dm device's change across reboots), the block
# devices under it, fio's own messages. So is the number of kernel-log lines a run read (the log grows).
_READING_SUFFIXES = ("_c", "_c_max", "_c_min", "_w", "_w_max", "_w_min", "_mhz", "_mhz_median", "_mhz_min",
                     "_mhz_max", "_gbps", "_tflops", "_us", "_pct", "_s")
_READING_EXTRAS = frozenset({"clocks_event_reasons", "algo", "algorithms", "note", "total_bytes", "free_bytes",
                             "device", "block_names", "fio_messages", "lines_scanned"})


def key_extras(f: dict) -> dict:
    """The extras of figure ``f`` that belong to its comparison key (see :data:`_READING_SUFFIXES`); a list of
    scalars (a GPU pair ``[0, 1]``) as ``"0-1"``."""
    out = {}
    for k, v in (f.get("extra") or {}).items():
        if k in _READING_EXTRAS or k.endswith(_READING_SUFFIXES) or isinstance(v, float):
            continue
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, str)) for x in v):
            v = "-".join(str(x) for x in v)
        out[k] = v
    return out


def check_of(f: dict) -> str:
    """A figure's comparison (and history) key: its check name with the extras that say what was measured
    (``busbw_gbps[bytes=4096]``, ``bf16_tflops[k=8192,m=8192,n=8192]``; readings taken with it left out)."""
    return f["check"] + distinguisher({"extra": key_extras(f)})


def subject_of(f: dict) -> str:
    """What a figure is of: the GPU serial, else ``host:<host>`` plus ``:gpu<i>`` for a GPU."""
    serial = f.get("serial")
    if isinstance(serial, str) and serial:
        return serial
    return f"host:{f.get('host')}" + (f":gpu{f['gpu']}" if f.get("gpu") is not None else "")


def peer_groups(figures: Iterable[dict], groups: dict[tuple, list[dict]] | None = None) -> dict[tuple, list[dict]]:
    """Passing throughput figures by ``(sku, check_of)``, in order, added to ``groups`` (new when None)."""
    groups = {} if groups is None else groups
    for f in figures:
        if is_throughput(f) and f.get("verdict") != "fail":
            key = (f.get("sku"), check_of(f))
            g = groups.get(key)
            if g is None:
                g = groups[key] = []
            g.append(f)
    return groups


def peer_outliers(groups: dict[tuple, list[dict]], pct: float = PCT, mads: float = MADS,
                  min_peers: int = MIN_PEERS) -> list[dict]:
    """The peer rule (module docstring) over :func:`peer_groups`: per SKU and check, figures more than ``pct``
    percent and more than ``mads`` x :data:`MAD_SCALE` x MAD below the median. Returns ``{host, check, gpu,
    serial, sku, value, unit, against: "fleet", reference: median, pct, mads}`` (``mads``: "inf" when MAD is 0)."""
    out = []
    for (sku, chk), fs in groups.items():
        if len(fs) < min_peers:
            continue
        vals = [float(f["value"]) for f in fs]
        ordered = sorted(vals)
        med = _middle(ordered)
        mad = _middle(sorted([abs(v - med) for v in ordered])) * MAD_SCALE
        # below the median by more than pct % and by more than mads x MAD: only values under both cut-offs
        cut = med - 0.999999 * max(abs(med) * pct / 100.0, mads * mad)  # (slack for rounding: re-checked below)
        for i in [i for i, v in enumerate(vals) if v <= cut]:
            f = fs[i]
            below = pct_below(float(f["value"]), med)
            dist = med - float(f["value"])
            if below is not None and below > pct and dist > mads * mad:
                out.append({"host": f.get("host"), "check": chk, "gpu": f.get("gpu"), "serial": f.get("serial"),
                            "sku": sku, "value": f["value"], "unit": f.get("unit"), "against": "fleet",
                            "reference": med, "pct": round(below, 1),
                            "mads": round(dist / mad, 1) if mad else "inf"})
    return out


def reference_standouts(figures: Iterable[dict], refs: dict[tuple, dict], pct: float = PCT,
                        compared: Callable[[dict], bool] = is_throughput) -> list[dict]:
    """The reference rule (module docstring): passing figures that ``compared`` accepts, more than ``pct``
    percent below their baseline or previous value.

    ``refs``: ``{(subject_of, check_of): {"previous": (value, run_id, sku), "baseline": (value, run_id, sku,
    how)}}`` (either may be absent; ``how`` names the baseline for the reader). Returns ``{host, check, gpu,
    serial, sku, value, unit, against, reference, ref_run, pct}``; ``against`` is ``"previous"`` or
    ``"baseline (<how>)"``."""
    out = []
    for f in figures:
        if not compared(f) or f.get("verdict") == "fail":
            continue
        r = refs.get((subject_of(f), check_of(f))) or {}
        for against in ("baseline", "previous"):
            if against not in r:
                continue
            ref, run_id, sku = r[against][:3]
            if sku and f.get("sku") and sku != f.get("sku"):
                continue
            below = pct_below(f["value"], ref)
            if below is not None and below > pct:
                out.append({"host": f.get("host"), "check": check_of(f), "gpu": f.get("gpu"),
                            "serial": f.get("serial"), "sku": f.get("sku"), "value": f["value"],
                            "unit": f.get("unit"), "reference": ref, "ref_run": run_id,
                            "against": against + (f" ({r[against][3]})" if against == "baseline" else ""),
                            "pct": round(below, 1)})
    return out


def previous_references(previous: Iterable[dict], run_id: str | None = None) -> dict[tuple, dict]:
    """:func:`reference_standouts`' ``refs`` from the figures of one earlier run (its results.json, run
    ``run_id``): per key the last numeric figure, as ``{"previous": (value, run_id, sku)}``."""
    refs: dict[tuple, dict] = {}
    for f in previous:
        if number(f.get("value")) is not None and f.get("check"):
            refs[(subject_of(f), check_of(f))] = {"previous": (f["value"], run_id or f.get("run_id"), f.get("sku"))}
    return refs


def outliers(figures: list[dict], previous: list[dict], pct: float = PCT, previous_run: str | None = None,
             compared: Callable[[dict], bool] = is_throughput) -> list[dict]:
    """The stand-outs of a run without a history database: :func:`reference_standouts` of the figures
    ``compared`` accepts against the previous run's figures ``previous`` (its results.json, run
    ``previous_run``) with ``pct``, then :func:`peer_outliers` of the run's own figures with ``pct``."""
    return (reference_standouts(figures, previous_references(previous, previous_run), pct, compared)
            + peer_outliers(peer_groups(figures), pct))
