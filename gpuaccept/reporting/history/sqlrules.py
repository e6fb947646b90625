"""gpuaccept.reporting.baseline's rules as SQL expressions over a ``figures.check_`` column (generated from its
tables, so the SQL and the Python functions cannot disagree; tests/test_report_writes.py checks them against
each other): they let run_standouts and update_latest compare and record burn-in figures over a run's rows in
SQLite.
"""
from __future__ import annotations

from gpuaccept.reporting import baseline as baseline_mod


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_name(col: str) -> str:
    """SQL for :func:`gpuaccept.reporting.baseline.split_key`'s name of ``col``."""
    return f"(CASE WHEN instr({col}, '[') > 0 THEN substr({col}, 1, instr({col}, '[') - 1) ELSE {col} END)"


def _sql_dist(col: str) -> str:
    """SQL for :func:`gpuaccept.reporting.baseline.split_key`'s distinguisher of ``col`` ('' when none)."""
    return f"(CASE WHEN instr({col}, '[') > 0 THEN substr({col}, instr({col}, '[')) ELSE '' END)"


def _sql_is_burnin(alias: str) -> str:
    """SQL for :func:`gpuaccept.reporting.baseline.is_burnin_figure` of row ``alias`` of ``figures``."""
    names = ", ".join(_lit(n) for n in sorted(baseline_mod.BURNIN_FIGURES))
    return (f"({alias}.value IS NOT NULL AND {_sql_name(alias + '.check_')} IN ({names}) "
            f"AND ({alias}.layer IS NULL OR {alias}.layer = {_lit(baseline_mod.BURNIN_LAYER)}))")


def _sql_nightly_key(col: str) -> str:
    """SQL for :func:`gpuaccept.reporting.baseline.nightly_key` of ``col`` (NULL for None)."""
    whens = "".join(f" WHEN {_sql_name(col)} = {_lit(b)} THEN {_lit(check)}" + (f" || {_sql_dist(col)}" if same else "")
                    for b, (check, same) in baseline_mod.NIGHTLY_FROM_BURNIN.items())
    return f"(CASE{whens} END)"


def _sql_burnin_key(col: str) -> str:
    """SQL for :func:`gpuaccept.reporting.baseline.burnin_key` of ``col`` (NULL for None)."""
    whens = "".join(f" WHEN {_sql_name(col)} = {_lit(check)} THEN {_lit(b)} || {_sql_dist(col)}" if same else
                    f" WHEN {col} = {_lit(check)} THEN {_lit(b)}"
                    for b, (check, same) in baseline_mod.NIGHTLY_FROM_BURNIN.items())
    return f"(CASE{whens} END)"

