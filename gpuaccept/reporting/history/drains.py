"""The drains and resumes gpuaccept made in Slurm, kept in the history database (table ``slurm_events``, schema
v3), and the node drained again soon after gpuaccept put it back: "repeating". Kubernetes' cordons and
uncordons are kept the same way in ``k8s_events`` (schema v5): :data:`TABLES`.

A node that fails again within :data:`REPEAT_WINDOW_S` of the resume that put it back into service was resumed
too early (the repair did not hold, or the tests that cleared it miss the fault): the Slurm step names it in
its lines and in summary.md, and its drain row carries ``repeating`` 1 with the resume's time and run.
Only calls that were made and succeeded are recorded (never a dry run's). :func:`repeat_of` is pure;
:func:`record_events` writes (one transaction).
"""
from __future__ import annotations

import sqlite3
import time

from gpuaccept.reporting.history.schema import connect

#: a drain this soon after gpuaccept's resume of the same node is "repeating", seconds (a day: one nightly run
#: after the repair; gpuaccept's choice)
REPEAT_WINDOW_S = 86400.0
#: table -> (the event that takes a node out, the one that puts it back)
TABLES = {"slurm_events": ("drain", "resume"), "k8s_events": ("cordon", "uncordon")}


def repeat_of(last: tuple | None, at: float, window_s: float = REPEAT_WINDOW_S, release: str = "resume") -> dict | None:
    """Whether a drain at ``at`` repeats (pure): ``last`` is the node's latest event before it, ``(event, at,
    run_id)`` or None; a ``release`` (``resume``; Kubernetes: ``uncordon``) within ``window_s`` ->
    ``{"resumed_at", "resumed_run", "after_s"}``."""
    if not last or last[0] != release or last[1] is None:
        return None
    after = float(at) - float(last[1])
    if after < 0 or after > window_s:
        return None
    return {"resumed_at": float(last[1]), "resumed_run": last[2], "after_s": after}


def _last_event(con: sqlite3.Connection, node: str, table: str = "slurm_events") -> tuple | None:
    return con.execute(f"SELECT event, at, run_id FROM {table} WHERE node=? ORDER BY at DESC, rowid DESC "
                       "LIMIT 1", (node,)).fetchone()


def record_events(path: str, run_id: str, events: list[dict], at: float | None = None,
                  table: str = "slurm_events") -> list[dict]:
    """Record the Slurm step's successful calls in the history at ``path`` (opened, migrated when older):
    ``events``: ``{"event": "drain"|"resume", "host", "node"[, "action", "cause", "reason"]}``; ``table``: one of
    :data:`TABLES` (``k8s_events``: events ``cordon``/``uncordon``). Returns the holds that repeat (each event
    dict with :func:`repeat_of`'s keys added), in order. Raises HistoryError or sqlite3.Error (KeyError for a
    table not in :data:`TABLES`)."""
    hold, release = TABLES[table]
    at = time.time() if at is None else at
    out = []
    con = connect(path)
    try:
        with con:
            for e in events:
                rep = repeat_of(_last_event(con, e["node"], table), at, release=release) if e["event"] == hold else None
                con.execute(f"INSERT INTO {table} VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                            (run_id, at, e.get("host"), e["node"], e["event"], e.get("action"), e.get("cause"),
                             e.get("reason"), 1 if rep else 0, rep and rep["resumed_at"], rep and rep["resumed_run"]))
                if rep:
                    out.append({**e, **rep})
    finally:
        con.close()
    return out


def repeating_text(r: dict, held: str = "drained") -> str:
    """One repeating drain for a person (pure): ``"gpu07 (node gpu07) drained again 5 h after its resume on
    2026-12-03 04:10 UTC by run night2 (drain-rma: row remapping failure: ...)"``; ``held``: the word for the
    hold (Kubernetes: ``cordoned``)."""
    after = r["after_s"]
    took = f"{after / 3600:.0f} h" if after >= 3600 else f"{max(1, round(after / 60))} min"
    node = f" (node {r['node']})" if r.get("node") and r["node"] != r.get("host") else ""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(r["resumed_at"]))
    why = f" ({r['action']}: {r.get('reason') or ''})" if r.get("action") else ""
    return (f"{r.get('host') or r['node']}{node} {held} again {took} after its resume on {when} by run "
            f"{r.get('resumed_run') or '?'}{why}")
