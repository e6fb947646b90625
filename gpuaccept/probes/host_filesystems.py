#!/usr/bin/env python3
"""Filesystems proven writable by writing: the storage folders and the probes' own folder.

Args::

    {"paths": [str, ...],       # the inventory's storage_paths and fs_paths (may be empty)
     "bytes": int}              # bytes written per path (default 4096: one page)

The probes' own folder (where this file runs: the shipped folder on the node) is always checked too, as
``{"path": <folder>, "role": "probe"}``. For each path: where it is (``_storage.placement``: mount, source,
filesystem type, major:minor), whether the filesystem says it is read-only (statvfs ST_RDONLY: set for a ``ro``
mount and for a filesystem the kernel remounted read-only after an error), its free space, and then the proof:
a file ``.gpuaccept-<hex>`` created with O_EXCL, ``bytes`` written, fsync(2)'d, closed and deleted.

Output::

    {"paths": [{"path", "role": "storage" | "probe", "ok": bool, "error": str | None,
                "failure": {"reason": "read_only" | "free_space" | "not_writable" | "placement" | "io_error",
                            "path", "errno", ...} | None,        # the fact, read by the judge (never the message)
                "mount_point", "mount_source", "fstype", "device",     # placement
                "block_names": [str],          # the kernel's names of the device and what it sits on
                                               # ("nvme0n1p1", "nvme0n1", "nvme0"; a dm device's slaves), to match
                                               # kernel-log lines that name the device
                "free_bytes": int | None, "total_bytes": int | None, "write_s": float | None}]}

Standard library only (with the storage probes' ``_storage`` helpers).
"""
from __future__ import annotations

import os
import secrets
import time

from _probe import reject_unknown, run
from _storage import WORKDIR_PREFIX, errno_name, placement, read_only, write_refusal

ARG_KEYS = {"paths", "bytes"}
DEFAULT_BYTES = 4096


def block_names(device: str | None, source: str | None, sysfs: str = "/sys") -> list[str]:
    """The kernel's names of a filesystem's block device and of what it sits on: from ``/sys/dev/block/<maj:min>``
    (its sysfs path holds the partition, the disk and, for NVMe, the controller: ``.../nvme/nvme0/nvme0n1/
    nvme0n1p1``) and a device-mapper device's ``slaves/``; else the basename of the mount source. [] when none."""
    names: list[str] = []
    link = os.path.join(sysfs, "dev", "block", device) if device else None
    if link and os.path.exists(link):
        real = os.path.realpath(link)
        for part in real.split(os.sep):
            if part and ":" not in part and (os.path.exists(os.path.join(sysfs, "class", "block", part))
                                             or os.path.exists(os.path.join(sysfs, "class", "nvme", part))):
                names.append(part)
        slaves = os.path.join(real, "slaves")
        if os.path.isdir(slaves):
            for s in sorted(os.listdir(slaves)):
                names.append(s)
    if source and source.startswith("/dev/"):
        names.append(os.path.basename(os.path.realpath(source)))
        names.append(os.path.basename(source))
    out: list[str] = []
    for n in names:
        if n not in out:
            out.append(n)
    return out


def prove_writable(path: str, nbytes: int) -> tuple[float | None, dict | None, str | None]:
    """Write ``nbytes`` into a new file under ``path``, fsync, close, delete. Returns (seconds it took, failure
    fact, error line); the failure is None when it worked. EROFS/ENOSPC/EDQUOT/EACCES/EPERM are the node's facts
    (``_storage.write_refusal``); EIO and any other errno an ``io_error`` of the filesystem or its drive."""
    name = os.path.join(path, f"{WORKDIR_PREFIX}{secrets.token_hex(6)}.probe")
    t0 = time.monotonic()
    fd = None
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        data = b"\0" * nbytes
        done = 0
        while done < nbytes:
            done += os.write(fd, data[done:])
        os.fsync(fd)
        os.close(fd)
        fd = None
        os.unlink(name)
        return round(time.monotonic() - t0, 6), None, None
    except OSError as e:
        refused = write_refusal(path, e, nbytes)
        if refused is not None:
            return None, refused.facts, str(refused)
        return None, {"reason": "io_error", "path": path, "errno": errno_name(e.errno)}, \
            f"{path}: writing a test file failed: {e.strerror} ({errno_name(e.errno)})"
    finally:
        if fd is not None:
            os.close(fd)
        if os.path.lexists(name):
            try:
                os.unlink(name)
            except OSError:
                pass


def check_path(path: str, role: str, nbytes: int) -> dict:
    """One entry of the document's ``paths`` (module docstring)."""
    where = placement(path)
    entry = {"path": path, "role": role, "ok": False, "error": None, "failure": None,
             **{k: where.get(k) for k in ("mount_point", "mount_source", "fstype", "device")},
             "block_names": block_names(where.get("device"), where.get("mount_source")),
             "free_bytes": None, "total_bytes": None, "write_s": None}
    if where.get("error"):
        entry.update(error=where["error"], failure={"reason": "placement", "path": path})
        return entry
    try:
        st = os.statvfs(path)
        entry.update(free_bytes=st.f_bavail * st.f_frsize, total_bytes=st.f_blocks * st.f_frsize)
    except OSError as e:
        entry.update(error=f"{path}: statvfs failed: {e.strerror}",
                     failure={"reason": "io_error", "path": path, "errno": errno_name(e.errno)})
        return entry
    ro = read_only(path)
    if ro is not None:  # nothing is written to a filesystem that says it is read-only
        entry.update(error=str(ro), failure=ro.facts)
        return entry
    took, failure, line = prove_writable(path, nbytes)
    entry.update(ok=failure is None, write_s=took, failure=failure, error=line)
    return entry


def main(args: dict) -> dict:
    """Probe entry point: the document described in the module docstring."""
    reject_unknown(args, ARG_KEYS)
    paths = args.get("paths") or []
    nbytes = int(args.get("bytes", DEFAULT_BYTES))
    out = [check_path(p, "storage", nbytes) for p in paths if isinstance(p, str)]
    here = os.path.dirname(os.path.abspath(__file__))
    out.append(check_path(here, "probe", nbytes))
    return {"paths": out}


if __name__ == "__main__":
    run(main)
