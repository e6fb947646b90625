"""pytest-xdist scheduling: hosts in parallel, never two tests on one host at once.

Two benchmarks on one GPU spoil each other, so every test parametrized by a host (node id ending in
``[host]``) is scoped to that host: xdist's LoadScopeScheduling sends a whole scope to one worker, which
runs its tests one after another. Tests with no host parameter (fleet-wide tests) keep their module scope.
"""
from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling


def host_scope(nodeid: str) -> str:
    """Scheduling scope of a test id: ``"host:<name>"`` for ``...::test_x[name]``, else the module."""
    if nodeid.endswith("]") and "[" in nodeid:
        return "host:" + nodeid[nodeid.index("[") + 1:-1]
    return nodeid.split("::", 1)[0]


class HostScheduling(LoadScopeScheduling):
    """LoadScopeScheduling with one scope per host (see :func:`host_scope`)."""

    def _split_scope(self, nodeid: str) -> str:
        return host_scope(nodeid)
