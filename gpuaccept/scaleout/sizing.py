"""How many hosts one controller takes, and what to do above that (docs/scale.md, "Fleet size").

:data:`CONTROLLER_MAX_HOSTS` is the count above which one pytest session is not the way: measured on a 2-core
controller: 1,000 replayed hosts held 385 MiB and took 43 s (benchmarks/controller_rss.py, 2026-12-02); at
10,000 hosts ``--collect-only`` alone took 50 s (pytest's own cost per test item is the floor, 2026-12-01) and
the end-of-run report write 12.4 s, 1.05x a plain json.dumps of the same records (benchmarks/report_scale.py,
2026-12-02). At 2,000 hosts a controller collects in about 10 s and holds about 1.1 GiB; above,
the fleet is split: every node of a Slurm allocation tests itself, or ``--shard I/K`` on K controllers, and
``python -m gpuaccept.scaleout.merge`` joins the folders.
"""
from __future__ import annotations

#: selected hosts above which the run should be sharded (see the module docstring for the measurements)
CONTROLLER_MAX_HOSTS = 2000


def advice(n_hosts: int, shard: str | None = None) -> str | None:
    """The line that sends the operator to shards when ``n_hosts`` (selected hosts of this controller) is over
    :data:`CONTROLLER_MAX_HOSTS`, else None; ``shard``: this run's ``--shard I/K`` (then the advice names a
    larger K)."""
    if n_hosts <= CONTROLLER_MAX_HOSTS:
        return None
    k = -(-n_hosts // CONTROLLER_MAX_HOSTS)
    now = f" (this is shard {shard})" if shard else ""
    return (f"gpuaccept: {n_hosts} hosts selected{now}, above the {CONTROLLER_MAX_HOSTS} one controller takes "
            f"(docs/scale.md): in a Slurm allocation run `python -m gpuaccept.scaleout.slurm` (every node tests "
            f"itself), else split the selection with `--shard I/{k}` on {k} controllers and join the folders with "
            f"`python -m gpuaccept.scaleout.merge`")
