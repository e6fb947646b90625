"""Real-world text from broken nodes, read by gpuaccept's own readers and judges (no fixture of our own).

Samples live in tests/data/field/ (``kernel-logs.txt``: kernel log blocks; ``nccl-logs.txt``: NCCL output;
``fio-output.txt``: fio failures), each with its source URL and date. Each block is fed as is to the real
parser (the xid_events probe's ``parse_log``, ``_nccl_log``, the supervisor's rank evidence, the fio probe's
output parser) and the verdict an operator should get is asserted: which GPU, switch or job, pass or fail,
and a message that names the cause.
"""
from __future__ import annotations

import calendar
import re

import pytest

from gpuaccept.judging import xid as xidmod
from probe_helpers import DATA, field_blocks, load_probe

FIELD = DATA / "field"
xev = load_probe("xid_events")


KERNEL = field_blocks("kernel-logs.txt")
SINCE = calendar.timegm((2000, 1, 1, 0, 0, 0, 0, 0, 0))  # every sample's lines are after it


def judged(name: str) -> tuple[list[dict], list[dict]]:
    doc = xev.parse_log(KERNEL[name], SINCE)
    return xidmod.classify(doc["events"]), xidmod.classify_sxids(doc["sxid_events"])


@pytest.mark.parametrize("file", ["kernel-logs.txt", "nccl-logs.txt", "fio-output.txt"])
def test_every_sample_has_a_source_and_lines(file):
    text = (FIELD / file).read_text(encoding="utf-8")
    for name, lines in field_blocks(file).items():
        head = text.split(f"### sample: {name}", 1)[1].split("\n###", 1)[0]
        assert "source: https://" in head, name
        assert lines, name


def test_dmesg_three_line_off_bus_message_is_xid_79_with_its_dmesg_time():
    events, _ = judged("dmesg-offbus-three-lines")
    assert [(e["xid"], e["pci_bus_id"], e["fails"], e["inferred"]) for e in events] == [
        (79, "00000000:B3:00.0", True, True)]
    assert events[0]["time"] == "[ 1843.308145]"  # seconds since boot: kept so the operator can find the line
    assert "fallen off the bus" in events[0]["message"] and "RESTART_BM" in events[0]["message"]


def test_old_driver_off_bus_lines_are_one_xid_79():
    events, _ = judged("dmesg-offbus-old-driver")
    assert [(e["xid"], e["pci_bus_id"], e["fails"]) for e in events] == [(79, "00000000:01:00.0", True)]


def test_interleaved_sxid_detail_lines_join_their_own_switch_report():
    events, sxids = judged("dmesg-xid79-with-sxids")
    assert [(e["xid"], e["pci_bus_id"], e["uuid"]) for e in events] == [
        (79, "00000000:91:00.0", "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b")]
    heads = [(s["switch"], s["link"], s["severity"]) for s in sxids]
    assert heads == [("nvidia-nvswitch1", 48, "Fatal"), ("nvidia-nvswitch0", 63, "Fatal"),
                     ("nvidia-nvswitch2", None, None), ("nvidia-nvswitch2", 37, "Fatal"),
                     ("nvidia-nvswitch0", 62, "Fatal")]
    by = {(s["switch"], s["link"]): s for s in sxids}
    assert by[("nvidia-nvswitch0", 63)]["continuation"][0].startswith("Data {0x10000000")
    assert by[("nvidia-nvswitch2", 37)]["continuation"] == ["Severity 1 Engine instance 37 Sub-engine instance 00"]
    assert by[("nvidia-nvswitch0", 62)]["continuation"] == ["Severity 1 Engine instance 62 Sub-engine instance 00"]
    assert all(s["fails"] for s in sxids)
    orphan = by[("nvidia-nvswitch2", None)]  # its first line (Link 60) is before the excerpt
    assert "detail line of an SXid report whose first line" in orphan["message"]
    assert "link 37: LTSSM Fault Up" in by[("nvidia-nvswitch2", 37)]["message"]


def test_dmesg_ctime_timestamps_are_read_and_xid_13_is_one_report():
    events, _ = judged("dmesg-ctime-xid13-xid109")
    assert [(e["xid"], e["fails"], len(e["continuation"])) for e in events] == [(13, False, 2), (109, True, 0)]
    assert events[0]["epoch"] == pytest.approx(__import__("time").mktime((2024, 8, 30, 11, 43, 9, 0, 0, -1)))
    assert events[1]["epoch"] - events[0]["epoch"] == 5
    # a window that starts between the two reports keeps only the second
    later = xev.parse_log(KERNEL["dmesg-ctime-xid13-xid109"], events[0]["epoch"] + 1)["events"]
    assert [e["xid"] for e in later] == [109]


def test_rminitadapter_failure_fails_the_gpu_once_with_its_code_and_count():
    events, _ = judged("syslog-rminitadapter")
    assert len(events) == 1
    e = events[0]
    assert (e["pci_bus_id"], e["fails"], e["repeats"], e["rule"]) == ("00000000:0A:00.0", True, 6, "driver")
    assert "failed to initialise the GPU at 00000000:0A:00.0" in e["message"]
    assert "(0x24:0x72:1568), 6 times" in e["message"]
    assert e["continuation"] == ["GPU 0000:0a:00.0: rm_init_adapter failed, device minor number 5"]


def test_rminitadapter_on_two_gpus_is_one_event_each():
    events, _ = judged("dmesg-rminitadapter-two-gpus")
    assert [(e["pci_bus_id"], e["repeats"], e["fails"]) for e in events] == [
        ("00000000:04:01.0", 3, True), ("00000000:04:02.0", 2, True)]


def test_xid_45_naming_a_failing_cause_outside_the_window_fails_as_that_cause():
    events, _ = judged("journal-xid45-after-nvlink-xids")
    assert [(e["xid"], e["pid"], e["process_name"], e["fails"], e["rule"]) for e in events] == [
        (45, 1818990, "python3", True, "named cause"), (45, 1818992, "python3", True, "named cause"),
        (45, 1818989, "python3", True, "named cause"), (45, 1818987, "python3", True, "named cause")]
    assert events[0]["message"].startswith("Xid 45 on 00000000:DC:00.0 names its cause, Xid 149 (NVLINK: NETIR "
                                           "Error), which is not in the log window")
    assert "Xid 145" in events[1]["message"] and "WORKFLOW_NVLINK5_ERR" in events[1]["message"]


def test_xid_45_whose_cause_is_in_the_window_stays_recorded():
    """Altered copy: the real Xid 149 line of the kmsg-nvlink5-xids sample, moved onto GPU 0000:dc:00, put
    before the real Xid 45 line of that GPU: the 149 fails on its own and the 45 is recorded."""
    cause = KERNEL["kmsg-nvlink5-xids"][0].replace("PCI:0019:01:00", "PCI:0000:dc:00")
    events = xidmod.classify(xev.parse_log([cause, KERNEL["journal-xid45-after-nvlink-xids"][0]], SINCE)["events"])
    assert [(e["xid"], e["fails"], e["rule"]) for e in events] == [(149, True, "catalogue"), (45, False, "policy")]


def test_nvlink5_xids_without_pid_fields_fail_by_the_catalogue():
    events, _ = judged("kmsg-nvlink5-xids")
    assert [(e["xid"], e["pci_bus_id"], e["fails"], e["bucket"]) for e in events] == [
        (149, "00000019:01:00.0", True, "WORKFLOW_NVLINK5_ERR"),
        (145, "00000018:01:00.0", True, "WORKFLOW_NVLINK5_ERR"),
        (144, "00000000:01:00.0", True, "WORKFLOW_NVLINK5_ERR")]
    assert events[0]["msg"].startswith("NETIR Fatal XC0 i0 Link -1")


@pytest.mark.parametrize("line, has_epoch, ts, rest", [
    ("<12>[38889.018130] nvidia-nvswitch0: SXid x", False, "[38889.018130]", "nvidia-nvswitch0: SXid x"),
    ("[Sat Aug 31 07:06:03 2024] NVRM: x", True, "[Sat Aug 31 07:06:03 2024]", "NVRM: x"),
    ("[    8.766276] NVRM: x", False, "[    8.766276]", "NVRM: x"),
])
def test_every_kernel_timestamp_prefix_is_split_off(line, has_epoch, ts, rest):
    epoch, text, tail = xev.parse_timestamp(line)
    assert (epoch is not None, text, tail) == (has_epoch, ts, rest)


def test_probe_reads_a_saved_dmesg_file_of_a_real_failure(tmp_path):
    """The probe's file source on a saved plain-dmesg log: the same events as the parser gives."""
    path = tmp_path / "dmesg.txt"
    path.write_text("\n".join(KERNEL["dmesg-rminitadapter-two-gpus"] + KERNEL["dmesg-offbus-three-lines"]) + "\n")
    doc = xev.main({"sources": [str(path)]})
    assert doc["source"] == str(path)
    assert [(e["xid"], e["pci_bus_id"]) for e in doc["events"]] == [
        (None, "00000000:04:01.0"), (None, "00000000:04:02.0"), (79, "00000000:B3:00.0")]
    assert all(e["fails"] for e in xidmod.classify(doc["events"]))


# ---------------------------------------------------------------------------------------------------------
# NCCL output

from gpuaccept.judging import nccl as nccl_judge
from gpuaccept.judging import nccl_table
from gpuaccept.judging import storage as storage_judging  # noqa: E402
from gpuaccept.probes import _nccl_log, _supervisor  # noqa: E402

NCCL = field_blocks("nccl-logs.txt")


def test_channel_lines_ending_in_comm_and_nranks_keep_their_transport():
    got = _nccl_log.parse_nccl_log(NCCL["rccl-ucx-plugin-failure"])
    assert got["transports"] == {"NET/UCX/0/GDRDMA": 4}
    assert storage_judging.nccl_gdr_channels(got["transports"]) == ["NET/UCX/0/GDRDMA"]
    assert nccl_judge.transport_problem(got["transports"], "GDRDMA") is None
    assert "NET/UCX/0/GDRDMA" in (nccl_judge.transport_problem(got["transports"], "IB") or "")
    # RCCL's "NET/IB : Using [0]bnxt_re0:1/RoCE ; OOB ..." (a space before ";") and its plugin network name
    assert got["net_devices"]["ib"] == [{"name": "bnxt_re0", "port": 1, "link": "RoCE"}]
    assert got["net_devices"]["oob_interface"] == "ens52np0" and got["nccl_network"] == "UCX"


def test_ibext_plugin_channels_are_infiniband():
    got = _nccl_log.parse_nccl_log(NCCL["ibext-plugin-channels"])
    assert got["transports"] == {"NET/IBext_v8/2": 2, "NET/IBext_v8/1": 2}
    assert nccl_judge.transport_problem(got["transports"], "IB") is None
    assert nccl_judge.transport_problem(got["transports"], "NET/IB", network_only=True) is None
    # no GPUDirect RDMA on these channels: still refused where GDRDMA is expected, and Socket is not IB
    assert "NET/IBext_v8/1, NET/IBext_v8/2" in nccl_judge.transport_problem(got["transports"], "NET/IB/GDRDMA")
    assert nccl_judge.transport_problem({"NET/Socket/0": 4}, "IB") is not None


def test_empty_last_error_label_is_not_the_reason():
    kind, why, _ = _supervisor.rank_evidence(1, "exited", 0.0, None, "\n".join(NCCL["torch-internal-error-last-error-empty"]))
    assert why == "rc 1: [rank1]: ncclInternalError: Internal check failed."
    assert kind == "local"


def test_nccl_warn_messages_reach_the_reason():
    text = "\n".join(NCCL["rccl-ucx-plugin-failure"])
    assert _nccl_log.nccl_warnings(text.splitlines())[1] == "Failed: UCX error ucx_plugin.c:498 '-5' Invalid parameter"
    kind, why, _ = _supervisor.rank_evidence(1, "exited", 0.0, None, text)
    assert why.startswith("rc 1: .. node01 pid 5646: Test failure common.cu:1000 [NCCL WARN: ")
    assert "UCX error ucx_plugin.c:498 '-5' Invalid parameter" in why


def test_ib_completion_error_from_a_peer_is_peer_evidence_with_its_address():
    kind, why, addrs = _supervisor.rank_evidence(1, "exited", 0.0, None, "\n".join(NCCL["ib-completion-error-from-peer"]))
    assert kind == "peer" and addrs[0] == "10.216.210.236"
    assert "status=12" in why


def test_a_local_cuda_failure_before_the_peer_socket_closed_is_local():
    text = "\n".join(NCCL["cuda-oom-then-peer-socket-closed"])
    kind, why, addrs = _supervisor.rank_evidence(1, "exited", 0.0, None, text)
    assert kind == "local" and addrs == []
    assert "Cuda failure 'out of memory'" in why and "Connection closed by remote peer" in why


def test_nccl_tests_rows_before_a_failure_are_read():
    rows = nccl_table.parse_table("\n".join(NCCL["nccl-tests-table-then-failure"]))
    assert [r["bytes"] for r in rows] == [1 << 30, 1 << 31, 1 << 32, 1 << 33, 1 << 34]
    assert rows[-1]["ip_busbw_gbps"] == 367.44 and rows[-1]["oop_wrong"] == 0
    assert nccl_judge.wrong_count(rows) == (0, [])


# ---------------------------------------------------------------------------------------------------------
# fio

import json  # noqa: E402
import shutil  # noqa: E402

fio_probe = load_probe("fio_throughput")
FIO = field_blocks("fio-output.txt")


@pytest.mark.parametrize("name, first", [
    ("eio-before-json", "fio: io_u error on file /dev/sdb: Input/output error: read offset=184912257024, buflen=4096"),
    ("no-odirect", "fio: looks like your file system does not support direct=1/buffered=0"),
    ("fsync-eio", "fio: pid=0, err=5/file:filesetup.c:239, func=fsync, error=Input/output error"),
    ("eio-with-zoned-hint", "fio: first I/O failed. If /dev/nvme0n1 is a zoned block device, consider --zonemode=zbd"),
])
def test_fio_failure_text_gives_its_most_telling_line(name, first):
    doc, msgs = fio_probe.parse_fio_output("\n".join(FIO[name]) + "\n")
    assert doc is None and msgs == FIO[name]
    detail = fio_probe.fio_error_detail(msgs)
    assert detail[0] == first
    assert all(d.startswith("fio:") for d in detail) and len(detail) <= 2


def test_job_error_names_fios_own_explanation():
    """fio's JSON says only errno 22 when the filesystem lacks O_DIRECT; the message must say so. The JSON is
    fio's own document from a real run (/dev/full, below) with its job's error changed to 22 here."""
    fio = shutil.which("fio")
    if fio is None:
        pytest.fail("fio is not installed (the storage tests need it)")
    cmd = fio_probe.fio_command(fio, "seq_write", None, "/dev/full", bs="1M", size=4 << 20, runtime=1, numjobs=1,
                                iodepth=1, ioengine="psync", direct=0)
    doc, msgs, rc = fio_probe.run_fio(cmd, timeout=60)
    assert rc != 0 and doc is not None
    # real fio on /dev/full: ENOSPC, and fio's line naming the file, direction and offset comes with it
    errs = fio_probe.job_errors(doc, msgs)
    assert errs[0].startswith("fio job seq_write: errno 28 (No space left on device): fio: io_u error on file "
                              "/dev/full: No space left on device: write offset=0"), errs
    altered = json.loads(json.dumps(doc))
    altered["jobs"][0]["error"] = 22
    got = fio_probe.job_errors(altered, FIO["no-odirect"])
    assert got == ["fio job seq_write: errno 22 (Invalid argument): fio: looks like your file system does not "
                   "support direct=1/buffered=0; fio: destination does not support O_DIRECT"]


def test_aer_recovery_failure_of_a_gpu_fails_it_without_any_xid():
    events, _ = judged("dmesg-reltime-aer-cant-recover")
    assert [(e["xid"], e["pci_bus_id"], e["fault"], e["repeats"], e["fails"]) for e in events] == [
        (None, "00000000:03:00.0", "pcie_uncorrected", 2, True)]
    assert events[0]["time"] == "[  +0.000844]"
    assert events[0]["message"].startswith("an uncorrectable PCIe error (AER) reached the GPU at 00000000:03:00.0 "
                                           "and the kernel could not recover it (AER: can't recover")


def test_aer_broadcast_to_a_gpu_before_its_xid_79():
    events, _ = judged("dmesg-aer-fatal-then-xid79")
    assert [(e["xid"], e["pci_bus_id"], e.get("fault"), e["fails"]) for e in events] == [
        (None, "00000000:02:00.0", "pcie_uncorrected", True), (79, "00000000:02:00.0", None, True)]
    assert events[1]["uuid"] == "GPU-660d987e-5b28-3bf6-2a2d-1d5ecae7f6df"


def test_printk_caller_id_after_the_dmesg_time_is_split_off():
    """A real line of a kernel built with CONFIG_PRINTK_CALLER (https://github.com/qualcomm-linux/kernel/pull/1118,
    thread read 2026-11-30)."""
    line = ("[   36.772366][  T291] pcieport 0000:00:00.0: AER: Multiple Correctable error message received from "
            "0000:00:00.0")
    assert xev.parse_timestamp(line)[1:] == (
        "[   36.772366][  T291]", "pcieport 0000:00:00.0: AER: Multiple Correctable error message received from "
                                  "0000:00:00.0")
    assert xev.parse_log([line], SINCE)["events"] == []  # a corrected error on a port is no GPU event


# -- NCCL's "NET/IB : No device found." and its bare version line -----------------------------------------

def test_nccl_2_19_without_an_hca_is_read_as_no_device_with_its_version():
    got = _nccl_log.parse_nccl_log(NCCL["nccl-2.19-no-ib-device-socket-fallback"])
    assert (got["nccl_version"], got["nccl_version_full"]) == ("2.19.3", "2.19.3+cuda12.3")
    nd = got["net_devices"]
    assert nd["ib"] == [] and nd["ib_said"] == "NET/IB : No device found."
    assert nd["socket"] == [{"name": "ens7", "address": "10.128.0.32"}]
    assert nccl_judge.net_device_problems(nd, "mlx5_0", None) == [
        'NCCL found none of the IB devices nccl_ib_hca lists (mlx5_0): NCCL says "NET/IB : No device found."']
    assert nccl_judge.net_device_problems(nd, None, "ens7") == []  # no HCA asked for: nothing to fail


def test_a_torch_error_naming_the_nccl_version_is_not_the_version_line():
    # torch ends its NCCL errors with ", NCCL version 2.21.5": that is not NCCL's own version line
    got = _nccl_log.parse_nccl_log(NCCL["torch-internal-error-last-error-empty"])
    assert got["nccl_version"] is None


# -- NCCL_SOCKET_IFNAME naming an interface the host lacks: this host's fault, said so -----------------------

def test_socket_ifname_without_a_match_is_the_hosts_own_fault():
    """NCCL 2.27.7 (NVIDIA/nccl#1837) ends in "ncclSocketInit: connecting to address  with family 59936 ...":
    a socket error, so the rank was read as the victim of a peer ("peer" evidence, no address to blame)."""
    text = "\n".join(NCCL["socket-ifname-missing-interface-nccl-2.27"])
    kind, why, addrs = _supervisor.rank_evidence(1, "exited", 0.0, None, text)
    assert (kind, addrs) == ("local", [])
    assert why == ("rc 1: [trainer0|0]:ncclSocketInit: connecting to address  with family 59936 is neither "
                   "AF_INET(2) nor AF_INET6(10) (NCCL_SOCKET_IFNAME set to eth2 matched no interface of this host)")


def test_socket_ifname_that_matched_is_not_blamed():
    # the 2xH200 capture's real lines (it found eth0), ALTERED: NCCL's ENV line for the variable added
    real = (DATA / "nccl-info-h200x2.log").read_text().splitlines()
    lines = ["vm:720:720 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to =eth0"] + real
    assert _nccl_log.socket_ifname_unmatched(lines) is None
    assert _nccl_log.socket_ifname_unmatched(lines[:1]) == ("NCCL_SOCKET_IFNAME set to =eth0 matched "
                                                                    "no interface of this host")
