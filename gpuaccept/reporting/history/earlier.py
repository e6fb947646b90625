"""What earlier runs in the history database say of a host, read while a run judges it (read only).

:func:`most_gpus`: the most GPUs NVML listed on a host in any run the database holds (its ``gpu_count`` figure,
recorded by test_gpu_inventory), the evidence gpuaccept.judging.gpucount takes for a GPU that fell off the bus
(a node that showed 8 GPUs last week and 7 now, with no Xid left in its kernel log since a reboot). A run counts
only where it was this machine: given the serials of the GPUs the host shows now, an earlier run whose figures of
that host name none of them was another machine under the name (a host name reused for a rebuilt or another node),
and says nothing of this one.

:func:`unreachable_runs`: how many runs in a row, up to the newest, could not reach a host: the evidence that a
host unreachable again is no blip of the network or of the controller's load (gpuaccept.judging.unreachable).
"""
from __future__ import annotations

import itertools
import sqlite3

from gpuaccept.judging.standouts import subject_of

#: the figure of test_gpu_inventory that counts the GPUs NVML lists (gpuaccept.judging.health.gpu_count)
GPU_COUNT_CHECK = "gpu_count"


#: serials compared at most (a board holds at most 16 GPUs today; more would only lengthen the query)
MAX_SERIALS = 64


def most_gpus(con: sqlite3.Connection, host: str, serials: list[str] | None = None) -> int | None:
    """The largest ``gpu_count`` figure of ``host`` (its inventory name) over the runs in ``con``, or None when none
    was recorded. ``serials``: the GPU serials the host shows now (None: any run counts); then only runs in which
    a figure of ``host`` carries one of them count (the same machine), and none of them known: None. Indexed
    lookups (figures_subject: a GPU figure's subject is its serial). Raises sqlite3.Error on a broken database."""
    args: list = [subject_of({"host": host}), GPU_COUNT_CHECK]
    same = ""
    if serials is not None:
        mine = sorted({s for s in serials if isinstance(s, str) and s})[:MAX_SERIALS]
        if not mine:
            return None
        same = (f" AND EXISTS (SELECT 1 FROM figures g WHERE g.subject IN ({', '.join('?' * len(mine))}) "
                f"AND g.run_id = f.run_id AND g.host = ?)")
        args += [*mine, host]
    row = con.execute(f"SELECT MAX(f.value) FROM figures f WHERE f.subject = ? AND f.check_ = ?{same}",
                      args).fetchone()
    return int(row[0]) if row and row[0] is not None else None


#: the cause kinds that mean the controller could not reach the host at all (gpuaccept.errors.HostUnreachable:
#: no TCP connect, no SSH answer, a connection that stopped answering)
UNREACHABLE_KINDS = ("unreachable", "unreachable_again")
#: the cause class of a test the run never decided (interrupted, not run, not finished): it says nothing of the host
SILENT_CLASS = "interruption"
#: finished runs looked back over, at most (a streak longer than this reads as this long)
LOOK_BACK_RUNS = 30


def run_reached(rows: list[tuple[str | None, str | None]]) -> bool | None:
    """What one run's tests of a host say of reaching it (pure): ``rows`` ``(outcome, causes)`` as the ``tests``
    table holds them (causes ``" class/kind ... "``, gpuaccept.reporting.history.rows.test_row). True: the host
    was reached (a test passed, failed or was skipped, or erred for a cause that needs the host to answer, or
    carries no causes: a record from before they were kept); False: a test could not reach it and none did;
    None: the run says nothing (every test of the host was interrupted, not run or not finished)."""
    gone = False
    for outcome, causes in rows:
        if outcome in ("passed", "failed", "skipped") or not causes:
            return True
        for token in causes.split():
            cls, _, kind = token.partition("/")
            if kind in UNREACHABLE_KINDS:
                gone = True
            elif cls != SILENT_CLASS:
                return True
    return False if gone else None


def unreachable_runs(con: sqlite3.Connection, host: str) -> tuple[int, float | None]:
    """``(n, since)``: the number of the latest finished runs in ``con`` that selected ``host`` and could not reach
    it, one after another back from the newest (:func:`run_reached` False; a run that says nothing, every test of
    the host interrupted, is passed over, as a killed run without a run row is), and the start (Unix s) of the
    earliest of them (None when n is 0). Tests recorded before causes were (schema < 7) end the count. The host's
    tests are read newest run first by the tests_host index, at most :data:`LOOK_BACK_RUNS` runs. Raises
    sqlite3.Error on a broken database."""
    cur = con.execute("SELECT t.run_id, r.started, t.outcome, t.causes FROM tests t JOIN runs r ON r.run_id = t.run_id "
                      "WHERE t.host = ? ORDER BY r.started DESC, t.run_id", (host,))
    n, since, seen = 0, None, 0
    run, started, rows = None, None, []
    for rid, at, outcome, causes in itertools.chain(cur, [(None, None, None, None)]):  # read as far as needed
        if rid != run and run is not None:
            said = run_reached(rows)
            if said:
                break
            if said is False:
                n, since = n + 1, started
            seen += 1
            if seen >= LOOK_BACK_RUNS:
                break
            rows = []
        run, started = rid, at
        rows.append((outcome, causes))
    return n, since
