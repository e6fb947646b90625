"""Reports of one run, written by the controller as results arrive (pure writers plus one file-keeping class).

``<dir>/results.jsonl``: one line per finished test, appended and flushed as it arrives (survives a kill;
O(new result) per test); its <testcase> element is rendered then too, into ``<dir>/.spool/junit-<layer>.part``.
The whole-run files are written at the end, on interrupt, and in between at most every :data:`FLUSH_MIN_S`
seconds and never more often than keeps their cost under 1/:data:`FLUSH_COST_RATIO` of the run's time (see
:meth:`Reporter.add`); each record's text is then copied from where it already lies (results.jsonl, the
spools), not serialised again, so a rewrite is a copy of bytes plus the per-host pages:
``<dir>/results.json`` (every figure and every test outcome), ``<dir>/junit-<layer>.xml`` (one testsuite per
layer, one testcase per host x check, figures as testcase properties), ``<dir>/summary.md`` (the page a person
reads first: one verdict line per host, then a per-GPU table) and ``<dir>/failed-hosts.txt`` (hosts with a
failure or an error, one per line, for ``--limit @failed-hosts.txt``). Records are self-describing (run id,
host, layer, check) so that runs sharded over Slurm or Kubernetes can be merged (gpuaccept.scaleout.merge).
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from gpuaccept.errors import ERROR_KEY

LAYERS = ("health", "memory", "compute", "nvlink", "nccl", "gpudirect", "storage", "burnin")


def layer_of(nodeid: str) -> str:
    """The layer of a test id: ``suites/test_<layer>[_more].py::...`` → layer (else "other")."""
    m = re.search(r"test_([a-z]+)\w*\.py::", nodeid)
    return m.group(1) if m and m.group(1) in LAYERS else "other"


def host_of(nodeid: str) -> str | None:
    """The host parameter of a test id (``...[host]``), or None."""
    return nodeid[nodeid.index("[") + 1:-1] if nodeid.endswith("]") and "[" in nodeid else None

# Whole-run files are rewritten at most this often while the run goes on, seconds (a person refreshing
# summary.md sees news within this; chosen, not measured).
FLUSH_MIN_S = 5.0
# ...and never more often than every FLUSH_COST_RATIO x the last rewrite's duration, so rewriting costs at
# most 1/FLUSH_COST_RATIO of the run however many records there are (10 -> under 10 %; chosen).
FLUSH_COST_RATIO = 10.0
# results.jsonl is flushed to the OS per test (a killed controller loses nothing) and fsynced at most this
# often, seconds (a machine crash loses at most this much; an fsync per test costs ms each: chosen).
FSYNC_EVERY_S = 1.0
# summary.md's per-GPU table lists every GPU up to this many, else only the GPUs of hosts that did not pass
# (a page a person reads; results.json and report.html keep the rest). Chosen.
SUMMARY_MAX_GPU_ROWS = 1024
# Files a run writes into its folder (a folder holding one of these already holds a run).
RUN_FILES = ("results.jsonl", "results.json", "summary.md", "failed-hosts.txt", "report.html")
# Sub-folder of the report folder holding each layer's <testcase> elements as they arrive (removed at the end).
SPOOL_DIR = ".spool"
# Whole-run files are copied from the per-record text in pieces of at most this many bytes (memory bound).
COPY_CHUNK = 8 << 20


@dataclass
class CaseRecord:
    """Outcome of one test: ``outcome`` is passed|failed|error|skipped; ``figures`` the records."""

    nodeid: str
    name: str
    host: str | None
    layer: str
    outcome: str
    message: str = ""
    duration_s: float = 0.0
    figures: list[dict] = field(default_factory=list)
    run_id: str = ""
    #: the failure lines that made it fail, each with the GPU it names: ``{host, gpu, pci_bus_id, serial, line}``
    #: (:func:`counted_failures`; empty unless failed)
    failures: list[dict] = field(default_factory=list)


def skip_reason(host: str | None, message: str) -> str:
    """A skip's reason with its host taken out, so that one reason groups across hosts (pure):
    ``"no NVIDIA GPU on gpu-07 (no driver)"`` -> ``"no NVIDIA GPU (no driver)"``; ``"no NVMe on gpu-07"`` ->
    ``"no NVMe"``; another mention of the host becomes ``<host>``."""
    why = " ".join(str(message or "skipped").split())
    if why.startswith("Skipped: "):
        why = why[len("Skipped: "):]
    if host:
        why = re.sub(rf"\s+(?:on|for) {re.escape(host)}\b", "", why)
        why = re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w.-])", "<host>", why)
    return why


def skip_groups(recs: list["CaseRecord"]) -> dict[str, tuple[list[str], int]]:
    """Skipped tests grouped by reason across hosts and tests (pure): reason -> (hosts in order, tests), the
    reasons most hosts share first (``"no NVMe": (212 hosts, 212 tests)``)."""
    groups: dict[str, tuple[list[str], list[int]]] = {}
    for r in recs:
        if r.outcome != "skipped":
            continue
        hs, n = groups.setdefault(skip_reason(r.host, r.message), ([], [0]))
        if (r.host or "fleet") not in hs:
            hs.append(r.host or "fleet")
        n[0] += 1
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1][0]), -kv[1][1][0]))
    return {why: (hs, n[0]) for why, (hs, n) in ordered}


def counted_failures(outcome: str, message: str, entries: list[dict]) -> list[dict]:
    """The failure lines (``gpuaccept.judging.recorder.FAILURE_KEY`` entries) that count for a test's verdict (pure):
    none unless it ``failed``; a line the outcome kept only as "(blocked GPU) ..." or "figure kept: ..." (a GPU
    a foreign process or a lost fabric blocks) does not; each line once."""
    if outcome != "failed":
        return []
    out, seen = [], set()
    for e in entries:
        line = e.get("line") if isinstance(e, dict) else None
        if not line or line in seen or f"(blocked GPU) {line}" in message or f"figure kept: {line}" in message:
            continue
        seen.add(line)
        out.append(e)
    return out


def record_dict(r: CaseRecord) -> dict:
    """A record as a plain dict for JSON (shallow: figures are already JSON-like; ``dataclasses.asdict`` deep-copies
    every figure and cost 10x the JSON encoding at 10,000 hosts)."""
    return {"nodeid": r.nodeid, "name": r.name, "host": r.host, "layer": r.layer, "outcome": r.outcome,
            "message": r.message, "duration_s": r.duration_s, "figures": r.figures, "run_id": r.run_id,
            **({"failures": r.failures} if r.failures else {})}


@contextlib.contextmanager
def no_gc():
    """Python's cyclic garbage collector paused for the block (a whole-run write allocates millions of small
    objects; with the run's millions of figures alive every collection walks them all: at 2,000 hosts x 23
    checks, a third of the write's time). The write makes no reference cycles; collection resumes after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def record_json(r: CaseRecord) -> tuple[str, str]:
    """A record's results.jsonl line as ``(head, figures)``: the line is ``head + figures + "}"``, ``figures``
    the JSON array of its figures (so a whole-run file can copy that array's inside from the line). ASCII only
    (``ensure_ascii``): character offsets are byte offsets."""
    head = json.dumps({"nodeid": r.nodeid, "name": r.name, "host": r.host, "layer": r.layer, "outcome": r.outcome,
                       "message": r.message, "duration_s": r.duration_s, "run_id": r.run_id,
                       **({"failures": r.failures} if r.failures else {})}, default=str)
    return head[:-1] + ', "figures": ', json.dumps(r.figures, default=str)


def _write_fully(f, data: bytes) -> None:
    """Write all of ``data`` to the unbuffered file ``f`` (a raw write may take part of it); OSError propagates."""
    view = memoryview(data)
    while view:
        view = view[f.write(view):]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def atomic_write(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: readers see the old or the new file."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)  # a full disk leaves no half-written temporary file beside the reports
        raise


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


_atomic_write = atomic_write  # older name


def holds_run(directory: str) -> str | None:
    """The first run file found in ``directory`` (it already holds a run), else None."""
    for name in RUN_FILES:
        if os.path.exists(os.path.join(directory, name)):
            return name
    return None


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

    def _guard(self, what: str, fn: Callable[[], Any]) -> None:
        """Run a write; on OSError (disk full, folder gone) remember it and go on measuring: the records
        stay in memory and every later flush tries again."""
        try:
            fn()
        except OSError as e:
            if self.write_error is None:
                self.write_error = f"{self.dir}: cannot write {what}: {e.strerror or e}"

    def expect(self, nodeid: str, host: str | None, layer: str) -> None:
        """Declare a test that should produce a record (missing ones become errors at close)."""
        self.expected.setdefault(nodeid, (host, layer))

    def add(self, rec: CaseRecord) -> None:
        """Store a finished test; append it to results.jsonl and its <testcase> to its layer's spool now
        (O(this record)); rewrite the whole-run files when :data:`FLUSH_MIN_S` and :data:`FLUSH_COST_RATIO` x
        the last rewrite have passed."""
        rec.run_id = self.run_id
        self._store(rec)
        self._guard("results.jsonl", lambda: self._append([rec], sync=False))
        now = time.monotonic()
        # every FLUSH_MIN_S at most, FLUSH_COST_RATIO x the last rewrite apart, and only while the rewrites so far
        # and this one (its cost guessed from the last one's, in proportion to the records) stay within
        # 1/FLUSH_COST_RATIO of the run (a rewrite costs more as the run grows)
        if now >= self._next_flush:
            guess = self.last_flush_s * len(self.records) / max(1, self._flushed_n)
            if (self.flush_total_s + guess) * FLUSH_COST_RATIO <= now - self._began:
                self.flush()
                self.flush_total_s += self.last_flush_s

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
            self._gpus = self._hv = None
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
            _write_fully(self._jsonl, b"".join(chunks))  # unbuffered: in the OS once written, survives a kill
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
            _write_fully(sp, junit_testcase(r.layer, r).encode())
            self._uspans[r.nodeid] = (at, sp.tell())  # only once every byte is in the file

    def close(self, missing_reason: str) -> None:
        """Mark expected tests that never reported as errors with ``missing_reason``; write everything."""
        for nodeid, (host, layer) in self.expected.items():
            if nodeid not in self.records:
                name = nodeid.split("::")[-1]
                self.add(CaseRecord(nodeid, name, host, layer, "error", f"not run: {missing_reason}"))
        self.flush(final=True)
        self.close_jsonl()

    def close_jsonl(self) -> None:
        """fsync and close results.jsonl and remove the JUnit spools (the end of the run: the whole-run files
        have been written)."""
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
    def flush(self, final: bool = False) -> None:
        """Rewrite results.json, junit-<layer>.xml, summary.md and failed-hosts.txt from the records so far."""
        t0 = time.monotonic()
        earlier = self.write_error
        if final:  # does every file get written in the end? (an earlier failure then stands as a note only)
            self.write_error = None
        with no_gc():
            for sink in self.sinks:
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

    def _write_all(self, final: bool) -> None:
        os.makedirs(self.dir, exist_ok=True)
        recs = list(self.records.values())
        # stand-outs are computed once, at the end (history, fleet medians): not in every periodic rewrite
        slow = (self.final_standouts if self.final_standouts is not None else outliers(self.figures(), self.previous)) \
            if final else []
        # each file on its own: one that cannot be written (a nearly full disk) does not keep the others back
        self._guard("results.json", lambda: self._write_results_json(recs, final, slow))
        by_layer: dict[str, list[CaseRecord]] = {}
        for r in recs:
            by_layer.setdefault(r.layer, []).append(r)
        for layer, lrecs in sorted(by_layer.items()):
            self._guard(f"junit-{layer}.xml", lambda: self._write_junit(layer, lrecs))
        hosts = self.meta.get("hosts") or []
        hv = self.host_verdicts()
        self._guard("summary.md", lambda: atomic_write(os.path.join(self.dir, "summary.md"), summary_markdown(
            self.run_id, self.meta, recs, slow, hv=hv, table=self.gpu_table())))
        self._guard("failed-hosts.txt", lambda: atomic_write(os.path.join(self.dir, "failed-hosts.txt"),
                                                             "".join(h + "\n" for h in failed_hosts(recs, hosts, hv))))

    def _write_results_json(self, recs: list[CaseRecord], final: bool, slow: list[dict]) -> None:
        """results.json: ``{"run_id", **meta, "complete", "tests": [record...], "figures": [figure...],
        "outliers"}``. Each record's text is copied from results.jsonl where it lies there (one serialisation
        per record per run); a record that is not there (a failed append) is serialised now."""
        head = json.dumps({"run_id": self.run_id, **self.meta, "complete": final}, default=str, separators=(",", ":"))
        path = os.path.join(self.dir, "results.json")
        tmp = f"{path}.tmp{os.getpid()}"
        src = open(os.path.join(self.dir, "results.jsonl"), "rb") if self._spans else None
        try:
            with open(tmp, "wb") as out:
                out.write(head[:-1].encode() + b',"tests":[')
                _copy_pieces(out, src, [(self._spans.get(r.nodeid), r) for r in recs], lines=True)
                out.write(b'],"figures":[')
                pieces = []
                for r in recs:
                    span = self._spans.get(r.nodeid)
                    if span is not None:
                        if span[2] > span[1]:
                            pieces.append(((span[1], span[2]), None))
                    elif r.figures:
                        pieces.append((None, json.dumps(r.figures, default=str)[1:-1]))
                _copy_pieces(out, src, pieces, lines=False)
                out.write(b'],"outliers":' + json.dumps(slow, default=str, separators=(",", ":")).encode() + b"}")
            os.replace(tmp, path)
        except BaseException:
            _remove(tmp)
            raise
        finally:
            if src is not None:
                src.close()

    def _write_junit(self, layer: str, recs: list[CaseRecord]) -> None:
        """junit-<layer>.xml: its header, then each record's <testcase> copied from the layer's spool (or
        rendered now where the spool lacks it), then the footer."""
        sp = self._spools.get(layer)
        src = open(sp.name, "rb") if sp is not None else None
        path = os.path.join(self.dir, f"junit-{layer}.xml")
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            with open(tmp, "wb") as out:
                out.write(junit_header(layer, recs).encode())
                _copy_pieces(out, src, [((u[0], u[1]), None) if (u := self._uspans.get(r.nodeid)) else
                                        (None, junit_testcase(layer, r)) for r in recs], lines=False, sep=b"")
                out.write(JUNIT_FOOTER.encode())
            os.replace(tmp, path)
        except BaseException:
            _remove(tmp)
            raise
        finally:
            if src is not None:
                src.close()


def _copy_pieces(out, src, pieces: list, lines: bool, sep: bytes = b",") -> None:
    """Write ``pieces`` to ``out`` separated by ``sep``. A piece is ``(span, x)``: ``span`` a byte range
    ``(start, end, ...)`` of ``src`` (with ``lines``: a results.jsonl span (line start, .., .., line end),
    copied without its newline), else ``x``, a CaseRecord (serialised now) or text. Adjacent spans are copied
    as one range in chunks of :data:`COPY_CHUNK` (newlines between lines become ``sep``: JSON text has no raw
    newline inside a line)."""
    first = True
    run: list[int] | None = None  # [start, end] of adjacent spans not yet copied

    def copy(a: int, b: int) -> None:
        src.seek(a)
        left = b - a
        while left > 0:
            data = src.read(min(COPY_CHUNK, left))
            if not data:
                raise OSError(f"{src.name}: shorter than expected")
            left -= len(data)
            if lines:
                data = data.replace(b"\n", sep)
                if left == 0 and data.endswith(sep):
                    data = data[:-len(sep)]
            out.write(data)

    for span, x in pieces:
        if span is not None:
            a, b = (span[0], span[3]) if lines else (span[0], span[1])
            if run is not None and run[1] == a and (lines or not sep):
                run[1] = b  # adjacent: one copy (a newline between lines becomes sep)
                continue
            if run is not None:
                copy(*run)
            if not first:
                out.write(sep)
            first, run = False, [a, b]
            continue
        if run is not None:
            copy(*run)
            run = None
        if not first:
            out.write(sep)
        first = False
        if isinstance(x, CaseRecord):
            hd, figs = record_json(x)
            x = hd + figs + "}"
        out.write(x.encode())
    if run is not None:
        copy(*run)


# -- host verdicts ---------------------------------------------------------------------------------
def _fleet_hosts_named(message: str, hosts: list[str], known: set | None = None) -> list[str]:
    """Hosts of the run named at the start of a line of a fleet-wide test's message (``"gpu-07: ..."``,
    the form every verdict message takes). ``known``: ``set(hosts)``, when kept."""
    known = set(hosts) if known is None else known
    out = []
    for ln in message.splitlines():
        m = re.match(r"\s*-?\s*([^\s:]+)[\s:]", ln)
        if m and m.group(1) in known and m.group(1) not in out:
            out.append(m.group(1))
    return out


def host_verdicts(recs: list[CaseRecord], hosts: list[str] | None = None) -> dict[str, dict]:
    """Per host: ``{"verdict": PASS|FAIL|ERROR|SKIP, "reasons": [str], "counts": {outcome: n}}`` (pure).

    ERROR when any of its tests errored (the host could not be judged fully), else FAIL when any failed,
    else PASS when any passed, else SKIP. Fleet-wide tests (no host in the id) count against the hosts their
    failure lines name, for the hosts with a figure in them when they passed (a host whose ranks took part in a
    passing inter-node all-reduce passed it), and appear under ``"fleet"`` too. Reasons: the first line of each failed/errored
    test's message, failing figures first (check, GPU, value vs limit). See :class:`HostVerdicts`.
    """
    hv = HostVerdicts(hosts)
    for r in recs:
        hv.add(r)
    return hv.result()


class HostVerdicts:
    """:func:`host_verdicts` kept up to date record by record (:meth:`add`: O(the record), :meth:`result`:
    O(hosts)), so that a whole-run write does not walk every record again."""

    def __init__(self, hosts: list[str] | None = None):
        self.names = list(hosts or [])
        self.known = set(self.names)
        self.out: dict[str, dict] = {h: {"verdict": "SKIP", "reasons": [], "counts": {}} for h in self.names}
        self.seen: dict[str, set] = {}  # host -> GPU indices with a figure (how many GPUs the host showed)
        self.judged: dict[str, int] = {}  # host -> its passed tests that judged something (a figure or an assert)
        self.gpu_judged = 0  # figures of a GPU judged against a limit (pass or fail), the whole run

    def add(self, r: CaseRecord) -> None:
        targets = [r.host] if r.host else ["fleet"]
        if not r.host and r.outcome in ("failed", "error"):
            targets += _fleet_hosts_named(r.message or "", self.names, self.known)
        elif not r.host and r.outcome == "passed":  # the hosts that took part (a figure of theirs) passed it
            targets += sorted({f.get("host") for f in r.figures if f.get("host") in self.known})
        for e in r.failures:  # the GPUs that failed, by the GPU each failure line names
            h = e.get("host") if e.get("host") in self.known or r.host is None else r.host
            if h is None or e.get("gpu") is None:
                continue
            v = self.out.get(h)
            if v is None:
                v = self.out[h] = {"verdict": "SKIP", "reasons": [], "counts": {}}
            gpus = v.setdefault("gpus", {})
            g = gpus.setdefault(e["gpu"], {"gpu": e["gpu"], "pci_bus_id": None, "serial": None, "tests": [],
                                           "lines": []})
            g["pci_bus_id"] = g["pci_bus_id"] or e.get("pci_bus_id")
            g["serial"] = g["serial"] or e.get("serial")
            if r.name.split("[")[0] not in g["tests"]:
                g["tests"].append(r.name.split("[")[0])
            g["lines"].append(e["line"])
        self.gpu_judged += sum(1 for f in r.figures if f.get("gpu") is not None and f.get("verdict") in ("pass", "fail"))
        if r.outcome == "passed" and judged_something(r):
            for h in targets:
                self.judged[h] = self.judged.get(h, 0) + 1
        if r.host is not None:
            seen = self.seen.setdefault(r.host, set())
            for f in r.figures:
                if f.get("gpu") is not None:
                    seen.add(f["gpu"])
        for h in targets:
            v = self.out.get(h)
            if v is None:
                v = self.out[h] = {"verdict": "SKIP", "reasons": [], "counts": {}}
            v["counts"][r.outcome] = v["counts"].get(r.outcome, 0) + 1
            if r.outcome in ("failed", "error"):
                figs = [f for f in r.figures if f.get("verdict") == "fail" and f.get("host") in (h, "fleet", None)]
                if r.outcome == "error" and (r.message or "").startswith("blocked by "):
                    figs = []  # kept figures of a blocked test are no reason: the blocker is (verdicts.outcome)
                for f in figs[:3]:
                    v["reasons"].append(f"{r.layer}/{f['check']}{_gpu_s(f)}: {_fmt(f['value'])} {f.get('unit') or ''} "
                                        f"vs {_limit_s(f.get('limit'))}".replace("  ", " "))
                first = (r.message or r.outcome).splitlines()[0] if (r.message or "").strip() else r.outcome
                if not r.host and h != "fleet":  # a fleet-wide test: the line about this host, not another's
                    first = next((ln for ln in (r.message or "").splitlines() if _fleet_hosts_named(ln, [h])),
                                 first)
                if not figs:
                    v["reasons"].append(f"{r.name.split('[')[0]}: {first}")

    def result(self) -> dict[str, dict]:
        for v in self.out.values():
            c = v["counts"]
            v["verdict"] = ("ERROR" if c.get("error") else "FAIL" if c.get("failed") else "SKIP")
        for h, v in self.out.items():
            if v["verdict"] == "SKIP" and self.judged.get(h):
                v["verdict"] = "PASS"  # nothing measured is not PASS: a pass that judged no figure leaves SKIP
            elif v["verdict"] == "SKIP" and v["counts"].get("passed"):
                v["reasons"].append("passed tests measured nothing (facts recorded only)")
            if v.get("gpus"):  # how many GPUs the host showed (a figure of theirs), when any did
                seen = self.seen.get(h, set())
                v["gpus_seen"] = len(seen | set(v["gpus"])) if seen else None
        return self.out


def judged_something(r: CaseRecord) -> bool:
    """Whether a passed test measured or judged anything (pure): a figure against a limit (verdict pass or
    fail), a number in a unit of measurement (:data:`MEASUREMENT_UNITS`), or no figure at all (an operator's own ``assert``, testinfra-style, is the
    judgement). A test that recorded only facts (the NCCL variables seen and their count, driver versions)
    measured nothing: its host is not PASS by it alone (the main job on a machine without a GPU read PASS)."""
    return not r.figures or any(f.get("verdict") in ("pass", "fail") or (
        isinstance(f.get("value"), (int, float)) and not isinstance(f.get("value"), bool)
        and f.get("unit") in MEASUREMENT_UNITS) for f in r.figures)


def _measurement_units() -> frozenset:
    """The units of measured figures: every check's (gpuaccept.config.thresholds.REGISTRY) and the time, size,
    clock and share units the probes record beside them; a count of facts ("variables") is none of them."""
    from gpuaccept.config.thresholds import REGISTRY
    return frozenset({c.unit for c in REGISTRY.values()} | {"s", "ms", "us", "B", "GiB", "MHz", "%"})


MEASUREMENT_UNITS = _measurement_units()


def gpu_figures_judged(recs: list[CaseRecord]) -> int:
    """How many figures of a GPU were judged against a limit (pass or fail) in ``recs`` (pure)."""
    return sum(1 for r in recs for f in r.figures if f.get("gpu") is not None and f.get("verdict") in ("pass", "fail"))


def gpu_name(g: dict) -> str:
    """``"GPU 1 (00000000:00:07.0, serial 1650000000002)"`` of a failing-GPU entry of :func:`host_verdicts`."""
    parts = [p for p in (g.get("pci_bus_id"), f"serial {g['serial']}" if g.get("serial") else None) if p]
    return f"GPU {g['gpu']}" + (f" ({', '.join(parts)})" if parts else "")


def failing_gpus_text(v: dict) -> str:
    """The GPUs a host failed on, for its verdict line (pure): ``"1 of 8 GPUs failing: GPU 3 (0000:19:00.0,
    serial 1650...)"``; ``""`` when no failure line names a GPU (a node figure: the node at large)."""
    gpus = sorted((v.get("gpus") or {}).values(), key=lambda g: str(g["gpu"]))
    if not gpus:
        return ""
    of = f" of {v['gpus_seen']}" if v.get("gpus_seen") else ""
    return f"{len(gpus)}{of} GPU{'s' if len(gpus) > 1 or of else ''} failing: " + ", ".join(gpu_name(g) for g in gpus[:16]) + \
        (f", +{len(gpus) - 16} more" if len(gpus) > 16 else "")


def _line_text(line: str) -> str:
    """A failure line without its ``host GPU i (bus, serial): `` head (the GPU verdict row names the GPU)."""
    head, sep, rest = line.partition("): ")
    return rest if sep and " GPU " in head else line


def same_reason_once(reasons: list[str]) -> list[str]:
    """A host's reasons with the tests that stopped for one same cause joined (pure): an unknown host key or an
    unreachable host makes every test of the host an ERROR with the same message, which read three times over
    before "+9 more". ``["test_a: box1: unreachable", "test_b: box1: unreachable"]`` ->
    ``["test_a and 1 more test: box1: unreachable"]``; other reasons are kept as they are, in order."""
    tests: dict[tuple[bool, str], list[str]] = {}  # (a test's message?, text) -> test names, in first-seen order
    for r in reasons:
        name, sep, why = r.partition(": ")
        named = bool(sep) and name.startswith("test_") and " " not in name
        tests.setdefault((named, why if named else r), []).append(name)
    out = []
    for (named, text), names in tests.items():
        more = len(names) - 1
        out += [f"{names[0]}" + (f" and {more} more test{'s' if more > 1 else ''}" if more else "") + f": {text}"] \
            if named else [text] * len(names)
    return out


def failed_hosts(recs: list[CaseRecord], hosts: list[str] | None = None, hv: dict | None = None) -> list[str]:
    """Hosts (of the run's inventory selection) with a failure or an error, in selection order (pure).
    ``hv``: :func:`host_verdicts` of the same records when already computed."""
    hv = hv if hv is not None else host_verdicts(recs, hosts)
    order = list(hosts or []) + sorted(h for h in hv if h not in (hosts or []) and h != "fleet")
    return [h for h in order if h in hv and h != "fleet" and hv[h]["verdict"] in ("FAIL", "ERROR")]


# -- JUnit ---------------------------------------------------------------------------------------
def _prop_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, str)) or v is None:
        return "" if v is None else str(v)
    return json.dumps(v, default=str, separators=(",", ":"))


def _distinguisher(f: dict) -> str:
    extra = f.get("extra")
    if not extra:
        return ""
    parts = [f"{k}={_prop_value(v)}" for k, v in sorted(extra.items())
             if isinstance(v, (int, float, str, bool)) and len(str(v)) <= 40]
    return f"[{','.join(parts)}]" if parts else ""


def figure_properties(fleet_wide: bool, figures: list[dict]) -> list[tuple[str, str]]:
    """JUnit properties of one testcase's figures (pure): per figure ``<name>`` = value (a bare number where
    it is one), ``<name>.unit``, ``<name>.min`` / ``<name>.max`` (the limit) and ``<name>.verdict``.

    ``<name>`` is ``[<host>.][gpu<i>.]<check>``: the host in fleet-wide testcases, the GPU index for per-GPU
    figures; a figure whose name repeats within the testcase gets its scalar ``extra`` fields appended
    (``busbw_gbps[bytes=4096]``), and ``#2``, ``#3``... if it still repeats, so names are unique.
    """
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    base_count: dict[str, int] = {}
    bases = []
    for f in figures:
        host = f.get("host") or ""
        if fleet_wide and (f.get("extra") or {}).get("host"):
            host = f["extra"]["host"]
        prefix = (f"{host}." if fleet_wide and host and host != "fleet" else "") + \
                 (f"gpu{f['gpu']}." if f.get("gpu") is not None else "")
        base = f"{prefix}{f['check']}"
        bases.append(base)
        base_count[base] = base_count.get(base, 0) + 1
    for f, base in zip(figures, bases):
        name = base + (_distinguisher(f) if base_count[base] > 1 else "")
        n, unique = 2, name
        while unique in seen:
            unique, n = f"{name}#{n}", n + 1
        seen.add(unique)
        out.append((unique, _prop_value(f.get("value"))))
        if f.get("unit"):
            out.append((f"{unique}.unit", str(f["unit"])))
        for k in ("min", "max"):
            if isinstance(f.get("limit"), dict) and k in f["limit"]:
                out.append((f"{unique}.{k}", _prop_value(f["limit"][k])))
        if f.get("verdict"):
            out.append((f"{unique}.verdict", str(f["verdict"])))
    return out


_XML_SPECIAL = re.compile(r'[\x00-\x1f&<>"]')
_XML_BAD = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _xml_text(v: str) -> str:
    if not _XML_SPECIAL.search(v):
        return v
    # characters XML 1.0 cannot carry (control bytes from a tool's output) become U+FFFD
    v = _XML_BAD.sub("\ufffd", v)
    return v.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _xml_attr(v: str) -> str:
    if not _XML_SPECIAL.search(v):
        return '"' + v + '"'
    return '"' + _xml_text(v).replace('"', "&quot;").replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#9;") + '"'


JUNIT_FOOTER = "  </testsuite>\n</testsuites>\n"


def junit_header(layer: str, recs: list[CaseRecord]) -> str:
    """The XML declaration and the opening of the testsuite named ``layer`` with its counts (ends in a newline)."""
    counts = {"failed": 0, "error": 0, "skipped": 0}
    for r in recs:
        if r.outcome in counts:
            counts[r.outcome] += 1
    return ("<?xml version='1.0' encoding='utf-8'?>\n<testsuites>\n"
            f'  <testsuite name={_xml_attr(layer)} tests="{len(recs)}" failures="{counts["failed"]}" '
            f'errors="{counts["error"]}" skipped="{counts["skipped"]}" time="{sum(r.duration_s for r in recs):.3f}" '
            f'timestamp="{time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())}">\n')


def junit_testcase(layer: str, r: CaseRecord) -> str:
    """One record's <testcase> element (classname ``<layer>.<host|fleet>``, figures as properties; see
    :func:`figure_properties`), indented, ending in a newline."""
    classname = f"{layer}.{r.host or 'fleet'}"
    out = [f'    <testcase name={_xml_attr(r.name)} classname={_xml_attr(classname)} '
           f'file={_xml_attr(r.nodeid.split("::")[0])} time="{r.duration_s:.3f}">']
    if r.figures:
        out.append("      <properties>")
        out += [f"        <property name={_xml_attr(n)} value={_xml_attr(v)} />"
                for n, v in figure_properties(r.host is None, r.figures)]
        out.append("      </properties>")
    first = r.message.splitlines()[0] if r.message.strip() else r.outcome
    if r.outcome in ("failed", "error"):
        tag = "failure" if r.outcome == "failed" else "error"
        out.append(f'      <{tag} type="{tag}" message={_xml_attr(first)}>{_xml_text(r.message)}</{tag}>')
    elif r.outcome == "skipped":
        out.append(f'      <skipped type="skipped" message={_xml_attr(r.message)} />')
    out.append("    </testcase>\n")
    return "\n".join(out)


def junit_xml_text(layer: str, recs: list[CaseRecord]) -> str:
    """One testsuite named ``layer``; a testcase per record (classname ``<layer>.<host|fleet>``); figures as
    ``<properties>`` (see :func:`figure_properties`). Written as text in one pass (linear in the records;
    ElementTree's indent and serialiser took seconds at 10,000 hosts). :class:`Reporter` writes the same text
    from each record's <testcase>, rendered once when the record arrives."""
    return junit_header(layer, recs) + "".join(junit_testcase(layer, r) for r in recs) + JUNIT_FOOTER


# -- summary ---------------------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def _gpu_s(f: dict) -> str:
    return f" GPU {f['gpu']}" if f.get("gpu") is not None else ""


def _limit_s(lim: dict | None) -> str:
    lim = lim or {}
    return " ".join(f"{'>=' if k == 'min' else '<='} {_fmt(v)}" for k, v in lim.items() if k in ("min", "max")) or "-"


def _key(f: dict) -> tuple:
    return (f.get("host"), f.get("check"), f.get("gpu"), json.dumps((f.get("extra") or {}).get("pair")))


def is_throughput(f: dict) -> bool:
    """A numeric figure judged against a ``min`` limit (bandwidths, TFLOP/s: higher is better). Only these
    are compared with peers and history: error counts against a ``max`` limit are small integers whose
    relative change means nothing (1 CRC error/s is "100% above" 0.5)."""
    return (isinstance(f.get("limit"), dict) and "min" in f["limit"]
            and isinstance(f.get("value"), (int, float)) and not isinstance(f.get("value"), bool))


def outliers(figures: list[dict], previous: list[dict], peer_pct: float = 10.0, history_pct: float = 10.0,
             min_peers: int = 3) -> list[dict]:
    """Judged figures that stand out, even when they pass their limit (pure).

    ``peers``: worse than the median of the same SKU and check over every host and GPU of this run by more
    than ``peer_pct`` percent (only with at least ``min_peers`` figures). ``history``: worse than the same host,
    check and GPU in ``previous`` (the last run's figures) by more than ``history_pct`` percent. Only passing
    :func:`is_throughput` figures are compared (a failed one is listed under failures). Returns records
    ``{host, check, gpu, value, unit, against, reference, pct}``.
    """
    judged = [f for f in figures if is_throughput(f) and f.get("verdict") != "fail"]
    out: list[dict] = []
    by_check: dict[tuple, list[float]] = {}
    for f in judged:
        by_check.setdefault((f.get("sku"), f["check"]), []).append(float(f["value"]))
    prev = {_key(f): f["value"] for f in previous if isinstance(f.get("value"), (int, float))}
    medians = {k: sorted(v)[len(v) // 2] for k, v in by_check.items() if len(v) >= min_peers}
    for f in judged:
        refs = []
        if (f.get("sku"), f["check"]) in medians:
            refs.append(("peers", medians[(f.get("sku"), f["check"])], peer_pct))
        if _key(f) in prev:
            refs.append(("history", float(prev[_key(f)]), history_pct))
        for against, ref, pct in refs:
            if ref and (ref - f["value"]) / abs(ref) * 100.0 > pct:
                out.append({"host": f["host"], "check": f["check"], "gpu": f.get("gpu"), "value": f["value"],
                            "unit": f.get("unit"), "serial": f.get("serial"), "against": against,
                            "reference": ref, "pct": round(abs(ref - f["value"]) / abs(ref) * 100.0, 1)})
    return out


def load_previous_figures(directory: str | None) -> list[dict]:
    """Figures of an earlier run's results.json (empty when absent or unreadable)."""
    if not directory:
        return []
    try:
        with open(os.path.join(directory, "results.json"), encoding="utf-8") as f:
            return list(json.load(f).get("figures") or [])
    except (OSError, ValueError):
        return []


def gpu_table(figures: list[dict]) -> tuple[list[str], list[dict]]:
    """Per-GPU rows of judged per-GPU figures (pure): ``(checks, rows)``; each row ``{host, gpu, pci_bus_id,
    serial, cells: {check: figure}}``, ordered by host then GPU index; checks in first-seen order. Key figures
    only: the throughputs (``min`` limits) and any check that failed somewhere (error counts and
    below-median percentages that passed everywhere are in results.json). See :class:`GpuTable`."""
    return GpuTable().add(figures).table()


class GpuTable:
    """:func:`gpu_table` kept up to date figure by figure (:meth:`add`: O(its figures)), so that a whole-run
    write makes only the rows it shows (:meth:`table` for some hosts; :meth:`count` of all rows).

    Per (host, GPU) and check it keeps the first judged figure, the first with a ``min`` limit and the first
    that failed; the cell shown is, for a check that failed somewhere, the first failing figure else the first,
    and otherwise the first with a ``min`` limit (what one pass over the filtered figures picks). A row's bus id
    and serial: the first any judged figure of that GPU gives (before 2026-11-30: of the figures shown only)."""

    def __init__(self):
        self.rows: dict[tuple, dict] = {}
        self.by_host: dict[Any, list[dict]] = {}
        self.failing: set[str] = set()
        self.first_any: dict[str, int] = {}  # check -> sequence number of its first judged per-GPU figure
        self.first_min: dict[str, int] = {}  # ... of its first with a min limit
        self._n = 0

    def add(self, figures: list[dict]) -> "GpuTable":
        for f in figures:
            if f.get("gpu") is None:
                continue
            v = f.get("verdict")
            if v != "pass" and v != "fail":
                continue
            self._n += 1
            c = f["check"]
            if c not in self.first_any:
                self.first_any[c] = self._n
            has_min = "min" in (f.get("limit") or {})
            if has_min and c not in self.first_min:
                self.first_min[c] = self._n
            key = (f["host"], f["gpu"])
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = {"host": f["host"], "gpu": f["gpu"], "pci_bus_id": None, "serial": None,
                                        "any": {}, "min": {}, "fail": {}}
                self.by_host.setdefault(f["host"], []).append(row)
            row["pci_bus_id"] = row["pci_bus_id"] or f.get("pci_bus_id")
            row["serial"] = row["serial"] or f.get("serial")
            row["any"].setdefault(c, f)
            if has_min:
                row["min"].setdefault(c, f)
            if v == "fail":
                self.failing.add(c)
                row["fail"].setdefault(c, f)
        return self

    def _cells(self, row: dict) -> dict[str, dict]:
        cells = {c: f for c, f in row["min"].items() if c not in self.failing}
        for c in self.failing:
            f = row["fail"].get(c) or row["any"].get(c)
            if f is not None:
                cells[c] = f
        return cells

    def count(self) -> int:
        """How many rows :meth:`table` of every host has."""
        return sum(1 for r in self.rows.values() if r["min"] or (self.failing and not self.failing.isdisjoint(r["any"])))

    def table(self, only: set | None = None) -> tuple[list[str], list[dict]]:
        """``(checks, rows)`` as :func:`gpu_table`; with ``only``, the rows of those hosts alone (the checks
        are still every check shown for any host)."""
        checks = sorted((c for c in self.first_any if c in self.failing or c in self.first_min),
                        key=lambda c: self.first_any[c] if c in self.failing else self.first_min[c])
        rows = [r for h, rs in self.by_host.items() if only is None or h in only for r in rs]
        out = []
        for r in sorted(rows, key=lambda r: (str(r["host"]), r["gpu"])):
            cells = self._cells(r)
            if cells:
                out.append({"host": r["host"], "gpu": r["gpu"], "pci_bus_id": r["pci_bus_id"], "serial": r["serial"],
                            "cells": {c: cells[c] for c in checks if c in cells}})
        return checks, out


def summary_markdown(run_id: str, meta: dict, recs: list[CaseRecord], slow: list[dict] | None = None,
                     hv: dict | None = None, table: GpuTable | None = None) -> str:
    """The human summary: one verdict line per host with its first reasons, a per-GPU table (figures
    against limits), failures, stand-outs and fleet outliers, then counts per host and layer. ``hv``
    (:func:`host_verdicts` of ``recs``) and ``table`` (the :class:`GpuTable` of their figures): kept, when given."""
    hosts = list(meta.get("hosts") or [])
    hv = hv if hv is not None else host_verdicts(recs, hosts)
    out = [f"# gpuaccept run {run_id}", "",
           f"inventory `{meta.get('inventory')}`, limit `{meta.get('limit') or 'all'}`, "
           f"profile `{meta.get('profile') or '-'}`, {len([h for h in hv if h != 'fleet'])} hosts, {len(recs)} tests",
           ""]
    tally: dict[str, int] = {}
    for h, v in hv.items():
        if h != "fleet":
            tally[v["verdict"]] = tally.get(v["verdict"], 0) + 1
    out.append(" ".join(f"**{k}** {tally[k]}" for k in ("FAIL", "ERROR", "PASS", "SKIP") if k in tally) + " hosts"
               + f", {gpu_figures_judged(recs)} GPU figures judged")
    out.append("")
    order = {"ERROR": 0, "FAIL": 1, "PASS": 2, "SKIP": 3}
    for h in sorted(hv, key=lambda h: (order[hv[h]["verdict"]], h)):
        v = hv[h]
        grouped = same_reason_once(v["reasons"])
        reasons = "; ".join(grouped[:3]) + (f"; +{len(grouped) - 3} more" if len(grouped) > 3 else "")
        gpus = failing_gpus_text(v)
        out.append(f"- **{v['verdict']}** `{h}`" + (f": {reasons}" if reasons else "")
                   + (f" — {gpus}" if gpus else ""))
    failing = [(h, g) for h in sorted(hv) for g in sorted((hv[h].get("gpus") or {}).values(), key=lambda g: str(g["gpu"]))]
    if failing:
        out += ["", "## Failing GPUs", "", "| host | GPU | PCI bus id | serial | verdict | tests | why |",
                "|---|---|---|---|---|---|---|"]
        for h, g in failing[:SUMMARY_MAX_GPU_ROWS]:
            why = "; ".join(_line_text(ln) for ln in g["lines"][:6]) + \
                (f"; +{len(g['lines']) - 6} more" if len(g["lines"]) > 6 else "")
            out.append(f"| {h} | {g['gpu']} | {g.get('pci_bus_id') or ''} | {g.get('serial') or ''} | FAIL | "
                       f"{', '.join(g['tests'])} | {why.replace('|', '/')} |")
        if len(failing) > SUMMARY_MAX_GPU_ROWS:
            out.append(f"\n{len(failing) - SUMMARY_MAX_GPU_ROWS} more failing GPUs: results.json has them.")
    if meta.get("merge_notes"):  # gpuaccept.scaleout.merge: which run's records a host kept
        out += ["", "## Merged", ""] + [f"- {n}" for n in meta["merge_notes"]]
    table = table if table is not None else GpuTable().add([f for r in recs for f in r.figures])
    left_out, total = 0, table.count()
    if total > SUMMARY_MAX_GPU_ROWS:  # a fleet: the GPUs of hosts that did not pass
        checks, rows = table.table({h for h, v in hv.items() if v["verdict"] != "PASS"})
        left_out = total - len(rows)
    else:
        checks, rows = table.table()
    if rows or left_out:
        out += ["", "## GPUs", ""] + ([f"{left_out} GPUs of passing hosts not listed (results.json has them).", ""]
                                      if left_out else []) + [
                "| host | GPU | PCI bus id | serial | " + " | ".join(checks) + " |",
                "|---|---|---|---|" + "---|" * len(checks)]
        for row in rows:
            cells = []
            for c in checks:
                f = row["cells"].get(c)
                cells.append("" if f is None else (f"**{_fmt(f['value'])} ✗** ({_limit_s(f.get('limit'))})"
                                                   if f["verdict"] == "fail" else
                                                   f"{_fmt(f['value'])} ({_limit_s(f.get('limit'))})"))
            out.append(f"| {row['host']} | {row['gpu']} | {row['pci_bus_id'] or ''} | {row['serial'] or ''} | "
                       + " | ".join(cells) + " |")
    bad = [r for r in recs if r.outcome in ("failed", "error")]
    if bad:
        out += ["", "## Failures and errors", ""]
        for r in bad:
            first, *rest = (r.message or r.outcome).splitlines() or [r.outcome]
            out.append(f"- **{r.outcome.upper()}** `{r.nodeid}`: {first}")
            out += [f"  - {ln}" for ln in rest[:20]]
    stand = [o for o in (slow or []) if o.get("against") != "fleet"]
    fleet = [o for o in (slow or []) if o.get("against") == "fleet"]
    if stand:
        out += ["", "## Stand-outs (within limits, but slower than before or than peers)", "",
                "| host | check | GPU | serial | value | against | reference | worse by |",
                "|---|---|---|---|---|---|---|---|"]
        for o in sorted(stand, key=lambda o: (str(o["host"]), o["check"], str(o.get("gpu")))):
            out.append(f"| {o['host']} | {o['check']} | {'' if o.get('gpu') is None else o['gpu']} | "
                       f"{o.get('serial') or ''} | {_fmt(o['value'])} {o.get('unit') or ''} | {o['against']} | "
                       f"{_fmt(o['reference'])} | {o['pct']}% |")
    if fleet:
        out += ["", "## Fleet outliers (below the median of the same SKU and check)", "",
                "| host | check | GPU | SKU | value | fleet median | below by | MADs |", "|---|---|---|---|---|---|---|---|"]
        for o in fleet:
            out.append(f"| {o['host']} | {o['check']} | {'' if o.get('gpu') is None else o['gpu']} | "
                       f"{o.get('sku') or ''} | {_fmt(o['value'])} {o.get('unit') or ''} | {_fmt(o['reference'])} | "
                       f"{o['pct']}% | {o.get('mads', '')} |")
    replayed: dict[str, list[str]] = {}
    for r in recs:
        for f in r.figures:
            if f.get("check") == "replay_note" and isinstance(f.get("value"), str):
                hs = replayed.setdefault(f["value"], [])
                if (r.host or "fleet") not in hs:
                    hs.append(r.host or "fleet")
    if replayed:
        out += ["", "## Replayed from documents saved with other arguments", ""]
        for note, hs in replayed.items():
            out.append(f"- {note} ({len(hs)} host{'s' if len(hs) != 1 else ''}: {', '.join(hs[:8])}"
                       f"{', ...' if len(hs) > 8 else ''})")
    skips = skip_groups(recs)
    if skips:
        out += ["", "## Skipped", ""]
        for why, (hs, tests) in skips.items():
            out.append(f"- {why}: {len(hs)} host{'s' if len(hs) != 1 else ''} ({', '.join(hs[:8])}"
                       f"{', ...' if len(hs) > 8 else ''}), {tests} test{'s' if tests != 1 else ''}")
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for r in recs:
        c = counts.setdefault((r.host or "fleet", r.layer), {})
        c[r.outcome] = c.get(r.outcome, 0) + 1
    out += ["", "## Counts", "", "| host | layer | passed | failed | error | skipped |", "|---|---|---|---|---|---|"]
    for (host, layer), c in sorted(counts.items()):
        out.append(f"| {host} | {layer} | {c.get('passed', 0)} | {c.get('failed', 0)} | {c.get('error', 0)} "
                   f"| {c.get('skipped', 0)} |")
    out += ["", "Every figure: `results.json`; plots: `report.html`."]
    return "\n".join(out) + "\n"
