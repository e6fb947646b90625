"""The pytest plugin: options, the per-host parametrization, fixtures, scheduling and reports.

Installed as a pytest11 entry point named ``gpuaccept.plugin`` (so ``--inventory /elsewhere/prod.ini`` is a
known option before pytest chooses its rootdir: otherwise pytest takes that path for a test path and roots
the run in /elsewhere), and also named by the repository's conftest.py for runs without installation.
It stays dormant unless the ini file sets ``gpuaccept_suites = true`` (the repository's pytest.ini does),
so installing gpuaccept changes no other pytest project.
"""
from __future__ import annotations

import os
import re
import sys
import time
from typing import Any

import pytest

from .blockers import DEPENDENT_LAYERS, blockers, missing_package, readiness_problem
from .drift import check_vars as check_drift_vars
from .errors import ConfigError, GpuacceptError, ProbeError, ThresholdError
from .hostvars import check_hosts
from .inventory import Inventory, load_inventory
from .node import Node
from . import interrupt
from .patterns import shard
from .profiles import PROBE_TIMEOUT_S, PROFILES
from .report import LAYERS, Reporter, CaseRecord, load_previous_figures
from .thresholds import load_all
from .transport import get_transport
from .readings import typed
from .sku import node_sku
from .verdicts import FIGURE_KEY, Recorder

STATE = pytest.StashKey[dict]()
RECORDER = pytest.StashKey[Recorder]()


class DeclaredGpuMissing(Exception):
    """The inventory declares GPUs for a host that shows none: a failure of the host, not of the run."""
ERROR_KEY = "gpuaccept.error"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("gpuaccept_suites", "run the gpuaccept suites (activates this plugin)", type="bool", default=False)
    g = parser.getgroup("gpuaccept", "GPU cluster acceptance")
    g.addoption("--inventory", default=None, help="Ansible inventory (INI or YAML); default inventory/localhost.ini")
    g.addoption("--limit", default=None, help="Ansible host pattern: a,b  group  group:&other  group:!drained  gpu[01:04]")
    g.addoption("--sku", default=None, help="GPU SKU for every selected host (a thresholds/<sku>.yaml stem); overrides detection")
    g.addoption("--reports", default=None, help="report folder; default reports/<UTC timestamp>, reports/latest -> newest")
    g.addoption("--thresholds", default=None, help="threshold folder; default thresholds/")
    g.addoption("--probe-timeout", type=float, default=None,
                help="wall-clock limit of one probe on one host, seconds (default: quick 180, standard 300, burnin 1800)")
    g.addoption("--accept-new-host-keys", action="store_true", default=False,
                help="trust and record unknown SSH host keys (like StrictHostKeyChecking=accept-new); changed keys are always refused")
    g.addoption("--profile", default="standard", choices=sorted(PROFILES),
                help="how long probes measure: quick (fleet sweeps, debugging), standard, burnin (minutes per load)")
    g.addoption("--xid-window", type=float, default=None,
                help="read XID events from this many seconds before the run began (default: since the run began)")
    g.addoption("--burnin-minutes", type=float, default=None,
                help="length of the burn-in layer (-m burnin), minutes (default by profile: 2, 10, 60)")
    g.addoption("--known-hosts", default=None, help="extra known_hosts file, checked with ~/.ssh/known_hosts")
    g.addoption("--shard", default=None, metavar="I/K",
                help="run a stable 1/K of the selected hosts (shard I of K, by a hash of the host name)")
    g.addoption("--nccl-pattern", choices=("ring", "pairwise", "rails"), default="ring", help="inter-node all-reduce: ring (all hosts at once, default), pairwise (random pairs, names a slow host), rails (one collective per GPU index)")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    """Keep the repository's pytest.ini when an option names a file elsewhere.

    pytest chooses its rootdir and ini file before it knows plugin options, so in
    ``pytest --inventory /etc/fleet/prod.ini`` it takes the inventory for a test path, roots the run in
    /etc/fleet and never reads ./pytest.ini. When that happened and the invocation folder holds the suites'
    pytest.ini, run the same command again with ``-c ./pytest.ini`` (a public option) before anything ran.
    """
    inv_dir = early_config.invocation_params.dir
    ini = inv_dir / "pytest.ini"
    if (early_config.inipath is not None or os.environ.get("GPUACCEPT_REEXEC") or not ini.is_file()
            or list(args) != sys.argv[1:] or "gpuaccept_suites" not in ini.read_text(errors="replace")):
        return
    os.environ["GPUACCEPT_REEXEC"] = "1"
    capman = early_config.pluginmanager.getplugin("capturemanager")
    if capman is not None:  # give the new process the real stdout/stderr, not pytest's capture files
        capman.stop_global_capturing()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "pytest", "-c", str(ini), *args])


def _root(config: pytest.Config, path: str | None, default: str) -> str:
    if path:
        return os.path.abspath(path)
    return str(config.rootpath / default)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if not config.getini("gpuaccept_suites") or config.option.help:
        return
    for layer in LAYERS:
        config.addinivalue_line("markers", f"{layer}: the {layer} layer")
    inv_path = _root(config, config.getoption("inventory"), "inventory/localhost.ini")
    try:
        specs = load_all(_root(config, config.getoption("thresholds"), "thresholds"))
        sku = config.getoption("sku")
        if sku and sku not in specs:
            raise ThresholdError(f"--sku '{sku}' is not a known SKU; known: {', '.join(sorted(specs))}")
        inv: Inventory = load_inventory(inv_path)
        hosts = inv.select(config.getoption("limit"))
        hosts = [inv.hosts[n] for n in shard([h.name for h in hosts], config.getoption("shard"))]
        hostvars = check_hosts(hosts, inv_path, None if sku else specs)  # --sku wins over gpu_sku
        for h in hosts:
            if h.connection == "ssh" and h.key_file and not os.access(os.path.expanduser(h.key_file), os.R_OK):
                why = "does not exist" if not os.path.exists(os.path.expanduser(h.key_file)) else "is not readable"
                raise ConfigError(f"{inv_path}: host {h.name}: ansible_ssh_private_key_file {h.key_file} {why}")
            check_drift_vars(f"{inv_path}: host {h.name}", h.vars)
    except ConfigError as e:
        raise pytest.UsageError(str(e)) from None
    state: dict[str, Any] = {"inventory": inv, "hosts": hosts, "specs": specs, "nodes": {}, "partial": {},
                             "started": time.time()}
    state["hostvars"] = hostvars  # host -> {var: parsed value} (gpuaccept.hostvars), checked above
    if _is_worker(config):
        state["started"] = config.workerinput.get("gpuaccept_started", state["started"])
        state["probe_dir"] = config.workerinput.get("gpuaccept_probe_dir")
    else:
        rdir = config.getoption("reports")
        latest = config.rootpath / "reports" / "latest"
        previous = os.path.realpath(latest) if os.path.isdir(latest) else None
        if rdir is None:
            base = str(config.rootpath / "reports")
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            for n in range(1000):  # mkdir is atomic: two runs started in the same second get two folders
                rdir = os.path.join(base, stamp + (f"-{n}" if n else ""))
                try:
                    os.makedirs(rdir)
                    break
                except FileExistsError:
                    continue
                except OSError as e:
                    raise pytest.UsageError(f"reports folder {rdir}: cannot create: {e.strerror}") from None
            _point_latest(rdir)
        else:
            try:
                os.makedirs(rdir, exist_ok=True)
            except OSError as e:
                raise pytest.UsageError(f"--reports {rdir}: cannot create: {e.strerror}") from None
        run_id = os.path.basename(os.path.normpath(rdir))
        state["probe_dir"] = os.path.join(rdir, "probes")  # every probe's raw document, per host
        state["reporter"] = Reporter(rdir, run_id, {"inventory": inv_path, "limit": config.getoption("limit"),
                                                    "hosts": [h.name for h in hosts], "started": state["started"],
                                                    "previous_run": previous,
                                                    "profile": config.getoption("profile")},
                                     previous=load_previous_figures(previous))
    config.stash[STATE] = state
    interrupt.install(config)  # SIGINT/SIGTERM: kill remote commands, interrupted tests are errors


def _point_latest(rdir: str) -> None:
    parent = os.path.dirname(os.path.abspath(rdir))
    link = os.path.join(parent, "latest")
    if os.path.islink(link) or not os.path.exists(link):
        tmp = f"{link}.tmp{os.getpid()}"
        try:
            os.symlink(os.path.basename(os.path.abspath(rdir)), tmp)
            os.replace(tmp, link)
        except OSError:
            pass


def _state(config: pytest.Config) -> dict | None:
    """This run's state, or None when the plugin is dormant (no ``gpuaccept_suites`` in the ini)."""
    return config.stash.get(STATE, None)


def pytest_configure_node(node) -> None:  # xdist hook (controller side): share the run's start time
    st = _state(node.config)
    if st is not None:
        node.workerinput["gpuaccept_started"] = st["started"]
        node.workerinput["gpuaccept_probe_dir"] = st.get("probe_dir")


def pytest_xdist_make_scheduler(config, log):
    """Hosts in parallel, one host's tests in sequence (see gpuaccept.scheduler)."""
    if _state(config) is not None and config.getoption("dist") in ("load", "loadscope", "loadgroup", "loadfile",
                                                                    "worksteal"):
        from .scheduler import HostScheduling
        return HostScheduling(config, log)
    return None


# -- parametrization and fixtures --------------------------------------------------------------------
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "node" in metafunc.fixturenames and _state(metafunc.config) is not None:
        names = [h.name for h in metafunc.config.stash[STATE]["hosts"]]
        metafunc.parametrize("node", names, ids=names, indirect=True)


def probe_timeout(config: pytest.Config) -> float:
    """``--probe-timeout``, else the profile's default (gpuaccept.profiles.PROBE_TIMEOUT_S)."""
    return config.getoption("probe_timeout") or PROBE_TIMEOUT_S[config.getoption("profile")]


def _get_node(config: pytest.Config, name: str) -> Node:
    st = config.stash[STATE]
    if name not in st["nodes"]:
        host = st["inventory"].hosts[name]
        kh = config.getoption("known_hosts")
        accept = config.getoption("accept_new_host_keys")
        st["nodes"][name] = Node(host, lambda h: get_transport(h, known_hosts=kh, accept_new_host_keys=accept),
                                 st["specs"], probe_timeout(config), config.getoption("sku"), config.getoption("profile"),
                                 st.get("probe_dir"))
    return st["nodes"][name]


@pytest.fixture
def node(request) -> Node:
    """The host under test (one test per selected host), with its transport and cached probes."""
    return _get_node(request.config, request.param)


@pytest.fixture
def nodes(request) -> list[Node]:
    """Every selected host, for fleet-wide and multi-node tests."""
    return [_get_node(request.config, h.name) for h in request.config.stash[STATE]["hosts"]]


@pytest.fixture
def run_started(request) -> float:
    """Unix time at which this run began (the controller's clock)."""
    return request.config.stash[STATE]["started"]


@pytest.fixture
def gpus(request, node: Node) -> list[dict]:
    """The host's GPUs from NVML (gpu_inventory probe), readings typed (gpuaccept.readings), lost GPUs
    included (``lost: true``). Skips "no NVIDIA GPU on <host>" when the host has none (no driver, no GPU)
    and the inventory declares none; an error when NVML is broken there (version mismatch, no permission)
    or the driver is present without nvidia-ml-py; fails when the inventory declares gpu_sku/gpus_per_node."""
    doc = node.gpu_inventory()
    found = typed(doc.get("gpus") or []) if doc.get("nvml_available") else []
    if not found:
        why = doc.get("reason") or "NVML sees no GPU"
        problem = readiness_problem(doc, node.python)
        if problem:
            raise ProbeError(node.name, problem)
        if node.gpus_declared:
            raise DeclaredGpuMissing(f"{node.name}: no NVIDIA GPU found ({why}) but the inventory declares "
                                     f"gpu_sku={node.host.vars.get('gpu_sku')} "
                                     f"gpus_per_node={node.host.vars.get('gpus_per_node')}")
        pytest.skip(f"no NVIDIA GPU on {node.name} ({why})")
    return found


def _node_sku(node: Node, gpus: list[dict]):
    return node_sku(node.name, node.specs, node.sku_override, node.host.vars.get("gpu_sku"), gpus)


@pytest.fixture
def sku(node: Node, gpus):
    """The host's SkuSpec (thresholds file): --sku, inventory gpu_sku, or detected from NVML (gpuaccept.sku)."""
    return _node_sku(node, gpus)


@pytest.fixture
def verdicts(request) -> Recorder:
    """Figure recorder and judge for this test (see gpuaccept.verdicts). In a dependent layer it carries
    the host's blockers (gpuaccept.blockers), which turn the test into "blocked by <check>" errors."""
    host = request.node.callspec.params.get("node") if hasattr(request.node, "callspec") else None
    layer = layer_of(request.node.nodeid)
    gpu_ids, found = {}, []
    if host is not None and "gpus" in request.fixturenames:
        found = request.getfixturevalue("gpus")
        gpu_ids = {g.get("index"): g for g in found}
    blocks = []
    if found and layer in DEPENDENT_LAYERS:
        node = request.getfixturevalue("node")
        try:
            spec = _node_sku(node, found)
        except ThresholdError:
            spec = None  # the test itself reports the SKU problem; the fabric is then not judged here
        blocks = blockers(node.gpu_inventory(), spec)
    rec = Recorder(request.node, host or "fleet", layer, gpu_ids, blocks)
    request.node.stash[RECORDER] = rec
    return rec


def layer_of(nodeid: str) -> str:
    """The layer of a test id: ``suites/test_<layer>[_more].py::...`` → layer (else "other")."""
    m = re.search(r"test_([a-z]+)\w*\.py::", nodeid)
    return m.group(1) if m and m.group(1) in LAYERS else "other"


def host_of(nodeid: str) -> str | None:
    """The host parameter of a test id (``...[host]``), or None."""
    return nodeid[nodeid.index("[") + 1:-1] if nodeid.endswith("]") and "[" in nodeid else None


# -- outcomes and reports ------------------------------------------------------------------------
def pytest_collection_finish(session) -> None:
    rep = (_state(session.config) or {}).get("reporter")
    if rep is not None:  # after -k/-m deselection: only what will run is expected
        for it in session.items:
            rep.expect(it.nodeid, host_of(it.nodeid), layer_of(it.nodeid))


def pytest_xdist_node_collection_finished(node, ids) -> None:
    rep = (_state(node.config) or {}).get("reporter")
    for nid in ids if rep is not None else ():
        rep.expect(nid, host_of(nid), layer_of(nid))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Our own errors (unreachable host, crashed probe, timeout, bad SKU) become one clean line and are
    marked so the reports count them as errors rather than failures. The outcome of a test that recorded
    figures is decided here, once, from its Recorder (gpuaccept.verdicts.outcome): a recorded failure fails
    the test even when it returned or skipped, and a blocked test is an error "blocked by <check>"."""
    outcome = yield
    rep = outcome.get_result()
    if call.excinfo is not None and call.excinfo.errisinstance(DeclaredGpuMissing):
        rep.when = "call"  # reported as a failure (the host is bad), not as a setup error
        rep.longrepr = str(call.excinfo.value)
        return
    if _state(item.config) is None:
        return
    rec = item.stash.get(RECORDER, None)
    if call.excinfo is not None and call.excinfo.errisinstance(GpuacceptError):
        lines = [_missing_package(item, str(call.excinfo.value)) or str(call.excinfo.value)]
        if rec is not None and call.when == "call":
            out = rec.outcome()
            lines = [b.message() for b in out.blocked] + lines + rec.lines() + rec.errors
        rep.longrepr = "\n".join(lines)
        rep.user_properties.append((ERROR_KEY, rep.longrepr))
        return
    if rec is None or call.when != "call":
        return
    out = rec.outcome()
    finished = call.excinfo is not None and call.excinfo.errisinstance(pytest.fail.Exception)
    skipped = call.excinfo is not None and call.excinfo.errisinstance(pytest.skip.Exception)
    if call.excinfo is not None and not (finished or skipped):
        return  # a Python error in a suite: pytest's own report
    if out.kind == "passed" or (skipped and not (rec.failures or rec.errors)):
        return  # the suite's own pass or skip (a skip with blockers only is still inapplicable)
    rep.outcome = "failed"
    rep.longrepr = out.message
    if out.kind == "error":
        rep.user_properties.append((ERROR_KEY, out.message))


def _missing_package(item, message: str) -> str | None:
    """``"<host>: driver present (...), torch missing for <python>"`` for a probe that died on a missing
    package (gpuaccept.blockers.missing_package), else None."""
    node = item.funcargs.get("node") if hasattr(item, "funcargs") else None
    if not isinstance(node, Node) or "No module named" not in message:
        return None
    try:
        doc = node.gpu_inventory()
    except Exception:  # noqa: BLE001 - the probe error itself is the answer then
        doc = None
    line = missing_package(message, doc, node.python)
    return f"{node.name}: {line}" if line else None


def _message(report) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    ours = [v for k, v in report.user_properties if k == ERROR_KEY]
    if ours:
        return ours[-1]
    # xdist prefixes a worker's failure text with "[gw0] linux -- Python ..."; drop that line
    lines = [ln for ln in (report.longreprtext or "").splitlines() if not re.match(r"\[gw\d+\] ", ln)]
    text = "\n".join(lines).strip()
    return text if len(text) < 4000 else text[-4000:]


def pytest_runtest_logreport(report) -> None:
    cfg = _CONFIG.get("config")
    if cfg is None or _is_worker(cfg) or _state(cfg) is None:
        return
    st = cfg.stash[STATE]
    part = st["partial"].setdefault(report.nodeid, {"outcome": "passed", "message": "", "duration": 0.0,
                                                    "props": []})
    part["duration"] += getattr(report, "duration", 0.0) or 0.0
    part["props"] = list(report.user_properties) or part["props"]
    if report.skipped and part["outcome"] == "passed":
        part["outcome"], part["message"] = "skipped", _message(report)
    elif report.failed:
        is_ours = any(k == ERROR_KEY for k, _ in report.user_properties)
        kind = "failed" if report.when == "call" and not is_ours else "error"
        if part["outcome"] not in ("failed", "error"):
            part["outcome"], part["message"] = kind, _message(report)
    if report.when == "teardown":
        _finalize(st, report.nodeid)


def _finalize(st: dict, nodeid: str) -> None:
    part = st["partial"].pop(nodeid)
    figs = [v for k, v in part["props"] if k == FIGURE_KEY]
    st["reporter"].add(CaseRecord(nodeid, nodeid.split("::")[-1], host_of(nodeid), layer_of(nodeid),
                                  part["outcome"], part["message"], round(part["duration"], 3), figs))


_CONFIG: dict[str, pytest.Config] = {}


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session) -> None:
    _CONFIG["config"] = session.config


def pytest_sessionfinish(session, exitstatus) -> None:
    st = session.config.stash.get(STATE, None)
    if st is None:
        return
    for n in list(st["nodes"].values()):
        n.close()
    rep = st.get("reporter")
    if rep is not None:
        for nodeid in list(st["partial"]):
            _finalize(st, nodeid)
        reason = "run interrupted" if exitstatus == pytest.ExitCode.INTERRUPTED else "no result (worker crashed?)"
        rep.close(reason)
        if rep.write_error:  # results were measured but not all kept: say so, and do not exit 0
            tr = session.config.pluginmanager.get_plugin("terminalreporter")
            if tr is not None:
                tr.ensure_newline()
                tr.write_line(f"ERROR: gpuaccept reports: {rep.write_error}", red=True)
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    st = config.stash.get(STATE, None)
    if st and st.get("reporter"):
        terminalreporter.write_line(f"gpuaccept reports: {st['reporter'].dir}")
