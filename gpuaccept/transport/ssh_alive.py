"""Whether an SSH server still answers while a command runs silent (:class:`ServerAlive`), as ssh's
``ServerAliveInterval`` finds out (ssh_config(5)): a host frozen under a command (its kernel, its sshd or the
network to it, the TCP peer perhaps still up) is lost within about a minute, not at the command's timeout."""
from __future__ import annotations

import threading
import time

import paramiko

#: seconds a running command may send nothing before the server is asked to answer (an OpenSSH
#: ``keepalive@openssh.com`` global request, what ssh's ServerAliveInterval sends), and seconds the server has to
#: answer before the host is taken to have stopped answering (ServerAliveInterval x ServerAliveCountMax: 10 x 3).
#: Chosen: a loaded node's sshd answers within a second.
SERVER_ALIVE_S = 15.0
SERVER_ALIVE_WAIT_S = 30.0


class Silent(OSError):
    """The server left a keepalive unanswered for :attr:`ServerAlive.wait_s`: the host stopped answering."""


class _Question:
    """One keepalive asked of ``transport`` at ``asked_at`` (monotonic s); ``answered`` is set, and
    ``answered_at`` stamped, when the server replies (or the transport closes)."""

    def __init__(self, transport: paramiko.Transport, now: float):
        self.transport, self.asked_at, self.answered_at = transport, now, now
        self.answered = threading.Event()

    def ask(self) -> None:
        try:
            self.transport.global_request("keepalive@openssh.com", wait=True)
        except Exception:  # noqa: BLE001 - a closed transport: the run loop sees it inactive
            pass
        self.answered_at = time.monotonic()
        self.answered.set()


class ServerAlive:
    """The keepalive questions of one connection: :meth:`check` asks one (from a thread of its own: paramiko's
    ``global_request`` waits without a bound) when a command has been silent :attr:`after_s` and the last answer
    is older than that, and raises :class:`Silent` once one stays unanswered :attr:`wait_s`. Any reply of the
    server answers it (a reply to paramiko's own keepalives too)."""

    def __init__(self, name: str):
        self.name = name
        self.after_s, self.wait_s = SERVER_ALIVE_S, SERVER_ALIVE_WAIT_S
        self._lock = threading.Lock()
        self._asked: _Question | None = None  # the last question

    def check(self, transport: paramiko.Transport, heard: float, now: float) -> float:
        """``heard`` (monotonic s: the command's last byte) when the command is not yet silent :attr:`after_s` or
        the server answers; raises :class:`Silent` (an OSError: a lost connection) when a question to it stays
        unanswered :attr:`wait_s`."""
        if now - heard < self.after_s:
            return heard
        with self._lock:
            q = self._asked if self._asked is not None and self._asked.transport is transport else None
            if q is not None and not q.answered.is_set():
                if now - q.asked_at >= self.wait_s:
                    raise Silent(f"stopped answering: no reply to an SSH keepalive in {self.wait_s:g} s, "
                                 f"nothing from the command for {now - heard:.0f} s")
                return heard
            if q is not None and now - q.answered_at < self.after_s:
                return heard  # answered lately
            q = self._asked = _Question(transport, now)
        threading.Thread(target=q.ask, name=f"gpuaccept-alive-{self.name}", daemon=True).start()
        return heard
