"""Reports are written only where the operator meant: the ``--reports`` folder is new or empty and
not the root or a system folder (gpuaccept.config.outputs), nothing under it is followed through a symlink the
run did not make (gpuaccept.runner.host.save_probe), and the first line of a run names where its reports and
its history database go. Real filesystem, real pytest runs on a local host."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaccept.config.outputs import check_output_file, check_report_folder
from gpuaccept.errors import ConfigError
from gpuaccept.reporting.folder import SPACE_BASE, SPACE_PER_TEST, space_needed, space_problem
from gpuaccept.runner.host import save_probe

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path,needle", [
    ("/", "is the root folder"), ("/etc/gpuaccept-run", "inside the system folder /etc"),
    ("/usr", "is the system folder /usr"), ("/tmp", "the shared folder /tmp itself"),
    ("/proc/self", "system folder /proc"), ("~", "itself"),
])
def test_system_folders_refused(path, needle):
    with pytest.raises(ConfigError) as e:
        check_report_folder(os.path.expanduser(path))
    assert needle in str(e.value) and str(e.value).startswith("--reports "), str(e.value)


def test_a_folder_is_new_or_empty(tmp_path):
    check_report_folder(str(tmp_path / "new" / "run1"))  # new, parents too
    (tmp_path / "empty").mkdir()
    check_report_folder(str(tmp_path / "empty"))
    (tmp_path / "disk" / "lost+found").mkdir(parents=True)  # a fresh filesystem's own entry
    check_report_folder(str(tmp_path / "disk"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match=r"is not empty \(holds notes.txt\)"):
        check_report_folder(str(tmp_path / "full"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is not a folder"):
        check_report_folder(str(tmp_path / "file"))


def test_a_symlink_in_the_folder_is_refused(tmp_path):
    (tmp_path / "rep").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "rep" / "probes")
    with pytest.raises(ConfigError) as e:
        check_report_folder(str(tmp_path / "rep"))
    assert f"holds a symlink probes -> {tmp_path / 'elsewhere'} that this run did not make" in str(e.value)
    # a folder named through a symlink of the operator's (the path itself) is followed: it is what they named
    os.symlink(tmp_path / "elsewhere", tmp_path / "named")
    check_report_folder(str(tmp_path / "named"))


def test_probe_documents_do_not_follow_a_symlink(tmp_path):
    """A ``probes`` or host entry that is a symlink made under the report folder during the run: the document
    is not kept (best effort, as on a full disk) and nothing is written where the link points."""
    rep, elsewhere = tmp_path / "rep", tmp_path / "elsewhere"
    rep.mkdir()
    elsewhere.mkdir()
    save_probe(str(rep / "probes" / "h1"), "gpu_inventory", {"a": 1}, {"gpus": []})
    assert [p.suffix for p in (rep / "probes" / "h1").iterdir()] == [".json"]
    os.symlink(elsewhere, rep / "probes" / "h2")
    save_probe(str(rep / "probes" / "h2"), "gpu_inventory", None, {"gpus": []})
    other = tmp_path / "rep2"
    other.mkdir()
    os.symlink(elsewhere, other / "probes")
    save_probe(str(other / "probes" / "h1"), "gpu_inventory", None, {"gpus": []})
    assert list(elsewhere.iterdir()) == []
    (rep / "probes" / "h3").mkdir()
    os.symlink(elsewhere / "doc.json", rep / "probes" / "h3" / "gpu_inventory-0.json.tmp")
    save_probe(str(rep / "probes" / "h3"), "gpu_inventory", {"x": 0}, {"gpus": []})
    assert list(elsewhere.iterdir()) == []


def _project(root: Path) -> Path:
    """A suite of one test in ``root`` (its own thresholds/: an option naming a file elsewhere would move
    pytest's rootdir, and the default history with it)."""
    for name in ("pytest.ini", "conftest.py"):
        (root / name).write_text((REPO / name).read_text())
    shutil.copytree(REPO / "thresholds", root / "thresholds")
    (root / "suites").mkdir()
    (root / "suites" / "test_x.py").write_text("def test_x(node):\n    assert node.run('true').rc == 0\n")
    inv = root / "inventory.ini"
    inv.write_text("[gpu]\nh1 ansible_connection=local\n")
    return inv


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "--progress", "off",
                           *args], cwd=root, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_plugin_refuses_root_and_a_symlinked_folder(tmp_path):
    inv = _project(tmp_path)
    res = _pytest(tmp_path, "--inventory", str(inv), "--reports=/", "--history", "none")
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("ERROR:")]
    assert res.returncode == 4 and len(err) == 1 and "--reports /: is the root folder" in err[0], res.stderr
    rep, elsewhere = tmp_path / "rep", tmp_path / "elsewhere"
    rep.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, rep / "probes")
    res = _pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "--history", "none")
    assert res.returncode == 4 and "holds a symlink probes" in res.stderr, res.stdout + res.stderr
    assert list(elsewhere.iterdir()) == [] and os.listdir(rep) == ["probes"]


def test_first_line_names_reports_and_history(tmp_path):
    inv = _project(tmp_path)
    rep = tmp_path / "rep"
    res = _pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep))
    assert res.returncode == 0, res.stdout + res.stderr
    default = tmp_path / "reports" / "history.sqlite"
    first = res.stdout.splitlines()[0]
    assert first == f"gpuaccept: reports in {rep}; history in {default} (the default; --history PATH or " \
                    "--history none to change)", res.stdout
    assert default.is_file() and (rep / "results.json").is_file()
    res = _pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "rep2"), "--history", "none")
    assert res.returncode == 0 and res.stdout.splitlines()[0].endswith("history in none (--history none)"), \
        res.stdout
    # a selection of no test writes no folder, so it names none
    res = _pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "rep3"), "-k", "no_such_test")
    assert res.returncode == 5 and "reports in" not in res.stdout and not (tmp_path / "rep3").exists(), res.stdout


def test_space_needed_grows_with_the_tests_and_is_judged_on_the_real_filesystem(tmp_path):
    """On a 2 MiB tmpfs a run of 10 tests fits (1 MiB + 10 x 16 KiB) and one of 100 (2.6 MiB) does not; the
    refusal names free and needed space in MiB."""
    assert space_needed(0) == SPACE_BASE and space_needed(100) - space_needed(99) == SPACE_PER_TEST
    mnt = tmp_path / "m"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        assert space_problem(str(mnt), 10) is None
        why = space_problem(str(mnt), 100)
        assert why is not None and why.startswith("2.0 MiB free on its filesystem") and "needs 2.6 MiB" in why, why
        assert space_problem(str(mnt / "gone"), 10 ** 9) is None  # cannot be asked: the writes will say
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_output_files_outside_system_folders_and_regular_only(tmp_path):
    """--history and --prometheus-textfile name a file the run writes (renames over, as root): never one in the
    root or a system folder, never a device, FIFO or folder, and not through a symlink to one."""
    fifo, link = tmp_path / "fifo", tmp_path / "link"
    os.mkfifo(fifo)
    os.symlink("/etc/passwd", link)
    for path, needle in ((str(tmp_path), "is a folder"), (str(fifo), "is a FIFO"), ("/dev/null", "system folder /dev"),
                         ("/etc/h.sqlite", "lies in the system folder /etc"), ("/h.prom", "lies in the root folder"),
                         (str(link), "lies in the system folder /etc (/etc/passwd)")):
        with pytest.raises(ConfigError) as e:
            check_output_file(path, "--history")
        assert str(e.value).startswith(f"--history {path}: ") and needle in str(e.value), str(e.value)
    check_output_file(str(tmp_path / "new.sqlite"), "--history")  # new: made by the run
    (tmp_path / "old.prom").write_text("")
    check_output_file(str(tmp_path / "old.prom"), "--prometheus-textfile")


def test_runs_and_merges_refuse_system_places_before_writing(tmp_path):
    """The run (--history, --prometheus-textfile) and the merge (--into, --history): exit 4, one line, nothing
    written there."""
    inv = _project(tmp_path)
    res = _pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "r1"), "--history", "/etc/gpuaccept.sqlite")
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("ERROR:")]
    assert res.returncode == 4 and len(err) == 1 and "--history /etc/gpuaccept.sqlite: lies in the system folder /etc" in err[0], res.stderr
    assert not os.path.exists("/etc/gpuaccept.sqlite") and not (tmp_path / "r1").exists()
    res = _pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "r2"), "--history", "none",
                  "--prometheus-textfile", "/dev/null")
    assert res.returncode == 4 and "--prometheus-textfile /dev/null: lies in the system folder /dev" in res.stderr, res.stderr
    (tmp_path / "run").mkdir()
    for args, needle in ((["--into", "/usr/merged"], "--into /usr/merged: is inside the system folder /usr"),
                         (["--into", str(tmp_path / "m"), "--history", "/etc/h.sqlite"], "--history /etc/h.sqlite: lies in")):
        res = subprocess.run([sys.executable, "-m", "gpuaccept.scaleout.merge", str(tmp_path / "run"), *args],
                             capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert res.returncode == 4 and needle in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not os.path.exists("/usr/merged") and not (tmp_path / "m").exists()
