"""Inter-node all-reduce (gpuaccept.runner.multinode + the nccl_allreduce probe in multi-node mode), no mocks:
real sshd "nodes" on 127.0.0.20+ (conftest uses .2-.4, test_e2e .5-.8), real gloo ranks, and for the
pairwise search a node in its own network namespace behind a rate-limited veth (tc tbf; this kernel has no
netem, and a bandwidth cap slows a pair as surely as a delay does).

The pure parts (culprits, judging, pairing, transports, world check, rank evidence, kill patterns) are
table-driven; the rest drives real collectives and then scans /proc so that nothing is left running.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gpuaccept.runner import multinode as mn
from gpuaccept.judging import nccl as J
from gpuaccept.config.thresholds import Limit
from gpuaccept.config.inventory import load_inventory
from gpuaccept.judging.nccl_table import parse_table
from gpuaccept.runner.host import HostRunner
from gpuaccept.probes._nccl_world import world_problems
from gpuaccept.probes._supervisor import EXIT_SPLIT_WORLD, rank_evidence
from gpuaccept.transport import get_transport
from gpuaccept.reporting.folder import run_figures
from sshd import SSHD, SshNode, _keygen, _wait_port, client_key, start_sshd, write_known_hosts
from project_helpers import junit, make_project, run_pytest

GLOO = {"backend": "gloo", "min_bytes": 4096, "max_bytes": 65536, "factor": 4, "iters": 3, "warmup": 1}


# ----------------------------------------------------------------------------------------- helpers: the rig

def _nodes(base: Path, sshds: list[SshNode], kh: str, extra: str = "") -> list[HostRunner]:
    inv = base / "inventory.ini"
    inv.write_text("[gpu]\n" + "\n".join(s.inventory_line() for s in sshds) + "\n" + extra)
    hosts = load_inventory(str(inv)).hosts.values()
    return [HostRunner(h, lambda h: get_transport(h, known_hosts=kh), 120) for h in hosts]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _procs(*needles: str) -> list[int]:
    """PIDs (not this process) whose command line contains every needle."""
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit() and int(e) != os.getpid():
            c = _cmdline(int(e))
            if c and all(n in c for n in needles):
                out.append(int(e))
    return out


def _leftovers(marker: str) -> list[str]:
    """Probes or workers of a collective still alive (zombies excluded), after a settling time (60 s at most:
    returns as soon as none is left)."""
    end = time.monotonic() + 60
    while True:
        left = [p for p in _procs("nccl_allreduce", marker) if _state(p) not in ("Z", "?")]
        if not left or time.monotonic() > end:
            return [_cmdline(p)[:160] for p in left]
        time.sleep(0.2)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    """Three sshd nodes on 127.0.0.20-22 (mn1..mn3), for this module only."""
    base = tmp_path_factory.mktemp("mn")
    sshds = [start_sshd(base, address=f"127.0.0.{20 + i}", name=f"mn{i + 1}") for i in range(3)]
    try:
        yield base, sshds, write_known_hosts(base / "known_hosts", sshds)
    finally:
        for s in sshds:
            s.stop()


# ------------------------------------------------------------------------------------ pure: table-driven

def R(host, kind, evidence=None, peers=(), addr=None, error="e"):
    doc = None if kind in ("unreachable", "timeout", "crashed") else {
        "evidence": evidence, "peer_addresses": list(peers), "local_address": addr,
        "ranks": [{"rank": 0, "phase": "p", "evidence": evidence, "reason": "process stopped"}]}
    return mn.HostResult(host, kind, doc, error)


BLAME = [
    # (results, inventory addresses, culprits expected, singled out)
    ("unreachable host", [R("a", "aborted"), R("b", "unreachable", error="unreachable: refused"), R("c", "aborted")],
     {}, ["b"], True),
    ("call timed out", [R("a", "ok"), R("b", "ok"), R("c", "timeout", error="stopped answering")], {}, ["c"], True),
    ("own rank stopped", [R("a", "aborted", "none"), R("b", "failed", "local"), R("c", "aborted", "none")],
     {}, ["b"], True),
    ("stopped beats peers' errors", [R("a", "failed", "peer", ["10.0.0.3"]), R("b", "failed", "local")],
     {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3"}, ["b"], True),
    ("named by peers", [R("a", "failed", "peer", ["10.0.0.3"]), R("b", "failed", "peer", ["10.0.0.3"]),
                        R("c", "failed", "none")], {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3"}, ["c"], True),
    ("ambiguous address", [R("a", "failed", "peer", ["127.0.0.1"]), R("b", "failed", "none", addr="127.0.0.1"),
                           R("c", "failed", "none", addr="127.0.0.1")], {}, ["a", "b", "c"], False),
    ("aborted left out", [R("a", "failed", "none"), R("b", "aborted", "none")], {}, ["a"], False),
    ("all aborted", [R("a", "aborted", "none"), R("b", "aborted", "none")], {}, ["a", "b"], False),
    ("several first-hand", [R("a", "crashed"), R("b", "failed", "local"), R("c", "ok")], {}, ["a", "b"], True),
]


@pytest.mark.parametrize("results,addresses,culprits,singled", [b[1:] for b in BLAME], ids=[b[0] for b in BLAME])
def test_blame(results, addresses, culprits, singled):
    got, single = mn.blame({r.host: r for r in results}, ["a", "b", "c"], addresses)
    assert [h for h, _ in got] == culprits and single is singled


JUDGE = [
    # (figures, limit, slow_pct, pool, failing keys)
    ({"p1": 10.0, "p2": 9.0, "p3": 0.5}, None, 20, [], ["p3"]),
    ({"p1": 10.0, "p2": 9.0, "p3": 2.1}, None, 20, [], []),  # 2.1 >= 20% of the median 9
    ({"p1": 10.0, "p2": None}, None, 20, [], ["p2"]),  # a failed collective fails
    ({"p1": 10.0, "p2": 1.0}, None, 20, [], ["p2"]),  # median of two is their mean, 5.5: 1.0 is 18% of it
    ({"p1": 10.0, "p2": 9.0}, 9.5, 20, [], ["p2"]),  # a limit replaces the median
    ({"p1": 1.0}, None, 20, [10.0, 10.0], ["p1"]),  # one figure: median over earlier rounds too
]


def test_different_gpu_counts_name_the_odd_host():
    """Before: 'hosts carry different GPU counts: a: 8, b: 8, c: 7, d: 8' (which one is wrong was left to the
    reader); now the odd host comes first."""
    from gpuaccept.errors import ConfigError
    from gpuaccept.config.multinode import GroupSettings
    with pytest.raises(ConfigError, match=r"^hosts carry different GPU counts: c \(7\) differs from the 3 hosts "
                                          r"with 8 GPUs; a: 8, b: 8, c: 7, d: 8$"):
        GroupSettings().resolve({"a": 8, "b": 8, "c": 7, "d": 8}, 60)
    with pytest.raises(ConfigError, match=r"^hosts carry different GPU counts: a: 8, b: 4$"):  # no majority
        GroupSettings().resolve({"a": 8, "b": 4}, 60)


def test_default_fails_a_link_at_half_speed_and_passes_noise():
    """Without a limit or nccl_pairwise_slow_pct: a pair through a link at half its rate (about 50% of its
    peers' busbw) fails; one 20% under the median passes (the default was 20%: the half-speed pair passed)."""
    got = mn.judge_figures({"p1": 40.0, "p2": 41.0, "p3": 39.5, "slow": 20.5, "noisy": 32.5}, None)
    assert sorted(k for k, (ok, _) in got.items() if not ok) == ["slow"], got
    assert "fails below 70%" in got["slow"][1]


@pytest.mark.parametrize("figures,limit,pct,pool,failing", JUDGE)
def test_judge_figures(figures, limit, pct, pool, failing):
    got = mn.judge_figures(figures, limit, pct, pool)
    assert sorted(k for k, (ok, _) in got.items() if not ok) == failing


# ------------------------------------------------------------- blame when most hosts are slow

PAIR_FLOOR = Limit("test-sku", "internode_pair_busbw_gbps", "min", 5.0, "GB/s", "made-up pair floors",
                   min_by_transport={"IB": 60.0, "NET/IB/GDRDMA": 80.0, "Socket": 2.0})
IB_GDR = {"NET/IB/0/GDRDMA": 16, "NET/IB/1/GDRDMA": 16, "P2P/CUMEM": 8}


@pytest.mark.parametrize("transports, bound", [
    (IB_GDR, 80.0),                                   # the longest key every network channel matches
    ({"NET/IB/0": 16, "P2P/CUMEM": 8}, 60.0),          # InfiniBand without GPUDirect RDMA
    ({"NET/IBext_v8/0/GDRDMA": 16}, 80.0),             # NVIDIA's IB net plugin counts as IB
    ({"NET/Socket/0": 4}, 2.0),
    ({"NET/IB/0/GDRDMA": 8, "NET/Socket/0": 8}, 5.0),  # mixed: no key fits every channel, the plain min
    ({"P2P/CUMEM": 8}, None),                          # no network channel: nothing says which floor
])
def test_pair_floor_is_the_sku_floor_for_the_pairs_transport(transports, bound):
    got = J.pair_floor(PAIR_FLOOR, transports)
    assert (got.bound if got else None) == bound
    assert J.pair_floor(None, transports) is None


def _search(n: int, slow: int, floor, seed: int = 3, fast_gbps: float = 90.0, slow_gbps: float = 36.0):
    """The pairwise search of gpuaccept.runner.multinode.launch.pairwise, every collective replaced by the figure a
    pair of healthy hosts (``fast_gbps``) or one with a slow host (``slow_gbps``) gives, judged by the real
    judge_figures / pair_floor / no_reference."""
    rng = random.Random(seed)
    hosts = [f"h{i:04d}" for i in range(n)]
    sick = set(rng.sample(hosts, slow))
    history, by_floor = [], set()
    pairs, _ = mn.random_pairs(hosts, rng)
    for rnd in range(1, 9):
        figures = {p: slow_gbps if set(p) & sick else fast_gbps for p in pairs}
        results = {p: {h: mn.HostResult(h, "ok", {"transports": IB_GDR}) for h in p} for p in pairs}
        floors = {p: mn.pair_floor(floor, results[p]) for p in pairs}
        by_floor |= {(rnd, p) for p in pairs if floors[p] is not None}
        pool = [x.busbw for x in history]
        verdict = mn.judge_figures(figures, None, mn.DEFAULT_SLOW_PCT, pool, floors)
        history += [mn.PairResult(rnd, p, figures[p], *verdict[p]) for p in pairs]
        st = mn.pairwise_status(hosts, history)
        if not st["unresolved"] or not st["good"]:
            break
        pairs = mn.next_pairs(hosts, history, rng)
    return sick, mn.pairwise_status(hosts, history), mn.no_reference(history, None, by_floor), history


def test_slow_majority_is_named_against_the_sku_floor_for_its_transport():
    """400 of 1,024 hosts slow, no nccl_internode_busbw_gbps: most pairs hold a slow host, so the round's median
    is a slow figure and the median rule named nobody. With the SKU file's floor for the pairs' transport
    (NET/IB/GDRDMA 80 GB/s) every slow host is named and no healthy one, and the failure names that floor."""
    sick, st, note, history = _search(1024, 400, PAIR_FLOOR)
    assert set(st["named"]) == sick and not st["unresolved"], (len(st["named"]), len(st["unresolved"]))
    assert note == ""
    failed = next(p for p in history if not p.passed)
    assert "< min 80 GB/s" in failed.why and "test-sku.yaml checks.internode_pair_busbw_gbps" in failed.why


def test_slow_majority_without_a_floor_says_no_reference():
    """The same fleet with no floor anywhere: no host is named (nothing says whether the fast or the slow side
    is right), and the search says so instead of passing everyone silently; the hosts never in a fast pair
    are counted (every slow host, and the healthy ones that met only slow partners in the one round)."""
    sick, st, note, history = _search(1024, 400, None)
    assert st["named"] == [], st["named"][:5]
    assert note.startswith("no reference: most pairs are slow: "), note
    m = re.search(r": (\d+) of (\d+) pairs are under 70% of the (\d+) fastest \(their median 90 GB/s\) and the "
                  r"median 36 GB/s is one of them", note)
    assert m and int(m.group(1)) + int(m.group(3)) == int(m.group(2)) == 512, note
    never = {h for p in history for h in p.pair} - {h for p in history if p.busbw == 90.0 for h in p.pair}
    assert never >= sick and f"({len(never)} in all)" in note and min(never) in note


@pytest.mark.parametrize("slow", [0, 8, 40])
def test_a_slow_minority_keeps_the_median_rule(slow):
    """When the pairs with a slow host are a minority (under 1 - sqrt(1/2), about 29 %, of the hosts slow: the
    median is a healthy pair) the median rule names them as before and nothing is said about a reference."""
    sick, st, note, _ = _search(256, slow, None)
    assert note == "" and set(st["named"]) == sick and not st["unresolved"]


def test_no_reference_is_not_said_for_noise_or_with_a_limit():
    hist = [mn.PairResult(1, (f"a{i}", f"b{i}"), v, True, "") for i, v in enumerate([40.0, 41.0, 30.0, 29.0, 39.0])]
    assert mn.no_reference(hist, None, set()) == ""  # the spread of a healthy fleet: 29 is 71% of 41
    slow = hist + [mn.PairResult(1, (f"c{i}", f"d{i}"), 10.0, True, "") for i in range(6)]
    assert mn.no_reference(slow, None, set()).startswith("no reference: most pairs are slow: 6 of 11 pairs")
    assert mn.no_reference(slow, 35.0, set()) == ""  # an absolute limit judges them
    assert J.slow_majority({"only": 10.0}, 70) is None


TRANSPORTS = [
    ({"NET/IB/0/GDRDMA": 16, "P2P/CUMEM": 8}, "IB", None),
    ({"NET/IB/0/GDRDMA": 16}, "NET/IB/GDRDMA", None),
    ({"NET/IB/0": 16}, "NET/IB/GDRDMA", "NET/IB/0"),  # IB without GPUDirect RDMA
    ({"NET/Socket/0": 16, "P2P/CUMEM": 8}, "IB", "NET/Socket/0"),
    ({"P2P/CUMEM": 8}, "IB", "no network channel"),
    ({"NET/Socket/1": 4}, None, None),
]


@pytest.mark.parametrize("transports,expect,problem", TRANSPORTS)
def test_transport_problem(transports, expect, problem):
    got = mn.transport_problem(transports, expect)
    assert (got is None) if problem is None else (problem in got and str(expect) in got)


def P(rnd, a, b, passed):
    return mn.PairResult(rnd, (a, b), 1.0 if passed else 0.01, passed, "")


PAIRWISE = [
    # (history, dead, good, named, unresolved)
    ([P(1, "a", "s", False), P(1, "b", "c", True)], set(), ["b", "c"], [], ["a", "s"]),
    ([P(1, "a", "s", False), P(1, "b", "c", True), P(2, "s", "b", False), P(2, "a", "c", True)], set(),
     ["a", "b", "c"], ["s"], []),
    ([P(1, "a", "b", False)], set(), [], [], ["a", "b"]),  # nobody good: nothing to single out
    ([P(1, "a", "b", False), P(1, "c", "s", True)], {"a"}, ["c", "s"], ["a"], ["b"]),  # dead host named at once
]


@pytest.mark.parametrize("history,dead,good,named,unresolved", PAIRWISE)
def test_pairwise_status(history, dead, good, named, unresolved):
    hosts = sorted({h for p in history for h in p.pair})
    st = mn.pairwise_status(hosts, history, dead)
    assert (st["good"], sorted(st["named"]), st["unresolved"]) == (good, named, unresolved)


def test_pairs_are_disjoint_and_suspects_meet_good_hosts():
    hosts = [f"h{i}" for i in range(7)]
    rng = random.Random(5)
    pairs, left = mn.random_pairs(hosts, rng)
    assert len(pairs) == 3 and len(left) == 1 and sorted([h for p in pairs for h in p] + left) == hosts
    assert mn.random_pairs(hosts, random.Random(5)) == (pairs, left)  # seeded: reproducible
    bad, good = pairs[0], pairs[1:]
    history = [mn.PairResult(1, bad, 0.1, False, "")] + [mn.PairResult(1, p, 5.0, True, "") for p in good]
    nxt = mn.next_pairs(hosts, history, random.Random(1))
    flat = [h for p in nxt for h in p]
    assert len(flat) == len(set(flat))
    goods = {h for p in good for h in p}
    for suspect in list(bad) + left:  # each suspect (and the host left over) meets a host that passed
        mate = next(b if a == suspect else a for a, b in nxt if suspect in (a, b))
        assert mate in goods


WORLD = [
    # (seen identities, problem expected or None)
    ([("a", 0), ("a", 0), ("b", 1), ("b", 1)], None),
    ([("a", 0), ("a", 0), ("a", 0), ("a", 0)], "hosts missing: b"),
    ([("a", 0), ("a", 0), ("c", 1), ("c", 1)], "unexpected hosts: c"),
    ([("a", 0), ("a", 0), ("b", 1)], "world size 3"),
    ([("a", 0), ("b", 1), ("a", 0), ("b", 1)], "out of place"),
]


@pytest.mark.parametrize("seen,problem", WORLD)
def test_world_problems(seen, problem):
    ids = [{"rank": i, "host": h, "node_rank": nr, "marker": "m"} for i, (h, nr) in enumerate(seen)]
    got = world_problems(ids, ["a", "b"], 2, "m", 4)
    assert (got == []) if problem is None else any(problem in g for g in got), got
    assert any("another collective" in g for g in world_problems([dict(i, marker="x") for i in ids], ["a", "b"],
                                                                 2, "m", 4))


EVIDENCE = [
    # (rc, state, heartbeat age, stall_s, last output, kind expected)
    (None, "T", 1.0, None, "", "local"),
    (None, "S", 30.0, 10, "", "local"),  # no heartbeat, not running
    (None, "R", 30.0, 10, "", None),  # busy, not stalled
    (None, "S", 1.0, 10, "", None),
    (-9, "exited", 0, 10, "", "local"),
    (1, "exited", 0, 10, "RuntimeError: [gloo/pair.cc:534] Connection closed by peer [10.1.2.3]:4567", "peer"),
    (1, "exited", 0, 10, "RuntimeError: CUDA error: an illegal memory access was encountered", "local"),
    (EXIT_SPLIT_WORLD, "exited", 0, 10, "split world: hosts missing: b", "split_world"),
    (0, "exited", 0, 10, "", None),
]


@pytest.mark.parametrize("rc,state,age,stall,text,kind", EVIDENCE)
def test_rank_evidence(rc, state, age, stall, text, kind):
    got, _, addrs = rank_evidence(rc, state, age, stall, text)
    assert got == kind
    if kind == "peer":
        assert addrs == ["10.1.2.3"]


def test_kill_pattern_matches_probe_and_workers_only():
    m = "gpuaccept-ar-0123456789ab"
    pat = re.search(r"-f '(.*)'", mn.kill_command(m)).group(1)
    probes_only = re.search(r"-f '(.*)'", mn.kill_command(m, "TERM", probes_only=True)).group(1)
    probe = f'/usr/bin/python3 nccl_allreduce.py {{"backend": "gloo", "marker": "{m}"}}'
    worker = f'/usr/bin/python3 /tmp/gpuaccept.x/nccl_allreduce.py --worker {{"rank": 1, "marker": "{m}"}}'
    wrapper = f"/bin/sh -c pg=... sh cd /tmp/x && env A=1 python3 nccl_allreduce.py '{{\"marker\": \"{m}\"}}'"
    itself = f"/bin/sh -c {mn.kill_command(m)}"
    assert re.search(pat, probe) and re.search(pat, worker)
    assert re.search(probes_only, probe) and not re.search(probes_only, worker)
    assert not any(re.search(p, t) for p in (pat, probes_only) for t in (wrapper, itself))
    assert not re.search(pat, probe.replace(m, "gpuaccept-ar-ffffffffffff"))
    with pytest.raises(ValueError):
        mn.kill_command("x; rm -rf /")


# ------------------------------------------------------------------------------- real collectives, real sshd

def test_world_of_six_through_the_suite(tmp_path, rig):
    """3 sshd nodes x 2 gloo ranks: the suite forms world 6, prints a right table, writes junit-nccl.xml."""
    _, sshds, kh = rig
    vars_ = ("[gpu:vars]\nnccl_ranks_per_node=2\nnccl_stall_s=20\n"
             f"nccl_internode_probe_args={json.dumps(GLOO)}\n")
    inv = make_project(tmp_path, sshds, kh, extra_suite="", name="test_zz_none.py", inventory_extra=vars_)
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", kh, "--reports", str(rep),
                     "-k", "multinode", "-s", "--probe-timeout", "90", timeout=150)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    cases = [c for c in junit(rep / "junit-nccl.xml") if c["name"] == "test_allreduce_multinode"]
    assert len(cases) == 1 and cases[0]["outcome"] == "passed" and cases[0]["classname"] == "nccl.fleet"
    assert "world 6" in res.stdout and "rendezvous 127.0.0.20:" in res.stdout
    rows = parse_table(res.stdout)
    assert [r["bytes"] for r in rows] == [4096, 16384, 65536]
    for r in rows:
        assert r["oop_wrong"] == 0 and r["ip_wrong"] == 0 and r["count"] == r["bytes"] // 4
        for mode in ("oop", "ip"):  # table rounding: 2 decimals
            algbw = r["bytes"] / 1e9 / (r[f"{mode}_time_us"] / 1e6)
            assert abs(r[f"{mode}_algbw_gbps"] - algbw) <= 0.006 + algbw * 0.01
            assert abs(r[f"{mode}_busbw_gbps"] - algbw * 2 * 5 / 6) <= 0.006 + algbw * 0.01
    figs = run_figures(json.loads((rep / "results.json").read_text()))
    table = next(f for f in figs if f["check"] == "internode_allreduce_table")
    assert table["extra"]["world_size"] == 6 and table["extra"]["hosts"] == ["mn1", "mn2", "mn3"]
    exact = table["value"][-1]
    algbw = exact["bytes"] / 1e9 / (exact["ip_time_us"] / 1e6)  # the recorded row, 6 decimals
    assert exact["ip_algbw_gbps"] == pytest.approx(algbw, abs=2e-6)
    assert exact["ip_busbw_gbps"] == pytest.approx(algbw * 2 * 5 / 6, abs=2e-6)
    busbw = next(f for f in figs if f["check"] == "internode_busbw_gbps")
    assert busbw["verdict"] == "recorded" and "not judged" in busbw["extra"]["note"]
    per_host = {f["host"]: f for f in figs if f["check"] == "internode_rank_time_us"}
    assert sorted(per_host) == ["mn1", "mn2", "mn3"] and all(len(f["value"]) == 2 for f in per_host.values())


def test_stopped_node_is_blamed(tmp_path, tmp_path_factory):
    """A node whose sshd is stopped before the run: blamed by name at once (by the rendezvous check: no rank
    starts anywhere)."""
    base = tmp_path_factory.mktemp("mnstop")
    sshds = [start_sshd(base, address=f"127.0.0.{23 + i}", name=f"st{i + 1}") for i in range(3)]
    try:
        nodes = _nodes(tmp_path, sshds, write_known_hosts(base / "kh", sshds))
        sshds[1].stop()
        t0 = time.monotonic()
        col = mn.ring(nodes, mn.Settings(GLOO, 1, deadline_s=300, stall_s=20))
        assert not col.ok and time.monotonic() - t0 < 120  # at once, not at the 300 s deadline
        assert [h for h, _ in col.culprits] == ["st2"] and col.singled_out
        assert col.message.startswith("st2: unreachable") and "\n" not in col.message
        # found by the rendezvous check before any rank started: the others had nothing to abort
        assert {h: r.kind for h, r in col.results.items()} == {"st1": "not_started", "st2": "unreachable",
                                                              "st3": "not_started"}
        assert col.results["st2"].cause.cls == "connectivity"
        assert _leftovers(col.marker) == []
    finally:
        for s in sshds:
            s.stop()


def test_hung_rank_is_blamed(tmp_path, rig):
    """A node whose ranks are SIGSTOPped mid-run: blamed by name within the stall time; nothing left."""
    base, sshds, kh = rig
    nodes = _nodes(tmp_path, sshds, kh)
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("col", mn.ring(
        nodes, mn.Settings({**GLOO, "iters": 200}, 1, deadline_s=300, stall_s=4))))
    t0 = time.monotonic()
    t.start()
    stopped: list[int] = []
    try:
        end = time.monotonic() + 180
        phase = ""
        while time.monotonic() < end and " B " not in phase:  # mid-collective: "65536 B in-place" or the like
            # this rig's mn3 only: another test's world may run ranks on a host of the same name beside it
            mine = {p for sd in sshds for p in sd.processes()}
            found = [p for p in _procs("--worker", mn.MARKER_PREFIX, '"host": "mn3"') if p in mine]
            if found:
                spec = json.loads(Path(f"/proc/{found[0]}/cmdline").read_bytes().split(b"\0")[3])
                try:
                    phase = json.loads(Path(spec["phase_path"]).read_text())["phase"]
                except (OSError, ValueError):
                    pass
            time.sleep(0.05)
        assert " B " in phase, f"mn3's worker never reached the timed collectives (phase {phase!r})"
        for p in found:
            os.kill(p, signal.SIGSTOP)
        stopped = found
        t.join(400)
        col = out["col"]
        assert not col.ok and [h for h, _ in col.culprits] == ["mn3"], col.message
        assert col.message.startswith("mn3: rank 2 in '") and " B " in col.message and "stopped" in col.message, \
            col.message
        assert col.results["mn3"].kind == "failed"
        for h in ("mn1", "mn2"):  # their ranks lost mn3 (network errors: "peer"), or we aborted them first
            r = col.results[h]
            assert r.kind in ("failed", "aborted") and r.doc["evidence"] in ("peer", "none"), (h, r)
        assert time.monotonic() - t0 < 150  # within the stall time, not at the 300 s deadline
        assert _leftovers(col.marker) == []
    finally:
        for p in stopped:  # only if the product failed to: never leave a stopped process behind
            if "--worker" in _cmdline(p):
                os.kill(p, signal.SIGKILL)
                os.kill(p, signal.SIGCONT)


def test_host_frozen_after_joining_is_named_without_waiting_for_its_timeout(tmp_path, tmp_path_factory,
                                                                           monkeypatch):
    """A host whose sshd freezes (SIGSTOP) once its probe runs: its ranks finish the collective with the others,
    but its answer never comes back. It is named "stopped answering" LAGGARD_MIN_S after the others finished,
    not at the call's own timeout (deadline + 30 s; a frozen host took 108 s under --probe-timeout 60)."""
    monkeypatch.setattr(mn.launch, "LAGGARD_MIN_S", 5.0)
    base = tmp_path_factory.mktemp("mnfrz")
    sshds = [start_sshd(base, address=f"127.0.0.{26 + i}", name=f"fz{i + 1}") for i in range(3)]
    try:
        nodes = _nodes(tmp_path, sshds, write_known_hosts(base / "kh", sshds))
        out: dict = {}
        t = threading.Thread(target=lambda: out.setdefault("col", mn.ring(
            nodes, mn.Settings({**GLOO, "iters": 100}, 1, deadline_s=300, stall_s=20))))
        t0 = time.monotonic()
        t.start()
        end, phase = time.monotonic() + 180, ""
        while time.monotonic() < end and " B " not in phase:  # fz2's rank is in the timed collectives
            mine = set(sshds[1].processes())
            for p in [p for p in _procs("--worker", mn.MARKER_PREFIX, '"host": "fz2"') if p in mine]:
                try:
                    spec = json.loads(Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[3])
                    phase = json.loads(Path(spec["phase_path"]).read_text())["phase"]
                except (OSError, ValueError, IndexError, KeyError):
                    pass
            time.sleep(0.02)
        assert " B " in phase, f"fz2's rank never reached the timed collectives (phase {phase!r})"
        sshds[1].freeze()
        frozen_at = time.monotonic()
        t.join(400)
        col = out["col"]
        assert not col.ok and [h for h, _ in col.culprits] == ["fz2"], col.message
        r = col.results["fz2"]
        assert r.kind == "timeout" and r.error.startswith("stopped answering: every other host finished the "
                                                          "collective"), r
        assert all(col.results[h].kind == "ok" for h in ("fz1", "fz3")), col.results
        # LAGGARD_MIN_S (5 s) after the others finished, not at the call's own timeout (300 + 30 s)
        assert time.monotonic() - frozen_at < 120
    finally:
        sshds[1].thaw()
        for sd in sshds:
            sd.stop()


# ----------------------------------------------------------------- pairwise: one node behind a slow link

NS, VETH, NET = "gamn", "gamn0", "10.231.77"


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def _netns_sshd(base: Path, ns: str, address: str, port: int, name: str) -> SshNode:
    """tests/sshd.py's start_sshd, but the sshd runs inside network namespace ``ns``."""
    d = base / f"sshd-{ns}-{address}"
    d.mkdir(parents=True, exist_ok=True)
    host_key = str(d / "ssh_host_ed25519_key")
    _keygen(host_key, f"gpuaccept-test-host-{address}")
    auth = d / "authorized_keys"
    auth.write_text(Path(client_key() + ".pub").read_text())
    cfg = d / "sshd_config"
    cfg.write_text("\n".join([
        f"ListenAddress {address}", f"Port {port}", f"HostKey {host_key}", f"AuthorizedKeysFile {auth}",
        f"PidFile {d / 'sshd.pid'}", "PermitRootLogin prohibit-password", "PubkeyAuthentication yes",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
        "UseDNS no", "MaxStartups 100:30:200", "MaxSessions 50", "LogLevel ERROR", "SetEnv SHLVL=1"]) + "\n")
    log = d / "sshd.log"
    proc = subprocess.Popen(["ip", "netns", "exec", ns, SSHD, "-D", "-f", str(cfg), "-E", str(log)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not _wait_port(address, port, proc, 10.0):
        proc.kill()
        raise RuntimeError(f"sshd in netns {ns} did not start: {log.read_text() if log.exists() else ''}")
    pub = Path(host_key + ".pub").read_text().split()
    return SshNode(name, address, port, f"[{address}]:{port} {pub[0]} {pub[1]}", client_key(), proc.pid, d,
                   host_key, log, cfg, proc)


@pytest.fixture
def slow_link():
    """Network namespace NS with veth NS<->root (NET.1 root side plus NET.21-25 for the root nodes, NET.2 in
    NS), both ends capped at 8 Mbit/s by tc tbf. Skips where namespaces or tbf are not permitted."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("iproute2 (ip, tc) not installed")
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)
    subprocess.run(["ip", "link", "del", VETH], capture_output=True)
    try:
        _sh("ip", "netns", "add", NS)
        _sh("ip", "link", "add", VETH, "type", "veth", "peer", "name", "gamn1")
        _sh("ip", "link", "set", "gamn1", "netns", NS)
        _sh("ip", "addr", "add", f"{NET}.1/24", "dev", VETH)
        for i in range(21, 26):
            _sh("ip", "addr", "add", f"{NET}.{i}/32", "dev", VETH)
        _sh("ip", "link", "set", VETH, "up")
        for cmd in (["addr", "add", f"{NET}.2/24", "dev", "gamn1"], ["link", "set", "gamn1", "up"],
                    ["link", "set", "lo", "up"]):
            _sh("ip", "netns", "exec", NS, "ip", *cmd)
        tbf = ["root", "tbf", "rate", "8mbit", "burst", "32kb", "latency", "400ms"]
        _sh("tc", "qdisc", "add", "dev", VETH, *tbf)
        _sh("ip", "netns", "exec", NS, "tc", "qdisc", "add", "dev", "gamn1", *tbf)
    except subprocess.CalledProcessError as e:
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)
        subprocess.run(["ip", "link", "del", VETH], capture_output=True)
        pytest.skip(f"network namespace / tc not permitted here: {e.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)
        subprocess.run(["ip", "link", "del", VETH], capture_output=True)


def test_pairwise_finds_the_slow_node(tmp_path, tmp_path_factory, slow_link):
    """6 nodes, one behind an 8 Mbit/s link: pairwise names it (and only it); seed and pass ratios recorded."""
    base = tmp_path_factory.mktemp("mnpair")
    sshds = [start_sshd(base, address=f"{NET}.{21 + i}", name=f"pw{i + 1}") for i in range(5)]
    try:
        sshds.insert(2, _netns_sshd(base, NS, f"{NET}.2", 2222, "slow3"))
        kh = write_known_hosts(base / "kh", sshds)
        args = {**GLOO, "min_bytes": 65536, "max_bytes": 262144}
        # slow pairs read 1-3 % of the round's median here, healthy ones >= 35 % (2 CPUs shared by 6 ranks): 10 %
        vars_ = ("[gpu:vars]\nnccl_pairwise_seed=7\nnccl_pairwise_slow_pct=10\nnccl_stall_s=30\n"
                 f"nccl_internode_probe_args={json.dumps(args)}\n")
        inv = make_project(tmp_path, sshds, kh, extra_suite="", name="test_zz_none.py", inventory_extra=vars_)
        rep = tmp_path / "rep"
        res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", kh, "--reports", str(rep),
                         "-k", "multinode", "-s", "--nccl-pattern", "pairwise", "--probe-timeout", "90", timeout=200)
        print("\n".join(ln for ln in res.stdout.splitlines() if ln.startswith(("# pairwise", "#   round"))))
        assert res.returncode == 1, res.stdout[-4000:] + res.stderr[-2000:]
        case = next(c for c in junit(rep / "junit-nccl.xml") if c["name"] == "test_allreduce_multinode")
        assert case["outcome"] == "failure", case["message"]
        assert case["message"].startswith("slow3: pairwise all-reduce: failed with good"), case["message"]
        doc = json.loads((rep / "results.json").read_text())
        failures = doc["tests"][0]["message"].splitlines()
        assert [ln.split(":")[0] for ln in failures] == ["slow3"], failures
        figs = run_figures(doc)
        seed = next(f for f in figs if f["check"] == "pairwise_seed")
        assert seed["value"] == 7
        ratio = {f["host"]: f["value"] for f in figs if f["check"] == "pairwise_pass_ratio"}
        assert ratio["slow3"] == 0 and all(v > 0 for h, v in ratio.items() if h != "slow3")
        print(f"pairwise round wall times on 6 CPU nodes: {seed['extra']['round_wall_s']} s")
    finally:
        for s in sshds:
            s.stop()
        # this test's ranks only (their specs name its hosts; other tests run beside it under -n), after the
        # node-side watchdog's grace: the connections dropped when the servers stopped
        mine = ('"pw1"', '"pw2"', '"pw3"', '"pw4"', '"pw5"', '"slow3"')
        end = time.monotonic() + 60
        while True:
            left = [p for p in _procs("nccl_allreduce", mn.MARKER_PREFIX, "--worker")
                    if _state(p) not in ("Z", "?") and any(h in (_cmdline(p) or "") for h in mine)]
            if not left or time.monotonic() > end:
                break
            time.sleep(0.5)
        assert not left, [(p, (_cmdline(p) or "")[:200]) for p in left]


def test_collective_whose_documents_disagree_with_the_launch_gives_no_figure():
    """Two half-worlds launched as one: each pair of hosts reports a world of its own (nnodes 2). The
    collective looked ok host by host; world_failure names every host, so the suite reports an error."""
    hosts = ["a", "b", "c", "d"]

    def doc(i, group):
        return {"ok": True, "marker": "m", "node_rank": i % 2, "nnodes": 2, "world_size": 2, "ranks_per_node": 1,
                "hosts": group, "local_ranks": [i % 2]}
    results = {h: mn.HostResult(h, "ok", doc(i, hosts[:2] if i < 2 else hosts[2:])) for i, h in enumerate(hosts)}
    col = mn.Collective(hosts, True, results, marker="m")
    problems = mn.world_failure(col, 1)
    assert [h for h, _ in problems] == hosts
    assert "nnodes 2 (launched 4)" in problems[0][1] and "world_size 2 (launched 4)" in problems[0][1]
    results = {h: mn.HostResult(h, "ok", {**doc(i, hosts), "node_rank": i, "nnodes": 4, "world_size": 4,
                                          "local_ranks": [i]}) for i, h in enumerate(hosts)}
    assert mn.world_failure(mn.Collective(hosts, True, results, marker="m"), 1) == []


def test_failure_lines_name_each_culprit_by_its_host_not_by_the_text():
    """Each culprit's line is filed under its host as the culprit list names it, whatever the reason or the
    host name holds (a colon in both here); the text joined is describe_failure's message."""
    hosts = ["rack1:gpu-01", "rack1:gpu-02", "gpu-03"]
    col = mn.Collective(hosts, False, {}, culprits=[("rack1:gpu-02", "stopped answering: rank 9 hung")])
    whole, per_host = mn.failure_lines(col)
    over = "all-reduce over rack1:gpu-01, rack1:gpu-02, gpu-03"
    assert whole == [] and per_host == [("rack1:gpu-02", f"stopped answering: rank 9 hung ({over})")]
    assert mn.describe_failure(col) == f"rack1:gpu-02: stopped answering: rank 9 hung ({over})"
    col.singled_out = False
    col.culprits = [("gpu-03", "failed: x"), ("rack1:gpu-01", "failed: y")]
    whole, per_host = mn.failure_lines(col)
    assert whole == [f"{over} failed and no host is singled out:"]
    assert per_host == [("gpu-03", "failed: x"), ("rack1:gpu-01", "failed: y")]
    col.culprits = []
    assert mn.failure_lines(col) == ([f"{over} failed"], [])


def _share(host: str, outcome: str, stages: list[tuple[str, str]], evidence: str = "none", reason: str = "",
           kind: str = "failed") -> mn.HostResult:
    """A failed share's result as the probe's failure document has it: one rank per (phase, stage)."""
    ranks = [{"rank": i, "phase": ph, "stage": st, "evidence": evidence if reason else None,
              "reason": reason, "rc": 1 if reason else None, "addresses": []} for i, (ph, st) in enumerate(stages)]
    return mn.HostResult(host, kind, {"ok": False, "outcome": outcome, "evidence": evidence, "ranks": ranks},
                         f"all-reduce {outcome}")


def test_blame_names_the_host_whose_ranks_never_left_setup_not_those_waiting_for_it():
    """One host's torch import hangs: its rank is still in setup at the deadline while the others' ranks wait
    in the rendezvous (init). Only that host is named, with its rank's phase; the waiting hosts are not."""
    results = {"x6": _share("x6", "hung", [("importing torch", "setup")]),
               "good1": _share("good1", "hung", [("rendezvous / init_process_group", "init")]),
               "good2": _share("good2", "hung", [("rendezvous / init_process_group", "init")])}
    got, single = mn.blame(results, ["x6", "good1", "good2"])
    assert single and got == [("x6", "rank 0 still in 'importing torch' (setup)")]
    assert mn.setup_ranks(results["good1"]) == []


def test_blame_setup_ranks_cut_by_the_controller_are_not_named():
    """A share the controller aborted (another host failed first) was cut wherever its ranks were, setup
    included: that is no evidence against it. A rank that died in setup is named with its own reason."""
    dead = _share("a", "failed", [("importing torch", "setup")], "local",
                  "rc 1: OSError: libcudart.so.12: cannot open shared object file: No such file or directory")
    results = {"a": dead, "b": _share("b", "aborted", [("importing torch", "setup")], kind="aborted"),
               "c": _share("c", "aborted", [("importing torch", "setup")])}
    assert mn.setup_ranks(results["b"]) == [] and mn.setup_ranks(results["c"]) == []
    got, single = mn.blame(results, ["a", "b", "c"])
    assert single and got == [("a", "rank 0 in 'importing torch' (setup): rc 1: OSError: libcudart.so.12: cannot "
                                     "open shared object file: No such file or directory")]
