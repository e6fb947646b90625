#!/usr/bin/env python3
"""The tight figures behind the tests' bounds in time: how long each promise "at once" or "at its timeout" takes.
Prints a table.

    PYTHONPATH=. python benchmarks/timing_bounds.py [ROUNDS]        # default 3 rounds

The tests (tests/test_transport.py, tests/test_burnin_live.py, tests/test_e2e.py) assert these promises with a
margin that holds on a loaded 2-core machine (tests/process_helpers.LOADED_SLACK_S, and the bounds written in
test_e2e.py); this script measures the figures themselves, with the same real parts: a command killed at its
timeout by the local transport and over a loopback sshd (tests/sshd.py), the node-side watchdog killing a probe
at its deadline, a refused connection, and, end to end (a fresh ``python -m pytest`` on a project laid out by
tests/project_helpers.py), a second SIGTERM aborting a test busy on the controller and a SIGKILLed controller's
probe killed on the node. To see the margin a loaded machine needs, run it beside one busy loop per core::

    python3 -c 'while 1: pass' & python3 -c 'while 1: pass' &  PYTHONPATH=. python benchmarks/timing_bounds.py

Columns: the bound the program promises (s), then min / median / max of the measured seconds over ROUNDS, and
the overshoot of the median over the promise.
"""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from process_helpers import WATCHDOG, FakeHost, host_for, marker, procs_with  # noqa: E402
from project_helpers import make_project  # noqa: E402
from sshd import free_port, start_nodes_with_tmp, start_sshd, write_known_hosts  # noqa: E402

from gpuaccept.errors import CommandTimeout, HostUnreachable  # noqa: E402
sys.path.insert(0, str(REPO / "gpuaccept" / "probes"))  # the watchdog imports its node-side siblings
from _watchdog import CONTROLLER_GONE_CLEAN_S, KILL_GRACE_S  # noqa: E402
from gpuaccept.runner.interrupt import SAME_SIGNAL_S  # noqa: E402
from gpuaccept.transport import get_transport  # noqa: E402

BUSY_SUITE = """
import os, time
import pytest

pytestmark = pytest.mark.nccl


def test_1_busy(node):
    node.run("true")
    open(os.environ["BENCH_BUSY"], "w").close()
    time.sleep(60)
"""

LONG_SUITE = """
import pytest

pytestmark = pytest.mark.nccl


def test_1_long(node, verdicts):
    doc = node.probe("nccl_allreduce", {"backend": "gloo", "world_size": 2, "min_bytes": 4096, "max_bytes": 4096,
                                        "iters": 10 ** 9, "reps": 1, "warmup": 1})
    verdicts.record("wrong_total", doc["wrong_total"], "elements")
"""


def _until(done, within: float = 180.0) -> None:
    end = time.monotonic() + within
    while not done():
        if time.monotonic() > end:
            raise RuntimeError("the event never came")
        time.sleep(0.02)


def timed_out(transport, timeout: float) -> float:
    """Seconds a ``sleep 1000.x`` took to end as CommandTimeout at ``timeout``."""
    t0 = time.monotonic()
    try:
        transport.run(f"sleep {marker()}", timeout=timeout)
    except CommandTimeout:
        return time.monotonic() - t0
    raise RuntimeError("no timeout")


def watchdog_deadline(tmp: Path) -> float:
    """Seconds the watchdog took to kill a 1000 s probe at its 1 s deadline + 0.5 s grace."""
    probe = tmp / "sleeper.py"
    probe.write_text(f"import time\ntime.sleep({marker()})\n")
    t0 = time.monotonic()
    subprocess.run([sys.executable, str(WATCHDOG), "1", "0.5", str(probe)], capture_output=True, timeout=120)
    return time.monotonic() - t0


def refused() -> float:
    t = get_transport(FakeHost(name="ghost", address="127.0.0.9", port=free_port("127.0.0.9"), user="root"),
                      connect_timeout=60)
    t0 = time.monotonic()
    try:
        t.run("true")
    except HostUnreachable:
        return time.monotonic() - t0
    raise RuntimeError("connected")


def second_signal(tmp: Path, address: str) -> float:
    """Seconds from a second SIGTERM (SAME_SIGNAL_S x 3 after the first) to the controller's exit, with a test
    sleeping 60 s on the controller."""
    nodes = start_nodes_with_tmp(tmp, (address,), "b")
    try:
        kh = write_known_hosts(tmp / "kh", nodes)
        inv = make_project(tmp / "proj", nodes, kh, BUSY_SUITE, "test_nccl_busy.py")
        busy = tmp / "busy"
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "--inventory", str(inv), "--known-hosts", kh,
                                 "--reports", str(tmp / "rep"), "-k", "busy"], cwd=tmp / "proj",
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, "BENCH_BUSY": str(busy)})
        _until(busy.exists)
        proc.send_signal(signal.SIGTERM)
        time.sleep(3 * SAME_SIGNAL_S)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        return time.monotonic() - t0
    finally:
        for n in nodes:
            n.stop()


def sigkilled_controller(tmp: Path, address: str, workers: tuple[str, ...] = ()) -> float:
    """Seconds from SIGKILL of the controller (with ``workers``, e.g. ``("-n", "2")``: of xdist's controller,
    its workers left behind) to the node holding no process of the run (agent, probe, ranks)."""
    nodes = start_nodes_with_tmp(tmp, (address,), "k")
    try:
        kh = write_known_hosts(tmp / "kh", nodes)
        inv = make_project(tmp / "proj", nodes, kh, LONG_SUITE, "test_nccl_long.py")
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "--inventory", str(inv), "--known-hosts", kh,
                                 "--reports", str(tmp / "rep"), "-k", "long", "--probe-timeout", "600", *workers],
                                cwd=tmp / "proj", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _until(lambda: len([c for c in procs_with(str(nodes[0].tmp)) if "--worker" in c]) >= 2)
        t0 = time.monotonic()
        proc.kill()
        proc.wait()
        _until(lambda: not procs_with(str(nodes[0].tmp)), 600)
        return time.monotonic() - t0
    finally:
        for n in nodes:
            n.stop()


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    rows: dict[str, tuple[float, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="timing-bounds-") as d:
        base = Path(d)
        node = start_sshd(base / "sshd", address="127.0.0.201")
        try:
            kh = write_known_hosts(base / "kh", [node])
            local = get_transport(FakeHost(name="ctl", address="localhost", connection="local"))
            ssh = get_transport(host_for(node), known_hosts=kh)
            for r in range(rounds):
                cases = [
                    ("local command killed at its 1 s timeout", 1.0, lambda: timed_out(local, 1)),
                    ("ssh command killed at its 1 s timeout", 1.0, lambda: timed_out(ssh, 1)),
                    ("watchdog kills at deadline 1 s + 0.5 s grace", 1.5,
                     lambda: watchdog_deadline(base)),
                    ("refused connection reported (connect timeout 60 s)", 0.0, refused),
                    ("second SIGTERM to controller exit", 0.0,
                     lambda: second_signal(base / f"abort{r}", f"127.0.0.{202 + r % 40}")),
                    (f"SIGKILLed controller: node clean (stdin EOF + {KILL_GRACE_S:g} s grace)", CONTROLLER_GONE_CLEAN_S,
                     lambda: sigkilled_controller(base / f"kill{r}", f"127.0.0.{242 + r % 10}")),
                    ("SIGKILLed controller of -n 2: node clean (its workers notice)", CONTROLLER_GONE_CLEAN_S,
                     lambda: sigkilled_controller(base / f"killn{r}", f"127.0.0.{232 + r % 10}", ("-n", "2"))),
                ]
                for name, promise, fn in cases:
                    rows.setdefault(name, (promise, []))[1].append(fn())
            ssh.close()
        finally:
            node.stop()
    load = os.getloadavg()[0]
    print(f"{rounds} round(s), {os.cpu_count()} cores, load average {load:.1f} at the end\n")
    print("| bound | promise (s) | min (s) | median (s) | max (s) | median over the promise (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, (promise, got) in rows.items():
        med = statistics.median(got)
        print(f"| {name} | {promise:g} | {min(got):.2f} | {med:.2f} | {max(got):.2f} | {med - promise:.2f} |")
    print(json.dumps({name: got for name, (_, got) in rows.items()}), file=sys.stderr)


if __name__ == "__main__":
    main()
