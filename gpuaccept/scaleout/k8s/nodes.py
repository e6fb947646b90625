"""Kubernetes node actions, opt-in: ``--k8s-cordon`` takes the hosts a run says need hands out of
service, ``--k8s-resume`` puts back the ones a later run proves well; the rules (which hosts, the brake
``--drain-max``, when to put one back) are gpuaccept.scaleout.quarantine's, shared with the Slurm step.

Taking node N out, for a host whose action is drain-rma, reboot or reset-gpu::

    kubectl cordon N
    kubectl taint nodes N gpuaccept.io/health=<action>:NoSchedule --overwrite
    kubectl label nodes N gpuaccept.io/verdict=<verdict> gpuaccept.io/run-id=<run id> --overwrite
    kubectl annotate nodes N "gpuaccept.io/reason=gpuaccept <run id>: <action>: <first reason> (evidence <dir>)" --overwrite
    kubectl drain N --ignore-daemonsets --delete-emptydir-data --timeout=<s>s   # hardware actions, --k8s-drain-pods only

Putting it back: ``kubectl uncordon N``, the taint removed (``gpuaccept.io/health:NoSchedule-``), the labels
set to this run's PASS, the annotation removed. A node is gpuaccept's when its annotation ``gpuaccept.io/reason``
starts with ``gpuaccept ``; a node cordoned or tainted otherwise (``spec.unschedulable`` without our annotation)
is someone else's and left alone. Node states come from ``kubectl get nodes -o json``.

The Kubernetes node name is the host var ``k8s_node_name``, default the inventory host name. Without
``--k8s-apply`` nothing is changed: the commands are printed (a dry run; without an API server the dry run says
so and plans as if no node were cordoned). With ``--k8s-apply``, ``kubectl`` missing from PATH is refused
before any node is touched (:func:`check_ready`, exit 4). :func:`plan` is pure; :func:`run_step` does the I/O.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Mapping

from gpuaccept.causes import HARDWARE_ACTIONS
from gpuaccept.errors import ConfigError
from gpuaccept.reporting.records import CaseRecord
from gpuaccept.scaleout.k8s.manifests import HEALTH_TAINT, k8s_node_name, label_value
from gpuaccept.scaleout.quarantine import (Decision, Hold, Words, brake, decide, earlier_results, hold_reason,
                                           ours, passed_tests, reason_run, record_history, StepResult)
from gpuaccept.transport.shell import command as shell_command

#: the annotation holding our reason (run id, action, first reason, evidence folder); labels cannot hold it
REASON_KEY = "gpuaccept.io/reason"
VERDICT_LABEL, RUN_LABEL = "gpuaccept.io/verdict", "gpuaccept.io/run-id"
#: the first reason in the annotation is cut to this many characters (an annotation holds 256 KiB; a person
#: reads it in ``kubectl describe node``). Chosen.
MAX_FIRST_REASON = 240
#: seconds one kubectl call may take; ``kubectl drain`` gets its own ``--timeout`` below this. Chosen.
KUBECTL_TIMEOUT_S = 330.0
DRAIN_TIMEOUT_S = 300
WORDS = Words("k8s", "Kubernetes", "kubectl get nodes", "cordon", "cordoned",
              "the Kubernetes API server was not reached", "k8s_events")


class KubectlUnavailable(ConfigError):
    """``kubectl`` is not found on PATH, or it cannot list the nodes."""


@dataclass(frozen=True)
class Step:
    """One host's part: ``commands`` (argv each; empty when nothing is to be done), ``note`` (why) and the
    shared ``decision`` it carries out (gpuaccept.scaleout.quarantine.Decision)."""

    host: str
    node: str
    commands: tuple[tuple[str, ...], ...]
    note: str
    decision: Decision | None = None


def parse_nodes(doc: dict) -> dict[str, Hold]:
    """``kubectl get nodes -o json`` (a List of Node; a single Node too) -> node name -> Hold (pure): held when
    ``spec.unschedulable`` or our taint is set; ours when the annotation :data:`REASON_KEY` is gpuaccept's."""
    items = doc.get("items") if doc.get("kind") != "Node" else [doc]
    out = {}
    for n in items or []:
        meta, spec = n.get("metadata") or {}, n.get("spec") or {}
        name = meta.get("name")
        if not name:
            continue
        reason = (meta.get("annotations") or {}).get(REASON_KEY)
        taints = [t.get("key") for t in spec.get("taints") or []]
        held = bool(spec.get("unschedulable")) or HEALTH_TAINT in taints
        mine = ours(reason)
        rid, evidence = reason_run(reason) if mine else (None, None)
        who = None if mine else "spec.unschedulable" + (f", taints {', '.join(map(str, taints))}" if taints else "")
        out[name] = Hold(name, held, mine, who, rid, evidence)
    return out


def tainted(doc: dict) -> set[str]:
    """The nodes of a ``kubectl get nodes -o json`` document that carry our taint (pure)."""
    items = doc.get("items") if doc.get("kind") != "Node" else [doc]
    return {(n.get("metadata") or {}).get("name") for n in items or []
            if HEALTH_TAINT in [t.get("key") for t in (n.get("spec") or {}).get("taints") or []]}


def commands(d: Decision, hv: dict, run_id: str, run_dir: str, drain_pods: bool,
             has_taint: bool = True) -> tuple[tuple[str, ...], ...]:
    """The kubectl argv of one decision (pure): cordon, taint, label, annotate, and ``kubectl drain`` for an
    action of :data:`gpuaccept.causes.HARDWARE_ACTIONS` with cause class hardware when ``drain_pods``; for a
    release, uncordon, the taint removed (when ``has_taint``), labels, the annotation removed."""
    n, rid = d.node, label_value(run_id)
    verdict = (hv.get(d.host) or {}).get("verdict") or "UNKNOWN"
    if d.kind == "hold":
        act = d.action.get("action")
        reason = hold_reason(run_id, act, d.first, run_dir, MAX_FIRST_REASON)
        out = [("kubectl", "cordon", n),
               ("kubectl", "taint", "nodes", n, f"{HEALTH_TAINT}={label_value(act)}:NoSchedule", "--overwrite"),
               ("kubectl", "label", "nodes", n, f"{VERDICT_LABEL}={verdict}", f"{RUN_LABEL}={rid}", "--overwrite"),
               ("kubectl", "annotate", "nodes", n, f"{REASON_KEY}={reason}", "--overwrite")]
        if drain_pods and act in HARDWARE_ACTIONS and d.action.get("cause") == "hardware":
            out.append(("kubectl", "drain", n, "--ignore-daemonsets", "--delete-emptydir-data",
                        f"--timeout={DRAIN_TIMEOUT_S}s"))
        return tuple(out)
    if d.kind == "release":
        return (("kubectl", "uncordon", n),
                *([("kubectl", "taint", "nodes", n, f"{HEALTH_TAINT}:NoSchedule-")] if has_taint else []),
                ("kubectl", "label", "nodes", n, f"{VERDICT_LABEL}={verdict}", f"{RUN_LABEL}={rid}", "--overwrite"),
                ("kubectl", "annotate", "nodes", n, f"{REASON_KEY}-"))
    return ()


def plan(hv: dict, hosts: list[str], run_id: str, run_dir: str, names: Mapping[str, str], nodes_doc: dict | None,
         cordon: bool, resume: bool, passed: Mapping[str, set],
         earlier: Callable[[str | None, str | None], dict | None], drain_max: str | None = None,
         drain_pods: bool = False) -> tuple[list[Step], str | None]:
    """``(steps, brake line)`` (pure): the shared decisions (gpuaccept.scaleout.quarantine.decide) over the
    nodes of ``nodes_doc`` (``kubectl get nodes -o json``; None: not reached), the brake applied when
    ``cordon`` (more cordons than ``drain_max`` of ``hosts``: none, and the line says why), each decision's
    kubectl commands (:func:`commands`). ``names``: host -> node name; the rest as :func:`decide`."""
    holds = None if nodes_doc is None else parse_nodes(nodes_doc)
    found = decide(hv, hosts, {h: names.get(h) or h for h in hosts}, holds, cordon, resume, passed, earlier, WORDS)
    found, line = brake(found, hv, len(hosts), drain_max, WORDS) if cordon else (found, None)
    marked = None if nodes_doc is None else tainted(nodes_doc)
    return [Step(d.host, d.node, commands(d, hv, run_id, run_dir, drain_pods, marked is None or d.node in marked),
                 d.note, d) for d in found], line


# -- I/O ---------------------------------------------------------------------------------------------------
#: seconds the start of a run with --k8s-apply waits for the API server to list the nodes (kubectl's own
#: --request-timeout, and the process's bound a little later): an apply is refused before any node is touched when
#: the cluster cannot be reached, as --slurm-apply is when scontrol ping fails
READY_TIMEOUT_S = 15


def check_ready(kubectl: str = "kubectl", env: Mapping[str, str] | None = None) -> str:
    """The path of ``kubectl`` on PATH once the API server lists the nodes (``kubectl get nodes``, within
    :data:`READY_TIMEOUT_S`). Raises KubectlUnavailable (one line: kubectl's first line of error, at most 300
    characters) when kubectl is not there or the cluster does not answer."""
    path = shutil.which(kubectl, path=(env or os.environ).get("PATH"))
    if path is None:
        raise KubectlUnavailable(f"--k8s-cordon/--k8s-resume: {kubectl} not found on PATH (install kubectl on "
                                 f"this controller, with a kubeconfig for the cluster)")
    try:
        res = subprocess.run([path, "get", "nodes", "-o", "json", f"--request-timeout={READY_TIMEOUT_S}s"],
                             capture_output=True, text=True, timeout=READY_TIMEOUT_S + 15,
                             env=dict(env) if env is not None else None, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        raise KubectlUnavailable(f"--k8s-apply: kubectl get nodes: {e}") from None
    if res.returncode != 0:
        raise KubectlUnavailable(f"--k8s-apply: the Kubernetes API server does not list the nodes (kubectl get nodes: "
                                 f"{first_line(res.stderr) or f'rc {res.returncode}'})")
    return path


def first_line(text: str, limit: int = 300) -> str:
    """The first non-empty line of ``text`` (kubectl repeats its error once per retry), at most ``limit``
    characters."""
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _kubectl(kubectl: str, args: list[str], env: Mapping[str, str] | None) -> subprocess.CompletedProcess:
    return subprocess.run([kubectl, *args], capture_output=True, text=True, timeout=KUBECTL_TIMEOUT_S,
                          env=dict(env) if env is not None else None, stdin=subprocess.DEVNULL)


def get_nodes(kubectl: str, env: Mapping[str, str] | None = None) -> dict:
    """``kubectl get nodes -o json`` as a document. Raises KubectlUnavailable when it fails or is not JSON."""
    try:
        res = _kubectl(kubectl, ["get", "nodes", "-o", "json"], env)
    except (OSError, subprocess.SubprocessError) as e:
        raise KubectlUnavailable(f"kubectl get nodes: {e}") from None
    if res.returncode != 0:
        raise KubectlUnavailable(f"kubectl get nodes: {first_line(res.stderr) or res.returncode}")
    try:
        doc = json.loads(res.stdout)
    except ValueError as e:
        raise KubectlUnavailable(f"kubectl get nodes -o json: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise KubectlUnavailable("kubectl get nodes -o json: not a JSON object")
    return doc


def run_step(rdir: str, run_id: str, hv: dict, hosts: list[str], recs: list[CaseRecord], names: Mapping[str, str],
             cordon: bool, resume: bool, apply: bool, drain_pods: bool = False, kubectl: str = "kubectl",
             env: Mapping[str, str] | None = None, write: Callable[[str], None] = print,
             drain_max: str | None = None, history: str | None = None) -> StepResult:
    """Plan this run's cordons and resumes against ``kubectl get nodes -o json`` and, with ``apply``, make the
    calls in order (a host's later commands are skipped once one fails); ``write`` gets one line per command
    (shell-quoted, with its note) and per note; the lines also go to ``<rdir>/k8s.txt``. With ``history`` (a
    history database path), each node whose calls all succeeded is kept there (table ``k8s_events``) and one
    cordoned again within a day of gpuaccept's uncordon is named "repeating"
    (gpuaccept.scaleout.quarantine.record_history). Raises KubectlUnavailable when the nodes cannot be listed
    and ``apply``; a dry run then plans without node states."""
    unreached = None
    try:
        doc: dict | None = get_nodes(kubectl, env)
    except KubectlUnavailable as e:
        if apply:
            raise
        doc, unreached = None, str(e)
    steps, refused = plan(hv, hosts, run_id, os.path.abspath(rdir), names, doc, cordon, resume, passed_tests(recs),
                          earlier_results(os.path.dirname(os.path.abspath(rdir))), drain_max, drain_pods)
    head = "gpuaccept k8s: " + ("calling kubectl" if apply else "dry run (--k8s-apply makes these calls)")
    if unreached:
        head += f"; the Kubernetes API server was not reached ({unreached}): the cordons printed as if no node were cordoned"
    lines, failed, done = [head] + ([refused] if refused else []), 0, []
    for s in steps:
        if not s.commands:
            lines.append(f"  {s.host}: {s.note}")
            continue
        broken = False
        for argv in s.commands:
            line = f"  {shell_command(argv)}    # {s.host}: {s.note}"
            if apply and broken:
                line += " -- not run: an earlier call for this node failed"
            elif apply:
                res = _kubectl(kubectl, list(argv[1:]), env)
                if res.returncode != 0:
                    failed, broken = failed + 1, True
                    line += f" -- FAILED: {' '.join((res.stderr or res.stdout).split())}"
            lines.append(line)
        if apply and not broken and s.decision is not None:
            done.append(s.decision)
    if not steps:
        lines.append("  nothing to cordon or resume")
    repeating, said = record_history(history, run_id, done, WORDS)
    lines += said
    for ln in lines:
        write(ln)
    try:
        with open(os.path.join(rdir, "k8s.txt"), "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    except OSError:
        pass
    return StepResult(steps, failed, refused, repeating=repeating, lines=lines)


def after_run(rep, hostvars: Mapping[str, Mapping], cordon: bool, resume: bool, apply: bool,
              drain_pods: bool = False, drain_max: str | None = None, history: str | None = None) -> tuple[list[str], bool]:
    """The Kubernetes step at the end of a pytest run (``--k8s-cordon``, ``--k8s-resume``, ``--k8s-apply``,
    ``--k8s-drain-pods``, ``--drain-max``): its lines, for the terminal summary, and whether it went through
    (False: the brake held the cordons back or a call failed; the run then exits non-zero).
    ``rep``: the run's Reporter; ``hostvars``: host -> its parsed vars; ``history``: the history database
    (None: ``--history none``); a repeating cordon is named in summary.md too (gpuaccept.scaleout.drain
    .note_repeating)."""
    from gpuaccept.scaleout.drain import note_repeating
    hosts = list(rep.meta.get("hosts") or [])
    lines: list[str] = []
    try:
        hv = rep.host_verdicts()
        got = run_step(rep.dir, rep.run_id, hv, hosts, list(rep.records.values()),
                       {h: k8s_node_name(h, hostvars.get(h)) for h in hosts}, cordon, resume, apply, drain_pods,
                       write=lines.append, drain_max=drain_max, history=history)
        if got.repeating:
            note_repeating(rep.dir, rep.run_id, rep.meta, list(rep.records.values()), rep.final_standouts,
                           list(rep.meta.get("repeating") or []) + got.repeating, hv=hv, table=rep.gpu_table(),
                           tally=rep.tally())
    except (ConfigError, OSError, subprocess.SubprocessError) as e:
        lines.append(f"gpuaccept k8s: not done: {e}")
        return lines, False
    return lines, got.ok
