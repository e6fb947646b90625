"""The run's console at fleet size: what an operator watches on a terminal, and what cron, CI and Slurm logs
keep. Nothing per test either way (pytest's own per-test letters are switched off by the plugin too):

* on a terminal, one status line rewritten in place, fitted to its width:
  ``hosts 212/300 done · 3 FAIL · 1 ERROR · 6 running (slowest: gpu-118 test_hbm_bandwidth 41 s)``
  (a probe's live progress, e.g. a burn-in's, is shown for the slowest host instead of its elapsed time);
* otherwise, one line per host when its last test ends, with its verdict and first reason
  (``[gpuaccept] gpu-07 FAIL (14 tests, 41 s): test_hbm_bandwidth: ... hbm_read_bw_gbps 3812 GB/s < min ...``),
  a probe's live progress line at most every :data:`PLAIN_EVERY_S` per host, and the status line above at most
  every :data:`PLAIN_EVERY_S` while hosts are still running.

Verdict of a host as everywhere: FAIL > ERROR > PASS > SKIP, from its tests' outcomes so far.
"""
from __future__ import annotations

import os
import sys
import threading
import time

# Plain-line progress: a live-progress line per host, and the fleet's status line, at most this often, seconds
# (chosen for CI logs).
PLAIN_EVERY_S = 30.0
TTY_EVERY_S = 1.0
#: outcome -> the host verdict it makes, in the verdict order (the worst wins)
_VERDICT = {"failed": "FAIL", "error": "ERROR", "passed": "PASS", "skipped": "SKIP"}
_ORDER = ("FAIL", "ERROR", "PASS", "SKIP")



#: characters of a host's first failure reason on its line (the whole reason: summary.md, results.json)
REASON_CHARS = 300


def clip(text: str, most: int) -> str:
    """``text`` whole when it has at most ``most`` characters; else cut at the last space that leaves room for
    `` ...`` (mid-word only where one word is longer than the room), ``...`` after it."""
    if len(text) <= most:
        return text
    room = text[:max(0, most - 4)]
    cut = room.rsplit(" ", 1)[0] if " " in room else room
    return cut + " ..."

class Progress:
    """Per host what runs and for how long, and how far the fleet is. ``stream``: where to write; ``tty``:
    rewrite one line in place (every :data:`TTY_EVERY_S`) instead of plain lines; ``timeout_s``: the probe
    timeout shown beside a probe's elapsed time; ``relay_dir``: the xdist workers' probe relay
    (gpuaccept.runner.progress_relay). :meth:`expect` tells it how many tests each host has."""

    def __init__(self, stream, tty: bool, timeout_s: float, relay_dir: str | None = None):
        from gpuaccept.runner.progress_relay import ControllerReader
        self.relay = ControllerReader(relay_dir) if relay_dir else None
        self.stream = stream
        self.tty = tty
        self.timeout_s = timeout_s
        self.running: dict[str, list] = {}  # host -> [what, started, last plain line, timeout, entry it covers]
        self.detail: dict[str, str] = {}  # host -> the running probe's last live progress, rendered
        self.left: dict[str, int] = {}  # host -> tests not yet ended
        self.fleet_left = 0  # fleet-wide tests not yet ended (they may still fail a host whose own tests passed)
        self.verdict: dict[str, str] = {}  # host -> its verdict so far
        self.reason: dict[str, str] = {}  # host -> its first failure or error line
        self.tests: dict[str, int] = {}  # host -> tests ended
        self.first_start: dict[str, float] = {}
        self.done_hosts: list[str] = []
        self._last_status = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._width = 0
        self._shared = _same_file(stream, 1)  # beside pytest's own lines (a terminal, 2>&1): start a fresh line

    def expect(self, tests_per_host: dict[str, int]) -> None:
        """How many tests each host will run (after deselection); hosts with none are not counted."""
        with self._lock:
            for h, n in tests_per_host.items():
                if h != "fleet" and n > 0:
                    self.left[h] = self.left.get(h, 0) + n
                elif h == "fleet" and n > 0:
                    self.fleet_left += n

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="gpuaccept-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=2)
        if self.tty and self._width:
            self._write("\r" + " " * self._width + "\r")

    def _line(self, text: str) -> None:
        """A plain line of its own: where it shares the output with pytest's terminal, the line pytest left open
        (``-v``'s ``... SKIPPED [100%]``, whose newline pytest writes only before its next line) is ended first
        (:data:`END_TERMINAL_LINE`), so that the progress line is never glued to it."""
        if self._shared and END_TERMINAL_LINE:
            try:
                END_TERMINAL_LINE[-1]()
            except (OSError, ValueError):
                pass
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def begin(self, host: str, what: str, timeout_s: float | None = None) -> None:
        """``host`` starts ``what`` (a test, or a probe within it with its ``timeout_s``). No line."""
        now = time.monotonic()
        with self._lock:
            self.running[host] = [what, now, now, timeout_s or self.timeout_s, self.running.get(host)]
            self.detail.pop(host, None)
            self.first_start.setdefault(host, now)

    def update(self, host: str, probe: str, doc: dict) -> None:
        """A live progress line of ``probe`` running on ``host`` (gpuaccept.transport.progress): shown instead of
        the elapsed time, ``gpu07: burnin 12/60 min, bf16 612-648 TFLOP/s, max 71 °C``; in plain mode at
        most every PLAIN_EVERY_S per host."""
        from gpuaccept.transport.progress import render
        text = render(probe, doc)
        with self._lock:
            if host in self.running:
                self.detail[host] = text

    def done(self, host: str, what: str) -> None:
        """``what`` (a probe) ended on ``host``: the host shows what it covered again (its test), or nothing (a
        probe fetched ahead, whose test has not started)."""
        with self._lock:
            cur = self.running.get(host)
            if cur is not None and cur[0] == what:
                if cur[4] is not None:
                    self.running[host] = cur[4]
                else:
                    del self.running[host]
                self.detail.pop(host, None)

    def end(self, host: str, outcome: str, reason: str = "", judged: bool = True, filed: list | None = None) -> None:
        """A test of ``host`` ended with ``outcome`` (passed|failed|error|skipped); ``reason``: its first line
        when it failed or errored; ``judged``: False for a pass that judged no figure (it leaves the host SKIP,
        as gpuaccept.reporting.records.host_verdicts); ``filed``: for a fleet-wide test that failed or errored, the
        hosts its findings are filed under (their lines then read its outcome). The host's last test writes its
        line (plain mode)."""
        now = time.monotonic()
        why = clip(" ".join(reason.split()), REASON_CHARS) if reason else ""
        with self._lock:
            self.running.pop(host, None)
            self.detail.pop(host, None)
            if host == "fleet":
                line = self._fleet_end(outcome, why, filed or [])
            else:
                line = self._host_end(host, outcome, why, judged, now)
        if line and not self.tty:
            self._line(line)

    def _worse(self, host: str, verdict: str, why: str) -> None:
        """``host``'s verdict so far becomes ``verdict`` where that is worse, and ``why`` its reason if it has
        none (under the lock)."""
        old = self.verdict.get(host, "SKIP")
        self.verdict[host] = verdict if _ORDER.index(verdict) < _ORDER.index(old) else old
        if why and host not in self.reason:
            self.reason[host] = why

    def _fleet_end(self, outcome: str, why: str, filed: list) -> str | None:
        """A fleet-wide test ended (under the lock): the hosts it blames (``filed``) read its outcome in their line,
        if still to come; a failure or error has a line of its own (it may fail hosts whose line said PASS so
        far)."""
        self.fleet_left = max(0, self.fleet_left - 1)
        v = _VERDICT.get(outcome, "ERROR")
        for h in filed:
            self._worse(h, v, why)
        if outcome not in ("failed", "error"):
            return None
        return f"[gpuaccept] fleet-wide {v}" + (f": {why}" if why else "")

    def _host_end(self, host: str, outcome: str, why: str, judged: bool, now: float) -> str | None:
        """A test of ``host`` ended (under the lock): the host's line when it was its last."""
        self._worse(host, _VERDICT.get(outcome, "ERROR") if judged or outcome != "passed" else "SKIP",
                    why if outcome in ("failed", "error") else "")
        self.tests[host] = self.tests.get(host, 0) + 1
        if host not in self.left:
            return None
        self.left[host] -= 1
        if self.left[host] > 0:
            return None
        del self.left[host]
        self.done_hosts.append(host)
        took = now - self.first_start.get(host, now)
        reason = self.reason.get(host)
        # a fleet-wide test to come may still fail a host that passed its own: "PASS so far"
        later = f"; {self.fleet_left} fleet-wide test{'s' if self.fleet_left != 1 else ''} to come" \
            if self.fleet_left and self.verdict[host] in ("PASS", "SKIP") else ""
        n = self.tests[host]
        return (f"[gpuaccept] {host} {self.verdict[host]}{' so far' if later else ''} ({n} test{'s' if n != 1 else ''}, "
                f"{took:.0f} s{later})" + (f": {reason}" if reason else ""))

    def line(self, width: int | None = None) -> str:
        """The status line, at most ``width`` characters: ``hosts 212/300 done · 3 FAIL · 1 ERROR · 6 running
        (slowest: gpu-118 test_hbm_bandwidth 41 s)``; the slowest host's part goes first when it does not fit,
        then the line is cut. "" before any host started."""
        now = time.monotonic()
        with self._lock:
            hosts = set(self.left) | set(self.done_hosts) | {h for h in self.running if h != "fleet"}
            if not hosts and not self.running:
                return ""
            done = len(self.done_hosts)
            bad = {k: sum(1 for v in self.verdict.values() if v == k) for k in ("FAIL", "ERROR")}
            run = {h: c for h, c in self.running.items()}
            detail = dict(self.detail)
        parts = [f"hosts {done}/{len(hosts)} done"] + [f"{n} {k}" for k, n in bad.items() if n]
        slowest = ""
        if run:
            # a host whose own tests are done can still run a fleet-wide test's part (a multi-node collective):
            # said as such, so that "4/4 done" never sits beside "5 running"
            finished = set(self.done_hosts)
            own = [h for h in run if h != "fleet" and h not in finished]
            fleet = [h for h in run if h != "fleet" and h in finished]
            if own:
                parts.append(f"{len(own)} running")
            if fleet or "fleet" in run:
                parts.append("fleet-wide test running" + (f" on {len(fleet)} hosts" if fleet else ""))
            h, (w, t0, _, to, _) = min(run.items(), key=lambda kv: (kv[1][1], kv[0]))
            slowest = f" (slowest: {h} {detail[h]})" if h in detail else f" (slowest: {h} {w} {now - t0:.0f} s)"
        text = " · ".join(parts)
        if width is None or len(text) + len(slowest) <= width:
            return text + slowest
        return text[:max(0, width)]

    def _loop(self) -> None:
        while not self._stop.wait(TTY_EVERY_S):
            if self.relay is not None:
                self.relay.poll(self.begin, self.update)
            if self.tty:
                cols = 120
                try:
                    cols = os.get_terminal_size(self.stream.fileno()).columns
                except (OSError, ValueError, AttributeError):
                    pass
                text = self.line(max(20, cols - 1))
                self._write("\r" + text.ljust(self._width) + "\r" if text or self._width else "")
                self._width = len(text)
            else:
                self._plain_tick(time.monotonic())

    def _plain_tick(self, now: float) -> None:
        """Plain mode, once a tick: the live-progress lines due (one per host per PLAIN_EVERY_S), and the
        fleet's status line when PLAIN_EVERY_S passed since the last one and hosts are running."""
        with self._lock:
            late = [(h, c, self.detail[h]) for h, c in self.running.items()
                    if h in self.detail and now - c[2] >= PLAIN_EVERY_S]
            for _, c, _ in late:
                c[2] = now
            status_due = self.running and now - self._last_status >= PLAIN_EVERY_S
            if status_due:
                self._last_status = now
        for h, (w, t0, _, to, _), detail in late:
            self._line(f"[gpuaccept] {h}: {detail} ({w}, {now - t0:.0f} s of {to:.0f} s)")
        if status_due:
            self._line(f"[gpuaccept] {self.line()}")


#: ends the line pytest's terminal left open, for the run now configured (gpuaccept.plugin.pytest_configure
#: appends it, pytest_unconfigure removes it): the last one is the run's
END_TERMINAL_LINE: list = []


def _same_file(stream, fd: int) -> bool:
    """Whether ``stream`` writes where file descriptor ``fd`` does (the same terminal, pipe or file)."""
    try:
        a, b = os.fstat(stream.fileno()), os.fstat(fd)
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


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



class PipeSafe:
    """Standard output as pytest's terminal writes it, for a reader that may go away (``gpuaccept ... | head -1``):
    the first write or flush that meets a closed pipe points file descriptor 1 at /dev/null (so nothing left,
    the interpreter's last flush included, fails on it) and everything after is dropped, quietly, as a Unix
    tool's output ends there. The run itself goes on to its report files; :attr:`broken` says the output was
    cut. Every other attribute is the stream's."""

    def __init__(self, stream):
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.broken = True
        try:
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, self._stream.fileno())
            os.close(fd)
        except (OSError, ValueError, AttributeError):
            pass

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
