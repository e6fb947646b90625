"""Burn-in judging by time (pure): window gaps, the below-node-median rule weighed by seconds, and the hardware
evidence a burn-in finding of one GPU needs before it takes a hardware action.

Found by a trial (2026-12-06): a GPU stuck 30 s inside its matmuls reported one 35 s window at 1/7 of its
TFLOP/s, and a GPU (or every GPU) that reported no window for 30 s, all PASSED: the below-median rule counted
windows, not seconds, and matched windows across GPUs by position, and nothing looked at the time between
windows. Here every window counts for its seconds and is compared with the windows of the other GPUs that cover
the same seconds.

Bounds, from the probe's own window (``config.window_s`` of the document, else :data:`WINDOW_S`):

- gap: a GPU closes a window every ``window_s`` plus at most one step (a window ends at the first step past
  ``window_s``, gpuaccept/probes/burnin.py ``_loop``); ranks in lockstep are at most one window apart
  (``_behind``). More than :data:`GAP_WINDOWS` windows' worth of seconds between two consecutive window closes
  of one GPU is a stall of that GPU (the same 3 windows as the sustained rule below; the probe's own
  ``stall_s``, max(120 s, 6 windows), stops the whole load only when *no* GPU reports);
- sustained below the node's median: the longest unbroken stretch of seconds a GPU is more than
  ``below_node_median_pct`` below the median of the GPUs measured in the same seconds, against
  :data:`SUSTAINED_WINDOWS` windows' worth of seconds (the compute layer's 3 consecutive windows, in seconds).

Classes (gpuaccept/causes.py), decided from the document, never from a message:

- a gap of every GPU at once (each GPU's gap overlaps a gap of every other; on a one-GPU node, any gap) is the
  node or the load: one node finding, ``unverified`` (``burnin_node_stall``), never a hardware action on one GPU;
- a gap or a sustained slow stretch of one GPU while its peers kept their windows under the same load is that
  GPU: ``hardware`` (``burnin_gpu_stall``, ``burnin_below_node_median``) when no foreign compute process was
  on any GPU of the node during the burn-in (the only conditions the probe watches: its lockstep ties the
  GPUs together, so another process anywhere disturbs all), else ``unverified`` (``burnin_disturbed``);
- a drift of one GPU is hardware only with hardware evidence on that GPU (:func:`hardware_evidence`).
"""
from __future__ import annotations

from gpuaccept.causes import Cause
from gpuaccept.judging.health import Finding
from gpuaccept.judging.readings import bus_key
from gpuaccept.judging.standouts import median

# The probe's window on a GPU, seconds (gpuaccept/probes/burnin.py CUDA_DEFAULTS["window_s"]), when the
# document does not say its own.
WINDOW_S = 10.0
# Windows' worth of seconds: a GPU below its node's median this long fails (the compute layer's 3 consecutive
# windows); a GPU with no window closed for more than this long stalled.
SUSTAINED_WINDOWS = 3
GAP_WINDOWS = 3


def window_s(doc: dict) -> float:
    """The probe's window length in seconds: the document's ``config.window_s``, else :data:`WINDOW_S`."""
    w = (doc.get("config") or {}).get("window_s")
    return float(w) if isinstance(w, (int, float)) and w > 0 else WINDOW_S


def disturbed(doc: dict) -> list[int]:
    """The ranks on which the probe saw a foreign compute process during the burn-in (``gpus[].foreign_processes``)."""
    return sorted(int(g["rank"]) for g in doc.get("gpus") or [] if g.get("foreign_processes"))


def gaps(ws: list[dict], bound_s: float) -> tuple[int, float, float | None, list[tuple[float, float]]]:
    """One GPU's windows (any order) -> (window count, longest time in s between two consecutive window closes,
    when that began (s since the burn-in's start, None with fewer than 2 windows), the intervals ``(t0, t1)``
    longer than ``bound_s`` during which the GPU closed no window)."""
    ends = sorted(w["t1"] for w in ws if isinstance(w.get("t1"), (int, float)))
    longest, began, over = 0.0, None, []
    for a, b in zip(ends, ends[1:]):
        if b - a > longest:
            longest, began = b - a, a
        if b - a > bound_s:
            over.append((a, b))
    return len(ends), round(longest, 2), (round(began, 2) if began is not None else None), over


def stall_findings(by_rank: dict[int, list[dict]], doc: dict):
    """Per rank the window count and longest gap as figures, and the stalls: ``(per_rank, node)`` where
    ``per_rank`` is ``{rank: [Finding...]}`` and ``node`` a list of Findings of the node at large (a gap every GPU
    shared). ``by_rank``: every window of each rank from the load's start (warm-up included: a stall there is a
    stall too). Bound: :data:`GAP_WINDOWS` x :func:`window_s`. Raises nothing."""
    win = window_s(doc)
    bound = GAP_WINDOWS * win
    gpus = {int(g["rank"]): g for g in doc.get("gpus") or []}
    clean = not disturbed(doc)
    info = {r: gaps(ws, bound) for r, ws in by_rank.items()}
    per_rank: dict[int, list] = {r: [] for r in by_rank}
    shared: list[tuple[float, float]] = []
    for r, (count, longest, began, over) in sorted(info.items()):
        ext = {"bound_s": bound, "window_s": win, "from_s": began}
        per_rank[r].append(Finding("burnin_windows_closed", count, "windows"))
        per_rank[r].append(Finding("burnin_longest_gap_s", longest, "s", extra=ext))
        others = [info[o][3] for o in info if o != r]
        for a, b in over:
            if all(any(x < b and a < y for x, y in o) for o in others):  # every GPU at once (or the only one)
                if not any(x < b and a < y for x, y in shared):
                    shared.append((a, b))
                continue
            ev = {"gap_s": round(b - a, 2), "from_s": round(a, 2), "bound_s": bound,
                  "pci_bus_id": gpus.get(r, {}).get("pci_bus_id"), "foreign_on_ranks": disturbed(doc)}
            idx = gpus.get(r, {}).get("index", r)
            kind, cls = ("burnin_gpu_stall", "hardware") if clean else ("burnin_disturbed", "unverified")
            per_rank[r].append(Finding(
                "burnin_gap_s", round(b - a, 2), "s", extra=ev, cause=Cause(cls, kind, gpu=idx, evidence=ev),
                failure=(f"no throughput window for {b - a:.1f} s from {a:.1f} s of the burn-in while the other "
                         f"GPUs kept theirs (bound {bound:g} s = {GAP_WINDOWS} windows of {win:g} s)"
                         + ("" if clean else "; a foreign process was on the node: not proven this GPU's"))))
    node = []
    for a, b in shared:
        ev = {"gap_s": round(b - a, 2), "from_s": round(a, 2), "bound_s": bound, "ranks": sorted(info)}
        node.append(Finding("burnin_node_gap_s", round(b - a, 2), "s", extra=ev,
                            cause=Cause("unverified", "burnin_node_stall", evidence=ev),
                            failure=f"no throughput window from any GPU for {b - a:.1f} s from {a:.1f} s of the "
                                    f"burn-in (bound {bound:g} s = {GAP_WINDOWS} windows of {win:g} s): the node "
                                    f"or the load stalled, no one GPU is singled out"))
    return per_rank, node


def below_median_seconds(by_rank: dict[int, list[dict]], figure: str, pct: float) -> dict[int, tuple[float, float]]:
    """Per rank: (longest unbroken stretch in seconds more than ``pct`` below the node's median, worst percent
    below). Each window counts for its seconds: the time is cut at every window boundary of every rank, and in
    each piece a rank's value is that of its window covering it, the median that of the ranks covering it (two
    at least). A piece the rank has no window over breaks its stretch."""
    spans = {r: [(w["t0"], w["t1"], w[figure]) for w in ws if isinstance(w.get(figure), (int, float))]
             for r, ws in by_rank.items()}
    cuts = sorted({t for s in spans.values() for a, b, _ in s for t in (a, b)})
    run = {r: [0.0, 0.0, 0.0, None] for r in spans}  # current, longest, worst, end of the current stretch
    for a, b in zip(cuts, cuts[1:]):
        vals = {}
        for r, s in spans.items():
            v = next((v for t0, t1, v in s if t0 <= a and b <= t1), None)
            if v is not None:
                vals[r] = v
        med = median(vals.values()) if len(vals) >= 2 else None
        for r in spans:
            below = (med - vals[r]) / med * 100.0 if med and r in vals else None
            cur = run[r]
            if below is not None and below > pct:
                cur[0] = (cur[0] if cur[3] == a else 0.0) + (b - a)
                cur[1], cur[2], cur[3] = max(cur[1], cur[0]), max(cur[2], below), b
            else:
                cur[0], cur[3] = 0.0, None
    return {r: (round(v[1], 2), v[2]) for r, v in run.items()}


def slow_cause(doc: dict, rank: int, evidence: dict) -> Cause:
    """The cause of one GPU's sustained slow stretch against its peers: ``hardware`` (``burnin_below_node_median``)
    when no foreign process was on the node, else ``unverified`` (``burnin_disturbed``)."""
    idx = next((g.get("index", rank) for g in doc.get("gpus") or [] if g.get("rank") == rank), rank)
    ev = {**evidence, "foreign_on_ranks": disturbed(doc)}
    if ev["foreign_on_ranks"]:
        return Cause("unverified", "burnin_disturbed", gpu=idx, evidence=ev)
    return Cause("hardware", "burnin_below_node_median", gpu=idx, evidence=ev)


def xid_ranks(doc: dict, events: list[dict] | None) -> dict[int, list]:
    """Per rank, the Xid numbers of ``events`` (gpuaccept.judging.xid.classify records: ``pci_bus_id``, ``xid``)
    logged for that rank's GPU, matched by PCI bus id (gpuaccept.judging.readings.bus_key)."""
    by_bus = {bus_key(g.get("pci_bus_id")): int(g["rank"]) for g in doc.get("gpus") or []}
    out: dict[int, list] = {}
    for ev in events or []:
        r = by_bus.get(bus_key(ev.get("pci_bus_id")))
        if r is not None:
            out.setdefault(r, []).append(ev.get("xid"))
    return out


def hardware_evidence(hw_events: list[str], temp_max, temp_limit, xids: list) -> tuple[list[str], list[str]]:
    """(what was seen that is a reading of the part, what was looked for and not seen), for one GPU over the
    burn-in: a HW slowdown / HW thermal / HW power brake clock event (``hw_events``, names), a temperature past
    the SKU file's ``temp_c`` (``temp_limit``, a Limit or None), an Xid of that GPU (``xids``)."""
    seen, not_seen = [], []
    (seen if hw_events else not_seen).append(", ".join(hw_events) if hw_events else
                                             "no HW slowdown / HW thermal / HW power brake clock event")
    over = (temp_limit is not None and isinstance(temp_max, (int, float)) and temp_max > temp_limit.bound)
    if temp_limit is not None and isinstance(temp_max, (int, float)):
        (seen if over else not_seen).append(f"max {temp_max:g} C " + ("over" if over else "within")
                                            + f" the SKU's {temp_limit.bound:g} C")
    (seen if xids else not_seen).append(f"Xid {', '.join(map(str, xids))} of this GPU" if xids else "no Xid of this GPU")
    return seen, not_seen
