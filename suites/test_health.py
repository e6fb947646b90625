"""health layer: GPU inventory and health through NVML (probes: gpu_inventory, xid_events).

Each check is its own test so that ``-k`` finds it. Readings NVML could not give come from the probe as
``{"nvml_error": ...}``: a field the SKU file lists under ``expect.required_nvml`` then fails; it is never
read as healthy.
"""
import pytest

from gpuaccept.node import Node
from gpuaccept.thresholds import detect_sku
from gpuaccept.xid import classify

pytestmark = pytest.mark.health


def nvml_error(v) -> str | None:
    """The NVML error text of a reading the probe could not take, else None."""
    return v.get("nvml_error") if isinstance(v, dict) and "nvml_error" in v else None


def _required(sku, field: str) -> bool:
    return field in (sku.expect.get("required_nvml") or [])


def test_gpu_inventory(node: Node, gpus, verdicts):
    """Count against gpus_per_node; name, memory, UUID, serial, PCI bus id, driver and CUDA driver versions."""
    doc = node.gpu_inventory()
    verdicts.record("driver_version", doc.get("driver"))
    verdicts.record("cuda_driver_version", doc.get("cuda_driver_version"))
    for g in gpus:
        verdicts.record("name", g.get("name"), gpu=g)
        mem = g.get("memory_total_bytes")
        verdicts.record("memory_total_gib", round(mem / 2**30, 2) if isinstance(mem, int) else mem, "GiB", gpu=g)
        verdicts.record("uuid", g.get("uuid"), gpu=g)
    verdicts.record("gpu_count", len(gpus), "GPUs")
    want = node.host.vars.get("gpus_per_node")
    if want is not None and int(want) != len(gpus):
        verdicts.fail(f"gpu_count {len(gpus)} != gpus_per_node {want} (NVML sees "
                      f"{', '.join(str(g.get('pci_bus_id')) for g in gpus)})")
    verdicts.finish()


def test_gpu_sku(node: Node, gpus, sku, verdicts):
    """The SKU detected from NVML name, memory size and PCI device id matches the one the run expects."""
    for g in gpus:
        seen = detect_sku(node.specs, g.get("name", "?"), g.get("memory_total_bytes"), g.get("pci_device_id"))
        verdicts.record("sku", seen.sku, gpu=g)
        if seen.sku != sku.sku:
            verdicts.fail(f"detected SKU {seen.sku} ('{g.get('name')}') but the run expects {sku.sku}", gpu=g)
    verdicts.finish()


def test_driver_versions(node: Node, gpus, verdicts):
    """The NVML library and the loaded kernel module agree (a mismatch breaks every CUDA program)."""
    doc = node.gpu_inventory()
    lib, kmod = doc.get("driver"), doc.get("kernel_driver_version")
    verdicts.record("nvml_driver_version", lib)
    verdicts.record("kernel_driver_version", kmod)
    if lib and kmod and lib != kmod:
        verdicts.fail(f"NVML library / kernel driver mismatch: library {lib}, kernel module {kmod} (reboot or reload)")
    verdicts.finish()


def test_ecc(node: Node, gpus, sku, verdicts):
    """ECC enabled (where the SKU has it); no uncorrectable ECC errors, volatile or aggregate."""
    for g in gpus:
        ecc = g.get("ecc") or {}
        if sku.expect.get("ecc"):
            mode = ecc.get("mode_current")
            verdicts.record("ecc_mode", mode, gpu=g)
            if nvml_error(mode):
                verdicts.fail(f"ECC mode unreadable ({nvml_error(mode)})", gpu=g)
            elif not mode:
                verdicts.fail("ECC is disabled", gpu=g)
        for key in ("uncorrected_volatile", "uncorrected_aggregate"):
            val = ecc.get(key)
            if nvml_error(val):
                if _required(sku, "ecc"):
                    verdicts.fail(f"ecc {key} unreadable ({nvml_error(val)})", gpu=g)
                continue
            verdicts.record(f"ecc_{key}", val, gpu=g, limit=sku.checks.get(f"ecc_{key}"))
        verdicts.record("ecc_corrected_aggregate", ecc.get("corrected_aggregate"), "errors", gpu=g)
    verdicts.finish()


def test_row_remapping(node: Node, gpus, sku, verdicts):
    """Row remapping (Ampere and later): pending = reset needed, failure = replace the GPU, uncorrectable
    remaps over the SKU's limit fail; correctable remaps are recorded. Retired pages on older SKUs."""
    for g in gpus:
        rows = g.get("remapped_rows") or {}
        if not sku.expect.get("row_remapping", False):
            pages = g.get("retired_pages") or {}
            verdicts.record("retired_pages_double_bit", pages.get("double_bit"), "pages", gpu=g,
                            limit=sku.checks.get("retired_pages_double_bit"))
            if pages.get("pending") is True:
                verdicts.fail("page retirement pending: reset needed", gpu=g)
            continue
        if nvml_error(rows.get("pending")):
            verdicts.fail(f"row remapping unreadable ({nvml_error(rows.get('pending'))})", gpu=g)
            continue
        verdicts.record("remapped_rows_correctable", rows.get("correctable"), "rows", gpu=g)
        verdicts.record("remapped_rows_uncorrectable", rows.get("uncorrectable"), "rows", gpu=g,
                        limit=sku.checks.get("remapped_rows_uncorrectable"))
        if rows.get("pending"):
            verdicts.fail("row remap pending: reset needed", gpu=g)
        if rows.get("failure"):
            verdicts.fail("row remap failure: replace the GPU", gpu=g)
    verdicts.finish()


def test_pcie_link(node: Node, gpus, sku, verdicts):
    """PCIe gen and width read while host-to-device copies load the link (idle GPUs downshift), against
    the SKU's expected link, not only NVML's maximum: a Gen4 or x8 slot hides behind a Gen5 x16 maximum."""
    doc = node.probe("pcie_link", {"seconds": 1.5})
    for g in doc["gpus"]:
        for key, check in (("gen", "pcie_gen"), ("width", "pcie_width")):
            val = g.get(key)
            if nvml_error(val):
                verdicts.fail(f"PCIe {key} unreadable under load ({nvml_error(val)})", gpu=g)
                continue
            verdicts.record(check, val, gpu=g, limit=sku.checks.get(check),
                            extra={"max": g.get(f"{key}_max"), "idle": g.get(f"{key}_idle")})
    verdicts.finish()


def test_preflight(node: Node, gpus, sku, verdicts):
    """No foreign processes on the GPUs, persistence mode on, MIG mode as the SKU expects."""
    for g in gpus:
        procs = g.get("compute_processes")
        if isinstance(procs, list) and procs:
            verdicts.fail("foreign processes on the GPU: " + ", ".join(
                f"pid {p.get('pid')} {p.get('name') or '?'}" for p in procs), gpu=g)
        verdicts.record("persistence_mode", g.get("persistence_mode"), gpu=g)
        if g.get("persistence_mode") is False and sku.expect.get("persistence_mode", True):
            verdicts.fail("persistence mode is off", gpu=g)
        mig = (g.get("mig_mode") or {}).get("current")
        verdicts.record("mig_mode", mig, gpu=g)
        if isinstance(mig, bool) and mig != bool(sku.expect.get("mig_mode", False)):
            verdicts.fail(f"MIG mode is {'on' if mig else 'off'}, the SKU file expects "
                          f"{'on' if sku.expect.get('mig_mode') else 'off'}", gpu=g)
    verdicts.finish()


def test_fabric(node: Node, gpus, sku, verdicts):
    """On NVSwitch SKUs the GPU fabric (NVML GPU fabric info) is registered and healthy."""
    if not sku.expect.get("nvswitch"):
        pytest.skip(f"{sku.sku}: no NVSwitch fabric")
    for g in gpus:
        fab = g.get("fabric") or {}
        verdicts.record("fabric_state", fab.get("state") if not nvml_error(fab) else fab, gpu=g)
        if nvml_error(fab):
            if _required(sku, "fabric"):
                verdicts.fail(f"fabric info unreadable ({nvml_error(fab)})", gpu=g)
        elif str(fab.get("state")).lower() != "completed" or str(fab.get("status")).lower() not in ("none", "success"):
            verdicts.fail(f"fabric state {fab.get('state')}, status {fab.get('status')}", gpu=g)
    verdicts.finish()


def test_xid_events(node: Node, gpus, run_started, request, verdicts):
    """XID events in the kernel log since the run began (or --xid-window seconds): hardware and driver
    XIDs fail, application XIDs are recorded. An unreadable log is an error, never "0 XIDs"."""
    window = request.config.getoption("xid_window")
    since = run_started - window if window else run_started
    doc = node.probe("xid_events", {"since_epoch": since})
    by_bus = {str(g.get("pci_bus_id")).lower(): g for g in gpus}
    verdicts.record("xid_log_source", doc.get("source"))
    events = classify(doc.get("events") or [])
    verdicts.record("xid_events", len(events), "events", extra={"events": events[:50]})
    for ev in events:
        g = by_bus.get(str(ev.get("pci_bus_id")).lower())
        if ev.get("fails"):
            verdicts.fail(ev.get("message") or f"Xid {ev.get('xid')}", gpu=g)
    verdicts.finish()


def test_fleet_consistency(nodes, verdicts):
    """All selected hosts run one driver version, and each host carries the SKU its group declares."""
    drivers: dict[str, list[str]] = {}
    for n in nodes:
        try:
            doc = n.gpu_inventory()
        except Exception as e:  # an unreachable host is reported by its own tests
            verdicts.record("driver_version", f"unreachable: {e}", extra={"host": n.name})
            continue
        if not doc.get("nvml_available"):
            continue
        drivers.setdefault(str(doc.get("driver")), []).append(n.name)
        declared = n.host.vars.get("gpu_sku")
        if declared and doc.get("gpus"):
            g = doc["gpus"][0]
            seen = detect_sku(n.specs, g.get("name", "?"), g.get("memory_total_bytes"), g.get("pci_device_id"))
            if seen.sku != declared:
                verdicts.fail(f"{n.name} declares gpu_sku {declared} but carries {seen.sku}")
    verdicts.record("driver_versions", {k: len(v) for k, v in drivers.items()})
    if not drivers:
        pytest.skip("no host with an NVIDIA GPU in the selection")
    if len(drivers) > 1:
        verdicts.fail("hosts run different drivers: " + "; ".join(f"{d}: {', '.join(h[:10])}" for d, h in drivers.items()))
    verdicts.finish()
