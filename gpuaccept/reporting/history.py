"""Run history in an embedded SQLite database, keyed by GPU serial (so a GPU moved to another host keeps its
history), with the comparisons a nightly job needs: stand-outs against the GPU's baseline and previous run,
and fleet outliers per SKU and check.

``python -m gpuaccept.reporting.history [--db reports/history.sqlite] (--serial S | --host H) [--check C]`` prints one
GPU's or one host's figures over time.

Database (standard library ``sqlite3``; WAL journal so readers never block the writer; one transaction per
run; schema version in ``PRAGMA user_version``, migrated forward on open by :data:`MIGRATIONS`):

- ``runs``: run_id, started (Unix s), inventory, profile, limit_, report_dir, verdict (PASS|FAIL|ERROR).
- ``figures``: one row per numeric-or-short figure: run_id, started, host, layer, test, gpu (index),
  pci_bus_id, serial, subject (the serial, else ``host:<host>[:gpu<i>]``), sku, check_ (check name plus its
  distinguishing extras, e.g. ``busbw_gbps[bytes=4096]``), value (REAL, NULL when not numeric), value_text,
  unit, limit_kind (min|max), limit_value, verdict (pass|fail|recorded).
- ``tests``: run_id, nodeid, host, layer, outcome, message (first line).
- ``host_verdicts``: run_id, host, verdict.
- ``latest``: per (subject, check_, kind) the last value of kind ``previous`` (any run), ``pass`` (the last
  run where it passed) and ``burnin`` (the last passed burn-in: the burn-in suite's figures, also under the
  nightly check each is a baseline for, gpuaccept.reporting.baseline; or a passing figure of a ``--profile burnin`` run),
  upserted per run so that a comparison costs O(this run), not O(history); and ``first`` (the first run where
  it passed, never replaced: the baseline of a GPU with no burn-in, so that a slow decline of 1 % a night,
  never 10 % below the previous night, still stands out once it is 10 % below where the GPU started).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import sys
import time
import urllib.parse
from typing import Any, Iterable

from gpuaccept.reporting import baseline as baseline_mod
from gpuaccept.reporting.records import _distinguisher, is_throughput

# Stand-out and outlier defaults (percent below the reference); chosen for fleet sweeps, overridable.
STANDOUT_PCT = 10.0
OUTLIER_PCT = 10.0
# Robust z: distance from the median in units of 1.4826 x MAD (the MAD's scale for normal data), above
# which a figure is an outlier (3: the usual cut for a robust z-score, Iglewicz & Hoaglin 1993).
OUTLIER_MADS = 3.0
MAD_SCALE = 1.4826
MIN_FLEET = 3  # figures of one SKU and check needed for a fleet median
# A flush of a run's rows during the run waits at most this long for another run's write (then the rows wait
# for the next flush: the run is never held up by the database); the end of the run waits 30 s, as connect().
BUSY_WAIT_S = 0.0

MIGRATIONS: list[str] = [
    # v1: runs, figures, tests
    """
    CREATE TABLE runs (run_id TEXT PRIMARY KEY, started REAL, inventory TEXT, profile TEXT, limit_ TEXT,
                       report_dir TEXT, verdict TEXT);
    CREATE TABLE figures (run_id TEXT NOT NULL, started REAL, host TEXT, layer TEXT, test TEXT, gpu INTEGER,
                          pci_bus_id TEXT, serial TEXT, subject TEXT NOT NULL, sku TEXT, check_ TEXT NOT NULL,
                          value REAL, value_text TEXT, unit TEXT, limit_kind TEXT, limit_value REAL, verdict TEXT);
    CREATE INDEX figures_subject ON figures (subject, check_, started);
    CREATE INDEX figures_host ON figures (host, started);
    CREATE INDEX figures_run ON figures (run_id);
    CREATE TABLE tests (run_id TEXT NOT NULL, nodeid TEXT, host TEXT, layer TEXT, outcome TEXT, message TEXT);
    """,
    # v2: per-host verdicts and the running "latest" table (O(run) comparisons)
    """
    CREATE TABLE host_verdicts (run_id TEXT NOT NULL, host TEXT NOT NULL, verdict TEXT,
                                PRIMARY KEY (run_id, host)) WITHOUT ROWID;
    CREATE TABLE latest (subject TEXT NOT NULL, check_ TEXT NOT NULL, kind TEXT NOT NULL, sku TEXT,
                         value REAL, run_id TEXT, PRIMARY KEY (subject, check_, kind)) WITHOUT ROWID;
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


class HistoryError(Exception):
    """The history database cannot be opened, is newer than this gpuaccept, or is not ours."""


def connect(path: str, upto: int = SCHEMA_VERSION) -> sqlite3.Connection:
    """Open (creating) the database at ``path``, in WAL mode, migrated to schema ``upto``.

    Raises HistoryError when the file is not an SQLite database or has a newer schema than this code.
    """
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    try:
        con = sqlite3.connect(path, timeout=30)
        _wal(con)
        con.execute("PRAGMA synchronous=NORMAL")
        ver = con.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.OperationalError as e:
        if "locked" in str(e) or "busy" in str(e):
            raise HistoryError(f"{path}: held by another writer for more than 30 s ({e})") from None
        denied = not_writable(path)
        if denied:
            raise HistoryError(f"{path}: {denied}: the history needs to write the file and, beside it, its "
                               f"-wal and -shm files (sqlite: {e})") from None
        raise HistoryError(f"{path}: not a gpuaccept history database ({e})") from None
    except sqlite3.DatabaseError as e:
        raise HistoryError(f"{path}: not a gpuaccept history database ({e})") from None
    if ver > SCHEMA_VERSION:
        con.close()
        raise HistoryError(f"{path}: schema version {ver} is newer than this gpuaccept's {SCHEMA_VERSION}")
    if ver < upto:
        _migrate(con, upto)
    return con


def not_writable(path: str) -> str | None:
    """Why SQLite cannot write the database at ``path`` and its folder (``"its folder /x is on a read-only
    filesystem"``, ``"the file is not writable"``...), or None when both are writable. SQLite says only
    "unable to open database file" or "attempt to write a readonly database" then, which read as a broken
    file; a good database on a read-only mount must not be called "not a gpuaccept history database".
    Writability: access(2) with W_OK (EROFS on a read-only mount, also for root) and statvfs ST_RDONLY."""
    folder = os.path.dirname(os.path.abspath(path))
    for what, target in (("the file", path), (f"its folder {folder}", folder)):
        if not os.path.exists(target):
            continue
        try:
            if os.statvfs(target).f_flag & os.ST_RDONLY:
                return f"{what} is on a read-only filesystem"
        except OSError:
            pass
        if not os.access(target, os.W_OK):
            return f"{what} is not writable by this user"
    return None


def connect_readonly(path: str) -> sqlite3.Connection:
    """Open the existing database at ``path`` for reading only (never created, migrated or written): for
    reading a history this user cannot write (an archived copy, a read-only mount). On a read-only
    filesystem it is opened ``immutable=1`` (SQLite cannot make the ``-shm`` file a WAL database needs, and no
    one can change the file there). Raises HistoryError when it is missing, unreadable, not an SQLite
    database or of a newer schema."""
    if not os.path.exists(path):
        raise HistoryError(f"no history database at {path}")
    try:
        ro_fs = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        ro_fs = False
    uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro" + ("&immutable=1" if ro_fs else "")
    try:
        con = sqlite3.connect(uri, uri=True, timeout=30)
        ver = con.execute("PRAGMA user_version").fetchone()[0]
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as e:
        raise HistoryError(f"{path}: cannot be read ({e})") from None
    if ver > SCHEMA_VERSION:
        con.close()
        raise HistoryError(f"{path}: schema version {ver} is newer than this gpuaccept's {SCHEMA_VERSION}")
    return con


def _wal(con: sqlite3.Connection, wait_s: float = 30.0) -> None:
    """``PRAGMA journal_mode=WAL``, tried again for ``wait_s`` while another run holds the new database (SQLite
    answers "database is locked" at once there, without its busy handler, when several runs open a new file)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            con.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if ("locked" not in str(e) and "busy" not in str(e)) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _migrate(con: sqlite3.Connection, upto: int) -> None:
    """Bring the schema to version ``upto``, one migration per transaction. Each takes the write lock first
    (``BEGIN IMMEDIATE``, waiting up to the connection's 30 s) and reads the version again under it: runs that
    open a new database at the same moment (every node of a Slurm allocation writing to one shared history)
    migrate it once, instead of the second failing with "table runs already exists"."""
    level = con.isolation_level
    con.isolation_level = None  # transactions spelled out here
    try:
        while True:
            con.execute("BEGIN IMMEDIATE")
            try:
                v = con.execute("PRAGMA user_version").fetchone()[0]
                if v >= upto:
                    con.execute("COMMIT")
                    return
                for stmt in _statements(MIGRATIONS[v]):
                    con.execute(stmt)
                con.execute(f"PRAGMA user_version={v + 1}")
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
    finally:
        con.isolation_level = level


def _statements(script: str) -> list[str]:
    """The SQL statements of ``script``, split where :func:`sqlite3.complete_statement` says one ends."""
    out, part = [], ""
    for piece in script.split(";"):
        part += piece + ";"
        if sqlite3.complete_statement(part):
            if part.strip(" \n;"):
                out.append(part.strip())
            part = ""
    return out


def run_exists(path: str, run_id: str) -> bool:
    """True when the database at ``path`` (opened read-only; never created or migrated here) holds run
    ``run_id``. Raises HistoryError when there is no database there or it cannot be read."""
    if not os.path.exists(path):
        raise HistoryError(f"no history database at {path}")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return con.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is not None
        finally:
            con.close()
    except sqlite3.Error as e:
        raise HistoryError(f"history {path} unreadable: {e}") from None


def subject_of(f: dict) -> str:
    """The history key of a figure: the GPU serial, else ``host:<host>`` plus ``:gpu<i>`` for a GPU."""
    serial = f.get("serial")
    if isinstance(serial, str) and serial:
        return serial
    return f"host:{f.get('host')}" + (f":gpu{f['gpu']}" if f.get("gpu") is not None else "")


# A figure's extras that are readings taken with it (temperatures, clocks, power, other bandwidths, clock-event
# masks, the algorithm NCCL picked) change from run to run: in the history key they made every run's key new, so
# bf16_tflops and the all-reduce busbw were never compared with anything. Only extras saying what was measured
# (sizes, shapes, methods, NUMA node) stay in the key: names ending in a reading's unit are dropped, and floats.
_READING_SUFFIXES = ("_c", "_c_max", "_c_min", "_w", "_w_max", "_w_min", "_mhz", "_mhz_median", "_mhz_min",
                     "_mhz_max", "_gbps", "_tflops", "_us", "_pct", "_s")
_READING_EXTRAS = frozenset({"clocks_event_reasons", "algo", "algorithms", "note"})


def key_extras(f: dict) -> dict:
    """The extras of figure ``f`` that belong to its history key (see :data:`_READING_SUFFIXES`)."""
    return {k: v for k, v in (f.get("extra") or {}).items()
            if k not in _READING_EXTRAS and not k.endswith(_READING_SUFFIXES) and not isinstance(v, float)}


def check_of(f: dict) -> str:
    """A figure's history key: its check name with the extras that say what was measured
    (``busbw_gbps[bytes=4096]``, ``bf16_tflops[k=8192,m=8192,n=8192]``; readings taken with it left out)."""
    return f["check"] + _distinguisher({"extra": key_extras(f)})


def _compared(f: dict) -> bool:
    """Compared with history: a throughput figure (a ``min`` limit), or a burn-in throughput figure."""
    return is_throughput(f) or baseline_mod.is_burnin_figure(f)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        return None
    return float(v)


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
        con.executemany("INSERT INTO tests VALUES (?,?,?,?,?,?)", [test_row(rid, t) for t in tests])
        con.executemany("INSERT INTO host_verdicts VALUES (?,?,?)", [(rid, h, v) for h, v in host_verdicts.items()])
        _update_latest(con, rid, burnin, burned_in)


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
    for table in ("figures", "tests", "host_verdicts", "runs", "latest"):
        con.execute(f"UPDATE {table} SET run_id=? WHERE run_id=?", (new, run_id))
    return new


def _day(started) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(started)) if isinstance(started, (int, float)) else "?"


# gpuaccept.reporting.baseline's rules as SQL expressions over a figures.check_ column (generated from its tables, so the
# SQL and the Python functions cannot disagree; tests/test_report_writes.py checks them against each other):
# they let run_standouts and _update_latest compare and record burn-in figures over a run's rows in SQLite.
def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_name(col: str) -> str:
    """SQL for :func:`gpuaccept.reporting.baseline.split_key`'s name of ``col``."""
    return f"(CASE WHEN instr({col}, '[') > 0 THEN substr({col}, 1, instr({col}, '[') - 1) ELSE {col} END)"


def _sql_dist(col: str) -> str:
    """SQL for :func:`gpuaccept.reporting.baseline.split_key`'s distinguisher of ``col`` ('' when none)."""
    return f"(CASE WHEN instr({col}, '[') > 0 THEN substr({col}, instr({col}, '[')) ELSE '' END)"


def _sql_is_burnin(alias: str) -> str:
    """SQL for :func:`gpuaccept.reporting.baseline.is_burnin_figure` of row ``alias`` of ``figures``."""
    names = ", ".join(_lit(n) for n in sorted(baseline_mod.BURNIN_FIGURES))
    return (f"({alias}.value IS NOT NULL AND {_sql_name(alias + '.check_')} IN ({names}) "
            f"AND ({alias}.layer IS NULL OR {alias}.layer = {_lit(baseline_mod.BURNIN_LAYER)}))")


def _sql_nightly_key(col: str) -> str:
    """SQL for :func:`gpuaccept.reporting.baseline.nightly_key` of ``col`` (NULL for None)."""
    whens = "".join(f" WHEN {_sql_name(col)} = {_lit(b)} THEN {_lit(check)}" + (f" || {_sql_dist(col)}" if same else "")
                    for b, (check, same) in baseline_mod.NIGHTLY_FROM_BURNIN.items())
    return f"(CASE{whens} END)"


def _sql_burnin_key(col: str) -> str:
    """SQL for :func:`gpuaccept.reporting.baseline.burnin_key` of ``col`` (NULL for None)."""
    whens = "".join(f" WHEN {_sql_name(col)} = {_lit(check)} THEN {_lit(b)} || {_sql_dist(col)}" if same else
                    f" WHEN {col} = {_lit(check)} THEN {_lit(b)}"
                    for b, (check, same) in baseline_mod.NIGHTLY_FROM_BURNIN.items())
    return f"(CASE{whens} END)"


INSERT_FIGURE = "INSERT INTO figures VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"


def _str(v: Any) -> str | None:
    """A text identity (bus id, serial) as stored; anything else (an unreadable NVML field) as NULL."""
    return v if isinstance(v, str) and v else None


def figure_rows(rid: str, started: float, figures: Iterable[dict]) -> list[tuple]:
    """Rows of the ``figures`` table for report figure dicts (see the module docstring for the columns)."""
    rows = []
    for f in figures:
        v = f.get("value")
        num = _num(v)
        text = None if num is not None or isinstance(v, (list, dict)) or v is None else str(v)[:200]
        lim = f.get("limit") or {}
        kind = "min" if "min" in lim else "max" if "max" in lim else None
        rows.append((rid, started, f.get("host"), f.get("layer"), f.get("test"), f.get("gpu"),
                     _str(f.get("pci_bus_id")), _str(f.get("serial")), subject_of(f), f.get("sku"), check_of(f), num, text,
                     f.get("unit"), kind, _num(lim.get(kind)) if kind else None, f.get("verdict")))
    return rows


def test_row(rid: str, t: dict) -> tuple:
    """A row of the ``tests`` table (the message's first line, at most 500 characters)."""
    return (rid, t.get("nodeid"), t.get("host"), t.get("layer"), t.get("outcome"),
            (t.get("message") or "").split("\n", 1)[0][:500])


def _update_latest(con: sqlite3.Connection, rid: str, burnin: bool, burned_in: Iterable[str] = ()) -> None:
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


class RunRecorder:
    """One run's history, written while the run goes: :meth:`add` per finished test (O(its figures): rows made
    now), :meth:`flush` right after (gpuaccept.plugin.reports.HistorySink: the rows so far in one short transaction,
    not waiting for another writer: when the database is busy the rows wait for the next flush), and
    :meth:`finish` at the end (stand-outs against the references before this run, then the run row, host
    verdicts and ``latest``, one transaction). The end then costs O(stand-out look-up) instead of inserting
    every row of the run (1.84 million figures at 10,000 hosts x 23 checks).

    The database is opened at the first flush; rows an earlier attempt of the same run left (a killed
    controller) are replaced; rows of another run under the same id (a report folder name used again) are
    kept, renamed (:func:`keep_earlier_run`, :attr:`kept_as`). Errors (HistoryError, sqlite3.Error, OSError) propagate to the caller.
    """

    def __init__(self, path: str, run_id: str, started: float | None, profile: str | None,
                 baseline: str | None = None, pct: float = STANDOUT_PCT):
        self.path, self.run_id = path, run_id
        self.baseline, self.pct = baseline, pct
        self.standouts: list[dict] = []  # found so far, in the order the figures arrived
        self._seen = 0  # the highest rowid of this run's figures compared so far
        self.started = started or time.time()
        self.profile = profile
        self.con: sqlite3.Connection | None = None
        self.figures: list[tuple] = []
        self.tests: list[tuple] = []
        self.groups: dict[tuple, list[dict]] = {}  # fleet_groups() of every figure so far
        self.burnin_tests: dict[str, tuple] = {}  # nodeid -> (host, outcome) of the burn-in tests (last wins)
        self._wait_s = -1.0
        self.kept_as: str | None = None  # an earlier run of the same id, renamed (keep_earlier_run)

    def add(self, test: dict, figures: list[dict]) -> None:
        """A finished test (nodeid, host, layer, outcome, message) and its figures (with sku where known)."""
        self.tests.append(test_row(self.run_id, test))
        self.figures += figure_rows(self.run_id, self.started, figures)
        if test.get("layer") == baseline_mod.BURNIN_LAYER:  # a record replaced later: its last outcome counts
            self.burnin_tests[test.get("nodeid")] = (test.get("host"), test.get("outcome"))
        fleet_groups(figures, self.groups)

    def fleet_outliers(self) -> list[dict]:
        """:func:`fleet_outliers` of every figure added (grouped as they arrived)."""
        return fleet_outliers([], groups=self.groups)

    def _connect(self) -> sqlite3.Connection:
        if self.con is None:
            con = connect(self.path)
            with con:
                self.kept_as = keep_earlier_run(con, self.run_id, self.started)
                for table in ("figures", "tests", "host_verdicts", "runs"):
                    con.execute(f"DELETE FROM {table} WHERE run_id=?", (self.run_id,))
            self.con = con
        return self.con

    def flush(self, wait_s: float = BUSY_WAIT_S, later_ok: bool = True) -> None:
        """Insert the rows added since the last flush in one transaction; wait at most ``wait_s`` for a lock,
        then (``later_ok``) keep the rows for the next flush, else raise sqlite3.OperationalError."""
        if not self.figures and not self.tests:
            return
        con = self._connect()
        if wait_s != self._wait_s:
            con.execute(f"PRAGMA busy_timeout={int(wait_s * 1000)}")
            self._wait_s = wait_s
        try:
            with con:
                con.executemany(INSERT_FIGURE, self.figures)
                con.executemany("INSERT INTO tests VALUES (?,?,?,?,?,?)", self.tests)
        except sqlite3.OperationalError as e:
            if later_ok and ("locked" in str(e) or "busy" in str(e)):
                return  # another run is writing: these rows go with the next flush
            raise
        self.figures, self.tests = [], []
        # compared now, while they are few: latest is updated only at the end, so every figure of the run is
        # compared with the references from before the run, as when all were compared at the end
        found, self._seen = run_standouts(con, self.run_id, self.baseline, self.pct, self._seen)
        self.standouts += found

    def finish(self, run: dict, host_verdicts: dict[str, str]) -> list[dict]:
        """Record the run's end (``run``: inventory, limit, report_dir, verdict) and return its stand-outs
        (:func:`standouts` of this run's figures against :func:`references` taken before this run counts)."""
        stand = self.finish_rows()
        self.record_end(run, host_verdicts)
        return stand

    def finish_rows(self) -> list[dict]:
        """Insert the rows still pending (waiting up to 30 s for another writer) and return the run's stand-outs."""
        self.flush(wait_s=30.0, later_ok=False)
        return self.standouts

    def record_end(self, run: dict, host_verdicts: dict[str, str]) -> None:
        """The run row, its host verdicts and ``latest`` (in SQL: 3.7 million rows at 10,000 hosts x 23 checks,
        about 4 s of CPU here), in one transaction on a connection of its own, so that it may run in a thread
        beside the report writing (sqlite3 releases the GIL while SQLite works). Call after :meth:`finish_rows`."""
        con = connect(self.path)
        try:
            with con:
                self.kept_as = keep_earlier_run(con, self.run_id, self.started) or self.kept_as
                con.execute("DELETE FROM host_verdicts WHERE run_id=?", (self.run_id,))
                con.execute("DELETE FROM runs WHERE run_id=?", (self.run_id,))
                con.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?)", (self.run_id, self.started, run.get("inventory"),
                            self.profile, run.get("limit"), run.get("report_dir"), run.get("verdict")))
                con.executemany("INSERT INTO host_verdicts VALUES (?,?,?)",
                                [(self.run_id, h, v) for h, v in host_verdicts.items()])
                _update_latest(con, self.run_id, self.profile == "burnin", self.burned_in())
        finally:
            con.close()

    def burned_in(self) -> set[str]:
        """:func:`gpuaccept.reporting.baseline.passed_burnin_hosts` of the tests added (their last record each)."""
        return baseline_mod.passed_burnin_hosts({"host": h, "layer": baseline_mod.BURNIN_LAYER, "outcome": o}
                                                for h, o in self.burnin_tests.values())

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None


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
    out = []
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
        for against in ("baseline", "previous"):
            if against not in r:
                continue
            ref, ref_run, ref_sku = r[against][:3]
            if ref is None or not ref or (ref_sku and sku and ref_sku != sku):
                continue
            pct_below = (ref - value) / abs(ref) * 100.0
            if pct_below > pct:
                out.append({"host": host, "check": chk, "gpu": gpu, "serial": serial, "sku": sku, "value": value,
                            "unit": unit, "reference": ref, "ref_run": ref_run,
                            "against": against + (f" ({r[against][3]})" if against == "baseline" else ""),
                            "pct": round(pct_below, 1)})
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
        if not _compared(f):
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
    """Passing throughput figures more than ``pct`` percent below their baseline or previous value (pure).

    Like with like: a reference of another SKU is ignored. A failed figure is not a stand-out (it is listed
    under failures). Returns ``{host, check, gpu, serial, sku, value, unit, against, reference, ref_run, pct}``.
    """
    out = []
    for f in figures:
        if not _compared(f) or f.get("verdict") == "fail":
            continue
        r = refs.get((subject_of(f), check_of(f))) or {}
        for against in ("baseline", "previous"):
            if against not in r:
                continue
            ref, run_id, sku = r[against][:3]
            if ref is None or not ref or (sku and f.get("sku") and sku != f.get("sku")):
                continue
            below = (ref - f["value"]) / abs(ref) * 100.0
            if below > pct:
                out.append({"host": f.get("host"), "check": check_of(f), "gpu": f.get("gpu"),
                            "serial": f.get("serial"), "sku": f.get("sku"), "value": f["value"],
                            "unit": f.get("unit"), "reference": ref, "ref_run": run_id,
                            "against": against + (f" ({r[against][3]})" if against == "baseline" else ""),
                            "pct": round(below, 1)})
    return out


def fleet_groups(figures: Iterable[dict], groups: dict[tuple, list[dict]] | None = None) -> dict[tuple, list[dict]]:
    """Passing throughput figures by ``(sku, check_of)``, in order, added to ``groups`` (new when None)."""
    groups = {} if groups is None else groups
    for f in figures:
        if is_throughput(f) and f.get("verdict") != "fail":
            key = (f.get("sku"), check_of(f))
            g = groups.get(key)
            if g is None:
                g = groups[key] = []
            g.append(f)
    return groups


def fleet_outliers(figures: list[dict], pct: float = OUTLIER_PCT, mads: float = OUTLIER_MADS,
                   min_fleet: int = MIN_FLEET, groups: dict[tuple, list[dict]] | None = None) -> list[dict]:
    """Per SKU and check, passing throughput figures below the fleet median by more than ``pct`` percent and
    by more than ``mads`` x 1.4826 x MAD (pure). A fleet of fewer than ``min_fleet`` figures is not judged.
    ``groups``: :func:`fleet_groups` of the figures, when kept as they arrived (``figures`` is then unused).
    Returns ``{host, check, gpu, serial, sku, value, unit, against: "fleet", reference: median, pct, mads}``."""
    if groups is None:
        groups = fleet_groups(figures)
    out = []
    for (sku, chk), fs in groups.items():
        if len(fs) < min_fleet:
            continue
        vals = sorted([float(f["value"]) for f in fs])
        med = _median(vals)
        mad = _median(sorted([abs(v - med) for v in vals])) * MAD_SCALE
        # below the median by more than pct % and by more than mads x MAD: only values under both cut-offs
        cut = med - 0.999999 * max(abs(med) * pct / 100.0, mads * mad)  # (slack for rounding: re-checked below)
        for f in [f for f in fs if f["value"] <= cut]:
            dist = med - float(f["value"])
            if med and dist / abs(med) * 100.0 > pct and dist > mads * mad:
                out.append({"host": f.get("host"), "check": chk, "gpu": f.get("gpu"), "serial": f.get("serial"),
                            "sku": sku, "value": f["value"], "unit": f.get("unit"), "against": "fleet",
                            "reference": med, "pct": round(dist / abs(med) * 100.0, 1),
                            "mads": round(dist / mad, 1) if mad else "inf"})
    return out


def _median(vals: list[float]) -> float:
    n = len(vals)
    return vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2.0


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


if __name__ == "__main__":
    sys.exit(main())
