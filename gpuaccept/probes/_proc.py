"""Processes from /proc (standard library only): one scanner for the node-side watchdog and the controller.

Shipped with the probes; the controller imports it as ``gpuaccept.probes._proc``. Linux only: where /proc
cannot be read, :func:`processes` yields nothing and callers fall back on ``os.killpg(pgid, 0)``.
"""
from __future__ import annotations

import os
from collections import namedtuple
from collections.abc import Iterator

#: One live process (ints, but ``state``: /proc/<pid>/stat's state letter, R, S, D, T, Z, ...). A plain
#: namedtuple: the agent starts without importing typing (3 ms of every node's start).
Proc = namedtuple("Proc", "pid state ppid pgid sid")


def processes(live_only: bool = True) -> Iterator[Proc]:
    """Every process /proc shows (fields 3-6 of /proc/<pid>/stat, proc(5)); zombies and dead ones left out
    when ``live_only`` (a zombie needs no killing, and init may take a while to reap orphans)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        p = stat(int(entry))
        if p is not None and (not live_only or p.state not in ("Z", "X")):
            yield p


def stat(pid: int) -> Proc | None:
    """Process ``pid`` as /proc/<pid>/stat shows it (fields 3-6, proc(5)), zombies included; None when it is
    gone or /proc cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return Proc(pid, fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3]))
    except (OSError, IndexError, ValueError):
        return None


def proc_readable() -> bool:
    """True where /proc describes processes (then an empty scan means "none")."""
    return os.path.exists("/proc/self/stat")


def group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process is in process group ``pgid``. ``killpg(pgid, 0)`` first: no
    process at all (ESRCH) is False without reading /proc; otherwise (zombies count for killpg) the /proc
    scan decides, and where /proc is not readable the group counts as alive (a permission error there
    means it exists)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if not proc_readable():
        return True
    return any(p.pgid == pgid for p in processes())
