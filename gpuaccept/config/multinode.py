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

from gpuaccept.config.hostvars import PROBE_ARG_KEYS, parse_device_list, parse_vars  # noqa: F401 (names of this layer)
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


MiB = 1 << 20

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


#: the vars :func:`multinode_settings` reads; validated by gpuaccept.config.hostvars (one validator per var), the
#: device lists (``nccl_socket_ifname``, ``nccl_ib_hca``) as host vars, the others as group vars
GROUP_VARS = ("nccl_backend", "nccl_internode_probe_args", "nccl_pairwise_slow_pct", "nccl_ranks_per_node",
              "gpus_per_node", "nccl_internode_busbw_gbps", "nccl_internode_at_bytes", "nccl_expect_transport",
              "nccl_pairwise_seed", "nccl_pairwise_rounds", "nccl_round_timeout_s", "nccl_stall_s", "nccl_master_addr")
HOST_VARS = ("nccl_socket_ifname", "nccl_ib_hca")


def multinode_settings(host_vars: dict) -> GroupSettings:
    """The inter-node all-reduce vars of one host's merged vars, validated (pure) by their validators in
    gpuaccept.config.hostvars, the ones the run's check before any node is touched uses. Raises ConfigError
    with one line naming the var: a number that is not one, a backend other than nccl/gloo, probe arguments that
    are not a mapping of known keys, a slow percentage outside 0..100, a malformed ``nccl_socket_ifname`` or
    ``nccl_ib_hca`` list."""
    v = host_vars or {}
    got = parse_vars(v, GROUP_VARS, lambda var: f"group var {var}")
    parse_vars(v, [var for var in HOST_VARS if v.get(var)], lambda var: f"host var {var}")
    return GroupSettings(
        backend=got.get("nccl_backend"), ranks_per_node=got.get("nccl_ranks_per_node"),
        gpus_per_node=got.get("gpus_per_node"), limit_gbps=got.get("nccl_internode_busbw_gbps"),
        at_bytes=got.get("nccl_internode_at_bytes"), expect_transport=got.get("nccl_expect_transport"),
        slow_pct=got.get("nccl_pairwise_slow_pct", DEFAULT_SLOW_PCT), seed=got.get("nccl_pairwise_seed"),
        rounds=got.get("nccl_pairwise_rounds", DEFAULT_PAIRWISE_ROUNDS),
        probe_args=dict(got.get("nccl_internode_probe_args") or {}), round_timeout_s=got.get("nccl_round_timeout_s"),
        stall_s=got.get("nccl_stall_s", 60), master_addr=got.get("nccl_master_addr"))
