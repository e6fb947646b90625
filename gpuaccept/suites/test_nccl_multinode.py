"""nccl layer, inter-node: all-reduce across the selected hosts (controller: gpuaccept.runner.multinode; probe:
nccl_allreduce in multi-node mode).

``--nccl-pattern ring`` (default) runs one collective over every selected host; ``pairwise`` rounds of
random disjoint pairs (seed recorded) to find a slow or broken host; ``rails`` one collective per local GPU
index to find a slow rail. algbw = bytes / time and busbw = algbw * 2(n-1)/n with n = hosts x ranks per
host, GB/s = 1e9 B/s, as nccl-tests defines them; the judged figure is the in-place busbw at the limit's
message size. ``-s`` prints the nccl-tests table.

Group vars (read from the first selected host; Ansible merges group vars into each host's): see
``gpuaccept.config.multinode`` (parsed and validated by ``multinode_settings``). Host vars
``nccl_socket_ifname``, ``nccl_ib_hca`` (exact names, passed to NCCL in its ``=`` form and judged against the
devices NCCL reports it used) and ``nccl_env`` give each host's NCCL environment. Failures name the host they
are about; a world whose documents disagree with what was launched is an error, with no figure. Only the hosts
that are reachable and ready take part (``mn.readiness``): each other one is an error filed under it with its
own cause; a node that cannot resolve or reach the rendezvous is one too, found before any rank starts.

Link error counters: each host's probe reads its InfiniBand/RoCE port error counters right before its ranks start
and right after they end; their growth is judged per host (gpuaccept/judging/linkcounters.py) for the ring and
rails patterns (pairwise keeps no host documents per pair).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from gpuaccept.runner import multinode as mn
from gpuaccept.judging import linkcounters
from gpuaccept.judging import nccl as nccl_judge
from gpuaccept.errors import (AuthError, ConfigError, GpuacceptError, HostKeyError, HostUnreachable, ProbeError,
                              ThresholdError)
from gpuaccept.judging.nccl_table import format_table
from gpuaccept.runner.host import HostRunner
from gpuaccept.config.limitfile import rerun_partners
from gpuaccept.config.thresholds import Limit, inventory_limit
from gpuaccept.judging.readings import typed
from gpuaccept.judging.recorder import Recorder
from gpuaccept.judging.sku import node_sku

pytestmark = pytest.mark.nccl

UNJUDGED = "no limit configured (group var nccl_internode_busbw_gbps): recorded, not judged"


def _gpu_count(node: HostRunner):
    try:
        doc = node.gpu_inventory()
    except GpuacceptError:
        return None  # unknown: the collective will name the host
    return len(doc.get("gpus") or []) if doc.get("nvml_available") else 0


def _settings(nodes: list[HostRunner]) -> tuple[mn.Settings, mn.GroupSettings, list[str]]:
    group = mn.multinode_settings(nodes[0].host.vars)
    counts = {}
    if group.needs_gpu_counts():
        with ThreadPoolExecutor(max_workers=len(nodes)) as ex:
            counts = dict(zip([n.name for n in nodes], ex.map(_gpu_count, nodes)))
    try:
        st, notes = group.resolve(counts, nodes[0].probe_timeout)
    except ConfigError as e:  # the hosts disagree with each other (GPU counts): the fleet fails, as before
        pytest.fail(str(e), pytrace=False)
    return st, group, notes


def _pair_floor(node: HostRunner, specs: dict) -> Limit | None:
    """The first host's SKU file floor for a pair (``checks.internode_pair_busbw_gbps``), None when its file
    has none or its SKU is unknown (the single-node tests report that)."""
    try:
        doc = node.gpu_inventory()
        gpus = typed(doc.get("gpus") or []) if doc.get("nvml_available") else []
        if not gpus and not node.host.vars.get("gpu_sku") and not node.sku_override:
            return None
        return node_sku(node.name, specs, node.sku_override, node.host.vars.get("gpu_sku"),
                        gpus).checks.get("internode_pair_busbw_gbps")
    except (GpuacceptError, ThresholdError):
        return None


def _limit(group: mn.GroupSettings, at: int) -> Limit | None:
    if group.limit_gbps is None:
        return None
    return inventory_limit("internode_busbw_gbps", group.limit_gbps, "group var nccl_internode_busbw_gbps", at)


def _check_hosts(verdicts: Recorder, col: mn.Collective, nodes: list[HostRunner], group: mn.GroupSettings,
                 backend: str) -> None:
    """Per host: the transports and network devices NCCL used (recorded; judged against
    nccl_expect_transport and the host's nccl_ib_hca / nccl_socket_ifname), and the interface toward the
    rendezvous."""
    by_name = {n.name: n for n in nodes}
    for h, r in col.results.items():
        doc = r.doc or {}
        nd = doc.get("net_devices") or {}
        verdicts.for_host(h).record("internode_transports", doc.get("transports") or {}, extra={
            "expected": group.expect_transport, "backend": backend, "net_devices": nd,
            "local_interface": doc.get("local_interface"), "local_address": doc.get("local_address"),
            "gloo_ifname": doc.get("gloo_ifname")})
        if backend != "nccl":
            continue
        problem = mn.transport_problem(doc.get("transports") or {}, group.expect_transport)
        if problem:
            verdicts.for_host(h).fail(problem)
        v = by_name[h].host.vars if h in by_name else {}
        for p in nccl_judge.net_device_problems(nd, v.get("nccl_ib_hca"), v.get("nccl_socket_ifname")):
            verdicts.for_host(h).fail(p)


def _record_collective(verdicts: Recorder, col: mn.Collective, st: mn.Settings,
                       group: mn.GroupSettings, notes: list[str], label: str) -> list[str]:
    """Table, figures per host, correctness and limit of one successful collective; returns the errors
    (figures that cannot be judged)."""
    doc = col.doc
    n = len(col.hosts) * st.ranks_per_node
    lib = f"NCCL {doc['nccl_version']}" if doc.get("nccl_version") else \
        "no NCCL (gloo: NCCL_* variables are not read)" if doc.get("backend") == "gloo" else "NCCL version not read"
    verdicts.show(f"# {label}: {len(col.hosts)} hosts x {st.ranks_per_node} ranks = world {n}, {doc.get('backend')}, "
          f"{lib}, rendezvous {col.master_addr}:{col.master_port}\n{format_table(doc)}")
    busbw, row = mn.busbw_at(doc, group.at_bytes)
    at = row.get("bytes") or group.at_bytes
    verdicts.record("internode_allreduce_table", doc.get("rows"), extra={
        "hosts": col.hosts, "world_size": n, "ranks_per_node": st.ranks_per_node, "backend": doc.get("backend"),
        "nccl_version": doc.get("nccl_version"), "master": f"{col.master_addr}:{col.master_port}",
        "wall_s": col.wall_s, "label": label, "notes": notes + (doc.get("notes") or [])})
    for i, h in enumerate(col.hosts):
        hd = col.results[h].doc or {}
        local = slice(i * st.ranks_per_node, (i + 1) * st.ranks_per_node)
        verdicts.for_host(h).record(
            "internode_rank_time_us", list((row.get("ip_rank_time_us") or [])[local]), "us",
            extra={"bytes": at, "label": label, "ranks": hd.get("local_ranks"), "hostname": hd.get("hostname"),
                   "local_address": hd.get("local_address"), "local_interface": hd.get("local_interface")})
    wrong, errors = nccl_judge.wrong_count(doc.get("rows") or [], doc.get("wrong_total"))
    verdicts.record("internode_wrong_elements", None if errors else wrong, "elements", extra={"label": label})
    if wrong:
        verdicts.fail(f"{label}: all-reduce over {', '.join(col.hosts)} produced {wrong} wrong elements")
    lim = _limit(group, at)
    extra = {"bytes": at, "algbw_gbps": row.get("ip_algbw_gbps"), "label": label, "hosts": col.hosts,
             "algo": row.get("ip_algo")}
    why = nccl_judge.algorithm_problem(row, doc, where="group var nccl_internode_busbw_gbps") \
        if lim and doc.get("backend") == "nccl" and row else None
    if why:
        errors.append(why)
        verdicts.record("internode_busbw_gbps", busbw, "GB/s", extra={**extra, "note": why})
    else:
        verdicts.record("internode_busbw_gbps", busbw, "GB/s", limit=lim, extra={**extra, **({} if lim else
                                                                                             {"note": UNJUDGED})},
                        context=(f"{label}: " + nccl_judge.floor_context(
                            row or {"bytes": at}, n, lim, "Ring" if doc.get("backend") == "nccl" else
                            str(doc.get("backend")), f"{len(col.hosts)} hosts x {st.ranks_per_node} ranks: "
                                                     f"{', '.join(col.hosts)}")) if lim else None)
    return errors


def _failed_collective(verdicts: Recorder, col: mn.Collective, errors: list[str]) -> None:
    verdicts.record("internode_failure", col.message, extra={"culprits": col.culprits, "world_problems":
                    col.world_problems, "singled_out": col.singled_out, "marker": col.marker,
                    "rendezvous": col.rendezvous, "master": f"{col.master_addr}:{col.master_port}"})
    versions = nccl_judge.version_problem({h: (r.doc or {}).get("nccl_version") for h, r in col.results.items()})
    if versions:  # NCCL's own line names ranks and version codes; this names the hosts
        verdicts.fail(versions)
    if col.world_problems:  # not the world launched: an error, no figure
        errors.append(col.message.replace("\n", "; "))
        return
    whole, per_host = mn.failure_lines(col)
    for line in whole:
        verdicts.fail(line)
    for host, line in per_host:
        r = col.results.get(host)
        # never reached, the probe could not run there (no torch, bad arguments), or the host cannot resolve or
        # reach the rendezvous (no rank started): an error of that host, with its own cause, as elsewhere
        # ranks that never left their setup (torch or libnccl not loading, an import that hangs): the node's
        # software kept it from measuring, an error with that cause (mn.setup_ranks)
        if r is not None and (r.kind in ("unreachable", "crashed", "rendezvous") or mn.setup_ranks(r)):
            verdicts.for_host(host).error(line, cause=r.cause)
        else:  # a failed share with its own cause (a socket-interface setting) carries it
            verdicts.for_host(host).fail(line, cause=r.cause if r is not None and r.kind in ("failed", "aborted")
                                         else None)


def _link_errors(verdicts: Recorder, col: mn.Collective, label: str) -> None:
    """Per host, the growth of its InfiniBand/RoCE port error counters over its share of the collective (the
    probe's ``link_counters``), judged against gpuaccept/data/ib_counter_limits.yaml and filed under that host;
    a failed share's readings too (a port that went down is what broke it). A host whose share finished and
    brought no readings is an error "not measured"; a share that did not finish without readings (never
    started, killed before it reported) is said elsewhere."""
    load = f"the {label} all-reduce over {', '.join(col.hosts)}"
    for h, r in col.results.items():
        doc = r.doc or {}
        if r.kind != "ok" and "link_counters" not in doc:
            continue
        found = linkcounters.findings(doc, None, load)
        ports = [f for _, f in found if f.check.startswith("ib_port_errors ")]
        if not found:
            got = (doc.get("link_counters") or {}).get("end") or {}
            verdicts.for_host(h).record("internode_link_counters", "no InfiniBand/RoCE port", extra={
                "label": label, "why": (got.get("ib") or {}).get("unavailable")})
        for _, f in found:
            verdicts.for_host(h).apply([f])
        if ports:
            verdicts.for_host(h).record("internode_link_counters", f"{len(ports)} port(s) read", extra={"label": label})


def _hosts_text(names: list[str], most: int = 6) -> str:
    return ", ".join(names[:most]) + (f", ... ({len(names)} in all)" if len(names) > most else "")


def _not_ready(verdicts: Recorder, unready: dict, ready: list[str]) -> None:
    """An ERROR of each host that cannot take part (unreachable, no torch, NVML unusable...), filed under that
    host with its own cause; the all-reduce runs among the ``ready`` hosts when there are two or more."""
    among = (f"the all-reduce runs among the {len(ready)} ready hosts ({_hosts_text(ready)})" if len(ready) >= 2
             else f"{len(ready)} host{'' if len(ready) == 1 else 's'} ready"
                  f"{' (' + _hosts_text(ready) + ')' if ready else ''}: the inter-node all-reduce needs 2")
    for h, e in unready.items():
        what = f"unreachable: {e.msg}" if isinstance(e, (HostUnreachable, HostKeyError, AuthError)) else e.msg
        verdicts.for_host(h).error(f"{what}; not measured: {among}", cause=e.cause)
    verdicts.record("internode_not_ready", sorted(unready), extra={
        "ready": ready, "causes": {h: e.cause.to_dict() for h, e in unready.items()}})


def _ring(nodes, verdicts, st, group, notes):
    col = mn.ring(nodes, st)
    errors: list[str] = []
    _link_errors(verdicts, col, "ring")
    if not col.ok:
        _failed_collective(verdicts, col, errors)
        return errors
    errors += _record_collective(verdicts, col, st, group, notes, "ring")
    _check_hosts(verdicts, col, nodes, group, st.args["backend"])
    return errors


def _pairwise(nodes, verdicts, st, group, notes, specs=None):
    floor = _pair_floor(nodes[0], specs or {}) if group.limit_gbps is None else None
    rep = mn.pairwise(nodes, st, group.at_bytes, group.limit_gbps, group.slow_pct, group.seed, group.rounds, floor)
    verdicts.record("pairwise_seed", rep.seed, extra={"round_wall_s": rep.round_wall_s})
    for p in rep.pairs:
        verdicts.record("pairwise_busbw_gbps", p.busbw, "GB/s", extra={
            "pair": list(p.pair), "round": p.round, "passed": p.passed, "why": p.why, "wall_s": p.wall_s})
    lines = [f"# pairwise, seed {rep.seed}, {len(rep.round_wall_s)} round(s) of {rep.round_wall_s} s"]
    for p in rep.pairs:
        fig = "error" if p.busbw is None else f"{p.busbw:.4g} GB/s"
        lines.append(f"#   round {p.round}  {p.pair[0]:>12} + {p.pair[1]:<12} {fig:>14}  "
                     f"{'pass' if p.passed else 'FAIL'}  {'' if p.passed else p.why}".rstrip())
    verdicts.show("\n".join(lines))
    for h, (passed, total) in rep.status["ratio"].items():
        verdicts.for_host(h).record("pairwise_pass_ratio", round(passed / total, 3) if total else None, "",
                                    extra={"passed": passed, "pairs": total, "seed": rep.seed})
    for h, why in rep.named:
        verdicts.for_host(h).fail(f"pairwise all-reduce: {why} (seed {rep.seed})")
    if rep.no_reference:  # the median is slow itself: nothing singles a host out, and saying nothing hides it
        verdicts.fail(f"pairwise all-reduce: {rep.no_reference} (seed {rep.seed})")
    if not rep.named and rep.status["unresolved"]:
        bad = [p for p in rep.pairs if not p.passed]
        verdicts.fail(f"pairwise all-reduce: no pair passed to single out a host (seed {rep.seed}); unresolved: "
                      f"{', '.join(rep.status['unresolved'])}; "
                      + "; ".join(f"{a}+{b}: {p.why}" for p in bad[:4] for a, b in [p.pair]))
    # a pair whose documents disagree with the world launched has no figure: an error, not a slow pair
    return [f"pair {a}+{b} (round {p.round}): " + "; ".join(p.world_problems)
            for p in rep.pairs if p.world_problems for a, b in [p.pair]]


def _rails(nodes, verdicts, st, group, notes):
    res = mn.rails(nodes, st, st.ranks_per_node, group.at_bytes, group.limit_gbps, group.slow_pct)
    errors: list[str] = []
    for r in res:
        verdicts.record("rail_busbw_gbps", r.busbw, "GB/s", gpu=r.rail, extra={
            "passed": r.passed, "why": r.why, "wall_s": r.collective.wall_s, "hosts": r.collective.hosts})
        _link_errors(verdicts, r.collective, f"rail {r.rail}")
        if r.collective.world_problems:
            errors.append(f"rail {r.rail}: " + r.collective.message.replace("\n", "; "))
            continue
        if r.collective.rendezvous:  # no rank started: the hosts that cannot reach the rendezvous, by name
            _failed_collective(verdicts, r.collective, errors)
            continue
        if r.collective.ok:
            _check_hosts(verdicts, r.collective, nodes, group, st.args["backend"])
            verdicts.show(f"# rail {r.rail} (CUDA_VISIBLE_DEVICES={r.rail} on every host)\n{format_table(r.collective.doc)}")
        if not r.passed:
            verdicts.fail(f"rail {r.rail} (GPU {r.rail} of every host) is slow or broken: {r.why}")
    return errors


def _not_rerun(nodes: list[HostRunner], verdicts, request) -> None:
    """A rerun of a failed-hosts.txt (``--limit @FILE``) whose run failed this test, with too few hosts
    selected to repeat it: an ERROR of each selected host "not rerun: ...", naming the partners to select
    (gpuaccept.config.limitfile.rerun_partners), never a skip that would let the host pass."""
    partners = rerun_partners(request.config.getoption("limit"), "test_allreduce_multinode", [n.name for n in nodes])
    if partners is None:
        return
    for n in nodes:
        others = [h for h in partners if h != n.name]
        verdicts.for_host(n.name).error(
            f"not rerun: the inter-node all-reduce needs at least 2 hosts; it did not pass on "
            f"{' '.join(partners)} (rerun with --limit {','.join(partners)}"
            + (f", or bring back {', '.join(others[:4])}{', ...' if len(others) > 4 else ''}" if others else "")
            + ")")
    verdicts.finish()


def test_allreduce_multinode(nodes: list[HostRunner], verdicts, request):
    """All-reduce across the selected hosts (pattern from ``--nccl-pattern``), correctness, transport and
    limit checked; a host that fails, hangs or stops answering is named."""
    replayed = [n.name for n in nodes if n.replay_dir]
    if replayed:  # saved documents answer one host's probes; a collective between hosts cannot be replayed
        nodes = [n for n in nodes if not n.replay_dir]
        if len(nodes) < 2:
            pytest.skip(f"inter-node all-reduce needs at least 2 hosts that run commands; {len(replayed)} of the "
                        f"selected replay saved documents (gpuaccept_replay: {', '.join(replayed[:5])}"
                        f"{', ...' if len(replayed) > 5 else ''})")
    if len(nodes) < 2:
        _not_rerun(nodes, verdicts, request)
        pytest.skip(f"inter-node all-reduce needs at least 2 hosts; {len(nodes)} selected")
    # only the hosts that are reachable and ready take part; each other one is named with its own cause
    nodes, unready = mn.readiness(nodes)
    if unready:
        _not_ready(verdicts, unready, [n.name for n in nodes])
    if len(nodes) < 2:
        verdicts.finish()
    st, group, notes = _settings(nodes)  # a malformed group var: ConfigError, reported as an error
    pattern = request.config.getoption("nccl_pattern")
    if pattern == "pairwise":  # the SKU files' pair floors judge a pair when no group var limit does
        errors = _pairwise(nodes, verdicts, st, group, notes, request.getfixturevalue("specs"))
    else:
        errors = {"ring": _ring, "rails": _rails}[pattern](nodes, verdicts, st, group, notes)
    verdicts.finish()
    if errors:
        raise ProbeError(verdicts.host, "; ".join(errors))
