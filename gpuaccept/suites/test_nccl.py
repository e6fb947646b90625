"""nccl layer: all-reduce across every GPU of the node, one process per GPU (probe: nccl_allreduce).

algbw = bytes / time and busbw = algbw * 2(n-1)/n, GB/s = 1e9 B/s, as nccl-tests defines them. The judged
sweep runs with NCCL_ALGO=Ring, because the SKU files' floors are Ring floors (see gpuaccept.judging.nccl);
NCCL's own choice (NVLS on NVSwitch systems) is measured apart at the judged size and recorded. The verdict
is read at the threshold's message size; every row is kept in results.json; ``-s`` prints the table in
the nccl-tests layout.
"""
import pytest

from gpuaccept.judging.shape import node_shape

from gpuaccept.judging import nccl as nccl_judge
from gpuaccept.judging import linkcounters, nccl_scope
from gpuaccept.errors import GpuacceptError, RanksFailed
from gpuaccept.runner.multinode import nccl_environment, pinned_env
from gpuaccept.judging.nccl_table import RowNotFound, format_table, row_at
from gpuaccept.runner.host import HostRunner

pytestmark = pytest.mark.nccl


def test_allreduce(node: HostRunner, gpus, sku, verdicts, request):
    """Intra-node all-reduce sweep (1 MiB..4 GiB by x4), correctness checked, transport checked; not
    applicable to a node of one GPU (gpuaccept.judging.shape: skipped naming the shape judged)."""
    n = len(gpus)
    if n == 1:
        pytest.skip(f"1 GPU on {node.name}: nothing to reduce within the node "
                    f"({node_shape(node.gpu_inventory(), sku).describe()})")
    limit = sku.checks.get("allreduce_busbw_gbps")
    at = int(limit.at_bytes) if limit and limit.at_bytes else 4 * 2**30
    host_env = nccl_environment(node.host.vars)
    pin = pinned_env(host_env)
    # deadline_s: the runner's (gpuaccept.runner.host.probe_deadline), just inside the probe timeout
    args = {"backend": "nccl", "world_size": n, "min_bytes": 2**20, "max_bytes": max(at, 2**20), "factor": 4}
    try:
        doc = node.probe("nccl_allreduce", {**args, "env": pin} if pin else args, env=host_env)
    except RanksFailed as e:  # ranks that hung or died in the collective: the node's all-reduce is broken (a
        if not nccl_judge.collective_broke(e.evidence) or n == 1:  # failure, as across nodes); ranks that never
            raise  # got past their setup (torch, libnccl) did not run it: an error with its cause
        algo = "NCCL_ALGO=" + pin["NCCL_ALGO"] if pin else "NCCL_ALGO from the inventory"
        seen = nccl_scope.seen_variables(None, host_env, pin, _env_doc(node))
        verdicts.fail(nccl_scope.named(f"all-reduce over {n} GPUs ({algo}, {args['min_bytes']}..{args['max_bytes']} B)"
                                       f" failed: {_ranks_words(e)}", seen))
        verdicts.finish()
    verdicts.conditions(doc, gpus)
    seen = _seen(node, doc, host_env, pin)
    table = format_table(doc)
    verdicts.show(f"# {node.name}: nccl_allreduce, world size {n}, NCCL {doc.get('nccl_version')}, "
          f"{'NCCL_ALGO=' + pin['NCCL_ALGO'] if pin else 'NCCL_ALGO from the inventory'}\n{table}")
    verdicts.record("allreduce_table", doc.get("rows"), extra={"nccl_version": doc.get("nccl_version"),
                    "transports": doc.get("transports"), "algos": doc.get("algos"), "world_size": n,
                    "pinned": pin, "net_devices": doc.get("net_devices"), "nccl_variables": seen})
    verdicts.record("nccl_version", doc.get("nccl_version"))
    LOAD_COUNTERS[node.name] = {"doc": doc.get("link_counters"), "load": f"all-reduce over {n} GPUs",
                                "replayed": bool(node.replay_dir)}
    if n == 1:
        pytest.skip(f"1 GPU on {node.name}: nothing to reduce (the probe ran with world size 1)")
    errors: list[str] = []
    wrong, unchecked = nccl_judge.wrong_count(doc.get("rows") or [], doc.get("wrong_total"))
    errors += unchecked
    verdicts.record("allreduce_wrong_elements", None if unchecked else wrong, "elements")
    if wrong:  # hardware evidence whatever the variables (no transport variable makes NCCL compute wrong sums)
        where = nccl_judge.wrong_where(doc.get("rows") or [])
        verdicts.fail(nccl_scope.named(f"all-reduce over {n} GPUs produced {wrong} wrong elements"
                                       + (f" ({where})" if where else ""), seen), check="allreduce_wrong_elements")
    _judge_transport(verdicts, doc, sku, seen)
    for p in nccl_judge.net_device_problems(doc.get("net_devices"), node.host.vars.get("nccl_ib_hca"),
                                            node.host.vars.get("nccl_socket_ifname")):
        verdicts.fail(nccl_scope.named(p, seen))
    if limit is not None:
        row = row_at(doc, at)
        # Judged on the in-place column: it is the true ncclAllReduce (torch has no copy-free out-of-place
        # all-reduce; the probe's out-of-place column is a reduce-scatter + all-gather, see its docstring).
        extra = {"bytes": row.get("bytes"), "algbw_gbps": row.get("ip_algbw_gbps"),
                 "oop_busbw_gbps": row.get("oop_busbw_gbps"), "algo": row.get("ip_algo"),
                 "algorithms": nccl_judge.row_algorithms(row, doc)}
        why = nccl_judge.algorithm_problem(row, doc, where=sku.path)
        if why:
            errors.append(why)
            verdicts.record("allreduce_busbw_gbps", row.get("ip_busbw_gbps"), "GB/s", extra={**extra, "note": why})
        else:
            verdicts.record("allreduce_busbw_gbps", row.get("ip_busbw_gbps"), "GB/s",
                            limit=limit.for_world_size(n), extra=extra,
                            context=nccl_scope.named(nccl_judge.floor_context(row, n, limit), seen))
    if pin:
        _record_nccl_default(node, verdicts, args, at, host_env, seen)
    for e in errors:  # recorded, so that a failure beside them does not hide them (the outcome lists both)
        verdicts.error(e)
    verdicts.finish()


#: host -> the link error counters read around its all-reduce (test_allreduce), judged by test_allreduce_link_errors
LOAD_COUNTERS: dict[str, dict] = {}


def test_allreduce_link_errors(node: HostRunner, gpus, sku, verdicts):
    """NVLink and InfiniBand error counters read by the all-reduce probe right before and right after its sweep:
    their growth against the SKU's NVLink limits and gpuaccept/data/ib_counter_limits.yaml
    (gpuaccept/judging/linkcounters.py). Skipped where test_allreduce did not run the load on this host; a replayed
    capture taken before the counters were read is skipped naming that, a live run without them is an error."""
    got = LOAD_COUNTERS.get(node.name)
    why = linkcounters.not_measured_why(got, node.name, "all-reduce", "no all-reduce ran on this host in this run "
                                        "(test_allreduce skipped or not selected)")
    if why:
        pytest.skip(why)
    for gpu, f in linkcounters.findings({"link_counters": got["doc"]}, sku, got["load"]):
        verdicts.apply([f], gpu=gpu)
    verdicts.finish()


def _env_doc(node: HostRunner) -> dict | None:
    """The node's NCCL variables with their sources (probe nccl_env, cached), or None when it cannot be read."""
    try:
        return node.cached_probe("nccl_env", {})
    except GpuacceptError:
        return None


def _seen(node: HostRunner, doc: dict, host_env: dict, pin: dict) -> list[dict]:
    """The variables of gpuaccept.judging.nccl_scope the ranks ran with, and where each was set; the nccl_env probe
    is asked only for a variable NCCL read that the workers' environment did not carry (a config file)."""
    seen = nccl_scope.seen_variables(doc, host_env, pin)
    if any(v["from"] == nccl_scope.CONF_FILES for v in seen):
        seen = nccl_scope.seen_variables(doc, host_env, pin, _env_doc(node))
    return seen


def _judge_transport(verdicts, doc: dict, sku, seen: list[dict]) -> None:
    """Channels without the SKU's transport fail; when a variable the ranks ran with switches that transport off,
    the cause is that variable (configuration: fix-config naming it), never the GPUs."""
    expect = sku.expect.get("nccl_transport")
    problem = nccl_judge.transport_problem(doc.get("transports") or {}, expect, who=sku.sku)
    if not problem:
        return
    why = nccl_scope.explaining(seen, expect)
    if why:
        verdicts.fail(nccl_scope.named(nccl_scope.explained(problem, why[0]), seen), check="allreduce_transport",
                      cause=nccl_scope.transport_cause(why[0], why[1:]))
    else:
        verdicts.fail(nccl_scope.named(problem, seen), check="allreduce_transport")


def _ranks_words(e: RanksFailed) -> str:
    """The probe's own words for ranks that failed: the error's message without the ``nccl_allreduce: `` the
    runner puts before it (gpuaccept.runner.parse)."""
    return e.msg.removeprefix("nccl_allreduce: ")


def _record_nccl_default(node: HostRunner, verdicts, args: dict, at: int, host_env: dict,
                         seen: list[dict]) -> None:
    """NCCL's own algorithm choice (no NCCL_ALGO from us) at the judged size: recorded, not judged against the
    Ring floor; its correctness is judged (wrong elements fail, a crash or hang fails)."""
    try:
        doc = node.probe("nccl_allreduce", {**args, "min_bytes": at, "max_bytes": at}, env=host_env)
        row = row_at(doc, at)
    except GpuacceptError as e:
        # the same rule as the judged sweep: ranks that hung or died fail; a probe or host that could not run
        # it (no connection, command timeout, interrupted run) is an error, never a hardware failure
        if isinstance(e, RanksFailed) and nccl_judge.collective_broke(e.evidence):
            verdicts.fail(nccl_scope.named(f"all-reduce with NCCL's own algorithm choice at {at} B failed: "
                                           f"{_ranks_words(e)}", seen))
        else:
            verdicts.error(f"all-reduce with NCCL's own algorithm choice at {at} B not measured: {e}")
        return
    except RowNotFound as e:
        verdicts.error(f"all-reduce with NCCL's own algorithm choice: {e}")
        return
    algos = nccl_judge.row_algorithms(row, doc)
    verdicts.record("allreduce_default_busbw_gbps", row.get("ip_busbw_gbps"), "GB/s", extra={
        "bytes": row.get("bytes"), "algo": row.get("ip_algo"), "algorithms": algos,
        "note": "NCCL's own algorithm choice; recorded, not judged (the SKU floor is for Ring)"})
    wrong, unchecked = nccl_judge.wrong_count([row])
    if wrong or unchecked:
        verdicts.fail(nccl_scope.named(f"all-reduce with NCCL's own choice ({'+'.join(algos) or 'algorithm unknown'}) "
                                       f"at {at} B: " + (f"{wrong} wrong elements" if wrong else "; ".join(unchecked)),
                                       seen), check="allreduce_wrong_elements" if wrong else None)
