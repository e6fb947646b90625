"""One run per node: the node-side lock (gpuaccept/probes/_nodelock.py) taken by each host's agent.

Unit level on the lock functions with real processes (a holder in a child process, SIGKILLed; many runs
released at the same instant), then end to end: a run holds a local host and an sshd node, a second run
started against them reads ERROR "held by gpuaccept run <first run>" on every test of both, and the first run
passes as usual. Every test uses its own lock folder (GPUACCEPT_NODE_LOCK_DIR, passed to the agents by the
controller), so that the test runs beside other runs on this machine neither hold them nor are held.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuaccept.runner.ship import PROBE_DIR
from project_helpers import REPO

sys.path.insert(0, PROBE_DIR)
import _nodelock  # noqa: E402  (node side: imported as the agent imports it)

RUN_A = {"key": "aaaa", "run_id": "run-a", "controller": "ctl-a"}
RUN_B = {"key": "bbbb", "run_id": "run-b", "controller": "ctl-b"}

HOLDER = f'''
import json, os, sys, time
sys.path.insert(0, {PROBE_DIR!r})
import _nodelock
lock, took, note = _nodelock.acquire(json.loads(sys.argv[1]), sys.argv[2])
print(json.dumps({{"path": lock.path if lock else None, "note": note}}), flush=True)
if sys.argv[3] == "stop-after-1s":
    lock.stopping()
    print("stopping", flush=True)
    time.sleep(1.0)
    lock.release()
    sys.exit(0)
time.sleep(120)
'''


def _holder(identity: dict, folder: Path, mode: str = "hold") -> subprocess.Popen:
    """A child process holding the lock of ``identity`` in ``folder`` (its first line: once it holds it)."""
    p = subprocess.Popen([sys.executable, "-c", HOLDER, json.dumps(identity), str(folder), mode],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert json.loads(line)["path"], line
    return p


def test_another_run_is_held_the_same_run_is_not_and_a_dead_holder_is_taken_over(tmp_path):
    folder = tmp_path / "locks"
    a = _holder(RUN_A, folder)
    try:
        assert oct(folder.stat().st_mode & 0o7777) == "0o1777"  # made world-writable and sticky
        t0 = time.monotonic()
        with pytest.raises(_nodelock.Held) as held:
            _nodelock.acquire(RUN_B, str(folder))
        assert time.monotonic() - t0 < 1.0  # a live holder that is not stopping: said at once
        assert {k: held.value.holder[k] for k in ("run_id", "controller", "pid")} == \
            {"run_id": "run-a", "controller": "ctl-a", "pid": a.pid}
        assert str(held.value).startswith(f"held by gpuaccept run run-a from ctl-a since 20")
        assert str(held.value).endswith(f"(pid {a.pid})")
        # run A's second agent (another host of the run on this machine, another xdist worker) is not held
        second, took, note = _nodelock.acquire(RUN_A, str(folder))
        assert second is not None and took == [] and note == ""
        second.release()
        assert not os.path.exists(second.path)
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=10)
        lock, took, note = _nodelock.acquire(RUN_B, str(folder))
        assert lock is not None and note == ""
        assert [(t["run_id"], t["pid"], t["removed"]) for t in took] == [("run-a", a.pid, True)]
        assert sorted(os.listdir(folder)) == [".mutex", os.path.basename(lock.path)]
        # and now run A is the one held
        with pytest.raises(_nodelock.Held) as again:
            _nodelock.acquire(RUN_A, str(folder))
        assert again.value.holder["run_id"] == "run-b" and again.value.holder["pid"] == os.getpid()
        lock.release()
        assert os.listdir(folder) == [".mutex"]
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()


def test_a_stopping_holder_is_waited_for(tmp_path):
    """A holder of another run that says it is stopping (its agent kills its probes) is waited for, not
    reported: the next run starting right after a killed one gets the node."""
    folder = tmp_path / "locks"
    a = _holder(RUN_A, folder, "stop-after-1s")
    try:
        assert a.stdout.readline().strip() == "stopping"  # marked before run B asks, however loaded the machine
        t0 = time.monotonic()
        lock, took, note = _nodelock.acquire(RUN_B, str(folder))
        assert lock is not None and took == [] and note == ""
        assert 0.3 < time.monotonic() - t0 < 5.0
        lock.release()
    finally:
        a.wait(timeout=10)


def test_runs_starting_at_the_same_instant_one_wins(tmp_path):
    folder, go = tmp_path / "locks", tmp_path / "go"
    code = (f"import json, os, sys, time\nsys.path.insert(0, {PROBE_DIR!r})\nimport _nodelock\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.001)\n"
            "try:\n"
            f"    lock, _, _ = _nodelock.acquire({{'key': sys.argv[1], 'run_id': sys.argv[1], 'controller': 'c'}}, "
            f"{str(folder)!r}, wait_s=0)\n"
            "    print('won', flush=True)\n"
            "    time.sleep(3)\n"
            "except _nodelock.Held as e:\n"
            "    print('held', e.holder['run_id'], flush=True)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, f"run{i}"], stdout=subprocess.PIPE, text=True)
             for i in range(6)]
    time.sleep(0.5)
    go.write_text("")
    outs = [p.communicate(timeout=60)[0].split() for p in procs]
    winners = [f"run{i}" for i, o in enumerate(outs) if o == ["won"]]
    assert len(winners) == 1, outs
    assert all(o == ["held", winners[0]] for o in outs if o != ["won"]), outs


def test_a_folder_that_cannot_serve_gives_no_lock_and_says_why(tmp_path):
    (tmp_path / "file").write_text("")
    lock, took, note = _nodelock.acquire(RUN_A, str(tmp_path / "file" / "locks"))
    assert lock is None and took == []
    assert note.startswith(f"no node lock: {tmp_path / 'file' / 'locks'} could not be made"), note


def test_the_host_is_held_once_then_at_once_and_a_dead_holder_is_taken_over(tmp_path, monkeypatch, caplog):
    """The controller's side, on a local host: the agent's start says held (NodeHeld, its holder as
    evidence, cause contention/held), every later probe or command of the run raises the same at once without
    starting anything; once the holder is SIGKILLed, a run takes the node over and logs it at INFO."""
    import logging
    from gpuaccept.config.inventory import load_inventory
    from gpuaccept.errors import NodeHeld
    from gpuaccept.runner.host import HostRunner
    from gpuaccept.transport import get_transport
    folder = tmp_path / "locks"
    monkeypatch.setenv("GPUACCEPT_NODE_LOCK_DIR", str(folder))
    inv = tmp_path / "inv.ini"
    inv.write_text("[gpu]\nloc ansible_connection=local\nrep ansible_connection=local gpuaccept_replay=/nonexistent\n")
    hosts = load_inventory(str(inv)).hosts
    assert HostRunner(hosts["rep"], get_transport, run_id="b").identity is None  # a replayed host takes no lock
    a = _holder(RUN_A, folder)
    node = HostRunner(hosts["loc"], get_transport, 60, save_dir=str(tmp_path / "b" / "probes"), run_id="b")
    try:
        with pytest.raises(NodeHeld) as held:
            node.probe("storage_mounts", {"paths": ["/tmp"]})
        ev = held.value.evidence
        assert held.value.msg == f"held by gpuaccept run run-a from ctl-a since {ev['since']} (pid {a.pid})"
        assert {k: ev[k] for k in ("run_id", "controller", "pid")} == {"run_id": "run-a", "controller": "ctl-a",
                                                                        "pid": a.pid}
        assert (held.value.cause.cls, held.value.cause.kind) == ("contention", "held")
        t0 = time.monotonic()
        for _ in range(3):
            with pytest.raises(NodeHeld, match="held by gpuaccept run run-a"):
                node.run("touch should-not-exist")
            with pytest.raises(NodeHeld, match="held by gpuaccept run run-a"):
                node.probe("storage_mounts", {"paths": ["/tmp"]})
        assert time.monotonic() - t0 < 0.5
        assert not (tmp_path / "b").exists() and not os.path.exists("should-not-exist")
    finally:
        node.close()
    a.send_signal(signal.SIGKILL)
    a.wait(timeout=10)
    caplog.set_level(logging.INFO, logger="gpuaccept.runner.agent")
    node = HostRunner(hosts["loc"], get_transport, 60, save_dir=str(tmp_path / "c" / "probes"), run_id="c")
    try:
        node.probe("storage_mounts", {"paths": ["/tmp"]})
        assert f"loc: took over the node lock of gpuaccept run run-a from ctl-a since" in caplog.text
        assert f"(pid {a.pid}, gone)" in caplog.text
        assert [t["pid"] for t in node._agent.lock_info["took_over"]] == [a.pid]
        with pytest.raises(_nodelock.Held) as now:  # run c holds it now, in its agent
            _nodelock.acquire(RUN_B, str(folder))
        assert now.value.holder["run_id"] == "c" and now.value.holder["pid"] == node._agent.pid
    finally:
        node.close()
    assert os.listdir(folder) == [".mutex"]  # released when the agent exited


# -- end to end ---------------------------------------------------------------------------------------------
SUITE = '''
import os, time
import pytest

pytestmark = pytest.mark.nccl


def test_1_hold(node, verdicts):
    doc = node.probe("storage_mounts", {"paths": ["/tmp"]})  # the agent starts: the node is this run's
    verdicts.record("mounts", len(doc.get("mounts") or doc), "entries")
    ready, go = os.environ.get("E2E_READY"), os.environ.get("E2E_GO")
    if ready:  # the hosts' agents (and locks) live until the run ends: the last host's test holds the run
        open(ready + "." + node.name, "w").close()
        end = time.time() + 60
        while node.name == "sn" and go and not os.path.exists(go) and time.time() < end:
            time.sleep(0.05)
    verdicts.record("answer", 42.0, "units")


def test_2_command(node, verdicts):
    verdicts.record("said", node.run("echo hi").stdout.decode().strip())


def test_3_probe_again(node, verdicts):
    node.probe("storage_mounts", {"paths": ["/tmp"]})
    verdicts.record("again", 1.0, "units")
'''


def _project(root: Path, sshd, known_hosts: str) -> Path:
    import shutil
    for name in ("pytest.ini", "conftest.py"):
        shutil.copy(REPO / name, root / name)
    shutil.copytree(REPO / "thresholds", root / "thresholds")
    (root / "suites").mkdir()
    (root / "suites" / "test_nccl_lock.py").write_text(SUITE)
    inv = root / "inventory.ini"
    inv.write_text(f"[gpu]\nloc ansible_connection=local\n{sshd.inventory_line('sn')}\n")
    return inv


def _args(inv: Path, known_hosts: str, rep: Path) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:randomly", "--progress", "off", "--inventory", str(inv),
            "--known-hosts", known_hosts, "--reports", str(rep), "--history", "none"]


def test_a_second_run_reads_held_on_every_test_and_the_first_is_undisturbed(tmp_path, sshd_nodes, known_hosts):
    inv = _project(tmp_path, sshd_nodes[0], known_hosts)
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPUACCEPT_NODE_LOCK_DIR": str(tmp_path / "locks")}
    ready, go = tmp_path / "ready", tmp_path / "go"
    first_rep, second_rep = tmp_path / "first-run", tmp_path / "second-run"
    first = subprocess.Popen(_args(inv, known_hosts, first_rep), cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env={**env, "E2E_READY": str(ready), "E2E_GO": str(go)})
    try:
        end = time.time() + 60
        while not all(Path(f"{ready}.{h}").exists() for h in ("loc", "sn")) and time.time() < end:
            assert first.poll() is None, first.communicate()[0][-3000:]
            time.sleep(0.05)
        t0 = time.monotonic()
        second = subprocess.run(_args(inv, known_hosts, second_rep), cwd=tmp_path, capture_output=True, text=True,
                                env=env, timeout=60)
        took = time.monotonic() - t0
        assert first.poll() is None  # still holding both nodes
        go.write_text("")
        out, _ = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, out[-3000:]
    first_tests = json.loads((first_rep / "results.json").read_text())["tests"]
    assert sorted((t["host"], t["outcome"]) for t in first_tests) == sorted(
        (h, "passed") for h in ("loc", "sn") for _ in range(3)), first_tests
    assert all(t["host"] in ("loc", "sn") for t in first_tests)
    second_tests = json.loads((second_rep / "results.json").read_text())["tests"]
    assert len(second_tests) == 6, second.stdout[-3000:]
    for t in second_tests:
        assert t["outcome"] == "error", t
        assert t["message"].startswith(f"{t['host']}: held by gpuaccept run first-run from "), t
        assert " since 20" in t["message"] and "(pid " in t["message"], t
    assert second.returncode != 0
    assert took < 30, took
    # nothing of the second run ran there: no probe document saved, no lock left behind by either run
    assert not list((second_rep / "probes").rglob("*.json")) if (second_rep / "probes").exists() else True
    assert os.listdir(tmp_path / "locks") == [".mutex"]
