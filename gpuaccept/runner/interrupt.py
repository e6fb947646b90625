"""Interrupted runs: SIGINT (Ctrl-C), SIGTERM (a CI timeout, Slurm, ``timeout(1)``) and SIGHUP (the operator's
SSH session or terminal closed) handled alike.

First signal:
  * every command in flight is cancelled (gpuaccept.transport.cancel_all): each one's remote process group is
    killed on its host (every host of a multi-node collective: their ranks run through HostRunner.probe too) and
    the waiting test gets :class:`~gpuaccept.errors.Interrupted`; no new command starts on any host;
  * the test that was running becomes an error ``interrupted (SIGINT) while running on <host>`` (also when it
    caught the error itself, as the multi-node code does), no new test starts (``session.shouldstop``), the
    reports are written as at any end of a run (tests that never ran: ``not run: run interrupted``), and
    pytest exits with 2 (interrupted);
  * under pytest-xdist the controller passes the signal on to its workers, which do all of the above for
    their own tests; a worker waiting for work stops at once.
An xdist worker whose controller is gone without a word (SIGKILL, a crash: the worker is reparented) does
the same within :data:`PARENT_POLL_S` as for a signal named "controller gone": its commands are cancelled, so
the node-side agents see their sessions close and kill their probes (probes/_watchdog.py,
CONTROLLER_GONE_CLEAN_S), instead of after execnet's own 5 s wait and SIGINT.
After SIGHUP the terminal is gone (a write to it fails with EIO, to a pipe whose reader went with it EPIPE), so
whatever pointed at it is first pointed at /dev/null (:func:`detach_terminal`): the reports are the run's record.
A signal the run was started with ignored (``nohup`` ignores SIGHUP) stays ignored.
A signal within :data:`SAME_SIGNAL_S` of the first is the same interruption (Ctrl-C reaches the controller
and its workers at once, and the controller passes it on). A later second signal aborts at once: the
running test is recorded as interrupted, no clean-up command is sent, every SSH connection is closed (the
node-side watchdog, ``probes/_watchdog.py``, and agent kill what is left when the connections close), nothing
waits on a node any more, and pytest exits once the reports are written (a second signal during that wind-down
cuts the waits on nodes, not the reports).
A first signal also ends every connection attempt in progress (TCP connect, SSH handshake, authentication) at
once, not at its ``connect_timeout`` (gpuaccept.transport.ssh).
"""
from __future__ import annotations

import os
import select
import signal
import stat
import threading
import time
from typing import Any

import pytest

from gpuaccept.causes import CAUSE_KEY
from gpuaccept.errors import ERROR_KEY, Interrupted
from gpuaccept.probes._proc import processes
from gpuaccept.transport import cancel_all, reset_interruption

#: seconds after a first signal in which another one counts as the same interruption, not as "abort now"
SAME_SIGNAL_S = 1.0
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: seconds between an xdist worker's checks that its controller (its parent process) is still there. Chosen:
#: one getppid() call, far below the node's CONTROLLER_GONE_CLEAN_S.
PARENT_POLL_S = 0.2


def terminal_ids(fds: tuple[int, ...] = (1, 2)) -> set[tuple[str, int, int]]:
    """What ``fds`` are connected to, where that is a terminal or a pipe: ``("tty", st_rdev, 0)`` or
    ``("pipe", st_dev, st_ino)``; files and sockets are left out (a report redirected to a file survives a
    hang-up)."""
    out = set()
    for fd in fds:
        key = _kind(fd)
        if key is not None:
            out.add(key)
    return out


def _kind(fd: int, check_tty: bool = True) -> tuple[str, int, int] | None:
    """``fd`` as :func:`terminal_ids` names it; ``check_tty=False`` takes any character device (a terminal that
    hung up is no longer a tty to ``isatty``: tcgetattr fails with EIO)."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    if stat.S_ISCHR(st.st_mode) and (not check_tty or os.isatty(fd)):
        return ("tty", st.st_rdev, 0)
    if stat.S_ISFIFO(st.st_mode):
        return ("pipe", st.st_dev, st.st_ino)
    return None


def _gone(fd: int) -> bool:
    """True when nobody can read what is written to ``fd`` any more: a terminal that hung up (no longer a tty
    to ``isatty``), a pipe whose reader closed (poll reports POLLERR). A ``kill -HUP`` from a live terminal
    leaves its output alone."""
    try:
        if stat.S_ISCHR(os.fstat(fd).st_mode):
            return not os.isatty(fd)
        p = select.poll()
        p.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in p.poll(0))
    except OSError:
        return True


def detach_terminal(ids: set[tuple[str, int, int]]) -> None:
    """Point every file descriptor of this process that is connected to one of ``ids`` (:func:`terminal_ids`)
    and whose reader is gone (:func:`_gone`) at /dev/null, so that writes meant for a terminal that hung up (SIGHUP) neither fail (EIO; EPIPE on a pipe
    whose reader went with it) nor block. Every such descriptor: pytest's output capture keeps a copy of the
    terminal's and puts it back between tests. Best effort: errors are ignored (nobody could be told)."""
    if not ids:
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        fds = [int(e) for e in os.listdir("/proc/self/fd")]
    except OSError:
        return
    try:
        for fd in fds:
            if fd != null and _kind(fd, check_tty=False) in ids and _gone(fd):
                try:
                    os.dup2(null, fd)
                except OSError:
                    pass
    finally:
        os.close(null)


def worker_pids() -> list[int]:
    """PIDs of this process's children (under pytest-xdist's controller: its workers), from /proc."""
    me = os.getpid()
    return [p.pid for p in processes() if p.ppid == me]


class InterruptPlugin:
    """Signal handling for one pytest process (controller or xdist worker); see the module docstring.

    Registered by :func:`install` from gpuaccept.plugin's ``pytest_configure``; restores the previous
    handlers at ``pytest_unconfigure``."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.reason: str | None = None
        self.first_at = 0.0
        self.at: float | None = None  # Unix time of the first signal (the reports say when the run stopped)
        self.running: str | None = None  # the test that ran at the first signal
        self.session: pytest.Session | None = None
        self.current: pytest.Item | None = None
        self.in_loop = False
        self.loop_done = False
        self.hits: dict[str, set[str]] = {}  # nodeid -> hosts whose commands were cancelled
        self.previous: dict[int, Any] = {}
        self.aborted: pytest.Item | None = None  # the test a second signal cut short
        # what a hang-up takes away: the terminal of stdout and stderr (an xdist worker's stdout is its channel
        # to the controller, a pipe that outlives the terminal: only its stderr)
        self.terminal = terminal_ids((2,) if hasattr(config, "workerinput") else (1, 2))

    @property
    def is_controller(self) -> bool:
        """True in pytest-xdist's controller (it runs no test: its workers do). Asked late: xdist registers
        its ``dsession`` plugin after gpuaccept's pytest_configure."""
        return self.config.pluginmanager.hasplugin("dsession")

    # -- signals -------------------------------------------------------------------------------------
    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for s in SIGNALS:
            if signal.getsignal(s) is signal.SIG_IGN:
                continue  # nohup (SIGHUP), a background job of a non-interactive shell (SIGINT): left ignored
            self.previous[s] = signal.signal(s, self._on_signal)

    def watch_parent(self) -> None:
        """In an xdist worker: a daemon thread that notices the controller (the parent) gone and then cancels
        every command, as a first signal would ("controller gone")."""
        parent = os.getppid()

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(PARENT_POLL_S)
            if self.reason is None:
                self._begin_interruption("controller gone")

        threading.Thread(target=watch, name="gpuaccept-controller-watch", daemon=True).start()

    def _begin_interruption(self, reason: str, now: float | None = None) -> str:
        """The first interruption (a signal, or the controller gone): remember it, cancel every command in
        flight (their hosts are the running test's), and let no new test start. Returns ``interrupted
        (<reason>)``."""
        self.reason, self.first_at, self.at = reason, time.monotonic() if now is None else now, time.time()
        self.running = self.current.nodeid if self.current is not None else None
        hosts = cancel_all(reason)
        if self.current is not None:
            self.hits.setdefault(self.current.nodeid, set()).update(hosts)
        why = f"interrupted ({reason})"
        if self.session is not None:
            self.session.shouldstop = why
        return why

    def restore(self) -> None:
        for s, h in self.previous.items():
            try:
                signal.signal(s, h if h is not None else signal.SIG_DFL)
            except (ValueError, TypeError):
                pass
        self.previous = {}

    def _forward(self, signum: int) -> None:
        if self.is_controller:
            for pid in worker_pids():
                try:
                    os.kill(pid, signum)
                except OSError:
                    pass

    def _on_signal(self, signum: int, _frame) -> None:
        name = signal.Signals(signum).name
        now = time.monotonic()
        if signum == signal.SIGHUP:  # the terminal is gone: its writes would fail from now on
            detach_terminal(self.terminal)
        if self.reason is None:
            why = self._begin_interruption(name, now)
            dsession = self.config.pluginmanager.getplugin("dsession")
            if dsession is not None and not getattr(dsession, "shouldstop", False):
                dsession.shouldstop = why
            self._forward(signum)
            if self.is_controller or self.loop_done:
                return  # the controller waits for its workers' reports; a finishing run just finishes
            if self.current is None:
                raise KeyboardInterrupt(why)  # collecting, or a worker waiting for work: stop now
            return
        if now - self.first_at < SAME_SIGNAL_S:
            return
        # a second signal: abort at once. Every connection is closed and nothing waits on a node any more
        # (gpuaccept.transport.on_abort, gpuaccept.runner.fanout.close_all); the reports are still written
        self.aborted = self.current
        cancel_all(name, abort=True)
        self._forward(signum)
        self.restore()
        if self.loop_done and not self.in_loop:
            return  # winding down (the reports are written after the hosts are let go): cut nothing of it
        raise KeyboardInterrupt(f"aborted ({name} after {self.reason})")

    # -- hooks ---------------------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session):
        self.in_loop = True
        try:
            return (yield)
        finally:
            self.in_loop, self.loop_done = False, True

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        self.current = item
        try:
            return (yield)
        finally:
            self.current = None

    def _phase(self, item: pytest.Item):
        try:
            res = yield
        except (Interrupted, KeyboardInterrupt):
            raise  # an abort (second signal) must stop the run: pytest_sessionfinish reports the test
        except BaseException as e:
            if self.reason and item.nodeid in self.hits:
                raise self._error(item) from e
            raise
        if self.reason and item.nodeid in self.hits:
            raise self._error(item)
        return res

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        return (yield from self._phase(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        return (yield from self._phase(item))

    def _error(self, item: pytest.Item) -> Interrupted:
        hosts = sorted(self.hits.get(item.nodeid) or ())
        params = getattr(getattr(item, "callspec", None), "params", {}) or {}
        if "node" in params:  # a test of one host; commands cut on others were fetched ahead (gpuaccept.runner.prefetch)
            hosts = [str(params["node"])]
        elif not hosts:
            hosts = ["the controller"]
        where = ", ".join(hosts)
        self.hits.pop(item.nodeid, None)
        return Interrupted(where, f"interrupted ({self.reason}) while running on {where}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """A test cut off by an abort (second signal) never reported its call: report it as interrupted."""
        item, self.aborted = self.aborted, None
        if item is None or not self.reason:
            return
        err = self._error(item)
        msg = str(err)
        rep = pytest.TestReport(nodeid=item.nodeid, location=item.location, keywords={}, outcome="failed",
                                longrepr=msg, when="call", user_properties=[(ERROR_KEY, msg),
                                                                            (CAUSE_KEY, [err.cause.to_dict()])])
        self.config.hook.pytest_runtest_logreport(report=rep)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.restore()


def install(config: pytest.Config) -> InterruptPlugin:
    """Register the InterruptPlugin for ``config`` and take over SIGINT, SIGTERM and SIGHUP (main thread only)."""
    reset_interruption()
    plugin = InterruptPlugin(config)
    config.pluginmanager.register(plugin, "gpuaccept-interrupt")
    plugin.install()
    if hasattr(config, "workerinput"):
        plugin.watch_parent()
    return plugin
