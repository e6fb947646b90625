"""Helpers for tests that start real processes on loopback nodes and check what they leave behind: a stand-in
for an inventory host that transports accept, greppable sleep markers, and waiting on /proc for a marked process
to start or to be gone."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from sshd import SshNode

from gpuaccept.config.hostvars import become_user, known_hosts_file

WATCHDOG = Path(__file__).resolve().parent.parent / "gpuaccept" / "probes" / "_watchdog.py"

#: seconds a test allows on top of a promised bound in time (a command killed at its timeout, a lost
#: connection noticed at once): what starting, killing and reaping processes over a loopback sshd can take on a
#: 2-core machine that is busy (the suite's own -n 4, other jobs). Each bound stays far below what a broken
#: promise costs (a 1000 s sleep, a 30 s or longer timeout); the tight figures are benchmarks/timing_bounds.py's
#: table, measured quiet and beside two busy loops.
LOADED_SLACK_S = 15.0


@dataclass
class FakeHost:
    """Duck-typed stand-in for gpuaccept.config.inventory.Host (the fields transports read)."""

    name: str
    address: str = "127.0.0.1"
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    connection: str = "ssh"
    python: str = sys.executable
    vars: dict = field(default_factory=dict)
    groups: list = field(default_factory=list)
    become_user: str | None = None
    known_hosts: str | None = None

    def __post_init__(self) -> None:  # read from vars as the inventory reader does
        self.become_user = self.become_user or become_user(self.vars)
        self.known_hosts = self.known_hosts or known_hosts_file(self.vars)


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


def assert_gone(mark: str, within: float = 30.0) -> None:
    """Wait until no process with ``mark`` in its command line is alive (``within`` s at most: a deadline for
    the event, not a speed target); kill and fail on any left."""
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


def wait_started(mark: str, within: float = 60.0, comm: str | None = None) -> None:
    """Wait until a process with ``mark`` in its command line runs; with ``comm``, one whose own name is
    ``comm`` (e.g. ``sleep``): the shell that will start it carries the mark in its command line first, and a
    test acting on the shell alone races the fork (the command not yet run, or its child born after a kill)."""
    end = time.monotonic() + within

    def started() -> bool:
        for p in live_pids(mark):
            try:
                if comm is None or Path(f"/proc/{p}/comm").read_text().strip() == comm:
                    return True
            except OSError:
                continue
        return False

    while not started():
        assert time.monotonic() < end, f"{mark} never started"
        time.sleep(0.02)


def procs_with(needle: str) -> list[str]:
    """Command lines of live processes on this machine (where the loopback "nodes" run) whose command line
    or working directory contains ``needle``; this test process excluded."""
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit() or int(e) == os.getpid():
            continue
        try:
            state = Path(f"/proc/{e}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = Path(f"/proc/{e}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(f"/proc/{e}/cwd")
        except OSError:
            continue
        if state not in ("Z", "X") and (needle in cmd or cwd.startswith(needle)):
            out.append(cmd)
    return out


def compile_beside(folder: Path) -> None:
    """``python -m compileall`` of ``folder`` into its own ``__pycache__`` (no prefix of this test run's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    r = subprocess.run([sys.executable, "-m", "compileall", "-q", str(folder)], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and (folder / "__pycache__").is_dir(), r.stdout + r.stderr


def fill(folder: Path) -> Path:
    """Write ``folder/fill`` until its filesystem refuses another byte (ENOSPC: a small tmpfs made full); returns
    the file, whose removal frees the space again."""
    path = folder / "fill"
    try:
        with open(path, "wb") as f:
            while True:
                f.write(b"x" * 4096)
                f.flush()
    except OSError:
        pass
    return path
