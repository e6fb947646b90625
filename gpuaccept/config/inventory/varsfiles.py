"""``group_vars/`` and ``host_vars/`` beside the inventory file, as Ansible reads them.

For a group or host NAME the first of ``NAME``, ``NAME.yml``, ``NAME.yaml``, ``NAME.json`` that exists is read;
a directory is read file by file (``.yml``, ``.yaml``, ``.json`` or no extension) in sorted order, hidden
files skipped. Each folder is listed once, so 10,000 hosts without a host_vars file cost no stat call each.
"""
from __future__ import annotations

import os
from typing import Any

from gpuaccept.errors import InventoryError
from gpuaccept.config.yamlload import load_file, plain

VARS_EXTS = ("", ".yml", ".yaml", ".json")
_EMPTY: tuple[dict[str, Any], dict[str, str]] = ({}, {})


class VarsFiles:
    """group_vars/ and host_vars/ under ``folder``; each file read at most once."""

    def __init__(self, folder: str):
        self.folder = folder
        self.cache: dict[tuple[str, str], tuple[dict[str, Any], dict[str, str]]] = {}
        self.listing: dict[str, set[str]] = {}

    def group(self, name: str) -> tuple[dict[str, Any], dict[str, str]]:
        """(vars, var -> ``file:line``) from group_vars/ for group ``name``."""
        return self._load("group_vars", name)

    def host(self, name: str) -> tuple[dict[str, Any], dict[str, str]]:
        """(vars, var -> ``file:line``) from host_vars/ for host ``name``."""
        return self._load("host_vars", name)

    def _entries(self, kind: str) -> set[str]:
        if kind not in self.listing:
            try:
                self.listing[kind] = set(os.listdir(os.path.join(self.folder, kind)))
            except OSError:
                self.listing[kind] = set()
        return self.listing[kind]

    def _load(self, kind: str, name: str) -> tuple[dict[str, Any], dict[str, str]]:
        entries = self._entries(kind)
        if not entries or not any(name + ext in entries for ext in VARS_EXTS):
            return _EMPTY
        if (kind, name) not in self.cache:
            values: dict[str, Any] = {}
            origins: dict[str, str] = {}
            for path in self._files(os.path.join(self.folder, kind, name)):
                doc = load_file(path, InventoryError, "vars file")
                if doc is None:
                    continue
                if not isinstance(doc, dict):
                    raise InventoryError(f"{path}:1: a vars file must be a mapping, got {type(doc).__name__}")
                for k, v in doc.items():
                    values[str(k)] = plain(v)
                    origins[str(k)] = f"{path}:{doc.lines.get(k, 1)}"
            self.cache[(kind, name)] = (values, origins)
        return self.cache[(kind, name)]

    @staticmethod
    def _files(base: str) -> list[str]:
        for ext in VARS_EXTS:
            path = base + ext
            if os.path.isdir(path):
                return _walk(path, 0)
            if os.path.isfile(path):
                return [path]
        return []


def _walk(folder: str, depth: int) -> list[str]:
    if depth > 16:
        raise InventoryError(f"{folder}: vars folders nested deeper than 16 levels")
    out: list[str] = []
    for entry in sorted(os.listdir(folder)):
        if entry.startswith("."):
            continue
        path = os.path.join(folder, entry)
        if os.path.isdir(path):
            out += _walk(path, depth + 1)
        elif os.path.splitext(entry)[1] in VARS_EXTS:
            out.append(path)
    return out
