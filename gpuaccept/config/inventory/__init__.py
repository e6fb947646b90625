"""Ansible inventories (INI and YAML) read into hosts, the way ansible-inventory reads them.

What is supported, checked against ``ansible-inventory --list`` by the tests:

* INI (:mod:`.ini`): ``[g]``, ``[g:children]``, ``[g:vars]``, hosts before any section (``ungrouped``),
  ``[all]``/``[all:vars]``, inline ``k=v`` host vars (shell-quoted; values read as Python literals when they
  are one, else kept as text), ``host:port`` and ``[ipv6]:port``, comments (``#``, ``;``);
* YAML (:mod:`.yaml`, also ``.json``): ``all: {hosts, vars, children}`` and top-level groups;
* host ranges in both: ``gpu[001:128]`` (zero-padded), ``node[a:f]``, ``n[1:10:2]``
  (:mod:`gpuaccept.config.hostranges`);
* ``group_vars/`` and ``host_vars/`` beside the inventory file (:mod:`.varsfiles`);
* Ansible's variable precedence (:mod:`.resolve`).

The inventory file and its vars files are read within bounds (:mod:`gpuaccept.config.bounded`: 64 MiB, a line
of 16 MiB, 10 s for a pipe), and a value echoed in a refusal is cut and escaped
(:func:`gpuaccept.config.shown.shown`).

Stricter than Ansible (it warns or silently does something odd; we refuse): unknown keys in a YAML group,
a key written twice (YAML mapping, INI host line or ``[g:vars]`` section), ranges whose begin is past their
end, Jinja templates in the connection variables, a host range inside an address variable
(``ansible_host=10.0.0.[1:3]``), a host with the name of a group (Ansible warns, then sets that host's
inline vars on the group, so every host of the group gets them), two hosts at one address:port, host and group names with ``/``, ``..`` or
control characters (they become folder names) or bidirectional, zero-width and other format characters (they
reorder or hide text where the name is shown), an ``ansible_host`` with a character no address holds (``$ ( )
;``), an ``ansible_user`` no login name can be, a port not in ASCII digits (``２２``), groups nested more than
100 levels, more than 100,000 hosts.

Every step takes time linear in the file (tests/test_fuzz_input.py holds the worst input of each kind, with a
bound on CPU seconds): INI lines are split without :mod:`shlex` (:mod:`gpuaccept.config.shellwords`), and
resolving which hosts each group holds runs under a step budget linear in the file (:mod:`.resolve`).
"""
from __future__ import annotations

import gc
import os

from gpuaccept.errors import InventoryError
from gpuaccept.config.hostranges import expand_hostname
from gpuaccept.config.shown import shown_path
from gpuaccept.config.yamlload import load, read_text
from gpuaccept.config.inventory.ini import parse_ini
from gpuaccept.config.inventory.model import Host, Inventory
from gpuaccept.config.inventory.resolve import Builder
from gpuaccept.config.inventory.yaml import STATIC_HINT, parse_yaml

__all__ = ["Host", "Inventory", "expand_hostname", "load_inventory"]


def load_inventory(path: str, text: str | None = None) -> Inventory:
    """Read an INI or YAML inventory file, and the group_vars/host_vars beside it.

    ``.yml``/``.yaml``/``.json`` files are YAML; a file without extension is YAML when it parses as a
    YAML mapping, else INI; any other file is INI. A folder (``-i inventories/prod/``) holding one inventory
    file is read as that file. An inventory script (``#!``), an inventory plugin's configuration
    (``plugin:``) and ``ansible-inventory --list`` JSON (``_meta``) are refused with the command that turns
    them into a file gpuaccept reads. ``text``: the file's text as read before (an xdist worker gets the
    controller's, so a pipe such as ``--inventory <(...)`` is read once and every process sees the same hosts);
    ``path`` then names the file read, for messages and the vars folders beside it.

    Raises:
        InventoryError: the file is missing, unreadable or malformed, a vars file is, a variable gpuaccept
            uses is invalid or templated, two hosts share an address and port, or there are more than
            100,000 hosts. ``str(err)`` is one line naming ``file:line`` when the line is known.
    """
    if text is None:
        if os.path.isdir(path):
            path = _only_file_in(path)
        text = read_text(path, InventoryError, "inventory file")
    if text.startswith("#!"):
        raise InventoryError(f"{path}:1: an inventory script ({shown_path(text.splitlines()[0], 80)}); gpuaccept does not run "
                             f"inventory scripts: {STATIC_HINT.format(src=path)}")
    paused = gc.isenabled()
    gc.disable()  # a load allocates ~10 objects per host and frees none: collection passes only cost time
    try:
        inv = _load(path, text)
        inv.text = text
        return inv
    finally:
        if paused:
            gc.enable()


# entries of an inventory folder Ansible passes over (ansible-core inventory/manager.py IGNORED_ALWAYS, and
# INVENTORY_IGNORE_EXTS' default in config/base.yml: REJECT_EXTS + .orig .cfg .retry; ansible-core 2.19)
_IGNORED_NAMES = ("host_vars", "group_vars", "vars_plugins")
_IGNORED_EXTS = (".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig", ".cfg", ".retry")


def _only_file_in(folder: str) -> str:
    """The one inventory file of an inventory folder (``-i inventories/prod/``), as Ansible would list the
    folder: hidden entries, ``group_vars``/``host_vars`` and ignored extensions passed over. Ansible merges
    every file it finds; gpuaccept reads one, so a folder holding several is refused, naming them."""
    try:
        names = sorted(os.listdir(folder))
    except OSError as err:
        raise InventoryError(f"{folder}: cannot read the inventory folder: {err.strerror or err}") from None
    found = [n for n in names if not n.startswith(".") and n not in _IGNORED_NAMES and not n.endswith(_IGNORED_EXTS)]
    if len(found) == 1 and not os.path.isdir(os.path.join(folder, found[0])):
        return os.path.join(folder, found[0])
    if not found:
        raise InventoryError(f"{folder}: an inventory folder with no inventory file in it")
    listed = ", ".join(found[:8]) + (f" and {len(found) - 8} more" if len(found) > 8 else "")
    raise InventoryError(f"{folder}: an inventory folder holding {len(found)} entries ({listed}); Ansible merges "
                         f"them, gpuaccept reads one inventory file: pass --inventory {os.path.join(folder, found[0])}"
                         f" (group_vars/ and host_vars/ beside it are read), or merge them with "
                         f"`ansible-inventory -i {folder} --list --yaml > fleet.yml`")


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
