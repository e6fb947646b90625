"""Inter-node all-reduce, controller side: launch one probe per host over SSH, collect, kill, blame.

One *collective* is one all-reduce over a group of hosts (:func:`run_collective`): a free port is picked on
the group's first host (node 0, which hosts the rendezvous), then every host's ``nccl_allreduce`` probe is
started at once, each from its own thread over its own SSH connection, with ``nnodes``, ``node_rank``,
``ranks_per_node``, ``master_addr``, ``master_port`` and a ``marker`` unique to the collective (it is in every
probe's and worker's command line). Each probe supervises its local ranks (deadline, stall detection, kill)
and always answers with a document; see ``gpuaccept/probes/nccl_allreduce.py``, "Multi-node mode".

Failure handling, in order:

* the first host that fails (its call raised, or its document is not ok) starts a short grace
  (:data:`ABORT_GRACE_S`) in which the others may report their own evidence; then every host still running
  the collective is aborted through a second SSH connection: ``pkill -TERM`` on the probe's command line
  with the marker (the probe kills its ranks and reports what it saw);
* a port found taken on node 0 is retried with a fresh port (:data:`PORT_ATTEMPTS` in all);
* after any failed collective every host that answers gets ``pkill -KILL`` of the marker (probes and workers),
  so nothing is left when the next collective starts;
* :func:`blame` (pure) names the culprit(s): hosts whose call raised (unreachable, timed out: "stopped
  answering", the probe crashed), then hosts whose own ranks stalled or died (the probe's ``evidence:
  local``), else hosts whose address the others' network errors name; when nothing singles out a host, every
  failing host is listed and the result says so.

Patterns (``--nccl-pattern``): ``ring`` (every selected host in one collective), ``pairwise`` (rounds of
random disjoint pairs, seeded; hosts of failing pairs re-paired with hosts that passed; a host that fails
with good partners is named) and ``rails`` (one collective per local GPU index, ``CUDA_VISIBLE_DEVICES=<i>``
and one rank per host, naming a slow rail). A collective of exactly 2 hosts runs with ``NCCL_ALGO=Ring``.

Figures follow nccl-tests (``doc/PERFORMANCE.md``): algbw = bytes / time, busbw = algbw * 2(n-1)/n, GB/s =
1e9 B/s; the judged figure is the in-place busbw at the limit's message size (:func:`busbw_at`).
"""
from __future__ import annotations

import random
import re
import shlex
import statistics
import threading
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable

from . import shell
from .errors import AuthError, CommandTimeout, GpuacceptError, HostKeyError, HostUnreachable, NodeError
from .nccl_table import RowNotFound, row_at
from .node import Node

PROBE = "nccl_allreduce"
MARKER_PREFIX = "gpuaccept-ar-"
#: seconds the other hosts get to report their own evidence after the first failure, before they are aborted
ABORT_GRACE_S = 3.0
#: seconds added to the probe's own deadline for the SSH call (start-up, shipping, the probe's kill grace)
CALL_MARGIN_S = 30.0
#: seconds allowed for one kill/sweep command on one host
KILL_TIMEOUT_S = 15.0
#: rendezvous attempts of one collective when node 0 finds the port taken
PORT_ATTEMPTS = 3
#: a pair (pairwise) or rail below this percentage of the round's median busbw fails, when no limit is set
DEFAULT_SLOW_PCT = 20.0
#: rounds of the pairwise pattern at most (the first random, the others re-pairing suspects)
DEFAULT_PAIRWISE_ROUNDS = 4

_UNREACHABLE = (HostUnreachable, HostKeyError, AuthError)


def nccl_environment(host_vars: dict) -> dict[str, str]:
    """NCCL variables for a host's ranks from its inventory vars: ``nccl_socket_ifname`` → NCCL_SOCKET_IFNAME,
    ``nccl_ib_hca`` → NCCL_IB_HCA, and the ``nccl_env`` mapping for anything else (e.g. NCCL_NVLS_ENABLE)."""
    env = {str(k): str(v) for k, v in (host_vars.get("nccl_env") or {}).items()}
    for var, name in (("nccl_socket_ifname", "NCCL_SOCKET_IFNAME"), ("nccl_ib_hca", "NCCL_IB_HCA")):
        if host_vars.get(var):
            env[name] = str(host_vars[var])
    return env


# ---------------------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------------------

@dataclass
class HostResult:
    """One host's share of one collective. ``kind``: ``ok`` | ``failed`` (the probe's document says so) |
    ``aborted`` (we aborted it) | ``unreachable`` | ``timeout`` (the SSH call outlived its limit) |
    ``crashed`` (the probe raised: bad arguments, no interpreter). ``error``: one line, without the host."""

    host: str
    kind: str
    doc: dict | None = None
    error: str = ""
    seconds: float = 0.0


@dataclass
class Collective:
    """Outcome of :func:`run_collective`. ``doc``: node 0's document when ``ok``; ``culprits``: ``[(host,
    reason)]``; ``singled_out``: False when no evidence points at particular hosts (every failing host is
    listed); ``message``: one line per culprit, each starting with the host name."""

    hosts: list[str]
    ok: bool
    results: dict[str, HostResult]
    doc: dict | None = None
    culprits: list[tuple[str, str]] = field(default_factory=list)
    singled_out: bool = True
    message: str = ""
    marker: str = ""
    master_addr: str = ""
    master_port: int | None = None
    attempts: int = 0
    wall_s: float = 0.0


@dataclass
class Settings:
    """How to run one collective: ``args`` (probe arguments shared by every host: backend, sizes, iters...),
    ``ranks_per_node``, ``deadline_s`` (the probe's wall-clock limit, also its collective watchdog),
    ``stall_s`` (a rank without heartbeat this long, not running, stalls its host), ``env`` (extra
    variables for every host, on top of each host's :func:`nccl_environment`)."""

    args: dict
    ranks_per_node: int
    deadline_s: int
    stall_s: int | None = 60
    env: dict = field(default_factory=dict)

    def call_timeout(self) -> float:
        return self.deadline_s + CALL_MARGIN_S


# ---------------------------------------------------------------------------------------------------------
# launch, collect, kill
# ---------------------------------------------------------------------------------------------------------

def new_marker() -> str:
    """A string unique to one collective, e.g. ``gpuaccept-ar-3f9c2a61d0b4``."""
    return MARKER_PREFIX + uuid.uuid4().hex[:12]


def kill_command(marker: str, signal_name: str = "KILL", probes_only: bool = False) -> str:
    """Shell command killing this collective's processes on a host with ``pkill -f``. ``probes_only``: the
    probe processes (``python nccl_allreduce.py {...marker...}``), which then kill their own ranks and report;
    else probes and workers (``... nccl_allreduce.py --worker {...}``). The pattern is a regex that matches
    neither the transport's shell wrapper (there the JSON follows a quote) nor the pkill command line itself
    (there the dot is written ``[.]``)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", marker):
        raise ValueError(f"marker must be [A-Za-z0-9_-]+, got {marker!r}")
    worker = "" if probes_only else "(--worker )?"
    pattern = f"^[^ ]+ ([^ ]*/)?{PROBE}[.]py {worker}[{{].*{marker}"
    return f"pkill -{signal_name} -f {shlex.quote(pattern)}; true"


def master_address(first: Node) -> str:
    """The rendezvous address: the first host's ``nccl_master_addr`` var, else its ``ansible_host`` address."""
    return str(first.host.vars.get("nccl_master_addr") or first.host.address)


def pick_port(node: Node) -> int:
    """A TCP port free on ``node`` now (it binds port 0 on every address and reports the number)."""
    cmd = shell.command([node.python, "-c", 'import socket; s = socket.socket(); s.bind(("", 0)); '
                                            "print(s.getsockname()[1])"])
    res = node.run(cmd, timeout=30)
    out = res.stdout.decode(errors="replace").split()
    if res.rc != 0 or not out or not out[-1].isdigit():
        err = (res.stderr.decode(errors="replace").strip().splitlines() or [f"rc {res.rc}"])[-1]
        raise NodeError(node.name, f"could not pick a rendezvous port: {err}")
    return int(out[-1])


def _launch(node: Node, args: dict, env: dict, timeout: float) -> HostResult:
    """Run one host's probe; never raises: the outcome is in the HostResult."""
    t0 = time.monotonic()
    try:
        doc = node.probe(PROBE, args, timeout=timeout, env=env)
        kind = "ok" if doc.get("ok") else "failed"
        return HostResult(node.name, kind, doc, "" if kind == "ok" else str(doc.get("error")),
                          time.monotonic() - t0)
    except CommandTimeout as e:
        return HostResult(node.name, "timeout", None, f"stopped answering: probe call timed out after "
                          f"{timeout:.0f}s ({e.msg})", time.monotonic() - t0)
    except _UNREACHABLE as e:
        return HostResult(node.name, "unreachable", None, f"unreachable: {e.msg}", time.monotonic() - t0)
    except NodeError as e:
        return HostResult(node.name, "crashed", None, e.msg, time.monotonic() - t0)
    except Exception as e:  # noqa: BLE001 - anything else is this host's failure, not the run's
        return HostResult(node.name, "crashed", None, f"{type(e).__name__}: {e}", time.monotonic() - t0)


def _side_run(node: Node, command: str, timeout: float) -> None:
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


def _in_threads(fn: Callable[[Node], Any], nodes: list[Node], limit_s: float) -> None:
    """``fn(node)`` for every node in daemon threads; wait at most ``limit_s`` seconds in all."""
    threads = [threading.Thread(target=fn, args=(n,), daemon=True, name=f"mn-{n.name}") for n in nodes]
    for t in threads:
        t.start()
    end = time.monotonic() + limit_s
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))


def abort(nodes: list[Node], marker: str) -> None:
    """Abort a collective on ``nodes`` while their probe calls are running: SIGTERM to the probes (each kills
    its ranks and reports), then, a few seconds later, SIGKILL to whatever still carries the marker."""
    term, kill = kill_command(marker, "TERM", probes_only=True), kill_command(marker, "KILL")
    _in_threads(lambda n: _side_run(n, f"{term}; sleep 5; {kill}", KILL_TIMEOUT_S), nodes, KILL_TIMEOUT_S + 5)


def sweep(nodes: list[Node], marker: str) -> None:
    """After a failed collective: SIGKILL every probe and worker carrying ``marker`` on every host that
    answers (hosts found unreachable are skipped by their transport at once)."""
    cmd = kill_command(marker, "KILL")

    def one(n: Node) -> None:
        try:
            n.run(cmd, timeout=KILL_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - best effort: the host is blamed by its own result
            pass

    _in_threads(one, nodes, KILL_TIMEOUT_S + 10)


def _run_once(nodes: list[Node], st: Settings, master: str, port: int, marker: str) -> dict[str, HostResult]:
    hosts = [n.name for n in nodes]
    base = {**st.args, "nnodes": len(nodes), "ranks_per_node": st.ranks_per_node, "master_addr": master,
            "master_port": port, "marker": marker, "hosts": hosts, "deadline_s": st.deadline_s}
    base.setdefault("timeout_s", st.deadline_s)
    if st.stall_s:
        base["stall_s"] = st.stall_s
    results: dict[str, HostResult] = {}
    with ThreadPoolExecutor(max_workers=len(nodes), thread_name_prefix="mn") as ex:
        futs = {ex.submit(_launch, n, {**base, "node_rank": i, "host": n.name},
                          {**nccl_environment(n.host.vars), **st.env}, st.call_timeout()): n
                for i, n in enumerate(nodes)}
        pending, abort_at, aborted = set(futs), None, []
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            for f in done:
                r = f.result()
                results[r.host] = r
                if r.kind != "ok" and abort_at is None:
                    abort_at = time.monotonic() + ABORT_GRACE_S
            if abort_at is not None and not aborted and pending and time.monotonic() >= abort_at:
                aborted = [futs[f] for f in pending]
                threading.Thread(target=abort, args=(aborted, marker), daemon=True).start()
        for n in aborted:  # what our abort caused is no evidence against the host
            r = results[n.name]
            if (r.kind == "failed" and (r.doc or {}).get("outcome") == "aborted") or r.kind == "crashed":
                r.kind = "aborted"  # crashed: the SIGTERM came before the probe could catch it
    return results


def run_collective(nodes: list[Node], st: Settings) -> Collective:
    """One all-reduce over ``nodes`` (node 0 = ``nodes[0]``): see the module docstring. Never raises for a
    host's failure: the Collective says who failed and why."""
    t0 = time.monotonic()
    hosts = [n.name for n in nodes]
    master = master_address(nodes[0])
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
        col.doc = results[hosts[0]].doc
        return col
    col.culprits, col.singled_out = blame(results, hosts, {n.name: n.host.address for n in nodes})
    col.message = describe_failure(col)
    return col


def _launch_error(node: Node, e: Exception) -> HostResult:
    if isinstance(e, CommandTimeout):
        return HostResult(node.name, "timeout", None, f"stopped answering: {e.msg}")
    if isinstance(e, _UNREACHABLE):
        return HostResult(node.name, "unreachable", None, f"unreachable: {e.msg}")
    return HostResult(node.name, "crashed", None, getattr(e, "msg", str(e)))


# ---------------------------------------------------------------------------------------------------------
# culprits (pure)
# ---------------------------------------------------------------------------------------------------------

def _local_reason(doc: dict) -> str:
    bad = [r for r in doc.get("ranks") or [] if r.get("evidence") == "local"]
    parts = [f"rank {r['rank']} in '{r.get('phase')}': {r.get('reason')}" for r in bad[:3]]
    return "; ".join(parts) or str(doc.get("error"))


def blame(results: dict[str, HostResult], order: list[str],
          addresses: dict[str, str] | None = None) -> tuple[list[tuple[str, str]], bool]:
    """Who broke a collective: ``([(host, reason)], singled_out)`` from the hosts' results (pure).

    1. hosts whose call raised (``unreachable``, ``timeout``: stopped answering, ``crashed``) and hosts
       whose own ranks stalled or died (document ``evidence: local``), in ``order``;
    2. else hosts whose address (``addresses``: inventory address, plus each document's ``local_address``)
       the others' network errors name (``peer_addresses``), when the address maps to one host only;
    3. else every host that did not succeed, with ``singled_out`` False (an aborted host without evidence
       of its own is left out unless nothing else is left).
    Hosts missing from ``results`` (never launched) are ignored."""
    first: list[tuple[str, str]] = []
    for h in order:
        r = results.get(h)
        if r is None:
            continue
        if r.kind in ("unreachable", "timeout", "crashed"):
            first.append((h, r.error))
        elif r.kind in ("failed", "aborted") and (r.doc or {}).get("evidence") == "local":
            first.append((h, _local_reason(r.doc)))
    if first:
        return first, True
    owners: dict[str, set[str]] = {}
    for h in order:
        r = results.get(h)
        for a in {(addresses or {}).get(h), (r.doc or {}).get("local_address") if r else None} - {None}:
            owners.setdefault(a, set()).add(h)
    named: dict[str, list[str]] = {}
    for h in order:
        r = results.get(h)
        if r is None or r.kind != "failed" or (r.doc or {}).get("evidence") != "peer":
            continue
        for a in r.doc.get("peer_addresses") or []:
            who = owners.get(a, set())
            if len(who) == 1 and h not in who:
                named.setdefault(next(iter(who)), []).append(h)
    if named:
        return [(h, f"named by the network errors of {', '.join(sorted(set(named[h])))}")
                for h in order if h in named], True
    bad = [(h, results[h].error) for h in order if h in results and results[h].kind in ("failed",)]
    if not bad:
        bad = [(h, results[h].error) for h in order if h in results and results[h].kind != "ok"]
    return bad, False


def describe_failure(col: Collective) -> str:
    """One line per culprit, host first: ``mn2: stopped answering: ... (all-reduce over mn1, mn2, mn3)``."""
    over = f"all-reduce over {', '.join(col.hosts)}"
    if not col.culprits:
        return f"{over} failed"
    if not col.singled_out:
        lines = [f"{over} failed and no host is singled out:"]
        return "\n".join(lines + [f"{h}: {why}" for h, why in col.culprits])
    return "\n".join(f"{h}: {why} ({over})" for h, why in col.culprits)


# ---------------------------------------------------------------------------------------------------------
# figures and judging (pure)
# ---------------------------------------------------------------------------------------------------------

def busbw_at(doc: dict, nbytes: int | None) -> tuple[float | None, dict]:
    """``(in-place busbw GB/s, row)`` at ``nbytes`` (else the nearest smaller size; None: the largest)."""
    rows = doc.get("rows") or []
    if not rows:
        return None, {}
    try:
        row = row_at(doc, nbytes) if nbytes else max(rows, key=lambda r: r["bytes"])
    except RowNotFound:
        return None, {}
    return row.get("ip_busbw_gbps"), row


def judge_figures(figures: dict, limit: float | None, slow_pct: float = DEFAULT_SLOW_PCT,
                  pool: list[float] | None = None) -> dict:
    """Pass/fail of each figure of one round (pairs or rails), ``{key: (passed, why)}`` (pure).

    A figure of None (the collective failed) fails. With ``limit`` (GB/s), a figure below it fails. Without,
    a figure below ``slow_pct`` percent of the round's median fails; when the round has fewer than 2
    figures, the median is taken over ``pool`` (earlier rounds' figures) as well."""
    vals = [v for v in figures.values() if v is not None]
    ref_vals = vals if len(vals) >= 2 else vals + list(pool or [])
    median = statistics.median(ref_vals) if ref_vals else None
    out = {}
    for key, v in figures.items():
        if v is None:
            out[key] = (False, "the collective failed")
        elif limit is not None:
            out[key] = (v >= limit, f"busbw {v:.4g} GB/s {'>=' if v >= limit else '<'} limit {limit:g} GB/s")
        elif median is None or median <= 0:
            out[key] = (True, f"busbw {v:.4g} GB/s (no median to compare with)")
        else:
            pct = 100.0 * v / median
            out[key] = (pct >= slow_pct, f"busbw {v:.4g} GB/s is {pct:.0f}% of the round's median "
                                         f"{median:.4g} GB/s (fails below {slow_pct:g}%)")
    return out


def transport_problem(transports: dict, expect: str | None) -> str | None:
    """Why a host's NCCL network channels do not match ``expect`` (``"IB"``, ``"NET/IB/GDRDMA"``,
    ``"Socket"``...), or None (pure). Only ``NET/...`` channels (the ones that leave the host) are checked;
    each component of ``expect`` other than ``NET`` must be a component of every one of them, so ``IB``
    refuses ``NET/Socket/0`` and ``NET/IB/GDRDMA`` refuses ``NET/IB/0`` (InfiniBand without GPUDirect RDMA).
    A host without any network channel fails too (NCCL said nothing: nothing to trust)."""
    if not expect:
        return None
    want = [p.upper() for p in str(expect).split("/") if p and p.upper() != "NET"]
    net = {t: n for t, n in (transports or {}).items() if t.upper().startswith("NET/")}
    if not net:
        seen = ", ".join(sorted(transports or {})) or "none"
        return f"no network channel in NCCL's INFO lines (transports seen: {seen}) where {expect} is expected"
    bad = sorted(t for t in net if not all(w in t.upper().split("/") for w in want))
    if bad:
        return f"NCCL channels use {', '.join(bad)} where {expect} is expected"
    return None


# ---------------------------------------------------------------------------------------------------------
# pairwise pattern: pure planning
# ---------------------------------------------------------------------------------------------------------

@dataclass
class PairResult:
    """One pair of one round: ``busbw`` GB/s (None when the collective failed), ``passed``, ``why``."""

    round: int
    pair: tuple[str, str]
    busbw: float | None
    passed: bool
    why: str
    wall_s: float = 0.0
    culprits: list = field(default_factory=list)


def random_pairs(hosts: list[str], rng: random.Random) -> tuple[list[tuple[str, str]], list[str]]:
    """Disjoint random pairs of ``hosts`` and the host left over when their number is odd."""
    h = list(hosts)
    rng.shuffle(h)
    pairs = [(h[i], h[i + 1]) for i in range(0, len(h) - 1, 2)]
    return pairs, h[len(pairs) * 2:]


def pairwise_status(hosts: list[str], history: list[PairResult], dead: set[str] = frozenset()) -> dict:
    """Where each host stands after the rounds so far (pure): ``good`` (passed at least one pair),
    ``named`` (never passed, and failed with a good partner, or its probe call raised: ``dead``),
    ``unresolved`` (neither), and ``ratio`` {host: (passed, pairs)}."""
    ratio = {h: [0, 0] for h in hosts}
    for p in history:
        for h in p.pair:
            ratio[h][1] += 1
            ratio[h][0] += int(p.passed)
    good = {h for h in hosts if ratio[h][0] > 0}
    named = set()
    for p in history:
        if p.passed:
            continue
        for h, partner in (p.pair, p.pair[::-1]):
            if h not in good and partner in good:
                named.add(h)
    named |= set(dead) - good
    unresolved = [h for h in hosts if h not in good and h not in named]
    return {"good": sorted(good), "named": [h for h in hosts if h in named], "unresolved": unresolved,
            "ratio": {h: tuple(v) for h, v in ratio.items()}}


def next_pairs(hosts: list[str], history: list[PairResult], rng: random.Random,
               dead: set[str] = frozenset()) -> list[tuple[str, str]]:
    """The next round (pure): each unresolved host with a distinct good host (one it has not met yet when
    possible), every other host still in play paired at random; named and dead hosts sit out."""
    st = pairwise_status(hosts, history, dead)
    met = {h: set() for h in hosts}
    for p in history:
        met[p.pair[0]].add(p.pair[1])
        met[p.pair[1]].add(p.pair[0])
    free_good = [h for h in hosts if h in st["good"] and h not in dead]
    rng.shuffle(free_good)
    pairs = []
    for u in st["unresolved"]:
        if not free_good:
            break
        fresh = [g for g in free_good if g not in met[u]]
        g = (fresh or free_good)[0]
        free_good.remove(g)
        pairs.append((u, g))
    placed = {h for p in pairs for h in p}
    rest = [h for h in hosts if h not in placed and h not in st["named"] and h not in dead]
    more, _ = random_pairs(rest, rng)
    return pairs + more


# ---------------------------------------------------------------------------------------------------------
# patterns: run
# ---------------------------------------------------------------------------------------------------------

def two_node_env(n_hosts: int) -> dict:
    """``{"NCCL_ALGO": "Ring"}`` for a collective of exactly 2 hosts (the verdict uses the ring algorithm:
    NCCL's tree is no faster with 2 nodes and its busbw formula is the ring's), else {}."""
    return {"NCCL_ALGO": "Ring"} if n_hosts == 2 else {}


def ring(nodes: list[Node], st: Settings) -> Collective:
    """Every selected host in one collective."""
    return run_collective(nodes, Settings(st.args, st.ranks_per_node, st.deadline_s, st.stall_s,
                                          {**st.env, **two_node_env(len(nodes))}))


def run_concurrently(groups: list[list[Node]], st: Settings) -> list[Collective]:
    """Several collectives at once (disjoint groups), one thread each."""
    with ThreadPoolExecutor(max_workers=max(1, len(groups)), thread_name_prefix="mn-group") as ex:
        return list(ex.map(lambda g: run_collective(g, Settings(st.args, st.ranks_per_node, st.deadline_s,
                                                                st.stall_s, {**st.env, **two_node_env(len(g))})),
                           groups))


@dataclass
class PairwiseReport:
    """Outcome of :func:`pairwise`: ``seed``, every pair of every round, the final ``status``
    (:func:`pairwise_status`), ``named`` hosts with their reasons, round wall times (s)."""

    seed: int
    pairs: list[PairResult]
    status: dict
    named: list[tuple[str, str]]
    round_wall_s: list[float]
    dead: list[str]


def pairwise(nodes: list[Node], st: Settings, at_bytes: int | None, limit: float | None,
             slow_pct: float = DEFAULT_SLOW_PCT, seed: int | None = None,
             max_rounds: int = DEFAULT_PAIRWISE_ROUNDS) -> PairwiseReport:
    """Rounds of disjoint pairs (see the module docstring). Round 1 pairs every host at random (``seed``,
    recorded; random when None); later rounds re-pair the unresolved hosts with hosts that passed, until
    none is unresolved, no host passed, or ``max_rounds``. A host whose probe call raised (unreachable,
    stopped answering) is named at once and sits out the later rounds."""
    seed = random.SystemRandom().randrange(1 << 31) if seed is None else int(seed)
    rng = random.Random(seed)
    by_name = {n.name: n for n in nodes}
    hosts = [n.name for n in nodes]
    history: list[PairResult] = []
    dead: dict[str, str] = {}
    walls = []
    pairs, _ = random_pairs(hosts, rng)
    for rnd in range(1, max_rounds + 1):
        if not pairs:
            break
        t0 = time.monotonic()
        cols = run_concurrently([[by_name[a], by_name[b]] for a, b in pairs], st)
        walls.append(round(time.monotonic() - t0, 3))
        figures = {}
        for pair, col in zip(pairs, cols):
            figures[pair] = busbw_at(col.doc, at_bytes)[0] if col.ok else None
            for h, r in col.results.items():
                if r.kind in ("unreachable", "timeout"):
                    dead.setdefault(h, r.error)
        pool = [p.busbw for p in history if p.busbw is not None]
        verdict = judge_figures(figures, limit, slow_pct, pool)
        for pair, col in zip(pairs, cols):
            passed, why = verdict[pair]
            if not col.ok:
                why = col.message.replace("\n", "; ")
            history.append(PairResult(rnd, pair, figures[pair], passed, why, col.wall_s, col.culprits))
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
    return PairwiseReport(seed, history, status, named, walls, sorted(dead))


@dataclass
class RailResult:
    """One rail (local GPU index ``rail`` on every host, alone): figure, verdict and the collective."""

    rail: int
    busbw: float | None
    passed: bool
    why: str
    collective: Collective


def rails(nodes: list[Node], st: Settings, n_rails: int, at_bytes: int | None, limit: float | None,
          slow_pct: float = DEFAULT_SLOW_PCT) -> list[RailResult]:
    """One collective per local GPU index ``i`` < ``n_rails``, one after another, each with
    ``CUDA_VISIBLE_DEVICES=i`` and one rank per host; judged against ``limit``, else against the median of
    the rails (a rail below ``slow_pct`` percent of it is slow)."""
    cols = []
    for i in range(n_rails):
        env = {**st.env, "CUDA_VISIBLE_DEVICES": str(i), **two_node_env(len(nodes))}
        cols.append(run_collective(nodes, Settings(st.args, 1, st.deadline_s, st.stall_s, env)))
    figures = {i: busbw_at(c.doc, at_bytes)[0] if c.ok else None for i, c in enumerate(cols)}
    verdict = judge_figures(figures, limit, slow_pct)
    return [RailResult(i, figures[i], verdict[i][0], verdict[i][1] if c.ok else c.message.replace("\n", "; "), c)
            for i, c in enumerate(cols)]
