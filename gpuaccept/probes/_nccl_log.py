"""NCCL's ``NCCL_DEBUG=INFO`` lines, parsed (node side, stdlib only; pure functions).

Shipped beside the probes and imported by ``nccl_allreduce.py``; the controller tests feed it real lines
(``tests/data/nccl-info-*.log``). The formats are NCCL's own ``INFO(...)`` format strings (NCCL 2.x sources):

* ``NCCL version 2.28.9+cuda13.0`` (``init.cc``);
* ``Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read`` (``transport.cc``; ``[send]``/``[receive]`` on network
  channels; ``/0`` absent before NCCL 2.12 or so; some versions end the line with ``comm 0x22fcfb0 nRanks 02``,
  which is not part of the transport);
* ``host:pid:tid [dev] file.cc:123 NCCL WARN <message>`` (``debug.cc``; the ``file.cc:123`` part absent in
  old versions): :func:`nccl_warnings`;
* ``AllReduce: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..23}`` (``enqueue.cc``, TUNING,
  NCCL >= 2.19, rank 0 only);
* ``Using network IB`` (``init.cc``);
* ``NCCL_ALGO set by environment to Ring.`` (``param.cc``, ENV);
* ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>`` (``transport/net_ib.cc``:
  ``"NET/IB : Using%s %s; OOB %s:%s"`` with one ``" [%d]%s:%d/%s"`` per device: index, name, port, link);
* ``NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:fe80::1%eth1<0>`` (``transport/net_socket.cc``:
  ``"NET/Socket : Using%s"`` with one ``" [%d]%s:%s"`` per interface: index, name, address);
* ``Bootstrap : Using eth0:10.0.0.1<0>`` (``bootstrap.cc``; spelled ``Bootstrap: Using`` in some versions).
"""
from __future__ import annotations

import re
from collections import Counter

_NCCL_INFO = re.compile(r"NCCL INFO (.*)$")
_VERSION = re.compile(r"^NCCL version (\d+\.\d+\.\d+)(\S*)")
_CHANNEL = re.compile(r"^Channel (\d+)(?:/(\d+))? : (\d+)\[\w+\] -> (\d+)\[\w+\](?: \[(send|receive)\])? via (.+?)"
                      r"(?:\s+comm 0x[0-9a-fA-F]+ nRanks \d+)?\s*$")  # "comm 0x22fcfb0 nRanks 02": NCCL 2.18-ish
_TUNING = re.compile(r"^(\w+): (\d+) Bytes -> Algo (\S+) proto (\S+)")
_NETWORK = re.compile(r"^Using network (\S+)")
_ENV = re.compile(r"^(NCCL_\w+) set by environment to (.*?)\.?\s*$")


_WARN = re.compile(r"NCCL WARN\s+(.*?)\s*$")


def nccl_warnings(lines) -> list[str]:
    """The messages of NCCL's ``NCCL WARN`` lines (any mix of ranks, other lines ignored), without the
    ``host:pid:tid [dev] file.cc:123`` prefix, each once, in the order first seen: ``["Cuda failure 'out of
    memory'", "socketProgress: Connection closed by remote peer node2<47247>", ...]``. Real sample texts:
    ``tests/data/field/nccl-logs.txt``."""
    out: dict[str, None] = {}
    for line in lines:
        m = _WARN.search(line)
        if m and m.group(1):
            out.setdefault(m.group(1), None)
    return list(out)


_IFNAME_ENV = re.compile(r"NCCL INFO NCCL_SOCKET_IFNAME set by environment to (.*?)\.?\s*$")
_IF_FOUND = re.compile(r"NCCL INFO (?:Bootstrap\s*: Using|NET/Socket\s*: Using \[)")


def socket_ifname_unmatched(lines) -> str | None:
    """``"NCCL_SOCKET_IFNAME set to eth2 matched no interface of this host"`` when NCCL reports reading
    ``NCCL_SOCKET_IFNAME`` (``NCCL_SOCKET_IFNAME set by environment to eth2``, printed by ``ncclFindInterfaces``
    before it searches) and then names no interface (no ``Bootstrap : Using`` nor ``NET/Socket : Using [i]``
    line), else None. Older NCCL says so itself (WARN ``Bootstrap : no socket interface found``); NCCL 2.27.7
    fails later with an unrelated-looking ``ncclSocketInit: connecting to address  with family 59936 is
    neither AF_INET(2) nor AF_INET6(10)`` (NVIDIA/nccl#1837, read 2026-11-30), which would pass for a
    network error caused by a peer."""
    lines = list(lines)
    value = next((m.group(1) for ln in lines if (m := _IFNAME_ENV.search(ln))), None)
    if value is None or any(_IF_FOUND.search(ln) for ln in lines):
        return None
    return f"NCCL_SOCKET_IFNAME set to {value} matched no interface of this host"


def transport_class(name: str) -> str:
    """Coarse class of an NCCL transport string: ``P2P``, ``SHM``, ``NET/Socket``, ``NET/IB``, ``COLLNET``,
    ``NVLS`` or the first component."""
    parts = name.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return "NET/" + parts[1]
    if parts[0].upper().startswith("COLLNET"):
        return "COLLNET"
    return parts[0].split()[0] if parts[0] else name


def parse_nccl_log(lines) -> dict:
    """Facts from NCCL ``NCCL_DEBUG=INFO`` lines (any mix of ranks; other lines ignored).

    Returns ``{"nccl_version": "2.28.9" | None, "nccl_version_full": "2.28.9+cuda13.0" | None,
    "transports": {"P2P/CUMEM": n, ...}, "transport_classes": {"P2P": n}, "nccl_network": "Socket" | None,
    "algos": [{"coll", "bytes", "algo", "proto"}, ...], "nccl_env_seen": {"NCCL_NVLS_ENABLE": "0", ...}}``
    (the last from ENV lines ``NCCL_NVLS_ENABLE set by environment to 0.``), and ``"net_devices"``
    (:func:`parse_net_devices`). Transport lines look like
    ``Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read`` (``/0`` absent in old NCCL; ``[send]``/``[receive]``
    for network transports); TUNING lines (NCCL >= 2.19, rank 0 only) like
    ``AllReduce: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..23}``.
    """
    lines = list(lines)
    version = version_full = network = None
    env_seen: dict = {}
    transports: Counter = Counter()
    algos: list[dict] = []
    seen = set()
    for line in lines:
        mo = _NCCL_INFO.search(line)
        if not mo:
            # NCCL up to 2.21 or so prints its version bare, without the INFO prefix, even at NCCL_DEBUG=INFO
            # ("NCCL version 2.19.3+cuda12.3": NVIDIA/nccl#1267; 2.21.5: NVIDIA/nccl#1591)
            if (m := _VERSION.match(line.strip())) and version is None:
                version, version_full = m.group(1), m.group(1) + m.group(2)
            continue
        msg = mo.group(1).strip()
        if (m := _VERSION.match(msg)) and version is None:
            version, version_full = m.group(1), m.group(1) + m.group(2)
        elif m := _CHANNEL.match(msg):
            transports[m.group(6)] += 1
        elif m := _TUNING.match(msg):
            key = (m.group(1), int(m.group(2)), m.group(3), m.group(4))
            if key not in seen:
                seen.add(key)
                algos.append({"coll": key[0], "bytes": key[1], "algo": key[2], "proto": key[3]})
        elif m := _NETWORK.match(msg):
            network = network or m.group(1)
        elif m := _ENV.match(msg):
            env_seen.setdefault(m.group(1), m.group(2))
    classes: Counter = Counter()
    for name, n in transports.items():
        classes[transport_class(name)] += n
    return {"nccl_version": version, "nccl_version_full": version_full, "transports": dict(transports),
            "transport_classes": dict(classes), "nccl_network": network, "algos": algos,
            "nccl_env_seen": env_seen, "net_devices": parse_net_devices(lines)}


def algos_for(algos: list[dict], nbytes: int, world_size: int, elsize: int, oop: str) -> tuple:
    """``(oop_algo, ip_algo)`` strings like ``"RING/LL128"`` (``+``-joined when NCCL picked several) for one
    message size, from :func:`parse_nccl_log`'s ``algos``; None where NCCL printed nothing. NCCL's byte figure is
    the per-rank output for ReduceScatter and the per-rank input for AllGather (a shard), else the message."""
    shard = -(-(nbytes // elsize) // world_size) * elsize

    def pick(colls: dict) -> str | None:
        names = [f"{a['algo']}/{a['proto']}" for a in algos if colls.get(a["coll"]) == a["bytes"]]
        return "+".join(dict.fromkeys(names)) or None

    ip = pick({"AllReduce": nbytes})
    oop_algo = pick({"ReduceScatter": shard, "AllGather": shard}) if oop == "rs_ag" else ip
    return oop_algo, ip


_NET_USING = re.compile(r"^NET/(IB|Socket)\s*: Using(.*)$")
_IB_DEV = re.compile(r"\[(\d+)\]([^\s:\[\]]+):(\d+)/(\w+)")
_SOCK_DEV = re.compile(r"\[(\d+)\]([^\s:\[\]]+):(\S+?)(?:<\d+>)?(?=\s|$)")
_OOB = re.compile(r";\s*OOB\s+([^\s:]+):(\S+?)(?:<\d+>)?\s*$")
#: NCCL initialised its IB transport and found no usable HCA (``transport/net_ib.cc``: ``"NET/IB : No device
#: found."``; NCCL 2.19 prints only this, 2.28 follows it with ``NET/IB : Using [RO]; OOB ...``)
_IB_NONE = re.compile(r"^NET/IB\s*: No device found\.?\s*$")
_BOOTSTRAP = re.compile(r"^Bootstrap\s*: Using\s+([^\s:]+):(\S+?)(?:<\d+>)?\s*$")


def parse_net_devices(lines) -> dict:
    """The network devices NCCL says it uses, from its INFO lines (any mix of ranks, other lines ignored).

    Returns ``{"ib": [{"name": "mlx5_0", "port": 1, "link": "IB"}, ...] | None, "socket": [{"name": "eth0",
    "address": "10.0.0.1"}, ...] | None, "oob_interface": "eth0" | None, "bootstrap_interface": "eth0" | None,
    "bootstrap_address": "10.0.0.1" | None}``: each device once, in NCCL's index order (the first rank's line
    wins; all ranks of a host print the same list). Addresses keep NCCL's text without the ``<port>`` suffix
    (IPv6 as NCCL prints it, e.g. ``fe80::1%eth1``). ``None``: NCCL printed no such line (that transport was
    not initialised); ``[]``: it did, and found no device (``NET/IB : Using [RO]; OOB ...``, or ``NET/IB : No
    device found.``, whose text is kept as ``"ib_said"``: NCCL's own words for the operator).
    """
    ib: dict | None = None
    sock: dict | None = None
    oob = boot = boot_addr = ib_said = None
    for line in lines:
        mo = _NCCL_INFO.search(line)
        if not mo:
            continue
        msg = mo.group(1).strip()
        if m := _NET_USING.match(msg):
            kind, rest = m.group(1), m.group(2)
            if kind == "IB":
                ib = {} if ib is None else ib
                head, _, _ = rest.partition(";")
                for d in _IB_DEV.finditer(head):
                    ib.setdefault(d.group(2), {"name": d.group(2), "port": int(d.group(3)), "link": d.group(4)})
                if (o := _OOB.search(rest)) and oob is None:
                    oob = o.group(1)
            else:
                sock = {} if sock is None else sock
                for d in _SOCK_DEV.finditer(rest):
                    sock.setdefault(d.group(2), {"name": d.group(2), "address": d.group(3)})
        elif _IB_NONE.match(msg):
            ib = {} if ib is None else ib
            ib_said = ib_said or msg
        elif (m := _BOOTSTRAP.match(msg)) and boot is None:
            boot, boot_addr = m.group(1), m.group(2)
    return {"ib": None if ib is None else list(ib.values()),
            "socket": None if sock is None else list(sock.values()), "oob_interface": oob,
            "bootstrap_interface": boot, "bootstrap_address": boot_addr, "ib_said": ib_said}
