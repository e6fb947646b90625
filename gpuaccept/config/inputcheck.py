"""Files the selected hosts' connections need, checked on the controller before any node is touched.

:func:`check_connection_files` is called from the plugin's ``pytest_configure``: a key file that is missing,
unreadable, a folder, a public key or no key at all, and a ``--known-hosts`` file (or the host var
``gpuaccept_known_hosts`` / ``ansible_ssh_known_hosts_file``) that does not exist while new host keys are not
being accepted, would otherwise turn into one "cannot load key file" or "unknown host key" ERROR per host
after every node was contacted. Each is one line (exit 4) naming the ``file:line`` that set it and the host.
Each file is looked at once, however many hosts name it.
"""
from __future__ import annotations

import os
import re
import stat
from typing import Any, Iterable

from gpuaccept.errors import ConfigError
from gpuaccept.config.bounded import SMALL_LINE, read_bounded, size_text
from gpuaccept.config.hostvars import KNOWN_HOSTS_VARS
from gpuaccept.config.shown import shown, shown_path

__all__ = ["check_connection_files", "check_empty_options", "check_local_addresses"]

#: text options of gpuaccept (pytest option dest names) whose value must not be empty
TEXT_OPTIONS = ("inventory", "limit", "sku", "reports", "thresholds", "known_hosts", "shard", "history", "baseline",
                "prometheus_textfile")


def check_empty_options(getoption: Any) -> None:
    """Refuse a text option given as empty or blank text (``--inventory=$INVENTORY`` with the variable unset).

    An empty ``--inventory``, ``--reports`` or ``--thresholds`` would fall back to its default (the run tests the
    controller itself from ``inventory/localhost.ini`` and passes), an empty ``--limit`` selects every host, as
    Ansible's ``-l ''`` does (a burn-in meant for a few drained hosts would start on the whole fleet).
    ``getoption``: ``config.getoption``. Raises ConfigError (one line)."""
    for name in TEXT_OPTIONS:
        value = getoption(name, None)
        if isinstance(value, str) and not value.strip():
            flag = "--" + name.replace("_", "-")
            hint = " (to select every host, leave --limit out or write --limit all)" if name == "limit" else \
                f" (leave {flag} out for its default)"
            raise ConfigError(f"{flag} is empty: an unset variable on the command line?{hint}")

#: largest private key file read: an OpenSSH RSA 16384-bit key is ~12 KB; paramiko reads the whole file
KEY_MAX_BYTES = 1 << 20

_KEY_VARS = ("ansible_private_key_file", "ansible_ssh_private_key_file")
# the first word of an OpenSSH public key line (ssh-keygen writes "<type> <base64> <comment>" to *.pub)
_PUBLIC_PREFIXES = ("ssh-", "ecdsa-sha2-", "sk-ssh-", "sk-ecdsa-")


def _key_problem(path: str) -> str | None:
    """Why ``path`` cannot be an SSH private key (one phrase), or None. A passphrase-protected key is fine
    (the transport then tries ssh-agent)."""
    from gpuaccept.config.sshlib import import_paramiko  # imported here so --help and --list-hosts stay light

    paramiko = import_paramiko()  # the transport's own reader

    if not os.path.exists(path):
        return "does not exist"
    if os.path.isdir(path):
        return "is a folder, not a key file"
    if not os.access(path, os.R_OK):
        return "is not readable"
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a pipe or device); give the key file itself"
    if st.st_size > KEY_MAX_BYTES:
        return f"is larger than {size_text(KEY_MAX_BYTES)}; not a private key file"
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as e:
        return f"cannot be read: {e.strerror or e}"
    if head.lstrip().startswith(tuple(p.encode() for p in _PUBLIC_PREFIXES)):
        return "is a public key (an OpenSSH .pub line); give the private key file" + (
            f" ({path[:-4]}?)" if path.endswith(".pub") else "")
    try:
        paramiko.PKey.from_path(path)
    except paramiko.PasswordRequiredException:
        return None
    except (paramiko.SSHException, ValueError, TypeError) as e:
        if "password" in str(e).lower():
            return None  # OpenSSH's format says "passphrase-protected" this way
        return f"is not a private key paramiko can read ({e})"
    except OSError as e:
        return f"cannot be read: {e.strerror or e}"
    return None


# one known_hosts line (sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT"): [@marker] hostnames keytype base64-key [comment]
_KNOWN_HOSTS_LINE = re.compile(r"^(?:@[\w-]+\s+)?\S+\s+[A-Za-z0-9@._-]+\s+[A-Za-z0-9+/]+={0,2}(?:\s.*)?$")


def known_hosts_text_problem(path: str) -> str | None:
    """Why the existing file ``path`` is no known_hosts file (naming its first line that is none), else None.
    Keys accepted with --accept-new-host-keys are appended to it: an inventory given by mistake
    (``--known-hosts inventory.ini``) would get SSH key lines written into it. Read within the bounds of
    :func:`gpuaccept.config.bounded.read_bounded` (64 MiB, a line of 64 KiB, 10 s for a pipe or device)."""
    try:
        data = read_bounded(path, "known_hosts file", ConfigError, max_line=SMALL_LINE)
    except ConfigError as e:
        return getattr(e, "why", str(e))
    for n, raw in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        line = raw.strip()
        if line and not line.startswith("#") and not _KNOWN_HOSTS_LINE.match(line):
            return f"is not a known_hosts file (line {n}: {shown(line, 60)})"
    return None


def check_connection_files(hosts: Iterable[Any], inventory: str, known_hosts: str | None,
                           accept_new_host_keys: bool) -> None:
    """Refuse what would make every connection of a host fail at once.

    ``hosts``: the selected :class:`gpuaccept.config.inventory.Host` objects (only ``connection == "ssh"`` ones are
    looked at); ``inventory``: its path, named when a var's line is unknown; ``known_hosts``: the
    ``--known-hosts`` option; ``accept_new_host_keys``: when set, a known_hosts file that does not exist yet
    is where new keys will be recorded, so only its folder must exist.

    Raises:
        ConfigError: one line, ``<file>:<line>: host <name>: <var> <path> <what is wrong>`` (for the option:
            ``--known-hosts <path>: ...``).
    """
    seen: dict[str, str | None] = {}

    def known_hosts_problem(path: str) -> str | None:
        if os.path.isdir(path):
            return "is a folder, not a known_hosts file"
        if os.path.exists(path):
            return known_hosts_text_problem(path) if os.access(path, os.R_OK) else "is not readable"
        if not accept_new_host_keys:
            return "does not exist; to record host keys there on first use, add --accept-new-host-keys"
        folder = os.path.dirname(os.path.abspath(path))
        return None if os.path.isdir(folder) else f"cannot be created: folder {folder} does not exist"

    ssh_hosts = [h for h in hosts if h.connection == "ssh"]
    if known_hosts and ssh_hosts:
        why = known_hosts_problem(os.path.expanduser(known_hosts))
        if why:
            raise ConfigError(f"--known-hosts {shown_path(known_hosts)}: {why}")
    for h in ssh_hosts:
        if h.key_file:
            path = os.path.expanduser(h.key_file)
            if path not in seen:
                seen[path] = _key_problem(path)
            if seen[path]:
                var = next((v for v in _KEY_VARS[::-1] if h.vars.get(v) is not None), "ansible_ssh_private_key_file")
                raise ConfigError(f"{h.where(var, inventory)}: host {h.name}: {var} {h.key_file} {seen[path]}")
        var = next((v for v in KNOWN_HOSTS_VARS if h.vars.get(v)), None)
        if var:
            path = os.path.expanduser(str(h.vars[var]))
            key = "known_hosts:" + path
            if key not in seen:
                seen[key] = known_hosts_problem(path)
            if seen[key]:
                raise ConfigError(f"{h.where(var, inventory)}: host {h.name}: {var} {h.vars[var]} {seen[key]}")


def _is_own_ip(address: str) -> bool | None:
    """Whether IP literal ``address`` belongs to this machine (a socket can bind to it), None for a name."""
    import ipaddress
    import socket

    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    if ip.is_loopback or ip.is_unspecified:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.bind((address, 0))
        return True
    except OSError:
        return False


def check_local_addresses(hosts: Iterable[Any], inventory: str) -> None:
    """Refuse a host with ``ansible_connection=local`` whose ``ansible_host`` is an IP address of another
    machine (``[all:vars] ansible_connection=local`` left over from a trial on a fleet inventory): its probes
    would run on this controller and their verdict be filed under a node never touched. An address of this
    machine (loopback, or one a socket binds to), a host name (not resolved here) and a replayed host
    (``gpuaccept_replay``) are fine. Raises ConfigError naming ``file:line`` and the host."""
    for h in hosts:
        if h.connection != "local" or h.vars.get("gpuaccept_replay"):
            continue
        var = next((v for v in ("ansible_ssh_host", "ansible_host") if h.vars.get(v) is not None), None)
        if var and _is_own_ip(str(h.address)) is False:
            conn = h.where("ansible_connection", inventory)
            raise ConfigError(f"{h.where(var, inventory)}: host {h.name}: {var} {h.address} is another machine, but "
                              f"ansible_connection=local (at {conn}) runs its probes on this controller: drop one "
                              f"of the two")
