"""Multi-node world of the all-reduce probe (node side, stdlib only): the world check and the rendezvous
interface.

Shipped beside the probes and imported by ``nccl_allreduce.py`` in multi-node mode. :func:`world_problems`
is pure; :func:`local_interface` asks the kernel which local address and interface reach the master, for
IPv4 and IPv6 alike (``getaddrinfo``, a connected UDP socket that sends nothing, then ``getifaddrs(3)``).
"""
from __future__ import annotations

import json
import socket
from collections import Counter

def world_problems(seen: list, hosts: list[str], ranks_per_node: int, marker: str, world_size: int) -> list[str]:
    """What is wrong with a multi-node world (empty: it is the one expected). ``seen``: every rank's
    ``{rank, node_rank, host, hostname, marker}`` in rank order (an all_gather); ``hosts``: the inventory names
    in node order. Each host must appear exactly once, at its node rank, with ``ranks_per_node`` ranks, every
    rank carrying this collective's ``marker``."""
    out = []
    if len(seen) != len(hosts) * ranks_per_node or len(seen) != world_size:
        out.append(f"world size {len(seen)}, expected {len(hosts)} hosts x {ranks_per_node} = {world_size}")
    strangers = sorted({str(s.get("marker")) for s in seen if s.get("marker") != marker})
    if strangers:
        out.append(f"ranks of another collective joined (markers {strangers})")
    count = Counter(s.get("host") for s in seen)
    missing = [h for h in hosts if count[h] == 0]
    if missing:
        out.append(f"hosts missing: {', '.join(missing)}")
    extra = sorted(str(h) for h in count if h not in hosts)
    if extra:
        out.append(f"unexpected hosts: {', '.join(extra)}")
    wrong_n = [f"{h} has {count[h]}" for h in hosts if 0 < count[h] != ranks_per_node]
    if wrong_n:
        out.append(f"ranks per host, expected {ranks_per_node}: {', '.join(wrong_n)}")
    misplaced = [f"rank {i} is {s.get('host')} node {s.get('node_rank')}" for i, s in enumerate(seen)
                 if s.get("host") in hosts and (s.get("rank") != i or s.get("node_rank") != i // ranks_per_node
                                                or hosts[i // ranks_per_node] != s.get("host"))]
    if misplaced and not wrong_n:
        out.append("ranks out of place: " + ", ".join(misplaced[:8]))
    return out




def local_interface(remote: str) -> tuple[str | None, str | None]:
    """``(local address, interface name)`` this host uses to reach ``remote`` (an IPv4 or IPv6 address or a
    host name; the route's source address, from a connected UDP socket, which sends nothing), or
    ``(None, None)``. IPv6 addresses come without their zone id (``fe80::1``, not ``fe80::1%eth0``)."""
    try:
        infos = socket.getaddrinfo(remote.strip("[]"), 9, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError):
        return None, None
    for family, _, _, _, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect(sockaddr)
                addr = s.getsockname()[0].split("%", 1)[0]
        except OSError:
            continue
        return addr, interface_of(addr)
    return None, None


def interface_of(addr: str) -> str | None:
    """Name of the interface holding ``addr`` (IPv4 or IPv6; getifaddrs(3) through ctypes; secondary
    addresses too), or None."""
    import ctypes as C

    try:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        want = socket.inet_pton(family, addr.split("%", 1)[0])
    except OSError:
        return None

    class Sockaddr(C.Structure):  # struct sockaddr_in / sockaddr_in6 share the leading family and port
        _fields_ = [("family", C.c_ushort), ("port", C.c_ushort), ("v4", C.c_ubyte * 4)]

    class Sockaddr6(C.Structure):  # struct sockaddr_in6: family, port, flowinfo, addr[16], scope_id
        _fields_ = [("family", C.c_ushort), ("port", C.c_ushort), ("flowinfo", C.c_uint32),
                    ("v6", C.c_ubyte * 16), ("scope_id", C.c_uint32)]

    class Ifaddrs(C.Structure):
        pass

    Ifaddrs._fields_ = [("next", C.POINTER(Ifaddrs)), ("name", C.c_char_p), ("flags", C.c_uint),
                        ("addr", C.POINTER(Sockaddr)), ("netmask", C.c_void_p), ("ifu", C.c_void_p),
                        ("data", C.c_void_p)]
    try:
        libc = C.CDLL(None, use_errno=True)
        head = C.POINTER(Ifaddrs)()
        if libc.getifaddrs(C.byref(head)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    try:
        p = head
        while p:
            ifa = p.contents
            if ifa.addr and ifa.addr.contents.family == family:
                if family == socket.AF_INET:
                    got = bytes(ifa.addr.contents.v4)
                else:
                    got = bytes(C.cast(ifa.addr, C.POINTER(Sockaddr6)).contents.v6)
                if got == want:
                    return ifa.name.decode()
            p = ifa.next
    finally:
        libc.freeifaddrs(head)
    return None


def all_gather_json(obj: dict, dist, torch, limit: int = 1024) -> list:
    """Every rank's JSON-able ``obj``, in rank order, through one gloo all_gather of fixed-size byte tensors
    (``all_gather_object`` needs numpy, which the probe does not require)."""
    raw = json.dumps(obj).encode()
    if len(raw) > limit:
        raise ValueError(f"identity too long for the world check ({len(raw)} > {limit} bytes)")
    mine = torch.zeros(limit + 4, dtype=torch.uint8)
    mine[:4] = torch.tensor(list(len(raw).to_bytes(4, "little")), dtype=torch.uint8)
    mine[4:4 + len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
    parts = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, mine)
    out = []
    for t in parts:
        b = bytes(t.tolist())
        out.append(json.loads(b[4:4 + int.from_bytes(b[:4], "little")]))
    return out

