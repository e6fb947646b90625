"""A host unreachable in the run before too is no blip (gpuaccept.judging.unreachable): the pure rule, the
history's count of runs in a row (gpuaccept.reporting.history.earlier.unreachable_runs, real SQLite), and two
real runs against a host whose SSH port takes the connection and never answers."""
from __future__ import annotations

import json
import socket

from project_helpers import make_project, run_pytest

from gpuaccept.causes import Cause
from gpuaccept.judging import actions
from gpuaccept.judging.unreachable import AGAIN, again
from gpuaccept.reporting import history
from gpuaccept.reporting.history.earlier import unreachable_runs


def test_again_only_after_an_earlier_run_could_not_reach_it_either():
    gone = Cause("connectivity", "unreachable", "n1")
    assert again(gone, lambda h: (0, None)) is gone  # the first time: a blip until shown otherwise
    twice = again(gone, lambda h: (1, 1764986400.0) if h == "n1" else (0, None))
    assert (twice.kind, twice.cls, twice.host) == (AGAIN, "connectivity", "n1")
    assert twice.evidence == {"runs": 2, "since": "2025-12-06 02:00 UTC"}
    other = Cause("connectivity", "ssh_refused", "n1", evidence={"port": 22})
    assert again(other, lambda h: (5, 1.0)) is other  # a refused port says more already; it keeps its own row
    asked = []
    assert again(Cause("connectivity", "unreachable"), asked.append).kind == "unreachable" and not asked  # no host
    # the action follows the kind: rerun once, check-network again, never one that takes the node out
    act = actions.for_cause(Cause("connectivity", AGAIN, "n1", evidence={**twice.evidence, "address": "10.0.0.7"}))
    assert act.action == "check-network" and act.cause == "connectivity"
    assert "unreachable in 2 runs in a row (the first at 2025-12-06 02:00 UTC)" in act.reason
    assert act.command.startswith("ping -c 3 10.0.0.7")
    assert actions.for_cause(gone).action == "rerun"


def _run(con, rid, started, tests):
    def cause(h, k):
        return [{"class": "interruption" if k in ("not_run", "interrupted") else "connectivity", "kind": k,
                 "host": h}] if k else None
    history.record_run(con, {"run_id": rid, "started": started, "verdict": "ERROR"},
                       [{"nodeid": f"t::{i}[{h}]", "host": h, "layer": "health", "outcome": o, "causes": cause(h, k)}
                        for i, (h, o, k) in enumerate(tests)], [], {})


def test_history_counts_the_runs_in_a_row_that_could_not_reach_a_host(tmp_path):
    con = history.connect(str(tmp_path / "h.sqlite"))
    _run(con, "r1", 100.0, [("a", "error", "unreachable"), ("b", "passed", None), ("d", "error", "unreachable")])
    _run(con, "r2", 200.0, [("a", "passed", None), ("b", "error", "unreachable")])
    _run(con, "r3", 300.0, [("a", "error", "unreachable"), ("a", "error", "unreachable"),
                            ("b", "error", "unreachable_again"), ("d", "error", "unreachable"), ("d", "error", "not_run")])
    _run(con, "r4", 400.0, [("b", "error", "rendezvous_unreachable"),  # another kind: not "could not reach"
                            ("d", "error", "interrupted"), ("d", "error", "not_run")])  # interrupted: says nothing
    _run(con, "r5", 500.0, [("a", "error", "unreachable_again"), ("c", "error", "unreachable"),
                            ("d", "error", "unreachable_again")])
    # a: r5, r3 (r4 did not select it), then r2 reached it
    assert unreachable_runs(con, "a") == (2, 300.0)
    # b: the newest run with b reached its tests (r4, another cause): none in a row
    assert unreachable_runs(con, "b") == (0, None)
    assert unreachable_runs(con, "c") == (1, 500.0)
    # d: r5, then r4 interrupted before it was reached (passed over, as a killed run is), r3, r1
    assert unreachable_runs(con, "d") == (3, 100.0)
    assert unreachable_runs(con, "never") == (0, None)
    # a run in which the host answered for one test and not the next reached it: not counted
    _run(con, "r6", 600.0, [("c", "failed", None), ("c", "error", "unreachable")])
    assert unreachable_runs(con, "c") == (0, None)
    con.close()


def _silent_port() -> tuple[socket.socket, int]:
    """A loopback port whose connections the kernel accepts and nothing ever answers (no SSH banner)."""
    s = socket.socket()
    s.bind(("127.0.0.71", 0))
    s.listen(16)
    return s, s.getsockname()[1]


def test_a_host_silent_two_runs_in_a_row_reads_check_network_the_second_time(tmp_path):
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    sock, port = _silent_port()
    try:
        # the address in the ssh arguments: the ping names the address connected to, not the inventory name
        inv.write_text(f'[gpu]\nquiet1 ansible_ssh_common_args="-o HostName=127.0.0.71 -p {port}"\n')
        hist = str(tmp_path / "history.sqlite")
        got = []
        for i in range(2):
            rep = tmp_path / f"rep{i}"
            res = run_pytest(tmp_path, "--inventory", str(inv), "-m", "health", "-k", "test_gpu_inventory",
                             "--reports", str(rep), "--history", hist)
            assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
            doc = json.loads((rep / "results.json").read_text())
            (t,) = [t for t in doc["tests"] if t["name"] == "test_gpu_inventory[quiet1]"]
            got.append(t)
            assert "Traceback" not in res.stdout + res.stderr
    finally:
        sock.close()
    first, second = got
    assert [c["kind"] for c in first["causes"]] == ["unreachable"] and first["action"]["action"] == "rerun", first
    assert [c["kind"] for c in second["causes"]] == [AGAIN], second
    assert second["causes"][0]["evidence"]["runs"] == 2 and second["causes"][0]["evidence"]["address"] == "127.0.0.71"
    assert second["action"]["action"] == "check-network" and "2 runs in a row" in second["action"]["reason"]
    assert second["action"]["command"].startswith("ping -c 3 127.0.0.71;"), second["action"]
    assert (tmp_path / "rep1" / "hosts-check-network.txt").read_text() == "quiet1\n"
    assert not (tmp_path / "rep0" / "hosts-check-network.txt").exists()
