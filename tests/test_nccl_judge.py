"""All-reduce judging (gpuaccept.judging.nccl) as pure functions, and through the nccl suite on the real 2xH200
all-reduce document (tests/data/replay-h200x2) altered the way sick nodes read: a figure NVLS produced, a
missing #wrong count, an HCA list matched by prefix. The NCCL INFO lines are the real ones captured on that
node (tests/data/nccl-info-h200x2.log), altered in the test where a case needs InfiniBand devices."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaccept.judging import nccl as J
from gpuaccept.errors import ConfigError
from gpuaccept.runner.multinode import GroupSettings, multinode_settings, nccl_environment
from gpuaccept.config.thresholds import load_sku_file
from gpuaccept.probes import _nccl_log, _supervisor
from gpuaccept.runner.host import save_probe
from gpuaccept.probes._nccl_log import parse_nccl_log, parse_net_devices
from gpuaccept.probes._supervisor import addresses_in, normalize_address, rank_evidence
from gpuaccept.reporting.folder import run_figures
from probe_helpers import field_blocks
from project_helpers import CAPTURE_NCCL, GPU_LAYERS, REPO, alter, junit, outcomes, replay_project, run_pytest

DATA = Path(__file__).resolve().parent / "data"
REAL = (DATA / "nccl-info-h200x2.log").read_text().splitlines()
NCCL = field_blocks("nccl-logs.txt")


# ------------------------------------------------------------------------------------ algorithm per row

RING = {"bytes": 4 << 30, "ip_algo": "RING/SIMPLE", "ip_busbw_gbps": 347.5}


@pytest.mark.parametrize("row, env, algos, problem", [
    (RING, {}, ["RING"], None),
    ({**RING, "ip_algo": "NVLS/SIMPLE"}, {}, ["NVLS"], "ran with NVLS: no floor for Nvls"),
    ({**RING, "ip_algo": "RING/LL128+TREE/LL"}, {}, ["RING", "TREE"], "ran with RING+TREE"),
    ({**RING, "ip_algo": None}, {"NCCL_ALGO": "Ring"}, ["RING"], None),  # NCCL < 2.19: no TUNING lines
    ({**RING, "ip_algo": None}, {"NCCL_ALGO": "NVLS"}, ["NVLS"], "no floor for Nvls"),
    ({**RING, "ip_algo": None}, {}, [], "NCCL reported no algorithm"),
])
def test_a_figure_is_judged_only_against_its_algorithm_floor(row, env, algos, problem):
    doc = {"nccl_env_seen": env}
    assert J.row_algorithms(row, doc) == algos
    got = J.algorithm_problem(row, doc, where="thresholds/h200-sxm-141gb.yaml")
    if problem is None:
        assert got is None
    else:
        assert problem in got and "thresholds/h200-sxm-141gb.yaml" in got and "for Ring" in got


@pytest.mark.parametrize("rows, total, wrong, n_problems", [
    ([{"bytes": 1, "oop_wrong": 0, "ip_wrong": 2}], None, 2, 0),
    ([{"bytes": 1, "oop_wrong": 0, "ip_wrong": None}], None, 0, 1),
    ([{"bytes": 1, "oop_wrong": 0}], None, 0, 1),  # key missing
    ([{"bytes": 1, "oop_wrong": "0", "ip_wrong": 0}], None, 0, 1),  # not a count
    ([{"bytes": 1, "oop_wrong": 0, "ip_wrong": 0}], 3, 3, 0),  # the document's own total says more
    ([], 0, 0, 1),
])
def test_wrong_count_never_reads_absence_as_zero(rows, total, wrong, n_problems):
    got, problems = J.wrong_count(rows, total)
    assert got == wrong and len(problems) == n_problems
    if n_problems and rows:
        assert "correctness was not checked" in problems[0]


# ------------------------------------------------------------------------------------------ transports

@pytest.mark.parametrize("transports, expect, network_only, problem", [
    ({"P2P/CUMEM/read": 24}, "P2P", False, None),
    ({"P2P/CUMEM": 24, "SHM/direct/direct": 2}, "P2P", False, "SHM/direct/direct"),
    ({}, "P2P", False, "no channel"),
    ({"P2P/CUMEM": 8, "NET/IB/0/GDRDMA": 4}, "NET/IB/GDRDMA", True, None),
    ({"NET/IB/0": 4}, "NET/IB/GDRDMA", True, "NET/IB/0"),
    ({"NET/Socket/0": 4}, "IB", True, "NET/Socket/0"),
    ({"P2P/CUMEM": 8}, "IB", True, "no network channel"),
    ({"NET/IB/0": 4}, None, True, None),
])
def test_one_transport_rule(transports, expect, network_only, problem):
    got = J.transport_problem(transports, expect, network_only)
    assert (got is None) == (problem is None) and (problem is None or problem in got)


# --------------------------------------------------------------------------------- NCCL device lists

def test_real_capture_reports_its_socket_interface():
    nd = parse_net_devices(REAL)
    assert nd["socket"] == [{"name": "eth0", "address": "192.0.2.2"}]
    assert nd["ib"] == [] and nd["oob_interface"] == "eth0"  # "NET/IB : Using [RO]; OOB eth0:...": no HCA
    assert parse_nccl_log(REAL)["net_devices"] == nd
    assert J.net_device_problems(nd, None, "eth0") == []
    assert J.net_device_problems(nd, None, "eth1") == ["NCCL used socket interfaces eth0 not in "
                                                       "nccl_socket_ifname (eth1)"]
    assert J.net_device_problems(nd, "mlx5_0", None) == ["NCCL found none of the IB devices nccl_ib_hca "
                                                         'lists (mlx5_0): NCCL says "NET/IB : No device found."']


def test_hca_matched_by_prefix_is_named():
    # the real lines, altered: NCCL found two HCAs where the inventory names one (the prefix mlx5_1 also
    # takes mlx5_10, as NCCL_IB_HCA=mlx5_1 does)
    lines = [ln.replace("NET/IB : Using [RO]", "NET/IB : Using [0]mlx5_1:1/IB [1]mlx5_10:1/IB [RO]") for ln in REAL]
    nd = parse_net_devices(lines)
    assert [d["name"] for d in nd["ib"]] == ["mlx5_1", "mlx5_10"] and nd["ib"][0] == {"name": "mlx5_1", "port": 1,
                                                                                       "link": "IB"}
    assert J.net_device_problems(nd, "mlx5_1", None) == ["NCCL used IB devices mlx5_10:1 not in nccl_ib_hca (mlx5_1)"]
    assert J.net_device_problems(nd, "mlx5_1,mlx5_10", None) == []
    assert J.net_device_problems(nd, ["mlx5_1:1", "mlx5_10:2"], None) == [
        "NCCL used IB devices mlx5_10:1 not in nccl_ib_hca (['mlx5_1:1', 'mlx5_10:2'])"]
    assert J.net_device_problems(nd, "^mlx5_10", None) == ["NCCL used IB devices mlx5_10:1 that nccl_ib_hca "
                                                           "excludes (^mlx5_10)"]
    assert J.net_device_problems({"ib": None, "socket": None}, "mlx5_1", "eth0") == []  # not initialised


def test_inventory_lists_reach_nccl_as_exact_names():
    assert nccl_environment({"nccl_ib_hca": "mlx5_1", "nccl_socket_ifname": ["eth0", "eth1"]}) == {
        "NCCL_IB_HCA": "=mlx5_1", "NCCL_SOCKET_IFNAME": "=eth0,eth1"}
    assert J.exact_list("=mlx5_0:1,mlx5_3") == "=mlx5_0:1,mlx5_3"
    assert J.exact_list("^docker0,lo") == "^=docker0,lo"
    assert J.exact_list("^=docker0") == "^=docker0"
    with pytest.raises(ValueError):
        J.exact_list("mlx5_0:x")
    with pytest.raises(ValueError):
        J.exact_list("eth0,,eth1")


# ------------------------------------------------------------------------------------ world and addresses

def _doc(host, i, hosts, rpn=2, marker="m", world=None, **over):
    d = {"ok": True, "marker": marker, "node_rank": i, "nnodes": len(hosts), "world_size": len(hosts) * rpn,
         "ranks_per_node": rpn, "hosts": hosts, "local_ranks": list(range(i * rpn, (i + 1) * rpn)),
         "world": world if world is not None else [{"rank": r, "host": hosts[r // rpn]}
                                                   for r in range(len(hosts) * rpn)]}
    d.update(over)
    return d


def _world_lines(hosts: list[str], ranks_per_node: int, marker: str, docs: dict) -> list[str]:
    """J.world_problems_by_host as lines, host first (as a collective's ``world_problems`` holds them)."""
    return [f"{h}: {what}" for h, what in J.world_problems_by_host(hosts, ranks_per_node, marker, docs)]


def test_world_agrees_with_launch():
    hosts = ["a", "b", "c", "d"]
    assert J.world_problems_by_host(hosts, 2, "m", {h: _doc(h, i, hosts) for i, h in enumerate(hosts)}) == []


def test_two_half_worlds_are_not_one_world():
    hosts = ["a", "b", "c", "d"]
    halves = {"a": _doc("a", 0, ["a", "b"]), "b": _doc("b", 1, ["a", "b"]),
              "c": _doc("c", 0, ["c", "d"]), "d": _doc("d", 1, ["c", "d"])}
    got = _world_lines(hosts, 2, "m", halves)
    assert len(got) == 4  # every host is named
    assert got[0].startswith("a: nnodes 2 (launched 4); world_size 4 (launched 8)")
    assert "c: node_rank 0 (launched 2)" in got[2] and "saw a world of 4 ranks over c, d" in got[2]


@pytest.mark.parametrize("change, words", [
    ({"marker": "other"}, "marker 'other' (launched 'm')"),
    ({"world_size": 6}, "world_size 6 (launched 8)"),
    ({"local_ranks": [0, 1]}, "local ranks [0, 1] (launched [2, 3])"),
    ({"hosts": ["a", "x", "c", "d"]}, "hosts ['a', 'x', 'c', 'd']"),
])
def test_one_host_disagreeing_is_named(change, words):
    hosts = ["a", "b", "c", "d"]
    docs = {h: _doc(h, i, hosts) for i, h in enumerate(hosts)}
    docs["b"].update(change)
    got = _world_lines(hosts, 2, "m", docs)
    assert len(got) == 1 and got[0].startswith("b: ") and words in got[0]
    assert _world_lines(hosts, 2, "m", {h: d for h, d in docs.items() if h != "c"})[-1] == "c: no document"


def test_addresses_in_errors_ipv4_and_ipv6():
    text = ("Connection reset by peer [fd00::a:2]:29500 from 10.1.2.3; also ::ffff:10.0.0.9 and "
            "fe80::1%eth0, not 0.0.0.0 nor ::")
    assert addresses_in(text) == ["fd00::a:2", "10.1.2.3", "10.0.0.9", "fe80::1"]  # in the text's order
    assert normalize_address("FD00:0:0::A:2") == "fd00::a:2" and normalize_address("[::1]") == "::1"
    assert normalize_address("mn1.example") == "mn1.example"
    kind, _, addrs = rank_evidence(1, "exited", 0.0, None, "RuntimeError: Connection closed by peer [fd00::3]:4")
    assert kind == "peer" and addrs == ["fd00::3"]


def test_round_median_rule_and_limit():
    got = J.judge_round({"r0": 100.0, "r1": 95.0, "r2": 15.0}, None, 20)
    assert [k for k, (ok, _) in got.items() if not ok] == ["r2"]
    assert "16% of the round's median 95 GB/s (fails below 20%)" in got["r2"][1]
    got = J.judge_round({"p": 40.0, "q": None}, 50, 20)
    assert got["p"][0] is False and "internode_busbw_gbps 40 GB/s < min 50 GB/s" in got["p"][1]
    assert got["q"] == (False, "the collective failed")
    assert J.judge_round({"only": 5.0}, None, 20, pool=[100.0, 90.0])["only"][0] is False


# --------------------------------------------------------------------------------- group vars, pure

def test_multinode_settings_parses_and_refuses():
    g = multinode_settings({"nccl_backend": "nccl", "nccl_internode_busbw_gbps": "40", "gpus_per_node": 8,
                            "nccl_ib_hca": "mlx5_0,mlx5_3:1", "nccl_internode_probe_args": {"iters": 5}})
    assert g.limit_gbps == 40.0 and g.gpus_per_node == 8 and not g.needs_gpu_counts()
    st, notes = g.resolve({}, 300)
    assert st.ranks_per_node == 8 and st.args["iters"] == 5 and st.args["backend"] == "nccl" and notes == []
    assert multinode_settings({}).needs_gpu_counts()
    for bad, words in ((({"nccl_backend": "mpi"}), "nccl_backend: expected one of nccl, gloo"),
                       ({"nccl_internode_busbw_gbps": "fast"}, "nccl_internode_busbw_gbps: expected a number"),
                       ({"nccl_ranks_per_node": 2.5}, "expected an integer"),
                       ({"nccl_pairwise_slow_pct": 120}, "between 0 and 100"),
                       ({"nccl_internode_probe_args": {"iter": 5}}, "unknown argument(s) iter"),
                       ({"nccl_internode_probe_args": [1]}, "expected a mapping"),
                       ({"nccl_ib_hca": "mlx5_0:one"}, "host var nccl_ib_hca")):
        with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
            multinode_settings(bad)
    with pytest.raises(ConfigError, match="hosts without a GPU among GPU hosts: b"):
        GroupSettings().resolve({"a": 8, "b": 0}, 60)
    st, notes = GroupSettings().resolve({"a": 0, "b": 0}, 60)
    assert st.args["backend"] == "gloo" and "gloo all-reduce" in notes[0]


# --------------------------------------------------------------------- through the suite, replayed H200

def _run(tmp_path, captures, extra_vars=""):
    inv = replay_project(tmp_path, captures, extra_vars)
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", GPU_LAYERS)
    got = outcomes(rep)["test_allreduce"]
    figs = [f for f in run_figures(json.loads((rep / "results.json").read_text())) if f["layer"] == "nccl"]
    return res, got, figs


def test_healthy_capture_judged_on_ring_and_default_recorded(tmp_path):
    res, got, figs = _run(tmp_path, DATA / "replay-h200x2")
    assert got["outcome"] == "passed", got["message"]
    busbw = [f for f in figs if f["check"] == "allreduce_busbw_gbps"][0]
    assert busbw["verdict"] == "pass" and busbw["extra"]["algorithms"] == ["RING"]
    default = [f for f in figs if f["check"] == "allreduce_default_busbw_gbps"][0]
    assert default["verdict"] == "recorded" and "not judged" in default["extra"]["note"]


def test_nvls_figure_is_an_error_not_a_pass(tmp_path):
    def nvls(doc):  # NCCL picked NVLS at 4 GiB (an NVSwitch node), with a figure above the Ring floor
        doc["rows"][-1]["ip_algo"] = "NVLS/SIMPLE"
        doc["rows"][-1]["ip_busbw_gbps"] = 480.0
    _, got, figs = _run(tmp_path, alter(tmp_path, "nccl_allreduce", nvls))
    assert got["outcome"] == "error", got
    assert "all-reduce at 4294967296 B ran with NVLS: no floor for Nvls in" in got["message"]
    assert "h200-sxm-141gb.yaml (its all-reduce floor is for Ring)" in got["message"]
    busbw = [f for f in figs if f["check"] == "allreduce_busbw_gbps"][0]
    assert busbw["verdict"] == "recorded" and busbw["value"] == 480.0


def test_missing_wrong_count_is_an_error(tmp_path):
    def unchecked(doc):
        doc["rows"][2]["ip_wrong"] = None
        del doc["rows"][3]["oop_wrong"]
    _, got, _ = _run(tmp_path, alter(tmp_path, "nccl_allreduce", unchecked))
    assert got["outcome"] == "error", got
    assert "all-reduce at 16777216 B in-place: #wrong missing: correctness was not checked" in got["text"]
    assert "67108864 B out-of-place: #wrong missing" in got["text"]


def test_missing_wrong_count_is_kept_beside_a_failure(tmp_path):
    """A failure (wrong elements) in the same document must not hide the unchecked rows."""
    def both(doc):
        doc["rows"][2]["oop_wrong"] = None
        doc["rows"][-1]["ip_wrong"] = 5
    _, got, _ = _run(tmp_path, alter(tmp_path, "nccl_allreduce", both))
    assert got["outcome"] == "failure", got
    assert "all-reduce over 2 GPUs produced 5 wrong elements (#wrong 5 at 4294967296 B (4 GiB) in-place)" in got["text"]
    assert "#wrong missing: correctness was not checked" in got["text"]


def test_interface_outside_the_inventory_list_fails(tmp_path):
    def devices(doc):  # the devices NCCL reported on the node (the real capture's NET/Socket line)
        doc["net_devices"] = parse_net_devices(REAL)
    _, got, _ = _run(tmp_path, alter(tmp_path, "nccl_allreduce", devices), "nccl_socket_ifname=eth1")
    assert got["outcome"] == "failure", got
    assert "h200-a: NCCL used socket interfaces eth0 not in nccl_socket_ifname (eth1)" in got["message"]


H200 = REPO / "thresholds" / "h200-sxm-141gb.yaml"


# -- the failure line names the row, the world size and the threshold file --------------------------------

def test_size_text_is_bytes_with_the_binary_size():
    assert J.size_text(4294967296) == "4294967296 B (4 GiB)"
    assert J.size_text(1048576) == "1048576 B (1 MiB)"
    assert J.size_text(1000) == "1000 B"
    assert J.size_text(None) == "None B"


def test_floor_context_says_which_floor_of_the_file():
    limit = load_sku_file(str(H200)).limit("allreduce_busbw_gbps")  # min 300, min_by_world_size {2,4,8}
    row = {"bytes": 4294967296}
    assert J.floor_context(row, 2, limit) == (
        "in-place busbw at 4294967296 B (4 GiB), world size 2, Ring; floor for world size 2")
    # 3 GPUs: the file has no floor for 3, so its plain min is used, and the line must not claim otherwise
    assert J.floor_context(row, 3, limit, extra="2 hosts").endswith("world size 3, Ring; 2 hosts")


def test_slow_allreduce_failure_line_reads_like_the_table(tmp_path):
    """The 2xH200 capture, ALTERED: the 4 GiB in-place busbw (and algbw: world size 2, factor 1) set to 250
    GB/s, under the file's floor of 310 GB/s for world size 2."""
    def slow_4gib(doc):
        row = doc["rows"][-1]
        assert row["bytes"] == 4294967296
        row["ip_busbw_gbps"] = row["ip_algbw_gbps"] = 250.0

    inv = replay_project(tmp_path, alter(tmp_path, "nccl_allreduce", slow_4gib))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "nccl and not multinode",
                     "-s")
    case = next(c for c in junit(rep / "junit-nccl.xml") if c["name"].startswith("test_allreduce["))
    assert case["outcome"] == "failure", case
    assert case["message"] == (
        "h200-a: allreduce_busbw_gbps 250 GB/s < min 310 GB/s (in-place busbw at 4294967296 B (4 GiB), world "
        "size 2, Ring; floor for world size 2; NCCL variables set: NCCL_NVLS_ENABLE=0 (environment)) "
        "[limit: h200-sxm-141gb.yaml checks.allreduce_busbw_gbps]")  # the variables the ranks ran with
    # the row it names is the one -s printed: nccl-tests' columns, in-place busbw 250.00
    row = next(ln for ln in res.stdout.splitlines() if ln.lstrip().startswith("4294967296 "))
    assert row.split()[-3:] == ["250.00", "250.00", "0"]


def test_missing_hca_on_older_nccl_fails_the_host(tmp_path):
    """The 2xH200 capture, ALTERED: its NCCL devices replaced by what the NCCL 2.19.3 field sample says (no
    HCA, Socket over ens7); the inventory names mlx5_0. Before: PASS (IB read as not initialised)."""
    def nccl_2_19(doc):
        doc["net_devices"] = _nccl_log.parse_net_devices(NCCL["nccl-2.19-no-ib-device-socket-fallback"])

    inv = replay_project(tmp_path, alter(tmp_path, "nccl_allreduce", nccl_2_19), "nccl_ib_hca=mlx5_0")
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "test_allreduce and not multinode")
    case = next(c for c in junit(rep / "junit-nccl.xml") if c["name"].startswith("test_allreduce["))
    assert case["outcome"] == "failure", case
    assert case["message"] == ('h200-a: NCCL found none of the IB devices nccl_ib_hca lists (mlx5_0): NCCL says '
                               '"NET/IB : No device found."; NCCL variables set: NCCL_NVLS_ENABLE=0 (environment)')


# -- ranks that hang or die on one node: a failure in the probe's (and NCCL's) words; a probe that could not
# -- run stays an error, on both calls of the suite ----------------------------------------------------------

def _replay_with(tmp_path, sweep=None, at_size=None, extra_vars: str = ""):
    """A replay project whose saved nccl_allreduce documents for the suite's two calls (the pinned sweep, NCCL's
    own choice at the judged size) are replaced by ``sweep`` / ``at_size`` when given (documents as the probe
    prints them: a failed one is ``{"failed": true, "msg": ...}``)."""
    inv = replay_project(tmp_path, DATA / "replay-h200x2", extra_vars)
    folder = Path(inv.read_text().split("gpuaccept_replay=", 1)[1].split()[0])
    saved = json.loads((DATA / "replay-h200x2" / CAPTURE_NCCL).read_text())
    args = {k: v for k, v in saved["args"].items() if k != "deadline_s"}
    at = load_sku_file(str(H200)).limit("allreduce_busbw_gbps").at_bytes
    for doc, call in ((sweep, {"env": {"NCCL_ALGO": "Ring"}}), (at_size, {"min_bytes": at, "max_bytes": at})):
        if doc is not None:
            save_probe(str(folder), "nccl_allreduce", {**args, **call}, doc)
    return inv


def _allreduce_case(tmp_path, inv):
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "test_allreduce and not multinode")
    return next(c for c in junit(rep / "junit-nccl.xml") if c["name"].startswith("test_allreduce["))


def _real_failure(env: dict) -> dict:
    """The probe run for real with 2 gloo ranks whose environment gets ``env``; the failure document it prints."""
    args = {"backend": "gloo", "world_size": 2, "min_bytes": 1024, "max_bytes": 4096, "iters": 2, "warmup": 1,
            "reps": 1, "deadline_s": 60, "env": env}
    p = subprocess.run([sys.executable, str(REPO / "gpuaccept" / "probes" / "nccl_allreduce.py"), json.dumps(args)],
                       capture_output=True, text=True, timeout=120)
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    assert p.returncode == 1 and doc["failed"] is True, p.stderr[-2000:]
    return doc


def _real_missing_interface_failure() -> dict:
    """Ranks told to use an interface this machine lacks (GLOO_SOCKET_IFNAME, gloo's NCCL_SOCKET_IFNAME): both
    die in the rendezvous."""
    return _real_failure({"GLOO_SOCKET_IFNAME": "nosuchif0"})


def _real_broken_torch_failure(tmp_path) -> dict:
    """Ranks whose torch fails while it loads (a package on their path that raises what a missing libnccl
    raises): both die before they reach the collective."""
    pkg = tmp_path / "broken" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('raise ImportError("libnccl.so.2: cannot open shared object file: '
                                     'No such file or directory")\n')
    return _real_failure({"PYTHONPATH": str(pkg.parent)})


def test_collective_broke_reads_the_stage_the_ranks_reached(tmp_path):
    # the ranks reached the rendezvous: the collective formed on the node and broke there
    died = _real_missing_interface_failure()
    assert died["ranks_failed"]["outcome"] == "failed" and died["ranks_failed"]["stage"] == "init", died
    assert {r["rank"] for r in died["ranks_failed"]["ranks"]} <= {0, 1}
    assert J.collective_broke(died["ranks_failed"])
    # the ranks' torch did not load: the probe never ran the collective
    broken = _real_broken_torch_failure(tmp_path)
    assert broken["ranks_failed"]["stage"] == "setup", broken
    assert not J.collective_broke(broken["ranks_failed"])
    # a hang reads the stage of the slowest ranks
    reports = [{"rank": 0, "step": 9, "phase": "allreduce 4194304 B", "stage": "collective"},
               {"rank": 1, "step": 3, "phase": "ncclCommInitRank", "stage": "init", "state": "T"}]
    hung = _supervisor.ranks_failed("hung", reports)
    assert hung["stage"] == "init" and [r["rank"] for r in hung["ranks"]] == [1] and J.collective_broke(hung)
    assert J.collective_broke(_supervisor.ranks_failed("stalled", reports[:1]))
    for could_not_run in ({"outcome": "aborted", "stage": "collective"}, {"outcome": "failed", "stage": "setup"},
                          {"outcome": "failed"}, {}):
        assert not J.collective_broke(could_not_run)


def test_ranks_that_die_on_the_node_fail_it_with_their_words(tmp_path):
    """Before: ERROR "nccl_allreduce: rank 0 exited with rc 1: ..." (as if nothing had been judged), while the
    same death in the second call (NCCL's own algorithm) was a FAILURE."""
    doc = _real_missing_interface_failure()
    case = _allreduce_case(tmp_path, _replay_with(tmp_path, sweep=doc))
    assert case["outcome"] == "failure", case
    assert re.match(r"h200-a: all-reduce over 2 GPUs \(NCCL_ALGO=Ring, 1048576\.\.4294967296 B\) failed: rank [01] "
                    r"exited with rc 1: ", case["message"]), case["message"]  # whichever rank died first
    assert "Unable to find address for: nosuchif0" in case["message"]


def test_ranks_whose_torch_does_not_load_are_an_error_of_the_node_software(tmp_path):
    """Ranks that died importing torch (a libnccl it cannot load) never ran the all-reduce: an ERROR with the
    node's software as its cause, not a failure of its GPUs."""
    doc = _real_broken_torch_failure(tmp_path)
    case = _allreduce_case(tmp_path, _replay_with(tmp_path, sweep=doc))
    assert case["outcome"] == "error", case
    assert "libnccl.so.2: cannot open shared object file" in case["message"]
    assert "failed: rank" not in case["message"]
    rec = next(t for t in json.loads((tmp_path / "rep" / "results.json").read_text())["tests"]
               if t["name"].startswith("test_allreduce["))
    assert (rec["action"]["cause"], rec["action"]["kind"], rec["action"]["action"]) == \
        ("configuration", "import_broken", "fix-config"), rec["action"]


def test_a_probe_that_could_not_run_the_second_call_is_an_error_not_a_failure(tmp_path):
    """Before: FAIL "all-reduce with NCCL's own algorithm choice failed: ..." for a probe that never started
    its ranks (here: the rendezvous port taken on every attempt)."""
    busy = {"failed": True, "msg": "rendezvous failed: port in use on 3 attempts"}
    case = _allreduce_case(tmp_path, _replay_with(tmp_path, at_size=busy))
    assert case["outcome"] == "error", case
    assert "all-reduce with NCCL's own algorithm choice at 4294967296 B not measured" in case["message"]
    assert "port in use on 3 attempts" in case["message"]


def test_hang_in_the_second_call_fails_naming_the_slowest_rank(tmp_path):
    hung = _supervisor.hang_message([{"rank": 0, "step": 5, "phase": "allreduce 4294967296 B"},
                                     {"rank": 1, "step": 3, "phase": "warmup 4294967296 B", "state": "T"}], 290)
    fact = _supervisor.ranks_failed("hung", [{"rank": 0, "step": 5, "phase": "allreduce 4294967296 B",
                                              "stage": "collective"},
                                             {"rank": 1, "step": 3, "phase": "warmup 4294967296 B",
                                              "stage": "collective", "state": "T"}])
    case = _allreduce_case(tmp_path, _replay_with(tmp_path, at_size={"failed": True, "msg": hung,
                                                                      "ranks_failed": fact}))
    assert case["outcome"] == "failure", case
    assert ("all-reduce with NCCL's own algorithm choice at 4294967296 B failed: all-reduce hung: ranks [0, 1] did "
            "not finish within 290s; killed all ranks; slowest: rank 1 in 'warmup 4294967296 B' (process stopped)"
            ) in case["message"]


def test_wrong_elements_name_their_row_and_column(tmp_path):
    def wrong(doc):  # ALTERED: 12 wrong elements in the 4 GiB in-place cell, 3 in the 1 MiB out-of-place one
        doc["rows"][-1]["ip_wrong"], doc["rows"][0]["oop_wrong"] = 12, 3
        doc["wrong_total"] = 15
    inv = replay_project(tmp_path, alter(tmp_path, "nccl_allreduce", wrong))
    case = _allreduce_case(tmp_path, inv)
    assert case["outcome"] == "failure", case
    assert case["message"] == ("h200-a: all-reduce over 2 GPUs produced 15 wrong elements (#wrong 3 at 1048576 B "
                               "(1 MiB) out-of-place, 12 at 4294967296 B (4 GiB) in-place); NCCL variables set: "
                               "NCCL_NVLS_ENABLE=0 (environment)")


def test_nccl_versions_that_differ_are_named_per_host():
    """NCCL's WARN "Mismatched NCCL version detected : rank 1 version 22705 rank 0 version 22703" names ranks and
    codes; the failed collective now also names which host runs which version (from each host's document)."""
    assert J.version_problem({"a": "2.27.5", "b": "2.27.3", "c": "2.27.5", "d": None}) == (
        "NCCL versions differ between hosts: 2.27.5 on a, c; 2.27.3 on b")
    assert J.version_problem({"a": "2.27.5", "b": "2.27.5", "c": None}) is None
    assert J.version_problem({}) is None
