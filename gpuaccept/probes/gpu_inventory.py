#!/usr/bin/env python3
"""GPU health/inventory probe: one NVML snapshot of every GPU on the node.

Run on the node as ``python3 gpu_inventory.py '{}'``. The probe never fails because NVML is missing: a node
without pynvml, without the driver, with a driver/library mismatch or without a GPU answers
``{"nvml_available": false, "reason": ..., "reason_code": ...}`` with rc 0, and the controller decides whether
that is a skip or a failure.

Output document::

    {
      "nvml_available": bool,
      "reason": str,                  # only when nvml_available is false
      "reason_code": str,             # only then: no_pynvml | no_driver | driver_not_loaded |
                                      #   version_mismatch | no_permission | no_gpu | init_failed |
                                      #   driver_unresponsive (_deadline.py)
      "driver": str,                  # nvmlSystemGetDriverVersion, e.g. "580.159.04"
      "nvml_version": str,            # nvmlSystemGetNVMLVersion, e.g. "13.580.159.04"
      "cuda_driver_version": int,     # nvmlSystemGetCudaDriverVersion, e.g. 13000
      "kernel_driver_version": str,   # from /proc/driver/nvidia/version (None if unreadable)
      "kernel_driver_version_line": str,
      "driver_present": bool,         # /proc/driver/nvidia or /dev/nvidia0 exists
      "nvml_library_version": str,    # only when nvmlInit failed: the loaded libnvidia-ml.so's version
      "hostname": str,
      "gpu_count": int,
      "nvml_excluded": [{"bus_id": "00000000:19:00.0", "uuid": "GPU-..."}] | {"nvml_error": ...},
                                      # GPUs the driver was told to skip (NVreg_ExcludedGpus), as NVML lists
                                      # them (excluded_gpus()); an nvml_error where NVML cannot say
      "nvml_latency_s": {"calls", "mean_s", "max_s", "slowest_call"},   # system calls, s per call
      "gpus": [ per GPU, see gpu_info(), with "nvml_latency_s" (that GPU's calls), "inforom": {"valid": bool}
                and "recovery_action": {"code", "name"} (each an nvml_error where refused); a GPU NVML lists but
                gives no handle for (fallen off the bus) is {"index": i, "lost": true, "nvml_error": "GPU is lost"} ],
      "driver_unresponsive": {"gpu", "call", "seconds", "deadline_s", "state", "state_after_kill", "unkillable"},
                                      # only with reason_code driver_unresponsive (_deadline.py)
      "pci_scan": {                   # NVIDIA GPUs on the PCI bus as sysfs lists them, whatever NVML says (pci_scan())
        "sysfs": str,                 # the sysfs root read ("/sys", or the ``sysfs`` argument)
        "devices": [{"bus_id": "00000000:19:00.0",   # _pci.py's form, as NVML's pci_bus_id
                     "device_id": "0x2335", "class": "0x030200",
                     "driver": "nvidia" | "vfio-pci" | "nouveau" | ... | None}],   # the bound driver; None: none
        "occupied_slots": [{"slot": "3", "address": "00000000:19:00.0", "device_present": bool}],
                                      # hot-plug slots whose ``adapter`` reads 1 (a card is seated)
        "entries": int,               # /sys/bus/pci/devices entries looked at
        "truncated": bool,            # more entries than PCI_SCAN_MAX_ENTRIES: the rest not read
        "errors": [{"path": str, "error": "PermissionError: ..."}]},   # at most PCI_SCAN_MAX_ERRORS
      "gpu_visibility": {             # what can hide GPUs from NVML in the probes' own process (gpu_visibility())
        "nvidia_visible_devices": str | None,  # NVIDIA_VISIBLE_DEVICES in the environment (None: unset)
        "confined_by": "docker" | "podman" | "kubernetes" | "slurm" | "container" | None,
        "cgroup": str | None,         # this process's cgroup path (/proc/self/cgroup), at most 256 characters
        "device_nodes": [int] | None}  # the N of /dev/nvidiaN (None: /dev unreadable)
    }

Every NVML reading that raises is recorded as ``{"nvml_error": "<NVMLError string>"}`` in place of its value
(e.g. ``{"nvml_error": "Not Supported"}``), so "not supported" is never confused with 0/healthy. A Python
error around a call (a pynvml binding bug, a function this pynvml lacks) is recorded the same way with the
exception type in front (``"TypeError: ..."``, ``"pynvml has no nvmlDeviceGetX"``).

Args (JSON object, every key optional): ``call_deadline_s``, ``init_deadline_s`` (seconds, _deadline.py) and
``sysfs`` (the sysfs root the PCI scan reads, default ``/sys``: a container's ``/host/sys``, or a tree built by a
test, as the host_memory probe takes it; the inventory's ``host_sysfs_root``).

Sources: NVML API reference (https://docs.nvidia.com/deploy/nvml-api/) for the calls and constants,
``nvidia-smi -q`` documentation (https://docs.nvidia.com/deploy/nvidia-smi/) for the names printed; Linux
Documentation/ABI/testing/sysfs-bus-pci (``/sys/bus/pci/devices/*/{vendor,device,class,driver}``,
``/sys/bus/pci/slots/*/{address,adapter}``) for the PCI scan. Standard library + pynvml only.
"""
from __future__ import annotations

import os
import re
import sys

import _deadline
from _nvml import call, error_code, is_error, nvml_error, text
from _probe import ProbeFailed, log, reject_unknown, run

# Clock event ("throttle") reason bits, from nvml.h (nvmlClocksEventReason* / nvmlClocksThrottleReason*,
# NVML API reference "ClocksEventReasons"). Names follow nvidia-smi -q "Clocks Event Reasons".
CLOCK_EVENT_REASONS = (
    ("gpu_idle", 0x0000000000000001),  # nvmlClocksEventReasonGpuIdle
    ("applications_clocks_setting", 0x0000000000000002),  # nvmlClocksEventReasonApplicationsClocksSetting
    ("sw_power_cap", 0x0000000000000004),  # nvmlClocksEventReasonSwPowerCap
    ("hw_slowdown", 0x0000000000000008),  # nvmlClocksEventReasonHwSlowdown
    ("sync_boost", 0x0000000000000010),  # nvmlClocksEventReasonSyncBoost
    ("sw_thermal_slowdown", 0x0000000000000020),  # nvmlClocksEventReasonSwThermalSlowdown
    ("hw_thermal_slowdown", 0x0000000000000040),  # nvmlClocksEventReasonHwThermalSlowdown
    ("hw_power_brake_slowdown", 0x0000000000000080),  # nvmlClocksEventReasonHwPowerBrakeSlowdown
    ("display_clock_setting", 0x0000000000000100),  # nvmlClocksEventReasonDisplayClockSetting
    ("board_limit", 0x0000000000000200),  # nvmlClocksThrottleReasonBoardLimit
    ("reliability", 0x0000000000000400),  # nvmlClocksThrottleReasonReliability
)

# nvmlComputeMode_t (NVML API reference), named as nvidia-smi prints them.
COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}

# nvmlGpuFabricState_t (NVML API reference, nvmlGpuFabricInfo_t).
FABRIC_STATES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}

# nvmlReturn_t codes used below (nvml.h).
_NVML_SUCCESS = 0
_NVML_ERROR_INVALID_ARGUMENT = 2
_NVML_ERROR_NOT_SUPPORTED = 3
_NVML_ERROR_FUNCTION_NOT_FOUND = 13
_NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25

# nvmlDeviceGetNvLinkState: at most NVML_NVLINK_MAX_LINKS links (18 in NVML 12, 36 in NVML 13).
_NVLINK_MAX_LINKS_FALLBACK = 18


# ---------------------------------------------------------------------------------------------------------
# pure helpers (imported by the tests)


def normalize_bus_id(bus_id) -> str | None:
    """Normalize a PCI bus id to NVML's ``DDDDDDDD:BB:DD.F`` upper-case form (``00000000:19:00.0``).

    Accepts the NVML form, the legacy ``DDDD:BB:DD.F`` form and the kernel log's ``DDDD:BB:DD`` form.
    Returns None for anything else. The one normaliser is ``_pci.normalize_bus_id``.
    """
    from _pci import normalize_bus_id as canonical  # imported here: the one PCI normaliser, see _pci.py

    return canonical(bus_id)


def decode_clock_reasons(mask: int) -> list[str]:
    """Names of the bits set in a clocks-event-reasons mask (see CLOCK_EVENT_REASONS).

    Unknown bits are reported as ``unknown_0x...`` so nothing is dropped.
    """
    names = [name for name, bit in CLOCK_EVENT_REASONS if mask & bit]
    known = 0
    for _, bit in CLOCK_EVENT_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append("unknown_0x%x" % bit)
            rest &= ~bit
        bit <<= 1
    return names


def parse_proc_driver_version(content: str) -> tuple[str | None, str | None]:
    """Parse /proc/driver/nvidia/version: returns (version, first NVRM line).

    The line looks like ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build
    (dvs-builder@U22-I3-AF03-09-1)  Thu ...``.
    """
    for line in content.splitlines():
        if line.startswith("NVRM version:"):
            m = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", line + " ")
            return (m.group(1) if m else None), line.strip()
    return None, None


def fabric_uuid(raw) -> str:
    """Format the 16-byte clusterUuid of nvmlGpuFabricInfo as a canonical UUID string."""
    b = bytes(bytearray(raw))
    h = b.hex()
    return "%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])


# ---------------------------------------------------------------------------------------------------------
# the PCI bus and the probes' view of it (no NVML): what NVML should list


#: PCI vendor id of NVIDIA Corporation (PCI-SIG vendor list; sysfs ``vendor`` reads ``0x10de``)
NVIDIA_VENDOR = "0x10de"
#: PCI class codes of GPUs, base class 03h display controller (PCI Code and ID Assignment Specification, PCI-SIG):
#: 0x0300 VGA-compatible controller, 0x0302 3D controller (what datacenter NVIDIA GPUs report); sysfs ``class``
#: reads the 24-bit code with its programming interface, ``0x030200``
GPU_CLASSES = ("0x0300", "0x0302")
#: entries of /sys/bus/pci/devices read at most: a large server lists ~1,000 PCI functions (gpuaccept's bound, so
#: that a scan never runs long; the document then says ``truncated``)
PCI_SCAN_MAX_ENTRIES = 4096
#: errors kept at most (gpuaccept's bound: one per unreadable device would swell the document)
PCI_SCAN_MAX_ERRORS = 16
#: this process's cgroup path, by the part that names who confines it (each from that tool's cgroup layout:
#: Kubernetes ``kubepods`` slices, Docker ``docker-<id>.scope`` / ``/docker/<id>``, Podman ``libpod-<id>.scope``,
#: containerd ``cri-containerd-<id>.scope``, Slurm's cgroup plugin ``slurmstepd.scope/job_N`` or ``/slurm/uid_N/job_N``)
CGROUP_CONFINERS = (("kubepods", "kubernetes"), ("docker", "docker"), ("libpod", "podman"),
                    ("containerd", "container"), ("slurm", "slurm"))
#: files a container runtime leaves in the container's root (Docker: /.dockerenv; Podman: /run/.containerenv)
CONTAINER_MARKERS = ((".dockerenv", "docker"), ("run/.containerenv", "podman"))


def _err(errors: list, path: str, exc: BaseException) -> None:
    if len(errors) < PCI_SCAN_MAX_ERRORS:
        errors.append({"path": path, "error": f"{type(exc).__name__}: {exc}"})


def _read_attr(path: str, errors: list) -> str | None:
    """A sysfs attribute's text (stripped, lower case), or None with the error recorded (a missing file too)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(64).strip().lower()
    except OSError as e:
        _err(errors, path, e)
        return None


def _bound_driver(dev_dir: str, errors: list) -> str | None:
    """The name of the driver bound to a PCI device (the ``driver`` symlink's target folder), None when unbound."""
    link = os.path.join(dev_dir, "driver")
    if not os.path.lexists(link):
        return None
    try:
        return os.path.basename(os.readlink(link).rstrip("/")) or None
    except OSError as e:
        _err(errors, link, e)
        return None


def _occupied_slots(sysfs: str, errors: list) -> list[dict]:
    """Hot-plug slots (``/sys/bus/pci/slots/*``) whose ``adapter`` reads 1 (a card seated), each with its
    ``address`` normalised (function 0) and whether a device answers there (``device_present``)."""
    from _pci import normalize_bus_id, sysfs_name

    base = os.path.join(sysfs, "bus", "pci", "slots")
    out: list[dict] = []
    try:
        names = sorted(os.listdir(base))[:PCI_SCAN_MAX_ENTRIES]
    except FileNotFoundError:
        return out  # no slot driver (pciehp) loaded: nothing to say
    except OSError as e:
        _err(errors, base, e)
        return out
    for name in names:
        d = os.path.join(base, name)
        if not os.path.exists(os.path.join(d, "adapter")):
            continue  # not a hot-plug slot: sysfs says nothing of a card in it
        if _read_attr(os.path.join(d, "adapter"), errors) != "1":
            continue
        addr = normalize_bus_id(_read_attr(os.path.join(d, "address"), errors))
        if addr is None:
            continue
        present = os.path.isdir(os.path.join(sysfs, "bus", "pci", "devices", sysfs_name(addr)))
        out.append({"slot": name, "address": addr, "device_present": present})
    return out


def pci_scan(sysfs: str = "/sys") -> dict:
    """NVIDIA display and 3D controllers on the PCI bus, read from sysfs under the root ``sysfs`` (the
    ``pci_scan`` part of the document, module docstring): ``/sys/bus/pci/devices/*`` whose ``vendor`` is
    :data:`NVIDIA_VENDOR` and whose ``class`` starts with one of :data:`GPU_CLASSES`, each with its bus id
    (``_pci.normalize_bus_id``), device id and bound driver. At most :data:`PCI_SCAN_MAX_ENTRIES` entries are
    read. Never raises: what cannot be read is an entry of ``errors``."""
    from _pci import normalize_bus_id

    errors: list[dict] = []
    doc: dict = {"sysfs": sysfs, "devices": [], "occupied_slots": [], "entries": 0, "truncated": False,
                 "errors": errors}
    base = os.path.join(sysfs, "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(base))
    except OSError as e:
        _err(errors, base, e)
        return doc
    doc["truncated"] = len(names) > PCI_SCAN_MAX_ENTRIES
    names = names[:PCI_SCAN_MAX_ENTRIES]
    doc["entries"] = len(names)
    for name in names:
        d = os.path.join(base, name)
        try:
            if _read_attr(os.path.join(d, "vendor"), errors) != NVIDIA_VENDOR:
                continue
            cls = _read_attr(os.path.join(d, "class"), errors)
            if cls is None or not cls.startswith(GPU_CLASSES):
                continue
            doc["devices"].append({"bus_id": normalize_bus_id(name) or name,
                                   "device_id": _read_attr(os.path.join(d, "device"), errors),
                                   "class": cls, "driver": _bound_driver(d, errors)})
        except Exception as e:  # noqa: BLE001 - a scan never fails the probe
            _err(errors, d, e)
    try:
        doc["occupied_slots"] = _occupied_slots(sysfs, errors)
    except Exception as e:  # noqa: BLE001
        _err(errors, os.path.join(sysfs, "bus", "pci", "slots"), e)
    return doc


def _confiner(root: str, environ, cgroup: str | None) -> str | None:
    for marker, name in CONTAINER_MARKERS:
        if os.path.exists(os.path.join(root, marker)):
            return name
    if environ.get("KUBERNETES_SERVICE_HOST"):  # set by the kubelet in every container of a pod
        return "kubernetes"
    for part, name in CGROUP_CONFINERS:
        if cgroup and part in cgroup:
            return name
    return None


def gpu_visibility(environ=None, root: str = "/") -> dict:
    """What can hide GPUs from NVML in this process (the ``gpu_visibility`` part of the document): the
    ``NVIDIA_VISIBLE_DEVICES`` variable (NVIDIA Container Toolkit, "GPU Enumeration": which GPUs a container
    gets), the container or job confining the process (:data:`CONTAINER_MARKERS`, KUBERNETES_SERVICE_HOST,
    :data:`CGROUP_CONFINERS` over ``/proc/self/cgroup``) and the ``/dev/nvidiaN`` nodes it sees, under ``root``
    (``/``; tests point it at a tree). Never raises."""
    env = os.environ if environ is None else environ
    cgroup = None
    try:
        with open(os.path.join(root, "proc", "self", "cgroup"), encoding="utf-8", errors="replace") as f:
            lines = f.read(4096).splitlines()
        # cgroup v2: "0::/path"; v1: "N:controllers:/path", the devices controller's path the one that confines
        paths = [ln.split(":", 2)[2] for ln in lines if ln.count(":") >= 2]
        dev = [ln.split(":", 2)[2] for ln in lines if ln.count(":") >= 2 and "devices" in ln.split(":")[1]]
        cgroup = ((dev or paths or [None])[0] or None)
        cgroup = cgroup[:256] if cgroup else None
    except OSError:
        pass
    try:
        nodes = sorted(int(n[6:]) for n in os.listdir(os.path.join(root, "dev"))
                       if n.startswith("nvidia") and n[6:].isdigit())
    except OSError:
        nodes = None
    return {"nvidia_visible_devices": env.get("NVIDIA_VISIBLE_DEVICES"),
            "confined_by": _confiner(root, env, cgroup), "cgroup": cgroup, "device_nodes": nodes}


# ---------------------------------------------------------------------------------------------------------
# NVML readings


def _fabric_doc(nv, info) -> dict:
    status = int(info.status)
    if status == _NVML_SUCCESS:
        status_s = "Success"
    else:
        try:
            status_s = str(nv.NVMLError(status))
        except Exception:
            status_s = f"NVML error code {status}"
    doc = {
        "state": FABRIC_STATES.get(int(info.state), str(int(info.state))),
        "status": status_s,
        "clique_id": int(info.cliqueId),
        "cluster_uuid": fabric_uuid(info.clusterUuid),
    }
    if hasattr(info, "healthMask"):
        doc["health_mask"] = int(info.healthMask)
    if hasattr(info, "healthSummary"):
        doc["health_summary"] = int(info.healthSummary)
    return doc


def fabric_info(nv, handle) -> dict:
    """GPU fabric (NVLink fabric manager / IMEX) state via nvmlDeviceGetGpuFabricInfoV.

    The struct is caller-allocated with its version set (NVML API reference, nvmlDeviceGetGpuFabricInfoV):
    tries ``c_nvmlGpuFabricInfo_v3_t``, then ``c_nvmlGpuFabricInfoV_t`` (v2), then the deprecated
    ``nvmlDeviceGetGpuFabricInfo`` with ``c_nvmlGpuFabricInfo_t`` for older drivers. Falls through only on
    "Function Not Found" / "Argument Version Mismatch"; any other error is the answer.
    """
    import ctypes

    variants = (
        ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfo_v3_t"),
        ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
        ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t"),
    )
    last = {"nvml_error": "pynvml has no fabric info call"}
    for fn_name, struct_name in variants:
        fn = getattr(nv, fn_name, None)
        cls = getattr(nv, struct_name, None)
        if fn is None or cls is None:
            continue
        try:
            info = cls()  # versioned structs set .version in __init__
            fn(handle, ctypes.byref(info))
        except Exception as e:
            last = nvml_error(e)
            if error_code(e) in (_NVML_ERROR_FUNCTION_NOT_FOUND, _NVML_ERROR_ARGUMENT_VERSION_MISMATCH):
                continue
            return last
        doc = _fabric_doc(nv, info)
        doc["struct"] = struct_name
        return doc
    return last


def nvlink_active_count(nv, handle):
    """Number of NVLink links whose nvmlDeviceGetNvLinkState is active (an int), or ``nvml_error``.

    Links are enumerated until NVML answers "Invalid Argument" (past the device's last link). If no link
    answers at all (e.g. "Not Supported" on a one-GPU VM), the first error is returned instead of 0.
    """
    max_links = int(getattr(nv, "NVML_NVLINK_MAX_LINKS", _NVLINK_MAX_LINKS_FALLBACK))
    active = 0
    answered = 0
    first_err = None
    for link in range(max_links):
        try:
            state = nv.nvmlDeviceGetNvLinkState(handle, link)
        except Exception as e:
            if error_code(e) == _NVML_ERROR_INVALID_ARGUMENT:
                break
            if first_err is None:
                first_err = nvml_error(e)
            continue
        answered += 1
        if state == 1:  # NVML_FEATURE_ENABLED
            active += 1
    if answered == 0:
        return first_err or {"nvml_error": "no NVLink links"}
    return active


def _proc_comm(pid: int):
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def compute_processes(nv, handle):
    """Compute processes on the GPU: ``[{pid, used_memory_bytes, name}]`` (name from /proc/PID/comm)."""
    procs = call(nv, "nvmlDeviceGetComputeRunningProcesses", handle)
    if is_error(procs):
        return procs
    out = []
    for p in procs:
        pid = int(p.pid)
        used = getattr(p, "usedGpuMemory", None)
        out.append({"pid": pid, "used_memory_bytes": None if used is None else int(used), "name": _proc_comm(pid)})
    return out


def _clock_event_reasons(nv, handle):
    value = call(nv, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if is_error(value):  # drivers before 535 only have the *ThrottleReasons name
        older = call(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        if not is_error(older):
            value = older
    return value


def _temperature(nv, handle):
    value = call(nv, "nvmlDeviceGetTemperature", handle, nv.NVML_TEMPERATURE_GPU)
    if is_error(value) and hasattr(nv, "nvmlDeviceGetTemperatureV"):
        newer = call(nv, "nvmlDeviceGetTemperatureV", handle, nv.NVML_TEMPERATURE_GPU)
        if not is_error(newer):
            value = newer
    return value


def _memory_total(nv, handle):
    """Total memory in bytes: nvmlDeviceGetMemoryInfo (v1), else the v2 struct (``nvmlMemory_v2``, passed as
    ``version=nv.nvmlMemory_v2`` in nvidia-ml-py), which some parts answer when v1 says "Not Supported"."""
    value = call(nv, "nvmlDeviceGetMemoryInfo", handle, conv=lambda m: int(m.total))
    if is_error(value) and hasattr(nv, "nvmlMemory_v2"):
        newer = call(nv, "nvmlDeviceGetMemoryInfo", handle, nv.nvmlMemory_v2, conv=lambda m: int(m.total))
        if not is_error(newer):
            value = newer
    return value


def _pair(value, conv0=None, conv1=None):
    """Split a 2-sequence NVML answer into two values (an error fills both)."""
    if is_error(value):
        return value, value
    a, b = value[0], value[1]
    return (conv0(a) if conv0 else a), (conv1(b) if conv1 else b)


def _mw_to_w(v):
    return round(v / 1000.0, 3)


def power_limits(nv, handle) -> dict:
    """Power limits in W beside the enforced one (``power_limit_w``), each a value or ``nvml_error``.

    ``default_w``: nvmlDeviceGetPowerManagementDefaultLimit, "the power management limit that the device boots
    with"; ``requested_w``: nvmlDeviceGetPowerManagementLimit (what was set, e.g. by ``nvidia-smi -pl``; the
    enforced limit can be lower when another limiter, such as an out-of-band one, applies); ``min_w``/``max_w``:
    nvmlDeviceGetPowerManagementLimitConstraints. nvidia-smi -q prints them as Default / Requested / Min / Max
    Power Limit. Source: NVML API reference, Device Queries.
    """
    lo, hi = _pair(call(nv, "nvmlDeviceGetPowerManagementLimitConstraints", handle), _mw_to_w, _mw_to_w)
    return {
        "default_w": call(nv, "nvmlDeviceGetPowerManagementDefaultLimit", handle, conv=_mw_to_w),
        "requested_w": call(nv, "nvmlDeviceGetPowerManagementLimit", handle, conv=_mw_to_w),
        "min_w": lo,
        "max_w": hi,
    }


def _clock_id(nv, handle, clock_type, clock_id, deprecated: str):
    """nvmlDeviceGetClock(type, id); on a driver without it, the deprecated per-purpose call."""
    value = call(nv, "nvmlDeviceGetClock", handle, clock_type, clock_id)
    if is_error(value) and hasattr(nv, deprecated):
        older = call(nv, deprecated, handle, clock_type)
        if not is_error(older):
            value = older
    return value


def application_clocks(nv, handle) -> dict:
    """Application clocks against the SKU's defaults, MHz (each a value or ``nvml_error``).

    ``app_sm_mhz``/``app_mem_mhz``: nvmlDeviceGetClock(NVML_CLOCK_ID_APP_CLOCK_TARGET) (set by ``nvidia-smi -ac``);
    ``app_default_sm_mhz``/``app_default_mem_mhz``: NVML_CLOCK_ID_APP_CLOCK_DEFAULT (nvidia-smi "Default
    Applications Clocks"); ``boost_max_sm_mhz``: NVML_CLOCK_ID_CUSTOMER_BOOST_MAX (nvidia-smi "Max Customer Boost
    Clocks"). NVML has no call that reads back locked clocks (``nvidia-smi -lgc``/``-lmc``); a lock shows as the
    applications-clocks-setting clock event reason under load, which the compute test judges.
    Graphics and SM clocks are one clock domain on these GPUs; NVML_CLOCK_SM is read (as ``sm_max_mhz``).
    """
    sm, mem = nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM
    target = getattr(nv, "NVML_CLOCK_ID_APP_CLOCK_TARGET", 1)
    default = getattr(nv, "NVML_CLOCK_ID_APP_CLOCK_DEFAULT", 2)
    boost = getattr(nv, "NVML_CLOCK_ID_CUSTOMER_BOOST_MAX", 3)
    return {
        "app_sm_mhz": _clock_id(nv, handle, sm, target, "nvmlDeviceGetApplicationsClock"),
        "app_mem_mhz": _clock_id(nv, handle, mem, target, "nvmlDeviceGetApplicationsClock"),
        "app_default_sm_mhz": _clock_id(nv, handle, sm, default, "nvmlDeviceGetDefaultApplicationsClock"),
        "app_default_mem_mhz": _clock_id(nv, handle, mem, default, "nvmlDeviceGetDefaultApplicationsClock"),
        "boost_max_sm_mhz": _clock_id(nv, handle, sm, boost, "nvmlDeviceGetMaxCustomerBoostClock"),
    }


def pending_modes(nv, handle) -> dict:
    """Every NVML setting with a current and a pending value (applied at the next GPU reset), beside ECC
    (``ecc.mode_current``/``mode_pending``) and MIG (``mig_mode``): ``{name: {"current", "pending"}}``.

    ``gpu_operation_mode``: nvmlDeviceGetGpuOperationMode (nvmlGpuOperationMode_t: 0 ALL_ON, 1 COMPUTE, 2 LOW_DP);
    ``dram_encryption``: nvmlDeviceGetDramEncryptionMode (nvmlEnableState_t). Source: NVML API reference;
    nvidia-smi -q prints them as "GPU Operation Mode" and "DRAM Encryption Mode" with Current / Pending.
    """
    out = {}
    for name, fn in (("gpu_operation_mode", "nvmlDeviceGetGpuOperationMode"),
                     ("dram_encryption", "nvmlDeviceGetDramEncryptionMode")):
        cur, pend = _pair(call(nv, fn, handle), int, int)
        out[name] = {"current": cur, "pending": pend}
    return out


# nvmlGpuRecoveryAction_t (nvml.h, NVML API reference "Field Value Enums"), as the NVML field
# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (230 in nvml.h of driver 570+) reports it; names as nvidia-smi -q prints them.
RECOVERY_ACTIONS = {0: "none", 1: "gpu reset required", 2: "node reboot required", 3: "drain p2p",
                    4: "drain and reset", 5: "recover imex domain", 6: "bus reset", 7: "system reboot"}
_FI_GPU_RECOVERY_ACTION = 230  # nvml.h NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, where this pynvml lacks the name
_NVML_ERROR_CORRUPTED_INFOROM = 14  # nvml.h NVML_ERROR_CORRUPTED_INFOROM


def inforom(nv, handle) -> dict:
    """InfoROM validity: nvmlDeviceValidateInforom ("Reads the infoROM from the flash and verifies the
    checksums", NVML API reference). ``{"valid": True}``; ``{"valid": False, "error": <NVML's words>}`` when NVML answers
    NVML_ERROR_CORRUPTED_INFOROM; any other refusal (Not Supported) is the ``nvml_error`` placeholder alone."""
    fn = getattr(nv, "nvmlDeviceValidateInforom", None)
    if fn is None:
        return {"nvml_error": "pynvml has no nvmlDeviceValidateInforom"}
    try:
        fn(handle)
    except Exception as e:  # noqa: BLE001 - NVMLError, binding errors
        if error_code(e) == _NVML_ERROR_CORRUPTED_INFOROM:
            return {"valid": False, "error": nvml_error(e)["nvml_error"]}
        return nvml_error(e)
    return {"valid": True}


def recovery_action(nv, handle):
    """The GPU recovery action NVML reports (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION through
    nvmlDeviceGetFieldValues): ``{"code": int, "name": RECOVERY_ACTIONS name}``, or ``nvml_error`` (a driver
    that does not know the field answers Not Supported / Invalid Argument in the field's nvmlReturn)."""
    fid = int(getattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", _FI_GPU_RECOVERY_ACTION))
    values = call(nv, "nvmlDeviceGetFieldValues", handle, [fid])
    if is_error(values):
        return values
    fv = values[0]
    ret = int(fv.nvmlReturn)
    if ret != _NVML_SUCCESS:
        try:
            return {"nvml_error": str(nv.NVMLError(ret))}
        except Exception:  # noqa: BLE001 - an unknown code
            return {"nvml_error": f"NVML error code {ret}"}
    code = int(fv.value.uiVal)
    return {"code": code, "name": RECOVERY_ACTIONS.get(code, f"unknown ({code})")}


def gpu_info(nv, handle, index: int) -> dict:
    """All readings for one GPU; every failing reading becomes ``{"nvml_error": ...}``."""
    g: dict = {"index": index}
    g["name"] = call(nv, "nvmlDeviceGetName", handle, conv=text)
    g["uuid"] = call(nv, "nvmlDeviceGetUUID", handle, conv=text)
    g["serial"] = call(nv, "nvmlDeviceGetSerial", handle, conv=text)
    g["vbios_version"] = call(nv, "nvmlDeviceGetVbiosVersion", handle, conv=text)

    pci = call(nv, "nvmlDeviceGetPciInfo", handle)
    if is_error(pci):
        g["pci_bus_id"] = g["pci_device_id"] = pci
    else:
        g["pci_bus_id"] = text(pci.busId)
        g["pci_device_id"] = "0x%08x" % int(pci.pciDeviceId)

    g["memory_total_bytes"] = _memory_total(nv, handle)
    g["cuda_capability"] = call(nv, "nvmlDeviceGetCudaComputeCapability", handle, conv=lambda t: [int(t[0]), int(t[1])])

    g["pcie"] = {
        "gen": call(nv, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        "width": call(nv, "nvmlDeviceGetCurrPcieLinkWidth", handle),
        # max possible with this GPU in this system (nvidia-smi "Max")
        "gen_max": call(nv, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
        "width_max": call(nv, "nvmlDeviceGetMaxPcieLinkWidth", handle),
        # max the GPU itself supports (nvidia-smi "Device Max")
        "gen_device_max": call(nv, "nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
        "replay_counter": call(nv, "nvmlDeviceGetPcieReplayCounter", handle),
    }

    cur, pend = _pair(call(nv, "nvmlDeviceGetEccMode", handle), bool, bool)
    unc, cor = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED
    vol, agg = nv.NVML_VOLATILE_ECC, nv.NVML_AGGREGATE_ECC
    g["ecc"] = {
        "mode_current": cur,
        "mode_pending": pend,
        "uncorrected_volatile": call(nv, "nvmlDeviceGetTotalEccErrors", handle, unc, vol),
        "uncorrected_aggregate": call(nv, "nvmlDeviceGetTotalEccErrors", handle, unc, agg),
        "corrected_volatile": call(nv, "nvmlDeviceGetTotalEccErrors", handle, cor, vol),
        "corrected_aggregate": call(nv, "nvmlDeviceGetTotalEccErrors", handle, cor, agg),
    }

    rows = call(nv, "nvmlDeviceGetRemappedRows", handle)
    if is_error(rows):
        g["remapped_rows"] = {"correctable": rows, "uncorrectable": rows, "pending": rows, "failure": rows}
    else:
        g["remapped_rows"] = {
            "correctable": int(rows[0]),
            "uncorrectable": int(rows[1]),
            "pending": bool(rows[2]),
            "failure": bool(rows[3]),
        }

    g["retired_pages"] = {
        "single_bit": call(nv, "nvmlDeviceGetRetiredPages", handle,
                           nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, conv=len),
        "double_bit": call(nv, "nvmlDeviceGetRetiredPages", handle,
                           nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, conv=len),
        "pending": call(nv, "nvmlDeviceGetRetiredPagesPendingStatus", handle, conv=bool),
    }

    g["temp_c"] = _temperature(nv, handle)
    g["power_w"] = call(nv, "nvmlDeviceGetPowerUsage", handle, conv=_mw_to_w)
    g["power_limit_w"] = call(nv, "nvmlDeviceGetEnforcedPowerLimit", handle, conv=_mw_to_w)
    g["power_limits"] = power_limits(nv, handle)
    g["clocks"] = {
        "sm_mhz": call(nv, "nvmlDeviceGetClockInfo", handle, nv.NVML_CLOCK_SM),
        "mem_mhz": call(nv, "nvmlDeviceGetClockInfo", handle, nv.NVML_CLOCK_MEM),
        "sm_max_mhz": call(nv, "nvmlDeviceGetMaxClockInfo", handle, nv.NVML_CLOCK_SM),
        "mem_max_mhz": call(nv, "nvmlDeviceGetMaxClockInfo", handle, nv.NVML_CLOCK_MEM),
    }
    g["application_clocks"] = application_clocks(nv, handle)
    reasons = _clock_event_reasons(nv, handle)
    g["clocks_event_reasons"] = reasons
    g["clocks_event_reasons_active"] = reasons if is_error(reasons) else decode_clock_reasons(int(reasons))

    g["persistence_mode"] = call(nv, "nvmlDeviceGetPersistenceMode", handle, conv=bool)
    mig_cur, mig_pend = _pair(call(nv, "nvmlDeviceGetMigMode", handle), bool, bool)
    g["mig_mode"] = {"current": mig_cur, "pending": mig_pend}
    g["pending_modes"] = pending_modes(nv, handle)
    g["compute_mode"] = call(nv, "nvmlDeviceGetComputeMode", handle,
                             conv=lambda m: COMPUTE_MODES.get(int(m), str(int(m))))
    g["compute_processes"] = compute_processes(nv, handle)
    g["fabric"] = fabric_info(nv, handle)
    g["nvlink_links"] = nvlink_active_count(nv, handle)
    g["inforom"] = inforom(nv, handle)
    g["recovery_action"] = recovery_action(nv, handle)
    return g


# ---------------------------------------------------------------------------------------------------------
# the probe


def kernel_driver_version() -> tuple[str | None, str | None]:
    """(version, line) of the loaded kernel module from /proc/driver/nvidia/version, or (None, None)."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as f:
            return parse_proc_driver_version(f.read())
    except OSError:
        return None, None


def nvml_library_version() -> str | None:
    """Version of the libnvidia-ml.so this process loaded (from the file name its link resolves to,
    ``libnvidia-ml.so.580.159.04`` → ``580.159.04``, via /proc/self/maps), or None. Needs no nvmlInit, so it
    names the library's side of a library/kernel-module mismatch."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            paths = {ln.split()[-1] for ln in f if "libnvidia-ml.so" in ln}
    except OSError:
        return None
    for path in sorted(paths):
        m = re.search(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$", os.path.realpath(path))
        if m:
            return m.group(1)
    return None


def init_failure_reason(exc: BaseException) -> tuple[str, str]:
    """Map an nvmlInit exception to (reason_code, operator-readable reason)."""
    code = error_code(exc)
    msg = nvml_error(exc)["nvml_error"]
    if code == 12:  # NVML_ERROR_LIBRARY_NOT_FOUND
        return "no_driver", "no NVIDIA driver (libnvidia-ml.so not found)"
    if code == 9:  # NVML_ERROR_DRIVER_NOT_LOADED
        return "driver_not_loaded", f"NVIDIA kernel driver not loaded (NVML: {msg}): no NVIDIA GPU, or the nvidia module failed to load"
    if code == 18:  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
        return "version_mismatch", f"NVML library and kernel driver versions differ (NVML: {msg}); reboot or reload the nvidia module"
    if code == 4:  # NVML_ERROR_NO_PERMISSION
        return "no_permission", f"no permission to use the GPUs (NVML: {msg})"
    return "init_failed", f"nvmlInit failed: {msg}"


ARG_KEYS = {"call_deadline_s", "init_deadline_s", "sysfs"}


def _no_nvml_library() -> bool:
    """True when pynvml is installed (found, not imported) and the NVML library it would load cannot be loaded
    (``libnvidia-ml.so.1``, the name pynvml's ``_LoadNvmlLibrary`` opens on Linux): nvmlInit would fail with
    NVML_ERROR_LIBRARY_NOT_FOUND. False when pynvml is missing (said as such), already imported (it answers for
    itself) or the library loads."""
    import ctypes
    import importlib.util

    if "pynvml" in sys.modules or importlib.util.find_spec("pynvml") is None:
        return False
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return True
    return False


#: excluded GPUs listed at most (NVML names them one call each; a board holds at most 16 GPUs today)
MAX_EXCLUDED = 64


def excluded_gpus(nv) -> list | dict:
    """The GPUs the driver was told to skip (the kernel module's ``NVreg_ExcludedGpus``: on the bus, bound to
    nvidia, never initialised, never enumerated): ``[{"bus_id": NVML form, "uuid": str}]`` from
    ``nvmlGetExcludedDeviceCount`` / ``nvmlGetExcludedDeviceInfoByIndex`` (NVML API reference, "Excluded
    Device Queries"; at most :data:`MAX_EXCLUDED`), or an ``nvml_error`` placeholder where NVML cannot say (a
    driver or pynvml without these calls)."""
    count = call(nv, "nvmlGetExcludedDeviceCount")
    if is_error(count):
        return count
    out = []
    for i in range(min(int(count), MAX_EXCLUDED)):
        info = call(nv, "nvmlGetExcludedDeviceInfoByIndex", i)
        if is_error(info):
            return info
        pci = getattr(info, "pci", None)
        out.append({"bus_id": normalize_bus_id(text(getattr(pci, "busId", b""))), "uuid": text(info.uuid)})
    return out


def _on_gpu(nv, index) -> None:
    """Tell a :class:`_deadline.Traced` which GPU the next calls are about (pynvml itself: nothing)."""
    if isinstance(nv, _deadline.Traced):
        setattr(nv, "gpu", index)


def read_nvml(nv, doc: dict, log=log) -> dict:
    """Fill ``doc`` (the document above) from NVML through ``nv`` (pynvml, or a :class:`_deadline.Traced` over it,
    told each GPU's index while it is read); returns ``doc``."""
    try:
        nv.nvmlInit()
    except Exception as e:
        code, reason = init_failure_reason(e)
        doc.update(reason=reason, reason_code=code, nvml_library_version=nvml_library_version())
        return doc
    try:
        doc["driver"] = call(nv, "nvmlSystemGetDriverVersion", conv=text)
        doc["nvml_version"] = call(nv, "nvmlSystemGetNVMLVersion", conv=text)
        doc["cuda_driver_version"] = call(nv, "nvmlSystemGetCudaDriverVersion")
        doc["nvml_excluded"] = excluded_gpus(nv)
        count = call(nv, "nvmlDeviceGetCount")
        doc["gpu_count"] = count
        if is_error(count):
            doc.update(reason=f"nvmlDeviceGetCount failed: {count['nvml_error']}", reason_code="init_failed")
            return doc
        if count == 0:
            doc.update(reason="no NVIDIA GPU (NVML reports 0 devices)", reason_code="no_gpu")
            return doc
        doc["nvml_available"] = True
        for i in range(count):
            _on_gpu(nv, i)
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(i)
            except Exception as e:  # e.g. "GPU is lost", "Unknown Error": listed by NVML, no handle
                log(f"GPU {i}: nvmlDeviceGetHandleByIndex: {e}")
                doc["gpus"].append({"index": i, "lost": True, "nvml_error": nvml_error(e)["nvml_error"]})
                continue
            doc["gpus"].append(gpu_info(nv, handle, i))
        return doc
    finally:
        _on_gpu(nv, None)
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def main(args: dict) -> dict:
    """Probe entry point: the document described in the module docstring. NVML is read in a child process
    under per-call deadlines (``_deadline.run_nvml``; args ``call_deadline_s``, ``init_deadline_s``, seconds):
    a call that does not return makes the document ``nvml_available: false``, ``reason_code:
    "driver_unresponsive"`` with ``driver_unresponsive: {gpu, call, seconds, deadline_s, state, unkillable}``.
    The PCI scan (:func:`pci_scan`, under the ``sysfs`` arg) and :func:`gpu_visibility` are read first, in this
    process: they are in every document, NVML or not."""
    reject_unknown(args, ARG_KEYS)
    kver, kline = kernel_driver_version()
    doc: dict = {
        "nvml_available": False,
        "hostname": os.uname().nodename,  # what socket.gethostname() returns on Linux
        "kernel_driver_version": kver,
        "kernel_driver_version_line": kline,
        # the NVIDIA driver is on the node (so "no pynvml" is a broken node, not a GPU-less one)
        "driver_present": os.path.exists("/proc/driver/nvidia") or os.path.exists("/dev/nvidia0"),
        # the probes' environment hides NVML GPUs from CUDA when set (None: unset)
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "gpus": [],
        # what NVML should list, read without NVML: the judge compares (gpuaccept/judging/gpucount.py)
        "pci_scan": pci_scan(str(args.get("sysfs") or "/sys")),
        "gpu_visibility": gpu_visibility(),
    }
    if not doc["driver_present"] and _no_nvml_library():
        # what nvmlInit answers here (NVML_ERROR_LIBRARY_NOT_FOUND), said without importing pynvml and forking a
        # reader: about 20 ms of a CPU node's time per run
        doc.update(reason="no NVIDIA driver (libnvidia-ml.so not found)", reason_code="no_driver")
        return doc
    try:
        import pynvml  # noqa: F401 - only whether it is there; the child imports it again (cached)
    except ImportError:
        doc.update(reason="pynvml (nvidia-ml-py) not installed", reason_code="no_pynvml")
        return doc

    def body(mark, child_log):
        import pynvml as real

        lat = _deadline.Latency()
        out = read_nvml(_deadline.Traced(real, mark, lat.add), dict(doc, gpus=[]), child_log)
        out["nvml_latency_s"] = lat.summary(None)  # the system calls (nvmlInit, driver version, count)
        for g in out["gpus"]:
            if not g.get("lost"):
                g["nvml_latency_s"] = lat.summary(g["index"])
        return out

    got = _deadline.run_nvml(body, float(args.get("call_deadline_s", _deadline.CALL_DEADLINE_S)),
                             float(args.get("init_deadline_s", _deadline.INIT_DEADLINE_S)), log)
    if "result" in got:
        return got["result"]
    if "failed" in got:
        raise ProbeFailed(f"NVML reading failed: {got['failed']}")
    stuck = got["unresponsive"]
    doc.update(reason=_deadline.describe(stuck), reason_code="driver_unresponsive", driver_unresponsive=stuck)
    return doc


if __name__ == "__main__":
    run(main)
