"""PCIe link generation and width of every GPU, read while the link carries traffic.

Idle GPUs downshift their link (an idle Gen5 x16 GPU often reports Gen1), and NVML's *maximum* hides a
GPU seated in a Gen4 or x8 slot. So this probe drives pinned host-to-device copies on every GPU (one
thread each) and samples nvmlDeviceGetCurrPcieLinkGeneration / nvmlDeviceGetCurrPcieLinkWidth during
the traffic, keeping the highest reading per GPU.

Args: ``{"seconds": 1.5, "bytes": 268435456}`` (load duration, after 0.3 s for the links to train up; bytes per
copy). Sampling stops early once every GPU has read its maximum generation and width (nothing can read higher);
where every idle link already reads its maximum, no load runs at all (``"loaded": false``; no torch import).
Output: ``{"seconds", "sampled_s", "loaded", "gpus": [{"index", "pci_bus_id", "gen", "width", "gen_idle", "width_idle", "gen_max",
"width_max", "samples"}]}``; a reading NVML refuses is ``{"nvml_error": ...}``. ``index`` is NVML's; every NVML GPU
has its record.

Which GPU a torch device loads is told by PCI bus id (``_nvml.pair_by_bus_id``), never by index: torch's device
``i`` is the ``i``-th GPU CUDA shows after CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER. Under load a GPU's record
adds ``"loaded": true, "torch_index"``; a GPU no torch device is gets ``"loaded": false``, ``"not_loaded"``
("cuda_hidden": CUDA does not show it; "unpaired": a torch device gave no bus id NVML lists),
``"cuda_visible_devices"`` (the probe's value, null when unset) and ``"why"``, its ``gen``/``width`` null unless its
idle reading is already its maximum (:func:`not_loaded`). Where CUDA_VISIBLE_DEVICES hides every GPU, every record
says so (no failure); where it is unset and torch sees no GPU, the probe fails saying why (_gpu.require_cuda).
"""
from __future__ import annotations

import os
import threading
import time

from _probe import ProbeFailed, run


def _read(nv, h, fn):
    try:
        return int(getattr(nv, fn)(h))
    except Exception as e:  # NVMLError or a missing binding: never read as a healthy link
        return {"nvml_error": str(e) or type(e).__name__}


def _best(a, b):
    if isinstance(a, dict):
        return b
    if isinstance(b, dict):
        return a
    return max(a, b)


def _at_max(g: dict, suffix: str = "") -> bool:
    """True when GPU entry ``g`` read its maximum generation and width (``suffix`` "_idle": before the load)."""
    return all(not isinstance(g[k + suffix], dict) and g[k + suffix] == g[f"{k}_max"] for k in ("gen", "width"))


def main(args: dict) -> dict:
    try:
        import pynvml as nv
        nv.nvmlInit()
    except Exception as e:
        raise ProbeFailed(f"NVML unavailable: {e}")
    seconds = float(args.get("seconds", 1.5))
    nbytes = int(args.get("bytes", 256 * 2**20))
    out, handles = [], []
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        bus = nv.nvmlDeviceGetPciInfo(h).busId
        handles.append(h)
        out.append({"index": i, "pci_bus_id": bus.decode() if isinstance(bus, bytes) else bus,
                    "gen_idle": _read(nv, h, "nvmlDeviceGetCurrPcieLinkGeneration"),
                    "width_idle": _read(nv, h, "nvmlDeviceGetCurrPcieLinkWidth"),
                    "gen_max": _read(nv, h, "nvmlDeviceGetMaxPcieLinkGeneration"),
                    "width_max": _read(nv, h, "nvmlDeviceGetMaxPcieLinkWidth"),
                    "gen": {"nvml_error": "no sample"}, "width": {"nvml_error": "no sample"}, "samples": 0})
    if out and all(_at_max(g, "_idle") for g in out):
        # every idle link already reads its maximum (an H200 SXM at Gen5 x16 does): traffic cannot read higher,
        # so no torch, no CUDA context, no load
        for g in out:
            g["gen"], g["width"], g["samples"] = g["gen_idle"], g["width_idle"], 1
        return {"seconds": seconds, "sampled_s": 0.0, "loaded": False, "gpus": out}
    import torch
    from _gpu import require_cuda, torch_bus_ids
    from _nvml import pair_by_bus_id

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not torch.cuda.is_available() and visible is None:
        require_cuda()  # raises, saying why (driver older than torch's CUDA build, ...)
    # torch device t is NVML GPU pairing.nvml_of[t], by PCI bus id (never t == NVML index: CUDA_VISIBLE_DEVICES
    # and CUDA_DEVICE_ORDER renumber torch's devices, not NVML's)
    pairing = pair_by_bus_id(torch_bus_ids(nv), [g["pci_bus_id"] for g in out])
    for j in pairing.hidden:
        out[j].update(not_loaded(out[j], pairing, visible))
    for j, t in pairing.torch_of.items():
        out[j].update(loaded=True, torch_index=t)
    sampled = [(out[j], handles[j]) for j in sorted(pairing.torch_of)]
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not sampled:  # torch loads no GPU NVML lists: nothing to sample under load
        return {"seconds": seconds, "sampled_s": 0.0, "loaded": False, "gpus": out}
    stop = threading.Event()
    errors: list[str] = []

    def load(i: int) -> None:
        try:
            torch.cuda.set_device(i)
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            dev = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{i}")
            while not stop.is_set():
                dev.copy_(host, non_blocking=True)
                torch.cuda.synchronize(i)
        except Exception as e:
            errors.append(f"GPU {pairing.nvml_of.get(i, f'cuda:{i}')}: {e}")

    # every device torch sees carries traffic (an unmatched one too: it is some GPU)
    threads = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    # sample from the start (links train up within ~0.3 s of traffic), for up to 0.3 s + ``seconds``; stop as
    # soon as every loaded GPU has read its maximum generation and width: no later sample can read higher
    t0 = time.time()
    end = t0 + 0.3 + seconds
    while time.time() < end:
        for g, h in sampled:
            g["gen"] = _best(g["gen"], _read(nv, h, "nvmlDeviceGetCurrPcieLinkGeneration"))
            g["width"] = _best(g["width"], _read(nv, h, "nvmlDeviceGetCurrPcieLinkWidth"))
            g["samples"] += 1
        if all(_at_max(g) for g, _ in sampled):
            break
        time.sleep(0.05)
    took = round(time.time() - t0, 3)
    stop.set()
    for t in threads:
        t.join(timeout=10)
    if errors:
        raise ProbeFailed("; ".join(errors))
    return {"seconds": seconds, "sampled_s": took, "loaded": True, "gpus": out}


def not_loaded(g: dict, pairing, visible: str | None) -> dict:
    """The fields of NVML GPU ``g`` that no torch device is (``pairing``: ``_nvml.Pairing``; ``visible``: the
    probe's CUDA_VISIBLE_DEVICES, None when unset): ``loaded`` False, ``not_loaded`` "cuda_hidden" (every torch
    device is another GPU: CUDA does not show this one) or "unpaired" (some torch device gave no bus id NVML
    lists: it may be this GPU), ``cuda_visible_devices`` and ``why`` (for people). Its ``gen``/``width`` are its
    idle reading where that is already its maximum (no load can read higher), else None: never an idle figure
    read as the link under load. Pure."""
    if pairing.certain:
        kind = "cuda_hidden"
        why = (f"hidden from CUDA by CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else
               "not visible to CUDA (CUDA_VISIBLE_DEVICES unset): no torch device has its PCI bus id")
    else:
        kind = "unpaired"
        why = (f"torch device(s) {pairing.unmatched} give no PCI bus id NVML lists: whether one of them is this "
               f"GPU is not known")
    at_max = _at_max(g, "_idle")
    return {"loaded": False, "not_loaded": kind, "cuda_visible_devices": visible, "why": why,
            "gen": g["gen_idle"] if at_max else None, "width": g["width_idle"] if at_max else None,
            "samples": 1 if at_max else 0}


if __name__ == "__main__":
    run(main)
