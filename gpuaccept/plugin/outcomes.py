"""How a test's error or failure is told (pure but for pytest's ExceptionInfo): the causes of an error a test
raised (:func:`error_causes`), the declared-GPUs-missing failure (:class:`DeclaredGpuMissing`, :func:`declared_text`), the one-line
report of our own errors (:func:`quiet_excinfo`) and the missing-package line (:func:`missing_package_line`)."""
from __future__ import annotations

import pytest

from gpuaccept.causes import Cause
from gpuaccept.errors import ConfigError, NodeError, PackageMissing
from gpuaccept.judging.blockers import missing_package
from gpuaccept.runner.host import HostRunner


def declared_text(vars_: dict, sku_override: str | None) -> str:
    """What declares GPUs for a host (pure): ``"--sku l4-24gb declares one"`` where ``--sku`` is given (it wins
    over the inventory's gpu_sku), ``"the inventory declares gpu_sku=h200-sxm-141gb gpus_per_node=8"``, or
    both joined by "and" (``--sku`` and the inventory's gpus_per_node); the end of the declared-GPUs-missing line."""
    keys = ("gpus_per_node",) if sku_override else ("gpu_sku", "gpus_per_node")
    said = [f"{k}={vars_[k]}" for k in keys if vars_.get(k)]
    parts = ([f"--sku {sku_override} declares one"] if sku_override else []) + \
        ([f"the inventory declares {' '.join(said)}"] if said else [])
    return " and ".join(parts)


class DeclaredGpuMissing(Exception):
    """The inventory declares GPUs for a host that shows none: a failure of the host, not of the run. ``cause``:
    why none shows (gpuaccept.judging.blockers.declared_missing_cause: the probe's reason code)."""

    def __init__(self, msg: str, cause: Cause):
        super().__init__(msg)
        self.cause = cause


def error_causes(e: BaseException, host: str | None) -> list[Cause]:
    """The causes of an error a test raised: a NodeError's own; a threshold or other input problem is the
    configuration's; anything else is gpuaccept's own (``tool``, ``internal``)."""
    if isinstance(e, NodeError):
        return [e.cause]
    if isinstance(e, ConfigError):  # ThresholdError among them: no usable threshold file for the node's SKU
        return [Cause("configuration", "no_thresholds", host)]
    return [Cause("tool", "internal", host)]


def quiet_excinfo(msg: str) -> pytest.ExceptionInfo:
    """An ExceptionInfo pytest reports as ``msg`` alone, without formatting a traceback (``pytest.fail`` with
    ``pytrace=False``, raised here so that it has the one-frame traceback pytest requires)."""
    try:
        pytest.fail(msg, pytrace=False)
    except pytest.fail.Exception:
        return pytest.ExceptionInfo.from_current()
    raise AssertionError("unreachable")  # pragma: no cover


def missing_package_line(item, e: BaseException) -> str | None:
    """``"<host>: driver present (...), torch missing for <python>"`` for a probe that died on a missing
    package (a PackageMissing: gpuaccept.judging.blockers.missing_package), else None."""
    node = item.funcargs.get("node") if hasattr(item, "funcargs") else None
    if not isinstance(node, HostRunner) or not isinstance(e, PackageMissing):
        return None
    try:
        doc = node.gpu_inventory()
    except Exception:  # noqa: BLE001 - the probe error itself is the answer then
        doc = None
    line = missing_package(e.evidence.get("module"), doc, node.python)
    return f"{node.name}: {line}" if line else None
