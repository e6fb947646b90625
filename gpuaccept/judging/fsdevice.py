"""Judging the device under a filesystem error (pure): is an ext4 error, an XFS shutdown or a read-only remount about a
drive of this node, or about storage elsewhere?

The host_kernel_log probe describes each device an ``fs_error`` row of ``gpuaccept/data/host_kernel_catalog.yaml``
names (gpuaccept/probes/_blockdev.py, read from sysfs on the node): ``what`` is ``drive``, ``netblock`` (of a kind of
the catalogue's ``fs_devices``), ``loop`` (with its backing file), ``stacked`` (device-mapper or md, with members),
``virtual`` or ``absent``. :func:`judge_device` turns that fact into a cause class and an actions.yaml kind:

* a local drive: hardware, the row's own kind (kernel_fs_error: fsck, the drive's SMART log; drain-rma);
* network block storage (rbd, nbd, drbd, NVMe over Fabrics, iSCSI): connectivity, ``netblock_fs_error``
  (check-network), the vocabulary of the hung-task judgment of network block stalls (gpuaccept/judging/host.py);
* a loop device: ``kernel_fs_error_loop``, class unverified (rerun, the backing file named): the line proves the
  image's filesystem failed, not which layer under it (the image itself, the filesystem holding it, its free space,
  or its drive); it becomes its backing device's cause only when that device has an error line of its own;
* device-mapper or md: hardware when a member is a local drive (members named), connectivity when every member is
  network block storage (dm-multipath over iSCSI), else unverified;
* a virtual device of no kind the catalogue names, or no sysfs entry: ``kernel_fs_error_unverified`` (rerun).

Decisions read the probe's structured fact (``what``, ``kind``) and the catalogue, never the line's wording.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from gpuaccept.config.yamlload import load_data

CATALOG_FILE = "host_kernel_catalog.yaml"
#: the table columns the probe classifies a network block device by (gpuaccept/probes/_blockdev.py)
MATCH_KEYS = ("buses", "majors", "nvme_transports", "iscsi_session")


@lru_cache(maxsize=None)
def fs_devices() -> dict[str, dict]:
    """The catalogue's ``fs_devices.kinds``: kind -> ``{buses, majors, nvme_transports, iscsi_session, source}``.
    Raises ValueError naming a kind that is no ``where: network``, ``storage: block`` kind of ``stack_frames``, has
    no source, or nothing to match by (the data file is broken)."""
    with resources.files("gpuaccept").joinpath("data", CATALOG_FILE).open(encoding="utf-8") as f:
        data = load_data(f)
    frames = data["stack_frames"]["kinds"]
    kinds = data["fs_devices"]["kinds"]
    for k, v in kinds.items():
        fr = frames.get(k) or {}
        if fr.get("where") != "network" or fr.get("storage") != "block" or not v.get("source") or not any(
                v.get(c) for c in MATCH_KEYS):
            raise ValueError(f"{CATALOG_FILE}: fs_devices kind {k}: needs a stack_frames kind with where: network and "
                             f"storage: block, a source, and one of {MATCH_KEYS}")
    return kinds


def block_kinds() -> list[dict]:
    """The host_kernel_log probe's ``block_kinds`` argument: ``[{"kind", "buses", "majors", "nvme_transports",
    "iscsi_session"}]`` of :func:`fs_devices`."""
    return [{"kind": k, "buses": list(v.get("buses") or []), "majors": [int(x) for x in v.get("majors") or []],
             "nvme_transports": list(v.get("nvme_transports") or []), "iscsi_session": bool(v.get("iscsi_session"))}
            for k, v in fs_devices().items()]


@dataclass(frozen=True)
class DeviceCause:
    """What a filesystem error's device makes of it: ``cls`` (hardware | connectivity | unverified), ``kind`` (an
    actions.yaml causes row; None: the catalogue row's own, a local drive's), ``said`` (what the device is, in words),
    ``evidence`` (JSON-safe facts for the Cause), ``netblock`` (the network block kind, connectivity only)."""

    cls: str
    kind: str | None
    said: str
    evidence: dict = field(default_factory=dict)
    netblock: str | None = None


def names(fact: dict | None) -> set[str]:
    """The kernel's names of a described device: itself, its whole disk, its NVMe controllers."""
    if not isinstance(fact, dict):
        return set()
    out = {fact.get("name"), fact.get("disk")} | {c.get("name") for c in fact.get("controllers") or []}
    return {n for n in out if isinstance(n, str)}


def _short(fact: dict) -> str:
    what = fact.get("what")
    return f"{fact.get('name')} ({fact.get('kind') if what == 'netblock' else what})"


def judge_device(fact: dict | None, logged: set[str] = frozenset(), depth: int = 0) -> DeviceCause:
    """The :class:`DeviceCause` of one described device (module docstring). ``logged``: the devices with a filesystem
    or drive error line of their own in the window (a loop's backing device counts only with one). Pure."""
    if not isinstance(fact, dict):
        return DeviceCause("unverified", "kernel_fs_error_unverified", "the probe did not describe the device",
                           {"device_is": "not described"})
    name, what, via = fact.get("name"), fact.get("what"), fact.get("via")
    ev = {"device": name, "device_is": what, "via": via}
    if what == "drive":
        return DeviceCause("hardware", None, f"{name} is a local drive of this node ({via})", ev)
    if what == "netblock" and fact.get("kind") in fs_devices():
        kind = fact["kind"]
        addr = ", ".join(c["address"] for c in fact.get("controllers") or [] if c.get("address"))
        return DeviceCause("connectivity", "netblock_fs_error",
                           f"{name} is network block storage {kind} ({via}{', ' + addr if addr else ''}): the storage "
                           f"behind it or the network to it failed under the filesystem, not a drive of this node",
                           {**ev, "filesystem": kind}, kind)
    if what == "loop" and depth < 4:
        return _loop(fact, logged, depth, ev)
    if what == "stacked" and depth < 4:
        return _stacked(fact, logged, depth, ev)
    why = ("has no sysfs entry the probe could read" if what == "absent" else
           f"is a {what or 'unknown'} block device of no kind the catalogue's fs_devices names")
    return DeviceCause("unverified", "kernel_fs_error_unverified",
                       f"{name} {why} ({via}): no evidence it is a drive of this node", ev)


def _loop(fact: dict, logged: set[str], depth: int, ev: dict) -> DeviceCause:
    b = fact.get("backing") or {}
    dev = b.get("device") if isinstance(b.get("device"), dict) else None
    on = (f"{b.get('fstype')} {b.get('source')} at {b.get('mount_point')}" if b.get("fstype") else
          b.get("error") or "an unknown filesystem")
    ev = {**ev, "backing_file": b.get("file"), "backing_fs": on, "backing_device": (dev or {}).get("name")}
    said = f"{fact.get('name')} is a loop device backed by the file {b.get('file')} (on {on})"
    own = names(dev) & set(logged)
    if dev is not None and own:
        inner = judge_device(dev, logged, depth + 1)
        if inner.cls in ("hardware", "connectivity"):
            return DeviceCause(inner.cls, inner.kind, f"{said}, whose device {inner.said}, with an error line of its "
                               f"own ({', '.join(sorted(own))})", {**ev, **inner.evidence, "device": fact.get("name")},
                               inner.netblock)
    return DeviceCause("unverified", "kernel_fs_error_loop",
                       f"{said}: the image or the filesystem holding it failed, no part of this node is shown "
                       f"({'its device ' + _short(dev) + ' logged no error' if dev else 'no block device under it'})",
                       ev)


def _stacked(fact: dict, logged: set[str], depth: int, ev: dict) -> DeviceCause:
    members = [m for m in fact.get("members") or [] if isinstance(m, dict)]
    judged = [(m, judge_device(m, logged, depth + 1)) for m in members]
    layer = "md" if fact.get("via") == "md" else "device-mapper"
    label = fact.get("dm_name") or fact.get("md_level") or layer
    listed = ", ".join(_short(m) for m in members) or "no member sysfs lists"
    ev = {**ev, "members": [m.get("name") for m in members], "stack": f"{layer} {label}"}
    said = f"{fact.get('name')} is {layer} {label} over {listed}"
    hw = [m.get("name") for m, j in judged if j.cls == "hardware"]
    if hw:
        return DeviceCause("hardware", None, f"{said}: local drive(s) {', '.join(hw)}", {**ev, "drives": hw})
    if judged and all(j.cls == "connectivity" for _, j in judged):
        first = judged[0][1]
        return DeviceCause("connectivity", "netblock_fs_error", f"{said}: network block storage only, not a drive "
                           f"of this node", {**ev, "filesystem": first.netblock}, first.netblock)
    return DeviceCause("unverified", "kernel_fs_error_unverified", f"{said}: no member shown to be a drive of this "
                       f"node", ev)


def device_cause(doc: dict | None, device: str | None, logged: set[str] = frozenset()) -> DeviceCause | None:
    """The :class:`DeviceCause` of ``device`` by a host_kernel_log document's ``devices`` facts; None when the document
    has no ``devices`` at all (a document of a probe older than the device facts, or the pure matcher: judged as
    before, by the catalogue row). A device the document does not describe is unverified."""
    facts = (doc or {}).get("devices")
    if not isinstance(facts, dict):
        return None
    return judge_device(facts.get(device), logged)
