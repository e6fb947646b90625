"""The device under a filesystem error (gpuaccept/judging/fsdevice.py, gpuaccept/probes/_blockdev.py): kernel logs
written to real files in tmp, sysfs-shaped trees written under tmp (the probe's ``sysfs`` root, the inventory's
``host_sysfs_root``), read by the real host_kernel_log probe and judged by the real judge and action table. An ext4
error on Ceph RBD, NBD, DRBD, NVMe over TCP or an iSCSI disk is the network storage (check-network), an XFS shutdown on
a loop device names its backing file (unverified, rerun), a device with no sysfs entry is unverified; a local drive,
and md over local drives, stay hardware (drain-rma)."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from gpuaccept.judging import actions, fsdevice
from gpuaccept.judging import host as hj
from probe_helpers import run_probe
from project_helpers import make_project, run_pytest

TS = "2026-12-05T07:19:52+0000 gpu-017 kernel: "
PCI = "devices/pci0000:00/0000:00:1d.0"


def _dir(root: Path, rel: str, files: dict | None = None, links: dict | None = None) -> Path:
    d = root / rel
    d.mkdir(parents=True, exist_ok=True)
    for k, v in (files or {}).items():
        (d / k).parent.mkdir(parents=True, exist_ok=True)
        (d / k).write_text(f"{v}\n")
    for k, v in (links or {}).items():
        (d / k).parent.mkdir(parents=True, exist_ok=True)
        (d / k).symlink_to(root / v)
    return d


def _disk(root: Path, rel: str, dev: str, device: str | None = None, parts: dict | None = None, **files) -> None:
    """A block disk at ``rel`` (its name the last part), linked from class/block and block, with its partitions."""
    name = rel.rsplit("/", 1)[-1]
    d = _dir(root, rel, {"dev": dev, **{k.replace("__", "/"): v for k, v in files.items()}},
             {"device": device} if device else None)
    (d / "slaves").mkdir(exist_ok=True)
    _dir(root, "class/block", links={name: rel})
    _dir(root, "block", links={name: rel})
    for p, pdev in (parts or {}).items():
        _dir(root, f"{rel}/{p}", {"dev": pdev, "partition": p[-1]})
        _dir(root, "class/block", links={p: f"{rel}/{p}"})


def _ctrl(root: Path, rel: str, transport: str, address: str) -> None:
    _dir(root, rel, {"transport": transport, "address": address}, {"subsystem": "class/nvme"})
    _dir(root, "class/nvme", links={rel.rsplit("/", 1)[-1]: rel})


def _loop_backing_dev(path: Path) -> str:
    """MAJ:MIN of the filesystem holding ``path``, as util-linux findmnt reads it (the real mount of tmp)."""
    return subprocess.run(["findmnt", "-n", "-o", "MAJ:MIN", "-T", str(path)], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture
def sysfs(tmp_path) -> Path:
    """A sysfs tree of one node: a local NVMe drive (pcie) and SATA disk, Ceph RBD, NBD, DRBD, an NVMe over TCP
    namespace, two iSCSI disks with dm-multipath over them, md over local partitions, a loop device whose backing
    file (a real file in tmp) sits on a filesystem whose device is the SATA disk, dm over that loop, zram."""
    root = tmp_path / "sys"
    for d in ("class/nvme", "bus/scsi", "bus/rbd"):
        _dir(root, d)
    _ctrl(root, f"{PCI}/nvme/nvme0", "pcie", "0000:01:00.0")
    _disk(root, f"{PCI}/nvme/nvme0/nvme0n1", "259:0", f"{PCI}/nvme/nvme0", {"nvme0n1p1": "259:1"})
    _disk(root, "devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0/block/sda", "8:0",
          "devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0", {"sda1": "8:1"})
    _dir(root, "devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0", links={"subsystem": "bus/scsi"})
    _dir(root, "devices/rbd/0", {"pool": "gpu", "name": "scratch"}, {"subsystem": "bus/rbd"})
    _disk(root, "devices/rbd/0/block/rbd0", "252:0", "devices/rbd/0")
    _disk(root, "devices/virtual/block/nbd0", "43:0")
    _disk(root, "devices/virtual/block/drbd0", "147:0")
    _ctrl(root, "devices/virtual/nvme-fabrics/ctl/nvme1", "tcp", "traddr=10.0.0.9,trsvcid=4420")
    _disk(root, "devices/virtual/nvme-fabrics/ctl/nvme1/nvme1n1", "259:5", "devices/virtual/nvme-fabrics/ctl/nvme1")
    for i, sd in ((1, "sdb"), (2, "sdc")):
        host = f"devices/platform/host{2 + i}/session{i}"
        _dir(root, f"{host}/iscsi_session/session{i}", {"targetname": "iqn.2026-12.example:lun0"})
        tgt = f"{host}/target{2 + i}:0:0/{2 + i}:0:0:0"
        _dir(root, tgt, links={"subsystem": "bus/scsi"})
        _disk(root, f"{tgt}/block/{sd}", f"8:{16 * (i + 0)}", tgt)
    _disk(root, "devices/virtual/block/dm-0", "253:0", dm__name="mpatha", dm__uuid="mpath-3600a0980383")
    _dir(root, "devices/virtual/block/dm-0/slaves", links={"sdb": "class/block/sdb", "sdc": "class/block/sdc"})
    _disk(root, "devices/virtual/block/md0", "9:0", md__level="raid1")
    _dir(root, "devices/virtual/block/md0/slaves", links={"sda1": "class/block/sda1", "nvme0n1p1": "class/block/nvme0n1p1"})
    image = tmp_path / "images" / "scratch.img"
    image.parent.mkdir()
    image.write_bytes(b"\0" * 4096)
    _disk(root, "devices/virtual/block/loop4", "7:4", loop__backing_file=str(image))
    _dir(root, "dev/block", links={_loop_backing_dev(image): "class/block/sda"})
    _disk(root, "devices/virtual/block/dm-1", "253:1", dm__name="vg0-lv0", dm__uuid="LVM-x")
    _dir(root, "devices/virtual/block/dm-1/slaves", links={"loop4": "class/block/loop4"})
    _disk(root, "devices/virtual/block/zram0", "251:0")
    return root


def _judged(tmp_path: Path, sysfs: Path | None, lines: list[str]) -> tuple[dict, list]:
    log = tmp_path / "kern.log"
    log.write_text("".join(f"{TS}{ln}\n" for ln in lines))
    args = {**hj.kernel_log_args({"host_sysfs_root": str(sysfs)} if sysfs else {}), "sources": [str(log)]}
    rc, doc, err = run_probe("host_kernel_log", args)
    assert rc == 0, (doc, err[-2000:])
    return doc, hj.kernel_findings(doc)


def _act(f):
    return actions.for_finding("test_kernel_log", f.check, cause=f.cause)


def test_ext4_error_and_remount_on_ceph_rbd_is_the_network_storage_not_a_drive(tmp_path, sysfs):
    """The operator's trial (.scratch/breaker rbdfs): an OSD down, then ext4's error and read-only remount on rbd0."""
    doc, found = _judged(tmp_path, sysfs, ["libceph: osd3 down", "EXT4-fs error (device rbd0): ext4_find_entry:1455: "
                                           "inode #2: comm python3: reading directory lblock 0",
                                           "EXT4-fs (rbd0): Remounting filesystem read-only"])
    fact = doc["devices"]["rbd0"]
    assert (fact["what"], fact["kind"], fact["via"], fact["path"]) == ("netblock", "rbd", "bus rbd",
                                                                         "devices/rbd/0/block/rbd0")
    by = {f.check: f for f in found}
    assert set(by) == {"kernel netblock_stall rbd", "kernel ext4_error rbd0", "kernel fs_remount_ro rbd0"}
    for check in ("kernel ext4_error rbd0", "kernel fs_remount_ro rbd0"):
        f = by[check]
        assert f.failure is None and "network block storage rbd (bus rbd)" in f.error
        assert (f.cause.cls, f.cause.kind) == ("connectivity", "netblock_fs_error")
        act = _act(f)
        assert (act.action, act.cause) == ("check-network", "connectivity") and "rbd0" in act.reason
    assert not [f for f in found if _act(f).action in ("drain-rma", "reboot")]


@pytest.mark.parametrize("dev,kind,via", [("nbd0", "nbd", "major 43"), ("drbd0", "drbd", "major 147"),
                                          ("nvme1n1", "nvme_fabrics", "nvme transport tcp (nvme1)"),
                                          ("sdb", "iscsi", "iscsi session1")])
def test_a_filesystem_error_on_network_block_storage_is_connectivity(tmp_path, sysfs, dev, kind, via):
    doc, found = _judged(tmp_path, sysfs, [f"EXT4-fs error (device {dev}): ext4_journal_check_start:83: comm "
                                           f"python3: Detected aborted journal"])
    assert (doc["devices"][dev]["what"], doc["devices"][dev]["kind"], doc["devices"][dev]["via"]) == (
        "netblock", kind, via)
    (f,) = found
    assert (f.cause.cls, f.cause.kind, f.cause.evidence["filesystem"]) == ("connectivity", "netblock_fs_error", kind)
    assert _act(f).action == "check-network" and f.error and not f.failure
    if kind == "nvme_fabrics":
        assert "traddr=10.0.0.9,trsvcid=4420" in f.error


@pytest.mark.parametrize("line,check,kind,via", [
    ("EXT4-fs error (device nvme0n1p1): ext4_find_entry:1455: inode #2", "kernel ext4_error nvme0n1p1",
     "kernel_fs_error", "bus nvme"),
    ("XFS (sda): Filesystem has been shut down due to log error (0x2).", "kernel xfs_shutdown sda", "kernel_fs_error",
     "bus scsi"),
    ("nvme nvme0: I/O 847 QID 12 timeout, reset controller", "kernel nvme_timeout nvme0", "kernel_nvme_reset",
     "nvme transport pcie")])
def test_a_filesystem_error_on_a_local_drive_stays_hardware(tmp_path, sysfs, line, check, kind, via):
    doc, (f,) = _judged(tmp_path, sysfs, [line])
    assert f.check == check and f.failure and (f.cause.cls, f.cause.kind) == ("hardware", kind)
    assert f.cause.evidence["via"] == via and "a local drive of this node" in f.failure
    assert _act(f).action == "drain-rma"


def test_xfs_shutdown_on_a_loop_device_names_its_backing_file_and_is_unverified(tmp_path, sysfs):
    """The operator's trial (loopfs): the image's filesystem failed, not shown to be a part of this node. With an
    error line of the backing filesystem's own drive (sda) in the window, it is that drive's: hardware."""
    line = "XFS (loop4): Filesystem has been shut down due to log error (0x2)."
    doc, (f,) = _judged(tmp_path, sysfs, [line])
    image = str(tmp_path / "images" / "scratch.img")
    back = doc["devices"]["loop4"]["backing"]
    assert back["file"] == image and back["dev"] == _loop_backing_dev(Path(image)) and back["device"]["name"] == "sda"
    assert (f.cause.cls, f.cause.kind) == ("unverified", "kernel_fs_error_loop") and f.failure
    act = _act(f)
    assert act.action == "rerun" and image in act.reason and act.setting == f"loop image {image}"
    doc, found = _judged(tmp_path, sysfs, [line, "EXT4-fs error (device sda): ext4_lookup:1855: inode #2"])
    f = next(x for x in found if x.check == "kernel xfs_shutdown loop4")
    assert (f.cause.cls, f.cause.kind) == ("hardware", "kernel_fs_error") and _act(f).action == "drain-rma"
    assert "with an error line of its own (sda)" in f.failure


@pytest.mark.parametrize("dev,cls,action,said", [
    ("dm-0", "connectivity", "check-network", "device-mapper mpatha over sdb (iscsi), sdc (iscsi)"),
    ("md0", "hardware", "drain-rma", "md raid1 over nvme0n1p1 (drive), sda1 (drive): local drive(s)"),
    ("dm-1", "unverified", "rerun", "device-mapper vg0-lv0 over loop4 (loop)")])
def test_a_stacked_device_is_judged_by_its_members(tmp_path, sysfs, dev, cls, action, said):
    doc, (f,) = _judged(tmp_path, sysfs, [f"XFS ({dev}): Corruption of in-memory data (0x8) detected at "
                                          f"xfs_trans_cancel+0x12c/0x150 [xfs].  Shutting down filesystem."])
    assert doc["devices"][dev]["what"] == "stacked" and f.cause.cls == cls and said in (f.failure or f.error)
    assert _act(f).action == action


@pytest.mark.parametrize("dev,what", [("rbd7", "absent"), ("zram0", "virtual")])
def test_a_device_sysfs_does_not_show_to_be_a_drive_is_unverified_not_drained(tmp_path, sysfs, dev, what):
    doc, (f,) = _judged(tmp_path, sysfs, [f"EXT4-fs error (device {dev}): ext4_find_entry:1455: inode #2"])
    assert doc["devices"][dev]["what"] == what
    assert (f.cause.cls, f.cause.kind) == ("unverified", "kernel_fs_error_unverified")
    assert _act(f).action == "rerun"


def test_a_read_only_path_on_rbd_with_its_error_logged_is_connectivity_not_hardware(tmp_path, sysfs):
    kdoc, _ = _judged(tmp_path, sysfs, ["EXT4-fs (rbd0): Remounting filesystem read-only",
                                        "EXT4-fs (nvme0n1p1): Remounting filesystem read-only"])
    logged = hj.fs_error_devices(kdoc)

    def path(names):
        return {"paths": [{"path": "/scratch", "role": "storage", "ok": False, "error": "/scratch: read-only",
                           "failure": {"reason": "read_only", "path": "/scratch"}, "block_names": names}]}
    (rbd,) = hj.filesystem_findings(path(["rbd0"]), logged)
    assert (rbd.cause.cls, rbd.cause.kind) == ("connectivity", "netblock_fs_error")
    assert actions.for_finding("test_filesystems", rbd.check, cause=rbd.cause).action == "check-network"
    (local,) = hj.filesystem_findings(path(["nvme0n1p1", "nvme0n1", "nvme0"]), logged)
    assert (local.cause.cls, local.cause.kind) == ("hardware", "kernel_fs_error")


def test_the_fs_devices_table_names_network_block_kinds_only():
    table = {r["kind"]: r for r in fsdevice.block_kinds()}
    assert set(table) == {"rbd", "nbd", "drbd", "nvme_fabrics", "iscsi"}
    assert table["nbd"]["majors"] == [43] and table["iscsi"]["iscsi_session"] is True
    frames = hj.stack_frames()
    assert all(frames[k]["where"] == "network" and frames[k]["storage"] == "block" for k in table)
    assert [p["id"] for p in hj.probe_patterns() if p.get("device")] == [k.id for k in hj.load_catalog() if k.fs_error]
    rc, doc, _ = run_probe("host_kernel_log", {"patterns": [{"id": "x", "regex": "x"}], "block_kinds": [{"kind": 1}],
                                               "sources": ["/dev/null"]})
    assert rc == 1 and "block_kinds row" in doc["msg"]


def test_the_suite_reads_host_sysfs_root_and_a_replay_judges_alike(tmp_path, sysfs):
    """A real run (ansible_connection=local, kernel_log_paths, host_sysfs_root): rbd0's ext4 error is an ERROR with
    check-network, no drain; loop4's XFS shutdown a FAIL with rerun; the test's action is the stronger of the two
    (check-network: the error's cause stays with the failed test). A replay of the run's probes folder, later,
    judges the same."""
    when = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(time.time() + 60))
    log = tmp_path / "kern.log"
    log.write_text(f"{when} gpu01 kernel: libceph: osd3 down\n{when} gpu01 kernel: EXT4-fs error (device rbd0): "
                   f"ext4_find_entry:1455: inode #2\n{when} gpu01 kernel: XFS (loop4): Filesystem has been shut down "
                   f"due to log error (0x2).\n")
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"gpu01 ansible_connection=local kernel_log_paths={log} host_sysfs_root={sysfs}\n")

    def run(rep: Path) -> dict:
        res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-m", "host", "-k", "kernel_log")
        assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
        (t,) = [t for t in json.loads((rep / "results.json").read_text())["tests"] if "test_kernel_log" in t["nodeid"]]
        return t
    live = run(tmp_path / "live")
    failed = [(f["check"], f["action"]["cause"], f["action"]["kind"], f["action"]["action"]) for f in live["failures"]]
    assert failed == [("kernel xfs_shutdown loop4", "unverified", "kernel_fs_error_loop", "rerun")], failed
    assert (live["action"]["action"], live["action"]["cause"]) == ("check-network", "connectivity")
    assert "connectivity" in [c["class"] for c in live["causes"]], live["causes"]
    assert "rbd0 is network block storage rbd (bus rbd)" in live["message"] and "scratch.img" in live["message"]
    saved = tmp_path / "live" / "probes" / "gpu01"
    time.sleep(1.1)
    inv.write_text(f"gpu01 ansible_connection=local kernel_log_paths={log} host_sysfs_root={sysfs} "
                   f"gpuaccept_replay={saved}\n")
    again = run(tmp_path / "again")
    assert (again["outcome"], again["action"], again["message"]) == (live["outcome"], live["action"], live["message"])
    assert os.path.exists(log)
