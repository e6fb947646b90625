"""Fleet-wide health judgments across hosts (pure functions, no I/O), used by
``suites/test_health.py::test_fleet_consistency``.

Each returns ``[(host, message)]``: the hosts at fault, each with one line, so that the suite files every
failure under the host it concerns (``Recorder.fail(message, host=h)`` writes ``"<host>: <message>"``) and the
reports count it against that host (summary.md host line, ``failed-hosts.txt`` for ``--limit=@...``), not only
against the pseudo-host ``fleet``.
"""
from __future__ import annotations

from typing import Iterable, Mapping


def _names(hosts: list[str], most: int = 10) -> str:
    return ", ".join(hosts[:most]) + (f" and {len(hosts) - most} more" if len(hosts) > most else "")


def driver_split(drivers: Mapping[str, list[str]]) -> list[tuple[str, str]]:
    """Hosts whose NVIDIA driver differs from the fleet's.

    ``drivers``: driver version -> hosts running it (every host with a readable NVML). One version: [].
    A version run by more hosts than any other is the fleet's; each host on another version fails
    ("driver 570.195.03, while 7 of 8 hosts run 580.159.04"). With no such version (a tie: 1 and 1, 2 and 2)
    no host can be called the odd one, and every host fails naming the split. A version not read (None, or the
    text ``"None"`` or ``""`` a caller made of it) never votes: the comparison is among the hosts whose driver was
    read (an unread driver is its host's own finding, not a version the others are measured against).
    """
    drivers = {d: hosts for d, hosts in drivers.items() if d not in (None, "None", "") and hosts}
    if len(drivers) < 2:
        return []
    total = sum(len(h) for h in drivers.values())
    ranked = sorted(drivers.items(), key=lambda kv: -len(kv[1]))
    top, runner_up = ranked[0], ranked[1]
    if len(top[1]) > len(runner_up[1]):
        return [(h, f"driver {d}, while {len(top[1])} of {total} hosts run {top[0]}")
                for d, hosts in ranked[1:] for h in hosts]
    split = "; ".join(f"{d} on {len(hosts)} ({_names(hosts, 3)})" for d, hosts in ranked)
    return [(h, f"driver {d}; the hosts are split with no majority driver: {split}")
            for d, hosts in ranked for h in hosts]


def shared_gpus(gpus_by_host: Mapping[str, Iterable[dict]], address: Mapping[str, str] | None = None
                ) -> list[tuple[str, str]]:
    """Hosts that report the same physical GPU (NVML UUID) as another host of the run.

    A GPU UUID is unique to one card (NVML ``nvmlDeviceGetUUID``); two inventory names that show the same
    UUIDs reach one machine (a copied ``ansible_host``, a stale DNS entry): that machine is tested twice and
    the machine the second name stands for not at all, yet both names would pass. Each such host fails
    naming the other host(s), the shared GPUs' count and first UUID, and both addresses.

    ``gpus_by_host``: host -> its gpu_inventory GPU documents (``uuid`` a string; unreadable ones ignored);
    ``address``: host -> the address it was reached at (``ansible_host``), for the message.
    """
    owners: dict[str, list[str]] = {}
    mine: dict[str, list[str]] = {}
    for host, gpus in gpus_by_host.items():
        for g in gpus:
            uuid = g.get("uuid") if isinstance(g, dict) else None
            if isinstance(uuid, str) and uuid.strip() and uuid not in mine.setdefault(host, []):
                mine[host].append(uuid)
                owners.setdefault(uuid, []).append(host)
    address = address or {}
    out = []
    for host in gpus_by_host:  # O(GPUs) over the fleet: 10,000 hosts x 8 GPUs in well under a second
        shared = {u: owners[u] for u in mine.get(host, []) if len(owners[u]) > 1}
        if not shared:
            continue
        others = sorted({h for hs in shared.values() for h in hs if h != host})
        first = sorted(shared)[0]
        where = ", ".join(f"{h} at {address.get(h) or '?'}" for h in [host] + others[:3])
        out.append((host, f"reports the same GPU{'s' if len(shared) > 1 else ''} as {_names(others, 3)} "
                          f"({len(shared)} GPU{'s' if len(shared) > 1 else ''} by NVML UUID, first {first}; "
                          f"{where}): one machine reached under two inventory names, so the other machine "
                          f"was not tested"))
    return out
