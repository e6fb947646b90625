#!/usr/bin/env python3
"""NVLink / GPU-to-GPU topology probe (NVML), with optional P2P bandwidth measured through torch.

Run on the node as ``python3 nvlink.py '<json args>'``. Args (all optional)::

    {"sample_seconds": float,   # read the link error counters twice, this far apart; adds errors_delta
     "p2p_bandwidth": bool,     # also measure GPU-to-GPU copy bandwidth with torch (needs CUDA torch)
     "bytes": int,              # bytes per copy for the bandwidth test (default 1 GiB)
     "iters": int, "reps": int} # copies per timed run (default 5), timed runs per figure (default 5)

Output::

    {"driver": str, "gpu_count": int,
     "gpus": [{"index", "pci_bus_id", "nvlink_supported": bool,
               "link_count": int | nvml_error,          # NVML_FI_DEV_NVLINK_LINK_COUNT
               "speed_mbps_common": int | nvml_error,   # NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON
               "active_count": int | nvml_error,
               "links": [{"link", "active": bool | nvml_error, "version", "remote_pci_bus_id",
                          "remote_device_type": "GPU" | "IBMNPU" | "SWITCH" | "UNKNOWN" | nvml_error,
                          "speed_mbps", "errors": {"crc_flit", "crc_data", "replay", "recovery"},
                          "errors_delta": {...}  # only with sample_seconds
                         }]}],
     "pairs": [{"a": i, "b": j, "common_ancestor": "X"|"PIX"|"PXB"|"PHB"|"NODE"|"SYS" | nvml_error,
                "nvlink": bool, "nvlink_via": "direct" | "nvswitch" | None, "nvlink_count": int,
                "topo": "NV18" | "PHB" | ...,          # what `nvidia-smi topo -m` would print
                "p2p": {"read", "write", "nvlink", "atomics"}}],   # status names, or nvml_error
     "p2p_bandwidth": [{"a", "b", "a_pci_bus_id", "b_pci_bus_id", "unidir_gbps", "bidir_gbps", "peer_access"}],
                                      # only when asked; a, b: torch indices
     "p2p_bandwidth_error": str}                                                 # when it could not run

A GPU without NVLink (every link answers "Not Supported", e.g. a one-GPU VM) has ``nvlink_supported``
false, ``links`` empty and ``active_count`` ``{"nvml_error": "Not Supported"}``: never a silent 0.
The probe fails (rc 1) when NVML cannot be used at all: no pynvml, no driver, no GPU.

Sources: NVML API reference (https://docs.nvidia.com/deploy/nvml-api/): nvmlDeviceGetNvLinkState,
nvmlDeviceGetNvLinkVersion, nvmlDeviceGetNvLinkRemotePciInfo_v2, nvmlDeviceGetNvLinkRemoteDeviceType,
nvmlDeviceGetNvLinkErrorCounter (nvmlNvLinkErrorCounter_t), nvmlDeviceGetFieldValues (NVML_FI_DEV_NVLINK_*),
nvmlDeviceGetTopologyCommonAncestor (nvmlGpuTopologyLevel_t), nvmlDeviceGetP2PStatus
(nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t); the topology abbreviations are the legend of
``nvidia-smi topo -m``. Standard library + pynvml (+ torch for the bandwidth test only).
"""
from __future__ import annotations

import re
import statistics
import time

from _nvml import call, is_error, nvml_error, text
from _probe import ProbeFailed, log, run

# nvmlGpuTopologyLevel_t -> nvidia-smi topo -m abbreviation (NVML API reference; nvidia-smi topo legend).
TOPOLOGY_LEVELS = {
    0: "X",  # NVML_TOPOLOGY_INTERNAL: same board
    10: "PIX",  # NVML_TOPOLOGY_SINGLE: at most one PCIe bridge
    20: "PXB",  # NVML_TOPOLOGY_MULTIPLE: several PCIe bridges, no host bridge
    30: "PHB",  # NVML_TOPOLOGY_HOSTBRIDGE: through a PCIe host bridge
    40: "NODE",  # NVML_TOPOLOGY_NODE (= NVML_TOPOLOGY_CPU): host bridges within a NUMA node
    50: "SYS",  # NVML_TOPOLOGY_SYSTEM: across NUMA nodes (SMP interconnect)
}

# nvmlGpuP2PCapsIndex_t values (nvml.h). Defined here as plain ints: pynvml 13.x defines
# NVML_P2P_CAPS_INDEX_READ as the tuple (0,) (a trailing comma), which ctypes cannot pass.
P2P_CAPS = (("read", 0), ("write", 1), ("nvlink", 2), ("atomics", 3))

# nvmlGpuP2PStatus_t (nvml.h).
P2P_STATUS = {
    0: "OK",
    1: "CHIPSET_NOT_SUPPORTED",
    2: "GPU_NOT_SUPPORTED",
    3: "IOH_TOPOLOGY_NOT_SUPPORTED",
    4: "DISABLED_BY_REGKEY",
    5: "NOT_SUPPORTED",
    6: "UNKNOWN",
}

# nvmlIntNvLinkDeviceType_t (nvml.h): NVML_NVLINK_DEVICE_TYPE_*.
NVLINK_DEVICE_TYPES = {0x00: "GPU", 0x01: "IBMNPU", 0x02: "SWITCH", 0xFF: "UNKNOWN"}

# nvmlNvLinkErrorCounter_t (nvml.h): NVML_NVLINK_ERROR_DL_*.
NVLINK_ERROR_COUNTERS = (("replay", 0), ("recovery", 1), ("crc_flit", 2), ("crc_data", 3))

# Field ids (nvml.h).
FI_NVLINK_SPEED_MBPS_COMMON = 90  # NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON
FI_NVLINK_LINK_COUNT = 91  # NVML_FI_DEV_NVLINK_LINK_COUNT
FI_NVLINK_GET_SPEED = 164  # NVML_FI_DEV_NVLINK_GET_SPEED, scopeId = link (NVML >= 12.5xx)

_NVML_ERROR_INVALID_ARGUMENT = 2
_NVLINK_MAX_LINKS_FALLBACK = 18

_PCI_BUS_ID_RE = re.compile(
    r"^(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})(?:\.(?P<fn>[0-7]))?$"
)


# ---------------------------------------------------------------------------------------------------------
# pure helpers (imported by the tests)


def normalize_bus_id(bus_id) -> str | None:
    """Normalize a PCI bus id to ``DDDDDDDD:BB:DD.F`` upper case; None when it is not one."""
    if bus_id is None or is_error(bus_id):
        return None
    s = text(bus_id).strip()
    if s.upper().startswith("PCI:"):
        s = s[4:]
    m = _PCI_BUS_ID_RE.match(s)
    if not m:
        return None
    dom = int(m.group("dom") or "0", 16)
    return "%08X:%02X:%02X.%X" % (dom, int(m.group("bus"), 16), int(m.group("dev"), 16), int(m.group("fn") or "0"))


def topology_name(level) -> str:
    """nvidia-smi topo abbreviation for an nvmlGpuTopologyLevel_t value (``"level_<n>"`` if unknown)."""
    return TOPOLOGY_LEVELS.get(int(level), f"level_{int(level)}")


def p2p_status_name(status) -> str:
    """Name of an nvmlGpuP2PStatus_t value (``"status_<n>"`` if unknown)."""
    return P2P_STATUS.get(int(status), f"status_{int(status)}")


def field_value(fv):
    """Python value of one c_nvmlFieldValue_t, or ``nvml_error`` when its nvmlReturn is not success.

    valueType is nvmlValueType_t: 0 double, 1 uint, 2 ulong, 3 ulonglong, 4 slonglong, 5 sint, 6 ushort.
    """
    ret = int(fv.nvmlReturn)
    if ret != 0:
        try:
            import pynvml

            return {"nvml_error": str(pynvml.NVMLError(ret))}
        except Exception:
            return {"nvml_error": f"NVML error code {ret}"}
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(
        int(fv.valueType), "ullVal")
    return getattr(fv.value, member)


def _active_links(links):
    return [lk for lk in links if lk.get("active") is True]


def pair_nvlink(links_a: list, links_b: list, bus_a: str | None, bus_b: str | None,
                local_buses: set, p2p_nvlink: str | None = None) -> dict:
    """NVLink connection between GPUs a and b from their per-link records.

    Direct: active links of a whose remote bus id is b's. Through NVSwitch (HGX boards): both GPUs have
    active links whose remote is a switch (remote_device_type SWITCH, or, when the type is unknown, a remote
    bus id that is no local GPU while NVML's P2P NVLink status says OK); the count is then the smaller
    of the two GPUs' switch links, as ``nvidia-smi topo -m`` prints NV18 on an 8-GPU HGX H100/H200.
    """
    nb = normalize_bus_id(bus_b)
    direct = sum(1 for lk in _active_links(links_a) if nb is not None and normalize_bus_id(lk.get("remote_pci_bus_id")) == nb)
    if direct == 0 and bus_a is not None:  # links are normally symmetric; count from b's side if a's lacks ids
        na = normalize_bus_id(bus_a)
        direct = sum(1 for lk in _active_links(links_b) if na is not None and normalize_bus_id(lk.get("remote_pci_bus_id")) == na)
    if direct:
        return {"nvlink": True, "nvlink_via": "direct", "nvlink_count": direct}

    def switch_links(links):
        n = 0
        for lk in _active_links(links):
            rtype = lk.get("remote_device_type")
            if rtype == "SWITCH":
                n += 1
            elif not isinstance(rtype, str) or rtype == "UNKNOWN":
                rb = normalize_bus_id(lk.get("remote_pci_bus_id"))
                if rb is not None and rb not in local_buses and p2p_nvlink == "OK":
                    n += 1
        return n

    sa, sb = switch_links(links_a), switch_links(links_b)
    if sa and sb:
        return {"nvlink": True, "nvlink_via": "nvswitch", "nvlink_count": min(sa, sb)}
    return {"nvlink": False, "nvlink_via": None, "nvlink_count": 0}


def topo_label(pair: dict) -> str:
    """What ``nvidia-smi topo -m`` prints for the pair: ``NV<n>`` when NVLinked, else the PCIe level."""
    if pair.get("nvlink"):
        return f"NV{pair['nvlink_count']}"
    ca = pair.get("common_ancestor")
    return ca if isinstance(ca, str) else "?"


def counter_delta(before: dict, after: dict) -> dict:
    """after - before for each numeric counter; an error on either side is carried through."""
    out = {}
    for k, a in after.items():
        b = before.get(k)
        if isinstance(a, int) and isinstance(b, int):
            out[k] = a - b
        else:
            out[k] = a if is_error(a) else b
    return out


# ---------------------------------------------------------------------------------------------------------
# NVML readings


def link_count(nv, handle):
    """NVML_FI_DEV_NVLINK_LINK_COUNT for the device (int) or ``nvml_error``."""
    vals = call(nv, "nvmlDeviceGetFieldValues", handle, [FI_NVLINK_LINK_COUNT])
    if is_error(vals):
        return vals
    return field_value(vals[0])


def link_errors(nv, handle, link: int) -> dict:
    """nvmlDeviceGetNvLinkErrorCounter for the DL replay/recovery/CRC counters of one link."""
    return {name: call(nv, "nvmlDeviceGetNvLinkErrorCounter", handle, link, counter)
            for name, counter in NVLINK_ERROR_COUNTERS}


def link_speeds(nv, handle, links: list) -> dict:
    """Per-link speed in Mbps via NVML_FI_DEV_NVLINK_GET_SPEED (scopeId = link): {link: value}."""
    if not links:
        return {}
    vals = call(nv, "nvmlDeviceGetFieldValues", handle, [(FI_NVLINK_GET_SPEED, lk) for lk in links])
    if is_error(vals):
        return {lk: vals for lk in links}
    return {lk: field_value(vals[i]) for i, lk in enumerate(links)}


def gpu_links(nv, handle) -> dict:
    """All NVLink readings of one GPU (see the module docstring)."""
    count = link_count(nv, handle)
    common = call(nv, "nvmlDeviceGetFieldValues", handle, [FI_NVLINK_SPEED_MBPS_COMMON])
    if not is_error(common):
        common = field_value(common[0])
    if isinstance(count, int) and count > 0:
        candidates = range(count)
    else:
        candidates = range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", _NVLINK_MAX_LINKS_FALLBACK)))

    links = []
    for link in candidates:
        try:
            state = nv.nvmlDeviceGetNvLinkState(handle, link)
            active = state == 1  # NVML_FEATURE_ENABLED
        except Exception as e:
            if getattr(e, "value", None) == _NVML_ERROR_INVALID_ARGUMENT:
                break  # past the device's last link
            active = nvml_error(e)
        links.append({"link": link, "active": active})

    supported = any(not is_error(lk["active"]) for lk in links)
    if supported and not (isinstance(count, int) and count > 0):
        while links and is_error(links[-1]["active"]):  # unknown link count: drop trailing non-links
            links.pop()
    doc = {"link_count": count, "speed_mbps_common": common, "nvlink_supported": supported}
    if not supported:
        doc["links"] = []
        doc["active_count"] = links[0]["active"] if links else {"nvml_error": "no NVLink links"}
        return doc

    speeds = link_speeds(nv, handle, [lk["link"] for lk in links])
    for lk in links:
        link = lk["link"]
        lk["version"] = call(nv, "nvmlDeviceGetNvLinkVersion", handle, link)
        lk["remote_pci_bus_id"] = call(nv, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link, conv=lambda p: text(p.busId))
        lk["remote_device_type"] = call(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link,
                                        conv=lambda t: NVLINK_DEVICE_TYPES.get(int(t), str(int(t))))
        lk["speed_mbps"] = speeds.get(link)
        lk["errors"] = link_errors(nv, handle, link)
    doc["links"] = links
    doc["active_count"] = len(_active_links(links))
    return doc


def pair_info(nv, ha, hb) -> dict:
    """Common PCIe ancestor and NVML P2P capability statuses between two GPU handles."""
    common = call(nv, "nvmlDeviceGetTopologyCommonAncestor", ha, hb, conv=topology_name)
    p2p = {name: call(nv, "nvmlDeviceGetP2PStatus", ha, hb, idx, conv=p2p_status_name) for name, idx in P2P_CAPS}
    return {"common_ancestor": common, "p2p": p2p}


# ---------------------------------------------------------------------------------------------------------
# P2P bandwidth (torch)


def _median_ms(torch, fn, stream, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _torch_bus_id(torch, index: int):
    """NVML-style PCI bus id of torch device ``index`` (as _gpu.pci_bus_id), or None."""
    try:
        p = torch.cuda.get_device_properties(index)
        return f"{p.pci_domain_id:08X}:{p.pci_bus_id:02X}:{p.pci_device_id:02X}.0"
    except (AttributeError, RuntimeError):
        return None


def measure_p2p_bandwidth(nbytes: int, iters: int = 5, reps: int = 5) -> list:
    """GPU-to-GPU copy bandwidth for every ordered pair, in GB/s (1e9 bytes/s).

    unidir: ``dst.copy_(src, non_blocking=True)`` from GPU a to GPU b, ``iters`` copies per timed run, timed
    with CUDA events on a's copy stream after a warm-up, median of ``reps`` runs. bidir: a->b and b->a at
    once on separate streams (torch copies on the source device's current stream and fences the
    destination's current stream, so each direction gets its own pair of streams), total bytes / time.
    bidir is measured once per unordered pair and reported on both ordered records. torch enables peer
    access itself; ``peer_access`` is torch.cuda.can_device_access_peer.
    """
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch has no CUDA device (torch.cuda.is_available() is false)")
    n = torch.cuda.device_count()
    src = [torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{d}") for d in range(n)]
    dst = [torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{d}") for d in range(n)]
    streams = {(d, k): torch.cuda.Stream(device=d) for d in range(n) for k in ("a", "b")}

    def copy(a, b, sa, sb):
        with torch.cuda.stream(sa), torch.cuda.stream(sb):
            dst[b].copy_(src[a], non_blocking=True)

    def unidir(a, b):
        sa, sb = streams[(a, "a")], streams[(b, "a")]

        def loop():
            for _ in range(iters):
                copy(a, b, sa, sb)

        loop()  # warm-up (also enables peer access)
        torch.cuda.synchronize(a)
        torch.cuda.synchronize(b)
        ms = _median_ms(torch, loop, sa, reps)
        return nbytes * iters / (ms / 1e3) / 1e9

    def bidir(a, b):
        s_ab = (streams[(a, "a")], streams[(b, "a")])  # a->b: copies on a's stream, fences b's
        s_ba = (streams[(b, "b")], streams[(a, "b")])  # b->a: copies on b's stream, fences a's

        def loop():
            start_evt = torch.cuda.Event()
            start_evt.record(s_ab[0])
            s_ba[0].wait_event(start_evt)  # b->a starts when the timed run starts
            for _ in range(iters):
                copy(a, b, *s_ab)
                copy(b, a, *s_ba)
            done_ba = torch.cuda.Event()
            done_ba.record(s_ba[0])
            s_ab[0].wait_event(done_ba)  # the end event on a's stream waits for both directions

        loop()
        torch.cuda.synchronize(a)
        torch.cuda.synchronize(b)
        ms = _median_ms(torch, loop, s_ab[0], reps)
        return 2 * nbytes * iters / (ms / 1e3) / 1e9

    results = {}
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            rec = {"a": a, "b": b, "peer_access": bool(torch.cuda.can_device_access_peer(a, b)),
                   # a and b are torch indices (CUDA_DEVICE_ORDER); the bus ids name the GPUs for NVML
                   "a_pci_bus_id": _torch_bus_id(torch, a), "b_pci_bus_id": _torch_bus_id(torch, b)}
            try:
                rec["unidir_gbps"] = round(unidir(a, b), 2)
            except Exception as e:
                rec["unidir_gbps"] = None
                rec["error"] = f"{type(e).__name__}: {e}".splitlines()[0]
            results[(a, b)] = rec
    for a in range(n):
        for b in range(a + 1, n):
            try:
                v = round(bidir(a, b), 2)
            except Exception as e:
                v = None
                for key in ((a, b), (b, a)):
                    results[key].setdefault("error", f"bidir: {type(e).__name__}: {e}".splitlines()[0])
            results[(a, b)]["bidir_gbps"] = results[(b, a)]["bidir_gbps"] = v
    del src, dst
    torch.cuda.empty_cache()
    return [results[k] for k in sorted(results)]


# ---------------------------------------------------------------------------------------------------------
# the probe


def main(args: dict) -> dict:
    """Probe entry point: the document described in the module docstring."""
    try:
        import pynvml as nv
    except ImportError:
        raise ProbeFailed("pynvml (nvidia-ml-py) not installed")
    try:
        nv.nvmlInit()
    except Exception as e:
        msg = nvml_error(e)["nvml_error"]
        if getattr(e, "value", None) == 12:
            msg = "no NVIDIA driver (libnvidia-ml.so not found)"
        raise ProbeFailed(f"NVML unavailable: {msg}")
    try:
        return _probe(nv, args)
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def _probe(nv, args: dict) -> dict:
    count = nv.nvmlDeviceGetCount()
    if count == 0:
        raise ProbeFailed("no NVIDIA GPU (NVML reports 0 devices)")
    doc: dict = {"driver": call(nv, "nvmlSystemGetDriverVersion", conv=text), "gpu_count": count, "gpus": [], "pairs": []}
    handles = []
    for i in range(count):
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
        except Exception as e:
            handles.append(None)
            doc["gpus"].append({"index": i, "handle": nvml_error(e), "links": [], "active_count": nvml_error(e)})
            continue
        handles.append(h)
        g = {"index": i, "pci_bus_id": call(nv, "nvmlDeviceGetPciInfo", h, conv=lambda p: text(p.busId))}
        g.update(gpu_links(nv, h))
        doc["gpus"].append(g)

    sample = args.get("sample_seconds")
    if sample:
        time.sleep(float(sample))
        for g, h in zip(doc["gpus"], handles):
            for lk in g.get("links", []):
                lk["errors_delta"] = counter_delta(lk["errors"], link_errors(nv, h, lk["link"]))
        doc["sample_seconds"] = float(sample)

    local_buses = {normalize_bus_id(g.get("pci_bus_id")) for g in doc["gpus"]} - {None}
    for i in range(count):
        for j in range(i + 1, count):
            pair: dict = {"a": i, "b": j}
            if handles[i] is None or handles[j] is None:
                pair.update(common_ancestor={"nvml_error": "no handle"}, nvlink=False, nvlink_via=None,
                            nvlink_count=0, p2p={})
            else:
                pair.update(pair_info(nv, handles[i], handles[j]))
                p2p_nv = pair["p2p"].get("nvlink")
                pair.update(pair_nvlink(doc["gpus"][i].get("links", []), doc["gpus"][j].get("links", []),
                                        doc["gpus"][i].get("pci_bus_id"), doc["gpus"][j].get("pci_bus_id"),
                                        local_buses, p2p_nv if isinstance(p2p_nv, str) else None))
            pair["topo"] = topo_label(pair)
            doc["pairs"].append(pair)

    if args.get("p2p_bandwidth"):
        nbytes = int(args.get("bytes") or (1 << 30))
        try:
            t0 = time.time()
            doc["p2p_bandwidth"] = measure_p2p_bandwidth(nbytes, int(args.get("iters") or 5), int(args.get("reps") or 5))
            doc["p2p_bandwidth_bytes"] = nbytes
            log(f"p2p bandwidth: {len(doc['p2p_bandwidth'])} ordered pairs in {time.time() - t0:.1f}s")
        except ImportError:
            doc["p2p_bandwidth"] = []
            doc["p2p_bandwidth_error"] = "torch not installed"
        except Exception as e:
            doc["p2p_bandwidth"] = []
            doc["p2p_bandwidth_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:500]
    return doc


if __name__ == "__main__":
    run(main)
