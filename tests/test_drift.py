"""Configuration drift (gpuaccept/judging/drift.py, probes nccl_env and gpu_inventory, the drift suites).

GPU readings are real: the 2xH200 gpu_inventory capture (tests/data/replay-h200x2) plus the power, clock and
pending-mode values of an H200's ``nvidia-smi -q -x`` (tests/data/h200-1gpu-nvidia-smi-q.xml, same driver),
read from that XML here. Each drift is that capture altered the way such a node reads (the alteration is
written in the test). The NCCL environment is read by the real nccl_env probe from real files in a temp dir.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpuaccept.judging import drift
from gpuaccept.config.thresholds import load_all
from gpuaccept.judging.recorder import Recorder
from project_helpers import DATA, alter, outcomes, replay_project, run_pytest

REPO = Path(__file__).resolve().parent.parent
PROBES = REPO / "gpuaccept" / "probes"
SPECS = load_all(str(REPO / "thresholds"))
H200 = SPECS["h200-sxm-141gb"]
INV_DOC = json.loads(next(DATA.glob("gpu_inventory-*.json")).read_text())["doc"]
SMI = ET.parse(Path(__file__).resolve().parent / "data" / "h200-1gpu-nvidia-smi-q.xml").getroot().find("gpu")


def smi(path: str) -> float:
    """A number from the H200's nvidia-smi -q -x: ``"700.00 W"`` -> 700.0, ``"1980 MHz"`` -> 1980."""
    return float(SMI.findtext(path).split()[0])


def smi_on(path: str) -> bool:
    return SMI.findtext(path).strip() == "Enabled"


def healthy(i: int) -> dict:
    """GPU ``i`` of the 2xH200 capture with the fields the extended gpu_inventory probe adds, valued as the
    H200's nvidia-smi -q printed them (the capture predates those fields)."""
    g = copy.deepcopy(INV_DOC["gpus"][i])
    g["power_limits"] = {"default_w": smi("gpu_power_readings/default_power_limit"),
                         "requested_w": smi("gpu_power_readings/requested_power_limit"),
                         "min_w": smi("gpu_power_readings/min_power_limit"),
                         "max_w": smi("gpu_power_readings/max_power_limit")}
    g["application_clocks"] = {"app_sm_mhz": smi("applications_clocks/graphics_clock"),
                               "app_mem_mhz": smi("applications_clocks/mem_clock"),
                               "app_default_sm_mhz": smi("default_applications_clocks/graphics_clock"),
                               "app_default_mem_mhz": smi("default_applications_clocks/mem_clock"),
                               "boost_max_sm_mhz": smi("max_customer_boost_clocks/graphics_clock")}
    g["ecc"].update(mode_current=smi_on("ecc_mode/current_ecc"), mode_pending=smi_on("ecc_mode/pending_ecc"))
    g["mig_mode"] = {"current": smi_on("mig_mode/current_mig"), "pending": smi_on("mig_mode/pending_mig")}
    na = {"nvml_error": "Not Supported"}  # nvidia-smi prints N/A for both on this H200
    g["pending_modes"] = {"gpu_operation_mode": {"current": na, "pending": na},
                          "dram_encryption": {"current": na, "pending": na}}
    return g


def failures(findings) -> list[str]:
    return [f.failure for f in findings if f.failure]


# ---------------------------------------------------------------------------------------------------------
# healthy capture


@pytest.mark.parametrize("i", [0, 1])
def test_healthy_capture_has_no_drift(i):
    g = healthy(i)
    assert g["power_limit_w"] == g["power_limits"]["default_w"] == 700.0
    assert failures(drift.pending_modes(g, H200)) == []
    assert failures(drift.power_limit(g, H200)) == []
    assert failures(drift.clocks(g, H200)) == []
    # the compute capture's reasons during bf16 (0x4, SW power cap) carry no applications-clocks bit
    assert drift.clock_setting_event(4, g, 1470) == (None, None)


def test_capture_without_the_new_fields_is_recorded_not_failed():
    """The replayed capture predates power_limits / app clocks / pending_modes: recorded, never a pass by
    arithmetic on a missing value, and never an exception."""
    g = INV_DOC["gpus"][0]
    for fs in (drift.pending_modes(g, H200), drift.power_limit(g, H200), drift.clocks(g, H200)):
        assert failures(fs) == []
        assert any("not in the probe document" in str((f.extra or {}).get("note")) for f in fs)


# ---------------------------------------------------------------------------------------------------------
# each drift: input -> message


def test_power_limit_lowered_to_500_w():
    g = healthy(1)
    g["power_limit_w"] = 500.0  # nvidia-smi -pl 500: enforced and requested both read 500
    g["power_limits"]["requested_w"] = 500.0
    assert failures(drift.power_limit(g, H200)) == ["power limit 500 W enforced, below 700 W (NVML default limit)"]


def test_power_limit_lowered_by_another_limiter_names_the_requested_one():
    g = healthy(0)
    g["power_limit_w"] = 550.0  # enforced below what was requested (e.g. an out-of-band limit)
    assert failures(drift.power_limit(g, H200)) == [
        "power limit 550 W enforced, below 700 W (NVML default limit; requested 700 W)"]


def test_inventory_expectation_wins_over_the_default():
    g = healthy(0)
    g["power_limit_w"] = g["power_limits"]["requested_w"] = 600.0
    assert failures(drift.power_limit(g, H200, inventory_w=600)) == []  # a site cap asked for: not drift
    g["power_limit_w"] = g["power_limits"]["requested_w"] = 500.0
    assert failures(drift.power_limit(g, H200, inventory_w=600)) == [
        "power limit 500 W enforced, below 600 W (the inventory's gpu_power_limit_w; NVML default 700 W)"]


def test_unreadable_default_limit_is_recorded_or_fails_when_required():
    g = healthy(0)
    g["power_limits"]["default_w"] = {"nvml_error": "Not Supported"}
    assert failures(drift.power_limit(g, H200)) == []
    strict = copy.deepcopy(H200)
    strict.expect["required_nvml"] = [*strict.expect["required_nvml"], "power_limits"]
    assert failures(drift.power_limit(g, strict)) == [
        "power_limit_w unreadable (NVML: Not Supported); the SKU file requires power_limits"]


def test_ecc_pending_off():
    g = healthy(1)
    g["ecc"]["mode_pending"] = False  # nvidia-smi -e 0, not yet reset
    assert failures(drift.pending_modes(g, H200)) == ["ECC mode changes at the next reset: enabled -> disabled"]


def test_mig_pending_on():
    g = healthy(0)
    g["mig_mode"]["pending"] = True  # nvidia-smi -mig 1, not yet reset
    assert failures(drift.pending_modes(g, H200)) == ["MIG mode changes at the next reset: disabled -> enabled"]


def test_other_pending_mode():
    g = healthy(0)
    g["pending_modes"]["gpu_operation_mode"] = {"current": 0, "pending": 1}
    assert failures(drift.pending_modes(g, H200)) == [
        "GPU operation mode changes at the next reset: ALL_ON -> COMPUTE"]


def test_application_clocks_lowered():
    g = healthy(1)
    g["application_clocks"]["app_sm_mhz"] = 1500  # nvidia-smi -ac 3201,1500
    assert failures(drift.clocks(g, H200)) == [
        "application SM clock 1500 MHz, below the default 1980 MHz (nvidia-smi -rac resets it)"]
    g["application_clocks"]["app_mem_mhz"] = 1593
    assert len(failures(drift.clocks(g, H200))) == 2


def test_applications_clocks_setting_during_compute():
    """A clock lock (nvidia-smi -lgc 1500) leaves the application clocks at their default; under load the
    applications-clocks-setting reason shows it. H200: default application clock = max SM clock = 1980 MHz."""
    g = healthy(1)
    failure, note = drift.clock_setting_event(0x4 | 0x2, g, 1500)
    assert note is None
    assert failure.startswith("applications clocks setting held the clocks (SM clock 1500 MHz; application clocks "
                              "1980/3201 MHz (SM/memory), default 1980/3201 MHz, max SM 1980 MHz)")


def test_applications_clocks_setting_by_design_is_a_note():
    """A board whose default application clock is below its boost maximum reports the bit at default settings."""
    g = healthy(0)
    g["application_clocks"].update(app_sm_mhz=1312, app_default_sm_mhz=1312)
    g["clocks"]["sm_max_mhz"] = 1530
    failure, note = drift.clock_setting_event(0x2, g, 1312)
    assert failure is None and "at the SKU's default application clocks" in note
    g["application_clocks"]["app_sm_mhz"] = 1100
    assert drift.clock_setting_event(0x2, g, 1100)[0] is not None


def test_power_limit_during_compute():
    g = healthy(0)
    assert failures(drift.power_limit(g, H200, enforced=500.0, during=" during bf16 matmul")) == [
        "power limit 500 W enforced during bf16 matmul, below 700 W (NVML default limit; requested 700 W)"]


# ---------------------------------------------------------------------------------------------------------
# the probe reads the new fields through pynvml's real signatures (the fake mirrors the nvidia-smi -q values)


def test_gpu_inventory_reads_power_clocks_and_pending_modes(monkeypatch):
    import pynvml as real_nvml
    from probe_helpers import H200X2, NV18, FakeNvml, load_probe
    inv = load_probe("gpu_inventory")

    class H200Drift(FakeNvml):
        def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
            return int(smi("gpu_power_readings/default_power_limit") * 1000)
        def nvmlDeviceGetPowerManagementLimit(self, h): return 500000  # nvidia-smi -pl 500
        def nvmlDeviceGetPowerManagementLimitConstraints(self, h): return [200000, 700000]
        def nvmlDeviceGetGpuOperationMode(self, h): raise self.err(real_nvml.NVML_ERROR_NOT_SUPPORTED)
        def nvmlDeviceGetDramEncryptionMode(self, h): raise self.err(real_nvml.NVML_ERROR_NOT_SUPPORTED)

        def nvmlDeviceGetClock(self, h, kind, clock_id):
            sm = kind == real_nvml.NVML_CLOCK_SM
            return {real_nvml.NVML_CLOCK_ID_APP_CLOCK_TARGET: 1500 if sm else 3201,
                    real_nvml.NVML_CLOCK_ID_APP_CLOCK_DEFAULT: 1980 if sm else 3201,
                    real_nvml.NVML_CLOCK_ID_CUSTOMER_BOOST_MAX: 1980}[clock_id]

    monkeypatch.setitem(sys.modules, "pynvml", H200Drift(H200X2, nvlink=NV18).module())
    g = inv.main({})["gpus"][0]
    assert g["power_limits"] == {"default_w": 700.0, "requested_w": 500.0, "min_w": 200.0, "max_w": 700.0}
    assert g["application_clocks"] == {"app_sm_mhz": 1500, "app_mem_mhz": 3201, "app_default_sm_mhz": 1980,
                                       "app_default_mem_mhz": 3201, "boost_max_sm_mhz": 1980}
    assert g["pending_modes"]["gpu_operation_mode"] == {"current": {"nvml_error": "Not Supported"},
                                                        "pending": {"nvml_error": "Not Supported"}}
    assert failures(drift.clocks(g, H200)) == [
        "application SM clock 1500 MHz, below the default 1980 MHz (nvidia-smi -rac resets it)"]


# ---------------------------------------------------------------------------------------------------------
# attribution by PCI bus id whatever the CUDA device order


def test_figures_are_attributed_by_bus_id_not_torch_index():
    item = types.SimpleNamespace(user_properties=[], originalname="test_x")
    v = Recorder(item, "h200-a", "compute", {g["index"]: g for g in INV_DOC["gpus"]})
    # CUDA_DEVICE_ORDER/CUDA_VISIBLE_DEVICES put bus 07.0 (NVML GPU 1) at torch index 0
    v.record("bf16_tflops", 540.0, "TFLOP/s", gpu={"index": 0, "pci_bus_id": "00000000:00:07.0"},
             limit=H200.checks["bf16_tflops"])
    rec = item.user_properties[0][1]
    assert (rec["gpu"], rec["pci_bus_id"], rec["serial"]) == (1, "00000000:00:07.0", "1650000000002")
    assert v.failures == ["h200-a GPU 1 (00000000:00:07.0, serial 1650000000002): "
                          "bf16_tflops 540 TFLOP/s < min 600 TFLOP/s [limit: h200-sxm-141gb.yaml checks.bf16_tflops]"]
    assert drift.bus_key("0000:00:07.0") == drift.bus_key("00000000:00:07.0") == "00000000:00:07.0"


def test_compute_suite_names_the_right_gpu_when_torch_order_differs(tmp_path):
    """A matmul document as the probe writes it with the torch order reversed (torch 0 = bus 07.0): the
    slow GPU is still GPU 1 of NVML, bus 07.0, serial ...002."""
    def reverse(doc):
        doc["gpus"].reverse()
        for torch_index, g in enumerate(doc["gpus"]):
            g["index"] = torch_index
        doc["gpus"][0]["dtypes"]["bf16"]["tflops"] = 540.0  # bus 07.0
    inv = replay_project(tmp_path, alter(tmp_path, "matmul_tflops", reverse))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "tensor_tflops")
    assert res.returncode == 1
    msg = outcomes(rep)["test_tensor_tflops"]["text"]
    assert "h200-a GPU 1 (00000000:00:07.0, serial 1650000000002): bf16_tflops 540 TFLOP/s < min 600" in msg
    assert "GPU 0" not in msg


# ---------------------------------------------------------------------------------------------------------
# the suites on replayed captures


def _with_drift(tmp_path: Path) -> Path:
    def lower(doc):
        for i, g in enumerate(doc["gpus"]):
            g.update({k: v for k, v in healthy(i).items()
                      if k in ("power_limits", "pending_modes", "application_clocks")})
        doc["gpus"][1]["power_limit_w"] = 500.0  # nvidia-smi -i 1 -pl 500
        doc["gpus"][1]["power_limits"]["requested_w"] = 500.0
        doc["gpus"][1]["mig_mode"]["pending"] = True  # nvidia-smi -i 1 -mig 1
    captures = alter(tmp_path, "gpu_inventory", lower)
    for f in captures.glob("matmul_tflops-*.json"):  # clocks locked on GPU 1: the reason shows under load
        saved = json.loads(f.read_text())
        saved["doc"]["gpus"][1]["dtypes"]["bf16"]["clocks_event_reasons"] = 0x6
        f.write_text(json.dumps(saved))
    return captures


def test_drift_suites_on_replayed_captures(tmp_path):
    inv = replay_project(tmp_path, _with_drift(tmp_path))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k",
                     "pending_modes or power_limit or application_clocks or tensor_tflops")
    assert res.returncode == 1, res.stdout[-3000:]
    got = outcomes(rep)
    gpu1 = "h200-a GPU 1 (00000000:00:07.0, serial 1650000000002): "
    assert got["test_power_limit"]["text"].strip() == \
        gpu1 + "power limit 500 W enforced, below 700 W (NVML default limit)"
    assert got["test_pending_modes"]["text"].strip() == gpu1 + "MIG mode changes at the next reset: disabled -> enabled"
    assert got["test_application_clocks"]["outcome"] == "passed"
    msg = got["test_tensor_tflops"]["text"]
    assert gpu1 + "applications clocks setting held the clocks (SM clock 1485 MHz" in msg
    assert gpu1 + "power limit 500 W enforced, below 700 W (NVML default limit)" in msg  # old probe: NVML's reading
    assert "GPU 0" not in msg


def test_bad_power_limit_var_stops_the_run(tmp_path):
    inv = replay_project(tmp_path, DATA, extra_vars="gpu_power_limit_w=lots")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "rep"), "-k", "power_limit")
    out = res.stdout + res.stderr
    assert res.returncode == 4 and "Traceback" not in out
    assert "inventory.ini:1: host h200-a var gpu_power_limit_w: expected a positive number of watts, got str 'lots'" \
        in out


# ---------------------------------------------------------------------------------------------------------
# NCCL environment: the real probe on fixture files


def run_nccl_env(tmp_path: Path, files: dict[str, str], env: dict | None = None, shell: bool = False,
                 args: dict | None = None) -> dict:
    """Write ``files`` (relative path -> text) under tmp_path and run the probe as the runner does."""
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    a = {"etc_nccl_conf": str(tmp_path / "etc/nccl.conf"), "home": str(home),
         "profile_files": [str(tmp_path / "etc/profile.d/nccl.sh"), str(home / ".bashrc")],
         "login_shell": shutil.which("bash") if shell else False, **(args or {})}
    e = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), **(env or {})}
    p = subprocess.run([sys.executable, str(PROBES / "nccl_env.py"), json.dumps(a)], capture_output=True,
                       text=True, env=e, timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_nccl_conf_p2p_disable_fails_naming_the_file(tmp_path):
    doc = run_nccl_env(tmp_path, {"etc/nccl.conf": "# site defaults\nNCCL_DEBUG=WARN\nNCCL_P2P_DISABLE=1\n"})
    assert doc["effective"]["NCCL_P2P_DISABLE"] == {"value": "1", "source": "/etc/nccl.conf",
                                                    "path": str(tmp_path / "etc/nccl.conf"), "line": 3}
    assert failures(drift.nccl_env(doc, {})) == [
        f"NCCL_P2P_DISABLE=1 from /etc/nccl.conf {tmp_path}/etc/nccl.conf:3 (disables the peer-to-peer "
        f"(NVLink/PCIe) transport); the inventory does not ask for it (nccl_env)"]
    # asked for by the inventory: recorded, not failed
    assert failures(drift.nccl_env(doc, {"NCCL_P2P_DISABLE": "1"})) == []


def test_environment_wins_over_the_files_as_in_nccl(tmp_path):
    doc = run_nccl_env(tmp_path, {"etc/nccl.conf": "NCCL_ALGO=Tree\n", "home/.nccl.conf": "NCCL_ALGO=Ring\n"},
                       env={"NCCL_ALGO": "NVLS"})
    assert doc["effective"]["NCCL_ALGO"]["value"] == "NVLS"
    assert [(f["source"], f["value"]) for f in doc["found"] if f["name"] == "NCCL_ALGO"] == [
        ("environment", "NVLS"), ("~/.nccl.conf", "Ring"), ("/etc/nccl.conf", "Tree")]
    (msg,) = failures(drift.nccl_env(doc, {}))
    assert msg.startswith("NCCL_ALGO=NVLS from environment (forces the collective algorithms)")


def test_nccl_conf_file_replaces_the_home_file(tmp_path):
    doc = run_nccl_env(tmp_path, {"alt.conf": "NCCL_PROTO=Simple\n", "home/.nccl.conf": "NCCL_SHM_DISABLE=1\n"},
                       env={"NCCL_CONF_FILE": str(tmp_path / "alt.conf")})
    assert doc["effective"]["NCCL_PROTO"]["source"] == "NCCL_CONF_FILE"
    assert "NCCL_SHM_DISABLE" not in doc["effective"]


def test_profile_and_login_shell_settings(tmp_path):
    doc = run_nccl_env(tmp_path, {"etc/profile.d/nccl.sh": "# tuning left behind\nexport NCCL_IB_DISABLE=1\n",
                                  "home/.bash_profile": "echo hello from the profile\nexport NCCL_NET_GDR_LEVEL=0\n"},
                       shell=True)
    by = {(f["name"], f["source"]) for f in doc["found"]}
    assert ("NCCL_IB_DISABLE", "profile file") in by and ("NCCL_NET_GDR_LEVEL", "login shell") in by
    msgs = failures(drift.nccl_env(doc, {}))
    assert any(m.startswith(f"NCCL_IB_DISABLE=1 set in profile file {tmp_path}/etc/profile.d/nccl.sh:2") for m in msgs)
    assert any(m.startswith("NCCL_NET_GDR_LEVEL=0 set in login shell") for m in msgs), msgs


def test_harmless_values_and_system_settings_are_recorded(tmp_path):
    doc = run_nccl_env(tmp_path, {"etc/nccl.conf": "NCCL_NET_GDR_LEVEL=PHB\nNCCL_SOCKET_IFNAME==eth0\n"})
    fs = drift.nccl_env(doc, {})
    assert failures(fs) == []
    assert {f.check for f in fs} >= {"nccl_env NCCL_NET_GDR_LEVEL", "nccl_env NCCL_SOCKET_IFNAME"}


def test_unreadable_source_is_reported(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads a mode-000 file; the unreadable case needs an unprivileged user")
    (tmp_path / "etc").mkdir()
    conf = tmp_path / "etc/nccl.conf"
    conf.write_text("NCCL_P2P_DISABLE=1\n")
    conf.chmod(0)
    doc = run_nccl_env(tmp_path, {})
    assert doc["errors"] == [{"path": str(conf), "error": "Permission denied"}]


def test_nccl_env_suite_on_a_replayed_document(tmp_path):
    doc = run_nccl_env(tmp_path / "node", {"etc/nccl.conf": "NCCL_P2P_DISABLE=1\n"})
    captures = alter(tmp_path, "nccl_env", lambda d: d.update(doc))
    inv = replay_project(tmp_path, captures)
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "nccl_environment")
    assert res.returncode == 1, res.stdout[-3000:]
    assert (rep / "junit-nccl.xml").exists()
    assert "h200-a: NCCL_P2P_DISABLE=1 from /etc/nccl.conf" in outcomes(rep)["test_nccl_environment"]["text"]
    inv.write_text(inv.read_text().strip() + " nccl_env='{\"NCCL_P2P_DISABLE\": \"1\"}'\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "rep2"), "-k", "nccl_environment")
    assert res.returncode == 0, res.stdout[-3000:]


def test_p2p_pairs_are_named_by_nvml_index(tmp_path):
    """The p2p_bandwidth probe's pairs carry torch indices; with the torch order reversed (torch 0 = bus 07.0) a
    slow copy from bus 07.0 to bus 06.0 is named GPU 1 -> GPU 0, as NVML numbers them."""
    def reverse(doc):
        doc["gpus"][0]["pci_bus_id"], doc["gpus"][1]["pci_bus_id"] = "00000000:00:07.0", "00000000:00:06.0"
        next(p for p in doc["pairs"] if p["a"] == 0 and p["b"] == 1)["unidir_gbps"] = 120.0  # bus 07.0 -> 06.0
    inv = replay_project(tmp_path, alter(tmp_path, "p2p_bandwidth", reverse))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "p2p_bandwidth")
    assert res.returncode == 1
    assert "p2p_unidir_bw_gbps 120 GB/s < min 340 GB/s (GPU 1 (00000000:00:07.0) -> GPU 0 (00000000:00:06.0))" in \
        outcomes(rep)["test_p2p_bandwidth"]["text"]  # NVML's index, with the bus id it names
    # measured once, not confirmed: never a drain (the worst-pair summary used to add one of its own)
    doc = json.loads((rep / "results.json").read_text())
    acts = {f["action"]["action"] for t in doc["tests"] for f in t.get("failures") or [] if f.get("action")}
    assert acts and "drain-rma" not in acts and not (rep / "hosts-drain-rma.txt").exists(), acts


def test_nccl_conf_is_parsed_as_nccl_parses_it():
    """NCCL's setEnvFile: '#' only at the start of a line, name up to the first '=', value kept as written."""
    from probe_helpers import load_probe
    env = load_probe("nccl_env")
    assert env.parse_nccl_conf("# c\nNCCL_A=1\nNCCL_B==eth0\nNCCL_C=x # y\nnoequals\n") == [
        (2, "NCCL_A", "1"), (3, "NCCL_B", "=eth0"), (4, "NCCL_C", "x # y")]
    assert env.parse_profile('export NCCL_ALGO="Ring" # left from a test\nNCCL_X=1\n#export NCCL_Y=2\n'
                             'setenv NCCL_PROTO Simple\n') == [(1, "NCCL_ALGO", "Ring"), (2, "NCCL_X", "1"),
                                                               (4, "NCCL_PROTO", "Simple")]


def test_gpu_inventory_falls_back_to_the_deprecated_clock_calls(monkeypatch):
    """A driver without nvmlDeviceGetClock: the per-purpose calls (deprecated in NVML 13) answer instead."""
    import pynvml as real_nvml
    from probe_helpers import H200X2, FakeNvml, load_probe
    inv = load_probe("gpu_inventory")

    class OldDriver(FakeNvml):
        def nvmlDeviceGetClock(self, h, kind, clock_id): raise self.err(real_nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        def nvmlDeviceGetApplicationsClock(self, h, kind): return 1980 if kind == real_nvml.NVML_CLOCK_SM else 3201
        def nvmlDeviceGetDefaultApplicationsClock(self, h, kind):
            return 1980 if kind == real_nvml.NVML_CLOCK_SM else 3201

    monkeypatch.setitem(sys.modules, "pynvml", OldDriver(H200X2[:1]).module())
    c = inv.main({})["gpus"][0]["application_clocks"]
    assert (c["app_sm_mhz"], c["app_mem_mhz"], c["app_default_sm_mhz"], c["app_default_mem_mhz"]) == \
        (1980, 3201, 1980, 3201)
    assert c["boost_max_sm_mhz"] == {"nvml_error": "Function Not Found"}


def test_real_h200_node_environment_is_judged_against_the_inventory():
    """The nccl_env probe as it read the device machine (2xH200, 2026-11-30): NCCL_NVLS_ENABLE=0 is set in its
    environment (the machine keeps NVLink multicast off). Without nccl_env asking for it, that is drift; with
    the inventory asking for it, the node passes."""
    doc = json.loads((Path(__file__).parent / "data" / "h200x2-nccl_env.json").read_text())
    fails = [f.failure for f in drift.nccl_env(doc, {}) if f.failure]
    assert any(m.startswith("NCCL_NVLS_ENABLE=0 from environment") for m in fails), fails
    assert [f.failure for f in drift.nccl_env(doc, {"NCCL_NVLS_ENABLE": "0"}) if f.failure] == []


def test_real_h200_power_clocks_and_pending_modes_pass():
    """gpu_inventory as it read the device machine (2xH200, 2026-11-30): power limit 700 W = NVML default,
    application clocks 1980/3201 MHz = defaults, ECC and MIG with no pending change."""
    from gpuaccept.judging.readings import typed
    from gpuaccept.config.thresholds import load_sku_file
    doc = typed(json.loads((Path(__file__).parent / "data" / "h200x2-gpu_inventory-20261130.json").read_text()))
    sku = load_sku_file(str(Path(__file__).parents[1] / "thresholds" / "h200-sxm-141gb.yaml"))
    for g in doc["gpus"]:
        found = drift.pending_modes(g, sku) + drift.power_limit(g, sku) + drift.clocks(g, sku)
        assert [f.failure for f in found if f.failure] == [], g["index"]
        assert any(f.value == 700.0 for f in found)
