"""Shared fixtures for gpuaccept's own tests: real sshd servers on loopback (see tests/sshd.py)."""
from __future__ import annotations

import pytest

from gpuaccept.transport import get_transport
from gpuaccept.transport.local import LocalTransport
from gpuaccept.transport.ssh import SSHTransport
from process_helpers import FakeHost, host_for
from sshd import SshNode, sshd_missing_reason, start_sshd, write_known_hosts

SSHD_ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")


@pytest.fixture(scope="session")
def sshd_nodes(tmp_path_factory) -> list[SshNode]:
    """Three sshd nodes (127.0.0.2, .3, .4; free ports), root login with ``node.key_file``.
    Shared by the whole session: do not stop or freeze them (start your own with start_sshd)."""
    why = sshd_missing_reason()
    if why:
        pytest.fail(why, pytrace=False)
    base = tmp_path_factory.mktemp("sshd")
    nodes: list[SshNode] = []
    try:
        for i, addr in enumerate(SSHD_ADDRESSES, start=1):
            nodes.append(start_sshd(base, address=addr, name=f"node{i}"))
        yield nodes
    finally:
        for n in nodes:
            n.stop()


@pytest.fixture(scope="session")
def known_hosts(sshd_nodes, tmp_path_factory) -> str:
    """Path of a known_hosts file trusting every node of ``sshd_nodes``."""
    return write_known_hosts(tmp_path_factory.mktemp("known_hosts") / "known_hosts", sshd_nodes)


@pytest.fixture
def isolated_home(tmp_path, monkeypatch):
    """A fresh $HOME and no ssh-agent: the real user's ~/.ssh (known_hosts, agent keys) neither influences nor is
    written by the test. Returns the new home folder."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home


@pytest.fixture(params=["local", "ssh"])
def transport(request, sshd_nodes, known_hosts):
    """Each test once over the local connection and once over real sshd (the first of ``sshd_nodes``)."""
    if request.param == "local":
        t = get_transport(FakeHost(name="ctl", address="localhost", connection="local"))
        assert isinstance(t, LocalTransport)
    else:
        t = get_transport(host_for(sshd_nodes[0]), known_hosts=known_hosts)
        assert isinstance(t, SSHTransport)
    yield t
    t.close()
