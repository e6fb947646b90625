"""gpudirect layer: GPUDirect Storage (cuFile, nvidia-fs / P2PDMA, file <-> GPU GB/s) and GPUDirect RDMA
readiness (peer memory, InfiniBand/RoCE ports, GPU->NIC PCIe distance, ib_write_bw --use_cuda loopback).

Probes: storage_mounts, gds, rdma (and nccl_allreduce, forced onto the network, when the kernel shows no
GPUDirect RDMA path). Inventory variables: ``gds_paths`` (default: the first of ``storage_paths``, then
judged with the ``storage_*`` placement variables), ``gds_expect_mount``/``gds_expect_fstype``/
``gds_allow_root_fs``, ``gds_allow_compat`` (a GDS run in compat mode fails unless true), ``ib_hcas``
(expected RDMA device names, e.g. ["mlx5_0", "mlx5_1"]), ``ib_rate_gbps`` (expected port rate, Gb/s as the
kernel reports it), ``storage_limits.gds_read_gbps`` / ``gds_write_gbps`` (GB/s = 1e9 B/s floors).

Link errors and RoCE settings: the InfiniBand/RoCE port error counters read by the rdma probe right before and
after its ib_write_bw loopbacks are judged as their growth (test_rdma_link_errors,
gpuaccept/judging/linkcounters.py); the RoCE GID and P_Key tables of each port are compared across the selection
(test_rdma_settings, fleet: gpuaccept/judging/rdmaconfig.py), the host off the majority blamed.
"""
from __future__ import annotations

import dataclasses

import pytest

from gpuaccept.causes import Cause
from gpuaccept.judging import linkcounters, rdmaconfig
from gpuaccept.judging import storage as sj
from gpuaccept.config import storage as sl
from gpuaccept.errors import GpuacceptError, ProbeError
from gpuaccept.runner.multinode import nccl_environment
from gpuaccept.runner.host import HostRunner
from gpuaccept.runner.prefetch import ahead

pytestmark = pytest.mark.gpudirect

GDS_CHECKS = ("gds_read_gbps", "gds_write_gbps")
#: a single-node NCCL run forced onto the network (NCCL_P2P_DISABLE, NCCL_SHM_DISABLE: no NVLink/PCIe P2P, no
#: shared memory between the two ranks) with GPUDirect RDMA allowed at any PCIe distance (NCCL_NET_GDR_LEVEL=SYS):
#: NCCL then says in its channel lines whether it registers GPU memory with the NIC (".../GDRDMA")
NCCL_NET_LOOPBACK = {"world_size": 2, "min_bytes": 1 << 20, "max_bytes": 1 << 20, "iters": 2, "warmup": 1, "reps": 1,
                     "deadline_s": 120, "env": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1",
                                                "NCCL_NET_GDR_LEVEL": "SYS"}}


def test_gds(node: HostRunner, gpus, verdicts):
    """cuFile and nvidia-fs/P2PDMA present; GPU -> file and file -> GPU GB/s through GdsFile beside the
    bounce-buffer path, on every GPU; data read back verified. compat mode fails unless
    ``gds_allow_compat: true``. The directory is placed first (not the OS disk unless allowed); a GDS limit
    in ``storage_limits`` with no directory to measure is an error, never a skip."""
    v = node.host.vars
    explicit = sl.path_list(v.get("gds_paths"), "gds_paths", node.name)
    paths = explicit or sl.path_list(v.get("storage_paths"), "storage_paths", node.name)[:1]
    expect = sl.expectation(v, "gds" if explicit else "storage", node.name)
    allow_compat = sl.bool_var(v.get("gds_allow_compat"), "gds_allow_compat", node.name)
    limits = sl.storage_limits(v.get("storage_limits"), node.name)
    asked = [k for k in GDS_CHECKS if k in limits]
    if not paths and asked:
        raise sl.StorageConfigError(f"{node.name}: inventory var storage_limits sets {', '.join(asked)} but neither "
                                    "gds_paths nor storage_paths is set: nothing is measured to judge")
    placed = node.probe("storage_mounts", {"paths": paths[:1]})["paths"] if paths else []
    problems = sj.placement_problems(placed[0], expect) if placed else []
    doc = node.probe("gds", {"path": paths[0], "gpus": "all"} if paths and not problems else {})
    installed = doc["cufile"]["found"] or doc["nvidia_fs"]["loaded"]
    if not installed and not explicit and not asked:
        pytest.skip(f"GDS not installed on {node.name} (no libcufile.so, no nvidia-fs) and neither gds_paths nor "
                    "a GDS limit configured")
    if not paths:
        if not doc["cufile"]["found"]:  # nvidia-fs is there but cuFile is not: a broken install, not a skip
            verdicts.fail(f"nvidia-fs loaded but cuFile (libcufile.so) not found; GDS mode {doc.get('mode')}")
            verdicts.finish()
            return
        pytest.skip(f"GDS mode on {node.name}: {doc.get('mode')}; no gds_paths (or storage_paths) configured, "
                    "so no GDS transfer measured")
    stack = {k: doc.get(k) for k in ("cufile", "nvidia_fs", "p2pdma", "cufile_json", "allow_compat_mode", "torch_gds")}
    verdicts.record("gds_mode", doc.get("mode"), extra=stack)
    verdicts.record(f"mount {paths[0]}", placed[0].get("mount_point"), extra={**placed[0], "problems": problems})
    for line in problems:
        verdicts.fail(line)
    if not doc["cufile"]["found"]:
        verdicts.fail("cuFile (libcufile.so) not found: not on the loader path, not in the nvidia-cufile wheel, "
                      "not in /usr/local/cuda*/lib64")
    if problems:
        verdicts.finish()  # the directory is not where the inventory says: no transfer was run
        return
    if not doc.get("gpus"):
        verdicts.fail(f"GDS transfer not run: {doc.get('reason')}")
    for g in doc.get("gpus", []):
        if g.get("error"):
            verdicts.record("gds_read_gbps", None, "GB/s", gpu=g, extra={"error": g["error"]})
            verdicts.fail(g["error"], gpu=g, cause=sj.gds_error_cause(g, doc))
            continue
        ex = {"bytes": g.get("bytes"), "bounce_read_gbps": g.get("bounce_read_gbps"), "mode": doc.get("mode"),
              "nvidia_fs_ops": g.get("nvidia_fs_ops"), "path": paths[0]}
        for d in ("read", "write"):
            lim = limits.get(f"gds_{d}_gbps")
            verdicts.record(f"gds_{d}_gbps", g.get(f"gds_{d}_gbps"), "GB/s", gpu=g, limit=lim,
                            extra=ex if lim else {**ex, "note": f"no limit configured (inventory var "
                                                                f"storage_limits.gds_{d}_gbps): recorded, not judged"})
        verdicts.record("bounce_read_gbps", g.get("bounce_read_gbps"), "GB/s", gpu=g)
        if not g.get("verified"):
            verdicts.fail("data read back through GDS differs from what was written", gpu=g)
        bypass = sj.gds_bypass(doc.get("mode"), g.get("nvidia_fs_ops"), doc.get("p2pdma"))
        if bypass and not allow_compat:
            verdicts.fail(bypass, gpu=g)
    if doc.get("gpus") and doc.get("mode") == "compat" and not allow_compat:
        verdicts.fail("GDS ran in compat mode (no nvidia-fs, no P2PDMA): reads go through a bounce buffer; "
                      "set gds_allow_compat: true to accept")
    missing = sj.unmeasured_gpus(gpus, doc.get("gpus") or []) if doc.get("gpus") else []
    if missing:
        raise ProbeError(node.name, f"gds gave no figure for {sj.describe_gpus(missing)} of the {len(gpus)} GPUs "
                                    f"NVML lists (CUDA_VISIBLE_DEVICES on the node?)")
    verdicts.finish()


def _rdma_doc(node: HostRunner) -> dict:
    return node.cached_probe("rdma", {})


def _no_nic(node: HostRunner, doc: dict, verdicts) -> bool:
    """Skip the test on a host without an RDMA device that declares none; where ``ib_hcas`` declares some, fail
    it as the node's configuration (``rdma_device_missing``: no RDMA device at all is the driver stack not loaded
    or the inventory, not a dead NIC; a missing one beside others is judged by test_rdma_ports) and return True."""
    if doc.get("devices"):
        return False
    if not node.host.vars.get("ib_hcas"):
        pytest.skip(f"no InfiniBand/RoCE device on {node.name}")
    verdicts.fail(f"no InfiniBand/RoCE device found but the inventory declares ib_hcas="
                  f"{node.host.vars.get('ib_hcas')}", check="rdma_devices",
                  cause=Cause("configuration", "rdma_device_missing",
                              evidence={"declared": str(node.host.vars.get("ib_hcas"))[:200]}))
    verdicts.finish()
    return True


@ahead(_rdma_doc)  # its plan (gpuaccept.runner.prefetch.ahead): cached for the test
def test_rdma_ports(node: HostRunner, verdicts):
    """Every expected HCA (``ib_hcas``) present; every port ACTIVE and LinkUp at ``ib_rate_gbps``."""
    doc = _rdma_doc(node)
    if _no_nic(node, doc, verdicts):
        return
    v = node.host.vars
    want = sl.str_list(v.get("ib_hcas"), "ib_hcas", node.name)
    rate = sl.ib_rate_limit(v.get("ib_rate_gbps"), node.name)
    have = {d["name"]: d for d in doc["devices"]}
    missing = [h for h in want if h not in have]
    if missing:
        verdicts.fail(f"expected HCA(s) missing: {', '.join(missing)} (found: {', '.join(sorted(have))})")
    for d in doc["devices"]:
        if want and d["name"] not in want:
            verdicts.record(f"ib_port {d['name']}", "not in ib_hcas", extra=d)
            continue
        for p in d["ports"]:
            who = f"{d['name']} port {p['port']} ({p.get('link_layer')}, {d.get('pci_address')})"
            verdicts.record(f"ib_port {d['name']}/{p['port']}", p.get("state"), extra={**p, "pci_address": d.get("pci_address")})
            if not (p.get("state") or "").endswith("ACTIVE"):
                verdicts.fail(f"{who}: state {p.get('state')}")
            if not (p.get("phys_state") or "").endswith("LinkUp"):
                verdicts.fail(f"{who}: phys_state {p.get('phys_state')}")
            if rate is not None:
                lim = dataclasses.replace(rate, check=f"ib_rate_gbps {d['name']}/{p['port']}")
                verdicts.record(f"ib_rate_gbps {d['name']}/{p['port']}", p.get("rate_gbps"), "Gb/s", limit=lim)
    if rate is None:
        for line in sj.slow_ports(doc["devices"], want):
            verdicts.fail(line)
    verdicts.finish()


def test_gpudirect_rdma(node: HostRunner, gpus, verdicts):
    """GPUDirect RDMA usable: a peer-memory client of nvidia-peermem registered with ib_core, or the dma-buf
    path (kernel dma-buf, RDMA core dma-buf import, NVIDIA open kernel module), or -- when the kernel shows
    neither and the host has 2 GPUs or more -- NCCL's own statement from a run forced onto the network
    (channels ``.../GDRDMA``); "nvidia_peermem" in the module list alone is not enough. Each GPU's nearest
    NIC behind a PCIe switch (PIX/PXB), not through the CPU root complex; ``ib_write_bw --use_cuda``
    loopback per HCA when perftest is installed."""
    doc = _rdma_doc(node)
    if _no_nic(node, doc, verdicts):
        return
    pm = doc["peermem"]
    ready = sj.gdr_readiness(pm)
    nccl = None
    if not ready.ready and len(gpus) >= 2:
        try:
            nccl = node.probe("nccl_allreduce", NCCL_NET_LOOPBACK, env=nccl_environment(node.host.vars))
        except GpuacceptError as e:  # NCCL could not run: no statement from it; its error is kept as evidence
            nccl = {"error": str(e), "transports": {}}
        ready = sj.gdr_readiness(pm, nccl.get("transports") or {})
    verdicts.record("gpudirect_rdma_ready", ready.ready,
                    extra={**pm, "via": ready.via, "evidence": ready.message,
                           "nccl": None if nccl is None else {k: nccl.get(k) for k in
                                                              ("transports", "nccl_version", "error")}})
    if not ready.ready:
        verdicts.fail(ready.message + ("" if len(gpus) >= 2 else "; NCCL's check needs 2 GPUs, this host has 1"),
                      cause=sj.gdr_cause(pm))
    if doc.get("topology") is None:
        verdicts.record("gpu_nic_topology", None, extra={"reason": doc.get("topology_reason")})
    for row in doc.get("topology") or []:
        verdicts.record("nearest_nic", row.get("path"), gpu=row["gpu_index"], extra=row)
        if row.get("path") not in ("PIX", "PXB"):
            verdicts.fail(f"nearest NIC {row.get('nic')} is {row.get('path') or 'not found'}: traffic crosses the "
                          f"CPU root complex or socket (PIX/PXB expected)", gpu=row["gpu_index"])
    if not doc.get("perftest"):
        verdicts.record("ib_write_bw_loopback", "perftest not installed")
    else:
        lb = node.probe("rdma", {"perftest": True, "hcas": sl.str_list(node.host.vars.get("ib_hcas"), "ib_hcas",
                                                                       node.name)})
        if lb.get("loopback"):
            LOAD_COUNTERS[node.name] = {"doc": lb.get("link_counters"), "replayed": bool(node.replay_dir), "load": (
                "ib_write_bw --use_cuda loopback on " + ", ".join(str(r.get("hca")) for r in lb["loopback"]))}
        for r in lb.get("loopback", []):
            verdicts.record(f"ib_write_bw_gbps {r['hca']}", r.get("bw_gbps"), "GB/s", gpu=r["gpu"], extra=r)
            if r.get("error"):
                verdicts.fail(f"ib_write_bw --use_cuda loopback on {r['hca']}: {r['error']}", gpu=r["gpu"])
    verdicts.finish()


#: host -> the port error counters the rdma probe read around its loopbacks (test_gpudirect_rdma), judged by
#: test_rdma_link_errors
LOAD_COUNTERS: dict[str, dict] = {}


def test_rdma_link_errors(node: HostRunner, verdicts):
    """InfiniBand/RoCE port error counters read by the rdma probe right before and right after its ib_write_bw
    loopbacks: the growth of each counter of gpuaccept/data/ib_counter_limits.yaml against its limit, whatever
    state the port reads now (gpuaccept/judging/linkcounters.py). Skipped where no loopback ran on this host
    (no InfiniBand/RoCE device, perftest not installed, test_gpudirect_rdma not selected); a replayed capture
    taken before the counters were read is skipped naming that; a live run without them is an error."""
    got = LOAD_COUNTERS.get(node.name)
    why = linkcounters.not_measured_why(got, node.name, "rdma loopback", "no ib_write_bw loopback ran on this host in "
                                        "this run (no InfiniBand/RoCE device, perftest not installed, or "
                                        "test_gpudirect_rdma skipped or not selected)")
    if why:
        pytest.skip(why)
    for gpu, f in linkcounters.findings({"link_counters": got["doc"]}, None, got["load"]):
        verdicts.apply([f], gpu=gpu)
    verdicts.finish()


@ahead(_rdma_doc)  # a fleet test's plan runs on every host when it begins (gpuaccept.runner.prefetch)
def test_rdma_settings(nodes: list[HostRunner], verdicts):
    """The RoCE GID table (GID types and subnets in use) and the P_Key table of each InfiniBand/RoCE port agree
    across the selection (gpuaccept/judging/rdmaconfig.py: never raw table indices, never all-zero slots); a host
    off the majority fails under its own name (configuration, fix-config); with no majority every host does,
    naming the split. Hosts without a device are left out (test_rdma_ports judges a missing HCA). Ports that
    trained below the rate the same board runs at on the other hosts fail under their host's name (hardware,
    check-network: gpuaccept.judging.rdmaconfig.slow_hosts), where the host's inventory sets no ib_rate_gbps."""
    docs = {}
    for n in nodes:
        try:
            doc = _rdma_doc(n)
        except GpuacceptError as e:  # an unreachable host is reported by its own tests
            verdicts.record("rdma_settings", f"not read: {e}", extra={"host": n.name})
            continue
        if doc.get("devices"):
            docs[n.name] = doc
    if len(docs) < 2:
        pytest.skip(f"RoCE/InfiniBand settings are compared across hosts: {len(docs)} of the {len(nodes)} selected "
                    f"have an InfiniBand/RoCE device")
    for host, doc in docs.items():
        verdicts.for_host(host).record("rdma_port_settings", rdmaconfig.port_settings(doc))
    for host, why, ev in rdmaconfig.splits(docs):
        verdicts.fail(why, host=host, check="rdma_settings", cause=Cause("configuration", "rdma_config_split", host,
                                                                         evidence=ev))
    by = {n.name: n for n in nodes}
    hcas = {h: sl.str_list(by[h].host.vars.get("ib_hcas"), "ib_hcas", h) for h in docs}
    floors = {h for h in docs if sl.ib_rate_limit(by[h].host.vars.get("ib_rate_gbps"), h) is not None}
    for host, why, ev in rdmaconfig.slow_hosts(docs, hcas, floors):
        verdicts.fail(why, host=host, check="ib_rate_fleet", cause=Cause("hardware", "ib_rate_below_fleet", host,
                                                                         evidence=ev))
    verdicts.finish()
