"""--drain-max, the brake on --slurm-drain, and "repeating" drains, against the real Slurm controller
and nodes of tests/slurm_cluster.py and replayed 2xH200 captures (tests/data/replay-h200x2).

- 10 selected hosts, 3 with a row-remap failure (drain-rma): the default 10 % lets one be drained, so none is,
  dry run and applied alike, with one line naming 3 of 10, the limit and the most common cause; the run exits
  non-zero; ``--drain-max 50%`` drains the 3; ``--drain-max abc`` is refused (exit 4, one line, no folder).
- a node drained, resumed by a passing run, then drained again within the day: "repeating" in the Slurm lines,
  in summary.md and in the history database's slurm_events table.
"""
from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from project_helpers import DATA, REPO, alter, make_project, replay_folder, run_pytest
from slurm_cluster import running_cluster

SELECTION = ["-m", "health", "-k", "row_remapping"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """munged + slurmctld + slurmd n1..n3, torn down after."""
    yield from running_cluster(tmp_path_factory.mktemp("slurm"), n_nodes=3)


def _remap_failure(doc):
    doc["gpus"][1]["remapped_rows"].update(failure=True)


def _captures(tmp_path: Path, sick: bool) -> Path:
    base = tmp_path / ("sick" if sick else "well")
    if not base.exists():
        base.mkdir(parents=True)
        replay_folder(base, alter(base, "gpu_inventory", _remap_failure) if sick else DATA)
    return base / "replay"


def _project(tmp_path: Path, hosts: dict[str, tuple[str, bool]]) -> tuple[Path, Path]:
    """A project whose inventory holds ``hosts``: name -> (Slurm node, sick?)."""
    project = tmp_path / "project"
    if not project.exists():
        project.mkdir()
        make_project(project, [], None, extra_suite="", name="test_zz_empty.py")
    inv = project / "inventory.ini"
    inv.write_text("[gpu]\n" + "".join(
        f"{h} ansible_connection=local gpuaccept_replay={_captures(tmp_path, sick)} gpu_sku=h200-sxm-141gb "
        f"gpus_per_node=2 slurm_node_name={node}\n" for h, (node, sick) in hosts.items()))
    return project, inv


def _states(cluster) -> dict[str, str]:
    res = cluster.run(["scontrol", "show", "node", "-o"])
    assert res.returncode == 0, res.stderr
    return {re.match(r"NodeName=(\S+)", ln).group(1): re.search(r"\bState=(\S+)", ln).group(1)
            for ln in res.stdout.splitlines()}


def _drained(cluster) -> set[str]:
    return {n for n, s in _states(cluster).items() if "DRAIN" in s}


def _resume_all(cluster) -> None:
    for n in _drained(cluster):
        assert cluster.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"]).returncode == 0
    assert _drained(cluster) == set()


def _env(cluster) -> dict:
    return {"SLURM_CONF": cluster.env["SLURM_CONF"]}


def test_drain_max_holds_a_fleet_wide_drain_back(cluster, tmp_path):
    _resume_all(cluster)
    hosts = {f"h{i:02d}": (f"n{i}" if i <= 3 else f"none{i}", i <= 3) for i in range(1, 11)}
    project, inv = _project(tmp_path, hosts)
    runs = tmp_path / "reports"

    # the default, 10 % of 10 selected: 1 node; 3 would be drained, so none is, and the run says why
    res = run_pytest(project, "--inventory", str(inv), "--reports", str(runs / "r1"), "--history", "none",
                     "--slurm-drain", "--slurm-apply", *SELECTION, env=_env(cluster), timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-4000:]
    refusal = [ln for ln in out.splitlines() if "drained none" in ln]
    print("\n".join(refusal))  # the closing note's evidence
    assert len(refusal) == 1, out[-4000:]
    assert refusal[0].startswith("gpuaccept slurm: drained none: 3 of 10 selected nodes would be drained, above "
                                 "--drain-max 10% (1 node); most common among them: cause hardware (3 of 3), "
                                 "drain-rma: row remapping failure"), refusal[0]
    assert "a fleet-wide cause such as a bad image or a DNS outage?" in refusal[0]
    assert _drained(cluster) == set()
    assert refusal[0] in (runs / "r1" / "slurm.txt").read_text()
    assert "h01: not drained: held back by --drain-max" in out

    # the same refusal from the finished folder: a dry run prints it too, and the module exits 1 (0 otherwise)
    for extra in ([], ["--apply"]):
        mod = subprocess.run([sys.executable, "-m", "gpuaccept.scaleout.drain", str(runs / "r1"), "--drain", *extra],
                             capture_output=True, text=True, timeout=120, cwd=str(REPO),
                             env={**os.environ, **_env(cluster)})
        assert mod.returncode == 1, mod.stdout + mod.stderr
        assert refusal[0] in mod.stdout, mod.stdout
        assert _drained(cluster) == set()

    # 50 %: 5 of 10 may go, so the 3 are drained
    res = run_pytest(project, "--inventory", str(inv), "--reports", str(runs / "r2"), "--history", "none",
                     "--slurm-drain", "--slurm-apply", "--drain-max", "50%", *SELECTION, env=_env(cluster),
                     timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 1 and "drained none" not in out, out[-4000:]
    assert _drained(cluster) == {"n1", "n2", "n3"}, _states(cluster)

    # a bad value: one line, exit 4, before any node is touched (no report folder)
    for bad, said in (("abc", "--drain-max abc: expected a count of nodes (3) or a share of the selected nodes (10%)"),
                      ("0", "--drain-max 0: expected a count of at least 1"),
                      ("150%", "--drain-max 150%: expected a share above 0% and at most 100%")):
        res = run_pytest(project, "--inventory", str(inv), "--reports", str(runs / "bad"), "--history", "none",
                         "--slurm-drain", "--drain-max", bad, *SELECTION, env=_env(cluster), timeout=120)
        assert res.returncode == 4, res.stdout + res.stderr
        assert said in res.stderr and "Traceback" not in res.stderr, res.stderr
        assert len([ln for ln in res.stderr.splitlines() if "--drain-max" in ln]) == 1, res.stderr
        assert not (runs / "bad").exists()
    res = run_pytest(project, "--inventory", str(inv), "--drain-max", "3", *SELECTION, timeout=120)
    assert res.returncode == 4 and "--drain-max: say --slurm-drain" in res.stderr, res.stderr
    mod = subprocess.run([sys.executable, "-m", "gpuaccept.scaleout.drain", str(runs / "r1"), "--drain",
                          "--drain-max", "abc"], capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert mod.returncode == 4 and "--drain-max abc: expected a count" in mod.stderr, mod.stderr


def test_a_node_drained_again_within_a_day_of_its_resume_is_repeating(cluster, tmp_path):
    _resume_all(cluster)
    runs, hist = tmp_path / "reports", tmp_path / "history.sqlite"

    def night(name: str, sick: bool, *opts: str) -> str:
        project, inv = _project(tmp_path, {"h-rep": ("n1", sick)})
        res = run_pytest(project, "--inventory", str(inv), "--reports", str(runs / name), "--history", str(hist),
                         *opts, "--slurm-apply", *SELECTION, env=_env(cluster), timeout=300)
        out = res.stdout + res.stderr
        assert res.returncode == (1 if sick else 0), out[-4000:]
        return out

    out = night("r1", True, "--slurm-drain")
    assert _drained(cluster) == {"n1"} and "repeating" not in out, out[-3000:]
    night("r2", False, "--slurm-resume")
    assert _drained(cluster) == set()
    out = night("r3", True, "--slurm-drain")
    assert _drained(cluster) == {"n1"}
    said = [ln for ln in out.splitlines() if "repeating:" in ln]
    print("\n".join(said))  # the closing note's evidence
    assert len(said) == 1 and said[0].startswith("gpuaccept slurm: repeating: h-rep (node n1) drained again "), out[-3000:]
    assert " after its resume on " in said[0] and " by run r2 (drain-rma: row remapping failure" in said[0]
    summary = (runs / "r3" / "summary.md").read_text()
    line = next(ln for ln in summary.splitlines() if ln.startswith("- repeating: "))
    assert line == "- repeating: " + said[0].split("repeating: ", 1)[1]
    assert "- **FAIL** `h-rep`" in summary  # the rest of the page is still there
    con = sqlite3.connect(hist)
    rows = con.execute("SELECT run_id, node, event, action, cause, repeating, resumed_run FROM slurm_events "
                       "ORDER BY at").fetchall()
    assert rows == [("r1", "n1", "drain", "drain-rma", "hardware", 0, None),
                    ("r2", "n1", "resume", None, None, 0, None),
                    ("r3", "n1", "drain", "drain-rma", "hardware", 1, "r2")], rows
    assert "repeating" not in (runs / "r1" / "summary.md").read_text()


def test_a_v2_history_takes_the_slurm_events_and_keeps_its_runs(tmp_path):
    from gpuaccept.reporting import history
    from gpuaccept.reporting.history.drains import record_events, repeat_of
    path = str(tmp_path / "h.sqlite")
    con = history.connect(path, upto=2)
    with con:
        con.execute("INSERT INTO runs VALUES ('old', 1.0, 'inv', 'standard', NULL, '/r/old', 'PASS')")
    con.close()
    ro = history.connect_readonly(path)  # a v2 file read as before (no slurm_events table)
    assert ro.execute("PRAGMA user_version").fetchone()[0] == 2
    ro.close()
    assert record_events(path, "r1", [{"event": "resume", "host": "h", "node": "n"}], at=1000.0) == []
    got = record_events(path, "r2", [{"event": "drain", "host": "h", "node": "n", "action": "reboot",
                                      "cause": "hardware", "reason": "why"}], at=1000.0 + 5 * 3600)
    assert [(g["resumed_run"], g["after_s"]) for g in got] == [("r1", 5 * 3600.0)]
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == history.SCHEMA_VERSION >= 3
    assert con.execute("SELECT run_id FROM runs").fetchall() == [("old",)]
    assert repeat_of(("resume", 0.0, "r1"), 86401.0) is None and repeat_of(("drain", 0.0, "r1"), 10.0) is None
