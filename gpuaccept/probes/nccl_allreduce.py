"""Intra-node all-reduce bandwidth, measured the way nccl-tests' ``all_reduce_perf`` measures it.

Run as ``python3 nccl_allreduce.py '<json args>'`` (see :mod:`_probe`). The probe process is only a
supervisor: it spawns ``world_size`` worker processes of this same file (``--worker``), one per GPU, each in
its own process group, waits for them under a wall-clock deadline, kills every one of them on a hang or a
death, and assembles the result document from rank 0's figures and the NCCL INFO lines of every rank. With
``nnodes`` and ``node_rank`` it is one host's share of a multi-node all-reduce (driven by
gpuaccept.runner.multinode): one probe per host, all started at once, each supervising only its own ranks with
the same deadline and kill logic, and always printing a document (rc 0) unless its arguments are wrong.

This file keeps the rendezvous and its retries. Shipped helpers beside it do the rest, one job each:

* ``_allreduce_args.py``: the arguments (the table of every one, single and multi-node) and the workers'
  environment;
* ``_allreduce_rank.py``: one rank (a worker): device, libnccl, process group, the timed sweep (the method);
* ``_allreduce_figures.py``: sizes, algbw/busbw (``busbw_factor``), the correctness pattern;
* ``_allreduce_document.py``: the result document (every field) and a failed multi-node share's;
* ``_allreduce_rendezvous.py``: the checks before a multi-node all-reduce starts a rank (``{"check": "ready"}``:
  torch installed; ``{"check": "rendezvous", ...}``: every node resolves and reaches node 0's port, in seconds);
* ``_supervisor.py``: spawn, supervise, report, kill (one sequence for one node and for one host of a
  multi-node world); ``_nccl.py``: libnccl through ctypes; ``_nccl_log.py``: NCCL's INFO lines (transports,
  algorithms, network devices); ``_nccl_world.py``: the multi-node world check (a split world is an error,
  ``outcome: split_world``, never a figure) and the interface toward the master, IPv4 or IPv6.

One node: the ranks meet on 127.0.0.1 (``master_port``, else a free port); a port taken meanwhile is replaced
by a fresh free one, up to :data:`RENDEZVOUS_ATTEMPTS` attempts. Multi-node: no local retry; a port in use is
reported (``outcome: addr_in_use``) and the controller retries the whole collective on another port.

Failures: a rank that exits early fails the probe with ``rank R exited with rc X: <its last line>``; ranks
still running at ``deadline_s`` fail it with ``all-reduce hung: ranks [...] did not finish within Ns; killed all
ranks``, naming the slowest rank and its phase. Such a failure document also carries ``ranks_failed``: the
outcome (``failed``, ``stalled``, ``hung``), the deciding ranks' phase, stage and rc, and the earliest stage
among them (``_supervisor.ranks_failed``: ``setup`` the interpreter, torch, the CUDA context, libnccl; ``init``
the rendezvous, the communicator; ``collective`` the buffers and the sizes), from which the controller tells a
collective that broke on the node from one that never ran (gpuaccept.judging.nccl.collective_broke). Either
way every worker's process group gets SIGTERM (and
SIGCONT, so that a stopped one sees it), then SIGKILL after 3 s, and is reaped: no process is left behind.
Workers also die with the probe (``PR_SET_PDEATHSIG``). Wrong elements do not fail the probe: ``wrong_total``
is a figure for the controller's verdict.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time

try:
    from _allreduce_args import config, host_interfaces, socket_settings, worker_env
    from _conditions import Watch
    from _linkcounters import snapshot
    from _allreduce_document import document, failure_document, failure_message
    from _allreduce_figures import DTYPES, busbw_factor, count_wrong, fill_pattern, make_row, pattern_params, \
        sweep_sizes
    from _allreduce_rank import run_rank
    from _allreduce_rendezvous import check
    from _nccl_world import local_interface, world_problems
    from _probe import ProbeFailed, log, run, scratch_dir
    from _supervisor import (EXIT_SPLIT_WORLD, Worker, hang_message, kill_all, last_line, rank_evidence, ranks_failed,
                             run_ranks, terminate_on_signals, worker_main)
except ImportError:  # imported as gpuaccept.probes.nccl_allreduce (tests of the pure functions)
    from ._allreduce_args import config, host_interfaces, socket_settings, worker_env
    from ._conditions import Watch
    from ._linkcounters import snapshot
    from ._allreduce_document import document, failure_document, failure_message
    from ._allreduce_figures import DTYPES, busbw_factor, count_wrong, fill_pattern, make_row, pattern_params, \
        sweep_sizes
    from ._allreduce_rank import run_rank
    from ._allreduce_rendezvous import check
    from ._nccl_world import local_interface, world_problems
    from ._probe import ProbeFailed, log, run, scratch_dir
    from ._supervisor import (EXIT_SPLIT_WORLD, Worker, hang_message, kill_all, last_line, rank_evidence,
                              ranks_failed, run_ranks, terminate_on_signals, worker_main)

#: re-exported for the controller's tests (the figures, the arguments, the world check and the rank evidence
#: live in shipped helpers)
__all__ = ["DTYPES", "EXIT_SPLIT_WORLD", "busbw_factor", "count_wrong", "fill_pattern", "make_row", "main",
           "pattern_params", "rank_evidence", "sweep_sizes", "world_problems", "worker_env"]

#: rendezvous attempts of one node's all-reduce, each on a fresh free port after a port found in use
RENDEZVOUS_ATTEMPTS = 5


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (bind to port 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(cfg: dict, port: int, tmp: str, attempt: int, env: dict) -> list[Worker]:
    """Start this host's ranks (workers of this same file, ``--worker '<spec>'``); on any error kill those
    already started and re-raise."""
    workers: list[Worker] = []
    n = cfg["world_size"]
    multi = cfg["nnodes"] is not None
    first = cfg["node_rank"] * cfg["ranks_per_node"] if multi else 0
    try:
        for local in range(cfg["local_ranks"]):
            rank = first + local
            spec = {k: cfg[k] for k in ("backend", "world_size", "sizes", "iters", "reps", "warmup", "dtype",
                                        "timeout_s", "graph", "graph_max_bytes", "oop", "api", "timer")}
            base = os.path.join(tmp, f"a{attempt}-rank{rank}")
            spec.update(rank=rank, local_rank=local, parent_pid=os.getpid(), phase_path=base + ".phase",
                        result_path=_result_path(tmp, attempt), writes_result=local == 0 if multi else rank == 0)
            if multi:
                spec.update({k: cfg[k] for k in ("nnodes", "node_rank", "ranks_per_node", "host", "hosts",
                                                 "marker")}, heartbeat=True)
            wenv = dict(env, MASTER_ADDR=cfg["master_addr"] if multi else "127.0.0.1", MASTER_PORT=str(port),
                        RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(local),
                        LOCAL_WORLD_SIZE=str(cfg["local_ranks"]))
            argv = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
            workers.append(Worker.start(rank, local, argv, wenv, base))
    except BaseException:
        kill_all(workers)
        raise
    return workers


def _result_path(tmp: str, attempt: int) -> str:
    return os.path.join(tmp, f"a{attempt}-result.json")


def _attempt(cfg: dict, port: int, tmp: str, attempt: int, env: dict, deadline: float):
    """One rendezvous attempt through the shared sequence (``_supervisor.run_ranks``): this host's ranks
    started, supervised, reported, killed, their output and result read."""
    return run_ranks(lambda: _spawn(cfg, port, tmp, attempt, env), deadline, cfg.get("stall_s"),
                     _result_path(tmp, attempt))


def _lingering_note(out, notes: list) -> None:
    """A note for ranks that finished but had to be killed (``out``: ``_supervisor.run_ranks``'s outcome)."""
    if out.outcome == "ok" and out.which:
        notes.append(f"ranks {[w.rank for w in out.which]} did not exit after finishing; killed")


def main(args: dict) -> dict:
    """The probe: its arguments checked (``_allreduce_args.config``), then one node's all-reduce or one host's
    share of a multi-node one, with SIGTERM/SIGINT turned into killing every rank. Raises ProbeFailed (one node).
    With ``check`` (``"ready"`` or ``"rendezvous"``) only the checks before a multi-node all-reduce, no rank
    (``_allreduce_rendezvous.check``)."""
    if args.get("check"):
        return check(args)
    cfg = config(args)
    with terminate_on_signals():
        if cfg["nnodes"] is not None:
            return _main_multinode(cfg)
        return _main_single(cfg)


def _main_single(cfg: dict) -> dict:
    """One node: rendezvous on 127.0.0.1, a taken port retried on a fresh one; any failure is ProbeFailed."""
    notes: list[str] = []
    env = worker_env(dict(os.environ), cfg["env"], notes)
    t0 = time.monotonic()
    deadline = t0 + cfg["deadline_s"]
    # the GPUs' other users while the ranks (this probe's children) run (_conditions.py); gloo loads no GPU
    # NVLink and InfiniBand error counters before and after the load, read (in a forked NVML child) while no
    # watch thread holds NVML's locks
    start = _link_counters()
    watch = Watch(None if cfg["backend"] == "nccl" else []).start()
    try:
        doc = _run_single(cfg, notes, env, t0, deadline)
    finally:
        watch.stop()
    doc["conditions"] = watch.result()
    doc["link_counters"] = {"start": start, "end": _link_counters()}
    return doc


def _link_counters(nvml: bool = True) -> dict:
    """One snapshot of the node's link error counters (_linkcounters.py; ``nvml`` False: InfiniBand/RoCE only); a
    reading that fails is said, never the all-reduce's failure."""
    try:
        return snapshot(nvml=nvml)
    except Exception as e:  # noqa: BLE001 - the counters are a condition of the measurement, not the measurement
        return {"error": f"{type(e).__name__}: {e}"[:300]}


def _run_single(cfg: dict, notes: list[str], env: dict, t0: float, deadline: float) -> dict:
    """The rendezvous attempts of :func:`_main_single`; its document."""
    with tempfile.TemporaryDirectory(prefix="gpuaccept-allreduce-", dir=scratch_dir()) as tmp:
        port = cfg["master_port"] or free_port()
        for attempt in range(1, RENDEZVOUS_ATTEMPTS + 1):
            log(f"nccl_allreduce: {cfg['backend']} x{cfg['world_size']} rendezvous 127.0.0.1:{port} "
                f"(attempt {attempt})")
            out = _attempt(cfg, port, tmp, attempt, env, deadline)
            if out.outcome == "addr_in_use":
                log(f"nccl_allreduce: port {port} in use ({time.monotonic() - t0:.1f}s); retrying")
                notes.append(f"rendezvous port {port} in use; retried on another")
                if attempt == RENDEZVOUS_ATTEMPTS:
                    raise ProbeFailed(f"rendezvous failed: port in use on {RENDEZVOUS_ATTEMPTS} attempts")
                port = free_port()
                continue
            if out.outcome == "aborted":
                raise ProbeFailed(f"probe terminated by {out.signal}; killed all ranks")
            if out.outcome == "hung":
                hung = {w.rank for w in out.which}
                culprits = [r for r in out.reports if r["rank"] in hung]
                raise ProbeFailed(hang_message(culprits, cfg["deadline_s"]),
                                  ranks_failed=ranks_failed(out.outcome, culprits))
            if out.outcome != "ok":
                order = [w.rank for w in out.which]
                culprits = sorted((r for r in out.reports if r["rank"] in order), key=lambda r: order.index(r["rank"]))
                raise ProbeFailed("; also ".join(w.describe_exit() for w in out.which),
                                  ranks_failed=ranks_failed(out.outcome, culprits))
            _lingering_note(out, notes)
            if out.result is None:
                raise ProbeFailed(f"rank 0 finished without a result ({out.result_error}): "
                                  f"{last_line(out.texts[0])}")
            return document(cfg, out.result, out.texts, notes, port, attempt)
    raise AssertionError("unreachable")


def _main_multinode(cfg: dict) -> dict:
    """One host's share of a multi-node all-reduce: spawn the local ranks, supervise them, and report a
    document whatever happens (see the module docstring, "Multi-node mode"). The host's InfiniBand/RoCE port
    error counters are read right before its ranks start and right after they end, ``link_counters: {"start",
    "end"}`` in every document it reports, a failed share's too (a port that went down is what broke it); sysfs
    only, no NVML: milliseconds, so this host's ranks do not reach the rendezvous later than the others'."""
    start = _link_counters(nvml=False)
    doc = _share(cfg)
    doc["link_counters"] = {"start": start, "end": _link_counters(nvml=False)}
    return doc


def _share(cfg: dict) -> dict:
    """The document of :func:`_main_multinode`, without the link counters."""
    notes: list[str] = []
    local_addr, ifname = local_interface(cfg["master_addr"])
    if "GLOO_SOCKET_IFNAME" not in os.environ and "GLOO_SOCKET_IFNAME" not in cfg["env"] and not ifname:
        notes.append(f"no interface found toward {cfg['master_addr']}: gloo picks its own (hostname)")
    env = worker_env(dict(os.environ), cfg["env"], notes, gloo_ifname=ifname or "")
    cfg["gloo_ifname"] = ifname or ""
    deadline = time.monotonic() + cfg["deadline_s"]
    port = cfg["master_port"]
    where = {"node_rank": cfg["node_rank"], "nnodes": cfg["nnodes"], "ranks_per_node": cfg["ranks_per_node"],
             "host": cfg["host"], "hosts": cfg["hosts"], "hostname": socket.gethostname(),
             "local_address": local_addr, "local_interface": ifname, "gloo_ifname": env.get("GLOO_SOCKET_IFNAME"),
             "master_addr": cfg["master_addr"], "master_port": port, "marker": cfg["marker"],
             "backend": cfg["backend"], "world_size": cfg["world_size"],
             "interfaces": host_interfaces()}
    from_inventory = {**dict.fromkeys(cfg.get("inventory_env") or ()), **cfg["env"]}  # set by the controller
    where["socket_ifnames"] = socket_settings(env, from_inventory, os.environ, cfg["backend"], where["interfaces"])
    with tempfile.TemporaryDirectory(prefix="gpuaccept-allreduce-", dir=scratch_dir()) as tmp:
        log(f"nccl_allreduce: node {cfg['node_rank']}/{cfg['nnodes']} ({cfg['host']}) "
            f"{cfg['backend']} ranks {cfg['node_rank'] * cfg['ranks_per_node']}.."
            f"{(cfg['node_rank'] + 1) * cfg['ranks_per_node'] - 1} of {cfg['world_size']}, "
            f"rendezvous {cfg['master_addr']}:{port}")
        out = _attempt(cfg, port, tmp, 1, env, deadline)
        if out.outcome == "ok":
            _lingering_note(out, notes)
            if out.result is None:
                return failure_document(where, "failed", f"local rank 0 finished without a result "
                                    f"({out.result_error}): {last_line(out.texts[0])}", [], out.workers,
                                    out.texts, notes)
            doc = document(cfg, out.result, out.texts, notes, port, 1)
            doc.update(where, ok=True, outcome="ok", local_ranks=[w.rank for w in out.workers],
                       world=out.result.get("world"))
            return doc
        if out.outcome == "aborted":
            notes.append(f"probe terminated by {out.signal or 'a signal'} (the controller aborted the collective); "
                         f"killed all ranks")
        return failure_document(where, out.outcome, failure_message(out.outcome, out.which, out.reports, cfg),
                            out.reports, out.workers, out.texts, notes)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker_main(json.loads(sys.argv[2]), run_rank)
    else:
        run(main)
