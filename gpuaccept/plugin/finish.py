"""The end of a run's reports, and the history database as the Reporter's sink while the run goes on: the
part of the report plugin (gpuaccept.plugin.reports) that writes after the last test, kept apart so that
benchmarks/report_scale.py times exactly what a run does at its end."""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Iterable

from gpuaccept.judging.standouts import PCT as STANDOUT_PCT, outliers
from gpuaccept.reporting.baseline import is_compared
from gpuaccept.reporting.folder import atomic_write_pieces, load_previous_figures
from gpuaccept.reporting.later import Later
from gpuaccept.reporting.records import no_gc
from gpuaccept.reporting.reporter import Reporter
from gpuaccept.reporting.verdicts import run_verdict


# The history rows of a finished test are inserted within this many seconds of its record, on a timer when no
# later record comes (one short transaction each; a commit per test cost 40 us CPU more per test at 10,000
# hosts; the end of the run then has at most this much of the run's rows left to insert). A controller killed
# with SIGKILL loses at most the tests of its last HISTORY_EVERY_S (plus a transaction's time, or longer only
# while another run holds the database: the rows wait for the next try); the merge adds those from results.jsonl
# (gpuaccept.scaleout.merge). Chosen.
HISTORY_EVERY_S = 1.0


def warm_up(prometheus: bool = False) -> threading.Thread:
    """Import what the end of the run writes with (report.html's Jinja2 environment and its template compiled,
    the actions table the host verdicts read, prometheus_client when ``prometheus``), in a daemon thread started
    now, while the probes run: the controller waits on the nodes then, and the last test's end is followed by the
    writes alone (and no periodic rewrite pays for a first load: the next one is due 10x its cost later). A
    failure here is left to the end, which imports the same again and says what is missing. Returns the thread
    (started)."""
    def load() -> None:
        try:
            from gpuaccept.judging import actions
            actions.load_table()
            from gpuaccept.reporting import html as html_report
            html_report.prepare()
            if prometheus:
                from gpuaccept.reporting import prometheus as _  # noqa: F401
        except Exception:  # noqa: BLE001 - the end's own import reports it
            pass

    t = threading.Thread(target=load, name="gpuaccept-report-warm-up", daemon=True)
    t.start()
    return t


class HistorySink:
    """The history database as a :attr:`Reporter.sinks` entry: each record's rows made when it arrives and
    inserted within :data:`HISTORY_EVERY_S`: by the record itself when the last insert is that old, else by a
    timer thread (one transaction per batch; WAL, synchronous=NORMAL), without waiting when another run holds
    the database (then they go with the next try), so the end of the run has only the run row and the
    stand-outs left (gpuaccept.reporting.history.RunRecorder). The first error stops it and is kept in
    :attr:`error` (reported at the end as the history's; the run's verdicts stand). Call :meth:`stop` before
    the end's own writes."""

    def __init__(self, path: str, run_id: str, started: float | None, profile: str | None,
                 baseline: str | None = None, standout_pct: float | None = None):
        from gpuaccept.reporting import history
        self.path = path
        self.recorder = history.RunRecorder(path, run_id, started, profile, baseline,
                                            standout_pct or STANDOUT_PCT)
        self.error: str | None = None
        self._next = 0.0
        self._lock = threading.RLock()  # the recorder's pending rows and connection: the caller's or the timer's
        self._later = Later(self._tick, self._lock, "gpuaccept-history-flush")

    def add(self, r) -> None:
        """A finished test's record (gpuaccept.reporting.records.CaseRecord): its rows now, inserted within
        :data:`HISTORY_EVERY_S` (now, or by the timer)."""
        with self._lock:
            if self.error is None:
                self.recorder.add_record(r)
                if time.monotonic() >= self._next:
                    self.flush()
                self._arm()

    def _pending(self) -> bool:
        return bool(self.recorder.figures or self.recorder.tests)

    def _arm(self) -> None:
        """Start the timer for the rows still pending (one at a time), due when the next insert is."""
        if self.error is not None or not self._pending():
            return
        self._later.arm(self._next - time.monotonic())

    def _tick(self) -> None:
        self.flush()
        if self._pending():  # another run held the database: try again at the next turn
            self._next = time.monotonic() + HISTORY_EVERY_S
            self._arm()

    def flush(self) -> None:
        """Insert the rows so far (without waiting for another writer: then they go with the next flush)."""
        with self._lock:
            self._next = time.monotonic() + HISTORY_EVERY_S
            self.guard(self.recorder.flush)

    def stop(self) -> None:
        """No more timer flushes (the end of the run writes what is left itself); waits for one in progress."""
        self._later.stop()

    def guard(self, fn, *args, **kw) -> Any:
        """``fn(*args, **kw)``; on a database error remember it, drop the pending rows and return None."""
        if self.error is not None:
            return None
        from gpuaccept.reporting import history
        try:
            return fn(*args, **kw)
        except (history.HistoryError, OSError) as e:
            self.error = f"history {self.path}: {e}"
        except Exception as e:  # sqlite3.Error: the run's verdicts stand; the history is reported as lost
            self.error = f"history {self.path}: {type(e).__name__}: {e}"
        self.recorder.figures, self.recorder.tests = [], []
        return None


def finish_reports(rep: Reporter, hist: HistorySink | None, prometheus_path: str | None = None,
                   timings: dict[str, float] | None = None, standout_pct: float | None = None,
                   inventory_hosts: Iterable[str] | None = None) -> None:
    """The end of a run's reports (also on interrupt): stand-outs (found as the rows reached the history
    database through ``hist``, else against the previous run's results.json) and the run's end in the history, then the
    whole-run files (:meth:`Reporter.flush`), report.html and, with ``prometheus_path``, the textfile.
    Failures to write are kept in ``rep.write_error`` (the first one), never raised. ``timings``: filled with
    the wall seconds of each part (history, files, html, prometheus), for benchmarks/report_scale.py.
    ``standout_pct``: ``--standout-pct`` for the comparison with the previous run without a history (the
    history sink has its own); default gpuaccept.judging.standouts.PCT. ``inventory_hosts``: every host of the
    inventory (None: not known), the hosts whose last-run timestamps the textfile keeps when this run did not test
    them (gpuaccept.reporting.prometheus.write_textfile)."""
    with no_gc():
        _finish_reports(rep, hist, prometheus_path, {} if timings is None else timings, standout_pct,
                        inventory_hosts)


def _finish_reports(rep: Reporter, hist: HistorySink | None, prometheus_path: str | None,
                    timings: dict[str, float], standout_pct: float | None,
                    inventory_hosts: Iterable[str] | None) -> None:
    finished = time.time()
    t0 = time.perf_counter()
    hv = rep.host_verdicts()
    verdicts = {h: v["verdict"] for h, v in hv.items()}
    verdict = run_verdict(hv)
    from gpuaccept.reporting import html as html_report
    figures = rep.figures()
    sparks: dict[tuple, list[float]] = {}
    stand: list[dict] = []
    ending = None
    if hist is not None:
        from gpuaccept.reporting import history
        hist.stop()  # the timer's inserts end here: the end inserts what is left
        got = hist.guard(hist.recorder.finish_rows)
        if hist.error is None:  # the run row and latest: in a thread, beside the outliers and files (joined below)
            end = {"inventory": rep.meta.get("inventory"), "limit": rep.meta.get("limit"), "report_dir": rep.dir,
                   "verdict": verdict}
            ending = threading.Thread(target=hist.guard, args=(hist.recorder.record_end, end, verdicts),
                                      name="gpuaccept-history-end")
            ending.start()
        stand = (got or []) + hist.recorder.fleet_outliers()
        con = hist.recorder.con
        if hist.error is None and con is not None:
            def spark():
                for key, f in html_report.spark_keys(figures, rep.gpu_table()):
                    sparks[key] = [v for _, v, _ in history.series(con, history.subject_of(f), history.check_of(f))]
            hist.guard(spark)
    else:
        # against the previous run's results.json, read only now (at 10,000 hosts it holds 1.84 M figures: GBs
        # of memory for the whole run, and for nothing when the history database is kept)
        prev = rep.meta.get("previous_run")
        stand = outliers(figures, rep.previous or (load_previous_figures(prev) if prev else []),
                         standout_pct or STANDOUT_PCT, os.path.basename(prev) if prev else None, is_compared)
    rep.final_standouts = stand
    timings["history"] = time.perf_counter() - t0
    try:
        _write_files(rep, figures, stand, sparks, hv, verdicts, finished, prometheus_path, t0, timings,
                     inventory_hosts)
    finally:
        if hist is not None:
            t1 = time.perf_counter()
            if ending is not None:
                ending.join()
            hist.recorder.close()
            if hist.error:
                rep.write_error = rep.write_error or hist.error
            timings["history end"] = time.perf_counter() - t1  # waited for the thread after everything else


def _write_files(rep: Reporter, figures: list[dict], stand: list[dict], sparks: dict, hv: dict,
                 verdicts: dict[str, str], finished: float, prometheus_path: str | None, t0: float,
                 timings: dict[str, float], inventory_hosts: Iterable[str] | None = None) -> None:
    sinks, rep.sinks = rep.sinks, []  # the history is complete: the final rewrite writes files only
    rep.flush(final=True)
    rep.sinks = sinks
    rep.close_jsonl()
    timings["files"] = time.perf_counter() - t0 - timings["history"]
    from gpuaccept.reporting import html as html_report
    recs = list(rep.records.values())
    try:
        rep._guard("report.html", lambda: atomic_write_pieces(os.path.join(rep.dir, "report.html"), html_report.pieces(
            rep.run_id, rep.meta, recs, figures, stand, sparks, hv=hv, table=rep.gpu_table(), tally=rep.tally())))
    except ImportError as e:  # a plotting library missing on the controller: every other report stands
        rep.write_error = rep.write_error or f"report.html not written: {e} (pip install -e . installs it)"
    timings["html"] = time.perf_counter() - t0 - timings["history"] - timings["files"]
    if prometheus_path:
        from gpuaccept.reporting import prometheus
        try:
            prometheus.write_textfile(prometheus_path, rep.run_id, rep.meta.get("started") or finished, finished,
                                      figures, verdicts, host_actions={h: v.get("action") for h, v in hv.items()},
                                      inventory_hosts=inventory_hosts)
        except OSError as e:
            rep.write_error = rep.write_error or f"{prometheus_path}: cannot write: {e.strerror or e}"
    timings["prometheus"] = time.perf_counter() - t0 - timings["history"] - timings["files"] - timings["html"]
