"""The run's standard output (for the pytest plugin): guarded so that a reader gone (``| head -1``) cuts it quietly
(:func:`guard_stdout`, :func:`release_stdout`, :func:`stdout_broken`, gpuaccept.plugin.progress.PipeSafe), a
progress line never glued to pytest's open line (:func:`end_terminal_line`), and ``--list-hosts`` that could not
be written (:func:`stdout_gone`)."""
from __future__ import annotations

import functools
import sys

import pytest

from gpuaccept.config.outputs import stdout_to_devnull
from gpuaccept.plugin import progress as progress_lines
from gpuaccept.plugin.progress import PipeSafe

#: the run's standard output, as pytest's terminal writes it: a reader gone (``| head -1``) cuts it quietly
STDOUT_GUARD = pytest.StashKey[PipeSafe]()


def guard_stdout(config: pytest.Config) -> None:
    """Wrap ``sys.stdout`` (once per process) before pytest's terminal takes it, and let the progress display end
    pytest's open line before its own."""
    if isinstance(sys.stdout, PipeSafe):
        return
    sys.stdout = config.stash[STDOUT_GUARD] = PipeSafe(sys.stdout)
    progress_lines.END_TERMINAL_LINE.append(functools.partial(end_terminal_line, config))


def release_stdout(config: pytest.Config) -> None:
    """The run is over: pytest's last lines flushed here, where a reader gone cuts them quietly (the run's exit code
    kept), and ``sys.stdout`` given back."""
    guard = config.stash.get(STDOUT_GUARD, None)
    if guard is not None:
        guard.flush()
    if guard is not None and sys.stdout is guard:
        sys.stdout = guard._stream  # noqa: SLF001 - our own wrapper's stream back
    progress_lines.END_TERMINAL_LINE[:] = [f for f in progress_lines.END_TERMINAL_LINE
                                           if getattr(f, "args", (None,))[0] is not config]


def stdout_broken(config: pytest.Config) -> bool:
    """Whether the run's standard output lost its reader."""
    guard = config.stash.get(STDOUT_GUARD, None)
    return guard is not None and guard.broken


def end_terminal_line(config: pytest.Config) -> None:
    """End the line pytest's terminal left open (a progress line follows on the same output)."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.ensure_newline()
        tr.flush()


def stdout_gone(e: OSError) -> None:
    """Standard output failed with ``e``: point it at /dev/null (nothing left for the flush at exit to fail on);
    say so in one line on stderr unless its reader merely closed the pipe."""
    stdout_to_devnull()
    if not isinstance(e, BrokenPipeError):
        sys.stderr.write(f"gpuaccept: --list-hosts: could not write to standard output: {e.strerror or e}\n")
