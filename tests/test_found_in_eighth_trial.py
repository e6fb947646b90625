"""Faults found by the eighth new-user trial (2026-12-01): a GPU cloud operator runs ``-m nvlink``,
``-m gpudirect`` and ``-m "memory or compute"`` on broken and half-configured nodes (the 2xH200 replay
captures, altered; the alteration is written in each test).

- An NVLink trained at a reduced speed PASSED: the probe reads every link's speed (NVML_FI_DEV_NVLINK_GET_SPEED)
  but nothing judged it, only the active-link count. A link slower than the speed the node's other links
  trained at now fails, naming host, GPU, link, both figures and where the limit comes from.
- An InfiniBand port trained at a lower rate (a 400 Gb/s NDR HCA at 200 Gb/s HDR: cable or transceiver) PASSED
  test_rdma_ports unless the inventory set ``ib_rate_gbps``. Without that variable the ports of the node's
  compute HCAs (``ib_hcas``, else its InfiniBand ports) are now judged against the rate most of them run at.
- P2P without CUDA peer access: four lines ``p2p_unidir_bw_gbps 21.3 GB/s < min 340 GB/s``, two alike, naming
  no pair, and nothing about peer access. Each figure now names its pair (GPU index and bus id) and a pair
  without peer access fails saying so.
- GDS installed but not used: nvidia-fs loaded (mode "nvidia-fs") while cuFile fell back to compat (the
  module's read/write counters did not move) PASSED; it now fails like compat mode, unless gds_allow_compat.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from gpuaccept.runner.host import save_probe

from gpuaccept.judging import nvlink as nj
from gpuaccept.judging import storage as sj
from probe_helpers import sysfs_pci as _pci, write_line as _w
from gpuaccept.config.thresholds import load_sku_file
from project_helpers import (DATA, REPO, alter, junit, make_project, replay_captures, replay_project, replay_suite,
                             run_pytest)

H200 = load_sku_file(str(REPO / "thresholds" / "h200-sxm-141gb.yaml"))
NVML_IDS = ["00000000:00:06.0", "00000000:00:07.0"]     # the capture's two H200s


def run_probe(name: str, args: dict) -> dict:
    """A probe run here as the node runs it (its JSON document on the last stdout line)."""
    p = subprocess.run([sys.executable, f"{name}.py", json.dumps(args)], cwd=REPO / "gpuaccept" / "probes",
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _nvlink_doc() -> dict:
    return json.loads((DATA / "nvlink-80c5152746.json").read_text())["doc"]  # sample_seconds 2.0


def _half_speed_link_3_of_gpu_1(doc):
    """ALTERED: GPU 1's NVLink 3 at half the 26562 Mbps all 36 links of the capture read (still active)."""
    lk = doc["gpus"][1]["links"][3]
    assert lk["link"] == 3 and lk["active"] is True and lk["speed_mbps"] == 26562
    lk["speed_mbps"] = 13281


# -- NVLink at a reduced speed ------------------------------------------------------------------------------

def test_node_link_speed_is_what_most_links_trained_at():
    doc = _nvlink_doc()
    assert nj.node_link_speed(doc["gpus"]) == (26562, 36)
    _half_speed_link_3_of_gpu_1(doc)
    assert nj.node_link_speed(doc["gpus"]) == (26562, 35)
    assert nj.node_link_speed([]) is None
    # an unreadable speed (the H200's speed_mbps_common reads "Not Supported") is no reference
    for g in doc["gpus"]:
        for lk in g["links"]:
            lk["speed_mbps"] = {"nvml_error": "Not Supported"}
    assert nj.node_link_speed(doc["gpus"]) is None


def test_healthy_links_have_no_speed_failure():
    doc = _nvlink_doc()
    speed = nj.node_link_speed(doc["gpus"])
    for g in doc["gpus"]:
        assert [f.failure for f in nj.links(g, H200, doc["sample_seconds"], speed) if f.failure] == []


def test_slow_link_fails_naming_link_figures_and_limit_source():
    doc = _nvlink_doc()
    _half_speed_link_3_of_gpu_1(doc)
    speed = nj.node_link_speed(doc["gpus"])
    assert [f.failure for f in nj.links(doc["gpus"][0], H200, 2.0, speed) if f.failure] == []
    got = [f for f in nj.links(doc["gpus"][1], H200, 2.0, speed) if f.failure]
    assert [(f.check, f.value, f.extra["link"]) for f in got] == [("nvlink_link_speed_mbps", 13281, 3)]
    assert got[0].failure == ("NVLink 3 at 13281 Mbps (remote FFFFFFFF:FF:FF.0), below the 26562 Mbps of 35 "
                              "other active links of this node [limit: the node's own links, "
                              "NVML_FI_DEV_NVLINK_GET_SPEED]")


def test_a_sku_link_speed_floor_is_judged_where_the_file_has_one():
    import dataclasses
    from gpuaccept.config.thresholds import Limit
    lim = Limit(origin="h200-sxm-141gb", check="nvlink_link_speed_mbps", direction="min", bound=30000, unit="Mbps", source="test floor")
    sku = dataclasses.replace(H200, checks={**H200.checks, "nvlink_link_speed_mbps": lim})
    doc = _nvlink_doc()
    judged = [f for f in nj.links(doc["gpus"][0], sku, 2.0, nj.node_link_speed(doc["gpus"]))
              if f.check == "nvlink_link_speed_mbps"]
    assert len(judged) == 18 and all(f.limit is lim and f.value == 26562 for f in judged)


def test_half_speed_nvlink_fails_the_nvlink_layer(tmp_path):
    """Before: test_nvlink_links passed on this node (only the active-link count was judged)."""
    inv = replay_project(tmp_path, alter(tmp_path, "nvlink", _half_speed_link_3_of_gpu_1))
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-m", "nvlink")
    cases = {c["name"]: c for c in junit(rep / "junit-nvlink.xml")}
    case = cases["test_nvlink_links[h200-a]"]
    assert case["outcome"] == "failure", case
    assert case["message"].startswith("h200-a GPU 1 (00000000:00:07.0, serial 1650000000002): NVLink 3 at 13281 "
                                      "Mbps (remote FFFFFFFF:FF:FF.0), below the 26562 Mbps of 35 other active "
                                      "links"), case["message"]
    assert cases["test_nvlink_topology[h200-a]"]["outcome"] == "passed"


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


# -- P2P unsupported between two GPUs: the lines name the pair, and say why ----------------------------------

def _no_peer_access(doc):
    """ALTERED: CUDA says no peer access between the two H200s (as with NVLink P2P off or an IOMMU in the way);
    the copies then go through host memory at PCIe-like speed."""
    for p in doc["pairs"]:
        p["peer_access"] = False
        p["unidir_gbps"], p["bidir_gbps"] = 21.3, 30.2


def test_p2p_without_peer_access_names_each_pair_and_the_cause(tmp_path):
    """Before: four lines 'h200-a: p2p_unidir_bw_gbps 21.3 GB/s < min 340 GB/s [...]', two of each alike, no
    pair, no bus id, and nothing about peer access."""
    inv = replay_project(tmp_path, alter(tmp_path, "p2p_bandwidth", _no_peer_access))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-m", "nvlink")
    case = {c["name"]: c for c in junit(rep / "junit-nvlink.xml")}["test_p2p_bandwidth[h200-a]"]
    assert case["outcome"] == "failure", case
    a, b = "GPU 0 (00000000:00:06.0)", "GPU 1 (00000000:00:07.0)"
    assert case["message"] == (f"h200-a: P2P {a} -> {b}: CUDA peer access not available "
                               "(torch.cuda.can_device_access_peer False): copies staged through host memory; the "
                               "SKU expects NVLink P2P between every pair")
    # each pair's line, told apart by its direction (pytest prints the failure text once more where CI is set)
    lines = {ln for ln in res.stdout.splitlines() if ln.startswith("h200-a: p2p_unidir_bw_gbps")}
    assert lines == {f"h200-a: p2p_unidir_bw_gbps 21.3 GB/s < min 340 GB/s ({x} -> {y}) "
                     "[limit: h200-sxm-141gb.yaml checks.p2p_unidir_bw_gbps]" for x, y in ((a, b), (b, a))}


def test_healthy_p2p_has_no_failure():
    doc = json.loads((DATA / "p2p_bandwidth-bf21a9e8fb.json").read_text())["doc"]
    got = nj.p2p_bandwidth(doc, H200, [0, 1])
    assert [f.failure for f in got if f.failure] == []
    assert [f.context for f in got if f.check == "p2p_unidir_bw_gbps"] == ["GPU 0 -> GPU 1", "GPU 1 -> GPU 0"]


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


# -- a GPU pair without NVLink P2P: the topology line names both bus ids -------------------------------------

def test_topology_failure_names_bus_ids():
    """ALTERED: the capture's one pair read as NVML would with P2P off (statuses 'not supported') over PHB.
    Before: 'GPU 0 <-> GPU 1 not NVLink-connected ...', no bus id."""
    doc = json.loads((DATA / "nvlink-bf21a9e8fb.json").read_text())["doc"]
    pair = doc["pairs"][0]
    pair.update(nvlink=False, p2p={"read": "not supported", "write": "not supported", "nvlink": "not supported"})
    got = [f.failure for f in nj.topology(doc["pairs"], H200, doc["gpus"]) if f.failure]
    assert got == ["GPU 0 (00000000:00:06.0) <-> GPU 1 (00000000:00:07.0) not NVLink-connected (topology PHB); "
                   "GPU 0 (00000000:00:06.0) <-> GPU 1 (00000000:00:07.0) P2P not available: "
                   "{'read': 'not supported', 'write': 'not supported'}"]
    assert [f.failure for f in nj.topology(json.loads((DATA / "nvlink-bf21a9e8fb.json").read_text())["doc"]["pairs"],
                                           H200, doc["gpus"])] == [None]
