"""Shared fixtures for gpuaccept's own tests: real sshd servers on loopback (see tests/sshd.py)."""
from __future__ import annotations

import os
import signal
import tempfile

import pytest

from gpuaccept.transport import get_transport
from gpuaccept.transport.local import LocalTransport
from gpuaccept.transport.ssh import SSHTransport
from process_helpers import FakeHost, host_for
from sshd import SshNode, sshd_missing_reason, start_sshd, write_known_hosts

SSHD_ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")


def _hand_on_default_signals() -> None:
    """The runs these tests start must get SIGINT and SIGHUP at their defaults, as from an operator's terminal.
    A suite started in the background of a script (SIGINT ignored) or under ``nohup`` (SIGHUP ignored) would
    pass the ignore on to every child, and gpuaccept leaves a signal it was started with ignored ignored. A
    handler, unlike SIG_IGN, is reset to the default in a child at exec: this process stays as deaf as it was
    asked to be (a hang-up does nothing; Ctrl-C stops pytest as usual), its children hear both."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, lambda *_: None)


_hand_on_default_signals()


def _cache_bytecode_for_the_children() -> None:
    """Most tests start Python again (``python -m pytest`` runs, probes, node agents). With
    PYTHONDONTWRITEBYTECODE set (container images often set it) each start compiles gpuaccept's modules and
    pytest rewrites their asserts again: 0.45 s CPU of a 1.2 s start. The children cache bytecode under the
    temporary folder instead (PYTHONPYCACHEPREFIX: nothing written into the checkout or the venv)."""
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        os.environ.setdefault("PYTHONPYCACHEPREFIX", os.path.join(tempfile.gettempdir(),
                                                                  f"gpuaccept-tests-pycache-{os.getuid()}"))


_cache_bytecode_for_the_children()



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


@pytest.fixture(autouse=True)
def _no_hardware_action_without_hardware_cause(request):
    """After every test that had a temporary folder: each results.json the runs of that test wrote (every capture
    and variant the suite replays, every sshd and local run) keeps the rule that no drain-rma, reset-gpu or reboot
    stands without a hardware cause (project_helpers.hardware_claims_without_evidence)."""
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is None:
        return
    import json
    from project_helpers import hardware_claims_without_evidence
    for path in tmp.rglob("results.json"):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a test of a broken or partial file
        bad = hardware_claims_without_evidence(doc) if isinstance(doc, dict) else []
        assert not bad, f"{path}: a hardware action without hardware evidence: {bad[:5]}"


@pytest.fixture(autouse=True)
def _own_node_lock_dir(tmp_path_factory, monkeypatch):
    """The runs these tests start simulate many nodes on this one machine, several tests at once, and some tests
    leave a node's agent behind on purpose (a hung node, a killed controller): each test, and the runs it starts,
    holds its own node-lock folder (gpuaccept/probes/_nodelock.py; the controller hands the folder to the node's
    agent), so that no test reads another's agents as "held by gpuaccept run ..." (tests/test_node_lock.py sets its
    own where it tests the lock itself)."""
    monkeypatch.setenv("GPUACCEPT_NODE_LOCK_DIR", str(tmp_path_factory.mktemp("nodelock")))


@pytest.fixture(autouse=True)
def _shared_machine_host_watch(request, monkeypatch):
    """The runs these tests start share this machine's CPUs with the other test workers, which a node's host watch
    (gpuaccept/probes/_hostwatch.py) rightly reads as another workload: every run here is told so through the
    watch's documented bound (GPUACCEPT_HOST_BUSY_SHARE=1: CPU share not judged), except in the tests of the watch
    itself (tests/test_hostwatch.py), which load the host on purpose."""
    if request.module.__name__.rsplit(".", 1)[-1] != "test_hostwatch":
        monkeypatch.setenv("GPUACCEPT_HOST_BUSY_SHARE", "1")
    else:
        monkeypatch.delenv("GPUACCEPT_HOST_BUSY_SHARE", raising=False)
