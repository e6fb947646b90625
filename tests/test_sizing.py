"""Above the hosts one controller takes (gpuaccept.scaleout.sizing), collection says where to go instead: Slurm, or
shards joined by the merge. A real pytest start over a 2,001-host inventory and a one-test suite."""
from __future__ import annotations

import shutil

from gpuaccept.scaleout.sizing import CONTROLLER_MAX_HOSTS, advice
from project_helpers import REPO, run_pytest

ONE_TEST = "def test_reachable(node):\n    pass\n"


def _project(root, n_hosts: int):
    (root / "suites").mkdir(parents=True)
    (root / "suites" / "test_one.py").write_text(ONE_TEST)
    shutil.copytree(REPO / "thresholds", root / "thresholds")
    shutil.copy(REPO / "pytest.ini", root / "pytest.ini")
    shutil.copy(REPO / "conftest.py", root / "conftest.py")
    (root / "fleet.ini").write_text(f"[gpu]\ng[0001:{n_hosts:04d}]\n")
    return root


def test_collect_only_above_the_controller_size_sends_to_shards(tmp_path):
    n = CONTROLLER_MAX_HOSTS + 1
    root = _project(tmp_path / "big", n)
    res = run_pytest(root, "--inventory", "fleet.ini", "--collect-only", "-q")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr
    said = [ln for ln in res.stdout.splitlines() if ln.startswith("gpuaccept: ")]
    assert said == [advice(n)], said
    assert f"{n} hosts selected, above the {CONTROLLER_MAX_HOSTS}" in said[0]
    assert "python -m gpuaccept.scaleout.slurm" in said[0] and "`--shard I/2` on 2 controllers" in said[0]
    assert f"{n} tests collected" in res.stdout
    # a shard of the same inventory under the limit: nothing said
    res = run_pytest(root, "--inventory", "fleet.ini", "--collect-only", "-q", "--shard", "1/2")
    assert res.returncode == 0 and not [ln for ln in res.stdout.splitlines() if ln.startswith("gpuaccept: ")]


def test_advice_counts():
    assert advice(CONTROLLER_MAX_HOSTS) is None
    assert "`--shard I/5` on 5 controllers" in advice(4 * CONTROLLER_MAX_HOSTS + 1)
    assert "(this is shard 1/2)" in advice(CONTROLLER_MAX_HOSTS * 3, "1/2")
