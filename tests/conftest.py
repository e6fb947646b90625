"""Shared fixtures for gpuaccept's own tests: real sshd servers on loopback (see tests/sshd.py)."""
from __future__ import annotations

import pytest

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
