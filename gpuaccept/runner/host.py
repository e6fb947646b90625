"""One host of the run: ship the probes there once, run them, parse their JSON, keep the answers.

A :class:`HostRunner` wraps a :class:`~gpuaccept.config.inventory.Host` and its transport. Probes are shipped as a tar
stream on stdin into a fresh folder (``$TMPDIR/gpuaccept.<random>``, created with ``mkdir -m 700``) on first
use and removed by :meth:`HostRunner.close`.

Every probe runs under the node-side watchdog (``probes/_watchdog.py``): in a process group of its own,
killed at its deadline plus :data:`WATCHDOG_GRACE_S`, or as soon as the controller's connection goes away
(the probe's stdin is held open by the controller; EOF there means the controller is gone).

A connection lost in the middle of a command is retried once on a fresh connection: the groups the lost
command left are killed by their known pgid (and a half-shipped folder removed) first; the host is written
off only when that reconnect fails. Once the run is interrupted (gpuaccept.runner.interrupt) no new command starts.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import secrets
import sys
import threading
import time
from typing import Any, Callable

from gpuaccept.transport import shell
from gpuaccept.errors import AuthError, CommandTimeout, HostKeyError, HostUnreachable, Interrupted, ProbeError
from gpuaccept.config.inventory import Host
from gpuaccept.config.profiles import probe_args
from gpuaccept.transport import CommandResult
from gpuaccept.transport import aborting, interruption, short_command
from gpuaccept.runner.parse import parse_probe_output, partial_document
from gpuaccept.runner.replay import replay_probe, save_probe
from gpuaccept.runner.ship import (DIR_MARKER, PROBE_DIR, SHIP_FAILED_MARKER, UNPACK_AND_WATCH, UNPACK_MORE_AND_WATCH,
                                   WATCHDOG_GRACE_S, enter_folder, folder_gone, probe_archive, probe_files,
                                   probe_files_all, watchdog_args)

__all__ = ["HostRunner", "PROBE_DIR", "PROBE_ENV", "PROBE_STARTED", "PROBE_PROGRESS", "PROBE_FINISHED", "PROBE_HOOK",
           "WATCHDOG_GRACE_S", "DEADLINE_ARGS", "probe_deadline", "probe_files", "parse_probe_output",
           "replay_probe", "save_probe"]

log = logging.getLogger(__name__)

# Variables a probe run gets on every node: unbuffered logs, no .pyc litter in the shipped folder.
PROBE_ENV = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
# Connection failures after which a host is not retried for the rest of the run (each retry would
# cost a connect timeout per test; the first error is repeated instead).
_STICKY = (HostUnreachable, HostKeyError, AuthError)
# After a timeout, how long a trivial command may take before the host is declared hung, seconds.
LIVENESS_TIMEOUT_S = 15.0
#: seconds for removing the shipped folder at the end of the run (per host)
CLEANUP_TIMEOUT_S = 30.0


# Called as fn(host, probe, timeout_s) when a probe starts on a node (the progress display listens).
PROBE_STARTED: list[Callable[[str, str, float], None]] = []
# Called as fn(host, probe, doc) with each live progress line of a running probe (gpuaccept.transport.progress).
PROBE_PROGRESS: list[Callable[[str, str, dict], None]] = []
# Called as fn(host, probe) when a probe's command on a node has returned (or failed), before it is judged.
PROBE_FINISHED: list[Callable[[str, str], None]] = []
# The run's prefetcher (gpuaccept.runner.fanout.Prefetcher.probe), set by the plugin with --forks > 0 and no -n: called as
# fn(runner, name, args, timeout, env) in place of HostRunner.probe_now, it answers from a result fetched ahead
# or runs the probe here and starts the same one on the other hosts whose test is next.
PROBE_HOOK: list[Callable[..., dict]] = []
#: probe -> the argument that carries its own wall-clock deadline (s): :meth:`HostRunner.probe` sets it from the
#: limit it runs the probe under (:func:`probe_deadline`) where the caller gives none
DEADLINE_ARGS = {"nccl_allreduce": "deadline_s"}


def probe_deadline(limit_s: float) -> int:
    """The deadline (whole s) of a probe of :data:`DEADLINE_ARGS` run under a ``limit_s`` s limit: 10 % or 10 s
    (whichever is more) before it, at least 20 s. The probe's own deadline fires first, so a hang is reported
    with the probe's account of it (which ranks hung, in which phase) rather than as the runner's plain timeout;
    both kill every rank. Example: 300 s -> 270 s."""
    return max(20, int(limit_s - max(10.0, 0.1 * limit_s)))


class _Reported(Exception):
    """Carries an error past HostRunner.run's sticky-host rule (a lost connection whose host answered again)."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


class HostRunner:
    """A host plus its transport, with probe results cached for the run.

    ``transport_factory(host)`` returns a transport (see gpuaccept.transport). ``probe_timeout`` is the
    default wall-clock limit in seconds for one probe. ``sku_override`` is ``--sku`` (a host with one has GPUs:
    :attr:`gpus_declared`). ``profile`` names a gpuaccept.config.profiles entry. ``save_dir``: where
    every probe document is kept (``<save_dir>/<host>/<probe>-<args digest>.json``). A host whose inventory sets
    ``gpuaccept_replay: DIR`` runs nothing: its probes answer from documents saved that way (a past run's
    ``probes/<host>`` folder), so a run can be judged again, e.g. against new thresholds.
    """

    def __init__(self, host: Host, transport_factory: Callable[[Host], Any], probe_timeout: float = 300.0, sku_override: str | None = None, profile: str = "standard",
                 save_dir: str | None = None):
        self.host = host
        self.name = host.name
        # On the controller itself, without an explicit interpreter, probes run under the controller's
        # Python (where gpuaccept's nvidia-ml-py was installed) rather than whatever python3 is on PATH.
        self.python = (sys.executable if host.connection == "local"
                       and "ansible_python_interpreter" not in host.vars else host.python)
        self._factory = transport_factory
        self._transport = None
        self._dir: str | None = None
        self._shipped: list[str] = []  # folder names (below the node's $TMPDIR) created for the probes, for close()
        self._have: set[str] = set()  # probe files in the folder self._dir (see probe_files)
        self._started: dict[str, float] = {}  # probe name -> Unix time its last run here started
        self._dead: Exception | None = None
        self._dead_at = ""  # UTC time of day the host was written off
        self._cache: dict[str, dict] = {}
        self._lock = threading.RLock()
        self.probe_timeout = probe_timeout
        self.sku_override = sku_override
        self.profile = profile
        self.save_dir = save_dir
        self.replay_dir = host.vars.get("gpuaccept_replay")
        #: why a saved document with other arguments answered a probe (gpuaccept.runner.replay), for the report
        self.replay_notes: list[str] = []

    # -- transport ---------------------------------------------------------------------------
    def run(self, command: str, stdin: bytes = b"", timeout: float | None = None, hold_stdin: bool = False,
            cleanup: str | None = None, rerun: bool = True,
            progress: Callable[[dict], None] | None = None, label: str | None = None) -> CommandResult:
        """Run a shell command on the host (``timeout`` s, default the probe timeout; ``hold_stdin``: see
        gpuaccept.transport). A connection lost mid-command is retried once on a fresh connection, after
        killing the groups it left and running ``cleanup`` (a shell command, e.g. removing a half-written
        folder); the command is then run again, unless ``rerun`` is False (one rank of a multi-host
        collective: its peers are gone), when the loss is raised as HostUnreachable and the host stays in
        the run (``progress``: the transport's live progress callback; ``label``: what messages call the command,
        e.g. ``probe gpu_inventory``, in place of its shell text). Raises the TransportError
        subclasses (sticky for this run once the host proved
        unreachable, its key refused or auth failed), Interrupted once the run is interrupted."""
        if self.replay_dir:
            raise ProbeError(self.name, f"replayed host (gpuaccept_replay: {self.replay_dir}) runs no commands")
        with self._lock:
            if self._dead is not None:  # the first error, dated: later tests never read as if it just happened
                raise type(self._dead)(self.name, f"written off at {self._dead_at} UTC, not tried again this run: "
                                                  f"{self._dead.msg}")
            reason = interruption()
            if reason:
                raise Interrupted(self.name, f"interrupted ({reason}) while running on {self.name}: "
                                             f"{label or short_command(command)} not started")
            if self._transport is None:
                self._transport = self._factory(self.host)
            timeout = timeout or self.probe_timeout
            try:
                try:
                    return self._transport.run(command, stdin=stdin, timeout=timeout, hold_stdin=hold_stdin,
                                               progress=progress, label=label)
                except HostUnreachable as lost:
                    if getattr(lost, "pgids", None) is None or interruption():
                        raise
                    self._recover(lost, cleanup)
                    if not rerun:
                        raise _Reported(HostUnreachable(self.name, f"{lost.msg} (reconnected; the lost command's "
                                                                   "processes were killed; not run again)")) from None
                    return self._transport.run(command, stdin=stdin, timeout=timeout, hold_stdin=hold_stdin,
                                               progress=progress, label=label)
            except _Reported as r:
                raise r.error from None
            except _STICKY as e:
                self._dead, self._dead_at = e, time.strftime("%H:%M:%S", time.gmtime())
                raise
            except CommandTimeout as e:
                # a command that ran long is one thing, a host that stopped answering another: ask once
                # more, briefly; if even `true` gets no answer, report the host as hung from now on
                try:
                    self._transport.run("true", timeout=LIVENESS_TIMEOUT_S)
                except Exception as again:  # noqa: BLE001 - any failure here means the host is gone
                    self._dead = HostUnreachable(self.name, f"stopped answering ({e.msg}; then {again})")
                    self._dead_at = time.strftime("%H:%M:%S", time.gmtime())
                raise

    def _recover(self, lost: HostUnreachable, cleanup: str | None) -> None:
        """After ``lost`` (a connection lost mid-command): reconnect once, kill the process groups the lost
        command left (``lost.pgids``), run ``cleanup``. Raises HostUnreachable (the host is written off)
        when the fresh connection fails too."""
        pgids = list(getattr(lost, "pgids", None) or [])
        log.warning("%s: %s; retrying once on a fresh connection (killing process groups %s first)",
                    self.name, lost.msg, pgids or "none known")
        t = self._transport
        steps = []
        if pgids and hasattr(t, "kill_groups"):
            from gpuaccept.transport.ssh import kill_group_command  # only SSH connections get lost
            steps.append(f"({kill_group_command(pgids)})")  # a subshell: the kill command execs, the cleanup follows
        if cleanup:
            steps.append(cleanup)
        try:
            t.close()
            t.run("; ".join(steps) if steps else "true", timeout=LIVENESS_TIMEOUT_S)
        except Exception as again:  # noqa: BLE001 - any failure of the fresh connection writes the host off
            raise HostUnreachable(self.name, f"{lost.msg}; a fresh connection failed too: "
                                             f"{getattr(again, 'msg', again)}") from None

    @property
    def lock(self) -> threading.RLock:
        """The host's lock: whoever holds it is the only one running commands there (gpuaccept.runner.fanout holds it
        for a whole probe fetched ahead, so that nothing else runs on the host in between)."""
        return self._lock

    def lock_held(self) -> bool:
        """True when this thread holds :attr:`lock` (e.g. inside :meth:`cached_probe`)."""
        return self._lock._is_owned()  # type: ignore[attr-defined]  # both RLock implementations have it

    @property
    def written_off(self) -> bool:
        """True once the host proved unreachable (or its key was refused, or auth failed) for this run."""
        return self._dead is not None

    def _new_folder(self) -> tuple[str, str]:
        """A fresh folder for the probes: ``(shell prefix that makes it, enters it and sets $d to its path, the
        cleanup command that removes it)``. The name is chosen here (mkdir fails on anything existing, symlinks
        included), so a half-shipped folder can be removed when the connection drops during the copy, and every
        one at close()."""
        d = f"gpuaccept.{secrets.token_hex(6)}"
        self._shipped.append(d)
        return f'd="${{TMPDIR:-/tmp}}/{d}" && mkdir -m 700 "$d" && cd "$d" && ', f'rm -rf "${{TMPDIR:-/tmp}}/{d}"'

    def _ensure_shipped(self) -> str:
        """The folder holding every probe file, shipped now when there is none (one command; the local
        connection's way, where a pipe cannot feed the tar stream and then be held open for the watchdog)."""
        if self._dir is None:
            py = shell.quote(self.python)
            make, cleanup = self._new_folder()
            cmd = (make +
                   f'{py} -c "import sys,tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode=\'r|\')'
                   '.extractall(); sys.path.insert(0, \'\'); import _watchdog; _watchdog.sweep_stale()" && echo "$d"')
            res = self.run(cmd, stdin=probe_archive(), timeout=self.probe_timeout,
                           cleanup=cleanup)
            out = res.stdout.decode(errors="replace").strip().splitlines()
            if res.rc != 0 or not out:
                err = res.stderr.decode(errors="replace").strip().splitlines()
                why = f"python interpreter '{self.python}' not found (set ansible_python_interpreter)" \
                    if res.rc == 127 else (err[-1] if err else f"rc {res.rc}")
                raise ProbeError(self.name, f"could not ship probes: {why}")
            self._dir = out[-1]
            self._have = set(probe_files_all())
        return self._dir

    def _ship_and_run(self, name: str, args: dict, limit: float, env: dict[str, str], rerun: bool,
                      progress: Callable[[dict], None] | None, files: tuple[str, ...]) -> CommandResult:
        """Ship ``files`` (probe_files) and run probe ``name`` in one remote command (one round trip and one
        Python start fewer than shipping first): into a new folder (``mkdir``) when the host has none yet,
        else beside the files already there; print :data:`DIR_MARKER` and the folder, then
        ``python -c UNPACK_AND_WATCH`` (unpack stdin, become the watchdog). A connection lost mid-command gets
        a new folder removed (``cleanup``) before the retry, as :meth:`_ensure_shipped`. Returns the probe's
        CommandResult without the marker line (``progress``: the probe's live progress lines, see :meth:`run`),
        or, when the folder given is gone, the command's result (rc 125, :data:`FOLDER_GONE_MARKER`) as it came.
        Raises ProbeError "could not ship probes: ..." when the folder could not be made or filled, or the
        interpreter is missing (a new folder is then removed at close())."""
        if self._dir is None:
            make, cleanup = self._new_folder()
            code = UNPACK_AND_WATCH
        else:
            make = enter_folder(self._dir) + 'd="$PWD" && '
            cleanup, code = None, UNPACK_MORE_AND_WATCH
        cmd = (make + f'echo "{DIR_MARKER.decode()}$d" && '
               + shell.env_command({**PROBE_ENV, **env},
                                   [self.python, "-c", code, *watchdog_args(name, args, limit)], exec_=True))
        res = self.run(cmd, stdin=probe_archive(files), timeout=limit, hold_stdin=True,
                       cleanup=cleanup, rerun=rerun, progress=progress, label=f"probe {name}")
        if self._dir is not None and folder_gone(res):
            return res
        # the marker line, wherever it is: a login shell may print a banner first (ForceCommand, ~/.bashrc)
        before, marker, after = (b"\n" + res.stdout).partition(b"\n" + DIR_MARKER)
        first, _, rest = after.partition(b"\n")
        err = res.stderr.decode(errors="replace").strip().splitlines()
        if not marker:
            said = (err or before.decode(errors="replace").strip().splitlines() or [""])[-1][:300]
            raise ProbeError(self.name, f"could not ship probes: the shell exited with rc {res.rc} before making "
                                        f"the folder" + (f": {said}" if said else " and printed nothing"))
        folder = first.decode(errors="replace").strip()
        failed = [ln for ln in err if ln.startswith(SHIP_FAILED_MARKER)]
        if failed:
            raise ProbeError(self.name, f"could not ship probes into {folder}: "
                                        f"{failed[-1][len(SHIP_FAILED_MARKER):][:300]}")
        if res.rc == 127 and not rest.strip():
            raise ProbeError(self.name, f"could not ship probes: python interpreter '{self.python}' not found "
                                        f"(set ansible_python_interpreter)")
        if before.strip():
            log.debug("%s: the login shell printed before the command's output: %r", self.name, before[:200])
        self._dir = folder
        self._have.update(files)
        return dataclasses.replace(res, stdout=rest)

    def probe(self, name: str, args: dict | None = None, timeout: float | None = None,
              env: dict[str, str] | None = None) -> dict:
        """Run probe ``name`` (a file ``gpuaccept/probes/<name>.py``) with ``args``; return its JSON dict.

        ``timeout``: seconds of wall clock (default the node's ``probe_timeout``): the controller kills the
        probe's process groups then, and the node-side watchdog WATCHDOG_GRACE_S later on its own. ``env``:
        extra environment variables for the probe, laid over PROBE_ENV (values are quoted here). A probe of
        :data:`DEADLINE_ARGS` gets its deadline argument from ``timeout`` (:func:`probe_deadline`) unless ``args``
        sets one. With the run's prefetcher (:data:`PROBE_HOOK`) the result may have been fetched ahead, while another
        host's test ran the same probe: it is taken from there (waiting for it if still running; its error raised
        here as if it had happened now), else the probe runs now (:meth:`probe_now`).
        Raises ProbeError (crash, no JSON, ``failed``, killed by the watchdog), CommandTimeout, Interrupted,
        or another TransportError.
        """
        if not os.path.exists(os.path.join(PROBE_DIR, f"{name}.py")):
            raise ValueError(f"no probe named {name}")
        args = probe_args(self.profile, name, args)
        deadline_arg = DEADLINE_ARGS.get(name)
        if deadline_arg and deadline_arg not in args:
            args[deadline_arg] = probe_deadline(timeout or self.probe_timeout)
        if self.replay_dir:
            return replay_probe(self.name, self.replay_dir, name, args, self.replay_notes)
        hook = PROBE_HOOK[-1] if PROBE_HOOK else None
        if hook is not None:
            return hook(self, name, args, timeout, env)
        return self.probe_now(name, args, timeout, env)

    def probe_now(self, name: str, args: dict, timeout: float | None = None,
                  env: dict[str, str] | None = None) -> dict:
        """:meth:`probe` run now on this host, never from a prefetched result: ``args`` as the profile made them
        (gpuaccept.config.profiles.probe_args). The first probe on an SSH host ships the probes in the same command.
        Saves the document under ``save_dir``. Raises as :meth:`probe`."""
        with self._lock:
            for cb in PROBE_STARTED: cb(self.name, name, timeout or self.probe_timeout)  # noqa: E701
            self._started[name] = time.time()
            limit = timeout or self.probe_timeout
            # a rank of a multi-host collective (nnodes > 1) is not run again alone after a lost connection
            rerun = int((args or {}).get("nnodes") or 1) <= 1
            progress = lambda doc: [cb(self.name, name, doc) for cb in PROBE_PROGRESS]  # noqa: E731
            try:
                res = self._probe_command(name, args, limit, env, rerun, progress)
            except Interrupted as e:  # keep what the probe printed as it was stopped (a burn-in: its windows)
                e.partial = partial_document(getattr(e, "stdout", b""))  # type: ignore[attr-defined]
                if e.partial is not None and self.save_dir:
                    save_probe(os.path.join(self.save_dir, self.name), name, args, e.partial)
                raise
            finally:
                for cb in PROBE_FINISHED: cb(self.name, name)  # noqa: E701
        doc = parse_probe_output(self.name, name, res, self.python)
        if self.save_dir:
            save_probe(os.path.join(self.save_dir, self.name), name, args, doc)
        return doc

    def _probe_command(self, name: str, args: dict, limit: float, env: dict[str, str] | None, rerun: bool,
                       progress: Callable[[dict], None]) -> CommandResult:
        """The node command of :meth:`probe_now` (the caller holds the host's lock): over SSH, the files the
        probe needs and the host lacks are shipped with it (:func:`probe_files`: a first probe ships a sixth of
        the folder); a probe whose files are all there runs in the folder; a folder that vanished is shipped
        again."""
        for attempt in (1, 2):
            if self.host.connection == "local":  # a pipe cannot feed and hold stdin: every file, first
                d, missing = self._ensure_shipped(), ()
            else:
                d = self._dir
                missing = tuple(f for f in probe_files(name) if f not in self._have)
            if missing:
                res = self._ship_and_run(name, args, limit, env or {}, rerun, progress, missing)
            else:
                # exec: the watchdog leads the command's process group; it runs the probe in a group of its own
                cmd = (enter_folder(d)
                       + shell.env_command({**PROBE_ENV, **(env or {})},
                                           [self.python, "_watchdog.py", *watchdog_args(name, args, limit)],
                                           exec_=True))
                res = self.run(cmd, timeout=limit, hold_stdin=True, rerun=rerun, progress=progress,
                               label=f"probe {name}")
            if not (folder_gone(res) and attempt == 1):
                break
            log.warning("%s: the shipped probes folder %s is gone (removed by a /tmp cleaner?); shipping again",
                        self.name, d)
            self._dir, self._have = None, set()
        return res

    def last_started(self, name: str) -> float | None:
        """Unix time (the controller's clock) at which the last run of probe ``name`` on this host started, or
        None. For a result fetched ahead (gpuaccept.runner.prefetch) that is when it ran, not when the test took it:
        a test that judges what happened on the node during its probe (kernel log events) asks from then."""
        return self._started.get(name)

    def cached_probe(self, name: str, args: dict | None = None) -> dict:
        """:meth:`probe`, run once per run and remembered (errors are remembered too)."""
        key = f"{name}:{json.dumps(args or {}, sort_keys=True)}"
        with self._lock:
            if key not in self._cache:
                try:
                    self._cache[key] = {"ok": self.probe(name, args)}
                except Exception as e:  # remembered so every test of this host reports the same cause
                    self._cache[key] = {"err": e}
            hit = self._cache[key]
        if "err" in hit:
            raise hit["err"]
        return hit["ok"]

    # -- GPU identity ------------------------------------------------------------------------
    def gpu_inventory(self) -> dict:
        """The gpu_inventory probe's document (NVML), cached for the run."""
        return self.cached_probe("gpu_inventory")

    @property
    def gpus_declared(self) -> bool:
        """True when the inventory (or --sku) says this host has GPUs: then a missing GPU fails."""
        v = self.host.vars
        return bool(self.sku_override or v.get("gpu_sku") or v.get("gpus_per_node"))

    def close(self) -> None:
        """Remove the shipped probes (best effort; not after a second interrupt) and close the transport."""
        with self._lock:
            if self._transport is not None:
                if self._shipped and self._dead is None and not aborting():
                    try:  # every folder made for the probes (one, unless a ship failed or timed out)
                        self._transport.run('cd "${TMPDIR:-/tmp}" && ' + shell.command(["rm", "-rf", "--", *self._shipped]),
                                            timeout=CLEANUP_TIMEOUT_S if not interruption() else 5.0)
                    except Exception:
                        pass
                try:
                    self._transport.close()
                except Exception:
                    pass
            self._transport = None
            self._dir = None
            self._have = set()
            self._shipped = []

