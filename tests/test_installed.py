"""Installed, runnable anywhere: the suites and threshold files ship inside the package, the ``gpuaccept``
command (gpuaccept/cli.py) and ``pytest --pyargs gpuaccept`` run them from an operator's folder with
its own inventory, reports go to ``./reports`` there, and a site file changes some checks of a SKU
(gpuaccept/config/sitelimits.py) with its provenance in the failure line."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gpuaccept.config.paths import SHIPPED, SUITES_DIR
from gpuaccept.config.sitelimits import layer_site
from gpuaccept.config.thresholds import judge, load_all
from gpuaccept.errors import ThresholdError
from gpuaccept.reporting.folder import run_figures
from project_helpers import DATA, outcomes, replay_project, run_pytest

REPO = Path(__file__).resolve().parents[1]
INVENTORY = "[gpu]\nh1 ansible_connection=local\nh2 ansible_connection=local\n"


def _ops_folder(tmp_path: Path) -> Path:
    """An operator's folder: an inventory and nothing of gpuaccept (no pytest.ini, suites, thresholds)."""
    ops = tmp_path / "ops"
    ops.mkdir()
    (ops / "nightly.ini").write_text(INVENTORY)
    return ops


def _run(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=240,
                          env={**os.environ, **(env or {})})


def _tests_run(ops: Path) -> list[dict]:
    return json.loads((ops / "reports" / "latest" / "results.json").read_text())["tests"]


def test_gpuaccept_command_runs_the_shipped_suites_from_any_folder(tmp_path):
    """Before: from an ops folder, ``python -m pytest --inventory nightly.ini -m health`` collected 0 items
    (exit 5); the example inventories showed a ``gpuaccept`` command that did not exist."""
    ops = _ops_folder(tmp_path)
    res = _run(ops, "-m", "gpuaccept.cli", "-i", "nightly.ini", "-m", "health", "-k", "gpu_inventory or fleet")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    tests = _tests_run(ops)
    assert sorted(t["nodeid"] for t in tests) == ["suites/test_health.py::test_fleet_consistency",
                                                  "suites/test_health.py::test_gpu_inventory[h1]",
                                                  "suites/test_health.py::test_gpu_inventory[h2]"]
    assert not (ops / ".pytest_cache").exists()


def test_test_ids_do_not_carry_where_the_package_is_installed(tmp_path):
    """The package installed in a virtual environment inside the operator's folder: its tests are named
    ``suites/test_health.py::...`` as in the checkout (before: ``venv2/lib/python3.11/site-packages/gpuaccept/
    suites/test_health.py::...``, a different test for the history and the merge than the same check elsewhere)."""
    import shutil
    ops = _ops_folder(tmp_path)
    site = ops / "venv2" / "lib" / "python3.11" / "site-packages"
    shutil.copytree(REPO / "gpuaccept", site / "gpuaccept", ignore=shutil.ignore_patterns("__pycache__"))
    res = _run(ops, "-m", "gpuaccept.cli", "-i", "nightly.ini", "-m", "health", "-k", "gpu_inventory",
               env={"PYTHONPATH": str(site)})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert sorted(t["nodeid"] for t in _tests_run(ops)) == ["suites/test_health.py::test_gpu_inventory[h1]",
                                                            "suites/test_health.py::test_gpu_inventory[h2]"]


def test_pytest_pyargs_runs_the_shipped_suites(tmp_path):
    ops = _ops_folder(tmp_path)
    res = _run(ops, "-m", "pytest", "--pyargs", "gpuaccept", "--inventory", "nightly.ini", "-k", "gpu_inventory",
               "-p", "no:cacheprovider")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert {t["host"] for t in _tests_run(ops)} == {"h1", "h2"}


def test_every_pytest_option_passes_through(tmp_path):
    """``--collect-only -q`` and ``-k`` reach pytest: the ids listed, no node touched, no report folder."""
    ops = _ops_folder(tmp_path)
    res = _run(ops, "-m", "gpuaccept.cli", "--inventory=nightly.ini", "--collect-only", "-q", "-k", "ecc")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert re.findall(r"^\S*test_health\.py::test_ecc\[h\d\]$", res.stdout, re.M) == [
        "suites/test_health.py::test_ecc[h1]", "suites/test_health.py::test_ecc[h2]"]
    assert not (ops / "reports").exists()


def test_the_console_script_is_declared():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["scripts"]["gpuaccept"] == "gpuaccept.cli:main"
    data = meta["tool"]["setuptools"]["package-data"]["gpuaccept"]
    assert "thresholds/*.yaml" in data and "data/inventory/*.ini" in data
    assert os.path.isfile(os.path.join(SUITES_DIR, "__init__.py"))  # a package: shipped with the code


def test_the_checkout_keeps_its_layout():
    """suites/ are shims of the packaged modules; thresholds/ and inventory/localhost.ini the shipped files."""
    shims = sorted(p.name for p in (REPO / "suites").glob("test_*.py"))
    assert shims == sorted(p.name for p in Path(SUITES_DIR).glob("test_*.py"))
    for name in shims:
        assert f"from gpuaccept.suites.{name[:-3]} import *" in (REPO / "suites" / name).read_text()
    assert (REPO / "thresholds").resolve() == Path(SHIPPED["thresholds"]).resolve()
    assert (REPO / "inventory" / "localhost.ini").resolve() == Path(SHIPPED["inventory/localhost.ini"]).resolve()


@pytest.mark.parametrize("inventory", ["example.ini", "example.yml"])
def test_the_example_inventories_show_the_real_command(inventory, tmp_path):
    """Every ``gpuaccept ...`` line in an example inventory's comments runs (with --list-hosts: no node), for
    an operator whose ~/.ssh holds the key file the inventory names."""
    (tmp_path / ".ssh").mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / ".ssh" / "gpuaccept_ed25519")],
                   check=True, capture_output=True)
    lines = [ln.strip("# \n") for ln in (REPO / "inventory" / inventory).read_text().splitlines()
             if ln.lstrip("# ").startswith("gpuaccept ")]
    assert lines
    for line in lines:
        argv = shlex.split(line)[1:]
        res = _run(REPO, "-m", "gpuaccept.cli", *argv, "--list-hosts", env={"HOME": str(tmp_path)})
        assert res.returncode == 0, (line, res.stderr[-2000:])
        assert "gpu0" in res.stdout, (line, res.stdout)


# -- site thresholds ---------------------------------------------------------------------------------------
SITE = """\
# hall B: a stricter HBM floor and a cooler limit
h200-sxm-141gb:
  checks:
    hbm_read_bw_gbps: {min: 4700, source: "hall B acceptance"}
    temp_c: {max: 80, unit: C, source: "hall B: HBM slowdown at 83 C"}
"""


def test_a_site_file_changes_only_the_checks_it_names(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(SITE)
    shipped = load_all(SHIPPED["thresholds"])
    layered = layer_site(str(site), shipped)
    h200, was = layered["h200-sxm-141gb"], shipped["h200-sxm-141gb"]
    assert h200.limit("hbm_read_bw_gbps").bound == 4700 and was.limit("hbm_read_bw_gbps").bound == 4300
    assert h200.limit("temp_c").bound == 80
    changed = [c for c in was.checks if h200.checks[c] != was.checks[c]]
    assert changed == ["temp_c", "hbm_read_bw_gbps"] or sorted(changed) == ["hbm_read_bw_gbps", "temp_c"]
    assert layered["h100-sxm5-80gb"] is shipped["h100-sxm5-80gb"]
    v = judge(h200.limit("hbm_read_bw_gbps"), 4606.0)
    assert not v.passed and v.message.endswith(
        f"[limit: {site}:4 checks.hbm_read_bw_gbps, over h200-sxm-141gb.yaml]"), v.message


@pytest.mark.parametrize("text,needle", [
    ("h900-imaginary:\n  checks: {}\n", ":1: unknown SKU 'h900-imaginary' (known: "),
    ("h200-sxm-141gb:\n  detect: {}\n", ":2: unknown key 'h200-sxm-141gb.detect'"),
    ("h200-sxm-141gb:\n  checks:\n    hbm_raed_bw_gbps: {min: 1, source: x}\n", ":3: unknown check 'checks.hbm_raed_bw_gbps'"),
    ("h200-sxm-141gb:\n  checks:\n    temp_c: {min: 80, source: x}\n", ":3: checks.temp_c: needs 'max'"),
    ("h200-sxm-141gb:\n  checks:\n    temp_c: {max: 80, unit: F, source: x}\n", ":3: checks.temp_c.unit: expected 'C'"),
    ("h200-sxm-141gb:\n  checks:\n    temp_c: {max: 80}\n", ":3: checks.temp_c: 'source' is required"),
])
def test_a_bad_site_file_is_refused_with_file_and_line(tmp_path, text, needle):
    site = tmp_path / "site.yaml"
    site.write_text(text)
    with pytest.raises(ThresholdError) as err:
        layer_site(str(site), load_all(SHIPPED["thresholds"]))
    assert str(err.value).startswith(str(site)) and needle in str(err.value), err.value


def test_a_site_limit_fails_a_replayed_capture_naming_the_site_file(tmp_path):
    """The 2xH200 capture (HBM read 4606 GB/s) against a site floor of 4700: the failure line names the site
    file and line; the checks the site left alone (write, copy) still pass on the shipped limits."""
    inv = replay_project(tmp_path, DATA)
    (tmp_path / "site.yaml").write_text(SITE)
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "hbm_bandwidth",
                     "--site-thresholds", "site.yaml")
    assert res.returncode == 1, res.stdout[-3000:]
    msg = outcomes(rep)["test_hbm_bandwidth"]["text"]
    assert "hbm_read_bw_gbps" in msg and "< min 4700 GB/s" in msg
    assert "[limit: site.yaml:4 checks.hbm_read_bw_gbps, over h200-sxm-141gb.yaml]" in msg, msg
    assert "hbm_write_bw_gbps" not in msg and "hbm_copy_bw_gbps" not in msg
    figs = run_figures(json.loads((rep / "results.json").read_text()))
    read = [f for f in figs if f["check"] == "hbm_read_bw_gbps"]
    assert read and all(f["limit"]["site"] == "site.yaml:4" for f in read)
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "bad"), "--site-thresholds",
                     "nosuch.yaml", "-k", "hbm_bandwidth")
    assert res.returncode == 4 and "nosuch.yaml" in res.stderr and "Traceback" not in res.stderr, res.stderr


# -- quick to refuse -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,rc,needle", [
    (["-i", "typo.ini"], 4, "typo.ini:2: host n1 var gpus_per_nodes: not a variable gpuaccept knows"),
    (["-i", "nightly.ini", "--limit", "ghost"], 4, "term 'ghost' names no group or host"),
    (["-i", "nightly.ini", "--probe-timeout", "-1"], 4, "--probe-timeout -1.0: expected a number > 0"),
    (["-i", "nightly.ini", "--list-hosts", "--limit", "gpu:!drained"], 0, "term '!drained' names no group or host"),
])
def test_the_command_refuses_before_pytest_starts(tmp_path, args, rc, needle):
    """The gpuaccept command's check (gpuaccept.cli.precheck) answers bad input and --list-hosts without
    importing pytest (benchmarks/refusal_cpu.py: about 0.3 s of CPU against 0.8 s through pytest), with the
    same line as the plugin's."""
    ops = _ops_folder(tmp_path)
    (ops / "typo.ini").write_text("[gpu]\nn1 ansible_connection=local gpus_per_nodes=8\n")
    code = f"import sys; from gpuaccept.cli import main; rc = main({args!r}); print('pytest' in sys.modules); sys.exit(rc)"
    res = _run(ops, "-c", code)
    assert res.returncode == rc and res.stdout.splitlines()[-1] == "False", res.stdout + res.stderr
    assert needle in res.stderr and "Traceback" not in res.stderr, res.stderr
    via_pytest = _run(ops, "-m", "pytest", "-p", "gpuaccept.plugin", "-o", "gpuaccept_suites=true", *(
        ["--inventory" if a == "-i" else a for a in args]))
    assert via_pytest.returncode == rc and needle in via_pytest.stderr, via_pytest.stderr
    if rc == 0:
        assert res.stdout.splitlines()[:-1] == via_pytest.stdout.splitlines(), (res.stdout, via_pytest.stdout)
