"""A sysfs tree laid out as the kernel's PCI bus (Linux Documentation/ABI/testing/sysfs-bus-pci), built in a
test's tmp folder for the gpu_inventory probe's PCI scan: real folders, files and symlinks.

``/sys/bus/pci/devices/<name>`` is a symlink to ``/sys/devices/pci0000:00/<name>``, whose ``driver`` is a symlink
to ``/sys/bus/pci/drivers/<driver>`` (absent when no driver is bound), as on a real node.
"""
from __future__ import annotations

import os
from pathlib import Path

#: PCI ids of the parts the tests lay out (PCI-SIG vendor ids; NVIDIA device ids as the H200 captures read them)
NVIDIA, INTEL = "0x10de", "0x8086"
H200_DEVICE = "0x2335"  # tests/data/replay-h200x2 gpu_inventory: pci_device_id 0x233510de
CLASS_3D, CLASS_VGA, CLASS_AUDIO, CLASS_BRIDGE = "0x030200", "0x030000", "0x040300", "0x068000"


def add_device(sysfs: Path, name: str, vendor: str = NVIDIA, cls: str = CLASS_3D, device: str = H200_DEVICE,
               driver: str | None = "nvidia") -> Path:
    """One PCI function ``name`` (sysfs form, ``0000:19:00.0``) under ``sysfs``; returns its real folder."""
    real = sysfs / "devices" / "pci0000:00" / name
    real.mkdir(parents=True)
    (real / "vendor").write_text(vendor + "\n")
    (real / "device").write_text(device + "\n")
    (real / "class").write_text(cls + "\n")
    if driver is not None:
        drv = sysfs / "bus" / "pci" / "drivers" / driver
        drv.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(drv, real), real / "driver")
    link = sysfs / "bus" / "pci" / "devices"
    link.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(real, link), link / name)
    return real


def add_slot(sysfs: Path, slot: str, address: str, adapter: str | None = "1") -> Path:
    """A slot folder ``/sys/bus/pci/slots/<slot>`` with ``address`` (``0000:1c:00``) and, for a hot-plug slot,
    ``adapter`` (``1``: a card is seated; None: no such file, a slot without a hot-plug driver)."""
    d = sysfs / "bus" / "pci" / "slots" / slot
    d.mkdir(parents=True)
    (d / "address").write_text(address + "\n")
    if adapter is not None:
        (d / "adapter").write_text(adapter + "\n")
    return d


def sysfs_tree(root: Path, gpus: dict[str, str | None], others: bool = True) -> Path:
    """A sysfs root under ``root`` with the NVIDIA 3D controllers ``gpus`` ({sysfs name: bound driver or None})
    and, with ``others``, parts the scan must pass over: the GPU's HDMI audio function, an NVSwitch bridge and an
    Intel NIC."""
    sysfs = root / "sys"
    for name, driver in gpus.items():
        add_device(sysfs, name, driver=driver)
    if others:
        add_device(sysfs, "0000:00:1f.1", cls=CLASS_AUDIO, device="0x22e8", driver="snd_hda_intel")
        add_device(sysfs, "0000:c1:00.0", cls=CLASS_BRIDGE, device="0x22a3", driver="nvidia-nvswitch")
        add_device(sysfs, "0000:3b:00.0", vendor=INTEL, cls="0x020000", device="0x1593", driver="ice")
    return sysfs
