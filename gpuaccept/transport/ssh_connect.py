"""Connecting to a host so that a cancel ends the attempt at once (gpuaccept.transport.ssh's connections): the TCP
connect is gpuaccept's own (a non-blocking connect polled every :data:`CANCEL_POLL_S`, a host name resolved in a
helper thread), and while the SSH handshake, authentication and the session request run, a cancel
(gpuaccept.transport.cancel_all on a signal) shuts the socket down and closes the client from the canceller
thread (:class:`_Cancellable`), so paramiko's waits end at once; :class:`_Watchdog` bounds each step."""
from __future__ import annotations

import errno
import os
import select
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from gpuaccept.config.sshlib import import_paramiko

paramiko = import_paramiko()
from paramiko.ssh_exception import NoValidConnectionsError, PasswordRequiredException, SSHException

from gpuaccept.errors import AuthError, Interrupted
from gpuaccept.transport import Running, aborting, current, interruption


#: seconds between checks for a cancel while a TCP connect or a name resolution is in progress
CANCEL_POLL_S = 0.1


class _Cancellable:
    """Makes one connection attempt (TCP connect, SSH handshake, authentication, session request) end within
    moments of a cancel of the command it is for (the innermost of gpuaccept.transport.current): on a cancel, the
    closers given to :meth:`add` (shut a socket down, close a client, a ProxyCommand, a jump host's channel) run
    in the canceller thread (Running.on_cancel), so whatever paramiko blocks on returns; the attempt then
    raises Interrupted, whatever error the closing caused. After a second signal (aborting) every attempt is
    cancelled. Use as a context manager around the attempt; nested attempts (ProxyJump hops) share one."""

    def __init__(self, name: str, display: str):
        self.name, self.display = name, display
        # the command this attempt is for (the innermost one: a fresh connection that kills a cancelled
        # command's groups runs inside that command, and must not be cut by its cancel)
        self.stack = current()[-1:]
        self.closers: list[Callable[[], Any]] = []
        self._keys: list[tuple[Running, object]] = []

    def cancelled_by(self) -> str | None:
        """Why the attempt is to stop (a signal's name), else None."""
        for r in self.stack:
            if r.cancelled.is_set():
                return r.reason or interruption() or "cancelled"
        if aborting():
            return interruption() or "abort"
        return None

    def interrupted(self, why: str) -> Interrupted:
        what = self.stack[-1].what if self.stack else "connect"
        return Interrupted(self.name, f"interrupted ({why}) while running on {self.name}: {what} "
                                      f"(connecting to {self.display})")

    def check(self) -> None:
        """Raise Interrupted when the attempt is cancelled."""
        why = self.cancelled_by()
        if why is not None:
            raise self.interrupted(why)

    def add(self, closer: Callable[[], Any]) -> None:
        """Run ``closer`` on a cancel (at once, raising Interrupted, when the attempt is cancelled already)."""
        self.closers.append(closer)
        if self.cancelled_by() is not None:
            self._close()
            self.check()

    def _close(self) -> None:
        for fn in list(self.closers):
            try:
                fn()
            except Exception:  # noqa: BLE001 - best effort: it may be closed already
                pass

    def __enter__(self) -> "_Cancellable":
        self._keys = [(r, r.on_cancel(self._close)) for r in self.stack]
        try:
            self.check()
        except BaseException:
            self._release()
            raise
        return self

    def _release(self) -> bool:
        ran = False
        for r, key in self._keys:
            ran = r.off_cancel(key) or ran
        self._keys = []
        return ran

    def __exit__(self, et, e, tb) -> bool:
        ran = self._release()  # from here on no closer runs
        if et is not None and not issubclass(et, Exception):
            return False  # KeyboardInterrupt (a second signal in this thread): goes on as it is
        why = self.cancelled_by()
        if why is not None and (et is not None or ran):
            if et is None or not issubclass(et, Interrupted):
                if et is None:
                    self._close()  # connected just as the cancel came: the closers cut it, or cut it now
                raise self.interrupted(why) from None
        return False


def _shut(sock: socket.socket) -> None:
    """Shut ``sock`` down (wakes a thread blocked reading it: paramiko's transport thread) and close it."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _addresses(host: str, port: int, guard: _Cancellable) -> list[tuple[int, Any]]:
    """(family, sockaddr) pairs to try for ``host``:``port``, as paramiko's SSHClient picks them; a host name is
    resolved in a helper thread, so that a cancel does not wait for a slow resolver (raises socket.gaierror)."""
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError):
        box: dict[str, Any] = {}
        done = threading.Event()

        def resolve() -> None:
            try:
                box["infos"] = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM)
            except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                box["error"] = e
            finally:
                done.set()

        threading.Thread(target=resolve, name="gpuaccept-resolve", daemon=True).start()
        while not done.wait(CANCEL_POLL_S):
            guard.check()
        if "error" in box:
            raise box["error"]
        infos = box["infos"]
    stream = [(fam, addr) for fam, st, _p, _c, addr in infos if st == socket.SOCK_STREAM]
    return stream or [(fam, addr) for fam, _s, _p, _c, addr in infos]


def _connect_socket(sock: socket.socket, addr: Any, timeout_s: float, guard: _Cancellable) -> None:
    """Connect ``sock`` to ``addr`` within ``timeout_s`` (raises socket.timeout after it, OSError for a refusal
    or an unreachable network), checking ``guard`` every :data:`CANCEL_POLL_S`; leaves ``sock`` blocking."""
    sock.setblocking(False)
    rc = sock.connect_ex(addr)
    end = time.monotonic() + timeout_s
    if rc not in (0, errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK, errno.EALREADY, errno.EINTR):
        raise OSError(rc, os.strerror(rc))
    poller = select.poll()
    poller.register(sock, select.POLLOUT)
    while rc != 0:
        guard.check()
        left = end - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out")
        if poller.poll(max(1, int(min(left, CANCEL_POLL_S) * 1000))):
            rc = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if rc:
                raise OSError(rc, os.strerror(rc))
            break
    guard.check()
    sock.setblocking(True)


class _Watchdog:
    """Closes an SSH client if a run blocks past a deadline (paramiko has unbounded waits)."""

    def __init__(self) -> None:
        self._timer: threading.Timer | None = None
        self.fired = False

    def arm(self, seconds: float, client: paramiko.SSHClient) -> None:
        self.cancel()
        self._timer = threading.Timer(max(0.0, seconds), self._fire, args=(client,))
        self._timer.daemon = True
        self._timer.start()

    def _fire(self, client: paramiko.SSHClient) -> None:
        self.fired = True
        try:
            client.close()
        except Exception:  # pragma: no cover - best effort
            pass

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _closed_early(e: BaseException, elapsed_s: float, timeout_s: float) -> bool:
    """Whether a handshake error ``e`` (paramiko's "Error reading SSH protocol banner", chained to the socket
    error it met) came from the peer closing or resetting the connection rather than from silence until
    ``timeout_s``: a reset or EOF in its chain, or ``elapsed_s`` well short of the timeout (below 0.8 of it)."""
    seen = 0
    c: BaseException | None = e
    while c is not None and seen < 8:
        if isinstance(c, (socket.timeout, TimeoutError)):
            return False
        if isinstance(c, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, EOFError)):
            return True
        c, seen = c.__cause__ or c.__context__, seen + 1
    return elapsed_s < 0.8 * timeout_s


def tcp_connect(address: str, port: int, timeout: float, guard: _Cancellable) -> socket.socket:
    """A TCP connection to ``address:port`` (each address of the name in turn, as paramiko tries them), each
    attempt bounded by ``timeout`` seconds and cut by a cancel (``guard``). Raises NoValidConnectionsError (every
    address refused or unreachable), socket.timeout, socket.gaierror, OSError, Interrupted."""
    errors: dict[Any, OSError] = {}
    for family, addr in _addresses(address, port, guard):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            guard.add(lambda s=sock: _shut(s))
            _connect_socket(sock, addr, timeout, guard)
            return sock
        except OSError as e:
            sock.close()
            if e.errno not in (errno.ECONNREFUSED, errno.EHOSTUNREACH):
                raise
            errors[addr] = e
        except BaseException:
            sock.close()
            raise
    raise NoValidConnectionsError(errors)


def load_key(path: str | None, host: str) -> paramiko.PKey | None:
    """The private key at ``path`` (the inventory's key file, else ssh_config's IdentityFile); None when there is
    none or it needs a passphrase (then ssh-agent may hold it). Raises AuthError naming ``host`` for a file that
    cannot be read or is no key."""
    if not path:
        return None
    path = os.path.expanduser(str(path))
    try:
        return paramiko.PKey.from_path(path)
    except PasswordRequiredException:
        return None  # passphrase-protected: hope ssh-agent holds it
    except OSError as e:
        raise AuthError(host, f"cannot read key file {path}: {e.strerror or e}") from None
    except (SSHException, ValueError, TypeError) as e:
        if "password" in str(e).lower():
            return None  # passphrase-protected (OpenSSH format says so this way)
        raise AuthError(host, f"cannot load key file {path}: {e}") from None


@dataclass
class _HopHost:
    """A ProxyJump hop, shaped like an inventory Host for SSHTransport."""

    name: str
    address: str
    port: int
    user: str | None
    key_file: str | None
    vars: dict
