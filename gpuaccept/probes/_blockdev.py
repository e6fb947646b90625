"""What a block device named in the kernel log is, read from sysfs on the node: a local drive, network block storage
(of a kind the controller's table names), a loop device with its backing file, a stacked device (device-mapper, md)
with its members, a virtual device of no known kind, or no device sysfs knows. Standard library only, shipped with
the probes (host_kernel_log.py).

The table (``kinds``, sent by the controller from gpuaccept/data/host_kernel_catalog.yaml ``fs_devices``)::

    [{"kind": str,                 # a network block kind of the catalogue's stack_frames (rbd, nbd, iscsi...)
      "buses": [str],              # the subsystem of the disk's parent device (/sys/block/X/device/subsystem)
      "majors": [int],             # the disk's block major (/sys/block/X/dev), a fixed one of devices.txt
      "nvme_transports": [str],    # an NVMe controller's /sys/class/nvme/nvmeN/transport
      "iscsi_session": bool}]      # the disk's device path runs through an iSCSI session (class iscsi_session)

A device's fact (:func:`describe`)::

    {"name": str, "what": "drive" | "netblock" | "loop" | "stacked" | "virtual" | "absent",
     "kind": str | None,           # netblock: the table's kind
     "via": str | None,            # what told it: "bus rbd", "major 43", "nvme transport tcp", "iscsi session1",
                                   # "bus scsi" (a drive), "loop", "dm", "md"; absent: why
     "disk": str | None,           # the whole disk a partition belongs to (the name itself for a disk)
     "dev": "MAJ:MIN" | None, "path": str | None,   # the disk's place under the sysfs root (devices/...)
     "controllers": [{"name", "transport", "address"}],  # NVMe only
     "backing": {"file", "mount_point", "fstype", "source", "dev", "device": fact | None, "error"},  # loop only
     "members": [fact], "dm_name", "dm_uuid", "md_level"}           # stacked only

Reads only; a file it cannot read is "unknown" in the fact, never an error of the probe.
"""
from __future__ import annotations

import os
import re

from _probe import ProbeFailed
from _storage import mount_of
from _sysfs import read_text

WHAT = ("drive", "netblock", "loop", "stacked", "virtual", "absent")
DEPTH = 3  # members of members of a stacked device, a loop's backing device: a real stack is 2-3 deep
MEMBERS = 16  # members kept per stacked device (an md of 24 drives names the first 16)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,63}$")  # a kernel block device name, never a path
_NVME_CTRL_RE = re.compile(r"^nvme\d+$")
_SESSION_RE = re.compile(r"^session\d+$")


def check_kinds(rows) -> list[dict]:
    """The ``kinds`` table checked (module docstring); raises ProbeFailed naming a malformed row."""
    if not isinstance(rows, list):
        raise ProbeFailed(f"block_kinds must be a list of {{kind, buses, majors, nvme_transports, iscsi_session}}, "
                          f"got {rows!r:.200}")
    for r in rows:
        ok = isinstance(r, dict) and isinstance(r.get("kind"), str) and all(
            isinstance(r.get(k, []), list) for k in ("buses", "majors", "nvme_transports")) and all(
            isinstance(x, int) for x in r.get("majors", [])) and r.get("iscsi_session") in (None, True, False)
        if not ok:
            raise ProbeFailed(f"block_kinds row {r!r:.200}: expected {{\"kind\": text, \"buses\": [text], "
                              f"\"majors\": [int], \"nvme_transports\": [text], \"iscsi_session\": bool}}")
    return rows


def _fact(name: str, what: str, via: str | None = None, **more) -> dict:
    return {"name": name, "what": what, "kind": more.pop("kind", None), "via": via, "disk": more.pop("disk", None),
            "dev": more.pop("dev", None), "path": more.pop("path", None), **more}


def _controller(sysfs: str, ctrl_dir: str) -> dict:
    return {"name": os.path.basename(ctrl_dir), "transport": read_text(os.path.join(ctrl_dir, "transport")),
            "address": read_text(os.path.join(ctrl_dir, "address"))}


def _controllers(sysfs: str, devdir: str | None) -> list[dict]:
    """The NVMe controllers under a namespace: its parent device when that is a controller (a ``transport`` file),
    else the controllers of its subsystem (native multipath: the head's parent is nvme-subsysN)."""
    if devdir is None:
        return []
    if os.path.isfile(os.path.join(devdir, "transport")):
        return [_controller(sysfs, devdir)]
    try:
        kids = sorted(os.listdir(devdir))
    except OSError:
        return []
    return [_controller(sysfs, os.path.join(devdir, k)) for k in kids
            if _NVME_CTRL_RE.match(k) and os.path.isfile(os.path.join(devdir, k, "transport"))][:MEMBERS]


def _iscsi_session(root: str, devdir: str | None) -> str | None:
    """The iSCSI session a device's path runs through (a ``sessionN`` folder with an ``iscsi_session`` class folder,
    drivers/scsi/scsi_transport_iscsi.c), or None."""
    d = devdir
    while d and d.startswith(root + os.sep):
        base = os.path.basename(d)
        if _SESSION_RE.match(base) and os.path.isdir(os.path.join(d, "iscsi_session")):
            return base
        d = os.path.dirname(d)
    return None


def _netblock(kinds: list[dict], bus, major, controllers, session) -> tuple[str, str] | None:
    for r in kinds:
        if bus and bus in r.get("buses", []):
            return r["kind"], f"bus {bus}"
        if major is not None and major in r.get("majors", []):
            return r["kind"], f"major {major}"
        t = next((c for c in controllers if c.get("transport") in r.get("nvme_transports", [])), None)
        if t:
            return r["kind"], f"nvme transport {t['transport']} ({t['name']})"
        if session and r.get("iscsi_session"):
            return r["kind"], f"iscsi {session}"
    return None


def _backing(sysfs: str, path: str | None, kinds: list[dict], depth: int) -> dict:
    """A loop device's backing file: the mount holding it and that mount's block device, described."""
    out: dict = {"file": path, "mount_point": None, "fstype": None, "source": None, "dev": None, "device": None,
                 "error": None}
    if not path:
        out["error"] = "no backing file (loop/backing_file unreadable)"
        return out
    if not os.path.exists(path):
        out["error"] = "the backing file is not visible from the probe (deleted, or another mount namespace)"
        return out
    try:
        m = mount_of(path)
    except (ProbeFailed, OSError) as e:
        out["error"] = f"no mount found for it: {e}"[:200]
        return out
    out.update(mount_point=m["mount_point"], fstype=m["fstype"], source=m["source"], dev=m["device"])
    if str(m["device"]).split(":")[0] == "0":
        return out  # no block device under it (tmpfs, overlay, a network filesystem): fstype and source say it
    link = os.path.join(sysfs, "dev", "block", str(m["device"]))
    if os.path.exists(link):
        out["device"] = describe(sysfs, os.path.basename(os.path.realpath(link)), kinds, depth + 1)
    else:
        out["device"] = _fact(None, "absent", f"no {link}", dev=m["device"])
    return out


def describe(sysfs: str, name: str, kinds: list[dict], depth: int = 0) -> dict:
    """The fact of block device (or NVMe controller) ``name`` under the sysfs root ``sysfs`` (module docstring),
    classified with the ``kinds`` table (:func:`check_kinds`); members and backing devices are described to
    :data:`DEPTH` levels."""
    if not isinstance(name, str) or not _NAME_RE.match(name) or name in (".", ".."):
        return _fact(name, "absent", "not a block device name")
    root = os.path.realpath(sysfs)
    if _NVME_CTRL_RE.match(name) and os.path.isdir(os.path.join(sysfs, "class", "nvme", name)):
        ctrls = [_controller(sysfs, os.path.realpath(os.path.join(sysfs, "class", "nvme", name)))]
        net = _netblock(kinds, None, None, ctrls, None)
        what, via = ("netblock", net[1]) if net else ("drive", f"nvme transport {ctrls[0]['transport']}")
        return _fact(name, what, via, kind=net[0] if net else None, controllers=ctrls)
    entry = os.path.join(sysfs, "class", "block", name)
    if not os.path.exists(entry):
        entry = os.path.join(sysfs, "block", name)
    if not os.path.exists(entry):
        return _fact(name, "absent", f"no /sys/class/block/{name}")
    real = os.path.realpath(entry)
    base, disk = real, name
    if os.path.exists(os.path.join(real, "partition")):
        base = os.path.dirname(real)
        disk = os.path.basename(base)
    dev = read_text(os.path.join(base, "dev"))
    common = {"disk": disk, "dev": dev, "path": os.path.relpath(base, root) if base.startswith(root) else base}
    if os.path.isdir(os.path.join(base, "loop")):
        return _fact(name, "loop", "loop", **common, backing=_backing(
            sysfs, read_text(os.path.join(base, "loop", "backing_file")), kinds, depth) if depth < DEPTH else None)
    try:
        slaves = sorted(os.listdir(os.path.join(base, "slaves")))
    except OSError:
        slaves = []
    md = os.path.isdir(os.path.join(base, "md"))
    if not slaves and md:
        try:
            slaves = sorted(os.path.basename(os.path.realpath(os.path.join(base, "md", d, "block")))
                            for d in os.listdir(os.path.join(base, "md")) if d.startswith("dev-"))
        except OSError:
            slaves = []
    if slaves or md or os.path.isdir(os.path.join(base, "dm")):
        members = [describe(sysfs, s, kinds, depth + 1) for s in slaves[:MEMBERS]] if depth < DEPTH else []
        return _fact(name, "stacked", "md" if md else "dm", **common, members=members,
                     dm_name=read_text(os.path.join(base, "dm", "name")),
                     dm_uuid=read_text(os.path.join(base, "dm", "uuid")),
                     md_level=read_text(os.path.join(base, "md", "level")) if md else None)
    devdir = os.path.realpath(os.path.join(base, "device")) if os.path.exists(os.path.join(base, "device")) else None
    bus = os.path.basename(os.path.realpath(os.path.join(devdir, "subsystem"))) \
        if devdir and os.path.exists(os.path.join(devdir, "subsystem")) else None
    major = int(dev.split(":")[0]) if dev and dev.split(":")[0].isdigit() else None
    ctrls = _controllers(sysfs, devdir) if bus in ("nvme", "nvme-subsystem") else []
    extra = {"controllers": ctrls} if ctrls else {}
    net = _netblock(kinds, bus, major, ctrls, _iscsi_session(root, devdir))
    if net:
        return _fact(name, "netblock", net[1], kind=net[0], **common, **extra)
    if devdir is not None:
        return _fact(name, "drive", f"bus {bus or 'unknown'}", **common, **extra)
    return _fact(name, "virtual", f"no parent device, major {major}", **common)
