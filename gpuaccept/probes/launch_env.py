#!/usr/bin/env python3
"""Launch-environment probe: what a training job started in this session would find on the node.

Run on the node as ``python3 launch_env.py '{}'``; the runner starts it as it starts the NCCL ranks, so its limits
and environment are the ranks'. Standard library only (torch is asked for its NCCL version only when importable,
in a child process, so a broken CUDA install cannot take the probe down).

Args (JSON object, every key optional; the paths exist so tests can point at a tmpfs of their own)::

    {"shm_path": "/dev/shm", "proc_modules": "/proc/modules", "sys_module": "/sys/module",
     "torch_nccl": true, "timeout_s": 30}

Output::

    {"shm": {"path", "size_bytes", "free_bytes", "fs_type"} | {"path", "error"},
     "memlock": {"soft_kib": int | "unlimited", "hard_kib": int | "unlimited"},   # RLIMIT_MEMLOCK, getrlimit(2)
     "modules": {"nvidia": bool, "nvidia_uvm": bool, "nvidia_peermem": bool, "nv_peer_mem": bool,
                 "nvidia_fs": bool, "source": "/proc/modules" | "/sys/module" | null},
     "nvidia_open_module": bool | null,     # /sys/module/nvidia/... license "Dual MIT/GPL": the dma-buf path
     "kernel_release": str,
     "nccl": {"torch_version": "2.21.5" | null, "torch_error": str | null,
              "libraries": ["/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5", ...],   # ldconfig -p and LD_LIBRARY_PATH
              "net_plugin_env": str | null,  # NCCL_NET_PLUGIN
              "net_plugins": ["/opt/.../libnccl-net.so", ...]}}

Sources: getrlimit(2) (RLIM_INFINITY = unlimited; the kernel counts RLIMIT_MEMLOCK in bytes, ``ulimit -l`` prints
KiB); /proc/modules (proc(5)); NCCL's plugin loading (NCCL docs, "NCCL_NET_PLUGIN": NCCL looks for
``libnccl-net-<name>.so``, default ``libnccl-net.so``, through the dynamic loader's path).
"""
from __future__ import annotations

import glob
import os
import re
import resource
import subprocess
import sys

from _probe import reject_unknown, run

ARG_KEYS = {"shm_path", "proc_modules", "sys_module", "torch_nccl", "timeout_s"}
MODULES = ("nvidia", "nvidia_uvm", "nvidia_peermem", "nv_peer_mem", "nvidia_fs")


def shm(path: str) -> dict:
    """Size, free space (bytes, statvfs: f_blocks/f_bavail x f_frsize) and filesystem type of ``path``."""
    try:
        st = os.statvfs(path)
    except OSError as e:
        return {"path": path, "error": e.strerror or str(e)}
    return {"path": path, "size_bytes": st.f_blocks * st.f_frsize, "free_bytes": st.f_bavail * st.f_frsize,
            "fs_type": fs_type(path)}


def fs_type(path: str) -> str | None:
    """The filesystem type of the mount holding ``path`` (the longest mount point of /proc/self/mounts)."""
    real, best, kind = os.path.realpath(path), "", None
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2:
                    mnt = parts[1].replace("\\040", " ")
                    if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                        best, kind = mnt, parts[2]
    except OSError:
        return None
    return kind


def memlock() -> dict:
    """RLIMIT_MEMLOCK of this process (soft and hard), KiB or ``"unlimited"`` (RLIM_INFINITY)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)

    def kib(v):
        return "unlimited" if v == resource.RLIM_INFINITY else v // 1024
    return {"soft_kib": kib(soft), "hard_kib": kib(hard)}


def modules(proc_modules: str, sys_module: str) -> dict:
    """Which of :data:`MODULES` are loaded: /proc/modules (live modules), else /sys/module/<name> (built-in too)."""
    out = {m: False for m in MODULES}
    try:
        with open(proc_modules, encoding="utf-8", errors="replace") as f:
            names = {line.split()[0] for line in f if line.strip()}
        out.update({m: m in names for m in MODULES}, source=proc_modules)
        return out
    except OSError:
        pass
    if os.path.isdir(sys_module):
        out.update({m: os.path.isdir(os.path.join(sys_module, m)) for m in MODULES}, source=sys_module)
    else:
        out["source"] = None
    return out


def open_module(sys_module: str) -> bool | None:
    """True when the loaded nvidia module is the open kernel module (its version file beside a "Dual MIT/GPL"
    licence in /proc/driver/nvidia/version's line "Open Kernel Module"); None when not known."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as f:
            return "Open Kernel Module" in f.read()
    except OSError:
        return None


def _ldconfig(timeout: float) -> list[str]:
    for exe in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            p = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            continue
        return [line.rpartition("=>")[2].strip() for line in p.stdout.splitlines() if "=>" in line]
    return []


def nccl_libraries(timeout: float) -> tuple[list[str], list[str]]:
    """(libnccl.so* paths, libnccl-net*.so paths) the dynamic loader finds: ``ldconfig -p`` and LD_LIBRARY_PATH."""
    paths = _ldconfig(timeout)
    for d in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":")):
        paths += glob.glob(os.path.join(d, "libnccl*.so*"))
    libs = sorted({os.path.realpath(p) for p in paths if re.search(r"/libnccl\.so", p)})
    plugins = sorted({p for p in paths if re.search(r"/libnccl-net[^/]*\.so", p)})
    return libs, plugins


def torch_nccl(timeout: float) -> tuple[str | None, str | None]:
    """(NCCL version torch carries, as "2.21.5", or None; why not), asked in a child Python."""
    code = "import torch,sys;v=torch.cuda.nccl.version();print('.'.join(map(str,v)) if isinstance(v,tuple) else v)"
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{type(e).__name__}: {e}"
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["torch failed"])[-1][:300]
    return p.stdout.strip() or None, None


def main(args: dict) -> dict:
    reject_unknown(args, ARG_KEYS)
    timeout = float(args.get("timeout_s", 30))
    sys_module = args.get("sys_module", "/sys/module")
    libs, plugins = nccl_libraries(timeout)
    version, why = torch_nccl(timeout) if args.get("torch_nccl", True) else (None, "not asked")
    return {"shm": shm(args.get("shm_path", "/dev/shm")), "memlock": memlock(),
            "modules": modules(args.get("proc_modules", "/proc/modules"), sys_module),
            "nvidia_open_module": open_module(sys_module), "kernel_release": os.uname().release,
            "nccl": {"torch_version": version, "torch_error": why, "libraries": libs,
                     "net_plugin_env": os.environ.get("NCCL_NET_PLUGIN"), "net_plugins": plugins}}


if __name__ == "__main__":
    run(main)
