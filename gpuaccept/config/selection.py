"""What a run is given, read and refused before any node is touched (exit 4): the options' values, the
threshold files (and a site's layered over them), the inventory, the ``--limit``/``--shard`` selection and the
selected hosts' variables and connection files. One function, :func:`select`, called by the plugin's
``pytest_configure`` and by the ``gpuaccept`` command before pytest starts (gpuaccept.cli), so a
refusal and ``--list-hosts`` cost no more than these files' reading (benchmarks/refusal_cpu.py).

Imports only the config layer; nothing here imports pytest.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from gpuaccept.errors import ConfigError, ThresholdError
from gpuaccept.config.paths import shipped
from gpuaccept.config.shown import shown, shown_path

# numeric options: name -> (lowest allowed, whether the lowest itself is allowed, highest or None)
_NUMERIC_OPTIONS = {"probe_timeout": (0.0, False, None), "xid_window": (0.0, True, None),
                    "standout_pct": (0.0, False, 100.0), "burnin_minutes": (0.0, False, None),
                    "forks": (0.0, True, None)}


@dataclass
class Selection:
    """The run's input, checked: ``inventory`` (gpuaccept.config.inventory.Inventory), the selected ``hosts``
    (Host, inventory order), ``specs`` (sku -> SkuSpec), ``hostvars`` (host -> {var: parsed value}),
    ``inv_path`` (the inventory file, absolute) and ``warnings`` (one line per ignored --limit term)."""

    inventory: Any
    hosts: list
    specs: dict
    hostvars: dict
    inv_path: str
    warnings: list[str] = field(default_factory=list)


def check_options(getoption: Callable[..., Any]) -> None:
    """Refuse a numeric option that is not a finite number in its range, a --history or --prometheus-textfile
    in a system folder or naming no regular file (gpuaccept.config.outputs.check_output_file), a --history
    inside the --reports folder, and a
    --prometheus-textfile whose folder cannot be written, unless it is the ``--reports`` folder the run makes (a burn-in too short to be judged is the plugin's to refuse: the judging layer
    knows its windows). ``getoption(name, default)``: pytest's
    ``config.getoption`` or the same over an argparse namespace. Raises ConfigError (one line)."""
    from gpuaccept.config.inputcheck import check_empty_options
    check_empty_options(getoption)
    from gpuaccept.config.options import check_choices
    why = check_choices(getoption)
    if why:
        raise ConfigError(why)
    check_expression_syntax(getoption)
    for name, (low, low_ok, high) in _NUMERIC_OPTIONS.items():
        v = getoption(name, None)
        if v is None:
            continue
        ok = math.isfinite(v) and (v >= low if low_ok else v > low) and (high is None or v < high)
        if not ok:
            rng = f"{'>=' if low_ok else '>'} {low:g}" + (f" and < {high:g}" if high is not None else "")
            raise ConfigError(f"--{name.replace('_', '-')} {shown(v)}: expected a number {rng}")
    from gpuaccept.config.outputs import check_output_file
    hist = getoption("history", None)
    reports = getoption("reports", None)
    if hist and hist != "none":
        check_output_file(hist, "--history")
        if reports and os.path.abspath(hist).startswith(os.path.abspath(reports).rstrip(os.sep) + os.sep):
            raise ConfigError(f"--history {shown_path(hist)}: lies inside --reports {shown_path(reports)}, the folder of this run alone (new "
                              "or empty): the history keeps every run, give a file outside it")
        hist_folder = os.path.dirname(os.path.abspath(os.path.expanduser(hist)))
        if not os.path.isdir(hist_folder):  # a mistyped folder would start a second, empty history
            raise ConfigError(f"--history {shown_path(hist)}: folder {shown_path(hist_folder)} does not exist (the history is kept across "
                              "runs: make the folder, or name a file in one that exists)")
    prom = getoption("prometheus_textfile", None)
    if prom:
        check_output_file(prom, "--prometheus-textfile")
        folder = os.path.dirname(os.path.abspath(prom))
        made_by_the_run = bool(reports) and folder == os.path.abspath(reports)  # the report folder, made below
        if not made_by_the_run and (not os.path.isdir(folder) or not os.access(folder, os.W_OK)):
            raise ConfigError(f"--prometheus-textfile {shown_path(prom)}: folder {shown_path(folder)} does not exist or is not writable")


def project_path(rootpath: Path, path: str | None, default: str) -> str:
    """``path`` made absolute, else the project's own ``<rootpath>/<default>`` when it exists, else the one
    shipped in the package (gpuaccept/config/paths.py): an installed gpuaccept runs from any folder."""
    if path:
        return os.path.abspath(path)
    own = rootpath / default
    return str(own) if own.exists() else shipped(default)


def select(getoption: Callable[..., Any], rootpath: Path, raw_args: list[str],
           shared: tuple[str, str] | None = None) -> Selection:
    """Check the options, load the threshold files and the inventory, select the hosts and check them.

    ``raw_args``: the command line as typed (to tell ``--limit @FILE``, which pytest expands itself);
    ``shared``: (path, text) of the inventory read once by the xdist controller. Raises ConfigError (or a
    subclass: InventoryError, PatternError, ThresholdError, HostVarError) with one line naming file:line or
    host."""
    from gpuaccept.config.hostvars import check_hosts
    from gpuaccept.config.inputcheck import check_connection_files, check_local_addresses
    from gpuaccept.config.inventory import load_inventory
    from gpuaccept.config.limitfile import hosts_from_file
    from gpuaccept.config.patterns import shard, split_pattern
    from gpuaccept.config.sitelimits import layer_site
    from gpuaccept.config.thresholds import load_all
    inv_path = project_path(rootpath, getoption("inventory", None), "inventory/localhost.ini")
    check_options(getoption)
    specs = load_all(project_path(rootpath, getoption("thresholds", None), "thresholds"))
    if getoption("site_thresholds", None):  # a site's changes, check by check (gpuaccept/config/sitelimits.py)
        specs = layer_site(getoption("site_thresholds", None), specs)
    sku = getoption("sku", None)
    if sku and sku not in specs:
        raise ThresholdError(f"--sku {shown(sku)} is not a known SKU; known: {', '.join(sorted(specs))}")
    inv = load_inventory(*shared) if shared else load_inventory(inv_path)
    limit = getoption("limit", None)
    warnings: list[str] = []  # an unmatched &/! term: ignored with a warning, as Ansible
    if any(a == "--limit" and raw_args[i + 1:i + 2] and raw_args[i + 1].startswith("@")
           for i, a in enumerate(raw_args)):
        raise ConfigError("--limit @FILE: pytest expands @FILE arguments itself; write --limit=@FILE")
    if limit and limit.startswith("@") and "," not in limit:  # a host list file, as Ansible's --limit @retry_file
        wanted = set(hosts_from_file(limit[1:], [h.name for h in inv.select(None)]))
        hosts = [h for h in inv.select(None) if h.name in wanted]
    else:  # a file among other terms adds its hosts (an empty one none: the other terms still select)
        files = {t: listed_hosts(t[1:], inv) for t in (split_pattern(limit) if limit else []) if t.startswith("@")}
        hosts = inv.select(limit, warnings=warnings, files=files)
    hosts = [inv.hosts[n] for n in shard([h.name for h in hosts], getoption("shard", None))]
    hostvars = check_hosts(hosts, inv_path, None if sku else specs)  # --sku wins over gpu_sku
    try:
        check_connection_files(hosts, inv_path, getoption("known_hosts", None),
                               getoption("accept_new_host_keys", False))
    except ConfigError as e:
        if not getoption("list_hosts", False):
            raise
        # --list-hosts connects to nothing: a key or known_hosts file that a run would refuse is said, not fatal
        warnings.append(f"{e} (a run would refuse it)")
    check_local_addresses(hosts, inv_path)
    return Selection(inv, hosts, specs, hostvars, inv_path, warnings)


def listed_hosts(path: str, inv) -> list[str]:
    """The hosts a host list file names (gpuaccept.config.limitfile.hosts_from_file), none for a file listing
    none. Raises ConfigError as that does."""
    from gpuaccept.config.limitfile import NothingToRerun, hosts_from_file
    try:
        return hosts_from_file(path, [h.name for h in inv.select(None)])
    except NothingToRerun:
        return []


def list_hosts_text(hosts, sku: str | None = None) -> str:
    """``--list-hosts`` output: one line per selected host with where it is reached, SKU and GPUs declared, each
    column as wide as its widest entry (two spaces between columns; the last one not padded). Where: the address
    and port the SSH transport connects to (gpuaccept.config.sshconfig.resolve: the inventory, its ssh
    arguments' ``-p``/``-o Port=``/``-F``, ~/.ssh/config), with the first ProxyJump hop; ``sku``: ``--sku``, which
    wins over every host's gpu_sku. Raises ConfigError for an ssh config file that cannot be read."""
    from gpuaccept.config.sshconfig import resolve

    rows = []
    for h in hosts:
        where = "ansible_host=-"
        if h.connection != "local":
            t = resolve(h)
            addr = f"[{t.hostname}]" if ":" in t.hostname else t.hostname  # IPv6 as Ansible writes it
            hop = (t.proxy_jump or "").split(",")[0]
            where = f"ansible_host={addr}:{t.port}" + (f" via {hop}" if hop else " via ProxyCommand" if t.proxy_command else "")
        rows.append([str(h.name), where, f"connection={h.connection}",
                     f"gpu_sku={sku} (--sku)" if sku else f"gpu_sku={h.vars.get('gpu_sku') or '-'}",
                     f"gpus_per_node={h.vars.get('gpus_per_node') or '-'}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))] if rows else []
    lines = [f"  hosts ({len(hosts)}):"]
    lines += ["    " + "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows]
    return "\n".join(lines)


#: words of a ``-m`` expression that are its grammar, not markers (pytest's mark expression)
MARK_WORDS = frozenset({"and", "or", "not"})


def check_expression_syntax(getoption: Callable[..., Any]) -> None:
    """Refuse a ``-m`` or ``-k`` expression pytest cannot parse (``-m '(health'``, ``-k 'ecc and ('``) before
    the report folder is made: pytest finds it only while deselecting, after the session has started, and every
    test would be reported as not run. Parsed by pytest's own expression grammar (``_pytest.mark.expression``,
    the one ``-m`` and ``-k`` use); where a pytest lacks that module the check is pytest's alone. Raises
    ConfigError (one line, with pytest's column and reason)."""
    try:
        from _pytest.mark.expression import Expression
    except ImportError:
        return
    for flag, name in (("-m", "markexpr"), ("-k", "keyword")):
        expr = getoption(name, None)
        if not expr:
            continue
        try:
            Expression.compile(expr)
        except Exception as e:  # SyntaxError from pytest 8.4 on, ParseError before it
            column = getattr(e, "offset", None) or getattr(e, "column", None)
            reason = getattr(e, "msg", None) or getattr(e, "message", None) or str(e)
            at = f"at column {column}: " if column else ""
            raise ConfigError(f"{flag} {shown(expr)}: not an expression pytest can read: {at}{reason}") from None


def check_markexpr(expr: str, known: set[str], layers: tuple[str, ...] = ()) -> None:
    """Refuse a ``-m`` expression that names a marker no suite or plugin registered, where it would select by
    it (``-m helth`` selects nothing, ``-m 'health or nccll'`` health alone). A name right after ``not`` is
    refused only when it is near a known one (``not storag`` would leave storage in); another (``not slow``, an
    idiom kept from other projects' scripts) is let be, as leaving out what has no marker changes nothing.
    ``known``: the registered marker names (pytest's
    ``markers`` ini lines); ``layers``: the layers' markers, named in the refusal. Raises ConfigError (one
    line, with the nearest known name)."""
    import difflib
    import re
    before = ""
    for word in re.findall(r"[^\s()]+", expr or ""):
        negated, before = before == "not", word
        if word in MARK_WORDS or "=" in word or word in known:
            continue
        near = difflib.get_close_matches(word, sorted(known), n=1)
        if negated and not near:
            continue  # ``not <name>`` of no marker, near none: leaves out nothing and takes nothing extra
        hint = f"did you mean {near[0]}? " if near else ""
        raise ConfigError(f"-m {shown_path(expr)}: no marker named {shown(word)}: {hint}the layers' markers are "
                          f"{', '.join(layers)}")
