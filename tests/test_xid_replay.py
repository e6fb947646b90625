"""The health suite's test_xid_events end to end, judged from the real 2xH200 capture (tests/data/replay-h200x2)
and from copies whose xid_events document is what the real probe reads from fixture log text: NVSwitch SXid
lines, an Xid line without a number, "fallen off the bus" messages with no Xid number. Before and after:

- healthy capture (no event): passed, before and after;
- kern-sxid-offbus.log: before, only Xid 200 (unknown) and the Xid 79 line on DB:00 failed; the SXid lines,
  the number-less Xid line and the off-the-bus messages on B3:00 and 5D:00 went unseen. Now each fails with its
  own line, and the non-fatal SXid is recorded only; the RESTART_APP Xid 13 (the run's, in a replay) is a finding;
- application-class Xids of the run (6x Xid 13 and an Xid 31 on GPU 1, an Xid 94 on GPU 0, probe pids, lines in
  the driver's format): before, recorded and PASS; now GPU 1 reset-gpu (hardware, count and GPC/TPC named),
  GPU 0 rerun (unverified);
- six Xid 13 lines on GPU 1 from a process the probes' document does not name as the run's (``name=train.py``, the
  document read by the real probe process, which says the name its probes run under): the host's action is rerun
  [contention], not reset-gpu; the same lines from the probes' own name: reset-gpu [hardware]; from ``python3`` in
  a capture without ``probe_name`` (an older probe): reset-gpu [hardware], as before.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpuaccept.probes._probe import PROCESS_NAME
from probe_helpers import DATA, load_probe, run_probe
from project_helpers import junit, make_project, run_pytest

xev = load_probe("xid_events")
REPLAY = DATA / "replay-h200x2"


def run_xid_test(tmp_path: Path, captures: Path) -> dict:
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={captures} gpu_sku=h200-sxm-141gb "
                   "gpus_per_node=2\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "xid_events")
    (case,) = [c for c in junit(rep / "junit-health.xml") if c["name"].startswith("test_xid_events")]
    return {"rc": res.returncode, **case}


def _results(rep: Path) -> dict:
    return json.loads((rep / "results.json").read_text())


def _failures(rep: Path) -> list[dict]:
    doc = json.loads((rep / "results.json").read_text())
    return [f for t in doc["tests"] if t["name"].startswith("test_xid_events") for f in t.get("failures", [])]


def test_healthy_capture_has_no_xid_and_passes(tmp_path):
    got = run_xid_test(tmp_path, REPLAY)
    assert got["rc"] == 0 and got["outcome"] == "passed", got["text"]


def test_sxid_nonumber_and_off_bus_lines_fail_with_one_line_each(tmp_path):
    captures = tmp_path / "captures"
    shutil.copytree(REPLAY, captures)
    (saved_path,) = captures.glob("xid_events-*.json")
    saved = json.loads(saved_path.read_text())
    saved["doc"] = xev.main({"sources": [str(DATA / "kern-sxid-offbus.log")]})  # the real probe on the fixture
    saved_path.write_text(json.dumps(saved))
    got = run_xid_test(tmp_path / "run", captures)
    assert got["rc"] == 1 and got["outcome"] == "failure"
    text = got["text"]
    assert "SXid 20034 (Fatal) on NVSwitch nvidia-nvswitch0 (00000000:C2:00.0) link 28: LTSSM Fault Up" in text
    assert "SXid 26006 on NVSwitch nvidia-nvswitch1 (00000004:00:00.0) (no link named): the line states neither" in text
    assert "SXid 28006" not in text  # non-fatal: recorded only
    assert "Xid line without a readable number on 00000000:3B:00.0: treated as a failure" in text
    assert "Xid 79 on 00000000:B3:00.0: GPU has fallen off the bus (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS, " \
           "immediate action RESTART_BM, fails)" in text
    assert "Xid 79 on 00000000:5D:00.0" in text and "Xid 79 on 00000000:DB:00.0" in text
    assert "Xid 200 on 00000000:1B:00.0 is not in NVIDIA's Xid catalogue" in text
    # the RESTART_APP Xid 13 (once, on a GPU of no NVML handle here): a replay's saved window is the run's, so it
    # is the run's probes' fault once: a finding, unverified
    lines = [f["line"] for f in _failures(tmp_path / "run" / "rep")]
    assert any("Xid 13 during the run, 1 time (GPC 0, TPC 1: 1) on 00000000:3B:00.0, immediate action RESTART_APP" in ln for ln in lines)
    assert "Traceback" not in text and "KeyError" not in text


def test_application_xids_of_the_run_are_findings_of_their_gpus(tmp_path):
    head = "2026-11-29T21:55:34+0000 h200-a kernel: NVRM: Xid (PCI:0000:00:{bus}): "
    log = tmp_path / "kern.log"
    log.write_text("".join(
        [head.format(bus="07") + f"13, pid={5000 + i}, name=python3, Graphics SM Warp Exception on (GPC 3, TPC 1, "
         "SM 0): Out Of Range Address\n" for i in range(6)]
        + [head.format(bus="07") + "31, pid=5010, name=python3, Ch 00000010, intr 00000000. MMU Fault: ENGINE "
           "GRAPHICS GPC3 GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ\n",
           head.format(bus="06") + "94, pid=5011, name=python3, Contained: SM (0x1). RST: No, D-RST: No\n"]))
    captures = tmp_path / "captures"
    shutil.copytree(REPLAY, captures)
    (saved_path,) = captures.glob("xid_events-*.json")
    saved = json.loads(saved_path.read_text())
    saved["doc"] = xev.main({"sources": [str(log)]})  # the real probe on the lines
    assert [e["xid"] for e in saved["doc"]["events"]] == [13] * 6 + [31, 94]  # six processes: six events
    saved_path.write_text(json.dumps(saved))
    got = run_xid_test(tmp_path / "run", captures)
    assert got["rc"] == 1 and got["outcome"] == "failure"
    assert "Xid 13 x6, Xid 31 during the run, 7 times (6 on GPC 3, TPC 1) on 00000000:00:07.0" in got["text"]
    assert "Xid 94 during the run, 1 time on 00000000:00:06.0" in got["text"]
    by_gpu = {f["gpu"]: f for f in _failures(tmp_path / "run" / "rep")}
    assert sorted(by_gpu) == [0, 1]
    assert (by_gpu[1]["action"]["action"], by_gpu[1]["action"]["cause"]) == ("reset-gpu", "hardware")
    assert (by_gpu[0]["action"]["action"], by_gpu[0]["action"]["cause"]) == ("rerun", "unverified")
    assert by_gpu[1]["pci_bus_id"] == "00000000:00:07.0" and by_gpu[1]["serial"]


def test_kernel_log_paths_is_the_log_the_xid_check_reads(tmp_path):
    """A host whose inventory names its kernel log (kernel_log_paths: a saved log, a log kept elsewhere) has its Xids
    read from that file by the health layer too, as the host layer reads it: the probe is asked with ``sources``.
    Here the replay answers the probe's request with the real probe's document of that file (a fatal SXid, Xid 79s),
    saved under the arguments the suite asks; without the variable the same replay reads the node's own (healthy)
    capture."""
    log = DATA / "kern-sxid-offbus.log"
    captures = tmp_path / "captures"
    shutil.copytree(REPLAY, captures)
    (saved_path,) = captures.glob("xid_events-*.json")
    saved = json.loads(saved_path.read_text())
    from gpuaccept.runner.replay import save_probe
    save_probe(str(captures), "xid_events", {**saved["args"], "sources": [str(log)]}, xev.main({"sources": [str(log)]}))
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    got = {}
    for name, extra in (("with", f" kernel_log_paths={log}"), ("without", "")):
        inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={captures} gpu_sku=h200-sxm-141gb "
                       f"gpus_per_node=2{extra}\n")
        rep = tmp_path / f"rep-{name}"
        res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "xid_events")
        (case,) = [c for c in junit(rep / "junit-health.xml") if c["name"].startswith("test_xid_events")]
        got[name] = (res.returncode, case)
    rc, case = got["with"]
    assert rc == 1 and "SXid 20034 (Fatal) on NVSwitch nvidia-nvswitch0" in case["text"], case["text"]
    assert got["without"][0] == 0 and got["without"][1]["outcome"] == "passed"


@pytest.mark.parametrize("name, with_probe_name, action, cause", [
    ("train.py", True, "rerun", "contention"),       # another application on the GPU during the run
    (PROCESS_NAME, True, "reset-gpu", "hardware"),   # the probes' own, repeated
    ("python3", False, "reset-gpu", "hardware"),     # an older capture: every in-run Xid taken as the probes'
])
def test_application_xids_are_judged_by_the_process_that_logged_them(tmp_path, name, with_probe_name, action, cause):
    head = "2026-11-29T21:55:{s:02d}+0000 h200-a kernel: NVRM: Xid (PCI:0000:00:07): "
    log = tmp_path / "kern.log"
    log.write_text("".join(head.format(s=30 + 5 * i) + f"13, pid={5000 + i}, name={name}, Graphics SM Warp Exception "
                           "on (GPC 3, TPC 1, SM 0): Out Of Range Address\n" for i in range(6)))
    captures = tmp_path / "captures"
    shutil.copytree(REPLAY, captures)
    (saved_path,) = captures.glob("xid_events-*.json")
    saved = json.loads(saved_path.read_text())
    rc, doc, _ = run_probe("xid_events", {"sources": [str(log)]})  # the real probe, a process of its own
    assert rc == 0 and doc["probe_name"] == PROCESS_NAME and len(doc["events"]) == 6
    if not with_probe_name:
        del doc["probe_name"]
    saved["doc"] = doc
    saved_path.write_text(json.dumps(saved))
    got = run_xid_test(tmp_path / "run", captures)
    rep = tmp_path / "run" / "rep"
    assert got["rc"] == 1 and got["outcome"] == "failure"
    (f,) = _failures(rep)
    assert f["gpu"] == 1 and (f["action"]["action"], f["action"]["cause"]) == (action, cause)
    assert "Xid 13 during the run, 6 times (6 on GPC 3, TPC 1) on 00000000:00:07.0" in f["line"]
    assert f"from {name} (pid 5000, 5001, 5002, 5003, 5004, 5005)" in f["line"]
    (test,) = [t for t in _results(rep)["tests"] if t["name"].startswith("test_xid_events")]
    assert (test["action"]["action"], test["action"]["cause"]) == (action, cause)
    md = (rep / "summary.md").read_text()
    host_line = next(ln for ln in md.splitlines() if ln.startswith("- **FAIL** `h200-a`"))
    assert f" → **{action}** [{cause}] (" in host_line, host_line
    if cause == "contention":  # the application named, and the cause with its evidence beside the finding
        assert "an application that is not gpuaccept's" in f["line"] and "gpuaccept's own" not in f["line"]
        assert (f["cause"]["class"], f["cause"]["kind"], f["cause"]["evidence"]["process_names"]) == (
            "contention", "foreign_app_xid", ["train.py"])
    else:
        assert "cause" not in f and "not gpuaccept's" not in f["line"]
