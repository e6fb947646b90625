"""PCI bus ids: one normaliser for every probe and for the controller (standard library only).

The PCI bus id is the key that ties every figure to a GPU, so its canonical form comes from here. Forms met:

- NVML (``nvmlDeviceGetPciInfo().busId``): ``00000000:19:00.0`` (8-digit domain, upper case);
- sysfs, ``lspci -D``, the NVSwitch driver's SXid lines: ``0000:19:00.0`` (4-digit domain, lower case);
- the NVIDIA kernel driver's Xid lines: ``PCI:0000:19:00`` (no function);
- torch device properties: separate integers (domain, bus, device).

The canonical form is NVML's: ``DDDDDDDD:BB:DD.F``, upper-case hex, function 0 when none is given
(source: NVML API reference, ``nvmlPciInfo_t.busId``, "The tuple domain:bus:device.function PCI identifier").
The controller imports this module as ``gpuaccept.probes._pci``; probes import it as ``_pci``.
"""
from __future__ import annotations

import re

_BUS_ID_RE = re.compile(
    r"^(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})(?:\.(?P<fn>[0-7]))?$"
)


def normalize_bus_id(bus_id) -> str | None:
    """Canonical ``DDDDDDDD:BB:DD.F`` form (``00000000:19:00.0``) of a PCI bus id, or None when it is not one.

    ``bus_id``: str or bytes in the NVML, sysfs or kernel-log form, with or without a ``PCI:`` prefix, the
    domain or the function; anything else (None, an ``{"nvml_error": ...}`` dict, garbage) gives None.
    Never raises.
    """
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode("ascii", "replace")
    if not isinstance(bus_id, str):
        return None
    s = bus_id.strip().rstrip("\x00")
    if s.upper().startswith("PCI:"):
        s = s[4:]
    m = _BUS_ID_RE.match(s)
    if not m:
        return None
    return from_parts(int(m.group("dom") or "0", 16), int(m.group("bus"), 16), int(m.group("dev"), 16),
                      int(m.group("fn") or "0"))


def from_parts(domain: int, bus: int, device: int, function: int = 0) -> str:
    """Canonical bus id from its integer parts (domain < 2**32, bus < 256, device < 32, function < 8)."""
    return "%08X:%02X:%02X.%X" % (domain, bus, device, function)


def sysfs_name(bus_id: str) -> str:
    """sysfs device name (``0000:1b:00.0``, the folder under /sys/bus/pci/devices) of a bus id in any form.

    Raises ValueError when ``bus_id`` is not a PCI bus id.
    """
    canon = normalize_bus_id(bus_id)
    if canon is None:
        raise ValueError(f"not a PCI bus id: {bus_id!r}")
    dom, bus, devfn = canon.split(":")
    return f"{int(dom, 16):04x}:{bus.lower()}:{devfn.lower()}"
