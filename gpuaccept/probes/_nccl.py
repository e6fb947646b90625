"""libnccl through ctypes (node side, stdlib only): the calls nccl-tests makes, and where to find the library.

Shipped beside the probes and imported by ``nccl_allreduce.py`` (api ``"nccl"``). Pure parts (enum values,
version decoding, candidate paths) are tested on the CPU; :class:`Nccl` needs a real libnccl. Every
signature and enum value below is copied from ``nccl.h`` (NCCL 2.x, ``src/nccl.h.in``).
"""
from __future__ import annotations

import os
import sys

#: ncclDataType_t (nccl.h): ncclInt8=0 ncclUint8=1 ncclInt32=2 ncclUint32=3 ncclInt64=4 ncclUint64=5
#: ncclFloat16=6 ncclFloat32=7 ncclFloat64=8 ncclBfloat16=9
NCCL_DTYPE = {"float16": 6, "float32": 7, "bfloat16": 9}
NCCL_SUM = 0  # ncclRedOp_t ncclSum
NCCL_UNIQUE_ID_BYTES = 128
NCCL_SONAME = "libnccl.so.2"


def nccl_dtype_enum(dtype: str) -> int:
    """ncclDataType_t value of one of :data:`DTYPES`' names."""
    try:
        return NCCL_DTYPE[dtype]
    except KeyError:
        raise ValueError(f"no NCCL datatype for {dtype!r}") from None


def nccl_version_string(code: int) -> str:
    """``ncclGetVersion`` code to ``"major.minor.patch"``: ``NCCL_VERSION_CODE`` is major*10000 + minor*100 +
    patch since 2.9 (22809 -> "2.28.9"), major*1000 + minor*100 + patch before (2708 -> "2.7.8")."""
    code = int(code)
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def nccl_paths_from_maps(maps_text: str) -> list[str]:
    """Paths of every mapped file whose name contains ``libnccl.so`` in a ``/proc/<pid>/maps`` text, in order,
    without repeats (`` (deleted)`` suffixes removed; ``libnccl-net*.so`` plugins are not matched)."""
    out: list[str] = []
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = parts[5].strip()
        if path.endswith(" (deleted)"):
            path = path[:-len(" (deleted)")]
        if "libnccl.so" in os.path.basename(path) and path not in out:
            out.append(path)
    return out


def nccl_library_candidates(maps_text: str, site_dirs) -> list[str]:
    """Where to load libnccl from, best first: the copy this process already maps (torch's own, so that we
    drive the same NCCL that torch reports), then an ``nvidia-nccl-cu*`` wheel's ``nvidia/*/lib/libnccl.so*``
    under ``site_dirs``, then the bare soname (the dynamic loader's search: LD_LIBRARY_PATH, ldconfig)."""
    import glob
    cands = nccl_paths_from_maps(maps_text)
    for d in site_dirs:
        for p in sorted(glob.glob(os.path.join(d, "nvidia", "*", "lib", "libnccl.so*"))):
            if p not in cands:
                cands.append(p)
    cands.append(NCCL_SONAME)
    return cands


def _site_dirs() -> list[str]:
    import site
    dirs = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    dirs += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    return list(dict.fromkeys(dirs))


class NcclError(RuntimeError):
    pass


class Nccl:
    """libnccl through ctypes: restype/argtypes set for every function used (nccl.h signatures).
    Raises OSError when the library cannot be loaded or lacks a required symbol."""

    REQUIRED = ("ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclAllReduce", "ncclCommDestroy",
                "ncclGetErrorString")

    def __init__(self, path: str):
        import ctypes as C
        self.path = path
        lib = C.CDLL(path)

        class UniqueId(C.Structure):  # typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
            _fields_ = [("internal", C.c_char * NCCL_UNIQUE_ID_BYTES)]

        self.UniqueId = UniqueId
        sigs = {  # name: (restype, argtypes); ncclResult_t and the enums are C ints
            "ncclGetVersion": (C.c_int, [C.POINTER(C.c_int)]),
            "ncclGetUniqueId": (C.c_int, [C.POINTER(UniqueId)]),
            # ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId /* by value */, int rank)
            "ncclCommInitRank": (C.c_int, [C.POINTER(C.c_void_p), C.c_int, UniqueId, C.c_int]),
            # ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
            #               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
            "ncclAllReduce": (C.c_int, [C.c_void_p, C.c_void_p, C.c_size_t, C.c_int, C.c_int, C.c_void_p,
                                        C.c_void_p]),
            "ncclCommDestroy": (C.c_int, [C.c_void_p]),
            "ncclCommFinalize": (C.c_int, [C.c_void_p]),  # NCCL >= 2.14
            "ncclGetErrorString": (C.c_char_p, [C.c_int]),
            "ncclGetLastError": (C.c_char_p, [C.c_void_p]),  # NCCL >= 2.13
        }
        self.fn = {}
        for name, (res, argt) in sigs.items():
            try:
                f = getattr(lib, name)
            except AttributeError:
                if name in self.REQUIRED:
                    raise OSError(f"{path}: symbol {name} not found") from None
                continue
            f.restype, f.argtypes = res, argt
            self.fn[name] = f
        self.comm = None
        v = C.c_int(0)
        self.check(self.fn["ncclGetVersion"](C.byref(v)), "ncclGetVersion")
        self.version_code = v.value
        self.version = nccl_version_string(v.value)
        self.all_reduce = self.fn["ncclAllReduce"]  # raw: (send, recv, count, dtype, op, comm, stream) -> int

    def error(self, rc: int, what: str) -> NcclError:
        try:
            msg = (self.fn["ncclGetErrorString"](rc) or b"").decode(errors="replace")
        except Exception:  # noqa: BLE001
            msg = "?"
        last = ""
        if "ncclGetLastError" in self.fn:
            try:
                last = (self.fn["ncclGetLastError"](self.comm) or b"").decode(errors="replace")
            except Exception:  # noqa: BLE001
                last = ""
        return NcclError(f"{what} failed: ncclResult {rc} ({msg})" + (f": {last}" if last else ""))

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise self.error(rc, what)

    def unique_id_bytes(self) -> bytes:
        uid = self.UniqueId()
        self.check(self.fn["ncclGetUniqueId"](uid), "ncclGetUniqueId")
        return bytes(uid)

    def init_rank(self, nranks: int, uid: bytes, rank: int) -> None:
        import ctypes as C
        if len(uid) != NCCL_UNIQUE_ID_BYTES:
            raise ValueError(f"ncclUniqueId must be {NCCL_UNIQUE_ID_BYTES} bytes, got {len(uid)}")
        comm = C.c_void_p()
        self.check(self.fn["ncclCommInitRank"](C.byref(comm), nranks, self.UniqueId.from_buffer_copy(uid), rank),
                   "ncclCommInitRank")
        self.comm = comm

    def all_reduce_checked(self, send: int, recv: int, count: int, dtype: int, stream: int) -> None:
        self.check(self.all_reduce(send, recv, count, dtype, NCCL_SUM, self.comm, stream), "ncclAllReduce")

    def destroy(self) -> None:
        if self.comm is None:
            return
        comm, self.comm = self.comm, None
        if "ncclCommFinalize" in self.fn:
            self.fn["ncclCommFinalize"](comm)
        self.fn["ncclCommDestroy"](comm)


def load_nccl(candidates) -> tuple[Nccl | None, list[str]]:
    """The first of ``candidates`` that loads with every required symbol, and the reasons the ones before it
    failed; ``(None, reasons)`` when none does."""
    errors = []
    for path in candidates:
        try:
            return Nccl(path), errors
        except (OSError, NcclError) as e:
            errors.append(f"{path}: {e}")
    return None, errors




def pick_nccl_library(notes: list) -> Nccl | None:
    """libnccl for api "nccl" (call after ``import torch`` and CUDA init, so torch's copy is mapped), or None
    with a note appended to ``notes`` saying why (the worker then falls back to api "torch"). Local and
    deterministic: every rank of one node decides the same."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        maps = ""
    lib, errors = load_nccl(nccl_library_candidates(maps, _site_dirs()))
    if lib is None:
        notes.append("api nccl unavailable (" + "; ".join(errors)[:600] + "): fell back to api torch")
    return lib
