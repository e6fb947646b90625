"""--slurm-drain / --slurm-resume against the real Slurm controller and nodes of tests/slurm_cluster.py.

A replayed fleet (the real 2xH200 captures, altered the way each sick node reads), one host per action kind,
each host named to a Slurm node by its ``slurm_node_name`` var: the dry run changes nothing; the drain (through
``python -m gpuaccept.scaleout.drain --apply`` on the run's folder) drains exactly the drain-rma, reset-gpu and
reboot hosts with gpuaccept's reason and leaves a drain someone else set alone; a rerun that passes resumes
the host whose failed test it passed (``pytest --slurm-resume --slurm-apply``), and not the host whose failed
test it did not run. scontrol missing or a controller that does not answer: exit 4 before any node is touched.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaccept.runner.host import save_probe
from probe_helpers import load_probe
from project_helpers import DATA, REPO, alter, make_project, replay_folder, run_pytest
from slurm_cluster import running_cluster

SELECTION = ["-m", "health or gpudirect", "-k", "not fleet_consistency and not test_gds and not gpudirect_rdma"]
#: rdma probe documents: no HCA (test_rdma_ports skips), and one HCA whose port is down (check-network)
NO_NIC = {"devices": []}
PORT_DOWN = {"devices": [{"name": "mlx5_0", "pci_address": "0000:13:00.0", "board_id": "MT_0000000838",
                          "hca_type": "MT4129", "ports": [{"port": 1, "state": "1: DOWN", "phys_state": "3: Disabled",
                                                           "link_layer": "InfiniBand", "rate_gbps": 400.0,
                                                           "rate": "400 Gb/sec (4X NDR)"}]}]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """munged + slurmctld + slurmd n1..n7, torn down after."""
    yield from running_cluster(tmp_path_factory.mktemp("slurm"), n_nodes=7)


def _gpu1(change):
    def apply(doc):
        change(doc["gpus"][1])
    return apply


#: one Xid 79 on the capture's GPU 1 (NVIDIA's bucket RESTART_BM: reboot), as the kernel writes it
XID_79 = "2026-11-29T20:21:13+0000 h-reboot kernel: NVRM: Xid (PCI:0000:00:07): 79, pid='<unknown>', " \
         "name=<unknown>, GPU has fallen off the bus.\n"


SICK = {  # host -> (Slurm node, change to the gpu_inventory capture, rdma document)
    "h-rma": ("n1", _gpu1(lambda g: g["remapped_rows"].update(failure=True)), NO_NIC),
    "h-reset": ("n2", _gpu1(lambda g: g["ecc"].update(uncorrected_volatile=2)), NO_NIC),
    "h-reboot": ("n3", None, NO_NIC),  # an Xid 79 in its kernel log (_replay)
    "h-config": ("n4", _gpu1(lambda g: g.update(power_limit_w=500.0, power_limits={
        "default_w": 700.0, "min_w": 200.0, "max_w": 700.0, "requested_w": 500.0})), NO_NIC),
    "h-rerun": ("n5", _gpu1(lambda g: g.update(compute_processes=[{"pid": 4711, "name": "python3"}])), NO_NIC),
    "h-net": ("n6", None, PORT_DOWN),
    "h-ops": ("n7", _gpu1(lambda g: g["remapped_rows"].update(failure=True)), NO_NIC),
    "h-ok": ("n8", None, NO_NIC),  # no such Slurm node: passing, nothing to do
}


def _replay(tmp_path: Path, host: str, change, rdma: dict) -> Path:
    base = tmp_path / "caps" / host
    base.mkdir(parents=True)
    src = alter(base, "gpu_inventory", change) if change else DATA
    dst = replay_folder(base, src)
    save_probe(str(dst), "rdma", {}, rdma)
    if host == "h-reboot":  # the real xid_events probe on the log line, in place of the capture's document
        (base / "kern.log").write_text(XID_79)
        (saved_path,) = dst.glob("xid_events-*.json")
        saved = json.loads(saved_path.read_text())
        saved["doc"] = load_probe("xid_events").main({"sources": [str(base / "kern.log")]})
        saved_path.write_text(json.dumps(saved))
    return dst


def _inventory(path: Path, folders: dict[str, Path]) -> None:
    lines = ["[gpu]"] + [f"{h} ansible_connection=local gpuaccept_replay={folders[h]} gpu_sku=h200-sxm-141gb "
                         f"gpus_per_node=2 slurm_node_name={SICK[h][0]}" for h in folders]
    path.write_text("\n".join(lines) + "\n")


def _nodes(cluster) -> dict[str, tuple[str, str]]:
    """node -> (state, reason without Slurm's [user@time])."""
    res = cluster.run(["scontrol", "show", "node", "-o"])
    assert res.returncode == 0, res.stderr
    out = {}
    for line in res.stdout.splitlines():
        name = re.match(r"NodeName=(\S+)", line).group(1)
        state = re.search(r"\bState=(\S+)", line).group(1)
        reason = re.search(r"\bReason=(.*?)(?: \[[^\]]*\])?$", line)
        out[name] = (state, reason.group(1) if reason else "")
    return out


def _env(cluster) -> dict:
    return {"SLURM_CONF": cluster.env["SLURM_CONF"]}


def test_drain_and_resume_a_replayed_fleet(cluster, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    make_project(project, [], None, extra_suite="", name="test_zz_empty.py")
    inv = project / "inventory.ini"
    _inventory(inv, {h: _replay(tmp_path, h, change, rdma) for h, (_, change, rdma) in SICK.items()})
    assert cluster.run(["scontrol", "update", "NodeName=n7", "State=DRAIN",
                        "Reason=ops: PSU swap, ticket 4711"]).returncode == 0
    before = _nodes(cluster)
    runs = tmp_path / "reports"

    # 1. the run with --slurm-drain alone: a dry run that prints the commands and changes nothing
    res = run_pytest(project, "--inventory", str(inv), "--reports", str(runs / "night1"), "--history", "none",
                     "--slurm-drain", "--drain-max", "100%", *SELECTION, env=_env(cluster), timeout=600)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-4000:]
    print("\n".join(ln for ln in out.splitlines() if ln.startswith(("gpuaccept", "  "))))
    assert "gpuaccept slurm: dry run (--slurm-apply makes these calls)" in out, out[-4000:]
    assert "scontrol update NodeName=n1 State=DRAIN 'Reason=gpuaccept night1: drain-rma: " in out, out[-4000:]
    assert _nodes(cluster) == before
    summary = (runs / "night1" / "summary.md").read_text()
    host_lines = [ln for ln in summary.splitlines() if ln.startswith("- **")]
    print("\n".join(host_lines))  # the closing note's evidence
    want = {"h-rma": "drain-rma", "h-reset": "reset-gpu", "h-reboot": "reboot", "h-config": "fix-config",
            "h-rerun": "rerun", "h-net": "check-network", "h-ops": "drain-rma"}
    for h, act in want.items():
        line = next(ln for ln in host_lines if f"`{h}`" in ln)
        assert f"→ **{act}**" in line, line
    assert next(ln for ln in host_lines if "`h-ok`" in ln).startswith("- **PASS** `h-ok`")
    assert "nvidia-smi -i 00000000:00:07.0 -pl 700" in summary
    assert (runs / "night1" / "hosts-drain-rma.txt").read_text() == "h-rma\nh-ops\n"
    assert (runs / "night1" / "hosts-check-network.txt").read_text() == "h-net\n"
    html = (runs / "night1" / "report.html").read_text()
    assert 'data-host="h-reboot" data-verdict="FAIL" data-action="reboot"' in html
    junit = (runs / "night1" / "junit-health.xml").read_text()
    assert '<property name="gpuaccept.action" value="reset-gpu" />' in junit
    assert '<property name="gpuaccept.action.command" value="nvidia-smi -i 00000000:00:07.0 -pl 700" />' in junit

    # 2. the drain, from the finished run's folder named through a link that moves with the next run (as
    # reports/latest): exactly the drain-rma, reset-gpu and reboot hosts, the reason naming the run's own folder
    (runs / "latest").symlink_to("night1")
    dry = subprocess.run([sys.executable, "-m", "gpuaccept.scaleout.drain", str(runs / "latest"), "--drain",
                          "--drain-max", "4"], capture_output=True, text=True, timeout=120, cwd=str(REPO),
                         env={**os.environ, **_env(cluster)})
    assert dry.returncode == 0 and "dry run (--apply makes these calls)" in dry.stdout, dry.stdout + dry.stderr
    assert _nodes(cluster) == before  # the module's dry run names its own option and changes nothing
    res = subprocess.run([sys.executable, "-m", "gpuaccept.scaleout.drain", str(runs / "latest"), "--drain",
                          "--apply", "--drain-max", "4"], capture_output=True, text=True, timeout=120, cwd=str(REPO),
                         env={**os.environ, **_env(cluster)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "h-ops: drained by someone else (ops: PSU swap, ticket 4711): left alone" in res.stdout, res.stdout
    after = _nodes(cluster)
    print("\n".join(f"{n}: {s} Reason={r}" for n, (s, r) in sorted(after.items())))  # the closing note's evidence
    drained = {n for n, (s, _) in after.items() if "DRAIN" in s}
    assert drained == {"n1", "n2", "n3", "n7"}, after
    evidence = os.path.realpath(runs / "night1")
    assert after["n1"][1].startswith("gpuaccept night1: drain-rma: test_row_remapping: h-rma GPU 1 ")
    assert "row remap failure" in after["n1"][1] and after["n1"][1].endswith(f"(evidence {evidence})")
    assert after["n2"][1].startswith("gpuaccept night1: reset-gpu: ")
    assert after["n3"][1].startswith("gpuaccept night1: reboot: test_xid_events: ")
    assert after["n7"][1] == "ops: PSU swap, ticket 4711"  # someone else's drain, untouched

    # 3. the two RMA/reset hosts repaired, rerun without test_row_remapping: h-reset passes what failed
    # (test_ecc) and is resumed; h-rma did not run its failed test and stays out of service
    _inventory(inv, {h: _replay(tmp_path / "fixed", h, None, NO_NIC) for h in ("h-rma", "h-reset")})
    res = run_pytest(project, "--inventory", str(inv), "--reports", str(runs / "night2"), "--history", "none",
                     "--slurm-resume", "--slurm-apply", "-m", "health", "-k", "not fleet_consistency and not "
                     "row_remapping", env=_env(cluster), timeout=600)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    print("\n".join(ln for ln in out.splitlines() if "slurm" in ln or ln.startswith("  ")))
    assert "h-rma: not resumed: this run did not pass test_row_remapping, which failed in run night1" in out, out[-3000:]
    now = _nodes(cluster)
    assert "DRAIN" not in now["n2"][0] and "DRAIN" in now["n1"][0] and now["n7"] == after["n7"], now
    assert "scontrol update NodeName=n2 State=RESUME" in (runs / "night2" / "slurm.txt").read_text()


def test_no_controller_is_refused_before_any_node_is_touched(cluster, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    inv = make_project(project, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"h-ok ansible_connection=local gpuaccept_replay={replay_folder(tmp_path, DATA)} "
                   "gpu_sku=h200-sxm-141gb gpus_per_node=2\n")
    conf = Path(cluster.env["SLURM_CONF"]).read_text()
    dead = tmp_path / "dead.conf"
    dead.write_text(re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=9", conf))
    for env, said in (({"SLURM_CONF": str(dead)}, "the Slurm controller does not answer scontrol ping"),
                      ({"SLURM_CONF": str(dead), "PATH": str(tmp_path / "nothing")}, "scontrol not found on PATH")):
        # --slurm-apply is refused before any node is touched
        res = run_pytest(project, "--inventory", str(inv), "--reports", str(tmp_path / "rep"), "--history", "none",
                         "--slurm-drain", "--slurm-apply", "-m", "health", env=env, timeout=120)
        assert res.returncode == 4, res.stdout + res.stderr
        assert said in res.stderr and "Traceback" not in res.stderr, res.stderr
        assert not (tmp_path / "rep").exists()
    # the dry run only prints: it runs, says the controller was not reached, and exits as the run's own code
    for env in ({"SLURM_CONF": str(dead)}, {"SLURM_CONF": str(dead), "PATH": str(tmp_path / "nothing")}):
        rep = tmp_path / f"dry{len(env)}"
        res = run_pytest(project, "--inventory", str(inv), "--reports", str(rep), "--history", "none",
                         "--slurm-drain", "-m", "health", env=env, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "dry run (--slurm-apply makes these calls); the Slurm controller was not reached" in res.stdout, res.stdout
        assert "Traceback" not in res.stdout + res.stderr
        assert "the Slurm controller was not reached" in (rep / "slurm.txt").read_text()
    res = run_pytest(project, "--inventory", str(inv), "--slurm-apply", "-m", "health", timeout=120)
    assert res.returncode == 4 and "--slurm-apply: say --slurm-drain or --slurm-resume" in res.stderr
