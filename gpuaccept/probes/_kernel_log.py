"""The kernel log of the node, read over a window: shared by the xid_events and host_kernel_log probes.

Sources, in order, first readable one wins (:func:`read_first`):

1. ``journalctl -k -o short-iso --no-pager [--since=@EPOCH]`` (the kernel messages of the current boot);
2. ``dmesg --time-format iso`` (the kernel ring buffer), filtered by time by the caller;
3. ``/var/log/kern.log``, then ``/var/log/messages`` (last 64 MiB), filtered by time by the caller.

``sources`` (a list of file paths) replaces that chain: saved logs, and the tests, which write a real file.
A source is "readable" when the command runs and exits 0 without saying it could not open the journal
(journalctl prints "No journal files were found" with rc 0 in containers). A readable source whose lines
hold nothing in the window is passed over for the next one; if no later one is readable its empty answer
stands, with a ``note``. No readable source at all raises ProbeFailed ``cannot read the kernel log:
journalctl: ...; dmesg: ...``: an unreadable log is never read as "nothing happened".

Timestamps (:func:`parse_timestamp`): the forms journalctl, dmesg and syslog write. Standard library only;
kept here so that both probes read the log one way.
"""
from __future__ import annotations

import calendar
import os
import re
import subprocess
import time
from typing import Callable

try:
    from _probe import ProbeFailed, log
except ImportError:  # imported as gpuaccept.probes._kernel_log (the controller's pure tests)
    from ._probe import ProbeFailed, log

FILE_TAIL_BYTES = 64 << 20
COMMAND_TIMEOUT_S = 30

_PRIORITY_RE = re.compile(r"^<\d{1,3}>")  # /dev/kmsg and syslog-forwarded lines: "<12>[38889.018130] ..."
_CTIME_RE = re.compile(r"^\[(?:[A-Z][a-z]{2}) (?P<mon>[A-Z][a-z]{2}) {1,2}(?P<d>\d{1,2}) (?P<h>\d{2}):(?P<mi>\d{2}):"
                       r"(?P<s>\d{2}) (?P<y>\d{4})\]\s*")  # dmesg -T / --ctime: "[Fri Aug 30 11:43:09 2024] "
# plain dmesg "[ 1843.308145] " (seconds since boot), dmesg -d/-H "[  +0.000844] " (since the previous line),
# with the printk caller id "[  T291] " after it on kernels built with CONFIG_PRINTK_CALLER
_MONOTONIC_RE = re.compile(r"^\[\s*\+?\d+\.\d+\](?:\[\s*[TC]\d+\])?\s*")
_ISO_RE = re.compile(
    r"^(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[T ](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:[.,](?P<frac>\d+))?(?P<tz>Z|[+-]\d{2}:?\d{2})?\s*"
)
_SYSLOG_RE = re.compile(r"^(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<d>\d{1,2}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})\s+")
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}


def parse_timestamp(line: str, now: float | None = None) -> tuple[float | None, str | None, str]:
    """Split the leading timestamp off a log line: returns (epoch or None, timestamp text or None, rest).

    Understands ISO 8601 (journalctl short-iso ``2026-11-29T20:17:21+0000``, dmesg --time-format iso
    ``2026-11-29T20:56:16,289025+00:00``, rsyslog RFC 3339 ``2026-11-29T20:17:21.123456+00:00``; no zone =
    local time), traditional syslog ``Nov 29 20:17:21`` (local time, year guessed: the latest one not
    more than a day in the future of ``now``), ``dmesg -T`` ``[Fri Aug 30 11:43:09 2024]`` (local time) and
    plain dmesg ``[ 1843.308145]`` (seconds since boot: no epoch, the text is kept so that an event still
    says when it happened). A kmsg priority ``<12>`` before any of them is skipped.
    """
    pri = _PRIORITY_RE.match(line)
    if pri:
        line = line[pri.end():]
    m = _CTIME_RE.match(line)
    if m:
        fields = (int(m.group("y")), _MONTHS.get(m.group("mon"), 1), int(m.group("d")), int(m.group("h")),
                  int(m.group("mi")), int(m.group("s")))
        try:
            epoch = time.mktime(fields + (0, 0, -1))
        except (ValueError, OverflowError):
            epoch = None
        return epoch, m.group(0).strip(), line[m.end():]
    m = _MONOTONIC_RE.match(line)
    if m:
        return None, m.group(0).strip(), line[m.end():]
    m = _ISO_RE.match(line)
    if m:
        frac = float("0." + m.group("frac")) if m.group("frac") else 0.0
        fields = (int(m.group("y")), int(m.group("mo")), int(m.group("d")), int(m.group("h")), int(m.group("mi")), int(m.group("s")))
        tz = m.group("tz")
        try:
            if tz is None:
                epoch = time.mktime(fields + (0, 0, -1)) + frac
            else:
                epoch = calendar.timegm(fields + (0, 0, 0)) + frac
                if tz != "Z":
                    sign = -1 if tz[0] == "-" else 1
                    digits = tz[1:].replace(":", "")
                    epoch -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
        except (ValueError, OverflowError):
            epoch = None
        return epoch, m.group(0).strip(), line[m.end():]
    m = _SYSLOG_RE.match(line)
    if m:
        now = time.time() if now is None else now
        year = time.localtime(now).tm_year
        fields = (_MONTHS.get(m.group("mon"), 1), int(m.group("d")), int(m.group("h")), int(m.group("mi")), int(m.group("s")))
        try:
            epoch = time.mktime((year,) + fields + (0, 0, -1))
            if epoch > now + 86400:
                epoch = time.mktime((year - 1,) + fields + (0, 0, -1))
        except (ValueError, OverflowError):
            epoch = None
        return epoch, m.group(0).strip(), line[m.end():]
    return None, None, line


def lines_in_window(lines, since_epoch: float | None = None, now: float | None = None):
    """The kernel log ``lines`` (str each, timestamp first as journalctl/dmesg/syslog write it) that count:
    yields ``(line, epoch, ts_text, rest)`` (:func:`parse_timestamp`) for each, its end of line removed. Skipped:
    blank lines, journalctl's own ("-- No entries --", "-- Boot ... --") and lines stamped before
    ``since_epoch``; a line without a parsable timestamp (plain dmesg seconds since boot) is kept."""
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line.strip() or line.startswith("-- "):
            continue
        epoch, ts_text, rest = parse_timestamp(line, now)
        if since_epoch is not None and epoch is not None and epoch < since_epoch:
            continue
        yield line, epoch, ts_text, rest


def iso_utc(epoch: float) -> str:
    """Epoch seconds -> ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    t = time.gmtime(epoch)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + (".%06dZ" % int(round((epoch % 1) * 1e6) % 1000000))




def _run(cmd: list) -> tuple[int, str, str]:
    env = dict(os.environ, LC_ALL="C", LANG="C", SYSTEMD_PAGER="", PAGER="cat")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                       env=env, timeout=COMMAND_TIMEOUT_S)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


_JOURNAL_UNUSABLE = ("no journal files were found", "no journal files were opened",
                     "insufficient permissions", "not seeing messages from other users and the system")


def read_journalctl(since_epoch: float | None) -> list:
    """Kernel lines from journalctl (raises OSError/RuntimeError with the reason when unusable)."""
    cmd = ["journalctl", "-k", "-o", "short-iso", "--no-pager"]
    if since_epoch is not None:
        cmd.append("--since=@%d" % int(since_epoch))  # whole seconds: works with every systemd
    rc, out, err = _run(cmd)
    low = err.lower()
    if rc != 0:
        raise RuntimeError(f"rc {rc}: {err.strip().splitlines()[0] if err.strip() else 'no message'}")
    for marker in _JOURNAL_UNUSABLE:
        if marker in low:
            raise RuntimeError(err.strip().splitlines()[0])
    return out.splitlines()


def read_dmesg() -> list:
    """Kernel ring buffer with ISO timestamps (raises with the reason when unusable)."""
    rc, out, err = _run(["dmesg", "--time-format", "iso"])
    if rc != 0:
        raise RuntimeError(f"rc {rc}: {err.strip().splitlines()[0] if err.strip() else 'no message'}")
    return out.splitlines()


def read_file(path: str) -> list:
    """The last FILE_TAIL_BYTES of a log file, as lines (raises OSError when unreadable)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        start = max(0, size - FILE_TAIL_BYTES)
        f.seek(start)
        data = f.read()
    lines = data.decode("utf-8", "replace").splitlines()
    if start > 0 and lines:
        lines = lines[1:]  # first line is cut
    return lines


def _short(e: BaseException) -> str:
    if isinstance(e, FileNotFoundError):
        return "not found"
    if isinstance(e, PermissionError):
        return f"permission denied ({e.strerror})"
    if isinstance(e, subprocess.TimeoutExpired):
        return f"timed out after {COMMAND_TIMEOUT_S}s"
    return f"{e}".strip() or type(e).__name__


def default_sources(since_epoch: float | None) -> list[tuple[str, Callable[[], list]]]:
    """The chain of the module docstring: ``[(name, reader)]``, each reader returning the log's lines."""
    return [
        ("journalctl", lambda: read_journalctl(since_epoch)),
        ("dmesg", read_dmesg),
        ("/var/log/kern.log", lambda: read_file("/var/log/kern.log")),
        ("/var/log/messages", lambda: read_file("/var/log/messages")),
    ]


def file_sources(paths) -> list[tuple[str, Callable[[], list]]]:
    """``[(path, reader)]`` of log files given as the probe's ``sources`` argument; raises ProbeFailed when
    ``paths`` is not a non-empty list of text."""
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise ProbeFailed(f"sources must be a non-empty list of file paths, got {paths!r}")
    return [(p, (lambda p=p: read_file(p))) for p in paths]


def read_first(since_epoch: float | None, paths, parse: Callable[[list], dict]) -> dict:
    """The document of the first readable source whose lines hold something in the window.

    ``paths``: None (the default chain) or a list of files (:func:`file_sources`); ``parse(lines)`` returns a
    dict with ``lines_scanned`` (lines in the window) and whatever else the caller finds in them. Returns that
    dict plus ``source``, ``since_epoch`` and ``attempts`` (``[{"source", "ok", "error"|"lines"}]``), and a
    ``note`` when every readable source was empty in the window. Raises ProbeFailed when none is readable."""
    sources = file_sources(paths) if paths is not None else default_sources(since_epoch)
    attempts: list[dict] = []
    empty = None
    for name, read in sources:
        try:
            lines = read()
        except Exception as e:  # noqa: BLE001 - every reason a source is unreadable is said, then the next
            attempts.append({"source": name, "ok": False, "error": _short(e)})
            log(f"{name}: {_short(e)}")
            continue
        parsed = parse(lines)
        attempts.append({"source": name, "ok": True, "lines": parsed["lines_scanned"]})
        doc = {"source": name, "since_epoch": since_epoch, **parsed, "attempts": attempts}
        if parsed["lines_scanned"] == 0:
            empty = empty or doc
            continue
        return doc
    if empty is not None:
        empty["note"] = f"{empty['source']} was readable but had no kernel line in the window, nor had any other readable source"
        return empty
    raise ProbeFailed("cannot read the kernel log: " + "; ".join(f"{a['source']}: {a['error']}" for a in attempts),
                      setup="kernel_log_unreadable")
