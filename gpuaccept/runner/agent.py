"""The controller's side of the node-side agent (``gpuaccept/probes/_agent.py``): one session per host and run.

:class:`Agent` starts the agent with one command (:func:`start_command`): make a fresh folder, start the
node's Python on :data:`BOOT` there (the shell that made the folder removes it once that Python has exited, so a
failed start leaves nothing on the node), which reads the agent's own files from stdin (one frame: zlib-compressed
JSON of ``{file name: text}``, made once per run: :func:`gpuaccept.runner.ship.payload`), writes them into the
folder and serves. Then each probe is one ``run`` request on that session, carrying the probe's files the agent
was not sent before (:meth:`Agent.probe`, returning the
:class:`~gpuaccept.transport.CommandResult` a probe command returned before, so the parsing is unchanged),
and :meth:`Agent.close` asks the agent to remove its folder and exit, in the same session.

Limits: a probe past its limit gets a ``kill`` request (the agent kills its process group and answers with
what the probe printed) and raises CommandTimeout; a cancelled command (gpuaccept.transport.cancel_all) the
same, raising Interrupted. An agent that does not answer within :data:`KILL_WAIT_S` has its session closed:
EOF on its stdin makes it kill everything and remove its folder by itself. A session lost mid-probe raises
HostUnreachable with the groups left behind (``pgids``: the probe's, then the agent's). Every request is in
the registry of commands in flight (gpuaccept.transport.tracked), labelled ``probe <name>``.

One run per node: an Agent given the run's identity (:func:`lock_identity`) passes it to BOOT, and the agent
takes the node's lock in its start (``probes/_nodelock.py``); a node held by another run answers ``held``
instead of ``ready`` and :meth:`Agent.start` raises NodeHeld naming the holder. Stale holders it took over are
logged at INFO.

Torch probes start warm: each run request says whether the probe imports torch (gpuaccept.runner.ship.torch_import),
and the agent forks such a probe from its warm child, which has imported torch already (``probes/_zygote.py``).
What the agent says of that child (``warm`` frames: ready, dead, torch missing) is logged (:attr:`Agent.warm`
keeps the last); ``GPUACCEPT_WARM`` and ``GPUACCEPT_BYTECODE`` in the controller's environment reach the agent
(:data:`WARM_ENV`, :data:`BYTECODE_ENV`).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import socket
import threading
import time
from typing import Any, Callable, Mapping

from gpuaccept.errors import (CommandTimeout, HostUnreachable, InterpreterMissing, InterpreterUnusable, Interrupted,
                             NodeHeld, ProbeError, ProbeFolderUnwritable)
from gpuaccept.transport import CommandResult, Running, shell, tracked
from gpuaccept.transport.progress import ProgressLines
from gpuaccept.runner.ship import agent_files, needed_files, payload, texts, torch_import
from gpuaccept.transport.session import Session, open_session

log = logging.getLogger(__name__)

MAGIC = b"__GPUACCEPT_AGENT__\n"
#: the controller's environment variable naming the nodes' lock folder (default /tmp/gpuaccept-node-lock)
LOCK_DIR_ENV = "GPUACCEPT_NODE_LOCK_DIR"
#: the controller's environment variable passed on to every agent it starts: when the node's warm child starts
#: ("auto", the default, "on", "off"; probes/_zygote.py MODE_ENV)
WARM_ENV = "GPUACCEPT_WARM"
#: the controller's environment variable passed on to every agent it starts: "off" turns the nodes' bytecode
#: cache off (probes/_bytecode.py ENV)
BYTECODE_ENV = "GPUACCEPT_BYTECODE"
#: seconds to wait for the agent's ``ready`` after the start command (connect excluded: the transport bounds it)
START_TIMEOUT_S = 60.0
#: seconds the agent gets to answer a ``kill`` (its kill takes up to 1.5 s, _watchdog.KILL_GRACE_S, plus reading
#: the pipes, 1 s)
KILL_WAIT_S = 6.0
#: seconds the agent gets to remove its folder and say ``bye``
EXIT_WAIT_S = 30.0
#: exit status of BOOT when stdin ended before the files (the start command never got them)
BOOT_NO_FILES = 3
#: exit status of the start when its folder or the agent's files could not be made: the folder's filesystem full
#: (ENOSPC, EDQUOT: errno(3)), or anything else (read-only, missing, a file size limit, permissions); a line
#: ``UNWRITABLE_MARKER {"folder", "errno"}`` on stderr says where and why (the errno's name)
BOOT_FULL, BOOT_UNWRITABLE = 4, 5
UNWRITABLE_MARKER = "GPUACCEPT-UNWRITABLE "
#: the oldest Python the probes run on (``str.removeprefix``, PEP 616, Python 3.9: probes/_gpu.py)
NODE_PYTHON_MIN = (3, 9)
#: exit status of BOOT on a Python older than :data:`NODE_PYTHON_MIN`
BOOT_OLD_PYTHON = 6
#: BOOT's first line on stderr, ``GPUACCEPT-PYTHON 3.12.3``: the interpreter ran it, and is that Python (a start
#: that failed without it was not a Python at all: gpuaccept.errors.InterpreterUnusable)
PYTHON_MARKER = "GPUACCEPT-PYTHON "
#: the start command's line on stderr right before it executes the interpreter: without it, what failed was the
#: node's login (a ForceCommand, a shell that exits), not the interpreter
EXEC_MARKER = "GPUACCEPT-EXEC"

_UNWRITABLE = ("    sys.stderr.write('" + UNWRITABLE_MARKER + "%s\\n' % json.dumps({'folder': d, 'errno': "
               "errno.errorcode.get(e.errno)}))\n"
               "    sys.stderr.write('cannot %s %s: %s\\n' % (what, d, e.strerror or e))\n"
               f"    sys.exit({BOOT_FULL} if e.errno in (errno.ENOSPC, errno.EDQUOT) else {BOOT_UNWRITABLE})\n")

#: the Python run as ``python -c BOOT`` in the new folder: read one frame of the agent's files
#: (gpuaccept.runner.ship.payload), write them, serve; a probe's files come with its run request
BOOT = ("import sys\n"  # these two lines run on any Python, 2.7 included
        f"sys.stderr.write('{PYTHON_MARKER}%d.%d.%d\\n' % tuple(sys.version_info[:3])); sys.stderr.flush()\n"
        f"if sys.version_info[:2] < {NODE_PYTHON_MIN!r}: sys.exit({BOOT_OLD_PYTHON})\n"
        "import errno, os, json, zlib\n"
        "def r(n):\n"
        "    b = b''\n"
        "    while len(b) < n:\n"
        "        c = os.read(0, n - len(b))\n"
        f"        if not c: sys.exit({BOOT_NO_FILES})\n"
        "        b += c\n"
        "    return b\n"
        "files = json.loads(zlib.decompress(r(int.from_bytes(r(4), 'big'))))\n"
        "d, what = os.getcwd(), 'write the probe files into'\n"
        "try:\n"
        "    for k, v in files.items():\n"
        "        with open(k, 'w', encoding='utf-8') as f: f.write(v)\n"
        "except OSError as e:\n"
        + _UNWRITABLE +
        "sys.path.insert(0, '')\n"
        "import _bytecode\n"
        "_bytecode.install(os.getcwd())\n"
        "import _agent\n"
        "sys.exit(_agent.main(files, json.loads(sys.argv[1]) if len(sys.argv) > 1 else None, list(files)))\n")

#: the Python the start runs where its ``mkdir`` failed: the same ``mkdir`` again, to tell why (the errno) with
#: :data:`UNWRITABLE_MARKER` and exit :data:`BOOT_FULL` or :data:`BOOT_UNWRITABLE`; a folder made this time (the
#: cause gone meanwhile) is removed at once
MKDIR_WHY = ("import errno, json, os, sys\n"
             "d, what = sys.argv[1], 'make the probe folder'\n"
             "try:\n"
             "    os.mkdir(d, 0o700)\n"
             "except OSError as e:\n"
             + _UNWRITABLE +
             "os.rmdir(d)\n"
             f"sys.exit({BOOT_UNWRITABLE})\n")


def encode(doc: dict) -> bytes:
    """One frame (the agent's format, ``_agent.encode``)."""
    data = json.dumps(doc, separators=(",", ":")).encode()
    return len(data).to_bytes(4, "big") + data


def start_command(python: str, env: dict[str, str], identity: dict | None = None) -> tuple[str, str]:
    """``(command, folder name)``: make ``$TMPDIR/gpuaccept.<12 hex>`` (``mkdir -m 700``: a fresh name, never
    an existing entry), run ``python -c BOOT`` in it with ``env`` (every word quoted, gpuaccept.transport.shell);
    ``identity`` (:func:`lock_identity`), BOOT's argument in JSON, makes the agent take the node's lock.

    A ``mkdir`` that fails hands over to the node's Python on :data:`MKDIR_WHY`, which tells why (exit status
    :data:`BOOT_FULL` or :data:`BOOT_UNWRITABLE`, or 127 without an interpreter); nothing else runs. The shell
    that made the folder stays as the Python's parent and removes that folder (``rm -rf`` of the one path its
    own ``mkdir`` made; nothing else: a name that existed makes ``mkdir`` fail and BOOT never runs) once
    the Python has exited, whatever ended it: no interpreter (rc 127), a disk too full for the probe files, the
    handshake cut (stdin closed, SIGTERM, SIGHUP or SIGINT: the shell traps them and cleans up after the Python
    is gone). Right before it executes the interpreter it writes :data:`EXEC_MARKER` on stderr (the shell's own
    ``echo``), which tells an interpreter that failed from a login that never ran the command. The status is the
    Python's. An agent that started keeps its folder as long as it runs (it removes
    it itself before it exits; the shell's ``rm`` then finds nothing). Only SIGKILL of the shell leaves the
    folder, to the next run's sweep (``_watchdog.sweep_stale``)."""
    d = f"gpuaccept.{secrets.token_hex(6)}"
    py = shell.interpreter_words(python)
    argv = [*py, "-c", BOOT] + ([json.dumps(identity, separators=(",", ":"))] if identity else [])
    why = shell.command([*py, "-c", MKDIR_WHY])
    return (f'd="${{TMPDIR:-/tmp}}/{d}"; mkdir -m 700 "$d" 2>/dev/null || exec {why} "$d"; '
            f'{{ trap : HUP INT TERM; '
            f'(cd "$d" && echo {EXEC_MARKER} >&2 && {shell.env_command(env, argv, exec_=True)}); r=$?; '
            f'rm -rf "$d"; exit $r; }}'), d


def lock_identity(run_id: str, scope: str = "", env: Mapping[str, str] | None = None) -> dict:
    """The run's identity for the node's lock (``probes/_nodelock.py``): ``{"key", "run_id", "controller"[,
    "lock_dir"]}``. Agents of one key never exclude each other: one run's hosts (several on one machine) and
    its xdist workers. The key is made of this controller's host name, ``scope`` (the run's report folder:
    one per run) and ``run_id``; inside a Slurm job step (``SLURM_JOB_ID`` and ``SLURM_STEP_ID``, as the
    Slurm launcher's node tasks run) it is the step's, so that the node tasks of one launch are one run even
    where several Slurm nodes share a machine. ``lock_dir``: :data:`LOCK_DIR_ENV` when set (else the node's
    default, /tmp/gpuaccept-node-lock)."""
    env = os.environ if env is None else env
    controller = socket.gethostname()
    job, step = env.get("SLURM_JOB_ID"), env.get("SLURM_STEP_ID")
    if job and step:
        basis, controller = f"slurm\0{env.get('SLURM_CLUSTER_NAME', '')}\0{job}.{step}", \
            f"{controller} (Slurm job {job}.{step})"
    else:
        basis = f"{controller}\0{scope}\0{run_id}"
    ident = {"key": hashlib.sha256(basis.encode()).hexdigest()[:16], "run_id": run_id, "controller": controller}
    if env.get(LOCK_DIR_ENV):
        ident["lock_dir"] = env[LOCK_DIR_ENV]
    return ident


class Agent:
    """One host's agent. ``name``: the host (for errors); ``transport``: its transport (SSH or local);
    ``python``: the node's interpreter; ``env``: the variables every probe gets (PYTHONUNBUFFERED...);
    ``identity``: the run's (:func:`lock_identity`): the agent takes the node's lock, and a node held by another
    run raises NodeHeld at the start (None: no lock, as for a test's agent).
    Not thread-safe: the host's lock (HostRunner.lock) serialises its use."""

    def __init__(self, name: str, transport: Any, python: str, env: dict[str, str], identity: dict | None = None):
        self.name, self.transport, self.python, self.env = name, transport, python, dict(env)
        self.identity = identity
        #: what the agent said of the node's lock at its start: ``lock`` (its holder file), ``took_over``, ``lock_note``
        self.lock_info: dict = {}
        #: the agent's last word on its warm child (``{"state": "ready" | "dead" | "missing", "pid", ...}``), or {}
        self.warm: dict = {}
        self.session: Session | None = None
        self.folder: str | None = None  # the folder name (below $TMPDIR) once started
        self.dir: str | None = None  # its full path on the node, from the agent's ready
        self.pid: int | None = None
        self._frames = _Frames()
        self._ids = iter(range(1, 1 << 62))
        self._lock = threading.Lock()
        self._sent: set[str] = set()  # the probe files the agent was sent (its start's, then with run requests)

    @property
    def alive(self) -> bool:
        """Whether the agent was started and its session not lost or closed."""
        return self.session is not None

    # -- start --------------------------------------------------------------------------------
    def start(self, timeout: float = START_TIMEOUT_S, label: str = "start the agent") -> None:
        """Start the agent (one command, tracked and logged as ``label``), ship the probes, wait up to ``timeout``
        s for ``ready``. Raises ProbeError "could not ship probes: ..." (no interpreter, the folder could not be
        made, the agent exited), NodeHeld (another run's agent holds the node: the agent exited, nothing ran),
        CommandTimeout (no answer: the session is closed), Interrupted, the transport's connection errors."""
        env = {**self.env, **{k: os.environ[k] for k in (WARM_ENV, BYTECODE_ENV) if os.environ.get(k)}}
        cmd, self.folder = start_command(self.python, env, self.identity)
        tracked(self.name, cmd, lambda r: self._start(r, cmd, timeout, label),
                label if label == "start the agent" else f"start the agent for {label}")

    def _start(self, running: Running, cmd: str, timeout: float, label: str) -> CommandResult:
        t0 = time.monotonic()
        self.session = open_session(self.transport, cmd)
        self._frames = _Frames()
        self._sent = set(agent_files())
        try:
            self.session.send(payload(), timeout)
            doc = self._next(t0 + timeout, running)
        except TimeoutError:  # the node did not even read the files: a hung interpreter or node
            doc = None
        except HostUnreachable as e:
            doc = None
            if self.session is not None and self.session.exit_status(0.5) in (None, -1):  # no exit status: lost
                pgid = self.session.pgid
                self._drop()
                lost = HostUnreachable(self.name, f"connection lost during command ({e.msg}): {label} (the agent "
                                                  "was starting)")
                lost.pgids = [pgid] if pgid else []  # type: ignore[attr-defined]
                raise lost from None
        except _Stop:
            self._drop()
            raise Interrupted(self.name, f"interrupted ({running.reason}) while running on {self.name}: {label} "
                                         "(the agent was starting)") from None
        if doc is None and self.session is not None and self.session.exit_status(0.5) is None:
            self._drop()
            raise CommandTimeout(self.name, f"command timed out after {timeout:g}s: {label}; the agent did not "
                                            "start (no answer from the node)")
        if doc is not None and doc.get("op") == "held":
            self._drop()
            holder = {k: (doc.get("holder") or {}).get(k) for k in ("run_id", "controller", "since", "pid")}
            raise NodeHeld(self.name, f"held by gpuaccept run {holder['run_id']} from {holder['controller']} since "
                                      f"{holder['since']} (pid {holder['pid']})", holder)
        if doc is None or doc.get("op") != "ready":
            err = self._start_error()
            self._drop()
            raise err
        self.dir, self.pid = doc.get("dir"), doc.get("pid")
        self._lock_said(doc)
        return CommandResult(0, b"", b"", time.monotonic() - t0)

    def _lock_said(self, ready: dict) -> None:
        """Keep and log what ``ready`` says of the node's lock: stale holders taken over (INFO), no lock (WARNING)."""
        self.lock_info = {k: ready[k] for k in ("lock", "took_over", "lock_note") if k in ready}
        for h in ready.get("took_over") or ():
            log.info("%s: took over the node lock of gpuaccept run %s from %s since %s (pid %s, gone)%s", self.name,
                     h.get("run_id"), h.get("controller"), h.get("since"), h.get("pid"),
                     "" if h.get("removed", True) else "; its holder file could not be removed")
        if ready.get("lock_note"):
            log.warning("%s: %s; the run goes on without holding the node", self.name, ready["lock_note"])

    def _warm_said(self, doc: dict) -> None:
        """Keep and log what the agent says of its warm child: ready (DEBUG), torch missing (INFO: the torch probes
        fail on their own), dead (WARNING: the torch probes start fresh from now on)."""
        self.warm = {k: v for k, v in doc.items() if k != "op"}
        state = doc.get("state")
        if state == "ready":
            log.debug("%s: warm child %s ready: torch %s imported in %s s%s", self.name, doc.get("pid"),
                      doc.get("torch"), doc.get("import_s"),
                      f" (its bytecode kept in {doc['bytecode_tree']})" if doc.get("bytecode_tree") else "")
        elif state == "missing":
            log.info("%s: no warm child: %s", self.name, doc.get("why"))
        else:
            log.warning("%s: %s; torch probes start fresh from now on", self.name, doc.get("why"))

    def _start_error(self) -> ProbeError:
        """The error of an agent that did not start, from its start command's exit status and the lines it left
        on stderr (each decides by its marker, never by the words around it):

        - rc 127: :class:`InterpreterMissing` (the shell found no such program);
        - :data:`BOOT_FULL` / :data:`BOOT_UNWRITABLE` said by a Python (its :data:`UNWRITABLE_MARKER` line, or its
          version line): :class:`ProbeFolderUnwritable`;
        - the start reached the interpreter (:data:`EXEC_MARKER`) and it never wrote its version
          (:data:`PYTHON_MARKER`: not a Python, or not executable: the shell's rc 126), or exited
          :data:`BOOT_OLD_PYTHON`: :class:`InterpreterUnusable`;
        - else :class:`ProbeError`: the agent failed, or the login never ran the command (no EXEC_MARKER: a
          ForceCommand, a shell that exits), or it did not answer (no exit status)."""
        s = self.session
        rc = s.exit_status(2.0) if s is not None else None
        err = [ln for ln in (s.stderr() if s else b"").decode(errors="replace").strip().splitlines() if ln.strip()]
        facts: dict = {}
        for ln in err:
            if ln.startswith(UNWRITABLE_MARKER):
                try:
                    facts.update(json.loads(ln[len(UNWRITABLE_MARKER):]))
                except (ValueError, TypeError):
                    pass
            elif ln.startswith(PYTHON_MARKER):
                facts["version"] = ln[len(PYTHON_MARKER):].strip()[:40]
            elif ln.strip() == EXEC_MARKER:
                facts["exec"] = True
        err = [ln for ln in err if not ln.startswith((UNWRITABLE_MARKER, PYTHON_MARKER)) and ln.strip() != EXEC_MARKER]
        tail = err[-1][:300] if err else ""
        said = f": {tail}" if tail else ""
        need = ".".join(map(str, NODE_PYTHON_MIN))
        head = "could not ship probes: "
        if rc == 127:
            return InterpreterMissing(self.name, f"{head}python interpreter '{self.python}' not found (set "
                                                 f"ansible_python_interpreter)", {"python": self.python})
        if rc in (BOOT_FULL, BOOT_UNWRITABLE) and ("folder" in facts or "version" in facts):
            return ProbeFolderUnwritable(self.name, head + (tail if facts.get("folder") and tail else
                                                            f"the agent exited with rc {rc} before it was ready{said}"),
                                         {"folder": facts.get("folder") or self.folder, "full": rc == BOOT_FULL,
                                          "errno": facts.get("errno")})
        unusable = {"python": self.python, "rc": rc, "version": facts.get("version"), "min": need}
        if rc == BOOT_OLD_PYTHON and facts.get("version"):
            return InterpreterUnusable(self.name, f"{head}'{self.python}' is Python {facts['version']}; the probes "
                                                  f"need {need} or later (set ansible_python_interpreter)", unusable)
        if rc is not None and rc >= 0 and facts.get("exec") and "version" not in facts:
            return InterpreterUnusable(self.name, f"{head}'{self.python}' is not a Python {need}+ that runs the agent "
                                                  f"(it exited with rc {rc} before the agent's first line{said}; set "
                                                  f"ansible_python_interpreter)", unusable)
        if rc is None:
            return ProbeError(self.name, f"{head}the agent did not answer within {START_TIMEOUT_S:g} s{said}")
        return ProbeError(self.name, f"{head}the agent exited with rc {rc} before it was ready{said}")

    # -- frames -------------------------------------------------------------------------------
    def _next(self, deadline: float, running: Running | None) -> dict | None:
        """The next frame from the agent by ``deadline`` (monotonic s), else None; b"" (the session ended):
        HostUnreachable; ``running`` cancelled: raises _Stop."""
        s = self.session
        assert s is not None
        while True:
            got = self._frames.pop()
            if got is not None and got.get("op") == "warm":
                self._warm_said(got)
                continue
            if got is not None:
                return got
            if running is not None and running.cancelled.is_set():
                raise _Stop("cancelled")
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            data = s.recv(min(left, 0.1))
            if data == b"":
                raise HostUnreachable(self.name, "the agent's session ended")
            if data:
                self._frames.feed(data)

    # -- probes -------------------------------------------------------------------------------
    def probe(self, name: str, argv: list[str], limit: float, grace: float, env: dict[str, str],
              exec_probe: bool = False, progress: Callable[[dict], None] | None = None,
              torch: str | None = "") -> CommandResult:
        """Run ``argv`` (``["<name>.py", "<json args>"]``) as probe ``name`` under the agent, ``limit`` s of wall
        clock here (the agent kills it at ``limit + grace`` on its own), ``env`` laid over the agent's. ``torch``:
        whether it imports torch ("module" | "function" | None, the agent's warm child forks it then); default: read
        from the shipped probe ``name`` (gpuaccept.runner.ship.torch_import) when ``argv[0]`` is its file. The
        request names the files the probe needs (gpuaccept.runner.ship.needed_files) when ``argv[0]`` is its file,
        else every probe file, and carries the text of those not sent to this agent before; the agent writes those
        it has not written yet.
        Returns its CommandResult (stdout, stderr as the probe wrote them; rc 1 with the watchdog's failure
        line when the agent killed it). Raises CommandTimeout or Interrupted (the probe's group killed; what it
        printed in ``stdout``/``stderr`` attributes), HostUnreachable (``pgids``: groups left behind)."""
        label = f"probe {name}"
        if self.session is None:
            self.start(min(limit, START_TIMEOUT_S), label)
        own = bool(argv) and argv[0] == f"{name}.py"
        if torch == "":
            torch = torch_import(name) if own else None
        files = needed_files(name) if own else None  # None: every probe file
        return tracked(self.name, f"agent {self.dir}: {shell.command(argv)}",
                       lambda r: self._probe(r, argv, limit, grace, env, exec_probe, progress, label, torch, files),
                       label)

    def _probe(self, running: Running, argv, limit, grace, env, exec_probe, progress, label,
               torch: str | None = None, files: list[str] | None = None) -> CommandResult:
        rid = next(self._ids)
        lines = ProgressLines(progress) if progress is not None else None
        start = time.monotonic()
        pgids: list[int] = []
        new = texts([f for f in (files if files is not None else texts(None)) if f not in self._sent])
        self.session.send(encode({"op": "run", "id": rid, "argv": argv, "deadline_s": limit, "grace_s": grace,
                                  "env": env, "exec": exec_probe, "torch": torch, "files": files, "texts": new}))
        self._sent.update(new)
        try:
            while True:
                doc = self._next(start + limit, running)
                if doc is None:
                    raise _Stop("timeout")
                if doc.get("id") != rid:
                    continue
                op = doc.get("op")
                if op == "started":
                    pgids = [int(doc["pgid"])]
                elif op == "progress" and lines is not None:
                    lines.feed(doc.get("line", "").encode("latin-1") + b"\n")
                elif op == "done":
                    if isinstance(doc.get("unwritable"), dict):  # the probe's files could not be written: not run
                        u = doc["unwritable"]
                        raise ProbeFolderUnwritable(self.name, f"{label}: cannot write the probe files into "
                                                    f"{u.get('folder')}: {u.get('why')}",
                                                    {k: u.get(k) for k in ("folder", "full", "errno")})
                    return _result(doc)
        except HostUnreachable as e:
            self._drop()
            lost = HostUnreachable(self.name, f"connection lost during command ({e.msg}): {label}")
            lost.pgids = pgids + ([self.session_pgid] if self.session_pgid else [])  # type: ignore[attr-defined]
            raise lost from None
        except _Stop as stop:
            return self._stop(rid, stop.args[0], running, limit, label)

    @property
    def session_pgid(self) -> int | None:
        """The agent's process group on the node (the transport wrapper's announcement), once known."""
        return getattr(self, "_pgid", None) or (self.session.pgid if self.session is not None else None)

    def _stop(self, rid: int, what: str, running: Running, limit: float, label: str) -> CommandResult:
        """Kill request ``rid`` (``what``: "timeout" | "cancelled") and raise CommandTimeout / Interrupted."""
        why = (f"the controller's limit of {limit:g} s passed" if what == "timeout"
               else f"the run was interrupted ({running.reason})")
        done, how = None, ""
        try:
            self.session.send(encode({"op": "kill", "id": rid, "why": f"{why}; its process group was killed"}))
            end = time.monotonic() + KILL_WAIT_S
            while done is None:
                doc = self._next(end, None)
                if doc is None:
                    break
                if doc.get("id") == rid and doc.get("op") == "done":
                    done = doc
        except HostUnreachable:
            pass
        if done is None:
            how = "; the agent did not confirm the kill: its session was closed (it kills its probes on EOF)"
            self._drop()
        res = _result(done) if done else CommandResult(-1, b"", b"", 0.0)
        if what == "timeout":
            exc: Exception = CommandTimeout(self.name, f"command timed out after {limit:g}s: {label}{how}")
        else:
            exc = Interrupted(self.name, f"interrupted ({running.reason}) while running on {self.name}: {label}"
                                         f" (process group killed){how}")
        exc.stdout, exc.stderr = res.stdout, res.stderr  # type: ignore[attr-defined]
        raise exc

    # -- end ----------------------------------------------------------------------------------
    def close(self, timeout: float = EXIT_WAIT_S) -> bool:
        """Ask the agent to kill what still runs, remove its folder and exit (same session); True when it said
        the folder is gone. The session is closed in any case (EOF: an agent that did not answer cleans up on
        its own)."""
        if self.session is None:
            return False
        removed = False
        try:
            self.session.send(encode({"op": "exit"}))
            end = time.monotonic() + timeout
            while True:
                doc = self._next(end, None)
                if doc is None:
                    break
                if doc.get("op") == "bye":
                    removed = bool(doc.get("removed"))
                    break
        except HostUnreachable:
            pass
        if self.session is not None:
            self.session.exit_status(min(2.0, timeout))
        self._drop()
        return removed

    def _drop(self) -> None:
        if self.session is not None:
            self._pgid = self.session.pgid
            self.session.close()
        self.session = None


class _Stop(Exception):
    pass


class _Frames:
    """Frames of the agent's stdout: everything before :data:`MAGIC` (a login shell's banner) is skipped."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.synced = False
        self.ready: list[dict] = []

    def feed(self, data: bytes) -> None:
        self.buf += data
        if not self.synced:
            i = self.buf.find(MAGIC)
            if i < 0:
                del self.buf[:max(0, len(self.buf) - len(MAGIC))]
                return
            del self.buf[:i + len(MAGIC)]
            self.synced = True
        while len(self.buf) >= 4:
            n = int.from_bytes(self.buf[:4], "big")
            if len(self.buf) < 4 + n:
                break
            doc = json.loads(bytes(self.buf[4:4 + n]).decode())
            del self.buf[:4 + n]
            self.ready.append(doc)

    def pop(self) -> dict | None:
        return self.ready.pop(0) if self.ready else None


def _result(doc: dict) -> CommandResult:
    return CommandResult(int(doc.get("rc", -1)), str(doc.get("stdout", "")).encode("latin-1"),
                         str(doc.get("stderr", "")).encode("latin-1"), float(doc.get("seconds") or 0.0))
