"""nccl layer: the NCCL environment on the node (probe: nccl_env).

A variable that switches a transport off or forces an algorithm (NCCL_P2P_DISABLE, NCCL_ALGO, ...) found in
the ranks' environment, a login shell's, a profile file, ~/.nccl.conf or /etc/nccl.conf, without the inventory
asking for it (``nccl_env``), fails naming the variable and where it came from. Judged by gpuaccept/judging/drift.py.
Where the node's shape gives such a variable no meaning (NCCL_NVLS_ENABLE=0 on one GPU without an NVSwitch
fabric) it is a note, recorded and printed, not a failure: gpuaccept/judging/nccl_scope.py and its table
gpuaccept/data/nccl_scope.yaml.
"""
import pytest

from gpuaccept.errors import GpuacceptError, ThresholdError
from gpuaccept.judging import drift, nccl_scope
from gpuaccept.judging.readings import typed
from gpuaccept.judging.shape import node_shape
from gpuaccept.judging.sku import node_sku
from gpuaccept.runner.host import HostRunner

pytestmark = pytest.mark.nccl


def _shape(node: HostRunner, specs: dict):
    """The node's shape (gpuaccept.judging.shape), or None when it cannot be told (no GPU NVML reads, no SKU):
    then every variable is judged as applying."""
    try:
        inv = node.gpu_inventory()
        gpus = typed(inv.get("gpus") or []) if inv.get("nvml_available") else []
        if not gpus:
            return None
        sku = node_sku(node.name, specs, node.sku_override, node.host.vars.get("gpu_sku"), gpus)
        return node_shape(inv, sku)
    except (GpuacceptError, ThresholdError):
        return None


def _rdma_nic(node: HostRunner):
    """True/False: an InfiniBand/RoCE device on the node (probe rdma, cached); None when it cannot be read."""
    try:
        return bool(node.cached_probe("rdma", {}).get("devices"))
    except GpuacceptError:
        return None


def test_nccl_environment(node: HostRunner, verdicts, specs, nodes):
    """NCCL variables the ranks would see on this node, against the inventory's nccl_env; a variable the node's
    shape gives no meaning is a note."""
    doc = node.cached_probe("nccl_env", {})
    found = drift.nccl_env(doc, drift.requested_nccl_env(node.host.vars))
    shape = _shape(node, specs)
    features = nccl_scope.Features(shape, len(nodes), lambda: _rdma_nic(node))
    found, notes = nccl_scope.in_scope(found, features, shape.describe() if shape else "")
    for line in notes:
        print(f"{node.name}: note: {line}")
    verdicts.apply(found)
    verdicts.finish()
