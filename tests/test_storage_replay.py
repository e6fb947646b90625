"""The gpudirect and storage -> GPU suites end to end on this GPU-less, NIC-less machine, through the
``gpuaccept_replay`` inventory var: the GPUs are the real 2xH200 capture (tests/data/replay-h200x2); the rdma,
gds and storage_mounts documents are what those probes print here on proc/sysfs-shaped trees and real folders;
every alteration of a document is written in the test that makes it.
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from gpuaccept.runner.host import save_probe
from probe_helpers import sysfs_pci as _pci, write_line as _w
from project_helpers import junit, make_project, replay_captures, replay_suite, run_pytest

REPO = Path(__file__).resolve().parent.parent
PROBES = REPO / "gpuaccept" / "probes"
DATA = REPO / "tests" / "data" / "replay-h200x2"
NVML_IDS = ["00000000:00:06.0", "00000000:00:07.0"]     # the capture's two H200s


def _suite_constant(suite: str, name: str):
    """A module-level constant of ``suites/<suite>`` (the arguments it gives a probe), read from its source."""
    tree = ast.parse((REPO / "gpuaccept" / "suites" / suite).read_text())  # the packaged suite (suites/ holds shims)
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == name)
    return eval(compile(ast.Expression(node.value), suite, "eval"), {"__builtins__": {}})  # literals and 1 << 20


#: the all-reduce forced onto the network that suites/test_gpudirect.py runs when the kernel shows no GDR path
NCCL_NET_LOOPBACK = _suite_constant("test_gpudirect.py", "NCCL_NET_LOOPBACK")


def run_probe(name: str, args: dict) -> dict:
    p = subprocess.run([sys.executable, f"{name}.py", json.dumps(args)], cwd=PROBES, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def saved(name: str) -> dict:
    """The capture's saved document of ``name`` (one per probe)."""
    return json.loads(next(DATA.glob(f"{name}-*.json")).read_text())


def rdma_doc(root: Path, registered: bool) -> dict:
    """The rdma probe on a tree: both H200s and mlx5_0 behind one PCIe switch, port ACTIVE; nvidia_peermem in
    /proc/modules (Live); ib_core's nv_mem registration only when ``registered``; no dma-buf path."""
    sysfs, proc = root / "sys", root / "proc"
    _pci(sysfs, ["0000:00:01.0", "0000:10:00.0", "0000:11:00.0", "0000:00:06.0"])
    _pci(sysfs, ["0000:00:01.0", "0000:10:00.0", "0000:11:02.0", "0000:00:07.0"])
    nic = _pci(sysfs, ["0000:00:01.0", "0000:10:00.0", "0000:11:01.0", "0000:13:00.0"])
    ib = sysfs / "class" / "infiniband" / "mlx5_0"
    ib.mkdir(parents=True)
    (ib / "device").symlink_to(nic)
    for k, v in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"), ("link_layer", "InfiniBand"),
                 ("rate", "400 Gb/sec (4X NDR)")):
        _w(ib / "ports" / "1" / k, v)
    _w(proc / "modules", "nvidia_peermem 16384 0 - Live 0xffffffffc0e8e000 (OE)")
    _w(proc / "kallsyms", "ffffffff8a0 T dma_buf_export")
    if registered:
        _w(sysfs / "kernel" / "mm" / "memory_peers" / "nv_mem" / "version", "2.0")
    return run_probe("rdma", {"sysfs": str(sysfs), "proc": str(proc), "gpu_bus_ids": NVML_IDS})


def nccl_over_network(transports: dict) -> dict:
    """The capture's all-reduce document altered the way a run with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
    reads: its channels are network channels (``transports``) instead of P2P/CUMEM."""
    doc = saved("nccl_allreduce")["doc"]
    doc["transports"] = transports
    doc["transport_classes"] = {"NET/IB": sum(transports.values())}
    return doc


def test_peermem_listed_not_registered_fails(tmp_path):
    """Before: "ready" because nvidia_peermem is in the module list -> passed. Now: no ib_core registration and
    NCCL's own channels run without GDRDMA -> failed, every missing piece named."""
    caps = replay_captures(tmp_path, {"rdma": ({}, rdma_doc(tmp_path / "t", registered=False)),
                               "nccl_allreduce": (NCCL_NET_LOOPBACK, nccl_over_network({"NET/IB/0": 4}))})
    got = replay_suite(tmp_path, caps, "test_gpudirect.py", k="gpudirect_rdma")
    case = got["test_gpudirect_rdma"]
    assert case["outcome"] == "failure", case
    assert case["message"].startswith(
        "h200-a: GPUDirect RDMA not ready: nvidia_peermem is listed (state Live) but no peer-memory client is "
        "registered with ib_core (/sys/kernel/mm/memory_peers/nv_mem/version absent; ib_register_peer_memory_client"
        " absent in kallsyms)"), case["message"]
    assert "NCCL's network channels: NET/IB/0 (no GDRDMA)" in case["message"]
    fig = [f for f in got["_figures"] if f["check"] == "gpudirect_rdma_ready"][0]
    assert fig["value"] is False and fig["extra"]["nccl"]["transports"] == {"NET/IB/0": 4}
    assert [f["value"] for f in got["_figures"] if f["check"] == "nearest_nic"] == ["PIX", "PIX"]


def test_nccl_gdrdma_statement_is_ready(tmp_path):
    caps = replay_captures(tmp_path, {"rdma": ({}, rdma_doc(tmp_path / "t", registered=False)),
                               "nccl_allreduce": (NCCL_NET_LOOPBACK, nccl_over_network({"NET/IB/0/GDRDMA": 4}))})
    got = replay_suite(tmp_path, caps, "test_gpudirect.py", k="gpudirect_rdma")
    assert got["test_gpudirect_rdma"]["outcome"] == "passed", got["test_gpudirect_rdma"]
    fig = [f for f in got["_figures"] if f["check"] == "gpudirect_rdma_ready"][0]
    assert fig["value"] is True and fig["extra"]["via"] == "nccl"


def test_registered_peer_client_is_ready_without_nccl(tmp_path):
    """The kernel's registration suffices: NCCL is not run (no nccl_allreduce document is even saved)."""
    caps = replay_captures(tmp_path, {"rdma": ({}, rdma_doc(tmp_path / "t", registered=True))})
    got = replay_suite(tmp_path, caps, "test_gpudirect.py", k="gpudirect_rdma")
    assert got["test_gpudirect_rdma"]["outcome"] == "passed", got["test_gpudirect_rdma"]
    fig = [f for f in got["_figures"] if f["check"] == "gpudirect_rdma_ready"][0]
    assert fig["extra"]["via"] == "nvidia-peermem" and fig["extra"]["nccl"] is None


def gds_detection(**change) -> dict:
    """The gds probe's detection-only document from this machine, with ``change`` laid over it."""
    doc = run_probe("gds", {})
    for k, v in change.items():
        doc[k] = {**doc[k], **v} if isinstance(v, dict) else v
    return doc


def test_gds_failure_is_never_turned_into_a_skip(tmp_path):
    """nvidia-fs loaded but no cuFile, no GDS path configured. Before: the failure was recorded, then the test
    skipped ("no gds_paths ... configured"). Now it fails."""
    caps = replay_captures(tmp_path, {"gds": ({}, gds_detection(nvidia_fs={"loaded": True}, cufile={"found": False,
                                                                                             "paths": []},
                                                         mode="nvidia-fs"))})
    got = replay_suite(tmp_path, caps, "test_gpudirect.py", k="test_gds")
    assert got["test_gds"]["outcome"] == "failure", got["test_gds"]
    assert got["test_gds"]["message"] == ("h200-a: nvidia-fs loaded but cuFile (libcufile.so) not found; "
                                          "GDS mode nvidia-fs")


def test_gds_limit_without_path_is_an_error(tmp_path):
    """A GDS floor with no directory to measure it. Before: skipped ("GDS not installed"). Now: an error."""
    caps = replay_captures(tmp_path, {"gds": ({}, gds_detection())})
    got = replay_suite(tmp_path, caps, "test_gpudirect.py", k="test_gds",
                 extra_vars="storage_limits='{\"gds_read_gbps\": 5}'")
    assert got["test_gds"]["outcome"] == "error", got["test_gds"]
    assert got["test_gds"]["message"] == ("h200-a: inventory var storage_limits sets gds_read_gbps but neither "
                                          "gds_paths nor storage_paths is set: nothing is measured to judge")


def test_gds_path_on_os_disk_not_transferred(tmp_path):
    """gds_paths on the root filesystem: fails naming it and the variable that would allow it; no GDS figure."""
    where = run_probe("storage_mounts", {"paths": ["/"]})
    caps = replay_captures(tmp_path, {"storage_mounts": ({"paths": ["/"]}, where),
                               "gds": ({}, gds_detection(cufile={"found": True, "paths": ["libcufile.so"]}))})
    got = replay_suite(tmp_path, caps, "test_gpudirect.py", k="test_gds", extra_vars="gds_paths=/")
    case = got["test_gds"]
    assert case["outcome"] == "failure", case
    assert "h200-a: gds_paths / is on the root filesystem" in case["message"]
    assert "set gds_allow_root_fs: true" in case["message"]
    assert not [f for f in got["_figures"] if f["check"] in ("gds_read_gbps", "gds_write_gbps")]


def test_storage_to_gpu_every_nvml_gpu_measured(tmp_path):
    """A storage -> GPU document with a figure for GPU 0 only (torch saw one GPU: CUDA_VISIBLE_DEVICES=0 on the
    node): GPU 0 is recorded, then the test errors naming GPU 1 and its PCI bus id."""
    where = run_probe("storage_mounts", {"paths": ["/"]})
    cpu = run_probe("storage_to_gpu", {"path": str(tmp_path), "device": "cpu", "bytes": 4 << 20,
                                       "chunk_bytes": 1 << 20, "min_free_bytes": 64 << 20})
    # altered: the cuda run's per-GPU list, one GPU of the capture's two
    cpu["gpus"] = [{"index": 0, "name": "NVIDIA H200", "pci_bus_id": NVML_IDS[0], "h2d_gbps": 50.0,
                    "end_to_end_gbps": cpu["end_to_end_gbps"], "bounding_stage": cpu["bounding_stage"]}]
    caps = replay_captures(tmp_path, {"storage_mounts": ({"paths": ["/"]}, where), "storage_to_gpu": (
        {"path": "/", "device": "cuda", "gpus": "all"}, cpu)})  # what suites/test_storage.py asks for storage_paths=/
    got = replay_suite(tmp_path, caps, "test_storage.py", k="storage_to_gpu",
                 extra_vars="storage_paths=/ storage_allow_root_fs=true")
    case = got["test_storage_to_gpu"]
    assert case["outcome"] == "error", case
    assert case["message"] == ("h200-a: storage_to_gpu gave no figure for GPU 1 (00000000:00:07.0) of the 2 GPUs "
                               "NVML lists (CUDA_VISIBLE_DEVICES on the node?)")
    assert [f["gpu"] for f in got["_figures"] if f["check"] == "storage_to_gpu_gbps"] == [0]
