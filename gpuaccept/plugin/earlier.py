"""The ``earlier_runs`` fixture: what the run's history database says of a host before this run, for the judges
that take it as evidence (gpuaccept.reporting.history.earlier). Read only, opened once per process (the
controller, each xdist worker); a run with ``--history none``, or whose database does not exist yet or cannot be
read, reads as knowing nothing (None), never as an error of the test."""
from __future__ import annotations

import os
import sqlite3

import pytest


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

    def most_gpus(self, host: str, serials: list[str] | None = None) -> int | None:
        """The most GPUs NVML listed on ``host`` in a run the history holds, counting only runs of the machine
        whose GPUs carry one of ``serials`` (gpuaccept.reporting.history.earlier.most_gpus), None when unknown."""
        key = (host, tuple(sorted(serials)) if serials is not None else None)
        if key not in self._gpus:
            self._gpus[key] = self._ask(host, serials)
        return self._gpus[key]

    def _ask(self, host: str, serials: list[str] | None = None) -> int | None:
        if self._dead:
            return None
        from gpuaccept.reporting.history import HistoryError, connect_readonly
        from gpuaccept.reporting.history.earlier import most_gpus
        try:
            if self._con is None:
                self._con = connect_readonly(self.path)
            return most_gpus(self._con, host, serials)
        except (HistoryError, sqlite3.Error, OSError):
            self._dead = True
            return None

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


@pytest.fixture(scope="session")
def earlier_runs(request) -> EarlierRuns:
    """:class:`EarlierRuns` of the run's history database (:func:`history_path`)."""
    runs = EarlierRuns(history_path(request.config))
    yield runs
    runs.close()
