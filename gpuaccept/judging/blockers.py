"""Blocked, not broken: which GPUs (or the whole host) a lower-layer check shows cannot be measured fairly.

Pure function of the gpu_inventory document (and the node's SKU). A foreign compute process on a GPU, a GPU
in another MIG mode than its SKU file expects (CUDA then sees a MIG slice of it, or none of it), a GPU
whose NVSwitch fabric registration is not complete, a GPU NVML has no handle for, and an NVML library that
differs from the loaded kernel module all make the memory, compute, NVLink, NCCL and GPUDirect figures of
that GPU (or host) untrustworthy: a card shared with someone else's matmul reads slow without being slow.
Tests of those layers are then reported as errors "blocked by <check>: <cause>" with their figures kept,
never as a hardware failure of the card (see :func:`gpuaccept.judging.recorder.outcome`). The health layer's own
tests (``preflight``, ``fabric``, ``gpu_inventory``, ``driver_versions``) report the cause itself and are
not blocked.

Each blocker is derived from the health judgment that reports it (gpuaccept/judging/health.py), so the rule lives
in one place. A blocker names the layers it blocks: a fabric present but not ready blocks only the layers that
need it (gpuaccept.judging.shape.FABRIC_LAYERS: NVLink, NCCL), never HBM or TFLOP/s; the others block every
dependent layer. A node whose shape has no fabric (gpuaccept.judging.shape) is not blocked by it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpuaccept.causes import Cause
from gpuaccept.errors import DriverUnresponsive, NodeError, NvmlUnusable, PackageMissing

from gpuaccept.judging import health
from gpuaccept.judging.readings import handle_cause, is_error, is_lost, lost_reason, typed
from gpuaccept.judging.shape import FABRIC_LAYERS, fabric_expected
from gpuaccept.config.thresholds import SkuSpec

# Layers whose figures depend on the health preconditions (pytest markers / suites/test_<layer>.py).
DEPENDENT_LAYERS = frozenset({"memory", "compute", "nvlink", "nccl", "gpudirect", "burnin"})


@dataclass(frozen=True)
class Blocker:
    """``check``: the health test that shows the cause (its name without ``test_``), or ``"conditions"`` for a
    measurement another process disturbed (gpuaccept.judging.conditions); ``cause``: one line; ``gpu``: the
    NVML index of the GPU it blocks, None for the whole host; ``layers``: the layers it blocks; ``cls``: the class of
    its cause (gpuaccept.causes): a foreign process is contention, a lost GPU or fabric hardware, a mode or driver
    mismatch configuration, a GPU without a handle the class of its handle's error
    (gpuaccept.judging.readings.handle_cause: a denied device is configuration); ``kind``: ``blocked``, or ``disturbed`` / ``host_busy`` for a measurement another
    process disturbed; ``evidence``: JSON-safe facts (pids, shares)."""

    check: str
    cause: str
    gpu: int | None = None
    layers: frozenset = DEPENDENT_LAYERS
    cls: str = "contention"
    kind: str = "blocked"
    evidence: dict = field(default_factory=dict, compare=False, hash=False)

    def to_cause(self, host: str | None = None) -> Cause:
        """This blocker as the cause of the tests it blocks (filed under ``host``)."""
        return Cause(self.cls, self.kind, host, self.check, self.gpu, self.evidence)

    def message(self) -> str:
        """``"blocked by preflight: GPU 1: busy: pid 4242 (python3) holds a context on the GPU"``; a disturbed
        measurement reads as its cause alone (``"disturbed: pid 4711 (python3) used GPU 0 during ..."``)."""
        if self.check == "conditions":
            return self.cause
        where = f"GPU {self.gpu}: " if self.gpu is not None else ""
        return f"blocked by {self.check}: {where}{self.cause}"

    def applies(self, layer: str) -> bool:
        """True when this blocker blocks a test of ``layer``."""
        return layer in self.layers


def blockers(doc: dict, sku: SkuSpec | None = None, specs: dict[str, SkuSpec] | None = None) -> list[Blocker]:
    """Blockers of one host from its gpu_inventory document (raw or typed). Pure.

    ``sku``: the host's SkuSpec, or None when it is not known (then the fabric is not judged: whether a
    fabric is expected is a fact of the SKU file, ``expect.nvswitch``). ``specs``: every SKU file (name ->
    SkuSpec): with it, a GPU whose NVML identity is another SKU than ``sku`` (an inventory's ``gpu_sku`` naming
    H200 on an H100 node) blocks its figures (configuration): judged on the wrong SKU's limits they would read as a
    slow card. Unreadable readings do not block (the health tests report them); only states read as bad do.
    Returns [] for a document without NVML.
    """
    if not doc or not doc.get("nvml_available"):
        return []
    doc = typed(doc)
    out: list[Blocker] = []
    for f in health.driver_versions(doc):
        if f.failure:
            out.append(Blocker("driver_versions", f.failure, cls="configuration"))
    for g in doc.get("gpus") or []:
        idx = g.get("index")
        if is_lost(g):  # its class from the handle's error: lost (hardware), denied (configuration), else unverified
            why = handle_cause(g)
            out.append(Blocker("gpu_inventory", f"no NVML handle ({lost_reason(g)})", idx, cls=why.cls,
                               evidence={"handle": why.kind, **why.evidence}))
            continue
        busy = health.busy_cause(g)
        if busy:
            out.append(Blocker("preflight", busy, idx))
        for f in health.compute_mode(g) + health.telemetry_errors(g):
            if f.failure:
                out.append(Blocker("preflight", f.failure, idx, cls="configuration") if f.check == "compute_mode"
                           else Blocker("gpu_inventory", f.failure, idx, cls="hardware"))
        other = _other_sku(g, sku, specs)
        if other is not None:
            out.append(Blocker("gpu_sku", other, idx, cls="configuration", evidence={"expected": sku.sku}))
        if sku is not None:  # MIG mode other than the SKU file expects: a probe measures a slice, or nothing
            for f in health.preflight(g, sku):
                if f.check == "mig_mode" and f.failure:
                    out.append(Blocker("preflight", f.failure, idx, cls="configuration"))
        if sku is not None and sku.expect.get("nvswitch") and fabric_expected(g, sku):
            fab = g.get("fabric")
            if isinstance(fab, dict) and not is_error(fab):
                for f in health.fabric(g, sku):
                    if f.failure:  # its class is the state's (health.fabric_cause): FM not running is configuration
                        out.append(Blocker("fabric", f.failure, idx, FABRIC_LAYERS,
                                           cls=f.cause.cls if f.cause is not None else "hardware"))
    return out


def _other_sku(gpu: dict, sku: SkuSpec | None, specs: dict[str, SkuSpec] | None) -> str | None:
    """``"detected SKU h100-sxm5-80gb ('NVIDIA H100 80GB HBM3'), the run expects h200-sxm-141gb"`` when the GPU's NVML
    identity (gpuaccept.judging.sku.detect_gpu) is another SKU than ``sku``, else None (no SKU or files known, an
    identity no SKU file names: test_gpu_sku reports those)."""
    if sku is None or not specs:
        return None
    from gpuaccept.errors import ThresholdError
    from gpuaccept.judging.sku import detect_gpu
    try:
        seen = detect_gpu(specs, gpu)
    except ThresholdError:
        return None
    if seen.sku == sku.sku:
        return None
    return f"detected SKU {seen.sku} ('{gpu.get('name')}'), the run expects {sku.sku}: judged on its limits, its figures would read as a slow card"


# gpu_inventory reason codes (gpuaccept/probes/gpu_inventory.py:init_failure_reason) that mean "this node has
# no NVIDIA GPU to test" rather than "NVML is broken here".
NO_GPU_REASONS = frozenset({"no_driver", "driver_not_loaded", "no_gpu"})


def driver_present(doc: dict) -> bool:
    """True when the gpu_inventory document shows an NVIDIA kernel driver on the node (``driver_present``:
    /proc/driver/nvidia or /dev/nvidia0 exists; older documents: a kernel module version was read)."""
    return bool(doc.get("driver_present") or doc.get("kernel_driver_version"))


def readiness_problem(doc: dict, python: str, declared: bool = False) -> "NotReady | None":
    """Why a node whose NVML gave no GPU is not ready to be tested, as the error its GPU tests raise (its host
    filled in by :meth:`NotReady.error`), or None when it simply has no GPU.

    ``doc``: the gpu_inventory document with ``nvml_available`` false; ``python``: the interpreter the probes
    ran under; ``declared``: the inventory declares GPUs for the node. A library/driver version mismatch, no
    permission or another nvmlInit failure is NVML unusable (configuration); nvidia-ml-py missing for
    ``python`` is a missing package (configuration) when the node shows an NVIDIA driver or declares GPUs.
    "No driver" and "no GPU" are not: the host has no GPU to test (or, declared, the caller fails it). Pure.
    """
    if doc.get("nvml_available"):
        return None
    code = doc.get("reason_code")
    kmod = doc.get("kernel_driver_version") or "not loaded"
    lib = doc.get("nvml_library_version") or "unknown"
    if code == "no_pynvml":
        if driver_present(doc) or declared:
            seen = f"driver present (kernel module {kmod})" if driver_present(doc) else "GPUs declared"
            return NotReady(PackageMissing, f"{seen}, nvidia-ml-py (pynvml) missing for {python}: install it for that "
                            f"interpreter or set ansible_python_interpreter",
                            {"package": "nvidia-ml-py", "python": python, "driver_present": driver_present(doc)})
        return None
    if code in NO_GPU_REASONS or code is None:
        return None
    if code == "driver_unresponsive":  # a call past its deadline (gpuaccept/probes/_deadline.py): hardware
        stuck = doc.get("driver_unresponsive") or {}
        return NotReady(DriverUnresponsive, doc.get("reason") or "driver unresponsive",
                        {k: stuck.get(k) for k in ("gpu", "call", "seconds", "state", "unkillable")})
    return NotReady(NvmlUnusable, f"NVML cannot start: {doc.get('reason') or code} (NVML library {lib}, kernel "
                    f"module {kmod})", {"reason_code": code, "nvml_library_version": lib,
                                        "kernel_driver_version": kmod})


@dataclass(frozen=True)
class NotReady:
    """A node not ready to be tested: the error class to raise, its line and evidence."""

    kind: type
    line: str
    evidence: dict

    def error(self, host: str) -> NodeError:
        """The error for ``host``."""
        return self.kind(host, self.line, self.evidence)

    def __str__(self) -> str:
        return self.line


def declared_missing_cause(doc: dict, host: str | None = None, declared: int | None = None) -> Cause:
    """Why a node the inventory declares GPUs for shows none (pure). No driver, a driver not loaded, no
    nvidia-ml-py: ``declared_gpu_missing`` with the probe's reason code as its check, ``configuration``. The driver
    loaded and NVML answering with no GPU (``no_gpu``) is judged as a short count of ``declared`` GPUs (the
    inventory's gpus_per_node; None: one) against the node's PCI scan (gpuaccept.judging.gpucount.explain): GPUs
    excluded from the driver, bound to vfio-pci or hidden from the probes are configuration; GPUs bound to nvidia
    that NVML does not list are hardware; none on the bus, without evidence that they fell off, unverified. A
    document without a PCI scan (a capture from before it) keeps ``declared_gpu_missing:no_gpu`` (hardware)."""
    code = doc.get("reason_code") or ("no_gpu" if doc.get("nvml_available") else "unknown")
    base = {"reason_code": code, "driver_present": driver_present(doc),
            "kernel_driver_version": doc.get("kernel_driver_version")}
    if code == "no_gpu" and isinstance(doc.get("pci_scan"), dict):
        from gpuaccept.judging.gpucount import explain  # the short count's one judge

        try:
            want = max(int(declared or 1), 1)
        except (TypeError, ValueError):
            want = 1
        why = explain([], want, doc).cause
        return Cause(why.cls, why.kind, host, evidence={**base, **why.evidence})
    cls = "hardware" if code == "no_gpu" else "configuration"
    return Cause(cls, "declared_gpu_missing", host, code, evidence=base)


# Python packages the probes import on the node (module name -> the package an operator installs).
PROBE_PACKAGES = {"torch": "torch", "pynvml": "nvidia-ml-py (pynvml)", "nvidia-ml-py": "nvidia-ml-py (pynvml)"}


def missing_package(module: str | None, doc: dict | None, python: str) -> str | None:
    """An operator line for a probe that failed because the node's interpreter lacks ``module`` (a PackageMissing's
    evidence), or None for a module the probes do not need. ``doc``: the node's gpu_inventory document if known
    (None when it could not be read); ``python``: the probes' interpreter. With the NVIDIA driver on the node
    this is "driver present, torch missing for /usr/bin/python3", never "no NVIDIA GPU". Pure.
    """
    if module not in PROBE_PACKAGES:
        return None
    pkg = PROBE_PACKAGES[module]
    if doc is not None and driver_present(doc):
        return (f"driver present (kernel module {doc.get('kernel_driver_version') or 'version unknown'}), {pkg} "
                f"missing for {python}: install it for that interpreter or set ansible_python_interpreter")
    return f"{pkg} missing for {python}: install it for that interpreter or set ansible_python_interpreter"
