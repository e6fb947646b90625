"""The node-side agent (gpuaccept/probes/_agent.py) and its controller side (gpuaccept/runner/agent.py), over the
local connection and real sshd (tests/sshd.py); no mocks. One session and one Python per host: every probe is
a forked child of the one agent, and the folder goes at the end inside that session."""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuaccept.errors import CommandTimeout, HostUnreachable, Interrupted, ProbeFolderUnwritable
from gpuaccept.probes._probe import PROCESS_NAME
from gpuaccept.runner import ship
from gpuaccept.runner.agent import Agent, encode
from gpuaccept.transport import cancel_all, get_transport, reset_interruption
from process_helpers import FakeHost, assert_gone, fill, host_for, live_pids, marker, wait_started
from sshd import start_sshd, write_known_hosts

ENV = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}


pytestmark = pytest.mark.usefixtures("isolated_home")


@pytest.fixture
def agent(transport):
    a = Agent(transport.host.name, transport, sys.executable, ENV)
    a.start()
    yield a
    a.close()


def _probe(tmp_path: Path, name: str, body: str) -> str:
    p = tmp_path / f"{name}.py"
    p.write_text(body)
    return str(p)


def sleeper(tmp_path: Path, m1: str, m2: str) -> str:
    """A stand-in probe: starts a child ``sleep m2`` in its group, then sleeps ``m1`` itself."""
    return _probe(tmp_path, "sleeper", f"import subprocess, time\nsubprocess.Popen(['sleep', '{m2}'])\n"
                                       f"time.sleep({m1})\n")


SHOWS = ("import json, os, sys\n"
         "print('log line', file=sys.stderr)\n"
         "print(json.dumps({'argv': sys.argv[1:], 'ppid': os.getppid(), 'own_group': os.getpgrp() == os.getpid(),\n"
         "                  'cmdline': open('/proc/self/cmdline', 'rb').read().split(b'\\0')[1].decode(),\n"
         "                  'stdin': sys.stdin.read(), 'env': os.environ.get('GPUACCEPT_T')}))\n")


def test_probes_run_as_children_of_one_agent(agent, tmp_path, caplog):
    """Three probes, one shipped folder, one agent: each probe is a forked child of the agent (its command line
    is the agent's ``python -c``, not a new interpreter), in its own process group, with its arguments, its
    environment and /dev/null as stdin; a real probe from the shipped folder runs too. Every probe is one
    tracked command labelled ``probe <name>``."""
    caplog.set_level(logging.DEBUG, logger="gpuaccept.run")
    assert os.path.isdir(agent.dir) and {"_agent.py", "_watchdog.py"} <= set(os.listdir(agent.dir))
    shows = _probe(tmp_path, "shows", SHOWS)
    docs = []
    for i in range(3):
        r = agent.probe("shows", [shows, json.dumps({"i": i})], 30, 5, {"GPUACCEPT_T": f"t{i}"})
        assert (r.rc, r.stderr) == (0, b"log line\n")
        docs.append(json.loads(r.stdout))
    assert [d["argv"] for d in docs] == [[json.dumps({"i": i})] for i in range(3)]
    assert {d["ppid"] for d in docs} == {agent.pid} and all(d["own_group"] for d in docs)
    assert {d["cmdline"] for d in docs} == {"-c"} and [d["env"] for d in docs] == ["t0", "t1", "t2"]
    assert {d["stdin"] for d in docs} == {""}
    real = agent.probe("storage_mounts", ["storage_mounts.py", json.dumps({"paths": [str(tmp_path)]})], 60, 5, {})
    assert real.rc == 0 and json.loads(real.stdout.decode().splitlines()[-1])["paths"][0]["path"] == str(tmp_path)
    runs = [r.getMessage() for r in caplog.records if r.name == "gpuaccept.run"]
    assert len(runs) == 4 and all(r.startswith(f"RUN {agent.name} agent {agent.dir}: ") for r in runs), runs


def test_the_folder_holds_the_agents_files_then_each_probes_as_it_first_runs(agent, tmp_path):
    """The start writes the agent's own files only; a probe's files (its helpers, found by ship.probe_files) are
    sent with its first run request and written before it runs; a file or the folder removed under the agent
    (a /tmp cleaner) is written again before the next probe that needs it (a folder made again holds the agent's
    files and that probe's); a probe named by a path (not one of gpuaccept's) gets every file."""
    def listing():
        return {f for f in os.listdir(agent.dir) if f.endswith(".py")}

    assert listing() == set(ship.agent_files())
    sent = dict(ship.texts(ship.agent_files()))
    for name, args in (("storage_mounts", {"paths": [str(tmp_path)]}), ("host_memory", {})):
        r = agent.probe(name, [f"{name}.py", json.dumps(args)], 60, 5, {})
        assert r.rc == 0, r.stderr
        sent.update(ship.texts(ship.probe_files(name)))
        assert listing() == set(sent), listing() ^ set(sent)
        for f in sent:
            with open(os.path.join(agent.dir, f), encoding="utf-8") as fh:
                assert fh.read() == sent[f], f
    assert "matmul_tflops.py" not in listing()
    os.unlink(os.path.join(agent.dir, "_probe.py"))  # a cleaner that ages files one by one: the folder stays
    r = agent.probe("host_memory", ["host_memory.py", "{}"], 60, 5, {})
    assert r.rc == 0 and "_probe.py" in listing(), r.stderr
    shutil.rmtree(agent.dir)
    r = agent.probe("storage_mounts", ["storage_mounts.py", json.dumps({"paths": [str(tmp_path)]})], 60, 5, {})
    assert r.rc == 0 and listing() == set(ship.agent_files()) | set(ship.probe_files("storage_mounts")), listing()
    shows = _probe(tmp_path, "shows", SHOWS)
    assert agent.probe("shows", [shows, "{}"], 30, 5, {}).rc == 0
    assert listing() == set(ship.texts(None))


@pytest.mark.parametrize("how", ["fsize"] + (["tmpfs"] if os.geteuid() == 0 else []))
def test_a_probe_whose_files_cannot_be_written_is_refused_as_the_nodes_disk(tmp_path, monkeypatch, how):
    """An agent that started, then cannot write a probe's files: the probe never runs, the controller raises
    ProbeFolderUnwritable (not a crashed probe), no file written in part stays in the folder, and a probe whose
    files fit still runs. ``fsize``: a file size limit (RLIMIT_FSIZE 35 kB: the agent's own files fit,
    gpu_inventory.py does not; EFBIG, configuration). ``tmpfs`` (as root): $TMPDIR on a 4 MiB tmpfs filled to the
    last byte once the agent started (ENOSPC, capacity)."""
    python, mnt = sys.executable, None
    if how == "fsize":
        python = str(tmp_path / "python-fsize")
        with open(python, "w") as f:
            f.write(f"#!{sys.executable}\nimport os, resource, sys\n"
                    "resource.setrlimit(resource.RLIMIT_FSIZE, (35000, 35000))\n"
                    f"os.execv({sys.executable!r}, [{sys.executable!r}] + sys.argv[1:])\n")
        os.chmod(python, 0o755)
    else:
        mnt = tmp_path / "tmpfs"
        mnt.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
        monkeypatch.setenv("TMPDIR", str(mnt))
    t = get_transport(FakeHost(name="ctl", address="localhost", connection="local"))
    a = Agent("ctl", t, python, ENV)
    try:
        a.start()
        filled = fill(mnt) if mnt is not None else None
        with pytest.raises(ProbeFolderUnwritable, match=r"probe gpu_inventory: cannot write the probe files into "
                                                         + re.escape(a.dir)) as e:
            a.probe("gpu_inventory", ["gpu_inventory.py", "{}"], 60, 5, {})
        full = how == "tmpfs"
        assert e.value.evidence == {"folder": a.dir, "full": full, "errno": "ENOSPC" if full else "EFBIG"}
        assert (e.value.cause.cls, e.value.cause.kind) == (("capacity", "probe_folder_full") if full else
                                                          ("configuration", "probe_folder_unwritable"))
        assert "gpu_inventory.py" not in os.listdir(a.dir)
        if filled is not None:
            os.unlink(filled)
        r = a.probe("storage_mounts", ["storage_mounts.py", json.dumps({"paths": [str(tmp_path)]})], 60, 5, {})
        assert r.rc == 0, r.stderr
    finally:
        a.close()
        t.close()
        if mnt is not None:
            subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_probe_forked_by_the_agent_runs_under_the_probes_name(agent, tmp_path):
    """A probe the agent forks names its process gpuaccept's (_probe.PROCESS_NAME), as the kernel shows it to another
    process (``cat /proc/<pid>/comm``, what the driver's Xid lines carry); its command line stays the agent's (what
    ``pkill -f`` matches). The real xid_events probe says that name in its document."""
    seen = _probe(tmp_path, "seen", "import json, os, subprocess, sys\n"
                                    f"sys.path.insert(0, {agent.dir!r})\n"
                                    "from _probe import run\n"
                                    "run(lambda a: {'comm': subprocess.check_output(['cat', f'/proc/{os.getpid()}/comm'],"
                                    " text=True).strip(), 'cmdline': open('/proc/self/cmdline', 'rb').read()"
                                    ".split(b'\\0')[1].decode()})\n")
    r = agent.probe("seen", [seen, "{}"], 30, 5, {})
    assert r.rc == 0, r.stderr
    doc = json.loads(r.stdout.decode().splitlines()[-1])
    assert (doc["comm"], doc["cmdline"]) == (PROCESS_NAME, "-c")
    log = tmp_path / "kern.log"
    log.write_text("2026-11-29T21:55:34+0000 n kernel: NVRM: Xid (PCI:0000:00:07): 13, pid=5000, name=train.py, "
                   "Graphics SM Warp Exception on (GPC 3, TPC 1, SM 0): Out Of Range Address\n")
    real = agent.probe("xid_events", ["xid_events.py", json.dumps({"sources": [str(log)]})], 60, 5, {})
    doc = json.loads(real.stdout.decode().splitlines()[-1])
    assert real.rc == 0 and doc["probe_name"] == PROCESS_NAME and doc["events"][0]["process_name"] == "train.py"


def test_a_failing_probe_is_reported_as_it_failed(agent, tmp_path):
    boom = _probe(tmp_path, "boom", "def f():\n    raise KeyError('boom')\nf()\n")
    r = agent.probe("boom", [boom], 30, 5, {})
    assert r.rc == 1 and r.stderr.decode().strip().splitlines()[-1] == "KeyError: 'boom'"
    says = _probe(tmp_path, "says", "import sys\nsys.exit('probe says no')\n")
    r = agent.probe("says", [says], 30, 5, {})
    assert r.rc == 1 and r.stderr.decode().strip() == "probe says no"
    seven = _probe(tmp_path, "seven", "import sys\nprint('x')\nsys.exit(7)\n")
    r = agent.probe("seven", [seven], 30, 5, {})
    assert (r.rc, r.stdout) == (7, b"x\n")
    ctrl_c = _probe(tmp_path, "ctrl_c", "raise KeyboardInterrupt\n")
    r = agent.probe("ctrl_c", [ctrl_c], 30, 5, {})
    assert r.rc == 130 and r.stderr.decode().strip().splitlines()[-1] == "KeyboardInterrupt"


def test_progress_lines_arrive_while_the_probe_runs(agent, tmp_path):
    """A probe writing progress lines to stderr: each reaches the callback as it is written, well before the
    probe ends; the stderr returned at the end still holds them."""
    p = _probe(tmp_path, "ticks", "import sys, time\nfor i in range(3):\n"
                                  "    print('GPUACCEPT-PROGRESS ' + '{\"done\": %d, \"total\": 3}' % i, file=sys.stderr)\n"
                                  "    time.sleep(0.4)\nprint('{}')\n")
    seen = []
    t0 = time.monotonic()
    r = agent.probe("ticks", [p], 30, 5, {}, progress=lambda doc: seen.append((time.monotonic() - t0, doc)))
    took = time.monotonic() - t0
    assert [d for _, d in seen] == [{"done": 0.0, "total": 3.0}, {"done": 1.0, "total": 3.0},
                                    {"done": 2.0, "total": 3.0}]
    assert seen[0][0] < took - 0.6, (seen, took)  # the first line came while the probe still had 0.8 s to run
    assert r.rc == 0 and r.stderr.count(b"GPUACCEPT-PROGRESS") == 3


def test_a_probe_past_its_limit_is_killed_with_its_group(agent, tmp_path):
    """The controller's limit (1 s): the agent kills the probe's group, the child it started included, answers
    with the watchdog's failure line, and serves the next probe (the same agent)."""
    m1, m2 = marker(), marker()
    probe = sleeper(tmp_path, m1, m2)
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout, match=r"command timed out after 1s: probe sleeper$") as ei:
        agent.probe("sleeper", [probe], 1, 30, {})
    assert time.monotonic() - t0 < 1 + 3 + 2
    assert b"node watchdog: the controller's limit of 1 s passed" in ei.value.stdout
    assert_gone(m1, within=1)
    assert_gone(m2, within=1)
    pid = agent.pid
    assert agent.alive and agent.probe("shows", [_probe(tmp_path, "shows", SHOWS)], 30, 5, {}).rc == 0
    assert agent.pid == pid


def test_the_agent_kills_at_the_deadline_on_its_own(agent, tmp_path):
    """A request whose deadline (0.5 s + 0.5 s grace) comes long before the controller would act: the agent's own
    watchdog rule kills the group and answers."""
    m1, m2 = marker(), marker()
    agent.session.send(encode({"op": "run", "id": 99, "argv": [sleeper(tmp_path, m1, m2)], "deadline_s": 0.5,
                               "grace_s": 0.5}))
    end = time.monotonic() + 10
    done = None
    while done is None:
        doc = agent._next(end, None)
        assert doc is not None, "no answer from the agent"
        done = doc if doc.get("op") == "done" else None
    assert done["rc"] == 1 and "ran past its deadline" in done["stdout"] and done["seconds"] < 3
    assert_gone(m1, within=1)
    assert_gone(m2, within=1)


def test_interrupt_kills_the_probe(agent, tmp_path):
    m1, m2 = marker(), marker()
    probe = sleeper(tmp_path, m1, m2)
    threading.Thread(target=lambda: (wait_started(m2, within=10), cancel_all("SIGTERM")), daemon=True).start()
    try:
        with pytest.raises(Interrupted, match=r"interrupted \(SIGTERM\) while running on .*: probe sleeper"):
            agent.probe("sleeper", [probe], 60, 5, {})
    finally:
        reset_interruption()
    assert_gone(m1, within=1)
    assert_gone(m2, within=1)


def escaper(tmp_path: Path, m1: str, m2: str, m3: str, then: str = "time.sleep(600)") -> str:
    """A stand-in probe whose processes leave its group and session, as fio's job processes do: ``sleep m2``
    setsid()'s under the probe, ``sleep m3`` likewise under a shell that exits at once (so it is orphaned), and
    ``sleep m1`` stays in the group; then ``then``."""
    return _probe(tmp_path, "escaper", "import subprocess, time\n"
                  f"subprocess.Popen(['sleep', '{m1}'])\n"
                  f"subprocess.Popen(['sleep', '{m2}'], start_new_session=True)\n"
                  f"subprocess.run(['/bin/sh', '-c', 'setsid sleep {m3} >/dev/null 2>&1 &'])\n"
                  f"{then}\n")


def test_a_probe_s_processes_outside_its_group_die_with_it(agent, tmp_path):
    """Killed at the controller's limit, interrupted, or exited by itself: the probe's processes in sessions of
    their own go with it, the one whose parent died first (re-parented to the agent) included."""
    for how in ("limit", "interrupt", "exit"):
        ms = [marker() for _ in range(3)]
        probe = escaper(tmp_path, *ms, then="print('{}')" if how == "exit" else "time.sleep(600)")
        if how == "limit":
            with pytest.raises(CommandTimeout):
                agent.probe("escaper", [probe], 2, 30, {})
        elif how == "interrupt":
            threading.Thread(target=lambda: (wait_started(ms[2], within=10, comm="sleep"),
                                             cancel_all("SIGINT")), daemon=True).start()
            try:
                with pytest.raises(Interrupted):
                    agent.probe("escaper", [probe], 60, 5, {})
            finally:
                reset_interruption()
        else:
            assert agent.probe("escaper", [probe], 60, 5, {}).rc == 0
        for m in ms:
            assert_gone(m, within=2)
        if how != "interrupt":
            assert agent.alive


def test_fio_killed_under_its_probe_leaves_no_job_process(agent, tmp_path):
    """Real fio, whose job processes each call setsid(): its main process SIGKILLed while they write (as the OOM
    killer or a SIGKILL after the kill's grace does). The probe ends by itself, and the job processes, orphaned
    and re-parented to the agent, are killed with it instead of writing on for the rest of their runtime."""
    import shutil
    import signal
    fio = shutil.which("fio")
    assert fio, "fio is installed with the test dependencies (.ci/run)"
    name = f"gpuaccept-test-{marker()}"
    probe = _probe(tmp_path, "fio_long", "import subprocess, sys\n"
                   f"r = subprocess.run([{fio!r}, '--name={name}', '--directory={tmp_path}', '--rw=write',\n"
                   "    '--bs=64k', '--size=8M', '--numjobs=2', '--time_based', '--runtime=120',\n"
                   "    '--ioengine=psync', '--output-format=json'], stdout=subprocess.DEVNULL)\n"
                   "print('{\"fio_rc\": %d}' % r.returncode)\n")

    def kill_fio_main():
        end = time.monotonic() + 20
        while len(live_pids(name)) < 3 and time.monotonic() < end:  # fio's main process and its two jobs
            time.sleep(0.05)
        for p in live_pids(name):
            stat = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[3]) != p:  # fio's main process is in the probe's group; each job leads its own session
                os.kill(p, signal.SIGKILL)

    threading.Thread(target=kill_fio_main, daemon=True).start()
    r = agent.probe("fio_long", [probe], 60, 5, {})
    assert r.rc == 0 and json.loads(r.stdout.decode().splitlines()[-1]) == {"fio_rc": -9}, r
    assert_gone(name, within=3)
    assert agent.alive


def test_a_stopping_agent_kills_its_probes_within_one_shared_grace(agent, tmp_path):
    """Two probes running at once whose processes ignore SIGTERM: asked to exit, the agent signals both before
    waiting, so the second is killed right after the first instead of a whole grace (1.5 s) later, and the
    agent is done before the controller's own SIGKILL (2 s) could orphan what is left."""
    grace_s = 1.5  # _watchdog.KILL_GRACE_S (the node-side files import each other by bare name, not as a package)
    ms = [marker(), marker()]
    for i, m in enumerate(ms):
        stubborn = _probe(tmp_path, f"stubborn{i}", "import signal, subprocess, time\n"
                          "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"  # inherited by the sleep across exec
                          f"subprocess.Popen(['sleep', '{m}'])\ntime.sleep(600)\n")
        agent.session.send(encode({"op": "run", "id": 50 + i, "argv": [stubborn], "deadline_s": 600, "grace_s": 5}))
    for m in ms:
        wait_started(m, within=10, comm="sleep")
    agent.session.send(encode({"op": "exit"}))
    end = time.monotonic() + 15
    done: list[float] = []
    while True:
        doc = agent._next(end, None)
        assert doc is not None, "no answer from the agent"
        if doc.get("op") == "done":
            done.append(time.monotonic())
        if doc.get("op") == "bye":
            break
    assert len(done) == 2 and done[1] - done[0] < grace_s / 2, done
    for m in ms:
        assert_gone(m, within=1)


def test_close_removes_the_folder_in_the_same_session(transport, tmp_path, caplog):
    """close(): the agent kills what still runs, removes its folder, says so and exits; no other command."""
    caplog.set_level(logging.DEBUG, logger="gpuaccept.run")
    a = Agent(transport.host.name, transport, sys.executable, ENV)
    a.start()
    folder, pid = a.dir, a.pid
    assert os.path.isdir(folder)
    assert a.close() is True and not os.path.exists(folder) and not a.alive
    assert_pid_gone(pid)
    runs = [r.getMessage() for r in caplog.records if r.name == "gpuaccept.run"]
    assert len(runs) == 1 and "mkdir -m 700" in runs[0], runs  # the start only: no command for the cleanup


def assert_pid_gone(pid: int, within: float = 5.0) -> None:
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except OSError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still runs")


def test_controller_gone_leaves_nothing_and_removes_the_folder(transport, tmp_path):
    """The controller's end of the session goes (stdin EOF) while a probe runs: the agent kills the probe's group,
    removes its folder and exits by itself."""
    a = Agent(transport.host.name, transport, sys.executable, ENV)
    a.start()
    m1, m2 = marker(), marker()
    a.session.send(encode({"op": "run", "id": 1, "argv": [sleeper(tmp_path, m1, m2)], "deadline_s": 600,
                           "grace_s": 15}))
    wait_started(m2, within=10)
    folder, pid = a.dir, a.pid
    a.session.close()
    assert_gone(m1, within=5)
    assert_gone(m2, within=5)
    assert_pid_gone(pid)
    end = time.monotonic() + 5
    while os.path.exists(folder) and time.monotonic() < end:
        time.sleep(0.05)
    assert not os.path.exists(folder)


def test_connection_lost_mid_probe(tmp_path):
    """The SSH connection drops (its sshd session processes die) while a probe runs: HostUnreachable naming the
    groups left behind, and the agent, its stdin gone, kills the probe and removes its folder on its own."""
    node = start_sshd(tmp_path, address="127.0.0.14")
    try:
        t = get_transport(host_for(node), known_hosts=write_known_hosts(tmp_path / "kh", [node]))
        a = Agent(node.name, t, sys.executable, ENV)
        a.start()
        folder = a.dir
        m1, m2 = marker(), marker()
        probe = sleeper(tmp_path, m1, m2)
        threading.Thread(target=lambda: (wait_started(m2, within=10),
                                          [os.kill(p, 9) for p in node.session_processes()]), daemon=True).start()
        with pytest.raises(HostUnreachable, match="connection lost during command") as ei:
            a.probe("sleeper", [probe], 60, 5, {})
        assert len(ei.value.pgids) == 2 and not a.alive
        assert_gone(m1, within=5)
        assert_gone(m2, within=5)
        end = time.monotonic() + 5
        while os.path.exists(folder) and time.monotonic() < end:
            time.sleep(0.05)
        assert not os.path.exists(folder)
        assert not live_pids(folder)
    finally:
        node.stop()


def test_no_interpreter_is_one_clear_line(transport):
    from gpuaccept.errors import ProbeError
    a = Agent(transport.host.name, transport, "/nonexistent/python3", ENV)
    with pytest.raises(ProbeError, match=r"could not ship probes: python interpreter '/nonexistent/python3' not "
                                         r"found \(set ansible_python_interpreter\)$"):
        a.start()
    assert not a.alive


def _not_python(tmp_path: Path, how: str) -> str:
    """An ``ansible_python_interpreter`` that is not a usable Python: a program that is not Python, a folder, a
    file without execute permission, or a real Python that reads as 3.6 (its sitecustomize sets version_info)."""
    if how == "false":
        return shutil.which("false") or "/bin/false"
    if how == "sh":
        return shutil.which("sh") or "/bin/sh"
    if how == "folder":
        return str(tmp_path)
    if how == "not_executable":
        p = tmp_path / "python3"
        p.write_text("#!/bin/sh\nexit 0\n")
        p.chmod(0o644)
        return str(p)
    site = tmp_path / "old_site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.version_info = (3, 6, 9, 'final', 0)\n")
    p = tmp_path / "python3.6"
    p.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    p.chmod(0o755)
    return str(p)


@pytest.mark.parametrize("how", ["false", "sh", "folder", "not_executable", "old"])
def test_an_interpreter_that_is_not_a_usable_python_is_the_inventorys_setting(transport, tmp_path, how):
    """An ``ansible_python_interpreter`` that exists but never runs the agent's first line (rc 1 of ``false``,
    a shell's syntax error, the shell's rc 126 for a folder or a file it may not execute), or a Python older
    than the probes need: InterpreterUnusable (configuration: fix-config), naming the interpreter, not a probe
    that crashed (tool: rerun)."""
    from gpuaccept.errors import InterpreterUnusable
    from gpuaccept.runner.agent import NODE_PYTHON_MIN
    python = _not_python(tmp_path, how)
    a = Agent(transport.host.name, transport, python, ENV)
    with pytest.raises(InterpreterUnusable) as got:
        a.start(timeout=30)
    e = got.value
    assert (e.cause.cls, e.cause.kind) == ("configuration", "interpreter_unusable")
    assert e.evidence["python"] == python and python in e.msg and "ansible_python_interpreter" in e.msg
    if how == "old":
        assert e.evidence["version"] == "3.6.9" and e.evidence["min"] == ".".join(map(str, NODE_PYTHON_MIN))
        assert "is Python 3.6.9" in e.msg
    else:
        assert e.evidence["version"] is None and isinstance(e.evidence["rc"], int), e.evidence
    a.close()


def test_the_agent_on_a_usable_python_says_its_version_and_starts(agent):
    """The agent's first line (its version on stderr) is no failure: a Python of the version needed starts."""
    assert agent.alive and agent.dir


def test_an_interpreter_given_as_a_command_with_arguments_runs_as_ansible_runs_it(transport, tmp_path):
    """``ansible_python_interpreter="/usr/bin/env python3"`` (Ansible puts the value before its module's path,
    unquoted): its words are the program and its arguments, each quoted; the agent starts and runs probes."""
    env = shutil.which("env") or "/usr/bin/env"
    a = Agent(transport.host.name, transport, f"{env} -u GPUACCEPT_UNSET_VAR {sys.executable}", ENV)
    a.start(timeout=30)
    try:
        res = a.probe("echo", [_probe(tmp_path, "echo", "import json\nprint(json.dumps({'ok': True}))"), "{}"], 30, 5, {})
        assert res.rc == 0 and json.loads(res.stdout.decode().splitlines()[-1]) == {"ok": True}, res
    finally:
        a.close()


def test_a_node_that_freezes_under_a_probe_is_lost_at_the_keepalive_not_the_limit(tmp_path):
    """The agent's node freezes (sshd and sessions SIGSTOPped) while a silent probe runs: the controller's
    keepalive goes unanswered and the probe ends as a lost connection naming the host "stopped answering" after
    the silence and the wait (1 s + 2 s here), not at the probe's 120 s limit. A silent probe on a node that
    answers runs to its end (4 s)."""
    node = start_sshd(tmp_path, address="127.0.0.24")
    try:
        kh = write_known_hosts(tmp_path / "kh", [node])
        t = get_transport(host_for(node), known_hosts=kh, connect_timeout=3)
        t.server_alive.after_s, t.server_alive.wait_s = 1.0, 2.0
        a = Agent(t.host.name, t, sys.executable, ENV)
        a.start()
        quiet = _probe(tmp_path, "quiet", "import time\ntime.sleep(4)\nprint('{}')\n")
        assert a.probe("quiet", [quiet, "{}"], 60, 5, {}).rc == 0
        probe = sleeper(tmp_path, "117", "118")
        node.freeze_when_running("sleep 118")
        t0 = time.monotonic()
        with pytest.raises(HostUnreachable, match="stopped answering: no reply to an SSH keepalive in 2 s") as ei:
            a.probe("sleeper", [probe, "{}"], 120, 5, {})
        assert time.monotonic() - t0 < 25, time.monotonic() - t0  # not the 120 s limit
        assert str(ei.value).startswith(f"{node.name}: connection lost during command (stopped answering: ") and \
            str(ei.value).endswith("): probe sleeper"), str(ei.value)
    finally:
        node.thaw()
        node.stop()

