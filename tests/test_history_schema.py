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


@pytest.mark.parametrize("table", ["runs", "foo"])
def test_another_programs_database_is_refused_and_left_as_it_was(tmp_path, table):
    """A ``--history`` naming another program's SQLite file (one whose table clashes with ours, or not): one line
    naming it, and the file unchanged (no table added, its journal mode kept); a new file is made a history."""
    from gpuaccept.reporting.history.schema import HistoryError, connect
    path = tmp_path / "other.sqlite"
    theirs = sqlite3.connect(path)
    theirs.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, name TEXT)")
    theirs.commit()
    theirs.close()
    with pytest.raises(HistoryError) as refused:
        connect(str(path))
    assert str(refused.value) == (f"{path}: not a gpuaccept history database (it holds another program's tables: "
                                  f"{table}); give a new file or a gpuaccept history")
    after = sqlite3.connect(path)
    assert [r[0] for r in after.execute("SELECT name FROM sqlite_master")] == [table]
    assert after.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    after.close()
    fresh = connect(str(tmp_path / "new.sqlite"))
    assert fresh.execute("PRAGMA user_version").fetchone()[0] > 0
    fresh.close()
