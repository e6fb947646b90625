"""What earlier runs say of a host (gpuaccept.reporting.history.earlier, gpuaccept.plugin.earlier): the most GPUs a
host showed, read from a real history database that runs wrote; nothing known where there is no readable one."""
from __future__ import annotations

from gpuaccept.plugin.earlier import EarlierRuns
from gpuaccept.reporting.history import connect, record_run
from gpuaccept.reporting.history.earlier import most_gpus


def _night(con, run_id: str, started: float, counts: dict[str, int]) -> None:
    figs = [{"host": h, "gpu": None, "check": "gpu_count", "value": n, "unit": None, "verdict": "pass"}
            for h, n in counts.items()]
    record_run(con, {"run_id": run_id, "started": started, "inventory": "fleet.ini", "profile": "standard",
                     "limit": None, "report_dir": "/r", "verdict": "PASS"}, [], figs, {h: "PASS" for h in counts})


def test_the_most_gpus_a_host_showed_over_the_runs(tmp_path):
    path = tmp_path / "history.sqlite"
    con = connect(str(path))
    _night(con, "n1", 1.0, {"gpu-01": 8, "gpu-02": 8})
    _night(con, "n2", 2.0, {"gpu-01": 7, "gpu-02": 8})
    con.commit()
    assert (most_gpus(con, "gpu-01"), most_gpus(con, "gpu-02"), most_gpus(con, "gpu-03")) == (8, 8, None)
    con.close()
    runs = EarlierRuns(str(path))
    assert runs.most_gpus("gpu-01") == 8 and runs.most_gpus("new-host") is None
    runs.close()


def test_no_readable_history_knows_nothing(tmp_path):
    assert EarlierRuns(None).most_gpus("gpu-01") is None  # --history none
    assert EarlierRuns(str(tmp_path / "missing.sqlite")).most_gpus("gpu-01") is None
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database" * 100)
    runs = EarlierRuns(str(junk))
    assert runs.most_gpus("gpu-01") is None and runs.most_gpus("gpu-02") is None
    assert not junk.with_name("junk.sqlite-wal").exists()  # read only: nothing written beside it


def _gpu_night(con, run_id: str, started: float, host: str, serials: list[str]) -> None:
    figs = [{"host": host, "gpu": None, "check": "gpu_count", "value": len(serials), "unit": None, "verdict": "pass"}]
    figs += [{"host": host, "gpu": i, "serial": s, "check": "temp_c", "value": 40, "unit": "C", "verdict": "pass"}
             for i, s in enumerate(serials)]
    record_run(con, {"run_id": run_id, "started": started, "inventory": "fleet.ini", "profile": "standard",
                     "limit": None, "report_dir": "/r", "verdict": "PASS"}, [], figs, {host: "PASS"})


def test_a_host_name_reused_for_another_machine_is_no_evidence_of_this_one(tmp_path):
    """gpu-01 showed 8 GPUs in a run: evidence for the machine whose GPUs carried those serials (7 of them left),
    none for another machine under the same name (other serials), nor where no serial is readable now."""
    con = connect(str(tmp_path / "history.sqlite"))
    old = [f"16500000000{i}" for i in range(8)]
    _gpu_night(con, "n1", 1.0, "gpu-01", old)
    _gpu_night(con, "n2", 2.0, "gpu-02", [f"17700000000{i}" for i in range(4)])
    con.commit()
    assert most_gpus(con, "gpu-01", old[:7]) == 8  # the same machine, one GPU gone
    assert most_gpus(con, "gpu-01", [f"19900000000{i}" for i in range(7)]) is None  # the name, another machine
    assert most_gpus(con, "gpu-01", []) is None and most_gpus(con, "gpu-01") == 8
    assert most_gpus(con, "gpu-01", ["17700000000" + "0"]) is None  # gpu-02's GPU under gpu-01: not this host's run
    con.close()
    runs = EarlierRuns(str(tmp_path / "history.sqlite"))
    assert runs.most_gpus("gpu-01", old[:7]) == 8 and runs.most_gpus("gpu-01", ["x"]) is None
    runs.close()
