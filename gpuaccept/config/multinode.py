"""Group vars of the inter-node all-reduce, parsed and validated once (pure: no node is touched).

:func:`multinode_settings` takes one host's merged vars (Ansible merges group vars into each host's; the
suite reads the first selected host's) and returns a :class:`GroupSettings`, or raises
:class:`~gpuaccept.errors.ConfigError` naming the var, so a typo can stop the run at configure time (exit 4)
as a threshold typo does. What only the hosts can tell (do they have GPUs, how many) is settled later by
:meth:`GroupSettings.resolve` from counts the caller gathered.

========================================  ===============================================================
``nccl_internode_busbw_gbps``             min busbw, GB/s (a Ring figure: the collectives run with
                                          NCCL_ALGO=Ring); none: figures recorded, not judged (pairwise
                                          and rails then compare with the round's median instead)
``nccl_internode_at_bytes``               message size judged, bytes; default the largest size measured
``nccl_expect_transport``                 e.g. ``IB`` or ``NET/IB/GDRDMA``: every host's network channels
                                          (NCCL_DEBUG=INFO) must use it, whatever the bandwidth
``nccl_pairwise_slow_pct``                pairwise/rails without a limit: fails below this % of the median
                                          (default 70, :data:`gpuaccept.judging.multinode.DEFAULT_SLOW_PCT`)
``nccl_pairwise_seed``                    seed of the random pairs (default random, always recorded)
``nccl_pairwise_rounds``                  rounds at most (default 4)
``nccl_ranks_per_node``                   ranks per host; default every GPU (nccl, gpus_per_node or NVML)
                                          or 1 (gloo)
``nccl_backend``                          ``nccl`` or ``gloo``; default nccl when every host has a GPU,
                                          gloo (CPU tensors) when none has
``nccl_internode_probe_args``             probe arguments: min_bytes, max_bytes, factor, iters, warmup,
                                          dtype (default 1 MiB..4 GiB x4 for nccl, 64 KiB..4 MiB for gloo)
``nccl_round_timeout_s``                  wall-clock limit of one collective, s (default --probe-timeout)
``nccl_stall_s``                          a rank without heartbeat for this long stalls its host (default 60)
``nccl_master_addr``                      rendezvous address of the first host (default its ansible_host;
                                          IPv4 or IPv6)
``nccl_socket_ifname``, ``nccl_ib_hca``   (host vars) exact interface / HCA names, comma-separated or a list
                                          (``mlx5_0:1`` names a port, ``^`` excludes); passed to NCCL in its
                                          ``=`` exact form and judged against the devices NCCL used
========================================  ===============================================================
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpuaccept.errors import ConfigError

#: seconds added to the probe's own deadline for the SSH call (start-up, shipping, the probe's kill grace)
CALL_MARGIN_S = 30.0
#: a pair (pairwise) or rail below this percentage of the round's median busbw fails, when no limit is set;
#: the suite's own choice, changeable per inventory with the group var nccl_pairwise_slow_pct. The faults it
#: is for halve a link: a NIC trained at half its rate or PCIe width, a rail through a half-speed port, so a
#: pair through it reads about 50% of its peers; 70% fails those with margin, while a pair within 30% of the
#: median passes (it was 20%: a host at half speed passed)
DEFAULT_SLOW_PCT = 70.0
#: rounds of the pairwise pattern at most (the first random, the others re-pairing suspects)
DEFAULT_PAIRWISE_ROUNDS = 4


@dataclass
class Settings:
    """How to run one collective: ``args`` (probe arguments shared by every host: backend, sizes, iters...),
    ``ranks_per_node``, ``deadline_s`` (the probe's wall-clock limit, also its collective watchdog),
    ``stall_s`` (a rank without heartbeat this long, not running, stalls its host), ``env`` (extra
    variables for every host, on top of each host's :func:`nccl_environment`)."""

    args: dict
    ranks_per_node: int
    deadline_s: int
    stall_s: int | None = 60
    env: dict = field(default_factory=dict)

    def call_timeout(self) -> float:
        return self.deadline_s + CALL_MARGIN_S


def parse_device_list(value) -> tuple[bool, list[tuple[str, int | None]]]:
    """An inventory device list (``"mlx5_0,mlx5_3:1"``, ``["eth0"]``, ``"^=docker0"``) as ``(exclude,
    [(name, port or None)])``. A leading ``^`` excludes; a leading ``=`` (exact names, NCCL's form) is
    accepted and dropped: gpuaccept always passes exact names. Raises ValueError on an empty name or a
    port that is not a number."""
    if isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
        text = ",".join(items)
    else:
        text = str(value).strip()
    exclude = text.startswith("^")
    text = text.lstrip("^").lstrip("=")
    out = []
    for part in text.split(","):
        part = part.strip().lstrip("=")
        name, _, port = part.partition(":")
        if not name:
            raise ValueError(f"empty device name in {value!r}")
        if port and not port.isdigit():
            raise ValueError(f"port of {part!r} must be a number in {value!r}")
        out.append((name, int(port) if port else None))
    return exclude, out

MiB = 1 << 20
#: probe arguments an inventory may set through nccl_internode_probe_args (the rest belong to the launcher)
PROBE_ARG_KEYS = {"backend", "min_bytes", "max_bytes", "factor", "iters", "warmup", "reps", "dtype", "timeout_s", "api",
                  "timer", "graph", "graph_max_bytes", "oop"}


@dataclass(frozen=True)
class GroupSettings:
    """The group vars above, typed. ``backend`` and ``ranks_per_node`` None: decided from the hosts
    (:meth:`resolve`). ``limit_gbps`` None: recorded, not judged."""

    backend: str | None = None
    ranks_per_node: int | None = None
    gpus_per_node: int | None = None
    limit_gbps: float | None = None
    at_bytes: int | None = None
    expect_transport: str | None = None
    slow_pct: float = DEFAULT_SLOW_PCT
    seed: int | None = None
    rounds: int = DEFAULT_PAIRWISE_ROUNDS
    probe_args: dict = field(default_factory=dict)
    round_timeout_s: int | None = None
    stall_s: int | None = 60
    master_addr: str | None = None

    def needs_gpu_counts(self) -> bool:
        """Whether :meth:`resolve` needs each host's GPU count (backend or ranks per node not given)."""
        return self.backend is None or (self.backend == "nccl" and self.ranks_per_node is None
                                        and self.gpus_per_node is None)

    def resolve(self, gpu_counts: dict[str, int | None], probe_timeout: float) -> tuple[Settings, list[str]]:
        """``(how to run each collective, notes)`` from these vars and ``gpu_counts`` ({host: GPUs NVML
        lists, 0 without NVML, None unknown}; may be empty when :meth:`needs_gpu_counts` is False).
        Raises ConfigError when GPU hosts and hosts without GPUs are mixed, or GPU counts differ."""
        notes: list[str] = []
        backend = self.backend
        known = {h: c for h, c in gpu_counts.items() if c is not None}
        if backend is None:
            with_gpu = sorted(h for h, c in known.items() if c)
            if with_gpu and len(with_gpu) < len(known):
                raise ConfigError("hosts without a GPU among GPU hosts: "
                                  + ", ".join(h for h in known if not known[h]))
            backend = "nccl" if with_gpu else "gloo"
            if backend == "gloo":
                notes.append("no GPU on the hosts: gloo all-reduce of CPU tensors (not NCCL's figures)")
        rpn = self.ranks_per_node
        if rpn is None and backend == "nccl":
            rpn = self.gpus_per_node
            if rpn is None:
                distinct = {c for c in gpu_counts.values() if c}
                if len(distinct) > 1:
                    from collections import Counter

                    common, n = Counter(c for c in gpu_counts.values() if c).most_common(1)[0]
                    odd = [f"{h} ({c})" for h, c in gpu_counts.items() if c and c != common]
                    lead = (f"{', '.join(odd)} {'differs' if len(odd) == 1 else 'differ'} from the {n} hosts with "
                            f"{common} GPUs; " if n > len(odd) else "")
                    raise ConfigError(f"hosts carry different GPU counts: {lead}"
                                      + ", ".join(f"{h}: {c}" for h, c in gpu_counts.items()))
                rpn = distinct.pop() if distinct else 1
        at = self.at_bytes
        default_max = 4 << 30 if backend == "nccl" else 4 * MiB
        args = {"backend": backend, "min_bytes": MiB if backend == "nccl" else 64 << 10,
                "max_bytes": max(at, default_max) if at else default_max, "factor": 4, **self.probe_args}
        timeout = self.round_timeout_s or max(30, int(probe_timeout))
        if self.expect_transport and backend != "nccl":
            notes.append(f"nccl_expect_transport {self.expect_transport} not checked: backend gloo has no NCCL "
                         f"channels")
        return Settings(args, rpn or 1, deadline_s=timeout, stall_s=self.stall_s), notes


def _num(vars_: dict, key: str, kind=float, default=None, lo: float | None = None):
    """``vars_[key]`` as ``kind`` (default when absent or null); ConfigError naming the var otherwise."""
    v = vars_.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool):
        raise ConfigError(f"group var {key} must be a number, got {v!r}")
    try:
        out = kind(v)
    except (TypeError, ValueError):
        raise ConfigError(f"group var {key} must be a number, got {v!r}") from None
    if kind is int and isinstance(v, float) and v != out:
        raise ConfigError(f"group var {key} must be a whole number, got {v!r}")
    if lo is not None and out < lo:
        raise ConfigError(f"group var {key} must be >= {lo:g}, got {v!r}")
    return out


def multinode_settings(host_vars: dict) -> GroupSettings:
    """The inter-node all-reduce vars of one host's merged vars, validated (pure). Raises ConfigError with one
    line naming the var: a number that is not one, a backend other than nccl/gloo, probe arguments that are
    not a mapping of known keys, a slow percentage outside 0..100, a malformed ``nccl_socket_ifname`` or
    ``nccl_ib_hca`` list."""
    v = host_vars or {}
    backend = v.get("nccl_backend")
    if backend not in (None, "nccl", "gloo"):
        raise ConfigError(f"group var nccl_backend must be nccl or gloo, got {backend!r}")
    extra = v.get("nccl_internode_probe_args") or {}
    if not isinstance(extra, dict):
        raise ConfigError("group var nccl_internode_probe_args must be a mapping of probe arguments")
    unknown = sorted(set(extra) - PROBE_ARG_KEYS)
    if unknown:
        raise ConfigError(f"group var nccl_internode_probe_args: unknown argument(s) {', '.join(map(str, unknown))} "
                          f"(known: {', '.join(sorted(PROBE_ARG_KEYS))})")
    slow = _num(v, "nccl_pairwise_slow_pct", default=DEFAULT_SLOW_PCT, lo=0)
    if slow > 100:
        raise ConfigError(f"group var nccl_pairwise_slow_pct must be within 0..100, got {slow:g}")
    for var in ("nccl_socket_ifname", "nccl_ib_hca"):
        if v.get(var):
            try:
                parse_device_list(v[var])
            except ValueError as e:
                raise ConfigError(f"host var {var}: {e}") from None
    expect = v.get("nccl_expect_transport")
    master = v.get("nccl_master_addr")
    return GroupSettings(
        backend=backend, ranks_per_node=_num(v, "nccl_ranks_per_node", int, lo=1),
        gpus_per_node=_num(v, "gpus_per_node", int, lo=0), limit_gbps=_num(v, "nccl_internode_busbw_gbps", lo=0),
        at_bytes=_num(v, "nccl_internode_at_bytes", int, lo=1),
        expect_transport=None if expect in (None, "") else str(expect), slow_pct=slow,
        seed=_num(v, "nccl_pairwise_seed", int),
        rounds=_num(v, "nccl_pairwise_rounds", int, DEFAULT_PAIRWISE_ROUNDS, lo=1), probe_args=dict(extra),
        round_timeout_s=_num(v, "nccl_round_timeout_s", int, lo=1), stall_s=_num(v, "nccl_stall_s", int, 60, lo=1),
        master_addr=None if master in (None, "") else str(master))
