"""GPUDirect Storage (GDS): is the stack there, which mode would cuFile use, and GB/s file <-> GPU.

Args (JSON object, every key optional)::

    {"path": "/mnt/nvme0/scratch",   # directory for the test file (fresh .gpuaccept-* folder); none: detect only
     "bytes": 1073741824,            # file size (default 1 GiB)
     "gpus": "all" | [0],            # default [0]
     "device": "cuda" | "cpu",       # cpu: detection only (CI)
     "min_free_bytes": null}         # free-space margin, as fio_throughput

Output::

    {"cufile": {"found", "paths": [...]}, "nvidia_fs": {"loaded", "version", "proc"},
     "p2pdma": {"kernel", "cufile_json_use_pci_p2pdma"}, "cufile_json": path | null,
     "allow_compat_mode": bool | null, "mode": "nvidia-fs" | "p2pdma" | "compat",
     "torch_gds": bool, "gpu": bool, "reason": str | null,     # gpu: a GPU took part (false without a path)
     "fstype", "mount_point", "mount_source", "root_fs",       # where ``path`` is (with a path only)
     "gpus": [{"index", "name", "pci_bus_id", "gds_write_gbps", "gds_read_gbps", "bounce_read_gbps",
               "verified", "nvidia_fs_ops": {"reads", "writes"} | null} | {"index", "pci_bus_id", "stage", "error"}]}

Sources: cuFile is libcufile.so, found by ctypes.util.find_library("cufile"), in the nvidia-cufile
wheel (site-packages/nvidia/cufile/lib), or /usr/local/cuda*/lib64 (CUDA toolkit). nvidia-fs is the
GDS kernel module: /proc/driver/nvidia-fs (version, stats) or "nvidia_fs" in /proc/modules.
P2PDMA (CUDA 12.8+, open kernel modules): the kernel's CONFIG_PCI_P2PDMA (/boot/config-<release>)
or the pci_p2pdma symbols in /proc/kallsyms, and "use_pci_p2pdma": true in cufile.json
($CUFILE_ENV_PATH_JSON or /etc/cufile.json). Mode: nvidia-fs when the module is loaded, else p2pdma
when both kernel and cufile.json enable it, else compat (cuFile falls back to POSIX reads through a
bounce buffer: correct, not direct).

Without a path only the stack is detected, and torch is not imported (``torch_gds`` read from torch's files,
:func:`torch_has_gds`): the report of a node with no GDS path configured takes milliseconds, not torch's import.

Transfer (the scratch set-up is ``_storage.scratch``, shared with fio_throughput and storage_to_gpu: a
tmpfs path fails before anything is written, the free-space margin holds, the test folder is removed on
exit and on SIGTERM): torch.cuda.gds.GdsFile (torch >= 2.5) ``save_storage`` (GPU -> file) then ``load_storage``
(file -> GPU), after posix_fadvise(DONTNEED), timed with torch.cuda.synchronize; compared with the
bounce-buffer path (file -> pinned host memory -> GPU). The bytes read back are compared with what was
written (``verified``). nvidia_fs_ops: read/write op counters of /proc/driver/nvidia-fs/stats
before/after (nonzero: the transfer really went through nvidia-fs; the counters need the module's
rw_stats_enabled). GB/s = 1e9 B/s.
"""
from __future__ import annotations

import ctypes.util
import glob
import gzip
import importlib.util
import json
import os
import platform
import re
import time

from _probe import log, reject_unknown, run
from _sysfs import read_text
from _storage import MIB, scratch

ARG_KEYS = {"path", "bytes", "gpus", "device", "min_free_bytes"}


def find_cufile() -> list[str]:
    """Every libcufile.so found (loader search, nvidia-cufile wheel, CUDA toolkits)."""
    found = []
    name = ctypes.util.find_library("cufile")
    if name:
        found.append(name)
    try:
        spec = importlib.util.find_spec("nvidia.cufile")
    except (ImportError, ValueError):
        spec = None
    for base in (spec.submodule_search_locations or []) if spec else []:
        found += sorted(glob.glob(os.path.join(base, "lib", "libcufile.so*")))
    found += sorted(glob.glob("/usr/local/cuda*/lib64/libcufile.so*")) + \
        sorted(glob.glob("/usr/lib/x86_64-linux-gnu/libcufile.so*"))
    return list(dict.fromkeys(found))


def loaded_modules() -> set[str]:
    """Module names from /proc/modules (what lsmod lists)."""
    return {ln.split()[0] for ln in (read_text("/proc/modules") or "").splitlines() if ln.strip()}


def nvidia_fs_ops() -> dict | None:
    """{"reads", "writes"} op counts from /proc/driver/nvidia-fs/stats, or None."""
    text = read_text("/proc/driver/nvidia-fs/stats")
    if text is None:
        return None
    out = {}
    for key, label in (("reads", "Reads"), ("writes", "Writes")):
        m = re.search(rf"^{label}\s*:\s*n=(\d+)", text, re.M)
        out[key] = int(m.group(1)) if m else None
    return out


def kernel_p2pdma() -> bool:
    conf = read_text(f"/boot/config-{platform.release()}")
    if conf is None:
        try:
            with gzip.open("/proc/config.gz", "rt") as f:
                conf = f.read()
        except OSError:
            conf = None
    if conf is not None and re.search(r"^CONFIG_PCI_P2PDMA=y", conf, re.M):
        return True
    try:
        with open("/proc/kallsyms", encoding="utf-8", errors="replace") as f:
            return any(" pci_p2pdma_add_resource" in ln for ln in f)
    except OSError:
        return False


def cufile_json() -> tuple[str | None, dict]:
    """(path, parsed) of cufile.json; cuFile's JSON allows // comments, which are stripped first."""
    for p in (os.environ.get("CUFILE_ENV_PATH_JSON"), "/etc/cufile.json"):
        if p and os.path.exists(p):
            text = re.sub(r"^\s*//.*$", "", read_text(p) or "", flags=re.M)
            try:
                return p, json.loads(text)
            except ValueError:
                return p, {}
    return None, {}


def detect() -> dict:
    mods = loaded_modules()
    nvfs_proc = os.path.exists("/proc/driver/nvidia-fs")
    version = (read_text("/proc/driver/nvidia-fs/version") or "").strip() or None
    cj_path, cj = cufile_json()
    props = cj.get("properties") or {}
    p2p = {"kernel": kernel_p2pdma(), "cufile_json_use_pci_p2pdma": bool(props.get("use_pci_p2pdma"))}
    libs = find_cufile()
    nvfs = {"loaded": nvfs_proc or "nvidia_fs" in mods, "version": version, "proc": nvfs_proc}
    mode = "nvidia-fs" if nvfs["loaded"] else "p2pdma" if p2p["kernel"] and p2p["cufile_json_use_pci_p2pdma"] \
        else "compat"
    return {"cufile": {"found": bool(libs), "paths": libs}, "nvidia_fs": nvfs, "p2pdma": p2p,
            "cufile_json": cj_path, "allow_compat_mode": props.get("allow_compat_mode"), "mode": mode}


def torch_has_gds() -> bool:
    """Whether the torch installed for this Python has ``torch.cuda.gds.GdsFile`` (torch >= 2.5), read from its
    files without importing it (``import torch`` costs 4-8 s on a GPU node: gpuaccept/probes/_zygote.py): its
    package found by importlib (find_spec of a top-level name imports nothing), ``cuda/gds.py`` in it defining
    ``class GdsFile``."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return False
    for base in (spec.submodule_search_locations or []) if spec else []:
        text = read_text(os.path.join(base, "cuda", "gds.py")) or ""
        if re.search(r"^class GdsFile\b", text, re.M):
            return True
    return False


def main(a: dict) -> dict:
    reject_unknown(a, ARG_KEYS)
    doc = detect()
    doc.update(torch_gds=False, gpu=False, reason=None, gpus=[])
    if not a.get("path"):  # detection only: nothing needs torch, so it is not imported
        doc["torch_gds"] = torch_has_gds()
        doc["reason"] = "no path given: detection only (torch not imported)"
        return doc
    try:
        import torch
    except ImportError:
        doc["reason"] = "torch not importable"
        return doc
    doc["torch_gds"] = hasattr(getattr(torch.cuda, "gds", None), "GdsFile")
    doc["gpu"] = a.get("device", "cuda") == "cuda" and torch.cuda.is_available()
    if not doc["gpu"]:
        doc["reason"] = "no GPU visible to torch" if a.get("device", "cuda") == "cuda" else "device cpu: detection only"
        return doc
    if not doc["torch_gds"]:
        doc["reason"] = f"torch {torch.__version__} has no torch.cuda.gds.GdsFile (torch >= 2.5 needed)"
        return doc
    path = a["path"]
    sel = a.get("gpus", [0])
    idx = list(range(torch.cuda.device_count())) if sel == "all" else [int(i) for i in sel]
    with scratch(path, int(a.get("bytes", 1 << 30)), a.get("min_free_bytes")) as s:
        where = s["placement"]
        doc.update(fstype=where["fstype"], mount_point=where["mount_point"], mount_source=where["mount_source"],
                   root_fs=where["root_fs"])
        nbytes = s["bytes"] // MIB * MIB or MIB
        for gi in idx:
            stage = ["register"]
            try:
                doc["gpus"].append(_transfer(torch, gi, os.path.join(s["workdir"], f"gds.{gi}"), nbytes, stage))
            except RuntimeError as e:  # cuFile errors surface as RuntimeError from torch
                # the bus id names the GPU: ``index`` is torch's (after CUDA_VISIBLE_DEVICES), not NVML's
                doc["gpus"].append({"index": gi, "pci_bus_id": _bus_id(torch, gi), "stage": stage[0],
                                    "error": f"GdsFile {stage[0]} failed: {str(e).splitlines()[0][:300]}"})
    return doc


def _bus_id(torch, gi: int) -> str | None:
    """NVML-style PCI bus id of torch device ``gi`` (_gpu.pci_bus_id), None where torch cannot say."""
    from _gpu import pci_bus_id
    try:
        return pci_bus_id(torch.cuda.get_device_properties(gi))
    except Exception:  # noqa: BLE001 - an index out of range, a CUDA error: the record keeps its index
        return None


def _evict(fn: str) -> None:
    fd = os.open(fn, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _transfer(torch, gi: int, fn: str, nbytes: int, stage: list | None = None) -> dict:
    """Write then read ``nbytes`` between GPU ``gi`` and file ``fn`` through cuFile (torch.cuda.gds.GdsFile, the
    file opened with O_DIRECT: cuFileHandleRegister requires it, NVIDIA cuFile API reference), then the same read
    through a pinned bounce buffer. ``stage[0]`` says what is running (``register``, ``write``, ``read``) for the
    caller's error record. Raises RuntimeError (cuFile's errors through torch)."""
    from torch.cuda.gds import GdsFile
    stage = stage if stage is not None else ["register"]
    dev = torch.device("cuda", gi)
    props = torch.cuda.get_device_properties(gi)
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=dev)
    dst = torch.zeros(nbytes, dtype=torch.uint8, device=dev)
    ops0 = nvidia_fs_ops()
    with torch.cuda.device(dev):
        stage[0] = "register"
        f = GdsFile(fn, os.O_CREAT | os.O_RDWR | getattr(os, "O_DIRECT", 0))
        torch.cuda.synchronize(dev)
        stage[0] = "write"
        t0 = time.perf_counter()
        f.save_storage(src.untyped_storage(), offset=0)
        torch.cuda.synchronize(dev)
        w = time.perf_counter() - t0
        _evict(fn)
        stage[0] = "read"
        t0 = time.perf_counter()
        f.load_storage(dst.untyped_storage(), offset=0)
        torch.cuda.synchronize(dev)
        r = time.perf_counter() - t0
        del f
        verified = bool(torch.equal(src, dst))
        ops1 = nvidia_fs_ops()
        # bounce buffer: file -> pinned host -> GPU
        _evict(fn)
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        import ctypes
        mv = memoryview((ctypes.c_ubyte * nbytes).from_address(host.data_ptr())).cast("B")
        t0 = time.perf_counter()
        with open(fn, "rb", buffering=0) as fh:
            got = 0
            while got < nbytes:
                n = fh.readinto(mv[got:])
                if not n:
                    break
                got += n
        dst.copy_(host, non_blocking=True)
        torch.cuda.synchronize(dev)
        b = time.perf_counter() - t0
    ops = None
    if ops0 and ops1:
        ops = {k: (ops1[k] - ops0[k]) if None not in (ops0[k], ops1[k]) else None for k in ("reads", "writes")}
    from _gpu import pci_bus_id
    g = {"index": gi, "name": props.name, "pci_bus_id": pci_bus_id(props), "bytes": nbytes,
         "gds_write_gbps": round(nbytes / w / 1e9, 4), "gds_read_gbps": round(nbytes / r / 1e9, 4),
         "bounce_read_gbps": round(nbytes / b / 1e9, 4),
         "verified": verified, "nvidia_fs_ops": ops}
    log(f"GPU {gi}: {g}")
    return g


if __name__ == "__main__":
    run(main)
