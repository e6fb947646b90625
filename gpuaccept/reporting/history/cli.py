"""Reading the history: a subject's values of one check (:func:`series`, the sparklines of report.html), one
GPU's or one host's figures over time (:func:`figures_over_time`), one host's verdict and causes per run
(:func:`host_runs`) and the command that prints them,
``python -m gpuaccept.reporting.history [--db reports/history.sqlite] (--serial S | --host H [--runs]) [--check C]``.
"""
from __future__ import annotations

import json
import os
import sqlite3
import sys
import time

from gpuaccept.config.cmdline import OneLineParser
from gpuaccept.reporting.history.schema import HistoryError, connect, connect_readonly, not_writable


def series(con: sqlite3.Connection, subject: str, check: str, last: int = 30) -> list[tuple[float, float, str]]:
    """The last ``last`` values of one subject's check, oldest first: ``[(started, value, run_id)]``."""
    rows = con.execute("SELECT started, value, run_id FROM figures WHERE subject=? AND check_=? AND value IS NOT NULL"
                       " ORDER BY started DESC LIMIT ?", (subject, check, last)).fetchall()
    return rows[::-1]


#: beside the run id of figures whose run has no run row (killed before its end, or still running)
UNFINISHED = "(unfinished)"


def killed_runs(con: sqlite3.Connection, run_ids: list[str] | None = None) -> dict[str, dict]:
    """The runs the database knows were killed (``killed_runs``, schema v4; ``{}`` in an older database), by run
    id: ``{"started", "last_record", "found_at", "found_by", "report_dir"}``; only ``run_ids`` when given."""
    if not con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='killed_runs'").fetchone():
        return {}
    rows = con.execute("SELECT run_id, started, last_record, found_at, found_by, report_dir FROM killed_runs")
    out = {r[0]: dict(zip(("started", "last_record", "found_at", "found_by", "report_dir"), r[1:])) for r in rows}
    return out if run_ids is None else {k: v for k, v in out.items() if k in set(run_ids)}


def killed_text(run_id: str, k: dict) -> str:
    """One line on a killed run: ``run r1 was killed: its controller died after its last record at
    2026-12-05 00:02:40 UTC (found by run r2 at ...); its finished tests are kept, it has no verdict``."""
    def utc(t):
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if isinstance(t, (int, float)) else "?"
    return (f"run {run_id} was killed: its controller died after its last record at {utc(k.get('last_record'))} "
            f"(found by {k.get('found_by') or '?'} at {utc(k.get('found_at'))}); its finished tests are kept, "
            f"it has no verdict")


def figures_over_time(con: sqlite3.Connection, serial: str | None = None, host: str | None = None,
                      check: str | None = None) -> list[tuple]:
    """Rows ``(time, run_id, profile, host, gpu, serial, check, value, unit, limit, verdict)`` of one GPU
    (by serial, wherever it was) or one host, oldest first; the run id of a run that recorded no end (killed,
    or still running) is followed by :data:`UNFINISHED`. ``check``: that check, whatever it is about (``seq_read_gbps``
    matches ``seq_read_gbps /data`` and ``seq_read_gbps /scratch``, ``x`` matches ``x[...]``), or one named whole."""
    where, args = [], []
    if serial:
        where.append("f.serial=?")
        args.append(serial)
    if host:
        where.append("f.host=?")
        args.append(host)
    if check:  # the check alone, or with what it is about: "seq_read_gbps /data", "link_errors[0]"
        where.append("(f.check_=? OR substr(f.check_, 1, ?) IN (?, ?))")
        args += [check, len(check) + 1, check + "[", check + " "]
    q = ("SELECT f.started, f.run_id, r.profile, f.host, f.gpu, f.serial, f.check_, "
         "coalesce(f.value, f.value_text), f.unit, f.limit_kind, f.limit_value, f.verdict, r.run_id IS NULL "
         "FROM figures f LEFT JOIN runs r USING (run_id) WHERE " + " AND ".join(where) +
         " ORDER BY f.started, f.host, f.gpu, f.check_")
    out = []
    for row in con.execute(q, args):
        lim = f"{'>=' if row[9] == 'min' else '<='} {row[10]:g}" if row[9] else ""
        # a run with figures but no run row never reached its end (a killed controller) or is still running
        run = f"{row[1]} {UNFINISHED}" if row[12] else row[1]
        out.append((time.strftime("%Y-%m-%d %H:%M", time.gmtime(row[0] or 0)), run, *row[2:9], lim, row[11]))
    return out


def host_runs(con: sqlite3.Connection, host: str) -> list[tuple[str, str, str | None, str | None, str]]:
    """One host's finished runs, oldest first: ``(time UTC, run_id, profile, verdict, causes)``, ``causes`` the
    distinct ``class/kind`` of its tests' causes that run (gpuaccept.reporting.history.rows.test_row), space-separated,
    "" for none; a database before schema v7 keeps no causes. The runs that could not reach a host, and why one
    reads ``unreachable_again`` (gpuaccept.judging.unreachable), show here."""
    cols = {r[1] for r in con.execute("PRAGMA table_info(tests)")}
    causes = ("(SELECT group_concat(t.causes, '') FROM tests t WHERE t.run_id = r.run_id AND t.host = hv.host)"
              if "causes" in cols else "NULL")
    rows = con.execute(f"SELECT r.started, r.run_id, r.profile, hv.verdict, {causes} FROM host_verdicts hv "
                       f"JOIN runs r ON r.run_id = hv.run_id WHERE hv.host = ? ORDER BY r.started, r.run_id", (host,))
    return [(time.strftime("%Y-%m-%d %H:%M", time.gmtime(started or 0)), rid, profile, verdict,
             " ".join(sorted(set((text or "").split())))) for started, rid, profile, verdict, text in rows]


def _print_table(head: tuple, rows: list[tuple]) -> None:
    cells = [head] + [tuple("" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v)) for v in r)
                      for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    for c in cells:
        print("  ".join(s.ljust(w) for s, w in zip(c, widths)).rstrip())


def main(argv: list[str] | None = None) -> int:
    """``python -m gpuaccept.reporting.history``: print one GPU's (``--serial``) or host's (``--host``) figures over
    time, or with ``--runs`` one host's verdict and causes in each run."""
    ap = OneLineParser(prog="python -m gpuaccept.reporting.history",
                                 description="A GPU's (by serial) or a host's figures over time, from the history database.")
    ap.add_argument("--db", default=os.path.join("reports", "history.sqlite"), help="default reports/history.sqlite")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--serial", help="GPU serial number (follows the GPU across hosts)")
    g.add_argument("--host", help="host name")
    ap.add_argument("--check", help="only this check (e.g. bf16_tflops)")
    ap.add_argument("--runs", action="store_true", help="with --host: its verdict and causes in each run")
    ap.add_argument("--json", action="store_true", help="JSON rows instead of a table")
    a = ap.parse_args(argv)
    if a.runs and not a.host:
        ap.error("--runs lists one host's runs: give --host")
    if not os.path.exists(a.db):
        print(f"{a.db}: no history database", file=sys.stderr)
        return 4
    try:
        con = connect_readonly(a.db) if not_writable(a.db) else connect(a.db)
    except HistoryError as e:
        print(str(e), file=sys.stderr)
        return 4
    if a.runs:
        runs = host_runs(con, a.host)
        head = ("time", "run", "profile", "verdict", "causes")
        if a.json:
            print(json.dumps([dict(zip(head, r)) for r in runs]))
        elif runs:
            _print_table(head, runs)
        else:
            print(f"no finished run of host {a.host} in {a.db}", file=sys.stderr)
        return 0 if runs or a.json else 1
    rows = figures_over_time(con, a.serial, a.host, a.check)
    head = ("time", "run", "profile", "host", "gpu", "serial", "check", "value", "unit", "limit", "verdict")
    unfinished = list(dict.fromkeys(r[1].removesuffix(" " + UNFINISHED) for r in rows if r[1].endswith(UNFINISHED)))
    killed = killed_runs(con, unfinished) if unfinished else {}
    if a.json:  # a killed run's rows say so ("killed": true); a run still going (or killed, not yet found): false
        print(json.dumps([{**dict(zip(head, r)), **({"killed": r[1].removesuffix(" " + UNFINISHED) in killed}
                                                    if r[1].endswith(UNFINISHED) else {})} for r in rows],
                         default=str))
        return 0
    if not rows:
        ran = len(host_runs(con, a.host)) if a.host else 0
        print(f"no figures for {'serial ' + a.serial if a.serial else 'host ' + a.host}"
              f"{' check ' + a.check if a.check else ''} in {a.db}"
              + (f" (it was in {ran} finished run{'s' if ran != 1 else ''}: --runs lists its verdict and causes in "
                 f"each)" if ran else ""), file=sys.stderr)
        return 1
    _print_table(head, rows)
    for rid in unfinished:  # under the table: which unfinished runs are known killed, which may still run
        print(killed_text(rid, killed[rid]) if rid in killed else
              f"run {rid} has no end recorded: still running, or killed and not yet found by a later run or the merge")
    return 0


