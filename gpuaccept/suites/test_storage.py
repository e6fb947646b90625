"""storage layer: NVMe inventory and health, local filesystem throughput (fio), the shared filesystem under
every host at once, and the storage -> GPU batch journey.

Probes: storage_mounts, nvme_inventory, fio_throughput, storage_to_gpu. Inventory variables (see
gpuaccept.config.storage): ``storage_paths`` (directories on local NVMe mounts), ``fs_paths`` (directories on
shared filesystems), ``nvme_count``, ``storage_limits`` (floors; a figure with no limit is recorded, not
judged; a limit for a figure with no path to measure it is an error), ``storage_fio`` (fio sizes),
``storage_devices`` + ``storage_allow_destructive`` (raw device READS), and where the paths must be:
``storage_expect_mount``, ``storage_expect_fstype``, ``storage_allow_root_fs`` and the ``fs_*`` ones.
Every directory is placed first (storage_mounts: mount, source, fs type, root filesystem) and judged by
gpuaccept.judging.storage before anything is written there. GB/s = 1e9 B/s; IOPS = fio's IO/s.
"""
from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpuaccept.causes import Cause
from gpuaccept.judging import conditions as sj_conditions
from gpuaccept.judging import storage as sj
from gpuaccept.config import storage as sl
from gpuaccept.errors import GpuacceptError, ProbeError
from gpuaccept.runner.host import HostRunner
from gpuaccept.runner.prefetch import ahead

pytestmark = pytest.mark.storage

UNJUDGED = "no limit configured (inventory var storage_limits.{key}): recorded, not judged"
LOCAL_CHECKS = ("seq_read_gbps", "seq_write_gbps", "rand_read_iops")


def _record(verdicts, check: str, value, unit: str, limits: dict, key: str, extra: dict | None = None) -> None:
    """Record a figure, judged when storage_limits has ``key`` (the failure names ``check``, which carries
    the path), else marked as not judged."""
    lim = limits.get(key)
    ex = dict(extra or {})
    if lim is None:
        ex.setdefault("note", UNJUDGED.format(key=key))
    else:
        lim = dataclasses.replace(lim, check=check)
    verdicts.record(check, value, unit, limit=lim, extra=ex)


def _not_measured(verdicts, entry: dict, host: str | None = None) -> None:
    """A path the probe did not measure: an ERROR with its cause when the node's filesystem refused (too little
    free space: capacity, action free-space; read-only: configuration, fix-config) or the tool failed; a FAIL
    when the drive did (an I/O error) or the path is not where the inventory says. Decided from the entry's
    ``failure`` fact (gpuaccept.judging.storage.path_cause), never from its wording. ``host``: another host's
    entry, in a test over several hosts."""
    kind, cause = sj.path_cause(entry)
    line = entry.get("error") or "not measured"
    if kind == "error":
        (verdicts.for_host(host) if host else verdicts).error(line, cause=cause)
    else:
        verdicts.fail(f"{host}: {line}" if host else line, cause=cause.on(host) if cause and host else cause)


def _nothing_to_measure(host: str, var: str, limits: dict, keys) -> None:
    """No directory configured: skip, unless ``storage_limits`` asks for a figure only such a directory gives
    (then the inventory contradicts itself: an error, never a skip)."""
    asked = [k for k in keys if k in limits]
    if asked:
        raise sl.StorageConfigError(f"{host}: inventory var storage_limits sets {', '.join(asked)} but {var} "
                                    f"is empty: nothing is measured to judge")
    pytest.skip(f"no {var} configured for {host}")


def _placement(doc: dict, expect: sl.PathExpectation) -> list[tuple[dict, list[str]]]:
    """Each entry of a storage_mounts document with its placement problems (pure: storage_judging's
    placement_problems and same_drive_problems); an entry without problems is measured."""
    return [(entry, sj.placement_problems(entry, expect) + ([twice] if twice else []))
            for entry, twice in zip(doc["paths"], sj.same_drive_problems(doc["paths"], expect))]


def _placed(node: HostRunner, verdicts, paths: list[str], expect: sl.PathExpectation) -> list[str]:
    """The ``paths`` that are where the inventory says (storage_mounts probe, judged by
    storage_judging.placement_problems); one failure line per problem of the others, which are not measured."""
    good = []
    for entry, problems in _placement(node.probe("storage_mounts", {"paths": paths}), expect):
        verdicts.record(f"mount {entry['path']}", entry.get("mount_point"), extra={**entry, "problems": problems})
        for line in problems:  # not where the inventory says: configuration (fix-config), never a slow drive
            verdicts.fail(line, check=f"mount {entry['path']}", cause=sj.placement_cause(entry))
        if not problems:
            good.append(entry["path"])
    return good


def _good_paths(node: HostRunner, paths: list[str], expect: sl.PathExpectation) -> list[str]:
    """:func:`_placed` judging nothing: the paths a test measures (a plan's, gpuaccept.runner.prefetch.ahead)."""
    return [e["path"] for e, problems in _placement(node.probe("storage_mounts", {"paths": paths}), expect)
            if not problems]


def _nvme_probes(node: HostRunner) -> None:
    """test_nvme_inventory's probes (its plan, gpuaccept.runner.prefetch.ahead)."""
    sl.int_var(node.host.vars.get("nvme_count"), "nvme_count", node.name)
    node.probe("nvme_inventory")


@ahead(_nvme_probes)
def test_nvme_inventory(node: HostRunner, verdicts):
    """NVMe namespaces counted against ``nvme_count``; every controller's PCIe link at its maximum speed and
    width; SMART critical_warning 0 and media_errors 0 (nvme-cli smart-log)."""
    v = node.host.vars
    want = sl.int_var(v.get("nvme_count"), "nvme_count", node.name)
    doc = node.probe("nvme_inventory")
    n = doc.get("namespace_count", 0)
    if want is None and n == 0:
        pytest.skip(f"no NVMe on {node.name}")
    verdicts.record("nvme_namespaces", n, "namespaces",
                    extra={"namespaces": [x["name"] for x in doc.get("namespaces", [])], "expected": want,
                           "nvme_cli": doc.get("nvme_cli")})
    if want is not None and n != want:
        verdicts.fail(f"{n} NVMe namespaces found, inventory nvme_count says {want}: "
                      f"{', '.join(x['name'] for x in doc.get('namespaces', [])) or 'none'}",
                      check="nvme_count", cause=sj.nvme_count_cause(n, want, doc.get("controller_count")))
    unread = []  # local controllers whose SMART nvme-cli's absence left unread
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
            if not doc.get("nvme_cli") and c.get("transport") in (None, "pcie"):
                unread.append(c["name"])
            continue
        verdicts.record(f"nvme_smart.{c['name']}", smart, extra={"controller": who})
        if smart.get("critical_warning"):
            verdicts.fail(f"{who}: SMART critical_warning {smart['critical_warning']:#x}")
        if smart.get("media_errors"):
            verdicts.fail(f"{who}: SMART media_errors {smart['media_errors']}")
    if unread and want is not None:  # the inventory asks for the node's NVMe checks: SMART unread is said, once
        verdicts.error(f"SMART of {', '.join(unread)} not read: nvme-cli is not installed, so critical warnings and "
                       f"media errors go unseen", cause=Cause("configuration", "program_missing",
                                                              evidence={"program": "nvme-cli"}))
    verdicts.finish()


def _fio_args(node: HostRunner) -> dict:
    v = node.host.vars
    args = sl.fio_args(v.get("storage_fio"), node.name)
    devices = sl.path_list(v.get("storage_devices"), "storage_devices", node.name)
    if devices and sl.bool_var(v.get("storage_allow_destructive"), "storage_allow_destructive", node.name):
        args.update(devices=devices, allow_destructive=True)
    return args


def _local_probes(node: HostRunner) -> None:
    """test_local_storage_throughput's probes, from the host's own variables and placement (its plan,
    gpuaccept.runner.prefetch.ahead): storage_mounts, then fio_throughput on the paths placed right."""
    v = node.host.vars
    paths = sl.path_list(v.get("storage_paths"), "storage_paths", node.name)
    sl.storage_limits(v.get("storage_limits"), node.name)
    if not paths:
        return
    expect = sl.expectation(v, "storage", node.name)
    sl.path_list(v.get("storage_devices"), "storage_devices", node.name)
    args = {**_fio_args(node), "paths": _good_paths(node, paths, expect)}
    if args["paths"] or args.get("devices"):
        node.probe("fio_throughput", args)


@ahead(_local_probes)
def test_local_storage_throughput(node: HostRunner, verdicts):
    """Per ``storage_paths`` directory: sequential read and write GB/s (1 MiB blocks, O_DIRECT) and 4 KiB
    random-read IOPS with fio, each judged on ``storage_limits`` when given. A directory on the root
    filesystem (unless ``storage_allow_root_fs``) or off ``storage_expect_mount``/``storage_expect_fstype``
    fails before fio runs there; a RAM-backed or overlay filesystem or a drive's I/O error fails that path;
    too little free space or a read-only filesystem is an ERROR with its cause (capacity, configuration), not
    a slow drive, and so is a fio that could not measure (tool); another process busy on the host while fio
    ran makes the test ERROR "disturbed", its figures kept."""
    v = node.host.vars
    paths = sl.path_list(v.get("storage_paths"), "storage_paths", node.name)
    limits = sl.storage_limits(v.get("storage_limits"), node.name)
    if not paths:
        _nothing_to_measure(node.name, "storage_paths", limits, LOCAL_CHECKS)
    expect = sl.expectation(v, "storage", node.name)
    devices = sl.path_list(v.get("storage_devices"), "storage_devices", node.name)
    good = _placed(node, verdicts, paths, expect)
    args = {**_fio_args(node), "paths": good}
    if not good and not args.get("devices"):
        verdicts.finish()  # every path failed its placement: nothing to measure
        return
    doc = node.probe("fio_throughput", args)
    verdicts.conditions(doc, [])  # the host while fio ran: a busy host makes the figures ERROR "disturbed"
    verdicts.record("fio_version", doc.get("fio_version"), extra={"ioengine": doc.get("ioengine")})
    for p in doc["paths"]:
        ev = {k: p.get(k) for k in ("path", "fstype", "mount_point", "mount_source", "root_fs", "total_bytes",
                                    "numjobs", "iodepth", "fio_messages")}
        if not p["ok"]:
            verdicts.record(f"fio {p['path']}", None, extra={**ev, "error": p["error"], "failure": p.get("failure")})
            _not_measured(verdicts, p)
            continue
        moved = sj.placement_problems(p, expect)  # the mount fio measured, as fio's probe saw it
        for line in moved:
            verdicts.fail(f"{line} (while fio ran)", check=f"mount {p['path']}", cause=sj.placement_cause(p))
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


def _busy_lines(result: dict | None) -> list[str] | None:
    """What a host's watch saw while its share of the aggregate ran (None: not sampled). Recorded, not judged:
    the hosts of a round load one filesystem together by design, the aggregate's figures are the network's
    and the filesystem's (never a hardware verdict), and where several test hosts share one machine (the sshd
    rig) each would see the others' fio."""
    busy = sj_conditions.host_disturbances(result or {})
    return None if busy is None else [line for line, _ in busy]


def _on_each(pairs, fn) -> dict:
    """``{name: (result, error text)}`` of ``fn(node, arg)`` run for every ``(node, arg)`` at once (one thread
    per host: the hosts of a round start together)."""
    def one(pair):
        n, arg = pair
        try:
            return n.name, (fn(n, arg), None)
        except GpuacceptError as e:
            return n.name, (None, str(e))

    with ThreadPoolExecutor(max_workers=max(1, len(pairs))) as ex:
        return dict(ex.map(one, pairs))


def test_shared_fs_aggregate(nodes: list[HostRunner], verdicts):
    """Per distinct ``fs_paths`` entry, every host that lists it: first where the directory is on each host
    (storage_mounts), then fio on all of them at the same time; the GB/s of the hosts that see the same
    filesystem are summed (storage_judging.aggregate) and judged on ``fs_aggregate_read_gbps`` and
    ``fs_aggregate_write_gbps``. A host whose directory is on the root filesystem, on a local disk, off
    ``fs_expect_mount``/``fs_expect_fstype``, or on another filesystem than the other hosts' (source or
    type) fails and is left out of the sum. Phases are aligned by fio's time-based runtime; the start skew
    between hosts is recorded."""
    listed = [(n, sl.path_list(n.host.vars.get("fs_paths"), "fs_paths", n.name)) for n in nodes]
    listed = [(n, p) for n, p in listed if p]
    if not listed:
        asked = sorted({n.name for n in nodes for k in ("fs_aggregate_read_gbps", "fs_aggregate_write_gbps")
                        if k in sl.storage_limits(n.host.vars.get("storage_limits"), n.name)})
        if asked:
            raise sl.StorageConfigError(f"inventory var storage_limits sets fs_aggregate_* on {', '.join(asked)} "
                                        "but no selected host has fs_paths: nothing is measured to judge")
        pytest.skip("no host has fs_paths configured")
    by_name = {n.name: n for n, _ in listed}
    limits = {n.name: sl.storage_limits(n.host.vars.get("storage_limits"), n.name) for n, _ in listed}
    expects = {n.name: sl.expectation(n.host.vars, "fs", n.name) for n, _ in listed}
    rounds: dict[str, list[str]] = {}
    for n, paths in listed:
        for p in paths:
            rounds.setdefault(p, []).append(n.name)
    floors = {(p, d): sj.round_limit(f"fs_aggregate_{d}_gbps", {h: limits[h] for h in hosts})
              for p, hosts in rounds.items() for d in ("read", "write")}  # a disagreement stops before any fio
    for path, hosts in rounds.items():
        placed = _on_each([(by_name[h], path) for h in hosts],
                          lambda n, p: n.probe("storage_mounts", {"paths": [p]})["paths"][0])
        placements = {h: res if res is not None else {"path": path, "error": err} for h, (res, err) in placed.items()}
        split = sj.split_shared_fs(path, placements, {h: expects[h] for h in hosts})
        verdicts.record(f"fs_placement {path}", list(split.reference) if split.reference else None,
                        extra={"hosts": placements, "members": list(split.members), "left_out": split.problems})
        for h in hosts:  # filed under the host (its own FAIL and list), with the placement's cause
            for line in split.problems.get(h, []):
                verdicts.for_host(h).fail(line.removeprefix(f"{h}: "), cause=sj.placement_cause(placements[h]).on(h))

        def fio(n, p):
            args = {**sl.fio_args(n.host.vars.get("storage_fio"), n.name), "paths": [p],
                    "tests": ["seq_write", "seq_read"]}
            doc = n.probe("fio_throughput", args)
            return {**doc["paths"][0], "host_conditions": doc.get("host_conditions")}

        ran = _on_each([(by_name[h], path) for h in split.members], fio)
        results = {h: res if res is not None else {"ok": False, "error": err} for h, (res, err) in ran.items()}
        for h, r in results.items():
            if not r.get("ok"):
                _not_measured(verdicts, r, host=h)
        for d in ("write", "read"):
            agg = sj.aggregate(d, results)
            for h, why in agg.left_out.items():
                if results[h].get("ok"):  # a failed run is reported once above
                    verdicts.fail(f"{h}: {why}")
            lim = floors[(path, d)]
            apart = agg.not_concurrent()
            if apart:
                verdicts.error(f"fs_aggregate_{d}_gbps {path}: {apart}")
            _record(verdicts, f"fs_aggregate_{d}_gbps {path}", agg.total_gbps, "GB/s",
                    {lim.check: lim} if lim and not apart else {}, f"fs_aggregate_{d}_gbps",
                    {"hosts": {h: {"path": path, "fstype": (results.get(h) or {}).get("fstype"),
                                   f"{d}_gbps": agg.per_host.get(h),
                                   "host_busy": _busy_lines(results.get(h))} for h in split.members},
                     "left_out": {**{h: " ".join(x) for h, x in split.problems.items()}, **agg.left_out},
                     **({"note": apart} if apart else {}),
                     "start_skew_s": agg.start_skew_s, "overlap_s": agg.overlap_s, "host_count": len(agg.per_host),
                     "filesystem": list(split.reference) if split.reference else None})
    verdicts.finish()


def _storage_to_gpu_args(node: HostRunner, path: str) -> dict:
    args = {"path": path, "device": "cuda", "gpus": "all"}
    mf = sl.fio_args(node.host.vars.get("storage_fio"), node.name).get("min_free_bytes")
    if mf is not None:
        args["min_free_bytes"] = mf
    return args


def _storage_to_gpu_probes(node: HostRunner) -> None:
    """test_storage_to_gpu's probes where the host has GPUs (its plan, gpuaccept.runner.prefetch.ahead)."""
    inv = node.gpu_inventory()
    v = node.host.vars
    paths = sl.path_list(v.get("storage_paths"), "storage_paths", node.name)
    sl.storage_limits(v.get("storage_limits"), node.name)
    if not (inv.get("nvml_available") and inv.get("gpus")) or not paths:
        return
    if _good_paths(node, paths[:1], sl.expectation(v, "storage", node.name)):
        node.probe("storage_to_gpu", _storage_to_gpu_args(node, paths[0]))


@ahead(_storage_to_gpu_probes)
def test_storage_to_gpu(node: HostRunner, gpus, verdicts):
    """Files on the first ``storage_paths`` directory -> host memory -> each GPU: end-to-end GB/s per GPU
    and the bounding stage (storage read, host copy, H2D, each measured alone); judged on
    ``storage_to_gpu_gbps`` when given. The directory is placed first, as for fio; every GPU NVML lists
    must have a figure (an error names the missing ones)."""
    v = node.host.vars
    paths = sl.path_list(v.get("storage_paths"), "storage_paths", node.name)
    limits = sl.storage_limits(v.get("storage_limits"), node.name)
    if not paths:
        _nothing_to_measure(node.name, "storage_paths", limits, ("storage_to_gpu_gbps",))
    if not _placed(node, verdicts, paths[:1], sl.expectation(v, "storage", node.name)):
        verdicts.finish()  # the directory is not where the inventory says: nothing measured
        return
    doc = node.probe("storage_to_gpu", _storage_to_gpu_args(node, paths[0]))
    if doc.get("failure"):  # the node's filesystem refused the test files: no figure
        verdicts.record("storage_to_gpu", None, extra={"path": doc.get("path"), "failure": doc["failure"],
                                                       "error": doc.get("error")})
        _not_measured(verdicts, doc)
        verdicts.finish()
        return
    verdicts.conditions(doc, gpus)  # the host while the journey ran
    verdicts.record("storage_read_gbps", doc.get("storage_read_gbps"), "GB/s",
                    extra={"path": doc.get("path"), "page_cache_evicted": doc.get("page_cache_evicted"),
                           "fstype": doc.get("fstype"), "mount_point": doc.get("mount_point")})
    verdicts.record("host_copy_gbps", doc.get("host_copy_gbps"), "GB/s")
    lim = limits.get("storage_to_gpu_gbps")
    for g in doc.get("gpus", []):
        ex = {"bounding_stage": g.get("bounding_stage"), "h2d_gbps": g.get("h2d_gbps"), "bytes": doc.get("bytes")}
        if lim is None:
            ex["note"] = UNJUDGED.format(key="storage_to_gpu_gbps")
        verdicts.record("storage_to_gpu_gbps", g.get("end_to_end_gbps"), "GB/s", gpu=g, limit=lim, extra=ex)
    missing = sj.unmeasured_gpus(gpus, doc.get("gpus") or [])
    if missing:
        raise ProbeError(node.name, f"storage_to_gpu gave no figure for {sj.describe_gpus(missing)} of the "
                                    f"{len(gpus)} GPUs NVML lists (CUDA_VISIBLE_DEVICES on the node?)")
    verdicts.finish()
