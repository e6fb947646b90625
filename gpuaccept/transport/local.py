"""LocalTransport: run commands on this machine with ``/bin/sh -c`` (inventory ``connection=local``)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from typing import Any, Callable

from gpuaccept.probes._proc import group_alive, processes
from gpuaccept.errors import CommandTimeout, Interrupted, TransportError
from gpuaccept.transport.progress import ProgressLines
from gpuaccept.transport import CommandResult, Running, tracked

#: seconds between SIGTERM and SIGKILL when a command times out
KILL_GRACE_S = 2.0
# the node-side watchdog announces its probe's process group on stderr (see gpuaccept.transport.ssh)
_MARKER_RE = re.compile(rb"^__GPUACCEPT_PGID__=\d+\n", re.M)


def _session_groups(sid: int) -> set[int]:
    """Process groups with a live member in session ``sid`` (from /proc; ``{sid}`` where there is none):
    the command's own group and those it made with setpgid, e.g. the watchdog's probe group."""
    return {sid} | {p.pgid for p in processes() if p.sid == sid}


def _group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process is in process group ``pgid`` (gpuaccept.probes._proc)."""
    return group_alive(pgid)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _StderrDrain:
    """Reads a command's stderr on a thread of its own, feeding each chunk to a ProgressLines as it arrives
    (communicate() then reads stdout alone: ``proc.stderr`` is taken from it)."""

    def __init__(self, proc: subprocess.Popen, progress: Callable[[dict], None]):
        self.file, proc.stderr = proc.stderr, None
        self.lines = ProgressLines(progress)
        self.chunks: list[bytes] = []
        self.thread = threading.Thread(target=self._read, daemon=True, name="stderr-drain")
        self.thread.start()

    def _read(self) -> None:
        fd = self.file.fileno()
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                return
            if not data:
                return
            self.chunks.append(data)
            self.lines.feed(data)

    def result(self, wait_s: float, give_up: bool = False) -> bytes:
        """All of stderr once its writers are gone. Raises subprocess.TimeoutExpired when a writer still holds
        it after ``wait_s`` (as communicate() would), unless ``give_up``: then what was read so far."""
        self.thread.join(wait_s)
        if self.thread.is_alive():
            if not give_up:
                raise subprocess.TimeoutExpired("stderr", wait_s)
            try:
                self.file.close()  # something outside the killed groups holds the pipe: stop waiting for it
            except OSError:
                pass
        return b"".join(self.chunks)


class LocalTransport:
    """Runs commands on the controller itself, for hosts with ``connection == "local"``.

    ``host``: an inventory Host (only ``host.name`` is used, to name it in errors). Each command runs
    as ``/bin/sh -c command`` in a new session (so in its own process group); on timeout the whole
    group is sent SIGTERM, then SIGKILL after KILL_GRACE_S seconds. Thread-safe: runs are serialised.
    """

    def __init__(self, host: Any):
        self.host = host
        self._lock = threading.Lock()

    def run(self, command: str, stdin: bytes = b"", timeout: float = 600.0, hold_stdin: bool = False,
            progress: Callable[[dict], None] | None = None, label: str | None = None) -> CommandResult:
        """Run ``command`` (POSIX shell command line) locally.

        ``stdin``: bytes fed to the command, then its stdin is closed (``hold_stdin``: kept open, no EOF,
        until the command ends; ``stdin`` must then be empty). ``timeout``: seconds of wall clock; past it
        the process group is killed and CommandTimeout is raised (with the output read so far in its
        ``stdout``/``stderr`` attributes). Cancelled (gpuaccept.transport.cancel_all): the group is killed
        and Interrupted is raised. Returns a CommandResult whose ``rc`` is negative when the shell was
        killed by a signal. ``progress``: called with each live progress line of the command's stderr as it
        arrives (gpuaccept.transport.progress; stderr is then drained by a thread of its own, and still returned
        whole). Raises TransportError if /bin/sh cannot start, ValueError for stdin with ``hold_stdin``.
        """
        if hold_stdin and stdin:
            raise ValueError("hold_stdin takes no stdin data")
        with self._lock:
            return tracked(self.host.name, command,
                           lambda r: self._run(command, stdin, timeout, hold_stdin, r, progress), label)

    def _run(self, command: str, stdin: bytes, timeout: float, hold_stdin: bool, running: Running,
             progress: Callable[[dict], None] | None = None) -> CommandResult:
        name = self.host.name
        start = time.monotonic()
        held = None
        if hold_stdin:  # our end of the pipe stays open: the command reads EOF only when we (or this process) go
            rfd, held = os.pipe()
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", command],
                stdin=rfd if hold_stdin else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            if held is not None:
                os.close(held)
            raise TransportError(name, f"cannot start /bin/sh: {e}") from None
        finally:
            if hold_stdin:
                os.close(rfd)
        pgid = proc.pid  # start_new_session: the shell leads its own session and process group
        done = threading.Event()
        cancelled: list[bool] = []

        def watch() -> None:  # the interrupt handler's kill-all: kill the groups, communicate() then returns
            while not done.wait(0.1):
                if running.cancelled.is_set():
                    cancelled.append(True)
                    self._signal_groups(proc, pgid)
                    return

        threading.Thread(target=watch, daemon=True, name=f"cancel-{name}").start()
        drain = _StderrDrain(proc, progress) if progress is not None else None
        try:
            out, err = proc.communicate(None if hold_stdin else stdin, timeout=timeout)
            if drain is not None:
                err = drain.result(max(0.0, start + timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            done.set()
            out, err = self._kill(proc, pgid)
            if drain is not None:
                err = drain.result(5.0, give_up=True)
            exc = CommandTimeout(name, f"command timed out after {timeout:g}s: {running.what}")
            exc.stdout, exc.stderr = out, err  # type: ignore[attr-defined]
            raise exc from None
        except BaseException:
            done.set()
            self._kill(proc, pgid)
            if drain is not None:
                drain.result(5.0, give_up=True)
            raise
        finally:
            done.set()
            if held is not None:
                os.close(held)
        if cancelled or (running.cancelled.is_set() and proc.returncode != 0):
            exc = Interrupted(name, f"interrupted ({running.reason}) while running on {name}: {running.what}"
                                    + (" (process group killed)" if cancelled else ""))
            exc.stdout, exc.stderr = out, err  # type: ignore[attr-defined]  # what it printed as it was stopped
            raise exc
        head, tail = err[: 64 * 1024], err[64 * 1024:]
        err = _MARKER_RE.sub(b"", head, count=2) + tail
        return CommandResult(rc=proc.returncode, stdout=out, stderr=err, duration_s=time.monotonic() - start)

    @staticmethod
    def _kill(proc: subprocess.Popen, pgid: int) -> tuple[bytes, bytes]:
        """TERM every group of the command's session, wait up to KILL_GRACE_S for them to vanish, KILL
        them, reap; return output."""
        LocalTransport._signal_groups(proc, pgid)
        try:
            out, err = proc.communicate(timeout=5.0)
        except subprocess.TimeoutExpired:
            # something that left the group (setsid) still holds our pipes: give up on its output
            for f in (proc.stdout, proc.stderr):
                if f is not None:
                    f.close()
            proc.kill()
            proc.wait()
            out, err = b"", b""
        return out or b"", err or b""

    @staticmethod
    def _signal_groups(proc: subprocess.Popen, pgid: int) -> None:
        """TERM every group of the command's session, wait up to KILL_GRACE_S for them to vanish, KILL them."""
        groups = _session_groups(pgid)
        for g in groups:
            _signal_group(g, signal.SIGTERM)
        end = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < end:
            proc.poll()  # reap the leader so a zombie does not keep the group "alive"
            if proc.returncode is not None and not any(_group_alive(g) for g in groups):
                break
            time.sleep(0.05)
        for g in groups | _session_groups(pgid):
            _signal_group(g, signal.SIGKILL)

    def close(self) -> None:
        """Nothing to release; present for the Transport protocol."""

    def __repr__(self) -> str:
        return f"LocalTransport({self.host.name!r})"
