"""RoCE GID and P_Key settings compared across the hosts of one selection (pure).

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
"""
from __future__ import annotations

import ipaddress
from typing import Any

from gpuaccept.judging.launchenv import split

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
