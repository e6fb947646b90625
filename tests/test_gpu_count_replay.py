"""test_gpu_inventory's GPU count end to end on this GPU-less machine: the suite replaying the 2xH200 captures
(tests/data/replay-h200x2) through ``gpuaccept_replay``, each state's gpu_inventory document carrying the PCI scan
that the probe itself wrote over a sysfs tree in tmp (tests/pci_helpers.py), and the boot's Xid events where the
state has one. results.json names each count's cause and action; no state without hardware evidence drains,
resets or reboots, and a capture from before the scan judges as before with its cause unverified."""
from __future__ import annotations

import json
from pathlib import Path

from gpuaccept.causes import HARDWARE_ACTIONS
from pci_helpers import sysfs_tree
from probe_helpers import run_probe
from project_helpers import DATA, alter, replay_folder, replay_project, run_pytest

BUS1 = "00000000:00:07.0"


def probe_scan(tmp_path: Path, gpus: dict) -> dict:
    """The ``pci_scan`` the gpu_inventory probe writes, run as the runner runs it, over a tree of ``gpus``."""
    rc, doc, err = run_probe("gpu_inventory", {"sysfs": str(sysfs_tree(tmp_path / "node", gpus))})
    assert rc == 0, err
    return doc["pci_scan"]


def gpu_count_test(tmp_path: Path, captures: Path, declared: int = 2) -> tuple[dict, dict, set]:
    """After a health run on ``captures``: the test_gpu_inventory record of results.json, its failure's cause,
    and the actions whose host lists (hosts-<action>.txt) the run wrote."""
    inv = replay_project(tmp_path, captures)
    inv.write_text(inv.read_text().replace("gpus_per_node=2", f"gpus_per_node={declared}"))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "gpu_inventory")
    assert res.returncode == 1, res.stdout[-3000:]
    doc = json.loads((rep / "results.json").read_text())
    t = next(t for t in doc["tests"] if t["nodeid"].endswith("test_gpu_inventory[h200-a]"))
    lists = {p.name[len("hosts-"):-len(".txt")] for p in rep.glob("hosts-*.txt")}
    return t, t["failures"][0]["cause"], lists


def without_gpu1(scan: dict | None):
    """A change of the gpu_inventory document: NVML lists GPU 0 only; the PCI scan ``scan`` beside it."""
    def change(doc):
        doc["gpus"] = doc["gpus"][:1]
        doc["gpu_count"] = 1
        if scan is not None:
            doc["pci_scan"] = scan
            doc["gpu_visibility"] = {"nvidia_visible_devices": None, "confined_by": None, "cgroup": "/",
                                     "device_nodes": [0, 1]}
    return change


def test_gpu_bound_to_vfio_is_fix_config(tmp_path):
    scan = probe_scan(tmp_path, {"0000:00:06.0": "nvidia", "0000:00:07.0": "vfio-pci"})
    t, cause, lists = gpu_count_test(tmp_path, alter(tmp_path, "gpu_inventory", without_gpu1(scan)))
    assert t["outcome"] == "failed" and lists == {"fix-config"}
    assert f"gpu_count 1 != gpus_per_node 2: NVML sees 00000000:00:06.0; {BUS1} bound to vfio-pci" in t["message"]
    assert (cause["kind"], cause["class"], cause["evidence"]["missing"]) == (
        "gpu_driver_binding", "configuration", BUS1)
    assert t["action"]["action"] == "fix-config" and t["action"]["setting"] == f"driver of {BUS1} (vfio-pci)"


def test_gpu_off_the_bus_with_an_xid79_since_boot_is_hardware(tmp_path):
    scan = probe_scan(tmp_path, {"0000:00:06.0": "nvidia"})
    caps = alter(tmp_path, "gpu_inventory", without_gpu1(scan))
    line = "NVRM: Xid (PCI:0000:00:07): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    caps = alter(tmp_path, "xid_events", lambda d: d["events"].append(
        {"time": None, "epoch": None, "pci_bus_id": BUS1, "pci_raw": "0000:00:07", "xid": 79, "pid": None,
         "process_name": None, "msg": "GPU has fallen off the bus.", "continuation": [], "uuid": None,
         "inferred": False, "line": line}), src=caps)
    t, cause, lists = gpu_count_test(tmp_path, caps)
    assert "reboot" in lists and "1 declared GPU(s) not on the PCI bus (1 NVIDIA GPU(s) there): kernel log: " \
           f"{BUS1}: Xid 79" in t["message"]
    assert (cause["kind"], t["action"]["action"], t["action"]["cause"]) == ("gpu_off_bus", "reboot", "hardware")


def test_fewer_gpus_on_the_bus_without_evidence_is_rerun(tmp_path):
    scan = probe_scan(tmp_path, {"0000:00:06.0": "nvidia"})
    t, cause, lists = gpu_count_test(tmp_path, alter(tmp_path, "gpu_inventory", without_gpu1(scan)))
    assert not lists & HARDWARE_ACTIONS
    assert "no evidence that one fell off (no Xid 79 or RmInitAdapter failure in the kernel log since boot, no seated " \
           "card without its device): the inventory may declare more than the node has" in t["message"]
    assert (cause["class"], t["action"]["action"]) == ("unverified", "rerun")


def test_a_capture_from_before_the_scan_judges_as_before_but_unverified(tmp_path):
    t, cause, lists = gpu_count_test(tmp_path, DATA, declared=8)
    assert not lists & HARDWARE_ACTIONS
    assert t["message"].startswith("h200-a: gpu_count 2 != gpus_per_node 8: NVML sees 00000000:00:06.0, ")
    assert "the document has no PCI scan" in t["message"]
    assert (cause["kind"], t["action"]["action"]) == ("gpu_count_unscanned", "rerun")


def test_the_shipped_gpu_count_short_expectation_holds_on_the_replayed_1xh200(tmp_path):
    """benchmarks/scenarios/gpu-count-short.yaml's own expectation (it runs on a GPU machine), checked by the scenario
    runner against the real 1xH200 captures (tests/data/replay-h200x1, from before the scan) declared as two GPUs."""
    import subprocess
    import sys

    import yaml

    from benchmarks.scenarios import spec
    from project_helpers import REPO
    sc = spec.load_file(str(REPO / "benchmarks" / "scenarios" / "gpu-count-short.yaml"))
    run = sc.runs[0]
    doc = {"claim": sc.claim, "gpus": 0, "inventory": {**sc.inventory, "gpus_per_node": 2,
                                                       "gpuaccept_replay": str(DATA.parent / "replay-h200x1")},
           "run": {"name": run.name, "markers": run.markers, "keyword": run.keyword, "expect": run.expect}}
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "gpu-count-short.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    res = subprocess.run([sys.executable, "-m", "benchmarks.scenarios", "--scenarios", str(tmp_path / "sc"), "--out",
                          str(tmp_path / "out"), "--gpus", "0"], cwd=REPO, capture_output=True, text=True, timeout=300)
    rows = [ln for ln in res.stdout.splitlines() if ln.startswith("gpu-count-short ")]
    assert res.returncode == 0 and len(rows) >= 4 and all(ln.endswith("holds") for ln in rows), \
        res.stdout[-3000:] + res.stderr[-2000:]


def test_a_gpu_gone_from_the_bus_that_an_earlier_run_counted_is_hardware(tmp_path):
    """Night 1: the host shows both GPUs, kept in the history database. Night 2: GPU 1 is gone from NVML and from
    the PCI bus, with no Xid left in the kernel log since the node rebooted: the history's 2 GPUs are the
    evidence that one fell off (hardware). Without a history (--history none) the same state is unverified."""
    inv = replay_project(tmp_path, DATA)
    first = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "night1"), "-k", "gpu_inventory")
    assert first.returncode == 0, first.stdout[-3000:]
    assert (tmp_path / "reports" / "history.sqlite").exists()
    scan = probe_scan(tmp_path, {"0000:00:06.0": "nvidia"})
    inv.write_text(f"h200-a ansible_connection=local gpu_sku=h200-sxm-141gb gpus_per_node=2 gpuaccept_replay="
                   f"{replay_folder(tmp_path / 'night2-captures', alter(tmp_path, 'gpu_inventory', without_gpu1(scan)))}\n")
    got = {}
    for night, extra in (("night2", ()), ("no-history", ("--history", "none"))):
        res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / night), "-k", "gpu_inventory",
                         *extra)
        assert res.returncode == 1, res.stdout[-3000:]
        doc = json.loads((tmp_path / night / "results.json").read_text())
        got[night] = next(t for t in doc["tests"] if t["nodeid"].endswith("test_gpu_inventory[h200-a]"))
    t = got["night2"]
    cause = t["failures"][0]["cause"]
    assert "this host had 2 GPUs in an earlier run" in t["message"], t["message"]
    assert (cause["kind"], cause["class"], t["action"]["cause"]) == ("gpu_off_bus", "hardware", "hardware")
    assert t["action"]["action"] in HARDWARE_ACTIONS
    alone = got["no-history"]
    assert (alone["failures"][0]["cause"]["class"], alone["action"]["action"]) == ("unverified", "rerun")


def test_more_gpus_declared_than_the_skus_board_holds_is_the_inventory(tmp_path):
    """gpus_per_node=16 on an H200 SXM node (the SKU file's board holds 8): no rerun or repair meets it, so it is
    configuration (fix-config: gpus_per_node), never unverified nor hardware."""
    t, cause, lists = gpu_count_test(tmp_path, DATA, declared=16)
    assert "gpus_per_node is more than this SKU's board holds (8): the inventory is wrong" in t["message"], t["message"]
    assert (cause["kind"], cause["class"]) == ("gpu_count_over_board", "configuration")
    assert (t["action"]["action"], t["action"]["setting"]) == ("fix-config", "gpus_per_node") and lists == {"fix-config"}
