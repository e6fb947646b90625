"""The agent's warm child (gpuaccept/probes/_zygote.py): torch probes forked from a child that has
imported torch, over the local connection and real sshd (tests/sshd.py), with real torch (CPU build) and real
processes; no mocks. A warm probe keeps the fresh probe's contract (arguments, environment, working directory,
descriptors, signal dispositions, stdout and stderr, exit status, its own process group, deadline and kill); the
warm child dies with the agent, holds nothing of the run, and a probe cannot change it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuaccept.config.inventory import load_inventory
from gpuaccept.errors import CommandTimeout, PackageMissing
from gpuaccept.runner.agent import Agent
from gpuaccept.runner.host import HostRunner
from gpuaccept.runner.ship import PROBE_DIR, torch_import
from gpuaccept.transport import get_transport
from process_helpers import assert_gone, compile_beside, live_pids, marker, wait_started

ENV = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}

pytestmark = pytest.mark.usefixtures("isolated_home")

#: a stand-in torch probe: what a process can tell of how it was started, then it changes torch's state (a
#: warm child that shared it would hand the change to the next probe)
SHOWS = ("import json, os, signal, sys\n"
         "import torch\n"
         "fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n"
         "print('a log line', file=sys.stderr)\n"
         "print(json.dumps({'argv': sys.argv[1:], 'argv0': sys.argv[0], 'path0': sys.path[0], 'ppid': os.getppid(),\n"
         "    'own_group': os.getpgrp() == os.getpid(), 'cwd': os.getcwd(), 'stdin': sys.stdin.read(),\n"
         "    'env': dict(os.environ), 'cuda_initialized': torch.cuda.is_initialized(), 'fds': fds,\n"
         "    'dtype': str(torch.get_default_dtype()), 'marked': hasattr(torch, 'gpuaccept_mark'),\n"
         "    'threads': torch.get_num_threads(), 'tensor_sum': float(torch.arange(10).sum()),\n"
         "    'signals': {n: str(signal.getsignal(getattr(signal, n))) for n in\n"
         "                ('SIGINT', 'SIGTERM', 'SIGHUP', 'SIGPIPE', 'SIGCHLD', 'SIGUSR1')}}))\n"
         "torch.set_default_dtype(torch.float64)\n"
         "torch.gpuaccept_mark = 1\n"
         "os.environ['GPUACCEPT_LEFT_BY_A_PROBE'] = '1'\n"
         "sys.exit(int(os.environ.get('EXIT_WITH', '0')))\n")


def _probe(tmp_path: Path, name: str, body: str) -> str:
    p = tmp_path / f"{name}.py"
    p.write_text(body)
    return str(p)


def _doc(res) -> dict:
    return json.loads(res.stdout.decode().splitlines()[-1])


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _wait_gone(pid: int, within: float = 10.0) -> None:
    end = time.monotonic() + within
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.05)
    assert not _alive(pid), f"process {pid} still runs"


def _warm_agent(transport, monkeypatch, how: str = "on") -> Agent:
    monkeypatch.setenv("GPUACCEPT_WARM", how)
    a = Agent(transport.host.name, transport, sys.executable, ENV)
    a.start()
    return a


def _ready(a: Agent, tmp_path: Path) -> int:
    """Run a torch stand-in once (it waits for the warm child's import); the warm child's pid."""
    r = a.probe("shows", [_probe(tmp_path, "shows", SHOWS)], 120, 5, {}, torch="module")
    assert r.rc == 0, r.stderr[-2000:]
    assert a.warm.get("state") == "ready", a.warm
    return int(a.warm["pid"])


# ---------------------------------------------------------------------------------------------- which probes

def test_the_probes_that_import_torch_are_read_from_their_code():
    """At the top (every run pays the import: forked warm, waiting for the warm child if need be), only inside a
    function (warm when the warm child is ready), or not at all (forked by the agent as before)."""
    assert {n: torch_import(n) for n in ("hbm_bandwidth", "matmul_tflops", "pcie_bandwidth", "launch_overhead")} \
        == dict.fromkeys(("hbm_bandwidth", "matmul_tflops", "pcie_bandwidth", "launch_overhead"), "module")
    assert {n: torch_import(n) for n in ("gds", "pcie_link", "p2p_bandwidth", "storage_to_gpu")} == \
        dict.fromkeys(("gds", "pcie_link", "p2p_bandwidth", "storage_to_gpu"), "function")
    assert {n: torch_import(n) for n in ("gpu_inventory", "fio_throughput", "storage_mounts", "nvlink")} == \
        dict.fromkeys(("gpu_inventory", "fio_throughput", "storage_mounts", "nvlink"), None)
    assert torch_import("no_such_probe") is None


@pytest.mark.parametrize("probe,args", [("gds", {}), ("gpu_inventory", {}), ("storage_mounts", {"paths": ["/"]})])
def test_probes_that_need_no_gpu_import_no_torch(probe, args):
    """gds without a GDS path (detection only) and the inventory checks: no torch module is even loaded
    (``python -X importtime`` lists every import); gds still says whether torch has GdsFile."""
    p = subprocess.run([sys.executable, "-X", "importtime", f"{probe}.py", json.dumps(args)], cwd=PROBE_DIR,
                       capture_output=True, text=True, timeout=120)
    doc = json.loads(p.stdout.splitlines()[-1])
    assert "failed" not in doc or probe == "gpu_inventory", doc  # no NVML here: gpu_inventory says so, cleanly
    imported = [ln.rsplit("|", 1)[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")]
    assert imported and not [m for m in imported if m.split(".")[0] == "torch"], imported
    if probe == "gds":
        import torch
        assert doc["torch_gds"] is hasattr(getattr(torch.cuda, "gds", None), "GdsFile")
        assert doc["reason"] == "no path given: detection only (torch not imported)" and doc["gpu"] is False


# ---------------------------------------------------------------------------------------------- the contract

def test_a_warm_probe_is_the_fresh_probe_forked_from_the_warm_child(transport, tmp_path, monkeypatch):
    """The same torch stand-in, warm then fresh then warm: warm ones are children of the warm child (not of the
    agent), fresh ones of the agent; everything else a process can tell is the same (arguments, sys.argv[0] and
    sys.path[0], working directory, stdin /dev/null, environment but for GPUACCEPT_STARTED, descriptors, signal
    dispositions, torch's thread count, no CUDA initialised), and so are stdout, stderr (what torch's import
    printed included) and the exit status. What a warm probe changes (torch's default dtype, an attribute on
    torch, the environment) is not seen by the next."""
    a = _warm_agent(transport, monkeypatch)
    try:
        shows = _probe(tmp_path, "shows", SHOWS)
        runs = []
        for torch_kind in ("module", None, "module"):
            r = a.probe("shows", [shows, json.dumps({"i": 1})], 120, 5,
                        {"GPUACCEPT_T": "t", "CUDA_VISIBLE_DEVICES": "1", "EXIT_WITH": "3"}, torch=torch_kind)
            assert r.rc == 3, r.stderr[-2000:]
            runs.append((r, _doc(r)))
        zygote = int(a.warm["pid"])
        (w1, d1), (f, df), (w2, d2) = runs
        assert d1["ppid"] == d2["ppid"] == zygote != a.pid and df["ppid"] == a.pid
        assert [d["env"].pop("GPUACCEPT_STARTED") for d in (d1, df, d2)] == ["warm", "fresh", "warm"]
        for d in (d1, df, d2):
            d.pop("ppid")
        assert d1 == df == d2, (d1, df)
        assert d1["argv"] == [json.dumps({"i": 1})] and d1["own_group"] and d1["stdin"] == ""
        assert d1["env"]["CUDA_VISIBLE_DEVICES"] == "1" and d1["env"]["GPUACCEPT_T"] == "t"
        assert "GPUACCEPT_LEFT_BY_A_PROBE" not in d1["env"] and not d1["marked"]
        assert d1["dtype"] == "torch.float32" and d1["cuda_initialized"] is False
        assert d1["cwd"] == a.dir and d1["path0"] == str(tmp_path) and d1["signals"]["SIGINT"].startswith("<built-in")
        assert w1.stderr == f.stderr == w2.stderr  # stdout differs by the ppid and GPUACCEPT_STARTED shown above
        assert w1.stderr.endswith(b"a log line\n")
        assert _alive(zygote)
    finally:
        a.close()


def test_real_torch_probes_start_warm_end_to_end_over_sshd(tmp_path, sshd_nodes, known_hosts, monkeypatch):
    """HostRunner on a real sshd node: launch_overhead and hbm_bandwidth on the cpu path are forked from the warm
    child (their documents say ``started: warm``), gds without a path and gpu_inventory by the agent (``fresh``);
    the controller's forwarded variable reaches the warm probe as it reaches a fresh one. With GPUACCEPT_WARM=off
    the same probes start fresh, with the same keys in their documents."""
    monkeypatch.setenv("GPUACCEPT_HOST_BUSY_SHARE", "0.42")

    def run(how: str) -> dict:
        monkeypatch.setenv("GPUACCEPT_WARM", how)
        inv = tmp_path / f"inv-{how}.ini"
        inv.write_text("[gpu]\n" + sshd_nodes[1].inventory_line("h1") + "\n")
        node = HostRunner(list(load_inventory(str(inv)).hosts.values())[0],
                          lambda h: get_transport(h, known_hosts=known_hosts), probe_timeout=180)
        try:
            out = {"gds": node.probe("gds", {}),
                   "launch_overhead": node.probe("launch_overhead", {"device": "cpu", "iters": 200}),
                   "hbm_bandwidth": node.probe("hbm_bandwidth", {"device": "cpu", "bytes": 1 << 20, "iters": 2}),
                   "env": node.probe("pcie_bandwidth", {"device": "cpu", "bytes": 1 << 16, "iters": 2,
                                                        "mode": "each"})}
            out["warm"] = dict(node._agent.warm)
            return out
        finally:
            node.close()

    warm, fresh = run("auto"), run("off")  # auto: no NVIDIA device here, so the first torch probe starts it
    assert {k: warm[k]["started"] for k in ("gds", "launch_overhead", "hbm_bandwidth", "env")} == {
        "gds": "fresh", "launch_overhead": "warm", "hbm_bandwidth": "warm", "env": "warm"}
    assert warm["warm"]["state"] == "ready" and fresh["warm"] == {}
    assert {k: fresh[k]["started"] for k in ("gds", "launch_overhead", "hbm_bandwidth", "env")} == dict.fromkeys(
        ("gds", "launch_overhead", "hbm_bandwidth", "env"), "fresh")
    for k in ("gds", "launch_overhead", "hbm_bandwidth", "env"):
        assert set(warm[k]) == set(fresh[k]), k
    assert warm["launch_overhead"]["gpus"][0]["launch_us_wall"] > 0
    assert warm["hbm_bandwidth"]["gpus"][0]["copy_gbps"] > 0
    assert warm["env"]["host_conditions"]["limit"]["foreign_cpu_share"] == 0.42 == \
        fresh["env"]["host_conditions"]["limit"]["foreign_cpu_share"]


# ---------------------------------------------------------------------------------------------- kills and deaths

def test_a_warm_probe_past_its_deadline_is_killed_with_its_group_and_the_warm_child_stays(transport, tmp_path,
                                                                                         monkeypatch):
    """A warm probe that started a child and sleeps: at the controller's limit its group goes (the child
    included), the failure line says so, and the warm child lives on to fork the next probe."""
    a = _warm_agent(transport, monkeypatch)
    try:
        zygote = _ready(a, tmp_path)
        m1, m2 = marker(), marker()
        slow = _probe(tmp_path, "slow", f"import subprocess, time\nimport torch\nsubprocess.Popen(['sleep', '{m2}'])\n"
                                        f"time.sleep({m1})\n")
        with pytest.raises(CommandTimeout) as ei:
            a.probe("slow", [slow], 2, 30, {}, torch="module")
        assert b"node watchdog: the controller's limit of 2 s passed" in ei.value.stdout
        assert_gone(m1, within=2)
        assert_gone(m2, within=2)
        assert _alive(zygote)
        r = a.probe("shows", [_probe(tmp_path, "shows", SHOWS)], 60, 5, {}, torch="module")
        assert r.rc == 0 and _doc(r)["ppid"] == zygote
    finally:
        a.close()


def test_a_dead_warm_child_is_named_and_the_probes_start_fresh(transport, tmp_path, monkeypatch):
    """The warm child SIGKILLed while a warm probe runs: the probe dies with it and its stderr names the warm
    child's end; the agent says so once (``warm`` dead), and the next torch probes run, fresh, as children of the
    agent."""
    a = _warm_agent(transport, monkeypatch)
    try:
        zygote = _ready(a, tmp_path)
        m = marker()
        hang = _probe(tmp_path, "hang", f"import subprocess, time\nimport torch\nsubprocess.Popen(['sleep', '{m}'])\n"
                                        "time.sleep(600)\n")
        a.session.send(_frame({"op": "run", "id": 901, "argv": [hang], "deadline_s": 120, "grace_s": 5,
                               "torch": "module"}))
        wait_started(m, within=30, comm="sleep")
        os.kill(zygote, signal.SIGKILL)
        done = _answer(a, 901)
        assert done["rc"] == 137 and done["started"] == "warm"
        assert f"agent: the warm child (pid {zygote}) that this probe was forked from died of SIGKILL" in done["stderr"]
        assert_gone(m, within=2)
        r = a.probe("shows", [_probe(tmp_path, "shows", SHOWS)], 120, 5, {}, torch="module")
        d = _doc(r)
        assert r.rc == 0 and d["ppid"] == a.pid and d["env"]["GPUACCEPT_STARTED"] == "fresh"
        assert a.warm["state"] == "dead" and a.warm["why"] == f"the warm child (pid {zygote}) died of SIGKILL"
    finally:
        a.close()


def _frame(doc: dict) -> bytes:
    from gpuaccept.runner.agent import encode
    return encode(doc)


def _answer(a: Agent, rid: int, within: float = 30.0) -> dict:
    end = time.monotonic() + within
    while True:
        doc = a._next(end, None)
        assert doc is not None, "no answer from the agent"
        if doc.get("op") == "done" and doc.get("id") == rid:
            return doc


def test_the_warm_child_ends_with_the_agent(transport, tmp_path, monkeypatch):
    """close(): no warm child left once the agent said bye. The controller's connection gone: the agent stops it
    too. The agent SIGKILLed (nothing of its own cleanup runs): the warm child dies with it, and so does the warm
    probe that was running (PR_SET_PDEATHSIG both, as a probe forked by the agent dies with it; what the probe
    started itself is left to the controller's kill of the probe's group, as before)."""
    for how in ("close", "eof", "sigkill"):
        a = _warm_agent(transport, monkeypatch)
        zygote = _ready(a, tmp_path)
        agent_pid = a.pid
        if how == "close":
            assert a.close() is True
        elif how == "eof":
            a.session.close()
            _wait_gone(agent_pid)
        else:
            m = marker()
            hang = _probe(tmp_path, "hang", f"import subprocess, time\nimport torch\n"
                                            f"subprocess.Popen(['sleep', '{m}'])\ntime.sleep(600)\n")
            a.session.send(_frame({"op": "run", "id": 5, "argv": [hang], "deadline_s": 120, "grace_s": 5,
                                   "torch": "module"}))
            end = time.monotonic() + 30
            started = None
            while started is None:
                doc = a._next(end, None)
                assert doc is not None, "no answer from the agent"
                started = doc if doc.get("op") == "started" else None
            wait_started(m, within=30, comm="sleep")
            os.kill(agent_pid, signal.SIGKILL)
            _wait_gone(started["pgid"], within=5)
            os.killpg(started["pgid"], signal.SIGKILL)  # its sleep: the controller's group kill's to take
            assert_gone(m, within=5)
            a._drop()
        _wait_gone(zygote, within=5)
        assert not live_pids(f"{a.dir}/_zygote.py"), how


def test_the_warm_child_holds_no_lock_no_descriptor_and_no_gpu(transport, tmp_path, monkeypatch):
    """The warm child's descriptors: /dev/null, the agent's stderr and its socket to the agent, nothing else (not
    the node lock's holder file); it did not initialise CUDA (it could not say ready otherwise) and runs one
    thread. A warm probe sees none of the warm child's descriptors."""
    monkeypatch.setenv("GPUACCEPT_NODE_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("GPUACCEPT_WARM", "on")
    from gpuaccept.runner.agent import lock_identity
    a = Agent(transport.host.name, transport, sys.executable, ENV, lock_identity("run-z", str(tmp_path)))
    a.start()
    try:
        zygote = _ready(a, tmp_path)
        assert a.lock_info["lock"].startswith(str(tmp_path / "locks"))
        targets = {int(fd): os.readlink(f"/proc/{zygote}/fd/{fd}") for fd in os.listdir(f"/proc/{zygote}/fd")}
        assert set(targets) == {0, 1, 2, 3} and targets[0] == targets[1] == "/dev/null", targets
        assert targets[3].startswith("socket:") and not any("locks" in t for t in targets.values())
        assert a.warm["threads"] == 1 and len(os.listdir(f"/proc/{zygote}/task")) == 1
        r = a.probe("shows", [_probe(tmp_path, "shows", SHOWS)], 60, 5, {}, torch="module")
        # 3: sys.stdin on /dev/null (as every probe the agent forks, _watchdog._run_probe), 4: the listing itself
        assert _doc(r)["fds"] == [0, 1, 2, 3, 4]
    finally:
        a.close()


def test_torch_missing_on_the_node_is_the_same_package_missing(tmp_path, sshd_nodes, known_hosts, monkeypatch):
    """A node whose Python has no torch: the warm child says so (``missing``) and the torch probe starts fresh
    and fails as it always did, a PackageMissing naming torch."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, capture_output=True)
    monkeypatch.setenv("GPUACCEPT_WARM", "on")
    inv = tmp_path / "inv.ini"
    inv.write_text("[gpu]\n" + sshd_nodes[1].inventory_line("h1", python=str(bare / "bin" / "python")) + "\n")
    node = HostRunner(list(load_inventory(str(inv)).hosts.values())[0],
                      lambda h: get_transport(h, known_hosts=known_hosts), probe_timeout=120)
    try:
        node.probe("storage_mounts", {"paths": [str(tmp_path)]})  # the agent starts; its warm child finds no torch
        end = time.monotonic() + 30
        while node._agent.warm.get("state") != "missing" and time.monotonic() < end:
            node.probe("storage_mounts", {"paths": [str(tmp_path)]})
        assert node._agent.warm["state"] == "missing" and node._agent.warm["missing_module"] == "torch"
        with pytest.raises(PackageMissing) as ei:
            node.probe("launch_overhead", {"device": "cpu", "iters": 10})
        assert ei.value.evidence["module"] == "torch"
    finally:
        node.close()


def test_a_torch_probe_waits_for_the_starting_warm_child_and_can_be_killed_meanwhile(transport, tmp_path,
                                                                                   monkeypatch):
    """GPUACCEPT_WARM=auto on a node without an NVIDIA device: nothing starts with the agent; a probe that imports
    torch only inside a function starts fresh and starts nothing; the first probe that imports torch at its top
    starts the warm child and waits for its import (queued: a kill meanwhile answers at once, the probe never
    started), and the next is forked from it."""
    a = _warm_agent(transport, monkeypatch, how="auto")
    try:
        shows = _probe(tmp_path, "shows", SHOWS)
        r = a.probe("shows", [shows], 120, 5, {}, torch="function")
        assert r.rc == 0 and _doc(r)["ppid"] == a.pid and a.warm == {}
        a.session.send(_frame({"op": "run", "id": 77, "argv": [shows], "deadline_s": 120, "grace_s": 5,
                               "torch": "module"}))
        a.session.send(_frame({"op": "kill", "id": 77, "why": "stopped by the test"}))
        done = _answer(a, 77)
        assert done["rc"] == 1 and done["started"] is None and done["pgid"] is None
        assert json.loads(done["stdout"]) == {"failed": True, "msg": "node watchdog: stopped by the test; it never "
                                                                     "started"}
        r = a.probe("shows", [shows], 120, 5, {}, torch="module")
        assert r.rc == 0 and _doc(r)["ppid"] == a.warm["pid"] != a.pid
    finally:
        a.close()


# ---------------------------------------------------------------------------------------------- no torch: no exec

#: a stand-in probe that imports no torch: how its process was made (its command line and executable, its parent)
PLAIN = ("import json, os, sys\n"
         "print(json.dumps({'cmdline': open('/proc/self/cmdline', 'rb').read().decode('latin-1'),\n"
         "    'exe': os.readlink('/proc/self/exe'), 'ppid': os.getppid(), 'own_group': os.getpgrp() == os.getpid(),\n"
         "    'argv': sys.argv[1:], 'torch_loaded': 'torch' in sys.modules,\n"
         "    'started': os.environ.get('GPUACCEPT_STARTED')}))\n"
         "sys.exit(4)\n")


def test_a_probe_without_torch_is_a_fork_of_the_single_threaded_agent_not_a_new_interpreter(transport, tmp_path,
                                                                                          monkeypatch):
    """With the warm child ready, a probe that imports no torch is forked from the agent itself: its command line
    is the agent's ``python -c BOOT`` (no exec, no interpreter start), its parent the agent, its group its own,
    no torch loaded, its exit status its own; an exec'd one (``exec_probe``) shows ``python PLAIN.py ARGS``.
    The agent runs one thread (the condition of that fork)."""
    a = _warm_agent(transport, monkeypatch)
    try:
        _ready(a, tmp_path)
        plain = _probe(tmp_path, "plain", PLAIN)
        r = a.probe("plain", [plain, "{}"], 60, 5, {}, torch=None)
        d = _doc(r)
        assert r.rc == 4 and d["ppid"] == a.pid and d["own_group"] and d["argv"] == ["{}"], d
        assert d["cmdline"].split("\0")[1] == "-c" and d["cmdline"] == Path(f"/proc/{a.pid}/cmdline").read_text()
        assert d["torch_loaded"] is False and d["started"] == "fresh"
        assert len(os.listdir(f"/proc/{a.pid}/task")) == 1
        e = a.probe("plain", [plain, "{}"], 60, 5, {}, exec_probe=True, torch=None)
        assert e.rc == 4 and _doc(e)["cmdline"].split("\0")[1:3] == [plain, "{}"]
    finally:
        a.close()


def test_the_thread_count_that_decides_fork_or_exec_is_the_processes_own():
    """``_watchdog.threads`` counts the process's threads as Linux lists them: 1 in a fresh Python, 2 while a
    thread runs. Read in a child process of its own: the test worker's own threads come and go."""
    code = (
        "import sys, threading; sys.path.insert(0, sys.argv[1]); import _watchdog\n"
        "before = _watchdog.threads(); stop = threading.Event()\n"
        "t = threading.Thread(target=stop.wait); t.start(); during = _watchdog.threads()\n"
        "stop.set(); t.join(); print(before, during)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, PROBE_DIR], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "2"]


@pytest.mark.parametrize("starts, ready", [("native", True), ("python", False)])
def test_native_threads_of_the_import_are_counted_python_threads_refused(tmp_path, starts, ready):
    """What an import leaves running decides whether the warm child serves: native pool threads (as numpy's
    OpenBLAS starts one per core on a GPU node, 16 on the lent H200) re-create themselves in a forked child and are
    only counted; a Python thread left running is refused. A stand-in torch starts a real thread of each kind."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "torch").mkdir()
    (fake / "torch" / "__init__.py").write_text(
        "import ctypes, threading, time\n"
        "__version__ = 'stand-in'\n"
        "class cuda:\n    is_initialized = staticmethod(lambda: False)\n"
        f"if {starts!r} == 'python':\n"
        "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "else:\n"
        "    libc = ctypes.CDLL(None)\n"
        "    tid = ctypes.c_ulong()\n"
        "    pause = ctypes.cast(libc.pause, ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p))\n"
        "    assert libc.pthread_create(ctypes.byref(tid), None, pause, None) == 0\n"
        "    time.sleep(0.2)\n")
    code = (f"import json, sys; sys.path[:0] = [{str(fake)!r}, {str(PROBE_DIR)!r}]; import _zygote; "
            "print(json.dumps(_zygote.import_torch()[0]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc["threads"] >= 2, doc
    assert (doc["op"] == "ready") is ready, doc
    if not ready:
        assert doc["why"] == "2 Python threads run after importing torch: a fork copies only one"


@pytest.mark.parametrize("compiled", [False, True])
def test_the_warm_child_keeps_torch_s_bytecode_only_where_torch_has_none(tmp_path, compiled):
    """The warm child's import of a torch with no bytecode of its own (as on the lent H200's image) leaves it below
    ``$TMPDIR/gpuaccept-pycache-<euid>`` and says where (``bytecode_tree``); the next warm child's import reads it
    from there. A torch with its ``__pycache__`` is imported as it is and nothing is written."""
    fake, tmp = tmp_path / "fake", tmp_path / "tmp"
    (fake / "torch").mkdir(parents=True)
    tmp.mkdir()
    (fake / "torch" / "__init__.py").write_text(
        "__version__ = 'stand-in'\nclass cuda:\n    is_initialized = staticmethod(lambda: False)\n")
    if compiled:
        compile_beside(fake / "torch")
    code = (f"import json, sys; sys.path[:0] = [{str(fake)!r}, {str(PROBE_DIR)!r}]; import _zygote; "
            "print(json.dumps(_zygote.import_torch()[0]))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(PYTHONDONTWRITEBYTECODE="1", TMPDIR=str(tmp))
    tree = tmp / f"gpuaccept-pycache-{os.geteuid()}"
    for _ in range(2):
        res = subprocess.run([sys.executable, "-v", "-c", code], capture_output=True, text=True, timeout=60, env=env)
        doc = json.loads(res.stdout.strip().splitlines()[-1])
        assert doc["op"] == "ready", doc
        assert doc["bytecode_tree"] == (None if compiled else str(tree))
    where = f"{fake}/torch/__pycache__/" if compiled else f"{tree}{fake}/torch/"
    assert f"code object from '{where}__init__." in doc["stderr"]  # the import's own output, caught
    assert tree.exists() is not compiled
