"""Command-line options refused before any node is touched (exit 4, one line naming the option, no report
folder): bad numbers and paths, an empty value, a baseline without a history or naming no run, a history file
that is no history database; and ``--list-hosts`` output."""
from __future__ import annotations

import json
import re

import pytest

from project_helpers import make_project, run_pytest


@pytest.mark.parametrize("args,needle", [
    (("--probe-timeout", "nan"), "--probe-timeout nan: expected a number > 0"),
    (("--probe-timeout", "-5"), "--probe-timeout -5.0: expected a number > 0"),
    (("--xid-window", "-5"), "--xid-window -5.0: expected a number >= 0"),
    (("--standout-pct", "-10"), "--standout-pct -10.0: expected a number > 0 and < 100"),
    (("--standout-pct", "abc"), "--standout-pct abc: expected a number"),  # before: 18 lines, argparse's usage
    (("--forks", "x"), "--forks x: expected a whole number"),
    (("--prometheus-textfile", "/nonexistent-dir/x.prom"), "folder /nonexistent-dir does not exist"),
    (("--history", "/proc/no-such-pid/h.sqlite"), "--history /proc/no-such-pid/h.sqlite: lies in the system folder /proc"),
    (("--history", "/h.sqlite"), "--history /h.sqlite: lies in the root folder"),
    (("--history", "/nonexistent-dir/h.sqlite"), "--history /nonexistent-dir/h.sqlite: folder /nonexistent-dir does not "
                                                 "exist"),
    (("--history", "rep/h.sqlite"), "--history rep/h.sqlite: lies inside --reports"),
    (("-m", "helth"), "-m helth: no marker named 'helth': did you mean health? the layers' markers are health, "),
    (("-m", "health or nccll"), "no marker named 'nccll': did you mean nccl?"),
    (("--profile", "fast"), "--profile fast: not one of burnin, quick, standard"),
    (("--nccl-pattern", "tree"), "--nccl-pattern tree: not one of ring, pairwise, rails"),
    (("-m", "(health"), "-m '(health': not an expression pytest can read: at column 8: expected right parenthesis"),
    (("-k", "ecc and ("), "-k 'ecc and (': not an expression pytest can read: at column 10:"),
])
def test_bad_options_exit_4_before_any_node(tmp_path, args, needle):
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("h1 ansible_connection=local\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), *args, "--reports", str(tmp_path / "rep"))
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    assert needle in res.stderr and "Traceback" not in res.stderr + res.stdout
    assert "usage:" not in res.stderr  # one line, not argparse's usage before it
    assert not (tmp_path / "rep").exists()
    assert not (tmp_path / "reports").exists()  # nor the default history beside it


def test_prometheus_textfile_in_the_report_folder_the_run_makes(tmp_path):
    """``--reports DIR --prometheus-textfile DIR/gpuaccept.prom``: DIR does not exist before the run, which makes
    it; the textfile is written there with the run's verdict."""
    inv = make_project(tmp_path, [], None, extra_suite="def test_x(node):\n    node.run('true')\n", name="test_zz_x.py")
    inv.write_text("h1 ansible_connection=local\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "-k", "test_x", "--reports", str(rep),
                     "--prometheus-textfile", str(rep / "gpuaccept.prom"))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    prom = (rep / "gpuaccept.prom").read_text()
    assert 'gpuaccept_host_verdict{action="none",cause="none",host="h1",verdict="PASS"} 1.0' in prom


@pytest.mark.parametrize("option", ["--inventory=", "--limit=", "--limit= ", "--reports=", "--thresholds=",
                                    "--known-hosts=", "--sku="])
def test_an_empty_option_is_refused_not_taken_for_its_default(tmp_path, option):
    """``--inventory=$INVENTORY`` with the variable unset: before, the run fell back to inventory/localhost.ini,
    tested the controller itself and exited 0 (a green CI job that tested no node); ``--limit=`` selected every
    host (as Ansible's ``-l ''``), so a burn-in meant for a few drained hosts started on the whole fleet."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("h1 ansible_connection=local\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "-m", "health", "--reports", str(tmp_path / "rep"), option)
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    flag = option.split("=")[0]
    assert f"ERROR: {flag} is empty: an unset variable on the command line?" in res.stderr, res.stderr
    assert "Traceback" not in res.stdout + res.stderr and not (tmp_path / "rep").exists()


@pytest.mark.parametrize("baseline", ["latest-pass", "20261130T000000Z"])
def test_a_baseline_without_a_history_is_refused(tmp_path, baseline):
    """``--baseline latest-pass --history none`` ran and listed no stand-out (nothing to compare with), exit 0;
    a run id said "no history database at none"."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("h1 ansible_connection=local\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--baseline", baseline, "--history", "none", "-m", "health",
                     "--reports", str(tmp_path / "rep"))
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    assert (f"ERROR: --baseline {baseline} compares with runs of the history database, and --history none keeps "
            "none") in res.stderr, res.stderr


def test_baseline_that_names_no_run_exits_4(tmp_path):
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("h1 ansible_connection=local\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--baseline", "nosuchrun", "--reports", str(tmp_path / "r"))
    assert res.returncode == 4 and "--baseline nosuchrun: no history database" in res.stderr, res.stderr[-800:]
    ok = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "r1"),
                    "--history", str(tmp_path / "h.sqlite"))
    assert ok.returncode == 0, ok.stdout[-1500:]
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "r2"),
                     "--history", str(tmp_path / "h.sqlite"), "--baseline", "nosuchrun")
    assert res.returncode == 4 and "no such run in" in res.stderr, res.stderr[-800:]
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "r3"),
                     "--history", str(tmp_path / "h.sqlite"), "--baseline", "r1")
    assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-800:]
    assert json.loads((tmp_path / "r3" / "results.json").read_text())["interrupted"] is False


@pytest.mark.parametrize("kind", ["text file", "folder"])
def test_history_that_is_no_database_exits_4_before_any_node(tmp_path, kind):
    """a --history path that is not a history database was found only after
    the whole run (exit 3, or 1 hiding it when tests failed); the figures of that run never reached the history."""
    bad = tmp_path / "h.db"
    if kind == "folder":
        bad.mkdir()
    else:
        bad.write_text("not a database\n")
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("h1 ansible_connection=local\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--history", str(bad), "--reports", str(tmp_path / "rep"))
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    said = f"--history {bad}: is a folder, not a file" if kind == "folder" else \
        f"--history: {bad}: not a gpuaccept history database"
    assert said in res.stderr, res.stderr
    assert "Traceback" not in res.stderr + res.stdout and not (tmp_path / "rep").exists()
    if kind == "text file":
        assert bad.read_text() == "not a database\n"  # left as it was


def test_list_hosts_writes_ipv6_with_brackets(tmp_path):
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("[gpu]\n[2001:db8::12]:2200\nlocalbox ansible_connection=local\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--list-hosts")
    assert res.returncode == 0, res.stdout[-1000:] + res.stderr[-1000:]
    assert "ansible_host=[2001:db8::12]:2200" in res.stdout and re.search(r"localbox +ansible_host=-", res.stdout)
    # the columns line up whatever the names' lengths
    rows = [ln for ln in res.stdout.splitlines() if "connection=" in ln]
    assert len(rows) == 2 and len({ln.index("ansible_host=") for ln in rows}) == 1, rows
    assert len({ln.index("connection=") for ln in rows}) == 1, rows


@pytest.mark.parametrize("reader", ["full disk", "closed pipe"])
def test_list_hosts_to_a_stdout_that_cannot_take_it_exits_1_without_a_traceback(tmp_path, reader):
    """``--list-hosts > /dev/full`` says so in one line; ``--list-hosts | head -1`` (the reader leaves after a
    line of 3,000 hosts) is quiet; both exit 1 with no traceback."""
    import os
    import subprocess
    import sys
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("[gpu]\n" + "".join(f"n{i:04d} ansible_host=10.0.{i // 250}.{i % 250 + 1}\n" for i in range(3000)))
    cmd = [sys.executable, "-m", "pytest", "--inventory", str(inv), "--list-hosts"]
    if reader == "full disk":
        with open("/dev/full", "w") as full:
            proc = subprocess.run(cmd, cwd=tmp_path, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
        err = proc.stderr
        assert err.strip().splitlines() == ["gpuaccept: --list-hosts: could not write to standard output: "
                                            "No space left on device"], err
    else:
        p = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = p.stdout.readline()
        p.stdout.close()  # as `head -1` does once it has its line
        err = p.stderr.read()
        proc = subprocess.CompletedProcess(cmd, p.wait(timeout=120))
        assert "hosts (3000)" in first and err == "", err
    assert proc.returncode == 1 and "Traceback" not in err and os.path.exists(inv)


def test_runs_without_xdist_loaded(tmp_path):
    """``-p no:xdist`` (or an environment without pytest-xdist): the plugin's xdist hooks are optional, so the
    run goes as without ``-n`` instead of stopping at "unknown hook"."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("h1 ansible_connection=local\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "-p", "no:xdist", "-m", "health", "--reports", str(tmp_path / "rep"))
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "unknown hook" not in out and "Traceback" not in out, out[-2000:]
    assert (tmp_path / "rep" / "results.json").is_file()


def test_a_marker_expression_is_checked_where_it_selects():
    """A name no marker has is refused where it selects, and after ``not`` when it is near a known marker (a typo
    that would leave that layer in); ``not slow`` (near none) is let be."""
    from gpuaccept.config.selection import check_markexpr
    from gpuaccept.errors import ConfigError
    known = {"health", "nccl", "skip"}
    for ok in ("health", "health or (nccl and not multinode)", "not slow", "nccl and not (skip)"):
        check_markexpr(ok, known, ("health", "nccl"))
    for bad, word in (("helth", "helth"), ("health or nccll", "nccll"), ("(health) and slow", "slow"),
                      ("health and not helth", "helth"), ("not nccll", "nccll")):
        with pytest.raises(ConfigError, match=f"no marker named '{word}'.*the layers' markers are health, nccl"):
            check_markexpr(bad, known, ("health", "nccl"))


def test_a_run_that_selects_no_test_leaves_no_report_folder_and_no_history(tmp_path):
    """``-k`` matching nothing: pytest exits 5 and the run leaves neither its report folder nor a default history
    database it would have created (a later run's "previous run" and history are unchanged)."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("h1 ansible_connection=local\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "-k", "no_such_test_anywhere")
    assert res.returncode == 5, res.stdout[-2000:] + res.stderr[-2000:]
    assert not (tmp_path / "reports").exists(), sorted(p.name for p in (tmp_path / "reports").rglob("*"))
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "history.sqlite").write_bytes(b"")  # a history already there is left as it was
    res = run_pytest(tmp_path, "--inventory", str(inv), "-k", "no_such_test_anywhere")
    assert res.returncode == 5 and (tmp_path / "reports" / "history.sqlite").exists()


@pytest.mark.parametrize("form", ["space", "equals"])
def test_files_outside_the_checkout_in_either_form_under_xdist(tmp_path, form):
    """``pytest --inventory /elsewhere/inv.ini --thresholds /elsewhere/thr -n 2`` from the checkout: the xdist
    workers adopt the checkout's pytest.ini as the controller does and collect the same suites (before: they
    rooted themselves in /elsewhere, collected the checkout's tests/ and the package's suites beside ./suites,
    and every GPU test errored "'SubRequest' object has no attribute 'param'")."""
    import shutil
    proj, lab = tmp_path / "checkout", tmp_path / "lab"
    proj.mkdir()
    lab.mkdir()
    make_project(proj, [], None, extra_suite="", name="test_zz_empty.py")
    (proj / "tests").mkdir()
    (proj / "tests" / "test_ours.py").write_text("def test_never_collected_by_a_run_of_the_suites():\n    assert 0\n")
    (lab / "inv.ini").write_text("h1 ansible_connection=local\nh2 ansible_connection=local\n")
    shutil.copytree(proj / "thresholds", lab / "thr", symlinks=False)

    def opt(name, value):
        return [name, value] if form == "space" else [f"{name}={value}"]
    res = run_pytest(proj, *opt("--inventory", str(lab / "inv.ini")), *opt("--thresholds", str(lab / "thr")),
                     "-n", "2", "-m", "health", *opt("--reports", str(lab / "rep")))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "error" not in out.lower().split("gpuaccept: reports in")[-1], out[-3000:]
    doc = json.loads((lab / "rep" / "results.json").read_text())
    ids = {t["nodeid"] for t in doc["tests"]}
    assert ids and all(i.startswith("suites/test_health") for i in ids), sorted(ids)[:5]
    assert {t["host"] for t in doc["tests"]} == {"h1", "h2", None}


def test_list_hosts_with_a_key_file_a_run_would_refuse_lists_and_warns(tmp_path):
    """``--list-hosts`` connects to nothing: an inventory whose key file does not exist here (the README's example,
    written before the key) is listed, exit 0, the file named in a warning; a run with it is refused (exit 4)."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"[gpu]\ngpu-01 ansible_host=10.0.0.11 ansible_ssh_private_key_file={tmp_path}/no_such_key\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--list-hosts")
    assert res.returncode == 0, res.stdout[-1000:] + res.stderr[-1000:]
    assert "gpu-01" in res.stdout and "no_such_key does not exist (a run would refuse it)" in res.stderr
    res = run_pytest(tmp_path, "--inventory", str(inv), "--co")
    assert res.returncode == 4 and "no_such_key does not exist" in res.stdout + res.stderr
