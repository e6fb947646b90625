"""The summary's groupings across hosts (pure): skips with one reason over many hosts on one line.

A skip's message names its host (``"no NVMe on gpu-07"``), so grouping by the message alone gave one line per
host; :func:`skip_groups` writes the host as ``<host>`` first, so 10,000 hosts without NVMe are one line.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

#: hosts named on a grouped line before ", ..." (the counts say how many)
SHOWN_HOSTS = 8


def host_free(message: str, host: str | None) -> str:
    """``message`` with ``host`` (a whole word: not inside a longer name, ``gpu-1`` stays in ``gpu-10``) written
    ``<host>``; unchanged without a host."""
    if not host:
        return message
    return re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-]|\.\w)", "<host>", message)


def skip_groups(recs: Iterable[Any]) -> list[tuple[str, list[str]]]:
    """``[(reason, hosts)]`` of the skipped records (``outcome == "skipped"``), in first-seen order: the reason is
    ``"<test function>: <message, host written <host>>"``, the hosts in record order (``"fleet"`` for a
    fleet-wide test)."""
    out: dict[str, list[str]] = {}
    for r in recs:
        if r.outcome == "skipped":
            why = f"{r.name.split('[')[0]}: {host_free(r.message or '', r.host)}"
            out.setdefault(why, []).append(r.host or "fleet")
    return list(out.items())


def skip_lines(recs: Iterable[Any]) -> list[str]:
    """The summary's "Skipped" lines: ``- test_nvme: no NVMe on <host> (3 hosts: a, b, c)``."""
    lines = []
    for why, hs in skip_groups(recs):
        names = ", ".join(hs[:SHOWN_HOSTS]) + (", ..." if len(hs) > SHOWN_HOSTS else "")
        lines.append(f"- {why} ({len(hs)} host{'s' if len(hs) != 1 else ''}: {names})")
    return lines
