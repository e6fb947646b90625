#!/usr/bin/env python3
"""Host states in the kernel log over a window: hung tasks (with the call trace they wait in), lockups, RCU stalls, a
wedged NIC, NVMe resets, filesystem errors, NVLink training failures, machine checks, EDAC, OOM kills, network
filesystem servers that stopped answering (read-only).

Run on the node as ``python3 host_kernel_log.py '<json>'``. Args::

    {"patterns": [{"id": str, "regex": str,          # required: the catalogue (gpuaccept/data/host_kernel_catalog.yaml),
                   "trace": [{"fs", "where",         # sent by the controller; the group "dev" names the device;
                              "generic": bool,       # (optional) a layer read as the network driver under it
                              "prefixes": [str],     # "trace" (optional): keep the call trace printed after the line
                              "modules": [str]}],    # and classify its frames with this table (stack_frames)
                   "device": bool}],                 # optional: "dev" names a block device whose filesystem or
                                                     # drive failed (fs_error rows): say what that device is
     "block_kinds": [{"kind", "buses", "majors",     # optional: the network block kinds (catalogue fs_devices),
                      "nvme_transports",             # _blockdev.py
                      "iscsi_session"}],
     "sysfs": str,                                   # optional: the sysfs root (default /sys; tests, containers)
     "since_epoch": float,                           # optional: only lines from then on
     "sources": [str, ...]}                          # optional: log files read instead of journalctl/dmesg/kern.log

The log is read as the Xid probe reads it (``_kernel_log.read_first``: journalctl -k, dmesg, /var/log/kern.log,
/var/log/messages, first readable one with lines in the window; none readable: the probe fails, never "clean").
Each line in the window is matched against every pattern (``re.search`` on the text after its timestamp).

After a line of a pattern with a ``trace`` table (the hung-task line: kernel/hung_task.c prints the task's stack with
sched_show_task() right after it), the lines that follow are read as its call trace while they look like one
(:func:`trace_line`: a frame ``fn+0x1a/0x60 [mod]``, the headers ``Tainted:``, ``task:``, ``Call Trace:``, ``<TASK>``,
registers), at most :data:`TRACE_LINES` lines; a line of another pattern ends it. Each frame is classified by the
table (:func:`classify_frame`: its module, else the longest listed prefix of its function); the innermost classified
frame (the first printed; reliable frames before ``? `` guesses) is what the task waits on, except that a frame of a
``generic`` kind (the block layer, dm-multipath) reads as the innermost frame of a network kind in the same trace
when it has one (``blk_mq_get_tag`` under ``rbd_queue_workfn [rbd]`` waits on rbd).

The device of each kept match of a ``device`` pattern (an ext4 error, an XFS shutdown, a read-only remount, an NVMe
reset) is looked up in sysfs (``_blockdev.describe``: a local drive, network block storage of a ``block_kinds`` kind,
a loop device with its backing file, device-mapper or md with its members, a virtual device, or absent), at most
:data:`DEVICES` devices: the judge decides the cause from that fact (gpuaccept/judging/fsdevice.py), not from the line.

Output::

    {"source", "since_epoch", "lines_scanned", "attempts",      # as _kernel_log.read_first
     "matches": [{"id", "time": ISO-8601 UTC | raw timestamp | None, "epoch": float | None,
                  "device": str | None,                         # the "dev" group, else the line's first PCI address
                  "groups": {name: text},                       # the pattern's other named groups
                  "line": str,                                  # the raw line (at most 500 characters)
                  "trace": {"lines": int,                       # trace patterns only: lines read as its trace
                            "truncated": bool,                  # stopped at trace_lines, not at its end
                            "frames_seen": int,
                            "frames": [{"fn", "module", "kind", "guess"}],  # the first trace_frames frames
                            "kinds": [str],                     # the table's kinds its frames name
                            "waits_on": {"kind", "where", "fn"} | None}}],
     "counts": {id: int},                                       # lines matched per id (all, not only the kept ones)
     "totals": {id: int},                                       # sum of the "count" group (EDAC "3 CE"), else lines
     "waits_on": {id: {kind | "unclassified" | "no_trace": int}},  # trace patterns: every match by what it waits on
     "kept_per_id": int,                                        # matches kept per id (per id and waits_on kind for a
                                                                # trace pattern): the first and the last ones
     "trace_lines": int, "trace_frames": int,                   # the bounds above
     "devices": {name: fact},                                   # with a device pattern: _blockdev.describe's facts
     "sysfs": str}                                              # the sysfs root they were read under

Standard library only.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from _blockdev import check_kinds, describe
from _kernel_log import iso_utc, lines_in_window, read_first
from _probe import ProbeFailed, reject_unknown, run

ARG_KEYS = {"patterns", "since_epoch", "sources", "sysfs", "block_kinds"}
DEVICES = 32  # devices described at most: the distinct devices of the kept matches (a storm names few devices)
KEPT_PER_ID = 20  # matches kept per pattern (10 first, 10 last): a storm of one line must not fill the document
LINE_CHARS = 500
TRACE_LINES = 40  # lines read as one call trace at most (a hung task's stack: ~5 headers and 15-35 frames)
TRACE_FRAMES = 24  # frames kept per trace (function, module, kind): enough to reach the filesystem's entry points
FN_CHARS = 80
_PCI_RE = re.compile(r"(?<![0-9a-fA-F:])([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])(?![0-9a-fA-F])")
# what comes before the kernel's text: journalctl/syslog "HOST kernel: ", syslog's kernel "[12345.678901] "
_PREFIX_RE = re.compile(r"^(?:\S+ kernel: )?(?:\[\s*\d+\.\d+\])?\s*")
# a frame as show_trace_log_lvl()/printk("%pS") writes it: "[<ffffffffa03d1e0e>] " (before 4.x), "? " (a guess found
# on the stack, not proven by the unwinder), "fn+0xoff/0xsize", " [module]"
_FRAME_RE = re.compile(r"^(?:\[<[0-9a-fA-F]+>\]\s*)?(?P<guess>\? )?(?P<fn>[A-Za-z_.$][\w.$]*)\+0x[0-9a-fA-F]+/0x[0-9a-fA-F]+"
                       r"(?:\s+\[(?P<mod>[\w-]+)\])?")
# the other lines of a hung-task report (kernel/hung_task.c, kernel/sched/core.c sched_show_task, arch/x86/kernel/
# dumpstack.c): taint, the hint, the task line (5.13+ "task:NAME state:D ...", older "NAME D ... PID PPID 0xFLAGS"),
# the workqueue, "Call Trace:", <TASK>/<IRQ> markers, an address alone (a wrapped old frame), user registers, stack words
_TRACE_HEAD_RE = re.compile(
    r"^(?:Not tainted|Tainted:|\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\"|task:\S|Workqueue: |Call [Tt]race:"
    r"|</?(?:TASK|IRQ|NMI|EOI|SOFTIRQ)>|\[<[0-9a-fA-F]+>\]\s*$|\S+\s+D(?:\s+[0-9a-fx]+)+$"
    r"|(?:R[A-Z0-9]{2}|R\d{1,2}|[CDEFGS]S|CR\d|DR\d|PKRU|ORIG_RAX|Code): |[0-9a-f]{8,16}(?:\s+[0-9a-f]{8,16})*\s*$)")


class FrameTable(NamedTuple):
    """A compiled ``trace`` table: ``modules`` {module: (kind, where)}; ``prefixes`` [(prefix, kind, where)], the
    longest first; ``generic``: the kinds that read as a network driver's frame of the same trace (the block layer)."""

    modules: dict
    prefixes: list
    generic: frozenset = frozenset()


class Pattern(NamedTuple):
    """One compiled pattern: ``id``, ``rx`` (the regex), ``trace`` (a :class:`FrameTable`, or None: no trace kept),
    ``device`` (its "dev" is a block device to describe)."""

    id: str
    rx: re.Pattern
    trace: FrameTable | None
    device: bool = False


def _frame_table(pid: str, rows) -> FrameTable:
    if not isinstance(rows, list):
        raise ProbeFailed(f"pattern {pid}: trace must be a list of {{fs, where, prefixes, modules}}, got {rows!r:.200}")
    modules, prefixes, generic = {}, [], set()
    for r in rows:
        ok = isinstance(r, dict) and isinstance(r.get("fs"), str) and isinstance(r.get("where"), str) and all(
            isinstance(r.get(k, []), list) and all(isinstance(x, str) and x for x in r.get(k, []))
            for k in ("prefixes", "modules"))
        if not ok:
            raise ProbeFailed(f"pattern {pid}: trace row {r!r:.200}: expected {{\"fs\", \"where\": text, "
                              f"\"prefixes\", \"modules\": [text]}}")
        if r.get("generic") not in (None, True, False):
            raise ProbeFailed(f"pattern {pid}: trace row {r['fs']}: generic must be true or false")
        if r.get("generic"):
            generic.add(r["fs"])
        for m in r.get("modules", []):
            modules[m] = (r["fs"], r["where"])
        prefixes += [(x, r["fs"], r["where"]) for x in r.get("prefixes", [])]
    prefixes.sort(key=lambda t: -len(t[0]))
    return FrameTable(modules, prefixes, frozenset(generic))


def compile_patterns(patterns) -> list[Pattern]:
    """:class:`Pattern` of each entry of the ``patterns`` argument (module docstring); raises ProbeFailed naming a
    malformed entry (no id or regex, a regex that does not compile, a malformed ``trace`` table)."""
    if not isinstance(patterns, list) or not patterns:
        raise ProbeFailed(f"patterns must be a non-empty list of {{id, regex}}, got {patterns!r:.200}")
    out = []
    for p in patterns:
        if not isinstance(p, dict) or not isinstance(p.get("id"), str) or not isinstance(p.get("regex"), str):
            raise ProbeFailed(f"pattern {p!r:.200}: expected {{\"id\": text, \"regex\": text}}")
        try:
            rx = re.compile(p["regex"])
        except re.error as e:
            raise ProbeFailed(f"pattern {p['id']}: not a regular expression: {e}") from None
        if p.get("device") not in (None, True, False):
            raise ProbeFailed(f"pattern {p['id']}: device must be true or false")
        out.append(Pattern(p["id"], rx, _frame_table(p["id"], p["trace"]) if "trace" in p else None,
                           bool(p.get("device"))))
    return out


def classify_frame(fn: str, module: str | None, table: FrameTable) -> tuple[str, str] | None:
    """``(kind, where)`` of one frame by ``table``: its module when the table names it, else the longest prefix of
    ``fn`` (a CFI ``__pfx_`` removed) the table lists; None when neither."""
    if module and module in table.modules:
        return table.modules[module]
    name = fn[6:] if fn.startswith("__pfx_") else fn
    for prefix, kind, where in table.prefixes:
        if name.startswith(prefix):
            return kind, where
    return None


def trace_line(rest: str) -> tuple[bool, dict | None]:
    """Is ``rest`` (a line's text after its timestamp) part of a call trace, and its frame if it is one:
    ``(True, {"fn", "module", "guess"})`` for a frame, ``(True, None)`` for a header, register or marker line,
    ``(False, None)`` for anything else (the trace has ended)."""
    body = _PREFIX_RE.sub("", rest, count=1)
    m = _FRAME_RE.match(body)
    if m:
        return True, {"fn": m.group("fn")[:FN_CHARS], "module": m.group("mod"), "guess": bool(m.group("guess"))}
    return bool(_TRACE_HEAD_RE.match(body)), None


class _Trace:
    """The call trace being read after one match (bounded: TRACE_LINES lines, TRACE_FRAMES frames kept)."""

    def __init__(self, entry: dict, pid: str, table: FrameTable):
        self.entry, self.pid, self.table = entry, pid, table
        self.lines = self.seen = 0
        self.frames: list[dict] = []
        self.kinds: dict[str, None] = {}
        self.sure: dict | None = None  # the innermost classified reliable frame
        self.guessed: dict | None = None  # the innermost classified "? " frame
        self.net: dict | None = None  # the innermost reliable frame of a network kind (else a guessed one)
        self.net_guessed: dict | None = None

    def take(self, frame: dict | None) -> None:
        """One more line of the trace: a frame (:func:`trace_line`), or None for a header, register or marker line."""
        self.lines += 1
        if frame is not None:
            self.seen += 1
            got = classify_frame(frame["fn"], frame["module"], self.table)
            frame["kind"] = got[0] if got else None
            if got:
                self.kinds.setdefault(got[0], None)
                hit = {"kind": got[0], "where": got[1], "fn": frame["fn"]}
                if frame["guess"]:
                    self.guessed = self.guessed or hit
                else:
                    self.sure = self.sure or hit
                if got[1] == "network" and got[0] not in self.table.generic:
                    if frame["guess"]:
                        self.net_guessed = self.net_guessed or hit
                    else:
                        self.net = self.net or hit
            if len(self.frames) < TRACE_FRAMES:
                self.frames.append(frame)

    @property
    def full(self) -> bool:
        return self.lines >= TRACE_LINES

    def done(self) -> tuple[str, dict]:
        """(the bucket it is kept and counted under: its waits_on kind, "unclassified" or "no_trace", its entry)."""
        waits = self.sure or self.guessed
        if waits and waits["kind"] in self.table.generic and (self.net or self.net_guessed):
            waits = self.net or self.net_guessed  # the block layer under a network block driver: the driver's
        self.entry["trace"] = {"lines": self.lines, "truncated": self.full, "frames_seen": self.seen,
                               "frames": self.frames, "kinds": list(self.kinds), "waits_on": waits}
        bucket = waits["kind"] if waits else ("unclassified" if self.seen else "no_trace")
        return bucket, self.entry


def _keep(kept: list, entry: dict) -> None:
    if len(kept) < KEPT_PER_ID:
        kept.append(entry)
    else:  # keep the first half and the latest ones
        del kept[KEPT_PER_ID // 2]
        kept.append(entry)


def match_lines(lines, compiled, since_epoch: float | None = None, now: float | None = None) -> dict:
    """Match log ``lines`` (str, timestamp first) against ``compiled`` (:func:`compile_patterns`).

    Lines with a timestamp before ``since_epoch`` are skipped (lines without a parsable timestamp, plain dmesg
    seconds since boot, are kept). Returns ``{"lines_scanned", "matches", "counts", "totals", "waits_on",
    "kept_per_id", "trace_lines", "trace_frames"}`` (module docstring); one line may match several patterns. Memory
    is bounded whatever the log's length: KEPT_PER_ID matches per id (per id and waits_on kind for a trace pattern),
    one trace read at a time. Pure."""
    scanned = 0
    found: dict[tuple[str, str | None], list] = {}
    counts: dict[str, int] = {}
    totals: dict[str, int] = {}
    waits: dict[str, dict[str, int]] = {}
    pending: _Trace | None = None

    def finish(t: _Trace) -> None:
        bucket, entry = t.done()
        tally = waits.setdefault(t.pid, {})
        tally[bucket] = tally.get(bucket, 0) + 1
        _keep(found.setdefault((t.pid, bucket), []), entry)

    for line, epoch, ts_text, rest in lines_in_window(lines, since_epoch, now):
        scanned += 1
        part = frame = None
        if pending is not None:
            part, frame = trace_line(rest)
            if frame is not None:  # a frame is no catalogue line: read as the trace's, not matched
                pending.take(frame)
                if pending.full:
                    finish(pending)
                    pending = None
                continue
        hits = [(p, m) for p in compiled for m in (p.rx.search(rest),) if m]
        if pending is not None:
            if part and not hits:
                pending.take(None)
            if hits or not part or pending.full:  # another catalogue line, or a line that is no trace's, ends it
                finish(pending)
                pending = None
        for p, m in hits:
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            dev = groups.pop("dev", None)
            if dev is None:
                pci = _PCI_RE.search(rest)
                dev = pci.group(1) if pci else None
            counts[p.id] = counts.get(p.id, 0) + 1
            n = groups.get("count")
            totals[p.id] = totals.get(p.id, 0) + (int(n) if n and n.isdigit() else 1)
            entry = {"id": p.id, "time": iso_utc(epoch) if epoch is not None else ts_text, "epoch": epoch,
                     "device": dev, "groups": groups, "line": line[:LINE_CHARS]}
            if p.trace is not None and pending is None:
                pending = _Trace(entry, p.id, p.trace)  # kept when its trace has been read
            elif p.trace is not None:  # a second trace pattern on the same line: one trace is read at a time
                finish(_Trace(entry, p.id, p.trace))
            else:
                _keep(found.setdefault((p.id, None), []), entry)
    if pending is not None:
        finish(pending)
    matches = [m for p in compiled for key, kept in found.items() if key[0] == p.id for m in kept]
    return {"lines_scanned": scanned, "matches": matches, "counts": counts, "totals": totals, "waits_on": waits,
            "kept_per_id": KEPT_PER_ID, "trace_lines": TRACE_LINES, "trace_frames": TRACE_FRAMES}


def main(args: dict) -> dict:
    """Probe entry point: the document described in the module docstring."""
    reject_unknown(args, ARG_KEYS)
    compiled = compile_patterns(args.get("patterns"))
    kinds = check_kinds(args.get("block_kinds", []))
    sysfs = args.get("sysfs") or "/sys"
    if not isinstance(sysfs, str):
        raise ProbeFailed(f"sysfs must be a path, got {sysfs!r:.200}")
    since = args.get("since_epoch")
    since = float(since) if since is not None else None
    doc = read_first(since, args.get("sources"), lambda lines: match_lines(lines, compiled, since))
    if any(p.device for p in compiled):
        doc.update(devices=describe_devices(doc["matches"], compiled, sysfs, kinds), sysfs=sysfs)
    return doc


def describe_devices(matches: list[dict], compiled: list[Pattern], sysfs: str, kinds: list[dict]) -> dict:
    """``{device: fact}`` (``_blockdev.describe`` under ``sysfs``) of the devices the kept ``matches`` of ``device``
    patterns name, the first :data:`DEVICES` of them."""
    ids = {p.id for p in compiled if p.device}
    names = list(dict.fromkeys(m["device"] for m in matches if m["id"] in ids and m.get("device")))[:DEVICES]
    out = {}
    for n in names:
        try:
            out[n] = describe(sysfs, n, kinds)
        except OSError as e:  # a tree that changed under the walk: said, never a failed probe
            out[n] = {"name": n, "what": "absent", "kind": None, "via": f"sysfs unreadable: {e}"[:200],
                      "disk": None, "dev": None, "path": None}
    return out


if __name__ == "__main__":
    run(main)
