"""The host's conditions while the host side of a transfer is measured: which other processes used the CPUs,
and whether the host stalled on memory.

Shipped with the host-side probes (pcie_bandwidth, fio_throughput, storage_to_gpu); standard library only,
Linux /proc. The GPU-side twin is ``_conditions.Watch`` (NVML); this one mirrors its shape: :meth:`Watch.start`,
:meth:`Watch.stop`, :meth:`Watch.result`, a context manager, and it never raises.

What a background thread samples every :data:`INTERVAL_S` seconds (proc(5)):

- ``/proc/stat``, line ``cpu``: the CPU time of the whole host (user, nice, system, irq, softirq, steal are
  busy; idle and iowait are not), in USER_HZ ticks; per interval, the busy share of every online CPU;
- ``/proc/<pid>/stat`` of every process (fields 4-6 ppid, pgrp, session, 14-15 utime and stime in ticks,
  22 starttime), parsed once per sample into ``_proc.Proc`` plus its times;
- ``/proc/pressure/cpu`` and ``/proc/pressure/memory`` (PSI, kernel 4.20+ with CONFIG_PSI, Documentation/
  accounting/psi.rst) where the kernel has them: ``some``/``full`` ``avg10`` (%) and ``total`` (µs stalled);
- ``/proc/meminfo`` ``MemAvailable`` (the least seen).

A process is the probe's own, and never foreign, when it is the probe, one of its descendants (spawned
copy workers, fio and its job processes, which call setsid()), in the probe's process group or session (the
node-side watchdog gives every probe a group of its own; the transport a session of its own), one of the
probe's ancestors (the watchdog, the agent, its shell, sshd or the local controller), or a kernel thread
(kthreadd's children: the block layer's and the page cache's workers, which work for the measurement's own I/O
as much as for anyone's). Every other process's CPU time over the watched window is foreign load.

The rule (decided here, on the node; gpuaccept.judging.conditions.host_disturbances only carries it):

- the foreign processes that each kept at least :data:`FOREIGN_PROC_MIN_CPUS` CPUs busy together used more
  than :data:`FOREIGN_CPU_SHARE` of the host's online CPUs over the window (its mean: the figures of a
  transfer are medians or totals over the window), or
- memory pressure: some task stalled on memory for more than :data:`MEM_PSI_SOME_SHARE` of the window
  (PSI memory ``some``, from its ``total`` counter; where only ``avg10`` is there, its largest sample).

Each is one entry of ``disturbed``. CPU pressure, the host's busy share and MemAvailable are recorded, not
judged: the probe's own threads make them too.

Document (``host_conditions`` of the probe's document)::

    {"state": "ok" | "unavailable: <why>", "interval_s", "seconds", "samples", "own_pid", "cpus",
     "busy_share_max", "busy_share", "foreign_share", "foreign_share_max", "loads_share", "mem_available_min_bytes",
     "psi": {"cpu": {"some_avg10_max", "some_share", "full_share"}, "memory": {...}} (only those the kernel has),
     "foreign": [{"pid", "name", "cpu_share", "cpus"}],        # the largest :data:`FOREIGN_LISTED`, share >= 1 %
     "limit": {"foreign_cpu_share", "mem_psi_some_share", "source"},
     "disturbed": [{"line": "pid 4711 (stress-ng), 38 % of the CPUs; ...", "rule": "foreign_cpu" | "memory_psi",
                    "foreign": [...], "busy_share", "foreign_share", ...}]}

``foreign_share``: every foreign process; ``loads_share``: those that count (the rule's sum); ``foreign_share_max``:
every foreign process in the busiest interval. Shares are fractions of all online CPUs (0.38 = 38 %): ``cpu_share`` of a process = its CPU seconds in the
window / (window seconds x CPUs); ``cpus`` = the same as a number of CPUs kept busy.

Cost, measured on the 2-core CI machine (~180 processes): one sample reads every /proc/<pid>/stat once,
~2.5 ms, i.e. ~1 % of one CPU at 0.25 s; the watch itself is the probe's own.
"""
from __future__ import annotations

import os
import threading
import time

from _proc import Proc

#: seconds between samples (the GPU watch samples NVML every 0.2 s; /proc scans cost more, see above)
INTERVAL_S = 0.25
#: the shortest window judged, seconds: per-process CPU time moves in USER_HZ ticks (10 ms, USER_HZ = 100 on
#: Linux), so half a second reads a share to about 2 % of one CPU, and the bound below (a quarter of all CPUs:
#: 25 ticks in 0.5 s on a 2-CPU host) to about 4 % of itself. :meth:`Watch.stop` waits until the window is this
#: long (a CPU-path transfer of a few MiB lasts milliseconds; one GPU's timed PCIe copies about 0.3 s on an H200)
MIN_WINDOW_S = 0.5
#: foreign processes together above this share of all online CPUs, over the window, disturb the
#: measurement. gpuaccept's bound (2026-12-04): a host-to-device copy is driven by one pinned
#: thread per GPU and fio by a few jobs; a quarter of the host's CPUs busy with other work (28 cores of a
#: 112-core node) contends for memory bandwidth and the measurement's cores, while the daemons of an idle
#: node stay under 1 %. On a 2-CPU machine it is half a CPU.
FOREIGN_CPU_SHARE = 0.25
#: the probe's environment variable that sets another bound than :data:`FOREIGN_CPU_SHARE` for a run (a share in
#: (0, 1]; 1 never judges CPU share): the controller hands its own value to every probe
#: (gpuaccept.runner.host.probe_env), for nodes whose CPUs are shared with known work, such as a CI machine
#: running several test runs on one set of CPUs
SHARE_ENV = "GPUACCEPT_HOST_BUSY_SHARE"


def cpu_share_limit() -> tuple[float, str]:
    """The bound on foreign CPU share for this probe and where it comes from: :data:`SHARE_ENV` when it holds a
    number in (0, 1], else :data:`FOREIGN_CPU_SHARE`."""
    raw = os.environ.get(SHARE_ENV)
    try:
        v = float(raw) if raw else None
    except ValueError:
        v = None
    if v is not None and 0 < v <= 1:
        return v, f"{SHARE_ENV}={raw} in the controller's environment"
    return FOREIGN_CPU_SHARE, "FOREIGN_CPU_SHARE"
#: memory PSI ``some`` above this share of the window disturbs the measurement: tasks waited on reclaim or
#: swap for more than a tenth of the time. The kernel's own example trigger (Documentation/accounting/psi.rst,
#: "some 150000 1000000": 150 ms in 1 s) is of this order; an idle node reads 0.
MEM_PSI_SOME_SHARE = 0.10
#: a foreign process counts toward :data:`FOREIGN_CPU_SHARE` only when it kept at least this many CPUs busy
#: over the window (a quarter of one CPU): a transfer is disturbed by a program that loads CPUs and memory,
#: not by the background of a node (daemons, an agent, an SSH session, a controller's threads), each of
#: which stays well under it; measured on the 2-CPU CI machine, ten such processes read 0.05-0.12 CPU each.
FOREIGN_PROC_MIN_CPUS = 0.25
#: foreign processes listed in the document (largest first), and the least share listed
FOREIGN_LISTED = 10
FOREIGN_LISTED_MIN = 0.01
SOURCE = ("gpuaccept/probes/_hostwatch.py FOREIGN_CPU_SHARE and MEM_PSI_SOME_SHARE (gpuaccept's bounds, "
          "2026-12-04; PSI: Documentation/accounting/psi.rst)")

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PSI = ("cpu", "memory")


def read_stat(pid: int) -> tuple[Proc, int, int, str] | None:
    """``(Proc, cpu ticks = utime + stime, starttime ticks, name)`` of ``pid`` from one read of
    /proc/<pid>/stat (``_proc.stat`` reads fields 3-6 only; the watch needs 14, 15 and 22 of the same line);
    None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
        head, _, rest = raw.rpartition(b")")
        x = rest.split()
        return (Proc(pid, x[0].decode(), int(x[1]), int(x[2]), int(x[3])), int(x[11]) + int(x[12]), int(x[19]),
                head.partition(b"(")[2].decode("utf-8", "replace"))
    except (OSError, IndexError, ValueError):
        return None


def cpu_times() -> tuple[int, int, int]:
    """``(busy ticks, total ticks, online CPUs)`` of the host from /proc/stat: busy = user + nice + system +
    irq + softirq + steal; total adds idle and iowait (guest time is already inside user)."""
    with open("/proc/stat", encoding="ascii", errors="replace") as f:
        lines = f.read().splitlines()
    v = [int(t) for t in lines[0].split()[1:9]] + [0] * 8
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    busy = user + nice + system + irq + softirq + steal
    cpus = sum(1 for ln in lines[1:] if ln.startswith("cpu") and ln[3:4].isdigit())
    return busy, busy + idle + iowait, max(1, cpus)


def read_psi(name: str) -> dict | None:
    """``{"some": {"avg10": %, "total": µs}, "full": {...}}`` of /proc/pressure/<name>, None where absent."""
    try:
        with open(f"/proc/pressure/{name}", encoding="ascii") as f:
            text = f.read()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        kind, *pairs = line.split()
        kv = dict(p.split("=", 1) for p in pairs if "=" in p)
        out[kind] = {"avg10": float(kv.get("avg10", 0)), "total": int(kv.get("total", 0))}
    return out


def mem_available() -> int | None:
    """MemAvailable of /proc/meminfo, bytes (None where the kernel lacks it, before 3.14)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def ancestors(pid: int) -> set[int]:
    """The parent chain of ``pid`` up to (not including) pid 1."""
    out: set[int] = set()
    while pid > 1 and len(out) < 128:
        s = read_stat(pid)
        if s is None:
            break
        pid = s[0].ppid
        if pid > 1:
            out.add(pid)
    return out


def describe(foreign: list[dict], limit: int = 4) -> str:
    """``"pid 4711 (stress-ng), 38 % of the CPUs; pid 12 (x), 5 % of the CPUs"`` (at most ``limit``)."""
    parts = [f"pid {f['pid']} ({f['name'] or '?'}), {f['cpu_share'] * 100:.0f} % of the CPUs" for f in foreign[:limit]]
    more = len(foreign) - limit
    return "; ".join(parts) + (f"; +{more} more" if more > 0 else "")


def judge(foreign: list[dict], foreign_share: float, cpus: int, seconds: float, busy_share: float | None,
          mem_some: float | None, mem_source: str = "total", listed: list[dict] | None = None) -> list[dict]:
    """The ``disturbed`` entries of a window (the rule in the module docstring; pure): ``foreign`` the foreign
    processes that count (each at least :data:`FOREIGN_PROC_MIN_CPUS`), largest first, ``foreign_share`` their
    sum (fraction of ``cpus`` online CPUs over ``seconds``), ``busy_share`` the host's, ``mem_some`` the memory
    PSI ``some`` share (None: no PSI); ``listed``: every foreign process listed (named beside memory pressure)."""
    out = []
    listed = foreign if listed is None else listed
    cpu_limit = cpu_share_limit()[0]
    if foreign_share > cpu_limit:
        out.append({"line": f"{describe(foreign)} (other processes together {foreign_share * 100:.0f} % of the "
                            f"{cpus} CPUs over {seconds:.1f} s; limit {cpu_limit * 100:.0f} %)",
                    "rule": "foreign_cpu", "foreign": foreign[:FOREIGN_LISTED], "foreign_share": round(foreign_share, 3),
                    "busy_share": busy_share, "cpus": cpus, "limit": cpu_limit})
    if mem_some is not None and mem_some > MEM_PSI_SOME_SHARE:
        what = "of the window" if mem_source == "total" else "avg10"
        out.append({"line": f"memory pressure: tasks stalled on memory {mem_some * 100:.0f} % {what} (PSI memory "
                            f"some; limit {MEM_PSI_SOME_SHARE * 100:.0f} %)"
                            + (f"; {describe(listed, 2)}" if listed else ""),
                    "rule": "memory_psi", "foreign": listed[:FOREIGN_LISTED], "mem_psi_some_share": round(mem_some, 3),
                    "busy_share": busy_share, "limit": MEM_PSI_SOME_SHARE})
    return out


class Watch:
    """Samples the host from :meth:`start` to :meth:`stop` (see the module docstring); :meth:`result` is the
    ``host_conditions`` document. Never raises: an unreadable /proc or any error makes ``state``
    ``"unavailable: <why>"`` and the figures stand, unwatched."""

    def __init__(self, interval_s: float = INTERVAL_S, min_window_s: float = MIN_WINDOW_S):
        self.interval_s, self.min_window_s = interval_s, min_window_s
        self.me = os.getpid()
        self.state = "not started"
        self.samples = 0
        self._own_keys: dict[tuple[int, int], bool] = {}
        self._first: dict[tuple[int, int], int] = {}   # (pid, starttime) -> ticks when first seen
        self._last: dict[tuple[int, int], int] = {}
        self._names: dict[tuple[int, int], str] = {}
        self._busy_max = 0.0
        self._foreign_max = 0.0
        self._prev_cpu: tuple[int, int, int] | None = None
        self._prev_foreign = 0
        self._cpu0: tuple[int, int, int] | None = None
        self._psi0: dict = {}
        self._psi1: dict = {}
        self._psi_avg10: dict = {}
        self._mem_min: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = self._t1 = None

    # -- whose is a process ----------------------------------------------------------------------------
    def _is_own(self, p: Proc, key, procs: dict) -> bool:
        own = self._own_keys.get(key)
        if own is not None:
            return own
        own = (p.pid == self.me or p.pid in self._anc or p.pgid == self._pgid or p.sid == self._sid
               or p.pid == 2 or p.ppid == 2)
        pid, hops = p.ppid, 0
        while not own and pid > 1 and hops < 64:
            if pid == self.me:
                own = True
            parent = procs.get(pid)
            pid, hops = (parent[0].ppid if parent else 0), hops + 1
        self._own_keys[key] = own
        return own

    # -- sampling -------------------------------------------------------------------------------------------
    def start(self) -> "Watch":
        try:
            if not os.path.exists("/proc/self/stat"):
                raise OSError("no /proc on this node")
            self._pgid, self._sid = os.getpgid(0), os.getsid(0)
            self._anc = ancestors(self.me)
            self._t0 = time.monotonic()
            self._cpu0 = self._prev_cpu = cpu_times()
            self._psi0 = {n: read_psi(n) for n in PSI}
            self._scan(first=True)
        except Exception as e:  # noqa: BLE001 - the measurement goes on, unwatched
            self.state = f"unavailable: {type(e).__name__}: {e}"[:300]
            return self
        self.state = "ok"
        self._thread = threading.Thread(target=self._run, daemon=True, name="hostwatch")
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval_s):
                self.sample()
        except Exception as e:  # noqa: BLE001
            self.state = f"unavailable: {type(e).__name__}: {e}"[:300]

    def _scan(self, first: bool = False) -> int:
        """Read every process once; update the per-process ticks; return the foreign ticks so far."""
        procs = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                s = read_stat(int(entry))
                if s is not None:
                    procs[s[0].pid] = s
        for pid, (p, ticks, start, name) in procs.items():
            key = (pid, start)
            if self._is_own(p, key, procs):
                continue
            if key not in self._first:
                # a process born after the window began: all its ticks are the window's
                self._first[key] = ticks if first else 0
                self._names[key] = name
            self._last[key] = ticks
        return sum(self._last[k] - self._first[k] for k in self._last)

    def sample(self) -> None:
        """One sample: host CPU, every process, PSI, MemAvailable."""
        foreign = self._scan()
        cpu = cpu_times()
        d_busy, d_total = cpu[0] - self._prev_cpu[0], cpu[1] - self._prev_cpu[1]
        if d_total > 0:
            self._busy_max = max(self._busy_max, d_busy / d_total)
            # ticks of all CPUs in the interval = d_total; foreign share of them
            self._foreign_max = max(self._foreign_max, (foreign - self._prev_foreign) / d_total)
        self._prev_cpu, self._prev_foreign = cpu, foreign
        for n in PSI:
            psi = read_psi(n)
            if psi is not None:
                self._psi1[n] = psi
                self._psi_avg10[n] = max(self._psi_avg10.get(n, 0.0), psi.get("some", {}).get("avg10", 0.0))
        m = mem_available()
        if m is not None:
            self._mem_min = m if self._mem_min is None else min(self._mem_min, m)
        self.samples += 1

    def stop(self) -> "Watch":
        """End the window (at least :data:`MIN_WINDOW_S` after :meth:`start`) with a last sample."""
        if self._thread is None:
            return self
        try:
            left = self.min_window_s - (time.monotonic() - self._t0)
            if left > 0:
                time.sleep(left)
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None
            if self.state == "ok":
                self.sample()
        except Exception as e:  # noqa: BLE001
            self.state = f"unavailable: {type(e).__name__}: {e}"[:300]
        self._t1 = time.monotonic()
        return self

    # -- the document -------------------------------------------------------------------------------------
    def _psi_doc(self, seconds: float) -> dict:
        out = {}
        for n in PSI:
            a, b = self._psi0.get(n), self._psi1.get(n)
            if not a or not b:
                continue
            out[n] = {"some_avg10_max": self._psi_avg10.get(n),
                      **{f"{k}_share": round(max(0, b[k]["total"] - a[k]["total"]) / 1e6 / seconds, 4)
                         for k in ("some", "full") if k in a and k in b and seconds > 0}}
        return out

    def result(self) -> dict:
        """The ``host_conditions`` document (module docstring)."""
        base = {"state": self.state, "interval_s": self.interval_s, "own_pid": self.me,
                "limit": {"foreign_cpu_share": cpu_share_limit()[0], "mem_psi_some_share": MEM_PSI_SOME_SHARE,
                          "source": SOURCE, "foreign_cpu_share_from": cpu_share_limit()[1]}}
        if self.state != "ok":
            return {**base, "disturbed": []}
        try:
            return {**base, **self._judged()}
        except Exception as e:  # noqa: BLE001
            return {**base, "state": f"unavailable: {type(e).__name__}: {e}"[:300], "disturbed": []}

    def _judged(self) -> dict:
        seconds = (self._t1 or time.monotonic()) - self._t0
        cpus = self._prev_cpu[2]
        d_total = self._prev_cpu[1] - self._cpu0[1]
        # the window's CPU ticks from /proc/stat (all CPUs), else wall time x CPUs
        capacity = d_total if d_total > 0 else seconds * CLK_TCK * cpus
        busy = round((self._prev_cpu[0] - self._cpu0[0]) / d_total, 3) if d_total > 0 else None
        procs = []
        for k, last in self._last.items():
            used = last - self._first[k]
            if used > 0:
                procs.append({"pid": k[0], "name": self._names.get(k), "cpu_share": round(used / capacity, 3),
                              "cpus": round(used / CLK_TCK / seconds, 2) if seconds > 0 else None})
        procs.sort(key=lambda f: -f["cpu_share"])
        share = sum(f["cpu_share"] for f in procs)
        loads = [f for f in procs if (f["cpus"] or 0) >= FOREIGN_PROC_MIN_CPUS]
        listed = [f for f in procs if f["cpu_share"] >= FOREIGN_LISTED_MIN][:FOREIGN_LISTED]
        psi = self._psi_doc(seconds)
        mem = psi.get("memory") or {}
        mem_some, src = (mem["some_share"], "total") if "some_share" in mem else (
            (mem["some_avg10_max"] / 100, "avg10") if mem.get("some_avg10_max") is not None else (None, None))
        return {"seconds": round(seconds, 3), "samples": self.samples, "cpus": cpus,
                "busy_share_max": round(self._busy_max, 3), "busy_share": busy,
                "foreign_share": round(share, 3), "foreign_share_max": round(self._foreign_max, 3),
                "mem_available_min_bytes": self._mem_min, "psi": psi, "foreign": listed,
                "loads_share": round(sum(f["cpu_share"] for f in loads), 3),
                "disturbed": judge(loads, sum(f["cpu_share"] for f in loads), cpus, seconds, busy, mem_some,
                                   src or "total", listed)}

    def __enter__(self) -> "Watch":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def watched(fn):
    """``(fn(), watch)``: ``fn`` run while :class:`Watch` samples the host."""
    w = Watch().start()
    try:
        return fn(), w
    finally:
        w.stop()
