"""Storage limits and storage settings from inventory variables (pure: no I/O, no node).

Storage figures depend on the drives and filesystems a site bought, not on the GPU SKU, so their limits
live in the inventory (group vars, typically) rather than in ``thresholds/<sku>.yaml``::

    storage_limits:                 # every key optional; a figure without a limit is recorded, not judged
      seq_read_gbps: 12.0           # per local path, sequential read, 1 MiB blocks, GB/s (1e9 B/s)
      seq_write_gbps: 6.0           # per local path, sequential write, GB/s
      rand_read_iops: 1500000       # per local path, 4 KiB random read, IO/s
      fs_aggregate_read_gbps: 80    # shared filesystem, every host reading at once, sum, GB/s
      fs_aggregate_write_gbps: 40   # shared filesystem, every host writing at once, sum, GB/s
      storage_to_gpu_gbps: 5.0      # per GPU, file -> pinned host memory -> GPU, end to end, GB/s
      gds_read_gbps: 5.0            # per GPU, GPUDirect Storage file -> GPU, GB/s
      gds_write_gbps: 3.0           # per GPU, GPUDirect Storage GPU -> file, GB/s

    storage_fio: {size: 4294967296, runtime: 20, numjobs: 4, iodepth: 32}   # fio_throughput probe args

Every limit is a floor (direction "min"); the keys, units and directions are the entries of
:data:`gpuaccept.config.thresholds.REGISTRY` whose ``var`` is ``storage_limits`` (the one registry of checks).
:func:`storage_limits` builds :class:`~gpuaccept.config.thresholds.Limit` objects whose ``source`` is "inventory var
storage_limits"; an unknown key raises :class:`StorageConfigError`
(a ConfigError) naming the key, so a typo never silently leaves a figure unjudged. A limit set for a figure
that cannot be measured (``seq_read_gbps`` with no ``storage_paths``) is an error in the suite, not a skip.

Where the paths must be (every key optional; ``<kind>`` is ``storage`` for ``storage_paths``, ``fs`` for
``fs_paths``, ``gds`` for ``gds_paths``; a GDS test on the first ``storage_paths`` entry uses ``storage_*``)::

    storage_expect_mount: [/mnt/nvme0, /mnt/nvme1]   # mount point(s) a path must be on (string or list)
    storage_expect_fstype: [xfs, ext4]               # filesystem type(s) a path must be on
    storage_allow_root_fs: false     # a path on the root filesystem (the OS disk) fails unless true
    fs_expect_fstype: lustre         # for fs_paths a local-disk type (ext4, xfs, ...) fails unless listed here
    fs_expect_mount: /lustre
    fs_allow_root_fs: false

:func:`validate_vars` checks every variable above (and ``ib_hcas``, ``ib_rate_gbps``, ``nvme_count``, the
booleans) in one call, so the run can stop before any node is touched; the suites call the same parsers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from gpuaccept.errors import ConfigError
from gpuaccept.config.thresholds import Limit, inventory_checks, inventory_limit
from gpuaccept.config.shown import shown

SOURCE = "inventory var storage_limits"

# key -> (unit, direction): the checks gpuaccept.config.thresholds.REGISTRY says storage_limits sets
STORAGE_CHECKS: dict[str, tuple[str, str]] = {k: (c.unit, c.direction)
                                              for k, c in inventory_checks("storage_limits").items()}

# storage_fio keys (fio_throughput probe arguments an operator may set) -> accepted Python types
FIO_ARG_TYPES: dict[str, tuple[type, ...]] = {
    "size": (int,), "runtime": (int, float), "numjobs": (int,), "iodepth": (int,), "bs": (str, int),
    "rand_bs": (int,), "ioengine": (str,), "direct": (int,), "min_free_bytes": (int,),
}


class StorageConfigError(ConfigError):
    """A storage inventory variable is malformed or has an unknown key; the message names var and key."""


def _where(host: str | None, var: str) -> str:
    """``"<host>: inventory var <var>"``; ``host`` is any label put first (a host name, or "file: host h")."""
    return f"{host}: inventory var {var}" if host else f"inventory var {var}"


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def storage_limits(value: Any, host: str | None = None) -> dict[str, Limit]:
    """The ``storage_limits`` variable as check key -> Limit (``sku`` field "inventory").

    ``value``: the variable as the inventory holds it (None or a mapping of key to a number).
    Raises StorageConfigError for a non-mapping, an unknown key, or a bound that is not a number >= 0.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise StorageConfigError(f"{_where(host, 'storage_limits')}: expected a mapping of check to number, "
                                 f"got {shown(value)}")
    out: dict[str, Limit] = {}
    for key, bound in value.items():
        if key not in STORAGE_CHECKS:
            raise StorageConfigError(f"{_where(host, 'storage_limits')}: unknown key {shown(key)} "
                                     f"(known: {', '.join(sorted(STORAGE_CHECKS))})")
        if not _is_number(bound) or bound < 0:
            raise StorageConfigError(f"{_where(host, 'storage_limits')}.{key}: expected a number >= 0, "
                                     f"got {shown(bound)}")
        out[key] = inventory_limit(key, bound, SOURCE)
    return out


def path_list(value: Any, var: str, host: str | None = None) -> list[str]:
    """A list-of-directories variable (``storage_paths``, ``fs_paths``, ``gds_paths``): None -> [],
    one string -> [it]; every entry must be an absolute path. Raises StorageConfigError otherwise."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) and p for p in value):
        raise StorageConfigError(f"{_where(host, var)}: expected a list of directories, got {shown(value)}")
    for p in value:
        if not p.startswith("/"):
            raise StorageConfigError(f"{_where(host, var)}: {shown(p)} is not an absolute path")
    return list(value)


def fio_args(value: Any, host: str | None = None) -> dict[str, Any]:
    """The ``storage_fio`` variable (fio_throughput probe arguments) checked: known keys, right types."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise StorageConfigError(f"{_where(host, 'storage_fio')}: expected a mapping, got {shown(value)}")
    for key, v in value.items():
        if key not in FIO_ARG_TYPES:
            raise StorageConfigError(f"{_where(host, 'storage_fio')}: unknown key {shown(key)} "
                                     f"(known: {', '.join(sorted(FIO_ARG_TYPES))})")
        if isinstance(v, bool) or not isinstance(v, FIO_ARG_TYPES[key]):
            raise StorageConfigError(f"{_where(host, 'storage_fio')}.{key}: unexpected value {shown(v)}")
    return dict(value)


def bool_var(value: Any, var: str, host: str | None = None) -> bool:
    """A boolean variable (``storage_allow_destructive``, ``gds_allow_compat``); None -> False.
    Accepts true/false and the strings Ansible reads as booleans ("yes", "no", "true", "1", ...)."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    if isinstance(value, str) and value.strip().lower() in ("yes", "true", "on", "1", "y"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("no", "false", "off", "0", "n", ""):
        return False
    raise StorageConfigError(f"{_where(host, var)}: expected true or false, got {shown(value)}")


def int_var(value: Any, var: str, host: str | None = None) -> int | None:
    """An optional non-negative integer variable (``nvme_count``); None when unset."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StorageConfigError(f"{_where(host, var)}: expected an integer >= 0, got {shown(value)}")
    return value


def str_list(value: Any, var: str, host: str | None = None) -> list[str]:
    """A variable that is one string or a list of strings (``ib_hcas``, ``*_expect_fstype``); None -> [].
    Raises StorageConfigError for anything else or an empty string."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(x, str) and x.strip() for x in value):
        raise StorageConfigError(f"{_where(host, var)}: expected a string or a list of strings, got {shown(value)}")
    return [x.strip() for x in value]


# -- where the paths must be --------------------------------------------------------------------------
#: path kind -> the inventory variable holding its directories
PATH_VARS = {"storage": "storage_paths", "fs": "fs_paths", "gds": "gds_paths"}
#: filesystem types that live on one host's own block device: a shared-filesystem path on one of these is one
#: host's local disk (a missing Lustre/NFS/GPFS mount leaves the directory on such a filesystem). Linux's
#: disk filesystems as ``/proc/filesystems`` lists them without "nodev"; zfs and bcachefs added.
LOCAL_DISK_FSTYPES = ("ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "jfs", "reiserfs", "nilfs2", "vfat",
                      "exfat", "ntfs", "ntfs3", "zfs", "bcachefs")


@dataclass(frozen=True)
class PathExpectation:
    """What the inventory says about the directories of one path kind (see the module docstring).

    ``kind``: "storage" | "fs" | "gds"; ``var``: the path variable (``storage_paths`` ...); ``mounts``: the
    mount points allowed (empty: any); ``fstypes``: the filesystem types allowed (empty: any, except that a
    shared path may not be on a :data:`LOCAL_DISK_FSTYPES` type unless listed); ``allow_root_fs``: a path on
    the root filesystem is expected; ``shared``: the paths are meant to be one filesystem seen by every host.
    """

    kind: str
    var: str
    mounts: tuple[str, ...] = ()
    fstypes: tuple[str, ...] = ()
    allow_root_fs: bool = False
    shared: bool = False

    def var_name(self, what: str) -> str:
        """The inventory variable that sets ``what`` ("expect_mount", "expect_fstype", "allow_root_fs")."""
        return f"{self.kind}_{what}"


def expectation(vars: Mapping[str, Any], kind: str, host: str | None = None) -> PathExpectation:
    """The :class:`PathExpectation` of path kind ``kind`` ("storage", "fs", "gds") from a host's ``vars``.
    Raises StorageConfigError for a malformed ``<kind>_expect_mount`` (not absolute paths),
    ``<kind>_expect_fstype`` or ``<kind>_allow_root_fs``; KeyError for an unknown kind."""
    var = PATH_VARS[kind]
    mounts = str_list(vars.get(f"{kind}_expect_mount"), f"{kind}_expect_mount", host)
    for m in mounts:
        if not m.startswith("/"):
            raise StorageConfigError(f"{_where(host, f'{kind}_expect_mount')}: {shown(m)} is not an absolute path")
    fstypes = str_list(vars.get(f"{kind}_expect_fstype"), f"{kind}_expect_fstype", host)
    return PathExpectation(kind, var, tuple(m.rstrip("/") or "/" for m in mounts), tuple(fstypes),
                           bool_var(vars.get(f"{kind}_allow_root_fs"), f"{kind}_allow_root_fs", host),
                           shared=kind == "fs")


# -- RDMA --------------------------------------------------------------------------------------------
def ib_rate_limit(value: Any, host: str | None = None) -> Limit | None:
    """The ``ib_rate_gbps`` variable (expected InfiniBand/RoCE port rate, Gb/s as the kernel writes it in
    /sys/class/infiniband/<hca>/ports/<n>/rate) as a floor Limit with check ``ib_rate_gbps`` (the suite
    names the port in the check); None when unset. Raises StorageConfigError for a non-number or < 0."""
    if value is None:
        return None
    if not _is_number(value) or value < 0:
        raise StorageConfigError(f"{_where(host, 'ib_rate_gbps')}: expected a number >= 0 (Gb/s), got {shown(value)}")
    return inventory_limit("ib_rate_gbps", value)


# -- every variable at once ---------------------------------------------------------------------------
def _limits(v, host):
    storage_limits(v, host)


#: variable -> validator(value, host); every inventory variable the storage and gpudirect layers read
VALIDATORS: dict[str, Callable[[Any, str | None], Any]] = {
    "storage_paths": lambda v, h: path_list(v, "storage_paths", h),
    "fs_paths": lambda v, h: path_list(v, "fs_paths", h),
    "gds_paths": lambda v, h: path_list(v, "gds_paths", h),
    "storage_devices": lambda v, h: path_list(v, "storage_devices", h),
    "storage_limits": _limits,
    "storage_fio": fio_args,
    "nvme_count": lambda v, h: int_var(v, "nvme_count", h),
    "storage_allow_destructive": lambda v, h: bool_var(v, "storage_allow_destructive", h),
    "gds_allow_compat": lambda v, h: bool_var(v, "gds_allow_compat", h),
    "ib_hcas": lambda v, h: str_list(v, "ib_hcas", h),
    "ib_rate_gbps": ib_rate_limit,
}
for _kind in PATH_VARS:
    VALIDATORS[f"{_kind}_allow_root_fs"] = (lambda k: lambda v, h: bool_var(v, f"{k}_allow_root_fs", h))(_kind)
    VALIDATORS[f"{_kind}_expect_mount"] = (lambda k: lambda v, h: expectation({f"{k}_expect_mount": v}, k, h))(_kind)
    VALIDATORS[f"{_kind}_expect_fstype"] = (lambda k: lambda v, h: str_list(v, f"{k}_expect_fstype", h))(_kind)


def validate_vars(vars: Mapping[str, Any], host: str | None = None) -> None:
    """Check every storage/gpudirect variable present in one host's resolved ``vars`` (keys of
    :data:`VALIDATORS`; other keys are ignored). Pure; meant to run before any node is touched.

    ``host``: the label the message starts with (a host name, or "inventory.ini: host gpu01").
    Raises StorageConfigError (a ConfigError) with one line naming the variable and the bad key or value.
    """
    for name, check in VALIDATORS.items():
        if name in vars:
            check(vars[name], host)
