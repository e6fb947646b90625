"""What the whole-run files count over every record, kept up to date record by record (:class:`RunTally`, pure), so
that the end of a run (summary.md, the JUnit headers, failed-hosts.txt, report.html) walks no record or figure
again: each is looked at once, when it arrives.
"""
from __future__ import annotations

from gpuaccept.reporting.heatmap import HeatCells
from gpuaccept.reporting.records import CaseRecord
from gpuaccept.reporting.verdicts import is_gpu_judged


def layer_entry() -> dict:
    """A layer's entry of :attr:`RunTally.layers`, empty: ``{"recs", "durations", "hosts", "failed", "error",
    "skipped"}`` (what its JUnit header counts)."""
    return {"recs": [], "durations": [], "hosts": {}, "failed": 0, "error": 0, "skipped": 0}


def count_in_layer(lay: dict, r: CaseRecord) -> dict:
    """Count record ``r`` in its layer's entry ``lay`` (:func:`layer_entry`); returns ``lay``."""
    lay["recs"].append(r)
    lay["durations"].append(r.duration_s)
    lay["hosts"][r.host or "fleet"] = None
    if r.outcome in ("failed", "error", "skipped"):
        lay[r.outcome] += 1
    return lay


class RunTally:
    """Per record (:meth:`add`: O(its figures)):

    ``counts``: ``(host or "fleet", layer) -> {outcome: n}`` (summary.md's counts); ``layers``: ``layer -> {"recs":
    [record], "durations": [s], "hosts": {host or "fleet": None}, outcome: n}`` (the JUnit files, in arrival
    order); ``skipped`` and ``bad`` (failed or errored): those records in order; ``unstable``: the figures judged
    unstable (gpuaccept.judging.confirm); ``replayed``: replay note -> hosts (gpuaccept.runner.replay);
    ``gpu_judged``: figures of a GPU judged against a limit; ``heat``: the heatmap's cells
    (gpuaccept.reporting.heatmap.HeatCells); ``busbw_tables`` and ``busbw_floors``: per host its first all-reduce
    table and its last busbw floor ``(min, bytes)`` (report.html's busbw plots)."""

    def __init__(self):
        self.counts: dict[tuple[str, str], dict[str, int]] = {}
        self.layers: dict[str, dict] = {}
        self.skipped: list[CaseRecord] = []
        self.bad: list[CaseRecord] = []
        self.unstable: list[dict] = []
        self.replayed: dict[str, list[str]] = {}
        self.gpu_judged = 0
        self.heat = HeatCells()
        self.busbw_tables: dict[str, list] = {}
        self.busbw_floors: dict[str, tuple] = {}

    def add(self, r: CaseRecord) -> None:
        """Count record ``r`` (its outcome for its host and layer, its figures)."""
        host = r.host or "fleet"
        c = self.counts.setdefault((host, r.layer), {})
        c[r.outcome] = c.get(r.outcome, 0) + 1
        lay = self.layers.get(r.layer)
        if lay is None:
            lay = self.layers[r.layer] = layer_entry()
        count_in_layer(lay, r)
        if r.outcome in ("failed", "skipped", "error"):
            (self.skipped if r.outcome == "skipped" else self.bad).append(r)
        if r.figures:
            self.add_figures(r.figures, host)

    def add_figures(self, figures: list[dict], host: str = "fleet") -> None:
        """Count ``figures`` (of a record of ``host``, or "fleet")."""
        judged = 0
        for f in figures:
            v = f.get("verdict")
            if is_gpu_judged(f):
                judged += 1
            elif v == "unstable":
                self.unstable.append(f)
            check = f.get("check")
            if check == "replay_note" and isinstance(f.get("value"), str):
                hs = self.replayed.setdefault(f["value"], [])
                if host not in hs:
                    hs.append(host)
            elif check == "allreduce_table" and isinstance(f.get("value"), list):
                self.busbw_tables.setdefault(str(f.get("host")), f["value"])
            elif check == "allreduce_busbw_gbps" and "min" in (f.get("limit") or {}):
                self.busbw_floors[str(f.get("host"))] = (float(f["limit"]["min"]), (f.get("extra") or {}).get("bytes"))
        self.gpu_judged += judged
        self.heat.add(figures)

    def add_all(self, recs) -> "RunTally":
        """:meth:`add` each of ``recs``; returns the tally itself."""
        for r in recs:
            self.add(r)
        return self
