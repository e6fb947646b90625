"""The GPU scenario runner (benchmarks/scenarios) on this GPU-less machine: its reading of scenario files and its
one-line refusal of a malformed one; its expectations checked against report folders of real gpuaccept runs it
starts itself (the storage layer with real fio on the local connection: one scenario that holds, one that falls
short), and against runs replaying the 1xH200 captures (tests/data/replay-h200x1, tests/data/h200x1-foreign) with
the shipped scenarios' own expectations; its "needs N GPUs: not run"; and that every load it starts is gone,
process group and all, after the scenario, also when the scenario falls short.
"""
from __future__ import annotations

import dataclasses
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
from benchmarks.scenarios.execute import on_sku
from benchmarks.scenarios.expect import _cards, _check_figure, check_command, check_folder
from benchmarks.scenarios.loads import LoadSet, group_alive, stop_group
from benchmarks.scenarios.peers import babelstream_dot, mamf_median
from benchmarks.scenarios.signals import Signaller, processes, wait_clean
from gpuaccept.judging.nccl_table import parse_table
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
    killed = next(s for s in found if s.name == "controller-killed-ssh")
    assert killed.connection == "ssh" and [(g.signal, g.to, g.when, g.after_s) for g in killed.runs[0].signals] == [
        ("KILL", "run", "gpu-busy", 1.0)]
    frozen = next(s for s in found if s.name == "nccl-frozen-rank").runs[0].signals[0]
    assert (frozen.signal, frozen.to) == ("STOP", "match:nccl_allreduce.py --worker")
    assert list(next(s for s in found if s.name == "two-names").hosts) == ["name-a", "name-b"]
    nightly = next(s for s in found if s.name == "burnin-then-nightly")
    assert nightly.history and nightly.runs[1].after_run == "burnin"
    capture = next(s for s in found if s.name == "capture-healthy")
    assert [r.kind for r in capture.runs] == ["command", "probe", "probe"] and capture.optional
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
    ({"claim": "x", "run": {"signals": [{"signal": "USR9"}]}}, "runs[0].signals[0].signal"),
    ({"claim": "x", "run": {"signals": [{"signal": "KILL", "when": "later"}]}}, "runs[0].signals[0].when"),
    ({"claim": "x", "run": {"signals": [{"signal": "KILL", "to": "match:"}]}}, "runs[0].signals[0].to"),
    ({"claim": "x", "runs": [{"name": "a", "after_run": "b"}, {"name": "b"}]}, "runs[0].after_run"),
    ({"claim": "x", "run": {"command": "nvidia-smi -q"}}, "runs[0].command"),
    ({"claim": "x", "run": {"command": ["true"], "expect": {"verdict": "PASS"}}}, "runs[0].expect.verdict"),
    ({"claim": "x", "run": {"expect": {"node_clean_s": -1}}}, "runs[0].expect.node_clean_s"),
    ({"claim": "x", "run": {"expect": {"exit": "2"}}}, "runs[0].expect.exit"),
    ({"claim": "x", "run": {"expect": {"hosts": {"a": {"verdict": "RED"}}}}}, "runs[0].expect.hosts.a.verdict"),
    ({"claim": "x", "hosts": ["a", "b"], "run": {}}, "hosts"),
    ({"claim": "x", "history": "yes", "run": {}}, "history"),
    ({"claim": "x", "loads": [{"kind": "gpu-copy", "start": {"gpu_busy": False}}], "run": {}}, "loads[0].start"),
    ({"claim": "x", "loads": [{"kind": "gpu-copy", "start": {"gpu_busy": True, "after_s": "soon"}}], "run": {}},
     "loads[0].start.after_s"),
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


def test_a_load_started_once_the_run_uses_a_gpu_reads_as_such(tmp_path):
    """``start: {gpu_busy: true, after_s: N}``: N seconds after a compute process of the run shows on a GPU,
    whatever the run's test order (copy-during-compute)."""
    path = write(tmp_path / "sc", "busy", {"claim": "x", "run": {"markers": "compute"},
                                           "loads": [{"kind": "gpu-copy", "start": {"gpu_busy": True, "after_s": 1}}]})
    (ld,) = spec.load_file(str(path)).loads
    assert (ld.gpu_busy, ld.after_s, ld.after_test) == (True, 1.0, None)
    (shipped,) = spec.load_file(str(SHIPPED / "copy-during-compute.yaml")).loads
    assert shipped.gpu_busy and shipped.after_s == 1.0


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


def test_a_scenario_written_for_one_sku_runs_on_the_sku_found():
    """A scenario declaring the H200 SXM, run on an H100: its gpu_sku and its site thresholds' key become the
    machine's; without a detected SKU, or on its own, the scenario is left as written."""
    sc = spec.load_file(str(SHIPPED / "slow-figure-confirmed.yaml"))
    moved = on_sku(sc, "h100-sxm5-80gb")
    assert moved.inventory["gpu_sku"] == "h100-sxm5-80gb" and list(moved.site_thresholds) == ["h100-sxm5-80gb"]
    assert moved.site_thresholds["h100-sxm5-80gb"] == sc.site_thresholds["h200-sxm-141gb"]
    assert on_sku(sc, None) is sc and on_sku(sc, "h200-sxm-141gb") is sc
    named = dataclasses.replace(sc, hosts={"a": {"gpu_sku": "h200-sxm-141gb"}, "b": {}})
    assert on_sku(named, "h100-sxm5-80gb").hosts == {"a": {"gpu_sku": "h100-sxm5-80gb"}, "b": {}}


def test_a_floor_written_as_floor_is_each_figures_own_limit():
    """``min: floor`` holds when every figure is at or above the limit its run judged it against, and falls short
    on one below it (the H200's 4300 GB/s or an H100's own floor alike)."""
    fig = (lambda v, m: {"check": "hbm_read_bw_gbps", "value": v, "limit": {"min": m}})
    ok = {"tests": [{"figures": [fig(4615.0, 4300.0)]}]}
    low = {"tests": [{"figures": [fig(4615.0, 4300.0), fig(3100.0, 3000.0), fig(2900.0, 3000.0)]}]}
    assert _check_figure("hbm_read_bw_gbps", {"min": "floor"}, ok, {})[2] is True
    expected, seen, holds = _check_figure("hbm_read_bw_gbps", {"min": "floor"}, low, {})
    assert holds is False and "2900 (floor 3000.0)" in seen and "floor" in expected
    assert _check_figure("hbm_read_bw_gbps", {"min": "floor", "gpus": 2}, ok, {})[2] is False  # one figure of two


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


# -- set-ups the GPU scenarios need, on real runs ----------------------------------------------------------------
def test_a_real_run_sigtermed_and_one_sigkilled_mid_probe(tmp_path):
    """A storage run (real fio, 30 s) sent SIGTERM once fio runs: exit 2, INTERRUPTED, the running test an
    error naming the signal, nothing of the run left within 10 s; another SIGKILLed (the controller gone): exit
    -9 and the node clean within the 5 s promise; a third expects the node clean with no signal sent: falls
    short."""
    inv = {**storage_inventory(tmp_path), "storage_paths": ["{folder}/nvme0"]}
    inv["storage_fio"] = {**inv["storage_fio"], "runtime": 30}
    run = {"name": "run", "markers": "storage", "keyword": "local_storage"}
    fio = {"to": "run", "when": "match:--output-format", "after_s": 1}
    sc = tmp_path / "sc"
    write(sc, "term", {"claim": "t", "gpus": 0, "inventory": inv, "run": {
        **run, "signals": [{"signal": "TERM", **fio}], "expect": {
            "exit": 2, "interrupted": True, "summary": ["INTERRUPTED"], "node_clean_s": 10, "tests": {
                "test_local_storage_throughput": {"outcome": "error", "cause": "interruption",
                                                  "message": ["interrupted (SIGTERM) while running on gpu-node"]}}}}})
    write(sc, "kill", {"claim": "k", "gpus": 0, "inventory": inv, "run": {
        **run, "signals": [{"signal": "KILL", **fio}], "expect": {"exit": -9, "node_clean_s": 5}}})
    write(sc, "nosignal", {"claim": "n", "gpus": 0, "inventory": {**inv, "storage_fio": storage_inventory(
        tmp_path)["storage_fio"]}, "run": {**run, "expect": {"exit": 0, "node_clean_s": 5}}})
    res = runner("--scenarios", str(sc), "--out", str(tmp_path / "out"), "--gpus", "0")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    term, kill = table_rows(res.stdout, "term"), table_rows(res.stdout, "kill")
    assert len(term) == 5 and all(ln.endswith("holds") for ln in term), term
    assert len(kill) == 2 and all(ln.endswith("holds") for ln in kill), kill
    nosig = table_rows(res.stdout, "nosignal")
    assert nosig[0].endswith("holds") and "no signal was sent" in nosig[1] and nosig[1].endswith("FALLS SHORT")
    seen = json.loads((tmp_path / "out" / "kill" / "scenario.json").read_text())["runs"]["run"]
    assert seen["rc"] == -9 and 0 <= seen["clean_s"] <= 5 and seen["signals"][0].startswith("KILL to run pid ")
    assert (tmp_path / "out" / "term" / "nvme0").is_dir()  # {folder} in a *_paths var: made


def test_a_command_then_two_inventory_names_after_it_with_one_history(tmp_path):
    """A command run, then (after_run) a gpuaccept run over two inventory names of this machine sharing the
    scenario's history database: the command's exit and words, each name's verdict, the summary's words; a
    name's wrong verdict falls short."""
    inv = storage_inventory(tmp_path)
    write(tmp_path / "sc", "pair", {"claim": "p", "gpus": 0, "history": True, "inventory": inv,
                                    "hosts": {"name-a": {}, "name-b": {"storage_fio": inv["storage_fio"]}},
                                    "runs": [
        {"name": "cmd", "command": ["sh", "-c", "sleep 1; echo ready in {folder}"],
         "expect": {"exit": 0, "output": ["ready in " + str(tmp_path / "out" / "pair")]}},
        {"name": "run", "after_run": "cmd", "markers": "storage", "keyword": "local_storage", "expect": {
            "verdict": "PASS", "summary": ["name-a", "name-b"],
            "hosts": {"name-a": {"verdict": "PASS"}, "name-b": {"verdict": "FAIL"}}}}]})
    res = runner("--scenarios", str(tmp_path / "sc"), "--out", str(tmp_path / "out"), "--gpus", "0")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    rows = table_rows(res.stdout, "pair")
    assert [ln.rsplit("  ", 1)[1].strip() for ln in rows] == ["holds"] * 4 + ["FALLS SHORT", "holds"], rows
    assert "name-b verdict FAIL" in rows[4] and " PASS " in rows[4]
    out = tmp_path / "out" / "pair"
    assert (out / "history.sqlite").stat().st_size > 0
    assert yaml.safe_load((out / "inventory.yml").read_text())["all"]["hosts"].keys() == {"name-a", "name-b"}
    first_line = (out / "run" / "results.jsonl").read_text().splitlines()[0]
    assert (out / "cmd.txt").stat().st_mtime <= os.stat(out / "run" / "results.jsonl").st_mtime and first_line


def test_a_signal_to_a_matching_process_and_the_wait_for_a_clean_node(tmp_path):
    """STOP to the newest process below the run whose command line holds the text (a frozen rank): it stops;
    once the run's group is killed, wait_clean reports the seconds until none of the run is left."""
    proc = subprocess.Popen([sys.executable, "-c", "import subprocess; subprocess.Popen(['sleep', '77']).wait()"],
                            start_new_session=True)
    try:
        sig = Signaller([spec.Signal("STOP", "match:sleep 77", "match:sleep 77", 0.2)], proc,
                        str(tmp_path / "none.jsonl"), True, set())
        deadline = time.monotonic() + 20
        while not sig.sent and time.monotonic() < deadline:
            sig.poll()
            time.sleep(0.05)
        assert sig.sent and sig.sent[0].startswith("STOP to match:sleep 77 pid ") and not sig.last_to_run
        stopped = int(sig.sent[0].split(" pid ")[1].split()[0])
        assert processes()[stopped][2] == "T" and stopped in sig.tracked and proc.pid in sig.tracked
    finally:
        t = time.monotonic()
        stop_group(proc)
    clean = wait_clean(sig.tracked, t, set(), limit_s=10, run_pid=proc.pid)
    assert clean is not None and clean < 10
    assert wait_clean({stopped, os.getpid()}, time.monotonic(), set(), limit_s=0.3) is None  # this one lives


def test_one_card_per_gpu_and_a_command_run_are_judged_from_what_they_wrote():
    fig = lambda gpu, bus, serial: {"check": "bf16_tflops", "gpu": gpu, "pci_bus_id": bus, "serial": serial,  # noqa: E731
                                    "value": 1.0}
    good = {"format": 2, "tests": [{"figures": [fig(0, "0000:18:00.0", "a"), fig(1, "0000:2A:00.0", "b")]},
                                   {"figures": [fig(0, "0000:18:00.0", "a"), fig(1, "0000:2a:00.0", "b")]}]}
    assert _cards(good) == ("GPU 0: 0000:18:00.0; GPU 1: 0000:2a:00.0", True)
    swapped = {"format": 2, "tests": good["tests"][:1] + [{"figures": [fig(0, "0000:2a:00.0", "b"),
                                                                      fig(1, "0000:18:00.0", "a")]}]}
    assert _cards(swapped)[1] is False and _cards({"tests": []})[1] is False
    rows = check_command("s", "smi", {"exit": 0, "output": ["<product_name>", "H200"]}, 0, "<product_name>NVIDIA")
    assert [r.holds for r in rows] == [True, False] and rows[1].seen == "missing: H200"
    assert check_command("s", "smi", {"exit": 0}, None, "")[0].seen == "stopped at its timeout"


# -- the peers' output, as each tool prints it (tests/data/peers) ------------------------------------------------
PEERS = DATA / "peers"


def test_babelstream_dot_from_its_csv_and_its_table():
    assert babelstream_dot((PEERS / "babelstream-csv.txt").read_text()) == 4525.13
    assert babelstream_dot((PEERS / "babelstream-table.txt").read_text()) == 4525.13
    no_dot = "\n".join(ln for ln in (PEERS / "babelstream-csv.txt").read_text().splitlines() if "Dot" not in ln)
    assert babelstream_dot(no_dot) is None and babelstream_dot("Dot,100,2") is None


def test_mamf_finder_median_from_its_stdout():
    text = (PEERS / "mamf-finder-bf16.txt").read_bytes().decode()  # its \r kept, as a pipe delivers it
    assert "\r" in text and "\033[K" in text  # as printed to a console
    assert mamf_median(text) == 663.7
    assert mamf_median(text.replace("\r", "\n")) == 663.7  # read with universal newlines (peers.py)
    assert mamf_median(text.split("Tried 1 shapes")[0]) is None  # interrupted before finish(): no result line


def test_nccl_tests_all_reduce_perf_table():
    rows = parse_table((PEERS / "nccl-tests-all_reduce_perf.txt").read_text())
    assert len(rows) == 1
    r = rows[0]
    assert (r["bytes"], r["count"], r["type"], r["redop"]) == (4294967296, 1073741824, "float", "sum")
    assert (r["oop_time_us"], r["oop_busbw_gbps"], r["ip_time_us"], r["ip_busbw_gbps"]) == (12540.6, 342.48,
                                                                                         12521.8, 343.0)
    assert r["ip_wrong"] == 0 and r["ip_algbw_gbps"] == r["ip_busbw_gbps"]  # 2 ranks: busbw = algbw x 2(n-1)/n


def test_the_peers_as_they_printed_on_an_h200():
    """Real outputs of the peers scenario on a 1×H200 (2026-12-05, tests/data/peers/h200-*.log, as the runner
    logged them): BabelStream's CSV after its CMake build, and mamf-finder bf16 and fp8 at 8192³."""
    assert babelstream_dot((PEERS / "h200-babelstream-csv.log").read_text()) == 4436.79
    assert mamf_median((PEERS / "h200-mamf-finder-bf16.log").read_text()) == 671.4
    assert mamf_median((PEERS / "h200-mamf-finder-fp8.log").read_text()) == 1254.8


def test_a_hosts_verdict_counts_the_fleet_wide_failures_filed_under_it(tmp_path):
    """A fleet-wide test failing two names (one machine under both) makes each name FAIL in the runner's ``hosts``
    check, as in summary.md: the verdicts are taken over the run's selected hosts."""
    from gpuaccept.reporting.records import CaseRecord
    from gpuaccept.reporting.reporter import Reporter
    rep = Reporter(str(tmp_path / "run"), "run", {"hosts": ["name-a", "name-b"], "inventory": "i.yml"})
    for h in ("name-a", "name-b"):
        rep.add(CaseRecord(f"suites/test_health.py::test_ecc[{h}]", f"test_ecc[{h}]", h, "health", "passed"))
    entries = [{"host": h, "gpu": None, "line": f"{h}: reports the same GPU as {o}", "check": "same_gpus",
                "action": {"action": "fix-config", "cause": "configuration"},
                "cause": {"class": "configuration", "kind": "same_gpus", "host": h}}
               for h, o in (("name-a", "name-b"), ("name-b", "name-a"))]
    rep.add(CaseRecord("suites/test_health.py::test_fleet_consistency", "test_fleet_consistency", None, "health",
                       "failed", "name-a: reports the same GPU as name-b\nname-b: reports the same GPU as name-a",
                       failures=entries, causes=[e["cause"] for e in entries]))
    rep.close("x")
    rows = check_folder("two-names", "run", {"hosts": {"name-a": {"verdict": "FAIL"}, "name-b": {"verdict": "FAIL"}}},
                        str(tmp_path / "run"), {}, {})
    assert [(r.seen, r.holds) for r in rows] == [("FAIL", True), ("FAIL", True)], rows
