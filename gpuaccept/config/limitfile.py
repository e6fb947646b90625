"""``--limit @FILE``: a host list read from a file, as Ansible's ``--limit @retry_file``.

The file is what a run writes as ``failed-hosts.txt``: one host name per line; blank lines and lines starting
with ``#`` are ignored. Rerunning only what failed is then
``pytest --inventory X --limit @reports/latest/failed-hosts.txt``.
"""
from __future__ import annotations

import re

from gpuaccept.errors import ConfigError


def hosts_from_file(path: str, known: list[str]) -> list[str]:
    """Host names listed in ``path``, in the inventory's order (``known``).

    Raises ConfigError (one line naming file and line) when the file cannot be read, lists a host that is
    not in the inventory, or lists none (an empty retry file selects nothing: nothing to rerun).
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ConfigError(f"--limit @{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--limit @{path}: not a text file") from None
    known_set = set(known)
    wanted: set[str] = set()
    for n, line in enumerate(lines, start=1):
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        if name not in known_set:
            raise ConfigError(f"{path}:{n}: host '{name}' is not in the inventory")
        wanted.add(name)
    if not wanted:
        raise ConfigError(f"--limit @{path}: the file lists no host (nothing to rerun)")
    return [h for h in known if h in wanted]


#: the comment a run's failed-hosts.txt carries for a fleet-wide test that did not pass (written by
#: gpuaccept.reporting.records.failed_hosts_text): "# fleet-wide <test> did not pass on: <host> <host> ..."
FLEET_COMMENT = re.compile(r"^#\s*fleet-wide\s+(\S+)\s+did not pass on:\s*(.*)$")


def fleet_tests(path: str) -> dict[str, list[str]]:
    """Fleet-wide tests a host list file says did not pass, with the hosts they ran on (their partners):
    ``{"test_allreduce_multinode": ["gpu-07", "gpu-08"]}``; ``{}`` when the file has none or cannot be read
    (:func:`hosts_from_file` reports that)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    out: dict[str, list[str]] = {}
    for line in lines:
        m = FLEET_COMMENT.match(line.strip())
        if m:
            out.setdefault(m.group(1), []).extend(h for h in m.group(2).split() if h not in out.get(m.group(1), []))
    return out
