"""Faults a new user met on 2026-11-30, each as a test: bad numeric options, a damaged saved run, a lost GPU
in one field, a SKU file without a dtype's limit, merging shards with a fleet-wide failure."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpuaccept.judging import health
from gpuaccept.scaleout.merge import merge
from gpuaccept.judging.readings import typed
from gpuaccept.config.thresholds import load_sku_file
from project_helpers import DATA, alter, junit, make_project, outcomes, replay_project, run_pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args,needle", [
    (("--probe-timeout", "nan"), "--probe-timeout nan: expected a number > 0"),
    (("--probe-timeout", "-5"), "--probe-timeout -5.0: expected a number > 0"),
    (("--xid-window", "-5"), "--xid-window -5.0: expected a number >= 0"),
    (("--standout-pct", "-10"), "--standout-pct -10.0: expected a number > 0 and < 100"),
    (("--prometheus-textfile", "/nonexistent-dir/x.prom"), "folder /nonexistent-dir does not exist"),
    (("--history", "/proc/no-such-pid/h.sqlite"), "--history /proc/no-such-pid/h.sqlite: cannot be created"),
])
def test_bad_options_exit_4_before_any_node(tmp_path, args, needle):
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("h1 ansible_connection=local\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), *args, "--reports", str(tmp_path / "rep"))
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    assert needle in res.stderr and "Traceback" not in res.stderr + res.stdout
    assert not (tmp_path / "rep").exists()


def test_damaged_saved_document_is_an_error_in_one_line(tmp_path):
    captures = tmp_path / "captures"
    shutil.copytree(DATA, captures)
    f = next(captures.glob("pcie_link-*.json"))
    f.write_text(f.read_text()[:200])  # cut short
    for g in captures.glob("nvlink-*.json"):
        saved = json.loads(g.read_text())
        saved["doc"] = None
        g.write_text(json.dumps(saved))
    inv = replay_project(tmp_path, captures)
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "pcie_link or nvlink_links")
    got = outcomes(rep)
    for name in ("test_pcie_link", "test_nvlink_links"):
        assert got[name]["outcome"] == "error", got[name]
        text = got[name]["text"]
        assert "(replay)" in text and "Traceback" not in text and "object at 0x" not in text, text
    assert "unreadable: JSONDecodeError" in got["test_pcie_link"]["text"]
    assert "holds no probe document" in got["test_nvlink_links"]["text"]


def test_a_field_reading_gpu_is_lost_fails_even_when_not_required():
    doc = typed(json.loads((DATA / "gpu_inventory-bf21a9e8fb.json").read_text())["doc"])
    sku = load_sku_file(str(REPO / "thresholds" / "h200-sxm-141gb.yaml"))
    g = dict(doc["gpus"][1])
    g["temp_c"] = typed({"nvml_error": "GPU is lost"})
    found = health.temperature(g, sku)
    assert found[0].failure and "the GPU is lost" in found[0].failure


def test_sku_file_without_a_dtype_limit_is_an_error_not_an_unjudged_dtype(tmp_path):
    th = tmp_path / "th"
    shutil.copytree(REPO / "thresholds", th)
    p = th / "h200-sxm-141gb.yaml"
    p.write_text("\n".join(ln for ln in p.read_text().splitlines() if not ln.startswith("  bf16_tflops:")) + "\n")
    inv = replay_project(tmp_path, DATA)
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "--thresholds", str(th), "-k", "tensor_tflops")
    got = outcomes(rep)["test_tensor_tflops"]
    assert got["outcome"] == "error" and "no limit for check 'bf16_tflops'" in got["text"], got


def test_merge_keeps_the_worst_outcome_of_a_fleet_wide_test(tmp_path):
    def folder(name: str, outcome: str) -> Path:
        d = tmp_path / name
        d.mkdir()
        rec = {"nodeid": "suites/test_health.py::test_fleet_consistency", "name": "test_fleet_consistency",
               "host": None, "layer": "health", "outcome": outcome, "message": "drivers differ" if outcome ==
               "failed" else "", "duration_s": 0.1, "figures": []}
        (d / "results.json").write_text(json.dumps({"run_id": name, "meta": {"hosts": []}, "tests": [rec],
                                                    "figures": []}))
        return d
    failed, skipped = folder("a", "failed"), folder("b", "skipped")
    for order in ((failed, skipped), (skipped, failed)):
        out = tmp_path / f"m-{order[0].name}"
        merge([str(d) for d in order], str(out))
        tests = json.loads((out / "results.json").read_text())["tests"]
        assert [t["outcome"] for t in tests] == ["failed"], tests
    with pytest.raises(ValueError, match="named twice"):
        merge([str(failed), str(failed)], str(tmp_path / "m2"))


@pytest.mark.parametrize("line,needle", [
    ("gpu1 ansible_connection=local gpus_per_nod=8", "var gpus_per_nod: not a variable gpuaccept knows; did you mean gpus_per_node?"),
    ("gpu1 ansible_connection=local gpu_skus=h200-sxm-141gb", "did you mean gpu_sku?"),
    # second trial: a node missing drives passed with nvme_cnt; NCCL and connection typos were dropped silently
    ("gpu1 ansible_connection=local nvme_cnt=8", "var nvme_cnt: not a variable gpuaccept knows; did you mean nvme_count?"),
    ("gpu1 ansible_connection=local nccl_evn={}", "did you mean nccl_env?"),
    ("gpu1 ansible_connection=local ncl_env={}", "did you mean nccl_env?"),
    ("gpu1 ansible_connection=local ansible_python_interpeter=/x/python", "did you mean ansible_python_interpreter?"),
    ("gpu1 ansible_connection=local ansible_prot=22", "did you mean ansible_port?"),
])
def test_typo_of_a_declaring_var_exits_4(tmp_path, line, needle):
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(line + "\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--collect-only", "-q")
    assert res.returncode == 4 and needle in res.stderr, res.stderr[-1000:]


def test_operators_own_vars_are_left_alone(tmp_path):
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("gpu1 ansible_connection=local rack=r07 gpu_vendor_note=spare owner=ml-infra datacenter=dc2 "
                   "owner_team=infra gpu_model=h200 ansible_become=true nccl_debug_note=x\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--collect-only", "-q")
    assert res.returncode == 0, res.stdout[-1000:] + res.stderr[-1000:]


def test_collect_only_touches_no_node(tmp_path):
    """The fan-out starts when the tests are known; --collect-only must not connect anywhere (an address
    that would take the connect timeout to fail shows it)."""
    import time
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    from sshd import client_key
    key = client_key()  # a real key: a file that is none is refused before collection (exit 4)
    inv.write_text(f"far ansible_host=192.0.2.1 ansible_ssh_private_key_file={key}\n")
    t0 = time.monotonic()
    res = run_pytest(tmp_path, "--inventory", str(inv), "--collect-only", "-q")
    assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-1500:]
    assert time.monotonic() - t0 < 8 and "far" in res.stdout


def test_baseline_that_names_no_run_exits_4(tmp_path):
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("h1 ansible_connection=local\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--baseline", "nosuchrun", "--reports", str(tmp_path / "r"))
    assert res.returncode == 4 and "--baseline nosuchrun: no history database" in res.stderr, res.stderr[-800:]
    ok = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "r1"),
                    "--history", str(tmp_path / "h.sqlite"))
    assert ok.returncode == 0, ok.stdout[-1500:]
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "r2"),
                     "--history", str(tmp_path / "h.sqlite"), "--baseline", "nosuchrun")
    assert res.returncode == 4 and "no such run in" in res.stderr, res.stderr[-800:]
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(tmp_path / "r3"),
                     "--history", str(tmp_path / "h.sqlite"), "--baseline", "r1")
    assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-800:]
    assert json.loads((tmp_path / "r3" / "results.json").read_text())["interrupted"] is False


def test_list_hosts_writes_ipv6_with_brackets(tmp_path):
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("[gpu]\n[2001:db8::12]:2200\nlocalbox ansible_connection=local\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--list-hosts")
    assert res.returncode == 0, res.stdout[-1000:] + res.stderr[-1000:]
    assert "ansible_host=[2001:db8::12]:2200" in res.stdout and "localbox  ansible_host=-" in res.stdout


def test_non_ascii_host_and_unreadable_serial_keep_one_host_and_a_history(tmp_path):
    """Found on 2026-11-30 (second trial): a host named "gpu-é1" was two hosts in the reports (pytest's id
    "gpu-\\xe91" for its tests, the inventory name for its figures) and failed-hosts.txt named one --limit
    refused; a GPU whose NVML serial reads "Not Supported" stopped the history recording anything (the NvmlError
    bound as the serial) and would have keyed every such GPU to one subject. Replayed 2xH200 captures, one GPU's
    bf16 made slow (ALTERED: 450 TFLOP/s) and both serials unreadable (ALTERED: "Not Supported")."""
    def change(doc):
        for g in doc.get("gpus") or []:
            g["serial"] = {"nvml_error": "Not Supported"}
    def slow_gpu1(doc):
        doc["gpus"][1]["dtypes"]["bf16"]["tflops"] = 450.0
    slow = alter(tmp_path, "matmul_tflops", slow_gpu1, src=alter(tmp_path, "gpu_inventory", change))
    from project_helpers import replay_folder
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"gpu-é1 ansible_connection=local gpuaccept_replay={replay_folder(tmp_path, slow)} "
                   "gpu_sku=h200-sxm-141gb gpus_per_node=2\n")
    rep, db = tmp_path / "rep", tmp_path / "h.sqlite"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "--history", str(db), "-m", "compute")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    doc = json.loads((rep / "results.json").read_text())
    assert {t["host"] for t in doc["tests"]} == {"gpu-é1"}, {t["host"] for t in doc["tests"]}
    assert {f["host"] for f in doc["figures"]} == {"gpu-é1"}
    assert all(f.get("serial") is None for f in doc["figures"] if f.get("gpu") is not None)
    assert (rep / "failed-hosts.txt").read_text(encoding="utf-8").split() == ["gpu-é1"]
    rerun = run_pytest(tmp_path, "--inventory", str(inv), f"--limit=@{rep / 'failed-hosts.txt'}", "--list-hosts")
    assert rerun.returncode == 0 and "gpu-é1" in rerun.stdout, rerun.stdout[-1000:] + rerun.stderr[-1000:]
    import sqlite3
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    subjects = {r[0] for r in con.execute("SELECT DISTINCT subject FROM figures WHERE gpu IS NOT NULL")}
    assert subjects == {"host:gpu-é1:gpu0", "host:gpu-é1:gpu1"}, subjects


@pytest.mark.parametrize("kind", ["text file", "folder"])
def test_history_that_is_no_database_exits_4_before_any_node(tmp_path, kind):
    """Found on 2026-11-30 (second trial): a --history path that is not a history database was found only after
    the whole run (exit 3, or 1 hiding it when tests failed); the figures of that run never reached the history."""
    bad = tmp_path / "h.db"
    if kind == "folder":
        bad.mkdir()
    else:
        bad.write_text("not a database\n")
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("h1 ansible_connection=local\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--history", str(bad), "--reports", str(tmp_path / "rep"))
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    assert f"--history: {bad}: not a gpuaccept history database" in res.stderr
    assert "Traceback" not in res.stderr + res.stdout and not (tmp_path / "rep").exists()
    if kind == "text file":
        assert bad.read_text() == "not a database\n"  # left as it was


def test_multinode_allreduce_over_replayed_hosts_is_skipped_not_blamed_on_the_first(tmp_path):
    """Found on 2026-11-30 (second trial): over replayed hosts the inter-node all-reduce FAILED with "h-a:
    replayed host ... runs no commands", making the healthy h-a a failed host; a collective cannot be replayed."""
    from project_helpers import replay_folder
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("".join(f"h-{c} ansible_connection=local gpuaccept_replay={replay_folder(tmp_path, DATA)} "
                           "gpu_sku=h200-sxm-141gb gpus_per_node=2\n" for c in "ab"))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "multinode")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    test = next(t for t in json.loads((rep / "results.json").read_text())["tests"]
                if t["nodeid"].endswith("test_allreduce_multinode"))
    assert test["outcome"] == "skipped" and "replay saved documents" in test["message"], test
    assert not (rep / "failed-hosts.txt").exists() or (rep / "failed-hosts.txt").read_text().strip() == ""
