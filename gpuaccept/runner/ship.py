"""Shipping the probes to a node: which files a probe needs, their tar stream, and the node-side commands
that unpack it and start the node-side watchdog (``probes/_watchdog.py``) in the shipped folder.

A probe's helpers are the ``_*.py`` files beside it that it imports (:func:`probe_files`, found with :mod:`ast`);
the folder is ``$TMPDIR/gpuaccept.<random>`` (made by gpuaccept.runner.host.HostRunner). Pure but for reading
gpuaccept/probes.
"""
from __future__ import annotations

import ast
import functools
import io
import json
import os
import tarfile

from gpuaccept.transport import CommandResult, shell

PROBE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "probes")
#: seconds the node-side watchdog waits past a probe's own timeout before it kills the probe's group itself:
#: the controller's kill (gpuaccept.transport.ssh.KILL_BUDGET_S, 6 s) plus margin comes first
WATCHDOG_GRACE_S = 15.0
#: first stdout line of the command that ships the probes and runs the first one: ``<marker><folder>``
DIR_MARKER = b"__GPUACCEPT_DIR__="
#: stderr line of that command when the probes could not be unpacked (then exit status 125)
SHIP_FAILED_MARKER = "__GPUACCEPT_SHIP_FAILED__ "
#: stderr line of a probe command whose shipped folder is gone (then exit status 125): the probes are shipped again
FOLDER_GONE_MARKER = "__GPUACCEPT_FOLDER_GONE__"


def _unpack_and_watch(sweep: bool) -> str:
    """Python code run in the shipped folder as ``python -c CODE --watch-stdin DEADLINE GRACE PROBE.py ARGS``:
    unpack the probe files' tar stream from stdin, then become the node-side watchdog (probes/_watchdog.py) in
    the same Python (one interpreter start fewer); the watchdog reads the rest of stdin, held open by the
    controller, for EOF. ``sweep``: first remove other runs' stale folders (_watchdog.sweep_stale), once per
    host and run. The garbage collector stays off until the watchdog forks the probe (see _watchdog.main)."""
    return ("import gc, sys, tarfile\n"
            "gc.disable()\n"
            "try:\n"
            "    tarfile.open(fileobj=sys.stdin.buffer, mode='r|').extractall()\n"
            "except Exception as e:\n"
            f"    sys.stderr.write('{SHIP_FAILED_MARKER}%s: %s\\n' % (type(e).__name__, e))\n"
            "    sys.exit(125)\n"
            "sys.path.insert(0, '')\n"
            "import _watchdog\n"
            + ("_watchdog.sweep_stale()\n" if sweep else "")
            + "sys.exit(_watchdog.main(sys.argv[1:]))\n")


#: the first command on a host: unpack into the new folder, sweep stale folders, watch the probe
UNPACK_AND_WATCH = _unpack_and_watch(sweep=True)
#: a later probe that needs files not shipped yet: unpack them beside the others, watch the probe
UNPACK_MORE_AND_WATCH = _unpack_and_watch(sweep=False)


def watchdog_args(name: str, args: dict | None, limit: float) -> list[str]:
    """The node-side watchdog's arguments for probe ``name`` with ``args`` under a ``limit`` s deadline
    (probes/_watchdog.py): it watches stdin for EOF, and execs a probe whose args carry a ``marker`` (found on
    the node by its command line, ``pkill -f``: gpuaccept.judging.multinode.kill_command) instead of forking it."""
    return ["--watch-stdin", *(["--exec"] if "marker" in (args or {}) else []), f"{limit:g}",
            f"{WATCHDOG_GRACE_S:g}", f"{name}.py", json.dumps(args or {})]


@functools.lru_cache(maxsize=None)
def probe_files(name: str) -> tuple[str, ...]:
    """The files of gpuaccept/probes that probe ``name`` needs on a node, sorted: ``<name>.py``, the node-side
    watchdog, and every ``_*.py`` helper they import (at any depth, inside functions too; found with
    :mod:`ast`, so a helper imported only under a condition is shipped all the same). Raises ValueError for
    a probe that does not exist."""
    if not os.path.isfile(os.path.join(PROBE_DIR, f"{name}.py")):
        raise ValueError(f"no probe named {name}")
    need: set[str] = set()
    todo = [f"{name}.py", "_watchdog.py"]
    while todo:
        fn = todo.pop()
        if fn in need:
            continue
        need.add(fn)
        with open(os.path.join(PROBE_DIR, fn), encoding="utf-8") as f:
            tree = ast.parse(f.read(), fn)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module]
            else:
                continue
            todo += [f"{m}.py" for m in mods if m.startswith("_") and os.path.isfile(os.path.join(PROBE_DIR, f"{m}.py"))]
    return tuple(sorted(need))


def probe_files_all() -> tuple[str, ...]:
    """Every probe file (``*.py`` in gpuaccept/probes), sorted."""
    return tuple(sorted(fn for fn in os.listdir(PROBE_DIR) if fn.endswith(".py")))


@functools.lru_cache(maxsize=None)
def probe_archive(files: tuple[str, ...] | None = None) -> bytes:
    """An uncompressed tar stream of ``files`` (names in gpuaccept/probes; default every ``*.py`` there), made
    once per run and list of files."""
    files = probe_files_all() if files is None else files
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for fn in files:
            tar.add(os.path.join(PROBE_DIR, fn), arcname=fn)
    return buf.getvalue()


def enter_folder(folder: str) -> str:
    """Shell prefix that enters the shipped ``folder``, or exits 125 saying :data:`FOLDER_GONE_MARKER` where it
    is gone (removed by a /tmp cleaner): :func:`folder_gone` tells that result apart, and the probes are
    shipped again."""
    return f"cd {shell.quote(folder)} 2>/dev/null || {{ echo {FOLDER_GONE_MARKER} >&2; exit 125; }}; "


def folder_gone(res: CommandResult) -> bool:
    """Whether ``res`` is a command that found its shipped folder gone (:func:`enter_folder`)."""
    return res.rc == 125 and FOLDER_GONE_MARKER.encode() in res.stderr
