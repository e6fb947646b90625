"""Inter-node all-reduce, I/O part: launch one probe per host over SSH, collect, kill (pure planning and
judging: :mod:`gpuaccept.judging.multinode`; group vars: :mod:`gpuaccept.config.multinode`).

One *collective* is one all-reduce over a group of hosts (:func:`run_collective`): a free port is picked on
the group's first host (node 0, which hosts the rendezvous), then every host's ``nccl_allreduce`` probe is
started at once, each from its own thread over its own SSH connection, with ``nnodes``, ``node_rank``,
``ranks_per_node``, ``master_addr``, ``master_port`` and a ``marker`` unique to the collective (it is in every
probe's and worker's command line). Each probe supervises its local ranks (deadline, stall detection, kill)
and always answers with a document; see ``gpuaccept/probes/nccl_allreduce.py``, "Multi-node mode".

Before it: the hosts that can take part at all are found once per test (:func:`readiness`: reached, agent
started, NVML usable, torch installed; the others are named with their own causes), and every collective's
rendezvous is checked before any rank starts (:func:`check_rendezvous`: node 0 listens on the port, every node
resolves the address and connects, :data:`RENDEZVOUS_CHECK_S` at most); a node that cannot is named
(kind ``rendezvous``, a connectivity cause) and no rank is started.

Failure handling, in order:

* the first host that fails (its call raised, or its document is not ok) starts a short grace
  (:data:`ABORT_GRACE_S`) in which the others may report their own evidence; then every host still running
  the collective is aborted through a second SSH connection: ``pkill -TERM`` on the probe's command line
  with the marker (the probe kills its ranks and reports what it saw);
* a host that has not answered when every other host has finished the collective well (which its ranks
  must have joined to the end) gets :data:`LAGGARD_MIN_S` s, or half the time the others took if longer;
  one that has not answered :data:`LAGGARD_MIN_S` s after the abort likewise; then its call is cancelled
  and it is named "stopped answering" (its SSH session or host froze) without waiting for the call's own
  timeout;
* a port found taken on node 0 is retried with a fresh port (:data:`PORT_ATTEMPTS` in all);
* after any failed collective every host that answers gets ``pkill -KILL`` of the marker (probes and workers),
  so nothing is left when the next collective starts;
* :func:`~gpuaccept.judging.multinode.blame` (pure) names the culprit(s): hosts whose call raised (unreachable,
  timed out: "stopped answering", the probe crashed), then hosts whose own ranks stalled or died (the probe's ``evidence:
  local``), else hosts whose address the others' network errors name; when nothing singles out a host, every
  failing host is listed and the result says so.

Patterns (``--nccl-pattern``): ``ring`` (every selected host in one collective), ``pairwise`` (rounds of
random disjoint pairs, seeded; hosts of failing pairs re-paired with hosts that passed; a host that fails
with good partners is named) and ``rails`` (one collective per local GPU index, ``CUDA_VISIBLE_DEVICES=<i>``
and one rank per host, naming a slow rail). Every collective runs with ``NCCL_ALGO=Ring`` unless the inventory's
``nccl_env`` sets NCCL_ALGO: the inter-node limit is a Ring figure (see :mod:`gpuaccept.judging.nccl`).

Figures follow nccl-tests (``doc/PERFORMANCE.md``): algbw = bytes / time, busbw = algbw * 2(n-1)/n, GB/s =
1e9 B/s; the judged figure is the in-place busbw at the limit's message size
(:func:`~gpuaccept.judging.multinode.busbw_at`).
"""
from __future__ import annotations

import random
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any, Callable

from gpuaccept.transport import shell
from gpuaccept.errors import AuthError, CommandTimeout, GpuacceptError, HostKeyError, HostUnreachable, NodeError
from gpuaccept.runner.host import HostRunner
from gpuaccept.runner.parse import probe_error
from gpuaccept.transport import running
from gpuaccept.judging.blockers import readiness_problem
from gpuaccept.judging.multinode import (DEFAULT_PAIRWISE_ROUNDS, DEFAULT_SLOW_PCT, PROBE, Collective, HostResult, PairResult,
                   PairwiseReport, RailResult, Settings, blame, busbw_at, describe_failure, judge_figures,
                   interface_cause, kill_command, master_address, new_marker, next_pairs, nccl_environment,
                   pairwise_status, no_reference, pair_floor, pinned_env, port_taken, random_pairs, rendezvous_failures, unready,
                   disagreeing, setup_ranks, setup_reason, world_failure)

#: seconds the other hosts get to report their own evidence after the first failure, before they are aborted
ABORT_GRACE_S = 3.0
#: seconds a host may still answer after every other host finished the collective ok (its ranks took part
#: to the end, so only its teardown and the way back remain: NCCL's teardown of a 2xH200 world takes < 5 s)
LAGGARD_MIN_S = 30.0
#: seconds allowed for one kill/sweep command on one host
KILL_TIMEOUT_S = 15.0
#: rendezvous attempts of one collective when node 0 finds the port taken
PORT_ATTEMPTS = 3
#: seconds of the rendezvous check before the ranks start (node 0 listens that long at most; the others retry
#: a refused connection until then): a node that cannot resolve or reach the rendezvous is named within it
RENDEZVOUS_CHECK_S = 10
#: seconds allowed for one host's readiness check (its gpu_inventory, then the probe's ``check: ready``)
READY_TIMEOUT_S = 60.0

_UNREACHABLE = (HostUnreachable, HostKeyError, AuthError)


def pick_port(node: HostRunner) -> int:
    """A TCP port free on ``node`` now (it binds port 0 on every address and reports the number)."""
    cmd = shell.command([*shell.interpreter_words(node.python), "-c", 'import socket; s = socket.socket(); s.bind(("", 0)); '
                                            "print(s.getsockname()[1])"])
    res = node.run(cmd, timeout=30)
    out = res.stdout.decode(errors="replace").split()
    if res.rc != 0 or not out or not out[-1].isdigit():
        err = (res.stderr.decode(errors="replace").strip().splitlines() or [f"rc {res.rc}"])[-1]
        raise NodeError(node.name, f"could not pick a rendezvous port: {err}")
    return int(out[-1])


def _setup_cause(node: HostRunner, r: HostResult):
    """The cause of a share whose ranks never left their setup (gpuaccept.judging.multinode.setup_ranks), as a
    single-node probe's ranks that died there are read (gpuaccept.runner.parse.probe_error: a library that fails
    while it loads, a module missing, else the probe's own error); None for any other share."""
    ranks = setup_ranks(r)
    if not ranks:
        return None
    fact = {"outcome": str((r.doc or {}).get("outcome") or "failed"), "stage": "setup",
            "ranks": [{k: x.get(k) for k in ("rank", "phase", "stage", "rc")} for x in ranks]}
    return probe_error(node.name, setup_reason(ranks), node.python, ranks_failed=fact).cause


def _launch(node: HostRunner, args: dict, env: dict, timeout: float) -> HostResult:
    """Run one host's probe; never raises: the outcome is in the HostResult (with the call's error's cause)."""
    t0 = time.monotonic()
    try:
        doc = node.probe(PROBE, args, timeout=timeout, env=env)
        kind = "ok" if doc.get("ok") else "failed"
        r = HostResult(node.name, kind, doc, "" if kind == "ok" else str(doc.get("error")), time.monotonic() - t0)
        r.cause = None if kind == "ok" else interface_cause(node.name, doc) or _setup_cause(node, r)
        return r
    except CommandTimeout as e:
        return HostResult(node.name, "timeout", None, f"stopped answering: probe call timed out after "
                          f"{timeout:.0f}s ({e.msg})", time.monotonic() - t0, e.cause)
    except _UNREACHABLE as e:
        return HostResult(node.name, "unreachable", None, f"unreachable: {e.msg}", time.monotonic() - t0, e.cause)
    except NodeError as e:
        return HostResult(node.name, "crashed", None, e.msg, time.monotonic() - t0, e.cause)
    except Exception as e:  # noqa: BLE001 - anything else is this host's failure, not the run's
        return HostResult(node.name, "crashed", None, f"{type(e).__name__}: {e}", time.monotonic() - t0)


def _ready(node: HostRunner) -> NodeError | None:
    """Why ``node`` cannot take part (the error naming its cause), or None: reached, its agent started and its
    NVML usable (gpu_inventory, cached for the run), its Python with torch (the probe's ``check: ready``)."""
    try:
        doc = node.gpu_inventory()
        problem = readiness_problem(doc, node.python, node.gpus_declared) if not doc.get("nvml_available") else None
        if problem:
            return problem.error(node.name) if hasattr(problem, "error") else NodeError(node.name, str(problem))
        return unready(node.name, node.probe(PROBE, {"check": "ready"}, timeout=min(READY_TIMEOUT_S,
                                                                                   node.probe_timeout)))
    except NodeError as e:
        return e
    except Exception as e:  # noqa: BLE001 - anything else is this host's problem, not the run's
        return NodeError(node.name, f"{type(e).__name__}: {e}")


def readiness(nodes: list[HostRunner]) -> tuple[list[HostRunner], dict[str, NodeError]]:
    """The hosts that can take part in an all-reduce, in order, and ``{host: error}`` for the others (each
    error carries its own cause: unreachable, name not resolved, agent or interpreter missing, NVML unusable, no
    torch), all hosts asked at once."""
    if not nodes:
        return [], {}
    with ThreadPoolExecutor(max_workers=len(nodes), thread_name_prefix="mn-ready") as ex:
        found = list(ex.map(_ready, nodes))
    return [n for n, e in zip(nodes, found) if e is None], {n.name: e for n, e in zip(nodes, found) if e is not None}


def check_rendezvous(nodes: list[HostRunner], master: str, port: int, marker: str,
                     window_s: float = RENDEZVOUS_CHECK_S) -> dict[str, HostResult]:
    """Every node resolves ``master`` and connects to ``port``, where node 0 listens (the probe's ``check:
    rendezvous``: ``probes/_allreduce_rendezvous.py``), before any rank starts; bounded by ``window_s``. The
    hosts' results (their documents' ``rendezvous``); :func:`gpuaccept.judging.multinode.rendezvous_failures`
    reads them."""
    hosts = [n.name for n in nodes]
    base = {"check": "rendezvous", "nnodes": len(nodes), "master_addr": master, "master_port": port,
            "marker": marker, "hosts": hosts, "check_s": window_s}
    with ThreadPoolExecutor(max_workers=len(nodes), thread_name_prefix="mn-rdv") as ex:
        found = list(ex.map(lambda i: _launch(nodes[i], {**base, "node_rank": i, "host": hosts[i]}, {},
                                              window_s + 30), range(len(nodes))))
    return {r.host: r for r in found}


def _side_run(node: HostRunner, command: str, timeout: float) -> None:
    """Run ``command`` on ``node`` over a second, fresh connection (the node's own is busy with the probe
    call). Uses the node's transport factory, so the same host keys and credentials apply. Best effort."""
    transport = None
    try:
        transport = node._factory(node.host)  # noqa: SLF001 - same factory, same settings, separate connection
        transport.run(command, timeout=timeout)
    except Exception:  # noqa: BLE001 - an unreachable host is reported by its own call
        pass
    finally:
        if transport is not None:
            try:
                transport.close()
            except Exception:  # noqa: BLE001
                pass


def _in_threads(fn: Callable[[HostRunner], Any], nodes: list[HostRunner], limit_s: float) -> None:
    """``fn(node)`` for every node in daemon threads; wait at most ``limit_s`` seconds in all."""
    threads = [threading.Thread(target=fn, args=(n,), daemon=True, name=f"mn-{n.name}") for n in nodes]
    for t in threads:
        t.start()
    end = time.monotonic() + limit_s
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))


def abort(nodes: list[HostRunner], marker: str) -> None:
    """Abort a collective on ``nodes`` while their probe calls are running: SIGTERM to the probes (each kills
    its ranks and reports), then, a few seconds later, SIGKILL to whatever still carries the marker."""
    term, kill = kill_command(marker, "TERM", probes_only=True), kill_command(marker, "KILL")
    _in_threads(lambda n: _side_run(n, f"{term}; sleep 5; {kill}", KILL_TIMEOUT_S), nodes, KILL_TIMEOUT_S + 5)


def sweep(nodes: list[HostRunner], marker: str) -> None:
    """After a failed collective: SIGKILL every probe and worker carrying ``marker`` on every host that
    answers (hosts found unreachable are skipped by their transport at once)."""
    cmd = kill_command(marker, "KILL")

    def one(n: HostRunner) -> None:
        try:
            n.run(cmd, timeout=KILL_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - best effort: the host is blamed by its own result
            pass

    _in_threads(one, nodes, KILL_TIMEOUT_S + 10)


def _cancel_calls(hosts: set[str], marker: str) -> None:
    """Cancel the collective's probe calls (the commands carrying ``marker``) in flight to ``hosts``: their
    transports kill what they can reach and raise Interrupted in the waiting threads."""
    for r in running():
        if r.host in hosts and marker in r.command and not r.cancelled.is_set():
            r.cancel("the other hosts finished the collective long ago")


def _run_once(nodes: list[HostRunner], st: Settings, master: str, port: int, marker: str) -> dict[str, HostResult]:
    hosts = [n.name for n in nodes]
    base = {**st.args, "nnodes": len(nodes), "ranks_per_node": st.ranks_per_node, "master_addr": master,
            "master_port": port, "marker": marker, "hosts": hosts, "deadline_s": st.deadline_s}
    base.setdefault("timeout_s", st.deadline_s)
    if st.stall_s:
        base["stall_s"] = st.stall_s
    results: dict[str, HostResult] = {}
    with ThreadPoolExecutor(max_workers=len(nodes), thread_name_prefix="mn") as ex:
        futs = {ex.submit(_launch, n, {**base, "node_rank": i, "host": n.name,
                                       "inventory_env": sorted(nccl_environment(n.host.vars))},
                          {**nccl_environment(n.host.vars), **st.env}, st.call_timeout()): n
                for i, n in enumerate(nodes)}
        pending, abort_at, aborted = set(futs), None, []
        t0, late_at, late = time.monotonic(), None, {}
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            now = time.monotonic()
            for f in done:
                r = f.result()
                results[r.host] = r
                if r.kind != "ok" and abort_at is None:
                    abort_at = now + ABORT_GRACE_S
            if abort_at is not None and not aborted and pending and now >= abort_at:
                aborted = [futs[f] for f in pending]
                threading.Thread(target=abort, args=(aborted, marker), daemon=True).start()
            if pending and late_at is None and (aborted or (abort_at is None and results)):
                late_at = now + (LAGGARD_MIN_S if aborted else max(LAGGARD_MIN_S, 0.5 * (now - t0)))
                since = ("the collective was aborted (another host failed)" if aborted else
                         "every other host finished the collective, which its ranks joined to the end")
            if late_at is not None and not late and pending and now >= late_at:
                late = {futs[f].name: now - t0 for f in pending}
                _cancel_calls(set(late), marker)
        for h, waited in late.items():
            r = results[h]
            if r.kind not in ("ok", "failed"):
                r.kind = "timeout"
                r.error = (f"stopped answering: {since}, but its probe call had not returned {waited:.0f} s after "
                           f"the start (its SSH session or the host froze?); call cancelled")
        for n in aborted:  # what our abort caused is no evidence against the host
            r = results[n.name]
            if (r.kind == "failed" and (r.doc or {}).get("outcome") == "aborted") or r.kind == "crashed":
                r.kind = "aborted"  # crashed: the SIGTERM came before the probe could catch it
    return results


def run_collective(nodes: list[HostRunner], st: Settings) -> Collective:
    """One all-reduce over ``nodes`` (node 0 = ``nodes[0]``): see the module docstring. Never raises for a
    host's failure: the Collective says who failed and why. A collective whose documents disagree with what
    was launched (:func:`gpuaccept.judging.multinode.world_failure`) is not ok and carries ``world_problems``."""
    t0 = time.monotonic()
    hosts = [n.name for n in nodes]
    master = master_address(nodes[0].host.vars, nodes[0].host.address)
    results: dict[str, HostResult] = {}
    port, marker, attempt = None, "", 0
    for attempt in range(1, PORT_ATTEMPTS + 1):
        marker = new_marker()
        try:
            port = pick_port(nodes[0])
        except GpuacceptError as e:
            err = _launch_error(nodes[0], e)
            results = {hosts[0]: err}
            break
        checked = check_rendezvous(nodes, master, port, marker)
        if port_taken(checked.get(hosts[0])) and attempt < PORT_ATTEMPTS:
            continue
        unreached = rendezvous_failures(checked, hosts)
        if unreached:  # no rank started: the hosts that cannot resolve or reach the rendezvous are named
            return _unreached(hosts, checked, unreached, marker, master, port, attempt, t0)
        results = _run_once(nodes, st, master, port, marker)
        r0 = results[hosts[0]]
        if all(r.kind == "ok" for r in results.values()):
            break
        sweep([n for n in nodes if results[n.name].kind != "unreachable"], marker)
        if not (r0.doc and r0.doc.get("outcome") == "addr_in_use"):
            break
    ok = len(results) == len(hosts) and all(r.kind == "ok" for r in results.values())
    col = Collective(hosts, ok, results, marker=marker, master_addr=master, master_port=port, attempts=attempt,
                     wall_s=round(time.monotonic() - t0, 3))
    if ok:
        problems = world_failure(col, st.ranks_per_node)
        if not problems:
            col.doc = results[hosts[0]].doc
            return col
        disagreeing(col, problems)
        col.message = (f"all-reduce over {', '.join(hosts)}: the hosts' documents disagree with the world "
                       f"launched ({len(hosts)} hosts x {st.ranks_per_node} ranks, marker {marker}); no figure "
                       f"taken:\n" + "\n".join(col.world_problems))
        return col
    col.culprits, col.singled_out = blame(results, hosts, {n.name: n.host.address for n in nodes})
    col.message = describe_failure(col)
    return col


def _unreached(hosts: list[str], checked: dict[str, HostResult], unreached: dict[str, HostResult], marker: str,
               master: str, port: int, attempt: int, t0: float) -> Collective:
    """The collective that never started: the rendezvous check named ``unreached``."""
    results = {h: unreached.get(h) or HostResult(h, "not_started", r.doc, "", r.seconds) for h, r in checked.items()}
    col = Collective(hosts, False, results, marker=marker, master_addr=master, master_port=port, attempts=attempt,
                     wall_s=round(time.monotonic() - t0, 3),
                     rendezvous={h: (r.doc or {}).get("rendezvous") or {} for h, r in unreached.items()
                                 if r.kind == "rendezvous"})
    col.culprits, col.singled_out = [(h, r.error) for h, r in unreached.items()], True
    col.message = describe_failure(col)
    return col


def _launch_error(node: HostRunner, e: Exception) -> HostResult:
    cause = getattr(e, "cause", None)
    if isinstance(e, CommandTimeout):
        return HostResult(node.name, "timeout", None, f"stopped answering: {e.msg}", cause=cause)
    if isinstance(e, _UNREACHABLE):
        return HostResult(node.name, "unreachable", None, f"unreachable: {e.msg}", cause=cause)
    return HostResult(node.name, "crashed", None, getattr(e, "msg", str(e)), cause=cause)



def ring(nodes: list[HostRunner], st: Settings) -> Collective:
    """Every selected host in one collective."""
    return run_collective(nodes, Settings(st.args, st.ranks_per_node, st.deadline_s, st.stall_s,
                                          {**pinned_env(nccl_environment(nodes[0].host.vars)), **st.env}))


def run_concurrently(groups: list[list[HostRunner]], st: Settings) -> list[Collective]:
    """Several collectives at once (disjoint groups), one thread each."""
    def one(g: list[HostRunner]) -> Collective:
        env = {**pinned_env(nccl_environment(g[0].host.vars)), **st.env}
        return run_collective(g, Settings(st.args, st.ranks_per_node, st.deadline_s, st.stall_s, env))

    with ThreadPoolExecutor(max_workers=max(1, len(groups)), thread_name_prefix="mn-group") as ex:
        return list(ex.map(one, groups))



def pairwise(nodes: list[HostRunner], st: Settings, at_bytes: int | None, limit: float | None,
             slow_pct: float = DEFAULT_SLOW_PCT, seed: int | None = None,
             max_rounds: int = DEFAULT_PAIRWISE_ROUNDS, floor=None) -> PairwiseReport:
    """Rounds of disjoint pairs (see the module docstring). Round 1 pairs every host at random (``seed``,
    recorded; random when None); later rounds re-pair the unresolved hosts with hosts that passed, until
    none is unresolved, no host passed, or ``max_rounds``. A host whose probe call raised (unreachable,
    stopped answering) is named at once and sits out the later rounds. Without ``limit`` (GB/s) a pair is
    judged against ``floor`` (the SKU file's ``checks.internode_pair_busbw_gbps`` Limit, or None) for its
    transport when there is one, else against the round's median; a median that is itself slow is said in
    the report's ``no_reference``."""
    seed = random.SystemRandom().randrange(1 << 31) if seed is None else int(seed)
    rng = random.Random(seed)
    by_name = {n.name: n for n in nodes}
    hosts = [n.name for n in nodes]
    history: list[PairResult] = []
    dead: dict[str, str] = {}
    walls = []
    by_floor: set = set()
    pairs, _ = random_pairs(hosts, rng)
    for rnd in range(1, max_rounds + 1):
        if not pairs:
            break
        t0 = time.monotonic()
        cols = run_concurrently([[by_name[a], by_name[b]] for a, b in pairs], st)
        walls.append(round(time.monotonic() - t0, 3))
        figures, floors = {}, {}
        for pair, col in zip(pairs, cols):
            figures[pair] = busbw_at(col.doc, at_bytes)[0] if col.ok else None
            floors[pair] = pair_floor(floor, col.results) if col.ok and limit is None else None
            if floors[pair] is not None:
                by_floor.add((rnd, pair))
            for h, r in col.results.items():
                if r.kind in ("unreachable", "timeout"):
                    dead.setdefault(h, r.error)
        pool = [p.busbw for p in history if p.busbw is not None]
        verdict = judge_figures(figures, limit, slow_pct, pool, floors)
        for pair, col in zip(pairs, cols):
            passed, why = verdict[pair]
            if not col.ok:
                why = col.message.replace("\n", "; ")
            history.append(PairResult(rnd, pair, figures[pair], passed, why, col.wall_s, col.culprits,
                                      col.world_problems))
        status = pairwise_status(hosts, history, set(dead))
        if not status["unresolved"] or not status["good"]:
            break
        pairs = next_pairs(hosts, history, rng, set(dead))
    status = pairwise_status(hosts, history, set(dead))
    named = []
    for h in status["named"]:
        if h in dead:
            named.append((h, dead[h]))
            continue
        bad = [p for p in history if h in p.pair and not p.passed]
        partners = [p.pair[1] if p.pair[0] == h else p.pair[0] for p in bad]
        good_partners = [x for x in partners if x in status["good"]]
        named.append((h, f"failed with good partner(s) {', '.join(good_partners)}: "
                         + "; ".join(p.why for p in bad if (set(p.pair) - {h}) & set(good_partners))))
    return PairwiseReport(seed, history, status, named, walls, sorted(dead),
                          no_reference(history, limit, by_floor, slow_pct))



def rails(nodes: list[HostRunner], st: Settings, n_rails: int, at_bytes: int | None, limit: float | None,
          slow_pct: float = DEFAULT_SLOW_PCT) -> list[RailResult]:
    """One collective per local GPU index ``i`` < ``n_rails``, one after another, each with
    ``CUDA_VISIBLE_DEVICES=i`` and one rank per host; judged against ``limit``, else against the median of
    the rails (a rail below ``slow_pct`` percent of it is slow). A rail whose rendezvous check failed ends the
    list: the next rails meet at the same address."""
    cols = []
    for i in range(n_rails):
        env = {**pinned_env(nccl_environment(nodes[0].host.vars)), **st.env, "CUDA_VISIBLE_DEVICES": str(i)}
        cols.append(run_collective(nodes, Settings(st.args, 1, st.deadline_s, st.stall_s, env)))
        if cols[-1].rendezvous:  # every rail meets at the same address: the next ones would fail alike
            break
    figures = {i: busbw_at(c.doc, at_bytes)[0] if c.ok else None for i, c in enumerate(cols)}
    verdict = judge_figures(figures, limit, slow_pct)
    return [RailResult(i, figures[i], verdict[i][0], verdict[i][1] if c.ok else c.message.replace("\n", "; "), c)
            for i, c in enumerate(cols)]
