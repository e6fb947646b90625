"""Xid and SXid judging (controller side, pure).

The NVIDIA driver reports GPU faults as Xid numbers in the kernel log (``NVRM: Xid (PCI:0000:19:00): 79, ...``);
the NVSwitch driver reports switch faults as SXid numbers (``nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034,
Fatal, Link 28 LTSSM Fault Up``). The ``xid_events`` probe collects both; :func:`classify` and
:func:`classify_sxid` decide which ones fail a node.

Xid source: NVIDIA's Xid Catalog for Ampere and later, "Analyzing Xid Errors with the Xid Catalog",
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, kept as data in
``gpuaccept/data/xid_catalog.csv`` (edition, checksum and retrieval date in its header) with the resolution
buckets' texts in ``gpuaccept/data/xid_resolution_buckets.csv``. Nothing about an Xid is typed here.

Rules, in the order they apply to one Xid event:

0. **Driver could not initialise the GPU** (``fault`` "init_failed": the kernel log's ``RmInitAdapter failed!``,
   no Xid number): fails, naming the GPU, the driver's code and how many times it tried. So does an
   uncorrectable PCIe error that AER recovery could not hand to the nvidia driver (``fault`` "pcie_uncorrected":
   ``nvidia 0000:03:00.0: AER: can't recover ...`` / ``device has no AER-aware driver``).
1. **No number** (an ``NVRM: Xid`` line whose number could not be read): fails; the raw line is the message.
   It cannot be looked up, and an unreadable fault report must not pass.
2. **Policy override** (:data:`POLICY_OVERRIDES`, each with its reason): the override decides.
3. **Not in the catalogue**: fails, with the raw text ("unknown Xid").
4. **No immediate bucket** in the catalogue (NVIDIA left it empty, e.g. Xids 162-172 in the 2025-09-30
   edition): fails; NVIDIA names no action that would make it safe to ignore.
5. **Immediate bucket** ("Resolution Bucket (Immediate Action)"): ``IGNORE`` and ``RESTART_APP`` are recorded
   (:data:`RECORDED_BUCKETS`); every other bucket (RESET_GPU, RESTART_BM, RESTART_VM, CHECK_MECHANICALS,
   UPDATE_SWFW, CHECK_UVM, CONTACT_SUPPORT, WORKFLOW_*) fails.

Across events (:func:`classify`): an Xid 45 that names its cause ("caused by previous Xid 149") with no such
Xid of that GPU in the window is judged as that cause.

Inside the run's own window (:func:`in_run_findings`, data ``gpuaccept/data/xid_in_run.yaml``), an Xid whose
immediate bucket is RESTART_APP is judged by the process its line names (``pid=N, name=COMM``). The run's own names
(:func:`run_names`) are the name the probes give themselves (the ``xid_events`` document's ``probe_name``,
gpuaccept/probes/_probe.py PROCESS_NAME) and the GPU programs the probes start (``own_tools``):

- from a process of the run, or one the line does not name: gpuaccept's own probes were the application, so
  "restart the application" proves nothing. Once on a GPU it is an unverified finding (rerun, NVIDIA's
  investigatory workflow named); repeated on one GPU (``repeats`` occurrences, NVIDIA's "Repeat ..." workflows) it
  is hardware (reset the GPU, then DCGM diagnostics), naming the count and the GPC/TPC the lines name;
- from another named process (a user's job, an agent that launches CUDA work): a foreign application used the GPU
  during the run. Its Xids are a finding of their own (rule "foreign app in run"), contention whatever their count:
  they say nothing proven about the card; the GPU's owner looks at that application, and the run is repeated once
  the GPU is free. Lines without a name in the same second as a foreign fault (and no fault of the run's) are that
  fault's lines;
- a document without ``probe_name`` (an older probe, whose processes ran as ``python3``): the run's names are
  unknown and every such Xid of the run is taken as a probe's.

Xids before the run's start (the ``--xid-window`` look-back) keep rule 5.

SXid source: NVIDIA Fabric Manager User Guide, "NVSwitch SXid Errors", kept in ``gpuaccept/data/sxid_guidance.yaml``:
NVIDIA classifies an SXid by the severity word in the line: ``Fatal`` fails (naming switch and link), ``Non-fatal``
is recorded. An SXid whose line states no severity (the driver's ``SOE HALTED`` or ``SOE Watchdog error`` lines, or
a detail line whose first line fell outside the window) fails: the guide gives no way to call it harmless.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from gpuaccept.causes import Cause
from gpuaccept.config.yamlload import load_data

CATALOGUE_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
SXID_GUIDE_URL = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html"

# Immediate buckets that do not fail a node (see the module docstring, rule 5).
RECORDED_BUCKETS = frozenset({"IGNORE", "RESTART_APP"})


@dataclass(frozen=True)
class CatalogEntry:
    """One row of NVIDIA's Xid Catalog (sheet "Xids"); ``applies_to`` maps A100/H100/B100/GB200 to bool."""

    xid: int
    mnemonic: str
    description: str
    applies_to: dict
    immediate: str  # "" when NVIDIA gives none
    investigatory: str
    xid154_linkage: str


@dataclass(frozen=True)
class Override:
    """An acceptance-policy decision that replaces the catalogue's bucket for one Xid."""

    fails: bool | None  # None: decided per event (see classify_one)
    reason: str


# Acceptance policy, not NVIDIA's catalogue: each entry says why it differs from rule 5.
POLICY_OVERRIDES: dict[int, Override] = {
    45: Override(False, "the catalogue's WORKFLOW_XID_45 reads 'Solo: RESTART_FM, Not Solo: IGNORE (follow other "
                        "Xid)'; the driver logs Xid 45 whenever it tears down a killed application (Ctrl-C, SIGKILL, "
                        "a probe's own watchdog), so it is recorded and the Xid that caused it is judged on its own"),
    154: Override(None, "the catalogue's XID_154 bucket reads 'Follow XID 154 reported guidance': the event fails "
                        "unless the recovery action it announces is 'None'"),
}


def _data(name: str):
    return resources.files("gpuaccept").joinpath("data", name)


def _rows(name: str):
    with _data(name).open(encoding="utf-8", newline="") as f:
        yield from csv.DictReader(line for line in f if not line.startswith("#"))


@lru_cache(maxsize=None)
def load_catalog() -> dict[int, CatalogEntry]:
    """NVIDIA's Xid Catalog from ``gpuaccept/data/xid_catalog.csv``: Xid number -> :class:`CatalogEntry`.

    Raises ValueError when a row has no number or a number twice (the data file is broken).
    """
    out: dict[int, CatalogEntry] = {}
    for row in _rows("xid_catalog.csv"):
        xid = int(row["xid"])
        if xid in out:
            raise ValueError(f"xid_catalog.csv: Xid {xid} twice")
        out[xid] = CatalogEntry(
            xid, row["mnemonic"], row["description"],
            {k.upper(): row[k] == "YES" for k in ("a100", "h100", "b100", "gb200")},
            row["immediate"], row["investigatory"], row["xid154_linkage"])
    return out


@lru_cache(maxsize=None)
def load_buckets() -> dict[str, str]:
    """Resolution bucket -> NVIDIA's action text, from ``gpuaccept/data/xid_resolution_buckets.csv``."""
    return {row["bucket"]: row["action"] for row in _rows("xid_resolution_buckets.csv")}


@lru_cache(maxsize=None)
def load_sxid_guidance() -> dict:
    """NVIDIA's SXid guidance from ``gpuaccept/data/sxid_guidance.yaml`` (keys: source, severities, ...)."""
    with _data("sxid_guidance.yaml").open(encoding="utf-8") as f:
        return load_data(f)


# "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
_RECOVERY_TO_RE = re.compile(r"\bto\s+(?:0x[0-9a-fA-F]+\s*)?\((?P<action>[^)]*)\)")


def recovery_action(msg: str) -> str | None:
    """The new recovery action named by an Xid 154 message (``"GPU Reset Required"``), or None."""
    m = _RECOVERY_TO_RE.search(msg or "")
    return m.group("action").strip() if m else None


def _action_text(bucket: str) -> str:
    text = load_buckets().get(bucket, "")
    return f"{bucket}: {text}" if text and text != bucket else bucket


def _raw(event: dict) -> str:
    return event.get("line") or event.get("msg") or ""


def classify_one(event: dict) -> dict:
    """One Xid event with the verdict added (see the module docstring for the rules).

    ``event``: a dict from the ``xid_events`` probe (``xid`` int or None, ``pci_bus_id``, ``msg``, ``line``,
    ``continuation``). Added keys: ``name`` (NVIDIA's description), ``mnemonic``, ``bucket`` (immediate),
    ``investigatory``, ``rule`` ("driver" | "no number" | "policy" | "unknown" | "no bucket" | "catalogue"), ``fails``
    (bool), ``action`` and an operator ``message``. Never raises on a malformed event.
    """
    out = dict(event)
    where = event.get("pci_bus_id") or "?"
    try:
        xid = int(event.get("xid"))
    except (TypeError, ValueError):
        xid = None
    if event.get("fault") == "init_failed":  # "RmInitAdapter failed!": no Xid, the GPU never came up
        code = event.get("init_code") or ""
        times = event.get("repeats") or 1
        out.update(name="GPU initialisation failed (RmInitAdapter)", mnemonic=None, bucket=None, investigatory=None,
                   rule="driver", fails=True, action="the driver could not initialise this GPU: it cannot be used")
        out["message"] = (f"the NVIDIA driver failed to initialise the GPU at {where} (RmInitAdapter failed"
                          f"{' ' + code if code else ''}{f', {times} times' if times > 1 else ''}): the GPU cannot "
                          f"be used; log: {_raw(event)}")
        return out
    if event.get("fault") == "pcie_uncorrected":  # PCIe AER recovery of the GPU (drivers/pci/pcie/err.c)
        times = event.get("repeats") or 1
        out.update(name="uncorrectable PCIe error (AER)", mnemonic=None, bucket=None, investigatory=None,
                   rule="driver", fails=True, action="check the GPU's PCIe link and slot (the kernel's AER recovery "
                                                      "could not hand the error to the nvidia driver)")
        out["message"] = (f"an uncorrectable PCIe error (AER) reached the GPU at {where} and the kernel could not "
                          f"recover it ({event.get('msg')}{f', {times} times' if times > 1 else ''}); log: {_raw(event)}")
        return out
    if xid is None:
        out.update(name="Xid without a number", mnemonic=None, bucket=None, investigatory=None, rule="no number",
                   fails=True, action=f"read the raw line; NVIDIA's catalogue: {CATALOGUE_URL}")
        out["message"] = (f"Xid line without a readable number on {where}: treated as a failure (it cannot be "
                          f"looked up); log: {_raw(event)}")
        return out
    entry = load_catalog().get(xid)
    name = entry.description if entry else "unknown Xid"
    out.update(name=name, mnemonic=entry.mnemonic if entry else None, bucket=entry.immediate if entry else None,
               investigatory=entry.investigatory if entry else None)
    log = event.get("msg", "")
    override = POLICY_OVERRIDES.get(xid)
    if override is not None:
        fails = override.fails
        if fails is None:  # Xid 154: the announced recovery action decides
            announced = recovery_action(" ".join([log or ""] + list(event.get("continuation") or [])))
            fails = announced is None or announced.lower() != "none"
            action = f"recovery action announced: {announced or 'not readable'}"
        else:
            action = _action_text(entry.immediate) if entry else "see the policy reason"
        out.update(rule="policy", fails=fails, action=action)
        verdict = "fails" if fails else "recorded"
        out["message"] = (f"Xid {xid} on {where}: {name} ({verdict} by gpuaccept policy: {override.reason}); "
                          f"action: {action}; log: {log}")
        return out
    if entry is None:
        out.update(rule="unknown", fails=True, action=f"look it up in NVIDIA's Xid catalogue ({CATALOGUE_URL})")
        out["message"] = (f"Xid {xid} on {where} is not in NVIDIA's Xid catalogue as gpuaccept carries it: treated "
                          f"as a failure (see {CATALOGUE_URL}); log: {_raw(event)}")
        return out
    if not entry.immediate:
        out.update(rule="no bucket", fails=True, action=f"NVIDIA's catalogue gives none; see {CATALOGUE_URL}")
        out["message"] = (f"Xid {xid} on {where}: {name} ({entry.mnemonic}); NVIDIA's catalogue gives no immediate "
                          f"action for it: treated as a failure; log: {log}")
        return out
    fails = entry.immediate not in RECORDED_BUCKETS
    out.update(rule="catalogue", fails=fails, action=_action_text(entry.immediate))
    verdict = "fails" if fails else "recorded"
    out["message"] = (f"Xid {xid} on {where}: {name} ({entry.mnemonic}, immediate action {entry.immediate}, "
                      f"{verdict}); log: {log}")
    return out


# "Ch 00000001 caused by previous Xid 149": the driver names the Xid whose teardown an Xid 45 is
# (NVIDIA/open-gpu-kernel-modules#1150, driver 590)
_CAUSED_BY_RE = re.compile(r"caused by previous Xid (\d+)")


def caused_by(msg: str) -> int | None:
    """The Xid an Xid 45 message names as its cause (``"... caused by previous Xid 149"`` -> 149), or None."""
    m = _CAUSED_BY_RE.search(msg or "")
    return int(m.group(1)) if m else None


def classify(events: list[dict]) -> list[dict]:
    """:func:`classify_one` for each ``xid_events`` probe event, in order; then one rule across events: an
    Xid 45 (recorded by policy, the Xid that caused it being judged on its own) whose text names its cause
    (``caused by previous Xid 149``) while no such Xid of that GPU is among ``events`` (it fell before the
    window, or the driver rate-limited it) is judged as that cause: it fails when the named Xid would, with
    ``rule`` "named cause" and a message saying so."""
    out = [classify_one(e) for e in events]
    seen = {(e.get("pci_bus_id"), e.get("xid")) for e in events}
    for ev in out:
        m = _CAUSED_BY_RE.search(ev.get("msg") or "") if ev.get("xid") == 45 else None
        if not m or (ev.get("pci_bus_id"), int(m.group(1))) in seen:
            continue
        cause = classify_one({**ev, "xid": int(m.group(1)), "continuation": []})
        if not cause["fails"]:
            continue
        ev.update(fails=True, rule="named cause", action=cause["action"])
        ev["message"] = (f"Xid 45 on {ev.get('pci_bus_id') or '?'} names its cause, Xid {m.group(1)} "
                         f"({cause['name']}), which is not in the log window: judged as that Xid, which fails "
                         f"(action: {cause['action']}); log: {ev.get('msg', '')}")
    return out


# the NVSwitch driver's detail lines, printed after an SXid's first line: "Severity 1 Engine instance 37 ...",
# "Data {0x10000000, ...}" (NVIDIA Fabric Manager User Guide, "Runtime NVSwitch and GPU Errors")
_SXID_DETAIL_RE = re.compile(r"^(?:Severity\s+\d+\s+Engine instance|Data\s*\{)")


def classify_sxid(event: dict) -> dict:
    """One SXid event (from the probe's ``sxid_events``) with ``fails``, ``severity_rule``, ``guidance`` (NVIDIA's
    text for that severity) and ``message`` added. ``severity`` "Fatal" fails, "Non-fatal" is recorded, none stated fails (module docstring).

    The message names the switch (driver instance and PCI bus id), the SXid, the link and the log text.
    """
    out = dict(event)
    guide = load_sxid_guidance()
    sev = (event.get("severity") or "").strip().lower()
    link = event.get("link")
    where = (f"NVSwitch {event.get('switch') or '?'} ({event.get('pci_bus_id') or '?'})"
             + (f" link {link}" if link is not None else " (no link named)"))
    known = guide["severities"].get(sev)
    if known is None:
        out.update(fails=True, severity_rule="no severity stated", guidance=f"see {SXID_GUIDE_URL}")
        if _SXID_DETAIL_RE.match(event.get("msg") or ""):
            why = ("a detail line of an SXid report whose first line (the one stating Fatal or Non-fatal) is not in "
                   "the log window")
        else:
            why = "the line states neither Fatal nor Non-fatal"
        out["message"] = f"SXid {event.get('sxid')} on {where}: {why}: treated as a failure; log: {_raw(event)}"
        return out
    out.update(fails=bool(known["fails"]), severity_rule=sev, guidance=known["guidance"])
    verdict = "fails" if known["fails"] else "recorded"
    out["message"] = (f"SXid {event.get('sxid')} ({event.get('severity')}) on {where}: {event.get('msg', '')} "
                      f"({verdict}; NVIDIA Fabric Manager guide: {known['action']})")
    return out


def classify_sxids(events: list[dict]) -> list[dict]:
    """:func:`classify_sxid` for each SXid event, in order."""
    return [classify_sxid(e) for e in events]


# "(GPC 3, TPC 1, SM 0)": where on the chip the driver says an SM exception was (Xid 13's lines); NVIDIA's
# WORKFLOW_XID_13 decides by it ("Repeat TPC and GPC")
_GPC_TPC_RE = re.compile(r"\(GPC\s*(\d+),\s*TPC\s*(\d+)(?:,\s*SM\s*(\d+))?\)")


def chip_location(msg: str) -> str | None:
    """The GPC and TPC an Xid line names (``"... on (GPC 3, TPC 1, SM 0): ..."`` -> ``"GPC 3, TPC 1"``), or None
    when the line names none."""
    m = _GPC_TPC_RE.search(msg or "")
    return f"GPC {m.group(1)}, TPC {m.group(2)}" if m else None


@lru_cache(maxsize=None)
def load_in_run() -> dict:
    """``gpuaccept/data/xid_in_run.yaml``: ``buckets`` (immediate buckets judged in the run), ``repeats`` (int,
    occurrences on one GPU that make them repeated), ``own_tools`` (task names of the GPU programs the probes start),
    each with its source. Raises ValueError when broken."""
    with _data("xid_in_run.yaml").open(encoding="utf-8") as f:
        doc = load_data(f)
    if not isinstance(doc.get("repeats"), int) or doc["repeats"] < 2 or not doc.get("buckets") \
            or not doc.get("repeats_source") or not doc.get("buckets_source"):
        raise ValueError("xid_in_run.yaml: buckets and repeats (an int >= 2) with their sources")
    tools = doc.get("own_tools")
    if not isinstance(tools, list) or not all(isinstance(t, str) and 0 < len(t.encode()) <= 15 for t in tools) \
            or not doc.get("own_tools_source"):
        raise ValueError("xid_in_run.yaml: own_tools (task names of at most 15 bytes) with own_tools_source")
    return doc


def run_names(doc: dict | None) -> frozenset | None:
    """The task names of the run's own processes on a node: the ``xid_events`` document's ``probe_name`` (what the
    probes name themselves there) and ``own_tools`` of ``gpuaccept/data/xid_in_run.yaml``; None when the document
    does not say the probes' name (an older probe's capture, or a node where it could not be read): unknown."""
    name = (doc or {}).get("probe_name")
    if not isinstance(name, str) or not name.strip():
        return None
    return frozenset({name.strip(), *load_in_run()["own_tools"]})


def _in_run(event: dict, run_start: float | None) -> bool:
    epoch = event.get("epoch")
    return run_start is None or not isinstance(epoch, (int, float)) or epoch >= run_start


def _second(ev: dict):
    """The second an event was logged in (the key :func:`occurrences` groups lines by)."""
    epoch = ev.get("epoch")
    return int(epoch) if isinstance(epoch, (int, float)) else (ev.get("time") or id(ev))


def occurrences(events: list[dict]) -> int:
    """How many faults ``events`` (Xid events of one GPU) are: the lines of one second count once per process
    id they name, at least once (one fault is logged as several lines of one second, some without a pid:
    ``occurrence_source`` in ``gpuaccept/data/xid_in_run.yaml``)."""
    by_second: dict[object, set] = {}
    for ev in events:
        pids = by_second.setdefault(_second(ev), set())
        if isinstance(ev.get("pid"), int):
            pids.add(ev["pid"])
    return sum(max(1, len(p)) for p in by_second.values())


def _named(ev: dict) -> str | None:
    name = ev.get("process_name")
    return name if isinstance(name, str) and name.strip() not in ("", "<unknown>") else None


def split_foreign(events: list[dict], own: frozenset | set | None) -> tuple[list[dict], list[dict]]:
    """``(the run's, foreign)`` of one GPU's in-run Xid events. ``own``: :func:`run_names` (None: unknown, every
    event the run's). Foreign: an event whose ``process_name`` is set (not ``<unknown>``) and not in ``own``; an
    event without a name goes with the foreign ones when its second holds a foreign event and none of the run's
    named ones (the lines of that fault), else with the run's."""
    if own is None:
        return list(events), []
    foreign_s = {_second(e) for e in events if _named(e) is not None and _named(e) not in own}
    ours_s = {_second(e) for e in events if _named(e) is not None and _named(e) in own}
    foreign = [e for e in events if (_named(e) is not None and _named(e) not in own)
               or (_named(e) is None and _second(e) in foreign_s and _second(e) not in ours_s)]
    theirs = {id(e) for e in foreign}
    return [e for e in events if id(e) not in theirs], foreign


def _summary(evs: list[dict], repeats: int) -> dict:
    """What one GPU's events are: ``xids``, ``locations``, ``count``, ``repeated_at``, ``pids``, ``names``,
    ``head`` (:func:`in_run_findings`)."""
    xids: dict[int, int] = {}
    for ev in evs:
        xids[ev["xid"]] = xids.get(ev["xid"], 0) + 1
    by_loc: dict[str, list[dict]] = {}
    for ev in evs:
        if (loc := chip_location(ev.get("msg"))) is not None:
            by_loc.setdefault(loc, []).append(ev)
    locations = {loc: occurrences(v) for loc, v in by_loc.items()}
    count = occurrences(evs)
    repeated_at = next((loc for loc, n in locations.items() if n >= repeats), None)
    # one Xid: its count is the faults' ("N times"); several: each with its lines (xN), then the faults
    head = (", ".join(f"Xid {x} x{n}" if n > 1 and len(xids) > 1 else f"Xid {x}" for x, n in sorted(xids.items()))
            + f" during the run, {count} time{'s' if count != 1 else ''}"
            + (f" ({locations[repeated_at]} on {repeated_at})" if repeated_at else
               f" ({'; '.join(f'{loc}: {n}' for loc, n in locations.items())})" if locations else ""))
    return {"xids": xids, "locations": locations, "count": count, "repeated_at": repeated_at,
            "pids": sorted({ev["pid"] for ev in evs if isinstance(ev.get("pid"), int)}),
            "names": sorted({n for ev in evs if (n := _named(ev)) is not None}), "head": head}


def _who(s: dict) -> str:
    pids = s["pids"]
    return (f"{', '.join(s['names']) or 'an unnamed process'}"
            f"{' (pid ' + ', '.join(map(str, pids[:8])) + (' ...' if len(pids) > 8 else '') + ')' if pids else ''}")


def _own_finding(evs: list[dict], conf: dict, own: frozenset | set | None) -> dict:
    s = _summary(evs, conf["repeats"])
    repeated = s["count"] >= conf["repeats"]
    work = {x: (load_catalog()[x].investigatory or "none") for x in s["xids"]}
    said = "; ".join(f"Xid {x} ({load_catalog()[x].description}): {w}" for x, w in sorted(work.items()))
    verdict = (f"repeated on this GPU (NVIDIA's workflows: a repeat on one GPU or one GPC/TPC is a possible "
               f"hardware issue): reset the GPU and run DCGM diagnostics" if repeated else
               "once on this GPU: not proven a fault, rerun; if it comes back, NVIDIA's investigatory workflow")
    if own is not None and s["names"]:
        whose = "the applications on the GPU were gpuaccept's own (its probes and the tools they start)"
    elif own is not None:
        whose = "the log names no process, and no other application's fault was logged with it: taken as the run's own"
    else:
        whose = ("taken as gpuaccept's own probes (this xid_events document does not say what name the probes run "
                 "under, so another application cannot be told from them)")
    return {
        "pci_bus_id": evs[0].get("pci_bus_id"), "rule": "app in run" if not repeated else "app repeated in run",
        **{k: s[k] for k in ("count", "xids", "locations", "repeated_at", "pids", "names", "head")},
        "investigatory": work, "workflows": {w: load_buckets().get(w) or w for w in work.values()},
        "message": (f"{s['head']} on {evs[0].get('pci_bus_id') or '?'}, immediate action "
                    f"{'/'.join(sorted({e['bucket'] for e in evs}))}, from {_who(s)}: {whose}, so restarting "
                    f"them proves nothing; {verdict} ({said}); log: {_raw(evs[0])}")}


def _foreign_finding(evs: list[dict], conf: dict, own: frozenset | set) -> dict:
    s = _summary(evs, conf["repeats"])
    return {
        "pci_bus_id": evs[0].get("pci_bus_id"), "rule": "foreign app in run",
        **{k: s[k] for k in ("count", "xids", "locations", "repeated_at", "pids", "names", "head")},
        "own_names": sorted(own),
        "message": (f"{s['head']} on {evs[0].get('pci_bus_id') or '?'}, immediate action "
                    f"{'/'.join(sorted({e['bucket'] for e in evs}))}, from {_who(s)}, an application that is not "
                    f"gpuaccept's (the run's own processes: {', '.join(sorted(own))}): another application used this GPU "
                    f"during the run; its Xids prove nothing about the card, whatever their count: the GPU's owner "
                    f"should look at that application; rerun once the GPU is free; log: {_raw(evs[0])}")}


def in_run_findings(events: list[dict], run_start: float | None, own: frozenset | set | None = None) -> list[dict]:
    """The application-class Xids of the run, findings per GPU (module docstring).

    ``events``: :func:`classify`'s output; those with ``rule`` "catalogue", an immediate bucket of
    ``xid_in_run.yaml`` (RESTART_APP) and an ``epoch`` at or after ``run_start`` (node epoch seconds; None: all,
    as for a replayed host; an event without an epoch counts as the run's) are marked ``in_run: True`` and
    grouped by ``pci_bus_id``. ``own``: the task names of the run's own processes (:func:`run_names`); None:
    unknown, every such event is the run's. Per GPU, the run's events (and the unnamed ones, :func:`split_foreign`)
    make one finding, ``rule`` "app in run" | "app repeated in run"; the events of other named processes
    (marked ``foreign: True``) make another, ``rule`` "foreign app in run", whatever their count. Each finding:
    ``pci_bus_id``, ``rule``, ``count`` (occurrences, :func:`occurrences`), ``xids`` ({xid: events}),
    ``locations`` ({"GPC g, TPC t": occurrences}), ``repeated_at`` (the location seen ``repeats`` times or None),
    ``pids``, ``names`` (process names the lines give), ``head`` (a short "Xid 13 x6, Xid 31 x1 ..." line) and
    ``message``; the run's also ``investigatory`` ({xid: NVIDIA's workflow id}) and ``workflows`` ({workflow id:
    NVIDIA's text}); the foreign one ``own_names`` (``own``, sorted). Earlier events keep their verdict. Pure."""
    conf = load_in_run()
    groups: dict[str, list[dict]] = {}
    for ev in events:
        if ev.get("rule") == "catalogue" and ev.get("bucket") in conf["buckets"] and _in_run(ev, run_start):
            ev["in_run"] = True
            groups.setdefault(str(ev.get("pci_bus_id") or "?").upper(), []).append(ev)
    out = []
    for evs in groups.values():
        ours, foreign = split_foreign(evs, own)
        if ours:
            out.append(_own_finding(ours, conf, own))
        if foreign:
            for ev in foreign:
                ev["foreign"] = True
            out.append(_foreign_finding(foreign, conf, own))
    return out


def finding_cause(finding: dict) -> Cause | None:
    """The cause of one :func:`in_run_findings` finding where the judge knows it: a foreign application's Xids are
    ``contention`` (kind ``foreign_app_xid``, evidence: the application's names, pids, Xids and occurrences); None
    for the run's own (their action's row decides)."""
    if finding.get("rule") != "foreign app in run":
        return None
    return Cause("contention", "foreign_app_xid", evidence={
        "process_names": list(finding.get("names") or []), "pids": list(finding.get("pids") or [])[:32],
        "xids": {str(x): n for x, n in (finding.get("xids") or {}).items()}, "count": finding.get("count")})
