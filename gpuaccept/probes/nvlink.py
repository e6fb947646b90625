#!/usr/bin/env python3
"""NVLink link state, error counters and GPU-to-GPU topology (NVML). One measurement: what NVML says.

Run on the node as ``python3 nvlink.py '<json args>'``. Args (all optional)::

    {"sample_seconds": float}   # read the link error counters twice, this far apart; adds errors_delta

GPU-to-GPU copy bandwidth is the ``p2p_bandwidth`` probe's (torch).

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
     "sample_seconds": float}                                 # only with sample_seconds

A GPU without NVLink (every link answers "Not Supported", e.g. a one-GPU VM) has ``nvlink_supported``
false, ``links`` empty and ``active_count`` ``{"nvml_error": "Not Supported"}``: never a silent 0.
The probe fails (rc 1) when NVML cannot be used at all: no pynvml, no driver, no GPU.

Sources: NVML API reference (https://docs.nvidia.com/deploy/nvml-api/): nvmlDeviceGetNvLinkState,
nvmlDeviceGetNvLinkVersion, nvmlDeviceGetNvLinkRemotePciInfo_v2, nvmlDeviceGetNvLinkRemoteDeviceType,
nvmlDeviceGetNvLinkErrorCounter (nvmlNvLinkErrorCounter_t), nvmlDeviceGetFieldValues (NVML_FI_DEV_NVLINK_*),
nvmlDeviceGetTopologyCommonAncestor (nvmlGpuTopologyLevel_t), nvmlDeviceGetP2PStatus
(nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t); the topology abbreviations are the legend of
``nvidia-smi topo -m``. Standard library + pynvml.
"""
from __future__ import annotations

import time

from _nvml import call, is_error, nvml_error, text
from _pci import normalize_bus_id as _canonical_bus_id
from _probe import ProbeFailed, reject_unknown, run

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


# ---------------------------------------------------------------------------------------------------------
# pure helpers (imported by the tests)


def normalize_bus_id(bus_id) -> str | None:
    """Normalize a PCI bus id to ``DDDDDDDD:BB:DD.F`` upper case (_pci.py); None when it is not one."""
    if is_error(bus_id):
        return None
    return _canonical_bus_id(text(bus_id) if isinstance(bus_id, bytes) else bus_id)


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
# the probe


def main(args: dict) -> dict:
    """Probe entry point: the document described in the module docstring."""
    reject_unknown(args, {"sample_seconds"})
    try:
        import pynvml as nv
    except ModuleNotFoundError:  # a pynvml that fails as it loads is run()'s import_broken
        raise ProbeFailed("pynvml (nvidia-ml-py) not installed", missing_module="pynvml")
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

    return doc


if __name__ == "__main__":
    run(main)
