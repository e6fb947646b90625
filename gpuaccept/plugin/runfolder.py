"""The run's report folder, as the report plugin (gpuaccept.plugin.reports) keeps it: made for a run that runs
tests (:func:`reserve_folder`), ``reports/latest`` pointing at a finished run unless none exists
(:func:`latest_finished`, :func:`point_latest`), and a killed run found beside this one marked in its history
(:func:`mark_killed_run`)."""
from __future__ import annotations

import os
import time

import pytest

from gpuaccept.config.outputs import check_report_folder
from gpuaccept.errors import ConfigError
from gpuaccept.reporting.folder import holds_run, run_finished


def reserve_folder(config: pytest.Config) -> tuple[str, bool]:
    """The run's report folder, created now: ``--reports DIR`` (refused with ConfigError unless new or empty,
    and not the root or a system folder: gpuaccept.config.outputs) or ``reports/<UTC timestamp>[-n]`` (mkdir is atomic: two runs started in the same second get
    two folders). Returns ``(path, created)``; ``created`` says the folder is new (removed again if no test
    runs)."""
    rdir = config.getoption("reports")
    if rdir is None:
        base = str(config.invocation_params.dir / "reports")  # ./reports of the folder it runs in
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for n in range(1000):
            path = os.path.join(base, stamp + (f"-{n}" if n else ""))
            try:
                os.makedirs(path)
                return path, True
            except FileExistsError:
                continue
            except OSError as e:
                raise ConfigError(f"reports folder {path}: cannot create: {e.strerror}") from None
        raise ConfigError(f"reports folder {base}: 1000 runs started in the same second")
    rdir = os.path.abspath(rdir)
    existed = os.path.isdir(rdir)
    if existed:
        found = holds_run(rdir)
        if found:
            raise ConfigError(f"--reports {rdir}: already holds a run ({found}); give a new or empty folder")
    check_report_folder(rdir)  # not / or a system folder; new or empty: nothing there the run would follow
    try:
        os.makedirs(rdir, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--reports {rdir}: cannot create: {e.strerror}") from None
    return rdir, not existed


def latest_finished(rdir: str) -> bool:
    """Whether ``<parent of rdir>/latest`` points at a run that finished (its results.json complete)."""
    link = os.path.join(os.path.dirname(os.path.abspath(rdir)), "latest")
    return os.path.isdir(link) and run_finished(os.path.realpath(link))


def point_latest(rdir: str) -> None:
    """Point ``<parent>/latest`` at ``rdir`` (atomically: symlink + rename); leaves a real folder alone. Called at
    a run's end (its final write done), and at its first test only while ``latest`` points at no finished run:
    ``latest`` points at a finished run unless none exists."""
    parent = os.path.dirname(os.path.abspath(rdir))
    link = os.path.join(parent, "latest")
    if os.path.islink(link) or not os.path.exists(link):
        tmp = f"{link}.tmp{os.getpid()}"
        try:
            os.symlink(os.path.basename(os.path.abspath(rdir)), tmp)
            os.replace(tmp, link)
        except OSError:
            pass


def mark_killed_run(info: dict) -> str:
    """Record a killed run found beside this one (gpuaccept.reporting.folder.find_killed) in the history it wrote
    to, when it kept one; returns the line the terminal summary says."""
    rid, where = str(info.get("run_id") or os.path.basename(info.get("dir") or "?")), info.get("dir")
    head = f"gpuaccept: run {rid} ({where}) did not finish: its controller (pid {info.get('pid')}) is gone"
    path = info.get("history")
    if not path or not os.path.exists(path):
        return head + "; its reports say INCOMPLETE"
    from gpuaccept.reporting import history
    try:
        con = history.connect(path)
        try:
            history.mark_killed(con, rid, info.get("started"), info.get("last_record"), where, info.get("found_by"))
        finally:
            con.close()
    except (history.HistoryError, OSError, Exception) as e:  # sqlite3.Error too: the run goes on
        return head + f"; not marked in the history {path}: {e}"
    return (head + f"; marked killed in the history {path} (python -m gpuaccept.scaleout.merge {where} --into DIR "
            f"--history {path} adds any test it lacks)")
