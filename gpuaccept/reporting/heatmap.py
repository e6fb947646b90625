"""report.html's host x check heatmap (pure): :class:`HeatCells` keeps each cell's worst figure up to date
figure by figure (one pass over the figures, in gpuaccept.reporting.tally.RunTally), so that the end of a run
makes only the rows the page shows, each cell's colour and title once, from its worst figure.
"""
from __future__ import annotations

from gpuaccept.reporting.text import fmt, limit_text


def ratio_color(ratio: float, kind: str, standout: bool = False) -> str:
    """Heatmap colour, for what needs a look only: red outside the limit, amber for a stand-out (a figure
    within its limit but worse than its peers, baseline or previous run), none otherwise (a healthy card at
    1.07x its floor was painted amber)."""
    margin = (ratio - 1.0) if kind == "min" else (1.0 - ratio)
    if margin < 0:
        return "#f4b4ae"
    return "#fde68a" if standout else ""


class HeatCells:
    """The heatmap's cells as figures arrive (:meth:`add`: O(its figures)): the checks judged numerically anywhere
    (the columns, first seen first) and per (host, check) the worst value/limit over the host's GPUs, whether
    any of them failed, and the worst figure (its title)."""

    def __init__(self):
        self.checks: list[str] = []
        self.seen: set[str] = set()
        self.worst: dict[tuple[str, str], list] = {}  # (host, check) -> [ratio, kind, failed?, worst figure]

    def add(self, figures: list[dict]) -> "HeatCells":
        """Take the judged numeric figures of ``figures``; returns the cells themselves."""
        worst, seen = self.worst, self.seen
        for f in figures:
            lim = f.get("limit")
            if not lim:
                continue
            kind = "min" if "min" in lim else "max" if "max" in lim else None
            v = f.get("value")
            if kind is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not lim[kind]:
                continue
            check = f["check"]
            if check not in seen:  # a column, if some figure of the check is judged numerically
                seen.add(check)
                self.checks.append(check)
            ratio = float(v) / float(lim[kind])
            key = (str(f.get("host")), check)
            old = worst.get(key)
            failed = f.get("verdict") == "fail"
            if old is None:
                worst[key] = [ratio, kind, failed, f]
            else:
                if ratio < old[0] if kind == "min" else ratio > old[0]:
                    old[0], old[3] = ratio, f
                old[2] = old[2] or failed
        return self

    def result(self, only: set | None = None, standouts: set | None = None) -> dict:
        """Host x check cells: ``{"checks", "rows": [{host, cells: [cell or None per check]}]}``. ``only``: rows
        for these hosts alone (the columns are still every check judged anywhere); ``standouts``: the (host,
        check) pairs with a stand-out, painted amber (:func:`ratio_color`)."""
        cells: dict[tuple[str, str], dict] = {}
        stand = standouts or ()
        for key, (ratio, kind, failed, f) in self.worst.items():
            if only is not None and key[0] not in only:
                continue
            cells[key] = {"check": key[1], "ratio": ratio, "kind": kind, "verdict": "fail" if failed else "pass",
                          "color": ratio_color(ratio, kind, key in stand),
                          "title": f"{f.get('host')} {key[1]}{'' if f.get('gpu') is None else ' GPU ' + str(f['gpu'])}"
                                   f": {fmt(f.get('value'))} {f.get('unit') or ''} vs {limit_text(f['limit'])}"}
        hosts = sorted({h for h, _ in cells})
        checks = self.checks
        return {"checks": list(checks),
                "rows": [{"host": h, "cells": [cells.get((h, c)) for c in checks]} for h in hosts]}
