"""The history database's connection (gpuaccept/reporting/history/schema.py): another writer holding it is told
by SQLite's result code, any other error is not."""
from __future__ import annotations

import sqlite3

import pytest

from gpuaccept.reporting.history.schema import held_by_another


def test_a_database_another_connection_holds_is_told_by_its_result_code(tmp_path):
    path = tmp_path / "h.sqlite"
    holder = sqlite3.connect(path, timeout=0)
    holder.execute("CREATE TABLE t (x)")
    holder.commit()
    holder.execute("BEGIN EXCLUSIVE")
    other = sqlite3.connect(path, timeout=0)
    with pytest.raises(sqlite3.OperationalError) as held:
        other.execute("SELECT * FROM t")
    assert held_by_another(held.value)
    holder.rollback()
    with pytest.raises(sqlite3.OperationalError) as missing:
        other.execute("SELECT * FROM no_such_table")
    assert not held_by_another(missing.value)
    holder.close()
    other.close()
