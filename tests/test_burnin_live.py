"""Live progress of a running probe (gpuaccept.transport.progress) through the real transports (a subprocess, a
real sshd on loopback) and the node-side watchdog, the real burn-in probe on gloo/CPU, the progress display
(gpuaccept.plugin.progress.Progress) in and across xdist workers; and burn-in figures as a GPU's history baseline
through real SQLite, from the 2xH200 burn-in capture and the 2xH200 nightly captures (tests/data)."""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuaccept.reporting import history
from gpuaccept.runner import host as node_mod
from gpuaccept.transport import progress as progress_channel
from gpuaccept.runner import progress_relay
from gpuaccept.errors import CommandTimeout, Interrupted
from gpuaccept.config.inventory import load_inventory
from gpuaccept.runner.host import HostRunner
from gpuaccept.transport.progress import ProgressLines, parse, render
from gpuaccept.plugin.progress import Progress
from gpuaccept.transport import cancel_all, get_transport, reset_interruption
from process_helpers import LOADED_SLACK_S, WATCHDOG, FakeHost, assert_gone, marker, wait_started

DATA = Path(__file__).parent / "data"
P = "GPUACCEPT-PROGRESS "


# ------------------------------------------------------------------------------ the line form (pure)

def test_a_progress_line_is_parsed_and_rendered_on_one_line():
    line = (P + json.dumps({"done": 720.4, "total": 3600, "gpus": {"0": {"bf16_tflops": 648.2, "temp_c": 66},
                                                                 "1": {"bf16_tflops": 612.0, "temp_c": 71}}})).encode()
    doc = parse(line)
    assert doc == {"done": 720.4, "total": 3600.0, "gpus": {"0": {"bf16_tflops": 648.2, "temp_c": 66.0},
                                                             "1": {"bf16_tflops": 612.0, "temp_c": 71.0}}}
    assert render("burnin", doc) == "burnin 12/60 min, bf16 612-648 TFLOP/s, max 71 °C"
    assert render("burnin", {"done": 40, "total": 90}) == "burnin 40/90 s"
    assert render("burnin", {"done": 90, "total": 120}) == "burnin 1.5/2.0 min"
    assert render("fio", {"text": "file 3 of 10"}) == "fio, file 3 of 10"


@pytest.mark.parametrize("bad", [
    b"GPUACCEPT-PROGRESS not json",
    b"GPUACCEPT-PROGRESS [1, 2]",
    b"GPUACCEPT-PROGRESS {\"done\": NaN, \"gpus\": {\"0\": {\"bf16_tflops\": \"fast\"}}}",
    b"GPUACCEPT-PROGRESS {\"gpus\": {\"0\": {\"Bad Name!\": 1}}}",
    b"GPUACCEPT-PROGRESS {\"done\": -5}",
    b"GPUACCEPT-PROGRESS {\"done\": 1" + b" " * (progress_channel.MAX_LINE + 10) + b"}",
    b"  GPUACCEPT-PROGRESS {\"done\": 1}",  # not at the start of the line: a log line quoting one
])
def test_a_malformed_progress_line_is_ignored(bad):
    assert parse(bad) is None
    got = []
    ProgressLines(got.append).feed(bad + b"\n")
    assert got == []


def test_text_from_a_node_never_reaches_the_terminal_as_control_characters():
    doc = parse((P + json.dumps({"text": "ok\x1b[2J\x1b]0;owned\x07 done\r\n" + "x" * 500})).encode())
    assert "\x1b" not in doc["text"] and "\x07" not in doc["text"] and "\r" not in doc["text"]
    assert len(doc["text"]) == progress_channel.MAX_TEXT
    lone = parse(b'GPUACCEPT-PROGRESS {"text": "\\u00ff\\ud800"}')  # a lone surrogate: not writable as UTF-8
    assert lone == {"text": "\u00ff?"}
    render("x", lone).encode("utf-8")


def test_lines_split_across_chunks_and_only_the_last_of_a_chunk_is_delivered():
    got = []
    pl = ProgressLines(got.append)
    pl.feed(b"log line\nGPUACCEPT-PROG")
    assert got == []
    pl.feed(b'RESS {"done": 1}\nGPUACCEPT-PROGRESS {"done": 2}\nGPUACCEPT-PROGRESS {"done": 3}\n')
    assert got == [{"done": 3.0}]  # 1 and 2 were already stale when the chunk arrived
    pl.feed(b'GPUACCEPT-PROGRESS {"done": 4}\nGPUACCEPT-PROGRESS {broken\n')
    assert got[-1] == {"done": 4.0}  # the last well-formed one of the chunk


def test_a_flood_without_newlines_costs_a_bounded_buffer():
    got = []
    pl = ProgressLines(got.append)
    for _ in range(64):
        pl.feed(b"x" * (1 << 16))  # 4 MiB of one line
    assert len(pl._tail) <= progress_channel.MAX_LINE
    pl.feed(b'GPUACCEPT-PROGRESS {"done": 9}\nGPUACCEPT-PROGRESS {"done": 10}\n')
    assert got == [{"done": 10.0}]  # the over-long line's end ("...done": 9 on it) is dropped with it


def test_a_callback_that_raises_does_not_stop_the_feed():
    calls = []

    def boom(doc):
        calls.append(doc)
        raise RuntimeError("display broke")
    pl = ProgressLines(boom)
    pl.feed(b'GPUACCEPT-PROGRESS {"done": 1}\n')
    pl.feed(b'GPUACCEPT-PROGRESS {"done": 2}\n')
    assert [d["done"] for d in calls] == [1.0, 2.0]


# ------------------------------------------------------------------------------ through real transports

def _stepper(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in probe that writes a progress line, then waits until the controller's callback has seen it
    (a file the callback creates), three times: it ends only if each line arrived while it ran."""
    gate = tmp_path / "gate"
    p = tmp_path / "stepper.py"
    p.write_text(
        "import json, os, sys, time\n"
        f"gate = {str(gate)!r}\n"
        "for i in range(3):\n"
        "    sys.stderr.write('log before %d\\n' % i)\n"
        "    sys.stderr.write('GPUACCEPT-PROGRESS ' + json.dumps({'done': i, 'total': 3}) + '\\n')\n"
        "    sys.stderr.flush()\n"
        "    end = time.time() + 20\n"
        "    while not os.path.exists(gate + str(i)) and time.time() < end:\n"
        "        time.sleep(0.02)\n"
        "    if not os.path.exists(gate + str(i)):\n"
        "        print(json.dumps({'failed': True, 'msg': 'progress %d never arrived' % i})); sys.exit(1)\n"
        "print(json.dumps({'ok': True}))\n")
    return p, gate


def test_progress_arrives_while_the_probe_runs_under_the_watchdog(transport, tmp_path):
    probe, gate = _stepper(tmp_path)
    got = []

    def seen(doc):
        got.append(doc)
        Path(f"{gate}{int(doc['done'])}").touch()
    r = transport.run(f"exec {sys.executable} {WATCHDOG} --watch-stdin 60 5 {probe}", timeout=60, hold_stdin=True,
                      progress=seen)
    assert r.rc == 0 and json.loads(r.stdout.decode().splitlines()[-1]) == {"ok": True}, r
    assert [d["done"] for d in got] == [0.0, 1.0, 2.0]
    text = r.stderr.decode()  # the whole stderr still comes back, progress lines and logs in order
    assert text.count("GPUACCEPT-PROGRESS ") == 3 and text.index("log before 1") < text.index('{"done": 1')
    assert "__GPUACCEPT_PGID__" not in text


def test_a_flooding_and_malformed_probe_still_returns_all_its_output(transport, tmp_path):
    p = tmp_path / "flood.py"
    p.write_text(
        "import sys, os\n"
        "e = sys.stderr.buffer\n"
        "e.write(b'GPUACCEPT-PROGRESS {broken\\n'); e.write(b'GPUACCEPT-PROGRESS [1]\\n')\n"
        "e.write(b'y' * (3 << 20))\n"  # 3 MiB with no newline
        "e.write(b'\\nGPUACCEPT-PROGRESS ' + b'{\"text\": \"' + b'z' * 100000 + b'\"}\\n')\n"
        "e.write(b'GPUACCEPT-PROGRESS {\"done\": 7, \"total\": 8}\\n')\n"
        "e.write(bytes(range(256)) * 4096); e.flush()\n"
        "sys.stdout.write('{\"ok\": 1}\\n')\n")
    got = []
    r = transport.run(f"exec {sys.executable} {WATCHDOG} --watch-stdin 60 5 {p}", timeout=60, hold_stdin=True,
                      progress=got.append)
    assert r.rc == 0 and r.stdout == b'{"ok": 1}\n'
    assert len(r.stderr) > (4 << 20) and r.stderr.startswith(b"GPUACCEPT-PROGRESS {broken\n")
    assert {"done": 7.0, "total": 8.0} in got and all("gpus" not in d for d in got)
    assert not any("text" in d and len(d["text"]) > progress_channel.MAX_TEXT for d in got)
    # the same bytes as without a progress callback
    again = transport.run(f"exec {sys.executable} {WATCHDOG} --watch-stdin 60 5 {p}", timeout=60, hold_stdin=True)
    assert hashlib.sha256(again.stderr).digest() == hashlib.sha256(r.stderr).digest()


def test_timeout_and_interrupt_still_kill_with_a_progress_callback(transport):
    m = marker()
    got = []
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout) as ei:
        transport.run(f"echo started; echo '{P}{{\"done\": 1}}' >&2; sleep {m}", timeout=1.5, progress=got.append)
    # killed at its 1.5 s timeout, not left to sleep its 1000 s: the margin holds on a loaded 2-core machine
    assert time.monotonic() - t0 < 1.5 + LOADED_SLACK_S
    assert ei.value.stdout == b"started\n" and b"GPUACCEPT-PROGRESS" in ei.value.stderr
    assert got == [{"done": 1.0}]
    assert_gone(m)
    m2 = marker()
    threading.Thread(target=lambda: (wait_started(m2, within=120, comm="sleep"), cancel_all("SIGTERM")),
                     daemon=True).start()
    try:
        with pytest.raises(Interrupted):
            transport.run(f"sleep {m2}", timeout=60, progress=got.append)
    finally:
        reset_interruption()
    assert_gone(m2)
    assert transport.run("echo again", progress=got.append).stdout == b"again\n"


def test_a_background_child_holding_stderr_is_a_timeout_as_before(tmp_path):
    """Local transport: stderr drained by its own thread; a child that keeps stderr open after the shell ended
    is waited for until the timeout, as communicate() waits for it without a callback."""
    t = get_transport(FakeHost(name="ctl", address="localhost", connection="local"))
    m = marker()
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout):
        t.run(f"sleep {m} >/dev/null & echo out", timeout=1.5, progress=lambda d: None)
    # waited for until the timeout (not returned when the shell ended), then killed: not left to its 1000 s
    assert 1.4 < time.monotonic() - t0 < 1.5 + LOADED_SLACK_S
    assert_gone(m)


# ------------------------------------------------------------------------------ the real burn-in probe

def _runner(tmp_path: Path, line: str) -> HostRunner:
    inv = tmp_path / "inv.ini"
    inv.write_text("[gpu]\n" + line + "\n")
    host = list(load_inventory(str(inv)).hosts.values())[0]
    kh = str(tmp_path.parent / "kh")
    return HostRunner(host, lambda h: get_transport(h, known_hosts=os.environ.get("GPUACCEPT_TEST_KH", kh)),
                      probe_timeout=120)


@pytest.mark.parametrize("where", ["local", "ssh"])
def test_burnin_probe_progress_reaches_the_hooks_while_it_runs(where, tmp_path, sshd_nodes, known_hosts,
                                                              monkeypatch):
    """The real burn-in probe on two gloo ranks, shipped and run under the watchdog by HostRunner.probe: its
    progress lines reach PROBE_PROGRESS (from the parent only: one line per window round, not one per rank),
    with seconds done, requested and both ranks' bf16 TFLOP/s. (That they arrive while a probe runs, not at its
    end, is held by test_progress_arrives_while_the_probe_runs_under_the_watchdog: a CPU step's length on a
    loaded machine is anybody's guess.)"""
    monkeypatch.setenv("GPUACCEPT_TEST_KH", known_hosts)
    line = ("h1 ansible_connection=local" if where == "local" else sshd_nodes[1].inventory_line("h1"))
    runner = _runner(tmp_path, line)
    got, started = [], []
    hook = lambda host, probe, doc: got.append((time.monotonic(), host, probe, doc))  # noqa: E731
    start_hook = lambda host, probe, timeout: started.append((host, probe))  # noqa: E731
    node_mod.PROBE_PROGRESS.append(hook)
    node_mod.PROBE_STARTED.append(start_hook)
    try:
        doc = runner.probe("burnin", {"device": "cpu", "seconds": 3, "window_s": 0.5, "gpus": 2}, timeout=150)
        ended = time.monotonic()
    finally:
        node_mod.PROBE_PROGRESS.remove(hook)
        node_mod.PROBE_STARTED.remove(start_hook)
        runner.close()
    assert started == [("h1", "burnin")]
    rounds = min(sum(1 for w in doc["windows"] if w["rank"] == r) for r in (0, 1))
    # at most one per window round (lines that arrive in one chunk: the last is shown), never one per rank
    assert 1 <= len(got) <= rounds, (rounds, [g[3] for g in got])
    assert all(h == "h1" and p == "burnin" for _, h, p, _ in got) and got[-1][0] <= ended
    last = got[-1][3]
    assert last["total"] == 3.0 and last["done"] == 3.0  # the last window round: the load's end
    assert set(last["gpus"]) == {"0", "1"} and all(v["bf16_tflops"] > 0 for v in last["gpus"].values())
    assert render("burnin", last).startswith("burnin 3/3 s, bf16 ")


@pytest.mark.parametrize("where", ["local", "ssh"])
def test_an_interrupted_burnin_keeps_the_windows_it_measured(where, tmp_path, sshd_nodes, known_hosts,
                                                             monkeypatch):
    """SIGINT to the controller in the middle of a burn-in (cancel_all, as the signal handler calls it): the
    probe is stopped, and the document it prints as it stops (the windows so far, "interrupted") comes with
    the Interrupted error as ``partial``, and is saved with the run's probe documents. Before: Interrupted
    alone; 50 minutes of a 60-minute burn-in left no figure (found in the seventh trial)."""
    monkeypatch.setenv("GPUACCEPT_TEST_KH", known_hosts)
    line = ("h1 ansible_connection=local" if where == "local" else sshd_nodes[1].inventory_line("h1"))
    runner = _runner(tmp_path, line)
    runner.save_dir = str(tmp_path / "probes")
    windows = threading.Event()
    hook = lambda host, probe, doc: windows.set() if doc.get("done") else None  # noqa: E731
    node_mod.PROBE_PROGRESS.append(hook)
    caught: list = []

    def run():
        try:
            runner.probe("burnin", {"device": "cpu", "seconds": 120, "window_s": 0.5, "gpus": 2}, timeout=300)
        except Interrupted as e:
            caught.append(e)

    t = threading.Thread(target=run)
    t.start()
    try:
        assert windows.wait(90), "no burn-in window within 90 s"
        cancel_all("SIGINT")
        t.join(60)
    finally:
        node_mod.PROBE_PROGRESS.remove(hook)
        reset_interruption()
        runner.close()
    assert not t.is_alive() and len(caught) == 1
    doc = caught[0].partial
    assert doc is not None and doc["interrupted"] in ("SIGTERM", "SIGINT"), (caught[0], caught[0].stdout[-800:],
                                                                              caught[0].stderr[-800:])
    assert {w["rank"] for w in doc["windows"]} == {0, 1} and all(w["bf16_tflops"] > 0 for w in doc["windows"])
    (saved,) = (tmp_path / "probes" / "h1").glob("burnin-*.json")
    assert json.loads(saved.read_text())["doc"]["windows"] == doc["windows"]


# ------------------------------------------------------------------------------ the progress display

def test_the_display_shows_the_probes_progress_instead_of_its_elapsed_time(monkeypatch):
    from gpuaccept.plugin import progress as console
    doc = {"done": 720, "total": 3600, "gpus": {"0": {"bf16_tflops": 612.4, "temp_c": 71},
                                                "1": {"bf16_tflops": 648.0, "temp_c": 64}}}
    p = Progress(io.StringIO(), tty=True, timeout_s=300)
    p.update("gpu07", "burnin", doc)  # nothing running on gpu07: ignored
    assert p.line() == ""
    p.begin("gpu07", "probe burnin", 3900)
    p.begin("gpu08", "probe burnin", 3900)
    p.update("gpu07", "burnin", doc)
    assert p.line() == "hosts 0/2 done · 2 running (slowest: gpu07 burnin 12/60 min, bf16 612-648 TFLOP/s, max 71 °C)"
    p.begin("gpu07", "probe xid_events", 60)  # the next probe: the burn-in's figures are gone
    assert p.line() == "hosts 0/2 done · 2 running (slowest: gpu08 probe burnin 0 s)"
    # plain lines (CI logs): the host's periodic line is its progress
    monkeypatch.setattr(console, "PLAIN_EVERY_S", 0.0)
    monkeypatch.setattr(console, "TTY_EVERY_S", 0.05)
    buf = io.StringIO()
    plain = Progress(buf, tty=False, timeout_s=300)
    plain.begin("gpu07", "probe burnin", 3900)
    plain.update("gpu07", "burnin", doc)
    plain.start()
    end = time.monotonic() + 60  # until the periodic line is written (every 0.05 s here; later on a loaded machine)
    while "burnin 12/60 min" not in buf.getvalue() and time.monotonic() < end:
        time.sleep(0.05)
    plain.stop()
    lines = buf.getvalue().splitlines()
    assert not [ln for ln in lines if "started" in ln]
    assert any(ln.startswith("[gpuaccept] gpu07: burnin 12/60 min, bf16 612-648 TFLOP/s, max 71 °C (probe burnin, ")
               for ln in lines), lines
    assert any(ln.startswith("[gpuaccept] hosts 0/1 done · 1 running (slowest: gpu07 burnin 12/60 min") for ln in lines)


def test_relay_files_carry_worker_progress_to_the_controller(tmp_path):
    d = progress_relay.make_dir()
    try:
        w0, w1 = progress_relay.WorkerRelay(d, "gw0"), progress_relay.WorkerRelay(d, "gw1")
        reader = progress_relay.ControllerReader(d)
        p = Progress(io.StringIO(), tty=True, timeout_s=300)
        w0.started("gpu07", "burnin", 3900)
        w1.started("gpu08", "hbm_bandwidth", 300)
        reader.poll(p.begin, p.update)
        assert sorted(p.running) == ["gpu07", "gpu08"] and p.running["gpu07"][0] == "probe burnin"
        assert p.line().startswith("hosts 0/2 done · 2 running (slowest: gpu07 probe burnin ")
        w0.progress("gpu07", "burnin", {"done": 60, "total": 3600, "gpus": {"0": {"bf16_tflops": 650}}})
        time.sleep(progress_relay.WRITE_EVERY_S)
        w0.progress("gpu07", "burnin", {"done": 120, "total": 3600, "gpus": {"0": {"bf16_tflops": 640}}})
        w0.progress("gpu07", "other", {"done": 1})  # not the probe it runs: ignored
        reader.poll(p.begin, p.update)
        assert p.detail["gpu07"].startswith("burnin 2/60 min, bf16 640 TFLOP/s")
        (Path(d) / "gw2.json").write_text("{not json")  # a torn or foreign file is skipped
        reader.poll(p.begin, p.update)
        assert p.detail["gpu07"].startswith("burnin 2/60 min")
    finally:
        progress_relay.remove_dir(d)
    assert not os.path.exists(d)


LIVE_SUITE = '''
import os
import pytest
pytestmark = pytest.mark.compute

def test_burnin_cpu(node):
    # 10 s burn-ins one after another until the operator's side has seen the status line (it writes E2E_SEEN)
    for _ in range(12):
        doc = node.probe("burnin", {"device": "cpu", "seconds": 10, "window_s": 0.5, "gpus": 2}, timeout=150)
        assert doc["windows"]
        if os.path.exists(os.environ["E2E_SEEN"]):
            break
'''

FRAME_OF_A_BURNIN = re.compile(r"hosts 0/1 done · 1 running \(slowest: h1 burnin \S+/10 s, bf16 .*TFLOP/s")


@pytest.mark.parametrize("xdist", [False, True])
def test_operator_sees_the_burnin_progress_line(tmp_path, xdist):
    """End to end, as an operator runs it (a fresh pytest, --progress tty so that the status line is written
    although stderr is a pipe): the controller's status line shows the burn-in's progress, also when the probe
    runs in an xdist worker (relayed through files the controller removes at the end)."""
    from project_helpers import make_project
    inv = make_project(tmp_path, [], None, extra_suite=LIVE_SUITE, name="test_live.py")
    inv.write_text("h1 ansible_connection=local\n")
    args = ["--inventory", str(inv), "--reports", str(tmp_path / "rep"), "-k", "burnin_cpu", "--progress", "tty",
            "--history", "none", "-p", "no:cacheprovider"] + (["-n", "1"] if xdist else [])
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    seen = tmp_path / "seen"
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "TMPDIR": str(tmp), "E2E_SEEN": str(seen)})
    out: list[bytes] = []
    threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True).start()
    err = b""
    for chunk in iter(lambda: proc.stderr.read1(4096), b""):  # the status line as the operator's terminal gets it
        err += chunk
        if not seen.exists() and FRAME_OF_A_BURNIN.search(err.decode(errors="replace")):
            seen.touch()
    assert proc.wait(timeout=600) == 0, (b"".join(out)[-2000:] + err[-2000:]).decode(errors="replace")
    stderr = err.decode(errors="replace")
    frames = [f.strip() for f in stderr.replace("\n", "\r").split("\r") if "h1 burnin " in f]
    assert frames, stderr[-3000:]
    assert any(f.startswith("hosts 0/1 done · 1 running (slowest: h1 burnin ") and "/10 s, bf16 " in f
               and "TFLOP/s" in f for f in frames), frames
    assert not [n for n in os.listdir(tmp) if n.startswith("gpuaccept-progress-")]  # the relay folder is gone


# ------------------------------------------------------------------------------ burn-in as baseline (SQLite)

def _burnin_captures(tmp_path: Path, change=None) -> Path:
    from project_helpers import burnin_replay_folder
    return burnin_replay_folder(tmp_path, change)


def _nightly_captures(tmp_path: Path, bf16_factor: dict | None = None, temp: int | None = None) -> Path:
    dst = tmp_path / "nightly"
    shutil.copytree(DATA / "replay-h200x2", dst)
    for f in dst.glob("matmul_tflops-*.json"):
        saved = json.loads(f.read_text())
        for i, g in enumerate(saved["doc"]["gpus"]):
            g["dtypes"]["bf16"]["tflops"] = round(g["dtypes"]["bf16"]["tflops"] * (bf16_factor or {}).get(i, 1.0), 2)
            if temp is not None:  # another night, another temperature and clock: the same history key
                g["dtypes"]["bf16"]["temp_c_max"] = temp
                g["dtypes"]["bf16"]["sm_clock_mhz_median"] = 1400 + temp
        f.write_text(json.dumps(saved))
    return dst


def _run(tmp_path: Path, name: str, captures: Path, *args: str):
    from project_helpers import make_project, run_pytest
    root = tmp_path / "proj"
    if not root.exists():
        make_project(root, [], None, extra_suite="", name="test_zz_empty.py")
    inv = root / "inventory.ini"
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={captures} gpu_sku=h200-sxm-141gb "
                   "gpus_per_node=2\n")
    res = run_pytest(root, "--inventory", str(inv), "--reports", str(tmp_path / name), "--history",
                     str(tmp_path / "h.sqlite"), "--progress", "off", *args)
    return res, json.loads((tmp_path / name / "results.json").read_text())


def test_nightly_bf16_is_compared_with_the_gpus_burnin(tmp_path):
    """Burn-in on the real 2xH200 capture, then a nightly compute run where GPU 1 (serial 1650000000002) lost
    6%: the nightly bf16 TFLOP/s is a stand-out against that GPU's burn-in, named with the burn-in's day; GPU 0 is
    not; fp8 and the all-reduce are not compared with burn-in figures (not the same measurement)."""
    res, _ = _run(tmp_path, "burn", _burnin_captures(tmp_path), "-m", "burnin")
    assert res.returncode == 0, res.stdout[-3000:]
    con = sqlite3.connect(tmp_path / "h.sqlite")
    base = dict(((s, c), v) for s, c, v in con.execute(
        "SELECT subject, check_, value FROM latest WHERE kind='burnin'"))
    assert base[("1650000000002", "bf16_tflops[k=8192,m=8192,n=8192]")] == pytest.approx(681.325)
    assert base[("1650000000002", "burnin_fp8_tflops_start[k=8192,m=8192,n=8192]")] > 1300
    assert base[("1650000000001", "hbm_copy_bw_gbps[method=copy_]")] == pytest.approx(4183.65)
    assert not any(c.startswith(("fp8_tflops", "allreduce_busbw")) for _, c in base)
    con.close()
    day = time.strftime("%Y-%m-%d", time.gmtime())
    res, doc = _run(tmp_path, "night", _nightly_captures(tmp_path, {1: 0.94}), "-k", "compute or memory",
                    "--standout-pct", "5")
    assert res.returncode == 0, res.stdout[-3000:]
    stand = [o for o in doc["outliers"] if o["against"] != "fleet"]
    assert [(o["serial"], o["check"]) for o in stand] == [("1650000000002", "bf16_tflops[k=8192,m=8192,n=8192]")]
    o = stand[0]
    assert o["against"] == f"baseline (burn-in on {day}, as burnin_bf16_tflops_start)"
    assert o["reference"] == pytest.approx(681.325) and o["pct"] == pytest.approx(8.1, abs=0.1)
    summary = (tmp_path / "night" / "summary.md").read_text()
    assert f"baseline (burn-in on {day}, as burnin_bf16_tflops_start) | 681.3 | 8.1% |" in summary


def test_a_later_burnin_is_compared_with_the_first_and_a_failed_one_is_no_baseline(tmp_path):
    def sick(doc):  # GPU 0 computes a wrong checksum: the burn-in fails
        doc["sdc"][2]["hashes"]["0"] = "f" * 64
    res, _ = _run(tmp_path, "sick", _burnin_captures(tmp_path / "a", sick), "-m", "burnin")
    assert res.returncode == 1
    con = sqlite3.connect(tmp_path / "h.sqlite")
    assert con.execute("SELECT count(*) FROM latest WHERE kind='burnin'").fetchone()[0] == 0
    con.close()
    res, _ = _run(tmp_path, "first", _burnin_captures(tmp_path / "b"), "-m", "burnin")
    assert res.returncode == 0

    def slower(doc):  # a second burn-in after a repair: GPU 0's HBM copy 12% slower all along
        for w in doc["windows"]:
            if w["rank"] == 0:
                w["hbm_copy_gbps"] *= 0.88
    res, doc = _run(tmp_path, "second", _burnin_captures(tmp_path / "c", slower), "-m", "burnin")
    assert res.returncode == 0, res.stdout[-2000:]
    stand = {(o["serial"], o["check"], o["against"].split(" (")[0]) for o in doc["outliers"]}
    assert ("1650000000001", "burnin_hbm_copy_gbps_start", "baseline") in stand
    assert ("1650000000001", "burnin_hbm_copy_gbps_end", "previous") in stand
    assert not any(s == "1650000000002" for s, _, _ in stand)


def test_the_burnin_run_named_as_baseline_and_a_stable_key_across_nights(tmp_path):
    """--baseline <burn-in run>: the nightly check is compared with that run's comparable burn-in figure (and
    wins over the latest burn-in); two nights with different temperatures and clocks share one history key,
    so the second is compared with the first (before, the key carried temp_c_max and the clocks)."""
    res, _ = _run(tmp_path, "burn1", _burnin_captures(tmp_path / "a"), "-m", "burnin")
    assert res.returncode == 0

    def better(doc):
        for w in doc["windows"]:
            w["bf16_tflops"] = (w.get("bf16_tflops") or 0) * 1.2 or None
    res, _ = _run(tmp_path, "burn2", _burnin_captures(tmp_path / "b", better), "-m", "burnin")
    assert res.returncode == 0
    res, doc = _run(tmp_path, "n1", _nightly_captures(tmp_path / "x", temp=55), "-k", "compute",
                    "--baseline", "burn1", "--standout-pct", "5")
    assert res.returncode == 0, res.stdout[-2000:]
    assert not [o for o in doc["outliers"] if o["against"] != "fleet"]  # within 2.2% of burn1's figures
    res, doc = _run(tmp_path, "n2", _nightly_captures(tmp_path / "y", temp=55), "-k", "compute",
                    "--standout-pct", "5")
    against = {o["against"] for o in doc["outliers"] if o["check"].startswith("bf16_tflops")}
    assert any(a.startswith("baseline (burn-in on ") for a in against)  # burn2 (20% faster) by default
    res, doc = _run(tmp_path, "n3", _nightly_captures(tmp_path / "z", {0: 0.9}, temp=70), "-k", "compute",
                    "--baseline", "burn1", "--standout-pct", "5")
    got = {(o["serial"], o["against"]) for o in doc["outliers"] if o["check"].startswith("bf16_tflops")}
    assert ("1650000000001", "baseline (run burn1, as burnin_bf16_tflops_start)") in got
    assert ("1650000000001", "previous") in got  # n2 at 55 C and n3 at 70 C: the same key
    keys = {c for (c,) in sqlite3.connect(tmp_path / "h.sqlite").execute(
        "SELECT DISTINCT check_ FROM figures WHERE check_ LIKE 'bf16_tflops%'") if c.split("[")[0] == "bf16_tflops"}
    assert keys == {"bf16_tflops[k=8192,m=8192,n=8192]"}


def test_history_key_keeps_what_was_measured_and_drops_readings():
    f = {"check": "allreduce_busbw_gbps", "extra": {"algbw_gbps": 347.49, "algo": "RING/SIMPLE", "bytes": 4294967296,
                                                    "oop_busbw_gbps": 344.9, "algorithms": ["RING"]}}
    assert history.check_of(f) == "allreduce_busbw_gbps[bytes=4294967296]"
    f = {"check": "bf16_tflops", "extra": {"clocks_event_reasons": 4, "k": 8192, "m": 8192, "n": 8192,
                                           "power_w_max": 700.7, "sm_clock_mhz_median": 1470, "temp_c_max": 60,
                                           "power_limit_w_min": 700.0, "sm_clock_mhz_min": 1320}}
    assert history.check_of(f) == "bf16_tflops[k=8192,m=8192,n=8192]"
    assert history.check_of({"check": "hbm_copy_bw_gbps", "extra": {"method": "copy_"}}) == \
        "hbm_copy_bw_gbps[method=copy_]"
    assert history.check_of({"check": "h2d_bw_gbps", "extra": {"numa_node": 1}}) == "h2d_bw_gbps[numa_node=1]"


def test_a_slow_window_keeps_a_non_zero_figure():
    """A window's figures keep 5 significant digits: a CPU product at 40 MFLOP/s (a loaded 2-core machine) is
    4e-05 TFLOP/s, never 0 (a fixed 4 decimals read it as a GPU doing nothing)."""
    from probe_helpers import load_probe
    b = load_probe("burnin")
    win = {"t0": 1.0, "flop": {"bf16": 2e7, "fp8": 0.0}, "mm_s": {"bf16": 0.5, "fp8": 0.0}, "hbm_b": 3e9,
           "hbm_s": 1.0, "ar_b": 0.0, "ar_s": 0.0}
    doc = b._window_doc(win, 1, 1.5, 1.0)
    assert doc["bf16_tflops"] == 4e-05 and doc["fp8_tflops"] is None
    assert doc["hbm_copy_gbps"] == 3.0 and doc["allreduce_busbw_gbps"] is None
    assert (doc["rank"], doc["t0"], doc["t1"]) == (1, 1.0, 1.5)
