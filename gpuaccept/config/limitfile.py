"""``--limit @FILE``: a host list read from a file, as Ansible's ``--limit @retry_file``.

The file is what a run writes as ``failed-hosts.txt``: one host name per line; blank lines and lines starting
with ``#`` are ignored. Rerunning only what failed is then
``pytest --inventory X --limit @reports/latest/failed-hosts.txt``.
"""
from __future__ import annotations

import os
import re
import stat

from gpuaccept.errors import ConfigError
from gpuaccept.config.bounded import read_bounded
from gpuaccept.config.patterns import split_pattern
from gpuaccept.config.shown import shown, shown_path


class NothingToRerun(ConfigError):
    """``--limit @FILE`` names a host list that lists no host (a clean night's failed-hosts.txt): not bad input
    but nothing to do. The run ends at once with exit 5 (pytest's "no tests collected") and one line, so that
    a nightly "rerun failures" step tells it from a refusal (exit 4: a file that does not exist, a host not in
    the inventory)."""


def _lines(path: str) -> list[str]:
    """The lines of the host list file ``path``, read within the bounds of
    :func:`gpuaccept.config.bounded.read_bounded` (64 MiB, a line of 16 MiB: a fleet-wide comment names
    every selected host; 10 s for a pipe). Raises ConfigError (one line naming the file and the bound)."""
    data = read_bounded(path, "host list file", ConfigError)
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ConfigError(f"--limit @{shown_path(path)}:{line}: not a text file (not UTF-8 at byte {err.start})") \
            from None


def hosts_from_file(path: str, known: list[str]) -> list[str]:
    """Host names listed in ``path``, in the inventory's order (``known``).

    Raises ConfigError (one line naming file and line) when the file cannot be read or is past a bound
    (:func:`_lines`), lists a host that is not in the inventory (the line shown cut and escaped:
    :func:`gpuaccept.config.shown.shown`); :class:`NothingToRerun` when it lists none (an empty retry file
    selects nothing: nothing to rerun, exit 5).
    """
    try:
        lines = _lines(path)
    except ConfigError as err:
        raise ConfigError(f"--limit @{err}") from None
    known_set = set(known)
    wanted: set[str] = set()
    for n, line in enumerate(lines, start=1):
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        if name not in known_set:
            raise ConfigError(f"{shown_path(path)}:{n}: host {shown(name)} is not in the inventory")
        wanted.add(name)
    if not wanted:
        raise NothingToRerun(f"--limit @{shown_path(path)} lists no host: nothing to rerun")
    return [h for h in known if h in wanted]


#: the exit code of a run given ``--limit @FILE`` whose file lists no host (pytest's "no tests collected")
NOTHING_TO_RERUN_EXIT = 5


def nothing_to_rerun(limit: str | None) -> str | None:
    """The one line ending a run whose ``--limit`` is ``@FILE`` and whose file is readable and lists no host
    (``gpuaccept: --limit @failed-hosts.txt lists no host: nothing to rerun``), or None (no such limit, a host
    listed, or a file that cannot be read: refused later, exit 4). Only a regular file is read here: a pipe or
    device is read once, where it is refused (its bound is time)."""
    if not limit or not limit.startswith("@"):
        return None
    try:
        if not stat.S_ISREG(os.stat(limit[1:]).st_mode):
            return None
    except OSError:
        return None
    try:
        lines = _lines(limit[1:])
    except ConfigError:
        return None
    if any(line.strip() and not line.strip().startswith("#") for line in lines):
        return None
    return f"gpuaccept: --limit @{shown_path(limit[1:])} lists no host: nothing to rerun"


#: the comment a run's failed-hosts.txt carries for a fleet-wide test that did not pass (written by
#: gpuaccept.reporting.records.failed_hosts_text): "# fleet-wide <test> did not pass on: <host> <host> ..."
FLEET_COMMENT = re.compile(r"^#\s*fleet-wide\s+(\S+)\s+did not pass on:\s*(.*)$")


def fleet_tests(path: str) -> dict[str, list[str]]:
    """Fleet-wide tests a host list file says did not pass, with the hosts they ran on (their partners):
    ``{"test_allreduce_multinode": ["gpu-07", "gpu-08"]}``; ``{}`` when the file has none or cannot be read
    (:func:`hosts_from_file` reports that). A run's ``hosts-<action>.txt`` (plain host lists, for scripts) are
    read with the ``failed-hosts.txt`` beside them, which carries their run's fleet-wide lines."""
    try:
        lines = _lines(path)
        beside = os.path.join(os.path.dirname(path), "failed-hosts.txt")
        if os.path.basename(path).startswith("hosts-") and os.path.isfile(beside):
            lines = lines + _lines(beside)
    except ConfigError:
        return {}
    out: dict[str, list[str]] = {}
    for line in lines:
        m = FLEET_COMMENT.match(line.strip())
        if m:
            out.setdefault(m.group(1), []).extend(h for h in m.group(2).split() if h not in out.get(m.group(1), []))
    return out


def rerun_partners(limit: str | None, test: str, selected: list[str]) -> list[str] | None:
    """The hosts fleet-wide ``test`` ran on (its partners) when this run reruns a host list file (a ``--limit``
    term ``@FILE``) saying ``test`` did not pass there, and ``selected`` (the hosts of this run) lacks one of them:
    a comparison over those hosts that this rerun cannot repeat, whose pass here would say nothing. None
    otherwise."""
    for term in split_pattern(limit or ""):
        if term.startswith("@"):
            partners = fleet_tests(term[1:]).get(test)
            if partners and not set(partners) <= set(selected):
                return partners
    return None
