"""Whole-run report files written from each record's text kept as it arrived: results.json copied
from results.jsonl, each layer's JUnit from its spooled <testcase> elements, the history rows inserted in the
periodic rewrites. What is checked: the files equal what the pure writers make from the same records, after
periodic rewrites, a record replaced, a merge's add_many, and a real run interrupted by SIGTERM."""
from __future__ import annotations

import copy
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from project_helpers import DATA, GPU_LAYERS, make_project

from gpuaccept.reporting import history
from gpuaccept.plugin import finish as reporting
from gpuaccept.judging.standouts import outliers
from gpuaccept.reporting.junit import junit_xml_text
from gpuaccept.reporting.records import CaseRecord, record_dict
from gpuaccept.reporting.reporter import Reporter
from gpuaccept.reporting.summary import summary_markdown
from gpuaccept.reporting.verdicts import failed_hosts, failed_hosts_text, host_verdicts
from gpuaccept.reporting.folder import run_figures


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
    assert (folder / "failed-hosts.txt").read_text() == failed_hosts_text(recs, rep.meta["hosts"])
    assert failed_hosts_text(recs, rep.meta["hosts"]).startswith("".join(h + "\n" for h in failed_hosts(recs, rep.meta["hosts"])))
    doc = json.loads((folder / "results.json").read_text())
    assert doc["tests"] == json.loads(json.dumps([record_dict(r) for r in recs]))
    assert "figures" not in doc and doc["format"] == 3  # each figure once, in its test
    assert run_figures(doc) == [f for r in recs for f in r.figures]
    assert doc["run_id"] == "run1" and doc["hosts"] == rep.meta["hosts"]
    layers = sorted({r.layer for r in recs})
    for layer in layers:
        text = (folder / f"junit-{layer}.xml").read_text()
        assert _strip_ts(text) == _strip_ts(junit_xml_text(layer, [r for r in recs if r.layer == layer],
                                                           host_verdicts(recs, rep.meta["hosts"]), rep.meta))
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
    assert {f.get("sku") for f in run_figures(doc) if f["host"] == "gpu-05"} == {None}
    assert {f.get("sku") for f in run_figures(doc) if f["host"] == "gpu-00"} == {"h200-sxm-141gb"}
    lines = [json.loads(ln) for ln in (folder / "results.jsonl").read_text().splitlines()]
    assert len(lines) == len(recs) + 1 and lines[-1]["figures"] == doc["tests"][-1]["figures"]
    rep.close("interrupted")
    _check_files(rep, folder, final=True)
    assert json.loads((folder / "results.json").read_text())["complete"] is True
    assert not (folder / ".spool").exists()  # the spools go once the whole-run files are final


@pytest.mark.parametrize("baseline,first_profile,how", [("latest-pass", "standard", "latest pass"),
                                                         ("r1", "standard", "run r1"),
                                                         (None, "burnin", "burn-in on 1970-01-01")])
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


SHAPE = {"k": 8192, "m": 8192, "n": 8192}


def _burnin_recs(hosts: list[str], passed: set[str], changes: dict | None = None) -> list[CaseRecord]:
    """A burn-in suite's records (gpuaccept.judging.burnin's figures: no limit, verdict recorded), ``changes``:
    ``{(host, gpu, check): factor}``."""
    out = []
    for h in hosts:
        figs = [{"host": h, "layer": "burnin", "test": "test_burnin", "check": chk, "gpu": g, "serial": f"S{h[-1]}{g}",
                 "value": value * (changes or {}).get((h, g, chk), 1.0), "unit": unit, "verdict": "recorded",
                 "extra": extra} for g in range(2)
                for chk, value, unit, extra in (("burnin_bf16_tflops_start", 670.0, "TFLOP/s", SHAPE),
                                                ("burnin_bf16_tflops_end", 668.0, "TFLOP/s", SHAPE),
                                                ("burnin_fp8_tflops_start", 1350.0, "TFLOP/s", SHAPE),
                                                ("burnin_hbm_copy_gbps_start", 4200.0, "GB/s", None))]
        out.append(CaseRecord(f"suites/test_burnin.py::test_burnin[{h}]", f"test_burnin[{h}]", h, "burnin",
                              "passed" if h in passed else "failed", "" if h in passed else "sdc", 60.0, figs))
    return out


def _nightly_recs(hosts: list[str], changes: dict | None = None, temp: float = 60.0) -> list[CaseRecord]:
    """A nightly compute and memory layer: bf16/fp8 TFLOP/s with readings taken with them (not in the history
    key) and the HBM copy_ GB/s, ``changes`` as in :func:`_burnin_recs`."""
    out = []
    for h in hosts:
        for layer, check, value, unit, extra in (
                ("compute", "bf16_tflops", 669.0, "TFLOP/s",
                 {**SHAPE, "temp_c_max": temp, "sm_clock_mhz_median": 1500}),
                ("compute", "fp8_tflops", 1200.0, "TFLOP/s", {**SHAPE, "temp_c_max": temp}),
                ("memory", "hbm_copy_bw_gbps", 4300.0, "GB/s", {"method": "copy_"})):
            figs = [{"host": h, "layer": layer, "test": f"test_{check}", "check": check, "gpu": g,
                     "serial": f"S{h[-1]}{g}", "value": value * (changes or {}).get((h, g, check), 1.0), "unit": unit,
                     "limit": {"min": value * 0.5}, "verdict": "pass", "extra": extra} for g in range(2)]
            out.append(CaseRecord(f"suites/test_{layer}.py::test_{check}[{h}]", f"test_{check}[{h}]", h, layer,
                                  "passed", "", 2.0, figs))
    return out


@pytest.mark.parametrize("baseline", [None, "b1", "latest-pass"])
def test_burnin_baselines_found_as_the_run_goes_equal_record_run(tmp_path, baseline):
    """Burn-in figures as a GPU's baseline (gpuaccept.reporting.baseline) through the RunRecorder (stand-outs per batch in
    SQL, latest at the end in SQL) and through references() + standouts() + record_run over the whole run: the
    same stand-outs and the same tables, over a burn-in (one host's failed: no baseline), a nightly compared
    with the burn-in's start windows, a --profile burnin run with a burn-in and its own nightly figure (which
    wins over the burn-in suite's), and a second nightly; with the default baseline, --baseline b1 and
    latest-pass."""
    hosts = [f"gpu-0{i}" for i in range(4)]
    ok = set(hosts[:3])  # gpu-03's burn-in failed
    runs = [  # run id, profile, records
        ("b1", "standard", _burnin_recs(hosts, ok)),
        ("n1", "standard", _nightly_recs(hosts, {("gpu-01", 0, "bf16_tflops"): 600 / 669,  # 10.4% below burn-in
                                                 ("gpu-02", 1, "hbm_copy_bw_gbps"): 3700 / 4300,  # 11.9% below
                                                 ("gpu-03", 0, "bf16_tflops"): 600 / 669},  # no burn-in baseline
                                         temp=55.0)),
        ("b2", "burnin", _burnin_recs(hosts, ok, {("gpu-00", 1, "burnin_hbm_copy_gbps_start"): 0.86})
         + _nightly_recs(hosts[:1], {("gpu-00", 0, "hbm_copy_bw_gbps"): 4500 / 4300})),
        ("n2", "standard", _nightly_recs(hosts, {("gpu-00", 0, "hbm_copy_bw_gbps"): 4020 / 4300,  # 10.7% below b2's own
                                                 ("gpu-01", 0, "bf16_tflops"): 600 / 669}, temp=70.0)),
    ]
    got = {}
    for incremental in (False, True):
        db = tmp_path / f"{incremental}" / "h.sqlite"
        db.parent.mkdir()
        stands = []
        for n, (rid, profile, recs) in enumerate(runs):
            started = 86400.0 * (n + 1) + 10  # run n on 1970-01-0<n+2>
            recs = copy.deepcopy(recs)  # the Reporter gives figures their SKU in place
            verdicts = {h: "PASS" for h in hosts}
            if incremental:
                rep = Reporter(str(db.parent / rid), rid, {"hosts": hosts})
                sink = reporting.HistorySink(str(db), rid, started, profile, baseline if rid.startswith("n") else None)
                rep.sinks.append(sink)
                for i, r in enumerate(recs):
                    rep.add(r)
                    if i == 2:
                        rep.flush()  # one batch compared in the middle of the run
                stands.append(sink.recorder.finish({"verdict": "PASS"}, verdicts))
                sink.recorder.close()
                assert sink.error is None
                continue
            figs = [f for r in recs for f in r.figures]
            con = history.connect(str(db))
            stands.append(history.standouts(figs, history.references(
                con, figs, baseline if rid.startswith("n") else None)))
            history.record_run(con, {"run_id": rid, "started": started, "profile": profile, "verdict": "PASS"},
                               [{"nodeid": r.nodeid, "host": r.host, "layer": r.layer, "outcome": r.outcome,
                                 "message": r.message} for r in recs], figs, verdicts)
            con.close()
        con = sqlite3.connect(db)
        got[incremental] = (stands,) + tuple(con.execute(f"SELECT * FROM {t} ORDER BY 1,2,3").fetchall()
                                             for t in ("figures", "tests", "latest", "runs"))
        con.close()
    assert got[True] == got[False]
    stands = [[(o["host"], o["gpu"], o["check"].split("[")[0], o["against"], o["reference"]) for o in st]
              for st in got[True][0]]
    bf16, hbm = "bf16_tflops", "hbm_copy_bw_gbps"
    if baseline is None:
        assert stands[1] == [
            ("gpu-01", 0, bf16, "baseline (burn-in on 1970-01-02, as burnin_bf16_tflops_start)", 670.0),
            ("gpu-02", 1, hbm, "baseline (burn-in on 1970-01-02, as burnin_hbm_copy_gbps_start)", 4200.0)]
        assert ("gpu-00", 1, "burnin_hbm_copy_gbps_start", "baseline (burn-in on 1970-01-02)", 4200.0) in stands[2]
        assert ("gpu-00", 1, "burnin_hbm_copy_gbps_start", "previous", 4200.0) in stands[2]
        # b2 (--profile burnin) measured gpu-00's HBM copy itself: that figure, not its burn-in's, is the baseline
        assert ("gpu-00", 0, hbm, "baseline (burn-in on 1970-01-04)", pytest.approx(4500.0)) in stands[3]
        assert ("gpu-01", 0, bf16, "baseline (burn-in on 1970-01-04, as burnin_bf16_tflops_start)", 670.0) in stands[3]
    elif baseline == "b1":
        assert stands[1][:2] == [("gpu-01", 0, bf16, "baseline (run b1, as burnin_bf16_tflops_start)", 670.0),
                                 ("gpu-02", 1, hbm, "baseline (run b1, as burnin_hbm_copy_gbps_start)", 4200.0)]
        assert ("gpu-01", 0, bf16, "baseline (run b1, as burnin_bf16_tflops_start)", 670.0) in stands[3]
    else:  # latest-pass: n1's figures are the baseline of n2; no burn-in
        assert not [o for st in (stands[1], stands[3]) for o in st if "burn-in" in o[3] or "as burnin" in o[3]]
        assert ("gpu-00", 0, hbm, "baseline (latest pass)", pytest.approx(4500.0)) in stands[3]
    # gpu-03's burn-in failed: no baseline by default (--baseline b1 names the run: its figures, whatever passed)
    assert [o[3] for o in stands[1] if o[0] == "gpu-03"] == (
        ["baseline (run b1, as burnin_bf16_tflops_start)"] if baseline == "b1" else [])
    assert not [o for st in stands for o in st if o[2] == "fp8_tflops"]  # fp8: never against a burn-in


def test_burnin_key_rules_in_sql_equal_gpuaccept_baseline():
    """The SQL forms of gpuaccept.reporting.baseline's rules (used in run_standouts and _update_latest) give what its
    Python functions give, for the keys that map and some that must not."""
    keys = ["burnin_bf16_tflops_start[k=8192,m=8192,n=8192]", "burnin_bf16_tflops_start", "burnin_bf16_tflops_end",
            "burnin_hbm_copy_gbps_start", "burnin_hbm_copy_gbps_start[size=1]", "burnin_fp8_tflops_start[k=1]",
            "bf16_tflops[k=8192,m=8192,n=8192]", "bf16_tflops", "hbm_copy_bw_gbps[method=copy_]",
            "hbm_copy_bw_gbps[method=triad]", "hbm_copy_bw_gbps", "fp8_tflops[k=8192]", "bf16_tflops_x", "x[a=[1]]"]
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE figures (check_ TEXT, value REAL, layer TEXT)")
    from gpuaccept.reporting import baseline
    for k in keys:
        nk, bk = con.execute(f"SELECT {history._sql_nightly_key('?1')}, {history._sql_burnin_key('?1')}",
                             (k,)).fetchone()
        assert (nk, bk) == (baseline.nightly_key(k), baseline.burnin_key(k)), k
        for layer in ("burnin", "compute", None):
            f = {"check": k.split("[")[0], "value": 1.0, **({"layer": layer} if layer else {})}
            con.execute("DELETE FROM figures")
            con.execute("INSERT INTO figures VALUES (?, 1.0, ?)", (k, layer))
            sql = con.execute(f"SELECT {history._sql_is_burnin('figures')} FROM figures").fetchone()[0]
            assert bool(sql) == baseline.is_burnin_figure(f), (k, layer)


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
    assert "figures" not in doc and run_figures(doc) == [f for t in doc["tests"] for f in t["figures"]]
    assert not (rep / ".spool").exists()
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM tests").fetchone()[0] == len(tests)
    n_figs = con.execute("SELECT count(*) FROM figures").fetchone()[0]
    assert n_figs == len(run_figures(doc)) > 0
    assert con.execute("SELECT run_id FROM runs").fetchall() == [(doc["run_id"],)]


def test_prometheus_above_its_limit_keeps_hosts_that_did_not_pass_first(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from gpuaccept.reporting.prometheus import write_textfile
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


def test_prometheus_help_text_is_the_same_from_run_to_run(tmp_path):
    """node_exporter's textfile collector refuses a metric whose HELP differs between files: two runs write the
    same HELP lines, and no series, label or text carries the run's id (docs/reports.md: stable series)."""
    from prometheus_client.parser import text_string_to_metric_families

    from gpuaccept.reporting.prometheus import write_textfile
    figs = [f for r in _recs(2) for f in r.figures]
    verdicts = {"gpu-00": "PASS", "gpu-01": "FAIL"}
    helps = []
    for run in ("20261201T000000Z", "20261202T000000Z"):
        path = tmp_path / f"{run}.prom"
        write_textfile(str(path), run, 1000.0, 1060.0, figs, verdicts)
        text = path.read_text()
        helps.append([line for line in text.splitlines() if line.startswith("# HELP")])
        assert run not in text
    assert helps[0] == helps[1] and not any("2026120" in h for h in helps[0])


def test_report_html_of_a_fleet_folds_passing_hosts_and_caps_gpu_rows():
    """Above MAX_ROWS hosts the page has a row per host that did not pass and names the passing ones in one
    folded list; the GPU table keeps GPUs with a failing figure first and at most MAX_ROWS rows."""
    from gpuaccept.reporting import html as html_report
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
    "previous" in summary.md, under the same check key as the history database gives it."""
    from project_helpers import alter, replay_folder, replay_project, run_pytest
    inv = replay_project(tmp_path, DATA)
    args = ["--inventory", str(inv), "-k", "pcie_bandwidth", "--history", "none"]
    first = run_pytest(tmp_path, *args)
    assert first.returncode == 0, first.stdout[-3000:]

    def slower(doc):
        for k in ("h2d_gbps", "h2d_gbps_max", "h2d_gbps_all"):
            doc["gpus"][1][k] = round(doc["gpus"][1][k] * 0.88, 2)
    # the inventory replays a copy of the captures (project_helpers.replay_folder): point it at an altered copy
    slow = replay_folder(tmp_path, alter(tmp_path, "pcie_bandwidth", slower))
    inv.write_text(re.sub(r"gpuaccept_replay=\S+", f"gpuaccept_replay={slow}", inv.read_text()))
    second = run_pytest(tmp_path, *args)
    assert second.returncode == 0, second.stdout[-3000:]
    md = (tmp_path / "reports" / "latest" / "summary.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("| h200-a | h2d_bw_gbps[")]
    assert len(rows) == 1 and "| 1 |" in rows[0] and "| previous |" in rows[0] and "| 12.0% |" in rows[0], md
    assert not (tmp_path / "reports" / "history.sqlite").exists()


def test_runs_creating_one_history_at_once_all_open_it(tmp_path):
    """Every node of a Slurm allocation may open the shared history database for the first time at the same
    moment: each of eight processes, released together, opens it (no "table runs already exists"), and the
    schema is made once."""
    db, go = tmp_path / "shared" / "history.sqlite", tmp_path / "go"
    ready = tmp_path / "ready"
    ready.mkdir()
    code = ("import os, sys, time\n"
            "from gpuaccept.reporting import history\n"
            f"open(os.path.join({str(ready)!r}, str(os.getpid())), 'w').close()\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.001)\n"
            f"history.connect({str(db)!r}).close()\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
             for _ in range(8)]
    end = time.monotonic() + 120  # until all eight have imported gpuaccept and wait
    while len(list(ready.iterdir())) < 8 and time.monotonic() < end and all(p.poll() is None for p in procs):
        time.sleep(0.05)
    assert len(list(ready.iterdir())) == 8, [p.stderr.read()[-300:] for p in procs if p.poll() is not None]
    go.write_text("")
    errs = [(p.wait(timeout=60), p.stderr.read()) for p in procs]
    assert [rc for rc, _ in errs] == [0] * 8, [e[-300:] for _, e in errs if e]
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == history.SCHEMA_VERSION
    assert {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")} >= \
        {"runs", "figures", "tests", "host_verdicts", "latest"}


def test_the_end_s_imports_are_made_while_the_probes_run():
    """``warm_up`` (started when the first test begins) leaves the end of the run only the writes: in a fresh
    controller process none of report.html's Jinja2 environment, its compiled template or prometheus_client is
    loaded before, and all of them are after; without the textfile prometheus_client stays out."""
    code = ("import json, sys; from gpuaccept.plugin import finish\n"
            "before = [m in sys.modules for m in ('gpuaccept.reporting.html', 'prometheus_client')]\n"
            "finish.warm_up(prometheus=sys.argv[1] == 'yes').join(60)\n"
            "from gpuaccept.reporting import html\n"
            "env = html._environment()\n"
            "print(json.dumps({'before': before, 'prometheus': 'prometheus_client' in sys.modules,\n"
            "                  'compiled': [k[1] for k in env.cache.keys()]}))\n")
    for prom in ("yes", "no"):
        r = subprocess.run([sys.executable, "-c", code, prom], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["compiled"] == ["report.html.j2"]
        assert got["prometheus"] is (prom == "yes")
        assert got["before"] == [False, False]
