"""Smaller breaks, each as a kind: the plugin runs without pytest-xdist loaded, a reader of standard
output that goes away ends the output quietly, a retry file that lists no host is "nothing to rerun" (exit 5,
one line) and not bad input, and a progress line starts on a line of its own beside pytest's ``-v`` lines.
Every command runs the shipped suites from an operator's folder (no pytest.ini, no suites), as a user types it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def _ops(tmp_path: Path) -> Path:
    ops = tmp_path / "ops"
    ops.mkdir()
    (ops / "inv.ini").write_text("localhost ansible_connection=local\n")
    return ops


def _env() -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "0"}
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _run(ops: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=ops, capture_output=True, text=True, timeout=240, env=_env())


def test_shipped_suites_run_with_xdist_blocked(tmp_path):
    """``pytest -p no:xdist``: the xdist hooks are optional, the health layer runs (no GPU here: skips)."""
    ops = _ops(tmp_path)
    res = _run(ops, str(BIN / "pytest"), "-p", "no:xdist", "--inventory", "inv.ini", "-m", "health")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-2000:]
    assert "unknown hook" not in out and "Traceback" not in out and "INTERNALERROR" not in out


@pytest.mark.parametrize("cmd", [["gpuaccept", "--help-pytest"], ["gpuaccept", "--help"],
                                 ["pytest", "--inventory", "inv.ini", "-m", "health", "-v"],
                                 ["gpuaccept", "-i", "inv.ini", "-m", "health", "-v"]])
def test_a_reader_that_goes_away_ends_the_output_quietly(tmp_path, cmd):
    """``... | head -1``: the pipe is closed after the first line, before the command writes the rest; no
    traceback, and a run still writes its report files."""
    ops = _ops(tmp_path)
    r, w = os.pipe()
    p = subprocess.Popen([str(BIN / cmd[0]), *cmd[1:]], cwd=ops, stdout=w, stderr=subprocess.PIPE, text=True,
                         env=_env())
    os.close(w)
    with os.fdopen(r, "rb", buffering=0) as reader:
        first = b""
        while not first.endswith(b"\n"):
            c = reader.read(1)
            if not c:
                break
            first += c
    # the reader is gone (as `head -1` once it has its line): every later write meets a closed pipe
    err = p.stderr.read()
    code = p.wait(timeout=240)
    assert first.strip(), err
    assert "Traceback" not in err and "BrokenPipe" not in err and "INTERNALERROR" not in err, err[-3000:]
    assert code in (0, 1), err[-2000:]
    if "-m" in cmd:
        assert (ops / "reports" / "latest" / "results.json").is_file(), err[-3000:]


def test_a_retry_file_that_lists_no_host_is_nothing_to_rerun(tmp_path):
    """A clean night's failed-hosts.txt (comments, no host): exit 5 and one line, from the command and from
    plain pytest; a file that does not exist, or names an unknown host, is still bad input (exit 4)."""
    ops = _ops(tmp_path)
    (ops / "failed-hosts.txt").write_text("# no host failed\n\n")
    (ops / "unknown.txt").write_text("gpu-99\n")
    for tool in (["gpuaccept", "-i"], ["pytest", "--inventory"]):
        res = _run(ops, str(BIN / tool[0]), tool[1], "inv.ini", "--limit=@failed-hosts.txt", "-m", "health")
        assert res.returncode == 5, res.stdout + res.stderr
        assert res.stderr == "gpuaccept: --limit @failed-hosts.txt lists no host: nothing to rerun\n", res.stderr
        assert res.stdout == "" and not (ops / "reports").exists()
        for bad in ("--limit=@missing.txt", "--limit=@unknown.txt"):
            res = _run(ops, str(BIN / tool[0]), tool[1], "inv.ini", bad, "-m", "health")
            assert res.returncode == 4, res.stdout + res.stderr


def test_nothing_to_rerun_is_its_own_kind():
    from gpuaccept.config.limitfile import NothingToRerun, hosts_from_file, nothing_to_rerun
    from gpuaccept.errors import ConfigError
    assert issubclass(NothingToRerun, ConfigError)
    assert nothing_to_rerun(None) is None and nothing_to_rerun("gpu:!drained") is None
    assert nothing_to_rerun("@/nonexistent/failed.txt") is None  # refused later: exit 4
    with pytest.raises(NothingToRerun):
        hosts_from_file(os.devnull, ["a"])


def test_a_progress_line_starts_on_its_own_line_after_pytests_verbose_line(tmp_path):
    """``-v`` with the progress display in the same output (2>&1, a log): pytest writes a test's line
    newline-last, only before its next line; the host's progress line must not be glued to it."""
    ops = _ops(tmp_path)
    res = subprocess.run([str(BIN / "gpuaccept"), "-i", "inv.ini", "-m", "health", "-v", "--progress", "plain"],
                         cwd=ops, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240, env=_env())
    lines = res.stdout.splitlines()
    host = [ln for ln in lines if "[gpuaccept] localhost" in ln]
    assert res.returncode == 0 and host, res.stdout[-3000:]
    assert all(ln.startswith("[gpuaccept] localhost") for ln in host), host
    assert any(ln.rstrip().endswith("[100%]") for ln in lines), res.stdout[-3000:]


def test_progress_line_ends_the_terminal_line_only_where_it_shares_the_output(tmp_path):
    from gpuaccept.plugin import progress
    calls = []
    with open(tmp_path / "log", "w") as other:
        p = progress.Progress(other, False, 10.0)
        assert p._shared is False
        progress.END_TERMINAL_LINE.append(lambda: calls.append(1))
        try:
            p._shared = True
            p.expect({"h": 1})
            p.end("h", "passed")
        finally:
            progress.END_TERMINAL_LINE.pop()
    assert calls == [1] and (tmp_path / "log").read_text().startswith("[gpuaccept] h PASS")
