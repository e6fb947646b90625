"""Link error counters read on the node: NVLink (NVML) and InfiniBand/RoCE ports (sysfs). Shared by the
``link_counters`` probe (one snapshot, taken before and after a layer's load) and the probes that read them
around their own load (``nccl_allreduce``, ``rdma`` loopbacks). Facts only; the deltas are judged on the
controller (gpuaccept/judging/linkcounters.py).

:func:`snapshot` returns::

    {"read_at": float,                      # Unix time on the node (s), for the window between two snapshots
     "nvlink": {"gpus": [{"index", "pci_bus_id",
                          "links": [{"link", "errors": {"replay", "recovery", "crc_flit", "crc_data"}}]}]}
               | {"unavailable": str}       # no pynvml / no driver / no GPU: not a failure of the probe
               | {"unresponsive": {...}},   # an NVML call past its deadline (_deadline.run_nvml)
     "ib": {"ports": [{"device", "port", "link_layer", "state", "phys_state", "rate",
                       "counters": {name: int | None},     # <port>/counters/<name>: IB PortCounters
                       "hw_counters": {name: int}}]}       # <port>/hw_counters/*, where the driver has them
           | {"unavailable": str}}          # no /sys/class/infiniband

NVLink: only links NVML calls active (nvmlDeviceGetNvLinkState = NVML_FEATURE_ENABLED) are read, with
nvmlDeviceGetNvLinkErrorCounter for NVML_NVLINK_ERROR_DL_REPLAY (0), _RECOVERY (1), _CRC_FLIT (2), _CRC_DATA (3)
(nvml.h nvmlNvLinkErrorCounter_t); the calls run in a forked child under per-call deadlines (_deadline.py), so
a driver that stops answering is reported, never a hang.
InfiniBand: ``<sysfs>/class/infiniband/<dev>/ports/<n>/counters/<name>`` (the IBA PortCounters attribute the
kernel's ib_core exposes: drivers/infiniband/core/sysfs.c) and ``hw_counters/<name>`` (driver counters, e.g.
mlx5's). Every file of ``counters/`` is read (a counter that does not parse as an integer is None). Standard
library (+ pynvml in the child).
"""
from __future__ import annotations

import os
import time

try:
    import _deadline
    from _nvml import call, is_error, text
    from _sysfs import read_text
except ImportError:  # imported as gpuaccept.probes._linkcounters (nccl_allreduce's pure functions under test)
    from . import _deadline
    from ._nvml import call, is_error, text
    from ._sysfs import read_text

#: nvmlNvLinkErrorCounter_t (nvml.h): NVML_NVLINK_ERROR_DL_*
NVLINK_ERROR_COUNTERS = (("replay", 0), ("recovery", 1), ("crc_flit", 2), ("crc_data", 3))
_NVML_FEATURE_ENABLED = 1
_NVML_ERROR_INVALID_ARGUMENT = 2
_NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS (nvml.h, Hopper/Blackwell: 18)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _numbered(names) -> list[str]:
    return sorted(names, key=lambda s: (0, int(s)) if s.isdigit() else (1, s))


def ib_counters(sysfs: str = "/sys") -> dict:
    """Every InfiniBand/RoCE port's state and error counters under ``<sysfs>/class/infiniband`` (see the module
    docstring); ``{"unavailable": "no InfiniBand/RoCE device ..."}`` when there is none."""
    base = os.path.join(sysfs, "class", "infiniband")
    if not os.path.isdir(base) or not os.listdir(base):
        return {"unavailable": f"no InfiniBand/RoCE device ({base} absent or empty)"}
    ports = []
    for dev in sorted(os.listdir(base)):
        pdir = os.path.join(base, dev, "ports")
        for port in _numbered(os.listdir(pdir)) if os.path.isdir(pdir) else []:
            d = os.path.join(pdir, port)
            rec = {"device": dev, "port": int(port) if port.isdigit() else port,
                   "link_layer": read_text(f"{d}/link_layer"), "state": read_text(f"{d}/state"),
                   "phys_state": read_text(f"{d}/phys_state"), "rate": read_text(f"{d}/rate"), "counters": {},
                   "hw_counters": {}}
            for sub in ("counters", "hw_counters"):
                cdir = os.path.join(d, sub)
                for name in sorted(os.listdir(cdir)) if os.path.isdir(cdir) else []:
                    v = _int(read_text(os.path.join(cdir, name)))
                    if sub == "counters" or v is not None:
                        rec[sub][name] = v
            ports.append(rec)
    return {"ports": ports}


def _nvlink_body(mark, log) -> dict:
    """In the NVML child (_deadline.run_nvml): the error counters of every active link of every GPU."""
    try:
        import pynvml
    except ImportError:
        return {"unavailable": "pynvml (nvidia-ml-py) not installed"}
    nv = _deadline.Traced(pynvml, mark)
    try:
        nv.nvmlInit()
    except Exception as e:  # NVMLError: no driver (12), driver not loaded (9), ...
        return {"unavailable": f"NVML unavailable: {e}"}
    try:
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            nv.gpu = i
            h = call(nv, "nvmlDeviceGetHandleByIndex", i)
            if is_error(h):
                gpus.append({"index": i, "handle": h, "links": []})
                continue
            g = {"index": i, "pci_bus_id": call(nv, "nvmlDeviceGetPciInfo", h, conv=lambda p: text(p.busId)),
                 "links": []}
            for link in range(_NVLINK_MAX_LINKS):
                try:
                    state = nv.nvmlDeviceGetNvLinkState(h, link)
                except Exception as e:
                    if getattr(e, "value", None) == _NVML_ERROR_INVALID_ARGUMENT:
                        break  # past the device's last link
                    continue  # Not Supported: no NVLink on this GPU (or this slot)
                if state == _NVML_FEATURE_ENABLED:
                    g["links"].append({"link": link, "errors": {
                        name: call(nv, "nvmlDeviceGetNvLinkErrorCounter", h, link, counter)
                        for name, counter in NVLINK_ERROR_COUNTERS}})
            gpus.append(g)
        nv.gpu = None
        if not gpus:
            return {"unavailable": "no NVIDIA GPU (NVML reports 0 devices)"}
        return {"gpus": gpus}
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def nvlink_counters(call_deadline_s: float = _deadline.CALL_DEADLINE_S,
                    init_deadline_s: float = _deadline.INIT_DEADLINE_S) -> dict:
    """The NVLink part of :func:`snapshot`, read under per-call deadlines (``_deadline.run_nvml``, seconds)."""
    got = _deadline.run_nvml(_nvlink_body, call_deadline_s, init_deadline_s)
    if "unresponsive" in got:
        return {"unresponsive": got["unresponsive"], "msg": _deadline.describe(got["unresponsive"])}
    if "failed" in got:
        return {"unavailable": f"NVML reading failed: {got['failed']}"}
    return got["result"]


def snapshot(sysfs: str = "/sys", nvml: bool = True, call_deadline_s: float = _deadline.CALL_DEADLINE_S,
             init_deadline_s: float = _deadline.INIT_DEADLINE_S) -> dict:
    """One reading of every link error counter of the node (see the module docstring). ``nvml`` False: the
    NVLink part is ``{"unavailable": "not asked"}`` (a reader of IB counters only)."""
    read_at = round(time.time(), 3)
    nvlink = nvlink_counters(call_deadline_s, init_deadline_s) if nvml else {"unavailable": "not asked"}
    return {"read_at": read_at, "nvlink": nvlink, "ib": ib_counters(sysfs)}
