"""SSHTransport: run commands on a remote host over one reused paramiko connection.

Each command runs inside the wrapper of :mod:`gpuaccept.transport.ssh_command` (as the host's ``become_user``
where it has one), which announces the remote process groups. On timeout or interruption
(gpuaccept.transport.cancel_all) every announced group gets ``kill -TERM``, up to 2 s of grace, then
``kill -KILL``: through a second channel; where the server refuses one (``MaxSessions 1``) through a fresh
connection; and for a command holding its stdin (``hold_stdin``) also by EOF on the running channel, which the
watchdog takes as "kill my group". Host keys: :mod:`gpuaccept.transport.ssh_hostkeys`.

Connecting is cancellable like a command (gpuaccept.transport.ssh_connect); after a second signal
(gpuaccept.transport.aborting) a cancelled command sends no kill command: its channel gets EOF and the
connection is closed.

Where to connect comes from the inventory and ``~/.ssh/config`` (gpuaccept.config.sshconfig): HostName,
Port, User, IdentityFile, and ProxyJump (each hop a connection of its own, the next one tunnelled through its
``direct-tcpip`` channel) or ProxyCommand (paramiko.ProxyCommand).
"""
from __future__ import annotations

import errno
import getpass
import logging
import select
import socket
import threading
import time
import weakref
from typing import Any, Callable

from gpuaccept.config.sshlib import import_paramiko

paramiko = import_paramiko()
from paramiko.ssh_exception import (  # noqa: E402 - after paramiko's import without Invoke
    AuthenticationException,
    BadHostKeyException,
    NoValidConnectionsError,
    SSHException,
)

from gpuaccept.errors import (AuthError, CommandTimeout, GpuacceptError, HostKeyError, HostUnreachable, Interrupted,
                              NameUnresolved, SshRefused, TransportError)
from gpuaccept.transport.progress import ProgressLines
from gpuaccept.transport import CommandResult, Running, aborting, on_abort, tracked
from gpuaccept.transport.ssh_command import KILL_GRACE_S, PGID_MARKER, StderrSplitter, kill_group_command, wrap_command
from gpuaccept.transport.ssh_alive import ServerAlive
from gpuaccept.transport.ssh_hostkeys import HostKeyPolicy, KnownHosts, fingerprint
from gpuaccept.transport.ssh_connect import _HopHost, load_key, tcp_connect, _Cancellable, _Watchdog, _closed_early, _shut
from gpuaccept.config.sshconfig import parse_jump, resolve

__all__ = ["SSHTransport", "KEEPALIVE_S", "KILL_BUDGET_S", "KILL_GRACE_S", "PGID_MARKER", "PARAMIKO_LOG",
           "fingerprint", "kill_group_command", "wrap_command"]

log = logging.getLogger(__name__)
#: paramiko's transport logs go here (not to "paramiko.transport"): with no logging configured they
#: are dropped instead of printing tracebacks on stderr; configure logging to see them.
PARAMIKO_LOG = "gpuaccept.transport.paramiko"
logging.getLogger(PARAMIKO_LOG).addHandler(logging.NullHandler())


def _when_debugging(record: logging.LogRecord) -> bool:
    """paramiko's own records pass only while ``gpuaccept.run`` logs at DEBUG (``--log-cli-level=DEBUG``): its
    transport thread logs a failed handshake (a frozen or dying sshd) as ERROR records, one per traceback line,
    which pytest then printed under the one-line diagnosis gpuaccept gives for the same failure."""
    return logging.getLogger("gpuaccept.run").isEnabledFor(logging.DEBUG)


logging.getLogger(PARAMIKO_LOG).addFilter(_when_debugging)

#: seconds between the SSH keepalive packets sent on an idle connection
KEEPALIVE_S = 5
#: seconds allowed for the whole remote kill (open channel, TERM, grace, KILL) after a timeout
KILL_BUDGET_S = 6.0
#: every SSHTransport of this process, for :func:`_close_every_connection`
_LIVE: "weakref.WeakSet[SSHTransport]" = weakref.WeakSet()


def _close_every_connection() -> None:
    """After a second signal (gpuaccept.transport.on_abort): close every SSH connection at once, without waiting
    for the lock of a run in progress, so that nothing waits on a node any more (a kill's confirmation, an
    agent's goodbye); the nodes' watchdogs and agents read EOF and kill and clean up by themselves."""
    for t in list(_LIVE):
        for client in (t._client, t._jump._client if t._jump is not None else None):
            if client is not None:
                try:
                    client.close()
                except Exception:  # noqa: BLE001 - best effort
                    pass


on_abort(_close_every_connection)


class SSHTransport:
    """Runs commands on ``host`` over SSH (paramiko), one connection reused across runs.

    ``host``: inventory Host (name, address, port, user, key_file, vars, become_user, known_hosts are used).
    ``known_hosts``: path of an extra known_hosts file, read besides ~/.ssh/known_hosts (and the host's own
    ``Host.known_hosts``, from the host var ``gpuaccept_known_hosts`` / ``ansible_ssh_known_hosts_file``); newly
    accepted keys are appended to it (else to the host's file, else to ~/.ssh/known_hosts).
    ``accept_new_host_keys``: trust an unknown host key on first use; a changed key is always refused.
    ``connect_timeout``: seconds, each for TCP connect, SSH handshake and authentication.
    ``ssh_config``: OpenSSH client config (default ``~/.ssh/config``), see gpuaccept.config.sshconfig;
    inventory vars win over it. ``_jump_spec``: ProxyJump hops in front of this host (for hops themselves).

    The connection opens on the first run(), is kept (keepalive every KEEPALIVE_S s) and closed by
    close(). A run that finds the connection dead reconnects once. Runs are serialised by a lock.
    Raises ConfigError (from the constructor) for an unreadable ssh config.
    """

    def __init__(
        self,
        host: Any,
        known_hosts: str | None = None,
        accept_new_host_keys: bool = False,
        connect_timeout: float = 10.0,
        ssh_config: str | None = None,
        _jump_spec: str | None = None,
        _depth: int = 0,
    ):
        self.host = host
        self.accept_new_host_keys = accept_new_host_keys
        self.connect_timeout = float(connect_timeout)
        self.ssh_config = ssh_config
        self.known_hosts_arg = known_hosts
        self._depth = _depth
        target = resolve(host, ssh_config)
        self.address = target.hostname
        self.port = target.port
        self.user = target.user or getpass.getuser()
        self.key_file = target.key_files[0] if target.key_files else None
        self.proxy_jump = _jump_spec if _jump_spec is not None else target.proxy_jump
        self.proxy_command = None if self.proxy_jump else target.proxy_command
        self._jump: SSHTransport | None = None
        self.display = f"[{self.address}]:{self.port}"
        self.hostkey_name = self.address if self.port == 22 else self.display
        #: the user commands run as (sudo -n; inventory ansible_become), or None: the login user
        self.become = getattr(host, "become_user", None) if _jump_spec is None else None
        #: the known_hosts files read and written (``keys.files``: in order; ``keys.target``: where new keys go)
        self.keys = KnownHosts(host.name, [known_hosts, getattr(host, "known_hosts", None)])
        self._client: paramiko.SSHClient | None = None
        #: keepalive questions while a command runs silent (gpuaccept.transport.ssh_alive)
        self.server_alive = ServerAlive(host.name)
        self._lock = threading.Lock()
        _LIVE.add(self)

    # ------------------------------------------------------------------ public API

    def run(self, command: str, stdin: bytes = b"", timeout: float = 600.0, hold_stdin: bool = False,
            progress: Callable[[dict], None] | None = None, label: str | None = None) -> CommandResult:
        """Run ``command`` (POSIX shell command line, run by /bin/sh) on the host.

        ``stdin``: bytes fed to the command, then EOF (``hold_stdin``: no EOF until the command ends, or
        until it must be killed). ``timeout``: seconds of wall clock, counted from
        the moment the command is started (connecting is bounded by connect_timeout). Returns a
        CommandResult (``rc`` -1 when the server reported no exit status, i.e. the remote shell died of
        a signal). Raises HostUnreachable (connect failed, connection lost: then its ``pgids`` attribute
        lists the remote process groups left behind, if known), HostKeyError, AuthError,
        CommandTimeout (the remote process group was killed, TERM then KILL), Interrupted (cancelled by
        gpuaccept.transport.cancel_all; killed the same way), TransportError. ``progress``: called (in this
        thread) with each live progress line of the command's stderr as it arrives (gpuaccept.transport.progress).
        """
        with self._lock:
            return tracked(self.host.name, command,
                           lambda r: self._run(command, stdin, timeout, hold_stdin, r, progress), label)

    def kill_groups(self, pgids: list[int], timeout: float = KILL_BUDGET_S + 4) -> CommandResult:
        """Kill remote process groups ``pgids`` (TERM, grace, KILL) with a command on this transport
        (e.g. after a reconnect, for the groups a lost connection left behind)."""
        return self.run(kill_group_command(pgids), timeout=timeout)

    def close(self) -> None:
        """Close the SSH connection (if any). A later run() reconnects."""
        with self._lock:
            self._close_client()

    def __repr__(self) -> str:
        return f"SSHTransport({self.host.name!r}, {self.user}@{self.display})"

    # ------------------------------------------------------------------ connection

    def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # pragma: no cover - best effort
                pass
        jump, self._jump = self._jump, None
        if jump is not None:
            jump.close()

    def _alive(self) -> bool:
        t = self._client.get_transport() if self._client is not None else None
        return t is not None and t.is_active()

    def _load_key(self) -> paramiko.PKey | None:
        """The key from the inventory's key file (else ssh_config's IdentityFile): :func:`load_key`."""
        return load_key(self.key_file, self.host.name)

    def _proxy_sock(self, guard: _Cancellable) -> Any:
        """The socket-like object to reach the host through: a ProxyJump hop's direct-tcpip channel, a
        ProxyCommand, or None (connect directly). Raises HostUnreachable naming the hop; each one is closed on
        a cancel (``guard``)."""
        name = self.host.name
        if self.proxy_jump:
            if self._depth >= 8:
                raise HostUnreachable(name, f"ProxyJump chain longer than 8 hops: {self.proxy_jump}")
            hops = parse_jump(self.proxy_jump)
            user, hop, port = hops[-1]
            before = ",".join(f"{u + '@' if u else ''}[{h}]:{p or 22}" for u, h, p in hops[:-1]) or None
            hvars = {"ansible_port": port} if port else {}
            hop_host = _HopHost(f"{name} (jump host {hop})", hop, port or 22, user, None, hvars)
            jump = SSHTransport(hop_host, known_hosts=self.known_hosts_arg, accept_new_host_keys=self.accept_new_host_keys,
                                connect_timeout=self.connect_timeout, ssh_config=self.ssh_config,
                                _jump_spec=before, _depth=self._depth + 1)
            if jump.key_file is None:
                jump.key_file = self.key_file  # no IdentityFile for the hop: try the host's own key
            self._jump = jump
            try:
                client = jump._connect(guard)
            except TransportError as e:  # the hop's fault, filed under this host (its action, its history)
                raise type(e)(name, f"jump host {hop}: {e.msg}", e.evidence) from None
            jump._client = client
            try:
                transport = client.get_transport()
                assert transport is not None
                chan = transport.open_channel("direct-tcpip", (self.address, self.port), ("127.0.0.1", 0),
                                              timeout=self.connect_timeout)
                guard.add(chan.close)
                return chan
            except (SSHException, EOFError, OSError) as e:
                raise HostUnreachable(name, f"jump host {jump.display} could not open a tunnel to {self.display}: "
                                            f"{e or type(e).__name__}") from None
        if self.proxy_command:
            try:
                proxy = paramiko.ProxyCommand(self.proxy_command)
            except Exception as e:  # noqa: BLE001 - paramiko raises ProxyCommandFailure or OSError
                raise HostUnreachable(name, f"ProxyCommand {self.proxy_command!r} failed: {e}") from None
            guard.add(proxy.close)
            return proxy
        return None

    def _socket(self, guard: _Cancellable) -> socket.socket:
        """A TCP connection to the host, cut by a cancel (``guard``): :func:`tcp_connect`."""
        return tcp_connect(self.address, self.port, self.connect_timeout, guard)

    def _no_connection(self, e: NoValidConnectionsError) -> HostUnreachable:
        """The error of a TCP connect that every address of the host turned down (``e``): SshRefused when each
        answered with a refusal (the host is up, nothing takes SSH on its port), else HostUnreachable (no route)."""
        causes = "; ".join(sorted({err.strerror or str(err) for err in e.errors.values()}))
        text = f"cannot connect to {self.display}: {causes}"
        if e.errors and all(err.errno == errno.ECONNREFUSED for err in e.errors.values()):
            return SshRefused(self.host.name, text, {"address": self.address, "port": self.port})
        return HostUnreachable(self.host.name, text)

    def _connect(self, guard: _Cancellable | None = None) -> paramiko.SSHClient:
        """Connect, complete the handshake and authenticate (each bounded by connect_timeout), within ``guard``
        (a cancel cuts it: Interrupted; default: one for this attempt)."""
        if guard is None:
            with _Cancellable(self.host.name, self.display) as guard:
                return self._connect(guard)
        name = self.host.name
        pkey = self._load_key()
        key_file = self.key_file
        t = self.connect_timeout
        try:
            sock = self._proxy_sock(guard) or self._socket(guard)
        except GpuacceptError:
            raise
        except NoValidConnectionsError as e:
            raise self._no_connection(e) from None
        except socket.gaierror as e:
            raise NameUnresolved(name, f"cannot resolve {self.address}: {e.strerror or e}",
                                 {"address": self.address}) from None
        except (socket.timeout, TimeoutError):
            raise HostUnreachable(name, f"connect to {self.display} timed out after {t:g}s") from None
        except OSError as e:
            raise HostUnreachable(name, f"cannot connect to {self.display}: {e.strerror or e}") from None
        try:
            client = paramiko.SSHClient()
            guard.add(client.close)
            client.set_log_channel(PARAMIKO_LOG)
            revoked = self.keys.load_into(client.get_host_keys(), (self.hostkey_name,))
            client.set_missing_host_key_policy(HostKeyPolicy(name, self.display, self.accept_new_host_keys, self.keys))
        except BaseException:
            if isinstance(sock, socket.socket):
                _shut(sock)
            raise
        if key_file and pkey is not None:
            auth_desc = f"key file {key_file}"
            kwargs: dict[str, Any] = dict(pkey=pkey, allow_agent=False, look_for_keys=False)
        elif key_file:
            auth_desc = f"key file {key_file} (passphrase-protected; tried ssh-agent)"
            kwargs = dict(allow_agent=True, look_for_keys=False)
        else:
            auth_desc = "ssh-agent and default keys"
            kwargs = dict(allow_agent=True, look_for_keys=True)
        began = time.monotonic()
        try:
            client.connect(self.address, port=self.port, username=self.user, timeout=t, banner_timeout=t,
                           auth_timeout=t, channel_timeout=t, sock=sock, **kwargs)
        except GpuacceptError:
            client.close()
            raise
        except BadHostKeyException as e:
            client.close()
            raise HostKeyError(name, self.keys.changed_key_message(self.display, self.hostkey_name, e.key, e.expected_key)) from None
        except AuthenticationException as e:
            client.close()
            if "timeout" in str(e).lower():  # the server stopped answering mid-handshake: not a key problem
                raise HostUnreachable(name, f"{self.display} stopped answering during authentication "
                                            f"(host or sshd not answering within {t:g}s)") from None
            raise AuthError(name, f"authentication as {self.user} failed with {auth_desc}: {e}") from None
        except NoValidConnectionsError as e:
            client.close()
            raise self._no_connection(e) from None
        except socket.gaierror as e:
            client.close()
            raise NameUnresolved(name, f"cannot resolve {self.address}: {e.strerror or e}",
                                 {"address": self.address}) from None
        except (socket.timeout, TimeoutError):
            client.close()
            raise HostUnreachable(name, f"connect to {self.display} timed out after {t:g}s") from None
        except OSError as e:
            client.close()
            raise HostUnreachable(name, f"cannot connect to {self.display}: {e.strerror or e}") from None
        except SSHException as e:
            transport = client.get_transport()
            cause = transport.get_exception() if transport is not None else None
            if cause is not None and str(cause) != str(e):
                e = cause if isinstance(cause, SSHException) else SSHException(str(cause))
            client.close()
            low = str(e).lower()
            handshake = "banner" in low or "no existing session" in low or "negotiation" in low
            if handshake and _closed_early(e, time.monotonic() - began, t):
                raise HostUnreachable(
                    name, f"{self.display} closed the connection before the SSH handshake completed (not an "
                    "SSH server on that port, or sshd refusing it: MaxStartups, TCP wrappers, a firewall's "
                    f"reset): {e}") from None
            if handshake:
                raise HostUnreachable(
                    name, f"SSH handshake with {self.display} did not complete within {t:g}s "
                    f"(host or sshd not answering): {e}"
                ) from None
            if "authentication" in low and "timeout" in low:
                raise HostUnreachable(name, f"{self.display} stopped answering during authentication "
                                            f"(host or sshd not answering within {t:g}s)") from None
            if "authentication" in low:
                raise AuthError(name, f"authentication as {self.user} failed with {auth_desc}: {e}") from None
            raise HostUnreachable(name, f"SSH handshake with {self.display} failed: {e}") from None
        except EOFError:
            client.close()
            raise HostUnreachable(name, f"SSH handshake with {self.display} failed: connection closed") from None
        transport = client.get_transport()
        assert transport is not None
        server_key = transport.get_remote_server_key()
        if server_key.get_base64() in revoked:
            client.close()
            raise HostKeyError(
                name,
                f"host key for {self.display} ({fingerprint(server_key)}) is marked @revoked in "
                f"{revoked[server_key.get_base64()]}",
            )
        transport.set_keepalive(KEEPALIVE_S)
        return client

    def _start(self, command: str, watchdog: _Watchdog) -> paramiko.Channel:
        """Connect if needed and start ``command``; reconnect once if a reused connection is stale. A cancel of the
        command (gpuaccept.transport.cancel_all) while connecting or asking for the session raises Interrupted at
        once (:class:`_Cancellable`)."""
        with _Cancellable(self.host.name, self.display) as guard:
            return self._start_in(command, watchdog, guard)

    def _start_in(self, command: str, watchdog: _Watchdog, guard: _Cancellable) -> paramiko.Channel:
        for attempt in (0, 1):
            reused = self._alive()
            if not reused:
                self._close_client()
                self._client = self._connect(guard)
            client = self._client
            assert client is not None
            watchdog.arm(2 * self.connect_timeout + 1, client)
            closer = len(guard.closers)
            try:
                guard.add(client.close)
                transport = client.get_transport()
                if transport is None:
                    raise SSHException("SSH session not active")
                chan = transport.open_session(timeout=self.connect_timeout)
                chan.exec_command(wrap_command(command, self.become))
                return chan
            except (SSHException, EOFError, OSError) as e:
                self._close_client()
                guard.check()  # cut by a cancel: Interrupted, not a stale connection
                if reused and attempt == 0 and not watchdog.fired:
                    continue  # stale connection: reconnect once
                if watchdog.fired or "Timeout opening channel" in str(e):  # paramiko's own channel-open timeout
                    raise HostUnreachable(
                        self.host.name, f"{self.display} stopped answering (no reply to a session request)"
                    ) from None
                raise HostUnreachable(self.host.name, f"cannot start a session on {self.display}: {e}") from None
            finally:
                watchdog.cancel()
                del guard.closers[closer:]
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------------ one run

    def _run(self, command: str, stdin: bytes, timeout: float, hold_stdin: bool, running: Running,
             progress: Callable[[dict], None] | None = None) -> CommandResult:
        name = self.host.name
        watchdog = _Watchdog()
        chan = self._start(command, watchdog)
        client = self._client
        assert client is not None
        transport = client.get_transport()
        assert transport is not None
        start = time.monotonic()
        deadline = start + timeout
        heard = start  # monotonic s of the last byte from this command (gpuaccept.transport.ssh_alive)
        watchdog.arm(timeout + 2 * KILL_BUDGET_S + 2.0, client)
        out: list[bytes] = []
        err = StderrSplitter()
        lines = ProgressLines(progress) if progress is not None else None
        try:
            chan.settimeout(1.0)
            fd = chan.fileno()
            stdin_off = 0
            stdin_open = True
            while True:
                progressed = False
                if chan.recv_ready():
                    data = chan.recv(1 << 16)
                    if data:
                        out.append(data)
                        progressed = True
                if chan.recv_stderr_ready():
                    data = chan.recv_stderr(1 << 16)
                    if data:
                        err.feed(data)
                        if lines is not None:
                            lines.feed(data)
                        progressed = True
                if stdin_open:
                    if stdin_off < len(stdin) and chan.send_ready():
                        try:
                            stdin_off += chan.send(stdin[stdin_off : stdin_off + 32768])
                            progressed = True
                        except (OSError, SSHException):
                            stdin_off = len(stdin)  # the remote stopped reading its stdin
                    if stdin_off >= len(stdin) and not hold_stdin:
                        try:
                            chan.shutdown_write()
                        except (OSError, SSHException, EOFError):
                            pass
                        stdin_open = False
                if chan.closed or (chan.eof_received and chan.exit_status_ready()):
                    if not (chan.recv_ready() or chan.recv_stderr_ready()):
                        break
                    continue
                if not transport.is_active():
                    break
                if running.cancelled.is_set():
                    raise _Cancelled()
                now = time.monotonic()
                if now >= deadline:
                    raise _Timeout()
                heard = now if progressed else self.server_alive.check(transport, heard, now)  # Silent: lost
                if not progressed:
                    wait = min(0.02 if (stdin_open and stdin_off < len(stdin)) else 0.1, max(0.0, deadline - now))
                    if chan.eof_received:
                        chan.status_event.wait(wait)  # no more data: only the exit status is awaited
                    else:
                        select.select([fd], [], [], wait)
        except (_Timeout, _Cancelled) as stop:
            if isinstance(stop, _Cancelled) and aborting():  # a second signal: no kill command, EOF and close
                killed, how = False, "not killed (run aborted): the connection was closed"
                try:
                    chan.shutdown_write()
                except (OSError, SSHException, EOFError):
                    pass
            else:
                killed, how = self._kill_remote(err.pgids, client, time.monotonic() + KILL_BUDGET_S, watchdog,
                                                chan if hold_stdin else None)
            try:  # what the command printed as it was stopped (a burn-in prints the windows it measured)
                while chan.recv_ready():
                    data = chan.recv(65536)
                    if not data:
                        break
                    out.append(data)
                chan.close()
            except Exception:
                pass
            if not killed:
                self._close_client()
            if isinstance(stop, _Cancelled):
                msg = f"interrupted ({running.reason}) while running on {name}: {running.what}"
            else:
                msg = f"command timed out after {timeout:g}s: {running.what}"
            if how:
                msg += f"; {how}"
            exc = Interrupted(name, msg) if isinstance(stop, _Cancelled) else CommandTimeout(name, msg)
            exc.stdout, exc.stderr = b"".join(out), err.value()  # type: ignore[attr-defined]
            raise exc from None
        except (SSHException, EOFError, OSError) as e:
            self._close_client()
            raise _lost(name, f"connection lost during command ({e}): {running.what}", err.pgids) from None
        finally:
            watchdog.cancel()
        duration = time.monotonic() - start
        got_status = chan.exit_status_ready() and chan.exit_status >= 0  # closing sets the event too
        if not got_status and chan.eof_received:
            # the server closed the channel, or the transport died and closed it: paramiko closes the
            # channels before it marks itself inactive, so give it a moment to tell the two apart
            end = time.monotonic() + 1.0
            while transport.is_active() and time.monotonic() < end:
                time.sleep(0.02)
            got_status = chan.exit_status_ready() and chan.exit_status >= 0
        if not got_status:
            if watchdog.fired or not transport.is_active() or not chan.eof_received:
                self._close_client()
                raise _lost(name, f"connection lost during command: {running.what}", err.pgids)
            rc = -1  # channel closed without exit-status: the remote shell died of a signal
        else:
            rc = chan.recv_exit_status()
        chan.close()
        return CommandResult(rc=rc, stdout=b"".join(out), stderr=err.value(), duration_s=duration)

    def _kill_remote(self, pgids: list[int], client: paramiko.SSHClient, kill_deadline: float, watchdog: _Watchdog,
                     held: paramiko.Channel | None = None) -> tuple[bool, str]:
        """Kill remote process groups ``pgids`` by ``kill_deadline`` (monotonic s): EOF on ``held`` (the
        running channel of a watched command: its watchdog kills its group), then the kill command on a
        new channel, else (the server refuses a second session, e.g. ``MaxSessions 1``) on a fresh
        connection. Returns (killed, how): killed is True when a kill command completed; how is "" for
        the plain path, else one clause for the operator's message."""
        if held is not None:
            try:
                held.shutdown_write()  # the watchdog reads EOF: it kills its probe's group itself
            except (OSError, SSHException, EOFError):
                pass
        if not pgids or any(p <= 1 for p in pgids):
            return False, "remote process group unknown (no pgid marker received): processes may be left running"
        watchdog.arm(kill_deadline - time.monotonic() + 0.5, client)
        refused = ""
        try:
            transport = client.get_transport()
            if transport is None or not transport.is_active():
                return False, "could not confirm the remote processes were killed (host not answering)"
            try:
                kchan = transport.open_session(timeout=max(0.1, kill_deadline - time.monotonic()))
            except paramiko.ChannelException as e:
                refused = f"the server refused a second session ({e.text or e}; MaxSessions?)"
            else:
                try:
                    kchan.exec_command(kill_group_command(pgids))
                    while not kchan.exit_status_ready():
                        if time.monotonic() >= kill_deadline or not transport.is_active():
                            return False, "could not confirm the remote processes were killed (host not answering)"
                        kchan.status_event.wait(0.1)
                    return True, ""
                finally:
                    kchan.close()
        except (SSHException, EOFError, OSError):
            return False, "could not confirm the remote processes were killed (host not answering)"
        finally:
            watchdog.cancel()
        # the server answered but refused the channel: a fresh connection of its own (MaxSessions counts
        # sessions per connection)
        fresh = SSHTransport(self.host, known_hosts=self.known_hosts_arg, accept_new_host_keys=self.accept_new_host_keys,
                             connect_timeout=min(self.connect_timeout, KILL_BUDGET_S / 2), ssh_config=self.ssh_config)
        try:
            fresh.run(kill_group_command(pgids), timeout=KILL_BUDGET_S)
            return True, f"{refused}: killed through a fresh connection"
        except GpuacceptError as e:
            return False, (f"{refused}, and a fresh connection failed too ({e.msg if hasattr(e, 'msg') else e}): "
                           f"process group(s) {', '.join(map(str, pgids))} could not be killed and may still run")
        finally:
            fresh.close()


def _lost(name: str, msg: str, pgids: list[int]) -> HostUnreachable:
    """HostUnreachable for a connection lost mid-command; ``pgids``: the remote groups it left behind."""
    e = HostUnreachable(name, msg)
    e.pgids = list(pgids)  # type: ignore[attr-defined]
    return e


class _Cancelled(Exception):
    pass


class _Timeout(Exception):
    pass
