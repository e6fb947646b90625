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


class ServerAlive:
    """The keepalive questions of one connection: :meth:`check` asks one (from a thread of its own: paramiko's
    ``global_request`` waits without a bound) when a command has been silent :attr:`after_s` and the last answer
    is older than that, and raises :class:`Silent` once one stays unanswered :attr:`wait_s`. Any reply of the
    server answers it (a reply to paramiko's own keepalives too)."""

    def __init__(self, name: str):
        self.name = name
        self.after_s, self.wait_s = SERVER_ALIVE_S, SERVER_ALIVE_WAIT_S
        self._lock = threading.Lock()
        self._asked: list | None = None  # the last question: [asked at, answered Event, paramiko transport, answered at]

    def check(self, transport: paramiko.Transport, heard: float, now: float) -> float:
        """``heard`` (monotonic s: the command's last byte) when the command is not yet silent :attr:`after_s` or
        the server answers; raises :class:`Silent` (an OSError: a lost connection) when a question to it stays
        unanswered :attr:`wait_s`."""
        if now - heard < self.after_s:
            return heard
        with self._lock:
            ask = self._asked
            if ask is not None and ask[2] is transport and not ask[1].is_set():
                if now - ask[0] >= self.wait_s:
                    raise Silent(f"stopped answering: no reply to an SSH keepalive in {self.wait_s:g} s, "
                                 f"nothing from the command for {now - heard:.0f} s")
                return heard
            if ask is not None and ask[2] is transport and now - ask[3] < self.after_s:
                return heard  # answered lately
            ask = self._asked = [now, threading.Event(), transport, now]
        threading.Thread(target=self._question, args=(ask,), name=f"gpuaccept-alive-{self.name}", daemon=True).start()
        return heard

    @staticmethod
    def _question(ask: list) -> None:
        try:
            ask[2].global_request("keepalive@openssh.com", wait=True)
        except Exception:  # noqa: BLE001 - a closed transport: the run loop sees it inactive
            pass
        ask[3] = time.monotonic()
        ask[1].set()
