"""After an interrupt, pytest's closing line counts what the reports count: the tests the interrupt
stopped or never started are errors there too ("2 passed, 4 errors", not "2 passed, 1 error"). A real run on
two local hosts, interrupted with SIGINT while a test runs."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SUITE = '''
import os


def test_0_quick(node):
    assert node.run("true").rc == 0


def test_1_wait(node):
    open(os.environ["MARKER"], "a").close()
    node.run("sleep 120", timeout=300)


def test_2_after(node):
    assert node.run("true").rc == 0
'''


def test_closing_line_counts_the_tests_an_interrupt_stopped(tmp_path):
    for name in ("pytest.ini", "conftest.py"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "thresholds", tmp_path / "thresholds")
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "test_wait.py").write_text(SUITE)
    (tmp_path / "inventory.ini").write_text("[gpu]\nh1 ansible_connection=local\nh2 ansible_connection=local\n")
    marker, rep = tmp_path / "started", tmp_path / "rep"
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:randomly", "--progress", "off", "--inventory",
                             str(tmp_path / "inventory.ini"), "--reports", str(rep), "--history", "none"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO), "MARKER": str(marker)})
    try:
        end = time.time() + 240
        while not marker.exists() and time.time() < end and proc.poll() is None:
            time.sleep(0.1)
        assert marker.exists(), proc.communicate(timeout=60)[0][-3000:]
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2, out[-3000:]
    tests = json.loads((rep / "results.json").read_text())["tests"]
    want = {k: sum(t["outcome"] == k for t in tests) for k in ("passed", "failed", "error")}
    assert len(tests) == 6 and want["error"] >= 3, (want, out[-3000:])  # the waiting one and those after it
    closing = [ln for ln in out.splitlines() if re.search(r"\d+ (passed|errors?|failed)", ln)][-1]
    got = {k: int(m.group(1)) if (m := re.search(rf"(\d+) {k}", closing)) else 0 for k in ("passed", "failed", "error")}
    assert got == want, (closing, want)
    junit = (rep / "junit-health.xml") if (rep / "junit-health.xml").exists() else next(rep.glob("junit-*.xml"))
    assert junit.read_text().count("<testcase") == 6
