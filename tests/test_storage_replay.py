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

from gpuaccept.judging import storage as sj
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
    # altered: the cuda run's per-GPU list, one GPU of the capture's two; the host watch's document left out
    # (this replay judges GPU coverage; what else ran on the CI machine meanwhile is tests/test_hostwatch.py's)
    cpu.pop("host_conditions", None)
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


# -- an InfiniBand port at a lower rate ---------------------------------------------------------------------

COMPUTE, STORAGE = "MT_0000000838", "MT_0000000970"  # board_id texts of two parts (a compute, a storage HCA)


def _ib_node(root, ports: dict[str, tuple]) -> dict:
    """The rdma probe on a sysfs/proc tree: both H200s and one HCA per entry of ``ports`` (name -> (state,
    link_layer, rate file text[, board_id], default COMPUTE)), each behind the one PCIe switch, port 1 LinkUp,
    hca_type MT4129; nvidia-peermem registered."""
    sysfs, proc = root / "sys", root / "proc"
    _pci(sysfs, ["0000:00:01.0", "0000:10:00.0", "0000:11:00.0", "0000:00:06.0"])
    _pci(sysfs, ["0000:00:01.0", "0000:10:00.0", "0000:11:02.0", "0000:00:07.0"])
    for i, (name, (state, layer, rate, *board)) in enumerate(ports.items()):
        nic = _pci(sysfs, ["0000:00:01.0", "0000:10:00.0", f"0000:11:0{3 + i}.0", f"0000:{0x13 + i:02x}:00.0"])
        ib = sysfs / "class" / "infiniband" / name
        ib.mkdir(parents=True)
        (ib / "device").symlink_to(nic)
        _w(ib / "hca_type", "MT4129")
        _w(ib / "board_id", board[0] if board else COMPUTE)
        for k, v in (("state", state), ("phys_state", "5: LinkUp"), ("link_layer", layer), ("rate", rate)):
            _w(ib / "ports" / "1" / k, v)
    _w(proc / "modules", "nvidia_peermem 16384 0 - Live 0xffffffffc0e8e000 (OE)")
    _w(proc / "kallsyms", "ffffffff8a0 T dma_buf_export")
    _w(sysfs / "kernel" / "mm" / "memory_peers" / "nv_mem" / "version", "2.0")
    return run_probe("rdma", {"sysfs": str(sysfs), "proc": str(proc), "gpu_bus_ids": NVML_IDS})


NDR, HDR = "400 Gb/sec (4X NDR)", "200 Gb/sec (4X HDR)"


UP = "4: ACTIVE"


def test_slow_ports_unit(tmp_path):
    doc = _ib_node(tmp_path / "a", {"mlx5_0": (UP, "InfiniBand", NDR), "mlx5_1": (UP, "InfiniBand", HDR),
                                    "mlx5_2": (UP, "InfiniBand", NDR), "mlx5_3": (UP, "Ethernet", "100 Gb/sec (4X EDR)"),
                                    # a storage HCA of another board on an HDR fabric: healthy, not compared
                                    "mlx5_4": (UP, "InfiniBand", HDR, STORAGE), "mlx5_5": (UP, "InfiniBand", HDR, STORAGE)})
    assert [d["board_id"] for d in doc["devices"]] == [COMPUTE] * 4 + [STORAGE] * 2
    assert sj.slow_ports(doc["devices"]) == [
        "mlx5_1 port 1 (InfiniBand, 0000:14:00.0): rate 200 Gb/sec (4X HDR), below the 400 Gb/s of 2 other "
        f"InfiniBand port(s) of this node (board {COMPUTE}) [limit: the node's own ports; inventory var ib_rate_gbps "
        "sets a fixed floor, ib_hcas the HCAs judged]"]
    # the Ethernet port (a management NIC) is compared only when ib_hcas lists it; alone in its layer: no reference
    assert len(sj.slow_ports(doc["devices"], ["mlx5_0", "mlx5_3"])) == 0
    assert sj.slow_ports(doc["devices"], ["mlx5_0", "mlx5_2"]) == []
    # a DOWN port is test_rdma_ports' own failure, not a rate: not compared
    down = _ib_node(tmp_path / "b", {"mlx5_0": (UP, "InfiniBand", NDR), "mlx5_1": ("1: DOWN", "InfiniBand", HDR)})
    assert sj.slow_ports(down["devices"]) == []


def test_hdr_port_on_an_ndr_node_fails_rdma_ports(tmp_path):
    """Before: passed (no ib_rate_gbps in the inventory). The healthy node (both NDR) still passes."""
    for name, second, want in (("sick", HDR, "failure"), ("healthy", NDR, "passed")):
        t = tmp_path / name
        doc = _ib_node(t / "tree", {"mlx5_0": (UP, "InfiniBand", NDR), "mlx5_1": (UP, "InfiniBand", second)})
        (t / "p").mkdir()
        got = replay_suite(t / "p", replay_captures(t / "p", {"rdma": ({}, doc)}), "test_gpudirect.py",
                     extra_vars="ib_hcas='[\"mlx5_0\",\"mlx5_1\"]'", k="rdma_ports")
        case = got["test_rdma_ports"]
        assert case["outcome"] == want, case
    assert case["message"] is None  # the healthy node's
    # no ib_hcas either: the node's InfiniBand ports are compared
    doc = _ib_node(tmp_path / "bare", {"mlx5_0": (UP, "InfiniBand", NDR), "mlx5_1": (UP, "InfiniBand", HDR)})
    (tmp_path / "bare" / "p").mkdir()
    bare = tmp_path / "bare" / "p"
    sick = replay_suite(bare, replay_captures(bare, {"rdma": ({}, doc)}), "test_gpudirect.py",
                        k="rdma_ports")["test_rdma_ports"]
    assert sick["message"] == (
        "h200-a: mlx5_1 port 1 (InfiniBand, 0000:14:00.0): rate 200 Gb/sec (4X HDR), below the 400 Gb/s of 1 other "
        f"InfiniBand port(s) of this node (board {COMPUTE}) [limit: the node's own ports; inventory var "
        "ib_rate_gbps sets a fixed floor, ib_hcas the HCAs judged]")


# -- GDS installed but not used: nvidia-fs loaded, its counters still ------------------------------------------

def _gds_run(tmp_path, reads: int | None, allow_compat: bool = False) -> dict:
    """test_gds on the 2xH200 replay with a gds document of mode nvidia-fs (cuFile found, nvidia-fs loaded) whose
    two GPUs moved 1 GiB each way at the figures below; ``reads``: the nvidia-fs read-op delta of each GPU
    (writes 256). The detection part is the probe's own output on this machine, ALTERED as written."""
    scratch = tmp_path / "scratch"
    scratch.mkdir(parents=True)
    doc = run_probe("gds", {})
    doc["cufile"] = {**doc["cufile"], "found": True, "paths": ["libcufile.so"]}
    doc["nvidia_fs"] = {**doc["nvidia_fs"], "loaded": True, "version": "2.26", "proc": True}
    doc["mode"] = "nvidia-fs"
    doc["gpus"] = [{"index": i, "name": "NVIDIA H200", "pci_bus_id": bus, "bytes": 1 << 30,
                    "gds_write_gbps": 6.1, "gds_read_gbps": 6.4, "bounce_read_gbps": 6.3, "verified": True,
                    "nvidia_fs_ops": {"reads": reads, "writes": 256}} for i, bus in enumerate(NVML_IDS)]
    where = run_probe("storage_mounts", {"paths": [str(scratch)]})
    (tmp_path / "p").mkdir()
    caps = replay_captures(tmp_path / "p", {"storage_mounts": ({"paths": [str(scratch)]}, where),
                                     "gds": ({"path": str(scratch), "gpus": "all"}, doc)})
    extra = f"gds_paths={scratch} gds_allow_root_fs=true" + (" gds_allow_compat=true" if allow_compat else "")
    return replay_suite(tmp_path / "p", caps, "test_gpudirect.py", k="test_gds", extra_vars=extra)["test_gds"]


def test_gds_bypass_unit():
    assert sj.gds_bypass("nvidia-fs", {"reads": 0, "writes": 256}).startswith(
        "GDS transfer bypassed nvidia-fs: the module is loaded but its reads counter(s) did not move")
    assert sj.gds_bypass("nvidia-fs", {"reads": 256, "writes": 256}) is None
    assert sj.gds_bypass("nvidia-fs", {"reads": None, "writes": None}) is None  # IO stats off: nothing known
    assert sj.gds_bypass("nvidia-fs", None) is None
    assert sj.gds_bypass("compat", {"reads": 0, "writes": 0}) is None  # compat is judged on its own
    # P2PDMA enabled in kernel and cufile.json: cuFile may go direct past nvidia-fs, a healthy node
    both = {"kernel": True, "cufile_json_use_pci_p2pdma": True}
    assert sj.gds_bypass("nvidia-fs", {"reads": 0, "writes": 0}, both) is None
    assert sj.gds_bypass("nvidia-fs", {"reads": 0, "writes": 9}, {**both, "kernel": False}) is not None


def test_gds_that_bypassed_nvidia_fs_fails(tmp_path):
    """Before: passed (mode 'nvidia-fs' from the loaded module; the op counters were recorded, never read)."""
    case = _gds_run(tmp_path / "sick", reads=0)
    assert case["outcome"] == "failure", case
    assert case["message"].startswith("h200-a GPU 0 (00000000:00:06.0, serial 1650000000001): GDS transfer "
                                      "bypassed nvidia-fs: the module is loaded but its reads counter(s)"), case
    assert _gds_run(tmp_path / "allowed", reads=0, allow_compat=True)["outcome"] == "passed"
    assert _gds_run(tmp_path / "healthy", reads=256)["outcome"] == "passed"


def test_declared_hcas_on_a_node_with_no_rdma_device_is_the_nodes_configuration(tmp_path):
    """ib_hcas declares two HCAs, the rdma probe (on a tree with no /sys/class/infiniband) lists none: the RDMA
    drivers are not loaded or the inventory is wrong: configuration (fix-config), not a dead NIC."""
    doc = _ib_node(tmp_path / "tree", {})
    assert doc["devices"] == []
    (tmp_path / "p").mkdir()
    caps = replay_captures(tmp_path / "p", {"rdma": ({}, doc)})
    got = replay_suite(tmp_path / "p", caps, "test_gpudirect.py", extra_vars="ib_hcas='[\"mlx5_0\",\"mlx5_1\"]'",
                       k="rdma_ports or gpudirect_rdma")
    assert got["test_rdma_ports"]["outcome"] == "failure" and "ib_hcas" in got["test_rdma_ports"]["message"]
    (t,) = [t for t in json.loads((tmp_path / "p" / "rep" / "results.json").read_text())["tests"]
            if "test_rdma_ports" in t["nodeid"]]
    (entry,) = t["failures"]
    assert entry["cause"]["kind"] == "rdma_device_missing" and entry["action"]["action"] == "fix-config", entry
