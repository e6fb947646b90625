"""The launch environment of a node (probe: launch_env) and its agreement across the selection (pure).

- /dev/shm size and free space against what NCCL's shared-memory transport needs for the node's GPUs
  (:func:`shm_need_bytes`, the figures and their sources in gpuaccept/data/node_limits.yaml);
- RLIMIT_MEMLOCK of the probes' session where RDMA is expected (unlimited: node_limits.yaml ``memlock``);
- ``nvidia_uvm`` loaded wherever CUDA runs (without it NVML answers and CUDA fails), ``nvidia_peermem`` (or
  ``nv_peer_mem``, or the dma-buf path: the open kernel module on Linux 5.12+) where GPUDirect RDMA is expected;
- :func:`split`: one value per host (NCCL version, network plugin, RoCE GID type, P_Key table) compared across
  the selection; the hosts off the majority are blamed, as gpuaccept/judging/fleet.py blames a driver version.
"""
from __future__ import annotations

import re
from typing import Mapping, Optional

from gpuaccept.causes import Cause
from gpuaccept.judging.driver import node_limits
from gpuaccept.judging.health import Finding

MIB = 2**20


def shm_need_bytes(ranks: int) -> int:
    """Bytes of /dev/shm NCCL's SHM transport needs for ``ranks`` local ranks (one per GPU): ``ranks x per_rank +
    ranks x (ranks - 1) x per_pair`` (gpuaccept/data/node_limits.yaml ``shm``, with the sources of both figures)."""
    row = node_limits()["shm"]
    return ranks * int(row["per_rank_bytes"]) + ranks * max(ranks - 1, 0) * int(row["per_pair_bytes"])


def shm(doc: dict, ranks: int) -> list[Finding]:
    """/dev/shm of a launch_env document against :func:`shm_need_bytes` (``ranks``: the node's GPUs). Too small a
    filesystem fails as ``configuration`` (``shm_small``), too little free space as ``capacity`` (``shm_full``)."""
    s = doc.get("shm") or {}
    need = shm_need_bytes(ranks)
    extra = {"need_mib": -(-need // MIB), "path": s.get("path"), "rule": node_limits()["shm"]["rule"]}
    if "size_bytes" not in s:
        return [Finding("shm_size_mib", None, "MiB", extra=extra,
                        error=f"{s.get('path') or '/dev/shm'} unreadable: {s.get('error') or 'not in the document'}")]
    size, free = s["size_bytes"], s["free_bytes"]
    out = [Finding("shm_size_mib", round(size / MIB, 1), "MiB", extra=extra),
           Finding("shm_free_mib", round(free / MIB, 1), "MiB", extra=extra)]
    if size < need:
        out.append(Finding("shm_size", failure=f"{s['path']} is {size / MIB:.0f} MiB, NCCL's shared-memory transport "
                                               f"needs {need / MIB:.0f} MiB for {ranks} GPUs",
                           extra=extra, cause=Cause("configuration", "shm_small", evidence=extra)))
    elif free < need:
        out.append(Finding("shm_free", failure=f"{s['path']} has {free / MIB:.0f} MiB free of {size / MIB:.0f} MiB, "
                                               f"NCCL's shared-memory transport needs {need / MIB:.0f} MiB for "
                                               f"{ranks} GPUs", extra=extra,
                           cause=Cause("capacity", "shm_full", evidence=extra)))
    return out


def memlock(doc: dict) -> list[Finding]:
    """RLIMIT_MEMLOCK (soft: what a process gets) of the probes' session where RDMA is expected: anything but
    unlimited fails (``memlock_low``, configuration; the bound and its source: node_limits.yaml ``memlock``)."""
    soft = (doc.get("memlock") or {}).get("soft_kib")
    row = node_limits()["memlock"]
    if soft is None:
        return [Finding("memlock_kib", None, "KiB", error="RLIMIT_MEMLOCK not in the document")]
    if soft == row["min_kib"]:
        return [Finding("memlock_kib", soft, "KiB")]
    return [Finding("memlock_kib", soft, "KiB", extra={"need": row["min_kib"]},
                    failure=f"locked-memory limit {soft} KiB in the probes' session, RDMA registration needs "
                            f"{row['min_kib']} (ulimit -l)",
                    cause=Cause("configuration", "memlock_low", evidence={"soft_kib": soft}))]


def _kernel_at_least(release: str | None, major: int, minor: int) -> bool:
    m = re.match(r"(\d+)\.(\d+)", release or "")
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (major, minor)


def modules(doc: dict, gpudirect: bool) -> list[Finding]:
    """``nvidia_uvm`` loaded (CUDA needs it: NVIDIA driver README, "nvidia-uvm.ko ... Unified Memory"); with
    ``gpudirect``, ``nvidia_peermem``/``nv_peer_mem`` loaded or the dma-buf path open (the open kernel module on
    Linux 5.12+, NVIDIA GPUDirect RDMA guide, "Using nvidia-peermem" / "dma-buf"). Missing: ``module_missing``."""
    mods = doc.get("modules") or {}
    if mods.get("source") is None:
        return [Finding("kernel_modules", None, error="neither /proc/modules nor /sys/module readable")]
    out = [Finding("nvidia_uvm_loaded", bool(mods.get("nvidia_uvm")))]
    if not mods.get("nvidia_uvm"):
        out.append(Finding("nvidia_uvm", failure="kernel module nvidia_uvm not loaded: NVML answers, CUDA fails",
                           cause=Cause("configuration", "module_missing", evidence={"module": "nvidia_uvm"})))
    if gpudirect:
        peer = bool(mods.get("nvidia_peermem") or mods.get("nv_peer_mem"))
        dmabuf = bool(doc.get("nvidia_open_module")) and _kernel_at_least(doc.get("kernel_release"), 5, 12)
        out.append(Finding("gpudirect_path", "nvidia_peermem" if peer else "dma-buf" if dmabuf else "none"))
        if not (peer or dmabuf):
            out.append(Finding("nvidia_peermem", failure="GPUDirect RDMA expected (an RDMA NIC beside the GPUs) but "
                                                         "neither nvidia_peermem is loaded nor the dma-buf path open",
                               cause=Cause("configuration", "module_missing",
                                           evidence={"module": "nvidia_peermem"})))
    return out


def nccl_identity(doc: dict) -> tuple[str | None, str | None]:
    """(NCCL version, network plugin) of a launch_env document, as compared across the selection: torch's NCCL,
    else the libnccl.so version the loader finds; NCCL_NET_PLUGIN, else the libnccl-net*.so file names found
    (``"none"``: read, and no plugin). ``(None, None)`` when the version was not read (torch did not answer and no
    libnccl.so was found: :func:`nccl_unread` says why): an unread host does not vote in :func:`split`."""
    n = doc.get("nccl") or {}
    version = n.get("torch_version")
    if not version:
        found = sorted({m.group(1) for p in n.get("libraries") or [] if (m := re.search(r"libnccl\.so\.([\d.]+)$", p))})
        version = ",".join(found) or None
    if version is None:
        return None, None
    plugin = n.get("net_plugin_env") or ",".join(sorted({p.rsplit("/", 1)[-1] for p in n.get("net_plugins") or []}))
    return version, plugin or "none"


def nccl_unread(doc: dict) -> dict | None:
    """Why a launch_env document gives no NCCL version (:func:`nccl_identity` None): ``{"torch_error": str | None,
    "libraries": [str]}`` (the probe's ``nccl`` facts: torch's import or call error, the libnccl.so files found);
    None when the version was read."""
    if nccl_identity(doc)[0] is not None:
        return None
    n = doc.get("nccl") or {}
    return {"torch_error": n.get("torch_error"), "libraries": list(n.get("libraries") or [])}


def split(values: Mapping[str, Optional[str]], what: str) -> list[tuple[str, str]]:
    """Hosts whose ``what`` differs from the selection's: ``values`` host -> value. One value: []. The value most
    hosts share is the selection's and each other host is blamed; with no majority (a tie) every host is, naming
    the split (the rule of gpuaccept.judging.fleet.driver_split). A value None (not read on that host) never
    votes and is never blamed here: the comparison is among the hosts that were read (the unread host has its own
    finding where its reading is judged)."""
    values = {h: v for h, v in values.items() if v is not None}
    by: dict[str, list[str]] = {}
    for host, v in values.items():
        by.setdefault(v, []).append(host)
    if len(by) < 2:
        return []
    ranked = sorted(by.items(), key=lambda kv: -len(kv[1]))
    total = len(values)
    if len(ranked[0][1]) > len(ranked[1][1]):
        return [(h, f"{what} {v}, while {len(ranked[0][1])} of {total} hosts have {ranked[0][0]}")
                for v, hosts in ranked[1:] for h in hosts]
    said = "; ".join(f"{v} on {len(hosts)}" for v, hosts in ranked)
    return [(h, f"{what} {v}; the hosts are split with no majority: {said}") for v, hosts in ranked for h in hosts]
