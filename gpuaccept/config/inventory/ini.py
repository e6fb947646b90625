"""Ansible's INI inventory format, read line by line into a :class:`~.resolve.Builder`.

As Ansible's ``plugins/inventory/ini.py``: ``[g]``, ``[g:children]``, ``[g:vars]``, hosts before any section
(``ungrouped``), inline ``k=v`` host vars (shell-quoted; a value is a Python literal when it reads as one,
else text), ``host:port`` and ``[ipv6]:port``, ``#`` and ``;`` comments. One pass; every error names
``file:line``.
"""
from __future__ import annotations

import ast
import re
import warnings
from typing import Any

from gpuaccept.errors import InventoryError
from gpuaccept.config.inventory.resolve import Builder, host_names, port_clash
from gpuaccept.config.shellwords import split_words
from gpuaccept.config.shown import shown, shown_path

_SECTION = re.compile(r"^\[(?P<name>[^\[\]:\s]+)(?::(?P<kind>[^\[\]\s]+))?\]\s*(?:[#;].*)?$")
# a host line in bracket form: [2001:db8::12]:2200 (Ansible reads it as a host, not a section)
_BRACKET_HOST = re.compile(r"^\[[0-9A-Fa-f:.]+\]:\d+(?:\s|$)")
# characters after which a line needs shell-style splitting; without them str.split() gives the same tokens
_NEEDS_SHLEX = re.compile(r"['\"\\#]|[^\x21-\x7e \t]")
# values that cannot be a Python literal other than these: words that start with a letter
_WORD = re.compile(r"[A-Za-z_][^'\"()\[\]{},]*")
_INT = re.compile(r"0|[1-9][0-9]*")
_DOTTED = re.compile(r"[0-9]+(?:\.[0-9]+){2,}")  # 10.0.0.1: no literal
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_LITERAL_MAX = 65536  # longer values stay text: literal_eval of a huge expression costs time and memory


def ini_value(text: str) -> Any:
    """A Python literal when the text is one (``8``, ``True``, ``[1, 2]``), else the text (as Ansible)."""
    if _INT.fullmatch(text):
        return int(text)
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    if not text or len(text) > _LITERAL_MAX or _WORD.fullmatch(text) or _DOTTED.fullmatch(text):
        return text
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, OverflowError):
        return text


def parse_ini(b: Builder, text: str) -> None:
    """Read INI ``text`` (from ``b.path``) into ``b``. Raises InventoryError naming ``file:line``."""
    group, kind = "ungrouped", "hosts"
    declared: set[str] = {"all", "ungrouped"}
    vars_only: dict[str, str] = {}
    group_keys: dict[tuple[str, str], int] = {}
    pending: list[tuple[str, str, str]] = []
    path = b.path
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        m = _CONTROL.search(line)
        if m:
            raise InventoryError(f"{path}:{lineno}: control character U+{ord(m.group()):04X} in the line")
        if line[0] == "[" and not _BRACKET_HOST.match(line):
            m = _SECTION.match(line)
            if not m:
                raise InventoryError(f"{path}:{lineno}: malformed section header {shown(line)}")
            group, kind = m.group("name"), m.group("kind") or "hosts"
            if kind not in ("hosts", "children", "vars"):
                raise InventoryError(f"{path}:{lineno}: section [{group}:{kind}] has unknown type {shown(kind)} "
                                     "(use :children or :vars)")
            if kind == "vars":
                vars_only.setdefault(group, f"{path}:{lineno}")
            else:
                declared.add(group)
            b.group(group, f"{path}:{lineno}")
        elif kind == "hosts":
            _host_line(b, group, line, f"{path}:{lineno}")
        elif kind == "vars":
            key, eq, value = line.partition("=")
            if not eq or not key.strip():
                raise InventoryError(f"{path}:{lineno}: expected key=value in [{group}:vars], got {shown(line)}")
            first = group_keys.setdefault((group, key.strip()), lineno)
            if first != lineno:
                raise InventoryError(f"{path}:{lineno}: [{group}:vars] sets {shown_path(key.strip(), 100)} twice (first on line {first})")
            _inline_comment(key.strip(), value, f"{path}:{lineno}", group)
            b.set_group_var(group, key.strip(), ini_value(value.strip()), f"{path}:{lineno}")
        else:
            where = f"{path}:{lineno}"
            tokens = _split(line, where)
            if len(tokens) != 1:
                raise InventoryError(f"{where}: expected one group name in [{group}:children], got {shown(line)}")
            pending.append((group, tokens[0], where))
            b.group(tokens[0], where)
    for parent, child, where in pending:
        if child not in declared:
            raise InventoryError(f"{where}: [{parent}:children] names group {shown(child)}, which has no section")
        b.add_child(parent, child, where)
    children = {c for _, c, _ in pending}
    for name, where in vars_only.items():
        if name not in declared and name not in children:
            raise InventoryError(f"{where}: section [{name}:vars] is for group {shown(name)}, which is defined nowhere")


_COMMENT_AFTER = re.compile(r"\s[#;]")


def _inline_comment(key: str, value: str, where: str, group: str) -> None:
    """Refuse ``gpu_sku=h200-sxm-141gb  # rack 3`` in a ``[g:vars]`` section for a variable gpuaccept reads:
    Ansible's INI reader keeps ``# rack 3`` as part of the value there (only host lines drop comments), so
    the SKU, user or interpreter named would be one that does not exist. Quoted values, and values that read
    as a Python literal (``8 # HGX`` is 8 to Ansible's ``literal_eval`` too), are left alone."""
    from gpuaccept.config.hostvars import ANSIBLE_VARS, VARS

    text = value.strip()
    if text[:1] in "'\"[{" or key not in VARS and key not in ANSIBLE_VARS or key.endswith("_args"):
        return  # ssh argument vars may hold a ProxyCommand with ';' of its own
    m = _COMMENT_AFTER.search(text) if isinstance(ini_value(text), str) else None  # 8 # HGX reads as 8
    if m:
        raise InventoryError(f"{where}: [{group}:vars] {key}={shown(text)}: Ansible keeps {shown(text[m.start() + 1:])} as part "
                             "of the value in a vars section (only host lines drop comments): put the comment on a "
                             "line of its own")


def _split(line: str, where: str) -> list[str]:
    if not _NEEDS_SHLEX.search(line):
        return line.split()
    try:
        return split_words(line, comments=True)
    except ValueError as err:
        raise InventoryError(f"{where}: cannot split line: {err}") from None


def _host_line(b: Builder, group: str, line: str, where: str) -> None:
    tokens = _split(line, where)
    if not tokens:
        return
    names, port = host_names(tokens[0], where)
    hvars: dict[str, Any] = {}
    for tok in tokens[1:]:
        key, eq, value = tok.partition("=")
        if not eq or not key:
            hint = "; ';' starts a comment only at the start of a line (as in Ansible): write '#'" \
                if tok.startswith(";") else ""
            raise InventoryError(f"{where}: expected key=value host variable, got {shown(tok)}{hint}")
        if key in hvars:
            raise InventoryError(f"{where}: host variable {shown_path(key, 100)} written twice on one line")
        hvars[key] = ini_value(value)
    port_clash(tokens[0], port, hvars, where)
    if port is not None:
        hvars["ansible_port"] = port
    origins = dict.fromkeys(hvars, where)
    for name in names:
        b.add_host(group, name, hvars, origins, where)
