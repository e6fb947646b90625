"""The history database file: its schema (:data:`MIGRATIONS`, version in ``PRAGMA user_version``, migrated
forward on open), opening it for writing (:func:`connect`, WAL journal) or reading only
(:func:`connect_readonly`), and why a path cannot be written (:func:`not_writable`). The tables are described
in gpuaccept.reporting.history.
"""
from __future__ import annotations

import os
import sqlite3
import time
import urllib.parse

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
    # v3: the drains and resumes gpuaccept made in Slurm (gpuaccept.reporting.history.drains). A new
    # table only: a v2 database is read as before, and migrated forward when opened for writing
    """
    CREATE TABLE slurm_events (run_id TEXT NOT NULL, at REAL NOT NULL, host TEXT, node TEXT NOT NULL,
                               event TEXT NOT NULL, action TEXT, cause TEXT, reason TEXT,
                               repeating INTEGER NOT NULL DEFAULT 0, resumed_at REAL, resumed_run TEXT);
    CREATE INDEX slurm_events_node ON slurm_events (node, at);
    """,
    # v4: runs known to have been killed: a run whose controller died before its end left its finished
    # tests and no run row; the next run on that controller or the merge finds it (its report folder's .running
    # lock free, its results.json not complete) and records it here. A new table only: ``runs`` keeps one row
    # per finished run, as before, and a v3 database is read as before (no run is then known to be killed)
    """
    CREATE TABLE killed_runs (run_id TEXT NOT NULL PRIMARY KEY, started REAL, last_record REAL, found_at REAL NOT NULL,
                              found_by TEXT, report_dir TEXT);
    """,
    # v5: the cordons and uncordons gpuaccept made in Kubernetes, as slurm_events holds Slurm's. A new
    # table only: a v4 database is read as before, and migrated forward when opened for writing
    """
    CREATE TABLE k8s_events (run_id TEXT NOT NULL, at REAL NOT NULL, host TEXT, node TEXT NOT NULL,
                             event TEXT NOT NULL, action TEXT, cause TEXT, reason TEXT,
                             repeating INTEGER NOT NULL DEFAULT 0, resumed_at REAL, resumed_run TEXT);
    CREATE INDEX k8s_events_node ON k8s_events (node, at);
    """,
    # v6: tests found by their run: a run's start removes a re-used run id's rows and the merge looks runs up by
    # id; without it each is a scan of every test row ever kept (96,000 rows: 34 ms per statement here)
    """
    CREATE INDEX tests_run ON tests (run_id);
    """,
    # v7: each test's causes filed under its host (``class/kind``, space-separated with a space at each end, so a
    # cause is matched whole: ' connectivity/unreachable '), and the tests of a host found by host: what earlier
    # runs said of a host that does not answer again (gpuaccept.reporting.history.earlier.unreachable_runs). A v6
    # database is read as before (its tests carry no causes: none of its runs counts as one the host was
    # unreachable in)
    """
    ALTER TABLE tests ADD COLUMN causes TEXT;
    CREATE INDEX tests_host ON tests (host, run_id);
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


class HistoryError(Exception):
    """The history database cannot be opened, is newer than this gpuaccept, or is not ours."""


#: SQLite's primary result codes for a database another connection holds (sqlite.org/rescode.html: SQLITE_BUSY 5,
#: SQLITE_LOCKED 6)
BUSY_CODES = (5, 6)


def held_by_another(e: sqlite3.Error) -> bool:
    """Whether ``e`` says another connection holds the database (SQLITE_BUSY or SQLITE_LOCKED, extended codes
    included), from its ``sqlite_errorcode`` (Python 3.11+); on an older Python, which gives no code, from
    SQLite's own message ("database is locked", "database table is locked", "... busy")."""
    code = getattr(e, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in BUSY_CODES
    return "locked" in str(e) or "busy" in str(e)


def connect(path: str, upto: int = SCHEMA_VERSION, threads: bool = False) -> sqlite3.Connection:
    """Open (creating) the database at ``path``, in WAL mode, migrated to schema ``upto``. ``threads``: the
    connection may be used from another thread than the one that opened it (the caller serialises its use:
    gpuaccept.plugin.finish.HistorySink flushes from a timer thread).

    Raises HistoryError (one line) when the file is not an SQLite database, is another program's (no schema
    version of ours and tables of its own: nothing of it is changed, its journal mode included), has a newer
    schema than this code, or cannot be migrated.
    """
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    try:
        con = sqlite3.connect(path, timeout=30, check_same_thread=not threads)
        # the version and the tables read in one snapshot: a run creating this history at the same moment commits
        # its tables and its version together (_migrate), so neither is seen without the other
        con.execute("BEGIN")
        try:
            ver = con.execute("PRAGMA user_version").fetchone()[0]
            theirs = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                                                "ORDER BY name LIMIT 4")] if ver == 0 else []
        finally:
            con.execute("COMMIT")
        if ver == 0:  # new, or someone else's: ours always carries its schema version
            if theirs:
                con.close()
                raise HistoryError(f"{path}: not a gpuaccept history database (it holds another program's tables: "
                                   f"{', '.join(theirs)}); give a new file or a gpuaccept history")
        _wal(con)
        con.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.OperationalError as e:
        if held_by_another(e):
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
        try:
            _migrate(con, upto)
        except sqlite3.Error as e:
            con.close()
            raise HistoryError(f"{path}: could not bring the history to schema {upto} ({type(e).__name__}: "
                               f"{e})") from None
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
            if not held_by_another(e) or time.monotonic() > deadline:
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

