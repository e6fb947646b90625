"""PCIe link generation and width of every GPU, read while the link carries traffic.

Idle GPUs downshift their link (an idle Gen5 x16 GPU often reports Gen1), and NVML's *maximum* hides a
GPU seated in a Gen4 or x8 slot. So this probe drives pinned host-to-device copies on every GPU (one
thread each) and samples nvmlDeviceGetCurrPcieLinkGeneration / nvmlDeviceGetCurrPcieLinkWidth during
the traffic, keeping the highest reading per GPU.

Args: ``{"seconds": 1.5, "bytes": 268435456}`` (load duration, after 0.3 s for the links to train up; bytes per
copy). Sampling stops early once every GPU has read its maximum generation and width (nothing can read higher);
where every idle link already reads its maximum, no load runs at all (``"loaded": false``; no torch import).
Output: ``{"seconds", "sampled_s", "loaded", "gpus": [{"index", "pci_bus_id", "gen", "width", "gen_idle", "width_idle", "gen_max",
"width_max", "samples"}]}``; a reading NVML refuses is ``{"nvml_error": ...}``.
"""
from __future__ import annotations

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
    if not torch.cuda.is_available():
        raise ProbeFailed("no CUDA device visible to torch")
    n = torch.cuda.device_count()
    out, handles = out[:n], handles[:n]
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
            errors.append(f"GPU {i}: {e}")

    threads = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    # sample from the start (links train up within ~0.3 s of traffic), for up to 0.3 s + ``seconds``; stop as
    # soon as every GPU has read its maximum generation and width: no later sample can read higher
    t0 = time.time()
    end = t0 + 0.3 + seconds
    while time.time() < end:
        for g, h in zip(out, handles):
            g["gen"] = _best(g["gen"], _read(nv, h, "nvmlDeviceGetCurrPcieLinkGeneration"))
            g["width"] = _best(g["width"], _read(nv, h, "nvmlDeviceGetCurrPcieLinkWidth"))
            g["samples"] += 1
        if all(_at_max(g) for g in out):
            break
        time.sleep(0.05)
    sampled = round(time.time() - t0, 3)
    stop.set()
    for t in threads:
        t.join(timeout=10)
    if errors:
        raise ProbeFailed("; ".join(errors))
    return {"seconds": seconds, "sampled_s": sampled, "loaded": True, "gpus": out}


if __name__ == "__main__":
    run(main)
