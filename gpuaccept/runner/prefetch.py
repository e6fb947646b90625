"""Speculative prefetch across hosts: a probe one host's test runs starts at once on the hosts whose turn is next.

pytest orders a parametrized test host after host: ``test_x[h1], test_x[h2], ...``. When ``test_x[h1]`` runs a
probe (``HostRunner.probe(name, args, timeout, env)``), :class:`Prefetcher` starts the same probe, with the same
arguments, timeout and environment, on every other host whose ``test_x`` item (same function, same other
parameters) is still to run, in a pool of ``--forks`` worker threads. ``test_x[h2]`` then takes that result
(once; waiting for it while it runs; its error raised as if it had happened in the test) instead of probing
again. So a 60-minute burn-in over 10 nodes takes 60 minutes, not 10 hours; no test declares anything.

A probe is fetched ahead for host B only when B's own test would ask for the very same thing, or the guess
is cheap and harmless to drop:

* B's item of the same test is selected (``-k``/``-m``/``--limit`` leave the others out) and not started,
  and it is the next item of the run to touch B: no other test of B, and no fleet test (an item without a
  host, which may touch any host), runs between now and then. So each host's probes keep the test order.
* B's inventory variables, apart from the ``ansible_*`` connection ones, equal those of the host whose test
  asked: arguments a test derives from the inventory (paths, devices, ``storage_allow_destructive``, NCCL
  interfaces) are then the same on B.
* The call is the test's first probe call that returned nothing yet: a later call's arguments may come from
  an earlier result on that host (``fio_throughput`` only writes into the directories ``storage_mounts`` placed
  there), which B's own result could change, so later calls run as before.
* A test using the ``gpus`` fixture is fetched ahead on B only if B's GPUs (gpu_inventory: name, memory,
  PCI device id, lost or not, per GPU) look the same as the asking host's; the arguments a test derives
  from its GPUs (world size, dtypes by SKU) then agree. B's gpu_inventory runs first, as in B's test.
* Never a rank of a multi-host collective (args ``nnodes`` > 1), never on a replayed host (``gpuaccept_replay``)
  or one written off as unreachable, never after an interrupt (gpuaccept.runner.interrupt), never while the asking
  thread holds its host's lock (``cached_probe``), never from a thread other than pytest's.

A test whose probes' arguments come from the host itself (its own inventory variables, an earlier result on
that host: ``storage_paths`` placed by ``storage_mounts`` before ``fio_throughput`` runs there) names a *plan*
with :func:`ahead`: a function ``plan(node)`` that asks ``node`` for the same probes as the test, in the same
order, from the same inventory variables and results, judging nothing. When the test of the first host
begins, the plan runs in the pool on every host whose item of the same test is its next (as above, without
the rules on equal inventory variables, GPUs and first calls: the plan derives each host's own arguments);
each host's test then takes the results by their arguments, waiting for one that is running. A plan on a
fleet test (no host) runs on every host of the run when the fleet test begins; what it reads through
``cached_probe`` (``gpu_inventory``) the fleet test finds in the host's cache. A plan stops at its first error
(kept for the test, raised there as if it happened in the test) and is dropped where the test asks for
something else (its running probe killed).

When B's test then asks with other arguments (they differed per host after all), its probe runs then, as
without prefetch, and the guess is dropped at once; one no test asks for is dropped when B's test ends (or
the run does): a queued one is never started, a running one is killed on the node (its remote process
groups, as an interrupt does). Results are saved under the report
folder as any probe's (``HostRunner.probe_now``), whether or not a test takes them. One host never runs two
probes at once: a job holds the host's lock (``HostRunner.lock``) from start to end; the SSH connection is
the host's one. Off with ``--forks 0`` (and under ``-n``), like the warm-up (gpuaccept.runner.fanout).
"""
from __future__ import annotations

import bisect
import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from gpuaccept.judging.readings import is_lost
from gpuaccept.transport import interruption, running

log = logging.getLogger(__name__)
#: ``.job``: the plan (:func:`ahead`) this worker thread runs; its probe calls are kept for the test they are for
_AHEAD = threading.local()
#: the attribute :func:`ahead` sets on a test function
PLAN_ATTR = "gpuaccept_ahead"


def ahead(plan: Callable[[Any], Any]) -> Callable:
    """Decorator: ``plan(node)`` asks ``node`` (a HostRunner) for the probes the decorated test asks for, in the
    same order and with the same arguments, derived the same way from the host's inventory variables and earlier
    results on that host; it judges nothing and records nothing (its return value and any exception it raises
    are ignored). The prefetcher runs it ahead on the hosts whose turn is next (see the module docstring)."""
    def mark(fn):
        setattr(fn, PLAN_ATTR, plan)
        return fn
    return mark


class _PlanEnd(BaseException):
    """Stops a plan: dropped, or a probe asked on another host. Not an Exception: ``cached_probe`` keeps no such
    error for the host."""

#: seconds :meth:`Prefetcher.close` waits for killed jobs to end (each kill is bounded by the transport's
#: KILL_BUDGET_S, 6 s, plus a fresh connection where the server refuses a second session)
CLOSE_WAIT_S = 15.0
#: seconds between the canceller's looks at a dropped job's commands
_CANCEL_POLL_S = 0.05


@dataclass
class ItemInfo:
    """One collected test, as the prefetcher needs it: ``nodeid``; ``index`` in run order; ``host`` (the
    ``node`` parameter, None for a fleet test); ``group``: the test function and its other parameters
    (None without a host); ``uses_gpus``: whether it takes the ``gpus`` fixture. ``received`` is set once
    the running test got a probe result."""

    nodeid: str
    index: int
    host: str | None
    group: Any
    uses_gpus: bool = False
    received: bool = False
    plan: Callable[[Any], Any] | None = None


def describe(items: Iterable[Any]) -> list[ItemInfo]:
    """ItemInfo for pytest items in run order (``session.items`` after deselection). The group of
    ``suites/test_a.py::test_x[h1]`` is ``suites/test_a.py::test_x`` plus its parameters other than ``node``."""
    out = []
    for i, it in enumerate(items):
        params = dict(getattr(getattr(it, "callspec", None), "params", {}) or {})
        host = params.pop("node", None)
        group = None
        if host is not None:
            base = it.nodeid[: len(it.nodeid) - len(it.name)] + getattr(it, "originalname", it.name)
            group = (base, tuple(sorted((k, repr(v)) for k, v in params.items())))
        out.append(ItemInfo(it.nodeid, i, None if host is None else str(host), group,
                            "gpus" in getattr(it, "fixturenames", ()),
                            plan=getattr(getattr(it, "obj", None), PLAN_ATTR, None)))
    return out


def probe_key(name: str, args: dict | None, timeout: float | None, env: dict | None) -> str:
    """What makes two probe calls the same: name, arguments, timeout, environment (JSON, sorted keys)."""
    return json.dumps([name, args or {}, timeout, env or {}], sort_keys=True, default=str)


def host_facts(runner: Any) -> str:
    """A host's inventory variables that tests derive probe arguments from: all but ``ansible_*`` (how to
    reach it) and ``gpuaccept_replay``; JSON with sorted keys."""
    v = {k: val for k, val in runner.host.vars.items() if not k.startswith("ansible_") and k != "gpuaccept_replay"}
    return json.dumps(v, sort_keys=True, default=str)


def gpu_fingerprint(doc: dict) -> str:
    """What a test can derive probe arguments from in a gpu_inventory document: per GPU its name, memory
    size, PCI device id and whether it is lost, in NVML order (JSON)."""
    gpus = [g for g in (doc.get("gpus") or []) if isinstance(g, dict)]
    return json.dumps([doc.get("nvml_available")] + [[g.get("name"), g.get("memory_total_bytes"),
                                                      g.get("pci_device_id"), is_lost(g)] for g in gpus],
                      sort_keys=True, default=str)


@dataclass(eq=False)
class _Job:
    """One probe fetched ahead for ``nodeid`` on ``runner``, or a plan (:func:`ahead`: ``plan`` set, ``call``
    None; ``results``: probe key -> (document, error) in the order run; ``current``: the key running now).
    ``state``: queued -> running -> finished, or skipped (never run: dropped, interrupted, GPUs unlike the
    asking host's, or taken over by the test)."""

    runner: Any
    nodeid: str
    key: str
    call: tuple
    gpus: str | None
    state: str = "queued"
    cancelled: bool = False
    taken: bool = False
    doc: dict | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    plan: Callable[[Any], Any] | None = None
    results: dict = field(default_factory=dict)
    current: str | None = None

    @property
    def host(self) -> str:
        return self.runner.name


class Prefetcher:
    """Fetch ahead, across hosts, the probes the tests of a run ask for (see the module docstring).

    ``items``: :func:`describe` of the run's items; ``runner_for(host)``: the run's HostRunner for a host
    name; ``forks``: at most this many probes (or plans) fetched ahead at once (``--forks``); ``hosts``: every
    host of the run, in order (where a fleet test's plan runs; default: the hosts of ``items``). The plugin calls
    :meth:`begin` and :meth:`end` around each test, installs :meth:`probe` as ``gpuaccept.runner.host.PROBE_HOOK``,
    and calls :meth:`close` at the end of the session. ``stats`` counts jobs: queued, run, taken, dropped."""

    def __init__(self, items: list[ItemInfo], runner_for: Callable[[str], Any], forks: int,
                 hosts: list[str] | None = None):
        self.items = {i.nodeid: i for i in items}
        self._hosts = list(hosts) if hosts is not None else list(dict.fromkeys(i.host for i in items if i.host))
        self._runner_for = runner_for
        self._forks = max(1, int(forks))
        self._groups: dict[Any, list[ItemInfo]] = {}
        self._by_host: dict[str, list[int]] = {}
        self._fleet: list[int] = []
        for i in items:
            if i.host is None:
                self._fleet.append(i.index)
            else:
                self._groups.setdefault(i.group, []).append(i)
                self._by_host.setdefault(i.host, []).append(i.index)
        self._current: ItemInfo | None = None
        self._cv = threading.Condition()
        self._slots: dict[str, list[_Job]] = {}
        self._queues: dict[str, deque[_Job]] = {}
        self._ready: deque[str] = deque()
        self._active: set[str] = set()
        self._workers = 0
        self._idle = 0
        self._closed = False
        self._facts: dict[str, str] = {}
        self.stats = {"queued": 0, "run": 0, "taken": 0, "dropped": 0}

    # -- the plugin's calls ----------------------------------------------------------------------------
    def begin(self, nodeid: str) -> None:
        """The test ``nodeid`` starts (pytest_runtest_protocol); a test with a plan (:func:`ahead`) starts it on the
        hosts whose turn is next (every host for a fleet test)."""
        self._current = cur = self.items.get(nodeid)
        if cur is not None:
            cur.received = False
            if cur.plan is not None and not interruption() and not self._closed:
                self._spread_plan(cur)

    def end(self, nodeid: str) -> None:
        """The test ``nodeid`` ended: results fetched for it that it did not take are dropped (queued ones
        never start, running ones are killed on their node)."""
        self._current = None
        with self._cv:
            jobs = self._slots.pop(nodeid, [])
        for job in jobs:
            self._cancel(job)

    def close(self) -> None:
        """No more jobs: drop every result not taken (killing the running ones), wait up to
        :data:`CLOSE_WAIT_S` for those to end, stop the workers."""
        with self._cv:
            self._closed = True
            jobs = [j for js in self._slots.values() for j in js]
            self._slots.clear()
            self._cv.notify_all()
        for job in jobs:
            self._cancel(job)
        end = time.monotonic() + CLOSE_WAIT_S
        for job in jobs:
            job.done.wait(max(0.0, end - time.monotonic()))
        log.debug("prefetch: %s", self.stats)

    def probe(self, runner: Any, name: str, args: dict, timeout: float | None, env: dict | None) -> dict:
        """``gpuaccept.runner.host.PROBE_HOOK``: the result fetched ahead for the running test, if there is one (else
        run here); the test's first call also starts the same probe on the hosts whose turn is next. Called by a
        plan (in a worker), it runs the probe and keeps the result for the plan's test."""
        plan = getattr(_AHEAD, "job", None)
        if plan is not None:
            return self._plan_call(plan, runner, name, args, timeout, env)
        cur = self._current
        if cur is not None and threading.current_thread() is threading.main_thread():
            mine = self._plan_of(cur.nodeid, runner.name)
            if mine is not None:
                found, doc, err = self._from_plan(mine, probe_key(name, args, timeout, env))
                if found:
                    cur.received = True
                    if err is not None:
                        raise err
                    return doc
        if (cur is None or threading.current_thread() is not threading.main_thread() or runner.name != cur.host
                or runner.lock_held() or cur.plan is not None):
            try:
                return runner.probe_now(name, args, timeout, env)
            finally:
                if cur is not None:
                    cur.received = True
        key = probe_key(name, args, timeout, env)
        job = self._take(cur.nodeid, key)
        if job is not None:
            while not job.done.wait(0.2):
                pass
            if job.state == "finished":
                cur.received = True
                self.stats["taken"] += 1
                if job.error is not None:
                    raise job.error
                return job.doc
        elif not cur.received:
            self._spread(cur, runner, name, args, timeout, env, key)
        try:
            return runner.probe_now(name, args, timeout, env)
        finally:
            cur.received = True

    # -- choosing hosts --------------------------------------------------------------------------------
    def _next_index(self, host: str, after: int) -> int | None:
        """Run-order index of the next item after ``after`` that touches ``host``: its own or a fleet test."""
        best = None
        for seq in (self._by_host.get(host, []), self._fleet):
            k = bisect.bisect_right(seq, after)
            if k < len(seq) and (best is None or seq[k] < best):
                best = seq[k]
        return best

    def _host_facts(self, runner: Any) -> str:
        if runner.name not in self._facts:
            self._facts[runner.name] = host_facts(runner)
        return self._facts[runner.name]

    def _spread(self, cur: ItemInfo, runner: Any, name: str, args: dict, timeout, env, key: str) -> None:
        if interruption() or self._closed or int((args or {}).get("nnodes") or 1) > 1:
            return
        gpus = None
        if cur.uses_gpus:
            try:
                gpus = gpu_fingerprint(runner.gpu_inventory())  # cached: the test's gpus fixture read it
            except Exception:  # noqa: BLE001 - the test itself reports it; nothing to compare with
                return
        facts = self._host_facts(runner)
        for other in self._groups.get(cur.group, []):
            if other.index <= cur.index or other.host == cur.host or self._next_index(other.host, cur.index) != other.index:
                continue
            if self._slots.get(other.nodeid):
                continue  # already fetched ahead for that test (asked by an earlier host): one guess per test
            target = self._runner_for(other.host)
            if target.replay_dir or target.written_off or self._host_facts(target) != facts:
                continue
            if not self._enqueue(_Job(target, other.nodeid, key, (name, args, timeout, env), gpus)):
                return
            log.debug("prefetch: %s %s for %s (asked by %s)", target.name, name, other.nodeid, cur.nodeid)

    def _enqueue(self, job: _Job) -> bool:
        """Queue ``job`` for its host and wake or start a worker (at most ``forks``); False once closed."""
        with self._cv:
            if self._closed:
                return False
            self._slots.setdefault(job.nodeid, []).append(job)
            self._queues.setdefault(job.host, deque()).append(job)
            self.stats["queued"] += 1
            if job.host not in self._active:
                self._active.add(job.host)
                self._ready.append(job.host)
                if self._idle:
                    self._cv.notify()
                elif self._workers < self._forks:
                    self._workers += 1
                    threading.Thread(target=self._work, daemon=True,
                                     name=f"gpuaccept-prefetch-{self._workers}").start()
        return True

    # -- plans ---------------------------------------------------------------------------------------
    def _spread_plan(self, cur: ItemInfo) -> None:
        """Start ``cur``'s plan on the hosts whose next item is ``cur``'s test (every host for a fleet test),
        never on ``cur``'s own host (its test runs there now), a replayed host or one written off."""
        if cur.host is None:
            targets = [(cur.nodeid, h) for h in self._hosts]
        else:
            targets = [(o.nodeid, o.host) for o in self._groups.get(cur.group, [])
                       if o.index > cur.index and o.host != cur.host and self._next_index(o.host, cur.index) == o.index]
        for nodeid, host in targets:
            if any(j.host == host for j in self._slots.get(nodeid, ())):
                continue
            target = self._runner_for(host)
            if target.replay_dir or target.written_off:
                continue
            if not self._enqueue(_Job(target, nodeid, "", None, None, plan=cur.plan)):
                return
            log.debug("prefetch: %s plan of %s for %s", host, cur.nodeid, nodeid)

    def _plan_of(self, nodeid: str, host: str) -> _Job | None:
        """The plan fetched ahead for test ``nodeid`` on ``host``, if any."""
        with self._cv:
            for job in self._slots.get(nodeid, ()):
                if job.plan is not None and job.host == host and not job.cancelled:
                    return job
        return None

    def _plan_call(self, job: _Job, runner: Any, name: str, args: dict, timeout, env) -> dict:
        """A probe a plan asks for, in its worker: run now on the plan's host and kept under its key (an error
        too, and raised again: the plan stops as the test would). Raises _PlanEnd when the plan was dropped, the
        run interrupted, or the plan asks another host."""
        if runner is not job.runner or job.cancelled or interruption():
            raise _PlanEnd()
        key = probe_key(name, args, timeout, env)
        with self._cv:
            job.current = key
            self.stats["run"] += 1
        doc, err = None, None
        try:
            doc = runner.probe_now(name, args, timeout, env)
            return doc
        except Exception as e:  # noqa: BLE001 - kept for the test, which raises it
            err = e
            raise
        finally:
            with self._cv:
                job.results[key] = (doc, err)
                job.current = None
                self._cv.notify_all()

    def _from_plan(self, job: _Job, key: str) -> tuple[bool, dict | None, BaseException | None]:
        """``(found, document, error)`` for the test's call ``key`` from its host's plan: waits while the plan
        runs that very call (or is between calls); a plan still queued is taken over (never run: the test runs
        its probes itself); a plan running another call went another way than the test: dropped, its probe
        killed."""
        with self._cv:
            while True:
                if key in job.results:
                    doc, err = job.results.pop(key)
                    job.taken = True
                    self.stats["taken"] += 1
                    return True, doc, err
                if job.state == "queued":
                    self._unqueue(job)
                    return False, None, None
                if job.state != "running" or job.cancelled:
                    return False, None, None
                if job.current is not None and job.current != key:
                    break
                self._cv.wait(0.2)
        self._cancel(job)
        return False, None, None

    def _take(self, nodeid: str, key: str) -> _Job | None:
        """The result fetched for ``nodeid`` with ``key``, now the test's. One still queued is taken over: the
        test runs the probe itself rather than wait for a free worker. A result fetched for ``nodeid`` with
        another key was a wrong guess (the test's arguments differ on this host): dropped now, so that its
        probe does not hold the host while the test's own one waits."""
        found, misses = None, []
        with self._cv:
            for job in self._slots.pop(nodeid, []):
                if found is None and job.key == key:
                    found = job
                    job.taken = True
                    if job.state == "queued":
                        self._unqueue(job)
                else:
                    misses.append(job)
        for job in misses:
            self._cancel(job)
        return found

    # -- workers -------------------------------------------------------------------------------------
    def _unqueue(self, job: _Job) -> None:
        """(under the condition) A queued job that will never run."""
        try:
            self._queues[job.host].remove(job)
        except (KeyError, ValueError):
            pass
        job.state = "skipped"
        job.done.set()

    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._ready and not self._closed:
                    self._idle += 1
                    self._cv.wait()
                    self._idle -= 1
                if self._closed:
                    self._workers -= 1
                    return
                host = self._ready.popleft()
                q = self._queues.get(host)
                job = q.popleft() if q else None
                if job is None:
                    self._active.discard(host)
                    continue
            try:
                self._run(job)
            finally:
                with self._cv:
                    if self._queues.get(host):
                        self._ready.append(host)
                    else:
                        self._active.discard(host)

    def _run(self, job: _Job) -> None:
        runner = job.runner
        with runner.lock:  # nothing else runs on the host until the job ends (kept in step with _cancel)
            with self._cv:
                if job.state != "queued" or job.cancelled or self._closed or interruption():
                    if job.state == "queued":
                        job.state = "skipped"
                    job.done.set()
                    return
                job.state = "running"
            state = "finished"
            try:
                if job.plan is not None:
                    self._run_plan(job)
                elif job.gpus is not None and gpu_fingerprint(runner.gpu_inventory()) != job.gpus:
                    state = "skipped"  # other GPUs: the test's own arguments would likely differ
                else:
                    with self._cv:
                        self.stats["run"] += 1
                    job.doc = runner.probe_now(*job.call)
            except Exception as e:  # noqa: BLE001 - the test that takes the result raises it
                job.error = e
            finally:
                with self._cv:
                    job.state = state
                    job.done.set()
                    self._cv.notify_all()  # a test waiting on a plan's next result

    def _run_plan(self, job: _Job) -> None:
        """(under the host's lock, in a worker) Run ``job``'s plan; whatever ends it is the test's to see again."""
        _AHEAD.job = job
        try:
            job.plan(job.runner)
        except BaseException as e:  # noqa: BLE001 - a plan's end (an error, a skip, dropped) is no result
            log.debug("prefetch: plan for %s on %s ended: %r", job.nodeid, job.host, e)
        finally:
            _AHEAD.job = None

    def _cancel(self, job: _Job) -> None:
        """Drop ``job``: never start it if queued; kill its command on the node if running."""
        with self._cv:
            job.cancelled = True
            if job.plan is not None and job.state == "finished":
                self.stats["dropped"] += len(job.results)  # results no test took
                return
            if (job.taken and job.plan is None) or job.state in ("finished", "skipped"):
                if not job.taken and job.state == "finished":
                    self.stats["dropped"] += 1
                return
            if job.state == "queued":
                self._unqueue(job)
                return
        self.stats["dropped"] += 1
        threading.Thread(target=self._kill, args=(job,), daemon=True, name="gpuaccept-prefetch-kill").start()

    def _kill(self, job: _Job) -> None:
        """Cancel the commands ``job`` runs until it ends. While it runs it holds its host's lock, so every
        command in flight on that host is its own; a kill helper the transport starts for a cancelled command
        is left alone (only new commands after the cancelled ones ended are cancelled)."""
        mine: list = []
        while True:
            with self._cv:
                if job.state != "running":
                    return
                now = [r for r in running() if r.host == job.host]
                if not any(r in now for r in mine):
                    for r in now:
                        if not r.cancelled.is_set():
                            r.cancel("fetched ahead, not taken by a test")
                            mine.append(r)
            time.sleep(_CANCEL_POLL_S)
