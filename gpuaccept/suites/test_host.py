"""host layer: the node itself, GPUs or not: kernel-log states, host memory and EDAC, writable filesystems, NVMe health.

Probes: host_kernel_log (the catalogue gpuaccept/data/host_kernel_catalog.yaml matched over the run's window, the Xid
window and ``--xid-window`` included), host_memory (MemTotal, EDAC counters), host_filesystems (a file written,
fsync'd and deleted in every storage folder and in the probes' own folder), nvme_inventory (controller state, SMART
critical warning). Judged by gpuaccept/judging/host.py against gpuaccept/data/host_limits.yaml: no test here needs a
GPU or a ``gpu_sku``, so a CPU node with a soft lockup FAILs (hardware, reboot), never SKIPs.

Inventory variables: ``host_memory_gb`` (installed host memory, GiB), ``kernel_log_paths`` (log files read in place
of journalctl/dmesg/kern.log: saved logs), ``host_sysfs_root`` (sysfs mounted elsewhere: EDAC, and the devices of
filesystem errors, read there), ``storage_paths`` and ``fs_paths`` (the folders proven writable).
"""
from __future__ import annotations

import time

import pytest

from gpuaccept.config import storage as sl
from gpuaccept.config.hostvars import kernel_log_sources
from gpuaccept.judging import host as hj
from gpuaccept.plugin.release import host_param
from gpuaccept.runner import fanout, nodeclock
from gpuaccept.runner.host import HostRunner

pytestmark = pytest.mark.host

#: the run's readings shared between this layer's tests, per host (xdist keeps one host's tests in one process):
#: ``{host: {"memory_start": doc, "kernel": (doc, cut, window_s)}}``
_SHARED = pytest.StashKey[dict]()


def _shared(request, host: str) -> dict:
    store = request.config.stash.setdefault(_SHARED, {})
    return store.setdefault(host, {})


def _kernel_log(node: HostRunner, request, run_started: float) -> tuple[dict, float | None, float]:
    """The host_kernel_log document over the run's window, with its cut (node epoch seconds) and the window's length
    in seconds; read once per host and run (test_kernel_log and test_filesystems both judge it)."""
    mine = _shared(request, node.name)
    if "kernel" not in mine:
        window = request.config.getoption("xid_window")
        since = run_started - window if window else run_started
        clock = nodeclock.read_clock(node)  # the window on the node's own clock, as test_xid_events reads it
        args, cut = nodeclock.xid_args(since, clock)
        args.update(hj.kernel_log_args(node.host.vars))  # the catalogue, and host_sysfs_root for its devices
        args.update(kernel_log_sources(node.host.vars))  # kernel_log_paths, as every kernel-log probe reads it
        doc = node.probe("host_kernel_log", args)
        mine["kernel"] = (doc, cut, max(time.time() - since, 0.0), clock)
    return mine["kernel"][:3]


def test_host_ram(node: HostRunner, request, verdicts):
    """MemTotal against ``host_memory_gb`` (GiB; the kernel's reserved share allowed, host_limits.yaml); EDAC
    uncorrectable counts above 0 fail (hardware); correctable counts recorded with their rate since reset. The
    counters read here are the start of test_host_ram_errors' interval when the warm-up kept no run-start reading."""
    doc = node.probe("host_memory", fanout.memory_args(node.host.vars))
    _shared(request, node.name)["memory_start"] = doc
    declared = node.host.vars.get("host_memory_gb")
    found = hj.memory_findings(doc, float(declared) if declared is not None else None)
    verdicts.apply(found + [hj.none_found("host_memory_states", found)])
    verdicts.finish()


def test_kernel_log(node: HostRunner, run_started, request, verdicts):
    """Kernel-log states over the run's window (hung task, soft/hard lockup, RCU stall, a NIC whose firmware stopped
    answering, NVMe timeouts and a controller down, filesystem errors and read-only remounts, NVLink training
    failures, machine checks, EDAC errors, OOM kills): each names its device, line and time, with its cause class
    and action from the catalogue. An unreadable log is an ERROR, never "clean"."""
    doc, cut, window_s = _kernel_log(node, request, run_started)
    clock = _shared(request, node.name)["kernel"][3]
    if clock is not None:
        verdicts.record("node_clock_offset_s", round(clock.offset_s, 3), "s")
    verdicts.record("kernel_log_source", doc.get("source"), extra={"attempts": doc.get("attempts"),
                                                                   "lines_scanned": doc.get("lines_scanned"),
                                                                   "note": doc.get("note")})
    # the log read now, on the node's clock: a line dated later than that is not this run's (hj.kernel_findings)
    until = time.time() + clock.offset_s + clock.uncertainty_s + hj.FUTURE_SLACK_S if clock is not None else None
    found = hj.kernel_findings(doc, cut, window_s, until)
    verdicts.apply(found + [hj.none_found("kernel_states", found)])
    verdicts.finish()


def test_filesystems(node: HostRunner, run_started, request, verdicts):
    """Every ``storage_paths`` and ``fs_paths`` folder and the probes' own folder proven writable (a small file
    written, fsync'd, deleted). A read-only or full filesystem is configuration or capacity, not hardware, unless the
    kernel log holds a filesystem or NVMe error of that device over the run's window (then hardware)."""
    v = node.host.vars
    paths = sl.path_list(v.get("storage_paths"), "storage_paths", node.name) + \
        sl.path_list(v.get("fs_paths"), "fs_paths", node.name)
    doc = node.probe("host_filesystems", {"paths": list(dict.fromkeys(paths)),
                                          "bytes": hj.load_limits()["fs_probe_bytes"]})
    errors: dict = {}
    if not all(p.get("ok") for p in doc.get("paths") or []):  # only a failing path needs the kernel's word
        kdoc, cut, _ = _kernel_log(node, request, run_started)
        errors = hj.fs_error_devices(kdoc, cut)
    found = hj.filesystem_findings(doc, errors)
    verdicts.apply(found + [hj.none_found("paths_not_writable", found)])
    verdicts.finish()


def test_nvme_state(node: HostRunner, verdicts):
    """Each NVMe controller live (sysfs state) and without a SMART critical warning (each bit said with its meaning,
    NVMe Base spec); wear (percentage used) is recorded, never a failure by itself. Skips on a node without NVMe."""
    doc = node.probe("nvme_inventory")
    if not doc.get("controllers"):
        pytest.skip(f"no NVMe controller on {node.name}")
    found = hj.nvme_findings(doc)
    verdicts.apply(found + [hj.none_found("nvme_states", found)])
    verdicts.finish()


def _ram_test_state(request, host: str) -> str:
    """How test_host_ram of ``host`` stands in this run: "was not selected", "did not pass" or "passed"."""
    for it in request.session.items:
        if getattr(it, "originalname", None) == "test_host_ram" and host_param(it) == host:
            return "did not pass" if not _shared(request, host).get("memory_start") else "passed"
    return "was not selected"


def test_host_ram_errors(node: HostRunner, request, verdicts):
    """EDAC counters read again at the end of the layer against the run-start reading the controller's warm-up kept
    (gpuaccept.runner.fanout.run_start_memory: the GPU layers' load inside the window, "window: run"), else against
    test_host_ram's reading ("window: host layer only": a replayed host, an xdist worker, no GPU test selected, or a
    failed warm-up read): correctable errors that grew are a hardware finding with their rate per hour (limit
    edac_ce_in_window, host_limits.yaml), uncorrectable ones too. Skips without an EDAC driver, or with no start
    reading at all (neither the warm-up's nor test_host_ram's) once the node was read: a node that cannot be
    read (unreachable, its interpreter, its disk) is that error, whatever else was selected."""
    start, window = fanout.run_start_memory(node), "run"
    if start is None:
        start, window = _shared(request, node.name).get("memory_start"), "host layer only"
    if start is None:
        node.probe("host_memory", fanout.memory_args(node.host.vars))  # a node that cannot be read: that error
        pytest.skip(f"{node.name}: no start reading to count EDAC errors from (the run's start is read with a GPU "
                    f"test selected, the host layer's by test_host_ram, which {_ram_test_state(request, node.name)})")
    if not (start.get("edac") or {}).get("present"):
        pytest.skip(f"no EDAC driver on {node.name}: host memory errors are not counted there")
    end = node.probe("host_memory", fanout.memory_args(node.host.vars))
    found = hj.edac_growth(start, end, window)
    verdicts.apply(found + [hj.none_found("edac_growth", found)])
    verdicts.finish()
