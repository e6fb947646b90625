"""The ``earlier_runs`` fixture: what the run's history database says of a host before this run, for the judges
that take it as evidence (gpuaccept.reporting.history.earlier). Read only, opened once per process (the
controller, each xdist worker); a run with ``--history none``, or whose database does not exist yet or cannot be
read, reads as knowing nothing (None), never as an error of the test.

:func:`escalated`: a test's causes with an unreachable host judged against the runs before
(gpuaccept.judging.unreachable), called by the plugin where a test's error gets its causes."""
from __future__ import annotations

import os
import sqlite3

import pytest

from gpuaccept.causes import Cause
from gpuaccept.judging.unreachable import again
from gpuaccept.plugin.state import STATE


def history_path(config: pytest.Config) -> str | None:
    """The run's history database (``--history``; default ``reports/history.sqlite`` below the folder pytest was
    started in), None for ``--history none``."""
    given = config.getoption("history", None)
    if given == "none":
        return None
    return given or str(config.invocation_params.dir / "reports" / "history.sqlite")


class EarlierRuns:
    """Earlier runs' facts of a host, from the database at ``path`` (None: none kept). Answers are cached per
    host; the first failure to read leaves every answer None."""

    def __init__(self, path: str | None):
        self.path = path
        self._con: sqlite3.Connection | None = None
        self._dead = path is None or not os.path.isfile(path)
        self._gpus: dict[tuple, int | None] = {}
        self._gone: dict[str, tuple[int, float | None]] = {}

    def most_gpus(self, host: str, serials: list[str] | None = None) -> int | None:
        """The most GPUs NVML listed on ``host`` in a run the history holds, counting only runs of the machine
        whose GPUs carry one of ``serials`` (gpuaccept.reporting.history.earlier.most_gpus), None when unknown."""
        key = (host, tuple(sorted(serials)) if serials is not None else None)
        if key not in self._gpus:
            self._gpus[key] = self._ask(host, serials)
        return self._gpus[key]

    def unreachable_runs(self, host: str) -> tuple[int, float | None]:
        """``(n, since)``: the runs in a row, up to the newest, that could not reach ``host``, and the start of the
        earliest (gpuaccept.reporting.history.earlier.unreachable_runs); ``(0, None)`` when unknown."""
        if host not in self._gone:
            from gpuaccept.reporting.history.earlier import unreachable_runs
            self._gone[host] = self._query(unreachable_runs, host) or (0, None)
        return self._gone[host]

    def _ask(self, host: str, serials: list[str] | None = None) -> int | None:
        from gpuaccept.reporting.history.earlier import most_gpus
        return self._query(most_gpus, host, serials)

    def _query(self, fn, *args):
        """``fn(connection, *args)`` on the database, None once it cannot be read."""
        if self._dead:
            return None
        from gpuaccept.reporting.history import HistoryError, connect_readonly
        try:
            if self._con is None:
                self._con = connect_readonly(self.path)
            return fn(self._con, *args)
        except (HistoryError, sqlite3.Error, OSError):
            self._dead = True
            return None

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


EARLIER = pytest.StashKey[EarlierRuns]()


def earlier_of(config: pytest.Config) -> EarlierRuns:
    """This process's :class:`EarlierRuns` of the run's history database (:func:`history_path`), made once."""
    if EARLIER not in config.stash:
        config.stash[EARLIER] = EarlierRuns(history_path(config))
    return config.stash[EARLIER]


def escalated(causes: list[Cause], config: pytest.Config) -> list[Cause]:
    """``causes`` with each host ``unreachable`` cause judged against the runs before this one
    (gpuaccept.judging.unreachable.again: ``unreachable_again`` after a run that could not reach it either), the
    host's address (:func:`_address`) in the evidence of one so judged."""
    out = []
    for c in causes:
        up = again(c, earlier_of(config).unreachable_runs)
        if up is not c:
            up = Cause(up.cls, up.kind, up.host, up.check, up.gpu,
                       {"address": _address(config, up.host), **up.evidence})
        out.append(up)
    return out


def _address(config: pytest.Config, host: str) -> str:
    """The address the SSH transport connects ``host`` to (gpuaccept.config.sshconfig.resolve: the inventory, its
    ssh arguments' ``-o HostName=``, ~/.ssh/config), else its name."""
    from gpuaccept.config.sshconfig import resolve
    from gpuaccept.errors import ConfigError
    st = config.stash.get(STATE, None)
    h = st.inventory.hosts.get(host) if st is not None else None
    try:
        return str(resolve(h).hostname) if h is not None else host
    except (ConfigError, OSError):
        return str(h.vars.get("ansible_ssh_host") or h.vars.get("ansible_host") or host)


@pytest.fixture(scope="session")
def earlier_runs(request) -> EarlierRuns:
    """:class:`EarlierRuns` of the run's history database (:func:`earlier_of`)."""
    runs = earlier_of(request.config)
    yield runs
    runs.close()
