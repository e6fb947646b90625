"""One host of the run: start its agent once, run the probes there, parse their JSON, keep the answers.

A :class:`HostRunner` wraps a :class:`~gpuaccept.config.inventory.Host` and its transport. Its first probe starts the
host's node-side agent (gpuaccept.runner.agent, ``probes/_agent.py``): one command makes a fresh folder
(``$TMPDIR/gpuaccept.<random>``, ``mkdir -m 700``), starts the node's Python on it and ships the agent's files
on its stdin (each probe's files follow with its first run); that one session and that one Python then serve
every probe of the run, and the agent removes its folder at :meth:`HostRunner.close`, in the same session.

Every probe runs under the watchdog's rules (``probes/_watchdog.py``) in a process group of its own, forked by
the agent: killed at its deadline plus :data:`WATCHDOG_GRACE_S`, at the controller's limit, or as soon as the
controller's connection goes away (the agent's stdin reaches EOF).

A connection lost in the middle of a probe is retried once on a fresh connection: the groups the lost
session left are killed by their known pgid first; the host is written off only when that reconnect fails.
Once the run is interrupted (gpuaccept.runner.interrupt) no new command starts.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import sys
import threading
import time
from typing import Any, Callable

from gpuaccept.transport import shell
from gpuaccept.errors import (AuthError, CommandTimeout, DocumentNotKept, HostKeyError, HostUnreachable, Interrupted,
                              NodeHeld, ProbeError)
from gpuaccept.config.inventory import Host
from gpuaccept.config.profiles import probe_args
from gpuaccept.transport import CommandResult
from gpuaccept.transport import aborting, interruption, short_command
from gpuaccept.runner.parse import parse_probe_output, partial_document
from gpuaccept import __version__
from gpuaccept.runner.replay import _folder_fd, probe_key, replay_probe, save_probe
from gpuaccept.runner.agent import Agent, lock_identity
from gpuaccept.runner.ship import PROBE_DIR, WATCHDOG_GRACE_S, probe_files

__all__ = ["HostRunner", "PROBE_DIR", "PROBE_ENV", "PROBE_STARTED", "PROBE_PROGRESS", "PROBE_FINISHED", "PROBE_HOOK",
           "WATCHDOG_GRACE_S", "DEADLINE_ARGS", "probe_deadline", "probe_files", "parse_probe_output",
           "replay_probe", "save_probe", "keep_probe", "DocumentNotSaved"]

log = logging.getLogger(__name__)

# Variables a probe run gets on every node: unbuffered logs, no .pyc litter in the shipped folder.
PROBE_ENV = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
#: the controller's variables every probe gets too, when set: the host watch's bound for the run
#: (gpuaccept/probes/_hostwatch.py SHARE_ENV)
FORWARDED_ENV = ("GPUACCEPT_HOST_BUSY_SHARE",)


def probe_env() -> dict[str, str]:
    """:data:`PROBE_ENV` and the controller's :data:`FORWARDED_ENV` variables that are set (values quoted where
    the command is made, gpuaccept.transport.shell)."""
    return {**PROBE_ENV, **{k: os.environ[k] for k in FORWARDED_ENV if os.environ.get(k)}}
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


class DocumentNotSaved(OSError):
    """A probe document that could not be kept: ``path`` (the file it was to be), ``why`` (one line)."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path}: {why}")
        self.path, self.why = path, why


def _why_not_saved(directory: str, err: OSError) -> str:
    """Why saving under ``directory`` (``<report folder>/probes/<host>``) failed with ``err``: a ``probes`` or host
    entry that is a symbolic link is named with where it points (not followed), else the system's reason."""
    top = os.path.dirname(os.path.normpath(directory))
    for part in (top, os.path.normpath(directory)):
        if os.path.islink(part):
            try:
                to = os.readlink(part)
            except OSError:
                to = "?"
            return f"{part} is a symbolic link (to {to}), not followed"
        if os.path.lexists(part) and not os.path.isdir(part):
            return f"{part} is not a folder"
    return err.strerror or str(err)


def keep_probe(directory: str, name: str, args: dict | None, doc: dict, timing: dict | None = None) -> str:
    """Keep a probe's document as ``<directory>/<name>-<args digest>.json`` (as gpuaccept.runner.replay.save_probe
    writes it: a replay reads it) and return its path; ``timing`` (:meth:`HostRunner.probe_now`: ``started`` and
    ``ended``, Unix s on the controller's clock, ``node_s``: the probe's seconds as the node's agent timed them)
    is kept beside the document as ``"timing"``. Unlike ``save_probe``, a document that cannot be kept is
    said: raises :class:`DocumentNotSaved` naming the file and why (a ``probes`` or host folder that is a
    symbolic link, which is never followed; a full disk; no permission). No half-written file is left. A report
    folder that is gone is made again."""
    path = os.path.join(directory, probe_key(name, args) + ".json")
    try:
        # the report folder itself is the operator's (gpuaccept.config.outputs): made again when it went, as the
        # reporter makes its files again; its ``probes`` and host parts are never followed through a symlink
        os.makedirs(os.path.dirname(os.path.dirname(os.path.normpath(directory))) or ".", exist_ok=True)
        fd = _folder_fd(directory)
    except OSError as e:
        raise DocumentNotSaved(path, _why_not_saved(directory, e)) from None
    final = os.path.basename(path)
    tmp = final + ".tmp"
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=fd)
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"probe": name, "args": args or {}, "release": __version__, "doc": doc,
                       **({"timing": timing} if timing else {})}, f, indent=1, default=str)
        os.replace(tmp, final, src_dir_fd=fd, dst_dir_fd=fd)
    except OSError as e:
        try:
            if not os.path.islink(os.path.join(directory, tmp)):
                os.unlink(tmp, dir_fd=fd)
        except OSError:
            pass
        why = (f"{os.path.join(directory, tmp)} is a symbolic link, not followed" if e.errno == errno.ELOOP
               else e.strerror or str(e))
        raise DocumentNotSaved(path, why) from None
    finally:
        os.close(fd)
    return path


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

    ``run_id``: the run's id; with it the host's agent takes the node's lock for the run at its start
    (gpuaccept.runner.agent.lock_identity, ``probes/_nodelock.py``): a node held by another run raises NodeHeld
    there, and at once for every later probe or command of the run (nothing started on the node). A replayed
    host takes no lock.
    """

    def __init__(self, host: Host, transport_factory: Callable[[Host], Any], probe_timeout: float = 300.0, sku_override: str | None = None, profile: str = "standard",
                 save_dir: str | None = None, run_id: str | None = None):
        self.host = host
        self.name = host.name
        # On the controller itself, without an explicit interpreter, probes run under the controller's
        # Python (where gpuaccept's nvidia-ml-py was installed) rather than whatever python3 is on PATH.
        self.python = (sys.executable if host.connection == "local"
                       and "ansible_python_interpreter" not in host.vars else host.python)
        self._factory = transport_factory
        self._transport = None
        self._agent: Agent | None = None  # the node-side agent serving this host's probes (gpuaccept.runner.agent)
        self._started: dict[str, float] = {}  # probe name -> Unix time its last run here started
        self._dead: Exception | None = None
        self._dead_at = ""  # UTC time of day the host was written off
        self._held: NodeHeld | None = None  # another run holds the node: every request of this run raises it
        self._cache: dict[str, dict] = {}
        self._lock = threading.RLock()
        self.probe_timeout = probe_timeout
        self.sku_override = sku_override
        self.profile = profile
        self.save_dir = save_dir
        self.replay_dir = host.vars.get("gpuaccept_replay")
        #: why a saved document with other arguments answered a probe (gpuaccept.runner.replay), for the report
        self.replay_notes: list[str] = []
        #: the run's identity for the node's lock (None: no lock: no run id, or a replayed host)
        self.identity = lock_identity(run_id, os.path.abspath(save_dir or "")) if run_id and not self.replay_dir \
            else None

    # -- transport ---------------------------------------------------------------------------
    def run(self, command: str, stdin: bytes = b"", timeout: float | None = None, hold_stdin: bool = False,
            cleanup: str | None = None, rerun: bool = True,
            progress: Callable[[dict], None] | None = None, label: str | None = None,
            call: Callable[[Any], CommandResult] | None = None) -> CommandResult:
        """Run a shell command on the host (``timeout`` s, default the probe timeout; ``hold_stdin``: see
        gpuaccept.transport). A connection lost mid-command is retried once on a fresh connection, after
        killing the groups it left and running ``cleanup`` (a shell command, e.g. removing a half-written
        folder); the command is then run again, unless ``rerun`` is False (one rank of a multi-host
        collective: its peers are gone), when the loss is raised as HostUnreachable and the host stays in
        the run (``progress``: the transport's live progress callback; ``label``: what messages call the command,
        e.g. ``probe gpu_inventory``, in place of its shell text; ``call``: ``call(transport)`` in place of the
        transport's ``run``, under the same rules: the probe request of the host's agent). Raises the TransportError
        subclasses (sticky for this run once the host proved
        unreachable, its key refused or auth failed), Interrupted once the run is interrupted."""
        if self.replay_dir:
            raise ProbeError(self.name, f"replayed host (gpuaccept_replay: {self.replay_dir}) runs no commands")
        with self._lock:
            if self._held is not None:  # another run holds the node: said again, nothing tried
                raise NodeHeld(self.name, self._held.msg, self._held.evidence)
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
            call = call or (lambda t: t.run(command, stdin=stdin, timeout=timeout, hold_stdin=hold_stdin,
                                            progress=progress, label=label))
            try:
                try:
                    return call(self._transport)
                except HostUnreachable as lost:
                    if getattr(lost, "pgids", None) is None or interruption():
                        raise
                    self._recover(lost, cleanup)
                    if not rerun:
                        raise _Reported(HostUnreachable(self.name, f"{lost.msg} (reconnected; the lost command's "
                                                                   "processes were killed; not run again)")) from None
                    return call(self._transport)
            except _Reported as r:
                raise r.error from None
            except NodeHeld as e:
                self._held = e
                raise
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

    def _ensure_shipped(self) -> str:
        """The host's agent's folder, where the probes' files are written (the agent started now when it is not
        running)."""
        self.run("agent", label="start the agent", call=lambda t: self._agent_on(t).dir or "")
        return self._agent.dir

    def _agent_on(self, transport, start: bool = True) -> Agent:
        """The host's agent on ``transport``; ``start``: started now (probes shipped in the same command) when
        none runs (else :meth:`Agent.probe` starts it under the probe's limit)."""
        if self._agent is None or self._agent.transport is not transport:
            self._agent = Agent(self.name, transport, self.python, probe_env(), self.identity)
        if start and not self._agent.alive:
            self._agent.start()
        return self._agent

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
            self._started[name] = started = time.time()
            limit = timeout or self.probe_timeout
            # a rank of a multi-host collective (nnodes > 1) is not run again alone after a lost connection
            rerun = int((args or {}).get("nnodes") or 1) <= 1
            progress = lambda doc: [cb(self.name, name, doc) for cb in PROBE_PROGRESS]  # noqa: E731
            try:
                res = self._probe_command(name, args, limit, env, rerun, progress)
            except Interrupted as e:  # keep what the probe printed as it was stopped (a burn-in: its windows)
                e.partial = partial_document(getattr(e, "stdout", b""))  # type: ignore[attr-defined]
                if e.partial is not None and self.save_dir:
                    try:
                        keep_probe(os.path.join(self.save_dir, self.name), name, args, e.partial)
                    except DocumentNotSaved as lost:
                        e.msg = f"{e.msg}; its partial raw document not saved: {lost}"
                        e.args = (e.msg,)
                raise
            finally:
                for cb in PROBE_FINISHED: cb(self.name, name)  # noqa: E701
        doc = parse_probe_output(self.name, name, res, self.python)
        if self.save_dir:
            self._keep(name, args, doc, {"started": round(started, 3), "ended": round(time.time(), 3),
                                         "node_s": round(res.duration_s, 3)})
        return doc

    def _keep(self, name: str, args: dict, doc: dict, timing: dict | None = None) -> None:
        """Keep ``doc`` under ``save_dir`` (:func:`keep_probe`). A document measured but not kept is an error of
        the test, not a silent gap: raises ProbeError (cause class tool: neither the node's nor the operator's
        fault) "raw document not saved: <path>: <why>", with ``path`` and ``why`` as evidence."""
        try:
            keep_probe(os.path.join(self.save_dir, self.name), name, args, doc, timing)
        except DocumentNotSaved as e:
            log.error("%s: probe %s: raw document not saved: %s", self.name, name, e)
            raise DocumentNotKept(self.name, f"{name}: raw document not saved: {e.path}: {e.why}",
                             {"path": e.path, "why": e.why}) from None

    def _probe_command(self, name: str, args: dict, limit: float, env: dict[str, str] | None, rerun: bool,
                       progress: Callable[[dict], None]) -> CommandResult:
        """The probe request of :meth:`probe_now` (the caller holds the host's lock) to the host's agent
        (gpuaccept.runner.agent: one session and one Python per host, the probes shipped when it starts), under
        :meth:`run`'s rules (a lost connection retried once on a fresh one, hosts written off). A probe whose args
        carry a ``marker`` is exec'd (found on the node by its command line). Raises ValueError for an
        environment variable name that is not one (gpuaccept.transport.shell)."""
        env = dict(env or {})
        for k in env:
            why = shell.bad_env_name(k)
            if why:
                raise ValueError(f"environment variable {why}")
        argv = [f"{name}.py", json.dumps(args or {})]
        return self.run(f"probe {name}", timeout=limit, rerun=rerun, label=f"probe {name}",
                        call=lambda t: self._agent_on(t, False).probe(name, argv, limit, WATCHDOG_GRACE_S, env,
                                                                     "marker" in (args or {}), progress))

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

    def cached(self, name: str, args: dict | None = None) -> dict | None:
        """The document :meth:`cached_probe` remembers for ``name`` and ``args``, or None (never run this run,
        forgotten, or remembered as an error). Runs nothing."""
        with self._lock:
            hit = self._cache.get(f"{name}:{json.dumps(args or {}, sort_keys=True)}")
        return hit.get("ok") if hit else None

    def forget_cached(self) -> None:
        """Drop the results :meth:`cached_probe` keeps (the plugin does once the last test of the run that may
        touch this host has ended: gpuaccept.plugin.release); a later :meth:`cached_probe` runs its probe again."""
        with self._lock:
            self._cache.clear()

    # -- GPU identity ------------------------------------------------------------------------
    def gpu_inventory(self) -> dict:
        """The gpu_inventory probe's document (NVML, and the PCI scan under ``host_sysfs_root`` where the inventory
        sets it, as host_memory reads EDAC there), cached for the run."""
        root = self.host.vars.get("host_sysfs_root")
        return self.cached_probe("gpu_inventory", {"sysfs": root} if root else None)

    @property
    def gpus_declared(self) -> bool:
        """True when the inventory (or --sku) says this host has GPUs: then a missing GPU fails."""
        v = self.host.vars
        return bool(self.sku_override or v.get("gpu_sku") or v.get("gpus_per_node"))

    def close(self) -> None:
        """Ask the agent to remove its folder and exit, in its own session (best effort; not after a second
        interrupt: then its session is closed and the agent, reading EOF, cleans up by itself), and close the
        transport."""
        with self._lock:
            if self._agent is not None:
                if self._agent.alive and self._dead is None and not aborting():
                    self._agent.close(CLEANUP_TIMEOUT_S if not interruption() else 5.0)
                elif self._agent.session is not None:
                    self._agent._drop()
                self._agent = None
            if self._transport is not None:
                try:
                    self._transport.close()
                except Exception:
                    pass
            self._transport = None

