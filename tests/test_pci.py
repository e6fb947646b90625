"""One PCI bus-id normaliser (gpuaccept/probes/_pci.py) for the probes and the controller.

The node copy is the source: probes import it as ``_pci``, the controller as ``gpuaccept.probes._pci``, and
every probe function that turns a bus id into another form delegates to it. These tests hold every user to it
and fail when a new copy appears."""
from __future__ import annotations

import re
import types

import pytest

from gpuaccept.probes import _pci
from probe_helpers import PROBES, ROOT, load_probe


@pytest.mark.parametrize("raw, want", [
    ("00000000:19:00.0", "00000000:19:00.0"),     # NVML
    ("0000:af:00", "00000000:AF:00.0"),           # kernel Xid line
    ("PCI:0000:3b:00", "00000000:3B:00.0"),
    ("0000:c1:00.0", "00000000:C1:00.0"),         # sysfs / SXid line
    ("0004:00:00.0", "00000004:00:00.0"),
    ("10000:01:00.0", "00010000:01:00.0"),        # VMD domains are wider than 4 digits
    (b"00000000:1B:00.0\x00", "00000000:1B:00.0"),  # NVML char array through ctypes
    ("junk", None), (None, None), ({"nvml_error": "Not Supported"}, None), ("", None),
])
def test_normalize_bus_id(raw, want):
    assert _pci.normalize_bus_id(raw) == want


def test_sysfs_name_and_parts():
    assert _pci.sysfs_name("00000000:1B:00.0") == "0000:1b:00.0"
    assert _pci.sysfs_name("0000:9a:00.0") == "0000:9a:00.0"
    assert _pci.from_parts(0, 0x1B, 0, 0) == "00000000:1B:00.0"
    with pytest.raises(ValueError, match="not a PCI bus id"):
        _pci.sysfs_name("garbage")


SAMPLES = ["00000000:19:00.0", "0000:af:00", "PCI:0000:3b:00", "0000:c1:00.0", "junk"]


def test_every_probe_normaliser_delegates_to_pci():
    inv, nvl, xev = load_probe("gpu_inventory"), load_probe("nvlink"), load_probe("xid_events")
    for s in SAMPLES:
        want = _pci.normalize_bus_id(s)
        assert inv.normalize_bus_id(s) == want
        assert nvl.normalize_bus_id(s) == want
        if want:
            assert xev.normalize_pci(s) == want
    rdma = load_probe("rdma")
    assert rdma.sysfs_bdf("00000000:19:00.0") == _pci.sysfs_name("00000000:19:00.0") == "0000:19:00.0"


def test_torch_probe_helpers_delegate_to_pci():
    pytest.importorskip("torch", reason="the torch probes need torch (README: optional on the controller)")
    gpu, pcie = load_probe("_gpu"), load_probe("pcie_bandwidth")
    props = types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0x1B, pci_device_id=0)
    assert gpu.pci_bus_id(props) == _pci.from_parts(0, 0x1B, 0) == "00000000:1B:00.0"
    assert gpu.pci_bus_id(object()) is None
    assert pcie.sysfs_pci_name("00000000:1B:00.0") == _pci.sysfs_name("00000000:1B:00.0")


def test_controller_uses_the_node_copy():
    assert _pci.__file__ == str(PROBES / "_pci.py")
    assert "from gpuaccept.probes._pci import normalize_bus_id" in (ROOT / "gpuaccept" / "suites" / "test_health.py").read_text()


# a bus id built or reformatted by hand: "%08X:%02X", f"{x:08X}", or a split(":") of a bus id
COPY_RE = re.compile(r"%08X:%02X|:08X\}:|:04x\}:|bus_id\.strip\(\)\.split\(\":\"\)")


def test_no_other_copy_of_the_normaliser():
    files = [p for p in (ROOT / "gpuaccept").rglob("*.py") if p.name != "_pci.py"] + list((ROOT / "suites").glob("*.py"))
    copies = [f"{p.relative_to(ROOT)}:{i}" for p in files
              for i, line in enumerate(p.read_text().splitlines(), 1) if COPY_RE.search(line)]
    assert copies == []
