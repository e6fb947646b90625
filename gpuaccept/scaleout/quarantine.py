"""What the Slurm and the Kubernetes node actions share: which hosts to take out of
service or put back, the brake on how many, and the rule for putting one back. Pure, but for
:func:`earlier_results`, which reads an earlier run's results.json.

A scheduler's view of one node is a :class:`Hold` (Slurm: a drain and its reason, gpuaccept.scaleout.drain;
Kubernetes: a cordon or our taint, and our annotation, gpuaccept.scaleout.k8s.nodes). :func:`decide` turns a
run's host verdicts and those holds into one :class:`Decision` per host, and :func:`brake` holds every
quarantine back when more hosts would go than ``--drain-max`` allows. Each backend then writes its own
commands for the decisions (``scontrol update``; ``kubectl cordon/taint/label``).

Rules, the same for both:

- a host is taken out when its action (gpuaccept.judging.actions) is one of the data file's ``slurm_drain``
  actions (drain-rma, reboot, reset-gpu: :func:`gpuaccept.judging.actions.drain_actions`);
- a host is put back when it passes in this run, its hold is gpuaccept's, and this run passed every test that
  failed or errored for it in the run that held it (found by the run id the hold carries, under the reports
  root, else at the evidence folder it names);
- a node held by someone else is never touched, neither re-held by us nor put back;
- more quarantines than ``--drain-max`` of the selected nodes: none is made, and one line says why;
- every hold and release whose calls succeeded is kept in the history database (:func:`record_history`: Slurm's
  in ``slurm_events``, Kubernetes' in ``k8s_events``), and a node held again within a day of gpuaccept's release
  is named "repeating".
"""
from __future__ import annotations

import collections
import json
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Mapping

from gpuaccept.config.options import DRAIN_MAX_DEFAULT, drain_limit
from gpuaccept.judging.actions import base_test_name, drain_actions
from gpuaccept.reporting.records import CaseRecord

#: every hold reason of ours starts with this (and only ours are resumed or replaced)
REASON_HEAD = "gpuaccept "
#: the brake's hint: what makes many nodes fail at once without any of their parts being at fault
FLEET_WIDE_HINT = "a fleet-wide cause such as a bad image or a DNS outage?"


@dataclass(frozen=True)
class Words:
    """How one backend names things in its lines: ``tag`` (``slurm``), ``system`` (``Slurm``), ``lookup``
    (the command that lists nodes), ``verb``/``held`` (``drain``/``drained``), ``unreached`` (the phrase for
    a control plane not reached), ``table`` (its history table, gpuaccept.reporting.history.drains.TABLES)."""

    tag: str
    system: str
    lookup: str
    verb: str
    held: str
    unreached: str
    table: str = "slurm_events"


@dataclass(frozen=True)
class Hold:
    """One node as its scheduler shows it: ``held`` (drained, cordoned or tainted by us), ``ours`` (the hold
    carries gpuaccept's reason), ``who`` (how someone else's hold reads, for the note), ``run_id`` and
    ``evidence`` (of our reason: the run that held it and its report folder; None when not carried)."""

    name: str
    held: bool
    ours: bool = False
    who: str | None = None
    run_id: str | None = None
    evidence: str | None = None


@dataclass
class StepResult:
    """What a node-action step (Slurm drain/resume, Kubernetes cordon/resume) did: ``steps`` (after the brake),
    ``failed`` (scheduler calls that failed), ``refused`` (the brake's line when it held every hold back),
    ``repeating`` (the lines of nodes held again within a day of gpuaccept's release: :func:`record_history`) and
    ``lines`` (all said)."""

    steps: list
    failed: int = 0
    refused: str | None = None
    repeating: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No call failed and the brake held nothing back."""
        return not self.failed and self.refused is None


@dataclass(frozen=True)
class Decision:
    """One host's part: ``kind`` ``"hold"`` (take out), ``"release"`` (put back) or None (left alone, ``note``
    says why); ``action``: the host's action record (action, cause, reason); ``first``: its first reason;
    ``earlier``: the run id whose failures this run passed (a release)."""

    host: str
    node: str
    kind: str | None
    note: str
    action: dict = field(default_factory=dict)
    first: str = ""
    earlier: str | None = None


def hold_reason(run_id: str, action: str, first_reason: str, evidence: str, limit: int) -> str:
    """``"gpuaccept <run id>: <action>: <first reason> (evidence <dir>)"``: one line, double quotes made single,
    the first reason cut to ``limit`` characters (it travels as one argv word, and a person copies the dry
    run's command into a shell)."""
    first = " ".join((first_reason or "").split()).replace('"', "'")
    if len(first) > limit:
        first = first[:limit - 3] + "..."
    return f"{REASON_HEAD}{run_id}: {action}: {first} (evidence {evidence})"


def ours(reason: str | None) -> bool:
    """True when a hold reason is one gpuaccept wrote."""
    return bool(reason) and reason.startswith(REASON_HEAD)


_REASON_RUN_RE = re.compile(r"^gpuaccept (\S+?):")
_REASON_EVIDENCE_RE = re.compile(r"\(evidence (.+)\)$")


def reason_run(reason: str) -> tuple[str | None, str | None]:
    """(run id, evidence folder) of a hold reason of ours; None for a part it does not carry."""
    run = _REASON_RUN_RE.match(reason or "")
    ev = _REASON_EVIDENCE_RE.search(reason or "")
    return (run.group(1) if run else None), (ev.group(1) if ev else None)


def needed_tests(results: dict, host: str) -> set[str]:
    """The tests (base names) that failed or errored for ``host`` in a run's results.json document: its own,
    and the fleet-wide ones whose failure lines name it."""
    out = set()
    for t in results.get("tests") or []:
        if t.get("outcome") not in ("failed", "error"):
            continue
        if t.get("host") == host or (t.get("host") is None and any(
                e.get("host") == host for e in t.get("failures") or [])):
            out.add(base_test_name(t.get("name")))
    return out


def passed_tests(recs: list[CaseRecord]) -> dict[str, set[str]]:
    """host -> the tests (base names) it passed in these records (fleet-wide ones for the hosts with a figure)."""
    out: dict[str, set[str]] = {}
    for r in recs:
        if r.outcome != "passed":
            continue
        hosts = [r.host] if r.host else sorted({f.get("host") for f in r.figures if f.get("host")})
        for h in hosts:
            out.setdefault(h, set()).add(base_test_name(r.name))
    return out


def decide(hv: dict, hosts: list[str], names: Mapping[str, str], holds: Mapping[str, Hold] | None,
           hold: bool, release: bool, passed: Mapping[str, set],
           earlier: Callable[[str | None, str | None], dict | None], words: Words) -> list[Decision]:
    """One :class:`Decision` per host with something to do or a note, in selection order (pure). ``hv``: this
    run's host verdicts (with ``action``); ``names``: host -> node name; ``holds``: node -> :class:`Hold` (a
    node missing there is not in the scheduler; None: not known, the control plane not reached: every hold
    planned, no release); ``passed``: :func:`passed_tests` of this run; ``earlier(run id, evidence)``: the
    results.json document of the run that held a node, or None when it cannot be found."""
    from gpuaccept.reporting.verdicts import same_reason_once
    out = []
    for h in hosts:
        v = hv.get(h)
        if v is None:
            continue
        node = names.get(h) or h
        act = v.get("action") or {}
        wants_hold = hold and act.get("action") in drain_actions()
        wants_release = release and v.get("verdict") == "PASS"
        if not (wants_hold or wants_release):
            continue
        st = holds.get(node) if holds is not None else Hold(node, False)
        if st is None:
            out.append(Decision(h, node, None, f"no {words.system} node {node} ({words.lookup}): left alone"))
            continue
        if st.held and not st.ours:
            out.append(Decision(h, node, None, f"{words.held} by someone else ({st.who or 'no reason'}): left alone"))
            continue
        if wants_hold:  # the first reason of a finding with the host's action, not of another (a fleet fix-config)
            first = (v.get("first_by_action") or {}).get(act["action"])
            if first is None:
                said = same_reason_once(v.get("reasons") or [])
                first = said[0] if said else act.get("reason", "")
            out.append(Decision(h, node, "hold", f"{act['action']}: {words.verb}", dict(act), first))
            continue
        if holds is None:
            out.append(Decision(h, node, None, f"resume not planned: {words.unreached}"))
            continue
        if not st.held:
            continue  # passing and in service: nothing to put back
        rid, evidence = st.run_id, st.evidence
        doc = earlier(rid, evidence)
        if doc is None:
            out.append(Decision(h, node, None, f"not resumed: the run that {words.held} it ({rid}) is not under "
                                               f"the reports folder nor at {evidence}; resume it by hand after a check"))
            continue
        missing = sorted(needed_tests(doc, h) - set(passed.get(h) or ()))
        if missing:
            out.append(Decision(h, node, None, f"not resumed: this run did not pass {', '.join(missing)}, which "
                                               f"failed in run {rid} (rerun it, with the burn-in)"))
            continue
        out.append(Decision(h, node, "release", f"passes every test that failed in run {rid}: resume", earlier=rid))
    return out


def brake(decisions: list[Decision], hv: dict, selected: int, drain_max: str | None,
          words: Words) -> tuple[list[Decision], str | None]:
    """The brake (pure): ``(decisions, None)`` when the holds are within ``--drain-max`` of the
    ``selected`` nodes (:func:`gpuaccept.config.options.drain_limit`, default :data:`DRAIN_MAX_DEFAULT`), else
    the decisions with every hold made a note, and the one line that says why none is made: how many would
    be, of how many selected, the limit, and the most common cause class and reason among them (``hv``: the
    host verdicts, each with its ``action``). Raises ValueError on a bad ``drain_max`` (refused earlier)."""
    holds = [d for d in decisions if d.kind == "hold"]
    limit = drain_limit(drain_max, selected)
    if len(holds) <= limit:
        return decisions, None
    acts = [(hv.get(d.host) or {}).get("action") or {} for d in holds]
    cause, n_cause = collections.Counter(a.get("cause") or "unverified" for a in acts).most_common(1)[0]
    (act, why), n_why = collections.Counter((a.get("action"), a.get("reason") or "") for a in acts).most_common(1)[0]
    line = (f"gpuaccept {words.tag}: {words.held} none: {len(holds)} of {selected} selected nodes would be "
            f"{words.held}, above --drain-max {drain_max or DRAIN_MAX_DEFAULT} ({limit} node{'s' if limit != 1 else ''}); "
            f"most common among them: cause {cause} ({n_cause} of {len(holds)}), {act}: {why} ({n_why} of "
            f"{len(holds)}): {FLEET_WIDE_HINT} Check, then rerun with --drain-max {len(holds)} or {words.verb} by hand")
    kept = [Decision(d.host, d.node, None, f"not {words.held}: held back by --drain-max (see above)", d.action)
            if d.kind == "hold" else d for d in decisions]
    return kept, line


def history_event(d: Decision, words: Words) -> dict:
    """The history row of a hold or release whose calls succeeded (pure): ``{"event", "host", "node"}``, with
    the action, cause and reason of a hold; the event is the table's word (``drain``/``resume``,
    ``cordon``/``uncordon``: gpuaccept.reporting.history.drains.TABLES)."""
    from gpuaccept.reporting.history.drains import TABLES
    hold, release = TABLES[words.table]
    if d.kind == "hold":
        return {"event": hold, "host": d.host, "node": d.node, "action": d.action.get("action"),
                "cause": d.action.get("cause"), "reason": d.action.get("reason")}
    return {"event": release, "host": d.host, "node": d.node}


def record_history(history: str | None, run_id: str, done: list[Decision], words: Words) -> tuple[list[str], list[str]]:
    """Keep the holds and releases ``done`` (their calls all succeeded) in the history database ``history``
    (None: none kept), table ``words.table``: ``(repeating, lines)``: the nodes held again within a day of
    gpuaccept's release (gpuaccept.reporting.history.drains.repeating_text) and the lines to say (each
    repeating node; or why the history could not be written: never raises for it)."""
    if not history or not done:
        return [], []
    import sqlite3
    from gpuaccept.reporting.history import HistoryError
    from gpuaccept.reporting.history.drains import record_events, repeating_text
    try:
        got = record_events(history, run_id, [history_event(d, words) for d in done], table=words.table)
    except (HistoryError, OSError, sqlite3.Error) as e:
        return [], [f"gpuaccept {words.tag}: the calls made are not in the history {history}: {e}"]
    repeating = [repeating_text(r, words.held) for r in got]
    return repeating, [f"gpuaccept {words.tag}: repeating: {t}" for t in repeating]


def earlier_results(reports_root: str) -> Callable[[str | None, str | None], dict | None]:
    """The ``earlier`` lookup of :func:`decide`: ``<reports_root>/<run id>/results.json``, else
    ``<evidence>/results.json``, read as JSON; None when neither is readable."""
    def find(run_id: str | None, evidence: str | None) -> dict | None:
        for d in ([os.path.join(reports_root, run_id)] if run_id and "/" not in run_id else []) + \
                 ([evidence] if evidence else []):
            try:
                with open(os.path.join(d, "results.json"), encoding="utf-8") as f:
                    doc = json.load(f)
            except (OSError, ValueError):
                continue
            if run_id is None or doc.get("run_id") in (run_id, None):
                return doc
        return None
    return find


def records_of(results: dict) -> list[CaseRecord]:
    """The result records of a results.json document (keys a newer gpuaccept added are ignored)."""
    fields = set(CaseRecord.__dataclass_fields__)
    return [CaseRecord(**{k: v for k, v in t.items() if k in fields}) for t in results.get("tests") or []]
