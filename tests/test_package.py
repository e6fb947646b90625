"""The package's import (gpuaccept/__init__.py): its modules are plain Python, not rewritten by pytest's
assertion hook, while the suites' test files still are."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: a plugin that records, at the end of the collection, which loader imported gpuaccept's modules and the suites
LOADERS_PLUGIN = '''
import json, os, sys
def pytest_collection_finish(session):
    out = {name: type(getattr(mod, "__loader__", None)).__name__ for name, mod in list(sys.modules.items())
           if name.startswith("gpuaccept") or name.startswith("test_health") or name.endswith(".test_health")}
    with open(os.environ["LOADERS_OUT"], "w") as f:
        json.dump(out, f)
'''


def test_package_modules_skip_assertion_rewriting_and_suites_keep_it(tmp_path):
    """With bytecode not written (PYTHONDONTWRITEBYTECODE), a module pytest rewrites is parsed and compiled at
    every run; the package's modules are loaded by the interpreter's own loader, the suite's test file by
    pytest's, and no warning says a module was imported before it could be rewritten."""
    (tmp_path / "loaders_plugin.py").write_text(LOADERS_PLUGIN)
    out = tmp_path / "loaders.json"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "LOADERS_OUT": str(out),
           "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)}
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "loaders_plugin", "--collect-only", "-q",
                          "-m", "health", "-W", "error::pytest.PytestAssertRewriteWarning",
                          "--inventory", "inventory/localhost.ini"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "PytestAssertRewriteWarning" not in res.stdout + res.stderr
    loaders = json.loads(out.read_text())
    ours = {n: kind for n, kind in loaders.items()
            if n.startswith("gpuaccept.") and not n.split(".")[-1].startswith("test_")}
    assert "gpuaccept.plugin" in ours and "gpuaccept.config.inventory" in ours, sorted(loaders)
    assert {n for n, kind in ours.items() if kind == "AssertionRewritingHook"} == set()
    suites = {kind for n, kind in loaders.items() if n.split(".")[-1] == "test_health"}
    assert suites == {"AssertionRewritingHook"}, loaders
