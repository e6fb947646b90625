"""Transports: run one command on one host. One backend per file (local.py, ssh.py).

Contract (every backend)::

    t = get_transport(host, known_hosts=None, accept_new_host_keys=False)
    res = t.run(command: str, stdin: bytes = b"", timeout: float = 600.0) -> CommandResult
    t.close()

``command`` is a POSIX shell command line (run by ``/bin/sh -c`` on the host). The command runs in its
own process group; on timeout the whole group is killed (TERM, then KILL) and CommandTimeout is raised.
stdout and stderr are drained together, so a command writing megabytes to both never deadlocks.
Errors raise the subclasses of gpuaccept.errors.TransportError, each naming the host.

``progress=fn`` calls ``fn(doc)`` with each live progress line the command writes to stderr, as it arrives
(``GPUACCEPT-PROGRESS {json}``, gpuaccept.transport.progress); stderr is still returned whole at the end.

``hold_stdin=True`` keeps the command's stdin open (no EOF) until it ends: a command run under the node-side
watchdog (``probes/_watchdog.py``) reads EOF there as "the controller is gone" and kills its process group.

Every command in flight is in one registry (:func:`running`); :func:`cancel_all` (the interrupt handler's
kill-all, see gpuaccept.runner.interrupt) makes each backend kill its remote process group and raise Interrupted,
whichever thread waits on it (multi-node ranks included); a command still connecting (TCP connect, SSH handshake,
authentication, opening its session) is cut the same way: the backend registers closers with
:meth:`Running.on_cancel`, which the canceller thread runs within moments of the cancel (a signal handler only sets
an event and queues), so paramiko's blocked waits return at once. After a second signal (``abort``) a new
command is cancelled as it starts. Every command is logged at DEBUG on the
``gpuaccept.run`` logger, in one place (:func:`tracked`): ``RUN <host> <command> rc=<rc> <seconds>s``.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

#: logger of every remote command (``-o log_cli=true --log-cli-level=DEBUG`` shows them)
RUN_LOG = logging.getLogger("gpuaccept.run")


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

    def run(self, command: str, stdin: bytes = b"", timeout: float = 600.0, hold_stdin: bool = False,
            progress: Callable[[dict], None] | None = None, label: str | None = None) -> CommandResult:
        """Run ``command`` (a POSIX shell command line) with ``stdin`` fed to it, at most ``timeout``
        seconds of wall clock; ``hold_stdin``: no EOF on stdin until the command ends; ``progress``: see
        the module docstring; ``label``: what messages call the command (default: the command, cut short). Raises
        TransportError subclasses (CommandTimeout on timeout, Interrupted when cancelled)."""
        ...

    def close(self) -> None:
        """Release connections; the transport may be used again afterwards (it reconnects)."""
        ...


def short_command(command: str, limit: int = 60) -> str:
    """``command`` on one line, whitespace collapsed, cut to ``limit`` characters (for messages)."""
    flat = " ".join(command.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@dataclass(eq=False)
class Running:
    """One command in flight: ``host`` (inventory name), ``command``, ``started`` (monotonic s), ``label`` (what
    messages call it, e.g. ``probe gpu_inventory``; default the command, cut short: :attr:`what`).
    ``cancelled`` is set by :meth:`cancel` (:func:`cancel_all` on a signal; the prefetcher and a collective for one
    host); ``reason`` then says why (``SIGINT``)."""

    host: str
    command: str
    started: float = field(default_factory=time.monotonic)
    cancelled: threading.Event = field(default_factory=threading.Event)
    reason: str = ""
    label: str | None = None
    _hooks: dict = field(default_factory=dict, repr=False)  # on_cancel key -> closer
    _hook_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def what(self) -> str:
        """The command as messages name it: its label, else the command on one line, cut short."""
        return self.label or short_command(self.command)

    def cancel(self, reason: str) -> None:
        """Ask the backend waiting on this command to kill it and raise Interrupted naming ``reason``
        (within 0.1 s); the closers registered with :meth:`on_cancel` run in the canceller thread. Safe from a
        signal handler (sets an event and queues this command: nothing that takes a lock or does I/O)."""
        self.reason = reason
        self.cancelled.set()
        if self._hooks:
            _CANCEL_Q.put(self)  # SimpleQueue.put is reentrant: safe in a signal handler

    def on_cancel(self, fn: Callable[[], Any]) -> object:
        """Have ``fn()`` called (once, in the canceller thread; its exceptions ignored) when this command is
        cancelled, at once if it already is: e.g. close the socket a connect or an SSH handshake blocks on.
        Returns a key for :meth:`off_cancel`."""
        _start_canceller()
        key = object()
        with self._hook_lock:
            self._hooks[key] = fn
        if self.cancelled.is_set():
            _CANCEL_Q.put(self)
        return key

    def off_cancel(self, key: object) -> bool:
        """Unregister what :meth:`on_cancel` registered; True when its function has run (it had been
        cancelled): once this returns, the function is not running and will not run."""
        with self._hook_lock:
            return self._hooks.pop(key, None) is None

    def _run_hooks(self) -> None:
        with self._hook_lock:
            hooks, self._hooks = list(self._hooks.values()), {}
            for fn in hooks:
                try:
                    fn()
                except Exception:  # noqa: BLE001 - best effort: the resource may be gone already
                    pass


_RUNNING: set[Running] = set()
# re-entrant: cancel_all runs in a signal handler, which may interrupt this thread while it holds the lock
_REG_LOCK = threading.RLock()
#: this thread's commands in flight, innermost last (:func:`current`)
_LOCAL = threading.local()
#: commands cancelled whose on_cancel closers are to run (by the canceller thread, :func:`_start_canceller`)
_CANCEL_Q: "queue.SimpleQueue[Running]" = queue.SimpleQueue()
_CANCELLER: list[threading.Thread] = []
_CANCELLER_LOCK = threading.Lock()


def _start_canceller() -> None:
    """Start the canceller thread (a daemon; once per process) that runs cancelled commands' closers."""
    if _CANCELLER and _CANCELLER[0].is_alive():
        return
    with _CANCELLER_LOCK:
        if _CANCELLER and _CANCELLER[0].is_alive():
            return

        def loop() -> None:
            while True:
                _CANCEL_Q.get()._run_hooks()

        t = threading.Thread(target=loop, name="gpuaccept-canceller", daemon=True)
        t.start()
        _CANCELLER[:] = [t]


class _AbortHooks:
    """What the canceller runs after a second signal (:func:`on_abort`)."""

    hooks: list[Callable[[], Any]] = []

    @classmethod
    def _run_hooks(cls) -> None:
        for fn in list(cls.hooks):
            try:
                fn()
            except Exception:  # noqa: BLE001 - best effort
                pass


def on_abort(fn: Callable[[], Any]) -> None:
    """Have ``fn()`` called in the canceller thread when the run is aborted (``cancel_all(..., abort=True)``: a
    second signal), e.g. close every connection so that no thread waits on one (the node-side watchdog and
    agent take EOF as "kill and clean up")."""
    _start_canceller()
    _AbortHooks.hooks.append(fn)


def current() -> list[Running]:
    """The commands this thread is in (:func:`tracked` nests: a probe whose agent starts first), innermost last."""
    return list(getattr(_LOCAL, "stack", ()))


#: the run's interruption: ``reason`` (e.g. "SIGINT") once cancel_all ran; ``abort`` after a second signal
_STATE: dict[str, Any] = {"reason": None, "abort": False}


def interruption() -> str | None:
    """The signal name the run was interrupted by (:func:`cancel_all`), else None."""
    return _STATE["reason"]


def aborting() -> bool:
    """True after ``cancel_all(..., abort=True)`` (a second signal): run no clean-up commands either."""
    return bool(_STATE["abort"])


def reset_interruption() -> None:
    """Forget an interruption (a new run in the same process, e.g. under pytester in-process)."""
    _STATE.update(reason=None, abort=False)


def running() -> list[Running]:
    """The commands in flight now, on every host and thread."""
    with _REG_LOCK:
        return list(_RUNNING)


def cancel_all(reason: str, abort: bool = False) -> list[str]:
    """Cancel every command in flight (``reason``: e.g. ``SIGTERM``): each backend's wait loop notices
    within 0.1 s, kills the command's remote process group and raises Interrupted; remember the reason
    (:func:`interruption`: gpuaccept.runner.host then starts no new command). ``abort``: a second signal (no
    clean-up commands either, :func:`aborting`; commands started later are cancelled as they start). Commands
    still connecting are cut too (their :meth:`Running.on_cancel` closers). Returns the hosts whose commands were
    cancelled. Safe to call from a signal handler (sets events, queues)."""
    _STATE["reason"] = _STATE["reason"] or reason
    if abort and not _STATE["abort"]:
        _STATE["abort"] = True
        if _AbortHooks.hooks:
            _CANCEL_Q.put(_AbortHooks)  # type: ignore[arg-type]
    with _REG_LOCK:
        todo = list(_RUNNING)
    for r in todo:
        r.cancel(reason)
    return sorted({r.host for r in todo})


def tracked(host: str, command: str, fn: Callable[[Running], CommandResult], label: str | None = None) -> CommandResult:
    """Run ``fn(running)`` registered as a command in flight on ``host``, and log it at DEBUG as
    ``RUN <host> <command> rc=<rc> <seconds>s`` (rc is the exception's name when it raised). Every
    backend's run() goes through here: the one place commands are tracked and logged. ``label``: what
    messages call the command (:attr:`Running.what`)."""
    r = Running(host, command, label=label)
    with _REG_LOCK:
        _RUNNING.add(r)
    if _STATE["abort"]:  # after a second signal nothing new runs, clean-up included: it stops as it starts
        r.cancel(_STATE["reason"] or "abort")
    stack = getattr(_LOCAL, "stack", None)
    if stack is None:
        stack = _LOCAL.stack = []
    stack.append(r)
    rc: Any = "?"
    try:
        res = fn(r)
        rc = res.rc
        return res
    except BaseException as e:
        rc = type(e).__name__
        raise
    finally:
        if stack and stack[-1] is r:
            stack.pop()
        elif r in stack:
            stack.remove(r)
        with _REG_LOCK:
            _RUNNING.discard(r)
        if RUN_LOG.isEnabledFor(logging.DEBUG):
            RUN_LOG.debug("RUN %s %s rc=%s %.3fs", host, command, rc, time.monotonic() - r.started)


def get_transport(
    host: Any,
    *,
    known_hosts: str | None = None,
    accept_new_host_keys: bool = False,
    connect_timeout: float = 10.0,
    ssh_config: str | None = None,
) -> Transport:
    """Return the transport for ``host`` (an inventory ``Host``).

    ``host.connection == "local"`` gives a LocalTransport (commands run on this machine); anything
    else gives an SSHTransport. ``known_hosts``: extra known_hosts file (path) read besides
    ~/.ssh/known_hosts, and where newly accepted keys are appended; ``accept_new_host_keys``: trust
    unknown host keys on first use (changed keys are always refused); ``connect_timeout``: seconds for
    TCP connect, SSH banner and authentication each; ``ssh_config``: OpenSSH client config file read for
    HostName, Port, User, IdentityFile, ProxyJump, ProxyCommand (default ``~/.ssh/config``; inventory vars win).
    Nothing is connected until the first run().
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
        ssh_config=ssh_config,
    )
