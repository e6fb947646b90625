"""RoCE GID and P_Key settings, and the rates ports trained at, compared across the hosts of one selection (pure).

Input: each host's ``rdma`` probe document (gpuaccept/probes/rdma.py ``devices[].ports[]`` with ``gids`` and
``pkeys``: the used entries of the port's GID and P_Key tables). Output: the hosts whose settings differ from the
selection's, per port, through :func:`gpuaccept.judging.launchenv.split` (the host off the majority is blamed; a
tie blames every host, naming the split).

What is compared, per port (device name and port number, e.g. ``mlx5_0/ports/1``), never raw table indices:

- **GID table:** the set of (GID type, subnet) of the used entries. The subnet of a GID is its upper 64 bits (the
  subnet prefix of an InfiniBand GID; the prefix of an IPv6 address on a RoCE port, ``fe80::/64`` link-local); an
  IPv4-mapped GID (``::ffff:a.b.c.d``, RoCE on an IPv4 address) is ``IPv4`` (sysfs holds no netmask: the address
  itself differs per host by design). The interface id (the port GUID, the host's own address) differs per host
  and is not compared; neither is the index a GID sits at (the kernel fills the table in the order addresses
  appear). Sources: IBA Vol. 1 4.1.1 (GID = subnet prefix + GUID), RFC 4291 2.5.5.2 (IPv4-mapped IPv6 address),
  RoCEv2 annex A17 (the GID of a RoCE v2 port is the IP address).
- **P_Key table:** the set of used P_Keys (the full-membership bit included): two ports talk only in a partition
  they share, at least one of them a full member (IBA Vol. 1 10.9 Partitions).

A port a host lacks, or one whose document carries no tables (a document of an older gpuaccept), is not compared
for that host: a missing HCA is test_rdma_ports' finding.

**Port rates** (:func:`slow_hosts`), where the inventory sets no ``ib_rate_gbps`` floor: a host whose HCAs of one
board all trained at 200 Gb/s passes its own comparison (gpuaccept.judging.storage.slow_ports compares a node's
ports with each other), yet the same board runs at 400 Gb/s on the other hosts. Compared per link layer and board
(``board_id``: the same part, which trains alike; an HCA of another part is never compared with it), over the
ACTIVE ports of every host, with the rule of slow_ports: the reference is the rate most of those ports run at (the
faster on a tie), and only ports below it are named. A host faster than the reference is never blamed.
"""
from __future__ import annotations

import ipaddress
from collections import Counter
from typing import Any

from gpuaccept.judging.launchenv import split
from gpuaccept.judging.storage import rated_ports

#: the two settings compared, as (document key, the name of the setting in a finding)
SETTINGS = (("gids", "GID table"), ("pkeys", "P_Key table"))


def gid_subnet(gid: str) -> str | None:
    """The subnet of one GID text (8 groups of 4 hex digits, as sysfs writes it): its upper 64 bits as an IPv6
    network (``"fe80::/64"``), ``"IPv4"`` for an IPv4-mapped GID, None for an all-zero or malformed one."""
    try:
        addr = ipaddress.IPv6Address(gid.strip())
    except ValueError:
        return None
    if not int(addr):
        return None
    if addr.ipv4_mapped is not None:
        return "IPv4"
    return str(ipaddress.IPv6Network((int(addr) >> 64 << 64, 64)))


def port_settings(doc: dict | None) -> dict[str, dict[str, str]]:
    """``{"mlx5_0/ports/1": {"gids": "{RoCE v2 IPv4, RoCE v2 fe80::/64}", "pkeys": "{0xffff}"}}`` of one rdma
    document: each setting as the sorted set of its entries in one string (:func:`gid_subnet`; a GID whose type
    the kernel did not say reads type ``?``), ``"{}"`` for an empty table; a key is absent where the document
    has no such table for the port."""
    out: dict[str, dict[str, str]] = {}
    for dev in (doc or {}).get("devices") or []:
        for p in dev.get("ports") or []:
            key = f"{dev.get('name')}/ports/{p.get('port')}"
            got: dict[str, str] = {}
            if isinstance(p.get("gids"), list):
                entries = {f"{g.get('type') or '?'} {sub}" for g in p["gids"]
                           if isinstance(g, dict) and (sub := gid_subnet(str(g.get("gid") or "")))}
                got["gids"] = "{" + ", ".join(sorted(entries)) + "}"
            if isinstance(p.get("pkeys"), list):
                keys = {str(k.get("pkey")).lower() for k in p["pkeys"] if isinstance(k, dict) and k.get("pkey")}
                got["pkeys"] = "{" + ", ".join(sorted(keys)) + "}"
            if got:
                out[key] = got
    return out


def splits(docs: dict[str, dict | None]) -> list[tuple[str, str, dict[str, Any]]]:
    """``[(host, one line, evidence)]`` for every host whose GID or P_Key table of a port differs from the
    selection's (``docs``: host -> rdma document). Evidence: ``{"what": "GID table" | "P_Key table", "port":
    "mlx5_0/ports/1", "value": this host's, "values": {value: hosts}}`` (``what`` and ``port`` fill the action
    row ``rdma_config_split``). A port seen on one host only is not compared."""
    settings = {h: port_settings(d) for h, d in docs.items()}
    ports = sorted({p for s in settings.values() for p in s})
    out = []
    for port in ports:
        for key, what in SETTINGS:
            values = {h: s[port][key] for h, s in settings.items() if key in s.get(port, {})}
            if len(values) < 2:
                continue
            by: dict[str, list[str]] = {}
            for h, v in values.items():
                by.setdefault(v, []).append(h)
            for host, why in split(values, f"{what} of {port}:"):
                out.append((host, why, {"what": what, "port": port, "value": values[host], "values": by}))
    return out


def slow_hosts(docs: dict[str, dict | None], hcas: dict[str, list[str] | None] | None = None,
               floors: frozenset | set = frozenset()) -> list[tuple[str, str, dict[str, Any]]]:
    """``[(host, one line, evidence)]`` for every host with ports that trained below the rate the same board's
    ports run at across the selection (module docstring). ``docs``: host -> rdma document; ``hcas``: host -> its
    ``ib_hcas`` (None or absent: its InfiniBand ports); ``floors``: hosts whose inventory sets ``ib_rate_gbps``
    (judged against it by test_rdma_ports: counted for the reference, never blamed here). A group needs ports on
    2 hosts or more. Evidence: ``{"ports": "mlx5_0 port 1, ...", "rate_gbps": the host's fastest slow rate,
    "reference_gbps", "board", "layer", "peers": hosts at the reference}``."""
    hcas = hcas or {}
    groups: dict[tuple[str, Any], list[tuple[str, str, float]]] = {}
    for host, doc in docs.items():
        for key, d, p, rate in rated_ports((doc or {}).get("devices"), hcas.get(host)):
            groups.setdefault(key, []).append((host, f"{d.get('name')} port {p.get('port')}", rate))
    out = []
    for (layer, board), ports in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if len({h for h, _, _ in ports}) < 2:
            continue
        ref, n = max(Counter(r for _, _, r in ports).items(), key=lambda kv: (kv[1], kv[0]))
        peers = sorted({h for h, _, r in ports if r == ref})
        slow: dict[str, list[tuple[str, float]]] = {}
        for host, port, rate in ports:
            if rate < ref and host not in floors:
                slow.setdefault(host, []).append((port, rate))
        for host, mine in slow.items():
            named = ", ".join(f"{p} at {r:g} Gb/s" for p, r in mine)
            on = f" (board {board})" if board else ""
            out.append((host, f"{layer} {named}: below the {ref:g} Gb/s that {n} {layer} port(s) of the same "
                              f"board run at on {len(peers)} host(s) of the selection{on} [limit: the selection's own "
                              f"ports; inventory var ib_rate_gbps sets a fixed floor]",
                        {"ports": ", ".join(p for p, _ in mine), "rate_gbps": max(r for _, r in mine),
                         "reference_gbps": ref, "board": board, "layer": layer, "peers": peers}))
    return out
