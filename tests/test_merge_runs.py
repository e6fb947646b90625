"""gpuaccept.scaleout.merge over folders of different runs: a rerun of the failed hosts merged with the original run,
a run that did not finish (a killed controller or Slurm task), a host that left no folder at all."""
from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path

import pytest

from gpuaccept.scaleout.merge import main as merge_main, merge
from gpuaccept.reporting.records import CaseRecord
from gpuaccept.reporting.reporter import Reporter
from gpuaccept.reporting.folder import run_figures


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
    hosts = list(dict.fromkeys(r.host for r in recs if r.host))
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
        assert [f["value"] for f in run_figures(doc) if f["host"] == "gpu2"] == [4550.0]
        note = [ln for ln in said.splitlines() if "the later run wins" in ln]
        assert len(note) == 1 and note[0].startswith("gpu2: tests of run rerun"), said
        assert "earlier run orig" in note[0]
        assert "later run wins" in (out / "summary.md").read_text()
        assert not [ln for ln in said.splitlines() if ln.startswith("gpu1:")]


def test_a_format_1_results_json_is_read_by_the_merge_and_the_stand_outs(tmp_path):
    """results.json of format 1 listed every figure twice (in its test and again at the top level); a folder of
    that shape is still merged, and read as the previous run of the stand-outs, with each figure once."""
    from gpuaccept.reporting.folder import load_previous_figures
    old = _run(tmp_path / "old", 1000.0, [_hbm("gpu1", 4600.0), _hbm("gpu2", 4100.0)])
    doc = json.loads((old / "results.json").read_text())
    assert doc["format"] == 3 and "figures" not in doc
    figs = run_figures(doc)
    v1 = {k: v for k, v in doc.items() if k != "format"}
    v1["figures"] = figs
    (old / "results.json").write_text(json.dumps(v1))
    assert load_previous_figures(str(old)) == figs and [f["value"] for f in figs] == [4600.0, 4100.0]
    rerun = _run(tmp_path / "rerun", 2000.0, [_hbm("gpu2", 4550.0)])
    out = tmp_path / "merged"
    assert merge_main([str(old), str(rerun), "--into", str(out)]) == 0
    merged = json.loads((out / "results.json").read_text())
    assert "figures" not in merged and sorted(f["value"] for f in run_figures(merged)) == [4550.0, 4600.0]
    assert _verdicts(out) == {"gpu1": "PASS", "gpu2": "PASS"}


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


# -- K controllers (--shard) merged, against one controller over the same hosts -------------------------------

def _listed(res) -> list[str]:
    assert res.returncode == 0, res.stdout + res.stderr
    return [ln.split()[0] for ln in res.stdout.splitlines() if ln.startswith("    ")]


def test_shards_merged_equal_one_controller_over_the_same_hosts(tmp_path):
    """Six replayed 2xH200 hosts (odd names, a range, a --limit leaving one out): h_1 declares 4 GPUs (fails),
    and every host replays the same capture, so test_fleet_consistency finds 'the same GPUs' on hosts of the
    same shard. Before: the merge kept one shard's fleet-wide record, so the hosts another shard's
    fleet_consistency failed were PASS in merged/summary.md and missing from failed-hosts.txt, and the fleet
    figure driver_versions said 3 hosts instead of 6. After: every shard's failure lines are kept and counts
    by label are summed: the merged results.json, JUnit and history hold the same tests and figures as one
    controller's run."""
    from project_helpers import DATA, make_project, replay_folder, run_pytest
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    common = f"ansible_connection=local gpuaccept_replay={replay_folder(tmp_path, DATA)} gpu_sku=h200-sxm-141gb"
    inv.write_text(f"[gpu]\ngpu-[01:04] {common} gpus_per_node=2\nodd.name-x {common} gpus_per_node=2\n"
                   f"h_1 {common} gpus_per_node=4\ndrained {common} gpus_per_node=2\n")
    sel = ["--inventory", str(inv), "--limit", "gpu:!drained", "-m", "health", "-p", "no:cacheprovider"]
    everyone = _listed(run_pytest(tmp_path, *sel, "--list-hosts"))
    assert sorted(everyone) == sorted(["gpu-01", "gpu-02", "gpu-03", "gpu-04", "odd.name-x", "h_1"])
    # k larger than the host count: k controllers still cover every host exactly once
    tenths = [_listed(run_pytest(tmp_path, *sel, "--shard", f"{i}/10", "--list-hosts")) for i in range(1, 11)]
    assert sorted(h for s in tenths for h in s) == sorted(everyone) and [] in tenths

    single = tmp_path / "single"
    res = run_pytest(tmp_path, *sel, "--reports", str(single), "--history", str(tmp_path / "single.sqlite"))
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    shards = []
    for i in (1, 2, 3):
        res = run_pytest(tmp_path, *sel, "--shard", f"{i}/3", "--reports", str(tmp_path / f"s{i}"), "--history", "none")
        assert res.returncode in (0, 1), res.stdout[-2000:] + res.stderr[-2000:]
        shards.append(tmp_path / f"s{i}")
    doc = {s.name: json.loads((s / "results.json").read_text()) for s in shards}
    assert sorted(h for d in doc.values() for h in d["hosts"]) == sorted(everyone)  # each host in one shard
    fleet_failed = [d for d in doc.values() for t in d["tests"] if t["host"] is None and t["outcome"] == "failed"]
    assert len(fleet_failed) >= 2, "the inventory no longer makes two shards fail fleet_consistency"
    out = tmp_path / "merged"
    assert merge_main([*map(str, shards), "--into", str(out), "--history", str(tmp_path / "merged.sqlite")]) == 0

    one, merged = (json.loads((d / "results.json").read_text()) for d in (single, out))
    by_id = lambda d: {t["nodeid"]: t["outcome"] for t in d["tests"]}  # noqa: E731
    assert by_id(merged) == by_id(one)  # every test once, each with the single run's outcome
    keys = ("host", "check", "gpu", "value", "verdict", "extra")
    fig = lambda d: sorted(json.dumps({k: f.get(k) for k in keys}, sort_keys=True) for f in run_figures(d))  # noqa: E731
    assert fig(merged) == fig(one)
    assert merged["limit"] == one["limit"] == "gpu:!drained"
    # every host a shard's fleet_consistency named is FAIL, as in the single run (which names them all)
    shard_named = {ln.split(":")[0] for d in fleet_failed for t in d["tests"] if t["host"] is None
                   for ln in t["message"].splitlines()}
    def hosts(path: Path) -> set[str]:  # failed-hosts.txt: one host a line; "# fleet-wide ..." lines are comments
        return {ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")}
    assert shard_named | {"h_1"} <= hosts(out / "failed-hosts.txt")
    # a host whose GPUs another shard's host reports too (the same capture) fails as in the single run, though no
    # shard's own fleet_consistency could name it
    assert hosts(out / "failed-hosts.txt") == hosts(single / "failed-hosts.txt")
    assert len(re.findall("<testcase ", (out / "junit-health.xml").read_text())) == \
        len(re.findall("<testcase ", (single / "junit-health.xml").read_text()))
    counts = [sqlite3.connect(tmp_path / db).execute("SELECT (SELECT count(*) FROM tests), "
                                                     "(SELECT count(*) FROM figures)").fetchone()
              for db in ("single.sqlite", "merged.sqlite")]
    assert counts[0] == counts[1], counts


@pytest.mark.parametrize("name, text, says", [
    ("results.json", "[]", "results.json: unreadable (not a gpuaccept results.json)"),
    ("results.json", "null", "results.json: unreadable (not a gpuaccept results.json)"),
    ("results.json", '{"tests": [{"a": 1}]}', "results.json: unreadable (not a gpuaccept result record)"),
    ("results.jsonl", '["x"]\n{"nodeid": "t[h]"}\n', "results.jsonl:1: not a gpuaccept result line"),
    ("results.jsonl", b"\xff\xfe{}\n", "results.jsonl: not UTF-8 text"),
])
def test_a_folder_that_is_not_a_report_is_one_line_exit_4(tmp_path, capsys, name, text, says):
    """Before: a results.json that is a JSON list or null, or a test entry without nodeid, stopped the merge
    with a Python traceback (AttributeError, KeyError)."""
    d = tmp_path / "d"
    d.mkdir()
    (d / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    assert merge_main([str(d), "--into", str(tmp_path / "out")]) == 4
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err


def test_a_record_from_a_newer_gpuaccept_is_read(tmp_path):
    """A results.jsonl line with a key this version does not know (a newer gpuaccept on another controller)
    was 'not a gpuaccept result line' and the whole merge refused; its known fields are enough."""
    d = _run(tmp_path / "new", 1000.0, [_ecc("gpu1")])
    line = json.loads((d / "results.jsonl").read_text())
    (d / "results.jsonl").write_text(json.dumps({**line, "attempt": 2, "nvml_version": "12.580"}) + "\n")
    out = tmp_path / "m"
    assert merge_main([str(d), "--into", str(out)]) == 0
    assert _verdicts(out) == {"gpu1": "PASS"}


def test_folders_judged_against_different_limits_are_named(tmp_path, capsys):
    """Two shards run with different threshold files (the HBM floor 4300 GB/s here, 4000 there): both hosts
    PASS at 4100-4600 by their own limits, which said nothing before. After: a note names the check, each
    limit and the runs that used it, on stdout and in summary.md."""
    a = _run(tmp_path / "a", 1000.0, [_hbm("gpu1", 4600.0)])
    low = _hbm("gpu2", 4100.0)
    low.outcome, low.message = "passed", ""
    low.figures[0].update(limit={"min": 4000}, verdict="pass")  # the other shard's threshold file
    b = _run(tmp_path / "b", 1000.0, [low])
    out = tmp_path / "m"
    assert merge_main([str(a), str(b), "--into", str(out)]) == 0
    said = capsys.readouterr().out
    note = "hbm (h200-sxm-141gb): judged against different limits: >= 4000 in run b; >= 4300 in run a"
    assert note in said and note in (out / "summary.md").read_text()
    # the same limits everywhere: no note
    out2 = tmp_path / "m2"
    assert merge_main([str(a), "--into", str(out2)]) == 0
    assert "different limits" not in capsys.readouterr().out


def test_merging_runs_already_in_the_history_is_refused(tmp_path, capsys):
    """Shards that recorded themselves into the shared history database (the default reports/history.sqlite
    on a shared checkout), then merged with --history into the same database. Before: every test and figure
    was in the database twice (the shard's run and the merged run) and the merged figures' stand-outs were
    computed against the shard runs, i.e. against themselves. After: exit 4, one line, nothing written."""
    from gpuaccept.reporting import history
    a = _run(tmp_path / "a", 1000.0, [_hbm("gpu1", 4600.0)])
    b = _run(tmp_path / "b", 1000.0, [_hbm("gpu2", 4600.0)])
    db = tmp_path / "history.sqlite"
    con = history.connect(str(db))
    recs = json.loads((a / "results.json").read_text())
    history.record_run(con, {"run_id": "a", "started": 1000.0, "verdict": "PASS"}, recs["tests"], run_figures(recs),
                       {"gpu1": "PASS"})
    con.close()
    out = tmp_path / "m"
    assert merge_main([str(a), str(b), "--into", str(out), "--history", str(db)]) == 4
    err = capsys.readouterr().err
    assert "already holds run(s) a being merged" in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
    n = sqlite3.connect(db).execute("SELECT count(*) FROM figures").fetchone()[0]
    assert n == 1
    # a database that does not hold them takes the merged run
    assert merge_main([str(a), str(b), "--into", str(out), "--history", str(tmp_path / "other.sqlite")]) == 0
    # a run of the same id but another start (another job's folder of the same name, 'n1') is not this one
    c = _run(tmp_path / "c" / "a", 5000.0, [_hbm("gpu3", 4600.0)])
    assert merge_main([str(c), "--into", str(tmp_path / "m3"), "--history", str(db)]) == 0


def test_a_rerun_of_many_hosts_is_one_note(tmp_path, capsys):
    """25 hosts rerun: one line naming 20 of them and counting the rest (was one line per host)."""
    hosts = [f"gpu{i:02d}" for i in range(25)]
    orig = _run(tmp_path / "orig", 1000.0, [_hbm(h, 4100.0) for h in hosts])
    rerun = _run(tmp_path / "rerun", 2000.0, [_hbm(h, 4600.0) for h in hosts])
    assert merge_main([str(orig), str(rerun), "--into", str(tmp_path / "m")]) == 0
    note = [ln for ln in capsys.readouterr().out.splitlines() if "the later run wins" in ln]
    assert len(note) == 1 and note[0].startswith("gpu00, gpu01,") and "gpu19 and 5 more:" in note[0], note
    assert _verdicts(tmp_path / "m") == {h: "PASS" for h in hosts}


def test_merged_summary_counts_hosts_not_the_fleet_and_groups_skips_across_hosts(tmp_path, capsys):
    """Two nodes' folders, as Slurm leaves them (each node its own run, each with the fleet-wide tests): the merged
    summary lists the 2 hosts (the fleet-wide tests on a line of their own, not as a host) and one line for the
    skip both hosts share, although each message names its own host."""
    def nvme_skip(h):
        return CaseRecord(f"suites/test_storage.py::test_nvme[{h}]", f"test_nvme[{h}]", h, "storage", "skipped",
                          f"no NVMe on {h} (lsblk lists none)")
    fleet = CaseRecord("suites/test_health.py::test_driver_consistent", "test_driver_consistent", None, "health",
                       "passed")
    folders = []
    for i, h in enumerate(("node-1", "node-10")):
        rep = Reporter(str(tmp_path / h), h, {"hosts": [h], "inventory": "localhost.ini", "started": 1000.0 + i})
        for r in (_hbm(h, 4600.0), nvme_skip(h), fleet):
            rep.add(r)
        rep.close("x")
        folders.append(str(tmp_path / h))
    out = tmp_path / "merged"
    assert merge_main([*folders, "--into", str(out)]) == 0
    assert "2 hosts (0 failed or errored)" in capsys.readouterr().out
    text = (out / "summary.md").read_text()
    head = text.split("\n## ")[0]
    assert ", 2 hosts, " in head and "**PASS** 2 hosts" in head
    assert _verdicts(out) == {"node-1": "PASS", "node-10": "PASS"}, head
    assert "- fleet-wide tests: **PASS**" in head
    skipped = text.split("## Skipped\n\n")[1].split("\n\n")[0].splitlines()
    assert skipped == ["- no NVMe (lsblk lists none): 2 hosts (node-1, node-10), 2 tests"], skipped


def test_skip_reason_takes_out_only_the_whole_host():
    from gpuaccept.reporting.verdicts import skip_reason
    assert skip_reason("gpu-1", "gpu-1: no NVMe on gpu-1, unlike gpu-10 and gpu-1.example") == \
        "<host>: no NVMe, unlike gpu-10 and gpu-1.example"
    assert skip_reason(None, "nothing") == "nothing"
    # host names ending in a character that is not a word character group like the others
    for host in ("$(touch x)", "*", "gpu-1."):
        assert skip_reason(host, f"no NVMe controller on {host}") == "no NVMe controller", host
    assert skip_reason("n*", "no NVMe controller on n*x") == "no NVMe controller on n*x"


def test_merge_keeps_the_worst_outcome_of_a_fleet_wide_test(tmp_path):
    def folder(name: str, outcome: str) -> Path:
        d = tmp_path / name
        d.mkdir()
        rec = {"nodeid": "suites/test_health.py::test_fleet_consistency", "name": "test_fleet_consistency",
               "host": None, "layer": "health", "outcome": outcome, "message": "drivers differ" if outcome ==
               "failed" else "", "duration_s": 0.1, "figures": []}
        (d / "results.json").write_text(json.dumps({"run_id": name, "meta": {"hosts": []}, "tests": [rec],
                                                    "figures": []}))
        return d
    failed, skipped = folder("a", "failed"), folder("b", "skipped")
    for order in ((failed, skipped), (skipped, failed)):
        out = tmp_path / f"m-{order[0].name}"
        merge([str(d) for d in order], str(out))
        tests = json.loads((out / "results.json").read_text())["tests"]
        assert [t["outcome"] for t in tests] == ["failed"], tests
    with pytest.raises(ValueError, match="named twice"):
        merge([str(failed), str(failed)], str(tmp_path / "m2"))


def _phantom(host: str) -> CaseRecord:
    return CaseRecord(f"suites/test_health.py::test_ecc[{host}]", f"test_ecc[{host}]", host, "health", "error",
                      "not run: no result (worker crashed?)")


def test_the_merge_never_makes_a_host_of_pytests_empty_parameter_placeholder(tmp_path, capsys):
    """A folder of an empty --shard from an older gpuaccept holds records of host NOTSET (pytest's placeholder for
    an empty parameter list, taken for a host) and selected no host. Before: two such folders made a host NOTSET,
    ERROR, and "NOTSET: tests of run night-8 replace those of night-3". After: those records are left out and
    the merge says so; a folder whose selection really names a host NOTSET keeps its records."""
    real = _run(tmp_path / "night-1", 1000.0, [_hbm("gpu1", 4600.0), _ecc("gpu1")])
    old = []
    for n in (3, 8):
        d = tmp_path / f"night-{n}"
        rep = Reporter(str(d), d.name, {"hosts": [], "inventory": "prod.ini", "started": 1000.0 + n})
        rep.add(_phantom("NOTSET"))
        rep.close("x")
        old.append(d)
    out = tmp_path / "night"
    assert merge_main([str(real), *map(str, old), "--into", str(out)]) == 0
    said = capsys.readouterr().out
    assert _verdicts(out) == {"gpu1": "PASS"}
    doc = json.loads((out / "results.json").read_text())
    assert doc["hosts"] == ["gpu1"] and all("NOTSET" not in t["nodeid"] for t in doc["tests"])
    assert "replace those of" not in said and said.count("record(s) of no host left out") == 2, said
    named = _run(tmp_path / "named", 1000.0, [_phantom("NOTSET")])  # its selection: hosts ["NOTSET"]
    assert merge_main([str(named), "--into", str(tmp_path / "m2")]) == 0
    assert _verdicts(tmp_path / "m2") == {"NOTSET": "ERROR"}


def _inventory(host: str, uuids: list[str]) -> CaseRecord:
    """test_gpu_inventory of ``host`` as it records each GPU's NVML UUID (a ``uuid`` figure per GPU)."""
    figs = [{"host": host, "layer": "health", "test": "test_gpu_inventory", "check": "uuid", "gpu": i,
             "pci_bus_id": None, "serial": f"S{u}", "value": u, "unit": None, "verdict": None} for i, u in enumerate(uuids)]
    return CaseRecord(f"suites/test_health.py::test_gpu_inventory[{host}]", f"test_gpu_inventory[{host}]", host,
                      "health", "passed", figures=figs)


def _fleet_ok() -> CaseRecord:
    return CaseRecord("suites/test_health.py::test_fleet_consistency", "test_fleet_consistency", None, "health",
                      "passed")


def test_one_machine_under_two_names_in_two_shards_fails_both_names(tmp_path):
    """Shard 1 tested gpu-01 and gpu-02, shard 2 gpu-03, which reaches gpu-01's machine (the same GPU UUIDs): each
    shard's test_fleet_consistency passed; the merged one fails gpu-01 and gpu-03 naming each other (configuration),
    gpu-02 stays PASS. Shards that did not select the test get nothing added."""
    same = ["GPU-aaaa-0", "GPU-aaaa-1"]
    recs_a = [_inventory("gpu-01", same), _inventory("gpu-02", ["GPU-bbbb-0", "GPU-bbbb-1"]), _hbm("gpu-01", 4600),
              _hbm("gpu-02", 4600)]
    recs_b = [_inventory("gpu-03", same), _hbm("gpu-03", 4600)]
    a = _run(tmp_path / "shard1", 1.0, recs_a + [_fleet_ok()])
    b = _run(tmp_path / "shard2", 2.0, recs_b + [_fleet_ok()])
    rep = merge([str(a), str(b)], str(tmp_path / "merged"))
    (fleet,) = [r for r in rep.records.values() if r.name == "test_fleet_consistency"]
    assert fleet.outcome == "failed" and sorted(e["host"] for e in fleet.failures) == ["gpu-01", "gpu-03"]
    assert "gpu-01: reports the same GPUs as gpu-03" in fleet.message and "gpu-03: reports the same GPUs as gpu-01" \
        in fleet.message
    assert {c["class"] for c in fleet.causes} == {"configuration"}
    assert _verdicts(tmp_path / "merged") == {"gpu-01": "FAIL", "gpu-02": "PASS", "gpu-03": "FAIL"}
    c = _run(tmp_path / "shard3", 1.0, recs_a)
    d = _run(tmp_path / "shard4", 2.0, recs_b)
    rep = merge([str(c), str(d)], str(tmp_path / "merged2"))
    assert all(r.outcome == "passed" for r in rep.records.values())
    # shard 1's fleet test failed gpu-01 for another reason (its driver): its shared GPUs are still said
    split = CaseRecord("suites/test_health.py::test_fleet_consistency", "test_fleet_consistency", None, "health",
                       "failed", "gpu-01: driver 570.195.03, while 1 of 2 hosts run 580.159.04",
                       failures=[{"host": "gpu-01", "line": "gpu-01: driver 570.195.03", "action": {"action": "fix-config"}}])
    e = _run(tmp_path / "shard5", 1.0, recs_a + [split])
    f = _run(tmp_path / "shard6", 2.0, recs_b + [_fleet_ok()])
    rep = merge([str(e), str(f)], str(tmp_path / "merged3"))
    (fleet,) = [r for r in rep.records.values() if r.name == "test_fleet_consistency"]
    assert "gpu-01: reports the same GPUs as gpu-03" in fleet.message and "gpu-01: driver 570" in fleet.message


def _gone(host: str) -> CaseRecord:
    """A host the shard's controller could not reach, as the run records it (its cause, its action then)."""
    from gpuaccept.causes import Cause
    from gpuaccept.judging.actions import for_cause
    cause = Cause("connectivity", "unreachable", host)
    return CaseRecord(f"suites/test_health.py::test_ecc[{host}]", f"test_ecc[{host}]", host, "health", "error",
                      f"{host}: connect to [{host}]:22 timed out after 10s", causes=[cause.to_dict()],
                      action=for_cause(cause).to_dict())


def test_shards_merged_night_after_night_judge_an_unreachable_host_against_the_history(tmp_path):
    """Shards run with --history none and the merge records them: the merge judges a host the shards could not
    reach against the runs before it, as a run with that history does (check-network the second night)."""
    db = str(tmp_path / "history.sqlite")
    got = []
    for night in range(2):
        s1 = _run(tmp_path / f"n{night}-s1", 1000.0 + 86400 * night, [_ecc("gpu1")])
        s2 = _run(tmp_path / f"n{night}-s2", 1001.0 + 86400 * night, [_gone("u1")])
        out = tmp_path / f"n{night}"
        assert merge_main([str(s1), str(s2), "--into", str(out), "--history", db]) == 0
        doc = json.loads((out / "results.json").read_text())
        (t,) = [t for t in doc["tests"] if t["nodeid"].endswith("[u1]")]
        got.append((t["causes"][0]["kind"], t["action"]["action"]))
    assert got == [("unreachable", "rerun"), ("unreachable_again", "check-network")], got
    assert (tmp_path / "n1" / "hosts-check-network.txt").read_text() == "u1\n"
    assert "unreachable in 2 runs in a row" in (tmp_path / "n1" / "summary.md").read_text()
