"""Recording figures and judging them inside a suite test.

A :class:`Recorder` is bound to one test item and one host. Every figure recorded becomes a record in
``results.json`` and a property of the JUnit testcase (carried in the item's ``user_properties``, which
pytest-xdist ships to the controller). Judging goes through the one pure judge,
:func:`gpuaccept.config.thresholds.judge`.

The test's outcome is decided once, by :func:`outcome`, from what was recorded; the plugin's
``pytest_runtest_makereport`` hook applies it whether the suite called :meth:`Recorder.finish`, returned
early or skipped, so a recorded failure can not be lost:

- a figure outside its limit, or a :meth:`Recorder.fail`, on a GPU (or host) that nothing blocks → FAILED,
  one line per failure naming host, GPU index, PCI bus id, serial, figure, limit and unit;
- otherwise, in a dependent layer (:data:`gpuaccept.judging.blockers.DEPENDENT_LAYERS`) of a host with blockers
  (foreign process, fabric not ready, GPU lost, driver mismatch) → ERROR "blocked by <check>: <cause>",
  figures kept and listed under it;
- otherwise a measurement gap (:meth:`Recorder.error`: a required figure not measured, an NVML GPU missing
  from a probe's list, a figure with no value) → ERROR;
- otherwise PASSED (or the suite's own skip).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuaccept.causes import Cause
from gpuaccept.judging import actions
from gpuaccept.judging.blockers import DEPENDENT_LAYERS, Blocker
from gpuaccept.judging.drift import bus_key, nvml_gpu_for
from gpuaccept.judging.readings import describe_gpu, to_json, unmeasured
from gpuaccept.config.thresholds import Limit, judge
from typing import Callable

FIGURE_KEY = "gpuaccept.figure"
#: user_properties key of each failure line with the GPU it names (``{host, gpu, pci_bus_id, serial, line, check,
#: action}``): the reports give a verdict per GPU from these (gpuaccept.reporting.verdicts.host_verdicts), not only
#: per test, and the action decided where the failure was found (gpuaccept.judging.actions)
FAILURE_KEY = "gpuaccept.failure"
#: user_properties key of each figure found below its floor once and not again (``{host, gpu, pci_bus_id,
#: serial, check, first, second, unit, line}``): recorded as unstable, not as a failure (gpuaccept.judging.confirm)
UNSTABLE_KEY = "gpuaccept.unstable"
#: user_properties key of each text a test shows an operator who asked for its output (``-s``: nccl-tests' table);
#: the process running the terminal writes it (gpuaccept.plugin.shown), under pytest-xdist too
SHOW_KEY = "gpuaccept.show"


def gpu_label(gpu: dict | None) -> str:
    """``"GPU 3 (0000:19:00.0, serial 1650...)"`` from a probe's per-GPU dict; ``""`` for node figures.
    Unreadable fields (NVML errors) are left out."""
    if not gpu:
        return ""
    bus, serial = gpu.get("pci_bus_id"), gpu.get("serial")
    parts = [p for p in (bus if isinstance(bus, str) else None,
                         f"serial {serial}" if isinstance(serial, str) and serial else None) if p]
    return f"GPU {gpu.get('index', '?')}" + (f" ({', '.join(parts)})" if parts else "")


#: (direction, repr of the bound, source, site) -> the ``limit`` entry of every figure judged against such a limit: one dict for
#: them all (at 1,000 hosts 68,000 figures carry one; a dict each was 12 MiB of the controller). Never changed once
#: made: the reports only read it.
_LIMIT_RECORDS: dict[tuple, dict] = {}


def limit_record(limit: Limit) -> dict:
    """A judged figure's ``limit`` entry: ``{min|max: bound, "source": ...[, "site": file:line]}`` (``site``: a
    site file's entry replaced the threshold file's, gpuaccept/config/sitelimits.py); the same dict for every
    figure judged against an equal limit (:data:`_LIMIT_RECORDS`), so never change one."""
    key = (limit.direction, repr(limit.bound), limit.source, limit.site)  # 1 and 1.0, 0.0 and -0.0: not one
    rec = _LIMIT_RECORDS.get(key)
    if rec is None:
        rec = {limit.direction: limit.bound, "source": limit.source}
        if limit.site:
            rec["site"] = limit.site
        rec = _LIMIT_RECORDS.setdefault(key, rec)
    return rec


def _gpu_ref(g: dict | None):
    """How a command names the GPU: its PCI bus id, else its NVML index, else None (a node finding)."""
    if not g:
        return None
    return g.get("pci_bus_id") or g.get("index")


@dataclass
class Outcome:
    """What a test's records add up to: ``kind`` "passed" | "failed" | "error"; ``message``: one line per
    cause (empty when passed); ``blocked``: the blockers that made it an error; ``causes``: an error's causes
    (gpuaccept.causes.Cause: its blockers', then its gaps'), what its action is decided from; of a failure, the
    causes of the gaps beside its findings (a path too full to measure beside one misplaced), its findings'
    own causes being on their failure entries."""

    kind: str
    message: str = ""
    blocked: list[Blocker] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)


def outcome(failures: list[tuple], errors: list[str], blockers: list[Blocker],
            layer: str, error_causes: list[Cause] | None = None, host: str | None = None) -> Outcome:
    """The outcome of one test from its records. Pure.

    ``failures``: (GPU index or None for a node figure, message line[, True: a reading no other process can
    cause, which a contention blocker -- a disturbed measurement -- does not block]); ``errors``: measurement-gap lines;
    ``blockers``: the host's blockers and the test's own (each applies to the layers it names,
    :meth:`gpuaccept.judging.blockers.Blocker.applies`: a host's to the dependent layers, a fabric not ready's
    to nvlink and nccl, a disturbed measurement's to its own test). A failure is
    blocked when it is on a blocked GPU, when a blocker covers the whole host, or when it is a node figure
    (a collective or a coverage line involves every GPU) on a host with any blocker. ``error_causes``: the
    causes of ``errors``, in order (a gap without one is a ``tool`` gap); ``host``: the host blockers are filed
    under.
    """
    gap_causes = list(error_causes or [])
    gap_causes += [Cause("tool", "gap", host)] * (len(errors) - len(gap_causes))
    applied = [b for b in blockers if b.applies(layer)]

    def is_blocked(gpu, stands=False):
        by = [b for b in applied if not (stands and b.cls == "contention")]
        return bool(by) and (gpu is None or any(b.gpu is None or b.gpu == gpu for b in by))

    hard, soft = [], []
    for f in failures:
        (soft if is_blocked(f[0], len(f) > 2 and f[2]) else hard).append(f[1])
    if hard:
        lines = hard + errors + [f"(also {b.message()})" for b in applied] + [f"(blocked GPU) {m}" for m in soft]
        return Outcome("failed", "\n".join(lines), causes=gap_causes)
    if applied:
        lines = [b.message() for b in applied] + [f"figure kept: {m}" for m in soft] + errors
        return Outcome("error", "\n".join(lines), applied, [b.to_cause(host) for b in applied] + gap_causes)
    if errors:
        return Outcome("error", "\n".join(errors), causes=gap_causes)
    return Outcome("passed")


class Recorder:
    """Collects the figures and verdicts of one test.

    ``item``: the pytest item; ``host``: host name ("fleet" for a test over all hosts); ``layer``: marker;
    ``gpu_ids`` maps a GPU index to its identity (pci_bus_id, serial, uuid) from the gpu_inventory probe, so
    figures from any probe name the GPU the same way; ``blockers``: the host's (gpuaccept.judging.blockers). A figure
    carrying a PCI bus id is attributed by it (NVML's index, serial, UUID of that bus id), never by a torch
    index, which follows CUDA_DEVICE_ORDER.
    """

    def __init__(self, item: pytest.Item, host: str, layer: str, gpu_ids: dict[int, dict] | None = None,
                 blockers: list[Blocker] | None = None, interrupted: Callable[[], str | None] | None = None):
        self.item = item
        # the run's interruption as the runner sees it (gpuaccept.transport.interruption): the signal's name
        # once the run was interrupted, else None; the plugin hands it in, judging never asks the transport
        self._interrupted = interrupted or (lambda: None)
        self.host = host
        self.layer = layer
        self.gpu_ids = gpu_ids or {}
        self.blockers = list(blockers or [])
        self.failures: list[str] = []  # lines; read through failed()/lines(), written through fail()
        self._failure_gpu: list[int | None] = []
        #: positions in ``failures`` of the findings no foreign process can cause (fail(..., stands_contention=True))
        self._stands: set[int] = set()
        self.errors: list[str] = []
        self.error_causes: list[Cause] = []  # the cause of each of ``errors``, in order
        # the conditions checked for this test's measurements (gpuaccept.judging.actions.figure_class): "gpu":
        # the NVML indices checked and found undisturbed, None until :meth:`conditions` ran; "host": "clean",
        # "busy" or None (not sampled)
        self.checked: dict = {"gpu": None, "host": None}
        # figures outside their limit waiting for their confirmation (record(confirm=True)): (rec, g, limit,
        # figure, context, first failure line); confirm() turns each into a failure or an unstable figure
        self._held: list[tuple] = []
        # what the node's gpu_inventory said of the probes' environment (``cuda_visible_devices``: its value,
        # None when unset); the plugin fills it, messages name it
        self.environment: dict = {}
        self.unstable: list[str] = []
        # (failures, errors) counted when the first of them was recorded after the run was interrupted
        # (SIGINT/SIGTERM, gpuaccept.runner.interrupt): those later lines are what the killed commands caused
        self._cut: dict[str, tuple[int, int] | None] = {"at": None}

    # -- identity -----------------------------------------------------------------------------
    def _gpu(self, gpu: dict | int | None) -> dict | None:
        g = self._gpu_ids(gpu)
        if g is None:
            return None
        # an identity NVML could not read ("Not Supported" serial: an NvmlError) is unknown, never a name: it
        # would key every such GPU of the fleet to one history subject
        return {k: (v if k == "index" or (isinstance(v, str) and v) else None) for k, v in g.items()}

    def _gpu_ids(self, gpu: dict | int | None) -> dict | None:
        if gpu is None:
            return None
        if isinstance(gpu, int):
            gpu = {"index": gpu}
        if bus_key(gpu.get("pci_bus_id")) is not None:  # by bus id: a torch index follows CUDA_DEVICE_ORDER
            ident = nvml_gpu_for(gpu, list(self.gpu_ids.values()))
            if ident is not None:
                return {k: ident.get(k) for k in ("index", "pci_bus_id", "serial", "uuid")}
            return {k: v for k, v in gpu.items() if k in ("index", "pci_bus_id", "serial", "uuid") and v is not None}
        ident = self.gpu_ids.get(gpu.get("index"), {})
        return {**{k: ident.get(k) for k in ("pci_bus_id", "serial", "uuid")}, **{k: v for k, v in gpu.items()
                if k in ("index", "pci_bus_id", "serial", "uuid") and v is not None}}

    def _where(self, g: dict | None, host: str | None = None) -> str:
        return f"{host or self.host}{' ' + gpu_label(g) if g else ''}"

    def for_host(self, host: str) -> "Recorder":
        """A recorder for another host's figures in the same test (multi-host tests): filed under ``host``;
        its failures and errors are this test's (the plugin's outcome sees them even if the test ends early),
        and, like the test's own, those recorded once the run was interrupted are left out of an interrupted
        test's message (:meth:`findings`): a collective cut by SIGTERM is reported once, as interrupted, not
        once more per host whose ranks were killed."""
        other = Recorder(self.item, host, self.layer, interrupted=self._interrupted)
        other.failures, other._failure_gpu, other.errors = self.failures, self._failure_gpu, self.errors
        other._stands = self._stands
        other.error_causes, other._cut = self.error_causes, self._cut
        return other

    # -- recording -----------------------------------------------------------------------------
    def show(self, text: str) -> None:
        """Show ``text`` (a table, in the field's layout) on the run's console when its output is asked for
        (``-s``), after this test's progress mark, from whichever process runs the terminal: under pytest-xdist a
        worker's own output is not shown (gpuaccept.plugin.shown)."""
        self.item.user_properties.append((SHOW_KEY, text))

    def record(self, check: str, value: Any, unit: str = "", gpu: dict | int | None = None,
               limit: Limit | None = None, extra: dict | None = None, figure: str | None = None,
               context: str | None = None, confirm: bool = False) -> bool:
        """Record one figure; judge it when ``limit`` is given. Returns True when it passed (or unjudged).

        ``figure``: the figure's name in the failure line, default ``check``; ``context``: what the figure is
        (dtype, direction, size), appended to the failure line in parentheses. ``confirm``: a figure outside
        its limit is held until :meth:`confirm` has measured it once more (gpuaccept.judging.confirm); one
        still held when the test ends fails as "not confirmed".
        The record (results.json) is ``{host, layer, test, check, gpu, pci_bus_id, serial, value, unit,
        limit: {min|max: bound, source} | None, verdict: pass|fail|error|recorded[, extra]}``; ``unit`` is the
        limit's unit when judged. A judged figure with no value (None, an NVML error) is an error of the
        measurement ("no value measured"), never a pass.
        """
        g = self._gpu(gpu)
        rec = {"host": self.host, "layer": self.layer, "test": self.item.originalname, "check": check,
               "gpu": g.get("index") if g else None, "pci_bus_id": g.get("pci_bus_id") if g else None,
               "serial": g.get("serial") if g else None, "value": to_json(value),
               "unit": limit.unit if limit else unit, "limit": None, "verdict": "recorded"}
        if extra:
            rec["extra"] = to_json(extra)
        passed = True
        if limit is not None:
            v = judge(limit, value, figure or check, context)
            rec["limit"] = limit_record(limit)
            rec["verdict"] = {"pass": "pass", "fail": "fail"}.get(v.kind, "error")
            passed = v.passed
            if v.kind == "missing":
                self.error(v.message, gpu=g)
            elif not passed and confirm:
                self._held.append((rec, g, limit, figure or check, context, f"{self._where(g)}: {v.message}"))
            elif not passed:
                ev = self.evidence(g, confirmed=False)
                if actions.reads_evidence(self.item.originalname, check):
                    rec.setdefault("extra", {})["evidence"] = ev
                act = actions.for_finding(self.item.originalname, check, value, extra, _gpu_ref(g),
                                          limit.direction, evidence=ev)
                self._add_failure(f"{self._where(g)}: {v.message}", g, check=check, action=act)
        self.item.user_properties.append((FIGURE_KEY, rec))
        return passed

    def evidence(self, g: dict | None, confirmed: bool) -> dict:
        """What makes a figure outside its limit hardware evidence (gpuaccept.judging.actions.figure_class):
        ``{"confirmed", "gpu_conditions", "host_conditions"}``; a GPU's conditions are "clean" when this test's
        :meth:`conditions` checked that GPU and found no other process, "n/a" for a node figure; the host's
        "clean" when the probe sampled the host and found it quiet, "n/a" when the test's figures do not
        depend on the host (``host_side`` rows of the action table), else "unchecked"."""
        idx = g.get("index") if g else None
        checked = self.checked["gpu"]
        gpu = "n/a" if idx is None else "clean" if checked is not None and idx in checked else "unchecked"
        host = "n/a" if not actions.host_side(self.item.originalname) else (self.checked["host"] or "unchecked")
        return {"confirmed": confirmed, "gpu_conditions": gpu, "host_conditions": host}

    def apply(self, findings, gpu: dict | int | None = None) -> None:
        """Record each :class:`gpuaccept.judging.health.Finding` (judging those with a limit) and add its failure."""
        for f in findings:
            self.record(f.check, f.value, f.unit, gpu=gpu, limit=f.limit, extra=f.extra,
                        context=getattr(f, "context", None))
            cause = getattr(f, "cause", None)
            if f.failure:
                g = self._gpu(gpu)
                self.fail(f.failure, gpu=gpu, check=f.check, cause=cause, action=actions.for_finding(
                    self.item.originalname, f.check, f.value, f.extra, _gpu_ref(g), cause=cause))
            if getattr(f, "error", None):
                self.error(f.error, gpu=gpu, cause=cause)

    def _note_interruption(self) -> None:
        if self._cut["at"] is None and self._interrupted() is not None:
            self._cut["at"] = (len(self.failures), len(self.errors))

    def _add_failure(self, line: str, g: dict | None, host: str | None = None, check: str | None = None,
                     action: actions.Action | None = None, cause: Cause | None = None, stands: bool = False) -> None:
        self._note_interruption()
        if stands:
            self._stands.add(len(self.failures))
        self.failures.append(line)
        self._failure_gpu.append(g.get("index") if g else None)
        if action is None:
            action = actions.for_finding(self.item.originalname, check, gpu=_gpu_ref(g), cause=cause)
        who = host or self.host
        self.item.user_properties.append((FAILURE_KEY, {
            "host": who, "gpu": g.get("index") if g else None,
            "pci_bus_id": g.get("pci_bus_id") if g else None, "serial": g.get("serial") if g else None,
            "line": line, **({"check": check} if check else {}), "action": action.to_dict(),
            **({"cause": cause.on(who).to_dict()} if cause is not None else {})}))

    def fail(self, message: str, gpu: dict | int | None = None, host: str | None = None, check: str | None = None,
             action: actions.Action | None = None, cause: Cause | None = None, stands_contention: bool = False) -> None:
        """Add a failure that is not a figure against a limit (e.g. "row remap pending: reset needed").
        ``host``: another host's name, in tests over several hosts; ``check``: the finding that failed, when it
        has a name; ``cause``: its cause (gpuaccept.causes.Cause), when the caller knows it (its action then
        follows the cause's row); ``action``: what to do about it, when the caller knows better than the
        table's rows for ``check`` and the test (an Xid's bucket: :func:`gpuaccept.judging.actions.for_xid`).
        ``stands_contention``: a reading no other process can cause (a hardware clock slowdown the board asserted):
        it fails even where another process disturbed the measurement, whose figures stay unjudged (:func:`outcome`)."""
        g = self._gpu(gpu)
        self._add_failure(f"{self._where(g, host)}: {message}", g, host, check, action, cause, stands_contention)

    def error(self, message: str, gpu: dict | int | None = None, cause: Cause | None = None) -> None:
        """Add a measurement gap (a required figure not measured, a GPU missing from a probe): the test is
        an ERROR unless it also has a hardware failure. ``cause``: why it was not measured (default a ``tool``
        gap), filed under this recorder's host."""
        self._note_interruption()
        g = self._gpu(gpu)
        self.errors.append(f"{self._where(g)}: {message}")
        c = cause or Cause("tool", "gap", gpu=g.get("index") if g else None)
        self.error_causes.append(c.on(self.host))

    def expect_gpus(self, nvml_gpus: list[dict], measured: list | None, probe: str) -> None:
        """Every NVML GPU with a handle must have an entry in the probe's per-GPU list ``measured``; each
        missing one is an error naming its index and PCI bus id (an empty list is never a pass)."""
        env = self.environment.get("cuda_visible_devices", "?")
        why = ("CUDA_VISIBLE_DEVICES on the node?" if env == "?" else "CUDA_VISIBLE_DEVICES unset on the node"
               if env is None else f"CUDA_VISIBLE_DEVICES={env!r} on the node")
        for g in unmeasured(nvml_gpus, measured if isinstance(measured, list) else []):
            self.error(f"{probe} measured no figure for {describe_gpu(g)}: every GPU NVML lists must be "
                       f"measured ({why})")

    # -- reading -------------------------------------------------------------------------------
    def block(self, check: str, cause: str, gpu: int | None = None, cls: str = "contention",
              evidence: dict | None = None) -> None:
        """A precondition found broken during the test itself (e.g. a foreign process that appeared on a GPU
        halfway through a burn-in): this test's figures on that GPU (or host, ``gpu`` None) are kept but
        cannot be trusted, so the test is an ERROR "blocked by <check>: ...", not a hardware failure. ``cls``:
        the class of the cause (gpuaccept.causes)."""
        self.blockers.append(Blocker(check, cause, gpu, frozenset({self.layer}), cls, "blocked", evidence or {}))

    def conditions(self, doc: dict, gpus: list[dict] | None = None) -> list[int | None]:
        """Judge the conditions a GPU-loading probe sampled (its document's ``conditions``,
        gpuaccept/probes/_conditions.py): each GPU another process used during the measurement makes this
        test an ERROR "disturbed: pid N (name) used GPU i during the measurement", its figures kept
        (gpuaccept.judging.conditions). ``gpus``: the NVML GPUs (to name each by NVML's index). Records
        ``conditions`` (the sampler's state, foreign pids) once per test, and per GPU the sampler's slowest NVML
        call under the load (``nvml_call_s_load``, gpuaccept.judging.driver.latency: over its limit fails, cause
        class unverified). Returns the NVML indices disturbed."""
        from gpuaccept.judging import conditions as cond
        nvml = gpus if gpus is not None else list(self.gpu_ids.values())
        found = cond.disturbances(doc, nvml)
        self.record("conditions", cond.state(doc), extra=cond.summary(doc))
        for idx, line in found:
            self.blockers.append(Blocker("conditions", line, idx, frozenset({self.layer}), "contention", "disturbed"))
        if cond.state(doc) == "ok" and (doc.get("conditions") or {}).get("own_seen"):
            self.checked["gpu"] = {g.get("index") for g in nvml} - {i for i, _ in found}
        from gpuaccept.judging import driver
        for idx, timing in cond.latencies(doc, nvml):  # NVML's latency under this test's load, per GPU
            self.apply(driver.latency(timing, "load"), gpu=idx)
        busy = cond.host_disturbances(doc)
        if busy is not None:
            self.checked["host"] = "busy" if busy else "clean"
            for line, ev in busy:
                self.blockers.append(Blocker("conditions", line, None, frozenset({self.layer}), "contention",
                                             "host_busy", ev))
        return [i for i, _ in found]

    def disturbed_gpus(self) -> set:
        """NVML indices (None: the host) of this test's disturbed measurements."""
        return {b.gpu for b in self.blockers if b.check == "conditions"}

    def failed(self) -> bool:
        """True when a failure was recorded."""
        return bool(self.failures)

    def lines(self) -> list[str]:
        """The failure lines so far."""
        return list(self.failures)

    def findings(self, before_interruption: bool = False) -> list[str]:
        """The failure lines, then the measurement-gap lines. ``before_interruption``: only those recorded
        before the run was interrupted (what an interrupted test had found; the failures of the commands the
        interruption killed are its consequence, and the test is already an error saying so)."""
        cut = self._cut["at"] if before_interruption else None
        if cut is None:
            return self.failures + self.errors
        return self.failures[:cut[0]] + self.errors[:cut[1]]

    def outcome(self) -> Outcome:
        """What this test's records add up to (see :func:`outcome`); a figure still waiting for its
        confirmation counts as a failure ("not confirmed")."""
        gpus = self._failure_gpu + [None] * (len(self.failures) - len(self._failure_gpu))
        held = [(h[1].get("index") if h[1] else None, f"{h[5]} (not confirmed: the test ended before a second "
                                                       f"measurement)") for h in self._held]
        mine = [(g, line, True) if i in self._stands else (g, line) for i, (g, line) in enumerate(zip(gpus, self.failures))]
        return outcome(mine + held, self.errors, self.blockers, self.layer, self.error_causes, self.host)

    # -- confirmation --------------------------------------------------------------------------
    def held(self) -> list[tuple[str, dict | None]]:
        """``[(check, gpu)]`` of the figures waiting for their confirmation (``gpu``: the identity dict)."""
        return [(h[0]["check"], h[1]) for h in self._held]

    def confirm(self, second: Callable[[str, dict | None], Any], why: str | None = None,
                seconds: float | None = None, unstable_fails: bool = False) -> None:
        """Judge each held figure again on its second measurement: ``second(check, gpu)`` gives the value
        (None when the second run has none; ``why`` says why, e.g. the probe's error). Reproduced → FAILED,
        both figures in the line; not reproduced → "unstable" (both figures recorded: the figure's verdict
        ``unstable`` and an :data:`UNSTABLE_KEY` property), a failure only when ``unstable_fails`` (burn-in,
        where instability is itself a finding); no second figure → FAILED "not confirmed: <why>". ``seconds``:
        what the second measurement took, recorded beside each figure."""
        held, self._held = self._held, []
        for rec, g, limit, figure, context, line in held:
            v2 = second(rec["check"], g)
            v = judge(limit, v2, figure, context)
            first = rec["value"]
            ev = self.evidence(g, confirmed=v.kind == "fail")
            act = actions.for_finding(self.item.originalname, rec["check"], first, rec.get("extra"), _gpu_ref(g),
                                      limit.direction, evidence=ev)
            if actions.reads_evidence(self.item.originalname, rec["check"]):
                rec.setdefault("extra", {})["evidence"] = ev
            rec.setdefault("extra", {})["confirmation"] = {"value": to_json(v2), "seconds": seconds,
                                                           **({"why": why} if why and v.kind == "missing" else {})}
            if v.kind == "missing":
                self._add_failure(f"{line} (not confirmed: {why or 'the second measurement has no figure'})", g,
                                  check=rec["check"], action=act)
            elif not v.passed:
                self._add_failure(f"{line}; measured again: {v2:g} {limit.unit} (confirmed)", g, check=rec["check"],
                                  action=act)
            else:
                rec["verdict"] = "unstable"
                text = (f"{self._where(g)}: unstable: {figure} {first:g} then {v2:g} {limit.unit} (limit "
                        f"{limit.describe()}{'; ' + context if context else ''}): outside its limit once, within "
                        f"it when measured again")
                self.unstable.append(text)
                self.item.user_properties.append((UNSTABLE_KEY, {
                    "host": self.host, "gpu": g.get("index") if g else None,
                    "pci_bus_id": g.get("pci_bus_id") if g else None, "serial": g.get("serial") if g else None,
                    "check": rec["check"], "first": first, "second": to_json(v2), "unit": limit.unit,
                    "line": text}))
                if unstable_fails:
                    self._add_failure(f"{text} (burn-in: instability is a finding)", g, check=rec["check"],
                                      action=act)

    def finish(self) -> None:
        """Stop the test now when it has failures or errors (the plugin's report hook classifies it; calling
        this is optional: the hook applies the same outcome to a test that returned or skipped)."""
        out = self.outcome()
        if out.kind != "passed":
            pytest.fail(out.message, pytrace=False)


# Former name (deprecated: it differed from Verdict, one comparison, by a letter), kept so that suites written
# outside this repository against it keep working; nothing here uses it.
Verdicts = Recorder
