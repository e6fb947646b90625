"""The torch measurement probes, run for real as subprocesses on the cpu path (tiny sizes), plus their
pure arithmetic (GB/s, TFLOP/s, byte counts, sysfs parsing, telemetry summaries) imported by path.

The cuda path needs a GPU; on a machine without one each probe must fail cleanly ("no CUDA device").
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from probe_helpers import load_probe as load, run_probe  # noqa: E402 - after the torch check

TORCH_PROBES = ("hbm_bandwidth", "matmul_tflops", "pcie_bandwidth", "launch_overhead")


# ---------------------------------------------------------------- pure arithmetic

def test_gbps_and_babelstream_byte_counting():
    hbm = load("hbm_bandwidth")
    assert hbm.gbps(4e9, 1.0) == pytest.approx(4.0)
    assert hbm.gbps(1 << 30, 0.25) == pytest.approx(4.294967296)
    gib = 1 << 30
    assert [hbm.bytes_per_rep(k, gib) for k in ("read", "dot", "write", "copy", "triad")] == [
        gib, 2 * gib, gib, 2 * gib, 3 * gib]
    with pytest.raises(KeyError):
        hbm.bytes_per_rep("scale", gib)
    pcie = load("pcie_bandwidth")
    assert pcie.gbps(55.3e9, 1.0) == pytest.approx(55.3)
    assert pcie.summarize([0.5, 0.25, 1.0], 1e9) == (2.0, 4.0)


def test_hbm_summary_picks_best_median_per_kernel():
    hbm = load("hbm_bandwidth")
    res = {"read:a": {"median_gbps": 10.0, "max_gbps": 12.0}, "read:b": {"median_gbps": 11.0, "max_gbps": 11.5},
           "copy:c": {"median_gbps": 5.0, "max_gbps": 6.0}}
    out = hbm.summarize(res)
    assert (out["read_gbps"], out["read_gbps_max"], out["method"]["read"]) == (11.0, 11.5, "b")
    assert (out["copy_gbps"], out["method"]["copy"]) == (5.0, "c")
    assert out["write_gbps"] is None and out["method"]["triad"] is None


def test_tflops_formula():
    mm = load("matmul_tflops")
    assert mm.matmul_flop(2, 3, 4) == 48
    # 8192^3 back to back, 1.4 ms each: 2*8192^3/1.4e-3/1e12 = 785.4 TFLOP/s
    assert mm.tflops(8192, 8192, 8192, 100, 0.14) == pytest.approx(2 * 8192**3 / 1.4e-3 / 1e12)
    assert mm.tflops(8192, 8192, 8192, 100, 0.14) == pytest.approx(785.36, abs=0.01)
    assert mm.sig(785.3613) == 785.36 and mm.sig(6.55521e-5) == 6.5552e-5


def test_launch_formula():
    lo = load("launch_overhead")
    assert lo.per_launch_us(0.05, 10000) == pytest.approx(5.0)


def test_pci_bus_id_and_sysfs_numa(tmp_path):
    pcie = load("pcie_bandwidth")

    class Props:
        pci_domain_id, pci_bus_id, pci_device_id = 0, 0x1B, 0

    gpu = load("_gpu")  # the torch probes' shared helpers
    assert gpu.pci_bus_id(Props()) == "00000000:1B:00.0"
    assert gpu.pci_bus_id(object()) is None
    assert pcie.sysfs_pci_name("00000000:1B:00.0") == "0000:1b:00.0"
    assert pcie.sysfs_pci_name("0000:9a:00.0") == "0000:9a:00.0"
    assert pcie.parse_cpulist("0-3,8-9,12\n") == [0, 1, 2, 3, 8, 9, 12]
    assert pcie.parse_cpulist("5") == [5]

    allowed = sorted(os.sched_getaffinity(0))
    dev = tmp_path / "bus/pci/devices/0000:1b:00.0"
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text("1\n")
    node = tmp_path / "devices/system/node/node1"
    node.mkdir(parents=True)
    (node / "cpulist").write_text(f"{allowed[0]}-{allowed[-1]},100000\n")  # 100000: not ours, dropped
    assert pcie.numa_of("00000000:1B:00.0", str(tmp_path)) == (1, allowed)
    (dev / "numa_node").write_text("-1\n")
    assert pcie.numa_of("00000000:1B:00.0", str(tmp_path)) == (-1, None)
    assert pcie.numa_of("00000000:1C:00.0", str(tmp_path)) == (None, None)
    assert pcie.numa_of(None, str(tmp_path)) == (None, None)


def test_telemetry_summary_and_sampler_with_fake_nvml():
    mm = load("matmul_tflops")
    s = mm.summarize_samples([(0.0, 0, 1980, 690.5, 60, 0), (0.1, 0, 1755, 700.25, 62, 4),
                              (0.2, 0, 1830, None, 61, 0x20)])
    assert s == {"sm_clock_mhz_min": 1755, "sm_clock_mhz_median": 1830, "power_w_max": 700.2,
                 "temp_c_max": 62, "clocks_event_reasons": 0x24, "power_limit_w_min": None, "nvml_samples": 3}
    assert mm.summarize_samples([])["sm_clock_mhz_median"] is None

    class FakeNvml:
        NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = 1, 0

        def nvmlDeviceGetClockInfo(self, h, kind):
            return 1900 + h

        def nvmlDeviceGetPowerUsage(self, h):
            return 650_000

        def nvmlDeviceGetTemperature(self, h, kind):
            raise RuntimeError("not supported")  # one failing metric leaves only that field empty

        def nvmlDeviceGetCurrentClocksEventReasons(self, h):
            return 1 << h

    sampler = mm.Sampler(FakeNvml(), {0: 0, 3: 3})
    sampler.sample_once()
    sampler.sample_once()
    w = sampler.window(3, 0.0, float("inf"))
    assert (w["sm_clock_mhz_median"], w["power_w_max"], w["temp_c_max"], w["clocks_event_reasons"],
            w["nvml_samples"]) == (1903, 650.0, None, 8, 2)
    assert sampler.window(0, -2.0, -1.0)["nvml_samples"] == 0


def test_on_gpus_reports_root_cause_not_broken_barrier():
    hbm = load("hbm_bandwidth")

    def fn(index, barrier):
        if index == 1:
            raise ValueError("boom")
        barrier.wait()
        return index

    with pytest.raises(hbm.ProbeFailed, match="GPU 1: ValueError: boom"):
        hbm.on_gpus(fn, [0, 1, 2])
    assert hbm.on_gpus(lambda i, b: (b.wait(), i * 10)[1], [0, 1, 2]) == [0, 10, 20]


# ---------------------------------------------------------------- the probes, for real, on cpu

def test_hbm_bandwidth_cpu():
    rc, doc, err = run_probe("hbm_bandwidth", {"device": "cpu", "bytes": 1 << 20, "iters": 3})
    assert rc == 0, (doc, err[-2000:])
    assert doc["bytes"] == 1 << 20 and doc["iters"] == 3 and len(doc["gpus"]) == 1
    g = doc["gpus"][0]
    for kernel in ("read", "write", "copy", "triad"):
        assert g[f"{kernel}_gbps"] > 0 and g[f"{kernel}_gbps_max"] >= g[f"{kernel}_gbps"]
        method = g["method"][kernel]
        assert g["results"][f"{kernel}:{method}"]["median_gbps"] == g[f"{kernel}_gbps"]
    assert g["read_gbps"] == max(v["median_gbps"] for k, v in g["results"].items() if k.startswith("read:"))
    assert g["results"]["copy:copy_"]["bytes_per_rep"] == 2 << 20
    assert g["results"]["triad:add_out"]["bytes_per_rep"] == 3 << 20
    # windows of iters=3 reps each, until stable or the ceiling; each method says how long, how many, why
    for key, v in g["samples"].items():
        r = g["results"][key]
        assert len(v) == 3 * r["windows"] and min(v) > 0 and r["windows"] >= 1, key
        assert r["stop"] in ("stable", "settled", "ceiling") and r["measured_s"] > 0, key
        assert r["stop"] == "ceiling" or r["windows"] >= 2, key
    assert doc["steady"] == {"min_seconds": 0.002, "max_seconds": 0.05, "tolerance_pct": 0.5}


def test_hbm_bandwidth_cpu_ceiling_and_floor_bound_the_time():
    """A floor above the ceiling's default raises the ceiling with it; tolerance 0 can only stop on the ceiling
    (two window medians of a real measurement are never exactly equal), after at least max_seconds measured."""
    rc, doc, err = run_probe("hbm_bandwidth", {"device": "cpu", "bytes": 1 << 16, "iters": 2,
                                               "read_methods": ["sum_fp32"], "tolerance_pct": 0,
                                               "min_seconds": 0.01, "max_seconds": 0.03})
    assert rc == 0, (doc, err[-2000:])
    for key, r in doc["gpus"][0]["results"].items():
        assert r["stop"] == "ceiling" and r["measured_s"] >= 0.03, (key, r)
    rc, doc, _ = run_probe("hbm_bandwidth", {"device": "cpu", "min_seconds": 2, "max_seconds": 1})
    assert rc == 1 and doc["msg"] == "need 0 <= min_seconds <= max_seconds, got 2.0 and 1.0"


def test_hbm_bandwidth_triton_kernels_under_interpreter():
    pytest.importorskip("triton")
    pytest.importorskip("numpy")
    rc, doc, err = run_probe("hbm_bandwidth", {"device": "cpu", "bytes": 1 << 20, "iters": 1,
                                               "read_methods": ["sum_fp32", "triton_tiles", "triton_persistent"]},
                             env={"TRITON_INTERPRET": "1"})
    assert rc == 0, (doc, err[-2000:])
    g = doc["gpus"][0]
    assert g["errors"] == {}  # both kernels summed the whole buffer correctly
    assert {"read:triton_tiles", "read:triton_persistent"} <= set(g["results"])


def test_matmul_tflops_cpu():
    mm = load("matmul_tflops")
    rc, doc, err = run_probe("matmul_tflops", {"device": "cpu", "m": 32, "n": 48, "k": 16,
                                               "min_seconds": 0.03, "max_seconds": 0.2, "warmup_seconds": 0.02})
    assert rc == 0, (doc, err[-2000:])
    assert doc["steady"] == {"min_seconds": 0.03, "max_seconds": 0.2, "tolerance_pct": 0.5, "window_seconds": 0.02}
    assert doc["search"] is True and doc["fp8_fast_accum"] is False
    dtypes = doc["gpus"][0]["dtypes"]
    assert {"bf16", "fp16", "tf32", "fp64"} <= set(dtypes)
    for d, r in dtypes.items():
        assert r["tflops"] > 0 and r["tflops_max"] >= r["tflops"], d
        assert r["iters"] >= r["batch"] >= 20 and r["iters"] % r["batch"] == 0
        assert (r["m"], r["n"], r["k"]) == (32, 48, 16)  # a shape asked for is the shape measured
        # the fastest batch is at least as fast as the whole window's average (2mnk * iters / seconds), within
        # the timer's noise on a loaded CPU (the window's clock and the batches' clock are read separately)
        average = mm.tflops(32, 48, 16, r["iters"], r["seconds"])
        assert r["tflops_max"] >= average * 0.9
        assert r["sm_clock_mhz_median"] is None and r["nvml_samples"] == 0
        # the stop rule's record: how long, how many windows, why it stopped
        assert r["stop"] in ("stable", "settled", "ceiling") and len(r["window_tflops"]) == r["windows"] >= 1, d
        assert r["measured_s"] >= 0.03 and (r["stop"] == "ceiling" or r["windows"] >= 2), d
        # the candidates tried and the one measured, named
        cands = r["candidates"]
        assert (r["layout"], r["path"]) in {(c["layout"], c["path"]) for c in cands}
        assert r["chosen_because"]
        if d == "fp64":
            assert [(c["layout"], c["path"]) for c in cands] == [("A@B^T", "mm")] and cands[0]["trial_tflops"] is None
        elif d == "fp8":
            assert [c["path"] for c in cands] == ["scaled_mm/bf16-out", "scaled_mm/fp8-out"]
        else:
            assert [(c["layout"], c["path"]) for c in cands] == [("A@B^T", "mm"), ("A@B", "mm")]
            assert all(c["trial_tflops"] > 0 for c in cands)
            # every round's figure, paired by round with the default's (pick's rule reads them)
            assert all(len(c["trial_rounds_tflops"]) == mm.TRIAL_ROUNDS for c in cands)


def test_matmul_search_off_measures_the_default_only():
    rc, doc, err = run_probe("matmul_tflops", {"device": "cpu", "dtypes": ["bf16"], "search": False,
                                               "seconds_per_dtype": 0.05, "warmup_seconds": 0.02})
    assert rc == 0, (doc, err[-2000:])
    r = doc["gpus"][0]["dtypes"]["bf16"]
    assert (r["m"], r["n"], r["k"], r["layout"], r["path"]) == (64, 64, 64, "A@B^T", "mm")
    assert len(r["candidates"]) == 1 and r["chosen_because"].startswith("the only candidate")
    # seconds_per_dtype, the older form: floor = ceiling, so at least that long is measured
    assert doc["steady"]["min_seconds"] == doc["steady"]["max_seconds"] == 0.05 and r["measured_s"] >= 0.05


def test_matmul_pick_and_wave_fit():
    mm = load("matmul_tflops")
    # one choice for all GPUs, from the sum of their trials' medians; the default stays unless > 0.5 % slower
    assert mm.pick({0: [[100.0], [100.4]], 1: [[100.0], [100.4]]}, 2)[0] == 0
    assert mm.pick({0: [[100.0], [102.0]], 1: [[100.0], [101.0]]}, 2)[0] == 1
    assert mm.pick({0: [[100.0], [100.2], None], 1: [[100.0], [100.1], [150.0]]}, 3)[0] == 0  # 2 failed on GPU 0
    assert mm.pick({0: [None, [90.0]]}, 2) == (1, "the fastest in the trials (the default failed)")
    assert mm.pick({0: [[1.0]]}, 1)[0] == 0
    with pytest.raises(mm.ProbeFailed, match="no matmul candidate"):
        mm.pick({0: [None, None]}, 2)
    # a challenger faster in sum but not in every paired round stays out: the trials' noise, not a faster path
    noisy = {0: [[1266.0, 1290.0, 1262.0, 1270.0], [1290.0, 1285.0, 1288.0, 1284.0]]}
    idx, why = mm.pick(noisy, 2)
    assert idx == 0 and "not in every trial round (3 of 4)" in why
    clear = {0: [[1266.0, 1270.0, 1262.0, 1270.0], [1290.0, 1285.0, 1288.0, 1284.0]],
             1: [[1250.0, 1251.0], [1280.0, 1282.0]]}
    assert mm.pick(clear, 2) == (1, "the fastest in the trials (faster than the default in each of its 6 rounds)")
    # 8192x8192 on 132 SMs: 2048 tiles of 128x256 = 15.5 waves; 8448 rows make 2112 = 16 whole waves
    assert mm.wave_fit_m(8192, 8192, 132) == 8448
    assert (8448 // 128) * (8192 // 256) % 132 == 0
    assert mm.wave_fit_m(8192, 8192, 128) is None  # already whole waves
    assert mm.wave_fit_m(8192, 8192, 108) is None  # the nearest fit is more than 6 % away
    assert mm.wave_fit_m(64, 64, 132) is None


def test_matmul_candidate_shapes():
    mm = load("matmul_tflops")
    cube = (8192, 8192, 8192)
    # a 132-SM H100/H200: the asked shape, its wave fit, and for fp8 the wave fit with DEEP_K times the K
    assert mm.DEEP_K == 4
    assert mm.candidate_shapes("fp8", cube, 132) == [cube, (8448, 8192, 8192), (8448, 8192, 32768)]
    assert mm.candidate_shapes("bf16", cube, 132) == [cube, (8448, 8192, 8192)]
    assert mm.candidate_shapes("fp64", (4096,) * 3, 132) == [(4096,) * 3]
    # no wave fits on 128 SMs: the deep-K variant keeps M
    assert mm.candidate_shapes("fp8", cube, 128) == [cube, (8192, 8192, 32768)]
    # not searched, or the CPU: the asked shape alone
    assert mm.candidate_shapes("fp8", cube, None) == [cube]


def test_matmul_fp8_default_is_the_deep_k_e4m3_out_product_where_sms_are_known():
    """The candidate measured without a search (the quick profile) and kept unless another beats it: for fp8 on a
    132-SM GPU the deep-K product writing e4m3 (the fastest measured on H100 and H200); with no SM count (cpu) the
    asked shape writing bf16; for bf16 the wave-fit shape, K-major. Searched sets hold every shape and path once."""
    mm = load("matmul_tflops")
    cube = (8192, 8192, 8192)
    deep = {"m": 8448, "n": 8192, "k": 32768, "layout": "A@B^T", "path": "scaled_mm/fp8-out", "use_fast_accum": False}
    assert mm.candidates("fp8", cube, 132, False, False) == [deep]
    full = mm.candidates("fp8", cube, 132, True, False)
    assert full[0] == deep and len(full) == 6 and len({tuple(sorted(c.items())) for c in full}) == 6
    assert {(c["m"], c["k"], c["path"]) for c in full} == {
        (m, k, p) for m, k in ((8192, 8192), (8448, 8192), (8448, 32768))
        for p in ("scaled_mm/fp8-out", "scaled_mm/bf16-out")}
    assert mm.candidates("fp8", cube, None, False, True) == [
        {"m": 8192, "n": 8192, "k": 8192, "layout": "A@B^T", "path": "scaled_mm/bf16-out", "use_fast_accum": True}]
    # bf16: the wave-fit shape first (the trials' choice), the asked one tried beside it; none fits 128 SMs
    assert mm.candidates("bf16", cube, 132, False, False) == [
        {"m": 8448, "n": 8192, "k": 8192, "layout": "A@B^T", "path": "mm"}]
    assert [(c["m"], c["layout"]) for c in mm.candidates("bf16", cube, 132, True, False)] == [
        (8448, "A@B^T"), (8448, "A@B"), (8192, "A@B^T"), (8192, "A@B")]
    assert mm.candidates("bf16", cube, 128, False, False)[0]["m"] == 8192
    assert mm.candidates("fp16", cube, 132, False, False)[0]["m"] == 8192  # measured as asked


def test_matmul_trial_order_mirrors_rounds():
    mm = load("matmul_tflops")
    order = mm.trial_order(3, 4)
    assert order == [0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0]
    # every candidate runs once per round, and its mean position is the same as every other's: a clock that
    # drifts through the trials (linearly) weighs on each candidate alike
    for c in range(3):
        pos = [i for i, x in enumerate(order) if x == c]
        assert len(pos) == 4 and sum(pos) / 4 == (len(order) - 1) / 2
    assert mm.trial_order(1, 2) == [0, 0]


def test_matmul_fp8_cpu_if_supported():
    if not hasattr(torch, "_scaled_mm"):
        pytest.skip("torch has no _scaled_mm")
    rc, doc, err = run_probe("matmul_tflops", {"device": "cpu", "dtypes": ["fp8"], "m": 32, "n": 32, "k": 32,
                                               "min_seconds": 0.02, "max_seconds": 0.1, "warmup_seconds": 0.01})
    if rc == 1 and "not supported" in doc["msg"]:
        pytest.skip(doc["msg"])
    assert rc == 0, (doc, err[-2000:])
    r = doc["gpus"][0]["dtypes"]["fp8"]
    assert r["tflops"] > 0 and r["use_fast_accum"] is False
    paths = [c["path"] for c in r["candidates"]]
    assert paths == ["scaled_mm/bf16-out", "scaled_mm/fp8-out"] and r["path"] in paths
    assert all(c["use_fast_accum"] is False for c in r["candidates"])  # fast accumulation is never a candidate


def test_pcie_bandwidth_cpu_both_modes():
    rc, doc, err = run_probe("pcie_bandwidth", {"device": "cpu", "bytes": 1 << 20, "iters": 3, "mode": "both"})
    assert rc == 0, (doc, err[-2000:])
    g = doc["gpus"][0]
    for f in ("h2d_gbps", "d2h_gbps", "h2d_gbps_all", "d2h_gbps_all"):
        assert g[f] > 0, f
    assert g["numa_node"] is None and g["cpus_bound"] is None
    assert doc["h2d_gbps_all_total"] == g["h2d_gbps_all"]
    assert set(g["measure"]) == {"h2d", "d2h", "h2d_all", "d2h_all"}
    # one GPU copying alone is every GPU copying at once: measured once, said so
    assert (g["h2d_gbps_all"], g["d2h_gbps_all"]) == (g["h2d_gbps"], g["d2h_gbps"])
    assert g["measure"]["h2d_all"]["as"] == "h2d" and g["measure"]["d2h_all"]["as"] == "d2h"
    for how in g["measure"].values():
        assert how["stop"] in ("stable", "settled", "ceiling") and how["windows"] >= 1 and how["measured_s"] > 0
        assert how["stop"] == "ceiling" or how["windows"] >= 2
    rc, doc, _ = run_probe("pcie_bandwidth", {"device": "cpu", "bytes": 4096, "iters": 2, "mode": "each"})
    assert rc == 0 and doc["gpus"][0]["h2d_gbps_all"] is None and doc["h2d_gbps_all_total"] is None
    assert set(doc["gpus"][0]["measure"]) == {"h2d", "d2h"}


def test_pcie_bandwidth_cpu_drifting_runs_to_the_ceiling():
    """Tolerance 0: a real series never repeats its median exactly, so every figure runs to its ceiling."""
    rc, doc, err = run_probe("pcie_bandwidth", {"device": "cpu", "bytes": 1 << 16, "iters": 2, "mode": "both",
                                                "tolerance_pct": 0, "min_seconds": 0, "max_seconds": 0.02})
    assert rc == 0, (doc, err[-2000:])
    for name, how in doc["gpus"][0]["measure"].items():
        assert how["stop"] == "ceiling" and how["measured_s"] >= 0.02, (name, how)


def test_launch_overhead_cpu():
    rc, doc, err = run_probe("launch_overhead", {"device": "cpu", "iters": 500})
    assert rc == 0, (doc, err[-2000:])
    g = doc["gpus"][0]
    assert g["launch_us_wall"] > 0 and g["launch_us_events"] > 0


# ---------------------------------------------------------------- failures

def test_unknown_dtype_fails_cleanly():
    rc, doc, _ = run_probe("matmul_tflops", {"device": "cpu", "dtypes": ["bf16", "fp7"]})
    assert rc == 1 and doc["failed"] is True
    assert "fp7" in doc["msg"] and "\n" not in doc["msg"]


@pytest.mark.parametrize("name,args,needle", [
    ("hbm_bandwidth", {"device": "cpu", "read_methods": ["sum_fp99"]}, "sum_fp99"),
    ("hbm_bandwidth", {"device": "cpu", "byts": 5}, "byts"),
    ("pcie_bandwidth", {"device": "cpu", "mode": "sometimes"}, "sometimes"),
    ("launch_overhead", {"device": "tpu"}, "tpu"),
    ("matmul_tflops", {"device": "cpu", "dtypes": "bf16"}, "dtypes must be a non-empty list"),
])
def test_bad_args_fail_cleanly(name, args, needle):
    rc, doc, _ = run_probe(name, args)
    assert rc == 1 and doc["failed"] is True and "\n" not in doc["msg"]
    assert needle in doc["msg"], doc["msg"]


@pytest.mark.parametrize("name", TORCH_PROBES)
def test_one_argument_prologue(name):
    """Every torch probe refuses an unknown argument and a device other than cuda/cpu with the same words
    (the prologue in probes/_gpu.py: probe_device)."""
    rc, doc, _ = run_probe(name, {"device": "cpu", "bogus": 1})
    assert (rc, doc) == (1, {"failed": True, "msg": "unknown argument(s): bogus"})
    rc, doc, _ = run_probe(name, {"device": "tpu"})
    assert (rc, doc) == (1, {"failed": True, "msg": "device must be \"cuda\" or \"cpu\", got 'tpu'"})


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("name", TORCH_PROBES)
def test_cuda_without_gpu_says_no_cuda_device(name):
    rc, doc, _ = run_probe(name, {"device": "cuda"})
    assert rc == 1 and doc["failed"] is True
    assert "no CUDA device" in doc["msg"] and "\n" not in doc["msg"]


def test_the_quick_profile_measures_the_default_matmul_shape_only():
    """The nightly profile (quick) runs no candidate trials: one shape night after night, so the figure's history
    key (which holds its shape) stays one series; the standard profile searches."""
    from gpuaccept.config.profiles import probe_args
    args = probe_args("quick", "matmul_tflops", {"device": "cpu", "dtypes": ["bf16", "fp32"], "max_seconds": 0.1,
                                                 "min_seconds": 0.02, "warmup_seconds": 0.05})
    rc, doc, err = run_probe("matmul_tflops", args)
    assert rc == 0, (doc, err[-2000:])
    assert doc["search"] is False
    for dt, r in doc["gpus"][0]["dtypes"].items():
        assert len(r["candidates"]) == 1, (dt, r["candidates"])
    assert probe_args("standard", "matmul_tflops", {}).get("search", True) is True
