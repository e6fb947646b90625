"""Host <-> GPU copy bandwidth (pinned memory) per GPU, NUMA-bound, one GPU at a time and all at once.

Args (JSON object, every key optional)::

    {"device": "cuda" | "cpu",      # cpu: the same code path (host-to-host copies), for CI
     "bytes": 1073741824,           # per copy; default 1 GiB on cuda, 4 MiB on cpu
     "iters": 10,                   # timed copies per direction (after one warm-up copy)
     "mode": "each" | "all" | "both",   # default both
     "gpus": [0, 1] | "all"}

Output::

    {"device", "bytes", "iters", "mode", "h2d_gbps_all_total", "d2h_gbps_all_total",
     "conditions",                  # the GPUs' (_conditions.py: other processes on them)
     "host_conditions",             # the host's while the timed copies ran (_hostwatch.py: other processes
                                    #   on the CPUs, memory pressure); the workers are the probe's own
     "gpus": [{"index", "name", "pci_bus_id", "numa_node", "cpus_bound",
               "h2d_gbps", "d2h_gbps", "h2d_gbps_all", "d2h_gbps_all",
               "h2d_gbps_max", "d2h_gbps_max"}]}

``*_gbps``: median over the copies with this GPU alone (mode each); ``*_gbps_all``: median while
every selected GPU copies at once (mode all; a barrier starts each direction together); a mode not
run leaves its fields null. GB/s = 1e9 B/s of payload; one copy of ``bytes`` counts ``bytes`` (the
convention of CUDA's bandwidthTest and nvbandwidth). Timed with CUDA events around each
``copy_(non_blocking=True)`` between a pinned host buffer and a device buffer.

NUMA: each GPU is measured by its own process (multiprocessing, start method "spawn", so nothing of
the parent's CUDA state is inherited). The process pins itself with os.sched_setaffinity to the CPUs
of the GPU's NUMA node -- /sys/bus/pci/devices/<bus id>/numa_node, then
/sys/devices/system/node/node<N>/cpulist, intersected with the CPUs we may use -- BEFORE it touches
CUDA or allocates the pinned buffer, so the buffer's pages are allocated on that node. numa_node -1
(the platform does not say) or a missing file means no binding (cpus_bound null). All processes
start and allocate at once; then the parent asks them to copy one at a time, then all together.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time

import torch

from _conditions import Watch
from _hostwatch import Watch as HostWatch
from _gpu import describe_gpu, gpu_indices, probe_device
from _probe import ProbeFailed, log, run

GIB = 1 << 30
ARG_KEYS = {"device", "bytes", "iters", "mode", "gpus", "attempt"}
MODES = ("each", "all", "both")
READY_TIMEOUT = 180.0  # seconds for a worker to start torch and allocate
RUN_TIMEOUT = 300.0


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


# ---------------------------------------------------------------- worker process (one per GPU)

def time_copies(dst: torch.Tensor, src: torch.Tensor, iters: int, cuda: bool) -> list[float]:
    """Seconds of each of ``iters`` copies src -> dst, after one warm-up copy."""
    dst.copy_(src, non_blocking=True)
    if cuda:
        torch.cuda.synchronize()
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


def worker(conn, device: str, index: int, cpus, nbytes: int, iters: int, barrier) -> None:
    """Bind to ``cpus``, allocate, then serve ("run", together) requests until ("quit", _)."""
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)  # before any CUDA call or host allocation: first touch is local
        cuda = device == "cuda"
        if cuda:
            torch.cuda.set_device(index)
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=cuda)
        host.fill_(0x5A)  # touch every page from this (bound) thread
        dev = torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", index) if cuda else "cpu")
        dev.fill_(0xA5)
        conn.send(("ready", None))
        while True:
            cmd, together = conn.recv()
            if cmd == "quit":
                break
            res = {}
            for name, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
                if together:
                    barrier.wait(timeout=RUN_TIMEOUT)
                res[name] = time_copies(dst, src, iters, cuda)
            conn.send(("ok", res))
    except BaseException as e:  # noqa: BLE001 - the parent reports it
        try:
            if barrier is not None:
                barrier.abort()
            conn.send(("error", f"{type(e).__name__}: {e}".splitlines()[0][:400]))
        except Exception:  # noqa: BLE001
            pass
    finally:
        conn.close()


def receive(conn, index: int, timeout: float):
    if not conn.poll(timeout):
        raise ProbeFailed(f"GPU {index}: worker did not answer within {timeout:.0f} s")
    try:
        kind, payload = conn.recv()
    except EOFError:
        raise ProbeFailed(f"GPU {index}: worker process died (see stderr)") from None
    if kind == "error":
        raise ProbeFailed(f"GPU {index}: {payload}")
    return payload


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
    iters = int(args.get("iters", 10 if device == "cuda" else 3))
    if nbytes < 1 or iters < 1:
        raise ProbeFailed("bytes and iters must be >= 1")
    indices = gpu_indices(device, args.get("gpus"))

    gpus = []
    for i in indices:
        info = describe_gpu(device, i)
        node, cpus = numa_of(info["pci_bus_id"])
        info.update(numa_node=node, cpus_bound=len(cpus) if cpus else None, _cpus=cpus)
        gpus.append(info)
    log("pcie_bandwidth: " + ", ".join(f"GPU {g['index']} numa {g['numa_node']}" for g in gpus))

    t0 = time.perf_counter()
    watch = Watch([g["pci_bus_id"] for g in gpus] if device == "cuda" else []).start()
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(gpus))
    procs, conns = [], []
    host = None
    try:
        for g in gpus:
            parent_end, child_end = ctx.Pipe()
            p = ctx.Process(target=worker, daemon=True,
                            args=(child_end, device, g["index"], g["_cpus"], nbytes, iters, barrier))
            p.start()
            child_end.close()
            procs.append(p)
            conns.append(parent_end)
        for g, c in zip(gpus, conns):
            receive(c, g["index"], READY_TIMEOUT)
        log(f"pcie_bandwidth: {len(gpus)} worker(s) ready after {time.perf_counter() - t0:.1f} s")
        host = HostWatch().start()  # the host's side, around the timed copies (the workers are the probe's own)

        for g in gpus:
            g.update(h2d_gbps=None, d2h_gbps=None, h2d_gbps_max=None, d2h_gbps_max=None,
                     h2d_gbps_all=None, d2h_gbps_all=None)
        if mode in ("each", "both"):
            for g, c in zip(gpus, conns):  # one GPU at a time
                c.send(("run", False))
                res = receive(c, g["index"], RUN_TIMEOUT)
                g["h2d_gbps"], g["h2d_gbps_max"] = summarize(res["h2d"], nbytes)
                g["d2h_gbps"], g["d2h_gbps_max"] = summarize(res["d2h"], nbytes)
        if mode in ("all", "both"):
            for c in conns:
                c.send(("run", True))
            for g, c in zip(gpus, conns):
                res = receive(c, g["index"], RUN_TIMEOUT)
                g["h2d_gbps_all"] = summarize(res["h2d"], nbytes)[0]
                g["d2h_gbps_all"] = summarize(res["d2h"], nbytes)[0]
        for c in conns:
            c.send(("quit", None))
        log(f"pcie_bandwidth: measured after {time.perf_counter() - t0:.1f} s")
    finally:
        watch.stop()
        if host is not None:
            host.stop()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()  # only our own worker, by its handle

    for g in gpus:
        del g["_cpus"]
    totals = {}
    for d in ("h2d", "d2h"):
        vals = [g[f"{d}_gbps_all"] for g in gpus]
        totals[f"{d}_gbps_all_total"] = round(sum(vals), 2) if None not in vals else None
    return {"device": device, "bytes": nbytes, "iters": iters, "mode": mode, **totals, "gpus": gpus,
            "conditions": watch.result(),
            "host_conditions": host.result()}


if __name__ == "__main__":
    run(main)
