"""The history's comparisons: each figure's references from earlier runs (:func:`references`, and in one query
over a run's rows, :func:`run_standouts`), judged by the one stand-out rule (gpuaccept.judging.standouts:
:func:`standouts`, :func:`fleet_outliers`).
"""
from __future__ import annotations

import sqlite3
import time
from typing import Iterable

from gpuaccept.judging.standouts import PCT, check_of, peer_groups, peer_outliers, reference_standouts, subject_of
from gpuaccept.reporting import baseline as baseline_mod
from gpuaccept.reporting.history.sqlrules import _sql_burnin_key, _sql_is_burnin

#: percent below a reference above which a figure is a stand-out (``--standout-pct``; gpuaccept.judging.standouts)
STANDOUT_PCT = PCT


def _day(started) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(started)) if isinstance(started, (int, float)) else "?"


def run_standouts(con: sqlite3.Connection, run_id: str, baseline: str | None = None,
                  pct: float = STANDOUT_PCT, after: int = 0) -> tuple[list[dict], int]:
    """:func:`standouts` of :func:`references` for the figures run ``run_id`` has in the database with a rowid
    above ``after``: the same rules and records, in one query against ``latest`` (not yet updated by this run)
    that returns only the figures below some reference by more than ``pct`` (SQLite compares; Python applies
    the like-with-like SKU rule, names the reference and builds the records, for those rows only).

    Compared: throughput figures (a ``min`` limit, a numeric value) and burn-in throughput figures
    (gpuaccept.reporting.baseline). Baseline: ``baseline`` when given, ``"latest-pass"`` (``latest`` kind ``pass``) or a
    run id (that run's first figure of the subject and check, else of the burn-in figure that is the check's
    baseline, "run R, as burnin_bf16_tflops_start"); else ``latest`` kind ``burnin`` ("burn-in on
    2026-11-02", with ", as burnin_..._start" when that run's figure was the burn-in suite's, mapped to the
    check); without a burn-in, ``latest`` kind ``first`` ("first pass on 2026-11-01": the first run where the
    subject's check passed). Returns ``(records, the highest rowid of the run's figures seen)`` so that the next call looks at
    newer rows only."""
    below = "({r}.value IS NOT NULL AND {r}.value != 0 AND ({r}.value - m.value) / abs({r}.value) * 100.0 > :pct)"
    explicit = bool(baseline) and baseline != "latest-pass"

    # A figure of a given run, subject and check: looked up by figures_subject (subject, check_, started) with the
    # run's start (every row of a run carries its run's ``started``: record_run, RunRecorder), one index search;
    # by figures_run the planner would walk the whole run (1.84 M rows at 10,000 hosts) per figure.
    def of_run(run: str, check: str) -> str:
        return (f"FROM figures b INDEXED BY figures_subject WHERE b.subject=m.subject AND b.check_={check} "
                f"AND b.started=(SELECT r.started FROM runs r WHERE r.run_id={run}) AND b.run_id={run}")

    def run_ref(col: str, check: str) -> str:  # the baseline run's first figure of the subject and ``check``
        return f"(SELECT b.{col} {of_run(':base', check)} ORDER BY b.rowid LIMIT 1)"
    mapped = _sql_burnin_key("m.check_")
    refs = " OR ".join(below.format(r=r) for r in ("p", "k", "s", "f"))
    if explicit:  # x / 0 is NULL in SQLite: a zero reference compares false
        rv = f"coalesce({run_ref('value', 'm.check_')}, {run_ref('value', mapped)})"
        refs += f" OR (({rv}) - m.value) / abs({rv}) * 100.0 > :pct"
    cols = ("m.rowid, m.host, m.check_, m.gpu, m.serial, m.sku, m.value, m.unit, p.value, p.run_id, p.sku, "
            "k.value, k.run_id, k.sku, s.value, s.run_id, s.sku, "
            # for the rows returned only: the burn-in run's day, whether its figure is this check's own
            "(SELECT r.started FROM runs r WHERE r.run_id=k.run_id), "
            f"EXISTS (SELECT 1 {of_run('k.run_id', 'm.check_')}), "
            "f.value, f.run_id, f.sku, (SELECT r.started FROM runs r WHERE r.run_id=f.run_id)")
    if explicit:
        cols += ", " + ", ".join(run_ref(c, chk) for chk in ("m.check_", mapped) for c in ("value", "sku"))
    q = (f"SELECT {cols} FROM figures m "
         "LEFT JOIN latest p ON p.subject=m.subject AND p.check_=m.check_ AND p.kind='previous' "
         "LEFT JOIN latest k ON k.subject=m.subject AND k.check_=m.check_ AND k.kind='burnin' AND :nob "
         "LEFT JOIN latest s ON s.subject=m.subject AND s.check_=m.check_ AND s.kind='pass' AND :lp "
         "LEFT JOIN latest f ON f.subject=m.subject AND f.check_=m.check_ AND f.kind='first' AND :nob "
         "WHERE m.run_id=:run AND m.rowid > :after AND m.value IS NOT NULL "
         f"AND (m.limit_kind='min' OR {_sql_is_burnin('m')}) "
         f"AND m.verdict IS NOT 'fail' AND ({refs}) ORDER BY m.rowid")
    args = {"run": run_id, "after": after, "pct": pct, "lp": baseline == "latest-pass", "nob": not baseline,
            "base": baseline}
    figs: list[dict] = []
    found: dict[tuple, dict] = {}
    for row in con.execute(q, args):
        _, host, chk, gpu, serial, sku, value, unit = row[:8]
        r: dict[str, tuple] = {}
        if row[8] is not None:
            r["previous"] = row[8:11]
        if row[11] is not None:
            src = baseline_mod.burnin_key(chk) if not row[18] else None  # the burn-in suite's figure stood in
            r["baseline"] = (*row[11:14], f"burn-in on {_day(row[17])}"
                             + (f", as {baseline_mod.split_key(src)[0]}" if src else ""))
        elif row[14] is not None:
            r["baseline"] = (*row[14:17], "latest pass")
        elif row[19] is not None:
            r["baseline"] = (*row[19:22], f"first pass on {_day(row[22])}")
        elif explicit and (row[23] is not None or row[25] is not None):
            own = row[23] is not None
            r["baseline"] = (row[23] if own else row[25], baseline, row[24] if own else row[26], f"run {baseline}"
                             + ("" if own else f", as {baseline_mod.split_key(baseline_mod.burnin_key(chk))[0]}"))
        figs.append({"host": host, "check": chk, "gpu": gpu, "serial": serial, "sku": sku, "value": value,
                     "unit": unit})
        found[(subject_of(figs[-1]), chk)] = r
    # the SQL chose the compared figures of the run (throughput or burn-in, not failed): the one rule judges them
    out = reference_standouts(figs, found, pct, compared=lambda f: True)
    top = con.execute("SELECT max(rowid) FROM figures WHERE run_id=?", (run_id,)).fetchone()[0]
    return out, max(after, top or 0)


def references(con: sqlite3.Connection, figures: list[dict], baseline: str | None = None) -> dict[tuple, dict]:
    """For each throughput figure of this run (and each burn-in throughput figure), its references from earlier
    runs (before this run is recorded): ``{(subject, check_): {"previous": (value, run_id, sku),
    "baseline": (value, run_id, sku, how)}}``; ``how`` names the reference for the reader
    (``"burn-in on 2026-11-02, as burnin_bf16_tflops_start"``).

    Baseline: ``baseline`` when given, a run id (that run's figure; for a burn-in run, the burn-in figure that
    is the check's baseline, gpuaccept.reporting.baseline) or ``"latest-pass"`` (the last run where this subject's check
    passed); else the subject's last passed burn-in: the burn-in suite's figures (the same figure of a later
    burn-in; for a nightly check its comparable burn-in figure, gpuaccept.reporting.baseline) or a ``--profile burnin``
    run's passing figure; without one, the first run where the subject's check passed ("first pass on
    2026-11-01"). Cost: a few indexed look-ups per figure.
    """
    out: dict[tuple, dict] = {}
    for f in figures:
        if not baseline_mod.is_compared(f):
            continue
        key = (subject_of(f), check_of(f))
        if key in out:
            continue
        refs: dict[str, tuple] = {}
        got = {k: (v, r, s, t) for k, s, v, r, t in con.execute(
            "SELECT l.kind, l.sku, l.value, l.run_id, r.started FROM latest l LEFT JOIN runs r "
            "ON r.run_id = l.run_id WHERE l.subject=? AND l.check_=?", key)}
        if "previous" in got:
            refs["previous"] = got["previous"][:3]
        if baseline == "latest-pass":
            if "pass" in got:
                refs["baseline"] = (*got["pass"][:3], "latest pass")
        elif baseline:
            src = key[1]
            row = con.execute("SELECT value, run_id, sku FROM figures WHERE run_id=? AND subject=? AND check_=?",
                              (baseline, *key)).fetchone()
            if (row is None or row[0] is None) and baseline_mod.burnin_key(key[1]):
                src = baseline_mod.burnin_key(key[1])
                row = con.execute("SELECT value, run_id, sku FROM figures WHERE run_id=? AND subject=? AND "
                                  "check_=?", (baseline, key[0], src)).fetchone()
            if row and row[0] is not None:
                refs["baseline"] = (*row, f"run {baseline}"
                                    + (f", as {baseline_mod.split_key(src)[0]}" if src != key[1] else ""))
        elif "burnin" in got:
            value, run_id, sku, started = got["burnin"]
            src = key[1]
            if baseline_mod.burnin_key(key[1]) and con.execute(
                    "SELECT 1 FROM figures WHERE run_id=? AND subject=? AND check_=?",
                    (run_id, *key)).fetchone() is None:
                src = baseline_mod.burnin_key(key[1])  # the burn-in suite's figure stands for this check
            refs["baseline"] = (value, run_id, sku, f"burn-in on {_day(started)}"
                                + (f", as {baseline_mod.split_key(src)[0]}" if src != key[1] else ""))
        elif "first" in got:
            value, run_id, sku, started = got["first"]
            refs["baseline"] = (value, run_id, sku, f"first pass on {_day(started)}")
        if refs:
            out[key] = refs
    return out


def standouts(figures: list[dict], refs: dict[tuple, dict], pct: float = STANDOUT_PCT) -> list[dict]:
    """The reference rule (gpuaccept.judging.standouts.reference_standouts) for the figures the history compares
    (gpuaccept.reporting.baseline.is_compared: throughput and burn-in throughput figures), against ``refs``
    (:func:`references`). Returns ``{host, check, gpu, serial, sku, value, unit, against, reference, ref_run, pct}``."""
    return reference_standouts(figures, refs, pct, compared=baseline_mod.is_compared)


def fleet_outliers(figures: Iterable[dict], groups: dict[tuple, list[dict]] | None = None,
                   pct: float = PCT) -> list[dict]:
    """The peer rule (gpuaccept.judging.standouts.peer_outliers, ``pct``: ``--standout-pct``) over the run's
    figures, or over ``groups`` (:func:`gpuaccept.judging.standouts.peer_groups` kept as the figures arrived;
    ``figures`` is then unused)."""
    return peer_outliers(peer_groups(figures) if groups is None else groups, pct)
