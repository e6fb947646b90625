"""Whole-run report files written from each record's text kept as it arrived (issue 13.3): results.json copied
from results.jsonl, each layer's JUnit from its spooled <testcase> elements, the history rows inserted in the
periodic rewrites. What is checked: the files equal what the pure writers make from the same records, after
periodic rewrites, a record replaced, a merge's add_many, and a real run interrupted by SIGTERM."""
from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from test_e2e import make_project
from test_replay import DATA, GPU_LAYERS

from gpuaccept import history, reporting
from gpuaccept.report import (CaseRecord, Reporter, failed_hosts, junit_xml_text, outliers, record_dict,
                              summary_markdown)


def _recs(n_hosts: int, tag: str = "") -> list[CaseRecord]:
    """Records as the plugin makes them: per-GPU figures, a failure with a multi-line message and XML/JSON
    special characters, a non-ASCII message, a skipped test, a fleet-wide test whose figures name hosts."""
    out = []
    for i in range(n_hosts):
        h = f"gpu-{i:02d}"
        for c, layer in enumerate(("memory", "compute", "health")):
            figs = [{"host": h, "layer": layer, "test": f"t{c}", "check": f"check_{c}", "gpu": g,
                     "pci_bus_id": f"0000:{g:02x}:00.0", "serial": f"S{i}{g}", "value": 100.0 + g + i,
                     "unit": "GB/s", "limit": {"min": 90.0}, "verdict": "pass"} for g in range(2)]
            outcome, msg = "passed", ""
            if i == 1 and c == 0:
                figs[1].update(value=80.0, verdict="fail")
                outcome, msg = "failed", f'{h} GPU 1: check_0 80 < 90 {tag}\n<&"quoted"> \x07 line two'
            if i == 2 and c == 2:
                outcome, msg, figs = "skipped", "no NVLink on this SKU — skipped", []
            out.append(CaseRecord(f"suites/test_{layer}.py::t{c}[{h}]", f"t{c}[{h}]", h, layer, outcome, msg, 0.25, figs))
    out.append(CaseRecord("suites/test_nccl.py::test_fleet", "test_fleet", None, "nccl", "failed",
                          "gpu-00: busbw 10 < 300\nresults below", 1.5,
                          [{"host": "fleet", "check": "busbw_gbps", "gpu": None, "value": 10.0, "unit": "GB/s",
                            "limit": {"min": 300.0}, "verdict": "fail", "extra": {"host": "gpu-00", "bytes": 4096}}]))
    return out


def _strip_ts(xml: str) -> str:
    return re.sub(r'timestamp="[^"]+"', 'timestamp=""', xml)


def _check_files(rep: Reporter, folder: Path, final: bool = False) -> None:
    recs = list(rep.records.values())
    slow = outliers([f for r in recs for f in r.figures], []) if final else []
    assert (folder / "summary.md").read_text() == summary_markdown("run1", rep.meta, recs, slow)
    assert (folder / "failed-hosts.txt").read_text() == "".join(h + "\n" for h in failed_hosts(recs, rep.meta["hosts"]))
    doc = json.loads((folder / "results.json").read_text())
    assert doc["tests"] == json.loads(json.dumps([record_dict(r) for r in recs]))
    assert doc["figures"] == [f for r in recs for f in r.figures]
    assert doc["run_id"] == "run1" and doc["hosts"] == rep.meta["hosts"]
    layers = sorted({r.layer for r in recs})
    for layer in layers:
        text = (folder / f"junit-{layer}.xml").read_text()
        assert _strip_ts(text) == _strip_ts(junit_xml_text(layer, [r for r in recs if r.layer == layer]))
        ET.fromstring(text.encode())  # well-formed


def test_periodic_rewrites_replacement_and_merge_equal_the_pure_writers(tmp_path):
    folder = tmp_path / "r"
    hosts = [f"gpu-{i:02d}" for i in range(6)]
    rep = Reporter(str(folder), "run1", {"hosts": hosts, "host_sku": {h: "h200-sxm-141gb" for h in hosts[:5]}})
    recs = _recs(6)
    for r in recs[:7]:
        rep.add(r)
    rep.flush()  # a periodic rewrite in the middle of the run
    _check_files(rep, folder)
    assert json.loads((folder / "results.json").read_text())["complete"] is False
    for r in recs[7:12]:
        rep.add(r)
    # the same test again (a record replaced): its new text is the one in every file
    again = _recs(6, tag="(second)")[3]
    rep.add(again)
    rep.add_many(recs[12:])
    rep.flush()
    _check_files(rep, folder)
    doc = json.loads((folder / "results.json").read_text())
    assert [t["nodeid"] for t in doc["tests"]] == [r.nodeid for r in recs]  # the replaced one keeps its place
    assert "(second)" in doc["tests"][3]["message"] and "(second)" in (folder / "junit-memory.xml").read_text()
    # every figure of a host with a known SKU says it, in results.jsonl as in results.json; others none
    assert {f.get("sku") for f in doc["figures"] if f["host"] == "gpu-05"} == {None}
    assert {f.get("sku") for f in doc["figures"] if f["host"] == "gpu-00"} == {"h200-sxm-141gb"}
    lines = [json.loads(ln) for ln in (folder / "results.jsonl").read_text().splitlines()]
    assert len(lines) == len(recs) + 1 and lines[-1]["figures"] == doc["tests"][-1]["figures"]
    rep.close("interrupted")
    _check_files(rep, folder, final=True)
    assert json.loads((folder / "results.json").read_text())["complete"] is True
    assert not (folder / ".spool").exists()  # the spools go once the whole-run files are final


@pytest.mark.parametrize("baseline,first_profile,how", [("latest-pass", "standard", "latest pass"),
                                                         ("r1", "standard", "run r1"), (None, "burnin", "burn-in")])
def test_history_rows_written_as_the_run_goes_equal_record_run(tmp_path, baseline, first_profile, how):
    """The RunRecorder (rows per record, inserted in periodic flushes, run row and stand-outs at the end)
    leaves the database as record_run of the whole run does, and finds the same stand-outs as references()
    + standouts() + fleet_outliers() over the figures: against the last pass, an explicit run, a burn-in."""
    hosts = [f"gpu-{i:02d}" for i in range(6)]

    def one_run(db: Path, rid: str, slow: float, incremental: bool) -> list[dict]:
        profile = first_profile if rid == "r1" else "standard"
        recs = _recs(6)
        for r in recs:
            for f in r.figures:
                if f["host"] == "gpu-03" and f.get("gpu") == 0:
                    f["value"] *= slow
        verdicts = {h: "PASS" for h in hosts}
        if incremental:
            rep = Reporter(str(db.parent / rid), rid, {"hosts": hosts})
            sink = reporting.HistorySink(str(db), rid, 1000.0, profile, baseline)
            rep.sinks.append(sink)
            for i, r in enumerate(recs):
                rep.add(r)
                if i == 5:
                    rep.flush()
            stand = sink.recorder.finish({"verdict": "PASS"}, verdicts) + sink.recorder.fleet_outliers()
            sink.recorder.close()
            assert sink.error is None
            return stand
        figs = [f for r in recs for f in r.figures]
        con = history.connect(str(db))
        stand = history.standouts(figs, history.references(con, figs, baseline)) + history.fleet_outliers(figs)
        history.record_run(con, {"run_id": rid, "started": 1000.0, "profile": profile, "verdict": "PASS"},
                           [{"nodeid": r.nodeid, "host": r.host, "layer": r.layer, "outcome": r.outcome,
                             "message": r.message} for r in recs], figs, verdicts)
        con.close()
        return stand

    got = {}
    for incremental in (False, True):
        db = tmp_path / f"{incremental}" / "h.sqlite"
        db.parent.mkdir()
        one_run(db, "r1", 1.0, incremental)
        got[incremental] = (one_run(db, "r2", 0.8, incremental), one_run(db, "r3", 0.8, incremental))
        con = sqlite3.connect(db)
        got[incremental] += tuple(con.execute(f"SELECT * FROM {t} ORDER BY 1,2,3").fetchall()
                                  for t in ("figures", "tests", "host_verdicts", "latest", "runs"))
    assert got[True][0] == got[False][0] and got[True][0], got[True][0]
    assert [(o["host"], o["gpu"], o["against"]) for o in got[True][0]][:2] == [
        ("gpu-03", 0, f"baseline ({how})"), ("gpu-03", 0, "previous")]
    assert got[True][1] == got[False][1]  # r3: slow again: no stand-out against the previous run (r2)
    against = [o["against"] for o in got[True][1] if o["host"] == "gpu-03" and o["against"] != "fleet"]
    assert against == ([] if how == "latest pass" else [f"baseline ({how})"] * 3), against
    assert got[True][2:] == got[False][2:]


def test_sigterm_mid_run_writes_complete_whole_run_files(tmp_path):
    """SIGTERM to a real run of 40 replayed H200 hosts once a few dozen tests have finished: exit 2, and
    results.json, every JUnit file and the history database hold every expected test (the finished ones as
    results.jsonl has them, the rest "not run: run interrupted"), no spool left behind."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("".join(f"h{i:02d} ansible_connection=local gpuaccept_replay={DATA} gpu_sku=h200-sxm-141gb "
                           f"gpus_per_node=2\n" for i in range(40)))
    rep, db = tmp_path / "rep", tmp_path / "h.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "--inventory", str(inv), "--reports", str(rep),
                             "--history", str(db), "-k", GPU_LAYERS, "-p", "no:randomly", "--forks", "0"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    jsonl = rep / "results.jsonl"
    end = time.time() + 180
    while time.time() < end and proc.poll() is None and (
            not jsonl.exists() or len(jsonl.read_bytes().splitlines()) < 30):
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[0][-3000:]
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out[-3000:]
    doc = json.loads((rep / "results.json").read_text())
    tests = {t["nodeid"]: t for t in doc["tests"]}
    finished = [json.loads(ln) for ln in jsonl.read_text().splitlines()]
    assert doc["interrupted"] is True and len(tests) == len(doc["tests"]) == len(finished)
    ran = [t for t in finished if not t["message"].startswith("not run")]
    assert 30 <= len(ran) < len(tests), (len(ran), len(tests))
    assert all(tests[t["nodeid"]] == t for t in finished)
    assert {t["message"] for t in finished[len(ran):]} <= {"not run: run interrupted"} | {
        t["message"] for t in finished if t["message"].startswith("interrupted")}
    by_layer: dict[str, list] = {}
    for t in doc["tests"]:
        by_layer.setdefault(t["layer"], []).append(t)
    for layer, ts in by_layer.items():
        suite = ET.parse(rep / f"junit-{layer}.xml").getroot().find("testsuite")
        cases = suite.findall("testcase")
        assert [c.get("name") for c in cases] == [t["name"] for t in ts]
        assert int(suite.get("errors")) == sum(t["outcome"] == "error" for t in ts)
        assert int(suite.get("failures")) == sum(t["outcome"] == "failed" for t in ts)
    assert sum(t["outcome"] == "error" for t in doc["tests"]) >= len(tests) - len(ran)
    assert doc["figures"] == [f for t in doc["tests"] for f in t["figures"]]
    assert not (rep / ".spool").exists()
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM tests").fetchone()[0] == len(tests)
    n_figs = con.execute("SELECT count(*) FROM figures").fetchone()[0]
    assert n_figs == len(doc["figures"]) > 0
    assert con.execute("SELECT run_id FROM runs").fetchall() == [(doc["run_id"],)]


def test_prometheus_above_its_limit_keeps_hosts_that_did_not_pass_first(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from gpuaccept.prometheus import write_textfile
    figs = [f for r in _recs(6) for f in r.figures]
    verdicts = {f"gpu-{i:02d}": "PASS" for i in range(6)} | {"gpu-01": "FAIL"}
    path = tmp_path / "g.prom"
    write_textfile(str(path), "run1", 1000.0, 1060.0, figs, verdicts, max_figures=8)
    fams = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    hosts = sorted(s.labels["host"] for s in fams["gpuaccept_figure_pass"].samples)
    # the failed host's 6 figures and the fleet-wide one first (no PASS verdict), then the first passing one
    assert hosts == ["fleet"] + ["gpu-00"] + ["gpu-01"] * 6, hosts
    assert fams["gpuaccept_figures_not_exported"].samples[0].value == len(figs) - 8
    assert len(fams["gpuaccept_host_verdict"].samples) == 6  # every host's verdict, whatever the limit
    write_textfile(str(path), "run1", 1000.0, 1060.0, figs, verdicts)
    fams = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    assert fams["gpuaccept_figures_not_exported"].samples[0].value == 0
    assert len(fams["gpuaccept_figure_pass"].samples) == len(figs)


def test_report_html_of_a_fleet_folds_passing_hosts_and_caps_gpu_rows():
    """Above MAX_ROWS hosts the page has a row per host that did not pass and names the passing ones in one
    folded list; the GPU table keeps GPUs with a failing figure first and at most MAX_ROWS rows."""
    from gpuaccept import html_report
    n = html_report.MAX_ROWS + 300
    hosts = [f"gpu{i:05d}" for i in range(n)]
    recs = []
    for i, h in enumerate(hosts):
        bad = i < 700  # 700 failing hosts, 2 GPUs each: 1,400 rows of failing hosts
        figs = [{"host": h, "check": "hbm_read_bw_gbps", "gpu": g, "serial": f"{h}-{g}", "value": 4000.0 if bad and g else 4600.0,
                 "unit": "GB/s", "limit": {"min": 4300.0}, "verdict": "fail" if bad and g else "pass"} for g in range(2)]
        recs.append(CaseRecord(f"suites/test_memory.py::t[{h}]", f"t[{h}]", h, "memory", "failed" if bad else "passed",
                               f"{h} GPU 1: 4000 < 4300" if bad else "", 1.0, figs))
    figs = [f for r in recs for f in r.figures]
    page = html_report.render("run1", {"hosts": hosts}, recs, figs, [])
    assert page.count('class="host-row"') == 700 and 'data-host="gpu00701"' not in page.split('id="passing-hosts"')[0]
    folded = page.split('id="passing-hosts"')[1].split("</details>")[0]
    assert f"{n - 700} passing hosts" in folded and "gpu00700, gpu00701" in folded
    gpus = page.split('id="gpus"')[1].split("</table>")[0]
    assert gpus.count('class="gpu-row"') == html_report.MAX_ROWS
    assert gpus.count('class="cell fail"') == 700  # every failing GPU kept, then others up to the cap
    assert f"{2 * n - html_report.MAX_ROWS} GPUs not listed" in page
    heat = page.split('id="heatmap"')[1].split("</table>")[0]
    assert heat.count("<tr data-host=") == 700
    md = summary_markdown("run1", {"hosts": hosts}, recs)  # summary.md: every GPU of the 700 failing hosts
    assert f"{2 * (n - 700)} GPUs of passing hosts not listed" in md
    gpu_rows = [ln for ln in md.splitlines() if re.match(r"\| gpu\d+ \| \d \|", ln)]
    assert len(gpu_rows) == 1400 and not [ln for ln in gpu_rows if ln.startswith("| gpu00700 |")]


def test_without_history_stand_outs_against_the_previous_run_folder(tmp_path):
    """--history none: the previous run's results.json (reports/latest) is read at the end, and a GPU whose
    pinned H2D bandwidth is 12 % below its figure there (still above its 48 GB/s floor) is a stand-out
    "history" in summary.md."""
    from test_e2e import run_pytest
    from test_replay import alter, replay_project
    inv = replay_project(tmp_path, DATA)
    args = ["--inventory", str(inv), "-k", "pcie_bandwidth", "--history", "none"]
    first = run_pytest(tmp_path, *args)
    assert first.returncode == 0, first.stdout[-3000:]

    def slower(doc):
        for k in ("h2d_gbps", "h2d_gbps_max", "h2d_gbps_all"):
            doc["gpus"][1][k] = round(doc["gpus"][1][k] * 0.88, 2)
    inv.write_text(inv.read_text().replace(str(DATA), str(alter(tmp_path, "pcie_bandwidth", slower))))
    second = run_pytest(tmp_path, *args)
    assert second.returncode == 0, second.stdout[-3000:]
    md = (tmp_path / "reports" / "latest" / "summary.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("| h200-a | h2d_bw_gbps |")]
    assert len(rows) == 1 and "| 1 |" in rows[0] and "| history |" in rows[0] and "| 12.0% |" in rows[0], md
    assert not (tmp_path / "reports" / "history.sqlite").exists()
