"""Faults found by the sixth new-user trial (2026-11-30): an ML infrastructure engineer who knows nccl-tests
runs ``pytest -k nccl -s`` while debugging a slow job.

- The all-reduce failure line said ``allreduce_busbw_gbps 250 GB/s < min 310 GB/s``: not which row of the
  nccl-tests table (size, in-place or out-of-place column), not for which world size the floor was written,
  nor which threshold file it came from. It now reads like the table it is judged on.
- NCCL up to 2.21 or so says only ``NET/IB : No device found.`` when it finds no HCA (no ``NET/IB : Using``
  line) and prints its version bare (``NCCL version 2.19.3+cuda12.3``, no ``NCCL INFO`` prefix). gpuaccept read
  that as "IB not initialised", so a host whose inventory names an HCA (``nccl_ib_hca``) that is missing
  PASSED on such NCCL, and the version was unknown. Now it fails, in NCCL's words.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from gpuaccept.judging import nccl as nccl_judge
from gpuaccept.runner.host import save_probe
from gpuaccept.probes import _nccl_log, _supervisor
from gpuaccept.config.thresholds import load_sku_file
from probe_helpers import field_blocks
from project_helpers import CAPTURE_NCCL, DATA, REPO, alter, junit, make_project, replay_project, run_pytest


NCCL = field_blocks("nccl-logs.txt")

H200 = REPO / "thresholds" / "h200-sxm-141gb.yaml"


# -- the failure line names the row, the world size and the threshold file --------------------------------

def test_size_text_is_bytes_with_the_binary_size():
    assert nccl_judge.size_text(4294967296) == "4294967296 B (4 GiB)"
    assert nccl_judge.size_text(1048576) == "1048576 B (1 MiB)"
    assert nccl_judge.size_text(1000) == "1000 B"
    assert nccl_judge.size_text(None) == "None B"


def test_floor_context_says_which_floor_of_the_file():
    limit = load_sku_file(str(H200)).limit("allreduce_busbw_gbps")  # min 300, min_by_world_size {2,4,8}
    row = {"bytes": 4294967296}
    assert nccl_judge.floor_context(row, 2, limit) == (
        "in-place busbw at 4294967296 B (4 GiB), world size 2, Ring; floor for world size 2")
    # 3 GPUs: the file has no floor for 3, so its plain min is used, and the line must not claim otherwise
    assert nccl_judge.floor_context(row, 3, limit, extra="2 hosts").endswith("world size 3, Ring; 2 hosts")


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
        "size 2, Ring; floor for world size 2) [limit: h200-sxm-141gb.yaml checks.allreduce_busbw_gbps]")
    # the row it names is the one -s printed: nccl-tests' columns, in-place busbw 250.00
    row = next(ln for ln in res.stdout.splitlines() if ln.lstrip().startswith("4294967296 "))
    assert row.split()[-3:] == ["250.00", "250.00", "0"]


# -- NCCL's "NET/IB : No device found." and its bare version line -----------------------------------------

def test_nccl_2_19_without_an_hca_is_read_as_no_device_with_its_version():
    got = _nccl_log.parse_nccl_log(NCCL["nccl-2.19-no-ib-device-socket-fallback"])
    assert (got["nccl_version"], got["nccl_version_full"]) == ("2.19.3", "2.19.3+cuda12.3")
    nd = got["net_devices"]
    assert nd["ib"] == [] and nd["ib_said"] == "NET/IB : No device found."
    assert nd["socket"] == [{"name": "ens7", "address": "10.128.0.32"}]
    assert nccl_judge.net_device_problems(nd, "mlx5_0", None) == [
        'NCCL found none of the IB devices nccl_ib_hca lists (mlx5_0): NCCL says "NET/IB : No device found."']
    assert nccl_judge.net_device_problems(nd, None, "ens7") == []  # no HCA asked for: nothing to fail


def test_a_torch_error_naming_the_nccl_version_is_not_the_version_line():
    # torch ends its NCCL errors with ", NCCL version 2.21.5": that is not NCCL's own version line
    got = _nccl_log.parse_nccl_log(NCCL["torch-internal-error-last-error-empty"])
    assert got["nccl_version"] is None


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
                               '"NET/IB : No device found."')


# -- ranks that hang or die on one node: a failure in the probe's (and NCCL's) words; a probe that could not
# -- run stays an error, on both calls of the suite ----------------------------------------------------------

def _replay_with(tmp_path, sweep=None, at_size=None, extra_vars: str = ""):
    """A replay project whose saved nccl_allreduce documents for the suite's two calls (the pinned sweep, NCCL's
    own choice at the judged size) are replaced by ``sweep`` / ``at_size`` when given (documents as the probe
    prints them: a failed one is ``{"failed": true, "msg": ...}``)."""
    inv = replay_project(tmp_path, DATA, extra_vars)
    folder = Path(inv.read_text().split("gpuaccept_replay=", 1)[1].split()[0])
    saved = json.loads((DATA / CAPTURE_NCCL).read_text())
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


def _real_missing_interface_failure() -> dict:
    """The probe run for real with 2 gloo ranks told to use an interface this machine lacks
    (GLOO_SOCKET_IFNAME, gloo's NCCL_SOCKET_IFNAME): both ranks die; the document it prints."""
    args = {"backend": "gloo", "world_size": 2, "min_bytes": 1024, "max_bytes": 4096, "iters": 2, "warmup": 1,
            "reps": 1, "deadline_s": 60, "env": {"GLOO_SOCKET_IFNAME": "nosuchif0"}}
    p = subprocess.run([sys.executable, str(REPO / "gpuaccept" / "probes" / "nccl_allreduce.py"), json.dumps(args)],
                       capture_output=True, text=True, timeout=120)
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    assert p.returncode == 1 and doc["failed"] is True, p.stderr[-2000:]
    return doc


def test_collective_failure_tells_broken_ranks_from_a_probe_that_could_not_run():
    real = _real_missing_interface_failure()["msg"]
    assert nccl_judge.collective_failure("nccl_allreduce: " + real) == real
    hung = _supervisor.hang_message([{"rank": 0, "step": 5, "phase": "allreduce 4194304 B"},
                                     {"rank": 1, "step": 3, "phase": "warmup 4194304 B", "state": "T"}], 290)
    assert nccl_judge.collective_failure(f"nccl_allreduce: {hung} (replayed)").startswith("all-reduce hung: ")
    for could_not_run in ("nccl_allreduce: rendezvous failed: port in use on 3 attempts",
                          "nccl_allreduce: probe terminated by SIGTERM; killed all ranks",
                          "nccl_allreduce: no JSON document (rc 1): ModuleNotFoundError: No module named 'torch'"):
        assert nccl_judge.collective_failure(could_not_run) is None


def test_ranks_that_die_on_the_node_fail_it_with_their_words(tmp_path):
    """Before: ERROR "nccl_allreduce: rank 0 exited with rc 1: ..." (as if nothing had been judged), while the
    same death in the second call (NCCL's own algorithm) was a FAILURE."""
    doc = _real_missing_interface_failure()
    case = _allreduce_case(tmp_path, _replay_with(tmp_path, sweep=doc))
    assert case["outcome"] == "failure", case
    assert re.match(r"h200-a: all-reduce over 2 GPUs \(NCCL_ALGO=Ring, 1048576\.\.4294967296 B\) failed: rank [01] "
                    r"exited with rc 1: ", case["message"]), case["message"]  # whichever rank died first
    assert "Unable to find address for: nosuchif0" in case["message"]


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
    case = _allreduce_case(tmp_path, _replay_with(tmp_path, at_size={"failed": True, "msg": hung}))
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
                               "(1 MiB) out-of-place, 12 at 4294967296 B (4 GiB) in-place)")


# -- the inter-node ring's failure line: size, world, hosts and the group var, as on one node ----------------

def test_ring_below_its_floor_names_size_world_hosts_and_the_var(tmp_path):
    """Two real sshd nodes (127.0.0.131-132) x 1 gloo rank; a floor (group var) no loopback reaches. Before:
    "fleet: internode_busbw_gbps 0.3 GB/s < min 1e+06 GB/s" (no size, no world, no hosts, no var)."""
    from sshd import start_sshd, write_known_hosts
    base = tmp_path / "nodes"
    base.mkdir()
    sshds = [start_sshd(base, address=f"127.0.0.{131 + i}", name=f"rg{i + 1}") for i in range(2)]
    try:
        kh = write_known_hosts(base / "known_hosts", sshds)
        probe_args = {"backend": "gloo", "min_bytes": 4096, "max_bytes": 65536, "factor": 4, "iters": 3, "warmup": 1}
        vars_ = ("[gpu:vars]\nnccl_ranks_per_node=1\nnccl_stall_s=20\nnccl_internode_busbw_gbps=1000000\n"
                 f"nccl_internode_probe_args={json.dumps(probe_args)}\n")
        inv = make_project(tmp_path, sshds, kh, extra_suite="", name="test_zz_none.py", inventory_extra=vars_)
        rep = tmp_path / "rep"
        res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", kh, "--reports", str(rep),
                         "-k", "multinode", "--probe-timeout", "90", timeout=150)
        case = next(c for c in junit(rep / "junit-nccl.xml") if c["name"] == "test_allreduce_multinode")
        assert case["outcome"] == "failure", res.stdout[-3000:]
        assert re.fullmatch(r"fleet: internode_busbw_gbps [\d.e+-]+ GB/s < min 1e\+06 GB/s \(ring: in-place busbw "
                            r"at 65536 B \(64 KiB\), world size 2, gloo; 2 hosts x 1 ranks: rg1, rg2\) "
                            r"\[limit: group var nccl_internode_busbw_gbps\]", case["message"]), case["message"]
    finally:
        for s in sshds:
            s.stop()


# -- NCCL_SOCKET_IFNAME naming an interface the host lacks: this host's fault, said so -----------------------

def test_socket_ifname_without_a_match_is_the_hosts_own_fault():
    """NCCL 2.27.7 (NVIDIA/nccl#1837) ends in "ncclSocketInit: connecting to address  with family 59936 ...":
    a socket error, so the rank was read as the victim of a peer ("peer" evidence, no address to blame)."""
    text = "\n".join(NCCL["socket-ifname-missing-interface-nccl-2.27"])
    kind, why, addrs = _supervisor.rank_evidence(1, "exited", 0.0, None, text)
    assert (kind, addrs) == ("local", [])
    assert why == ("rc 1: [trainer0|0]:ncclSocketInit: connecting to address  with family 59936 is neither "
                   "AF_INET(2) nor AF_INET6(10) (NCCL_SOCKET_IFNAME set to eth2 matched no interface of this host)")


def test_socket_ifname_that_matched_is_not_blamed():
    # the 2xH200 capture's real lines (it found eth0), ALTERED: NCCL's ENV line for the variable added
    real = (REPO / "tests" / "data" / "nccl-info-h200x2.log").read_text().splitlines()
    lines = ["vm:720:720 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to =eth0"] + real
    assert _nccl_log.socket_ifname_unmatched(lines) is None
    assert _nccl_log.socket_ifname_unmatched(lines[:1]) == ("NCCL_SOCKET_IFNAME set to =eth0 matched "
                                                                    "no interface of this host")


def test_nccl_versions_that_differ_are_named_per_host():
    """NCCL's WARN "Mismatched NCCL version detected : rank 1 version 22705 rank 0 version 22703" names ranks and
    codes; the failed collective now also names which host runs which version (from each host's document)."""
    assert nccl_judge.version_problem({"a": "2.27.5", "b": "2.27.3", "c": "2.27.5", "d": None}) == (
        "NCCL versions differ between hosts: 2.27.5 on a, c; 2.27.3 on b")
    assert nccl_judge.version_problem({"a": "2.27.5", "b": "2.27.5", "c": None}) is None
    assert nccl_judge.version_problem({}) is None
