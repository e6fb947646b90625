"""gpuaccept.merge over folders of different runs: a rerun of the failed hosts merged with the original run,
a run that did not finish (a killed controller or Slurm task), a host that left no folder at all."""
from __future__ import annotations

import json
import os
from pathlib import Path

from gpuaccept.merge import main as merge_main
from gpuaccept.report import CaseRecord, Reporter


def _hbm(host: str, value: float) -> CaseRecord:
    fig = {"host": host, "layer": "memory", "test": "t", "check": "hbm", "gpu": 0, "pci_bus_id": None,
           "serial": f"S{host}", "value": value, "unit": "GB/s", "limit": {"min": 4300},
           "verdict": "pass" if value >= 4300 else "fail", "sku": "h200-sxm-141gb"}
    return CaseRecord(f"suites/test_memory.py::test_hbm[{host}]", f"test_hbm[{host}]", host, "memory",
                      "passed" if value >= 4300 else "failed",
                      "" if value >= 4300 else f"{host} GPU 0: hbm {value} < 4300", figures=[fig])


def _ecc(host: str) -> CaseRecord:
    return CaseRecord(f"suites/test_health.py::test_ecc[{host}]", f"test_ecc[{host}]", host, "health", "passed")


def _run(folder: Path, started: float, recs: list[CaseRecord], finish: bool = True) -> Path:
    hosts = list(dict.fromkeys(r.host for r in recs))
    rep = Reporter(str(folder), folder.name, {"hosts": hosts, "inventory": "prod.ini", "started": started})
    for r in recs:
        rep.add(r)
    if finish:
        rep.close("x")
    else:  # killed: results.jsonl was appended per test, the whole-run files were never written
        rep._jsonl.close()
    return folder


def _verdicts(out: Path) -> dict[str, str]:
    text = (out / "summary.md").read_text()
    head = text.split("\n## ")[0]  # the host lines come before the first section
    lines = [ln for ln in head.splitlines() if ln.startswith("- **")]
    return {ln.split("`")[1]: ln.split("**")[1] for ln in lines}


def test_a_rerun_of_the_failed_hosts_wins_over_the_original_run_in_either_order(tmp_path, capsys):
    """Original run: gpu2 fails HBM. Rerun of gpu2 (started later) passes. The merge must keep the rerun's
    verdict whichever folder is named first, and say which run each replaced host took (it kept the worst
    outcome, so gpu2 stayed FAIL for ever, and said nothing)."""
    orig = _run(tmp_path / "orig", 1000.0, [_hbm("gpu1", 4600.0), _ecc("gpu1"), _hbm("gpu2", 4100.0), _ecc("gpu2")])
    rerun = _run(tmp_path / "rerun", 2000.0, [_hbm("gpu2", 4550.0)])
    for n, order in enumerate(((orig, rerun), (rerun, orig))):
        out = tmp_path / f"merged{n}"
        assert merge_main([*map(str, order), "--into", str(out)]) == 0
        said = capsys.readouterr().out
        assert _verdicts(out) == {"gpu1": "PASS", "gpu2": "PASS"}, (out / "summary.md").read_text()
        assert (out / "failed-hosts.txt").read_text() == ""
        doc = json.loads((out / "results.json").read_text())
        tests = {t["nodeid"]: t for t in doc["tests"]}
        assert len(tests) == 4  # gpu2's ECC test (not rerun) is the original's, nothing counted twice
        assert tests["suites/test_memory.py::test_hbm[gpu2]"]["run_id"] == "rerun"
        assert tests["suites/test_health.py::test_ecc[gpu2]"]["run_id"] == "orig"
        assert [f["value"] for f in doc["figures"] if f["host"] == "gpu2"] == [4550.0]
        note = [ln for ln in said.splitlines() if ln.startswith("gpu2:")]
        assert len(note) == 1 and "run rerun" in note[0] and "earlier run orig" in note[0], said
        assert "later run wins" in (out / "summary.md").read_text()
        assert not [ln for ln in said.splitlines() if ln.startswith("gpu1:")]


def test_the_later_run_wins_even_when_it_fails(tmp_path):
    """The later verdict is kept when it is the worse one too (a host that broke since)."""
    orig = _run(tmp_path / "orig", 1000.0, [_hbm("gpu1", 4600.0)])
    later = _run(tmp_path / "later", 2000.0, [_hbm("gpu1", 4000.0)])
    out = tmp_path / "m"
    assert merge_main([str(later), str(orig), "--into", str(out)]) == 0
    assert _verdicts(out) == {"gpu1": "FAIL"} and (out / "failed-hosts.txt").read_text() == "gpu1\n"


def test_a_run_that_did_not_finish_is_an_error_for_its_hosts_not_a_pass(tmp_path, capsys):
    """A Slurm node's task (or a shard's controller) killed after gpu3's first test: its folder has only
    results.jsonl, one passed test. Before: merged gpu3 PASS on one test of many. After: gpu3 ERROR 'did not
    finish', its reported test kept; a later complete run of gpu3 clears it."""
    done = _run(tmp_path / "node-gpu1", 1000.0, [_hbm("gpu1", 4600.0), _ecc("gpu1")])
    killed = _run(tmp_path / "node-gpu3", 1000.0, [_hbm("gpu3", 4600.0)], finish=False)
    assert not (killed / "results.json").exists()
    os.utime(killed / "results.jsonl", (1000.0, 1000.0))  # when it was killed: before the rerun below started
    out = tmp_path / "m"
    assert merge_main([str(done), str(killed), "--into", str(out)]) == 0
    assert _verdicts(out) == {"gpu1": "PASS", "gpu3": "ERROR"}
    assert (out / "failed-hosts.txt").read_text() == "gpu3\n"
    summary = (out / "summary.md").read_text()
    assert "did not finish" in summary and str(killed) in summary
    tests = {t["nodeid"]: t["outcome"] for t in json.loads((out / "results.json").read_text())["tests"]}
    assert tests["suites/test_memory.py::test_hbm[gpu3]"] == "passed" and len(tests) == 4
    # a run interrupted while results.json was being rewritten ("complete": false) counts the same
    doc = json.loads((done / "results.json").read_text())
    assert doc["complete"] is True
    (done / "results.json").write_text(json.dumps({**doc, "complete": False}))
    out2 = tmp_path / "m2"
    assert merge_main([str(done), "--into", str(out2)]) == 0
    assert _verdicts(out2) == {"gpu1": "ERROR"}
    # the rerun of gpu3, complete and later, replaces the unfinished run: no error left
    rerun = _run(tmp_path / "rerun", 2000.0, [_hbm("gpu3", 4500.0), _ecc("gpu3")])
    out3 = tmp_path / "m3"
    assert merge_main([str(killed), str(rerun), "--into", str(out3)]) == 0
    assert _verdicts(out3) == {"gpu3": "PASS"}
    assert "gpu3: tests of run rerun" in capsys.readouterr().out


def test_a_host_that_left_no_folder_is_an_error(tmp_path):
    """--host-error HOST=REASON (the Slurm launcher's, for a node whose task never started)."""
    done = _run(tmp_path / "n1", 1000.0, [_ecc("n1")])
    out = tmp_path / "m"
    assert merge_main([str(done), "--host-error", "n2=no results: the task did not start", "--into", str(out)]) == 0
    assert _verdicts(out) == {"n1": "PASS", "n2": "ERROR"}
    assert "n2: no results: the task did not start" in (out / "summary.md").read_text()
    assert merge_main([str(done), "--host-error", "n2", "--into", str(tmp_path / "m2")]) == 4
    # every node of a Slurm allocation failed to start: no folder at all, the errors alone are the report
    only = tmp_path / "m3"
    assert merge_main(["--host-error", "n1=no results", "--host-error", "n2=no results", "--into", str(only)]) == 0
    assert _verdicts(only) == {"n1": "ERROR", "n2": "ERROR"}
    assert merge_main(["--into", str(tmp_path / "m4")]) == 4
