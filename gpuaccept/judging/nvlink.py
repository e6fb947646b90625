"""Judging the nvlink layer (pure): NVLink links per GPU, GPU-pair topology, P2P copy bandwidth.

Each function takes probe documents (``nvlink``, ``p2p_bandwidth``) and the SKU's threshold file and returns
:class:`gpuaccept.judging.health.Finding` objects for the suite to ``apply``. Nothing here does I/O.

NVLink expectations are by SKU, not by link number: which link slots are populated depends on the board and
the bridge (an H100 NVL pair uses 12 of the 18 slots, and not necessarily slots 0-11), so the active-link
count is judged against the SKU's ``nvlink_active_links`` limit, and individual link ids only when the SKU
file lists them in ``expect.nvlink_link_ids``.
"""
from __future__ import annotations

from dataclasses import replace

from gpuaccept.causes import Cause
from gpuaccept.judging.health import Finding, nvml_error
from gpuaccept.config.thresholds import SkuSpec, judge


def _remote(link: dict) -> str:
    r = link.get("remote_pci_bus_id")
    return f"remote {r}" if isinstance(r, str) else f"remote unreadable ({nvml_error(r) or 'no reading'})"


def _speed(lk: dict):
    v = lk.get("speed_mbps")
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def node_link_speed(gpus: list[dict]) -> tuple[int, int] | None:
    """The speed most active NVLinks of the node trained at: ``(Mbps, how many links)`` over every GPU of the
    ``nvlink`` probe document (``gpus``: its ``gpus`` list; per-link ``speed_mbps`` from NVML's
    NVML_FI_DEV_NVLINK_GET_SPEED), the faster on a tie; None when no active link has a readable speed.

    The links of one node are one part number and train alike, so this is the reference a slow link is judged
    against without a typed datasheet figure (the 2xH200 capture, 2026-11-29: all 36 links at 26562 Mbps)."""
    counts: dict[int, int] = {}
    for g in gpus or []:
        for lk in g.get("links") or []:
            v = _speed(lk)
            if lk.get("active") is True and v is not None:
                counts[v] = counts.get(v, 0) + 1
    if not counts:
        return None
    return max(counts.items(), key=lambda kv: (kv[1], kv[0]))


def links(gpu: dict, sku: SkuSpec, window_s: float | None = None,
          node_speed: tuple[int, int] | None = None) -> list[Finding]:
    """Findings for one GPU of the ``nvlink`` probe document.

    ``gpu``: one entry of the probe's ``gpus`` list; ``window_s``: seconds between the two counter reads
    (the probe's ``sample_seconds``) or None when the counters were read once. Rules:

    - no NVML handle (GPU lost) fails with NVML's words;
    - ``active_count`` unreadable fails naming NVML's text (an NVLink SKU must be able to say its links);
    - ``active_count`` judged against ``nvlink_active_links`` (ThresholdError when the SKU file lacks it);
      when it is short and the SKU lists no link ids, the inactive slots are named as a diagnosis;
    - ``expect.nvlink_link_ids``: each listed link must be reported and active;
    - error counters growing while watched: any link recovery fails; CRC and replay rates (errors/s) are
      judged against ``nvlink_crc_errors_per_s`` / ``nvlink_replay_errors_per_s`` where the SKU has them;
    - link speed: an active link whose ``speed_mbps`` is below ``node_speed`` (:func:`node_link_speed`: the
      speed most links of the node trained at) fails, naming both figures; and against the SKU's
      ``nvlink_link_speed_mbps`` where the file has it. An unreadable speed is recorded, not judged.
    """
    out: list[Finding] = []
    limit = sku.limit("nvlink_active_links")
    lost = nvml_error(gpu.get("handle"))
    if lost:
        return [Finding("nvlink_active_links", None, "links", failure=f"no NVML handle ({lost}): NVLink not readable")]
    active = gpu.get("active_count")
    why = nvml_error(active)
    if why or not isinstance(active, int) or isinstance(active, bool):
        said = why or repr(active)
        out.append(Finding("nvlink_active_links", active, "links",
                           failure=f"NVLink state unreadable: NVML says '{said}' "
                                   f"(the SKU expects {limit.describe()} active)"))
        return out
    out.append(Finding("nvlink_active_links", active, "links", limit=limit,
                       extra={"speed_mbps": gpu.get("speed_mbps_common"), "link_count": gpu.get("link_count")}))
    per_link = {lk.get("link"): lk for lk in gpu.get("links") or []}
    ids = sku.expect.get("nvlink_link_ids")
    if ids:
        for i in ids:
            lk = per_link.get(i)
            if lk is None:
                out.append(Finding("nvlink_link", None, failure=f"NVLink {i} not reported by NVML "
                                                                f"(the SKU file lists links {list(ids)})"))
            elif nvml_error(lk.get("active")):
                out.append(Finding("nvlink_link", lk.get("active"), extra={"link": i},
                                   failure=f"NVLink {i} state unreadable: NVML says '{nvml_error(lk['active'])}'"))
            elif lk.get("active") is not True:
                out.append(Finding("nvlink_link", False, extra={"link": i},
                                   failure=f"NVLink {i} inactive ({_remote(lk)}); the SKU file lists links {list(ids)}"))
    elif not judge(limit, active).passed:
        idle = [i for i, lk in sorted(per_link.items()) if lk.get("active") is False]
        if idle:
            out.append(Finding("nvlink_inactive_slots", idle, extra={"note": "the SKU file lists no link ids"},
                               failure="inactive NVLink slot(s): " + ", ".join(
                                   f"NVLink {i} inactive ({_remote(per_link[i])})" for i in idle)))
    speed_lim = sku.checks.get("nvlink_link_speed_mbps")
    for i, lk in sorted(per_link.items()):
        v = _speed(lk)
        if lk.get("active") is True and v is not None:
            if node_speed and v < node_speed[0]:
                out.append(Finding("nvlink_link_speed_mbps", v, "Mbps", extra={"link": i, "node_mbps": node_speed[0]},
                                   failure=f"NVLink {i} at {v} Mbps ({_remote(lk)}), below the {node_speed[0]} Mbps "
                                           f"of {node_speed[1]} other active links of this node "
                                           f"[limit: the node's own links, NVML_FI_DEV_NVLINK_GET_SPEED]"))
            elif speed_lim is not None:
                out.append(Finding("nvlink_link_speed_mbps", v, "Mbps", limit=speed_lim, extra={"link": i}))
        delta = {k: v for k, v in (lk.get("errors_delta") or {}).items()
                 if isinstance(v, int) and not isinstance(v, bool) and v > 0}
        if delta.get("recovery"):
            out.append(Finding("nvlink_recoveries", delta["recovery"], "recoveries", extra={"link": i},
                               failure=f"NVLink {i} needed {delta['recovery']} link recoveries while watched"
                                       + (f" ({window_s:g} s)" if window_s else "")))
        if not window_s:
            continue
        for kind, keys in (("crc", ("crc_flit", "crc_data")), ("replay", ("replay",))):
            rate = sum(delta.get(k, 0) for k in keys) / window_s
            lim = sku.checks.get(f"nvlink_{kind}_errors_per_s")
            if rate and lim is not None:
                out.append(Finding(f"nvlink_{kind}_errors_per_s", round(rate, 2), "errors/s", limit=lim,
                                   extra={"link": i}))
    return out


def missing_gpus(nvml_indices, measured_indices, what: str) -> list[Finding]:
    """A failure naming every NVML GPU index that has no entry in a probe document (absence is no pass)."""
    missing = sorted(set(nvml_indices) - set(measured_indices))
    if not missing:
        return []
    return [Finding(f"{what}_gpus_missing", missing,
                    failure=f"{what}: no reading for NVML GPU(s) {', '.join(map(str, missing))}")]


def _pair(p: dict, arrow: str = "->") -> str:
    """``GPU a (bus id) -> GPU b (bus id)``: the bus ids where the suite added them (``a_bus``/``b_bus``)."""
    def end(k):
        bus = p.get(f"{k}_bus")
        return f"GPU {p.get(k)}" + (f" ({bus})" if isinstance(bus, str) and bus else "")
    return f"{end('a')} {arrow} {end('b')}"


def topology(pairs: list[dict], sku: SkuSpec, gpus: list[dict] | None = None) -> list[Finding]:
    """Each GPU pair of the ``nvlink`` probe: its ``nvidia-smi topo -m`` label recorded; on NVLink/NVSwitch
    SKUs every pair must be NVLink-connected with P2P read and write "OK" (NVML's P2P status names).
    ``gpus``: the document's ``gpus`` list, whose ``pci_bus_id`` names each end of a failing pair."""
    out: list[Finding] = []
    need = bool(sku.expect.get("nvswitch") or sku.expect.get("nvlink_links"))
    bus = {g.get("index"): g.get("pci_bus_id") for g in gpus or [] if isinstance(g.get("pci_bus_id"), str)}
    for p in pairs:
        label = _pair({"a": p["a"], "b": p["b"], "a_bus": bus.get(p["a"]), "b_bus": bus.get(p["b"])}, "<->")
        failure = None
        if need and not p.get("nvlink"):
            failure = f"{label} not NVLink-connected (topology {p.get('common_ancestor')})"
        bad = {k: v for k, v in (p.get("p2p") or {}).items() if k in ("read", "write") and v != "OK"}
        if need and bad:
            failure = (failure + "; " if failure else "") + f"{label} P2P not available: {bad}"
        out.append(Finding("topology", p.get("topo") or p.get("common_ancestor"),
                           extra={"pair": [p["a"], p["b"]], "p2p": p.get("p2p")}, failure=failure))
    return out


def p2p_bandwidth(doc: dict, sku: SkuSpec, nvml_indices) -> list[Finding]:
    """Findings for the ``p2p_bandwidth`` probe document: every ordered pair of NVML GPUs measured, each
    unidir/bidir GB/s against the SKU's ``p2p_unidir_bw_gbps`` / ``p2p_bidir_bw_gbps`` (ThresholdError when
    the SKU file lacks them), each figure naming its pair (``GPU a (bus id) -> GPU b (bus id)``: bus ids from
    the pair's ``a_bus``/``b_bus`` when present), the worst pair named; a pair not measured, or whose copy failed
    (its CUDA error), is an error that proves nothing of the part (tool / unverified: rerun); a pair without CUDA
    peer access (``peer_access`` False: torch.cuda.can_device_access_peer) fails on an NVLink SKU
    (``expect.nvlink_links`` or ``expect.nvswitch``) as configuration (``p2p_no_peer_access``: the platform -- PCIe
    ACS, the IOMMU, a hypervisor -- keeps CUDA from the peer path NVML shows; its copies were staged through host
    memory), never a drain of the card."""
    out: list[Finding] = []
    pairs = doc.get("pairs") or []
    want = {(a, b) for a in nvml_indices for b in nvml_indices if a != b}
    have = {(p.get("a"), p.get("b")) for p in pairs}
    if want - have:  # not measured: proves nothing of the pairs (tool, rerun)
        missing = sorted(want - have)
        out.append(Finding("p2p_pairs_missing", missing, error="P2P bandwidth not measured for "
                           + ", ".join(f"GPU {a} -> GPU {b}" for a, b in missing),
                           cause=Cause("tool", "gap", evidence={"pairs": [list(x) for x in missing]})))
    need = bool(sku.expect.get("nvswitch") or sku.expect.get("nvlink_links"))
    for p in pairs:
        if p.get("error"):  # a copy that failed (CUDA's error) measured nothing: its words name no part
            out.append(Finding("p2p_error", p["error"], extra={"pair": [p["a"], p["b"]]},
                               error=f"P2P {_pair(p)}: {p['error']}",
                               cause=Cause("unverified", "p2p_error", evidence={"pair": _pair(p),
                                                                              "error": str(p["error"])[:300]})))
        if need and p.get("peer_access") is False:  # CUDA refuses peer access where NVML shows the links: the platform
            out.append(Finding("p2p_peer_access", False, extra={"pair": [p["a"], p["b"]]},
                               failure=f"P2P {_pair(p)}: CUDA peer access not available "
                                       f"(torch.cuda.can_device_access_peer False): copies staged through host "
                                       f"memory; the SKU expects NVLink P2P between every pair",
                               cause=Cause("configuration", "p2p_no_peer_access", evidence={"pair": _pair(p)})))
    for kind in ("unidir", "bidir"):
        check = f"p2p_{kind}_bw_gbps"
        limit = sku.limit(check)
        for p in pairs:
            out.append(Finding(check, p.get(f"{kind}_gbps"), "GB/s", limit=limit, extra={"pair": [p["a"], p["b"]]},
                               context=_pair(p)))
        vals = [p for p in pairs if isinstance(p.get(f"{kind}_gbps"), (int, float))]
        if vals:  # recorded, not judged: each pair's figure above carries the verdict (and, once confirmed, the cause)
            worst = min(vals, key=lambda p: p[f"{kind}_gbps"])
            out.append(Finding(f"{check}_worst_pair", worst[f"{kind}_gbps"], "GB/s",
                               extra={"pair": f"GPU {worst['a']} -> GPU {worst['b']}"}))
    return out


def failing(findings: list[Finding]) -> bool:
    """Whether any of ``findings`` fails: a failure line, or a figure outside its limit."""
    return any(f.failure or (f.limit is not None and f.value is not None and not judge(f.limit, f.value).passed)
               for f in findings)


def name_variables(findings: list[Finding], text: str) -> list[Finding]:
    """``findings`` with ``text`` (the NCCL variables set on the node, gpuaccept.judging.nccl_scope) added to every
    failure line and to every judged figure's context (said only in its failure line). CUDA peer copies do not
    read NCCL's variables: they are named so that nobody reads a P2P failure as theirs, never as its cause."""
    if not text:
        return list(findings)
    out = []
    for f in findings:
        if f.failure:
            f = replace(f, failure=f"{f.failure}; {text}")
        elif f.limit is not None:
            f = replace(f, context=f"{f.context}; {text}" if f.context else text)
        out.append(f)
    return out
