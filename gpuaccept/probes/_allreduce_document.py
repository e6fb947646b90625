"""The all-reduce probe's documents (node side, stdlib only): the result, and a failed multi-node share.

Shipped beside the probes and imported by ``nccl_allreduce.py``.

Result document::

    {"backend", "world_size", "nccl_version", "nccl_version_full", "dtype",
     "transports": {"P2P/CUMEM": 48, ...}, "transport_classes": {"P2P": 48}, "nccl_network",
     "algos": [{"coll", "bytes", "algo", "proto"}, ...], "nccl_env_seen": {"NCCL_NVLS_ENABLE": "0"},
     "net_devices": {"ib", "socket", ...},
     "rows": [{"bytes", "count", "type", "redop": "sum", "oop_time_us", "oop_algbw_gbps", "oop_busbw_gbps",
               "oop_wrong", "ip_time_us", "ip_algbw_gbps", "ip_busbw_gbps", "ip_wrong", "graph", "oop_algo",
               "ip_algo", "oop_rank_time_us", "ip_rank_time_us", ("oop_event_time_us", "ip_event_time_us": api
               nccl)}],
     "wrong_total", "avg_busbw_gbps", "hostname", "oop_method", "iters", "warmup", "timing", "master_port",
     "rendezvous_attempts", "torch_version", "worker_env", "notes", "api": "nccl"|"torch",
     "nccl_library": path|null}

Units are in the keys: ``_us`` microseconds per collective, ``_gbps`` GB/s (1e9 bytes/s), ``bytes`` bytes.
``avg_busbw_gbps`` is nccl-tests' "Avg bus bandwidth": the mean busbw over every size, out-of-place and
in-place. ``transports`` counts NCCL's "Channel xx/y : a[i] -> b[j] via T" lines over all ranks; ``algos``
lists each distinct algorithm/protocol NCCL's TUNING lines name for the measured sizes (rank 0 prints them;
absent before NCCL 2.19 or so), and ``oop_algo``/``ip_algo`` the ones of each row (``"RING/LL128"``, or None).
``nccl_env_seen`` holds the variables NCCL reports having read ("NCCL_X set by environment to Y"),
``worker_env`` the NCCL/torch/CUDA variables the workers were given. gloo: NCCL fields are null or empty.

Multi-node mode: ``ok`` true with the fields above (every host reports the rows, computed from all ranks'
all-reduced times; transports and NCCL INFO facts from its OWN ranks' output only) plus ``node_rank``,
``nnodes``, ``ranks_per_node``, ``local_ranks``, ``local_address``, ``local_interface`` (toward the master),
``socket_ifnames`` (the GLOO_/NCCL_SOCKET_IFNAME settings the ranks ran with, where each came from and which
of its names this host's interfaces lack: ``_allreduce_args.socket_settings``; in a failed share's document too),
``interfaces`` (this host's interface names, ``socket.if_nameindex()``),
``hosts``, ``marker``, ``world`` (the gathered identities); or ``ok`` false with ``outcome`` (``failed`` |
``hung`` | ``stalled`` | ``split_world`` | ``addr_in_use`` | ``aborted``: SIGTERM from the controller), ``error``
(one line), ``evidence`` (``local``: a rank of this host stalled, died of a signal or failed with an error that
is not a network error; ``peer``: its ranks failed with network errors, ``peer_addresses`` lists the IPv4/IPv6
addresses those errors name; ``none``), ``ranks`` (per local rank: rank, rc, state, phase, heartbeat age in s,
last line), ``local_address`` and ``transports`` so far.
"""
from __future__ import annotations

import os
import socket

try:
    from _allreduce_args import worker_env
    from _allreduce_figures import DTYPES, avg_busbw, make_row
    from _nccl_log import algos_for, parse_nccl_log
    from _supervisor import Worker
except ImportError:  # imported as gpuaccept.probes._allreduce_document (tests of the pure functions)
    from ._allreduce_args import worker_env
    from ._allreduce_figures import DTYPES, avg_busbw, make_row
    from ._nccl_log import algos_for, parse_nccl_log
    from ._supervisor import Worker


def failure_message(outcome: str, which: list[Worker], ranks: list[dict], cfg: dict) -> str:
    """The one-line ``error`` of a failed multi-node share: ``outcome`` (a ``_supervisor.run_ranks`` outcome),
    ``which`` (the ranks it names), ``ranks`` (every local rank's report), ``cfg`` (the probe's configuration)."""
    local = [r for r in ranks if r["evidence"] == "local"]
    if outcome == "hung":
        head = (f"all-reduce hung: ranks {[w.rank for w in which]} did not finish within {cfg['deadline_s']}s; "
                f"killed all ranks")
    elif outcome == "stalled":
        head = f"rank(s) {[w.rank for w in which]} stalled (stall_s {cfg['stall_s']}); killed all ranks"
    elif outcome == "addr_in_use":
        return f"rendezvous port {cfg['master_port']} in use on {cfg['master_addr']}"
    elif outcome == "aborted":
        head = "aborted by the controller; killed all ranks"
    else:
        head = "; also ".join(w.describe_exit() for w in which[:3])
    split = [r for r in ranks if r["evidence"] == "split_world"]
    if split:
        return f"split world: {split[0]['reason']}"
    detail = "; ".join(f"rank {r['rank']} in '{r['phase']}': {r['reason']}" for r in local[:4])
    return head + (f" [{detail}]" if detail and outcome != "failed" else "")


def failure_document(where: dict, outcome: str, msg: str, ranks: list[dict], workers, texts, notes) -> dict:
    """The document of a failed multi-node share (``ok`` false, see the module docstring): ``where`` (this host's
    place in the world), ``msg`` (:func:`failure_message`), the ranks' reports, workers, output texts, notes."""
    kinds = {r["evidence"] for r in ranks}
    if any(r["evidence"] == "split_world" for r in ranks):
        outcome = "split_world"
    elif outcome == "failed" and "addr_in_use" in kinds:
        outcome = "addr_in_use"
    evidence = "local" if "local" in kinds else "peer" if "peer" in kinds else "none"
    if outcome == "aborted" and evidence == "peer":
        evidence = "none"  # ranks that failed on a network error before the abort add nothing
    parsed = parse_nccl_log(line for t in texts for line in t.splitlines())
    return {**where, "ok": False, "outcome": outcome, "error": msg, "evidence": evidence,
            "peer_addresses": list(dict.fromkeys(a for r in ranks for a in r["addresses"])),
            "ranks": ranks, "local_ranks": [w.rank for w in workers], "transports": parsed["transports"],
            "transport_classes": parsed["transport_classes"], "nccl_version": parsed["nccl_version"],
            "net_devices": parsed["net_devices"], "notes": notes}


def document(cfg: dict, res: dict, texts: list[str], notes: list, port: int, attempts: int) -> dict:
    """The result document (see the module docstring) from rank 0's result file ``res``, every local rank's
    output ``texts`` (NCCL's INFO lines), the rendezvous ``port`` and the number of ``attempts``."""
    n = cfg["world_size"]
    type_name = DTYPES[cfg["dtype"]][1]
    rows = [make_row(r["bytes"], r["count"], type_name, n, r["oop_s"], r["ip_s"], r["oop_wrong"],
                     r["ip_wrong"], r["graph"]) for r in res["rows"]]
    parsed = parse_nccl_log(line for t in texts for line in t.splitlines())
    if cfg["backend"] == "nccl" and parsed["nccl_version"] is None and res.get("nccl_version"):
        parsed["nccl_version"] = parsed["nccl_version_full"] = res["nccl_version"]
    elsize = DTYPES[cfg["dtype"]][0]
    api = res.get("api", cfg["api"])
    oop = "direct" if api == "nccl" else cfg["oop"]
    for row, r in zip(rows, res["rows"]):
        row["oop_algo"], row["ip_algo"] = algos_for(parsed["algos"], row["bytes"], n, elsize, oop)
        for k in ("oop_rank_time_us", "ip_rank_time_us", "oop_event_time_us", "ip_event_time_us"):
            if k in r:
                row[k] = r[k]
    wanted = {("AllReduce", r["bytes"]) for r in rows}
    wanted |= {(c, -(-r["count"] // n) * elsize) for r in rows for c in ("ReduceScatter", "AllGather")}
    algos = [a for a in parsed["algos"] if (a["coll"], a["bytes"]) in wanted]  # not the probe's own small syncs
    if n == 1:
        notes.append(f"1 {'GPU' if cfg['backend'] == 'nccl' else 'rank'}: nothing to reduce "
                     f"(busbw factor 2(n-1)/n = 0)")
    notes.extend(res.get("notes", []))
    wenv = {k: v for k, v in sorted(worker_env(dict(os.environ), cfg["env"], [],
                                               cfg.get("gloo_ifname", "lo")).items())
            if k.startswith(("NCCL_", "TORCH_NCCL", "TORCH_SYMM_MEM", "NVSHMEM_", "CUDA_VISIBLE", "GLOO_"))}
    return {
        "backend": cfg["backend"],
        "world_size": n,
        "nccl_version": parsed["nccl_version"],
        "nccl_version_full": parsed["nccl_version_full"],
        "dtype": cfg["dtype"],
        "transports": parsed["transports"],
        "transport_classes": parsed["transport_classes"],
        "nccl_network": parsed["nccl_network"],
        "algos": algos,
        "nccl_env_seen": parsed["nccl_env_seen"],
        "net_devices": parsed["net_devices"],
        "rows": rows,
        "wrong_total": sum((r["oop_wrong"] or 0) + (r["ip_wrong"] or 0) for r in rows),
        "avg_busbw_gbps": avg_busbw(rows),
        "hostname": socket.gethostname(),
        "oop_method": ("ncclAllReduce(sendbuff, recvbuff, ...) with sendbuff != recvbuff" if api == "nccl" else
                       "reduce_scatter_tensor + all_gather_into_tensor (send -> recv)" if cfg["oop"] == "rs_ag"
                       else "recv.copy_(send) + all_reduce(recv)"),
        "api": api,
        "nccl_library": res.get("nccl_library"),
        "iters": cfg["iters"],
        "warmup": cfg["warmup"],
        "timing": res.get("timing"),
        "master_port": port,
        "rendezvous_attempts": attempts,
        "torch_version": res.get("torch_version"),
        "worker_env": wenv,
        "notes": notes,
    }
