"""PCIe link generation and width of every GPU, read while the link carries traffic.

Idle GPUs downshift their link (an idle Gen5 x16 GPU often reports Gen1), and NVML's *maximum* hides a
GPU seated in a Gen4 or x8 slot. So this probe drives pinned host-to-device copies on every GPU (one
thread each) and samples nvmlDeviceGetCurrPcieLinkGeneration / nvmlDeviceGetCurrPcieLinkWidth during
the traffic, keeping the highest reading per GPU.

Args: ``{"seconds": 1.5, "bytes": 268435456}`` (load duration; bytes per copy).
Output: ``{"gpus": [{"index", "pci_bus_id", "gen", "width", "gen_idle", "width_idle", "gen_max",
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


def main(args: dict) -> dict:
    try:
        import pynvml as nv
        nv.nvmlInit()
    except Exception as e:
        raise ProbeFailed(f"NVML unavailable: {e}")
    import torch
    if not torch.cuda.is_available():
        raise ProbeFailed("no CUDA device visible to torch")
    seconds = float(args.get("seconds", 1.5))
    nbytes = int(args.get("bytes", 256 * 2**20))
    n = torch.cuda.device_count()
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
    out = []
    for i, h in enumerate(handles):
        bus = nv.nvmlDeviceGetPciInfo(h).busId
        out.append({"index": i, "pci_bus_id": bus.decode() if isinstance(bus, bytes) else bus,
                    "gen_idle": _read(nv, h, "nvmlDeviceGetCurrPcieLinkGeneration"),
                    "width_idle": _read(nv, h, "nvmlDeviceGetCurrPcieLinkWidth"),
                    "gen_max": _read(nv, h, "nvmlDeviceGetMaxPcieLinkGeneration"),
                    "width_max": _read(nv, h, "nvmlDeviceGetMaxPcieLinkWidth"),
                    "gen": {"nvml_error": "no sample"}, "width": {"nvml_error": "no sample"}, "samples": 0})
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
    time.sleep(0.3)  # let the links train up
    end = time.time() + seconds
    while time.time() < end:
        for g, h in zip(out, handles):
            g["gen"] = _best(g["gen"], _read(nv, h, "nvmlDeviceGetCurrPcieLinkGeneration"))
            g["width"] = _best(g["width"], _read(nv, h, "nvmlDeviceGetCurrPcieLinkWidth"))
            g["samples"] += 1
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(timeout=10)
    if errors:
        raise ProbeFailed("; ".join(errors))
    return {"seconds": seconds, "gpus": out}


if __name__ == "__main__":
    run(main)
