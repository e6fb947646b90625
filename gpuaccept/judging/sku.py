"""SKU detection: which ``thresholds/<sku>.yaml`` a node is judged against (judging side, pure).

A node's SKU is ``--sku``, else the inventory's ``gpu_sku``, else detected from NVML readings with the
``detect`` block of each threshold file (name, memory size range, PCI device id). Detection uses the keys
that were readable: a GPU whose memory reads "Not Supported" is detected by name and PCI device id; one whose
name cannot be read, by PCI device id (and memory). Lost GPUs (no NVML handle) are left out.
"""
from __future__ import annotations

from gpuaccept.errors import ThresholdError
from gpuaccept.judging.readings import error_text, is_lost, number
from gpuaccept.config.thresholds import SkuSpec


def detect_sku(specs: dict[str, SkuSpec], name, memory_bytes, pci_device_id=None) -> SkuSpec:
    """Pick the SKU whose ``detect`` block matches an NVML reading.

    ``name``: nvmlDeviceGetName (str, or an NVML error); ``memory_bytes``: total memory in bytes
    (nvmlDeviceGetMemoryInfo[_v2]); ``pci_device_id``: hex string like ``"0x233510de"``
    (nvmlDeviceGetPciInfo pciDeviceId). Any argument may be None or an NVML error: it is then not used.
    Raises ThresholdError naming what was read and the known SKUs when none (or several) match, or when
    neither name nor PCI device id could be read.
    """
    name_s = name.strip().lower() if isinstance(name, str) else None
    pci = pci_device_id.lower() if isinstance(pci_device_id, str) else None
    mem = number(memory_bytes)
    gib = mem / 2**30 if mem else None
    if name_s is None and pci is None:
        raise ThresholdError("cannot detect the GPU SKU: name unreadable (" + (error_text(name) or "missing")
                             + ") and PCI device id unreadable (" + (error_text(pci_device_id) or "missing")
                             + "); set gpu_sku in the inventory or pass --sku")
    hits = []
    for spec in specs.values():
        d = spec.detect
        names = [n.lower() for n in d.get("nvml_names", [])]
        ids = [i.lower() for i in d.get("pci_device_ids", [])]
        if name_s is not None and name_s not in names:
            continue
        if name_s is None and (not ids or pci not in ids):
            continue
        lo_hi = d.get("memory_gib")
        if lo_hi and gib is not None and not (lo_hi[0] <= gib <= lo_hi[1]):
            continue
        if ids and pci and pci not in ids:
            continue
        hits.append(spec)
    if len(hits) == 1:
        return hits[0]
    mem_s = f"{gib:.1f} GiB" if gib is not None else f"memory unreadable ({error_text(memory_bytes) or 'missing'})"
    what = f"'{name.strip()}'" if name_s is not None else f"PCI device id {pci_device_id}"
    if not hits:
        raise ThresholdError(f"unknown GPU SKU: NVML reports {what} with {mem_s}; known SKUs: "
                             f"{', '.join(sorted(specs))} (set gpu_sku in the inventory or pass --sku)")
    raise ThresholdError(f"GPU {what} with {mem_s} matches several SKUs: {', '.join(s.sku for s in hits)}")


def detect_gpu(specs: dict[str, SkuSpec], gpu: dict) -> SkuSpec:
    """:func:`detect_sku` on one GPU of a (typed) gpu_inventory document."""
    return detect_sku(specs, gpu.get("name"), gpu.get("memory_total_bytes"), gpu.get("pci_device_id"))


def node_sku(host: str, specs: dict[str, SkuSpec], override: str | None, declared: str | None,
             gpus: list[dict]) -> SkuSpec:
    """The SkuSpec of host ``host``: ``override`` (--sku), else ``declared`` (inventory gpu_sku), else
    detected from ``gpus`` (typed gpu_inventory GPUs; lost ones, and ones whose readable keys name no SKU,
    are not used when another GPU names one).

    Raises ThresholdError for an unknown SKU name, an undetectable GPU, and a node that mixes SKUs.
    """
    name = override or declared
    if name:
        if name not in specs:
            raise ThresholdError(f"{host}: unknown gpu_sku '{name}'; known SKUs: {', '.join(sorted(specs))}")
        return specs[name]
    found, first_error = set(), None
    for g in gpus:
        if is_lost(g):
            continue
        try:
            found.add(detect_gpu(specs, g).sku)
        except ThresholdError as e:  # this GPU's readings name no SKU; test_gpu_sku fails it
            first_error = first_error or e
    if not found and first_error is not None:
        raise ThresholdError(f"{host}: {first_error}")
    if len(found) != 1:
        raise ThresholdError(f"{host}: GPUs of several SKUs on one node: {', '.join(sorted(found))}" if found
                             else f"{host}: no GPU with an NVML handle to detect the SKU from")
    return specs[found.pop()]
