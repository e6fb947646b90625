#!/usr/bin/env python3
"""XID and SXid events from the kernel log (read-only).

Run on the node as ``python3 xid_events.py '{"since_epoch": 1764447441.5}'``. Args (all optional)::

    {"since_epoch": float,     # only lines from then on (without it: the whole current boot / file)
     "sources": [str, ...]}    # log files to read instead of the default chain below (tests, saved logs)

Sources (read by the shared helper ``_kernel_log.py``, which the host_kernel_log probe reads the log with too), in
order, first readable one wins:

1. ``journalctl -k -o short-iso --no-pager [--since=@EPOCH]`` (the kernel messages of the current boot);
2. ``dmesg --time-format iso`` (the kernel ring buffer), filtered by time here;
3. ``/var/log/kern.log``, then ``/var/log/messages`` (last 64 MiB), filtered by time here.

A source is "readable" when the command runs and exits 0 without saying it could not open the journal
(journalctl prints "No journal files were found" with rc 0 in containers). A readable source with no
line at all in the window is passed over for the next one; if no later one is readable, its empty answer
is returned with a ``note``. If no source is readable the probe FAILS with
``cannot read the kernel log: journalctl: ...; dmesg: ...; /var/log/kern.log: ...`` (rc 1): an unreadable
log is never reported as "0 events".

Output::

    {"source": "journalctl" | "dmesg" | "/var/log/kern.log" | "/var/log/messages" | <a path from "sources">,
     "since_epoch": float | None,
     "lines_scanned": int,                 # log lines in the window
     "events": [{"time": ISO-8601 UTC | raw timestamp | None, "epoch": float | None,
                 "pci_bus_id": "00000000:19:00.0",   # NVML's bus id form (_pci.py), to match gpu_inventory
                 "pci_raw": "0000:19:00",            # as logged
                 "xid": int | None,                  # None: an Xid line whose number could not be read
                 "pid": int | None, "process_name": str | None,
                 "msg": str,                         # the text after "Xid (...): N, [pid=..., name=...,]"
                 "continuation": [str],              # following NVRM lines about the same event
                 "uuid": "GPU-..." | None,           # from a preceding "NVRM: GPU at PCI:...: GPU-..." line
                 "inferred": bool,                   # true: "fallen off the bus" without an Xid line (-> 79)
                 "line": str,                        # the raw first line
                 # only on "RmInitAdapter failed!" events (xid None, pci_bus_id None when the line names none):
                 "fault": "init_failed", "init_code": "(0x24:0x72:1568)" | None, "repeats": int,
                 # only on PCIe AER recovery lines of the nvidia driver's device (xid None):
                 "fault": "pcie_uncorrected", "repeats": int}],
     "sxid_events": [{"time", "epoch", "switch": "nvidia-nvswitch3",
                      "pci_bus_id": "00000000:C1:00.0", "pci_raw": "0000:c1:00.0",   # the NVSwitch's
                      "sxid": int, "severity": "Fatal" | "Non-fatal" | None,       # None: not stated
                      "link": int | None, "msg": str, "continuation": [str], "line": str}],
     "attempts": [{"source", "ok": bool, "error": str, "lines": int}],
     "probe_name": "gpuaccept-probe" | None}   # the name gpuaccept's probes run under on this node (what this
                                                # probe's /proc/self/comm read after _probe.name_process; None:
                                                # unknown). The Xid lines of the probes name it (name=...).

Line formats handled (NVIDIA driver, open-gpu-kernel-modules ``nv_report_error``/``nvErrorLog`` output; the
NVSwitch format from NVIDIA's Fabric Manager User Guide, "Runtime NVSwitch and GPU Errors")::

    NVRM: Xid (PCI:0000:19:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:af:00): 13, pid=23187, name=python3, Graphics SM Warp Exception on (GPC 0, ...)
    NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). ...   (MIG)
    NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 ...                       (old drivers)
    NVRM: Xid (PCI:0000:19:00): <no number>                                      (-> xid None)
    NVRM: GPU 0000:19:00.0: GPU has fallen off the bus.                           (-> xid 79)
    NVRM: GPU at 0000:01:00.0 has fallen off the bus.                              (old drivers, -> xid 79)
    NVRM: The NVIDIA GPU 0000:b3:00.0                                              (three lines, from
    NVRM: (PCI ID: 10de:26b5) installed in this system has                         nv.c, no Xid number:
    NVRM: fallen off the bus and is not responding to commands.                    -> xid 79 on b3:00.0)
    NVRM: GPU at PCI:0000:19:00: GPU-6a1f...                                       (uuid of the next Xid)
    NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)                (-> fault init_failed, one
    NVRM: GPU 0000:0a:00.0: rm_init_adapter failed, device minor number 5           event per GPU, repeats
    NVRM: RmInitAdapter failed! (0x26:0xffff:1123)  (old drivers, no bus id)         counted)
    nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)            (-> fault pcie_uncorrected,
    nvidia 0000:02:00.0: device has no AER-aware driver                             one event per GPU)
    nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, Non-fatal, Link 46 MC TS crumbstore MCTO (First)
    nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, Severity 0 Engine instance 46 Sub-engine instance 00
    nvidia-nvswitch0: SXid (PCI:0004:00:00.0): 26006, SOE HALTED                  (no severity stated)

Parsing is in pure functions (parse_timestamp, parse_kernel_log, ...) imported by the tests.
Standard library only.
"""
from __future__ import annotations

import re

from _kernel_log import iso_utc, lines_in_window, parse_timestamp, read_first
from _pci import normalize_bus_id
from _probe import ProbeFailed, own_name, reject_unknown, run  # noqa: F401 - ProbeFailed: the tests' xev.ProbeFailed

CONTINUATION_WINDOW_S = 10.0  # an NVRM line this close after an Xid line, on no other device, belongs to it
SAME_XID_MERGE_S = 2.0  # the same Xid on the same GPU this close after the first line: the same report
ARG_KEYS = {"since_epoch", "sources"}

_PCI = r"(?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"
_XID_HEAD = r"NVRM: Xid \(" + _PCI + r"(?:\s+[^)]*)?\)"  # "(PCI:0000:01:00 GPU-I:05)" under MIG
XID_RE = re.compile(_XID_HEAD + r":\s*(?P<xid>\d+)\s*(?:,\s*(?P<rest>.*))?$")
XID_NO_NUMBER_RE = re.compile(_XID_HEAD + r":?\s*(?P<rest>.*)$")
OFF_BUS_RE = re.compile(r"NVRM: GPU (?:at )?" + _PCI + r":? (?:GPU )?has fallen off the bus")
THE_GPU_RE = re.compile(r"NVRM: The NVIDIA GPU " + _PCI + r"\b")  # first line of nv.c's off-the-bus message
FALLEN_TEXT = "fallen off the bus"
GPU_AT_UUID_RE = re.compile(r"NVRM: GPU at " + _PCI + r":\s*(?P<uuid>GPU-[0-9a-fA-F-]+)")
ANY_PCI_RE = re.compile(r"(?<![0-9a-fA-F:])(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)(?![0-9a-fA-F])")
SXID_RE = re.compile(r"(?P<switch>nvidia-nvswitch\d+): SXid \(" + _PCI + r"\):\s*(?P<sxid>\d+)\s*,?\s*(?P<rest>.*)$")
SXID_HEAD_RE = re.compile(r"^(?P<sev>Fatal|Non-fatal)\s*,\s*(?:Link\s+(?P<link>\d+)\b\s*)?(?P<msg>.*)$", re.I)
SXID_LINK_RE = re.compile(r"\bLink\s+(?P<link>\d+)\b")
PID_NAME_RE = re.compile(r"^pid=(?P<pid>'[^']*'|<[^>]*>|[^,\s]*)\s*,\s*(?:name=(?P<name>[^,]*?)\s*,\s*)?(?P<msg>.*)$")

INIT_FAIL_RE = re.compile(r"NVRM: (?:GPU " + _PCI + r": )?RmInitAdapter failed!\s*(?P<code>\([^)]*\))?")
INIT_MINOR_RE = re.compile(r"NVRM: (?:GPU " + _PCI + r": )?rm_init_adapter failed(?:,| for) device (?:bearing )?minor number")

# PCIe AER recovery reaching a GPU (Linux drivers/pci/pcie/err.c, only run for uncorrectable errors): the
# nvidia driver has no AER error handlers, so the kernel says so for the GPU it could not recover
AER_GPU_RE = re.compile(r"\bnvidia (?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): "
                        r"(?P<what>AER: can't recover[^\n]*|device has no AER-aware driver)")



# ---------------------------------------------------------------------------------------------------------
# pure parsing


def normalize_pci(pci: str) -> str:
    """Kernel-log PCI address (``0000:19:00`` or ``0000:19:00.0``) -> NVML form ``00000000:19:00.0`` (_pci.py)."""
    return normalize_bus_id(pci) or pci


def parse_xid_rest(rest: str | None) -> tuple[int | None, str | None, str]:
    """Split ``pid=..., name=..., message`` (newer drivers) into (pid, process name, message)."""
    rest = (rest or "").strip()
    m = PID_NAME_RE.match(rest)
    if not m:
        return None, None, rest
    pid_s = m.group("pid").strip("'")
    pid = int(pid_s) if pid_s.isdigit() else None
    name = m.group("name")
    if name is not None:
        name = name.strip().strip("'")
        if name in ("", "<unknown>"):
            name = None
    return pid, name, m.group("msg").strip()


def _nvrm_part(line: str) -> str | None:
    i = line.find("NVRM: ")
    return None if i < 0 else line[i:]


def _new_event(epoch, ts_text, pci_raw: str, xid, msg: str, line: str, uuids: dict, *, pid=None, name=None,
               inferred: bool = False) -> dict:
    pci = normalize_pci(pci_raw)
    return {"time": iso_utc(epoch) if epoch is not None else ts_text, "epoch": epoch, "pci_bus_id": pci,
            "pci_raw": pci_raw, "xid": xid, "pid": pid, "process_name": name, "msg": msg, "continuation": [],
            "uuid": uuids.get(pci), "inferred": inferred, "line": line}


def _near(ev, epoch, window: float) -> bool:
    return ev is not None and (epoch is None or ev["epoch"] is None or epoch - ev["epoch"] <= window)


def parse_log(lines, since_epoch: float | None = None, now: float | None = None) -> dict:
    """Parse kernel log lines into Xid and SXid events.

    ``lines``: iterable of str (one log line each, timestamp first as journalctl/dmesg/syslog write it).
    Returns ``{"events": [...], "sxid_events": [...], "lines_scanned": int}`` (shapes in the module docstring).

    Lines with a timestamp before ``since_epoch`` are skipped (lines without a parsable timestamp are
    kept). Continuation: an NVRM line that is not itself an Xid, that follows an event within
    CONTINUATION_WINDOW_S and names no other device is appended to that event's ``continuation``; so is a
    repeated Xid line of the same number on the same device within SAME_XID_MERGE_S (the driver prints a
    multi-line Xid 13 as several "Xid ...: 13," lines), unless both lines name different pids (two processes
    faulting: two events), and a "GPU has fallen off the bus" line after an
    Xid 79 of the same GPU. A fallen-off-the-bus message with no Xid 79 before it (one line, or nv.c's
    three lines "The NVIDIA GPU <bdf>" ... "fallen off the bus and is not responding to commands") becomes
    an event of its own (``xid`` 79, ``inferred`` true); an Xid 79 line that follows it merges into it.
    An "NVRM: Xid (...)" line whose number cannot be read is an event with ``xid`` None and its raw line.
    SXid lines: a line stating Fatal/Non-fatal opens an event; a later line of the same switch and SXid
    within CONTINUATION_WINDOW_S that states no severity ("Severity 0 Engine instance ...", "Data {...}")
    is its continuation (matched per switch and SXid: the driver interleaves the lines of several switches);
    one with no such event before it is an event with ``severity`` None.
    """
    parser = _Parser()
    for line, epoch, ts_text, _ in lines_in_window(lines, since_epoch, now):
        parser.scanned += 1
        parser.feed(line, epoch, ts_text)
    return {"events": parser.events, "sxid_events": parser.sxids, "lines_scanned": parser.scanned}


class _Parser:
    """The state of :func:`parse_log` over one log: the events so far and the ones a later line may continue."""

    def __init__(self) -> None:
        self.events: list = []
        self.sxids: list = []
        self.scanned = 0
        self.open_ev = None
        self.open_sx: dict = {}  # (switch, SXid) -> its latest event: the driver interleaves several switches' lines
        self.off_bus = None  # {"pci_raw", "epoch", "ts", "line", "parts"}: a "The NVIDIA GPU <bdf>" line waiting for its end
        self.uuids: dict = {}

    def feed(self, line: str, epoch, ts_text) -> None:
        """One log line (``epoch``/``ts_text``: its timestamp as :func:`parse_timestamp` read it)."""
        for regex, whole_line in ((SXID_RE, self._sxid), (AER_GPU_RE, self._aer)):
            m = regex.search(line)
            if m:
                whole_line(m, line, epoch, ts_text)
                return
        nvrm = _nvrm_part(line)
        if nvrm is None:
            return
        body = nvrm[len("NVRM: "):]
        if self._off_bus_parts(nvrm, body, line, epoch, ts_text):
            return
        near = _near(self.open_ev, epoch, CONTINUATION_WINDOW_S)
        for regex, nvrm_line in ((XID_RE, self._xid), (XID_NO_NUMBER_RE, self._xid_no_number),
                                 (INIT_FAIL_RE, self._init_failed), (INIT_MINOR_RE, self._init_minor),
                                 (GPU_AT_UUID_RE, self._gpu_uuid), (OFF_BUS_RE, self._fallen_off)):
            m = regex.search(nvrm)
            if m:
                nvrm_line(m, body, line, epoch, ts_text, near)
                return
        self._continuation(nvrm, body, near)

    def _sxid(self, m, line: str, epoch, ts_text) -> None:
        sxid, rest = int(m.group("sxid")), m.group("rest").strip()
        head = SXID_HEAD_RE.match(rest)
        key = (m.group("switch"), sxid)
        if head is None and _near(self.open_sx.get(key), epoch, CONTINUATION_WINDOW_S):
            self.open_sx[key]["continuation"].append(rest)
            return
        link = head.group("link") if head else (SXID_LINK_RE.search(rest).group("link")
                                               if SXID_LINK_RE.search(rest) else None)
        sev = head.group("sev") if head else None
        sx = {"time": iso_utc(epoch) if epoch is not None else ts_text, "epoch": epoch,
              "switch": m.group("switch"), "pci_bus_id": normalize_pci(m.group("pci")),
              "pci_raw": m.group("pci"), "sxid": sxid,
              "severity": ("Fatal" if sev.lower() == "fatal" else "Non-fatal") if sev else None,
              "link": int(link) if link is not None else None,
              "msg": (head.group("msg") if head else rest).strip(), "continuation": [], "line": line}
        self.sxids.append(sx)
        self.open_sx[key] = sx

    def _aer(self, m, line: str, epoch, ts_text) -> None:
        # an uncorrectable PCIe error reached this GPU and the driver cannot recover from it
        pci = normalize_pci(m.group("pci"))
        seen = next((e for e in self.events if e.get("fault") == "pcie_uncorrected" and e["pci_bus_id"] == pci),
                    None)
        if seen is not None:
            seen["repeats"] += 1
            if m.group("what") not in seen["continuation"] and m.group("what") != seen["msg"]:
                seen["continuation"].append(m.group("what"))
            return
        ev = _new_event(epoch, ts_text, m.group("pci"), None, m.group("what"), line, self.uuids)
        ev.update(fault="pcie_uncorrected", repeats=1)
        self.events.append(ev)

    def _finish_off_bus(self) -> None:
        off_bus, open_ev = self.off_bus, self.open_ev
        pci = normalize_pci(off_bus["pci_raw"])
        if _near(open_ev, off_bus["epoch"], CONTINUATION_WINDOW_S) and open_ev["pci_bus_id"] == pci \
                and open_ev["xid"] == 79:
            open_ev["continuation"].append(" ".join(off_bus["parts"]))
            return
        self.open_ev = _new_event(off_bus["epoch"], off_bus["ts"], off_bus["pci_raw"], 79, " ".join(off_bus["parts"]),
                                  off_bus["line"], self.uuids, inferred=True)
        self.events.append(self.open_ev)

    def _off_bus_parts(self, nvrm: str, body: str, line: str, epoch, ts_text) -> bool:
        """nv.c's "The NVIDIA GPU <bdf>" message: its first line, and the rest of its three lines."""
        if self.off_bus is not None:  # the rest of nv.c's three-line message
            if _near(self.off_bus, epoch, CONTINUATION_WINDOW_S) and not THE_GPU_RE.search(nvrm) \
                    and not XID_NO_NUMBER_RE.search(nvrm):
                self.off_bus["parts"].append(body)
                if FALLEN_TEXT in body:
                    self._finish_off_bus()
                    self.off_bus = None
                return True
            self.off_bus = None  # never said "fallen off the bus": some other message
        m = THE_GPU_RE.search(nvrm)
        if not m:
            return False
        self.off_bus = {"pci_raw": m.group("pci"), "epoch": epoch, "ts": ts_text, "line": line, "parts": [body]}
        if FALLEN_TEXT in body:  # the one-line form
            self._finish_off_bus()
            self.off_bus = None
        return True

    def _xid(self, m, body: str, line: str, epoch, ts_text, near: bool) -> None:
        open_ev = self.open_ev
        pci = normalize_pci(m.group("pci"))
        xid = int(m.group("xid"))
        pid, name, msg = parse_xid_rest(m.group("rest") or "")
        if near and open_ev["pci_bus_id"] == pci and open_ev["xid"] == xid:
            if open_ev.get("inferred") and xid == 79:  # the Xid 79 line came after the off-bus line
                open_ev["continuation"].insert(0, open_ev["msg"])
                open_ev.update(inferred=False, pid=pid, process_name=name, msg=msg, line=line)
                return
            if _near(open_ev, epoch, SAME_XID_MERGE_S) and (pid is None or open_ev["pid"] in (None, pid)):
                open_ev["continuation"].append(msg)  # one multi-line report (e.g. Xid 13 SM + ESR lines)
                if open_ev["pid"] is None and pid is not None:
                    open_ev.update(pid=pid, process_name=name)
                return
        self.open_ev = _new_event(epoch, ts_text, m.group("pci"), xid, msg, line, self.uuids, pid=pid, name=name)
        self.events.append(self.open_ev)

    def _xid_no_number(self, m, body: str, line: str, epoch, ts_text, near: bool) -> None:
        # "NVRM: Xid (PCI:...)" without a readable number: kept with its raw text
        self.open_ev = _new_event(epoch, ts_text, m.group("pci"), None, m.group("rest").strip(), line, self.uuids)
        self.events.append(self.open_ev)

    def _init_failed(self, m, body: str, line: str, epoch, ts_text, near: bool) -> None:
        # "RmInitAdapter failed!": the driver could not bring the GPU up
        pci_raw = m.group("pci") or ""
        pci = normalize_pci(pci_raw) if pci_raw else None
        seen = next((e for e in self.events if e.get("fault") == "init_failed" and e["pci_bus_id"] == pci), None)
        if seen is not None:  # the driver retries at every open: one event per GPU, with a count
            seen["repeats"] += 1
            self.open_ev = seen
            return
        self.open_ev = _new_event(epoch, ts_text, pci_raw, None, body, line, self.uuids)
        self.open_ev.update(pci_bus_id=pci, fault="init_failed", init_code=m.group("code"), repeats=1)
        self.events.append(self.open_ev)

    def _init_minor(self, m, body: str, line: str, epoch, ts_text, near: bool) -> None:
        # "rm_init_adapter failed, device minor number N": the second line of that report
        open_ev = self.open_ev
        pci = normalize_pci(m.group("pci")) if m.group("pci") else None
        if near and open_ev.get("fault") == "init_failed" and pci in (None, open_ev["pci_bus_id"]):
            if body not in open_ev["continuation"]:
                open_ev["continuation"].append(body)
            return
        if any(e.get("fault") == "init_failed" and e["pci_bus_id"] == pci for e in self.events):
            return
        self.open_ev = _new_event(epoch, ts_text, m.group("pci") or "", None, body, line, self.uuids)
        self.open_ev.update(pci_bus_id=pci, fault="init_failed", init_code=None, repeats=1)
        self.events.append(self.open_ev)

    def _gpu_uuid(self, m, body: str, line: str, epoch, ts_text, near: bool) -> None:
        self.uuids[normalize_pci(m.group("pci"))] = m.group("uuid")
        self.open_ev = None  # announces the next Xid on that GPU

    def _fallen_off(self, m, body: str, line: str, epoch, ts_text, near: bool) -> None:
        open_ev = self.open_ev
        pci = normalize_pci(m.group("pci"))
        if near and open_ev["pci_bus_id"] == pci and open_ev["xid"] == 79:
            open_ev["continuation"].append(body)
            return
        self.open_ev = _new_event(epoch, ts_text, m.group("pci"), 79, body, line, self.uuids, inferred=True)
        self.events.append(self.open_ev)

    def _continuation(self, nvrm: str, body: str, near: bool) -> None:
        """Any other NVRM line: the open event's continuation, unless it is too late or about another GPU."""
        open_ev = self.open_ev
        if open_ev is None or not near:
            self.open_ev = None
            return
        other = [normalize_pci(p.group("pci")) for p in ANY_PCI_RE.finditer(nvrm)]
        if any(p != open_ev["pci_bus_id"] for p in other):
            self.open_ev = None  # a line about another GPU ends the message
            return
        open_ev["continuation"].append(body)


def parse_kernel_log(lines, since_epoch: float | None = None, now: float | None = None) -> tuple[list, int]:
    """(Xid events, lines scanned) of :func:`parse_log`: the Xid half, for callers that need no SXids."""
    doc = parse_log(lines, since_epoch, now)
    return doc["events"], doc["lines_scanned"]


# ---------------------------------------------------------------------------------------------------------
# sources (read-only)


def main(args: dict) -> dict:
    """Probe entry point: the document described in the module docstring (the sources: _kernel_log.read_first)."""
    reject_unknown(args, ARG_KEYS)
    since = args.get("since_epoch")
    since = float(since) if since is not None else None

    def parse(lines):
        doc = parse_log(lines, since)
        return {"lines_scanned": doc["lines_scanned"], "events": doc["events"], "sxid_events": doc["sxid_events"]}

    doc = read_first(since, args.get("sources"), parse)
    doc["probe_name"] = own_name()  # the probes' name on this node, as the driver's Xid lines carry it
    return doc


if __name__ == "__main__":
    run(main)
