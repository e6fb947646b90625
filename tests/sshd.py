"""Test rig: throw-away OpenSSH servers on loopback addresses (127.0.0.2, 127.0.0.3, ...).

    node = start_sshd(tmp_dir, address="127.0.0.2")      # one sshd, root login with the shared client key
    node.inventory_line()                                # Ansible INI host line for it
    write_known_hosts(path, [node, ...])                 # known_hosts trusting those nodes
    node.freeze() / node.thaw()                          # SIGSTOP / SIGCONT the sshd and its sessions
    node.freeze_when_running("sleep 60")                 # freeze once a command with that text runs
    node.stop()                                          # SIGKILL the sshd and everything below it
    start_sshd(tmp, address="127.0.0.2", extra_config=["MaxSessions 1"])   # a hardened server
    node.command_processes()                             # what runs below the sshd (not sshd itself)

Each sshd gets its own ed25519 host key; all share one client key pair (``client_key()``), created
once per process. Sessions get ``SHLVL=1`` so root's bash does not source ~/.bashrc. Requires /usr/sbin/sshd and ssh-keygen, and root (sshd privilege separation).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"

_client_key_lock = threading.Lock()
_client_key_path: str | None = None


def sshd_missing_reason() -> str | None:
    """Why sshd-based tests cannot run here (a one-line message), or None when they can."""
    if not os.access(SSHD, os.X_OK):
        return f"{SSHD} not found: install openssh-server (the transport tests need a real sshd)"
    if not os.access(SSH_KEYGEN, os.X_OK):
        return "ssh-keygen not found: install openssh-client"
    return None


def _keygen(path: str, comment: str) -> None:
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def client_key() -> str:
    """Path of the shared client private key (ed25519, no passphrase); ``+ ".pub"`` is its public key."""
    global _client_key_path
    with _client_key_lock:
        if _client_key_path is None:
            d = tempfile.mkdtemp(prefix="gpuaccept-client-key-")
            path = os.path.join(d, "id_ed25519")
            _keygen(path, "gpuaccept-test-client")
            _client_key_path = path
        return _client_key_path


def free_port(address: str) -> int:
    """A TCP port currently free on ``address``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _sshd_version() -> tuple[int, int]:
    p = subprocess.run([SSHD, "-V"], capture_output=True, text=True)
    m = re.search(r"OpenSSH_(\d+)\.(\d+)", p.stdout + p.stderr)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _descendants(pid: int) -> list[int]:
    """PIDs below ``pid`` in the process tree (from /proc), deepest last."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(children.get(p, []))
    return out


@dataclass
class SshNode:
    """One running sshd. ``known_hosts_line``: ``[address]:port ssh-ed25519 AAAA...``;
    ``key_file``: client private key that logs in as root; ``pid``: the listening sshd."""

    name: str
    address: str
    port: int
    known_hosts_line: str
    key_file: str
    pid: int
    dir: Path
    host_key: str
    log_file: Path
    config_file: Path
    proc: subprocess.Popen = field(repr=False)

    def inventory_line(self, name: str | None = None, python: str = sys.executable) -> str:
        """Ansible INI host line for this node (``name`` defaults to ``self.name``)."""
        return (
            f"{name or self.name} ansible_host={self.address} ansible_port={self.port} ansible_user=root "
            f"ansible_ssh_private_key_file={self.key_file} ansible_python_interpreter={python}"
        )

    def processes(self) -> list[int]:
        """The listening sshd and every process below it (sessions and the commands they run)."""
        return [self.pid] + _descendants(self.pid)

    def session_processes(self) -> list[int]:
        """The per-connection sshd processes (children of the listener, not the commands they run)."""
        out = []
        for p in _descendants(self.pid):
            try:
                comm = Path(f"/proc/{p}/comm").read_text().strip()
            except OSError:
                continue
            if comm.startswith("sshd"):
                out.append(p)
        return out

    def command_processes(self, needle: str = "") -> list[int]:
        """Live (non-zombie) processes below the sshd that are not sshd itself (the commands sessions
        run and whatever they left), optionally only those whose command line contains ``needle``."""
        out = []
        for p in _descendants(self.pid):
            try:
                comm = Path(f"/proc/{p}/comm").read_text().strip()
                state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if not comm.startswith("sshd") and state not in ("Z", "X") and needle in cmd:
                out.append(p)
        return out

    def freeze_when_running(self, needle: str, timeout: float = 30.0) -> threading.Thread:
        """In a thread: wait (up to ``timeout`` s) until a command whose line holds ``needle`` runs, then
        :meth:`freeze` (a node that freezes mid-command); returns the thread, started."""
        def wait_then_freeze() -> None:
            end = time.monotonic() + timeout
            while time.monotonic() < end and not self.command_processes(needle):
                time.sleep(0.05)
            self.freeze()
        t = threading.Thread(target=wait_then_freeze, daemon=True)
        t.start()
        return t

    def freeze(self) -> None:
        """SIGSTOP the listener and its sshd session processes: the TCP peer stays up but never answers."""
        for p in [self.pid] + self.session_processes():
            _signal(p, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT what freeze() stopped."""
        for p in [self.pid] + self.session_processes():
            _signal(p, signal.SIGCONT)

    def stop(self) -> None:
        """SIGKILL the sshd and all processes below it; idempotent."""
        procs = self.processes()  # collected first: orphans get reparented once their parent dies
        for p in procs:  # top-down: sessions die before they could report their children's death
            _signal(p, signal.SIGKILL)
            _signal(p, signal.SIGCONT)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass

    def log(self) -> str:
        """Contents of the sshd log (-E file)."""
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_port(address: str, port: int, proc: subprocess.Popen, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def start_sshd(
    tmp_dir: str | os.PathLike,
    address: str = "127.0.0.2",
    port: int | None = None,
    name: str | None = None,
    log_level: str = "ERROR",
    extra_config: list[str] | tuple[str, ...] = (),
) -> SshNode:
    """Start an sshd on ``address``:``port`` (a free port if None) with its state in ``tmp_dir``.

    Returns an SshNode once the port accepts connections. Raises RuntimeError (with the sshd log) if
    it does not come up within 10 s. ``name``: inventory name (default ``node-<address>-<port>``).
    ``extra_config``: sshd_config lines placed before the rig's own (sshd keeps the first value of a
    keyword), e.g. ``["MaxSessions 1"]``.
    """
    why = sshd_missing_reason()
    if why:
        raise RuntimeError(why)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation directory
    ckey = client_key()
    last_err = ""
    for _attempt in range(3):
        p = port or free_port(address)
        d = Path(tmp_dir) / f"sshd-{address}-{p}"
        d.mkdir(parents=True, exist_ok=True)
        host_key = str(d / "ssh_host_ed25519_key")
        if not os.path.exists(host_key):
            _keygen(host_key, f"gpuaccept-test-host-{address}")
        auth = d / "authorized_keys"
        auth.write_text(Path(ckey + ".pub").read_text())
        auth.chmod(0o600)
        log_file = d / "sshd.log"
        cfg = d / "sshd_config"
        lines = [*extra_config,
            f"ListenAddress {address}",
            f"Port {p}",
            f"HostKey {host_key}",
            f"AuthorizedKeysFile {auth}",
            f"PidFile {d / 'sshd.pid'}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "MaxStartups 100:30:200",
            "MaxSessions 50",
            f"LogLevel {log_level}",
            "Subsystem sftp internal-sftp",
            # bash sources ~/.bashrc for sshd sessions only when SHLVL < 2: keep the login user's rc
            # files (pyenv init and the like: slow, and they leave stale locks when a test SIGKILLs a
            # session) out of the rig
            "SetEnv SHLVL=1",
        ]
        if _sshd_version() >= (9, 8):
            lines.append("PerSourcePenalties no")  # failed-auth tests must not get 127.0.0.1 banned
        cfg.write_text("\n".join(lines) + "\n")
        proc = subprocess.Popen(
            [SSHD, "-D", "-f", str(cfg), "-E", str(log_file)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if _wait_port(address, p, proc, 10.0):
            pub = Path(host_key + ".pub").read_text().split()
            hostname = address if p == 22 else f"[{address}]:{p}"
            return SshNode(
                name=name or f"node-{address}-{p}",
                address=address,
                port=p,
                known_hosts_line=f"{hostname} {pub[0]} {pub[1]}",
                key_file=ckey,
                pid=proc.pid,
                dir=d,
                host_key=host_key,
                log_file=log_file,
                config_file=cfg,
                proc=proc,
            )
        _signal(proc.pid, signal.SIGKILL)
        proc.wait()
        last_err = log_file.read_text(errors="replace") if log_file.exists() else "(no log)"
        if port is not None:
            break
    raise RuntimeError(f"sshd on {address} did not start: {last_err.strip()}")


def start_nodes_with_tmp(base: Path, addresses: tuple[str, ...], prefix: str, **kw) -> list[SshNode]:
    """sshd nodes ``<prefix>1``, ``<prefix>2``... whose sessions get their own TMPDIR (``node.tmp``, a folder
    ``<prefix><i>-tmp`` in ``base``): every shipped probe folder, and so every probe process's working directory,
    is below it, which is how what a run leaves on a node is counted. ``kw``: more of :func:`start_sshd`'s."""
    nodes = []
    for i, a in enumerate(addresses, 1):
        tmp = base / f"{prefix}{i}-tmp"
        tmp.mkdir(parents=True)
        n = start_sshd(base, address=a, name=f"{prefix}{i}", extra_config=[f"SetEnv SHLVL=1 TMPDIR={tmp}"], **kw)
        n.tmp = tmp  # type: ignore[attr-defined]
        nodes.append(n)
    return nodes


def run_leftovers(tmp: Path) -> list[Path]:
    """What runs left in a node's TMPDIR ``tmp``: every entry but the nodes' bytecode cache
    (``gpuaccept-bytecode-<uid>``, gpuaccept/probes/_bytecode.py), which stays on purpose."""
    return sorted(p for p in tmp.iterdir() if not p.name.startswith("gpuaccept-bytecode-"))


def write_known_hosts(path: str | os.PathLike, nodes: list[SshNode]) -> str:
    """Write a known_hosts file trusting ``nodes``; returns its path as a str."""
    Path(path).write_text("".join(n.known_hosts_line + "\n" for n in nodes))
    return str(path)
