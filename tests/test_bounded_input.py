"""Every file the operator names is read within a bound, and what a refusal echoes is shown safely.

Through the real command (``python -m pytest --collect-only`` of a project with the plugin, as an operator runs
it), each file named by an option (``--limit=@FILE``, ``--site-thresholds FILE``, a threshold file in
``--thresholds DIR``, ``--inventory FILE``) is fed ``/dev/zero``, ``/dev/urandom``, a FIFO that nothing writes
to, and a 100 MB single line. Each run is a child capped at 2 GiB of address space and 20 CPU seconds; it
must exit 4 within 20 s with one ``ERROR:`` line on stderr naming the file and the bound, and no traceback.
Before: ``--limit=@/dev/zero`` ran until the kernel killed it (rc 137 after 62 s; under a memory cap a
MemoryError traceback), and a FIFO blocked forever.

The echo cases: a limit file holding ``/proc/self/environ``-like text (NUL bytes), a 10 MB line, ESC and BEL
sequences: the refusal is one line, cut (saying the total size) and escaped (no raw ESC, BEL or NUL reaches
stderr). Before: the whole line, raw.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuaccept.config.bounded import MAX_BYTES, MAX_LINE, READ_TIMEOUT_S, SMALL_BYTES, SMALL_LINE, read_bounded, \
    size_text
from gpuaccept.config.shown import SHOWN_CHARS, shown, shown_path
from gpuaccept.errors import ConfigError, ProbeError

REPO = Path(__file__).resolve().parents[1]
MEMORY_CAP = 2 << 30  # bytes of address space for the child
CPU_CAP_S = 20  # CPU seconds for the child (RLIMIT_CPU: SIGXCPU past it)
WALL_BOUND_S = 20.0  # the refusal must come within this (the pipe deadline is READ_TIMEOUT_S)
MB = 1 << 20


def _caps() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_CAP_S, CPU_CAP_S))


def _project(root: Path) -> Path:
    """A project holding the plugin's pytest.ini and conftest.py, one suite, and a one-host local inventory."""
    for name in ("pytest.ini", "conftest.py"):
        (root / name).write_text((REPO / name).read_text())
    (root / "suites").mkdir()
    (root / "suites" / "test_x.py").write_text("def test_x(node):\n    node.run('true')\n")
    (root / "inv.ini").write_text("[gpu]\nnode01 ansible_connection=local\n")
    return root


def _run(root: Path, *args: str) -> tuple[int, bytes, float]:
    """(exit code, stderr bytes, wall seconds) of ``pytest --collect-only`` in ``root`` under the caps."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "--reports", str(root / "rep"),
                           *args], cwd=root, capture_output=True, timeout=120, preexec_fn=_caps,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return proc.returncode, proc.stderr, time.monotonic() - t0


def _error_lines(stderr: bytes) -> list[bytes]:
    return [ln for ln in stderr.splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def line_100mb(tmp_path_factory) -> Path:
    """A file of one line of 100 MB (no newline)."""
    path = tmp_path_factory.mktemp("big") / "line100mb"
    with open(path, "wb") as f:
        for _ in range(100):
            f.write(b"A" * MB)
    return path


# -- every input within a bound --------------------------------------------------------------------------
SOURCES = ["dev_zero", "dev_urandom", "fifo_no_writer", "fifo_silent_writer", "line_100mb"]
KINDS = ["limit", "site_thresholds", "thresholds_dir", "inventory"]
# the bounds each kind states (gpuaccept.config.bounded): size, line, time
BOUNDS = {"limit": (MAX_BYTES, MAX_LINE), "inventory": (MAX_BYTES, MAX_LINE),
          "site_thresholds": (SMALL_BYTES, SMALL_LINE), "thresholds_dir": (SMALL_BYTES, SMALL_LINE)}


def _source(name: str, tmp_path: Path, line_100mb: Path, holders: list) -> str:
    if name == "dev_zero":
        return "/dev/zero"
    if name == "dev_urandom":
        return "/dev/urandom"
    if name == "line_100mb":
        return str(line_100mb)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    if name == "fifo_silent_writer":  # a writer holds it open and never writes (O_RDWR: a writer, not blocking)
        holders.append(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))
    return str(fifo)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("kind", KINDS)
def test_named_file_past_a_bound_exits_4_in_bounded_time_and_memory(tmp_path, line_100mb, kind, source):
    if source == "fifo_silent_writer" and kind != "limit":
        pytest.skip("the silent writer once, on --limit (the same reader serves every kind)")
    root = _project(tmp_path)
    holders: list[int] = []
    target = _source(source, tmp_path, line_100mb, holders)
    args = ["--inventory", str(root / "inv.ini"), "--thresholds", str(REPO / "thresholds")]
    named = target
    if kind == "limit":
        args.append(f"--limit=@{target}")
    elif kind == "site_thresholds":
        args += ["--site-thresholds", target]
    elif kind == "thresholds_dir":
        folder = root / "thresholds"
        folder.mkdir()
        for f in (REPO / "thresholds").glob("*.yaml"):
            (folder / f.name).write_bytes(f.read_bytes())
        named = str(folder / "zz-site.yaml")
        os.symlink(target, named)
        args[3] = str(folder)
    else:
        args[1] = target
    try:
        rc, err, wall = _run(root, *args)
    finally:
        for fd in holders:
            os.close(fd)
    lines = _error_lines(err)
    assert rc == 4, err[-2000:]
    assert b"Traceback" not in err and b"MemoryError" not in err, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith(b"ERROR: "), err[-2000:]
    line = lines[0].decode()
    assert named in line, line
    size, longest = BOUNDS[kind]
    if source.startswith("fifo"):
        assert f"within {READ_TIMEOUT_S:g} s" in line, line
    elif source == "dev_urandom":  # newlines come every ~256 bytes: the size bound
        assert f"larger than {size_text(size)}" in line, line
    else:  # no newline: the line bound, reached before the size bound
        assert f"a line longer than {size_text(longest)}" in line, line
    assert wall < WALL_BOUND_S, f"{wall:.1f} s: {line}"


# -- what is echoed is shown safely ----------------------------------------------------------------------
ENVIRON = b"\x00".join(b"VAR%d=secret-value-%d" % (i, i) for i in range(37)) + b"\x00"
ECHO_CASES = {
    "environ_nul_bytes": b"node01\n" + ENVIRON,
    "line_10mb": b"node01\n" + b"A" * 10_000_000 + b"\n",
    "esc_bel": b"node01\n\x1b[2J\x1b]0;owned\x07evil\n",
}


@pytest.mark.parametrize("label", list(ECHO_CASES))
def test_refused_limit_line_is_cut_and_escaped(tmp_path, label):
    root = _project(tmp_path)
    f = tmp_path / "hosts.txt"
    f.write_bytes(ECHO_CASES[label])
    rc, err, wall = _run(root, "--inventory", str(root / "inv.ini"), "--thresholds", str(REPO / "thresholds"),
                         f"--limit=@{f}")
    lines = _error_lines(err)
    assert rc == 4 and b"Traceback" not in err, err[-2000:]
    assert len(lines) == 1, err[-2000:]
    for raw in (b"\x1b", b"\x07", b"\x00"):
        assert raw not in err, (raw, err[-2000:])
    line = lines[0].decode()
    assert f"{f}:2: host '" in line and "is not in the inventory" in line, line
    assert len(line) < 4 * SHOWN_CHARS, line
    if label == "line_10mb":
        assert "(10,000,000 characters, the first 100 characters shown)" in line, line
    if label == "environ_nul_bytes":
        assert "\\x00" in line and "characters, the first" in line, line
    if label == "esc_bel":
        assert "'\\x1b[2J\\x1b]0;owned\\x07evil'" in line, line


@pytest.mark.parametrize("args,expect", [
    (["--sku", "\x1b[2Jh9\x07"], "--sku '\\x1b[2Jh9\\x07' is not a known SKU"),
    (["--limit", "node01,\x1b]0;owned\x07"], "'\\x1b]0;owned\\x07'"),
    (["--limit", "x" * 100_000], "(100,000 characters, the first 100 characters shown)"),
])
def test_refused_option_value_is_cut_and_escaped(tmp_path, args, expect):
    root = _project(tmp_path)
    rc, err, _ = _run(root, "--inventory", str(root / "inv.ini"), "--thresholds", str(REPO / "thresholds"), *args)
    lines = _error_lines(err)
    assert rc == 4 and len(lines) == 1, err[-2000:]
    assert b"\x1b" not in err and b"\x07" not in err, err[-2000:]
    assert expect in lines[0].decode() and len(lines[0]) < 1000, lines[0][:2000]


def test_inventory_line_echo_is_cut(tmp_path):
    """A 10 MB word on an INI host line: the refusal quotes its start and says its size."""
    root = _project(tmp_path)
    (root / "inv.ini").write_text("[gpu]\nnode01 ansible_connection=local " + "\x01" * 3 + "z" * 10_000_000 + "\n")
    rc, err, _ = _run(root, "--inventory", str(root / "inv.ini"), "--thresholds", str(REPO / "thresholds"))
    lines = _error_lines(err)
    assert rc == 4 and len(lines) == 1 and len(lines[0]) < 1000, err[:2000]
    assert b"\x01" not in err, err[:2000]


# -- the reader and the shown value, in process ----------------------------------------------------------
def test_shown_reads_as_repr_when_short_and_printable():
    for v in ("node01", "it's", 'a"b', "", "gpu-07x", "ü"):
        assert shown(v) == repr(v)
    assert shown([1, "a"]) == repr([1, "a"]) and shown(None) == "None"
    assert shown("\x1b[2J\x07\x00") == "'\\x1b[2J\\x07\\x00'"
    assert shown("\u202eabc") == "'\\u202eabc'"  # a bidirectional control: escaped, not applied


def test_shown_cuts_in_time_of_its_limit_and_says_the_size():
    big = "\x00" * 50_000_000
    t0 = time.process_time()
    out = shown(big)
    assert time.process_time() - t0 < 0.5
    assert out.startswith("'\\x00") and out.endswith("(50,000,000 characters, the first 25 characters shown)"), out
    assert len(out) < 2 * SHOWN_CHARS
    assert shown(b"A=1\x00" * 1000).endswith("(4,000 bytes, the first 58 characters shown)")  # escapes count
    assert shown("x" * 200, 10) == "'xxxxxxxxxx'... (200 characters, the first 10 characters shown)"
    assert shown_path("/tmp/a b") == "/tmp/a b" and shown_path("/tmp/\x1b[2J") == "/tmp/\\x1b[2J"


def test_a_pipe_that_ends_is_read_as_before(tmp_path):
    """A FIFO whose writer comes late, writes and closes (``--inventory <(ansible-inventory --list)``): read."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def writer():
        time.sleep(0.5)
        with open(fifo, "wb") as f:
            f.write(b"[gpu]\n")
            time.sleep(0.3)
            f.write(b"node01 ansible_connection=local\n")

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert read_bounded(str(fifo), "inventory file") == b"[gpu]\nnode01 ansible_connection=local\n"
    finally:
        t.join()
    r, w = os.pipe()  # an anonymous pipe by its /proc name, as bash's process substitution passes it
    os.write(w, b"node01\n")
    os.close(w)
    try:
        assert read_bounded(f"/proc/self/fd/{r}", "host list file") == b"node01\n"
    finally:
        os.close(r)
    assert read_bounded("/dev/null", "known_hosts file") == b""


def test_reader_names_the_file_and_the_bound(tmp_path):
    f = tmp_path / "f.txt"
    f.write_bytes(b"ab\n" + b"c" * 100 + b"\nd\n")
    with pytest.raises(ConfigError, match=r"f\.txt: a line longer than 64 bytes \(line 2\)"):
        read_bounded(str(f), "host list file", max_line=64)
    with pytest.raises(ConfigError, match=r"f\.txt: larger than 64 bytes; not a host list file"):
        read_bounded(str(f), "host list file", max_bytes=64)
    with pytest.raises(ConfigError, match="is a directory"):
        read_bounded(str(tmp_path), "host list file")
    assert read_bounded(str(f), "x", max_bytes=108, max_line=100) == f.read_bytes()


def test_replay_capture_past_a_bound_is_a_probe_error(tmp_path):
    """A saved probe document that is /dev/zero, or a FIFO nothing writes to: a ProbeError naming the file and
    the bound, within the pipe deadline (before: the run exhausted memory or hung)."""
    from gpuaccept.runner.replay import probe_key, replay_probe

    zero = tmp_path / "zero"
    zero.mkdir()
    os.symlink("/dev/zero", zero / (probe_key("gpu_inventory", {}) + ".json"))
    with pytest.raises(ProbeError, match=rf"a line longer than {size_text(MAX_LINE)}") as info:
        replay_probe("node01", str(zero), "gpu_inventory", {})
    assert str(zero) in str(info.value)
    fifo_dir = tmp_path / "fifo"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / (probe_key("gpu_inventory", {}) + ".json"))
    t0 = time.monotonic()
    with pytest.raises(ProbeError, match=rf"within {READ_TIMEOUT_S:g} s"):
        replay_probe("node01", str(fifo_dir), "gpu_inventory", {})
    assert time.monotonic() - t0 < READ_TIMEOUT_S + 5
    # a saved document looked through for other arguments, past a bound: named too, not passed over in silence
    os.symlink("/dev/zero", zero / "gpu_inventory-0000000000.json")
    with pytest.raises(ProbeError, match="a line longer than"):
        replay_probe("node01", str(zero), "gpu_inventory", {"x": 1})
