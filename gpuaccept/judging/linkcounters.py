"""Link error counters judged as their growth over a layer's load (pure).

Input: two snapshots of ``gpuaccept/probes/_linkcounters.py`` (``{"read_at", "nvlink", "ib"}``), the one read
right before a load and the one right after it (probe ``link_counters``, or the ``link_counters: {"start",
"end"}`` that ``nccl_allreduce`` and ``rdma`` add to their documents). Output: Findings for the suite to apply.

- NVLink (per GPU, per link active before the load): growth of the DL recovery counter against the SKU's
  ``nvlink_recovery_errors`` (errors), of CRC (flit + data) and replay counters as a rate over the window against
  ``nvlink_crc_errors_per_s`` / ``nvlink_replay_errors_per_s`` (errors/s): the threshold file's check keys, each
  with its source. A link active before the load and not after it fails. Each GPU's worst link is the figure.
- InfiniBand/RoCE (per port): growth of each counter of ``gpuaccept/data/ib_counter_limits.yaml`` against its
  ``max_delta``, whatever state the port reads now (a port ACTIVE at full rate whose ``link_downed`` grew went
  down during the load: the finding names both). A counter at its width's maximum before the load, or lower
  after it than before (cleared meanwhile), cannot show growth: not measured, never a pass.
- A failing counter is hardware (the counter reading is the evidence, in the cause); a missing reading (a
  replayed capture taken before the counters were read, a snapshot that failed) is an error "not measured"
  with its reason, never a silent pass.
"""
from __future__ import annotations

import functools
import os
from typing import Any

from gpuaccept.causes import Cause
from gpuaccept.config.thresholds import Limit, SkuSpec, judge
from gpuaccept.config.yamlload import load_data
from gpuaccept.judging.health import Finding, nvml_error

IB_LIMITS_FILE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "ib_counter_limits.yaml")
#: NVLink counters per kind of limit: (threshold file check key, counters summed, judged as a rate)
NVLINK_CHECKS = (("nvlink_recovery_errors", ("recovery",), False),
                 ("nvlink_crc_errors_per_s", ("crc_flit", "crc_data"), True),
                 ("nvlink_replay_errors_per_s", ("replay",), True))


@functools.lru_cache(maxsize=1)
def ib_limits() -> dict[str, dict]:
    """``{counter: {"max_delta", "width_bits", "meaning"}}`` from gpuaccept/data/ib_counter_limits.yaml, and the
    file's ``source`` under the key ``"(source)"``."""
    with open(IB_LIMITS_FILE, encoding="utf-8") as f:
        data = load_data(f)
    return {**data["counters"], "(source)": {"source": data["source"], "date": str(data["date"])}}


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def window_s(start: dict, end: dict) -> float | None:
    """Seconds between two snapshots (their node-side ``read_at``), or None when either lacks it."""
    a, b = start.get("read_at"), end.get("read_at")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b >= a:
        return round(float(b) - float(a), 3)
    return None


def unmeasured(load: str, why: str) -> Finding:
    """The error for a load whose counters were not read before and after it (``why``: the reason)."""
    return Finding("link_counters", None, error=f"link error counters not measured around {load}: {why}",
                   cause=Cause("tool", "link_counters_unmeasured", evidence={"load": load, "why": why}))


def not_measured_why(kept: dict | None, host: str, probe: str, absent: str) -> str | None:
    """Why the link counters a load kept for ``host`` (``{"doc", "replayed", "load"}``, or None: no load ran there
    in this run, ``absent`` says why) cannot be judged, as the skip reason; None when they can (a live run without
    readings is judged: not measured, an error, never a pass). A replayed ``probe`` capture without readings
    was taken before the probe read them: not measured."""
    if kept is None:
        return f"{host}: {absent}"
    if kept["doc"] is None and kept["replayed"]:
        return f"{host}: not measured: the replayed {probe} capture predates the link error counter readings"
    return None


def pair(doc: dict | None, load: str) -> tuple[dict, dict] | Finding:
    """``(start, end)`` from a document carrying ``link_counters: {"start", "end"}`` (nccl_allreduce, rdma), or
    the :func:`unmeasured` error naming why there is none (a capture taken by an older gpuaccept lacks them)."""
    got = (doc or {}).get("link_counters")
    if not isinstance(got, dict):
        return unmeasured(load, "the document has no link_counters (a capture taken before the counters were read)")
    if got.get("error"):
        return unmeasured(load, str(got["error"]))
    if not isinstance(got.get("start"), dict) or not isinstance(got.get("end"), dict):
        return unmeasured(load, "a reading before or after the load is missing")
    for side in ("start", "end"):
        if got[side].get("error"):
            return unmeasured(load, f"the reading at the {side} failed: {got[side]['error']}")
    return got["start"], got["end"]


def _links(part: Any) -> dict[tuple, dict]:
    """{(gpu index, link): {"errors", "bus"}} of a snapshot's ``nvlink`` part."""
    out = {}
    for g in (part or {}).get("gpus") or []:
        for lk in g.get("links") or []:
            out[(g.get("index"), lk.get("link"))] = {"errors": lk.get("errors") or {}, "bus": g.get("pci_bus_id")}
    return out


def nvlink(start: dict, end: dict, sku: SkuSpec, load: str) -> list[tuple[int | None, Finding]]:
    """``[(gpu index, Finding)]`` for the NVLink counters of two snapshots (module docstring). Nothing when the
    SKU has no NVLink (``expect.nvlink_links`` 0) or neither snapshot read any link; raises ThresholdError when
    an NVLink SKU's file lacks one of :data:`NVLINK_CHECKS`."""
    out: list[tuple[int | None, Finding]] = []
    for side, snap in (("before", start), ("after", end)):
        stuck = (snap.get("nvlink") or {}).get("unresponsive")
        if stuck:
            out.append((stuck.get("gpu"), Finding(
                "nvlink_counters_read", None, failure=f"NVLink counters {side} {load}: "
                f"{(snap.get('nvlink') or {}).get('msg') or 'driver unresponsive'}",
                cause=Cause("hardware", "driver_unresponsive", gpu=stuck.get("gpu"), evidence=dict(stuck)))))
    if out or not sku.expect.get("nvlink_links"):
        return out
    before, after = _links(start.get("nvlink")), _links(end.get("nvlink"))
    if not before and not after:
        return out
    limits = {check: sku.limit(check) for check, _, _ in NVLINK_CHECKS}
    secs = window_s(start, end)
    for gpu in sorted({k[0] for k in before}, key=lambda i: (i is None, i)):
        out += [(gpu, f) for f in _gpu_links(gpu, before, after, limits, secs, load)]
    return out


def _gpu_links(gpu, before: dict, after: dict, limits: dict[str, Limit], secs: float | None,
               load: str) -> list[Finding]:
    """Findings of one GPU's links: the worst link per check as the figure, each failing link named."""
    out: list[Finding] = []
    worst: dict[str, tuple] = {}
    for (g, link), b in sorted(before.items(), key=lambda kv: kv[0][1]):
        if g != gpu:
            continue
        a = after.get((g, link))
        if a is None:
            out.append(Finding("nvlink_link_lost", link, extra={"link": link}, failure=(
                f"NVLink {link} active before {load}, not after it"), cause=Cause(
                "hardware", "nvlink_link_errors", gpu=gpu, evidence={"link": link, "counter": "state", "load": load})))
            continue
        for check, names, rate in NVLINK_CHECKS:
            s = [_int(b["errors"].get(n)) for n in names]
            e = [_int(a["errors"].get(n)) for n in names]
            if None in s or None in e:
                said = [nvml_error(x["errors"].get(n)) for x in (b, a) for n in names]
                worst.setdefault(check, (None, link, "unreadable: " + "; ".join(x for x in said if x)))
                continue
            grew = sum(e) - sum(s)
            if grew < 0:
                out.append(Finding(check, None, extra={"link": link}, error=(
                    f"NVLink {link} {'+'.join(names)} counters went down over {load} ({sum(s)} -> {sum(e)}): "
                    f"cleared meanwhile, growth not measured"), cause=Cause("unverified", "link_counter_unusable",
                                                                           gpu=gpu, evidence={"link": link})))
                continue
            if rate and not secs:
                continue
            value = round(grew / secs, 3) if rate else grew
            v = judge(limits[check], value, context=f"NVLink {link}, {load}")
            ev = {"link": link, "counter": "+".join(names), "before": sum(s), "after": sum(e), "window_s": secs,
                  "load": load}
            if not v.passed:
                out.append(Finding(check + " link", value, limits[check].unit, extra=ev, failure=(
                    f"{v.message}: {'+'.join(names)} {sum(s)} -> {sum(e)} over {secs} s"),
                    cause=Cause("hardware", "nvlink_link_errors", gpu=gpu, evidence=ev)))
            if check not in worst or worst[check][0] is None or value > worst[check][0]:
                worst[check] = (value, link, ev)
    for check, (value, link, ev) in worst.items():
        lim = limits[check]
        if value is None:
            out.append(Finding(check, None, lim.unit, extra={"link": link, "note": ev}))
        elif judge(lim, value).passed:
            out.append(Finding(check, value, lim.unit, limit=lim, extra={"worst_link": link, **ev}))
        else:  # the failing links are named above; the figure is recorded, not judged twice
            out.append(Finding(check, value, lim.unit, extra={"worst_link": link, **ev, "limit": lim.describe()}))
    return out


def _ports(part: Any) -> dict[tuple, dict]:
    return {(p.get("device"), p.get("port")): p for p in (part or {}).get("ports") or []}


def ib(start: dict, end: dict, load: str, limits: dict | None = None) -> list[Finding]:
    """Findings for the InfiniBand/RoCE port counters of two snapshots (module docstring); ``limits``: default
    :func:`ib_limits`. Nothing when neither snapshot found a port."""
    limits = limits or ib_limits()
    src = limits.get("(source)", {}).get("source", "gpuaccept/data/ib_counter_limits.yaml")
    before, after = _ports(start.get("ib")), _ports(end.get("ib"))
    secs = window_s(start, end)
    out: list[Finding] = []
    for key in sorted(before, key=str):
        dev, port = key
        name = f"{dev} port {port}"
        p0, p1 = before[key], after.get(key)
        if p1 is None:
            out.append(Finding(f"ib_port_errors {dev}/{port}", None, error=f"{name}: present before {load}, "
                               f"gone after it", cause=Cause("unverified", "link_counter_unusable",
                                                             evidence={"device": dev, "port": port})))
            continue
        now = f"{p1.get('state') or '?'}, {p1.get('rate') or 'rate unknown'}"
        deltas: dict[str, int | None] = {}
        for counter, lim in ((k, v) for k, v in limits.items() if k != "(source)"):
            s, e = _int((p0.get("counters") or {}).get(counter)), _int((p1.get("counters") or {}).get(counter))
            if s is None or e is None:
                deltas[counter] = None  # the driver does not expose it: recorded as unread
                continue
            ev = {"device": dev, "port": port, "counter": counter, "before": s, "after": e, "window_s": secs,
                  "load": load, "state_now": p1.get("state"), "rate_now": p1.get("rate")}
            if s >= (1 << int(lim["width_bits"])) - 1 or e < s:
                why = (f"at its {lim['width_bits']}-bit maximum {s} before the load" if e >= s
                       else f"went down ({s} -> {e}): cleared during the load")
                out.append(Finding(f"ib_{counter}", None, extra=ev, error=f"{name}: {counter} {why}: its growth "
                                   f"over {load} cannot be read", cause=Cause("unverified", "link_counter_unusable",
                                                                              evidence=ev)))
                deltas[counter] = None
                continue
            deltas[counter] = e - s
            if e - s > int(lim["max_delta"]):
                out.append(Finding(f"ib_{counter}", e - s, "errors", extra=ev, failure=(
                    f"{name} ({p1.get('link_layer') or '?'}): {counter} grew by {e - s} over {load} ({s} -> {e}"
                    f"{f' in {secs:g} s' if secs else ''}) though it reads {now} now; {lim['meaning']} "
                    f"[limit: growth <= {lim['max_delta']}, ib_counter_limits.yaml counters.{counter}]"),
                    cause=Cause("hardware", "ib_link_errors", evidence=ev)))
        hw = {k: _int(v) - _int((p0.get("hw_counters") or {}).get(k))
              for k, v in (p1.get("hw_counters") or {}).items()
              if _int(v) is not None and _int((p0.get("hw_counters") or {}).get(k)) is not None}
        out.append(Finding(f"ib_port_errors {dev}/{port}", deltas, "errors", extra={
            "load": load, "window_s": secs, "state_now": p1.get("state"), "rate_now": p1.get("rate"),
            "hw_counters_grew": {k: v for k, v in hw.items() if v}, "source": src}))
    return out


def judged(start: dict, end: dict, sku: SkuSpec | None, load: str) -> list[tuple[int | None, Finding]]:
    """:func:`nvlink` (when ``sku`` is given) and :func:`ib` of one load, as ``[(gpu index or None, Finding)]``."""
    out = nvlink(start, end, sku, load) if sku is not None else []
    return out + [(None, f) for f in ib(start, end, load)]


def findings(doc: dict | None, sku: SkuSpec | None, load: str) -> list[tuple[int | None, Finding]]:
    """Every finding of a load document carrying ``link_counters: {"start", "end"}`` (:func:`pair`, then
    :func:`judged`), as ``[(gpu index or None, Finding)]``; the :func:`unmeasured` error when it has none."""
    got = pair(doc, load)
    if isinstance(got, Finding):
        return [(None, got)]
    return judged(got[0], got[1], sku, load)
