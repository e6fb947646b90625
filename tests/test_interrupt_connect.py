"""Interrupts are immediate everywhere: a signal ends an SSH connection attempt in progress (here a
"host" that accepts the TCP connection and never says a word, so the SSH handshake waits for its banner) at
once, not when ``connect_timeout`` runs out; a second signal aborts at once, also while the first one's wind-down
waits on a node that stopped answering, and the reports are still written with counts that add up.

Real pytest processes, real signals, real sockets and a real sshd; the bounds are far above what an idle machine
takes (a fraction of a second) and far below what a wait for the 10 s connect timeout takes."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuaccept.runner.interrupt import SAME_SIGNAL_S
from sshd import start_sshd, write_known_hosts

REPO = Path(__file__).resolve().parents[1]
#: from the first signal to the run's exit, when a handshake with a silent host was in progress (was 7.9 s)
FIRST_SIGNAL_EXIT_S = 4.0
#: from a second signal to the run's exit (was 7.5 s, or no reports at all)
SECOND_SIGNAL_EXIT_S = 2.5


class SilentHost:
    """A listening socket on 127.0.0.1 that accepts every connection and never sends anything."""

    def __init__(self) -> None:
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.port = self.srv.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.accepted.append(c)

    def handshaking(self) -> bool:
        """True while a client is connected and has said its SSH banner (it then waits for the server's)."""
        for c in list(self.accepted):
            try:
                c.setblocking(False)
                data = c.recv(256, socket.MSG_PEEK)
            except BlockingIOError:
                continue
            except OSError:
                continue
            if data.startswith(b"SSH-"):
                return True
        return False

    def close(self) -> None:
        self.srv.close()
        for c in self.accepted:
            c.close()

    def line(self, name: str) -> str:
        return f"{name} ansible_host=127.0.0.1 ansible_port={self.port} ansible_user=root"


def _project(root: Path, inventory: str, suite: str | None = None) -> Path:
    """The checkout's suites (or only ``suite``) in ``root`` with ``inventory``; returns the inventory path."""
    for name in ("pytest.ini", "conftest.py"):
        shutil.copy(REPO / name, root / name)
    shutil.copytree(REPO / "thresholds", root / "thresholds")
    if suite is None:
        shutil.copytree(REPO / "suites", root / "suites")
    else:
        (root / "suites").mkdir()
        (root / "suites" / "test_interrupt_here.py").write_text(suite)
    (root / "known_hosts").write_text("")
    inv = root / "inventory.ini"
    inv.write_text(inventory)
    return inv


def _start(root: Path, inv: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:randomly", "--progress", "off",
                             "--inventory", str(inv), "--known-hosts", str(root / "known_hosts"),
                             "--reports", str(root / "rep"), "--history", "none", *args],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def _wait_until(done, within: float, proc: subprocess.Popen) -> None:
    end = time.monotonic() + within
    while not done() and time.monotonic() < end and proc.poll() is None:
        time.sleep(0.05)
    if not done():
        proc.kill()
        raise AssertionError(proc.communicate(timeout=60)[0][-3000:])


def _exit_after(proc: subprocess.Popen, signals: list[float]) -> tuple[str, list[float]]:
    """Send SIGINT to ``proc`` at each of ``signals`` (seconds from now), stopping early once it exited; returns
    its output and the seconds from each signal sent to its exit."""
    t0 = time.monotonic()
    sent: list[float] = []
    for at in signals:
        while time.monotonic() < t0 + at and proc.poll() is None:
            time.sleep(0.01)
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGINT)
        sent.append(time.monotonic())
    while proc.poll() is None and time.monotonic() < t0 + 120:
        time.sleep(0.01)
    end = time.monotonic()
    out = proc.communicate(timeout=60)[0]
    return out, [end - s for s in sent]


def _counts_add_up(root: Path, out: str, selected: int) -> dict:
    """results.json holds every selected test once; the summary's INTERRUPTED header counts no more tests as
    not finished than there are; pytest's closing line counts them all. Returns results.json's tests by id."""
    rep = root / "rep"
    tests = json.loads((rep / "results.json").read_text())["tests"]
    assert len(tests) == selected, (len(tests), selected, out[-3000:])
    header = (rep / "summary.md").read_text().splitlines()[0]
    assert header.startswith("**INTERRUPTED**"), header
    m = re.search(r"(\d+) tests? not finished", header)
    assert m is None or int(m.group(1)) <= selected, header
    closing = [ln for ln in out.splitlines() if re.search(r"\d+ (passed|errors?|failed|skipped)", ln)][-1]
    counted = sum(int(n) for n, what in re.findall(r"(\d+) (passed|errors?|failed|skipped)", closing))
    assert counted == selected, (closing, selected)
    return {t["nodeid"]: t for t in tests}


def _selected(root: Path, inv: Path) -> int:
    """How many tests the run selects, from pytest's own --collect-only of the same command (touches no node)."""
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "--inventory", str(inv),
                          "--known-hosts", str(root / "known_hosts"), "--history", "none", "--collect-only", "-q"],
                         cwd=root, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    ids = [ln for ln in res.stdout.splitlines() if "::" in ln]
    assert ids, res.stdout[-3000:] + res.stderr[-3000:]
    return len(ids)


def test_first_signal_ends_a_handshake_at_once(tmp_path):
    """The shipped suites on two hosts that accept the TCP connection and never answer (57 tests): SIGINT while
    the warm-up's SSH handshakes wait for the servers' banners exits within seconds, not when the 10 s connect
    timeout runs out; the host's test says it was interrupted while connecting; the counts add up."""
    hosts = [SilentHost(), SilentHost()]
    try:
        inv = _project(tmp_path, "[gpu]\n" + "".join(h.line(f"silent{i}") + "\n" for i, h in enumerate(hosts, 1)))
        proc = _start(tmp_path, inv)
        _wait_until(lambda: all(h.handshaking() for h in hosts), 120, proc)
        time.sleep(0.3)
        assert all(h.handshaking() for h in hosts)  # still in the handshake: the signal cuts it
        out, waits = _exit_after(proc, [0])
    finally:
        for h in hosts:
            h.close()
    print(f"SIGINT during two handshakes: exit {waits[0]:.2f} s after it")
    assert proc.returncode == 2, out[-3000:]
    assert waits[0] < FIRST_SIGNAL_EXIT_S, (waits, out[-2000:])
    tests = _counts_add_up(tmp_path, out, _selected(tmp_path, inv))
    cut = [t for t in tests.values() if "connecting to [127.0.0.1]:" in (t.get("message") or "")]
    assert cut and all(t["message"].startswith("interrupted (SIGINT) while running on silent") for t in cut), \
        [t.get("message") for t in tests.values()][:5]


BUSY_SUITE = '''
import os, time


def test_1_busy(node):
    open(os.environ["MARKER"], "w").close()
    time.sleep(600)   # busy on the controller: a first signal does not cut it, a second one does


def test_2_gpus(node, gpus):
    pass
'''


def test_second_signal_aborts_at_once_while_a_handshake_runs(tmp_path):
    """The timeline: a silent host's handshake in progress (the warm-up's), a first SIGINT, a second
    one 1.2 s later while a test still runs: the run exits within moments of the second, with the reports."""
    host = SilentHost()
    marker = tmp_path / "busy"
    try:
        inv = _project(tmp_path, "[gpu]\n" + host.line("silent") + "\n", BUSY_SUITE)
        proc = _start(tmp_path, inv, env={"MARKER": str(marker)})
        _wait_until(lambda: marker.exists() and host.handshaking(), 120, proc)
        out, waits = _exit_after(proc, [0, 1.2 * SAME_SIGNAL_S + 0.0])
    finally:
        host.close()
    assert len(waits) == 2, (waits, out[-3000:])  # the busy test outlived the first signal
    print(f"two SIGINTs, a handshake in progress: exit {waits[0]:.2f} s after the first, {waits[1]:.2f} s after the second")
    assert proc.returncode == 2, out[-3000:]
    assert waits[1] < SECOND_SIGNAL_EXIT_S, (waits, out[-2000:])
    tests = _counts_add_up(tmp_path, out, 2)
    busy = [t for t in tests.values() if t["name"].startswith("test_1_busy")][0]
    assert busy["outcome"] == "error" and busy["message"].startswith("interrupted (SIGINT) while running on silent")


WIND_DOWN_SUITE = '''
import os
import pytest


def test_1_agent(node):
    if node.name == "frozen":
        node._ensure_shipped()   # its agent runs: the end of the run asks it to clean up, and waits for it


def test_2_wait(node):
    if node.name == "frozen":
        pytest.skip("the local host waits")
    open(os.environ["MARKER"], "w").close()
    node.run("sleep 120", timeout=300)
'''


def test_second_signal_during_the_wind_down_cuts_the_waits_not_the_reports(tmp_path, tmp_path_factory):
    """A first SIGINT ends the running test; the run then asks a node that stopped answering (its sshd
    SIGSTOPped) to clean up, which would wait seconds. A second SIGINT 1.2 s later: the run stops waiting on the
    node and exits within moments, and the reports are written all the same (not cut off by the abort)."""
    node = start_sshd(tmp_path_factory.mktemp("frozen"), address="127.0.0.171", name="frozen")
    marker = tmp_path / "waiting"
    try:
        kh = write_known_hosts(tmp_path_factory.mktemp("kh") / "known_hosts", [node])
        inv = _project(tmp_path, f"[gpu]\n{node.inventory_line()}\nlocal ansible_connection=local\n", WIND_DOWN_SUITE)
        shutil.copy(kh, tmp_path / "known_hosts")
        proc = _start(tmp_path, inv, env={"MARKER": str(marker)})
        _wait_until(marker.exists, 180, proc)
        node.freeze()
        time.sleep(0.3)
        out, waits = _exit_after(proc, [0, 1.2 * SAME_SIGNAL_S])
    finally:
        node.thaw()
        node.stop()
    print(f"two SIGINTs, the wind-down waiting on a frozen node: exit {waits[0]:.2f} s after the first, "
          f"{waits[-1]:.2f} s after the second")
    assert proc.returncode == 2, out[-3000:]
    assert len(waits) == 2, (waits, out[-3000:])  # the wind-down was still waiting on the frozen node
    assert waits[1] < SECOND_SIGNAL_EXIT_S, (waits, out[-2000:])
    tests = _counts_add_up(tmp_path, out, 4)
    waited = [t for t in tests.values() if t["name"].startswith("test_2_wait") and t["host"] == "local"][0]
    assert waited["outcome"] == "error" and waited["message"].startswith("interrupted (SIGINT) while running on local")


def test_a_cancel_cuts_the_transports_handshake(tmp_path):
    """The transport on its own: a command whose SSH handshake waits on a silent host raises Interrupted within
    moments of its cancel (as cancel_all does it on a signal), naming the command and where it was connecting."""
    from gpuaccept.errors import Interrupted
    from gpuaccept.transport import get_transport, running
    from process_helpers import FakeHost

    silent = SilentHost()
    t = get_transport(FakeHost(name="h1", port=silent.port, user="root"), known_hosts=str(tmp_path / "kh"),
                      connect_timeout=30)
    box: dict = {}

    def go() -> None:
        try:
            t.run("true", timeout=60, label="probe x")
        except Exception as e:  # noqa: BLE001 - handed to the test
            box["error"] = e
        box["at"] = time.monotonic()

    th = threading.Thread(target=go, daemon=True)
    th.start()
    try:
        end = time.monotonic() + 30
        while not silent.handshaking() and time.monotonic() < end:
            time.sleep(0.02)
        assert silent.handshaking()
        mine = [r for r in running() if r.host == "h1"]
        assert len(mine) == 1
        cut = time.monotonic()
        mine[0].cancel("SIGINT")
        th.join(10)
    finally:
        silent.close()
        t.close()
    assert isinstance(box.get("error"), Interrupted), box
    assert box["at"] - cut < 1.0, box["at"] - cut
    assert str(box["error"]) == (f"interrupted (SIGINT) while running on h1: probe x (connecting to "
                                 f"[127.0.0.1]:{silent.port})")
