"""A probe's answer: the JSON document of a finished probe command, or the one an interrupted probe printed."""
from __future__ import annotations

import json

import re

from gpuaccept.errors import InterpreterMissing, NodeSetup, PackageMissing, ProbeError, ProgramMissing, RanksFailed
from gpuaccept.probes._supervisor import STAGES
from gpuaccept.transport import CommandResult


def partial_document(stdout: bytes) -> dict | None:
    """The document a probe printed as it was stopped (SIGTERM: a burn-in prints the windows it measured, with
    ``"interrupted"``), from the stdout of an interrupted command; None when it printed none. The node-side
    watchdog's own line after it (``{"failed": true, "msg": "node watchdog: ..."}``) and failure lines are
    skipped: only a probe's result counts."""
    for line in reversed(stdout.decode(errors="replace").splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and not doc.get("failed"):
            return doc
    return None


def parse_probe_output(host: str, probe: str, res: CommandResult, python: str) -> dict:
    """Turn a probe's CommandResult into its JSON document, or raise ProbeError naming host and cause.

    The document is the last non-empty stdout line. rc 127 means the interpreter is missing.
    """
    lines = [ln for ln in res.stdout.decode(errors="replace").splitlines() if ln.strip()]
    err_tail = (res.stderr.decode(errors="replace").strip().splitlines() or [""])[-1][:300]
    if res.rc == 127 and not lines:
        raise InterpreterMissing(host, f"{probe}: python interpreter '{python}' not found "
                                       f"(set ansible_python_interpreter): {err_tail}", {"python": python})
    doc = None
    if lines:
        try:
            doc = json.loads(lines[-1])
        except ValueError:
            doc = None
    if not isinstance(doc, dict):
        raise probe_error(host, f"{probe}: no JSON document (rc {res.rc}): {err_tail or 'no output'}", python)
    if doc.get("failed") or res.rc != 0:
        raise probe_error(host, f"{probe}: {doc.get('msg') or f'rc {res.rc}: {err_tail}'}", python,
                          doc.get("missing_module"), doc.get("missing_program"), doc.get("setup"),
                          doc.get("ranks_failed"))
    return doc


#: the node-side Python's words for a module it cannot import (``ModuleNotFoundError``'s message)
_NO_MODULE = re.compile(r"No module named '([A-Za-z0-9_]+)")
#: the dynamic loader's words, as Python raises them, for a library that fails while it loads (a shared object
#: missing or of another version: ``import torch`` against other CUDA or NCCL libraries); glibc dlerror()
_BROKEN_LIBRARY = re.compile(r"(ImportError|OSError): .*(\.so[.0-9]*: cannot open shared object file|"
                             r"undefined symbol: )")


def probe_error(host: str, msg: str, python: str, missing_module: str | None = None,
                missing_program: str | None = None, setup: str | None = None,
                ranks_failed: dict | None = None) -> ProbeError:
    """The error of a probe that failed with ``msg``: :class:`PackageMissing` (evidence ``{"module", "package",
    "python"}``) when the node's Python could not import a module (the failure document's ``missing_module``, or,
    from a probe that printed no document, its Python's ``No module named 'x'``), :class:`ProgramMissing`
    (evidence ``{"program"}``) for the document's ``missing_program``, :class:`NodeSetup` for its ``setup`` (a kind
    of the node's software or settings: lower-case word characters), :class:`RanksFailed` (evidence the
    document's ``ranks_failed``) for a collective whose ranks failed past their ``setup`` stage, or in it for a
    reason none of the above names, else :class:`ProbeError`. The one place where the node's Python's words are
    read."""
    ranks = _ranks_fact(ranks_failed)
    if ranks and ranks["stage"] != STAGES[0]:
        return RanksFailed(host, msg, ranks)
    if isinstance(missing_program, str) and missing_program and not missing_module:
        return ProgramMissing(host, msg, {"program": missing_program})
    if isinstance(setup, str) and re.fullmatch(r"[a-z][a-z0-9_]{0,40}", setup) and not missing_module:
        return NodeSetup(host, msg, {"setup": setup})
    if setup is None and _BROKEN_LIBRARY.search(msg or ""):  # a probe that died at its imports: no document
        return NodeSetup(host, msg, {"setup": "import_broken"})
    m = _NO_MODULE.search(msg or "") if not missing_module else None
    if missing_module or m:
        module = missing_module or m.group(1)
        return PackageMissing(host, msg, {"module": module, "python": python,
                                          "package": "nvidia-ml-py" if module == "pynvml" else module})
    return RanksFailed(host, msg, ranks) if ranks else ProbeError(host, msg)


def _ranks_fact(fact) -> dict | None:
    """A failure document's ``ranks_failed``, checked: ``{"outcome", "stage", "ranks"}`` with ``stage`` one of
    a rank's (gpuaccept/probes/_supervisor.py ``STAGES``) and ``ranks`` a list of dicts; None for anything else
    (a document of another release or a damaged one: read as a plain probe failure)."""
    if not isinstance(fact, dict) or fact.get("stage") not in STAGES or not isinstance(fact.get("outcome"), str):
        return None
    ranks = [r for r in fact.get("ranks") or [] if isinstance(r, dict)] if isinstance(fact.get("ranks"), list) else []
    return {"outcome": fact["outcome"], "stage": fact["stage"], "ranks": ranks}
