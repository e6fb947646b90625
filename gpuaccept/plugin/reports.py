"""The report side of the pytest plugin: one :class:`ReportPlugin` object per run, holding its configuration
(as pytest's own ``junitxml.LogXML`` does), registered by ``gpuaccept.plugin.pytest_configure`` on the
controller only (never in an xdist worker: workers' reports reach the controller's hooks).

What it owns: the report folder's life (a folder is made only for a run that runs tests: ``--collect-only``,
``--list-hosts`` and a selection that deselects everything leave none and do not move ``reports/latest``;
a ``--reports`` folder that already holds a run is refused), the records of finished tests
(gpuaccept.reporting.reporter.Reporter), and at the end the history database (gpuaccept.reporting.history), the
stand-outs (gpuaccept.judging.standouts), ``report.html`` (gpuaccept.reporting.html) and the Prometheus textfile
(gpuaccept.reporting.prometheus). It starts the progress display (gpuaccept.plugin.progress) when the first test runs.
"""
from __future__ import annotations

import os
import re
import socket
import sys
import time
from typing import Any

import pytest

import gpuaccept
from gpuaccept.runner import host as node_mod
from gpuaccept.causes import CAUSE_KEY, Cause
from gpuaccept.errors import ERROR_KEY, ERROR_KIND_KEY, ConfigError
from gpuaccept.judging.actions import for_case
from gpuaccept.config.profiles import probe_timeout
from gpuaccept.plugin.progress import Progress, real_stderr
from gpuaccept.judging import verdict_order
from gpuaccept.plugin import earlier
from gpuaccept.plugin.finish import HistorySink, finish_reports, warm_up
from gpuaccept.plugin.release import hosts_in_run
from gpuaccept.plugin.state import RunState
from gpuaccept.plugin.runfolder import latest_finished, mark_killed_run, point_latest, reserve_folder
from gpuaccept.reporting.folder import RunLock, find_killed, run_finished, space_problem
from gpuaccept.reporting.records import CaseRecord, counted_failures, host_of, layer_of, case_file, case_name
from gpuaccept.reporting.reporter import Reporter
from gpuaccept.reporting.verdicts import action_hosts, failed_hosts, interruption_text, run_verdict, unfinished
from gpuaccept.reporting.text import count_text
from gpuaccept.reporting.verdicts import filed_hosts, gpu_figures_judged, judged_something, skip_groups, skip_who

#: user_properties the plugin puts on one phase's report only (gpuaccept.plugin.pytest_runtest_makereport), never on
#: the item: a later phase's report does not carry them again
REPORT_ONLY_KEYS = frozenset({ERROR_KEY, ERROR_KIND_KEY, CAUSE_KEY})


#: skip reasons listed in the console, most hosts first (summary.md lists them all). Chosen.
SKIP_LINES = 10


def run_line(hv: dict[str, dict], recs: list, judged: int | None = None) -> str:
    """The run's verdict line (pure): ``"gpuaccept: SKIP (1 host SKIP), 0 GPU figures judged"``. The run reads
    the worst of its hosts' verdicts in the verdict order (FAIL > ERROR > PASS > SKIP): a run none of whose
    hosts judged a figure reads SKIP, never PASS. ``judged``: the GPU figures judged in ``recs`` when counted
    already (gpuaccept.reporting.tally.RunTally.gpu_judged)."""
    tally: dict[str, int] = {}
    for h, v in hv.items():
        if h != "fleet":
            tally[v["verdict"]] = tally.get(v["verdict"], 0) + 1
    verdict = run_verdict(hv)
    parts = ", ".join(f"{tally[k]} host{'s' if tally[k] != 1 else ''} {k}" for k in verdict_order.ORDER if tally.get(k))
    n = gpu_figures_judged(recs) if judged is None else judged
    return f"gpuaccept: {verdict} ({parts or 'no host'}), {n} GPU figure{'s' if n != 1 else ''} judged"


def host_verdict_lines(hv: dict[str, dict]) -> list[str]:
    """One console line per host (pure), the last copy of the verdicts when the report files could not be
    written: ``gpuaccept: host gpu01: FAIL: hbm/hbm_copy_gbps gpu3 ...`` (its first reason; the fleet
    pseudo-host last)."""
    out = []
    for h in sorted(hv, key=lambda n: (n == "fleet", n)):
        v = hv[h]
        why = (v.get("reasons") or [""])[0]
        out.append(f"gpuaccept: host {h}: {v['verdict']}" + (f": {why}" if why else ""))
    return out


def _id_of(name: str) -> str:
    """The id pytest gives a parameter value ``name`` (non-ASCII escaped, as in ``_pytest.compat``)."""
    try:
        from _pytest.compat import ascii_escaped
    except ImportError:  # pragma: no cover - pytest moved it: ids of ASCII names are the names
        return name
    return ascii_escaped(name)


def _history_empty(path: str) -> bool:
    """Whether the history database at ``path`` holds no run and no test row (False when it cannot be read)."""
    import sqlite3
    try:
        con = sqlite3.connect(path, timeout=1)
        try:
            return not con.execute("SELECT EXISTS (SELECT 1 FROM runs) OR EXISTS (SELECT 1 FROM tests)").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return False


class ReportPlugin:
    """The report hooks of one run, with their configuration. Made by ``gpuaccept.plugin.pytest_configure``:

    ``state``: the plugin's run state (inventory, hosts, started); ``inv_path``: the inventory file. Reads the
    options --reports, --history, --baseline, --standout-pct, --prometheus-textfile, --progress, --profile.
    Raises ConfigError (exit 4 before any node is touched) for a --reports folder that holds a run.
    """

    def __init__(self, config: pytest.Config, state: RunState, inv_path: str):
        self._error_key, self._layer_of = ERROR_KEY, layer_of
        # pytest writes a parameter id in ASCII ("gpu-\\xe91" for "gpu-é1"): map ids back to inventory names
        self._host_names = {_id_of(h.name): h.name for h in state.hosts}
        self.config = config
        self.state = state
        self.partial: dict[str, dict] = {}
        self.slurm_lines: list[str] = []  # the Slurm step's lines (gpuaccept.scaleout.drain), said at the end
        self.slurm_ok = True  # False: the Slurm step held its drains back (--drain-max) or a call failed
        self.collect_only = bool(config.getoption("collectonly", False))
        self.began = False
        self.created = False
        self.progress: Progress | None = None
        self._progress_tried = False  # the display was started, or found off, once
        self.reporter: Reporter | None = None
        self.history_path = self._opt("history") or earlier.history_path(config)
        self._stderr = None
        self.history: HistorySink | None = None
        self.history_made: list[str] = []  # what _check_history created: undone when the run is refused
        self.lock: RunLock | None = None  # the report folder's .running, held from the first test to the end
        self.killed_lines: list[str] = []  # killed runs found beside this one (said in the terminal summary)
        if self.collect_only:
            return
        self._stderr = real_stderr()
        self._check_baseline()  # before the history is created: "no history database" must stay that
        self._check_history()
        latest = config.invocation_params.dir / "reports" / "latest"
        # the previous run: the last finished one (a killed run's results.json is no reference)
        previous = os.path.realpath(latest) if os.path.isdir(latest) and run_finished(os.path.realpath(latest)) else None
        rdir, self.created = reserve_folder(config)
        self.run_id = os.path.basename(os.path.normpath(rdir))
        state.probe_dir = os.path.join(rdir, "probes")  # every probe's raw document, per host
        hosts = state.hosts
        host_sku = {h.name: h.vars.get("gpu_sku") for h in hosts if h.vars.get("gpu_sku")}
        if config.getoption("sku"):
            host_sku = {h.name: config.getoption("sku") for h in hosts}
        self.reporter = Reporter(rdir, self.run_id, {
            "inventory": inv_path, "limit": config.getoption("limit"), "hosts": [h.name for h in hosts],
            "started": state.started, "previous_run": previous, "profile": config.getoption("profile"),
            "host_sku": host_sku, "gpuaccept_version": gpuaccept.__version__})  # the previous run's figures are read at the end, and only without history
        if self._opt("history") != "none":  # the run's rows go into the database as they arrive
            self.history = HistorySink(self.history_path, self.run_id, state.started, config.getoption("profile"),
                                       self._opt("baseline"), self._opt("standout_pct"))
            self.reporter.sinks.append(self.history)

    def _say_where(self, config) -> None:
        """The run's first line says where it writes, once its tests are known (a selection of none writes
        nothing): the report folder and the history database (its default, ``reports/history.sqlite`` under the
        suite's folder, is outside a ``--reports`` folder)."""
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr is None or self.reporter is None:
            return
        given = self._opt("history")
        hist = "none (--history none)" if given == "none" else self.history_path + (
            "" if given else " (the default; --history PATH or --history none to change)")
        tr.write_line(f"gpuaccept: reports in {self.reporter.dir}; history in {hist}")

    def _check_history(self) -> None:
        """The history database (``--history``, default ``reports/history.sqlite``) must open, created if new,
        before any node is touched: a typo (a text file, a folder, an unwritable path) is exit 4 in one line,
        not an error found after an hour of burn-in whose figures then never reach the history."""
        if self._opt("history") == "none":
            return
        from gpuaccept.reporting import history
        path = os.path.abspath(self.history_path)
        folders, d = [], os.path.dirname(path)
        while not os.path.lexists(d):
            folders.append(d)
            d = os.path.dirname(d)
        made = [] if os.path.lexists(path) else [path + s for s in ("-wal", "-shm", "")] + folders
        try:
            history.connect(self.history_path).close()
            self.history_made = made
        except history.HistoryError as e:
            raise ConfigError(f"--history: {e}") from None
        except OSError as e:
            raise ConfigError(f"--history {self.history_path}: cannot be created ({e.strerror or e})") from None

    def _check_baseline(self) -> None:
        """``--baseline RUN_ID`` must name a run of the history database; ConfigError (exit 4) otherwise,
        before any node is touched (a stand-out list against nothing would read as "no stand-outs")."""
        from gpuaccept.reporting import history
        baseline = self._opt("baseline")
        if baseline and self._opt("history") == "none":  # the baseline is read from the history: none to read
            raise ConfigError(f"--baseline {baseline} compares with runs of the history database, and --history "
                              "none keeps none: leave one of the two out")
        if not baseline or baseline == "latest-pass":
            return
        try:
            found = history.run_exists(self.history_path, baseline)
        except history.HistoryError as e:
            raise ConfigError(f"--baseline {baseline}: {e}") from None
        if not found:
            raise ConfigError(f"--baseline {baseline}: no such run in {self.history_path} "
                              f"(python -m gpuaccept.reporting.history --host HOST lists runs)")

    def _opt(self, name: str, default: Any = None) -> Any:
        try:
            return self.config.getoption(name)
        except ValueError:
            return default

    # -- the run's life ----------------------------------------------------------------------------
    def _begin(self) -> None:
        """First sign that tests will run: move reports/latest here, take the folder's lock, write the whole-run
        files (INCOMPLETE), start the progress display where the collection's end did not."""
        if self.began or self.reporter is None:
            return
        self.began = True
        if self.config.getoption("reports") is None and not latest_finished(self.reporter.dir):
            point_latest(self.reporter.dir)  # no finished run to point at: this one, until one finishes
        self._hold_folder()
        self.reporter.begin()  # every whole-run file says INCOMPLETE from the first test on (a kill leaves that)
        if not self.config.option.collectonly:
            warm_up(bool(self._opt("prometheus_textfile")))  # the end's imports, while the nodes work
        self._start_progress()

    def _start_progress(self) -> None:
        """Start the progress display (once) and hear the probes' start, progress and end from then on."""
        if self._progress_tried:
            return
        self._progress_tried = True
        mode = self._opt("progress", "auto")
        stream = self._stderr or sys.__stderr__
        if mode != "off" and stream is not None:
            tty = mode == "tty" or (mode == "auto" and stream.isatty())
            self.progress = Progress(stream, tty, probe_timeout(self.config), self.state.progress_dir)
            self.progress.start()
            node_mod.PROBE_STARTED.append(self._probe_started)
            node_mod.PROBE_PROGRESS.append(self._probe_progress)
            node_mod.PROBE_FINISHED.append(self._probe_finished)

    def _hold_folder(self) -> None:
        """Take the report folder's lock for the run's life (gpuaccept.reporting.folder.RunLock), then look for
        runs beside it whose controller died before their end (their lock free, results.json not complete): each
        is marked killed in the history it wrote to (gpuaccept.reporting.history.mark_killed), and said at the
        end. Best effort: a folder or database that cannot be written is no reason to stop the run."""
        rep = self.reporter
        hist = None if self._opt("history") == "none" else os.path.abspath(self.history_path)
        try:
            self.lock = RunLock(rep.dir, {"run_id": self.run_id, "pid": os.getpid(), "host": socket.gethostname(),
                                          "started": self.state.started, "history": hist})
        except OSError:
            self.lock = None
        for info in find_killed(os.path.dirname(os.path.abspath(rep.dir)), f"run {self.run_id}", skip=rep.dir):
            self.killed_lines.append(mark_killed_run(info))

    def _probe_started(self, host: str, probe: str, timeout_s: float) -> None:
        if self.progress is not None:
            self.progress.begin(host, f"probe {probe}", timeout_s)

    def _probe_finished(self, host: str, probe: str) -> None:
        if self.progress is not None:
            self.progress.done(host, f"probe {probe}")

    def _probe_progress(self, host: str, probe: str, doc: dict) -> None:
        if self.progress is not None:
            self.progress.update(host, probe, doc)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session) -> None:
        """Expect the selected tests and refuse a report folder without room for them, before the main
        plugin's fan-out (gpuaccept.plugin.pytest_collection_finish) touches a node."""
        if self.reporter is None:
            return
        self._hosts_in_run([it.nodeid for it in session.items])
        for it in session.items:  # after -k/-m deselection: only what will run is expected
            self.reporter.expect(it.nodeid, self._host_of(it.nodeid), self._layer_of(it.nodeid))
        if session.items and not session.config.option.collectonly:
            self._check_space(len(session.items))
            self._say_where(session.config)
        if session.items:  # (a folder without room raised above)
            self._start_progress()  # before the fan-out: its first probes are shown as they start

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session):
        """The run's first write (:meth:`_begin`) once the fan-out has started: the nodes connect and probe
        while the whole-run files are written and the end's modules imported (on a 2-core controller over 32
        sshd nodes, 0.05-0.1 s that came before every node's start)."""
        if self.reporter is not None and session.items:
            self._begin()
            self._expect_tests([it.nodeid for it in session.items])
        return (yield)

    def _check_space(self, n_tests: int) -> None:
        """Refuse the run (exit 4, one line, the empty folder removed) before any node is touched when the
        report filesystem has less free space than ``n_tests`` tests need (gpuaccept.reporting.folder)."""
        why = space_problem(self.reporter.dir, n_tests)
        if why is None:
            return
        where = self.reporter.dir
        self.discard()
        self.reporter = None  # nothing of this run is written
        msg = f"--reports {where}: {why}" if self._opt("reports") else f"reports folder {where}: {why}"
        if self.config.pluginmanager.get_plugin("dsession") is not None:  # xdist's controller: its loop ends the run
            pytest.exit(msg, returncode=pytest.ExitCode.USAGE_ERROR)
        raise pytest.UsageError(msg)

    def _hosts_in_run(self, nodeids) -> None:
        """The reports' hosts: the selected ones the selected tests reach (gpuaccept.plugin.release.hosts_in_run),
        before any record: a host whose tests -k/-m left out gets no verdict, no Prometheus series, no line."""
        self.reporter.set_hosts(hosts_in_run(map(self._host_of, nodeids), self.reporter.meta.get("hosts") or []))

    def _expect_tests(self, nodeids) -> None:
        """Tell the console how many tests each host runs (its line comes with the last)."""
        if self.progress is None:
            return
        per: dict[str, int] = {}
        for nid in nodeids:
            h = self._host_of(nid) or "fleet"
            per[h] = per.get(h, 0) + 1
        self.progress.expect(per)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        if self.reporter is None:
            return
        if not self.began:
            self._hosts_in_run(ids)
        for nid in ids:
            self.reporter.expect(nid, self._host_of(nid), self._layer_of(nid))
        if ids and not self.began:
            self._check_space(len(ids))
            self._say_where(self.config)
            self._begin()
            self._expect_tests(ids)  # every worker collects the same ids: counted once

    def pytest_runtest_logstart(self, nodeid, location) -> None:
        if self.progress is not None:
            self.progress.begin(self._host_of(nodeid) or "fleet", case_name(nodeid).partition("[")[0])

    def _message(self, report) -> str:
        if report.skipped and isinstance(report.longrepr, tuple):
            return str(report.longrepr[2]).removeprefix("Skipped: ")
        ours = [v for k, v in report.user_properties if k == self._error_key]
        if ours:
            return ours[-1]
        # xdist prefixes a worker's failure text with "[gw0] linux -- Python ..."; drop that line
        lines = [ln for ln in (report.longreprtext or "").splitlines() if not re.match(r"\[gw\d+\] ", ln)]
        text = "\n".join(lines).strip()
        return text if len(text) < 4000 else text[-4000:]

    def pytest_runtest_logreport(self, report) -> None:
        if self.reporter is None:
            return
        self._begin()
        part = self.partial.setdefault(report.nodeid, {"outcome": "passed", "message": "", "duration": 0.0,
                                                       "props": []})
        part["duration"] += getattr(report, "duration", 0.0) or 0.0
        # a later phase's report carries the item's properties again (figures, failure entries), not what the
        # plugin put on an earlier phase's report alone (an error's mark, kind and causes): those are kept
        new = list(report.user_properties)
        if new:
            have = {k for k, _ in new}
            part["props"] = new + [(k, v) for k, v in part["props"] if k in REPORT_ONLY_KEYS and k not in have]
        if report.skipped and part["outcome"] == "passed":
            part["outcome"], part["message"] = "skipped", self._message(report)
        elif report.failed:
            is_ours = any(k == self._error_key for k, _ in report.user_properties)
            kind = "failed" if report.when == "call" and not is_ours else "error"
            if part["outcome"] not in ("failed", "error"):
                part["outcome"], part["message"] = kind, self._message(report)
        if report.when == "teardown":
            self._finalize(report.nodeid, complete=True)
            if self.progress is not None:
                r = self.reporter.records[report.nodeid]
                first = (r.message or "").strip().splitlines()[0] if (r.message or "").strip() else ""
                names = self.reporter.meta.get("hosts") or []
                filed = filed_hosts(r, names, set(names)) if r.host is None and r.outcome in ("failed", "error") \
                    else []  # a fleet-wide test's finding counts against the hosts it is filed under
                self.progress.end(self._host_of(report.nodeid) or "fleet", r.outcome,
                                  f"{r.name.split('[')[0]}: {first}" if first else "", judged_something(r), filed)

    def _finalize(self, nodeid: str, complete: bool, reason: str = "") -> None:
        part = self.partial.pop(nodeid)
        causes = next((v for k, v in part["props"] if k == CAUSE_KEY), None)
        if not complete and part["outcome"] == "passed":
            # started, never torn down: interrupted, or its worker died. Never a pass.
            part["outcome"], part["message"] = "error", f"not finished: {reason}"
            causes = [Cause("interruption", "not_finished", self._host_of(nodeid)).to_dict()]
        figs = [v for k, v in part["props"] if k == "gpuaccept.figure"]
        failing = counted_failures(part["outcome"], part["message"],
                                   [v for k, v in part["props"] if k == "gpuaccept.failure"])
        kind, name = next((v for k, v in part["props"] if k == ERROR_KIND_KEY), None), case_name(nodeid)
        if part["outcome"] not in ("failed", "error"):
            causes = None
        elif causes is None:  # a plain assert (a site's own check) or pytest's own error: no cause known
            causes = []
        self.reporter.add(CaseRecord(nodeid, name, self._host_of(nodeid), self._layer_of(nodeid),
                                     part["outcome"], part["message"], round(part["duration"], 3), figs,
                                     failures=failing, action=for_case(part["outcome"], name, part["message"],
                                                                       failing, kind, figs, causes),
                                     causes=causes))

    def _host_of(self, nodeid: str) -> str | None:
        """The inventory name of a test id's host parameter (None for a fleet test)."""
        raw = host_of(nodeid)
        return self._host_names.get(raw, raw) if raw is not None else None

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus) -> None:
        if self.reporter is not None and not self.began and session.items:  # stopped between the collection and
            self._begin()  # the first test (a signal while the fan-out started): reported as any interrupted run
        from gpuaccept.runner.progress_relay import remove_dir
        remove_dir(self.state.progress_dir)
        self.state.progress_dir = None
        if self.progress is not None:
            self.progress.stop()
        if self._stderr is not None:
            try:
                self._stderr.close()
            except OSError:
                pass
        # registered in _begin whenever the display started, whichever stream it writes to
        if self._probe_started in node_mod.PROBE_STARTED:
            node_mod.PROBE_STARTED.remove(self._probe_started)
        if self._probe_progress in node_mod.PROBE_PROGRESS:
            node_mod.PROBE_PROGRESS.remove(self._probe_progress)
        if self._probe_finished in node_mod.PROBE_FINISHED:
            node_mod.PROBE_FINISHED.remove(self._probe_finished)
        rep = self.reporter
        if rep is None:
            return
        if not self.began and not rep.records and self.state.hosts:  # an empty shard's report names no host
            self.discard()  # nothing ran (deselected everything, or collection failed): leave no folder
            return
        reason = "run interrupted" if exitstatus == pytest.ExitCode.INTERRUPTED else "no result (worker crashed?)"
        rep.meta["interrupted"] = exitstatus == pytest.ExitCode.INTERRUPTED  # in results.json beside "complete"
        stop = session.config.pluginmanager.get_plugin("gpuaccept-interrupt")
        for nodeid in list(self.partial):
            self._finalize(nodeid, complete=False, reason=reason)
        for nodeid, (host, layer) in rep.expected.items():
            if nodeid not in rep.records:
                rep.add(CaseRecord(nodeid, case_name(nodeid), host, layer, "error", f"not run: {reason}",
                                   causes=[Cause("interruption", "not_run", host).to_dict()]))
        if rep.meta["interrupted"] or getattr(stop, "reason", None):  # the banner of summary.md and report.html
            rep.meta["interrupted"] = True
            rep.meta["interruption"] = interruption_counts(rep, getattr(stop, "running", None))
            rep.meta["interruption"].update(signal=getattr(stop, "reason", None) or "KeyboardInterrupt",
                                            at=getattr(stop, "at", None) or time.time())
        _count_in_terminal(session, rep)
        self._finish(rep)
        if self.lock is not None:  # the run ended: its folder's lock goes, and latest may point here
            self.lock.release()
            self.lock = None
        if self.config.getoption("reports") is None and run_finished(rep.dir):
            point_latest(rep.dir)
        if not self.slurm_ok and session.exitstatus == pytest.ExitCode.OK:  # the run's own non-zero code stays
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if rep.write_error:  # results were measured but not all kept: say so, and do not exit 0
            tr = session.config.pluginmanager.get_plugin("terminalreporter")
            if tr is not None:
                tr.write("\n")  # after pytest's "[100%]", which ensure_newline() does not see
                tr.write_line(f"ERROR: gpuaccept reports: {rep.write_error}", red=True)
                tr.write_line(f"gpuaccept reports: {rep.where_text()}; every host's verdict follows here", red=True)
                for line in host_verdict_lines(rep.host_verdicts()):
                    tr.write_line(line)
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        elif rep.write_recovered:  # a full disk that came back, a folder deleted under the run: all written since
            tr = session.config.pluginmanager.get_plugin("terminalreporter")
            if tr is not None:
                tr.write("\n")  # after pytest's "[100%]", which ensure_newline() does not see
                tr.write_line(f"gpuaccept reports: during the run: {rep.write_recovered}; every record was written "
                              "again since: the reports are complete", yellow=True)

    def discard(self) -> None:
        """Remove the report folder this run made, while it is still empty (a run refused or that ran no test),
        and the history database with its folders when this run created them (no run was recorded in it)."""
        d = self.reporter.dir
        if self.lock is not None:
            self.lock.release()
            self.lock = None
        if self.created:
            try:
                os.rmdir(d)  # only when empty: never removes what someone else put there
            except OSError:
                pass
        if self.history_made and not _history_empty(os.path.abspath(self.history_path)):
            return  # another run began to write into it meanwhile: it is that run's now
        for p in self.history_made:  # the file and its -wal/-shm, then the folders made for it, innermost first
            try:
                os.rmdir(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
            except OSError:
                pass

    def _finish(self, rep: Reporter) -> None:
        """History comparison and recording, then the whole-run files, report.html and the textfile; then the
        Slurm step when asked (gpuaccept.scaleout.drain: its lines are printed in the terminal summary)."""
        finish_reports(rep, self.history, self._opt("prometheus_textfile"), standout_pct=self._opt("standout_pct"),
                       inventory_hosts=self.state.inventory.hosts)
        if self._opt("slurm_drain") or self._opt("slurm_resume"):
            from gpuaccept.scaleout.drain import after_run
            self.slurm_lines, self.slurm_ok = after_run(rep, self.state.hostvars or {}, *(
                bool(self._opt(o)) for o in ("slurm_drain", "slurm_resume", "slurm_apply")),
                drain_max=self._opt("drain_max"), history=None if self._opt("history") == "none" else self.history_path)
        if self._opt("k8s_cordon") or self._opt("k8s_resume"):  # gpuaccept.scaleout.k8s.nodes, said the same way
            from gpuaccept.scaleout.k8s.nodes import after_run as k8s_after_run
            lines, ok = k8s_after_run(rep, self.state.hostvars or {}, *(bool(self._opt(o)) for o in (
                "k8s_cordon", "k8s_resume", "k8s_apply", "k8s_drain_pods")), drain_max=self._opt("drain_max"),
                history=None if self._opt("history") == "none" else self.history_path)
            self.slurm_lines, self.slurm_ok = self.slurm_lines + lines, self.slurm_ok and ok

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config) -> None:
        rep = self.reporter
        if rep is None or not self.began:
            return
        recs = list(rep.records.values())
        hv = rep.host_verdicts()
        bad = failed_hosts(recs, rep.meta.get("hosts"), hv)  # the hosts failed-hosts.txt lists
        fleet = hv.get("fleet", {}).get("verdict") in ("FAIL", "ERROR")
        stop = interruption_text(rep.meta)
        if stop:
            terminalreporter.write_line(f"gpuaccept: INTERRUPTED {stop}", red=True)
        terminalreporter.write_line(f"gpuaccept reports: {rep.dir}")
        tally = rep.tally()  # kept per record: the console's lines walk no record's figures again
        groups = skip_groups(tally.skipped)
        for why, (hs, n) in list(groups.items())[:SKIP_LINES]:
            terminalreporter.write_line(f"gpuaccept: skipped: {why}: {skip_who(hs)}, {count_text(n, 'test')}")
        if len(groups) > SKIP_LINES:
            terminalreporter.write_line(f"gpuaccept: skipped: {len(groups) - SKIP_LINES} more reasons in summary.md")
        terminalreporter.write_line(run_line(hv, recs, tally.gpu_judged))
        if bad:
            terminalreporter.write_line(f"gpuaccept: {len(bad)} host(s) failed or errored; rerun them with "
                                        f"--limit=@{os.path.join(rep.dir, 'failed-hosts.txt')}")
        for act, names in reversed(list(action_hosts(hv, rep.meta.get("hosts")).items())):  # strongest first
            if names:
                terminalreporter.write_line(f"gpuaccept: {len(names)} host(s) to {act}: {rep.dir}/hosts-{act}.txt")
        if fleet:
            terminalreporter.write_line("gpuaccept: a fleet-wide test failed or errored (see summary.md)")
        for line in self.killed_lines:  # runs beside this one whose controller died before their end
            terminalreporter.write_line(line, yellow=True)
        for line in self.slurm_lines:  # gpuaccept.scaleout.drain: the dry run's commands, or the calls made
            terminalreporter.write_line(line)


#: cause kinds of a test cut off while it ran (gpuaccept.runner.interrupt; a test started and never torn down)
CUT_OFF = frozenset({"interrupted", "not_finished"})


def interruption_counts(rep: Reporter, running: str | None = None) -> dict:
    """``{"running": [nodeid], "unfinished": n}`` of an interrupted run once every test has its record (pure):
    ``unfinished`` counts every record that did not finish (its causes' class interruption: cut off while it ran,
    never torn down, or never run), ``running`` those cut off while they ran (the test the signal found,
    ``running``, among them when it did not finish), so that the header, the records and pytest's closing line
    add up, with and without xdist (whose workers record their cut-off tests themselves)."""
    left, cut = 0, set()
    for nodeid, r in rep.records.items():
        if r.outcome != "error" or not unfinished(r.message, r.causes):
            continue
        left += 1
        kinds = {c.get("kind") for c in r.causes or [] if isinstance(c, dict)}
        if kinds & CUT_OFF or (r.causes is None and not (r.message or "").startswith("not run: ")) or nodeid == running:
            cut.add(nodeid)
    return {"running": sorted(cut), "unfinished": left}


#: pytest's terminal categories that its closing line counts (pytest's terminal.py KNOWN_TYPES, less warnings)
_COUNTED = ("failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "error")


def _count_in_terminal(session, rep: Reporter) -> None:
    """Give pytest's closing line the tests it never reported (an interrupt stopped the run before they
    started, or while they ran): each as an error with the reports' message, so that the closing line, JUnit,
    results.json and summary.md count the same ("8 errors", not "1 error")."""
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr is None:
        return
    counted = {getattr(r, "nodeid", None) for key in _COUNTED for r in tr.stats.get(key, ())}
    for nodeid, rec in rep.records.items():
        if nodeid not in counted and rec.outcome == "error":
            tr.stats.setdefault("error", []).append(pytest.TestReport(
                nodeid, (case_file(nodeid), None, case_name(nodeid)), {}, "failed", rec.message, "setup",
                user_properties=[(ERROR_KEY, rec.message)]))
