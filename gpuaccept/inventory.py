"""Ansible inventories (INI and YAML) read into hosts, the way ansible-inventory reads them.

What is supported, checked against ``ansible-inventory --list`` by the tests:

* INI: ``[g]``, ``[g:children]``, ``[g:vars]``, hosts before any section
  (``ungrouped``), ``[all]``/``[all:vars]``, inline ``k=v`` host vars
  (shell-quoted; values read as Python literals when they are one, else
  kept as text), ``host:port``, comments (``#``, ``;``);
* YAML (also ``.json``): ``all: {hosts, vars, children}`` and top-level groups;
* host ranges in both: ``gpu[001:128]`` (zero-padded), ``node[a:f]``, ``n[1:10:2]``;
* ``group_vars/`` and ``host_vars/`` beside the inventory file: the first of
  ``NAME``, ``NAME.yml``, ``NAME.yaml``, ``NAME.json`` that exists; a
  directory is read file by file in sorted order;
* Ansible's variable precedence, lowest first: every group's inline vars,
  every group's group_vars file, the host's inline vars, its host_vars file.
  Within each, ``all`` comes first, then the other groups by depth (longest
  path from ``all``), then ``ansible_group_priority``, then name; later wins.
  So ``group_vars/all.yml`` beats ``[gpu:vars]``, as in Ansible.

Stricter than Ansible (it warns or silently does something odd; we refuse):
unknown keys in a YAML group, ranges whose begin is past their end, Jinja
templates in the connection variables, two hosts at one address:port.
"""

from __future__ import annotations

import ast
import ipaddress
import os
import re
import shlex
import string
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

from . import patterns
from .errors import InventoryError

__all__ = ["Host", "Inventory", "load_inventory"]

# Variables gpuaccept reads itself: none may hold a template.
_CHECKED_VARS = (
    "ansible_host", "ansible_ssh_host", "ansible_port", "ansible_ssh_port",
    "ansible_user", "ansible_ssh_user", "ansible_ssh_private_key_file",
    "ansible_private_key_file", "ansible_connection", "ansible_python_interpreter",
    "gpu_sku", "gpus_per_node",
)
_CONNECTIONS = {"ssh": "ssh", "smart": "ssh", "paramiko": "ssh", "paramiko_ssh": "ssh", "local": "local"}
_VARS_EXTS = ("", ".yml", ".yaml", ".json")
_SECTION = re.compile(r"^\[(?P<name>[^\[\]:\s]+)(?::(?P<kind>[^\[\]\s]+))?\]\s*(?:[#;].*)?$")
_RANGE = re.compile(r"\[([^\[\]]*)\]")


@dataclass(frozen=True)
class Host:
    """One inventory host, with its connection settings resolved.

    ``vars`` holds every variable as Ansible merges them (left out of the
    hash, so hosts can go in sets); ``groups`` every group the host is in,
    transitively, ``all`` first, then in the order groups were defined.
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


@dataclass
class Inventory:
    """A loaded inventory.

    ``hosts`` is in order of first appearance in the file; ``groups`` maps
    every group (``all`` and ``ungrouped`` included, empty ones too) to its
    hosts, transitively, in Ansible's order.
    """

    path: str
    hosts: dict[str, Host]
    groups: dict[str, list[str]]

    def select(self, pattern: str | None) -> list[Host]:
        """Hosts picked by an Ansible ``--limit`` pattern, in Ansible's order.

        None, "" and "all" pick every host. Raises PatternError when the
        pattern is malformed, a term names nothing, or no host is left.
        """
        names = patterns.select(pattern, self.groups.get("all", []), self.groups, source=self.path)
        return [self.hosts[n] for n in names]


def load_inventory(path: str) -> Inventory:
    """Read an INI or YAML inventory file, and the group_vars/host_vars beside it.

    ``.yml``/``.yaml``/``.json`` files are YAML; a file without extension is
    YAML when it parses as a YAML mapping, else INI; any other file is INI.

    Raises:
        InventoryError: the file is missing, unreadable or malformed, a vars
            file is, a variable gpuaccept uses is invalid or templated, or two
            hosts share an address and port. ``str(err)`` is one line naming
            ``file:line`` when the line is known.
    """
    text = _read(path)
    ext = os.path.splitext(path)[1].lower()
    b = _Builder(path)
    if ext in (".yml", ".yaml", ".json"):
        _parse_yaml(b, _load_yaml(path, text))
    elif ext == "":
        try:
            doc = yaml.load(text, Loader=_Loader)
        except (yaml.YAMLError, InventoryError):
            doc = None
        if isinstance(doc, dict):
            _parse_yaml(b, doc)
        else:
            _parse_ini(b, text)
    else:
        _parse_ini(b, text)
    return b.finish()


# ---------------------------------------------------------------- reading


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise InventoryError(f"{path}: no such inventory file") from None
    except IsADirectoryError:
        raise InventoryError(f"{path}: is a directory; give an inventory file") from None
    except UnicodeDecodeError as err:
        raise InventoryError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise InventoryError(f"{path}: cannot read: {err.strerror or err}") from None


def _one_line(s: str) -> str:
    return " ".join(str(s).split())


class _Map(dict):
    """A YAML mapping that remembers the line of each of its keys."""

    def __init__(self) -> None:
        super().__init__()
        self.line = 0
        self.lines: dict[Any, int] = {}


class _Loader(yaml.SafeLoader):
    """SafeLoader keeping dates as text (as ansible-inventory prints them) and line numbers."""


_Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    m = _Map()
    m.line = node.start_mark.line + 1
    for knode, vnode in node.value:
        key = loader.construct_object(knode, deep=True)
        try:
            hash(key)
        except TypeError:
            raise InventoryError(f"{loader.name}:{knode.start_mark.line + 1}: a mapping key must be a plain value") from None
        m[key] = loader.construct_object(vnode, deep=True)
        m.lines[key] = knode.start_mark.line + 1
    return m


def _construct_unsafe(loader: _Loader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return _construct_map(loader, node)


def _construct_vault(loader: _Loader, node: yaml.Node) -> Any:
    raise InventoryError(f"{loader.name}:{node.start_mark.line + 1}: !vault values are not supported; gpuaccept does not decrypt")


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("!unsafe", _construct_unsafe)
_Loader.add_constructor("!vault", _construct_vault)


def _load_yaml(path: str, text: str) -> Any:
    if text.startswith("$ANSIBLE_VAULT"):
        raise InventoryError(f"{path}:1: vault-encrypted file; gpuaccept does not decrypt")
    loader = _Loader(text)
    loader.name = path
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise InventoryError(f"{path}{line}: YAML syntax error: {_one_line(err.problem or err.context or err)}") from None
    except yaml.YAMLError as err:
        raise InventoryError(f"{path}: YAML error: {_one_line(err)}") from None
    finally:
        loader.dispose()


def _plain(value: Any) -> Any:
    """Copy a loaded value with plain dicts in place of _Map."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# ---------------------------------------------------------------- host names


def expand_hostname(pattern: str, where: str) -> list[str]:
    """Expand every ``[begin:end[:step]]`` range of a host name, leftmost outermost.

    ``gpu[001:003]`` -> gpu001, gpu002, gpu003; ``n[a:c]`` -> na, nb, nc;
    ``n[1:7:3]`` -> n1, n4, n7. ``where`` (``file:line``) prefixes errors.
    Raises InventoryError on a malformed range.
    """
    m = _RANGE.search(pattern)
    if not m:
        if "[" in pattern or "]" in pattern:
            raise InventoryError(f"{where}: bad host range in {pattern!r}: unbalanced brackets")
        return [pattern]
    head, tail = pattern[: m.start()], pattern[m.end():]
    rest = expand_hostname(tail, where)
    return [head + v + r for v in _range_values(m.group(1), pattern, where) for r in rest]


def _range_values(spec: str, pattern: str, where: str) -> list[str]:
    def bad(why: str) -> InventoryError:
        return InventoryError(f"{where}: bad host range [{spec}] in {pattern!r}: {why}")

    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise bad("expected [begin:end] or [begin:end:step]")
    beg, end = parts[0].strip(), parts[1].strip()
    step_s = parts[2].strip() if len(parts) == 3 else "1"
    if not step_s.isdigit() or int(step_s) == 0:
        raise bad("step must be a positive integer")
    step = int(step_s)
    if not end:
        raise bad("no end value")
    beg = beg or "0"
    letters = string.ascii_letters
    if len(beg) == 1 and len(end) == 1 and beg in letters and end in letters:
        i, j = letters.index(beg), letters.index(end)
        if i > j:
            raise bad("begin is after end")
        return list(letters[i : j + 1 : step])
    if not (beg.isdigit() and end.isdigit()):
        raise bad("begin and end must both be numbers or both single letters")
    if int(beg) > int(end):
        raise bad("begin is after end")
    width = len(beg) if beg.startswith("0") and len(beg) > 1 else 0
    if width and len(end) != width:
        raise bad("zero-padded begin and end must have the same length")
    return [str(n).zfill(width) for n in range(int(beg), int(end) + 1, step)]


def _split_port(pattern: str, where: str) -> tuple[str, int | None]:
    """``name:2222`` -> (name, 2222); ``[fe80::1]:22``; a bare IPv6 address has no port."""
    m = re.match(r"^\[([0-9A-Fa-f:.]+)\]:(\d+)$", pattern)
    if m:
        return m.group(1), int(m.group(2))
    outside = _RANGE.sub("", pattern)
    if ":" not in outside:
        return pattern, None
    try:
        ipaddress.IPv6Address(pattern)
        return pattern, None
    except ValueError:
        pass
    m = re.match(r"^(.*):(\d+)$", pattern)
    if m and ":" not in _RANGE.sub("", m.group(1)):
        return m.group(1), int(m.group(2))
    raise InventoryError(f"{where}: bad host {pattern!r}: expected NAME, NAME:PORT, an IPv6 address or [IPV6]:PORT")


def _host_names(pattern: str, where: str) -> tuple[list[str], int | None]:
    if not pattern.strip():
        raise InventoryError(f"{where}: empty host name")
    name, port = _split_port(pattern.strip(), where)
    return expand_hostname(name, where), port


# ---------------------------------------------------------------- building


@dataclass
class _Group:
    name: str
    vars: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    priority: int = 1


class _Builder:
    """Collects groups, hosts and inline vars as the parsers read them, then resolves."""

    def __init__(self, path: str):
        self.path = path
        self.groups: dict[str, _Group] = {}
        self.hosts: dict[str, dict[str, Any]] = {}
        self.host_origins: dict[str, dict[str, str]] = {}
        self.group("all")
        self.group("ungrouped")
        self.add_child("all", "ungrouped", self.path)

    def group(self, name: str) -> _Group:
        if name not in self.groups:
            self.groups[name] = _Group(name)
        return self.groups[name]

    def add_child(self, parent: str, child: str, where: str) -> None:
        if child == "all":
            raise InventoryError(f"{where}: group 'all' cannot be a child of {parent!r}")
        if child == parent:
            raise InventoryError(f"{where}: group {child!r} cannot be its own child")
        p, c = self.group(parent), self.group(child)
        if child not in p.children:
            p.children.append(child)
            c.parents.append(parent)

    def set_group_var(self, group: str, key: str, value: Any, where: str) -> None:
        g = self.group(group)
        if key == "ansible_group_priority":
            if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().lstrip("-").isdigit():
                raise InventoryError(f"{where}: group {group} ansible_group_priority must be an integer, got {value!r}")
            g.priority = int(value)
            return
        g.vars[key] = value
        g.origins[key] = where

    def add_host(self, group: str, name: str, hvars: Mapping[str, Any], origins: Mapping[str, str]) -> None:
        self.hosts.setdefault(name, {}).update(hvars)
        self.host_origins.setdefault(name, {}).update(origins)
        g = self.group(group)
        if name not in g.hosts:
            g.hosts.append(name)

    # ---- resolution

    def finish(self) -> Inventory:
        self._check_cycles()
        self._reconcile_ungrouped()
        for name, g in self.groups.items():
            if name != "all" and not g.parents:
                self.add_child("all", name, self.path)
        depth = self._depths()
        members = {name: self._group_hosts(name) for name in self.groups}
        files = _VarsFiles(os.path.dirname(os.path.abspath(self.path)))
        hosts: dict[str, Host] = {}
        for hname in self.hosts:
            in_groups = [g for g in self.groups if hname in members[g]]
            ordered = sorted((g for g in in_groups if g != "all"),
                             key=lambda g: (depth[g], self.groups[g].priority, g))
            merged: dict[str, Any] = {}
            origins: dict[str, str] = {}
            ordered.insert(0, "all")
            layers = [(self.groups[g].vars, self.groups[g].origins) for g in ordered]
            layers += [files.group(g) for g in ordered]
            layers += [(self.hosts[hname], self.host_origins[hname]), files.host(hname)]
            for values, where in layers:
                merged.update(_plain(values))
                origins.update(where)
            hosts[hname] = _make_host(self.path, hname, merged, origins, tuple(in_groups))
        _check_addresses(self.path, hosts)
        return Inventory(path=self.path, hosts=hosts, groups=members)

    def _check_cycles(self) -> None:
        state: dict[str, int] = {}

        def visit(name: str, trail: list[str]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                cycle = " -> ".join(trail[trail.index(name):] + [name])
                raise InventoryError(f"{self.path}: groups form a cycle: {cycle}")
            state[name] = 1
            for c in self.groups[name].children:
                visit(c, trail + [name])
            state[name] = 2

        for name in list(self.groups):
            visit(name, [])

    def _reconcile_ungrouped(self) -> None:
        real = {h: False for h in self.hosts}
        for name, g in self.groups.items():
            if name not in ("all", "ungrouped"):
                for h in g.hosts:
                    real[h] = True
        ung = self.groups["ungrouped"]
        ung.hosts = [h for h in ung.hosts if not real[h]]
        ung.hosts += [h for h in self.hosts if not real[h] and h not in ung.hosts]

    def _depths(self) -> dict[str, int]:
        depth: dict[str, int] = {}

        def of(name: str) -> int:
            if name not in depth:
                g = self.groups[name]
                depth[name] = 1 + max((of(p) for p in g.parents), default=-1)
            return depth[name]

        for name in self.groups:
            of(name)
        return depth

    def _group_hosts(self, name: str) -> list[str]:
        """The group's own hosts, then its descendants' level by level (Ansible's order)."""
        out: list[str] = []
        seen_groups = {name}
        level = [name]
        while level:
            nxt: list[str] = []
            for gname in level:
                out.extend(h for h in self.groups[gname].hosts if h not in out)
                for c in self.groups[gname].children:
                    if c not in seen_groups:
                        seen_groups.add(c)
                        nxt.append(c)
            level = nxt
        return out


# ---------------------------------------------------------------- INI


def _ini_value(text: str) -> Any:
    """A Python literal when the text is one (``8``, ``True``, ``[1, 2]``), else the text."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _parse_ini(b: _Builder, text: str) -> None:
    group, kind = "ungrouped", "hosts"
    headers: set[str] = {"all", "ungrouped"}
    pending: list[tuple[str, str, str]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        where = f"{b.path}:{lineno}"
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            m = _SECTION.match(line)
            if not m:
                raise InventoryError(f"{where}: malformed section header {line!r}")
            group, kind = m.group("name"), m.group("kind") or "hosts"
            if kind not in ("hosts", "children", "vars"):
                raise InventoryError(f"{where}: section [{group}:{kind}] has unknown type {kind!r} (use :children or :vars)")
            headers.add(group)
            b.group(group)
        elif kind == "vars":
            key, eq, value = line.partition("=")
            if not eq or not key.strip():
                raise InventoryError(f"{where}: expected key=value in [{group}:vars], got {line!r}")
            b.set_group_var(group, key.strip(), _ini_value(value.strip()), where)
        elif kind == "children":
            tokens = _shlex(line, where)
            if len(tokens) != 1:
                raise InventoryError(f"{where}: expected one group name in [{group}:children], got {line!r}")
            pending.append((group, tokens[0], where))
            b.group(tokens[0])
        else:
            _ini_host_line(b, group, line, where)
    for parent, child, where in pending:
        if child not in headers:
            raise InventoryError(f"{where}: [{parent}:children] names group {child!r}, which has no section")
        b.add_child(parent, child, where)


def _shlex(line: str, where: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError as err:
        raise InventoryError(f"{where}: cannot split line: {err}") from None


def _ini_host_line(b: _Builder, group: str, line: str, where: str) -> None:
    tokens = _shlex(line, where)
    if not tokens:
        return
    names, port = _host_names(tokens[0], where)
    hvars: dict[str, Any] = {}
    for tok in tokens[1:]:
        key, eq, value = tok.partition("=")
        if not eq or not key:
            raise InventoryError(f"{where}: expected key=value host variable, got {tok!r}")
        hvars[key] = _ini_value(value)
    if port is not None:
        hvars["ansible_port"] = port
    for name in names:
        b.add_host(group, name, hvars, {k: where for k in hvars})


# ---------------------------------------------------------------- YAML


def _parse_yaml(b: _Builder, doc: Any) -> None:
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise InventoryError(f"{b.path}:1: a YAML inventory must be a mapping of group names, got {type(doc).__name__}")
    for name, data in doc.items():
        _yaml_group(b, name, data, None, f"{b.path}:{doc.lines.get(name, 1)}")


def _yaml_group(b: _Builder, name: Any, data: Any, parent: str | None, where: str) -> None:
    if not isinstance(name, str) or not name.strip():
        raise InventoryError(f"{where}: group name must be text, got {name!r}")
    b.group(name)
    if parent is not None:
        b.add_child(parent, name, where)
    if data is None:
        return
    if not isinstance(data, dict):
        raise InventoryError(f"{where}: group {name} must be a mapping with hosts, vars and children, got {type(data).__name__}")
    for key, value in data.items():
        kwhere = f"{b.path}:{data.lines.get(key, data.line)}"
        if key not in ("hosts", "vars", "children"):
            raise InventoryError(f"{kwhere}: group {name} has unknown key {key!r} (expected hosts, vars or children)")
        if value is None:
            continue
        if not isinstance(value, dict):
            raise InventoryError(f"{kwhere}: {key} of group {name} must be a mapping, got {type(value).__name__}")
        for sub, subdata in value.items():
            swhere = f"{b.path}:{value.lines.get(sub, value.line)}"
            if key == "vars":
                b.set_group_var(name, str(sub), subdata, swhere)
            elif key == "children":
                _yaml_group(b, sub, subdata, name, swhere)
            else:
                _yaml_host(b, name, sub, subdata, swhere)


def _yaml_host(b: _Builder, group: str, pattern: Any, data: Any, where: str) -> None:
    if not isinstance(pattern, (str, int)) or isinstance(pattern, bool):
        raise InventoryError(f"{where}: host name must be text, got {pattern!r}")
    if data is not None and not isinstance(data, dict):
        raise InventoryError(f"{where}: vars of host {pattern} must be a mapping, got {type(data).__name__}")
    names, port = _host_names(str(pattern), where)
    hvars = dict(data or {})
    origins = {k: f"{b.path}:{data.lines.get(k, data.line)}" for k in hvars} if data else {}
    if port is not None:
        hvars["ansible_port"] = port
        origins["ansible_port"] = where
    for name in names:
        b.add_host(group, name, hvars, origins)


# ---------------------------------------------------------------- group_vars / host_vars


class _VarsFiles:
    """group_vars/ and host_vars/ beside the inventory; each read at most once."""

    def __init__(self, folder: str):
        self.folder = folder
        self.cache: dict[tuple[str, str], tuple[dict[str, Any], dict[str, str]]] = {}

    def group(self, name: str) -> tuple[dict[str, Any], dict[str, str]]:
        return self._load("group_vars", name)

    def host(self, name: str) -> tuple[dict[str, Any], dict[str, str]]:
        return self._load("host_vars", name)

    def _load(self, kind: str, name: str) -> tuple[dict[str, Any], dict[str, str]]:
        if (kind, name) not in self.cache:
            values: dict[str, Any] = {}
            origins: dict[str, str] = {}
            for path in self._files(os.path.join(self.folder, kind, name)):
                doc = _load_yaml(path, _read(path))
                if doc is None:
                    continue
                if not isinstance(doc, dict):
                    raise InventoryError(f"{path}:1: a vars file must be a mapping, got {type(doc).__name__}")
                for k, v in doc.items():
                    values[str(k)] = v
                    origins[str(k)] = f"{path}:{doc.lines.get(k, 1)}"
            self.cache[(kind, name)] = (values, origins)
        return self.cache[(kind, name)]

    @staticmethod
    def _files(base: str) -> list[str]:
        for ext in _VARS_EXTS:
            path = base + ext
            if os.path.isdir(path):
                return _walk(path)
            if os.path.isfile(path):
                return [path]
        return []


def _walk(folder: str) -> list[str]:
    out: list[str] = []
    for entry in sorted(os.listdir(folder)):
        if entry.startswith("."):
            continue
        path = os.path.join(folder, entry)
        if os.path.isdir(path):
            out += _walk(path)
        elif os.path.splitext(entry)[1] in _VARS_EXTS:
            out.append(path)
    return out


# ---------------------------------------------------------------- hosts


def _make_host(path: str, name: str, v: dict[str, Any], origins: dict[str, str], groups: tuple[str, ...]) -> Host:
    def where(key: str) -> str:
        return origins.get(key, path)

    for key in _CHECKED_VARS:
        value = v.get(key)
        if isinstance(value, str) and ("{{" in value or "{%" in value):
            raise InventoryError(f"{where(key)}: host {name} var {key} holds a Jinja template ({value!r}); gpuaccept does not render templates")

    def first(*keys: str) -> tuple[str, Any]:
        for k in keys:
            if v.get(k) is not None:
                return k, v[k]
        return keys[0], None

    conn_raw = v.get("ansible_connection") or "ssh"
    connection = _CONNECTIONS.get(str(conn_raw))
    if connection is None:
        raise InventoryError(f"{where('ansible_connection')}: host {name} ansible_connection {conn_raw!r} is not supported (ssh, smart, paramiko or local)")
    port_key, port_raw = first("ansible_port", "ansible_ssh_port")
    if port_raw is None:
        port = 22
    elif isinstance(port_raw, int) and not isinstance(port_raw, bool):
        port = port_raw
    elif isinstance(port_raw, str) and port_raw.strip().isdigit():
        port = int(port_raw)
    else:
        raise InventoryError(f"{where(port_key)}: host {name} {port_key} must be an integer, got {port_raw!r}")
    if not 0 < port < 65536:
        raise InventoryError(f"{where(port_key)}: host {name} {port_key} {port} is not a TCP port")
    _, address = first("ansible_host", "ansible_ssh_host")
    _, user = first("ansible_user", "ansible_ssh_user")
    _, key_file = first("ansible_ssh_private_key_file", "ansible_private_key_file")
    python = v.get("ansible_python_interpreter")
    if python is None or str(python).startswith("auto"):
        python = "python3"
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
    )


def _check_addresses(path: str, hosts: dict[str, Host]) -> None:
    seen: dict[tuple[str, int], str] = {}
    for h in hosts.values():
        if h.connection == "local":
            continue
        key = (h.address.lower(), h.port)
        if key in seen:
            raise InventoryError(f"{path}: hosts {seen[key]} and {h.name} both resolve to {h.address}:{h.port}; list each machine once")
        seen[key] = h.name
