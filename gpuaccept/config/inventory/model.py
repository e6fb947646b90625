"""What an inventory loads into: :class:`Host` and :class:`Inventory`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from gpuaccept.config import patterns



@dataclass(frozen=True)
class Host:
    """One inventory host, with its connection settings resolved.

    ``vars`` holds every variable as Ansible merges them (left out of the hash, so hosts can go in sets);
    ``groups`` every group the host is in, transitively, ``all`` first, then in the order groups were
    defined; ``origins`` maps a variable to the ``file:line`` that set it (for error messages; not compared).
    ``become_user``: the user commands run as through ``sudo -n`` (``ansible_become``), None for the login user;
    ``known_hosts``: the extra known_hosts file the host vars name, or None; both read from ``vars`` once, by
    :mod:`gpuaccept.config.hostvars`, for the SSH transport (not compared: they follow from ``vars``).
    """

    name: str
    address: str
    port: int
    user: str | None
    key_file: str | None
    connection: str
    python: str
    vars: Mapping[str, Any] = field(hash=False)
    groups: tuple[str, ...]
    origins: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False, repr=False)
    become_user: str | None = field(default=None, hash=False, compare=False, repr=False)
    known_hosts: str | None = field(default=None, hash=False, compare=False, repr=False)

    def where(self, var: str, default: str = "") -> str:
        """``file:line`` that set ``var`` for this host (``default`` when unknown)."""
        return self.origins.get(var, default)


@dataclass
class Inventory:
    """A loaded inventory.

    ``hosts`` is in order of first appearance in the file; ``groups`` maps every group (``all`` and
    ``ungrouped`` included, empty ones too) to its hosts, transitively, in Ansible's order.
    """

    path: str
    hosts: dict[str, Host]
    groups: dict[str, list[str]]
    text: str = ""  # the file's text as read (handed to xdist workers: the file is read once per run)

    def select(self, pattern: str | None, warnings: list[str] | None = None,
               files: dict[str, list[str]] | None = None) -> list[Host]:
        """Hosts picked by an Ansible ``--limit`` pattern, in Ansible's order.

        None, "" and "all" pick every host. Raises PatternError when the pattern is malformed, a plain term
        names nothing, or no host is left; an ``&``/``!`` term naming nothing appends a line to ``warnings``;
        ``files``: ``@FILE`` term -> the hosts that file lists (gpuaccept.config.patterns.select).
        """
        names = patterns.select(pattern, self.groups.get("all", []), self.groups, source=self.path,
                                warnings=warnings, files=files)
        return [self.hosts[n] for n in names]
