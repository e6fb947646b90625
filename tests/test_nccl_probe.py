"""The intra-node all-reduce probe (gpuaccept/probes/nccl_allreduce.py) and its table (gpuaccept/judging/nccl_table.py).

End to end on the CPU: the probe runs as a real subprocess with the gloo backend and real worker processes;
a hang and a death are caused from outside (SIGSTOP / SIGKILL to one worker found under /proc), a taken port by
a real listening socket. The NCCL log parser is fed the real INFO lines captured on a 2xH200 node.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuaccept.judging import nccl_table
from gpuaccept.judging.nccl_table import busbw, format_table, parse_table, row_at
from process_helpers import LOADED_SLACK_S

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "gpuaccept" / "probes" / "nccl_allreduce.py"
H200_CAPTURE = Path(__file__).resolve().parent / "data" / "nccl-info-h200x2.log"
KIB = 1024
SMALL = {"backend": "gloo", "min_bytes": KIB, "max_bytes": KIB * KIB, "factor": 4, "iters": 5, "warmup": 2}

sys.path.insert(0, str(PROBE.parent))
import _nccl  # noqa: E402  (node-side modules: they import `_probe` as a top-level module)
import _probe  # noqa: E402
import _nccl_log  # noqa: E402
import _supervisor  # noqa: E402
import nccl_allreduce as probe  # noqa: E402


def run_probe(args: dict, env: dict | None = None, timeout: float = 120):
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.run([sys.executable, str(PROBE), json.dumps(args)], capture_output=True, text=True,
                       timeout=timeout, env=full_env)
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, f"stdout must be one JSON line, got {p.stdout!r}; stderr {p.stderr[-2000:]}"
    return p.returncode, json.loads(lines[0]), p.stderr


def check_rows(doc: dict, n: int, sizes: list[int], elsize: int) -> None:
    assert [r["bytes"] for r in doc["rows"]] == sizes
    for r in doc["rows"]:
        assert r["count"] == r["bytes"] // elsize
        assert r["redop"] == "sum"
        for mode in ("oop", "ip"):
            t = r[f"{mode}_time_us"] * 1e-6
            assert t > 0
            assert math.isclose(r[f"{mode}_algbw_gbps"], r["bytes"] / 1e9 / t, rel_tol=1e-3, abs_tol=2e-6)
            assert math.isclose(r[f"{mode}_busbw_gbps"], r[f"{mode}_algbw_gbps"] * 2 * (n - 1) / n,
                                rel_tol=1e-5, abs_tol=2e-6)
            assert r[f"{mode}_wrong"] == 0
    assert doc["wrong_total"] == 0
    vals = [r[k] for r in doc["rows"] for k in ("oop_busbw_gbps", "ip_busbw_gbps")]
    assert math.isclose(doc["avg_busbw_gbps"], sum(vals) / len(vals), rel_tol=1e-5, abs_tol=1e-6)


# ------------------------------------------------------------------------------------------ end to end, gloo

@pytest.mark.parametrize("n, dtype, elsize, type_name", [(2, "float32", 4, "float"), (3, "bfloat16", 2, "bfloat16")])
def test_gloo_allreduce_end_to_end(n, dtype, elsize, type_name):
    env = {"NCCL_NVLS_ENABLE": "0"} if n == 2 else {}
    drop = [] if n == 2 else ["NCCL_NVLS_ENABLE"]
    args = dict(SMALL, world_size=n, dtype=dtype, env={"NCCL_NVLS_ENABLE": "1", "NCCL_ALGO": "Ring"})
    full_env = {k: v for k, v in os.environ.items() if k not in drop}
    full_env.update(env)
    p = subprocess.run([sys.executable, str(PROBE), json.dumps(args)], capture_output=True, text=True,
                       timeout=120, env=full_env)
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert doc["backend"] == "gloo" and doc["world_size"] == n and doc["dtype"] == dtype
    assert doc["nccl_version"] is None and doc["transports"] == {} and doc["algos"] == []
    check_rows(doc, n, [KIB * 4 ** i for i in range(6)], elsize)
    assert {r["type"] for r in doc["rows"]} == {type_name}
    assert doc["hostname"] == socket.gethostname()
    assert doc["rendezvous_attempts"] == 1
    # a protected variable is passed through as found (0 here), or left unset; `env` cannot set it to 1
    assert doc["worker_env"].get("NCCL_NVLS_ENABLE") == ("0" if n == 2 else None)
    assert any("NCCL_NVLS_ENABLE=1 ignored" in note for note in doc["notes"])
    assert doc["worker_env"]["NCCL_ALGO"] == "Ring"
    assert doc["worker_env"]["NCCL_DEBUG"] == "INFO"
    table = format_table(doc)
    assert len(parse_table(table)) == 6


def test_world_size_one():
    rc, doc, err = run_probe(dict(SMALL, world_size=1, max_bytes=16 * KIB))
    assert rc == 0, err[-3000:]
    assert doc["world_size"] == 1
    for r in doc["rows"]:
        assert r["oop_algbw_gbps"] > 0 and r["ip_algbw_gbps"] > 0
        assert r["oop_busbw_gbps"] == 0 and r["ip_busbw_gbps"] == 0
        assert r["oop_wrong"] == 0 and r["ip_wrong"] == 0
    assert any("nothing to reduce" in note for note in doc["notes"])
    assert doc["avg_busbw_gbps"] == 0


def test_copy_oop_method():
    rc, doc, err = run_probe(dict(SMALL, world_size=2, max_bytes=16 * KIB, oop="copy"))
    assert rc == 0, err[-3000:]
    assert doc["oop_method"].startswith("recv.copy_")
    check_rows(doc, 2, [KIB, 4 * KIB, 16 * KIB], 4)


def test_bad_arguments_fail_cleanly():
    rc, doc, _ = run_probe({"backend": "gloo", "dtype": "int8"})
    assert rc == 1 and doc["failed"] and "dtype" in doc["msg"]
    rc, doc, _ = run_probe({"backend": "gloo", "factor": 1, "min_bytes": 1024, "max_bytes": 4096})
    assert rc == 1 and "factor" in doc["msg"]
    rc, doc, _ = run_probe({"backend": "gloo", "bogus": 1})
    assert rc == 1 and "unknown argument" in doc["msg"]


# ------------------------------------------------------------------------------------ hang, death, port in use

def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "gone"


def find_workers(probe_pid: int) -> dict[int, int]:
    """{rank: pid} of the probe's worker children (argv: python nccl_allreduce.py --worker '<json>')."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit() or _ppid(int(d)) != probe_pid:
            continue
        argv = _cmdline(int(d))
        if len(argv) >= 4 and argv[1].endswith("nccl_allreduce.py") and argv[2] == "--worker":
            found[json.loads(argv[3])["rank"]] = int(d)
    return found


def processes_with(marker: str) -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit() and any(marker in a for a in _cmdline(int(d)))]


def _start_and_hit(args: dict, rank: int, sig: int, n: int, probe: Path = PROBE, env: dict | None = None):
    """Start the probe, wait for its n workers, send ``sig`` to rank ``rank``; return (proc, workers, marker)."""
    p = subprocess.Popen([sys.executable, str(probe), json.dumps(args)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    t0 = time.monotonic()
    workers: dict[int, int] = {}
    while len(workers) < n and time.monotonic() - t0 < 120:
        workers = find_workers(p.pid)
        time.sleep(0.01)
    assert len(workers) == n, f"workers not found: {workers}"
    os.kill(workers[rank], sig)
    spec = json.loads(_cmdline(workers[rank])[3]) if sig != signal.SIGKILL else None
    marker = os.path.dirname(spec["phase_path"]) if spec else None
    return p, workers, marker, t0


def _until_gone(workers: dict[int, int], within: float = 60) -> None:
    """Wait (``within`` s at most) until none of ``workers`` is a live worker; the caller asserts it."""
    end = time.monotonic() + within
    while time.monotonic() < end and any("--worker" in _cmdline(pid) for pid in workers.values()):
        time.sleep(0.05)


def _cleanup(workers: dict[int, int]) -> None:
    for pid in workers.values():  # only if the probe failed to: never leave a stopped process behind
        if "--worker" in _cmdline(pid):
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)


def test_hung_rank_is_killed_at_deadline():
    deadline = 10
    args = dict(SMALL, world_size=2, deadline_s=deadline, timeout_s=300, iters=50)
    p, workers, marker, t0 = _start_and_hit(args, 1, signal.SIGSTOP, 2)
    try:
        out, err = p.communicate(timeout=deadline + 120)
        elapsed = time.monotonic() - t0
        assert p.returncode == 1, out + err[-3000:]
        doc = json.loads(out.strip().splitlines()[-1])
        assert doc["failed"] is True
        assert doc["msg"].startswith("all-reduce hung: ranks [0, 1] did not finish within 10s; killed all ranks")
        assert "slowest: rank 1 in '" in doc["msg"] and "(process stopped)" in doc["msg"]
        assert elapsed < deadline + LOADED_SLACK_S  # killed at its deadline, not at its 300 s timeout
        _until_gone(workers)
        for pid in workers.values():
            assert "--worker" not in _cmdline(pid), f"worker {pid} left behind"
        assert processes_with(marker) == []
    finally:
        if p.poll() is None:
            p.kill()
        _cleanup(workers)


def test_dead_rank_fails_fast_and_kills_the_others():
    args = dict(SMALL, world_size=3, deadline_s=120, timeout_s=300)
    p, workers, _, t0 = _start_and_hit(args, 1, signal.SIGKILL, 3)
    try:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 1, out + err[-3000:]
        doc = json.loads(out.strip().splitlines()[-1])
        assert doc["msg"].startswith("rank 1 exited with rc -9 (SIGKILL): "), doc["msg"]
        assert time.monotonic() - t0 < 60  # fast: not at its 120 s deadline
        _until_gone(workers)
        for pid in workers.values():
            assert "--worker" not in _cmdline(pid), f"worker {pid} left behind"
    finally:
        if p.poll() is None:
            p.kill()
        _cleanup(workers)


def test_terminated_probe_kills_its_ranks():
    p, workers, _, _ = _start_and_hit(dict(SMALL, world_size=2, iters=50), 0, signal.SIGCONT, 2)
    try:
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
        assert p.returncode == 1, out + err[-3000:]
        assert json.loads(out.strip().splitlines()[-1])["msg"] == "probe terminated by SIGTERM; killed all ranks"
        _until_gone(workers)
        assert all("--worker" not in _cmdline(pid) for pid in workers.values())
    finally:
        if p.poll() is None:
            p.kill()
        _cleanup(workers)


def test_workers_die_with_a_killed_probe(tmp_path):
    """SIGKILL leaves the probe no chance to clean up: PR_SET_PDEATHSIG must take the workers down, and its
    scratch files (rendezvous, rank logs) are in the shipped folder the agent removes, none in $TMPDIR."""
    shipped, tmpdir = tmp_path / "gpuaccept.0123456789ab", tmp_path / "tmp"
    shutil.copytree(PROBE.parent, shipped, ignore=shutil.ignore_patterns("__pycache__"))
    tmpdir.mkdir()
    p, workers, _, _ = _start_and_hit(dict(SMALL, world_size=2, iters=50), 0, signal.SIGCONT, 2,
                                      probe=shipped / PROBE.name, env={**os.environ, "TMPDIR": str(tmpdir)})
    try:
        time.sleep(0.5)
        p.kill()
        p.communicate(timeout=30)
        _until_gone(workers)
        assert all("--worker" not in _cmdline(pid) for pid in workers.values())
        assert list(tmpdir.iterdir()) == []
        assert [d.name[:len("gpuaccept-allreduce-")] for d in shipped.iterdir() if d.is_dir()
                and d.name != "__pycache__"] == ["gpuaccept-allreduce-"]
    finally:
        _cleanup(workers)


def test_the_probe_and_its_ranks_run_under_the_probes_name():
    """The probe (_probe.run) and its ranks (_supervisor.worker_main) show the kernel the name PROCESS_NAME (what the
    driver's Xid lines carry); the ranks' command lines stay ``nccl_allreduce.py --worker`` (what pkill -f matches)."""
    p, workers, _, _ = _start_and_hit(dict(SMALL, world_size=2, iters=50), 0, signal.SIGCONT, 2)
    try:
        names, end = {}, time.monotonic() + 60
        while time.monotonic() < end and set(names.values()) != {_probe.PROCESS_NAME}:  # seen before it names itself
            names = {q: _comm(q) for q in [p.pid, *workers.values()]}
        assert set(names.values()) == {_probe.PROCESS_NAME} and len(names) == 3, names
        assert all(_cmdline(pid)[2] == "--worker" for pid in workers.values())
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, out + err[-3000:]
    finally:
        if p.poll() is None:
            p.kill()
        _cleanup(workers)


def test_port_in_use_is_retried_on_another():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        rc, doc, err = run_probe(dict(SMALL, world_size=2, max_bytes=4 * KIB, master_port=taken, deadline_s=90))
    assert rc == 0, err[-3000:]
    assert doc["master_port"] != taken
    assert doc["rendezvous_attempts"] == 2
    assert any(f"port {taken} in use" in note for note in doc["notes"])
    check_rows(doc, 2, [KIB, 4 * KIB], 4)


# --------------------------------------------------------------------------------------- pure: probe helpers

def test_sweep_sizes():
    assert probe.sweep_sizes(1 << 20, 4 << 30, 4) == [(1 << 20) * 4 ** i for i in range(7)]
    assert probe.sweep_sizes(1024, 1024, 4) == [1024]
    assert probe.sweep_sizes(1000, 5000, 2) == [1000, 2000, 4000]
    with pytest.raises(ValueError):
        probe.sweep_sizes(1024, 4096, 1)


def test_make_row_arithmetic():
    r = probe.make_row(1 << 20, 1 << 18, "float", 2, 22.5e-6, 22.0e-6, 0, 0, True)
    assert math.isclose(r["oop_algbw_gbps"], (1 << 20) / 1e9 / 22.5e-6, rel_tol=1e-6)
    assert r["oop_busbw_gbps"] == r["oop_algbw_gbps"]  # n=2: factor 1
    r8 = probe.make_row(1 << 30, 1 << 28, "float", 8, 0.01, 0.01, 0, 0, False)
    assert math.isclose(r8["ip_busbw_gbps"], r8["ip_algbw_gbps"] * 1.75, rel_tol=1e-6)
    assert probe.make_row(4096, 1024, "float", 1, 1e-5, 1e-5, 0, 0, False)["ip_busbw_gbps"] == 0


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [1, 2, 3, 8, 72])
def test_pattern_sums_are_exact(dtype, n):
    m, scaled, total = probe.pattern_params(n, dtype)
    assert m >= 2 and total * (m - 1) <= probe.DTYPES[dtype][2]
    assert total == (n * (n + 1) // 2 if scaled else n)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_count_wrong_catches_corruption(dtype):
    torch = pytest.importorskip("torch")
    n, count = 4, 1000
    dt = getattr(torch, dtype)
    bufs = [torch.empty(count, dtype=dt) for _ in range(n)]
    for r, b in enumerate(bufs):
        probe.fill_pattern(b, r, n, dtype)
    acc = bufs[0].clone()
    for b in bufs[1:]:  # reduce in the dtype, in rank order (any order is exact by construction)
        acc += b
    assert probe.count_wrong(acc, n, dtype) == 0
    bad = acc.clone()
    bad[0] += 1
    bad[500] = float("nan")
    bad[999] = -bad[999] - 1
    assert probe.count_wrong(bad, n, dtype) == 3
    assert probe.count_wrong(bufs[1], n, dtype) > 0  # one rank's input is not the sum


def test_worker_env_keeps_protected_and_sets_logging():
    notes: list[str] = []
    base = {"NCCL_NVLS_ENABLE": "0", "PATH": "/bin", "NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "/tmp/x"}
    env = probe.worker_env(base, {"NCCL_NVLS_ENABLE": "1", "NCCL_ALGO": "Ring"}, notes)
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["NCCL_ALGO"] == "Ring" and env["PATH"] == "/bin"
    assert env["NCCL_DEBUG"] == "INFO" and "INIT" in env["NCCL_DEBUG_SUBSYS"]
    assert "NCCL_DEBUG_FILE" not in env and len(notes) == 2
    assert "NCCL_NVLS_ENABLE" not in probe.worker_env({"PATH": "/bin"}, {}, [])
    assert "NCCL_NVLS_ENABLE" not in probe.worker_env({"PATH": "/bin"}, {"NCCL_NVLS_ENABLE": "1"}, [])
    env = probe.worker_env({"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}, {"TORCH_SYMM_MEM_DISABLE_MULTICAST": "0"}, [])
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"


def test_last_line_and_addr_in_use():
    text = "x NCCL INFO foo\nTraceback...\nRuntimeError: boom\nvm:1:1 [0] NCCL INFO bar\n\n"
    assert _supervisor.last_line(text) == "RuntimeError: boom"
    assert _supervisor.last_line("") == "(no output)"
    msg = ("The server socket has failed to listen on any local network address. port: 29500, useIpv6: false, "
           "code: -98, name: EADDRINUSE, message: address already in use")
    assert _supervisor.is_addr_in_use(msg) and not _supervisor.is_addr_in_use("Connection reset by peer")


# ---------------------------------------------------------------------------------------- NCCL log parsing

def test_parse_real_h200_nccl_lines():
    lines = H200_CAPTURE.read_text().splitlines()
    nccl_lines = [ln for ln in lines if "NCCL INFO" in ln]
    assert len(nccl_lines) == 40
    got = _nccl_log.parse_nccl_log(lines)
    # rank 0 printed channels 00..13, rank 1 channels 00..12 before the capture was cut
    assert got["transports"] == {"P2P/CUMEM": 27}
    assert got["transport_classes"] == {"P2P": 27}
    assert got["nccl_network"] == "Socket"
    assert got["nccl_version"] is None  # not in the captured lines
    assert got["algos"] == []


def test_parse_nccl_version_tuning_and_network_transports():
    lines = [
        "gpu07:720:720 [0] NCCL INFO NCCL version 2.28.9+cuda13.0",
        "gpu07:721:721 [1] NCCL INFO NCCL version 2.28.9+cuda13.0",
        "gpu07:720:801 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "gpu07:720:801 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "gpu07:720:801 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
        "gpu07:720:801 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0",
        "gpu07:720:801 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA",
        "gpu07:720:801 [0] NCCL INFO Channel 00/24 : 0 1",
        "gpu07:720:720 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..23}",
        "gpu07:720:720 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..23}",
        "gpu07:720:720 [0] NCCL INFO ReduceScatter: 1048576 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..7}",
        "gpu07:720:720 [0] NCCL INFO Using network IB",
        "some unrelated line",
    ]
    got = _nccl_log.parse_nccl_log(lines)
    assert got["nccl_version"] == "2.28.9" and got["nccl_version_full"] == "2.28.9+cuda13.0"
    assert got["transports"] == {"P2P/CUMEM/read": 2, "SHM/direct/direct": 1, "NET/Socket/0": 1,
                                 "NET/IB/0/GDRDMA": 1}
    assert got["transport_classes"] == {"P2P": 2, "SHM": 1, "NET/Socket": 1, "NET/IB": 1}
    assert got["algos"] == [{"coll": "AllReduce", "bytes": 1048576, "algo": "RING", "proto": "LL128"},
                            {"coll": "ReduceScatter", "bytes": 1048576, "algo": "RING", "proto": "SIMPLE"}]
    assert got["nccl_network"] == "IB"


# -------------------------------------------------------------------------------------------- nccl_table

def _doc():
    rows = []
    for nbytes, t_us, wrong in ((1 << 20, 22.53, 0), (1 << 28, 894.7, 0), (1 << 32, 25040.0, None)):
        alg = nccl_table.algbw(nbytes, t_us * 1e-6)
        row = {"bytes": nbytes, "count": nbytes // 4, "type": "float", "redop": "sum"}
        for mode in ("oop", "ip"):
            row.update({f"{mode}_time_us": t_us, f"{mode}_algbw_gbps": alg, f"{mode}_busbw_gbps": busbw(alg, 2),
                        f"{mode}_wrong": wrong})
        rows.append(row)
    return {"rows": rows, "wrong_total": 0, "avg_busbw_gbps": 171.25}


def test_format_table_layout():
    lines = format_table(_doc()).splitlines()
    assert lines[1] == ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time"
                        "   algbw   busbw #wrong")
    assert lines[2] == ("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)"
                        "  (GB/s)  (GB/s)")
    assert lines[0].startswith("#") and "out-of-place" in lines[0] and lines[0].endswith("in-place")
    assert lines[3] == ("     1048576        262144     float     sum      -1    22.53   46.54   46.54      0"
                        "    22.53   46.54   46.54      0")
    assert lines[4] == ("   268435456      67108864     float     sum      -1    894.7  300.03  300.03      0"
                        "    894.7  300.03  300.03      0")
    assert lines[5] == ("  4294967296    1073741824     float     sum      -1    25040  171.52  171.52    N/A"
                        "    25040  171.52  171.52    N/A")
    assert lines[6:] == ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 171.25", "#"]
    # the columns line up under the header's right edges, as in all_reduce_perf
    for col in ("size", "count", "type", "redop", "root"):
        end = lines[1].index(col) + len(col)
        assert lines[3][end - 1] != " " and (end == len(lines[3]) or lines[3][end] == " ")


def test_parse_table_round_trip_and_nccl_tests_output():
    rows = parse_table(format_table(_doc()))
    assert [r["bytes"] for r in rows] == [1 << 20, 1 << 28, 1 << 32]
    assert rows[2]["ip_wrong"] is None and rows[0]["oop_busbw_gbps"] == 46.54
    real = """# nThread 1 nGpus 2 minBytes 1048576 maxBytes 4294967296 step: 4(factor) warmup iters: 5 iters: 20
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
     1048576        262144     float     sum      -1    22.55   46.50   46.50      0    22.31   47.00   47.00      0
gpu07:720:720 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 18000 - Destroy COMPLETE
# Avg bus bandwidth    : 46.75
"""
    assert parse_table(real) == [{"bytes": 1048576, "count": 262144, "type": "float", "redop": "sum",
                                  "oop_time_us": 22.55, "oop_algbw_gbps": 46.5, "oop_busbw_gbps": 46.5,
                                  "oop_wrong": 0, "ip_time_us": 22.31, "ip_algbw_gbps": 47.0,
                                  "ip_busbw_gbps": 47.0, "ip_wrong": 0}]


def test_bandwidth_helpers():
    assert nccl_table.algbw(1 << 20, 1e-3) == (1 << 20) / 1e9 / 1e-3
    assert busbw(10.0, 1) == 0 and busbw(10.0, 2) == 10.0 and busbw(10.0, 4) == 15.0 and busbw(8.0, 8) == 14.0
    with pytest.raises(ValueError):
        nccl_table.algbw(1, 0)
    with pytest.raises(ValueError):
        busbw(1.0, 0)


def test_row_at():
    doc = _doc()
    assert row_at(doc, 1 << 20)["bytes"] == 1 << 20  # exact
    assert row_at(doc, (1 << 28) + 5)["bytes"] == 1 << 28  # largest below
    assert row_at(doc, 1 << 40)["bytes"] == 1 << 32
    with pytest.raises(nccl_table.RowNotFound, match="at or below 1024 B"):
        row_at(doc, 1024)
    with pytest.raises(nccl_table.RowNotFound):
        row_at({"rows": []}, 1 << 20)


def test_nccl_env_lines_and_algos_per_row():
    lines = [
        "gpu07:720:720 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.",
        "gpu07:720:720 [0] NCCL INFO NCCL_DEBUG_SUBSYS set by environment to INIT,GRAPH,ENV,TUNING.",
        "gpu07:720:720 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..23}",
        "gpu07:720:720 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..23}",
        "gpu07:720:720 [0] NCCL INFO ReduceScatter: 524288 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..7}",
        "gpu07:720:720 [0] NCCL INFO AllGather: 524288 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..7}",
    ]
    got = _nccl_log.parse_nccl_log(lines)
    assert got["nccl_env_seen"] == {"NCCL_NVLS_ENABLE": "0", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,ENV,TUNING"}
    assert _nccl_log.algos_for(got["algos"], 1 << 20, 2, 4, "rs_ag") == ("RING/SIMPLE+RING/LL128", "RING/LL128+TREE/LL")
    assert _nccl_log.algos_for(got["algos"], 1 << 20, 2, 4, "copy") == ("RING/LL128+TREE/LL", "RING/LL128+TREE/LL")
    assert _nccl_log.algos_for(got["algos"], 1 << 22, 2, 4, "rs_ag") == (None, None)


# ------------------------------------------------------------------------------- api nccl: pure ctypes parts

def test_nccl_dtype_enum_matches_nccl_h():
    assert _nccl.nccl_dtype_enum("float32") == 7  # ncclFloat32
    assert _nccl.nccl_dtype_enum("float16") == 6  # ncclFloat16
    assert _nccl.nccl_dtype_enum("bfloat16") == 9  # ncclBfloat16
    assert set(_nccl.NCCL_DTYPE) == set(probe.DTYPES)
    assert _nccl.NCCL_SUM == 0 and _nccl.NCCL_UNIQUE_ID_BYTES == 128
    with pytest.raises(ValueError):
        _nccl.nccl_dtype_enum("int8")


def test_nccl_version_string():
    assert _nccl.nccl_version_string(22809) == "2.28.9"
    assert _nccl.nccl_version_string(22803) == "2.28.3"
    assert _nccl.nccl_version_string(21903) == "2.19.3"
    assert _nccl.nccl_version_string(2708) == "2.7.8"  # old encoding, before 2.9


def test_nccl_paths_from_maps(tmp_path):
    maps = (
        "7f00-7f01 r--p 00000000 08:01 1 /venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2\n"
        "7f01-7f02 r-xp 00001000 08:01 1 /venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2\n"
        "7f02-7f03 r--p 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libnccl-net.so\n"
        "7f03-7f04 rw-p 00000000 00:00 0 \n"
        "7f04-7f05 r--p 00000000 08:01 3 /opt/x/libnccl.so.2.28.9 (deleted)\n"
        "7ffd-7ffe rw-p 00000000 00:00 0                          [stack]\n"
    )
    assert _nccl.nccl_paths_from_maps(maps) == [
        "/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2", "/opt/x/libnccl.so.2.28.9"]
    assert _nccl.nccl_paths_from_maps("") == []
    wheel = tmp_path / "nvidia" / "nccl" / "lib"
    wheel.mkdir(parents=True)
    (wheel / "libnccl.so.2").write_bytes(b"")
    cands = _nccl.nccl_library_candidates(maps, [str(tmp_path), "/nonexistent"])
    assert cands == ["/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2", "/opt/x/libnccl.so.2.28.9",
                     str(wheel / "libnccl.so.2"), "libnccl.so.2"]
    assert _nccl.nccl_library_candidates("", []) == ["libnccl.so.2"]


def test_load_nccl_reports_missing_library_and_symbols():
    lib, errors = _nccl.load_nccl(["/nonexistent/libnccl.so.2"])
    assert lib is None and len(errors) == 1 and "/nonexistent/libnccl.so.2" in errors[0]
    import ctypes.util
    libc = ctypes.util.find_library("c")
    if libc:  # a real library without NCCL's symbols
        lib, errors = _nccl.load_nccl([libc])
        assert lib is None and "symbol ncclGetVersion not found" in errors[0]


def test_api_arguments_and_nccl_without_cuda_fail_cleanly():
    rc, doc, _ = run_probe({"backend": "gloo", "api": "nccl"})
    assert rc == 1 and "api 'nccl' needs backend 'nccl'" in doc["msg"]
    rc, doc, _ = run_probe({"backend": "gloo", "api": "bogus"})
    assert rc == 1 and "api must be" in doc["msg"]
    rc, doc, _ = run_probe({"backend": "gloo", "timer": "wall"})
    assert rc == 1 and "timer must be" in doc["msg"]
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    for args in ({"backend": "nccl"}, {"backend": "nccl", "world_size": 2}):
        rc, doc, err = run_probe(args)
        assert rc == 1 and doc["failed"] and "torch sees no GPU" in doc["msg"], (doc, err[-2000:])
        assert "\n" not in doc["msg"]


def test_gloo_document_says_api_torch():
    rc, doc, err = run_probe(dict(SMALL, world_size=2, max_bytes=4 * KIB))
    assert rc == 0, err[-3000:]
    assert doc["api"] == "torch" and doc["nccl_library"] is None
    for r in doc["rows"]:
        assert len(r["oop_rank_time_us"]) == 2 and len(r["ip_rank_time_us"]) == 2
        assert math.isclose(r["ip_time_us"], max(r["ip_rank_time_us"]), rel_tol=1e-3, abs_tol=1e-3)


# ------------------------------------------------------------------- one fact on both sides of the SSH line

@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 16, 72, 1024])
def test_controller_busbw_follows_the_node_copy(n):
    """The node's ``busbw_factor`` is the source; the controller's ``nccl_table.busbw`` must agree with it
    for every world size (nccl-tests src/all_reduce.cu AllReduceGetBw: 2(n-1)/n for every algorithm)."""
    assert busbw(10.0, n) == pytest.approx(10.0 * probe.busbw_factor(n), rel=1e-12)
    row = probe.make_row(1 << 30, 1 << 28, "float", n, 0.01, 0.01, 0, 0, False)
    assert row["ip_busbw_gbps"] == pytest.approx(busbw(row["ip_algbw_gbps"], n), rel=1e-5, abs=1e-6)


# ----------------------------------------------------------------- multi-node mode toward an IPv6 master

def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_ipv6_master_interface_is_found_and_recorded():
    """A one-host world in multi-node mode whose rendezvous is the IPv6 loopback: the probe finds the
    interface toward it (lo) and reports it with the local address; the world check passes."""
    if not _has_ipv6_loopback():
        pytest.skip("no IPv6 loopback on this machine (::1 cannot be bound)")
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::1", 0))
        port = s.getsockname()[1]
    args = dict(SMALL, max_bytes=4 * KIB, nnodes=1, node_rank=0, ranks_per_node=2, master_addr="::1",
                master_port=port, marker="gpuaccept-ar-ipv6test", host="h1", hosts=["h1"], deadline_s=90)
    rc, doc, err = run_probe(args)
    assert rc == 0, err[-3000:]
    assert doc["ok"] is True, doc.get("error")
    assert doc["local_address"] == "::1" and doc["local_interface"] == "lo" and doc["gloo_ifname"] == "lo"
    assert doc["hosts"] == ["h1"] and doc["world_size"] == 2 and doc["local_ranks"] == [0, 1]
    assert [w["host"] for w in doc["world"]] == ["h1", "h1"]
    assert not any("no interface found" in note for note in doc["notes"])
