"""gpuaccept's command-line options, defined once: pytest's parser takes them (gpuaccept.plugin.pytest_addoption),
and so does the ``gpuaccept`` command's check before pytest starts (gpuaccept.cli), through the same
:func:`add_options`. Every keyword is one that ``argparse.ArgumentParser.add_argument`` and pytest's
``OptionGroup.addoption`` both read."""
from __future__ import annotations

import re
from typing import Any, Callable

from gpuaccept.config.profiles import PROFILES
from gpuaccept.config.shown import shown_path


#: the options that take one of a few words, checked by :func:`check_choices` (one line, exit 4) rather than
#: by argparse's ``choices`` (its refusal prints the whole usage, some twenty lines, before the error)
CHOICES: dict[str, tuple[str, ...]] = {
    "profile": tuple(sorted(PROFILES)),
    "progress": ("auto", "tty", "plain", "off"),
    "nccl_pattern": ("ring", "pairwise", "rails"),
}


def _metavar(name: str) -> str:
    return "{" + ",".join(CHOICES[name]) + "}"


class BadValue(str):
    """A value that a numeric option's type could not read (``--standout-pct abc``): kept as given instead of
    raised, because argparse's refusal of a type prints the whole usage (pytest's: 18 lines) before the
    error; :func:`check_choices` refuses it in one line. ``expected``: the phrase after the option."""

    expected = "expected a number"


def _typed(kind: type, expected: str) -> Callable[[str], Any]:
    """An argparse ``type`` that reads ``kind`` and keeps what it cannot read as a :class:`BadValue`."""
    def read(text: str) -> Any:
        try:
            return kind(text)
        except (TypeError, ValueError):
            bad = BadValue(text)
            bad.expected = expected
            return bad
    read.__name__ = kind.__name__  # argparse names a type by it
    return read


NUMBER = _typed(float, "expected a number")
WHOLE_NUMBER = _typed(int, "expected a whole number")


def check_choices(getoption: Callable[..., Any]) -> str | None:
    """The one-line refusal of an option given a word it does not take (``--profile fast``, ``--drain-max
    abc``) or a value its type cannot read (``--standout-pct abc``: :class:`BadValue`), or None.
    ``getoption(name, default)``: pytest's ``config.getoption`` or the same over an argparse namespace."""
    for name in option_dests():
        v = getoption(name, None)
        if isinstance(v, BadValue):
            flag = "--" + name.replace("_", "-")
            if not v.strip():  # as gpuaccept.config.inputcheck.check_empty_options words it for text options
                return f"{flag} is empty: an unset variable on the command line? (leave {flag} out for its default)"
            return f"{flag} {shown_path(v)}: {v.expected}"
    for name, words in CHOICES.items():
        v = getoption(name, None)
        if v is not None and v not in words:
            return f"--{name.replace('_', '-')} {shown_path(v)}: not one of {', '.join(words)}"
    given = getoption("drain_max", None)
    if given is not None:
        try:
            parse_drain_max(given)
        except ValueError as e:
            return f"--drain-max {shown_path(given)}: {e}"
    return None


#: --slurm-drain drains at most this share of the selected nodes unless --drain-max says otherwise:
#: a fault that hits a tenth of the fleet at once is more likely the fleet's (an image, DNS) than ten cards'. Chosen.
DRAIN_MAX_DEFAULT = "10%"
_DRAIN_MAX_RE = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*%|(\d+))\s*$")


def parse_drain_max(text: str) -> tuple[float | None, int | None]:
    """``--drain-max``: ``"N%"`` -> (N, None), a share of the selected nodes (0 < N <= 100); ``"N"`` -> (None,
    N), a count (N >= 1). Raises ValueError (the phrase after the option in its one-line refusal)."""
    m = _DRAIN_MAX_RE.match(str(text))
    if not m:
        raise ValueError("expected a count of nodes (3) or a share of the selected nodes (10%)")
    if m.group(1) is not None:
        pct = float(m.group(1))
        if not 0 < pct <= 100:
            raise ValueError("expected a share above 0% and at most 100%")
        return pct, None
    n = int(m.group(2))
    if n < 1:
        raise ValueError("expected a count of at least 1 (leave --slurm-drain out to drain none)")
    return None, n


def drain_limit(text: str | None, selected: int) -> int:
    """How many of ``selected`` nodes ``--drain-max text`` (default :data:`DRAIN_MAX_DEFAULT`) lets one run
    drain: a count as given; a share rounded down, at least 1. Raises ValueError as :func:`parse_drain_max`."""
    pct, count = parse_drain_max(text or DRAIN_MAX_DEFAULT)
    if count is not None:
        return count
    return max(1, int(selected * pct / 100.0 + 1e-9))


def add_options(add: Callable[..., Any]) -> None:
    """Call ``add(*flags, **argparse keywords)`` once per gpuaccept option."""
    add("--inventory", default=None, help="Ansible inventory (INI or YAML); default inventory/localhost.ini")
    add("--limit", default=None, help="Ansible host pattern: a,b  group  group:&other  group:!drained  gpu[0:3] (hosts 0..3 of group gpu)  gpu0*")
    add("--sku", default=None, help="GPU SKU for every selected host (a thresholds/<sku>.yaml stem); overrides detection")
    add("--reports", default=None, help="report folder; default reports/<UTC timestamp>, reports/latest -> newest")
    add("--thresholds", default=None,
                help="threshold folder; default ./thresholds when the project has one, else the files shipped")
    add("--site-thresholds", default=None, metavar="FILE",
                help="a YAML naming only the checks a site changes, per SKU, layered over the threshold files")
    add("--probe-timeout", type=NUMBER, default=None,
                help="wall-clock limit of one probe on one host, seconds (default: quick 180, standard 300, burnin 1800)")
    add("--accept-new-host-keys", action="store_true", default=False,
                help="trust and record unknown SSH host keys (like StrictHostKeyChecking=accept-new); changed keys are always refused")
    add("--profile", default="standard", metavar=_metavar("profile"),
                help="how long probes measure: quick (fleet sweeps, debugging), standard, burnin (minutes per load)")
    add("--xid-window", type=NUMBER, default=None,
                help="read XID events from this many seconds before the run began (default: since the run began)")
    add("--burnin-minutes", type=NUMBER, default=None,
                help="length of the burn-in layer (-m burnin), minutes (default by profile: 2, 10, 60)")
    add("--known-hosts", default=None, help="extra known_hosts file, checked with ~/.ssh/known_hosts")
    add("--forks", type=WHOLE_NUMBER, default=None, metavar="N",
                help="hosts probed at once: connected and probed before the tests reach them, and each probe a "
                     "test runs fetched ahead on the hosts whose same test is next (default 32; 0: one host "
                     "at a time, as the tests reach it); without -n only")
    add("--shard", default=None, metavar="I/K",
                help="run a stable 1/K of the selected hosts (shard I of K, by a hash of the host name)")
    add("--list-hosts", action="store_true", default=False,
                help="print the selected hosts (ansible_host, SKU, GPUs declared) and exit: touches no node, writes nothing")
    add("--history", default=None,
                help="history database (SQLite), default reports/history.sqlite; 'none' keeps no history")
    add("--baseline", default=None, metavar="RUN_ID|latest-pass",
                help="stand-outs: compare with this run (or each GPU's last passing figure) when a GPU has no burn-in run")
    add("--standout-pct", type=NUMBER, default=None,
                help="a figure more than this %% below its baseline or previous run is a stand-out (default 10)")
    add("--prometheus-textfile", default=None, metavar="PATH",
                help="also write the run's figures for node_exporter's textfile collector (atomic)")
    add("--progress", metavar=_metavar("progress"), default="auto",
                help="per-host progress on stderr: in place on a terminal (auto), plain lines otherwise")
    add("--slurm-drain", action="store_true", default=False,
                help="after the run, drain in Slurm every host whose action is drain-rma, reboot or reset-gpu "
                     "(a dry run printing the scontrol commands unless --slurm-apply)")
    add("--slurm-resume", action="store_true", default=False,
                help="after the run, resume hosts gpuaccept drained that now pass every test that failed "
                     "(a dry run unless --slurm-apply); drains set by others are never touched")
    add("--slurm-apply", action="store_true", default=False,
                help="make the scontrol calls of --slurm-drain/--slurm-resume (default: print them)")
    add("--drain-max", default=None, metavar="N|N%",
                help="--slurm-drain/--k8s-cordon take out no more than this many of the selected nodes (a count, or a share: "
                     f"default {DRAIN_MAX_DEFAULT.replace('%', '%%')}, at least 1); above it none, and the run exits non-zero")
    add("--k8s-cordon", action="store_true", default=False,
                help="after the run, cordon, taint and label in Kubernetes every host whose action is drain-rma, reboot "
                     "or reset-gpu (a dry run printing the kubectl commands unless --k8s-apply)")
    add("--k8s-resume", action="store_true", default=False,
                help="after the run, uncordon nodes gpuaccept cordoned that now pass every test that failed "
                     "(a dry run unless --k8s-apply); cordons set by others are never touched")
    add("--k8s-apply", action="store_true", default=False,
                help="make the kubectl calls of --k8s-cordon/--k8s-resume (default: print them)")
    add("--k8s-drain-pods", action="store_true", default=False,
                help="--k8s-cordon also evicts the pods (kubectl drain) of nodes with a hardware action")
    add("--nccl-pattern", metavar=_metavar("nccl_pattern"), default="ring", help="inter-node all-reduce: ring (all hosts at once, default), pairwise (random pairs, names a slow host), rails (one collective per GPU index)")


#: how ``gpuaccept --help`` groups the options (gpuaccept.cli.help_text): title -> the options' dests, in order
HELP_GROUPS: dict[str, tuple[str, ...]] = {
    "which hosts": ("inventory", "limit", "shard", "list_hosts", "sku"),
    "how they are measured": ("profile", "probe_timeout", "burnin_minutes", "forks", "nccl_pattern", "xid_window"),
    "limits": ("thresholds", "site_thresholds"),
    "SSH": ("known_hosts", "accept_new_host_keys"),
    "reports and history": ("reports", "history", "baseline", "standout_pct", "prometheus_textfile", "progress"),
    "Slurm": ("slurm_drain", "slurm_resume", "slurm_apply", "drain_max"),
    "Kubernetes": ("k8s_cordon", "k8s_resume", "k8s_apply", "k8s_drain_pods"),
}


def option_specs() -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """Every gpuaccept option as ``(flags, keywords)``, in :func:`add_options`'s order."""
    out: list[tuple[tuple[str, ...], dict[str, Any]]] = []
    add_options(lambda *flags, **kw: out.append((flags, kw)))
    return out


def option_dests() -> list[str]:
    """The dest of every gpuaccept option (``--standout-pct`` -> ``standout_pct``)."""
    return [flags[0].lstrip("-").replace("-", "_") for flags, _ in option_specs()]


def long_options() -> list[str]:
    """Every gpuaccept option as typed (``--inventory``, ...)."""
    return [f for flags, _ in option_specs() for f in flags if f.startswith("--")]


def given(args: Any) -> bool:
    """Whether the command line ``args`` (before any ``--``) gives one of gpuaccept's options, ``--inventory X`` or
    ``--inventory=X``. A pytest run that does is gpuaccept's (gpuaccept.plugin.active: plain ``pytest --inventory
    lab.ini`` in an operator's folder, the plugin installed through its pytest11 entry point); one that gives
    none of them (another project's, our own tests/) is left alone."""
    flags = set(long_options())
    for a in args:
        a = str(a)
        if a == "--":
            return False
        if a.startswith("--") and a.split("=", 1)[0] in flags:
            return True
    return False
