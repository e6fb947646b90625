"""The operator's command lines, installed, from an ops folder: plain ``pytest`` with
gpuaccept's options runs the shipped suites (a run without them is left alone), and the ``gpuaccept`` command
speaks for itself: its own usage line and ``-i`` in ``--help``, "did you mean" for a mistyped option, one line
for a bad value, ``--version``, and the version in results.json, summary.md and report.html."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import gpuaccept
from gpuaccept import cli
from gpuaccept.config.options import HELP_GROUPS, given, long_options, option_dests

INVENTORY = "[gpu]\nh1 ansible_connection=local\nh2 ansible_connection=local\n"


def _ops(tmp_path: Path) -> Path:
    """An operator's folder: an inventory and nothing of gpuaccept (no pytest.ini, suites, thresholds)."""
    ops = tmp_path / "ops"
    ops.mkdir()
    (ops / "lab.ini").write_text(INVENTORY)
    return ops


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=240, env=env)


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


# -- plain pytest outside the checkout ---------------------------------------------------------------------------
def test_plain_pytest_with_gpuaccept_options_runs_the_shipped_suites(tmp_path):
    """Before: ``pytest --inventory lab.ini --list-hosts`` and ``... -m health`` in an ops folder printed
    "collected 0 items" and exited 5; a nonexistent inventory was not even refused."""
    ops = _ops(tmp_path)
    res = _run(ops, "-m", "pytest", "--inventory", "lab.ini", "--list-hosts")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert [ln.split()[0] for ln in _lines(res.stdout)] == ["hosts", "h1", "h2"], res.stdout
    assert not (ops / "reports").exists()

    res = _run(ops, "-m", "pytest", "--inventory", "lab.ini", "-m", "health", "-p", "no:cacheprovider")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "collected 0 items" not in res.stdout
    tests = json.loads((ops / "reports" / "latest" / "results.json").read_text())["tests"]
    assert tests and all(t["nodeid"].split("::")[0].rsplit("/", 1)[-1].startswith("test_health") for t in tests)
    assert {t["host"] for t in tests} - {None, "fleet"} == {"h1", "h2"}
    assert "test_health.py::test_fleet_consistency" in {t["nodeid"].rsplit("/", 1)[-1] for t in tests}


def test_list_hosts_shows_where_ssh_connects_and_the_sku_used(tmp_path):
    """``--list-hosts`` names the port the connection uses (``-p`` in ansible_ssh_common_args had read port 22)
    and, with ``--sku``, that SKU (the inventory's gpu_sku had been shown while --sku set the limits); both from
    the command and from pytest's plugin. A -F naming no file is refused at load, exit 4, naming file:line."""
    inv = tmp_path / "lab.ini"
    inv.write_text("[gpu]\nn1 ansible_host=10.0.0.5 gpu_sku=h200-sxm-141gb\n"
                   "[gpu:vars]\nansible_ssh_common_args='-o User=root -p 2201 -J ops@bastion:2222'\n")
    for cmd in (["-m", "gpuaccept.cli", "-i", str(inv)], ["-m", "pytest", "--inventory", str(inv)]):
        res = _run(tmp_path, *cmd, "--list-hosts", "--sku", "l4-24gb")
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
        line = next(ln for ln in _lines(res.stdout) if ln.split()[0] == "n1")
        assert "ansible_host=10.0.0.5:2201 via ops@bastion:2222" in line and "gpu_sku=l4-24gb (--sku)" in line, line
    inv.write_text("n1 ansible_host=10.0.0.5 ansible_ssh_extra_args='-F /no/such/config'\n")
    res = _run(tmp_path, "-m", "gpuaccept.cli", "-i", str(inv), "--list-hosts")
    assert res.returncode == 4 and f"{inv}:1" in res.stderr and "-F '/no/such/config': no such ssh config file" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_an_ignored_limit_term_is_warned_once(tmp_path):
    """``gpuaccept --limit 'gpu:!drained'`` where no group drained exists: the one warning, once, in a run and in
    --list-hosts (the command's check and pytest's plugin both read the selection; only one says it)."""
    ops = _ops(tmp_path)
    for extra in (["--list-hosts"], ["-m", "health", "-k", "gpu_inventory", "--history", "none"]):
        res = _run(ops, "-m", "gpuaccept.cli", "-i", "lab.ini", "--limit", "gpu:!drained", *extra)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        warned = [ln for ln in res.stderr.splitlines() if ln.startswith("[WARNING] --limit 'gpu:!drained'")]
        assert len(warned) == 1, res.stderr


def test_plain_pytest_with_gpuaccept_options_under_xdist(tmp_path):
    ops = _ops(tmp_path)
    res = _run(ops, "-m", "pytest", "--inventory", "lab.ini", "-n", "2", "-m", "health", "-k", "gpu_inventory or fleet",
               "-p", "no:cacheprovider")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    tests = json.loads((ops / "reports" / "latest" / "results.json").read_text())["tests"]
    assert sorted(t["nodeid"].rsplit("/", 1)[-1] for t in tests) == [
        "test_health.py::test_fleet_consistency", "test_health.py::test_gpu_inventory[h1]",
        "test_health.py::test_gpu_inventory[h2]"]


@pytest.mark.parametrize("args", [["--list-hosts"], ["-m", "health"]])
def test_plain_pytest_refuses_a_missing_inventory_in_one_line(tmp_path, args):
    ops = _ops(tmp_path)
    res = _run(ops, "-m", "pytest", "--inventory", "nosuch.ini", *args)
    assert res.returncode == 4, res.stdout[-3000:] + res.stderr[-2000:]
    assert _lines(res.stderr) == [f"ERROR: {ops / 'nosuch.ini'}: no such inventory file"], res.stderr
    assert not (ops / "reports").exists()


def test_a_pytest_run_without_gpuaccept_options_is_left_alone(tmp_path):
    """The plugin is installed (pytest11): a project's own pytest run collects its own tests, no suites, no
    reports; a folder without tests still says "no tests ran" (exit 5): that run is not gpuaccept's."""
    ops = _ops(tmp_path)
    (ops / "test_mine.py").write_text("def test_a():\n    pass\n")
    res = _run(ops, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    assert res.returncode == 0 and "1 passed" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]
    assert not (ops / "reports").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _run(empty, "-m", "pytest", "-q", "-p", "no:cacheprovider").returncode == 5


@pytest.mark.parametrize("args,expected", [
    (["--inventory", "lab.ini"], True),
    (["--inventory=lab.ini", "-m", "health"], True),
    (["--list-hosts"], True),
    (["-m", "health", "tests/"], False),
    (["-k", "inventory", "-x", "--lf"], False),
    (["--", "--inventory"], False),
    (["--inventoryx=1"], False),
])
def test_which_command_lines_are_gpuaccept_s(args, expected):
    assert given(args) is expected
    from gpuaccept.plugin import active
    config = SimpleNamespace(getini=lambda name: False, invocation_params=SimpleNamespace(args=tuple(args)),
                             option=SimpleNamespace(pyargs=False), args=[])
    assert active(config) is expected


# -- the gpuaccept command ---------------------------------------------------------------------------------------
def test_help_is_gpuaccept_s(tmp_path):
    """Before: ``gpuaccept --help`` began ``usage: pytest.main() [options]`` and did not list ``-i``."""
    res = _run(tmp_path, "-m", "gpuaccept.cli", "--help")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("usage: gpuaccept [-i INVENTORY]"), lines[0]
    assert any(ln.strip().startswith("-i INVENTORY, --inventory INVENTORY") for ln in lines), res.stdout
    for flag in long_options():  # every option of gpuaccept's, in a group
        assert flag in res.stdout, flag
    assert "every pytest option works too" in res.stdout.lower() and "--help-pytest" in res.stdout
    assert {d for names in HELP_GROUPS.values() for d in names} == set(option_dests())


def test_help_pytest_names_gpuaccept(tmp_path):
    res = _run(tmp_path, "-m", "gpuaccept.cli", "--help-pytest")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("usage: gpuaccept "), res.stdout[:200]
    assert "--inventory=INVENTORY" in res.stdout and "--lf, --last-failed" in res.stdout


def test_version_is_gpuaccept_s(tmp_path):
    """Before: ``gpuaccept --version`` printed pytest's version alone."""
    res = _run(tmp_path, "-m", "gpuaccept.cli", "--version")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"gpuaccept {gpuaccept.__version__} (pytest {pytest.__version__}, Python "), res.stdout
    assert len(_lines(res.stdout)) == 1


@pytest.mark.parametrize("args,word,meant", [
    (["--inventori", "x"], "--inventori", "--inventory"),
    (["-i", "lab.ini", "--limt=h1"], "--limt", "--limit"),
    (["-i", "lab.ini", "--fork", "4", "-x"], "--fork", "--forks"),
    (["-i", "lab.ini", "--standout-pc", "5"], "--standout-pc", "--standout-pct"),
])
def test_a_mistyped_option_is_refused_with_what_was_meant(tmp_path, args, word, meant):
    """Before: ``ERROR: usage: pytest.main() [options] ...`` and "unrecognized arguments", no suggestion."""
    ops = _ops(tmp_path)
    res = _run(ops, "-m", "gpuaccept.cli", *args)
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    assert _lines(res.stderr) == [f"gpuaccept: unknown option {word} (did you mean {meant}?)"], res.stderr
    assert not (ops / "reports").exists()


@pytest.mark.parametrize("args", [
    ["--lf"], ["-x"], ["--junitxml=x.xml"], ["-n", "2"], ["--dist", "load"], ["--numprocesses=2"], ["--co"],
    ["--last-failed"], ["--sw"], ["--durations=5"], ["--inventory", "lab.ini"], ["--", "--inventori"],
])
def test_pytest_s_own_options_are_not_taken_for_typos(args):
    assert cli.unknown_option(args) is None


def test_pytest_options_pass_through_the_command(tmp_path):
    """``--lf`` needs pytest's cache, which the command otherwise leaves off: before, "unrecognized arguments:
    --lf"."""
    ops = _ops(tmp_path)
    res = _run(ops, "-m", "gpuaccept.cli", "-i", "lab.ini", "--lf", "-x", "--junitxml=x.xml", "-n", "2", "-m", "health",
               "-k", "gpu_inventory")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert (ops / "x.xml").is_file()
    assert "--lf" in " ".join(cli.default_args(["--lf"]) + ["--lf"]) and "no:cacheprovider" not in cli.default_args(["--lf"])
    assert "no:cacheprovider" in cli.default_args(["-x"])


def test_the_cache_options_are_pytest_s():
    """:data:`gpuaccept.cli.CACHE_OPTIONS` are what pytest's cacheprovider and stepwise plugins add."""
    with_cache = cli.pytest_long_options([])
    assert with_cache is not None and cli.CACHE_OPTIONS <= with_cache


@pytest.mark.parametrize("args,line", [
    (["--standout-pct", "abc"], "ERROR: --standout-pct abc: expected a number"),
    (["--forks", "2.5"], "ERROR: --forks 2.5: expected a whole number"),
    (["--probe-timeout", "ten"], "ERROR: --probe-timeout ten: expected a number"),
    (["--forks"], "ERROR: argument --forks: expected one argument"),
])
def test_a_bad_value_is_one_line(tmp_path, args, line):
    """Before: ``--standout-pct abc`` printed 18 lines (argparse's usage twice)."""
    ops = _ops(tmp_path)
    res = _run(ops, "-m", "gpuaccept.cli", "-i", "lab.ini", *args)
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    assert _lines(res.stderr) == [line], res.stderr


@pytest.mark.parametrize("args,line", [
    (["--standout-pct", "abc"], "ERROR: --standout-pct abc: expected a number"),
    (["--forks=x"], "ERROR: --forks x: expected a whole number"),
    (["--xid-window="], "ERROR: --xid-window is empty: an unset variable on the command line? (leave --xid-window "
                        "out for its default)"),
])
def test_a_bad_value_is_one_line_through_pytest(tmp_path, args, line):
    ops = _ops(tmp_path)
    res = _run(ops, "-m", "pytest", "--inventory", "lab.ini", *args)
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    assert _lines(res.stderr) == [line], res.stderr


def _installed(cwd: Path, script: str, tmp: Path) -> subprocess.CompletedProcess:
    """``script`` run by bash in ``cwd`` with the installed ``gpuaccept`` command as ``$GA`` (the console script
    beside this Python, else ``python -m gpuaccept.cli``) and ``tmp`` as TMPDIR."""
    exe = Path(sys.executable).parent / "gpuaccept"
    ga = str(exe) if exe.is_file() else f"{sys.executable} -m gpuaccept.cli"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=240,
                          env={**env, "GA": ga, "TMPDIR": str(tmp)})


def _hosts_run(ops: Path) -> list[str]:
    tests = json.loads((ops / "reports" / "latest" / "results.json").read_text())["tests"]
    return sorted(t["nodeid"].rsplit("/", 1)[-1] for t in tests)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_the_command_reads_an_inventory_from_a_pipe_once(tmp_path, workers):
    """Before: ``gpuaccept -i <(cat lab.ini) -m health`` (and with ``-n 2``) exited 4, "--limit 'all' matches no
    host in /dev/fd/63": the command's pre-check read the pipe to its end, and pytest's plugin read it again,
    empty. A pipe given to ``--limit=@`` is read once too (without ``-n``: an xdist worker is handed the
    inventory's text, not the host list's); nothing is left in the operator's folder, nor in TMPDIR but the
    nodes' bytecode cache (gpuaccept-bytecode-<uid>) and, under xdist, pytest's own pytest-of-<user>."""
    ops, tmp = _ops(tmp_path), tmp_path / "tmp"
    tmp.mkdir()
    n = " ".join(workers)
    res = _installed(ops, f'"$GA" -i <(cat lab.ini) -m health -k "gpu_inventory or fleet" {n}', tmp)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert _hosts_run(ops) == ["test_health.py::test_fleet_consistency", "test_health.py::test_gpu_inventory[h1]",
                               "test_health.py::test_gpu_inventory[h2]"]
    if not workers:
        res = _installed(ops, '"$GA" -i <(cat lab.ini) --limit=@<(echo h2) -m health -k gpu_inventory', tmp)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
        assert _hosts_run(ops) == ["test_health.py::test_gpu_inventory[h2]"]
    assert sorted(p.name for p in ops.iterdir()) == ["lab.ini", "reports"]
    import getpass
    assert {p.name for p in tmp.iterdir()} <= {f"gpuaccept-bytecode-{os.getuid()}", f"pytest-of-{getpass.getuser()}"}


def test_the_command_reads_a_named_fifo_once(tmp_path):
    """A FIFO written once (``mkfifo inv; ansible-inventory ... > inv &``): read by the pre-check, answered from
    what it read for pytest's plugin; ``--list-hosts`` the same hosts."""
    ops, tmp = _ops(tmp_path), tmp_path / "tmp"
    tmp.mkdir()
    os.mkfifo(ops / "inv.fifo")
    res = _installed(ops, '(cat lab.ini > inv.fifo &) ; "$GA" -i inv.fifo -m health -k gpu_inventory', tmp)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert _hosts_run(ops) == ["test_health.py::test_gpu_inventory[h1]", "test_health.py::test_gpu_inventory[h2]"]
    res = _installed(ops, '(cat lab.ini > inv.fifo &) ; "$GA" -i inv.fifo --list-hosts', tmp)
    assert res.returncode == 0, res.stderr
    assert [ln.split()[0] for ln in _lines(res.stdout)] == ["hosts", "h1", "h2"], res.stdout


def test_a_pipe_is_read_again_outside_read_once(tmp_path):
    """:func:`gpuaccept.config.bounded.read_once` keeps a pipe's bytes only while it lasts, and holds each kept
    file to the bounds of the read that asks again."""
    from gpuaccept.config.bounded import read_bounded, read_once
    from gpuaccept.errors import ConfigError
    r, w = os.pipe()
    os.write(w, b"abc\n" + b"x" * 100 + b"\n")
    os.close(w)
    path = f"/proc/self/fd/{r}"
    try:
        with read_once():
            first = read_bounded(path)
            assert read_bounded(path) == first == b"abc\n" + b"x" * 100 + b"\n"
            with pytest.raises(ConfigError, match="a line longer than 64 bytes .line 2."):
                read_bounded(path, max_line=64)
        assert read_bounded(path) == b""  # outside: the pipe itself, read to its end before
    finally:
        os.close(r)


def test_the_reports_name_gpuaccept_s_version(tmp_path):
    ops = _ops(tmp_path)
    res = _run(ops, "-m", "gpuaccept.cli", "-i", "lab.ini", "-m", "health", "-k", "fleet")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    latest = ops / "reports" / "latest"
    assert json.loads((latest / "results.json").read_text())["gpuaccept_version"] == gpuaccept.__version__
    header = (latest / "summary.md").read_text().splitlines()[:4]
    assert any(ln.endswith(f", gpuaccept {gpuaccept.__version__}") for ln in header), header
    assert re.search(rf"tests?, gpuaccept {re.escape(gpuaccept.__version__)}\.", (latest / "report.html").read_text())


def test_limit_with_a_host_list_file_among_other_terms(tmp_path):
    """``--limit=rack2,@lim.txt``: the file's hosts beside rack2's, from the command and from pytest's plugin
    (it had been refused: "@file limits are not supported", though the docs say @FILE works)."""
    inv = tmp_path / "a.ini"
    inv.write_text("[rack1]\nh1 ansible_connection=local\nh2 ansible_connection=local\n"
                   "[rack2]\nh3 ansible_connection=local\n")
    (tmp_path / "lim.txt").write_text("# rerun\nh1\n")
    for cmd in (["-m", "gpuaccept.cli", "-i", str(inv)], ["-m", "pytest", "--inventory", str(inv)]):
        res = _run(tmp_path, *cmd, "--limit=rack2,@lim.txt", "--list-hosts")
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
        assert [ln.split()[0] for ln in _lines(res.stdout)] == ["hosts", "h1", "h3"], res.stdout
