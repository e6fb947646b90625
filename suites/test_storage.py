"""storage layer: NVMe inventory and health, local filesystem throughput (fio), the shared filesystem under
every host at once, and the storage -> GPU batch journey.

Probes: nvme_inventory, fio_throughput, storage_to_gpu. Inventory variables (see gpuaccept.storage_limits):
``storage_paths`` (directories on local NVMe mounts), ``fs_paths`` (directories on shared filesystems),
``nvme_count``, ``storage_limits`` (floors; a figure with no limit is recorded, not judged),
``storage_fio`` (fio sizes), ``storage_devices`` + ``storage_allow_destructive`` (raw device READS).
GB/s = 1e9 B/s; IOPS = fio's IO/s.
"""
from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpuaccept import storage_limits as sl
from gpuaccept.errors import GpuacceptError
from gpuaccept.node import Node

pytestmark = pytest.mark.storage

UNJUDGED = "no limit configured (inventory var storage_limits.{key}): recorded, not judged"


def _record(verdicts, check: str, value, unit: str, limits: dict, key: str, extra: dict | None = None) -> None:
    """Record a figure, judged when storage_limits has ``key`` (the failure names ``check``, which carries
    the path), else marked as not judged."""
    lim = limits.get(key)
    ex = dict(extra or {})
    if lim is None:
        ex["note"] = UNJUDGED.format(key=key)
    else:
        lim = dataclasses.replace(lim, check=check)
    verdicts.record(check, value, unit, limit=lim, extra=ex)


def test_nvme_inventory(node: Node, verdicts):
    """NVMe namespaces counted against ``nvme_count``; every controller's PCIe link at its maximum speed and
    width; SMART critical_warning 0 and media_errors 0 (nvme-cli smart-log)."""
    v = node.host.vars
    want = sl.count(v.get("nvme_count"), "nvme_count", node.name)
    doc = node.probe("nvme_inventory")
    n = doc.get("namespace_count", 0)
    if want is None and n == 0:
        pytest.skip(f"no NVMe on {node.name}")
    verdicts.record("nvme_namespaces", n, "namespaces",
                    extra={"namespaces": [x["name"] for x in doc.get("namespaces", [])], "expected": want,
                           "nvme_cli": doc.get("nvme_cli")})
    if want is not None and n != want:
        verdicts.fail(f"{n} NVMe namespaces found, inventory nvme_count says {want}: "
                      f"{', '.join(x['name'] for x in doc.get('namespaces', [])) or 'none'}")
    for c in doc.get("controllers", []):
        who = f"{c['name']} ({c.get('model') or '?'}, serial {c.get('serial') or '?'}, {c.get('pci_address') or '-'})"
        link = c.get("link")
        if link:
            verdicts.record(f"nvme_link.{c['name']}", f"{link.get('current_speed')} x{link.get('current_width')}", "",
                            extra={**link, "controller": who})
            if link.get("degraded"):
                verdicts.fail(f"{who}: PCIe link degraded: {link.get('current_speed')} x{link.get('current_width')} "
                              f"(capable of {link.get('max_speed')} x{link.get('max_width')})")
        smart = c.get("smart")
        if smart is None:
            verdicts.record(f"nvme_smart.{c['name']}", None, extra={"controller": who, "reason": c.get("smart_error")})
            continue
        verdicts.record(f"nvme_smart.{c['name']}", smart, extra={"controller": who})
        if smart.get("critical_warning"):
            verdicts.fail(f"{who}: SMART critical_warning {smart['critical_warning']:#x}")
        if smart.get("media_errors"):
            verdicts.fail(f"{who}: SMART media_errors {smart['media_errors']}")
    verdicts.finish()


def _fio_args(node: Node) -> dict:
    v = node.host.vars
    args = sl.fio_args(v.get("storage_fio"), node.name)
    devices = sl.path_list(v.get("storage_devices"), "storage_devices", node.name)
    if devices and sl.flag(v.get("storage_allow_destructive"), "storage_allow_destructive", node.name):
        args.update(devices=devices, allow_destructive=True)
    return args


def test_local_storage_throughput(node: Node, verdicts):
    """Per ``storage_paths`` directory: sequential read and write GB/s (1 MiB blocks, O_DIRECT) and 4 KiB
    random-read IOPS with fio, each judged on ``storage_limits`` when given. A RAM-backed or overlay
    filesystem, too little free space or a fio job error fails that path."""
    v = node.host.vars
    paths = sl.path_list(v.get("storage_paths"), "storage_paths", node.name)
    if not paths:
        pytest.skip(f"no storage_paths configured for {node.name}")
    limits = sl.storage_limits(v.get("storage_limits"), node.name)
    devices = sl.path_list(v.get("storage_devices"), "storage_devices", node.name)
    doc = node.probe("fio_throughput", {**_fio_args(node), "paths": paths})
    verdicts.record("fio_version", doc.get("fio_version"), extra={"ioengine": doc.get("ioengine")})
    for p in doc["paths"]:
        ev = {"path": p["path"], "fstype": p.get("fstype"), "mount_point": p.get("mount_point"),
              "mount_source": p.get("mount_source"), "total_bytes": p.get("total_bytes"),
              "numjobs": p.get("numjobs"), "iodepth": p.get("iodepth"), "fio_messages": p.get("fio_messages")}
        if not p["ok"]:
            verdicts.record(f"fio {p['path']}", None, extra={**ev, "error": p["error"]})
            verdicts.fail(p["error"])
            continue
        _record(verdicts, f"seq_read_gbps {p['path']}", p["seq_read_gbps"], "GB/s", limits, "seq_read_gbps", ev)
        _record(verdicts, f"seq_write_gbps {p['path']}", p["seq_write_gbps"], "GB/s", limits, "seq_write_gbps", ev)
        _record(verdicts, f"rand_read_iops {p['path']}", p["rand_read_iops"], "IOPS", limits, "rand_read_iops", ev)
    for d in doc.get("devices", []):
        verdicts.record(f"raw_seq_read_gbps {d['device']}", d.get("seq_read_gbps"), "GB/s",
                        extra={"error": d.get("error"), "fio_messages": d.get("fio_messages")})
        if d.get("error"):
            verdicts.fail(d["error"])
    if devices and not doc.get("devices"):
        verdicts.record("raw_device_reads", "skipped", extra={
            "devices": devices, "reason": "storage_allow_destructive is not true: raw block devices not read"})
    verdicts.finish()


def test_shared_fs_aggregate(nodes: list[Node], verdicts):
    """Every host with ``fs_paths`` runs fio on its i-th shared directory at the same time (one round per
    index); the GB/s of the hosts are summed and judged on ``fs_aggregate_read_gbps`` and
    ``fs_aggregate_write_gbps`` (storage_limits of the first such host). Phases are aligned by fio's
    time-based runtime; the start skew between hosts is recorded."""
    hosts = [(n, sl.path_list(n.host.vars.get("fs_paths"), "fs_paths", n.name)) for n in nodes]
    hosts = [(n, p) for n, p in hosts if p]
    if not hosts:
        pytest.skip("no host has fs_paths configured")
    first = hosts[0][0]
    limits = sl.storage_limits(first.host.vars.get("storage_limits"), first.name)
    rounds = max(len(p) for _, p in hosts)
    for i in range(rounds):
        part = [(n, p[i]) for n, p in hosts if i < len(p)]

        def one(np):
            n, path = np
            args = {**sl.fio_args(n.host.vars.get("storage_fio"), n.name), "paths": [path],
                    "tests": ["seq_write", "seq_read"]}
            try:
                return n, path, n.probe("fio_throughput", args)["paths"][0], None
            except GpuacceptError as e:
                return n, path, None, str(e)

        with ThreadPoolExecutor(max_workers=len(part)) as ex:
            results = list(ex.map(one, part))
        per_host = {}
        total = {"read": 0.0, "write": 0.0}
        starts = {"read": [], "write": []}
        for n, path, res, err in results:
            if err or not res["ok"]:
                verdicts.fail(err or f"{n.name}: {res['error']}")
                per_host[n.name] = {"path": path, "error": err or res["error"]}
                continue
            per_host[n.name] = {"path": path, "fstype": res.get("fstype"), "read_gbps": res["seq_read_gbps"],
                                "write_gbps": res["seq_write_gbps"]}
            for d in ("read", "write"):
                total[d] += res[f"seq_{d}_gbps"] or 0.0
                starts[d].append(res["tests"][f"seq_{d}"]["started"])
        for d in ("read", "write"):
            skew = round(max(starts[d]) - min(starts[d]), 3) if starts[d] else None
            _record(verdicts, f"fs_aggregate_{d}_gbps " + hosts_paths(part), round(total[d], 4), "GB/s", limits,
                    f"fs_aggregate_{d}_gbps", {"hosts": per_host, "start_skew_s": skew, "host_count": len(part)})
    verdicts.finish()


def hosts_paths(part) -> str:
    """Label of one aggregate round: the distinct paths of the round."""
    return ",".join(sorted({p for _, p in part}))


def test_storage_to_gpu(node: Node, gpus, verdicts):
    """Files on the first ``storage_paths`` directory -> host memory -> each GPU: end-to-end GB/s per GPU
    and the bounding stage (storage read, host copy, H2D, each measured alone); judged on
    ``storage_to_gpu_gbps`` when given."""
    v = node.host.vars
    paths = sl.path_list(v.get("storage_paths"), "storage_paths", node.name)
    if not paths:
        pytest.skip(f"no storage_paths configured for {node.name}")
    limits = sl.storage_limits(v.get("storage_limits"), node.name)
    args = {"path": paths[0], "device": "cuda"}
    mf = sl.fio_args(v.get("storage_fio"), node.name).get("min_free_bytes")
    if mf is not None:
        args["min_free_bytes"] = mf
    doc = node.probe("storage_to_gpu", args)
    verdicts.record("storage_read_gbps", doc.get("storage_read_gbps"), "GB/s",
                    extra={"path": doc.get("path"), "page_cache_evicted": doc.get("page_cache_evicted")})
    verdicts.record("host_copy_gbps", doc.get("host_copy_gbps"), "GB/s")
    lim = limits.get("storage_to_gpu_gbps")
    for g in doc.get("gpus", []):
        ex = {"bounding_stage": g.get("bounding_stage"), "h2d_gbps": g.get("h2d_gbps"), "bytes": doc.get("bytes")}
        if lim is None:
            ex["note"] = UNJUDGED.format(key="storage_to_gpu_gbps")
        verdicts.record("storage_to_gpu_gbps", g.get("end_to_end_gbps"), "GB/s", gpu=g, limit=lim, extra=ex)
    verdicts.finish()
