"""From what the INI and YAML readers saw to resolved hosts: the group graph, Ansible's variable
precedence and each host's connection settings.

The readers call :class:`Builder` (groups, children, group vars, hosts with inline vars); :meth:`Builder.finish`
then resolves, in time linear in the inventory (hosts x groups they are in):

* every group without a parent becomes a child of ``all``; a cycle of children is refused;
* a group's hosts are its own, then its descendants' level by level (Ansible's order);
* variables, lowest first: every group's inline vars, every group's group_vars file, the host's inline vars,
  its host_vars file. Within each, ``all`` comes first, then the other groups by depth (longest path from
  ``all``), then ``ansible_group_priority``, then name; later wins. So ``group_vars/all.yml`` beats
  ``[gpu:vars]``, as in Ansible. Hosts in the same groups share one merge of their groups' vars.
"""
from __future__ import annotations

import ipaddress
import os
import re
import shlex
from collections import ChainMap
from dataclasses import dataclass, field
from typing import Any, Mapping

from gpuaccept.errors import ConfigError, InventoryError
from gpuaccept.config.addresses import BRACKET_PORT as _BRACKET_PORT, address_problem, user_problem
from gpuaccept.config.hostvars import become_user, known_hosts_file
from gpuaccept.config.hostranges import MAX_HOSTS, RANGE, bad_name_reason, expand_hostname, looks_like_range
from gpuaccept.config.sshconfig import inventory_options
from gpuaccept.config.yamlload import plain
from gpuaccept.config.inventory.model import Host, Inventory
from gpuaccept.config.inventory.varsfiles import VarsFiles
from gpuaccept.config.shown import shown

# Variables gpuaccept reads itself: none may hold a template.
CHECKED_VARS = (
    "ansible_host", "ansible_ssh_host", "ansible_port", "ansible_ssh_port",
    "ansible_user", "ansible_ssh_user", "ansible_ssh_private_key_file",
    "ansible_private_key_file", "ansible_connection", "ansible_python_interpreter",
    "gpu_sku", "gpus_per_node",
)
_CHECKED_SET = frozenset(CHECKED_VARS) | {"nccl_master_addr"}
# Address variables: a host range written there is kept literally by Ansible (and never connects)
ADDRESS_VARS = ("ansible_host", "ansible_ssh_host", "nccl_master_addr")
CONNECTIONS = {"ssh": "ssh", "smart": "ssh", "paramiko": "ssh", "paramiko_ssh": "ssh", "local": "local"}
#: the step budget of resolving group membership (Builder._budget): a base and a number per item of the file,
#: chosen so that 100,000 hosts in 1,000 racks under a few roles use under a tenth of it
RESOLVE_STEPS_BASE = 1_000_000
RESOLVE_STEPS_PER_ITEM = 20
#: groups nest at most this many levels below ``all`` (chosen: fleets nest a few levels: site, pod, rack, role)
MAX_NESTING = 100
_NAME_PORT = re.compile(r"^(.*):([0-9]+)$")  # ASCII digits: int() would read "２２" (fullwidth) as 22
_PORT_TEXT = re.compile(r"[0-9]{1,5}")  # a port written as text: ASCII digits only, as Ansible's int() of it


@dataclass
class _Group:
    name: str
    vars: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    host_set: set[str] = field(default_factory=set)
    children: list[str] = field(default_factory=list)
    child_set: set[str] = field(default_factory=set)
    parents: list[str] = field(default_factory=list)
    priority: int = 1
    where: str = ""  # file:line where the group first appears, named when resolving it is refused


def split_port(pattern: str, where: str) -> tuple[str, int | None]:
    """``name:2222`` -> (name, 2222); ``[2001:db8::1]:22`` -> (2001:db8::1, 22); a bare IPv6 address has
    no port. Raises InventoryError for anything else with a colon."""
    m = _BRACKET_PORT.match(pattern)
    if m:
        return m.group(1), _port(m.group(2), pattern, where)
    outside = RANGE.sub("", pattern)
    if ":" not in outside:
        return pattern, None
    try:
        ipaddress.IPv6Address(pattern)
        return pattern, None
    except ValueError:
        pass
    m = _NAME_PORT.match(pattern)
    if m and ":" not in RANGE.sub("", m.group(1)):
        return m.group(1), _port(m.group(2), pattern, where)
    raise InventoryError(f"{where}: bad host {shown(pattern)}: expected NAME, NAME:PORT, an IPv6 address or [IPV6]:PORT")


def _port(digits: str, pattern: str, where: str) -> int:
    port = int(digits) if len(digits) <= 5 else 0
    if not 0 < port < 65536:
        raise InventoryError(f"{where}: bad host {shown(pattern)}: port {digits} is not a TCP port")
    return port


def port_clash(pattern: str, port: int | None, hvars: dict[str, Any], where: str) -> None:
    """Refuse ``n1:2222`` written with another ``ansible_port`` (or ``ansible_ssh_port``) in the same entry:
    Ansible silently takes the variable, a reader of the line the port in the name. Raises InventoryError."""
    if port is None:
        return
    for var in ("ansible_port", "ansible_ssh_port"):
        if var in hvars and str(hvars[var]).strip() != str(port):
            raise InventoryError(f"{where}: host {shown(pattern)} names port {port} and sets {var}={shown(hvars[var])}; "
                                 "write the port once")


RESERVED_HOST = "fleet"
"""The host name the reports give the fleet-wide tests (summary.md, JUnit classnames, results.json, Prometheus);
an inventory host of that name would merge with them."""


def host_names(pattern: str, where: str) -> tuple[list[str], int | None]:
    """The host names a host entry stands for (ranges expanded) and its port, or InventoryError."""
    pattern = pattern.strip()
    if not pattern:
        raise InventoryError(f"{where}: empty host name")
    name, port = split_port(pattern, where)
    why = bad_name_reason(RANGE.sub("0", name))
    if why:
        raise InventoryError(f"{where}: bad host {shown(pattern)}: {why}")
    names = expand_hostname(name, where)
    if RESERVED_HOST in names:
        raise InventoryError(f"{where}: bad host {shown(pattern)}: {shown(RESERVED_HOST)} is reserved (the reports' name for the "
                             "fleet-wide tests, such as inter-node all-reduce); name the machine otherwise, with "
                             "ansible_host= for its address")
    return names, port


class Builder:
    """Collects groups, hosts and inline vars as the readers see them; :meth:`finish` resolves."""

    def __init__(self, path: str):
        self.path = path
        self.groups: dict[str, _Group] = {}
        self.hosts: dict[str, dict[str, Any]] = {}
        self.host_origins: dict[str, dict[str, str]] = {}
        self.host_where: dict[str, str] = {}
        self.group("all")
        self.group("ungrouped")
        self.add_child("all", "ungrouped", self.path)

    def group(self, name: str, where: str | None = None) -> _Group:
        """The group called ``name``, created on first use (``where``, ``file:line``, names a bad name)."""
        g = self.groups.get(name)
        if g is None:
            why = bad_name_reason(name, host=False)
            if why:
                raise InventoryError(f"{where or self.path}: bad group name {shown(name)}: {why.replace('host', 'group')}")
            g = self.groups[name] = _Group(name, where=where or self.path)
        return g

    def add_child(self, parent: str, child: str, where: str) -> None:
        if child == "all":
            raise InventoryError(f"{where}: group 'all' cannot be a child of {shown(parent)}")
        if child == parent:
            raise InventoryError(f"{where}: group {shown(child)} cannot be its own child")
        p, c = self.group(parent), self.group(child)
        if child not in p.child_set:
            p.child_set.add(child)
            p.children.append(child)
            c.parents.append(parent)

    def set_group_var(self, group: str, key: str, value: Any, where: str) -> None:
        g = self.group(group)
        if key == "ansible_group_priority":
            if isinstance(value, bool) or not isinstance(value, (int, str)) or \
                    not str(value).strip().lstrip("-").isdigit() or len(str(value).strip()) > 9:
                raise InventoryError(f"{where}: group {group} ansible_group_priority must be an integer, got {shown(value)}")
            g.priority = int(value)
            return
        g.vars[key] = plain(value)
        g.origins[key] = where

    def add_host(self, group: str, name: str, hvars: Mapping[str, Any], origins: Mapping[str, str],
                 where: str) -> None:
        known = self.hosts.get(name)
        if known is None:
            if len(self.hosts) >= MAX_HOSTS:
                raise InventoryError(f"{where}: more than {MAX_HOSTS:,} hosts (gpuaccept's limit per inventory)")
            self.hosts[name] = dict(hvars)
            self.host_origins[name] = dict(origins)
            self.host_where[name] = where
        elif hvars:
            known.update(hvars)
            self.host_origins[name].update(origins)
        g = self.group(group)
        if name not in g.host_set:
            g.host_set.add(name)
            g.hosts.append(name)

    # ---- resolution

    def finish(self) -> Inventory:
        """Resolve groups and vars into an :class:`Inventory`. Raises InventoryError (cycle, bad var)."""
        for name in self.groups.keys() & self.hosts.keys():
            raise InventoryError(f"{self.host_where[name]}: host {name} has the name of a group; rename one (Ansible "
                                 f"warns here, then applies the host's vars to every host of group {name})")
        self._reconcile_ungrouped()
        for name, g in self.groups.items():
            if name != "all" and not g.parents:
                self.add_child("all", name, self.path)
        depth = self._depths()
        budget = [self._budget()]
        members = {name: self._group_hosts(name, budget) for name in self.groups}
        host_groups: dict[str, list[str]] = {h: [] for h in self.hosts}
        for gname, hs in members.items():
            for h in hs:
                host_groups[h].append(gname)
        files = VarsFiles(os.path.dirname(os.path.abspath(self.path)))
        merged_groups: dict[tuple[str, ...], tuple[dict[str, Any], dict[str, str]]] = {}
        hosts: dict[str, Host] = {}
        for hname, in_groups in host_groups.items():
            key = tuple(in_groups)
            cached = merged_groups.get(key)
            if cached is None:
                ordered = ["all"] + sorted((g for g in in_groups if g != "all"),
                                           key=lambda g: (depth[g], self.groups[g].priority, g))
                gvars: dict[str, Any] = {}
                gorig: dict[str, str] = {}
                granks: dict[str, int] = {}  # alias var -> rank of the source that set it (higher wins)
                for level, gname in enumerate(ordered):
                    gvars.update(self.groups[gname].vars)
                    gorig.update(self.groups[gname].origins)
                    _rank(granks, self.groups[gname].vars, level)
                for level, gname in enumerate(ordered, len(ordered)):
                    fvars, forig = files.group(gname)
                    gvars.update(fvars)
                    gorig.update(forig)
                    _rank(granks, fvars, level)
                cached = merged_groups[key] = (gvars, gorig, granks)
            gvars, gorig, granks = cached
            fvars, forig = files.host(hname)
            merged = {**gvars, **self.hosts[hname], **fvars}
            origins = ChainMap(forig, self.host_origins[hname], gorig)
            ranks = granks
            if not _ALIAS_VARS.isdisjoint(self.hosts[hname]) or not _ALIAS_VARS.isdisjoint(fvars):
                ranks = dict(granks)  # the host's own vars, then its host_vars file, above every group level
                _rank(ranks, self.hosts[hname], 1_000_000)
                _rank(ranks, fvars, 1_000_001)
            hosts[hname] = make_host(self.host_where.get(hname, self.path), hname, merged, origins, key, ranks)
        check_addresses(self.path, hosts, self.host_where)
        return Inventory(path=self.path, hosts=hosts, groups=members)

    def _reconcile_ungrouped(self) -> None:
        real = dict.fromkeys(self.hosts, False)
        for name, g in self.groups.items():
            if name not in ("all", "ungrouped"):
                for h in g.hosts:
                    real[h] = True
        ung = self.groups["ungrouped"]
        ung.hosts = [h for h in ung.hosts if not real[h]]
        ung.host_set = set(ung.hosts)
        ung.hosts += [h for h in self.hosts if not real[h] and h not in ung.host_set]
        ung.host_set = set(ung.hosts)

    def _depths(self) -> dict[str, int]:
        """Longest path from ``all`` for every group (Kahn's order over the children graph); refuses a cycle."""
        waiting = {name: len(g.parents) for name, g in self.groups.items()}
        depth = dict.fromkeys(self.groups, 0)
        ready = [n for n, w in waiting.items() if w == 0]
        done = 0
        while ready:
            name = ready.pop()
            done += 1
            for c in self.groups[name].children:
                depth[c] = max(depth[c], depth[name] + 1)
                waiting[c] -= 1
                if waiting[c] == 0:
                    ready.append(c)
        if done < len(self.groups):
            raise InventoryError(f"{self.path}: groups form a cycle: {self._cycle(waiting)}")
        deepest = max(depth, key=depth.__getitem__)
        if depth[deepest] > MAX_NESTING:
            raise InventoryError(f"{self.groups[deepest].where}: group {deepest} is nested {depth[deepest]} levels "
                                 f"below all; gpuaccept reads at most {MAX_NESTING} (each group's hosts are found by "
                                 "walking its descendants: a deeper chain costs time quadratic in its length)")
        return depth

    def _cycle(self, waiting: dict[str, int]) -> str:
        """One cycle among the groups Kahn's order could not place, as ``a -> b -> a`` (parent to child)."""
        stuck = {n for n, w in waiting.items() if w > 0}
        cur = next(n for n in self.groups if n in stuck)
        trail: list[str] = []
        seen: dict[str, int] = {}
        while cur not in seen:  # every stuck group has a stuck parent: walk up until a group repeats
            seen[cur] = len(trail)
            trail.append(cur)
            cur = next(p for p in self.groups[cur].parents if p in stuck)
        loop = trail[seen[cur]:][::-1]
        return " -> ".join(loop + [loop[0]])

    def _budget(self) -> int:
        """Steps (a group or a host looked at) :meth:`_group_hosts` may take for the whole inventory: each group
        walks its descendants, so a chain of n nested groups costs n²/2 steps (a chain of 5,000 took 13 s).
        :data:`RESOLVE_STEPS_BASE` plus :data:`RESOLVE_STEPS_PER_ITEM` per group, child link and host entry
        of the file: linear in the inventory, and far above what a fleet's racks and roles take."""
        items = sum(1 + len(g.children) + len(g.hosts) for g in self.groups.values())
        return RESOLVE_STEPS_BASE + RESOLVE_STEPS_PER_ITEM * items

    def _group_hosts(self, name: str, budget: list[int]) -> list[str]:
        """The group's own hosts, then its descendants' level by level (Ansible's order). ``budget``: [steps
        left] for the whole inventory (:meth:`_budget`), spent here; raises InventoryError naming the group
        when it runs out."""
        g = self.groups[name]
        if not g.children:
            return list(g.hosts)
        out: list[str] = []
        seen: set[str] = set()
        seen_groups = {name}
        level = [name]
        while level:
            nxt: list[str] = []
            budget[0] -= len(level)
            if budget[0] < 0:
                raise InventoryError(f"{g.where}: group {name}: its children nest so deep or so wide that resolving "
                                     f"the inventory's groups takes more than {self._budget():,} steps (linear "
                                     "in the file's size); flatten the nesting (Ansible inventories seldom nest "
                                     "more than a few levels)")
            for gname in level:
                budget[0] -= len(self.groups[gname].hosts)
                for h in self.groups[gname].hosts:
                    if h not in seen:
                        seen.add(h)
                        out.append(h)
                for c in self.groups[gname].children:
                    if c not in seen_groups:
                        seen_groups.add(c)
                        nxt.append(c)
            level = nxt
        return out


#: connection vars Ansible reads under two names: (name, older ``ansible_ssh_*`` spelling that Ansible prefers)
ALIASES = (("ansible_host", "ansible_ssh_host"), ("ansible_port", "ansible_ssh_port"),
           ("ansible_user", "ansible_ssh_user"), ("ansible_private_key_file", "ansible_ssh_private_key_file"))
_ALIAS_VARS = frozenset(n for pair in ALIASES for n in pair)


def _rank(ranks: dict[str, int], source: Mapping[str, Any], rank: int) -> None:
    """Note that ``source`` (one level of Ansible's precedence, ``rank`` higher than the ones before) sets
    the alias vars it holds."""
    for k in _ALIAS_VARS.intersection(source):
        ranks[k] = rank


def _first(v: dict[str, Any], key: str, older: str, name: str, origins: Mapping[str, str], path: str,
           ranks: Mapping[str, int] | None) -> tuple[str, Any]:
    """The value Ansible connects with for a connection var written ``key`` or ``older``, as (name, value).

    Ansible reads both spellings and takes the older ``ansible_ssh_*`` one whenever it is set, whatever the
    precedence level of each (``MAGIC_VARIABLE_MAPPING`` in ansible-core's constants.py, first name found
    wins; the ssh connection plugin's option vars, last name listed wins; checked with ``ansible -vvv``,
    ansible-core 2.19). gpuaccept takes the same. When ``key`` is set to another value at a higher or equal
    precedence level (``ranks``: a host's own ``ansible_host`` against ``ansible_ssh_host`` in
    ``[gpu:vars]``), the file says one machine and Ansible connects to the other: refused (InventoryError
    naming both ``file:line``)."""
    value, other = v.get(key), v.get(older)
    if other is None:
        return key, value
    if value is not None and str(value).strip() != str(other).strip() and \
            (ranks or {}).get(key, 0) >= (ranks or {}).get(older, 0):
        raise InventoryError(
            f"{origins.get(key, path)}: host {name} sets {key}={shown(value)}, but also {older}={shown(other)} (at "
            f"{origins.get(older, path)}), which Ansible uses instead whatever the precedence: set only one of them")
    return older, other


def make_host(path: str, name: str, v: dict[str, Any], origins: Mapping[str, str], groups: tuple[str, ...],
              ranks: Mapping[str, int] | None = None) -> Host:
    """A :class:`Host` from its merged vars (``path``: where the host is defined, ``file:line``, the place named
    for what no var's origin names). Raises InventoryError naming ``file:line`` and the host for a
    templated or invalid connection var, for a name that cannot be the address it stands for (no ansible_host), for a host range written in an address var, and for a var whose two
    spellings disagree against precedence (``ranks``: alias var -> precedence level that set it; see
    :func:`_first`)."""
    for key in _CHECKED_SET.intersection(v):
        value = v[key]
        if not isinstance(value, str):
            continue
        if "{{" in value or "{%" in value:
            raise InventoryError(f"{origins.get(key, path)}: host {name} var {key} holds a Jinja template "
                                 f"({shown(value)}); gpuaccept does not render templates")
        if key in ADDRESS_VARS and "[" in value and looks_like_range(value):
            raise InventoryError(f"{origins.get(key, path)}: host {name} var {key} holds a host range ({shown(value)}); "
                                 "only host names expand ranges (Ansible would try to connect to that text): "
                                 "list each host")
    conn_raw = v.get("ansible_connection") or "ssh"
    connection = CONNECTIONS.get(conn_raw) if isinstance(conn_raw, str) else None
    if connection is None:
        raise InventoryError(f"{origins.get('ansible_connection', path)}: host {name} ansible_connection "
                             f"{shown(conn_raw)} is not supported (ssh, smart, paramiko or local)")
    port_key, port_raw = _first(v, "ansible_port", "ansible_ssh_port", name, origins, path, ranks)
    if port_raw is None:
        port = 22
    elif type(port_raw) is int:
        port = port_raw
    elif isinstance(port_raw, str) and _PORT_TEXT.fullmatch(port_raw.strip()):
        port = int(port_raw)
    else:
        raise InventoryError(f"{origins.get(port_key, path)}: host {name} {port_key} must be an integer in ASCII digits, "
                             f"got {shown(port_raw)}")
    if not 0 < port < 65536:
        raise InventoryError(f"{origins.get(port_key, path)}: host {name} {port_key} {port} is not a TCP port")
    addr_key, address = _first(v, "ansible_host", "ansible_ssh_host", name, origins, path, ranks)
    user_key, user = _first(v, "ansible_user", "ansible_ssh_user", name, origins, path, ranks)
    key_key, key_file = _first(v, "ansible_private_key_file", "ansible_ssh_private_key_file", name, origins, path,
                               ranks)
    python = v.get("ansible_python_interpreter")
    for k, val in ((addr_key, address), (user_key, user), (key_key, key_file),
                   ("ansible_python_interpreter", python)):
        if val is not None and type(val) not in (str, int, float):
            raise InventoryError(f"{origins.get(k, path)}: host {name} var {k} must be text, "
                                 f"got {type(val).__name__} {shown(val)}")
    if address is not None:
        why = address_problem(str(address))
        if why:
            raise InventoryError(f"{origins.get(addr_key, path)}: host {name} {addr_key} {shown(str(address))}: {why}")
    elif connection != "local":  # the name itself is given to ssh as the address (or ~/.ssh/config's Host)
        why = address_problem(name)
        if why:
            raise InventoryError(f"{path}: host {shown(name)} has no ansible_host, so its name is the address to "
                                 f"connect to, and it cannot be one ({why}): set ansible_host")
    why = user_problem(str(user)) if user is not None else None
    if why:
        raise InventoryError(f"{origins.get(user_key, path)}: host {name} {user_key} {shown(str(user))}: {why}")
    if python is None or str(python).startswith("auto"):
        python = "python3"
    else:
        try:  # its words, as the shell and gpuaccept.transport.shell.interpreter_words split them
            words = shlex.split(str(python))
        except ValueError as e:
            raise InventoryError(f"{origins.get('ansible_python_interpreter', path)}: host {name} var "
                                 f"ansible_python_interpreter {shown(str(python))}: {e}") from None
        if not words:
            raise InventoryError(f"{origins.get('ansible_python_interpreter', path)}: host {name} var "
                                 f"ansible_python_interpreter is empty")
    return Host(
        name=name,
        address=str(address) if address is not None else name,
        port=port,
        user=str(user) if user is not None else None,
        key_file=os.path.expanduser(str(key_file)) if key_file is not None else None,
        connection=connection,
        python=str(python),
        vars=v,
        groups=groups,
        origins=origins,
        become_user=become_user(v),
        known_hosts=known_hosts_file(v),
    )


def _canonical(address: str) -> str:
    """An address as compared for "the same machine twice": an IP in its canonical form (``2001:0db8::0001``
    and ``2001:db8::1`` are one address), a name lower-cased."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address.lower()


def _target(h: Host) -> tuple[str, int]:
    """The address and port ``h`` is reached at as the inventory says it, without ~/.ssh/config (no file read at
    load): the first ``hostname`` and ``port`` of gpuaccept.config.sshconfig.inventory_options (its own
    ansible_host and ansible_port, then its ssh arguments), else its name and port; arguments that cannot be
    split are left to the transport, which names them."""
    given: dict[str, str] = {}
    try:
        for key, value in inventory_options(h):
            given.setdefault(key, value)  # ssh's rule: the first value of an option wins
    except ConfigError:
        pass
    port = given.get("port", "")
    return given.get("hostname", h.address), int(port) if port.isdigit() else h.port


def check_addresses(path: str, hosts: dict[str, Host], where: Mapping[str, str] | None = None) -> None:
    """Refuse two ssh hosts at one address and port (the same machine listed twice: :func:`_target`), naming
    where the second is defined (``where``: host -> ``file:line``; else ``path``) and the first."""
    where = where or {}
    seen: dict[tuple[str, int], str] = {}
    for h in hosts.values():
        if h.connection == "local":
            continue
        address, port = _target(h)
        key = (_canonical(address), port)
        if key in seen:
            first = seen[key]
            at = f" (at {where[first]})" if first in where else ""
            shown_at = f"[{address}]" if ":" in address else address  # IPv6 as ssh and Ansible write it
            raise InventoryError(f"{where.get(h.name, path)}: hosts {first}{at} and {h.name} both resolve to "
                                 f"{shown_at}:{port}; list each machine once")
        seen[key] = h.name
