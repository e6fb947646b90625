"""Tests of the NVML probes (gpu_inventory, nvlink) on a machine without a GPU.

The probes run as real subprocesses (as the runner runs them on a node) and, for the NVML code paths, in
process against a fake pynvml (tests/probe_helpers.py) that mirrors the H200 captures. The fake checks every
call against the real pynvml's signature, so a wrong function name or argument count fails here rather than
on the GPU node. The XID probe is tested in test_xid.py, NVLink judging and P2P bandwidth in test_nvlink.py.
"""
from __future__ import annotations

import json
import os
import re
import types

import pynvml as real_nvml  # installed on the controller: nvidia-ml-py
import pytest

from probe_helpers import H200X2, NV18, PROBES, FakeNvml, install_fake, load_probe, run_probe

inv = load_probe("gpu_inventory")
nvl = load_probe("nvlink")


# ---------------------------------------------------------------------------------------------------------
# subprocess runs on this GPU-less machine


def test_gpu_inventory_without_driver_is_not_a_failure():
    rc, doc, _ = run_probe("gpu_inventory", {})
    assert rc == 0
    assert doc["nvml_available"] is False
    assert doc["reason"]
    assert doc["reason_code"] in ("no_driver", "driver_not_loaded", "no_gpu")
    if doc["reason_code"] == "no_driver":
        assert doc["reason"] == "no NVIDIA driver (libnvidia-ml.so not found)"
    assert doc["gpus"] == []
    assert doc["hostname"]
    assert "kernel_driver_version" in doc


def test_without_driver_and_library_nvml_is_not_even_imported(tmp_path):
    """No /proc/driver/nvidia, no /dev/nvidia0 and no libnvidia-ml.so.1 (this machine): the inventory says what
    nvmlInit would (no_driver) without importing pynvml, found installed but a trap here, that raises if run."""
    if os.path.exists("/proc/driver/nvidia") or os.path.exists("/dev/nvidia0"):
        pytest.fail("this test needs a machine without the NVIDIA driver (CI and the development machine)")
    (tmp_path / "pynvml.py").write_text("raise SystemExit('pynvml imported')\n")
    rc, doc, err = run_probe("gpu_inventory", {}, env={"PYTHONPATH": str(tmp_path)})
    assert rc == 0, err
    assert doc["reason_code"] == "no_driver" and doc["reason"] == "no NVIDIA driver (libnvidia-ml.so not found)"
    assert doc["driver_present"] is False and doc["gpus"] == [] and "pci_scan" in doc


def test_gpu_inventory_without_pynvml(tmp_path):
    """A Python without nvidia-ml-py (a real virtual environment without it) says so."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    py = tmp_path / "venv" / "bin" / "python"
    p = subprocess.run([str(py), str(PROBES / "gpu_inventory.py"), "{}"], capture_output=True, text=True, timeout=120)
    rc, doc = p.returncode, json.loads(p.stdout.splitlines()[-1])
    assert rc == 0, p.stderr
    assert doc["nvml_available"] is False
    assert doc["reason"] == "pynvml (nvidia-ml-py) not installed"
    assert doc["reason_code"] == "no_pynvml"


def test_nvlink_without_driver_fails_cleanly():
    rc, doc, stderr = run_probe("nvlink", {})
    assert rc == 1
    assert doc["failed"] is True
    assert doc["msg"].startswith("NVML unavailable: ")
    assert "Traceback" not in stderr


# ---------------------------------------------------------------------------------------------------------
# NVML code paths against a fake pynvml


def test_probes_reference_only_real_pynvml_names():
    """Every nvml*/NVML_*/c_nvml* name a probe mentions exists in the installed pynvml."""
    for name in ("gpu_inventory", "nvlink"):
        src = (PROBES / f"{name}.py").read_text()
        names = set(re.findall(r"['\"](nvml[A-Z]\w*|c_nvml\w+)['\"]", src))
        names |= set(re.findall(r"\bnv\.(\w+)", src))
        missing = sorted(n for n in names if not hasattr(real_nvml, n))
        assert not missing, f"{name}.py uses names pynvml does not have: {missing}"


def test_local_constants_match_pynvml():
    for cname, bit in inv.CLOCK_EVENT_REASONS:
        camel = "".join(p.capitalize() for p in cname.split("_"))  # sw_power_cap -> SwPowerCap
        val = getattr(real_nvml, "nvmlClocksEventReason" + camel, None)
        if val is None:
            val = getattr(real_nvml, "nvmlClocksThrottleReason" + camel)
        assert val == bit, cname
    assert nvl.TOPOLOGY_LEVELS == {real_nvml.NVML_TOPOLOGY_INTERNAL: "X", real_nvml.NVML_TOPOLOGY_SINGLE: "PIX",
                                   real_nvml.NVML_TOPOLOGY_MULTIPLE: "PXB", real_nvml.NVML_TOPOLOGY_HOSTBRIDGE: "PHB",
                                   real_nvml.NVML_TOPOLOGY_NODE: "NODE", real_nvml.NVML_TOPOLOGY_SYSTEM: "SYS"}
    assert dict(nvl.P2P_CAPS) == {"read": 0, "write": real_nvml.NVML_P2P_CAPS_INDEX_WRITE,
                                  "nvlink": real_nvml.NVML_P2P_CAPS_INDEX_NVLINK,
                                  "atomics": real_nvml.NVML_P2P_CAPS_INDEX_ATOMICS}
    assert nvl.P2P_STATUS[real_nvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED] == "IOH_TOPOLOGY_NOT_SUPPORTED"
    assert nvl.FI_NVLINK_SPEED_MBPS_COMMON == real_nvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON
    assert nvl.FI_NVLINK_LINK_COUNT == real_nvml.NVML_FI_DEV_NVLINK_LINK_COUNT
    assert nvl.FI_NVLINK_GET_SPEED == real_nvml.NVML_FI_DEV_NVLINK_GET_SPEED
    assert dict(nvl.NVLINK_ERROR_COUNTERS) == {"replay": real_nvml.NVML_NVLINK_ERROR_DL_REPLAY,
                                              "recovery": real_nvml.NVML_NVLINK_ERROR_DL_RECOVERY,
                                              "crc_flit": real_nvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
                                              "crc_data": real_nvml.NVML_NVLINK_ERROR_DL_CRC_DATA}


@pytest.fixture
def fake_pynvml(monkeypatch):
    def install(fake: FakeNvml):
        return install_fake(monkeypatch, fake)
    return install


def test_gpu_inventory_on_fake_h200x2(fake_pynvml):
    fake = fake_pynvml(FakeNvml(H200X2, nvlink=NV18))
    doc = inv.main({})
    json.dumps(doc)  # serialisable
    assert doc["nvml_available"] is True
    assert (doc["driver"], doc["nvml_version"], doc["cuda_driver_version"], doc["gpu_count"]) == \
        ("580.159.04", "13.580.159.04", 13000, 2)
    g0, g1 = doc["gpus"]
    assert g0["pci_bus_id"] == "00000000:00:06.0" and g0["pci_device_id"] == "0x233510de"
    assert g0["memory_total_bytes"] == 150754820096 and g0["cuda_capability"] == [9, 0]
    assert g0["pcie"] == {"gen": 5, "width": 16, "gen_max": 5, "width_max": 16, "gen_device_max": 5, "replay_counter": 2}
    assert g0["ecc"]["mode_current"] is True and g0["ecc"]["uncorrected_volatile"] == 0
    assert g1["remapped_rows"] == {"correctable": 2, "uncorrectable": 0, "pending": False, "failure": False}
    assert g0["retired_pages"] == {k: {"nvml_error": "Not Supported"} for k in ("single_bit", "double_bit", "pending")}
    assert (g0["temp_c"], g0["power_w"], g0["power_limit_w"]) == (34, 113.036, 700.0)
    assert g0["clocks"] == {"sm_mhz": 405, "mem_mhz": 3201, "sm_max_mhz": 1980, "mem_max_mhz": 3201}
    assert g0["clocks_event_reasons"] == 1 and g0["clocks_event_reasons_active"] == ["gpu_idle"]
    assert g0["persistence_mode"] is True and g0["mig_mode"] == {"current": False, "pending": False}
    assert g0["compute_mode"] == "Default"
    (proc,) = g0["compute_processes"]
    assert proc["pid"] == os.getpid() and proc["used_memory_bytes"] == 524288000 and proc["name"]
    assert g0["fabric"] == {"state": "COMPLETED", "status": "Success", "clique_id": 32766,
                            "cluster_uuid": "00010203-0405-0607-0809-0a0b0c0d0e0f", "health_mask": 0,
                            "struct": "c_nvmlGpuFabricInfoV_t"}
    assert g0["nvlink_links"] == 18 and g1["nvlink_links"] == 18
    # the calls were made in the probe's forked NVML child (_deadline.py); the fake records them in a file, so the
    # record holds them: the fabric call that answered is there, the deprecated one (only a fallback) is not
    assert "nvmlDeviceGetGpuFabricInfoV" in fake.calls and os.getpid() == fake.pid
    assert "nvmlDeviceGetGpuFabricInfo" not in fake.calls


def test_gpus_excluded_from_the_driver_are_listed_by_bus_id_and_uuid(fake_pynvml):
    """NVML's excluded devices (NVreg_ExcludedGpus) in the document, read before the count: a node whose every
    GPU is excluded (NVML count 0) still says which."""
    fake_pynvml(FakeNvml(H200X2[:1], excluded=["0000:00:07.0"]))
    doc = inv.main({})
    assert doc["nvml_excluded"] == [{"bus_id": "00000000:00:07.0", "uuid": "GPU-eeeeeeee-0000-0000-0000-000000000000"}]
    fake_pynvml(FakeNvml([], excluded=["00000000:00:06.0", "00000000:00:07.0"]))
    doc = inv.main({})
    assert doc["reason_code"] == "no_gpu" and [e["bus_id"] for e in doc["nvml_excluded"]] == \
        ["00000000:00:06.0", "00000000:00:07.0"]
    fake_pynvml(FakeNvml(H200X2))
    assert inv.main({})["nvml_excluded"] == []


def test_the_fake_records_calls_made_in_the_forked_nvml_child(fake_pynvml):
    """The record the assertion above reads sees a call made only in a forked child: it can fail."""
    fake = fake_pynvml(FakeNvml(H200X2, nvlink=NV18, fabric=None))
    pid = os.fork()
    if pid == 0:
        import pynvml
        pynvml.nvmlSystemGetDriverVersion()
        os._exit(0)
    os.waitpid(pid, 0)
    assert fake.calls == ["nvmlSystemGetDriverVersion"]


def test_gpu_inventory_on_fake_h200_1gpu_vm(fake_pynvml):
    fake_pynvml(FakeNvml(H200X2[:1], nvlink=None, fabric=None))
    doc = inv.main({})
    (g,) = doc["gpus"]
    assert g["nvlink_links"] == {"nvml_error": "Not Supported"}  # not 0
    assert g["fabric"] == {"nvml_error": "Not Supported"}


def test_nvlink_on_fake_h200x2(fake_pynvml):
    fake_pynvml(FakeNvml(H200X2, nvlink=NV18))
    doc = nvl.main({"sample_seconds": 0.01})
    json.dumps(doc)
    g0, g1 = doc["gpus"]
    assert g0["active_count"] == 18 and g0["link_count"] == 18 and g0["nvlink_supported"] is True
    assert g0["speed_mbps_common"] == 26562
    lk = g1["links"][3]
    assert lk == {"link": 3, "active": True, "version": 4, "remote_pci_bus_id": "00000000:00:06.0",
                  "remote_device_type": "GPU", "speed_mbps": 26562,
                  "errors": {"replay": 7, "recovery": 0, "crc_flit": 0, "crc_data": 0},
                  "errors_delta": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}}
    (pair,) = doc["pairs"]
    assert pair == {"a": 0, "b": 1, "common_ancestor": "PHB",
                    "p2p": {"read": "OK", "write": "OK", "nvlink": "OK", "atomics": "OK"},
                    "nvlink": True, "nvlink_via": "direct", "nvlink_count": 18, "topo": "NV18"}
    assert "p2p_bandwidth" not in doc  # the bandwidth is the p2p_bandwidth probe's


def test_nvlink_refuses_the_old_bandwidth_argument(fake_pynvml):
    fake_pynvml(FakeNvml(H200X2, nvlink=NV18))
    with pytest.raises(nvl.ProbeFailed, match="unknown argument"):
        nvl.main({"p2p_bandwidth": True})


def test_nvlink_on_fake_1gpu_vm(fake_pynvml):
    fake_pynvml(FakeNvml(H200X2[:1], nvlink=None))
    doc = nvl.main({})
    (g,) = doc["gpus"]
    assert g["nvlink_supported"] is False and g["links"] == []
    assert g["active_count"] == {"nvml_error": "Not Supported"}
    assert g["link_count"] == {"nvml_error": "Not Supported"}
    assert doc["pairs"] == []


def test_call_records_errors_not_values():
    nv = types.SimpleNamespace(
        nvmlA=lambda: (_ for _ in ()).throw(real_nvml.NVMLError(real_nvml.NVML_ERROR_NOT_SUPPORTED)),
        nvmlB=lambda: (_ for _ in ()).throw(TypeError("Don't know how to convert parameter 3")),
        nvmlC=lambda: 0)
    assert inv.call(nv, "nvmlA") == {"nvml_error": "Not Supported"}
    assert inv.call(nv, "nvmlB") == {"nvml_error": "TypeError: Don't know how to convert parameter 3"}
    assert inv.call(nv, "nvmlC") == 0
    assert inv.call(nv, "nvmlMissing") == {"nvml_error": "pynvml has no nvmlMissing"}
    assert inv.is_error(inv.call(nv, "nvmlA")) and not inv.is_error(0)


def test_decode_clock_reasons_and_proc_version():
    assert inv.decode_clock_reasons(0) == []
    assert inv.decode_clock_reasons(0x1 | 0x4 | 0x40 | 0x1000) == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown",
                                                                     "unknown_0x1000"]
    content = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
               "(dvs-builder@U22-I3-AF03-09-1)  Thu Nov 13 22:41:26 UTC 2026\nGCC version:  gcc version 13.3.0\n")
    assert inv.parse_proc_driver_version(content)[0] == "580.159.04"
    assert inv.parse_proc_driver_version("garbage") == (None, None)


@pytest.mark.parametrize("code, reason_code", [(12, "no_driver"), (9, "driver_not_loaded"), (18, "version_mismatch"),
                                               (4, "no_permission"), (999, "init_failed")])
def test_init_failure_reasons(code, reason_code):
    got_code, reason = inv.init_failure_reason(real_nvml.NVMLError(code))
    assert got_code == reason_code and reason


class LostGpu1(FakeNvml):
    """GPU 1 fell off the bus: NVML counts it, nvmlDeviceGetHandleByIndex answers NVML_ERROR_GPU_IS_LOST (15);
    memory info v1 answers Not Supported (3), v2 answers (unified-memory parts). Invented states."""

    def nvmlDeviceGetHandleByIndex(self, i):
        if i == 1:
            raise self.err(real_nvml.NVML_ERROR_GPU_IS_LOST)
        return i

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        if version is None:
            raise self.err(real_nvml.NVML_ERROR_NOT_SUPPORTED)
        return types.SimpleNamespace(total=150754820096)


def test_gpu_inventory_records_a_lost_gpu_and_reads_memory_v2(fake_pynvml):
    fake_pynvml(LostGpu1(H200X2, nvlink=NV18))
    doc = inv.main({})
    json.dumps(doc)
    g0, g1 = doc["gpus"]
    assert g1 == {"index": 1, "lost": True, "nvml_error": "GPU is lost"}
    assert g0["memory_total_bytes"] == 150754820096  # from nvmlDeviceGetMemoryInfo(h, nvmlMemory_v2)
    assert doc["gpu_count"] == 2 and isinstance(doc["driver_present"], bool)
