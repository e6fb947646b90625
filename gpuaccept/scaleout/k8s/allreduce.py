"""The inter-node all-reduce of the Indexed Job (gpuaccept.scaleout.k8s.manifests.allreduce), judged into the merged
report.

Each pod of the Indexed Job (``python -m gpuaccept.scaleout.k8s rank``) keeps its rank's share in
``RUN_DIR/allreduce/rank-<index>.json``: ``{"index", "node", "rc", "stdout", "stderr", "launched"}`` (``node``: the
Kubernetes node it ran on, from the downward API's ``spec.nodeName``; ``stdout``/``stderr``: the tails of the
``nccl_allreduce`` probe's output). The merge reads them the way the Slurm launcher reads its srun output files
(gpuaccept.scaleout.slurm_allreduce.results_from_outputs), judges them with the Slurm launcher's
:func:`~gpuaccept.scaleout.slurm_allreduce.judge_collective` (every rank ok and agreeing with the world
launched, else the culprits by gpuaccept.runner.multinode.blame), over the ranks' own names ``index-<i>`` (the
world the pods were launched with), then names each rank by the inventory host of its node (``nodes.txt``).

The record is the SSH path's inter-node test (suites/test_nccl_multinode.py) in shape: one fleet-wide
``test_allreduce_multinode`` of the nccl layer; on success the table and the in-place busbw at ``at_bytes``
(gpuaccept.runner.multinode.busbw_at), judged against ``--min-busbw`` through the one pure judge when given,
and each host's rank times; on failure, each culprit a failure (its ranks' own evidence) or an error (its pod
crashed, timed out or left no document: with that cause) filed under its host, and the rest of the message
under the fleet. :func:`read_ranks` reads, :func:`judge_ranks` and :func:`collective_record` are pure.
"""
from __future__ import annotations

import json
import os
import re
from types import SimpleNamespace

from gpuaccept.causes import Cause
from gpuaccept.config.thresholds import inventory_limit
from gpuaccept.judging import actions
from gpuaccept.judging.multinode import Collective, HostResult, busbw_at
from gpuaccept.judging.nccl import wrong_count
from gpuaccept.judging.recorder import FAILURE_KEY, FIGURE_KEY, Recorder
from gpuaccept.reporting.records import CaseRecord, counted_failures
from gpuaccept.scaleout.slurm_allreduce import judge_collective, results_from_outputs

TEST = "test_allreduce_multinode"
NODEID = f"gpuaccept/scaleout/k8s/allreduce.py::{TEST}"
#: lines of the probe's stdout and stderr a rank keeps in its document (the document is stdout's last line;
#: stderr's last line says why when there is none). Chosen.
TAIL_LINES = 40
_RANK_RE = re.compile(r"^rank-(\d+)\.json$")


def label(index: int) -> str:
    """The name of rank ``index`` in the world the pods were launched with (``hosts`` of the probe's arguments)."""
    return f"index-{index}"


def rank_document(index: int, node: str | None, rc: int, stdout: str, stderr: str, launched: dict) -> dict:
    """What one pod keeps (pure): its index, node, the probe's exit code, the tails of its output and what it
    was launched with (``launched``: the probe arguments shared by every pod; their ``marker`` and
    ``ranks_per_node`` are kept, for the world check)."""
    return {"index": index, "node": node, "rc": rc, "stdout": "\n".join(stdout.splitlines()[-TAIL_LINES:]),
            "stderr": "\n".join(stderr.splitlines()[-TAIL_LINES:]),
            "launched": {k: launched.get(k) for k in ("marker", "ranks_per_node")}}


def read_ranks(folder: str) -> dict[int, dict]:
    """The rank documents in ``folder`` (``rank-<i>.json``), by index; a file that is not one is kept as
    ``{"unreadable": why}`` (its rank then has no document). Missing folder: ``{}``."""
    out: dict[int, dict] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return out
    for name in names:
        m = _RANK_RE.match(name)
        if not m:
            continue
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                doc = json.load(f)
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            out[int(m.group(1))] = doc
        except (OSError, ValueError) as e:
            out[int(m.group(1))] = {"unreadable": f"{name}: {e}"}
    return out


def judge_ranks(ranks: dict[int, dict], k: int, hosts_of: dict[str, str], folder: str) -> tuple[Collective, dict]:
    """``(collective, who)`` (pure): the ``k`` ranks judged by the Slurm launcher's rule over the names
    ``index-<i>``, then renamed to inventory hosts: ``who`` maps each rank's name to the host of its node
    (``hosts_of``: node -> host; a rank whose node is not known keeps its ``index-<i>`` name, unless exactly
    one rank and one node are unaccounted for). A rank with no document in ``folder`` is an error of its own
    ("its pod left no document"; cause ``tool``/``probe_crashed``, "printed no document": not an interruption,
    which would count against every host), as is a crashed probe."""
    labels = [label(i) for i in range(k)]
    outputs = {label(i): (str(d.get("stdout") or ""), str(d.get("stderr") or "")) for i, d in ranks.items()
               if i < k and "unreadable" not in d}
    results = results_from_outputs(labels, outputs, False)
    for i, lab in enumerate(labels):
        r = results[lab]
        if lab not in outputs:
            why = (ranks.get(i) or {}).get("unreadable") or f"no {os.path.join(folder, f'rank-{i}.json')}"
            results[lab] = HostResult(lab, "crashed", None, f"its pod left no document ({why}): not scheduled, "
                                      "killed, or its folder not collected",
                                      cause=Cause("tool", "probe_crashed", evidence={"rank": i, "document": None}))
        elif r.kind == "crashed":
            r.cause = Cause("tool", "probe_crashed")
    launched = next((d["launched"] for _, d in sorted(ranks.items()) if isinstance(d.get("launched"), dict)), {})
    col = judge_collective(labels, results, {"ranks_per_node": launched.get("ranks_per_node")},
                           marker=str(launched.get("marker") or ""))
    nodes = {label(i): d.get("node") for i, d in ranks.items() if i < k}
    who = {lab: hosts_of.get(nodes.get(lab) or "", "") for lab in labels}
    left_hosts = [h for n, h in hosts_of.items() if h not in who.values()]
    left_labels = [lab for lab in labels if not who[lab]]
    if len(left_hosts) == 1 and len(left_labels) == 1:
        who[left_labels[0]] = left_hosts[0]
    who = {lab: h or lab for lab, h in who.items()}
    return col, who


def _renamed(col: Collective, who: dict[str, str]) -> Collective:
    """``col`` with its ranks named by their hosts (its message told again for them)."""
    from gpuaccept.judging.multinode import describe_failure
    out = Collective([who[h] for h in col.hosts], col.ok, {who[h]: r for h, r in col.results.items()}, col.doc,
                     [(who.get(h, h), why) for h, why in col.culprits], col.singled_out, col.message,
                     world_problems=list(col.world_problems))
    for h, r in out.results.items():
        r.host = h
    if not col.ok and not col.world_problems:
        out.message = describe_failure(out)
    elif col.world_problems:
        out.message += "\n(" + ", ".join(f"{lab} ran on {who[lab]}" for lab in col.hosts) + ")"
    return out


def collective_record(col: Collective, who: dict[str, str], run_id: str, min_busbw: float | None = None,
                      at_bytes: int | None = None) -> CaseRecord:
    """The merged report's record of the Indexed Job's all-reduce (pure; see the module docstring).
    ``min_busbw``: the floor, GB/s (in-place busbw at ``at_bytes``, else the largest size), None: recorded only."""
    item = SimpleNamespace(originalname=TEST, user_properties=[])
    rec = Recorder(item, "fleet", "nccl")
    col = _renamed(col, who)
    if col.ok:
        doc = col.doc or {}
        busbw, row = busbw_at(doc, at_bytes)
        at = row.get("bytes") or at_bytes
        rpn = int(doc.get("ranks_per_node") or 1)
        rec.record("internode_allreduce_table", doc.get("rows"), extra={
            "hosts": col.hosts, "world_size": doc.get("world_size"), "ranks_per_node": rpn,
            "backend": doc.get("backend"), "label": "k8s indexed job", "ranks": who})
        for i, h in enumerate(col.hosts):
            rec.for_host(h).record("internode_rank_time_us", list((row.get("ip_rank_time_us") or [])[i * rpn:(i + 1) * rpn]),
                                   "us", extra={"bytes": at, "rank": [lab for lab, x in who.items() if x == h][0]})
        wrong, gaps = wrong_count(doc.get("rows") or [], doc.get("wrong_total"))
        rec.record("internode_wrong_elements", None if gaps else wrong, "elements")
        if wrong:
            rec.fail(f"all-reduce over {', '.join(col.hosts)} produced {wrong} wrong elements")
        for g in gaps:
            rec.error(g)
        lim = inventory_limit("internode_busbw_gbps", min_busbw, "merge --min-busbw", at) if min_busbw else None
        rec.record("internode_busbw_gbps", busbw, "GB/s", limit=lim, extra={"bytes": at, "hosts": col.hosts,
                                                                            "algbw_gbps": row.get("ip_algbw_gbps")})
    else:
        rec.record("internode_failure", col.message, extra={"culprits": col.culprits, "world_problems":
                                                              col.world_problems, "singled_out": col.singled_out})
        named = {h for h, _ in col.culprits}
        if col.world_problems:
            rec.error(col.message.replace("\n", "; "), cause=Cause("tool", "gap"))
        for h, why in col.culprits if not col.world_problems else []:
            r = col.results.get(h)
            if r is not None and r.kind in ("crashed", "timeout", "unreachable"):
                rec.for_host(h).error(why, cause=r.cause or Cause("tool", "probe_crashed"))
            else:
                rec.for_host(h).fail(why)
        if not named and not col.world_problems:
            rec.fail(col.message)
    out = rec.outcome()
    figs = [v for k, v in item.user_properties if k == FIGURE_KEY]
    failing = counted_failures(out.kind, out.message, [v for k, v in item.user_properties if k == FAILURE_KEY])
    causes = [c.to_dict() for c in out.causes] if out.kind == "error" else [] if out.kind == "failed" else None
    return CaseRecord(NODEID, TEST, None, "nccl", out.kind, out.message, 0.0, figs, run_id, failures=failing,
                      action=actions.for_case(out.kind, TEST, out.message, failing, None, figs, causes), causes=causes)


def merge_record(run_dir: str, pairs: list[tuple[str, str]], run_id: str, min_busbw: float | None = None,
                 at_bytes: int | None = None) -> CaseRecord | None:
    """The record of the all-reduce whose ranks wrote ``run_dir/allreduce/``, or None when that folder is not
    there (no ``--allreduce``). ``pairs``: ``(host, node)`` of nodes.txt, the Indexed Job's nodes; the rank count
    is theirs (every rank's ``nnodes`` when they name more)."""
    folder = os.path.join(run_dir, "allreduce")
    if not os.path.isdir(folder):
        return None
    ranks = read_ranks(folder)
    k = max([len(pairs)] + [i + 1 for i in ranks])
    col, who = judge_ranks(ranks, k, {n: h for h, n in pairs}, folder)
    return collective_record(col, who, run_id, min_busbw, at_bytes)
