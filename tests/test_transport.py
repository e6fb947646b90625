"""Transport tests against real subprocesses and real sshd servers (tests/sshd.py); no mocks."""
from __future__ import annotations

import hashlib
import shutil
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuaccept.errors import AuthError, CommandTimeout, HostKeyError, HostUnreachable, SshRefused
from gpuaccept.judging.actions import for_cause
from gpuaccept.transport import CommandResult, get_transport
from gpuaccept.transport.ssh import KILL_BUDGET_S, SSHTransport, fingerprint
from process_helpers import LOADED_SLACK_S, WATCHDOG, FakeHost, assert_gone, host_for, live_pids, marker, wait_started
from sshd import SSH_KEYGEN, free_port, start_sshd, write_known_hosts

MiB = 1024 * 1024


pytestmark = pytest.mark.usefixtures("isolated_home")


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
    assert elapsed < 1 + LOADED_SLACK_S, elapsed  # killed at its timeout, not left to sleep 1000 s
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
    assert elapsed < 1 + 2 + LOADED_SLACK_S, elapsed  # timeout + TERM grace + slack
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
    """A real refusal (nothing listens on the port): SshRefused, at once, with the address and port as evidence,
    and its action check-network naming the port (the host is up: sshd is down, elsewhere, or firewalled); a
    host that does not answer at all stays HostUnreachable (rerun)."""
    port = free_port("127.0.0.9")
    t = get_transport(FakeHost(name="ghost", address="127.0.0.9", port=port, user="root"), connect_timeout=60)
    t0 = time.monotonic()
    with pytest.raises(SshRefused, match=f"ghost: cannot connect to \\[127.0.0.9\\]:{port}: .*refused") as ei:
        t.run("true")
    assert time.monotonic() - t0 < LOADED_SLACK_S  # refused at once, not after the 60 s connect timeout
    cause = ei.value.cause
    assert (cause.cls, cause.kind, cause.host, cause.evidence) == ("connectivity", "ssh_refused", "ghost",
                                                                   {"address": "127.0.0.9", "port": port})
    act = for_cause(cause)
    assert act.action == "check-network" and f"refused SSH on port {port}" in act.reason, act
    assert f"nc -vz 127.0.0.9 {port}" in act.command, act
    assert for_cause(HostUnreachable("mute", "connect to [10.0.0.1]:22 timed out after 3s").cause).action == "rerun"


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
        t = get_transport(host_for(node), known_hosts=kh, connect_timeout=60)
        assert t.run("echo up").stdout == b"up\n"
        node.stop()
        t0 = time.monotonic()
        with pytest.raises(HostUnreachable, match=f"{node.name}: "):
            t.run("echo up")
        assert time.monotonic() - t0 < LOADED_SLACK_S  # at once, not after the 60 s connect timeout
        with pytest.raises(HostUnreachable):  # and again: no hang, no retry loop
            t.run("echo up")
        t.close()
    finally:
        node.stop()


def test_a_host_that_freezes_during_a_command_is_lost_at_the_keepalive_not_the_timeout(tmp_path):
    """The sshd and its session SIGSTOPped while a command runs (the TCP peer up, nothing answering): the server
    leaves the keepalive unanswered, and the run ends as a lost connection ("stopped answering") after the
    silence and the wait (1 s + 2 s here), not at the command's 120 s timeout. A command that is silent while
    the server answers is not cut (the first run: 4 s of silence)."""
    node = start_sshd(tmp_path, address="127.0.0.23")
    try:
        kh = write_known_hosts(tmp_path / "kh", [node])
        t = get_transport(host_for(node), known_hosts=kh, connect_timeout=3)
        t.server_alive.after_s, t.server_alive.wait_s = 1.0, 2.0
        assert t.run("sleep 4; echo quiet", timeout=60).stdout == b"quiet\n"
        node.freeze_when_running("sleep 117")
        t0 = time.monotonic()
        with pytest.raises(HostUnreachable, match="stopped answering: no reply to an SSH keepalive in 2 s") as ei:
            t.run("sleep 117", timeout=120)
        took = time.monotonic() - t0
        assert took < 3.0 + LOADED_SLACK_S + 3.0, took  # silence + wait (+ the freeze's start), not 120 s
        assert "sleep 117" in str(ei.value)
        t.close()
    finally:
        node.thaw()
        node.stop()



def test_connection_lost_during_command(tmp_path):
    node = start_sshd(tmp_path, address="127.0.0.6")
    m = marker()
    try:
        kh = write_known_hosts(tmp_path / "kh", [node])
        t = get_transport(host_for(node), known_hosts=kh)
        stopping: list[float] = []
        threading.Thread(target=lambda: (wait_started(m, comm="sleep"), stopping.append(time.monotonic()),
                                         node.stop()), daemon=True).start()
        with pytest.raises(HostUnreachable, match="connection lost during command"):
            t.run(f"sleep {m}", timeout=120)
        assert time.monotonic() - stopping[0] < LOADED_SLACK_S  # noticed at once, not at the 120 s timeout
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
        threading.Thread(target=lambda: (wait_started(m, comm="sleep"), time.sleep(0.5), node.freeze()), daemon=True).start()
        t0 = time.monotonic()
        with pytest.raises((CommandTimeout, HostUnreachable)) as ei:
            t.run(f"sleep {m}", timeout=2)
        assert time.monotonic() - t0 < 2 + KILL_BUDGET_S + LOADED_SLACK_S  # bounded: not the 1000 s sleep
        assert "could not confirm the remote processes were killed" in str(ei.value)
        # still frozen: the next run reconnects, gets no SSH banner, fails within connect_timeout
        t0 = time.monotonic()
        with pytest.raises(HostUnreachable, match=f"{node.name}: "):
            t.run("true")
        assert time.monotonic() - t0 < 2 + LOADED_SLACK_S  # the 2 s connect timeout, not a hang
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


# ---------------------------------------------------------------- interruption, watchdog, hardened servers

import json  # noqa: E402
import logging  # noqa: E402

from gpuaccept.errors import Interrupted  # noqa: E402
from gpuaccept.config.inventory import Host  # noqa: E402
from gpuaccept.runner.host import HostRunner  # noqa: E402
from gpuaccept.transport import cancel_all, reset_interruption, running  # noqa: E402
from gpuaccept.config.sshconfig import parse_jump, resolve, ssh_args_options  # noqa: E402

def sleeper(tmp_path: Path, m1: str, m2: str) -> Path:
    """A stand-in probe: starts a child ``sleep m2`` in its group, then sleeps ``m1`` itself."""
    p = tmp_path / "sleeper.py"
    p.write_text(f"import subprocess, time\nsubprocess.Popen(['sleep', '{m2}'])\ntime.sleep({m1})\n")
    return p


def test_cancel_all_kills_and_raises_interrupted(transport):
    """The interrupt handler's kill-all reaches a command in flight on either backend: its group dies and the
    waiting caller gets Interrupted naming the signal and the host; nothing new is refused by the transport."""
    m = marker()
    threading.Thread(target=lambda: (wait_started(m, comm="sleep"), cancel_all("SIGTERM")), daemon=True).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(Interrupted) as ei:
            transport.run(f"sleep {m}", timeout=60)
    finally:
        reset_interruption()
    assert time.monotonic() - t0 < 2 * LOADED_SLACK_S  # by the cancel, not the 60 s timeout
    assert str(ei.value).startswith(f"interrupted (SIGTERM) while running on {transport.host.name}: sleep")
    assert_gone(m)
    assert running() == []
    assert transport.run("echo again").stdout == b"again\n"


def test_every_command_is_logged(transport, caplog):
    caplog.set_level(logging.DEBUG, logger="gpuaccept.run")
    transport.run("echo logged; exit 3")
    rec = [r.getMessage() for r in caplog.records if r.name == "gpuaccept.run"]
    assert len(rec) == 1 and rec[0].startswith(f"RUN {transport.host.name} echo logged; exit 3 rc=3 ")
    assert rec[0].endswith("s")


def test_watchdog_kills_its_group_at_deadline(transport, tmp_path):
    """The node-side watchdog alone (the controller's timeout far away): at deadline + grace the probe and the
    child it started are killed, and the watchdog answers with a failure document."""
    m1, m2 = marker(), marker()
    probe = sleeper(tmp_path, m1, m2)
    t0 = time.monotonic()
    r = transport.run(f"exec {sys.executable} {WATCHDOG} --watch-stdin 1 0.5 {probe}", timeout=60, hold_stdin=True)
    assert time.monotonic() - t0 < 1.5 + 1.5 + LOADED_SLACK_S  # the watchdog's deadline, not the 60 s timeout
    doc = json.loads(r.stdout.decode().splitlines()[-1])
    assert r.rc == 1 and doc["failed"] and "past its deadline (1 s + 0.5 s grace)" in doc["msg"]
    assert b"__GPUACCEPT_PGID__" not in r.stderr  # the announced group was taken out of stderr
    assert_gone(m1)
    assert_gone(m2)


def test_watchdog_passes_the_probe_through(transport, tmp_path):
    p = tmp_path / "ok.py"
    p.write_text("import sys, json; print('log', file=sys.stderr); print(json.dumps({'ok': sys.stdin.read()}))\n")
    r = transport.run(f"exec {sys.executable} {WATCHDOG} --watch-stdin 30 5 {p}", timeout=60, hold_stdin=True)
    assert (r.rc, r.stdout, r.stderr) == (0, b'{"ok": ""}\n', b"log\n")  # the probe's stdin is /dev/null
    p.write_text("import sys; sys.exit(7)\n")
    assert transport.run(f"{sys.executable} {WATCHDOG} 30 5 {p}").rc == 7


def test_watchdog_runs_the_probe_as_its_own_python_would(transport, tmp_path):
    """The probe runs in the watchdog's forked child (one interpreter start), seeing what ``python probe.py ARGS``
    shows it: ``__main__``, an absolute ``__file__`` and ``sys.argv[0]``, its folder first on ``sys.path``, its
    own process group; an uncaught exception exits 1 with the traceback, ``sys.exit("text")`` 1 with the text.
    ``--exec`` runs a fresh interpreter whose command line is ``python probe.py ARGS`` (what ``pkill -f`` finds)."""
    (tmp_path / "_helper.py").write_text("VALUE = 'from the probe folder'\n")
    p = tmp_path / "shows.py"
    p.write_text(
        "import json, os, sys, _helper\n"
        "cmd = open(f'/proc/{os.getpid()}/cmdline', 'rb').read().split(b'\\0')\n"
        "print(json.dumps({'name': __name__, 'file': __file__, 'argv': sys.argv, 'path0': sys.path[0],\n"
        "                  'helper': _helper.VALUE, 'own_group': os.getpgrp() == os.getpid(),\n"
        "                  'cmd1': cmd[1].decode()}))\n")
    for flags, cmd1 in (("", str(WATCHDOG)), ("--exec", str(p))):
        r = transport.run(f"cd / && exec {sys.executable} {WATCHDOG} --watch-stdin {flags} 30 5 {p} '{{\"a\": 1}}'",
                          timeout=60, hold_stdin=True)
        doc = json.loads(r.stdout.decode().splitlines()[-1])
        assert r.rc == 0 and doc == {"name": "__main__", "file": str(p), "argv": [str(p), '{"a": 1}'],
                                     "path0": str(tmp_path), "helper": "from the probe folder", "own_group": True,
                                     "cmd1": cmd1}, (flags, doc)
    p.write_text("def f():\n    raise KeyError('boom')\nf()\n")
    r = transport.run(f"{sys.executable} {WATCHDOG} 30 5 {p}")
    assert r.rc == 1 and r.stderr.decode().strip().splitlines()[-1] == "KeyError: 'boom'"
    p.write_text("import sys\nsys.exit('probe says no')\n")
    r = transport.run(f"{sys.executable} {WATCHDOG} 30 5 {p}")
    assert r.rc == 1 and r.stderr.decode().strip().splitlines()[-1] == "probe says no"


def test_watchdog_kills_on_connection_loss(tmp_path, known_hosts):
    """The SSH connection drops (its sshd session process dies) while a watched probe runs: the watchdog reads
    EOF on the stdin the controller held and kills the probe's group; nothing is left."""
    node = start_sshd(tmp_path, address="127.0.0.13")
    m1, m2 = marker(), marker()
    probe = sleeper(tmp_path, m1, m2)
    try:
        kh = write_known_hosts(tmp_path / "kh", [node])
        t = get_transport(host_for(node), known_hosts=kh)
        threading.Thread(target=lambda: (wait_started(m2), [os.kill(p, 9) for p in node.session_processes()]),
                         daemon=True).start()
        with pytest.raises(HostUnreachable, match="connection lost during command") as ei:
            t.run(f"exec {sys.executable} {WATCHDOG} --watch-stdin 600 15 {probe}", timeout=60, hold_stdin=True)
        assert len(ei.value.pgids) == 2  # the wrapper's group and the probe's own, both announced
        assert_gone(m1)
        assert_gone(m2)
    finally:
        node.stop()


def test_maxsessions_1_timeout_still_kills(tmp_path):
    """A server allowing one session per connection refuses the kill channel: the kill goes through a fresh
    connection, the host is not reported as hung, and the next command runs."""
    node = start_sshd(tmp_path, address="127.0.0.14", extra_config=["MaxSessions 1"])
    m = marker()
    try:
        kh = write_known_hosts(tmp_path / "kh", [node])
        t = get_transport(host_for(node), known_hosts=kh)
        with pytest.raises(CommandTimeout) as ei:
            t.run(f"sleep {m}", timeout=1)
        assert "refused a second session" in str(ei.value) and "killed through a fresh connection" in str(ei.value)
        assert_gone(m)
        assert t.run("echo next").stdout == b"next\n"
        # the same through a HostRunner: a timeout, then the host answers (not "stopped answering")
        h = Host("hardened", node.address, node.port, "root", node.key_file, "ssh", sys.executable, {}, ("all",))
        n = HostRunner(h, lambda host: get_transport(host, known_hosts=kh), probe_timeout=1)
        with pytest.raises(CommandTimeout):
            n.run(f"sleep {m}")
        assert_gone(m)
        assert n.run("echo alive").stdout == b"alive\n"
        n.close()
    finally:
        node.stop()


def test_dropped_connection_retried_once(tmp_path):
    """The connection drops mid-command, the host still answers: the lost command's process group is killed
    by its pgid, and the command runs once more on a fresh connection."""
    node = start_sshd(tmp_path, address="127.0.0.15")
    m = marker()
    flag = tmp_path / "ran-once"
    try:
        kh = write_known_hosts(tmp_path / "kh", [node])
        h = Host("flaky", node.address, node.port, "root", node.key_file, "ssh", sys.executable, {}, ("all",))
        n = HostRunner(h, lambda host: get_transport(host, known_hosts=kh), probe_timeout=60)
        assert n.run("true").rc == 0
        threading.Thread(target=lambda: (wait_started(m, comm="sleep"), [os.kill(p, 9) for p in node.session_processes()]),
                         daemon=True).start()
        res = n.run(f"if [ -e {flag} ]; then echo second; else touch {flag}; sleep {m}; fi")
        assert res.stdout == b"second\n"
        assert_gone(m)  # without the kill by pgid it would sleep on (its session is gone, not it)
        n.close()
        # and when the reconnect fails, the host is written off
        n = HostRunner(h, lambda host: get_transport(host, known_hosts=kh, connect_timeout=3), probe_timeout=60)
        assert n.run("true").rc == 0
        threading.Thread(target=lambda: (wait_started(m, comm="sleep"), node.stop()), daemon=True).start()
        with pytest.raises(HostUnreachable, match="a fresh connection failed too"):
            n.run(f"sleep {m}")
        with pytest.raises(HostUnreachable, match="a fresh connection failed too"):
            n.run("true")  # sticky
    finally:
        node.stop()
        assert_gone(m)


def test_ship_obeys_probe_timeout(tmp_path):
    """A hung interpreter costs --probe-timeout when the probes are shipped, not a fixed minute."""
    hang = tmp_path / "python-hangs"
    hang.write_text("#!/bin/sh\nsleep 1000.123457\n")
    hang.chmod(0o755)
    h = Host("ctl", "localhost", 22, None, None, "local", str(hang), {"ansible_python_interpreter": str(hang)}, ("all",))
    n = HostRunner(h, get_transport, probe_timeout=2)
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout, match="timed out after 2s"):
        n.probe("gpu_inventory")
    assert time.monotonic() - t0 < 2 + LOADED_SLACK_S  # the 2 s --probe-timeout, not a fixed minute
    assert_gone("1000.123457")


# ---------------------------------------------------------------- ~/.ssh/config, ProxyJump


def test_ssh_args_options():
    assert ssh_args_options("-o ProxyJump=b1 -o ControlMaster=auto -J b2 -oUser=x") == [
        ("proxyjump", "b1"), ("proxyjump", "b2"), ("user", "x")]
    assert ssh_args_options('-o ProxyCommand="ssh -W %h:%p -q bastion"') == [("proxycommand", "ssh -W %h:%p -q bastion")]
    assert ssh_args_options("-o 'Port 2222'") == [("port", "2222")]
    assert parse_jump("u@b1:2200,[::1]:22,b3") == [("u", "b1", 2200), (None, "::1", 22), (None, "b3", None)]


def test_ssh_args_short_options_as_ssh_reads_them():
    """``-p``, ``-l``, ``-i``, ``-F`` and ``-J``, apart or joined to their value, in order; others (``-C``,
    ``-o ControlMaster``) have no paramiko meaning and are left out."""
    got = ssh_args_options("-C -i ~/k -o User=root -p 2222 -lops -p2200 -F /etc/ssh/alt -J b1 -oPort=9")
    assert got == [("identityfile", "~/k"), ("user", "root"), ("port", "2222"), ("user", "ops"), ("port", "2200"),
                   ("configfile", "/etc/ssh/alt"), ("proxyjump", "b1"), ("port", "9")]


def test_ssh_args_port_user_key_and_config_file_reach_the_target(tmp_path):
    """ssh keeps the first value it obtains: ``-p``/``-l``/``-i`` in the inventory's ssh args, before
    ~/.ssh/config; the inventory's own ansible_port and ansible_user still win; ``-F`` names the config file read
    in place of ~/.ssh/config."""
    alt = tmp_path / "alt"
    alt.write_text("Host *\n  HostName 10.0.0.9\n  Port 2200\n  User ops\n")
    h = FakeHost(name="n", address="n1", port=22, vars={"ansible_ssh_common_args": f"-p 2222 -l root -i /k -F {alt}"})
    t = resolve(h, str(tmp_path / "absent"))
    assert (t.hostname, t.port, t.user, t.key_files) == ("10.0.0.9", 2222, "root", ["/k"])
    pinned = FakeHost(name="n", address="n1", port=2022, user="admin", vars={
        "ansible_port": 2022, "ansible_user": "admin", "ansible_ssh_extra_args": "-p 2222 -l root"})
    assert (resolve(pinned, str(tmp_path / "absent")).port, resolve(pinned, str(tmp_path / "absent")).user) == (2022, "admin")


def test_ssh_config_resolution_inventory_wins(tmp_path):
    cfg = tmp_path / "config"
    cfg.write_text("Host gpu*\n  HostName 10.0.0.9\n  Port 2200\n  User ops\n  IdentityFile ~/k\n  ProxyJump bastion\n")
    plain = FakeHost(name="gpu01", address="gpu01", port=22, vars={})
    t = resolve(plain, str(cfg))
    assert (t.hostname, t.port, t.user, t.proxy_jump) == ("10.0.0.9", 2200, "ops", "bastion")
    assert t.key_files == [os.path.expanduser("~/k")]
    pinned = FakeHost(name="gpu01", address="gpu01", port=2222, user="root", key_file="/inv/key",
                      vars={"ansible_host": "gpu01", "ansible_port": 2222,
                            "ansible_ssh_common_args": "-o ProxyJump=other"})
    t = resolve(pinned, str(cfg))
    assert (t.hostname, t.port, t.user, t.key_files, t.proxy_jump) == ("gpu01", 2222, "root", ["/inv/key"], "other")
    cmd = FakeHost(name="n", address="n1", vars={"ansible_ssh_extra_args": "-o ProxyCommand='nc %h %p'"})
    assert resolve(cmd, str(tmp_path / "absent")).proxy_command == "nc n1 22"


def test_proxyjump_through_a_bastion(tmp_path, isolated_home):
    """A node reached only through a bastion, as ~/.ssh/config says (ProxyJump), the way Ansible reaches it:
    the bastion's sshd opens the tunnel (its log shows the direct-tcpip request), commands and the kill on
    timeout work through it, and with the bastion down the node is unreachable naming the jump host."""
    bastion = start_sshd(tmp_path / "b", address="127.0.0.16", log_level="DEBUG1")
    target = start_sshd(tmp_path / "t", address="127.0.0.17")
    m = marker()
    try:
        kh = write_known_hosts(tmp_path / "kh", [bastion, target])
        ssh = isolated_home / ".ssh"
        ssh.mkdir()
        (ssh / "config").write_text(
            f"Host gpu-behind\n  HostName {target.address}\n  Port {target.port}\n  User root\n"
            f"  IdentityFile {target.key_file}\n  ProxyJump root@{bastion.address}:{bastion.port}\n")
        host = FakeHost(name="gpu-behind", address="gpu-behind", port=22, user=None, key_file=None, vars={})
        t = get_transport(host, known_hosts=kh)
        assert t.run("echo through").stdout == b"through\n"
        assert f"target {target.address} port {target.port}" in bastion.log()
        with pytest.raises(CommandTimeout):
            t.run(f"sleep {m}", timeout=1)
        assert_gone(m)
        t.close()
        # the same through the inventory's ssh args instead of ssh_config (no config at all)
        (ssh / "config").unlink()
        host = host_for(target, vars={"ansible_ssh_common_args": f"-o ProxyJump=root@{bastion.address}:{bastion.port}"})
        t = get_transport(host, known_hosts=kh)
        assert t.run("echo args").stdout == b"args\n"
        t.close()
        bastion.stop()
        t = get_transport(host, known_hosts=kh, connect_timeout=3)
        with pytest.raises(HostUnreachable, match=r"jump host .*|cannot connect to \[127.0.0.16\]") as e:
            t.run("true")
        assert e.value.host == host.name  # filed under the node (its action, its history), the hop named in the text
    finally:
        bastion.stop()
        target.stop()


def test_a_node_reached_through_its_ssh_args_alone(tmp_path, isolated_home):
    """An inventory that says port, user and key only in ``ansible_ssh_common_args`` (``-i KEY -l root -p
    PORT``), as ssh would take them: the real sshd answers (it had been port 22, connection refused)."""
    node = start_sshd(tmp_path / "n", address="127.0.0.20")
    try:
        kh = write_known_hosts(tmp_path / "kh", [node])
        host = FakeHost(name="n", address=node.address, port=22, user=None, key_file=None, vars={
            "ansible_host": node.address, "ansible_ssh_common_args": f"-i {node.key_file} -l root -p {node.port}"})
        t = get_transport(host, known_hosts=kh)
        assert t.run("echo args").stdout == b"args\n"
        t.close()
    finally:
        node.stop()


def test_proxycommand_from_ansible_args(tmp_path):
    """``ansible_ssh_common_args: -o ProxyCommand="ssh -W %h:%p bastion"``, Ansible's older bastion idiom,
    through the real OpenSSH client; %h and %p are expanded to the node's address and port."""
    ssh = shutil.which("ssh")
    if ssh is None:
        pytest.skip("OpenSSH client (ssh) not installed: ProxyCommand through ssh -W cannot be tried")
    bastion = start_sshd(tmp_path / "b", address="127.0.0.18", log_level="DEBUG1")
    target = start_sshd(tmp_path / "t", address="127.0.0.19")
    try:
        kh = write_known_hosts(tmp_path / "kh", [bastion, target])
        proxy = (f"{ssh} -q -i {target.key_file} -o BatchMode=yes -o UserKnownHostsFile={kh} "
                 f"-o StrictHostKeyChecking=yes -p {bastion.port} -W %h:%p root@{bastion.address}")
        host = host_for(target, vars={"ansible_ssh_common_args": f"-o ProxyCommand=\"{proxy}\""})
        t = get_transport(host, known_hosts=kh)
        assert t.run("echo proxied").stdout == b"proxied\n"
        assert f"target {target.address} port {target.port}" in bastion.log()
        t.close()
    finally:
        bastion.stop()
        target.stop()


def test_dropped_connection_of_a_collective_rank_is_not_rerun(tmp_path):
    """A probe that is one rank of a multi-host collective (nnodes > 1) is not run again alone after its
    connection dropped (its peers are gone): the loss is an error naming the host, which stays in the run."""
    node = start_sshd(tmp_path, address="127.0.0.12")
    try:
        kh = write_known_hosts(tmp_path / "kh", [node])
        h = Host("rank1", node.address, node.port, "root", node.key_file, "ssh", sys.executable, {}, ("all",))
        n = HostRunner(h, lambda host: get_transport(host, known_hosts=kh), probe_timeout=120)
        args = {"backend": "gloo", "nnodes": 2, "node_rank": 1, "ranks_per_node": 1, "master_addr": "127.0.0.1",
                "master_port": free_port("127.0.0.1"), "hosts": ["rank0", "rank1"], "host": "rank1",
                "deadline_s": 100, "timeout_s": 100, "marker": "gpuaccept-ar-0123456789ab"}
        killing: list[float] = []
        threading.Thread(target=lambda: (wait_started("gpuaccept-ar-0123456789ab", within=120), time.sleep(1),
                                         killing.append(time.monotonic()),
                                         [os.kill(p, 9) for p in node.session_processes()]), daemon=True).start()
        with pytest.raises(HostUnreachable, match="rank1: connection lost during command.*not run again"):
            n.probe("nccl_allreduce", args)
        assert time.monotonic() - killing[0] < 2 * LOADED_SLACK_S  # at once, not run again alone to its 100 s
        assert_gone("gpuaccept-ar-0123456789ab")
        assert n.run("echo still-in").stdout == b"still-in\n"
        n.close()
    finally:
        node.stop()


def test_paramiko_records_pass_only_when_debugging():
    """A failed handshake made paramiko's transport thread log its traceback as ERROR records, printed by pytest
    under gpuaccept's own one-line diagnosis (second trial, a frozen sshd); they pass at DEBUG only."""
    from gpuaccept.transport.ssh import PARAMIKO_LOG
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())
    plog, run = logging.getLogger(PARAMIKO_LOG), logging.getLogger("gpuaccept.run")
    h, old = Keep(), run.level
    plog.addHandler(h)
    try:
        run.setLevel(logging.INFO)
        plog.error("Exception (client): Error reading SSH protocol banner")
        assert seen == []
        run.setLevel(logging.DEBUG)
        plog.error("Exception (client): Error reading SSH protocol banner")
        assert seen == ["Exception (client): Error reading SSH protocol banner"]
    finally:
        plog.removeHandler(h)
        run.setLevel(old)


@pytest.mark.parametrize("peer", ["closes", "silent"])
def test_a_peer_that_closes_at_once_is_told_from_one_that_never_answers(tmp_path, isolated_home, peer):
    """A TCP peer on loopback that accepts and closes at once (not an SSH server, or sshd refusing through
    MaxStartups): named as closing the connection, without waiting for the timeout. One that accepts and says
    nothing: the handshake did not complete within the timeout."""
    import socket
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held: list = []

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            c.close() if peer == "closes" else held.append(c)
    threading.Thread(target=serve, daemon=True).start()
    t = get_transport(FakeHost(name="h1", port=srv.getsockname()[1], user="root"), connect_timeout=2,
                      known_hosts=str(tmp_path / "known_hosts"))
    t0 = time.monotonic()
    try:
        with pytest.raises(HostUnreachable) as ei:
            t.run("true", timeout=30)
    finally:
        t.close()
        srv.close()
    took = time.monotonic() - t0
    msg = str(ei.value)
    if peer == "closes":
        assert "closed the connection before the SSH handshake completed" in msg and took < 1.5, (msg, took)
    else:
        assert "did not complete within 2s" in msg and took >= 1.9, (msg, took)
