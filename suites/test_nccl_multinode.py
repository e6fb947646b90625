"""nccl layer, inter-node: all-reduce across the selected hosts (controller: gpuaccept.multinode; probe:
nccl_allreduce in multi-node mode).

``--nccl-pattern ring`` (default) runs one collective over every selected host; ``pairwise`` rounds of
random disjoint pairs (seed recorded) to find a slow or broken host; ``rails`` one collective per local GPU
index to find a slow rail. algbw = bytes / time and busbw = algbw * 2(n-1)/n with n = hosts x ranks per
host, GB/s = 1e9 B/s, as nccl-tests defines them; the judged figure is the in-place busbw at the limit's
message size. ``-s`` prints the nccl-tests table.

Group vars (read from the first selected host; Ansible merges group vars into each host's):

========================================  ===============================================================
``nccl_internode_busbw_gbps``             min busbw, GB/s; none: figures recorded, not judged (pairwise and
                                          rails then compare with the round's median instead)
``nccl_internode_at_bytes``               message size judged, bytes; default the largest size measured
``nccl_expect_transport``                 e.g. ``IB`` or ``NET/IB/GDRDMA``: every host's network channels
                                          (NCCL_DEBUG=INFO) must use it, whatever the bandwidth
``nccl_pairwise_slow_pct``                pairwise/rails without a limit: fails below this % of the median
                                          (default 20)
``nccl_pairwise_seed``                    seed of the random pairs (default random, always recorded)
``nccl_pairwise_rounds``                  rounds at most (default 4)
``nccl_ranks_per_node``                   ranks per host; default every GPU (nccl, gpus_per_node or NVML)
                                          or 1 (gloo)
``nccl_backend``                          ``nccl`` or ``gloo``; default nccl when every host has a GPU,
                                          gloo (CPU tensors) when none has
``nccl_internode_probe_args``             probe arguments: min_bytes, max_bytes, factor, iters, warmup,
                                          dtype (default 1 MiB..4 GiB x4 for nccl, 64 KiB..4 MiB for gloo)
``nccl_round_timeout_s``                  wall-clock limit of one collective, s (default --probe-timeout)
``nccl_stall_s``                          a rank without heartbeat for this long stalls its host (default 60)
``nccl_master_addr``                      rendezvous address of the first host (default its ansible_host)
========================================  ===============================================================

Host vars ``nccl_socket_ifname``, ``nccl_ib_hca``, ``nccl_env`` give each host's NCCL environment.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from gpuaccept import multinode as mn
from gpuaccept.errors import ConfigError, GpuacceptError
from gpuaccept.nccl_table import format_table
from gpuaccept.node import Node
from gpuaccept.thresholds import Limit
from gpuaccept.verdicts import Verdicts

pytestmark = pytest.mark.nccl

UNJUDGED = "no limit configured (group var nccl_internode_busbw_gbps): recorded, not judged"
MiB = 1 << 20


def _num(vars_: dict, key: str, default=None, kind=float):
    v = vars_.get(key, default)
    if v is None:
        return None
    try:
        return kind(v)
    except (TypeError, ValueError):
        raise ConfigError(f"group var {key} must be a number, got {v!r}") from None


def _has_gpu(node: Node):
    try:
        doc = node.gpu_inventory()
    except GpuacceptError:
        return None  # unknown: the collective will name the host
    return len(doc.get("gpus") or []) if doc.get("nvml_available") else 0


def _backend_and_ranks(nodes: list[Node]) -> tuple[str, int, list[str]]:
    """``(backend, ranks_per_node, notes)`` from the group vars, else from the hosts' GPUs (NVML)."""
    v = nodes[0].host.vars
    backend = v.get("nccl_backend")
    notes: list[str] = []
    counts = {}
    if backend not in (None, "nccl", "gloo"):
        raise ConfigError(f"group var nccl_backend must be nccl or gloo, got {backend!r}")
    if backend is None or (backend == "nccl" and "nccl_ranks_per_node" not in v and "gpus_per_node" not in v):
        with ThreadPoolExecutor(max_workers=len(nodes)) as ex:
            counts = dict(zip([n.name for n in nodes], ex.map(_has_gpu, nodes)))
        known = {h: c for h, c in counts.items() if c is not None}
        if backend is None:
            with_gpu = sorted(h for h, c in known.items() if c)
            if with_gpu and len(with_gpu) < len(known):
                pytest.fail(f"hosts without a GPU among GPU hosts: {', '.join(h for h in known if not known[h])}",
                            pytrace=False)
            backend = "nccl" if with_gpu else "gloo"
            if backend == "gloo":
                notes.append("no GPU on the hosts: gloo all-reduce of CPU tensors (not NCCL's figures)")
    rpn = _num(v, "nccl_ranks_per_node", kind=int)
    if rpn is None and backend == "nccl":
        rpn = _num(v, "gpus_per_node", kind=int)
        if rpn is None:
            distinct = {c for c in counts.values() if c}
            if len(distinct) > 1:
                pytest.fail("hosts carry different GPU counts: " + ", ".join(f"{h}: {c}" for h, c in counts.items()),
                            pytrace=False)
            rpn = distinct.pop() if distinct else 1
    return backend, rpn or 1, notes


def _settings(nodes: list[Node], request) -> tuple[mn.Settings, dict]:
    v = nodes[0].host.vars
    backend, rpn, notes = _backend_and_ranks(nodes)
    extra = v.get("nccl_internode_probe_args") or {}
    if not isinstance(extra, dict):
        raise ConfigError("group var nccl_internode_probe_args must be a mapping of probe arguments")
    limit = _num(v, "nccl_internode_busbw_gbps")
    at = _num(v, "nccl_internode_at_bytes", kind=int)
    default_max = 4 << 30 if backend == "nccl" else 4 * MiB
    args = {"backend": backend, "min_bytes": MiB if backend == "nccl" else 64 << 10,
            "max_bytes": max(at or 0, default_max) if at else default_max, "factor": 4, **extra}
    timeout = _num(v, "nccl_round_timeout_s", kind=int) or max(30, int(nodes[0].probe_timeout))
    st = mn.Settings(args, rpn, deadline_s=timeout, stall_s=_num(v, "nccl_stall_s", 60, kind=int))
    plan = {"limit": limit, "at": at, "expect": v.get("nccl_expect_transport"), "notes": notes,
            "slow_pct": _num(v, "nccl_pairwise_slow_pct", mn.DEFAULT_SLOW_PCT),
            "seed": _num(v, "nccl_pairwise_seed", kind=int),
            "rounds": _num(v, "nccl_pairwise_rounds", mn.DEFAULT_PAIRWISE_ROUNDS, kind=int)}
    return st, plan


def _limit(plan: dict, at: int) -> Limit | None:
    if plan["limit"] is None:
        return None
    return Limit("inventory", "internode_busbw_gbps", "min", plan["limit"], "GB/s",
                 "group var nccl_internode_busbw_gbps", at)


def _fail(verdicts: Verdicts, host: str, msg: str) -> None:
    """A failure line that starts with the host it names (not with "fleet")."""
    verdicts.failures.append(f"{host}: {msg}")


def _check_transports(verdicts: Verdicts, col: mn.Collective, expect, backend: str) -> None:
    for h, r in col.results.items():
        doc = r.doc or {}
        Verdicts(verdicts.item, h, verdicts.layer).record("internode_transports", doc.get("transports") or {},
                                                          extra={"expected": expect, "backend": backend})
        if expect and backend == "nccl":
            problem = mn.transport_problem(doc.get("transports") or {}, expect)
            if problem:
                _fail(verdicts, h, problem)


def _record_collective(verdicts: Verdicts, col: mn.Collective, st: mn.Settings, plan: dict, label: str) -> None:
    """Table, figures per host, correctness and limit of one successful collective."""
    doc = col.doc
    n = len(col.hosts) * st.ranks_per_node
    print(f"\n# {label}: {len(col.hosts)} hosts x {st.ranks_per_node} ranks = world {n}, {doc.get('backend')}, "
          f"NCCL {doc.get('nccl_version')}, rendezvous {col.master_addr}:{col.master_port}\n{format_table(doc)}")
    busbw, row = mn.busbw_at(doc, plan["at"])
    at = row.get("bytes") or plan["at"]
    verdicts.record("internode_allreduce_table", doc.get("rows"), extra={
        "hosts": col.hosts, "world_size": n, "ranks_per_node": st.ranks_per_node, "backend": doc.get("backend"),
        "nccl_version": doc.get("nccl_version"), "master": f"{col.master_addr}:{col.master_port}",
        "wall_s": col.wall_s, "label": label, "notes": plan["notes"] + (doc.get("notes") or [])})
    for i, h in enumerate(col.hosts):
        hd = col.results[h].doc or {}
        local = slice(i * st.ranks_per_node, (i + 1) * st.ranks_per_node)
        Verdicts(verdicts.item, h, verdicts.layer).record(
            "internode_rank_time_us", [t for t in (row.get("ip_rank_time_us") or [])[local]], "us",
            extra={"bytes": at, "label": label, "ranks": hd.get("local_ranks"), "hostname": hd.get("hostname"),
                   "local_address": hd.get("local_address")})
    wrong = doc.get("wrong_total", 0)
    verdicts.record("internode_wrong_elements", wrong, "elements", extra={"label": label})
    if wrong:
        verdicts.fail(f"{label}: all-reduce over {', '.join(col.hosts)} produced {wrong} wrong elements")
    lim = _limit(plan, at)
    verdicts.record("internode_busbw_gbps", busbw, "GB/s", limit=lim, extra={
        "bytes": at, "algbw_gbps": row.get("ip_algbw_gbps"), "label": label, "hosts": col.hosts,
        **({} if lim else {"note": UNJUDGED})})


def _ring(nodes, verdicts, st, plan):
    col = mn.ring(nodes, st)
    if not col.ok:
        verdicts.failures.extend(col.message.splitlines())
        verdicts.record("internode_failure", col.message, extra={"culprits": col.culprits,
                        "singled_out": col.singled_out, "marker": col.marker})
        return
    _record_collective(verdicts, col, st, plan, "ring")
    _check_transports(verdicts, col, plan["expect"], st.args["backend"])


def _pairwise(nodes, verdicts, st, plan):
    rep = mn.pairwise(nodes, st, plan["at"], plan["limit"], plan["slow_pct"], plan["seed"], plan["rounds"])
    verdicts.record("pairwise_seed", rep.seed, extra={"round_wall_s": rep.round_wall_s})
    for p in rep.pairs:
        verdicts.record("pairwise_busbw_gbps", p.busbw, "GB/s", extra={
            "pair": list(p.pair), "round": p.round, "passed": p.passed, "why": p.why, "wall_s": p.wall_s})
    print(f"\n# pairwise, seed {rep.seed}, {len(rep.round_wall_s)} round(s) of {rep.round_wall_s} s")
    for p in rep.pairs:
        fig = "error" if p.busbw is None else f"{p.busbw:.4g} GB/s"
        print(f"#   round {p.round}  {p.pair[0]:>12} + {p.pair[1]:<12} {fig:>14}  {'pass' if p.passed else 'FAIL'}  "
              f"{'' if p.passed else p.why}")
    for h, (passed, total) in rep.status["ratio"].items():
        Verdicts(verdicts.item, h, verdicts.layer).record(
            "pairwise_pass_ratio", round(passed / total, 3) if total else None, "",
            extra={"passed": passed, "pairs": total, "seed": rep.seed})
    for h, why in rep.named:
        _fail(verdicts, h, f"pairwise all-reduce: {why} (seed {rep.seed})")
    if not rep.named and rep.status["unresolved"]:
        bad = [p for p in rep.pairs if not p.passed]
        verdicts.failures.append(f"pairwise all-reduce: no pair passed to single out a host "
                                 f"(seed {rep.seed}); unresolved: {', '.join(rep.status['unresolved'])}; "
                                 + "; ".join(f"{a}+{b}: {p.why}" for p in bad[:4] for a, b in [p.pair]))


def _rails(nodes, verdicts, st, plan):
    res = mn.rails(nodes, st, st.ranks_per_node, plan["at"], plan["limit"], plan["slow_pct"])
    for r in res:
        verdicts.record("rail_busbw_gbps", r.busbw, "GB/s", gpu=r.rail, extra={
            "passed": r.passed, "why": r.why, "wall_s": r.collective.wall_s, "hosts": r.collective.hosts})
        if r.collective.ok:
            _check_transports(verdicts, r.collective, plan["expect"], st.args["backend"])
            print(f"\n# rail {r.rail} (CUDA_VISIBLE_DEVICES={r.rail} on every host)\n{format_table(r.collective.doc)}")
        if not r.passed:
            verdicts.failures.append(f"rail {r.rail} (GPU {r.rail} of every host) is slow or broken: {r.why}")


def test_allreduce_multinode(nodes: list[Node], verdicts, request):
    """All-reduce across the selected hosts (pattern from ``--nccl-pattern``), correctness, transport and
    limit checked; a host that fails, hangs or stops answering is named."""
    if len(nodes) < 2:
        pytest.skip(f"inter-node all-reduce needs at least 2 hosts; {len(nodes)} selected")
    st, plan = _settings(nodes, request)
    if plan["expect"] and st.args["backend"] != "nccl":
        plan["notes"].append(f"nccl_expect_transport {plan['expect']} not checked: backend gloo has no NCCL channels")
    pattern = request.config.getoption("nccl_pattern")
    {"ring": _ring, "pairwise": _pairwise, "rails": _rails}[pattern](nodes, verdicts, st, plan)
    verdicts.finish()
