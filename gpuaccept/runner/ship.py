"""Shipping the probes to a node: the files, as the frame the node-side agent reads when it starts, and which
files a probe needs.

The agent (gpuaccept.runner.agent, ``probes/_agent.py``) gets its own files at its start (:func:`payload`,
:func:`agent_files`: about 30 KB compressed, made once per run) and writes them into its folder; a probe's files
(:func:`probe_files`) travel in its run request, those not sent before (:func:`texts`), and are written before the
probe's first run. A probe's helpers are the ``_*.py`` files beside it that it imports (found with :mod:`ast`): a file a
probe needs and does not import is not on the node when it runs. Pure but for reading gpuaccept/probes.
"""
from __future__ import annotations

import ast
import functools
import json
import os
import threading
import zlib

PROBE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "probes")
#: seconds the node-side watchdog waits past a probe's own timeout before it kills the probe's group itself:
#: the controller's kill (gpuaccept.runner.agent.KILL_WAIT_S, 6 s) plus margin comes first
WATCHDOG_GRACE_S = 15.0


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
        for node in ast.walk(_parse(fn)):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module]
            else:
                continue
            todo += [f"{m}.py" for m in mods if m.startswith("_") and os.path.isfile(os.path.join(PROBE_DIR, f"{m}.py"))]
    return tuple(sorted(need))


#: held while :func:`torch_import` and :func:`needed_files` read a probe's code: the agents of a run start at once
#: (``--forks`` threads, 32 by default) and each asks for its first probe; ``lru_cache`` alone lets every one of
#: them parse the same files at the same time (2.5 s of controller CPU at 32 hosts, measured with
#: benchmarks/fanout.py --per-host)
_AST_LOCK = threading.Lock()


def needed_files(name: str) -> list[str] | None:
    """:func:`probe_files` of probe ``name`` for a run request, or None for a name that is no probe (the agent
    then writes every file). Read once per name and process, by one thread at a time."""
    with _AST_LOCK:
        try:
            return list(probe_files(name))
        except ValueError:
            return None


def torch_import(name: str) -> str | None:
    """Whether probe ``name`` imports torch, read from its code (:mod:`ast`), for the node-side agent's warm
    child (``probes/_zygote.py``): "module" when the probe or a ``_*.py`` helper it imports at its top (at any
    depth) imports torch at its top, so every run of it pays torch's import; "function" when torch is imported
    only inside a function (of the probe or of any helper it needs: :func:`probe_files`), so some runs do not
    (gds without a path, pcie_link on links already at their maximum); None when nothing of it imports torch, or
    for a name that is no probe. Read once per name and process (cached), by one thread at a time."""
    with _AST_LOCK:
        return _torch_import(name)


@functools.lru_cache(maxsize=None)
def _torch_import(name: str) -> str | None:
    if not os.path.isfile(os.path.join(PROBE_DIR, f"{name}.py")):
        return None
    if _top_imports_torch(f"{name}.py", frozenset()):
        return "module"
    return "function" if any(_imports_torch(fn) for fn in probe_files(name)) else None


@functools.lru_cache(maxsize=None)
def _parse(fn: str) -> ast.Module:
    """The syntax tree of ``fn`` (a file of gpuaccept/probes), parsed once per process (read only by callers)."""
    with open(os.path.join(PROBE_DIR, fn), encoding="utf-8") as f:
        return ast.parse(f.read(), fn)


def _modules(node: ast.AST) -> list[str]:
    """The top-level names an import statement imports ([] for any other node)."""
    if isinstance(node, ast.Import):
        return [a.name.split(".")[0] for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module.split(".")[0]]
    return []


def _top_imports_torch(fn: str, seen: frozenset) -> bool:
    """Whether ``fn`` (a file of gpuaccept/probes) imports torch at its top, itself or through a helper imported
    at its top (``try`` and ``if`` blocks at the top count: they run at import)."""
    for node in _top_level(_parse(fn).body):
        for m in _modules(node):
            if m == "torch":
                return True
            helper = f"{m}.py"
            if m.startswith("_") and helper not in seen and os.path.isfile(os.path.join(PROBE_DIR, helper)):
                if _top_imports_torch(helper, seen | {fn}):
                    return True
    return False


def _top_level(body: list) -> list:
    """The statements that run when a module is imported: ``body`` and the blocks of its ``if``/``try``/``with``."""
    out = []
    for node in body:
        out.append(node)
        for field in ("body", "orelse", "finalbody"):
            if isinstance(node, (ast.If, ast.Try, ast.With)) and getattr(node, field, None):
                out += _top_level(getattr(node, field))
        if isinstance(node, ast.Try):
            for h in node.handlers:
                out += _top_level(h.body)
    return out


def _imports_torch(fn: str) -> bool:
    """Whether ``fn`` imports torch anywhere (inside functions too)."""
    return any(m == "torch" for node in ast.walk(_parse(fn)) for m in _modules(node))


def agent_files() -> tuple[str, ...]:
    """The files BOOT writes before it imports the agent (gpuaccept.runner.agent.BOOT): ``_bytecode.py``,
    ``_agent.py`` and every helper they import (:func:`probe_files`), sorted."""
    with _AST_LOCK:
        return tuple(sorted(set(probe_files("_agent")) | set(probe_files("_bytecode"))))


_PAYLOAD_LOCK = threading.Lock()


def payload() -> bytes:
    """The frame the agent's start reads (gpuaccept.runner.agent.BOOT): 4 bytes of length (big-endian), then zlib
    (level 6) of the JSON ``{name: text}`` of the agent's own files (:func:`agent_files`); made once per run, by
    the first of the agents starting at once (the others wait for it). A probe's other files travel in its run
    request (:func:`texts`)."""
    with _PAYLOAD_LOCK:
        return _payload()


@functools.lru_cache(maxsize=1)
def _payload() -> bytes:
    data = zlib.compress(json.dumps(texts(agent_files())).encode(), 6)
    return len(data).to_bytes(4, "big") + data


def texts(names) -> dict[str, str]:
    """``{name: text}`` of the files ``names`` of gpuaccept/probes (every ``*.py`` there when ``names`` is None),
    each read once per process. Raises OSError for a name that is not there."""
    if names is None:
        names = sorted(fn for fn in os.listdir(PROBE_DIR) if fn.endswith(".py"))
    return {fn: _text(fn) for fn in names}


@functools.lru_cache(maxsize=None)
def _text(fn: str) -> str:
    with open(os.path.join(PROBE_DIR, fn), encoding="utf-8") as f:
        return f.read()
