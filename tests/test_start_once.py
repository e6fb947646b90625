"""An inventory outside the repository: pytest starts once. pytest chooses its rootdir before it
knows ``--inventory`` and took the inventory's folder for the run's root; the plugin used to run the whole
command again with ``-c ./pytest.ini``. Now it adopts the repository's pytest.ini in the same process."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from project_helpers import REPO, run_pytest

PROBE_CONFTEST = '''
import json, os, sys

def pytest_configure(config):
    with open(os.environ["START_ONCE_OUT"], "a") as f:
        f.write(json.dumps({"orig_argv": sys.orig_argv, "rootdir": str(config.rootpath),
                            "inifile": str(config.inipath), "reportchars": config.option.reportchars,
                            "cacheprovider": config.pluginmanager.has_plugin("cacheprovider"),
                            "testpaths": config.getini("testpaths")}) + "\\n")
'''


def _project(root: Path) -> Path:
    shutil.copytree(REPO / "suites", root / "suites")
    shutil.copytree(REPO / "thresholds", root / "thresholds")
    shutil.copy(REPO / "pytest.ini", root / "pytest.ini")
    (root / "conftest.py").write_text((REPO / "conftest.py").read_text() + PROBE_CONFTEST)
    return root


@pytest.mark.parametrize("form", ["space", "equals"])
def test_inventory_elsewhere_starts_pytest_once(tmp_path, form):
    """``pytest --inventory /elsewhere/x.ini`` in the checkout: one start (no ``-c`` added to the interpreter's
    command line), rooted in the checkout with its pytest.ini, whose addopts (``-p gpuaccept.plugin -p no:cacheprovider -rfE``) and
    testpaths hold; the hosts come from the inventory elsewhere."""
    root = _project(tmp_path / "checkout")
    elsewhere = tmp_path / "etc-fleet"
    elsewhere.mkdir()
    (elsewhere / "prod.ini").write_text("[gpu]\nctl-a ansible_connection=local\nctl-b ansible_connection=local\n")
    out = tmp_path / "configured.jsonl"
    inv = ["--inventory", str(elsewhere / "prod.ini")] if form == "space" else [f"--inventory={elsewhere}/prod.ini"]
    res = run_pytest(root, *inv, "--collect-only", "-q", env={"START_ONCE_OUT": str(out)})
    assert res.returncode == 0, res.stdout + res.stderr
    seen = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert len(seen) == 1, seen
    got = seen[0]
    assert "-c" not in got["orig_argv"] and got["orig_argv"][:3] == [sys.executable, "-m", "pytest"], got
    assert (got["rootdir"], got["inifile"], got["testpaths"]) == (str(root), str(root / "pytest.ini"), ["suites"])
    assert got["reportchars"] == "fE" and got["cacheprovider"] is False, got
    assert "[ctl-a]" in res.stdout and "[ctl-b]" in res.stdout
    assert not (elsewhere / ".pytest_cache").exists() and not (root / ".pytest_cache").exists()
