"""burnin layer: every GPU of a node under sustained concurrent load (matmul, HBM, all-reduce) for minutes.

Runs only when selected by marker (``pytest -m burnin --profile burnin``; ``--burnin-minutes N``): a plain
``pytest`` run deselects it (suites/conftest.py). Probe: burnin. Judging: gpuaccept/judging/burnin.py (pure).
The time series (time, GPU, figure, value) is kept as ``<report folder>/burnin/<host>.csv``.
"""
import csv
import os
import time

import pytest

from gpuaccept.judging import actions, burnin
from gpuaccept.judging import drift
from gpuaccept.config.hostvars import kernel_log_sources
from gpuaccept.runner import nodeclock
from gpuaccept.errors import Interrupted, ProbeError
from gpuaccept.runner.host import HostRunner
from gpuaccept.config.profiles import BURNIN_MINUTES
from gpuaccept.judging.readings import describe_gpu, unmeasured
from gpuaccept.judging.xid import classify, finding_cause, in_run_findings, run_names

pytestmark = pytest.mark.burnin

# Seconds allowed on top of the load for start-up (CUDA contexts, NCCL init) and the document's transfer.
STARTUP_S = 300.0


def _series_path(config, host: str) -> str | None:
    from gpuaccept.plugin import STATE
    probe_dir = getattr(config.stash.get(STATE, None), "probe_dir", None)
    if not probe_dir:
        return None
    # named like the host's probe folder (<reports>/probes/<host>): host names are checked at load
    # (gpuaccept.config.hostranges refuses "/", "..", control characters), so the name is a safe file name
    return os.path.join(os.path.dirname(probe_dir), "burnin", f"{host}.csv")


def test_burnin(node: HostRunner, gpus, sku, verdicts, request, run_started):
    """Every GPU at once for --burnin-minutes: windowed throughput against its start and its peers,
    temperatures, clock events, ECC/remap/PCIe replay/NVLink counter growth, XIDs, and a bit-for-bit
    comparison of a deterministic matmul across the GPUs (silent data corruption)."""
    minutes = request.config.getoption("burnin_minutes") or BURNIN_MINUTES[request.config.getoption("profile")]
    seconds = float(minutes) * 60.0
    t_before = time.time()
    dtypes = ["bf16"] + (["fp8"] if sku.expect.get("fp8") else [])
    try:
        doc = node.probe("burnin", {"device": "cuda", "seconds": seconds, "dtypes": dtypes},
                         timeout=seconds + STARTUP_S)
    except ProbeError as e:  # a worker failed before the first window (a GPU lost at start): the Xids still tell
        verdicts.error(f"burn-in load did not run: {e}", cause=e.cause)  # why it did not run: the error's cause
        doc = None
    except Interrupted as e:  # the run was interrupted: the windows measured so far are judged, as partial,
        partial = getattr(e, "partial", None)  # and the test stays an error ("interrupted ... while running")
        if partial is not None:
            verdicts.record("burnin_minutes_requested", minutes, "min")
            _judge_load(partial, seconds, node, gpus, sku, verdicts, request)
        raise
    t_before = node.last_started("burnin") or t_before  # fetched ahead (gpuaccept.runner.prefetch): when it really ran
    verdicts.record("burnin_minutes_requested", minutes, "min")
    clock = nodeclock.read_clock(node)  # the burn-in's start on the node's own clock (gpuaccept.runner.nodeclock)
    args, cut = nodeclock.xid_args(t_before, clock)
    xid = node.probe("xid_events", {**args, **kernel_log_sources(node.host.vars)})
    events = classify(nodeclock.in_window(xid.get("events") or [], cut))
    # the window is the burn-in's: its own load was the GPUs' application, another named process's Xids are that
    # application's (gpuaccept.judging.xid.in_run_findings marks them foreign)
    in_run = in_run_findings(events, None, run_names(xid))
    if doc is not None:  # judged with the Xids of the burn-in: the hardware evidence of a drift on their GPU
        _judge_load(doc, seconds, node, gpus, sku, verdicts, request, [e for e in events if not e.get("foreign")])
    verdicts.record("burnin_xid_events", len(events), "events", extra={"events": events[:50]})
    for ev in events:
        if ev.get("fails"):
            verdicts.fail(f"during burn-in: {ev.get('message') or 'Xid ' + str(ev.get('xid'))}",
                          gpu=drift.nvml_gpu_for({"pci_bus_id": ev.get("pci_bus_id")}, gpus), check="burnin_xid_events",
                          action=actions.for_xid(ev))
    for f in in_run:
        verdicts.fail(f"during burn-in: {f['message']}", gpu=drift.nvml_gpu_for({"pci_bus_id": f.get("pci_bus_id")},
                                                                                   gpus),
                      check="burnin_xid_events", action=actions.for_xid(f), cause=finding_cause(f))
    verdicts.finish()


def _judge_load(doc: dict, seconds: float, node: HostRunner, gpus, sku, verdicts, request,
                xid_events: list | None = None) -> None:
    """Record and judge the burnin probe's document: figures, the series file, SDC, telemetry, a load that
    stopped early or was interrupted, a foreign process, a GPU missing from the load, a stall of every GPU
    (the node's). ``xid_events``: the burn-in's Xids (hardware evidence of a drift on their GPU)."""
    verdicts.record("burnin_wall_s", doc.get("wall_s"), "s", extra={"load_started_s": doc.get("load_started_s"),
                                                                     "interrupted": doc.get("interrupted")})
    if doc.get("interrupted"):  # stopped on the node before its time: not run to its end, so not judged whole
        how = doc["interrupted"] if isinstance(doc["interrupted"], str) else "a signal"
        verdicts.error(f"burn-in stopped by {how} after {doc.get('wall_s')} s of {seconds:g} s (figures measured "
                       f"until then are kept)")
    halted = burnin.stopped(doc)  # a worker died or the load hung: partial figures, judged below, never a pass
    if doc.get("nvml") != "ok":
        verdicts.fail(f"no NVML telemetry during burn-in: {doc.get('nvml')}")
    path = _series_path(request.config, node.name)
    if path:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", newline="", encoding="utf-8") as f:
                w = csv.writer(f)
                w.writerow(["time_s", "gpu", "pci_bus_id", "figure", "value"])
                bus = {g["rank"]: g for g in doc.get("gpus") or []}
                for t, rank, fig, val in burnin.series_rows(doc):
                    g = bus.get(rank, {})
                    w.writerow([t, g.get("index", rank), g.get("pci_bus_id"), fig, val])
            verdicts.record("burnin_series_file", os.path.relpath(path, os.path.dirname(os.path.dirname(path))),
                            extra={"bytes": os.path.getsize(path)})
        except OSError as e:
            verdicts.record("burnin_series_file", f"not written: {e.strerror}")
    ranks = {g.get("rank"): g for g in doc.get("gpus") or []}  # torch index + PCI bus id per rank
    for rank, cause in burnin.foreign_processes(doc).items():
        nv = drift.nvml_gpu_for(ranks.get(rank, {}), gpus)
        verdicts.block("burnin", cause, gpu=nv.get("index") if nv else None)
    for rank, findings in sorted(burnin.judge(doc, sku, xid_events).items()):
        verdicts.apply(findings, gpu=ranks.get(rank) or {"index": rank})  # attributed by bus id (Recorder)
    verdicts.apply(burnin.node_findings(doc))  # every GPU stalled at once: the node or the load, no GPU named
    if halted is not None:
        rank, line = halted
        verdicts.fail(line, gpu=(ranks.get(rank) or {"index": rank}) if rank is not None else None)
    missing = unmeasured(gpus, list(ranks.values()))
    if missing:
        verdicts.fail("burn-in did not load every GPU NVML lists: missing "
                      + ", ".join(describe_gpu(g) for g in missing))
