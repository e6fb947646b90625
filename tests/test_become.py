"""``ansible_become``: every command on the host runs through ``sudo -n -u USER`` (found in the fourth new-user
trial: the variable was silently ignored, so probes that need root ran as the login user). Real sshd on
127.0.7.x, real sudo, real probes; the login is root, so sudo never asks for a password and the probes run as
``nobody``, a user that exists everywhere.
"""
from __future__ import annotations

import os
import pwd
import shutil
import time

import pytest

from gpuaccept.errors import CommandTimeout
from gpuaccept.config.inventory import load_inventory
from gpuaccept.runner.host import HostRunner
from gpuaccept.transport import get_transport
from process_helpers import procs_with
from project_helpers import make_project, run_pytest
from sshd import start_sshd, write_known_hosts


def test_sudo_is_installed():
    """The tests below need sudo (.ci/run installs it): without it they would prove nothing."""
    assert shutil.which("sudo"), "sudo is not installed (apt-get install sudo)"


def test_become_runs_every_command_and_probe_as_that_user(tmp_path):
    """Commands, the shipped folder and the probes run as ansible_become_user; a timed-out command under sudo
    is killed with everything it started (the kill goes through sudo too); close() removes the folder."""
    node = start_sshd(tmp_path, address="127.0.7.10", name="b1")
    try:
        kh = write_known_hosts(tmp_path / "kh", [node])
        inv = tmp_path / "inv.ini"
        python = shutil.which("python3", path="/usr/bin:/bin")  # nobody cannot enter /root, where the venv may be
        inv.write_text(f"[gpu]\n{node.inventory_line(python=python)} ansible_become=yes ansible_become_user=nobody\n")
        r = HostRunner(load_inventory(str(inv)).hosts["b1"], lambda h: get_transport(h, known_hosts=kh),
                       probe_timeout=60)
        assert r.run("id -un").stdout.decode().strip() == "nobody"
        doc = r.probe("storage_mounts", {"paths": ["/tmp"]})
        assert doc["paths"][0]["path"] == "/tmp"
        folder = r._dir
        assert folder and os.stat(folder).st_uid == pwd.getpwnam("nobody").pw_uid
        marker = f"gpuaccept-become-{os.getpid()}"
        with pytest.raises(CommandTimeout):
            r.run(f"sleep 300 # {marker}", timeout=1)
        deadline = time.time() + 60
        while procs_with(marker) and time.time() < deadline:
            time.sleep(0.2)
        assert procs_with(marker) == []
        r.close()
        assert not os.path.exists(folder)
    finally:
        node.stop()


@pytest.mark.parametrize("line, needle", [
    ("ansible_become=yes ansible_become_method=su",
     "var ansible_become_method: 'su' is not supported: gpuaccept becomes another user with 'sudo -n' only"),
    ("ansible_become=yes ansible_become_password=hunter2",
     "var ansible_become_password: gpuaccept types no passwords: give the login user passwordless sudo"),
    ("ansible_user=ops ansible_ssh_pass=hunter2", "var ansible_ssh_pass: gpuaccept logs in with keys only"),
    ("ansible_become=maybe", "var ansible_become: expected a boolean (yes/no, true/false, 1/0), got 'maybe'"),
    ("ansible_connection=local ansible_become=true ansible_become_user=nobody",
     "var ansible_become: not with ansible_connection=local: the local host's probes run as the user running pytest"),
])
def test_become_that_cannot_work_is_refused_before_any_node(tmp_path, line, needle):
    """One line naming file:line, host and var; exit 4; no report folder."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"[gpu]\nb1 ansible_host=127.0.7.11 {line}\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "rep"))
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    err = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith(f"ERROR: {inv}:2: host b1 ") and needle in err[0], res.stderr
    assert "Traceback" not in res.stdout + res.stderr and not (tmp_path / "rep").exists()
