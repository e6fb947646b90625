"""The pytest plugin: options, the per-host parametrization, fixtures, scheduling and reports.

A pytest11 entry point ``gpuaccept.plugin`` (so ``--inventory /elsewhere/prod.ini`` is an option before pytest
picks its rootdir, not a test path rooting the run in /elsewhere), also named by the repository's pytest.ini
(``-p``); dormant unless the ini file sets ``gpuaccept_suites = true``: installing gpuaccept changes no other
pytest project. Not rewritten by pytest (gpuaccept/__init__.py): PYTEST_DONT_REWRITE spares a later ``-p`` a warning.
"""
from __future__ import annotations

import gc
import os
import sys
import time

import pytest

from gpuaccept.judging.blockers import DEPENDENT_LAYERS, blockers
from gpuaccept.causes import CAUSE_KEY, Cause
from gpuaccept.errors import ERROR_KEY, ERROR_KIND_KEY, ConfigError, GpuacceptError, Interrupted, ThresholdError
from gpuaccept.config.hostvars import check_hosts
from gpuaccept.config.inputcheck import check_connection_files, check_empty_options, check_local_addresses
from gpuaccept.config.inventory import Inventory, load_inventory
from gpuaccept.runner.host import HostRunner
from gpuaccept.runner import fanout
from gpuaccept.runner import interrupt
from gpuaccept.runner import prefetch
from gpuaccept.runner import progress_relay
from gpuaccept.runner import host as node_module
from gpuaccept.config.patterns import shard
from gpuaccept.scaleout.sizing import advice as sizing_advice
from gpuaccept.config.profiles import PROFILES, probe_timeout
from gpuaccept.reporting.records import LAYERS, layer_of
from gpuaccept.plugin import earlier
from gpuaccept.plugin.reports import ReportPlugin
from gpuaccept.plugin.release import host_param, hosts_in_run, last_uses
from gpuaccept.plugin.state import STATE, RunState
from gpuaccept.config.limitfile import hosts_from_file
from gpuaccept.config.thresholds import load_all
from gpuaccept.transport import get_transport, interruption
from gpuaccept.judging.readings import typed
from gpuaccept.judging.sku import node_sku
from gpuaccept.judging.recorder import Recorder

RECORDER = pytest.StashKey[Recorder]()
from gpuaccept.config import selection
from gpuaccept.config.options import add_options
from gpuaccept.config.paths import SUITES_DIR
from gpuaccept.config.selection import list_hosts_text
from gpuaccept.plugin import collection, empty_shard, nodeactions, output, shown
from gpuaccept.plugin.collection import pytest_pycollect_makemodule  # noqa: F401 - a hook of this plugin
from gpuaccept.plugin.outcomes import DeclaredGpuMissing, declared_text, error_causes, missing_package_line, quiet_excinfo


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("gpuaccept_suites", "run the gpuaccept suites (activates this plugin)", type="bool", default=False)
    parser.addini("gpuaccept_packaged_suites", "with no test path given, collect the suites shipped in the package "
                  "(set by the gpuaccept command)", type="bool", default=False)
    g = parser.getgroup("gpuaccept", "GPU cluster acceptance")
    add_options(g.addoption)


#: environment variable naming the ini file a run adopted (:func:`pytest_load_initial_conftests`), for its workers
ADOPTED_INI = "GPUACCEPT_ADOPTED_INI"


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    """Keep the repository's pytest.ini when an option names a file elsewhere.

    pytest chooses its rootdir and ini file before it knows plugin options, so in
    ``pytest --inventory /etc/fleet/prod.ini`` it takes the inventory for a test path, roots the run in
    /etc/fleet and never reads ./pytest.ini. When that happened and the invocation folder holds the suites'
    pytest.ini, that ini file is adopted in this process (:func:`_adopt_ini`: rootdir, ini values, its
    ``addopts``), before any conftest or test is read; only where this pytest lacks what that needs is the
    same command run again with ``-c ./pytest.ini`` (a public option). The ini adopted is named in the
    environment (:data:`ADOPTED_INI`), so that pytest-xdist's workers, which parse the same command line in
    processes of their own, adopt it too and collect what the controller collects.
    """
    inv_dir = early_config.invocation_params.dir
    ini = inv_dir / "pytest.ini"
    adopted = os.environ.get(ADOPTED_INI)
    if early_config.inipath is None and adopted and os.path.isfile(adopted) and list(args) != sys.argv[1:]:
        from pathlib import Path
        _adopt_ini(early_config, parser, args, Path(adopted))  # an xdist worker of a run that adopted it
        return
    if (early_config.inipath is not None or os.environ.get("GPUACCEPT_REEXEC") or not ini.is_file()
            or list(args) != sys.argv[1:] or "gpuaccept_suites" not in ini.read_text(errors="replace")):
        return
    if _adopt_ini(early_config, parser, args, ini):
        os.environ[ADOPTED_INI] = str(ini)
        return
    os.environ["GPUACCEPT_REEXEC"] = "1"
    capman = early_config.pluginmanager.getplugin("capturemanager")
    if capman is not None:  # give the new process the real stdout/stderr, not pytest's capture files
        capman.stop_global_capturing()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "pytest", "-c", str(ini), *args])


def _adopt_ini(early_config, parser, args: list, ini) -> bool:
    """Make ``ini`` this run's ini file in place, as ``-c ini`` would have (pytest 8 and 9: the rootdir, ini file
    and values of ``Config``, its ``addopts`` put in front of ``args``, ``-p`` among them applied, the
    conftest cut-off moved to the ini's folder). False, with nothing changed, where this pytest lacks a part
    of that (private attributes of ``_pytest.config``): the caller then starts pytest again."""
    import copy

    try:
        from _pytest.config.findpaths import determine_setup
        ns = early_config.known_args_namespace
        needed = ("_rootpath", "_inipath", "_inicfg", "_inicache")
        if not all(hasattr(early_config, a) for a in needed):
            return False
        rootpath, inipath, inicfg, *_ = determine_setup(
            inifile=str(ini), override_ini=ns.override_ini, args=[], rootdir_cmd_arg=ns.rootdir or None,
            invocation_dir=early_config.invocation_params.dir)
    except Exception:  # noqa: BLE001 - another pytest: the public way (a second start) still works
        return False
    old_root = str(early_config.rootpath)
    early_config._rootpath, early_config._inipath, early_config._inicfg = rootpath, inipath, inicfg
    early_config._inicache.clear()
    parser.extra_info["rootdir"], parser.extra_info["inifile"] = str(rootpath), str(inipath)
    addopts = list(early_config.getini("addopts"))
    if addopts:
        args[:] = addopts + list(args)
        early_config.pluginmanager.consider_preparse(addopts, exclude_only=False)  # -p no:cacheprovider
    early_config.known_args_namespace = parser.parse_known_args(args, namespace=copy.copy(early_config.option))
    if early_config.known_args_namespace.confcutdir in (None, old_root):
        early_config.known_args_namespace.confcutdir = str(inipath.parent)
    return True


def check_options(config: pytest.Config) -> None:
    """Refuse a bad option value before any node is touched (gpuaccept.config.selection.check_options), and a
    burn-in too short to be judged (gpuaccept.judging.burnin.minutes_refusal). Raises ConfigError."""
    selection.check_options(config.getoption)
    if config.getoption("burnin_minutes", None) is not None:
        from gpuaccept.judging.burnin import minutes_refusal
        why = minutes_refusal(config.getoption("burnin_minutes", None))
        if why:
            raise ConfigError(why)


def active(config: pytest.Config) -> bool:
    """Whether this run is gpuaccept's: the ini sets ``gpuaccept_suites`` (the repository's pytest.ini, the
    ``gpuaccept`` command), ``--pyargs`` names the package or its suites (``pytest --pyargs gpuaccept``), or the
    command line gives one of gpuaccept's options (gpuaccept.config.options.given: ``pytest --inventory lab.ini``
    in an operator's folder, before "collected 0 items", exit 5; xdist's workers read the same line)."""
    from gpuaccept.config.options import given
    return bool(config.getini("gpuaccept_suites")) or given(config.invocation_params.args) or bool(
        config.option.pyargs) and any(str(a).split("::")[0] in ("gpuaccept", "gpuaccept.suites")
                                      or str(a).startswith("gpuaccept.suites.") for a in config.args)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if active(config) and not _is_worker(config):
        output.guard_stdout(config)  # before pytest's terminal takes it
    if not active(config) or config.option.help:
        return
    packaged = config.getini("gpuaccept_packaged_suites") or not config.getini("gpuaccept_suites")  # or no ini of ours
    if packaged and config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args = [SUITES_DIR]  # the gpuaccept command, or pytest with gpuaccept's options, no test path
    if config.option.verbose == 0 and not config.option.collectonly and not _is_worker(config):
        # a run's console is per host (gpuaccept.plugin.progress): pytest's per-file lines off, as -q does;
        # -v, -q and --collect-only keep their own meaning
        config.option.verbose = -1
    for layer in LAYERS:
        config.addinivalue_line("markers", f"{layer}: the {layer} layer")
    shared = config.workerinput.get("gpuaccept_inventory") if _is_worker(config) else None
    try:  # everything refused before a node is touched: one line, exit 4 (gpuaccept.config.selection)
        check_options(config)
        sel = selection.select(config.getoption, config.rootpath, list(config.invocation_params.args), shared)
        nodeactions.check(config.getoption, _is_worker(config))  # --slurm-*, --k8s-*, --drain-max
    except ConfigError as e:
        raise pytest.UsageError(str(e)) from None
    inv, hosts, specs, hostvars, inv_path = sel.inventory, sel.hosts, sel.specs, sel.hostvars, sel.inv_path
    if not _is_worker(config):
        for line in sel.warnings:  # an unmatched &/! --limit term, ignored as Ansible does
            sys.stderr.write(f"[WARNING] {line}\n")
    state = RunState(inventory=inv, hosts=hosts, specs=specs, hostvars=hostvars, started=time.time())
    if _is_worker(config):
        state.started = config.workerinput.get("gpuaccept_started", state.started)
        state.probe_dir = config.workerinput.get("gpuaccept_probe_dir")
        progress_relay.install_worker(config.workerinput)  # probe starts and live progress to the controller
    config.stash[STATE] = state
    config.pluginmanager.register(earlier, "gpuaccept-earlier-runs")  # the earlier_runs fixture
    if not _is_worker(config) and not config.getoption("list_hosts"):
        from gpuaccept.plugin.repeated_errors import RepeatedErrors
        from gpuaccept.plugin.reports import ReportPlugin
        config.pluginmanager.register(RepeatedErrors(), "gpuaccept-repeated-errors")
        shown.register(config)  # -s: the tests' tables, from their reports (a worker's output is not shown)
        try:  # the report hooks, as an object holding this run's report config
            config.pluginmanager.register(ReportPlugin(config, state, inv_path), "gpuaccept-reporting")
        except ConfigError as e:
            raise pytest.UsageError(str(e)) from None
    if config.getoption("list_hosts"):
        return  # prints and exits (pytest_cmdline_main): nothing to interrupt
    from gpuaccept.runner import interrupt
    interrupt.install(config)  # SIGINT/SIGTERM: kill remote commands, interrupted tests are errors


def _state(config: pytest.Config) -> RunState | None:
    """This run's state, or None when the plugin is dormant (no ``gpuaccept_suites`` in the ini)."""
    return config.stash.get(STATE, None)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # xdist hook (controller side): share the run's start time
    worker = node  # xdist calls its worker controller "node"; the hook's argument name is fixed by xdist
    st = _state(worker.config)
    if st is not None:
        worker.workerinput["gpuaccept_started"] = st.started
        worker.workerinput["gpuaccept_probe_dir"] = st.probe_dir
        worker.workerinput["gpuaccept_inventory"] = (st.inventory.path, st.inventory.text)
        if worker.config.getoption("progress") != "off":  # the workers' probes reach the progress display
            st.progress_dir = st.progress_dir or progress_relay.make_dir()
            worker.workerinput["gpuaccept_progress_dir"] = st.progress_dir


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session) -> None:
    """A ``-m`` naming no registered marker is refused (exit 4) before the report folder is made: here, once
    every plugin has registered its markers (gpuaccept.config.selection.check_markexpr)."""
    config = session.config
    if _state(config) is None or _is_worker(config) or not config.option.markexpr:
        return
    known = {line.split(":")[0].split("(")[0].strip() for line in config.getini("markers")}
    try:
        selection.check_markexpr(config.option.markexpr, known, LAYERS)
    except ConfigError as e:
        reports = config.pluginmanager.get_plugin("gpuaccept-reporting")
        if reports is not None and reports.reporter is not None:
            reports.discard()  # refused: no folder left, as for every refusal
        raise pytest.UsageError(str(e)) from None


def pytest_collection_modifyitems(config, items):
    """The burn-in layer runs only when asked for by marker (``-m burnin``): a burn-in holds a node for many
    minutes, and a plain ``pytest`` (the main job) must not start one by surprise. An empty shard (no host
    selected) runs no test at all (gpuaccept.plugin.empty_shard). Layers run in collection.RUN_ORDER."""
    if _state(config) is None:
        return
    if not config.stash[STATE].hosts:
        return empty_shard.deselect_all(config, items)
    collection.in_run_order(items)
    if "burnin" in (config.option.markexpr or ""):
        return
    keep = [it for it in items if it.get_closest_marker("burnin") is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[it for it in items if it.get_closest_marker("burnin") is not None])
        items[:] = keep


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Hosts in parallel, one host's tests in sequence (see gpuaccept.scaleout.scheduler)."""
    if _state(config) is not None and config.getoption("dist") in ("load", "loadscope", "loadgroup", "loadfile",
                                                                    "worksteal"):
        from gpuaccept.scaleout.scheduler import HostScheduling
        return HostScheduling(config, log)
    return None


# -- parametrization and fixtures --------------------------------------------------------------------
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "node" in metafunc.fixturenames and _state(metafunc.config) is not None:
        names = [h.name for h in metafunc.config.stash[STATE].hosts]
        metafunc.parametrize("node", names, ids=names, indirect=True)


def _get_node(config: pytest.Config, name: str) -> HostRunner:
    from gpuaccept.runner.host import HostRunner
    from gpuaccept.transport import get_transport
    st = config.stash[STATE]
    if name not in st.nodes:
        host = st.inventory.hosts[name]
        kh = config.getoption("known_hosts")
        accept = config.getoption("accept_new_host_keys")
        st.nodes[name] = HostRunner(host, lambda h: get_transport(h, known_hosts=kh, accept_new_host_keys=accept),
                                    probe_timeout(config), config.getoption("sku"), config.getoption("profile"),
                                    st.probe_dir,  # the run's id, for the node lock: the report folder's name
                                    run_id=st.probe_dir and os.path.basename(os.path.dirname(st.probe_dir)))
    return st.nodes[name]


@pytest.fixture
def node(request) -> HostRunner:
    """The host under test (one test per selected host), with its transport and cached probes."""
    return _get_node(request.config, request.param)


@pytest.fixture
def nodes(request) -> list[HostRunner]:
    """Every host in the run (gpuaccept.plugin.release.hosts_in_run), for fleet-wide and multi-node tests."""
    names = hosts_in_run(map(host_param, request.session.items), [h.name for h in request.config.stash[STATE].hosts])
    return [_get_node(request.config, h) for h in names]


@pytest.fixture
def run_started(request) -> float:
    """Unix time at which this run began (the controller's clock)."""
    return request.config.stash[STATE].started


@pytest.fixture
def gpus(request, node: HostRunner) -> list[dict]:
    """The host's GPUs from NVML (gpu_inventory probe), readings typed (gpuaccept.judging.readings), lost GPUs
    included (``lost: true``). Skips "no NVIDIA GPU on <host>" when the host has none (no driver, no GPU)
    and the inventory declares none; an error when NVML is broken there (version mismatch, no permission)
    or the driver is present without nvidia-ml-py; fails when the inventory declares gpu_sku/gpus_per_node."""
    from gpuaccept.judging.blockers import declared_missing_cause, readiness_problem
    doc = node.gpu_inventory()
    found = typed(doc.get("gpus") or []) if doc.get("nvml_available") else []
    if not found:
        why = doc.get("reason") or "NVML sees no GPU"
        problem = readiness_problem(doc, node.python, node.gpus_declared)
        if problem:
            raise problem.error(node.name)
        if node.gpus_declared:
            raise DeclaredGpuMissing(f"{node.name}: no NVIDIA GPU found ({why}) but {declared_text(node.host.vars, node.sku_override)}",
                                     declared_missing_cause(doc, node.name, node.host.vars.get("gpus_per_node")))
        pytest.skip(f"no NVIDIA GPU on {node.name} ({why})")
    return found


def _node_sku(config: pytest.Config, node: HostRunner, gpus: list[dict]):
    specs = config.stash[STATE].specs
    return node_sku(node.name, specs, node.sku_override, node.host.vars.get("gpu_sku"), gpus)


@pytest.fixture
def specs(request) -> dict:
    """The loaded threshold files: SKU name -> SkuSpec (gpuaccept.config.thresholds.load_all)."""
    return request.config.stash[STATE].specs


@pytest.fixture
def sku(request, node: HostRunner, gpus):
    """The host's SkuSpec (thresholds file): --sku, inventory gpu_sku, or detected from NVML (gpuaccept.judging.sku)."""
    return _node_sku(request.config, node, gpus)


@pytest.fixture
def verdicts(request) -> Recorder:
    """Figure recorder and judge for this test (see gpuaccept.judging.recorder). In a dependent layer it carries
    the host's blockers (gpuaccept.judging.blockers), which turn the test into "blocked by <check>" errors."""
    from gpuaccept.judging.blockers import DEPENDENT_LAYERS, blockers
    from gpuaccept.judging.recorder import Recorder
    from gpuaccept.transport import interruption
    item = request.node  # pytest's test item (pytest calls it "node"; our host runner is the fixture "node")
    host = host_param(item)
    layer = layer_of(item.nodeid)
    gpu_ids, found = {}, []
    if host is not None and "gpus" in request.fixturenames:
        found = request.getfixturevalue("gpus")
        gpu_ids = {g.get("index"): g for g in found}
    blocks = []
    if found and layer in DEPENDENT_LAYERS:
        node = request.getfixturevalue("node")
        try:
            spec = _node_sku(request.config, node, found)
        except ThresholdError:
            spec = None  # the test itself reports the SKU problem; the fabric is then not judged here
        blocks = blockers(node.gpu_inventory(), spec, request.getfixturevalue("specs"))
    rec = Recorder(item, host or "fleet", layer, gpu_ids, blocks, interrupted=interruption)
    if found:
        inv = request.getfixturevalue("node").gpu_inventory()
        if "cuda_visible_devices" in inv:
            rec.environment["cuda_visible_devices"] = inv.get("cuda_visible_devices")
    item.stash[RECORDER] = rec
    return rec


# -- outcomes and reports ------------------------------------------------------------------------
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Our own errors (unreachable host, crashed probe, timeout, bad SKU) become one clean line and are
    marked so the reports count them as errors rather than failures. The outcome of a test that recorded
    figures is decided here, once, from its Recorder (gpuaccept.judging.recorder.outcome): a recorded failure fails
    the test even when it returned or skipped, and a blocked test is an error "blocked by <check>".

    Our own errors are a diagnosis, not a bug: pytest is not asked to format their traceback (it parses the
    source of every frame, ~50 deep through paramiko: 55 ms of CPU per error, 21 s for 32 dead hosts' 384
    health tests), only to report a message that the lines below replace."""
    if call.when == "call":
        _take_replay_notes(item)
    orig = call.excinfo
    if orig is not None and orig.errisinstance((GpuacceptError, DeclaredGpuMissing)):
        call.excinfo = quiet_excinfo(str(orig.value))
    try:
        outcome = yield
    finally:
        call.excinfo = orig
    rep = outcome.get_result()
    if call.excinfo is not None and call.excinfo.errisinstance(DeclaredGpuMissing):
        rep.when = "call"  # reported as a failure (the host is bad), not as a setup error
        rep.longrepr = str(call.excinfo.value)
        rep.user_properties.append((CAUSE_KEY, [call.excinfo.value.cause.to_dict()]))
        return
    if _state(item.config) is None:
        return
    rec = item.stash.get(RECORDER, None)
    if call.excinfo is not None and call.excinfo.errisinstance(GpuacceptError):
        e = call.excinfo.value
        lines = [missing_package_line(item, e) or str(e)]
        causes = earlier.escalated(error_causes(e, host_param(item)), item.config)
        if rec is not None and call.when == "call":
            out = rec.outcome()
            lines = [b.message() for b in out.blocked] + lines + rec.findings(
                before_interruption=call.excinfo.errisinstance(Interrupted))
            causes = [b.to_cause(rec.host) for b in out.blocked] + causes
        rep.longrepr = "\n".join(lines)
        rep.user_properties.append((ERROR_KEY, rep.longrepr))
        rep.user_properties.append((ERROR_KIND_KEY, type(e).__name__))
        rep.user_properties.append((CAUSE_KEY, [c.to_dict() for c in causes]))
        return
    if call.excinfo is not None and not call.excinfo.errisinstance(
            (pytest.fail.Exception, pytest.skip.Exception, KeyboardInterrupt, AssertionError)):
        # A Python error in gpuaccept's own code while judging this host: an ERROR with one line saying so and
        # where, never a FAILURE of the node (the traceback stays in pytest's own terminal report). A plain
        # ``assert`` in a suite (an operator's own check, testinfra-style) stays pytest's failure.
        e = call.excinfo.value
        tb = call.excinfo.traceback[-1] if call.excinfo.traceback else None
        where = f" at {os.path.basename(str(tb.path))}:{tb.lineno + 1}" if tb is not None else ""
        line = f"internal error in gpuaccept{where}: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        head = [b.message() for b in rec.outcome().blocked] if rec is not None else []
        rep.longrepr = "\n".join(head + [line] + (rec.lines() + rec.errors if rec is not None else []))
        rep.user_properties.append((ERROR_KEY, rep.longrepr))
        rep.user_properties.append((ERROR_KIND_KEY, "internal"))
        rep.user_properties.append((CAUSE_KEY, [Cause("tool", "internal", host_param(item)).to_dict()]))
        return
    if rec is None or call.when != "call":
        return
    out = rec.outcome()
    finished = call.excinfo is not None and call.excinfo.errisinstance(pytest.fail.Exception)
    skipped = call.excinfo is not None and call.excinfo.errisinstance(pytest.skip.Exception)
    if out.kind == "passed" or (skipped and not (rec.failures or rec.errors)):
        return  # the suite's own pass or skip (a skip with blockers only is still inapplicable)
    rep.outcome = "failed"
    rep.longrepr = out.message
    if out.kind == "error":
        rep.user_properties.append((ERROR_KEY, out.message))
    if out.causes:  # an error's; a failure's gaps beside its findings
        rep.user_properties.append((CAUSE_KEY, [c.to_dict() for c in out.causes]))


def _take_replay_notes(item) -> None:
    """The notes of the test's replayed host (why a saved document with other arguments answered a probe:
    gpuaccept.runner.replay) as ``replay_note`` figures of its Recorder, so that results.json and summary.md
    say so; each note once, on the test that read the document."""
    rec = item.stash.get(RECORDER, None)
    node = getattr(item, "funcargs", {}).get("node")
    notes = getattr(node, "replay_notes", None)
    if rec is None or not notes:
        return
    for note in notes:
        rec.record("replay_note", note)
    notes.clear()


def pytest_report_teststatus(report, config):
    """pytest's own terminal counts and letters: a report marked as one of our errors (ERROR_KEY: unreachable
    host, crashed probe, timeout, blocked by a precondition, a measurement gap, interrupted) is counted under
    "errors" and listed as ERROR, as JUnit and summary.md count it, not under "failed". Without ``-v`` no
    letter is written per test (a 300-host run wrote rows of dots glued to the progress lines): the console
    (gpuaccept.plugin.progress) has a line per host instead. The report itself is
    left as it is (a failed call), so the exit code, ``--lf`` and the report files are unchanged."""
    ours = report.failed and any(k == ERROR_KEY for k, _ in getattr(report, "user_properties", ()) or ())
    if _state(config) is None or config.option.verbose > 0 or hasattr(report, "wasxfail"):
        return ("error", "E", "ERROR") if ours else None
    # our console (gpuaccept.plugin.progress) says per host what pytest's letters said per test: none of them
    if ours:
        return "error", "", "ERROR"
    if report.passed:
        return ("passed", "", "PASSED") if report.when == "call" else ("", "", "")
    if report.skipped:
        return "skipped", "", "SKIPPED"
    return ("failed" if report.when == "call" else "error"), "", "FAILED" if report.when == "call" else "ERROR"


def _forks(config: pytest.Config) -> int:
    from gpuaccept.runner import fanout
    forks = config.getoption("forks")
    return fanout.DEFAULT_FORKS if forks is None else max(0, forks)


def pytest_report_collectionfinish(config, start_path, items) -> list[str]:
    """Above the hosts one controller takes (gpuaccept.scaleout.sizing), one line after "collected N items" that
    sends the operator to shards: ``--collect-only`` at that count says so, and so does the run."""
    st = _state(config)
    if st is None or _is_worker(config):
        return []
    line = sizing_advice(len(st.hosts), config.getoption("shard"))
    return [line] if line else []


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session) -> None:
    """Fan-out (gpuaccept.runner.fanout): connect, ship and run gpu_inventory on every host the selected GPU tests
    need, ``--forks`` at a time, while the tests start; the tests then find the document waiting. Later probes
    are fetched ahead across hosts (gpuaccept.runner.prefetch). Only in a run without xdist workers (each worker
    would connect to every host)."""
    config = session.config
    if _state(config) is None or _is_worker(config) or getattr(config.option, "numprocesses", None) \
            or config.option.collectonly or not session.items:
        return  # --collect-only and an empty selection touch no node
    st = _state(config)
    st.release = last_uses(session.items, [h.name for h in st.hosts])
    if not _forks(config):
        return
    names = []
    for it in session.items:
        name = host_param(it)
        if name is not None and "gpus" in getattr(it, "fixturenames", ()) and name not in names:
            names.append(name)
    from gpuaccept.runner import fanout, prefetch
    from gpuaccept.runner import host as node_module
    fanout.warm_up([_get_node(config, n) for n in names], _forks(config),
                   run_start_memory=any(getattr(it, "originalname", "") == fanout.RUN_START_TEST for it in session.items))
    # every later probe too: fetched ahead on the hosts whose test of the same function is next (gpuaccept.runner.prefetch)
    pf = _state(config).prefetch = prefetch.Prefetcher(prefetch.describe(session.items),
                                                          lambda n: _get_node(config, n), _forks(config),
                                                          [h.name for h in st.hosts])
    node_module.PROBE_HOOK[:] = [pf.probe]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Tell the prefetcher (gpuaccept.runner.prefetch) which test runs: its results are that test's to take.
    Once the test has ended, what only it and earlier tests read is let go (gpuaccept.plugin.release): its
    Recorder, and the cached probe documents of the hosts whose last test it was."""
    st = _state(item.config)
    if st is None:
        return (yield)
    pf = st.prefetch
    if pf is not None:
        pf.begin(item.nodeid)
    try:
        return (yield)
    finally:
        if pf is not None:
            pf.end(item.nodeid)
        if RECORDER in item.stash:
            del item.stash[RECORDER]
        for name in st.release.pop(item, ()):
            if name in st.nodes:
                st.nodes[name].forget_cached()


def pytest_sessionfinish(session, exitstatus) -> None:
    st = session.config.stash.get(STATE, None)
    if st is None:
        return
    if not st.hosts and not _is_worker(session.config):  # an empty shard: exit 0, said in one line
        empty_shard.finish(session, session.config.getoption("shard"), session.config.getoption("limit"))
    if st.prefetch is not None:  # results fetched ahead that no test took: dropped, their probes killed
        node_module.PROBE_HOOK[:] = []
        pf, st.prefetch = st.prefetch, None
        pf.close()
    fanout.close_all(list(st.nodes.values()), _forks(session.config) or 1)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config):
    """``--list-hosts``: print the selection and exit 0 (bad input still exits 4); no node, no report folder.
    A standard output that cannot take the list exits 1 (:func:`gpuaccept.plugin.output.stdout_gone`). ``--limit=@FILE`` whose file
    lists no host ends the run here: one line, exit 5 (gpuaccept.config.limitfile.nothing_to_rerun)."""
    if active(config) and not _is_worker(config) and not config.option.help:
        from gpuaccept.config.limitfile import NOTHING_TO_RERUN_EXIT, nothing_to_rerun
        why = nothing_to_rerun(config.getoption("limit", None))
        if why:
            sys.stderr.write(why + "\n")
            return NOTHING_TO_RERUN_EXIT
    if not config.getoption("list_hosts", False) or not active(config):
        return None
    config._do_configure()  # as pytest's own --markers does: our pytest_configure reads and selects
    try:
        tw = config.get_terminal_writer()
        tw.line(list_hosts_text(config.stash[STATE].hosts, config.getoption("sku")))
        tw.flush()
    except OSError as e:
        output.stdout_gone(e)
        return 1
    return 1 if output.stdout_broken(config) else 0  # its reader went away: cut, quietly


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The run is over: every object alive now is frozen out of the cycle collector (gc.freeze), so pytest's
    closing full collections (its unraisable-exception check runs gc.collect twice, 0.1 s at 32 hosts, more
    at fleet size) scan only what is made after this point."""
    output.release_stdout(config)
    if active(config):
        gc.freeze()
