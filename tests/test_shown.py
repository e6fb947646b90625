"""What a test shows with ``-s`` (gpuaccept.plugin.shown): nccl-tests' table of the all-reduce, written by the
process running the terminal, so that ``-n 2 -s`` shows it as ``-s`` does (pytest-xdist drops a worker's own
output); once per test, and not at all without ``-s``. A replayed 2xH200 host (tests/data)."""
from __future__ import annotations

import pytest

from project_helpers import DATA, replay_project, run_pytest

#: nccl-tests' header line of the table (gpuaccept.judging.nccl_table.format_table)
HEADER = "#       size         count      type   redop    root"


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_the_allreduce_table_is_shown_with_s_alone_or_under_xdist(tmp_path, workers):
    inv = replay_project(tmp_path, DATA)
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "test_allreduce", *workers, "-s")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    out = res.stdout
    assert out.count("# h200-a: nccl_allreduce, world size 2, NCCL ") == 1, out[-4000:]
    assert out.count(HEADER) == 1, out[-4000:]
    row = next(ln for ln in out.splitlines() if ln.lstrip().startswith("4294967296 "))
    assert row.split()[1:4] == ["1073741824", "float", "sum"], row
    quiet = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "rep2"), "-k", "test_allreduce",
                       *workers)
    assert quiet.returncode == 0 and HEADER not in quiet.stdout, quiet.stdout[-3000:]
