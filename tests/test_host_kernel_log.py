"""The host_kernel_log probe's call traces and the network-filesystem judgment (gpuaccept/judging/host.py netfs_findings):
kernel logs written to real files in tmp and read by the real probe (``sources``, as the inventory's kernel_log_paths
are), judged by the real judge and action table. A hung task waiting in a network filesystem's frames, or a server line
of one, is connectivity (check-network), never a reboot of this node; one waiting on a local device stays hardware."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaccept.judging import actions
from gpuaccept.judging import host as hj
from probe_helpers import load_probe, run_probe

hkl = load_probe("host_kernel_log")

TS = "2026-12-05T03:14:07+0000 gpu-017 kernel: "  # journalctl -k -o short-iso
HEAD = ["      Not tainted 5.15.0-91-generic #101-Ubuntu",
        "\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message."]

# the frames of hung NFS clients as linux-nfs reports print them (rpc_wait_bit_killable, __rpc_execute, nfs4_*)
NFS = [f"INFO: task python3:88412 blocked for more than 122 seconds.", *HEAD,
       "task:python3         state:D stack:    0 pid:88412 ppid:  1234 flags:0x00004002",
       "Call Trace:", " <TASK>", " ? __pfx_rpc_wait_bit_killable+0x10/0x10 [sunrpc]", " __schedule+0x23d/0x670",
       " schedule+0x4f/0xc0", " rpc_wait_bit_killable+0x25/0xb0 [sunrpc]", " __wait_on_bit+0x33/0xa0",
       " out_of_line_wait_on_bit+0x8d/0xb0", " __rpc_execute+0xd4/0x290 [sunrpc]", " rpc_execute+0x5e/0x80 [sunrpc]",
       " nfs4_call_sync_sequence+0x74/0xb0 [nfsv4]", " nfs4_proc_getattr+0x7a/0x130 [nfsv4]",
       " __nfs_revalidate_inode+0xd4/0x2c0 [nfs]", " vfs_statx+0xa0/0x180", " __x64_sys_newfstatat+0x55/0xa0",
       " do_syscall_64+0x58/0xc0", " entry_SYSCALL_64_after_hwframe+0x64/0xce", "RIP: 0033:0x7f0df5ec6707",
       "RSP: 002b:00007ffd1c6a5f08 EFLAGS: 00000246 ORIG_RAX: 0000000000000106", " </TASK>"]
# ext4's journal thread waiting on its NVMe drive
EXT4 = ["INFO: task jbd2/nvme0n1p1-8:1123 blocked for more than 122 seconds.", *HEAD,
        "task:jbd2/nvme0n1p1- state:D stack:    0 pid: 1123 ppid:     2 flags:0x00004000", "Call Trace:", " <TASK>",
        " __schedule+0x24e/0x590", " schedule+0x69/0x110", " io_schedule+0x46/0x80", " bit_wait_io+0x11/0x70",
        " __wait_on_bit+0x31/0xa0", " out_of_line_wait_on_bit+0x94/0xb0", " ? var_wake_function+0x30/0x30",
        " __wait_on_buffer+0x34/0x40", " jbd2_journal_commit_transaction+0x10f8/0x1950", " kjournald2+0xa9/0x280",
        " kthread+0x127/0x150", " ret_from_fork+0x1f/0x30", " </TASK>"]
NVME = ["INFO: task python3:4242 blocked for more than 245 seconds.", *HEAD, "Call Trace:",
        " __schedule+0x2cd/0x890", " schedule+0x69/0x110", " io_schedule+0x46/0x80",
        " blk_mq_get_tag+0x11e/0x2a0", " __blk_mq_alloc_requests+0x1a4/0x2e0", " blk_mq_submit_bio+0x1a3/0x640",
        " submit_bio_noacct_nocheck+0x2c5/0x390", " ext4_io_submit+0x24/0x40 [ext4]", " ext4_writepages+0x4e2/0xe70 [ext4]"]
NVIDIA = ["INFO: task nvidia-smi:5151 blocked for more than 122 seconds.", *HEAD, "Call Trace:", " <TASK>",
          " __schedule+0x2cd/0x890", " schedule+0x69/0x110", " schedule_timeout+0x10e/0x120", " __down_common+0x119/0x220",
          " down+0x47/0x60", " os_acquire_mutex+0x2e/0x40 [nvidia]", " _nv038505rm+0x18/0x40 [nvidia]", " </TASK>"]
# the kernel CephFS client's hung workqueue after its monitor session was lost, quoted from the ceph-devel patch of
# https://tracker.ceph.com/issues/45609 (2020-05, kmsg priorities and plain dmesg times as posted; first task)
CEPH = """<6>[15981.740583] libceph: mon2 (1)10.72.36.245:40083 session lost, hunting for new mon
<3>[16097.960293] INFO: task kworker/18:1:32111 blocked for more than 122 seconds.
<3>[16097.960860]       Tainted: G            E     5.7.0-rc5+ #80
<3>[16097.961332] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.
<6>[16097.961868] kworker/18:1    D    0 32111      2 0x80004080
<6>[16097.962151] Workqueue: ceph-msgr ceph_con_workfn [libceph]
<4>[16097.962188] Call Trace:
<4>[16097.962353]  ? __schedule+0x276/0x6e0
<4>[16097.962359]  ? schedule+0x40/0xb0
<4>[16097.962364]  ? schedule_preempt_disabled+0xa/0x10
<4>[16097.962368]  ? __mutex_lock.isra.8+0x2b5/0x4a0
<4>[16097.962460]  ? kick_requests+0x21/0x100 [ceph]
<4>[16097.962485]  ? ceph_mdsc_handle_mdsmap+0x19c/0x5f0 [ceph]
<4>[16097.962503]  ? extra_mon_dispatch+0x34/0x40 [ceph]
<4>[16097.962580]  ? dispatch+0x77/0x930 [libceph]
<4>[16097.962602]  ? try_read+0x78b/0x11e0 [libceph]
<4>[16097.962654]  ? ceph_con_workfn+0x130/0x5e0 [libceph]
<4>[16097.962713]  ? process_one_work+0x1ad/0x370
<4>[16097.962717]  ? worker_thread+0x30/0x390
<4>[16097.962737]  ? kthread+0x112/0x130
<4>[16097.962747]  ? ret_from_fork+0x35/0x40""".splitlines()
AFTER = "nvme nvme0: 64/0/0 default/read/poll queues"  # an ordinary line: ends a trace, matches nothing


def _probe(tmp_path: Path, lines: list[str], prefix: str = TS) -> dict:
    """The real probe over a real log file holding ``lines`` (each given ``prefix``, the journalctl form)."""
    log = tmp_path / "kern.log"
    log.write_text("".join(f"{prefix}{ln}\n" for ln in lines))
    rc, doc, err = run_probe("host_kernel_log", {"patterns": hj.probe_patterns(), "sources": [str(log)]})
    assert rc == 0, (doc, err[-2000:])
    return doc


def _act(f):
    return actions.for_finding("test_kernel_log", f.check, cause=f.cause)


def test_nfs_hung_task_with_its_trace_is_connectivity_not_reboot(tmp_path):
    doc = _probe(tmp_path, NFS + [AFTER])
    (m,) = doc["matches"]
    tr = m["trace"]
    assert tr["waits_on"] == {"kind": "nfs", "where": "network", "fn": "rpc_wait_bit_killable"}  # reliable before "? "
    assert tr["frames"][3] == {"fn": "rpc_wait_bit_killable", "module": "sunrpc", "guess": False, "kind": "nfs"}
    assert tr["lines"] == len(NFS) - 1 and not tr["truncated"] and doc["waits_on"] == {"hung_task": {"nfs": 1}}
    (f,) = hj.kernel_findings(doc)
    assert f.check == "kernel netfs_stall nfs" and f.failure is None and "not this node's hardware" in f.error
    assert (f.cause.cls, f.cause.kind) == ("connectivity", "netfs_hung_task")
    assert f.extra["tasks"] == ["python3"] and f.extra["waiting_in"] == "rpc_wait_bit_killable" and f.extra["server"] is None
    act = _act(f)
    assert (act.action, act.cause) == ("check-network", "connectivity") and "nfs" in act.reason
    assert act.action not in ("reboot", "drain-rma")


def test_nfs_server_line_names_the_server_and_joins_the_hung_task(tmp_path):
    lines = ["nfs: server 10.0.0.5 not responding, still trying", *NFS, "nfs: server 10.0.0.5 OK",
             "nfs: server nas02.example.com not responding, timed out"]
    (f,) = hj.kernel_findings(_probe(tmp_path, lines))
    assert (f.cause.cls, f.cause.kind) == ("connectivity", "netfs_server_stalled")
    assert f.cause.evidence["server"] == "10.0.0.5" and f.cause.evidence["servers"] == ["10.0.0.5", "nas02.example.com"]
    assert f.extra["server_lines"] == 3 and f.extra["hung_tasks"] == 1 and f.value == 4
    assert "server 10.0.0.5, nas02.example.com" in f.error
    act = _act(f)
    assert act.action == "check-network" and "10.0.0.5" in act.reason and "rpcinfo -p 10.0.0.5" in act.command
    # the server line alone, without any hung task
    (alone,) = hj.kernel_findings(_probe(tmp_path, ["nfs: server 10.0.0.5 not responding, still trying"]))
    assert alone.cause.kind == "netfs_server_stalled" and alone.extra["hung_tasks"] == 0 and "10.0.0.5" in alone.error


@pytest.mark.parametrize("trace,kind,task", [(EXT4, "ext4", "jbd2/nvme0n1p1-8"), (NVME, "block", "python3"),
                                             (NVIDIA, "nvidia", "nvidia-smi")])
def test_hung_task_on_a_local_device_stays_hardware_reboot(tmp_path, trace, kind, task):
    """ext4's journal, the block layer under an NVMe drive, the NVIDIA driver: this node's own parts. Even with an NFS
    server line in the window the local hung task stays hardware (its own finding, beside the NFS one)."""
    doc = _probe(tmp_path, trace + [AFTER, "nfs: server 10.0.0.5 not responding, still trying"])
    found = {f.check: f for f in hj.kernel_findings(doc)}
    f = found[f"kernel hung_task {task}"]
    assert f.failure and (f.cause.cls, f.cause.kind) == ("hardware", "kernel_hung_task")
    assert f.extra["waits_on"]["kind"] == kind and f.extra["waits_on"]["where"] == "local"
    assert (_act(f).action, _act(f).cause) == ("reboot", "hardware")
    assert found["kernel netfs_stall nfs"].cause.cls == "connectivity"


@pytest.mark.parametrize("follow", [[AFTER], [], ["Call Trace:", " __schedule+0x2cd/0x890", " schedule+0x69/0x110",
                                                  " __mutex_lock.constprop.0+0x4a8/0x8b0", AFTER]])
def test_hung_task_without_a_trace_or_a_named_frame_is_judged_as_before(tmp_path, follow):
    """No trace kept (the next line is no trace's, or the log ends), or one whose frames the table does not name (a
    mutex): hardware, reboot, as the catalogue's hung_task row says."""
    doc = _probe(tmp_path, ["INFO: task kworker/u386:2:1734 blocked for more than 122 seconds."] + follow)
    (m,) = doc["matches"]
    assert m["trace"]["waits_on"] is None
    assert doc["waits_on"]["hung_task"] == {("unclassified" if len(follow) > 1 else "no_trace"): 1}
    (f,) = hj.kernel_findings(doc)
    assert f.check == "kernel hung_task kworker/u386:2" and f.cause.cls == "hardware" and "waits_on" not in f.extra
    assert _act(f).action == "reboot"


def test_cephfs_hung_workqueue_of_a_public_report_is_connectivity_naming_the_monitor(tmp_path):
    """Every frame of the report is a "? " guess: the innermost classified one ([ceph]) names the filesystem."""
    doc = _probe(tmp_path, CEPH, prefix="")
    hung = next(m for m in doc["matches"] if m["id"] == "hung_task")
    assert hung["device"] == "kworker/18:1" and hung["trace"]["waits_on"]["fn"] == "kick_requests"
    assert hung["trace"]["kinds"] == ["cephfs"] and hung["trace"]["frames_seen"] == 14
    (f,) = hj.kernel_findings(doc)
    assert f.check == "kernel netfs_stall cephfs" and f.cause.kind == "netfs_server_stalled"
    assert f.cause.evidence["server"] == "10.72.36.245:40083" and f.extra["tasks"] == ["kworker/18:1"]


def test_a_trace_is_read_up_to_its_bound_and_ends_at_the_next_catalogue_line(tmp_path):
    endless = ["INFO: task python3:1 blocked for more than 122 seconds.", "Call Trace:"] + \
        [f" nfs_frame{i}+0x10/0x20 [nfs]" for i in range(hkl.TRACE_LINES + 30)]
    second = ["INFO: task python3:2 blocked for more than 122 seconds.", "Call Trace:", " ext4_sync_file+0x1/0x2",
              "INFO: task python3:3 blocked for more than 122 seconds.", " nvme_poll+0x1/0x2"]
    doc = _probe(tmp_path, endless + second)
    first, two, three = doc["matches"][0], *[m for m in doc["matches"] if m["device"] == "python3"][1:]
    assert first["trace"]["truncated"] and first["trace"]["lines"] == hkl.TRACE_LINES
    assert len(first["trace"]["frames"]) == hkl.TRACE_FRAMES and first["trace"]["frames_seen"] == hkl.TRACE_LINES - 1
    assert two["trace"]["waits_on"]["kind"] == "ext4" and two["trace"]["lines"] == 2  # the next INFO line ended it
    assert three["trace"]["waits_on"]["kind"] == "nvme"
    assert doc["counts"]["hung_task"] == 3 and doc["waits_on"]["hung_task"] == {"nfs": 1, "ext4": 1, "nvme": 1}


def test_frame_table_rules():
    table = hkl.compile_patterns(hj.probe_patterns())[0].trace
    assert hkl.classify_frame("ll_rw_block", None, table) == ("block", "local")  # the longest prefix wins over ll_
    assert hkl.classify_frame("ll_file_read_iter", None, table) == ("lustre", "network")
    assert hkl.classify_frame("cxiWaitEventWait", "mmfslinux", table) == ("gpfs", "network")
    assert hkl.classify_frame("__pfx_nfs_getattr", None, table) == ("nfs", "network")
    assert hkl.classify_frame("request_wait_answer", "fuse", table) == ("fuse", "network")
    assert hkl.classify_frame("__schedule", None, table) is None
    assert hkl.trace_line("gpu-017 kernel: [812345.123456]  [<ffffffffa03d1e0e>] rpc_wait_bit_killable+0x1e/0xa0 "
                          "[sunrpc]") == (True, {"fn": "rpc_wait_bit_killable", "module": "sunrpc", "guess": False})
    assert hkl.trace_line("gpu-017 kernel: nvme nvme0: 64/0/0 default/read/poll queues") == (False, None)
    assert hkl.trace_line("ffff880001d27b88 0000000000000046 ffff88008a8184c0") == (True, None)  # old stack words
    assert hkl.trace_line("0" * 4000 + "x") == (False, None)  # a long hex run: linear, no backtracking storm
    with pytest.raises(hkl.ProbeFailed, match="pattern x: trace row"):
        hkl.compile_patterns([{"id": "x", "regex": "x", "trace": [{"fs": "nfs"}]}])


def test_a_million_line_log_keeps_a_bounded_document(tmp_path):
    """1e6 lines of dmesg (a storm of NFS hung tasks, each with a 49-frame trace, and ordinary lines) through the
    probe: every line counted, the kept matches and each trace within their bounds, the document small."""
    block = ["[ 1843.308145] INFO: task python3:88412 blocked for more than 122 seconds."] + \
        ["[ 1843.308146]  nfs_getattr+0x5f/0x110 [nfs]"] * 49 + [f"[ 1843.308147] {AFTER}"] * 50
    log = tmp_path / "kern.log"
    with log.open("w") as f:
        for _ in range(10_000):
            f.write("\n".join(block) + "\n")
    rc, doc, err = run_probe("host_kernel_log", {"patterns": hj.probe_patterns(), "sources": [str(log)]})
    assert rc == 0, err[-2000:]
    assert doc["lines_scanned"] == 1_000_000 and doc["counts"] == {"hung_task": 10_000}
    assert doc["waits_on"] == {"hung_task": {"nfs": 10_000}} and len(doc["matches"]) == doc["kept_per_id"] == 20
    assert all(len(m["trace"]["frames"]) <= hkl.TRACE_FRAMES and m["trace"]["lines"] <= hkl.TRACE_LINES
               for m in doc["matches"])
    assert len(json.dumps(doc)) < 200_000
    (f,) = hj.kernel_findings(doc)
    assert f.cause.kind == "netfs_hung_task" and f.extra["hung_tasks"] == 20


# NVMe over TCP: the target unreachable, then a task hung in nvme_tcp under XFS (the operator's trial)
NVME_TCP = ["nvme nvme1: failed to connect socket: -110", "INFO: task python3:4242 blocked for more than 122 seconds.",
            *HEAD, "Call Trace:", " <TASK>", " __schedule+0x2cd/0x890", " schedule+0x69/0x110",
            " nvme_tcp_queue_rq+0x1a4/0x2e0 [nvme_tcp]", " blk_mq_dispatch_rq_list+0x12e/0x7f0",
            " xfs_buf_submit+0x6b/0x1e0 [xfs]", " </TASK>"]
# Ceph RBD: an OSD's socket closed, then a task hung in the block layer under the rbd driver
RBD = ["libceph: osd3 (1)10.0.0.3:6801 socket closed (con state OPEN)",
       "INFO: task python3:4243 blocked for more than 122 seconds.", *HEAD, "Call Trace:", " <TASK>",
       " __schedule+0x2cd/0x890", " schedule+0x69/0x110", " io_schedule+0x46/0x80", " blk_mq_get_tag+0x11e/0x2a0",
       " rbd_queue_workfn+0x2a1/0x480 [rbd]", " ext4_io_submit+0x24/0x40 [ext4]", " </TASK>"]


@pytest.mark.parametrize("lines,fs,server", [(NVME_TCP, "nvme_fabrics", "nvme1"), (RBD, "rbd", "osd3")])
def test_a_hung_task_on_network_block_storage_is_connectivity_not_reboot(tmp_path, lines, fs, server):
    doc = _probe(tmp_path, lines + [AFTER])
    (hung,) = [m for m in doc["matches"] if m["id"] == "hung_task"]
    assert hung["trace"]["waits_on"]["kind"] == fs and hung["trace"]["waits_on"]["where"] == "network"
    found = hj.kernel_findings(doc)
    (f,) = found
    assert f.check == f"kernel netblock_stall {fs}" and f.failure is None and f.error
    assert (f.cause.cls, f.cause.kind) == ("connectivity", "netblock_server_stalled")
    assert f.extra["server"] == server and f.extra["hung_tasks"] == 1 and f.extra["tasks"] == ["python3"]
    act = _act(f)
    assert act.action == "check-network" and act.action not in ("reboot", "drain-rma")
    alone = hj.kernel_findings(_probe(tmp_path, lines[1:] + [AFTER]))  # the hung task with no server line
    assert [(x.check, x.cause.kind) for x in alone] == [(f"kernel netblock_stall {fs}", "netblock_hung_task")]
    assert _act(alone[0]).action == "check-network"


def test_the_most_specific_frame_wins_and_the_block_layer_reads_as_the_network_driver():
    table = hkl.compile_patterns([p for p in hj.probe_patterns() if p["id"] == "hung_task"])[0].trace
    assert hkl.classify_frame("nvme_tcp_queue_rq", "nvme_tcp", table) == ("nvme_fabrics", "network")
    assert hkl.classify_frame("nvme_rdma_queue_rq", None, table) == ("nvme_fabrics", "network")
    assert hkl.classify_frame("nvme_fc_start_fcp_op", None, table) == ("nvme_fabrics", "network")
    assert hkl.classify_frame("nvme_queue_rq", "nvme", table) == ("nvme", "local")
    assert hkl.classify_frame("iscsi_queuecommand", "libiscsi", table) == ("iscsi", "network")
    assert hkl.classify_frame("drbd_make_request", "drbd", table) == ("drbd", "network")
    assert hkl.classify_frame("nbd_queue_rq", None, table) == ("nbd", "network")
    assert hkl.classify_frame("multipath_clone_and_map", "dm_multipath", table) == ("multipath", "local")
    # the block layer over a local drive stays local: the NVME trace (blk_mq_get_tag under ext4) is hardware
    for server in ("connection1:0: detected conn error (1020)", "block nbd0: Connection timed out", "libceph: osd3 down"):
        (m,) = hkl.match_lines([TS + server], hkl.compile_patterns(hj.probe_patterns()))["matches"]
        assert hj.load_catalog()[[k.id for k in hj.load_catalog()].index(m["id"])].cls == "connectivity"


def test_multipath_over_iscsi_reads_as_iscsi_and_over_nothing_stays_local(tmp_path):
    mp = ["INFO: task fio:77 blocked for more than 122 seconds.", *HEAD, "Call Trace:", " __schedule+0x2cd/0x890",
          " blk_mq_get_tag+0x11e/0x2a0", " multipath_clone_and_map+0x5a/0x3c0 [dm_multipath]",
          " ? iscsi_queuecommand+0x1e/0x5d0 [libiscsi]", " submit_bio_noacct+0x2c/0x90"]
    (m,) = _probe(tmp_path, mp + [AFTER])["matches"]
    assert m["trace"]["waits_on"]["kind"] == "iscsi"
    plain = [x for x in mp if "iscsi" not in x]
    (m,) = _probe(tmp_path, plain + [AFTER])["matches"]
    assert m["trace"]["waits_on"]["kind"] == "block"
    (f,) = hj.kernel_findings({"matches": [m]})
    assert f.cause.cls == "hardware"


def test_a_line_dated_after_the_log_was_read_is_not_judged_by_its_row(tmp_path):
    """A soft lockup stamped 5 h after the log was read (a log whose writer's clock is ahead of the node's): not a
    reboot of this node but one unverified finding (rerun, check the log's source); the same line dated before the
    read is judged by its row; a saved log replayed (no bound) is judged as before."""
    import time as _time
    now = _time.time()
    stamp = lambda t: _time.strftime("%Y-%m-%dT%H:%M:%S+0000 gpu-017 kernel: ", _time.gmtime(t))  # noqa: E731
    line = "watchdog: BUG: soft lockup - CPU#12 stuck for 23s! [python3:4242]"
    doc = _probe(tmp_path, [line], prefix=stamp(now + 5 * 3600))
    (f,) = hj.kernel_findings(doc, cut=now - 60, until=now + hj.FUTURE_SLACK_S)
    assert f.check == "kernel_log_future" and (f.cause.cls, f.cause.kind) == ("unverified", "kernel_log_future")
    assert "1 line(s) dated after the log was read" in f.failure and "soft lockup" in f.failure
    act = _act(f)
    assert (act.action, act.cause) == ("rerun", "unverified")
    (tmp_path / "b").mkdir()
    judged = hj.kernel_findings(_probe(tmp_path / "b", [line], prefix=stamp(now - 30)), cut=now - 60,
                                until=now + hj.FUTURE_SLACK_S)
    assert [x.cause.cls for x in judged if x.failure] == ["hardware"]
    assert [x.check for x in hj.kernel_findings(doc, cut=now - 60) if x.failure] != ["kernel_log_future"]
