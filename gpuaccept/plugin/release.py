"""What a finished test leaves behind that no later test of the run reads, let go once that is so (the
controller's memory at fleet size).

Two things, both made per test or per host:

* a test's :class:`~gpuaccept.judging.recorder.Recorder` (``item.stash``): it holds the host's GPUs, typed
  (gpuaccept.judging.readings.typed), and its blockers; its figures are in the item's ``user_properties`` and
  the report's record, which stay. Dropped when the test's protocol ends (its reports are made by then).
* a host's cached probe documents (``HostRunner.cached_probe``: gpu_inventory, rdma), dropped when the last
  selected test that may touch the host has ended: the host's own last test, or the last fleet test (a test
  without a host, e.g. ``test_fleet_consistency`` over ``nodes``, may read every host) when that one runs later.

At 1,000 replayed 2xH200 hosts (``benchmarks/controller_rss.py``, 2026-12-02) the two were 145 MiB of the
controller's peak. The plan of the second is made from the run's items in run order (:func:`last_uses`), only
where pytest runs them in that order in this process (not under xdist, whose workers are sent their items in
batches).
"""
from __future__ import annotations

from typing import Any, Iterable


def host_param(item: Any) -> str | None:
    """The host a test item runs on (its ``node`` parameter), or None for a fleet test."""
    name = getattr(getattr(item, "callspec", None), "params", {}).get("node")
    return None if name is None else str(name)


def hosts_in_run(item_hosts: Iterable[str | None], hosts: Iterable[str]) -> list[str]:
    """The selected hosts (``hosts``, --limit and --shard, in inventory order) that the run's selected tests reach
    (pure), given each selected item's host (None: a fleet-wide test): those with a test of their own, or every
    one of ``hosts`` when no selected test has a host (only fleet-wide tests selected, e.g. ``-m nccl_multinode``:
    they cover every selected host). A host whose own tests ``-k``/``-m`` left out is not in the run: no fleet-wide
    test touches it, and the reports neither list it nor give it a verdict. Example: ``([h1, None, h1], [h1, h2])``
    -> ``[h1]``; ``([None], [h1, h2])`` -> ``[h1, h2]``."""
    hosts = list(hosts)
    own = {h for h in item_hosts if h is not None}
    return [h for h in hosts if h in own] if own else hosts


def last_uses(items: Iterable[Any], hosts: Iterable[str] = ()) -> dict[Any, list[str]]:
    """item -> the hosts whose last use it is, for pytest items in run order (pure). A host's last use is its own
    last item, or the last item without a host when that comes later (a fleet test may touch every host); a host
    of ``hosts`` (the selected ones) without an item of its own is last used by the last fleet item, if any.
    Example: ``[t[h1], t[h2], fleet, u[h1]]`` -> ``{fleet: ["h2"], u[h1]: ["h1"]}``."""
    items = list(items)
    last_own: dict[str, int] = {}
    last_fleet = -1
    for i, it in enumerate(items):
        host = host_param(it)
        if host is None:
            last_fleet = i
        else:
            last_own[host] = i
    if last_fleet >= 0:
        for host in hosts:
            last_own.setdefault(host, last_fleet)
    out: dict[Any, list[str]] = {}
    for host, i in last_own.items():
        out.setdefault(items[max(i, last_fleet)], []).append(host)
    return out
