"""Sustained dense matmul TFLOP/s per dtype on every GPU at once, with clocks/power/temperature beside.

Args (JSON object, every key optional)::

    {"device": "cuda" | "cpu",            # cpu: the same code path, tiny sizes, for CI
     "dtypes": ["bf16", "fp16", "tf32", "fp8", "fp64"],   # default: those the device supports
     "m": 8192, "n": 8192, "k": 8192,      # default 8192 (fp64: 4096; cpu: 64); given: that shape only
     "search": true,                       # false: the default candidate only (see Candidates)
     "min_seconds": 1.0, "max_seconds": 4.0,   # stop rule per dtype (cpu: 0.04, 0.3), see _steady.py
     "tolerance_pct": 0.5,                 # stable: a window's median within this of the previous window's
     "window_seconds": 0.25,               # one stop-rule window (>= 3 batches; cpu: 0.02)
     "seconds_per_dtype": 2.0,             # older form: min_seconds = max_seconds = this
     "warmup_seconds": 1.0,                # warm-up cap per dtype (see below)
     "fp8_fast_accum": false,              # torch._scaled_mm(use_fast_accum=...) for every fp8 candidate
     "gpus": [0, 1] | "all"}

Output::

    {"device", "nvml": "ok" | "unavailable: ...", "fp8_fast_accum", "search",
     "unsupported": {dtype: {"why", "torch": bool}},   # asked for, not run here (unsupported_why); the rest measured
     "steady": {"min_seconds", "max_seconds", "tolerance_pct", "window_seconds"},
     "gpus": [{"index", "name", "pci_bus_id",
     "dtypes": {"bf16": {"tflops", "tflops_max", "iters", "batch", "seconds", "m", "n", "k",
                         "measured_s", "windows", "stop": "stable" | "settled" | "ceiling", "window_tflops",
                         "layout", "path", "use_fast_accum" (fp8), "chosen_because",
                         "candidates": [{"m", "n", "k", "layout", "path", "trial_tflops" | None (median of its rounds),
                                         "trial_rounds_tflops" | None, "error"?}],
                         "sm_clock_mhz_min", "sm_clock_mhz_median", "power_w_max", "temp_c_max",
                         "clocks_event_reasons", "power_limit_w_min", "nvml_samples"}, ...}}]}

FLOP count: a (m x k) @ (k x n) product is m*n*k fused multiply-adds = 2*m*n*k FLOP (the convention of
cuBLAS's and NVIDIA's datasheet peak figures). TFLOP/s = 2*m*n*k / (median per-call seconds) / 1e12 over every
timed batch of every window. Operands: torch.randn (random data draws realistic power). fp8 is e4m3
(torch.float8_e4m3fn) with per-tensor fp32 scales; tf32 is fp32 inputs with
torch.backends.cuda.matmul.allow_tf32 = True, set for that dtype only and restored after.

Candidates (:func:`candidate_set`), per dtype, the first the default (the one measured without a search:
``search`` false, the quick profile): shape m x n x k, and on cuda its "wave-fit" variant (:func:`wave_fit_m`:
8448 x 8192 x 8192 on a 132-SM H100/H200, whose 128 x 256 tiles fill whole waves), for fp8 also its "deep-K"
variant (8448 x 8192 x 32768); layout "A@B^T" (B stored (n, k): both operands K-major, what nn.Linear and
torch._scaled_mm use) and, for bf16/fp16/tf32, "A@B" (B stored (k, n)); for fp8 the paths "scaled_mm/fp8-out"
(e4m3 output into a preallocated C: mamf-finder's call) and "scaled_mm/bf16-out". fp8's default on cuda is the
deep-K e4m3-out product, the fastest measured on H100 and H200 (figures in :func:`candidate_set`), bf16's the
wave-fit shape (the trials' choice there), the other dtypes' m x n x k, K-major (mamf-finder: stas00/ml-engineering
compute/accelerator/benchmarks/mamf-finder.py). Each candidate gets a short trial after the warm-up: TRIAL_ROUNDS
batches of ~25 ms (MIN_BATCH calls at least), in rounds that alternate forward and backward over the
candidates (:func:`trial_order`), its median; one choice is made for all GPUs from the sum of their trial
figures, and the default stays unless another is more than SWITCH_MARGIN (0.5 %) faster in sum and faster in
every round on every GPU (:func:`pick`). Every
candidate is a dense product of the same operand dtype counted 2*m*n*k, so the SKU limits (floors under the
datasheet's dense peaks) mean the same whichever is measured; the document names the shape, layout and path
measured, every candidate's trial figure, and why. fp8 ``use_fast_accum`` is NOT a candidate: it skips the
periodic promotion of the fp8 accumulation to fp32 (different numerics); mamf-finder and the thresholds'
measurements use false; ``fp8_fast_accum: true`` sets it for every fp8 candidate and the document says so.

Timing: per dtype, all GPUs start together (threads + barrier; torch releases the GIL in each op).
Warm-up (:func:`warm_up`) runs event-timed batches on the default until two successive batches agree within 1%
(after >= 0.2 s; the first dtype >= 0.5 s, as clocks ramp from idle) or ``warmup_seconds`` pass. Then the
trials, then windows of >= 3 batches of >= 20 back-to-back calls (about 50 ms each) timed with CUDA events
between batches, until the stop rule of _steady.py says the figure is stable (two successive window medians
within ``tolerance_pct``, at least ``min_seconds`` measured) or ``max_seconds`` pass; all GPUs stop together.

Telemetry (when pynvml imports and initialises): a background thread samples every GPU at 10 Hz: SM
clock (MHz), power (W, nvmlDeviceGetPowerUsage: on recent drivers a ~1 s average), GPU temperature (C),
the clocks event (throttle) reasons bitmask and the enforced power limit (W, nvmlDeviceGetEnforcedPowerLimit;
its lowest value in the window is ``power_limit_w_min``); each dtype keeps the samples inside its timed windows.
"""
from __future__ import annotations

import math
import statistics
import threading
import time

import torch

from _conditions import Watch
from _gpu import Clock, bus_ids, describe_gpu, gpu_indices, on_gpus, pair_with_nvml, probe_device, sig
from _probe import ProbeFailed, log, run
from _steady import STEADY_KEYS, Joint, describe, fields, run_windows, steady_args

ARG_KEYS = {"device", "dtypes", "m", "n", "k", "seconds_per_dtype", "warmup_seconds", "fp8_fast_accum", "gpus", "attempt",
            "search", "window_seconds"} | STEADY_KEYS
KNOWN_DTYPES = ("bf16", "fp16", "tf32", "fp8", "fp64", "fp32")
DEFAULT_ORDER = ("bf16", "fp16", "tf32", "fp8", "fp64")
MIN_BATCH = 20
BATCH_SECONDS = 0.05  # one timed batch on cuda, s (cpu: 0.005)
WINDOW_BATCHES = 3  # batches per stop-rule window, at least (window_seconds: 0.25 s on cuda)
TRIAL_BATCH_FRACTION = 0.5  # a trial batch: half a timed batch (~25 ms on cuda, >= MIN_BATCH calls)
TRIAL_ROUNDS = 4  # trial rounds: one batch of every candidate per round, the order reversed every other round
#: the fp8 "deep-K" candidate's K, in multiples of the asked K (see candidate_set)
DEEP_K = 4
SWITCH_MARGIN = 0.005  # another candidate replaces the default only when > 0.5 % faster in the trials
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
    """(Sampler or None, state string). NVML handles are matched to the torch devices by PCI bus id (the one rule,
    _gpu.pair_with_nvml; a torch build without PCI ids in its device properties: by the device's UUID)."""
    if device != "cuda":
        return None, "unavailable: not used on cpu"
    try:
        import pynvml as nvml

        nvml.nvmlInit()
    except Exception as e:  # noqa: BLE001
        return None, f"unavailable: {type(e).__name__}: {e}".splitlines()[0]
    handles = {}
    try:
        pairing, _ = pair_with_nvml(nvml)
    except Exception as e:  # noqa: BLE001 - nvmlDeviceGetCount refused: no telemetry, the matmuls still run
        return None, f"unavailable: {type(e).__name__}: {e}".splitlines()[0]
    for i in indices:
        if i in pairing.nvml_of:
            try:
                handles[i] = nvml.nvmlDeviceGetHandleByIndex(pairing.nvml_of[i])
            except Exception:  # noqa: BLE001 - this GPU unsampled, said below
                pass
    if not handles:
        return None, "unavailable: no NVML handle matched the torch devices"
    sampler = Sampler(nvml, handles)
    sampler.start()
    missing = [i for i in indices if i not in handles]
    return sampler, "ok" if not missing else f"ok except GPU(s) {missing}"


# ---------------------------------------------------------------- matmul

def torch_has_fp8() -> bool:
    """Whether this torch has fp8 matmuls (torch._scaled_mm and torch.float8_e4m3fn, since torch 2.1)."""
    return hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")


def supported_dtypes(device: torch.device) -> list[str]:
    """Dtypes of DEFAULT_ORDER this device runs: fp8 needs compute capability >= 8.9 and
    torch._scaled_mm; fp64 is left to GPUs with fp64 tensor cores (8.0, 9.0, 10.0)."""
    has_fp8 = torch_has_fp8()
    if device.type == "cpu":
        return [d for d in DEFAULT_ORDER if d != "fp8" or has_fp8]
    cc = torch.cuda.get_device_capability(device)
    out = ["bf16", "fp16", "tf32"] if cc >= (8, 0) else ["fp16"]
    if has_fp8 and cc >= (8, 9):
        out.append("fp8")
    if cc in ((8, 0), (9, 0), (10, 0)):
        out.append("fp64")
    return out


def unsupported_why(dtype: str, device: torch.device) -> dict:
    """Why ``dtype`` is not in :func:`supported_dtypes` for ``device``: ``{"why": text, "torch": bool}``, ``torch``
    True when the device could run it and this torch cannot (fp8 without torch._scaled_mm / float8_e4m3fn: a torch
    older than 2.1), the node's software; False when the device itself cannot (compute capability)."""
    has_fp8 = torch_has_fp8()
    cc = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    if dtype == "fp8" and not has_fp8 and (cc is None or cc >= (8, 9)):
        return {"why": f"torch {torch.__version__} has no torch._scaled_mm/float8_e4m3fn (fp8 matmuls need "
                       f"torch >= 2.1)", "torch": True}
    return {"why": f"compute capability {cc[0]}.{cc[1]} does not run {dtype} on tensor cores" if cc else
            f"{dtype} not run on this device", "torch": False}


def wave_fit_m(m: int, n: int, sm_count: int) -> int | None:
    """The M nearest ``m`` (within -6 %..+6.25 %, a multiple of 128) whose 128 x 256 output tiles over an
    (M x n) product fill whole waves of ``sm_count`` SMs: (M/128) * ceil(n/256) a multiple of sm_count; None when
    there is none in that range or ``m`` fills whole waves already. 128 x 256 (and 256 x 128) are the CTA tiles of cuBLAS's
    Hopper bf16/fp8 GEMM kernels (the kernel names cuBLAS reports, e.g. ``sm90_xmma_gemm_..._128x256``);
    8192 x 8192 on 132 SMs (H100/H200 SXM) is 2048 tiles = 15.5 waves, 8448 x 8192 is 2112 = 16 whole waves."""
    if m < 128 or n < 256 or sm_count < 1:
        return None
    tiles_n = -(-n // 256)
    if m % 128 == 0 and (m // 128 * tiles_n) % sm_count == 0:
        return None  # whole waves already
    lo, hi, centre = -(-int(m * 0.94) // 128), int(m * 1.0625) // 128, m / 128
    fits = [t for t in range(lo, hi + 1) if (t * tiles_n) % sm_count == 0 and t * 128 != m]
    return min(fits, key=lambda t: (abs(t - centre), t)) * 128 if fits else None


def candidate_shapes(dtype: str, shape: tuple, sm_count: int | None) -> list[tuple]:
    """The shapes tried for ``dtype`` (pure; see :func:`candidate_set`): ``shape`` first; with ``sm_count`` (a
    searched cuda run) and not fp64, its :func:`wave_fit_m` variant, and for fp8 the deep-K variant (that M,
    or m where no wave fits, by n by K x :data:`DEEP_K`)."""
    m, n, k = shape
    shapes = [tuple(shape)]
    if sm_count and dtype != "fp64":
        fit = wave_fit_m(m, n, sm_count)
        if fit:
            shapes.append((fit, n, k))
        if dtype == "fp8":
            shapes.append((fit or m, n, DEEP_K * k))
    return shapes


def candidate_set(dtype: str, shape: tuple, dev: torch.device, searched: bool, fast_accum: bool) -> list[dict]:
    """The candidates tried for ``dtype`` (the first is the default, the figure measured without a search): dicts
    of ``m, n, k`` and ``layout`` ("A@B^T": B stored (n, k), both operands K-major; "A@B": B stored (k, n)
    row-major) and ``path`` ("mm": torch.mm into a preallocated output; "scaled_mm/bf16-out" and
    "scaled_mm/fp8-out": torch._scaled_mm with per-tensor fp32 scales writing bf16 or e4m3, the latter
    mamf-finder's call) and, for fp8, ``use_fast_accum``. ``searched`` False: the default alone. Shapes:
    ``shape``, plus on cuda its :func:`wave_fit_m` variant (not for fp64, whose 4096^3 is judged as is), and for
    fp8 its deep-K variant (that M, K x :data:`DEEP_K`: an fp8 tile's MMA runs at twice bf16's rate, so its fixed
    cost per tile, the prologue and the epilogue, weighs twice as much, and a longer K spreads it).

    fp8's default on cuda is the deep-K variant through "scaled_mm/fp8-out", the fastest of the set on both
    Hopper SKUs measured. Sustained e4m3-out products at the 700 W limit, 2026-12-05, median of 3 rounds of
    3 s: an H100 SXM 8192^3 1253 TFLOP/s, 8448 x 8192 x 8192 1275, x 16384 1298, x 32768 1308; an H200 8192^3
    1217, 8448 x 8192 x 16384 1252, x 32768 1262 (16896 x 16384 x 16384 1254: a longer K helps, larger M and N
    do not). An H100 SXM, 2026-12-06, median of 2 rounds of 2 s: 8448 x 8192 x 32768 e4m3-out 1309.5,
    bf16-out 1273.5; 8192^3 e4m3-out 1255.1, bf16-out 1245.2. Elsewhere (no SM count: cpu) the default is
    ``shape`` through "scaled_mm/bf16-out". bf16's default on cuda is the :func:`wave_fit_m` shape (8448 x 8192 x
    8192 on 132 SMs), which the standard profile's trials choose over 8192^3 on the H100s and H200s measured: an
    H200, 2026-12-06, 692.5 and 693.6 TFLOP/s against 681.1 and 686.0 at 8192^3 (quick, no trials); an H200,
    2026-12-05, 693 chosen over 8192^3. The set never changes the FLOP convention (2*m*n*k), the operands'
    dtype or the dense kernels the datasheet peaks count, so every candidate is judged against the same
    limit."""
    sms = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" and (
        searched or dtype in ("fp8", "bf16")) else None
    return candidates(dtype, shape, sms, searched, fast_accum)


def candidates(dtype: str, shape: tuple, sms: int | None, searched: bool, fast_accum: bool) -> list[dict]:
    """:func:`candidate_set` for a device of ``sms`` SMs (None: no SM count, cpu), pure."""
    shapes = candidate_shapes(dtype, shape, sms)
    if dtype == "fp8":
        paths = [("A@B^T", "scaled_mm/bf16-out"), ("A@B^T", "scaled_mm/fp8-out")]
        if sms:  # the deep-K e4m3-out product first: the fastest measured (see above)
            shapes, paths = shapes[-1:] + shapes[:-1], paths[::-1]
    else:
        paths = [("A@B^T", "mm")] + ([("A@B", "mm")] if dtype != "fp64" else [])
        if dtype == "bf16" and len(shapes) > 1:  # the wave-fit shape first: the one the trials choose (see above)
            shapes = [shapes[1], shapes[0]] + shapes[2:]
    out = []
    for mm_, nn_, kk_ in shapes:
        for layout, path in paths:
            c = {"m": mm_, "n": nn_, "k": kk_, "layout": layout, "path": path}
            if dtype == "fp8":
                c["use_fast_accum"] = fast_accum
            out.append(c)
    return out if searched else out[:1]


def make_matmul(dtype: str, cand: dict, dev: torch.device, seed: int):
    """A zero-argument function doing one product of ``dtype`` as candidate ``cand`` says (see
    :func:`candidate_set`): C = A @ B^T (B stored (n, k)) or C = A @ B (B stored (k, n)), into a preallocated C.
    fp8: e4m3 operands, per-tensor fp32 scales of 1.0, A row-major and B column-major (what torch._scaled_mm
    requires), C bf16 or e4m3."""
    m, n, k = cand["m"], cand["n"], cand["k"]
    gen = torch.Generator(device=dev).manual_seed(seed)
    if dtype == "fp8":
        a = torch.randn(m, k, device=dev, generator=gen).to(torch.float8_e4m3fn)
        bt = torch.randn(n, k, device=dev, generator=gen).to(torch.float8_e4m3fn).t()  # column-major (k, n)
        scale_a = torch.tensor(1.0, device=dev)
        scale_b = torch.tensor(1.0, device=dev)
        out_dtype = torch.float8_e4m3fn if cand["path"].endswith("fp8-out") else torch.bfloat16
        c = torch.empty(m, n, device=dev, dtype=out_dtype) if out_dtype != torch.bfloat16 else None
        fast = bool(cand.get("use_fast_accum"))

        if out_dtype == torch.bfloat16:  # the default: the call of the thresholds' measurements, unchanged
            def one():
                out = torch._scaled_mm(a, bt, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype,
                                       use_fast_accum=fast)
                return out[0] if isinstance(out, tuple) else out  # torch < 2.4 returned (out, amax)
            return one

        def one():  # mamf-finder's call: into a preallocated e4m3 C
            return torch._scaled_mm(a, bt, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype,
                                    use_fast_accum=fast, out=c)

        return one
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32,
                   "fp32": torch.float32, "fp64": torch.float64}[dtype]
    a = torch.randn(m, k, device=dev, dtype=torch_dtype, generator=gen)
    if cand["layout"] == "A@B":
        b = torch.randn(k, n, device=dev, dtype=torch_dtype, generator=gen)
    else:
        b = torch.randn(n, k, device=dev, dtype=torch_dtype, generator=gen).t()
    c = torch.empty(m, n, device=dev, dtype=torch_dtype)
    return lambda: torch.mm(a, b, out=c)


def time_batch(fn, batch: int, clock: Clock) -> float:
    """Seconds for ``batch`` back-to-back calls, event-timed, synchronised."""
    start = clock.mark()
    for _ in range(batch):
        fn()
    end = clock.mark()
    clock.sync()
    return clock.seconds(start, end)


def batch_for(per_call: float, cfg: dict, fraction: float = 1.0) -> int:
    """Calls per timed batch: enough for ``fraction`` of ``cfg["batch_seconds"]`` (0.05 s on cuda), at least
    MIN_BATCH."""
    return max(MIN_BATCH, math.ceil(fraction * cfg["batch_seconds"] / max(per_call, 1e-9)))


def trial_order(n_cands: int, rounds: int) -> list[int]:
    """The candidates' trial batches in the order they run (pure): ``rounds`` rounds of one batch each, forward
    then backward (0 1 2, 2 1 0, 0 1 2, ...). The clock falls for a second or more after the warm-up as the
    power limiter catches up (an H100 SXM at 700 W, 2026-12-05, one pass in order: 8192^3 fp8 tried first at
    1307-1321 TFLOP/s, 8448 x 8192 x 8192 after it at 1114-1169, though 1253 and 1275 sustained): candidates
    tried one after another are judged on that slope, the first favoured. Mirrored rounds give every candidate
    batches early and late alike."""
    fwd = list(range(n_cands))
    return [c for r in range(rounds) for c in (fwd if r % 2 == 0 else fwd[::-1])]


def warm_up(one, clock: Clock, cfg: dict) -> tuple[float, float, int]:
    """Batches until two successive per-call times agree within 1 % (after 0.5 s for the first dtype, as clocks
    ramp from idle, else 0.2 s; both capped by ``warmup_seconds``) or ``warmup_seconds`` pass. Returns
    (per-call seconds of the last batch, seconds spent, batches)."""
    batch, prev, n = MIN_BATCH, None, 0
    min_warm = min(cfg["warmup_seconds"], 0.5 if cfg["first"] else 0.2)
    t_start = time.perf_counter()
    while True:
        per_call = time_batch(one, batch, clock) / batch
        n += 1
        elapsed = time.perf_counter() - t_start
        if (prev is not None and abs(per_call - prev) <= 0.01 * prev and elapsed >= min_warm) \
                or elapsed >= cfg["warmup_seconds"]:
            return per_call, elapsed, n
        prev, batch = per_call, batch_for(per_call, cfg)


def pick(trials: dict, n_cands: int) -> tuple[int, str]:
    """(candidate index, why) from every GPU's trials (``{gpu: [per-round TFLOP/s list, or None, per
    candidate]}``, round r of every candidate from the same :func:`trial_order` round; pure): the candidate with
    the highest sum over the GPUs of its median (one choice for the node, so the node-median rule compares like
    with like). The default (index 0) stays unless that candidate is more than SWITCH_MARGIN faster in sum AND
    faster than the default in every round on every GPU: a power-capped card's clock swings about its limit, so
    one 25 ms batch reads up to ~2 % off its neighbour (an H100 SXM, 2026-12-06: deep-K e4m3-out against bf16-out
    -2.6 %, -1.3 %, -0.2 %, +1.3 % in four standard runs' trials, the +1.3 % run measured 1262.5 TFLOP/s against
    1286-1291 for the e4m3-out runs); a figure keeps its shape and path from run to run unless another is
    clearly faster."""
    if n_cands == 1:
        return 0, "the only candidate (search off, or nothing else applies to this dtype and device)"
    ok = [c for c in range(n_cands) if all(t[c] for t in trials.values())]
    if not ok:
        raise ProbeFailed("no matmul candidate ran on every GPU")
    total = {c: sum(statistics.median(t[c]) for t in trials.values()) for c in ok}
    best = max(ok, key=lambda c: total[c])
    if 0 not in total:
        return best, "the fastest in the trials (the default failed)"
    if best == 0 or total[best] <= total[0] * (1 + SWITCH_MARGIN):
        return 0, f"the default: no candidate was more than {SWITCH_MARGIN:.1%} faster in its trial"
    rounds = [(b, d) for t in trials.values() for b, d in zip(t[best], t[0])]
    if not all(b > d for b, d in rounds):
        return 0, (f"the default: candidate {best} was {total[best] / total[0] - 1:.1%} faster in sum but not in "
                   f"every trial round ({sum(b > d for b, d in rounds)} of {len(rounds)}): within the trials' noise")
    return best, f"the fastest in the trials (faster than the default in each of its {len(rounds)} rounds)"


def bench_dtype(index: int, barrier: threading.Barrier, cfg: dict, dtype: str) -> dict:
    """One dtype on one GPU: build the candidates, warm up on the default, trial each candidate, pick one for
    all GPUs (:func:`pick`), then measure windows of event-timed batches until the figure is stable
    (_steady.run_windows; all GPUs stop together)."""
    dev = torch.device(cfg["device"], index) if cfg["device"] == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(index)
    clock = Clock(dev)
    cands = cfg["candidates"][dtype]
    fns: list = []
    for c in cands:
        try:
            fn = make_matmul(dtype, c, dev, seed=7 + index)
            fn()  # library handles, heuristics, workspace
            fns.append(fn)
        except Exception as e:  # noqa: BLE001 - a candidate torch does not offer here is left out, with why
            fns.append(None)
            c.setdefault("error", f"{type(e).__name__}: {e}".splitlines()[0][:200])
    if fns[0] is None:
        raise ProbeFailed(f"{dtype} matmul failed: {cands[0].get('error')}")
    clock.sync()
    barrier.wait()

    per_call, warm_s, warm_batches = warm_up(fns[0], clock, cfg)
    trial = [None] * len(cands)
    if len(cands) > 1:
        flop0 = matmul_flop(cands[0]["m"], cands[0]["n"], cands[0]["k"])
        sizes = [batch_for(per_call * matmul_flop(c["m"], c["n"], c["k"]) / flop0, cfg, TRIAL_BATCH_FRACTION)
                 for c in cands]
        got: list[list[float]] = [[] for _ in cands]
        for ci in trial_order(len(cands), TRIAL_ROUNDS):
            if fns[ci] is not None:
                got[ci].append(time_batch(fns[ci], sizes[ci], clock) / sizes[ci])
        for ci, c in enumerate(cands):
            if got[ci]:
                trial[ci] = [tflops(c["m"], c["n"], c["k"], 1, t) for t in got[ci]]
    chosen, why = pick(cfg["joint"].gather(barrier, index, trial), len(cands))
    one, cand = fns[chosen], cands[chosen]
    m, n, k = cand["m"], cand["n"], cand["k"]
    if chosen:
        per_call = time_batch(one, MIN_BATCH, clock) / MIN_BATCH
    batch = batch_for(per_call, cfg)
    n_batches = max(WINDOW_BATCHES, math.ceil(cfg["window_s"] / (per_call * batch)))

    def window():
        marks = [clock.mark()]
        for _ in range(n_batches):  # enqueue the whole window; the host blocks only when the queue is full
            for _ in range(batch):
                one()
            marks.append(clock.mark())
        clock.sync()
        times = [clock.seconds(a, b) for a, b in zip(marks, marks[1:])]
        return [t / batch for t in times], sum(times)

    barrier.wait()  # every GPU's timed windows start together
    t0 = time.perf_counter()
    st = cfg["steady"]
    got = run_windows(window, st["min_s"], st["max_s"], st["tolerance"],
                      agree=lambda done: cfg["joint"].agree(barrier, index, done))
    t1 = time.perf_counter()
    per = got["samples"]
    res = {"tflops": sig(tflops(m, n, k, 1, statistics.median(per))),
           "tflops_max": sig(tflops(m, n, k, 1, min(per))),
           "iters": batch * len(per), "batch": batch, "seconds": sig(got["measured_s"]),
           "warmup_seconds": round(warm_s, 3), "warmup_batches": warm_batches, "m": m, "n": n, "k": k,
           **fields(got), "window_tflops": [sig(tflops(m, n, k, 1, w)) for w in got["window_medians"]],
           "layout": cand["layout"], "path": cand["path"], "chosen_because": why,
           "candidates": [{**{x: c[x] for x in c},
                           "trial_tflops": None if not t else sig(statistics.median(t)),
                           "trial_rounds_tflops": None if not t else [sig(x) for x in t]}
                          for c, t in zip(cands, trial)]}
    if dtype == "fp8":
        res["use_fast_accum"] = cand["use_fast_accum"]
    sampler = cfg["sampler"]
    res.update(sampler.window(index, t0, t1) if sampler else summarize_samples([]))
    return res


def matmul_config(args: dict, device: str, dtypes: list[str]) -> dict:
    """Shapes, candidates and the stop rule's settings from ``args`` (see the module docstring); ProbeFailed on
    a bad value."""
    base = 8192 if device == "cuda" else 64
    explicit = any(x in args for x in ("m", "n", "k"))
    search = args.get("search", True)
    if not isinstance(search, bool):
        raise ProbeFailed(f"search must be true or false, got {search!r}")
    fast_accum = args.get("fp8_fast_accum", False)
    if not isinstance(fast_accum, bool):
        raise ProbeFailed(f"fp8_fast_accum must be true or false, got {fast_accum!r}")
    dev = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
    cands = {}
    for d in dtypes:
        default = base // 2 if d == "fp64" else base
        shape = tuple(int(args.get(x, default)) for x in ("m", "n", "k"))
        if min(shape) < 1:
            raise ProbeFailed(f"m, n, k must be >= 1, got {shape}")
        cands[d] = candidate_set(d, shape, dev, search or explicit, fast_accum)
        if explicit:  # the shape asked for is the one measured; layouts and paths are still tried (search)
            cands[d] = [c for c in cands[d] if (c["m"], c["n"], c["k"]) == shape][:None if search else 1]
    if "seconds_per_dtype" in args:  # the older argument: a fixed window, floor = ceiling
        args = {**args, "min_seconds": args["seconds_per_dtype"], "max_seconds": args["seconds_per_dtype"]}
    cuda = device == "cuda"
    return {"candidates": cands, "fast_accum": fast_accum, "search": search,
            "steady": steady_args(args, 1.0 if cuda else 0.04, 4.0 if cuda else 0.3),
            "warmup_seconds": float(args.get("warmup_seconds", 1.0 if cuda else 0.05)),
            "window_s": float(args.get("window_seconds", 0.25 if cuda else 0.02)),
            "batch_seconds": BATCH_SECONDS if cuda else 0.005}


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
    unsupported = {d: unsupported_why(d, first_dev) for d in dtypes if d not in supported and d != "fp32"}
    dtypes = [d for d in dtypes if d not in unsupported]
    if not dtypes:
        raise ProbeFailed(f"dtype(s) {', '.join(unsupported)} not supported here: "
                          + "; ".join(f"{d}: {w['why']}" for d, w in unsupported.items()),
                          setup="torch_lacks_dtype" if any(w["torch"] for w in unsupported.values()) else None)
    conf = matmul_config(args, device, dtypes)
    sampler, nvml_state = start_sampler(device, indices)
    st = conf["steady"]
    log(f"matmul_tflops: {len(indices)} device(s), dtypes {dtypes}, {st['min_s']}..{st['max_s']} s each, "
        f"nvml {nvml_state}")

    per_gpu = {i: {} for i in indices}
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    watch = Watch(bus_ids(device, indices)).start()
    try:
        for pos, d in enumerate(dtypes):
            torch.backends.cuda.matmul.allow_tf32 = d == "tf32"  # process-wide: one dtype at a time
            cfg = {**conf, "device": device, "first": pos == 0, "sampler": sampler, "joint": Joint()}
            for i, res in zip(indices, on_gpus(lambda i, b: bench_dtype(i, b, cfg, d), indices)):
                per_gpu[i][d] = res
            log(f"  {d}: " + ", ".join(f"GPU {i} {per_gpu[i][d]['tflops']} TFLOP/s ({per_gpu[i][d]['m']}x"
                                       f"{per_gpu[i][d]['n']}x{per_gpu[i][d]['k']} {per_gpu[i][d]['layout']} "
                                       f"{per_gpu[i][d]['path']}, {per_gpu[i][d]['windows']} windows, "
                                       f"{per_gpu[i][d]['stop']})" for i in indices))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
        watch.stop()
        if sampler:
            sampler.stop()

    gpus = []
    for i in indices:
        gpus.append({**describe_gpu(device, i), "dtypes": per_gpu[i]})
    return {"device": device, "nvml": nvml_state, "fp8_fast_accum": conf["fast_accum"], "search": conf["search"],
            "steady": {**describe(st), "window_seconds": conf["window_s"]},
            "gpus": gpus, "conditions": watch.result(), "unsupported": unsupported}


if __name__ == "__main__":
    run(main)
