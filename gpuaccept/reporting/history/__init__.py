"""Run history in an embedded SQLite database, keyed by GPU serial (so a GPU moved to another host keeps its
history), with the comparisons a nightly job needs: stand-outs against the GPU's baseline and previous run,
and fleet outliers per SKU and check.

``python -m gpuaccept.reporting.history [--db reports/history.sqlite] (--serial S | --host H) [--check C]`` prints one
GPU's or one host's figures over time.

Database (standard library ``sqlite3``; WAL journal so readers never block the writer; one transaction per
run; schema version in ``PRAGMA user_version``, migrated forward on open by :data:`MIGRATIONS`):

- ``runs``: run_id, started (Unix s), inventory, profile, limit_, report_dir, verdict (PASS|FAIL|ERROR).
- ``figures``: one row per numeric-or-short figure: run_id, started, host, layer, test, gpu (index),
  pci_bus_id, serial, subject (the serial, else ``host:<host>[:gpu<i>]``), sku, check_ (check name plus its
  distinguishing extras, e.g. ``busbw_gbps[bytes=4096]``), value (REAL, NULL when not numeric), value_text,
  unit, limit_kind (min|max), limit_value, verdict (pass|fail|recorded).
- ``tests``: run_id, nodeid, host, layer, outcome, message (first line), causes (v7: its causes filed under its host,
  ``' connectivity/unreachable '``); indexed by run_id (v6) and by host (v7).
- ``host_verdicts``: run_id, host, verdict.
- ``latest``: per (subject, check_, kind) the last value of kind ``previous`` (any run), ``pass`` (the last
  run where it passed) and ``burnin`` (the last passed burn-in: the burn-in suite's figures, also under the
  nightly check each is a baseline for, gpuaccept.reporting.baseline; or a passing figure of a ``--profile burnin`` run),
  upserted per run so that a comparison costs O(this run), not O(history); and ``first`` (the first run where
  it passed, never replaced: the baseline of a GPU with no burn-in, so that a slow decline of 1 % a night,
  never 10 % below the previous night, still stands out once it is 10 % below where the GPU started).
- ``slurm_events`` (v3): one row per drain or resume gpuaccept made in Slurm (``--slurm-drain``/``--slurm-resume``
  with ``--slurm-apply``): run_id, at (Unix s), host, node, event (drain|resume), action, cause, reason, and for a
  drain within a day of gpuaccept's resume of the same node ``repeating`` 1 with that resume's ``resumed_at`` and
  ``resumed_run`` (gpuaccept.reporting.history.drains).
- ``killed_runs`` (v4): one row per run known to have been killed before its end (no run row; its finished tests
  are kept): run_id, started, last_record (Unix s of its last record), found_at, found_by (``run <id>`` of the
  next run on that controller, or ``merge``), report_dir (:func:`mark_killed`; the merge adds the tests such a
  run lacks, :func:`add_missing_tests`).
- ``k8s_events`` (v5): the same for the cordons and uncordons gpuaccept made in Kubernetes (``--k8s-cordon``/
  ``--k8s-resume`` with ``--k8s-apply``), event cordon|uncordon.

The package, one job a module: ``schema`` (the file, its migrations, opening it), ``rows`` (writing runs),
``recorder`` (one run written as it goes), ``drains`` (Slurm drains and resumes), ``compare`` (references and stand-outs, judged by the one rule of
gpuaccept.judging.standouts), ``sqlrules`` (gpuaccept.reporting.baseline's rules in SQL), ``cli`` (reading it).
This face holds the names its callers use.
"""
from __future__ import annotations

from gpuaccept.reporting.history.cli import UNFINISHED, figures_over_time, killed_runs, main, series
from gpuaccept.reporting.history.compare import (STANDOUT_PCT, fleet_outliers, references, run_standouts,
                                                 standouts)
from gpuaccept.reporting.history.recorder import BUSY_WAIT_S, RunRecorder
from gpuaccept.reporting.history.rows import (INSERT_FIGURE, add_missing_tests, figure_rows, keep_earlier_run,
                                              mark_killed, record_run, test_of, test_row, update_latest)
from gpuaccept.reporting.history.schema import (MIGRATIONS, SCHEMA_VERSION, HistoryError, connect, connect_readonly,
                                                not_writable, run_exists)
from gpuaccept.reporting.history.sqlrules import _sql_burnin_key, _sql_is_burnin, _sql_nightly_key
from gpuaccept.judging.standouts import check_of, key_extras, subject_of

__all__ = ["BUSY_WAIT_S", "INSERT_FIGURE", "MIGRATIONS", "SCHEMA_VERSION", "STANDOUT_PCT", "UNFINISHED", "HistoryError",
           "RunRecorder", "check_of", "connect", "connect_readonly", "figure_rows", "figures_over_time",
           "fleet_outliers", "keep_earlier_run", "key_extras", "main", "add_missing_tests", "killed_runs", "mark_killed", "not_writable", "record_run", "references",
           "run_exists", "run_standouts", "series", "standouts", "subject_of", "test_of", "test_row", "update_latest",
           "_sql_burnin_key", "_sql_is_burnin", "_sql_nightly_key"]
