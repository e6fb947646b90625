"""Running one scenario on this machine: its inventory, site thresholds and environment written into its folder,
its loads and runs started on their timeline, each stopped by its process group, its expectations checked.

A gpuaccept run is ``python3 -m pytest -p no:cacheprovider --history none --reports <folder>/<run> --inventory
<folder>/inventory.yml ...`` from the repository root (its log beside it, ``<run>.log``); a probe run is
``python3 gpuaccept/probes/<probe>.py '<json args>'`` (its document ``<run>.json``). On an SSH connection the
gpu-node kit (``.gpu-node/start-sshd.sh``, started once a runner session) gives the host's address, key,
known_hosts and interpreter.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time

import yaml

from benchmarks.scenarios.expect import Row, check_command, check_document, check_folder
from benchmarks.scenarios.loads import ROOT, LoadSet, release, stop_group
from benchmarks.scenarios.signals import CLEAN_WAIT_S, Signaller, gpu_apps, wait_clean
from benchmarks.scenarios.spec import Run, Scenario

#: the inventory name of the machine in every scenario
HOST = "gpu-node"
#: environment every run gets unless the scenario sets it: NVLink multicast (NVLS) left off, as the lent GPU
#: machines require (the device kit's KINDS.md; benchmarks/device_*.sh set the same)
DEFAULT_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
#: the gpu-node kit's SSH port for the scenarios (chosen: its README's default)
SSH_PORT = 2222
_ssh_vars: dict[tuple[int, str], dict] = {}


def gpu_count() -> int:
    """GPUs on this machine: the lines of ``nvidia-smi -L``, else NVML's count (nvidia-ml-py), else 0."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
        return sum(1 for ln in out.splitlines() if ln.startswith("GPU "))
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import pynvml
        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:  # no library, no driver: no GPU to run on
        return 0


def machine_sku() -> str | None:
    """The gpuaccept SKU of this machine's GPU 0 (``nvidia-smi --query-gpu=name,memory.total,pci.device_id``,
    detected by the thresholds' ``detect`` blocks: gpuaccept.judging.sku.detect_sku), or None where nvidia-smi
    does not answer or no SKU file matches."""
    from gpuaccept.config.thresholds import load_all
    from gpuaccept.errors import ThresholdError
    from gpuaccept.judging.sku import detect_sku
    try:
        out = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=name,memory.total,pci.device_id",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=60).stdout
        name, mib, dev = [x.strip() for x in out.strip().splitlines()[0].split(",")]
        return detect_sku(load_all(os.path.join(ROOT, "thresholds")), name, float(mib) * 2 ** 20, dev.lower()).sku
    except (OSError, subprocess.SubprocessError, IndexError, ValueError, ThresholdError):
        return None


def on_sku(sc: Scenario, sku: str | None) -> Scenario:
    """``sc`` as run on a machine of SKU ``sku``: the ``gpu_sku`` it declares (inventory, each host's vars) and
    the keys of its site thresholds are that SKU's where they name another (a scenario written on an H200 runs on
    the H100 lent); ``sc`` itself where ``sku`` is None or already its own. Figure floors written as ``floor``
    (expect.py) follow the SKU file the run judged against; written as numbers, they stay the file's."""
    said = sc.inventory.get("gpu_sku")
    if not sku or not said or said == sku:
        return sc
    swap = (lambda d: {k: (sku if k == "gpu_sku" and v == said else v) for k, v in d.items()})
    site = ({(sku if k == said else k): v for k, v in sc.site_thresholds.items()}
            if isinstance(sc.site_thresholds, dict) else sc.site_thresholds)
    return dataclasses.replace(sc, inventory=swap(sc.inventory), site_thresholds=site,
                               hosts={k: swap(v or {}) for k, v in (sc.hosts or {}).items()})


def ssh_node(port: int = SSH_PORT, address: str = "127.0.0.1") -> dict:
    """Host vars of this machine reached over SSH through the gpu-node kit's sshd on ``address``:``port``
    (started once a runner session), plus ``_known_hosts`` (its known_hosts lines). Raises RuntimeError when the
    kit is missing or its sshd does not start."""
    if (port, address) in _ssh_vars:
        return _ssh_vars[(port, address)]
    kit = os.path.join(ROOT, ".gpu-node", "start-sshd.sh")
    if not os.path.exists(kit):
        raise RuntimeError(f"no gpu-node kit at {kit} (carry .gpu-node)")
    p = subprocess.run(["bash", kit, str(port), address], capture_output=True, text=True, timeout=300)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("inventory line: ")), None)
    kh = next((ln.split(": ", 1)[1] for ln in p.stdout.splitlines() if ln.startswith("known_hosts: ")), None)
    if p.returncode != 0 or not line or not kh:
        raise RuntimeError(f"start-sshd.sh failed (rc {p.returncode}): {(p.stdout + p.stderr)[-300:]}")
    hv = dict(kv.split("=", 1) for kv in line.split()[3:] if "=" in kv)
    hv["ansible_python_interpreter"] = sys.executable  # the interpreter with torch and nvidia-ml-py
    with open(kh, encoding="utf-8") as f:
        _ssh_vars[(port, address)] = {**hv, "_known_hosts": f.read()}
    return _ssh_vars[(port, address)]


def _value(v, n: int, folder: str = ""):
    """An inventory value with ``{gpus}`` / ``{gpus+1}`` standing for the GPU count found and ``{folder}`` for
    the scenario's folder (in strings, lists and mappings)."""
    if isinstance(v, str):
        m = re.fullmatch(r"\{gpus([+-]\d+)?\}", v.strip())
        if m:
            return n + int(m.group(1) or 0)
        return v.replace("{folder}", folder)
    if isinstance(v, list):
        return [_value(x, n, folder) for x in v]
    if isinstance(v, dict):
        return {k: _value(x, n, folder) for k, x in v.items()}
    return v


def _make_paths(hv: dict) -> None:
    """Make the folders of every ``*_paths`` host var (scenario folders: ``{folder}/...``)."""
    for k, v in hv.items():
        if k.endswith("_paths"):
            for p in v if isinstance(v, list) else [v]:
                if isinstance(p, str) and os.path.isabs(p):
                    os.makedirs(p, exist_ok=True)


def host_vars(sc: Scenario, folder: str, n: int) -> tuple[dict[str, dict], str | None]:
    """``({inventory name: host vars}, known_hosts path or None)`` of ``sc``: its ``hosts`` (default one,
    :data:`HOST`), each over its own sshd on an SSH connection (127.0.0.<i+1>, port SSH_PORT+i). Raises
    RuntimeError when the SSH kit cannot start."""
    names = sc.hosts or {HOST: {}}
    out, known = {}, []
    for i, (name, own) in enumerate(names.items()):
        hv: dict = {"ansible_connection": "local"}
        if sc.connection == "ssh":
            node = dict(ssh_node(SSH_PORT + i, f"127.0.0.{i + 1}"))
            known.append(node.pop("_known_hosts"))
            hv = {k: (int(v) if k == "ansible_port" else v) for k, v in node.items()}
        if n > 0:
            hv["gpus_per_node"] = n  # what the machine has: the healthy node's declaration
        hv["nccl_env"] = {"NCCL_NVLS_ENABLE": "0"}
        hv.update({k: _value(v, n, folder) for k, v in {**sc.inventory, **own}.items()})
        _make_paths(hv)
        out[name] = hv
    kh = None
    if known:
        kh = os.path.join(folder, "known_hosts")
        with open(kh, "w", encoding="utf-8") as f:
            f.write("".join(k if k.endswith("\n") else k + "\n" for k in known))
    return out, kh


def write_setup(sc: Scenario, folder: str, n: int) -> list[str]:
    """Write ``sc``'s inventory (and site thresholds, bare venv) into ``folder``; returns the pytest options
    they need (``--history`` among them). Raises RuntimeError when the SSH kit cannot start."""
    hosts, kh = host_vars(sc, folder, n)
    opts = ["--known-hosts", kh] if kh else []
    if sc.bare_python:
        bare = os.path.join(folder, "bare-python")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", bare], check=True, capture_output=True)
        for hv in hosts.values():
            hv["ansible_python_interpreter"] = os.path.join(bare, "bin", "python3")
    inv = os.path.join(folder, "inventory.yml")
    with open(inv, "w", encoding="utf-8") as f:
        yaml.safe_dump({"all": {"hosts": hosts}}, f, sort_keys=False)
    opts += ["--inventory", inv, "--history", os.path.join(folder, "history.sqlite") if sc.history else "none"]
    if sc.site_thresholds:
        site = os.path.join(folder, "site-thresholds.yaml")
        with open(site, "w", encoding="utf-8") as f:
            yaml.safe_dump(sc.site_thresholds, f, sort_keys=False)
        opts += ["--site-thresholds", site]
    return opts


def pytest_argv(run: Run, folder: str, setup: list[str]) -> list[str]:
    """The command line of gpuaccept run ``run`` reporting into ``folder``/``run.name``.

    The checkout's pytest.ini is named (``-c``, ``--rootdir``): on a node where gpuaccept is not installed, the
    plugin's options are known only once that ini is read, and pytest would otherwise look for an ini above the
    report folder's absolute path."""
    argv = [sys.executable, "-m", "pytest", "-c", os.path.join(ROOT, "pytest.ini"), f"--rootdir={ROOT}",
            "-p", "no:cacheprovider", "--reports", os.path.join(folder, run.name), *setup]
    for opt, val in (("-m", run.markers), ("-k", run.keyword), ("--profile", run.profile)):
        if val:
            argv += [opt, val]
    return argv + run.options


def probe_argv(run: Run, folder: str = "") -> list[str]:
    """The command line of a standalone probe run (from gpuaccept/probes), ``{folder}`` in its args replaced."""
    args = _value(run.args, 0, folder)
    return [sys.executable, os.path.join(ROOT, "gpuaccept", "probes", f"{run.probe}.py"), json.dumps(args)]


def _last_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [ln for ln in f.read().splitlines() if ln.strip()]
        doc = json.loads(lines[-1]) if lines else None
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        return None


def recorded(jsonl: str, test: str) -> bool:
    """Whether the run writing ``jsonl`` (results.jsonl) has recorded test ``test`` (its name before any
    parameter): that test finished."""
    try:
        with open(jsonl, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    if str(json.loads(line).get("name", "")).split("[")[0] == test:
                        return True
                except (ValueError, AttributeError):
                    continue
    except OSError:
        return False
    return False


def _gpu_of(gpu, n: int) -> str:
    return str(max(n - 1, 0) if gpu == "last" else gpu)


def _start(item: Run, folder: str, setup: list[str], env: dict) -> subprocess.Popen:
    """Start run ``item`` in a session of its own: a gpuaccept run (its log ``<name>.log``), a probe (its
    document ``<name>.json``, stderr ``.err``) or a command (its output ``<name>.txt``)."""
    if item.kind == "probe":
        argv, out, cwd = probe_argv(item, folder), f"{item.name}.json", os.path.join(ROOT, "gpuaccept", "probes")
    elif item.kind == "command":
        argv, out, cwd = [str(_value(c, 0, folder)) for c in item.command], f"{item.name}.txt", folder
    else:
        argv, out, cwd = pytest_argv(item, folder, setup), f"{item.name}.log", ROOT
    out = os.path.join(folder, out)
    with open(out, "wb") as f, open(out + ".err" if item.kind == "probe" else os.devnull, "wb") as err:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=f,
                                stderr=err if item.kind == "probe" else subprocess.STDOUT, start_new_session=True)


def _ended(name: str, p: subprocess.Popen, sig: Signaller | None, loads: LoadSet, obs: dict) -> None:
    """Record run ``name``'s exit status; after a signalled run, measure the node clean (signals.wait_clean)."""
    obs[name]["rc"] = p.returncode
    if sig is None:
        return
    obs[name]["signals"] = sig.sent
    if sig.t_last is not None:
        # from a signal to the run itself (a killed controller); else from the run's end (a frozen rank: the run
        # ends at the probe's deadline, and only then must the node be clean)
        since = sig.t_last if sig.last_to_run else time.monotonic()
        obs[name]["clean_s"] = wait_clean(sig.tracked, since, {q.pid for q in loads.procs}, run_pid=p.pid)
        obs[name]["waited_s"] = CLEAN_WAIT_S


def _timeline(sc: Scenario, folder: str, n: int, setup: list[str], loads: LoadSet, env: dict,
              notes: list[str]) -> dict[str, dict]:
    """Start the loads and runs of ``sc`` at their times, send each run's signals, wait for the runs (each
    stopped by its group at its timeout); returns what was seen of each run: ``{name: {"rc": exit status (None:
    stopped at its timeout), "signals": [...], "clean_s": ...}}``. Loads are left to the caller."""
    log = os.path.join(folder, "loads.log")
    before = [ld for ld in sc.loads if ld.after_s is None]
    stops: list[tuple[float, subprocess.Popen]] = []
    for ld in before:
        p = loads.start(ld.kind, _gpu_of(ld.gpu, n), ld.threads, ld.gib, log)
        notes.append(f"{ld.kind} pid {p.pid} started before the first run")
        if ld.stop_after_s is not None:
            stops.append((ld.stop_after_s, p))
    if before:
        time.sleep(max(ld.settle_s for ld in before))
    armed: dict[int, tuple[subprocess.Popen, str]] = {}  # GPU loads with a trigger: started now, released then
    for i, ld in enumerate(sc.loads):
        if ld.after_s is not None and ld.kind.startswith("gpu-"):
            go = os.path.join(folder, f"load-{i}.go")
            armed[id(ld)] = (loads.start(ld.kind, _gpu_of(ld.gpu, n), ld.threads, ld.gib, log, go=go), go)
    t0 = time.monotonic()
    events = [(ld.after_s, "load", ld) for ld in sc.loads if ld.after_s is not None]
    events += [(r.after_s, "run", r) for r in sc.runs]
    events.sort(key=lambda e: e[0])
    started: dict[str, tuple[subprocess.Popen, float, Run, Signaller | None]] = {}
    obs: dict[str, dict] = {}
    first = os.path.join(folder, sc.runs[0].name, "results.jsonl") if sc.runs else ""
    busy_since: float | None = None  # when a run's compute process first showed on a GPU (gpu_busy loads)
    try:
        while any(e[1] == "run" for e in events) or any(name not in obs for name in started):
            now = time.monotonic() - t0
            if busy_since is None and started and any(e[1] == "load" and e[2].gpu_busy for e in events) and (
                    gpu_apps() - {p.pid for p in loads.procs}):
                busy_since = now
            ready = [e for e in events if (
                e[1] == "load" and e[2].gpu_busy and busy_since is not None and now >= busy_since + e[0]) or (
                not (e[1] == "load" and e[2].gpu_busy) and e[0] <= now and (
                    e[2].after_run in obs if e[1] == "run" and e[2].after_run else
                    e[1] == "run" or not e[2].after_test or recorded(first, e[2].after_test)))]
            for ev in ready:
                events.remove(ev)
                _, what, item = ev
                if what == "load":
                    if id(item) in armed:
                        p, go = armed.pop(id(item))
                        release(go)
                    else:
                        p = loads.start(item.kind, _gpu_of(item.gpu, n), item.threads, item.gib, log)
                    notes.append(f"{item.kind} pid {p.pid} started at {now:.0f} s")
                    if item.stop_after_s is not None:
                        stops.append((item.stop_after_s, p))
                    continue
                p = _start(item, folder, setup, env)
                sig = Signaller(item.signals, p, os.path.join(folder, item.name, "results.jsonl"),
                                sc.connection == "local", {q.pid for q in loads.procs}) if item.signals else None
                started[item.name] = (p, time.monotonic(), item, sig)
            for t, p in [s for s in stops if s[0] <= now]:
                loads.stop(p)
                stops.remove((t, p))
            for name, (p, t_start, run, sig) in started.items():
                if name in obs:
                    continue
                if p.poll() is not None:
                    obs[name] = {}
                    _ended(name, p, sig, loads, obs)
                elif time.monotonic() - t_start > run.timeout_s:
                    stop_group(p)
                    obs[name] = {"rc": None, "signals": sig.sent if sig else []}
                    notes.append(f"{name} stopped at its {run.timeout_s:.0f} s timeout")
                elif sig is not None:
                    sig.poll()
            time.sleep(0.2)
    finally:
        for name, (p, _, _, _) in started.items():
            if name not in obs:
                stop_group(p)
    for name, o in obs.items():
        notes += [f"{name}: {line}" for line in o.get("signals") or []]
    return obs


def run_scenario(sc: Scenario, out: str, n: int, refs: dict[str, dict], peers_dir: str | None = None) -> list[Row]:
    """Run ``sc`` into ``out``/``sc.name`` on a machine of ``n`` GPUs and check it; its rows. A scenario
    needing more GPUs is one row "needs N GPUs: not run" (``holds`` None). ``refs`` gets this scenario's first
    gpuaccept run's results.json (for the scenarios comparing with it)."""
    if n < sc.gpus:
        return [Row(sc.name, "-", sc.claim[:60], f"needs {sc.gpus} GPUs: not run", None)]
    folder = os.path.join(out, sc.name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    notes: list[str] = []
    env = {**os.environ, **DEFAULT_ENV, **sc.env, "PYTHONUNBUFFERED": "1"}
    try:
        setup = write_setup(sc, folder, n)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        return [Row(sc.name, "-", "its setup", f"failed: {e}"[:200], False)]
    t = time.monotonic()
    with LoadSet() as loads:
        obs = _timeline(sc, folder, n, setup, loads, env, notes)
        rows: list[Row] = []
        if sc.peers:
            from benchmarks.scenarios.peers import run_peers
            rows += run_peers(sc, folder, n, peers_dir, env)
    for r in sc.runs:
        seen = obs.get(r.name, {})
        if r.kind == "probe":
            rows += check_document(sc.name, r.name, r.expect, _last_json(os.path.join(folder, f"{r.name}.json")))
        elif r.kind == "command":
            try:
                with open(os.path.join(folder, f"{r.name}.txt"), encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except OSError:
                text = ""
            rows += check_command(sc.name, r.name, r.expect, seen.get("rc"), text)
        else:
            rows += check_folder(sc.name, r.name, r.expect, os.path.join(folder, r.name), refs, seen)
    first = next((r for r in sc.runs if r.kind == "gpuaccept"), None)
    if first is not None:
        try:
            with open(os.path.join(folder, first.name, "results.json"), encoding="utf-8") as f:
                refs[sc.name] = json.load(f)
        except (OSError, ValueError):
            pass
    with open(os.path.join(folder, "scenario.json"), "w", encoding="utf-8") as f:
        json.dump({"scenario": sc.name, "claim": sc.claim, "gpus": n, "seconds": round(time.monotonic() - t, 1),
                   "loads": loads.started, "rc": {k: v.get("rc") for k, v in obs.items()}, "runs": obs,
                   "notes": notes, "rows": [r.__dict__ for r in rows]}, f, indent=1)
    return rows
