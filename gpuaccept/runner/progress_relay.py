"""Probe starts and live progress from xdist workers to the controller's progress display.

Under ``-n N`` probes run in worker processes, while the progress display (gpuaccept.plugin.progress.Progress) lives
in the controller; xdist sends only test reports between them. So each worker keeps, per host it runs, the
probe running and its last live progress line (gpuaccept.transport.progress) in one small JSON file of its own,
``<relay dir>/<worker id>.json``, rewritten atomically (at most every :data:`WRITE_EVERY_S`, a probe start
always); the controller's display reads the files whose size or mtime changed, once per display tick. The
relay folder is a temporary folder the controller makes (never the report folder) and removes at the end.

File: ``{"<host>": {"seq": n, "probe": name, "timeout_s": s, "doc": progress document | null}}``.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time

#: seconds between rewrites of a worker's file for progress lines alone (a probe start is written at once)
WRITE_EVERY_S = 0.5


def make_dir() -> str:
    """A fresh private folder for one run's relay files (controller side)."""
    return tempfile.mkdtemp(prefix="gpuaccept-progress-")


def remove_dir(path: str | None) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


class WorkerRelay:
    """Worker side: hooks for gpuaccept.runner.host's PROBE_STARTED and PROBE_PROGRESS lists that keep this worker's
    file. ``directory``: the controller's relay folder; ``worker``: the xdist worker id (``gw0``)."""

    def __init__(self, directory: str, worker: str):
        self.path = os.path.join(directory, f"{worker}.json")
        self.hosts: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._last = 0.0
        self._seq = 0

    def started(self, host: str, probe: str, timeout_s: float) -> None:
        with self._lock:
            self._seq += 1
            self.hosts[host] = {"seq": self._seq, "probe": probe, "timeout_s": timeout_s, "doc": None}
            self._write()

    def progress(self, host: str, probe: str, doc: dict) -> None:
        with self._lock:
            cur = self.hosts.get(host)
            if cur is None or cur["probe"] != probe:
                return
            cur["doc"] = doc
            if time.monotonic() - self._last >= WRITE_EVERY_S:
                self._write()

    def _write(self) -> None:
        self._last = time.monotonic()
        tmp = f"{self.path}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self.hosts, f, separators=(",", ":"))
            os.replace(tmp, self.path)
        except (OSError, TypeError, ValueError):
            pass  # a display aid: a full disk or a vanished folder never fails a measurement


class ControllerReader:
    """Controller side: ``poll(begin, update)`` reads the workers' files that changed since the last poll and
    calls ``begin(host, "probe <name>", timeout_s)`` for each probe started since, ``update(host, probe, doc)``
    for each new progress line (the Progress object's own methods)."""

    def __init__(self, directory: str):
        self.directory = directory
        self._stamp: dict[str, tuple] = {}
        self._seen: dict[tuple, tuple] = {}  # (file, host) -> (seq, doc) last passed on

    def poll(self, begin, update) -> None:
        try:
            names = [n for n in os.listdir(self.directory) if n.endswith(".json")]
        except OSError:
            return
        for n in names:
            path = os.path.join(self.directory, n)
            try:
                st = os.stat(path)
            except OSError:
                continue
            stamp = (st.st_mtime_ns, st.st_size)
            if self._stamp.get(n) == stamp:
                continue
            self._stamp[n] = stamp
            try:
                with open(path, encoding="utf-8") as f:
                    hosts = json.load(f)
            except (OSError, ValueError):
                continue
            for host, rec in (hosts.items() if isinstance(hosts, dict) else []):
                if not isinstance(rec, dict) or not isinstance(rec.get("probe"), str):
                    continue
                seq, doc = rec.get("seq"), rec.get("doc")
                old = self._seen.get((n, host))
                if old is None or old[0] != seq:
                    begin(host, f"probe {rec['probe']}", rec.get("timeout_s"))
                if isinstance(doc, dict) and (old is None or old != (seq, doc)):
                    update(host, rec["probe"], doc)
                self._seen[(n, host)] = (seq, doc)


def install_worker(workerinput: dict) -> None:
    """In an xdist worker: hook a WorkerRelay into gpuaccept.runner.host's lists when the controller made a relay
    folder (``workerinput["gpuaccept_progress_dir"]``, see gpuaccept.plugin.pytest_configure_node)."""
    directory = workerinput.get("gpuaccept_progress_dir")
    if not directory or not os.path.isdir(directory):
        return
    from gpuaccept.runner import host as node
    relay = WorkerRelay(directory, str(workerinput.get("workerid") or os.getpid()))
    node.PROBE_STARTED.append(relay.started)
    node.PROBE_PROGRESS.append(relay.progress)
