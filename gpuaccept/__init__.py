"""gpuaccept: Ansible-style acceptance tests for GPU clusters, run by pytest.

The package's modules are imported as plain Python, not through pytest's assertion rewriting (they hold no
test assertions; the suites' ``test_*.py`` files, which pytest's ``python_files`` rule matches, are still
rewritten): :func:`_skip_assertion_rewriting` runs as the package is first imported. PYTEST_DONT_REWRITE
"""
from __future__ import annotations

import sys as _sys

__version__ = "0.1.0"


def _skip_assertion_rewriting(package: str = __name__) -> None:
    """Take ``package`` and its submodules off the list of modules pytest's assertion-rewriting import hook
    rewrites (``_pytest.assertion.rewrite.AssertionRewritingHook``, found in ``sys.meta_path``; nothing where
    pytest is not running or its hook lacks the attributes read here).

    pytest marks every module of a distribution that has a ``pytest11`` entry point, and every ``-p`` plugin,
    for rewriting, and caches what it rewrote as bytecode of its own (``*-pytest-X.Y.pyc``). Where bytecode may
    not be written (``PYTHONDONTWRITEBYTECODE``, set in many container images; a read-only installation), the
    hook parses, rewrites and compiles each of the package's modules again at every run, while the
    interpreter's own bytecode (pip compiles it at installation) would be read: 0.58 s more CPU for ``pytest
    --collect-only -m health`` on a 2-core machine (0.89 s against 0.31, 2026-12-05), about 1 s per run on the
    H200 machine's image. The package's docstring holds PYTEST_DONT_REWRITE, so that pytest does not warn
    that the package was imported before it could be rewritten."""
    prefix = package + "."
    for finder in _sys.meta_path:
        if type(finder).__name__ != "AssertionRewritingHook":
            continue
        marked = getattr(finder, "_must_rewrite", None)
        cache = getattr(finder, "_marked_for_rewrite_cache", None)
        if not isinstance(marked, set) or not isinstance(cache, dict):
            continue
        marked.difference_update([n for n in marked if n == package or n.startswith(prefix)])
        for name in [n for n in cache if n == package or n.startswith(prefix)]:
            del cache[name]


_skip_assertion_rewriting()
