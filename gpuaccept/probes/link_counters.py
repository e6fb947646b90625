#!/usr/bin/env python3
"""Link error counters, one snapshot: NVLink (NVML) and InfiniBand/RoCE port counters (sysfs).

Run on the node as ``python3 link_counters.py '<json args>'``; a suite asks for it right before and right after a
layer's load (``{"at": "start", "load": "p2p_bandwidth"}``, then ``"at": "end"``) and judges the difference
(gpuaccept/judging/linkcounters.py). Args (JSON object)::

    {"at": "start" | "end",          # which side of the load (echoed; two calls of one test differ by it)
     "load": str,                    # the probe whose load it brackets (echoed)
     "sysfs": "/sys",                # sysfs root (tests point it at a tree of their own)
     "nvml": true,                   # read NVLink counters through NVML
     "call_deadline_s": 10, "init_deadline_s": 60}   # NVML deadlines (_deadline.py), seconds

Output: ``{"at", "load"}`` and :func:`_linkcounters.snapshot`'s document (``read_at``, ``nvlink``, ``ib``). A
node without NVLink or without InfiniBand says so in that part (``unavailable``), never a silent zero.
"""
from __future__ import annotations

import _deadline
from _linkcounters import snapshot
from _probe import ProbeFailed, reject_unknown, run

ARG_KEYS = {"at", "load", "sysfs", "nvml", "call_deadline_s", "init_deadline_s"}


def main(args: dict) -> dict:
    """Probe entry point: the document described in the module docstring. Raises ProbeFailed on a bad argument."""
    reject_unknown(args, ARG_KEYS)
    if args.get("at") not in ("start", "end"):
        raise ProbeFailed("argument 'at' must be \"start\" or \"end\"")
    doc = {"at": args["at"], "load": str(args.get("load") or "")}
    doc.update(snapshot(str(args.get("sysfs", "/sys")), bool(args.get("nvml", True)),
                        float(args.get("call_deadline_s", _deadline.CALL_DEADLINE_S)),
                        float(args.get("init_deadline_s", _deadline.INIT_DEADLINE_S))))
    return doc


if __name__ == "__main__":
    run(main)
