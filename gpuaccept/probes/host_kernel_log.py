#!/usr/bin/env python3
"""Host states in the kernel log over a window: hung tasks, lockups, RCU stalls, a wedged NIC, NVMe resets, filesystem
errors, NVLink training failures, machine checks, EDAC, OOM kills (read-only).

Run on the node as ``python3 host_kernel_log.py '<json>'``. Args::

    {"patterns": [{"id": str, "regex": str}, ...],   # required: the catalogue (gpuaccept/data/host_kernel_catalog.yaml),
                                                     # sent by the controller; the group "dev" names the device
     "since_epoch": float,                           # optional: only lines from then on
     "sources": [str, ...]}                          # optional: log files read instead of journalctl/dmesg/kern.log

The log is read as the Xid probe reads it (``_kernel_log.read_first``: journalctl -k, dmesg, /var/log/kern.log,
/var/log/messages, first readable one with lines in the window; none readable: the probe fails, never "clean").
Each line in the window is matched against every pattern (``re.search`` on the text after its timestamp).

Output::

    {"source", "since_epoch", "lines_scanned", "attempts",      # as _kernel_log.read_first
     "matches": [{"id", "time": ISO-8601 UTC | raw timestamp | None, "epoch": float | None,
                  "device": str | None,                         # the "dev" group, else the line's first PCI address
                  "groups": {name: text},                       # the pattern's other named groups
                  "line": str}],                                # the raw line (at most 500 characters)
     "counts": {id: int},                                       # lines matched per id (all, not only the kept ones)
     "totals": {id: int},                                       # sum of the "count" group (EDAC "3 CE"), else lines
     "kept_per_id": int}                                        # matches kept per id: the first and the last ones

Standard library only.
"""
from __future__ import annotations

import re

from _kernel_log import iso_utc, lines_in_window, read_first
from _probe import ProbeFailed, reject_unknown, run

ARG_KEYS = {"patterns", "since_epoch", "sources"}
KEPT_PER_ID = 20  # matches kept per pattern (10 first, 10 last): a storm of one line must not fill the document
LINE_CHARS = 500
_PCI_RE = re.compile(r"(?<![0-9a-fA-F:])([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])(?![0-9a-fA-F])")


def compile_patterns(patterns) -> list[tuple[str, re.Pattern]]:
    """``[(id, compiled regex)]`` of the ``patterns`` argument; raises ProbeFailed naming a malformed entry."""
    if not isinstance(patterns, list) or not patterns:
        raise ProbeFailed(f"patterns must be a non-empty list of {{id, regex}}, got {patterns!r:.200}")
    out = []
    for p in patterns:
        if not isinstance(p, dict) or not isinstance(p.get("id"), str) or not isinstance(p.get("regex"), str):
            raise ProbeFailed(f"pattern {p!r:.200}: expected {{\"id\": text, \"regex\": text}}")
        try:
            out.append((p["id"], re.compile(p["regex"])))
        except re.error as e:
            raise ProbeFailed(f"pattern {p['id']}: not a regular expression: {e}") from None
    return out


def match_lines(lines, compiled, since_epoch: float | None = None, now: float | None = None) -> dict:
    """Match log ``lines`` (str, timestamp first) against ``compiled`` (:func:`compile_patterns`).

    Lines with a timestamp before ``since_epoch`` are skipped (lines without a parsable timestamp, plain dmesg
    seconds since boot, are kept). Returns ``{"lines_scanned", "matches", "counts", "totals", "kept_per_id"}``
    (module docstring); one line may match several patterns. Pure."""
    scanned = 0
    found: dict[str, list] = {}
    counts: dict[str, int] = {}
    totals: dict[str, int] = {}
    for line, epoch, ts_text, rest in lines_in_window(lines, since_epoch, now):
        scanned += 1
        for pid, rx in compiled:
            m = rx.search(rest)
            if not m:
                continue
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            dev = groups.pop("dev", None)
            if dev is None:
                pci = _PCI_RE.search(rest)
                dev = pci.group(1) if pci else None
            counts[pid] = counts.get(pid, 0) + 1
            n = groups.get("count")
            totals[pid] = totals.get(pid, 0) + (int(n) if n and n.isdigit() else 1)
            kept = found.setdefault(pid, [])
            entry = {"id": pid, "time": iso_utc(epoch) if epoch is not None else ts_text, "epoch": epoch,
                     "device": dev, "groups": groups, "line": line[:LINE_CHARS]}
            if len(kept) < KEPT_PER_ID:
                kept.append(entry)
            else:  # keep the first half and the latest ones
                del kept[KEPT_PER_ID // 2]
                kept.append(entry)
    matches = [m for pid, _ in compiled for m in found.get(pid, [])]
    return {"lines_scanned": scanned, "matches": matches, "counts": counts, "totals": totals,
            "kept_per_id": KEPT_PER_ID}


def main(args: dict) -> dict:
    """Probe entry point: the document described in the module docstring."""
    reject_unknown(args, ARG_KEYS)
    compiled = compile_patterns(args.get("patterns"))
    since = args.get("since_epoch")
    since = float(since) if since is not None else None
    return read_first(since, args.get("sources"), lambda lines: match_lines(lines, compiled, since))


if __name__ == "__main__":
    run(main)
