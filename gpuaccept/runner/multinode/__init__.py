"""Inter-node all-reduce on the controller: :mod:`.plan` (pure: results, culprits, figures, pairing),
:mod:`.launch` (I/O: launch one probe per host, abort, sweep, run the patterns) and :mod:`.settings` (the
group vars, parsed and validated without touching a node). Everything is re-exported here, so
``from gpuaccept import multinode as mn`` reaches all of it."""
from gpuaccept.runner.multinode.launch import (ABORT_GRACE_S, KILL_TIMEOUT_S, PORT_ATTEMPTS, RENDEZVOUS_CHECK_S, abort,
                     check_rendezvous, pairwise, pick_port, rails, readiness, ring, run_collective, run_concurrently,
                     sweep)
from gpuaccept.judging.multinode import (CALL_MARGIN_S, DEFAULT_PAIRWISE_ROUNDS, DEFAULT_SLOW_PCT, MARKER_PREFIX, PROBE, Collective,
                   HostResult, PairResult, PairwiseReport, RailResult, Settings, blame, busbw_at, describe_failure, disagreeing, failure_lines,
                   judge_figures, kill_command, master_address, nccl_environment, new_marker, next_pairs,
                   no_reference, pair_floor, pairwise_status, port_taken, random_pairs, rendezvous_cause,
                   rendezvous_failures, rendezvous_line, setup_ranks, setup_reason, transport_problem, pinned_env, unready,
                   world_failure)
from gpuaccept.config.multinode import GroupSettings, multinode_settings

__all__ = [
    "ABORT_GRACE_S", "KILL_TIMEOUT_S", "PORT_ATTEMPTS", "RENDEZVOUS_CHECK_S", "abort", "check_rendezvous",
    "pairwise", "pick_port", "rails", "readiness", "ring", "run_collective", "run_concurrently", "sweep", "CALL_MARGIN_S", "DEFAULT_PAIRWISE_ROUNDS", "DEFAULT_SLOW_PCT",
    "MARKER_PREFIX", "PROBE", "Collective", "HostResult", "PairResult", "PairwiseReport", "RailResult", "Settings",
    "blame", "busbw_at", "describe_failure", "disagreeing", "failure_lines", "judge_figures", "kill_command", "master_address", "nccl_environment",
    "new_marker", "next_pairs", "no_reference", "pair_floor", "pairwise_status", "random_pairs", "transport_problem", "pinned_env",
    "world_failure", "GroupSettings", "multinode_settings", "port_taken", "rendezvous_cause", "rendezvous_failures",
    "rendezvous_line", "setup_ranks", "setup_reason", "unready",
]
