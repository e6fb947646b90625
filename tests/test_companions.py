"""The plugins a run loads (gpuaccept/plugin/companions.py): the repository's pytest.ini turns pytest's plugin
autoload off, so a pytest plugin that happens to be installed (a stand-in distribution with a pytest11 entry
point, on the run's PYTHONPATH) is not loaded unless named with ``-p``; pytest-xdist still is, unless blocked."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from project_helpers import make_project, run_pytest


def installed_plugin(site: Path) -> Path:
    """A distribution ``noisy`` in folder ``site`` whose pytest11 entry point names module ``noisy_plugin``; the
    module writes ``$NOISY_MARK`` when imported and says so in the terminal summary."""
    site.mkdir()
    (site / "noisy_plugin.py").write_text(
        "import os\nopen(os.environ['NOISY_MARK'], 'w').write('imported')\n"
        "def pytest_terminal_summary(terminalreporter):\n    terminalreporter.write_line('NOISY PLUGIN RAN')\n")
    info = site / "noisy-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: noisy\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nnoisy = noisy_plugin\n")
    return site


def test_an_installed_plugin_is_loaded_only_when_named(tmp_path):
    """Plain pytest (autoload on) loads the stand-in, which proves it installed; a run of the suites does not,
    and loads it with ``-p noisy_plugin``. ``-n 2`` runs either way (pytest-xdist loaded by name)."""
    site = installed_plugin(tmp_path / "site")
    mark = tmp_path / "mark"
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]), "NOISY_MARK": str(mark)}
    plain = tmp_path / "plain"
    plain.mkdir()
    r = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q"], cwd=plain, env={**os.environ, **env},
                       capture_output=True, text=True, timeout=120)
    assert mark.read_text() == "imported" and "NOISY PLUGIN RAN" in r.stdout, r.stdout + r.stderr
    mark.unlink()

    proj = tmp_path / "proj"
    proj.mkdir()
    inv = make_project(proj, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("h1 ansible_connection=local\n")
    res = run_pytest(proj, "--inventory", str(inv), "-m", "health", "-n", "2", "--reports", str(tmp_path / "r1"),
                     env=env)
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]
    assert not mark.exists() and "NOISY PLUGIN RAN" not in res.stdout
    assert "unrecognized arguments" not in res.stderr and (tmp_path / "r1" / "results.json").is_file()
    res = run_pytest(proj, "--inventory", str(inv), "-m", "health", "-p", "noisy_plugin", "--reports",
                     str(tmp_path / "r2"), env=env)
    assert res.returncode == 0 and mark.exists() and "NOISY PLUGIN RAN" in res.stdout, res.stdout[-2000:]


def test_a_blocked_companion_stays_out():
    """``-p no:xdist`` (the name pytest-xdist's entry point has) keeps it out; its module is not imported."""
    import _pytest.config

    from gpuaccept.plugin import companions

    pm = _pytest.config.PytestPluginManager()
    pm.set_blocked("xdist")
    assert companions.load(pm) == []
    fresh = _pytest.config.PytestPluginManager()
    assert companions.load(fresh) == ["xdist.plugin"] and fresh.has_plugin("xdist.plugin")
    assert companions.load(fresh) == []  # registered once
