"""Inter-node all-reduce, pure part: what to run, who broke it, how to pair hosts (no I/O).

The results of one collective (:class:`HostResult`, :class:`Collective`), how one collective runs
(:class:`Settings`), the NCCL environment of a host (:func:`nccl_environment`), the kill pattern
(:func:`kill_command`), culprits (:func:`blame`), figures (:func:`busbw_at`, :func:`judge_figures`, through
:mod:`gpuaccept.judging.nccl`) and the pairwise planning. Launching and killing live in
:mod:`gpuaccept.runner.multinode.launch`; the group vars in :mod:`gpuaccept.config.multinode`.
"""
from __future__ import annotations

import random
import re
import shlex
import uuid
from dataclasses import dataclass, field

from gpuaccept.causes import Cause
from gpuaccept.judging import nccl as nccl_judge
from gpuaccept.errors import ConfigError, NodeError, PackageMissing
from gpuaccept.judging.nccl_table import RowNotFound, row_at
from gpuaccept.probes._supervisor import STAGES, normalize_address
from gpuaccept.config.multinode import CALL_MARGIN_S, DEFAULT_PAIRWISE_ROUNDS, DEFAULT_SLOW_PCT, Settings

PROBE = "nccl_allreduce"
MARKER_PREFIX = "gpuaccept-ar-"


def nccl_environment(host_vars: dict) -> dict[str, str]:
    """NCCL variables for a host's ranks from its inventory vars: ``nccl_socket_ifname`` → NCCL_SOCKET_IFNAME,
    ``nccl_ib_hca`` → NCCL_IB_HCA, both in NCCL's exact-name form (``=mlx5_1``, not the prefix ``mlx5_1``
    that also takes ``mlx5_10``: :func:`gpuaccept.judging.nccl.exact_list`), and the ``nccl_env`` mapping for
    anything else (e.g. NCCL_NVLS_ENABLE), passed as written. Raises ConfigError naming the var on a malformed
    list."""
    env = {str(k): str(v) for k, v in (host_vars.get("nccl_env") or {}).items()}
    for var, name in (("nccl_socket_ifname", "NCCL_SOCKET_IFNAME"), ("nccl_ib_hca", "NCCL_IB_HCA")):
        if host_vars.get(var):
            try:
                env[name] = nccl_judge.exact_list(host_vars[var])
            except ValueError as e:
                raise ConfigError(f"host var {var}: {e}") from None
    return env


# ---------------------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------------------

@dataclass
class HostResult:
    """One host's share of one collective. ``kind``: ``ok`` | ``failed`` (the probe's document says so) |
    ``aborted`` (we aborted it) | ``unreachable`` | ``timeout`` (the SSH call outlived its limit) |
    ``crashed`` (the probe raised: bad arguments, no interpreter) | ``rendezvous`` (the host cannot resolve or
    reach the rendezvous: :func:`rendezvous_failures`; no rank was started) | ``not_started`` (its rendezvous
    check passed, but another host's failed: no rank was started). ``error``: one line, without the
    host; ``cause``: why, where it is known (the call's error's, gpuaccept.errors; a rendezvous failure's)."""

    host: str
    kind: str
    doc: dict | None = None
    error: str = ""
    seconds: float = 0.0
    cause: Cause | None = None


@dataclass
class Collective:
    """Outcome of :func:`run_collective`. ``doc``: node 0's document when ``ok``; ``culprits``: ``[(host,
    reason)]``; ``singled_out``: False when no evidence points at particular hosts (every failing host is
    listed); ``message``: one line per culprit, each starting with the host name. ``world_problems``: the
    collective ran, but the hosts' documents disagree with what was launched (:func:`world_failure`): then
    ``ok`` is False, no figure is taken, and the verdict is an error. ``rendezvous``: the hosts that could not
    resolve or reach the rendezvous in the check before the ranks (``{host: the check's rendezvous dict}``);
    then no rank was started."""

    hosts: list[str]
    ok: bool
    results: dict[str, HostResult]
    doc: dict | None = None
    culprits: list[tuple[str, str]] = field(default_factory=list)
    singled_out: bool = True
    message: str = ""
    marker: str = ""
    world_problems: list[str] = field(default_factory=list)
    master_addr: str = ""
    master_port: int | None = None
    attempts: int = 0
    wall_s: float = 0.0
    rendezvous: dict = field(default_factory=dict)





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


def master_address(host_vars: dict, address: str) -> str:
    """The rendezvous address: the first host's ``nccl_master_addr`` var, else its address (``ansible_host``);
    IPv6 literals without brackets (``[fd00::1]`` -> ``fd00::1``: torch's ``MASTER_ADDR`` and
    ``getaddrinfo`` take the bare form)."""
    return str(host_vars.get("nccl_master_addr") or address).strip().strip("[]")


# ---------------------------------------------------------------------------------------------------------
# readiness and the rendezvous check (pure): the documents of nccl_allreduce's ``check`` mode
# ---------------------------------------------------------------------------------------------------------

def unready(host: str, doc: dict) -> NodeError | None:
    """Why ``host`` cannot take part in an all-reduce, from its ``{"check": "ready"}`` document (the probe's
    ``_allreduce_rendezvous.facts``), as the error naming its cause; None when it can."""
    if doc.get("torch") is False:
        python = str(doc.get("python") or "python3")
        return PackageMissing(host, f"torch is not installed for {python} (set ansible_python_interpreter to the "
                                    f"Python that has it)", {"package": "torch", "module": "torch", "python": python})
    return None


def port_taken(result: HostResult | None) -> bool:
    """True when node 0's rendezvous check found the port taken meanwhile (the controller picks another)."""
    rv = ((result.doc or {}).get("rendezvous") or {}) if result is not None else {}
    return rv.get("listen_error") == "addr_in_use"


def rendezvous_cause(host: str, rv: dict) -> Cause:
    """The cause of ``host`` failing the rendezvous check: connectivity, ``rendezvous_unreachable``, with the
    address, port and error as evidence (the action table's command names them)."""
    return Cause("connectivity", "rendezvous_unreachable", host, evidence={
        "from_host": host, "address": rv.get("address"), "port": rv.get("port"), "resolved": rv.get("resolved"),
        "stage": rv.get("stage"), "error": rv.get("error")})


def rendezvous_line(rv: dict, master_host: str) -> str:
    """One line for a host that failed the rendezvous check, naming the address and the port."""
    where = f"{rv.get('address')}:{rv.get('port')}"
    if rv.get("stage") == "listen":
        return f"cannot host the rendezvous on port {rv.get('port')}: {rv.get('error')}"
    return (f"cannot reach the rendezvous {where} (node 0, {master_host}; nccl_master_addr or its ansible_host): "
            f"{rv.get('error')}; no rank started")


def rendezvous_failures(results: dict[str, HostResult], order: list[str]) -> dict[str, HostResult]:
    """The hosts that failed the rendezvous check (pure), as :class:`HostResult` of kind ``rendezvous`` with
    their cause, in ``order``; empty when every host reached it. A call that raised keeps its own kind and
    cause. When node 0's call raised or it could not listen, node 0 alone is named: the others' refused connections follow from it."""
    out: dict[str, HostResult] = {}
    if not order:
        return out
    node0 = results.get(order[0])
    if node0 is not None and node0.kind != "ok":  # no listener: the others' refused connections follow from it
        return {order[0]: node0}
    rv0 = ((node0.doc or {}).get("rendezvous") or {}) if node0 is not None else {}
    for h in order:
        r = results.get(h)
        if r is None:
            continue
        if r.kind != "ok":
            out[h] = r
            continue
        rv = (r.doc or {}).get("rendezvous") or {}
        if rv0.get("stage") == "listen" and h != order[0]:
            continue
        if not rv.get("connected"):
            out[h] = HostResult(h, "rendezvous", r.doc, rendezvous_line(rv, order[0]), r.seconds,
                                rendezvous_cause(h, rv))
    return out


# ---------------------------------------------------------------------------------------------------------
# culprits (pure)
# ---------------------------------------------------------------------------------------------------------

def interface_cause(host: str, doc: dict | None) -> Cause | None:
    """The configuration cause of a host whose ranks ran with a socket-interface setting that names no
    interface of that host, from its document's ``socket_ifnames`` (the probe's facts:
    ``probes/_allreduce_args.socket_settings``), None when every setting its backend reads finds its interface.
    GLOO_SOCKET_IFNAME fails when any name it lists is missing (torch's gloo opens a device per listed name);
    NCCL_SOCKET_IFNAME when it selects no interface at all (NCCL's ``ncclFindInterfaces``). Kind
    ``socket_ifname_missing``; evidence: ``variable``, ``value``, ``from`` (inventory, node environment,
    probe), ``setting`` (the inventory var where it came from there), ``missing``, ``interfaces`` (the host's, from
    the same document: absent from older documents)."""
    for s in (doc or {}).get("socket_ifnames") or []:
        if not isinstance(s, dict) or not s.get("used"):
            continue
        var = s.get("variable")
        bad = (not s.get("matched")) if var == "NCCL_SOCKET_IFNAME" else bool(s.get("missing"))
        if not bad:
            continue
        src = s.get("from") or "environment"
        setting = f"{var}={s.get('value')}"
        if src == "inventory":
            setting = (f"nccl_socket_ifname (inventory, as {setting})" if var == "NCCL_SOCKET_IFNAME"
                       else f"{setting} (inventory nccl_env)")
        else:
            setting = f"{setting} ({src})"
        return Cause("configuration", "socket_ifname_missing", host, evidence={
            "variable": var, "value": s.get("value"), "from": src, "setting": setting,
            "missing": ", ".join(s.get("missing") or s.get("listed") or []),
            "interfaces": ", ".join((doc or {}).get("interfaces") or [])})
    return None


def interface_line(cause: Cause) -> str:
    """``"GLOO_SOCKET_IFNAME=eth9 (node environment) names no interface of this host (eth9 missing)"``: the
    reason of :func:`interface_cause`, without the host."""
    ev = cause.evidence
    return f"{ev.get('setting')} names no interface of this host ({ev.get('missing')} missing)"


def setup_ranks(r: HostResult) -> list[dict]:
    """The ranks of a failed share that never left their ``setup`` stage (the interpreter, torch, the CUDA
    context, libnccl: ``probes/_supervisor.py`` ``STAGES``): its document's ``ranks`` whose ``stage`` says so,
    where the share ended of itself (``kind`` failed, its ``outcome`` not ``aborted``: ranks the controller
    stopped were cut wherever they were). Empty for any other share, and for documents whose ranks carry no
    stage (an older probe). Pure."""
    doc = r.doc or {}
    if r.kind != "failed" or doc.get("outcome") == "aborted":
        return []
    return [x for x in doc.get("ranks") or [] if isinstance(x, dict) and x.get("stage") == STAGES[0]]


def setup_reason(ranks: list[dict]) -> str:
    """``"rank 1 in 'importing torch' (setup): rc 1: OSError: ..."`` for :func:`setup_ranks`' first three; a rank
    that was still running there (no reason of its own) reads ``"rank 1 still in 'importing torch' (setup)"``."""
    return "; ".join(f"rank {x.get('rank')} in '{x.get('phase')}' (setup): {x['reason']}" if x.get("reason")
                     else f"rank {x.get('rank')} still in '{x.get('phase')}' (setup)" for x in ranks[:3])


def _local_reason(doc: dict) -> str:
    bad = [r for r in doc.get("ranks") or [] if r.get("evidence") == "local"]
    parts = [f"rank {r['rank']} in '{r.get('phase')}': {r.get('reason')}" for r in bad[:3]]
    return "; ".join(parts) or str(doc.get("error"))


def blame(results: dict[str, HostResult], order: list[str],
          addresses: dict[str, str] | None = None) -> tuple[list[tuple[str, str]], bool]:
    """Who broke a collective: ``([(host, reason)], singled_out)`` from the hosts' results (pure).

    1. hosts whose call raised (``unreachable``, ``timeout``: stopped answering, ``crashed``), hosts whose
       ranks ran with a socket-interface setting naming no interface of theirs (:func:`interface_cause`), hosts
       whose ranks never left their setup (:func:`setup_ranks`: torch or libnccl not loading, an import that
       hangs; the other hosts' ranks then wait for them in the rendezvous) and hosts whose own ranks stalled
       or died (document ``evidence: local``), in ``order``;
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
        ifc = interface_cause(h, r.doc) if r.kind in ("failed", "aborted") else None
        if r.kind in ("unreachable", "timeout", "crashed", "rendezvous"):
            first.append((h, r.error))
        elif ifc is not None:  # its own setting: whatever its ranks' error reads like
            first.append((h, f"{interface_line(ifc)}: {r.error}"))
        elif stuck := setup_ranks(r):  # its ranks never joined: whoever waited for them is not to blame
            first.append((h, setup_reason(stuck)))
        elif r.kind in ("failed", "aborted") and (r.doc or {}).get("evidence") == "local":
            first.append((h, _local_reason(r.doc)))
    if first:
        return first, True
    owners: dict[str, set[str]] = {}
    for h in order:
        r = results.get(h)
        for a in {(addresses or {}).get(h), (r.doc or {}).get("local_address") if r else None} - {None}:
            owners.setdefault(normalize_address(a), set()).add(h)
    named: dict[str, list[str]] = {}
    for h in order:
        r = results.get(h)
        if r is None or r.kind != "failed" or (r.doc or {}).get("evidence") != "peer":
            continue
        for a in r.doc.get("peer_addresses") or []:
            who = owners.get(normalize_address(a), set())
            if len(who) == 1 and h not in who:
                named.setdefault(next(iter(who)), []).append(h)
    if named:
        return [(h, f"named by the network errors of {', '.join(sorted(set(named[h])))}")
                for h in order if h in named], True
    bad = [(h, results[h].error) for h in order if h in results and results[h].kind in ("failed",)]
    if not bad:
        bad = [(h, results[h].error) for h in order if h in results and results[h].kind != "ok"]
    return bad, False


def failure_lines(col: Collective) -> tuple[list[str], list[tuple[str, str]]]:
    """What :func:`describe_failure` says, in its parts: ``(lines of the collective as a whole, [(host, line of
    that host)])``, one ``(host, line)`` per culprit in :attr:`Collective.culprits` order: ``([], [("mn2",
    "stopped answering: ... (all-reduce over mn1, mn2, mn3)")])``; where no host is singled out, the whole's
    line says so and each host's line is its reason alone; without culprits, one line of the whole."""
    over = f"all-reduce over {', '.join(col.hosts)}"
    if not col.culprits:
        return [f"{over} failed"], []
    if not col.singled_out:
        return [f"{over} failed and no host is singled out:"], [(h, why) for h, why in col.culprits]
    return [], [(h, f"{why} ({over})") for h, why in col.culprits]


def describe_failure(col: Collective) -> str:
    """One line per culprit, host first: ``mn2: stopped answering: ... (all-reduce over mn1, mn2, mn3)``
    (:func:`failure_lines`, joined)."""
    whole, per_host = failure_lines(col)
    return "\n".join(whole + [f"{h}: {line}" for h, line in per_host])


def disagreeing(col: Collective, problems: list[tuple[str, str]]) -> None:
    """Make ``col`` a collective whose hosts' documents disagree with the world launched (``problems``:
    :func:`world_failure`'s): not ok, no host singled out, each host that disagrees a culprit with what
    disagrees, ``world_problems`` those as lines, host first (``"mn2: node_rank 0 (launched 1)"``)."""
    col.ok, col.singled_out = False, False
    col.culprits = list(problems)
    col.world_problems = [f"{h}: {what}" for h, what in problems]


def world_failure(col: Collective, ranks_per_node: int) -> list[tuple[str, str]]:
    """How the hosts' documents of a collective that succeeded disagree with what was launched, ``[(host, what
    disagrees)]`` (see :func:`gpuaccept.judging.nccl.world_problems_by_host`); empty when they agree."""
    return nccl_judge.world_problems_by_host(col.hosts, ranks_per_node, col.marker,
                                             {h: r.doc or {} for h, r in col.results.items()})


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
                  pool: list[float] | None = None, floors: dict | None = None,
                  source: str = "group var nccl_internode_busbw_gbps") -> dict:
    """Pass/fail of each figure of one round (pairs or rails), ``{key: (passed, why)}``: the one rule of
    :func:`gpuaccept.judging.nccl.judge_round` (``floors``: ``{key: Limit}``, the SKU file's floor for each
    pair's transport, :func:`pair_floor`; ``source``: where ``limit`` came from, said in a failure line)."""
    return nccl_judge.judge_round(figures, limit, slow_pct, pool, source=source, floors=floors)


def pair_floor(floor, results: dict[str, HostResult]):
    """The SKU file's floor (``checks.internode_pair_busbw_gbps`` Limit, or None) for one pair's collective,
    from the transports both hosts' documents report (:func:`gpuaccept.judging.nccl.pair_floor`)."""
    transports: dict = {}
    for r in results.values():
        for t, n in ((r.doc or {}).get("transports") or {}).items():
            transports[t] = transports.get(t, 0) + (n or 0)
    return nccl_judge.pair_floor(floor, transports)


def no_reference(history: list["PairResult"], limit: float | None, judged_by_floor: set,
                 slow_pct: float = DEFAULT_SLOW_PCT) -> str:
    """The pairwise search's "no reference: most pairs are slow: ..." line (empty when it does not apply):
    with no ``limit`` (GB/s), :func:`gpuaccept.judging.nccl.slow_majority` over the first round's pairs not
    judged against a SKU floor (``judged_by_floor``: ``{(round, pair)}``): the first round is the one that pairs
    every host at random, later ones pair suspects on purpose. The hosts never in a fast pair are listed."""
    if limit is not None or not history:
        return ""
    first = min(p.round for p in history)
    figures = {(p.round, p.pair): p.busbw for p in history
               if p.round == first and (p.round, p.pair) not in judged_by_floor}
    line = nccl_judge.slow_majority(figures, slow_pct)
    if not line:
        return ""
    vals = sorted(v for v in figures.values() if v is not None)
    share = float(slow_pct) / 100.0
    fast = [v for v in vals if nccl_judge._median(vals) < v * share]
    cut = nccl_judge._median(fast) * share
    in_fast = {h for p in history if p.busbw is not None and p.busbw >= cut for h in p.pair}
    slow_hosts = sorted({h for p in history for h in p.pair} - in_fast)
    more = f", ... ({len(slow_hosts)} in all)" if len(slow_hosts) > 8 else ""
    return f"{line}; hosts never in a fast pair: {', '.join(slow_hosts[:8])}{more}" if slow_hosts else line


def transport_problem(transports: dict, expect: str | None) -> str | None:
    """Why a host's NCCL network channels do not match ``expect``: the one rule of
    :func:`gpuaccept.judging.nccl.transport_problem`, on the ``NET/...`` channels only."""
    return nccl_judge.transport_problem(transports, expect, network_only=True)


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
    world_problems: list = field(default_factory=list)


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

def pinned_env(host_env: dict | None = None) -> dict:
    """``{"NCCL_ALGO": "Ring"}`` (:data:`gpuaccept.judging.nccl.PIN_ENV`) unless ``host_env`` (the first host's
    :func:`nccl_environment`) sets NCCL_ALGO itself: the inter-node limit is a Ring figure, and a row another
    algorithm produced is not judged against it (an error, see :func:`gpuaccept.judging.nccl.algorithm_problem`)."""
    return {} if "NCCL_ALGO" in (host_env or {}) else dict(nccl_judge.PIN_ENV)


@dataclass
class PairwiseReport:
    """Outcome of :func:`gpuaccept.runner.multinode.launch.pairwise`: ``seed``, every pair of every round, the final
    ``status`` (:func:`pairwise_status`), ``named`` hosts with their reasons, round wall times (s), and
    ``no_reference``: the line of :func:`no_reference` when most pairs are slow and nothing judges them."""

    seed: int
    pairs: list[PairResult]
    status: dict
    named: list[tuple[str, str]]
    round_wall_s: list[float]
    dead: list[str]
    no_reference: str = ""


@dataclass
class RailResult:
    """One rail (local GPU index ``rail`` on every host, alone): figure, verdict and the collective."""

    rail: int
    busbw: float | None
    passed: bool
    why: str
    collective: Collective
