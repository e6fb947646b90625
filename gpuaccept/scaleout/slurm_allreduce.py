"""Inter-node all-reduce under Slurm: the ``nccl_allreduce`` probe's ranks launched through the allocation.

Inside an allocation (``salloc -N K`` or ``sbatch``)::

    python -m gpuaccept.scaleout.slurm_allreduce [--backend nccl|gloo] [--ranks-per-node N] [--min-busbw GB/s]
        [--at-bytes B] [--args JSON] [--deadline-s S] [--json OUT]

is the SSH path's ring (:func:`gpuaccept.runner.multinode.run_collective`) with ``srun`` instead of SSH: one
``srun --ntasks-per-node=1`` task per node runs the probe in multi-node mode with the same arguments the SSH
path passes (``nnodes``, ``node_rank``, ``ranks_per_node``, ``master_addr``, ``master_port``, ``marker``,
``host``, ``hosts``, ``deadline_s``, ``timeout_s``, ``stall_s``); each task takes its node rank, the node
count and the node list from its ``SLURM_*`` variables (:func:`gpuaccept.scaleout.slurm.slurm_world`), so the ranks
meet through the allocation, not through an inventory. Node 0 (the list's first node) hosts the rendezvous:
its address is ``--master-addr``, else its ``NodeAddr`` in ``scontrol show node``, else its name.
The port is ``--port``, else one derived from the job id (:func:`job_port`); a port found taken on node 0
(the probe's ``outcome: addr_in_use``) is retried on the next one, :data:`gpuaccept.runner.multinode.PORT_ATTEMPTS`
attempts in all. The environment reaches the ranks through srun (``NCCL_SOCKET_IFNAME`` and the like).

Each task's document is its srun output file; the collective is judged by the SSH path's pure functions:
:func:`~gpuaccept.runner.multinode.blame` and :func:`~gpuaccept.runner.multinode.describe_failure` name the culprits,
:func:`~gpuaccept.runner.multinode.busbw_at` and :func:`~gpuaccept.runner.multinode.judge_figures` the figure. Exit 0 when
the collective formed and passed, 1 when it failed or its figure is under ``--min-busbw``, 4 on bad input.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from gpuaccept.config.cmdline import OneLineParser
from gpuaccept.runner.multinode import (ABORT_GRACE_S, CALL_MARGIN_S, PORT_ATTEMPTS, Collective, HostResult, blame, busbw_at,
                        describe_failure, judge_figures, new_marker)

from gpuaccept.runner.multinode import disagreeing, pinned_env, world_failure
from gpuaccept.scaleout.slurm import EXIT_BAD_INPUT, SlurmEnvError, folder_name, scontrol_hostnames, slurm_world

PROBE_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "probes", "nccl_allreduce.py")
#: first port of :func:`job_port`'s range and the range's size (above the usual ephemeral range's start at
#: 32768 on Linux would collide with outgoing connections; 20000-29999 is below it)
PORT_BASE, PORT_SPAN = 20000, 10000
#: seconds srun gets after SIGTERM (forwarded to the probes, which kill their ranks and report) before SIGKILL
TERM_GRACE_S = 15.0


def job_port(job_id: str, attempt: int) -> int:
    """A rendezvous port for ``attempt`` (1, 2, ...) of a collective in job ``job_id`` (pure):
    ``PORT_BASE + (job id * 7919 + (attempt-1) * 101) % PORT_SPAN``, so two jobs on one node rarely pick one
    port and each retry moves away from the last."""
    jid = int(re.sub(r"\D", "", job_id) or 0)
    return PORT_BASE + (jid * 7919 + (attempt - 1) * 101) % PORT_SPAN


def node_addr(scontrol_node_text: str) -> str | None:
    """``NodeAddr`` from ``scontrol show node -o NAME`` output (pure), or None when absent."""
    m = re.search(r"(?:^|\s)NodeAddr=(\S+)", scontrol_node_text)
    return m.group(1) if m else None


def node_addrs(scontrol_nodes_text: str) -> dict[str, str]:
    """``{NodeName: NodeAddr}`` from ``scontrol show node -o`` output, one node a line (pure)."""
    out = {}
    for line in scontrol_nodes_text.splitlines():
        name = re.search(r"(?:^|\s)NodeName=(\S+)", line)
        addr = node_addr(line)
        if name and addr:
            out[name.group(1)] = addr
    return out


def scontrol_node_addrs(nodes: list[str]) -> dict[str, str]:
    """Every node's ``NodeAddr`` from ``scontrol show node -o`` (a node it does not list: its own name)."""
    exe = shutil.which("scontrol")
    found = {}
    if exe:
        res = subprocess.run([exe, "show", "node", "-o", ",".join(nodes)], capture_output=True, text=True,
                             timeout=60)
        if res.returncode == 0:
            found = node_addrs(res.stdout)
    return {n: found.get(n, n) for n in nodes}


def probe_args(base: dict, world) -> dict:
    """The probe's arguments on one node (pure): ``base`` (shared by every node) plus this node's place in
    ``world`` (a :class:`gpuaccept.scaleout.slurm.SlurmWorld`): nnodes, node_rank, host, hosts."""
    return {**base, "nnodes": world.nnodes, "node_rank": world.node_rank, "host": world.host,
            "hosts": list(world.hosts)}


def results_from_outputs(hosts: list[str], outputs: dict[str, tuple[str, str]], timed_out: bool) -> dict:
    """Each host's :class:`HostResult` from its task's (stdout, stderr) (pure). The document is the last
    stdout line that parses as a JSON object; ``{"failed": true, "msg"}`` (bad arguments, a crash) is
    ``crashed``; no document is ``timeout`` when srun was stopped at its limit, else ``crashed`` with the
    last stderr line (the task never ran the probe: node down, python missing)."""
    results = {}
    for h in hosts:
        out, err = outputs.get(h, ("", ""))
        doc = None
        for line in reversed(out.splitlines()):
            try:
                cand = json.loads(line)
            except ValueError:
                continue
            if isinstance(cand, dict):
                doc = cand
                break
        if doc is None:
            last = (err.strip().splitlines() or ["no output"])[-1]
            kind = "timeout" if timed_out else "crashed"
            why = "stopped answering: srun stopped at its limit" if timed_out else f"no probe document: {last}"
            results[h] = HostResult(h, kind, None, why)
        elif doc.get("failed"):
            results[h] = HostResult(h, "crashed", None, f"probe failed: {doc.get('msg')}")
        else:
            results[h] = HostResult(h, "ok" if doc.get("ok") else "failed", doc,
                                    "" if doc.get("ok") else str(doc.get("error")))
    return results


def _task(base_json: str) -> int:
    """One node's share (inside srun): add this node's place from SLURM_* and exec the probe."""
    try:
        world = slurm_world(os.environ, scontrol_hostnames)
    except SlurmEnvError as e:
        print(json.dumps({"failed": True, "msg": str(e)}), flush=True)
        return EXIT_BAD_INPUT
    args = probe_args(json.loads(base_json), world)
    os.execv(sys.executable, [sys.executable, PROBE_FILE, json.dumps(args)])
    return 0  # not reached


def _read_outputs(nodes: list[str], outdir: str) -> dict[str, tuple[str, str]]:
    outputs = {}
    for i, h in enumerate(nodes):
        texts = []
        for kind in ("out", "err"):
            try:
                with open(os.path.join(outdir, f"{kind}-{i}"), errors="replace") as f:
                    texts.append(f.read())
            except OSError:
                texts.append("")
        outputs[h] = (texts[0], texts[1])
    return outputs


def _run_srun(nodes: list[str], base: dict, outdir: str, limit_s: float) -> tuple[dict, list[str], list[str]]:
    """srun the probe on every node; returns (outputs, late nodes: no document by ``limit_s``, aborted
    nodes). As on the SSH path, the first node to answer with a failure starts a grace of
    :data:`ABORT_GRACE_S` seconds for the others to report their own evidence; then srun gets SIGTERM, which it forwards to the probes still running (each
    kills its ranks and reports ``outcome: aborted``), and SIGKILL :data:`TERM_GRACE_S` seconds later."""
    k = str(len(nodes))
    cmd = [shutil.which("srun") or "srun", f"--nodes={k}", f"--ntasks={k}", "--ntasks-per-node=1",
           "--kill-on-bad-exit=0", f"--output={outdir}/out-%n", f"--error={outdir}/err-%n",
           sys.executable, "-m", "gpuaccept.scaleout.slurm_allreduce", "--task", json.dumps(base)]
    proc = subprocess.Popen(cmd, start_new_session=True)
    end = time.monotonic() + limit_s
    abort_at, aborted, term_at, late = None, [], None, []
    while proc.poll() is None:
        now = time.monotonic()
        if term_at is None and now >= end:
            term_at = now
            late = [h for h, r in results_from_outputs(nodes, _read_outputs(nodes, outdir), False).items()
                    if r.doc is None and r.kind == "crashed"]
            proc.send_signal(signal.SIGTERM)
        elif term_at is None:
            res = results_from_outputs(nodes, _read_outputs(nodes, outdir), False)
            answered = {h: r for h, r in res.items() if r.doc is not None or r.kind == "crashed" and
                        r.error.startswith("probe failed")}
            if abort_at is None and any(r.kind != "ok" for r in answered.values()):
                abort_at = now + ABORT_GRACE_S
            if abort_at is not None and now >= abort_at:
                aborted = [h for h in nodes if h not in answered]
                term_at = now
                proc.send_signal(signal.SIGTERM)  # forwarded by srun to the tasks
        elif now >= term_at + TERM_GRACE_S:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            break
        time.sleep(0.2)
    return _read_outputs(nodes, outdir), late, aborted


def run(nodes: list[str], master: str, base_args: dict, deadline_s: int, port: int | None, job: str,
        workdir: str, addresses: dict[str, str] | None = None) -> Collective:
    """One ring all-reduce over the allocation's ``nodes`` (node 0 first) through srun: see the module
    docstring. ``addresses``: each node's address (``NodeAddr``), so that :func:`blame` can map the
    addresses in the others' network errors to a node. Never raises for a node's failure: the Collective says
    who failed and why."""
    t0 = time.monotonic()
    results: dict = {}
    marker, p, attempt = "", None, 0
    for attempt in range(1, PORT_ATTEMPTS + 1):
        marker = new_marker()
        p = port + attempt - 1 if port else job_port(job, attempt)
        base = {**base_args, "master_addr": master, "master_port": p, "marker": marker, "deadline_s": deadline_s}
        base.setdefault("timeout_s", deadline_s)
        outdir = tempfile.mkdtemp(prefix=f"attempt{attempt}-", dir=workdir)
        limit = deadline_s + CALL_MARGIN_S
        outputs, late, aborted = _run_srun(nodes, base, outdir, limit)
        results = results_from_outputs(nodes, outputs, bool(late))
        for h in late:  # the probe's own deadline did not stop it: the node stopped answering
            results[h] = HostResult(h, "timeout", results[h].doc, f"stopped answering: no probe document "
                                    f"within {limit:.0f}s (the probe's deadline is {deadline_s}s)")
        for h in aborted:  # what our abort caused is no evidence against the node (as on the SSH path)
            r = results[h]
            if (r.kind == "failed" and (r.doc or {}).get("outcome") == "aborted") or r.kind == "crashed":
                r.kind = "aborted"
        r0 = results[nodes[0]]
        if all(r.kind == "ok" for r in results.values()):
            break
        if not (r0.doc and r0.doc.get("outcome") == "addr_in_use"):
            break
    return judge_collective(list(nodes), results, base_args, addresses, marker=marker, master_addr=master,
                            master_port=p, attempts=attempt, wall_s=round(time.monotonic() - t0, 3))


def judge_collective(nodes: list[str], results: dict[str, HostResult], base_args: dict,
                     addresses: dict[str, str] | None = None, **fields) -> Collective:
    """The ring's outcome from each node's :class:`HostResult` (pure; node 0 first in ``nodes``): every node
    ``ok`` and their documents agreeing with the world launched (:func:`world_failure`, ``ranks_per_node`` from
    ``base_args``, else node 0's document, else 1) is a success with node 0's document; documents that disagree
    are a failure naming them (``world_problems``, no node singled out, no figure); any other failure is
    blamed by :func:`blame` (``addresses``: node -> address, for the network errors' peers) and told by
    :func:`describe_failure`. ``fields``: the rest of the :class:`Collective` (marker, master_addr, ...). Shared
    by this launcher and the Kubernetes Indexed Job's merge (gpuaccept.scaleout.k8s.allreduce)."""
    ok = all(r.kind == "ok" for r in results.values()) and all(n in results for n in nodes)
    col = Collective(list(nodes), ok, results, **fields)
    if ok:
        rpn = int(base_args.get("ranks_per_node") or (results[nodes[0]].doc or {}).get("ranks_per_node") or 1)
        problems = world_failure(col, rpn)
        if not problems:
            col.doc = results[nodes[0]].doc
            return col
        disagreeing(col, problems)
        col.message = (f"all-reduce over {', '.join(nodes)}: the nodes' documents disagree with the world "
                       f"launched; no figure taken:\n" + "\n".join(col.world_problems))
        return col
    col.culprits, col.singled_out = blame(results, list(nodes), addresses or {n: n for n in nodes})
    col.message = describe_failure(col)
    return col


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m gpuaccept.scaleout.slurm_allreduce``; see the module docstring."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--task"]:
        return _task(argv[1])
    p = OneLineParser(prog="python -m gpuaccept.scaleout.slurm_allreduce",
                                description="Inter-node all-reduce over this Slurm allocation (srun).")
    p.add_argument("--backend", choices=("nccl", "gloo"), help="default: nccl where torch sees a GPU")
    p.add_argument("--ranks-per-node", type=int, help="default: every GPU (nccl), 1 (gloo)")
    p.add_argument("--master-addr", help="node 0's address as the others reach it (default: its NodeAddr)")
    p.add_argument("--port", type=int, help="rendezvous port on node 0 (default: from the job id)")
    p.add_argument("--deadline-s", type=int, default=600, help="the probes' wall-clock limit (s)")
    p.add_argument("--stall-s", type=int, default=60, help="a rank without heartbeat this long stalls its node")
    p.add_argument("--args", default="{}", help="more probe arguments, JSON (min_bytes, max_bytes, iters...)")
    p.add_argument("--min-busbw", type=float, help="fail below this in-place busbw, GB/s")
    p.add_argument("--at-bytes", type=int, help="message size of the judged figure (default: the largest)")
    p.add_argument("--json", dest="json_out", help="write the outcome as JSON here")
    a = p.parse_args(argv)
    job, nodelist = os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_JOB_NODELIST")
    if not job or not nodelist:
        print("gpuaccept.scaleout.slurm_allreduce: not inside a Slurm allocation (SLURM_JOB_ID/SLURM_JOB_NODELIST "
              "unset): run it under salloc -N K or in an sbatch script", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        extra = json.loads(a.args)
        if not isinstance(extra, dict):
            raise ValueError("not a JSON object")
        nodes = scontrol_hostnames(nodelist)
    except (ValueError, SlurmEnvError) as e:
        print(f"gpuaccept.scaleout.slurm_allreduce: --args {a.args!r}: {e}" if not isinstance(e, SlurmEnvError)
              else f"gpuaccept.scaleout.slurm_allreduce: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    base = dict(extra)
    if a.backend:
        base["backend"] = a.backend
    if a.ranks_per_node:
        base["ranks_per_node"] = a.ranks_per_node
    if a.stall_s:
        base["stall_s"] = a.stall_s
    env = pinned_env({k: v for k, v in os.environ.items() if k.startswith("NCCL_")})
    if env:
        base["env"] = {**env, **(base.get("env") or {})}
    addresses = scontrol_node_addrs(nodes)
    master = a.master_addr or addresses[nodes[0]]
    with tempfile.TemporaryDirectory(prefix=f"gpuaccept-slurm-ar-{folder_name(job)}-", dir=os.getcwd()) as wd:
        col = run(nodes, master, base, a.deadline_s, a.port, job, wd, addresses)
    out = {"hosts": col.hosts, "ok": col.ok, "master_addr": col.master_addr, "master_port": col.master_port,
           "attempts": col.attempts, "wall_s": col.wall_s, "culprits": col.culprits,
           "singled_out": col.singled_out, "message": col.message,
           "results": {h: {"kind": r.kind, "error": r.error, "doc": r.doc} for h, r in col.results.items()}}
    rc = 0
    if col.ok:
        busbw, row = busbw_at(col.doc, a.at_bytes)
        passed, why = judge_figures({"ring": busbw}, a.min_busbw, source="--min-busbw")["ring"]
        out.update(busbw_gbps=busbw, at_bytes=row.get("bytes"), passed=passed, why=why)
        print(f"all-reduce over {', '.join(col.hosts)} (world {col.doc.get('world_size')}): "
              f"{'PASS' if passed else 'FAIL'}: {why} at {row.get('bytes')} B")
        rc = 0 if passed else 1
    else:
        out["passed"] = False
        print(f"FAIL: {col.message}")
        rc = 1
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return rc


if __name__ == "__main__":
    from gpuaccept.config.outputs import quiet_when_reader_closes
    sys.exit(quiet_when_reader_closes(main))  # a reader that closes (| head) ends the output, no traceback
