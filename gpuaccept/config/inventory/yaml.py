"""Ansible's YAML inventory format (also ``.json``), read into a :class:`~.resolve.Builder`.

As Ansible's ``plugins/inventory/yaml.py``: top-level groups (usually ``all``), each a mapping of ``hosts``
(host pattern -> vars), ``vars`` and ``children`` (group -> the same structure). Stricter: any other key in
a group is refused, as are a duplicate key anywhere (the loader, :mod:`gpuaccept.config.yamlload`) and a host entry
whose vars are not a mapping. Every error names ``file:line``.
"""
from __future__ import annotations

from typing import Any

from gpuaccept.errors import InventoryError
from gpuaccept.config.yamlload import plain
from gpuaccept.config.inventory.resolve import Builder, host_names, port_clash
from gpuaccept.config.shown import shown, shown_path

#: how to turn a dynamic inventory (script, plugin) into a file gpuaccept reads; ``src``: the source
STATIC_HINT = ("write its hosts out once with `ansible-inventory -i {src} --list --yaml > fleet.yml` "
               "and pass --inventory fleet.yml")

_GROUP_KEYS = ("hosts", "vars", "children")


def parse_yaml(b: Builder, doc: Any) -> None:
    """Read a loaded YAML inventory document into ``b``. Raises InventoryError naming ``file:line``."""
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise InventoryError(f"{b.path}:1: a YAML inventory must be a mapping of group names, got {type(doc).__name__}")
    if isinstance(doc.get("plugin"), str):
        raise InventoryError(f"{b.path}:{doc.lines.get('plugin', 1)}: an inventory plugin configuration (plugin: "
                             f"{doc['plugin'][:80]}); gpuaccept does not run inventory plugins: "
                             f"{STATIC_HINT.format(src=b.path)}")
    if "_meta" in doc:
        raise InventoryError(f"{b.path}:{doc.lines.get('_meta', 1)}: the JSON that `ansible-inventory --list` or an "
                             f"inventory script prints (key _meta), not an inventory file; write it with --yaml: "
                             f"`ansible-inventory -i SOURCE --list --yaml > fleet.yml`")
    # children nest at most yamlload.MAX_DEPTH / 2 levels deep: recursion is safe
    for name, data in doc.items():
        _group(b, name, data, None, f"{b.path}:{doc.lines.get(name, 1)}")


def _group(b: Builder, name: Any, data: Any, parent: str | None, where: str) -> None:
    """Read one group, its hosts, vars and children, in the file's order (as Ansible does)."""
    if not isinstance(name, str) or not name.strip():
        raise InventoryError(f"{where}: group name must be text, got {shown(name)}")
    b.group(name, where)
    if parent is not None:
        b.add_child(parent, name, where)
    if data is None:
        return
    if not isinstance(data, dict):
        raise InventoryError(f"{where}: group {name} must be a mapping with hosts, vars and children, "
                             f"got {type(data).__name__}")
    for key, value in data.items():
        kwhere = f"{b.path}:{data.lines.get(key, data.line)}"
        if key not in _GROUP_KEYS:
            raise InventoryError(f"{kwhere}: group {name} has unknown key {shown(key)} (expected hosts, vars or children)")
        if value is None:
            continue
        if not isinstance(value, dict):
            raise InventoryError(f"{kwhere}: {key} of group {name} must be a mapping, got {type(value).__name__}")
        for sub, subdata in value.items():
            swhere = f"{b.path}:{value.lines.get(sub, value.line)}"
            if key == "vars":
                b.set_group_var(name, str(sub), subdata, swhere)
            elif key == "children":
                _group(b, sub, subdata, name, swhere)
            else:
                _host(b, name, sub, subdata, swhere)


def _host(b: Builder, group: str, pattern: Any, data: Any, where: str) -> None:
    if not isinstance(pattern, (str, int)) or isinstance(pattern, bool):
        raise InventoryError(f"{where}: host name must be text, got {shown(pattern)}")
    if data is not None and not isinstance(data, dict):
        raise InventoryError(f"{where}: vars of host {shown_path(pattern, 100)} must be a mapping, got {type(data).__name__}")
    names, port = host_names(str(pattern), where)
    hvars = {str(k): plain(v) for k, v in (data or {}).items()}
    origins = {str(k): f"{b.path}:{data.lines.get(k, data.line)}" for k in data} if data else {}
    port_clash(str(pattern), port, hvars, where)
    if port is not None:
        hvars["ansible_port"] = port
        origins["ansible_port"] = where
    for name in names:
        b.add_host(group, name, hvars, origins, where)
