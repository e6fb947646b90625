"""The GPU suites end to end on this GPU-less machine, judged from real probe documents that the main job
saved on a 2xH200 SXM node (tests/data/replay-h200x2, driver 580.159.04, 2026-11-29; the all-reduce's Ring
sweep and at-size documents 2026-11-30), replayed through the
``gpuaccept_replay`` inventory var. The healthy capture passes every GPU test; copies altered the way sick
nodes read fail with messages naming host, GPU index, PCI bus id and serial."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpuaccept.reporting.folder import run_figures

from project_helpers import (DATA, GPU_LAYERS, alter, junit, make_project, outcomes, replay_folder, replay_project,
                             run_pytest, strict_json)


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
    figs = run_figures(json.loads((rep / "results.json").read_text()))
    bf16 = sorted(f["value"] for f in figs if f["check"] == "bf16_tflops")
    assert len(bf16) == 2 and all(600 <= v < 989 for v in bf16)
    busbw = [f for f in figs if f["check"] == "allreduce_busbw_gbps"]
    assert len(busbw) == 1 and busbw[0]["value"] > 300 and busbw[0]["verdict"] == "pass"
    # -s prints the all-reduce table in nccl-tests' layout
    assert "#       size         count      type   redop    root     time   algbw   busbw #wrong" in res.stdout


def test_capture_folder_replays_as_saved(tmp_path):
    """The capture folder itself, with none of replay_folder's stand-ins, answers every probe call the GPU
    suites make now (as an operator's ``reports/<run>/probes/<host>`` does): a suite that changes a probe's
    arguments needs a capture taken with them. Before the 2026-11-30 all-reduce documents were added, every
    replayed host read ERROR "no saved document for arguments {... NCCL_ALGO: Ring ...}"."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={DATA} gpu_sku=h200-sxm-141gb gpus_per_node=2\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", GPU_LAYERS)
    assert res.returncode == 0, res.stdout[-4000:]
    got = outcomes(rep)
    assert got["test_allreduce"]["outcome"] == "passed", got["test_allreduce"]["message"]
    assert not [n for n, c in got.items() if c["outcome"] not in ("passed", "skipped")]


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


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_report_disk_too_small_is_refused_before_any_node(tmp_path, workers):
    """A report filesystem with less free space than the run's reports need: exit 4 before any node is
    touched, one line naming the folder, the free and the needed space; the folder is not left behind and no test ran,
    with and without xdist workers."""
    import os
    import subprocess
    assert os.geteuid() == 0, "mounting a small tmpfs needs root (as the sshd tests do)"
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)], check=True)
    try:
        inv = replay_project(tmp_path, DATA)
        res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(mnt / "rep"), "-k", GPU_LAYERS, *workers)
        out = res.stdout + res.stderr
        assert res.returncode == 4, out[-3000:]
        assert "Traceback" not in out and "INTERNALERROR" not in out
        lines = [ln for ln in out.splitlines() if f"--reports {mnt / 'rep'}: " in ln]
        assert len(lines) == 1 and "MiB free on its filesystem" in lines[0] and "needs" in lines[0], out[-2000:]
        assert not (mnt / "rep").exists()
        assert " passed" not in out and " failed" not in out
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


# -- sick nodes as they read: each variant gets exactly one verdict kind, and no exception text ----
HEALTH_MEM_COMPUTE = "health or memory or compute"
EXCEPTION_TEXT = ("Traceback", "TypeError", "KeyError", "AttributeError", "ValueError")


def run_replay(tmp_path: Path, captures: Path, k: str, inventory_vars: str = "gpu_sku=h200-sxm-141gb gpus_per_node=2"):
    """Run the suites on ``captures`` with ``-k k``; returns (returncode, {test: case}, results.json figures).
    Asserts that no report (JUnit message/text, summary, output) carries Python exception text."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={replay_folder(tmp_path, captures)} "
                   f"{inventory_vars}\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", k)
    got = outcomes(rep)
    texts = [c["message"] or "" for c in got.values()] + [c["text"] for c in got.values()] + [
        (rep / "summary.md").read_text(), res.stdout]
    for t in texts:
        for bad in EXCEPTION_TEXT:
            assert bad not in t, t[-3000:]
    return res.returncode, got, run_figures(json.loads((rep / "results.json").read_text()))


def alter_many(tmp_path: Path, changes: dict) -> Path:
    """A copy of the captures with ``changes[probe](doc)`` applied to each named probe's saved document(s)."""
    dst = tmp_path / "captures"
    shutil.copytree(DATA, dst)
    for probe, change in changes.items():
        for f in dst.glob(f"{probe}-*.json"):
            saved = json.loads(f.read_text())
            change(saved["doc"])
            f.write_text(json.dumps(saved))
    return dst


def kinds(got: dict) -> dict[str, str]:
    return {name: c["outcome"] for name, c in got.items()}


def test_lost_gpu_fails_as_lost_and_blocks_measurements(tmp_path):
    """GPU 1 fell off the bus: NVML lists it, gives no handle. Before: the probe wrote the error into every
    identity field and test_gpu_inventory passed with gpu_count 2. After: GPU 1 fails as lost, does not count,
    and the memory/compute figures of the host are errors "blocked by gpu_inventory"."""
    def lose_gpu1(doc):
        doc["gpus"][1] = {"index": 1, "lost": True, "nvml_error": "GPU is lost"}
    rc, got, figs = run_replay(tmp_path, alter_many(tmp_path, {"gpu_inventory": lose_gpu1}), HEALTH_MEM_COMPUTE)
    assert rc == 1
    inv = got["test_gpu_inventory"]
    assert inv["outcome"] == "failure"
    assert "h200-a GPU 1: no NVML handle (GPU is lost)" in inv["text"]
    assert "gpu_count 1 != gpus_per_node 2" in inv["text"]
    assert got["test_ecc"]["outcome"] == "failure" and "GPU 1: no NVML handle (GPU is lost)" in got["test_ecc"]["text"]
    for name in ("test_hbm_bandwidth", "test_tensor_tflops", "test_pcie_bandwidth", "test_launch_overhead"):
        assert got[name]["outcome"] == "error", (name, got[name])
        assert got[name]["text"].startswith("blocked by gpu_inventory: GPU 1: no NVML handle (GPU is lost)")
    assert len([f for f in figs if f["check"] == "bf16_tflops"]) == 2  # figures kept


def test_memory_not_supported_detects_sku_by_name_and_pci_id(tmp_path):
    """Memory info reads "Not Supported" (unified-memory parts; v1 of the call): no gpu_sku in the inventory.
    Before: SKU detection did arithmetic on the error dict (TypeError). After: detected by name and PCI device
    id, memory recorded as unreadable, every health test passes."""
    def no_memory(doc):
        for g in doc["gpus"]:
            g["memory_total_bytes"] = {"nvml_error": "Not Supported"}
    rc, got, figs = run_replay(tmp_path, alter_many(tmp_path, {"gpu_inventory": no_memory}), "health",
                               inventory_vars="gpus_per_node=2")
    assert rc == 0, kinds(got)
    assert got["test_gpu_sku"]["outcome"] == "passed"
    assert {f["value"] for f in figs if f["check"] == "sku"} == {"h200-sxm-141gb"}
    assert [f["value"] for f in figs if f["check"] == "memory_total_gib"] == [{"nvml_error": "Not Supported"}] * 2


def test_required_field_unreadable_fails_in_nvmls_words(tmp_path):
    """ECC counts read "Unknown Error" on GPU 0: ecc is in the H200 file's required_nvml → fails with NVML's
    words; temperature "Not Supported" (not required) is recorded as unreadable, the test passes."""
    def sick(doc):
        doc["gpus"][0]["ecc"]["uncorrected_volatile"] = {"nvml_error": "Unknown Error"}
        doc["gpus"][1]["temp_c"] = {"nvml_error": "Not Supported"}
    rc, got, figs = run_replay(tmp_path, alter_many(tmp_path, {"gpu_inventory": sick}), "ecc or gpu_inventory")
    assert rc == 1
    assert got["test_ecc"]["outcome"] == "failure"
    assert ("GPU 0 (00000000:00:06.0, serial 1650000000001): ecc_uncorrected_volatile unreadable "
            "(NVML: Unknown Error); the SKU file requires ecc") in got["test_ecc"]["text"]
    # an "Unknown Error" reading is also the GPU no longer answering: named with the remedy
    assert got["test_gpu_inventory"]["outcome"] == "failure"
    assert ('GPU 0 (00000000:00:06.0, serial 1650000000001): NVML answers "Unknown Error" for 1 reading(s): '
            'ecc.uncorrected_volatile') in got["test_gpu_inventory"]["text"]
    temps = {f["gpu"]: f for f in figs if f["check"] == "temp_c"}
    assert temps[0]["verdict"] == "pass" and temps[1]["value"] == {"nvml_error": "Not Supported"}


def test_foreign_process_blocks_instead_of_failing_the_card(tmp_path):
    """A matmul loop from another process on GPU 1 (as measured on the 2xH200 node: 301 TFLOP/s bf16).
    Before: preflight named the pid, and compute failed GPU 1 as a card at 301 TFLOP/s (an RMA of a healthy
    GPU). After: preflight is an error "busy" (a GPU in use by someone else is not a failing GPU);
    compute and memory are errors "blocked by preflight", the figure kept."""
    def foreign(doc):
        doc["gpus"][1]["compute_processes"] = [{"pid": 4242, "name": "python3", "used_memory_bytes": 2**30}]

    def shared_gpu1(doc):
        doc["gpus"][1]["dtypes"]["bf16"]["tflops"] = 301.0
    rc, got, figs = run_replay(tmp_path, alter_many(tmp_path, {"gpu_inventory": foreign,
                                                               "matmul_tflops": shared_gpu1}), HEALTH_MEM_COMPUTE)
    assert rc == 1
    assert got["test_preflight"]["outcome"] == "error"
    assert "busy: pid 4242 (python3) holds a context on the GPU" in got["test_preflight"]["text"]
    tf = got["test_tensor_tflops"]
    assert tf["outcome"] == "error", tf
    assert tf["message"].startswith("blocked by preflight: GPU 1: busy: pid 4242 (python3) holds a context")
    assert "figure kept: h200-a GPU 1 (00000000:00:07.0, serial 1650000000002): bf16_tflops 301 TFLOP/s < min 600" \
        in tf["text"]
    assert got["test_hbm_bandwidth"]["outcome"] == "error"  # blocked even where the figures pass
    assert got["test_ecc"]["outcome"] == "passed"  # health tests are not blocked
    bf16 = {f["gpu"]: f for f in figs if f["check"] == "bf16_tflops"}
    assert bf16[1]["value"] == 301.0 and bf16[1]["verdict"] == "fail"


def test_pytest_counts_our_errors_as_errors(tmp_path):
    """pytest's own terminal line counts a blocked test (and every other ERROR of ours) under "errors", as
    JUnit and summary.md do. A failed preflight and a compute test blocked by it: before "2 failed", after
    "1 failed, 1 error", the blocked test listed as ERROR. The exit code (1) is as before. (A foreign process
    is busy, an ERROR itself: the proven fault here is GPU 1 left in compute mode Prohibited.)"""
    def prohibited(doc):
        doc["gpus"][1]["compute_mode"] = "Prohibited"
    inv = replay_project(tmp_path, alter_many(tmp_path, {"gpu_inventory": prohibited}))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k",
                     "test_preflight or test_launch_overhead", "--junitxml", str(tmp_path / "pytest.xml"))
    assert res.returncode == 1, res.stdout[-3000:]
    tail = res.stdout.strip().splitlines()[-1]
    assert "1 failed" in tail and "1 error" in tail and "passed" not in tail, tail
    assert "ERROR suites/test_compute.py::test_launch_overhead[h200-a]" in res.stdout
    got = outcomes(rep)
    assert (got["test_preflight"]["outcome"], got["test_launch_overhead"]["outcome"]) == ("failure", "error")
    own = {c["name"].split("[")[0]: c["outcome"] for c in junit(tmp_path / "pytest.xml")}
    assert own["test_launch_overhead"] in ("failure", "error")  # pytest's own --junitxml: a failed call


def test_fabric_not_ready_blocks_nvlink_and_nccl(tmp_path):
    """NVSwitch fabric registration still IN_PROGRESS on GPU 0 (fabric manager not done): test_fabric fails;
    NVLink and all-reduce figures are errors "blocked by fabric", not link or bandwidth failures."""
    def not_ready(doc):
        doc["gpus"][0]["fabric"]["state"] = "IN_PROGRESS"
        doc["gpus"][0]["fabric"]["status"] = "Not Supported"
    rc, got, _ = run_replay(tmp_path, alter_many(tmp_path, {"gpu_inventory": not_ready}),
                            "fabric or nvlink_links or allreduce")
    assert rc == 1
    assert got["test_fabric"]["outcome"] == "failure" and "fabric state IN_PROGRESS" in got["test_fabric"]["text"]
    for name in ("test_nvlink_links", "test_allreduce"):
        assert got[name]["outcome"] == "error", (name, got[name])
        assert got[name]["message"].startswith("blocked by fabric: GPU 0: fabric state IN_PROGRESS")


def test_probe_that_measured_one_of_two_gpus_is_an_error(tmp_path):
    """A stray CUDA_VISIBLE_DEVICES=0 on the node: matmul measured GPU 0 only, hbm_bandwidth measured none.
    Before: both passed. After: errors naming the missing GPUs' bus ids."""
    def only_gpu0(doc):
        doc["gpus"] = doc["gpus"][:1]

    def none(doc):
        doc["gpus"] = []
    rc, got, _ = run_replay(tmp_path, alter_many(tmp_path, {"matmul_tflops": only_gpu0, "hbm_bandwidth": none}),
                            "tensor_tflops or hbm_bandwidth")
    assert rc == 1
    tf = got["test_tensor_tflops"]
    assert tf["outcome"] == "error"
    assert "matmul_tflops measured no figure for GPU 1 (00000000:00:07.0)" in tf["text"]
    hbm = got["test_hbm_bandwidth"]
    assert hbm["outcome"] == "error"
    assert "GPU 0 (00000000:00:06.0)" in hbm["text"] and "GPU 1 (00000000:00:07.0)" in hbm["text"]


def test_sku_check_not_measured_is_an_error(tmp_path):
    """The H200 file sets an fp8_tflops floor but the document has no fp8 figure for GPU 0: an error naming
    the check, never a pass (before: the dtype loop only saw what the probe returned)."""
    def no_fp8(doc):
        del doc["gpus"][0]["dtypes"]["fp8"]
    rc, got, _ = run_replay(tmp_path, alter_many(tmp_path, {"matmul_tflops": no_fp8}), "tensor_tflops")
    assert rc == 1
    assert got["test_tensor_tflops"]["outcome"] == "error"
    assert "fp8_tflops not measured" in got["test_tensor_tflops"]["text"]


def test_median_rule_names_the_dtype(tmp_path):
    """Before: "below_node_median_pct 38.15 %" five times, no dtype. After: each line names dtype and figure."""
    def slow(doc):
        doc["gpus"][1]["dtypes"]["fp16"]["tflops"] = 400.0
    rc, got, _ = run_replay(tmp_path, alter_many(tmp_path, {"matmul_tflops": slow}), "tensor_tflops")
    assert rc == 1
    text = got["test_tensor_tflops"]["text"]
    assert "GPU 1 (00000000:00:07.0, serial 1650000000002): fp16_below_node_median_pct" in text
    assert "fp16 TFLOP/s 400 against the node's median" in text
    assert "fp16_tflops 400 TFLOP/s < min 580 TFLOP/s (fp16 8192x8192x8192 matmul)" in text
    assert "bf16_below_node_median_pct" not in text


@pytest.mark.parametrize("doc,needle", [
    ({"reason_code": "version_mismatch", "kernel_driver_version": "580.159.04", "nvml_library_version": "570.86.15",
      "reason": "NVML library and kernel driver versions differ (NVML: Driver/library version mismatch); reboot"},
     "(NVML library 570.86.15, kernel module 580.159.04)"),
    ({"reason_code": "no_permission", "kernel_driver_version": "580.159.04",
      "reason": "no permission to use the GPUs (NVML: Insufficient Permissions)"}, "Insufficient Permissions"),
    ({"reason_code": "no_pynvml", "driver_present": True, "kernel_driver_version": "580.159.04",
      "reason": "pynvml (nvidia-ml-py) not installed"}, "driver present (kernel module 580.159.04), nvidia-ml-py"),
])
def test_broken_nvml_on_undeclared_host_is_an_error_not_a_skip(tmp_path, doc, needle):
    """A host that declares no GPU, whose NVML fails for a reason other than "no driver / no GPU", or that has
    the driver but no nvidia-ml-py for its interpreter. Before: "no NVIDIA GPU" skips. After: an error."""
    def broken(d):
        d.clear()
        d.update({"nvml_available": False, "hostname": "vm", "gpus": [], **doc})
    rc, got, _ = run_replay(tmp_path, alter_many(tmp_path, {"gpu_inventory": broken}), "gpu_inventory or ecc",
                            inventory_vars="")
    assert rc == 1
    for name in ("test_gpu_inventory", "test_ecc"):
        assert got[name]["outcome"] == "error", got[name]
        assert needle in got[name]["message"]
    if doc["reason_code"] == "no_pynvml":
        assert "missing for " in got["test_gpu_inventory"]["message"]


def test_no_driver_on_undeclared_host_still_skips(tmp_path):
    def no_driver(d):
        d.clear()
        d.update({"nvml_available": False, "hostname": "vm", "gpus": [], "reason_code": "no_driver",
                  "reason": "no NVIDIA driver (libnvidia-ml.so not found)", "kernel_driver_version": None,
                  "driver_present": False})
    rc, got, _ = run_replay(tmp_path, alter_many(tmp_path, {"gpu_inventory": no_driver}), "gpu_inventory",
                            inventory_vars="")
    assert rc == 0 and got["test_gpu_inventory"]["outcome"] == "skipped"


def test_driver_mismatch_blocks_the_host(tmp_path):
    """NVML library 580 against a loaded 570 kernel module: test_driver_versions fails, memory is blocked."""
    def mismatch(doc):
        doc["kernel_driver_version"] = "570.86.15"
    rc, got, _ = run_replay(tmp_path, alter_many(tmp_path, {"gpu_inventory": mismatch}),
                            "driver_versions or hbm_bandwidth")
    assert rc == 1
    assert got["test_driver_versions"]["outcome"] == "failure"
    assert got["test_hbm_bandwidth"]["outcome"] == "error"
    assert got["test_hbm_bandwidth"]["message"].startswith(
        "blocked by driver_versions: NVML library / kernel driver mismatch: library 580.159.04, kernel module 570.86.15")


def test_driver_present_torch_missing_is_named(tmp_path):
    """The node's interpreter has no torch (the probe died on the import) while the NVIDIA driver is loaded:
    an error "driver present ..., torch missing for <python>", not a crash text nor "no NVIDIA GPU"."""
    def no_torch(doc):
        doc.clear()
        doc.update({"failed": True, "msg": "no JSON document (rc 1): ModuleNotFoundError: No module named 'torch'"})
    rc, got, _ = run_replay(tmp_path, alter_many(tmp_path, {"matmul_tflops": no_torch}), "tensor_tflops")
    assert rc == 1
    msg = got["test_tensor_tflops"]["message"]
    assert got["test_tensor_tflops"]["outcome"] == "error"
    assert msg.startswith("h200-a: driver present (kernel module 580.159.04), torch missing for "), msg


LOSING_SUITE = '''
import pytest

pytestmark = pytest.mark.compute


def test_fail_then_skip(node, verdicts):
    verdicts.fail("cuFile not found")
    pytest.skip("nothing configured")


def test_fail_then_return(node, verdicts):
    verdicts.record("x_gbps", 1.0, "GB/s")
    verdicts.fail("link down")
    return


def test_error_then_return(node, verdicts):
    verdicts.error("figure not measured")


def test_skip_clean(node, verdicts):
    pytest.skip("not applicable here")
'''


def test_recorded_failure_is_never_lost(tmp_path):
    """A failure recorded before a skip or a return still fails the test (before: SKIPPED and
    PASSED); a recorded measurement gap is an error; a clean skip stays a skip. No suite calls finish()."""
    inv = make_project(tmp_path, [], None, extra_suite=LOSING_SUITE, name="test_compute_losing.py")
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={DATA}\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "then or skip_clean")
    assert res.returncode == 1, res.stdout[-3000:]
    got = {c["name"].split("[")[0]: c for c in junit(rep / "junit-compute.xml")}
    assert got["test_fail_then_skip"]["outcome"] == "failure"
    assert "h200-a: cuFile not found" in got["test_fail_then_skip"]["text"]
    assert got["test_fail_then_return"]["outcome"] == "failure"
    assert got["test_error_then_return"]["outcome"] == "error"
    assert "h200-a: figure not measured" in got["test_error_then_return"]["message"]
    assert got["test_skip_clean"]["outcome"] == "skipped"


def test_replay_reads_the_document_saved_with_the_arguments_asked(tmp_path):
    """Before: a probe with one saved document got it whatever it asked for (pcie_link {"seconds": 3} read the
    1.5 s document). Now only the time arguments may differ (xid_events' since_epoch, nccl_allreduce's
    deadline_s, burnin's seconds), and, with a note, the durations a --profile sets."""
    from gpuaccept.errors import ProbeError
    from gpuaccept.runner.host import replay_probe, save_probe
    d = str(tmp_path)
    save_probe(d, "xid_events", {"since_epoch": 1795989274.3}, {"events": [], "source": "kmsg"})
    save_probe(d, "pcie_link", {"seconds": 1.5}, {"gpus": [], "seconds": 1.5})
    save_probe(d, "nccl_allreduce", {"backend": "nccl", "world_size": 2, "deadline_s": 290}, {"rows": [1]})
    assert replay_probe("h", d, "xid_events", {"since_epoch": 1800000000.0})["source"] == "kmsg"
    assert replay_probe("h", d, "pcie_link", {"seconds": 1.5})["seconds"] == 1.5
    notes: list[str] = []  # seconds is a duration a --profile sets: read, with a note (gpuaccept/runner/replay.py)
    assert replay_probe("h", d, "pcie_link", {"seconds": 3}, notes)["seconds"] == 1.5
    assert notes and "measured with seconds=1.5, asked seconds=3" in notes[0]
    with pytest.raises(ProbeError, match=r'pcie_link: no saved document for arguments \{"gpu": 1, "seconds": 1.5\}') as \
            missing:
        replay_probe("h", d, "pcie_link", {"seconds": 1.5, "gpu": 1})
    # nothing crashed and a rerun asks the same: the run's selection or variables, not the tool
    assert (missing.value.cause.cls, missing.value.cause.kind) == ("configuration", "replay_not_captured")
    from gpuaccept.judging.actions import for_cause
    assert for_cause(missing.value.cause).action == "fix-config"
    assert replay_probe("h", d, "nccl_allreduce", {"backend": "nccl", "world_size": 2, "deadline_s": 590}) == {
        "rows": [1]}
    with pytest.raises(ProbeError, match="nccl_allreduce: no saved document"):
        replay_probe("h", d, "nccl_allreduce", {"backend": "nccl", "world_size": 8, "deadline_s": 290})
    save_probe(d, "xid_events", {"since_epoch": 5.0}, {"events": [1]})  # two windows saved: which one is meant?
    with pytest.raises(ProbeError, match="xid_events: no saved document"):
        replay_probe("h", d, "xid_events", {"since_epoch": 6.0})


def test_a_run_s_own_probes_folder_judges_the_host_layer_again(tmp_path):
    """Before: replaying ``reports/<run>/probes/<host>`` of a host-layer run (``ansible_connection=local``) minutes
    later was an ERROR on test_kernel_log, "host_kernel_log: no saved document ... since_epoch: saved X, asked Y",
    4 KB with the catalogue's regular expressions twice. A real run saves its documents; a later replay of that
    folder (another run start, so another since_epoch) judges every test alike, the soft lockup included."""
    import time as _time
    log = tmp_path / "kern.log"
    when = _time.strftime("%Y-%m-%dT%H:%M:%S+0000", _time.gmtime(_time.time() + 60))
    log.write_text(f"{when} gpu01 kernel: watchdog: BUG: soft lockup - CPU#37 stuck for 23s! [python3:88412]\n")
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"gpu01 ansible_connection=local kernel_log_paths={log}\n")

    def run(rep: Path) -> dict:
        res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-m", "health or host")
        assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
        return {t["nodeid"]: t for t in json.loads((rep / "results.json").read_text())["tests"]}
    live = run(tmp_path / "live")
    assert live["suites/test_host.py::test_kernel_log[gpu01]"]["outcome"] == "failed"
    saved = tmp_path / "live" / "probes" / "gpu01"
    assert any(saved.glob("host_kernel_log-*.json")) and any(saved.glob("host_memory-*.json"))
    _time.sleep(1.1)  # a later clock: the replay's run starts, and asks its since_epoch, later
    inv.write_text(f"gpu01 ansible_connection=local kernel_log_paths={log} gpuaccept_replay={saved}\n")
    again = run(tmp_path / "again")
    assert {k: t["outcome"] for k, t in again.items()} == {k: t["outcome"] for k, t in live.items()}
    assert not [k for k, t in again.items() if t["outcome"] == "error"], again
    assert "CPU#37 stuck for 23s" in again["suites/test_host.py::test_kernel_log[gpu01]"]["message"]


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_non_finite_hbm_figure_is_an_error_and_results_stay_json(tmp_path, value):
    """read_gbps Infinity PASSED the 4300 GB/s floor, NaN FAILED as slow HBM,
    and results.json / results.jsonl carried the tokens Infinity / NaN, which jq and JSON.parse refuse."""
    def change(doc):
        doc["gpus"][1]["read_gbps"] = value  # ALTERED: GPU 1's HBM read figure is not a number
    inv = replay_project(tmp_path, alter(tmp_path, "hbm_bandwidth", change))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "hbm_bandwidth")
    assert res.returncode == 1, res.stdout[-3000:]
    results = strict_json((rep / "results.json").read_text())
    for line in (rep / "results.jsonl").read_text().splitlines():
        strict_json(line)
    test = next(t for t in results["tests"] if "test_hbm_bandwidth" in t["nodeid"])
    assert test["outcome"] == "error", test
    assert f"hbm_read_bw_gbps: {value} is no measurement (limit >= 4300 GB/s)" in test["message"]
    fig = next(f for f in test["figures"] if f["check"] == "hbm_read_bw_gbps" and f["gpu"] == 1)
    assert fig["value"] == str(value) and fig["verdict"] == "error"


def test_gpu_in_mig_mode_blocks_its_figures_instead_of_failing_them_as_slow(tmp_path):
    """GPU 1 left in MIG mode, CUDA measuring one slice of it (1/7 of the
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
    tests = {t["nodeid"].split("::")[-1]: t for t in strict_json((rep / "results.json").read_text())["tests"]}
    assert tests["test_preflight[h200-a]"]["outcome"] == "failed"
    compute = tests["test_tensor_tflops[h200-a]"]
    assert compute["outcome"] == "error", compute
    assert compute["message"].startswith("blocked by preflight: GPU 1: MIG mode is on, the SKU file expects off")
    assert any(f["check"] == "bf16_tflops" and f["gpu"] == 1 for f in compute["figures"])  # kept
    # the one verdict order: the proven fault makes the host FAIL, the test it blocked counted
    line = next(ln for ln in (rep / "summary.md").read_text().splitlines() if ln.startswith("- **FAIL** `h200-a`"))
    assert "MIG mode is on" in line and "and 1 test blocked" in line and "bf16_tflops GPU 1" not in line, line


def test_damaged_saved_document_is_an_error_in_one_line(tmp_path):
    captures = tmp_path / "captures"
    shutil.copytree(DATA, captures)
    f = next(captures.glob("pcie_link-*.json"))
    f.write_text(f.read_text()[:200])  # cut short
    for g in captures.glob("nvlink-*.json"):
        saved = json.loads(g.read_text())
        saved["doc"] = None
        g.write_text(json.dumps(saved))
    inv = replay_project(tmp_path, captures)
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "pcie_link or nvlink_links")
    got = outcomes(rep)
    for name in ("test_pcie_link", "test_nvlink_links"):
        assert got[name]["outcome"] == "error", got[name]
        text = got[name]["text"]
        assert "(replay)" in text and "Traceback" not in text and "object at 0x" not in text, text
    assert "unreadable: JSONDecodeError" in got["test_pcie_link"]["text"]
    assert "holds no probe document" in got["test_nvlink_links"]["text"]


def test_multinode_allreduce_over_replayed_hosts_is_skipped_not_blamed_on_the_first(tmp_path):
    """over replayed hosts the inter-node all-reduce FAILED with "h-a:
    replayed host ... runs no commands", making the healthy h-a a failed host; a collective cannot be replayed."""
    from project_helpers import replay_folder
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("".join(f"h-{c} ansible_connection=local gpuaccept_replay={replay_folder(tmp_path, DATA)} "
                           "gpu_sku=h200-sxm-141gb gpus_per_node=2\n" for c in "ab"))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "multinode")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    test = next(t for t in json.loads((rep / "results.json").read_text())["tests"]
                if t["nodeid"].endswith("test_allreduce_multinode"))
    assert test["outcome"] == "skipped" and "replay saved documents" in test["message"], test
    assert not (rep / "failed-hosts.txt").exists() or (rep / "failed-hosts.txt").read_text().strip() == ""


def test_a_torch_without_fp8_leaves_fp8_unmeasured_as_the_nodes_software(tmp_path):
    """An older torch on an fp8-capable H200 (no torch._scaled_mm): the matmul probe measures the other dtypes and
    says why fp8 was not run; the test errs for the node's torch (configuration, fix-config), the other figures
    judged as usual, and nothing is drained."""
    def old_torch(doc):
        for g in doc["gpus"]:
            g["dtypes"].pop("fp8", None)
        doc["unsupported"] = {"fp8": {"why": "torch 2.0.1 has no torch._scaled_mm/float8_e4m3fn (fp8 matmuls need "
                                             "torch >= 2.1)", "torch": True}}
    inv = replay_project(tmp_path, alter(tmp_path, "matmul_tflops", old_torch))
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "tensor_tflops")
    (t,) = [t for t in json.loads((rep / "results.json").read_text())["tests"] if "tensor_tflops" in t["nodeid"]]
    assert t["outcome"] == "error" and "fp8_tflops not measured: torch 2.0.1 has no torch._scaled_mm" in t["message"]
    assert {c["kind"] for c in t["causes"]} == {"torch_lacks_dtype"}, t["causes"]
    assert any(f["check"] == "bf16_tflops" and f["verdict"] == "pass" for f in t["figures"])
    assert "drain-rma" not in (rep / "summary.md").read_text()
