"""The gpu_inventory probe's PCI scan and GPU visibility (gpuaccept/probes/gpu_inventory.py: pci_scan,
gpu_visibility) over trees laid out as the kernel's in tmp (tests/pci_helpers.py: real folders, files and
symlinks), in process and as the runner runs the probe (a subprocess with ``{"sysfs": ...}``), on this GPU-less
machine: NVML is not there, the scan is in the document all the same."""
from __future__ import annotations

import os

from pci_helpers import CLASS_VGA, add_device, add_slot, sysfs_tree
from probe_helpers import load_probe, run_probe

inv = load_probe("gpu_inventory")


def test_scan_lists_nvidia_gpus_with_their_bound_driver_and_passes_over_the_rest(tmp_path):
    sysfs = sysfs_tree(tmp_path, {"0000:19:00.0": "nvidia", "0000:1a:00.0": "vfio-pci", "0000:1b:00.0": None})
    add_device(sysfs, "0001:2c:00.0", cls=CLASS_VGA, device="0x1eb8", driver="nouveau")
    doc = inv.pci_scan(str(sysfs))
    assert doc["devices"] == [
        {"bus_id": "00000000:19:00.0", "device_id": "0x2335", "class": "0x030200", "driver": "nvidia"},
        {"bus_id": "00000000:1A:00.0", "device_id": "0x2335", "class": "0x030200", "driver": "vfio-pci"},
        {"bus_id": "00000000:1B:00.0", "device_id": "0x2335", "class": "0x030200", "driver": None},
        {"bus_id": "00000001:2C:00.0", "device_id": "0x1eb8", "class": "0x030000", "driver": "nouveau"}]
    assert doc["entries"] == 7 and doc["truncated"] is False and doc["errors"] == []
    assert doc["sysfs"] == str(sysfs) and doc["occupied_slots"] == []


def test_seated_cards_are_listed_with_whether_a_device_answers(tmp_path):
    sysfs = sysfs_tree(tmp_path, {"0000:19:00.0": "nvidia"}, others=False)
    add_slot(sysfs, "3", "0000:1c:00")        # a card seated, nothing enumerated there
    add_slot(sysfs, "4", "0000:19:00")        # the GPU's slot
    add_slot(sysfs, "5", "0000:1d:00", "0")   # empty
    add_slot(sysfs, "6", "0000:1e:00", None)  # no hot-plug driver: says nothing of a card
    assert inv.pci_scan(str(sysfs))["occupied_slots"] == [
        {"slot": "3", "address": "00000000:1C:00.0", "device_present": False},
        {"slot": "4", "address": "00000000:19:00.0", "device_present": True}]


def test_unreadable_parts_are_facts_not_a_failed_scan(tmp_path):
    sysfs = sysfs_tree(tmp_path, {"0000:19:00.0": "nvidia", "0000:1a:00.0": "nvidia"}, others=False)
    os.unlink(sysfs / "devices" / "pci0000:00" / "0000:1a:00.0" / "class")
    doc = inv.pci_scan(str(sysfs))
    assert [d["bus_id"] for d in doc["devices"]] == ["00000000:19:00.0"]
    assert len(doc["errors"]) == 1 and doc["errors"][0]["error"].startswith("FileNotFoundError")
    assert doc["errors"][0]["path"].endswith("0000:1a:00.0/class")
    gone = inv.pci_scan(str(tmp_path / "no-sysfs"))
    assert gone["devices"] == [] and gone["entries"] == 0
    assert gone["errors"][0]["path"] == str(tmp_path / "no-sysfs" / "bus" / "pci" / "devices")


def test_scan_is_bounded(tmp_path, monkeypatch):
    sysfs = sysfs_tree(tmp_path, {f"0000:{b:02x}:00.0": "nvidia" for b in range(0x19, 0x1d)}, others=False)
    monkeypatch.setattr(inv, "PCI_SCAN_MAX_ENTRIES", 3)
    doc = inv.pci_scan(str(sysfs))
    assert doc["truncated"] is True and doc["entries"] == 3 and len(doc["devices"]) == 3


def test_visibility_reads_the_variable_the_container_and_the_device_nodes(tmp_path):
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    for n in ("nvidia0", "nvidia3", "nvidiactl", "nvidia-uvm"):
        (root / "dev" / n).write_text("")
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "cgroup").write_text("0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-9.scope\n")
    vis = inv.gpu_visibility({"NVIDIA_VISIBLE_DEVICES": "0,3"}, str(root))
    assert vis == {"nvidia_visible_devices": "0,3", "confined_by": "kubernetes",
                   "cgroup": "/kubepods.slice/kubepods-pod1.slice/cri-containerd-9.scope", "device_nodes": [0, 3]}
    (root / ".dockerenv").write_text("")
    assert inv.gpu_visibility({}, str(root))["confined_by"] == "docker"
    (root / "proc" / "self" / "cgroup").write_text(
        "12:devices:/slurm/uid_0/job_41/step_0\n1:name=systemd:/user.slice\n")
    os.unlink(root / ".dockerenv")
    got = inv.gpu_visibility({}, str(root))
    assert (got["confined_by"], got["cgroup"]) == ("slurm", "/slurm/uid_0/job_41/step_0")
    (root / "proc" / "self" / "cgroup").write_text("0::/user.slice/user-0.slice/session-3.scope\n")
    bare = inv.gpu_visibility({}, str(root))
    assert bare["confined_by"] is None and bare["nvidia_visible_devices"] is None
    assert inv.gpu_visibility({}, str(tmp_path / "none"))["device_nodes"] is None


def test_the_probe_as_run_carries_the_scan_without_nvml(tmp_path):
    sysfs = sysfs_tree(tmp_path, {"0000:00:06.0": "nvidia", "0000:00:07.0": "vfio-pci"})
    rc, doc, _ = run_probe("gpu_inventory", {"sysfs": str(sysfs)})
    assert rc == 0 and doc["nvml_available"] is False
    assert [(d["bus_id"], d["driver"]) for d in doc["pci_scan"]["devices"]] == [
        ("00000000:00:06.0", "nvidia"), ("00000000:00:07.0", "vfio-pci")]
    assert set(doc["gpu_visibility"]) == {"nvidia_visible_devices", "confined_by", "cgroup", "device_nodes"}
    rc, doc, _ = run_probe("gpu_inventory", {"sysfs": str(sysfs), "sysfs_root": "/x"})
    assert rc == 1 and "unknown argument(s): sysfs_root" in doc["msg"]


def test_the_runner_reads_the_scan_under_host_sysfs_root(tmp_path):
    """``host_sysfs_root`` (the inventory variable host_memory's EDAC reading takes) reaches the scan too; without it
    the probe is asked as before (``{}``: the key of the saved captures)."""
    from gpuaccept.config.inventory import load_inventory
    from gpuaccept.runner.host import HostRunner
    from gpuaccept.transport import get_transport
    sysfs = sysfs_tree(tmp_path, {"0000:19:00.0": "nouveau"})
    inv = tmp_path / "inv.ini"
    inv.write_text(f"n1 ansible_connection=local host_sysfs_root={sysfs}\nn2 ansible_connection=local\n")
    hosts = load_inventory(str(inv)).hosts
    node = HostRunner(hosts["n1"], lambda h: get_transport(h), probe_timeout=120)
    try:
        scan = node.gpu_inventory()["pci_scan"]
    finally:
        node.close()
    assert scan["sysfs"] == str(sysfs) and [(d["bus_id"], d["driver"]) for d in scan["devices"]] == [
        ("00000000:19:00.0", "nouveau")]
    plain = HostRunner(hosts["n2"], lambda h: get_transport(h), probe_timeout=120)
    try:
        assert plain.gpu_inventory()["pci_scan"]["sysfs"] == "/sys"
        assert plain.cached("gpu_inventory", {}) is not None
    finally:
        plain.close()
