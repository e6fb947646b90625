"""A run whose selection holds no host: a ``--shard I/K`` none of the selected hosts hashes to (K larger than the
host count, or an unlucky split; gpuaccept.config.patterns.shard). Every other way to an empty selection is
refused before pytest starts (a ``--limit`` matching nothing: exit 4; a ``--limit @FILE`` listing no host: exit 5).

pytest, given no value for the per-host ``node`` parameter, makes one placeholder test per function with the
parameter ``NOTSET``: that placeholder would be taken for a host (a connection to a host named
``NotSetType.token``, a "not run" host ``NOTSET`` in the reports). So an empty shard runs no test at all: every
collected test is deselected (a host test has no host; a fleet-wide test has no fleet to compare), its report
folder holds a report of no host and no test (so that the K shards' folders all exist for
gpuaccept.scaleout.merge), and the run exits 0: the shard did all it had to do.
"""
from __future__ import annotations

from typing import Any

import pytest

__all__ = ["deselect_all", "empty_line", "finish"]


def empty_line(shard_spec: str | None, limit: str | None) -> str:
    """The line an empty run prints, naming the shard and the selection it was cut from (pure)."""
    sel = f"--limit {limit}" if limit else "the inventory"
    return (f"gpuaccept: --shard {shard_spec} holds none of the hosts of {sel}: no test runs on this shard; its "
            "report names no host (exit 0)")


def deselect_all(config: pytest.Config, items: list[Any]) -> None:
    """Deselect every item of ``items`` (in place, told to pytest's ``pytest_deselected`` so that the count is
    shown as "N deselected"). Called only when the run selects no host."""
    if items:
        config.hook.pytest_deselected(items=list(items))
        items[:] = []


def finish(session: pytest.Session, shard_spec: str | None, limit: str | None) -> None:
    """At the end of an empty run: pytest's "no tests collected" (exit 5) becomes 0, and the line of
    :func:`empty_line` is printed. Any other exit status (an interrupt, an internal error) stays."""
    if session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(empty_line(shard_spec, limit))
