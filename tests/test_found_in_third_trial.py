"""Faults found by the third new-user trial (2026-11-30), end to end on replayed 2xH200 captures: a probe
document with a non-finite figure (an ERROR naming it; reports strict JSON parsers can read), and the line of a
host that declares GPUs but shows none (naming only what declared them)."""
from __future__ import annotations

import json

import pytest

from project_helpers import alter, replay_project, run_pytest


def _strict(text: str):
    def refuse(token):
        raise ValueError(f"not JSON: {token}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_non_finite_hbm_figure_is_an_error_and_results_stay_json(tmp_path, value):
    """Found on 2026-11-30 (third trial): read_gbps Infinity PASSED the 4300 GB/s floor, NaN FAILED as slow HBM,
    and results.json / results.jsonl carried the tokens Infinity / NaN, which jq and JSON.parse refuse."""
    def change(doc):
        doc["gpus"][1]["read_gbps"] = value  # ALTERED: GPU 1's HBM read figure is not a number
    inv = replay_project(tmp_path, alter(tmp_path, "hbm_bandwidth", change))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "hbm_bandwidth")
    assert res.returncode == 1, res.stdout[-3000:]
    results = _strict((rep / "results.json").read_text())
    for line in (rep / "results.jsonl").read_text().splitlines():
        _strict(line)
    test = next(t for t in results["tests"] if "test_hbm_bandwidth" in t["nodeid"])
    assert test["outcome"] == "error", test
    assert f"hbm_read_bw_gbps: {value} is no measurement (limit >= 4300 GB/s)" in test["message"]
    fig = next(f for f in test["figures"] if f["check"] == "hbm_read_bw_gbps" and f["gpu"] == 1)
    assert fig["value"] == str(value) and fig["verdict"] == "error"


def _no_driver(doc):  # ALTERED: the document gpu_inventory writes on a node without the NVIDIA driver
    doc.update(nvml_available=False, gpus=[], driver_present=False, reason_code="no_driver",
               reason="no NVIDIA driver (libnvidia-ml.so not found)")
    for k in ("driver", "nvml_version", "cuda_driver_version", "gpu_count", "kernel_driver_version"):
        doc.pop(k, None)


@pytest.mark.parametrize("declared,args,needle", [
    ("gpus_per_node=2", (), "but the inventory declares gpus_per_node=2"),
    ("", ("--sku", "h200-sxm-141gb"), "but --sku h200-sxm-141gb declares one"),
])
def test_declared_gpu_missing_names_only_what_declared_it(tmp_path, declared, args, needle):
    """Found on 2026-11-30 (third trial): the failure read "declares gpu_sku=None gpus_per_node=8", and with
    --sku (no inventory var) "declares gpu_sku=None gpus_per_node=None": the line named declarations that
    were never made and not the one that was."""
    from project_helpers import make_project, replay_folder
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    folder = replay_folder(tmp_path, alter(tmp_path, "gpu_inventory", _no_driver))
    inv.write_text(f"h-a ansible_connection=local gpuaccept_replay={folder} {declared}\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "test_gpu_inventory", *args)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    test = next(t for t in _strict((rep / "results.json").read_text())["tests"] if "test_gpu_inventory" in t["nodeid"])
    assert test["outcome"] == "failed" and "h-a: no NVIDIA GPU found (no NVIDIA driver" in test["message"], test
    assert needle in test["message"] and "None" not in test["message"], test["message"]


def test_gpu_in_mig_mode_blocks_its_figures_instead_of_failing_them_as_slow(tmp_path):
    """Found on 2026-11-30 (third trial): GPU 1 left in MIG mode, CUDA measuring one slice of it (1/7 of the
    figures): compute and memory FAILED as slow hardware and h200-a's summary line began "compute/bf16_tflops GPU 1:
    95.17 TFLOP/s vs >= 600". Now they are ERRORS "blocked by preflight: GPU 1: MIG mode is on", the figures kept,
    and test_preflight is the one failure."""
    def mig(doc):  # ALTERED: nvidia-smi -i 1 -mig 1, applied
        doc["gpus"][1]["mig_mode"] = {"current": True, "pending": True}

    def slice_(doc):  # ALTERED: what a 1g MIG slice of GPU 1 would measure
        for fig in doc["gpus"][1]["dtypes"].values():
            fig["tflops"] = fig["tflops"] / 7
    src = alter(tmp_path, "matmul_tflops", slice_, src=alter(tmp_path, "gpu_inventory", mig))
    inv = replay_project(tmp_path, src)
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "tensor_tflops or preflight")
    assert res.returncode == 1, res.stdout[-3000:]
    tests = {t["nodeid"].split("::")[-1]: t for t in _strict((rep / "results.json").read_text())["tests"]}
    assert tests["test_preflight[h200-a]"]["outcome"] == "failed"
    compute = tests["test_tensor_tflops[h200-a]"]
    assert compute["outcome"] == "error", compute
    assert compute["message"].startswith("blocked by preflight: GPU 1: MIG mode is on, the SKU file expects off")
    assert any(f["check"] == "bf16_tflops" and f["gpu"] == 1 for f in compute["figures"])  # kept
    line = next(ln for ln in (rep / "summary.md").read_text().splitlines() if ln.startswith("- **ERROR** `h200-a`"))
    assert "blocked by preflight: GPU 1: MIG mode is on" in line and "bf16_tflops GPU 1" not in line, line


def _multinode_run(tmp_path, base, sshds, pythons: dict[int, str] | None = None):
    """``-k multinode`` (gloo, small) over ``sshds`` (node i's Python ``pythons[i]`` where given); stops the
    nodes; returns (report folder, the finished process, the test's results.json record), asserting exit 1."""
    from project_helpers import make_project
    from sshd import write_known_hosts
    try:
        kh = write_known_hosts(base / "kh", sshds)
        gloo = {"backend": "gloo", "min_bytes": 4096, "max_bytes": 16384, "factor": 4, "iters": 2, "warmup": 1}
        inv = make_project(tmp_path, [], kh, extra_suite="", name="test_zz_none.py",
                           inventory_extra="\n".join(n.inventory_line(**({"python": pythons[i]} if i in (pythons or {})
                                                                           else {})) for i, n in enumerate(sshds))
                           + f"\n[gpu:vars]\nnccl_stall_s=20\nnccl_internode_probe_args={json.dumps(gloo)}\n")
        rep = tmp_path / "rep"
        res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", kh, "--reports", str(rep),
                         "-k", "multinode", "--probe-timeout", "60", timeout=150)
    finally:
        for s in sshds:
            s.stop()
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    test = next(t for t in _strict((rep / "results.json").read_text())["tests"]
                if t["nodeid"].endswith("test_allreduce_multinode"))
    return rep, res, test


def test_unreachable_host_of_the_inter_node_allreduce_is_an_error_not_a_failure(tmp_path, tmp_path_factory):
    """Found on 2026-11-30 (third trial): with one of three sshd nodes down, test_allreduce_multinode FAILED
    "u2: unreachable: ..." (pytest: 1 failed), as if u2's GPUs or network were bad; an unreachable host is an
    error everywhere else. Now the test is an ERROR naming u2, and u2 alone is in failed-hosts.txt."""
    from sshd import start_sshd
    base = tmp_path_factory.mktemp("unreach")
    sshds = [start_sshd(base, address=f"127.0.0.{41 + i}", name=f"u{i + 1}") for i in range(3)]
    sshds[1].stop()
    rep, res, test = _multinode_run(tmp_path, base, sshds)
    assert test["outcome"] == "error" and test["message"].startswith("u2: unreachable"), test
    assert (rep / "failed-hosts.txt").read_text().split() == ["u2"]
    assert "1 error" in res.stdout and "failed" not in res.stdout.splitlines()[-1], res.stdout[-500:]


def test_allreduce_host_without_torch_is_an_error_naming_the_interpreter(tmp_path, tmp_path_factory):
    """A host whose Python has no torch (a real interpreter: a venv made here without it): its ranks each died of
    ModuleNotFoundError and the host was FAILED as if its GPUs or network were bad. Now the probe says so before
    it spawns a rank, and the test is an ERROR naming the host and the interpreter; that host alone is listed."""
    import subprocess
    import sys

    from sshd import start_sshd
    bare = tmp_path / "notorch"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    base = tmp_path_factory.mktemp("notorch")
    sshds = [start_sshd(base, address=f"127.0.0.{61 + i}", name=f"t{i + 1}") for i in range(2)]
    rep, res, test = _multinode_run(tmp_path, base, sshds, {1: str(bare / "bin" / "python")})
    assert test["outcome"] == "error", test
    assert test["message"].startswith("t2: ") and "torch is not installed for " in test["message"], test
    assert str(bare) in test["message"], test
    assert (rep / "failed-hosts.txt").read_text().split() == ["t2"]
