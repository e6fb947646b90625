"""Slurm, opt-in: drain the hosts a run says need hands, resume the ones a later run proves well.

``--slurm-drain`` drains every host whose action (gpuaccept.judging.actions) is one of the data file's
``slurm_drain`` actions (drain-rma, reboot, reset-gpu)::

    scontrol update NodeName=<node> State=DRAIN Reason="gpuaccept <run id>: <action>: <first reason> (evidence <dir>)"

``--slurm-resume`` resumes a host that passes in this run and whose drain reason gpuaccept wrote, when this run
passed every test that failed or errored for it in the run that drained it (found by the run id in the reason,
under the reports root, else at the reason's evidence folder): a PASS of another selection (a burn-in alone
after a row-remap failure) does not put it back. A drain someone else set (a reason not starting with
``gpuaccept ``) is never touched, neither replaced by a drain of ours nor resumed.

A brake: more drains than ``--drain-max`` of the selected nodes (default 10 %, at least one; a
count ``N`` or a share ``N%``) drains none (:func:`brake`), dry run or not: so many nodes failing at once is more
likely the fleet's (an image, DNS) than their parts'. The line says how many, of how many, the limit and the
most common cause among them, and the run exits non-zero (the run's own code when it is non-zero, else 1).
Each call that succeeded is recorded in the history database (``slurm_events``); a node drained again
within a day of gpuaccept's resume is named "repeating" in the lines and in summary.md.

The Slurm node name is the host var ``slurm_node_name``, default the inventory name up to its first dot.
Without ``--slurm-apply`` nothing is changed: the commands are printed (a dry run); without a controller
(``scontrol`` missing or not answering) the dry run says so and prints the drains as if no node were drained (no
resume can be planned), the run's exit code its own. With ``--slurm-apply``, ``scontrol`` missing or a
controller that does not answer ``scontrol ping`` is refused before any node is touched (:func:`check_ready`,
exit 4). The rules shared with Kubernetes (which hosts, the brake, when to resume) are
gpuaccept.scaleout.quarantine's. :func:`plan` is pure; :func:`run_step` does the I/O. Also runnable on a finished run's folder:
``python -m gpuaccept.scaleout.drain REPORT_DIR [--drain] [--resume] [--apply] [--inventory FILE]
[--drain-max N|N%] [--history PATH|none]``.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from gpuaccept.errors import ConfigError
from gpuaccept.config.cmdline import OneLineParser
from gpuaccept.config.options import DRAIN_MAX_DEFAULT, parse_drain_max
from gpuaccept.reporting.records import CaseRecord
from gpuaccept.reporting.verdicts import host_verdicts
from gpuaccept.scaleout.quarantine import (REASON_HEAD, Decision, Hold, Words, brake as shared_brake, decide,
                                           earlier_results, hold_reason, needed_tests, ours, passed_tests,
                                           reason_run, record_history, records_of, StepResult)  # noqa: F401 (REASON_HEAD, needed_tests: kept names)
from gpuaccept.transport.shell import command as shell_command

#: a drain reason's first-reason part is cut to this many characters (``scontrol show node`` prints it on one
#: line; sinfo -R's default column is 20 wide, so the run id and action come first). Chosen.
MAX_FIRST_REASON = 160
#: seconds ``scontrol`` may take per call (a controller that does not answer in this time is down). Chosen.
SCONTROL_TIMEOUT_S = 30.0
EXIT_BAD_INPUT = 4


class SlurmUnavailable(ConfigError):
    """``scontrol`` is not found, or the Slurm controller does not answer ``scontrol ping``."""


@dataclass(frozen=True)
class NodeState:
    """One node as ``scontrol show node -o`` shows it: ``state`` (``IDLE+DRAIN``), ``reason`` without Slurm's
    ``[user@time]`` suffix (None when it has none)."""

    name: str
    state: str
    reason: str | None

    @property
    def drained(self) -> bool:
        """DRAIN, DRAINING or DRAINED in the state's flags."""
        return "DRAIN" in self.state.upper()


@dataclass(frozen=True)
class Step:
    """One host's part of the plan: ``command`` (argv, None when nothing is to be done) and ``note`` (why)."""

    host: str
    node: str
    command: tuple[str, ...] | None
    note: str


def node_name(host: str, host_vars: Mapping | None = None) -> str:
    """The Slurm node name of inventory host ``host``: its ``slurm_node_name`` var, else the name up to its
    first dot (``gpu-07.example.com`` -> ``gpu-07``)."""
    given = (host_vars or {}).get("slurm_node_name")
    return str(given) if given else host.split(".", 1)[0]


_NODE_RE = re.compile(r"^NodeName=(\S+)")
_STATE_RE = re.compile(r"\bState=(\S+)")
_REASON_RE = re.compile(r"\bReason=(.*?)(?:\s+\[[^\]@]*@[^\]]*\])?\s*$")


def parse_show_nodes(text: str) -> dict[str, NodeState]:
    """``scontrol show node -o`` (one node a line; ``Reason=`` last, with ``[user@time]``) -> node -> state."""
    out = {}
    for line in text.splitlines():
        m = _NODE_RE.match(line.strip())
        if not m:
            continue
        st = _STATE_RE.search(line)
        rs = _REASON_RE.search(line)
        out[m.group(1)] = NodeState(m.group(1), st.group(1) if st else "", rs.group(1).strip() if rs else None)
    return out


def drain_reason(run_id: str, action: str, first_reason: str, evidence: str) -> str:
    """``"gpuaccept <run id>: <action>: <first reason> (evidence <dir>)"`` (gpuaccept.scaleout.quarantine.hold_reason,
    the first reason cut to :data:`MAX_FIRST_REASON`)."""
    return hold_reason(run_id, action, first_reason, evidence, MAX_FIRST_REASON)


#: how the Slurm step names things in its lines (gpuaccept.scaleout.quarantine.Words)
WORDS = Words("slurm", "Slurm", "scontrol show node", "drain", "drained", "the Slurm controller was not reached")


def hold_of(st: NodeState) -> Hold:
    """A Slurm node's state as the shared rules read it: held when drained, ours when its reason is."""
    rid, evidence = reason_run(st.reason or "") if ours(st.reason) else (None, None)
    return Hold(st.name, st.drained, ours(st.reason), st.reason, rid, evidence)


def _step(d: Decision, run_id: str, run_dir: str) -> Step:
    if d.kind == "hold":
        reason = drain_reason(run_id, d.action["action"], d.first, run_dir)
        return Step(d.host, d.node, ("scontrol", "update", f"NodeName={d.node}", "State=DRAIN", f"Reason={reason}"),
                    d.note)
    if d.kind == "release":
        return Step(d.host, d.node, ("scontrol", "update", f"NodeName={d.node}", "State=RESUME"), d.note)
    return Step(d.host, d.node, None, d.note)


def decisions(hv: dict, hosts: list[str], names: Mapping[str, str], states: Mapping[str, NodeState] | None,
              drain: bool, resume: bool, passed: Mapping[str, set],
              earlier: Callable[[str | None, str | None], dict | None]) -> list[Decision]:
    """gpuaccept.scaleout.quarantine.decide over Slurm's node states (pure); arguments as :func:`plan`."""
    holds = None if states is None else {n: hold_of(st) for n, st in states.items()}
    names = {h: names.get(h) or node_name(h) for h in hosts}
    return decide(hv, hosts, names, holds, drain, resume, passed, earlier, WORDS)


def plan(hv: dict, hosts: list[str], run_id: str, run_dir: str, names: Mapping[str, str],
         states: Mapping[str, NodeState] | None, drain: bool, resume: bool, passed: Mapping[str, set],
         earlier: Callable[[str | None, str | None], dict | None]) -> list[Step]:
    """What to do per host, in selection order (pure). ``hv``: this run's host verdicts (with ``action``);
    ``names``: host -> Slurm node name; ``states``: node -> :class:`NodeState` (a node missing there is not
    in Slurm; None: not known, the controller not reached: every drain planned, no resume); ``passed``:
    :func:`passed_tests` of this run; ``earlier(run id, evidence folder)``: the results.json document of the
    run that drained a node, or None when it cannot be found. The rules: gpuaccept.scaleout.quarantine.decide."""
    return [_step(d, run_id, run_dir)
            for d in decisions(hv, hosts, names, states, drain, resume, passed, earlier)]


# -- I/O ---------------------------------------------------------------------------------------------------
def _scontrol(scontrol: str, args: list[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([scontrol, *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S,
                          env=dict(env) if env is not None else None, stdin=subprocess.DEVNULL)


def check_ready(scontrol: str = "scontrol", env: Mapping[str, str] | None = None) -> str:
    """The path of ``scontrol`` once the controller answers ``scontrol ping`` (UP). Raises SlurmUnavailable
    with one line (``scontrol`` not found, not answering, or down)."""
    path = shutil.which(scontrol, path=(env or os.environ).get("PATH"))
    if path is None:
        raise SlurmUnavailable(f"--slurm-drain/--slurm-resume: {scontrol} not found on PATH (install Slurm's "
                               f"client tools on this controller)")
    try:
        res = _scontrol(path, ["ping"], env)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SlurmUnavailable(f"--slurm-drain/--slurm-resume: {path} ping: {e}") from None
    if res.returncode != 0 or " is UP" not in res.stdout:
        said = " ".join((res.stdout + " " + res.stderr).split()) or f"rc {res.returncode}"
        raise SlurmUnavailable(f"--slurm-drain/--slurm-resume: the Slurm controller does not answer "
                               f"scontrol ping: {said}")
    return path


def node_states(scontrol: str, env: Mapping[str, str] | None = None) -> dict[str, NodeState]:
    """Every node's state and reason (``scontrol show node -o``). Raises SlurmUnavailable when it fails."""
    res = _scontrol(scontrol, ["show", "node", "-o"], env)
    if res.returncode != 0:
        raise SlurmUnavailable(f"scontrol show node: {' '.join(res.stderr.split()) or res.returncode}")
    return parse_show_nodes(res.stdout)


def run_step(rdir: str, run_id: str, hv: dict, hosts: list[str], recs: list[CaseRecord],
             names: Mapping[str, str], drain: bool, resume: bool, apply: bool, scontrol: str = "scontrol",
             env: Mapping[str, str] | None = None, write: Callable[[str], None] = print,
             drain_max: str | None = None, history: str | None = None,
             apply_option: str = "--slurm-apply") -> StepResult:
    """Plan this run's drains and resumes against Slurm's node states and, with ``apply``, make the calls;
    ``write`` gets one line per step (the command, shell-quoted, and its note; a failed call's error). The
    lines also go to ``<rdir>/slurm.txt``. More drains than ``drain_max`` allows of the selected ``hosts``
    (:func:`brake`): none is made, dry run or not, and the brake's line says why. With ``history`` (a history
    database path), the calls that succeeded are recorded there and a node drained again within a day of
    gpuaccept's resume is named "repeating" (gpuaccept.reporting.history.drains). Raises SlurmUnavailable when
    scontrol cannot list the nodes and ``apply``; a dry run without a controller plans without node states
    (:func:`plan`) and its head line says the controller was not reached. ``apply_option``: the option that makes
    the calls where the dry run's head line names it (pytest's ``--slurm-apply``, this module's ``--apply``)."""
    unreached = None
    try:
        states: dict[str, NodeState] | None = node_states(scontrol, env)
    except (SlurmUnavailable, OSError, subprocess.SubprocessError) as e:
        if apply:
            raise SlurmUnavailable(str(e)) from None
        states, unreached = None, " ".join(str(e).split()) or type(e).__name__
    found = decisions(hv, hosts, names, states, drain, resume, passed_tests(recs),
                      earlier_results(os.path.dirname(os.path.abspath(rdir))))
    found, refused = shared_brake(found, hv, len(hosts), drain_max, WORDS) if drain else (found, None)
    # the run's own folder, not a link to it (reports/latest moves with the next run): the reason keeps pointing at
    # this run's evidence
    steps = [_step(d, run_id, os.path.realpath(rdir)) for d in found]
    head = "gpuaccept slurm: " + ("calling scontrol" if apply else f"dry run ({apply_option} makes these calls)")
    if unreached:
        head += (f"; the Slurm controller was not reached ({unreached}): node states not read, the drains "
                 "printed as if no node were drained")
    lines, failed, done = [head] + ([refused] if refused else []), 0, set()
    for i, s in enumerate(steps):
        if s.command is None:
            lines.append(f"  {s.host}: {s.note}")
            continue
        line = f"  {shell_command(s.command)}    # {s.host}: {s.note}"
        if apply:
            res = _scontrol(scontrol, list(s.command[1:]), env)
            if res.returncode != 0:
                failed += 1
                line += f" -- FAILED: {' '.join((res.stderr or res.stdout).split())}"
            else:
                done.add(i)
        lines.append(line)
    if not steps:
        lines.append("  nothing to drain or resume")
    repeating, said = record_history(history, run_id, [found[i] for i in sorted(done)], WORDS)
    lines += said
    for ln in lines:
        write(ln)
    try:
        with open(os.path.join(rdir, "slurm.txt"), "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    except OSError:
        pass
    return StepResult(steps, failed, refused, repeating=repeating, lines=lines)


def note_repeating(rdir: str, run_id: str, meta: dict, recs: list[CaseRecord], slow: list[dict] | None,
                   repeating: list[str], **kept) -> None:
    """summary.md written again with its "repeating:" lines (``meta["repeating"]``; the Slurm step comes after
    the run's files). ``kept``: summary_markdown's ``hv``, ``table`` and ``tally`` when the caller holds them."""
    from gpuaccept.reporting.folder import atomic_write
    from gpuaccept.reporting.summary import summary_markdown
    meta["repeating"] = list(repeating)
    atomic_write(os.path.join(rdir, "summary.md"), summary_markdown(run_id, meta, recs, slow, **kept))


def after_run(rep, hostvars: Mapping[str, Mapping], drain: bool, resume: bool, apply: bool,
              drain_max: str | None = None, history: str | None = None) -> tuple[list[str], bool]:
    """The Slurm step at the end of a pytest run (``--slurm-drain``, ``--slurm-resume``, ``--slurm-apply``,
    ``--drain-max``): the lines :func:`run_step` wrote, for the terminal summary, and whether it went through
    (False: the brake held the drains back, a call failed, or scontrol failed now: the run then exits non-zero,
    see gpuaccept.plugin.reports). ``rep``: the run's :class:`gpuaccept.reporting.reporter.Reporter`;
    ``hostvars``: host -> its parsed vars; ``history``: the history database (None: ``--history none``)."""
    hosts = list(rep.meta.get("hosts") or [])
    lines: list[str] = []
    try:
        hv = rep.host_verdicts()
        got = run_step(rep.dir, rep.run_id, hv, hosts, list(rep.records.values()),
                       {h: node_name(h, hostvars.get(h)) for h in hosts}, drain, resume, apply, write=lines.append,
                       drain_max=drain_max, history=history)
        if got.repeating:
            note_repeating(rep.dir, rep.run_id, rep.meta, list(rep.records.values()), rep.final_standouts,
                           got.repeating, hv=hv, table=rep.gpu_table(), tally=rep.tally())
    except (ConfigError, OSError, subprocess.SubprocessError) as e:
        lines.append(f"gpuaccept slurm: not done: {e}")
        return lines, False
    return lines, got.ok


def main(argv: list[str] | None = None) -> int:
    """``python -m gpuaccept.scaleout.drain REPORT_DIR [--drain] [--resume] [--apply] [--inventory FILE]``: the
    Slurm step on a finished run's folder. Exit 0 when every call made succeeded, 1 when one failed or the
    brake (``--drain-max``) held the drains back, 4 on bad input (no results.json, a bad ``--drain-max``,
    scontrol missing or the controller down)."""
    p = OneLineParser(prog="python -m gpuaccept.scaleout.drain", description=__doc__.splitlines()[0])
    p.add_argument("report_dir", help="a finished run's report folder (its results.json)")
    p.add_argument("--drain", action="store_true", help="drain the hosts whose action needs it")
    p.add_argument("--resume", action="store_true", help="resume passing hosts gpuaccept drained")
    p.add_argument("--apply", action="store_true", help="make the scontrol calls (default: print them)")
    p.add_argument("--inventory", default=None, help="inventory for slurm_node_name (default: the run's)")
    p.add_argument("--drain-max", default=None, metavar="N|N%",
                   help=f"drain no more than this many of the run's hosts (default {DRAIN_MAX_DEFAULT.replace('%', '%%')}, at least 1)")
    p.add_argument("--history", default=None, metavar="PATH|none",
                   help="history database recording the calls made (default: history.sqlite beside the run's "
                        "folder, when there is one)")
    a = p.parse_args(argv)
    if a.drain_max is not None:
        try:
            parse_drain_max(a.drain_max)
        except ValueError as e:
            print(f"gpuaccept.scaleout.drain: --drain-max {a.drain_max}: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    try:
        with open(os.path.join(a.report_dir, "results.json"), encoding="utf-8") as f:
            results = json.load(f)
    except (OSError, ValueError) as e:
        print(f"gpuaccept.scaleout.drain: {a.report_dir}: no readable results.json ({e})", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not (a.drain or a.resume):
        print("gpuaccept.scaleout.drain: say --drain, --resume or both", file=sys.stderr)
        return EXIT_BAD_INPUT
    hosts = list(results.get("hosts") or [])
    names = {h: node_name(h) for h in hosts}
    inv_path = a.inventory or results.get("inventory")
    try:
        path = check_ready() if a.apply else (shutil.which("scontrol") or "scontrol")  # a dry run needs none
        if inv_path:
            from gpuaccept.config.inventory import load_inventory
            inv = load_inventory(inv_path)
            names = {h: node_name(h, inv.hosts[h].vars) if h in inv.hosts else names[h] for h in hosts}
        recs = records_of(results)
        hv = host_verdicts(recs, hosts)
        rid = str(results.get("run_id"))
        got = run_step(a.report_dir, rid, hv, hosts, recs, names, a.drain, a.resume, a.apply, path,
                       drain_max=a.drain_max, history=_history_path(a.history, a.report_dir), apply_option="--apply")
        if got.repeating:
            meta = {k: v for k, v in results.items() if k not in ("tests", "figures", "outliers")}
            note_repeating(a.report_dir, rid, meta, recs, results.get("outliers"), got.repeating, hv=hv)
    except ConfigError as e:
        print(f"gpuaccept.scaleout.drain: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0 if got.ok else 1


def _history_path(given: str | None, report_dir: str) -> str | None:
    """The module's ``--history``: ``none`` -> None; a path as given; by default the ``history.sqlite`` beside
    the run's folder (where a run's default history lies: ``reports/history.sqlite`` beside
    ``reports/<run>``) when it exists, else None."""
    if given == "none":
        return None
    if given:
        return given
    beside = os.path.join(os.path.dirname(os.path.abspath(report_dir)), "history.sqlite")
    return beside if os.path.isfile(beside) else None


if __name__ == "__main__":
    from gpuaccept.config.outputs import quiet_when_reader_closes
    sys.exit(quiet_when_reader_closes(main))  # a reader that closes (| head) ends the output, no traceback
