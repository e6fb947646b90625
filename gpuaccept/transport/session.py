"""A long-running command whose stdin and stdout are a byte stream: the channel of the node-side agent.

:func:`open_session` starts ``command`` on a transport's host (SSH: a channel of the host's one connection,
the command wrapped as every run is, :func:`gpuaccept.transport.ssh.wrap_command`; local: ``/bin/sh -c`` in a
session of its own) and returns a :class:`Session`: :meth:`~Session.send` writes to its stdin,
:meth:`~Session.recv` reads its stdout (bounded waits), :meth:`~Session.stderr` is what it wrote there so far
(the wrapper's process-group line taken out, :attr:`~Session.pgid`), :meth:`~Session.close` ends its stdin
(EOF: the agent then kills its probes, removes its folder and exits) and releases the channel. The
transport's ``run`` verb is unchanged and serves everything else.
"""
from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time
from typing import Any

from gpuaccept.errors import HostUnreachable, TransportError
from gpuaccept.transport.local import _StderrDrain
from gpuaccept.transport.ssh_alive import Silent

_MARKER_RE = re.compile(rb"^__GPUACCEPT_PGID__=(\d+)\n", re.M)


class Session:
    """What both backends return. ``pgid``: the command's process group on the host once known (None before)."""

    pgid: int | None = None

    def send(self, data: bytes, timeout: float = 60.0) -> None:
        """Write ``data`` to the command's stdin (all of it) within ``timeout`` s. Raises HostUnreachable when the
        stream is gone, TimeoutError when the command did not read it in time (a hung node)."""
        raise NotImplementedError

    def recv(self, timeout: float) -> bytes | None:
        """Up to 64 KiB of the command's stdout: None when nothing came within ``timeout`` s, b"" at its end."""
        raise NotImplementedError

    def stderr(self) -> bytes:
        """The command's stderr so far."""
        raise NotImplementedError

    def exit_status(self, timeout: float) -> int | None:
        """The command's exit status within ``timeout`` s, else None."""
        raise NotImplementedError

    def close(self) -> None:
        """EOF on the command's stdin; release the stream (the command may still be ending on the host)."""
        raise NotImplementedError


class _Stderr:
    """stderr collected, the first process-group line (the wrapper's) taken out into ``pgid``."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.pgid: int | None = None

    def feed(self, data: bytes) -> None:
        self.buf += data
        if self.pgid is None:
            m = _MARKER_RE.search(self.buf)
            if m:
                self.pgid = int(m.group(1))
                del self.buf[m.start():m.end()]


class SshSession(Session):
    """A session on a paramiko channel. ``alive``: the connection's keepalive questions
    (gpuaccept.transport.ssh_alive.ServerAlive): a server that stops answering while :meth:`recv` waits on a
    silent session is a lost connection (HostUnreachable "stopped answering"), not a wait until the caller's
    deadline."""

    def __init__(self, name: str, chan: Any, alive: Any = None):
        self.name, self.chan, self.alive = name, chan, alive
        self._err = _Stderr()
        self.heard = time.monotonic()  # the session's last byte (monotonic s)

    @property
    def pgid(self) -> int | None:  # type: ignore[override]
        return self._err.pgid

    def _pull_stderr(self) -> None:
        while self.chan.recv_stderr_ready():
            data = self.chan.recv_stderr(1 << 16)
            if not data:
                break
            self._err.feed(data)

    def send(self, data: bytes, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        view = memoryview(data)
        try:
            while view:
                if self.chan.closed:
                    raise EOFError("channel closed")
                if self.chan.send_ready():
                    view = view[self.chan.send(view[:1 << 15]):]
                elif time.monotonic() >= end:
                    raise TimeoutError(f"the node read {len(data) - len(view)} of {len(data)} bytes in {timeout:g} s")
                else:
                    time.sleep(0.01)
        except TimeoutError:
            raise
        except Exception as e:  # noqa: BLE001 - paramiko raises socket.error, SSHException, EOFError
            raise HostUnreachable(self.name, f"connection lost while writing to the agent: {e}") from None

    def recv(self, timeout: float) -> bytes | None:
        end = time.monotonic() + timeout
        while True:
            self._pull_stderr()
            if self.chan.recv_ready():
                self.heard = time.monotonic()
                return self.chan.recv(1 << 16)
            if self.chan.closed or self.chan.eof_received:
                self._pull_stderr()
                return b"" if not self.chan.recv_ready() else self.chan.recv(1 << 16)
            t = self.chan.get_transport() if hasattr(self.chan, "get_transport") else None
            if t is not None and not t.is_active():
                return b""
            if t is not None and self.alive is not None:
                try:
                    self.heard = self.alive.check(t, self.heard, time.monotonic())
                except Silent as e:  # the server left a keepalive unanswered
                    raise HostUnreachable(self.name, str(e)) from None
            left = end - time.monotonic()
            if left <= 0:
                return None
            select.select([self.chan.fileno()], [], [], min(left, 0.1))

    def stderr(self) -> bytes:
        self._pull_stderr()
        return bytes(self._err.buf)

    def exit_status(self, timeout: float) -> int | None:
        if self.chan.status_event.wait(timeout) and self.chan.exit_status_ready():
            return self.chan.exit_status
        return None

    def close(self) -> None:
        for step in (self.chan.shutdown_write, self.chan.close):
            try:
                step()
            except Exception:  # noqa: BLE001 - best effort: the channel may be gone already
                pass


class LocalSession(Session):
    """A session on a local ``/bin/sh -c`` process in a session of its own (stderr drained by a thread)."""

    def __init__(self, name: str, command: str):
        self.name = name
        try:
            self.proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
        except OSError as e:
            raise TransportError(name, f"cannot start /bin/sh: {e}") from None
        self.pgid = self.proc.pid
        # the local transport's stderr reader (progress lines are framed on stdout: its callback has none to take)
        self._err = _StderrDrain(self.proc, lambda doc: None)

    def send(self, data: bytes, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        fd = self.proc.stdin.fileno()
        view = memoryview(data)
        try:
            os.set_blocking(fd, False)
            while view:
                if not select.select([], [fd], [], max(0.0, min(0.1, end - time.monotonic())))[1]:
                    if time.monotonic() >= end:
                        raise TimeoutError(f"the command read {len(data) - len(view)} of {len(data)} bytes in "
                                           f"{timeout:g} s")
                    continue
                try:
                    view = view[os.write(fd, view[:1 << 16]):]
                except BlockingIOError:
                    continue
        except (OSError, ValueError) as e:
            if isinstance(e, TimeoutError):
                raise
            raise HostUnreachable(self.name, f"the agent's stdin is gone: {e}") from None

    def recv(self, timeout: float) -> bytes | None:
        fd = self.proc.stdout.fileno()
        if not select.select([fd], [], [], max(0.0, timeout))[0]:
            return None
        try:
            return os.read(fd, 1 << 16)
        except OSError:
            return b""

    def stderr(self) -> bytes:
        """What the command wrote on stderr so far; once it has exited, all of it (its drain thread is given up
        to 1 s to read the last of it: the markers a failed start leaves, gpuaccept.runner.agent)."""
        if self.proc.poll() is not None:
            self._err.thread.join(1.0)
        return b"".join(self._err.chunks)

    def exit_status(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        if self.exit_status(1.0) is None:  # it did not end on EOF: its whole group goes (TERM: the agent cleans up)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(self.pgid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
                if self.exit_status(2.0) is not None:
                    break
        for f in (self.proc.stdout, self._err.file):
            try:
                f.close()
            except OSError:
                pass


def open_session(transport: Any, command: str) -> Session:
    """Start ``command`` (a POSIX shell command line) on ``transport``'s host as a :class:`Session`. Raises the
    transport's connection errors (HostUnreachable, HostKeyError, AuthError) and TransportError."""
    from gpuaccept.transport.local import LocalTransport

    if isinstance(transport, LocalTransport):
        return LocalSession(transport.host.name, command)
    from gpuaccept.transport.ssh_connect import _Watchdog

    with transport._lock:  # connect (or reconnect) as run() does; the channel then lives on its own
        chan = transport._start(command, _Watchdog())
    chan.settimeout(None)
    return SshSession(transport.host.name, chan, getattr(transport, "server_alive", None))
