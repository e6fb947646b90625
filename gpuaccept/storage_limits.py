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

Every limit is a floor (direction "min"). :func:`storage_limits` builds :class:`~gpuaccept.thresholds.Limit`
objects whose ``source`` is "inventory var storage_limits"; an unknown key raises :class:`StorageConfigError`
(a ConfigError) naming the key, so a typo never silently leaves a figure unjudged.
"""
from __future__ import annotations

from typing import Any, Mapping

from .errors import ConfigError
from .thresholds import Limit

SOURCE = "inventory var storage_limits"

# key -> (unit, direction)
STORAGE_CHECKS: dict[str, tuple[str, str]] = {
    "seq_read_gbps": ("GB/s", "min"),
    "seq_write_gbps": ("GB/s", "min"),
    "rand_read_iops": ("IOPS", "min"),
    "fs_aggregate_read_gbps": ("GB/s", "min"),
    "fs_aggregate_write_gbps": ("GB/s", "min"),
    "storage_to_gpu_gbps": ("GB/s", "min"),
    "gds_read_gbps": ("GB/s", "min"),
    "gds_write_gbps": ("GB/s", "min"),
}

# storage_fio keys (fio_throughput probe arguments an operator may set) -> accepted Python types
FIO_ARG_TYPES: dict[str, tuple[type, ...]] = {
    "size": (int,), "runtime": (int, float), "numjobs": (int,), "iodepth": (int,), "bs": (str, int),
    "rand_bs": (int,), "ioengine": (str,), "direct": (int,), "min_free_bytes": (int,),
}


class StorageConfigError(ConfigError):
    """A storage inventory variable is malformed or has an unknown key; the message names var and key."""


def _where(host: str | None, var: str) -> str:
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
                                 f"got {value!r}")
    out: dict[str, Limit] = {}
    for key, bound in value.items():
        if key not in STORAGE_CHECKS:
            raise StorageConfigError(f"{_where(host, 'storage_limits')}: unknown key '{key}' "
                                     f"(known: {', '.join(sorted(STORAGE_CHECKS))})")
        if not _is_number(bound) or bound < 0:
            raise StorageConfigError(f"{_where(host, 'storage_limits')}.{key}: expected a number >= 0, "
                                     f"got {bound!r}")
        unit, direction = STORAGE_CHECKS[key]
        out[key] = Limit("inventory", key, direction, float(bound), unit, SOURCE)
    return out


def path_list(value: Any, var: str, host: str | None = None) -> list[str]:
    """A list-of-directories variable (``storage_paths``, ``fs_paths``, ``gds_paths``): None -> [],
    one string -> [it]; every entry must be an absolute path. Raises StorageConfigError otherwise."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) and p for p in value):
        raise StorageConfigError(f"{_where(host, var)}: expected a list of directories, got {value!r}")
    for p in value:
        if not p.startswith("/"):
            raise StorageConfigError(f"{_where(host, var)}: '{p}' is not an absolute path")
    return list(value)


def fio_args(value: Any, host: str | None = None) -> dict[str, Any]:
    """The ``storage_fio`` variable (fio_throughput probe arguments) checked: known keys, right types."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise StorageConfigError(f"{_where(host, 'storage_fio')}: expected a mapping, got {value!r}")
    for key, v in value.items():
        if key not in FIO_ARG_TYPES:
            raise StorageConfigError(f"{_where(host, 'storage_fio')}: unknown key '{key}' "
                                     f"(known: {', '.join(sorted(FIO_ARG_TYPES))})")
        if isinstance(v, bool) or not isinstance(v, FIO_ARG_TYPES[key]):
            raise StorageConfigError(f"{_where(host, 'storage_fio')}.{key}: unexpected value {v!r}")
    return dict(value)


def flag(value: Any, var: str, host: str | None = None) -> bool:
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
    raise StorageConfigError(f"{_where(host, var)}: expected true or false, got {value!r}")


def count(value: Any, var: str, host: str | None = None) -> int | None:
    """An optional non-negative integer variable (``nvme_count``); None when unset."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StorageConfigError(f"{_where(host, var)}: expected an integer >= 0, got {value!r}")
    return value
