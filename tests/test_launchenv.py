"""The launch environment (probe gpuaccept/probes/launch_env.py, judges gpuaccept/judging/launchenv.py):
the probe runs for real on this machine, on a real tmpfs standing for /dev/shm and under prlimit for memlock."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from gpuaccept.judging import actions, launchenv
from probe_helpers import PROBES, run_probe


def _probe(args: dict, prefix=()) -> dict:
    out = subprocess.run([*prefix, sys.executable, str(PROBES / "launch_env.py"), __import__("json").dumps(args)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return __import__("json").loads(out.stdout.strip().splitlines()[-1])


def test_shm_need_follows_the_data_file():
    assert launchenv.shm_need_bytes(1) == 7340384
    assert launchenv.shm_need_bytes(8) == 8 * 7340384 + 56 * 9637888  # 571 MiB
    assert launchenv.shm_need_bytes(0) == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_small_and_a_full_tmpfs_as_dev_shm(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(shm)], check=True)
    try:
        doc = _probe({"shm_path": str(shm), "torch_nccl": False})
        assert doc["shm"]["fs_type"] == "tmpfs" and doc["shm"]["size_bytes"] == 16 * 2**20
        found = launchenv.shm(doc, 2)  # 2 GPUs need 32 MiB
        (fail,) = [f for f in found if f.failure]
        assert fail.failure == f"{shm} is 16 MiB, NCCL's shared-memory transport needs 32 MiB for 2 GPUs"
        assert actions.for_finding("test_launch_environment", fail.check, cause=fail.cause).action == "fix-config"
        assert not [f for f in launchenv.shm(doc, 1) if f.failure]  # one GPU needs 7 MiB
        subprocess.run(["dd", "if=/dev/zero", f"of={shm}/fill", "bs=1M", "count=12"], check=True,
                       capture_output=True)
        (full,) = [f for f in launchenv.shm(_probe({"shm_path": str(shm), "torch_nccl": False}), 1) if f.failure]
        assert full.cause.cls == "capacity" and "has 4 MiB free of 16 MiB" in full.failure
        assert actions.for_finding("test_launch_environment", full.check, cause=full.cause).action == "free-space"
    finally:
        subprocess.run(["umount", str(shm)], check=False)


@pytest.mark.skipif(not shutil.which("prlimit"), reason="prlimit (util-linux) not installed")
def test_memlock_as_the_session_sees_it():
    low = _probe({"torch_nccl": False}, ["prlimit", "--memlock=65536:65536"])
    assert low["memlock"] == {"soft_kib": 64, "hard_kib": 64}
    (f,) = launchenv.memlock(low)
    assert f.failure == "locked-memory limit 64 KiB in the probes' session, RDMA registration needs unlimited (ulimit -l)"
    assert actions.for_finding("test_launch_environment", f.check, cause=f.cause).action == "fix-config"
    import resource
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard == resource.RLIM_INFINITY:  # raising it needs CAP_SYS_RESOURCE, which a container may lack
        high = _probe({"torch_nccl": False}, ["prlimit", "--memlock=unlimited:unlimited"])
        assert high["memlock"]["soft_kib"] == "unlimited" and launchenv.memlock(high)[0].failure is None
    else:
        high = _probe({"torch_nccl": False}, ["prlimit", f"--memlock={hard}:{hard}"])
        assert high["memlock"]["soft_kib"] == hard // 1024 and launchenv.memlock(high)[0].failure
    assert launchenv.memlock({"memlock": {"soft_kib": "unlimited"}})[0].failure is None


def test_modules_read_from_this_machine(tmp_path):
    doc = _probe({"torch_nccl": False})
    assert doc["modules"]["source"] in ("/proc/modules", "/sys/module")
    if not doc["modules"]["nvidia_uvm"]:  # this CPU machine: no NVIDIA modules
        found = launchenv.modules(doc, gpudirect=True)
        assert [f.failure for f in found if f.failure] == [
            "kernel module nvidia_uvm not loaded: NVML answers, CUDA fails",
            "GPUDirect RDMA expected (an RDMA NIC beside the GPUs) but neither nvidia_peermem is loaded nor the "
            "dma-buf path open"]
    # a module list of our own (the probe's proc_modules argument): nvidia_uvm and nvidia_peermem loaded
    mods = tmp_path / "modules"
    mods.write_text("nvidia_uvm 1 0 - Live 0x0\nnvidia_peermem 16384 0 - Live 0x0\nnvidia 1 2 - Live 0x0\n")
    doc = _probe({"torch_nccl": False, "proc_modules": str(mods)})
    assert not [f for f in launchenv.modules(doc, gpudirect=True) if f.failure]


def test_nccl_version_and_plugin_split_blames_the_odd_host():
    docs = {h: {"nccl": {"torch_version": "2.21.5", "libraries": [], "net_plugins": []}} for h in ("a", "b", "c")}
    docs["c"]["nccl"]["torch_version"] = "2.18.1"
    docs["b"]["nccl"]["net_plugin_env"] = "aws-ofi"
    ids = {h: launchenv.nccl_identity(d) for h, d in docs.items()}
    assert ids == {"a": ("2.21.5", "none"), "b": ("2.21.5", "aws-ofi"), "c": ("2.18.1", "none")}
    assert launchenv.split({h: v for h, (v, _) in ids.items()}, "NCCL") == [
        ("c", "NCCL 2.18.1, while 2 of 3 hosts have 2.21.5")]
    assert launchenv.split({h: p for h, (_, p) in ids.items()}, "NCCL network plugin") == [
        ("b", "NCCL network plugin aws-ofi, while 2 of 3 hosts have none")]
    assert len(launchenv.split({"a": "1", "b": "2"}, "NCCL")) == 2  # a tie blames both
    assert launchenv.nccl_identity({"nccl": {"libraries": ["/usr/lib/libnccl.so.2.23.4"]}}) == ("2.23.4", "none")


def test_probe_without_cuda_says_why():
    rc, doc, _ = run_probe("launch_env", {})
    assert rc == 0 and doc["nccl"]["torch_version"] is None and doc["nccl"]["torch_error"]


def test_the_h200_field_capture_meets_the_launch_needs():
    """The 1×H200 capture (tests/data/h200x1-field/launch_env.json): a 128 GiB /dev/shm, memlock unlimited,
    nvidia_uvm loaded, the dma-buf path open (open kernel module on 6.18), NCCL 2.28.9 from torch; the same document
    with 8 ranks on a 256 MiB /dev/shm fails as configuration."""
    import json
    from pathlib import Path
    doc = json.loads((Path(__file__).resolve().parent / "data" / "h200x1-field" / "launch_env.json").read_text())
    assert all(f.failure is None for f in launchenv.shm(doc, 1) + launchenv.memlock(doc)
               + launchenv.modules(doc, gpudirect=True))
    assert launchenv.nccl_identity(doc)[0] == "2.28.9"
    small = {**doc, "shm": {**doc["shm"], "size_bytes": 256 << 20, "free_bytes": 256 << 20}}
    bad = [f for f in launchenv.shm(small, 8) if f.failure]
    assert bad and all(f.cause.cls == "configuration" for f in bad)


def test_an_unread_nccl_version_does_not_vote():
    """A host whose torch does not load and which has no libnccl.so gives no version: it is left out of the vote
    (not the majority "none" that blames the one host that was read), and named by nccl_unread."""
    read = {"nccl": {"torch_version": "2.28.9", "torch_error": None, "libraries": [], "net_plugins": []}}
    gone = {"nccl": {"torch_version": None, "torch_error": "ModuleNotFoundError: No module named 'torch'",
                     "libraries": [], "net_plugins": []}}
    assert launchenv.nccl_identity(gone) == (None, None)
    assert launchenv.nccl_unread(gone)["torch_error"].startswith("ModuleNotFoundError")
    assert launchenv.nccl_unread(read) is None
    ids = {"r1": launchenv.nccl_identity(read), "r2": launchenv.nccl_identity(gone), "r3": launchenv.nccl_identity(gone)}
    assert launchenv.split({h: v for h, (v, _) in ids.items()}, "NCCL") == []
    assert launchenv.split({h: p for h, (_, p) in ids.items()}, "NCCL network plugin") == []
    # among the hosts read, the odd one is still blamed
    assert launchenv.split({"a": "2.28.9", "b": "2.28.9", "c": "2.21.5", "d": None}, "NCCL") == [
        ("c", "NCCL 2.21.5, while 2 of 3 hosts have 2.28.9")]


def test_nccl_versions_end_to_end_puts_the_fix_on_the_hosts_without_nccl(tmp_path):
    """suites/test_nccl_env.py test_nccl_versions over three replay hosts, each with its own GPU UUIDs and a saved
    launch_env: r1 has torch's NCCL 2.28.9 (the 1xH200 field capture), r2 and r3 cannot import torch. r1 is not
    blamed; r2 and r3 each fail under their own name, configuration, install torch."""
    import json
    from pathlib import Path

    from gpuaccept.runner.replay import save_probe
    from project_helpers import DATA, fleet_test, junit
    field = json.loads((Path(__file__).resolve().parent / "data" / "h200x1-field" / "launch_env.json").read_text())
    inv_doc = json.loads(next(DATA.glob("gpu_inventory-*.json")).read_text())
    lines = []
    for i, host in enumerate(("r1", "r2", "r3"), 1):
        caps = tmp_path / host / "captures"
        caps.mkdir(parents=True)
        text = json.dumps(inv_doc["doc"]).replace("GPU-00000000-0000-0000-0000-00000000000",
                                                 f"GPU-00000000-0000-0000-0000-0000000{i}000")
        save_probe(str(caps), "gpu_inventory", inv_doc["args"], json.loads(text))
        doc = json.loads(json.dumps(field))
        if host != "r1":
            doc["nccl"] = {"torch_version": None, "torch_error": "ModuleNotFoundError: No module named 'torch'",
                           "libraries": [], "net_plugin_env": None, "net_plugins": []}
        save_probe(str(caps), "launch_env", {}, doc)
        lines.append(f"{host} ansible_connection=local gpuaccept_replay={caps} gpu_sku=h200-sxm-141gb gpus_per_node=2")
    rep, t = fleet_test(tmp_path, lines, "test_nccl_env.py", "test_nccl_versions")
    assert t["outcome"] == "failed", t
    assert sorted(f["host"] for f in t["failures"]) == ["r2", "r3"], t["failures"]
    for f in t["failures"]:
        assert f["cause"]["class"] == "configuration" and f["cause"]["kind"] == "nccl_not_found", f
        assert f["action"]["action"] == "fix-config" and "install torch" in f["action"]["command"], f
        assert "No module named 'torch'" in f["line"]
    (case,) = [c for c in junit(rep / "junit-nccl.xml") if c["name"].startswith("test_nccl_versions")]
    assert "r1" not in case["message"], case


def test_nccl_versions_skip_says_why_no_version_was_read(tmp_path):
    """A host with GPUs whose capture holds no launch_env document: test_nccl_versions skips saying the version of
    no host was read and why (it had said "no host with an NVIDIA GPU in the selection" beside 2 H200s)."""
    import json

    from project_helpers import DATA, replay_project, run_pytest
    inv = replay_project(tmp_path, DATA)
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "test_nccl_versions")
    assert res.returncode in (0, 1, 5), res.stdout[-2000:]
    t = next(t for t in json.loads((rep / "results.json").read_text())["tests"]
             if t["nodeid"].endswith("test_nccl_versions"))
    assert t["outcome"] == "skipped", t
    assert t["message"].startswith("the NCCL version of no host was read (h200-a: the replayed capture has no "
                                   "launch_env document"), t["message"]
    assert "no host with an NVIDIA GPU" not in t["message"]
