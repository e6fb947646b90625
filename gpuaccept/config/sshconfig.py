"""What OpenSSH would use to reach a host: ``~/.ssh/config`` plus the inventory, as Ansible does it.

Ansible's ssh connection runs ``ssh <ansible_ssh_common_args> <ansible_ssh_extra_args> -o Port=.. -o User=..
<ansible_host>``, so OpenSSH reads ``~/.ssh/config`` for the host (HostName, Port, User, IdentityFile,
ProxyJump, ProxyCommand), options given with ``-o``/``-J`` in those vars come first (OpenSSH keeps the first
value obtained), and the inventory's own connection vars win over both. :func:`resolve` does the same with
paramiko's :class:`paramiko.SSHConfig` (which also expands ``%h``, ``%p``, ``%r`` in ProxyCommand). Pure
apart from reading the config file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from gpuaccept.config.bounded import SMALL_LINE, read_bounded
from gpuaccept.config.shellwords import split_words
from gpuaccept.config.shown import shown
from gpuaccept.config.sshlib import import_paramiko
from gpuaccept.errors import ConfigError

#: inventory vars whose ``-o Key=Value`` / ``-J jump`` options reach ssh (Ansible's ssh connection plugin)
ARGS_VARS = ("ansible_ssh_common_args", "ansible_ssh_extra_args")
#: ssh options gpuaccept takes from those vars; others (ControlMaster...) have no paramiko meaning
_OPTIONS = ("proxyjump", "proxycommand", "hostname", "port", "user", "identityfile")


@dataclass
class Target:
    """Where to connect: ``hostname``, ``port``, ``user`` (None: the local user), ``key_files`` (tried in
    order; empty: agent and default keys), ``proxy_jump`` (OpenSSH ``[user@]host[:port][,...]``) or
    ``proxy_command`` (a shell command line, tokens expanded)."""

    hostname: str
    port: int
    user: str | None
    key_files: list[str] = field(default_factory=list)
    proxy_jump: str | None = None
    proxy_command: str | None = None


#: ssh's short options that name one of :data:`_OPTIONS` (``-p 2222``, ``-p2222``...), and ``-F`` (another config
#: file in place of ~/.ssh/config: ``configfile``), as ssh(1) documents them
_FLAGS = {"-J": "proxyjump", "-p": "port", "-l": "user", "-i": "identityfile", "-F": "configfile"}


def ssh_args_options(text: str, where: str = "ansible_ssh_common_args") -> list[tuple[str, str]]:
    """``-o Key=Value``, ``-oKey=Value``, ``-o 'Key Value'``, ``-J jump``, ``-p port``, ``-l user``, ``-i key`` and
    ``-F configfile`` (each also written joined, ``-p2222``) from an ssh argument string, as ``[(key lower-case,
    value)]`` in order, keeping only :data:`_OPTIONS` and ``configfile``. Raises ConfigError naming ``where``
    for text that cannot be split as a shell would (:func:`~gpuaccept.config.shellwords.split_words`). Example:
    ``'-o ProxyJump=b1 -o ControlMaster=auto -p 2222'`` → ``[("proxyjump", "b1"), ("port", "2222")]``."""
    try:
        words = split_words(text or "", comments=False)
    except ValueError as e:
        raise ConfigError(f"{where}: cannot split {shown(text)}: {e}") from None
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        w = words[i]
        opt = None
        if (w == "-o" or w in _FLAGS) and i + 1 < len(words):
            opt = (w, words[i + 1])
            i += 2
        elif w[:2] == "-o" or (w[:2] in _FLAGS and len(w) > 2):
            opt = (w[:2], w[2:])
            i += 1
        else:
            i += 1
        if opt is None:
            continue
        if opt[0] in _FLAGS:
            out.append((_FLAGS[opt[0]], opt[1]))
            continue
        kv = opt[1].strip()
        key, _, value = kv.partition("=") if "=" in kv.split(" ", 1)[0] else kv.partition(" ")
        key = key.strip().lower()
        if key in _OPTIONS:
            out.append((key, value.strip()))
    return out


def _config_text(path: str | None) -> str:
    path = os.path.expanduser(path or "~/.ssh/config")
    if not os.path.lexists(path):
        return ""
    try:  # within gpuaccept.config.bounded's bounds: 64 MiB, a line of 64 KiB, 10 s for a pipe or device
        return read_bounded(path, "ssh config file", ConfigError, max_line=SMALL_LINE).decode("utf-8", "replace")
    except ConfigError as e:
        raise ConfigError(f"ssh config {e}") from None


def lookup(name: str, config_path: str | None = None, first: list[tuple[str, str]] | None = None) -> dict:
    """paramiko's SSHConfig lookup of ``name`` in ``config_path`` (default ``~/.ssh/config``; missing: empty),
    with ``first`` options (from ssh arguments) placed before the file, so they win as on ssh's command line.
    Raises ConfigError for an unreadable or unparsable file."""
    head = ""
    if first:
        head = "Host *\n" + "".join(f"  {k} {v}\n" for k, v in first) + "\n"
    text = _config_text(config_path)
    try:
        # the file's own blocks come after ours; "Host *" keeps our options applying to every host
        cfg = import_paramiko().SSHConfig.from_text(head + text)
        return cfg.lookup(name)
    except Exception as e:  # noqa: BLE001 - paramiko raises several kinds for a malformed file
        raise ConfigError(f"ssh config {config_path or '~/.ssh/config'}: {e}") from None


def inventory_options(host: Any) -> list[tuple[str, str]]:
    """The ssh options inventory ``host`` gives before any ssh config file, as ``[(key lower-case, value)]`` in the
    order ssh reads them (the first value of an option wins): its own ``ansible_host``, ``ansible_port`` (or
    ``host:port``) and ``ansible_user`` first (they win, and ProxyCommand's %h %p %r expand to them), then the
    options of ``ansible_ssh_common_args`` and ``ansible_ssh_extra_args`` (:func:`ssh_args_options`). Raises
    ConfigError for arguments that cannot be split."""
    hvars = getattr(host, "vars", None) or {}
    explicit = lambda *names: any(n in hvars for n in names)  # noqa: E731
    first: list[tuple[str, str]] = []
    if explicit("ansible_host", "ansible_ssh_host"):
        first.append(("hostname", str(host.address)))
    if explicit("ansible_port", "ansible_ssh_port") or int(host.port or 22) != 22:  # a var, or ``host:port``
        first.append(("port", str(int(host.port or 22))))
    if host.user:
        first.append(("user", str(host.user)))
    for var in ARGS_VARS:
        if hvars.get(var):
            first += ssh_args_options(str(hvars[var]), var)
    return first


def resolve(host: Any, config_path: str | None = None) -> Target:
    """The connection target for inventory ``host`` (name, address, port, user, key_file, vars).

    Order of precedence, highest first: the inventory's ``ansible_host``/``ansible_port``/``ansible_user``/
    ``ansible_ssh_private_key_file``; ``-o``/``-J``/``-p``/``-l``/``-i`` options in ``ansible_ssh_common_args`` and
    ``ansible_ssh_extra_args``; ``~/.ssh/config`` (or ``config_path``, or the file their ``-F`` names) for the
    host's address; defaults
    (port 22, the local user). Raises ConfigError (unreadable config, unsplittable args)."""
    address = str(host.address)
    first = inventory_options(host)
    files = [v for k, v in first if k == "configfile"]  # ``-F``: that file in place of ~/.ssh/config, as ssh reads it
    cfg = lookup(address, os.path.expanduser(files[0]) if files else config_path,
                 [(k, v) for k, v in first if k != "configfile"])
    hostname = str(cfg.get("hostname") or address)
    port = int(cfg["port"]) if "port" in cfg else int(host.port or 22)
    user = cfg.get("user") or None
    keys = [host.key_file] if host.key_file else [os.path.expanduser(k) for k in cfg.get("identityfile") or []]
    jump = cfg.get("proxyjump")
    command = cfg.get("proxycommand")
    if jump and jump.lower() == "none":
        jump = None
    if command and command.lower() == "none":
        command = None
    return Target(hostname, port, user, [k for k in keys if k], jump, command)


def parse_jump(spec: str) -> list[tuple[str | None, str, int | None]]:
    """OpenSSH ProxyJump ``[user@]host[:port][,[user@]host[:port]...]`` (also ``ssh://user@host:port``) as
    ``[(user, host, port)]``, first hop first; IPv6 in brackets (``[::1]:2200``)."""
    hops = []
    for part in spec.split(","):
        part = part.strip().removeprefix("ssh://")
        user, _, rest = part.rpartition("@") if "@" in part else (None, "", part)
        port = None
        if rest.startswith("["):
            h, _, tail = rest[1:].partition("]")
            if tail.startswith(":"):
                port = int(tail[1:])
            rest = h
        elif rest.count(":") == 1:
            rest, p = rest.split(":")
            port = int(p)
        hops.append((user or None, rest, port))
    return hops
