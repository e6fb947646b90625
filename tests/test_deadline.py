"""NVML calls under a deadline (gpuaccept/probes/_deadline.py): a call that does not return is a finding,
not a hang. The blocking call is real: pynvml loads a libnvidia-ml.so.1 built here whose nvmlDeviceGetCount_v2
sleeps, or waits in uninterruptible sleep (D) on a frozen loop-mounted ext4 (fsfreeze), which SIGKILL cannot end."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from deadline_helpers import blocking_nvml
from probe_helpers import run_probe
from project_helpers import junit, make_project, run_pytest


def test_a_call_that_does_not_return_is_reported_and_the_probe_exits(tmp_path):
    lib = blocking_nvml(tmp_path / "lib")
    t0 = time.monotonic()
    rc, doc, _ = run_probe("gpu_inventory", {"call_deadline_s": 1}, env={**os.environ, "LD_LIBRARY_PATH": str(lib)},
                           timeout=30)
    assert rc == 0 and time.monotonic() - t0 < 10
    assert doc["nvml_available"] is False and doc["reason_code"] == "driver_unresponsive"
    stuck = doc["driver_unresponsive"]
    assert stuck["call"] == "nvmlDeviceGetCount" and stuck["gpu"] is None and stuck["unkillable"] is False
    assert 1.0 <= stuck["seconds"] < 3
    assert doc["reason"] == f"driver unresponsive (nvmlDeviceGetCount, {stuck['seconds']:g} s)"


def _loop_ext4(tmp_path):
    img, mnt = tmp_path / "fs.img", tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["truncate", "-s", "16M", str(img)], check=True)
    subprocess.run(["mkfs.ext4", "-q", str(img)], check=True)
    if subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], capture_output=True).returncode != 0:
        return None
    return mnt


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("fsfreeze"), reason="needs root and fsfreeze (util-linux)")
def test_a_call_stuck_in_d_state_is_unkillable_and_still_reported(tmp_path):
    lib = blocking_nvml(tmp_path / "lib")
    mnt = _loop_ext4(tmp_path)
    assert mnt is not None, "mount -o loop failed as root"
    subprocess.run(["fsfreeze", "-f", str(mnt)], check=True)
    try:
        t0 = time.monotonic()
        rc, doc, _ = run_probe("gpu_inventory", {"call_deadline_s": 1}, timeout=30, env={
            **os.environ, "LD_LIBRARY_PATH": str(lib), "FAKE_NVML_FROZEN_FILE": str(mnt / "x")})
        took = time.monotonic() - t0
    finally:
        subprocess.run(["fsfreeze", "-u", str(mnt)], check=True)
    time.sleep(0.3)
    subprocess.run(["umount", str(mnt)], check=False)
    assert rc == 0 and took < 10, took
    stuck = doc["driver_unresponsive"]
    assert (stuck["state"], stuck["state_after_kill"], stuck["unkillable"]) == ("D", "D", True)
    assert doc["reason"].endswith("the probe process is in uninterruptible sleep (D) and SIGKILL did not end it")


def test_the_run_goes_on_with_the_other_hosts(tmp_path):
    """Two hosts: 'wedged' runs the probes under an interpreter whose libnvidia-ml.so.1 blocks; 'cpu' has no GPU.
    The wedged host fails test_driver_responsive with the finding, cause hardware, action reboot; the other
    host's result arrives (no NVIDIA GPU: skipped) and the run ends."""
    lib = blocking_nvml(tmp_path / "lib")
    wrapper = tmp_path / "python-wedged"
    wrapper.write_text(f"#!/bin/sh\nLD_LIBRARY_PATH={lib} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"wedged ansible_connection=local ansible_python_interpreter={wrapper}\n"
                   f"cpu ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "suites/test_health_driver.py",
                     "-k", "driver_responsive", timeout=120)
    cases = {c["name"]: c for c in junit(rep / "junit-health.xml")}
    assert res.returncode == 1, res.stdout[-3000:]
    wedged = cases["test_driver_responsive[wedged]"]
    assert wedged["outcome"] == "failure"
    assert "driver unresponsive (nvmlDeviceGetCount, 1" in wedged["message"], wedged
    assert cases["test_driver_responsive[cpu]"]["outcome"] == "skipped", cases
    results = json.loads((rep / "results.json").read_text())
    test = next(t for t in results["tests"] if t["nodeid"].endswith("test_driver_responsive[wedged]"))
    assert json.dumps(test).count('"reboot"') >= 1 and '"driver_unresponsive"' in json.dumps(test)
