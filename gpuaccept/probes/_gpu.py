"""Shared helpers of the torch probes (hbm_bandwidth, matmul_tflops, launch_overhead, pcie_bandwidth,
p2p_bandwidth).

Shipped with the probes (the runner ships this whole folder); depends on the standard library and torch.
The argument prologue every torch probe runs is here, once: :func:`probe_device` (unknown arguments
refused, ``device`` checked), :func:`gpu_indices` (CUDA required on cuda, ``gpus`` checked against what torch
sees) and :func:`describe_gpu` (the ``{"index", "name", "pci_bus_id"}`` head of a per-GPU record). A torch device
is paired with its NVML GPU by PCI bus id only (:func:`pair_with_nvml`, the rule in ``_nvml.pair_by_bus_id``).
"""
from __future__ import annotations

import os
import threading
import time

import torch

from _probe import ProbeFailed, reject_unknown, sig  # noqa: F401 - sig: the torch probes take it from here

DEVICES = ("cuda", "cpu")  # cpu: the same code path on host memory, for CI


def cuda_version_text(v) -> str | None:
    """NVML's CUDA driver version (``nvmlSystemGetCudaDriverVersion``: 1000*major + 10*minor, 12040) as
    ``"12.4"``; None when it is not a number."""
    try:
        v = int(v)
    except (TypeError, ValueError):
        return None
    return f"{v // 1000}.{(v % 1000) // 10}"


def why_no_device(torch_cuda: str | None, nvml_cuda, nvml_gpus, visible: str | None) -> list[str]:
    """What the node says beside "no CUDA device visible to torch" (pure): the driver's CUDA version next to
    torch's CUDA build when the driver's is older (CUDA's minor-version compatibility runs within one major
    version only; a newer build than the driver fails to initialise), and ``CUDA_VISIBLE_DEVICES`` with its
    value when it is set while NVML lists GPUs. ``nvml_cuda``: the NVML integer or None; ``nvml_gpus``: NVML's
    count or None; ``visible``: the variable's value or None when unset."""
    out = []
    drv = cuda_version_text(nvml_cuda)
    if drv and torch_cuda:
        older = driver_too_old(torch_cuda, nvml_cuda)
        out.append(f"the NVIDIA driver supports CUDA {drv} (NVML), torch is built for CUDA {torch_cuda}"
                   + (": the driver is too old for this torch build (update the driver, or install a torch "
                      f"built for CUDA <= {drv})" if older else ""))
    if visible is not None and nvml_gpus:
        out.append(f"CUDA_VISIBLE_DEVICES={visible!r} in the probe's environment hides NVML's {nvml_gpus} GPU(s)"
                   f" from CUDA")
    return out


def require_cuda() -> None:
    """ProbeFailed "no CUDA device visible to torch (torch V, CUDA build: B; <why_no_device>)" when torch sees
    no CUDA device."""
    if not torch.cuda.is_available():
        nvml_cuda = nvml_gpus = None
        try:
            import pynvml as nv
            nv.nvmlInit()
            nvml_cuda, nvml_gpus = nv.nvmlSystemGetCudaDriverVersion(), nv.nvmlDeviceGetCount()
        except Exception:  # noqa: BLE001 - no NVML: nothing to add
            pass
        notes = why_no_device(torch.version.cuda, nvml_cuda, nvml_gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
        raise ProbeFailed(
            f"no CUDA device visible to torch (torch {torch.__version__}, CUDA build: {torch.version.cuda}"
            + "".join(f"; {n}" for n in notes) + ")",
            setup="driver_cuda_too_old" if driver_too_old(torch.version.cuda, nvml_cuda) else None)


def driver_too_old(torch_cuda: str | None, nvml_cuda) -> bool:
    """Whether the driver's CUDA version (NVML's integer, e.g. 12040) is older than torch's CUDA build ("12.8")
    (pure; unknown either way: False)."""
    drv = cuda_version_text(nvml_cuda)
    try:
        return bool(drv and torch_cuda) and \
            tuple(int(x) for x in drv.split(".")) < tuple(int(x) for x in torch_cuda.split(".")[:2])
    except ValueError:
        return False


def select_gpus(device: str, gpus) -> list[int]:
    """Indices to measure: ``gpus`` (list or "all"/None) checked against what torch sees."""
    if device == "cpu":
        return [0]
    count = torch.cuda.device_count()
    if gpus in (None, "all"):
        return list(range(count))
    if not isinstance(gpus, list) or not all(isinstance(g, int) for g in gpus) or not gpus:
        raise ProbeFailed(f"gpus must be a non-empty list of indices or \"all\", got {gpus!r}")
    bad = [g for g in gpus if not 0 <= g < count]
    if bad:
        raise ProbeFailed(f"gpu index {bad[0]} out of range: torch sees {count} GPU(s)")
    return gpus


def probe_device(args: dict, known) -> str:
    """First step of a torch probe's ``main``: refuse arguments outside ``known`` ("unknown argument(s): a,
    b") and return ``args["device"]`` (default "cuda"); ProbeFailed unless it is one of :data:`DEVICES`."""
    reject_unknown(args, known)
    device = args.get("device", "cuda")
    if device not in DEVICES:
        raise ProbeFailed(f"device must be \"cuda\" or \"cpu\", got {device!r}")
    return device


def gpu_indices(device: str, gpus) -> list[int]:
    """The torch device indices to measure on ``device`` ("cuda" | "cpu": ``[0]``), from the ``gpus`` argument
    (a list of indices, "all" or None: every GPU torch sees). ProbeFailed when torch sees no CUDA device on
    cuda (:func:`require_cuda`) or an index is out of range (:func:`select_gpus`)."""
    if device == "cuda":
        require_cuda()
    return select_gpus(device, gpus)


def describe_gpu(device: str, index: int) -> dict:
    """``{"index", "name", "pci_bus_id"}`` of torch device ``index``: its properties' name and NVML-style bus
    id (:func:`pci_bus_id`) on cuda; ``{"index": 0, "name": "cpu", "pci_bus_id": None}`` on cpu."""
    if device != "cuda":
        return {"index": 0, "name": "cpu", "pci_bus_id": None}
    props = torch.cuda.get_device_properties(index)
    return {"index": index, "name": props.name, "pci_bus_id": pci_bus_id(props)}


def bus_ids(device: str, indices: list[int]) -> list[str | None]:
    """NVML-style PCI bus ids of torch devices ``indices`` on cuda (what _conditions.Watch samples); ``[]`` on
    cpu."""
    return [describe_gpu(device, i)["pci_bus_id"] for i in indices] if device == "cuda" else []


def pci_bus_id(props) -> str | None:
    """NVML-style PCI bus id ("00000000:1B:00.0") from torch device properties, if torch has them."""
    from _pci import from_parts  # imported here: the one PCI normaliser, see _pci.py

    try:
        return from_parts(props.pci_domain_id, props.pci_bus_id, props.pci_device_id, 0)
    except AttributeError:
        return None


def torch_bus_ids(nv=None) -> list[str | None]:
    """The NVML-style PCI bus id of every torch CUDA device, in torch's order (``[]`` when torch sees none).

    From the device's properties (:func:`pci_bus_id`); where this torch gives none and ``nv`` (pynvml,
    initialised) is passed, from NVML through the device's UUID (nvmlDeviceGetHandleByUUID); else None."""
    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        bus, uuid = pci_bus_id(props), getattr(props, "uuid", None)
        if bus is None and nv is not None and uuid:
            try:
                h = nv.nvmlDeviceGetHandleByUUID("GPU-" + str(uuid).removeprefix("GPU-"))
                bus = nv.nvmlDeviceGetPciInfo(h).busId
                bus = bus.decode() if isinstance(bus, bytes) else bus
            except Exception:  # noqa: BLE001 - no NVML answer: the device stays unmatched
                bus = None
        out.append(bus)
    return out


def pair_with_nvml(nv):
    """The node's torch devices paired with its NVML GPUs by PCI bus id (``_nvml.pair_by_bus_id``, the one rule;
    never torch index i with NVML index i: CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER change torch's indices, not
    NVML's). ``nv``: pynvml, initialised. Returns ``(Pairing, nvml_bus_ids)``."""
    from _nvml import nvml_bus_ids, pair_by_bus_id

    nvml = nvml_bus_ids(nv)
    return pair_by_bus_id(torch_bus_ids(nv), nvml), nvml


class Clock:
    """Marks on the device timeline: CUDA events on cuda, perf_counter on cpu (same calling code)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def seconds(self, a, b) -> float:
        """Seconds between two marks; call after sync()."""
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a


def on_gpus(fn, indices: list[int]) -> list:
    """Run ``fn(index, barrier)`` in one thread per index, all at once; return results in order.

    A failing thread aborts the barrier (so the others stop waiting) and its error is re-raised."""
    barrier = threading.Barrier(len(indices), timeout=300)
    results: list = [None] * len(indices)
    errors: list = [None] * len(indices)

    def body(slot: int, index: int) -> None:
        try:
            results[slot] = fn(index, barrier)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors[slot] = e
            barrier.abort()

    threads = [threading.Thread(target=body, args=(s, i), daemon=True) for s, i in enumerate(indices)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [(indices[s], e) for s, e in enumerate(errors) if e is not None]
    if failed:  # report the root cause, not the BrokenBarrierError it caused in the other threads
        index, e = ([f for f in failed if not isinstance(f[1], threading.BrokenBarrierError)] or failed)[0]
        msg = str(e) if isinstance(e, ProbeFailed) else f"{type(e).__name__}: {e}"
        raise ProbeFailed(f"GPU {index}: {msg}".splitlines()[0][:500])
    return results
