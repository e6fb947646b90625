"""Transports: run one command on one host. One backend per file (local.py, ssh.py).

Contract (every backend)::

    t = get_transport(host, known_hosts=None, accept_new_host_keys=False)
    res = t.run(command: str, stdin: bytes = b"", timeout: float = 600.0) -> CommandResult
    t.close()

``command`` is a POSIX shell command line (run by ``/bin/sh -c`` on the host). The command runs in its
own process group; on timeout the whole group is killed (TERM, then KILL) and CommandTimeout is raised.
stdout and stderr are drained together, so a command writing megabytes to both never deadlocks.
Errors raise the subclasses of gpuaccept.errors.TransportError, each naming the host.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class CommandResult:
    """Outcome of one command. ``rc``: exit status (negative: killed by that signal);
    ``stdout``/``stderr``: raw bytes; ``duration_s``: wall-clock seconds."""

    rc: int
    stdout: bytes
    stderr: bytes
    duration_s: float


class Transport(Protocol):
    """What every backend offers: run one command on its host, and close."""

    def run(self, command: str, stdin: bytes = b"", timeout: float = 600.0) -> CommandResult:
        """Run ``command`` (a POSIX shell command line) with ``stdin`` fed to it, at most ``timeout``
        seconds of wall clock. Raises TransportError subclasses (CommandTimeout on timeout)."""
        ...

    def close(self) -> None:
        """Release connections; the transport may be used again afterwards (it reconnects)."""
        ...


def short_command(command: str, limit: int = 60) -> str:
    """``command`` on one line, whitespace collapsed, cut to ``limit`` characters (for messages)."""
    flat = " ".join(command.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def get_transport(
    host: Any,
    *,
    known_hosts: str | None = None,
    accept_new_host_keys: bool = False,
    connect_timeout: float = 10.0,
) -> Transport:
    """Return the transport for ``host`` (an inventory ``Host``).

    ``host.connection == "local"`` gives a LocalTransport (commands run on this machine); anything
    else gives an SSHTransport. ``known_hosts``: extra known_hosts file (path) read besides
    ~/.ssh/known_hosts, and where newly accepted keys are appended; ``accept_new_host_keys``: trust
    unknown host keys on first use (changed keys are always refused); ``connect_timeout``: seconds for
    TCP connect, SSH banner and authentication each. Nothing is connected until the first run().
    """
    if getattr(host, "connection", "ssh") == "local":
        from gpuaccept.transport.local import LocalTransport

        return LocalTransport(host)
    from gpuaccept.transport.ssh import SSHTransport

    return SSHTransport(
        host,
        known_hosts=known_hosts,
        accept_new_host_keys=accept_new_host_keys,
        connect_timeout=connect_timeout,
    )
