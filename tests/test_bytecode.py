"""The nodes' bytecode cache (gpuaccept/probes/_bytecode.py): real agents over the local connection, with $TMPDIR a
folder of the test, so that the cache they write is the test's; the module itself in this process for pruning."""
from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaccept.runner.agent import Agent
from gpuaccept.runner.ship import PROBE_DIR
from gpuaccept.transport import get_transport
from process_helpers import FakeHost, compile_beside

ENV = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}

pytestmark = pytest.mark.usefixtures("isolated_home")


@pytest.fixture
def tmpdir_env(tmp_path, monkeypatch) -> Path:
    """$TMPDIR for the agents this test starts: their folders and their bytecode cache go below it."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setenv("TMPDIR", str(d))
    return d


def cache_dir(tmp: Path) -> Path:
    return tmp / f"gpuaccept-bytecode-{os.geteuid()}"


def run_probe(path: str, env: dict | None = None):
    """Start an agent over the local connection, run the probe file ``path``, close the agent; its result."""
    t = get_transport(FakeHost(name="ctl", address="localhost", connection="local"))
    a = Agent("ctl", t, sys.executable, {**ENV, **(env or {})})
    try:
        a.start()
        return a.probe("p", [path, "{}"], 60, 15, {}, torch=None)
    finally:
        a.close()
        t.close()


def entries(tmp: Path) -> dict[str, float]:
    d = cache_dir(tmp)
    return {p.name: p.stat().st_mtime for p in d.iterdir()} if d.is_dir() else {}


def test_the_second_start_runs_the_cached_code(tmpdir_env, tmp_path):
    """The first agent writes the agent's, the probe's and its helpers' code into a 0700 folder of this user's; the
    next one compiles nothing (the entries stay as they are) and runs what the cache holds: an entry replaced by
    other code is what runs (which is why the folder must be this user's alone)."""
    probe = tmp_path / "echo_probe.py"
    probe.write_text("import json, _pci\nprint(json.dumps({'bus': _pci.normalize_bus_id('0000:3B:00.0')}))\n")
    first = run_probe(str(probe))
    assert first.rc == 0, first.stderr
    assert json.loads(first.stdout) == {"bus": "00000000:3B:00.0"}
    d = cache_dir(tmpdir_env)
    assert (d.stat().st_mode & 0o777) == 0o700 and d.stat().st_uid == os.geteuid()
    written = entries(tmpdir_env)
    assert len(written) >= 4  # _agent, _watchdog, _nodelock, _zygote, _pci, the probe ...
    second = run_probe(str(probe))
    assert second.stdout == first.stdout and entries(tmpdir_env) == written
    key = [n for n in written if marshal.loads((d / n).read_bytes()).co_consts.count("0000:3B:00.0")]
    assert len(key) == 1
    (d / key[0]).write_bytes(marshal.dumps(compile("print('{\"from\": \"the cache\"}')", "x", "exec")))
    assert json.loads(run_probe(str(probe)).stdout) == {"from": "the cache"}


def test_a_traceback_names_the_probe_s_own_file(tmpdir_env, tmp_path):
    """Cached code carries the file's real path: a probe that raises prints its traceback as Python would."""
    probe = tmp_path / "raiser.py"
    probe.write_text("def f():\n    raise RuntimeError('boom')\n\nf()\n")
    for _ in range(2):  # compiled, then from the cache
        r = run_probe(str(probe))
        assert r.rc == 1
        assert f'File "{probe}", line 2, in f' in r.stderr.decode()
        assert "RuntimeError: boom" in r.stderr.decode()


@pytest.mark.parametrize("unsafe", ["group-writable", "symlink", "a file"])
def test_a_cache_folder_not_this_users_alone_is_not_used(tmpdir_env, tmp_path, unsafe):
    """A cache folder open to others, a link, or no folder at all: the probes compile as before, nothing is read
    from or written there, and they run."""
    d = cache_dir(tmpdir_env)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if unsafe == "group-writable":
        d.mkdir()
        d.chmod(0o770)
    elif unsafe == "symlink":
        d.symlink_to(elsewhere)
    else:
        d.write_text("not a folder")
    probe = tmp_path / "plain.py"
    probe.write_text("print('{\"ok\": 1}')\n")
    r = run_probe(str(probe))
    assert r.rc == 0 and json.loads(r.stdout) == {"ok": 1}
    assert list(elsewhere.iterdir()) == []
    if unsafe == "group-writable":
        assert list(d.iterdir()) == []


def test_off_writes_no_cache(tmpdir_env, tmp_path, monkeypatch):
    """``GPUACCEPT_BYTECODE=off`` in the controller's environment reaches the agent: no cache folder is made."""
    monkeypatch.setenv("GPUACCEPT_BYTECODE", "off")
    probe = tmp_path / "plain.py"
    probe.write_text("print('{\"ok\": 1}')\n")
    assert run_probe(str(probe)).rc == 0
    assert not cache_dir(tmpdir_env).exists()


def test_a_damaged_entry_is_compiled_again(tmpdir_env, tmp_path):
    """An entry that is not marshalled code (cut short, garbage) is compiled again and replaced."""
    probe = tmp_path / "plain.py"
    probe.write_text("print('{\"ok\": 2}')\n")
    run_probe(str(probe))
    d = cache_dir(tmpdir_env)
    for p in d.iterdir():
        p.write_bytes(b"\x00garbage")
    r = run_probe(str(probe))
    assert r.rc == 0 and json.loads(r.stdout) == {"ok": 2}
    assert all(p.read_bytes() != b"\x00garbage" for p in d.iterdir())


def test_past_keep_entries_the_oldest_half_goes(tmp_path, monkeypatch):
    """The folder stays bounded: past ``KEEP`` entries, writing one removes the oldest half by mtime."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.syspath_prepend(PROBE_DIR)
    import _bytecode

    monkeypatch.setattr(_bytecode, "_dir", None)
    monkeypatch.setattr(_bytecode, "KEEP", 10)
    for i in range(10):
        src = tmp_path / f"m{i}.py"
        src.write_text(f"X = {i}\n")
        _bytecode.code(str(src))
        entry = max(cache_dir(tmp_path).iterdir(), key=lambda p: p.stat().st_mtime_ns)
        os.utime(entry, (1000 + i, 1000 + i))
    assert len(list(cache_dir(tmp_path).iterdir())) == 10
    (tmp_path / "m10.py").write_text("X = 10\n")
    ns: dict = {}
    exec(_bytecode.code(str(tmp_path / "m10.py")), ns)  # noqa: S102 - the module just written
    assert ns["X"] == 10
    left = sorted(p.stat().st_mtime for p in cache_dir(tmp_path).iterdir())
    assert len(left) == 6 and left[0] >= 1005


def tree_dir(tmp: Path) -> Path:
    return tmp / f"gpuaccept-pycache-{os.geteuid()}"


def installed_package(where: Path, compiled: bool) -> Path:
    """A package ``pkgx`` (an ``__init__`` importing a submodule) in folder ``where``, with its own bytecode
    (``compileall``, as ``pip install`` leaves it) or none (an image built without bytecode)."""
    pkg = where / "pkgx"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkgx import sub\nVALUE = sub.VALUE + 1\n")
    (pkg / "sub.py").write_text("VALUE = 41\n")
    if compiled:
        compile_beside(pkg)
    return pkg



def import_with_tree(site: Path, tmp: Path, extra_env: dict | None = None, setup: str = "") -> tuple[dict, str]:
    """In a fresh ``python -v`` (``PYTHONDONTWRITEBYTECODE=1``, ``$TMPDIR`` = ``tmp``): ``setup`` (Python, with
    ``_bytecode`` imported), ``_bytecode.use_tree("pkgx")``, then import it; (what it printed, the interpreter's
    verbose log of where each module's code came from)."""
    code = (f"import json, sys; sys.path[:0] = [{str(site)!r}, {str(PROBE_DIR)!r}]; import _bytecode; {setup + '; ' if setup else ''}"
            "t = _bytecode.use_tree('pkgx'); import pkgx; "
            "print(json.dumps({'tree': t, 'value': pkgx.VALUE, 'prefix': sys.pycache_prefix}))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update({"PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(tmp), **(extra_env or {})})
    r = subprocess.run([sys.executable, "-v", "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def test_a_package_without_bytecode_is_compiled_once_into_the_users_tree(tmp_path):
    """An installed package with no ``__pycache__`` (torch on the lent H200's image): the first import writes its
    bytecode below ``$TMPDIR/gpuaccept-pycache-<euid>`` (0700) and nothing beside the source; the next process
    reads its code from there (Python's own log says so) and rewrites nothing."""
    site, tmp = tmp_path / "site", tmp_path / "tmp"
    tmp.mkdir()
    pkg = installed_package(site, compiled=False)
    first, _log = import_with_tree(site, tmp)
    tree = tree_dir(tmp)
    assert first == {"tree": str(tree), "value": 42, "prefix": str(tree)}
    assert (tree.stat().st_mode & 0o777) == 0o700 and tree.stat().st_uid == os.geteuid()
    written = {p: p.stat().st_mtime_ns for p in tree.rglob("*.pyc")}
    mirrored = {p.relative_to(tree).parent for p in written}
    assert mirrored == {pkg.relative_to("/")}, written
    assert {p.name.split(".")[0] for p in written} >= {"__init__", "sub"}
    assert not (pkg / "__pycache__").exists()
    second, log = import_with_tree(site, tmp)
    assert second == first
    assert f"code object from '{tree}{pkg}/sub." in log, log[-3000:]
    assert {p: p.stat().st_mtime_ns for p in tree.rglob("*.pyc")} == written


def test_a_package_with_its_own_bytecode_is_left_as_it_is(tmp_path):
    """A package with its bytecode (as pip leaves it): no prefix is set, so Python keeps reading ``__pycache__``,
    and no tree is made."""
    site, tmp = tmp_path / "site", tmp_path / "tmp"
    tmp.mkdir()
    pkg = installed_package(site, compiled=True)
    got, log = import_with_tree(site, tmp)
    assert got == {"tree": None, "value": 42, "prefix": None}
    assert f"code object from '{pkg}/__pycache__/sub." in log
    assert not tree_dir(tmp).exists()


@pytest.mark.parametrize("env", [{"GPUACCEPT_BYTECODE": "off"}, {"PYTHONPYCACHEPREFIX": "operator"}])
def test_the_tree_is_not_used_when_off_or_when_the_operator_set_a_prefix(tmp_path, env):
    """``GPUACCEPT_BYTECODE=off``, or a prefix of the operator's (``PYTHONPYCACHEPREFIX``), which stays as it is:
    no tree is made."""
    site, tmp = tmp_path / "site", tmp_path / "tmp"
    tmp.mkdir()
    installed_package(site, compiled=False)
    if "PYTHONPYCACHEPREFIX" in env:
        env = {"PYTHONPYCACHEPREFIX": str(tmp_path / "operator")}
    got, _log = import_with_tree(site, tmp, env)
    assert got["tree"] is None and got["value"] == 42
    assert got["prefix"] == env.get("PYTHONPYCACHEPREFIX")
    assert not tree_dir(tmp).exists()


def test_a_tree_folder_open_to_others_is_not_used(tmp_path):
    """The tree's folder exists but others may write it: nothing is read from it or written there."""
    site, tmp = tmp_path / "site", tmp_path / "tmp"
    tmp.mkdir()
    installed_package(site, compiled=False)
    tree_dir(tmp).mkdir(mode=0o777)
    tree_dir(tmp).chmod(0o777)
    got, _log = import_with_tree(site, tmp)
    assert got["tree"] is None and got["prefix"] is None
    assert list(tree_dir(tmp).iterdir()) == []


def test_a_tree_past_its_bound_is_removed_and_grows_again(tmp_path):
    """Past ``TREE_MAX`` bytes (here 4 KiB) the tree goes, old entries and all, before the import that then fills
    it again."""
    site, tmp = tmp_path / "site", tmp_path / "tmp"
    tmp.mkdir()
    pkg = installed_package(site, compiled=False)
    tree = tree_dir(tmp)
    (tree / "old" / "site").mkdir(parents=True, mode=0o700)
    tree.chmod(0o700)
    (tree / "old" / "site" / "stale.cpython-311.pyc").write_bytes(b"x" * 8192)
    got, _log = import_with_tree(site, tmp, setup="_bytecode.TREE_MAX = 4096")
    assert got["tree"] == str(tree)
    assert not (tree / "old").exists()
    assert any(p.name.startswith("sub.") for p in (tree / pkg.relative_to("/")).iterdir())


@pytest.mark.parametrize("mode, used", [(0o777, False), (0o1777, True), (0o755, True)])
def test_the_tree_is_used_only_where_tmpdir_is_sticky_or_closed(tmp_path, mode, used):
    """``$TMPDIR`` writable by others without the sticky bit: another user could swap the tree's folder after its
    check, so none is used; sticky (as /tmp) or closed to others: used."""
    site, tmp = tmp_path / "site", tmp_path / "tmp"
    tmp.mkdir()
    tmp.chmod(mode)
    installed_package(site, compiled=False)
    got, _log = import_with_tree(site, tmp)
    assert (got["tree"] == str(tree_dir(tmp))) is used
    assert tree_dir(tmp).exists() is used


def test_no_tree_without_the_probe_cache(tmp_path):
    """Where the probe cache cannot be used (its name taken by a file), the shipped probe files would be compiled
    into the tree from each run's new folder: no tree then."""
    site, tmp = tmp_path / "site", tmp_path / "tmp"
    tmp.mkdir()
    installed_package(site, compiled=False)
    cache_dir(tmp).write_text("not a folder")
    got, _log = import_with_tree(site, tmp)
    assert got["tree"] is None and not tree_dir(tmp).exists()
