"""The GPU scenario runner (benchmarks/scenarios) on this GPU-less machine: its reading of scenario files and its
one-line refusal of a malformed one; its expectations checked against report folders of real gpuaccept runs it
starts itself (the storage layer with real fio on the local connection: one scenario that holds, one that falls
short), and against runs replaying the 1xH200 captures (tests/data/replay-h200x1, tests/data/h200x1-foreign) with
the shipped scenarios' own expectations; its "needs N GPUs: not run"; and that every load it starts is gone,
process group and all, after the scenario, also when the scenario falls short.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from benchmarks.scenarios import spec
from benchmarks.scenarios.expect import check_folder
from benchmarks.scenarios.loads import LoadSet, group_alive
from project_helpers import REPO

SHIPPED = REPO / "benchmarks" / "scenarios"
DATA = REPO / "tests" / "data"


def runner(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m benchmarks.scenarios ARGS`` from the repository root, as an operator runs it."""
    return subprocess.run([sys.executable, "-m", "benchmarks.scenarios", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def write(folder: Path, name: str, doc: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def table_rows(stdout: str, scenario: str) -> list[str]:
    return [ln for ln in stdout.splitlines() if ln.startswith(scenario + " ")]


def storage_inventory(tmp_path: Path, min_free: int = 64 << 20) -> dict:
    data = tmp_path / "nvme0"
    data.mkdir(exist_ok=True)
    return {"storage_paths": [str(data)], "storage_allow_root_fs": True,
            "storage_fio": {"size": 8 << 20, "runtime": 1, "numjobs": 1, "iodepth": 4, "min_free_bytes": min_free},
            "storage_limits": {"seq_read_gbps": 0.0001}}


# -- reading scenario files ------------------------------------------------------------------------------------
def test_every_shipped_scenario_reads_and_lists(tmp_path):
    found = spec.load_dir(str(SHIPPED))
    names = {s.name for s in found}
    assert {"healthy", "foreign-after-preflight", "copy-during-compute", "idle-context", "cuda-visible-devices-empty",
            "host-load", "two-runs", "no-pynvml", "burnin-hung-rank", "peers"} <= names
    assert all(s.claim and s.runs for s in found)
    two = next(s for s in found if s.name == "two-runs")
    assert [r.name for r in two.runs] == ["first", "second"] and two.runs[1].after_s == 6
    host = next(s for s in found if s.name == "host-load")
    assert host.loads[0].kind == "host-copy" and host.loads[0].threads == 12 and host.loads[0].after_s is None
    assert next(s for s in found if s.name == "healthy-ssh").references() == ["healthy"]
    res = runner("--list")
    assert res.returncode == 0, res.stderr
    assert any(ln.startswith("peers ") and "optional" in ln for ln in res.stdout.splitlines())


@pytest.mark.parametrize("doc, key", [
    ({"gpus": 1, "run": {"markers": "health"}}, "claim"),
    ({"claim": "x", "run": {"markers": "health"}, "lods": []}, "lods"),
    ({"claim": "x", "run": {"markrs": "health"}}, "runs[0].markrs"),
    ({"claim": "x", "loads": [{"kind": "gpu-fire"}], "run": {}}, "loads[0].kind"),
    ({"claim": "x", "loads": [{"kind": "gpu-idle", "start": "later"}], "run": {}}, "loads[0].start"),
    ({"claim": "x", "run": {"expect": {"tests": {"test_ecc": {"outcome": "fine"}}}}}, "runs[0].expect.tests.test_ecc.outcome"),
    ({"claim": "x", "run": {"expect": {"verdict": "GREEN"}}}, "runs[0].expect.verdict"),
    ({"claim": "x", "gpus": "two", "run": {}}, "gpus"),
    ({"claim": "x", "connection": "telnet", "run": {}}, "connection"),
    ({"claim": "x", "peers": [{"peer": "stream", "figure": "a", "floor": 1}]}, "peers[0].peer"),
])
def test_a_malformed_scenario_is_refused_in_one_line_naming_file_and_key(tmp_path, doc, key):
    path = write(tmp_path / "sc", "bad", doc)
    with pytest.raises(spec.ScenarioError) as ei:
        spec.load_file(str(path))
    assert str(ei.value).startswith(f"{path}: {key}: ") and "\n" not in str(ei.value), str(ei.value)
    res = runner("--scenarios", str(tmp_path / "sc"), "--out", str(tmp_path / "out"), "--gpus", "0")
    assert res.returncode == 4 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [f"benchmarks.scenarios: {path}: {key}: " + str(ei.value).split(
        f"{key}: ", 1)[1]]
    assert not (tmp_path / "out").exists()  # nothing run


def test_not_yaml_and_an_unknown_name_are_refused(tmp_path):
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "broken.yaml").write_text("claim: [x\n")
    res = runner("--scenarios", str(tmp_path / "sc"))
    assert res.returncode == 4 and f"{tmp_path / 'sc' / 'broken.yaml'}: line " in res.stderr
    assert "not YAML" in res.stderr and "Traceback" not in res.stderr
    res = runner("no-such-scenario")
    assert res.returncode == 4 and "no-such-scenario: no such scenario (known: " in res.stderr


# -- expectations against real runs ------------------------------------------------------------------------------
def test_a_real_run_that_holds_and_one_that_falls_short(tmp_path):
    """Two scenarios over real fio on the local connection: the storage test passes (holds); the second expects
    it to error (falls short): exit 1, each expectation on its own line."""
    inv = storage_inventory(tmp_path)
    run = {"markers": "storage", "keyword": "local_storage"}
    sc = tmp_path / "sc"
    write(sc, "storage-ok", {"claim": "local storage measured and passing", "gpus": 0, "inventory": inv,
                             "run": {**run, "name": "ok", "expect": {
                                 "verdict": "PASS", "none": ["failed", "error"],
                                 "tests": {"test_local_storage_throughput": {"outcome": "passed"}},
                                 "figures": {f"seq_read_gbps {inv['storage_paths'][0]}": {"min": 0.0001}}}}})
    write(sc, "storage-short", {"claim": "expects what does not happen", "gpus": 0, "inventory": inv,
                                "run": {**run, "name": "short", "expect": {
                                    "verdict": "ERROR",
                                    "tests": {"test_local_storage_throughput": {"outcome": "error",
                                                                                "message": ["held by"]}}}}})
    res = runner("--scenarios", str(sc), "--out", str(tmp_path / "out"), "--gpus", "0")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    ok = table_rows(res.stdout, "storage-ok")
    assert len(ok) == 4 and all(ln.endswith("holds") for ln in ok), ok
    short = table_rows(res.stdout, "storage-short")
    assert len(short) == 2 and all(ln.endswith("FALLS SHORT") for ln in short), short
    assert "PASS" in short[0] and "passed" in short[1]  # what was seen beside what was expected
    assert "# 4 of 6 expectations hold or were not run; 2 fall short" in res.stdout
    for name, run_name in (("storage-ok", "ok"), ("storage-short", "short")):
        assert (tmp_path / "out" / name / run_name / "results.json").exists()
        assert json.loads((tmp_path / "out" / name / "scenario.json").read_text())["rc"] == {run_name: 0}


def test_an_error_with_its_cause_and_action_is_checked_from_the_record(tmp_path):
    """A real run whose storage path lacks the free space asked: ERROR, action free-space [capacity]; the
    expectation on cause class and action holds, the wrong class falls short."""
    st = os.statvfs(tmp_path)
    inv = storage_inventory(tmp_path, min_free=st.f_bavail * st.f_frsize + (4 << 30))
    write(tmp_path / "sc", "full", {"claim": "a full disk reads capacity", "gpus": 0, "inventory": inv,
                                    "run": {"name": "run", "markers": "storage", "keyword": "local_storage"}})
    res = runner("--scenarios", str(tmp_path / "sc"), "--out", str(tmp_path / "out"), "--gpus", "0")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    folder = str(tmp_path / "out" / "full" / "run")
    want = {"verdict": "ERROR", "never": ["drain-rma", "reset-gpu", "reboot"], "action": {"action": "free-space"},
            "tests": {"test_local_storage_throughput": {"outcome": "error", "cause": "capacity",
                                                        "action": "free-space", "message": ["not enough free space"]}}}
    rows = check_folder("full", "run", want, folder)
    assert [r.holds for r in rows] == [True] * 4, [(r.expected, r.seen) for r in rows]
    wrong = check_folder("full", "run", {"tests": {"test_local_storage_throughput": {"outcome": "error",
                                                                                    "cause": "hardware"}}}, folder)
    assert [r.holds for r in wrong] == [False]


def replayed(tmp_path: Path, shipped: str, captures: Path) -> subprocess.CompletedProcess:
    """The shipped scenario ``shipped``'s run and expectations, on a host replaying ``captures`` (a 1xH200
    capture folder) at the standard profile (the captures' arguments), loads left out (the capture holds them)."""
    sc = spec.load_file(str(SHIPPED / f"{shipped}.yaml"))
    run = sc.runs[0]
    doc = {"claim": sc.claim, "gpus": 0, "env": {k: v for k, v in sc.env.items() if k != "CUDA_VISIBLE_DEVICES"},
           "inventory": {**sc.inventory, "gpus_per_node": 1, "gpuaccept_replay": str(captures)},
           "run": {"name": run.name, "markers": run.markers, "keyword": run.keyword, "expect": run.expect}}
    write(tmp_path / "sc", shipped, doc)
    return runner("--scenarios", str(tmp_path / "sc"), "--out", str(tmp_path / "out"), "--gpus", "0")


def with_capture(tmp_path: Path, probe: str, foreign: str) -> Path:
    """A copy of the 1xH200 healthy captures with ``probe``'s document replaced by the foreign capture's."""
    dst = tmp_path / "captures"
    shutil.copytree(DATA / "replay-h200x1", dst)
    target = next(dst.glob(f"{probe}-*.json"))
    saved = json.loads(target.read_text())
    saved["doc"] = json.loads((DATA / "h200x1-foreign" / f"{foreign}.json").read_text())["doc"]
    target.write_text(json.dumps(saved))
    return dst


@pytest.mark.parametrize("shipped, probe, foreign", [
    ("healthy", None, None),
    ("idle-context", "gpu_inventory", "gpu_inventory-idle-context"),
    ("cuda-visible-devices-empty", "gpu_inventory", "gpu_inventory-cuda-visible-devices-empty"),
])
def test_shipped_expectations_hold_on_replayed_h200_readings(tmp_path, shipped, probe, foreign):
    caps = with_capture(tmp_path, probe, foreign) if probe else DATA / "replay-h200x1"
    res = replayed(tmp_path, shipped, caps)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    rows = table_rows(res.stdout, shipped)
    assert rows and all(ln.endswith("holds") for ln in rows), rows


def test_a_replayed_healthy_node_falls_short_of_a_sick_nodes_expectations(tmp_path):
    res = replayed(tmp_path, "idle-context", DATA / "replay-h200x1")
    assert res.returncode == 1
    rows = table_rows(res.stdout, "idle-context")
    assert any("test_preflight error" in ln and ln.endswith("FALLS SHORT") for ln in rows), rows


# -- scenarios it cannot run; loads it started -----------------------------------------------------------------
def test_a_scenario_needing_more_gpus_is_not_run(tmp_path):
    write(tmp_path / "sc", "pair", {"claim": "needs two", "gpus": 2, "loads": [{"kind": "sleep"}],
                                    "run": {"markers": "health"}})
    res = runner("--scenarios", str(tmp_path / "sc"), "--out", str(tmp_path / "out"), "--gpus", "1")
    assert res.returncode == 0, res.stderr
    rows = table_rows(res.stdout, "pair")
    assert len(rows) == 1 and "needs 2 GPUs: not run" in rows[0] and rows[0].endswith("not run")
    assert not (tmp_path / "out" / "pair").exists()


def _children_of_group(pgid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d))
    return out


def test_a_load_is_stopped_with_its_whole_process_group():
    with LoadSet() as loads:
        p = loads.start("sleep")
        deadline = time.monotonic() + 30
        while len(_children_of_group(p.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        members = _children_of_group(p.pid)
        assert len(members) == 2 and group_alive(p.pid)  # the load and its `sleep 1000`
    assert not group_alive(p.pid) and _children_of_group(p.pid) == []
    assert p.returncode is not None


def test_the_loads_of_a_scenario_that_falls_short_are_gone_after_it(tmp_path):
    """A host-copy load (one thread) and a `sleep` load started before a run whose expectation falls short:
    after the runner returns, no process of either load's group is left."""
    write(tmp_path / "sc", "loaded", {
        "claim": "loads stopped", "gpus": 0,
        "loads": [{"kind": "host-copy", "threads": 1, "settle_s": 1}, {"kind": "sleep", "start": {"after_s": 0}}],
        "run": {"name": "run", "markers": "health", "keyword": "whoami_nothing",
                "expect": {"verdict": "FAIL"}}})
    res = runner("--scenarios", str(tmp_path / "sc"), "--out", str(tmp_path / "out"), "--gpus", "0")
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    info = json.loads((tmp_path / "out" / "loaded" / "scenario.json").read_text())
    pids = [pid for _, pid, _ in info["loads"]]
    assert [k for k, _, _ in info["loads"]] == ["host-copy", "sleep"] and len(pids) == 2
    assert all(not group_alive(pid) and _children_of_group(pid) == [] for pid in pids), pids
