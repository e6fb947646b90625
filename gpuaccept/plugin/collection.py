"""The shipped suites' test ids, wherever the package is installed (a pytest hook the plugin face re-exports),
and the order their layers run in (:func:`in_run_order`).

The suites shipped in the package (gpuaccept/suites) are collected from wherever pip put them; pytest names a
test by its file's path from the run's rootdir, so a virtual environment inside the operator's folder made ids
such as ``venv2/lib/python3.11/site-packages/gpuaccept/suites/test_health.py::test_ecc[gpu-07]``, and the same
test read differently in the checkout, installed, and from another folder: the history, the merge and a
dashboard keyed on it saw three tests. Each shipped suite module is named ``suites/<file>`` instead, as in the
checkout, whatever the folder the run starts from.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuaccept.config.paths import SUITES_DIR
from gpuaccept.reporting.records import layer_of

#: the order layers run in: first those whose probes need no torch on the node (NVML, sysfs, fio), so that they run
#: while the node's warm child imports torch (gpuaccept/probes/_zygote.py; 4.3-8.5 s on an H200 node, 2026-12-04),
#: then those that load the GPUs, any other layer ("other": a site's own suite), and the host layer last: its EDAC
#: growth and kernel log cover the run's window, the GPU layers' load included
RUN_ORDER = ("health", "gpudirect", "storage", "memory", "compute", "nvlink", "nccl", "burnin", "other", "host")


def pytest_pycollect_makemodule(module_path: Path, parent):
    """A module of the package's suites gets the id ``suites/<file name>``; any other module is pytest's."""
    if os.path.dirname(os.path.realpath(module_path)) != os.path.realpath(SUITES_DIR):
        return None
    if not module_path.name.startswith("test_"):
        return None
    return pytest.Module.from_parent(parent, path=module_path, nodeid=f"suites/{module_path.name}")


def in_run_order(items: list) -> None:
    """Sort pytest's ``items`` in place by their layer's place in :data:`RUN_ORDER` (gpuaccept.reporting.records.layer_of;
    stable: within a layer, pytest's order: file by file, host after host)."""
    rank = {layer: i for i, layer in enumerate(RUN_ORDER)}
    items.sort(key=lambda it: rank.get(layer_of(it.nodeid), len(RUN_ORDER)))
