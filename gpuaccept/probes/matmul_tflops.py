"""Sustained dense matmul TFLOP/s per dtype on every GPU at once, with clocks/power/temperature beside.

Args (JSON object, every key optional)::

    {"device": "cuda" | "cpu",            # cpu: the same code path, tiny sizes, for CI
     "dtypes": ["bf16", "fp16", "tf32", "fp8", "fp64"],   # default: those the device supports
     "m": 8192, "n": 8192, "k": 8192,      # default 8192 (fp64: 4096; cpu: 64), one set for all dtypes
     "seconds_per_dtype": 2.0,             # sustained timed window per dtype (cpu: 0.1)
     "warmup_seconds": 1.0,                # warm-up cap per dtype (see below)
     "fp8_fast_accum": false,              # torch._scaled_mm(use_fast_accum=...)
     "gpus": [0, 1] | "all"}

Output::

    {"device", "nvml": "ok" | "unavailable: ...", "gpus": [{"index", "name", "pci_bus_id",
     "dtypes": {"bf16": {"tflops", "tflops_max", "iters", "batch", "seconds", "m", "n", "k",
                         "sm_clock_mhz_min", "sm_clock_mhz_median", "power_w_max", "temp_c_max",
                         "clocks_event_reasons", "power_limit_w_min", "nvml_samples"}, ...}}]}

FLOP count: a (m x k) @ (k x n) product is m*n*k fused multiply-adds = 2*m*n*k FLOP (the convention of
cuBLAS's and NVIDIA's datasheet peak figures). TFLOP/s = 2*m*n*k * iters / seconds / 1e12, from the
median batch. Operands: torch.randn (random data draws realistic power), C = A @ B^T with B stored
(n, k) row-major, i.e. both operands K-major -- the layout torch._scaled_mm requires for fp8 (mat2
column-major) and the one nn.Linear uses, so every dtype runs the same layout. fp8 is e4m3
(torch.float8_e4m3fn) with per-tensor fp32 scales and a bf16 output. tf32 is fp32 inputs with
torch.backends.cuda.matmul.allow_tf32 = True, set for that dtype only and restored after.

Timing: per dtype, all GPUs start together (threads + barrier; torch releases the GIL in each op).
Warm-up runs event-timed batches until two successive batches agree within 1% (after >= 0.2 s; the
first dtype >= 0.5 s, as clocks ramp from idle) or ``warmup_seconds`` pass. Then batches of >= 20
back-to-back matmuls (about 50 ms each) are enqueued for ``seconds_per_dtype`` and timed with CUDA
events between batches; the figure is from the median batch. Default total on an H200 with five
dtypes: about 5 x (0.3..1 + 2) s plus start-up, under 20 s.

Telemetry (when pynvml imports and initialises): a background thread samples every GPU at 10 Hz: SM
clock (MHz), power (W, nvmlDeviceGetPowerUsage: on recent drivers a ~1 s average), GPU temperature (C),
the clocks event (throttle) reasons bitmask and the enforced power limit (W, nvmlDeviceGetEnforcedPowerLimit;
its lowest value in the window is ``power_limit_w_min``); each dtype keeps the samples inside its timed window.
"""
from __future__ import annotations

import math
import statistics
import threading
import time

import torch

from _conditions import Watch
from _gpu import Clock, bus_ids, describe_gpu, gpu_indices, on_gpus, pci_bus_id, probe_device, sig
from _probe import ProbeFailed, log, run

ARG_KEYS = {"device", "dtypes", "m", "n", "k", "seconds_per_dtype", "warmup_seconds", "fp8_fast_accum", "gpus", "attempt"}
KNOWN_DTYPES = ("bf16", "fp16", "tf32", "fp8", "fp64", "fp32")
DEFAULT_ORDER = ("bf16", "fp16", "tf32", "fp8", "fp64")
MIN_BATCH = 20
BATCH_SECONDS = 0.05
SAMPLE_HZ = 10.0


def matmul_flop(m: int, n: int, k: int) -> int:
    """FLOP of one (m x k) @ (k x n) product: m*n*k multiply-adds, 2 FLOP each."""
    return 2 * m * n * k


def tflops(m: int, n: int, k: int, iters: int, seconds: float) -> float:
    """TFLOP/s (1e12 FLOP/s) of ``iters`` products of that shape done in ``seconds``."""
    return matmul_flop(m, n, k) * iters / seconds / 1e12


# ---------------------------------------------------------------- telemetry

class Sampler(threading.Thread):
    """Samples (time, index, sm_mhz, power_w, temp_c, reasons, power_limit_w) for each GPU at SAMPLE_HZ."""

    def __init__(self, nvml, handles: dict):
        super().__init__(daemon=True)
        self.nvml, self.handles = nvml, handles
        self.samples: list[tuple] = []
        self.stop_event = threading.Event()
        nv = nvml
        self.reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)

    @staticmethod
    def _try(fn, *a):
        try:
            return fn(*a)
        except Exception:  # noqa: BLE001 - one unsupported metric leaves just that field empty
            return None

    def sample_once(self) -> None:
        nv = self.nvml
        for index, h in self.handles.items():
            mhz = self._try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
            mw = self._try(nv.nvmlDeviceGetPowerUsage, h)
            temp = self._try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
            reasons = self._try(self.reasons_fn, h) if self.reasons_fn else None
            cap = self._try(nv.nvmlDeviceGetEnforcedPowerLimit, h) if hasattr(nv, "nvmlDeviceGetEnforcedPowerLimit") \
                else None
            self.samples.append((time.perf_counter(), index, mhz, None if mw is None else mw / 1000.0,
                                 temp, reasons, None if cap is None else cap / 1000.0))

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.sample_once()
            self.stop_event.wait(1.0 / SAMPLE_HZ)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=5)

    def window(self, index: int, t0: float, t1: float) -> dict:
        return summarize_samples([s for s in list(self.samples) if s[1] == index and t0 <= s[0] <= t1])


def summarize_samples(samples: list[tuple]) -> dict:
    """Telemetry fields for one GPU and window from (t, index, mhz, watts, temp, reasons[, power limit W])."""
    def col(i):
        return [s[i] for s in samples if len(s) > i and s[i] is not None]

    mhz, watts, temps, reasons, caps = col(2), col(3), col(4), col(5), col(6)
    bits = 0
    for r in reasons:
        bits |= int(r)
    return {
        "sm_clock_mhz_min": min(mhz) if mhz else None,
        "sm_clock_mhz_median": statistics.median(mhz) if mhz else None,
        "power_w_max": round(max(watts), 1) if watts else None,
        "temp_c_max": max(temps) if temps else None,
        "clocks_event_reasons": bits if reasons else None,
        "power_limit_w_min": round(min(caps), 3) if caps else None,
        "nvml_samples": len(samples),
    }


def start_sampler(device: str, indices: list[int]):
    """(Sampler or None, state string). NVML handles are matched by PCI bus id, then by UUID."""
    if device != "cuda":
        return None, "unavailable: not used on cpu"
    try:
        import pynvml as nvml

        nvml.nvmlInit()
    except Exception as e:  # noqa: BLE001
        return None, f"unavailable: {type(e).__name__}: {e}".splitlines()[0]
    handles = {}
    for i in indices:
        props = torch.cuda.get_device_properties(i)
        bus, uuid = pci_bus_id(props), getattr(props, "uuid", None)
        for lookup, key in ((nvml.nvmlDeviceGetHandleByPciBusId, bus),
                            (nvml.nvmlDeviceGetHandleByUUID, uuid and "GPU-" + str(uuid).removeprefix("GPU-"))):
            if key and i not in handles:
                try:
                    handles[i] = lookup(key.encode())
                except Exception:  # noqa: BLE001 - try the next way
                    pass
    if not handles:
        return None, "unavailable: no NVML handle matched the torch devices"
    sampler = Sampler(nvml, handles)
    sampler.start()
    missing = [i for i in indices if i not in handles]
    return sampler, "ok" if not missing else f"ok except GPU(s) {missing}"


# ---------------------------------------------------------------- matmul

def supported_dtypes(device: torch.device) -> list[str]:
    """Dtypes of DEFAULT_ORDER this device runs: fp8 needs compute capability >= 8.9 and
    torch._scaled_mm; fp64 is left to GPUs with fp64 tensor cores (8.0, 9.0, 10.0)."""
    has_fp8 = hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")
    if device.type == "cpu":
        return [d for d in DEFAULT_ORDER if d != "fp8" or has_fp8]
    cc = torch.cuda.get_device_capability(device)
    out = ["bf16", "fp16", "tf32"] if cc >= (8, 0) else ["fp16"]
    if has_fp8 and cc >= (8, 9):
        out.append("fp8")
    if cc in ((8, 0), (9, 0), (10, 0)):
        out.append("fp64")
    return out


def make_matmul(dtype: str, m: int, n: int, k: int, dev: torch.device, fast_accum: bool, seed: int):
    """A zero-argument function doing one C = A @ B^T product of ``dtype`` (B stored (n, k))."""
    gen = torch.Generator(device=dev).manual_seed(seed)
    if dtype == "fp8":
        a = torch.randn(m, k, device=dev, generator=gen).to(torch.float8_e4m3fn)
        bt = torch.randn(n, k, device=dev, generator=gen).to(torch.float8_e4m3fn).t()  # column-major (k, n)
        scale_a = torch.tensor(1.0, device=dev)
        scale_b = torch.tensor(1.0, device=dev)

        def one():
            out = torch._scaled_mm(a, bt, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16,
                                   use_fast_accum=fast_accum)
            return out[0] if isinstance(out, tuple) else out  # torch < 2.4 returned (out, amax)

        return one
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32,
                   "fp32": torch.float32, "fp64": torch.float64}[dtype]
    a = torch.randn(m, k, device=dev, dtype=torch_dtype, generator=gen)
    bt = torch.randn(n, k, device=dev, dtype=torch_dtype, generator=gen).t()
    c = torch.empty(m, n, device=dev, dtype=torch_dtype)
    return lambda: torch.mm(a, bt, out=c)


def time_batch(fn, batch: int, clock: Clock) -> float:
    """Seconds for ``batch`` back-to-back calls, event-timed, synchronised."""
    start = clock.mark()
    for _ in range(batch):
        fn()
    end = clock.mark()
    clock.sync()
    return clock.seconds(start, end)


def bench_dtype(index: int, barrier: threading.Barrier, cfg: dict, dtype: str) -> dict:
    """One dtype on one GPU: warm up, then a sustained window of event-timed batches."""
    dev = torch.device(cfg["device"], index) if cfg["device"] == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(index)
    m, n, k = cfg["shape"][dtype]
    clock = Clock(dev)
    one = make_matmul(dtype, m, n, k, dev, cfg["fp8_fast_accum"], seed=7 + index)
    one()  # library handles, heuristics, workspace
    clock.sync()
    barrier.wait()

    # warm-up: batches sized to ~BATCH_SECONDS until two successive per-call times agree within 1%
    batch, prev, warm_batches = MIN_BATCH, None, 0
    min_warm = min(cfg["warmup_seconds"], 0.5 if cfg["first"] else 0.2)
    t_start = time.perf_counter()
    while True:
        per_call = time_batch(one, batch, clock) / batch
        warm_batches += 1
        elapsed = time.perf_counter() - t_start
        settled = prev is not None and abs(per_call - prev) <= 0.01 * prev and elapsed >= min_warm
        if settled or elapsed >= cfg["warmup_seconds"]:
            break
        prev = per_call
        batch = max(MIN_BATCH, math.ceil(BATCH_SECONDS / per_call))
    batch = max(MIN_BATCH, math.ceil(BATCH_SECONDS / per_call))

    barrier.wait()  # every GPU's timed window starts together
    n_batches = max(3, math.ceil(cfg["seconds"] / (per_call * batch)))
    t0 = time.perf_counter()
    marks = [clock.mark()]
    for _ in range(n_batches):  # enqueue the whole window; the host blocks only when the queue is full
        for _ in range(batch):
            one()
        marks.append(clock.mark())
    clock.sync()
    t1 = time.perf_counter()
    times = [clock.seconds(a, b) for a, b in zip(marks, marks[1:])]
    med = statistics.median(times)
    res = {"tflops": sig(tflops(m, n, k, batch, med)),
           "tflops_max": sig(tflops(m, n, k, batch, min(times))),
           "iters": batch * n_batches, "batch": batch, "seconds": sig(sum(times)),
           "warmup_seconds": round(elapsed, 3), "warmup_batches": warm_batches, "m": m, "n": n, "k": k}
    sampler = cfg["sampler"]
    res.update(sampler.window(index, t0, t1) if sampler else summarize_samples([]))
    return res


def main(args: dict) -> dict:
    device = probe_device(args, ARG_KEYS)
    dtypes = args.get("dtypes")
    if dtypes is not None:
        if not isinstance(dtypes, list) or not dtypes:
            raise ProbeFailed(f"dtypes must be a non-empty list, got {dtypes!r}")
        for d in dtypes:
            if d not in KNOWN_DTYPES:
                raise ProbeFailed(f"unknown dtype {d!r} (known: {', '.join(KNOWN_DTYPES)})")
    indices = gpu_indices(device, args.get("gpus"))
    first_dev = torch.device("cuda", indices[0]) if device == "cuda" else torch.device("cpu")
    supported = supported_dtypes(first_dev)
    if dtypes is None:
        dtypes = supported
    for d in dtypes:
        if d not in supported and d != "fp32":
            raise ProbeFailed(f"dtype {d!r} is not supported on this device (supported: {', '.join(supported)})")

    base = 8192 if device == "cuda" else 64
    shape = {}
    for d in dtypes:
        default = base // 2 if d == "fp64" else base
        shape[d] = tuple(int(args.get(x, default)) for x in ("m", "n", "k"))
        if min(shape[d]) < 1:
            raise ProbeFailed(f"m, n, k must be >= 1, got {shape[d]}")
    seconds = float(args.get("seconds_per_dtype", 2.0 if device == "cuda" else 0.1))
    warmup = float(args.get("warmup_seconds", 1.0 if device == "cuda" else 0.05))
    sampler, nvml_state = start_sampler(device, indices)
    log(f"matmul_tflops: {len(indices)} device(s), dtypes {dtypes}, {seconds} s each, nvml {nvml_state}")

    per_gpu = {i: {} for i in indices}
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    watch = Watch(bus_ids(device, indices)).start()
    try:
        for pos, d in enumerate(dtypes):
            torch.backends.cuda.matmul.allow_tf32 = d == "tf32"  # process-wide: one dtype at a time
            cfg = {"device": device, "shape": shape, "seconds": seconds, "warmup_seconds": warmup,
                   "fp8_fast_accum": bool(args.get("fp8_fast_accum", False)), "first": pos == 0,
                   "sampler": sampler}
            for i, res in zip(indices, on_gpus(lambda i, b: bench_dtype(i, b, cfg, d), indices)):
                per_gpu[i][d] = res
            log(f"  {d}: " + ", ".join(f"GPU {i} {per_gpu[i][d]['tflops']} TFLOP/s" for i in indices))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
        watch.stop()
        if sampler:
            sampler.stop()

    gpus = []
    for i in indices:
        gpus.append({**describe_gpu(device, i), "dtypes": per_gpu[i]})
    return {"device": device, "nvml": nvml_state, "fp8_fast_accum": bool(args.get("fp8_fast_accum", False)),
            "gpus": gpus, "conditions": watch.result()}


if __name__ == "__main__":
    run(main)
