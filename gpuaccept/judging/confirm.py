"""Confirm before failing: a figure outside its limit is measured once more before it fails.

A suite records its throughput figures with ``confirm=True`` (gpuaccept.judging.recorder.Recorder.record):
one outside its limit is held. :func:`confirm_held` then runs the same probe once more, on the same GPUs with
the same arguments (``attempt: 2``, which changes only the name its document is saved under, and, for the
matmul probe, only the dtypes held), judges its conditions (a second run another process disturbed is an
ERROR like the first) and judges each held figure on the second figure:

- below again: FAILED, both figures in the line ("... < min 3900 GB/s; measured again: 1901 GB/s (confirmed)");
- within its limit: recorded as unstable (both values in results.json, the summary and the history), not a
  failure, except in the burn-in profile, where instability is itself a finding;
- no second figure (the probe failed): FAILED "not confirmed: <the probe's error>".

The extra time is bounded: at most one more run of the one probe per test, and none when nothing is held
or every held figure's GPU was disturbed (that test is an ERROR whatever the second figure). It is recorded
beside each figure (``extra.confirmation.seconds``).
"""
from __future__ import annotations

import time
from typing import Any, Callable

from gpuaccept.errors import CommandTimeout, ProbeError
from gpuaccept.judging.readings import bus_key, typed


def by_bus(doc: dict | None, gpu: dict | None) -> dict | None:
    """The per-GPU entry of a probe document ``doc`` (its ``gpus`` list) for the GPU ``gpu`` (an identity
    dict with ``pci_bus_id``, else ``index``), or None."""
    if not doc or gpu is None:
        return None
    want = bus_key(gpu.get("pci_bus_id"))
    for g in doc.get("gpus") or []:
        if isinstance(g, dict) and ((want is not None and bus_key(g.get("pci_bus_id")) == want)
                                    or (want is None and g.get("index") == gpu.get("index"))):
            return g
    return None


def confirm_held(verdicts, measure: Callable[[dict], dict], value: Callable[[dict, str, dict], Any],
                 args: dict, gpus: list[dict], burnin: bool = False) -> float | None:
    """Measure again and judge the held figures of ``verdicts`` (see the module docstring).

    ``measure(args)``: runs the probe (the suite's ``node.probe(name, args)``) and returns its document;
    ``value(doc, check, gpu)``: the figure ``check`` of ``gpu`` in a document, or None; ``args``: the first
    run's arguments (``attempt: 2`` is added); ``gpus``: the NVML GPUs (to name disturbed ones); ``burnin``:
    the run's profile is burn-in. Returns the seconds the second measurement took, or None when nothing was
    held (or every held GPU was disturbed). Interrupted and other transport errors propagate; a probe error
    or timeout of the second run leaves the held figures failing "not confirmed: <error>".
    """
    held = verdicts.held()
    if not held:
        return None
    disturbed = verdicts.disturbed_gpus()
    if all((g or {}).get("index") in disturbed or None in disturbed for _, g in held):
        verdicts.confirm(lambda check, g: None, "not measured again: the first measurement was disturbed")
        return None
    t0 = time.monotonic()
    doc, why = None, None
    try:
        doc = typed(measure({**args, "attempt": 2}))
    except (ProbeError, CommandTimeout) as e:
        why = f"the second measurement failed: {str(e).splitlines()[0][:300]}"
    seconds = round(time.monotonic() - t0, 2)
    if doc is not None:
        verdicts.conditions(doc, gpus)
    verdicts.confirm(lambda check, g: value(doc, check, g) if doc is not None else None, why, seconds,
                     unstable_fails=burnin)
    return seconds
