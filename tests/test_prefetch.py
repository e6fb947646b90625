"""Prefetch across hosts (gpuaccept.runner.prefetch) against real sshd nodes on loopback, with real probes.

End to end (a fresh ``python -m pytest`` per run, the operator's way): a probe one host's test runs starts at
once on the hosts whose test of the same function is next; the documents, figures and outcomes are those of a
run one host at a time (``--forks 0``); a host whose probe fails reports its own error in its own test; an
item left out by ``-k`` gets nothing; a guess no test takes is killed on its node; SIGTERM leaves nothing
running. In process: the rules for which hosts get a probe fetched ahead (tests/README: no mocks; the
ItemInfo lists are the data the plugin builds from pytest's items).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuaccept.runner import prefetch
from gpuaccept.errors import CommandTimeout, HostUnreachable, ProbeError
from gpuaccept.config.inventory import load_inventory
from gpuaccept.runner.host import PROBE_DIR, HostRunner, probe_files
from gpuaccept.runner.ship import agent_files
from gpuaccept.transport import cancel_all, get_transport, reset_interruption, running
from process_helpers import procs_with
from sshd import run_leftovers, start_nodes_with_tmp, start_sshd, write_known_hosts

REPO = Path(__file__).resolve().parent.parent

SUITE = '''
import pytest

pytestmark = pytest.mark.storage


def test_a_mounts(node, verdicts):
    doc = node.probe("storage_mounts", {"paths": ["/", "/proc"]})
    for p in doc["paths"]:
        verdicts.record(f"fstype {p['path']}", p["fstype"], extra={"mount_point": p["mount_point"]})


def test_b_torch(node, verdicts):
    doc = node.probe("launch_overhead", {"device": "cpu", "iters": 200})
    verdicts.record("launch_us", doc["gpus"][0]["launch_us_wall"], "us")


def test_c_env(node, verdicts):
    doc = node.probe("nccl_env", {"login_shell": False})
    verdicts.record("nccl_found", len(doc["found"]), extra={"effective": doc["effective"]})
'''

# a gloo all-reduce (two rank processes under the probe, under the node-side watchdog) that runs for hours
LONG = {"backend": "gloo", "world_size": 2, "min_bytes": 4096, "max_bytes": 4096, "iters": 10 ** 9, "reps": 1,
        "warmup": 1}

LONG_SUITE = f'''
import pytest

pytestmark = pytest.mark.nccl


def test_1_long(node, verdicts):
    doc = node.probe("nccl_allreduce", {LONG!r})
    verdicts.record("wrong_total", doc["wrong_total"], "elements")


def test_2_after(node, verdicts):
    verdicts.record("ran", node.run("echo ran").stdout.decode().strip())
'''

# p1 (no torch) fails at once; its probe, fetched ahead on p2, runs for hours until p2's test skips
GUESS_SUITE = f'''
import os, time
import pytest

pytestmark = pytest.mark.nccl


def test_long(node, verdicts):
    if node.name == "p2":
        while not os.path.exists(os.environ["PF_GO"]):
            time.sleep(0.1)
        pytest.skip("p2: nothing to measure here")
    node.probe("nccl_allreduce", {LONG!r})
'''


# -- rig -------------------------------------------------------------------------------------------------
def nodes_with_tmp(base: Path, addresses: tuple[str, ...]):
    """:func:`sshd.start_nodes_with_tmp` nodes p1, p2...: each session's TMPDIR is ``node.tmp``."""
    return start_nodes_with_tmp(base, addresses, "p", log_level="INFO")


def procs_in(tmp: Path) -> list[str]:
    """Command lines of live processes whose command line or working directory is below ``tmp``."""
    return procs_with(str(tmp))


def ranks_on(node) -> int:
    return len([c for c in procs_in(node.tmp) if "--worker" in c])


@contextlib.contextmanager
def rig(tmp_path: Path, base: Path, addresses: tuple[str, ...], suite: str, host_vars: dict | None = None):
    """sshd nodes at ``addresses`` (:func:`nodes_with_tmp` under ``base``), their known_hosts and a project in
    ``tmp_path`` running ``suite`` (:func:`project`): yields ``(nodes, known_hosts, inventory)``; stops the
    nodes after."""
    nodes = nodes_with_tmp(base, addresses)
    try:
        yield nodes, write_known_hosts(base / "known_hosts", nodes), project(tmp_path, nodes, suite, host_vars)
    finally:
        for n in nodes:
            n.stop()


def project(root: Path, nodes, suite: str, host_vars: dict | None = None) -> Path:
    """A gpuaccept project in ``root`` (the plugin, thresholds and one suite file); returns the inventory."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "pytest.ini", root / "pytest.ini")
    shutil.copy(REPO / "conftest.py", root / "conftest.py")
    shutil.copytree(REPO / "thresholds", root / "thresholds")
    (root / "suites").mkdir()
    (root / "suites" / "test_pf.py").write_text(suite)
    inv = root / "inventory.ini"
    lines = []
    for n in nodes:
        extra = (host_vars or {}).get(n.name)
        lines.append(n.inventory_line(python=extra) if extra else n.inventory_line())
    inv.write_text("[gpu]\n" + "\n".join(lines) + "\n")
    return inv


def pytest_args(inv: Path, kh: str, rep: Path, log: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "--inventory", str(inv), "--known-hosts", kh, "--reports", str(rep),
            "-p", "no:randomly", "--log-file", str(log), "--log-file-level", "DEBUG",
            "--log-file-format", "%(created).3f %(name)s %(message)s", *extra]


def run(root: Path, inv: Path, kh: str, tag: str, *extra: str, env: dict | None = None):
    rep, log = root / f"rep-{tag}", root / f"log-{tag}"
    res = subprocess.run(pytest_args(inv, kh, rep, log, *extra), cwd=root, capture_output=True, text=True,
                         timeout=300, env={**os.environ, **(env or {})})
    return res, rep, log


RUN_LINE = re.compile(r"^(\d+\.\d+) gpuaccept\.run RUN (\S+) (.*?) rc=(\S+) (\d+\.\d+)s$", re.M | re.S)
PROBE_IN = re.compile(r"^agent \S+: (\w+)\.py ")  # a probe request to the host's agent (gpuaccept.runner.agent)


def probe_runs(log: Path) -> list[tuple[str, str, float, float]]:
    """(host, probe, start, end) of every probe command in a run's DEBUG log (gpuaccept.run's RUN lines,
    logged at the end of each command with its duration), in order of start."""
    out = []
    for m in RUN_LINE.finditer(log.read_text()):
        p = PROBE_IN.search(m.group(3))
        if p:
            end = float(m.group(1))
            out.append((m.group(2), p.group(1), end - float(m.group(5)), end))
    return sorted(out, key=lambda r: r[2])


AHEAD_LINE = re.compile(r"prefetch: (\S+) (\w+) for \S*\[(\S+)\] \(asked by \S*\[(\S+)\]\)")


def fetched_ahead(log: Path, probe: str) -> list[tuple[str, str]]:
    """(host, host whose test asked) for each ``probe`` the prefetcher started ahead (its DEBUG line at the
    decision, gpuaccept.runner.prefetch): the event itself, not a race of start and end times, which a loaded
    machine can order either way."""
    return [(m.group(1), m.group(4)) for m in AHEAD_LINE.finditer(log.read_text()) if m.group(2) == probe]


def docs(rep: Path, host: str) -> dict[str, dict]:
    """The probe documents a run saved for ``host``: probe name -> doc (``probe_seconds`` left out)."""
    out = {}
    for f in sorted((rep / "probes" / host).glob("*.json")):
        saved = json.loads(f.read_text())
        doc = {k: v for k, v in saved["doc"].items() if k != "probe_seconds"}
        out[saved["probe"]] = doc
    return out


def outcomes(rep: Path) -> dict[tuple[str, str], dict]:
    return {(t["host"], t["name"].split("[")[0]): t for t in json.loads((rep / "results.json").read_text())["tests"]}


def logins(node) -> int:
    return node.log().count("Accepted publickey")


@pytest.fixture
def bare_python(tmp_path_factory) -> str:
    """An interpreter without torch (a fresh venv beside this one): the node whose Python lacks a package."""
    d = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(d)], check=True, capture_output=True)
    py = str(d / "bin" / "python")
    assert subprocess.run([py, "-c", "import torch"], capture_output=True).returncode != 0
    return py


# -- end to end ------------------------------------------------------------------------------------------
def test_prefetched_at_once_and_same_as_one_host_at_a_time(tmp_path, tmp_path_factory):
    """Four hosts, three tests: one host at a time (--forks 0) the probes never overlap; with prefetch, each
    probe of host p1's test runs on p2..p4 at the same time. Outcomes, figures and the saved probe documents
    are the same; each host sees its probes in test order, one SSH login and no folder left behind."""
    with rig(tmp_path, tmp_path_factory.mktemp("pf"),
             ("127.0.0.80", "127.0.0.81", "127.0.0.82", "127.0.0.83"), SUITE) as (nodes, kh, inv):
        serial, rep_s, log_s = run(tmp_path, inv, kh, "serial", "--forks", "0")
        assert serial.returncode == 0, serial.stdout[-3000:] + serial.stderr[-2000:]
        before = {n.name: logins(n) for n in nodes}
        fetched, rep_f, log_f = run(tmp_path, inv, kh, "prefetch")
        assert fetched.returncode == 0, fetched.stdout[-3000:] + fetched.stderr[-2000:]
        assert {n.name: logins(n) - before[n.name] for n in nodes} == {n.name: 1 for n in nodes}

        a, b = outcomes(rep_s), outcomes(rep_f)
        assert len(a) == 12 and a.keys() == b.keys()
        for k in a:
            assert a[k]["outcome"] == b[k]["outcome"] == "passed", (a[k], b[k])
        for name in ("test_a_mounts", "test_c_env"):  # deterministic figures: the same values
            for n in nodes:
                fa = {f["check"]: (f["value"], f.get("extra")) for f in a[(n.name, name)]["figures"]}
                fb = {f["check"]: (f["value"], f.get("extra")) for f in b[(n.name, name)]["figures"]}
                assert fa == fb and fa, (fa, fb)
        for n in nodes:
            da, db = docs(rep_s, n.name), docs(rep_f, n.name)
            assert sorted(da) == sorted(db) == ["launch_overhead", "nccl_env", "storage_mounts"]
            assert da["storage_mounts"] == db["storage_mounts"]
            assert da["nccl_env"] == db["nccl_env"]
            assert da["launch_overhead"].keys() == db["launch_overhead"].keys()

        for log in (log_s, log_f):  # per host, the probes in test order
            runs = probe_runs(log)
            for n in nodes:
                assert [r[1] for r in runs if r[0] == n.name] == ["storage_mounts", "launch_overhead", "nccl_env"]
        lo_s = [r for r in probe_runs(log_s) if r[1] == "launch_overhead"]
        lo_f = {r[0]: r for r in probe_runs(log_f) if r[1] == "launch_overhead"}
        # one host at a time: each probe starts after the previous one ended
        assert all(nxt[2] >= prev[3] - 0.01 for prev, nxt in zip(lo_s, lo_s[1:])), lo_s
        # prefetch: p2..p4 started ahead when p1's test asked
        assert sorted(fetched_ahead(log_f, "launch_overhead")) == [(n.name, "p1") for n in nodes[1:]], lo_f
        assert fetched_ahead(log_s, "launch_overhead") == []
        for n in nodes:
            assert run_leftovers(n.tmp) == [], run_leftovers(n.tmp)  # the shipped folders were removed


def test_a_host_whose_fetched_probe_fails_reports_its_own_error(tmp_path, tmp_path_factory, bare_python):
    """p2's Python lacks torch: its launch_overhead, fetched ahead while p1's test ran, fails there, and p2's
    own test reports it (the same message as one host at a time); p1 and p3 pass."""
    with rig(tmp_path, tmp_path_factory.mktemp("pffail"),
             ("127.0.0.84", "127.0.0.85", "127.0.0.86"), SUITE, {"p2": bare_python}) as (nodes, kh, inv):
        msgs = {}
        for tag, extra in (("serial", ("--forks", "0")), ("prefetch", ())):
            res, rep, log = run(tmp_path, inv, kh, tag, "-k", "torch", *extra)
            assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
            o = outcomes(rep)
            assert o[("p1", "test_b_torch")]["outcome"] == o[("p3", "test_b_torch")]["outcome"] == "passed"
            t = o[("p2", "test_b_torch")]
            assert t["outcome"] == "error" and "torch" in t["message"] and t["message"].startswith("p2"), t
            msgs[tag] = t["message"]
            runs = {r[0]: r for r in probe_runs(log) if r[1] == "launch_overhead"}
            if tag == "prefetch":
                assert ("p2", "p1") in fetched_ahead(log, "launch_overhead"), runs  # started when p1's test asked
        assert msgs["serial"] == msgs["prefetch"]


def test_item_left_out_by_k_gets_nothing(tmp_path, tmp_path_factory):
    """``-k`` leaves out p2's test_a_mounts and every test of p3: p2 never runs storage_mounts (no document,
    no command), p3 is never even logged into; p1 and p4 get it fetched ahead as usual."""
    with rig(tmp_path, tmp_path_factory.mktemp("pfk"),
             ("127.0.0.87", "127.0.0.88", "127.0.0.89", "127.0.0.90"), SUITE) as (nodes, kh, inv):
        res, rep, log = run(tmp_path, inv, kh, "k", "-k", "(mounts or env) and not (mounts and p2) and not p3")
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
        runs = probe_runs(log)
        assert sorted((r[0], r[1]) for r in runs) == sorted(
            [("p1", "storage_mounts"), ("p4", "storage_mounts"), ("p1", "nccl_env"), ("p2", "nccl_env"),
             ("p4", "nccl_env")]), runs
        sm = {r[0]: r for r in runs if r[1] == "storage_mounts"}
        # fetched ahead for p4 when p1's test asked (p2 and p3 left out)
        assert fetched_ahead(log, "storage_mounts") == [("p4", "p1")], runs
        assert set(sm) == {"p1", "p4"}, sm
        assert sorted(docs(rep, "p2")) == ["nccl_env"]
        assert not (rep / "probes" / "p3").exists() and logins(nodes[2]) == 0


def test_a_guess_no_test_takes_is_killed(tmp_path, tmp_path_factory, bare_python):
    """p1 (no torch) fails its hours-long all-reduce at once; the same probe fetched ahead on p2 runs (its two
    ranks seen) until p2's test skips without asking for it: then it is killed on p2 and the run ends."""
    with rig(tmp_path, tmp_path_factory.mktemp("pfdrop"),
             ("127.0.0.91", "127.0.0.92"), GUESS_SUITE, {"p1": bare_python}) as (nodes, kh, inv):
        go = tmp_path / "go"
        rep, log = tmp_path / "rep", tmp_path / "log"
        proc = subprocess.Popen(pytest_args(inv, kh, rep, log, "--probe-timeout", "600"), cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PF_GO": str(go)})
        try:
            end = time.time() + 120
            while time.time() < end and ranks_on(nodes[1]) < 2:
                assert proc.poll() is None, proc.communicate()[0][-3000:]
                time.sleep(0.2)
            assert ranks_on(nodes[1]) >= 2  # the guess runs on p2 while p2's test waits
            go.write_text("")
            t0 = time.time()
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert time.time() - t0 < 60  # p2's guess killed at once, not left to its 600 s probe timeout
        assert proc.returncode == 1, out[-3000:]
        o = outcomes(rep)
        assert o[("p1", "test_long")]["outcome"] == "error" and "torch" in o[("p1", "test_long")]["message"]
        assert o[("p2", "test_long")]["outcome"] == "skipped"
        assert procs_in(nodes[1].tmp) == [] and procs_in(nodes[0].tmp) == []
        assert "nccl_allreduce" not in docs(rep, "p2")  # killed: nothing to save


def test_sigterm_while_probes_are_fetched_ahead_leaves_nothing(tmp_path, tmp_path_factory):
    """SIGTERM while p1's hours-long all-reduce runs and the same probe, fetched ahead, runs on p2 and p3: exit
    2 within seconds, no process of the run left on any node, nothing passed, nothing fetched afterwards."""
    with rig(tmp_path, tmp_path_factory.mktemp("pfsig"),
             ("127.0.0.93", "127.0.0.94", "127.0.0.95"), LONG_SUITE) as (nodes, kh, inv):
        rep, log = tmp_path / "rep", tmp_path / "log"
        proc = subprocess.Popen(pytest_args(inv, kh, rep, log, "--probe-timeout", "600"), cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            end = time.time() + 150
            while time.time() < end and not all(ranks_on(n) >= 2 for n in nodes):
                assert proc.poll() is None, proc.communicate()[0][-3000:]
                time.sleep(0.2)
            assert all(ranks_on(n) >= 2 for n in nodes), [ranks_on(n) for n in nodes]
            t0 = time.time()
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        seconds = time.time() - t0
        assert proc.returncode == 2, out[-3000:]
        assert seconds < 60, seconds  # within seconds, not at the 600 s probe timeout
        assert [procs_in(n.tmp) for n in nodes] == [[], [], []]
        o = outcomes(rep)
        assert len(o) == 6 and all(t["outcome"] == "error" for t in o.values()), o
        # p1's test names its own host only (the commands cut on p2 and p3 were fetched ahead for their tests)
        assert o[("p1", "test_1_long")]["message"].startswith("interrupted (SIGTERM) while running on p1: "), o
        assert o[("p2", "test_1_long")]["message"] == "not run: run interrupted"
        # one probe per host (all three ran ranks before the signal, checked above), none started after it. A RUN
        # line is written when its command returns: one cut while pytest closes its log file may miss the file
        runs = probe_runs(log)
        hosts = [r[0] for r in runs]
        assert "p1" in hosts and len(hosts) == len(set(hosts)) and set(hosts) <= {"p1", "p2", "p3"}, runs
        assert all(r[2] < t0 for r in runs), runs


# -- the rules, in process -------------------------------------------------------------------------------
@pytest.fixture
def runners(sshd_nodes, known_hosts, tmp_path):
    """HostRunners for the three session sshd nodes (node1..3), keeping documents under tmp_path/probes;
    node3 is told apart by an inventory variable when the test asks (``runners(node3_vars)``)."""
    made: list[HostRunner] = []

    def make(node3_vars: str = "") -> dict[str, HostRunner]:
        inv = tmp_path / f"inv{len(made)}.ini"
        lines = [n.inventory_line() + (f" {node3_vars}" if n.name == "node3" and node3_vars else "")
                 for n in sshd_nodes]
        inv.write_text("[gpu]\n" + "\n".join(lines) + "\n")
        hosts = load_inventory(str(inv)).hosts
        out = {}
        for n in sshd_nodes:
            r = HostRunner(hosts[n.name], lambda h: get_transport(h, known_hosts=known_hosts),
                           probe_timeout=60, save_dir=str(tmp_path / f"probes{len(made)}"))
            out[n.name] = r
            made.append(r)
        return out

    yield make
    for r in made:
        r.close()


def items(*spec: tuple[str, str | None]) -> list[prefetch.ItemInfo]:
    """ItemInfo in run order from (function, host) pairs; host None: a fleet test."""
    return [prefetch.ItemInfo(f"suites/test_r.py::{fn}[{h}]" if h else f"suites/test_r.py::{fn}", i, h,
                              (f"suites/test_r.py::{fn}", ()) if h else None) for i, (fn, h) in enumerate(spec)]


MOUNTS = {"paths": ["/"]}


def ask(pf: prefetch.Prefetcher, runner: HostRunner, nodeid: str, args: dict = MOUNTS, end: bool = True) -> dict:
    pf.begin(nodeid)
    try:
        return pf.probe(runner, "storage_mounts", args, None, None)
    finally:
        if end:
            pf.end(nodeid)


def test_prefetch_rules(runners):
    """Who gets a guess: the next tests of the same function, on hosts whose inventory variables match, the
    test's first call only, never a multi-host rank, nothing after an interrupt; the taken result is the one
    fetched (no second run on that host), an argument mismatch runs the host's own probe."""
    r = runners()
    seq = items(("t", "node1"), ("t", "node2"), ("t", "node3"))
    ids = [i.nodeid for i in seq]
    pf = prefetch.Prefetcher(seq, r.__getitem__, forks=4)
    try:
        ask(pf, r["node1"], ids[0])
        assert pf.stats["queued"] == 2
        n2 = ask(pf, r["node2"], ids[1])  # taken: the same document, saved once, no new command
        assert pf.stats["taken"] == 1 and n2["paths"][0]["path"] == "/"
        pf.begin(ids[2])  # node3 asks with other arguments: its own probe runs, the guess is dropped
        n3 = pf.probe(r["node3"], "storage_mounts", {"paths": ["/proc"]}, None, None)
        pf.end(ids[2])
        assert n3["paths"][0]["fstype"] == "proc" and pf.stats["taken"] == 1
    finally:
        pf.close()

    # a second call of the test (its arguments may come from the first result), a multi-host rank, and any
    # call after an interrupt fetch nothing ahead
    r = runners()
    pf = prefetch.Prefetcher(items(("t", "node1"), ("t", "node2"), ("t", "node3")), r.__getitem__, forks=4)
    try:
        pf.begin(ids[0])
        pf.probe(r["node1"], "storage_mounts", MOUNTS, None, None)
        pf.probe(r["node1"], "storage_mounts", {"paths": ["/proc"]}, None, None)
        with pytest.raises(ProbeError):  # a rank's arguments (storage_mounts refuses them: no rendezvous waits)
            pf.probe(r["node1"], "storage_mounts", {**MOUNTS, "nnodes": 2}, None, None)
        pf.end(ids[0])
        assert pf.stats["queued"] == 2  # the first call only
        pf2 = prefetch.Prefetcher(items(("u", "node1"), ("u", "node2")), r.__getitem__, forks=4)
        with pytest.raises(ProbeError):
            ask(pf2, r["node1"], "suites/test_r.py::u[node1]", {**MOUNTS, "nnodes": 2})
        assert pf2.stats["queued"] == 0
        pf2.close()
        cancel_all("SIGTERM")
        try:
            pf3 = prefetch.Prefetcher(items(("v", "node1"), ("v", "node2")), r.__getitem__, forks=4)
            pf3.begin("suites/test_r.py::v[node1]")
            pf3._spread(pf3.items["suites/test_r.py::v[node1]"], r["node1"], "storage_mounts", MOUNTS, None, None, "k")
            assert pf3.stats["queued"] == 0
            pf3.close()
        finally:
            reset_interruption()
    finally:
        pf.close()


def test_prefetch_keeps_each_hosts_test_order(runners):
    """No guess for a host whose next test is another one, or when a fleet test (no host) runs in between;
    none for a host whose inventory variables differ, nor for a replayed one."""
    r = runners()
    seq = items(("t", "node1"), ("w", "node2"), ("t", "node2"), ("t", "node3"))
    pf = prefetch.Prefetcher(seq, r.__getitem__, forks=4)
    ask(pf, r["node1"], seq[0].nodeid)
    assert {j.host for js in pf._slots.values() for j in js} == {"node3"}  # node2 runs test w first
    pf.close()

    seq = items(("t", "node1"), ("fleet", None), ("t", "node2"))
    pf = prefetch.Prefetcher(seq, r.__getitem__, forks=4)
    ask(pf, r["node1"], seq[0].nodeid)
    assert pf.stats["queued"] == 0
    pf.close()

    r = runners("storage_paths=/srv/other")
    seq = items(("t", "node1"), ("t", "node2"), ("t", "node3"))
    pf = prefetch.Prefetcher(seq, r.__getitem__, forks=4)
    ask(pf, r["node1"], seq[0].nodeid)
    assert {j.host for js in pf._slots.values() for j in js} == {"node2"}  # node3's variables differ
    pf.close()


def test_prefetch_waits_for_a_running_guess_and_never_overlaps_a_host(runners):
    """A test that asks while its guess still runs waits for that very run (one command on the host, not
    two), and a guess holds its host: a command of another thread there waits until it ends."""
    r = runners()
    seq = items(("t", "node1"), ("t", "node2"))
    pf = prefetch.Prefetcher(seq, r.__getitem__, forks=4)
    try:
        slow = {"device": "cpu", "iters": 20000}  # a second or two: torch's import alone
        pf.begin(seq[0].nodeid)  # node1's test asks: the guess for node2 starts (node1's own run left out here)
        pf._spread(pf.items[seq[0].nodeid], r["node1"], "launch_overhead", slow, None, None,
                   prefetch.probe_key("launch_overhead", slow, None, None))
        pf.end(seq[0].nodeid)
        job = pf._slots[seq[1].nodeid][0]
        end = time.time() + 120
        while job.state == "queued" and time.time() < end:
            time.sleep(0.01)
        assert job.state == "running"
        seen = []
        t = threading.Thread(target=lambda: seen.append((r["node2"].run("echo x").stdout, job.state)))
        t.start()
        t_take = time.time()
        pf.begin(seq[1].nodeid)
        doc = pf.probe(r["node2"], "launch_overhead", slow, None, None)
        pf.end(seq[1].nodeid)
        assert r["node2"].last_started("launch_overhead") < t_take  # when it ran, for windows such as burn-in's XIDs
        t.join(30)
        assert seen == [(b"x\n", "finished")]  # the other thread's command ran after the guess ended
        assert pf.stats == {"queued": 1, "run": 1, "taken": 1, "dropped": 0} and doc["iters"] == 20000
    finally:
        pf.close()


def test_gpu_fingerprint_tells_other_gpus_apart():
    """What a test derives probe arguments from (world size, dtypes by SKU): the real 2xH200 capture against
    copies altered here: another GPU's temperature and serial do not matter; a lost GPU, one GPU fewer, another
    name or memory size do."""
    saved = json.loads((REPO / "tests" / "data" / "replay-h200x2" / "gpu_inventory-bf21a9e8fb.json").read_text())
    doc = saved["doc"]
    fp = prefetch.gpu_fingerprint(doc)

    def altered(fn) -> dict:
        d = json.loads(json.dumps(doc))
        fn(d)
        return d

    def warmer(d):
        d["gpus"][1]["temp_c"] = 71
        d["gpus"][1]["serial"] = "1650924060000"

    assert prefetch.gpu_fingerprint(altered(warmer)) == fp
    for change in (lambda d: d["gpus"][1].update(lost=True), lambda d: d["gpus"].pop(),
                   lambda d: d["gpus"][0].update(name="NVIDIA H100 80GB HBM3"),
                   lambda d: d["gpus"][0].update(memory_total_bytes=85899345920)):
        assert prefetch.gpu_fingerprint(altered(change)) != fp


def test_a_gpu_test_gets_its_gpu_inventory_first_on_the_other_host(runners):
    """A test taking the ``gpus`` fixture: the guess on node2 runs node2's gpu_inventory first (as node2's test
    would, through its fixture), compares it with node1's (here: no GPU on either), then the probe."""
    r = runners()
    seq = [prefetch.ItemInfo(f"suites/test_r.py::g[{h}]", i, h, ("suites/test_r.py::g", ()), uses_gpus=True)
           for i, h in enumerate(("node1", "node2"))]
    pf = prefetch.Prefetcher(seq, r.__getitem__, forks=2)
    try:
        r["node1"].gpu_inventory()  # what node1's gpus fixture did
        ask(pf, r["node1"], seq[0].nodeid, end=True)
        doc = ask(pf, r["node2"], seq[1].nodeid)
        assert pf.stats["taken"] == 1 and doc["paths"][0]["path"] == "/"
        assert r["node2"].last_started("gpu_inventory") < r["node2"].last_started("storage_mounts")
    finally:
        pf.close()



# -- shipping the probes with the first probe ------------------------------------------------------------
def runner_on(node, kh: str, python: str = sys.executable) -> HostRunner:
    inv = node.dir / "inv.ini"
    inv.write_text(f"[gpu]\n{node.inventory_line(python=python)}\n")
    return HostRunner(load_inventory(str(inv)).hosts[node.name], lambda h: get_transport(h, known_hosts=kh),
                      probe_timeout=60)


def commands(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "gpuaccept.run"]


def test_one_agent_session_ships_and_serves_every_probe(tmp_path, caplog):
    """The first probe starts the host's agent (one command: mkdir, the node's Python reading the agent's files
    from stdin) and runs in it, its own files written beside them; every later probe is one request to the same agent, no command of its own;
    close() removes the folder inside the agent's session (no cleanup command). A missing interpreter says so,
    and its empty folder is removed too."""
    caplog.set_level("DEBUG", logger="gpuaccept.run")
    (node,) = nodes_with_tmp(tmp_path, ("127.0.0.96",))
    try:
        kh = write_known_hosts(tmp_path / "kh", [node])
        r = runner_on(node, kh)
        doc = r.probe("storage_mounts", {"paths": ["/"]})
        assert doc["paths"][0]["path"] == "/"
        ran = commands(caplog)
        (folder,) = run_leftovers(node.tmp)
        assert len(ran) == 2 and "mkdir -m 700" in ran[0] and "_agent" in ran[0] and "rc=0" in ran[0], ran
        assert ran[1].startswith(f"RUN p1 agent {folder}: storage_mounts.py ") and "rc=0" in ran[1], ran
        assert {p.name for p in folder.iterdir()} == set(agent_files()) | set(probe_files("storage_mounts"))
        assert r.probe("nccl_env", {"login_shell": False})["errors"] == []
        assert r.probe("storage_mounts", {"paths": ["/tmp"]})["paths"][0]["path"] == "/tmp"
        ran = commands(caplog)
        assert len(ran) == 4 and all(c.startswith(f"RUN p1 agent {folder}: ") for c in ran[1:]), ran
        r.close()
        assert run_leftovers(node.tmp) == [] and len(commands(caplog)) == 4

        missing = runner_on(node, kh, python=str(tmp_path / "no-such-python3"))
        with pytest.raises(ProbeError, match=r"could not ship probes: python interpreter '.*no-such-python3' not "
                                             r"found \(set ansible_python_interpreter\)"):
            missing.probe("storage_mounts", {"paths": ["/"]})
        missing.close()
        assert run_leftovers(node.tmp) == [] or _empty_dirs_only(node.tmp)
    finally:
        node.stop()


def _empty_dirs_only(tmp: Path) -> bool:
    """A start command that found no interpreter leaves its empty folder (mkdir ran): nothing else."""
    return all(p.is_dir() and not list(p.iterdir()) for p in run_leftovers(tmp))


@pytest.mark.parametrize("probe", sorted(f[:-3] for f in os.listdir(PROBE_DIR)
                                     if f.endswith(".py") and not f.startswith("_")))
def test_each_probe_loads_from_the_files_shipped_for_it(tmp_path, probe):
    """A probe's module code (its imports, at the top and in the helpers it imports) runs in a folder that holds
    only probe_files(probe), as a host that ran nothing else has it: no helper is left out of the shipping."""
    files = probe_files(probe)
    assert f"{probe}.py" in files and "_watchdog.py" in files and "_proc.py" in files
    for f in files:
        shutil.copy(os.path.join(PROBE_DIR, f), tmp_path / f)
    res = subprocess.run([sys.executable, "-c", "import sys, runpy; sys.path.insert(0, ''); import _watchdog; "
                          f"runpy.run_path('{probe}.py', run_name='loaded_only')"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


def test_login_banner_silent_shell_and_hung_exec_each_get_their_own_words(tmp_path):
    """A login that prints a banner on stdout first (ForceCommand, ~/.bashrc) still runs every probe (the agent's
    frames start after its marker); a shell that exits 1 having printed nothing is told as such; a node hung on
    exec times out naming the probe, not the start command's shell text, and every later command is refused
    naming when the host was written off and why."""
    ok, silent, hung = (start_sshd(tmp_path, address=a, name=n, extra_config=[f"ForceCommand {c}"])
                        for a, n, c in (("127.0.7.1", "banner", 'echo "Welcome to the GPU cluster"; '
                                                                 'eval "$SSH_ORIGINAL_COMMAND"'),
                                        ("127.0.7.2", "silent", "exit 1"), ("127.0.7.3", "hung", "sleep 600")))
    try:
        kh = write_known_hosts(tmp_path / "kh", [ok, silent, hung])
        r = runner_on(ok, kh)
        assert r.probe("storage_mounts", {"paths": ["/"]})["paths"][0]["path"] == "/"
        assert r.probe("nccl_env", {"login_shell": False})["errors"] == []  # more files shipped, banner again
        r.close()
        s = runner_on(silent, kh)
        with pytest.raises(ProbeError, match=r"could not ship probes: the agent exited with rc 1 before it was "
                                             r"ready$"):
            s.probe("storage_mounts", {"paths": ["/"]})
        s.close()
        h = runner_on(hung, kh)
        with pytest.raises(CommandTimeout) as first:
            h.probe("storage_mounts", {"paths": ["/"]}, timeout=2)
        assert first.value.msg.startswith("command timed out after 2s: probe storage_mounts;"), first.value.msg
        with pytest.raises(HostUnreachable, match=r"^hung: written off at \d\d:\d\d:\d\d UTC, not tried again this run: "
                                                  r"stopped answering \(command timed out after 2s: probe "
                                                  r"storage_mounts; .*then .*timed out"):
            h.probe("nccl_env", {"login_shell": False})
        h.close()
    finally:
        for n in (ok, silent, hung):
            n.stop()


def test_stale_folders_are_swept_and_a_vanished_folder_is_shipped_again(tmp_path, caplog):
    """Folders a SIGKILLed run left (``gpuaccept.<12 hex>``, unused for more than a day, nobody working in them)
    are removed when the next run's agent starts; a busy, a recent, a symlinked or a foreign-named one is kept. A
    run whose folder vanished (a /tmp cleaner) has it written again by its agent for its next probe, which
    passes."""
    caplog.set_level("DEBUG", logger="gpuaccept.run")
    (node,) = nodes_with_tmp(tmp_path, ("127.0.0.98",))
    old = time.time() - 2 * 86400
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("x")
    made = {}
    for name in ("gpuaccept.0123456789ab", "gpuaccept.ba9876543210", "gpuaccept.111111111111", "gpuaccept-notes"):
        made[name] = node.tmp / name
        made[name].mkdir()
        (made[name] / "_watchdog.py").write_text("# left by an earlier run\n")
    (node.tmp / "gpuaccept.222222222222").symlink_to(outside)
    for name in ("gpuaccept.0123456789ab", "gpuaccept.ba9876543210", "gpuaccept-notes"):
        os.utime(made[name], (old, old))
    os.utime(made["gpuaccept.111111111111"], (time.time() - 3600,) * 2)
    os.utime(node.tmp / "gpuaccept.222222222222", (old, old), follow_symlinks=False)
    busy = subprocess.Popen(["sleep", "120"], cwd=made["gpuaccept.ba9876543210"])
    try:
        kh = write_known_hosts(tmp_path / "kh", [node])
        r = runner_on(node, kh)
        assert r.probe("storage_mounts", {"paths": ["/"]})["paths"][0]["path"] == "/"
        left = sorted(p.name for p in run_leftovers(node.tmp))
        ours = [n for n in left if n not in made and n != "gpuaccept.222222222222"]
        assert left == sorted(["gpuaccept.ba9876543210", "gpuaccept.111111111111", "gpuaccept-notes",
                               "gpuaccept.222222222222", *ours]) and len(ours) == 1, left
        assert (outside / "keep.txt").is_file()

        shutil.rmtree(node.tmp / ours[0])
        assert r.probe("nccl_env", {"login_shell": False})["errors"] == []  # the agent wrote its folder again
        ran = [c for c in commands(caplog) if "nccl_env.py" in c]
        assert len(ran) == 1 and "rc=0" in ran[0] and (node.tmp / ours[0] / "nccl_env.py").is_file(), ran
        r.close()
        assert not [p for p in run_leftovers(node.tmp) if p.name not in made and p.name != "gpuaccept.222222222222"]
    finally:
        busy.kill()
        busy.wait()
        node.stop()


def test_first_probe_whose_connection_drops_is_shipped_again(tmp_path, caplog):
    """The connection drops while the first probe runs in the agent: the lost agent's processes are killed and
    its folder removed, the probe runs once more in a new agent on a fresh connection, and at close() nothing
    is left on the node."""
    caplog.set_level("DEBUG", logger="gpuaccept.run")
    (node,) = nodes_with_tmp(tmp_path, ("127.0.0.97",))
    try:
        kh = write_known_hosts(tmp_path / "kh", [node])
        r = runner_on(node, kh)

        def drop_once():
            end = time.time() + 120
            # the probe runs in a forked child of the agent (its command line is the agent's): wait for its request
            while time.time() < end and not any(c.label == "probe launch_overhead" for c in running()):
                time.sleep(0.02)
            time.sleep(0.5)
            for p in node.session_processes():
                os.kill(p, signal.SIGKILL)

        threading.Thread(target=drop_once, daemon=True).start()
        doc = r.probe("launch_overhead", {"device": "cpu", "iters": 200000})
        assert doc["iters"] == 200000
        ran = [c for c in commands(caplog) if "launch_overhead.py" in c]
        assert len(ran) == 2 and "rc=HostUnreachable" in ran[0] and "rc=0" in ran[1], ran
        assert len(run_leftovers(node.tmp)) == 1  # the lost attempt's folder was removed, the rerun's is used
        r.close()
        assert run_leftovers(node.tmp) == [] and procs_in(node.tmp) == []
    finally:
        node.stop()
