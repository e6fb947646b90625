"""gpuaccept.judging.host on the probes' own documents: kernel-log lines as fleets' kernels print them (one per kind of the
catalogue, in the timestamp forms journalctl, dmesg and syslog write) matched by the real host_kernel_log parser, EDAC and
MemTotal readings, host_filesystems failures, NVMe controller states and SMART critical warnings."""
from __future__ import annotations

import re

import pytest

from gpuaccept.judging import actions
from gpuaccept.judging import host as hj
from gpuaccept.judging.standouts import check_of
from probe_helpers import load_probe

hkl = load_probe("host_kernel_log")

# one line per kind, as the kernel prints it; the timestamp forms: journalctl -o short-iso, dmesg --time-format iso,
# dmesg -T, syslog (rsyslog kern.log) with the kernel's own [seconds] after it, plain dmesg
LINES = {
    "hung_task": "2026-12-05T03:14:07+0000 gpu-017 kernel: INFO: task kworker/u386:2:1734 blocked for more than 122 seconds.",
    "soft_lockup": "2026-12-05T03:15:11,482113+00:00 watchdog: BUG: soft lockup - CPU#37 stuck for 23s! [python3:88412]",
    "hard_lockup": "2026-12-05T03:15:40,000001+00:00 NMI watchdog: Watchdog detected hard LOCKUP on cpu 5",
    "rcu_stall": "[Sat Dec  5 03:16:02 2026] rcu: INFO: rcu_sched detected stalls on CPUs/tasks:",
    "mlx5_health": "Dec  5 03:17:45 gpu-017 kernel: [812345.123456] mlx5_core 0000:0c:00.0: poll_health:800:(pid 0): "
                   "device's health compromised - reached miss count",
    "nvme_timeout": "[ 1843.308145] nvme nvme0: I/O 847 QID 12 timeout, reset controller",
    "nvme_down": "2026-12-05T03:18:00+0000 gpu-017 kernel: nvme nvme1: controller is down; will reset: CSTS=0xffffffff, "
                 "PCI_STATUS=0xffff",
    "ext4_error": "2026-12-05T03:18:30+0000 gpu-017 kernel: EXT4-fs error (device nvme0n1p1): ext4_find_entry:1455: inode #2: "
                  "comm ls: reading directory lblock 0",
    "fs_remount_ro": "2026-12-05T03:18:31+0000 gpu-017 kernel: EXT4-fs (nvme0n1p1): Remounting filesystem read-only",
    "xfs_shutdown": "2026-12-05T03:19:02+0000 gpu-017 kernel: XFS (dm-0): Corruption of in-memory data (0x8) detected at "
                    "xfs_trans_cancel+0x12c/0x150 [xfs] (fs/xfs/xfs_trans.c:1093).  Shutting down filesystem.",
    "nvlink_training": "2026-12-05T03:20:12+0000 gpu-017 kernel: NVRM: knvlinkDiscoverPostRxDetLinks_GH100: Getting "
                       "peer0's postRxDetLinkMask failed!",
    "mce": "2026-12-05T03:21:00+0000 gpu-017 kernel: mce: [Hardware Error]: CPU 12: Machine Check: 0 Bank 17: dc2040000000011b",
    "edac_ue": "2026-12-05T03:22:00+0000 gpu-017 kernel: EDAC MC1: 1 UE memory read error on CPU_SrcID#1_MC#0_Chan#0_DIMM#0 "
               "(channel:0 slot:0 page:0x4a1b2 offset:0x0 grain:32 - err_code:0x00a0:0x0090 ProcessorSocketId:0x1)",
    "edac_ce": "2026-12-05T03:23:00+0000 gpu-017 kernel: EDAC MC0: 3 CE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0 "
               "(channel:1 slot:0 page:0x8d3b6 offset:0x0 grain:32 syndrome:0x0 - err_code:0x0101:0x0091)",
    "oom_kill": "2026-12-05T03:24:00+0000 gpu-017 kernel: Out of memory: Killed process 88412 (python3) "
                "total-vm:412341234kB, anon-rss:40123412kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:812kB oom_score_adj:0",
    # network filesystem servers; the Lustre and Ceph lines are quoted from public reports (tests/test_host_kernel_log.py)
    "nfs_not_responding": "2026-12-05T03:25:00+0000 gpu-017 kernel: nfs: server 10.0.0.5 not responding, still trying",
    "nfs_server_ok": "2026-12-05T03:31:00+0000 gpu-017 kernel: nfs: server 10.0.0.5 OK",
    "lustre_connection_lost": "[87904.056939] Lustre: DIAS-OST0001-osc-ffff9d6153c91000: Connection to DIAS-OST0001 (at "
                              "192.168.14.178@tcp) was lost; in progress operations using this service will wait for "
                              "recovery to complete",
    "lustre_request_timeout": "[Wed Jan 15 17:22:28 2025] Lustre: 128727:0:(client.c:2310:ptlrpc_expire_one_request()) "
                              "@@@ Request sent has timed out for slow reply: [sent 1736957925/real 1736957925]  "
                              "req@000000005ab3b574 x1820705849269056/t0(0) o4->capstor-OST003a-osc-ffff3000ef06c000@"
                              "172.28.1.43@tcp:6/4 lens 488/448 e 2 to 1 dl 1736958128 ref 1 fl Rpc:XQr/0/ffffffff rc 0/-1",
    "ceph_mon_session_lost": "Apr 18 12:23:38 client1 kernel: libceph: mon0 (2)192.168.1.81:3300 session lost, hunting for "
                             "new mon",
    "cifs_not_responding": "2026-12-05T03:26:00+0000 gpu-017 kernel: CIFS: VFS: \\\\fs01.example.com has not responded in "
                           "180 seconds. Reconnecting...",
    "nvme_fabrics_connect": "2026-12-05T03:27:00+0000 gpu-017 kernel: nvme nvme1: failed to connect socket: -110",
    "ceph_osd_connection": "2026-12-05T03:27:01+0000 gpu-017 kernel: libceph: osd3 (1)10.0.0.3:6801 socket closed "
                           "(con state OPEN)",
    "iscsi_conn_error": "2026-12-05T03:27:02+0000 gpu-017 kernel:  connection1:0: detected conn error (1020)",
    "nbd_timeout": "2026-12-05T03:27:03+0000 gpu-017 kernel: block nbd0: Connection timed out",
}
DEVICES = {"hung_task": "kworker/u386:2", "soft_lockup": "37", "hard_lockup": "5", "rcu_stall": "rcu_sched",
           "mlx5_health": "0000:0c:00.0", "nvme_timeout": "nvme0", "nvme_down": "nvme1", "ext4_error": "nvme0n1p1",
           "fs_remount_ro": "nvme0n1p1", "xfs_shutdown": "dm-0", "nvlink_training": None, "mce": "12", "edac_ue": "MC1",
           "edac_ce": "MC0", "oom_kill": "python3", "nfs_not_responding": "10.0.0.5", "nfs_server_ok": "10.0.0.5",
           "lustre_connection_lost": "192.168.14.178@tcp", "lustre_request_timeout": "172.28.1.43@tcp",
           "ceph_mon_session_lost": "192.168.1.81:3300", "cifs_not_responding": "fs01.example.com",
           "nvme_fabrics_connect": "nvme1", "ceph_osd_connection": "osd3", "iscsi_conn_error": "connection1:0",
           "nbd_timeout": "nbd0"}
CLEAN = ["2026-12-05T03:14:07+0000 gpu-017 kernel: nvme nvme0: 64/0/0 default/read/poll queues",
         "2026-12-05T03:14:08+0000 gpu-017 kernel: EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode.",
         "2026-12-05T03:14:09+0000 gpu-017 kernel: mlx5_core 0000:0c:00.0: Port module event: module 0, Cable plugged",
         "2026-12-05T03:14:10+0000 gpu-017 kernel: EDAC MC0: Giving out device to module skx_edac controller Skylake"]


def _matched(lines: list[str]) -> dict:
    return hkl.match_lines(lines, hkl.compile_patterns(hj.probe_patterns()))


def test_every_catalogue_kind_has_a_line_and_an_action():
    """Every catalogue row is matched by its line here, names the device the line names, and has an actions.yaml causes
    row of its own class (the action table and the catalogue agree)."""
    rows = {k.id: k for k in hj.load_catalog()}
    assert set(rows) == set(LINES)
    table = actions.load_table()["causes"]["rows"]
    for kid, line in LINES.items():
        doc = _matched([line])
        assert [(m["id"], m["device"]) for m in doc["matches"]] == [(kid, DEVICES[kid])], (kid, doc["matches"])
        assert table[rows[kid].kind]["class"] == rows[kid].cls
        assert rows[kid].source and re.match(r"\d{4}-\d{2}-\d{2}", rows[kid].date)


def test_clean_lines_match_nothing():
    doc = _matched(CLEAN)
    assert doc["lines_scanned"] == 4 and doc["matches"] == []
    found = hj.kernel_findings(doc)
    assert found == [] and hj.none_found("kernel_states", found).limit.bound == 0


@pytest.mark.parametrize("kid,cls,action", [("soft_lockup", "hardware", "reboot"), ("hung_task", "hardware", "reboot"),
                                            ("mlx5_health", "hardware", "reboot"), ("nvme_down", "hardware", "drain-rma"),
                                            ("ext4_error", "hardware", "drain-rma"), ("mce", "hardware", "drain-rma"),
                                            ("nvlink_training", "hardware", "drain-rma"),
                                            ("edac_ue", "hardware", "drain-rma")])
def test_a_failing_kind_names_line_time_device_and_action(kid, cls, action):
    (f,) = hj.kernel_findings(_matched([LINES[kid], LINES[kid]]))
    assert f.failure and f.cause.cls == cls and f.extra["lines"] == 2
    assert LINES[kid].split("kernel: ")[-1][:30] in f.failure or LINES[kid][-30:] in f.failure
    assert f.extra["first_time"] is not None and (DEVICES[kid] is None or DEVICES[kid] in f.failure)
    act = actions.for_finding("test_kernel_log", f.check, cause=f.cause)
    assert (act.action, act.cause) == (action, cls)


def test_oom_kill_is_an_error_of_capacity_not_a_hardware_fault():
    (f,) = hj.kernel_findings(_matched([LINES["oom_kill"]]))
    assert f.failure is None and f.error and "python3" in f.error
    act = actions.for_finding("test_kernel_log", f.check, cause=f.cause)
    assert (act.action, act.cause) == ("free-space", "capacity")


def test_edac_ce_lines_sum_their_counts_with_a_rate():
    lines = [LINES["edac_ce"], LINES["edac_ce"].replace("03:23:00", "03:53:00").replace(": 3 CE", ": 1 CE")]
    (f,) = hj.kernel_findings(_matched(lines), window_s=7200.0)
    assert f.value == 4 and f.extra["per_hour"] == 2.0 and f.cause.kind == "host_memory_ce"
    assert "4 corrected error(s) during the run (2/hour over 2.00 h)" in f.failure


def test_window_cut_drops_lines_before_the_run():
    doc = _matched([LINES["soft_lockup"]])
    assert hj.kernel_findings(doc, cut=doc["matches"][0]["epoch"] + 1) == []
    assert len(hj.kernel_findings(doc, cut=doc["matches"][0]["epoch"])) == 1


def _mem(gib, ue=0, ce=5, dimm_ue=0):
    return {"mem_total_kib": int(gib * 2**20), "mem_total_gib": gib, "read_at": 1000.0,
            "edac": {"present": True, "ce_total": ce, "ue_total": ue, "controllers": [
                {"name": "mc0", "ce_count": ce, "ue_count": ue, "seconds_since_reset": 36000,
                 "dimms": [{"name": "dimm0", "label": "CPU_SrcID#0_MC#0_Chan#0_DIMM#0", "ce_count": ce,
                            "ue_count": dimm_ue}]}]}}


def test_memory_within_the_reserved_share_passes_a_short_one_is_hardware_only_with_evidence():
    ok = hj.memory_findings(_mem(2015.6), 2048)  # a 2 TiB DGX-class node: MemTotal 1.6 % under installed
    assert ok[0].failure is None and ok[0].limit.direction == "min" and ok[0].limit.bound == round(2048 * 0.97, 3)
    assert [f for f in ok if f.failure] == []
    short = hj.memory_findings(_mem(1952.0), 2048)[0]  # 64 GiB short, nothing of the host's memory says why
    assert short.cause.kind == "host_memory_unverified" and short.cause.cls == "unverified" and "1952 GiB" in short.failure
    assert short.cause.evidence["dimms_gib"] is None
    mapped = _mem(1952.0)  # EDAC lists 32 DIMMs of 64 GiB (2048 GiB) while the kernel has 1952: one mapped out
    mapped["edac"]["controllers"][0]["dimms"] = [{"name": f"dimm{i}", "size_mb": 65536, "ce_count": 0, "ue_count": 0}
                                                 for i in range(32)]
    hw = hj.memory_findings(mapped, 2048)[0]
    assert (hw.cause.cls, hw.cause.kind) == ("hardware", "host_memory_short") and hw.cause.evidence["dimms_gib"] == 2048
    assert actions.for_finding("test_host_ram", hw.check, cause=hw.cause).action == "drain-rma"
    typo = _mem(1952.0)  # the DIMMs EDAC lists sum to what the kernel has: host_memory_gb is what is wrong, maybe
    typo["edac"]["controllers"][0]["dimms"] = [{"name": f"dimm{i}", "size_mb": 65536, "ce_count": 0, "ue_count": 0}
                                               for i in range(31)]
    un = hj.memory_findings(typo, 2048)[0]
    assert un.cause.cls == "unverified" and actions.for_finding("test_host_ram", un.check, cause=un.cause).action == "rerun"
    ue = hj.memory_findings(_mem(1952.0, ue=2, dimm_ue=2), 2048)[0]
    assert (ue.cause.cls, ue.cause.kind) == ("hardware", "host_memory_short")
    over = hj.memory_findings(_mem(1000.0), 512)[0]
    assert over.cause.cls == "configuration"
    assert hj.memory_findings(_mem(100.0), None)[0].limit is None  # not declared: recorded, not judged


def test_uncorrectable_edac_fails_and_ce_growth_fails_with_its_rate():
    ue = [f for f in hj.memory_findings(_mem(100.0, ue=1, dimm_ue=1), None) if f.failure]
    assert len(ue) == 1 and ue[0].cause.kind == "host_memory_ue" and "dimm0" in ue[0].failure
    start, end = _mem(100.0, ce=5), _mem(100.0, ce=8)
    end["read_at"] = start["read_at"] + 1800
    grew = [f for f in hj.edac_growth(start, end) if f.failure]
    assert len(grew) == 1 and grew[0].cause.kind == "host_memory_ce" and "3 correctable" in grew[0].failure
    assert grew[0].extra["per_hour"] == 6.0 and "dimm0" in grew[0].failure
    assert [f for f in hj.edac_growth(start, _mem(100.0, ce=5)) if f.failure] == []
    assert grew[0].extra["window"] == "host layer only" and "window: host layer only" in grew[0].failure


def test_edac_growth_names_its_window():
    """From the warm-up's run-start reading the window is "run" (extra, message and evidence); another word is refused."""
    start, end = _mem(100.0, ce=0), _mem(100.0, ce=2)
    end["read_at"] = start["read_at"] + 7200
    run = [f for f in hj.edac_growth(start, end, "run") if f.failure][0]
    assert run.extra["window"] == "run" and run.cause.evidence["window"] == "run" and "window: run" in run.failure
    assert run.extra["per_hour"] == 1.0 and run.extra["interval_s"] == 7200
    with pytest.raises(ValueError, match="window 'gpu' is not one of"):
        hj.edac_growth(start, end, "gpu")


def _fs(reason, names=("nvme0n1p1", "nvme0n1", "nvme0")):
    return {"paths": [{"path": "/scratch", "role": "storage", "ok": False, "error": f"/scratch: {reason}",
                       "failure": {"reason": reason, "path": "/scratch", "errno": "EROFS", "seen_by": "statvfs ST_RDONLY",
                                   "free_bytes": 0, "need_bytes": 4096},
                       "block_names": list(names), "device": "259:1"}]}


def test_read_only_path_is_configuration_unless_the_kernel_logged_its_device():
    (ro,) = hj.filesystem_findings(_fs("read_only"), {})
    assert (ro.cause.cls, ro.cause.kind) == ("configuration", "read_only")
    assert actions.for_finding("test_filesystems", ro.check, cause=ro.cause).action == "fix-config"
    (full,) = hj.filesystem_findings(_fs("free_space"), {})
    assert full.cause.cls == "capacity"
    kdoc = _matched([LINES["nvme_timeout"], LINES["xfs_shutdown"]])
    logged = hj.fs_error_devices(kdoc)
    assert set(logged) == {"nvme0", "dm-0"}
    (hw,) = hj.filesystem_findings(_fs("read_only"), logged)
    assert (hw.cause.cls, hw.cause.kind) == ("hardware", "kernel_fs_error") and "nvme0: I/O 847" in hw.failure
    assert actions.for_finding("test_filesystems", hw.check, cause=hw.cause).action == "drain-rma"
    (other,) = hj.filesystem_findings(_fs("read_only", ("sda1", "sda")), logged)
    assert other.cause.cls == "configuration"  # an error of another device proves nothing about this one


def test_nvme_state_and_each_critical_warning_bit_with_its_meaning():
    doc = {"controllers": [
        {"name": "nvme0", "model": "SAMSUNG MZWLR7T6HALA", "serial": "S6EXNA0T", "state": "live",
         "smart": {"critical_warning": 0x0C, "media_errors": 0, "percent_used": 3}},
        {"name": "nvme1", "model": "KCD6XLUL3T84", "serial": "X1", "state": "dead", "smart": None, "smart_error": "x"},
        {"name": "nvme2", "model": "M", "serial": "W", "state": "live",
         "smart": {"critical_warning": 0, "media_errors": 0, "percent_used": 140}}]}
    found = hj.nvme_findings(doc)
    fails = {f.check: f for f in found if f.failure}
    assert set(fails) == {"nvme_critical_warning nvme0", "nvme_state nvme1"}
    warn = fails["nvme_critical_warning nvme0"].failure
    assert "0x0c" in warn and "bit 2: NVM subsystem reliability has been degraded" in warn
    assert "bit 3: all of the media has been placed in read only mode" in warn and "bit 0" not in warn
    assert fails["nvme_state nvme1"].cause.kind == "nvme_controller_state"
    hot = hj.nvme_findings({"controllers": [{"name": "nvme3", "model": "M", "serial": "H", "state": "live",
                                             "smart": {"critical_warning": 0x02, "media_errors": 0, "percent_used": 1}}]})
    (warm,) = [f for f in hot if f.failure]
    assert warm.cause.kind == "nvme_over_temperature" and "airflow" in actions.for_cause(warm.cause).reason
    # wear past 100 % alone: no failure
    assert all(f.failure is None for f in found if f.check.endswith("nvme2"))


@pytest.mark.parametrize("state,transport,cls,action", [
    ("dead", "pcie", "hardware", "drain-rma"),              # a local drive that left: hands needed
    ("deleting", None, "hardware", "drain-rma"),            # removed after a failed reset
    ("resetting", "pcie", "unverified", "rerun"),           # one reading in the middle of a reset proves nothing
    ("connecting", "pcie", "unverified", "rerun"),
    ("connecting", "tcp", "connectivity", "check-network"),  # NVMe over TCP reconnecting: the target or the path
    ("dead", "rdma", "connectivity", "check-network"),
    ("resetting", "fc", "connectivity", "check-network"),
])
def test_an_nvme_controller_state_is_judged_by_its_transport(state, transport, cls, action):
    doc = {"controllers": [{"name": "nvme1", "model": "M", "serial": "S", "state": state, "transport": transport,
                            "smart": None, "smart_error": "not readable"}]}
    (f,) = [f for f in hj.nvme_findings(doc) if f.failure]
    assert f.cause.cls == cls and f"controller state {state}" in f.failure
    act = actions.for_cause(f.cause)
    assert (act.action, act.cause) == (action, cls)
    if cls == "connectivity":
        assert f"transport {transport}" in f.failure and "nvme1" in act.reason


def test_the_probes_folder_is_checked_under_one_name_from_run_to_run():
    """The probes' folder is a fresh $TMPDIR/gpuaccept.<12 hex> each run: its check is named by its role (its
    history lines up), its path kept in the figure; a storage folder keeps its path in its name."""
    doc = {"paths": [{"path": "/tmp/gpuaccept.c20d4bfaad9c", "role": "probe", "ok": True},
                     {"path": "/scratch", "role": "storage", "ok": True}]}
    probe, storage = hj.filesystem_findings(doc, {})
    assert probe.check == "writable probes' folder" and probe.extra["folder"]["path"] == "/tmp/gpuaccept.c20d4bfaad9c"
    assert storage.check == "writable /scratch"
    # the history's key of the figure is the same whatever the folder's name that run
    doc2 = {"paths": [{"path": "/tmp/gpuaccept.1eafa9e368c8", "role": "probe", "ok": True, "fstype": "tmpfs"}]}
    (probe2,) = hj.filesystem_findings(doc2, {})
    keys = {check_of({"check": f.check, "extra": f.extra}) for f in (probe, probe2)}
    assert keys == {"writable probes' folder[role=probe]"}, keys
