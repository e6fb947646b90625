"""All-reduce judging, controller side (pure functions, no I/O): one place for every NCCL rule that the
single-node suite (``suites/test_nccl.py``) and the multi-node code (``gpuaccept/multinode``) apply.

* **Algorithm floors.** nccl-tests computes busbw as ``algbw * 2(n-1)/n`` for every algorithm
  (``src/all_reduce.cu`` ``AllReduceGetBw``), so NVLS (NVSwitch multicast) and Ring give different busbw on the
  same node, and an NVLS figure can exceed the one-way link rate. The floors in ``thresholds/*.yaml``
  (``allreduce_busbw_gbps``) are Ring floors: the judged sweep runs with ``NCCL_ALGO=Ring`` (:data:`PIN_ENV`)
  and NCCL's own choice is measured apart and recorded. :func:`algorithm_problem` refuses to judge a row that
  another algorithm produced (an error, never a pass against the Ring floor).
* **Correctness.** A row whose ``#wrong`` is missing or null was not checked: an error, not 0
  (:func:`wrong_count`).
* **Transports** (:func:`transport_problem`): one rule for NCCL's channel lines, on one node and across nodes.
* **Network devices** (:func:`net_device_problems`, :func:`exact_list`): NCCL reads ``NCCL_IB_HCA`` and
  ``NCCL_SOCKET_IFNAME`` as prefixes unless the list starts with ``=`` (NCCL user guide, "Environment
  Variables", NCCL_SOCKET_IFNAME and NCCL_IB_HCA: "To match (or not) an exact interface name, begin the prefix
  string with the = character"; https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html, read
  2026-11-30). gpuaccept passes the inventory's names in the ``=`` form and judges the devices NCCL's INFO
  lines say it used.
* **The world** (:func:`world_problems`): every host's document must describe the world that was launched.
* **A round's median** (:func:`judge_round`): pairs or rails judged against a limit, else against the SKU
  file's floor for the pair's transport (:func:`pair_floor`), else against the round's median through
  :func:`gpuaccept.judging.compute.below_median_pct` and :func:`gpuaccept.config.thresholds.judge`; a median
  that is itself slow is said (:func:`slow_majority`: "no reference: most pairs are slow").
"""
from __future__ import annotations

import re

from gpuaccept.probes._supervisor import STAGES, normalize_address
from gpuaccept.judging.compute import below_median_pct, node_median
from gpuaccept.config.multinode import parse_device_list  # noqa: F401 (judging's name for it)
from gpuaccept.config.thresholds import inventory_limit, judge

#: the algorithm the SKU files' all-reduce floors were measured with, and the environment that pins it
#: (NCCL_ALGO accepts Ring, Tree, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT: NCCL user guide, NCCL_ALGO)
JUDGED_ALGO = "RING"
PIN_ENV = {"NCCL_ALGO": "Ring"}


# ---------------------------------------------------------------------------------------------------------
# algorithm and correctness of one row
# ---------------------------------------------------------------------------------------------------------

def row_algorithms(row: dict, doc: dict, mode: str = "ip") -> list[str]:
    """Algorithms that produced one row's ``mode`` column, upper case, e.g. ``["RING"]``: from NCCL's TUNING
    lines for that size (``row["ip_algo"]`` = ``"RING/SIMPLE"``, ``+``-joined when several), else from the
    ``NCCL_ALGO`` NCCL reports reading (``doc["nccl_env_seen"]``, ENV lines; NCCL before 2.19 prints no
    TUNING lines), else ``[]`` (unknown)."""
    text = row.get(f"{mode}_algo")
    if text:
        return list(dict.fromkeys(part.split("/")[0].upper() for part in str(text).split("+") if part))
    pinned = (doc.get("nccl_env_seen") or {}).get("NCCL_ALGO")
    if pinned:
        return list(dict.fromkeys(a.strip().upper() for a in str(pinned).lstrip("^").split(",") if a.strip()))
    return []


def algorithm_problem(row: dict, doc: dict, floor_algo: str = JUDGED_ALGO, where: str = "") -> str | None:
    """Why the in-place figure of ``row`` cannot be judged against a floor measured with ``floor_algo``, or
    None: the row was produced by another algorithm (or by several), or NCCL said nothing about the
    algorithm. ``where`` names the threshold file in the message."""
    algos = row_algorithms(row, doc)
    size = f"{row.get('bytes')} B"
    src = f" in {where}" if where else ""
    if not algos:
        return (f"all-reduce at {size}: NCCL reported no algorithm (no TUNING line, no NCCL_ALGO): the floor"
                f"{src} is for {floor_algo.title()} only, so the figure is not judged")
    if algos != [floor_algo.upper()]:
        return (f"all-reduce at {size} ran with {'+'.join(algos)}: no floor for "
                f"{'+'.join(a.title() for a in algos)}{src} (its all-reduce floor is for {floor_algo.title()})")
    return None


def size_text(nbytes) -> str:
    """``4294967296`` -> ``"4294967296 B (4 GiB)"``: nccl-tests' size column (bytes) with its binary size when
    it is a whole number of KiB, MiB or GiB (the sizes a sweep by x2/x4 from 1 MiB produces)."""
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes <= 0:
        return f"{nbytes} B"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes % scale == 0:
            return f"{nbytes} B ({nbytes // scale} {unit})"
    return f"{nbytes} B"


def floor_context(row: dict, world_size: int, limit, algo: str = "Ring", extra: str | None = None) -> str:
    """What a judged all-reduce figure is, for the failure line (pure): the column (in-place busbw, nccl-tests'
    right-hand busbw), the row's size, the world size (ranks), the algorithm, and which floor of the threshold
    applied: ``"in-place busbw at 4294967296 B (4 GiB), world size 2, Ring; floor for world size 2"``. Where the
    floor was read is the ``[limit: ...]`` that :func:`gpuaccept.config.thresholds.judge` appends to every failure.
    ``limit`` is the threshold's :class:`gpuaccept.config.thresholds.Limit` as written (before
    :meth:`~gpuaccept.config.thresholds.Limit.for_world_size`): when its ``min_by_world_size`` has ``world_size``, the
    floor is that one (said); else the plain ``min`` (nothing said). ``algo``: what ran the collective
    (``"Ring"``, NCCL pinned; ``"gloo"`` for CPU ranks); ``extra``: appended after a ``;`` (the hosts)."""
    by_n = getattr(limit, "min_by_world_size", None) or {}
    which = f"; floor for world size {world_size}" if world_size in by_n else ""
    return (f"in-place busbw at {size_text(row.get('bytes'))}, world size {world_size}, {algo}{which}"
            + (f"; {extra}" if extra else ""))


#: the stages of a rank at which its collective had started on the node: all but the first, ``setup``
#: (gpuaccept/probes/_supervisor.py STAGES)
BROKE_STAGES = STAGES[1:]


def collective_broke(evidence: dict) -> bool:
    """Whether the ranks that failed (a :class:`gpuaccept.errors.RanksFailed`'s ``evidence``: ``{"outcome",
    "stage", "ranks"}``) broke the collective on the node (pure): they hung, stalled or died at the ``init``
    stage (the rendezvous, the communicator over the node's GPUs and links) or the ``collective`` one (buffers,
    the sizes measured): a finding, as a pair that fails across nodes is. At the ``setup`` stage (the
    interpreter, torch, the CUDA context, libnccl) the probe never got to run it: an error with its cause."""
    return evidence.get("outcome") in ("failed", "stalled", "hung") and evidence.get("stage") in BROKE_STAGES


def wrong_count(rows: list[dict], reported_total=None) -> tuple[int, list[str]]:
    """``(wrong elements over every row and column, problems)``: a row whose ``oop_wrong`` or ``ip_wrong`` is
    missing or null (the correctness check did not run or was not reported) is a problem, never 0. When the
    document's own ``wrong_total`` (``reported_total``) says more, that count is kept: any report of wrong
    elements fails."""
    total, problems = 0, []
    for r in rows:
        for mode in ("oop", "ip"):
            v = r.get(f"{mode}_wrong")
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                what = "missing" if v is None else f"not a count ({v!r})"
                problems.append(f"all-reduce at {r.get('bytes')} B {'in-place' if mode == 'ip' else 'out-of-place'}: "
                                f"#wrong {what}: correctness was not checked")
            else:
                total += v
    if not rows:
        problems.append("all-reduce document has no rows")
    if isinstance(reported_total, int) and not isinstance(reported_total, bool) and reported_total > total:
        total = reported_total
    return total, problems


def wrong_where(rows: list[dict], limit: int = 4) -> str:
    """Where nccl-tests' ``#wrong`` column is not 0, for a failure line (pure): ``"#wrong 12 at 4294967296 B
    (4 GiB) in-place, 3 at 1048576 B (1 MiB) out-of-place"``, the first ``limit`` (size, column) cells in table
    order, then ``"and N more"``; ``""`` when every counted cell is 0."""
    cells = [f"{v} at {size_text(r.get('bytes'))} {'in-place' if mode == 'ip' else 'out-of-place'}"
             for r in rows for mode in ("oop", "ip")
             for v in [r.get(f"{mode}_wrong")] if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    if not cells:
        return ""
    more = f", and {len(cells) - limit} more" if len(cells) > limit else ""
    return "#wrong " + ", ".join(cells[:limit]) + more


# ---------------------------------------------------------------------------------------------------------
# transports and network devices
# ---------------------------------------------------------------------------------------------------------

def transport_problem(transports: dict, expect: str | None, network_only: bool = False,
                      who: str | None = None) -> str | None:
    """Why NCCL's channels (``{"P2P/CUMEM/read": 24, "NET/IB/0/GDRDMA": 8, ...}``) do not match ``expect``
    (``"P2P"``, ``"IB"``, ``"NET/IB/GDRDMA"``, ``"Socket"``...), or None. One rule for one node and for many:
    every component of ``expect`` other than ``NET`` must be a component of every channel checked (case
    insensitive; the ``IBext``/``IBext_vN`` net plugin counts as ``IB``), so ``P2P`` refuses ``SHM/direct/direct``, ``IB`` refuses ``NET/Socket/0`` and
    ``NET/IB/GDRDMA`` refuses ``NET/IB/0`` (InfiniBand without GPUDirect RDMA). ``network_only``: only the
    ``NET/...`` channels (those that leave the host) are checked. No channel to check fails too (NCCL said
    nothing: nothing to trust). ``who`` (e.g. the SKU) names whose expectation it is in the message."""
    if not expect:
        return None
    expected = f"{who} expects {expect}" if who else f"{expect} is expected"
    want = [p.upper() for p in str(expect).split("/") if p and p.upper() != "NET"]
    seen = transports or {}
    checked = {t: n for t, n in seen.items() if t.upper().startswith("NET/")} if network_only else dict(seen)
    if not checked:
        kind = "network channel" if network_only else "channel"
        return (f"no {kind} in NCCL's INFO lines (transports seen: {', '.join(sorted(seen)) or 'none'}) "
                f"where {expected}")
    bad = sorted(t for t in checked if not all(w in _components(t) for w in want))
    if bad:
        return f"NCCL channels use {', '.join(bad)} where {expected}"
    return None


def _components(transport: str) -> set[str]:
    """Upper-case components of an NCCL transport string; the InfiniBand verbs net plugin's name (``IBext``,
    ``IBext_v8``, ``IBext_v11``: NVIDIA's nccl-rdma-sharp-plugins / HPC-X, e.g. ``NET/IBext_v8/0/GDRDMA`` in
    NVIDIA/nccl#1814) also counts as ``IB``, and a device index with its proxy rank (``0(8)``) as the index."""
    out = set()
    for part in transport.upper().split("/"):
        out.add(part)
        if re.fullmatch(r"IBEXT(?:_V\d+)?", part):
            out.add("IB")
        if m := re.fullmatch(r"(\d+)\(\d+\)", part):
            out.add(m.group(1))
    return out


def exact_list(value) -> str:
    """NCCL's exact-match form of an inventory device list: ``"mlx5_1"`` -> ``"=mlx5_1"``, ``["eth0", "eth1"]``
    -> ``"=eth0,eth1"``, ``"^docker0"`` -> ``"^=docker0"`` (NCCL would read ``mlx5_1`` as a prefix and
    also take ``mlx5_10``...). Raises ValueError as :func:`parse_device_list`."""
    exclude, devs = parse_device_list(value)
    names = ",".join(f"{n}:{p}" if p is not None else n for n, p in devs)
    return ("^=" if exclude else "=") + names


def net_device_problems(net_devices: dict | None, ib_hca=None, socket_ifname=None) -> list[str]:
    """What is wrong with the network devices NCCL says it used (the probe's ``net_devices``:
    ``{"ib": [{"name", "port", "link"}], "socket": [{"name", "address"}], ...}``) against the inventory's
    ``nccl_ib_hca`` and ``nccl_socket_ifname`` (pure). With a list, every device NCCL used must be on it
    (name, and port when the list gives one), and NCCL must have used at least one; with a ``^`` list,
    none may be on it. A transport NCCL did not initialise (no ``NET/IB : Using`` line: ``None``) is not
    judged."""
    nd = net_devices or {}
    out = []
    for var, key, value in (("nccl_ib_hca", "ib", ib_hca), ("nccl_socket_ifname", "socket", socket_ifname)):
        if not value or nd.get(key) is None:
            continue
        exclude, devs = parse_device_list(value)
        used = nd.get(key) or []
        label = "IB devices" if key == "ib" else "socket interfaces"

        def on_list(d: dict) -> bool:
            return any(d.get("name") == n and (p is None or d.get("port") == p) for n, p in devs)

        def show(d: dict) -> str:
            return d["name"] + (f":{d['port']}" if d.get("port") is not None else "")

        if exclude:
            bad = [show(d) for d in used if on_list(d)]
            if bad:
                out.append(f"NCCL used {label} {', '.join(bad)} that {var} excludes ({value})")
            continue
        if not used:
            said = nd.get(f"{key}_said")
            out.append(f"NCCL found none of the {label} {var} lists ({value})"
                       + (f': NCCL says "{said}"' if said else ""))
            continue
        bad = [show(d) for d in used if not on_list(d)]
        if bad:
            out.append(f"NCCL used {label} {', '.join(bad)} not in {var} ({value})")
    return out


# ---------------------------------------------------------------------------------------------------------
# multi-node: the world and a round's figures
# ---------------------------------------------------------------------------------------------------------

def world_problems_by_host(hosts: list[str], ranks_per_node: int, marker: str,
                           docs: dict[str, dict]) -> list[tuple[str, str]]:
    """How the hosts' documents of one successful collective disagree with what was launched (pure):
    ``hosts`` in node order, ``ranks_per_node``, the collective's ``marker``; ``docs`` {host: document}.
    Each document must exist and say ``ok``, carry this ``marker``, its own node rank (its index in
    ``hosts``), ``nnodes`` = len(hosts), ``world_size`` = len(hosts) x ranks_per_node, the same host list when
    it reports one, and ``local_ranks`` = its slice of the global ranks; its gathered ``world`` (every rank's
    identity, when present) must hold every host once per rank in node order. Two half-worlds (each host
    reporting a world of its own) are caught by the world size, node ranks and gathered identities. One
    ``(host, what disagrees)`` per host that disagrees, in node order."""
    out: list[tuple[str, str]] = []
    n = len(hosts) * ranks_per_node
    for i, h in enumerate(hosts):
        d = docs.get(h)
        if not d:
            out.append((h, "no document"))
            continue
        got = {"marker": d.get("marker"), "node_rank": d.get("node_rank"), "nnodes": d.get("nnodes"),
               "world_size": d.get("world_size"), "ranks_per_node": d.get("ranks_per_node")}
        want = {"marker": marker, "node_rank": i, "nnodes": len(hosts), "world_size": n,
                "ranks_per_node": ranks_per_node}
        bad = [f"{k} {got[k]!r} (launched {want[k]!r})" for k in want if got[k] != want[k]]
        if d.get("hosts") is not None and list(d["hosts"]) != list(hosts):
            bad.append(f"hosts {d['hosts']} (launched {hosts})")
        local = list(range(i * ranks_per_node, (i + 1) * ranks_per_node))
        if d.get("local_ranks") is not None and list(d["local_ranks"]) != local:
            bad.append(f"local ranks {d['local_ranks']} (launched {local})")
        world = d.get("world")
        if world is not None:
            seen = [(w.get("rank"), w.get("host")) for w in world]
            expect = [(r, hosts[r // ranks_per_node]) for r in range(n)]
            if seen != expect:
                bad.append(f"its ranks saw a world of {len(seen)} ranks over "
                           f"{', '.join(dict.fromkeys(str(x[1]) for x in seen)) or 'no host'}")
        if bad:
            out.append((h, "; ".join(bad)))
    return out


def version_problem(versions: dict) -> str | None:
    """Why a collective over these hosts cannot work, or None: ``versions`` {host: NCCL version the host's ranks
    reported ("2.27.5"), or None when unknown}. NCCL refuses to mix versions in one communicator (``init.cc``:
    WARN "Mismatched NCCL version detected : rank %d version %d rank %d version %d", ncclInvalidUsage; read
    2026-11-30 in NVIDIA/nccl src/init.cc), and its line names ranks and version codes (22705), not hosts. Pure.
    Returns ``"NCCL versions differ between hosts: 2.27.5 on a, b; 2.27.3 on c"``, the most common version
    first."""
    by: dict[str, list[str]] = {}
    for h, v in versions.items():
        if v:
            by.setdefault(str(v), []).append(h)
    if len(by) < 2:
        return None
    order = sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return "NCCL versions differ between hosts: " + "; ".join(f"{v} on {', '.join(hs)}" for v, hs in order)


def same_address(a, b) -> bool:
    """Whether two addresses are one (IPv4/IPv6 spellings normalised; other text compared as is)."""
    return a is not None and b is not None and normalize_address(str(a)) == normalize_address(str(b))


def judge_round(figures: dict, limit: float | None, slow_pct: float, pool: list[float] | None = None,
                source: str = "group var nccl_internode_busbw_gbps", floors: dict | None = None) -> dict:
    """Pass/fail of each figure (busbw GB/s, None: the collective failed) of one round of pairs or rails,
    ``{key: (passed, why)}`` (pure). With ``limit`` (GB/s) each figure is judged against it
    (:func:`gpuaccept.config.thresholds.judge`); without, against the round's median: a figure more than
    ``100 - slow_pct`` % below it fails (:func:`gpuaccept.judging.compute.below_median_pct`, the node-median rule
    of the compute layer); with fewer than 2 figures in the round the median also takes ``pool`` (earlier
    rounds' figures). ``floors`` ``{key: Limit}``: without ``limit``, the figures of those keys are judged
    against their SKU file's floor for the pair's transport (:func:`pair_floor`) instead of the median, which
    then takes only the other figures."""
    out = {}
    if limit is None and floors:
        for key, lim in floors.items():
            if key in figures and lim is not None:
                v = figures[key]
                verdict = judge(lim, v) if v is not None else None
                out[key] = (False, "the collective failed") if verdict is None else (verdict.passed, verdict.message)
        rest = {k: v for k, v in figures.items() if k not in out}
        return {**out, **(judge_round(rest, None, slow_pct, pool, source) if rest else {})}
    if limit is not None:
        lim = inventory_limit("internode_busbw_gbps", limit, source)
        for key, v in figures.items():
            verdict = judge(lim, v) if v is not None else None
            out[key] = (False, "the collective failed") if verdict is None else (verdict.passed, verdict.message)
        return out
    vals = {k: v for k, v in figures.items() if v is not None}
    ref = dict(vals)
    if len(ref) < 2:
        ref.update({("pool", i): v for i, v in enumerate(pool or [])})
    below = below_median_pct(ref)
    median = node_median(ref)
    max_below = 100.0 - float(slow_pct)
    lim = inventory_limit("below_round_median_pct", max_below,
                          f"group var nccl_pairwise_slow_pct ({slow_pct:g} % of the median)")
    for key, v in figures.items():
        if v is None:
            out[key] = (False, "the collective failed")
        elif not median or median <= 0:
            out[key] = (True, f"busbw {v:.4g} GB/s (no median to compare with)")
        else:
            pct = below[key]
            v_ = judge(lim, round(pct, 2))
            out[key] = (v_.passed, f"busbw {v:.4g} GB/s is {100.0 * v / median:.0f}% of the round's median "
                                   f"{median:.4g} GB/s (fails below {slow_pct:g}%)")
    return out


def pair_floor(limit, transports: dict | None):
    """The SKU file's floor (``checks.internode_pair_busbw_gbps``, a :class:`~gpuaccept.config.thresholds.Limit`
    or None) for a pair whose NCCL channels are ``transports`` (both hosts' ``{"NET/IB/0/GDRDMA": 8, ...}``):
    the first key of its ``min_by_transport`` that every network channel matches by the rule of
    :func:`transport_problem` (``IB`` matches ``NET/IB/0`` and ``NET/IBext_v8/1``, ``NET/IB/GDRDMA`` only the
    GPUDirect RDMA ones), longest key first; else the plain ``min``. None when the file has no such check, or
    no network channel was reported (nothing says which transport the figure belongs to)."""
    if limit is None:
        return None
    net = {t: n for t, n in (transports or {}).items() if str(t).upper().startswith("NET/")}
    if not net:
        return None
    for key in sorted(limit.min_by_transport or {}, key=lambda k: (-len(k.split("/")), k)):
        if transport_problem(net, key, network_only=True) is None:
            return limit.for_transport(key)
    return limit.for_transport(None)


def slow_majority(figures: dict, slow_pct: float, what: str = "pairs") -> str | None:
    """``"no reference: most pairs are slow: ..."`` when the median of ``figures`` (``{key: busbw GB/s or
    None}``) is itself slow: some figures are so much faster that the median is under ``slow_pct`` % of them
    (so at least half the figures are), and the median rule of :func:`judge_round` passes the slow majority.
    Without an absolute floor nothing says which side is right, so no host is named. None otherwise (fewer
    than 2 figures, or no figure that fast). Pure."""
    vals = sorted(v for v in figures.values() if v is not None)
    if len(vals) < 2:
        return None
    share = float(slow_pct) / 100.0
    median = _median(vals)
    fast = [v for v in vals if median < v * share]
    if not fast:
        return None
    ref = _median(fast)
    slow = [v for v in vals if v < ref * share]
    return (f"no reference: most {what} are slow: {len(slow)} of {len(vals)} {what} are under {slow_pct:g}% of the "
            f"{len(fast)} fastest (their median {ref:.4g} GB/s) and the median {median:.4g} GB/s is one of them, "
            f"so it judges nothing; set group var nccl_internode_busbw_gbps, or give the SKU file "
            f"checks.internode_pair_busbw_gbps")


def _median(ordered: list[float]) -> float:
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
