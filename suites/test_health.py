"""health layer: GPU inventory and health through NVML (probe: gpu_inventory)."""
import pytest

from gpuaccept.node import Node

pytestmark = pytest.mark.health


def _nvml_value(v):
    """NVML fields the probe could not read come as {"nvml_error": ...}: never read those as healthy."""
    return None if isinstance(v, dict) and "nvml_error" in v else v


def test_gpu_inventory(node: Node, gpus, verdicts):
    """Count against gpus_per_node; name, memory, UUID, serial, PCI bus id, driver and CUDA driver versions."""
    doc = node.gpu_inventory()
    verdicts.record("driver_version", doc.get("driver"))
    verdicts.record("cuda_driver_version", doc.get("cuda_driver_version"))
    for g in gpus:
        verdicts.record("name", g.get("name"), gpu=g)
        verdicts.record("memory_total_gib", round(g["memory_total_bytes"] / 2**30, 2), "GiB", gpu=g)
        verdicts.record("uuid", g.get("uuid"), gpu=g)
    verdicts.record("gpu_count", len(gpus), "GPUs")
    want = node.host.vars.get("gpus_per_node")
    if want is not None and int(want) != len(gpus):
        verdicts.fail(f"gpu_count {len(gpus)} != gpus_per_node {want} (NVML sees "
                      f"{', '.join(str(g.get('pci_bus_id')) for g in gpus)})")
    verdicts.finish()


def test_gpu_sku(node: Node, gpus, sku, verdicts):
    """The SKU detected from NVML name, memory size and PCI device id matches the one the inventory declares."""
    from gpuaccept.thresholds import detect_sku
    for g in gpus:
        seen = detect_sku(node.specs, g.get("name", "?"), g.get("memory_total_bytes"), g.get("pci_device_id"))
        verdicts.record("sku", seen.sku, gpu=g)
        if seen.sku != sku.sku:
            verdicts.fail(f"detected SKU {seen.sku} ('{g.get('name')}') but the run expects {sku.sku}", gpu=g)
    verdicts.finish()
