"""hosts-<action>.txt: written only for an action some host has, a stale one removed on a rewrite."""
from __future__ import annotations

from gpuaccept.reporting import reporter as reporter_mod
from gpuaccept.reporting.reporter import Reporter


def test_a_passing_run_holds_no_empty_action_list_and_a_stale_one_goes(tmp_path, monkeypatch):
    run = tmp_path / "run"
    rep = Reporter(str(run), "night1", {"inventory": "prod.ini", "hosts": ["gpu-01", "gpu-02"]})
    lists = {"rerun": ["gpu-02"], "reboot": [], "drain-rma": []}
    monkeypatch.setattr(reporter_mod, "action_hosts", lambda hv, hosts: dict(lists))
    rep.flush()
    assert sorted(p.name for p in run.glob("hosts-*.txt")) == ["hosts-rerun.txt"]
    assert (run / "hosts-rerun.txt").read_text() == "gpu-02\n"
    lists["rerun"] = []  # the host's rerun passed: its list, written earlier in the run, goes
    rep.flush(final=True)
    assert list(run.glob("hosts-*.txt")) == []
    assert (run / "failed-hosts.txt").exists()  # always written, empty or not
