"""Inventories as fleets write them, read the way ansible-core reads them (``ansible`` and
``ansible-inventory`` themselves are the oracle): a connection var written in both spellings (``ansible_host``
and the older ``ansible_ssh_host``; port, user, key likewise), a port in the host name and in its vars, an
inline comment in a vars section; inventory scripts, plugin configurations, ``--list`` JSON, inventory folders
and an inventory read from a pipe."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaccept.errors import InventoryError
from gpuaccept.config.inventory import load_inventory
from project_helpers import make_project, run_pytest
from sshd import free_port


ANSIBLE = shutil.which("ansible") or shutil.which("ansible", path=os.path.dirname(sys.executable))


ANSIBLE_INVENTORY = (shutil.which("ansible-inventory")
                     or shutil.which("ansible-inventory", path=os.path.dirname(sys.executable)))


def _ansible_env(tmp_path: Path) -> dict:
    return {**os.environ, "ANSIBLE_HOME": str(tmp_path / "ansible-home"), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "at"),
            "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true"}


def _ansible_target(tmp_path: Path, inventory: Path, host: str) -> tuple[str, str, str]:
    """(user, address, port) that ``ansible HOST -m ping -vvv`` tries to log in with (the port is closed:
    it fails at once after printing them)."""
    assert ANSIBLE, "ansible not found (pip install -e '.[test]' installs ansible-core)"
    proc = subprocess.run([ANSIBLE, host, "-i", str(inventory), "-m", "ping", "-vvv", "-e", "ansible_ssh_timeout=3",
                           "--ssh-extra-args=-o UserKnownHostsFile=/dev/null"],  # never ~/.ssh/known_hosts
                          capture_output=True, text=True, env=_ansible_env(tmp_path), timeout=120)
    out = proc.stdout + proc.stderr
    user = re.search(r"ESTABLISH SSH CONNECTION FOR USER: (\S+)", out)
    cmd = re.search(r"SSH: EXEC ssh .*?-o Port=(\d+) .* (\S+) '/bin/sh", out)
    assert user and cmd, out[-3000:]
    return user.group(1), cmd.group(2), cmd.group(1)


def test_older_spelling_of_a_connection_var_wins_as_in_ansible(tmp_path):
    """A fleet's common legacy shape: ``[all:vars]`` in today's spelling, one host overridden in the old one.
    Before: gpuaccept logged in as ``ops`` at 127.0.0.1 port P1; Ansible as ``root`` at 127.0.0.3 port P2."""
    p1, p2 = free_port("127.0.0.1"), free_port("127.0.0.1")
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[all:vars]\nansible_user=ops\nansible_host=127.0.0.1\nansible_port={p1}\n"
                   f"[gpu]\nold ansible_ssh_user=root ansible_ssh_host=127.0.0.3 ansible_ssh_port={p2}\n")
    host = load_inventory(str(inv)).hosts["old"]
    assert (host.user, host.address, str(host.port)) == _ansible_target(tmp_path, inv, "old") == ("root", "127.0.0.3",
                                                                                                  str(p2))


@pytest.mark.parametrize("new,old,a,b", [
    ("ansible_host", "ansible_ssh_host", "127.0.0.9", "127.0.0.8"),
    ("ansible_port", "ansible_ssh_port", "2201", "2202"),
    ("ansible_user", "ansible_ssh_user", "newuser", "olduser"),
    ("ansible_private_key_file", "ansible_ssh_private_key_file", "/keys/new", "/keys/old"),
])
def test_a_hosts_own_var_that_ansible_would_ignore_is_refused(tmp_path, new, old, a, b):
    """The host's own ``ansible_host`` against a group's ``ansible_ssh_host``: by precedence the host's value,
    but Ansible connects to the group's. Before: gpuaccept took the host's value, silently."""
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu]\nn1 {new}={a}\n[gpu:vars]\n{old}={b}\n")
    with pytest.raises(InventoryError) as err:
        load_inventory(str(inv))
    shown = lambda v: v if v.isdigit() else repr(v)  # noqa: E731 - INI reads 2201 as a number
    assert str(err.value) == (f"{inv}:2: host n1 sets {new}={shown(a)}, but also {old}={shown(b)} (at {inv}:4), "
                              f"which Ansible uses instead whatever the precedence: set only one of them")
    inv.write_text(f"[gpu]\nn1 {new}={a}\n[gpu:vars]\n{old}={a}\n")  # the same value twice is fine
    assert load_inventory(str(inv)).hosts["n1"]


def test_ansible_agrees_that_the_group_ssh_host_wins(tmp_path):
    """The oracle behind the refusal above: ansible-core connects to the group's ``ansible_ssh_host``."""
    port = free_port("127.0.0.1")
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu]\nn1 ansible_host=127.0.0.9 ansible_port={port}\n[gpu:vars]\nansible_ssh_host=127.0.0.1\n")
    assert _ansible_target(tmp_path, inv, "n1")[1] == "127.0.0.1"


@pytest.mark.parametrize("name,text,line", [
    ("hosts.ini", "[gpu]\nn1:2222 ansible_port=2200\n", 2),
    ("hosts.yml", "gpu:\n  hosts:\n    'n1:2222':\n      ansible_port: 2200\n", 3),
    ("old.ini", "[gpu]\nn1:2222 ansible_ssh_port=2200\n", 2),
])
def test_a_port_in_the_host_name_and_another_in_its_vars_is_refused(tmp_path, name, text, line):
    """Before: gpuaccept connected to 2222, Ansible (ansible-inventory) to 2200, the variable's."""
    inv = tmp_path / name
    inv.write_text(text)
    assert _oracle_port(tmp_path, inv) == 2200
    with pytest.raises(InventoryError) as err:
        load_inventory(str(inv))
    assert str(err.value).startswith(f"{inv}:{line}: host 'n1:2222' names port 2222 and sets ansible_"), err.value
    inv.write_text(text.replace("2200", "2222"))  # the same port twice is fine
    assert load_inventory(str(inv)).hosts["n1"].port == 2222


def _oracle_port(tmp_path: Path, inv: Path) -> int:
    out = json.loads(subprocess.run([ANSIBLE_INVENTORY, "-i", str(inv), "--list"], capture_output=True, text=True,
                                    env=_ansible_env(tmp_path), timeout=120, check=True).stdout)
    hv = out["_meta"]["hostvars"]["n1"]
    return int(hv.get("ansible_ssh_port", hv.get("ansible_port")))


@pytest.mark.parametrize("line,shown", [
    ("ansible_user=ops   ; ops team", "'; ops team'"),
    ("ansible_python_interpreter=/opt/venv/bin/python  # venv with torch", "'# venv with torch'"),
    ("gpu_sku=h200-sxm-141gb # HGX", "'# HGX'"),
])
def test_an_inline_comment_in_a_vars_section_is_refused_for_a_var_gpuaccept_reads(tmp_path, line, shown):
    """ansible-inventory gives ansible_user 'ops   ; ops team' (the INI reader keeps it in [g:vars]): before,
    gpuaccept logged in as that user (every host an authentication ERROR) or looked for that interpreter."""
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu]\ng1\n[gpu:vars]\n{line}\nteam_note=rack 3 # the operator's own: left alone\n")
    key, value = line.split("=", 1)
    oracle = json.loads(subprocess.run([ANSIBLE_INVENTORY, "-i", str(inv), "--list"], capture_output=True, text=True,
                                       env=_ansible_env(tmp_path), timeout=120, check=True).stdout)
    assert str(oracle["_meta"]["hostvars"]["g1"][key]) == value.strip()  # the comment is in Ansible's value
    with pytest.raises(InventoryError) as err:
        load_inventory(str(inv))
    assert str(err.value).startswith(f"{inv}:4: [gpu:vars] {key}=") and f"Ansible keeps {shown} as part" in str(
        err.value), err.value
    inv.write_text(f"[gpu]\ng1\n[gpu:vars]\n# comment\n{line.split()[0]}\ngpus_per_node=8 # HGX\n")
    assert load_inventory(str(inv)).hosts["g1"].vars["gpus_per_node"] == 8  # a literal: the comment drops, as in Ansible


SCRIPT = "#!/bin/sh\necho '{\"gpu\": {\"hosts\": [\"d1\", \"d2\"], \"vars\": {\"gpus_per_node\": 8}}, \"_meta\": " \
         "{\"hostvars\": {\"d1\": {\"ansible_host\": \"10.1.0.1\"}}}}'\n"


@pytest.mark.parametrize("name,text,needle", [
    ("inventory.sh", SCRIPT, ":1: an inventory script (#!/bin/sh); gpuaccept does not run inventory scripts"),
    ("inventory", SCRIPT, ":1: an inventory script (#!/bin/sh); gpuaccept does not run inventory scripts"),
    ("aws_ec2.yml", "plugin: amazon.aws.aws_ec2\nregions: [us-east-1]\n",
     ":1: an inventory plugin configuration (plugin: amazon.aws.aws_ec2); gpuaccept does not run inventory plugins"),
    ("fleet.json", '{"_meta": {"hostvars": {}}, "all": {"children": ["ungrouped"]}}',
     ":1: the JSON that `ansible-inventory --list` or an inventory script prints (key _meta)"),
])
def test_dynamic_inventory_is_named_with_the_command_that_makes_a_file(tmp_path, name, text, needle):
    """Before: 'expected key=value host variable, got ...', 'group plugin must be a mapping ...', 'group _meta has
    unknown key hostvars': nothing said what the file is or what to do."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o755)
    inv.unlink()
    res = run_pytest(tmp_path, "--inventory", str(path), "--reports", str(tmp_path / "rep"))
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    err = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"ERROR: {path}{needle}"), res.stderr
    assert "ansible-inventory -i " in err[0] and "--list --yaml > fleet.yml" in err[0]
    assert "Traceback" not in res.stdout + res.stderr and not (tmp_path / "rep").exists()


def test_the_suggested_command_turns_a_script_into_a_file_gpuaccept_reads(tmp_path):
    """The way out the refusal names works: ansible-inventory runs the script, gpuaccept reads its --yaml."""
    script = tmp_path / "inventory.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    assert ANSIBLE_INVENTORY, "ansible-inventory not found (pip install -e '.[test]' installs ansible-core)"
    out = subprocess.run([ANSIBLE_INVENTORY, "-i", str(script), "--list", "--yaml"], capture_output=True, text=True,
                         env=_ansible_env(tmp_path), timeout=120, check=True).stdout
    (tmp_path / "fleet.yml").write_text(out)
    inv = load_inventory(str(tmp_path / "fleet.yml"))
    assert [(h.name, h.address, h.vars["gpus_per_node"]) for h in inv.hosts.values()] == [("d1", "10.1.0.1", 8),
                                                                                          ("d2", "d2", 8)]


def test_inventory_folder_is_read_as_ansible_reads_it(tmp_path):
    """``--inventory inventories/prod/`` (Ansible's folder form) with one inventory file and group_vars beside
    it: read as that file, as ``ansible-inventory -i inventories/prod/`` does. Before: 'is a directory, not a
    inventory file'. A folder of several inventories (Ansible merges them) is refused naming them."""
    prod = tmp_path / "inventories" / "prod"
    (prod / "group_vars").mkdir(parents=True)
    (prod / "hosts").write_text("[gpu]\ng[1:2]\n")
    (prod / "group_vars" / "gpu.yml").write_text("gpus_per_node: 8\n")
    (prod / "README.md").write_text("ignored by Ansible (INVENTORY_IGNORE_EXTS)\n")
    (prod / ".hosts.swp").write_text("ignored by Ansible (hidden)\n")
    inv = load_inventory(str(prod))
    oracle = json.loads(subprocess.run([ANSIBLE_INVENTORY, "-i", str(prod), "--list"], capture_output=True, text=True,
                                       env=_ansible_env(tmp_path), timeout=120, check=True).stdout)
    assert sorted(inv.hosts) == sorted(oracle["_meta"]["hostvars"]) == ["g1", "g2"]
    assert all(h.vars["gpus_per_node"] == oracle["_meta"]["hostvars"][h.name]["gpus_per_node"] == 8
               for h in inv.hosts.values())
    (prod / "extra.yml").write_text("all:\n  hosts:\n    g3:\n")
    with pytest.raises(InventoryError) as err:
        load_inventory(str(prod))
    assert str(err.value).startswith(f"{prod}: an inventory folder holding 2 entries (extra.yml, hosts); Ansible "
                                     f"merges them, gpuaccept reads one inventory file: pass --inventory {prod}/extra.yml")


def test_an_inventory_from_a_pipe_is_read_once_for_every_xdist_worker(tmp_path):
    """``pytest --inventory <(ansible-inventory -i aws_ec2.yml --list --yaml) -n 2``: the controller read the
    pipe, then each worker tried to read /dev/fd/N again and crashed (8 crashed workers, tracebacks, exit 5).
    The workers now get the text the controller read. A real pipe: an os.pipe() whose read end the command
    inherits, as bash's process substitution gives it."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.unlink()
    r, w = os.pipe()
    os.write(w, b"[gpu]\np1 ansible_connection=local\np2 ansible_connection=local\n")
    os.close(w)
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "--inventory", f"/dev/fd/{r}", "-n", "2", "-m", "health",
                               "-k", "gpu_inventory", "--reports", str(tmp_path / "rep"), "--history", "none"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=240, pass_fds=(r,))
    finally:
        os.close(r)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr and "crashed" not in proc.stdout
    assert sorted(json.loads((tmp_path / "rep" / "results.json").read_text())["hosts"]) == ["p1", "p2"]
