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
    # the node's setting (who may read the log), not a crash to rerun: the controller reads the kind
    from gpuaccept.errors import NodeSetup
    from gpuaccept.judging import actions
    from gpuaccept.runner.parse import probe_error
    assert doc["setup"] == "kernel_log_unreadable"
    err = probe_error("node-1", doc["msg"], "python3", doc.get("missing_module"), doc.get("missing_program"),
                      doc.get("setup"))
    assert isinstance(err, NodeSetup) and (err.cause.cls, err.cause.kind) == ("configuration", "kernel_log_unreadable")
    assert actions.for_cause(err.cause).action == "fix-config"


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


#: a hung NFS client and a hung ext4 journal, as the kernel prints them (hung_task.c, then sched_show_task's trace)
NFS_HUNG = ["INFO: task python3:88412 blocked for more than 122 seconds.",
            "task:python3         state:D stack:    0 pid:88412 ppid:  1234 flags:0x00004002", "Call Trace:", " <TASK>",
            " __schedule+0x23d/0x670", " schedule+0x4f/0xc0", " rpc_wait_bit_killable+0x25/0xb0 [sunrpc]",
            " __rpc_execute+0xd4/0x290 [sunrpc]", " nfs4_proc_getattr+0x7a/0x130 [nfsv4]", " </TASK>"]
EXT4_HUNG = ["INFO: task jbd2/nvme0n1p1-8:1123 blocked for more than 122 seconds.", "Call Trace:", " <TASK>",
             " __schedule+0x24e/0x590", " io_schedule+0x46/0x80", " __wait_on_buffer+0x34/0x40",
             " jbd2_journal_commit_transaction+0x10f8/0x1950", " kjournald2+0xa9/0x280", " </TASK>"]


def test_hung_nfs_client_is_connectivity_hung_ext4_journal_is_hardware(tmp_path, sshd_nodes, known_hosts):
    """Two sshd nodes. node1's kernel log holds ``nfs: server 10.0.0.5 not responding`` and a task hung in NFS frames:
    test_kernel_log is an ERROR of class connectivity with action check-network naming the server, never reboot or
    drain. node2's log holds ext4's journal hung on its NVMe drive: a FAIL, hardware, reboot."""
    nodes = sshd_nodes[:2]
    inv = make_project(tmp_path, nodes, known_hosts,
                       extra_suite=(REPO / "gpuaccept" / "suites" / "test_host.py").read_text(), name="test_host.py")
    hv = tmp_path / "host_vars"
    hv.mkdir()
    for n, lines in zip(nodes, (["nfs: server 10.0.0.5 not responding, still trying"] + NFS_HUNG, EXT4_HUNG)):
        log = tmp_path / f"kern-{n.name}.log"
        log.write_text("".join(f"{_now_iso(60)} {n.name} kernel: {ln}\n" for ln in lines))
        (hv / f"{n.name}.yml").write_text(f"kernel_log_paths: [{log}]\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", known_hosts, "--reports", str(rep),
                     "-m", "host", "-k", "test_kernel_log", timeout=180)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    cases = {c["classname"]: c for c in junit(rep / "junit-host.xml") if c["name"].startswith("test_kernel_log")}
    nfs, ext4 = cases["host.node1"], cases["host.node2"]
    assert nfs["outcome"] == "error" and "network filesystem nfs, server 10.0.0.5" in nfs["text"], nfs
    assert ext4["outcome"] == "failure" and "jbd2/nvme0n1p1-8" in ext4["text"], ext4
    tests = {t["host"]: t for t in json.loads((rep / "results.json").read_text())["tests"]
             if t["name"].startswith("test_kernel_log")}
    act = tests["node1"]["action"]
    assert (act["action"], act["cause"]) == ("check-network", "connectivity") and "10.0.0.5" in act["reason"], act
    assert (tests["node2"]["action"]["action"], tests["node2"]["action"]["cause"]) == ("reboot", "hardware")


#: a GPU-layer stand-in, sorted before test_host.py: its ``gpus`` test makes the warm-up visit the host (no GPU on the
#: sshd nodes: it skips), its load test adds 3 correctable errors to mc0 after the warm-up's run-start reading (when
#: the run has a warm-up), as a DIMM would while the GPU layers load the node
STAND_IN = '''
import time
from pathlib import Path

import pytest

from gpuaccept.runner import fanout

pytestmark = pytest.mark.host


def test_gpu_stand_in(node, gpus):
    assert gpus


def test_load_stand_in(node, request):
    if request.config.getoption("forks") != 0:
        end = time.monotonic() + 60
        while fanout.run_start_memory(node) is None and time.monotonic() < end:
            time.sleep(0.05)
        assert fanout.run_start_memory(node) is not None, "no run-start reading from the warm-up"
    ce = Path(node.host.vars["host_sysfs_root"]) / "devices" / "system" / "edac" / "mc" / "mc0" / "ce_count"
    ce.write_text(str(int(ce.read_text()) + 3) + "\\n")
'''


def _edac_tree(root: Path) -> Path:
    """A sysfs root with one EDAC controller (mc0, one DIMM) at 0 errors, laid out as ras.rst says."""
    d = root / "devices" / "system" / "edac" / "mc" / "mc0"
    (d / "dimm0").mkdir(parents=True)
    for k, v in {"mc_name": "Intel_10nm Socket#0 IMC#0", "size_mb": 65536, "ce_count": 0, "ue_count": 0,
                 "seconds_since_reset": 86400}.items():
        (d / k).write_text(f"{v}\n")
    for k, v in {"dimm_label": "CPU_SrcID#0_MC#0_Chan#0_DIMM#0", "size": 65536, "dimm_ce_count": 0,
                 "dimm_ue_count": 0}.items():
        (d / "dimm0" / k).write_text(f"{v}\n")
    return root


def test_edac_growth_during_the_gpu_layers_fails_over_the_run_window(tmp_path, sshd_nodes, known_hosts):
    """Two sshd nodes, each with its EDAC tree in tmp (``host_sysfs_root``). With the warm-up (the default), the run-start
    reading is taken before the stand-in GPU layer adds 3 correctable errors: test_host_ram_errors FAILs (hardware,
    drain-rma) over the window "run" with a rate per hour. Without a warm-up (``--forks 0``) the same growth before the
    host layer is not seen: PASS, its figure saying "window: host layer only"."""
    nodes = sshd_nodes[:2]
    inv = make_project(tmp_path, nodes, known_hosts,
                       extra_suite=(REPO / "gpuaccept" / "suites" / "test_host.py").read_text(), name="test_host.py")
    (tmp_path / "suites" / "test_a_load.py").write_text(STAND_IN)
    hv = tmp_path / "host_vars"
    hv.mkdir()
    log = tmp_path / "kern.log"
    log.write_text(f"{_now_iso(-60)} node kernel: nvme nvme0: 64/0/0 default/read/poll queues\n")
    for n in nodes:
        root = _edac_tree(tmp_path / f"sys-{n.name}")
        (hv / f"{n.name}.yml").write_text(f"kernel_log_paths: [{log}]\nhost_sysfs_root: {root}\n")

    def ram_errors(rep: Path, *extra: str):
        res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", known_hosts, "--reports", str(rep),
                         "-m", "host", *extra, timeout=180)
        doc = json.loads((rep / "results.json").read_text())
        return res, {t["host"]: t for t in doc["tests"] if t["name"].startswith("test_host_ram_errors")}

    res, tests = ram_errors(tmp_path / "rep-run")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    for n in nodes:
        t = tests[n.name]
        assert t["outcome"] == "failed", t
        assert t["action"]["action"] == "drain-rma" and t["action"]["cause"] == "hardware", t["action"]
        fig = next(f for f in t["figures"] if f["check"] == "ce_count_growth mc0")
        assert fig["value"] == 3 and fig["extra"]["window"] == "run" and fig["extra"]["per_hour"] > 0, fig
    cases = {(c["classname"], c["name"].split("[")[0]): c for c in junit(tmp_path / "rep-run" / "junit-host.xml")}
    assert "window: run" in cases[("host.node1", "test_host_ram_errors")]["text"]

    res, tests = ram_errors(tmp_path / "rep-old", "--forks", "0")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    for n in nodes:
        t = tests[n.name]
        fig = next(f for f in t["figures"] if f["check"] == "ce_count_growth mc0")
        assert t["outcome"] == "passed" and fig["value"] == 0 and fig["extra"]["window"] == "host layer only", t
    # the warm-up takes the run-start reading only for a selection that judges it
    assert all(list((tmp_path / "rep-run" / "probes" / n.name).glob("host_memory-*.json")) for n in nodes)
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", known_hosts, "--reports",
                     str(tmp_path / "rep-gpu"), "-m", "host", "-k", "gpu_stand_in", timeout=180)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    for n in nodes:
        kept = {f.name.split("-")[0] for f in (tmp_path / "rep-gpu" / "probes" / n.name).glob("*.json")}
        assert "gpu_inventory" in kept and "host_memory" not in kept, kept


def test_ram_errors_selected_alone_reads_the_node_and_a_dead_node_is_its_error(tmp_path, sshd_nodes, known_hosts):
    """``-k test_host_ram_errors`` alone: no start reading exists, yet the node is read, so a host that cannot be
    reached is an ERROR with its own cause (connectivity), not a SKIP with exit 0; a live host skips saying why
    (test_host_ram was not selected)."""
    live = sshd_nodes[0]
    inv = make_project(tmp_path, [live], known_hosts,
                       extra_suite=(REPO / "gpuaccept" / "suites" / "test_host.py").read_text(), name="test_host.py",
                       inventory_extra="dead ansible_host=127.0.0.1 ansible_port=9 ansible_user=root\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", known_hosts, "--reports", str(rep),
                     "-m", "host", "-k", "test_host_ram_errors", timeout=180)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    tests = {t["host"]: t for t in json.loads((rep / "results.json").read_text())["tests"]}
    assert tests["dead"]["outcome"] == "error", tests["dead"]
    assert [c["class"] for c in tests["dead"]["causes"]] == ["connectivity"], tests["dead"]
    assert tests[live.name]["outcome"] == "skipped", tests[live.name]
    assert "test_host_ram, which was not selected" in tests[live.name]["message"], tests[live.name]
    assert (rep / "failed-hosts.txt").read_text().split() == ["dead"]

def test_host_sysfs_root_must_be_an_absolute_path(tmp_path):
    """``host_sysfs_root`` is refused (file:line, host, var) unless it is one absolute path; an absolute one reaches the
    host_memory probe's arguments."""
    from gpuaccept.config.hostvars import HostVarError, check_hosts
    from gpuaccept.config.inventory import load_inventory
    from gpuaccept.runner.fanout import memory_args
    path = tmp_path / "inventory.ini"
    path.write_text("h host_sysfs_root=sys\n")
    with pytest.raises(HostVarError) as info:
        check_hosts(load_inventory(str(path)).hosts.values(), str(path), [])
    assert str(info.value).startswith(f"{path}:1: host h var host_sysfs_root") and "not an absolute path" in str(info.value)
    path.write_text("h host_sysfs_root=/host/sys\n")
    hosts = load_inventory(str(path)).hosts
    check_hosts(hosts.values(), str(path), [])
    assert memory_args(hosts["h"].vars) == {"sysfs": "/host/sys"} and memory_args({}) == {}
