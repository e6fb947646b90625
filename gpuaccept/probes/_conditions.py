"""The conditions of a measurement: which other processes used the GPUs while a probe loaded them.

Shipped with the GPU-loading probes (hbm_bandwidth, matmul_tflops, pcie_bandwidth, launch_overhead,
p2p_bandwidth, pcie_link); standard library, pynvml imported when the watch starts. A background thread
samples NVML every :data:`INTERVAL_S` seconds on each watched GPU (by PCI bus id):

- ``nvmlDeviceGetComputeRunningProcesses``: the processes holding a compute context, with their memory;
- ``nvmlDeviceGetProcessUtilization`` (where NVML offers it): each process's SM and memory utilization, %,
  over the samples since the last call.

A process is the probe's own when it is the probe or one of its descendants (``/proc/<pid>/stat`` parent
chain: pcie_bandwidth's spawned workers, NCCL ranks); every other pid is foreign. NVML reports pids of the
namespace the driver sees: where the probe's own pid never appears while it holds a context (a container
with its own pid namespace), processes cannot be told apart and ``own_seen`` says so.

Document (``conditions`` of the probe's document)::

    {"state": "ok" | "unavailable: <why>" | "not sampled: <why>", "interval_s", "seconds", "own_pid",
     "own_seen": bool, "gpus": [{"pci_bus_id", "nvml_index", "samples",
        "foreign": [{"pid", "name", "visible": bool, "used_memory_bytes", "sm_util_pct_max",
                     "mem_util_pct_max", "first_s", "last_s", "samples"}],
        "nvml_latency_s": {"calls", "mean_s", "max_s", "slowest_call"}}]}

``nvml_latency_s``: the sampler's own NVML calls on that GPU timed while the probe loaded it (``time.perf_counter``
around each call, an error answer included), in the shape of gpu_inventory's idle timing, so that one judge
(gpuaccept/judging/driver.py ``latency``) reads NVML's latency at idle and under load.

Measured on an H200 (driver 580.159.04, 2026-12-01): one sample of both calls costs 2.4 ms; a foreign bf16
matmul loop reads 100% SM, an idle process holding a context is listed with its memory and no utilization.
"""
from __future__ import annotations

import os
import threading
import time

#: seconds between samples: a foreign load of a quarter second is seen, at ~1% of one CPU core
INTERVAL_S = 0.2


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` from /proc/<pid>/stat (field 4, after the command name), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return int(f.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def is_own(pid: int, me: int) -> bool:
    """True when ``pid`` is ``me`` or a descendant of it (walking parents to pid 1)."""
    seen = 0
    while pid and pid > 1 and seen < 64:
        if pid == me:
            return True
        pid = parent_pid(pid) or 0
        seen += 1
    return False


def process_name(pid: int) -> str | None:
    """``/proc/<pid>/comm``, or None when the pid is not visible here."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip() or None
    except OSError:
        return None


class Watch:
    """Samples the processes on the GPUs ``bus_ids`` (NVML-style PCI bus ids; None entries skipped; None:
    every GPU NVML lists, for a probe whose ranks pick their GPUs) from :meth:`start` to :meth:`stop`;
    :meth:`result` is the document above. Never raises: NVML missing or failing makes ``state`` say why."""

    def __init__(self, bus_ids, interval_s: float = INTERVAL_S):
        self.every = bus_ids is None
        self.bus_ids = [] if bus_ids is None else [b for b in bus_ids if b]
        self.interval_s = interval_s
        self.me = os.getpid()
        self.state = "not started"
        self.own_seen = False
        self.gpus: list[dict] = []
        self._handles: list = []
        self._own: dict[int, bool] = {}
        self._last_ts: list[int] = []
        self._latency: list[list] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.time()
        self._t1: float | None = None

    def start(self) -> "Watch":
        if not self.bus_ids and not self.every:
            self.state = "not sampled: no GPU bus id (cpu device)"
            return self
        try:
            import pynvml as nv
            nv.nvmlInit()
            self.nv = nv
            if self.every:
                self.bus_ids = [nv.nvmlDeviceGetPciInfo(nv.nvmlDeviceGetHandleByIndex(i)).busId
                                for i in range(nv.nvmlDeviceGetCount())]
                self.bus_ids = [b.decode() if isinstance(b, bytes) else b for b in self.bus_ids]
            for bus in self.bus_ids:
                h = nv.nvmlDeviceGetHandleByPciBusId(bus)
                try:
                    idx = int(nv.nvmlDeviceGetIndex(h))
                except Exception:  # noqa: BLE001 - the index is a label only
                    idx = None
                self._handles.append(h)
                self._last_ts.append(0)
                self._latency.append([0, 0.0, 0.0, None])  # calls, seconds, slowest seconds, slowest call
                self.gpus.append({"pci_bus_id": bus, "nvml_index": idx, "samples": 0, "foreign": []})
        except Exception as e:  # noqa: BLE001 - no pynvml, no driver: the figures stand, unwatched
            self.state = f"unavailable: {type(e).__name__}: {e}"[:300]
            return self
        self.state = "ok"
        self._t0 = time.time()
        self._thread = threading.Thread(target=self._run, daemon=True, name="conditions")
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)
        self.sample()  # the last instant of the measurement too

    def _foreign(self, slot: int, pid: int) -> dict | None:
        own = self._own.get(pid)
        if own is None:
            own = self._own[pid] = is_own(pid, self.me)
        if own:
            self.own_seen = True
            return None
        for f in self.gpus[slot]["foreign"]:
            if f["pid"] == pid:
                return f
        name = process_name(pid)
        f = {"pid": pid, "name": name, "visible": name is not None, "used_memory_bytes": None,
             "sm_util_pct_max": None, "mem_util_pct_max": None, "first_s": None, "last_s": None, "samples": 0}
        self.gpus[slot]["foreign"].append(f)
        return f

    def _timed(self, slot: int, name: str, *args):
        """``nv.<name>(*args)`` timed into GPU ``slot``'s latency; an exception is raised after it is timed."""
        t0 = time.perf_counter()
        try:
            return getattr(self.nv, name)(*args)
        finally:
            dt = time.perf_counter() - t0
            lat = self._latency[slot]
            lat[0] += 1
            lat[1] += dt
            if dt > lat[2]:
                lat[2], lat[3] = dt, name

    def sample(self) -> None:
        """One sample of every watched GPU (errors of one call leave that call out)."""
        now = round(time.time() - self._t0, 3)
        for slot, h in enumerate(self._handles):
            self.gpus[slot]["samples"] += 1
            try:
                procs = self._timed(slot, "nvmlDeviceGetComputeRunningProcesses", h)
            except Exception:  # noqa: BLE001
                procs = []
            for p in procs:
                f = self._foreign(slot, int(p.pid))
                if f is None:
                    continue
                used = getattr(p, "usedGpuMemory", None)
                if isinstance(used, int):
                    f["used_memory_bytes"] = max(f["used_memory_bytes"] or 0, used)
                f["first_s"] = now if f["first_s"] is None else f["first_s"]
                f["last_s"], f["samples"] = now, f["samples"] + 1
            try:
                utils = self._timed(slot, "nvmlDeviceGetProcessUtilization", h, self._last_ts[slot])
            except Exception:  # noqa: BLE001 - NOT_FOUND when no process ran since the last call
                utils = []
            for u in utils:
                self._last_ts[slot] = max(self._last_ts[slot], int(u.timeStamp))
                f = self._foreign(slot, int(u.pid))
                if f is None:
                    continue
                f["sm_util_pct_max"] = max(f["sm_util_pct_max"] or 0, int(u.smUtil))
                f["mem_util_pct_max"] = max(f["mem_util_pct_max"] or 0, int(u.memUtil))
                f["first_s"] = now if f["first_s"] is None else f["first_s"]
                f["last_s"] = now

    def stop(self) -> "Watch":
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None
            self._t1 = time.time()
        return self

    def result(self) -> dict:
        """The conditions document (see the module docstring)."""
        for g, (n, total, worst, call) in zip(self.gpus, self._latency):
            if n:
                g["nvml_latency_s"] = {"calls": n, "mean_s": round(total / n, 6), "max_s": round(worst, 6),
                                       "slowest_call": call}
        return {"state": self.state, "interval_s": self.interval_s,
                "seconds": round((self._t1 or time.time()) - self._t0, 3), "own_pid": self.me,
                "own_seen": self.own_seen, "gpus": self.gpus}

    def __enter__(self) -> "Watch":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def watched(bus_ids, fn):
    """``(fn(), conditions)``: ``fn`` run while :class:`Watch` samples ``bus_ids``."""
    w = Watch(bus_ids).start()
    try:
        return fn(), w
    finally:
        w.stop()
