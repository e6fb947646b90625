"""Join report folders into one set: ``python -m gpuaccept.scaleout.merge DIR... --into OUT [--history PATH]``.

For runs sharded over controllers or started per node (Slurm ``srun``, Kubernetes), each writing its own
report folder. Reads each folder's ``results.jsonl`` (or ``results.json`` when there is no jsonl) and writes
into OUT, as one run would: ``junit-<layer>.xml``, ``results.json``, ``summary.md``, ``failed-hosts.txt``,
``report.html`` and ``results.jsonl``; with ``--history`` (default: none) the merged run is appended to that
database as one run.

A test of one host present in two folders (a rerun of the failed hosts merged with the original run) keeps
the record of the run that started later (``started`` in results.json; the folder's results.jsonl time where
there is none; the later argument when equal), and the merge says so: one line per pair of runs naming the
hosts, on stdout and under "Merged" in summary.md. A fleet-wide test (no host in its id) keeps its worst
outcome over the folders, with the failure lines of every folder where it failed (:func:`join_fleet`); it
compared only the hosts of its own folder (two hosts in different shards are never compared with each
other). A check judged against different limits in different folders (other threshold files, ``--sku``,
versions) is named in the notes too. A folder whose run did not finish (no results.json, or one with
``"complete": false``: a killed controller or Slurm task) gives each of its hosts an ERROR "did not finish",
unless a later folder tested that host again: the tests it reported stand, the ones it never reached are not
silently missing. ``host_errors`` (``--host-error HOST=REASON``) adds an ERROR for a host that left no folder
at all (a Slurm node whose task never started). A folder whose run is known killed (its controller's lock free:
gpuaccept.reporting.folder.run_state) says so; one whose controller still holds it says "still running".

``--history`` holding a run being merged is refused (its tests would count twice), except to repair a killed
run: when every folder merged is a run the history holds without its end (no run row) and none of them
finished (killed), the merge adds to each run the tests of its results.jsonl the history lacks (those of the
last moment before the kill, or all of them) and marks it killed (``killed_runs``); no merged run is recorded
then (its tests are in the history under their own runs).
Records of pytest's placeholder host ``NOTSET`` (an empty ``--shard`` of an older gpuaccept) are left out with a
note (:func:`placeholder_records`): the merge never makes a host of them.
Exit 0 when merged, 4 on bad input (a bad or missing argument, a folder without results, OUT holding a run).
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

from gpuaccept.config.cmdline import OneLineParser
from gpuaccept.config.outputs import check_output_file, system_folder_problem
from gpuaccept.errors import ConfigError
from gpuaccept.causes import Cause
from gpuaccept.reporting.folder import claim_killed, holds_run, run_state
from gpuaccept.reporting.records import CaseRecord
from gpuaccept.reporting.reporter import Reporter
from gpuaccept.reporting.verdicts import host_verdicts, run_verdict


_FIELDS = {f.name for f in dataclasses.fields(CaseRecord)}
_OUTCOMES = ("passed", "failed", "error", "skipped")


def _record(t) -> CaseRecord:
    """A result record from its JSON object; keys a newer gpuaccept added are ignored. Raises ValueError when
    it is not one (not an object, no nodeid/name/layer, an unknown outcome)."""
    if not isinstance(t, dict) or not all(isinstance(t.get(k), str) for k in ("nodeid", "name", "layer")) \
            or t.get("outcome") not in _OUTCOMES or not isinstance(t.get("figures", []), list):
        raise ValueError("not a gpuaccept result record")
    return CaseRecord(**{k: v for k, v in t.items() if k in _FIELDS})


def read_folder(path: str) -> tuple[dict, list[CaseRecord]]:
    """``(meta, records)`` of one report folder. Raises ValueError naming the file (and line) when it has no
    results or they are not gpuaccept's (a JSON document of another kind, a line that is no record); a last
    results.jsonl line cut short by a kill is left out, the tests before it stand."""
    meta: dict = {}
    recs: dict[str, CaseRecord] = {}
    jpath, jl = os.path.join(path, "results.json"), os.path.join(path, "results.jsonl")
    if os.path.exists(jpath):
        try:
            with open(jpath, encoding="utf-8") as f:
                doc = json.load(f)
            if not isinstance(doc, dict) or not isinstance(doc.get("tests", []), list):
                raise ValueError("not a gpuaccept results.json")
            meta = {k: v for k, v in doc.items() if k not in ("tests", "figures", "outliers")}
            if not os.path.exists(jl):
                for t in doc.get("tests") or []:
                    r = _record(t)
                    recs[r.nodeid] = r
        except (OSError, ValueError) as e:
            raise ValueError(f"{jpath}: unreadable ({e})") from None
    if os.path.exists(jl):
        try:
            with open(jl, encoding="utf-8") as f:
                for n, line in enumerate(f, start=1):
                    if not line.strip():
                        continue
                    try:
                        r = _record(json.loads(line))
                    except ValueError:
                        if not line.endswith("\n"):
                            continue  # a last line cut by a kill: the tests before it stand
                        raise ValueError(f"{jl}:{n}: not a gpuaccept result line") from None
                    recs[r.nodeid] = r
        except UnicodeDecodeError as e:
            raise ValueError(f"{jl}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not recs and not meta:
        raise ValueError(f"{path}: no results.jsonl or results.json (not a gpuaccept report folder)")
    return meta, list(recs.values())


#: the parameter id pytest gives a test whose parameter list is empty (its ``empty_parameter_set_mark``)
PYTEST_PLACEHOLDER = "NOTSET"


def placeholder_records(meta: dict, recs: list[CaseRecord]) -> list[CaseRecord]:
    """The records of ``recs`` that are no host's (pure): a test id with pytest's placeholder parameter
    ``[NOTSET]`` and host ``NOTSET`` where the run's selection (``meta["hosts"]``, when known) names no such
    host. An empty ``--shard`` of an older gpuaccept wrote them ("not run: no result (worker crashed?)");
    the merge leaves them out rather than invent a host."""
    if PYTEST_PLACEHOLDER in (meta.get("hosts") or []):
        return []  # a host really called NOTSET
    return [r for r in recs if r.host == PYTEST_PLACEHOLDER and r.nodeid.endswith(f"[{PYTEST_PLACEHOLDER}]")]


def _started(path: str, meta: dict) -> float:
    """When the folder's run started: results.json's ``started``, else results.jsonl's modification time."""
    v = meta.get("started")
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return os.path.getmtime(os.path.join(path, "results.jsonl"))
    except OSError:
        return 0.0


# outcome -> how bad it is, for fleet-wide tests found in several folders (a test that ran and passed in one
# shard says more than its skip in another, e.g. a shard with one host)
_SEVERITY = {"skipped": 0, "passed": 1, "error": 2, "failed": 3}


def _is_histogram(v) -> bool:
    return isinstance(v, dict) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v.values())


def _join_figures(a: list[dict], b: list[dict]) -> list[dict]:
    """The figures of two shards' records of one fleet-wide test (pure): a figure of the same host, check,
    GPU and extras whose values are both counts by label (``driver_versions {"580.159.04": 3}``) is summed,
    as one run over both shards would have counted; an identical figure is kept once; any other is kept."""
    def key(f: dict) -> str:
        return json.dumps([f.get("host"), f.get("check"), f.get("gpu"), f.get("extra")], sort_keys=True, default=str)
    out = [dict(f) for f in a]
    at = {key(f): i for i, f in enumerate(out)}
    seen = {json.dumps(f, sort_keys=True, default=str) for f in out}
    for f in b:
        i = at.get(key(f))
        if i is not None and _is_histogram(out[i].get("value")) and _is_histogram(f.get("value")):
            total = dict(out[i]["value"])
            for label, n in f["value"].items():
                total[label] = total.get(label, 0) + n
            out[i]["value"] = total
        elif json.dumps(f, sort_keys=True, default=str) not in seen:
            out.append(f)
    return out


def join_fleet(old: CaseRecord, new: CaseRecord) -> CaseRecord:
    """One record of a fleet-wide test from two folders' records of it (pure): the worse outcome (see
    :data:`_SEVERITY`); when it failed or errored, the failure lines of every record that did (each shard
    names its own hosts: none may be lost); the figures of both (:func:`_join_figures`)."""
    worse, other = (new, old) if _SEVERITY.get(new.outcome, 0) > _SEVERITY.get(old.outcome, 0) else (old, new)
    message = worse.message
    if worse.outcome in ("failed", "error") and other.outcome in ("failed", "error"):
        message = "\n".join(dict.fromkeys([*(worse.message or "").splitlines(), *(other.message or "").splitlines()]))
    failures = list(worse.failures) + ([e for e in other.failures if e not in worse.failures]
                                       if other.outcome == worse.outcome == "failed" else [])
    causes = None
    if worse.outcome in ("failed", "error") and (worse.causes is not None or other.causes is not None):
        both = list(worse.causes or []) + (list(other.causes or []) if other.outcome == worse.outcome else [])
        causes = [c for i, c in enumerate(both) if c not in both[:i]]
    return CaseRecord(worse.nodeid, worse.name, worse.host, worse.layer, worse.outcome, message,
                      max(worse.duration_s, other.duration_s), _join_figures(worse.figures, other.figures),
                      worse.run_id, failures=failures, causes=causes)


#: hosts named in one "the later run wins" line, the rest counted (a page a person reads; chosen)
MAX_NOTE_HOSTS = 20
#: at most this many "judged against different limits" lines in the merge notes (a page a person reads; chosen)
MAX_LIMIT_NOTES = 10


def limit_notes(recs: list[CaseRecord]) -> list[str]:
    """Checks whose figures were judged against different limits in the merged records (pure): runs with other
    threshold files, ``--sku`` or gpuaccept versions, whose verdicts are then not comparable. One line per
    SKU x check x extras, naming each limit and the runs that used it; at most :data:`MAX_LIMIT_NOTES` lines
    and a count of the rest."""
    from gpuaccept.reporting.text import limit_text
    seen: dict[tuple, dict[str, set]] = {}
    for r in recs:
        for f in r.figures:
            if f.get("verdict") not in ("pass", "fail"):
                continue
            key = (str(f.get("sku") or "-"), str(f.get("check")),
                   json.dumps(f.get("extra"), sort_keys=True, default=str))
            seen.setdefault(key, {}).setdefault(limit_text(f.get("limit")), set()).add(r.run_id or "?")
    lines = []
    for (sku, check, extra), limits in sorted(seen.items()):
        if len(limits) > 1:
            extra_s = "" if extra == "null" else f" {extra}"
            lines.append(f"{check}{extra_s} ({sku}): judged against different limits: " + "; ".join(
                f"{lim} in run {', '.join(sorted(runs))}" for lim, runs in sorted(limits.items())))
    if len(lines) > MAX_LIMIT_NOTES:
        lines = lines[:MAX_LIMIT_NOTES] + [f"... and {len(lines) - MAX_LIMIT_NOTES} more checks with different limits"]
    return lines


def already_recorded(history_path: str, runs: dict[str, float | None]) -> list[str]:
    """The runs of ``runs`` (run id -> its start time, None when unknown) that the history database at
    ``history_path`` already holds a run row or figures of (sorted ids); a row of the same id but another
    start time is another run that had the same folder name, not this one. [] when the file does not exist.
    Raises ValueError when it is not a history database."""
    import sqlite3
    ids = sorted(str(r) for r in runs if r)
    if not ids or not os.path.exists(history_path):
        return []
    try:
        con = sqlite3.connect(f"file:{history_path}?mode=ro", uri=True)
        try:
            marks = ",".join("?" * len(ids))
            rows = con.execute(f"SELECT run_id, started FROM runs WHERE run_id IN ({marks}) UNION "
                               f"SELECT DISTINCT run_id, started FROM figures WHERE run_id IN ({marks}) UNION "
                               f"SELECT DISTINCT run_id, NULL FROM tests WHERE run_id IN ({marks})", ids * 3).fetchall()
        finally:
            con.close()
    except sqlite3.Error as e:
        raise ValueError(f"--history {history_path}: not a gpuaccept history database ({e})") from None
    out = []
    for rid in sorted({r for r, _ in rows}):
        starts = {float(st) for r, st in rows if r == rid and st is not None}
        want = runs.get(rid)
        if want is None or not starts or any(abs(st - float(want)) < 1e-3 for st in starts):
            out.append(rid)  # the same run (or nothing tells it apart)
    return out


def _refuse(dirs: list[str], into: str, history_path: str | None) -> None:
    """Raise ValueError (one line naming the folder or file) when ``into`` holds a run or is a system folder,
    the history file cannot be written there, a folder is named twice, or ``into`` lies inside one of ``dirs``."""
    if os.path.isdir(into) and holds_run(into):
        raise ValueError(f"--into {into}: already holds a run ({holds_run(into)})")
    why = system_folder_problem(into)
    if why:
        raise ValueError(f"--into {os.path.abspath(into)}: {why}: give a new or empty folder of the merge's own")
    if history_path:
        try:
            check_output_file(history_path, "--history")
        except ConfigError as e:
            raise ValueError(str(e)) from None
    if len({os.path.realpath(d) for d in dirs}) != len(dirs):
        raise ValueError("a report folder is named twice")
    if any(os.path.realpath(into).startswith(os.path.realpath(d) + os.sep) for d in dirs):
        raise ValueError(f"--into {into}: inside one of the folders being merged")


def _record_history(history_path: str, rid: str, meta: dict, into: str, recs: list[CaseRecord],
                    figures: list[dict]) -> list[dict]:
    """Record the merged run in the history at ``history_path``; returns the stand-outs against each figure's
    own history (gpuaccept.reporting.history.standouts)."""
    from gpuaccept.reporting import history

    con = history.connect(history_path)
    try:
        stand = history.standouts(figures, history.references(con, figures))
        hv = {h: v["verdict"] for h, v in host_verdicts(recs, meta["hosts"]).items()}
        history.record_run(con, {"run_id": rid, "started": meta["started"], "inventory": meta["inventory"],
                                 "profile": meta["profile"], "report_dir": os.path.abspath(into),
                                 "verdict": run_verdict(hv)},
                           [history.test_of(r) for r in recs], figures, hv)
    finally:
        con.close()
    return stand


def judge_unreachable(history_path: str | None, recs) -> None:
    """The hosts the merged folders could not reach, judged against the runs the history at ``history_path`` holds
    before this merge (gpuaccept.judging.unreachable: ``unreachable_again`` after a run that could not reach the
    host either), as a run with that history judges them: shards run with ``--history none``. A record whose
    cause changes is given it, and its action is decided again from its causes. A history that cannot be read
    leaves the records as they are, and so does no history (None: none given, or a repair of killed runs)."""
    import sqlite3

    from gpuaccept.judging.unreachable import again
    from gpuaccept.reporting.history import HistoryError, connect_readonly
    from gpuaccept.reporting.history.earlier import unreachable_runs
    if history_path is None or not os.path.isfile(history_path):
        return
    counts: dict[str, tuple] = {}
    try:
        con = connect_readonly(history_path)
    except HistoryError:
        return

    def runs(host: str) -> tuple:
        if host not in counts:
            counts[host] = unreachable_runs(con, host)
        return counts[host]
    try:
        for r in recs:
            new = []
            for c in r.causes or []:
                cause = Cause.from_dict(c)
                up = again(cause, runs) if cause is not None else cause
                new.append(c if up is cause else up.to_dict())
            if any(a is not b for a, b in zip(new, r.causes or [])):
                r.causes, r.action = new, None  # the action follows the new cause (records.record_action)
    except sqlite3.Error:
        return
    finally:
        con.close()


def _repairable(history_path: str, read: list, finished: list[bool], states: dict[int, str],
                recorded: list[str]) -> list[int] | None:
    """The folders (indices of ``read``) whose killed runs the history at ``history_path`` holds without their end,
    when every folder merged is such a run: the merge then adds their missing tests (:func:`_repair_history`);
    None when not (a finished run, one still running, a folder the history does not hold)."""
    import sqlite3
    ids = [str(m.get("run_id") or "") for _, m, _ in read]
    if sorted(set(ids)) != sorted(recorded) or len(set(ids)) != len(ids):
        return None
    if any(finished[i] or states.get(i) == "running" for i in range(len(read))):
        return None
    try:
        con = sqlite3.connect(f"file:{history_path}?mode=ro", uri=True)
        try:
            marks = ",".join("?" * len(ids))
            if con.execute(f"SELECT 1 FROM runs WHERE run_id IN ({marks})", ids).fetchone():
                return None  # a run that recorded its end finished there
        finally:
            con.close()
    except sqlite3.Error:
        return None
    return list(range(len(read)))


def _repair_history(history_path: str, folders: list) -> list[str]:
    """For each ``(dir, meta, records)`` of a killed run the history holds: add the tests it lacks, mark it killed
    (``killed_runs``; its folder's lock file becomes .killed: found once). Returns one note per run, also
    printed."""
    from gpuaccept.reporting import history
    con = history.connect(history_path)
    notes = []
    try:
        for d, meta, recs in folders:
            rid = str(meta["run_id"])
            info = claim_killed(d, "merge") or {}
            n = history.add_missing_tests(con, rid, meta.get("started") or info.get("started"), [
                (history.test_of(r), r.figures) for r in recs])
            try:
                last = os.path.getmtime(os.path.join(d, "results.jsonl"))
            except OSError:
                last = None
            history.mark_killed(con, rid, meta.get("started") or info.get("started"), last, os.path.abspath(d), "merge")
            notes.append(f"history {history_path}: run {rid} did not finish (killed): added {n} record"
                         f"{'s' if n != 1 else ''} of its results.jsonl the history lacked; it is marked killed, and "
                         "no merged run is recorded (its tests are there under run " + rid + ")")
    finally:
        con.close()
    return notes


#: the fleet-wide test that judges one machine under two names in a run (gpuaccept/suites/test_health.py)
FLEET_TEST = "test_fleet_consistency"


def shared_gpu_lines(recs: list[CaseRecord]) -> list[tuple[str, str]]:
    """``[(host, line)]`` of hosts that report the same GPUs (NVML UUID, the ``uuid`` figures of test_gpu_inventory)
    as another host of the merged runs, which no shard's own test_fleet_consistency failed for it (pure): one machine
    reached under two inventory names in two shards, which each shard alone could not see
    (gpuaccept.judging.fleet.shared_gpus)."""
    from gpuaccept.judging.fleet import shared_gpus
    by_host: dict[str, list[dict]] = {}
    named: set = set()  # hosts a shard's own fleet-wide test already failed for sharing GPUs (check same_gpus)
    for r in recs:
        for f in r.figures if r.host else []:
            if f.get("check") == "uuid" and isinstance(f.get("value"), str):
                by_host.setdefault(r.host, []).append({"uuid": f["value"]})
        if not r.host and r.outcome == "failed":
            named.update(e.get("host") for e in r.failures or [] if isinstance(e, dict)
                         and e.get("check") == "same_gpus")
    return [(h, f"{h}: {why}") for h, why in shared_gpus(by_host) if h not in named]


def with_shared_gpus(all_recs: dict[str, CaseRecord]) -> None:
    """Fail the hosts :func:`shared_gpu_lines` finds, in place: their lines join the merged test_fleet_consistency
    record, as one controller over every host would have written them (configuration, ``same_gpus``: the
    inventory). Where no merged run selected that test, nothing is added: the selection decides."""
    from gpuaccept.judging import actions
    fleet = next((r for r in all_recs.values() if not r.host and r.name.split("[")[0] == FLEET_TEST), None)
    if fleet is None:
        return
    for host, line in shared_gpu_lines(list(all_recs.values())):
        cause = Cause("configuration", "same_gpus", host)
        entry = {"host": host, "gpu": None, "pci_bus_id": None, "serial": None, "line": line, "check": "same_gpus",
                 "action": actions.for_cause(cause).to_dict(), "cause": cause.to_dict()}
        found = CaseRecord(fleet.nodeid, fleet.name, None, fleet.layer, "failed", line, 0.0, [], fleet.run_id,
                           failures=[entry], causes=[cause.to_dict()])
        fleet = all_recs[fleet.nodeid] = join_fleet(fleet, found)


def merge(dirs: list[str], into: str, history_path: str | None = None, run_id: str | None = None,
          host_errors: dict[str, str] | None = None, records: list[CaseRecord] | None = None) -> Reporter:
    """Merge ``dirs`` into the folder ``into`` (created; refused with ValueError when it holds a run); see the
    module docstring for which record wins. ``host_errors``: host -> reason, an ERROR for a host that left
    no folder; ``records``: records judged outside the folders (the Kubernetes all-reduce's,
    gpuaccept.scaleout.k8s.allreduce), each replacing a folder's record of its test id. The notes on replaced
    hosts are in ``reporter.meta["merge_notes"]``."""
    _refuse(dirs, into, history_path)
    host_errors = dict(host_errors or {})
    read = [(d, *read_folder(d)) for d in dirs]
    notes = []
    for n, (d, meta, recs) in enumerate(read):
        phantom = placeholder_records(meta, recs)
        if phantom:
            gone = {r.nodeid for r in phantom}
            read[n] = (d, meta, [r for r in recs if r.nodeid not in gone])
            notes.append(f"{d}: {len(phantom)} record(s) of no host left out (test ids ending [NOTSET]: an empty "
                         "--shard of an older gpuaccept, which took pytest's placeholder for a host)")
    # results.json is written at the end of the run with "complete": true (and periodically with false before)
    finished = [bool(meta) and meta.get("complete") is not False for _, meta, _ in read]
    for _, meta, recs in read:  # a folder without results.json (killed early): its run id from its records
        if not meta.get("run_id") and recs and recs[0].run_id:
            meta["run_id"] = recs[0].run_id
    metas = [m for _, m, _ in read]
    # oldest run first, so that a later run's record of the same host's test replaces the earlier one's
    order = sorted(range(len(read)), key=lambda i: (_started(read[i][0], read[i][1]), i))
    all_recs: dict[str, CaseRecord] = {}
    origin: dict[str, int] = {}  # nodeid -> index of the folder its kept record came from
    replaced: dict[str, tuple[int, int]] = {}  # host -> (earlier folder, later folder) whose records replaced
    tested_at: dict[str, list[int]] = {}  # host -> folders (by position in ``order``) holding its tests
    for pos, i in enumerate(order):
        d, meta, recs = read[i]
        for r in recs:
            old = all_recs.get(r.nodeid)
            if r.host:
                tested_at.setdefault(r.host, []).append(pos)
                if old is not None and origin[r.nodeid] != i:
                    replaced[r.host] = (replaced.get(r.host, (origin[r.nodeid], i))[0], i)
                all_recs[r.nodeid], origin[r.nodeid] = r, i
            # a fleet-wide test (no host in its id) appears in every shard's folder: keep the worst outcome and
            # every shard's failure lines, so a fleet failure in any shard is never lost
            elif old is None:
                all_recs[r.nodeid], origin[r.nodeid] = r, i
            else:
                all_recs[r.nodeid] = join_fleet(old, r)
    pairs: dict[tuple[int, int], list[str]] = {}
    for h, ab in replaced.items():  # one line per (earlier, later) pair of folders: a rerun of 500 hosts is one line
        pairs.setdefault(ab, []).append(h)
    for (a, b), hs in pairs.items():
        more = len(hs) - MAX_NOTE_HOSTS
        names = ", ".join(hs[:MAX_NOTE_HOSTS]) + (f" and {more} more" if more > 0 else "")
        notes.append(f"{names}: tests of run {read[b][1].get('run_id') or '?'} ({read[b][0]}) replace those of the "
                     f"earlier run {read[a][1].get('run_id') or '?'} ({read[a][0]}): the later run wins")
    notes += limit_notes(list(all_recs.values()))
    states = {i: run_state(read[i][0])[0] for i in range(len(read)) if not finished[i]}
    how = {"killed": "killed: its controller is gone", "running": "still running: its controller holds it"}
    for pos, i in enumerate(order):  # a run that did not finish: its hosts' unreported tests are not a pass
        d, meta, recs = read[i]
        if finished[i]:
            continue
        for h in dict.fromkeys([*(meta.get("hosts") or []), *(r.host for r in recs if r.host)]):
            if any(p > pos for p in tested_at.get(h, [])) or h in host_errors:
                continue
            n = sum(1 for r in recs if r.host == h)
            host_errors[h] = (f"{h}: the run in {d} did not finish (no complete results.json: "
                              f"{how.get(states[i], 'killed or still running')}); {n} test(s) reported, any other "
                              "test of this host is missing")
    all_recs.update({r.nodeid: r for r in records or []})
    with_shared_gpus(all_recs)
    for h, why in host_errors.items():
        nodeid = f"gpuaccept/scaleout/merge.py::run_incomplete[{h}]"
        all_recs[nodeid] = CaseRecord(nodeid, f"run_incomplete[{h}]", h, "other", "error",
                                      why if why.startswith(f"{h}:") else f"{h}: {why}",
                                      causes=[Cause("interruption", "not_finished", h).to_dict()])
    # the hosts in the order of the folders as given (each folder's selection, then hosts only its records name),
    # then the hosts that left no folder: failed-hosts.txt and the tables do not depend on which run was later
    hosts = list(dict.fromkeys([h for _, m, recs in read for h in [*(m.get("hosts") or []),
                                                                   *(r.host for r in recs if r.host)]]
                               + [r.host for r in all_recs.values() if r.host]))
    host_sku: dict[str, str] = {}
    for m in metas:
        host_sku.update(m.get("host_sku") or {})
    started = min((m.get("started") for m in metas if m.get("started")), default=time.time())
    profiles = sorted({str(m.get("profile")) for m in metas if m.get("profile")})
    repair: list[int] = []  # folders whose killed run the history holds: their missing tests are added to it
    if history_path:
        runs: dict[str, float | None] = {r.run_id: None for r in all_recs.values() if r.run_id}
        runs.update({str(m["run_id"]): m.get("started") for m in metas if m.get("run_id")})
        recorded = already_recorded(history_path, runs)
        if recorded:
            repair = _repairable(history_path, read, finished, states, recorded)
            if repair is None:
                raise ValueError(
                    f"--history {history_path} already holds run(s) {', '.join(recorded)} being merged (the runs "
                    "recorded themselves): the merged run would count their tests and figures twice and compare "
                    "them with themselves; merge without --history, or run the shards with --history none (a killed "
                    "run's folder merged alone with --history adds the tests that history lacks)")
    limits = {m.get("limit") for m in metas}  # shards started with one --limit keep it
    rid = run_id or "merged-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    meta = {"inventory": ", ".join(sorted({str(m.get("inventory")) for m in metas if m.get("inventory")})),
            "limit": limits.pop() if len(limits) == 1 else None, "hosts": hosts, "started": started,
            "profile": ",".join(profiles) or None,
            "host_sku": host_sku, "merged_from": [os.path.abspath(d) for d in dirs],
            "merged_runs": [m.get("run_id") for m in metas], "merge_notes": notes}
    judge_unreachable(None if repair else history_path, all_recs.values())
    rep = Reporter(into, rid, meta)
    rep.add_many(list(all_recs.values()))
    recs = list(rep.records.values())
    figures = rep.figures()
    from gpuaccept.reporting import history, html as html_report
    stand = history.fleet_outliers(figures)
    if repair:
        meta["merge_notes"] += _repair_history(history_path, [read[i] for i in repair])
    elif history_path:
        stand = _record_history(history_path, rid, meta, into, recs, figures) + stand
    rep.final_standouts = stand
    rep.close("not in any merged folder")
    with open(os.path.join(into, "report.html"), "w", encoding="utf-8") as f:
        f.write(html_report.render(rid, meta, recs, figures, stand))
    return rep


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="python -m gpuaccept.scaleout.merge",
                                 description="Join gpuaccept report folders (shards, per-node runs) into one set.")
    ap.add_argument("dirs", nargs="*", metavar="DIR", help="report folders (each with results.jsonl or results.json)")
    ap.add_argument("--into", required=True, metavar="OUT", help="folder for the merged reports (new or empty)")
    ap.add_argument("--history", default=None, metavar="PATH", help="also append the merged run to this database")
    ap.add_argument("--run-id", default=None, help="run id of the merged run (default merged-<UTC timestamp>)")
    ap.add_argument("--host-error", action="append", default=[], metavar="HOST=REASON",
                    help="an ERROR for a host that left no report folder (repeatable)")
    a = ap.parse_args(argv)
    try:
        errs = {}
        for item in a.host_error:
            h, eq, why = item.partition("=")
            if not (h and eq):
                raise ValueError(f"--host-error {item!r}: expected HOST=REASON")
            errs[h] = why or "left no results"
        if not a.dirs and not errs:
            raise ValueError("no report folder given")
        rep = merge(a.dirs, a.into, a.history, a.run_id, errs)
    except (ValueError, OSError) as e:
        print(f"gpuaccept merge: {e}", file=sys.stderr)
        return 4
    if rep.write_error:
        print(f"gpuaccept merge: {rep.write_error}", file=sys.stderr)
        return 1
    n_bad = len([h for h, v in host_verdicts(list(rep.records.values()), rep.meta["hosts"]).items()
                 if v["verdict"] in ("FAIL", "ERROR") and h != "fleet"])
    for note in rep.meta.get("merge_notes") or []:
        print(note)
    print(f"merged {len(a.dirs)} folders, {len(rep.records)} tests, {len(rep.meta['hosts'])} hosts "
          f"({n_bad} failed or errored) into {a.into}")
    return 0


if __name__ == "__main__":
    from gpuaccept.config.outputs import quiet_when_reader_closes
    sys.exit(quiet_when_reader_closes(main))  # a reader that closes (| head) ends the output, no traceback
