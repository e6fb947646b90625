"""GPUDirect RDMA readiness: peer-memory support, InfiniBand/RoCE ports, GPU->NIC PCIe distance,
and (when perftest is installed) an ``ib_write_bw --use_cuda`` loopback per HCA.

Args (JSON object, every key optional)::

    {"sysfs": "/sys",               # sysfs root (tests point it at a copy of the tree)
     "proc": "/proc",               # procfs root, likewise (modules, kallsyms, driver/nvidia/version)
     "gpu_bus_ids": ["0000:19:00.0"],   # default: from NVML (pynvml); none and no NVML: topology skipped
     "perftest": false,             # run ib_write_bw loopbacks
     "perftest_seconds": 5, "perftest_size": 1048576, "hcas": [...]}   # HCAs for perftest (default: all active)

Output::

    {"peermem": {"nvidia_peermem_loaded", "nvidia_peermem_state", "nvidia_peermem_version", "memory_peers",
                 "nv_peermem_registered", "peer_memory_api", "dma_buf_kernel", "ib_umem_dmabuf",
                 "nvidia_open_kernel_module", "kernel_symbols_readable"},
     "devices": [{"name": "mlx5_0", "pci_address", "numa_node", "hca_type", "board_id",   # sysfs text or null
                  "ports": [{"port", "state", "phys_state", "link_layer", "rate", "rate_gbps",
                             "gids": [{"index", "gid", "type"}],       # used entries only (see below)
                             "pkeys": [{"index", "pkey"}]}]}],          # used entries only
     "topology": [{"gpu_index", "gpu_bus_id", "nic", "nic_pci_address", "path": "PIX"|"PXB"|"PHB"|"NODE"|"SYS",
                   "bridges", "numa_gpu", "numa_nic"}] | null, "topology_reason",
     "perftest": "ib_write_bw path" | null,
     "loopback": [{"hca", "gpu", "bw_gbps", "bw_gbits", "error"}],
     "link_counters": {"start", "end"}}    # only when loopbacks ran: _linkcounters.snapshot before and after

Peer memory (facts only, see :func:`peermem`; whether GPUDirect RDMA is ready is judged on the controller,
gpuaccept/judging/storage.py ``gdr_readiness``): nvidia_peermem in /proc/modules and its state; the
peer-memory clients registered with ib_core (/sys/kernel/mm/memory_peers/<client>/version, "nv_mem" and
"nv_mem_nc" for nvidia-peermem); kernel symbols for the dma-buf path (dma_buf_export, ib_umem_dmabuf_get)
and the PeerDirect API (ib_register_peer_memory_client); the NVIDIA open kernel module
(/proc/driver/nvidia/version says "Open Kernel Module").
Ports: /sys/class/infiniband/<dev>/ports/<n>/{state, phys_state, link_layer,
rate} ("4: ACTIVE", "5: LinkUp", "InfiniBand"|"Ethernet", "400 Gb/sec (4X NDR)"; rate_gbps in Gb/s as the
kernel writes it). GID and P_Key tables (:func:`gid_table`, :func:`pkey_table`): ``<port>/gids/<i>`` (the GID,
8 groups of 4 hex digits), ``<port>/gid_attrs/types/<i>`` ("IB/RoCE v1", "RoCE v2"; the kernel refuses the read
of an unused entry) and ``<port>/pkeys/<i>`` ("0xffff"), as ib_core writes them (drivers/infiniband/core/
sysfs.c); an all-zero GID or a P_Key 0x0000 is an unused slot of the table and is left out: only the entries in
use are reported, with their index.

Topology (same classes as ``nvidia-smi topo -m``, computed from sysfs): the resolved
/sys/bus/pci/devices/<bdf> paths of GPU and NIC give their chains of PCI functions from the root
complex down. Different root complexes: NODE (same NUMA node) or SYS. Same root complex, common
ancestor is none of the functions or the root port (the first function): PHB -- traffic crosses the
CPU's root complex. Deeper common ancestor (a PCIe switch): PIX when at most 3 bridge functions are
traversed (one switch: downstream port, upstream port, downstream port), else PXB. The nearest NIC of
a GPU is the one with the best class, then the fewest bridges.

Loopback: ``ib_write_bw -d <hca> --use_cuda=<gpu> -D <s> -s <size> --report_gbits`` as server and the
same with ``localhost`` as client; BW average (Gb/s) from the client's table; bw_gbps = Gb/s / 8 (GB/s,
1e9 B/s).
The node's InfiniBand/RoCE port error counters (_linkcounters.ib_counters, sysfs only) are read right before
the first loopback and right after the last (``link_counters``; a reading that fails is ``{"error": str}``), for
the suite to judge their growth over the load (gpuaccept/judging/linkcounters.py).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

from _linkcounters import snapshot
from _probe import log, reject_unknown, run
from _sysfs import read_text

ARG_KEYS = {"sysfs", "proc", "gpu_bus_ids", "perftest", "perftest_seconds", "perftest_size", "hcas"}
RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}
BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def sysfs_bdf(bus_id: str) -> str:
    """sysfs form ("0000:19:00.0") of an NVML bus id ("00000000:19:00.0")."""
    from _pci import sysfs_name  # imported here: the one PCI normaliser, see _pci.py

    return sysfs_name(bus_id)


def pci_chain(sysfs: str, bdf: str) -> tuple[str, list[str]] | None:
    """(root complex "pci0000:16", [PCI functions from the root port down to ``bdf``]) or None."""
    p = os.path.realpath(f"{sysfs}/bus/pci/devices/{bdf}")
    if not os.path.exists(p):
        return None
    parts = p.split("/")
    root = next((i for i, s in enumerate(parts) if s.startswith("pci") and ":" in s), None)
    if root is None:
        return None
    return parts[root], [s for s in parts[root + 1:] if BDF.match(s)]


def classify(a: tuple[str, list[str]], b: tuple[str, list[str]], same_numa: bool) -> tuple[str, int]:
    """(class, bridges traversed) between two devices given by :func:`pci_chain` (see module doc)."""
    if a[0] != b[0]:
        return ("NODE" if same_numa else "SYS"), -1
    ca, cb = a[1], b[1]
    k = 0
    while k < min(len(ca), len(cb)) - 1 and ca[k] == cb[k]:
        k += 1
    if k <= 1:  # common ancestor: the host bridge (k 0) or the root port (k 1)
        return "PHB", len(ca) + len(cb) - 2
    bridges = (len(ca) - 1 - k) + (len(cb) - 1 - k) + 1
    return ("PIX" if bridges <= 3 else "PXB"), bridges


def parse_rate(text: str | None) -> float | None:
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", text or "")
    return float(m.group(1)) if m else None


def _index_order(names) -> list[str]:
    return sorted(names, key=lambda s: (0, int(s)) if s.isdigit() else (1, s))


def gid_table(port_dir: str) -> list[dict]:
    """The used entries of a port's GID table: ``[{"index": int, "gid": str, "type": str | None}]`` from
    ``<port_dir>/gids/<i>`` and ``gid_attrs/types/<i>`` (module docstring); an all-zero GID (or one that cannot be
    read) is an unused slot, left out; ``type`` None where the kernel has no type file for it."""
    out = []
    gdir = os.path.join(port_dir, "gids")
    for i in _index_order(os.listdir(gdir)) if os.path.isdir(gdir) else []:
        gid = read_text(os.path.join(gdir, i))
        if not gid or not gid.replace(":", "").strip("0"):
            continue
        out.append({"index": int(i) if i.isdigit() else i, "gid": gid.lower(),
                    "type": read_text(os.path.join(port_dir, "gid_attrs", "types", i))})
    return out


def pkey_table(port_dir: str) -> list[dict]:
    """The used entries of a port's P_Key table: ``[{"index": int, "pkey": "0xffff"}]`` from ``<port_dir>/pkeys/
    <i>`` (lower case; the high bit is full membership: IBA Vol. 1 10.9 Partitions); 0x0000 (an invalid P_Key, IBA
    10.9: an unused slot) and unreadable entries are left out."""
    out = []
    pdir = os.path.join(port_dir, "pkeys")
    for i in _index_order(os.listdir(pdir)) if os.path.isdir(pdir) else []:
        text = (read_text(os.path.join(pdir, i)) or "").lower()
        try:
            value = int(text, 16)
        except ValueError:
            continue
        if value & 0x7FFF:  # the low 15 bits name the partition; 0x0000 and 0x8000 are invalid (IBA Vol. 1 10.9)
            out.append({"index": int(i) if i.isdigit() else i, "pkey": f"0x{value:04x}"})
    return out


def ib_devices(sysfs: str) -> list[dict]:
    """Every device under ``<sysfs>/class/infiniband`` with its ports (the ``devices`` list of the module
    docstring); [] when there is none."""
    base = f"{sysfs}/class/infiniband"
    out = []
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        d = f"{base}/{name}"
        pci = os.path.basename(os.path.realpath(f"{d}/device")) if os.path.exists(f"{d}/device") else None
        ports = []
        for port in sorted(os.listdir(f"{d}/ports"), key=lambda s: int(s) if s.isdigit() else 0) \
                if os.path.isdir(f"{d}/ports") else []:
            pd = f"{d}/ports/{port}"
            rate = read_text(f"{pd}/rate")
            ports.append({"port": int(port) if port.isdigit() else port, "state": read_text(f"{pd}/state"),
                          "phys_state": read_text(f"{pd}/phys_state"), "link_layer": read_text(f"{pd}/link_layer"),
                          "rate": rate, "rate_gbps": parse_rate(rate), "gids": gid_table(pd), "pkeys": pkey_table(pd)})
        numa = read_text(f"{sysfs}/bus/pci/devices/{pci}/numa_node") if pci else None
        out.append({"name": name, "pci_address": pci, "numa_node": int(numa) if numa not in (None, "") else None,
                    "hca_type": read_text(f"{d}/hca_type"), "board_id": read_text(f"{d}/board_id"), "ports": ports})
    return out


#: kernel symbols looked for in /proc/kallsyms: dma_buf_export (drivers/dma-buf/dma-buf.c: the kernel can
#: export dma-bufs), ib_umem_dmabuf_get (drivers/infiniband/core/umem_dmabuf.c, Linux 5.12+: the RDMA core
#: can register a dma-buf as a memory region), ib_register_peer_memory_client (MLNX_OFED / DOCA-OFED ib_core
#: peer_mem.c: the PeerDirect API nvidia-peermem needs)
KALLSYMS = ("dma_buf_export", "ib_umem_dmabuf_get", "ib_register_peer_memory_client")
#: peer-memory clients nvidia-peermem registers with ib_core (open-gpu-kernel-modules
#: kernel-open/nvidia-peermem/nvidia-peermem.c: DRV_NAME "nv_mem", and DRV_NAME "_nc" = "nv_mem_nc" for the
#: persistent-pages client); ib_core creates
#: /sys/kernel/mm/memory_peers/<client>/version on registration (peer_mem.c ib_register_peer_memory_client).
#: NCCL's ncclIbGdrSupport looks for the same two files (src/transport/net_ib), and also accepts
#: /sys/module/nvidia_peermem/version (the module loaded), reported here as nvidia_peermem_version.
NV_PEER_CLIENTS = ("nv_mem", "nv_mem_nc")


def kernel_symbols(proc: str, names=KALLSYMS) -> dict[str, bool]:
    """{symbol: present} for ``names`` in ``<proc>/kallsyms`` (all False when it cannot be read)."""
    found = dict.fromkeys(names, False)
    try:
        with open(f"{proc}/kallsyms", encoding="utf-8", errors="replace") as f:
            for ln in f:
                parts = ln.split()
                if len(parts) >= 3 and parts[2] in found:
                    found[parts[2]] = True
    except OSError:
        pass
    return found


def peermem(sysfs: str = "/sys", proc: str = "/proc") -> dict:
    """What the kernel says about GPUDirect RDMA's two paths (facts only; the controller judges them).

    Returns ``{"nvidia_peermem_loaded": bool, "nvidia_peermem_state": "Live" | "Loading" | "Unloading" | None,
    "nvidia_peermem_version": str | None, "memory_peers": {client: version}, "nv_peermem_registered": bool,
    "peer_memory_api": bool, "dma_buf_kernel": bool, "ib_umem_dmabuf": bool, "nvidia_open_kernel_module": bool,
    "kernel_symbols_readable": bool}``.

    Sources: ``<proc>/modules`` (name, size, refcount, users, state, address: proc(5)); ``<sysfs>/module/
    nvidia_peermem/version``; every ``<sysfs>/kernel/mm/memory_peers/<client>/version`` (ib_core's record of
    a registered peer-memory client; ``nv_peermem_registered`` when a client of ``NV_PEER_CLIENTS`` is there);
    ``<proc>/kallsyms`` for :data:`KALLSYMS`; ``<proc>/driver/nvidia/version`` containing "Open Kernel Module".
    """
    state = None
    for ln in (read_text(f"{proc}/modules") or "").splitlines():
        f = ln.split()
        if f and f[0] == "nvidia_peermem":
            state = f[4] if len(f) > 4 else "Live"
    peers: dict[str, str | None] = {}
    base = f"{sysfs}/kernel/mm/memory_peers"
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        if os.path.exists(f"{base}/{name}/version"):
            peers[name] = read_text(f"{base}/{name}/version")
    syms = kernel_symbols(proc)
    return {"nvidia_peermem_loaded": state is not None, "nvidia_peermem_state": state,
            "nvidia_peermem_version": read_text(f"{sysfs}/module/nvidia_peermem/version"),
            "memory_peers": peers, "nv_peermem_registered": any(c in peers for c in NV_PEER_CLIENTS),
            "peer_memory_api": syms["ib_register_peer_memory_client"], "dma_buf_kernel": syms["dma_buf_export"],
            "ib_umem_dmabuf": syms["ib_umem_dmabuf_get"],
            "nvidia_open_kernel_module": "Open Kernel Module" in (read_text(f"{proc}/driver/nvidia/version") or ""),
            "kernel_symbols_readable": os.access(f"{proc}/kallsyms", os.R_OK)}


def nvml_bus_ids() -> tuple[list[str] | None, str | None]:
    try:
        import pynvml
    except ImportError:
        return None, "pynvml not available: GPU->NIC topology skipped"
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError: no driver / no GPU
        return None, f"NVML: {e}"
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            bid = pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).busId
            out.append(bid.decode() if isinstance(bid, bytes) else bid)
        return out, None
    finally:
        pynvml.nvmlShutdown()


def topology(sysfs: str, gpu_bus_ids: list[str], devices: list[dict]) -> list[dict]:
    rows = []
    for gi, bid in enumerate(gpu_bus_ids):
        g = sysfs_bdf(bid)
        gc = pci_chain(sysfs, g)
        gnuma = read_text(f"{sysfs}/bus/pci/devices/{g}/numa_node")
        best = None
        for dev in devices:
            nc = pci_chain(sysfs, dev["pci_address"]) if dev["pci_address"] else None
            if gc is None or nc is None:
                continue
            same = gnuma is not None and str(dev["numa_node"]) == gnuma and gnuma != "-1"
            cls, bridges = classify(gc, nc, same)
            cand = {"gpu_index": gi, "gpu_bus_id": bid, "nic": dev["name"], "nic_pci_address": dev["pci_address"],
                    "path": cls, "bridges": bridges, "numa_gpu": int(gnuma) if gnuma else None,
                    "numa_nic": dev["numa_node"]}
            if best is None or (RANK[cls], bridges) < (RANK[best["path"]], best["bridges"]):
                best = cand
        rows.append(best or {"gpu_index": gi, "gpu_bus_id": bid, "nic": None, "path": None,
                             "error": "GPU or NIC not found in sysfs"})
    return rows


def loopback(ibwb: str, hca: str, gpu: int, seconds: int, size: int, port: int) -> dict:
    res = {"hca": hca, "gpu": gpu, "bw_gbits": None, "bw_gbps": None, "error": None}
    common = [ibwb, "-d", hca, f"--use_cuda={gpu}", "-D", str(seconds), "-s", str(size), "--report_gbits",
              "-p", str(port)]
    server = subprocess.Popen(common, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(1.0)
        cli = subprocess.run(common + ["localhost"], capture_output=True, text=True, timeout=seconds + 60)
        out = cli.stdout + cli.stderr
        # table: #bytes  #iterations  BW peak[Gb/sec]  BW average[Gb/sec]  MsgRate[Mpps]
        rows = [ln.split() for ln in out.splitlines() if re.match(r"^\s*\d+\s+\d+\s+[\d.]+\s+[\d.]+", ln)]
        if cli.returncode != 0 or not rows:
            res["error"] = f"ib_write_bw rc {cli.returncode}: {(out.strip().splitlines() or ['no output'])[-1][:300]}"
        else:
            res["bw_gbits"] = float(rows[-1][3])
            res["bw_gbps"] = round(res["bw_gbits"] / 8, 3)
    except subprocess.TimeoutExpired:
        res["error"] = f"ib_write_bw client did not finish within {seconds + 60} s"
    finally:
        server.kill()
        server.wait()
    return res


def main(a: dict) -> dict:
    reject_unknown(a, ARG_KEYS)
    sysfs = a.get("sysfs", "/sys")
    devices = ib_devices(sysfs)
    doc = {"peermem": peermem(sysfs, a.get("proc", "/proc")), "devices": devices, "topology": None,
           "topology_reason": None,
           "perftest": shutil.which("ib_write_bw"), "loopback": []}
    bus_ids, why = (a["gpu_bus_ids"], None) if a.get("gpu_bus_ids") else nvml_bus_ids()
    if bus_ids and devices:
        doc["topology"] = topology(sysfs, bus_ids, devices)
    else:
        doc["topology_reason"] = why or ("no GPU" if not bus_ids else "no InfiniBand/RoCE device")
    if a.get("perftest") and doc["perftest"] and devices and bus_ids:
        near = {r["gpu_index"]: r.get("nic") for r in doc["topology"] or []}
        want = a.get("hcas") or [d["name"] for d in devices
                                 if any((p["state"] or "").endswith("ACTIVE") for p in d["ports"])]
        start = _link_counters(sysfs) if want else None
        for n, hca in enumerate(want):
            gpu = next((g for g, nic in near.items() if nic == hca), 0)
            log(f"ib_write_bw loopback on {hca} with GPU {gpu}")
            doc["loopback"].append(loopback(doc["perftest"], hca, gpu, int(a.get("perftest_seconds", 5)),
                                            int(a.get("perftest_size", 1 << 20)), 18515 + n))
        if want:
            doc["link_counters"] = {"start": start, "end": _link_counters(sysfs)}
    return doc


def _link_counters(sysfs: str) -> dict:
    """One reading of the port error counters (_linkcounters.snapshot without NVML: ib_write_bw loads the NIC and
    the GPU's PCIe, no NVLink); a reading that fails is said (``{"error": "<Type>: <msg>"}``), never the probe's
    failure."""
    try:
        return snapshot(sysfs, nvml=False)
    except Exception as e:  # noqa: BLE001 - the counters are a condition of the loopbacks, not their figure
        return {"error": f"{type(e).__name__}: {e}"[:300]}


if __name__ == "__main__":
    run(main)
