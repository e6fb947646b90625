"""Nothing runs on a node that the operator did not write: the shell's metacharacters in every inventory
variable that reaches a command line, over a real sshd node and the local connection.

Each payload would create its own marker file if a shell ran any part of it. Variables are read from a real
inventory file (YAML, so every byte of the payload is the operator's), checked by gpuaccept.config.hostvars as the
plugin checks them, then sent the way gpuaccept sends them:

* ``nccl_env`` values, ``nccl_socket_ifname``, ``nccl_ib_hca`` -> environment of a probe (``HostRunner.probe`` with
  ``multinode.nccl_environment``), and read back verbatim with ``printenv``;
* ``ansible_python_interpreter`` -> the program of every probe command and of the rendezvous port picker;
* every var that travels inside a probe's JSON arguments (storage paths, fio settings, HCA names, the
  rendezvous address, NCCL probe arguments, the SKU) -> the JSON argument, read back verbatim by Python;
* ``nccl_env`` *names* cannot be quoted: they are refused at load (exit 4) and by ``shell.env_command``.

A variable whose validation refuses a payload is fine too (exit 4 before any node is touched); the test
asserts that every payload was either refused or delivered as text, and that no marker file exists.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuaccept.transport import shell
from gpuaccept.errors import ConfigError, NodeError
from gpuaccept.config.hostvars import check_hosts
from gpuaccept.config.inventory import load_inventory
from gpuaccept.runner.multinode import nccl_environment, pick_port
from gpuaccept.judging.nccl import exact_list
from gpuaccept.runner.host import PROBE_ENV, HostRunner
from gpuaccept.transport import get_transport

REPO = Path(__file__).resolve().parents[1]

# {m} is the payload's own marker file; each would create it if any shell evaluated the text
PAYLOADS = [
    "x;touch {m}",
    "x && touch {m}",
    "x|touch {m}",
    "x || touch {m}",
    "x & touch {m}",
    "$(touch {m})",
    "`touch {m}`",
    "x';touch {m};'",
    'x";touch {m};"',
    "x\ntouch {m}",
    "x>{m}",
    "x;touch {m} #",
    "$(touch${{IFS}}{m})",
    "x\\';touch {m};#",
    "'$(touch {m})'",
    "*;touch {m}",
    "-c;touch {m}",
    "{{a,b}};touch {m}",
]
BAD_ENV_NAMES = ["A;touch {m}", "A=$(touch {m})", "A B", "$(touch {m})", "1A", "-i", "A\nB", ""]
# vars that reach a probe's JSON arguments, and how the payload is placed in each
JSON_VARS = {
    "storage_paths": lambda p: ["/" + p],
    "fs_paths": lambda p: ["/" + p],
    "gds_paths": lambda p: ["/" + p],
    "storage_devices": lambda p: ["/dev/" + p],
    "storage_fio": lambda p: {"ioengine": p, "bs": p},
    "ib_hcas": lambda p: [p],
    "nccl_master_addr": lambda p: p,
    "nccl_expect_transport": lambda p: p,
    "nccl_internode_probe_args": lambda p: {"dtype": p},
    "gpu_sku": lambda p: p,
}
ENV_VARS = {"nccl_socket_ifname": "NCCL_SOCKET_IFNAME", "nccl_ib_hca": "NCCL_IB_HCA"}
ECHO_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"


@pytest.fixture(params=["local", "ssh"])
def target(request, tmp_path):
    """(inventory host line vars, transport factory) for the local connection or a real sshd node."""
    if request.param == "local":
        base = {"ansible_connection": "local"}
        return base, lambda h: get_transport(h)
    nodes = request.getfixturevalue("sshd_nodes")
    kh = request.getfixturevalue("known_hosts")
    n = nodes[0]
    base = {"ansible_host": n.address, "ansible_port": n.port, "ansible_user": "root",
            "ansible_ssh_private_key_file": n.key_file, "ansible_python_interpreter": sys.executable}
    return base, lambda h: get_transport(h, known_hosts=kh)


def _payloads(folder: Path, tag: str) -> list[tuple[str, Path]]:
    out = []
    for i, p in enumerate(PAYLOADS):
        m = folder / f"ran-{tag}-{i}"
        out.append((p.format(m=m), m))
    return out


def _inventory(tmp_path: Path, hosts: dict[str, dict]) -> str:
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}, allow_unicode=True))
    return str(path)


def _load(path: str):
    """Load and check as the plugin does; returns (hosts, None) or (None, the ConfigError)."""
    try:
        inv = load_inventory(path)
        hosts = list(inv.hosts.values())
        check_hosts(hosts, path)
        return hosts, None
    except ConfigError as err:
        return None, err


def _ran(markers) -> list[str]:
    return [str(m) for m in markers if os.path.lexists(m)]


def test_env_values_reach_the_probe_as_text(tmp_path, target):
    base, factory = target
    payloads = _payloads(tmp_path, "env")
    env_vars = {f"P{i}": p for i, (p, _) in enumerate(payloads)}
    hosts, err = _load(_inventory(tmp_path, {"h": {**base, "nccl_env": env_vars}}))
    assert err is None, err
    node = HostRunner(hosts[0], factory, probe_timeout=60)
    try:
        env = nccl_environment(hosts[0].vars)
        assert env == env_vars
        doc = node.probe("gpu_inventory", env=env)  # the probe command gpuaccept runs, with these values
        assert "gpus" in doc
        for name, value in env_vars.items():  # and the values arrive byte for byte
            res = node.run(shell.env_command({**PROBE_ENV, **env}, ["printenv", name]))
            assert res.rc == 0 and res.stdout.decode() == value + "\n", (name, value, res)
    finally:
        node.close()
    assert _ran(m for _, m in payloads) == []


@pytest.mark.parametrize("var", sorted(ENV_VARS))
def test_env_vars_are_refused_or_reach_the_probe_as_text(tmp_path, target, var):
    base, factory = target
    payloads = _payloads(tmp_path, var)
    delivered = refused = 0
    for p, _ in payloads:
        hosts, err = _load(_inventory(tmp_path, {"h": {**base, var: p}}))
        if err is not None:
            assert f"var {var}" in str(err) and "\n" not in str(err)
            refused += 1
            continue
        node = HostRunner(hosts[0], factory, probe_timeout=60)
        try:
            env = nccl_environment(hosts[0].vars)
            res = node.run(shell.env_command({**PROBE_ENV, **env}, ["printenv", ENV_VARS[var]]))
            # byte for byte as gpuaccept hands it to NCCL: the exact-name form of the list (``=`` in front)
            assert res.stdout.decode() == exact_list(p) + "\n", (p, res)
            delivered += 1
        finally:
            node.close()
    assert delivered + refused == len(payloads) and delivered > 0
    assert _ran(m for _, m in payloads) == []


def test_python_interpreter_is_one_word(tmp_path, target):
    base, factory = target
    payloads = _payloads(tmp_path, "python")
    for p, _ in payloads:
        hosts, err = _load(_inventory(tmp_path, {"h": {**base, "ansible_python_interpreter": p}}))
        if err is not None:
            assert "ansible_python_interpreter" in str(err)
            continue
        node = HostRunner(hosts[0], factory, probe_timeout=60)
        try:
            assert node.python == p
            with pytest.raises(NodeError):
                node.probe("gpu_inventory")
            with pytest.raises(NodeError):
                pick_port(node)
        finally:
            node.close()
    assert _ran(m for _, m in payloads) == []


def test_json_argument_vars_arrive_as_text(tmp_path, target):
    base, factory = target
    markers = []
    sent = []
    for var, place in JSON_VARS.items():
        payloads = _payloads(tmp_path, var)
        markers += [m for _, m in payloads]
        for p, _ in payloads:
            hosts, err = _load(_inventory(tmp_path, {"h": {**base, var: place(p)}}))
            if err is not None:
                assert f"var {var}" in str(err) and "\n" not in str(err), err
                continue
            sent.append({var: hosts[0].vars[var]})
    assert sent, "every payload was refused: nothing tested the command line"
    hosts, err = _load(_inventory(tmp_path, {"h": base}))
    node = HostRunner(hosts[0], factory, probe_timeout=60)
    try:
        # the probe command line of gpuaccept.runner.host.HostRunner.probe: env, program, one JSON argument
        args = json.dumps(sent)
        res = node.run(shell.env_command(PROBE_ENV, [node.python, "-c", ECHO_ARGV, args], cwd="/"))
        assert res.rc == 0, res
        assert json.loads(res.stdout) == [args]
    finally:
        node.close()
    assert _ran(markers) == []


@pytest.mark.parametrize("name", BAD_ENV_NAMES)
def test_env_names_are_refused(tmp_path, name):
    m = tmp_path / "ran"
    name = name.format(m=m)
    hosts, err = _load(_inventory(tmp_path, {"h": {"ansible_connection": "local", "nccl_env": {name: "1"}}}))
    assert hosts is None and "var nccl_env" in str(err) and "not a variable name" in str(err)
    with pytest.raises(ValueError):
        shell.env_command({name: "1"}, ["true"])
    assert not m.exists()


def test_bad_env_name_stops_the_run_before_any_node(tmp_path):
    """Through the plugin: exit 4, one line naming file, line, host and var; nothing ran."""
    m = tmp_path / "ran"
    inv = tmp_path / "inventory.ini"
    inv.write_text(f"[gpu]\nh1 ansible_connection=local\n[gpu:vars]\nnccl_env={{'A;touch {m};B': '1'}}\n")
    for name in ("pytest.ini", "conftest.py"):
        (tmp_path / name).write_text((REPO / name).read_text())
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "test_x.py").write_text("def test_x(node):\n    node.run('true')\n")
    res = subprocess.run([sys.executable, "-m", "pytest", "--inventory", str(inv), "--thresholds",
                          str(REPO / "thresholds"), "--reports", str(tmp_path / "rep"), "-p", "no:cacheprovider"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 4, res.stdout + res.stderr
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("ERROR:")]
    assert len(err) == 1 and f"{inv}:4: host h1 var nccl_env" in err[0], res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert not m.exists()
