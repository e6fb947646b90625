"""nvlink layer: links per GPU, topology matrix, P2P bandwidth matrix (probe: nvlink)."""
import pytest

from gpuaccept import drift
from gpuaccept.node import Node

pytestmark = pytest.mark.nvlink


def _need_links(sku):
    if not sku.expect.get("nvlink_links"):
        pytest.skip(f"{sku.sku}: no NVLink on this SKU")


def test_nvlink_links(node: Node, gpus, sku, verdicts):
    """Active NVLink links per GPU against the SKU's count; every inactive link named with its number and
    remote PCI id; error counters (CRC, replay, recovery) that grow while we watch fail."""
    _need_links(sku)
    if len(gpus) < 2:
        pytest.skip(f"1 GPU on {node.name}: NVLink needs a peer")
    window = 2.0
    doc = node.probe("nvlink", {"sample_seconds": window})
    limit = sku.checks.get("nvlink_active_links")
    for g in doc["gpus"]:
        verdicts.record("nvlink_active_links", g.get("active_count") if isinstance(g.get("active_count"), int)
                        else None, "links", gpu=g, limit=limit, extra={"speed_mbps": g.get("speed_mbps_common")})
        for link in g.get("links") or []:
            if link.get("active") is False and limit is not None and link["link"] < limit.bound:
                verdicts.fail(f"NVLink {link['link']} inactive (remote {link.get('remote_pci_bus_id')})", gpu=g)
            delta = {k: v for k, v in (link.get("errors_delta") or {}).items() if isinstance(v, int) and v > 0}
            if delta.get("recovery"):
                verdicts.fail(f"NVLink {link['link']} needed {delta['recovery']} link recoveries while watched", gpu=g)
            for kind, keys in (("crc", ("crc_flit", "crc_data")), ("replay", ("replay",))):
                rate = sum(delta.get(k, 0) for k in keys) / window
                lim = sku.checks.get(f"nvlink_{kind}_errors_per_s")
                if rate and lim is not None and not verdicts.record(
                        f"nvlink_{kind}_errors_per_s", round(rate, 2), gpu=g, limit=lim, extra={"link": link["link"]}):
                    verdicts.fail(f"NVLink {link['link']} {kind} errors at {rate:.1f}/s", gpu=g)
    verdicts.finish()


def test_nvlink_topology(node: Node, gpus, sku, verdicts):
    """On SXM SKUs every GPU pair is NVLink-connected and P2P-capable (what nvidia-smi topo -m shows)."""
    _need_links(sku)
    if len(gpus) < 2:
        pytest.skip(f"1 GPU on {node.name}: no pair to check")
    doc = node.probe("nvlink")
    for p in doc.get("pairs") or []:
        label = f"GPU {p['a']} <-> GPU {p['b']}"
        verdicts.record("topology", p.get("topo") or p.get("common_ancestor"), extra={"pair": [p["a"], p["b"]],
                        "p2p": p.get("p2p")})
        if sku.expect.get("nvswitch") or sku.expect.get("nvlink_links"):
            if not p.get("nvlink"):
                verdicts.fail(f"{label} not NVLink-connected (topology {p.get('common_ancestor')})")
            bad = {k: v for k, v in (p.get("p2p") or {}).items() if k in ("read", "write") and v != "OK"}
            if bad:
                verdicts.fail(f"{label} P2P not available: {bad}")
    verdicts.finish()


def test_p2p_bandwidth(node: Node, gpus, sku, verdicts):
    """Unidirectional and bidirectional P2P GB/s for every GPU pair against the SKU; the worst pair named."""
    _need_links(sku)
    if len(gpus) < 2:
        pytest.skip(f"1 GPU on {node.name}: no pair to measure")
    doc = node.probe("nvlink", {"p2p_bandwidth": True})
    if doc.get("p2p_bandwidth_error"):
        verdicts.fail(f"P2P bandwidth not measured: {doc['p2p_bandwidth_error']}")
    pairs = doc.get("p2p_bandwidth") or []
    for p in pairs:  # name each end by NVML's index of its bus id (torch's order follows CUDA_DEVICE_ORDER)
        for end in ("a", "b"):
            nv = drift.nvml_gpu_for({"pci_bus_id": p.get(f"{end}_pci_bus_id")}, gpus)
            p[end] = nv["index"] if nv else p[end]
    for kind in ("unidir", "bidir"):
        check = f"p2p_{kind}_bw_gbps"
        for p in pairs:
            verdicts.record(check, p.get(f"{kind}_gbps"), "GB/s", limit=sku.checks.get(check),
                            extra={"pair": [p["a"], p["b"]]})
        vals = [p for p in pairs if isinstance(p.get(f"{kind}_gbps"), (int, float))]
        if vals:
            worst = min(vals, key=lambda p: p[f"{kind}_gbps"])
            verdicts.record(f"{check}_worst_pair", worst[f"{kind}_gbps"], "GB/s",
                            extra={"pair": f"GPU {worst['a']} -> GPU {worst['b']}"})
            if verdicts.failures:
                verdicts.fail(f"worst {kind} pair GPU {worst['a']} -> GPU {worst['b']}: {worst[f'{kind}_gbps']:g} GB/s")
    verdicts.finish()
