"""The Xid/SXid probe (xid_events) on fixture log text and real files, and gpuaccept.judging.xid's judging.

Fixture logs (tests/data): kern-xid.log (Xid lines as the NVIDIA driver writes them, journalctl short-iso) and
kern-sxid-offbus.log (the NVSwitch SXid format of NVIDIA's Fabric Manager guide, an Xid line without a number,
nv.c's three-line "fallen off the bus" message in journal and per-line form, its one-line form, an Xid
number NVIDIA's catalogue does not carry). The probe's file sources are read for real (readable, missing,
a directory, an empty file), never through a patched reader.
"""
from __future__ import annotations

import calendar
import os
import re
import tomllib
from fnmatch import fnmatch

import pytest

from gpuaccept.judging import xid as xidmod
from gpuaccept.probes._probe import PROCESS_NAME
from probe_helpers import DATA, ROOT, load_probe, run_probe

xev = load_probe("xid_events")

SINCE = calendar.timegm((2026, 11, 29, 20, 15, 0, 0, 0, 0))
SXID_LOG = DATA / "kern-sxid-offbus.log"


# ---------------------------------------------------------------------------------------------------------
# the probe as the runner runs it


def test_xid_events_probe_runs_here():
    """This machine may or may not let us read the kernel log: either answer is fine, silence is not."""
    rc, doc, _ = run_probe("xid_events", {"since_epoch": 0})
    if rc == 0:
        assert doc["source"] in ("journalctl", "dmesg", "/var/log/kern.log", "/var/log/messages")
        assert isinstance(doc["events"], list)
        assert isinstance(doc["lines_scanned"], int)
        assert any(a["ok"] for a in doc["attempts"])
    else:
        assert rc == 1 and doc["failed"] is True
        assert doc["msg"].startswith("cannot read the kernel log: ")


# ---------------------------------------------------------------------------------------------------------
# xid_events parsing: Xid lines


SINCE = calendar.timegm((2026, 11, 29, 20, 15, 0, 0, 0, 0))


def fixture_lines():
    return (DATA / "kern-xid.log").read_text().splitlines()


def test_parse_fixture_events():
    events, scanned = xev.parse_kernel_log(fixture_lines(), SINCE)
    assert [(e["xid"], e["pci_bus_id"]) for e in events] == [
        (13, "00000000:AF:00.0"),
        (48, "00000000:86:00.0"),
        (63, "00000000:86:00.0"),
        (79, "00000000:19:00.0"),
        (154, "00000000:19:00.0"),
        (79, "00000000:9B:00.0"),
    ]
    assert scanned == 21  # lines from 20:15:00 on, the "-- Journal begins" banner excluded
    xid13, dbe, remap, off_bus, recovery, inferred = events

    # Xid 13: three driver lines, one report; pid/name taken from the line that has them
    assert xid13["pid"] == 23187 and xid13["process_name"] == "python3"
    assert xid13["msg"].startswith("Graphics SM Warp Exception")
    assert len(xid13["continuation"]) == 2 and xid13["continuation"][1].startswith("Graphics Exception: ESR")
    assert xid13["uuid"] == "GPU-00000000-0000-0000-0000-000000000003"
    assert xid13["time"] == "2026-11-29T20:16:40.000000Z"
    assert xid13["epoch"] == SINCE + 100

    assert dbe["pid"] == 24410 and dbe["process_name"] == "all_reduce_perf"
    assert "double bit error (DBE)" in dbe["msg"]
    assert remap["pid"] is None and remap["process_name"] is None
    assert remap["msg"].startswith("Row Remapper: New row")

    # Xid 79: the fallen-off-the-bus message and the crash-dump lines belong to it; the AER line does not
    assert off_bus["msg"] == "GPU has fallen off the bus."
    assert off_bus["inferred"] is False
    assert off_bus["uuid"] == "GPU-00000000-0000-0000-0000-000000000001"
    assert off_bus["pci_raw"] == "0000:19:00"
    assert off_bus["continuation"] == [
        "GPU 0000:19:00.0: GPU has fallen off the bus.",
        "GPU 0000:19:00.0: GPU serial number is 1650000000001.",
        "A GPU crash dump has been created. If possible, please run",
        "nvidia-bug-report.sh as root to collect this data before",
        "the NVIDIA kernel module is unloaded.",
    ]
    assert "Node Reboot Required" in recovery["msg"]

    # "GPU has fallen off the bus" without an Xid line: xid 79, marked inferred
    assert inferred["inferred"] is True and inferred["xid"] == 79
    assert inferred["msg"] == "GPU 0000:9b:00.0: GPU has fallen off the bus."
    assert inferred["continuation"] == ["os_pci_init_handle: invalid context!"]


def test_parse_fixture_without_since_includes_older_lines():
    events, scanned = xev.parse_kernel_log(fixture_lines())
    assert events[0]["xid"] == 31 and events[0]["pid"] == 18811
    assert events[0]["uuid"] == "GPU-00000000-0000-0000-0000-000000000004"
    assert len(events) == 7
    assert scanned == 23


@pytest.mark.parametrize("line, epoch, rest", [
    ("2026-11-29T20:17:21+0000 host kernel: x", calendar.timegm((2026, 11, 29, 20, 17, 21, 0, 0, 0)), "host kernel: x"),
    ("2026-11-29T22:17:21+02:00 host kernel: x", calendar.timegm((2026, 11, 29, 20, 17, 21, 0, 0, 0)), "host kernel: x"),
    ("2026-11-29T20:56:16,289025+00:00 NVRM: x", calendar.timegm((2026, 11, 29, 20, 56, 16, 0, 0, 0)) + 0.289025, "NVRM: x"),
    ("2026-11-29T20:56:16.5Z kernel: x", calendar.timegm((2026, 11, 29, 20, 56, 16, 0, 0, 0)) + 0.5, "kernel: x"),
    ("NVRM: no timestamp", None, "NVRM: no timestamp"),
])
def test_parse_timestamp(line, epoch, rest):
    got, _, tail = xev.parse_timestamp(line)
    assert tail == rest
    if epoch is None:
        assert got is None
    else:
        assert got == pytest.approx(epoch, abs=1e-6)


def test_parse_timestamp_syslog_uses_local_time_and_guesses_the_year():
    now = calendar.timegm((2026, 1, 2, 0, 0, 0, 0, 0, 0))
    epoch, ts, rest = xev.parse_timestamp("Dec 31 23:59:00 host kernel: [ 12.5] NVRM: x", now=now)
    assert ts == "Dec 31 23:59:00" and rest.startswith("host kernel:")
    assert 2025 == __import__("time").localtime(epoch).tm_year  # Dec 31 is last year's, not a future date


@pytest.mark.parametrize("line, xid, pci, pid, name, msg", [
    ("NVRM: Xid (PCI:0000:19:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
     79, "00000000:19:00.0", None, None, "GPU has fallen off the bus."),
    ("[ 5107.644336] NVRM: Xid (PCI:0000:03:00): 79, GPU has fallen off the bus.",
     79, "00000000:03:00.0", None, None, "GPU has fallen off the bus."),
    ("Jan 18 11:38:05 localhost kernel: [ 269.517039] NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 M 00001ffc",
     3, "00000000:01:00.0", None, None, "C 00000005 SC 00000007 M 00001ffc"),
    ("NVRM: Xid (PCI:0000:b3:00): 94, pid=991, name=train.py, Contained: SM (0x1). RST: No, D-RST: No",
     94, "00000000:B3:00.0", 991, "train.py", "Contained: SM (0x1). RST: No, D-RST: No"),
    ("NVRM: Xid (PCI:0000:d8:00): 119, GSP RPC Timeout",
     119, "00000000:D8:00.0", None, None, "GSP RPC Timeout"),
])
def test_parse_single_xid_lines(line, xid, pci, pid, name, msg):
    events, _ = xev.parse_kernel_log([line])
    assert len(events) == 1
    e = events[0]
    assert (e["xid"], e["pci_bus_id"], e["pid"], e["process_name"], e["msg"]) == (xid, pci, pid, name, msg)


def test_old_fallen_off_the_bus_format_is_xid_79():
    events, _ = xev.parse_kernel_log(["Sep 18 20:58:08 nb kernel: [ 1936.5] NVRM: GPU at 0000:01:00.0 has fallen off the bus."])
    assert [(e["xid"], e["pci_bus_id"], e["inferred"]) for e in events] == [(79, "00000000:01:00.0", True)]


def test_continuation_stops_at_another_gpu():
    lines = [
        "2026-11-29T20:21:13+0000 h kernel: NVRM: Xid (PCI:0000:19:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "2026-11-29T20:21:13+0000 h kernel: NVRM: GPU 0000:1a:00.0: something about another GPU",
        "2026-11-29T20:21:13+0000 h kernel: NVRM: A GPU crash dump has been created.",
    ]
    events, _ = xev.parse_kernel_log(lines)
    assert len(events) == 1 and events[0]["continuation"] == []


def test_xid_79_after_the_off_bus_line_merges():
    lines = [
        "2026-11-29T20:21:13+0000 h kernel: NVRM: GPU 0000:19:00.0: GPU has fallen off the bus.",
        "2026-11-29T20:21:13+0000 h kernel: NVRM: Xid (PCI:0000:19:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    ]
    events, _ = xev.parse_kernel_log(lines)
    assert len(events) == 1
    assert events[0]["inferred"] is False
    assert events[0]["continuation"] == ["GPU 0000:19:00.0: GPU has fallen off the bus."]


# ---------------------------------------------------------------------------------------------------------
# xid_events parsing: SXid lines, Xid lines without a number, "fallen off the bus" without an Xid


def sxid_doc():
    return xev.parse_log(SXID_LOG.read_text().splitlines())


def test_sxid_lines_become_switch_events_with_their_detail_lines():
    sx = sxid_doc()["sxid_events"]
    assert [(e["switch"], e["pci_bus_id"], e["sxid"], e["severity"], e["link"]) for e in sx] == [
        ("nvidia-nvswitch3", "00000000:C1:00.0", 28006, "Non-fatal", 46),
        ("nvidia-nvswitch0", "00000000:C2:00.0", 20034, "Fatal", 28),
        ("nvidia-nvswitch1", "00000004:00:00.0", 26006, None, None),
    ]
    nonfatal, fatal, soe = sx
    assert nonfatal["msg"] == "MC TS crumbstore MCTO (First)" and nonfatal["pci_raw"] == "0000:c1:00.0"
    assert nonfatal["continuation"] == [
        "Severity 0 Engine instance 46 Sub-engine instance 00",
        "Data {0x00140004, 0x00100000, 0x00140004, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000}"]
    assert fatal["msg"] == "LTSSM Fault Up" and fatal["continuation"] == ["Severity 5 Engine instance 28 Sub-engine instance 00"]
    assert fatal["time"] == "2026-11-30T09:05:10.000000Z"
    assert soe["msg"] == "SOE HALTED"


def test_sxid_detail_line_without_its_first_line_is_an_event_without_severity():
    (e,) = xev.parse_log(["nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 10002, Severity 5 Engine instance 00 "
                          "Sub-engine instance 00"])["sxid_events"]
    assert (e["sxid"], e["severity"], e["link"]) == (10002, None, None)


def test_xid_line_without_a_number_is_kept_with_its_raw_text():
    ev = sxid_doc()["events"]
    nonum = ev[0]
    assert nonum["xid"] is None and nonum["pci_bus_id"] == "00000000:3B:00.0"
    assert nonum["line"].endswith("NVRM: Xid (PCI:0000:3b:00): ")
    assert nonum["uuid"] == "GPU-00000000-0000-0000-0000-000000000004"
    assert ev[1]["xid"] == 13  # the next, numbered Xid on the same GPU is its own event


def test_fallen_off_the_bus_without_an_xid_number_is_xid_79_on_its_bus_id():
    ev = [e for e in sxid_doc()["events"] if e["xid"] == 79]
    assert [(e["pci_bus_id"], e["inferred"]) for e in ev] == [
        ("00000000:B3:00.0", True),    # three lines, one journal entry (continuation lines indented)
        ("00000000:DB:00.0", False),   # three lines, then the driver's own Xid 79 line: one event
        ("00000000:5D:00.0", True),    # the one-line form
    ]
    b3, db, _ = ev
    assert b3["msg"] == ("The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:2335) installed in this system has "
                         "fallen off the bus and is not responding to commands.")
    assert b3["time"] == "2026-11-30T09:20:30.000000Z"
    assert db["msg"] == "GPU has fallen off the bus." and len(db["continuation"]) == 1


def test_the_nvidia_gpu_line_that_never_says_fallen_is_no_event():
    lines = ["2026-11-30T09:00:00+0000 h kernel: NVRM: The NVIDIA GPU 0000:b3:00.0",
             "2026-11-30T09:00:00+0000 h kernel: NVRM: (PCI ID: 10de:2335) installed in this system is",
             "2026-11-30T09:00:00+0000 h kernel: NVRM: supported through a different driver."]
    assert xev.parse_log(lines)["events"] == []


def test_mig_form_of_the_xid_head():
    (e,) = xev.parse_kernel_log(["NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User "
                                 "Channel (0x9). RST: No, D-RST: No"])[0]
    assert (e["xid"], e["pci_bus_id"], e["pid"]) == (94, "00000000:01:00.0", 7194)


# ---------------------------------------------------------------------------------------------------------
# the probe's main() on real files: readable, missing, a directory, empty


def unreadable_sources(tmp_path):
    """(path, expected error) pairs that open() really refuses on this machine."""
    d = tmp_path / "a-directory.log"
    d.mkdir()
    out = [(str(tmp_path / "missing.log"), "not found"), (str(d), "Is a directory")]
    if os.geteuid() != 0:  # root reads a mode-000 file, so the permission case exists only for other users
        f = tmp_path / "locked.log"
        f.write_text("x\n")
        f.chmod(0)
        out.append((str(f), "permission denied"))
    return out


def test_main_reads_the_first_readable_file(tmp_path):
    (missing, why), *_ = unreadable_sources(tmp_path)
    doc = xev.main({"since_epoch": SINCE, "sources": [missing, str(DATA / "kern-xid.log")]})
    assert doc["source"] == str(DATA / "kern-xid.log")
    assert [e["xid"] for e in doc["events"]] == [13, 48, 63, 79, 154, 79] and doc["sxid_events"] == []
    assert doc["attempts"][0] == {"source": missing, "ok": False, "error": why}
    assert doc["attempts"][1]["ok"] is True and doc["attempts"][1]["lines"] == 21


def test_main_skips_an_empty_file_for_the_next_readable_one(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("-- No entries --\n")
    doc = xev.main({"sources": [str(empty), str(SXID_LOG)]})
    assert doc["source"] == str(SXID_LOG) and len(doc["sxid_events"]) == 3 and "note" not in doc


def test_main_returns_an_empty_readable_file_with_a_note(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    doc = xev.main({"sources": [str(empty)] + [p for p, _ in unreadable_sources(tmp_path)]})
    assert doc["source"] == str(empty) and doc["events"] == [] and doc["lines_scanned"] == 0
    assert "was readable but had no kernel line" in doc["note"]


def test_main_fails_when_no_file_is_readable(tmp_path):
    bad = unreadable_sources(tmp_path)
    with pytest.raises(xev.ProbeFailed) as ei:
        xev.main({"sources": [p for p, _ in bad]})
    msg = str(ei.value)
    assert msg.startswith("cannot read the kernel log: ")
    for path, why in bad:
        assert f"{path}: " in msg and why in msg


@pytest.mark.parametrize("args, want", [
    ({"sources": []}, "sources must be a non-empty list"),
    ({"sources": "kern.log"}, "sources must be a non-empty list"),
    ({"since": 0}, "unknown argument(s): since"),
])
def test_main_refuses_bad_arguments(args, want):
    with pytest.raises(xev.ProbeFailed, match=re.escape(want)):
        xev.main(args)


def test_probe_subprocess_reads_a_file_source():
    rc, doc, _ = run_probe("xid_events", {"sources": [str(SXID_LOG)]})
    assert rc == 0, doc
    assert [e["xid"] for e in doc["events"]] == [None, 13, 79, 79, 79, 200]
    assert [e["severity"] for e in doc["sxid_events"]] == ["Non-fatal", "Fatal", None]


# ---------------------------------------------------------------------------------------------------------
# gpuaccept.judging.xid: NVIDIA's catalogue as data, the verdict from the immediate bucket


@pytest.mark.parametrize("xid, bucket, rule, fails", [
    (13, "RESTART_APP", "catalogue", False),
    (31, "RESTART_APP", "catalogue", False),
    (43, "IGNORE", "catalogue", False),
    (45, "WORKFLOW_XID_45", "policy", False),
    (48, "WORKFLOW_XID_48", "catalogue", True),
    (63, "IGNORE", "catalogue", False),      # row remapping event: recorded; the remap state is judged from NVML
    (64, "RESET_GPU", "catalogue", True),
    (69, "RESTART_APP", "catalogue", False),  # graphics engine class error: application-class
    (74, "WORKFLOW_NVLINK_ERR", "catalogue", True),
    (79, "RESTART_BM", "catalogue", True),
    (92, "IGNORE", "catalogue", False),      # high single-bit ECC rate: IGNORE in the catalogue
    (94, "RESTART_APP", "catalogue", False),
    (95, "RESET_GPU", "catalogue", True),
    (119, "RESET_GPU", "catalogue", True),
    (137, "IGNORE", "catalogue", False),
    (140, "RESET_GPU", "catalogue", True),
    (145, "WORKFLOW_NVLINK5_ERR", "catalogue", True),
    (167, "", "no bucket", True),
    (999, None, "unknown", True),
])
def test_verdict_follows_the_immediate_bucket(xid, bucket, rule, fails):
    (c,) = xidmod.classify([{"xid": xid, "pci_bus_id": "00000000:19:00.0", "msg": "m", "line": "raw " + str(xid)}])
    assert (c["bucket"], c["rule"], c["fails"]) == (bucket, rule, fails)
    assert c["xid"] == xid and c["msg"] == "m"  # the event is kept
    assert c["action"] and c["message"].startswith(f"Xid {xid} on 00000000:19:00.0")
    if rule == "catalogue":
        assert f"immediate action {bucket}" in c["message"]
    if rule == "unknown":
        assert "treated as a failure" in c["message"] and "raw 999" in c["message"]


def test_xid_without_a_number_fails_with_its_raw_line():
    (c,) = xidmod.classify([{"xid": None, "pci_bus_id": "00000000:3B:00.0", "msg": "",
                             "line": "NVRM: Xid (PCI:0000:3b:00): "}])
    assert c["fails"] is True and c["rule"] == "no number"
    assert c["message"].endswith("log: NVRM: Xid (PCI:0000:3b:00): ")


@pytest.mark.parametrize("msg, fails", [
    ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", True),
    ("GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)", False),
    ("GPU recovery action changed", True),
])
def test_xid_154_follows_the_announced_recovery_action(msg, fails):
    (c,) = xidmod.classify([{"xid": 154, "msg": msg}])
    assert c["fails"] is fails and c["rule"] == "policy"


def test_classify_fixture_end_to_end():
    events, _ = xev.parse_kernel_log((DATA / "kern-xid.log").read_text().splitlines(), SINCE)
    got = [(c["xid"], c["fails"]) for c in xidmod.classify(events)]
    assert got == [(13, False), (48, True), (63, False), (79, True), (154, True), (79, True)]


def test_catalogue_data_file_is_nvidias_table():
    text = (ROOT / "gpuaccept" / "data" / "xid_catalog.csv").read_text()
    assert "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html" in text
    assert "sha256 7f70ce9684be0c9d98a367770341ccc1d8bca4465cebe42dab7e23d57df5d5a5" in text
    assert "Retrieved 2026-11-30" in text
    cat = xidmod.load_catalog()
    assert sorted(cat) == list(range(1, 173))
    assert cat[79].mnemonic == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS" and cat[79].immediate == "RESTART_BM"
    assert cat[136].applies_to == {"A100": False, "H100": True, "B100": False, "GB200": False}
    buckets = xidmod.load_buckets()
    used = {e.immediate for e in cat.values() if e.immediate}
    assert used <= set(buckets), used - set(buckets)  # every bucket has NVIDIA's action text


def test_policy_overrides_are_few_and_explained():
    cat = xidmod.load_catalog()
    assert set(xidmod.POLICY_OVERRIDES) == {45, 154}
    for xid, o in xidmod.POLICY_OVERRIDES.items():
        assert xid in cat and len(o.reason) > 40 and cat[xid].immediate in o.reason


def test_data_files_are_packaged():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = conf["tool"]["setuptools"]["package-data"]["gpuaccept"]
    data = ROOT / "gpuaccept" / "data"
    names = [p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file()]
    assert names and all(any(fnmatch("data/" + n, g) for g in globs) for n in names), names


# ---------------------------------------------------------------------------------------------------------
# gpuaccept.judging.xid: SXid judging from the Fabric Manager guide


def test_sxid_verdicts_name_switch_and_link():
    got = xidmod.classify_sxids(sxid_doc()["sxid_events"])
    assert [c["fails"] for c in got] == [False, True, True]
    nonfatal, fatal, soe = got
    assert "recorded" in nonfatal["message"] and nonfatal["severity_rule"] == "non-fatal"
    assert fatal["message"].startswith("SXid 20034 (Fatal) on NVSwitch nvidia-nvswitch0 (00000000:C2:00.0) "
                                       "link 28: LTSSM Fault Up (fails;")
    assert "states neither Fatal nor Non-fatal" in soe["message"] and "SOE HALTED" in soe["message"]


def test_sxid_guidance_data_has_its_source():
    g = xidmod.load_sxid_guidance()
    assert g["retrieved"] == "2026-11-30" and "fabric-manager-user-guide" in g["source"]
    assert g["severities"]["fatal"]["fails"] is True and g["severities"]["non-fatal"]["fails"] is False
    assert g["severities"]["non-fatal"]["guidance"].startswith("Non-fatal SXids are for informational purposes only")


# ---------------------------------------------------------------------------------------------------------
# application-class Xids (immediate RESTART_APP) inside the run's own window: findings of their GPU


def _fixture_events(extra: list[str] = ()) -> list[dict]:
    """kern-xid.log as the probe reads it (no window), plus ``extra`` lines, classified."""
    events, _ = xev.parse_kernel_log(fixture_lines() + list(extra))
    return xidmod.classify(events)


def _act(finding):
    from gpuaccept.judging import actions
    return actions.for_xid(finding)


def test_application_xid_once_in_the_run_is_unverified_rerun_naming_nvidias_workflow():
    events = _fixture_events()
    (f,) = xidmod.in_run_findings(events, SINCE)  # the run began 20:15; the Xid 13 fault at 20:16:40 is the run's
    # one fault written as three lines of one second (two without a pid): one event, one occurrence
    assert (f["pci_bus_id"], f["rule"], f["count"], f["xids"]) == ("00000000:AF:00.0", "app in run", 1, {13: 1})
    assert f["locations"] == {"GPC 1, TPC 0": 1} and f["repeated_at"] is None and f["pids"] == [23187]
    assert "(Graphics Engine Exception): WORKFLOW_XID_13" in f["message"] and "once on this GPU" in f["message"]
    assert f["workflows"]["WORKFLOW_XID_13"].startswith("Repeat TPC and GPC")  # NVIDIA's text kept beside the line
    a = _act(f)
    assert (a.action, a.cause) == ("rerun", "unverified") and "dcgmi diag" in a.reason
    assert a.reason.startswith("Xid 13 during the run, 1 time") and "WORKFLOW_XID_13" in a.source


def test_application_xid_repeated_on_one_gpu_is_hardware_reset_gpu_with_count_and_location():
    # the same fault again 30 s later, from another process (the real lines, a later second and pid)
    again = [ln.replace("20:16:40", "20:17:10").replace("pid=23187", "pid=23190") for ln in fixture_lines()
             if "(PCI:0000:af:00): 13" in ln]
    assert len(again) == 3
    (f,) = xidmod.in_run_findings(_fixture_events(again), SINCE)
    assert (f["rule"], f["count"], f["xids"], f["repeated_at"]) == ("app repeated in run", 2, {13: 2}, "GPC 1, TPC 0")
    assert f["locations"] == {"GPC 1, TPC 0": 2} and f["pids"] == [23187, 23190]
    a = _act(f)
    assert (a.action, a.cause) == ("reset-gpu", "hardware")
    assert a.reason.startswith("Xid 13 during the run, 2 times (2 on GPC 1, TPC 0): ") and "dcgmi diag" in a.reason
    assert xidmod.load_in_run()["repeats"] == 2 and "WORKFLOW_XID_13" in xidmod.load_in_run()["repeats_source"]


def test_application_xids_before_the_runs_window_keep_todays_rule():
    events = _fixture_events()
    xidmod.in_run_findings(events, SINCE)
    (x31,) = [e for e in events if e["xid"] == 31]  # 20:10:04: in the --xid-window look-back, before the run
    assert x31["fails"] is False and x31["rule"] == "catalogue" and "in_run" not in x31
    later = _fixture_events()
    assert xidmod.in_run_findings(later, SINCE + 3600) == []  # every Xid before the run's start: none
    assert [(e["xid"], e["fails"]) for e in later] == [(31, False), (13, False), (48, True), (63, False),
                                                       (79, True), (154, True), (79, True)]


def test_non_application_xids_are_judged_as_before():
    events = _fixture_events()
    findings = xidmod.in_run_findings(events, None)  # a replay: the whole saved window is the run's
    assert sorted(f["pci_bus_id"] for f in findings) == ["00000000:3B:00.0", "00000000:AF:00.0"]  # 31 and 13 only
    by = {e["xid"]: e for e in events}
    assert (by[48]["fails"], by[48]["rule"], by[79]["fails"], by[154]["rule"]) == (True, "catalogue", True, "policy")
    assert by[63]["fails"] is False and "in_run" not in by[63]  # IGNORE: still recorded only
    assert not any("in_run" in e for e in events if e["xid"] in (48, 63, 79, 154))


def test_chip_location_and_occurrences():
    assert xidmod.chip_location("Graphics SM Warp Exception on (GPC 3, TPC 1, SM 0): Out Of Range") == "GPC 3, TPC 1"
    assert xidmod.chip_location("MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted") is None
    six = [{"epoch": 1795989334.0, "pid": 5000 + i} for i in range(6)]  # six probes in one second
    assert xidmod.occurrences(six) == 6
    assert xidmod.occurrences([{"epoch": 10.2, "pid": None}, {"epoch": 10.7, "pid": 7}]) == 1


def test_same_xid_lines_of_different_processes_stay_separate_events():
    line = [ln for ln in fixture_lines() if "pid=23187" in ln][0]  # a real Xid 13 line
    events, _ = xev.parse_kernel_log([line, line.replace("pid=23187", "pid=23188"), line])
    assert [(e["pid"], len(e["continuation"])) for e in events] == [(23187, 0), (23188, 0), (23187, 0)]
    events, _ = xev.parse_kernel_log([ln for ln in fixture_lines() if "(PCI:0000:af:00): 13" in ln])
    assert [(e["pid"], len(e["continuation"])) for e in events] == [(23187, 2)]  # one report, pid-less lines merged


# ---------------------------------------------------------------------------------------------------------
# the process an application-class Xid names: the run's own probes, or another application on the GPU

XID13 = [ln for ln in fixture_lines() if "(PCI:0000:af:00): 13" in ln]  # one real fault: three lines, one named
OWN = xidmod.run_names({"probe_name": PROCESS_NAME})


def _at(s: int) -> str:
    return f"20:{16 + s // 60:02d}:{s % 60:02d}"  # ``s`` seconds after 20:16:00


def _faults(name: str, n: int, first_s: int = 40, pid: int = 23187) -> list[str]:
    """``n`` Xid 13 faults on AF:00, 5 s apart from 20:16:``first_s``, each the fixture's three lines with the named
    line's process ``name`` and a pid of its own."""
    return [ln.replace("20:16:40", _at(first_s + 5 * i)).replace("pid=23187", f"pid={pid + i}")
            .replace("name=python3", f"name={name}") for i in range(n) for ln in XID13]


def _judged(lines: list[str], own) -> tuple[list[dict], list[dict]]:
    events, _ = xev.parse_kernel_log(lines)
    events = xidmod.classify(events)
    return xidmod.in_run_findings(events, None, own), events


def test_a_foreign_applications_xids_are_contention_whatever_their_count():
    (f,), events = _judged(_faults("train.py", 6), OWN)
    assert (f["rule"], f["count"], f["names"], f["pids"]) == ("foreign app in run", 6, ["train.py"],
                                                              list(range(23187, 23193)))
    assert all(e["foreign"] and e["in_run"] for e in events)
    assert "from train.py (pid 23187, 23188" in f["message"] and "not gpuaccept's" in f["message"]
    assert "were gpuaccept's own" not in f["message"] and f["own_names"] == ["fio", PROCESS_NAME, "ib_write_bw"]
    a = _act(f)
    assert (a.action, a.cause, a.kind) == ("rerun", "contention", "foreign_app_xid")
    assert a.reason.startswith("Xid 13 during the run, 6 times (6 on GPC 1, TPC 0): ")
    c = xidmod.finding_cause(f)
    assert (c.cls, c.kind, c.evidence["process_names"], c.evidence["count"]) == ("contention", "foreign_app_xid",
                                                                                 ["train.py"], 6)


def test_the_same_xids_from_the_probes_own_name_are_hardware():
    (f,), events = _judged(_faults(PROCESS_NAME, 6), OWN)
    assert (f["rule"], f["count"], f["names"]) == ("app repeated in run", 6, [PROCESS_NAME])
    assert not any(e.get("foreign") for e in events)
    assert "the applications on the GPU were gpuaccept's own" in f["message"] and xidmod.finding_cause(f) is None
    assert (_act(f).action, _act(f).cause) == ("reset-gpu", "hardware")
    (tool,), _ = _judged(_faults("ib_write_bw", 2), OWN)  # a GPU program the probes start is the run's own
    assert tool["rule"] == "app repeated in run"


def test_a_document_without_the_probes_name_keeps_every_in_run_xid_the_runs():
    assert xidmod.run_names({"source": "journalctl", "events": []}) is None  # an older probe's document
    assert xidmod.run_names({"probe_name": None}) is None
    (f,), _ = _judged(_faults("python3", 6), None)
    assert (f["rule"], f["count"], _act(f).action, _act(f).cause) == ("app repeated in run", 6, "reset-gpu", "hardware")
    assert "taken as gpuaccept's own probes (this xid_events document does not say" in f["message"]
    assert "were gpuaccept's own" not in f["message"]


def test_unnamed_lines_go_with_the_fault_of_their_second():
    # one fault of the probes at 20:16:40; three of train.py at :50, :55, :60, with a pid-less Xid 31 line in :50
    # (that fault's); a lone pid-less Xid 31 at :47 (nobody's named fault: the run's, as today)
    x31 = ("2026-11-29T20:16:{s} gpu-node-07 kernel: NVRM: Xid (PCI:0000:af:00): 31, pid='<unknown>', name=<unknown>, "
           "Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_0 faulted @ 0x7f12_34560000.")
    lines = _faults(PROCESS_NAME, 1) + _faults("train.py", 3, first_s=50, pid=30000) + [x31.format(s="50"),
                                                                                         x31.format(s="47")]
    findings, events = _judged(sorted(lines, key=lambda ln: ln[:24]), OWN)  # in the log's order
    own, foreign = findings
    assert (own["rule"], own["count"], own["xids"], own["names"]) == ("app repeated in run", 2, {13: 1, 31: 1},
                                                                      [PROCESS_NAME])
    assert (foreign["rule"], foreign["count"], foreign["xids"]) == ("foreign app in run", 3, {13: 3, 31: 1})
    assert [e["epoch"] % 60 for e in events if e.get("foreign") and e["xid"] == 31] == [50]
    # '<unknown>' as a name is no name; unknown run names: nothing is foreign
    ev = [{"epoch": 1.0, "process_name": "<unknown>"}, {"epoch": 2.0, "process_name": "train.py"}]
    assert xidmod.split_foreign(ev, OWN) == ([ev[0]], [ev[1]]) and xidmod.split_foreign(ev, None) == (ev, [])


def test_the_runs_own_names_are_data_with_their_source():
    conf = xidmod.load_in_run()
    assert conf["own_tools"] == ["ib_write_bw", "fio"] and "gpuaccept/probes/rdma.py" in conf["own_tools_source"]
    assert OWN == frozenset({PROCESS_NAME, "ib_write_bw", "fio"})
    assert len(PROCESS_NAME.encode()) <= 15  # TASK_COMM_LEN 16 with the NUL: a longer name would be cut


def test_the_probe_reports_the_name_its_process_runs_under(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("\n".join(_faults("train.py", 1)) + "\n")
    rc, doc, _ = run_probe("xid_events", {"sources": [str(log)]})  # a real process, started as the runner does
    assert rc == 0 and doc["probe_name"] == PROCESS_NAME, doc
    assert [(e["xid"], e["process_name"]) for e in doc["events"]] == [(13, "train.py")]
    assert xev.main({"sources": [str(log)]})["probe_name"] is None  # called as a library: no name given
