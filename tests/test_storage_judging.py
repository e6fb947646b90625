"""gpuaccept.judging.storage (pure) and the storage inventory variables that feed it (gpuaccept.config.storage).

Placement entries are written the way the storage_mounts probe reports them (tests/test_storage.py runs the
probe itself on real mounts); the GPUDirect RDMA facts the way the rdma probe reports them.
"""
from __future__ import annotations

import pytest

from gpuaccept.judging import storage as sj
from gpuaccept.config import storage as sl
from gpuaccept.errors import ConfigError


def entry(path="/lustre/acc", mp="/lustre", src="10.0.0.1@o2ib:/fs", fstype="lustre", root=False, error=None):
    """A storage_mounts ``paths`` item."""
    return {"path": path, "real_path": path, "is_dir": error is None, "mount_point": None if error else mp,
            "mount_source": None if error else src, "fstype": None if error else fstype, "mount_root": "/",
            "device": None if error else ("254:0" if root else "0:77"), "root_fs": None if error else root,
            "root_device": "254:0", "error": error}


ROOT = dict(mp="/", src="/dev/sda2", fstype="ext4", root=True)       # the mount is missing: a dir on the OS disk
STORAGE = sl.expectation({}, "storage")
FS = sl.expectation({}, "fs")

PLACEMENT_CASES = [
    # (id, entry, expectation, [[substrings of failure line 1], [of line 2], ...]; [] = no failure)
    ("nvme-ok", entry("/mnt/nvme0/s", "/mnt/nvme0", "/dev/nvme0n1", "xfs"), STORAGE, []),
    ("storage-on-root", entry("/mnt/nvme0/s", **ROOT), STORAGE,
     [["storage_paths /mnt/nvme0/s is on the root filesystem (ext4 /dev/sda2 mounted at /)"]]),
    ("storage-on-root-allowed", entry("/scratch", **ROOT), sl.expectation({"storage_allow_root_fs": True}, "storage"), []),
    ("bind-of-root", entry("/scratch", "/scratch", "/dev/sda2", "ext4", root=True), STORAGE,
     [["storage_paths /scratch is on the root filesystem (ext4 /dev/sda2 mounted at /scratch)"]]),
    ("wrong-mount", entry("/mnt/nvme1/s", "/mnt/nvme1", "/dev/nvme1n1", "xfs"),
     sl.expectation({"storage_expect_mount": ["/mnt/nvme0"]}, "storage"),
     [["mounted at /mnt/nvme1; inventory storage_expect_mount says /mnt/nvme0"]]),
    ("wrong-type", entry("/mnt/nvme0/s", "/mnt/nvme0", "/dev/nvme0n1", "ext4"),
     sl.expectation({"storage_expect_fstype": "xfs"}, "storage"), [["is on ext4 /dev/nvme0n1", "storage_expect_fstype says xfs"]]),
    ("mount-trailing-slash", entry("/mnt/nvme0/s", "/mnt/nvme0", "/dev/nvme0n1", "xfs"),
     sl.expectation({"storage_expect_mount": "/mnt/nvme0/"}, "storage"), []),
    ("shared-ok", entry(), FS, []),
    ("shared-on-root", entry(**ROOT), FS, [["fs_paths /lustre/acc is on the root filesystem",
                                            "set fs_allow_root_fs: true"]]),
    ("shared-on-local-disk", entry(mp="/data", src="/dev/nvme0n1", fstype="xfs"), FS,
     [["fs_paths /lustre/acc is on a local-disk filesystem (xfs /dev/nvme0n1 mounted at /data)",
       "set fs_expect_fstype: xfs"]]),
    ("shared-local-type-declared", entry(mp="/data", src="/dev/nvme0n1", fstype="xfs"),
     sl.expectation({"fs_expect_fstype": ["xfs"]}, "fs"), []),
    ("shared-root-allowed", entry(**ROOT), sl.expectation({"fs_allow_root_fs": "yes"}, "fs"), []),
    ("shared-wrong-type", entry(mp="/lustre", src="server:/export", fstype="nfs4"),
     sl.expectation({"fs_expect_fstype": "lustre", "fs_expect_mount": "/lustre"}, "fs"),
     [["is on nfs4 server:/export mounted at /lustre; inventory fs_expect_fstype says lustre"]]),
    ("no-directory", entry(error="/lustre/acc: no such directory"), FS, [["/lustre/acc: no such directory"]]),
]


@pytest.mark.parametrize("case,e,expect,want", PLACEMENT_CASES, ids=[c[0] for c in PLACEMENT_CASES])
def test_placement_problems(case, e, expect, want):
    got = sj.placement_problems(e, expect)
    assert len(got) == len(want), got
    for line, parts in zip(got, want):
        assert all(p in line for p in parts), (line, parts)


def test_placement_problems_missing_mount_fields():
    """An entry without mount fields (an older or broken probe) is a failure, never a pass."""
    e = {**entry(), "root_fs": None}
    assert sj.placement_problems(e, FS) == ["fs_paths /lustre/acc: the probe did not say which mount holds it"]


# -- one fs_paths entry over several hosts ------------------------------------------------------------------
def test_split_mount_missing_on_one_host():
    """The field case: Lustre did not come back on gpu03 after a reboot; the directory is on its OS disk."""
    placements = {"gpu01": entry(), "gpu02": entry(), "gpu03": entry(**ROOT)}
    split = sj.split_shared_fs("/lustre/acc", placements, dict.fromkeys(placements, FS))
    assert split.members == ("gpu01", "gpu02") and split.reference == ("lustre", "10.0.0.1@o2ib:/fs")
    assert list(split.problems) == ["gpu03"]
    assert split.problems["gpu03"][0].startswith("gpu03: fs_paths /lustre/acc is on the root filesystem")


def test_split_odd_filesystem_left_out():
    """gpu03 mounted another export (NFS) where the others have Lustre: the odd host is named and left out."""
    placements = {"gpu01": entry(), "gpu02": entry(), "gpu03": entry(src="nas:/scratch", fstype="nfs4")}
    split = sj.split_shared_fs("/lustre/acc", placements, dict.fromkeys(placements, FS))
    assert split.members == ("gpu01", "gpu02")
    assert split.problems == {"gpu03": ["gpu03: fs_paths /lustre/acc is on nfs4 nas:/scratch mounted at /lustre "
                                        "but 2 of 3 hosts have it on lustre 10.0.0.1@o2ib:/fs: left out of the "
                                        "aggregate"]}


def test_split_same_type_other_source_is_odd():
    placements = {"a": entry(), "b": entry(), "c": entry(src="10.0.0.9@o2ib:/other")}
    split = sj.split_shared_fs("/lustre/acc", placements, dict.fromkeys(placements, FS))
    assert split.members == ("a", "b") and "c" in split.problems


def test_split_tie_counts_nobody():
    """Two hosts, two filesystems: neither can be called the shared one."""
    placements = {"a": entry(), "b": entry(src="nas:/x", fstype="nfs4")}
    split = sj.split_shared_fs("/lustre/acc", placements, dict.fromkeys(placements, FS))
    assert split.members == () and split.reference is None
    assert set(split.problems) == {"a", "b"}
    assert "no majority" in split.problems["a"][0] and "b on nfs4 nas:/x" in split.problems["a"][0]


def test_split_expectation_breaks_the_tie():
    """With fs_expect_fstype the odd host is found even among two."""
    placements = {"a": entry(), "b": entry(src="nas:/x", fstype="nfs4")}
    ex = sl.expectation({"fs_expect_fstype": "lustre"}, "fs")
    split = sj.split_shared_fs("/lustre/acc", placements, dict.fromkeys(placements, ex))
    assert split.members == ("a",) and "fs_expect_fstype says lustre" in split.problems["b"][0]


def test_split_single_host():
    split = sj.split_shared_fs("/lustre/acc", {"a": entry()}, {"a": FS})
    assert split.members == ("a",) and split.problems == {}


# -- the aggregate ----------------------------------------------------------------------------------------
def fio(read=None, write=None, ok=True, error=None, t_read=100.0, t_write=50.0):
    """A fio_throughput ``paths`` item for the two sequential tests."""
    return {"ok": ok, "error": error, "seq_read_gbps": read, "seq_write_gbps": write,
            "tests": {"seq_read": {"started": t_read}, "seq_write": {"started": t_write}} if ok else {}}


def test_aggregate_sums_hosts_and_skew():
    agg = sj.aggregate("read", {"a": fio(1.5, 1.0, t_read=100.0), "b": fio(2.25, 1.0, t_read=100.4)})
    assert agg.total_gbps == 3.75 and agg.per_host == {"a": 1.5, "b": 2.25} and agg.start_skew_s == 0.4
    assert agg.complete


def test_aggregate_missing_figure_is_not_zero():
    """A host without a figure is left out and named; the total is never padded with 0 for it."""
    agg = sj.aggregate("write", {"a": fio(1.0, 2.0), "b": fio(1.0, None), "c": {"ok": False, "error": "c: gone"}})
    assert agg.total_gbps == 2.0 and agg.per_host == {"a": 2.0}
    assert agg.left_out == {"b": "fio gave no seq_write_gbps", "c": "c: gone"} and not agg.complete


def test_aggregate_nobody_is_none():
    agg = sj.aggregate("read", {})
    assert agg.total_gbps is None and agg.start_skew_s is None and not agg.complete


def test_round_limit():
    lim = sl.storage_limits({"fs_aggregate_read_gbps": 80}, "a")
    assert sj.round_limit("fs_aggregate_read_gbps", {"a": lim, "b": {}}).bound == 80.0
    assert sj.round_limit("fs_aggregate_write_gbps", {"a": lim}) is None
    other = sl.storage_limits({"fs_aggregate_read_gbps": 40}, "b")
    with pytest.raises(ConfigError, match=r"storage_limits.fs_aggregate_read_gbps differs .*a: 80, b: 40"):
        sj.round_limit("fs_aggregate_read_gbps", {"a": lim, "b": other})


# -- GPU coverage -------------------------------------------------------------------------------------------
NVML = [{"index": 0, "pci_bus_id": "00000000:19:00.0"}, {"index": 1, "pci_bus_id": "00000000:3B:00.0"}]


def test_unmeasured_gpus_by_bus_id():
    # torch saw only the second GPU (CUDA_VISIBLE_DEVICES=1 on the node): its index 0 is NVML's GPU 1
    measured = [{"index": 0, "pci_bus_id": "00000000:3b:00.0", "end_to_end_gbps": 9.0}]
    assert sj.unmeasured_gpus(NVML, measured) == [NVML[0]]
    assert sj.describe_gpus(sj.unmeasured_gpus(NVML, measured)) == "GPU 0 (00000000:19:00.0)"


def test_unmeasured_gpus_by_index_and_errors_count():
    assert sj.unmeasured_gpus(NVML, [{"index": 0}, {"index": 1, "error": "GdsFile transfer failed"}]) == []
    assert sj.unmeasured_gpus(NVML, []) == NVML


# -- GPUDirect RDMA readiness -------------------------------------------------------------------------------
PM_NONE = {"nvidia_peermem_loaded": False, "nvidia_peermem_state": None, "memory_peers": {},
           "nv_peermem_registered": False, "peer_memory_api": False, "dma_buf_kernel": True,
           "ib_umem_dmabuf": False, "nvidia_open_kernel_module": False, "kernel_symbols_readable": True}


def test_gdr_module_listed_is_not_ready():
    """The module name alone (the old rule's "ready") is not evidence."""
    pm = {**PM_NONE, "nvidia_peermem_loaded": True, "nvidia_peermem_state": "Live"}
    r = sj.gdr_readiness(pm)
    assert not r.ready and r.via is None
    assert r.message.startswith("GPUDirect RDMA not ready: nvidia_peermem is listed (state Live) but no peer-memory "
                                "client is registered with ib_core (/sys/kernel/mm/memory_peers/nv_mem/version absent;"
                                " ib_register_peer_memory_client absent in kallsyms)")
    assert "missing: RDMA core dma-buf import (ib_umem_dmabuf_get), NVIDIA open kernel module" in r.message
    assert r.message.endswith("NCCL not run over the network")


def test_gdr_registered_client_is_ready():
    pm = {**PM_NONE, "nvidia_peermem_loaded": True, "memory_peers": {"nv_mem": "2.0", "nv_mem_nc": "2.0"},
          "nv_peermem_registered": True}
    r = sj.gdr_readiness(pm)
    assert r.ready and r.via == "nvidia-peermem" and "/sys/kernel/mm/memory_peers/nv_mem/version: 2.0" in r.message


def test_gdr_dmabuf_path_needs_all_three():
    pm = {**PM_NONE, "ib_umem_dmabuf": True, "nvidia_open_kernel_module": True}
    assert sj.gdr_readiness(pm).via == "dma-buf"
    assert not sj.gdr_readiness({**pm, "dma_buf_kernel": False}).ready


def test_gdr_nccl_statement():
    pm = {**PM_NONE, "nvidia_peermem_loaded": True, "nvidia_peermem_state": "Live"}
    r = sj.gdr_readiness(pm, {"NET/IB/0/GDRDMA": 4, "NET/IB/1/GDRDMA": 4})
    assert r.ready and r.via == "nccl" and "NET/IB/0/GDRDMA, NET/IB/1/GDRDMA" in r.message
    r = sj.gdr_readiness(pm, {"NET/IB/0": 8})
    assert not r.ready and r.message.endswith("NCCL's network channels: NET/IB/0 (no GDRDMA)")
    assert sj.nccl_gdr_channels({"NET/IB/0/GDRDMA/Shared": 2, "P2P/CUMEM": 4, "NET/Socket/0": 1}) == \
        ["NET/IB/0/GDRDMA/Shared"]


# -- the inventory variables ------------------------------------------------------------------------------
VALID = {"storage_paths": ["/mnt/nvme0/s"], "fs_paths": "/lustre/acc", "gds_paths": None,
         "storage_limits": {"seq_read_gbps": 12, "fs_aggregate_read_gbps": 80}, "storage_fio": {"runtime": 5},
         "nvme_count": 8, "storage_allow_destructive": False, "gds_allow_compat": "no", "ib_hcas": ["mlx5_0"],
         "ib_rate_gbps": 400, "storage_allow_root_fs": True, "fs_expect_fstype": ["lustre"],
         "fs_expect_mount": "/lustre", "gds_expect_mount": ["/mnt/nvme0"], "unrelated_var": {"x": 1}}

BAD_VARS = [
    ({"storage_limits": {"seq_raed_gbps": 1}}, "inventory var storage_limits: unknown key 'seq_raed_gbps'"),
    ({"fs_expect_mount": "lustre"}, "inventory var fs_expect_mount: 'lustre' is not an absolute path"),
    ({"storage_allow_root_fs": "sometimes"}, "inventory var storage_allow_root_fs: expected true or false"),
    ({"gds_expect_fstype": {"xfs": 1}}, "inventory var gds_expect_fstype: expected a string or a list"),
    ({"ib_rate_gbps": "400G"}, "inventory var ib_rate_gbps: expected a number >= 0 (Gb/s)"),
    ({"ib_hcas": [1]}, "inventory var ib_hcas: expected a string or a list of strings"),
    ({"storage_fio": {"sise": 1}}, "inventory var storage_fio: unknown key 'sise'"),
    ({"fs_paths": ["relative"]}, "inventory var fs_paths: 'relative' is not an absolute path"),
]


def test_validate_vars_accepts_a_full_set():
    sl.validate_vars(VALID, "gpu01")


@pytest.mark.parametrize("vars_,msg", BAD_VARS, ids=[next(iter(b[0])) for b in BAD_VARS])
def test_validate_vars_names_var_and_key(vars_, msg):
    with pytest.raises(sl.StorageConfigError) as ei:
        sl.validate_vars({**VALID, **vars_}, "inventory.ini: host gpu01")
    assert isinstance(ei.value, ConfigError)
    assert str(ei.value).startswith(f"inventory.ini: host gpu01: {msg}"), str(ei.value)
    assert "\n" not in str(ei.value)


def test_expectation_fields():
    ex = sl.expectation(VALID, "fs", "h")
    assert (ex.var, ex.mounts, ex.fstypes, ex.allow_root_fs, ex.shared) == \
        ("fs_paths", ("/lustre",), ("lustre",), False, True)
    st = sl.expectation(VALID, "storage", "h")
    assert st.allow_root_fs and not st.shared and st.var_name("expect_mount") == "storage_expect_mount"


def test_ib_rate_limit_is_an_inventory_limit():
    lim = sl.ib_rate_limit(400)
    assert (lim.check, lim.direction, lim.bound, lim.unit, lim.source) == \
        ("ib_rate_gbps", "min", 400.0, "Gb/s", "inventory var ib_rate_gbps")
    assert sl.ib_rate_limit(None) is None


def test_same_drive_only_for_local_paths():
    """Two local directories on one device: the second fails naming the first; fs_paths entries on one shared
    filesystem are separate aggregate rounds (never flagged); an entry with an error is left to placement."""
    a = {"path": "/mnt/nvme0/a", "real_path": "/mnt/nvme0/a", "device": "259:1", "fstype": "xfs",
         "mount_source": "/dev/nvme0n1", "mount_point": "/mnt/nvme0", "error": None}
    b = {**a, "path": "/mnt/nvme1/a", "real_path": "/mnt/nvme0/a"}
    c = {**a, "path": "/mnt/nvme2", "device": "259:2", "real_path": "/mnt/nvme2"}
    bad = {"path": "/x", "error": "/x: no such directory", "device": None}
    got = sj.same_drive_problems([a, bad, b, c], sl.expectation({}, "storage"))
    assert got[0] is None and got[1] is None and got[3] is None
    assert got[2].startswith("storage_paths /mnt/nvme1/a is on the same filesystem as /mnt/nvme0/a (the same "
                             "directory) (xfs /dev/nvme0n1 mounted at /mnt/nvme0, device 259:1)")
    assert sj.same_drive_problems([a, b], sl.expectation({}, "fs")) == [None, None]


def test_storage_path_off_a_local_disk_filesystem():
    """storage_paths is for the node's own drives: a folder left on NFS (the NVMe mount under it missing) or on
    a RAM disk fails naming the filesystem; storage_expect_fstype naming the type accepts it; fs_paths and
    gds_paths are not judged by this rule."""
    nfs = {"path": "/mnt/nvme0/s", "mount_point": "/mnt", "mount_source": "filer:/export/mnt", "fstype": "nfs4",
           "root_fs": False, "error": None, "device": "0:53"}
    got = sj.placement_problems(nfs, STORAGE)
    assert got == ["storage_paths /mnt/nvme0/s is on nfs4 filer:/export/mnt mounted at /mnt, not a local-disk "
                   "filesystem: the drive's mount meant for it is missing? Its figures would not be a drive's (set "
                   "storage_expect_fstype: nfs4 if this is intended)"]
    assert sj.placement_problems(nfs, sl.expectation({"storage_expect_fstype": "nfs4"}, "storage")) == []
    assert sj.placement_problems({**nfs, "fstype": "xfs"}, STORAGE) == []
    assert sj.placement_problems({**nfs, "fstype": "fuse.sshfs"}, STORAGE)[0].endswith(
        "a RAM, overlay or FUSE filesystem, not a drive (the drive's mount meant for it is missing?)")
    assert sj.placement_problems({**nfs, "path": "/lustre/x"}, sl.expectation({}, "gds")) == []


def test_aggregate_overlap_of_the_hosts_runs():
    """Runs of 20 s started 0.5 s apart are one load; started 5 s apart (a slow host, or its clock 5 s off)
    they overlapped 15 s and the sum is not judged; a single host has nothing to overlap."""
    def res(start, ms=20000, gbps=2.0):
        return {"ok": True, "seq_read_gbps": gbps, "tests": {"seq_read": {"started": start, "runtime_ms": ms}}}
    near = sj.aggregate("read", {"a": res(100.0), "b": res(100.5)})
    assert near.overlap_s == 19.5 and near.runtime_s == 20.0 and near.not_concurrent() is None
    far = sj.aggregate("read", {"a": res(100.0), "b": res(105.0), "c": res(101.0)})
    assert far.total_gbps == 6.0 and far.overlap_s == 15.0
    assert far.not_concurrent() == ("the 3 hosts' fio read runs overlapped 15.0 s of 20.0 s (started 5.0 s apart; or "
                                    "their clocks disagree): the sum is not of one concurrent load, not judged")
    assert sj.aggregate("read", {"a": res(100.0)}).not_concurrent() is None
    assert sj.aggregate("read", {"a": res(100.0), "b": {"ok": True, "seq_read_gbps": 1.0}}).not_concurrent() is None


@pytest.mark.parametrize("stage, want", [
    ("register", ("configuration", "gds_register_failed", "fix-config")),
    ("read", ("unverified", "gds_io_failed", "rerun")),
    ("write", ("unverified", "gds_io_failed", "rerun")),
])
def test_a_failed_gds_transfer_is_judged_by_the_stage_that_failed(stage, want):
    """cuFile refusing to register the file (as on the lent H200, ext4 on virtio, compat mode: 'file descriptor is
    not registered') is the GDS stack's configuration, never the GPU's; a failed read or write once registered is
    unverified; an entry from before the stage was recorded has no cause here (the test's row decides)."""
    from gpuaccept.judging import actions
    doc = {"mode": "compat", "fstype": "ext4"}
    g = {"index": 0, "stage": stage, "error": f"GdsFile {stage} failed: cuFileHandleRegister failed: file descriptor "
                                              "is not registered"}
    c = sj.gds_error_cause(g, doc)
    a = actions.for_cause(c)
    assert (c.cls, c.kind, a.action) == want and c.evidence["fstype"] == "ext4"
    assert sj.gds_error_cause({"index": 0, "error": "GdsFile transfer failed: x"}, doc) is None
