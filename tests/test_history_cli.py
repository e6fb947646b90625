"""``python -m gpuaccept.reporting.history`` and the other printing ``python -m gpuaccept...`` commands (the
``gpuaccept`` command, merge, k8s) when their reader goes away: ``... | head -10`` ends the output there, no
traceback, exit 1 (gpuaccept.config.outputs.quiet_when_reader_closes). Real pipes, real SQLite, a real run's
report folder for the merge."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaccept.reporting import history

ROWS = 3000  # figures of one host: the table is ~450 KB, far past a pipe's 64 KiB buffer


def _db(tmp_path: Path) -> Path:
    db = tmp_path / "history.sqlite"
    con = history.connect(str(db))
    figs = [{"host": "gpu01", "layer": "memory", "test": "t", "check": f"hbm_{i}", "gpu": i % 8, "pci_bus_id": None,
             "serial": f"S{i % 8}", "value": 4800.0 + i, "unit": "GB/s", "limit": {"min": 4300.0}, "verdict": "pass",
             "sku": "h200-sxm-141gb"} for i in range(ROWS)]
    history.record_run(con, {"run_id": "r1", "started": 1_800_000_000, "profile": "standard"}, [], figs,
                       {"gpu01": "PASS"})
    con.close()
    return db


def _quiet(stderr: str) -> None:
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr and "Exception ignored" not in stderr, stderr


@pytest.mark.parametrize("fmt", [[], ["--json"]])
def test_history_into_head_ends_quietly(tmp_path, fmt):
    """Before: ``python -m gpuaccept.reporting.history --host gpu01 | head -10`` printed a BrokenPipeError
    traceback (history/cli.py, the table's print), exit 1."""
    db = _db(tmp_path)
    cmd = f'set -o pipefail; "$PY" -m gpuaccept.reporting.history --db "$DB" --host gpu01 {" ".join(fmt)} | head -c 200'
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PY": sys.executable, "DB": str(db)})
    _quiet(res.stderr)
    assert res.returncode == 1 and len(res.stdout) == 200, (res.returncode, res.stdout)
    whole = subprocess.run([sys.executable, "-m", "gpuaccept.reporting.history", "--db", str(db), "--host", "gpu01",
                            *fmt], capture_output=True, text=True, timeout=120)
    assert whole.returncode == 0 and whole.stdout.startswith(res.stdout) and len(whole.stdout) > 200_000


def _into_closed_pipe(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m <args>`` whose standard output is a pipe whose reader closed before it started."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", *args], stdout=w, stderr=subprocess.PIPE, text=True, cwd=cwd,
                              timeout=240, env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"})
    finally:
        os.close(w)


def test_every_printing_command_ends_quietly_on_a_closed_reader(tmp_path):
    """The history table, the ``gpuaccept`` command's help, the k8s command's usage and the merge's summary lines,
    each written into a pipe nobody reads any more: exit 1, nothing on stderr but the command's own lines."""
    db = _db(tmp_path)
    ops = tmp_path / "ops"
    ops.mkdir()
    (ops / "lab.ini").write_text("h1 ansible_connection=local\n")
    run = subprocess.run([sys.executable, "-m", "gpuaccept.cli", "-i", "lab.ini", "-m", "health", "-k", "fleet",
                          "--reports", "r1"], cwd=ops, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    for args in (["gpuaccept.reporting.history", "--db", str(db), "--host", "gpu01"],
                 ["gpuaccept.cli", "--help"],
                 ["gpuaccept.scaleout.k8s", "--help"],
                 ["gpuaccept.scaleout.merge", "r1", "--into", "joined"]):
        res = _into_closed_pipe(args, ops)
        _quiet(res.stderr)
        assert res.returncode == 1, (args, res.returncode, res.stderr[-2000:])
    assert (ops / "joined" / "results.json").is_file()  # the merge did its work; only its printing was cut


def test_check_names_a_check_whatever_it_is_about(tmp_path):
    """``--check seq_read_gbps`` finds the check of every path it measured (``seq_read_gbps /data``), and ``x``
    finds ``x[0]``; ``_`` in a name is no wildcard (``seq_read_gbps`` does not find ``seqXread_gbps /data``)."""
    from gpuaccept.reporting.history.cli import figures_over_time
    db = tmp_path / "history.sqlite"
    con = history.connect(str(db))
    figs = [{"host": "n1", "layer": "storage", "test": "t", "check": c, "gpu": None, "pci_bus_id": None, "serial": None,
             "value": 1.0, "unit": "GB/s", "limit": None, "verdict": None, "sku": None}
            for c in ("seq_read_gbps /data", "seq_read_gbps /scratch", "seqXread_gbps /data", "seq_read_gbps_x",
                      "link_errors[0]")]
    history.record_run(con, {"run_id": "r1", "started": 1_800_000_000, "profile": "standard"}, [], figs, {"n1": "PASS"})
    got = {row[6] for row in figures_over_time(con, host="n1", check="seq_read_gbps")}
    assert got == {"seq_read_gbps /data", "seq_read_gbps /scratch"}
    assert {row[6] for row in figures_over_time(con, host="n1", check="link_errors")} == {"link_errors[0]"}
    assert {row[6] for row in figures_over_time(con, host="n1", check="seq_read_gbps /data")} == {"seq_read_gbps /data"}
    con.close()


def test_a_hosts_runs_show_its_verdict_and_causes_where_it_has_no_figures(tmp_path):
    """A host unreachable night after night has no figures: ``--host H`` says so and points at ``--runs``, which
    lists its verdict and causes in each run (the evidence of an ``unreachable_again``)."""
    from gpuaccept.reporting.history.cli import host_runs
    db = tmp_path / "history.sqlite"
    con = history.connect(str(db))
    for i, (verdict, kind) in enumerate((("ERROR", "unreachable"), ("ERROR", "unreachable_again"), ("PASS", None))):
        causes = [{"class": "connectivity", "kind": kind, "host": "n9"}] if kind else None
        history.record_run(con, {"run_id": f"r{i}", "started": 1_800_000_000 + 86400 * i, "profile": "quick"},
                           [{"nodeid": f"t::a[n9]", "host": "n9", "outcome": verdict.lower(), "causes": causes},
                            {"nodeid": f"t::b[n9]", "host": "n9", "outcome": verdict.lower(), "causes": causes}],
                           [], {"n9": verdict})
    assert [(r[1], r[3], r[4]) for r in host_runs(con, "n9")] == [
        ("r0", "ERROR", "connectivity/unreachable"), ("r1", "ERROR", "connectivity/unreachable_again"), ("r2", "PASS", "")]
    con.close()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cmd = [sys.executable, "-m", "gpuaccept.reporting.history", "--db", str(db), "--host", "n9"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 1 and "no figures for host n9" in res.stderr and "it was in 3 finished runs: --runs" \
        in res.stderr, res.stderr
    res = subprocess.run(cmd + ["--runs"], capture_output=True, text=True, timeout=60, env=env)
    lines = res.stdout.splitlines()
    assert res.returncode == 0 and lines[0].split() == ["time", "run", "profile", "verdict", "causes"], res.stdout
    assert lines[2].split()[2:] == ["r1", "quick", "ERROR", "connectivity/unreachable_again"], lines
    res = subprocess.run(cmd[:-2] + ["--serial", "S1", "--runs"], capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode != 0 and "--runs lists one host's runs: give --host" in res.stderr, res.stderr
