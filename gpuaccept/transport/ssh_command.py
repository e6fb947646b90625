"""The remote side of one SSH command: the wrapper every command runs in, and the kill command.

Remote side of one run (built by :func:`wrap_command`, the only place that quotes for the shell)::

    exec [sudo -n -u '<become user>' --] /bin/sh -c '<INNER>' sh '<command>' '<INNER>'

INNER makes sure the shell leads its own process group (its group read from /proc/$$/stat, proc(5) field 5, by
the shell's ``read``; OpenSSH already starts sessions with setsid(); otherwise it re-execs itself under
``setsid``), prints ``__GPUACCEPT_PGID__=<pgid>`` as the first line it writes to stderr (stripped from the result
by :class:`StderrSplitter`), then ``eval``s the command. A command run under the node-side watchdog
(``probes/_watchdog.py``) announces its probe's own process group the same way, on the next line.
:func:`kill_group_command` is what kills those groups. Pure: no I/O.
"""
from __future__ import annotations

import re

from gpuaccept.transport.shell import quote as _quote

#: seconds between SIGTERM and SIGKILL of the remote process group on timeout
KILL_GRACE_S = 2.0
PGID_MARKER = "__GPUACCEPT_PGID__="
_MARKER_RE = re.compile(rb"^" + re.escape(PGID_MARKER.encode()) + rb"(\d+)\n", re.M)
_MARKER_SCAN_LIMIT = 64 * 1024

# $1: the command, $2: this script. Runs under /bin/sh whatever the login shell is.
_INNER = (
    'pg=; read -r _p _p _p _p pg _p 2>/dev/null </proc/$$/stat; unset _p; '
    'if [ "$pg" != "$$" ] && [ -z "${GPUACCEPT_SETSID:-}" ] && command -v setsid >/dev/null 2>&1; then '
    'GPUACCEPT_SETSID=1 exec setsid /bin/sh -c "$2" "$0" "$1" "$2"; fi; '
    f'unset GPUACCEPT_SETSID; echo "{PGID_MARKER}$$" >&2; '
    '__gpuaccept_cmd=$1; set --; eval "$__gpuaccept_cmd"'
)


def wrap_command(command: str, become: str | None = None) -> str:
    """The remote command line for ``command``: see the module docstring. ``become``: a user to run it as,
    through ``sudo -n -u USER --`` (the inventory's ``ansible_become``; never a password: sudo fails at once
    with "a password is required" where the login user has no passwordless sudo)."""
    q = _quote
    sudo = f"sudo -n -u {q(become)} -- " if become else ""
    return f"exec {sudo}/bin/sh -c {q(_INNER)} sh {q(command)} {q(_INNER)}"


def kill_group_command(pgid: int | list[int], grace_s: float = KILL_GRACE_S) -> str:
    """Remote command line that TERMs process group(s) ``pgid``, waits up to ``grace_s`` seconds for their
    live (non-zombie) members to exit, then KILLs them. Uses the ``kill -TERM -PGID`` form (dash's kill
    takes no ``--``); liveness from /proc with awk, else ``kill -0``. Raises ValueError for a pgid <= 1."""
    pgids = [int(p) for p in (pgid if isinstance(pgid, (list, tuple)) else [pgid])]
    if not pgids or any(p <= 1 for p in pgids):
        raise ValueError(f"refusing to kill process group(s) {pgids}")
    steps = max(1, int(grace_s * 10))
    plist = " ".join(str(p) for p in pgids)
    script = (
        f"ps_=' {plist} '; "
        "alive() { "
        "if [ -r /proc/self/stat ] && command -v awk >/dev/null 2>&1; then "
        "cat /proc/[0-9]*/stat 2>/dev/null | "
        "awk -v p=\"$ps_\" '{ sub(/.*\\) /, \"\"); if (index(p, \" \" $3 \" \") && $1 != \"Z\" && $1 != \"X\") f = 1 } END { exit !f }'; "
        "else for p in $ps_; do kill -0 -$p 2>/dev/null && return 0; done; return 1; fi; }; "
        "for p in $ps_; do kill -TERM -$p 2>/dev/null; done; i=0; "
        f"while [ $i -lt {steps} ] && alive; do sleep 0.1; i=$((i+1)); done; "
        "for p in $ps_; do kill -KILL -$p 2>/dev/null; done; true"
    )
    return f"exec /bin/sh -c {_quote(script)}"


class StderrSplitter:
    """Collects stderr, pulling out ``__GPUACCEPT_PGID__=<n>`` lines (the wrapper's pgid, then the watched
    probe's own group) from the first 64 KiB."""

    def __init__(self) -> None:
        self.pgids: list[int] = []
        self._head = bytearray()
        self._chunks: list[bytes] = []
        self._scanning = True

    @property
    def pgid(self) -> int | None:
        return self.pgids[0] if self.pgids else None

    def feed(self, data: bytes) -> None:
        if not self._scanning:
            self._chunks.append(data)
            return
        self._head += data
        while True:
            m = _MARKER_RE.search(self._head)
            if not m:
                break
            self.pgids.append(int(m.group(1)))
            del self._head[m.start() : m.end()]
        if len(self.pgids) >= 2 or len(self._head) > _MARKER_SCAN_LIMIT:
            self._chunks.append(bytes(self._head))
            self._head = bytearray()
            self._scanning = False

    def value(self) -> bytes:
        return b"".join(self._chunks) + bytes(self._head)
