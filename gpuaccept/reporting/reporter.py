"""The files of one run, written by the controller as results arrive (:class:`Reporter`).

``<dir>/results.jsonl``: one line per finished test, appended and flushed as it arrives (survives a kill;
O(new result) per test); its <testcase> element is rendered then too, into ``<dir>/.spool/junit-<layer>.part``.
The whole-run files are written at the end, on interrupt, and in between at most every :data:`FLUSH_MIN_S`
seconds and never more often than keeps their cost under 1/:data:`FLUSH_COST_RATIO` of the run's time (see
:meth:`Reporter.add`), by the next record or, when none comes (a host holding the run in a stall), by a timer:
a run killed then (``kill -9``) leaves every record that had arrived in them; each record's text is then copied from where it already lies (results.jsonl, the
spools), not serialised again, so a rewrite is a copy of bytes plus the per-host pages:
``<dir>/results.json`` (every figure and every test outcome), ``<dir>/junit-<layer>.xml`` (gpuaccept.reporting.junit),
``<dir>/summary.md`` (gpuaccept.reporting.summary) and ``<dir>/failed-hosts.txt`` (hosts with a failure or an
error, one per line, for ``--limit @failed-hosts.txt``; gpuaccept.reporting.verdicts), and beside it one
``hosts-<action>.txt`` per action some host has (gpuaccept.judging.actions: the hosts whose action it is; none
for an action no host has).
What those files count over every record (host verdicts, the GPU table, gpuaccept.reporting.tally.RunTally) is
kept up to date as each record arrives, so that a rewrite walks no record's figures again.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from typing import Any, Callable

from gpuaccept.causes import Cause
from gpuaccept.judging.standouts import outliers
from gpuaccept.reporting.baseline import is_compared
from gpuaccept.reporting.evidence import write_evidence
from gpuaccept.reporting.folder import RESULTS_FORMAT, atomic_file, atomic_write, write_fully
from gpuaccept.reporting.gputable import GpuTable
from gpuaccept.reporting.later import Later
from gpuaccept.reporting.pieces import copy_pieces
from gpuaccept.reporting.junit import JUNIT_FOOTER, incomplete_testcase, junit_header, junit_testcase
from gpuaccept.reporting.records import CaseRecord, no_gc, record_json, case_name
from gpuaccept.reporting.summary import summary_markdown
from gpuaccept.reporting.tally import RunTally, layer_entry
from gpuaccept.reporting.verdicts import HostVerdicts, action_hosts, failed_hosts_text

# Whole-run files are rewritten at most this often while the run goes on, seconds (a person refreshing
# summary.md sees news within this; chosen, not measured).
FLUSH_MIN_S = 5.0
# ...and never more often than every FLUSH_COST_RATIO x the last rewrite's duration, so rewriting costs at
# most 1/FLUSH_COST_RATIO of the run however many records there are (10 -> under 10 %; chosen).
FLUSH_COST_RATIO = 10.0
# results.jsonl is flushed to the OS per test (a killed controller loses nothing) and fsynced at most this
# often, seconds (a machine crash loses at most this much; an fsync per test costs ms each: chosen).
FSYNC_EVERY_S = 1.0
# Sub-folder of the report folder holding each layer's <testcase> elements as they arrive (removed at the end).
SPOOL_DIR = ".spool"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _utc(t) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if isinstance(t, (int, float)) else "?"


#: how every whole-run file of a run that has not finished begins (:func:`incomplete_text`)
INCOMPLETE = "INCOMPLETE: the run has not finished"


def incomplete_text(started: float | None, last_record: float | None, recorded: int, expected: int) -> str:
    """What summary.md, report.html and the JUnit files of a run that has not finished say first (the periodic
    writes, which a killed run leaves): ``INCOMPLETE: the run has not finished (started 2026-12-05 00:02:13 UTC,
    last record 2026-12-05 00:02:25 UTC); 6 of 12 tests recorded``."""
    last = _utc(last_record) if last_record is not None else "none yet"
    return (f"{INCOMPLETE} (started {_utc(started)}, last record {last}); "
            f"{recorded} of {max(expected, recorded)} tests recorded")


#: the comment failed-hosts.txt carries, in a run that has not finished, above the hosts whose tests did not
#: finish (``--limit @failed-hosts.txt`` reads the host lines and ignores comments)
NOT_FINISHED_LINE = "# not finished: {why}; the hosts below have tests not finished"


class Reporter:
    """Writes the reports of one run into ``directory``. Call :meth:`add` per finished test,
    :meth:`expect` with the test ids that should run, :meth:`close` at the end (marks the missing).

    ``extra_writers``: ``fn(reporter)`` called by :meth:`close` after the whole-run files (history, HTML,
    Prometheus); each guarded like the others. ``standouts``: ``fn(records) -> list`` of stand-out and outlier
    records for summary.md at close (default: :func:`outliers` against ``previous``).
    """

    def __init__(self, directory: str, run_id: str, meta: dict[str, Any], previous: list[dict] | None = None):
        self.previous = previous or []
        self.dir = directory
        self.run_id = run_id
        self.meta = meta
        self.records: dict[str, CaseRecord] = {}
        self.expected: dict[str, tuple[str | None, str]] = {}
        self._next_flush = time.monotonic() + FLUSH_MIN_S
        self._began = time.monotonic()
        self.last_flush_s = 0.0
        self.flush_total_s = 0.0  # time spent in periodic rewrites so far
        self._flushed_n = 0  # records at the last rewrite
        self.write_error: str | None = None  # first failure to write (full disk...), reported at the end
        self.unwritten: dict[str, str] = {}  # file -> why its last write failed (cleared when one succeeds)
        self.final_standouts: list[dict] | None = None  # set by the caller before close (history comparison)
        self.host_sku: dict[str, str] = dict(meta.get("host_sku") or {})
        self._jsonl = None  # results.jsonl, binary append
        self._next_fsync = 0.0
        # Where each record's serialised text already lies, so that a whole-run rewrite copies bytes instead of
        # serialising 230,000 records again: nodeid -> (line start, figures start, figures end, line end) in
        # results.jsonl, and nodeid -> (start, end) of its <testcase> in its layer's JUnit spool file.
        self._spans: dict[str, tuple[int, int, int, int]] = {}
        self._uspans: dict[str, tuple[int, int]] = {}
        self._spools: dict[str, Any] = {}  # layer -> open spool file (binary append) in SPOOL_DIR
        # records whose text is not (or no longer) in results.jsonl: its append failed (a full disk) or the file
        # went (the folder deleted under the run); appended again, first, by the next append or rewrite
        self._unlogged: dict[str, None] = {}
        # the first write failure, once every record and whole-run file was written after all (see flush)
        self.write_recovered: str | None = None
        # Objects with add(record) and flush(), told of every record and every whole-run rewrite (the history
        # database's RunRecorder, through gpuaccept.plugin.reports); they keep their own errors.
        self.sinks: list[Any] = []
        self._gpus: GpuTable | None = GpuTable()
        self._hv: HostVerdicts | None = HostVerdicts(meta.get("hosts"))
        self._tally: RunTally | None = RunTally()
        self.last_record_at: float | None = None  # Unix time of the last record (the INCOMPLETE banner says it)
        # expected tests with no record yet, per host (None: fleet-wide) and per layer: a periodic write names the
        # hosts not finished (failed-hosts.txt) and the layers' tests left (JUnit) without walking every test
        self._pending_hosts: dict[str | None, int] = {}
        self._pending_layers: dict[str, int] = {}
        # records and rewrites: the caller's thread's or the timer's (records that came with no rewrite after them)
        self._lock = threading.RLock()
        self._later = Later(self._tick, self._lock, "gpuaccept-report-rewrite")

    def _guard(self, what: str, fn: Callable[[], Any]) -> None:
        """Run a write; on OSError (disk full, folder gone) remember it and go on measuring: the records
        stay in memory and every later flush tries again."""
        try:
            fn()
        except OSError as e:
            self.unwritten[what] = e.strerror or str(e)
            if self.write_error is None:
                self.write_error = f"{self.dir}: cannot write {what}: {e.strerror or e}"
        else:
            self.unwritten.pop(what, None)

    def where_text(self) -> str:
        """Where the run's results are after a failed write (one line): ``results.jsonl holds 1 of 8 records;
        not written: results.json (No space left on device), summary.md (...)``."""
        kept = len(self.records) - len(self._unlogged)
        failed = {k: v for k, v in self.unwritten.items() if k not in ("reports", "results.jsonl")}
        parts = [f"results.jsonl holds {kept} of {len(self.records)} records"]
        if failed:
            parts.append("not written: " + ", ".join(f"{k} ({v})" for k, v in failed.items()))
        return "; ".join(parts)

    def expect(self, nodeid: str, host: str | None, layer: str) -> None:
        """Declare a test that should produce a record (missing ones become errors at close)."""
        if nodeid in self.expected:
            return
        self.expected[nodeid] = (host, layer)
        if nodeid not in self.records:
            self._pending_hosts[host] = self._pending_hosts.get(host, 0) + 1
            self._pending_layers[layer] = self._pending_layers.get(layer, 0) + 1

    def set_hosts(self, hosts: list[str]) -> None:
        """The run's hosts (``meta["hosts"]``, in selection order), narrowed once the selection is known and before
        the first record (the host verdicts start again from them)."""
        self.meta["hosts"] = list(hosts)
        self._hv = None

    def pending(self) -> int:
        """Expected tests with no record yet."""
        return sum(self._pending_layers.values())

    def unfinished_hosts(self) -> list[str]:
        """The selected hosts with a test not finished yet, in selection order (every one while a fleet-wide test
        is not finished: it holds them all), then any other host of an expected test by name; as failed-hosts.txt
        lists them in a periodic write."""
        hosts = list(self.meta.get("hosts") or [])
        if self._pending_hosts.get(None):
            return hosts
        known = set(hosts)
        return [h for h in hosts if self._pending_hosts.get(h)] + sorted(
            h for h, n in self._pending_hosts.items() if n and h is not None and h not in known)

    def incomplete_text(self) -> str:
        """:func:`incomplete_text` of the run so far."""
        return incomplete_text(self.meta.get("started"), self.last_record_at, len(self.records),
                               len(self.records) + self.pending())

    def begin(self) -> None:
        """The run's first write, before any record (every whole-run file says INCOMPLETE from the start: a run
        killed before its first periodic write leaves that); its cost (mostly imports) is not taken as a
        rewrite's: the periodic writes' budget starts after it."""
        self.flush()
        self.last_flush_s, self._flushed_n = 0.0, 0
        self._next_flush = time.monotonic() + FLUSH_MIN_S

    def add(self, rec: CaseRecord) -> None:
        """Store a finished test; append it to results.jsonl and its <testcase> to its layer's spool now
        (O(this record)); rewrite the whole-run files when :data:`FLUSH_MIN_S` and :data:`FLUSH_COST_RATIO` x
        the last rewrite have passed."""
        with self._lock:
            rec.run_id = self.run_id
            self.last_record_at = time.time()
            self._store(rec)
            self._guard("results.jsonl", lambda: self._append([rec], sync=False))
            if not self._flush_if_due():
                self._arm()

    def _due_at(self) -> float:
        """When (monotonic s) the next whole-run rewrite may be: every FLUSH_MIN_S at most, FLUSH_COST_RATIO x the
        last rewrite apart, and only while the rewrites so far and the next (its cost guessed from the last one's,
        in proportion to the records) stay within 1/FLUSH_COST_RATIO of the run (a rewrite costs more as the run
        grows)."""
        guess = self.last_flush_s * len(self.records) / max(1, self._flushed_n)
        return max(self._next_flush, self._began + (self.flush_total_s + guess) * FLUSH_COST_RATIO)

    def _flush_if_due(self, sinks: bool = True) -> bool:
        """Rewrite the whole-run files if it is time (:meth:`_due_at`); whether it rewrote."""
        if time.monotonic() < self._due_at():
            return False
        self.flush(sinks=sinks)
        self.flush_total_s += self.last_flush_s
        return True

    def _arm(self) -> None:
        """Start the timer (one at a time) for records that arrived after the last rewrite, due when the next
        rewrite may be (:meth:`_due_at`): they reach the whole-run files though no record follows them."""
        if len(self.records) != self._flushed_n:
            self._later.arm(max(0.05, self._due_at() - time.monotonic()))

    def _tick(self) -> None:
        try:  # the history's own timer inserts its rows (gpuaccept.plugin.finish): no sinks here
            self._flush_if_due(sinks=False)
        except Exception:  # noqa: BLE001 - a rewrite the next record or the end writes again; never the run's
            self._next_flush = time.monotonic() + FLUSH_MIN_S
        self._arm()

    def stop_timer(self) -> None:
        """No more timer rewrites (the end of the run writes the files itself); waits for one in progress."""
        self._later.stop()

    def add_many(self, recs: list[CaseRecord]) -> None:
        """Store many finished tests at once (a merge): one append and one fsync for all of them."""
        for r in recs:
            r.run_id = r.run_id or self.run_id
            self._store(r)
        self._guard("results.jsonl", lambda: self._append(recs, sync=True))

    def _store(self, rec: CaseRecord) -> None:
        """Keep ``rec`` (replacing an earlier record of the same test) and give its figures the host's SKU
        (in place, before it is written anywhere: every copy of a figure says its SKU)."""
        old = self.records.get(rec.nodeid)
        if old is not None:  # replaced: the old record's text is no longer the test's, nor its cells
            self._spans.pop(rec.nodeid, None)
            self._uspans.pop(rec.nodeid, None)
            self._gpus = self._hv = self._tally = None
        elif rec.nodeid in self.expected:  # its first record: one test fewer to finish
            host, layer = self.expected[rec.nodeid]
            self._pending_hosts[host] -= 1
            self._pending_layers[layer] -= 1
        self.records[rec.nodeid] = rec
        if self.host_sku:
            for f in rec.figures:
                if "sku" not in f and self.host_sku.get(f.get("host")):
                    f["sku"] = self.host_sku[f["host"]]
        for sink in self.sinks:
            sink.add(rec)
        if self._gpus is not None:
            self._gpus.add(rec.figures)
        if self._hv is not None:
            self._hv.add(rec)
        if self._tally is not None:
            self._tally.add(rec)

    def _files_gone(self) -> bool:
        """True when the results.jsonl this run appends to is no longer at its path (the report folder was
        deleted or replaced under the run: a /tmp cleaner, an operator's ``rm``)."""
        if self._jsonl is None:
            return False
        try:
            st = os.stat(os.path.join(self.dir, "results.jsonl"))
            fst = os.fstat(self._jsonl.fileno())
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return (st.st_dev, st.st_ino) != (fst.st_dev, fst.st_ino)

    def _start_over(self) -> None:
        """The report folder's files went: forget them (their handles, where each record's text lay in them) and
        mark every record to be appended again to a new results.jsonl (in the order they arrived)."""
        for f in [self._jsonl, *self._spools.values()]:
            try:
                f.close()
            except (OSError, AttributeError):
                pass
        self._jsonl = None
        self._spools.clear()
        self._spans.clear()
        self._uspans.clear()
        self._unlogged = dict.fromkeys(self.records)
        self.write_error = self.write_error or f"{self.dir}: results.jsonl was deleted during the run"

    def _append(self, recs: list[CaseRecord], sync: bool) -> None:
        """Append ``recs`` to results.jsonl (flushed to the OS: survives a kill; fsynced at most every
        :data:`FSYNC_EVERY_S`, or now with ``sync``) and their <testcase> elements to the layers' spools,
        remembering where each lies. Records an earlier append could not write go first (see ``_unlogged``);
        a failed append is cut off again (results.jsonl holds whole lines only) and its records wait for the
        next one. A results.jsonl deleted under the run is made again, with every record so far."""
        if self._files_gone():
            self._start_over()
        if self._unlogged:
            ids = {r.nodeid for r in recs}
            recs = [self.records[n] for n in self._unlogged if n in self.records and n not in ids] + recs
        if not recs:
            return
        if self._jsonl is None:
            os.makedirs(self.dir, exist_ok=True)
            self._jsonl = open(os.path.join(self.dir, "results.jsonl"), "ab", buffering=0)
        pos = start = self._jsonl.seek(0, os.SEEK_END)
        chunks, spans = [], []
        for r in recs:
            head, figs = record_json(r)
            fs = pos + len(head) + 1
            line = f"{head}{figs}}}\n".encode()
            spans.append((r.nodeid, (pos, fs, fs + len(figs) - 2, pos + len(line))))
            chunks.append(line)
            pos += len(line)
        try:
            write_fully(self._jsonl, b"".join(chunks))  # unbuffered: in the OS once written, survives a kill
        except OSError:
            try:
                self._jsonl.truncate(start)  # no half line: what the file holds is whole records
            except OSError:
                pass
            self._unlogged.update(dict.fromkeys(r.nodeid for r in recs))
            raise
        for r in recs:
            self._unlogged.pop(r.nodeid, None)
        if sync or time.monotonic() >= self._next_fsync:  # on disk at most FSYNC_EVERY_S later: survives a crash
            os.fsync(self._jsonl.fileno())
            self._next_fsync = time.monotonic() + FSYNC_EVERY_S
        for nodeid, span in spans:
            if nodeid in self.records:
                self._spans[nodeid] = span
        self._guard("JUnit spool", lambda: self._spool_junit(recs))

    def _spool_junit(self, recs: list[CaseRecord]) -> None:
        for r in recs:
            sp = self._spools.get(r.layer)
            if sp is None:
                os.makedirs(os.path.join(self.dir, SPOOL_DIR), exist_ok=True)
                sp = self._spools[r.layer] = open(os.path.join(self.dir, SPOOL_DIR, f"junit-{_safe(r.layer)}.part"),
                                                  "ab", buffering=0)
            at = sp.seek(0, os.SEEK_END)
            write_fully(sp, junit_testcase(r.layer, r).encode())
            self._uspans[r.nodeid] = (at, sp.tell())  # only once every byte is in the file

    def close(self, missing_reason: str) -> None:
        """Mark expected tests that never reported as errors with ``missing_reason``; write everything."""
        self.stop_timer()
        for nodeid, (host, layer) in self.expected.items():
            if nodeid not in self.records:
                name = case_name(nodeid)
                self.add(CaseRecord(nodeid, name, host, layer, "error", f"not run: {missing_reason}",
                                    causes=[Cause("interruption", "not_run", host).to_dict()]))
        self.flush(final=True)
        self.close_jsonl()

    def close_jsonl(self) -> None:
        """fsync and close results.jsonl and remove the JUnit spools (the end of the run: the whole-run files
        have been written)."""
        self.stop_timer()
        if self._jsonl is not None and not self._jsonl.closed:
            jl = self._jsonl
            self._guard("results.jsonl", lambda: (jl.flush(), os.fsync(jl.fileno()), jl.close()))
        for sp in self._spools.values():
            try:
                sp.close()
            except OSError:  # its unflushed tail (a full disk): the spools are thrown away now anyway
                pass
        self._spools.clear()
        self._uspans.clear()
        shutil.rmtree(os.path.join(self.dir, SPOOL_DIR), ignore_errors=True)

    # -- writers -----------------------------------------------------------------------------------
    def flush(self, final: bool = False, sinks: bool = True) -> None:
        """Rewrite results.json, junit-<layer>.xml, summary.md and failed-hosts.txt from the records so far (and
        flush the :attr:`sinks` unless ``sinks`` is False)."""
        with self._lock:
            self._flush(final, sinks)

    def _flush(self, final: bool, sinks: bool) -> None:
        t0 = time.monotonic()
        earlier = self.write_error
        if final:  # does every file get written in the end? (an earlier failure then stands as a note only)
            self.write_error = None
        with no_gc():
            for sink in self.sinks if sinks else ():
                sink.flush()
            if self._unlogged or self._files_gone():  # results.json copies the records' text from results.jsonl
                self._guard("results.jsonl", lambda: self._append([], sync=final))
            self._guard("reports", lambda: self._write_all(final))
        if final:
            ok = self.write_error is None and not self._unlogged
            self.write_error = self.write_error or (None if ok else earlier)
            if ok and earlier:
                self.write_recovered = earlier
        self.last_flush_s = time.monotonic() - t0
        self._flushed_n = len(self.records)
        self._next_flush = time.monotonic() + max(FLUSH_MIN_S, FLUSH_COST_RATIO * self.last_flush_s)

    def figures(self) -> list[dict]:
        """Every figure of the run so far, each with the host's SKU where known (given when it arrived)."""
        return [f for r in self.records.values() for f in r.figures]

    def host_verdicts(self) -> dict[str, dict]:
        """:func:`host_verdicts` of the records so far (kept up to date per record; made again from every
        record after a record was replaced)."""
        if self._hv is None:
            self._hv = HostVerdicts(self.meta.get("hosts"))
            for r in self.records.values():
                self._hv.add(r)
        return self._hv.result()

    def gpu_table(self) -> GpuTable:
        """The :class:`GpuTable` of the figures so far (kept up to date per record; made again from every
        figure after a record was replaced)."""
        if self._gpus is None:
            self._gpus = GpuTable().add(self.figures())
        return self._gpus

    def tally(self) -> RunTally:
        """The :class:`RunTally` of the records so far (kept up to date per record; made again from every record
        after a record was replaced)."""
        if self._tally is None:
            self._tally = RunTally().add_all(self.records.values())
        return self._tally

    def _write_all(self, final: bool) -> None:
        os.makedirs(self.dir, exist_ok=True)
        recs = list(self.records.values())
        tally = self.tally()
        hosts = self.meta.get("hosts") or []
        hv = self.host_verdicts()
        # stand-outs are computed once, at the end (history, fleet medians): not in every periodic rewrite
        slow = (self.final_standouts if self.final_standouts is not None else outliers(self.figures(), self.previous, compared=is_compared)) \
            if final else []
        # until the final write every whole-run file says the run has not finished: what a periodic write leaves is
        # what a killed run leaves (results.json says it with "complete": false, and "incomplete"). In the meta, as
        # the interruption is, so that the pure writers (summary_markdown, junit_xml_text, html) say the same
        if final:
            self.meta.pop("incomplete", None)
        else:
            self.meta["incomplete"] = {"text": self.incomplete_text(),
                                       "pending": {lay: n for lay, n in sorted(self._pending_layers.items()) if n}}
        inc = None if final else self.meta["incomplete"]["text"]
        if not final:
            hv = self._unfinished_verdicts(hv)
        # each file on its own: one that cannot be written (a nearly full disk) does not keep the others back
        self._guard("results.json", lambda: self._write_results_json(recs, final, slow))
        layers = dict(tally.layers)
        if inc:  # a layer none of whose tests has finished yet has its file too, saying so
            layers.update({lay: layer_entry() for lay, n in self._pending_layers.items() if n and lay not in layers})
        for layer, kept in sorted(layers.items()):
            self._guard(f"junit-{layer}.xml", lambda: self._write_junit(layer, kept, hv))
        self._guard("summary.md", lambda: atomic_write(os.path.join(self.dir, "summary.md"), summary_markdown(
            self.run_id, self.meta, recs, slow, hv=hv, table=self.gpu_table(), tally=tally)))
        # failed-hosts.txt walks the failed and errored records only (its fleet-wide lines), and until the end
        # lists the hosts whose tests have not finished, under a comment saying so
        self._guard("failed-hosts.txt", lambda: atomic_write(os.path.join(self.dir, "failed-hosts.txt"),
                                                             self._failed_hosts(tally, hosts, hv, inc)))
        for act, names in action_hosts(hv, hosts).items():  # a list per next step some host has; none empty
            path = os.path.join(self.dir, f"hosts-{act}.txt")
            if names:
                self._guard(f"hosts-{act}.txt", lambda: atomic_write(path, "".join(h + "\n" for h in names)))
            elif os.path.exists(path):  # a list an earlier write of this run left, now that no host has it
                self._guard(f"hosts-{act}.txt", lambda: os.remove(path))
        if final:  # evidence/<host>/ of each host with a hardware action (gpuaccept.reporting.evidence)
            self._guard("evidence", lambda: write_evidence(self.dir, self.run_id, self.meta, recs, hv))
        else:  # report.html says INCOMPLETE too (the final one is written after the history's end: plugin.finish)
            self._guard("report.html", lambda: self._write_html(recs, tally, hv))

    def _unfinished_verdicts(self, hv: dict[str, dict]) -> dict[str, dict]:
        """``hv`` as a write before the run's end shows it (what a killed run leaves): a host whose tests have
        not all finished (:meth:`unfinished_hosts`) never reads PASS or SKIP there but ERROR, "N tests not
        finished" first among its reasons, its action the interruption's (rerun) unless it has a stronger one;
        the verdicts kept for the final write are not changed."""
        left = self.unfinished_hosts()
        if not left:
            return hv
        from gpuaccept.judging.actions import for_cause, strongest
        act = for_cause(Cause("interruption", "not_finished")).to_dict()
        out = dict(hv)
        for h in left:
            v = out.get(h)
            if v is None or v.get("verdict") not in ("PASS", "SKIP"):
                continue
            n = self._pending_hosts.get(h) or self._pending_hosts.get(None) or 0
            said = f"{n} test{'' if n == 1 else 's'} not finished" if n else "tests not finished"
            out[h] = {**v, "verdict": "ERROR", "action": strongest([a for a in (v.get("action"), act) if a]),
                      "reasons": [said] + list(v.get("reasons") or [])}
        return out

    def _failed_hosts(self, tally: RunTally, hosts: list[str], hv: dict, inc: str | None) -> str:
        """failed-hosts.txt: :func:`failed_hosts_text`; with ``inc`` (a run not finished) the hosts not finished
        follow, each once, under a :data:`NOT_FINISHED_LINE` comment (every line stays a host or a comment)."""
        text = failed_hosts_text(tally.bad, hosts, hv)
        if not inc:
            return text
        left = self.unfinished_hosts()
        if not left:
            return text
        gone = set(left)
        lines = [ln for ln in text.splitlines() if ln.startswith("#") or ln.strip() not in gone]
        hosts_part = [ln for ln in lines if not ln.startswith("#")]
        comments = [ln for ln in lines if ln.startswith("#")]
        why = inc.removeprefix("INCOMPLETE: ")
        return "".join(ln + "\n" for ln in hosts_part + [NOT_FINISHED_LINE.format(why=why)] + left + comments)

    def _write_html(self, recs: list[CaseRecord], tally: RunTally, hv: dict) -> None:
        """report.html of the run so far (no stand-outs nor history sparklines: those come at the end)."""
        from gpuaccept.reporting.folder import atomic_write_pieces
        try:
            from gpuaccept.reporting import html as html_report
            pieces = html_report.pieces(self.run_id, self.meta, recs, [], [], None, hv=hv, table=self.gpu_table(),
                                        tally=tally)
        except ImportError:  # a plotting library missing: the end says so; the other files stand
            return
        atomic_write_pieces(os.path.join(self.dir, "report.html"), pieces)

    def _write_results_json(self, recs: list[CaseRecord], final: bool, slow: list[dict]) -> None:
        """results.json: ``{"run_id", **meta, "complete", "format": 2, "tests": [record...], "outliers"}``; each
        figure once, inside its test (gpuaccept.reporting.folder.run_figures reads them, and the format-1 top-level
        "figures" list of earlier runs). Each record's text is copied from results.jsonl where it lies there
        (one serialisation per record per run); a record that is not there (a failed append) is serialised now."""
        head = json.dumps({"run_id": self.run_id, **self.meta, "complete": final, "format": RESULTS_FORMAT},
                          default=str, separators=(",", ":"))
        src = open(os.path.join(self.dir, "results.jsonl"), "rb") if self._spans else None
        try:
            with atomic_file(os.path.join(self.dir, "results.json")) as out:
                out.write(head[:-1].encode() + b',"tests":[')
                copy_pieces(out, src, [(self._spans.get(r.nodeid), r) for r in recs], lines=True)
                out.write(b'],"outliers":' + json.dumps(slow, default=str, separators=(",", ":")).encode() + b"}")
        finally:
            if src is not None:
                src.close()

    def _write_junit(self, layer: str, kept: dict, hv: dict) -> None:
        """junit-<layer>.xml: its header, then each record's <testcase> copied from the layer's spool (or
        rendered now where the spool lacks it), then the footer. ``kept``: the layer's entry of
        :attr:`RunTally.layers`; ``hv``: the host verdicts. A run not finished (``meta["incomplete"]``) says so at the
        top, in a property and in a last error testcase (gpuaccept.reporting.junit)."""
        recs = kept["recs"]
        sp = self._spools.get(layer)
        src = open(sp.name, "rb") if sp is not None else None
        try:
            with atomic_file(os.path.join(self.dir, f"junit-{layer}.xml")) as out:
                out.write(junit_header(layer, recs, hv, self.meta, kept).encode())
                copy_pieces(out, src, [((u[0], u[1]), None) if (u := self._uspans.get(r.nodeid)) else
                                        (None, junit_testcase(layer, r)) for r in recs], lines=False, sep=b"")
                out.write((incomplete_testcase(layer, self.meta) + JUNIT_FOOTER).encode())
        finally:
            if src is not None:
                src.close()
