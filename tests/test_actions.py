"""From verdict to action (gpuaccept/judging/actions.py, gpuaccept/data/actions.yaml), judged apart from measuring:
the table covers every shipped test and every bucket of NVIDIA's catalogue; Xids from the fixture kernel log take
their bucket; row remapping takes NVIDIA's guidance on the real 2xH200 capture altered the way a sick GPU reads;
a fix-config names the setting and the command; the host's action is the strongest, and a slow figure measured
with a setting off is not a hardware verdict. Then the reports: summary.md, hosts-<action>.txt, JUnit,
results.json and Prometheus of a hand-made run."""
from __future__ import annotations

import ast
import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path

from gpuaccept.config.thresholds import load_sku_file
from gpuaccept.judging import actions, drift, health
from gpuaccept.judging import xid as xidmod
from gpuaccept.reporting.junit import junit_xml_text
from gpuaccept.reporting.records import CaseRecord
from gpuaccept.reporting.reporter import Reporter
from gpuaccept.reporting.summary import summary_markdown
from gpuaccept.reporting.verdicts import host_verdicts
from probe_helpers import DATA, load_probe

REPO = Path(__file__).resolve().parent.parent
SKU = load_sku_file(str(REPO / "thresholds" / "h200-sxm-141gb.yaml"))
CAPTURE = json.loads(next((DATA / "replay-h200x2").glob("gpu_inventory-*.json")).read_text())["doc"]


def _gpu(change=None) -> dict:
    g = copy.deepcopy(CAPTURE["gpus"][1])
    if change:
        change(g)
    return g


def _suite_tests() -> set[str]:
    out = set()
    for path in (REPO / "gpuaccept" / "suites").glob("test_*.py"):  # the suites ship in the package
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                out.add(node.name)
    return out


def test_every_shipped_test_has_a_row_and_every_row_a_reason_and_source():
    table = actions.load_table()
    tests = _suite_tests()
    assert len(tests) >= 30
    assert sorted(tests - set(table["tests"]["rows"])) == []
    assert sorted(set(table["tests"]["rows"]) - tests) == []  # no row for a test that is gone
    for section in ("xid_buckets", "xid154_recovery", "memory", "checks", "tests", "errors"):
        assert "2026" in table[section]["source"] or "NVIDIA" in table[section]["source"], section
    assert actions.strength() == ("rerun", "free-space", "fix-config", "check-network", "reset-gpu", "reboot",
                                  "drain-rma")
    assert actions.drain_actions() == {"drain-rma", "reboot", "reset-gpu"}


def test_every_immediate_bucket_of_nvidias_catalogue_maps_to_an_action():
    buckets = {e.immediate for e in xidmod.load_catalog().values() if e.immediate}
    assert len(buckets) >= 14
    rows = actions.load_table()["xid_buckets"]["rows"]
    assert sorted(buckets - set(rows)) == []


def test_xids_of_the_fixture_log_take_nvidias_buckets():
    xev = load_probe("xid_events")
    events, _ = xev.parse_kernel_log((DATA / "kern-xid.log").read_text().splitlines())
    got = {}
    for ev in xidmod.classify(events):
        if ev["fails"]:
            got.setdefault(ev["xid"], actions.for_xid(ev))
    assert got[79].action == "reboot" and "RESTART_BM" in got[79].reason  # fallen off the bus
    assert got[48].action == "reset-gpu" and "Xid 48" in got[48].reason  # DBE: WORKFLOW_XID_48
    # Xid 154 by the recovery action it announces: "Node Reboot Required"
    assert got[154].action == "reboot" and "Reboot" in got[154].reason
    assert "Error Recovery and Response Flags" in got[154].source
    assert 31 not in got and 13 not in got  # RESTART_APP: recorded, no action
    # the rules of xid.py that name no bucket
    assert actions.for_xid({"xid": 999, "rule": "unknown"}).action == "drain-rma"
    assert actions.for_xid({"xid": 170, "rule": "no bucket", "bucket": ""}).action == "drain-rma"
    assert actions.for_xid({"rule": "driver", "fault": "init_failed"}).action == "drain-rma"
    named = actions.for_xid({"xid": 45, "rule": "named cause", "msg": "Ch 00000001 caused by previous Xid 79"})
    assert named.action == "reboot" and "caused by Xid 79" in named.reason
    reset = {"xid": 154, "rule": "policy", "msg": "GPU recovery action changed from 0x0 (None) to 0x1 "
                                                  "(GPU Reset Required)"}
    assert actions.for_xid(reset).action == "reset-gpu"


def test_row_remapping_takes_nvidias_guidance_on_the_real_capture():
    def act(change):
        fs = [f for f in health.row_remapping(_gpu(change), SKU) if f.failure or (
            f.limit and f.value is not None and f.value > f.limit.bound)]
        return {f.check: actions.for_finding("test_row_remapping", f.check, f.value, f.extra,
                                             "00000000:00:07.0").action for f in fs}
    assert act(None) == {}  # the healthy capture: nothing fails
    assert act(lambda g: g["remapped_rows"].update(pending=True)) == {"remap_pending": "reset-gpu"}
    assert act(lambda g: g["remapped_rows"].update(failure=True)) == {"remap_failure": "drain-rma"}
    over = act(lambda g: g["remapped_rows"].update(uncorrectable=10_000))
    assert over == {"remapped_rows_uncorrectable": "drain-rma"}
    assert "GPU Memory Error Management" in actions.for_finding("test_row_remapping", "remap_failure").source
    assert actions.for_finding("test_ecc", "ecc_uncorrected_volatile", direction="max").action == "reset-gpu"


def test_fix_config_names_the_setting_and_the_command_that_restores_it():
    g = _gpu(lambda g: g.update(power_limit_w=500.0, power_limits={"default_w": 700.0, "min_w": 200.0,
                                                                   "max_w": 700.0, "requested_w": 500.0}))
    (f,) = drift.power_limit(g, SKU)
    assert f.failure and "below 700 W" in f.failure
    a = actions.for_finding("test_power_limit", f.check, f.value, f.extra, g["pci_bus_id"])
    assert (a.action, a.setting, a.command) == ("fix-config", "enforced power limit",
                                                "nvidia-smi -i 00000000:00:07.0 -pl 700")
    mig = actions.for_finding("test_preflight", "mig_mode", True, None, "0000:19:00.0")
    assert mig.command == "nvidia-smi -i 0000:19:00.0 -mig 0 && nvidia-smi -i 0000:19:00.0 -r"
    nccl = actions.for_finding("test_nccl_environment", "nccl_env NCCL_P2P_DISABLE", "1", {"from": "/etc/nccl.conf"})
    assert nccl.setting == "NCCL_P2P_DISABLE=1 (/etc/nccl.conf)" and "/etc/nccl.conf" in nccl.command
    # a field the finding lacks is said as such, never a crash
    assert actions.for_finding("test_power_limit", "power_limit_w", 500.0).command == "nvidia-smi -i <gpu> -pl <expected_w>"


CLEAN = {"confirmed": True, "gpu_conditions": "clean", "host_conditions": "n/a"}


def test_a_slow_figure_is_hardware_only_when_confirmed_under_clean_conditions():
    slow = actions.for_finding("test_tensor_tflops", "bf16_tflops", 300.0, None, 0, "min", evidence=CLEAN)
    assert (slow.action, slow.cause) == ("drain-rma", "hardware") and slow.slow
    for ev in (None, {**CLEAN, "confirmed": False}, {**CLEAN, "gpu_conditions": "unchecked"},
               {**CLEAN, "host_conditions": "unchecked"}, {**CLEAN, "host_conditions": "busy"}):
        got = actions.for_finding("test_tensor_tflops", "bf16_tflops", 300.0, None, 0, "min", evidence=ev)
        assert (got.action, got.cause) == ("rerun", "unverified") and "no hardware evidence" in got.reason, ev
    # a host-side figure (a host-to-device copy) also needs the host watched and quiet
    assert actions.host_side("test_pcie_bandwidth[gpu-01]") and not actions.host_side("test_hbm_bandwidth")


def test_every_row_with_a_hardware_action_has_a_hardware_cause():
    table = actions.load_table()
    for section in ("xid_buckets", "xid154_recovery", "memory", "checks", "tests", "causes", "failures", "errors"):
        for key, row in table[section]["rows"].items():
            cls = row.get("class") or row.get("cause")
            assert cls in actions.CLASSES, (section, key)
            assert row["action"] not in actions.HARDWARE_ACTIONS or cls == "hardware", (section, key)


def test_the_gate_gives_a_non_hardware_cause_its_class_action():
    from gpuaccept.causes import Cause
    for cls, want in (("configuration", "fix-config"), ("contention", "rerun"), ("capacity", "free-space"),
                      ("connectivity", "check-network"), ("tool", "rerun"), ("unverified", "rerun")):
        got = actions.gate(actions.Action("drain-rma", "a reason", "src", cause=cls))
        assert (got.action, got.cause) == (want, cls) and got.reason.startswith("a reason; cause " + cls)
    kept = actions.Action("drain-rma", "remap failure", "src", cause="hardware")
    assert actions.gate(kept) is kept
    # a kind with no row of its own takes its class's action; a hardware kind no row names is held for a person
    assert actions.for_cause(Cause("capacity", "something_new")).action == "free-space"
    assert actions.for_cause(Cause("hardware", "something_new")).action == "drain-rma"


def test_figures_errors_and_the_fallback():
    # a network test's figures are the network's
    assert actions.for_finding("test_allreduce_multinode", "internode_busbw_gbps", 10.0, direction="min").action \
        == "check-network"
    assert actions.for_finding("test_rdma_ports", "ib_rate_gbps mlx5_1/1", 200, direction="min").action == "check-network"
    assert actions.for_error("HostUnreachable", "h: cannot connect").action == "rerun"
    assert actions.for_error("AuthError", "h: authentication failed").action == "fix-config"
    assert actions.for_error(None, "blocked by gpu_inventory: GPU 1: no NVML handle").action == "drain-rma"
    assert actions.for_error(None, "blocked by preflight: GPU 0: foreign processes").action == "rerun"
    assert actions.for_error(None, "blocked by preflight: x\nblocked by driver_versions: y").action == "fix-config"
    assert actions.for_error(None, "h GPU 0 (bus): disturbed: pid 4711 used GPU 0").action == "rerun"
    assert actions.for_error(None, "a gap nobody names").reason == "not measured: rerun"
    # what a rerun cannot mend: the node's Python is elsewhere, the name does not resolve
    wrong_python = actions.for_error("ProbeError", "h: gpu_inventory: python interpreter '/usr/bin/python9' not "
                                                   "found (set ansible_python_interpreter)")
    assert (wrong_python.action, wrong_python.setting) == ("fix-config", "ansible_python_interpreter")
    assert actions.for_error("HostUnreachable", "h: cannot resolve nosuch.invalid: Name or service not "
                                                "known").action == "check-network"
    # declared GPUs missing: for want of a driver the cards are not the suspects; seen missing by NVML, they are
    no_driver = actions.for_case("failed", "test_gpu_inventory", "h1: no NVIDIA GPU found (no NVIDIA driver "
                                 "(libnvidia-ml.so not found)) but the inventory declares gpus_per_node=8")
    assert (no_driver["action"], no_driver["setting"]) == ("fix-config", "NVIDIA driver")
    assert actions.for_case("failed", "test_gpu_inventory", "h1: no NVIDIA GPU found (NVML sees no GPU) but the "
                            "inventory declares gpus_per_node=8")["action"] == "drain-rma"
    site = actions.for_finding("test_my_site_check", None)  # no evidence of its cause: never drained
    assert (site.action, site.cause) == ("rerun", "unverified") and "does not name" in site.reason


def test_the_host_takes_the_strongest_and_a_setting_off_makes_a_slow_figure_no_verdict():
    rerun = actions.for_error("Interrupted").to_dict()
    reset = actions.for_finding("test_row_remapping", "remap_pending").to_dict()
    rma = actions.for_finding("test_row_remapping", "remap_failure").to_dict()
    assert actions.host_action([rerun, reset, rma, None])["action"] == "drain-rma"
    assert actions.host_action([]) is None
    slow = actions.for_finding("test_tensor_tflops", "bf16_tflops", 300.0, direction="min", evidence=CLEAN).to_dict()
    power = actions.for_finding("test_power_limit", "power_limit_w", 500.0, {"expected_w": 700}, "0").to_dict()
    got = actions.host_action([slow, power])
    assert got["action"] == "fix-config" and got["command"] == "nvidia-smi -i 0 -pl 700"
    alone = actions.host_action([slow])
    assert alone["action"] == "drain-rma"
    # a proven fault stays: only slow figures are demoted
    assert actions.host_action([rma, power])["action"] == "drain-rma"


def _entry(gpu: int, check: str, act: dict, host: str = "gpu-01") -> dict:
    return {"host": host, "gpu": gpu, "pci_bus_id": f"0000:{0x19 + gpu:02x}:00.0", "serial": f"165{gpu}",
            "check": check, "line": f"{host} GPU {gpu}: {check}", "action": act}


def test_a_setting_accounts_only_for_the_slow_figures_it_can_lower():
    """A lowered power limit answers for the slow figures of its own GPU; a setting of another GPU, or one that
    lowers no figure (persistence mode), leaves a confirmed slow figure hardware; a node-wide setting answers for
    every GPU's; a figure or setting without a GPU is not told apart."""
    slow = actions.for_finding("test_hbm_bandwidth", "read_gbs", 2100.0, direction="min", evidence=CLEAN).to_dict()
    power = actions.for_finding("test_power_limit", "power_limit_w", 350.0, {"expected_w": 700}, "0").to_dict()
    persist = actions.for_finding("test_persistence", "persistence_mode", 0, gpu="0").to_dict()
    assert power["lowers"] == "gpu" and "lowers" not in persist and "lowers" not in slow
    on = lambda a, g: actions.with_gpu(a, {"gpu": g, "pci_bus_id": f"0000:{0x19 + g:02x}:00.0"})  # noqa: E731
    assert actions.host_action([on(slow, 1), on(persist, 0)])["action"] == "drain-rma"
    assert actions.host_action([on(slow, 1), on(power, 0)])["action"] == "drain-rma"
    got = actions.host_action([on(slow, 1), on(power, 1)])
    assert got["action"] == "fix-config"
    nccl = actions.for_finding("test_nccl_environment", "nccl_env NCCL_P2P_DISABLE", "1").to_dict()
    assert nccl["lowers"] == "node" and actions.host_action([on(slow, 1), nccl])["action"] == "fix-config"
    assert actions.host_action([slow, on(power, 0)])["action"] == "fix-config"  # the figure names no GPU
    # the record of a test that holds both (test_tensor_tflops: the power limit and the slow figure of one GPU)
    tflops = actions.for_finding("test_tensor_tflops", "bf16_tflops", 300.0, direction="min", evidence=CLEAN).to_dict()
    both = actions.for_case("failed", "test_tensor_tflops", failures=[_entry(1, "bf16_tflops", tflops),
                                                                       _entry(1, "power_limit_w", power)])
    assert both["action"] == "fix-config" and "gpu" not in both
    apart = actions.for_case("failed", "test_tensor_tflops", failures=[_entry(1, "bf16_tflops", tflops),
                                                                        _entry(0, "power_limit_w", power)])
    assert (apart["action"], apart["cause"]) == ("drain-rma", "hardware")


def test_the_host_verdict_drains_for_a_gpu_that_another_gpus_setting_cannot_explain():
    slow = actions.for_finding("test_hbm_bandwidth", "read_gbs", 2100.0, direction="min", evidence=CLEAN).to_dict()
    persist = actions.for_finding("test_persistence", "persistence_mode", 0, gpu="0000:19:00.0").to_dict()
    power = actions.for_finding("test_power_limit", "power_limit_w", 350.0, {"expected_w": 700},
                                "0000:1a:00.0").to_dict()

    def rec(test, layer, entries):
        return CaseRecord(f"suites/test_{layer}.py::{test}[gpu-01]", f"{test}[gpu-01]", "gpu-01", layer, "failed",
                          entries[0]["line"], 0.5, [], failures=entries)
    hbm = rec("test_hbm_bandwidth", "memory", [_entry(1, "read_gbs", slow)])
    hv = host_verdicts([rec("test_persistence", "health", [_entry(0, "persistence_mode", persist)]), hbm], ["gpu-01"])
    assert (hv["gpu-01"]["action"]["action"], hv["gpu-01"]["action"]["cause"]) == ("drain-rma", "hardware")
    hv = host_verdicts([rec("test_power_limit", "health", [_entry(1, "power_limit_w", power)]), hbm], ["gpu-01"])
    assert hv["gpu-01"]["action"]["action"] == "fix-config"
    slow_rerun = [a for a in hv["gpu-01"]["findings"] if a.get("slow")]
    assert slow_rerun and actions.host_action(slow_rerun)["action"] == "drain-rma"  # alone it still drains


def _fleet() -> list[CaseRecord]:
    def rec(host, test, layer, outcome, message="", failures=(), figures=()):
        return CaseRecord(f"suites/test_{layer}.py::{test}[{host}]", f"{test}[{host}]", host, layer, outcome, message,
                          0.5, list(figures), failures=list(failures))
    rma = {"host": "gpu-01", "gpu": 1, "pci_bus_id": "0000:19:00.0", "serial": "1650", "check": "remap_failure",
           "line": "gpu-01 GPU 1 (0000:19:00.0): row remap failure: replace the GPU",
           "action": actions.for_finding("test_row_remapping", "remap_failure").to_dict()}
    power = {"host": "gpu-02", "gpu": 0, "pci_bus_id": "0000:03:00.0", "serial": None, "check": "power_limit_w",
             "line": "gpu-02 GPU 0: power limit 500 W enforced, below 700 W",
             "action": actions.for_finding("test_power_limit", "power_limit_w", 500.0, {"expected_w": 700.0},
                                           "0000:03:00.0").to_dict()}
    return [rec("gpu-01", "test_row_remapping", "health", "failed", rma["line"], [rma]),
            rec("gpu-02", "test_power_limit", "health", "failed", power["line"], [power]),
            rec("gpu-03", "test_ecc", "health", "error", "gpu-03: cannot connect to 10.0.0.3:22: refused"),
            rec("gpu-04", "test_ecc", "health", "passed")]


def test_the_reports_carry_the_action(tmp_path):
    recs = _fleet()
    hosts = ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    hv = host_verdicts(recs, hosts)
    assert {h: (v["action"] or {}).get("action") for h, v in hv.items()} == {
        "gpu-01": "drain-rma", "gpu-02": "fix-config", "gpu-03": "rerun", "gpu-04": None}
    md = summary_markdown("night1", {"inventory": "prod.ini", "hosts": hosts}, recs, hv=hv)
    line = next(ln for ln in md.splitlines() if ln.startswith("- **FAIL** `gpu-02`"))
    assert line.endswith("→ **fix-config** [configuration] (power limit below its expectation; enforced power limit; "
                         "`nvidia-smi -i 0000:03:00.0 -pl 700`)"), line
    assert "| drain-rma | 1: gpu-01 | `hosts-drain-rma.txt` |" in md
    rep = Reporter(str(tmp_path / "run"), "night1", {"inventory": "prod.ini", "hosts": hosts})
    for r in recs:
        rep.add(r)
    rep.flush(final=True)
    lists = {p.name: p.read_text() for p in (tmp_path / "run").glob("hosts-*.txt")}
    # a list only for an action some host has (a passing run once held seven empty ones)
    assert lists == {"hosts-rerun.txt": "gpu-03\n", "hosts-fix-config.txt": "gpu-02\n", "hosts-drain-rma.txt": "gpu-01\n"}
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    by = {t["host"]: t for t in res["tests"]}
    assert by["gpu-01"]["action"]["action"] == "drain-rma"
    assert by["gpu-01"]["failures"][0]["action"]["source"].startswith("NVIDIA GPU Memory Error Management")
    assert by["gpu-03"]["action"]["action"] == "rerun" and "action" not in by["gpu-04"]
    suite = ET.fromstring(junit_xml_text("health", recs).split("\n", 1)[1]).find("testsuite")
    props = {c.get("classname"): {p.get("name"): p.get("value") for p in c.iter("property")}
             for c in suite.findall("testcase")}
    assert props["health.gpu-02"]["gpuaccept.action"] == "fix-config"
    assert props["health.gpu-02"]["gpuaccept.action.command"] == "nvidia-smi -i 0000:03:00.0 -pl 700"
    assert "gpuaccept.action" not in props["health.gpu-04"]


def test_prometheus_has_the_action_as_a_label_of_the_host_verdict(tmp_path):
    from gpuaccept.reporting import prometheus
    hv = host_verdicts(_fleet(), ["gpu-01", "gpu-02", "gpu-03", "gpu-04"])
    path = tmp_path / "gpuaccept.prom"
    prometheus.write_textfile(str(path), "night1", 0.0, 1.0, [], {h: v["verdict"] for h, v in hv.items()},
                              host_actions={h: v["action"] for h, v in hv.items()})
    text = path.read_text()
    # the one verdict order: 3 FAIL, 2 ERROR, 1 PASS, 0 SKIP
    assert 'gpuaccept_host_verdict{action="drain-rma",cause="hardware",host="gpu-01",verdict="FAIL"} 3.0' in text
    assert 'gpuaccept_host_verdict{action="none",cause="none",host="gpu-04",verdict="PASS"} 1.0' in text


def test_reads_evidence_only_where_no_row_decides():
    # a slow figure no row names is decided by its confirmation and conditions; a reading with its own row is not
    assert actions.reads_evidence("test_matmul_tflops[h1]", "bf16_tflops")
    assert actions.reads_evidence("test_hbm_bandwidth", "hbm_read_bw_gbps")
    for reading in ("pcie_width", "pcie_gen", "nvlink_active_links", "temp_c", "remapped_rows_uncorrectable",
                    "nccl_env NCCL_P2P_DISABLE", "matmul_power_limit_w"):
        assert not actions.reads_evidence("test_gpu_health[h1]", reading), reading
