"""The per-GPU table of summary.md and report.html (pure): :func:`gpu_table`, and :class:`GpuTable` keeping it
up to date figure by figure.
"""
from __future__ import annotations

from typing import Any


def gpu_table(figures: list[dict]) -> tuple[list[str], list[dict]]:
    """Per-GPU rows of judged per-GPU figures (pure): ``(checks, rows)``; each row ``{host, gpu, pci_bus_id,
    serial, cells: {check: figure}}``, ordered by host then GPU index; checks in first-seen order. Key figures
    only: the throughputs (``min`` limits) and any check that failed somewhere (error counts and
    below-median percentages that passed everywhere are in results.json). See :class:`GpuTable`."""
    return GpuTable().add(figures).table()


class GpuTable:
    """:func:`gpu_table` kept up to date figure by figure (:meth:`add`: O(its figures)), so that a whole-run
    write makes only the rows it shows (:meth:`table` for some hosts; :meth:`count` of all rows).

    Per (host, GPU) and check it keeps the first judged figure, the first with a ``min`` limit and the first
    that failed; the cell shown is, for a check that failed somewhere, the first failing figure else the first,
    and otherwise the first with a ``min`` limit (what one pass over the filtered figures picks). A row's bus id
    and serial: the first any judged figure of that GPU gives (before 2026-11-30: of the figures shown only)."""

    def __init__(self):
        self.rows: dict[tuple, dict] = {}
        self.by_host: dict[Any, list[dict]] = {}
        self.failing: set[str] = set()
        self.first_any: dict[str, int] = {}  # check -> sequence number of its first judged per-GPU figure
        self.first_min: dict[str, int] = {}  # ... of its first with a min limit
        self._n = 0
        self._last: tuple | None = None  # (figures taken, hosts asked for, the table made then)
        self._counted: tuple[int, int] | None = None  # (figures taken, count() then)

    def add(self, figures: list[dict]) -> "GpuTable":
        """Take the judged per-GPU figures of ``figures`` (O(their number)); returns the table itself."""
        for f in figures:
            if f.get("gpu") is None:
                continue
            v = f.get("verdict")
            if v != "pass" and v != "fail":
                continue
            self._n += 1
            c = f["check"]
            if c not in self.first_any:
                self.first_any[c] = self._n
            has_min = "min" in (f.get("limit") or {})
            if has_min and c not in self.first_min:
                self.first_min[c] = self._n
            key = (f["host"], f["gpu"])
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = {"host": f["host"], "gpu": f["gpu"], "pci_bus_id": None, "serial": None,
                                        "any": {}, "min": {}, "fail": {}}
                self.by_host.setdefault(f["host"], []).append(row)
            row["pci_bus_id"] = row["pci_bus_id"] or f.get("pci_bus_id")
            row["serial"] = row["serial"] or f.get("serial")
            row["any"].setdefault(c, f)
            if has_min:
                row["min"].setdefault(c, f)
            if v == "fail":
                self.failing.add(c)
                row["fail"].setdefault(c, f)
        return self

    def _cells(self, row: dict) -> dict[str, dict]:
        cells = {c: f for c, f in row["min"].items() if c not in self.failing}
        for c in self.failing:
            f = row["fail"].get(c) or row["any"].get(c)
            if f is not None:
                cells[c] = f
        return cells

    def count(self) -> int:
        """How many rows :meth:`table` of every host has (counted once per figure added)."""
        if self._counted is not None and self._counted[0] == self._n:
            return self._counted[1]
        n = sum(1 for r in self.rows.values() if r["min"] or (self.failing and not self.failing.isdisjoint(r["any"])))
        self._counted = (self._n, n)
        return n

    def table(self, only: set | None = None) -> tuple[list[str], list[dict]]:
        """``(checks, rows)`` as :func:`gpu_table`; with ``only``, the rows of those hosts alone (the checks
        are still every check shown for any host). Asked again for the same hosts with no figure added since
        (summary.md, then report.html), the same table (its lists are not to be changed by the caller)."""
        asked = None if only is None else frozenset(only)
        if self._last is not None and self._last[0] == self._n and self._last[1] == asked:
            return self._last[2]
        made = self._table(only)
        self._last = (self._n, asked, made)
        return made

    def _table(self, only: set | None) -> tuple[list[str], list[dict]]:
        checks = sorted((c for c in self.first_any if c in self.failing or c in self.first_min),
                        key=lambda c: self.first_any[c] if c in self.failing else self.first_min[c])
        rows = [r for h, rs in self.by_host.items() if only is None or h in only for r in rs]
        out = []
        for r in sorted(rows, key=lambda r: (str(r["host"]), r["gpu"])):
            cells = self._cells(r)
            if cells:
                out.append({"host": r["host"], "gpu": r["gpu"], "pci_bus_id": r["pci_bus_id"], "serial": r["serial"],
                            "cells": {c: cells[c] for c in checks if c in cells}})
        return checks, out
