"""The node's clock against the controller's, for the kernel-log window ``xid_events`` reads on the node.

``test_xid_events`` asks for the Xid/SXid events "since the run began" (and the burn-in for those since it
started). The run's start is taken on the controller's clock, but the node's probe compares it with time
stamps its own kernel log wrote on the node's clock (``journalctl --since=@EPOCH``, ISO/syslog/``dmesg -T``
lines). A node whose clock is behind (no NTP on a new rack, a dead RTC battery) by more than the run's age
then reads an empty window: every Xid of the run is "before the run", and a GPU that fell off the bus passes.
A node whose clock is ahead reads Xids from before the run as the run's.

So the node's clock is read first (one ``date`` over the host's connection, timed on the controller:
offset = node time - midpoint of the round trip, uncertain by half the round trip), and:

* the probe is asked for the events since ``since - SHARED_SLACK_S`` when the node's clock is within
  :data:`SHARED_SLACK_S` of the controller's (the same arguments on every such host, so the fan-out still runs
  the probe ahead on the other hosts, gpuaccept.runner.prefetch), else since the run's start on *that node's* clock;
* the events are then cut on the controller at the run's start on the node's clock (:func:`in_window`),
  taken early by the uncertainty: an event of the run is never cut, one of the last seconds before it may stay.

The offset is recorded as ``node_clock_offset_s`` (not judged: no SKU file sets a limit for it).
Pure functions but :func:`read_clock` (which runs one command on the node).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

#: the node's wall clock, seconds since the epoch with nanoseconds (GNU coreutils); busybox ``date`` prints a
#: literal ``%N`` or nothing after the dot: read as whole seconds (0.5 s more uncertainty)
CLOCK_COMMAND = "date +%s.%N"
#: seconds the shared window starts before the run (every host within this of the controller's clock asks the
#: same; chosen: ten minutes covers the skew of an NTP-less node over weeks, at a few more log lines read)
SHARED_SLACK_S = 600.0
_EPOCH_RE = re.compile(r"^\s*(\d{9,12})(?:\.(\S*))?\s*$")


@dataclass(frozen=True)
class NodeClock:
    """``offset_s``: node clock minus controller clock, seconds (positive: the node is ahead);
    ``uncertainty_s``: how far the true offset may be from it, seconds (half the round trip, plus 0.5 s when
    the node gave whole seconds)."""

    offset_s: float
    uncertainty_s: float


def parse_node_time(stdout: bytes | str) -> tuple[float, float] | None:
    """``(epoch seconds, resolution seconds)`` from :data:`CLOCK_COMMAND`'s output (its last line that reads as
    an epoch: a login banner before it is skipped), else None."""
    text = stdout.decode(errors="replace") if isinstance(stdout, bytes) else stdout
    for line in reversed(text.splitlines()):
        m = _EPOCH_RE.match(line)
        if m:
            frac = m.group(2) if m.group(2) and m.group(2).isdigit() else None  # "%N" of a date without it
            return float(m.group(1) + "." + frac) if frac else float(m.group(1)), (0.0 if frac else 1.0)
    return None


def clock_from(before: float, after: float, node_epoch: float, resolution: float = 0.0) -> NodeClock:
    """The :class:`NodeClock` of a reading ``node_epoch`` (resolution ``resolution`` s) taken between the
    controller's ``before`` and ``after`` (epoch seconds)."""
    return NodeClock(node_epoch - (before + after) / 2, max(0.0, after - before) / 2 + resolution / 2)


def read_clock(node: Any) -> NodeClock | None:
    """The node's clock against this controller's, or None for a replayed host (it runs nothing: its saved
    documents keep the window they were read with) or when the node's ``date`` printed no epoch.
    Raises what ``node.run`` raises (an unreachable host is the test's error, as its probe's would be)."""
    if getattr(node, "replay_dir", None):
        return None
    before = time.time()
    res = node.run(CLOCK_COMMAND, timeout=60)
    after = time.time()
    got = parse_node_time(res.stdout) if res.rc == 0 else None
    return clock_from(before, after, *got) if got else None


def on_node(since: float, clock: NodeClock | None) -> float:
    """``since`` (controller epoch seconds) on the node's clock, taken early by the reading's uncertainty."""
    return since if clock is None else since + clock.offset_s - clock.uncertainty_s


def xid_args(since: float, clock: NodeClock | None) -> tuple[dict, float | None]:
    """``(xid_events arguments, cut)`` for the events since ``since`` (controller epoch seconds): the shared
    window ``since - SHARED_SLACK_S`` when the node's clock is within :data:`SHARED_SLACK_S`, else the node's
    own; ``cut`` (node epoch seconds) for :func:`in_window`, None without a clock (replay: no cut)."""
    if clock is None:
        return {"since_epoch": since}, None
    cut = on_node(since, clock)
    if abs(cut - since) <= SHARED_SLACK_S:
        return {"since_epoch": since - SHARED_SLACK_S}, cut
    return {"since_epoch": cut}, cut


def in_window(events: list[dict], cut: float | None) -> list[dict]:
    """The events at or after ``cut`` (node epoch seconds; None: all); an event without an epoch (a plain
    dmesg time since boot) is kept, as the probe keeps it."""
    if cut is None:
        return list(events)
    return [e for e in events if not isinstance(e.get("epoch"), (int, float)) or e["epoch"] >= cut]
