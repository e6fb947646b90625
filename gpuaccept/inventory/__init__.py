"""Ansible inventories (INI and YAML) read into hosts, the way ansible-inventory reads them.

What is supported, checked against ``ansible-inventory --list`` by the tests:

* INI (:mod:`.ini`): ``[g]``, ``[g:children]``, ``[g:vars]``, hosts before any section (``ungrouped``),
  ``[all]``/``[all:vars]``, inline ``k=v`` host vars (shell-quoted; values read as Python literals when they
  are one, else kept as text), ``host:port`` and ``[ipv6]:port``, comments (``#``, ``;``);
* YAML (:mod:`.yaml`, also ``.json``): ``all: {hosts, vars, children}`` and top-level groups;
* host ranges in both: ``gpu[001:128]`` (zero-padded), ``node[a:f]``, ``n[1:10:2]``
  (:mod:`gpuaccept.hostranges`);
* ``group_vars/`` and ``host_vars/`` beside the inventory file (:mod:`.varsfiles`);
* Ansible's variable precedence (:mod:`.resolve`).

Stricter than Ansible (it warns or silently does something odd; we refuse): unknown keys in a YAML group,
a key written twice (YAML mapping, INI host line or ``[g:vars]`` section), ranges whose begin is past their
end, Jinja templates in the connection variables, a host range inside an address variable
(``ansible_host=10.0.0.[1:3]``), a host with the name of a group (Ansible warns, then sets that host's
inline vars on the group, so every host of the group gets them), two hosts at one address:port, host and group names with ``/``, ``..`` or
control characters (they become folder names), more than 100,000 hosts.
"""
from __future__ import annotations

import gc
import os

from ..errors import InventoryError
from ..hostranges import expand_hostname
from ..yamlload import load, read_text
from .ini import parse_ini
from .model import Host, Inventory
from .resolve import Builder
from .yaml import parse_yaml

__all__ = ["Host", "Inventory", "expand_hostname", "load_inventory"]


def load_inventory(path: str) -> Inventory:
    """Read an INI or YAML inventory file, and the group_vars/host_vars beside it.

    ``.yml``/``.yaml``/``.json`` files are YAML; a file without extension is YAML when it parses as a
    YAML mapping, else INI; any other file is INI.

    Raises:
        InventoryError: the file is missing, unreadable or malformed, a vars file is, a variable gpuaccept
            uses is invalid or templated, two hosts share an address and port, or there are more than
            100,000 hosts. ``str(err)`` is one line naming ``file:line`` when the line is known.
    """
    text = read_text(path, InventoryError, "inventory file")
    paused = gc.isenabled()
    gc.disable()  # a load allocates ~10 objects per host and frees none: collection passes only cost time
    try:
        return _load(path, text)
    finally:
        if paused:
            gc.enable()


def _load(path: str, text: str) -> Inventory:
    ext = os.path.splitext(path)[1].lower()
    b = Builder(path)
    if ext in (".yml", ".yaml", ".json"):
        parse_yaml(b, load(path, text, InventoryError))
    elif ext == "":
        try:
            doc = load(path, text, InventoryError)
        except InventoryError:
            doc = None
        if isinstance(doc, dict):
            parse_yaml(b, doc)
        else:
            parse_ini(b, text)
    else:
        parse_ini(b, text)
    return b.finish()
