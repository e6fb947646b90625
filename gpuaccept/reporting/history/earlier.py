"""What earlier runs in the history database say of a host, read while a run judges it (read only).

:func:`most_gpus`: the most GPUs NVML listed on a host in any run the database holds (its ``gpu_count`` figure,
recorded by test_gpu_inventory), the evidence gpuaccept.judging.gpucount takes for a GPU that fell off the bus
(a node that showed 8 GPUs last week and 7 now, with no Xid left in its kernel log since a reboot).
"""
from __future__ import annotations

import sqlite3

from gpuaccept.judging.standouts import subject_of

#: the figure of test_gpu_inventory that counts the GPUs NVML lists (gpuaccept.judging.health.gpu_count)
GPU_COUNT_CHECK = "gpu_count"


def most_gpus(con: sqlite3.Connection, host: str) -> int | None:
    """The largest ``gpu_count`` figure of ``host`` (its inventory name) over every run in ``con``, or None when
    none was recorded. One indexed lookup (figures_subject). Raises sqlite3.Error on a broken database."""
    row = con.execute("SELECT MAX(value) FROM figures WHERE subject = ? AND check_ = ?",
                      (subject_of({"host": host}), GPU_COUNT_CHECK)).fetchone()
    return int(row[0]) if row and row[0] is not None else None
