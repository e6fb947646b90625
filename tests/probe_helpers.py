"""Helpers shared by the probe tests: load or run a probe as the runner does, and a pynvml stand-in.

``FakeNvml`` mirrors the H200 captures in tests/data (h200x2-*.json; the raw dumps they came from are
h200-1gpu-nvml.json and h200x2-nvidia-smi-and-nvml.txt of the project's shared data). Values not taken from
a capture are marked "invented" where they are defined.
"""
from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys
import tempfile
import types
import weakref
from pathlib import Path

import pynvml as real_nvml  # installed on the controller: nvidia-ml-py

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


def run_probe(name: str, args: dict | None = None, env: dict | None = None, timeout: float = 240):
    """Run a probe as the runner does: ``python3 probe.py '<json>'`` (``env`` added to this process's
    environment); returns (rc, the JSON document, stderr). Asserts stdout is exactly one JSON line."""
    cmd = [sys.executable, str(PROBES / f"{name}.py")]
    if args is not None:
        cmd.append(json.dumps(args))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=PROBES.parent,
                       env={**os.environ, **(env or {})})
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, f"stdout must be one JSON line, got {p.stdout!r}; stderr: {p.stderr[-2000:]}"
    return p.returncode, json.loads(lines[0]), p.stderr


class FakeNvml:
    """Builds a pynvml stand-in: real constants, structs and NVMLError classes; fake library calls.

    Each fake call is first bound against the real pynvml function's signature (wrong arity fails).
    ``gpus``: per-GPU dicts; ``nvlink``: {gpu: [(link, remote gpu index)]} or None for "Not Supported".
    """

    def __init__(self, gpus, nvlink=None, topology=30, p2p=0, fabric="v2", excluded=()):
        self.gpus, self.nvlink, self.topology, self.p2p, self.fabric = gpus, nvlink, topology, p2p, fabric
        self.excluded = list(excluded)  # bus ids of GPUs the driver was told to skip (NVreg_ExcludedGpus)
        self.pid = os.getpid()  # the test process (gpu_inventory reads NVML in a forked child: _deadline.py)
        # the calls are written to a file, not kept in a list: a probe makes its NVML calls in a forked child
        # (gpuaccept/probes/_deadline.py), whose list would never reach this process
        fd, self._calls_path = tempfile.mkstemp(prefix="fake-nvml-calls-")
        os.close(fd)
        weakref.finalize(self, _unlink, self._calls_path)

    @property
    def calls(self) -> list[str]:
        """Names of the fake NVML functions called so far, in any process (the probe's forked NVML child too)."""
        with open(self._calls_path, encoding="utf-8") as f:
            return f.read().split()

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
            with open(self._calls_path, "a", encoding="utf-8") as f:  # O_APPEND: one line per call, any process
                f.write(name + "\n")
            return fn(*args)
        return wrapper

    # system
    def nvmlInit(self): pass
    def nvmlShutdown(self): pass
    def nvmlSystemGetDriverVersion(self): return "580.159.04"
    def nvmlSystemGetNVMLVersion(self): return "13.580.159.04"
    def nvmlSystemGetCudaDriverVersion(self): return 13000
    def nvmlDeviceGetCount(self): return len(self.gpus)
    def nvmlGetExcludedDeviceCount(self): return len(self.excluded)

    def nvmlGetExcludedDeviceInfoByIndex(self, i):
        info = real_nvml.c_nvmlExcludedDeviceInfo_t()
        info.pci.busId = self.excluded[i].encode()
        info.uuid = f"GPU-eeeeeeee-0000-0000-0000-00000000000{i}".encode()
        return info
    def nvmlDeviceGetHandleByIndex(self, i): return i  # the handle is the index

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        return next(i for i, g in enumerate(self.gpus) if g["bus"] == (bus.decode() if isinstance(bus, bytes) else bus))

    def nvmlDeviceGetIndex(self, h): return h

    def nvmlDeviceGetProcessUtilization(self, h, last_seen):  # no process sampled since: NVML's NOT_FOUND
        raise self.err(real_nvml.NVML_ERROR_NOT_FOUND)

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

    def nvmlDeviceGetComputeRunningProcesses(self, h):  # invented: this test process on GPU 0
        return [types.SimpleNamespace(pid=self.pid, usedGpuMemory=524288000)] if h == 0 else []

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
        # invented: 7 replays on GPU 1 link 3 (the capture has 0) so a non-zero counter is carried through
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


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# bus ids from the capture; remap (2 correctable rows on GPU 1) invented to carry a non-zero count
H200X2 = [{"bus": "00000000:00:06.0"}, {"bus": "00000000:00:07.0", "remap": (2, 0, 0, 0)}]
NV18 = {0: [(lk, 1) for lk in range(18)], 1: [(lk, 0) for lk in range(18)]}


def install_fake(monkeypatch, fake: FakeNvml) -> FakeNvml:
    """Put ``fake`` in place of pynvml for the probes imported in this test."""
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    return fake


# -- sysfs-shaped trees (real files laid out like the kernel's) -------------------------------------------
def field_blocks(name: str) -> dict[str, list[str]]:
    """``### sample: NAME`` blocks of tests/data/field/NAME (real text broken nodes printed): NAME -> its lines,
    the ``#`` comment lines left out."""
    import re

    out: dict[str, list[str]] = {}
    cur = None
    for line in (DATA / "field" / name).read_text(encoding="utf-8").splitlines():
        m = re.match(r"^### sample: (\S+)", line)
        if m:
            cur = out.setdefault(m.group(1), [])
        elif cur is not None and not line.startswith("#") and line.strip():
            cur.append(line)
    return out


def write_line(p: Path, text: str) -> None:
    """Write ``text`` and a newline to ``p``, creating its folders (a sysfs attribute file)."""
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text + "\n")


def sysfs_pci(root: Path, chain: list[str], bus: str = "pci0000:00") -> Path:
    """Create ``<root>/devices/<bus>/<chain...>`` and ``<root>/bus/pci/devices/<last> -> it``; the last folder."""
    d = root / "devices" / bus
    for bdf in chain:
        d = d / bdf
        d.mkdir(parents=True, exist_ok=True)
        link = root / "bus" / "pci" / "devices" / bdf
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(d)
    return d
