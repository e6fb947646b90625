"""Nothing is left on a node by a failed agent start (1), and nothing is dropped silently (2).

1. The command that starts a host's agent (gpuaccept.runner.agent.start_command) makes ``$TMPDIR/gpuaccept.<12
   hex>``; the folder is removed in that same command whatever ended the start: a wrong interpreter (five runs,
   no folder left: before, one per run), a TMPDIR too full for the probe files (a real tmpfs filled up; without
   root, a file-size limit on the node's Python, which fails the same writes), a handshake cut by the
   controller closing its end, by SIGTERM to the session's process group, or by the connection dropping. An
   agent that started keeps its folder while it serves, and the removal touches nothing but the folder that
   command made.
2. A probe document that cannot be written (the host's ``probes/<host>`` folder replaced by a symlink mid-run) is
   an ERROR of that test naming the path and why; the run exits non-zero and nothing is written through the
   symlink.

Real sshd nodes (tests/sshd.py) with a TMPDIR of their own; real runs of the suites; no mocks.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuaccept.errors import InterpreterMissing
from gpuaccept.runner.agent import Agent, start_command
from gpuaccept.runner.host import DocumentNotSaved, keep_probe
from gpuaccept.runner.ship import payload
from gpuaccept.transport import get_transport
from gpuaccept.transport.session import open_session
from process_helpers import fill, host_for
from project_helpers import junit, make_project, run_pytest
from sshd import start_nodes_with_tmp, write_known_hosts

ENV = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}

pytestmark = pytest.mark.usefixtures("isolated_home")

SUITE = '''
def test_a_probe(node, verdicts):
    verdicts.record("mounts", len(node.probe("storage_mounts", {"paths": ["/tmp"]})), "entries")
'''


def folders(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("gpuaccept."))


def wait_for(cond, within: float = 15.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return bool(cond())


@pytest.fixture
def node(tmp_path):
    """One sshd node (127.0.44.1) whose sessions' TMPDIR is ``node.tmp``; ``node.kh``: its known_hosts."""
    n = start_nodes_with_tmp(tmp_path, ("127.0.44.1",), "fs")[0]
    n.kh = write_known_hosts(tmp_path / "kh", [n])  # type: ignore[attr-defined]
    try:
        yield n
    finally:
        n.stop()


def _run(tmp_path: Path, node, tag: str, python: str = sys.executable, suite: str = SUITE, env: dict | None = None,
         nodes=None):
    proj = tmp_path / f"proj-{tag}"
    proj.mkdir()
    all_nodes = nodes or [node]
    inv = make_project(proj, all_nodes, node.kh, suite, "test_fs.py")
    if python != sys.executable:
        inv.write_text(inv.read_text().replace(f"ansible_python_interpreter={sys.executable}",
                                               f"ansible_python_interpreter={python}"))
    rep = tmp_path / f"rep-{tag}"
    res = run_pytest(proj, "--inventory", str(inv), "--known-hosts", node.kh, "--reports", str(rep), "--history",
                     "none", "-p", "no:randomly", "suites/test_fs.py", env=env)
    return res, rep


# -- 5: a failed start leaves nothing -------------------------------------------------------------------------
def test_wrong_interpreter_five_runs_leave_no_folder(tmp_path, node):
    """Before: one empty ``gpuaccept.<hex>`` per run (five after five runs). Now each run is the same clear ERROR
    and the node's TMPDIR holds no folder of gpuaccept's after any of them."""
    for i in range(5):
        res, rep = _run(tmp_path, node, f"interp{i}", python="/nonexistent/python3")
        assert res.returncode == 1, (res.stdout + res.stderr)[-3000:]
        assert "python interpreter '/nonexistent/python3' not found (set ansible_python_interpreter)" in res.stdout
        assert folders(node.tmp) == [], f"run {i} left {folders(node.tmp)}"


#: how a node's TMPDIR refuses the probes: where the start fails (BOOT writing the agent's files, or the folder's
#: mkdir), the reason the node says, the cause kind; "tmpfs", "readonly" and "inodes" need a mount (root, as in CI)
UNWRITABLE = {
    "fsize": ("write the probe files into", "File too large", "probe_folder_unwritable"),
    "missing": ("make the probe folder", "No such file or directory", "probe_folder_unwritable"),
    "tmpfs": ("write the probe files into", "No space left on device", "probe_folder_full"),
    "readonly": ("make the probe folder", "Read-only file system", "probe_folder_unwritable"),
    "inodes": ("make the probe folder", "No space left on device", "probe_folder_full"),
}


@pytest.fixture(params=["fsize", "missing"] + (["tmpfs", "readonly", "inodes"] if os.geteuid() == 0 else []))
def full_tmpdir(node, tmp_path, request):
    """The node's TMPDIR refusing the probes (:data:`UNWRITABLE`). ``fsize``: the node's Python runs under
    ``ulimit -f 0`` (its writes fail with EFBIG: a folder can be made, no file written; a limit of the session, so
    configuration). ``missing``: the folder is not there (ENOENT). As root: ``tmpfs``, a 64 KiB tmpfs filled to
    the last byte (ENOSPC on the files: capacity); ``readonly``, a tmpfs mounted read-only (EROFS on the mkdir);
    ``inodes``, a tmpfs of 2 inodes, used up (ENOSPC on the mkdir: capacity). Returns (the interpreter to give the
    host, what failed, the reason expected, the cause kind expected)."""
    what, reason, kind = UNWRITABLE[request.param]
    python = sys.executable
    mount = {"tmpfs": "size=64k", "readonly": "size=64k,ro", "inodes": "size=64k,nr_inodes=2"}.get(request.param)
    if mount:
        subprocess.run(["mount", "-t", "tmpfs", "-o", mount, "tmpfs", str(node.tmp)], check=True)
        if request.param == "tmpfs":
            fill(node.tmp)
        elif request.param == "inodes":
            (node.tmp / "a").mkdir()  # the root and this: no inode left for another folder
    elif request.param == "missing":
        node.tmp.rmdir()
    else:
        python = str(tmp_path / "python-fsize0")
        Path(python).write_text(f"#!/bin/sh\nulimit -f 0\nexec {sys.executable} \"$@\"\n")
        Path(python).chmod(0o755)
    try:
        yield python, what, reason, kind
    finally:
        if mount:
            subprocess.run(["umount", "-l", str(node.tmp)], check=False)
        node.tmp.mkdir(exist_ok=True)


def test_an_unwritable_tmpdir_leaves_no_folder_and_reads_as_the_nodes_disk(tmp_path, node, full_tmpdir):
    """Before: the folder with the probe files half written stayed (one per start), and the ERROR read as a
    crashed probe (rerun), as did a folder the start could not make. Now: ERROR naming the folder and the reason,
    the cause the node's disk (full: capacity, free-space; read-only, missing, a file size limit: configuration,
    fix-config) with the folder's path and the errno's name, never hardware, and nothing of gpuaccept's left in
    the TMPDIR, twice in a row."""
    python, what, reason, kind = full_tmpdir
    full = kind == "probe_folder_full"
    for i in range(2):
        res, rep = _run(tmp_path, node, f"full{i}", python=python)
        out = res.stdout + res.stderr
        assert res.returncode == 1, out[-3000:]
        assert f"could not ship probes: cannot {what} {node.tmp}/gpuaccept." in out and reason in out, out[-3000:]
        if node.tmp.is_dir():
            assert folders(node.tmp) == [], f"run {i} left {folders(node.tmp)}"
        tests = json.loads((rep / "results.json").read_text())["tests"]
        assert tests and all(t["outcome"] == "error" for t in tests), tests
        causes = [c for t in tests for c in t["causes"]]
        assert {c["kind"] for c in causes} == {kind}
        assert {c["class"] for c in causes} == {"capacity" if full else "configuration"}
        assert {t["action"]["action"] for t in tests} == {"free-space" if full else "fix-config"}
        assert all(c["evidence"]["folder"].startswith(f"{node.tmp}/gpuaccept.") for c in causes), causes
        assert {c["evidence"]["errno"] for c in causes} <= {"ENOSPC", "EFBIG", "ENOENT", "EROFS"}, causes


def _handshake(node, cut: str) -> None:
    """Start an agent's command by hand, send half the probe files, then cut the handshake (``cut``): the folder
    the command made goes within seconds, and the command ends."""
    t = get_transport(host_for(node), known_hosts=node.kh)
    try:
        cmd, name = start_command(sys.executable, ENV)
        s = open_session(t, cmd)
        assert wait_for(lambda: folders(node.tmp) == [name]), folders(node.tmp)
        frame = payload()
        s.send(frame[:len(frame) // 2])
        time.sleep(0.3)
        assert folders(node.tmp) == [name]  # still reading the files
        if cut == "eof":  # the controller closed its end (a start given up, a controller gone)
            s.close()
        elif cut == "sigterm":  # the controller's kill of the session's group (a lost connection's clean-up)
            assert wait_for(lambda: (s.stderr(), s.pgid)[1] is not None)
            os.killpg(s.pgid, signal.SIGTERM)
        elif cut == "dropped":  # the connection went: the sshd session processes die
            for p in node.session_processes():
                os.kill(p, signal.SIGKILL)
        assert wait_for(lambda: folders(node.tmp) == []), f"{cut}: left {folders(node.tmp)}"
        if cut == "sigterm":
            assert s.exit_status(10) not in (None, 0)
        s.close()
    finally:
        t.close()


@pytest.mark.parametrize("cut", ["eof", "sigterm", "dropped"])
def test_a_killed_handshake_leaves_no_folder(node, cut):
    """Before: BOOT, cut while reading the probe files, exited (or died of SIGTERM) and its folder stayed."""
    _handshake(node, cut)


def test_a_started_agent_keeps_its_folder_and_the_removal_touches_nothing_else(node):
    """An agent that started keeps its folder while it serves (a probe runs in it), and removes it at close. A
    start command whose name exists already (a folder with a file, a symlink to another folder) makes nothing and
    removes nothing: its ``mkdir`` fails, and only what it made is ever removed."""
    t = get_transport(host_for(node), known_hosts=node.kh)
    try:
        a = Agent(node.name, t, sys.executable, ENV)
        a.start()
        folder = Path(a.dir)
        assert folder.parent == node.tmp and folder.is_dir()
        res = a.probe("storage_mounts", ["storage_mounts.py", json.dumps({"paths": ["/tmp"]})], 60, 5, {})
        assert res.rc == 0 and folder.is_dir() and (folder / "_agent.py").is_file()
        assert a.close() is True and not folder.exists()

        cmd, name = start_command(sys.executable, ENV)
        other = node.tmp / "other"
        other.mkdir()
        (other / "keep").write_text("x")
        for existing in ("dir", "link"):
            target = node.tmp / name
            if existing == "dir":
                target.mkdir()
                (target / "keep").write_text("x")
            else:
                target.symlink_to(other)
            r = t.run(cmd, timeout=30)
            assert r.rc != 0 and b"File exists" in r.stderr, r
            assert (target / "keep").read_text() == "x" and (other / "keep").read_text() == "x"
            if existing == "dir":
                (target / "keep").unlink()
                target.rmdir()
            else:
                assert target.is_symlink()
                target.unlink()
    finally:
        t.close()


def test_interpreter_missing_on_the_agent_leaves_no_folder(node):
    """The controller's side: Agent.start with a wrong interpreter raises InterpreterMissing, nothing left."""
    t = get_transport(host_for(node), known_hosts=node.kh)
    try:
        a = Agent(node.name, t, "/nonexistent/python3", ENV)
        with pytest.raises(InterpreterMissing):
            a.start()
        assert folders(node.tmp) == []
    finally:
        t.close()


# -- 7: nothing dropped silently ------------------------------------------------------------------------------
SYMLINK_SUITE = '''
import os
from pathlib import Path


def test_1_first(node, verdicts):
    verdicts.record("mounts", len(node.probe("storage_mounts", {"paths": ["/tmp"]})), "entries")


def test_2_swap(node, verdicts):
    """Replace this run's probes/<host> folder of fs1 with a symlink to E2E_ELSEWHERE (as someone else could)."""
    if node.name == "fs1":
        d = Path(os.environ["E2E_REPORTS"]) / "probes" / node.name
        d.rename(d.with_name("fs1.moved"))
        d.symlink_to(os.environ["E2E_ELSEWHERE"], target_is_directory=True)
    verdicts.record("swapped", node.name == "fs1")


def test_3_second(node, verdicts):
    verdicts.record("mounts", len(node.probe("storage_mounts", {"paths": ["/proc"]})), "entries")
'''


def test_probe_document_not_written_is_an_error_naming_the_path(tmp_path):
    """fs1's probes/<host> folder is replaced by a symlink mid-run. Before: fs1's later document was not written,
    nothing said so and the run exited 0. Now: fs1's test_3_second is an ERROR (cause class tool) naming the file
    and why; nothing is written through the symlink; fs2 is untouched; the run exits 1."""
    nodes = start_nodes_with_tmp(tmp_path, ("127.0.44.2", "127.0.44.3"), "fs")
    try:
        nodes[0].kh = write_known_hosts(tmp_path / "kh", nodes)  # type: ignore[attr-defined]
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        rep = tmp_path / "rep-symlink"  # where _run puts it
        res, rep = _run(tmp_path, nodes[0], "symlink", suite=SYMLINK_SUITE, nodes=nodes,
                        env={"E2E_REPORTS": str(rep), "E2E_ELSEWHERE": str(elsewhere)})
        out = res.stdout + res.stderr
        assert res.returncode == 1, out[-3000:]
        assert list(elsewhere.iterdir()) == []
        records = [json.loads(ln) for ln in (rep / "results.jsonl").read_text().splitlines()]
        by = {(r["host"], r["nodeid"].split("::")[-1].split("[")[0]): r for r in records}
        bad = by[("fs1", "test_3_second")]
        link = rep / "probes" / "fs1"
        said = (f"fs1: storage_mounts: raw document not saved: {link}/storage_mounts-",
                f".json: {link} is a symbolic link (to {elsewhere}), not followed")
        assert bad["outcome"] == "error" and all(x in bad["message"] for x in said), bad
        assert [(c["class"], sorted(c["evidence"])) for c in bad["causes"]] == [("tool", ["path", "why"])], bad
        assert all(r["outcome"] == "passed" for k, r in by.items() if k != ("fs1", "test_3_second")), records
        case = next(c for c in junit(rep / "junit-other.xml") if c["name"] == "test_3_second[fs1]")
        assert case["outcome"] == "error" and all(x in case["message"] for x in said), case
        assert len(list((rep / "probes" / "fs2").glob("storage_mounts-*.json"))) == 2
        assert len(list((rep / "probes" / "fs1.moved").glob("storage_mounts-*.json"))) == 1
    finally:
        for n in nodes:
            n.stop()


def test_keep_probe_says_why(tmp_path):
    """keep_probe itself: a host folder that is a symlink, or a folder where nothing can be written (a full tmpfs
    as root; a read-only folder otherwise), raises DocumentNotSaved naming the file; no ``.tmp`` is left."""
    rep = tmp_path / "rep"
    (rep / "probes").mkdir(parents=True)
    (tmp_path / "else").mkdir()
    (rep / "probes" / "h1").symlink_to(tmp_path / "else")
    with pytest.raises(DocumentNotSaved) as ei:
        keep_probe(str(rep / "probes" / "h1"), "p", {}, {"x": 1})
    assert ei.value.path.startswith(str(rep / "probes" / "h1" / "p-")) and "symbolic link" in ei.value.why
    assert list((tmp_path / "else").iterdir()) == []
    full = tmp_path / "full"
    full.mkdir()
    if os.geteuid() == 0:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
    try:
        (full / "probes" / "h2").mkdir(parents=True)
        if os.geteuid() == 0:
            fill(full)
            why = "No space left on device"
        else:
            (full / "probes" / "h2").chmod(0o500)
            why = "Permission denied"
        with pytest.raises(DocumentNotSaved, match=why):
            keep_probe(str(full / "probes" / "h2"), "p", {}, {"x": "y" * 200_000})
        assert list((full / "probes" / "h2").iterdir()) == []
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", "-l", str(full)], check=False)
    kept = keep_probe(str(rep / "probes" / "h3"), "p", {"a": 1}, {"x": 1})
    assert json.loads(Path(kept).read_text())["doc"] == {"x": 1} and os.listdir(rep / "probes" / "h3") == [
        os.path.basename(kept)]
