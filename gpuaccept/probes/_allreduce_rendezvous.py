"""The all-reduce's checks before any rank starts (node side, stdlib only): is this node ready, and can it
reach the rendezvous.

Shipped beside the probes and run through ``nccl_allreduce.py '{"check": ...}'`` (:func:`check`); it never
imports torch and takes seconds at most.

``{"check": "ready"}``: the facts that decide whether this node can take part at all: ``python`` (the
interpreter) and ``torch`` (whether that interpreter can import it; the package is looked up, not imported).

``{"check": "rendezvous", "nnodes", "node_rank", "master_addr", "master_port", "marker", "host", "hosts",
"check_s"}``: the same facts, then the rendezvous. Node 0 listens on ``master_port`` (every address, IPv6 and
IPv4 where the kernel has both) for at most ``check_s`` seconds, until every host has said hello; every node,
node 0 included, resolves ``master_addr`` (``getaddrinfo``) and connects to it, a refused connection retried
until ``check_s`` (node 0 may not listen yet), then sends ``gpuaccept-rendezvous <marker> <host>`` and waits
for node 0's answer carrying the same marker (a listener of another collective, or another service, is not the
rendezvous). The document's ``rendezvous``::

    {"address", "port", "resolved": true | false, "addresses": [...], "connected": true | false,
     "stage": "resolve" | "connect" | "handshake" | "listen" | null, "error": "..." | null, "seconds": 0.012,
     "listening": true | false, "seen": [...], "missing": [...]}      # the last three on node 0 only

A failure is reported in the document (``ok`` stays true: the check ran), never by hanging: the controller
names the node that cannot reach the address (gpuaccept.judging.multinode.rendezvous_failures).
``listen_error: "addr_in_use"`` on node 0 means the port was taken meanwhile; the controller picks another.
"""
from __future__ import annotations

import errno
import importlib.util
import selectors
import socket
import sys
import threading
import time

try:
    from _probe import ProbeFailed
except ImportError:  # imported as gpuaccept.probes._allreduce_rendezvous (tests)
    from ._probe import ProbeFailed

HELLO = "gpuaccept-rendezvous"
#: default length of the check, seconds (node 0's listening window; the others' retries of a refused connect)
CHECK_S = 10.0
#: seconds one connection attempt may take (a dropped SYN: a firewall) before the next is tried
CONNECT_TIMEOUT_S = 3.0
#: seconds node 0 waits for its clients to close after the last answer (so the port is left without TIME_WAIT)
CLOSE_GRACE_S = 1.0


def facts() -> dict:
    """This node's readiness facts: its interpreter and whether torch is installed for it."""
    return {"python": sys.executable, "torch": importlib.util.find_spec("torch") is not None}


def check(args: dict) -> dict:
    """The probe's ``check`` mode (see the module docstring); other arguments (a profile's ``iters``, the
    controller's ``deadline_s``) are ignored. Raises ProbeFailed for a bad argument."""
    what = args.get("check")
    doc = {"ok": True, "check": what, **facts()}
    if what == "ready":
        return doc
    if what != "rendezvous":
        raise ProbeFailed(f"check must be 'ready' or 'rendezvous', got {what!r}")
    for key in ("nnodes", "node_rank", "master_addr", "master_port", "hosts"):
        if args.get(key) in (None, ""):
            raise ProbeFailed(f"check rendezvous: argument {key!r} is required")
    hosts = [str(h) for h in args["hosts"]]
    node_rank, port = int(args["node_rank"]), int(args["master_port"])
    host = str(args.get("host") or hosts[node_rank])
    window = float(args.get("check_s") or CHECK_S)
    address = str(args["master_addr"]).strip().strip("[]")
    doc.update(host=host, node_rank=node_rank, hostname=socket.gethostname())
    doc["rendezvous"] = rendezvous(address, port, str(args.get("marker") or ""), host, hosts, node_rank == 0,
                                   window)
    return doc


def rendezvous(address: str, port: int, marker: str, host: str, hosts: list[str], listen: bool,
               window: float) -> dict:
    """Node ``host``'s rendezvous check (node 0 when ``listen``): see the module docstring."""
    t0 = time.monotonic()
    deadline = t0 + window
    if not listen:
        out = reach(address, port, marker, host, deadline)
        out["seconds"] = round(time.monotonic() - t0, 3)
        return out
    try:
        srv = _listener(port)
    except OSError as e:
        return {"address": address, "port": port, "resolved": None, "connected": False, "stage": "listen",
                "listening": False, "listen_error": "addr_in_use" if e.errno == errno.EADDRINUSE else "other",
                "error": f"cannot listen on port {port}: {e.strerror or e}", "seconds": round(time.monotonic() - t0, 3)}
    mine: dict = {}
    client = threading.Thread(target=lambda: mine.update(reach(address, port, marker, host, deadline)), daemon=True)
    client.start()
    try:
        seen = serve(srv, marker, set(hosts), deadline + 1.0)
    finally:
        srv.close()
    client.join(max(0.0, deadline - time.monotonic()) + 1.0)
    out = dict(mine or {"address": address, "port": port, "resolved": None, "connected": False,
                        "stage": "connect", "error": "no answer within the check"})
    out.update(listening=True, seen=sorted(seen), missing=[h for h in hosts if h not in seen],
               seconds=round(time.monotonic() - t0, 3))
    return out


def _listener(port: int) -> socket.socket:
    """A socket listening on ``port`` on every address (dual-stack where the kernel has IPv6)."""
    if socket.has_dualstack_ipv6():
        try:
            return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=4096)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise
    return socket.create_server(("", port), backlog=4096)


def _why(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def reach(address: str, port: int, marker: str, host: str, deadline: float) -> dict:
    """Resolve ``address`` and say hello to node 0's listener on ``port`` before ``deadline`` (monotonic)."""
    out = {"address": address, "port": port, "resolved": False, "connected": False, "stage": "resolve",
           "error": None}
    try:
        infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        out["error"] = f"cannot resolve {address}: {_why(e)}"
        return out
    out.update(resolved=True, addresses=sorted({i[4][0] for i in infos}), stage="connect")
    last = "no time left to connect"
    while True:
        for family, kind, proto, _, sockaddr in infos:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                with socket.socket(family, kind, proto) as s:
                    s.settimeout(min(left, CONNECT_TIMEOUT_S))
                    s.connect(sockaddr)
                    s.sendall(f"{HELLO} {marker} {host}\n".encode())
                    reply = _line(s, deadline)
            except OSError as e:
                last, out["stage"] = f"cannot connect to {sockaddr[0]} port {port}: {_why(e)}", "connect"
                continue
            if reply == f"{HELLO} {marker} ok":
                out.update(connected=True, stage=None, error=None, via=sockaddr[0])
                return out
            last, out["stage"] = (f"{sockaddr[0]} port {port} answered, but not as this all-reduce's rendezvous "
                                  f"({reply[:60]!r})"), "handshake"
        if time.monotonic() + 0.2 >= deadline:
            break
        time.sleep(0.2)
    out["error"] = last
    return out


def _line(s: socket.socket, deadline: float) -> str:
    """One line read from ``s`` before ``deadline`` (what came, without its newline, at EOF or the deadline)."""
    buf = b""
    while b"\n" not in buf and len(buf) < 4096:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        s.settimeout(left)
        try:
            chunk = s.recv(512)
        except socket.timeout:
            break
        if not chunk:
            break
        buf += chunk
    return buf.split(b"\n", 1)[0].decode(errors="replace").strip()


def serve(srv: socket.socket, marker: str, expected: set, deadline: float) -> set:
    """Node 0's side: answer every hello on ``srv`` until every host of ``expected`` has said one with
    ``marker``, or ``deadline``; the hosts seen. A connection is closed once its client has closed (its EOF),
    so that the port keeps no connection in TIME_WAIT for the ranks' rendezvous."""
    sel = selectors.DefaultSelector()
    srv.setblocking(False)
    sel.register(srv, selectors.EVENT_READ, None)
    seen: set = set()
    done_at = None
    try:
        while True:
            now = time.monotonic()
            if expected <= seen and done_at is None:
                done_at = now + CLOSE_GRACE_S
            if now >= deadline or (done_at is not None and (now >= done_at or len(sel.get_map()) == 1)):
                break
            for key, _ in sel.select(timeout=0.1):
                if key.data is None:
                    try:
                        conn, _ = srv.accept()
                    except OSError:
                        continue
                    conn.setblocking(False)
                    sel.register(conn, selectors.EVENT_READ, {"buf": b"", "answered": False})
                    continue
                _read(sel, key, marker, seen)
    finally:
        for key in list(sel.get_map().values()):
            if key.data is not None:
                key.fileobj.close()
        sel.close()
    return seen


def _read(sel, key, marker: str, seen: set) -> None:
    conn, state = key.fileobj, key.data
    try:
        chunk = conn.recv(512)
    except (BlockingIOError, InterruptedError):
        return
    except OSError:
        chunk = b""
    if not chunk or len(state["buf"]) > 4096:
        sel.unregister(conn)
        conn.close()
        return
    state["buf"] += chunk
    if state["answered"] or b"\n" not in state["buf"]:
        return
    state["answered"] = True
    words = state["buf"].split(b"\n", 1)[0].decode(errors="replace").split()
    ours = len(words) == 3 and words[0] == HELLO and words[1] == marker
    if ours:
        seen.add(words[2])
    try:
        conn.send(f"{HELLO} {marker if ours else 'other'} {'ok' if ours else 'no'}\n".encode())
    except OSError:
        sel.unregister(conn)
        conn.close()
