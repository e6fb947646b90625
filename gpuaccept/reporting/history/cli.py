"""Reading the history: a subject's values of one check (:func:`series`, the sparklines of report.html), one
GPU's or one host's figures over time (:func:`figures_over_time`) and the command that prints them,
``python -m gpuaccept.reporting.history [--db reports/history.sqlite] (--serial S | --host H) [--check C]``.
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time

from gpuaccept.reporting.history.schema import HistoryError, connect, connect_readonly, not_writable


def series(con: sqlite3.Connection, subject: str, check: str, last: int = 30) -> list[tuple[float, float, str]]:
    """The last ``last`` values of one subject's check, oldest first: ``[(started, value, run_id)]``."""
    rows = con.execute("SELECT started, value, run_id FROM figures WHERE subject=? AND check_=? AND value IS NOT NULL"
                       " ORDER BY started DESC LIMIT ?", (subject, check, last)).fetchall()
    return rows[::-1]


#: beside the run id of figures whose run has no run row (killed before its end, or still running)
UNFINISHED = "(unfinished)"


def figures_over_time(con: sqlite3.Connection, serial: str | None = None, host: str | None = None,
                      check: str | None = None) -> list[tuple]:
    """Rows ``(time, run_id, profile, host, gpu, serial, check, value, unit, limit, verdict)`` of one GPU
    (by serial, wherever it was) or one host, oldest first; the run id of a run that recorded no end (killed,
    or still running) is followed by :data:`UNFINISHED`."""
    where, args = [], []
    if serial:
        where.append("f.serial=?")
        args.append(serial)
    if host:
        where.append("f.host=?")
        args.append(host)
    if check:
        where.append("(f.check_=? OR f.check_ LIKE ?)")
        args += [check, check + "[%"]
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


def main(argv: list[str] | None = None) -> int:
    """``python -m gpuaccept.reporting.history``: print one GPU's (``--serial``) or host's (``--host``) figures over time."""
    ap = argparse.ArgumentParser(prog="python -m gpuaccept.reporting.history",
                                 description="A GPU's (by serial) or a host's figures over time, from the history database.")
    ap.add_argument("--db", default=os.path.join("reports", "history.sqlite"), help="default reports/history.sqlite")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--serial", help="GPU serial number (follows the GPU across hosts)")
    g.add_argument("--host", help="host name")
    ap.add_argument("--check", help="only this check (e.g. bf16_tflops)")
    ap.add_argument("--json", action="store_true", help="JSON rows instead of a table")
    a = ap.parse_args(argv)
    if not os.path.exists(a.db):
        print(f"{a.db}: no history database", file=sys.stderr)
        return 4
    try:
        con = connect_readonly(a.db) if not_writable(a.db) else connect(a.db)
    except HistoryError as e:
        print(str(e), file=sys.stderr)
        return 4
    rows = figures_over_time(con, a.serial, a.host, a.check)
    head = ("time", "run", "profile", "host", "gpu", "serial", "check", "value", "unit", "limit", "verdict")
    if a.json:
        print(json.dumps([dict(zip(head, r)) for r in rows], default=str))
        return 0
    if not rows:
        print(f"no figures for {'serial ' + a.serial if a.serial else 'host ' + a.host}"
              f"{' check ' + a.check if a.check else ''} in {a.db}", file=sys.stderr)
        return 1
    cells = [head] + [tuple("" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v)) for v in r)
                      for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    for c in cells:
        print("  ".join(s.ljust(w) for s, w in zip(c, widths)).rstrip())
    return 0


