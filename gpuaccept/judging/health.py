"""Health judgments on NVML readings (pure functions, no I/O).

Each function takes one GPU's document from the ``gpu_inventory`` probe (or the ``pcie_link`` probe) and the
node's :class:`~gpuaccept.config.thresholds.SkuSpec`, and returns :class:`Finding` records: a figure to record, its
limit if it is judged, and a failure message when the GPU is not healthy. The suites turn findings into
verdicts; the tests feed real captures (and captures altered the way sick GPUs read) straight in.

Readings arrive typed (gpuaccept.judging.readings: a value or an ``NvmlError``; the suites' ``gpus`` fixture types
them once). A reading NVML could not take is never read as healthy: it fails in NVML's own words when the SKU
file lists the field under ``expect.required_nvml``, and is recorded as unreadable otherwise. A GPU NVML has
no handle for fails every per-GPU judgment as "no NVML handle (GPU is lost)".
Sources: NVML API reference (nvmlDeviceGetRemappedRows, nvmlDeviceGetTotalEccErrors,
nvmlDeviceGetGpuFabricInfoV), NVIDIA "GPU Memory Error Management" (row remapping: pending means a reset is
needed to apply a remap, failure means the GPU should be replaced).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuaccept.causes import Cause
from gpuaccept.judging import gpucount
from gpuaccept.judging.compute import LOAD_INDEPENDENT_REASONS, clock_reasons
from gpuaccept.judging.shape import gpu_fabric
from gpuaccept.judging.readings import (bus_key, error_text, handle_cause, is_error, is_lost, lost_reason, number,
                                        present, unreadable_cause)
from gpuaccept.config.thresholds import Limit, SkuSpec


@dataclass(frozen=True)
class Finding:
    """A figure (``check``, ``value``, ``unit``), its ``limit`` when judged, and ``failure`` when unhealthy;
    ``error``: why the GPU cannot be judged now though nothing is proven wrong with it (busy: another
    process holds it), an ERROR of the test, never a failure; ``context``: what the figure is (e.g. which GPU
    pair), said in parentheses in a judged figure's failure line."""

    check: str
    value: Any = None
    unit: str = ""
    limit: Limit | None = None
    failure: str | None = None
    extra: dict | None = None
    context: str | None = None
    error: str | None = None
    #: the cause of ``failure`` or ``error`` when the judge knows it better than the check's row of the action
    #: table (gpuaccept.causes.Cause)
    cause: Cause | None = None


def nvml_error(v) -> str | None:
    """The NVML error text of a reading the probe could not take (typed or placeholder), else None."""
    return error_text(v)


def _required(sku: SkuSpec, field: str) -> bool:
    return field in (sku.expect.get("required_nvml") or [])


def _unreadable(sku: SkuSpec, field: str, check: str, v, gpu: int | None = None) -> Finding:
    """A reading NVML refused: a failure in NVML's words when the SKU file requires ``field``
    (``expect.required_nvml``), else recorded as unreadable. The failure carries the cause of the error itself
    (gpuaccept.judging.readings.unreadable_cause: configuration for "Insufficient Permissions" and "Not
    Supported", hardware only for an error that is a reading of the part, such as "GPU is lost"; else
    unverified), so that the check's own row of the action table (meant for a value over its limit) never
    answers for a reading that was not taken. ``gpu``: the NVML index, for the cause."""
    why = error_text(v) or "not in the probe document"
    cause = unreadable_cause(v, check, gpu, field)
    if cause.kind == "nvml_gpu_lost":  # NVML_ERROR_GPU_IS_LOST on any field: the GPU fell off the bus mid-reading
        return Finding(check, v, failure=f"{check} unreadable: NVML says the GPU is lost ({why})", cause=cause)
    if _required(sku, field):
        return Finding(check, v, failure=f"{check} unreadable (NVML: {why}); the SKU file requires {field}",
                       cause=cause)
    return Finding(check, v, extra={"note": f"unreadable (NVML: {why}); {field} not required for {sku.sku}"})


def _group(gpu: dict, key: str) -> dict:
    """``gpu[key]`` as a dict of readings; when the whole group is an NVML error, every field reads as it."""
    v = gpu.get(key)
    if isinstance(v, dict):
        return v
    return _Every(v)


class _Every(dict):
    """A read-only mapping whose every key gives the same reading (an error, or None when missing)."""

    def __init__(self, value):
        super().__init__()
        self.value = value

    def get(self, key, default=None):
        return self.value

    def __contains__(self, key):
        return True


def lost(gpu: dict) -> list[Finding]:
    """A GPU NVML listed but has no handle for: one failure, ``"no NVML handle (<NVML's words>)"``, whose cause is
    gpuaccept.judging.readings.handle_cause: hardware for "GPU is lost" and the like, configuration for
    "Insufficient Permissions" (the probes' user cannot open the device), unverified otherwise."""
    return [Finding("nvml_handle", gpu.get("nvml_error") or gpu.get("handle"),
                    failure=f"no NVML handle ({lost_reason(gpu)})", cause=handle_cause(gpu))]


def ecc(gpu: dict, sku: SkuSpec) -> list[Finding]:
    """ECC enabled where the SKU has it; uncorrectable ECC counts against the SKU's max: the volatile count
    always, the aggregate (lifetime) count only on parts without row remapping (where it is recorded).

    ``gpu``: one GPU of the (typed) gpu_inventory document, keys ``ecc.mode_current``, ``ecc.mode_pending``,
    ``ecc.uncorrected_volatile``, ``ecc.uncorrected_aggregate``, ``ecc.corrected_aggregate`` (counts, from
    nvmlDeviceGetEccMode / nvmlDeviceGetTotalEccErrors). Raises ThresholdError when the SKU file has no
    limit for ``ecc_uncorrected_*``.
    """
    if is_lost(gpu):
        return lost(gpu)
    e = _group(gpu, "ecc")
    out: list[Finding] = []
    if sku.expect.get("ecc"):
        mode = e.get("mode_current")
        if not isinstance(mode, bool):
            out.append(_unreadable(sku, "ecc", "ecc_mode", mode, gpu.get("index")))
        else:
            out.append(Finding("ecc_mode", mode, failure=None if mode else "ECC is disabled"))
            if e.get("mode_pending") is False and mode:
                out.append(Finding("ecc_mode_pending", False, failure="ECC will be disabled at the next reset"))
    for key in ("uncorrected_volatile", "uncorrected_aggregate"):
        val = e.get(key)
        check = f"ecc_{key}"
        if number(val) is None:
            out.append(_unreadable(sku, "ecc", check, val, gpu.get("index")))
        elif key == "uncorrected_aggregate" and sku.expect.get("row_remapping"):
            # A lifetime count: it never resets, so judging it would fail the node at every run for an error
            # that row remapping already dealt with. On row-remapping parts the actionable state is judged by
            # row_remapping() (pending: reset; failure: replace; uncorrectable remaps over the limit) and the
            # volatile count here (NVIDIA GPU Memory Error Management, "Row Remapping"). Measured: a healthy
            # H200 with 0 remapped rows reads an aggregate of 1 (2026-11-30).
            out.append(Finding(check, val, "errors", extra={
                "note": "lifetime count, recorded: on row-remapping parts the remap state and the volatile "
                        "count are judged", "limit_not_applied": sku.limit(check).describe()}))
        else:
            out.append(Finding(check, val, "errors", sku.limit(check)))
    out.append(Finding("ecc_corrected_aggregate", e.get("corrected_aggregate"), "errors"))
    return out


def row_remapping(gpu: dict, sku: SkuSpec) -> list[Finding]:
    """Row remapping (Ampere and later): pending → "reset needed", failure → "replace the GPU", uncorrectable
    remaps judged against the SKU's max, correctable ones recorded. Retired pages on older SKUs.

    ``gpu``: keys ``remapped_rows.{correctable,uncorrectable,pending,failure}`` (nvmlDeviceGetRemappedRows)
    or ``retired_pages.{double_bit,pending}`` (nvmlDeviceGetRetiredPages*)."""
    if is_lost(gpu):
        return lost(gpu)
    if not sku.expect.get("row_remapping", False):
        pages = _group(gpu, "retired_pages")
        dbl = pages.get("double_bit")
        out = [_unreadable(sku, "retired_pages", "retired_pages_double_bit", dbl, gpu.get("index"))
               if number(dbl) is None else
               Finding("retired_pages_double_bit", dbl, "pages", sku.checks.get("retired_pages_double_bit"))]
        if pages.get("pending") is True:
            out.append(Finding("retired_pages_pending", True, failure="page retirement pending: reset needed"))
        return out
    rows = _group(gpu, "remapped_rows")
    if not isinstance(rows.get("pending"), bool):
        return [_unreadable(sku, "remapped_rows", "remapped_rows", rows.get("pending"), gpu.get("index"))]
    out = [Finding("remapped_rows_correctable", rows.get("correctable"), "rows"),
           Finding("remapped_rows_uncorrectable", rows.get("uncorrectable"), "rows",
                   sku.limit("remapped_rows_uncorrectable"))]
    if rows.get("pending"):
        out.append(Finding("remap_pending", True, failure="row remap pending: reset needed"))
    if rows.get("failure") is True:
        out.append(Finding("remap_failure", True, failure="row remap failure: replace the GPU"))
    return out


def _inventory_gpu(link: dict, inventory: list | None) -> dict:
    """The gpu_inventory GPU of a pcie_link entry: by PCI bus id where both have one, else by index ({} if none)."""
    key = bus_key(link.get("pci_bus_id"))
    gpus = [g for g in inventory or [] if isinstance(g, dict) and not is_lost(g)]
    hit = next((g for g in gpus if key is not None and bus_key(g.get("pci_bus_id")) == key), None)
    return hit or next((g for g in gpus if key is None and g.get("index") == link.get("index")), None) or {}


def platform_capped(gen, link_max, device_max) -> bool:
    """True when the PCIe link runs at the highest generation the slot and device together allow (``link_max``:
    nvmlDeviceGetMaxPcieLinkGeneration, nvidia-smi "Max") and that is below the device's own highest
    (``device_max``: nvmlDeviceGetGpuMaxPcieLinkGeneration, nvidia-smi "Device Max"): the platform (BIOS setting,
    slot, riser, retimer) caps the link, the card trains as high as it is let. NVML API reference; the fields as
    gpuaccept/probes/gpu_inventory.py writes them. A link below its own ``link_max`` is not capped (a seating or
    card fault). Any unreadable input: False (nothing shown)."""
    g, lm, dm = number(gen), number(link_max), number(device_max)
    return None not in (g, lm, dm) and lm < dm and g == lm


def _pcie_not_loaded(link: dict) -> list[Finding]:
    """The pcie_gen and pcie_width ERRORs "not measured" of a pcie_link GPU the probe put no traffic on (its
    ``"loaded": false`` with ``not_loaded``, gpuaccept/probes/pcie_link.py: no torch device is that GPU), or []
    when the GPU was loaded (or the document predates the field), or when its idle link already read its
    maximum (a full reading: judged as read). An idle link downshifts, so its figure is never judged. Cause:
    configuration ``cuda_visible_devices`` (fix-config, evidence ``value``) where the probe's
    CUDA_VISIBLE_DEVICES hid the GPU (``not_loaded`` "cuda_hidden" with the variable set), else tool ``gap``
    (rerun): never hardware."""
    kind = link.get("not_loaded")
    if link.get("loaded") is not False or not kind:
        return []
    if number(link.get("gen")) is not None and number(link.get("width")) is not None:
        return []
    idx, visible = link.get("index"), link.get("cuda_visible_devices")
    why = link.get("why") if isinstance(link.get("why"), str) else str(kind)
    out = []
    for key, check in (("gen", "pcie_gen"), ("width", "pcie_width")):
        if kind == "cuda_hidden" and visible is not None:
            cause = Cause("configuration", "cuda_visible_devices", check=check, gpu=idx,
                          evidence={"value": str(visible)})
        else:
            cause = Cause("tool", "gap", check=check, gpu=idx, evidence={"not_loaded": str(kind)})
        out.append(Finding(check, None, extra={"loaded": False, "not_loaded": kind, "idle": link.get(f"{key}_idle"),
                                               "max": link.get(f"{key}_max")},
                           error=f"PCIe {key} not measured: the probe put no traffic on this GPU ({why}); an idle "
                                 f"link downshifts, so its idle reading is not judged", cause=cause))
    return out


def pcie_link(link: dict, sku: SkuSpec, inventory: list | None = None) -> list[Finding]:
    """PCIe gen and width (read under load by the pcie_link probe) against the SKU's expected link.

    ``link``: one GPU of the pcie_link document (``gen``, ``width``, ``gen_max``, ``width_max``, ``*_idle``);
    ``inventory``: the gpu_inventory GPUs (typed), whose ``pcie.gen_max`` / ``pcie.gen_device_max`` tell a link the
    platform caps (:func:`platform_capped`): a generation below the SKU's then fails as configuration
    (``pcie_platform_cap``: check the slot and BIOS), not as a card to reseat or replace. An unreadable gen or
    width fails with the cause of NVML's error (gpuaccept.judging.readings.unreadable_cause), never hardware
    unless the error itself is a reading of the part. A GPU the probe did not load (``"loaded": false`` with
    ``not_loaded``: hidden from CUDA) is not measured (:func:`_pcie_not_loaded`), never judged on its idle link."""
    unloaded = _pcie_not_loaded(link)
    if unloaded:
        return unloaded
    out = []
    pcie = _inventory_gpu(link, inventory).get("pcie")
    pcie = pcie if isinstance(pcie, dict) else {}
    idx = link.get("index")
    for key, check in (("gen", "pcie_gen"), ("width", "pcie_width")):
        val = link.get(key)
        extra = {"max": link.get(f"{key}_max"), "idle": link.get(f"{key}_idle")}
        if number(val) is None:
            out.append(Finding(check, val, failure=f"PCIe {key} unreadable under load "
                                                   f"(NVML: {error_text(val) or 'not in the probe document'})",
                               cause=unreadable_cause(val, check, idx, f"pcie.{key}")))
            continue
        lim = sku.checks.get(check)  # a SKU without a PCIe host link (GH200: NVLink-C2C) sets none
        if not lim:
            out.append(Finding(check, val, extra={**extra, "note": f"recorded, not judged: {sku.sku} sets no "
                                                                    f"{check} limit"}))
            continue
        link_max = link.get("gen_max") if number(link.get("gen_max")) is not None else pcie.get("gen_max")
        device_max = pcie.get("gen_device_max")
        if key == "gen" and lim.direction == "min" and val < lim.bound and platform_capped(val, link_max,
                                                                                          device_max):
            ev = {"gen": val, "gen_max": link_max, "gen_device_max": device_max, "sku_gen": lim.bound}
            out.append(Finding(check, val, extra={**extra, "device_max": device_max, "limit": lim.describe()},
                               failure=f"PCIe gen {val} below {lim.describe()}: the platform caps the link at Gen"
                                       f"{link_max} (the GPU supports Gen{device_max}, and trains as high as the "
                                       f"slot lets it): check the slot, riser and BIOS PCIe setting",
                               cause=Cause("configuration", "pcie_platform_cap", check=check, gpu=idx, evidence=ev)))
            continue
        out.append(Finding(check, val, limit=lim, extra=extra))
    return out


def temperature(gpu: dict, sku: SkuSpec) -> list[Finding]:
    """GPU temperature (``temp_c``, nvmlDeviceGetTemperature, C) against the SKU's ``temp_c`` max; an
    unreadable temperature is recorded as such (temperature is not an ``expect.required_nvml`` field unless
    the SKU file lists ``temp_c`` there). Raises ThresholdError when the SKU file has no ``temp_c``."""
    if is_lost(gpu):
        return lost(gpu)
    t = gpu.get("temp_c")
    if number(t) is None:
        return [_unreadable(sku, "temp_c", "temp_c", t, gpu.get("index"))]
    busy = busy_cause(gpu)
    if busy:  # another process's load heats the GPU: its temperature says nothing of the card (preflight: busy)
        return [Finding("temp_c", t, "C", extra={"note": f"not judged: {busy}"})]
    return [Finding("temp_c", t, "C", sku.limit("temp_c"))]


def process_list(procs: list) -> str:
    """``"pid 4711 (python3), pid 4712 (?)"`` of gpu_inventory's ``compute_processes``."""
    return ", ".join(f"pid {p.get('pid')} ({p.get('name') or '?'})" for p in procs)


def busy_cause(gpu: dict) -> str | None:
    """Why the GPU is busy, or None: compute processes on it (nvmlDeviceGetComputeRunningProcesses) while the
    suite measures (one host's probes never run at once, so any is foreign), named by pid and name; under
    compute mode Exclusive_Process such a process also keeps every probe off the GPU."""
    procs = gpu.get("compute_processes")
    if not isinstance(procs, list) or not procs:
        return None
    mode = gpu.get("compute_mode")
    held = (f" in compute mode {mode}: no other process can create a context"
            if isinstance(mode, str) and mode.startswith("Exclusive") else "")
    return f"busy: {process_list(procs)} hold{'s' if len(procs) == 1 else ''} a context on the GPU{held}"


def foreign_processes(gpu: dict) -> list[Finding]:
    """Compute processes on the GPU: a GPU in use by someone else is busy (:func:`busy_cause`), an ERROR of
    the test naming them, never a failing GPU; an unreadable list is recorded."""
    procs = gpu.get("compute_processes")
    if not isinstance(procs, list):
        return [Finding("compute_processes", procs, extra={"note": f"unreadable (NVML: {error_text(procs)})"})]
    return [Finding("compute_processes", len(procs), "processes", error=busy_cause(gpu),
                    cause=Cause("contention", "busy", gpu=gpu.get("index"),
                                evidence={"pids": [p.get("pid") for p in procs if isinstance(p, dict)][:16]}))]


def compute_mode(gpu: dict) -> list[Finding]:
    """Compute mode (nvmlDeviceGetComputeMode): ``Prohibited`` lets no process create a CUDA context, so every
    probe fails on the GPU: a failure (``nvidia-smi -c DEFAULT`` restores it); ``Exclusive_Process`` and
    ``Exclusive_Thread`` are recorded (with a foreign context they make the GPU busy, :func:`busy_cause`)."""
    mode = gpu.get("compute_mode")
    if not isinstance(mode, str):
        return [Finding("compute_mode", mode, extra={"note": f"unreadable (NVML: {error_text(mode)})"})]
    return [Finding("compute_mode", mode, failure=(
        "compute mode Prohibited: no process can create a CUDA context on this GPU (restore with nvidia-smi "
        "-c DEFAULT)") if mode == "Prohibited" else None)]


#: NVML's text of NVML_ERROR_UNKNOWN (nvmlErrorString), what a GPU whose GSP firmware stopped answering gives
UNKNOWN_ERROR = "Unknown Error"


def unknown_error_fields(gpu: dict, prefix: str = "") -> list[str]:
    """The fields of one GPU's document that NVML answered "Unknown Error" (dotted names, document order)."""
    out = []
    for k, v in gpu.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and not is_error(v):
            out += unknown_error_fields(v, name + ".")
        elif UNKNOWN_ERROR.lower() in str(error_text(v) or "").lower():
            out.append(name)
    return out


def telemetry_errors(gpu: dict) -> list[Finding]:
    """A GPU whose readings answer NVML "Unknown Error" fails, naming the fields: its firmware (GSP) no longer
    answers the driver (nvidia-smi shows ERR!), and a GPU reset is the usual remedy (NVIDIA GPU debug
    guidelines: an unresponsive GPU is reset, then drained if it recurs). Other unreadable fields are judged
    where they are read."""
    if is_lost(gpu):
        return []
    fields = unknown_error_fields(gpu)
    if not fields:
        return []
    return [Finding("nvml_unknown_error_fields", len(fields), "fields", extra={"fields": fields},
                    failure=f"NVML answers \"{UNKNOWN_ERROR}\" for {len(fields)} reading(s): "
                            f"{', '.join(fields[:12])}{', ...' if len(fields) > 12 else ''}: the GPU no longer "
                            f"answers the driver (GSP firmware; nvidia-smi shows ERR!); a GPU reset is the usual "
                            f"remedy")]


def idle_clock_events(gpu: dict) -> list[Finding]:
    """Hardware clock slowdowns active while the GPU idles (``clocks_event_reasons``, the
    nvmlDeviceGetCurrentClocksEventReasons mask read by gpu_inventory, no load running): HW slowdown, HW
    thermal slowdown or HW power brake (gpuaccept.judging.compute.CLOCK_REASONS_FAIL) asserted on an idle card means
    an overheating card, a failing power supply or an external brake signal; every later figure of the card
    is throttled. Software reasons (power cap, SW thermal, sync boost) are recorded; an unreadable mask is
    recorded with NVML's words (the compute layer reads the mask again under load)."""
    mask = gpu.get("clocks_event_reasons")
    if number(mask) is None:
        return [Finding("idle_clocks_event_reasons", mask,
                        extra={"note": f"unreadable (NVML: {error_text(mask) or 'not in the probe document'})"})]
    failing, seen = clock_reasons(mask)
    busy = busy_cause(gpu)
    if busy:  # not idle: another process's load (preflight: busy) heats it and draws power; only the brake stands
        load_made = [r for r in failing if r not in LOAD_INDEPENDENT_REASONS]
        failing = [r for r in failing if r in LOAD_INDEPENDENT_REASONS]
        seen = seen + [f"{r} (not judged: {busy})" for r in load_made]
    when = f"while {busy}" if busy else "while idle"
    return [Finding("idle_clocks_event_reasons", f"0x{int(mask):x}", extra={"active": failing + seen} if failing
                    or seen else None, failure=(f"{', '.join(failing)} active {when} (clocks event reasons "
                                                f"0x{int(mask):x}): the GPU is throttled "
                                                f"{'by a signal no process asserts' if busy else 'before any load'}")
                    if failing else None)]


def preflight(gpu: dict, sku: SkuSpec) -> list[Finding]:
    """No foreign processes on the GPU (busy: an error), compute mode not Prohibited, persistence mode on, MIG
    mode as the SKU expects, no hardware clock slowdown while idle (:func:`idle_clock_events`)."""
    if is_lost(gpu):
        return lost(gpu)
    out = foreign_processes(gpu) + compute_mode(gpu) + idle_clock_events(gpu)
    pm = gpu.get("persistence_mode")
    want_pm = sku.expect.get("persistence_mode", True)
    out.append(Finding("persistence_mode", pm, failure="persistence mode is off" if pm is False and want_pm else None)
               if isinstance(pm, bool) else _unreadable(sku, "persistence_mode", "persistence_mode", pm,
                                                            gpu.get("index")))
    raw = gpu.get("mig_mode")
    mig = raw.get("current") if isinstance(raw, dict) else raw
    want = bool(sku.expect.get("mig_mode", False))
    if isinstance(mig, bool):
        out.append(Finding("mig_mode", mig, failure=f"MIG mode is {'on' if mig else 'off'}, the SKU file expects "
                                                    f"{'on' if want else 'off'}" if mig != want else None))
    elif want:
        out.append(Finding("mig_mode", mig, failure="the SKU file expects MIG mode on, and NVML cannot read it"))
    else:  # "Not Supported" on GPUs without MIG: recorded in NVML's words
        out.append(_unreadable(sku, "mig_mode", "mig_mode", mig, gpu.get("index")))
    return out


def fabric(gpu: dict, sku: SkuSpec) -> list[Finding]:
    """NVSwitch fabric registration (NVML GPU fabric info): state COMPLETED and status Success, where the
    node's shape has a fabric (gpuaccept.judging.shape.gpu_fabric): NOT_SUPPORTED on a GPU without NVLink is
    "no fabric on this node", recorded with why; any other state fails."""
    if is_lost(gpu):
        return lost(gpu)
    fab = gpu.get("fabric")
    if not isinstance(fab, dict) or is_error(fab):
        return [_unreadable(sku, "fabric", "fabric_state", fab, gpu.get("index"))]
    state, why = gpu_fabric(gpu, sku)
    if state == "none":
        return [Finding("fabric_state", fab.get("state"), extra={"status": fab.get("status"), "note": why})]
    return [Finding("fabric_state", fab.get("state"), extra={"status": fab.get("status")},
                    failure=why if state == "not ready" else None,
                    cause=fabric_cause(fab) if state == "not ready" else None)]


#: NVML fabric states (nvmlGpuFabricState_t, NVML API reference) and the class of a GPU found in each, with the
#: cause kind of gpuaccept/data/actions.yaml: registration not started is Fabric Manager not running on the node
#: (the NVIDIA Fabric Manager User Guide: FM must run before CUDA jobs on NVSwitch systems); in progress, FM has
#: just started; NOT_SUPPORTED where NVLinks answer (gpuaccept.judging.shape.gpu_fabric), no registration either.
FABRIC_STATE_CAUSES = {"NOT_STARTED": ("configuration", "fabric_not_started"),
                       "NOT_SUPPORTED": ("configuration", "fabric_not_started"),
                       "IN_PROGRESS": ("unverified", "fabric_in_progress")}


def fabric_cause(fab: dict) -> Cause:
    """The cause of a fabric that is not ready (``fab``: gpu_inventory's ``fabric`` reading, ``{"state",
    "status"}``): :data:`FABRIC_STATE_CAUSES` by state; COMPLETED with a status other than Success, a registration
    that failed, is hardware (``fabric_registration_failed``: restart Fabric Manager, reset the GPUs); a state NVML
    does not document is unverified."""
    state, status = str(fab.get("state")).upper(), str(fab.get("status"))
    ev = {"state": str(fab.get("state")), "status": status}
    if state in FABRIC_STATE_CAUSES:
        cls, kind = FABRIC_STATE_CAUSES[state]
        return Cause(cls, kind, evidence=ev)
    if state == "COMPLETED":
        return Cause("hardware", "fabric_registration_failed", evidence=ev)
    return Cause("unverified", "fabric_state_unknown", evidence=ev)


def cuda_visible_devices(doc: dict) -> list[Finding]:
    """``CUDA_VISIBLE_DEVICES`` in the probes' environment on the node (gpu_inventory's
    ``cuda_visible_devices``, None when unset) that names fewer devices than NVML lists (lost GPUs not
    counted): an ERROR naming its value, since every CUDA probe then measures only the GPUs it leaves
    visible (CUDA reads the list up to its first invalid entry; an empty value hides every GPU)."""
    if "cuda_visible_devices" not in (doc or {}):
        return []
    v = doc.get("cuda_visible_devices")
    if v is None:
        return [Finding("cuda_visible_devices", "unset")]
    n = len(present(list(doc.get("gpus") or [])))
    entries = []
    for e in str(v).split(","):
        e = e.strip()
        if not e or e.startswith("-"):
            break  # CUDA stops at the first invalid entry (a negative index hides the rest)
        entries.append(e)
    if len(entries) >= n:
        return [Finding("cuda_visible_devices", v)]
    return [Finding("cuda_visible_devices", v, error=(
        f"CUDA_VISIBLE_DEVICES={v!r} in the node's environment hides {n - len(entries)} of {n} NVML GPU(s) "
        f"from CUDA: the CUDA tests measure only the GPUs it leaves visible (unset it for the probes' user)"),
        cause=Cause("configuration", "cuda_visible_devices", evidence={"value": str(v)}))]


def gpu_count(found, declared, doc: dict | None = None, xid_events: list | None = None,
              history_most: int | None = None, board: int | None = None) -> Finding:
    """GPUs NVML gave a handle for against the inventory's ``gpus_per_node`` (None: recorded only).

    ``found``: a count, or the gpu_inventory GPU list (lost GPUs do not count). A count that differs fails as
    ``"gpu_count N != gpus_per_node M: <why>"`` with the cause :func:`gpuaccept.judging.gpucount.explain` finds
    from ``doc`` (the gpu_inventory document: its PCI scan and GPU visibility), ``xid_events`` (the xid_events
    probe's events of the run's window, None: not read) and ``history_most`` (the most GPUs NVML listed on this
    host in an earlier run, None: unknown): hardware only with evidence of a lost or fallen-off GPU. ``board``: the
    most GPUs the SKU's board holds (its SKU file's ``expect.gpus_per_node``): a ``gpus_per_node`` above it is the
    inventory's mistake (configuration, ``gpu_count_over_board``), which no rerun or repair can meet."""
    n = len(present(found)) if isinstance(found, list) else int(found)
    if declared is None or int(declared) == n:
        return Finding("gpu_count", n, "GPUs")
    if board is not None and int(declared) > int(board) and n <= int(board):
        return Finding("gpu_count", n, "GPUs", failure=f"gpu_count {n} != gpus_per_node {declared}: gpus_per_node is "
                       f"more than this SKU's board holds ({board}): the inventory is wrong",
                       cause=Cause("configuration", "gpu_count_over_board",
                                   evidence={"declared": int(declared), "board": int(board), "found": n}))
    if isinstance(found, list):
        why = gpucount.explain(found, int(declared), doc, xid_events, history_most)
    else:  # a bare count: no bus ids to compare, judged as a capture without the scan
        why = gpucount.explain([{"index": i} for i in range(n)], int(declared), None, xid_events, history_most)
    return Finding("gpu_count", n, "GPUs", failure=f"gpu_count {n} != gpus_per_node {declared}: {why.text}",
                   extra={"groups": [{"kind": g.kind, "class": g.cls, "bus_ids": list(g.bus_ids)}
                                     for g in why.groups]}, cause=why.cause)


def driver_versions(doc: dict) -> list[Finding]:
    """The NVML library's driver version against the loaded kernel module's (a mismatch breaks CUDA)."""
    lib, kmod = doc.get("driver"), doc.get("kernel_driver_version")
    bad = isinstance(lib, str) and isinstance(kmod, str) and lib != kmod
    return [Finding("nvml_driver_version", lib), Finding(
        "kernel_driver_version", kmod,
        failure=f"NVML library / kernel driver mismatch: library {lib}, kernel module {kmod} (reboot or reload)"
        if bad else None)]
