#!/usr/bin/env python3
"""Host memory: the kernel's MemTotal and the EDAC memory controllers' error counters (read-only).

Args (JSON object, every key optional)::

    {"proc": "/proc", "sysfs": "/sys"}      # roots (tests point them at trees laid out as the kernel's)

Output::

    {"mem_total_kib": int | None,                 # /proc/meminfo MemTotal (kB there: KiB, proc(5))
     "mem_total_gib": float | None,               # the same in GiB (2**30 bytes)
     "edac": {"present": bool,                    # /sys/devices/system/edac/mc exists (an EDAC driver is loaded)
              "controllers": [{"name": "mc0", "mc_name", "size_mb", "ce_count", "ue_count", "ce_noinfo_count",
                               "ue_noinfo_count", "seconds_since_reset",
                               "dimms": [{"name": "dimm0" | "rank0", "label", "location", "size_mb",
                                          "ce_count", "ue_count"}]}],
              "ce_total": int | None, "ue_total": int | None},    # sums over the controllers (None: no controller)
     "read_at": float}                            # the node's time.time() when the counters were read

Sources: proc(5) ``/proc/meminfo``; Linux Documentation/admin-guide/ras.rst, "EDAC sysfs interface":
``/sys/devices/system/edac/mc/mcX/{mc_name,size_mb,ce_count,ue_count,ce_noinfo_count,ue_noinfo_count,
seconds_since_reset}`` and per DIMM ``dimmY/`` (or ``rankY/`` on csrow-based drivers) ``{dimm_label,
dimm_location,size,dimm_ce_count,dimm_ue_count}``. Standard library only.
"""
from __future__ import annotations

import os
import re
import time

from _probe import reject_unknown, run
from _sysfs import read_text

ARG_KEYS = {"proc", "sysfs"}
_MC_RE = re.compile(r"^mc\d+$")
_DIMM_RE = re.compile(r"^(?:dimm|rank)\d+$")


def _int(text: str | None) -> int | None:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def mem_total_kib(meminfo_text: str) -> int | None:
    """MemTotal in KiB from the text of /proc/meminfo (``MemTotal:       24683792 kB``), None when absent."""
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", meminfo_text, re.M)
    return int(m.group(1)) if m else None


def _natural(names):
    return sorted(names, key=lambda n: (len(n), n))


def edac_counters(sysfs: str = "/sys") -> dict:
    """The ``edac`` part of the document (module docstring) under the sysfs root ``sysfs``."""
    base = os.path.join(sysfs, "devices", "system", "edac", "mc")
    if not os.path.isdir(base):
        return {"present": False, "controllers": [], "ce_total": None, "ue_total": None}
    controllers = []
    for name in _natural(n for n in os.listdir(base) if _MC_RE.match(n)):
        d = os.path.join(base, name)
        mc = {"name": name, "mc_name": read_text(f"{d}/mc_name"), "size_mb": _int(read_text(f"{d}/size_mb")),
              **{k: _int(read_text(f"{d}/{k}")) for k in ("ce_count", "ue_count", "ce_noinfo_count",
                                                          "ue_noinfo_count", "seconds_since_reset")},
              "dimms": []}
        for dn in _natural(n for n in os.listdir(d) if _DIMM_RE.match(n)):
            dd = os.path.join(d, dn)
            mc["dimms"].append({"name": dn, "label": read_text(f"{dd}/dimm_label"),
                                "location": read_text(f"{dd}/dimm_location"), "size_mb": _int(read_text(f"{dd}/size")),
                                "ce_count": _int(read_text(f"{dd}/dimm_ce_count")),
                                "ue_count": _int(read_text(f"{dd}/dimm_ue_count"))})
        controllers.append(mc)

    def total(key):
        vals = [c[key] for c in controllers if c[key] is not None]
        return sum(vals) if vals else None

    return {"present": True, "controllers": controllers, "ce_total": total("ce_count"), "ue_total": total("ue_count")}


def main(args: dict) -> dict:
    """Probe entry point: the document described in the module docstring."""
    reject_unknown(args, ARG_KEYS)
    proc, sysfs = args.get("proc", "/proc"), args.get("sysfs", "/sys")
    try:
        with open(os.path.join(proc, "meminfo"), encoding="utf-8", errors="replace") as f:
            kib = mem_total_kib(f.read())
    except OSError:
        kib = None
    return {"mem_total_kib": kib, "mem_total_gib": round(kib / 2**20, 3) if kib is not None else None,
            "edac": edac_counters(sysfs), "read_at": time.time()}


if __name__ == "__main__":
    run(main)
