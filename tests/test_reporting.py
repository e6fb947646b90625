"""Reports of a run as an operator uses them after a night: host verdicts, failed-hosts.txt and
``--limit @FILE``, ``--list-hosts``, the SQLite history and its stand-outs, report.html in a real headless
Chromium, the Prometheus textfile parsed by prometheus_client, merging report folders, JUnit properties.

Runs are real: the replayed 2xH200 captures (tests/data/replay-h200x2) through ``gpuaccept_replay`` and the
sshd test nodes on loopback; the database is a real SQLite file."""
from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from project_helpers import chromium, CPU_SUITE, DATA, GPU_LAYERS, alter, junit, make_project, replay_folder, replay_project, run_pytest

from gpuaccept.reporting import history
from gpuaccept.errors import ConfigError
from gpuaccept.config.limitfile import hosts_from_file
from gpuaccept.scaleout.merge import main as merge_main
from gpuaccept.reporting.junit import figure_properties
from gpuaccept.reporting.records import CaseRecord
from gpuaccept.reporting.reporter import Reporter
from gpuaccept.reporting.verdicts import failed_hosts, host_verdicts
from gpuaccept.reporting.folder import run_figures

REPO = Path(__file__).resolve().parent.parent


def fig(host, check, value, gpu=None, serial=None, lim=None, verdict=None, sku="h200-sxm-141gb", **extra):
    f = {"host": host, "layer": "memory", "test": "t", "check": check, "gpu": gpu, "pci_bus_id": None,
         "serial": serial, "value": value, "unit": "GB/s", "limit": {"min": lim} if lim else None,
         "verdict": verdict or ("recorded" if lim is None else "pass" if value >= lim else "fail"), "sku": sku}
    if extra:
        f["extra"] = extra
    return f


# -- pure parts ----------------------------------------------------------------------------------
def test_junit_properties_unique_with_unit_limit_verdict_and_host():
    figs = [fig("fleet", "busbw_gbps", 10.0, bytes=4096), fig("fleet", "busbw_gbps", 20.0, bytes=65536),
            fig("fleet", "busbw_gbps", 20.0, bytes=65536), fig("fleet", "driver_version", "580", host_extra=1)]
    figs[3]["extra"] = {"host": "gpu-07"}
    props = figure_properties(True, figs)
    names = [n for n, _ in props]
    assert len(names) == len(set(names)), names
    d = dict(props)
    assert d["busbw_gbps[bytes=4096]"] == "10.0" and d["busbw_gbps[bytes=4096].unit"] == "GB/s"
    assert "busbw_gbps[bytes=65536]#2" in d
    assert d["gpu-07.driver_version"] == "580"  # a fleet-wide testcase names the host a figure belongs to
    judged = dict(figure_properties(False, [fig("a", "hbm_read_bw_gbps", 4100.0, gpu=1, lim=4300)]))
    assert judged == {"gpu1.hbm_read_bw_gbps": "4100.0", "gpu1.hbm_read_bw_gbps.unit": "GB/s",
                      "gpu1.hbm_read_bw_gbps.min": "4300", "gpu1.hbm_read_bw_gbps.verdict": "fail"}


def test_host_verdicts_and_failed_hosts():
    recs = [CaseRecord("s/test_memory.py::t[a]", "t[a]", "a", "memory", "passed"),
            CaseRecord("s/test_memory.py::t[b]", "t[b]", "b", "memory", "failed", "b GPU 1: hbm 4100 < 4300",
                       figures=[fig("b", "hbm_read_bw_gbps", 4100.0, gpu=1, lim=4300)]),
            CaseRecord("s/test_memory.py::t[c]", "t[c]", "c", "memory", "error", "c: cannot connect"),
            CaseRecord("s/test_health.py::test_fleet", "test_fleet", None, "health", "failed", "d: driver 570 != 580")]
    hv = host_verdicts(recs, ["a", "b", "c", "d"])
    assert {h: v["verdict"] for h, v in hv.items()} == {"a": "PASS", "b": "FAIL", "c": "ERROR", "d": "FAIL",
                                                        "fleet": "FAIL"}
    assert "hbm_read_bw_gbps GPU 1: 4100 GB/s vs >= 4300" in hv["b"]["reasons"][0]
    assert failed_hosts(recs, ["a", "b", "c", "d"]) == ["b", "c", "d"]
    # a fleet-wide test whose finding names no host (a ring below its floor, nobody singled out): every host of the
    # run is to rerun, since the collective can only be repeated or located over all of them
    slow = CaseRecord("s/test_nccl_multinode.py::test_allreduce_multinode", "test_allreduce_multinode", None, "nccl",
                      "failed", "fleet: internode_busbw_gbps 1.6 GB/s < min 100 GB/s (ring: a, b)", causes=[],
                      figures=[fig("fleet", "internode_busbw_gbps", 1.6, lim=100.0)])
    assert failed_hosts([slow], ["a", "b"]) == ["a", "b"]
    assert failed_hosts([slow], []) == []
    # a passing fleet-wide test counts for the hosts with a figure in it (`pytest -k multinode` read "SKIP 2 hosts")
    mn = [CaseRecord("s/test_nccl_multinode.py::test_allreduce_multinode", "test_allreduce_multinode", None, "nccl",
                     "passed", figures=[fig("a", "internode_rank_time_us", 1.0), fig("b", "internode_rank_time_us", 1.0),
                                        fig("fleet", "internode_busbw_gbps", 346.0, lim=300.0), fig("zz", "x", 1.0)])]
    assert {h: v["verdict"] for h, v in host_verdicts(mn, ["a", "b", "e"]).items()} == {
        "a": "PASS", "b": "PASS", "e": "SKIP", "fleet": "PASS"}
    # the same all-reduce with no limit to judge its busbw by (no SKU, a CPU all-reduce) judged nothing: SKIP
    mn[0].figures[2] = fig("fleet", "internode_busbw_gbps", 346.0)
    assert {h: v["verdict"] for h, v in host_verdicts(mn, ["a", "b"]).items()} == {
        "a": "SKIP", "b": "SKIP", "fleet": "SKIP"}
    assert {h: v["verdict"] for h, v in host_verdicts(recs + mn, ["a", "b", "c", "d"]).items()}["b"] == "FAIL"


def test_limit_file(tmp_path):
    f = tmp_path / "failed-hosts.txt"
    f.write_text("# rerun\nc\n\na\n")
    assert hosts_from_file(str(f), ["a", "b", "c"]) == ["a", "c"]
    f.write_text("a\nzz\n")
    with pytest.raises(ConfigError, match=r"failed-hosts.txt:2: host 'zz' is not in the inventory"):
        hosts_from_file(str(f), ["a"])
    f.write_text("")
    with pytest.raises(ConfigError, match="lists no host"):
        hosts_from_file(str(f), ["a"])


def test_reporter_appends_and_bounds_rewrites(tmp_path):
    rep = Reporter(str(tmp_path / "r"), "run1", {"hosts": ["a"]})
    for i in range(50):
        rep.add(CaseRecord(f"s/test_memory.py::t{i}[a]", f"t{i}[a]", "a", "memory", "passed"))
    # appended per test; the whole-run files not rewritten 50 times (none yet: under FLUSH_MIN_S)
    assert len((tmp_path / "r" / "results.jsonl").read_text().splitlines()) == 50
    assert not (tmp_path / "r" / "results.json").exists()
    rep.close("interrupted")
    assert len(json.loads((tmp_path / "r" / "results.json").read_text())["tests"]) == 50


def test_records_with_no_record_after_them_reach_the_whole_run_files_by_the_timer(tmp_path):
    """Records that arrive in a burst and then none (a hung host holding the run): the timer rewrites the whole-run
    files within FLUSH_MIN_S of the burst, so a controller killed during the stall leaves them counted; the rewrite
    still says INCOMPLETE. Nothing is rewritten again while no record comes."""
    import time as _time
    from gpuaccept.reporting.reporter import FLUSH_MIN_S
    d = tmp_path / "r"
    rep = Reporter(str(d), "run1", {"hosts": ["a", "b"]})
    rep.begin()
    rep.add(CaseRecord("s/test_memory.py::t0[a]", "t0[a]", "a", "memory", "passed"))
    rep.add(CaseRecord("s/test_memory.py::t1[b]", "t1[b]", "b", "memory", "failed", "b: hbm_read_bw_gbps 3000 GB/s"))
    deadline = _time.monotonic() + FLUSH_MIN_S + 20
    while _time.monotonic() < deadline and "**FAIL** `b`" not in (d / "summary.md").read_text():
        _time.sleep(0.2)
    summary = (d / "summary.md").read_text()
    assert "INCOMPLETE" in summary and "**FAIL** `b`" in summary, summary
    assert [t["nodeid"] for t in json.loads((d / "results.json").read_text())["tests"]] == [
        "s/test_memory.py::t0[a]", "s/test_memory.py::t1[b]"]
    written = (d / "summary.md").stat().st_mtime_ns
    _time.sleep(0.5)
    assert not rep._later.pending and (d / "summary.md").stat().st_mtime_ns == written  # idle: no timer, no rewrite
    rep.close("interrupted")
    assert "INCOMPLETE" not in (d / "summary.md").read_text()


# -- history -------------------------------------------------------------------------------------
def _run(con, rid, started, figures, profile="standard"):
    history.record_run(con, {"run_id": rid, "started": started, "profile": profile}, [], figures, {})


def test_history_standouts_baseline_previous_like_with_like(tmp_path):
    con = history.connect(str(tmp_path / "h.sqlite"))
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    _run(con, "burn", 1, [fig("a", "hbm", 4600.0, gpu=0, serial="S0", lim=4300)], profile="burnin")
    _run(con, "n1", 2, [fig("a", "hbm", 4550.0, gpu=0, serial="S0", lim=4300),
                        fig("b", "hbm", 3000.0, gpu=0, serial="H1", lim=2000, sku="h100-sxm5-80gb")])
    # tonight: S0 moved to host z, 8% under its burn-in; H1 (an H100) is compared with itself only
    now = [fig("z", "hbm", 4300.0, gpu=3, serial="S0", lim=4300),
           fig("b", "hbm", 2990.0, gpu=0, serial="H1", lim=2000, sku="h100-sxm5-80gb")]
    refs = history.references(con, now)
    got = history.standouts(now, refs, pct=5.0)
    assert [(o["host"], o["serial"], o["against"]) for o in got] == [
        ("z", "S0", "baseline (burn-in on 1970-01-01)"), ("z", "S0", "previous")]
    assert got[0]["reference"] == 4600.0 and got[0]["pct"] == pytest.approx(6.5, abs=0.1)
    # a figure that failed is a failure, not a stand-out
    assert history.standouts([fig("z", "hbm", 4000.0, gpu=3, serial="S0", lim=4300)], refs, pct=5.0) == []
    # another SKU's reference is not compared (like with like)
    refs2 = {("S0", "hbm"): {"previous": (9000.0, "x", "b200")}}
    assert history.standouts(now[:1], refs2, pct=5.0) == []


def test_slow_decline_stands_out_against_the_first_pass(tmp_path):
    """A GPU with no burn-in losing 1 % a night: never 10 % below the previous night, so before it never stood
    out. Its first passing night is its baseline now: night 11 (0.99^11 = 89.5 % of night 0) is a stand-out
    "baseline (first pass on <night 0>)", in the run-as-it-goes path (RunRecorder) and in references().
    A GPU swapped in (new serial) starts its own baseline; a failed first night is nobody's baseline."""
    db = str(tmp_path / "h.sqlite")
    day = 86400.0
    found = {}
    for n in range(13):
        figs = [fig("a", "hbm", 4800.0 * 0.99 ** n, gpu=0, serial="S0", lim=4000),
                fig("a", "hbm", 4700.0 * (0.99 ** (n - 6) if n >= 6 else 1), gpu=1,
                    serial="OLD1" if n < 6 else "NEW1", lim=4000)]
        if n == 0:
            figs.append(fig("a", "bw", 40.0, gpu=2, serial="S2", lim=50))  # failed: no baseline
        elif n == 12:
            figs.append(fig("a", "bw", 44.0 * 0.85, gpu=2, serial="S2", lim=30))
        else:
            figs.append(fig("a", "bw", 44.0, gpu=2, serial="S2", lim=30))
        con = history.connect(db)
        pure = history.standouts(figs, history.references(con, figs))
        con.close()
        rec = history.RunRecorder(db, f"night{n}", 1_800_000_000 + n * day, "standard")
        rec.add({"nodeid": "t", "host": "a", "layer": "memory", "outcome": "passed"}, figs)
        got = rec.finish({"verdict": "PASS"}, {"a": "PASS"})
        rec.close()
        key = lambda o: (o["serial"], o["against"], o["reference"], o["pct"])  # noqa: E731
        assert sorted(map(key, got)) == sorted(map(key, pure)), n
        found[n] = [(o["serial"], o["against"], o["pct"]) for o in got]
    first = "baseline (first pass on 2027-01-15)"
    assert all(found[n] == [] for n in range(11)), found
    assert found[11] == [("S0", first, 10.5)] and found[12][:1] == [("S0", first, 11.4)], found
    assert not [o for n in found for o in found[n] if o[0] in ("NEW1", "OLD1")]  # NEW1: 6 nights, 5.9 %
    # S2 failed its first night and passed from night 1 (44.0): 15 % below that on night 12, not below 40.0
    assert ("S2", "baseline (first pass on 2027-01-16)", 15.0) in found[12]


def test_first_pass_baseline_follows_a_corrected_sku(tmp_path):
    """The inventory's gpu_sku was wrong for two nights, then corrected; the GPU then loses 1 % a night. The
    first pass under the wrong SKU is never compared (like with like), so it must not stay the baseline: the
    first night of the right SKU is, and night 13 (11 nights of decline) stands out against it."""
    db = str(tmp_path / "h.sqlite")
    found = {}
    for n in range(14):
        sku = "h100-sxm5-80gb" if n < 2 else "h200-sxm-141gb"
        value = 4800.0 * 0.99 ** max(0, n - 2)
        rec = history.RunRecorder(db, f"night{n}", 1_800_000_000 + n * 86400.0, "standard")
        rec.add({"nodeid": "t", "host": "a", "layer": "memory", "outcome": "passed"},
                [fig("a", "hbm", value, gpu=0, serial="S0", lim=4000, sku=sku)])
        found[n] = [(o["against"], o["pct"]) for o in rec.finish({"verdict": "PASS"}, {"a": "PASS"})]
        rec.close()
    assert all(found[n] == [] for n in range(13)), found
    assert found[13] == [("baseline (first pass on 2027-01-17)", 10.5)], found


def test_history_on_a_read_only_mount_is_named_so(tmp_path):
    """A good history database on a read-only mount (a bind mount remounted ro in a private mount namespace)
    and a new one in a read-only folder: the run exits 4 before any node naming the read-only filesystem;
    ``python -m gpuaccept.reporting.history`` still reads the good one. Before: "not a gpuaccept history database
    (unable to open database file)" for both (an operator deletes a good history after that), and the CLI
    could not read it."""
    unshare = shutil.which("unshare")
    assert unshare and os.geteuid() == 0, "mount namespaces need util-linux unshare and root (as sshd tests do)"
    hdir = tmp_path / "hist"
    hdir.mkdir()
    db = hdir / "h.sqlite"
    con = history.connect(str(db))
    history.record_run(con, {"run_id": "r1", "started": 1_800_000_000, "profile": "standard"}, [],
                       [fig("h1", "hbm", 4800.0, gpu=0, serial="S0", lim=4300)], {"h1": "PASS"})
    con.close()
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("h1 ansible_connection=local\n")
    ro = f"mount --bind {hdir} {hdir} && mount -o remount,bind,ro {hdir}"
    for target, who in ((db, "the file"), (hdir / "new.sqlite", f"its folder {hdir}")):
        rep = tmp_path / f"rep-{target.name}"
        res = subprocess.run([unshare, "--mount", "--propagation", "private", "/bin/sh", "-c", f'{ro} && exec "$@"',
                              "sh", sys.executable, "-m", "pytest", "--inventory", str(inv), "--history", str(target),
                              "--reports", str(rep)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
        assert f"--history: {target}: {who} is on a read-only filesystem" in res.stderr, res.stderr[-2000:]
        assert "not a gpuaccept history database" not in res.stderr and "Traceback" not in res.stderr + res.stdout
        assert not rep.exists()
    cli = subprocess.run([unshare, "--mount", "--propagation", "private", "/bin/sh", "-c", f'{ro} && exec "$@"', "sh",
                          sys.executable, "-m", "gpuaccept.reporting.history", "--db", str(db), "--serial", "S0", "--json"],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert cli.returncode == 0, cli.stderr
    assert [(r["run"], r["value"]) for r in json.loads(cli.stdout)] == [("r1", 4800.0)]


def test_a_report_folder_used_again_keeps_the_earlier_nights(tmp_path):
    """A nightly job writes to the same --reports folder, removed between nights (replayed 2xH200 captures,
    night 2 with GPU 1's HBM write 7 % slower). The run id is the folder's name: before, night 2 replaced night
    1 in the history (its figures deleted; one run left). Now night 1 is kept as "<name>@<its UTC start>", both
    nights' figures are there, and the stand-out still compares with night 1."""
    db = tmp_path / "history.sqlite"
    tonight = tmp_path / "tonight"
    inv = replay_project(tmp_path, DATA)
    common = ["--inventory", str(inv), "-k", "hbm", "--history", str(db), "--standout-pct", "5",
              "--reports", str(tonight)]
    r1 = run_pytest(tmp_path, *common)
    assert r1.returncode == 0, r1.stdout[-3000:]
    started1 = json.loads((tonight / "results.json").read_text())["started"]
    shutil.rmtree(tonight)
    _replay_slower_hbm_write(tmp_path, inv, 7)
    r2 = run_pytest(tmp_path, *common)
    assert r2.returncode == 0, r2.stdout[-3000:]
    con = sqlite3.connect(db)
    kept = "tonight@" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started1))
    assert sorted(r[0] for r in con.execute("SELECT run_id FROM runs")) == ["tonight", kept]
    rows = con.execute("SELECT run_id, gpu, value FROM figures WHERE check_ LIKE 'hbm_write_bw_gbps%' "
                       "ORDER BY started, gpu").fetchall()
    assert [r[:2] for r in rows] == [(kept, 0), (kept, 1), ("tonight", 0), ("tonight", 1)]
    assert rows[3][2] == pytest.approx(rows[1][2] * 0.93, rel=1e-3)
    md = (tonight / "summary.md").read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("| h200-a | hbm_write_bw_gbps[method=zero] | 1 |")
                and "| previous |" in ln)
    assert "| 7.0% |" in line


def test_history_explicit_and_latest_pass_baseline(tmp_path):
    con = history.connect(str(tmp_path / "h.sqlite"))
    _run(con, "r1", 1, [fig("a", "bw", 100.0, gpu=0, serial="S", lim=50)])
    _run(con, "r2", 2, [fig("a", "bw", 40.0, gpu=0, serial="S", lim=50)])  # failed
    now = [fig("a", "bw", 85.0, gpu=0, serial="S", lim=50)]
    lp = history.standouts(now, history.references(con, now, "latest-pass"))
    assert [(o["against"], o["reference"]) for o in lp] == [("baseline (latest pass)", 100.0)]
    byid = history.standouts(now, history.references(con, now, "r1"))
    assert [o["against"] for o in byid] == ["baseline (run r1)"]


def test_fleet_outliers_mad_per_sku():
    figs = [fig(f"h{i}", "bf16", v, gpu=0, serial=f"s{i}", lim=500) for i, v in
            enumerate([665, 667, 670, 662, 668, 590])]
    figs.append(fig("x", "bf16", 300.0, gpu=0, serial="x0", lim=200, sku="a100-sxm4-80gb"))
    got = history.fleet_outliers(figs)
    assert [(o["host"], o["sku"]) for o in got] == [("h5", "h200-sxm-141gb")]
    assert got[0]["pct"] > 8 and got[0]["mads"] != ""


def test_a_run_finds_its_test_rows_by_index(tmp_path):
    """The statements a run's start and the merge make on ``tests`` by run id search the v6 index (a database
    migrated from v5 included), so their cost does not grow with every test row the history ever kept."""
    path = str(tmp_path / "h.sqlite")
    history.connect(path, upto=5).close()
    con = history.connect(path)
    for sql in ("DELETE FROM tests WHERE run_id=?", "SELECT nodeid FROM tests WHERE run_id=?"):
        plan = " ".join(str(r[-1]) for r in con.execute("EXPLAIN QUERY PLAN " + sql, ("r1",)))
        assert "USING INDEX tests_run" in plan, (sql, plan)
    con.close()


def test_history_migrates_v1_and_cli(tmp_path, capsys):
    path = str(tmp_path / "h.sqlite")
    history.connect(path, upto=1).close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 1
    con = history.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == history.SCHEMA_VERSION
    _run(con, "r1", 1700000000, [fig("a", "bw", 100.0, gpu=0, serial="S", lim=50)])
    _run(con, "r2", 1700086400, [fig("b", "bw", 90.0, gpu=2, serial="S", lim=50)])
    con.close()
    assert history.main(["--db", path, "--serial", "S"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["time", "run", "profile", "host"] and len(out) == 3
    assert " a " in out[1] and " b " in out[2] and "100" in out[1] and "90" in out[2]


# -- Prometheus ----------------------------------------------------------------------------------
def test_prometheus_textfile_parses(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from gpuaccept.reporting.prometheus import write_textfile
    path = tmp_path / "gpuaccept.prom"
    figs = [fig("a", "hbm_read_bw_gbps", 4606.3, gpu=0, serial="1650", lim=4300),
            fig("a", "busbw_gbps", 12.5, bytes=4096), fig("a", "name", "NVIDIA H200")]
    figs[0]["pci_bus_id"] = "00000000:00:06.0"
    write_textfile(str(path), "run1", 1000.0, 1060.0, figs, {"a": "PASS", "b": "ERROR"})
    fams = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    hbm = fams["gpuaccept_hbm_read_bw_gbps"].samples[0]
    assert hbm.value == 4606.3 and hbm.labels["serial"] == "1650" and hbm.labels["pci_bus_id"] == "00000000:00:06.0"
    assert hbm.labels["unit"] == "GB/s" and hbm.labels["gpu"] == "0" and hbm.labels["sku"] == "h200-sxm-141gb"
    assert fams["gpuaccept_busbw_gbps"].samples[0].labels["bytes"] == "4096"
    verdicts = {s.labels["host"]: s.value for s in fams["gpuaccept_host_verdict"].samples}
    assert verdicts == {"a": 1, "b": 2}  # the one verdict order: 3 FAIL, 2 ERROR, 1 PASS, 0 SKIP
    assert fams["gpuaccept_run_duration_seconds"].samples[0].value == 60
    assert not list(tmp_path.glob("*.tmp*"))  # written through a temporary file and renamed
    # stable series: a second night's run writes the same series (no run id in any label), newer values
    first = {(f.name, tuple(sorted(s.labels.items()))) for f in fams.values() for s in f.samples}
    assert not any("run_id" in dict(labels) for _, labels in first)
    last = {s.labels["host"]: s.value for s in fams["gpuaccept_last_run_timestamp_seconds"].samples}
    assert last == {"a": 1000.0, "b": 1000.0}
    write_textfile(str(path), "run2", 87400.0, 87460.0, figs, {"a": "PASS", "b": "ERROR"})
    fams2 = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    assert {(f.name, tuple(sorted(s.labels.items()))) for f in fams2.values() for s in f.samples} == first
    assert fams2["gpuaccept_run_timestamp_seconds"].samples[0].value == 87400.0
    # a --limit rerun of b alone: a keeps the start of the last run that tested it (the two-day alert), b moves on;
    # a host name the text format escapes survives the round trip
    write_textfile(str(path), "run3", 90000.0, 90010.0, [], {'b"\\x': "ERROR", "a": "PASS"})
    write_textfile(str(path), "run4", 95000.0, 95010.0, [], {"b": "PASS"})
    fams3 = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    last = {s.labels["host"]: s.value for s in fams3["gpuaccept_last_run_timestamp_seconds"].samples}
    assert last == {"b": 95000.0, "a": 90000.0, 'b"\\x': 90000.0}, last
    assert {s.labels["host"] for s in fams3["gpuaccept_host_verdict"].samples} == {"b"}
    # a host taken out of the inventory leaves the file (its untested-for-two-days alert would fire for ever)
    write_textfile(str(path), "run5", 96000.0, 96010.0, [], {"b": "PASS"}, inventory_hosts=["a", "b", "c"])
    fams4 = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    last = {s.labels["host"]: s.value for s in fams4["gpuaccept_last_run_timestamp_seconds"].samples}
    assert last == {"b": 96000.0, "a": 90000.0}, last
    # a run cut short before b was decided (its action's cause: the interruption) did not test it either
    write_textfile(str(path), "run6", 97000.0, 97010.0, [], {"a": "PASS", "b": "ERROR"}, inventory_hosts=["a", "b"],
                   host_actions={"a": None, "b": {"action": "rerun", "cause": "interruption"}})
    fams5 = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    last = {s.labels["host"]: s.value for s in fams5["gpuaccept_last_run_timestamp_seconds"].samples}
    assert last == {"a": 97000.0, "b": 96000.0}, last
    assert {s.labels["host"]: s.labels["cause"] for s in fams5["gpuaccept_host_verdict"].samples} == {
        "a": "none", "b": "interruption"}


def test_a_run_keeps_the_untested_inventory_hosts_timestamps_and_drops_the_removed_ones(tmp_path):
    """A real --limit run over a local host: the host it tested moves on, an inventory host it did not test keeps
    its earlier last-run timestamp, a host no longer in the inventory leaves the file."""
    from prometheus_client.parser import text_string_to_metric_families
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("[gpu]\nself ansible_connection=local\nkept ansible_connection=local\n")
    prom = tmp_path / "gpuaccept.prom"
    prom.write_text('gpuaccept_last_run_timestamp_seconds{host="kept"} 1000.0\n'
                    'gpuaccept_last_run_timestamp_seconds{host="gone"} 1000.0\n'
                    'gpuaccept_last_run_timestamp_seconds{host="self"} 1000.0\n')
    res = run_pytest(tmp_path, "--inventory", str(inv), "--limit", "self", "-m", "health", "-k", "test_gpu_inventory",
                     "--reports", str(tmp_path / "rep"), "--history", "none", "--prometheus-textfile", str(prom))
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-2000:]
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    last = {s.labels["host"]: s.value for s in fams["gpuaccept_last_run_timestamp_seconds"].samples}
    assert set(last) == {"self", "kept"} and last["kept"] == 1000.0 and last["self"] > time.time() - 600, last


def test_prometheus_series_keep_their_names_and_labels_whatever_the_selection(tmp_path):
    """A storage path, an all-reduce's hosts or a filesystem's options never make a metric name or a label: two
    nights with different hosts in the all-reduce and other fio options write the same series set."""
    from prometheus_client.parser import text_string_to_metric_families

    from gpuaccept.reporting.prometheus import LABELS, write_textfile

    def night(hosts, fstype):
        return [fig("a", "seq_read_gbps /tmp/nc stor/n1", 2.5, fstype=fstype, iodepth=8, rw="read"),
                fig("fleet", "internode_busbw_gbps", 346.0, bytes=1 << 30, hosts="-".join(hosts), label=hosts[0]),
                fig("a", "bf16_tflops", 680.9, gpu=0, m=8192, n=8192, k=8192, dtype="bf16"),
                fig("a", "p2p_bw_gbps", 350.0, gpu=0, pair=[0, 1])]

    def series(figs):
        path = tmp_path / "n.prom"
        write_textfile(str(path), "r", 0.0, 1.0, figs, {"a": "PASS"})
        return {(f.name, tuple(sorted(s.labels.items()))) for f in text_string_to_metric_families(path.read_text())
                for s in f.samples if f.name.startswith(("gpuaccept_seq", "gpuaccept_internode", "gpuaccept_bf16",
                                                         "gpuaccept_p2p"))}
    one, two = series(night(["gpu01", "gpu02", "gpu12"], "ext4")), series(night(["gpu01", "gpu02"], "xfs"))
    assert one == two and len(one) == 4
    names = {n for n, _ in one}
    assert names == {"gpuaccept_seq_read_gbps", "gpuaccept_internode_busbw_gbps", "gpuaccept_bf16_tflops",
                     "gpuaccept_p2p_bw_gbps"}
    labels = {n: dict(ls) for n, ls in one}
    assert all(set(ls) == set(LABELS) for ls in labels.values())  # one fixed label set, documented
    assert labels["gpuaccept_seq_read_gbps"]["target"] == "/tmp/nc stor/n1"
    assert labels["gpuaccept_bf16_tflops"]["shape"] == "8192x8192x8192"
    assert labels["gpuaccept_p2p_bw_gbps"]["pair"] == "0-1"
    assert labels["gpuaccept_internode_busbw_gbps"]["bytes"] == str(1 << 30)


# -- merge ---------------------------------------------------------------------------------------
def test_merge_folders(tmp_path, capsys):
    for host, outcome in (("n1", "passed"), ("n2", "failed")):
        rep = Reporter(str(tmp_path / host), f"run-{host}", {"hosts": [host], "inventory": f"{host}.ini"})
        rep.add(CaseRecord(f"suites/test_memory.py::test_hbm[{host}]", f"test_hbm[{host}]", host, "memory", outcome,
                           "" if outcome == "passed" else f"{host} GPU 0: hbm 4100 < 4300",
                           figures=[fig(host, "hbm", 4100.0 if outcome == "failed" else 4600.0, gpu=0,
                                        serial=f"S{host}", lim=4300)]))
        rep.add(CaseRecord(f"suites/test_health.py::test_ecc[{host}]", f"test_ecc[{host}]", host, "health", "passed"))
        rep.close("x")
    out = tmp_path / "merged"
    assert merge_main([str(tmp_path / "n1"), str(tmp_path / "n2"), "--into", str(out),
                       "--history", str(tmp_path / "h.sqlite")]) == 0
    assert {c["classname"] for c in junit(out / "junit-memory.xml")} == {"memory.n1", "memory.n2"}
    assert len(junit(out / "junit-health.xml")) == 2
    doc = json.loads((out / "results.json").read_text())
    assert len(doc["tests"]) == 4 and doc["hosts"] == ["n1", "n2"]
    assert (out / "failed-hosts.txt").read_text() == "n2\n"
    assert "- **FAIL** `n2`" in (out / "summary.md").read_text()
    assert "n2" in (out / "report.html").read_text()
    rows = sqlite3.connect(tmp_path / "h.sqlite").execute("SELECT host, serial, value FROM figures ORDER BY host").fetchall()
    assert rows == [("n1", "Sn1", 4600.0), ("n2", "Sn2", 4100.0)]
    # merging again into the same folder is refused, with one line and exit 4
    assert merge_main([str(tmp_path / "n1"), "--into", str(out)]) == 4
    assert "already holds a run" in capsys.readouterr().err


# -- end to end: replayed H200 captures ----------------------------------------------------------
def _slow_write(pct):
    def change(doc):
        doc["gpus"][1]["write_gbps"] = round(doc["gpus"][1]["write_gbps"] * (1 - pct / 100), 1)
    return change


def render_in_browser(html: Path, shot: Path) -> str:
    """The DOM after Chromium rendered ``html`` from disk (no network), and a screenshot beside it."""
    base = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={shot.parent / 'chromium-profile'}", "--window-size=1400,2200"]
    res = subprocess.run(base + [f"--screenshot={shot}", html.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10000, res.stderr[-2000:]
    dom = subprocess.run(base + ["--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


def _replay_slower_hbm_write(tmp_path, inv, pct: float) -> None:
    """Point ``inv``'s replayed host at a copy of the captures whose GPU 1 HBM write is ``pct`` % slower."""
    slow = alter(tmp_path, "hbm_bandwidth", _slow_write(pct))
    first = re.search(r"gpuaccept_replay=(\S+)", inv.read_text()).group(1)
    inv.write_text(inv.read_text().replace(first, str(replay_folder(tmp_path, slow))))


def test_three_replayed_runs_history_standout_html_prometheus(tmp_path):
    """Healthy, then GPU 1's HBM write 7 % slower (within its limit): a stand-out against the previous run
    in summary.md, history rows per serial, report.html rendered by Chromium, the Prometheus file."""
    db = tmp_path / "history.sqlite"
    prom = tmp_path / "node_exporter" / "gpuaccept.prom"
    prom.parent.mkdir()
    inv = replay_project(tmp_path, DATA)
    common = ["--inventory", str(inv), "-k", GPU_LAYERS, "--history", str(db), "--standout-pct", "5",
              "--prometheus-textfile", str(prom)]
    r1 = run_pytest(tmp_path, *common, "--reports", str(tmp_path / "r1"))
    assert r1.returncode == 0, r1.stdout[-3000:]
    _replay_slower_hbm_write(tmp_path, inv, 7)
    r2 = run_pytest(tmp_path, *common, "--reports", str(tmp_path / "r2"))
    assert r2.returncode == 0, r2.stdout[-3000:]
    md = (tmp_path / "r2" / "summary.md").read_text()
    assert md.splitlines()[4].startswith("**PASS** 1 host,") and "- **PASS** `h200-a`" in md
    assert "## Stand-outs" in md
    lines = [ln for ln in md.splitlines() if ln.startswith("| h200-a | hbm_write_bw_gbps[method=zero] | 1 |")]
    day = time.strftime("%Y-%m-%d", time.gmtime(sqlite3.connect(db).execute(
        "SELECT started FROM runs WHERE run_id=(SELECT run_id FROM runs ORDER BY started LIMIT 1)").fetchone()[0]))
    assert [ln.split(" | ")[5] for ln in lines] == [f"baseline (first pass on {day})", "previous"], lines
    assert all("| 7.0% |" in ln for ln in lines)
    assert "| h200-a | 0 | 00000000:00:06.0 |" in md  # per-GPU table: bus id first
    assert (tmp_path / "r2" / "failed-hosts.txt").read_text() == ""
    con = sqlite3.connect(db)
    rows = con.execute("SELECT run_id, gpu, value FROM figures WHERE check_ LIKE 'hbm_write_bw_gbps%' ORDER BY run_id, gpu").fetchall()
    assert [r[:2] for r in rows] == [("r1", 0), ("r1", 1), ("r2", 0), ("r2", 1)]
    assert rows[3][2] == pytest.approx(rows[1][2] * 0.93, rel=1e-3)
    serials = {r[0] for r in con.execute("SELECT serial FROM figures WHERE check_ LIKE 'hbm_write_bw_gbps%'")}
    assert len(serials) == 2 and None not in serials
    from prometheus_client.parser import text_string_to_metric_families
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert {s.labels["gpu"] for s in fams["gpuaccept_hbm_write_bw_gbps"].samples} == {"0", "1"}
    # run 3: the same slow GPU again: the previous run is now the slow one, no stand-out against it
    r3 = run_pytest(tmp_path, *common, "--reports", str(tmp_path / "r3"))
    assert r3.returncode == 0
    md3 = (tmp_path / "r3" / "summary.md").read_text()
    assert "| previous |" not in md3
    assert f"| baseline (first pass on {day}) | " in md3  # still 7 % below where the GPU started
    html = tmp_path / "r3" / "report.html"
    text = html.read_text()
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', text)  # nothing fetched at view time
    dom = render_in_browser(html, tmp_path / "report-replay.png")
    assert 'class="host-row" data-host="h200-a" data-verdict="PASS"' in dom
    assert dom.count('<td class="cell pass"') >= 10 and 'class="cell fail"' not in dom
    busbw = dom[dom.index('id="busbw"'):]
    assert busbw.count('class="dot') >= 8  # one point per message size of the all-reduce table
    assert "floor" in busbw
    assert dom.count('class="spark"') >= 4  # history sparklines of the two serials
    spark = dom[dom.index('class="spark"'):]
    assert spark.index("<polyline") < spark.index("</svg>") and spark.count("<circle", 0, spark.index("</svg>")) == 3
    # reusing a report folder that holds a run is refused before any node is touched
    again = run_pytest(tmp_path, *common, "--reports", str(tmp_path / "r3"))
    assert again.returncode == 4 and "already holds a run" in again.stderr


def test_sick_replay_fails_cells_in_browser(tmp_path):
    """A GPU under its HBM floor: FAIL line first in summary.md, failed-hosts.txt, red cell in the DOM."""
    sick = tmp_path / "sick"
    shutil.copytree(DATA, sick)
    for f in sick.glob("hbm_bandwidth-*.json"):
        saved = json.loads(f.read_text())
        saved["doc"]["gpus"][1]["read_gbps"] = 3800.0
        f.write_text(json.dumps(saved))
    inv = replay_project(tmp_path, sick)
    res = run_pytest(tmp_path, "--inventory", str(inv), "-k", "hbm or gpu_inventory", "--reports",
                     str(tmp_path / "rep"), "--history", str(tmp_path / "h.sqlite"))
    assert res.returncode == 1, res.stdout[-3000:]
    md = (tmp_path / "rep" / "summary.md").read_text().splitlines()
    assert md[6].startswith("- **FAIL** `h200-a`: memory/hbm_read_bw_gbps GPU 1: 3800 GB/s vs >= 4300"), md[:8]
    assert (tmp_path / "rep" / "failed-hosts.txt").read_text() == "h200-a\n"
    dom = render_in_browser(tmp_path / "rep" / "report.html", tmp_path / "report-sick.png")
    assert 'data-verdict="FAIL"' in dom and 'class="cell fail" data-check="hbm_read_bw_gbps"' in dom


# -- end to end: sshd nodes ----------------------------------------------------------------------
FAIL_SUITE = CPU_SUITE + '''

def test_node2_breaks(node, verdicts):
    verdicts.record("marker", 1.0 if node.name == "node2" else 5.0, "GB/s", limit=None)
    assert node.name != "node2", "node2: broken on purpose"
'''


def test_sshd_failed_hosts_rerun_list_hosts_and_no_folder(tmp_path, sshd_nodes, known_hosts):
    inv = make_project(tmp_path, sshd_nodes, known_hosts, extra_suite=FAIL_SUITE)
    base = ["--inventory", str(inv), "--known-hosts", known_hosts, "--history", str(tmp_path / "h.sqlite")]
    # --list-hosts: prints, exits 0, writes nothing, touches no node
    lh = run_pytest(tmp_path, *base, "--list-hosts")
    assert lh.returncode == 0, lh.stderr
    assert "hosts (3):" in lh.stdout and "node2  ansible_host=127.0.0.3:" in lh.stdout
    assert not (tmp_path / "reports").exists() and not (tmp_path / "h.sqlite").exists()
    # --collect-only and a selection that deselects everything: no folder, reports/latest not moved
    assert run_pytest(tmp_path, *base, "--collect-only", "-q").returncode == 0
    assert run_pytest(tmp_path, *base, "-k", "no_such_test").returncode == 5
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())
    res = run_pytest(tmp_path, *base, "-k", "whoami or node2_breaks", "--progress", "plain")
    assert res.returncode == 1, res.stdout[-3000:]
    # one line per host when its last test ends, nothing per test (gpuaccept.plugin.progress)
    host_lines = [ln for ln in res.stderr.splitlines() if ln.startswith("[gpuaccept] node")]
    # test_whoami records facts only (no figure judged against a limit): its hosts are not PASS by it
    assert sorted(ln.split(" (")[0] for ln in host_lines) == ["[gpuaccept] node1 SKIP", "[gpuaccept] node2 FAIL",
                                                               "[gpuaccept] node3 SKIP"], res.stderr
    assert any(ln.startswith("[gpuaccept] node2 FAIL (2 tests, ") and "test_node2_breaks: " in ln for ln in host_lines)
    assert "started" not in res.stderr
    latest = tmp_path / "reports" / "latest"
    assert (latest / "failed-hosts.txt").read_text() == "node2\n"
    md = (latest / "summary.md").read_text().splitlines()
    assert md[6].startswith("- **FAIL** `node2`: test_node2_breaks:")
    assert md[7].startswith("- **SKIP** `node1`: 3 figures recorded, none judged against a limit"), md[7]
    first = os.path.realpath(latest)
    rerun = run_pytest(tmp_path, *base, "-k", "whoami or node2_breaks", f"--limit=@{latest}/failed-hosts.txt")
    assert rerun.returncode == 1
    second = tmp_path / "reports" / "latest"
    assert os.path.realpath(second) != first
    assert {c["classname"] for c in junit(second / "junit-nccl.xml")} == {"nccl.node2"}
    dom = render_in_browser(second / "report.html", tmp_path / "report-sshd.png")
    assert dom.count('class="host-row"') == 1 and 'data-host="node2" data-verdict="FAIL"' in dom
    # sqlite rows of both runs, the host verdicts
    con = sqlite3.connect(tmp_path / "h.sqlite")
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 2
    assert con.execute("SELECT verdict FROM host_verdicts WHERE host='node2'").fetchall() == [("FAIL",), ("FAIL",)]
    bad = run_pytest(tmp_path, *base, "--limit=@" + str(tmp_path / "missing.txt"))
    assert bad.returncode == 4 and "missing.txt: no such host list file" in bad.stderr
    spaced = run_pytest(tmp_path, *base, "--limit", f"@{latest}/failed-hosts.txt")
    assert spaced.returncode == 4 and "write --limit=@FILE" in spaced.stderr


def test_progress_drops_a_finished_probe():
    """A probe that has ended shows no more as running: its host shows its test again, or nothing for a probe
    fetched ahead whose test has not started (it showed as running until that test ended, while another host
    was stuck)."""
    import io

    from gpuaccept.plugin.progress import Progress
    p = Progress(io.StringIO(), tty=True, timeout_s=300)
    p.expect({"gpu-07": 1, "gpu-08": 1})
    p.begin("gpu-07", "test_hbm_bandwidth")
    p.begin("gpu-07", "probe hbm_bandwidth", 120)
    p.begin("gpu-08", "probe hbm_bandwidth", 120)  # fetched ahead
    p.done("gpu-07", "probe hbm_bandwidth")
    p.done("gpu-08", "probe hbm_bandwidth")
    assert p.line() == "hosts 0/2 done · 1 running (slowest: gpu-07 test_hbm_bandwidth 0 s)", p.line()
    p.done("gpu-07", "probe other")  # not what runs there: nothing changes
    p.end("gpu-07", "passed")
    assert p.line() == "hosts 1/2 done"


def test_a_host_line_before_the_fleet_wide_tests_says_so_far():
    """A host whose own tests passed while a fleet-wide test is still to come reads "PASS so far (...; 1 fleet-wide
    test to come)": a cron log had read "f33 PASS" for a host the fleet-wide driver check then failed."""
    import io

    from gpuaccept.plugin.progress import Progress
    buf = io.StringIO()
    p = Progress(buf, tty=False, timeout_s=300)
    p.expect({"a": 1, "b": 1, "fleet": 1})
    p.end("a", "passed")
    p.end("fleet", "passed")
    p.end("b", "passed")
    a, b = buf.getvalue().splitlines()
    assert a.startswith("[gpuaccept] a PASS so far (1 test, ") and a.endswith(" s; 1 fleet-wide test to come)"), a
    assert b.startswith("[gpuaccept] b PASS (1 test, ") and "so far" not in b and "to come" not in b, b
    # without -n the fleet-wide test may end before a host's last test: the host it blames then reads FAIL
    buf = io.StringIO()
    p = Progress(buf, tty=False, timeout_s=300)
    p.expect({"a": 2, "b": 2, "fleet": 1})
    p.end("a", "passed")
    p.end("b", "passed")
    p.end("fleet", "failed", "test_fleet_consistency: b: driver 570.86.15, while 1 of 2 hosts run 580", filed=["b"])
    p.end("a", "passed")
    p.end("b", "passed")
    fleet, a, b = buf.getvalue().splitlines()
    assert fleet.startswith("[gpuaccept] fleet-wide FAIL: test_fleet_consistency: b: driver 570.86.15"), fleet
    assert a.startswith("[gpuaccept] a PASS (2 tests, "), a
    assert b.startswith("[gpuaccept] b FAIL (2 tests, ") and b.endswith("): test_fleet_consistency: b: driver "
                                                                        "570.86.15, while 1 of 2 hosts run 580"), b


def test_progress_plain_lines_and_tty_line():
    """Before: a line per test start and end, glued to pytest's dots (687 lines for 7 hosts). Now, without a
    terminal, one line per host when its last test ends; on a terminal, one status line fitted to its width."""
    import io

    from gpuaccept.plugin.progress import Progress
    buf = io.StringIO()
    p = Progress(buf, tty=False, timeout_s=300)
    p.expect({"gpu-07": 2, "gpu-08": 1, "gpu-09": 1, "fleet": 1})
    p.begin("gpu-07", "probe nccl_allreduce", 180)
    p.begin("gpu-08", "test_hbm_bandwidth")
    p.end("gpu-07", "passed")
    assert buf.getvalue() == ""  # gpu-07 has a test left
    p.end("gpu-08", "failed", "test_hbm_bandwidth: gpu-08 GPU 0: hbm_read_bw_gbps 3812 GB/s < min 4300 GB/s")
    p.begin("gpu-07", "test_ecc")
    p.end("gpu-07", "error", "test_ecc: gpu-07: unreachable")
    p.end("fleet", "failed", "test_fleet_consistency: gpu-09: driver 570.86.15, the others 580.159.04")
    lines = buf.getvalue().splitlines()
    assert [ln.split(" (")[0] for ln in lines] == ["[gpuaccept] gpu-08 FAIL", "[gpuaccept] gpu-07 ERROR",
                                                   "[gpuaccept] fleet-wide FAIL: test_fleet_consistency: gpu-09: "
                                                   "driver 570.86.15, the others 580.159.04"]
    lines = lines[:2]
    assert lines[0].endswith("): test_hbm_bandwidth: gpu-08 GPU 0: hbm_read_bw_gbps 3812 GB/s < min 4300 GB/s")
    assert lines[1].startswith("[gpuaccept] gpu-07 ERROR (2 tests, ")
    p.begin("gpu-09", "test_tensor_tflops")
    assert p.line() == "hosts 2/3 done · 1 FAIL · 1 ERROR · 1 running (slowest: gpu-09 test_tensor_tflops 0 s)"
    assert len(p.line(width=40)) <= 40 and p.line(width=40).startswith("hosts 2/3 done · 1 FAIL · 1 ERROR")
    assert p.line(width=60) == "hosts 2/3 done · 1 FAIL · 1 ERROR · 1 running"  # the slowest host's part goes first
    tty = io.StringIO()
    t = Progress(tty, tty=True, timeout_s=300)
    t.begin("gpu-07", "probe hbm_bandwidth")
    assert tty.getvalue() == ""  # in place on a terminal: no line per event, the status line is rewritten


def test_progress_says_a_fleet_wide_test_on_finished_hosts_as_such():
    """Hosts whose own tests are done while a multi-node collective runs on them: the line reads "4/4 done ·
    fleet-wide test running on 4 hosts", never "4/4 done · 5 running"."""
    import io

    from gpuaccept.plugin.progress import Progress
    p = Progress(io.StringIO(), tty=True, timeout_s=300)
    hosts = [f"gpu-0{i}" for i in range(4)]
    p.expect({**{h: 1 for h in hosts}, "fleet": 1})
    for h in hosts:
        p.begin(h, "test_gpu_inventory")
        p.end(h, "passed")
    p.begin("fleet", "test_allreduce_multinode")
    for h in hosts:
        p.begin(h, "probe nccl_allreduce", 300)
    assert p.line().startswith("hosts 4/4 done · fleet-wide test running on 4 hosts (slowest: "), p.line()
    assert " running · " not in p.line() and "5 running" not in p.line()


def test_a_run_of_no_host_says_so_in_its_summary():
    """An empty shard's summary.md: its run line reads "no host, 0 GPU figures judged", not " hosts, ..."."""
    from gpuaccept.reporting.summary import summary_markdown
    md = summary_markdown("r", {"hosts": []}, [])
    assert "no host" in md and "\n hosts" not in md and not any(ln.startswith(" hosts") for ln in md.splitlines())


def test_same_reason_once_keeps_other_reasons_in_order():
    from gpuaccept.reporting.verdicts import same_reason_once
    assert same_reason_once(["test_a: h: unreachable", "compute/bf16_tflops gpu0: 500 TFLOP/s vs min 600",
                             "test_b: h: unreachable", "test_c: other"]) == [
        "test_a and 1 more test: h: unreachable", "compute/bf16_tflops gpu0: 500 TFLOP/s vs min 600", "test_c: other"]


def test_non_ascii_host_and_unreadable_serial_keep_one_host_and_a_history(tmp_path):
    """a host named "gpu-é1" was two hosts in the reports (pytest's id
    "gpu-\\xe91" for its tests, the inventory name for its figures) and failed-hosts.txt named one --limit
    refused; a GPU whose NVML serial reads "Not Supported" stopped the history recording anything (the NvmlError
    bound as the serial) and would have keyed every such GPU to one subject. Replayed 2xH200 captures, one GPU's
    bf16 made slow (ALTERED: 450 TFLOP/s) and both serials unreadable (ALTERED: "Not Supported")."""
    def change(doc):
        for g in doc.get("gpus") or []:
            g["serial"] = {"nvml_error": "Not Supported"}
    def slow_gpu1(doc):
        doc["gpus"][1]["dtypes"]["bf16"]["tflops"] = 450.0
    slow = alter(tmp_path, "matmul_tflops", slow_gpu1, src=alter(tmp_path, "gpu_inventory", change))
    from project_helpers import replay_folder
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"gpu-é1 ansible_connection=local gpuaccept_replay={replay_folder(tmp_path, slow)} "
                   "gpu_sku=h200-sxm-141gb gpus_per_node=2\n")
    rep, db = tmp_path / "rep", tmp_path / "h.sqlite"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "--history", str(db), "-m", "compute")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    doc = json.loads((rep / "results.json").read_text())
    assert {t["host"] for t in doc["tests"]} == {"gpu-é1"}, {t["host"] for t in doc["tests"]}
    assert {f["host"] for f in run_figures(doc)} == {"gpu-é1"}
    assert all(f.get("serial") is None for f in run_figures(doc) if f.get("gpu") is not None)
    assert (rep / "failed-hosts.txt").read_text(encoding="utf-8").split() == ["gpu-é1"]
    rerun = run_pytest(tmp_path, "--inventory", str(inv), f"--limit=@{rep / 'failed-hosts.txt'}", "--list-hosts")
    assert rerun.returncode == 0 and "gpu-é1" in rerun.stdout, rerun.stdout[-1000:] + rerun.stderr[-1000:]
    import sqlite3
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    subjects = {r[0] for r in con.execute("SELECT DISTINCT subject FROM figures WHERE gpu IS NOT NULL")}
    assert subjects == {"host:gpu-é1:gpu0", "host:gpu-é1:gpu1"}, subjects


def test_run_verdict_is_the_verdict_order_over_hosts_with_the_fleet_only_when_it_did_not_pass():
    """One run verdict for the console, the history's run row and a merge: FAIL > ERROR > PASS > SKIP; a fleet
    pseudo-host that passed does not make a run of skipped hosts PASS, one that failed makes it FAIL."""
    from gpuaccept.reporting.verdicts import run_verdict
    assert run_verdict({"a": "ERROR", "b": "FAIL"}) == "FAIL"  # a failure outranks an error, as per host
    assert run_verdict({"a": {"verdict": "PASS"}, "b": {"verdict": "SKIP"}}) == "PASS"
    assert run_verdict({"a": "SKIP", "fleet": "PASS"}) == "SKIP"
    assert run_verdict({"a": "PASS", "fleet": "ERROR"}) == "ERROR"
    assert run_verdict({}) == "SKIP"


def test_a_sparkline_is_a_line_through_its_values_between_their_least_and_most():
    from gpuaccept.reporting.html import SPARK_H, SPARK_PAD, sparkline
    svg = sparkline([4300.0, None, 4000.0, float("nan"), 4150.0])
    pts = [tuple(map(float, p.split(","))) for p in re.search(r'points="([^"]+)"', svg).group(1).split()]
    assert len(pts) == 3 and svg.count("<circle") == 3 and "<title>4300, 4000, 4150</title>" in svg
    assert pts[0][1] == SPARK_PAD and pts[1][1] == SPARK_H - SPARK_PAD  # the most on top, the least at the bottom
    assert pts[0][0] < pts[1][0] < pts[2][0]
    assert sparkline([]) == "" and sparkline(["x", True]) == ""
    assert "<circle" in sparkline([7.0])  # one value: a dot in the middle


def test_a_hosts_reason_on_its_progress_line_is_cut_between_words():
    """A long first reason on a host's line ends at a space with "...", never mid-word; a short one is whole."""
    from gpuaccept.plugin.progress import REASON_CHARS, clip
    long = "host key changed: " + " ".join(f"word{i}" for i in range(200))
    got = clip(long, REASON_CHARS)
    assert len(got) <= REASON_CHARS and got.endswith(" ...") and got[:-4] == long[:len(got) - 4]
    assert long[len(got) - 4] == " "  # cut where a word ends
    assert clip("short reason", REASON_CHARS) == "short reason"
    assert clip("x" * 400, 20) == "x" * 16 + " ..."
