"""Judging the storage and gpudirect layers: pure functions over probe documents and inventory settings.

No I/O, no node: the suites (``suites/test_storage.py``, ``suites/test_gpudirect.py``) call the probes and
record what these functions decide. Tested apart in ``tests/test_storage_judging.py``.

- :func:`placement_problems`: is a configured directory where the inventory says (not the OS disk, on the
  expected mount and filesystem type; a shared-filesystem path not on one host's local disk)?
- :func:`same_drive_problems`: two local directories on one filesystem (the second measures the same drive).
- :func:`split_shared_fs`: the hosts that see the same filesystem under one ``fs_paths`` entry, and the odd
  ones left out of the aggregate.
- :func:`aggregate` and :func:`round_limit`: the shared-filesystem aggregate (sum of the hosts' GB/s) and
  the one floor it is judged against.
- :func:`path_cause`: why a path was not measured (free space, read-only, the tool, the drive), as a cause.
- :func:`unmeasured_gpus`: NVML GPUs a per-GPU probe left out.
- :func:`gdr_readiness`: is GPUDirect RDMA usable, on evidence stronger than a module name.

GB/s = 1e9 bytes/s throughout.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping

from gpuaccept.causes import Cause
from gpuaccept.judging.readings import bus_key, describe_gpu
from gpuaccept.config.storage import LOCAL_DISK_FSTYPES, PathExpectation, StorageConfigError
from gpuaccept.config.thresholds import Limit


# -- where a path is -----------------------------------------------------------------------------------
#: filesystems whose speed is never a drive's: the fio_throughput probe refuses them (gpuaccept/probes/
#: _storage.py NOT_BLOCK, plus every fuse*); judged here too so the line names the missing mount before fio.
NOT_A_DRIVE_FSTYPES = ("tmpfs", "ramfs", "overlay", "squashfs", "devtmpfs")


def _where(entry: Mapping) -> str:
    return f"{entry.get('fstype')} {entry.get('mount_source')} mounted at {entry.get('mount_point')}"


def placement_problems(entry: Mapping, expect: PathExpectation) -> list[str]:
    """Failure lines for one directory, ``[]`` when it is where the inventory says.

    ``entry``: one item of the storage_mounts probe's ``paths`` (or fio_throughput's), i.e. ``{"path",
    "mount_point", "mount_source", "fstype", "root_fs", "error"}``; ``expect``: the path kind's settings
    (:func:`gpuaccept.config.storage.expectation`). Rules, each giving one line:

    1. ``error`` set (no such directory, mount table unreadable): that error.
    2. On the root filesystem (``root_fs``) unless ``<kind>_allow_root_fs``: the mount meant for the path is
       likely missing and a measurement would read the OS disk.
    3. ``<kind>_expect_mount`` given and the mount point is not one of them.
    4. ``<kind>_expect_fstype`` given and the filesystem type is not one of them.
    5. Shared paths (``fs_paths``) with no ``fs_expect_fstype``: a type of
       :data:`~gpuaccept.config.storage.LOCAL_DISK_FSTYPES` (one host's own disk) fails, unless rule 2 already
       reported the root filesystem or the root filesystem is allowed.
    6. Local drive paths (``storage_paths``) with no ``storage_expect_fstype``: a type that is not one of
       :data:`~gpuaccept.config.storage.LOCAL_DISK_FSTYPES` (NFS, Lustre, autofs, tmpfs, overlay...) fails: the
       NVMe mount meant for the path is missing and the folder sits on a network or RAM filesystem, whose
       figures are not the drive's.
    """
    path = entry.get("path")
    if entry.get("error"):
        return [str(entry["error"])]
    if entry.get("mount_point") is None or entry.get("fstype") is None or entry.get("root_fs") is None:
        return [f"{expect.var} {path}: the probe did not say which mount holds it"]
    out = []
    root = bool(entry["root_fs"])
    if root and not expect.allow_root_fs:
        out.append(f"{expect.var} {path} is on the root filesystem ({_where(entry)}): the mount meant for it "
                   f"is missing? It would measure the OS disk (set {expect.var_name('allow_root_fs')}: true "
                   f"if the root disk is intended)")
    if expect.mounts and entry["mount_point"] not in expect.mounts:
        out.append(f"{expect.var} {path} is on {_where(entry)}; inventory {expect.var_name('expect_mount')} "
                   f"says {', '.join(expect.mounts)}")
    if expect.fstypes and entry["fstype"] not in expect.fstypes:
        out.append(f"{expect.var} {path} is on {_where(entry)}; inventory {expect.var_name('expect_fstype')} "
                   f"says {', '.join(expect.fstypes)}")
    if expect.shared and not expect.fstypes and not root and entry["fstype"] in LOCAL_DISK_FSTYPES:
        out.append(f"{expect.var} {path} is on a local-disk filesystem ({_where(entry)}), not a shared one: "
                   f"the aggregate would add this host's own disk (set {expect.var_name('expect_fstype')}: "
                   f"{entry['fstype']} if this is intended)")
    local = expect.kind == "storage" and not expect.fstypes
    if local and (entry["fstype"] in NOT_A_DRIVE_FSTYPES or entry["fstype"].startswith("fuse")):
        out.append(f"{expect.var} {path} is on {_where(entry)}: a RAM, overlay or FUSE filesystem, not a drive "
                   f"(the drive's mount meant for it is missing?)")
    elif local and entry["fstype"] not in LOCAL_DISK_FSTYPES:
        out.append(f"{expect.var} {path} is on {_where(entry)}, not a local-disk filesystem: the drive's mount meant "
                   f"for it is missing? Its figures would not be a drive's (set {expect.var_name('expect_fstype')}: "
                   f"{entry['fstype']} if this is intended)")
    return out


def placement_cause(entry: Mapping) -> Cause:
    """The cause of the :func:`placement_problems` of one storage_mounts entry: the folder is not where the inventory
    says (missing, not a folder, on the root disk, another mount or filesystem type, RAM or FUSE): configuration,
    ``placement`` (fix-config: mount the filesystem meant for it, or correct the variable), evidence the path and
    where it is; a folder whose mount could not be read at all (``is_dir`` true, ``error`` set: mountinfo
    unreadable): tool, ``gap``. Pure."""
    ev = {k: entry.get(k) for k in ("path", "mount_point", "fstype") if entry.get(k) is not None}
    if entry.get("error") and entry.get("is_dir"):
        return Cause("tool", "gap", evidence=ev)
    return Cause("configuration", "placement", evidence=ev)


def same_drive_problems(entries: list[Mapping], expect: PathExpectation) -> list[str | None]:
    """For each entry of ``entries`` (the storage_mounts probe's ``paths``, in inventory order), a failure
    line when it is on the same filesystem as an earlier entry, else None. Local paths only (``expect`` of a
    shared kind: all None; many ``fs_paths`` on one shared filesystem are separate aggregate rounds).

    Same filesystem = same ``device`` (the ``major:minor`` mountinfo gives the mounted filesystem): the two
    directories sit on one set of drives, so the second fio run measures the first one's drive again and a
    node whose other drive is missing, or whose path is a symlink to the first, would pass with two good
    figures. Entries with an ``error`` or no ``device`` are left to :func:`placement_problems`. Pure."""
    out: list[str | None] = [None] * len(entries)
    if expect.shared:
        return out
    first: dict[str, Mapping] = {}
    for i, e in enumerate(entries):
        dev = e.get("device")
        if e.get("error") or not dev:
            continue
        if dev in first:
            a = first[dev]
            same = (" (the same directory)" if e.get("real_path") and e.get("real_path") == a.get("real_path")
                    else "")
            out[i] = (f"{expect.var} {e.get('path')} is on the same filesystem as {a.get('path')}{same} "
                      f"({_where(e)}, device {dev}): it would measure the same drive again; list one directory per "
                      f"drive (is the mount meant for {e.get('path')} missing, or is it a link?)")
        else:
            first[dev] = e
    return out


@dataclass(frozen=True)
class FsSplit:
    """The hosts of one ``fs_paths`` entry. ``members``: hosts counted in the aggregate, in input order;
    ``problems``: host -> failure lines for hosts left out; ``reference``: ``(fstype, mount_source)`` the
    members share (None when no host qualifies)."""

    members: tuple[str, ...]
    problems: dict[str, list[str]] = field(default_factory=dict)
    reference: tuple[str, str] | None = None


def split_shared_fs(path: str, placements: Mapping[str, Mapping],
                    expectations: Mapping[str, PathExpectation]) -> FsSplit:
    """Which hosts see the same shared filesystem under ``path``.

    ``placements``: host -> that host's storage_mounts entry for ``path``; ``expectations``: host -> its
    ``fs`` :class:`PathExpectation`. A host failing :func:`placement_problems` is left out with those
    lines. The others are grouped by ``(fstype, mount_source)``; the largest group is the shared filesystem
    when it is strictly the largest, and every other host is left out as the odd one ("... is on tmpfs x
    but 2 of 3 hosts have it on lustre y"). When the largest groups tie, no filesystem can be called the
    shared one: every host of them is left out and the lines say so. Pure.
    """
    problems: dict[str, list[str]] = {}
    ok: dict[str, tuple[str, str]] = {}
    for host, entry in placements.items():
        p = placement_problems(entry, expectations[host])
        if p:
            problems[host] = [f"{host}: {line}" for line in p]
        else:
            ok[host] = (entry["fstype"], entry["mount_source"])
    if not ok:
        return FsSplit((), problems, None)
    groups = Counter(ok.values()).most_common()
    top = groups[0][1]
    tied = [g for g, n in groups if n == top]
    if len(tied) > 1:
        desc = "; ".join(f"{', '.join(h for h, k in ok.items() if k == g)} on {g[0]} {g[1]}" for g in tied)
        for host in ok:
            problems[host] = [f"{host}: hosts disagree on the filesystem under fs_paths {path} ({desc}): no "
                              f"majority, so no host is counted in the aggregate"]
        return FsSplit((), problems, None)
    ref = tied[0]
    for host, key in ok.items():
        if key != ref:
            e = placements[host]
            problems[host] = [f"{host}: fs_paths {path} is on {_where(e)} but {top} of {len(ok)} hosts have it on "
                              f"{ref[0]} {ref[1]}: left out of the aggregate"]
    return FsSplit(tuple(h for h, k in ok.items() if k == ref), problems, ref)


# -- the shared-filesystem aggregate --------------------------------------------------------------------
@dataclass(frozen=True)
class Aggregate:
    """One direction of one aggregate round. ``total_gbps``: the sum of ``per_host`` (GB/s), None when no
    host contributed; ``per_host``: host -> GB/s counted; ``left_out``: host -> why it was not counted;
    ``start_skew_s``: latest minus earliest start of the hosts' fio runs (seconds), None without starts;
    ``overlap_s`` and ``runtime_s``: how long all counted runs ran together, and the shortest run (seconds)."""

    direction: str
    total_gbps: float | None
    per_host: dict[str, float]
    left_out: dict[str, str]
    start_skew_s: float | None
    overlap_s: float | None = None
    runtime_s: float | None = None

    @property
    def complete(self) -> bool:
        """True when every host of the round was counted."""
        return not self.left_out and self.total_gbps is not None

    def not_concurrent(self) -> str | None:
        """Why the sum is not one concurrent load, or None: with two or more hosts counted, their runs (each
        from its ``started`` for its ``runtime_ms``) overlapped less than the shortest run by more than
        :data:`MAX_APART_S` or :data:`MAX_APART_SHARE` of it, whichever is larger. Hosts whose runs do not
        overlap each get the filesystem alone, so the sum of their GB/s is more than the filesystem gave."""
        if len(self.per_host) < 2 or self.overlap_s is None or not self.runtime_s:
            return None
        apart = self.runtime_s - self.overlap_s
        if apart <= max(MAX_APART_S, MAX_APART_SHARE * self.runtime_s):
            return None
        return (f"the {len(self.per_host)} hosts' fio {self.direction} runs overlapped {max(0.0, self.overlap_s):.1f} "
                f"s of {self.runtime_s:.1f} s (started {self.start_skew_s or 0:.1f} s apart; or their clocks "
                f"disagree): the sum is not of one concurrent load, not judged")


#: runs of one aggregate round may overlap the shortest run less by this much (seconds, covering ssh start and
#: clock offsets between NTP-synced hosts) or this share of it (10 %), whichever is larger. Chosen.
MAX_APART_S = 1.0
MAX_APART_SHARE = 0.1


def aggregate(direction: str, results: Mapping[str, Mapping]) -> Aggregate:
    """Sum the sequential GB/s of every host of one round, ``direction`` "read" or "write".

    ``results``: host -> its fio_throughput ``paths`` entry for the round's path, i.e. ``{"ok", "error",
    "seq_read_gbps", "seq_write_gbps", "tests": {"seq_read": {"started": unix s}, ...}}`` (or ``{"ok":
    False, "error": "..."}`` when the probe itself failed). A host counts when ``ok`` and its
    ``seq_<direction>_gbps`` is a number; otherwise it is left out with the reason, never counted as 0.
    The total is rounded to 4 decimals. ``overlap_s``: the earliest end minus the latest start of the counted
    hosts' runs (``tests.seq_<direction>.started`` + ``runtime_ms``); ``runtime_s`` the shortest run; both
    None unless every counted host gives them (see :meth:`Aggregate.not_concurrent`). Pure.
    """
    key = f"seq_{direction}_gbps"
    per_host: dict[str, float] = {}
    left: dict[str, str] = {}
    starts, ends, runs = [], [], []
    for host, r in results.items():
        v = r.get(key)
        if not r.get("ok"):
            left[host] = str(r.get("error") or "fio failed")
        elif not isinstance(v, (int, float)) or isinstance(v, bool):
            left[host] = f"fio gave no {key}"
        else:
            per_host[host] = float(v)
            test = (r.get("tests") or {}).get(f"seq_{direction}") or {}
            t, ms = test.get("started"), test.get("runtime_ms")
            if isinstance(t, (int, float)):
                starts.append(float(t))
                if isinstance(ms, (int, float)) and ms > 0:
                    ends.append(float(t) + ms / 1e3)
                    runs.append(ms / 1e3)
    total = round(sum(per_host.values()), 4) if per_host else None
    skew = round(max(starts) - min(starts), 3) if starts else None
    timed = len(runs) == len(per_host) and runs
    overlap = round(min(ends) - max(starts), 3) if timed else None
    return Aggregate(direction, total, per_host, left, skew, overlap, min(runs) if timed else None)


def round_limit(key: str, limits_by_host: Mapping[str, Mapping[str, Limit]]) -> Limit | None:
    """The floor ``key`` (``fs_aggregate_read_gbps`` ...) of one aggregate round from the ``storage_limits``
    of its hosts (host -> check -> Limit). Hosts that do not set it are ignored; None when none does.
    Raises StorageConfigError when two hosts set different bounds (the aggregate has one floor)."""
    seen = {h: lim[key] for h, lim in limits_by_host.items() if key in lim}
    bounds = {lim.bound for lim in seen.values()}
    if len(bounds) > 1:
        desc = ", ".join(f"{h}: {lim.bound:g}" for h, lim in seen.items())
        raise StorageConfigError(f"inventory var storage_limits.{key} differs between the hosts of one shared "
                                 f"filesystem ({desc}): the aggregate has one floor")
    return next(iter(seen.values()), None)


# -- why a path was not measured ----------------------------------------------------------------------------
GIB = 1 << 30
#: fio job errnos that are the drive's (or its link's) doing: an I/O error, a device gone, a failed
#: checksum read back (errno(3); EREMOTEIO: a SCSI/NVMe target error; EBADMSG: ext4/XFS metadata CRC)
DRIVE_ERRNOS = frozenset({"EIO", "ENXIO", "ENODEV", "EREMOTEIO", "EBADMSG"})


def _gib(n) -> float | None:
    return round(n / GIB, 2) if isinstance(n, (int, float)) and not isinstance(n, bool) else None


def path_cause(entry: Mapping) -> tuple[str, Cause | None]:
    """``("error" | "fail", cause)`` of a path a storage probe did not measure, read from its ``failure``
    fact (gpuaccept/probes/_storage.py ``Refused``, fio_throughput's fio failures; never the message). Pure.

    - ``free_space``: error, ``Cause("capacity", "free_space")`` with evidence ``{"path", "free_gib",
      "required_gib", "need_gib"}``: ``required_gib`` the free space the run needs (margin + 64 MiB, or what
      fio was writing), ``need_gib`` what must be freed (their difference, at least 0.01), what the action's
      command asks for;
    - ``read_only``: error, ``Cause("configuration", "read_only")``, evidence ``{"path", "seen_by"}``;
    - ``not_writable`` (EACCES: the folder's permissions, the filesystem is writable): error,
      ``Cause("configuration", "not_writable")``;
    - ``fio_engine_missing``: error, ``Cause("configuration", "fio_engine_missing")``, evidence ``{"path",
      "engine"}`` (libaio or liburing not installed);
    - ``placement``, ``not_block_backed``: fail (the path is not where the inventory says),
      ``Cause("configuration", "placement")``;
    - ``fio_errno`` with an errno of :data:`DRIVE_ERRNOS`: fail, ``Cause("hardware", "io_error")``; any other
      errno, and fio timed out, printed no JSON, was cut short or gave no figure: error, ``Cause("tool",
      "fio_failed")`` (not the disk's fault as far as anything shows);
    - no ``failure`` (a document of an older probe): ``("fail", None)``, as such paths were judged before.
    """
    f = entry.get("failure")
    if not isinstance(f, Mapping) or not isinstance(f.get("reason"), str):
        return "fail", None
    reason, path = f["reason"], f.get("path") or entry.get("path")
    if reason == "free_space":
        free, need = _gib(f.get("free_bytes")), _gib(f.get("need_bytes"))
        short = round(max(need - free, 0.01), 2) if free is not None and need is not None else need
        return "error", Cause("capacity", "free_space", evidence={
            "path": path, "free_gib": free, "required_gib": need, "need_gib": short,
            **({"errno": f["errno"]} if f.get("errno") else {})})
    if reason == "read_only":
        return "error", Cause("configuration", "read_only", evidence={"path": path, "seen_by": f.get("seen_by")})
    if reason == "not_writable":
        return "error", Cause("configuration", "not_writable", evidence={"path": path, "errno": f.get("errno")})
    if reason in ("placement", "not_block_backed"):
        return "fail", Cause("configuration", "placement", evidence={"path": path, "fstype": f.get("fstype")})
    if reason == "fio_engine_missing":  # fio's I/O engine library is not installed: the node's software
        return "error", Cause("configuration", "fio_engine_missing", evidence={"path": path,
                                                                               "engine": f.get("engine")})
    if reason == "fio_errno" and f.get("errno_name") in DRIVE_ERRNOS:
        return "fail", Cause("hardware", "io_error", evidence={"path": path, "errno": f.get("errno_name"),
                                                               "test": f.get("test")})
    return "error", Cause("tool", "fio_failed", evidence={"path": path, "reason": reason,
                                                          **{k: f[k] for k in ("test", "errno_name", "rc")
                                                             if f.get(k) is not None}})


# -- GPU coverage ----------------------------------------------------------------------------------------
def unmeasured_gpus(nvml_gpus: list[Mapping], measured: list[Mapping]) -> list[Mapping]:
    """The GPUs of ``nvml_gpus`` (the gpu_inventory probe's ``gpus``: ``{"index", "pci_bus_id", ...}``) with no
    entry in ``measured`` (a probe's per-GPU list; an entry with an ``error`` counts as measured: its failure is
reported on its own). A GPU is matched by PCI bus id when both sides give one
    (through the one normaliser, gpuaccept.judging.readings.bus_key), else by index. Pure."""
    def same(g: Mapping, m: Mapping) -> bool:
        a, b = bus_key(g.get("pci_bus_id")), bus_key(m.get("pci_bus_id"))
        return a == b if a and b else g.get("index") == m.get("index")

    return [g for g in nvml_gpus if not any(same(g, m) for m in measured)]


def describe_gpus(gpus: list[Mapping]) -> str:
    """``"GPU 1 (00000000:1A:00.0), GPU 3 (...)"``."""
    return ", ".join(describe_gpu(dict(g)) for g in gpus)


# -- GPUDirect RDMA ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GdrReadiness:
    """``ready``; ``via``: "nvidia-peermem" | "dma-buf" | "nccl" | None; ``message``: the evidence (ready) or
    every missing piece (not ready), one line."""

    ready: bool
    via: str | None
    message: str


def nccl_gdr_channels(transports: Mapping[str, int] | None) -> list[str]:
    """The transports of an nccl_allreduce document (``{"NET/IB/0/GDRDMA": 4, ...}``, NCCL's "Channel ... via
    T" lines) that NCCL ran with GPUDirect RDMA: a ``GDRDMA`` component (NCCL src/transport/net.cc prints
    ``NET/<net>/<dev>/GDRDMA`` when a channel's buffers are registered with the NIC directly)."""
    return sorted(t for t in (transports or {}) if "GDRDMA" in t.upper().split("/"))


def gdr_readiness(pm: Mapping, nccl_transports: Mapping[str, int] | None = None) -> GdrReadiness:
    """Is GPUDirect RDMA usable on this host? ``pm``: the rdma probe's ``peermem`` facts; ``nccl_transports``:
    the ``transports`` of a single-node NCCL run forced onto the network (None when none was run).

    Ready on any of three kinds of evidence, in this order:

    1. ``nvidia-peermem``: a peer-memory client of nvidia-peermem (``nv_mem`` / ``nv_mem_nc``) is registered
       with ib_core (/sys/kernel/mm/memory_peers/<client>/version exists: ib_core creates it when
       ``ib_register_peer_memory_client`` succeeds). "nvidia_peermem" in the module list alone is NOT enough:
       the module can be listed while loading or unloading, or with an ib_core that has no PeerDirect API.
    2. ``dma-buf``: the kernel exports dma-bufs (``dma_buf_export``), the RDMA core imports them
       (``ib_umem_dmabuf_get``, Linux 5.12+) and the NVIDIA driver is the open kernel module (which exports
       GPU memory as dma-buf).
    3. ``nccl``: NCCL's own statement: a network channel ran ``.../GDRDMA``.

    Pure.
    """
    peers = pm.get("memory_peers") or {}
    if pm.get("nv_peermem_registered"):
        client = next((c for c in ("nv_mem", "nv_mem_nc") if c in peers), None) or "nv_mem"
        return GdrReadiness(True, "nvidia-peermem", f"peer-memory client {client} registered with ib_core "
                            f"(/sys/kernel/mm/memory_peers/{client}/version: {peers.get(client) or '?'})")
    if pm.get("dma_buf_kernel") and pm.get("ib_umem_dmabuf") and pm.get("nvidia_open_kernel_module"):
        return GdrReadiness(True, "dma-buf", "dma-buf path: kernel dma_buf_export, RDMA core ib_umem_dmabuf_get, "
                            "NVIDIA open kernel module")
    gdr = nccl_gdr_channels(nccl_transports)
    if gdr:
        return GdrReadiness(True, "nccl", f"NCCL's network channels ran with GPUDirect RDMA ({', '.join(gdr)})")
    why = []
    if pm.get("nvidia_peermem_loaded"):
        api = {True: "present", False: "absent"}[bool(pm.get("peer_memory_api"))]
        why.append(f"nvidia_peermem is listed (state {pm.get('nvidia_peermem_state')}) but no peer-memory client "
                   f"is registered with ib_core (/sys/kernel/mm/memory_peers/nv_mem/version absent; "
                   f"ib_register_peer_memory_client {api} in kallsyms)")
    else:
        why.append("nvidia_peermem not loaded")
    missing = [name for ok, name in ((pm.get("dma_buf_kernel"), "kernel dma-buf (dma_buf_export)"),
                                     (pm.get("ib_umem_dmabuf"), "RDMA core dma-buf import (ib_umem_dmabuf_get)"),
                                     (pm.get("nvidia_open_kernel_module"), "NVIDIA open kernel module")) if not ok]
    why.append(f"no dma-buf path (missing: {', '.join(missing)})"
               + ("; /proc/kallsyms unreadable" if pm.get("kernel_symbols_readable") is False else ""))
    if nccl_transports is None:
        why.append("NCCL not run over the network")
    else:
        why.append(f"NCCL's network channels: {', '.join(sorted(nccl_transports)) or 'none reported'} (no GDRDMA)")
    return GdrReadiness(False, None, "GPUDirect RDMA not ready: " + "; ".join(why))


def gdr_cause(pm: Mapping) -> Cause:
    """The cause of GPUDirect RDMA not ready (:func:`gdr_readiness` False) from the rdma probe's ``peermem`` facts
    ``pm`` (pure): nvidia_peermem not loaded is ``module_missing`` (configuration: modprobe it); loaded without a
    peer-memory client registered with ib_core is ``gdr_not_ready`` (configuration: the module and the RDMA core
    do not meet, an out-of-tree MOFED or a driver reload order). Never the NIC's or the GPU's hardware."""
    if not pm.get("nvidia_peermem_loaded"):
        return Cause("configuration", "module_missing", evidence={"module": "nvidia_peermem"})
    return Cause("configuration", "gdr_not_ready", evidence={"state": pm.get("nvidia_peermem_state")})


def rated_ports(devices: list[Mapping] | None, hcas: list[str] | None = None) -> list[tuple[tuple, Mapping, Mapping, float]]:
    """``[((link layer, board_id), device, port, rate Gb/s)]``: the ACTIVE ports with a rate of the ``rdma`` probe's
    ``devices``, of the HCAs ``hcas`` names or, when it is empty, every InfiniBand port (:func:`slow_ports` and
    gpuaccept.judging.rdmaconfig.slow_hosts compare them per link layer and board)."""
    out = []
    for d in devices or []:
        if hcas and d.get("name") not in hcas:
            continue
        for p in d.get("ports") or []:
            rate, layer = p.get("rate_gbps"), p.get("link_layer")
            if not hcas and layer != "InfiniBand":
                continue
            if str(p.get("state") or "").endswith("ACTIVE") and isinstance(rate, (int, float)) \
                    and not isinstance(rate, bool) and rate > 0:
                out.append(((str(layer), d.get("board_id")), d, p, float(rate)))
    return out


def slow_ports(devices: list[Mapping], hcas: list[str] | None = None) -> list[str]:
    """Ports of the ``rdma`` probe's ``devices`` that trained below the rate their peers run at, one line each.

    Used where the inventory sets no ``ib_rate_gbps``. Compared: the ACTIVE ports with a rate (``rate_gbps``,
    Gb/s as the kernel writes /sys/class/infiniband/<hca>/ports/<n>/rate) of the devices named in ``hcas``
    (``ib_hcas``) or, when it is empty, of every device whose port is InfiniBand (a GPU node's Ethernet ports are
    often a different, slower part: compared only when ``ib_hcas`` lists them); per link layer and board
    (``board_id``, /sys/class/infiniband/<hca>/board_id: a storage HCA of another part is not compared with the
    compute ones), the reference is the rate most compared ports run at (the faster on a tie), and needs 2
    ports or more. No constant: HCAs of one board on one node train alike (a 400 Gb/s NDR HCA at 200 Gb/s HDR is
    a cable or transceiver fault)."""
    groups: dict[tuple, list[tuple[str, Mapping, float]]] = {}
    for key, d, p, rate in rated_ports(devices, hcas):
        groups.setdefault(key, []).append((d.get("name"), {**p, "pci": d.get("pci_address")}, rate))
    out = []
    for (layer, board), ports in groups.items():
        if len(ports) < 2:
            continue
        ref, n = max(Counter(r for _, _, r in ports).items(), key=lambda kv: (kv[1], kv[0]))
        for name, p, rate in ports:
            if rate < ref:
                out.append(f"{name} port {p.get('port')} ({layer}, {p.get('pci')}): rate "
                           f"{p.get('rate') or f'{rate:g} Gb/s'}, below the {ref:g} Gb/s of {n} other {layer} port(s) of this node"
                           f"{f' (board {board})' if board else ''} [limit: the node's own ports; inventory var "
                           f"ib_rate_gbps sets a fixed floor, ib_hcas the HCAs judged]")
    return out


def gds_bypass(mode: str | None, ops: Mapping | None, p2pdma: Mapping | None = None) -> str | None:
    """Why a GDS transfer did not go through nvidia-fs although the stack says it would, else None.

    ``mode``: the gds probe's ``mode``; ``ops``: one GPU's ``nvidia_fs_ops`` ({"reads", "writes"}: op counts of
    /proc/driver/nvidia-fs/stats before/after the transfer; None, or None counts, where the module's IO stats
    are off: then nothing is said). In mode "nvidia-fs" a transfer that moved no read or no write through the
    module was done by cuFile's compat path (POSIX through a bounce buffer): the file system or block device is
    not one cuFile drives directly, or cufile.json forces compat. The suite fails it as it fails mode "compat"
    (unless ``gds_allow_compat``). ``p2pdma``: the probe's ``p2pdma`` facts; where both the kernel and
    cufile.json enable P2PDMA, cuFile may take that direct path past nvidia-fs: nothing is said then."""
    if mode != "nvidia-fs" or not isinstance(ops, Mapping):
        return None
    if isinstance(p2pdma, Mapping) and p2pdma.get("kernel") and p2pdma.get("cufile_json_use_pci_p2pdma"):
        return None
    idle = [k for k in ("reads", "writes") if isinstance(ops.get(k), int) and ops[k] == 0]
    if not idle:
        return None
    return (f"GDS transfer bypassed nvidia-fs: the module is loaded but its {' and '.join(idle)} counter(s) did "
            f"not move (/proc/driver/nvidia-fs/stats), so cuFile ran in compat mode (file system or device not "
            f"GDS-capable, or compat forced in cufile.json); set gds_allow_compat: true to accept")


#: the gds probe's ``stage`` of a failed transfer -> (cause class, kind): cuFile could not register the file (its
#: stack or the filesystem: NVIDIA cuFile API reference, cuFileHandleRegister checks the descriptor for GDS support)
#: is the node's configuration; a write or read that failed once registered proves nothing of a part yet
GDS_STAGE_CAUSES = {"register": ("configuration", "gds_register_failed"), "write": ("unverified", "gds_io_failed"),
                    "read": ("unverified", "gds_io_failed")}


def gds_error_cause(gpu: Mapping, doc: Mapping) -> Cause | None:
    """The cause of one GPU's failed GDS transfer in a gds probe document ``doc`` (``gpu``: its entry with
    ``stage`` and ``error``), by the stage that failed (:data:`GDS_STAGE_CAUSES`), with the mode, filesystem and
    error as evidence; None for an entry without a stage (a capture from before it: the test's row decides)."""
    got = GDS_STAGE_CAUSES.get(str(gpu.get("stage")))
    if got is None:
        return None
    return Cause(got[0], got[1], evidence={"stage": gpu.get("stage"), "mode": doc.get("mode"),
                                           "fstype": doc.get("fstype"), "error": str(gpu.get("error"))[:300]})


def nvme_count_cause(found: int, declared: int, controllers: int | None) -> Cause:
    """Why the NVMe namespaces counted differ from ``nvme_count`` (pure): more than declared is the inventory's
    (configuration, ``nvme_count_declared``); fewer is configuration too (``nvme_count_short``: the inventory
    declares more than the node has, the driver is not loaded, a namespace is not created; a rerun counts the
    same), since a count alone shows no part failing; a controller found dead or removed is the host layer's
    hardware finding (gpuaccept.judging.host.nvme_state_cause), with its evidence."""
    ev = {"found": found, "declared": declared, "controllers": controllers}
    if found > declared:
        return Cause("configuration", "nvme_count_declared", evidence=ev)
    return Cause("configuration", "nvme_count_short", evidence=ev)
