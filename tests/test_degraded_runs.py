"""The nightly fleet-health operator's interrupted and degraded runs, found in the fifth new-user trial:
the operator's terminal closing under the run (SIGHUP), and the faults below it. Real sshd nodes on
127.0.5.x, real probes (gloo ranks), real report files and SQLite.
"""
from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from project_helpers import junit, make_project
from process_helpers import procs_with
from sshd import run_leftovers, start_nodes_with_tmp, start_sshd, write_known_hosts

# a gloo all-reduce (a probe and two rank processes on the node, under the node-side watchdog) that runs for hours
LONG_SUITE = """
import pytest

pytestmark = pytest.mark.nccl

LONG = {"backend": "gloo", "world_size": 2, "min_bytes": 4096, "max_bytes": 4096, "iters": 10 ** 9, "reps": 1,
        "warmup": 1}


def test_0_quick(node, verdicts):
    verdicts.record("echo", node.run("echo measured").stdout.decode().strip())


def test_1_long(node, verdicts):
    doc = node.probe("nccl_allreduce", LONG)
    verdicts.record("wrong_total", doc["wrong_total"], "elements")


def test_2_after(node, verdicts):
    verdicts.record("ran", node.run("echo ran").stdout.decode().strip())
"""


def nodes_with_tmp(base: Path, addresses: tuple[str, ...]):
    """:func:`sshd.start_nodes_with_tmp` nodes d1, d2...: each session's TMPDIR is ``node.tmp``."""
    return start_nodes_with_tmp(base, addresses, "d")


def left_on(nodes) -> list[str]:
    """Command lines of the run's processes still alive on the nodes, and its probe folders left there."""
    return [c for n in nodes for c in procs_with(str(n.tmp))] + [str(p) for n in nodes for p in run_leftovers(n.tmp)]


def ranks_running(nodes) -> bool:
    return all(len([c for c in procs_with(str(n.tmp)) if "--worker" in c]) >= 2 for n in nodes)


def spawn_on_terminal(args: list[str], cwd: Path) -> tuple[int, int]:
    """Start ``args`` in ``cwd`` as the session leader of a new pseudo-terminal; returns (pid, terminal fd)."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.chdir(cwd)
            os.execv(args[0], args)
        finally:
            os._exit(127)
    return pid, fd


def run_on_a_terminal(args: list[str], cwd: Path, until, within: float = 120) -> tuple[int, str]:
    """Run ``args`` as the session leader of a new pseudo-terminal (as in an operator's SSH session) until
    ``until()`` is true, then close the terminal (the kernel sends SIGHUP, and the terminal's writes fail
    with EIO from then on). Returns (the exit code, -N for a signal N; what the terminal showed)."""
    pid, fd = spawn_on_terminal(args, cwd)
    shown = b""
    end = time.time() + within
    try:
        while time.time() < end and not until():
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    shown += os.read(fd, 65536)
                except OSError:
                    break
        assert until(), shown.decode(errors="replace")[-3000:]
    finally:
        os.close(fd)  # the operator's session goes: hang-up
    end = time.time() + 60
    while time.time() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), shown.decode(errors="replace")
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("the run did not end within 60 s of the hang-up")


@pytest.mark.parametrize("xdist,addresses", [(False, ("127.0.5.1", "127.0.5.2")), (True, ("127.0.5.3", "127.0.5.4"))],
                         ids=["one-process", "-n2"])
def test_terminal_hang_up_is_an_interruption_with_complete_reports(tmp_path, tmp_path_factory, xdist, addresses):
    """The operator's SSH session closes while a probe runs (SIGHUP; then every write to the terminal fails
    with EIO). Before: pytest died of the signal (no results.json, summary.md, JUnit or history run) or, with
    SIGHUP caught, crashed on the dead terminal and reported the running test "not finished: no result
    (worker crashed?)". Now it is an interruption like SIGTERM: exit 2, the running test "interrupted
    (SIGHUP) while running on <host>", the rest "not run", what finished kept, the nodes clean."""
    base = tmp_path_factory.mktemp("hup")
    nodes = nodes_with_tmp(base, addresses)
    try:
        kh = write_known_hosts(base / "known_hosts", nodes)
        inv = make_project(tmp_path, nodes, kh, LONG_SUITE, "test_nccl_long.py")
        rep = tmp_path / "rep"
        hist = tmp_path / "history.sqlite"
        args = [sys.executable, "-m", "pytest", "--inventory", str(inv), "--known-hosts", kh, "--reports", str(rep),
                "--history", str(hist), "-p", "no:randomly", "--probe-timeout", "600", "-k", "quick or long or after"]
        args += ["-n", "2"] if xdist else []
        code, shown = run_on_a_terminal(args, tmp_path, lambda: ranks_running(nodes if xdist else nodes[:1]))
        assert code == 2, shown[-3000:]
        doc = json.loads((rep / "results.json").read_text())
        tests = {(t["host"], t["name"].split("[")[0]): t for t in doc["tests"]}
        assert len(tests) == 6 and len(doc["tests"]) == 6, sorted(tests)  # every test once
        cases = {(c["classname"].split(".")[1], c["name"].split("[")[0]): c for c in junit(rep / "junit-nccl.xml")}
        assert set(cases) == set(tests)
        summary = (rep / "summary.md").read_text()
        running = nodes if xdist else nodes[:1]
        for n in nodes:
            assert tests[(n.name, "test_0_quick")]["outcome"] == "passed"  # what finished is kept
            assert cases[(n.name, "test_0_quick")]["outcome"] == "passed"
            long = tests[(n.name, "test_1_long")]
            want = f"interrupted (SIGHUP) while running on {n.name}" if n in running else "not run: run interrupted"
            assert long["outcome"] == "error" and long["message"].startswith(want), long
            assert cases[(n.name, "test_1_long")]["outcome"] == "error"
            assert tests[(n.name, "test_2_after")]["message"] == "not run: run interrupted"
        assert f"interrupted (SIGHUP) while running on {nodes[0].name}" in summary
        assert "worker crashed" not in summary
        import sqlite3
        with sqlite3.connect(hist) as db:  # the run row is written at the end: the run did end
            assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
        end = time.time() + 60
        while left_on(nodes) and time.time() < end:
            time.sleep(0.2)
        assert left_on(nodes) == []
    finally:
        for n in nodes:
            n.stop()


@pytest.mark.parametrize("how,address", [("kill-HUP-live-terminal", "127.0.5.5"), ("pipe-reader-gone", "127.0.5.6")])
def test_hang_up_keeps_a_live_output_and_drops_a_dead_pipe(tmp_path, tmp_path_factory, how, address):
    """``kill -HUP`` while the terminal is still there: the run is interrupted and the operator still reads its
    end on the terminal (nothing pointed at /dev/null). ``pytest ... | tee log`` whose tee went with the session:
    writes to the pipe would fail with EPIPE; they go to /dev/null and the reports are complete."""
    base = tmp_path_factory.mktemp("hup2")
    nodes = nodes_with_tmp(base, (address,))
    try:
        kh = write_known_hosts(base / "known_hosts", nodes)
        inv = make_project(tmp_path, nodes, kh, LONG_SUITE, "test_nccl_long.py")
        rep = tmp_path / "rep"
        args = [sys.executable, "-m", "pytest", "--inventory", str(inv), "--known-hosts", kh, "--reports", str(rep),
                "--history", "none", "-p", "no:randomly", "--probe-timeout", "600", "-k", "quick or long or after"]
        if how == "pipe-reader-gone":
            proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            end = time.time() + 120
            while time.time() < end and not ranks_running(nodes):
                time.sleep(0.2)
            assert ranks_running(nodes)
            proc.stdout.close()  # tee is gone
            proc.send_signal(signal.SIGHUP)
            assert proc.wait(60) == 2
        else:
            pid, fd = spawn_on_terminal(args, tmp_path)
            shown, sent = b"", False
            end = time.time() + 120
            while time.time() < end:
                if not sent and ranks_running(nodes):
                    os.kill(pid, signal.SIGHUP)
                    sent = True
                if select.select([fd], [], [], 0.2)[0]:
                    try:
                        chunk = os.read(fd, 65536)
                    except OSError:  # EIO: the child closed its side
                        break
                    if not chunk:
                        break
                    shown += chunk
            os.close(fd)
            assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 2
            assert sent and b"Interrupted: interrupted (SIGHUP)" in shown, shown.decode(errors="replace")[-2000:]
        t = {x["name"].split("[")[0]: x for x in json.loads((rep / "results.json").read_text())["tests"]}
        assert t["test_0_quick"]["outcome"] == "passed"
        assert t["test_1_long"]["message"].startswith(f"interrupted (SIGHUP) while running on {nodes[0].name}")
        assert t["test_2_after"]["message"] == "not run: run interrupted"
    finally:
        for n in nodes:
            n.stop()


def test_hang_up_ignored_by_nohup_stays_ignored(tmp_path):
    """``nohup pytest ...`` starts the run with SIGHUP ignored: gpuaccept must not take it over (the run goes on
    after the terminal closes, as the operator asked)."""
    code = ("import signal, subprocess, sys\n"
            "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
            "import pytest\n"
            "from gpuaccept.runner.interrupt import InterruptPlugin\n"
            "class C:\n"
            "    pluginmanager = None\n"
            "p = InterruptPlugin(C())\n"
            "p.install()\n"
            "print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN, signal.getsignal(signal.SIGTERM) == p._on_signal)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert out.stdout.split() == ["True", "True"], out.stderr[-2000:]


# -- the report folder under faults: deleted during the run, its disk full for a while or for good -----------
FOLDER_SUITE = '''
import os, shutil
import pytest

pytestmark = pytest.mark.nccl


def test_1_before(node, verdicts):
    leave = os.environ.get("E2E_FILL_LEAVE")
    if leave is not None and node.name == "local1":  # another job fills the report disk once the run is going
        with open(os.environ["E2E_FILL"], "wb", buffering=0) as f:
            try:
                while True:
                    f.write(bytes(65536))
            except OSError:
                pass
            f.truncate(max(0, f.tell() - int(leave)))
    verdicts.record("before", node.run("echo measured before").stdout.decode().strip())


def test_2_fault(node, verdicts):
    """What befalls the report folder between two tests (a stand-in for a /tmp cleaner, or for another job
    filling and then freeing the disk)."""
    what = os.environ["E2E_FAULT"] if node.name == "local1" else "none"  # once, on the first host's turn
    if what == "delete":
        shutil.rmtree(os.environ["E2E_REPORTS"])
    elif what == "free":
        os.unlink(os.environ["E2E_FILL"])
    verdicts.record("fault", what)  # recorded on each host: the record itself must reach the reports


def test_3_after(node, verdicts):
    verdicts.record("after", node.run("echo measured after").stdout.decode().strip())
'''


def _folder_project(tmp_path: Path) -> Path:
    inv = make_project(tmp_path, [], None, FOLDER_SUITE, "test_nccl_folder.py")
    inv.write_text("local1 ansible_connection=local\nlocal2 ansible_connection=local\n")
    return inv


def _check_complete(rep: Path) -> None:
    """Every test of the run once, alike in results.jsonl (whole lines only), results.json, JUnit and
    summary.md; no temporary file left beside them."""
    want = {(h, t) for h in ("local1", "local2") for t in ("test_1_before", "test_2_fault", "test_3_after")}
    lines = [json.loads(ln) for ln in (rep / "results.jsonl").read_text().splitlines()]
    assert sorted((r["host"], r["name"].split("[")[0]) for r in lines) == sorted(want)
    assert all(r["outcome"] == "passed" for r in lines)
    doc = json.loads((rep / "results.json").read_text())
    assert sorted((t["host"], t["name"].split("[")[0]) for t in doc["tests"]) == sorted(want) and doc["complete"]
    cases = junit(rep / "junit-nccl.xml")
    assert sorted((c["classname"].split(".")[1], c["name"].split("[")[0]) for c in cases) == sorted(want)
    # the suite records facts only (no figure judged): SKIP, not PASS (nothing measured is not PASS)
    assert "**SKIP** 2 hosts" in (rep / "summary.md").read_text()
    assert [p.name for p in rep.iterdir() if ".tmp" in p.name] == []


def _folder_run(tmp_path: Path, rep: Path, env: dict):
    """The folder-fault project run into ``rep`` with the fault ``env``; asserts exit 0 and complete reports."""
    from project_helpers import run_pytest
    inv = _folder_project(tmp_path)
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "--history", "none", "-p", "no:randomly",
                     "-k", "folder", env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    _check_complete(rep)
    return res


def test_report_folder_deleted_during_the_run_is_written_again(tmp_path):
    """The report folder is deleted between two tests. Before: the run went on, then exit 3 with "cannot write
    reports: No such file or directory" and a folder holding report.html only: every result of the night lost.
    Now the folder is made again from the records in memory (results.jsonl too), and the operator is told."""
    rep = tmp_path / "rep"
    res = _folder_run(tmp_path, rep, {"E2E_FAULT": "delete", "E2E_REPORTS": str(rep)})
    assert f"gpuaccept reports: during the run: {rep}: results.jsonl was deleted during the run; every record " \
           "was written again since: the reports are complete" in res.stdout, res.stdout[-2000:]


@pytest.fixture
def small_disk(tmp_path):
    """An 8 MiB tmpfs (room for the folder project's six tests: gpuaccept.reporting.folder.space_needed), and the
    path of a file the suite fills it with during the run (E2E_FILL); unmounted at the end."""
    assert os.geteuid() == 0, "mounting a small tmpfs needs root (as the sshd tests do)"
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt, mnt / "fill"
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_that_frees_up_keeps_every_record(tmp_path, small_disk):
    """The report folder's disk fills up during the first test and is freed during the second: the records that
    arrived while it was full are appended as soon as the disk takes them (results.jsonl is the file a killed
    controller leaves), and the run exits by its verdicts, with a note."""
    mnt, fill = small_disk
    rep = mnt / "rep"
    res = _folder_run(tmp_path, rep, {"E2E_FAULT": "free", "E2E_FILL": str(fill), "E2E_FILL_LEAVE": "0"})
    assert "No space left on device; every record was written again since: the reports are complete" in res.stdout


def test_full_disk_for_good_says_where_every_result_is(tmp_path, small_disk):
    """The disk fills during the first test and stays full: exit 3 with one ERROR line, one line saying what
    results.jsonl holds and which files were not written, and every host's verdict on stdout (the last copy);
    results.jsonl holds whole records only and no ``*.tmp<pid>`` file of a failed rewrite is left."""
    from project_helpers import run_pytest
    mnt, fill = small_disk
    inv = _folder_project(tmp_path)
    rep = mnt / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "--history", "none", "-p", "no:randomly",
                     "-k", "folder", env={"E2E_FAULT": "none", "E2E_FILL": str(fill), "E2E_FILL_LEAVE": "5120"})
    out = res.stdout + res.stderr
    assert res.returncode == 3, out[-3000:]
    assert "Traceback" not in out
    errs = [ln for ln in out.splitlines() if ln.startswith("ERROR: gpuaccept reports:")]
    assert len(errs) == 1 and "No space left on device" in errs[0], out[-2000:]
    text = (rep / "results.jsonl").read_text()
    assert text == "" or text.endswith("\n")
    kept = [json.loads(ln) for ln in text.splitlines()]
    assert all(r["outcome"] == "passed" for r in kept)
    where = [ln for ln in res.stdout.splitlines() if ln.startswith("gpuaccept reports: results.jsonl holds")]
    assert len(where) == 1 and f"holds {len(kept)} of 6 records" in where[0], res.stdout[-2000:]
    assert "not written: " in where[0] and "summary.md (No space left on device)" in where[0]
    hosts = [ln for ln in res.stdout.splitlines() if ln.startswith("gpuaccept: host ")]
    assert hosts == [f"gpuaccept: host {h}: SKIP: 3 figures recorded, none judged against a limit: the selected tests "
                     f"have no limit for them (limits come from a SKU threshold file: gpu_sku or an NVML-detected GPU; "
                     f"storage_limits; the inventory's own)" for h in ("local1", "local2")], hosts
    assert [p.name for p in rep.iterdir() if ".tmp" in p.name] == []


# -- a node whose clock is far off: the kernel-log window of test_xid_events -------------------------------
FIELD_XID = "NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _field_xid_line() -> str:
    """The real Xid 79 line of tests/data/field/kernel-logs.txt, without its dmesg time since boot."""
    text = (Path(__file__).resolve().parent / "data" / "field" / "kernel-logs.txt").read_text()
    line = next(ln for ln in text.splitlines() if FIELD_XID in ln)
    return line.split("] ", 1)[1]


def _stamped(epoch: float, rest: str) -> str:
    """ALTERED: the field line re-stamped as ``dmesg --time-format iso`` writes it, at ``epoch`` (node clock)."""
    t = time.gmtime(epoch)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + ",000000+00:00 " + rest


def _xids(lines, args, cut):
    from gpuaccept.runner import nodeclock
    from gpuaccept.judging.xid import classify
    from probe_helpers import load_probe
    parse_log = load_probe("xid_events").parse_log  # the probe's own parser, as the node runs it
    return classify(nodeclock.in_window(parse_log(lines, since_epoch=args["since_epoch"])["events"], cut))


@pytest.mark.parametrize("offset_h", [-2.0, -0.05], ids=["2h-behind", "3min-behind"])
def test_xid_of_the_run_on_a_node_whose_clock_is_behind_is_seen(offset_h):
    """A node whose clock is behind the controller's: its kernel log stamps the run's Xid 79 before the run's
    start as the controller gives it. Before: the probe was asked for events since the controller's start and
    read none, and the GPU that fell off the bus passed test_xid_events. Now the window is the run's start on
    the node's clock (read with one ``date``), and the Xid fails the GPU."""
    from gpuaccept.runner import nodeclock
    run_started = 1_795_989_274.0  # controller clock
    offset = offset_h * 3600
    clock = nodeclock.clock_from(run_started + 30, run_started + 30.2, run_started + 30.1 + offset, 0.0)
    during = _stamped(run_started + 60 + offset, _field_xid_line())  # 60 s into the run, on the node's clock
    before = _stamped(run_started - 120 + offset, _field_xid_line())  # two minutes before it
    old = _xids([before, during], {"since_epoch": run_started}, None)
    assert old == []  # the fault: a GPU lost during the run, and not one event read
    args, cut = nodeclock.xid_args(run_started, clock)
    new = _xids([before, during], args, cut)
    assert len(new) == 1 and new[0]["xid"] == 79 and new[0]["fails"], new


def test_xid_from_before_the_run_on_a_node_whose_clock_is_ahead_is_not_the_runs():
    """A node 2 h ahead: an Xid logged an hour before the run reads as the run's on the controller's clock
    (before: failed this night's run for an old event); the run's own Xid still fails."""
    from gpuaccept.runner import nodeclock
    run_started, offset = 1_795_989_274.0, 7200.0
    clock = nodeclock.clock_from(run_started + 5, run_started + 5.1, run_started + 5.05 + offset)
    old_event = _stamped(run_started - 3600 + offset, _field_xid_line())
    assert len(_xids([old_event], {"since_epoch": run_started}, None)) == 1  # the fault
    args, cut = nodeclock.xid_args(run_started, clock)
    assert _xids([old_event], args, cut) == []
    assert len(_xids([old_event, _stamped(run_started + 10 + offset, _field_xid_line())], args, cut)) == 1


def test_hosts_with_synced_clocks_ask_the_same_window():
    """Hosts within SHARED_SLACK_S of the controller ask xid_events with equal arguments, so the fan-out still
    runs it ahead on every host (gpuaccept.runner.prefetch fetches only what the host's own test would ask)."""
    from gpuaccept.runner import nodeclock
    since = 1_795_989_274.0
    a = nodeclock.xid_args(since, nodeclock.NodeClock(4.2, 0.01))
    b = nodeclock.xid_args(since, nodeclock.NodeClock(-3.0, 0.2))
    assert a[0] == b[0] == {"since_epoch": since - nodeclock.SHARED_SLACK_S}
    assert a[1] == pytest.approx(since + 4.19) and b[1] == pytest.approx(since - 3.2)
    assert nodeclock.xid_args(since, None) == ({"since_epoch": since}, None)  # a replayed host: as saved


@pytest.mark.parametrize("banner", [False, True], ids=["plain", "login-banner"])
def test_node_clock_read_over_real_sshd(tmp_path, tmp_path_factory, banner):
    """The clock of a real sshd node (this machine's: offset near 0, a small uncertainty), also when its login
    prints a banner on stdout first; a replayed host reads none (it runs nothing)."""
    from gpuaccept.runner import nodeclock
    from gpuaccept.config.inventory import load_inventory
    from gpuaccept.runner.host import HostRunner
    from gpuaccept.transport import get_transport
    base = tmp_path_factory.mktemp("clock")
    extra = ['ForceCommand echo "Welcome to the GPU cluster"; eval "$SSH_ORIGINAL_COMMAND"'] if banner else []
    n = start_sshd(base, address="127.0.5.30" if banner else "127.0.5.31", name="c1", extra_config=extra)
    try:
        kh = write_known_hosts(base / "known_hosts", [n])
        inv = tmp_path / "inv.ini"
        inv.write_text("[gpu]\n" + n.inventory_line() + "\nreplayed ansible_connection=local gpuaccept_replay=/nonexistent\n")
        hosts = load_inventory(str(inv)).hosts
        node = HostRunner(hosts["c1"], lambda h: get_transport(h, known_hosts=kh), probe_timeout=60)
        try:
            clock = nodeclock.read_clock(node)
        finally:
            node.close()
        assert clock is not None and abs(clock.offset_s) < clock.uncertainty_s + 0.05, clock
        assert clock.uncertainty_s < 5
        replayed = HostRunner(hosts["replayed"], lambda h: get_transport(h), probe_timeout=60)
        assert nodeclock.read_clock(replayed) is None
    finally:
        n.stop()


def test_node_time_parsed_from_date_output():
    from gpuaccept.runner import nodeclock
    assert nodeclock.parse_node_time(b"1795989274.123456789\n") == (1795989274.123456789, 0.0)
    assert nodeclock.parse_node_time(b"Welcome\n1795989274.5\n") == (1795989274.5, 0.0)
    assert nodeclock.parse_node_time(b"1795989274.%N\n") == (1795989274.0, 1.0)  # a date without %N
    assert nodeclock.parse_node_time(b"1795989274\n") == (1795989274.0, 1.0)
    assert nodeclock.parse_node_time(b"date: invalid option\n") is None


# -- SIGKILL of the controller, then a rerun into a new folder: the history and the folders -----------------
KILL_SUITE = '''
import os, time
import pytest

pytestmark = pytest.mark.nccl


def test_1_measured(node, verdicts):
    verdicts.record("answer", float(node.run("echo 42").stdout.decode().split()[-1]), "units")


def test_2_killed_here(node, verdicts):
    if os.environ.get("E2E_BUSY"):
        open(os.environ["E2E_BUSY"], "w").close()
        time.sleep(600)
    verdicts.record("after", 1.0, "units")
'''


def test_sigkilled_run_then_rerun_keeps_history_and_folders_consistent(tmp_path):
    """The controller SIGKILLed mid-run (nothing of it can clean up), then the operator reruns into a new
    folder. The history holds the killed run's finished test once and no end for it, its figures are marked
    "(unfinished)" by ``python -m gpuaccept.reporting.history`` (before: listed like a finished run's), the rerun is
    recorded whole; the killed folder's results.jsonl has whole lines only, and merging both folders keeps
    the rerun's records."""
    import sqlite3
    from project_helpers import run_pytest
    inv = make_project(tmp_path, [], None, KILL_SUITE, "test_nccl_kill.py")
    inv.write_text("k1 ansible_connection=local\n")
    hist, busy = tmp_path / "history.sqlite", tmp_path / "busy"
    killed, rerun = tmp_path / "killed", tmp_path / "rerun"
    common = ["--inventory", str(inv), "--history", str(hist), "-p", "no:randomly", "-k", "measured or killed_here"]
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *common, "--reports", str(killed)], cwd=tmp_path,
                            env={**os.environ, "E2E_BUSY": str(busy)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    end = time.time() + 60

    def flushed() -> bool:
        if not hist.exists():
            return False
        try:
            with sqlite3.connect(f"file:{hist}?mode=ro", uri=True) as db:
                return db.execute("SELECT COUNT(*) FROM tests WHERE run_id='killed'").fetchone()[0] == 1
        except sqlite3.Error:
            return False
    while time.time() < end and not (busy.exists() and flushed()):
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        time.sleep(0.2)
    assert busy.exists() and flushed()
    proc.kill()
    proc.communicate(timeout=30)
    res = run_pytest(tmp_path, *common, "--reports", str(rerun))
    assert res.returncode == 0, res.stdout[-3000:]
    with sqlite3.connect(hist) as db:
        # the suite records facts only: the run's verdict is SKIP, as its console line says (nothing measured)
        assert db.execute("SELECT run_id, verdict FROM runs").fetchall() == [("rerun", "SKIP")]
        assert sorted(db.execute("SELECT run_id, nodeid FROM tests")) == sorted(
            [("killed", "suites/test_nccl_kill.py::test_1_measured[k1]"),
             ("rerun", "suites/test_nccl_kill.py::test_1_measured[k1]"),
             ("rerun", "suites/test_nccl_kill.py::test_2_killed_here[k1]")])
    cli = subprocess.run([sys.executable, "-m", "gpuaccept.reporting.history", "--db", str(hist), "--host", "k1", "--check",
                          "answer", "--json"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    rows = json.loads(cli.stdout)
    assert [(r["run"], r["value"]) for r in rows] == [("killed (unfinished)", 42.0), ("rerun", 42.0)], rows
    lines = (killed / "results.jsonl").read_text().splitlines()
    assert [json.loads(ln)["name"] for ln in lines] == ["test_1_measured[k1]"]
    merged = tmp_path / "merged"
    m = subprocess.run([sys.executable, "-m", "gpuaccept.scaleout.merge", str(killed), str(rerun), "--into", str(merged)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert m.returncode == 0, m.stderr[-2000:]
    tests = json.loads((merged / "results.json").read_text())["tests"]
    assert sorted((t["name"], t["outcome"], t["run_id"]) for t in tests) == [
        ("test_1_measured[k1]", "passed", "rerun"), ("test_2_killed_here[k1]", "passed", "rerun")], tests
