"""Fleet-wide health (suites/test_health.py::test_fleet_consistency, judged by gpuaccept/judging/fleet.py): the hosts at
fault are named, in the summary and in failed-hosts.txt, not only the pseudo-host "fleet"."""
from __future__ import annotations

import json

from gpuaccept.judging.fleet import driver_split, shared_gpus
from project_helpers import failed_hosts, DATA, alter, make_project, replay_folder, run_pytest


def test_driver_split_names_the_hosts_off_the_majority():
    found = driver_split({"580.159.04": ["a", "b", "c"], "570.195.03": ["d"]})
    assert found == [("d", "driver 570.195.03, while 3 of 4 hosts run 580.159.04")]
    assert driver_split({"580.159.04": ["a", "b"]}) == []


def test_driver_split_without_majority_names_every_host():
    found = dict(driver_split({"580.159.04": ["a"], "570.195.03": ["b"]}))
    assert set(found) == {"a", "b"} and "no majority driver" in found["a"] and found["b"].startswith("driver 570")


def test_shared_gpus_names_both_names_of_one_machine():
    g = [{"uuid": "GPU-1"}, {"uuid": "GPU-2"}]
    found = dict(shared_gpus({"n1": g, "n2": list(g), "n3": [{"uuid": "GPU-3"}], "n4": [{"uuid": None}],
                              "n5": [{"uuid": None}]}, {"n1": "10.0.0.7", "n2": "10.0.0.7"}))
    assert set(found) == {"n1", "n2"}
    assert "same GPUs as n2 (2 GPUs by NVML UUID, first GPU-1; n1 at 10.0.0.7, n2 at 10.0.0.7)" in found["n1"]


def _uuids(tag):
    def change(doc):
        for g in doc["gpus"]:
            g["uuid"] = g["uuid"][:-4] + tag + g["uuid"][-2:]
    return change


def _driver(doc):
    doc["driver"] = doc["kernel_driver_version"] = "570.195.03"


def _run(tmp_path, folders):
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("".join(f"{h} ansible_connection=local gpuaccept_replay={replay_folder(tmp_path, f)} "
                           "gpu_sku=h200-sxm-141gb gpus_per_node=2\n" for h, f in folders.items()))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-m", "health")
    test = next(t for t in json.loads((rep / "results.json").read_text())["tests"]
                if t["nodeid"].endswith("test_fleet_consistency"))
    return res, test, failed_hosts(rep / "failed-hosts.txt"), (rep / "summary.md").read_text()


def test_a_host_on_another_driver_is_a_failed_host(tmp_path):
    """Found on 2026-11-30 (third trial): with g3 on driver 570 and g1, g2 on 580 the fleet test FAILED
    "fleet: hosts run different drivers", but every host read PASS and failed-hosts.txt was empty, so
    --limit=@failed-hosts.txt had nothing to rerun. Now g3 alone is a failed host."""
    g2 = alter(tmp_path, "gpu_inventory", _uuids("0002"))
    g3 = alter(tmp_path, "gpu_inventory", _driver, src=alter(tmp_path, "gpu_inventory", _uuids("0003")))
    res, test, failed, summary = _run(tmp_path, {"g1": DATA, "g2": g2, "g3": g3})
    assert res.returncode == 1 and test["outcome"] == "failed", res.stdout[-3000:]
    assert failed == ["g3"], (failed, test["message"])
    assert "- **FAIL** `g3`: test_fleet_consistency: g3: driver 570.195.03, while 2 of 3 hosts run 580.159.04" \
        in summary
    assert "- **PASS** `g1`" in summary
    # the log's host lines (no terminal): g3's says FAIL, though the fleet-wide test ended before g3's last test
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.startswith("[gpuaccept] g")]
    assert [ln.split(" (")[0] for ln in lines if ln.startswith("[gpuaccept] g3 ")] == ["[gpuaccept] g3 FAIL"], lines


def test_a_rerun_of_the_host_off_the_majority_does_not_pass_the_comparison_it_cannot_repeat(tmp_path):
    """g3 on driver 570 fails the fleet comparison (fix-config). Rerunning it alone from failed-hosts.txt or from
    hosts-fix-config.txt compared g3 with itself and passed, exit 0, the driver still wrong. Now the rerun reads the
    fleet-wide line of failed-hosts.txt (beside the action list), and its comparison is an ERROR of g3 "not
    rerun", naming the hosts to select."""
    g2 = alter(tmp_path, "gpu_inventory", _uuids("0002"))
    g3 = alter(tmp_path, "gpu_inventory", _driver, src=alter(tmp_path, "gpu_inventory", _uuids("0003")))
    res, test, failed, _ = _run(tmp_path, {"g1": DATA, "g2": g2, "g3": g3})
    assert failed == ["g3"] and res.returncode == 1, res.stdout[-2000:]
    rep = tmp_path / "rep"
    assert (rep / "hosts-fix-config.txt").read_text() == "g3\n"  # a plain host list (scripts read it)
    assert "# fleet-wide test_fleet_consistency did not pass on: g1 g2 g3" in (rep / "failed-hosts.txt").read_text()
    for listed in ("failed-hosts.txt", "hosts-fix-config.txt"):
        again = tmp_path / f"again-{listed}"
        r = run_pytest(tmp_path, "--inventory", str(tmp_path / "inventory.ini"), "--reports", str(again), "-m",
                       "health", f"--limit=@{rep / listed}")
        assert r.returncode == 1, r.stdout[-3000:]
        t = next(t for t in json.loads((again / "results.json").read_text())["tests"]
                 if t["nodeid"].endswith("test_fleet_consistency"))
        assert t["outcome"] == "error" and t["message"].startswith(
            "g3: not rerun: the fleet-wide driver and GPU comparison did not pass over 3 hosts and 1 of them cannot "
            "repeat it (rerun with --limit g1,g2,g3)"), t["message"]
        assert failed_hosts(again / "failed-hosts.txt") == ["g3"]


def test_one_machine_under_two_names_fails_both_names(tmp_path):
    """Found on 2026-11-30 (third trial): g1 and g2 reaching one machine (a copied ansible_host) both PASSED
    with the same GPUs, UUIDs and serials, and the machine g2 stands for was never tested. Now both names
    fail, naming each other; g3, a machine of its own, passes."""
    g3 = alter(tmp_path, "gpu_inventory", _uuids("0003"))
    res, test, failed, summary = _run(tmp_path, {"g1": DATA, "g2": DATA, "g3": g3})
    assert res.returncode == 1 and test["outcome"] == "failed", res.stdout[-3000:]
    assert failed == ["g1", "g2"], (failed, test["message"])
    assert "g2: reports the same GPUs as g1 (2 GPUs by NVML UUID" in test["message"]
    assert "- **PASS** `g3`" in summary
    # the action follows the finding's cause (the inventory's names), not the test's catch-all row (a driver version)
    entries = {e["host"]: e for e in test["failures"]}
    assert entries["g1"]["cause"]["kind"] == "same_gpus" and entries["g1"]["action"]["action"] == "fix-config"
    assert "ansible_host" in entries["g1"]["action"]["command"] and "driver" not in entries["g1"]["action"]["command"]


def test_every_name_of_one_machine_fails_however_long_the_message(tmp_path):
    """Thirty names reaching one machine: the fleet test's message (cut to its last 4,000 characters in the
    reports) names only some of them, yet each name is a failed host with its own line as the reason, from the
    failure entries filed under it; a machine of its own still passes."""
    own = alter(tmp_path, "gpu_inventory", _uuids("0031"))
    names = {f"g{i:02d}": DATA for i in range(30)}
    res, test, failed, summary = _run(tmp_path, {**names, "solo": own})
    assert res.returncode == 1 and test["outcome"] == "failed", res.stdout[-3000:]
    assert len(test["message"]) <= 4000 and not all(f"\n{h}: " in "\n" + test["message"] for h in names)
    assert failed == sorted(names), failed
    for h in names:
        assert f"- **FAIL** `{h}`: test_fleet_consistency: {h}: reports the same GPUs as " in summary, h
    assert "- **PASS** `solo`" in summary


def test_hosts_whose_tests_k_left_out_are_not_in_the_run_and_a_dead_host_alone_in_a_fleet_test_is_its_error(tmp_path):
    """``-k "not dead"`` over a replayed host and a host refusing connections: the dead host's tests are left out,
    so no report lists it (it had read SKIP, an unreachable host looking fine in Prometheus). ``-k fleet``: the
    fleet test is the only one to read the dead host, so the host is that test's ERROR with its cause."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"g1 ansible_connection=local gpuaccept_replay={replay_folder(tmp_path, DATA)} "
                   "gpu_sku=h200-sxm-141gb gpus_per_node=2\ndead-01 ansible_host=127.0.0.1 ansible_port=9\n")
    rep, prom = tmp_path / "rep", tmp_path / "g.prom"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-m", "health", "-k", "not dead",
                     "--prometheus-textfile", str(prom))
    assert res.returncode in (0, 1), res.stdout[-3000:]
    assert "dead-01" not in prom.read_text() and "dead-01" not in (rep / "summary.md").read_text()
    assert 'host="g1"' in prom.read_text()
    assert json.loads((rep / "results.json").read_text())["hosts"] == ["g1"]

    rep2 = tmp_path / "rep2"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep2), "-m", "health", "-k", "fleet",
                     "--prometheus-textfile", str(prom))
    series = [ln for ln in prom.read_text().splitlines() if ln.startswith("gpuaccept_host_verdict{")]
    assert res.returncode == 1, res.stdout[-3000:]
    assert any('action="check-network"' in ln and 'host="dead-01"' in ln and 'verdict="ERROR"' in ln for ln in series), series
    assert not any('host="g1"' in ln and 'verdict="ERROR"' in ln for ln in series), series
    assert failed_hosts(rep2 / "failed-hosts.txt") == ["dead-01"]
