"""Configuration drift: the settings that make a healthy GPU slow (pure functions, no I/O).

A power limit lowered for a test, a mode change waiting for the next reset, application clocks or a clock
lock below the SKU's defaults, an NCCL variable that switches a transport off: every hardware figure can
look fine while a node runs slow. Each function takes readings from a probe document (``gpu_inventory``
per GPU, ``matmul_tflops`` per GPU and dtype, ``nccl_env`` per node) and returns
:class:`~gpuaccept.judging.health.Finding` records, like :mod:`gpuaccept.judging.health`.

Where each expectation comes from (named in every failure):

- power: the inventory's ``gpu_power_limit_w`` when set (a site may cap its GPUs on purpose), else NVML's
  default limit of that very GPU (nvmlDeviceGetPowerManagementDefaultLimit, "the power management limit that
  the device boots with"), else the SKU file's ``checks.power_limit_w``;
- clocks: NVML's default application clocks of that GPU (``application_clocks``, NVML_CLOCK_ID_APP_CLOCK_DEFAULT)
  and its maximum SM clock (``clocks.sm_max_mhz``, nvmlDeviceGetMaxClockInfo);
- pending modes: NVML's own current/pending pairs (nvmlDeviceGetEccMode, nvmlDeviceGetMigMode,
  nvmlDeviceGetGpuOperationMode, nvmlDeviceGetDramEncryptionMode);
- NCCL variables: NVIDIA's NCCL user guide, "Environment Variables" (see :data:`NCCL_DRIFT_VARS`).

A reading NVML could not take (``{"nvml_error": ...}``) is never read as healthy: it fails when the SKU file
lists the field in ``expect.required_nvml`` (``power_limits``, ``application_clocks``, ``pending_modes``), and is
recorded
with NVML's words otherwise.
"""
from __future__ import annotations

from gpuaccept.judging.health import _unreadable as health_unreadable
from gpuaccept.judging.readings import bus_key, number

import re
from typing import Any, Mapping

from gpuaccept.judging.health import Finding, nvml_error
from gpuaccept.config.thresholds import SkuSpec

# nvmlClocksEventReasonApplicationsClocksSetting (nvml.h; NVML API reference "ClocksEventReasons"):
# "GPU clocks are limited by current setting of applications clocks". nvidia-smi: "Applications Clocks Setting".
APPLICATIONS_CLOCKS_SETTING = 0x2

# nvmlGpuOperationMode_t (NVML API reference), named as nvidia-smi --gom names them.
GPU_OPERATION_MODES = {0: "ALL_ON", 1: "COMPUTE", 2: "LOW_DP"}


def _required(sku: SkuSpec, field: str) -> bool:
    return field in (sku.expect.get("required_nvml") or [])


def _unreadable(sku: SkuSpec, field: str, check: str, v) -> Finding:
    """A reading NVML refused: the health layer's one rule (gpuaccept.judging.health, required fields fail in NVML's
    words, "GPU is lost" always fails, others are recorded)."""
    return health_unreadable(sku, field, check, v)


def _w(v: float) -> str:
    return f"{v:g} W"


# ---------------------------------------------------------------------------------------------------------
# pending modes


def _mode_name(name: str, v) -> str:
    if isinstance(v, bool):
        return "enabled" if v else "disabled"
    if name == "gpu_operation_mode" and isinstance(v, int):
        return GPU_OPERATION_MODES.get(v, str(v))
    if isinstance(v, int) and name == "dram_encryption":
        return "enabled" if v else "disabled"
    return str(v)


def pending_modes(gpu: dict, sku: SkuSpec) -> list[Finding]:
    """Every NVML mode whose pending value differs from its current one: the GPU changes behaviour at its next
    reset. Fails ``"ECC mode changes at the next reset: enabled -> disabled"``; one Finding per mode.

    ``gpu``: a ``gpu_inventory`` per-GPU document: ``ecc.mode_current``/``mode_pending`` (bool),
    ``mig_mode.current``/``pending`` (bool) and ``pending_modes.{gpu_operation_mode,dram_encryption}`` (ints).
    A pair NVML answers "Not Supported" for (DRAM encryption on Hopper, GOM on most boards) is recorded.
    """
    ecc = gpu.get("ecc") or {}
    mig = gpu.get("mig_mode") or {}
    pairs = [("ecc_mode", "ECC mode", ecc.get("mode_current"), ecc.get("mode_pending")),
             ("mig_mode", "MIG mode", mig.get("current"), mig.get("pending"))]
    more = gpu.get("pending_modes")
    if isinstance(more, dict):
        for name, label in (("gpu_operation_mode", "GPU operation mode"), ("dram_encryption", "DRAM encryption")):
            m = more.get(name) or {}
            pairs.append((name, label, m.get("current"), m.get("pending")))
    else:
        pairs.append(("pending_modes", "other pending modes", more, more))
    out = []
    for name, label, cur, pend in pairs:
        check = f"{name}_pending"
        if cur is None or pend is None or nvml_error(cur) or nvml_error(pend):
            bad = cur if (cur is None or nvml_error(cur)) else pend
            out.append(_unreadable(sku, "pending_modes", check, bad))
            continue
        a, b = _mode_name(name, cur), _mode_name(name, pend)
        out.append(Finding(check, b, extra={"current": a},
                           failure=f"{label} changes at the next reset: {a} -> {b}" if cur != pend else None))
    return out


# ---------------------------------------------------------------------------------------------------------
# power


def power_expectation(gpu: dict, sku: SkuSpec, inventory_w) -> tuple[float | None, str]:
    """(floor in W, where it comes from) for one GPU's enforced power limit: the inventory's
    ``gpu_power_limit_w``, else NVML's default limit of this GPU, else the SKU file's ``checks.power_limit_w``;
    ``(None, why)`` when none is known."""
    if number(inventory_w) is not None:
        return float(inventory_w), "the inventory's gpu_power_limit_w"
    default = (gpu.get("power_limits") or {}).get("default_w")
    if number(default) is not None:
        return float(default), "NVML default limit"
    lim = sku.checks.get("power_limit_w")
    if lim is not None:
        return lim.bound, f"{sku.path}: {lim.source}"
    return None, f"NVML default limit unreadable ({nvml_error(default) or 'not in the probe document'})"


def power_limit(gpu: dict, sku: SkuSpec, inventory_w=None, enforced=None, during: str = "") -> list[Finding]:
    """The enforced power limit (W, nvmlDeviceGetEnforcedPowerLimit) against :func:`power_expectation`: below it
    fails with both values and the source, e.g. ``"power limit 500 W enforced, below 700 W (NVML default limit;
    requested 500 W)"``.

    ``enforced``: a limit read elsewhere (the compute probe's reading during its timed window); default the
    inventory's ``power_limit_w``. ``during``: text naming where it was read (``" during bf16 matmul"``).
    A limit above the expectation is recorded (a site may raise it within NVML's max).
    """
    value = gpu.get("power_limit_w") if enforced is None else enforced
    limits = gpu.get("power_limits") if isinstance(gpu.get("power_limits"), dict) else {}
    extra = {"default_w": limits.get("default_w"), "requested_w": limits.get("requested_w"),
             "min_w": limits.get("min_w"), "max_w": limits.get("max_w")}
    if number(value) is None:
        return [_unreadable(sku, "power_limits", "power_limit_w", value)]
    floor, source = power_expectation(gpu, sku, inventory_w)
    extra.update(expected_w=floor, expected_from=source)
    if floor is None:
        return [_unreadable(sku, "power_limits", "power_limit_w", limits.get("default_w"))]
    failure = None
    if value < floor:
        parts = [source]
        if source != "NVML default limit" and number(extra["default_w"]) is not None:
            parts.append(f"NVML default {_w(extra['default_w'])}")
        if number(extra["requested_w"]) is not None and extra["requested_w"] != value:
            parts.append(f"requested {_w(extra['requested_w'])}")
        failure = f"power limit {_w(value)} enforced{during}, below {_w(floor)} ({'; '.join(parts)})"
    return [Finding("power_limit_w", value, "W", extra=extra, failure=failure)]


# ---------------------------------------------------------------------------------------------------------
# clocks


def clocks(gpu: dict, sku: SkuSpec) -> list[Finding]:
    """Application clocks (nvidia-smi ``-ac``) against this GPU's default application clocks, SM and memory, MHz:
    below the default fails ``"application SM clock 1500 MHz, below the default 1980 MHz (nvidia-smi -rac
    resets it)"``. The customer boost maximum is recorded. Locked clocks cannot be read back through NVML;
    they are judged during load by :func:`clock_setting_event`."""
    c = gpu.get("application_clocks") or {}
    out = []
    for dom, label in (("sm", "SM"), ("mem", "memory")):
        app, default = c.get(f"app_{dom}_mhz"), c.get(f"app_default_{dom}_mhz")
        check = f"app_{dom}_clock_mhz"
        if number(app) is None or number(default) is None:
            out.append(_unreadable(sku, "application_clocks", check, app if number(app) is None else default))
            continue
        out.append(Finding(check, app, "MHz", extra={"default_mhz": default}, failure=(
            f"application {label} clock {app:g} MHz, below the default {default:g} MHz (nvidia-smi -rac resets it)"
            if app < default else None)))
    out.append(Finding("boost_max_sm_clock_mhz", c.get("boost_max_sm_mhz"), "MHz"))
    return out


def clock_setting_event(mask, gpu: dict | None, sm_clock_mhz=None) -> tuple[str | None, str | None]:
    """Judge the applications-clocks-setting bit (0x2) of a clocks-event-reasons mask read under load.

    Returns ``(failure, note)``. The bit says the clocks were held by a user setting: application clocks, or a
    clock lock (``nvidia-smi -lgc/-lmc``), which NVML reports under the same reason. On a SKU whose default
    application clock equals its maximum SM clock (H100, H200: 1980 = 1980 MHz), a default setting cannot hold
    the clocks, so the bit is a setting below the defaults: a failure naming the SM clock and the application
    clocks. Where the default application clock is below the maximum (boost above the application clock, as on
    some older boards) and the application clocks are at their default, the bit is by design: a note. When the
    application clocks cannot be read (a GPU without them answers "Not Supported"), only a lock can have set
    the bit: a failure with the values that are known ("?" for the others).
    ``gpu``: the ``gpu_inventory`` per-GPU document of the same GPU (by PCI bus id), or None.
    """
    if mask is None or isinstance(mask, bool) or not isinstance(mask, int) or not mask & APPLICATIONS_CLOCKS_SETTING:
        return None, None
    c = (gpu or {}).get("application_clocks") or {}
    app, app_mem = c.get("app_sm_mhz"), c.get("app_mem_mhz")
    default, default_mem = c.get("app_default_sm_mhz"), c.get("app_default_mem_mhz")
    top = ((gpu or {}).get("clocks") or {}).get("sm_max_mhz")
    seen = f"SM clock {sm_clock_mhz:g} MHz" if number(sm_clock_mhz) is not None else "SM clock not sampled"

    def mhz(v):
        return f"{v:g}" if number(v) is not None else "?"
    values = (f"{seen}; application clocks {mhz(app)}/{mhz(app_mem)} MHz (SM/memory), "
              f"default {mhz(default)}/{mhz(default_mem)} MHz, max SM {mhz(top)} MHz")
    if (number(app) is not None and number(default) is not None and number(top) is not None and default < top
            and app >= default and (number(app_mem) is None or number(default_mem) is None or app_mem >= default_mem)):
        return None, f"applications clocks setting at the SKU's default application clocks ({values})"
    return (f"applications clocks setting held the clocks ({values}): application clocks or a clock lock "
            f"(nvidia-smi -lgc/-lmc) below the SKU's default; reset with nvidia-smi -rac / -rgc / -rmc"), None


# ---------------------------------------------------------------------------------------------------------
# NCCL environment

# Variables that switch a transport off, force an algorithm or protocol, or change NCCL's channels and buffers.
# Source: NVIDIA NCCL User Guide, "Environment Variables"
# (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html, read 2026-11-30, NCCL 2.28 era): its
# "Debugging" section says these "should not be used in production nor retained in scripts, or only as
# workaround". Each with what it does there. Found on a node without the inventory asking: a failure.
NCCL_DRIFT_VARS: dict[str, str] = {
    "NCCL_P2P_DISABLE": "disables the peer-to-peer (NVLink/PCIe) transport",
    "NCCL_P2P_LEVEL": "limits the GPU distance at which the P2P transport is used",
    "NCCL_P2P_DIRECT_DISABLE": "stops P2P direct access between GPUs of one process",
    "NCCL_SHM_DISABLE": "disables the shared-memory transport",
    "NCCL_IB_DISABLE": "disables the InfiniBand/RoCE transport (falls back to sockets)",
    "NCCL_NET": "forces a network plugin or transport (e.g. Socket)",
    "NCCL_NET_GDR_LEVEL": "limits GPUDirect RDMA between NIC and GPU (0/LOC: never)",
    "NCCL_NET_GDR_READ": "changes GPUDirect RDMA reads on send",
    "NCCL_NVLS_ENABLE": "switches NVLink SHARP (NVLS) on or off",
    "NCCL_COLLNET_ENABLE": "switches CollNet (in-network reduction) on or off",
    "NCCL_NVB_DISABLE": "disables NVLink-bridged paths through an intermediate GPU",
    "NCCL_PXN_DISABLE": "disables PXN (NVLink to the NIC's GPU before the network)",
    "NCCL_CUMEM_ENABLE": "switches cuMem-based buffers",
    "NCCL_DMABUF_ENABLE": "switches DMA-BUF for GPUDirect RDMA",
    "NCCL_ALGO": "forces the collective algorithms",
    "NCCL_PROTO": "forces the protocols",
    "NCCL_MIN_NCHANNELS": "changes the number of channels",
    "NCCL_MAX_NCHANNELS": "changes the number of channels",
    "NCCL_MIN_CTAS": "changes the number of CTAs",
    "NCCL_MAX_CTAS": "changes the number of CTAs",
    "NCCL_NTHREADS": "changes the threads per CUDA block",
    "NCCL_BUFFSIZE": "changes the buffer size between GPUs",
    "NCCL_TOPO_FILE": "replaces the detected topology with a file",
    "NCCL_GRAPH_FILE": "replaces the searched channel graphs with a file",
    "NCCL_CROSS_NIC": "changes which NICs rings and trees may use",
    "NCCL_LAUNCH_MODE": "changes how kernels are launched",
}
# Value-sensitive entries: a setting here only counts when its value matches (the variable's default is
# harmless), e.g. NCCL_NET_GDR_LEVEL=0 or LOC turns GPUDirect RDMA off altogether.
_NCCL_DISABLING_VALUE = {"NCCL_NET_GDR_LEVEL": re.compile(r"^(0|LOC)$", re.I)}


def requested_nccl_env(host_vars: Mapping[str, Any]) -> dict[str, str]:
    """The NCCL variables the inventory asks for: ``nccl_env`` plus ``nccl_socket_ifname`` / ``nccl_ib_hca``
    (as :func:`gpuaccept.runner.multinode.nccl_environment` passes them to the ranks)."""
    env = {str(k): str(v) for k, v in (host_vars.get("nccl_env") or {}).items()}
    for var, name in (("nccl_socket_ifname", "NCCL_SOCKET_IFNAME"), ("nccl_ib_hca", "NCCL_IB_HCA")):
        if host_vars.get(var) not in (None, ""):
            env.setdefault(name, str(host_vars[var]))
    return env


def _where(entry: dict) -> str:
    src = entry.get("source") or "?"
    path = entry.get("path")
    line = entry.get("line")
    return f"{src} {path}:{line}" if path and line else f"{src} {path}" if path else src


def nccl_env(doc: dict, requested: Mapping[str, str]) -> list[Finding]:
    """NCCL variables the ranks would see on this node, against what the inventory asks for.

    ``doc``: an ``nccl_env`` probe document: ``effective`` maps each NCCL variable a rank would get to
    ``{"value", "source", "path", "line"}`` (source: ``environment``, ``login shell``, ``NCCL_CONF_FILE``,
    ``~/.nccl.conf``, ``/etc/nccl.conf``), ``found`` lists every setting seen in every source (profile files
    included) and ``errors`` the sources that could not be read. ``requested``: :func:`requested_nccl_env`.

    A variable of :data:`NCCL_DRIFT_VARS` that the inventory does not ask for fails, naming variable, value and
    where it came from. A drift variable in a profile file or a login shell that the ranks' environment does not
    carry also fails: jobs started from a login shell (sbatch, mpirun) get it. The inventory's value wins for the
    ranks gpuaccept starts (NCCL reads its files only for variables not in the environment: NCCL
    ``src/misc/param.cc``, ``setenv(..., 0)``), so a node setting that the inventory overrides is recorded.
    Other NCCL variables are recorded.
    """
    out: list[Finding] = []
    effective = doc.get("effective") or {}
    seen_names = set()
    for name in sorted(effective):
        e = dict(effective[name] or {})
        seen_names.add(name)
        value = e.get("value")
        if e.get("source") == "environment":  # name the profile file that put it there, when one did
            files = [f for f in doc.get("found") or [] if f.get("name") == name and f.get("value") == value
                     and f.get("source") == "profile file"]
            if files:
                e["source"] = f"environment (set in {_where(files[0])})"
        if name in requested:
            note = ("as the inventory asks" if str(requested[name]) == str(value) else
                    f"the inventory sets {requested[name]!r}, which the ranks get instead")
            out.append(Finding(f"nccl_env {name}", value, extra={"from": _where(e), "note": note}))
            continue
        pat = _NCCL_DISABLING_VALUE.get(name)
        drift = name in NCCL_DRIFT_VARS and (pat is None or pat.match(str(value).strip()))
        out.append(Finding(f"nccl_env {name}", value, extra={"from": _where(e)}, failure=(
            f"{name}={value} from {_where(e)} ({NCCL_DRIFT_VARS[name]}); the inventory does not ask for it "
            f"(nccl_env)" if drift else None)))
    for e in doc.get("found") or []:
        name = e.get("name")
        if not name or name in seen_names or name in requested:
            continue
        pat = _NCCL_DISABLING_VALUE.get(name)
        if name in NCCL_DRIFT_VARS and (pat is None or pat.match(str(e.get("value")).strip())):
            seen_names.add(name)
            out.append(Finding(f"nccl_env {name}", e.get("value"), extra={"from": _where(e)}, failure=(
                f"{name}={e.get('value')} set in {_where(e)} ({NCCL_DRIFT_VARS[name]}): login shells and jobs "
                f"started from them get it; the inventory does not ask for it (nccl_env)")))
    for err in doc.get("errors") or []:
        out.append(Finding("nccl_env_source_unreadable", err.get("path"), extra={"error": err.get("error")}))
    out.append(Finding("nccl_env_variables", len(effective), "variables"))
    return out


# ---------------------------------------------------------------------------------------------------------
# GPU attribution by PCI bus id

def nvml_gpu_for(figure_gpu: dict, nvml_gpus: list[dict]) -> dict | None:
    """The NVML (``gpu_inventory``) GPU a torch probe's per-GPU figure belongs to, matched by PCI bus id.

    A torch index is CUDA's device order (``CUDA_DEVICE_ORDER``, default FASTEST_FIRST, and
    ``CUDA_VISIBLE_DEVICES``), which need not be NVML's; the bus id is the same in both. None when the figure
    has no bus id or no NVML GPU has it (never a guess by index)."""
    key = bus_key(figure_gpu.get("pci_bus_id"))
    if key is None:
        return None
    return next((g for g in nvml_gpus if bus_key(g.get("pci_bus_id")) == key), None)

