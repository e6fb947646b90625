"""The all-reduce probe's arguments (node side, stdlib only), checked into one configuration, and the workers'
environment.

Shipped beside the probes and imported by ``nccl_allreduce.py``. Arguments (a JSON object, every key optional):

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
``deadline_s``      wall-clock limit of the whole probe, all ranks and rendezvous retries; default 600 s (the
                    controller sets it just inside its own limit: gpuaccept.runner.host.probe_deadline)
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
``oop``             api torch: how the out-of-place column is measured: ``"rs_ag"`` (default) or ``"copy"``
                    (see ``_allreduce_rank.py``; api nccl calls the true out-of-place ``ncclAllReduce``)
``env``             extra environment variables for the workers, e.g. ``{"NCCL_ALGO": "Ring"}``
==================  ===========================================================================================

Multi-node mode (``nnodes`` and ``node_rank`` given; driven by gpuaccept.runner.multinode):

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
``host``, ``hosts`` this host's inventory name and every host's, in node order: the world check
                    (``_nccl_world.py``)
``stall_s``         a local rank whose heartbeat (a thread touching a file every 0.5 s) is older than this and
                    whose process is not running (stopped, ``T``; uninterruptible, ``D``; sleeping with the
                    interpreter wedged) is stalled: this host's ranks are killed at once and the host is
                    blamed by its own evidence. Default: off (the deadline alone)
==================  ===========================================================================================

``{"check": "ready"}`` and ``{"check": "rendezvous", ...}`` do not come here: they are the checks before a
multi-node all-reduce (``_allreduce_rendezvous.py``).

Workers get ``MASTER_ADDR`` (127.0.0.1 on one node), ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``
(device = local rank), ``NCCL_DEBUG=INFO`` and ``NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV,TUNING`` (``env`` may override
these two), and otherwise the probe's own environment unchanged: the :data:`PROTECTED_ENV` variables are passed
through exactly as found, set or unset (an ``env`` argument naming one is ignored, with a note); the probe never
sets them. ``NCCL_DEBUG_FILE`` is removed: the probe reads NCCL's lines from each worker's output.
"""
from __future__ import annotations

import importlib.util
import sys

try:
    from _allreduce_figures import DTYPES, GiB, MiB, pattern_params, sweep_sizes
    from _probe import ProbeFailed
except ImportError:  # imported as gpuaccept.probes._allreduce_args (tests of the pure functions)
    from ._allreduce_figures import DTYPES, GiB, MiB, pattern_params, sweep_sizes
    from ._probe import ProbeFailed

#: environment variables the workers inherit exactly as found, never set by the probe (a box that needs
#: NCCL_NVLS_ENABLE=0 keeps it)
PROTECTED_ENV = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")


def _int_arg(args: dict, key: str, default, lo: int = 1) -> int:
    """``args[key]`` (else ``default``) as an integer >= ``lo``; ProbeFailed otherwise."""
    val = args.get(key, default)
    if isinstance(val, bool) or not isinstance(val, (int, float)) or int(val) != val or val < lo:
        raise ProbeFailed(f"argument {key!r} must be an integer >= {lo}, got {val!r}")
    return int(val)


def config(args: dict) -> dict:
    """The probe's configuration from its JSON ``args`` (see the module docstring): every argument checked, the
    defaults filled in, the sweep's sizes listed (``sizes``). Raises ProbeFailed naming a bad argument."""
    known = {"backend", "world_size", "min_bytes", "max_bytes", "factor", "iters", "warmup", "reps", "dtype",
             "timeout_s", "deadline_s", "master_port", "graph", "graph_max_bytes", "oop", "env", "api", "timer",
             *MULTINODE_ARGS}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ProbeFailed(f"unknown argument(s) {unknown}; known: {sorted(known)}")
    if importlib.util.find_spec("torch") is None:  # the ranks would each die of it, blamed as a sick host
        raise ProbeFailed(f"torch is not installed for {sys.executable} (set ansible_python_interpreter to the "
                          f"Python that has it)", missing_module="torch")
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


MULTINODE_ARGS = ("nnodes", "node_rank", "ranks_per_node", "master_addr", "marker", "host", "hosts", "stall_s",
                  "inventory_env")


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
    inv_env = args.get("inventory_env") or []  # the names of the variables the controller set from the inventory
    if not isinstance(inv_env, list) or not all(isinstance(v, str) for v in inv_env):
        raise ProbeFailed(f"inventory_env must list variable names, got {inv_env!r}")
    cfg["inventory_env"] = inv_env
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


#: the variables naming the interfaces the ranks' sockets use, and the backends that read each: gloo carries
#: every rank's rendezvous and CPU figures (always), NCCL its bootstrap and socket transport (backend nccl)
SOCKET_IFNAME_VARS = (("GLOO_SOCKET_IFNAME", ("gloo", "nccl")), ("NCCL_SOCKET_IFNAME", ("nccl",)))


def host_interfaces() -> list[str]:
    """This host's network interface names (``socket.if_nameindex()``: every interface, up or down), sorted;
    empty when the call is not available."""
    import socket
    try:
        return sorted(name for _, name in socket.if_nameindex())
    except (OSError, AttributeError):
        return []


def nccl_ifname_matches(value: str, names: list[str]) -> list[str]:
    """The interfaces of ``names`` that NCCL's ``NCCL_SOCKET_IFNAME=value`` selects: comma-separated prefixes,
    ``^`` first to exclude them, then ``=`` for exact names (NCCL user guide, "Environment Variables",
    NCCL_SOCKET_IFNAME, read 2026-12-06; ``parseStringList``/``matchIfList`` in NCCL's src/misc/socket.cc)."""
    v = str(value)
    exclude = v.startswith("^")
    v = v[1:] if exclude else v
    exact = v.startswith("=")
    v = v[1:] if exact else v
    prefixes = [p for p in v.split(",") if p]
    return [n for n in names if any((n == p) if exact else n.startswith(p) for p in prefixes) != exclude]


def socket_settings(env: dict, extra: dict, base: dict, backend: str, names: list[str] | None = None) -> list[dict]:
    """The socket-interface settings the ranks run with (``env``, from :func:`worker_env`), one dict per
    variable of :data:`SOCKET_IFNAME_VARS` that is set: ``variable``, ``value``, ``from`` ("inventory": the
    controller's ``extra``, or a name the controller said it set from the inventory (``inventory_env``); "node
    environment": the probe's own environment ``base``; "probe": the interface
    toward the rendezvous it chose), ``used`` (``backend`` reads it), ``listed`` (the names it gives, without
    NCCL's ``^``/``=``), ``missing`` (listed names no interface of this host has) and ``matched`` (the host's
    interfaces it selects: every listed one that exists for gloo, NCCL's prefix rule for NCCL:
    :func:`nccl_ifname_matches`). ``names``: the host's interfaces (default :func:`host_interfaces`)."""
    names = host_interfaces() if names is None else list(names)
    out = []
    for var, readers in SOCKET_IFNAME_VARS:
        value = env.get(var)
        if value is None:
            continue
        src = "inventory" if var in extra else ("node environment" if var in base else "probe")
        listed = [p for p in str(value).lstrip("^").lstrip("=").split(",") if p]
        if var == "NCCL_SOCKET_IFNAME":
            matched = nccl_ifname_matches(str(value), names)
            missing = [p for p in listed if not any(n.startswith(p) for n in names)]
        else:
            matched = [p for p in listed if p in names]
            missing = [p for p in listed if p not in names]
        out.append({"variable": var, "value": str(value), "from": src, "used": backend in readers,
                    "listed": listed, "missing": missing, "matched": matched})
    return out
