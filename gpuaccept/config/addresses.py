"""What a host address and a login name can be: checked at load, before any node is touched.

``ansible_host``, ``ansible_ssh_host`` and ``nccl_master_addr`` holding ``$ ( ) ;`` or spaces, and an
``ansible_user`` holding them, used to pass and fail at run time with obscure errors ("RuntimeError: argument
not found", "cannot resolve ...", "authentication as ... failed"). Used by the inventory reader
(gpuaccept.config.inventory.resolve) and the host variable check (gpuaccept.config.hostvars).
"""
from __future__ import annotations

import re

from gpuaccept.config.shown import shown

__all__ = ["BRACKET_PORT", "address_problem", "user_problem"]

#: an INI host written ``[IPv6]:port``
BRACKET_PORT = re.compile(r"^\[([0-9A-Fa-f:.]+)\]:([0-9]+)$")
# what a host address (a DNS name, IPv4, IPv6 with a %zone) holds: letters, digits, . - _ : %
_ADDRESS_CHAR = re.compile(r"[^\w.:%-]")
# a login name (POSIX portable names, plus what SSSD and winbind accounts hold): letters, digits, . _ -,
# @ (user@REALM), \ (DOMAIN\user), a trailing $ (machine accounts); not starting with -
_USER = re.compile(r"[\w.@\\][\w.@\\-]*\$?")


def address_problem(address: str) -> str | None:
    """Why ``address`` (an ``ansible_host`` or ``nccl_master_addr`` value) can be no address to connect to,
    else None: empty, holding whitespace or a character no host name or IP address holds (``$ ( ) ;``...),
    starting with ``-``, or an IPv6 address in brackets (``[2001:db8::7]``, ``[::1]:2200``: brackets belong to INI
    host names; ssh and paramiko both fail with "cannot resolve [::1]" on every connection, Ansible too)."""
    if not address.strip():
        return "is empty"
    if any(c.isspace() for c in address):
        return "holds whitespace"
    m = BRACKET_PORT.match(address) or re.fullmatch(r"\[([0-9A-Fa-f:.]+(?:%[\w.-]+)?)\]", address)
    if m:
        port = f", and {m.group(2)} in ansible_port" if m.lastindex and m.lastindex >= 2 else ""
        return f"write the IPv6 address without brackets ({m.group(1)}){port}"
    bad = _ADDRESS_CHAR.search(address)
    if bad:
        return (f"{shown(bad.group())} cannot be in a host name or IP address (letters, digits, '.', '-', '_', ':' and "
                "'%' can)")
    if address.startswith("-"):
        return "starts with '-' (ssh would read it as an option)"
    return None


def user_problem(user: str) -> str | None:
    """Why ``user`` (an ``ansible_user`` value) can be no login name, else None."""
    if _USER.fullmatch(user):
        return None
    return "cannot be a user name (letters, digits, . _ - @ and \\, not starting with -; a $ only at the end)"
