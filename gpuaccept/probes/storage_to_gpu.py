"""The batch journey: files on a drive -> host memory -> each GPU, end to end, and which stage bounds it.

Args (JSON object; ``path`` is required)::

    {"path": "/mnt/nvme0/scratch",   # directory the test files are written to (fresh .gpuaccept-* folder)
     "device": "cuda" | "cpu",       # cpu: the CI path (read + host memcpy, no pinned memory, no GPU)
     "bytes": 4294967296,            # total file bytes (default 4 GiB on cuda, 64 MiB on cpu)
     "files": 4,                     # the bytes are split over this many files
     "chunk_bytes": 67108864,        # read and copy unit (64 MiB)
     "gpus": "all" | [0, 1],
     "min_free_bytes": null}         # free-space margin, default max(5 GiB, 5 %) (as fio_throughput)

Output::

    {"device", "path", "bytes", "chunk_bytes", "fstype", "mount_point", "mount_source", "root_fs",
     "page_cache_evicted",
     "storage_read_gbps",            # cold read file -> pageable host buffer, alone
     "host_copy_gbps",               # pageable -> pinned (cuda) / pageable -> pageable (cpu) memcpy, alone
     "gpus": [{"index", "name", "pci_bus_id", "h2d_gbps", "end_to_end_gbps", "bounding_stage"}],
     "end_to_end_gbps",              # cpu: the journey read + memcpy; cuda: the slowest GPU's
     "bounding_stage",               # storage_read | host_copy | h2d (the slowest stage measured alone)
     "host_conditions"}              # the host while the journey ran (_hostwatch.Watch)

A path that cannot be written for a fact of the node (too little free space, a read-only filesystem, a folder
without write permission: ``_storage.Refused``) is not a failed probe: the document is
``{"device", "path", "failure": {"reason": "free_space" | "read_only" | ..., ...}, "error", "gpus": []}`` (no
figure), so that the controller records the cause, not a crash. ENOSPC, EDQUOT or EROFS while the files are
written count the same.

The journey per chunk: ``readinto`` a pageable buffer, copy into a pinned staging buffer (two, used
in turn), ``copy_(non_blocking=True)`` to the GPU on a side stream; the next read overlaps that copy
(a CUDA event guards reuse of the staging buffer). End to end = file bytes / wall time from the
first read to the last copy's completion. Each stage is also timed alone on the same bytes (H2D
from pinned memory, per GPU); the bounding stage is the one with the lowest GB/s. GB/s = 1e9 B/s.

Page cache: the files are written, fsync'ed and evicted with posix_fadvise(POSIX_FADV_DONTNEED)
before every timed read, so reads come from the drive (``page_cache_evicted`` false when the
kernel refused). The scratch set-up is ``_storage.scratch``, shared with fio_throughput and gds: a tmpfs
path fails before anything is written, the free-space margin holds, the folder goes on exit and SIGTERM;
``mount_point``, ``mount_source`` and ``root_fs`` say where the path is.
"""
from __future__ import annotations

import ctypes
import os
import time

from _hostwatch import Watch as HostWatch
from _probe import ProbeFailed, log, reject_unknown, run
from _storage import MIB, Refused, not_a_directory, scratch, write_refusal

ARG_KEYS = {"path", "device", "bytes", "files", "chunk_bytes", "gpus", "min_free_bytes"}
#: the refusals returned as a document (``failure``), not as a failed probe: facts of the node's filesystem
NODE_FACTS = ("free_space", "read_only", "not_writable")


def gbps(nbytes: float, seconds: float) -> float:
    """GB/s (1e9 bytes per second)."""
    return round(nbytes / seconds / 1e9, 4) if seconds > 0 else 0.0


def write_files(work: str, total: int, files: int, chunk: int) -> list[str]:
    """Write ``files`` files of pseudo-random bytes totalling ``total``; fsync each."""
    names, block = [], os.urandom(min(chunk, 8 * MIB))
    per = total // files
    for i in range(files):
        fn = os.path.join(work, f"batch.{i}")
        with open(fn, "wb") as f:
            left = per
            while left > 0:
                n = min(left, len(block))
                f.write(block[:n])
                left -= n
            f.flush()
            os.fsync(f.fileno())
        names.append(fn)
    return names


def evict(names: list[str]) -> bool:
    """Drop the files' clean pages from the page cache; False when the kernel refused."""
    ok = True
    for fn in names:
        fd = os.open(fn, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            ok = False
        finally:
            os.close(fd)
    return ok


def chunks(names: list[str], buf: memoryview):
    """Yield the number of bytes read into ``buf`` per chunk, over every file (unbuffered reads)."""
    for fn in names:
        with open(fn, "rb", buffering=0) as f:
            while True:
                n = f.readinto(buf)
                if not n:
                    break
                yield n


def view(t) -> memoryview:
    """A writable byte view of a contiguous CPU uint8 tensor (no numpy needed)."""
    return memoryview((ctypes.c_ubyte * t.numel()).from_address(t.data_ptr())).cast("B")


def main(a: dict) -> dict:
    reject_unknown(a, ARG_KEYS)
    path = a.get("path")
    if not path or not os.path.isdir(path):
        raise ProbeFailed(not_a_directory(path) if path else "no path given")
    import torch

    device = a.get("device", "cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise ProbeFailed("device cuda asked but torch sees no GPU")
    chunk = int(a.get("chunk_bytes", 64 * MIB))
    files = int(a.get("files", 4))
    want = int(a.get("bytes", 4 << 30 if device == "cuda" else 64 * MIB))
    host = HostWatch()
    try:
        with scratch(path, want, a.get("min_free_bytes")) as sc:
            host.start()
            out = _journey(torch, a, device, path, sc, chunk, files)
    except Refused as e:
        if e.facts.get("reason") not in NODE_FACTS:
            raise  # a RAM disk, no mount: the probe fails, as before anything is written
        return {"device": device, "path": path, "failure": e.facts, "error": str(e), "gpus": []}
    finally:
        host.stop()
    out["host_conditions"] = host.result()
    return out


def _journey(torch, a: dict, device: str, path: str, sc: dict, chunk: int, files: int) -> dict:
    """The measurement in the scratch folder ``sc`` (the dict ``_storage.scratch`` yields): ``files`` files
    of ``sc["bytes"]`` bytes in all (rounded down to 4 KiB per file), read in ``chunk``-byte pieces; returns
    the output document (module docstring). GB/s = 1e9 B/s."""
    work, m = sc["workdir"], sc["placement"]
    total = sc["bytes"] // files // 4096 * 4096 * files
    try:
        names = write_files(work, total, files, chunk)
    except OSError as e:
        refused = write_refusal(path, e, total)
        if refused is None:
            raise
        raise refused from None
    pageable = torch.empty(chunk, dtype=torch.uint8)
    pv = view(pageable)
    # stage 1: storage read alone (cold)
    evicted = evict(names)
    t0 = time.perf_counter()
    nread = sum(chunks(names, pv))
    read_gbps = gbps(nread, time.perf_counter() - t0)
    out = {"device": device, "path": path, "fstype": m["fstype"], "mount_point": m["mount_point"],
           "mount_source": m["mount_source"], "root_fs": m["root_fs"], "bytes": nread, "chunk_bytes": chunk,
           "page_cache_evicted": evicted, "storage_read_gbps": read_gbps, "gpus": []}
    if device == "cpu":
        dst = torch.empty(chunk, dtype=torch.uint8)
        reps = max(1, nread // chunk)
        t0 = time.perf_counter()
        for _ in range(reps):
            dst.copy_(pageable)
        out["host_copy_gbps"] = gbps(reps * chunk, time.perf_counter() - t0)
        evict(names)
        t0 = time.perf_counter()
        moved = 0
        for n in chunks(names, pv):
            dst[:n].copy_(pageable[:n])
            moved += n
        out["end_to_end_gbps"] = gbps(moved, time.perf_counter() - t0)
        stages = {"storage_read": read_gbps, "host_copy": out["host_copy_gbps"]}
        out["bounding_stage"] = min(stages, key=stages.get)
        return out
    # cuda
    from _gpu import pci_bus_id
    staging = [torch.empty(chunk, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
    reps = max(1, nread // chunk)
    t0 = time.perf_counter()
    for i in range(reps):
        staging[i % 2].copy_(pageable)
    out["host_copy_gbps"] = gbps(reps * chunk, time.perf_counter() - t0)
    sel = a.get("gpus", "all")
    idx = list(range(torch.cuda.device_count())) if sel == "all" else [int(i) for i in sel]
    worst = None
    for gi in idx:
        dev = torch.device("cuda", gi)
        props = torch.cuda.get_device_properties(gi)
        gpu_buf = torch.empty(chunk, dtype=torch.uint8, device=dev)
        stream = torch.cuda.Stream(device=dev)
        with torch.cuda.device(dev):
            gpu_buf.copy_(staging[0], non_blocking=True)  # warm-up
            torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            for i in range(reps):
                gpu_buf.copy_(staging[i % 2], non_blocking=True)
            torch.cuda.synchronize(dev)
            h2d = gbps(reps * chunk, time.perf_counter() - t0)
            evict(names)
            events = [None, None]
            t0 = time.perf_counter()
            moved = 0
            for i, n in enumerate(chunks(names, pv)):
                s = i % 2
                if events[s] is not None:
                    events[s].synchronize()
                staging[s][:n].copy_(pageable[:n])
                with torch.cuda.stream(stream):
                    gpu_buf[:n].copy_(staging[s][:n], non_blocking=True)
                    ev = torch.cuda.Event()
                    ev.record(stream)
                events[s] = ev
                moved += n
            stream.synchronize()
            e2e = gbps(moved, time.perf_counter() - t0)
        stages = {"storage_read": read_gbps, "host_copy": out["host_copy_gbps"], "h2d": h2d}
        g = {"index": gi, "name": props.name, "pci_bus_id": pci_bus_id(props), "h2d_gbps": h2d,
             "end_to_end_gbps": e2e, "bounding_stage": min(stages, key=stages.get)}
        log(f"GPU {gi}: {g}")
        out["gpus"].append(g)
        if worst is None or e2e < worst["end_to_end_gbps"]:
            worst = g
    out["end_to_end_gbps"] = worst["end_to_end_gbps"] if worst else None
    out["bounding_stage"] = worst["bounding_stage"] if worst else None
    return out


if __name__ == "__main__":
    run(main)
