"""RoCE GID and P_Key settings compared across a selection: the rdma probe reading the tables of
sysfs-shaped trees written here (the files ib_core has), the pure comparison, and the fleet test
(suites/test_gpudirect.py test_rdma_settings) end to end on hosts that replay the probe's own documents of
trees that differ, and on this NIC-less machine itself."""
from __future__ import annotations

import json
from pathlib import Path

from gpuaccept.causes import Cause
from gpuaccept.judging import actions, rdmaconfig

from probe_helpers import run_probe, write_line
from project_helpers import fleet_test, junit, make_project, replay_captures, run_pytest

ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"


def roce_tree(root: Path, pkeys=("0xffff",), v4: str = "c0a8:0101", subnet: str | None = None,
              slots: int = 8, npkeys: int = 4, layer: str = "Ethernet", rate: str = "200 Gb/sec (4X HDR)",
              board: str = "MT_0000000838") -> Path:
    """``<root>/sys``: mlx5_0 port 1, a RoCE port (``layer`` Ethernet; InfiniBand for an IB port) at ``rate`` on an
    HCA of ``board``, with the GID table a ConnectX has on an interface with an IPv6 link-local and an IPv4 address
    (each as RoCE v1 and RoCE v2), ``subnet`` an extra global IPv6 prefix (4 groups) when given, the other ``slots``
    all zero; ``pkeys`` in a table of ``npkeys`` (rest 0x0000)."""
    sysfs = root / "sys"
    port = sysfs / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    write_line(port.parent.parent / "board_id", board)
    for k, v in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"), ("link_layer", layer), ("rate", rate)):
        write_line(port / k, v)
    used = [("fe80:0000:0000:0000:0e42:a1ff:fe2b:3c4d", "IB/RoCE v1"), ("fe80:0000:0000:0000:0e42:a1ff:fe2b:3c4d",
            "RoCE v2"), (f"0000:0000:0000:0000:0000:ffff:{v4}", "IB/RoCE v1"),
            (f"0000:0000:0000:0000:0000:ffff:{v4}", "RoCE v2")]
    if subnet:
        used.append((f"{subnet}:0000:0000:0000:0001", "RoCE v2"))
    for i in range(slots):
        gid, kind = used[i] if i < len(used) else (ZERO, None)
        write_line(port / "gids" / str(i), gid)
        if kind:  # the kernel refuses to read the type of an unused entry: no readable file stands for it here
            write_line(port / "gid_attrs" / "types" / str(i), kind)
    for i in range(npkeys):
        write_line(port / "pkeys" / str(i), pkeys[i] if i < len(pkeys) else "0x0000")
    return sysfs


def rdma(sysfs: Path) -> dict:
    rc, doc, err = run_probe("rdma", {"sysfs": str(sysfs), "proc": str(sysfs.parent / "proc"), "gpu_bus_ids": []})
    assert rc == 0, err
    return doc


def test_the_probe_reads_the_used_entries_of_the_gid_and_pkey_tables(tmp_path):
    doc = rdma(roce_tree(tmp_path, pkeys=("0xffff", "0x8001"), slots=10))
    (port,) = doc["devices"][0]["ports"]
    assert [(g["index"], g["type"]) for g in port["gids"]] == [(0, "IB/RoCE v1"), (1, "RoCE v2"), (2, "IB/RoCE v1"),
                                                               (3, "RoCE v2")]  # slots 4..9 are all zero: unused
    assert port["gids"][3]["gid"] == "0000:0000:0000:0000:0000:ffff:c0a8:0101"
    assert port["pkeys"] == [{"index": 0, "pkey": "0xffff"}, {"index": 1, "pkey": "0x8001"}]
    assert rdmaconfig.port_settings(doc) == {"mlx5_0/ports/1": {
        "gids": "{IB/RoCE v1 IPv4, IB/RoCE v1 fe80::/64, RoCE v2 IPv4, RoCE v2 fe80::/64}",
        "pkeys": "{0x8001, 0xffff}"}}


def test_addresses_and_indices_are_not_compared_only_types_subnets_and_pkeys(tmp_path):
    """Each host has its own IPv4 address and its table filled in its own order: the same settings."""
    a = rdma(roce_tree(tmp_path / "a", v4="c0a8:0101"))
    b = rdma(roce_tree(tmp_path / "b", v4="c0a8:0102", slots=32))
    b_port = b["devices"][0]["ports"][0]
    b_port["gids"].reverse()  # the table filled in another order: other indices, the same entries
    assert rdmaconfig.splits({"a": a, "b": b}) == []
    c = rdma(roce_tree(tmp_path / "c", pkeys=("0x7fff",)))  # the default partition as a limited member only
    ((host, why, ev),) = [s for s in rdmaconfig.splits({"a": a, "b": b, "c": c}) if s[0] == "c"]
    assert why == "P_Key table of mlx5_0/ports/1: {0x7fff}, while 2 of 3 hosts have {0xffff}"
    assert ev["what"] == "P_Key table" and ev["port"] == "mlx5_0/ports/1" and ev["values"] == {
        "{0xffff}": ["a", "b"], "{0x7fff}": ["c"]}
    act = actions.for_cause(Cause("configuration", "rdma_config_split", host, evidence=ev))
    assert (act.action, act.cause, act.setting) == ("fix-config", "configuration", "P_Key table of mlx5_0/ports/1")
    assert "/sys/class/infiniband/mlx5_0/ports/1/pkeys/*" in act.command


def test_a_tie_blames_every_host_naming_the_split(tmp_path):
    a = rdma(roce_tree(tmp_path / "a"))
    b = rdma(roce_tree(tmp_path / "b", subnet="fd00:0001:0002:0003"))
    got = rdmaconfig.splits({"a": a, "b": b})
    assert sorted(h for h, _, _ in got) == ["a", "b"]
    assert all(ev["what"] == "GID table" for _, _, ev in got)
    assert "RoCE v2 fd00:1:2:3::/64" in got[0][1] + got[1][1] and "no majority" in got[0][1]


def test_a_document_without_tables_is_not_compared():
    """An rdma document from before the tables were read (no ``gids``/``pkeys`` keys): nothing to compare."""
    old = {"devices": [{"name": "mlx5_0", "ports": [{"port": 1, "state": "4: ACTIVE"}]}]}
    assert rdmaconfig.port_settings(old) == {}
    assert rdmaconfig.splits({"a": old, "b": old}) == []
    assert rdmaconfig.gid_subnet(ZERO) is None and rdmaconfig.gid_subnet("not a gid") is None


def _fleet(tmp_path: Path, trees: dict[str, Path]) -> tuple[dict, dict]:
    """suites/test_gpudirect.py test_rdma_settings over hosts that each replay the rdma probe's document of its own
    tree (its other probes: the 2xH200 capture's gpu_inventory): (the test's results.json entry, its JUnit case)."""
    lines = []
    for host, sysfs in trees.items():
        (tmp_path / host).mkdir(parents=True)
        caps = replay_captures(tmp_path / host, {"rdma": ({}, rdma(sysfs))})
        lines.append(f"{host} ansible_connection=local gpuaccept_replay={caps} gpu_sku=h200-sxm-141gb gpus_per_node=2")
    rep, t = fleet_test(tmp_path, lines, "test_gpudirect.py", "test_rdma_settings")
    (case,) = [c for c in junit(rep / "junit-gpudirect.xml") if c["name"].startswith("test_rdma_settings")]
    return t, case


def test_the_fleet_test_blames_only_the_host_whose_tables_differ(tmp_path):
    t, case = _fleet(tmp_path, {"h200-a": roce_tree(tmp_path / "ta"), "h200-b": roce_tree(tmp_path / "tb", v4="c0a8:0102"),
                                "h200-c": roce_tree(tmp_path / "tc", pkeys=("0xffff", "0x8002"))})
    assert t["outcome"] == "failed" and case["outcome"] == "failure", t
    (entry,) = t["failures"]
    assert entry["host"] == "h200-c", entry
    assert entry["line"] == ("h200-c: P_Key table of mlx5_0/ports/1: {0x8002, 0xffff}, while 2 of 3 hosts have "
                             "{0xffff}")
    assert entry["cause"]["class"] == "configuration" and entry["cause"]["kind"] == "rdma_config_split"
    assert entry["action"]["action"] == "fix-config" and "mlx5_0/ports/1/pkeys" in entry["action"]["command"]
    assert "h200-a" not in case["message"] and "h200-b" not in case["message"]


def test_the_fleet_test_passes_hosts_that_agree_and_skips_without_two_nics(tmp_path):
    t, _ = _fleet(tmp_path / "same", {"h200-a": roce_tree(tmp_path / "ta"),
                                      "h200-b": roce_tree(tmp_path / "tb", v4="c0a8:0102")})
    assert t["outcome"] == "passed" and not t.get("failures"), t
    bare = tmp_path / "bare" / "sys"
    bare.mkdir(parents=True)  # a host without /sys/class/infiniband
    t, case = _fleet(tmp_path / "one", {"h200-a": roce_tree(tmp_path / "ta2"), "h200-b": bare})
    assert t["outcome"] == "skipped" and "1 of the 2 selected have an InfiniBand/RoCE device" in t["message"], t


def test_on_this_nic_less_machine_the_new_rdma_tests_skip_with_their_reason(tmp_path):
    """A real local node (this machine has no /sys/class/infiniband): the fleet comparison and the loopback's
    counters skip, each saying why; nothing fails, nothing passes silently."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("cpu-a ansible_connection=local\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "suites/test_gpudirect.py", "-k",
                     "rdma_settings or rdma_link_errors")
    assert (rep / "results.json").exists(), res.stdout[-3000:] + res.stderr[-2000:]
    tests = {t["nodeid"].split("::")[-1].split("[")[0]: t for t in json.loads((rep / "results.json").read_text())["tests"]}
    assert tests["test_rdma_settings"]["outcome"] == "skipped", tests
    assert "0 of the 1 selected have an InfiniBand/RoCE device" in tests["test_rdma_settings"]["message"]
    assert tests["test_rdma_link_errors"]["outcome"] == "skipped"
    assert "cpu-a: no ib_write_bw loopback ran on this host" in tests["test_rdma_link_errors"]["message"]


NDR, HDR = "400 Gb/sec (4X NDR)", "200 Gb/sec (4X HDR)"


def _ib(tmp_path: Path, name: str, rate: str = NDR, board: str = "MT_0000000838") -> dict:
    return rdma(roce_tree(tmp_path / name, layer="InfiniBand", rate=rate, board=board))


def test_a_host_whose_ports_trained_below_the_same_board_elsewhere_is_named(tmp_path):
    """Each host's own comparison (one port each) sees nothing; across the selection the 200 Gb/s host stands out,
    under its own name only; a faster host, a host with an ib_rate_gbps floor and another board are never blamed."""
    docs = {h: _ib(tmp_path, h) for h in ("a", "b", "c")}
    docs["slow"] = _ib(tmp_path, "slow", HDR)
    ((host, why, ev),) = rdmaconfig.slow_hosts(docs)
    assert host == "slow" and why.startswith("InfiniBand mlx5_0 port 1 at 200 Gb/s: below the 400 Gb/s that 3 "
                                             "InfiniBand port(s) of the same board run at on 3 host(s)"), why
    assert (ev["rate_gbps"], ev["reference_gbps"], ev["board"], ev["peers"]) == (200.0, 400.0, "MT_0000000838",
                                                                                ["a", "b", "c"])
    act = actions.for_cause(Cause("hardware", "ib_rate_below_fleet", host, evidence=ev))
    assert (act.action, act.cause) == ("check-network", "hardware")
    assert "mlx5_0 port 1 of InfiniBand trained below the 400 Gb/s the same board runs at" in act.reason
    assert rdmaconfig.slow_hosts(docs, floors={"slow"}) == []  # judged against its ib_rate_gbps by test_rdma_ports
    other = {**docs, "slow": _ib(tmp_path, "other-board", HDR, board="MT_0000000223")}
    assert rdmaconfig.slow_hosts(other) == []  # another part: not compared with these
    fast = {"a": _ib(tmp_path, "a2", HDR), "b": _ib(tmp_path, "b2", HDR), "fast": _ib(tmp_path, "fast")}
    assert rdmaconfig.slow_hosts(fast) == []  # a host faster than the rest is never blamed
    assert rdmaconfig.slow_hosts({"slow": docs["slow"]}) == []  # one host: nothing to compare with
    roce = {"a": rdma(roce_tree(tmp_path / "ra", rate=NDR)), "b": rdma(roce_tree(tmp_path / "rb"))}
    assert rdmaconfig.slow_hosts(roce) == []  # Ethernet ports: compared only where ib_hcas names them
    ((host, _, _),) = rdmaconfig.slow_hosts(roce, {"a": ["mlx5_0"], "b": ["mlx5_0"]})
    assert host == "b"


def test_the_fleet_test_names_the_host_whose_port_trained_slow(tmp_path):
    t, case = _fleet(tmp_path, {"h200-a": roce_tree(tmp_path / "ta", layer="InfiniBand", rate=NDR),
                                "h200-b": roce_tree(tmp_path / "tb", v4="c0a8:0102", layer="InfiniBand", rate=NDR),
                                "h200-c": roce_tree(tmp_path / "tc", v4="c0a8:0103", layer="InfiniBand", rate=HDR)})
    assert t["outcome"] == "failed" and case["outcome"] == "failure", t
    (entry,) = t["failures"]
    assert entry["host"] == "h200-c" and "mlx5_0 port 1 at 200 Gb/s: below the 400 Gb/s" in entry["line"], entry
    assert entry["cause"]["class"] == "hardware" and entry["cause"]["kind"] == "ib_rate_below_fleet"
    assert entry["action"]["action"] == "check-network" and "mlxlink" in entry["action"]["command"]
    assert "h200-a" not in case["message"] and "h200-b" not in case["message"]
