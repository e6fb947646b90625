"""``--shard I/K`` runs end to end on replayed 2xH200 hosts (real pytest processes, the real suites): a shard that
none of the selected hosts hashes to runs no test, touches no node, writes a report of no host and exits 0; the
K shards of merge.md's example merged give each host the verdict one controller gives it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaccept.config.patterns import shard_of
from gpuaccept.scaleout.merge import main as merge_main
from project_helpers import DATA, make_project, replay_folder, run_pytest

HOSTS = ["gpu01", "gpu02", "gpu03", "gpu04"]


def _project(tmp_path: Path, hosts: list[str]) -> Path:
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    common = f"ansible_connection=local gpuaccept_replay={replay_folder(tmp_path, DATA)} gpu_sku=h200-sxm-141gb"
    inv.write_text("[gpu]\n" + "".join(f"{h} {common} gpus_per_node=2\n" for h in hosts))
    return inv


def _verdicts(folder: Path) -> dict[str, str]:
    """host -> its verdict in the host lines of summary.md (``- **PASS** `gpu01` ...``)."""
    head = (folder / "summary.md").read_text().split("\n## ")[0]
    return {ln.split("`")[1]: ln.split("**")[1] for ln in head.splitlines() if ln.startswith("- **")}


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["controller", "xdist"])
def test_an_empty_shard_runs_no_test_and_writes_a_report_of_no_host(tmp_path, xdist):
    """Before: pytest's placeholder for an empty parameter list (``NOTSET``) was taken for a host: INTERNALERROR
    KeyError 'NotSetType.token' in the fan-out, exit 3, a phantom host NOTSET "not run" in the report. After:
    no test runs (every one deselected), results.json names no host and no test, the run exits 0 and says why."""
    (empty,) = [i for i in (1, 2) if i != shard_of("gpu01", 2)]
    inv = _project(tmp_path, ["gpu01"])
    rep = tmp_path / "R"
    res = run_pytest(tmp_path, "--inventory", str(inv), "-m", "health", "--limit", "gpu01", "--shard", f"{empty}/2",
                     "--history", "none", "--reports", str(rep), "-p", "no:cacheprovider", *xdist)
    said = res.stdout + res.stderr
    assert res.returncode == 0, said[-3000:]
    assert "NOTSET" not in said and "NotSetType" not in said and "INTERNALERROR" not in said, said[-3000:]
    assert f"--shard {empty}/2 holds none of the hosts of --limit gpu01" in said, said[-3000:]
    doc = json.loads((rep / "results.json").read_text())
    assert doc["hosts"] == [] and doc["tests"] == [] and doc["complete"] is True
    assert "NOTSET" not in (rep / "summary.md").read_text() and (rep / "failed-hosts.txt").read_text() == ""
    assert not (rep / "probes").exists() or not any((rep / "probes").iterdir())  # no node was asked anything


def test_eight_shards_over_four_hosts_merge_to_each_hosts_own_verdict(tmp_path, capsys):
    """merge.md's example: 8 controllers over 4 hosts, so at least 4 shards are empty. Before: the empty ones
    crashed (exit 3) and the merge made all 4 hosts ERROR plus a host NOTSET, exit 0. After: every shard exits
    0 or 1 with a report, and the merge gives each host the verdict of one controller over all 4."""
    inv = _project(tmp_path, HOSTS)  # (fleet_consistency left out: the hosts replay one capture, "the same GPUs")
    sel = ["--inventory", str(inv), "-m", "health", "-p", "no:cacheprovider", "-k", "not fleet_consistency"]
    single = tmp_path / "single"
    res = run_pytest(tmp_path, *sel, "--reports", str(single), "--history", "none")
    assert res.returncode in (0, 1), res.stdout[-2000:] + res.stderr[-2000:]
    empty = sorted(set(range(1, 9)) - {shard_of(h, 8) for h in HOSTS})
    assert len(empty) >= 4
    shards = []
    for i in range(1, 9):
        folder = tmp_path / "reports" / f"night-{i}"
        res = run_pytest(tmp_path, *sel, "--shard", f"{i}/8", "--reports", str(folder), "--history", "none")
        assert res.returncode == 0 if i in empty else res.returncode in (0, 1), (i, res.stdout[-2000:] + res.stderr[-2000:])
        assert json.loads((folder / "results.json").read_text())["hosts"] == [h for h in HOSTS if shard_of(h, 8) == i]
        shards.append(folder)
    out = tmp_path / "reports" / "night"
    assert merge_main([*map(str, shards), "--into", str(out)]) == 0
    said = capsys.readouterr().out
    assert "NOTSET" not in said and "replace those of" not in said, said
    assert _verdicts(out) == _verdicts(single) and set(_verdicts(out)) == set(HOSTS)
    one, merged = (json.loads((d / "results.json").read_text()) for d in (single, out))
    assert sorted(merged["hosts"]) == HOSTS
    assert {t["nodeid"]: t["outcome"] for t in merged["tests"]} == {t["nodeid"]: t["outcome"] for t in one["tests"]}
