"""health layer: GPU inventory and health through NVML (probes: gpu_inventory, xid_events).

Each check is its own test so that ``-k`` finds it; the judging itself lives in gpuaccept/judging/health.py (pure).
"""
import pytest

from gpuaccept.causes import Cause
from gpuaccept.judging import actions, fleet
from gpuaccept.judging import health
from gpuaccept.config.hostvars import kernel_log_sources
from gpuaccept.config.limitfile import rerun_partners
from gpuaccept.runner import nodeclock
from gpuaccept.errors import CommandTimeout, NodeError, ProbeError, ThresholdError
from gpuaccept.runner.host import HostRunner
from gpuaccept.plugin.release import host_param
from gpuaccept.runner.prefetch import ahead
from gpuaccept.probes._pci import normalize_bus_id
from gpuaccept.judging.readings import is_lost, number, present, typed
from gpuaccept.judging.shape import gpu_fabric, node_shape
from gpuaccept.judging.sku import detect_gpu
from gpuaccept.judging.xid import classify, classify_sxids, finding_cause, in_run_findings, run_names

pytestmark = pytest.mark.health


def test_gpu_inventory(node: HostRunner, gpus, request, verdicts, earlier_runs):
    """Count against gpus_per_node (a GPU NVML has no handle for fails as lost and does not count); name,
    memory, UUID, serial, PCI bus id, temperature against the SKU's temp_c, driver and CUDA driver versions;
    readings NVML answers "Unknown Error" fail naming the fields; a CUDA_VISIBLE_DEVICES hiding NVML GPUs is
    an error naming its value; the node's shape (gpuaccept.judging.shape) is recorded. A count other than
    gpus_per_node carries its cause (gpuaccept/judging/gpucount.py: NVML against the PCI scan, the boot's Xids,
    and the most GPUs this host showed in an earlier run of the history database: ``earlier_runs``)."""
    doc = node.gpu_inventory()
    try:
        sku = request.getfixturevalue("sku")
    except ThresholdError as e:  # test_gpu_sku reports it; the inventory is still recorded
        sku, why = None, str(e)
    verdicts.record("driver_version", doc.get("driver"))
    verdicts.record("cuda_driver_version", doc.get("cuda_driver_version"))
    verdicts.apply(health.cuda_visible_devices(doc))
    if sku is not None:  # the shape judged: which expectations of the SKU file apply to this node
        verdicts.record("node_shape", node_shape(doc, sku).describe())
    for g in gpus:
        if is_lost(g):
            verdicts.apply(health.lost(g), gpu=g)
            continue
        verdicts.apply(health.telemetry_errors(g), gpu=g)
        verdicts.record("name", g.get("name"), gpu=g)
        mem = g.get("memory_total_bytes")
        verdicts.record("memory_total_gib", round(mem / 2**30, 2) if number(mem) is not None else mem, "GiB", gpu=g)
        verdicts.record("uuid", g.get("uuid"), gpu=g)
        if sku is not None:
            verdicts.apply(health.temperature(g, sku), gpu=g)
        else:
            verdicts.record("temp_c", g.get("temp_c"), "C", gpu=g, extra={"note": f"not judged: {why}"})
    declared = node.host.vars.get("gpus_per_node")
    short = declared is not None and len(present(gpus)) < int(declared)
    board = sku.expect.get("gpus_per_node") if sku is not None else None  # the most GPUs the SKU's board holds
    verdicts.apply([health.gpu_count(gpus, declared, doc, _boot_off_bus_events(node) if short else None,
                                     earlier_runs.most_gpus(node.name, _serials(gpus)) if short else None, board)])


def _serials(gpus: list[dict]) -> list[str]:
    """The serials of the GPUs NVML lists (readable ones): what makes an earlier run of the host name this machine."""
    return [g["serial"] for g in present(gpus) if isinstance(g.get("serial"), str) and g["serial"]]


def _boot_off_bus_events(node: HostRunner) -> list | None:
    """The xid_events probe's events since the node booted (a GPU that fell off the bus before the run is in
    them), read only for a GPU count short of gpus_per_node: its cause (gpuaccept/judging/gpucount.py). None when
    the kernel log cannot be read (a failed probe, a replay without its capture): then judged without them."""
    try:
        return node.probe("xid_events", {}).get("events") or []
    except (ProbeError, CommandTimeout):
        return None


def test_gpu_sku(node: HostRunner, gpus, sku, specs, verdicts):
    """The SKU detected from NVML name, memory size and PCI device id (the readable ones) matches the one the
    run expects."""
    for g in gpus:
        if is_lost(g):
            verdicts.apply(health.lost(g), gpu=g)
            continue
        try:
            seen = detect_gpu(specs, g)
        except ThresholdError as e:
            verdicts.fail(str(e), gpu=g)
            continue
        verdicts.record("sku", seen.sku, gpu=g)
        if seen.sku != sku.sku:
            verdicts.fail(f"detected SKU {seen.sku} ('{g.get('name')}') but the run expects {sku.sku}", gpu=g)


def test_driver_versions(node: HostRunner, gpus, verdicts):
    """The NVML library and the loaded kernel module agree (a mismatch breaks every CUDA program)."""
    verdicts.apply(health.driver_versions(node.gpu_inventory()))
    verdicts.finish()


def test_ecc(node: HostRunner, gpus, sku, verdicts):
    """ECC enabled (where the SKU has it); no uncorrectable ECC errors, volatile or aggregate."""
    for g in gpus:
        verdicts.apply(health.ecc(g, sku), gpu=g)
    verdicts.finish()


def test_row_remapping(node: HostRunner, gpus, sku, verdicts):
    """Row remapping (Ampere and later): pending = reset needed, failure = replace the GPU, uncorrectable
    remaps over the SKU's limit fail; correctable remaps are recorded. Retired pages on older SKUs."""
    for g in gpus:
        verdicts.apply(health.row_remapping(g, sku), gpu=g)
    verdicts.finish()


def test_pcie_link(node: HostRunner, gpus, sku, verdicts):
    """PCIe gen and width read while host-to-device copies load the link (idle GPUs downshift), against
    the SKU's expected link, not only NVML's maximum: a Gen4 or x8 slot hides behind a Gen5 x16 maximum."""
    links = typed(node.probe("pcie_link", {"seconds": 1.5}).get("gpus") or [])
    verdicts.expect_gpus(gpus, links, "pcie_link")
    for link in links:
        verdicts.apply(health.pcie_link(link, sku, gpus), gpu=link)


def test_preflight(node: HostRunner, gpus, sku, verdicts):
    """No foreign processes on the GPUs, persistence mode on, MIG mode as the SKU expects, no hardware clock
    slowdown (HW slowdown, HW thermal, HW power brake) active while the GPUs idle."""
    for g in gpus:
        verdicts.apply(health.preflight(g, sku), gpu=g)
    verdicts.finish()


def test_fabric(node: HostRunner, gpus, sku, verdicts):
    """On NVSwitch SKUs the GPU fabric (NVML GPU fabric info) is registered and healthy, where the node's
    shape has one: NOT_SUPPORTED on GPUs without NVLink (one GPU of the board in a VM) is "no fabric on this
    node", recorded with why and skipped as not applicable, never a failure (gpuaccept.judging.shape)."""
    if not sku.expect.get("nvswitch"):
        pytest.skip(f"{sku.sku}: no NVSwitch fabric")
    for g in gpus:
        verdicts.apply(health.fabric(g, sku), gpu=g)
    verdicts.finish()
    states = {gpu_fabric(g, sku) for g in present(gpus)}
    if states and all(s == "none" for s, _ in states):
        pytest.skip(f"{node.name}: {next(iter(states))[1]} ({node_shape(node.gpu_inventory(), sku).describe()})")


def test_xid_events(node: HostRunner, gpus, run_started, request, verdicts):
    """Xid and NVSwitch SXid events in the kernel log since the run began (or --xid-window seconds), judged
    by NVIDIA's Xid Catalog (immediate action IGNORE recorded, the rest fail; RESTART_APP recorded before the run's
    start, a finding of its GPU inside the run: rerun once, reset-gpu repeated; from an application that is not
    the run's own, by the process name its lines give, rerun [contention] whatever the count; gpuaccept/judging/xid.py)
    and the Fabric Manager guide (fatal SXids fail naming switch and link). An unreadable log is an error,
    never "0 XIDs"."""
    window = request.config.getoption("xid_window")
    since = run_started - window if window else run_started
    clock = nodeclock.read_clock(node)  # the window on the node's own clock (a node far off misses no Xid)
    args, cut = nodeclock.xid_args(since, clock)
    doc = node.probe("xid_events", {**args, **kernel_log_sources(node.host.vars)})  # kernel_log_paths: that log
    if clock is not None:
        verdicts.record("node_clock_offset_s", round(clock.offset_s, 3), "s")
    by_bus = {k: g for g in gpus if (k := normalize_bus_id(g.get("pci_bus_id")))}
    verdicts.record("xid_log_source", doc.get("source"))
    events = classify(nodeclock.in_window(doc.get("events") or [], cut))
    # the run's own start on the node's clock (a replay: its saved window is the run's); the run's own process names
    # as the node's probes name themselves (None: an older document, every in-run Xid taken as the probes')
    in_run = in_run_findings(events, nodeclock.on_node(run_started, clock) if clock is not None else None,
                             run_names(doc))
    verdicts.record("xid_events", len(events), "events", extra={"events": events[:50]})
    for ev in events:
        if ev["fails"]:
            verdicts.fail(ev["message"], gpu=by_bus.get(normalize_bus_id(ev.get("pci_bus_id"))), check="xid_events",
                          action=actions.for_xid(ev))
    for f in in_run:
        verdicts.fail(f["message"], gpu=by_bus.get(normalize_bus_id(f.get("pci_bus_id"))), check="xid_events",
                      action=actions.for_xid(f), cause=finding_cause(f))
    sxids = classify_sxids(nodeclock.in_window(doc.get("sxid_events") or [], cut))
    verdicts.record("sxid_events", len(sxids), "events", extra={"events": sxids[:50]})
    for ev in sxids:
        if ev["fails"]:
            verdicts.fail(ev["message"], check="sxid_events", action=actions.for_sxid(ev))
    verdicts.finish()


def _gpu_inventory(node: HostRunner) -> None:
    """test_fleet_consistency's probe on each host (its plan, gpuaccept.runner.prefetch.ahead: every host at once,
    cached for the test)."""
    node.gpu_inventory()


@ahead(_gpu_inventory)
def test_fleet_consistency(request, nodes, specs, verdicts):
    """All selected hosts run one driver version (hosts off the majority fail), each host carries the SKU its
    group declares, and no two hosts report the same GPU (one machine under two names). Failures are filed
    under the host they concern (gpuaccept/judging/fleet.py). A host that cannot be read is its own tests'
    error; where none of them is in the run (only fleet-wide tests selected) it is this test's, filed under
    that host with its cause."""
    partners = rerun_partners(request.config.getoption("limit"), "test_fleet_consistency", [n.name for n in nodes])
    if partners:  # a rerun of some of the hosts it compared: the comparison is not repeated, never passed
        how = f"--limit {','.join(partners)}" if len(partners) <= 8 else "the hosts its '# fleet-wide' line names"
        for n in nodes:
            verdicts.for_host(n.name).error(
                f"not rerun: the fleet-wide driver and GPU comparison did not pass over {len(partners)} hosts and "
                f"{len(nodes)} of them cannot repeat it (rerun with {how})",
                cause=Cause("tool", "not_rerun", n.name, evidence={"partners": len(partners)}))
        verdicts.finish()
    drivers: dict[str, list[str]] = {}
    gpus_by_host: dict[str, list] = {}
    alone = all(host_param(it) is None for it in request.session.items)  # no host's own tests in this run
    for n in nodes:
        try:
            doc = n.gpu_inventory()
        except NodeError as e:
            if alone:
                verdicts.for_host(n.name).error(str(e).removeprefix(f"{n.name}: "), cause=e.cause)
            verdicts.record("driver_version", f"not read: {e}", extra={"host": n.name})
            continue
        if not doc.get("nvml_available"):
            continue
        drivers.setdefault(str(doc.get("driver")), []).append(n.name)
        declared = n.host.vars.get("gpu_sku")
        readable = present(typed(doc.get("gpus") or []))
        gpus_by_host[n.name] = readable
        if declared and readable:
            try:
                seen = detect_gpu(specs, readable[0])
            except ThresholdError as e:
                verdicts.fail(str(e), host=n.name)
                continue
            if seen.sku != declared:
                verdicts.fail(f"declares gpu_sku {declared} but carries {seen.sku}", host=n.name)
    verdicts.record("driver_versions", {k: len(v) for k, v in drivers.items()})
    if not drivers:
        pytest.skip("no host with an NVIDIA GPU in the selection")
    for host, why in fleet.driver_split(drivers):
        verdicts.fail(why, host=host)
    for host, why in fleet.shared_gpus(gpus_by_host, {n.name: n.host.address for n in nodes}):
        verdicts.fail(why, host=host, check="same_gpus", cause=Cause("configuration", "same_gpus", host))
    verdicts.finish()
