"""Writing runs into the history database: the rows of figures and tests (:func:`figure_rows`,
:func:`test_row`), a whole run in one transaction (:func:`record_run`), keeping an earlier run of the same id
(:func:`keep_earlier_run`) and the running ``latest`` table (:func:`update_latest`).
"""
from __future__ import annotations

import sqlite3
import time
from typing import Any, Iterable

from gpuaccept.judging.readings import number
from gpuaccept.judging.standouts import check_of, subject_of
from gpuaccept.reporting import baseline as baseline_mod
from gpuaccept.reporting.history.sqlrules import _sql_is_burnin, _sql_nightly_key


def record_run(con: sqlite3.Connection, run: dict, tests: Iterable[dict], figures: Iterable[dict],
               host_verdicts: dict[str, str]) -> None:
    """Append one run in one transaction. ``run``: run_id, started, inventory, profile, limit, report_dir,
    verdict; ``tests``: dicts with nodeid, host, layer, outcome, message; ``figures``: report figure dicts
    (with sku where known). A run id already present is replaced (re-recording a merged folder) when it is
    the same run (same start); another run's rows under the id are kept renamed (:func:`keep_earlier_run`)."""
    rid = run["run_id"]
    started = run.get("started") or time.time()
    burnin = run.get("profile") == "burnin"
    tests = list(tests)
    burned_in = baseline_mod.passed_burnin_hosts(tests)  # their burn-in figures become baselines
    with con:
        keep_earlier_run(con, rid, started)
        for table in ("figures", "tests", "host_verdicts", "runs"):
            con.execute(f"DELETE FROM {table} WHERE run_id=?", (rid,))
        con.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?)", (rid, started, run.get("inventory"),
                    run.get("profile"), run.get("limit"), run.get("report_dir"), run.get("verdict")))
        con.executemany(INSERT_FIGURE, figure_rows(rid, started, figures))
        con.executemany(INSERT_TEST, [test_row(rid, t) for t in tests])
        con.executemany("INSERT INTO host_verdicts VALUES (?,?,?)", [(rid, h, v) for h, v in host_verdicts.items()])
        update_latest(con, rid, burnin, burned_in)


def keep_earlier_run(con: sqlite3.Connection, run_id: str, started: float) -> str | None:
    """Before run ``run_id`` (started at ``started``, Unix s) is written: when the database holds rows of that
    run id from a run that started at another time, rename them ``<run_id>@<its UTC start>`` (e.g.
    ``tonight@20261129T020000Z``) so that they are kept, and return that name; else None.

    The run id is the report folder's name, so it comes back whenever a folder name is used again: a nightly
    job writing to ``--reports /scratch/acceptance/tonight`` after removing it, a CI workspace cleaned between
    builds, the clock set back to a second whose default folder was rotated away. Replacing by run id alone
    deleted every earlier night of such a job. Rows of the same run (same start: a merged folder recorded
    again, an earlier attempt of this run) are left for the caller to replace. Call inside the transaction
    that writes the run. Cost: the old run's rows (figures_run index), plus a scan of tests and latest."""
    row = con.execute("SELECT started FROM runs WHERE run_id=?", (run_id,)).fetchone()
    if row is None:
        row = con.execute("SELECT started FROM figures WHERE run_id=? LIMIT 1", (run_id,)).fetchone()
    if row is None or row[0] is None or abs(float(row[0]) - float(started)) < 1e-3:
        return None
    base = f"{run_id}@{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(float(row[0])))}"
    new, n = base, 1
    while con.execute("SELECT 1 FROM runs WHERE run_id=? UNION ALL SELECT 1 FROM figures WHERE run_id=? LIMIT 1",
                      (new, new)).fetchone():
        n += 1
        new = f"{base}-{n}"
    for table in ("figures", "tests", "host_verdicts", "runs", "latest") + (("killed_runs",) if _has_table(
            con, "killed_runs") else ()):
        con.execute(f"UPDATE {table} SET run_id=? WHERE run_id=?", (new, run_id))
    return new


def _has_table(con: sqlite3.Connection, name: str) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone() is not None


def mark_killed(con: sqlite3.Connection, run_id: str, started: float | None, last_record: float | None,
                report_dir: str | None, found_by: str) -> bool:
    """Record that run ``run_id`` was killed before its end (its controller gone: gpuaccept.reporting.folder.
    find_killed), in ``killed_runs`` (schema v4), in its own transaction. Nothing when the database holds a run row
    of it (it did finish) or already knows it killed. ``found_by``: who found it (``run <id>``, ``merge``).
    Returns True when the row was added."""
    with con:
        if con.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone():
            return False
        cur = con.execute("INSERT OR IGNORE INTO killed_runs (run_id, started, last_record, found_at, found_by, "
                          "report_dir) VALUES (?,?,?,?,?,?)", (run_id, started, last_record, time.time(), found_by,
                                                              report_dir))
        return cur.rowcount > 0


def add_missing_tests(con: sqlite3.Connection, run_id: str, started: float | None,
                      tests: Iterable[tuple[dict, list[dict]]]) -> int:
    """Add to run ``run_id`` (a run without a run row: killed) the tests it lacks: ``tests`` are ``(test,
    figures)`` pairs (test: nodeid, host, layer, outcome, message; figures: report figure dicts) from its report
    folder's results.jsonl; a test whose nodeid the run already holds is left alone (a test's row and its
    figures' rows went in in one transaction: a run holds both or neither). One transaction; returns how many
    tests were added. ``started``: the run's start as its rows carry it (that of its first row when it has one)."""
    with con:
        row = con.execute("SELECT started FROM figures WHERE run_id=? LIMIT 1", (run_id,)).fetchone()
        start = row[0] if row and row[0] is not None else (started or time.time())
        have = {r[0] for r in con.execute("SELECT nodeid FROM tests WHERE run_id=?", (run_id,))}
        n = 0
        for t, figs in tests:
            if t.get("nodeid") in have:
                continue
            have.add(t.get("nodeid"))
            con.execute(INSERT_TEST, test_row(run_id, t))
            con.executemany(INSERT_FIGURE, figure_rows(run_id, start, figs))
            n += 1
    return n



INSERT_FIGURE = "INSERT INTO figures VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"


def _str(v: Any) -> str | None:
    """A text identity (bus id, serial) as stored; anything else (an unreadable NVML field) as NULL."""
    return v if isinstance(v, str) and v else None


def figure_rows(rid: str, started: float, figures: Iterable[dict]) -> list[tuple]:
    """Rows of the ``figures`` table for report figure dicts (see the module docstring for the columns)."""
    rows = []
    for f in figures:
        v = f.get("value")
        num = number(v)
        text = None if num is not None or isinstance(v, (list, dict)) or v is None else str(v)[:200]
        lim = f.get("limit") or {}
        kind = "min" if "min" in lim else "max" if "max" in lim else None
        rows.append((rid, started, f.get("host"), f.get("layer"), f.get("test"), f.get("gpu"),
                     _str(f.get("pci_bus_id")), _str(f.get("serial")), subject_of(f), f.get("sku"), check_of(f), num, text,
                     f.get("unit"), kind, number(lim.get(kind)) if kind else None, f.get("verdict")))
    return rows


def test_of(r) -> dict:
    """The fields the ``tests`` table keeps of a finished test's record (gpuaccept.reporting.records.CaseRecord),
    as :func:`test_row` and :func:`record_run` take them: nodeid, host, layer, outcome, message, causes."""
    return {"nodeid": r.nodeid, "host": r.host, "layer": r.layer, "outcome": r.outcome, "message": r.message,
            "causes": r.causes}


#: one row of the ``tests`` table, as :func:`test_row` makes it
INSERT_TEST = "INSERT INTO tests (run_id, nodeid, host, layer, outcome, message, causes) VALUES (?,?,?,?,?,?,?)"


def test_row(rid: str, t: dict) -> tuple:
    """A row of the ``tests`` table (:data:`INSERT_TEST`): the message's first line, at most 500 characters; the
    test's causes (``t["causes"]``: gpuaccept.causes.Cause dicts) filed under its host or under none, as
    ``class/kind``, sorted, space-separated with a space at each end (``" connectivity/unreachable "``), None when
    it has none."""
    host = t.get("host")
    kinds = sorted({f"{c.get('class')}/{c['kind']}" for c in t.get("causes") or [] if isinstance(c, dict)
                    and isinstance(c.get("kind"), str) and c.get("host") in (None, host)})
    return (rid, t.get("nodeid"), host, t.get("layer"), t.get("outcome"),
            (t.get("message") or "").split("\n", 1)[0][:500], f" {' '.join(kinds)} " if kinds else None)


def update_latest(con: sqlite3.Connection, rid: str, burnin: bool, burned_in: Iterable[str] = ()) -> None:
    """Upsert ``latest`` from run ``rid``'s numeric figures, in SQL (one statement per kind, in row order, so
    the last figure of a subject and check wins): ``previous`` always, ``pass`` where it passed, ``burnin``
    where it passed in a ``--profile burnin`` run; and first, ``burnin`` from the burn-in figures
    (gpuaccept.reporting.baseline) of the hosts in ``burned_in`` (whose burn-in test passed in this run), under their own
    key and under the nightly check each is a baseline for. A --profile burnin run's own figure of a check
    (measured by the same probe, held longer) wins over the burn-in suite's figure mapped to it: written after.
    Cost: a scan of the run's rows per statement (figures_run index); the burn-in ones only with such hosts."""
    hosts = sorted({h for h in burned_in if h is not None})
    if hosts:
        con.execute("CREATE TEMP TABLE IF NOT EXISTS burned_in (host TEXT PRIMARY KEY)")
        con.execute("DELETE FROM temp.burned_in")
        con.executemany("INSERT OR IGNORE INTO temp.burned_in VALUES (?)", [(h,) for h in hosts])
        where = f"run_id=? AND {_sql_is_burnin('figures')} AND host IN (SELECT host FROM temp.burned_in)"
        con.execute("INSERT OR REPLACE INTO latest SELECT subject, check_, 'burnin', sku, value, run_id FROM figures "
                    f"WHERE {where} ORDER BY rowid", (rid,))
        nightly = _sql_nightly_key("check_")
        con.execute(f"INSERT OR REPLACE INTO latest SELECT subject, {nightly}, 'burnin', sku, value, run_id "
                    f"FROM figures WHERE {where} AND {nightly} IS NOT NULL ORDER BY rowid", (rid,))
    for kind, where in (("previous", ""), ("pass", " AND verdict='pass'")) + \
            ((("burnin", " AND verdict='pass'"),) if burnin else ()):
        con.execute(f"INSERT OR REPLACE INTO latest SELECT subject, check_, '{kind}', sku, value, run_id FROM figures "
                    f"WHERE run_id=? AND value IS NOT NULL{where} ORDER BY rowid", (rid,))
    # the first passing value of a subject and check stays: the baseline without a burn-in; replaced only when
    # the SKU changed (an inventory gpu_sku corrected: the old SKU's value is never compared, like with like)
    con.execute("INSERT INTO latest SELECT subject, check_, 'first', sku, value, run_id FROM figures "
                "WHERE run_id=? AND value IS NOT NULL AND verdict='pass' ORDER BY rowid "
                "ON CONFLICT (subject, check_, kind) DO UPDATE SET sku=excluded.sku, value=excluded.value, "
                "run_id=excluded.run_id WHERE latest.sku IS NOT excluded.sku", (rid,))

