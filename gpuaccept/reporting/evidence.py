"""Evidence beside a hardware action: ``evidence/<host>/`` in the report folder for each host whose
action takes hardware out of service (drain-rma, reset-gpu, reboot: gpuaccept.causes.HARDWARE_ACTIONS), so
that the case opened with the vendor carries what gpuaccept read, not a retelling of it:

- the raw probe documents of the host's failing tests (hard links to ``probes/<host>/``, copies across
  filesystems; gpu_inventory always: every GPU test reads it), as the run saved them (docs/replay.md);
- ``kernel.log``: the Xid and SXid lines the xid_events probe read in the run's window (its document, else
  the lines test_xid_events recorded);
- ``nvml.json``: the gpu_inventory document's readings: driver, NVML and CUDA versions, and per GPU its index,
  PCI bus id, serial, UUID, VBIOS, ECC, row remapping and the rest NVML said;
- ``ticket.md``: one page to paste into a vendor case: host, action, its reason, source and cause class, each
  failing GPU (index, PCI bus id, serial, VBIOS), each failing figure with its limit and source, the Xid lines,
  driver and VBIOS versions, run id, the run's UTC start and the gpuaccept release.

A host without a hardware action gets no folder. Host names never become paths unescaped: the folder is
:func:`host_folder` of the name, and ``probes/<host>`` is read only for a name the inventory check accepts
(gpuaccept.config.hostranges.bad_name_reason: no slash, no ``..``), as the run saved it. A replayed host
(``gpuaccept_replay``) saves no documents under ``probes/``: its ticket is made from the records alone
(serials, bus ids, figures and Xid lines are in them; VBIOS is not). Nothing is written outside the report
folder, and nothing there is followed through a symlink.

:func:`ticket_markdown`, :func:`nvml_readings`, :func:`kernel_lines` and :func:`host_findings` are pure;
:func:`write_evidence` is the one writer (called by gpuaccept.reporting.reporter.Reporter at the run's final
write, so also by a merge, which reads the documents under each merged folder's ``probes/``).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
from typing import Iterable

from gpuaccept import __version__
from gpuaccept.causes import HARDWARE_ACTIONS
from gpuaccept.config.hostranges import bad_name_reason
from gpuaccept.reporting.folder import atomic_write
from gpuaccept.reporting.records import CaseRecord
from gpuaccept.reporting.text import fmt, limit_text
from gpuaccept.reporting.verdicts import gpu_name

#: the report folder's sub-folder holding one folder per host with a hardware action
EVIDENCE_DIR = "evidence"
#: the probes a failing test's figures come from, beyond gpu_inventory (which every GPU test reads through the
#: ``gpus`` fixture), as the shipped suites call them (gpuaccept/suites/); a test not named here (a site's own)
#: takes every document of its host
TEST_PROBES: dict[str, tuple[str, ...]] = {
    **{t: () for t in ("test_gpu_inventory", "test_gpu_sku", "test_driver_versions", "test_ecc",
                       "test_row_remapping", "test_preflight", "test_fabric", "test_fleet_consistency",
                       "test_pending_modes", "test_power_limit", "test_application_clocks")},
    "test_xid_events": ("xid_events",), "test_pcie_link": ("pcie_link",),
    "test_hbm_bandwidth": ("hbm_bandwidth",), "test_pcie_bandwidth": ("pcie_bandwidth",),
    "test_tensor_tflops": ("matmul_tflops",), "test_launch_overhead": ("launch_overhead",),
    "test_nvlink_links": ("nvlink",), "test_nvlink_topology": ("nvlink",), "test_p2p_bandwidth": ("p2p_bandwidth",),
    "test_allreduce": ("nccl_allreduce",), "test_allreduce_multinode": ("nccl_allreduce",),
    "test_nccl_environment": ("nccl_env",), "test_gds": ("gds", "storage_mounts"),
    "test_gpudirect_rdma": ("nccl_allreduce", "rdma"), "test_rdma_ports": ("rdma",),
    "test_nvme_inventory": ("nvme_inventory",), "test_local_storage_throughput": ("fio_throughput", "storage_mounts"),
    "test_shared_fs_aggregate": ("fio_throughput", "storage_mounts"), "test_storage_to_gpu": ("storage_to_gpu",),
    "test_burnin": ("burnin", "xid_events"),
    "test_kernel_log": ("host_kernel_log",), "test_host_ram": ("host_memory",),
    "test_host_ram_errors": ("host_memory",), "test_filesystems": ("host_filesystems", "host_kernel_log"),
    "test_nvme_state": ("nvme_inventory",),
}
#: ticket.md lists at most this many findings and kernel lines (one page; the files beside it keep all). Chosen.
MAX_ROWS = 20


def host_folder(host: str) -> str:
    """``host`` as one path component (pure): letters, digits, ``.``, ``_`` and ``-`` kept, any other byte written
    ``%XX``; a leading dot written ``%2E``, so ``..`` and ``.`` cannot climb or hide. The rule of
    gpuaccept.scaleout.slurm.folder_name (the per-node folders of a Slurm run), which this layer cannot import."""
    out = "".join(ch if re.fullmatch(r"[A-Za-z0-9._-]", ch) else "".join(f"%{b:02X}" for b in ch.encode())
                  for ch in str(host))
    if out.startswith("."):
        out = "%2E" + out[1:]
    return out or "%00"


def hardware_hosts(hv: dict) -> list[str]:
    """The hosts of :func:`gpuaccept.reporting.verdicts.host_verdicts` ``hv`` whose action is a hardware one, in
    order ("fleet" is no host; pure)."""
    return [h for h, v in hv.items() if h != "fleet" and ((v or {}).get("action") or {}).get("action")
            in HARDWARE_ACTIONS]


def failing_records(recs: Iterable[CaseRecord], host: str) -> list[CaseRecord]:
    """The host's failed or errored tests: its own, and the fleet-wide ones whose failure lines or causes name it."""
    out = []
    for r in recs:
        if r.outcome not in ("failed", "error"):
            continue
        if r.host == host or (r.host is None and (any(e.get("host") == host for e in r.failures) or any(
                isinstance(c, dict) and c.get("host") == host for c in r.causes or []))):
            out.append(r)
    return out


def _base(name: str) -> str:
    return name.split("[")[0]


def wanted_probes(recs: list[CaseRecord]) -> set[str] | None:
    """The probe names whose documents go with these failing tests (gpu_inventory always); None: every one (a
    test :data:`TEST_PROBES` does not name)."""
    out = {"gpu_inventory", "xid_events"}
    for r in recs:
        got = TEST_PROBES.get(_base(r.name))
        if got is None:
            return None
        out.update(got)
    return out


def _probe_of(file: str) -> str:
    return file.rsplit("-", 1)[0]


def host_findings(recs: list[CaseRecord], host: str) -> list[dict]:
    """What failed on ``host`` (pure): one row per failure line (its check's figure for the value and limit
    where the record has it) and per failing figure no line covers: ``{test, gpu, pci_bus_id, serial, check,
    value, unit, limit, source, line}``; ``source`` the limit's source, else the action's."""
    rows = []
    for r in recs:
        seen = set()
        figs = [f for f in r.figures if f.get("host") in (host, None)]
        for e in r.failures:
            if e.get("host") not in (host, None) and r.host is None:
                continue
            f = next((f for f in figs if f.get("check") == e.get("check") and f.get("gpu") == e.get("gpu")), None)
            seen.add((e.get("check"), e.get("gpu")))
            rows.append(_row(r, e, f))
        for f in figs:
            if f.get("verdict") == "fail" and (f.get("check"), f.get("gpu")) not in seen:
                rows.append(_row(r, {}, f))
        if not r.failures and r.outcome == "error":
            rows.append(_row(r, {"line": (r.message or "error").splitlines()[0]}, None))
    return rows


def _row(r: CaseRecord, e: dict, f: dict | None) -> dict:
    f = f or {}
    lim = f.get("limit") or {}
    act = e.get("action") or r.action or {}
    return {"test": _base(r.name), "gpu": e.get("gpu", f.get("gpu")), "pci_bus_id": e.get("pci_bus_id") or
            f.get("pci_bus_id"), "serial": e.get("serial") or f.get("serial"), "check": e.get("check") or f.get("check"),
            "value": f.get("value"), "unit": f.get("unit") or "", "limit": lim or None,
            "source": lim.get("source") or act.get("source") or "", "line": e.get("line") or ""}


def kernel_lines(xid_docs: list[dict], recs: Iterable[CaseRecord] = ()) -> list[str]:
    """The Xid and SXid lines of the window (pure): each event's line and its continuation lines, from the
    xid_events documents, else from the events test_xid_events recorded in ``recs``; each line once, in order."""
    events = [e for d in xid_docs for e in (d.get("events") or []) + (d.get("sxid_events") or [])]
    if not xid_docs:
        events = [e for r in recs for f in r.figures if f.get("check") in ("xid_events", "sxid_events")
                  for e in ((f.get("extra") or {}).get("events") or [])]
    out: dict[str, None] = {}
    for e in events:
        if isinstance(e, dict):
            for ln in [e.get("line"), *(e.get("continuation") or [])]:
                if ln:
                    out[str(ln)] = None
    return list(out)


def nvml_readings(doc: dict | None, host: str, run_id: str, source: str | None) -> dict:
    """nvml.json (pure): the gpu_inventory document ``doc`` as NVML read it (versions, and every GPU with its
    index, bus id, serial, UUID, VBIOS...), with the host, the run and the document's file."""
    return {"host": host, "run_id": run_id, "document": source, **(doc or {"note": "no gpu_inventory document"})}


def _gpu_rows(v: dict, doc: dict | None) -> list[str]:
    inv = {g.get("index"): g for g in (doc or {}).get("gpus") or [] if isinstance(g, dict)}
    rows = []
    for g in sorted((v.get("gpus") or {}).values(), key=lambda g: str(g["gpu"])):
        n = inv.get(g["gpu"]) or next((x for x in inv.values() if x.get("pci_bus_id") == g.get("pci_bus_id")), {})
        rows.append(f"| {g['gpu']} | {g.get('pci_bus_id') or n.get('pci_bus_id') or ''} | "
                    f"{g.get('serial') or n.get('serial') or ''} | {n.get('vbios_version') or '?'} | "
                    f"{n.get('uuid') or ''} | {', '.join(g.get('tests') or [])} |")
    return rows


def _versions(doc: dict | None, recs: list[CaseRecord]) -> str:
    d = doc or {}
    got = {"driver": d.get("driver"), "kernel module": d.get("kernel_driver_version"), "NVML": d.get("nvml_version"),
           "CUDA driver": d.get("cuda_driver_version")}
    if not doc:  # the figures test_gpu_inventory and test_driver_versions recorded
        for r in recs:
            for f in r.figures:
                key = {"driver_version": "driver", "kernel_driver_version": "kernel module",
                       "nvml_driver_version": "NVML driver", "cuda_driver_version": "CUDA driver"}.get(f.get("check"))
                if key and got.get(key) is None:
                    got[key] = f.get("value")
    vbios = sorted({str(g.get("vbios_version")) for g in d.get("gpus") or [] if isinstance(g, dict)
                    and g.get("vbios_version")})
    return "; ".join([f"{k} {v}" for k, v in got.items() if v is not None] +
                     ([f"VBIOS {', '.join(vbios)}"] if vbios else ["VBIOS not read (no gpu_inventory document)"]))


def _cell(x) -> str:
    return str(x).replace("|", "/").replace("\n", " ")


def ticket_markdown(host: str, v: dict, run_id: str, started: float | None, recs: list[CaseRecord],
                    inventory_doc: dict | None, kernel: list[str], files: list[str],
                    host_recs: list[CaseRecord] | None = None) -> str:
    """ticket.md (pure): ``v`` the host's verdict (with ``action`` and ``gpus``), ``recs`` its failing records,
    ``inventory_doc`` its gpu_inventory document (None when not kept), ``kernel`` :func:`kernel_lines`,
    ``files`` the probe documents beside it, ``host_recs`` every record of the host (the versions its tests
    recorded, read when there is no document)."""
    act = v.get("action") or {}
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)) if started else "?"
    out = [f"# {host}: {act.get('action')} (gpuaccept evidence)", "",
           f"- **host**: `{host}`",
           f"- **action**: {act.get('action')}: {act.get('reason', '')}",
           f"- **cause class**: {act.get('cause') or 'unverified'}",
           f"- **source**: {act.get('source', '')}",
           f"- **run**: {run_id}, started {when}; gpuaccept {__version__}",
           f"- **versions**: {_versions(inventory_doc, host_recs or recs)}", "", "## Failing GPUs", ""]
    gpus = _gpu_rows(v, inventory_doc)
    out += (["| GPU | PCI bus id | serial | VBIOS | UUID | tests |", "|---|---|---|---|---|---|"] + gpus) if gpus else \
        ["No failure line names a GPU: the node at large."]
    rows = host_findings(recs, host)
    out += ["", "## Failing figures", "", "| test | GPU | check | value | limit | source |", "|---|---|---|---|---|---|"]
    for r in rows[:MAX_ROWS]:
        gpu = "" if r["gpu"] is None else gpu_name({"gpu": r["gpu"], "pci_bus_id": r["pci_bus_id"], "serial": r["serial"]})
        value = "" if r["value"] is None else f"{fmt(r['value'])} {r['unit']}".strip()
        out.append(f"| {r['test']} | {_cell(gpu)} | {_cell(r['check'] or '')} | {_cell(value)} | "
                   f"{limit_text(r['limit'])} | {_cell(r['source'])} |")
    lines = [r["line"] for r in rows if r["line"]]
    out += ["", "Failure lines:", ""] + [f"- {_cell(ln)}" for ln in lines[:MAX_ROWS]] + (
        [f"- +{len(lines) - MAX_ROWS} more (results.json)"] if len(lines) > MAX_ROWS else [])
    out += ["", "## Kernel log: Xid and SXid lines of the window", "", "```"] + (
        [ln.replace("```", "'''") for ln in kernel[:MAX_ROWS]] or ["(none in the window)"]) + ["```"] + (
        [f"+{len(kernel) - MAX_ROWS} more lines in kernel.log"] if len(kernel) > MAX_ROWS else [])
    out += ["", "## Files", "", "- `nvml.json`: NVML's readings (versions, per GPU serial, bus id, VBIOS...)",
            "- `kernel.log`: the Xid and SXid lines"] + [f"- `{f}`: raw probe document" for f in files]
    return "\n".join(out) + "\n"


# -- the writer ---------------------------------------------------------------------------------------------
def _documents(roots: list[str], host: str, wanted: set[str] | None) -> dict[str, str]:
    """File name -> path of the host's saved probe documents under ``<root>/probes/<host>/`` (later roots win),
    regular files only, for the probes ``wanted`` (None: all)."""
    if bad_name_reason(host):
        return {}
    out = {}
    for root in roots:
        d = os.path.join(root, "probes", host)
        try:
            names = sorted(os.listdir(d)) if not os.path.islink(d) else []
        except OSError:
            continue
        for f in names:
            p = os.path.join(d, f)
            try:
                regular = stat.S_ISREG(os.lstat(p).st_mode)
            except OSError:
                continue
            if regular and f.endswith(".json") and (wanted is None or _probe_of(f) in wanted):
                out[f] = p
    return out


def _read_doc(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            saved = json.load(fh)
    except (OSError, ValueError):
        return None
    doc = saved.get("doc") if isinstance(saved, dict) else None
    return doc if isinstance(doc, dict) else None


def _place(src: str, folder: str, name: str) -> None:
    """``folder/name`` made a hard link to ``src`` (a copy across filesystems), replacing what was there."""
    tmp = os.path.join(folder, f".{name}.tmp{os.getpid()}")
    try:
        os.link(src, tmp, follow_symlinks=False)
    except OSError:
        shutil.copyfile(src, tmp, follow_symlinks=False)
    os.replace(tmp, os.path.join(folder, name))


def _inside(rdir: str, path: str) -> bool:
    top = os.path.realpath(rdir)
    return os.path.realpath(path).startswith(top.rstrip(os.sep) + os.sep)


def write_evidence(rdir: str, run_id: str, meta: dict, recs: Iterable[CaseRecord], hv: dict) -> list[str]:
    """Write ``<rdir>/evidence/<host>/`` for each host of ``hv`` with a hardware action; returns the folders.
    The documents are read under ``<rdir>/probes/<host>/``, and under each ``meta["merged_from"]`` folder's
    (a merge). A folder that would lie outside ``rdir`` (a symlink put there) is left out. OSError propagates."""
    hosts = hardware_hosts(hv)
    if not hosts:
        return []
    top = os.path.join(rdir, EVIDENCE_DIR)
    if os.path.islink(top):
        return []
    os.makedirs(top, exist_ok=True)
    recs = list(recs)
    roots = [str(d) for d in meta.get("merged_from") or []] + [rdir]
    made = []
    for h in hosts:
        folder = os.path.join(top, host_folder(h))
        if os.path.islink(folder):
            continue
        os.makedirs(folder, exist_ok=True)
        if not _inside(rdir, folder):
            continue
        mine = failing_records(recs, h)
        own = [r for r in recs if r.host == h]
        docs = _documents(roots, h, wanted_probes(mine))
        for name, src in docs.items():
            _place(src, folder, name)
        inv_file = next((f for f in docs if _probe_of(f) == "gpu_inventory"), None)
        inv = _read_doc(docs[inv_file]) if inv_file else None
        xid = [d for f in docs if _probe_of(f) == "xid_events" for d in [_read_doc(docs[f])] if d is not None]
        kernel = kernel_lines(xid, own)
        atomic_write(os.path.join(folder, "kernel.log"), "".join(ln + "\n" for ln in kernel))
        atomic_write(os.path.join(folder, "nvml.json"),
                     json.dumps(nvml_readings(inv, h, run_id, inv_file), indent=1, default=str) + "\n")
        atomic_write(os.path.join(folder, "ticket.md"), ticket_markdown(
            h, hv[h], run_id, meta.get("started"), mine, inv, kernel, sorted(docs), own))
        made.append(folder)
    return made
