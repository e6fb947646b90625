"""gpuaccept.merge over folders of different runs: a rerun of the failed hosts merged with the original run,
a run that did not finish (a killed controller or Slurm task), a host that left no folder at all."""
from __future__ import annotations

import json
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
    lines = [ln for ln in (out / "summary.md").read_text().splitlines()
             if ln.startswith("- **") and ln.split("**")[1:2] in (["PASS"], ["FAIL"], ["ERROR"], ["SKIP"])]
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
