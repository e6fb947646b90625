"""The connection files and host keys of a run, checked before any node is touched: a public key or a folder
as the private key, a missing known_hosts file, SSH args that cannot be split (exit 4, one line, and no
connection on a real sshd that logs every one); the same node reached when its files are right; a first run
against an unknown host key; ``--collect-only`` connecting nowhere."""
from __future__ import annotations

import re

import pytest

from project_helpers import make_project, run_pytest


@pytest.fixture(scope="module")
def watched_node(tmp_path_factory):
    """An sshd that logs every connection (LogLevel VERBOSE: 'Connection from ...')."""
    from sshd import start_sshd, write_known_hosts
    base = tmp_path_factory.mktemp("watched")
    import time
    node = start_sshd(base, address="127.0.0.71", name="w1", log_level="VERBOSE")
    kh = write_known_hosts(base / "known_hosts", [node])
    deadline = time.monotonic() + 60  # the rig's own readiness probe connects once: let its lines be written
    while "Connection closed" not in node.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "Connection closed" in node.log(), node.log()[-1000:]  # else later counts would include the probe's
    yield node, kh
    node.stop()


def _connections(node) -> int:
    return node.log().count("Connection from")


@pytest.mark.parametrize("case", ["public key", "key folder", "known-hosts missing", "known_hosts var missing",
                                  "unsplittable ssh args", "bad jump port"])
def test_connection_files_are_checked_before_any_node(tmp_path, watched_node, case):
    node, kh = watched_node
    key = node.key_file
    args, extra, needle = [], "", ""
    if case == "public key":
        key, needle = key + ".pub", f"ansible_ssh_private_key_file {key}.pub is a public key (an OpenSSH .pub line)"
    elif case == "key folder":
        key, needle = str(tmp_path), f"ansible_ssh_private_key_file {tmp_path} is a folder, not a key file"
    elif case == "known-hosts missing":
        args = ["--known-hosts", str(tmp_path / "nope")]
        needle = f"--known-hosts {tmp_path / 'nope'}: does not exist; to record host keys there on first use"
    elif case == "known_hosts var missing":
        extra, needle = f" ansible_ssh_known_hosts_file={tmp_path / 'nope'}", "ansible_ssh_known_hosts_file"
    elif case == "unsplittable ssh args":
        extra = " ansible_ssh_common_args=\"-o ProxyCommand='ssh -W %h:%p bastion\""
        needle = "var ansible_ssh_common_args: cannot split"
    else:
        extra = " ansible_ssh_common_args='-J ops@bastion:22x'"
        needle = "var ansible_ssh_common_args: ProxyJump 'ops@bastion:22x'"
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(node.inventory_line().replace(node.key_file, key) + extra + "\n")
    before = _connections(node)
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", kh, *args, "-m", "health",
                     "--reports", str(tmp_path / "rep"))
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    err = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and needle in err[0], res.stderr
    if not args:
        assert err[0].startswith(f"ERROR: {inv}:1: host w1"), err
    assert "Traceback" not in res.stdout + res.stderr and not (tmp_path / "rep").exists()
    assert _connections(node) == before, node.log()[-1000:]


def test_the_same_node_is_reached_when_its_files_are_right(tmp_path, watched_node):
    """The control for the test above: the same inventory with the right files connects (exit 0)."""
    node, kh = watched_node
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(node.inventory_line() + " ansible_ssh_common_args='-o StrictHostKeyChecking=no'\n")
    before = _connections(node)
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", kh, "-m", "health", "-k", "gpu_inventory",
                     "--reports", str(tmp_path / "rep"))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert _connections(node) > before


def test_known_hosts_option_naming_the_inventory_does_not_get_keys_written_into_it(tmp_path, watched_node):
    """``--known-hosts inventory.ini --accept-new-host-keys`` (two paths swapped): before, the run passed and the
    node's host key line was appended to the inventory, which the next run could no longer read."""
    node, _ = watched_node
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(node.inventory_line() + "\n")
    before = inv.read_text()
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", str(inv), "--accept-new-host-keys",
                     "-m", "health", "-k", "gpu_inventory", "--reports", str(tmp_path / "rep"))
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    assert f"ERROR: --known-hosts {inv}: is not a known_hosts file (line 1: 'w1 ansible_host=" in res.stderr, res.stderr
    assert inv.read_text() == before


def test_a_first_run_against_an_unknown_host_key_reads_once_in_the_summary(tmp_path, watched_node):
    """The first thing an operator meets on a new fleet: the host key not yet trusted. summary.md's host line
    repeated the same sentence for three tests, then "+9 more"; now the sentence once, with the test count."""
    node, _ = watched_node
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(node.inventory_line() + "\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "-m", "health", "--reports", str(rep), "--history", "none")
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    line = next(ln for ln in (rep / "summary.md").read_text().splitlines() if ln.startswith("- **ERROR** `w1`"))
    assert re.fullmatch(r"- \*\*ERROR\*\* `w1`: test_gpu_inventory and \d+ more tests: w1: unknown host key for "
                        r"\[127\.0\.0\.71\]:\d+ \(ssh-ed25519 SHA256:\S+\); to trust it on first use rerun with "
                        r"--accept-new-host-keys, or add it to known_hosts → \*\*fix-config\*\* \[connectivity\] \(the host's SSH key "
                        r"is unknown or changed; known_hosts; `check the host's key, then add it to known_hosts "
                        r"\(ssh-keyscan\)`\)", line), line


def test_collect_only_touches_no_node(tmp_path, watched_node):
    """The fan-out starts when the tests are known; --collect-only must not connect anywhere: the node's sshd,
    which logs every connection, logs none."""
    node, kh = watched_node
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(node.inventory_line() + "\n")
    before = _connections(node)
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", kh, "--collect-only", "-q")
    assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-1500:]
    assert "w1" in res.stdout, res.stdout[-1500:]
    assert _connections(node) == before, node.log()[-1000:]
