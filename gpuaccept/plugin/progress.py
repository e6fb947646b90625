"""The progress display of a run: per host the probe or test running and its elapsed time against its timeout
(or the probe's own live progress line, gpuaccept.transport.progress), rewritten in place on a terminal, plain
start / still-running / end lines otherwise (CI logs). Probes of xdist workers reach it through
gpuaccept.runner.progress_relay. Started by gpuaccept.plugin.reports.ReportPlugin when the first test runs.
"""
from __future__ import annotations

import os
import sys
import threading
import time

# Plain-line progress: a "still running" line per host at most this often, seconds (chosen for CI logs).
PLAIN_EVERY_S = 30.0
# The in-place line on a terminal is rewritten this often, seconds (chosen).
TTY_EVERY_S = 1.0


class Progress:
    """Per host what runs and for how long. ``stream``: where to write; ``tty``: rewrite one line in place
    (every :data:`TTY_EVERY_S`) instead of plain start/still-running/end lines."""

    def __init__(self, stream, tty: bool, timeout_s: float, relay_dir: str | None = None):
        from gpuaccept.runner.progress_relay import ControllerReader
        self.relay = ControllerReader(relay_dir) if relay_dir else None  # xdist workers' probes (progress_relay)
        self.stream = stream
        self.tty = tty
        self.timeout_s = timeout_s
        self.running: dict[str, list] = {}  # host -> [what, started, last plain line, timeout, entry it covers]
        self.detail: dict[str, str] = {}  # host -> the running probe's last live progress, rendered
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._width = 0

    def start(self) -> None:
        """Start the thread that redraws the line (tty) or writes the still-running lines (plain)."""
        self._thread = threading.Thread(target=self._loop, name="gpuaccept-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (waiting up to 2 s) and clear the in-place line."""
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=2)
        if self.tty and self._width:
            self._write("\r" + " " * self._width + "\r")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def begin(self, host: str, what: str, timeout_s: float | None = None) -> None:
        """``host`` starts ``what`` (a test, or a probe within it with its ``timeout_s``). A test has no timeout
        of its own (each probe in it has one), so its plain line names none: a burn-in test's line used to say
        the default probe timeout, 300 s, for an hour's load."""
        now = time.monotonic()
        with self._lock:
            self.running[host] = [what, now, now, timeout_s or self.timeout_s, self.running.get(host)]
            self.detail.pop(host, None)
        if not self.tty:
            self._write(f"[gpuaccept] {host}: {what} started"
                        + (f" (timeout {timeout_s:.0f} s)\n" if timeout_s else "\n"))

    def update(self, host: str, probe: str, doc: dict) -> None:
        """A live progress line of ``probe`` running on ``host`` (gpuaccept.transport.progress): shown instead of
        the elapsed time, ``gpu07: burnin 12/60 min, bf16 612-648 TFLOP/s, max 71 °C``; in plain mode at
        most every PLAIN_EVERY_S per host, as the host's "still running" line."""
        from gpuaccept.transport.progress import render
        text = render(probe, doc)
        with self._lock:
            if host in self.running:
                self.detail[host] = text

    def done(self, host: str, what: str) -> None:
        """``what`` (a probe) ended on ``host``: the host shows what it covered again (its test), or nothing (a
        probe fetched ahead, whose test has not started). No line: the test's end line follows."""
        with self._lock:
            cur = self.running.get(host)
            if cur is not None and cur[0] == what:
                if cur[4] is not None:
                    self.running[host] = cur[4]
                else:
                    del self.running[host]
                self.detail.pop(host, None)

    def end(self, host: str, outcome: str) -> None:
        """The test running on ``host`` ended with ``outcome``; in plain mode one line with its duration."""
        with self._lock:
            cur = self.running.pop(host, None)
            self.detail.pop(host, None)
        if cur and not self.tty:
            self._write(f"[gpuaccept] {host}: {cur[0]} {outcome} after {time.monotonic() - cur[1]:.1f} s\n")

    def line(self) -> str:
        """The in-place status line: ``host what 12s/300s | ...``."""
        now = time.monotonic()
        with self._lock:
            items = sorted(self.running.items())
            detail = dict(self.detail)
        parts = [f"{h} {detail[h]}" if h in detail else f"{h} {w} {now - t0:.0f}s/{to:.0f}s"
                 for h, (w, t0, _, to, _) in items]
        return f"[gpuaccept] {len(items)} running: " + " | ".join(parts) if parts else ""

    def _loop(self) -> None:
        while not self._stop.wait(TTY_EVERY_S):
            if self.relay is not None:
                self.relay.poll(self.begin, self.update)
            if self.tty:
                text = self.line()
                cols = 120
                try:
                    cols = os.get_terminal_size(self.stream.fileno()).columns
                except (OSError, ValueError, AttributeError):
                    pass
                text = text[:max(20, cols - 1)]
                self._write("\r" + text.ljust(self._width) + "\r" if text or self._width else "")
                self._width = len(text)
            else:
                now = time.monotonic()
                with self._lock:
                    late = [(h, c, self.detail.get(h)) for h, c in self.running.items() if now - c[2] >= PLAIN_EVERY_S]
                    for _, c, _ in late:
                        c[2] = now
                for h, (w, t0, _, to, _), detail in late:
                    self._write(f"[gpuaccept] {h}: {detail} ({w}, {now - t0:.0f} s of {to:.0f} s)\n" if detail else
                                f"[gpuaccept] {h}: {w} still running, {now - t0:.0f} s of {to:.0f} s\n")


def real_stderr():
    """A stream on a copy of file descriptor 2 taken now (pytest_configure: pytest's capture is suspended), so
    that the progress display still reaches the operator while pytest's fd capture redirects fd 2 during a test
    (``sys.__stderr__`` writes to fd 2 and was captured then: a one-host run without -n showed nothing while a
    probe ran). None when there is no stderr."""
    try:
        err = sys.__stderr__
        if err is None:
            return None
        fd = os.dup(err.fileno())
        return os.fdopen(fd, "w", encoding=getattr(err, "encoding", None) or "utf-8", errors="replace", buffering=1)
    except (OSError, ValueError, AttributeError):
        return None

