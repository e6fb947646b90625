"""A host the controller could not reach, judged with what earlier runs saw of it (pure).

A host unreachable once is a blip until shown otherwise: the network, the host's load, the controller's own load
(cause kind ``unreachable``: rerun). The same host unreachable in the run before this one too (the nightly run,
or the ``--limit`` rerun its list asked for) is no blip: kind ``unreachable_again``, whose action is
check-network (its link, switch port, power: gpuaccept/data/actions.yaml). The earlier runs' count comes from the
history database (gpuaccept.reporting.history.earlier.unreachable_runs); without a history a host stays
``unreachable``.
"""
from __future__ import annotations

import datetime
from typing import Callable

from gpuaccept.causes import Cause

#: the kind of a host unreachable in this run and in the runs just before it
AGAIN = "unreachable_again"
#: earlier runs in a row, up to the newest, that could not reach the host either, for this run's to be "again":
#: one (the action's reason said since 2026-12-01 "a host unreachable again needs a look at its network or power")
AGAIN_AFTER_RUNS = 1


def again(cause: Cause, runs: Callable[[str], tuple[int, float | None]]) -> Cause:
    """``cause`` as kind :data:`AGAIN` when it is a host's ``unreachable`` and ``runs(host)`` (asked for such a
    cause only: ``(n, since)``, the number of runs in a row up to the newest that could not reach the host either
    and the earliest one's start in Unix s) gives at least :data:`AGAIN_AFTER_RUNS`, with evidence ``runs`` (n + 1,
    this run counted) and ``since`` (a UTC date and time ``2026-12-05 02:00 UTC``); any other cause, or too few
    runs: ``cause`` itself."""
    if cause.kind != "unreachable" or not cause.host:
        return cause
    earlier, since = runs(cause.host)
    if earlier < AGAIN_AFTER_RUNS:
        return cause
    when = datetime.datetime.fromtimestamp(since, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC") \
        if since is not None else "?"
    return Cause(cause.cls, AGAIN, cause.host, cause.check, cause.gpu,
                 {**cause.evidence, "runs": earlier + 1, "since": when})
