"""HBM bandwidth of every GPU at once: read, write, copy and triad kernels.

Args (JSON object, every key optional)::

    {"device": "cuda" | "cpu",   # cpu: the same code path on host memory, for CI
     "bytes": 4294967296,        # per buffer; default 4 GiB on cuda, 4 MiB on cpu (rounded down to 64 KiB)
     "iters": 10,                # timed reps per stop-rule window (after 3 warm-up reps per method; cpu: 3)
     "min_seconds": 0.05, "max_seconds": 0.5,   # stop rule per method (cpu: 0.002, 0.05), see _steady.py
     "tolerance_pct": 0.5,       # stable: a window's median within this of the previous window's
     "gpus": [0, 1] | "all",     # default all visible GPUs
     "read_methods": [...]}      # default all of READ_METHODS (+ Triton where importable)

Output::

    {"device", "bytes", "iters", "triton": version | "unavailable: ...",
     "steady": {"min_seconds", "max_seconds", "tolerance_pct"},
     "gpus": [{"index", "name", "pci_bus_id", "l2_bytes",
               "read_gbps", "read_gbps_max", "write_gbps", "write_gbps_max",
               "copy_gbps", "copy_gbps_max", "triad_gbps", "triad_gbps_max",
               "method": {"read": ..., "write": ..., "copy": ..., "triad": ...},
               "results": {"read:sum_fp32": {"median_gbps", "max_gbps", "bytes_per_rep",
                                             "measured_s", "windows", "stop": "stable" | "settled" | "ceiling"}, ...},
               "samples": {"read:sum_fp32": [GB/s per rep], ...},
               "errors": {"read:triton_tiles": "why it was left out"}}]}

``<kernel>_gbps`` is the best median over that kernel's methods; ``method`` names which one gave it;
``<kernel>_gbps_max`` is that method's fastest rep.

Byte counting follows BabelStream (UoB-HPC/BabelStream, src/main.cpp): a kernel moves every array it
reads or writes once per rep, so Copy (c = a) counts 2 arrays, Triad (a = b + s*c) 3, Dot 2; our
read (a reduction over one buffer) counts 1 and write (fill one buffer) counts 1. GB/s = 1e9 B/s.

GPUs run concurrently: one Python thread per GPU, a ``threading.Barrier`` before each kernel so their
timed reps overlap. Threads suffice: torch releases the GIL inside each op, and a rep is ~1 ms of GPU
time against ~10-30 us of host launch time, so even 8 threads keep every queue full (processes would
add a torch import and CUDA context per GPU, seconds, for no gain). Timing: CUDA events between
back-to-back reps (perf_counter on cpu), in windows of ``iters`` reps until two successive window medians
agree within ``tolerance_pct`` after ``min_seconds``, or ``max_seconds`` pass (_steady.py; all GPUs stop each
method together); the figure is the median over every timed rep, as before. Data is random (torch.rand), never zeros. Buffers default
to 4 GiB, far above the H200's 50 MB L2 (so no rep is served from cache); three buffers = 12 GiB.
"""
from __future__ import annotations

import os
import statistics
import threading

import torch

from _conditions import Watch
from _gpu import Clock, bus_ids, gpu_indices, on_gpus, pci_bus_id, probe_device, sig
from _probe import ProbeFailed, log, run
from _steady import STEADY_KEYS, Joint, describe, fields, run_windows, steady_args

GIB = 1 << 30
ALIGN = 64 << 10  # buffers are whole multiples of 64 KiB: every Triton tile is full, no masks
WARMUP_REPS = 3
READ_METHODS = ("sum_fp32", "sum_bf16", "amax_fp32", "norm_fp32", "dot_fp32")
# Triton read kernels: name -> (kernel kind, BLOCK fp32 elements per tile, num_warps, programs per SM)
TRITON_CONFIGS = {
    "triton_tiles": ("tiles", 8192, 8, 0),
    "triton_persistent": ("persistent", 4096, 4, 8),
}
ARG_KEYS = {"device", "bytes", "iters", "gpus", "read_methods", "attempt"} | STEADY_KEYS  # attempt: 2 for a confirmation


def gbps(nbytes: float, seconds: float) -> float:
    """Bandwidth in GB/s (1e9 bytes per second)."""
    return nbytes / seconds / 1e9


def bytes_per_rep(kind: str, buffer_bytes: int) -> int:
    """Bytes one rep moves, BabelStream style: each array read or written counts once."""
    arrays = {"read": 1, "dot": 2, "write": 1, "copy": 2, "triad": 3}[kind]
    return arrays * buffer_bytes


# ---------------------------------------------------------------- Triton read kernels (optional)

_TRITON_LOCK = threading.Lock()  # first call compiles; compile one at a time, then others hit the cache


def load_triton(device: str):
    """(triton module, kernels) or (None, reason). On cpu only under TRITON_INTERPRET=1 (tests)."""
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        return None, "unavailable: not used on cpu"
    try:
        import triton
        import triton.language as tl
    except Exception as e:  # noqa: BLE001 - any import failure means: fall back to torch
        return None, f"unavailable: {type(e).__name__}: {e}".splitlines()[0]

    @triton.jit
    def sum_tiles(x_ptr, out_ptr, BLOCK: tl.constexpr):
        # one full tile per program; partial sums land in out[pid]
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)  # int32: triton_reader keeps n < 2**31
        x = tl.load(x_ptr + offs, eviction_policy="evict_first")
        tl.store(out_ptr + pid, tl.sum(x.to(tl.float32), axis=0))

    @triton.jit
    def sum_persistent(x_ptr, out_ptr, n_tiles, BLOCK: tl.constexpr):
        # a fixed grid strides over all tiles, accumulating in registers
        pid = tl.program_id(0)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for t in range(pid, n_tiles, tl.num_programs(0)):
            offs = t * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs, eviction_policy="evict_first").to(tl.float32)
        tl.store(out_ptr + pid, tl.sum(acc, axis=0))

    return triton, {"tiles": sum_tiles, "persistent": sum_persistent}


def triton_reader(kernels: dict, config: tuple, x: torch.Tensor, sm_count: int):
    """A zero-argument read rep for one Triton config; it returns the per-program partial sums."""
    kind, block, warps, per_sm = config
    n = x.numel()
    if n >= 2**31:  # the kernels index with int32
        raise ProbeFailed(f"buffer of {n} elements is too large for the int32-indexed Triton kernels")
    if n % block:
        raise ProbeFailed(f"buffer of {n} elements is not a multiple of the Triton tile {block}")
    n_tiles = n // block
    grid = n_tiles if kind == "tiles" else min(n_tiles, per_sm * sm_count)
    partial = torch.empty(grid, dtype=torch.float32, device=x.device)
    if kind == "tiles":
        launch = lambda: kernels["tiles"][(grid,)](x, partial, BLOCK=block, num_warps=warps)  # noqa: E731
    else:
        launch = lambda: kernels["persistent"][(grid,)](x, partial, n_tiles, BLOCK=block, num_warps=warps)  # noqa: E731

    def rep():
        launch()
        return partial  # summed only when validating, so a rep is the one kernel

    return rep


# ---------------------------------------------------------------- measurement

def time_reps(fn, reps: int, clock: Clock, warmup: int = WARMUP_REPS) -> list[float]:
    """Seconds of each of ``reps`` back-to-back calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    clock.sync()
    marks = [clock.mark()]
    for _ in range(reps):
        fn()
        marks.append(clock.mark())
    clock.sync()
    return [clock.seconds(a, b) for a, b in zip(marks, marks[1:])]


def measure_gpu(index: int, barrier: threading.Barrier, cfg: dict) -> dict:
    """All kernels and methods on one GPU (or the cpu); returns its per-GPU result.

    ``index``: torch's CUDA index (ignored on cpu). ``barrier``: shared by the GPUs measured together, passed
    before each method so every GPU loads its HBM at the same time. ``cfg``: ``device`` ("cuda"|"cpu"), ``bytes``
    (one buffer, a multiple of ALIGN; 4 GiB default on cuda, far above the 50 MiB L2 of an H100/H200),
    ``iters`` (timed reps per stop-rule window), ``steady`` and ``joint`` (the stop rule, _steady.py),
    ``read_methods``, ``triton_kernels`` (from :func:`load_triton`).
    Buffers: ``bytes``/4 fp32 elements each (src, dst, out; src also read as bf16).

    Returns ``{"index", "name", "pci_bus_id", "l2_bytes", "read_gbps", "write_gbps", "copy_gbps",
    "triad_gbps", "<kernel>_gbps_max", "method": {kernel: method}, "results": {"kernel:method":
    {"median_gbps", "max_gbps", "bytes_per_rep"}}, "samples": {"kernel:method": [GB/s per rep]}, "errors":
    {"kernel:method": reason}}``. GB/s = 1e9 bytes/s, bytes counted as BabelStream does (:func:`bytes_per_rep`:
    each array read or written once per rep), time from CUDA events around each rep (:class:`_gpu.Clock`).
    A Triton reader whose sum differs from torch's (it skipped data) is dropped with its reason in ``errors``.
    """
    device, nbytes, iters = cfg["device"], cfg["bytes"], cfg["iters"]
    if device == "cuda":
        torch.cuda.set_device(index)
        dev = torch.device("cuda", index)
        props = torch.cuda.get_device_properties(index)
        info = {"index": index, "name": props.name, "pci_bus_id": pci_bus_id(props),
                "l2_bytes": getattr(props, "L2_cache_size", None)}
        sm_count = props.multi_processor_count
    else:
        dev = torch.device("cpu")
        info = {"index": 0, "name": "cpu", "pci_bus_id": None, "l2_bytes": None}
        sm_count = os.cpu_count() or 1
    clock = Clock(dev)
    gen = torch.Generator(device=dev).manual_seed(1234 + index)
    n32 = nbytes // 4
    # Random bf16 pairs in [0, 1): read as fp32 each element is finite too (high half = a value in [0,1)).
    src16 = torch.rand(2 * n32, dtype=torch.bfloat16, device=dev, generator=gen)
    src32 = src16.view(torch.float32)
    dst32 = torch.rand(n32, dtype=torch.float32, device=dev, generator=gen)
    out32 = torch.empty(n32, dtype=torch.float32, device=dev)

    methods: dict[str, tuple[str, object]] = {}  # "kernel:method" -> (byte kind, fn)
    torch_read = {
        "sum_fp32": ("read", lambda: torch.sum(src32)),
        "sum_bf16": ("read", lambda: torch.sum(src16, dtype=torch.float32)),
        "amax_fp32": ("read", lambda: torch.amax(src32)),
        "norm_fp32": ("read", lambda: torch.linalg.vector_norm(src32)),
        "dot_fp32": ("dot", lambda: torch.dot(src32, dst32)),
    }
    for name in cfg["read_methods"]:
        if name in torch_read:
            methods[f"read:{name}"] = torch_read[name]
    errors: dict[str, str] = {}
    if cfg["triton_kernels"]:
        reference = torch.sum(src32, dtype=torch.float64).item()
        for name, tconf in TRITON_CONFIGS.items():
            if name not in cfg["read_methods"]:
                continue
            key = f"read:{name}"
            try:
                rep = triton_reader(cfg["triton_kernels"], tconf, src32, sm_count)
                with _TRITON_LOCK:  # compile (or load from the on-disk cache) one GPU at a time
                    got = rep().sum(dtype=torch.float64).item()
                # a kernel that skipped data would report inflated bandwidth: check it read every byte
                if abs(got - reference) > 1e-4 * abs(reference):
                    raise ProbeFailed(f"sum {got} differs from torch's {reference}")
                methods[key] = ("read", rep)
            except Exception as e:  # noqa: BLE001 - a Triton problem only drops that method
                errors[key] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    methods["write:fill"] = ("write", lambda: out32.fill_(0.5))
    methods["write:zero"] = ("write", lambda: out32.zero_())
    methods["copy:copy_"] = ("copy", lambda: out32.copy_(src32))
    methods["copy:mul_out"] = ("copy", lambda: torch.mul(src32, 1.0, out=out32))
    methods["triad:add_out"] = ("triad", lambda: torch.add(dst32, src32, alpha=0.4, out=out32))  # a = b + s*c

    results, samples = {}, {}
    st, joint = cfg["steady"], cfg["joint"]
    for key, (kind, fn) in methods.items():
        barrier.wait()  # every GPU starts this method together
        moved = bytes_per_rep(kind, nbytes)
        for _ in range(WARMUP_REPS):
            fn()
        clock.sync()

        def window():
            times = time_reps(fn, iters, clock, warmup=0)
            return [gbps(moved, t) for t in times], sum(times)

        got = run_windows(window, st["min_s"], st["max_s"], st["tolerance"],
                          agree=lambda done: joint.agree(barrier, index, done))
        rates = got["samples"]
        results[key] = {"median_gbps": sig(statistics.median(rates)), "max_gbps": sig(max(rates)),
                        "bytes_per_rep": moved, **fields(got)}
        samples[key] = [sig(r, 4) for r in rates]

    info.update(summarize(results))
    info.update(results=results, samples=samples, errors=errors)
    return info


def summarize(results: dict) -> dict:
    """Per kernel: the best median over its methods, that method's max, and which method it was."""
    out: dict = {"method": {}}
    for kernel in ("read", "write", "copy", "triad"):
        mine = {k.split(":", 1)[1]: v for k, v in results.items() if k.split(":", 1)[0] == kernel}
        if not mine:
            out[f"{kernel}_gbps"] = out[f"{kernel}_gbps_max"] = out["method"][kernel] = None
            continue
        best = max(mine, key=lambda m: mine[m]["median_gbps"])
        out[f"{kernel}_gbps"] = mine[best]["median_gbps"]
        out[f"{kernel}_gbps_max"] = mine[best]["max_gbps"]
        out["method"][kernel] = best
    return out


def main(args: dict) -> dict:
    device = probe_device(args, ARG_KEYS)
    nbytes = int(args.get("bytes", 4 * GIB if device == "cuda" else 4 << 20))
    nbytes -= nbytes % ALIGN
    if nbytes <= 0:
        raise ProbeFailed(f"bytes must be at least {ALIGN}")
    iters = int(args.get("iters", 10 if device == "cuda" else 3))
    if iters < 1:
        raise ProbeFailed("iters must be >= 1")
    steady = steady_args(args, 0.05 if device == "cuda" else 0.002, 0.5 if device == "cuda" else 0.05)
    known = list(READ_METHODS) + list(TRITON_CONFIGS)
    read_methods = args.get("read_methods", known)
    bad = [m for m in read_methods if m not in known]
    if bad:
        raise ProbeFailed(f"unknown read method {bad[0]!r} (known: {', '.join(known)})")
    indices = gpu_indices(device, args.get("gpus"))

    triton_kernels = None
    triton_state = "unavailable: not requested"
    if any(m in TRITON_CONFIGS for m in read_methods):
        triton, loaded = load_triton(device)
        if triton is None:
            triton_state = loaded
        else:
            triton_kernels, triton_state = loaded, triton.__version__
    cfg = {"device": device, "bytes": nbytes, "iters": iters, "steady": steady, "joint": Joint(),
           "read_methods": read_methods, "triton_kernels": triton_kernels}
    log(f"hbm_bandwidth: {len(indices)} device(s), {nbytes / GIB:.3f} GiB per buffer, {iters} reps, "
        f"triton {triton_state}")
    with Watch(bus_ids(device, indices)) as watch:
        gpus = on_gpus(lambda i, b: measure_gpu(i, b, cfg), indices)
    return {"device": device, "bytes": nbytes, "iters": iters, "steady": describe(steady), "triton": triton_state,
            "gpus": gpus,
            "conditions": watch.result()}


if __name__ == "__main__":
    run(main)
