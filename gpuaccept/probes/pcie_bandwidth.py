"""Host <-> GPU copy bandwidth (pinned memory) per GPU, NUMA-bound, one GPU at a time and all at once.

Args (JSON object, every key optional)::

    {"device": "cuda" | "cpu",      # cpu: the same code path (host-to-host copies), for CI
     "bytes": 1073741824,           # per copy; default 1 GiB on cuda, 4 MiB on cpu
     "iters": 3,                    # timed copies per stop-rule window (after one warm-up copy per direction)
     "min_seconds": 0.2, "max_seconds": 1.0,   # stop rule per figure (cpu: 0.002, 0.05), see _steady.py
     "tolerance_pct": 0.5,          # stable: a window's median within this of the previous window's
     "mode": "each" | "all" | "both",   # default both
     "gpus": [0, 1] | "all"}

Output::

    {"device", "bytes", "iters", "mode", "h2d_gbps_all_total", "d2h_gbps_all_total",
     "steady": {"min_seconds", "max_seconds", "tolerance_pct"},
     "conditions",                  # the GPUs' (_conditions.py: other processes on them)
     "host_conditions",             # the host's while the timed copies ran (_hostwatch.py: other processes
                                    #   on the CPUs, memory pressure)
     "gpus": [{"index", "name", "pci_bus_id", "numa_node", "cpus_bound",
               "h2d_gbps", "d2h_gbps", "h2d_gbps_all", "d2h_gbps_all",
               "h2d_gbps_max", "d2h_gbps_max",
               "measure": {"h2d" | "d2h" | "h2d_all" | "d2h_all": {"measured_s", "windows",
                                                                  "stop": "stable" | "settled" | "ceiling",
                                                                  "as"?}}}]}

``*_gbps``: median over the copies with this GPU alone (mode each); ``*_gbps_all``: median while
every selected GPU copies at once (mode all; a barrier starts each direction together, and they stop together);
a mode not run leaves its fields null. With one GPU, mode both copies once: its ``*_all`` figures are its
``*_gbps`` (``measure`` ``h2d_all``/``d2h_all`` say ``"as": "h2d"``/``"d2h"``). GB/s = 1e9 B/s of payload; one copy of ``bytes`` counts ``bytes`` (the
convention of CUDA's bandwidthTest and nvbandwidth). Timed with CUDA events between back-to-back
``copy_(non_blocking=True)`` between a pinned host buffer and a device buffer, both allocated once before any
timing (a 1 GiB copy at 55 GB/s is ~20 ms): windows of ``iters`` copies until two successive window medians
agree within ``tolerance_pct`` after ``min_seconds``, or ``max_seconds`` pass (_steady.py).

NUMA: each GPU is measured from its own thread (in this process: no second torch import or CUDA context), bound
with os.sched_setaffinity(0, ...) -- on Linux the calling thread's affinity -- to the CPUs of the GPU's NUMA
node: /sys/bus/pci/devices/<bus id>/numa_node, then /sys/devices/system/node/node<N>/cpulist, intersected with
the CPUs we may use. The thread binds BEFORE it allocates the pinned buffer (cudaHostAlloc commits and locks the
pages from the calling thread), so the buffer's pages are on that node; the copies are issued from a thread
bound the same way. numa_node -1 (the platform does not say) or a missing file means no binding (cpus_bound
null). All GPUs allocate at once; then they copy one at a time, then all together.
"""
from __future__ import annotations

import os
import statistics
import threading
import time

import torch

from _conditions import Watch
from _hostwatch import Watch as HostWatch
from _gpu import describe_gpu, gpu_indices, on_gpus, probe_device
from _probe import ProbeFailed, log, run
from _steady import STEADY_KEYS, Joint, describe, fields, run_windows, steady_args

GIB = 1 << 30
ARG_KEYS = {"device", "bytes", "iters", "mode", "gpus", "attempt"} | STEADY_KEYS
MODES = ("each", "all", "both")


def gbps(nbytes: float, seconds: float) -> float:
    """Bandwidth in GB/s (1e9 bytes per second)."""
    return nbytes / seconds / 1e9


def sysfs_pci_name(bus_id: str) -> str:
    """sysfs device name ("0000:1b:00.0") of a bus id in NVML ("00000000:1B:00.0") or sysfs form."""
    from _pci import sysfs_name  # imported here: the one PCI normaliser, see _pci.py

    return sysfs_name(bus_id)


def parse_cpulist(text: str) -> list[int]:
    """CPUs of a kernel cpulist string such as "0-3,8-11,16"."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def numa_of(bus_id: str | None, sysfs: str = "/sys") -> tuple[int | None, list[int] | None]:
    """(numa node, CPUs to bind to) for a PCI device; CPUs None means do not bind.

    Node None: the sysfs file is missing; -1: the platform reports no affinity. The CPUs are the
    node's cpulist intersected with our current affinity (a cpuset may forbid the others)."""
    if not bus_id:
        return None, None
    try:
        with open(f"{sysfs}/bus/pci/devices/{sysfs_pci_name(bus_id)}/numa_node") as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        return None, None
    if node < 0:
        return node, None
    try:
        with open(f"{sysfs}/devices/system/node/node{node}/cpulist") as f:
            cpus = parse_cpulist(f.read())
    except (OSError, ValueError):
        return node, None
    allowed = os.sched_getaffinity(0)
    cpus = [c for c in cpus if c in allowed]
    return node, cpus or None


# ---------------------------------------------------------------- one thread per GPU

def time_copies(dst: torch.Tensor, src: torch.Tensor, iters: int, cuda: bool) -> list[float]:
    """Seconds of each of ``iters`` back-to-back copies src -> dst: CUDA events between the copies on cuda
    (the buffers exist already: only copies are timed), perf_counter on cpu."""
    if cuda:
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
        marks[0].record()
        for i in range(iters):
            dst.copy_(src, non_blocking=True)
            marks[i + 1].record()
        torch.cuda.synchronize()
        return [a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:])]
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        dst.copy_(src)
        out.append(time.perf_counter() - t0)
    return out


def bind(g: dict, device: str) -> None:
    """Bind the calling thread to its GPU's NUMA CPUs (os.sched_setaffinity(0, ...) sets the calling thread's
    affinity on Linux) and make the GPU its current device."""
    if g["_cpus"]:
        os.sched_setaffinity(0, g["_cpus"])
    if device == "cuda":
        torch.cuda.set_device(g["index"])


def allocate(g: dict, device: str, nbytes: int) -> None:
    """One pinned host buffer and one device buffer for GPU ``g``, allocated once from a thread bound to its
    NUMA node (:func:`bind`): cudaHostAlloc commits and locks the pages from that thread, so they are the node's."""
    bind(g, device)
    cuda = device == "cuda"
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=cuda)
    host.fill_(0x5A)  # touch every page (on cpu the first touch places them)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", g["index"]) if cuda else "cpu")
    dev.fill_(0xA5)
    if cuda:
        torch.cuda.synchronize()
    g["_bufs"] = (host, dev)


def measure(g: dict, cfg: dict, barrier=None, joint: Joint | None = None) -> dict:
    """h2d then d2h copies of GPU ``g`` in stop-rule windows of ``iters`` copies (_steady.run_windows), after
    one warm-up copy; with ``barrier``/``joint`` every GPU starts each direction together and they stop
    together. Returns {"h2d": run_windows result, "d2h": ...}."""
    bind(g, cfg["device"])
    host, dev = g["_bufs"]
    cuda, st, out = cfg["device"] == "cuda", cfg["steady"], {}
    for name, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
        dst.copy_(src, non_blocking=True)  # warm-up: the DMA path and any lazy mapping
        if cuda:
            torch.cuda.synchronize()
        if barrier is not None:
            barrier.wait()

        def window(dst=dst, src=src):
            times = time_copies(dst, src, cfg["iters"], cuda)
            return times, sum(times)

        agree = None if joint is None else (lambda done: joint.agree(barrier, g["index"], done))
        out[name] = run_windows(window, st["min_s"], st["max_s"], st["tolerance"], agree=agree)
    return out


def in_thread(fn, *args):
    """``fn(*args)`` in a new thread (its own CPU affinity; the caller's is left as it was); its error re-raised."""
    box: dict = {}

    def body():
        try:
            box["v"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            box["e"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join()
    if "e" in box:
        raise box["e"]
    return box["v"]


def summarize(times: list[float], nbytes: int) -> tuple[float, float]:
    """(median GB/s, max GB/s) of a list of copy durations."""
    rates = [gbps(nbytes, t) for t in times]
    return round(statistics.median(rates), 2), round(max(rates), 2)


def main(args: dict) -> dict:
    device = probe_device(args, ARG_KEYS)
    mode = args.get("mode", "both")
    if mode not in MODES:
        raise ProbeFailed(f"unknown mode {mode!r} (known: {', '.join(MODES)})")
    nbytes = int(args.get("bytes", GIB if device == "cuda" else 4 << 20))
    iters = int(args.get("iters", 3))
    if nbytes < 1 or iters < 1:
        raise ProbeFailed("bytes and iters must be >= 1")
    cuda = device == "cuda"
    cfg = {"device": device, "iters": iters,
           "steady": steady_args(args, 0.2 if cuda else 0.002, 1.0 if cuda else 0.05)}
    indices = gpu_indices(device, args.get("gpus"))

    gpus = []
    for i in indices:
        info = describe_gpu(device, i)
        node, cpus = numa_of(info["pci_bus_id"])
        info.update(numa_node=node, cpus_bound=len(cpus) if cpus else None, _cpus=cpus)
        gpus.append(info)
    log("pcie_bandwidth: " + ", ".join(f"GPU {g['index']} numa {g['numa_node']}" for g in gpus))

    t0 = time.perf_counter()
    watch = Watch([g["pci_bus_id"] for g in gpus] if cuda else []).start()
    host = None
    try:
        on_gpus(lambda i, b: allocate(gpus[indices.index(i)], device, nbytes), indices)
        log(f"pcie_bandwidth: {len(gpus)} buffer pair(s) pinned after {time.perf_counter() - t0:.1f} s")
        host = HostWatch().start()  # the host's side, around the timed copies
        for g in gpus:
            g.update(h2d_gbps=None, d2h_gbps=None, h2d_gbps_max=None, d2h_gbps_max=None,
                     h2d_gbps_all=None, d2h_gbps_all=None, measure={})
        if mode in ("each", "both"):
            for g in gpus:  # one GPU at a time
                res = in_thread(measure, g, cfg)
                for d in ("h2d", "d2h"):
                    g[f"{d}_gbps"], g[f"{d}_gbps_max"] = summarize(res[d]["samples"], nbytes)
                    g["measure"][d] = fields(res[d])
        if mode == "both" and len(gpus) == 1:  # one GPU copying alone is all GPUs copying at once
            g = gpus[0]
            for d in ("h2d", "d2h"):
                g[f"{d}_gbps_all"] = g[f"{d}_gbps"]
                g["measure"][f"{d}_all"] = {**g["measure"][d], "as": d}
        elif mode in ("all", "both"):
            joint = Joint()
            every = on_gpus(lambda i, b: measure(gpus[indices.index(i)], cfg, b, joint), indices)
            for g, res in zip(gpus, every):
                for d in ("h2d", "d2h"):
                    g[f"{d}_gbps_all"] = summarize(res[d]["samples"], nbytes)[0]
                    g["measure"][f"{d}_all"] = fields(res[d])
        log(f"pcie_bandwidth: measured after {time.perf_counter() - t0:.1f} s")
    finally:
        watch.stop()
        if host is not None:
            host.stop()
        for g in gpus:
            g.pop("_bufs", None)

    for g in gpus:
        del g["_cpus"]
    totals = {}
    for d in ("h2d", "d2h"):
        vals = [g[f"{d}_gbps_all"] for g in gpus]
        totals[f"{d}_gbps_all_total"] = round(sum(vals), 2) if None not in vals else None
    return {"device": device, "bytes": nbytes, "iters": iters, "mode": mode, "steady": describe(cfg["steady"]),
            **totals, "gpus": gpus, "conditions": watch.result(), "host_conditions": host.result() if host else None}


if __name__ == "__main__":
    run(main)
