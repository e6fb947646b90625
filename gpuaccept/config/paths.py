"""Where the files shipped inside the package are: the suites, the threshold files, the default inventory.

An installed gpuaccept runs from any folder (``gpuaccept --inventory prod.ini``, ``pytest --pyargs gpuaccept``),
so nothing it needs may live only in the repository's checkout; the checkout's top-level ``thresholds`` and
``inventory/localhost.ini`` are links to the files below, and ``suites/`` holds shims of the packaged suites.
"""
from __future__ import annotations

import os

#: the package folder (``.../gpuaccept``)
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the suites, one module per layer (gpuaccept/suites/test_<layer>.py)
SUITES_DIR = os.path.join(PACKAGE_DIR, "suites")
#: a project-relative default -> the file or folder shipped for it
SHIPPED = {
    "thresholds": os.path.join(PACKAGE_DIR, "thresholds"),
    "inventory/localhost.ini": os.path.join(PACKAGE_DIR, "data", "inventory", "localhost.ini"),
}


def shipped(default: str) -> str:
    """The shipped path for a project-relative ``default`` (a key of :data:`SHIPPED`); KeyError otherwise."""
    return SHIPPED[default]
