"""Every layer runs its hosts at once without ``-n`` (gpuaccept.runner.prefetch plans, ``prefetch.ahead``).

Four real sshd nodes on loopback, the shipped suites, a fresh ``python -m pytest`` per run, no ``-n``. The
storage layer's probes (storage_mounts, then fio_throughput on the paths placed right, each host with its own
``storage_paths``) run on the four hosts at the same time; the fleet test (test_fleet_consistency) reads every
host's gpu_inventory gathered at once. Proved from the probe documents' ``timing`` (``started``/``ended``,
the controller's clock, kept by HostRunner.probe_now beside each document), never from a wall-clock bound:
with the default ``--forks`` the hosts' fio runs overlap; with ``--forks 0`` (one host after another) they do
not; a host's own probes never overlap each other in either.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from project_helpers import junit
from sshd import start_sshd, write_known_hosts

REPO = Path(__file__).resolve().parent.parent
ADDRESSES = ("127.0.0.61", "127.0.0.62", "127.0.0.63", "127.0.0.64")


@pytest.fixture
def four_nodes(tmp_path):
    """Four sshd nodes l1..l4 and a known_hosts file trusting them; stopped after the test."""
    nodes = []
    try:
        for i, a in enumerate(ADDRESSES, 1):
            nodes.append(start_sshd(tmp_path / "sshd", address=a, name=f"l{i}"))
        yield nodes, write_known_hosts(tmp_path / "known_hosts", nodes)
    finally:
        for n in nodes:
            n.stop()


def _project(root: Path, nodes) -> Path:
    """A checkout in ``root`` (the shipped suites' shims, thresholds) whose inventory lists ``nodes``, each with a
    ``storage_paths`` folder of its own and a 1 s fio; returns the inventory."""
    root.mkdir()
    for f in ("pytest.ini", "conftest.py"):
        shutil.copy(REPO / f, root / f)
    shutil.copytree(REPO / "suites", root / "suites")
    shutil.copytree(REPO / "thresholds", root / "thresholds")
    hv = root / "host_vars"
    hv.mkdir()
    for n in nodes:
        data = root / f"data-{n.name}"
        data.mkdir()
        (hv / f"{n.name}.yml").write_text(
            f"storage_paths: [{data}]\nstorage_allow_root_fs: true\n"
            "storage_fio: {size: 8388608, runtime: 1, numjobs: 1, iodepth: 4, min_free_bytes: 67108864}\n")
    inv = root / "inventory.ini"
    inv.write_text("[cpu]\n" + "".join(n.inventory_line() + "\n" for n in nodes))
    return inv


def _run(root: Path, inv: Path, kh: str, rep: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--inventory", str(inv), "--known-hosts", kh,
                           "--reports", str(rep), "-p", "no:cacheprovider", *args], cwd=root, capture_output=True,
                          text=True, timeout=300)


def _timings(rep: Path, host: str, probe: str | None = None) -> list[tuple[float, float, str]]:
    """``(started, ended, probe)`` of every document kept for ``host`` (only ``probe``'s when given), by start."""
    out = []
    for f in sorted((rep / "probes" / host).glob("*.json")):
        kept = json.loads(f.read_text())
        if probe is None or kept["probe"] == probe:
            t = kept["timing"]
            assert t["started"] <= t["ended"] and t["node_s"] >= 0, (f, t)
            out.append((t["started"], t["ended"], kept["probe"]))
    return sorted(out)


def _never_overlap_on_one_host(rep: Path, hosts) -> None:
    for h in hosts:
        spans = _timings(rep, h)
        for (s1, e1, p1), (s2, e2, p2) in zip(spans, spans[1:]):
            assert e1 <= s2, f"{h}: {p1} ({s1:.3f}-{e1:.3f}) overlaps {p2} ({s2:.3f}-{e2:.3f})"


def test_storage_layer_runs_its_hosts_at_once(tmp_path, four_nodes):
    """``-m storage`` without ``-n``: each host's fio_throughput (its plan: storage_mounts, then fio on the
    paths placed right) overlaps every other host's; with ``--forks 0`` none does. Figures and outcomes as one
    host at a time; a host's own probes in its test's order, never two at once."""
    nodes, kh = four_nodes
    inv = _project(tmp_path / "p", nodes)
    hosts = [n.name for n in nodes]
    spans, outcomes = {}, {}
    for forks, rep in ((None, tmp_path / "rep-at-once"), ("0", tmp_path / "rep-one-by-one")):
        res = _run(tmp_path / "p", inv, kh, rep, "-m", "storage", *(["--forks", forks] if forks else []))
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
        cases = [c for c in junit(rep / "junit-storage.xml") if c["name"].startswith("test_local_storage")]
        outcomes[forks] = sorted((c["classname"], c["outcome"]) for c in cases)
        for c in cases:
            assert float(c["props"][next(k for k in c["props"] if k.startswith("seq_read_gbps"))].split()[0]) > 0
        spans[forks] = {h: _timings(rep, h, "fio_throughput") for h in hosts}
        assert all(len(s) == 1 for s in spans[forks].values()), spans[forks]
        _never_overlap_on_one_host(rep, hosts)
        for h in hosts:  # placed first, then measured: the test's order on each host
            order = [p for _, _, p in _timings(rep, h) if p in ("storage_mounts", "fio_throughput")]
            assert order == ["storage_mounts", "fio_throughput"], (h, order)
    assert outcomes[None] == outcomes["0"] == sorted((f"storage.{h}", "passed") for h in hosts)
    at_once = [s[0] for s in spans[None].values()]
    latest_start, earliest_end = max(s for s, _, _ in at_once), min(e for _, e, _ in at_once)
    assert latest_start < earliest_end, f"the four hosts' fio runs did not all overlap: {spans[None]}"
    apart = sorted(s[0] for s in spans["0"].values())
    for (s1, e1, _), (s2, _, _) in zip(apart, apart[1:]):
        assert e1 <= s2, f"--forks 0 ran two hosts' fio at once: {apart}"


def test_fleet_test_gathers_every_host_at_once(tmp_path, four_nodes):
    """``-k test_fleet_consistency`` alone (no per-host test warms a host up): its plan runs gpu_inventory on the
    four hosts at once when it begins, and the test reads them from the hosts' caches: one document per host
    (never probed twice), their spans (connect, agent start, probe) overlapping."""
    nodes, kh = four_nodes
    inv = _project(tmp_path / "p", nodes)
    rep = tmp_path / "rep"
    res = _run(tmp_path / "p", inv, kh, rep, "-m", "health", "-k", "test_fleet_consistency")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "no host with an NVIDIA GPU" in (rep / "summary.md").read_text()
    spans = {n.name: _timings(rep, n.name) for n in nodes}
    assert all([p for _, _, p in s] == ["gpu_inventory"] for s in spans.values()), spans
    latest_start = max(s[0][0] for s in spans.values())
    earliest_end = min(s[0][1] for s in spans.values())
    assert latest_start < earliest_end, f"the hosts' gpu_inventory ran one after another: {spans}"
