"""Fan-out over hosts, like Ansible's forks: the work every selected host needs first, on all of them at once.

Without it the hosts are visited one after another as pytest reaches their tests: connect, ship the probes,
run ``gpu_inventory`` (which every GPU test's ``gpus`` fixture needs), then the next host — about 0.6 s per
host of waiting on the network and the node's Python start-up (shared/notes/scale-profile.md, 32 sshd nodes:
18.2 of 22.7 s). :func:`warm_up` starts that first step on every host in a bounded pool of daemon threads and
returns at once; tests then find the document cached (``HostRunner.cached_probe``) or wait on the host's lock for
the one run in flight, so no host is ever probed twice and one host's probes never overlap. :func:`close_all`
removes the shipped folders and closes the connections in the same pool at the end.

On an SSH host the probes are shipped and ``gpu_inventory`` run in one remote command
(``HostRunner.probe_now``). Every later probe is fetched ahead across hosts by gpuaccept.runner.prefetch, in a pool of
the same size.

``forks``: the pool's size (``--forks``, default :data:`DEFAULT_FORKS`), which bounds open connections too.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Iterable

from gpuaccept.transport import aborting

DEFAULT_FORKS = 32  # Ansible's default is 5; gpuaccept's work per host is seconds of waiting, not CPU
#: seconds :func:`close_all` waits in all after a second signal (closing a session is local work then)
ABORT_WAIT_S = 0.5


def _pool(items: list, fn: Callable, forks: int) -> list[threading.Thread]:
    """Run ``fn(item)`` for each item, in order, with at most ``forks`` at a time: ``min(forks, len(items))``
    daemon threads, each taking the next item until none is left; return them (each ends once the items are
    done). Not a thread per item: at 128 hosts, 128 thread starts (each waiting for the new thread to take the
    GIL while the first hosts' handshakes hold it) cost the main thread 1.9 s of wall time under profile,
    gpuaccept-side cost that the one-Python pool (benchmarks/fanout.py --per-host) does not pay."""
    todo = iter(list(items))
    take = threading.Lock()

    def body():
        while True:
            with take:
                item = next(todo, _DONE)
            if item is _DONE:
                return
            try:
                fn(item)
            except Exception:  # noqa: BLE001 - the host's own tests report the same cached error
                pass

    threads = [threading.Thread(target=body, daemon=True, name=f"gpuaccept-fanout-{i}")
               for i in range(min(max(1, forks), len(items)))]
    for t in threads:
        t.start()
    return threads


#: the end of a pool's items
_DONE = object()


#: the probe whose document the warm-up keeps as the host's run-start reading (EDAC counters: the host layer judges
#: their growth over the whole run, GPU layers' load included; 0.09 s on an H200 node)
RUN_START_PROBE = "host_memory"
#: the test that judges the run-start reading: only a selection holding it has the warm-up take one
RUN_START_TEST = "test_host_ram_errors"


def memory_args(host_vars: dict) -> dict:
    """The host_memory probe's arguments from a host's inventory variables: ``{"sysfs": host_sysfs_root}`` where that
    variable is set (a node whose sysfs is mounted elsewhere, e.g. a container's /host/sys), else ``{}`` (/sys)."""
    root = host_vars.get("host_sysfs_root")
    return {"sysfs": root} if root else {}


def run_start_memory(node) -> dict | None:
    """The host_memory document the warm-up kept for ``node`` (a HostRunner) at the run's start, or None: no
    warm-up on this host (replayed, an xdist worker, no GPU test selected), or the read failed there."""
    return node.cached(RUN_START_PROBE, memory_args(node.host.vars))


def _warm(node, memory: bool = True) -> None:
    """gpu_inventory, then (``memory``) the run-start host_memory reading, under the host's lock (nothing of the
    host's tests runs in between). A failed host_memory read is only remembered as such (its error cached): the
    host's status is gpu_inventory's, and a host it wrote off or found held is not asked again
    (:meth:`HostRunner.run` raises at once)."""
    with node.lock:
        try:
            node.gpu_inventory()
        finally:
            if memory:
                try:
                    node.cached_probe(RUN_START_PROBE, memory_args(node.host.vars))
                except Exception:  # noqa: BLE001 - the host layer falls back to its own interval and says so
                    pass


def warm_up(nodes: Iterable, forks: int = DEFAULT_FORKS, run_start_memory: bool = True) -> list[threading.Thread]:
    """Start ``gpu_inventory`` (connect, ship, probe; cached with its error) and, with ``run_start_memory`` (the
    selection holds :data:`RUN_START_TEST`), the run-start ``host_memory`` reading (:data:`RUN_START_PROBE`,
    :func:`run_start_memory`) on every node at once.

    ``nodes``: :class:`gpuaccept.runner.host.HostRunner` objects. Returns the threads (daemons: an interrupted run does not
    wait for them; the transports' own timeouts and the node-side watchdog bound what they leave running)."""
    return _pool([n for n in nodes if not getattr(n, "replay_dir", None)],
                 lambda n: _warm(n, run_start_memory), forks)


def close_all(nodes: Iterable, forks: int = DEFAULT_FORKS, timeout: float = 60.0) -> None:
    """``HostRunner.close()`` on every node, ``forks`` at a time; waits at most ``timeout`` seconds in all
    (:data:`ABORT_WAIT_S` once a second signal came, before or during the wait: then no clean-up command is sent,
    the connections are closed, and a host whose lock a thread still holds is not waited for)."""
    threads = _pool(list(nodes), lambda n: n.close(), forks)
    end = time.monotonic() + timeout
    for t in threads:
        while t.is_alive():
            if aborting():  # a second signal, maybe while waiting here
                end = min(end, time.monotonic() + ABORT_WAIT_S)
            left = end - time.monotonic()
            if left <= 0:
                return
            t.join(min(left, 0.1))
