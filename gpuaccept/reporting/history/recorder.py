"""One run's history written while the run goes (:class:`RunRecorder`)."""
from __future__ import annotations

import sqlite3
import time

from gpuaccept.judging.standouts import peer_groups
from gpuaccept.reporting import baseline as baseline_mod
from gpuaccept.reporting.history.compare import STANDOUT_PCT, fleet_outliers, run_standouts
from gpuaccept.reporting.history.rows import (INSERT_FIGURE, INSERT_TEST, figure_rows, keep_earlier_run, test_of,
                                              test_row, update_latest)
from gpuaccept.reporting.history.schema import connect, held_by_another

# A flush of a run's rows during the run waits at most this long for another run's write (then the rows wait
# for the next flush: the run is never held up by the database); the end of the run waits 30 s, as connect().
BUSY_WAIT_S = 0.0


class RunRecorder:
    """One run's history, written while the run goes: :meth:`add` per finished test (O(its figures): rows made
    now), :meth:`flush` right after (gpuaccept.plugin.finish.HistorySink: the rows so far in one short transaction,
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
        self.groups: dict[tuple, list[dict]] = {}  # peer_groups() of every figure so far
        self.burnin_tests: dict[str, tuple] = {}  # nodeid -> (host, outcome) of the burn-in tests (last wins)
        self._wait_s = -1.0
        self.kept_as: str | None = None  # an earlier run of the same id, renamed (keep_earlier_run)

    def add(self, test: dict, figures: list[dict]) -> None:
        """A finished test (nodeid, host, layer, outcome, message, causes) and its figures (with sku where known)."""
        self.tests.append(test_row(self.run_id, test))
        self.figures += figure_rows(self.run_id, self.started, figures)
        if test.get("layer") == baseline_mod.BURNIN_LAYER:  # a record replaced later: its last outcome counts
            self.burnin_tests[test.get("nodeid")] = (test.get("host"), test.get("outcome"))
        peer_groups(figures, self.groups)

    def add_record(self, r) -> None:
        """:meth:`add` of a finished test's record (gpuaccept.reporting.records.CaseRecord: :func:`test_of`)."""
        self.add(test_of(r), r.figures)

    def fleet_outliers(self) -> list[dict]:
        """:func:`fleet_outliers` of every figure added (grouped as they arrived)."""
        return fleet_outliers([], groups=self.groups, pct=self.pct)

    def _connect(self) -> sqlite3.Connection:
        if self.con is None:
            con = connect(self.path, threads=True)  # flushed from a timer thread too (serialised)
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
                con.executemany(INSERT_TEST, self.tests)
        except sqlite3.OperationalError as e:
            if later_ok and held_by_another(e):
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
                update_latest(con, self.run_id, self.profile == "burnin", self.burned_in())
        finally:
            con.close()

    def burned_in(self) -> set[str]:
        """:func:`gpuaccept.reporting.baseline.passed_burnin_hosts` of the tests added (their last record each)."""
        return baseline_mod.passed_burnin_hosts({"host": h, "layer": baseline_mod.BURNIN_LAYER, "outcome": o}
                                                for h, o in self.burnin_tests.values())

    def close(self) -> None:
        """Close the connection the flushes used (the end's own connection is closed by :meth:`record_end`)."""
        if self.con is not None:
            self.con.close()
            self.con = None

