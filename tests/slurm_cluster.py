"""A real Slurm cluster on this machine for the tests: munged, slurmctld and three slurmd, in a temp folder.

Debian's ``slurm-wlm`` 22.05 runs several slurmd on one host when each node has its own ``Port`` and is
started with ``slurmd -N <name>``; each node also gets its own loopback address (``NodeAddr=127.0.0.2..4``).
Every daemon runs in the foreground (``-D``/``-F``) as our child, so teardown kills exactly those pids.
"""
from __future__ import annotations

import os
import random
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

NODE_ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
TOOLS = ("munged", "slurmctld", "slurmd", "srun", "salloc", "sinfo", "scontrol")


def slurm_missing_reason() -> str | None:
    """Why the cluster cannot start here (a tool missing, not root), or None."""
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        return f"{', '.join(missing)} not found: apt-get install -y slurm-wlm munge (see .ci/run)"
    if os.geteuid() != 0:
        return "the Slurm test cluster runs its daemons as root"
    return None


def _ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on every address, all below the kernel's ephemeral range.

    A port from the ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 on Debian)
    can be taken between choosing and binding by any outgoing connection of the tests running beside
    us (every loopback SSH session is one), and slurmd then exits "Unable to bind listen port". Below
    that range only a listener can take it. Each port is held bound until all ``n`` are chosen."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    held: list[socket.socket] = []
    try:
        while len(held) < n:
            s = socket.socket()
            try:
                s.bind(("0.0.0.0", random.randrange(10000, max(low, 10001 + n))))
            except OSError:
                s.close()
                continue
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


@dataclass
class SlurmCluster:
    """A running cluster: ``env`` (this process's environment plus ``SLURM_CONF``) for srun/salloc/sinfo,
    ``nodes`` (names), ``base`` (its folder, logs under ``log/``)."""

    base: Path
    env: dict
    nodes: list[str]
    procs: list[subprocess.Popen] = field(default_factory=list)

    def run(self, cmd: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env={**self.now_env(), **kw.pop("env", {})}, capture_output=True, text=True,
                              timeout=timeout, **kw)

    def now_env(self) -> dict[str, str]:
        """The cluster's environment with the calling test's node-lock folder (tests/conftest.py sets one per
        test, after this module-wide cluster started): the jobs' node tasks never share a lock folder with
        another test, nor with a gpuaccept run outside the tests on this machine."""
        return {**self.env, **{k: os.environ[k] for k in ("GPUACCEPT_NODE_LOCK_DIR",) if k in os.environ}}

    def logs(self, tail: int = 15) -> str:
        """The last lines of every daemon log, for a failure message."""
        out = []
        for p in sorted((self.base / "log").glob("*")):
            lines = p.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"== {p.name}\n" + "\n".join(lines))
        return "\n".join(out)

    def stop(self) -> None:
        """SIGTERM every daemon we started, SIGKILL whatever is left after 10 s."""
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        end = time.monotonic() + 10
        for p in reversed(self.procs):
            try:
                p.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def start_cluster(base: Path, n_nodes: int = 3, idle_timeout: float = 90) -> SlurmCluster:
    """Start munged (a fresh key), slurmctld and ``n_nodes`` slurmd (``n1``..) under ``base``; wait until
    ``sinfo`` shows every node idle. Raises RuntimeError with the daemons' log tails when they do not come
    up; the caller must call ``stop()`` (it is also called here on failure)."""
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o700)
    for d in ("state", "log", "spool"):
        (base / d).mkdir(exist_ok=True)
    key = base / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    os.chmod(key, 0o400)
    nodes = [f"n{i}" for i in range(1, n_nodes + 1)]
    ctld_port, d_port, *node_ports = _ports(2 + n_nodes)
    sock = base / "munge.sock"
    lines = [
        "ClusterName=gpuaccepttest",
        f"SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={d_port}",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", f"AuthInfo=socket={sock}", "CredType=cred/munge",
        f"StateSaveLocation={base}/state",
        f"SlurmdSpoolDir={base}/spool/%n",
        f"SlurmctldPidFile={base}/slurmctld.pid",
        f"SlurmdPidFile={base}/slurmd-%n.pid",
        f"SlurmctldLogFile={base}/log/slurmctld.log",
        f"SlurmdLogFile={base}/log/slurmd-%n.log",
        "ProctrackType=proctrack/pgid", "TaskPlugin=task/none", "SelectType=select/linear",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none", "SwitchType=switch/none", "ReturnToService=2", "SlurmdParameters=config_overrides",
        "MailProg=/bin/true",
    ]
    for i, n in enumerate(nodes):
        lines.append(f"NodeName={n} NodeAddr={NODE_ADDRESSES[i % len(NODE_ADDRESSES)]} NodeHostname=localhost "
                     f"CPUs=1 Port={node_ports[i]}")
        (base / "spool" / n).mkdir(exist_ok=True)
    lines.append(f"PartitionName=test Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP")
    conf = base / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for k in [k for k in env if k.startswith(("SLURM_", "SALLOC_", "SBATCH_", "SRUN_")) and k != "SLURM_CONF"]:
        del env[k]
    cl = SlurmCluster(base, env, nodes)

    def spawn(cmd: list[str], log: str) -> None:
        with open(base / "log" / log, "wb") as out:
            cl.procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL))

    try:
        spawn(["munged", "-F", "-f", f"--key-file={key}", f"--socket={sock}", f"--pid-file={base}/munged.pid",
               f"--log-file={base}/log/munged.log", f"--seed-file={base}/munged.seed"], "munged.out")
        _wait(lambda: sock.exists(), 20, "munged did not create its socket", cl)
        spawn(["slurmctld", "-D", "-i"], "slurmctld.out")
        _wait(lambda: cl.run(["scontrol", "ping"], timeout=10).stdout.count("UP") > 0, 30,
              "slurmctld does not answer scontrol ping", cl)
        for n in nodes:
            spawn(["slurmd", "-D", "-N", n], f"slurmd-{n}.out")

        def all_idle() -> bool:
            res = cl.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=10)
            states = dict(line.split() for line in res.stdout.splitlines() if len(line.split()) == 2)
            return all(states.get(n) == "idle" for n in nodes)

        _wait(all_idle, idle_timeout, "the slurmd nodes did not all become idle in sinfo", cl)
    except BaseException:
        cl.stop()
        raise
    return cl


def _wait(cond, timeout: float, what: str, cl: SlurmCluster) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        dead = [" ".join(p.args[:4]) for p in cl.procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited while starting the cluster\n{cl.logs()}")
        try:
            if cond():
                return
        except (subprocess.TimeoutExpired, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{what} within {timeout:.0f}s\n{cl.logs()}")


def running_cluster(base: Path, n_nodes: int = 3):
    """Yield a started cluster of ``n_nodes`` under ``base`` and stop it after (a module fixture's body).

    A missing Slurm or a cluster that does not start fails the test that needs it, naming why."""
    import pytest
    why = slurm_missing_reason()
    if why:
        pytest.fail(why, pytrace=False)
    try:
        cl = start_cluster(base, n_nodes=n_nodes)
    except RuntimeError as e:
        pytest.fail(f"the Slurm test cluster did not start: {e}", pytrace=False)
    try:
        yield cl
    finally:
        cl.stop()
