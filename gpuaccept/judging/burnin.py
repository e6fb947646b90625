"""Burn-in judging (pure functions over the ``burnin`` probe's document; no I/O).

The probe (gpuaccept/probes/burnin.py) loads every GPU of a node at once for minutes and returns
per-window throughput, an NVML time series per GPU and silent-data-corruption (SDC) checksums. The functions
here turn that into :class:`gpuaccept.judging.health.Finding` records: a figure, its limit when judged, and a failure
naming the GPU and the reason that coincides.

Rules (limits from the SKU file's ``checks`` when it has the key, else the policy table :data:`POLICY`,
each with its reason):

- throughput drift: the mean of the last :data:`EDGE_WINDOWS` windows against the first ones after warm-up,
  per GPU and figure; more than ``burnin_drift_pct`` lower fails, naming the clock-event reasons seen then; its
  cause is ``hardware`` (``burnin_drift_hw``) only with hardware evidence on that GPU (a HW slowdown / HW thermal /
  HW power brake clock event, a temperature past the SKU's ``temp_c``, an Xid of that GPU), else ``unverified``
  (``burnin_drift``: rerun), naming what was and was not seen (a SW power cap is the power policy at work);
- a GPU below its node's median by more than ``below_node_median_pct`` for :data:`SUSTAINED_WINDOWS` windows'
  worth of seconds without a break fails, each window weighed by its seconds; a GPU that closed no window for
  more than ``GAP_WINDOWS`` windows' worth of seconds stalled, and every GPU at once is the node's stall
  (gpuaccept/judging/burnin_time.py: bounds and classes);
- HW slowdown, HW thermal slowdown or HW power brake clock events during the run fail; SW power cap and
  SW thermal slowdown are recorded;
- GPU temperature above ``temp_c``, memory temperature above the GPU's own NVML memory max threshold
  (nvmlDeviceGetTemperatureThreshold NVML_TEMPERATURE_THRESHOLD_MEM_MAX), fail;
- any growth of volatile uncorrectable ECC, a row remap becoming pending, fail; correctable ECC, PCIe replay
  growing faster than their per-hour limits fail; NVLink CRC and replay counters, as a rate per active link,
  against the nvlink layer's ``nvlink_crc_errors_per_s`` and ``nvlink_replay_errors_per_s`` (a healthy H200
  under this load counts about 3 CRC errors per link per second: measured 2026-11-30, 2xH200);
- SDC: a GPU whose checksum differs from the reference (the first round's majority, or from the other GPUs of
  the same round) fails "computes wrong results".
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from gpuaccept.judging.compute import CLOCK_REASONS_FAIL, CLOCK_REASONS_RECORD
from gpuaccept.judging.drift import APPLICATIONS_CLOCKS_SETTING
from gpuaccept.causes import Cause
from gpuaccept.judging.health import Finding
from gpuaccept.judging import burnin_time
from gpuaccept.judging.burnin_time import SUSTAINED_WINDOWS, WINDOW_S
from gpuaccept.judging.standouts import median
from gpuaccept.config.thresholds import Limit, SkuSpec

# Windows skipped at the start (clocks ramp, caches fill) and compared at each end.
WARMUP_S = 30.0
EDGE_WINDOWS = 3
# SUSTAINED_WINDOWS and WINDOW_S (the probe's window on a GPU, s: gpuaccept/probes/burnin.py
# CUDA_DEFAULTS["window_s"]; the suite keeps it): gpuaccept/judging/burnin_time.py
# The shortest burn-in that can be judged, seconds: the warm-up, then 2 x EDGE_WINDOWS windows for the drift of
# the last windows against the first (90 s). A shorter one measured no steady window, and every healthy GPU
# failed "no throughput window after warm-up".
MIN_SECONDS = WARMUP_S + 2 * EDGE_WINDOWS * WINDOW_S


def minutes_refusal(minutes) -> str | None:
    """The one-line refusal of ``--burnin-minutes`` (float minutes, None: the profile's) too short to be judged
    (under :data:`MIN_SECONDS`), else None."""
    if minutes is None or not isinstance(minutes, (int, float)) or minutes * 60.0 >= MIN_SECONDS:
        return None
    return (f"--burnin-minutes {minutes:g}: a burn-in shorter than {MIN_SECONDS / 60:g} min cannot be judged "
            f"({WARMUP_S:g} s of warm-up, then {2 * EDGE_WINDOWS} windows of {WINDOW_S:g} s for the drift of its "
            f"end against its start): every GPU would fail with no steady window")


# Burn-in policy limits used when the SKU file has no entry of that key: key -> (bound, unit, direction, reason).
POLICY: dict[str, tuple[float, str, str, str]] = {
    "burnin_drift_pct": (5.0, "%", "max",
                         "policy: a sustained load losing more than 5% between its first and last minute is "
                         "throttling (run-to-run spread of the bf16 matmul on a healthy 2xH200 is under 1%)"),
    "below_node_median_pct": (7.0, "%", "max",
                              "policy: the node-median rule of the compute layer (thresholds/*.yaml)"),
    "ecc_corrected_per_hour": (100.0, "errors/h", "max",
                               "policy: occasional corrected errors are normal; a steady stream under load is "
                               "a failing HBM stack (NVIDIA GPU memory error management guide)"),
    "pcie_replay_per_hour": (1000.0, "replays/h", "max",
                             "policy: replays retry corrupted TLPs; thousands per hour is a bad riser/slot"),
}

# nvmlClocksEventReasons bits: the compute layer's tables (gpuaccept/judging/compute.py, held to the node's copy in
# probes/gpu_inventory.py by tests/test_health_judging.py), plus the applications-clocks setting (drift).
HW_EVENTS = dict(CLOCK_REASONS_FAIL)
SW_EVENTS = {**CLOCK_REASONS_RECORD, APPLICATIONS_CLOCKS_SETTING: "applications clocks setting"}
FIGURES = ("bf16_tflops", "fp8_tflops", "hbm_copy_gbps", "allreduce_busbw_gbps")
UNITS = {"bf16_tflops": "TFLOP/s", "fp8_tflops": "TFLOP/s", "hbm_copy_gbps": "GB/s", "allreduce_busbw_gbps": "GB/s"}


def limit(sku: SkuSpec, key: str) -> Limit:
    """The SKU file's limit for ``key`` when it has one, else :data:`POLICY`'s, with its reason as source."""
    if key in sku.checks:
        return sku.checks[key]
    bound, unit, direction, why = POLICY[key]
    return Limit("burn-in policy", key, direction, bound, unit, why)


@dataclass(frozen=True)
class Series:
    """One GPU's telemetry: ``t`` (s since start) and per field a list of values (None where unreadable)."""

    t: list
    fields: dict


def telemetry_by_rank(doc: dict) -> dict[int, Series]:
    """The probe's row-wise telemetry ``[t, rank, v...]`` as one :class:`Series` per rank."""
    tel = doc.get("telemetry") or {}
    names = (tel.get("fields") or [])[2:]
    out: dict[int, Series] = {}
    for row in tel.get("rows") or []:
        if not isinstance(row, list) or len(row) != len(names) + 2:
            continue
        s = out.setdefault(int(row[1]), Series([], {n: [] for n in names}))
        s.t.append(row[0])
        for n, v in zip(names, row[2:]):
            s.fields[n].append(v)
    return out


def windows_by_rank(doc: dict) -> dict[int, list[dict]]:
    """Per-window figures per rank, in time order."""
    out: dict[int, list[dict]] = {}
    for w in doc.get("windows") or []:
        out.setdefault(int(w["rank"]), []).append(w)
    for ws in out.values():
        ws.sort(key=lambda w: w["t0"])
    return out


def _steady(ws: list[dict], warmup_s: float, load_start: float) -> list[dict]:
    return [w for w in ws if w["t0"] >= load_start + warmup_s]


def _mean(vals):
    vals = [v for v in vals if isinstance(v, (int, float))]
    return statistics.fmean(vals) if vals else None


def events_between(series: Series | None, t0: float, t1: float) -> tuple[list[str], list[str]]:
    """(HW event names, SW event names) seen in the clock-event reasons sampled between t0 and t1."""
    if series is None:
        return [], []
    bits = 0
    for t, v in zip(series.t, series.fields.get("clocks_event_reasons", [])):
        if t0 <= t <= t1 and isinstance(v, int):
            bits |= v
    return ([n for b, n in HW_EVENTS.items() if bits & b], [n for b, n in SW_EVENTS.items() if bits & b])


def drift(ws: list[dict], figure: str, edge: int = EDGE_WINDOWS) -> tuple[float, float, float, float] | None:
    """(first mean, last mean, percent lower at the end, start time of the last windows), or None when
    there are fewer than 2 windows with the figure. With fewer than ``2*edge`` windows (a burn-in that stopped
    early: its partial figures are still recorded and judged) each end is half of them."""
    have = [w for w in ws if isinstance(w.get(figure), (int, float))]
    if len(have) < 2:
        return None
    edge = min(edge, len(have) // 2)
    first, last = _mean(w[figure] for w in have[:edge]), _mean(w[figure] for w in have[-edge:])
    pct = max(0.0, (first - last) / first * 100.0) if first else 0.0
    return first, last, pct, have[-edge]["t0"]


def sdc_findings(rounds: list[dict], world: int) -> dict[int, list[Finding]]:
    """Per rank: the SDC checks it ran and a failure for every round its checksum differed.

    Reference: the hash most ranks gave in the first round (with one GPU, its first hash). A later round's
    hash is compared with the reference; in a round where no reference exists (first round with no
    majority), every rank is failed as disagreeing, since the node computes two different answers."""
    out: dict[int, list[Finding]] = {r: [] for r in range(world)}
    if not rounds:
        for r in range(world):
            out[r].append(Finding("sdc_rounds", 0, "rounds", failure="no silent-data-corruption check ran"))
        return out
    first = rounds[0]["hashes"]
    counts: dict[str, int] = {}
    for h in first.values():
        counts[h] = counts.get(h, 0) + 1
    best = max(counts.values())
    winners = [h for h, c in counts.items() if c == best]
    reference = winners[0] if len(winners) == 1 else None
    bad: dict[int, list[int]] = {r: [] for r in range(world)}
    for rnd in rounds:
        for r_s, h in rnd["hashes"].items():
            r = int(r_s)
            if reference is None and rnd is rounds[0]:
                bad[r].append(rnd["round"])
            elif reference is not None and h != reference:
                bad[r].append(rnd["round"])
        for r in range(world):
            if str(r) not in rnd["hashes"]:
                bad[r].append(rnd["round"])
    for r in range(world):
        if bad[r]:
            why = ("the GPUs of this node disagree in the first round and none is in the majority"
                   if reference is None else f"checksum differs from the node's reference in round(s) "
                                             f"{', '.join(map(str, bad[r][:10]))} of {len(rounds)}")
            out[r].append(Finding("sdc_mismatched_rounds", len(bad[r]), "rounds",
                                  failure=f"computes wrong results: deterministic fp32 matmul {why}"))
        else:
            out[r].append(Finding("sdc_mismatched_rounds", 0, "rounds", extra={"rounds": len(rounds)}))
    return out


def _growth(vals: list) -> float | None:
    nums = [v for v in vals if isinstance(v, (int, float))]
    return float(nums[-1] - nums[0]) if len(nums) >= 2 else None


def telemetry_findings(series: Series | None, sku: SkuSpec, gpu: dict, hours: float) -> list[Finding]:
    """Temperatures, clock events and counter growth of one GPU over the run."""
    out: list[Finding] = []
    if series is None or not series.t:
        return [Finding("telemetry_samples", 0, "samples", failure="no NVML telemetry for this GPU during burn-in")]
    f = series.fields
    temps = [v for v in f.get("temp_c", []) if isinstance(v, (int, float))]
    out.append(Finding("burnin_temp_c_max", max(temps) if temps else None, "C",
                       sku.checks.get("temp_c")))
    mtemps = [v for v in f.get("mem_temp_c", []) if isinstance(v, (int, float))]
    mem_max = (gpu.get("thresholds") or {}).get("mem_max_c")
    if mtemps:
        lim = (Limit("NVML", "mem_temp_c", "max", float(mem_max), "C",
                     "the GPU's own memory max operating temperature (nvmlDeviceGetTemperatureThreshold MEM_MAX)")
               if mem_max else None)
        out.append(Finding("burnin_mem_temp_c_max", max(mtemps), "C", lim))
    hw, sw = events_between(series, float("-inf"), float("inf"))
    for name in hw:
        out.append(Finding("burnin_clock_event", name, failure=f"{name} during burn-in (clock-event reasons)"))
    if sw:
        out.append(Finding("burnin_clock_events_recorded", ", ".join(sw)))
    unc = _growth(f.get("ecc_uncorrected_volatile", []))
    if unc is not None:
        out.append(Finding("burnin_ecc_uncorrected_new", unc, "errors",
                           failure=f"{unc:g} new uncorrectable ECC error(s) during burn-in" if unc > 0 else None))
    pend = [v for v in f.get("remap_pending", []) if isinstance(v, int)]
    if pend:
        new = pend[-1] and not pend[0]
        out.append(Finding("burnin_remap_pending", bool(pend[-1]),
                           failure="a row remap became pending during burn-in: reset needed" if new else None))
    hours = max(hours, 1e-6)
    for field, key, unit in (("ecc_corrected_volatile", "ecc_corrected_per_hour", "errors/h"),
                             ("pcie_replay", "pcie_replay_per_hour", "replays/h")):
        g = _growth(f.get(field, []))
        if g is not None:
            out.append(Finding(f"burnin_{key}", round(g / hours, 2), unit, limit(sku, key)))
    links = gpu.get("nvlink_active_links") or 0
    seconds = hours * 3600.0
    for field, check in (("nvlink_crc", "nvlink_crc_errors_per_s"), ("nvlink_replay", "nvlink_replay_errors_per_s"),
                         ("nvlink_recovery", None)):
        g = _growth(f.get(field, []))
        if g is None or not links:
            continue
        rate = round(g / links / seconds, 3)
        out.append(Finding(f"burnin_{field}_errors_per_s_per_link", rate, "errors/s",
                           sku.checks.get(check) if check else None,
                           failure=(f"{g:g} NVLink recovery event(s) during burn-in" if check is None and g > 0
                                    else None), extra={"growth": g, "links": links}))
    return out


def _drift_cause(doc: dict, rank: int, series: Series | None, sku: SkuSpec, xids: list) -> tuple[Cause, str]:
    """The cause of a drift of GPU ``rank`` and the words of its evidence: hardware (``burnin_drift_hw``) only
    with a reading of the part on that GPU over the burn-in (:func:`burnin_time.hardware_evidence`), else
    unverified (``burnin_drift``)."""
    hw, _ = events_between(series, float("-inf"), float("inf"))
    temps = [v for v in (series.fields.get("temp_c", []) if series else []) if isinstance(v, (int, float))]
    seen, not_seen = burnin_time.hardware_evidence(hw, max(temps) if temps else None, sku.checks.get("temp_c"), xids)
    idx = next((g.get("index", rank) for g in doc.get("gpus") or [] if g.get("rank") == rank), rank)
    ev = {"seen": seen, "not_seen": not_seen}
    if seen:
        return (Cause("hardware", "burnin_drift_hw", gpu=idx, evidence=ev),
                f"hardware evidence on this GPU: {'; '.join(seen)}")
    return (Cause("unverified", "burnin_drift", gpu=idx, evidence=ev),
            f"no hardware evidence on this GPU ({'; '.join(not_seen)}): not proven a fault, rerun")


def throughput_findings(doc: dict, sku: SkuSpec, series_by_rank: dict[int, Series],
                        xids: dict[int, list] | None = None) -> dict[int, list[Finding]]:
    """Per rank: start/end throughput per figure, drift against its limit (with the coinciding clock
    events and its cause), the sustained below-node-median rule in seconds, the window count, the longest gap
    and a stall of that GPU (gpuaccept/judging/burnin_time.py). ``xids``: per rank the Xids of its GPU logged
    during the burn-in (:func:`burnin_time.xid_ranks`)."""
    load_start = doc.get("load_started_s") or 0.0
    every = windows_by_rank(doc)
    by_rank = {r: _steady(ws, WARMUP_S if doc.get("device") == "cuda" else 0.0, load_start)
               for r, ws in every.items()}
    out: dict[int, list[Finding]] = {r: [] for r in range(int(doc.get("world_size") or 0))}
    for r, found in burnin_time.stall_findings(every, doc)[0].items():
        out.setdefault(r, []).extend(found)
    dlim = limit(sku, "burnin_drift_pct")
    mlim = limit(sku, "below_node_median_pct")
    cfg = doc.get("config") or {}
    for r, ws in by_rank.items():
        found = out.setdefault(r, [])
        if not ws:
            found.append(Finding("burnin_windows", 0, "windows",
                                 failure="no throughput window after warm-up (the run was shorter than the warm-up)"))
            continue
        for fig in FIGURES:
            d = drift(ws, fig)
            if d is None:
                continue
            first, last, pct, t_last = d
            hw, sw = events_between(series_by_rank.get(r), t_last, float("inf"))
            why = ", ".join(hw + sw) or "no clock event"
            shape = ({k: cfg[k] for k in ("m", "n", "k") if isinstance(cfg.get(k), int)}
                     if fig.endswith("_tflops") else None)  # part of the history key (gpuaccept.reporting.baseline)
            found.append(Finding(f"burnin_{fig}_start", round(first, 3), UNITS[fig], extra=shape or None))
            found.append(Finding(f"burnin_{fig}_end", round(last, 3), UNITS[fig], extra=shape or None))
            ok = pct <= dlim.bound
            cause, said = (None, "") if ok else _drift_cause(doc, r, series_by_rank.get(r), sku, (xids or {}).get(r, []))
            found.append(Finding(f"burnin_{fig}_drift_pct", round(pct, 2), "%", cause=cause,
                                 failure=None if ok else
                                 f"{fig} fell {pct:.1f}% from {first:.4g} to {last:.4g} {UNITS[fig]} during burn-in "
                                 f"(limit {dlim.bound:g}%, {dlim.where()}); coinciding: {why}; {said}",
                                 extra={"limit": dlim.bound, "source": dlim.source, "coinciding": hw + sw}))
    bound = SUSTAINED_WINDOWS * burnin_time.window_s(doc)
    for fig in ("bf16_tflops", "fp8_tflops", "hbm_copy_gbps"):
        for r, (secs, worst) in burnin_time.below_median_seconds(by_rank, fig, mlim.bound).items():
            if secs >= bound:
                ev = {"seconds": secs, "bound_s": bound, "worst_pct": round(worst, 1), "figure": fig}
                out.setdefault(r, []).append(Finding(
                    f"burnin_{fig}_below_node_median_s", secs, "s", extra=ev, cause=burnin_time.slow_cause(doc, r, ev),
                    failure=f"{fig} more than {mlim.bound:g}% below the node's median for {secs:g} s without a "
                            f"break (worst {worst:.1f}% below; bound {bound:g} s = {SUSTAINED_WINDOWS} windows) "
                            f"during burn-in [limit: {mlim.where()}]"))
    return out


def node_findings(doc: dict) -> list[Finding]:
    """The findings of the node at large: a gap in the windows of every GPU at once (the node or the load
    stalled: unverified, no GPU named; gpuaccept/judging/burnin_time.py)."""
    return burnin_time.stall_findings(windows_by_rank(doc), doc)[1]


def judge(doc: dict, sku: SkuSpec, xid_events: list[dict] | None = None) -> dict[int, list[Finding]]:
    """Every burn-in finding per rank (see the module docstring). ``doc``: the burnin probe's document;
    ``xid_events``: the Xid events logged during the burn-in (gpuaccept.judging.xid.classify records), the
    hardware evidence of a drift on their GPU. The node's own findings: :func:`node_findings`."""
    series = telemetry_by_rank(doc)
    world = int(doc.get("world_size") or 0)
    hours = max(0.0, float(doc.get("wall_s") or 0.0) - float(doc.get("load_started_s") or 0.0)) / 3600.0
    out = throughput_findings(doc, sku, series, burnin_time.xid_ranks(doc, xid_events))
    gpus = {int(g["rank"]): g for g in doc.get("gpus") or []}
    for r, found in sdc_findings(doc.get("sdc") or [], world).items():
        out.setdefault(r, []).extend(found)
    if doc.get("device") == "cuda":
        for r in range(world):
            out.setdefault(r, []).extend(telemetry_findings(series.get(r), sku, gpus.get(r, {}), hours))
    return out


def stopped(doc: dict) -> tuple[int | None, str] | None:
    """``(rank or None, failure line)`` when the load stopped before its time without a signal to the probe: a
    worker that died (a GPU that fell off the bus: its CUDA calls fail and its process ends) or a load that
    stopped answering (a hung GPU: every rank waits on it in the all-reduce), from the probe's ``"stopped"``
    (gpuaccept/probes/burnin.py); None when it ran its course. Rank None: which GPU cannot be told from the load
    (every rank stopped at the same step), so the line is the node's. The windows measured until then are still
    judged; this line makes sure a partial burn-in is never a pass."""
    st = doc.get("stopped")
    if not isinstance(st, dict):
        return None
    rank = st.get("rank") if isinstance(st.get("rank"), int) else None
    of = doc.get("seconds_requested")
    when = f"at {st.get('t', '?')} s" + (f" of {of:g} s" if isinstance(of, (int, float)) else "")
    counts = st.get("windows") if isinstance(st.get("windows"), dict) else {}
    measured = f"{sum(v for v in counts.values() if isinstance(v, int))} windows measured until then are judged " \
               "as a partial burn-in"
    if rank is None:
        return None, (f"burn-in load stopped {when}: {st.get('how') or 'stopped'}; a GPU stopped answering and "
                      f"every GPU waits on it in the all-reduce (the Xid events and the NVML series in "
                      f"burnin/<host>.csv may tell which); {measured}")
    tail = (st.get("stderr") or "").strip()
    return rank, (f"burn-in worker of this GPU {st.get('how') or 'stopped'} {when}"
                  + (f" (last output: {tail[-300:]})" if tail else "") + f"; {measured}")


def foreign_processes(doc: dict) -> dict[int, str]:
    """Per rank, the cause line for a foreign compute process seen on that GPU during the burn-in (the probe
    counts one process of its own per GPU); its figures then say nothing about the card."""
    out = {}
    for g in doc.get("gpus") or []:
        f = g.get("foreign_processes")
        if f:
            out[int(g["rank"])] = (f"foreign compute process on the GPU during burn-in from {f.get('t', '?')} s: "
                                   + ", ".join(f.get("processes") or ["unknown pid"]))
    return out


def series_rows(doc: dict):
    """The time series as (time s, rank, figure, value) rows: telemetry and per-window throughput."""
    tel = doc.get("telemetry") or {}
    names = (tel.get("fields") or [])[2:]
    for row in tel.get("rows") or []:
        for n, v in zip(names, row[2:]):
            if v is not None:
                yield row[0], row[1], n, v
    for w in doc.get("windows") or []:
        for fig in FIGURES:
            if w.get(fig) is not None:
                yield w["t1"], w["rank"], fig, w[fig]
