"""The ``python -m gpuaccept...`` module commands (gpuaccept.config.cmdline.OneLineParser): a bad or missing
argument is one line on stderr and exit 4, as every bad operator input (argparse alone prints its usage and
exits 2); ``--help`` prints the help and exits 0. Each command run as an operator runs it: a fresh process."""
from __future__ import annotations

import subprocess
import sys

import pytest

#: module -> arguments that are wrong for it (a missing required argument or an unknown one)
COMMANDS = {
    "gpuaccept.scaleout.merge": [[], ["--bogus"], ["d", "--into"]],
    "gpuaccept.scaleout.drain": [[], ["d", "--bogus"]],
    "gpuaccept.scaleout.slurm": [["--bogus"]],
    "gpuaccept.scaleout.slurm_allreduce": [["--port", "x"]],
    "gpuaccept.scaleout.k8s": [[], ["bogus"], ["merge"], ["manifests", "--nodes", "a"], ["rank", "--nodes", "x"]],
    "gpuaccept.reporting.history": [[], ["--bogus"], ["--host", "h", "--serial", "s"]],
}


def _run(module: str, args: list[str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)})


@pytest.mark.parametrize("module, args", [(m, a) for m, bad in COMMANDS.items() for a in bad])
def test_a_bad_argument_is_one_line_and_exit_4(tmp_path, module, args):
    res = _run(module, args, tmp_path)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 4 and len(lines) == 1, (res.returncode, res.stderr)
    assert "usage:" not in res.stderr and "Traceback" not in res.stderr and res.stdout == ""
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("module", [*COMMANDS, "gpuaccept.scaleout.k8s manifests", "gpuaccept.scaleout.k8s merge"])
def test_help_is_printed_and_exits_0(tmp_path, module):
    mod, *sub = module.split()
    res = _run(mod, [*sub, "--help"], tmp_path)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert "python -m " + mod in res.stdout and "issue" not in res.stdout.lower(), res.stdout


@pytest.mark.parametrize("module, args, named", [
    ("gpuaccept.scaleout.merge", ["--bogus-opt"], "--bogus-opt"),          # not "required: --into"
    ("gpuaccept.scaleout.merge", ["d", "--into", "out", "--histroy", "h"], "--histroy"),
    ("gpuaccept.scaleout.drain", ["--dry"], "--dry"),
    ("gpuaccept.reporting.history", ["--hots", "h"], "--hots"),
])
def test_an_unknown_option_is_named_before_a_missing_required_one(tmp_path, module, args, named):
    res = _run(module, args, tmp_path)
    assert res.returncode == 4 and res.stderr.strip().endswith(f"unrecognized arguments: {named}"), res.stderr
    assert list(tmp_path.iterdir()) == []


def test_abbreviations_and_negative_numbers_are_not_unknown_options():
    from gpuaccept.config.cmdline import OneLineParser
    p = OneLineParser(prog="t")
    p.add_argument("--into", required=True)
    p.add_argument("--offset", type=float)
    assert p.parse_args(["--in", "x", "--offset", "-3"]).into == "x"
    assert p._unknown_options(["--into", "x", "--", "--anything"]) == []
