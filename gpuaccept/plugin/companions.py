"""The pytest plugins a run of the suites loads besides gpuaccept's own, by name.

The repository's pytest.ini (and the ``gpuaccept`` command) turn pytest's plugin autoload off
(``--disable-plugin-autoload``, pytest 8.4): a run loads gpuaccept's plugin and :data:`COMPANIONS`, not every
pytest plugin the Python happens to carry. On a GPU node's image with a dozen of them (the lent H200/H100 image:
anyio, jaxtyping with numpy, pytest-benchmark, pytest-mock, hypothesis, ...) their import and their hooks at the
session's start and end cost 0.7 s of a 15 s quick run on an H100 node (2026-12-05), and one that reorders or reruns tests
(pytest-randomly, pytest-rerunfailures) would change the layers' order and what a verdict rests on. An operator's
own plugin is loaded as pytest loads any: ``-p NAME``.
"""
from __future__ import annotations

import sys

#: module names of the plugins the suites use: pytest-xdist (``-n``)
COMPANIONS = ("xdist.plugin",)


def load(pluginmanager) -> list[str]:
    """Import and register each of :data:`COMPANIONS` that is neither registered (autoload on, ``-p``, under any
    name) nor blocked (``-p no:xdist``, by its distribution's name or its own) and is installed. Returns the names
    loaded. Call before the command line's last parse (``pytest_load_initial_conftests``), so that their options
    parse."""
    loaded = []
    for name in COMPANIONS:
        module = sys.modules.get(name)
        if (pluginmanager.has_plugin(name) or (module is not None and pluginmanager.is_registered(module))
                or any(pluginmanager.is_blocked(n) for n in (name, name.split(".")[0]))):
            continue
        try:
            pluginmanager.import_plugin(name)
        except ImportError:  # not installed: its options are unknown to this run, as pytest then says
            continue
        loaded.append(name)
    return loaded
