"""probes/_watchdog.py: the node-side removal of a folder (the agent's own at its exit, stale ones at its start)."""
from __future__ import annotations

import os
import sys
import time

from gpuaccept.runner.ship import PROBE_DIR

sys.path.insert(0, PROBE_DIR)
import _watchdog  # noqa: E402 - the node-side files import each other by bare name


def _tree(root):
    """A folder like a shipped one after a run: files, a nested folder, an empty one, and a symlink to a folder and
    a file outside that must survive."""
    outside = root / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    d = root / "gpuaccept.0123456789ab"
    (d / "fio" / "jobs").mkdir(parents=True)
    (d / "empty").mkdir()
    (d / "gpu_inventory.py").write_text("x" * 100)
    (d / "fio" / "jobs" / "file0").write_bytes(b"\0" * 4096)
    (d / "link-to-outside").symlink_to(outside)
    (d / "fio" / "link-to-file").symlink_to(outside / "keep.txt")
    return d, outside


def test_remove_tree_removes_everything_and_follows_no_symlink(tmp_path):
    d, outside = _tree(tmp_path)
    _watchdog.remove_tree(str(d))
    assert not os.path.lexists(d)
    assert (outside / "keep.txt").read_text() == "keep"


def test_remove_tree_of_a_symlink_removes_the_link_not_its_target(tmp_path):
    d, outside = _tree(tmp_path)
    link = tmp_path / "gpuaccept.link"
    link.symlink_to(d)
    _watchdog.remove_tree(str(link))
    assert not os.path.lexists(link)
    assert (d / "gpu_inventory.py").read_text() == "x" * 100


def test_remove_tree_of_nothing_is_quiet(tmp_path):
    _watchdog.remove_tree(str(tmp_path / "gone"))
    assert os.listdir(tmp_path) == []


def test_sweep_stale_removes_old_unused_folders_only(tmp_path):
    old, _ = _tree(tmp_path)
    fresh = tmp_path / "gpuaccept.ba9876543210"
    fresh.mkdir()
    other = tmp_path / "not-ours"
    other.mkdir()
    past = time.time() - 10 * _watchdog.STALE_S
    os.utime(old, (past, past))
    os.utime(other, (past, past))
    assert _watchdog.sweep_stale(str(tmp_path)) == [old.name]
    assert sorted(os.listdir(tmp_path)) == sorted([fresh.name, other.name, "outside"])
