"""Tests of the NVML probes (gpu_inventory, nvlink), the XID probe and gpuaccept.xid, on a machine without a GPU.

The probes run as real subprocesses (as the runner runs them on a node) and, for the NVML code paths, in
process against a fake pynvml that mirrors the H200 captures in /work/shared/data (h200-1gpu-nvml.json,
h200x2-nvidia-smi-and-nvml.txt). The fake checks every call against the real pynvml's signature, so a
wrong function name or argument count fails here rather than on the GPU node.
"""
from __future__ import annotations

import calendar
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from gpuaccept import xid as xidmod

ROOT = Path(__file__).resolve().parents[1]
PROBES = ROOT / "gpuaccept" / "probes"
DATA = Path(__file__).resolve().parent / "data"


def load_probe(name: str):
    """Import a probe file by path (probes are standalone scripts that import ``_probe``)."""
    if str(PROBES) not in sys.path:
        sys.path.insert(0, str(PROBES))
    spec = importlib.util.spec_from_file_location(f"probe_{name}", PROBES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_probe(name: str, args: dict | None = None, env: dict | None = None, timeout: float = 60):
    """Run a probe as the runner does: ``python3 probe.py '<json>'``; returns (rc, last JSON line, stderr)."""
    cmd = [sys.executable, str(PROBES / f"{name}.py")]
    if args is not None:
        cmd.append(json.dumps(args))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1, f"expected one JSON line on stdout, got {p.stdout!r} (stderr {p.stderr!r})"
    return p.returncode, json.loads(lines[0]), p.stderr


inv = load_probe("gpu_inventory")
nvl = load_probe("nvlink")
xev = load_probe("xid_events")


# ---------------------------------------------------------------------------------------------------------
# subprocess runs on this GPU-less machine


def test_gpu_inventory_without_driver_is_not_a_failure():
    rc, doc, _ = run_probe("gpu_inventory", {})
    assert rc == 0
    assert doc["nvml_available"] is False
    assert doc["reason"]
    assert doc["reason_code"] in ("no_driver", "driver_not_loaded", "no_gpu")
    if doc["reason_code"] == "no_driver":
        assert doc["reason"] == "no NVIDIA driver (libnvidia-ml.so not found)"
    assert doc["gpus"] == []
    assert doc["hostname"]
    assert "kernel_driver_version" in doc


def test_gpu_inventory_without_pynvml(tmp_path):
    (tmp_path / "pynvml.py").write_text("raise ImportError('simulated: no nvidia-ml-py')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    rc, doc, _ = run_probe("gpu_inventory", {}, env=env)
    assert rc == 0
    assert doc["nvml_available"] is False
    assert doc["reason"] == "pynvml (nvidia-ml-py) not installed"
    assert doc["reason_code"] == "no_pynvml"


def test_nvlink_without_driver_fails_cleanly():
    rc, doc, stderr = run_probe("nvlink", {})
    assert rc == 1
    assert doc["failed"] is True
    assert doc["msg"].startswith("NVML unavailable: ")
    assert "Traceback" not in stderr


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
# xid_events parsing


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


def test_probe_main_reads_the_first_readable_source(monkeypatch):
    monkeypatch.setattr(xev, "read_journalctl", lambda since: (_ for _ in ()).throw(RuntimeError("No journal files were found.")))
    monkeypatch.setattr(xev, "read_dmesg", lambda: fixture_lines())
    doc = xev.main({"since_epoch": SINCE})
    assert doc["source"] == "dmesg"
    assert len(doc["events"]) == 6
    assert doc["attempts"][0] == {"source": "journalctl", "ok": False, "error": "No journal files were found."}


def test_probe_main_skips_an_empty_journal(monkeypatch):
    monkeypatch.setattr(xev, "read_journalctl", lambda since: ["-- No entries --"])
    monkeypatch.setattr(xev, "read_dmesg", lambda: fixture_lines())
    doc = xev.main({})
    assert doc["source"] == "dmesg" and len(doc["events"]) == 7


def test_probe_main_returns_an_empty_readable_source_with_a_note(monkeypatch):
    monkeypatch.setattr(xev, "read_journalctl", lambda since: ["-- No entries --"])
    monkeypatch.setattr(xev, "read_dmesg", lambda: (_ for _ in ()).throw(RuntimeError("rc 1: dmesg: read kernel buffer failed: Operation not permitted")))
    monkeypatch.setattr(xev, "read_file", lambda path: (_ for _ in ()).throw(FileNotFoundError(2, "No such file", path)))
    doc = xev.main({"since_epoch": SINCE})
    assert doc["source"] == "journalctl" and doc["events"] == [] and doc["lines_scanned"] == 0
    assert "note" in doc


def test_probe_main_fails_when_nothing_is_readable(monkeypatch):
    monkeypatch.setattr(xev, "read_journalctl", lambda since: (_ for _ in ()).throw(FileNotFoundError(2, "No such file", "journalctl")))
    monkeypatch.setattr(xev, "read_dmesg", lambda: (_ for _ in ()).throw(RuntimeError("rc 1: dmesg: read kernel buffer failed: Operation not permitted")))
    monkeypatch.setattr(xev, "read_file", lambda path: (_ for _ in ()).throw(PermissionError(13, "Permission denied", path)))
    with pytest.raises(xev.ProbeFailed) as ei:
        xev.main({})
    msg = str(ei.value)
    assert msg.startswith("cannot read the kernel log: journalctl: not found; dmesg: rc 1: dmesg: read kernel buffer")
    assert "/var/log/kern.log: permission denied" in msg and "/var/log/messages: permission denied" in msg


# ---------------------------------------------------------------------------------------------------------
# gpuaccept.xid


@pytest.mark.parametrize("xid, category, fails", [
    (13, "application", False),
    (31, "application", False),
    (43, "application", False),
    (45, "application", False),
    (48, "hardware", True),
    (63, "hardware", True),
    (64, "hardware", True),
    (74, "hardware", True),
    (79, "hardware", True),
    (92, "hardware", True),
    (94, "hardware", True),
    (95, "hardware", True),
    (119, "driver", True),
    (120, "driver", True),
    (140, "hardware", True),
    (145, "hardware", True),
    (999, "unknown", True),
])
def test_classify_table(xid, category, fails):
    (c,) = xidmod.classify([{"xid": xid, "pci_bus_id": "00000000:19:00.0", "msg": "m"}])
    assert (c["category"], c["fails"]) == (category, fails)
    assert c["xid"] == xid and c["msg"] == "m"  # the event is kept
    assert c["action"] and c["message"].startswith(f"Xid {xid} on 00000000:19:00.0")
    if category == "unknown":
        assert "not in gpuaccept's catalogue" in c["message"] and "treated as a failure" in c["message"]


@pytest.mark.parametrize("msg, fails", [
    ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", True),
    ("GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)", False),
    ("GPU recovery action changed", True),
])
def test_classify_recovery_action(msg, fails):
    (c,) = xidmod.classify([{"xid": 154, "msg": msg}])
    assert c["fails"] is fails


def test_catalogue_covers_the_required_xids():
    required = [13, 31, 32, 43, 45, 48, 56, 57, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 110, 119, 120,
                121, 122, 123, 140, 143, *range(144, 151)]
    missing = [x for x in required if x not in xidmod.XID_CATALOGUE]
    assert not missing
    assert {i.category for i in xidmod.XID_CATALOGUE.values()} <= {"hardware", "application", "driver", "informational"}
    assert "docs.nvidia.com/deploy/xid-errors" in xidmod.__doc__


def test_classify_fixture_end_to_end():
    events, _ = xev.parse_kernel_log(fixture_lines(), SINCE)
    got = [(c["xid"], c["fails"]) for c in xidmod.classify(events)]
    assert got == [(13, False), (48, True), (63, True), (79, True), (154, True), (79, True)]


# ---------------------------------------------------------------------------------------------------------
# NVML code paths against a fake pynvml (H200 readings from /work/shared/data)

import pynvml as real_nvml  # noqa: E402  (installed on the controller: nvidia-ml-py)


def test_probes_reference_only_real_pynvml_names():
    """Every nvml*/NVML_*/c_nvml* name a probe mentions exists in the installed pynvml."""
    for name in ("gpu_inventory", "nvlink"):
        src = (PROBES / f"{name}.py").read_text()
        names = set(re.findall(r"['\"](nvml[A-Z]\w*|c_nvml\w+)['\"]", src))
        names |= set(re.findall(r"\bnv\.(\w+)", src))
        missing = sorted(n for n in names if not hasattr(real_nvml, n))
        assert not missing, f"{name}.py uses names pynvml does not have: {missing}"


def test_local_constants_match_pynvml():
    for cname, bit in inv.CLOCK_EVENT_REASONS:
        camel = "".join(p.capitalize() for p in cname.split("_"))  # sw_power_cap -> SwPowerCap
        val = getattr(real_nvml, "nvmlClocksEventReason" + camel, None)
        if val is None:
            val = getattr(real_nvml, "nvmlClocksThrottleReason" + camel)
        assert val == bit, cname
    assert nvl.TOPOLOGY_LEVELS == {real_nvml.NVML_TOPOLOGY_INTERNAL: "X", real_nvml.NVML_TOPOLOGY_SINGLE: "PIX",
                                   real_nvml.NVML_TOPOLOGY_MULTIPLE: "PXB", real_nvml.NVML_TOPOLOGY_HOSTBRIDGE: "PHB",
                                   real_nvml.NVML_TOPOLOGY_NODE: "NODE", real_nvml.NVML_TOPOLOGY_SYSTEM: "SYS"}
    assert dict(nvl.P2P_CAPS) == {"read": 0, "write": real_nvml.NVML_P2P_CAPS_INDEX_WRITE,
                                  "nvlink": real_nvml.NVML_P2P_CAPS_INDEX_NVLINK,
                                  "atomics": real_nvml.NVML_P2P_CAPS_INDEX_ATOMICS}
    assert nvl.P2P_STATUS[real_nvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED] == "IOH_TOPOLOGY_NOT_SUPPORTED"
    assert nvl.FI_NVLINK_SPEED_MBPS_COMMON == real_nvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON
    assert nvl.FI_NVLINK_LINK_COUNT == real_nvml.NVML_FI_DEV_NVLINK_LINK_COUNT
    assert nvl.FI_NVLINK_GET_SPEED == real_nvml.NVML_FI_DEV_NVLINK_GET_SPEED
    assert dict(nvl.NVLINK_ERROR_COUNTERS) == {"replay": real_nvml.NVML_NVLINK_ERROR_DL_REPLAY,
                                              "recovery": real_nvml.NVML_NVLINK_ERROR_DL_RECOVERY,
                                              "crc_flit": real_nvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
                                              "crc_data": real_nvml.NVML_NVLINK_ERROR_DL_CRC_DATA}


class FakeNvml:
    """Builds a pynvml stand-in: real constants, structs and NVMLError classes; fake library calls.

    Each fake call is first bound against the real pynvml function's signature (wrong arity fails).
    ``gpus``: per-GPU dicts; ``nvlink``: {gpu: [(link, remote gpu index)]} or None for "Not Supported".
    """

    def __init__(self, gpus, nvlink=None, topology=30, p2p=0, fabric="v2"):
        self.gpus, self.nvlink, self.topology, self.p2p, self.fabric = gpus, nvlink, topology, p2p, fabric
        self.calls = []

    def err(self, code):
        return real_nvml.NVMLError(code)

    def module(self):
        mod = types.ModuleType("pynvml")
        for k, v in vars(real_nvml).items():
            if not (k.startswith("nvml") and callable(v) and not isinstance(v, type)):
                setattr(mod, k, v)  # constants, struct classes, NVMLError*
        for k in dir(self):
            if k.startswith("nvml"):
                setattr(mod, k, self._checked(k, getattr(self, k)))
        return mod

    def _checked(self, name, fn):
        real = getattr(real_nvml, name)

        def wrapper(*args):
            inspect.signature(real).bind(*args)
            self.calls.append(name)
            return fn(*args)
        return wrapper

    # system
    def nvmlInit(self): pass
    def nvmlShutdown(self): pass
    def nvmlSystemGetDriverVersion(self): return "580.159.04"
    def nvmlSystemGetNVMLVersion(self): return "13.580.159.04"
    def nvmlSystemGetCudaDriverVersion(self): return 13000
    def nvmlDeviceGetCount(self): return len(self.gpus)
    def nvmlDeviceGetHandleByIndex(self, i): return i  # the handle is the index

    # identity
    def nvmlDeviceGetName(self, h): return "NVIDIA H200"
    def nvmlDeviceGetUUID(self, h): return f"GPU-00000000-0000-0000-0000-00000000000{h + 1}"
    def nvmlDeviceGetSerial(self, h): return f"165000000000{h + 1}"
    def nvmlDeviceGetVbiosVersion(self, h): return "96.00.A5.00.1A"

    def nvmlDeviceGetPciInfo(self, h):
        p = real_nvml.nvmlPciInfo_t()
        p.busId = self.gpus[h]["bus"].encode()
        p.pciDeviceId = 0x233510DE
        return p

    def nvmlDeviceGetMemoryInfo(self, h, version=None): return types.SimpleNamespace(total=150754820096)
    def nvmlDeviceGetCudaComputeCapability(self, h): return (9, 0)
    def nvmlDeviceGetCurrPcieLinkGeneration(self, h): return 5
    def nvmlDeviceGetCurrPcieLinkWidth(self, h): return 16
    def nvmlDeviceGetMaxPcieLinkGeneration(self, h): return 5
    def nvmlDeviceGetMaxPcieLinkWidth(self, h): return 16
    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h): return 5
    def nvmlDeviceGetPcieReplayCounter(self, h): return 2

    # memory health
    def nvmlDeviceGetEccMode(self, h): return [1, 1]
    def nvmlDeviceGetTotalEccErrors(self, h, etype, ctype): return 0
    def nvmlDeviceGetRemappedRows(self, h): return self.gpus[h].get("remap", (0, 0, 0, 0))
    def nvmlDeviceGetRetiredPages(self, h, cause): raise self.err(real_nvml.NVML_ERROR_NOT_SUPPORTED)
    def nvmlDeviceGetRetiredPagesPendingStatus(self, h): raise self.err(real_nvml.NVML_ERROR_NOT_SUPPORTED)

    # sensors / clocks
    def nvmlDeviceGetTemperature(self, h, sensor): return 34
    def nvmlDeviceGetPowerUsage(self, h): return 113036
    def nvmlDeviceGetEnforcedPowerLimit(self, h): return 700000
    def nvmlDeviceGetClockInfo(self, h, t): return {real_nvml.NVML_CLOCK_SM: 405, real_nvml.NVML_CLOCK_MEM: 3201}[t]
    def nvmlDeviceGetMaxClockInfo(self, h, t): return {real_nvml.NVML_CLOCK_SM: 1980, real_nvml.NVML_CLOCK_MEM: 3201}[t]
    def nvmlDeviceGetCurrentClocksEventReasons(self, h): return 0x1
    def nvmlDeviceGetPersistenceMode(self, h): return 1
    def nvmlDeviceGetMigMode(self, h): return [0, 0]
    def nvmlDeviceGetComputeMode(self, h): return 0

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=524288000)] if h == 0 else []

    # fabric: v3 answers "Argument Version Mismatch", v2 answers
    def nvmlDeviceGetGpuFabricInfoV(self, h, ref):
        info = ref._obj
        if self.fabric is None:
            raise self.err(real_nvml.NVML_ERROR_NOT_SUPPORTED)
        if info.version == real_nvml.nvmlGpuFabricInfo_v3:
            raise self.err(real_nvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        assert info.version == real_nvml.nvmlGpuFabricInfo_v2
        info.state = real_nvml.NVML_GPU_FABRIC_STATE_COMPLETED
        info.status = real_nvml.NVML_SUCCESS
        info.cliqueId = 32766
        for i in range(16):
            info.clusterUuid[i] = i
        return real_nvml.NVML_SUCCESS

    # NVLink
    def _links(self, h):
        if self.nvlink is None:
            raise self.err(real_nvml.NVML_ERROR_NOT_SUPPORTED)
        return dict(self.nvlink[h])

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 18:
            raise self.err(real_nvml.NVML_ERROR_INVALID_ARGUMENT)
        links = self._links(h)
        return 1 if link in links else 0

    def nvmlDeviceGetNvLinkVersion(self, h, link): self._links(h); return 4

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        p = real_nvml.nvmlPciInfo_t()
        p.busId = self.gpus[self._links(h)[link]]["bus"].encode()
        return p

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link): self._links(h); return real_nvml.NVML_NVLINK_DEVICE_TYPE_GPU

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        self._links(h)
        return 7 if (h, link, counter) == (1, 3, real_nvml.NVML_NVLINK_ERROR_DL_REPLAY) else 0

    def nvmlDeviceGetFieldValues(self, h, field_ids):
        vals = (real_nvml.c_nvmlFieldValue_t * len(field_ids))()
        for i, f in enumerate(field_ids):
            fid, scope = f if isinstance(f, tuple) else (f, 0)
            vals[i].fieldId, vals[i].scopeId = fid, scope
            if self.nvlink is None:
                vals[i].nvmlReturn = real_nvml.NVML_ERROR_NOT_SUPPORTED
                continue
            vals[i].valueType = real_nvml.NVML_VALUE_TYPE_UNSIGNED_INT
            vals[i].value.uiVal = {real_nvml.NVML_FI_DEV_NVLINK_LINK_COUNT: 18,
                                   real_nvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON: 26562,
                                   real_nvml.NVML_FI_DEV_NVLINK_GET_SPEED: 26562}[fid]
        return vals

    # pairs
    def nvmlDeviceGetTopologyCommonAncestor(self, a, b): return self.topology

    def nvmlDeviceGetP2PStatus(self, a, b, idx):
        assert isinstance(idx, int), f"P2P caps index must be an int, got {idx!r}"
        return self.p2p


H200X2 = [{"bus": "00000000:00:06.0"}, {"bus": "00000000:00:07.0", "remap": (2, 0, 0, 0)}]
NV18 = {0: [(lk, 1) for lk in range(18)], 1: [(lk, 0) for lk in range(18)]}


@pytest.fixture
def fake_pynvml(monkeypatch):
    def install(fake: FakeNvml):
        monkeypatch.setitem(sys.modules, "pynvml", fake.module())
        return fake
    return install


def test_gpu_inventory_on_fake_h200x2(fake_pynvml):
    fake = fake_pynvml(FakeNvml(H200X2, nvlink=NV18))
    doc = inv.main({})
    json.dumps(doc)  # serialisable
    assert doc["nvml_available"] is True
    assert (doc["driver"], doc["nvml_version"], doc["cuda_driver_version"], doc["gpu_count"]) == \
        ("580.159.04", "13.580.159.04", 13000, 2)
    g0, g1 = doc["gpus"]
    assert g0["pci_bus_id"] == "00000000:00:06.0" and g0["pci_device_id"] == "0x233510de"
    assert g0["memory_total_bytes"] == 150754820096 and g0["cuda_capability"] == [9, 0]
    assert g0["pcie"] == {"gen": 5, "width": 16, "gen_max": 5, "width_max": 16, "gen_device_max": 5, "replay_counter": 2}
    assert g0["ecc"]["mode_current"] is True and g0["ecc"]["uncorrected_volatile"] == 0
    assert g1["remapped_rows"] == {"correctable": 2, "uncorrectable": 0, "pending": False, "failure": False}
    assert g0["retired_pages"] == {k: {"nvml_error": "Not Supported"} for k in ("single_bit", "double_bit", "pending")}
    assert (g0["temp_c"], g0["power_w"], g0["power_limit_w"]) == (34, 113.036, 700.0)
    assert g0["clocks"] == {"sm_mhz": 405, "mem_mhz": 3201, "sm_max_mhz": 1980, "mem_max_mhz": 3201}
    assert g0["clocks_event_reasons"] == 1 and g0["clocks_event_reasons_active"] == ["gpu_idle"]
    assert g0["persistence_mode"] is True and g0["mig_mode"] == {"current": False, "pending": False}
    assert g0["compute_mode"] == "Default"
    (proc,) = g0["compute_processes"]
    assert proc["pid"] == os.getpid() and proc["used_memory_bytes"] == 524288000 and proc["name"]
    assert g0["fabric"] == {"state": "COMPLETED", "status": "Success", "clique_id": 32766,
                            "cluster_uuid": "00010203-0405-0607-0809-0a0b0c0d0e0f", "health_mask": 0,
                            "struct": "c_nvmlGpuFabricInfoV_t"}
    assert g0["nvlink_links"] == 18 and g1["nvlink_links"] == 18
    assert "nvmlDeviceGetGpuFabricInfo" not in fake.calls  # the deprecated call is only a fallback


def test_gpu_inventory_on_fake_h200_1gpu_vm(fake_pynvml):
    fake_pynvml(FakeNvml(H200X2[:1], nvlink=None, fabric=None))
    doc = inv.main({})
    (g,) = doc["gpus"]
    assert g["nvlink_links"] == {"nvml_error": "Not Supported"}  # not 0
    assert g["fabric"] == {"nvml_error": "Not Supported"}


def test_nvlink_on_fake_h200x2(fake_pynvml):
    fake_pynvml(FakeNvml(H200X2, nvlink=NV18))
    doc = nvl.main({"sample_seconds": 0.01})
    json.dumps(doc)
    g0, g1 = doc["gpus"]
    assert g0["active_count"] == 18 and g0["link_count"] == 18 and g0["nvlink_supported"] is True
    assert g0["speed_mbps_common"] == 26562
    lk = g1["links"][3]
    assert lk == {"link": 3, "active": True, "version": 4, "remote_pci_bus_id": "00000000:00:06.0",
                  "remote_device_type": "GPU", "speed_mbps": 26562,
                  "errors": {"replay": 7, "recovery": 0, "crc_flit": 0, "crc_data": 0},
                  "errors_delta": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}}
    (pair,) = doc["pairs"]
    assert pair == {"a": 0, "b": 1, "common_ancestor": "PHB",
                    "p2p": {"read": "OK", "write": "OK", "nvlink": "OK", "atomics": "OK"},
                    "nvlink": True, "nvlink_via": "direct", "nvlink_count": 18, "topo": "NV18"}
    assert "p2p_bandwidth" not in doc


def test_nvlink_on_fake_1gpu_vm(fake_pynvml):
    fake_pynvml(FakeNvml(H200X2[:1], nvlink=None))
    doc = nvl.main({})
    (g,) = doc["gpus"]
    assert g["nvlink_supported"] is False and g["links"] == []
    assert g["active_count"] == {"nvml_error": "Not Supported"}
    assert g["link_count"] == {"nvml_error": "Not Supported"}
    assert doc["pairs"] == []


def test_nvlink_p2p_bandwidth_without_cuda_is_reported(fake_pynvml):
    fake_pynvml(FakeNvml(H200X2, nvlink=NV18))
    doc = nvl.main({"p2p_bandwidth": True, "bytes": 1 << 20})
    assert doc["p2p_bandwidth"] == []
    assert doc["p2p_bandwidth_error"]  # torch here is a CPU build (or absent)


def test_pair_nvlink_through_nvswitch():
    links = [{"link": i, "active": True, "remote_pci_bus_id": "00000000:C5:00.0", "remote_device_type": "SWITCH"}
             for i in range(18)]
    links_b = [dict(lk) for lk in links]
    links_b[5]["active"] = False
    got = nvl.pair_nvlink(links, links_b, "00000000:18:00.0", "00000000:2A:00.0",
                          {"00000000:18:00.0", "00000000:2A:00.0"}, "OK")
    assert got == {"nvlink": True, "nvlink_via": "nvswitch", "nvlink_count": 17}
    assert nvl.topo_label(dict(got, common_ancestor="SYS")) == "NV17"
    none = nvl.pair_nvlink([], [], "00000000:18:00.0", "00000000:2A:00.0", set(), None)
    assert nvl.topo_label(dict(none, common_ancestor="SYS")) == "SYS"


@pytest.mark.parametrize("raw, want", [
    ("00000000:19:00.0", "00000000:19:00.0"),
    ("0000:af:00", "00000000:AF:00.0"),
    ("PCI:0000:3b:00", "00000000:3B:00.0"),
    ("junk", None),
])
def test_normalize_bus_id(raw, want):
    assert nvl.normalize_bus_id(raw) == want
    assert inv.normalize_bus_id(raw) == want


def test_call_records_errors_not_values():
    nv = types.SimpleNamespace(
        nvmlA=lambda: (_ for _ in ()).throw(real_nvml.NVMLError(real_nvml.NVML_ERROR_NOT_SUPPORTED)),
        nvmlB=lambda: (_ for _ in ()).throw(TypeError("Don't know how to convert parameter 3")),
        nvmlC=lambda: 0)
    assert inv.call(nv, "nvmlA") == {"nvml_error": "Not Supported"}
    assert inv.call(nv, "nvmlB") == {"nvml_error": "TypeError: Don't know how to convert parameter 3"}
    assert inv.call(nv, "nvmlC") == 0
    assert inv.call(nv, "nvmlMissing") == {"nvml_error": "pynvml has no nvmlMissing"}
    assert inv.is_error(inv.call(nv, "nvmlA")) and not inv.is_error(0)


def test_decode_clock_reasons_and_proc_version():
    assert inv.decode_clock_reasons(0) == []
    assert inv.decode_clock_reasons(0x1 | 0x4 | 0x40 | 0x1000) == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown",
                                                                     "unknown_0x1000"]
    content = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
               "(dvs-builder@U22-I3-AF03-09-1)  Thu Nov 13 22:41:26 UTC 2026\nGCC version:  gcc version 13.3.0\n")
    assert inv.parse_proc_driver_version(content)[0] == "580.159.04"
    assert inv.parse_proc_driver_version("garbage") == (None, None)


@pytest.mark.parametrize("code, reason_code", [(12, "no_driver"), (9, "driver_not_loaded"), (18, "version_mismatch"),
                                               (4, "no_permission"), (999, "init_failed")])
def test_init_failure_reasons(code, reason_code):
    got_code, reason = inv.init_failure_reason(real_nvml.NVMLError(code))
    assert got_code == reason_code and reason


def test_p2p_bandwidth_code_path_with_a_fake_torch(monkeypatch):
    """Drives measure_p2p_bandwidth through a stand-in torch.cuda (no GPU here): checks the call pattern
    (copies on the source device's stream, both directions at once for bidir) and the GB/s arithmetic."""
    import contextlib

    log_ = []

    class Stream:
        def __init__(self, device):
            self.device = device

        def wait_event(self, e):
            log_.append(("wait", self.device))

    current = {}

    @contextlib.contextmanager
    def stream(s):
        prev = current.get(s.device)
        current[s.device] = s
        try:
            yield
        finally:
            current[s.device] = prev

    class Event:
        def __init__(self, enable_timing=False):
            self.timing = enable_timing

        def record(self, s=None):
            pass

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return 10.0  # ms per timed run

    class Tensor:
        def __init__(self, n, device):
            self.n, self.device = n, int(device.split(":")[1])

        def copy_(self, src, non_blocking=False):
            assert non_blocking and current.get(src.device) is not None and current.get(self.device) is not None
            log_.append(("copy", src.device, self.device, current[src.device]))

    cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 2, Stream=Stream, stream=stream,
                                 Event=Event, synchronize=lambda d=None: None,
                                 can_device_access_peer=lambda a, b: True, empty_cache=lambda: None)
    fake_torch = types.SimpleNamespace(cuda=cuda, uint8="uint8",
                                       empty=lambda n, dtype, device: Tensor(n, device))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    res = nvl.measure_p2p_bandwidth(1 << 30, iters=5, reps=3)
    assert [(r["a"], r["b"]) for r in res] == [(0, 1), (1, 0)]
    # 5 copies of 1 GiB in 10 ms = 536.87 GB/s; bidir moves twice the bytes in the same time
    assert res[0]["unidir_gbps"] == pytest.approx(536.87, abs=0.01)
    assert res[0]["bidir_gbps"] == res[1]["bidir_gbps"] == pytest.approx(1073.74, abs=0.01)
    bidir_copies = [c for c in log_ if c[0] == "copy"][-10:]
    assert {(c[1], c[2]) for c in bidir_copies} == {(0, 1), (1, 0)}
    assert len({id(c[3]) for c in bidir_copies}) == 2  # each direction on its own source stream


class LostGpu1(FakeNvml):
    """GPU 1 fell off the bus: NVML counts it, nvmlDeviceGetHandleByIndex answers NVML_ERROR_GPU_IS_LOST (15);
    memory info v1 answers Not Supported (3), v2 answers (unified-memory parts). Invented states (issue 10)."""

    def nvmlDeviceGetHandleByIndex(self, i):
        if i == 1:
            raise self.err(real_nvml.NVML_ERROR_GPU_IS_LOST)
        return i

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        if version is None:
            raise self.err(real_nvml.NVML_ERROR_NOT_SUPPORTED)
        return types.SimpleNamespace(total=150754820096)


def test_gpu_inventory_records_a_lost_gpu_and_reads_memory_v2(fake_pynvml):
    fake_pynvml(LostGpu1(H200X2, nvlink=NV18))
    doc = inv.main({})
    json.dumps(doc)
    g0, g1 = doc["gpus"]
    assert g1 == {"index": 1, "lost": True, "nvml_error": "GPU is lost"}
    assert g0["memory_total_bytes"] == 150754820096  # from nvmlDeviceGetMemoryInfo(h, nvmlMemory_v2)
    assert doc["gpu_count"] == 2 and isinstance(doc["driver_present"], bool)
