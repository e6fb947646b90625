"""The host layer end to end: real sshd nodes on loopback without GPUs, their kernel log a real file the test writes (the
inventory's ``kernel_log_paths``, read by the same reader as journalctl's output), a real read-only bind mount as a storage
path; and the host probes on real files: EDAC counters in a tree laid out as the kernel's sysfs, the writable proof on a
real filesystem."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from gpuaccept.reporting.folder import run_figures
from probe_helpers import run_probe
from project_helpers import junit, make_project, run_pytest

REPO = Path(__file__).resolve().parent.parent


def _now_iso(offset_s: float = 0.0) -> str:
    """journalctl -o short-iso's timestamp of now (+offset): ``2026-12-05T03:15:11+0000``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(time.time() + offset_s))


def test_host_memory_probe_reads_edac_tree(tmp_path):
    """host_memory on a /proc and sysfs laid out as the kernel's (ras.rst "EDAC sysfs interface"): MemTotal in GiB,
    per-controller and per-DIMM counts, sums."""
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text("MemTotal:       2113389340 kB\nMemFree:        2000000000 kB\n")
    mc = tmp_path / "sys" / "devices" / "system" / "edac" / "mc"
    for i, (ce, ue) in enumerate([(7, 0), (2, 1)]):
        d = mc / f"mc{i}"
        (d / "dimm0").mkdir(parents=True)
        for k, v in {"mc_name": "Intel_10nm Socket#0 IMC#0", "size_mb": "262144", "ce_count": ce, "ue_count": ue,
                     "ce_noinfo_count": 0, "ue_noinfo_count": 0, "seconds_since_reset": 86400}.items():
            (d / k).write_text(f"{v}\n")
        for k, v in {"dimm_label": f"CPU_SrcID#{i}_MC#0_Chan#0_DIMM#0", "size": "65536", "dimm_ce_count": ce,
                     "dimm_ue_count": ue, "dimm_location": "memory 0 channel 0 slot 0"}.items():
            (d / "dimm0" / k).write_text(f"{v}\n")
    rc, doc, _ = run_probe("host_memory", {"proc": str(proc), "sysfs": str(tmp_path / "sys")})
    assert rc == 0 and doc["mem_total_gib"] == round(2113389340 / 2**20, 3)
    assert doc["edac"]["present"] and doc["edac"]["ce_total"] == 9 and doc["edac"]["ue_total"] == 1
    assert doc["edac"]["controllers"][1]["dimms"][0] == {"name": "dimm0", "label": "CPU_SrcID#1_MC#0_Chan#0_DIMM#0",
                                                         "location": "memory 0 channel 0 slot 0", "size_mb": 65536,
                                                         "ce_count": 2, "ue_count": 1}


def test_filesystems_probe_writes_and_cleans_up(tmp_path):
    rc, doc, _ = run_probe("host_filesystems", {"paths": [str(tmp_path), str(tmp_path / "missing")]})
    assert rc == 0
    ok, missing, probe_dir = doc["paths"]
    assert ok["ok"] and ok["write_s"] is not None and ok["block_names"] and os.listdir(tmp_path) == []
    assert not missing["ok"] and missing["failure"]["reason"] == "placement"
    assert probe_dir["role"] == "probe" and probe_dir["ok"]


def test_kernel_log_probe_refuses_an_unreadable_log(tmp_path):
    rc, doc, _ = run_probe("host_kernel_log", {"patterns": [{"id": "x", "regex": "x"}],
                                               "sources": [str(tmp_path / "absent.log")]})
    assert rc == 1 and doc["failed"] and "cannot read the kernel log" in doc["msg"]


@pytest.fixture
def ro_dir(tmp_path):
    """A real read-only bind mount of a folder in tmp (visible to the sshd nodes' sessions), unmounted afterwards."""
    d = tmp_path / "ro-scratch"
    d.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.fail("a read-only bind mount needs root and util-linux mount (as the sshd tests do)", pytrace=False)
    subprocess.run(["mount", "--bind", str(d), str(d)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(d)], check=True)
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=False)


def test_cpu_nodes_soft_lockup_fails_clean_passes_read_only_is_configuration(tmp_path, sshd_nodes, known_hosts, ro_dir):
    """Three sshd nodes without GPUs. node1's kernel log (a file, as journalctl would print it) holds a soft lockup
    during the run: test_kernel_log FAILs with cause hardware and action reboot, naming CPU, line and time. node2's log is
    clean: PASS. node3 has a read-only storage path (a real ro bind mount) and a clean log: test_filesystems FAILs with
    cause configuration (fix-config), never hardware."""
    nodes = sshd_nodes[:3]
    inv = make_project(tmp_path, nodes, known_hosts,
                       extra_suite=(REPO / "gpuaccept" / "suites" / "test_host.py").read_text(), name="test_host.py")
    logs = {n.name: tmp_path / f"kern-{n.name}.log" for n in nodes}
    before = f"{_now_iso(-7200)} {nodes[0].name} kernel: BUG: soft lockup - CPU#2 stuck for 30s! [old:1]\n"
    lockup = f"{_now_iso(60)} node1 kernel: watchdog: BUG: soft lockup - CPU#37 stuck for 23s! [python3:88412]\n"
    plain = f"{_now_iso(60)} {{}} kernel: nvme nvme0: 64/0/0 default/read/poll queues\n"
    logs["node1"].write_text(before + plain.format("node1") + lockup)
    logs["node2"].write_text(before + plain.format("node2"))
    logs["node3"].write_text(plain.format("node3"))
    hv = tmp_path / "host_vars"
    hv.mkdir()
    for n in nodes:
        extra = f"storage_paths: [{ro_dir}]\n" if n.name == "node3" else ""
        (hv / f"{n.name}.yml").write_text(f"kernel_log_paths: [{logs[n.name]}]\n{extra}")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", known_hosts, "--reports", str(rep),
                     "-m", "host", timeout=180)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    cases = {(c["classname"], c["name"].split("[")[0]): c for c in junit(rep / "junit-host.xml")}
    bad = cases[("host.node1", "test_kernel_log")]
    assert bad["outcome"] == "failure", bad
    assert "CPU#37 stuck for 23s" in bad["text"] and "soft_lockup on 37" in bad["text"] and "old:1" not in bad["text"]
    assert cases[("host.node2", "test_kernel_log")]["outcome"] == "passed"
    assert cases[("host.node1", "test_filesystems")]["outcome"] == "passed"
    ro = cases[("host.node3", "test_filesystems")]
    assert ro["outcome"] == "failure" and f"{ro_dir}: the filesystem is read-only" in ro["text"], ro
    doc = json.loads((rep / "results.json").read_text())
    tests = {(t["host"], t["name"].split("[")[0]): t for t in doc["tests"]}
    lock = tests[("node1", "test_kernel_log")]
    assert lock["action"]["action"] == "reboot" and lock["action"]["cause"] == "hardware", lock["action"]
    ro_rec = tests[("node3", "test_filesystems")]
    assert ro_rec["action"]["action"] == "fix-config" and ro_rec["action"]["cause"] == "configuration", ro_rec["action"]
    out = res.stdout + res.stderr  # the run's host lines: a clean CPU node is PASS (judged), not SKIP
    assert re.search(r"\bnode2 PASS\b", out) and re.search(r"\bnode1 FAIL\b", out) and re.search(r"\bnode3 FAIL\b", out), out[-3000:]
    src = [f for f in run_figures(doc) if f["check"] == "kernel_log_source" and f["host"] == "node2"]
    assert src and src[0]["value"] == str(logs["node2"])
    assert os.listdir(ro_dir) == []
