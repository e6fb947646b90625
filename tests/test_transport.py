"""Transport tests against real subprocesses and real sshd servers (tests/sshd.py); no mocks."""
from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpuaccept.errors import AuthError, CommandTimeout, HostKeyError, HostUnreachable
from gpuaccept.transport import CommandResult, get_transport
from gpuaccept.transport.local import LocalTransport
from gpuaccept.transport.ssh import KILL_BUDGET_S, SSHTransport, fingerprint
from sshd import SSH_KEYGEN, SshNode, free_port, start_sshd, write_known_hosts

MiB = 1024 * 1024


@dataclass
class FakeHost:
    """Duck-typed stand-in for gpuaccept.inventory.Host (the fields transports read)."""

    name: str
    address: str = "127.0.0.1"
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    connection: str = "ssh"
    python: str = sys.executable
    vars: dict = field(default_factory=dict)
    groups: list = field(default_factory=list)


def host_for(node: SshNode, **kw) -> FakeHost:
    args = dict(name=node.name, address=node.address, port=node.port, user="root", key_file=node.key_file)
    args.update(kw)
    return FakeHost(**args)


def marker() -> str:
    """A unique sleep duration, e.g. ``1000.482913``: greppable in /proc/*/cmdline."""
    return f"1000.{random.randrange(10**5, 10**6)}"


def live_pids(mark: str) -> list[int]:
    """Non-zombie processes whose command line contains ``mark``."""
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if mark.encode() in cmd and stat.rsplit(")", 1)[1].split()[0] != "Z":
            out.append(int(entry))
    return out


def assert_gone(mark: str, within: float = 3.0) -> None:
    end = time.monotonic() + within
    while live_pids(mark) and time.monotonic() < end:
        time.sleep(0.05)
    left = live_pids(mark)
    for p in left:  # do not leak them into later tests
        try:
            os.kill(p, 9)
        except ProcessLookupError:
            pass
    assert not left, f"processes left behind: {left}"


def wait_started(mark: str, within: float = 5.0) -> None:
    end = time.monotonic() + within
    while not live_pids(mark):
        assert time.monotonic() < end, f"{mark} never started"
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """~/.ssh/known_hosts and ssh-agent of the real user must not influence (or be written by) tests."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home


@pytest.fixture(params=["local", "ssh"])
def transport(request, sshd_nodes, known_hosts):
    if request.param == "local":
        t = get_transport(FakeHost(name="ctl", address="localhost", connection="local"))
        assert isinstance(t, LocalTransport)
    else:
        t = get_transport(host_for(sshd_nodes[0]), known_hosts=known_hosts)
        assert isinstance(t, SSHTransport)
    yield t
    t.close()


# ---------------------------------------------------------------- both backends


def test_exit_codes_and_streams(transport):
    r = transport.run("echo out; echo err >&2; exit 3")
    assert isinstance(r, CommandResult)
    assert (r.rc, r.stdout, r.stderr) == (3, b"out\n", b"err\n")
    assert transport.run("true").rc == 0
    assert transport.run("false").rc == 1
    assert transport.run("exit 255").rc == 255
    assert transport.run("no-such-command-gpuaccept 2>/dev/null").rc == 127
    assert transport.run("printf '%s' \"$1\" \"$0\"").stdout in (b"sh", b"/bin/sh")
    r = transport.run("echo 'quotes \" and $HOME' \"$HOME\" `echo x`")
    assert r.stdout.startswith(b"quotes \" and $HOME /") and r.stdout.endswith(b" x\n")
    assert r.duration_s >= 0


def test_stdin_delivered(transport):
    data = os.urandom(3 * MiB + 17)
    r = transport.run("cat", stdin=data, timeout=30)
    assert r.rc == 0 and hashlib.sha256(r.stdout).digest() == hashlib.sha256(data).digest()
    assert transport.run("wc -c", stdin=b"abc").stdout.strip() == b"3"
    assert transport.run("cat").stdout == b""  # empty stdin is EOF, not a hang
    # a command that ignores its stdin does not block the run
    assert transport.run("echo hi", stdin=os.urandom(4 * MiB), timeout=30).stdout == b"hi\n"


def test_4mib_stdout_and_stderr_together(transport):
    data = os.urandom(4 * MiB)
    r = transport.run("tee /dev/stderr", stdin=data, timeout=30)
    want = hashlib.sha256(data).hexdigest()
    assert r.rc == 0
    assert hashlib.sha256(r.stdout).hexdigest() == want
    assert hashlib.sha256(r.stderr).hexdigest() == want
    # all of stderr before any stdout: the reader must not wait on stdout alone
    script = "import sys; sys.stderr.buffer.write(b'e' * (4 << 20)); sys.stderr.flush(); sys.stdout.buffer.write(b'o' * (4 << 20))"
    r = transport.run(f"{sys.executable} -c \"{script}\"", timeout=30)
    assert (r.rc, r.stdout, r.stderr) == (0, b"o" * (4 * MiB), b"e" * (4 * MiB))


def test_timeout_kills_group(transport):
    m = marker()
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout) as ei:
        transport.run(f"echo started; sleep {m}", timeout=1)
    elapsed = time.monotonic() - t0
    assert elapsed < 1 + 3, elapsed
    assert str(ei.value).startswith(f"{transport.host.name}: command timed out after 1s: echo started; sleep")
    assert ei.value.stdout == b"started\n"
    assert_gone(m)
    assert transport.run("echo again").stdout == b"again\n"  # usable afterwards


def test_timeout_kills_term_ignoring_command_and_background_children(transport):
    m1, m2, m3 = marker(), marker(), marker()
    cmd = f"trap '' TERM; sleep {m1} & sleep {m2} >/dev/null 2>&1 & sleep {m3}; echo never"
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout):
        transport.run(cmd, timeout=1)
    elapsed = time.monotonic() - t0
    assert elapsed < 1 + 2 + 3, elapsed  # timeout + TERM grace + slack
    for m in (m1, m2, m3):
        assert_gone(m)


# ---------------------------------------------------------------- ssh only: host keys


def test_unknown_host_key_refused(sshd_nodes, tmp_path):
    node = sshd_nodes[1]
    kh = tmp_path / "kh"
    kh.write_text("")
    t = SSHTransport(host_for(node), known_hosts=str(kh))
    with pytest.raises(HostKeyError) as ei:
        t.run("true")
    msg = str(ei.value)
    fp = subprocess.run([SSH_KEYGEN, "-lf", node.host_key + ".pub"], capture_output=True, text=True).stdout.split()[1]
    assert msg.startswith(f"{node.name}: unknown host key for [{node.address}]:{node.port} (ssh-ed25519 {fp})")
    assert "--accept-new-host-keys" in msg and "\n" not in msg
    assert kh.read_text() == ""


def test_accept_new_host_key_records_it(sshd_nodes, tmp_path, isolated_home):
    node = sshd_nodes[1]
    kh = tmp_path / "sub" / "known_hosts"  # directory does not exist yet
    t = get_transport(host_for(node), known_hosts=str(kh), accept_new_host_keys=True)
    assert t.run("echo ok").stdout == b"ok\n"
    t.close()
    assert kh.read_text() == node.known_hosts_line + "\n"
    assert not (isolated_home / ".ssh" / "known_hosts").exists()
    # now trusted without accept_new, and not appended twice
    t2 = get_transport(host_for(node), known_hosts=str(kh))
    assert t2.run("echo ok").stdout == b"ok\n"
    t2.close()
    t3 = get_transport(host_for(node), known_hosts=str(kh), accept_new_host_keys=True)
    t3.run("true")
    t3.close()
    assert kh.read_text().count("\n") == 1


def test_accept_new_without_file_goes_to_user_known_hosts(sshd_nodes, isolated_home):
    node = sshd_nodes[2]
    t = get_transport(host_for(node), accept_new_host_keys=True)
    assert t.run("true").rc == 0
    t.close()
    assert (isolated_home / ".ssh" / "known_hosts").read_text() == node.known_hosts_line + "\n"


def test_known_hosts_from_inventory_var(sshd_nodes, known_hosts):
    host = host_for(sshd_nodes[0], vars={"ansible_ssh_known_hosts_file": known_hosts})
    t = get_transport(host)
    assert t.run("true").rc == 0
    t.close()


def test_changed_host_key_refused_even_with_accept_new(sshd_nodes, tmp_path):
    node = sshd_nodes[1]
    other = tmp_path / "other_key"
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong = f"[{node.address}]:{node.port} " + " ".join(Path(str(other) + ".pub").read_text().split()[:2])
    kh = tmp_path / "kh"
    kh.write_text(wrong + "\n")
    t = get_transport(host_for(node), known_hosts=str(kh), accept_new_host_keys=True)
    with pytest.raises(HostKeyError) as ei:
        t.run("true")
    msg = str(ei.value)
    assert f"host key for [{node.address}]:{node.port} CHANGED" in msg
    assert "man-in-the-middle" in msg and "ssh-keygen -R" in msg and str(kh) in msg
    assert kh.read_text() == wrong + "\n"


def test_known_hosts_hashed_and_odd_lines(sshd_nodes, tmp_path):
    node = sshd_nodes[2]
    kh = tmp_path / "kh"
    ca = " ".join(Path(node.key_file + ".pub").read_text().split()[:2])
    kh.write_text(node.known_hosts_line + "\n")
    subprocess.run([SSH_KEYGEN, "-H", "-f", str(kh)], check=True, capture_output=True)
    hashed = kh.read_text()
    assert hashed.startswith("|1|") and node.address not in hashed
    kh.write_text(f"@cert-authority *.example.org {ca}\nnot a valid line\n# comment\n\n{hashed}")
    t = get_transport(host_for(node), known_hosts=str(kh))
    assert t.run("true").rc == 0
    t.close()


def test_revoked_host_key_refused(sshd_nodes, tmp_path):
    node = sshd_nodes[2]
    kh = tmp_path / "kh"
    kh.write_text(f"{node.known_hosts_line}\n@revoked * {node.known_hosts_line.split(' ', 1)[1]}\n")
    with pytest.raises(HostKeyError, match=f"{node.name}: host key for .* is marked @revoked in {kh}:2"):
        get_transport(host_for(node), known_hosts=str(kh), accept_new_host_keys=True).run("true")


# ---------------------------------------------------------------- ssh only: auth and reachability


def test_bad_key_files(sshd_nodes, known_hosts, tmp_path):
    node = sshd_nodes[0]
    missing = str(tmp_path / "nope")
    with pytest.raises(AuthError, match=f"cannot read key file {missing}"):
        get_transport(host_for(node, key_file=missing), known_hosts=known_hosts).run("true")
    garbage = tmp_path / "garbage"
    garbage.write_text("not a key\n")
    with pytest.raises(AuthError, match=str(garbage)):
        get_transport(host_for(node, key_file=str(garbage)), known_hosts=known_hosts).run("true")
    stranger = tmp_path / "stranger"
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    with pytest.raises(AuthError, match=f"{node.name}: authentication as root failed with key file {stranger}"):
        get_transport(host_for(node, key_file=str(stranger)), known_hosts=known_hosts).run("true")
    locked = tmp_path / "locked"
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "secret", "-f", str(locked)], check=True)
    with pytest.raises(AuthError, match=f"key file {locked} \\(passphrase-protected"):
        get_transport(host_for(node, key_file=str(locked)), known_hosts=known_hosts).run("true")


def test_connection_refused():
    port = free_port("127.0.0.9")
    t = get_transport(FakeHost(name="ghost", address="127.0.0.9", port=port, user="root"), connect_timeout=3)
    t0 = time.monotonic()
    with pytest.raises(HostUnreachable, match=f"ghost: cannot connect to \\[127.0.0.9\\]:{port}: .*refused"):
        t.run("true")
    assert time.monotonic() - t0 < 2


def test_dns_failure():
    t = get_transport(FakeHost(name="nx", address="no-such-host.invalid", user="root"), connect_timeout=3)
    with pytest.raises(HostUnreachable, match="nx: "):
        t.run("true")


def test_connection_reused_across_runs(sshd_nodes, known_hosts):
    t = get_transport(host_for(sshd_nodes[0]), known_hosts=known_hosts)
    seen = {t.run("echo $SSH_CONNECTION").stdout for _ in range(20)}
    assert len(seen) == 1, seen
    t.close()
    assert t.run("echo $SSH_CONNECTION").stdout not in seen  # close() then run(): a new connection
    t.close()


def test_sshd_killed_between_runs(tmp_path):
    node = start_sshd(tmp_path, address="127.0.0.5")
    try:
        kh = write_known_hosts(tmp_path / "kh", [node])
        t = get_transport(host_for(node), known_hosts=kh, connect_timeout=3)
        assert t.run("echo up").stdout == b"up\n"
        node.stop()
        t0 = time.monotonic()
        with pytest.raises(HostUnreachable, match=f"{node.name}: "):
            t.run("echo up")
        assert time.monotonic() - t0 < 2
        with pytest.raises(HostUnreachable):  # and again: no hang, no retry loop
            t.run("echo up")
        t.close()
    finally:
        node.stop()


def test_connection_lost_during_command(tmp_path):
    node = start_sshd(tmp_path, address="127.0.0.6")
    m = marker()
    try:
        kh = write_known_hosts(tmp_path / "kh", [node])
        t = get_transport(host_for(node), known_hosts=kh)
        threading.Timer(0.5, lambda: (wait_started(m), node.stop())).start()
        t0 = time.monotonic()
        with pytest.raises(HostUnreachable, match="connection lost during command"):
            t.run(f"sleep {m}", timeout=30)
        assert time.monotonic() - t0 < 3
    finally:
        node.stop()
        assert_gone(m)


def test_hung_remote_still_bounded(tmp_path):
    node = start_sshd(tmp_path, address="127.0.0.7")
    m = marker()
    try:
        kh = write_known_hosts(tmp_path / "kh", [node])
        t = get_transport(host_for(node), known_hosts=kh, connect_timeout=2)
        assert t.run("true").rc == 0
        # freeze once the command runs and its pgid marker has reached us
        threading.Thread(target=lambda: (wait_started(m), time.sleep(0.5), node.freeze()), daemon=True).start()
        t0 = time.monotonic()
        with pytest.raises((CommandTimeout, HostUnreachable)) as ei:
            t.run(f"sleep {m}", timeout=2)
        assert time.monotonic() - t0 < 2 + KILL_BUDGET_S + 2
        assert "could not confirm the remote processes were killed" in str(ei.value)
        # still frozen: the next run reconnects, gets no SSH banner, fails within connect_timeout
        t0 = time.monotonic()
        with pytest.raises(HostUnreachable, match=f"{node.name}: "):
            t.run("true")
        assert time.monotonic() - t0 < 2 + 2
        t.close()
    finally:
        node.thaw()
        node.stop()
        for p in live_pids(m):  # the host never answered, so nobody could kill it: clean up here
            os.kill(p, 9)


def test_fingerprint_matches_ssh_keygen(sshd_nodes):
    import paramiko

    node = sshd_nodes[0]
    key = paramiko.PKey.from_path(node.host_key)
    want = subprocess.run([SSH_KEYGEN, "-lf", node.host_key + ".pub"], capture_output=True, text=True).stdout.split()[1]
    assert fingerprint(key) == want
