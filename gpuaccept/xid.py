"""XID catalogue and classification (controller side, pure).

The NVIDIA driver reports GPU faults as "Xid" numbers in the kernel log (``NVRM: Xid (PCI:...): 79, ...``);
the ``xid_events`` probe collects them and :func:`classify` decides which ones fail a node.

Source of the catalogue: NVIDIA, "XID Errors" (https://docs.nvidia.com/deploy/xid-errors/index.html) and
its Ampere-and-later "Xid Catalog" (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html),
whose "Resolution Bucket (Immediate Action)" column (RESTART_APP, RESET_GPU, RESTART_BM, CONTACT_SUPPORT,
WORKFLOW_XID_48, IGNORE) the ``action`` texts below follow. Names are NVIDIA's short descriptions.

Categories:

- ``hardware``: a fault of the GPU, its memory, its NVLink/C2C links or its PCIe attachment. Fails.
- ``driver``: driver / GPU firmware (GSP, PMU) fault, or one NVIDIA attributes to driver-or-hardware. Fails.
- ``application``: usually the program's own bug (illegal address, killed channel). Recorded, does not fail.
- ``informational``: a notice, not a fault. Recorded, does not fail.
- ``unknown``: a number missing from this table. Fails (conservative); the message says so.

During an acceptance run our own benchmarks are the only applications, so an application XID is still
worth reading in the report; it just does not by itself condemn the hardware.
"""
from __future__ import annotations

import re
from typing import NamedTuple

CATALOGUE_URL = "https://docs.nvidia.com/deploy/xid-errors/index.html"


class XidInfo(NamedTuple):
    """One catalogue entry: NVIDIA's name, our category, and the immediate action to take."""

    name: str
    category: str  # "hardware" | "application" | "driver" | "informational"
    action: str


FAILING_CATEGORIES = frozenset({"hardware", "driver", "unknown"})

XID_CATALOGUE: dict[int, XidInfo] = {
    13: XidInfo("Graphics Engine Exception", "application",
                "RESTART_APP: usually an application bug (illegal instruction or address); "
                "if it repeats with known-good code, run diagnostics (dcgmi diag)"),
    31: XidInfo("GPU memory page fault (MMU fault)", "application",
                "RESTART_APP: the application accessed an invalid address; fix the application"),
    32: XidInfo("Invalid or corrupted push buffer stream", "driver",
                "RESET_GPU: driver error, system memory corruption, PCIe bus error or thermal issue; "
                "check the driver and the PCIe link"),
    43: XidInfo("GPU stopped processing", "application",
                "RESTART_APP: a user application fault; the GPU remains healthy"),
    45: XidInfo("Preemptive cleanup, due to previous errors", "application",
                "IGNORE: follows an application being killed or another Xid; look at the first Xid"),
    48: XidInfo("Double Bit ECC Error (DBE)", "hardware",
                "WORKFLOW_XID_48: drain the GPU and reset it; if followed by Xid 63/64 handle the row "
                "remapping; repeated DBEs mean RMA"),
    56: XidInfo("Display Engine error", "driver",
                "RESET_GPU: driver or hardware error; contact support if it repeats"),
    57: XidInfo("Error programming video memory interface", "hardware",
                "RESET_GPU: driver or hardware (memory interface) error; contact support if it repeats"),
    61: XidInfo("Internal micro-controller breakpoint/warning", "driver",
                "RESET_GPU: GPU firmware (PMU) fault; update the driver, contact support if it repeats"),
    62: XidInfo("Internal micro-controller halt", "driver",
                "RESET_GPU: GPU firmware halted (driver, firmware or thermal); contact support if it repeats"),
    63: XidInfo("ECC page retirement or row remapping recording event", "hardware",
                "RESET_GPU: a memory row was marked for remapping; reset the GPU to apply it, then check "
                "nvidia-smi -q -d ROW_REMAPPER"),
    64: XidInfo("ECC page retirement or row remapper recording failure", "hardware",
                "RESET_GPU, then CONTACT_SUPPORT: the remapping could not be recorded; likely RMA"),
    68: XidInfo("NVDEC0 Exception (video processor exception)", "driver",
                "RESTART_APP, RESET_GPU if it repeats: driver or hardware error in the video decoder"),
    69: XidInfo("Graphics Engine class error", "driver",
                "RESET_GPU: driver or hardware error; contact support if it repeats"),
    74: XidInfo("NVLink Error", "hardware",
                "RESET_GPU: check the NVLink links (nvidia-smi nvlink -s / -e), NVSwitch and fabric "
                "manager; repeated errors on one link mean RMA"),
    79: XidInfo("GPU has fallen off the bus", "hardware",
                "RESTART_BM: reboot the node; check PCIe seating, power and the kernel's AER messages; "
                "RMA if it repeats"),
    92: XidInfo("High single-bit ECC error rate", "hardware",
                "CONTACT_SUPPORT if it persists: memory is degrading"),
    94: XidInfo("Contained ECC error", "hardware",
                "RESTART_APP (the affected application was stopped), then reset the GPU when convenient "
                "to apply row remapping"),
    95: XidInfo("Uncontained ECC error", "hardware",
                "RESET_GPU: every application on the GPU is affected; RMA if it repeats"),
    109: XidInfo("Context Switch Timeout Error", "driver",
                 "RESTART_APP, RESET_GPU if it repeats: driver, application or hardware"),
    110: XidInfo("Security Fault Error", "hardware",
                 "RESET_GPU: hardware error; contact support if it repeats"),
    119: XidInfo("GSP RPC Timeout", "driver",
                 "RESET_GPU (often a node reboot): the GPU System Processor firmware stopped answering; "
                 "update driver/firmware, contact support if it repeats"),
    120: XidInfo("GSP Error", "driver",
                 "RESET_GPU: GPU System Processor firmware error; contact support if it repeats"),
    121: XidInfo("C2C Link corrected error", "hardware",
                 "CONTACT_SUPPORT if it persists: corrected errors on the chip-to-chip (Grace-Hopper) link"),
    122: XidInfo("SPI PMU RPC Read Failure", "driver",
                 "RESET_GPU: firmware (SPI/PMU) failure; contact support if it repeats"),
    123: XidInfo("SPI PMU RPC Write Failure", "driver",
                 "RESET_GPU: firmware (SPI/PMU) failure; contact support if it repeats"),
    124: XidInfo("SPI PMU RPC Erase Failure", "driver",
                 "RESET_GPU: firmware (SPI/PMU) failure; contact support if it repeats"),
    140: XidInfo("Unrecovered ECC Error", "hardware",
                 "RESET_GPU: uncorrectable memory errors the driver could not contain by page "
                 "offlining/row remapping; RMA if it repeats"),
    143: XidInfo("GPU Initialization Failure", "hardware",
                 "RESTART_BM, then CONTACT_SUPPORT: the GPU failed to initialise"),
    144: XidInfo("NVLink SAW error", "hardware",
                 "RESET_GPU: NVLink error (Blackwell); check the link and the NVLink switch tray"),
    145: XidInfo("NVLink RLW error", "hardware",
                 "RESET_GPU: NVLink error (Blackwell); check the link and the NVLink switch tray"),
    146: XidInfo("NVLink TLW error", "hardware",
                 "RESET_GPU: NVLink error (Blackwell); check the link and the NVLink switch tray"),
    147: XidInfo("NVLink TREX error", "hardware",
                 "RESET_GPU: NVLink error (Blackwell); check the link and the NVLink switch tray"),
    148: XidInfo("NVLink NVLPW control error", "hardware",
                 "RESET_GPU: NVLink error (Blackwell); check the link and the NVLink switch tray"),
    149: XidInfo("NVLink NETIR error", "hardware",
                 "RESET_GPU: NVLink error (Blackwell); check the link and the NVLink switch tray"),
    150: XidInfo("NVLink MSE error", "hardware",
                 "RESET_GPU: NVLink error (Blackwell); check the link and the NVLink switch tray"),
    154: XidInfo("GPU recovery action changed", "informational",
                 "follow the recovery action it names (GPU reset required, node reboot required, drain and "
                 "reset); fails unless the new action is None"),
}

# "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
_RECOVERY_TO_RE = re.compile(r"\bto\s+(?:0x[0-9a-fA-F]+\s*)?\((?P<action>[^)]*)\)")


def recovery_action(msg: str) -> str | None:
    """The new recovery action named by an Xid 154 message (``"GPU Reset Required"``), or None."""
    m = _RECOVERY_TO_RE.search(msg or "")
    return m.group("action").strip() if m else None


def classify_one(event: dict) -> dict:
    """One event with ``name``, ``category``, ``fails``, ``action`` and an operator ``message`` added."""
    out = dict(event)
    xid = event.get("xid")
    where = event.get("pci_bus_id") or "?"
    try:
        xid = int(xid)
    except (TypeError, ValueError):
        xid = None
    info = XID_CATALOGUE.get(xid) if xid is not None else None
    if info is None:
        out.update(name="unknown Xid", category="unknown", fails=True,
                   action=f"look it up in NVIDIA's XID catalogue ({CATALOGUE_URL})")
        out["message"] = (f"Xid {xid if xid is not None else event.get('xid')!r} on {where} is not in gpuaccept's "
                          f"catalogue: treated as a failure (see {CATALOGUE_URL}); log: {event.get('msg', '')}")
        return out
    fails = info.category in FAILING_CATEGORIES
    category = info.category
    if xid == 154:
        action = recovery_action(" ".join([event.get("msg") or ""] + list(event.get("continuation") or [])))
        fails = action is None or action.lower() != "none"
        if fails:
            category = "driver"
    out.update(name=info.name, category=category, fails=fails, action=info.action)
    verdict = "fails" if fails else "recorded"
    out["message"] = (f"Xid {xid} on {where}: {info.name} ({category}, {verdict}); action: {info.action}; "
                      f"log: {event.get('msg', '')}")
    return out


def classify(events: list[dict]) -> list[dict]:
    """Classify ``xid_events`` probe events (see gpuaccept/probes/xid_events.py).

    Each returned dict is the event plus ``name``, ``category`` (hardware | driver | application |
    informational | unknown), ``fails`` (bool), ``action`` and ``message``. Hardware and driver faults fail;
    application and informational XIDs are recorded only; unknown numbers fail (conservative). Xid 154
    fails unless the recovery action it announces is "None".
    """
    return [classify_one(e) for e in events]
