"""One host of the run: ship the probes there once, run them, parse their JSON, keep the answers.

A :class:`HostRunner` wraps a :class:`~gpuaccept.inventory.Host` and its transport. Probes are shipped as a tar
stream on stdin into a fresh folder (``$TMPDIR/gpuaccept.<random>``, created with ``mkdir -m 700``) on first
use and removed by :meth:`HostRunner.close`.

Every probe runs under the node-side watchdog (``probes/_watchdog.py``): in a process group of its own,
killed at its deadline plus :data:`WATCHDOG_GRACE_S`, or as soon as the controller's connection goes away
(the probe's stdin is held open by the controller; EOF there means the controller is gone).

A connection lost in the middle of a command is retried once on a fresh connection: the groups the lost
command left are killed by their known pgid (and a half-shipped folder removed) first; the host is written
off only when that reconnect fails. Once the run is interrupted (gpuaccept.interrupt) no new command starts.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import secrets
import tarfile
import sys
import threading
from typing import Any, Callable

from . import shell
from .errors import AuthError, CommandTimeout, HostKeyError, HostUnreachable, Interrupted, ProbeError
from .inventory import Host
from .profiles import probe_args
from .thresholds import SkuSpec
from .transport import CommandResult
from .transport import aborting, interruption, short_command

log = logging.getLogger(__name__)

PROBE_DIR = os.path.join(os.path.dirname(__file__), "probes")
# Variables a probe run gets on every node: unbuffered logs, no .pyc litter in the shipped folder.
PROBE_ENV = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
# Connection failures after which a host is not retried for the rest of the run (each retry would
# cost a connect timeout per test; the first error is repeated instead).
_STICKY = (HostUnreachable, HostKeyError, AuthError)
# After a timeout, how long a trivial command may take before the host is declared hung, seconds.
LIVENESS_TIMEOUT_S = 15.0
#: seconds the node-side watchdog waits past a probe's own timeout before it kills the probe's group itself:
#: the controller's kill (gpuaccept.transport.ssh.KILL_BUDGET_S, 6 s) plus margin comes first
WATCHDOG_GRACE_S = 15.0
#: seconds for removing the shipped folder at the end of the run (per host)
CLEANUP_TIMEOUT_S = 30.0


# Called as fn(host, probe, timeout_s) when a probe starts on a node (the progress display listens).
PROBE_STARTED: list[Callable[[str, str, float], None]] = []
# Called as fn(host, probe, doc) with each live progress line of a running probe (gpuaccept.progress_channel).
PROBE_PROGRESS: list[Callable[[str, str, dict], None]] = []


def probe_archive() -> bytes:
    """The probes folder as an uncompressed tar stream (``*.py`` files only)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for fn in sorted(os.listdir(PROBE_DIR)):
            if fn.endswith(".py"):
                tar.add(os.path.join(PROBE_DIR, fn), arcname=fn)
    return buf.getvalue()


def parse_probe_output(host: str, probe: str, res: CommandResult, python: str) -> dict:
    """Turn a probe's CommandResult into its JSON document, or raise ProbeError naming host and cause.

    The document is the last non-empty stdout line. rc 127 means the interpreter is missing.
    """
    lines = [ln for ln in res.stdout.decode(errors="replace").splitlines() if ln.strip()]
    err_tail = (res.stderr.decode(errors="replace").strip().splitlines() or [""])[-1][:300]
    if res.rc == 127 and not lines:
        raise ProbeError(host, f"{probe}: python interpreter '{python}' not found "
                               f"(set ansible_python_interpreter): {err_tail}")
    doc = None
    if lines:
        try:
            doc = json.loads(lines[-1])
        except ValueError:
            doc = None
    if not isinstance(doc, dict):
        raise ProbeError(host, f"{probe}: no JSON document (rc {res.rc}): {err_tail or 'no output'}")
    if doc.get("failed") or res.rc != 0:
        raise ProbeError(host, f"{probe}: {doc.get('msg') or f'rc {res.rc}: {err_tail}'}")
    return doc


def _probe_key(name: str, args: dict | None) -> str:
    digest = hashlib.sha1(json.dumps(args or {}, sort_keys=True).encode()).hexdigest()[:10]
    return f"{name}-{digest}"


#: probe -> the arguments that say when or for how long it ran, not what it measures: a replay matches a saved
#: document without them. xid_events' since_epoch is the clock at the test's start; nccl_allreduce's
#: deadline_s is derived from --probe-timeout (suites/test_nccl.py); burnin's seconds from --burnin-minutes (its
#: document carries seconds_requested and its windows, which the judging reads). Every other argument must match.
REPLAY_TIME_ARGS = {"xid_events": ("since_epoch",), "nccl_allreduce": ("deadline_s",), "burnin": ("seconds",)}


def _replay_match(directory: str, name: str, args: dict | None) -> list[str]:
    """The saved documents of ``name`` in ``directory`` whose arguments equal ``args`` but for the probe's
    :data:`REPLAY_TIME_ARGS` (file names, sorted); a file that cannot be read is no match."""
    ignored = REPLAY_TIME_ARGS.get(name)
    if not ignored or not os.path.isdir(directory):
        return []
    want = {k: v for k, v in (args or {}).items() if k not in ignored}
    out = []
    for f in sorted(os.listdir(directory)):
        if not (f.startswith(name + "-") and f.endswith(".json")):
            continue
        try:
            with open(os.path.join(directory, f), encoding="utf-8") as fh:
                saved = json.load(fh)
        except (OSError, ValueError):
            continue
        got = saved.get("args") if isinstance(saved, dict) else None
        if isinstance(got, dict) and {k: v for k, v in got.items() if k not in ignored} == want:
            out.append(f)
    return out


def save_probe(directory: str, name: str, args: dict | None, doc: dict) -> None:
    """Keep a probe's document as ``<directory>/<name>-<args digest>.json`` (with its args), best effort."""
    try:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, _probe_key(name, args) + ".json")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"probe": name, "args": args or {}, "doc": doc}, f, indent=1, default=str)
        os.replace(path + ".tmp", path)
    except OSError:
        pass  # the figures still reach results.json; a full disk must not fail the measurement


def replay_probe(host: str, directory: str, name: str, args: dict | None) -> dict:
    """The probe document saved for ``name`` with ``args``; for a probe of :data:`REPLAY_TIME_ARGS`, the one
    whose arguments match but for those (a saved xid_events window began at another time). A document saved
    with other arguments is another measurement and is never read in its place.

    Raises ProbeError naming the folder when there is none (or several match), and as a live probe would for a
    saved failure.
    """
    path = os.path.join(directory, _probe_key(name, args) + ".json")
    if not os.path.exists(path):
        saved = _replay_match(directory, name, args)
        if len(saved) != 1:
            raise ProbeError(host, f"{name}: no saved document for arguments {json.dumps(args or {}, sort_keys=True)} "
                                   f"in {directory} (replay)")
        path = os.path.join(directory, saved[0])
    try:
        with open(path, encoding="utf-8") as f:
            saved_doc = json.load(f)
        doc = saved_doc["doc"] if isinstance(saved_doc, dict) else None
    except (OSError, ValueError, KeyError) as e:
        raise ProbeError(host, f"{name}: saved document {path} unreadable: {type(e).__name__}: "
                               f"{str(e).splitlines()[0][:200]} (replay)") from None
    if not isinstance(doc, dict):
        raise ProbeError(host, f"{name}: saved document {path} holds no probe document (replay)")
    if doc.get("failed"):
        raise ProbeError(host, f"{name}: {doc.get('msg')} (replayed)")
    return doc


class _Reported(Exception):
    """Carries an error past HostRunner.run's sticky-host rule (a lost connection whose host answered again)."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


class HostRunner:
    """A host plus its transport, with probe results cached for the run.

    ``transport_factory(host)`` returns a transport (see gpuaccept.transport). ``probe_timeout`` is the
    default wall-clock limit in seconds for one probe. ``sku_override`` is ``--sku``; ``specs`` maps SKU
    name to SkuSpec (loaded threshold files). ``profile`` names a gpuaccept.profiles entry. ``save_dir``: where
    every probe document is kept (``<save_dir>/<host>/<probe>-<args digest>.json``). A host whose inventory sets
    ``gpuaccept_replay: DIR`` runs nothing: its probes answer from documents saved that way (a past run's
    ``probes/<host>`` folder), so a run can be judged again, e.g. against new thresholds.
    """

    def __init__(self, host: Host, transport_factory: Callable[[Host], Any], specs: dict[str, SkuSpec],
                 probe_timeout: float = 300.0, sku_override: str | None = None, profile: str = "standard",
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
        self._dead: Exception | None = None
        self._cache: dict[str, dict] = {}
        self._lock = threading.RLock()
        self.specs = specs
        self.probe_timeout = probe_timeout
        self.sku_override = sku_override
        self.profile = profile
        self.save_dir = save_dir
        self.replay_dir = host.vars.get("gpuaccept_replay")

    # -- transport ---------------------------------------------------------------------------
    def run(self, command: str, stdin: bytes = b"", timeout: float | None = None, hold_stdin: bool = False,
            cleanup: str | None = None, rerun: bool = True,
            progress: Callable[[dict], None] | None = None) -> CommandResult:
        """Run a shell command on the host (``timeout`` s, default the probe timeout; ``hold_stdin``: see
        gpuaccept.transport). A connection lost mid-command is retried once on a fresh connection, after
        killing the groups it left and running ``cleanup`` (a shell command, e.g. removing a half-written
        folder); the command is then run again, unless ``rerun`` is False (one rank of a multi-host
        collective: its peers are gone), when the loss is raised as HostUnreachable and the host stays in
        the run (``progress``: the transport's live progress callback). Raises the TransportError
        subclasses (sticky for this run once the host proved
        unreachable, its key refused or auth failed), Interrupted once the run is interrupted."""
        if self.replay_dir:
            raise ProbeError(self.name, f"replayed host (gpuaccept_replay: {self.replay_dir}) runs no commands")
        with self._lock:
            if self._dead is not None:
                raise self._dead
            reason = interruption()
            if reason:
                raise Interrupted(self.name, f"interrupted ({reason}) while running on {self.name}: "
                                             f"{short_command(command)} not started")
            if self._transport is None:
                self._transport = self._factory(self.host)
            timeout = timeout or self.probe_timeout
            try:
                try:
                    return self._transport.run(command, stdin=stdin, timeout=timeout, hold_stdin=hold_stdin,
                                               progress=progress)
                except HostUnreachable as lost:
                    if getattr(lost, "pgids", None) is None or interruption():
                        raise
                    self._recover(lost, cleanup)
                    if not rerun:
                        raise _Reported(HostUnreachable(self.name, f"{lost.msg} (reconnected; the lost command's "
                                                                   "processes were killed; not run again)")) from None
                    return self._transport.run(command, stdin=stdin, timeout=timeout, hold_stdin=hold_stdin,
                                               progress=progress)
            except _Reported as r:
                raise r.error from None
            except _STICKY as e:
                self._dead = e
                raise
            except CommandTimeout as e:
                # a command that ran long is one thing, a host that stopped answering another: ask once
                # more, briefly; if even `true` gets no answer, report the host as hung from now on
                try:
                    self._transport.run("true", timeout=LIVENESS_TIMEOUT_S)
                except Exception as again:  # noqa: BLE001 - any failure here means the host is gone
                    self._dead = HostUnreachable(self.name, f"stopped answering ({e.msg}; then {again})")
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
            from .transport.ssh import kill_group_command  # only SSH connections get lost
            steps.append(kill_group_command(pgids))
        if cleanup:
            steps.append(cleanup)
        try:
            t.close()
            t.run("; ".join(steps) if steps else "true", timeout=LIVENESS_TIMEOUT_S)
        except Exception as again:  # noqa: BLE001 - any failure of the fresh connection writes the host off
            raise HostUnreachable(self.name, f"{lost.msg}; a fresh connection failed too: "
                                             f"{getattr(again, 'msg', again)}") from None

    def _ensure_shipped(self) -> str:
        if self._dir is None:
            py = shell.quote(self.python)
            # a folder name chosen here (mkdir fails on anything existing, symlinks included), so a
            # half-shipped folder can be removed when the connection drops during the copy
            d = f"gpuaccept.{secrets.token_hex(6)}"
            cmd = (f'd="${{TMPDIR:-/tmp}}/{d}" && mkdir -m 700 "$d" && cd "$d" && '
                   f'{py} -c "import sys,tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode=\'r|\')'
                   '.extractall()" && echo "$d"')
            res = self.run(cmd, stdin=probe_archive(), timeout=self.probe_timeout,
                           cleanup=f'rm -rf "${{TMPDIR:-/tmp}}/{d}"')
            out = res.stdout.decode(errors="replace").strip().splitlines()
            if res.rc != 0 or not out:
                err = res.stderr.decode(errors="replace").strip().splitlines()
                why = f"python interpreter '{self.python}' not found (set ansible_python_interpreter)" \
                    if res.rc == 127 else (err[-1] if err else f"rc {res.rc}")
                raise ProbeError(self.name, f"could not ship probes: {why}")
            self._dir = out[-1]
        return self._dir

    def probe(self, name: str, args: dict | None = None, timeout: float | None = None,
              env: dict[str, str] | None = None) -> dict:
        """Run probe ``name`` (a file ``gpuaccept/probes/<name>.py``) with ``args``; return its JSON dict.

        ``timeout``: seconds of wall clock (default the node's ``probe_timeout``): the controller kills the
        probe's process groups then, and the node-side watchdog WATCHDOG_GRACE_S later on its own. ``env``:
        extra environment variables for the probe, laid over PROBE_ENV (values are quoted here).
        Raises ProbeError (crash, no JSON, ``failed``, killed by the watchdog), CommandTimeout, Interrupted,
        or another TransportError.
        """
        if not os.path.exists(os.path.join(PROBE_DIR, f"{name}.py")):
            raise ValueError(f"no probe named {name}")
        args = probe_args(self.profile, name, args)
        if self.replay_dir:
            return replay_probe(self.name, self.replay_dir, name, args)
        with self._lock:
            d = self._ensure_shipped()
            for cb in PROBE_STARTED: cb(self.name, name, timeout or self.probe_timeout)  # noqa: E701
            limit = timeout or self.probe_timeout
            # exec: the watchdog leads the command's process group; it runs the probe in a group of its own
            cmd = shell.env_command({**PROBE_ENV, **(env or {})},
                                    [self.python, "_watchdog.py", "--watch-stdin", f"{limit:g}", f"{WATCHDOG_GRACE_S:g}",
                                     f"{name}.py", json.dumps(args or {})], cwd=d, exec_=True)
            # a rank of a multi-host collective (nnodes > 1) is not run again alone after a lost connection
            res = self.run(cmd, timeout=limit, hold_stdin=True, rerun=int((args or {}).get("nnodes") or 1) <= 1,
                           progress=lambda doc: [cb(self.name, name, doc) for cb in PROBE_PROGRESS])
        doc = parse_probe_output(self.name, name, res, self.python)
        if self.save_dir:
            save_probe(os.path.join(self.save_dir, self.name), name, args, doc)
        return doc

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
                if self._dir and self._dead is None and not aborting():
                    try:
                        self._transport.run(shell.command(["rm", "-rf", self._dir]),
                                            timeout=CLEANUP_TIMEOUT_S if not interruption() else 5.0)
                    except Exception:
                        pass
                try:
                    self._transport.close()
                except Exception:
                    pass
            self._transport = None
            self._dir = None

