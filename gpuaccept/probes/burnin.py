#!/usr/bin/env python3
"""Burn-in: every GPU of the node under a training job's load at once, for minutes, with telemetry.

One worker process per GPU (this file re-run with ``--worker``), joined in one torch.distributed group
(NCCL on cuda, gloo on cpu). Each worker loops, in lockstep with the others, over one *step*:

    a batch of dense matmuls (bf16, alternating with fp8 e4m3 where asked)   -> TFLOP/s
    a batch of HBM copies (``hbm_bytes`` each, bytes read + written)           -> GB/s
    a few all-reduces of ``allreduce_bytes`` over every GPU of the node        -> busbw GB/s

timed with CUDA events, and reports one figure per ``window_s`` window. Every ``sdc_interval_s`` all
workers compute the same deterministic fp32 matmul on the same seeded inputs (TF32 off, deterministic
algorithms on) and report a SHA-256 of the result's bytes: the controller compares them bit for bit across
the GPUs and against the first round (silent data corruption). Meanwhile the parent samples NVML every
``sample_s`` per GPU: SM and memory clocks, power, GPU and memory temperature, clock-event reasons, volatile
ECC counts, pending row remaps, PCIe replay counter, NVLink CRC/replay/recovery error counters (summed over
the active links).

Args (JSON object, all optional)::

    {"device": "cuda" | "cpu", "seconds": 300, "window_s": 10, "sample_s": 1, "sdc_interval_s": 60,
     "dtypes": ["bf16", "fp8"], "m": 8192, "n": 8192, "k": 8192, "matmuls_per_step": 40,
     "hbm_bytes": 2**30, "copies_per_step": 8, "allreduce_bytes": 2**28, "allreduces_per_step": 4,
     "sdc_n": 4096, "gpus": "all", "stall_s": null, "flip_bit_rank": null, "fault_rank": null}

``flip_bit_rank`` (tests only) flips one bit of that rank's SDC result: a GPU that computes wrong.
``fault_rank`` (tests only) ``{"rank": 1, "after_s": 1.0, "how": "exit" | "hang"}``: that rank's worker exits
with code 3 (a GPU that fell off the bus: CUDA errors end its process) or stops answering (a hung GPU) that many
seconds into the load. ``stall_s``: no new window from any rank for this long, after the first one, is a
stalled load (default max(120 s, 6 windows): a step is seconds long, a window 10 s).

A worker that dies, or a load that stalls, once windows were measured, no longer fails the whole probe: the
document keeps what was measured and says what stopped in ``"stopped"``::

    {"rank": 1 | null, "index": 1, "pci_bus_id": "...", "how": "exited with 3" | "stopped reporting" |
     "still running past the deadline", "t": 73.2, "windows": {rank: count}, "stderr": "last lines"}

``t``: seconds since the start when it stopped (a stalled load: the end of its last window). ``rank`` null:
every rank stopped at the same step (a collective waits on a GPU that stopped answering, and
which one cannot be told from here). A worker failing before any window is still a failed probe.

Output::

    {"device", "world_size", "seconds_requested", "wall_s", "interrupted": bool,
     "gpus": [{"rank", "index", "pci_bus_id", "name", "nvlink_active_links",
               "thresholds": {"slowdown_c", "shutdown_c", "mem_max_c", "gpu_max_c"},
               "foreign_processes": {"t", "processes": ["pid 4242 python3"]}}],   # only when one appeared
     "windows": [{"rank", "t0", "t1", "bf16_tflops", "fp8_tflops", "hbm_copy_gbps", "allreduce_busbw_gbps"}],
     "sdc": [{"round", "t", "hashes": {rank: hex}}],
     "telemetry": {"fields": [...], "rows": [[t, rank, v1, v2, ...], ...], "errors": {field: text}}}

While it runs, the parent (one process per node; the ranks report to it) writes one live progress line per
window round to stderr (``_probe.progress``: seconds of load done and requested, per GPU its latest bf16/fp8
TFLOP/s and highest GPU temperature since the previous line), which the controller's progress display shows.

Times are seconds since the burn-in started (the parent's monotonic clock; workers share it through
the start time they are given). Units: TFLOP/s = 2*m*n*k per product / s / 1e12 (cuBLAS convention);
GB/s = 1e9 B/s; copy counts bytes read + written (BabelStream's Copy); busbw = algbw * 2(n-1)/n
(nccl-tests' all-reduce factor, src/all_reduce.cu). NVML calls: NVML API reference (nvmlDeviceGetClockInfo,
nvmlDeviceGetPowerUsage, nvmlDeviceGetTemperature, nvmlDeviceGetFieldValues NVML_FI_DEV_MEMORY_TEMP,
nvmlDeviceGetCurrentClocksEventReasons, nvmlDeviceGetTotalEccErrors, nvmlDeviceGetRemappedRows,
nvmlDeviceGetPcieReplayCounter, nvmlDeviceGetNvLinkErrorCounter, nvmlDeviceGetTemperatureThreshold).
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from _pci import from_parts
from _probe import ProbeFailed, log, name_process, progress, reject_unknown, run, scratch_dir, sig

ARG_KEYS = {"device", "seconds", "window_s", "sample_s", "sdc_interval_s", "dtypes", "m", "n", "k",
            "matmuls_per_step", "hbm_bytes", "copies_per_step", "allreduce_bytes", "allreduces_per_step",
            "sdc_n", "gpus", "stall_s", "flip_bit_rank", "fault_rank"}
CUDA_DEFAULTS = {"seconds": 300.0, "window_s": 10.0, "sample_s": 1.0, "sdc_interval_s": 60.0,
                 "dtypes": ["bf16"], "m": 8192, "n": 8192, "k": 8192, "matmuls_per_step": 40,
                 "hbm_bytes": 2**30, "copies_per_step": 8, "allreduce_bytes": 2**28, "allreduces_per_step": 4,
                 "sdc_n": 4096}
CPU_DEFAULTS = {**CUDA_DEFAULTS, "seconds": 3.0, "window_s": 0.5, "sdc_interval_s": 1.0, "m": 64, "n": 64,
                "k": 64, "matmuls_per_step": 4, "hbm_bytes": 2**20, "copies_per_step": 2,
                "allreduce_bytes": 2**16, "allreduces_per_step": 2, "sdc_n": 96}
TELEMETRY_FIELDS = ("sm_mhz", "mem_mhz", "power_w", "temp_c", "mem_temp_c", "clocks_event_reasons",
                    "ecc_corrected_volatile", "ecc_uncorrected_volatile", "remap_pending", "pcie_replay",
                    "nvlink_crc", "nvlink_replay", "nvlink_recovery", "compute_procs")
STARTUP_GRACE_S = 120.0  # worker start-up (CUDA context, NCCL init) allowed on top of ``seconds``


def busbw_factor(world_size: int) -> float:
    """nccl-tests' all-reduce bus-bandwidth factor 2(n-1)/n (src/all_reduce.cu, AllReduceGetBw)."""
    return 2.0 * (world_size - 1) / world_size if world_size > 1 else 0.0


def sdc_digest(data: bytes) -> str:
    """SHA-256 hex digest of a result's raw bytes (what is compared bit for bit)."""
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- worker (one per GPU)

def _tensor_bytes(t) -> bytes:
    t = t.detach().contiguous().cpu()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def _say(doc: dict) -> None:
    """One ``@@<json>`` line to the parent (windows, SDC hashes, hello)."""
    sys.stdout.write("@@" + json.dumps(doc) + "\n")
    sys.stdout.flush()


def _hello(torch, dev, cuda: bool, rank: int) -> None:
    """The rank's hello: its GPU's PCI bus id and name (the parent matches NVML handles by bus id)."""
    if cuda:
        p = torch.cuda.get_device_properties(dev)
        try:
            bus = from_parts(p.pci_domain_id, p.pci_bus_id, p.pci_device_id)
        except AttributeError:
            bus = None
        _say({"hello": rank, "pci_bus_id": bus, "name": p.name})
    else:
        _say({"hello": rank, "pci_bus_id": None, "name": "cpu"})


def _fault(fault: dict, rank: int, since_load_s: float) -> None:
    """``fault_rank`` (tests only): this rank exits with 3 or hangs once ``after_s`` of load have passed."""
    if fault.get("rank") == rank and since_load_s >= float(fault.get("after_s", 0.0)):
        if fault.get("how") == "hang":  # a hung GPU: the process stays, answering nothing
            while True:
                time.sleep(3600)
        sys.stderr.write("fault_rank: CUDA error: unspecified launch failure (simulated lost device)\n")
        sys.stderr.flush()
        os._exit(3)


def _new_window(t0: float) -> dict:
    return {"t0": t0, "flop": {}, "mm_s": {}, "hbm_b": 0.0, "hbm_s": 0.0, "ar_b": 0.0, "ar_s": 0.0}


def _window_doc(win: dict, rank: int, t_now: float, factor: float) -> dict:
    """The window line of one rank: TFLOP/s per dtype, HBM copy GB/s, all-reduce busbw GB/s (None: not measured),
    each to 5 significant digits (a slow CPU figure, 4e-05 TFLOP/s on a loaded 2-core machine, stays non-zero)."""
    out = {"window": True, "rank": rank, "t0": round(win["t0"], 3), "t1": round(t_now, 3)}
    for kd in win["flop"]:
        out[f"{kd}_tflops"] = sig(win["flop"][kd] / win["mm_s"][kd] / 1e12) if win["mm_s"][kd] else None
    out["hbm_copy_gbps"] = sig(win["hbm_b"] / win["hbm_s"] / 1e9) if win["hbm_s"] else None
    out["allreduce_busbw_gbps"] = sig(win["ar_b"] / win["ar_s"] / 1e9 * factor) if win["ar_s"] else None
    return out


def _join(torch, dist, cfg: dict):
    """This rank's device (``cuda_index``, or the CPU with one thread), its process group joined; returns the
    device."""
    import datetime

    cuda = cfg["device"] == "cuda"
    if cuda:
        torch.cuda.set_device(cfg["cuda_index"])
        dev = torch.device("cuda", cfg["cuda_index"])
    else:
        torch.set_num_threads(1)
        dev = torch.device("cpu")
    # the CPU (gloo) load meets through a file in the probe's own folder: no port that another program can take
    # between _free_port() and the bind (EADDRINUSE, seen with parallel test runs); the GPU load keeps TCP
    init = f"tcp://127.0.0.1:{cfg['port']}" if cuda else f"file://{cfg['store']}"
    dist.init_process_group("nccl" if cuda else "gloo", init_method=init, rank=cfg["rank"],
                            world_size=cfg["world_size"], timeout=datetime.timedelta(seconds=STARTUP_GRACE_S))
    return dev


def _sdc_product(torch, sa, sb, flip: bool):
    """The SDC round's deterministic fp32 product of ``sa`` and ``sb`` (``flip``: one bit flipped, tests only)."""
    torch.use_deterministic_algorithms(True)
    res = torch.mm(sa, sb)
    torch.use_deterministic_algorithms(False)
    if flip:
        res.view(torch.int32).view(-1)[0] ^= 1
    return res


def _worker(cfg: dict) -> None:
    """One rank of the load (``burnin.py --worker '<cfg>'``): steps in lockstep until the deadline, the parent's
    stop file or the parent's death; windows and SDC hashes reported on stdout (:func:`_say`)."""
    import torch
    import torch.distributed as dist

    rank, world = cfg["rank"], cfg["world_size"]
    cuda = cfg["device"] == "cuda"
    # A signal to the process group stops the load through the parent (stop file, lockstep), so that the
    # windows measured so far are reported; a worker whose parent is gone stops by itself.
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    parent = os.getppid()
    dev = _join(torch, dist, cfg)
    _hello(torch, dev, cuda, rank)

    m, n, k = cfg["m"], cfg["n"], cfg["k"]
    g = torch.Generator(device="cpu").manual_seed(1234 + rank)
    a = torch.randn(m, k, generator=g).to(dev, torch.bfloat16)
    bt = torch.randn(n, k, generator=g).to(dev, torch.bfloat16)
    fp8 = "fp8" in cfg["dtypes"] and cuda and hasattr(torch, "_scaled_mm")
    if fp8:
        a8, b8 = a.to(torch.float8_e4m3fn), bt.to(torch.float8_e4m3fn)
        one = torch.ones((), device=dev, dtype=torch.float32)
    elems = cfg["hbm_bytes"] // 4
    src = torch.ones(elems, device=dev, dtype=torch.float32)
    dst = torch.empty_like(src)
    ar = torch.ones(cfg["allreduce_bytes"] // 2, device=dev, dtype=torch.bfloat16)
    flag = torch.zeros(2, device=dev, dtype=torch.float32)
    sdc_n = cfg["sdc_n"]
    gs = torch.Generator(device="cpu").manual_seed(20261130)  # the same inputs on every GPU
    sa = torch.randn(sdc_n, sdc_n, generator=gs).to(dev)
    sb = torch.randn(sdc_n, sdc_n, generator=gs).to(dev)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    def mark():
        if cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def secs(e0, e1) -> float:
        return e0.elapsed_time(e1) / 1e3 if cuda else e1 - e0

    def matmuls(kind: str, count: int):
        for _ in range(count):
            if kind == "fp8":
                torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            else:
                torch.mm(a, bt.t())

    t_start = cfg["t_start"]
    stop_file = cfg["stop_file"]
    # the load clock starts when every rank is ready (start-up is not burn-in time): rank 0's time, shared
    dist.barrier()
    t_load = torch.tensor([time.time()], dtype=torch.float64, device=dev)
    dist.broadcast(t_load, 0)
    deadline = float(t_load.item()) + cfg["seconds"]
    if rank == 0:
        _say({"load_started": round(float(t_load.item()) - t_start, 3)})
    sdc_round, next_sdc = 0, time.time()
    win = _new_window(time.time() - t_start)
    step = 0
    flop_one = 2.0 * m * n * k
    factor = busbw_factor(world)
    fault = cfg.get("fault_rank") if isinstance(cfg.get("fault_rank"), dict) else {}
    while True:
        now = time.time()
        _fault(fault, rank, now - float(t_load.item()))
        gone = os.getppid() != parent
        flag[0] = 1.0 if (now >= deadline or gone or (rank == 0 and os.path.exists(stop_file))) else 0.0
        flag[1] = 1.0 if (rank == 0 and now >= next_sdc) else 0.0
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # lockstep: every rank stops and checks together
        stop, do_sdc = flag[0].item() > 0, flag[1].item() > 0
        if do_sdc:
            res = _sdc_product(torch, sa, sb, cfg.get("flip_bit_rank") == rank)
            _say({"sdc": sdc_round, "rank": rank, "t": time.time() - t_start, "hash": sdc_digest(_tensor_bytes(res))})
            sdc_round += 1
            next_sdc = time.time() + cfg["sdc_interval_s"]
        kind = "fp8" if fp8 and step % 2 else "bf16"
        e0 = mark()
        matmuls(kind, cfg["matmuls_per_step"])
        e1 = mark()
        for _ in range(cfg["copies_per_step"]):
            dst.copy_(src)
        e2 = mark()
        if world > 1:
            for _ in range(cfg["allreduces_per_step"]):
                dist.all_reduce(ar)
        e3 = mark()
        if cuda:
            torch.cuda.synchronize()
        win["flop"][kind] = win["flop"].get(kind, 0.0) + flop_one * cfg["matmuls_per_step"]
        win["mm_s"][kind] = win["mm_s"].get(kind, 0.0) + secs(e0, e1)
        win["hbm_b"] += 2.0 * elems * 4 * cfg["copies_per_step"]
        win["hbm_s"] += secs(e1, e2)
        if world > 1:
            win["ar_b"] += float(ar.numel() * 2 * cfg["allreduces_per_step"])
            win["ar_s"] += secs(e2, e3)
        step += 1
        t_now = time.time() - t_start
        if stop or t_now - win["t0"] >= cfg["window_s"]:
            _say(_window_doc(win, rank, t_now, factor))
            win = _new_window(t_now)
        if stop:
            break
    # every rank past its last collective, then out without tearing the group down: gloo's teardown aborts
    # ("terminate called without an active exception", about 1 run in 8 on a loaded 2-core machine), which
    # failed a burn-in whose windows were all measured; the process's exit releases the group's resources
    dist.barrier()
    if cuda:
        torch.cuda.synchronize()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# ---------------------------------------------------------------- telemetry (parent)

class Telemetry(threading.Thread):
    """Samples TELEMETRY_FIELDS for every GPU every ``period`` s through pynvml, as rows
    ``[t, rank, v...]`` (None where NVML refuses a field; the first refusal's text kept per field)."""

    def __init__(self, nv, handles: dict, t_start: float, period: float, own_pids: set | None = None):
        super().__init__(daemon=True)
        self.own_pids = set(own_pids or ())
        self.foreign: dict[int, dict] = {}  # rank -> first sighting of another compute process on that GPU
        self.nv, self.handles, self.t_start, self.period = nv, handles, t_start, period
        self.rows: list[list] = []
        self.errors: dict[str, str] = {}
        self.stop_event = threading.Event()
        self.reasons_fn = (getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
                           or getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
        self.links = {r: self._active_links(h) for r, h in handles.items()}

    def _active_links(self, h) -> list[int]:
        out = []
        for link in range(getattr(self.nv, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if self.nv.nvmlDeviceGetNvLinkState(h, link):
                    out.append(link)
            except Exception:  # noqa: BLE001 - no such link / NVLink not supported
                continue
        return out

    def _get(self, field: str, fn, *args):
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - recorded per field
            self.errors.setdefault(field, f"{type(e).__name__}: {e}")
            return None

    def _nvlink(self, h, links: list[int], counter_name: str):
        counter = getattr(self.nv, counter_name, None)
        if not links or counter is None:
            return None
        total = 0
        for link in links:
            v = self._get(counter_name, self.nv.nvmlDeviceGetNvLinkErrorCounter, h, link, counter)
            if v is None:
                return None
            total += int(v)
        return total

    def _mem_temp(self, h):
        fid = getattr(self.nv, "NVML_FI_DEV_MEMORY_TEMP", None)
        if fid is None or not hasattr(self.nv, "nvmlDeviceGetFieldValues"):
            return None
        vals = self._get("mem_temp_c", self.nv.nvmlDeviceGetFieldValues, h, [fid])
        if not vals or vals[0].nvmlReturn != 0:
            self.errors.setdefault("mem_temp_c", f"nvmlDeviceGetFieldValues return {vals[0].nvmlReturn if vals else None}")
            return None
        v = vals[0]
        return int(getattr(v.value, {1: "uiVal", 2: "ulVal", 3: "ullVal"}.get(v.valueType, "uiVal")))

    def sample_once(self) -> None:
        nv = self.nv
        t = round(time.time() - self.t_start, 3)
        for rank, h in self.handles.items():
            power = self._get("power_w", nv.nvmlDeviceGetPowerUsage, h)
            remap = self._get("remap_pending", nv.nvmlDeviceGetRemappedRows, h) if hasattr(
                nv, "nvmlDeviceGetRemappedRows") else None
            self.rows.append([
                t, rank,
                self._get("sm_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                self._get("mem_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
                None if power is None else round(power / 1000.0, 1),
                self._get("temp_c", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
                self._mem_temp(h),
                self._get("clocks_event_reasons", self.reasons_fn, h) if self.reasons_fn else None,
                self._get("ecc_corrected_volatile", nv.nvmlDeviceGetTotalEccErrors, h,
                          nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
                self._get("ecc_uncorrected_volatile", nv.nvmlDeviceGetTotalEccErrors, h,
                          nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
                None if remap is None else int(bool(remap[2])),
                self._get("pcie_replay", nv.nvmlDeviceGetPcieReplayCounter, h),
                self._nvlink(h, self.links[rank], "NVML_NVLINK_ERROR_DL_CRC_DATA"),
                self._nvlink(h, self.links[rank], "NVML_NVLINK_ERROR_DL_REPLAY"),
                self._nvlink(h, self.links[rank], "NVML_NVLINK_ERROR_DL_RECOVERY"),
                self._processes(rank, h, t),
            ])

    def _processes(self, rank: int, h, t: float):
        """Compute processes on the GPU (ours is one per GPU). More than one: a foreign load, whose first
        sighting is kept (pid and name where this pid namespace can see them)."""
        fn = getattr(self.nv, "nvmlDeviceGetComputeRunningProcesses", None)
        procs = self._get("compute_procs", fn, h) if fn else None
        if procs is None:
            return None
        if len(procs) > 1 and rank not in self.foreign:
            others = [p for p in procs if p.pid not in self.own_pids] or list(procs)
            names = []
            for p in others[:4]:
                try:
                    with open(f"/proc/{p.pid}/comm", encoding="utf-8") as f:
                        names.append(f"pid {p.pid} {f.read().strip()}")
                except OSError:
                    names.append(f"pid {p.pid}")
            self.foreign[rank] = {"t": t, "processes": names}
        return len(procs)

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.sample_once()
            self.stop_event.wait(self.period)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=10)
        self.sample_once()  # one last sample: counters after the load


def _thresholds(nv, h) -> dict:
    """The GPU's own temperature thresholds (nvmlDeviceGetTemperatureThreshold), degrees C; None where
    NVML does not give one."""
    out = {}
    for key, name in (("slowdown_c", "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN"),
                      ("shutdown_c", "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN"),
                      ("gpu_max_c", "NVML_TEMPERATURE_THRESHOLD_GPU_MAX"),
                      ("mem_max_c", "NVML_TEMPERATURE_THRESHOLD_MEM_MAX")):
        const = getattr(nv, name, None)
        try:
            out[key] = int(nv.nvmlDeviceGetTemperatureThreshold(h, const)) if const is not None else None
        except Exception:  # noqa: BLE001 - not every board reports every threshold
            out[key] = None
    return out


# ---------------------------------------------------------------- parent

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cuda_count() -> int:
    """GPUs torch sees, asked in a child process so that this parent never holds a CUDA context."""
    code = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    try:
        return int(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ProbeFailed(f"torch could not count GPUs: {(res.stderr.strip().splitlines() or ['?'])[-1]}")


def _settings(args: dict) -> tuple[str, dict, list[int]]:
    """``(device, configuration, CUDA indices of the ranks)`` from the probe's arguments (defaults per device).
    Raises ProbeFailed for an unknown argument, a device other than cuda/cpu, or no visible CUDA device."""
    reject_unknown(args, ARG_KEYS)
    device = args.get("device", "cuda")
    if device not in ("cuda", "cpu"):
        raise ProbeFailed(f"device must be cuda or cpu, got {device!r}")
    cfg = {**(CUDA_DEFAULTS if device == "cuda" else CPU_DEFAULTS), **{k: v for k, v in args.items() if v is not None}}
    gpus = cfg.get("gpus", "all")
    if device == "cuda":
        count = _cuda_count()
        if count == 0:
            raise ProbeFailed("no CUDA device visible to torch")
        indices = list(range(count)) if gpus in (None, "all") else list(gpus)
    else:
        indices = list(range(int(gpus))) if isinstance(gpus, int) else [0, 1]
    return device, cfg, indices


class _Collector:
    """What the ranks report (their ``@@`` lines, parsed, in arrival order) and the last lines of their stderr,
    read by one pump thread per stream; writes the live progress lines (one per window round)."""

    def __init__(self, cfg: dict, world: int):
        self.cfg, self.world = cfg, world
        self.lines: list[dict] = []
        self.errs: dict[int, list[str]] = {r: [] for r in range(world)}
        self.lock = threading.Lock()
        self.live = {"telemetry": None, "row": 0, "windows": {}, "shown": 0}  # for the live progress lines
        self.last_window = None  # monotonic time the latest window of any rank arrived (stall detection)

    def hellos(self) -> dict[int, dict]:
        """rank -> its hello line (PCI bus id, name), for the ranks that said it."""
        with self.lock:
            return {d["hello"]: d for d in self.lines if "hello" in d}

    def live_progress(self, rank: int, window: dict) -> None:
        """One progress line per window round, once every rank has reported it (only this parent process
        writes them; the ranks talk to it): each GPU's latest bf16/fp8 TFLOP/s and its highest GPU
        temperature sampled since the previous line."""
        live, world = self.live, self.world
        with self.lock:
            live["windows"].setdefault(rank, []).append(window)
            done = min(len(live["windows"].get(r, [])) for r in range(world))
            if done <= live["shown"]:
                return
            live["shown"] = done
            gpus = {str(r): {k: live["windows"][r][done - 1][k] for k in ("bf16_tflops", "fp8_tflops")
                             if isinstance(live["windows"][r][done - 1].get(k), (int, float))} for r in range(world)}
            tel = live["telemetry"]
            rows = tel.rows[live["row"]:] if tel is not None else []
            live["row"] += len(rows)
            load0 = next((d["load_started"] for d in self.lines if "load_started" in d), 0.0)
        temp_i = 2 + TELEMETRY_FIELDS.index("temp_c")
        for row in rows:
            g = gpus.get(str(row[1]))
            if g is not None and isinstance(row[temp_i], (int, float)):
                g["temp_c"] = max(g.get("temp_c", row[temp_i]), row[temp_i])
        total = float(self.cfg["seconds"])  # the last step may overrun the load's end: shown as done, not past it
        progress({"done": round(min(total, max(0.0, window["t1"] - load0)), 1), "total": total, "gpus": gpus})

    def pump_out(self, rank, stream):
        for line in stream:
            if line.startswith("@@"):
                try:
                    doc = json.loads(line[2:])
                except ValueError:
                    continue
                with self.lock:
                    self.lines.append(doc)
                    if doc.get("window"):  # counted from the first window (start-up has the deadline)
                        self.last_window = time.monotonic()
                if doc.get("window"):
                    vals = ", ".join(f"{k} {v}" for k, v in doc.items() if k.endswith(("tflops", "gbps")) and v)
                    log(f"burnin {doc['t1'] / 60:.1f}/{self.cfg['seconds'] / 60:.1f} min rank {rank}: {vals}")
                    self.live_progress(rank, doc)

    def pump_err(self, rank, stream):
        for line in stream:
            self.errs[rank].append(line.rstrip())
            del self.errs[rank][:-20]


def _start_telemetry(col: _Collector, world: int, t_start: float, cfg: dict, procs) -> tuple:
    """``(telemetry thread or None, pynvml or None, nvml state)``: NVML sampling of the ranks' GPUs, matched to
    them by the PCI bus id of their hellos (whatever CUDA_DEVICE_ORDER says), after waiting up to
    STARTUP_GRACE_S for every hello (or a rank's failure)."""
    hello_deadline = time.time() + STARTUP_GRACE_S
    while time.time() < hello_deadline:
        if len(col.hellos()) == world or any(p.poll() not in (None, 0) for p in procs):
            break
        time.sleep(0.2)
    hellos = col.hellos()
    try:
        import pynvml as nv
        nv.nvmlInit()
        handles = {}
        for rank in range(world):
            bus = (hellos.get(rank) or {}).get("pci_bus_id")
            if bus:
                handles[rank] = nv.nvmlDeviceGetHandleByPciBusId(bus)
        telemetry = Telemetry(nv, handles, t_start, float(cfg["sample_s"]), {p.pid for p in procs})
        telemetry.start()
        col.live["telemetry"] = telemetry
        return telemetry, nv, "ok"
    except Exception as e:  # noqa: BLE001 - the load still runs; the verdict says telemetry is missing
        return None, None, f"unavailable: {type(e).__name__}: {e}"


def _supervise(procs, exited: dict, col: _Collector, limit: float, stall_s: float, interrupted: dict):
    """Wait for the ranks; ``(rank or None, rc or "deadline" / "stalled")`` of what stopped the load (the first
    rank to end badly, the deadline ``limit`` (Unix time), no window for ``stall_s``), or None when it ran out."""
    while any(p.poll() is None for p in procs):
        bad = sorted(((r, p.returncode) for r, p in enumerate(procs) if p.poll() not in (None, 0)),
                     key=lambda b: exited.get(b[0], float("inf")))  # the first to end (the others follow it)
        with col.lock:
            seen = col.last_window
        if bad or time.time() > limit:
            return bad[0] if bad else (None, "deadline")
        if seen is not None and time.monotonic() - seen > stall_s and not interrupted["sig"]:
            return (None, "stalled")
        time.sleep(0.2)
    return None


def _gpus_out(world: int, indices: list[int], hellos: dict, telemetry, nv) -> list[dict]:
    """The document's ``gpus``: per rank its CUDA index, PCI bus id, name, and with telemetry its NVML
    temperature thresholds, active NVLinks and foreign processes."""
    out = []
    for r in range(world):
        g = {"rank": r, "index": indices[r], "pci_bus_id": (hellos.get(r) or {}).get("pci_bus_id"),
             "name": (hellos.get(r) or {}).get("name")}
        if telemetry is not None and r in telemetry.handles:
            g["thresholds"] = _thresholds(nv, telemetry.handles[r])
            g["nvlink_active_links"] = len(telemetry.links.get(r, []))
            if r in telemetry.foreign:
                g["foreign_processes"] = telemetry.foreign[r]
        out.append(g)
    return out


def _behind(counts: dict[int, int]) -> int | None:
    """The rank whose window count trails every other rank's by two or more, else None. Each rank closes its
    windows on its own clock, so ranks that ran the same steps in lockstep can differ by one window (a window
    boundary falling between them); only a gap of two says that one rank stopped before the others."""
    if len(counts) < 2:
        return None
    low_rank = min(counts, key=counts.get)
    others = [c for r, c in counts.items() if r != low_rank]
    return low_rank if min(others) - counts[low_rank] >= 2 else None


def _stopped(failed: tuple, col: _Collector, world: int, indices: list[int], hellos: dict, stall_s: float,
             t_failed: float) -> dict:
    """The document's ``stopped`` (see the module docstring) for what stopped the load, ``failed`` (as
    :func:`_supervise`). Raises ProbeFailed when no window was measured (the load never ran)."""
    rank, rc = failed
    lines, errs = col.lines, col.errs
    windows = [d for d in lines if d.get("window")]
    if not windows:  # nothing measured: the load never ran (set-up failure), the probe fails as a whole
        tail = " | ".join(errs.get(rank, [])[-3:]) if rank is not None else ""
        bus = (hellos.get(rank) or {}).get("pci_bus_id") if rank is not None else None
        raise ProbeFailed(f"burn-in worker rank {rank} (CUDA device {indices[rank] if rank is not None else '?'}"
                          f"{', ' + bus if bus else ''}) ended with {rc} before any window was measured: "
                          f"{tail[-400:] or 'no output'}")
    counts = {r: sum(1 for d in windows if d["rank"] == r) for r in range(world)}
    if rank is None:  # one rank two or more windows behind every other: that one
        rank = _behind(counts)
    how = ({"stalled": f"stopped reporting (no window from any GPU for {stall_s:g} s)",
            "deadline": "still running past the deadline"}.get(rc) if isinstance(rc, str) else
           f"killed by signal {-rc}" if rc < 0 else f"exited with {rc}")
    return {"rank": rank, "index": indices[rank] if rank is not None else None,
            "pci_bus_id": (hellos.get(rank) or {}).get("pci_bus_id") if rank is not None else None,
            "how": how, "t": round(max(d["t1"] for d in windows) if rc == "stalled" else t_failed, 2),
            "windows": {str(r): c for r, c in counts.items()},
            "stderr": " | ".join(errs.get(rank, [])[-3:])[-400:] if rank is not None else ""}


def _sdc_rounds(lines: list[dict]) -> list[dict]:
    """The document's ``sdc``: per round its time and every rank's hash, in round order."""
    sdc: dict[int, dict] = {}
    for d in lines:
        if "sdc" in d:
            sdc.setdefault(d["sdc"], {"round": d["sdc"], "t": d["t"], "hashes": {}})["hashes"][str(d["rank"])] = d["hash"]
    return [sdc[r] for r in sorted(sdc)]


def main(args: dict) -> dict:
    """The burn-in (see the module docstring): the ranks started, supervised and stopped, telemetry sampled
    meanwhile; returns the document. Raises ProbeFailed for bad arguments or a load that never ran."""
    device, cfg, indices = _settings(args)
    world = len(indices)
    tmp = tempfile.mkdtemp(prefix="burnin-", dir=scratch_dir())
    stop_file = os.path.join(tmp, "stop")
    store = os.path.join(tmp, "store")  # the CPU load's rendezvous file (gloo's FileStore)
    interrupted = {"sig": None}

    def on_signal(signum, _frame):  # stop the load, keep what was measured
        interrupted["sig"] = signal.Signals(signum).name
        open(stop_file, "w").close()

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    t_start = time.time()
    port = _free_port()
    env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":4096:8", "PYTHONUNBUFFERED": "1"}
    procs = []
    for rank, idx in enumerate(indices):
        wcfg = {**cfg, "rank": rank, "world_size": world, "cuda_index": idx, "device": device, "port": port,
                "store": store, "t_start": t_start, "stop_file": stop_file}
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(wcfg)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True))
    col = _Collector(cfg, world)
    pumps = []
    exited: dict[int, float] = {}  # rank -> monotonic time its process ended: the first one is the cause

    def waiter(rank, proc):
        proc.wait()
        exited.setdefault(rank, time.monotonic())

    for r, p in enumerate(procs):
        threading.Thread(target=waiter, args=(r, p), daemon=True).start()
        for fn, st in ((col.pump_out, p.stdout), (col.pump_err, p.stderr)):
            th = threading.Thread(target=fn, args=(r, st), daemon=True)
            th.start()
            pumps.append(th)
    telemetry, nv, nvml_state = (_start_telemetry(col, world, t_start, cfg, procs) if device == "cuda"
                                 else (None, None, "not used (cpu)"))
    limit = t_start + float(cfg["seconds"]) + STARTUP_GRACE_S
    stall_s = float(cfg.get("stall_s") or max(120.0, 6.0 * float(cfg["window_s"])))
    failed = _supervise(procs, exited, col, limit, stall_s, interrupted)
    t_failed = time.time() - t_start
    if failed is None:
        bad = sorted(((r, p.returncode) for r, p in enumerate(procs) if p.returncode != 0),
                     key=lambda b: exited.get(b[0], float("inf")))
        failed = bad[0] if bad else None
    if failed is not None:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p in procs:
        p.wait()
    for th in pumps:
        th.join(timeout=5)
    if telemetry is not None:
        telemetry.stop()
    hellos = col.hellos()
    gpus_out = _gpus_out(world, indices, hellos, telemetry, nv)
    if nv is not None and nvml_state == "ok":
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    for f in (stop_file, store):
        try:
            os.unlink(f)
        except OSError:
            pass
    os.rmdir(tmp)
    stopped = None
    if failed is not None and not interrupted["sig"]:
        stopped = _stopped(failed, col, world, indices, hellos, stall_s, t_failed)
    lines = col.lines
    return {"device": device, "world_size": world, "seconds_requested": cfg["seconds"],
            "wall_s": round(time.time() - t_start, 2),
            "load_started_s": next((d["load_started"] for d in lines if "load_started" in d), None),
            "interrupted": interrupted["sig"], "stopped": stopped, "nvml": nvml_state,
            "config": {k: cfg[k] for k in sorted(CUDA_DEFAULTS)},
            "gpus": gpus_out, "windows": [{k: v for k, v in d.items() if k != "window"} for d in lines if d.get("window")],
            "sdc": _sdc_rounds(lines),
            "telemetry": {"fields": ["t", "rank", *TELEMETRY_FIELDS], "rows": telemetry.rows if telemetry else [],
                          "errors": telemetry.errors if telemetry else {}}}


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        name_process()  # a rank is a probe's process too (_probe.PROCESS_NAME in the driver's Xid lines)
        _worker(json.loads(sys.argv[2]))
    else:
        run(main)
