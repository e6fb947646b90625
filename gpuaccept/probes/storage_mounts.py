"""Where each configured storage directory really is: its mount, source, filesystem type, and whether it is
the root filesystem. Reads /proc/self/mountinfo only; writes nothing, takes well under a second.

The storage suites run this before any measurement, so that a directory left on the OS disk by a mount
that did not come back after a reboot is found before fio writes gigabytes there (and before a shared-
filesystem aggregate adds one host's local disk to the "shared" total).

Args (JSON object)::

    {"paths": ["/mnt/nvme0/scratch", "/lustre/acceptance"]}

Output::

    {"paths": [{"path", "real_path", "is_dir", "mount_point", "mount_source", "fstype", "mount_root",
                "device", "root_fs", "root_device", "error"}]}

Field meanings are those of ``_storage.placement``: ``device`` is the filesystem's ``major:minor`` as
mountinfo gives it, ``root_fs`` is True when that is the device of the mount at ``/``.
"""
from __future__ import annotations

from _probe import ProbeFailed, reject_unknown, run
from _storage import placement

ARG_KEYS = {"paths", "mountinfo"}


def main(a: dict) -> dict:
    reject_unknown(a, ARG_KEYS)
    paths = a.get("paths")
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        raise ProbeFailed(f"paths must be a list of directories, got {paths!r}")
    mi = a.get("mountinfo", "/proc/self/mountinfo")
    return {"paths": [placement(p, mi) for p in paths]}


if __name__ == "__main__":
    run(main)
