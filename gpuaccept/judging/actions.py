"""From verdict to action: what an operator does next with each failing finding (pure; the table is data).

Every failing finding (a failure line, or a test that could not measure) gets one action, weakest first:

=================  ==========================================================================================
``rerun``          busy, interrupted, unreachable once: rerun it (``--limit=@failed-hosts.txt``)
``free-space``     the node is full (free space, memory), not broken
``fix-config``     a setting is off: the action names the setting and the command that restores it
``check-network``  a rank, pair, rail or port blamed by the network tests
``reset-gpu``      a GPU reset clears it (a pending row remap, an Xid whose bucket is RESET_GPU)
``reboot``         the node must restart (driver / kernel module mismatch, RESTART_BM)
``drain-rma``      hold the node out and open an RMA with the evidence (a confirmed slow figure, a lost
                   GPU, uncorrectable ECC on a part without row remapping, a row-remap failure)
=================  ==========================================================================================

The rows, each with its reason and source, are ``gpuaccept/data/actions.yaml`` (nothing about an action is
typed here): NVIDIA's Xid Catalog buckets (:func:`for_xid`), NVIDIA's memory error guidance (row remapping,
page retirement), and gpuaccept's own table per check, per test and per error kind. A finding is looked up
(:func:`for_finding`) by, in order: its check in the memory rows, then in the check rows (exact, then
``*_suffix`` / ``prefix *`` rows); a test row marked ``all_findings``; a judged figure below a ``min`` limit
("(slow figure)") or over a ``max`` limit ("(over limit)"); its test's row; the fallback.

Cause before action: every row names the cause class of its finding (gpuaccept/causes.py), and a finding that
carries its own :class:`gpuaccept.causes.Cause` (set by the probe, the runner or the judge where the fact is known)
is looked up by its kind in the ``causes`` rows (:func:`for_cause`): a reading NVML refused carries the cause of
NVML's error (gpuaccept.judging.readings.unreadable_cause), so a check's own row, meant for a value outside its
limit, never answers for it (nor, of class hardware, for an NVML error value that came without a cause:
:func:`_unread_class`). ``drain-rma``, ``reset-gpu`` and ``reboot``
need class ``hardware`` (:func:`gate`); any other class gets its class's action (``by_class``). A figure below a
``min`` or over a ``max`` limit that no check row names is hardware only when it was confirmed by a second
measurement and the conditions of its GPU (and, for a host-side figure, of the host) were checked clean
(:func:`figure_class`); otherwise ``unverified``, measured again.

An action is a dict, as it travels in results.json and the JUnit properties:
``{"action", "reason", "source", "cause"[, "kind", "setting", "command"][, "slow": true]}``. A host's action is the strongest of
its findings' (:func:`host_action`), with one rule across findings: a slow figure that a ``fix-config`` finding
of the same host can account for is not a hardware verdict (a lowered power limit makes every TFLOP/s figure of
its GPU slow): it becomes ``rerun`` after the fix. Which settings lower which figures is data: a row's ``lowers``
(``gpu``: the figures of the GPU the setting is on; ``node``: every figure of the node); a setting of another
GPU, or one that lowers nothing measured (persistence mode, ECC off), leaves a confirmed slow figure hardware.
"""
from __future__ import annotations

import re
import string
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable

from gpuaccept.causes import CLASSES, HARDWARE_ACTIONS, Cause
from gpuaccept.config.yamlload import load_data
from gpuaccept.judging.xid import caused_by, load_catalog, recovery_action
from gpuaccept.judging.readings import bus_key, error_cause, error_text

DATA_FILE = "actions.yaml"


@dataclass(frozen=True)
class Action:
    """One action: ``action`` (a name of :func:`strength`), ``reason`` (one line), ``source`` (where the row
    comes from); ``setting`` and ``command`` for fix-config (the command filled in for the finding);
    ``slow``: decided by the "(slow figure)" row (see :func:`host_action`); ``cause``: the class of the finding's
    cause (gpuaccept.causes.CLASSES); ``kind``: the cause's kind when the finding carried one; ``lowers``: for a
    setting that lowers measured figures, where (``"gpu"``: the figures of the GPU it is on; ``"node"``: every
    figure of the node), from its row (:func:`host_action`)."""

    action: str
    reason: str
    source: str
    setting: str | None = None
    command: str | None = None
    slow: bool = False
    cause: str = "unverified"
    kind: str | None = None
    lowers: str | None = None

    def to_dict(self) -> dict:
        """The JSON form: unset optional keys left out."""
        out = {"action": self.action, "reason": self.reason, "source": self.source, "cause": self.cause}
        if self.kind:
            out["kind"] = self.kind
        if self.setting:
            out["setting"] = self.setting
        if self.command:
            out["command"] = self.command
        if self.slow:
            out["slow"] = True
        if self.lowers:
            out["lowers"] = self.lowers
        return out


@lru_cache(maxsize=None)
def load_table() -> dict:
    """``gpuaccept/data/actions.yaml`` as read; raises ValueError when a row names an action not in ``strength``
    or has no reason (the data file is broken)."""
    with resources.files("gpuaccept").joinpath("data", DATA_FILE).open(encoding="utf-8") as f:
        table = load_data(f)
    known = set(table["strength"])
    for section in ("xid_buckets", "xid154_recovery", "memory", "checks", "tests", "failures", "errors", "causes",
                    "by_class"):
        for key, row in table[section]["rows"].items():
            if row.get("action") not in known or not row.get("reason"):
                raise ValueError(f"{DATA_FILE}: {section}/{key}: action must be one of {sorted(known)}, with a reason")
            cls = key if section == "by_class" else row.get("class" if section == "causes" else "cause")
            if cls not in CLASSES:
                raise ValueError(f"{DATA_FILE}: {section}/{key}: cause class must be one of {CLASSES}")
            if row["action"] in HARDWARE_ACTIONS and cls != "hardware":
                raise ValueError(f"{DATA_FILE}: {section}/{key}: {row['action']} needs cause hardware, not {cls}")
    if set(table["by_class"]["rows"]) != set(CLASSES) - {"hardware"}:
        raise ValueError(f"{DATA_FILE}: by_class must name every cause class but hardware")
    if table["fallback"]["action"] not in known or not set(table["slurm_drain"]) <= known:
        raise ValueError(f"{DATA_FILE}: fallback and slurm_drain must name actions of strength")
    return table


def strength() -> tuple[str, ...]:
    """The action names, weakest first."""
    return tuple(load_table()["strength"])


def drain_actions() -> frozenset[str]:
    """The actions ``--slurm-drain`` drains (``slurm_drain`` in the data file)."""
    return frozenset(load_table()["slurm_drain"])


class _Fields(dict):
    def __missing__(self, key: str) -> str:
        return f"<{key}>"


def _plain(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _as_int(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, str) and v.lower() in ("enabled", "disabled", "on", "off"):
        return int(v.lower() in ("enabled", "on"))
    return None


def _fields(check: str | None, value: Any, extra: dict | None, gpu: Any) -> _Fields:
    out = _Fields({k: _plain(v) for k, v in (extra or {}).items() if isinstance(v, (str, int, float, bool))})
    if gpu not in (None, ""):
        out["gpu"] = gpu
    if value is not None:
        out["value"] = _plain(value)
        if _as_int(value) is not None:
            out["not_value_int"] = 1 - _as_int(value)
    if _as_int(out.get("current")) is not None:
        out["current_int"] = _as_int(out["current"])
    if check and " " in check:
        out["name"] = check.split(" ", 1)[1]
    return out


def _fill(text: str | None, fields: _Fields) -> str | None:
    if not text:
        return None
    try:
        return string.Formatter().vformat(text, (), fields)
    except (ValueError, IndexError):  # a malformed template: said as written, never a crash
        return text


def _action(section: str, key: str, fields: _Fields | None = None, prefix: str = "", slow: bool = False,
            cause: str | None = None, kind: str | None = None) -> Action:
    """The row ``key`` of ``section`` filled in; ``cause``: the finding's class when it is known (else the row's),
    the action then gated by it (:func:`gate`)."""
    table = load_table()
    sec = table[section]
    row = sec["rows"][key]
    f = fields if fields is not None else _Fields()
    cls = cause or row.get("class") or row.get("cause") or "unverified"
    reason = row.get("hardware_reason") if cls == "hardware" and row.get("hardware_reason") else row["reason"]
    return gate(Action(row["action"], prefix + _fill(reason, f), row.get("source") or sec["source"],
                       _fill(row.get("setting"), f), _fill(row.get("command"), f), slow, cls, kind,
                       row.get("lowers") if row["action"] == "fix-config" else None))


def gate(a: Action) -> Action:
    """``a`` unless it takes hardware out of service (:data:`gpuaccept.causes.HARDWARE_ACTIONS`) without a hardware
    cause: then its class's action (the ``by_class`` rows), the reason kept with "no hardware evidence" said.
    Pure; the one place the rule "no hardware action without hardware evidence" is applied."""
    if a.action not in HARDWARE_ACTIONS or a.cause == "hardware":
        return a
    row = load_table()["by_class"]["rows"][a.cause]
    return Action(row["action"], f"{a.reason}; cause {a.cause}, no hardware evidence: {row['reason']}",
                  load_table()["by_class"]["source"], a.setting if row["action"] == "fix-config" else None,
                  a.command if row["action"] == "fix-config" else None, False, a.cause, a.kind)


def _fallback(prefix: str = "") -> Action:
    row = load_table()["fallback"]
    return gate(Action(row["action"], prefix + row["reason"], "gpuaccept's table (2026-12-01): fallback",
                       cause=row.get("cause") or "unverified"))


def host_side(test: str | None) -> bool:
    """Whether the figures of ``test`` depend on the host's CPUs and memory (its row's ``host_side``)."""
    row = load_table()["tests"]["rows"].get(base_test_name(test)) or {}
    return bool(row.get("host_side"))


def figure_class(evidence: dict | None) -> str:
    """The cause class of a figure outside a limit no check row names (pure): ``hardware`` when ``evidence``
    says it was ``confirmed`` (a second measurement outside the limit too) and the conditions of its GPU
    (``gpu_conditions``) and, where the figure depends on the host, of the host (``host_conditions``) were
    checked ``"clean"`` (``"n/a"``: the figure does not depend on it); else ``unverified``."""
    ev = evidence or {}
    ok = ev.get("confirmed") is True and ev.get("gpu_conditions") in ("clean", "n/a") \
        and ev.get("host_conditions") in ("clean", "n/a")
    return "hardware" if ok else "unverified"


def reads_evidence(test: str | None, check: str) -> bool:
    """Whether the action of a failing figure ``check`` of test ``test`` is decided by its evidence
    (:func:`figure_class`, the confirmation and the conditions): True when no check row names ``check`` and the
    test's row does not answer for all its findings (:func:`for_finding`'s lookup order); a reading with its own
    row (a PCIe width, links down, a temperature) is decided by that row, whatever a second look would say."""
    row = load_table()["tests"]["rows"].get(base_test_name(test)) or {}
    return _check_row(check) is None and not row.get("all_findings")


def for_cause(cause: Cause, fields: dict | None = None, prefix: str = "") -> Action:
    """The action of a finding that carries its cause: the ``causes`` row of its kind (``blocked`` by its
    check: ``blocked:<check>``, then ``blocked``; ``declared_gpu_missing`` by its reason code), its command
    filled from the cause's evidence and ``fields``; a kind no row names gets its class's action. Gated by
    the cause's class (:func:`gate`)."""
    rows = load_table()["causes"]["rows"]
    f = _Fields({k: _plain(v) for k, v in {**(cause.evidence or {}), **(fields or {})}.items()
                 if isinstance(v, (str, int, float, bool))})
    if cause.gpu is not None:
        f.setdefault("gpu", cause.gpu)
    for key in ([f"{cause.kind}:{cause.check}"] if cause.check else []) + [cause.kind]:
        if key in rows:
            return _action("causes", key, f, prefix, cause=cause.cls, kind=cause.kind)
    if cause.cls == "hardware":
        return Action("drain-rma", prefix + f"{cause.kind}: a hardware finding no row names: held out for a person",
                      load_table()["causes"]["source"], cause="hardware", kind=cause.kind)
    row = load_table()["by_class"]["rows"][cause.cls]
    return Action(row["action"], prefix + f"{cause.kind}: {row['reason']}", load_table()["by_class"]["source"],
                  cause=cause.cls, kind=cause.kind)


def _unread_class(value: Any) -> str | None:
    """The cause class of an NVML error ``value`` (gpuaccept.judging.readings.error_cause), None for a reading: a
    check row of class hardware (meant for a value outside its limit) never answers for a reading that was not
    taken, even when the finding came without its cause (a caller that set none)."""
    text = error_text(value)
    return error_cause(text)[0] if text is not None else None


def _check_row(check: str) -> tuple[str, str] | None:
    table = load_table()
    for section in ("memory", "checks"):
        if check in table[section]["rows"]:
            return section, check
    for key in table["checks"]["rows"]:
        if key.startswith("*") and check.endswith(key[1:]):
            return "checks", key
        if key.endswith(" *") and check.startswith(key[:-1]):
            return "checks", key
    return None


def base_test_name(name: str | None) -> str:
    """``"test_ecc"`` of ``"test_ecc[gpu-07]"`` (a record's name) or of an item's original name."""
    return (name or "").split("[")[0]


def for_finding(test: str | None, check: str | None = None, value: Any = None, extra: dict | None = None,
                gpu: Any = None, direction: str | None = None, cause: Cause | None = None,
                evidence: dict | None = None) -> Action:
    """The action of one failing finding of test ``test`` (its name, with or without ``[host]``).

    ``check``: the figure or finding that failed (None: a failure line of the test at large); ``value`` and
    ``extra``: the figure and its extra fields (they fill a fix-config command: ``expected_w``, ``current``,
    ``from``...); ``gpu``: the GPU's PCI bus id or index (the command's ``{gpu}``); ``direction``: ``"min"`` or
    ``"max"`` when the figure was judged against a limit; ``cause``: the finding's own cause, when the judge set
    one (its ``causes`` row answers, :func:`for_cause`); ``evidence``: for a figure judged against a limit, what
    :func:`figure_class` reads. Lookup order: module docstring. Never raises on a finding no row names (the
    fallback answers)."""
    test = base_test_name(test)
    fields = _fields(check, value, extra, gpu)
    if cause is not None:
        return for_cause(cause, fields, prefix=f"{check}: " if check else "")
    rows = load_table()["tests"]["rows"]
    hit = _check_row(check) if check else None
    if hit is not None:
        row = load_table()[hit[0]]["rows"][hit[1]]
        return _action(*hit, fields, cause=_unread_class(value) if row.get("cause") == "hardware" else None)
    if test in rows and rows[test].get("all_findings"):
        return _action("tests", test, fields)
    if direction == "min":
        return _action("checks", "(slow figure)", fields, prefix=f"{check}: ", slow=True,
                       cause=figure_class(evidence))
    if direction == "max":
        return _action("checks", "(over limit)", fields, prefix=f"{check}: ", cause=figure_class(evidence))
    if test in rows:
        return _action("tests", test, fields)
    return _fallback(f"{test or 'test'}: ")


def for_xid(event: dict) -> Action:
    """The action of one failing Xid event as :func:`gpuaccept.judging.xid.classify` left it (keys ``xid``,
    ``rule``, ``bucket``, ``msg``, ``continuation``): NVIDIA's immediate bucket through ``xid_buckets``; an Xid 154
    by the recovery action it announces (``xid154_recovery``); an Xid 45 judged by its named cause by that Xid's
    bucket; the driver's own faults, an Xid without a number, an unknown Xid, an Xid without a bucket, and a
    finding of :func:`gpuaccept.judging.xid.in_run_findings` (``rule`` "app in run" | "app repeated in run" |
    "foreign app in run", its ``head`` said first; the foreign one with kind ``foreign_app_xid``) by the data file's
    bracketed rows."""
    rows = load_table()["xid_buckets"]["rows"]
    xid, rule = event.get("xid"), event.get("rule")
    head = f"Xid {xid}: " if xid is not None else ""
    if rule in ("app in run", "app repeated in run"):  # one finding per GPU of the run's application-class Xids
        return _action("xid_buckets", f"({rule})", prefix=f"{event.get('head') or head}: ")
    if rule == "foreign app in run":  # another application's, on a GPU of the run: contention, whatever the count
        return _action("xid_buckets", "(foreign app in run)", prefix=f"{event.get('head') or head}: ",
                       kind="foreign_app_xid")
    if rule == "driver":
        return _action("xid_buckets", "(driver)")
    if rule in ("no number", "unknown"):
        return _action("xid_buckets", "(unknown)", prefix=head)
    if rule == "no bucket":
        return _action("xid_buckets", "(none)", prefix=head)
    if rule == "policy" and xid == 154:
        said = recovery_action(" ".join([event.get("msg") or ""] + list(event.get("continuation") or [])))
        key = (said or "").strip().lower()
        if key in load_table()["xid154_recovery"]["rows"]:
            return _action("xid154_recovery", key, prefix=head)
        return _action("xid_buckets", "XID_154", prefix=head)
    bucket = event.get("bucket")
    if rule == "named cause":
        cause = caused_by(event.get("msg") or "")
        entry = load_catalog().get(cause) if cause is not None else None
        bucket, head = (entry.immediate if entry else None), f"Xid 45 caused by Xid {cause}: "
    if bucket in rows:
        return _action("xid_buckets", bucket, prefix=head)
    return _action("xid_buckets", "(none)" if bucket in (None, "") else "(unknown)", prefix=head)


def for_sxid(event: dict) -> Action:
    """The action of one failing NVSwitch SXid (Fatal, or no severity stated): the ``(sxid)`` row."""
    return _action("xid_buckets", "(sxid)", prefix=f"SXid {event.get('sxid')}: ")


def _message_keys(section: str) -> list[str]:
    rows = load_table()[section]["rows"]
    return sorted((k for k in rows if not k[0].isupper() and not k.startswith("(") and k != "internal"),
                  key=len, reverse=True)


def _by_message(section: str, message: str) -> list[Action]:
    """The rows of ``section`` whose key (first words, lower case) starts a line of ``message`` or follows a
    ``host: `` head there; at most one row a line, the longest key first."""
    found, keys = [], _message_keys(section)
    for line in (message or "").splitlines():
        low = line.strip().lower()
        for key in keys:
            if re.search(rf"(?:^|: ){re.escape(key)}\b", low):
                found.append(_action(section, key))
                break
    return found


def for_error(kind: str | None, message: str = "") -> Action:
    """The action of a test that could not measure (an ERROR). ``kind``: the exception's class name
    (``HostUnreachable``, ``CommandTimeout``, ``Interrupted``, ``ProbeError``, ``HostKeyError``, ``AuthError``,
    ``ThresholdError``) or ``"internal"``, as the plugin records it; ``message``: the error's text, whose lines
    are matched by the first words gpuaccept writes (``blocked by <check>``, ``disturbed``, ``busy``, ``not
    run``, ``not finished``...), at a line's start or after a ``host: `` head. The strongest of the kind's row and
    the matched lines' rows; ``(other)`` when none matches (a measurement gap)."""
    rows = load_table()["errors"]["rows"]
    found = [_action("errors", kind)] if kind in rows else []
    return strongest(found + _by_message("errors", message)) or _action("errors", "(other)")


def _as_dict(a: Action | dict | None) -> dict | None:
    return a.to_dict() if isinstance(a, Action) else a


def strongest(actions: Iterable[Action | dict | None]) -> Any:
    """The strongest of ``actions`` (Action or dict, as given; the first of equals), or None when there is none."""
    order = {name: i for i, name in enumerate(strength())}
    best, rank = None, -1
    for a in actions:
        name = a.action if isinstance(a, Action) else (a or {}).get("action")
        if name in order and order[name] > rank:
            best, rank = a, order[name]
    return best


def entry_action(test: str | None, entry: dict) -> dict:
    """The action of one failure entry of a record (``{host, gpu, pci_bus_id, serial, line[, check, action,
    cause]}``): the one decided where it was found, else looked up by its cause, else by its check and test
    (records written before actions)."""
    if isinstance(entry.get("action"), dict):
        return entry["action"]
    cause = Cause.from_dict(entry.get("cause")) if isinstance(entry.get("cause"), dict) else None
    return for_finding(test, entry.get("check"), gpu=entry.get("pci_bus_id") or entry.get("gpu"),
                       cause=cause).to_dict()


def figure_action(test: str | None, fig: dict) -> dict:
    """The action of one failing figure record (``{check, value, gpu, pci_bus_id, limit: {min|max}, extra}``);
    the figure's ``extra.evidence`` (what :func:`figure_class` reads), when it has one."""
    lim = fig.get("limit") if isinstance(fig.get("limit"), dict) else {}
    direction = "min" if "min" in lim else "max" if "max" in lim else None
    extra = fig.get("extra") if isinstance(fig.get("extra"), dict) else {}
    return for_finding(test, fig.get("check"), fig.get("value"), extra,
                       fig.get("pci_bus_id") or fig.get("gpu"), direction,
                       evidence=extra.get("evidence") if isinstance(extra.get("evidence"), dict) else None).to_dict()


def cause_actions(causes: Iterable[dict | Cause] | None, host: str | None = None) -> list[dict]:
    """The actions of a record's causes (dicts as results.json keeps them, or Cause), each with the ``host`` of
    its cause where it names one (a fleet-wide test's action then says whose it is); ``host``: only the causes
    filed under that host (a fleet-wide test's, for one host), else all."""
    out = []
    for c in causes or []:
        c = c if isinstance(c, Cause) else Cause.from_dict(c)
        if c is None or (host is not None and c.host != host):
            continue
        out.append({**for_cause(c).to_dict(), **({"host": c.host} if c.host else {})})
    return out


def for_case(outcome: str, test: str | None, message: str = "", failures: list[dict] | None = None,
             error_kind: str | None = None, figures: list[dict] | None = None,
             causes: list[dict] | None = None) -> dict | None:
    """The action of one test record: None unless ``failed`` or ``error``. A failed test's strongest failure
    entry (:func:`entry_action`); without entries, its causes (``causes``: the declared GPUs missing, with the
    probe's reason code); then its strongest failing figure of ``figures`` (:func:`figure_action`); records
    written before causes: the ``failures`` row its message names, else, as for a plain ``assert``, its
    test's row. A failed test's ``causes`` (the gaps beside its findings) take part with its entries. An error: the strongest of its ``causes`` (:func:`for_cause`); a record written before
    causes: :func:`for_error` of its kind and message."""
    if outcome == "failed":
        acts = [with_gpu(entry_action(test, e), e) for e in failures or [] if isinstance(e, dict)]
        if acts:  # a setting among them that lowers the same GPU's figures answers for its slow ones; the gaps
            # beside the findings (their causes) count too
            best = host_action(acts + cause_actions(causes))
            return {k: v for k, v in best.items() if k != "gpu"}
        acts = cause_actions(causes)
        acts = acts or [figure_action(test, f) for f in figures or [] if isinstance(f, dict)
                        and f.get("verdict") == "fail"]
        if causes is None:  # a record written before causes
            acts = acts or [a.to_dict() for a in _by_message("failures", message)]
        return strongest(acts) or for_finding(test).to_dict()
    if outcome == "error":
        if causes is not None:
            return strongest(cause_actions(causes)) or _action("causes", "gap").to_dict()
        return for_error(error_kind, message).to_dict()
    return None


def with_gpu(action: dict, where: dict) -> dict:
    """``action`` with ``"gpu"``: the GPU of ``where`` (a failure entry or figure: its PCI bus id in the one
    normalised form, gpuaccept.judging.readings.bus_key, else its index as ``"index N"``), for :func:`host_action`;
    ``action`` itself when ``where`` names no GPU."""
    bus, idx = bus_key(where.get("pci_bus_id")), where.get("gpu")
    gpu = bus if bus else (f"index {idx}" if idx not in (None, "") else None)
    return {**action, "gpu": gpu} if gpu is not None else action


def explains(setting: dict, figure: dict) -> bool:
    """Whether the fix-config finding ``setting`` (an action dict with ``lowers``) can account for the slow figure
    ``figure`` (an action dict with ``slow``): its setting lowers every figure of the node, or the figures of its
    GPU and both are about the same GPU (``gpu``, :func:`with_gpu`). Where either names no GPU, or one names a bus
    id and the other only an index, they are not told apart: it can. A fix-config finding whose row says nothing
    of ``lowers`` (persistence mode, ECC off, an SSH key, a missing package) accounts for no figure."""
    scope = setting.get("lowers")
    if scope == "node":
        return True
    if scope != "gpu":
        return False
    a, b = setting.get("gpu"), figure.get("gpu")
    if a is None or b is None or a.startswith("index ") != b.startswith("index "):
        return True
    return a == b


def host_action(actions: Iterable[dict | None]) -> dict | None:
    """The host's action: the strongest of its findings' ``actions`` (dicts), None when it has none. A slow
    figure (``slow``) that a fix-config finding of the same host can account for (:func:`explains`: a setting
    that lowers the figures of the node, or of the figure's own GPU, such as a lowered power limit or
    application clocks) becomes ``rerun`` "measured while <setting> was off: fix it, then rerun": the figure was
    taken with the setting off, so it proves no hardware fault (module docstring). A setting on another GPU, or
    one that lowers no figure, leaves it as it was."""
    acts = [a for a in actions if isinstance(a, dict) and a.get("action")]
    settings = [a for a in acts if a["action"] == "fix-config" and a.get("lowers")]
    out = []
    for a in acts:
        config = next((c for c in settings if explains(c, a)), None) if a.get("slow") else None
        if config is None:
            out.append(a)
            continue
        what = config.get("setting") or config.get("reason")
        out.append({**a, "action": "rerun", "reason": f"{a['reason']}; measured while {what} was off: fix it, then "
                                                      f"rerun"})
    return strongest(out)
