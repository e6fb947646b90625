"""Inventory variables gpuaccept understands, parsed and validated once, before any node is touched.

:func:`check_hosts` is called from the plugin's ``pytest_configure`` for every selected host; the first bad
variable stops the run with exit code 4 and one line naming the file and line that set it, the host, the
variable and what is wrong (``inventory.ini:12: host gpu07 var storage_limits: unknown key 'seq_raed_gbps'
(known: ...)``). A variable gpuaccept does not know is left alone: inventories carry Ansible's own.

The storage variables are checked by :mod:`gpuaccept.config.storage` (its validators, called here, are the
ones the suites use); the connection variables by the inventory reader. Every other variable has its one
validator in :data:`VARS`; a layer that reads a var typed asks :func:`parse_vars` (gpuaccept.config.multinode
does for the inter-node all-reduce vars), so a value is judged by one rule wherever it is read. Numbers must be finite (a limit of
infinity or NaN would switch its check off). Environment variable names in ``nccl_env`` must be portable
names (:data:`ENV_NAME`): a name is the one part of ``NAME=value`` the shell cannot be told
to take literally.
"""
from __future__ import annotations

import functools
import math
import os
import re
from typing import Any, Callable, Iterable, Mapping

from gpuaccept.config import storage as sl
from gpuaccept.errors import ConfigError
from gpuaccept.config.shown import shown

#: a portable environment variable name (IEEE Std 1003.1, "Environment Variables"); the shell cannot be
#: told where a name ends, so names are checked, never quoted (gpuaccept.transport.shell)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def bad_env_name(name: Any) -> str | None:
    """Why ``name`` cannot be an environment variable name, or None when it can."""
    if not isinstance(name, str):
        return f"{shown(name)} is not text"
    if not ENV_NAME.match(name):
        return f"{shown(name)} is not a variable name (letters, digits and _, not starting with a digit)"
    return None


__all__ = ["VARS", "HostVarError", "check_host", "check_hosts", "parse_vars", "parse_device_list", "PROBE_ARG_KEYS",
           "become_user", "known_hosts_file"]


class HostVarError(ConfigError):
    """An inventory variable gpuaccept reads is malformed; the message names file:line, host and variable."""


class _Bad(Exception):
    """A validator's complaint, without the host and file (added by :func:`check_host`). ``attached``: the
    text goes right after the variable's name (it starts with ``.key:`` or ``:``)."""

    def __init__(self, msg: str, attached: bool = False):
        super().__init__(msg)
        self.attached = attached


# ---------------------------------------------------------------------------------------------- validators

def _finite(value: Any) -> None:
    """Refuse a non-finite float anywhere inside ``value`` (lists and mappings walked)."""
    stack = [value]
    seen = 0
    while stack:
        v = stack.pop()
        seen += 1
        if isinstance(v, float) and not math.isfinite(v):
            raise _Bad(f"{shown(v)} is not a finite number")
        if isinstance(v, Mapping):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        if seen > 100_000:
            raise _Bad("holds more than 100,000 values")


def _text(value: Any) -> str:
    if isinstance(value, str) and not value.strip():
        raise _Bad("is empty")
    if not isinstance(value, str):
        raise _Bad(f"expected text, got {type(value).__name__} {shown(value)}")
    if "\x00" in value or "\n" in value:
        raise _Bad(f"expected one line of text, got {shown(value)}")
    return value


def _word(value: Any) -> str:
    """Text without whitespace (an interface or device name)."""
    text = _text(value)
    if any(c.isspace() for c in text):
        raise _Bad(f"expected one word, got {shown(value)}")
    return text


def _address(value: Any) -> str:
    """A host name or IP address (``nccl_master_addr``): one word that an address can be
    (gpuaccept.config.addresses.address_problem: no ``$ ( ) ;``, brackets or leading ``-``)."""
    from gpuaccept.config.addresses import address_problem

    text = _word(value)
    why = address_problem(text)
    if why:
        raise _Bad(f"{shown(text)}: {why}")
    return text


def _number(lo: float | None = None, hi: float | None = None, integer: bool = False) -> Callable[[Any], Any]:
    """A number (or text that reads as one, as the suites' ``int()``/``float()`` do), finite, in [lo, hi]."""
    kind = "an integer" if integer else "a number"

    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise _Bad(f"expected {kind}, got {type(value).__name__} {shown(value)}")
        try:
            n = int(value) if integer and not isinstance(value, float) else float(value)
        except (TypeError, ValueError, OverflowError):
            raise _Bad(f"expected {kind}, got {shown(value)}") from None
        if isinstance(n, float) and not math.isfinite(n):
            raise _Bad(f"expected a finite number, got {shown(value)}")
        if integer and isinstance(value, float) and not n.is_integer():
            raise _Bad(f"expected {kind}, got {shown(value)}")
        if lo is not None and n < lo or hi is not None and n > hi:
            span = f">= {lo:g}" if hi is None else f"between {lo:g} and {hi:g}" if lo is not None else f"<= {hi:g}"
            raise _Bad(f"expected {kind} {span}, got {shown(value)}")
        return int(n) if integer else n

    return check


def _watts(value: Any) -> float:
    """A power limit in W (``gpu_power_limit_w``): a number > 0, written as one (the suites compare it with
    NVML's enforced limit as a number; text such as "600" or "600W" would be ignored there, so it is refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise _Bad(f"expected a positive number of watts, got {type(value).__name__} {shown(value)}")
    return float(value)


def _one_of(*choices: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise _Bad(f"expected one of {', '.join(choices)}, got {shown(value)}")
        return value
    return check


#: host vars naming an extra known_hosts file for a host, the first set one wins (:func:`known_hosts_file`, read
#: into the inventory's Host for the transport; gpuaccept.config.inputcheck checks the file before any node is touched)
KNOWN_HOSTS_VARS = ("gpuaccept_known_hosts", "ansible_ssh_known_hosts_file")

#: Ansible's boolean spellings (ansible.module_utils.parsing.convert_bool: BOOLEANS_TRUE / BOOLEANS_FALSE)
_TRUE = frozenset({"y", "yes", "on", "1", "true", "t"})
_FALSE = frozenset({"n", "no", "off", "0", "false", "f"})


def _ansible_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, (str, int)) else None
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise _Bad(f"expected a boolean (yes/no, true/false, 1/0), got {shown(value)}")


def _become_method(value: Any) -> str:
    if value != "sudo":
        raise _Bad(f"{shown(value)} is not supported: gpuaccept becomes another user with 'sudo -n' only (give the login "
                   "user passwordless sudo, or log in as the user the probes should run as)")
    return value


def _no_password(value: Any) -> Any:
    raise _Bad("gpuaccept types no passwords: give the login user passwordless sudo (NOPASSWD) for "
               "ansible_become, or log in as the user the probes should run as")


def _no_login_password(value: Any) -> Any:
    raise _Bad("gpuaccept logs in with keys only (ssh-agent, ansible_ssh_private_key_file, or IdentityFile in "
               "~/.ssh/config): a password here would never be used, and every test of the host would fail to log in")


def become_user(host_vars: Mapping[str, Any]) -> str | None:
    """The user every command on the host runs as, through ``sudo -n -u USER`` (gpuaccept.transport.ssh), or None
    when the host does not set ``ansible_become`` true. ``ansible_become_user`` defaults to root, as in Ansible.
    Read once per host when the inventory is loaded (:attr:`gpuaccept.config.inventory.Host.become_user`); a
    value :func:`check_host` refuses reads as None here (the run stops on it before any node is touched)."""
    try:
        if host_vars.get("ansible_become") is None or not _ansible_bool(host_vars["ansible_become"]):
            return None
        return _word(host_vars.get("ansible_become_user") or "root")
    except _Bad:
        return None


def known_hosts_file(host_vars: Mapping[str, Any]) -> str | None:
    """The extra known_hosts file the host names (the first set var of :data:`KNOWN_HOSTS_VARS`), as written, or
    None. Read once per host when the inventory is loaded (:attr:`gpuaccept.config.inventory.Host.known_hosts`)."""
    return next((str(host_vars[v]) for v in KNOWN_HOSTS_VARS if host_vars.get(v)), None)


def parse_device_list(value) -> tuple[bool, list[tuple[str, int | None]]]:
    """An inventory device list (``"mlx5_0,mlx5_3:1"``, ``["eth0"]``, ``"^=docker0"``) as ``(exclude,
    [(name, port or None)])``. A leading ``^`` excludes; a leading ``=`` (exact names, NCCL's form) is
    accepted and dropped: gpuaccept always passes exact names. Raises ValueError on an empty name or a
    port that is not a number."""
    if isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
        text = ",".join(items)
    else:
        text = str(value).strip()
    exclude = text.startswith("^")
    text = text.lstrip("^").lstrip("=")
    out = []
    for part in text.split(","):
        part = part.strip().lstrip("=")
        name, _, port = part.partition(":")
        if not name:
            raise ValueError(f"empty device name in {shown(value)}")
        if port and not port.isdigit():
            raise ValueError(f"port of {shown(part)} must be a number in {shown(value)}")
        out.append((name, int(port) if port else None))
    return exclude, out


def _device_list(value: Any) -> str:
    """``nccl_socket_ifname`` / ``nccl_ib_hca``: one word that :func:`parse_device_list` reads."""
    text = _word(value)
    try:
        parse_device_list(text)
    except ValueError as e:
        raise _Bad(str(e)) from None
    return text


#: probe arguments an inventory may set through nccl_internode_probe_args (the rest belong to the launcher,
#: gpuaccept.runner.multinode)
PROBE_ARG_KEYS = {"backend", "min_bytes", "max_bytes", "factor", "iters", "warmup", "reps", "dtype", "timeout_s", "api",
                  "timer", "graph", "graph_max_bytes", "oop"}


def _probe_args(value: Any) -> dict:
    out = _mapping(value)
    unknown = sorted(set(out) - PROBE_ARG_KEYS)
    if unknown:
        raise _Bad(f"unknown argument(s) {', '.join(map(str, unknown))} (known: {', '.join(sorted(PROBE_ARG_KEYS))})")
    return out


def kernel_log_sources(host_vars: Mapping[str, Any]) -> dict:
    """The kernel-log probes' ``sources`` argument from a host's ``kernel_log_paths`` (files read in place of
    journalctl, dmesg and kern.log: a saved log, a node whose log is elsewhere): ``{"sources": [...]}``, or ``{}``
    where the variable is not set. Every probe that reads the kernel log takes it (xid_events in the health layer
    and the burn-in, host_kernel_log in the host layer), so one node's log is one log for every layer."""
    paths = host_vars.get("kernel_log_paths")
    if not paths:
        return {}
    return {"sources": [paths] if isinstance(paths, str) else list(paths)}


def _log_paths(value: Any) -> list[str]:
    """``kernel_log_paths``: one absolute path or a list of them (files the host layer reads as the kernel log)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise _Bad(f"expected an absolute path or a list of them, got {type(value).__name__} {shown(value)}")
    for p in items:
        if not isinstance(p, str) or not p.startswith("/") or "\x00" in p or "\n" in p:
            raise _Bad(f"{shown(p)} is not an absolute path")
    return list(items)


def _abs_path(value: Any) -> str:
    """``host_sysfs_root``: one absolute path (the folder the host layer reads as /sys)."""
    if not isinstance(value, str):
        raise _Bad(f"expected an absolute path, got {type(value).__name__} {shown(value)}")
    return _log_paths(value)[0]


def _words(value: Any) -> list[str]:
    if not isinstance(value, (list, tuple)):
        raise _Bad(f"expected a list of names, got {type(value).__name__} {shown(value)}")
    return [_word(v) for v in value]


def _nccl_env(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _Bad(f"expected a mapping of environment variables (e.g. {{NCCL_NVLS_ENABLE: '0'}}), got "
                   f"{type(value).__name__} {shown(value)}" + (" (in an INI [group:vars] section write it as a "
                                                          "Python dict: {'NAME': 'value'})" if isinstance(value, str) else ""))
    out = {}
    for name, v in value.items():
        why = bad_env_name(name)
        if why:
            raise _Bad(f"environment variable {why}")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise _Bad(f"{name}: expected text or a number, got {type(v).__name__} {shown(v)}"
                       + (" (write 1 or 0)" if isinstance(v, bool) else ""))
        if isinstance(v, str) and "\x00" in v:
            raise _Bad(f"{name}: a NUL byte cannot be in an environment variable")
        _finite(v)
        out[name] = str(v)
    return out


def _mapping(value: Any) -> dict:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _Bad(f"expected a mapping of names to values, got {type(value).__name__} {shown(value)}")
    _finite(value)
    return dict(value)


def _ssh_args(value: Any) -> str:
    """``ansible_ssh_common_args`` / ``ansible_ssh_extra_args``: text the transport splits as a shell would
    (unbalanced quotes refused), whose ports (``-p``, ``-o Port=``) are TCP ports, whose ``-F`` names a file, and
    whose ProxyJump hops (``-J``, ``-o ProxyJump=``) read as ``[user@]host[:port]`` with a TCP port: what :mod:`gpuaccept.config.sshconfig` does with it at
    connect time, done here so a typo stops the run instead of failing every connection."""
    from gpuaccept.config.sshconfig import parse_jump, ssh_args_options

    if not isinstance(value, str):
        raise _Bad(f"expected ssh arguments as text, got {type(value).__name__} {shown(value)}")
    try:
        options = ssh_args_options(value, "")
    except ConfigError as err:
        raise _Bad(str(err).lstrip(": ")) from None
    for key, spec in options:
        if key == "port" and not (spec.isdigit() and 0 < int(spec) < 65536):
            raise _Bad(f"port {shown(spec)}: not a TCP port")
        if key == "configfile" and not os.path.isfile(os.path.expanduser(spec)):
            raise _Bad(f"-F {shown(spec)}: no such ssh config file")
        if key != "proxyjump" or spec.lower() == "none":
            continue
        try:
            hops = parse_jump(spec)
        except ValueError:
            hops = None
        if not hops or any(not h or (p is not None and not 0 < p < 65536) for _, h, p in hops):
            raise _Bad(f"ProxyJump {shown(spec)}: expected [user@]host[:port][,...] with a TCP port")
    return value


def _replay_dir(value: Any) -> str:
    path = _text(value)
    if not os.path.isdir(path):
        raise _Bad(f"{shown(path)} is not a folder of saved probe documents")
    return path


def _with_host(var: str, fn: Callable[[Any, str | None], Any]) -> Callable[[Any, str], Any]:
    """A gpuaccept.config.storage validator (value, host) -> parsed, its StorageConfigError made a complaint."""
    def check(value: Any, host: str) -> Any:
        _finite(value)
        try:
            return fn(value, host)
        except sl.StorageConfigError as err:
            text, prefix = str(err), f"{host}: inventory var {var}"
            if text.startswith(prefix):
                raise _Bad(text[len(prefix):], attached=True) from None
            raise _Bad(text) from None
    return check


def _kept(check: Callable[[Any, str | None], Any]) -> Callable[[Any, str | None], Any]:
    """A validator that may only check (returning None) made to return the value it accepted."""
    def run(value: Any, host: str | None) -> Any:
        out = check(value, host)
        return value if out is None else out
    return run


def _plain(fn: Callable[[Any], Any]) -> Callable[[Any, str], Any]:
    return lambda value, host: fn(value)


#: var -> validator(value, host) returning the parsed value; raises _Bad. Where each var is used is in docs/inventory.md
VARS: dict[str, Callable[[Any, str], Any]] = {
    # GPU identity
    "gpu_sku": _plain(_word),
    "gpus_per_node": _plain(_number(1, 1024, integer=True)),
    "gpu_power_limit_w": _plain(_watts),  # the power limit the site sets on purpose (gpuaccept/judging/drift.py)
    # connection (types checked by the inventory reader; here what reaches a command line)
    "ansible_python_interpreter": _plain(_text),
    "gpuaccept_known_hosts": _plain(_text),
    "ansible_ssh_known_hosts_file": _plain(_text),
    "gpuaccept_replay": _plain(_replay_dir),
    "ansible_ssh_common_args": _plain(_ssh_args),
    "ansible_ssh_extra_args": _plain(_ssh_args),
    # privilege escalation: sudo -n only (gpuaccept.transport.ssh.wrap_command), never a password
    "ansible_become": _plain(_ansible_bool),
    "ansible_become_user": _plain(_word),
    "ansible_become_method": _plain(_become_method),
    "ansible_become_pass": _plain(_no_password),
    "ansible_become_password": _plain(_no_password),
    "ansible_password": _plain(_no_login_password),
    "ansible_ssh_pass": _plain(_no_login_password),
    "ansible_ssh_password": _plain(_no_login_password),
    # NCCL, single and multi-node (suites/test_nccl.py, suites/test_nccl_multinode.py)
    "nccl_socket_ifname": _plain(_device_list),
    "nccl_ib_hca": _plain(_device_list),
    "nccl_env": _plain(_nccl_env),
    "nccl_backend": _plain(_one_of("nccl", "gloo")),
    "nccl_expect_transport": _plain(_text),
    "nccl_master_addr": _plain(_address),
    "nccl_internode_busbw_gbps": _plain(_number(0)),
    "nccl_internode_at_bytes": _plain(_number(1, integer=True)),
    "nccl_internode_probe_args": _plain(_probe_args),
    "nccl_pairwise_slow_pct": _plain(_number(0, 100)),
    "nccl_pairwise_seed": _plain(_number(integer=True)),
    "nccl_pairwise_rounds": _plain(_number(1, 1000, integer=True)),
    "nccl_ranks_per_node": _plain(_number(1, 1024, integer=True)),
    "nccl_round_timeout_s": _plain(_number(1, integer=True)),
    "nccl_stall_s": _plain(_number(1, integer=True)),
    # storage and GPUDirect: the validators of gpuaccept/config/storage.py, one per variable
    **{name: _with_host(name, _kept(check)) for name, check in sl.VALIDATORS.items()},
    "storage_limits": _with_host("storage_limits", sl.storage_limits),  # parsed into Limits
    "ib_hcas": _plain(_words),
    "ib_rate_gbps": _plain(_number(0)),
    # the host layer (gpuaccept/suites/test_host.py): installed host memory in GiB (2**30 bytes), and log files read
    # in place of journalctl/dmesg/kern.log (saved logs)
    "host_memory_gb": _plain(_number(0.001)),
    "kernel_log_paths": _plain(_log_paths),
    "host_sysfs_root": _plain(_abs_path),  # sysfs mounted elsewhere (a container's /host/sys): EDAC, GPU PCI scan, block devices
    # Slurm: the node name --slurm-drain/--slurm-resume use (gpuaccept/scaleout/drain.py; default: up to the first dot)
    "slurm_node_name": _plain(_word),
    # Kubernetes: the node name --k8s-cordon/--k8s-resume and the manifests use (gpuaccept/scaleout/k8s/; default: the host name)
    "k8s_node_name": _plain(_word),
}


#: the Ansible connection variables gpuaccept reads (gpuaccept.config.inventory, gpuaccept.transport): a typo of one
#: silently falls back to a default (another interpreter, port or key), so it is refused like a typo of ours
ANSIBLE_VARS = ("ansible_connection", "ansible_group_priority", "ansible_host", "ansible_port",
                "ansible_private_key_file", "ansible_python_interpreter", "ansible_ssh_common_args",
                "ansible_ssh_extra_args", "ansible_ssh_host", "ansible_ssh_known_hosts_file", "ansible_ssh_port",
                "ansible_ssh_private_key_file", "ansible_ssh_user", "ansible_user")


def _edits(a: str, b: str, limit: int) -> int | None:
    """Optimal-string-alignment distance of ``a`` and ``b`` (insertions, deletions, substitutions and swaps
    of two neighbours) when it is at most ``limit``, else None. Only the cells within ``limit`` of the
    diagonal are computed, and a row whose every cell is past ``limit`` ends it: O(len(a) x limit)."""
    if abs(len(a) - len(b)) > limit:
        return None
    over = limit + 1  # any cost above limit, kept as this
    prev2: list[int] | None = None
    prev = [j if j <= limit else over for j in range(len(b) + 1)]
    for i, ca in enumerate(a, 1):
        cur = [over] * (len(b) + 1)
        cur[0] = i if i <= limit else over
        lo, hi = max(1, i - limit), min(len(b), i + limit)
        for j in range(lo, hi + 1):
            cb = b[j - 1]
            v = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if prev2 is not None and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                v = min(v, prev2[j - 2] + 1)
            cur[j] = min(v, over)
        if min(cur[lo - 1:hi + 1]) > limit:
            return None
        prev2, prev = prev, cur
    return prev[-1] if prev[-1] <= limit else None


#: the names a typo is compared with (:func:`_near_miss`), with the number of edits each allows
_KNOWN_NAMES = tuple((known, 2 if len(known) >= 10 else 1) for known in (*VARS, *ANSIBLE_VARS))


@functools.lru_cache(maxsize=4096)
def _near_miss(var: str) -> str | None:
    """The gpuaccept or Ansible connection variable ``var`` looks like a typo of, else None (then it is the
    operator's own). A typo: one edit away (a letter added, dropped, changed, or two neighbours swapped:
    ``nccl_evn``, ``ncl_env``), two for names of 10 letters or more (``nvme_cnt``); names under 6 letters are
    never taken for typos. Answered once per distinct name (cached: 10,000 hosts carrying an operator
    variable of their own ask the same question 10,000 times); a name whose length differs from a known one
    by more than its allowed edits is not compared with it (the distance is at least the difference), so a
    long name costs nothing."""
    if len(var) < 6 or var in ANSIBLE_VARS:
        return None
    best = None
    for known, allowed in _KNOWN_NAMES:
        if abs(len(var) - len(known)) > allowed:  # the distance is at least the difference: not a typo of it
            continue
        d = _edits(var, known, allowed)
        if d and (best is None or d < best[0]):
            best = (d, known)
    return best[1] if best else None


def check_host(host: Any, default_where: str, known_skus: Iterable[str] | None = None,
               _memo: dict | None = None) -> dict[str, Any]:
    """Validate one host's vars; return var -> parsed value for every var of :data:`VARS` it sets.

    ``host``: a :class:`gpuaccept.config.inventory.Host` (``vars``, ``name``, ``where(var)``); ``default_where``: the
    inventory file, named when a var's line is unknown; ``known_skus``: threshold files' SKU names (a
    ``gpu_sku`` outside them is refused). ``_memo``: shared between hosts so a group's value is checked once.

    Raises:
        HostVarError: one line, ``<file>:<line>: host <name> var <var>: <what is wrong>``.
    """
    memo = {} if _memo is None else _memo
    out: dict[str, Any] = {}
    for var, value in host.vars.items():
        check = VARS.get(var)
        if check is None:
            near = _near_miss(var) if isinstance(var, str) else None
            if near:
                where = host.where(var, default_where) if hasattr(host, "where") else default_where
                raise HostVarError(f"{where}: host {host.name} var {var}: not a variable gpuaccept knows; did you mean "
                                   f"{near}? (a mistyped variable is silently ignored: e.g. gpus_per_node or gpu_sku "
                                   f"drop the declared-GPU check)")
            continue
        if value is None:
            continue
        key = (var, id(value))
        hit = memo.get(key)
        if hit is not None and hit[0] is value:
            out[var] = hit[1]
            continue
        try:
            parsed = check(value, host.name)
            if var == "gpu_sku" and known_skus is not None and parsed not in known_skus:
                raise _Bad(f"unknown SKU {shown(parsed)}; known: {', '.join(sorted(known_skus))}")
        except _Bad as err:
            where = host.where(var, default_where) if hasattr(host, "where") else default_where
            raise HostVarError(f"{where}: host {host.name} var {var}{'' if err.attached else ': '}{err}") from None
        memo[key] = (value, parsed)
        out[var] = parsed
    if out.get("ansible_become") and getattr(host, "connection", None) == "local":
        import pwd

        me = pwd.getpwuid(os.geteuid()).pw_name
        if out.get("ansible_become_user", "root") != me:  # becoming oneself (root, as root) is nothing to do
            where = host.where("ansible_become", default_where) if hasattr(host, "where") else default_where
            raise HostVarError(f"{where}: host {host.name} var ansible_become: not with ansible_connection=local: "
                               f"the local host's probes run as the user running pytest ({me}), not as "
                               f"{out.get('ansible_become_user', 'root')} (run pytest as that user instead)")
    return out


def parse_vars(host_vars: Mapping[str, Any], names: Iterable[str], label: Callable[[str], str]) -> dict[str, Any]:
    """The vars ``names`` that ``host_vars`` sets (not None), parsed by their validators in :data:`VARS`: what
    :func:`check_host` accepted before any node was touched, read again by a layer that needs the values
    typed (gpuaccept.config.multinode). Raises ConfigError ``<label(var)>: <what is wrong>`` (``label``: e.g.
    ``lambda v: f"group var {v}"``)."""
    out: dict[str, Any] = {}
    for var in names:
        value = host_vars.get(var)
        if value is None:
            continue
        try:
            out[var] = VARS[var](value, "")
        except _Bad as err:
            raise ConfigError(f"{label(var)}{'' if err.attached else ': '}{err}") from None
    return out


def check_hosts(hosts: Iterable[Any], default_where: str,
                known_skus: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """:func:`check_host` for every host: host name -> {var: parsed value}. Raises HostVarError (the first)."""
    memo: dict = {}
    skus = set(known_skus) if known_skus is not None else None
    return {h.name: check_host(h, default_where, skus, memo) for h in hosts}
