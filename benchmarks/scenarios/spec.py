"""A GPU scenario as declared in its YAML file (``benchmarks/scenarios/<name>.yaml``), read and checked once.

A file holds one scenario: what it sets up, what it runs and what must come out::

    claim: a foreign load arriving after preflight reads ERROR "disturbed"    # the sentence it proves
    source: README.md (conditions)                                              # where the claim is made
    gpus: 1                      # GPUs the machine needs (fewer: "needs N GPUs: not run")
    optional: false              # true: long; run only when named
    connection: local            # local | ssh (the gpu-node kit: .gpu-node/start-sshd.sh)
    inventory: {gpu_sku: h200-sxm-141gb}          # host vars (gpus_per_node: the count found, unless given)
    env: {CUDA_VISIBLE_DEVICES: ""}               # environment of the runs (the node's, on a local connection)
    bare_python: false           # true: ansible_python_interpreter is a venv without nvidia-ml-py or torch
    site_thresholds: {h200-sxm-141gb: {checks: {bf16_tflops: {min: 900, source: "..."}}}}
    hosts: {name-a: {}, name-b: {}}  # inventory names of this machine, each with its own vars (default: gpu-node);
                                     # on ssh each its own sshd (127.0.0.<i+1>, port 2222+i)
    history: false               # true: the runs share one history database (<folder>/history.sqlite)
    loads:                       # foreign loads, started and stopped by the runner (their process group)
      - {kind: gpu-matmul, gpu: last, start: before, settle_s: 10}
      - {kind: host-copy, threads: 12, start: {after_s: 20}}
    runs:                        # gpuaccept runs (python3 -m pytest from the repo root), or one probe run
      - name: first
        after_s: 0               # seconds after the first run started
        markers: "health or memory or compute"
        keyword: "hbm or tensor"
        profile: quick
        options: [--burnin-minutes, "2"]
        expect: ...              # see benchmarks/scenarios/expect.py
        signals:                 # signals sent while it runs (the runner measures the node clean afterwards)
          - {signal: KILL, to: run, when: gpu-busy, after_s: 1}
      - {name: nightly, after_run: first, markers: compute}   # started once run "first" ended
      - {name: smi, command: [nvidia-smi, -q, -x], expect: {exit: 0}}   # a command, its output <name>.txt
      - {name: burnin-hang, probe: burnin, args: {...}, timeout_s: 150, expect: {document: {...}}}

``run:`` (one run) may stand for ``runs:``. A load's ``start`` is ``before`` (started ``settle_s`` seconds before
the first run, default 5), ``{after_s: N}`` (N seconds after the first run started) or ``{after_test: NAME}``
(once the first run's results.jsonl holds test NAME: it finished, the next is starting); its ``gpu`` an index or
``last``. Kinds are :data:`LOAD_KINDS`. A signal's ``signal`` is one of :data:`SIGNALS`; ``to`` is ``run`` (the
run's own process, not its group: as a controller is killed) or ``match:TEXT`` (the newest process whose
command line holds TEXT: a rank worker); ``when`` is ``start``, ``gpu-busy`` (a compute process on a GPU that is
none of the scenario's loads), ``test:NAME`` (the run recorded test NAME) or ``match:TEXT`` (such a process
exists), and ``after_s`` seconds after that. ``{folder}`` in an inventory value, a probe's args or a command
stands for the scenario's report folder (a ``*_paths`` entry under it is made as a directory). Anything else, a missing key or a value of the wrong type is refused
with one line naming the file and the key (:class:`ScenarioError`); nothing is run.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import yaml

#: foreign loads the runner can start (benchmarks/scenarios/loads.py runs each)
LOAD_KINDS = ("gpu-matmul", "gpu-copy", "gpu-idle", "gpu-hold", "host-copy", "sleep")
CONNECTIONS = ("local", "ssh")
TOP_KEYS = {"claim", "source", "gpus", "optional", "connection", "inventory", "env", "bare_python",
            "site_thresholds", "loads", "run", "runs", "peers", "hosts", "history"}
RUN_KEYS = {"name", "after_s", "markers", "keyword", "profile", "options", "expect", "probe", "args", "timeout_s",
            "signals", "after_run", "command"}
SIGNAL_KEYS = {"signal", "to", "when", "after_s"}
#: signals a scenario may send to a run or a process of it
SIGNALS = ("TERM", "INT", "HUP", "KILL", "STOP")
LOAD_KEYS = {"kind", "gpu", "start", "settle_s", "threads", "gib", "stop_after_s"}
#: seconds a gpuaccept run may take before the runner stops it (chosen: under the device's 10-minute command limit)
RUN_TIMEOUT_S = 540


class ScenarioError(ValueError):
    """A scenario file the runner refuses: ``str()`` is one line, ``<file>: <key>: <what is wrong>``."""


@dataclass
class Load:
    """A foreign load: ``kind`` (:data:`LOAD_KINDS`), on ``gpu`` (index or "last"), started ``before`` the first
    run (``after_s`` None, ``settle_s`` seconds ahead), ``after_s`` seconds after it started, or once the first run
    recorded test ``after_test`` (its results.jsonl line: that test finished), or ``after_s`` seconds after a
    compute process other than the scenario's loads appeared on a GPU (``gpu_busy``: a probe of the run is
    measuring; the run's test order does not matter); ``threads`` (host
    copies), ``gib`` (GPU memory held, GiB = 2**30 B), ``stop_after_s`` (stopped then, else at the scenario's end)."""

    kind: str
    gpu: int | str = 0
    after_s: float | None = None
    settle_s: float = 5.0
    threads: int = 12
    gib: float = 8.0
    stop_after_s: float | None = None
    after_test: str | None = None
    gpu_busy: bool = False


@dataclass
class Signal:
    """A signal sent during a run: ``signal`` (:data:`SIGNALS`), ``to`` ("run" or "match:TEXT"), ``when``
    ("start", "gpu-busy", "test:NAME", "match:TEXT"), ``after_s`` seconds after that (module docstring)."""

    signal: str
    to: str = "run"
    when: str = "start"
    after_s: float = 0.0


@dataclass
class Run:
    """One gpuaccept run (``probe`` None) or one standalone probe run, with its expectations (a dict read by
    benchmarks/scenarios/expect.py)."""

    name: str
    after_s: float = 0.0
    markers: str = ""
    keyword: str = ""
    profile: str = ""
    options: list[str] = field(default_factory=list)
    expect: dict = field(default_factory=dict)
    probe: str | None = None
    args: dict = field(default_factory=dict)
    timeout_s: float = RUN_TIMEOUT_S
    signals: list[Signal] = field(default_factory=list)
    after_run: str | None = None
    command: list[str] | None = None

    @property
    def kind(self) -> str:
        """``probe``, ``command`` or ``gpuaccept``."""
        return "probe" if self.probe else "command" if self.command else "gpuaccept"


@dataclass
class Scenario:
    """A scenario file, read: see the module docstring for each field."""

    name: str
    path: str
    claim: str
    source: str = ""
    gpus: int = 1
    optional: bool = False
    connection: str = "local"
    inventory: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    bare_python: bool = False
    site_thresholds: dict | None = None
    loads: list[Load] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    peers: list[dict] = field(default_factory=list)
    hosts: dict = field(default_factory=dict)
    history: bool = False

    def references(self) -> list[str]:
        """Names of the scenarios whose runs this one's figures are compared with (``of:`` in an expectation)."""
        out = []
        for r in self.runs:
            for want in (r.expect.get("figures") or {}).values():
                if isinstance(want, dict) and want.get("of") and want["of"] not in out:
                    out.append(str(want["of"]))
        return out


def _fail(path: str, key: str, what: str) -> ScenarioError:
    return ScenarioError(f"{path}: {key}: {what}")


def _typed(path: str, key: str, value, kinds, what: str):
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise _fail(path, key, f"{value!r} is not {what}")
    if not isinstance(value, kinds):
        raise _fail(path, key, f"{value!r} is not {what}")
    return value


def _unknown(path: str, where: str, d: dict, known: set) -> None:
    extra = sorted(set(d) - known)
    if extra:
        raise _fail(path, f"{where}{extra[0]}", f"unknown key (known: {', '.join(sorted(known))})")


def _load(path: str, i: int, d) -> Load:
    where = f"loads[{i}]"
    _typed(path, where, d, dict, "a mapping")
    _unknown(path, f"{where}.", d, LOAD_KEYS)
    kind = d.get("kind")
    if kind not in LOAD_KINDS:
        raise _fail(path, f"{where}.kind", f"{kind!r} is none of {', '.join(LOAD_KINDS)}")
    gpu = d.get("gpu", 0)
    if gpu != "last" and (not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0):
        raise _fail(path, f"{where}.gpu", f"{gpu!r} is neither a GPU index nor 'last'")
    start = d.get("start", "before")
    after_test, gpu_busy = None, False
    if start == "before":
        after = None
    elif isinstance(start, dict) and set(start) == {"after_s"}:
        after = float(_typed(path, f"{where}.start.after_s", start["after_s"], (int, float), "a number of seconds"))
    elif isinstance(start, dict) and set(start) == {"after_test"} and isinstance(start["after_test"], str):
        after, after_test = 0.0, start["after_test"]
    elif isinstance(start, dict) and start.get("gpu_busy") is True and set(start) <= {"gpu_busy", "after_s"}:
        after = float(_typed(path, f"{where}.start.after_s", start.get("after_s", 0), (int, float),
                             "a number of seconds"))
        gpu_busy = True
    else:
        raise _fail(path, f"{where}.start", f"{start!r} is none of 'before', {{after_s: N}}, {{after_test: NAME}}, "
                                            f"{{gpu_busy: true[, after_s: N]}}")
    nums = {k: float(_typed(path, f"{where}.{k}", d[k], (int, float), "a number")) for k in
            ("settle_s", "gib", "stop_after_s") if k in d}
    threads = int(_typed(path, f"{where}.threads", d.get("threads", 12), int, "a whole number"))
    return Load(kind, gpu, after, threads=threads, after_test=after_test, gpu_busy=gpu_busy, **nums)


def _prefixed(v, prefixes: tuple) -> bool:
    return isinstance(v, str) and any(v == p if not p.endswith(":") else v.startswith(p) and len(v) > len(p)
                                      for p in prefixes)


def _signal(path: str, where: str, d) -> Signal:
    _typed(path, where, d, dict, "a mapping")
    _unknown(path, f"{where}.", d, SIGNAL_KEYS)
    if d.get("signal") not in SIGNALS:
        raise _fail(path, f"{where}.signal", f"{d.get('signal')!r} is none of {', '.join(SIGNALS)}")
    to, when = d.get("to", "run"), d.get("when", "start")
    if not _prefixed(to, ("run", "match:")):
        raise _fail(path, f"{where}.to", f"{to!r} is neither 'run' nor 'match:TEXT'")
    if not _prefixed(when, ("start", "gpu-busy", "test:", "match:")):
        raise _fail(path, f"{where}.when", f"{when!r} is none of start, gpu-busy, test:NAME, match:TEXT")
    after = float(_typed(path, f"{where}.after_s", d.get("after_s", 0), (int, float), "a number of seconds"))
    return Signal(d["signal"], to, when, after)


def _run(path: str, i: int, d) -> Run:
    where = f"runs[{i}]"
    _typed(path, where, d, dict, "a mapping")
    _unknown(path, f"{where}.", d, RUN_KEYS)
    if "probe" in d and "command" in d:
        raise _fail(path, f"{where}.command", "give probe or command, not both")
    cmd = d.get("command")
    if cmd is not None and (not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) for c in cmd)):
        raise _fail(path, f"{where}.command", f"{cmd!r} is not a list of strings (an argv)")
    sigs = _typed(path, f"{where}.signals", d.get("signals", []), list, "a list of signals")
    if "after_run" in d:
        _typed(path, f"{where}.after_run", d["after_run"], str, "a run's name")
    name = str(d.get("name") or ("run" if i == 0 else f"run{i + 1}"))
    for k in ("markers", "keyword", "profile", "probe"):
        if k in d:
            _typed(path, f"{where}.{k}", d[k], str, "a string")
    opts = d.get("options", [])
    if not isinstance(opts, list) or not all(isinstance(o, (str, int, float)) for o in opts):
        raise _fail(path, f"{where}.options", f"{opts!r} is not a list of strings")
    expect = _typed(path, f"{where}.expect", d.get("expect", {}), dict, "a mapping")
    from benchmarks.scenarios.expect import check_spec  # the expectation keys are that module's
    problem = check_spec(expect, kind="probe" if "probe" in d else "command" if cmd else "gpuaccept")
    if problem:
        raise _fail(path, f"{where}.expect.{problem[0]}", problem[1])
    return Run(name, float(_typed(path, f"{where}.after_s", d.get("after_s", 0), (int, float), "a number")),
               d.get("markers", ""), d.get("keyword", ""), d.get("profile", ""), [str(o) for o in opts], expect,
               d.get("probe"), _typed(path, f"{where}.args", d.get("args", {}), dict, "a mapping"),
               float(_typed(path, f"{where}.timeout_s", d.get("timeout_s", RUN_TIMEOUT_S), (int, float), "seconds")),
               [_signal(path, f"{where}.signals[{j}]", s) for j, s in enumerate(sigs)], d.get("after_run"), cmd)


def parse(path: str, doc) -> Scenario:
    """The scenario of file ``path`` from its parsed YAML ``doc``. Raises :class:`ScenarioError` (one line,
    file and key) for anything the module docstring does not allow."""
    name = os.path.splitext(os.path.basename(path))[0]
    _typed(path, "(top)", doc, dict, "a mapping of the scenario's keys")
    _unknown(path, "", doc, TOP_KEYS)
    claim = doc.get("claim")
    if not isinstance(claim, str) or not claim.strip():
        raise _fail(path, "claim", "missing: the sentence this scenario proves")
    gpus = doc.get("gpus", 1)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise _fail(path, "gpus", f"{gpus!r} is not a GPU count")
    conn = doc.get("connection", "local")
    if conn not in CONNECTIONS:
        raise _fail(path, "connection", f"{conn!r} is none of {', '.join(CONNECTIONS)}")
    if "run" in doc and "runs" in doc:
        raise _fail(path, "run", "give run or runs, not both")
    runs = [doc["run"]] if "run" in doc else doc.get("runs", [])
    _typed(path, "runs", runs, list, "a list of runs")
    peers = _typed(path, "peers", doc.get("peers", []), list, "a list of peers")
    if not runs and not peers:
        raise _fail(path, "runs", "missing: a scenario runs something")
    loads = _typed(path, "loads", doc.get("loads", []), list, "a list of loads")
    site = doc.get("site_thresholds")
    if site is not None:
        _typed(path, "site_thresholds", site, dict, "a mapping of SKU to its checks")
    sc = Scenario(name, path, claim.strip(), str(doc.get("source", "")), gpus,
                  bool(_typed(path, "optional", doc.get("optional", False), bool, "true or false")), conn,
                  _typed(path, "inventory", doc.get("inventory", {}), dict, "a mapping of host vars"),
                  {str(k): "" if v is None else str(v) for k, v in
                   _typed(path, "env", doc.get("env", {}), dict, "a mapping of variables").items()},
                  bool(_typed(path, "bare_python", doc.get("bare_python", False), bool, "true or false")), site,
                  [_load(path, i, d) for i, d in enumerate(loads)], [_run(path, i, d) for i, d in enumerate(runs)])
    if peers:
        from benchmarks.scenarios.peers import check_peers
        problem = check_peers(peers)
        if problem:
            raise _fail(path, f"peers{problem[0]}", problem[1])
        sc.peers = peers
    names = [r.name for r in sc.runs]
    if len(set(names)) != len(names):
        raise _fail(path, "runs", f"two runs named alike: {names}")
    for i, r in enumerate(sc.runs):
        if r.after_run is not None and r.after_run not in names[:i]:
            raise _fail(path, f"runs[{i}].after_run", f"{r.after_run!r} is no earlier run (runs: {names})")
    hosts = _typed(path, "hosts", doc.get("hosts", {}), dict, "a mapping of inventory name to host vars")
    for h, hv in hosts.items():
        if not isinstance(h, str) or not h or not isinstance(hv if hv is not None else {}, dict):
            raise _fail(path, f"hosts.{h}", "an inventory name with a mapping of host vars")
    sc.hosts = {h: dict(hv or {}) for h, hv in hosts.items()}
    sc.history = bool(_typed(path, "history", doc.get("history", False), bool, "true or false"))
    return sc


def load_file(path: str) -> Scenario:
    """:func:`parse` of the YAML file at ``path``; a file that cannot be read or is no YAML is a ScenarioError."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise ScenarioError(f"{path}: unreadable ({e.strerror})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(yaml)"
        raise ScenarioError(f"{path}: {where}: not YAML ({getattr(e, 'problem', None) or e})") from None
    return parse(path, doc)


def load_dir(directory: str) -> list[Scenario]:
    """Every ``*.yaml`` scenario of ``directory``, by name. Raises ScenarioError at the first malformed file."""
    return [load_file(os.path.join(directory, n)) for n in sorted(os.listdir(directory)) if n.endswith(".yaml")]
