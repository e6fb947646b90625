"""The record of one finished test, as the reports keep it (pure): :class:`CaseRecord`, its JSON forms
(:func:`record_dict`, :func:`record_json`: one results.jsonl line), the failure lines that count for its
verdict (:func:`counted_failures`) and the layer, name, file and host a test id names (:func:`layer_of`, :func:`case_name`,
:func:`case_file`, :func:`host_of`).

Records are self-describing (run id, host, layer, check) so that runs sharded over Slurm or Kubernetes can be
merged (gpuaccept.scaleout.merge). The files of a run are written by gpuaccept.reporting.reporter.Reporter.
"""
from __future__ import annotations

import contextlib
import gc
import json
import re
from dataclasses import dataclass, field

from gpuaccept.judging import actions

LAYERS = ("health", "memory", "compute", "nvlink", "nccl", "gpudirect", "storage", "host", "burnin")


def layer_of(nodeid: str) -> str:
    """The layer of a test id: ``suites/test_<layer>[_more].py::...`` → layer (else "other")."""
    m = re.search(r"test_([a-z]+)\w*\.py::", nodeid)
    return m.group(1) if m and m.group(1) in LAYERS else "other"


def case_name(nodeid: str) -> str:
    """The test's own name with its parameter: ``suites/test_health.py::test_ecc[[::1]:22]`` → ``test_ecc[[::1]:22]``.

    Only the part before the parameter is split on ``::``: a parameter (an IPv6 host) may hold ``::`` itself."""
    head, bracket, param = str(nodeid).partition("[")
    return head.rsplit("::", 1)[-1] + bracket + param


def case_file(nodeid: str) -> str:
    """The file part of a test id: ``suites/test_health.py::test_ecc[::1]`` → ``suites/test_health.py``."""
    return str(nodeid).partition("[")[0].split("::", 1)[0]


def host_of(nodeid: str) -> str | None:
    """The host parameter of a test id (``...[host]``), or None."""
    return nodeid[nodeid.index("[") + 1:-1] if nodeid.endswith("]") and "[" in nodeid else None


@dataclass
class CaseRecord:
    """Outcome of one test: ``outcome`` is passed|failed|error|skipped; ``figures`` the records."""

    nodeid: str
    name: str
    host: str | None
    layer: str
    outcome: str
    message: str = ""
    duration_s: float = 0.0
    figures: list[dict] = field(default_factory=list)
    run_id: str = ""
    #: the failure lines that made it fail, each with the GPU it names and its action: ``{host, gpu, pci_bus_id,
    #: serial, line, check, action}`` (:func:`counted_failures`; empty unless failed)
    failures: list[dict] = field(default_factory=list)
    #: what to do next (gpuaccept.judging.actions, ``{action, reason, source[, setting, command]}``): decided when
    #: the record was made; None for a record made without it (read back by :func:`record_action`)
    action: dict | None = None
    #: why it failed or could not be measured (gpuaccept.causes.Cause dicts, each with the host it is about); None
    #: for a passed or skipped test and for records written before causes (results.json format 2)
    causes: list[dict] | None = None


def record_action(r: CaseRecord) -> dict | None:
    """The action of a record: the one it carries, else decided now from its outcome, message, failure entries
    and figures (:func:`gpuaccept.judging.actions.for_case`; records made before actions, "not run" records)."""
    if r.action is not None or r.outcome not in ("failed", "error"):
        return r.action
    return actions.for_case(r.outcome, r.name, r.message, r.failures, figures=r.figures, causes=r.causes)


def _action_field(r: CaseRecord) -> dict:
    act = record_action(r)
    return {"action": act} if act else {}


def counted_failures(outcome: str, message: str, entries: list[dict]) -> list[dict]:
    """The failure lines (``gpuaccept.judging.recorder.FAILURE_KEY`` entries) that count for a test's verdict (pure):
    none unless it ``failed``; a line the outcome kept only as "(blocked GPU) ..." or "figure kept: ..." (a GPU
    a foreign process or a lost fabric blocks) does not; each line once."""
    if outcome != "failed":
        return []
    out, seen = [], set()
    for e in entries:
        line = e.get("line") if isinstance(e, dict) else None
        if not line or line in seen or f"(blocked GPU) {line}" in message or f"figure kept: {line}" in message:
            continue
        seen.add(line)
        out.append(e)
    return out


def record_dict(r: CaseRecord) -> dict:
    """A record as a plain dict for JSON (shallow: figures are already JSON-like; ``dataclasses.asdict`` deep-copies
    every figure and cost 10x the JSON encoding at 10,000 hosts)."""
    return {"nodeid": r.nodeid, "name": r.name, "host": r.host, "layer": r.layer, "outcome": r.outcome,
            "message": r.message, "duration_s": r.duration_s, "figures": r.figures, "run_id": r.run_id,
            **({"failures": r.failures} if r.failures else {}), **_action_field(r),
            **({"causes": r.causes} if r.causes is not None else {})}


@contextlib.contextmanager
def no_gc():
    """Python's cyclic garbage collector paused for the block (a whole-run write allocates millions of small
    objects; with the run's millions of figures alive every collection walks them all: at 2,000 hosts x 23
    checks, a third of the write's time). The write makes no reference cycles; collection resumes after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def record_json(r: CaseRecord) -> tuple[str, str]:
    """A record's results.jsonl line as ``(head, figures)``: the line is ``head + figures + "}"``, ``figures``
    the JSON array of its figures (so a whole-run file can copy that array's inside from the line). ASCII only
    (``ensure_ascii``): character offsets are byte offsets."""
    head = json.dumps({"nodeid": r.nodeid, "name": r.name, "host": r.host, "layer": r.layer, "outcome": r.outcome,
                       "message": r.message, "duration_s": r.duration_s, "run_id": r.run_id,
                       **({"failures": r.failures} if r.failures else {}), **_action_field(r),
                       **({"causes": r.causes} if r.causes is not None else {})}, default=str)
    return head[:-1] + ', "figures": ', json.dumps(r.figures, default=str)

