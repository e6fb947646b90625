"""Why a node shows another GPU count than its inventory's ``gpus_per_node`` (pure): the cause of ``gpu_count``.

A short count is not by itself a lost card. The gpu_inventory probe reads, beside NVML, the NVIDIA GPUs on the
PCI bus from sysfs (``pci_scan``: bus id, bound driver; hot-plug slots that hold a card) and what can hide GPUs
from NVML in the probes' own process (``gpu_visibility``: NVIDIA_VISIBLE_DEVICES, a container or job cgroup).
:func:`explain` compares them and sorts the GPUs NVML does not list into groups, each with its cause class:

====================================================  ===============  ========================================
GPUs NVML does not list                               class            kind (gpuaccept/data/actions.yaml causes)
====================================================  ===============  ========================================
NVML lists GPUs it has no handle for (lost)           hardware         ``gpu_count_lost``
NVML lists GPUs the probes' user may not open         configuration    ``gpu_count_denied``
NVML lists GPUs it has no handle for, another error   unverified       ``gpu_count_no_handle``
on the bus, bound to ``nvidia``, listed by NVML as   configuration    ``gpu_excluded``
excluded (the module's NVreg_ExcludedGpus)
on the bus, bound to ``nvidia``, not hidden; or an    hardware         ``gpu_not_initialised``
Xid 79 / "RmInitAdapter failed" names its bus id
on the bus, bound to ``nvidia``, the probes run       configuration    ``gpu_count_hidden``
under NVIDIA_VISIBLE_DEVICES or in a container/job
on the bus, bound to another driver (vfio-pci,        configuration    ``gpu_driver_binding``
nouveau) or to none
not on the bus, with evidence that one fell off: an   hardware         ``gpu_off_bus``
Xid 79 / RmInitAdapter failure of a bus id the scan
lacks, a seated card with no device, an earlier run
of this host with more GPUs
not on the bus, without such evidence (the            unverified       ``gpu_count_unverified``
inventory may declare more than the node has)
no usable PCI scan (a capture older than it, or a     unverified       ``gpu_count_unscanned``
scan that missed GPUs NVML sees), no other evidence
more GPUs than declared                               configuration    ``gpu_count_declared``
====================================================  ===============  ========================================

The finding carries one cause: the first group that is hardware, else configuration, else unverified (a host's
action is the strongest of its findings' anyway); its words name every group with its bus ids. The Xid facts
are the xid_events probe's ``events`` since the node booted (``xid`` 79, inferred from "fallen off the bus" too,
and ``fault: init_failed``); the history fact is the most GPUs NVML listed on this host in an earlier run.
Sources: NVIDIA Xid Catalog (gpuaccept/data/xid_catalog.csv: Xid 79 "GPU has fallen off the bus");
open-gpu-kernel-modules (RmInitAdapter failed: the driver could not initialise the GPU); NVIDIA Container
Toolkit, "GPU Enumeration" (NVIDIA_VISIBLE_DEVICES: ``all`` or a list of indices/UUIDs, ``none``, ``void``);
NVML API reference, "Excluded Device Queries" (nvmlGetExcludedDeviceInfoByIndex: the GPUs NVreg_ExcludedGpus
keeps from the driver; gpu_inventory's ``nvml_excluded``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpuaccept.causes import Cause
from gpuaccept.judging.readings import handle_cause, is_lost, present
from gpuaccept.probes._pci import normalize_bus_id

#: the Xid of a GPU that fell off the bus (NVIDIA Xid Catalog, ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS)
XID_OFF_BUS = 79
#: the xid_events probe's ``fault`` of "RmInitAdapter failed!" lines (gpuaccept/probes/xid_events.py)
FAULT_INIT_FAILED = "init_failed"
#: bus ids said at most in a finding's evidence (a 64-GPU chassis would swell every record)
MAX_IDS = 16
#: the order in which a group's class becomes the finding's
CLASS_ORDER = ("hardware", "configuration", "unverified")


@dataclass(frozen=True)
class Group:
    """GPUs NVML does not list, sorted by why: ``cls`` and ``kind`` (the cause), ``text`` (the operator's words),
    ``bus_ids`` (what it is about; empty for GPUs not on the bus), ``evidence`` (JSON-safe facts)."""

    cls: str
    kind: str
    text: str
    bus_ids: tuple = ()
    evidence: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Shortfall:
    """The explanation of a count that differs from ``gpus_per_node``: ``text`` (after "gpu_count N !=
    gpus_per_node M: "), ``cause`` (the finding's :class:`~gpuaccept.causes.Cause`), ``groups``."""

    text: str
    cause: Cause
    groups: tuple


def off_bus_events(events: list | None) -> dict:
    """``{bus id (NVML form) or None: ["Xid 79", "RmInitAdapter failed"]}`` of the xid_events probe's
    ``events`` that say a GPU fell off the bus or the driver could not initialise it; {} for None."""
    out: dict = {}
    for ev in events or []:
        if not isinstance(ev, dict):
            continue
        if ev.get("xid") == XID_OFF_BUS:
            label = f"Xid {XID_OFF_BUS}"
        elif ev.get("fault") == FAULT_INIT_FAILED:
            label = "RmInitAdapter failed"
        else:
            continue
        said = out.setdefault(normalize_bus_id(ev.get("pci_bus_id")), [])
        if label not in said:
            said.append(label)
    return out


def hidden_by(visibility: dict | None) -> str | None:
    """What hides GPUs from NVML in the probes' process (gpu_inventory's ``gpu_visibility``), in words, or
    None: NVIDIA_VISIBLE_DEVICES set to anything but ``all``, or a container or job confining the process."""
    vis = visibility if isinstance(visibility, dict) else {}
    nvd = vis.get("nvidia_visible_devices")
    if isinstance(nvd, str) and nvd.strip().lower() != "all":
        return f"NVIDIA_VISIBLE_DEVICES={nvd!r}"
    if isinstance(vis.get("confined_by"), str):
        where = f" (cgroup {vis['cgroup']})" if vis.get("cgroup") else ""
        return f"the probes run in a {vis['confined_by']} container or job{where}"
    return None


def excluded_ids(doc: dict | None) -> dict:
    """``{bus id (NVML form): uuid}`` of the GPUs NVML lists as excluded (gpu_inventory's ``nvml_excluded``);
    {} where the document has none or NVML could not say."""
    listed = (doc or {}).get("nvml_excluded")
    if not isinstance(listed, list):
        return {}
    return {b: str(e.get("uuid") or "") for e in listed if isinstance(e, dict)
            and (b := normalize_bus_id(e.get("bus_id")))}


def usable_scan(doc: dict | None, nvml_ids: set) -> tuple[list | None, str | None]:
    """``(devices, None)``: the PCI scan's NVIDIA GPUs (bus ids normalised) when the scan can be compared with
    NVML; else ``(None, why not)``: no scan in the document (a capture older than it), a truncated or
    unreadable scan, or one that lacks a GPU NVML lists (sysfs of another namespace)."""
    scan = (doc or {}).get("pci_scan")
    if not isinstance(scan, dict) or not isinstance(scan.get("devices"), list):
        return None, "the document has no PCI scan (a capture from before it)"
    if scan.get("truncated"):
        return None, "the PCI scan was cut short (too many PCI entries)"
    if not scan.get("entries") and scan.get("errors"):
        return None, f"sysfs could not be read ({scan['errors'][0].get('error')})"
    devices = [dict(d, bus_id=normalize_bus_id(d.get("bus_id")) or d.get("bus_id"))
               for d in scan["devices"] if isinstance(d, dict)]
    unseen = sorted(nvml_ids - {d["bus_id"] for d in devices})
    if unseen:
        return None, f"the PCI scan lacks {', '.join(unseen[:MAX_IDS])} that NVML lists (sysfs is not the host's)"
    return devices, None


def _ids(bus_ids) -> str:
    ids = list(bus_ids)
    return ", ".join(ids[:MAX_IDS]) + (f" and {len(ids) - MAX_IDS} more" if len(ids) > MAX_IDS else "")


def _on_bus_groups(devices: list, nvml_ids: set, lost: int, events: dict, hidden: str | None,
                   no_handle: int = 0, excluded: dict | None = None) -> list[Group]:
    """The groups of GPUs on the bus that NVML does not list (see the module docstring); ``no_handle``: the GPUs
    NVML lists without a handle whose error does not show them lost (their groups are :func:`_handle_groups`'):
    when they are as many as the missing ones, no other group is made of them; ``excluded``: :func:`excluded_ids`
    (those GPUs are the ``gpu_excluded`` group, whatever else is said of the others)."""
    excluded = excluded or {}
    missing = [d for d in devices if d["bus_id"] not in nvml_ids]
    kept_out = [d["bus_id"] for d in missing if d.get("driver") == "nvidia" and d["bus_id"] in excluded]
    mine = [d["bus_id"] for d in missing if d.get("driver") == "nvidia" and d["bus_id"] not in excluded]
    other = [d for d in missing if d.get("driver") != "nvidia"]
    out = []
    if kept_out:
        out.append(Group("configuration", "gpu_excluded", f"{_ids(kept_out)} excluded from the driver "
                         f"(NVreg_ExcludedGpus: NVML lists {'it' if len(kept_out) == 1 else 'them'} as excluded)",
                         tuple(kept_out), {"excluded": _ids(f"{b} ({excluded[b]})" if excluded[b] else b
                                                            for b in kept_out)}))
    if mine:
        named = {b: events[b] for b in mine if b in events}
        base = f"{_ids(mine)} on the PCI bus, bound to the nvidia driver, not listed by NVML"
        if named:
            said = "; ".join(f"{b}: {', '.join(v)}" for b, v in named.items())
            out.append(Group("hardware", "gpu_not_initialised", f"{base} (kernel log: {said})", tuple(mine),
                             {"xid": said}))
        elif lost:
            out.append(Group("hardware", "gpu_count_lost", f"{base}: NVML lists {lost} GPU(s) it has no handle "
                             f"for (lost)", tuple(mine), {"lost": lost}))
        elif no_handle >= len(mine):
            pass
        elif hidden:
            out.append(Group("configuration", "gpu_count_hidden", f"{base}: hidden from the probes, {hidden}",
                             tuple(mine), {"hidden_by": hidden}))
        else:
            out.append(Group("hardware", "gpu_not_initialised", f"{base}, nothing hides them from the probes: the "
                             f"driver did not initialise them", tuple(mine)))
    if other:
        said = ", ".join(f"{d['bus_id']} bound to {d.get('driver') or 'no driver'}" for d in other[:MAX_IDS])
        drivers = sorted({d.get("driver") or "none" for d in other})
        out.append(Group("configuration", "gpu_driver_binding", f"{said}, not the nvidia driver",
                         tuple(d["bus_id"] for d in other), {"driver": ", ".join(drivers)}))
    return out


def _handle_groups(handles: list[Cause]) -> list[Group]:
    """The groups of GPUs NVML lists but gave no handle for whose error does not show them lost (``handles``:
    their gpuaccept.judging.readings.handle_cause): denied to the probes' user (configuration), or another error
    (unverified). The lost ones (hardware) are the ``gpu_count_lost`` group of :func:`explain`."""
    out = []
    for cls, kind, what in (("configuration", "gpu_count_denied", "the probes' user may not open (Insufficient "
                                                                    "Permissions: a device cgroup or container)"),
                            ("unverified", "gpu_count_no_handle", "it has no handle for, with an error that does "
                                                                   "not show them lost")):
        mine = [c for c in handles if c.cls == cls or (cls == "unverified" and c.cls not in ("hardware",
                                                                                             "configuration"))]
        if mine:
            said = ", ".join(f"GPU {c.gpu} ({c.evidence.get('nvml_error')})" for c in mine[:MAX_IDS])
            out.append(Group(cls, kind, f"NVML lists {len(mine)} GPU(s) {what}: {said}", (),
                             {"no_handle": said}))
    return out


def _off_bus_group(absent: int, on_bus: int | None, on_bus_ids: set, doc: dict | None, events: dict | None,
                   history_most: int | None, now: int) -> Group:
    """The group of declared GPUs not on the bus (``absent`` of them; ``on_bus``: NVIDIA GPUs the scan lists,
    None without a usable scan; ``now``: the count an earlier run's must exceed), hardware with evidence that
    one fell off, else unverified."""
    said, read = [], events is not None
    gone = {b: v for b, v in (events or {}).items() if b not in on_bus_ids}
    if gone:
        said.append("kernel log: " + "; ".join(f"{b or 'a GPU'}: {', '.join(v)}" for b, v in gone.items()))
    scan = (doc or {}).get("pci_scan") if on_bus is not None else None
    empty = [s for s in (scan or {}).get("occupied_slots") or [] if isinstance(s, dict) and
             s.get("device_present") is False]
    if empty:
        said.append("a card is seated with no device answering: " + ", ".join(
            f"slot {s.get('slot')} at {s.get('address')}" for s in empty[:MAX_IDS]))
    if isinstance(history_most, int) and not isinstance(history_most, bool) and history_most > now:
        said.append(f"this host had {history_most} GPUs in an earlier run")
    where = (f"{absent} declared GPU(s) not on the PCI bus ({on_bus} NVIDIA GPU(s) there)" if on_bus is not None
             else f"{absent} declared GPU(s) missing")
    if said:
        return Group("hardware", "gpu_off_bus", f"{where}: {'; '.join(said)}", (), {"fell_off": "; ".join(said)})
    return Group("unverified", "gpu_count_unverified" if on_bus is not None else "gpu_count_unscanned",
                 f"{where}, no evidence that one fell off (no Xid 79 or RmInitAdapter failure in the kernel log "
                 f"since boot{'' if read else ' (not read)'}, no seated card without its device"
                 f"{', no earlier run with more GPUs' if history_most is not None else ''}): the inventory may "
                 f"declare more than the node has", (), {})


def explain(gpus: list, declared: int, doc: dict | None = None, xid_events: list | None = None,
            history_most: int | None = None) -> Shortfall:
    """Why NVML lists another number of GPUs than ``declared`` (gpus_per_node, a count).

    ``gpus``: the gpu_inventory GPU list (lost GPUs included, ``lost: true``); ``doc``: its document (its
    ``pci_scan`` and ``gpu_visibility``; None or without them: judged as a capture older than the scan);
    ``xid_events``: the xid_events probe's ``events`` since boot (None: not read); ``history_most``:
    the most GPUs NVML listed on this host in an earlier run (None: unknown). Returns a :class:`Shortfall`
    whose cause is the first hardware group, else configuration, else unverified (module docstring).
    Raises nothing on a malformed document (what cannot be compared is "no usable scan")."""
    listed = present(list(gpus or []))
    handles = [handle_cause(g) for g in gpus or [] if isinstance(g, dict) and is_lost(g)]
    n, lost = len(listed), sum(c.cls == "hardware" for c in handles)
    nvml_ids = {b for g in listed if (b := normalize_bus_id(g.get("pci_bus_id")))}
    ev = {"declared": declared, "found": n, "nvml": _ids(sorted(nvml_ids))}
    if n > declared:
        return Shortfall(f"more GPUs than declared: the inventory is wrong (NVML sees {_ids(sorted(nvml_ids)) or n})",
                         Cause("configuration", "gpu_count_declared", evidence=ev), ())
    events = off_bus_events(xid_events) if xid_events is not None else None
    devices, why = usable_scan(doc, nvml_ids)
    groups: list[Group] = []
    groups += _handle_groups(handles)
    if devices is None:
        if lost:
            groups.append(Group("hardware", "gpu_count_lost", f"NVML lists {lost} GPU(s) it has no handle for "
                                f"(lost)", (), {"lost": lost}))
        elif len(handles) >= declared - n:  # every missing GPU is one NVML lists without a handle: said above
            pass
        else:
            groups.append(_off_bus_group(declared - n, None, nvml_ids, doc, events, history_most, n))
        ev["pci_scan"] = why
    else:
        groups += _on_bus_groups(devices, nvml_ids, lost, events or {}, hidden_by((doc or {}).get("gpu_visibility")),
                                 len(handles) - lost, excluded_ids(doc))
        if declared > len(devices):
            groups.append(_off_bus_group(declared - len(devices), len(devices), {d["bus_id"] for d in devices},
                                         doc, events, history_most, len(devices)))
        ev["on_bus"] = len(devices)
    if not groups:  # the scan lists as many GPUs as NVML and more than declared: cannot be, said as unverified
        groups.append(Group("unverified", "gpu_count_unverified", "the PCI scan and NVML agree", (), {}))
    first = min(groups, key=lambda g: CLASS_ORDER.index(g.cls))
    missing = [b for g in groups for b in g.bus_ids]
    ev.update({k: v for g in groups for k, v in g.evidence.items()})
    if missing:
        ev["missing"] = _ids(missing)
    text = f"NVML sees {_ids(sorted(nvml_ids)) or 'no GPU with a bus id'}; " + "; ".join(g.text for g in groups)
    if why:
        text += f" ({why})"
    return Shortfall(text, Cause(first.cls, first.kind, evidence=ev), tuple(groups))
