"""The conditions of a measurement, judged: was the GPU the probe's alone while it measured? Pure.

A GPU-loading probe samples from NVML which processes hold contexts on each GPU it loads, and how much of
the GPU they use (gpuaccept/probes/_conditions.py, the document's ``conditions``). A figure taken while a
process other than the probe used that GPU is not a hardware verdict: the test is an ERROR "disturbed: pid
4711 (python3) used GPU 0 during the measurement", its figures kept (gpuaccept.judging.recorder). No foreign
process, no throttle reason, and still slow: that is the card.

Where the probe's own pid never appeared among NVML's processes (another pid namespace: NVML's pids are the
driver's), a process whose pid is not visible on the node cannot be told from the probe's own: it is recorded,
not judged ("own_seen" false). A document without ``conditions`` (a probe of an older gpuaccept, a replayed
capture) is recorded as "not sampled".
"""
from __future__ import annotations

from gpuaccept.judging.readings import bus_key

MIB = 2**20


def state(doc: dict) -> str:
    """The GPU sampler's state as the probe wrote it (``"ok"``, ``"unavailable: ..."``); for a document without GPU
    conditions, the host watch's (``"host only: ok"``, a probe that loads no GPU: fio) or ``"not sampled (the
    probe document has no conditions)"``."""
    c = (doc or {}).get("conditions")
    if isinstance(c, dict):
        return str(c.get("state"))
    h = (doc or {}).get("host_conditions")
    if isinstance(h, dict):
        return f"host only: {h.get('state')}"
    return "not sampled (the probe document has no conditions)"


def _foreign(c: dict, g: dict) -> list[dict]:
    """The foreign processes of one watched GPU that count: all of them where the probe saw its own pid (or
    the pid is visible on the node), else none (cannot be told apart)."""
    return [f for f in g.get("foreign") or [] if isinstance(f, dict)
            and (c.get("own_seen") or f.get("visible"))]


def describe(f: dict, pid: bool = True) -> str:
    """``"pid 4711 (python3), SM up to 100%, 874 MiB, seen 0-2.1 s into the probe"`` of one foreign-process
    entry (``pid`` False: without its ``pid ... (name)`` head)."""
    parts = []
    if isinstance(f.get("sm_util_pct_max"), int):
        parts.append(f"SM up to {f['sm_util_pct_max']}%")
    elif f.get("samples"):
        parts.append("held a context, no SM use sampled")
    if isinstance(f.get("used_memory_bytes"), int) and f["used_memory_bytes"]:
        parts.append(f"{f['used_memory_bytes'] / MIB:.0f} MiB")
    if isinstance(f.get("first_s"), (int, float)):
        parts.append(f"seen {f['first_s']:g}-{f.get('last_s', f['first_s']):g} s into the probe")
    head = f"pid {f.get('pid')} ({f.get('name') or '?'})"
    return (head + (f", {', '.join(parts)}" if parts else "")) if pid else ", ".join(parts)


def disturbances(doc: dict, nvml_gpus: list[dict]) -> list[tuple[int | None, str]]:
    """``[(NVML index, "disturbed: pid 4711 (python3) used GPU 0 during the measurement (SM up to 100%, ...)")]``
    for every watched GPU another process used, matched to ``nvml_gpus`` by PCI bus id (the watch's own NVML
    index when the bus id matches none). ``[]`` when nothing was sampled."""
    c = (doc or {}).get("conditions")
    if not isinstance(c, dict):
        return []
    by_bus = {bus_key(g.get("pci_bus_id")): g.get("index") for g in nvml_gpus or [] if isinstance(g, dict)}
    out = []
    for g in c.get("gpus") or []:
        procs = _foreign(c, g)
        if not procs:
            continue
        idx = by_bus.get(bus_key(g.get("pci_bus_id")), g.get("nvml_index"))
        who = describe(procs[0], pid=False) if len(procs) == 1 else \
            "; ".join(describe(f) for f in procs[:4]) + (f"; +{len(procs) - 4} more" if len(procs) > 4 else "")
        pids = ", ".join(f"pid {f.get('pid')} ({f.get('name') or '?'})" for f in procs[:4])
        out.append((idx, f"disturbed: {pids} used GPU {idx} during the measurement" + (f" ({who})" if who else "")
                         + ": the figures are kept, not judged"))
    return out


def latencies(doc: dict, nvml_gpus: list[dict]) -> list[tuple[int | None, dict]]:
    """``[(NVML index, {"calls", "mean_s", "max_s", "slowest_call"})]``: the sampler's NVML call timing per watched
    GPU while the probe loaded it (matched to ``nvml_gpus`` by PCI bus id, as :func:`disturbances`); ``[]`` when
    nothing was sampled or the probe is older than the timing."""
    c = (doc or {}).get("conditions")
    if not isinstance(c, dict):
        return []
    by_bus = {bus_key(g.get("pci_bus_id")): g.get("index") for g in nvml_gpus or [] if isinstance(g, dict)}
    return [(by_bus.get(bus_key(g.get("pci_bus_id")), g.get("nvml_index")), g["nvml_latency_s"])
            for g in c.get("gpus") or [] if isinstance(g, dict) and isinstance(g.get("nvml_latency_s"), dict)]


def summary(doc: dict) -> dict:
    """What results.json keeps of the conditions: ``{"interval_s", "seconds", "own_seen", "foreign":
    [{"gpu_bus_id", "pid", "name", "sm_util_pct_max", "used_memory_bytes"}]}`` (``{}`` when not sampled)."""
    c = (doc or {}).get("conditions")
    if not isinstance(c, dict):
        return {}
    foreign = [{"pci_bus_id": g.get("pci_bus_id"), **{k: f.get(k) for k in ("pid", "name", "visible",
               "sm_util_pct_max", "used_memory_bytes", "first_s", "last_s")}}
               for g in c.get("gpus") or [] for f in g.get("foreign") or [] if isinstance(f, dict)]
    return {"interval_s": c.get("interval_s"), "seconds": c.get("seconds"), "own_seen": c.get("own_seen"),
            "samples": sum(int(g.get("samples") or 0) for g in c.get("gpus") or []), "foreign": foreign}


def host_disturbances(doc: dict) -> list[tuple[str, dict]] | None:
    """What the probe's host watch (its document's ``host_conditions``) saw while the host side of a transfer
    was measured: None when the host was not sampled (no ``host_conditions``, or its ``state`` is not "ok");
    else one ``(line, evidence)`` per disturbance, ``[]`` for a quiet host. A line reads ``"disturbed: host
    busy (pid 4711 stress-ng, 38 % of the CPUs) ...: the figures are kept, not judged"``; ``evidence`` is
    ``{"foreign": [{"pid", "name", "cpu_share"}], "busy_share", ...}`` as the probe wrote them. The probe decides
    what counts as busy (its ``disturbed`` list, with the limit it used); this only carries it."""
    h = (doc or {}).get("host_conditions")
    if not isinstance(h, dict) or h.get("state") != "ok":
        return None
    out = []
    for d in h.get("disturbed") or []:
        if isinstance(d, dict) and isinstance(d.get("line"), str):
            out.append((f"disturbed: host busy: {d['line']}: the figures are kept, not judged",
                        {k: v for k, v in d.items() if k != "line"}))
    return out
