"""The GPU suites end to end on this GPU-less machine, judged from real probe documents that the main job
saved on a 2xH200 SXM node (tests/data/replay-h200x2, driver 580.159.04, 2026-11-29), replayed through the
``gpuaccept_replay`` inventory var. The healthy capture passes every GPU test; copies altered the way sick
nodes read fail with messages naming host, GPU index, PCI bus id and serial."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from test_e2e import junit, make_project, run_pytest

DATA = Path(__file__).resolve().parent / "data" / "replay-h200x2"
GPU_LAYERS = "health or memory or compute or nvlink or (nccl and not multinode)"


def replay_project(tmp_path: Path, captures: Path, extra_vars: str = "") -> Path:
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={captures} gpu_sku=h200-sxm-141gb "
                   f"gpus_per_node=2 {extra_vars}\n")
    return inv


def outcomes(rep: Path) -> dict[str, dict]:
    out = {}
    for layer in ("health", "memory", "compute", "nvlink", "nccl"):
        path = rep / f"junit-{layer}.xml"
        for c in junit(path) if path.exists() else []:
            out[c["name"].split("[")[0]] = c
    return out


def alter(tmp_path: Path, probe: str, change) -> Path:
    """A copy of the captures with ``change(doc)`` applied to the saved document(s) of ``probe``."""
    dst = tmp_path / "captures"
    shutil.copytree(DATA, dst)
    for f in dst.glob(f"{probe}-*.json"):
        saved = json.loads(f.read_text())
        change(saved["doc"])
        f.write_text(json.dumps(saved))
    return dst


def test_healthy_h200_capture_passes(tmp_path):
    inv = replay_project(tmp_path, DATA)
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", GPU_LAYERS, "-s")
    assert res.returncode == 0, res.stdout[-4000:]
    got = outcomes(rep)
    for name in ("test_gpu_inventory", "test_ecc", "test_row_remapping", "test_pcie_link", "test_fabric",
                 "test_hbm_bandwidth", "test_pcie_bandwidth", "test_tensor_tflops", "test_launch_overhead",
                 "test_nvlink_links", "test_nvlink_topology", "test_p2p_bandwidth", "test_allreduce"):
        assert got[name]["outcome"] == "passed", (name, got[name]["message"])
    figs = json.loads((rep / "results.json").read_text())["figures"]
    bf16 = sorted(f["value"] for f in figs if f["check"] == "bf16_tflops")
    assert len(bf16) == 2 and all(600 <= v < 989 for v in bf16)
    busbw = [f for f in figs if f["check"] == "allreduce_busbw_gbps"]
    assert len(busbw) == 1 and busbw[0]["value"] > 300 and busbw[0]["verdict"] == "pass"
    # -s prints the all-reduce table in nccl-tests' layout
    assert "#       size         count      type   redop    root     time   algbw   busbw #wrong" in res.stdout


def test_slow_gpu_is_named(tmp_path):
    def slow_gpu1(doc):
        doc["gpus"][1]["dtypes"]["bf16"]["tflops"] = 540.0
    inv = replay_project(tmp_path, alter(tmp_path, "matmul_tflops", slow_gpu1))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "tensor_tflops")
    assert res.returncode == 1
    msg = outcomes(rep)["test_tensor_tflops"]["text"]
    assert "h200-a GPU 1 (00000000:00:07.0, serial 1650000000002): bf16_tflops 540 TFLOP/s < min 600 TFLOP/s" in msg
    assert "below_node_median_pct" in msg  # 540 is also more than 7% under the node's median


def test_sick_memory_nvlink_and_allreduce_fail(tmp_path):
    captures = alter(tmp_path, "hbm_bandwidth", lambda d: d["gpus"][0].update(read_gbps=3812.0))
    for f in captures.glob("nvlink-*.json"):
        saved = json.loads(f.read_text())
        for g in saved["doc"]["gpus"]:
            if g.get("links"):
                g["links"][5]["active"] = False
                g["active_count"] = 17
        f.write_text(json.dumps(saved))
    for f in captures.glob("nccl_allreduce-*.json"):
        saved = json.loads(f.read_text())
        saved["doc"]["wrong_total"] = 3
        saved["doc"]["transports"] = {"SHM/direct/direct": 4}
        f.write_text(json.dumps(saved))
    inv = replay_project(tmp_path, captures)
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", GPU_LAYERS)
    assert res.returncode == 1
    got = outcomes(rep)
    assert "GPU 0 (00000000:00:06.0, serial 1650000000001): hbm_read_bw_gbps 3812 GB/s < min 4300 GB/s" \
        in got["test_hbm_bandwidth"]["message"]
    assert "nvlink_active_links 17 links < min 18 links" in got["test_nvlink_links"]["text"]
    assert "NVLink 5 inactive" in got["test_nvlink_links"]["text"]
    msg = got["test_allreduce"]["text"]
    assert "3 wrong elements" in msg and "SHM/direct/direct" in msg and "expects P2P" in msg
    assert got["test_ecc"]["outcome"] == "passed"


def test_declared_gpu_count_mismatch(tmp_path):
    inv = replay_project(tmp_path, DATA)
    inv.write_text(inv.read_text().replace("gpus_per_node=2", "gpus_per_node=8"))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "gpu_inventory")
    assert res.returncode == 1
    assert "gpu_count 2 != gpus_per_node 8" in outcomes(rep)["test_gpu_inventory"]["message"]


def test_full_disk_under_reports(tmp_path):
    """The report folder's disk fills up mid-run: the run finishes, says so in one line, exits non-zero,
    and what could be written before the disk filled is intact (no traceback)."""
    import os
    import subprocess
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root (CI runs as root)")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mnt)], check=True)
    try:
        inv = replay_project(tmp_path, DATA)
        res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(mnt / "rep"), "-k", GPU_LAYERS)
        out = res.stdout + res.stderr
        assert res.returncode != 0
        assert "Traceback" not in out and "INTERNALERROR" not in out
        errs = [ln for ln in out.splitlines() if ln.startswith("ERROR: gpuaccept reports:")]
        assert len(errs) == 1 and "No space left on device" in errs[0], out[-2000:]
        lines = (mnt / "rep" / "results.jsonl").read_text().splitlines()
        kept = [json.loads(ln) for ln in lines[:-1]]  # the last line may be cut where the disk filled
        assert len(kept) >= 5 and {r["host"] for r in kept} <= {"h200-a", None}
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
