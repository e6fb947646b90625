"""Shared NVML helpers of the probes (gpu_inventory, nvlink): every reading NVML refuses becomes an
``{"nvml_error": ...}`` placeholder, never a value that could pass for healthy. Standard library only
(the caller passes the pynvml module in).

The one rule that tells which NVML GPU a torch (CUDA) device is lives here too: :func:`pair_by_bus_id` (by PCI
bus id, never by index); ``_gpu.pair_with_nvml`` applies it to the node's torch devices.
"""
from __future__ import annotations

from collections import namedtuple


def nvml_error(exc: BaseException) -> dict:
    """Return ``{"nvml_error": ...}`` for an exception raised by (or around) an NVML call.

    An ``NVMLError`` gives its own string (``"Not Supported"``, ``"GPU is lost"``); anything else gets its
    type name in front so a binding bug is not mistaken for an NVML answer.
    """
    if type(exc).__name__.startswith("NVMLError"):
        try:
            return {"nvml_error": str(exc)}
        except Exception:  # str() of an unknown code calls into the library
            return {"nvml_error": f"NVML error code {getattr(exc, 'value', '?')}"}
    return {"nvml_error": f"{type(exc).__name__}: {exc}".strip()}


def is_error(value) -> bool:
    """True when ``value`` is an ``{"nvml_error": ...}`` placeholder."""
    return isinstance(value, dict) and "nvml_error" in value


def error_code(exc: BaseException):
    """The nvmlReturn_t value of an NVMLError (``exc.value``), or None for other exceptions."""
    return getattr(exc, "value", None) if type(exc).__name__.startswith("NVMLError") else None


def call(nv, name: str, *args, conv=None):
    """Call ``nv.<name>(*args)`` and return its value (through ``conv``) or an ``nvml_error`` placeholder.

    ``nv`` is the pynvml module. A function this pynvml does not have is reported, not raised.
    """
    fn = getattr(nv, name, None)
    if fn is None:
        return {"nvml_error": f"pynvml has no {name}"}
    try:
        value = fn(*args)
        return conv(value) if conv is not None else value
    except Exception as e:  # NVMLError, NVMLLibraryMismatchError, ctypes errors
        return nvml_error(e)


def text(value) -> str:
    """Decode bytes (older pynvml returns bytes for char arrays) and strip NULs."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).rstrip("\x00")


# -- pairing torch (CUDA) devices with NVML devices -------------------------------------------------------
try:
    from _pci import normalize_bus_id
except ImportError:  # imported as gpuaccept.probes._nvml (the controller's tests of the pure functions)
    from ._pci import normalize_bus_id


class Pairing(namedtuple("Pairing", "nvml_of torch_of hidden unmatched")):
    """Which NVML GPU each torch (CUDA) device is: the result of :func:`pair_by_bus_id` (immutable).

    ``nvml_of``: torch index -> NVML index; ``torch_of``: NVML index -> torch index (the first torch device on
    it); ``hidden``: NVML indices no torch device is (CUDA_VISIBLE_DEVICES hides them, or CUDA cannot open them);
    ``unmatched``: torch indices whose bus id is unknown (None) or none NVML lists. Where ``unmatched`` is not
    empty a GPU in ``hidden`` may be one of them (:attr:`certain` False). A named tuple, not a dataclass: every
    probe that reads NVML imports this file, and ``dataclasses`` (with ``inspect`` and ``ast``) would cost each of
    them about 10 ms of a node's CPU at its start."""

    __slots__ = ()

    @property
    def certain(self) -> bool:
        """True when every torch device was found among NVML's GPUs (so ``hidden`` is surely hidden)."""
        return not self.unmatched


def pair_by_bus_id(torch_bus_ids: list, nvml_bus_ids: list) -> Pairing:
    """The one rule that pairs torch devices with NVML devices (pure): by PCI bus id, never by index.

    ``torch_bus_ids``: the bus id of each torch device in torch's order (``_gpu.pci_bus_id`` of its properties;
    None where torch gives none); ``nvml_bus_ids``: each NVML GPU's ``nvmlDeviceGetPciInfo().busId`` in NVML's
    order (None where NVML gave no handle). Returns a :class:`Pairing`. Both are compared in :func:`_pci.normalize_bus_id`'s canonical form,
    so ``0000:1b:00.0`` and ``00000000:1B:00.0`` are one GPU.

    Why not by index: torch's device ``i`` is the ``i``-th GPU CUDA enumerates, after ``CUDA_VISIBLE_DEVICES``
    (which hides, reorders, or names GPUs by UUID or MIG instance) and ``CUDA_DEVICE_ORDER`` (default
    FASTEST_FIRST) are applied; NVML's index ignores both (NVML API reference, nvmlDeviceGetHandleByIndex: "The
    NVML index may not correlate with other APIs, such as the CUDA device index"; CUDA C Programming Guide, "CUDA
    Environment Variables"). The PCI bus id is the same on both sides.

    Two torch devices on one GPU (MIG instances) both map to it; ``torch_of`` keeps the first. Never raises."""
    nvml_keys = [normalize_bus_id(b) for b in nvml_bus_ids]
    where = {}
    for j, key in enumerate(nvml_keys):
        if key is not None:
            where.setdefault(key, j)
    nvml_of, torch_of, unmatched = {}, {}, []
    for i, bus in enumerate(torch_bus_ids):
        j = where.get(normalize_bus_id(bus))
        if j is None:
            unmatched.append(i)
            continue
        nvml_of[i] = j
        torch_of.setdefault(j, i)
    hidden = [j for j in range(len(nvml_keys)) if j not in torch_of]
    return Pairing(nvml_of, torch_of, hidden, unmatched)


def nvml_bus_ids(nv) -> list:
    """Each NVML GPU's PCI bus id (``nvmlDeviceGetPciInfo(nvmlDeviceGetHandleByIndex(i)).busId``, text) in NVML's
    index order; None for a GPU NVML gives no handle or bus id for. ``nv``: the pynvml module, initialised.
    Raises what nvmlDeviceGetCount raises."""
    out = []
    for i in range(nv.nvmlDeviceGetCount()):
        bus = call(nv, "nvmlDeviceGetHandleByIndex", i)
        if not is_error(bus):
            bus = call(nv, "nvmlDeviceGetPciInfo", bus, conv=lambda p: text(p.busId))
        out.append(None if is_error(bus) else bus)
    return out
