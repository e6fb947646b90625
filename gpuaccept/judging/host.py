"""Judging the host layer (pure): kernel-log states, host memory and EDAC, writable filesystems, NVMe health.

The facts come from the probes host_kernel_log, host_memory, host_filesystems and nvme_inventory
(gpuaccept/probes/); the kinds of kernel line, their cause class and their meaning from
``gpuaccept/data/host_kernel_catalog.yaml`` (:func:`load_catalog`); the limits from ``gpuaccept/data/host_limits.yaml``
(:func:`load_limits`): a node with no GPU and no ``gpu_sku`` is judged by those, the SKU threshold files hold GPU
limits only. Each function returns :class:`gpuaccept.judging.health.Finding` objects that the suite hands to
``Recorder.apply``; every failing or erroring one carries a :class:`gpuaccept.causes.Cause` whose ``kind`` is a row of
``gpuaccept/data/actions.yaml`` (section ``causes``), so its action follows its class (no drain without hardware).
Decisions read the probes' structured facts (a pattern id, a device name, a ``failure.reason``, a counter), never the
wording of a line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable

from gpuaccept.causes import CLASSES, Cause
from gpuaccept.config.thresholds import Limit
from gpuaccept.config.yamlload import load_data
from gpuaccept.judging import fsdevice
from gpuaccept.judging.health import Finding
from gpuaccept.judging.storage import path_cause

CATALOG_FILE = "host_kernel_catalog.yaml"
LIMITS_FILE = "host_limits.yaml"
VERDICTS = ("fail", "error", "counted")
GIB = 1 << 30


@dataclass(frozen=True)
class KernelKind:
    """One row of the catalogue: ``id``, ``regex`` (matched on the node), ``cls`` (cause class), ``kind`` (its
    actions.yaml ``causes`` row), ``verdict`` (fail | error | counted), ``fs_error`` (a filesystem or drive error of
    the device it names), ``meaning``, ``guidance``, ``source``, ``date``."""

    id: str
    regex: str
    cls: str
    kind: str
    verdict: str
    fs_error: bool
    meaning: str
    guidance: str
    source: str
    date: str
    trace: str | None = None
    netfs: str | None = None


def _data(name: str) -> Any:
    with resources.files("gpuaccept").joinpath("data", name).open(encoding="utf-8") as f:
        return load_data(f)


@lru_cache(maxsize=None)
def load_catalog() -> tuple[KernelKind, ...]:
    """The catalogue's rows, checked. Raises ValueError naming the row when an id repeats, a field is missing, the
    class or verdict is unknown, the regex does not compile, ``trace`` names no frame table or ``netfs`` no network
    filesystem of ``stack_frames`` (the data file is broken)."""
    rows, seen = [], set()
    kinds = stack_frames()
    for i, r in enumerate(_data(CATALOG_FILE)["rows"]):
        if r.get("trace") not in (None, "stack_frames") or (
                r.get("netfs") is not None and (kinds.get(r["netfs"]) or {}).get("where") != "network"):
            raise ValueError(f"{CATALOG_FILE}: row {i} ({r.get('id')}): trace {r.get('trace')!r} is not "
                             f"'stack_frames', or netfs {r.get('netfs')!r} is no network kind of stack_frames")
        missing = [k for k in ("id", "regex", "class", "kind", "verdict", "meaning", "guidance", "source", "date")
                   if not r.get(k)]
        if missing or r["id"] in seen or r["class"] not in CLASSES or r["verdict"] not in VERDICTS:
            raise ValueError(f"{CATALOG_FILE}: row {i} ({r.get('id')}): missing {missing}, a repeated id, or a class/"
                             f"verdict outside {CLASSES}/{VERDICTS}")
        try:
            re.compile(r["regex"])
        except re.error as e:
            raise ValueError(f"{CATALOG_FILE}: row {r['id']}: regex does not compile: {e}") from None
        seen.add(r["id"])
        rows.append(KernelKind(r["id"], r["regex"], r["class"], r["kind"], r["verdict"], bool(r.get("fs_error")),
                               r["meaning"], r["guidance"], r["source"], str(r["date"]), r.get("trace"),
                               r.get("netfs")))
    return tuple(rows)


#: the places a frame can belong to (the catalogue's stack_frames ``where``)
FRAME_WHERE = ("network", "local")


@lru_cache(maxsize=None)
def stack_frames() -> dict[str, dict]:
    """The catalogue's ``stack_frames.kinds``: kind (nfs, lustre, nvme, ext4...) -> ``{where: network | local,
    prefixes: [str], modules: [str], source}``. Raises ValueError naming a kind without a ``where`` of
    :data:`FRAME_WHERE`, a source, or with no prefix and no module."""
    kinds = _data(CATALOG_FILE)["stack_frames"]["kinds"]
    for k, v in kinds.items():
        if v.get("where") not in FRAME_WHERE or not v.get("source") or not (v.get("prefixes") or v.get("modules")):
            raise ValueError(f"{CATALOG_FILE}: stack_frames kind {k}: needs where in {FRAME_WHERE}, a source, and "
                             f"prefixes or modules")
    return kinds


@lru_cache(maxsize=None)
def critical_warning_bits() -> dict[int, str]:
    """NVMe SMART Critical Warning bit -> meaning (the catalogue's ``nvme_critical_warning``, NVMe Base spec 2.0)."""
    return {int(k): str(v) for k, v in _data(CATALOG_FILE)["nvme_critical_warning"]["bits"].items()}


@lru_cache(maxsize=None)
def load_limits() -> dict:
    """``gpuaccept/data/host_limits.yaml`` as read: ``memory_reserved_fraction`` and ``edac_ce_in_window``
    (``{max, unit, source, date}``), ``fs_probe_bytes``."""
    return _data(LIMITS_FILE)


def limit(key: str, check: str | None = None, bound: float | None = None) -> Limit:
    """The :class:`Limit` of host_limits.yaml entry ``key`` (``{max|min, unit, source}``), for figure ``check``
    (default ``key``); ``bound`` replaces the file's number where the inventory sets it (``host_memory_gb``'s floor),
    the file's source kept. Origin ``host_limits``: failure lines say ``host_limits.yaml checks.<check>``."""
    e = load_limits()[key]
    direction = "max" if "max" in e else "min"
    return Limit("host_limits", check or key, direction, float(e[direction] if bound is None else bound),
                 str(e["unit"]), str(e["source"]))


def none_found(check: str, findings: list[Finding]) -> Finding:
    """The judged count of ``findings`` that fail or error, as ``check``: against ``no_findings`` (max 0) when there
    is none (the clean host's PASS is judged), recorded without a limit otherwise (each finding fails on its own
    line with its own cause; a second line from the limit would only repeat it as an unverified figure)."""
    n = sum(1 for f in findings if f.failure or f.error)
    return Finding(check, n, "findings", limit=limit("no_findings", check) if n == 0 else None)


def probe_patterns() -> list[dict]:
    """The host_kernel_log probe's ``patterns`` argument: ``[{"id", "regex"[, "trace"][, "device"]}]`` of every
    catalogue row; a row with ``trace`` sends the frame table (``[{"fs", "where", "prefixes", "modules"}]`` of
    :func:`stack_frames`) its call trace is classified with; an ``fs_error`` row sends ``device: true`` (the probe
    describes its device from sysfs: gpuaccept/judging/fsdevice.py)."""
    table = [{"fs": k, "where": v["where"], "prefixes": list(v.get("prefixes") or []),
              "modules": list(v.get("modules") or []), **({"generic": True} if v.get("generic") else {})}
             for k, v in stack_frames().items()]
    return [{"id": k.id, "regex": k.regex, **({"trace": table} if k.trace else {}),
             **({"device": True} if k.fs_error else {})} for k in load_catalog()]


def kernel_log_args(host_vars: dict) -> dict:
    """The host_kernel_log probe's catalogue arguments for a host: ``patterns`` (:func:`probe_patterns`),
    ``block_kinds`` (gpuaccept.judging.fsdevice.block_kinds), and ``sysfs`` where the inventory sets
    ``host_sysfs_root`` (the fs_error devices are described there)."""
    root = host_vars.get("host_sysfs_root")
    return {"patterns": probe_patterns(), "block_kinds": fsdevice.block_kinds(), **({"sysfs": root} if root else {})}


# ------------------------------------------------------------------------------------------- kernel log

def _in_window(matches: Iterable[dict], cut: float | None) -> list[dict]:
    if cut is None:
        return list(matches)
    return [m for m in matches if not isinstance(m.get("epoch"), (int, float)) or m["epoch"] >= cut]


#: seconds a kernel-log line may be dated after the moment the log was read, on the node's clock, before it reads as
#: dated in the future: the node clock's own reading's uncertainty is added to it; a minute covers a log line
#: written and stamped while the probe read (gpuaccept's bound, 2026-12-05)
FUTURE_SLACK_S = 60.0


def future_lines(matches: list[dict], until: float | None) -> tuple[list[dict], list[dict]]:
    """``(lines dated at or before until, lines dated after it)`` of host_kernel_log ``matches`` (``until``: node
    epoch seconds, None: no bound); a line without a date is not in the future."""
    now: list[dict] = []
    late: list[dict] = []
    for m in matches:
        ahead = until is not None and isinstance(m.get("epoch"), (int, float)) and m["epoch"] > until
        (late if ahead else now).append(m)
    return now, late


def kernel_findings(doc: dict, cut: float | None = None, window_s: float | None = None,
                    until: float | None = None) -> list[Finding]:
    """Findings of a host_kernel_log document: one per (catalogue id, device), naming the device, how many lines,
    the first one's time and text. ``cut``: node epoch seconds before which a line is not the run's
    (gpuaccept.runner.nodeclock.in_window); ``window_s``: the window's length in seconds (the CE rate).

    ``verdict: fail`` rows fail with their class and kind; ``error`` rows (an OOM kill) make the test an ERROR of their
    class; ``counted`` rows (EDAC CE) sum their ``count`` groups and fail when the sum is over
    ``edac_ce_in_window.max`` (host_limits.yaml), with the rate per hour over ``window_s``. A match of an id the
    catalogue does not carry (a newer probe) is recorded, not judged.

    A network filesystem's stall is judged apart (:func:`netfs_findings`): the server lines (rows with ``netfs``)
    and the hung tasks whose kept call trace waits on a ``network`` kind of :func:`stack_frames` (:func:`waits_on`).
    A hung task waiting on a local device (nvme, block, ext4, xfs, the NVIDIA driver), on nothing the table names,
    or with no trace kept stays its row's (hardware); its evidence names what it waits on when known.

    An ``fs_error`` row's cause is its device's (gpuaccept.judging.fsdevice.device_cause, from the probe's sysfs facts):
    hardware (FAIL) on a local drive; connectivity (``netblock_fs_error``, an ERROR) on network block storage;
    unverified (FAIL, rerun) on a loop image, a stack without a local drive, a device sysfs does not know.

    ``until``: node epoch seconds after which a line is dated in the future (the moment the log was read plus
    :data:`FUTURE_SLACK_S`; None: no bound, as for a saved log replayed): such lines are not judged by their rows
    (a soft lockup "at" a time that has not come proves nothing of this run) but make one unverified finding,
    ``kernel_log_future``: the log's timestamps are not the node's clock (rerun, check the log's source)."""
    rows = {k.id: k for k in load_catalog()}
    logged = set(fs_error_devices(doc, cut))
    groups: dict[tuple[str, str | None], list[dict]] = {}
    netfs: list[tuple[str, dict]] = []
    now, late = future_lines(_in_window(doc.get("matches") or [], cut), until)
    for m in now:
        fs = netfs_of(m, rows.get(m.get("id")))
        if fs is not None:
            netfs.append((fs, m))
        else:
            groups.setdefault((m.get("id"), m.get("device")), []).append(m)
    out = []
    for (pid, dev), ms in groups.items():
        row = rows.get(pid)
        first = ms[0]
        ev = {"id": pid, "device": dev, "lines": len(ms), "first_time": first.get("time"),
              "last_time": ms[-1].get("time"), "line": first.get("line")}
        check = f"kernel {pid}" + (f" {dev}" if dev else "")
        if row is None:
            out.append(Finding(check, len(ms), "lines", extra={**ev, "note": "not in the catalogue: recorded"}))
            continue
        ev.update(meaning=row.meaning, guidance=row.guidance, source=row.source)
        waits = next((w for w in map(waits_on, ms) if w), None) if row.trace else None
        if waits:
            ev["waits_on"] = waits
        cause = Cause(row.cls, row.kind, evidence={k: v for k, v in ev.items() if k in ("id", "device", "lines",
                                                                                     "first_time", "line", "waits_on")})
        text = (f"kernel log: {row.meaning} ({pid} on {dev or 'the host'}, {len(ms)} line(s), first at "
                f"{first.get('time') or 'an unknown time'}: {first.get('line')})")
        dc = fsdevice.device_cause(doc, dev, logged) if row.fs_error else None
        if dc is not None:
            ev.update(device_is=dc.evidence, device_said=dc.said)
            cause = Cause(dc.cls, dc.kind or row.kind, evidence={**cause.evidence, **dc.evidence})
            text = f"{text}; {dc.said}"
        if dc is not None and dc.cls == "connectivity":
            out.append(Finding(check, len(ms), "lines", extra=ev, error=text, cause=cause))
        elif row.verdict == "counted":
            out.append(_counted(check, ms, ev, cause, text, window_s))
        elif row.verdict == "error":
            out.append(Finding(check, len(ms), "lines", extra=ev, error=text, cause=cause))
        else:
            out.append(Finding(check, len(ms), "lines", extra=ev, failure=text, cause=cause))
    return out + netfs_findings(netfs, rows) + _future_finding(late, until)


def _future_finding(late: list[dict], until: float | None) -> list[Finding]:
    """The one finding of the lines dated in the future (:func:`kernel_findings`), or []."""
    if not late:
        return []
    first = late[0]
    ev = {"lines": len(late), "first_time": first.get("time"), "line": first.get("line"), "ids": sorted(
        {str(m.get("id")) for m in late}), "read_until_epoch": round(until, 3) if until is not None else None}
    return [Finding("kernel_log_future", len(late), "lines", extra=ev, cause=Cause("unverified", "kernel_log_future",
                                                                                     evidence=ev),
                    failure=f"kernel log: {len(late)} line(s) dated after the log was read (first at "
                            f"{first.get('time')}: {first.get('line')}): the log's timestamps are not this node's "
                            f"clock, so when they happened is not known; not judged by their rows")]


#: servers and tasks named in a network filesystem's finding at most (a storm of hung tasks names the first ones)
NAMED_MOST = 10


def waits_on(match: dict) -> dict | None:
    """What a kept call trace waits on (the probe's ``trace.waits_on``: the innermost classified frame), with its
    ``where`` read from :func:`stack_frames` (the catalogue decides, not the document): ``{"kind", "where", "fn"}``;
    None without a trace, with no classified frame, or with a kind the catalogue does not know."""
    w = (match.get("trace") or {}).get("waits_on") if isinstance(match.get("trace"), dict) else None
    kind = stack_frames().get(w.get("kind")) if isinstance(w, dict) else None
    if kind is None:
        return None
    return {"kind": w["kind"], "where": kind["where"], "fn": w.get("fn")}


def netfs_of(match: dict, row: KernelKind | None) -> str | None:
    """The network filesystem a kernel-log match is evidence of a stall of: its row's ``netfs`` (a server line), or
    the kind a ``trace`` row's call trace waits on when that kind is ``where: network``; else None. Reads the
    catalogue and the probe's structured facts, never the line's wording."""
    if row is None:
        return None
    if row.netfs:
        return row.netfs
    w = waits_on(match) if row.trace else None
    return w["kind"] if w and w["where"] == "network" else None


def _server(m: dict) -> str | None:
    return m.get("device") or (m.get("groups") or {}).get("server")


def netfs_findings(matches: list[tuple[str, dict]], rows: dict[str, KernelKind]) -> list[Finding]:
    """One ERROR finding per network filesystem (``kernel netfs_stall <fs>``) from ``[(fs, match)]`` (:func:`netfs_of`):
    class connectivity, kind ``netfs_server_stalled`` when a server line names the server (evidence ``server``,
    ``servers``), else ``netfs_hung_task`` (only hung tasks waiting on it: the server is not named). Not this
    node's hardware: a reboot or a drain does nothing for it (gpuaccept/data/actions.yaml). Extra: ``filesystem``,
    ``servers``, ``server_lines``, ``hung_tasks`` (in the window, as kept by the probe), ``tasks``, the first
    waiting frame, first/last time and the first line."""
    by_fs: dict[str, list[dict]] = {}
    for fs, m in matches:
        by_fs.setdefault(fs, []).append(m)
    out = []
    for fs, ms in by_fs.items():
        said = [m for m in ms if rows[m["id"]].netfs]
        hung = [m for m in ms if not rows[m["id"]].netfs]
        servers = list(dict.fromkeys(x for x in map(_server, said) if x))[:NAMED_MOST]
        tasks = list(dict.fromkeys(m.get("device") for m in hung if m.get("device")))[:NAMED_MOST]
        frame = next((w["fn"] for w in map(waits_on, hung) if w), None)
        first = (said or hung)[0]
        block = stack_frames()[fs].get("storage") == "block"  # network block storage (rbd, NVMe-oF, iSCSI...)
        kind = ("netblock" if block else "netfs") + ("_server_stalled" if said else "_hung_task")
        ev = {"filesystem": fs, "server": servers[0] if servers else None, "servers": servers,
              "server_lines": len(said), "hung_tasks": len(hung), "tasks": tasks, "waiting_in": frame,
              "ids": sorted({m["id"] for m in ms}), "first_time": first.get("time"), "last_time": ms[-1].get("time"),
              "line": first.get("line"), "meaning": rows[first["id"]].meaning, "source": rows[first["id"]].source}
        cause = Cause("connectivity", kind, evidence={k: ev[k] for k in ("filesystem", "server", "servers",
                                                                         "server_lines", "hung_tasks", "first_time")})
        who = f"server {', '.join(servers)}" if servers else "its server (no server line in the window)"
        waited = (f"; {len(hung)} hung task(s) waiting in {fs} ({', '.join(tasks)}{', ...' if len(hung) > len(tasks) else ''}"
                  f", at {frame})" if hung else "")
        text = (f"kernel log: the network {'block storage' if block else 'filesystem'} {fs}, {who}, stopped answering this node ({len(said)} server "
                f"line(s){waited}; first at {first.get('time') or 'an unknown time'}: {first.get('line')}): the "
                f"filesystem's server or the network to it, not this node's hardware")
        out.append(Finding(f"kernel {'netblock' if block else 'netfs'}_stall {fs}", len(ms), "lines", extra=ev, error=text, cause=cause))
    return out


def _counted(check: str, ms: list[dict], ev: dict, cause: Cause, text: str, window_s: float | None) -> Finding:
    lim = load_limits()["edac_ce_in_window"]
    total = sum(int(m["groups"]["count"]) if str((m.get("groups") or {}).get("count", "")).isdigit() else 1
                for m in ms)
    rate = round(total / (window_s / 3600.0), 3) if window_s and window_s > 0 else None
    ev = {**ev, "errors": total, "per_hour": rate, "limit": lim}
    if total <= lim["max"]:
        return Finding(check, total, "errors", extra=ev)
    said = f"{total} corrected error(s) during the run" + (f" ({rate:g}/hour over {window_s / 3600:.2f} h)"
                                                         if rate is not None else "")
    return Finding(check, total, "errors", extra=ev, cause=cause,
                   failure=f"{said}, over edac_ce_in_window max {lim['max']:g} [{lim['source']}]; {text}")


def fs_error_devices(doc: dict | None, cut: float | None = None) -> dict[str, dict]:
    """Device name -> the first kernel-log match of a ``fs_error`` catalogue row naming it (an NVMe controller
    ``nvme0``, a block device ``nvme0n1p1``, ``dm-0``), with ``device_cause``: the
    :class:`gpuaccept.judging.fsdevice.DeviceCause` of the device (None for a document without device facts): what
    makes a read-only or failing path hardware, connectivity (network block storage) or unverified."""
    rows = {k.id for k in load_catalog() if k.fs_error}
    out: dict[str, dict] = {}
    for m in _in_window((doc or {}).get("matches") or [], cut):
        if m.get("id") in rows and m.get("device"):
            out.setdefault(m["device"], m)
    return {d: {**m, "device_cause": fsdevice.device_cause(doc, d, set(out))} for d, m in out.items()}


# ------------------------------------------------------------------------------------------- memory

def memory_findings(doc: dict, declared_gib: float | None) -> list[Finding]:
    """MemTotal against ``declared_gib`` (inventory ``host_memory_gb``, GiB): below it by more than
    ``memory_reserved_fraction`` (host_limits.yaml) fails as hardware (``host_memory_short``) only with evidence of
    the host's memory, else unverified (``host_memory_unverified``; :func:`_short`); above it fails as configuration (``host_memory_declared``: the inventory is wrong); not declared: recorded,
    not judged. EDAC: an uncorrectable count above 0 on any controller or DIMM fails as hardware
    (``host_memory_ue``); correctable counts are recorded with their rate since the counters' reset."""
    out = []
    got = doc.get("mem_total_gib")
    lim = load_limits()["memory_reserved_fraction"]
    ev = {"declared_gib": declared_gib, "reserved_max_fraction": lim["max"], "source": lim["source"]}
    if got is None:
        out.append(Finding("mem_total_gib", None, "GiB", extra=ev, error="MemTotal not readable in /proc/meminfo",
                           cause=Cause("tool", "gap")))
    elif declared_gib is None:
        out.append(Finding("mem_total_gib", got, "GiB", extra={**ev, "note": "not judged: inventory var "
                                                                          "host_memory_gb not set"}))
    else:
        floor = round(declared_gib * (1 - lim["max"]), 3)
        short = round(1 - got / declared_gib, 4)
        judged = Limit("host_limits", "mem_total_gib", "min", floor, "GiB", f"host_memory_gb {declared_gib:g} GiB less "
                       f"memory_reserved_fraction {lim['max']:g} ({lim['source']})") if got >= floor else None
        f = Finding("mem_total_gib", got, "GiB", limit=judged,
                    extra={**ev, "floor_gib": floor, "short_fraction": short})
        if got < floor:
            f = replace(f, **_short(got, floor, declared_gib, lim, doc.get("edac") or {}))
        elif got > declared_gib:
            f = replace(f, failure=(f"host memory {got:g} GiB (MemTotal) > host_memory_gb {declared_gib:g} GiB: the inventory is wrong"),
                        cause=Cause("configuration", "host_memory_declared",
                            evidence={"mem_total_gib": got, "declared_gib": declared_gib}))
        out.append(f)
    edac = doc.get("edac") or {}
    if not edac.get("present"):
        out.append(Finding("edac", "not present", extra={"note": "no EDAC driver loaded: host memory errors are not "
                                                                 "counted on this node (recorded, not judged)"}))
        return out
    for mc in edac.get("controllers") or []:
        secs = mc.get("seconds_since_reset")
        ce = mc.get("ce_count")
        rate = round(ce / (secs / 3600.0), 3) if isinstance(ce, int) and secs else None
        out.append(Finding(f"edac_ce {mc['name']}", ce, "errors",
                           extra={"seconds_since_reset": secs, "per_hour_since_reset": rate,
                                  "dimms": {d["name"]: d.get("ce_count") for d in mc.get("dimms") or []}}))
        bad = [d for d in mc.get("dimms") or [] if (d.get("ue_count") or 0) > 0]
        ue = mc.get("ue_count")
        f = Finding(f"edac_ue {mc['name']}", ue, "errors")
        if (ue or 0) > 0 or bad:
            where = ", ".join(f"{d['name']} ({d.get('label') or '?'}): {d['ue_count']}" for d in bad) or "no DIMM named"
            f = replace(f, failure=(f"{mc['name']}: {ue} uncorrectable host memory error(s) (EDAC ue_count); {where}"),
                        cause=Cause("hardware", "host_memory_ue", evidence={"controller": mc["name"], "ue_count": ue,
                                                                    "dimms": [d["name"] for d in bad]}))
        out.append(f)
    return out


def _short(got: float, floor: float, declared: float, lim: dict, edac: dict) -> dict:
    """The failure and cause of MemTotal under the floor. Hardware (``host_memory_short``) only with evidence of the
    host's memory: an EDAC uncorrectable count above 0 (a controller's or a DIMM's), or the DIMMs EDAC lists summing
    to more than the kernel has above its reserved share (memory the firmware sees and the kernel was not given: a
    DIMM mapped out). Else ``host_memory_unverified`` (host_memory_gb may be wrong: a typo, a group-wide value)."""
    ctrls = edac.get("controllers") or []
    ue = [f"{mc['name']}: {mc.get('ue_count')}" for mc in ctrls if (mc.get("ue_count") or 0) > 0
          or any((d.get("ue_count") or 0) > 0 for d in mc.get("dimms") or [])]
    sizes = [d.get("size_mb") for mc in ctrls for d in mc.get("dimms") or []]
    dimm_gib = round(sum(sizes) / 1024, 3) if sizes and all(isinstance(x, int) for x in sizes) else None
    mapped_out = dimm_gib is not None and got < dimm_gib * (1 - lim["max"])
    ev = {"mem_total_gib": got, "declared_gib": declared, "edac_present": bool(edac.get("present")),
          "dimms_seen": len(sizes), "dimms_gib": dimm_gib, "ue_controllers": ue}
    said = (f"host memory {got:g} GiB (MemTotal) < {floor:g} GiB: host_memory_gb {declared:g} GiB less the kernel's "
            f"reserved share (max {lim['max']:g})")
    if ue or mapped_out:
        why = (f"uncorrectable EDAC errors ({'; '.join(ue)})" if ue else
               f"the {len(sizes)} DIMMs EDAC lists hold {dimm_gib:g} GiB, the kernel has {got:g}")
        return {"failure": f"{said}; {why}: a DIMM failed or mapped out",
                "cause": Cause("hardware", "host_memory_short", evidence=ev)}
    seen = (f"the {len(sizes)} DIMMs EDAC lists sum to {dimm_gib:g} GiB" if dimm_gib is not None
            else "no DIMM sizes readable (EDAC)")
    return {"failure": f"{said}; no evidence of a failed DIMM ({seen}, no uncorrectable error): check host_memory_gb "
                       f"against the platform's inventory", "cause": Cause("unverified", "host_memory_unverified", evidence=ev)}


#: the intervals :func:`edac_growth` judges over: from the warm-up's run-start reading (gpuaccept.runner.fanout), or
#: the host layer's own two tests when no run-start reading exists (replayed host, xdist worker, failed read)
EDAC_WINDOWS = ("run", "host layer only")


def edac_growth(start: dict, end: dict, window: str = "host layer only") -> list[Finding]:
    """EDAC counters of two host_memory documents (``start``: the run's start when ``window`` is "run", else the start
    of the host layer; ``end``: the end of the host layer): a correctable count that grew by more than
    ``edac_ce_in_window.max`` fails as hardware (``host_memory_ce``) with its rate per hour over the interval, naming
    the DIMMs that grew; an uncorrectable one that grew fails as ``host_memory_ue``. Each finding's extra names the
    ``window`` (one of :data:`EDAC_WINDOWS`; ValueError for another)."""
    if window not in EDAC_WINDOWS:
        raise ValueError(f"edac_growth: window {window!r} is not one of {EDAC_WINDOWS}")
    lim = load_limits()["edac_ce_in_window"]
    secs = (end.get("read_at") or 0) - (start.get("read_at") or 0)
    before = {mc["name"]: mc for mc in (start.get("edac") or {}).get("controllers") or []}
    out = []
    for mc in (end.get("edac") or {}).get("controllers") or []:
        was = before.get(mc["name"])
        if was is None:
            continue
        olddimms = {d["name"]: d for d in was.get("dimms") or []}
        for key, kind in (("ce_count", "host_memory_ce"), ("ue_count", "host_memory_ue")):
            a, b = was.get(key), mc.get(key)
            if not isinstance(a, int) or not isinstance(b, int):
                continue
            grew = b - a
            rate = round(grew / (secs / 3600.0), 3) if secs > 0 else None
            dimms = [f"{d['name']} ({d.get('label') or '?'}) +{d[key] - olddimms[d['name']][key]}"
                     for d in mc.get("dimms") or [] if d["name"] in olddimms and isinstance(d.get(key), int)
                     and isinstance(olddimms[d["name"]].get(key), int) and d[key] > olddimms[d["name"]][key]]
            f = Finding(f"{key}_growth {mc['name']}", grew, "errors",
                        extra={"interval_s": round(secs, 3), "per_hour": rate, "dimms": dimms,
                               "window": window})
            allowed = lim["max"] if key == "ce_count" else 0
            if grew > allowed:
                what = "correctable" if key == "ce_count" else "uncorrectable"
                f = replace(f, failure=((f"{mc['name']}: {grew} {what} host memory error(s) during the run "
                             f"({rate if rate is not None else '?'}/hour over {secs:.1f} s, window: {window}; "
                             f"EDAC {key} {a} -> {b})"
                             + (f"; DIMMs: {', '.join(dimms)}" if dimms else ""))),
                            cause=Cause("hardware", kind, evidence={"controller": mc["name"], "grew": grew, "per_hour": rate,
                                                                "window": window}))
            out.append(f)
    return out


# ------------------------------------------------------------------------------------------- filesystems

def filesystem_findings(doc: dict, fs_errors: dict[str, dict]) -> list[Finding]:
    """One finding per path of a host_filesystems document. A written path passes. A path that could not be
    written fails: as hardware (``kernel_fs_error``) when ``fs_errors`` (:func:`fs_error_devices`) names one of its
    ``block_names`` (the kernel logged a filesystem or NVMe error for that device; the device's own cause instead where
    the probe described it, gpuaccept.judging.fsdevice: network block storage is connectivity, a loop image or an
    unknown device unverified), or when the write itself got an
    I/O error (``io_error``); else by its fact (gpuaccept.judging.storage.path_cause): read-only and not-writable are
    configuration, too little space is capacity, a missing folder is configuration (placement)."""
    out = []
    for p in doc.get("paths") or []:
        # the probes' own folder is made afresh each run ($TMPDIR/gpuaccept.<12 hex>): its check is named by its
        # role, and its facts ride in one nested extra, ``folder`` (gpuaccept.judging.standouts.key_extras keeps
        # no nested value in a figure's key), so that its history lines up from run to run
        check = "writable probes' folder" if p.get("role") == "probe" else f"writable {p['path']}"
        ev = {k: p.get(k) for k in ("path", "role", "mount_point", "mount_source", "fstype", "device", "block_names",
                                    "free_bytes", "write_s", "failure")}
        if p.get("role") == "probe":
            ev = {"role": "probe", "folder": {k: v for k, v in ev.items() if k != "role"}}
        if p.get("ok"):
            out.append(Finding(check, True, extra=ev))
            continue
        logged = next((fs_errors[n] for n in p.get("block_names") or [] if n in fs_errors), None)
        failure = p.get("failure") or {}
        dc = (logged or {}).get("device_cause")
        if logged is not None:
            cause = Cause("hardware", "kernel_fs_error", evidence={"path": p["path"], "device": logged.get("device"),
                                                                   "line": logged.get("line")})
            text = (f"{p.get('error') or p['path'] + ': not writable'}; the kernel logged an error of its device "
                    f"{logged.get('device')} at {logged.get('time')}: {logged.get('line')}")
            if dc is not None:  # the device's kind decides: a local drive, network block storage, a loop image...
                cause = Cause(dc.cls, dc.kind or "kernel_fs_error", evidence={**cause.evidence, **dc.evidence})
                text = f"{text}; {dc.said}"
        elif failure.get("reason") == "io_error":
            cause = Cause("hardware", "io_error", evidence={"path": p["path"], "errno": failure.get("errno")})
            text = p.get("error") or f"{p['path']}: I/O error"
        else:
            cause = path_cause(p)[1] or Cause("configuration", "placement", evidence={"path": p["path"]})
            text = p.get("error") or f"{p['path']}: not writable"
        out.append(Finding(check, False, extra=ev, failure=text, cause=cause))
    return out


# ------------------------------------------------------------------------------------------- NVMe

#: NVMe controller states (Linux drivers/nvme/host/core.c, nvme_ctrl_state and the state file's words) that are a
#: step of a reset or of a connection the driver is making, not where it settled: one reading proves nothing
NVME_PASSING_STATES = frozenset({"new", "resetting", "connecting"})


def nvme_state_cause(state: str, transport: str | None, name: str) -> Cause:
    """The cause of an NVMe controller found in ``state`` (not ``live``), by its ``transport`` (the controller's sysfs
    transport: ``pcie`` for a drive in this node; ``tcp``, ``rdma``, ``fc`` for NVMe over Fabrics, whose controller
    is a target across the network): a fabrics controller that is reconnecting, dead or being deleted is the network
    or the target (connectivity, ``nvme_fabric_state``: check-network); a local one passing through a reset or a
    connect (:data:`NVME_PASSING_STATES`) is unverified (``nvme_controller_transient``: rerun); a local one dead or
    deleted is hardware (``nvme_controller_state``: drain-rma)."""
    ev = {"controller": name, "state": state, "transport": transport}
    if transport not in (None, "pcie", "loop"):
        return Cause("connectivity", "nvme_fabric_state", evidence=ev)
    if state in NVME_PASSING_STATES:
        return Cause("unverified", "nvme_controller_transient", evidence=ev)
    return Cause("hardware", "nvme_controller_state", evidence=ev)


#: the SMART Critical Warning value of the temperature bit alone (NVMe Base spec 2.0, SMART / Health Information,
#: Critical Warning bit 1: a temperature at or past an over- or under-temperature threshold)
NVME_TEMPERATURE_BIT = 0x02


def nvme_findings(doc: dict) -> list[Finding]:
    """Per NVMe controller of an nvme_inventory document: a controller state other than ``live`` fails with the
    cause :func:`nvme_state_cause` gives (a dead local drive is hardware; a fabrics target reconnecting is the
    network; a reset in progress is unverified); each SMART Critical Warning bit set fails as hardware
    (``nvme_critical_warning``) with its meaning (NVMe Base spec, :func:`critical_warning_bits`); wear
    (percent_used) and media errors are recorded, not judged here (wear alone is no failure)."""
    bits = critical_warning_bits()
    out = []
    for c in doc.get("controllers") or []:
        who = f"{c['name']} ({c.get('model') or '?'}, serial {c.get('serial') or '?'})"
        state = c.get("state")
        f = Finding(f"nvme_state {c['name']}", state, extra={"controller": who, "transport": c.get("transport")})
        if state not in (None, "live"):
            via = f", transport {c['transport']}" if c.get("transport") not in (None, "pcie") else ""
            f = replace(f, failure=f"{who}: controller state {state} (not live{via})",
                        cause=nvme_state_cause(state, c.get("transport"), c["name"]))
        out.append(f)
        smart = c.get("smart")
        if smart is None:
            out.append(Finding(f"nvme_smart {c['name']}", None, extra={"controller": who, "note": "not read: "
                               f"{c.get('smart_error') or 'no SMART log'} (the controller state is judged)"}))
            continue
        cw = smart.get("critical_warning")
        ev = {"controller": who, "percent_used": smart.get("percent_used"), "media_errors": smart.get("media_errors")}
        f = Finding(f"nvme_critical_warning {c['name']}", cw, extra=ev)
        if isinstance(cw, int) and cw:
            said = [f"bit {b}: {bits.get(b, 'reserved bit')}" for b in range(8) if cw >> b & 1]
            # bit 1 alone (temperature past a threshold) is the drive's cooling first: the chassis airflow, its fans
            kind = "nvme_over_temperature" if cw == NVME_TEMPERATURE_BIT else "nvme_critical_warning"
            f = replace(f, failure=(f"{who}: SMART critical warning {cw:#04x}: " + "; ".join(said)),
                        cause=Cause("hardware", kind, evidence={"controller": c["name"], "critical_warning": cw}))
        out.append(f)
    return out
