"""nccl layer: the NCCL environment on the node (probe: nccl_env).

A variable that switches a transport off or forces an algorithm (NCCL_P2P_DISABLE, NCCL_ALGO, ...) found in
the ranks' environment, a login shell's, a profile file, ~/.nccl.conf or /etc/nccl.conf, without the inventory
asking for it (``nccl_env``), fails naming the variable and where it came from. Judged by gpuaccept/judging/drift.py.
Where the node's shape gives such a variable no meaning (NCCL_NVLS_ENABLE=0 on one GPU without an NVSwitch
fabric) it is a note, recorded and printed, not a failure: gpuaccept/judging/nccl_scope.py and its table
gpuaccept/data/nccl_scope.yaml.
"""
import os

import pytest

from gpuaccept.causes import Cause
from gpuaccept.errors import GpuacceptError, ThresholdError
from gpuaccept.judging import drift, launchenv, nccl_scope
from gpuaccept.judging.readings import typed
from gpuaccept.judging.shape import node_shape
from gpuaccept.judging.sku import node_sku
from gpuaccept.runner.host import HostRunner
from gpuaccept.runner.prefetch import ahead

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


def _env_probes(node: HostRunner) -> None:
    """test_nccl_environment's probes (its plan, gpuaccept.runner.prefetch.ahead; cached for the test)."""
    node.cached_probe("nccl_env", {})
    node.gpu_inventory()


@ahead(_env_probes)
def test_nccl_environment(node: HostRunner, verdicts, specs, nodes):
    """NCCL variables the ranks would see on this node, against the inventory's nccl_env; a variable the node's
    shape gives no meaning is a note."""
    doc = node.cached_probe("nccl_env", {})
    found = drift.nccl_env(doc, drift.requested_nccl_env(node.host.vars))
    shape = _shape(node, specs)
    features = nccl_scope.Features(shape, len(nodes), lambda: _rdma_nic(node))
    found, notes = nccl_scope.in_scope(found, features, shape.describe() if shape else "")
    for line in notes:
        verdicts.show(f"{node.name}: note: {line}")
    verdicts.apply(found)
    verdicts.finish()


def _gpu_count(node: HostRunner) -> int:
    """GPUs NVML lists on the node (0: none, or NVML unusable: the NCCL layer's launch checks do not apply)."""
    inv = node.gpu_inventory()
    return len(inv.get("gpus") or []) if inv.get("nvml_available") else 0


def _launch_env(node: HostRunner) -> dict:
    """The node's launch_env document (cached); a replayed capture taken before the probe existed skips."""
    try:
        return node.cached_probe("launch_env", {})
    except GpuacceptError:
        if node.replay_dir and not any(f.startswith("launch_env-") for f in os.listdir(node.replay_dir)):
            pytest.skip(f"{node.name}: the replayed capture has no launch_env document (taken by an older gpuaccept, "
                        "which did not read it)")
        raise


def test_launch_environment(node: HostRunner, verdicts):
    """What an NCCL job started in the probes' session would find (probe: launch_env; gpuaccept/judging/launchenv.py):
    /dev/shm size and free space for the node's GPUs, nvidia_uvm loaded, and where an RDMA NIC sits beside the
    GPUs the locked-memory limit unlimited and nvidia_peermem (or dma-buf) present. A node without GPUs: skipped."""
    gpus = _gpu_count(node)
    doc = _launch_env(node)
    verdicts.record("launch_env", {k: doc.get(k) for k in ("memlock", "modules", "kernel_release")})
    if not gpus:
        pytest.skip(f"no NVIDIA GPU on {node.name}: no NCCL job launches here")
    rdma = _rdma_nic(node)
    verdicts.apply(launchenv.shm(doc, gpus))
    verdicts.apply(launchenv.modules(doc, gpudirect=bool(rdma)))
    if rdma:
        verdicts.apply(launchenv.memlock(doc))
    verdicts.finish()


def test_nccl_versions(nodes, verdicts):
    """Every selected host with GPUs loads one NCCL version and one NCCL network plugin (NCCL_NET_PLUGIN, else the
    libnccl-net*.so found); a host off the majority fails under its own name (configuration)."""
    versions, plugins = {}, {}
    unread: list[str] = []  # why, per host whose GPUs or launch environment were not read
    for n in nodes:
        try:
            if not _gpu_count(n):
                continue
            doc = _launch_env(n)
            versions[n.name], plugins[n.name] = launchenv.nccl_identity(doc)
        except (GpuacceptError, pytest.skip.Exception) as e:  # an unreachable host is reported by its own tests
            verdicts.record("nccl_version", f"not read: {e}", extra={"host": n.name})
            unread.append(str(e).splitlines()[0] if str(e).strip() else n.name)
            continue
        unread = launchenv.nccl_unread(doc)
        if unread is not None:  # no vote (launchenv.split); its own finding, on its own host
            verdicts.fail(f"no NCCL found to load (torch: {unread['torch_error'] or 'no version'}; no libnccl.so "
                          "found): an NCCL job cannot start here", host=n.name,
                          cause=Cause("configuration", "nccl_not_found", n.name, evidence=unread))
    if not versions and not unread:
        pytest.skip("no host with an NVIDIA GPU in the selection")
    if not versions:  # each host's own tests say why its GPUs or launch environment were not read
        more = f"; and {len(unread) - 1} more host(s)" if len(unread) > 1 else ""
        pytest.skip(f"the NCCL version of no host was read ({unread[0]}{more}): nothing to compare")
    verdicts.record("nccl_versions", {str(v): sum(1 for x in versions.values() if x == v) for v in set(versions.values())})
    verdicts.record("nccl_net_plugins", {str(v): sum(1 for x in plugins.values() if x == v) for v in set(plugins.values())})
    for host, why in launchenv.split(versions, "NCCL") + launchenv.split(plugins, "NCCL network plugin"):
        verdicts.fail(why, host=host, cause=Cause("configuration", "nccl_version_split", host))
    verdicts.finish()
