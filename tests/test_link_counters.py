"""Link error counters as their growth over a load: the reader on a real sysfs-shaped tree, the judges
on structured readings, and the all-reduce probe reading them around its real (gloo, CPU) load."""
from __future__ import annotations

import copy
import json
import socket
from pathlib import Path

import pytest

from gpuaccept.causes import Cause
from gpuaccept.config.thresholds import load_sku_file
from gpuaccept.errors import ThresholdError
from gpuaccept.judging import actions, linkcounters

from gpuaccept.runner.host import save_probe
from probe_helpers import run_probe, write_line
from project_helpers import DATA, alter, make_project, replay_captures, replay_project, run_pytest

ROOT = Path(__file__).resolve().parents[1]
H200 = load_sku_file(str(ROOT / "thresholds" / "h200-sxm-141gb.yaml"))
L40S = load_sku_file(str(ROOT / "thresholds" / "l40s-48gb.yaml"))
IB_COUNTERS = ("link_downed", "link_error_recovery", "symbol_error", "port_rcv_errors",
               "port_rcv_remote_physical_errors", "local_link_integrity_errors", "excessive_buffer_overrun_errors",
               "port_xmit_data", "port_rcv_data")


def ib_tree(root: Path, counters: dict | None = None, state: str = "4: ACTIVE") -> Path:
    """``<root>/class/infiniband/mlx5_0/ports/1``: the files the kernel has there (mlx5, NDR)."""
    port = root / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    write_line(port / "state", state)
    write_line(port / "phys_state", "5: LinkUp")
    write_line(port / "link_layer", "InfiniBand")
    write_line(port / "rate", "400 Gb/sec (4X NDR)")
    for name in IB_COUNTERS:
        write_line(port / "counters" / name, str((counters or {}).get(name, 0)))
    write_line(port / "hw_counters" / "out_of_sequence", "0")
    write_line(port / "hw_counters" / "local_ack_timeout_err", "0")
    return port


def snap(tmp_path: Path, at: str) -> dict:
    rc, doc, err = run_probe("link_counters", {"at": at, "load": "test", "sysfs": str(tmp_path), "nvml": False})
    assert rc == 0, err
    return doc


def test_reader_reads_the_port_files_of_a_sysfs_tree(tmp_path):
    ib_tree(tmp_path, {"symbol_error": 12, "port_xmit_data": 123456789})
    doc = snap(tmp_path, "start")
    (p,) = doc["ib"]["ports"]
    assert (p["device"], p["port"], p["state"], p["rate"]) == ("mlx5_0", 1, "4: ACTIVE", "400 Gb/sec (4X NDR)")
    assert p["counters"]["symbol_error"] == 12 and p["counters"]["port_xmit_data"] == 123456789
    assert p["hw_counters"] == {"local_ack_timeout_err": 0, "out_of_sequence": 0}
    assert doc["nvlink"] == {"unavailable": "not asked"} and doc["at"] == "start"
    rc, bad, _ = run_probe("link_counters", {"at": "middle", "sysfs": str(tmp_path)})
    assert rc == 1 and "'at'" in bad["msg"]


def test_a_port_active_now_whose_link_downed_grew_is_a_hardware_finding(tmp_path):
    port = ib_tree(tmp_path, {"link_downed": 3, "symbol_error": 40})
    start = snap(tmp_path, "start")
    write_line(port / "counters" / "link_downed", "5")  # the link went down twice during the load, and came back
    write_line(port / "counters" / "port_xmit_data", "999")  # traffic is not an error
    write_line(port / "hw_counters" / "out_of_sequence", "17")
    end = snap(tmp_path, "end")
    found = linkcounters.ib(start, end, "all-reduce over 8 GPUs")
    bad = [f for f in found if f.failure]
    assert [f.check for f in bad] == ["ib_link_downed"]
    (f,) = bad
    assert "mlx5_0 port 1 (InfiniBand): link_downed grew by 2 over all-reduce over 8 GPUs (3 -> 5" in f.failure
    assert "reads 4: ACTIVE, 400 Gb/sec (4X NDR) now" in f.failure and "ib_counter_limits.yaml" in f.failure
    assert f.cause.cls == "hardware" and f.cause.evidence["before"] == 3 and f.cause.evidence["after"] == 5
    act = actions.for_cause(f.cause)
    assert act.action == "check-network" and "perfquery -x -C mlx5_0 -P 1" in act.command
    (summary,) = [f for f in found if f.check == "ib_port_errors mlx5_0/1"]
    assert summary.value["link_downed"] == 2 and summary.value["symbol_error"] == 0
    assert summary.extra["hw_counters_grew"] == {"out_of_sequence": 17}


def test_a_quiet_port_passes_and_a_saturated_or_cleared_counter_is_not_measured(tmp_path):
    port = ib_tree(tmp_path, {"symbol_error": 65535, "link_error_recovery": 9})
    start = snap(tmp_path, "start")
    write_line(port / "counters" / "link_error_recovery", "0")  # cleared (perfquery -R) during the load
    end = snap(tmp_path, "end")
    found = linkcounters.ib(start, end, "ib_write_bw")
    assert not [f for f in found if f.failure]
    errors = {f.check: f for f in found if f.error}
    assert set(errors) == {"ib_symbol_error", "ib_link_error_recovery"}
    assert "16-bit maximum 65535" in errors["ib_symbol_error"].error
    assert "cleared during the load" in errors["ib_link_error_recovery"].error
    assert all(f.cause.cls == "unverified" for f in errors.values())
    assert actions.for_cause(errors["ib_symbol_error"].cause).action == "rerun"
    ib_tree(tmp_path, {})
    quiet = snap(tmp_path, "start")
    assert [f for f in linkcounters.ib(quiet, copy.deepcopy(quiet), "x") if f.failure or f.error] == []


def nv_snap(read_at: float, recovery=0, crc=0, replay=0, links=(0, 1)) -> dict:
    return {"read_at": read_at, "ib": {"unavailable": "none"}, "nvlink": {"gpus": [
        {"index": 0, "pci_bus_id": "00000000:00:06.0", "links": [
            {"link": lk, "errors": {"replay": replay if lk == 1 else 0, "recovery": recovery if lk == 1 else 0,
                                    "crc_flit": crc if lk == 1 else 0, "crc_data": 0}} for lk in links]}]}}


def test_nvlink_growth_is_judged_against_the_skus_limits():
    quiet = linkcounters.nvlink(nv_snap(100.0), nv_snap(110.0, crc=50), H200, "p2p_bandwidth")
    assert [f for _, f in quiet if f.failure] == []
    crc = [f for _, f in quiet if f.check == "nvlink_crc_errors_per_s"]
    assert crc[0].value == 5.0 and crc[0].extra["worst_link"] == 1 and crc[0].limit.bound == 100
    sick = linkcounters.nvlink(nv_snap(100.0, recovery=1), nv_snap(110.0, recovery=3, crc=2001), H200, "all-reduce")
    fails = {f.check: (gpu, f) for gpu, f in sick if f.failure}
    assert set(fails) == {"nvlink_recovery_errors link", "nvlink_crc_errors_per_s link"}
    gpu, rec = fails["nvlink_recovery_errors link"]
    assert gpu == 0 and rec.value == 2 and "h200-sxm-141gb.yaml checks.nvlink_recovery_errors" in rec.failure
    assert "recovery 1 -> 3 over 10.0 s" in rec.failure
    assert rec.cause.cls == "hardware" and actions.for_cause(rec.cause).action == "drain-rma"
    assert fails["nvlink_crc_errors_per_s link"][1].value == 200.1
    lost = linkcounters.nvlink(nv_snap(100.0), nv_snap(110.0, links=(0,)), H200, "p2p_bandwidth")
    (gone,) = [f for _, f in lost if f.failure]
    assert gone.failure == "NVLink 1 active before p2p_bandwidth, not after it" and gone.cause.cls == "hardware"


def test_nvlink_without_nvlink_or_without_a_limit():
    assert linkcounters.nvlink(nv_snap(1.0), nv_snap(2.0, recovery=5), L40S, "x") == []  # the SKU has no NVLink
    no_limit = copy.deepcopy(H200)
    del no_limit.checks["nvlink_recovery_errors"]
    with pytest.raises(ThresholdError):
        linkcounters.nvlink(nv_snap(1.0), nv_snap(2.0), no_limit, "x")
    stuck = nv_snap(1.0)
    stuck["nvlink"] = {"unresponsive": {"gpu": 3, "call": "nvmlDeviceGetNvLinkErrorCounter", "seconds": 10.0},
                       "msg": "driver unresponsive on GPU 3 (nvmlDeviceGetNvLinkErrorCounter, 10 s)"}
    ((gpu, f),) = linkcounters.nvlink(nv_snap(0.0), stuck, H200, "all-reduce")
    assert gpu == 3 and f.cause == Cause("hardware", "driver_unresponsive", gpu=3)
    assert actions.for_cause(f.cause).action == "reboot"


def test_a_document_without_readings_is_not_measured_never_a_pass():
    ((gpu, f),) = linkcounters.findings({"rows": []}, H200, "all-reduce over 2 GPUs")
    assert gpu is None and f.failure is None and f.error.startswith("link error counters not measured around")
    assert f.cause.cls == "tool" and actions.for_cause(f.cause).action == "rerun"
    ((_, g),) = linkcounters.findings({"link_counters": {"start": {"error": "OSError: boom"}, "end": {}}}, H200, "x")
    assert "the reading at the start failed: OSError: boom" in g.error


def test_the_all_reduce_reads_the_counters_around_its_real_load(tmp_path):
    """The gloo all-reduce on this CPU machine: the probe reads the counters before and after its sweep; no NVLink
    and no InfiniBand here, each part says so, and nothing is judged as grown."""
    rc, doc, err = run_probe("nccl_allreduce", {"backend": "gloo", "world_size": 2, "min_bytes": 1024,
                                                "max_bytes": 4096, "factor": 4, "iters": 2, "warmup": 1})
    assert rc == 0, err[-2000:]
    lc = doc["link_counters"]
    assert lc["start"]["read_at"] <= lc["end"]["read_at"]
    assert "unavailable" in lc["start"]["nvlink"] and "unavailable" in lc["end"]["ib"]
    got = linkcounters.findings(doc, H200, "all-reduce over 2 ranks")
    assert [f for _, f in got if f.failure or f.error] == []


# -- the nvlink layer: p2p_bandwidth's readings, judged by test_nvlink_link_errors ---------------------------

def _replay_tests(rep: Path) -> dict[str, dict]:
    return {t["nodeid"].split("::")[-1].split("[")[0]: t for t in json.loads((rep / "results.json").read_text())["tests"]}


def nvlink_reading(read_at: float) -> dict:
    """A snapshot's NVLink part as the H200 capture's nvlink probe read the counters of its active links
    (tests/data/replay-h200x2, 2026-11-29): the real readings, in _linkcounters.snapshot's shape."""
    doc = json.loads(next(DATA.glob("nvlink-*.json")).read_text())["doc"]
    return {"read_at": read_at, "ib": {"unavailable": "no InfiniBand/RoCE device (/sys/class/infiniband absent)"},
            "nvlink": {"gpus": [{"index": g["index"], "pci_bus_id": g["pci_bus_id"], "links": [
                {"link": lk["link"], "errors": dict(lk["errors"])} for lk in g["links"] if lk.get("active")]}
                for g in doc["gpus"]]}}


def test_a_replayed_p2p_capture_without_readings_is_skipped_as_not_measured(tmp_path):
    """The 2xH200 capture predates the readings: test_p2p_bandwidth passes as before, the counters' test is
    skipped naming why (never a silent pass, never a failure)."""
    inv = replay_project(tmp_path, DATA)
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "p2p_bandwidth or link_errors")
    got = _replay_tests(rep)
    assert got["test_p2p_bandwidth"]["outcome"] == "passed", res.stdout[-3000:]
    assert got["test_nvlink_link_errors"]["outcome"] == "skipped"
    assert ("h200-a: not measured: the replayed p2p_bandwidth capture predates the link error counter readings"
            in got["test_nvlink_link_errors"]["message"])


def test_nvlink_recovery_errors_that_grew_over_the_p2p_copies_fail_the_gpu(tmp_path):
    """The capture's p2p_bandwidth document with readings before and after its copies (the real counters of the
    capture's nvlink document; ALTERED here: GPU 1's link 4 recovered 3 times during the copies)."""
    def with_readings(doc):
        start, end = nvlink_reading(1000.0), nvlink_reading(1000.0 + doc["probe_seconds"])
        end["nvlink"]["gpus"][1]["links"][4]["errors"]["recovery"] += 3
        doc["link_counters"] = {"start": start, "end": end}
    inv = replay_project(tmp_path, alter(tmp_path, "p2p_bandwidth", with_readings))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "p2p_bandwidth or link_errors")
    got = _replay_tests(rep)
    assert got["test_p2p_bandwidth"]["outcome"] == "passed", res.stdout[-3000:]
    t = got["test_nvlink_link_errors"]
    assert t["outcome"] == "failed", t
    (entry,) = t["failures"]
    assert entry["gpu"] == 1 and entry["pci_bus_id"] == "00000000:00:07.0"
    assert "nvlink_recovery_errors" in entry["line"] and "recovery 0 -> 3 over" in entry["line"], entry
    assert entry["cause"]["kind"] == "nvlink_link_errors" and entry["cause"]["evidence"]["link"] == 4
    assert entry["action"]["action"] == "drain-rma"


# -- the gpudirect layer: the rdma probe's readings around its ib_write_bw loopbacks --------------------------

def _rdma_replay(tmp_path: Path, grow: bool | None) -> dict[str, dict]:
    """suites/test_gpudirect.py on h200-a replaying the rdma probe's documents of a tree written here: the plain
    reading, and the loopback call's (ALTERED here: one ib_write_bw loopback record and ``perftest`` set, since this
    machine has no perftest and no HCA), whose ``link_counters`` are two real link_counters readings of the tree,
    link_downed grown by 2 between them when ``grow``; ``grow`` None: no readings (a capture from before)."""
    port = ib_tree(tmp_path / "t", {"link_downed": 1})
    sysfs = tmp_path / "t"
    write_line(sysfs / "kernel" / "mm" / "memory_peers" / "nv_mem" / "version", "2.0")  # GDR ready: no NCCL call
    rc, plain, err = run_probe("rdma", {"sysfs": str(sysfs), "proc": str(tmp_path / "proc"), "gpu_bus_ids": []})
    assert rc == 0, err
    plain["perftest"] = "/usr/bin/ib_write_bw"
    loop = {**copy.deepcopy(plain), "loopback": [{"hca": "mlx5_0", "gpu": 0, "bw_gbits": 380.2, "bw_gbps": 47.525,
                                                   "error": None}]}
    if grow is not None:
        start = snap(sysfs, "start")
        if grow:
            write_line(port / "counters" / "link_downed", "3")
        loop["link_counters"] = {"start": start, "end": snap(sysfs, "end")}
    caps = replay_captures(tmp_path, {"rdma": ({}, plain)})
    save_probe(str(caps), "rdma", {"perftest": True, "hcas": []}, loop)
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={caps} gpu_sku=h200-sxm-141gb gpus_per_node=2\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "suites/test_gpudirect.py", "-k",
                     "gpudirect_rdma or rdma_link_errors")
    assert (rep / "results.json").exists(), res.stdout[-3000:] + res.stderr[-2000:]
    return _replay_tests(rep)


def test_a_port_that_went_down_during_the_loopbacks_fails_under_the_gpudirect_layer(tmp_path):
    t = _rdma_replay(tmp_path, grow=True)["test_rdma_link_errors"]
    assert t["outcome"] == "failed", t
    (entry,) = t["failures"]
    assert "mlx5_0 port 1 (InfiniBand): link_downed grew by 2 over ib_write_bw --use_cuda loopback on mlx5_0" \
        in entry["line"], entry
    assert entry["cause"]["kind"] == "ib_link_errors" and entry["action"]["action"] == "check-network"
    assert "perfquery -x -C mlx5_0 -P 1" in entry["action"]["command"]


def test_quiet_ports_pass_and_a_loopback_capture_without_readings_is_skipped(tmp_path):
    quiet = _rdma_replay(tmp_path / "quiet", grow=False)["test_rdma_link_errors"]
    assert quiet["outcome"] == "passed", quiet
    old = _rdma_replay(tmp_path / "old", grow=None)["test_rdma_link_errors"]
    assert old["outcome"] == "skipped" and "predates the link error counter readings" in old["message"], old


# -- the multi-node all-reduce: each host's share reads the IB counters around its ranks ----------------------

def test_a_multi_node_share_reads_the_ib_counters_around_its_ranks():
    """One host's share (nnodes 1, gloo on this CPU machine): sysfs only, no NVML (the ranks of every host start
    together); no InfiniBand here, said in the reading, and nothing judged as grown."""
    for _ in range(3):  # a port found free here may be taken by another test before the ranks bind it: another
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        rc, doc, err = run_probe("nccl_allreduce", {"backend": "gloo", "nnodes": 1, "node_rank": 0,
                                                    "ranks_per_node": 2, "master_addr": "127.0.0.1", "master_port": port,
                                                    "min_bytes": 1024, "max_bytes": 4096, "factor": 4, "iters": 2,
                                                    "warmup": 1, "marker": "gpuaccept-ar-lctest", "host": "h1",
                                                    "hosts": ["h1"], "deadline_s": 90})
        if doc.get("outcome") != "addr_in_use":
            break
    assert rc == 0 and doc["ok"] is True, (doc.get("error") or doc.get("msg"), err[-2000:])
    lc = doc["link_counters"]
    assert lc["start"]["nvlink"] == {"unavailable": "not asked"} == lc["end"]["nvlink"]
    assert "unavailable" in lc["end"]["ib"] and lc["start"]["read_at"] <= lc["end"]["read_at"]
    assert linkcounters.findings(doc, None, "ring") == []
