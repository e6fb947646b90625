"""Intra-node all-reduce bandwidth, measured the way nccl-tests' ``all_reduce_perf`` measures it.

Run as ``python3 nccl_allreduce.py '<json args>'`` (see :mod:`_probe`). The probe process is only a
supervisor: it spawns ``world_size`` worker processes of this same file (``--worker``), one per GPU, each in
its own process group, waits for them under a wall-clock deadline, kills every one of them on a hang or a
death, and assembles the result document from rank 0's figures and the NCCL INFO lines of every rank.

This file keeps the measurement (the worker, the sweep, the correctness pattern, the document). Shipped
helpers beside it do the rest: ``_supervisor.py`` (spawn, supervise, report, kill: one sequence for one node
and for one host of a multi-node world), ``_nccl.py`` (libnccl through ctypes), ``_nccl_log.py`` (NCCL's
INFO lines: transports, algorithms, network devices) and ``_nccl_world.py`` (the multi-node world check and
the interface toward the master, IPv4 or IPv6). ``busbw_factor`` here is the source of the busbw factor;
the controller's ``gpuaccept.judging.nccl_table.busbw`` is held to it by a test.

Arguments (JSON object, every key optional)
-------------------------------------------
==================  ===========================================================================================
``backend``         ``"nccl"`` or ``"gloo"``; default ``nccl`` when torch sees a GPU, else ``gloo`` (CPU tensors)
``world_size``      ranks, one per GPU; default: every visible GPU (nccl) or 2 (gloo)
``min_bytes``       smallest message, bytes; default 1 MiB
``max_bytes``       largest message, bytes; default 4 GiB (nccl) or 64 MiB (gloo); reduced, with a note, when
                    two buffers of it do not fit in GPU memory (as nccl-tests does)
``factor``          size step: min, min*factor, ... <= max (integer >= 2); default 4
``iters``           timed collectives per size and mode; default 20 (nccl-tests ``-n``)
``reps``            timed loops of ``iters`` per size and mode, the median loop reported; default 5
``warmup``          untimed collectives per size and mode before timing; default 5 (nccl-tests ``-w``)
``dtype``           ``"float32"`` (default), ``"bfloat16"`` or ``"float16"``
``timeout_s``       per-collective watchdog: ``init_process_group(timeout=...)``; default 120 s
``deadline_s``      wall-clock limit of the whole probe, all ranks and rendezvous retries; default 600 s
``master_port``     rendezvous TCP port on 127.0.0.1; default: a free one. A port in use is replaced
                    by a fresh free one, up to 5 rendezvous attempts in all
``api``             ``"nccl"`` (default with backend nccl): call libnccl's ``ncclAllReduce`` directly through
                    ctypes, exactly nccl-tests' code path; ``"torch"``: torch.distributed collectives (the
                    only choice with gloo). If libnccl cannot be loaded (not found, a symbol missing) the
                    workers fall back to ``"torch"`` with a note; the document's ``api`` says which ran
``timer``           api nccl: ``"host"`` (default; nccl-tests' clock: host time around the launches and the
                    stream's completion) or ``"events"`` (CUDA events around the same launches)
``graph``           nccl only: capture each timed loop of ``iters`` collectives in one CUDA graph (nccl-tests
                    ``-G 1``); default false with api nccl (nccl-tests' default, no ``-G``), true with api torch
                    (hides torch's per-call launch cost, which makes small sizes read HIGHER than nccl-tests)
``graph_max_bytes`` largest message timed through a graph; default 4 GiB (every size)
``oop``             api torch: how the out-of-place column is measured: ``"rs_ag"`` (default) or ``"copy"``;
                    see below (api nccl calls the true out-of-place ``ncclAllReduce``)
``env``             extra environment variables for the workers, e.g. ``{"NCCL_ALGO": "Ring"}``
==================  ===========================================================================================

Workers get ``MASTER_ADDR=127.0.0.1``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` (device =
rank), ``NCCL_DEBUG=INFO`` and ``NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV,TUNING`` (``env`` may override these two), and
otherwise the probe's own environment unchanged: ``NCCL_NVLS_ENABLE``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST`` and
``NVSHMEM_DISABLE_NVLS`` are passed through exactly as found, set or unset (an ``env`` argument naming one is
ignored, with a note): the probe never sets them. ``NCCL_DEBUG_FILE`` is removed: the probe reads NCCL's lines from each worker's output.

Method (nccl-tests ``src/common.cu`` ``BenchTime`` and ``src/all_reduce.cu``)
-----------------------------------------------------------------------------
api nccl (default on GPUs). Each worker imports torch, initialises CUDA on ``cuda:rank`` and loads the libnccl
the process already maps (a path containing ``libnccl.so`` in ``/proc/self/maps``: torch's own copy), else an
``nvidia-nccl-cu*`` wheel's ``nvidia/*/lib/libnccl.so*`` under site-packages, else ``libnccl.so.2`` through the
dynamic loader (``nccl_library`` in the document; version from ``ncclGetVersion``). torch.distributed, with
the gloo backend on the CPU, only carries the rendezvous (rank 0's ``ncclGetUniqueId`` is broadcast as 128
bytes) and the small CPU figures; the communicator is ``ncclCommInitRank`` and is finalised/destroyed at the
end. Buffers are torch tensors (``data_ptr()``), the stream one torch stream per rank made current for every
torch op too. Out-of-place is ``ncclAllReduce(send, recv, count, type, ncclSum, comm, stream)`` with
``send != recv``, in-place the same with ``send == recv``: nccl-tests' two columns exactly. Timing, as
``BenchTime`` without ``-G``: ``warmup`` calls, synchronise, one aligning ``ncclAllReduce`` of one element
(nccl-tests: one collective and a barrier), synchronise, then ``iters`` calls issued back to back from Python
and the stream's completion polled; time per op = host elapsed / iters (``timer: events`` uses CUDA events
around the same calls instead; both are recorded, ``*_event_time_us``). Each rank's time is kept
(``*_rank_time_us``) and the reported time is their AVERAGE, as nccl-tests' default ``-a 1``.

api torch (gloo always; nccl on request or as the fallback) is measured as follows.
* For each size: ``warmup`` collectives, then ``iters`` back-to-back collectives; time per op = elapsed/iters.
  nccl: elapsed between two CUDA events on the issuing stream, started after a tiny all-reduce that lines the
  ranks' GPUs up and a ~0.1 ms GPU spin so that the host has queued the work before the clock starts; with
  ``graph`` the ``iters`` collectives are one CUDA graph, replayed once untimed and once timed (nccl-tests
  ``-G``; without it torch's per-call overhead dominates small messages: 18 vs 46.5 GB/s busbw at 1 MiB on
  2xH200). gloo: host ``time.perf_counter`` around the loop, after a barrier.
  As nccl-tests does, iteration i works on the buffer at offset ``(i % (buffer/size)) * size`` so that
  consecutive collectives do not reuse the same cache lines.
* api torch: the reported time is the MAXIMUM of the ranks' times (the slowest rank).
  nccl-tests' default ``-a 1`` reports the ranks' AVERAGE; ours equals its ``-a 3``. Identical when ranks
  agree (they do within a node: every rank finishes the same collective at nearly the same time).
* algbw = bytes / time (GB/s, GB = 1e9 bytes); busbw = algbw * 2(n-1)/n, nccl-tests ``doc/PERFORMANCE.md``
  ("AllReduce": each rank sends and receives 2(n-1)/n of the data; busbw compares with the link's speed).
  One rank: busbw 0 (nothing crosses a link), noted.
* Out-of-place. nccl-tests' out-of-place column is ``ncclAllReduce(sendbuff, recvbuff)`` with
  ``sendbuff != recvbuff``: the input is read from one buffer and the sum written to another, the input left
  intact. torch's public API only has the in-place ``all_reduce``, so the copy-free form cannot be called.
  ``oop="rs_ag"`` (default) measures ``reduce_scatter_tensor(recv[rank shard] <- send)`` followed by an in-place
  ``all_gather_into_tensor(recv <- recv[rank shard])``: the same out-of-place semantics (send untouched, sum in
  recv), the same bytes on the wire as NCCL's ring all-reduce (which is a reduce-scatter then an all-gather)
  and no extra copy, at the price of two kernel launches instead of one and NCCL choosing the algorithm for
  reduce-scatter/all-gather (ring/PAT/NVLS) rather than for all-reduce (ring/tree/NVLS). Messages whose
  element count is not a multiple of n are padded by fewer than n elements. ``oop="copy"`` instead times
  ``recv.copy_(send); all_reduce(recv)`` (what ``torch.distributed._functional_collectives.all_reduce`` does),
  which adds one device copy per op. A fresh output pre-filled outside the timed region would just be an
  in-place all-reduce on another buffer, so it is not offered. The in-place column is the true
  ``ncclAllReduce`` and is the one to compare with nccl-tests.
* Correctness, after timing (nccl-tests ``CheckData``): each rank fills its input with
  ``c_rank * (i % m)`` (``c_rank = rank + 1``, or 1 for large n) chosen so that every partial sum is an integer
  exactly representable in the dtype whatever the reduction order (<= 2**24 float32, 2048 float16,
  256 bfloat16); the output of one more collective is compared element by element on the device with the
  expected sum; ``#wrong`` is the sum over ranks of mismatching elements (NaN counts as wrong).

Multi-node mode (arguments ``nnodes`` and ``node_rank`` given; driven by :mod:`gpuaccept.runner.multinode`)
---------------------------------------------------------------------------------------------------
One probe per host, all started at once by the controller; each supervises only its own ranks, with the
deadline and kill logic above. Extra arguments:

==================  ===========================================================================================
``nnodes``          hosts in the collective
``node_rank``       this host's index, 0..nnodes-1; node 0 hosts the rendezvous (rank 0's TCPStore)
``ranks_per_node``  local ranks (GPUs used) on every host; default 1 (gloo) or every visible GPU (nccl).
                    Global rank = node_rank * ranks_per_node + local rank; world = nnodes * ranks_per_node
``master_addr``     address of node 0 as the other hosts reach it (required)
``master_port``     rendezvous port on node 0 (required: the controller picks it there). No local retry:
                    a port in use is reported (``outcome: addr_in_use``) and the controller retries the
                    whole collective on another port
``marker``          a string unique to this collective, put in every worker's command line (``pkill -f``)
``host``, ``hosts`` this host's inventory name and every host's, in node order: the world check below
``stall_s``         a local rank whose heartbeat (a thread touching a file every 0.5 s) is older than this and
                    whose process is not running (stopped, ``T``; uninterruptible, ``D``; sleeping with the
                    interpreter wedged) is stalled: this host's ranks are killed at once and the host is
                    blamed by its own evidence. Default: off (the deadline alone)
==================  ===========================================================================================

The world check: right after ``init_process_group`` every rank checks ``get_world_size()`` against
``nnodes * ranks_per_node`` and all-gathers ``{rank, node_rank, host, hostname, marker}``: every host of
``hosts`` must be present exactly once, at its node rank, with ``ranks_per_node`` ranks, all of this
collective's marker. Anything else is a split world: the ranks exit (rc 3) and the document says
``outcome: split_world``: an error, never a figure. Two inventory names with one ``hostname`` are a note
(test rigs and containers share one kernel). The gloo side-channel uses ``GLOO_SOCKET_IFNAME`` from the
environment, else the interface holding the local address this host uses to reach ``master_addr``.

In this mode the probe always prints a document (rc 0) unless its arguments are wrong: ``ok`` true with the
single-node fields (every host reports the rows, computed from all ranks' all-reduced times; transports
and NCCL INFO facts from its OWN ranks' output only) plus ``node_rank``, ``nnodes``, ``ranks_per_node``,
``local_ranks``, ``local_address``, ``local_interface`` (toward the master), ``hosts``, ``marker``,
``world`` (the gathered identities); or ``ok`` false with ``outcome``
(``failed`` | ``hung`` | ``stalled`` | ``split_world`` | ``addr_in_use`` | ``aborted``: SIGTERM from the
controller), ``error`` (one line), ``evidence`` (``local``: a rank of this host stalled, died of a signal
or failed with an error that is not a network error; ``peer``: its ranks failed with network errors,
``peer_addresses`` lists the IPv4/IPv6 addresses those errors name; ``none``), ``ranks`` (per local rank: rank,
rc, state, phase, heartbeat age in s, last line), ``local_address`` and ``transports`` so far.

Result document
---------------
``{"backend", "world_size", "nccl_version", "nccl_version_full", "dtype", "transports": {"P2P/CUMEM": 48, ...},
"transport_classes": {"P2P": 48}, "nccl_network", "algos": [{"coll", "bytes", "algo", "proto"}, ...],
"nccl_env_seen": {"NCCL_NVLS_ENABLE": "0"}, "net_devices": {"ib", "socket", ...}, "rows": [{"bytes", "count", "type", "redop": "sum", "oop_time_us",
"oop_algbw_gbps", "oop_busbw_gbps", "oop_wrong", "ip_time_us", "ip_algbw_gbps", "ip_busbw_gbps", "ip_wrong",
"graph", "oop_algo", "ip_algo", "oop_rank_time_us", "ip_rank_time_us", ("oop_event_time_us", "ip_event_time_us":
api nccl)}], "wrong_total", "avg_busbw_gbps", "hostname", "oop_method", "iters", "warmup", "timing", "master_port",
"rendezvous_attempts", "torch_version", "worker_env", "notes", "api": "nccl"|"torch", "nccl_library": path|null}``.
Units are in the keys: ``_us`` microseconds per collective, ``_gbps`` GB/s (1e9 bytes/s), ``bytes`` bytes.
``avg_busbw_gbps`` is nccl-tests' "Avg bus bandwidth": the mean busbw over every size, out-of-place and
in-place. ``transports`` counts NCCL's "Channel xx/y : a[i] -> b[j] via T" lines over all ranks; ``algos``
lists each distinct algorithm/protocol NCCL's TUNING lines name for the measured sizes (rank 0 prints them;
absent before NCCL 2.19 or so), and ``oop_algo``/``ip_algo`` the ones of each row (``"RING/LL128"``, or None).
``nccl_env_seen`` holds the variables NCCL reports having read ("NCCL_X set by environment to Y"),
``worker_env`` the NCCL/torch/CUDA variables the workers were given. gloo: NCCL fields are null or empty.

Failures: a rank that exits early fails the probe with ``rank R exited with rc X: <its last line>``; ranks
still running at ``deadline_s`` fail it with ``all-reduce hung: ranks [...] did not finish within Ns; killed all
ranks``, naming the slowest rank and its phase. Either way every worker's process group gets SIGTERM (and
SIGCONT, so that a stopped one sees it), then SIGKILL after 3 s, and is reaped: no process is left behind.
Workers also die with the probe (``PR_SET_PDEATHSIG``). Wrong elements do not fail the probe: ``wrong_total``
is a figure for the controller's verdict.
"""
from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
import tempfile
import time
from collections import Counter

try:
    from _conditions import Watch
    from _nccl import NCCL_DTYPE, NCCL_SUM, NCCL_UNIQUE_ID_BYTES, NcclError, nccl_dtype_enum, pick_nccl_library
    from _nccl_log import algos_for, parse_nccl_log
    from _nccl_world import all_gather_json, local_interface, world_problems
    from _probe import ProbeFailed, log, run
    from _supervisor import (EXIT_ADDR_IN_USE, EXIT_SPLIT_WORLD, Phase, Worker, exit_now, hang_message,
                             is_addr_in_use, kill_all, last_line, rank_evidence, run_ranks, terminate_on_signals,
                             worker_main)
except ImportError:  # imported as gpuaccept.probes.nccl_allreduce (tests of the pure functions)
    from ._conditions import Watch
    from ._nccl import NCCL_DTYPE, NCCL_SUM, NCCL_UNIQUE_ID_BYTES, NcclError, nccl_dtype_enum, pick_nccl_library
    from ._nccl_log import algos_for, parse_nccl_log
    from ._nccl_world import all_gather_json, local_interface, world_problems
    from ._probe import ProbeFailed, log, run
    from ._supervisor import (EXIT_ADDR_IN_USE, EXIT_SPLIT_WORLD, Phase, Worker, exit_now, hang_message,
                              is_addr_in_use, kill_all, last_line, rank_evidence, run_ranks, terminate_on_signals,
                              worker_main)

#: re-exported for the controller's tests (the world check and the rank evidence live in shipped helpers)
__all__ = ["EXIT_SPLIT_WORLD", "rank_evidence", "world_problems", "busbw_factor", "main"]

MiB = 1 << 20
GiB = 1 << 30

#: element size (bytes), nccl-tests' type name, largest integer exactly representable (2**(mantissa bits+1))
DTYPES = {
    "float32": (4, "float", 1 << 24),
    "float16": (2, "half", 1 << 11),
    "bfloat16": (2, "bfloat16", 1 << 8),
}
#: environment variables the workers inherit exactly as found (the test box needs NCCL_NVLS_ENABLE=0)
PROTECTED_ENV = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
RENDEZVOUS_ATTEMPTS = 5
CHECK_CHUNK = 1 << 24  # elements per chunk when filling / checking (bounds temporaries to ~128 MiB int64)


# ---------------------------------------------------------------------------------------------------------
# pure helpers: sizes, bandwidth, correctness pattern, NCCL log parsing
# ---------------------------------------------------------------------------------------------------------

def sweep_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """Message sizes in bytes: ``min, min*factor, ...`` up to ``max`` inclusive (nccl-tests ``-b -e -f``)."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError(f"need 1 <= min_bytes <= max_bytes, got {min_bytes}..{max_bytes}")
    if min_bytes == max_bytes:
        return [min_bytes]
    if factor < 2:
        raise ValueError(f"factor must be an integer >= 2, got {factor}")
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= factor
    return sizes


def busbw_factor(world_size: int) -> float:
    """All-reduce bus-bandwidth factor 2(n-1)/n (nccl-tests doc/PERFORMANCE.md); 0 for one rank."""
    return 2.0 * (world_size - 1) / world_size


def make_row(nbytes: int, count: int, type_name: str, world_size: int, oop_s: float, ip_s: float,
             oop_wrong, ip_wrong, graph: bool) -> dict:
    """One table row from per-op times in seconds: time in us, algbw = bytes/time and busbw = algbw*2(n-1)/n
    in GB/s (1e9 bytes/s), as nccl-tests ``AllReduceGetBw``."""
    row = {"bytes": nbytes, "count": count, "type": type_name, "redop": "sum"}
    for mode, sec, wrong in (("oop", oop_s, oop_wrong), ("ip", ip_s, ip_wrong)):
        alg = nbytes / 1e9 / sec if sec > 0 else 0.0
        row[f"{mode}_time_us"] = round(sec * 1e6, 3)
        row[f"{mode}_algbw_gbps"] = round(alg, 6)
        row[f"{mode}_busbw_gbps"] = round(alg * busbw_factor(world_size), 6)
        row[f"{mode}_wrong"] = wrong
    row["graph"] = graph
    return row


def avg_busbw(rows: list[dict]) -> float:
    """nccl-tests' "Avg bus bandwidth": mean busbw over every size, out-of-place and in-place (GB/s)."""
    vals = [r[k] for r in rows for k in ("oop_busbw_gbps", "ip_busbw_gbps") if r.get(k) is not None]
    return round(sum(vals) / len(vals), 6) if vals else 0.0


def pattern_params(world_size: int, dtype: str) -> tuple[int, bool, int]:
    """``(m, rank_scaled, total)`` of the correctness pattern: rank r holds ``c_r * (i % m)`` with
    ``c_r = r + 1`` if ``rank_scaled`` else 1, so the expected sum is ``total * (i % m)``. Chosen so that
    ``total * (m - 1)`` (the largest partial sum in any reduction order) is exactly representable."""
    exact = DTYPES[dtype][2]
    tri = world_size * (world_size + 1) // 2
    scaled = tri <= exact // 2
    total = tri if scaled else world_size
    m = min(251, exact // total + 1)
    if m < 2:
        raise ValueError(f"world size {world_size} too large for an exact {dtype} check")
    return m, scaled, total


def pattern_chunk(torch, start: int, stop: int, coeff: int, m: int, dtype, device):
    """Elements ``start..stop`` of ``coeff * (i % m)`` as a tensor of ``dtype`` (exact integers)."""
    idx = torch.arange(start, stop, device=device, dtype=torch.int64)
    return (torch.remainder(idx, m) * coeff).to(dtype)


def fill_pattern(buf, rank: int, world_size: int, dtype: str) -> None:
    """Fill 1-D ``buf`` with rank ``rank``'s input pattern (see :func:`pattern_params`)."""
    import torch
    m, scaled, _ = pattern_params(world_size, dtype)
    coeff = rank + 1 if scaled else 1
    for s in range(0, buf.numel(), CHECK_CHUNK):
        e = min(s + CHECK_CHUNK, buf.numel())
        buf[s:e].copy_(pattern_chunk(torch, s, e, coeff, m, buf.dtype, buf.device))


def count_wrong(result, world_size: int, dtype: str) -> int:
    """Number of elements of 1-D ``result`` that differ from the expected all-reduce sum of every rank's
    :func:`fill_pattern` (compared on ``result``'s device, chunk by chunk; NaN counts as wrong)."""
    import torch
    m, _, total = pattern_params(world_size, dtype)
    wrong = torch.zeros((), dtype=torch.int64, device=result.device)
    for s in range(0, result.numel(), CHECK_CHUNK):
        e = min(s + CHECK_CHUNK, result.numel())
        exp = pattern_chunk(torch, s, e, total, m, result.dtype, result.device)
        wrong += (result[s:e] != exp).sum()
    return int(wrong.item())

def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (bind to port 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------------------
# parent: configuration, spawning, the supervise-and-report sequence, documents
# ---------------------------------------------------------------------------------------------------------

def _int_arg(args: dict, key: str, default, lo: int = 1) -> int:
    val = args.get(key, default)
    if isinstance(val, bool) or not isinstance(val, (int, float)) or int(val) != val or val < lo:
        raise ProbeFailed(f"argument {key!r} must be an integer >= {lo}, got {val!r}")
    return int(val)


def _config(args: dict) -> dict:
    known = {"backend", "world_size", "min_bytes", "max_bytes", "factor", "iters", "warmup", "reps", "dtype",
             "timeout_s", "deadline_s", "master_port", "graph", "graph_max_bytes", "oop", "env", "api", "timer",
             *MULTINODE_ARGS}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ProbeFailed(f"unknown argument(s) {unknown}; known: {sorted(known)}")
    if importlib.util.find_spec("torch") is None:  # the ranks would each die of it, blamed as a sick host
        raise ProbeFailed(f"torch is not installed for {sys.executable} (set ansible_python_interpreter to the "
                          f"Python that has it)")
    backend = args.get("backend")
    world_size = args.get("world_size")
    n_gpus = None
    if backend is None or backend == "nccl":
        import torch  # only to pick defaults; the workers do the measuring
        n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        backend = backend or ("nccl" if n_gpus else "gloo")
    if backend not in ("nccl", "gloo"):
        raise ProbeFailed(f"backend must be 'nccl' or 'gloo', got {backend!r}")
    if backend == "nccl" and not n_gpus:
        raise ProbeFailed("backend nccl: torch sees no GPU (CUDA unavailable); use backend gloo on a CPU machine")
    if backend == "nccl" and world_size is None:
        world_size = n_gpus
    cfg = {"backend": backend}
    cfg["world_size"] = _int_arg({} if world_size is None else {"world_size": world_size}, "world_size", 2)
    cfg["nnodes"] = None
    cfg["local_ranks"] = cfg["world_size"]  # ranks this probe spawns
    if "nnodes" in args or "node_rank" in args:
        _multinode_config(args, cfg, n_gpus)
    cfg["min_bytes"] = _int_arg(args, "min_bytes", MiB)
    cfg["max_bytes"] = _int_arg(args, "max_bytes", 4 * GiB if backend == "nccl" else 64 * MiB)
    cfg["factor"] = _int_arg(args, "factor", 4)
    cfg["iters"] = _int_arg(args, "iters", 20)
    cfg["reps"] = _int_arg(args, "reps", 5)
    cfg["warmup"] = _int_arg(args, "warmup", 5, lo=0)
    cfg["timeout_s"] = _int_arg(args, "timeout_s", 120)
    cfg["deadline_s"] = _int_arg(args, "deadline_s", 600)
    cfg["graph_max_bytes"] = _int_arg(args, "graph_max_bytes", 4 * GiB)
    port = args.get("master_port")
    cfg["master_port"] = None if port is None else _int_arg(args, "master_port", None, lo=1)
    cfg["dtype"] = args.get("dtype", "float32")
    if cfg["dtype"] not in DTYPES:
        raise ProbeFailed(f"dtype must be one of {sorted(DTYPES)}, got {cfg['dtype']!r}")
    cfg["oop"] = args.get("oop", "rs_ag")
    if cfg["oop"] not in ("rs_ag", "copy"):
        raise ProbeFailed(f"oop must be 'rs_ag' or 'copy', got {cfg['oop']!r}")
    api = args.get("api", "nccl" if backend == "nccl" else "torch")
    if api not in ("nccl", "torch"):
        raise ProbeFailed(f"api must be 'nccl' or 'torch', got {api!r}")
    if api == "nccl" and backend != "nccl":
        raise ProbeFailed("api 'nccl' needs backend 'nccl' (gloo is measured through torch: api 'torch')")
    cfg["api"] = api
    cfg["timer"] = args.get("timer", "host")
    if cfg["timer"] not in ("host", "events"):
        raise ProbeFailed(f"timer must be 'host' or 'events', got {cfg['timer']!r}")
    graph = args.get("graph", api == "torch")
    if not isinstance(graph, bool):
        raise ProbeFailed(f"graph must be true or false, got {graph!r}")
    cfg["graph"] = graph and backend == "nccl"
    env = args.get("env", {}) or {}
    if not isinstance(env, dict):
        raise ProbeFailed("env must be an object of NAME: value")
    cfg["env"] = {str(k): str(v) for k, v in env.items()}
    try:
        elsize = DTYPES[cfg["dtype"]][0]
        cfg["sizes"] = [s for s in sweep_sizes(cfg["min_bytes"], cfg["max_bytes"], cfg["factor"])
                        if s >= elsize]
        pattern_params(cfg["world_size"], cfg["dtype"])
    except ValueError as e:
        raise ProbeFailed(str(e)) from None
    if not cfg["sizes"]:
        raise ProbeFailed(f"no message size >= one {cfg['dtype']} element in {cfg['min_bytes']}..{cfg['max_bytes']}")
    if backend == "nccl" and n_gpus is not None and cfg["local_ranks"] > n_gpus:
        what = "ranks_per_node" if cfg["nnodes"] else "world_size"
        raise ProbeFailed(f"{what} {cfg['local_ranks']} > {n_gpus} visible GPU(s)")
    return cfg


MULTINODE_ARGS = ("nnodes", "node_rank", "ranks_per_node", "master_addr", "marker", "host", "hosts", "stall_s")


def _multinode_config(args: dict, cfg: dict, n_gpus) -> None:
    """Fill ``cfg`` for multi-node mode (see the module docstring); ProbeFailed on a bad argument."""
    if "world_size" in args:
        raise ProbeFailed("multi-node: give ranks_per_node, not world_size (world = nnodes * ranks_per_node)")
    nn = _int_arg(args, "nnodes", None)
    nr = _int_arg(args, "node_rank", None, lo=0)
    if nr >= nn:
        raise ProbeFailed(f"node_rank {nr} must be < nnodes {nn}")
    rpn = _int_arg(args, "ranks_per_node", n_gpus if cfg["backend"] == "nccl" else 1)
    for key in ("master_addr", "master_port"):
        if args.get(key) in (None, ""):
            raise ProbeFailed(f"multi-node: argument {key!r} is required")
    hosts = args.get("hosts") or [f"node{i}" for i in range(nn)]
    if not isinstance(hosts, list) or len(hosts) != nn or len(set(map(str, hosts))) != nn:
        raise ProbeFailed(f"hosts must list {nn} distinct names in node order, got {hosts!r}")
    stall = args.get("stall_s")
    cfg.update(nnodes=nn, node_rank=nr, ranks_per_node=rpn, local_ranks=rpn, world_size=nn * rpn,
               master_addr=str(args["master_addr"]), marker=str(args.get("marker") or ""),
               hosts=[str(h) for h in hosts], host=str(args.get("host") or hosts[nr]),
               stall_s=None if stall is None else _int_arg(args, "stall_s", None))


def worker_env(base: dict, extra: dict, notes: list, gloo_ifname: str = "lo") -> dict:
    """The workers' environment: ``base`` (the probe's own), NCCL INFO logging on, ``extra`` on top except for
    :data:`PROTECTED_ENV` names, which only ``base`` decides (kept as found, or left unset); ``NCCL_DEBUG_FILE``
    removed; ``GLOO_SOCKET_IFNAME`` defaults to ``gloo_ifname``."""
    env = dict(base)
    env["NCCL_DEBUG"] = "INFO"
    env["NCCL_DEBUG_SUBSYS"] = "INIT,GRAPH,ENV,TUNING"
    if env.pop("NCCL_DEBUG_FILE", None) is not None:
        notes.append("NCCL_DEBUG_FILE ignored: the probe reads NCCL's lines from the workers' output")
    for k, v in extra.items():
        if k in PROTECTED_ENV:
            found = f"kept {k}={base[k]} from the environment" if k in base else "left unset as found"
            notes.append(f"env {k}={v} ignored: {found} (only the environment sets it)")
            continue
        env[k] = v
    env["PYTHONUNBUFFERED"] = "1"
    # one node: the ranks meet on 127.0.0.1, so gloo (the CPU side-channel) uses loopback unless told otherwise;
    # multi-node: the interface toward the master (see local_interface)
    if gloo_ifname:
        env.setdefault("GLOO_SOCKET_IFNAME", gloo_ifname)
    return env


def _spawn(cfg: dict, port: int, tmp: str, attempt: int, env: dict) -> list[Worker]:
    """Start this host's ranks (workers of this same file, ``--worker '<spec>'``); on any error kill those
    already started and re-raise."""
    workers: list[Worker] = []
    n = cfg["world_size"]
    multi = cfg["nnodes"] is not None
    first = cfg["node_rank"] * cfg["ranks_per_node"] if multi else 0
    try:
        for local in range(cfg["local_ranks"]):
            rank = first + local
            spec = {k: cfg[k] for k in ("backend", "world_size", "sizes", "iters", "reps", "warmup", "dtype",
                                        "timeout_s", "graph", "graph_max_bytes", "oop", "api", "timer")}
            base = os.path.join(tmp, f"a{attempt}-rank{rank}")
            spec.update(rank=rank, local_rank=local, parent_pid=os.getpid(), phase_path=base + ".phase",
                        result_path=_result_path(tmp, attempt), writes_result=local == 0 if multi else rank == 0)
            if multi:
                spec.update({k: cfg[k] for k in ("nnodes", "node_rank", "ranks_per_node", "host", "hosts",
                                                 "marker")}, heartbeat=True)
            wenv = dict(env, MASTER_ADDR=cfg["master_addr"] if multi else "127.0.0.1", MASTER_PORT=str(port),
                        RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(local),
                        LOCAL_WORLD_SIZE=str(cfg["local_ranks"]))
            argv = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
            workers.append(Worker.start(rank, local, argv, wenv, base))
    except BaseException:
        kill_all(workers)
        raise
    return workers


def _result_path(tmp: str, attempt: int) -> str:
    return os.path.join(tmp, f"a{attempt}-result.json")


def _attempt(cfg: dict, port: int, tmp: str, attempt: int, env: dict, deadline: float):
    """One rendezvous attempt through the shared sequence (``_supervisor.run_ranks``): this host's ranks
    started, supervised, reported, killed, their output and result read."""
    return run_ranks(lambda: _spawn(cfg, port, tmp, attempt, env), deadline, cfg.get("stall_s"),
                     _result_path(tmp, attempt))


def _lingering_note(out, notes: list) -> None:
    if out.outcome == "ok" and out.which:
        notes.append(f"ranks {[w.rank for w in out.which]} did not exit after finishing; killed")


def main(args: dict) -> dict:
    cfg = _config(args)
    with terminate_on_signals():
        if cfg["nnodes"] is not None:
            return _main_multinode(cfg)
        return _main_single(cfg)


def _main_single(cfg: dict) -> dict:
    """One node: rendezvous on 127.0.0.1, a taken port retried on a fresh one; any failure is ProbeFailed."""
    notes: list[str] = []
    env = worker_env(dict(os.environ), cfg["env"], notes)
    t0 = time.monotonic()
    deadline = t0 + cfg["deadline_s"]
    # the GPUs' other users while the ranks (this probe's children) run (_conditions.py); gloo loads no GPU
    watch = Watch(None if cfg["backend"] == "nccl" else []).start()
    try:
        doc = _run_single(cfg, notes, env, t0, deadline)
    finally:
        watch.stop()
    doc["conditions"] = watch.result()
    return doc


def _run_single(cfg: dict, notes: list[str], env: dict, t0: float, deadline: float) -> dict:
    """The rendezvous attempts of :func:`_main_single`; its document."""
    with tempfile.TemporaryDirectory(prefix="gpuaccept-allreduce-") as tmp:
        port = cfg["master_port"] or free_port()
        for attempt in range(1, RENDEZVOUS_ATTEMPTS + 1):
            log(f"nccl_allreduce: {cfg['backend']} x{cfg['world_size']} rendezvous 127.0.0.1:{port} "
                f"(attempt {attempt})")
            out = _attempt(cfg, port, tmp, attempt, env, deadline)
            if out.outcome == "addr_in_use":
                log(f"nccl_allreduce: port {port} in use ({time.monotonic() - t0:.1f}s); retrying")
                notes.append(f"rendezvous port {port} in use; retried on another")
                if attempt == RENDEZVOUS_ATTEMPTS:
                    raise ProbeFailed(f"rendezvous failed: port in use on {RENDEZVOUS_ATTEMPTS} attempts")
                port = free_port()
                continue
            if out.outcome == "aborted":
                raise ProbeFailed(f"probe terminated by {out.signal}; killed all ranks")
            if out.outcome == "hung":
                hung = {w.rank for w in out.which}
                raise ProbeFailed(hang_message([r for r in out.reports if r["rank"] in hung], cfg["deadline_s"]))
            if out.outcome != "ok":
                raise ProbeFailed("; also ".join(w.describe_exit() for w in out.which))
            _lingering_note(out, notes)
            if out.result is None:
                raise ProbeFailed(f"rank 0 finished without a result ({out.result_error}): "
                                  f"{last_line(out.texts[0])}")
            return _document(cfg, out.result, out.texts, notes, port, attempt)
    raise AssertionError("unreachable")


def _main_multinode(cfg: dict) -> dict:
    """One host's share of a multi-node all-reduce: spawn the local ranks, supervise them, and report a
    document whatever happens (see the module docstring, "Multi-node mode")."""
    notes: list[str] = []
    local_addr, ifname = local_interface(cfg["master_addr"])
    if "GLOO_SOCKET_IFNAME" not in os.environ and "GLOO_SOCKET_IFNAME" not in cfg["env"] and not ifname:
        notes.append(f"no interface found toward {cfg['master_addr']}: gloo picks its own (hostname)")
    env = worker_env(dict(os.environ), cfg["env"], notes, gloo_ifname=ifname or "")
    cfg["gloo_ifname"] = ifname or ""
    deadline = time.monotonic() + cfg["deadline_s"]
    port = cfg["master_port"]
    where = {"node_rank": cfg["node_rank"], "nnodes": cfg["nnodes"], "ranks_per_node": cfg["ranks_per_node"],
             "host": cfg["host"], "hosts": cfg["hosts"], "hostname": socket.gethostname(),
             "local_address": local_addr, "local_interface": ifname, "gloo_ifname": env.get("GLOO_SOCKET_IFNAME"),
             "master_addr": cfg["master_addr"], "master_port": port, "marker": cfg["marker"],
             "backend": cfg["backend"], "world_size": cfg["world_size"]}
    with tempfile.TemporaryDirectory(prefix="gpuaccept-allreduce-") as tmp:
        log(f"nccl_allreduce: node {cfg['node_rank']}/{cfg['nnodes']} ({cfg['host']}) "
            f"{cfg['backend']} ranks {cfg['node_rank'] * cfg['ranks_per_node']}.."
            f"{(cfg['node_rank'] + 1) * cfg['ranks_per_node'] - 1} of {cfg['world_size']}, "
            f"rendezvous {cfg['master_addr']}:{port}")
        out = _attempt(cfg, port, tmp, 1, env, deadline)
        if out.outcome == "ok":
            _lingering_note(out, notes)
            if out.result is None:
                return _failure_doc(where, "failed", f"local rank 0 finished without a result "
                                    f"({out.result_error}): {last_line(out.texts[0])}", [], out.workers,
                                    out.texts, notes)
            doc = _document(cfg, out.result, out.texts, notes, port, 1)
            doc.update(where, ok=True, outcome="ok", local_ranks=[w.rank for w in out.workers],
                       world=out.result.get("world"))
            return doc
        if out.outcome == "aborted":
            notes.append(f"probe terminated by {out.signal or 'a signal'} (the controller aborted the collective); "
                         f"killed all ranks")
        return _failure_doc(where, out.outcome, _failure_message(out.outcome, out.which, out.reports, cfg),
                            out.reports, out.workers, out.texts, notes)


def _failure_message(outcome: str, which: list[Worker], ranks: list[dict], cfg: dict) -> str:
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


def _failure_doc(where: dict, outcome: str, msg: str, ranks: list[dict], workers, texts, notes) -> dict:
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


def _document(cfg: dict, res: dict, texts: list[str], notes: list, port: int, attempts: int) -> dict:
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


# ---------------------------------------------------------------------------------------------------------
# worker: one rank
# ---------------------------------------------------------------------------------------------------------

def _worker(spec: dict) -> None:
    phase = Phase(spec["phase_path"])
    rank, n = spec["rank"], spec["world_size"]
    phase("importing torch")
    import datetime

    import torch
    import torch.distributed as dist

    nccl = spec["backend"] == "nccl"
    dtype_name = spec["dtype"]
    dtype = getattr(torch, dtype_name)
    elsize = DTYPES[dtype_name][0]
    notes: list[str] = []
    lib = None
    stream_h = 0
    local_rank = spec.get("local_rank", rank)
    if nccl:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        torch.zeros(1, device=device)  # CUDA context up before NCCL
        if spec["api"] == "nccl":
            phase("loading libnccl")
            lib = pick_nccl_library(notes)
            if lib is not None:
                # a stream of our own, as nccl-tests; current for every torch op too, so fills and checks are
                # ordered with the NCCL calls
                stream = torch.cuda.Stream(device)
                torch.cuda.set_stream(stream)
                stream_h = stream.cuda_stream
    else:
        device = torch.device("cpu")
    api = "nccl" if lib is not None else "torch"
    # api nccl: torch.distributed only carries the rendezvous and the small CPU figures (gloo); NCCL is ours
    pg_backend = "gloo" if api == "nccl" else spec["backend"]
    ctl = torch.device("cpu") if api == "nccl" else device

    phase("rendezvous / init_process_group")
    kw = {"device_id": device} if pg_backend == "nccl" else {}
    try:
        dist.init_process_group(pg_backend, init_method="env://", rank=rank, world_size=n,
                                timeout=datetime.timedelta(seconds=spec["timeout_s"]), **kw)
    except Exception as e:
        if is_addr_in_use(str(e)):
            log(f"rank {rank}: rendezvous port in use: {str(e).splitlines()[0]}")
            exit_now(EXIT_ADDR_IN_USE)
        raise
    world = None
    if "nnodes" in spec:  # multi-node: the world that formed must be the one expected
        phase("checking the world")
        me = {"rank": rank, "node_rank": spec["node_rank"], "host": spec["host"],
              "hostname": socket.gethostname(), "marker": spec["marker"]}
        world = all_gather_json(me, dist, torch)
        problems = world_problems(world, spec["hosts"], spec["ranks_per_node"], spec["marker"], n)
        if dist.get_world_size() != n:
            problems.insert(0, f"get_world_size() is {dist.get_world_size()}, expected {n}")
        if problems:
            log(f"split world: {'; '.join(problems)}")
            exit_now(EXIT_SPLIT_WORLD)
        names = Counter(w["hostname"] for w in world[::spec["ranks_per_node"]])
        shared = sorted(h for h, c in names.items() if c > 1)
        if shared:
            notes.append(f"several hosts report one hostname ({', '.join(shared)}): one kernel, several "
                         f"inventory names (a test rig or containers?)")

    def sync():
        if nccl:
            torch.cuda.synchronize()

    def reduce_scalar(value: float, op, kind=torch.float64):
        t = torch.tensor([value], dtype=kind, device=ctl)
        dist.all_reduce(t, op=op)
        return t.item()

    def per_rank(value: float) -> list[float]:
        """Every rank's ``value``, in rank order."""
        t = torch.zeros(n, dtype=torch.float64, device=ctl)
        t[rank] = value
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.tolist()

    if lib is not None:
        phase("ncclGetUniqueId / broadcast")
        msg = torch.zeros(1 + NCCL_UNIQUE_ID_BYTES, dtype=torch.uint8)
        if rank == 0:
            try:
                uid = lib.unique_id_bytes()
                msg[1:] = torch.tensor(list(uid), dtype=torch.uint8)
                msg[0] = 1
            except NcclError as e:
                log(f"rank 0: {e}")
        dist.broadcast(msg, src=0)
        if int(msg[0]) != 1:
            raise RuntimeError("ncclGetUniqueId failed on rank 0")
        phase("ncclCommInitRank")
        lib.init_rank(n, bytes(msg[1:].tolist()), rank)

    # sizes that fit: two buffers of the largest plus ~1.5 GiB for NCCL, graphs and check temporaries
    sizes = list(spec["sizes"])
    if nccl:
        free_b, _ = torch.cuda.mem_get_info(device)
        fit = int(reduce_scalar(max(0, (free_b - 3 * GiB // 2) // 2), dist.ReduceOp.MIN, torch.int64))
        dropped = [s for s in sizes if s > fit]
        sizes = [s for s in sizes if s <= fit]
        if dropped:
            notes.append(f"sizes {dropped} skipped: two buffers do not fit in free GPU memory "
                         f"(largest that fits: {fit} B)")
        if not sizes:
            raise RuntimeError(f"no message size fits in free GPU memory ({free_b} B free on GPU {rank})")

    def padded(count):
        return -(-count // n) * n

    buf_elems = max(padded(s // elsize) for s in sizes)
    phase(f"allocating 2 x {buf_elems * elsize} B")
    send = torch.zeros(buf_elems, dtype=dtype, device=device)
    recv = torch.zeros(buf_elems, dtype=dtype, device=device)
    tiny = torch.zeros(1, dtype=torch.float32, device=device)

    def make_op(mode: str, count: int):
        pc = padded(count)
        steps = max(1, buf_elems // pc)
        if lib is not None:  # ncclAllReduce itself, as nccl-tests: in place send == recv, else send != recv
            ndt = nccl_dtype_enum(dtype_name)
            rb = recv.data_ptr()
            sb = rb if mode == "ip" else send.data_ptr()
            comm, ar, step_b = lib.comm, lib.all_reduce, pc * elsize

            def op(i, stream=None):
                off = (i % steps) * step_b
                rc = ar(sb + off, rb + off, count, ndt, NCCL_SUM, comm, stream_h if stream is None else stream)
                if rc != 0:
                    raise lib.error(rc, f"ncclAllReduce({count} x {dtype_name})")
        elif mode == "ip":
            def op(i, stream=None):
                off = (i % steps) * pc
                dist.all_reduce(recv[off:off + count])
        elif spec["oop"] == "rs_ag":
            shard = pc // n

            def op(i, stream=None):
                off = (i % steps) * pc
                out = recv[off:off + pc]
                mine = out[rank * shard:(rank + 1) * shard]
                dist.reduce_scatter_tensor(mine, send[off:off + pc])
                dist.all_gather_into_tensor(out, mine)
        else:
            def op(i, stream=None):
                off = (i % steps) * pc
                out = recv[off:off + count]
                out.copy_(send[off:off + count])
                dist.all_reduce(out)
        return op

    sleep = getattr(torch.cuda, "_sleep", None)
    host_timer = spec.get("timer", "host") == "host"

    def timed(fn) -> tuple[float, float | None]:
        """``(seconds, CUDA-event seconds or None)`` taken by ``fn`` on this rank, started with the ranks lined
        up. api nccl (nccl-tests BenchTime): one aligning all-reduce, stream synchronised, then the host clock
        (``timer`` host, the default, what nccl-tests reports) or CUDA events around the launches and the wait
        for the stream (polled, as nccl-tests' testStreamSynchronize)."""
        if lib is not None:
            sync()
            lib.all_reduce_checked(tiny.data_ptr(), tiny.data_ptr(), 1, NCCL_DTYPE["float32"], stream_h)
            sync()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            t = time.perf_counter()
            fn()
            end.record()
            while not end.query():
                pass
            host = time.perf_counter() - t
            ev = start.elapsed_time(end) / 1e3
            return (host if host_timer else ev), ev
        if nccl:
            sync()
            dist.all_reduce(tiny)  # the GPUs leave this together...
            if sleep is not None:
                sleep(200_000)  # ...then spin ~0.1 ms while this host queues the timed work
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3, None
        dist.barrier()
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t, None

    use_graph = spec["graph"]
    iters, warmup, reps = spec["iters"], spec["warmup"], spec.get("reps", 1)

    def measure(mode: str, count: int, nbytes: int):
        op = make_op(mode, count)
        for i in range(warmup):
            op(i)
        sync()
        graphed = False
        if use_graph and nbytes <= spec["graph_max_bytes"]:
            g = torch.cuda.CUDAGraph()
            ok = 1
            try:
                with torch.cuda.graph(g, capture_error_mode="thread_local"):
                    cap = torch.cuda.current_stream().cuda_stream  # the capturing stream
                    for i in range(iters):
                        op(i, cap)
            except Exception as e:  # noqa: BLE001 - reported, and every rank falls back together
                ok = 0
                log(f"rank {rank}: CUDA graph capture failed at {nbytes} B: {e}")
            if int(reduce_scalar(ok, dist.ReduceOp.MIN)) == 1:
                g.replay()
                sync()
                sec, ev = timed(g.replay)
                graphed = True
            else:
                notes.append(f"CUDA graph capture failed at {nbytes} B {mode}; timed without graphs")
            del g
        if not graphed:
            def loop():
                for i in range(iters):
                    op(i)
            # the median of ``reps`` timed loops: one loop of 20 small collectives lasts ~0.5 ms, where a
            # single scheduling hiccup moves the figure by 10% (nccl-tests itself swings that much run to run)
            samples = sorted((timed(loop) for _ in range(reps)), key=lambda se: se[0])
            sec, ev = samples[len(samples) // 2]
        times = per_rank(sec / iters)
        # api nccl: the ranks' average, as nccl-tests' default -a 1; api torch: the slowest rank (-a 3)
        per_op = sum(times) / n if lib is not None else max(times)
        ev_op = sum(per_rank(ev / iters)) / n if ev is not None else None
        # correctness (nccl-tests CheckData): fresh inputs, one more collective at offset 0, compare
        src = recv if mode == "ip" else send
        fill_pattern(src[:count], rank, n, dtype_name)
        if mode == "oop":
            recv[:padded(count)].fill_(-1)  # -1 is never an expected sum
            src[count:padded(count)].zero_()
        sync()
        dist.barrier()
        op(0)
        sync()
        wrong = int(reduce_scalar(count_wrong(recv[:count], n, dtype_name), dist.ReduceOp.SUM, torch.int64))
        send.zero_()  # timing data of the next size: zeros (no overflow to inf over repeated in-place sums)
        recv.zero_()
        return per_op, wrong, graphed, [round(t * 1e6, 3) for t in times], ev_op

    rows = []
    for nbytes in sizes:
        count = nbytes // elsize
        nbytes = count * elsize
        phase(f"{nbytes} B out-of-place")
        oop_s, oop_wrong, g1, oop_rt, oop_ev = measure("oop", count, nbytes)
        phase(f"{nbytes} B in-place")
        ip_s, ip_wrong, g2, ip_rt, ip_ev = measure("ip", count, nbytes)
        row = {"bytes": nbytes, "count": count, "oop_s": oop_s, "ip_s": ip_s, "oop_wrong": oop_wrong,
               "ip_wrong": ip_wrong, "graph": g1 and g2, "oop_rank_time_us": oop_rt, "ip_rank_time_us": ip_rt}
        if oop_ev is not None:
            row["oop_event_time_us"], row["ip_event_time_us"] = round(oop_ev * 1e6, 3), round(ip_ev * 1e6, 3)
        rows.append(row)
        if rank == 0:
            log(f"rank 0: {nbytes:>12} B  oop {oop_s * 1e6:10.2f} us  ip {ip_s * 1e6:10.2f} us  "
                f"#wrong {oop_wrong}/{ip_wrong}{'  (graph)' if g1 and g2 else ''}")

    if spec.get("writes_result", rank == 0):
        nccl_version = None
        if lib is not None:
            nccl_version = lib.version
            timing = (("host clock around iters ncclAllReduce launches and the stream's completion"
                       if host_timer else "CUDA events around iters ncclAllReduce calls")
                      + (" in one CUDA graph (nccl-tests -G)" if use_graph else "")
                      + ", after an aligning ncclAllReduce (nccl-tests BenchTime); average over ranks (-a 1)")
        else:
            if nccl:
                v = torch.cuda.nccl.version()
                nccl_version = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            timing = ("CUDA events around iters collectives" + (" in one CUDA graph" if use_graph else "")
                      if nccl else "time.perf_counter around iters collectives") + "; max over ranks"
        res = {"rows": rows, "torch_version": torch.__version__, "nccl_version": nccl_version,
               "timing": timing, "notes": notes, "api": api,
               "nccl_library": lib.path if lib is not None else None, "world": world}
        tmp = spec["result_path"] + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f)
        os.replace(tmp, spec["result_path"])
    phase("done")
    if lib is not None:
        sync()
        lib.destroy()
    dist.destroy_process_group()




if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker_main(json.loads(sys.argv[2]), _worker)
    else:
        run(main)
