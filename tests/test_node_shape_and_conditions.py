"""Verdicts that know the node's shape and the conditions of each measurement.

Real captures: tests/data/replay-h200x1 (a healthy one-GPU H200 SXM VM, 2026-12-01: fabric NOT_SUPPORTED, every
NVLink "Not Supported", conditions sampled), tests/data/h200x1-foreign (the same machine with a foreign bf16
matmul loop started 20 s into the run, a foreign HBM-copy loop started with the compute test, an idle foreign
process holding a context, CUDA_VISIBLE_DEVICES=''), tests/data/replay-h200x2 (2xH200, fabric COMPLETED).
Altered the way such nodes read where no capture of that state exists (marked ALTERED).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from gpuaccept.config.limitfile import fleet_tests
from gpuaccept.config.thresholds import load_sku_file
from gpuaccept.judging import conditions, health, shape, verdict_order
from gpuaccept.judging.blockers import blockers
from gpuaccept.judging.confirm import confirm_held
from gpuaccept.judging.readings import typed
from gpuaccept.judging.recorder import UNSTABLE_KEY, Recorder
from gpuaccept.reporting.records import CaseRecord
from gpuaccept.reporting.summary import summary_markdown
from gpuaccept.reporting.verdicts import failed_hosts, failed_hosts_text, host_verdicts
from gpuaccept.runner.host import save_probe
from gpuaccept.reporting.folder import run_figures
from project_helpers import DATA, REPO, alter, junit, make_project, replay_folder, run_pytest

ONE = DATA.parent / "replay-h200x1"
FOREIGN = DATA.parent / "h200x1-foreign"
H200 = load_sku_file(str(REPO / "thresholds" / "h200-sxm-141gb.yaml"))


def saved(folder: Path, probe: str) -> dict:
    """The saved document ``folder/<probe>.json``, else the one saved ``probe`` in ``folder``."""
    exact = folder / f"{probe}.json"
    return json.loads((exact if exact.exists() else next(folder.glob(f"{probe}-*.json"))).read_text())


def inventory_doc(folder: Path = ONE) -> dict:
    return saved(folder, "gpu_inventory")["doc"]


def project(tmp_path: Path, captures: Path, host_vars: str = "", name: str = "h200-1") -> Path:
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"{name} ansible_connection=local gpuaccept_replay={captures} {host_vars}\n")
    return inv


def cases(rep: Path) -> dict[str, dict]:
    out = {}
    for f in sorted(rep.glob("junit-*.xml")):
        for c in junit(f):
            out[c["name"].split("[")[0]] = c
    return out


def run(tmp_path: Path, captures: Path, *args: str, host_vars: str = "") -> tuple[dict, str, subprocess.CompletedProcess]:
    inv = project(tmp_path, captures, host_vars)
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "--progress", "off", *args)
    assert (rep / "summary.md").exists(), res.stdout[-3000:] + res.stderr[-2000:]
    return cases(rep), (rep / "summary.md").read_text(), res


def with_doc(tmp_path: Path, src: Path, probe: str, doc: dict, args: dict | None = None) -> Path:
    """A copy of the captures ``src`` with ``probe``'s document replaced by ``doc`` (saved under the args the
    capture was saved with, or ``args``)."""
    dst = tmp_path / f"caps-{probe}-{len(list(tmp_path.glob('caps-*')))}"
    shutil.copytree(src, dst)
    old = next(dst.glob(f"{probe}-*.json"))
    a = json.loads(old.read_text())["args"] if args is None else args
    old.unlink()
    save_probe(str(dst), probe, a, doc)
    return dst


# -- 1. the node's shape --------------------------------------------------------------------------------
def test_the_one_gpu_capture_reads_no_fabric_and_no_nvlink():
    doc = typed(inventory_doc())
    s = shape.node_shape(doc, H200)
    assert (s.gpus, s.board, s.has_nvlink, s.has_fabric) == (1, 8, False, False)
    assert s.describe() == ("1×H200 SXM (of 8 on the board), no NVLink, no fabric: nccl and nvlink layers not "
                            "applicable")
    state, why = shape.gpu_fabric(doc["gpus"][0], H200)
    assert state == "none" and "no fabric on this node" in why and "NOT_SUPPORTED" in why
    assert [f.failure for f in health.fabric(doc["gpus"][0], H200)] == [None]
    assert blockers(doc, H200) == []
    two = typed(saved(DATA, "gpu_inventory")["doc"])
    assert shape.node_shape(two, H200).describe() == "2×H200 SXM (of 8 on the board), NVLink, fabric ready"


def test_fabric_not_supported_where_nvlinks_answer_is_a_fabric_not_ready():
    """ALTERED: the 2xH200 capture (18 active NVLinks each) with fabric state NOT_SUPPORTED: NVLink is there,
    so the fabric is present and not registered: a failure that blocks only the nvlink and nccl layers."""
    doc = typed(saved(DATA, "gpu_inventory")["doc"])
    doc["gpus"][1]["fabric"] = {**doc["gpus"][1]["fabric"], "state": "NOT_SUPPORTED"}
    f = health.fabric(doc["gpus"][1], H200)[0]
    assert "NVLinks answer" in f.failure
    b = blockers(doc, H200)
    assert [(x.check, x.gpu, sorted(x.layers)) for x in b] == [("fabric", 1, ["nccl", "nvlink"])]


def test_healthy_one_gpu_node_passes_every_gpu_test(tmp_path):
    got, md, res = run(tmp_path, ONE, "-m", "health or memory or compute or nvlink or (nccl and not multinode)",
                       "-k", "not nccl_environment")  # the nccl_env probe (NCCL variables) was not captured
    assert res.returncode == 0, res.stdout[-3000:]
    bad = {n: c["outcome"] for n, c in got.items() if c["outcome"] not in ("passed", "skipped")}
    assert bad == {}
    skipped = {n for n, c in got.items() if c["outcome"] == "skipped"}
    # the readings this capture predates (InfoROM, recovery action, NVML call latency, launch environment, link
    # error counters) skip with that reason, never pass
    predates = {"test_inforom", "test_recovery_action", "test_nvml_latency", "test_driver_responsive",
                "test_launch_environment", "test_nccl_versions", "test_allreduce_link_errors",
                "test_nvlink_link_errors"}
    assert skipped - predates == {"test_fabric", "test_nvlink_links", "test_nvlink_topology", "test_p2p_bandwidth",
                                  "test_allreduce", "test_allreduce_multinode"}, skipped
    # skips grouped by reason; a reason of this one host names it
    assert "- h200-1: no fabric on this node: NVML fabric state NOT_SUPPORTED" in md
    for name in ("test_hbm_bandwidth", "test_tensor_tflops", "test_pcie_bandwidth", "test_launch_overhead"):
        assert got[name]["outcome"] == "passed", got[name]
    line = next(ln for ln in md.splitlines() if ln.startswith("- **") and "`h200-1`" in ln)
    assert line.startswith("- **PASS** `h200-1`") and "shape judged: 1×H200 SXM" in line
    assert "nccl and nvlink layers not applicable" in line and "failing" not in md


def test_fabric_not_ready_fails_and_blocks_only_nvlink_and_nccl(tmp_path):
    """ALTERED: 2xH200 with GPU 1's fabric IN_PROGRESS: test_fabric fails; HBM and TFLOP/s still pass; the
    nvlink and nccl tests are blocked; the host is FAIL "and N tests blocked"."""
    caps = alter(tmp_path, "gpu_inventory", lambda d: d["gpus"][1]["fabric"].update(state="IN_PROGRESS"))
    got, md, res = run(tmp_path, replay_folder(tmp_path, caps), "-m",
                       "health or memory or compute or nvlink or (nccl and not multinode)",
                       host_vars="gpu_sku=h200-sxm-141gb gpus_per_node=2")
    assert got["test_fabric"]["outcome"] == "failure" and "IN_PROGRESS" in got["test_fabric"]["message"]
    for name in ("test_hbm_bandwidth", "test_tensor_tflops", "test_pcie_bandwidth"):
        assert got[name]["outcome"] == "passed", got[name]
    blocked = {n for n, c in got.items() if c["outcome"] == "error"}
    assert blocked == {"test_nvlink_links", "test_nvlink_topology", "test_p2p_bandwidth", "test_allreduce"}
    assert all(got[n]["message"].startswith("blocked by fabric: GPU 1") for n in blocked)
    line = next(ln for ln in md.splitlines() if "`h200-1`" in ln and ln.startswith("- **"))
    assert line.startswith("- **FAIL** `h200-1`") and "and 4 tests blocked" in line, line


# -- 2. conditions ----------------------------------------------------------------------------------------
def test_the_foreign_matmul_capture_is_disturbed_not_a_slow_card():
    """The capture: hbm_bandwidth while a foreign bf16 matmul loop ran (copy 1904 GB/s, alone 4303)."""
    doc = typed(saved(FOREIGN, "hbm_bandwidth-matmul-started-20s")["doc"])
    found = conditions.disturbances(doc, typed(inventory_doc())["gpus"])
    assert len(found) == 1 and found[0][0] == 0
    assert found[0][1].startswith("disturbed: pid 801 (python3) used GPU 0 during the measurement")
    assert "SM up to 99%" in found[0][1]
    healthy = typed(saved(ONE, "hbm_bandwidth")["doc"])
    assert conditions.disturbances(healthy, typed(inventory_doc())["gpus"]) == []
    assert conditions.state(healthy) == "ok"
    # a probe that loads no GPU (fio) has only the host's watch: its state is said as the host's
    assert conditions.state({"host_conditions": {"state": "ok", "disturbed": []}}) == "host only: ok"
    assert conditions.state({}) == "not sampled (the probe document has no conditions)"


def test_a_disturbed_measurement_is_an_error_with_its_figures_kept(tmp_path):
    caps = with_doc(tmp_path, ONE, "hbm_bandwidth", saved(FOREIGN, "hbm_bandwidth-matmul-started-20s")["doc"])
    caps = with_doc(tmp_path, caps, "matmul_tflops", saved(FOREIGN, "matmul_tflops-hbm-copy")["doc"])
    got, md, res = run(tmp_path, caps, "-m", "memory or compute", "-k", "hbm or tensor")
    hbm, mm = got["test_hbm_bandwidth"], got["test_tensor_tflops"]
    assert hbm["outcome"] == "error" and hbm["message"].startswith("disturbed: pid 801 (python3) used GPU 0")
    assert "figure kept: " in hbm["text"] and "hbm_copy_bw_gbps 1904.2 GB/s < min 3900" in hbm["text"]
    assert mm["outcome"] == "error" and mm["message"].startswith("disturbed: pid 985 (python3) used GPU 0")
    assert "tf32_tflops 187.01" in mm["text"]
    figs = run_figures(json.loads((tmp_path / "rep" / "results.json").read_text()))
    cond = [f for f in figs if f["check"] == "conditions" and f["test"] == "test_hbm_bandwidth"]
    assert cond and cond[0]["extra"]["foreign"][0]["pid"] == 801
    line = next(ln for ln in md.splitlines() if "`h200-1`" in ln and ln.startswith("- **"))
    assert line.startswith("- **ERROR** `h200-1`") and "disturbed" in line and "1904" not in line


def test_a_hardware_clock_slowdown_fails_even_where_another_process_disturbed_the_figures(tmp_path):
    """ALTERED: the capture of a matmul run beside a foreign HBM-copy loop, with HW power brake slowdown (0x80)
    set in one dtype's clocks event reasons: no other process can assert the board's brake, so that reading fails
    the GPU (hardware, drain-rma) while the disturbed figures stay unjudged and kept."""
    doc = saved(FOREIGN, "matmul_tflops-hbm-copy")["doc"]
    fig = doc["gpus"][0]["dtypes"]["bf16"]
    fig["clocks_event_reasons"] = int(fig.get("clocks_event_reasons") or 0) | 0x80
    caps = with_doc(tmp_path, ONE, "matmul_tflops", doc)
    got, _, _ = run(tmp_path, caps, "-m", "compute", "-k", "tensor")
    res = json.loads((tmp_path / "rep" / "results.json").read_text())
    mm = got["test_tensor_tflops"]
    assert mm["outcome"] == "failure", mm
    assert "HW power brake slowdown while running bf16" in mm["text"] and "(also disturbed: pid 985" in mm["text"]
    assert "(blocked GPU) " in mm["text"]  # the disturbed figures: kept, not judged
    (t,) = [t for t in res["tests"] if "test_tensor_tflops" in t["nodeid"]]
    (brake,) = [e for e in t["failures"] if e.get("check") == "bf16_clocks_events"]
    assert brake["cause"]["kind"] == "hw_clock_event" and brake["action"]["action"] == "drain-rma"
    assert t["action"]["action"] == "drain-rma" and t["action"]["cause"] == "hardware"


def test_no_foreign_process_and_still_slow_is_the_card(tmp_path):
    """ALTERED: the healthy capture's read figure lowered; conditions say the GPU was the probe's alone, so
    the figure fails (confirmed by the same document replayed as the second measurement)."""
    doc = saved(ONE, "hbm_bandwidth")["doc"]
    doc["gpus"][0]["read_gbps"] = 3812.0
    caps = with_doc(tmp_path, ONE, "hbm_bandwidth", doc)
    save_probe(str(caps), "hbm_bandwidth", {"device": "cuda", "attempt": 2}, doc)
    got, _, _ = run(tmp_path, caps, "-m", "memory", "-k", "hbm")
    c = got["test_hbm_bandwidth"]
    assert c["outcome"] == "failure", c
    assert "hbm_read_bw_gbps 3812 GB/s < min 4300" in c["text"] and "measured again: 3812 GB/s (confirmed)" in c["text"]


# -- 3. confirm before failing ---------------------------------------------------------------------------
def _rec(layer="memory"):
    item = types.SimpleNamespace(user_properties=[], originalname="test_hbm_bandwidth")
    gpu = {"index": 0, "pci_bus_id": "00000000:00:06.0", "serial": "1650000000001"}
    return Recorder(item, "h200-1", layer, {0: gpu}), gpu


@pytest.mark.parametrize("second,burnin,kind,needle", [
    (3790.0, False, "failed", "measured again: 3790 GB/s (confirmed)"),
    (4600.0, False, "passed", None),
    (4600.0, True, "failed", "burn-in: instability is a finding"),
    (None, False, "failed", "not confirmed: the second measurement failed"),
])
def test_a_figure_below_its_floor_is_measured_once_more(second, burnin, kind, needle):
    from gpuaccept.errors import ProbeError
    rec, gpu = _rec()
    rec.record("hbm_read_bw_gbps", 3800.0, "GB/s", gpu=gpu, limit=H200.limit("hbm_read_bw_gbps"), confirm=True)
    assert rec.held() and rec.outcome().kind == "failed"  # held and never confirmed: still a failure
    calls = []

    def measure(args):
        calls.append(args)
        if second is None:
            raise ProbeError("h200-1", "hbm_bandwidth: CUDA error: unspecified launch failure")
        return {"gpus": [{"index": 0, "pci_bus_id": "00000000:00:06.0", "read_gbps": second}]}

    secs = confirm_held(rec, measure, lambda d, check, g: d["gpus"][0]["read_gbps"], {"device": "cuda"},
                        [gpu], burnin)
    assert calls == [{"device": "cuda", "attempt": 2}] and isinstance(secs, float)
    out = rec.outcome()
    assert out.kind == kind, out.message
    if needle:
        assert needle in out.message
    fig = [v for k, v in rec.item.user_properties if k == "gpuaccept.figure"][0]
    assert fig["extra"]["confirmation"]["value"] == second
    if second == 4600.0:
        assert fig["verdict"] == "unstable"
        unstable = [v for k, v in rec.item.user_properties if k == UNSTABLE_KEY]
        assert unstable[0]["first"] == 3800.0 and unstable[0]["second"] == 4600.0


def test_a_disturbed_figure_is_not_measured_again():
    rec, gpu = _rec()
    rec.conditions(typed(saved(FOREIGN, "hbm_bandwidth-matmul-started-20s")["doc"]), [gpu])
    rec.record("hbm_copy_bw_gbps", 1904.2, "GB/s", gpu=gpu, limit=H200.limit("hbm_copy_bw_gbps"), confirm=True)
    assert confirm_held(rec, lambda a: pytest.fail("measured again"), lambda *a: None, {}, [gpu]) is None
    out = rec.outcome()
    assert out.kind == "error" and out.message.startswith("disturbed: pid 801")


@pytest.mark.parametrize("max_s, kind", [(0.004, "passed"), (2.5, "failed")])
def test_nvml_latency_under_load_is_judged_per_gpu(max_s, kind):
    """The sampler's NVML timing under the probe's load (the capture's conditions with the timing written in the
    sampler's shape): within nvml_call_s it is a passing ``nvml_call_s_load`` figure of that GPU; over it the
    test fails naming the call, cause class unverified (measure again), never a drain."""
    rec, gpu = _rec()
    doc = typed(saved(ONE, "hbm_bandwidth")["doc"])
    doc["conditions"]["gpus"][0]["nvml_latency_s"] = {"calls": 40, "mean_s": max_s / 4, "max_s": max_s,
                                                      "slowest_call": "nvmlDeviceGetProcessUtilization"}
    rec.conditions(doc, [gpu])
    figs = {v["check"]: v for k, v in rec.item.user_properties if k == "gpuaccept.figure"}
    assert figs["nvml_call_s_load"]["value"] == max_s and figs["nvml_call_s_load"]["gpu"] == 0
    out = rec.outcome()
    assert out.kind == kind, out.message
    if kind == "failed":
        assert "NVML call nvmlDeviceGetProcessUtilization took 2.5 s load" in out.message
        fail = [v for k, v in rec.item.user_properties if k == "gpuaccept.failure"][0]
        assert fail["cause"]["class"] == "unverified" and fail["action"]["action"] not in ("drain-rma", "reboot")


def test_the_sampler_times_its_own_nvml_calls(monkeypatch):
    """The conditions sampler times each of its NVML calls per GPU (an error answer included): a pynvml stand-in
    whose process listing takes 30 ms on GPU 1 reads max_s >= 0.03 there, named as the slowest call."""
    import time as _time

    from probe_helpers import H200X2, FakeNvml, install_fake

    class Slow(FakeNvml):
        def nvmlDeviceGetComputeRunningProcesses(self, h):
            if h == 1:
                _time.sleep(0.03)
            return super().nvmlDeviceGetComputeRunningProcesses(h)

    install_fake(monkeypatch, Slow(H200X2))
    monkeypatch.syspath_prepend(str(REPO / "gpuaccept" / "probes"))
    from _conditions import Watch

    w = Watch([g["bus"] for g in H200X2], interval_s=0.05).start()
    _time.sleep(0.3)
    got = w.stop().result()
    assert got["state"] == "ok"
    fast, slow = (g["nvml_latency_s"] for g in got["gpus"])
    assert slow["calls"] == 2 * got["gpus"][1]["samples"] and slow["calls"] >= 4
    assert slow["max_s"] >= 0.03 and slow["slowest_call"] == "nvmlDeviceGetComputeRunningProcesses"
    assert fast["max_s"] < 0.03 <= slow["max_s"] and fast["mean_s"] <= fast["max_s"]


def test_an_unstable_figure_is_in_the_summary_with_both_values():
    fig = {"host": "h200-1", "layer": "memory", "test": "test_hbm_bandwidth", "check": "hbm_read_bw_gbps",
           "gpu": 0, "value": 3800.0, "unit": "GB/s", "limit": {"min": 4300, "source": "s"},
           "verdict": "unstable", "extra": {"confirmation": {"value": 4600.0, "seconds": 6.5}}}
    recs = [CaseRecord("suites/test_memory.py::test_hbm_bandwidth[h200-1]", "test_hbm_bandwidth[h200-1]",
                       "h200-1", "memory", "passed", figures=[fig])]
    md = summary_markdown("r", {"hosts": ["h200-1"]}, recs)
    assert "## Unstable figures" in md and "| h200-1 | 0 | hbm_read_bw_gbps | 3800 GB/s | 4600 GB/s |" in md
    assert host_verdicts(recs, ["h200-1"])["h200-1"]["verdict"] == "PASS"


# -- 4. one verdict order --------------------------------------------------------------------------------
def _case(host, name, outcome, message="", layer="health"):
    return CaseRecord(f"suites/test_{layer}.py::{name}[{host}]", f"{name}[{host}]", host, layer, outcome, message)


def test_a_proven_fault_is_fail_whatever_else_was_selected():
    health_only = [_case("a", "test_gpu_inventory", "failed", "a GPU 1: no NVML handle (GPU is lost)")]
    everything = health_only + [
        _case("a", "test_hbm_bandwidth", "error", "blocked by gpu_inventory: GPU 1: no NVML handle", "memory"),
        _case("a", "test_tensor_tflops", "error", "blocked by gpu_inventory: GPU 1: no NVML handle", "compute")]
    assert host_verdicts(health_only, ["a"])["a"]["verdict"] == "FAIL"
    hv = host_verdicts(everything, ["a"])
    assert hv["a"]["verdict"] == "FAIL" and hv["a"]["blocked"] == 2
    md = summary_markdown("r", {"hosts": ["a"]}, everything)
    line = next(ln for ln in md.splitlines() if ln.startswith("- **FAIL** `a`"))
    assert " — and 2 tests blocked" in line and "test_hbm_bandwidth" not in line
    assert verdict_order.strongest(["SKIP", "PASS", "ERROR", "FAIL"]) == "FAIL"
    assert verdict_order.strongest(["PASS", "ERROR"]) == "ERROR"
    assert [verdict_order.PROMETHEUS_CODE[v] for v in verdict_order.ORDER] == [3, 2, 1, 0]


def test_busy_is_an_error_under_every_selection(tmp_path):
    """The capture of the idle foreign process holding a context: preflight is an ERROR "busy", never a
    failure, and the host reads ERROR under -m health as under health, memory and compute."""
    caps = with_doc(tmp_path, ONE, "gpu_inventory", saved(FOREIGN, "gpu_inventory-idle-context")["doc"])
    verdicts = {}
    for sel in ("health", "health or memory or compute"):
        d = tmp_path / sel.replace(" ", "_")
        d.mkdir()
        got, md, _ = run(d, caps, "-m", sel)
        pre = got["test_preflight"]
        assert pre["outcome"] == "error" and "busy: pid 1177 (python3) holds a context on the GPU" in pre["message"]
        verdicts[sel] = next(ln for ln in md.splitlines() if "`h200-1`" in ln and ln.startswith("- **"))
        if "memory" in sel:
            assert got["test_hbm_bandwidth"]["message"].startswith("blocked by preflight: GPU 0: busy: pid 1177")
    assert all(v.startswith("- **ERROR** `h200-1`") for v in verdicts.values()), verdicts


# -- 5. interrupted runs ---------------------------------------------------------------------------------
def test_an_interrupted_fleet_test_leaves_no_host_pass_or_skip():
    recs = [_case("a", "test_ecc", "passed"), _case("b", "test_ecc", "passed"),
            CaseRecord("suites/test_nccl_multinode.py::test_allreduce_multinode", "test_allreduce_multinode",
                       None, "nccl", "error", "not finished: run interrupted")]
    meta = {"hosts": ["a", "b"], "interrupted": True,
            "interruption": {"signal": "SIGTERM", "at": 1796166000.0,  # 2026-12-01 23:00:00 UTC
                             "running": ["suites/test_nccl_multinode.py::test_allreduce_multinode"], "unfinished": 1}}
    hv = host_verdicts(recs, ["a", "b"])
    assert {h: hv[h]["verdict"] for h in ("a", "b")} == {"a": "ERROR", "b": "ERROR"}
    assert failed_hosts(recs, ["a", "b"]) == ["a", "b"]
    md = summary_markdown("r", meta, recs).splitlines()
    assert md[0] == "**INTERRUPTED** by SIGTERM at 2026-12-01 23:00:00 UTC while running test_allreduce_multinode; " \
                    "1 test not finished", md[:4]
    assert any(ln.startswith("**INTERRUPTED** **ERROR** 2 hosts") for ln in md), md[:6]  # the run line


def test_sigterm_mid_run_reads_interrupted_everywhere(tmp_path):
    """A real run stopped by SIGTERM while a test holds the host: summary.md, report.html and the JUnit
    testsuite properties open with INTERRUPTED (signal, when, what ran); the host is in failed-hosts.txt."""
    suite = '''
import os, time
import pytest

pytestmark = pytest.mark.nccl


def test_first(node, verdicts):
    verdicts.record("x", 1)


def test_hold(node, verdicts):
    open(os.environ["E2E_READY"], "w").close()
    node.run("sleep 30", timeout=60)
    verdicts.record("y", 1)
'''
    inv = make_project(tmp_path, [], None, extra_suite=suite, name="test_zz_hold.py")
    inv.write_text("h1 ansible_connection=local\n")
    ready = tmp_path / "ready"
    rep = tmp_path / "rep"
    p = subprocess.Popen([sys.executable, "-m", "pytest", "--inventory", str(inv), "--reports", str(rep),
                          "--progress", "off", "suites/test_zz_hold.py"], cwd=tmp_path,
                         env={**os.environ, "E2E_READY": str(ready)}, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 60
    while not ready.exists() and time.time() < deadline and p.poll() is None:
        time.sleep(0.1)
    p.send_signal(15)
    out, _ = p.communicate(timeout=60)
    md = (rep / "summary.md").read_text()
    assert md.startswith("**INTERRUPTED** by SIGTERM at "), md[:400] + out[-2000:]
    assert "while running test_hold[h1]" in md.splitlines()[0]
    assert "- **ERROR** `h1`" in md
    assert (rep / "failed-hosts.txt").read_text().splitlines()[0] == "h1"
    html = (rep / "report.html").read_text()
    assert 'id="interrupted"' in html and "INTERRUPTED" in html
    xml = "".join(f.read_text() for f in rep.glob("junit-*.xml"))
    assert 'name="gpuaccept.interrupted" value="INTERRUPTED by SIGTERM' in xml
    assert 'name="gpuaccept.host_verdict.h1" value="ERROR"' in xml
    assert "gpuaccept: INTERRUPTED by SIGTERM" in out


# -- 6. a rerun keeps what it cannot repeat ---------------------------------------------------------------
def test_failed_hosts_names_the_fleet_test_and_its_partners():
    recs = [_case("a", "test_ecc", "passed"), _case("b", "test_ecc", "passed"),
            CaseRecord("suites/test_nccl_multinode.py::test_allreduce_multinode", "test_allreduce_multinode",
                       None, "nccl", "error", "b: stopped answering during the all-reduce")]
    text = failed_hosts_text(recs, ["a", "b"])
    assert text == "b\n# fleet-wide test_allreduce_multinode did not pass on: a b\n"
    # a replayed host r (no figure of its own in the all-reduce: it could not take part) is no partner
    took = CaseRecord(recs[2].nodeid, recs[2].name, None, "nccl", "error", "b: stopped answering during the all-reduce",
                      figures=[{"host": h, "check": "internode_transports", "value": {}, "verdict": "recorded"}
                               for h in ("a", "b")])
    assert failed_hosts_text(recs[:2] + [took], ["r", "a", "b"]).endswith(
        "# fleet-wide test_allreduce_multinode did not pass on: a b\n")


def test_a_rerun_of_one_host_reads_not_rerun_never_pass(tmp_path):
    limit = tmp_path / "failed-hosts.txt"
    limit.write_text("h1\n# fleet-wide test_allreduce_multinode did not pass on: h1 h2\n")
    assert fleet_tests(str(limit)) == {"test_allreduce_multinode": ["h1", "h2"]}
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("h1 ansible_connection=local\nh2 ansible_connection=local\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "--progress", "off",
                     f"--limit=@{limit}", "-k", "multinode")
    assert res.returncode != 0, res.stdout[-2000:]
    c = cases(rep)["test_allreduce_multinode"]
    assert c["outcome"] == "error" and c["message"].startswith(
        "h1: not rerun: the inter-node all-reduce needs at least 2 hosts"), c
    assert "--limit h1,h2" in c["message"] and "bring back h2" in c["message"]
    md = (rep / "summary.md").read_text()
    assert "- **ERROR** `h1`" in md and "PASS** `h1`" not in md


# -- 7. field states -------------------------------------------------------------------------------------
def test_unknown_error_telemetry_fails_naming_gpu_fields_and_remedy(tmp_path):
    """ALTERED: the one-GPU capture with temperature, power and clocks answering NVML "Unknown Error" (how a
    GPU whose GSP stopped answering reads; nvidia-smi: ERR!)."""
    def gsp_gone(d):
        g = d["gpus"][0]
        for k in ("temp_c", "power_w"):
            g[k] = {"nvml_error": "Unknown Error"}
        g["clocks"]["sm_mhz"] = {"nvml_error": "Unknown Error"}
    caps = alter(tmp_path, "gpu_inventory", gsp_gone, src=ONE)
    got, md, _ = run(tmp_path, caps, "-m", "health or memory", "-k", "inventory or hbm")
    inv = got["test_gpu_inventory"]
    assert inv["outcome"] == "failure"
    assert 'GPU 0 (00000000:00:06.0, serial 1650000000001): NVML answers "Unknown Error" for 3 reading(s): ' \
           'temp_c, power_w, clocks.sm_mhz' in inv["text"] and "a GPU reset is the usual remedy" in inv["text"]
    assert got["test_hbm_bandwidth"]["message"].startswith("blocked by gpu_inventory: GPU 0: NVML answers")
    line = next(ln for ln in md.splitlines() if "`h200-1`" in ln and ln.startswith("- **"))
    assert line.startswith("- **FAIL** `h200-1`") and "and 1 test blocked" in line


def test_compute_modes():
    g = typed(inventory_doc()["gpus"][0])
    assert [f.failure for f in health.compute_mode(g)] == [None]
    prohibited = {**g, "compute_mode": "Prohibited"}
    assert "compute mode Prohibited" in health.compute_mode(prohibited)[0].failure
    busy = typed(saved(FOREIGN, "gpu_inventory-idle-context")["doc"]["gpus"][0])
    exclusive = {**busy, "compute_mode": "Exclusive_Process"}
    cause = health.busy_cause(exclusive)
    assert cause == ("busy: pid 1177 (python3) holds a context on the GPU in compute mode Exclusive_Process: no "
                     "other process can create a context")
    found = {f.check: f for f in health.preflight(exclusive, H200)}
    assert found["compute_processes"].error == cause and found["compute_processes"].failure is None
    doc = {**typed(inventory_doc()), "gpus": [prohibited]}
    assert [(b.check, b.gpu) for b in blockers(doc, H200)] == [("preflight", 0)]


def test_cuda_visible_devices_hiding_nvml_gpus_is_named_with_its_value():
    """The capture taken with CUDA_VISIBLE_DEVICES='' in the probes' environment."""
    doc = typed(saved(FOREIGN, "gpu_inventory-cuda-visible-devices-empty")["doc"])
    assert doc["cuda_visible_devices"] == ""
    f = health.cuda_visible_devices(doc)[0]
    assert f.error.startswith("CUDA_VISIBLE_DEVICES='' in the node's environment hides 1 of 1 NVML GPU(s)")
    assert health.cuda_visible_devices(typed(inventory_doc()))[0].error is None
    assert health.cuda_visible_devices({**doc, "cuda_visible_devices": "0"})[0].error is None
    assert "hides 1 of 1" in health.cuda_visible_devices({**doc, "cuda_visible_devices": "-1,0"})[0].error


def test_no_device_names_the_driver_cuda_version_beside_torchs_build():
    sys.path.insert(0, str(REPO / "gpuaccept" / "probes"))
    try:
        from _gpu import why_no_device
    finally:
        sys.path.pop(0)
    old = why_no_device("12.8", 12040, 8, None)
    assert old == ["the NVIDIA driver supports CUDA 12.4 (NVML), torch is built for CUDA 12.8: the driver is too "
                   "old for this torch build (update the driver, or install a torch built for CUDA <= 12.4)"]
    same = why_no_device("13.0", 13000, 1, "")
    assert same == ["the NVIDIA driver supports CUDA 13.0 (NVML), torch is built for CUDA 13.0",
                    "CUDA_VISIBLE_DEVICES='' in the probe's environment hides NVML's 1 GPU(s) from CUDA"]
    assert why_no_device(None, None, None, None) == []


def test_the_sampler_tells_the_probes_own_processes_from_others():
    sys.path.insert(0, str(REPO / "gpuaccept" / "probes"))
    try:
        from _conditions import Watch, is_own
    finally:
        sys.path.pop(0)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10)"])
    try:
        assert is_own(child.pid, os.getpid()) and is_own(os.getpid(), os.getpid())
        assert not is_own(os.getppid(), os.getpid())
    finally:
        child.kill()
        child.wait()
    w = Watch([None]).start()
    assert w.stop().result()["state"].startswith("not sampled")
