"""The ``ssh-keygen -R`` advice for a changed host key names the file the old key is in."""
from __future__ import annotations

import subprocess
from pathlib import Path

import paramiko
import pytest

from gpuaccept.errors import HostKeyError
from gpuaccept.transport import get_transport
from gpuaccept.transport.ssh_hostkeys import KnownHosts
from process_helpers import host_for
from sshd import SSH_KEYGEN


def _other_key(tmp_path: Path, kind: str = "ed25519") -> str:
    other = tmp_path / f"other_{kind}"
    subprocess.run([SSH_KEYGEN, "-q", "-t", kind, "-N", "", "-f", str(other)], check=True)
    return " ".join(Path(str(other) + ".pub").read_text().split()[:2])


def _changed(t) -> str:
    with pytest.raises(HostKeyError) as ei:
        t.run("true")
    return str(ei.value)


def test_changed_key_advice_names_the_known_hosts_file(sshd_nodes, tmp_path, isolated_home):
    """~/.ssh/known_hosts holds an older entry of another type for the host; the changed key is in the
    --known-hosts file: the advice's -f names that file, not ~/.ssh/known_hosts."""
    node = sshd_nodes[0]
    name = f"[{node.address}]:{node.port}"
    (isolated_home / ".ssh").mkdir()
    (isolated_home / ".ssh" / "known_hosts").write_text(f"{name} {_other_key(tmp_path, 'rsa')}\n")
    kh = tmp_path / "kh"
    kh.write_text(f"{name} {_other_key(tmp_path)}\n")
    msg = _changed(get_transport(host_for(node), known_hosts=str(kh)))
    assert "CHANGED" in msg and f"with ssh-keygen -R '{name}' -f {kh} if the change is expected" in msg, msg
    assert ".ssh/known_hosts" not in msg, msg


def test_changed_key_advice_names_the_inventory_known_hosts_file(sshd_nodes, tmp_path, isolated_home):
    node = sshd_nodes[1]
    name = f"[{node.address}]:{node.port}"
    kh = tmp_path / "inv_kh"
    kh.write_text(f"{name} {_other_key(tmp_path)}\n")
    host = host_for(node, vars={"ansible_ssh_known_hosts_file": str(kh)})
    msg = _changed(get_transport(host))
    assert f"ssh-keygen -R '{name}' -f {kh} if" in msg, msg


def test_advice_always_names_a_file(tmp_path, monkeypatch):
    """No file holds an entry for the name (the key came from elsewhere): the file keys go to is named."""
    monkeypatch.setenv("HOME", str(tmp_path))
    kh = tmp_path / "given"
    known = KnownHosts("w1", [str(kh)])
    got = paramiko.RSAKey.generate(1024)
    expected = paramiko.RSAKey.generate(1024)
    msg = known.changed_key_message("[10.0.0.1]:22", "10.0.0.1", got, expected)
    assert msg.endswith(f"with ssh-keygen -R 10.0.0.1 -f {kh} if the change is expected"), msg
