"""Live progress from a running probe: the controller's side of the probe's progress lines.

A probe (``gpuaccept/probes/_probe.py``, :func:`progress` there) may write lines of this form to its stderr
while it runs::

    GPUACCEPT-PROGRESS {"done": 720.0, "total": 3600.0, "gpus": {"0": {"bf16_tflops": 612.3, "temp_c": 65}}}

Both transports (gpuaccept.transport.local, .ssh) feed the command's stderr, as it arrives, to a
:class:`ProgressLines`, which hands the last well-formed progress line of each chunk, as a checked dict, to a
callback (gpuaccept.runner.host.HostRunner.probe passes it to the ``PROBE_PROGRESS`` hooks; the progress display
shows it with :func:`render`). The stderr returned at the end is unchanged (progress lines included).

What a line must be (anything else is ignored, never an error: a progress line is a display, not a result):
the prefix at the start of a line, one JSON object, at most :data:`MAX_LINE` bytes. Of its keys
(:func:`parse`): ``done`` and ``total``, seconds, finite and >= 0; ``gpus``, at most :data:`MAX_GPUS` entries
of at most :data:`MAX_FIELDS` figures each, names ``[a-z0-9_]`` up to 40 characters, finite numbers; ``text``,
cut to :data:`MAX_TEXT` characters with control characters removed (a node never writes escape sequences to the
operator's terminal). A line longer than MAX_LINE, or a stderr flood without newlines, costs a bounded buffer.
"""
from __future__ import annotations

import json
import logging
import math
import re
from typing import Callable

from gpuaccept.probes._probe import PROGRESS_PREFIX

log = logging.getLogger(__name__)

PREFIX = PROGRESS_PREFIX.encode()
#: longest progress line read, bytes (a line of 64 GPUs x 4 figures is about 6 KiB)
MAX_LINE = 16 * 1024
MAX_GPUS = 64
MAX_FIELDS = 8
MAX_TEXT = 80
_NAME = re.compile(r"^[a-z0-9_]{1,40}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# unit suffix of a figure name -> (unit shown, how GPUs are summarized): "range" for throughput (higher is
# better: the slowest and the fastest GPU), "max" for readings with a ceiling (the hottest GPU)
UNITS = (("_tflops", "TFLOP/s", "range"), ("_gbps", "GB/s", "range"), ("_temp_c", "°C", "max"),
         ("_c", "°C", "max"), ("_w", "W", "max"), ("_mhz", "MHz", "range"))


def _finite(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def parse(line: bytes) -> dict | None:
    """The checked progress document of one stderr line (without its newline), or None when the line is not a
    well-formed progress line. Returns ``{"done"?, "total"?, "gpus"?: {gpu: {name: float}}, "text"?}``."""
    if not line.startswith(PREFIX) or len(line) > MAX_LINE:
        return None
    try:
        doc = json.loads(line[len(PREFIX):].decode("utf-8", errors="strict"))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict):
        return None
    out: dict = {}
    for key in ("done", "total"):
        v = _finite(doc.get(key))
        if v is not None and v >= 0:
            out[key] = v
    gpus = doc.get("gpus")
    if isinstance(gpus, dict):
        good = {}
        for g, figs in list(gpus.items())[:MAX_GPUS]:
            if not isinstance(figs, dict):
                continue
            vals = {k: _finite(v) for k, v in list(figs.items())[:MAX_FIELDS] if isinstance(k, str) and _NAME.match(k)}
            vals = {k: v for k, v in vals.items() if v is not None}
            if vals:
                good[_CONTROL.sub("", str(g))[:8]] = vals
        if good:
            out["gpus"] = good
    text = doc.get("text")
    if isinstance(text, str) and text.strip():
        text = text.encode("utf-8", errors="replace").decode("utf-8")  # lone surrogates from JSON escapes
        out["text"] = _CONTROL.sub(" ", text).strip()[:MAX_TEXT]
    return out or None


class ProgressLines:
    """Splits a command's stderr, fed in chunks as they arrive, into lines and calls ``callback(doc)`` with the
    last well-formed progress line of each chunk (:func:`parse`); earlier ones of the same chunk are stale.

    Bounded: a partial line longer than :data:`MAX_LINE` is dropped up to its newline. A callback that raises is
    logged at DEBUG and never stops the command. Not thread-safe: one feeder per command."""

    def __init__(self, callback: Callable[[dict], None]):
        self.callback = callback
        self._tail = b""
        self._skipping = False  # inside an over-long line: drop up to the next newline
        self.delivered = 0

    def feed(self, data: bytes) -> None:
        if not data:
            return
        nl = data.rfind(b"\n")
        if nl < 0:
            if not self._skipping:
                self._tail += data
                if len(self._tail) > MAX_LINE:
                    self._tail, self._skipping = b"", True
            return
        head, rest = data[:nl], data[nl + 1:]
        if self._skipping:
            first = head.find(b"\n")
            head = head[first + 1:] if first >= 0 else b""
            self._skipping = False
            block = head
        else:
            block = self._tail + head
        self._tail = rest if len(rest) <= MAX_LINE else b""
        self._skipping = len(rest) > MAX_LINE
        if PREFIX not in block:
            return
        for line in reversed(block.split(b"\n")):
            if line.startswith(PREFIX):
                doc = parse(line)
                if doc is not None:
                    self._deliver(doc)
                    return

    def _deliver(self, doc: dict) -> None:
        self.delivered += 1
        try:
            self.callback(doc)
        except Exception as e:  # noqa: BLE001 - a display hook never breaks a measurement
            log.debug("progress callback failed: %s: %s", type(e).__name__, e)


def _num(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def render(what: str, doc: dict) -> str:
    """One short line for the progress display: ``burnin 12/60 min, bf16 612-648 TFLOP/s, max 71 °C``.

    ``what``: the probe's name. Time as minutes when ``total`` is 2 minutes or more (tenths below 10), else
    seconds; per figure name over the GPUs: throughput as slowest-fastest, temperatures and power as the
    highest (see UNITS); a figure without a known unit suffix as a range with no unit; then ``text``."""
    parts = [what]
    done, total = doc.get("done"), doc.get("total")
    if done is not None and total:
        parts[0] += (f" {done / 60:.0f}/{total / 60:.0f} min" if total >= 600 else
                     f" {done / 60:.1f}/{total / 60:.1f} min" if total >= 120 else f" {done:.0f}/{total:.0f} s")
    elif done is not None:
        parts[0] += f" {done / 60:.0f} min" if done >= 120 else f" {done:.0f} s"
    names: list[str] = []
    for figs in (doc.get("gpus") or {}).values():
        names += [n for n in figs if n not in names]
    for name in names:
        vals = [figs[name] for figs in doc["gpus"].values() if name in figs]
        unit, how, label = "", "range", name
        for suffix, u, h in UNITS:
            if name.endswith(suffix):
                unit, how, label = u, h, name[: -len(suffix)]
                break
        if label == "temp" or (how == "max" and label == ""):
            label = ""
        if how == "max":
            parts.append(" ".join(p for p in ("max", label, _num(max(vals)), unit) if p))
        else:
            lo, hi = min(vals), max(vals)
            rng = _num(lo) if _num(lo) == _num(hi) else f"{_num(lo)}-{_num(hi)}"
            parts.append(" ".join(p for p in (label, rng, unit) if p))
    if doc.get("text"):
        parts.append(doc["text"])
    return ", ".join(parts)
