"""Probe fidelity: run the torch probes on a GPU machine and compare them with plain reference loops.

Run ON THE GPU MACHINE (torch with CUDA installed), from the repository root::

    python benchmarks/probe_fidelity.py            # all probes + references, ~1-2 minutes on one H200
    python benchmarks/probe_fidelity.py --no-cold  # skip the second (cold/warm Triton cache) hbm run

It runs gpuaccept/probes/{hbm_bandwidth,matmul_tflops,pcie_bandwidth,launch_overhead}.py as
subprocesses with their default arguments (every GPU), then, on GPU 0 alone, simple references:
torch.sum over a 4 GiB fp32 buffer, dst.copy_(src), dst.fill_, plain torch.matmul 8192^3 loops per
dtype timed by wall clock + synchronize, torch._scaled_mm for fp8, pinned 1 GiB copies and a
launch loop. It prints: figure | ours | reference | ratio | known | target | seconds, where
"known" is what others measured on an H200 (BabelStream, torch, cuBLAS runs; see the brief in the
probes' docstrings) and "target" what ours must reach. With $OUT set, the table, the probes' JSON
documents and the tails of their stderr go to $OUT/probe_fidelity.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PROBES = ROOT / "gpuaccept" / "probes"
GIB = 1 << 30

# Others' H200 figures (GB/s = 1e9 B/s, TFLOP/s = 1e12 FLOP/s) and the bars ours must clear.
KNOWN = {"read": 4525.0, "read_torch_sum": 4387.0, "write": 4676.0, "copy": 4308.0, "triad": 4384.0,
         "bf16": 786.0, "fp16": 759.0, "tf32": 406.0, "fp8": 1447.0, "h2d": 55.3, "d2h": 55.3}
TARGET = {"read": 4450.0, "bf16": 780.0, "hbm_seconds": 10.0, "matmul_seconds": 20.0, "pcie_seconds": 15.0}


def run_probe(name: str, args: dict | None = None) -> tuple[dict, float, str]:
    """(JSON document, wall seconds, stderr tail) of one probe run as the runner would run it."""
    t0 = time.time()
    proc = subprocess.run([sys.executable, str(PROBES / f"{name}.py"), json.dumps(args or {})],
                          capture_output=True, text=True, timeout=600)
    secs = time.time() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    try:
        doc = json.loads(lines[-1])
    except (IndexError, ValueError):
        doc = {"failed": True, "msg": f"no JSON on stdout (rc {proc.returncode})"}
    print(f"[{name}] rc={proc.returncode} {secs:.1f} s" + (f" FAILED: {doc.get('msg')}" if doc.get("failed") else ""),
          flush=True)
    return doc, secs, proc.stderr[-4000:]


def events_median(fn, reps: int = 30, warm: int = 3) -> tuple[float, float]:
    """(median seconds per call by CUDA events, wall seconds spent)."""
    t0 = time.time()
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    ev[0].record()
    for i in range(reps):
        fn()
        ev[i + 1].record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) / 1e3 for a, b in zip(ev, ev[1:])), time.time() - t0


def wall_rate(fn, warm_s: float = 1.0, run_s: float = 2.0) -> tuple[float, int, float]:
    """(seconds per call by wall clock over ~run_s after ~warm_s of warm-up, calls, wall seconds spent)."""
    t_start = time.time()
    n_warm, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < warm_s:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        n_warm += 10
    per = (time.perf_counter() - t0) / n_warm
    n = max(10, int(run_s / per))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n, n, time.time() - t_start


def ref_hbm(dev: torch.device, ref: dict) -> None:
    n = 4 * GIB // 4  # 4 GiB of fp32 per buffer
    src = torch.rand(n, device=dev)
    dst = torch.rand(n, device=dev)
    s, w = events_median(lambda: torch.sum(src))
    ref["read"] = (4 * GIB / s / 1e9, w)
    s, w = events_median(lambda: dst.copy_(src))
    ref["copy"] = (2 * 4 * GIB / s / 1e9, w)
    s, w = events_median(lambda: dst.fill_(1.0))
    ref["write"] = (4 * GIB / s / 1e9, w)


def ref_matmul(name: str, dev: torch.device, ref: dict) -> None:
    """Plain torch.matmul(a, b) (fp8: torch._scaled_mm) back to back, timed by wall clock."""
    size = 4096 if name == "fp64" else 8192
    if name == "fp8":
        a = torch.randn(size, size, device=dev).to(torch.float8_e4m3fn)
        bt = torch.randn(size, size, device=dev).to(torch.float8_e4m3fn).t()  # column-major, as required
        one = torch.tensor(1.0, device=dev)
        per, _, w = wall_rate(lambda: torch._scaled_mm(a, bt, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    else:
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp64": torch.float64}[name]
        a = torch.randn(size, size, device=dev, dtype=dt)
        b = torch.randn(size, size, device=dev, dtype=dt)
        saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        try:
            per, _, w = wall_rate(lambda: torch.matmul(a, b))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved
    ref[name] = (2 * size**3 / per / 1e12, w)


def ref_pcie(dev: torch.device, ref: dict) -> None:
    """Pinned 1 GiB copies each way, no NUMA binding."""
    host = torch.empty(GIB, dtype=torch.uint8, pin_memory=True)
    host.fill_(1)
    d = torch.empty(GIB, dtype=torch.uint8, device=dev)
    s, w = events_median(lambda: d.copy_(host, non_blocking=True), reps=10, warm=1)
    ref["h2d"] = (GIB / s / 1e9, w)
    s, w = events_median(lambda: host.copy_(d, non_blocking=True), reps=10, warm=1)
    ref["d2h"] = (GIB / s / 1e9, w)


def ref_launch(dev: torch.device, ref: dict) -> None:
    x = torch.zeros(1, device=dev)
    for _ in range(1000):
        x.add_(1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10000):
        x.add_(1)
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    ref["launch_us"] = (secs / 10000 * 1e6, secs)


def references() -> dict:
    """Reference figures on GPU 0: {name: (value, seconds spent)}."""
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    cc = torch.cuda.get_device_capability(0)
    ref: dict = {}
    ref_hbm(dev, ref)
    for name in ("bf16", "fp16", "tf32", "fp8", "fp64"):
        if name == "fp8" and not (cc >= (8, 9) and hasattr(torch, "_scaled_mm")):
            continue
        if name == "fp64" and cc not in ((8, 0), (9, 0), (10, 0)):
            continue
        ref_matmul(name, dev, ref)
        torch.cuda.empty_cache()
    ref_pcie(dev, ref)
    ref_launch(dev, ref)
    return ref


TRITON_SWEEP = [("tiles", 4096, 4, 0), ("tiles", 8192, 8, 0), ("tiles", 16384, 8, 0),
                ("persistent", 2048, 4, 16), ("persistent", 4096, 4, 8), ("persistent", 4096, 8, 8),
                ("persistent", 8192, 8, 4), ("persistent", 8192, 16, 2), ("persistent", 16384, 16, 2)]


def triton_sweep() -> list[dict]:
    """Read GB/s of the hbm probe's Triton kernels over a few tile/warp/grid configs, GPU 0, 4 GiB fp32."""
    sys.path.insert(0, str(PROBES))
    import hbm_bandwidth as hbm

    triton, kernels = hbm.load_triton("cuda")
    if triton is None:
        return [{"config": None, "error": kernels}]
    torch.cuda.set_device(0)
    x = torch.rand(GIB, device="cuda")  # 4 GiB fp32
    expect = torch.sum(x, dtype=torch.float64).item()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = []
    for conf in TRITON_SWEEP:
        try:
            rep = hbm.triton_reader(kernels, conf, x, sms)
            got = rep().sum(dtype=torch.float64).item()
            s, w = events_median(rep)
            out.append({"config": conf, "gbps": 4 * GIB / s / 1e9, "ok": abs(got - expect) <= 1e-4 * expect,
                        "seconds": w})
        except Exception as e:  # noqa: BLE001
            out.append({"config": conf, "error": f"{type(e).__name__}: {e}"[:200]})
    del x
    torch.cuda.empty_cache()
    return out


def fmt(v, nd=1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-cold", action="store_true", help="run the hbm probe once (skip the warm-cache rerun)")
    opts = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device visible to torch: run this on the GPU machine", file=sys.stderr)
        return 2
    try:
        import triton
        triton_v = triton.__version__
    except Exception as e:  # noqa: BLE001
        triton_v = f"unavailable ({e})"
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
           "gpus": torch.cuda.device_count(), "triton": triton_v}
    print("environment:", json.dumps(env), flush=True)

    docs, secs, errs = {}, {}, {}
    runs = [("hbm_bandwidth", "hbm"), ("matmul_tflops", "matmul"), ("pcie_bandwidth", "pcie"),
            ("launch_overhead", "launch")]
    if not opts.no_cold:
        runs.insert(1, ("hbm_bandwidth", "hbm_again"))
    for probe, key in runs:
        docs[key], secs[key], errs[key] = run_probe(probe)
    ref = references()
    sweep = triton_sweep()

    def gpu0(key):
        d = docs.get(key) or {}
        return None if d.get("failed") or not d.get("gpus") else d["gpus"][0]

    hbm, mm, pc, lo = gpu0("hbm"), gpu0("matmul"), gpu0("pcie"), gpu0("launch")
    rows = []

    def row(figure, ours, ref_key=None, known=None, target=None, seconds=None, note=""):
        reference = ref[ref_key][0] if ref_key in ref else None
        ratio = ours / reference if ours and reference else None
        passed = None if target is None or ours is None else (ours >= target)
        rows.append({"figure": figure, "ours": ours, "reference": reference, "ratio": ratio, "known": known,
                     "target": target, "pass": passed,
                     "seconds": seconds if seconds is not None else (ref[ref_key][1] if ref_key in ref else None),
                     "note": note})

    if hbm:
        row("HBM read GB/s (best method)", hbm["read_gbps"], "read", KNOWN["read"], TARGET["read"],
            note=f"method {hbm['method']['read']}")
        row("HBM read GB/s (torch.sum fp32)", hbm["results"].get("read:sum_fp32", {}).get("median_gbps"), "read",
            KNOWN["read_torch_sum"])
        row("HBM write GB/s", hbm["write_gbps"], "write", KNOWN["write"], note=f"method {hbm['method']['write']}")
        row("HBM copy GB/s (r+w)", hbm["copy_gbps"], "copy", KNOWN["copy"], note=f"method {hbm['method']['copy']}")
        row("HBM triad GB/s", hbm["triad_gbps"], None, KNOWN["triad"])
    if mm:
        for d, r in mm["dtypes"].items():
            row(f"{d} TFLOP/s", r["tflops"], d, KNOWN.get(d), TARGET.get(d),
                note=f"{r['m']}x{r['n']}x{r['k']} clk med {r['sm_clock_mhz_median']} MHz, "
                     f"{r['power_w_max']} W max, reasons {r['clocks_event_reasons']}")
    if pc:
        row("H2D GB/s (alone)", pc["h2d_gbps"], "h2d", KNOWN["h2d"], note=f"numa {pc['numa_node']}")
        row("D2H GB/s (alone)", pc["d2h_gbps"], "d2h", KNOWN["d2h"])
        row("H2D GB/s (all GPUs)", pc["h2d_gbps_all"], None, KNOWN["h2d"])
        row("D2H GB/s (all GPUs)", pc["d2h_gbps_all"], None, KNOWN["d2h"])
    if lo:
        row("launch us (wall)", lo["launch_us_wall"], "launch_us", note=f"events {lo['launch_us_events']} us")
    for key, budget in (("hbm", "hbm_seconds"), ("hbm_again", "hbm_seconds"), ("matmul", "matmul_seconds"),
                        ("pcie", "pcie_seconds"), ("launch", None)):
        if key in secs:
            target = TARGET.get(budget) if budget else None
            rows.append({"figure": f"{key} probe wall s", "ours": secs[key], "reference": None, "ratio": None,
                         "known": None, "target": target, "pass": None if target is None else secs[key] <= target,
                         "seconds": secs[key], "note": "budget: at most target"})

    head = (f"{'figure':34} {'ours':>9} {'reference':>9} {'ratio':>6} {'known':>8} {'target':>7} {'pass':>5} "
            f"{'secs':>6}  note")
    print("\n" + head + "\n" + "-" * len(head))
    for r in rows:
        print(f"{r['figure']:34} {fmt(r['ours'], 2):>9} {fmt(r['reference'], 2):>9} {fmt(r['ratio'], 3):>6} "
              f"{fmt(r['known']):>8} {fmt(r['target']):>7} {str(r['pass']) if r['pass'] is not None else '-':>5} "
              f"{fmt(r['seconds']):>6}  {r['note']}")
    if hbm:
        print("\nHBM methods on GPU 0 (median / max GB/s):")
        for k, v in hbm["results"].items():
            print(f"  {k:28} {v['median_gbps']:>9.1f} {v['max_gbps']:>9.1f}")
        if hbm.get("errors"):
            print("  left out:", json.dumps(hbm["errors"]))
        print("  triton:", docs["hbm"].get("triton"))
    print("\nTriton read sweep on GPU 0 (kind, BLOCK, warps, programs/SM): GB/s")
    for r in sweep:
        print(f"  {r['config']}: " + (f"{r['gbps']:.1f} (sum ok: {r['ok']}, {r['seconds']:.1f} s incl. compile)"
                                      if "gbps" in r else r.get("error", "")))
    if docs.get("matmul") and not docs["matmul"].get("failed"):
        print("\nmatmul per GPU:", json.dumps([{g["index"]: {d: r["tflops"] for d, r in g["dtypes"].items()}}
                                                for g in docs["matmul"]["gpus"]]), "nvml:", docs["matmul"].get("nvml"))
    for key, doc in docs.items():
        if doc.get("failed"):
            print(f"\n[{key}] FAILED: {doc.get('msg')}\n--- stderr tail ---\n{errs[key]}")

    out = os.environ.get("OUT")
    if out:
        path = Path(out) / "probe_fidelity.json"
        path.write_text(json.dumps({"environment": env, "table": rows, "probes": docs,
                                    "probe_seconds": secs, "stderr_tails": errs, "triton_sweep": sweep,
                                    "references": {k: v[0] for k, v in ref.items()}}, indent=1, default=str))
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
