"""nvlink layer: links per GPU, topology matrix (probe: nvlink), P2P bandwidth matrix (probe: p2p_bandwidth), and
the NVLink error counters' growth over the P2P load (read by p2p_bandwidth right before and after its copies).

The judging is in gpuaccept/judging/nvlink.py and gpuaccept/judging/linkcounters.py (pure); each test asks for one
probe and applies its findings (test_nvlink_link_errors judges what test_p2p_bandwidth's probe read).
"""
import pytest

from gpuaccept.errors import GpuacceptError
from gpuaccept.judging import drift, linkcounters, nccl_scope

from gpuaccept.judging import nvlink as nvlink_judge
from gpuaccept.judging.shape import node_shape
from gpuaccept.runner.host import HostRunner
from gpuaccept.runner.multinode import nccl_environment

pytestmark = pytest.mark.nvlink


def _need_links(node: HostRunner, gpus, sku, what: str) -> None:
    """Skip (with the reason) where the node's shape has no NVLink (the SKU has none, or every link of every
    GPU answers NVML "Not Supported": NVLink not exposed to this node) or one GPU: ``what`` needs a pair
    (gpuaccept.judging.shape). Links that answer but are down are judged, never skipped."""
    if not sku.expect.get("nvlink_links"):
        pytest.skip(f"{sku.sku}: no NVLink on this SKU")
    shape = node_shape(node.gpu_inventory(), sku)
    if "nvlink" in shape.not_applicable() and shape.gpus >= 2:
        pytest.skip(f"{node.name}: {shape.describe()}")
    if len(gpus) < 2:
        pytest.skip(f"1 GPU on {node.name}: {what} ({shape.describe()})")


def test_nvlink_links(node: HostRunner, gpus, sku, verdicts):
    """Active NVLink links per GPU against the SKU's count (link ids only where the SKU file lists them);
    unreadable links fail with NVML's words; error counters (CRC, replay, recovery) that grow while we watch
    fail."""
    _need_links(node, gpus, sku, "NVLink needs a peer")
    doc = node.probe("nvlink", {"sample_seconds": 2.0})
    verdicts.apply(nvlink_judge.missing_gpus([g.get("index") for g in gpus],
                                             [g.get("index") for g in doc.get("gpus") or []], "nvlink"))
    window = doc.get("sample_seconds")
    speed = nvlink_judge.node_link_speed(doc.get("gpus") or [])
    for g in doc.get("gpus") or []:
        verdicts.apply(nvlink_judge.links(g, sku, window, speed), gpu=g)
    verdicts.finish()


def test_nvlink_topology(node: HostRunner, gpus, sku, verdicts):
    """On SXM SKUs every GPU pair is NVLink-connected and P2P-capable (what nvidia-smi topo -m shows)."""
    _need_links(node, gpus, sku, "no pair to check")
    doc = node.probe("nvlink")
    verdicts.apply(_named(node, nvlink_judge.topology(doc.get("pairs") or [], sku, doc.get("gpus"))))
    verdicts.finish()


def test_p2p_bandwidth(node: HostRunner, gpus, sku, verdicts):
    """Unidirectional and bidirectional P2P GB/s for every GPU pair against the SKU; the worst pair named."""
    _need_links(node, gpus, sku, "no pair to measure")
    doc = node.probe("p2p_bandwidth")
    LOAD_COUNTERS[node.name] = {"doc": doc.get("link_counters"), "replayed": bool(node.replay_dir),
                                "load": f"p2p_bandwidth over {len(doc.get('gpus') or [])} GPUs"}
    verdicts.conditions(doc, gpus)
    # pairs carry torch indices, which follow CUDA_DEVICE_ORDER: name each end by NVML's index of its bus id
    to_nvml, bus = {}, {}
    for t in doc.get("gpus") or []:
        bus[t.get("index")] = t.get("pci_bus_id")
        nv = drift.nvml_gpu_for({"pci_bus_id": t.get("pci_bus_id")}, gpus)
        if nv is not None:
            to_nvml[t.get("index")] = nv["index"]
    for pair in doc.get("pairs") or []:
        for end in ("a", "b"):
            pair[f"{end}_bus"] = bus.get(pair.get(end))
            pair[end] = to_nvml.get(pair.get(end), pair.get(end))
    verdicts.apply(_named(node, nvlink_judge.p2p_bandwidth(doc, sku, [g.get("index") for g in gpus])))
    verdicts.finish()


#: host -> the link error counters p2p_bandwidth read around its copies (test_p2p_bandwidth), judged by
#: test_nvlink_link_errors
LOAD_COUNTERS: dict[str, dict] = {}


def test_nvlink_link_errors(node: HostRunner, gpus, sku, verdicts):
    """NVLink error counters read by p2p_bandwidth right before and right after its copies: per GPU and link, the
    growth of the recovery counter and the rate of CRC and replay errors against the SKU's limits
    (gpuaccept/judging/linkcounters.py); a link active before the load and not after it fails. Skipped where the
    node has no NVLink or test_p2p_bandwidth did not run the load on this host; a replayed capture taken before
    the counters were read is skipped naming that; a live run without them is an error, never a pass."""
    _need_links(node, gpus, sku, "no NVLink load to read counters around")
    got = LOAD_COUNTERS.get(node.name)
    why = linkcounters.not_measured_why(got, node.name, "p2p_bandwidth", "no p2p_bandwidth load ran on this host in "
                                        "this run (test_p2p_bandwidth skipped, failed before its probe answered, or "
                                        "not selected)")
    if why:
        pytest.skip(why)
    pair = linkcounters.pair({"link_counters": got["doc"]}, got["load"])
    found = [(None, pair)] if not isinstance(pair, tuple) else linkcounters.nvlink(pair[0], pair[1], sku, got["load"])
    if not found:  # an NVLink node (_need_links) whose readings hold no link: not measured, never a pass
        found = [(None, linkcounters.unmeasured(got["load"], f"no active NVLink read ({_why_no_links(pair[0])})"))]
    for gpu, f in found:
        verdicts.apply([f], gpu=gpu)
    verdicts.finish()


def _why_no_links(snap: dict) -> str:
    part = snap.get("nvlink") or {}
    return str(part.get("unavailable") or part.get("msg") or "NVML listed no active link")


def _named(node: HostRunner, findings: list) -> list:
    """``findings`` naming, when one fails, the NCCL variables set on the node with where each was set (probe
    nccl_env, cached; the inventory's nccl_env): said, never taken as the cause (CUDA copies do not read them)."""
    if not nvlink_judge.failing(findings):
        return findings
    try:
        env_doc = node.cached_probe("nccl_env", {})
    except GpuacceptError:
        return findings
    seen = nccl_scope.seen_variables(None, nccl_environment(node.host.vars), None, env_doc)
    text = (f"NCCL variables set: {nccl_scope.variables_text(seen)} (NCCL's: CUDA peer copies do not read them)"
            if seen else "")
    return nvlink_judge.name_variables(findings, text)
