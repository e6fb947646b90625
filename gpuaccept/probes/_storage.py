"""Shared node-side helpers of the storage probes (fio_throughput, storage_mounts, storage_to_gpu, gds).

Shipped with the probes (the runner ships this whole folder); standard library only. What lives here:

- where a directory really is: :func:`mount_of` and :func:`placement` read ``/proc/self/mountinfo``
  (proc(5), "/proc/[pid]/mountinfo": mount ID, parent ID, major:minor, root, mount point, options,
  optional fields, ``-``, filesystem type, mount source, super options) and say which mount holds a path,
  its source, type and whether it is the root filesystem;
- which filesystems are no drive (:func:`not_block_backed`);
- how much may be written (:func:`plan_size`, :func:`default_margin`);
- the scratch folder every storage probe writes in, removed on exit and on SIGTERM/SIGHUP
  (:func:`scratch`, :func:`make_workdir`, :func:`install_signal_cleanup`).
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import stat

from _probe import ProbeFailed

GIB = 1 << 30
MIB = 1 << 20
MIN_ROOM = 64 * MIB                      # less room than this between free space and margin: no useful test
NOT_BLOCK = ("tmpfs", "ramfs", "overlay", "squashfs", "devtmpfs")   # plus every fuse*
WORKDIR_PREFIX = ".gpuaccept-"
MOUNTINFO = "/proc/self/mountinfo"


class Refused(ProbeFailed):
    """A path the storage probes did not measure for a fact of the node, not of the drive; ``facts`` is that
    fact as the document carries it (a path entry's ``failure``), ``reason`` first:

    - ``{"reason": "free_space", "path", "free_bytes", "need_bytes", "margin_bytes"[, "errno"]}``: less free
      space than the run needs (``need_bytes`` = margin + :data:`MIN_ROOM`, or what was being written when
      ENOSPC/EDQUOT came);
    - ``{"reason": "read_only", "path", "read_only": True, "errno": "EROFS", "seen_by"}``: the filesystem is
      read-only (``seen_by``: ``"statvfs ST_RDONLY"``, set for a ``ro`` mount and for a filesystem the
      kernel remounted read-only after an error, whatever the mount options still say; or the write that
      got EROFS);
    - ``{"reason": "not_writable", "path", "errno"}``: the test folder could not be made (EACCES, EPERM...);
      the filesystem is writable, the folder's permissions are not;
    - ``{"reason": "placement" | "not_block_backed", "path"[, "fstype"]}``: not a directory, no mount, a RAM
      or overlay filesystem.

    The controller reads ``reason`` (gpuaccept.judging.storage.path_cause), never the message."""

    def __init__(self, message: str, facts: dict):
        super().__init__(message)
        self.facts = facts


def errno_name(err: int | None) -> str | None:
    """``"EROFS"`` of 30 (errno.errorcode), None for none."""
    import errno
    return errno.errorcode.get(err, str(err)) if err else None


def write_refusal(path: str, e: OSError, need_bytes: int | None = None) -> Refused | None:
    """The :class:`Refused` of a write into ``path`` that failed with ``e``: EROFS (read-only), ENOSPC or
    EDQUOT (free space; ``need_bytes``: what was being written), EACCES or EPERM (not writable); None for
    any other errno (the drive's or the tool's business)."""
    import errno
    name = errno_name(e.errno)
    if e.errno == errno.EROFS:
        return Refused(f"{path}: the filesystem is read-only ({name} on write)",
                       {"reason": "read_only", "path": path, "read_only": True, "errno": name, "seen_by": "write"})
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        try:
            st = os.statvfs(path)
            free = st.f_bavail * st.f_frsize
        except OSError:
            free = None
        return Refused(f"not enough free space on {path}: {e.strerror} ({name}) on write",
                       {"reason": "free_space", "path": path, "free_bytes": free, "need_bytes": need_bytes,
                        "margin_bytes": None, "errno": name})
    if e.errno in (errno.EACCES, errno.EPERM):
        return Refused(f"{path}: cannot write a test folder there: {e.strerror} ({name})",
                       {"reason": "not_writable", "path": path, "errno": name})
    return None


def read_only(path: str) -> Refused | None:
    """:class:`Refused` ``read_only`` when statvfs(2) says ST_RDONLY for the filesystem holding ``path`` (the
    mount's ``ro`` or the superblock's: an ext4 ``errors=remount-ro`` after an error sets it while
    /proc/self/mountinfo's per-mount options may still read ``rw``), else None."""
    try:
        ro = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return None
    if not ro:
        return None
    return Refused(f"{path}: the filesystem is read-only (statvfs ST_RDONLY): nothing can be written to measure",
                   {"reason": "read_only", "path": path, "read_only": True, "errno": "EROFS",
                    "seen_by": "statvfs ST_RDONLY"})


class Terminated(ProbeFailed):
    """SIGTERM/SIGHUP arrived; raised from the signal handler so ``finally`` blocks clean up."""


def _on_signal(signum, _frame):
    for s in (signal.SIGTERM, signal.SIGHUP):  # a second signal must not interrupt the cleanup
        signal.signal(s, signal.SIG_IGN)
    raise Terminated(f"terminated by signal {signal.Signals(signum).name}; test files removed")


def install_signal_cleanup() -> None:
    """Turn SIGTERM and SIGHUP into a :class:`Terminated` exception (so ``finally`` runs). The runner kills
    a probe's process group with SIGTERM first when its timeout passes."""
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _on_signal)


# -- mounts ------------------------------------------------------------------------------------------
def unescape(field: str) -> str:
    """A mountinfo field with its octal escapes decoded: the kernel writes space, tab, newline and
    backslash as ``\\040``, ``\\011``, ``\\012``, ``\\134`` (fs/proc_namespace.c ``mangle``)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[dict]:
    """Every line of a mountinfo file as ``{"mount_id": int, "device": "MAJ:MIN", "root": str,
    "mount_point": str, "fstype": str, "source": str}``, in file order (later lines are mounted on top of
    earlier ones). Lines without the ``-`` separator or with too few fields are left out."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        f = left.split()
        r = right.split()
        if len(f) < 5 or not r:
            continue
        out.append({"mount_id": int(f[0]) if f[0].isdigit() else f[0], "device": f[2], "root": unescape(f[3]),
                    "mount_point": unescape(f[4]), "fstype": r[0], "source": unescape(r[1]) if len(r) > 1 else ""})
    return out


def _holding(mounts: list[dict], real: str) -> dict | None:
    """The mount holding the resolved path ``real``: the longest mount point that is ``real`` or a parent of
    it; of equal ones the last line (the mount on top)."""
    best = None
    for m in mounts:
        mp = m["mount_point"]
        if not (real == mp or mp == "/" or real.startswith(mp.rstrip("/") + "/")):
            continue
        if best is None or len(mp) >= len(best["mount_point"]):
            best = m
    return best


def mount_of(path: str, mountinfo: str = MOUNTINFO) -> dict:
    """``{"mount_point", "fstype", "source", "root", "device", "mount_id"}`` of the mount holding ``path``
    (symlinks resolved). Raises ProbeFailed when no mount holds it, OSError when ``mountinfo`` is unreadable."""
    with open(mountinfo, encoding="utf-8", errors="replace") as f:
        mounts = parse_mountinfo(f.read())
    m = _holding(mounts, os.path.realpath(path))
    if m is None:
        raise ProbeFailed(f"{path}: no mount found in {mountinfo}")
    return m


_KINDS = ((stat.S_ISREG, "a regular file"), (stat.S_ISBLK, "a block device"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def not_a_directory(path: str) -> str:
    """Why ``path`` is not a directory that can be tested, one line naming it: ``"<path>: no such directory"``,
    ``"<path>: not a directory but a regular file"``, ``"<path>: a symlink to /mnt/nvme1/x, which does not
    exist"`` (the mount or folder it points to is missing), or the error that stopped ``stat``
    (``"<path>: cannot be looked up: Permission denied"``)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            return f"{path}: a symlink to {os.readlink(path)}, which does not exist (is its mount missing?)"
        return f"{path}: no such directory"
    except OSError as e:
        return f"{path}: cannot be looked up: {e.strerror}"
    kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a directory")
    return f"{path}: not a directory but {kind}"


def placement(path: str, mountinfo: str = MOUNTINFO) -> dict:
    """Where ``path`` really is: ``{"path", "real_path", "is_dir", "mount_point", "mount_source", "fstype",
    "mount_root", "device", "root_fs", "root_device", "error"}``.

    ``device`` is the filesystem's ``major:minor`` from mountinfo; ``root_fs`` is True when it is the same
    filesystem as the one mounted at ``/`` (same ``major:minor``): a directory left on the OS disk because
    the mount meant for it is missing, or a bind mount of a folder of the root disk, both read True.
    ``error`` (None when fine) says why the rest could not be read (:func:`not_a_directory`: no such
    directory, a file, a dangling symlink; mountinfo unreadable);
    the mount fields are None then. Never raises.
    """
    res = {"path": path, "real_path": os.path.realpath(path), "is_dir": os.path.isdir(path), "mount_point": None,
           "mount_source": None, "fstype": None, "mount_root": None, "device": None, "root_fs": None,
           "root_device": None, "error": None}
    if not res["is_dir"]:
        res["error"] = not_a_directory(path)
        return res
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            mounts = parse_mountinfo(f.read())
    except OSError as e:
        res["error"] = f"{path}: cannot read the mount table {mountinfo}: {e.strerror}"
        return res
    m = _holding(mounts, res["real_path"])
    root = _holding(mounts, "/")
    if m is None:
        res["error"] = f"{path}: no mount found in {mountinfo}"
        return res
    res.update(mount_point=m["mount_point"], mount_source=m["source"], fstype=m["fstype"], mount_root=m["root"],
               device=m["device"], root_device=root["device"] if root else None,
               root_fs=bool(root) and m["device"] == root["device"])
    return res


def not_block_backed(fstype: str) -> bool:
    """True for filesystems whose speed is not a drive's: RAM-backed, overlay, squashfs, FUSE."""
    return fstype in NOT_BLOCK or fstype.startswith("fuse")


# -- free space ---------------------------------------------------------------------------------------
def default_margin(st: os.statvfs_result) -> int:
    """Free space never used by a test, bytes: max(5 GiB, 5 % of the filesystem's size)."""
    return max(5 * GIB, int(st.f_blocks * st.f_frsize * 0.05))


def _size(n: int) -> str:
    """``n`` bytes as ``"3.20 GiB"``, or ``"64 MiB"`` below one GiB."""
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


def plan_size(path: str, requested_total: int, margin: int | None) -> tuple[int, int, int]:
    """(total bytes to use, free bytes, margin bytes) for ``requested_total`` bytes under ``path``.

    Free bytes = ``f_bavail * f_frsize`` (os.statvfs: what an unprivileged writer may use); ``margin``
    None means :func:`default_margin`. Raises :class:`Refused` (``free_space``, a ProbeFailed) when fewer than
    64 MiB lie between free space and the margin (no useful test).
    """
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    m = default_margin(st) if margin is None else int(margin)
    room = free - m
    if room < MIN_ROOM:
        raise Refused(f"not enough free space on {path}: {_size(free)} free, {_size(m + MIN_ROOM)} needed (a "
                      f"margin of {_size(m)} left free, and {_size(MIN_ROOM)} at least to write)",
                      {"reason": "free_space", "path": path, "free_bytes": free, "need_bytes": m + MIN_ROOM,
                       "margin_bytes": m})
    return min(int(requested_total), room), free, m


# -- the scratch folder -----------------------------------------------------------------------------------
def make_workdir(path: str) -> str:
    """A fresh ``<path>/.gpuaccept-<12 hex digits>`` folder (mode 0700); OSError when it cannot be made."""
    d = os.path.join(path, WORKDIR_PREFIX + secrets.token_hex(6))
    os.mkdir(d, 0o700)
    return d


@contextlib.contextmanager
def scratch(path: str, want_bytes: int, margin: int | None = None):
    """The set-up every storage probe shares, as a context manager yielding a dict
    ``{"workdir", "bytes", "free_bytes", "margin_bytes", "placement"}``.

    ``path`` must be a directory on a block-backed, writable filesystem (else :class:`Refused` "<path>: not a
    block-backed filesystem (tmpfs)", or ``read_only``, before anything is written). ``bytes`` is ``want_bytes``
    capped by :func:`plan_size` (:class:`Refused` ``free_space``, "not enough free space ...", when there is no
    room); a test folder that cannot be made for EROFS, ENOSPC, EACCES is :class:`Refused` too; ``placement`` is :func:`placement` of
    ``path``. SIGTERM/SIGHUP become :class:`Terminated` from here on; the fresh ``workdir`` (see
    :func:`make_workdir`) and everything in it is removed when the block exits, however it exits.
    """
    where = placement(path)
    if where["error"]:
        raise Refused(where["error"], {"reason": "placement", "path": path})
    if not_block_backed(where["fstype"]):
        raise Refused(f"{path}: not a block-backed filesystem ({where['fstype']})",
                      {"reason": "not_block_backed", "path": path, "fstype": where["fstype"]})
    ro = read_only(path)
    if ro is not None:
        raise ro
    nbytes, free, m = plan_size(path, want_bytes, margin)
    install_signal_cleanup()
    work = None
    try:
        try:
            work = make_workdir(path)
        except OSError as e:
            raise (write_refusal(path, e, m + MIN_ROOM)
                   or ProbeFailed(f"{path}: cannot create a test folder: {e.strerror}")) from None
        yield {"workdir": work, "bytes": nbytes, "free_bytes": free, "margin_bytes": m, "placement": where}
    finally:
        if work:
            shutil.rmtree(work, ignore_errors=True)
