"""What a test shows on the console with ``-s`` (gpuaccept.judging.recorder.Recorder.show: nccl-tests' table of
an all-reduce): written by the process that runs the terminal, from the test's report (its ``user_properties``),
so that ``-n 2 -s`` shows it as ``-s`` does: pytest-xdist drops a worker's standard output."""
from __future__ import annotations

import pytest

from gpuaccept.judging.recorder import SHOW_KEY


class ShownOutput:
    """Writes each :data:`SHOW_KEY` text of a test's call report on the terminal, once per test, after its
    progress mark. Registered on the controller (or a run without workers) when output capture is off (``-s``,
    ``--capture=no``)."""

    def __init__(self, config: pytest.Config):
        self.config = config

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report) -> None:
        if report.when != "call":
            return
        texts = [v for k, v in getattr(report, "user_properties", ()) or () if k == SHOW_KEY and isinstance(v, str)]
        tr = self.config.pluginmanager.get_plugin("terminalreporter") if texts else None
        if tr is None:
            return
        tr.ensure_newline()
        for text in texts:
            for line in text.splitlines():
                tr.write_line(line)


def register(config: pytest.Config) -> None:
    """Register :class:`ShownOutput` when output capture is off; called on the process that runs the terminal
    (gpuaccept.plugin.pytest_configure: not on a pytest-xdist worker)."""
    if config.getoption("capture", None) == "no":
        config.pluginmanager.register(ShownOutput(config), "gpuaccept-shown-output")
