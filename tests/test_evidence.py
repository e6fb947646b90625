"""evidence/<host>/ beside a hardware action (gpuaccept.reporting.evidence): a replayed 2xH200 node
whose GPU 1 reads a row-remap failure and whose kernel log holds an Xid 64 on that GPU (the real xid_events
probe on a log line; the real judging) gets ticket.md, kernel.log, nvml.json and its probe documents; a host
with only fix-config gets none; a host name with a slash or '..' never becomes a path outside the folder.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from gpuaccept.reporting.evidence import EVIDENCE_DIR, host_folder, write_evidence
from gpuaccept.reporting.verdicts import host_verdicts
from gpuaccept.runner.host import save_probe
from gpuaccept.scaleout.merge import merge, read_folder
from gpuaccept.scaleout.slurm import folder_name
from probe_helpers import load_probe
from project_helpers import DATA, alter, make_project, replay_folder, run_pytest

XID_LINE = ("2026-11-29T20:18:09+0000 gpu-node-07 kernel: NVRM: Xid (PCI:0000:00:07): 64, pid='<unknown>', "
            "name=<unknown>, Row Remapper: Failed to remap row (0x0000000000d8a2a0)")


def _sick_captures(tmp_path: Path) -> Path:
    log = tmp_path / "kern.log"
    tmp_path.mkdir(parents=True, exist_ok=True)
    log.write_text(XID_LINE + "\n")
    xev = load_probe("xid_events")
    caps = alter(tmp_path, "gpu_inventory", lambda d: d["gpus"][1]["remapped_rows"].update(failure=True))
    return alter(tmp_path, "xid_events", lambda d: d.update(xev.main({"sources": [str(log)]})), src=caps)


def _low_power(doc):
    doc["gpus"][1].update(power_limit_w=500.0, power_limits={"default_w": 700.0, "min_w": 200.0, "max_w": 700.0,
                                                             "requested_w": 500.0})


def _run(tmp_path: Path) -> tuple[Path, Path]:
    """A replayed run of h-rma (remap failure, Xid 64) and h-config (power limit lowered): its folder, and the
    folder of h-rma's captures."""
    sick = _sick_captures(tmp_path / "sick")
    (tmp_path / "conf").mkdir()
    conf = alter(tmp_path / "conf", "gpu_inventory", _low_power)
    project = tmp_path / "project"
    project.mkdir()
    inv = make_project(project, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("".join(f"{h} ansible_connection=local gpuaccept_replay={replay_folder(tmp_path / h, caps)} "
                           "gpu_sku=h200-sxm-141gb gpus_per_node=2\n" for h, caps in (("h-rma", sick), ("h-config", conf))))
    rep = tmp_path / "rep"
    res = run_pytest(project, "--inventory", str(inv), "--reports", str(rep), "--history", "none", "-m", "health",
                     "-k", "not fleet_consistency")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    assert "1 host(s) to drain-rma" in res.stdout and "1 host(s) to fix-config" in res.stdout, res.stdout[-3000:]
    return rep, sick


def test_evidence_of_a_drain_rma_host_and_none_for_fix_config(tmp_path):
    rep, sick = _run(tmp_path)
    assert sorted(os.listdir(rep / EVIDENCE_DIR)) == ["h-rma"]  # h-config (fix-config): no evidence
    # a replayed host saves no documents under probes/: its ticket is made from the records
    ticket = (rep / EVIDENCE_DIR / "h-rma" / "ticket.md").read_text()
    assert "00000000:00:07.0" in ticket and "1650000000002" in ticket and "remap_failure" in ticket
    assert XID_LINE in ticket and XID_LINE in (rep / EVIDENCE_DIR / "h-rma" / "kernel.log").read_text()

    # as a live run keeps them: the node's documents under probes/<host>/; the merge of that folder then
    # writes the evidence with them
    for f in sorted(sick.glob("*.json")):
        saved = json.loads(f.read_text())
        save_probe(str(rep / "probes" / "h-rma"), f.name.rsplit("-", 1)[0], saved["args"], saved["doc"])
    merged = tmp_path / "merged"
    merge([str(rep)], str(merged))
    ev = merged / EVIDENCE_DIR / "h-rma"
    assert sorted(os.listdir(merged / EVIDENCE_DIR)) == ["h-rma"]
    ticket = (ev / "ticket.md").read_text()
    print(ticket)  # the closing note's evidence
    assert ticket.startswith("# h-rma: drain-rma (gpuaccept evidence)")
    assert "- **action**: drain-rma: row remapping failure" in ticket and "- **cause class**: hardware" in ticket
    gpu_row = next(ln for ln in ticket.splitlines() if ln.startswith("| 1 | "))
    assert gpu_row.startswith("| 1 | 00000000:00:07.0 | 1650000000002 | 96.00.A5.00.1A | "
                              "GPU-00000000-0000-0000-0000-000000000002 | "), gpu_row
    assert "test_row_remapping" in gpu_row and "test_xid_events" in gpu_row
    assert "| test_row_remapping | GPU 1 (00000000:00:07.0, serial 1650000000002) | remap_failure | True | - | " \
           "NVIDIA GPU Memory Error Management" in ticket
    assert "Xid 64 on 00000000:00:07.0" in ticket and XID_LINE in ticket
    assert "driver 580.159.04" in ticket and "VBIOS 96.00.A5.00.1A" in ticket and "gpuaccept 0.1.0" in ticket
    assert (ev / "kernel.log").read_text() == XID_LINE + "\n"
    nvml = json.loads((ev / "nvml.json").read_text())
    assert [g["serial"] for g in nvml["gpus"]] == ["1650000000001", "1650000000002"]
    assert nvml["gpus"][1]["vbios_version"] == "96.00.A5.00.1A" and nvml["driver"] == "580.159.04"
    docs = sorted(p.name.rsplit("-", 1)[0] for p in ev.glob("*-*.json"))
    assert docs == ["gpu_inventory", "xid_events"], docs  # the failing tests' documents only
    src = next((rep / "probes" / "h-rma").glob("gpu_inventory-*.json"))
    assert os.path.samefile(src, ev / src.name)  # hard-linked, not copied (one filesystem)


def test_host_names_never_leave_the_report_folder(tmp_path):
    rep, _ = _run(tmp_path)
    meta, recs = read_folder(str(rep))
    bad = ["../../outside", "a/b", "..", "."]
    mine = [r for r in recs if r.host == "h-rma"]
    renamed = []
    for name in bad:  # the real records of h-rma, filed under names a merged results.json could carry
        for r in mine:
            renamed.append(dataclasses.replace(r, nodeid=r.nodeid.replace("h-rma", name), host=name,
                                               failures=[{**e, "host": name} for e in r.failures]))
    out = tmp_path / "out"
    (out / "probes").mkdir(parents=True)
    before = set(tmp_path.rglob("*"))
    hv = host_verdicts(renamed, bad)
    made = write_evidence(str(out), "x", meta, renamed, hv)
    assert sorted(Path(m).name for m in made) == sorted(host_folder(n) for n in bad), made
    assert all(Path(m).parent == out / EVIDENCE_DIR for m in made), made
    new = sorted(set(tmp_path.rglob("*")) - before)
    assert new and all(str(p).startswith(str(out / EVIDENCE_DIR) + os.sep) or p == out / EVIDENCE_DIR for p in new), new
    for name in bad:
        assert host_folder(name) == folder_name(name)  # the Slurm launcher's rule: one path component
        assert "/" not in host_folder(name) and not host_folder(name).startswith(".")
        assert (out / EVIDENCE_DIR / host_folder(name) / "ticket.md").read_text().startswith(f"# {name}: drain-rma")
    assert host_folder("h-rma") == "h-rma" and host_folder("gpu%2F1") == "gpu%252F1"
