"""The order the shipped suites' layers run in (gpuaccept/plugin/collection.py): the layers whose probes need no
torch on the node first, the GPU layers next, a site's own suite after them and the host layer last; pytest's
order within each layer. Through the real command, ``python -m pytest --collect-only``, on a project laid out as
an operator's checkout with a suite of its own."""
from __future__ import annotations

from pathlib import Path

from project_helpers import make_project, run_pytest

from gpuaccept.plugin.collection import RUN_ORDER
from gpuaccept.reporting.records import layer_of

SITE_SUITE = "def test_site_check():\n    assert True\n"


def _collected(root: Path, *args: str) -> list[str]:
    inv = root / "inventory.ini"
    inv.write_text("node-a ansible_connection=local\nnode-b ansible_connection=local\n")
    res = run_pytest(root, "--inventory", str(inv), "--reports", str(root / "rep"), "--collect-only", "-q", *args)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    return [ln for ln in res.stdout.splitlines() if "::" in ln]


def test_layers_run_torch_free_first_the_host_layer_last(tmp_path):
    make_project(tmp_path, [], None, extra_suite=SITE_SUITE, name="test_asite.py")
    ids = _collected(tmp_path)
    layers = [layer_of(i) for i in ids]
    ranks = [RUN_ORDER.index(layer) for layer in layers]
    assert ranks == sorted(ranks), [f"{r} {i}" for r, i in zip(ranks, ids)][:40]
    seen = list(dict.fromkeys(layers))
    assert seen[0] == "health" and seen[-1] == "host" and seen.index("other") == len(seen) - 2, seen
    assert seen.index("storage") < seen.index("memory") < seen.index("compute"), seen
    assert next(i for i in ids if "test_site_check" in i).startswith("suites/test_asite.py")
    # within a layer, pytest's order: file by file, each test host after host
    health = [i for i in ids if layer_of(i) == "health"]
    files = [i.split("::")[0] for i in health]
    assert files == sorted(files, key=lambda f: ("suites/test_health.py", "suites/test_health_config.py",
                                                 "suites/test_health_driver.py").index(f))
    inv_ids = [i for i in health if i.split("::")[1].startswith("test_ecc[")]
    assert inv_ids == ["suites/test_health.py::test_ecc[node-a]", "suites/test_health.py::test_ecc[node-b]"]


def test_a_selection_keeps_the_order(tmp_path):
    make_project(tmp_path, [], None, extra_suite=SITE_SUITE, name="test_asite.py")
    ids = _collected(tmp_path, "-m", "compute or health or host")
    layers = list(dict.fromkeys(layer_of(i) for i in ids))
    assert layers == ["health", "compute", "host"], layers
