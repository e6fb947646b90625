"""Faults found by the fourth new-user trial (2026-11-30), on the input side: inventories as fleets write them
(checked against ansible-core itself), and connection files that made every host fail one by one.

- A connection var written both ways (``ansible_host`` and the older ``ansible_ssh_host``; port, user, key
  likewise): Ansible connects with the ``ansible_ssh_*`` value whatever the precedence, gpuaccept took the
  other one, so it tested another machine (or logged in as another user) than the operator's playbooks reach.
- An inventory script, an inventory plugin configuration, ``ansible-inventory --list`` JSON, an inventory
  folder: refused with misleading lines ("expected key=value host variable", "group plugin must be a
  mapping", "is a directory") and no way forward.
- A public key as ``ansible_ssh_private_key_file``, a ``--known-hosts`` file that does not exist, and an
  ``ansible_ssh_common_args`` that cannot be split: every host was contacted and each got the same ERROR
  (exit 1); now one line and exit 4 before any node is touched.
"""
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


@pytest.fixture(scope="module")
def watched_node(tmp_path_factory):
    """An sshd that logs every connection (LogLevel VERBOSE: 'Connection from ...')."""
    from sshd import start_sshd, write_known_hosts
    base = tmp_path_factory.mktemp("watched")
    import time
    node = start_sshd(base, address="127.0.0.71", name="w1", log_level="VERBOSE")
    kh = write_known_hosts(base / "known_hosts", [node])
    deadline = time.monotonic() + 10  # the rig's own readiness probe connects once: let its lines be written
    while "Connection closed" not in node.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    yield node, kh
    node.stop()


def _connections(node) -> int:
    return node.log().count("Connection from")


@pytest.mark.parametrize("case", ["public key", "key folder", "known-hosts missing", "known_hosts var missing",
                                  "unsplittable ssh args", "bad jump port"])
def test_connection_files_are_checked_before_any_node(tmp_path, watched_node, case):
    node, kh = watched_node
    key = node.key_file
    args, extra, needle = [], "", ""
    if case == "public key":
        key, needle = key + ".pub", f"ansible_ssh_private_key_file {key}.pub is a public key (an OpenSSH .pub line)"
    elif case == "key folder":
        key, needle = str(tmp_path), f"ansible_ssh_private_key_file {tmp_path} is a folder, not a key file"
    elif case == "known-hosts missing":
        args = ["--known-hosts", str(tmp_path / "nope")]
        needle = f"--known-hosts {tmp_path / 'nope'}: does not exist; to record host keys there on first use"
    elif case == "known_hosts var missing":
        extra, needle = f" ansible_ssh_known_hosts_file={tmp_path / 'nope'}", "ansible_ssh_known_hosts_file"
    elif case == "unsplittable ssh args":
        extra = " ansible_ssh_common_args=\"-o ProxyCommand='ssh -W %h:%p bastion\""
        needle = "var ansible_ssh_common_args: cannot split"
    else:
        extra = " ansible_ssh_common_args='-J ops@bastion:22x'"
        needle = "var ansible_ssh_common_args: ProxyJump 'ops@bastion:22x'"
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(node.inventory_line().replace(node.key_file, key) + extra + "\n")
    before = _connections(node)
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", kh, *args, "-m", "health",
                     "--reports", str(tmp_path / "rep"))
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    err = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and needle in err[0], res.stderr
    if not args:
        assert err[0].startswith(f"ERROR: {inv}:1: host w1"), err
    assert "Traceback" not in res.stdout + res.stderr and not (tmp_path / "rep").exists()
    assert _connections(node) == before, node.log()[-1000:]


def test_the_same_node_is_reached_when_its_files_are_right(tmp_path, watched_node):
    """The control for the test above: the same inventory with the right files connects (exit 0)."""
    node, kh = watched_node
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(node.inventory_line() + " ansible_ssh_common_args='-o StrictHostKeyChecking=no'\n")
    before = _connections(node)
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", kh, "-m", "health", "-k", "gpu_inventory",
                     "--reports", str(tmp_path / "rep"))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert _connections(node) > before


@pytest.mark.parametrize("option", ["--inventory=", "--limit=", "--limit= ", "--reports=", "--thresholds=",
                                    "--known-hosts=", "--sku="])
def test_an_empty_option_is_refused_not_taken_for_its_default(tmp_path, option):
    """``--inventory=$INVENTORY`` with the variable unset: before, the run fell back to inventory/localhost.ini,
    tested the controller itself and exited 0 (a green CI job that tested no node); ``--limit=`` selected every
    host (as Ansible's ``-l ''``), so a burn-in meant for a few drained hosts started on the whole fleet."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("h1 ansible_connection=local\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "-m", "health", "--reports", str(tmp_path / "rep"), option)
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    flag = option.split("=")[0]
    assert f"ERROR: {flag} is empty: an unset variable on the command line?" in res.stderr, res.stderr
    assert "Traceback" not in res.stdout + res.stderr and not (tmp_path / "rep").exists()


def test_a_semicolon_comment_after_a_host_says_how_to_write_it(tmp_path):
    """Ansible and gpuaccept both refuse ``n1 ansible_host=10.0.0.1 ; rack 3``; the line now says why."""
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu]\nn1 ansible_host=10.0.0.1 ; rack 3\n")
    with pytest.raises(InventoryError) as err:
        load_inventory(str(inv))
    assert str(err.value) == (f"{inv}:2: expected key=value host variable, got ';'; ';' starts a comment only at the "
                              f"start of a line (as in Ansible): write '#'")


REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("old,new,line,needle", [
    # a misspelt field: the requirement silently dropped (an unreadable ECC reading recorded, not failed)
    ("required_nvml: [ecc, remapped_rows,", "required_nvml: [ecc, remaped_rows,", 21,
     "expect.required_nvml: unknown field 'remaped_rows' (known: application_clocks, ecc,"),
    # quoted: text, so true: MIG expected on, every GPU test of a healthy card blocked by preflight
    ("mig_mode: false", 'mig_mode: "false"', 16, "expect.mig_mode: expected true or false, got str 'false'"),
    ("ecc: true", "ecc: yes please", 19, "expect.ecc: expected true or false, got str 'yes please'"),
    ("  pcie_gen: 5\n", "  pcie_gen: Gen5\n", 12, "expect.pcie_gen: expected a whole number >= 0, got 'Gen5'"),
    ("gpus_per_node: 8 ", "gpus_per_node: 8.5 ", 11, "expect.gpus_per_node: expected a whole number >= 0, got 8.5"),
    ("nccl_transport: P2P", "nccl_transport: [P2P]", 22, "expect.nccl_transport: expected text such as P2P"),
    # a negative floor passes every figure: the check switched off
    ("bf16_tflops: {min: 600,", "bf16_tflops: {min: -600,", 46, "checks.bf16_tflops.min: -600 is negative "
                                                                "(every figure would pass)"),
])
def test_threshold_file_expect_values_are_typed(tmp_path, old, new, line, needle):
    """Before: each of these loaded, and the judges read the value by its truth or not at all."""
    from gpuaccept.errors import ThresholdError
    from gpuaccept.config.thresholds import load_sku_file
    text = (REPO / "thresholds" / "h200-sxm-141gb.yaml").read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "h200-sxm-141gb.yaml"
    path.write_text(text.replace(old, new))
    with pytest.raises(ThresholdError) as err:
        load_sku_file(str(path))
    assert str(err.value).startswith(f"{path}:{line}: {needle}"), str(err.value)
    path.write_text(text)
    assert load_sku_file(str(path)).expect["mig_mode"] is False  # the file as shipped loads


def test_every_shipped_threshold_file_passes_the_typed_expect_check():
    from gpuaccept.config.thresholds import load_all
    assert len(load_all(str(REPO / "thresholds"))) >= 14


@pytest.mark.parametrize("value,needle", [
    ("[2001:db8::7]", "write the IPv6 address without brackets (2001:db8::7)"),
    ("[::1]:2200", "write the IPv6 address without brackets (::1), and 2200 in ansible_port"),
    ('"10.0.0.4 "', "holds whitespace"),
    ('""', "is empty"),
])
def test_an_address_no_connection_can_use_is_refused_at_load(tmp_path, value, needle):
    """Before: loaded, then every test of the host was an ERROR "cannot resolve [::1]" (ansible fails the same
    way: "Could not resolve hostname [::1]"), after the other hosts had been contacted."""
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu]\nv6 ansible_host={value}\n")
    with pytest.raises(InventoryError) as err:
        load_inventory(str(inv))
    assert str(err.value).startswith(f"{inv}:2: host v6 ansible_host ") and str(err.value).endswith(needle), err.value
    inv.write_text("[gpu]\nv6 ansible_host=2001:db8::7\n[2001:db8::8]:2200\n")  # the forms that work
    assert [(h.address, h.port) for h in load_inventory(str(inv)).hosts.values()] == [("2001:db8::7", 22),
                                                                                      ("2001:db8::8", 2200)]


def test_a_limit_mixing_commas_and_colons_says_how_ansible_reads_it(tmp_path):
    """Ansible splits a pattern on commas only when it has one, so in 'gpu:!drained,!g1' the first term is the
    name 'gpu:!drained', which matches nothing (Ansible warns, then finds no host). Before: "term 'gpu:!drained'
    names no group or host", which read as if the group were missing."""
    from gpuaccept.errors import PatternError
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu]\ng[1:4]\n[drained]\ng2\n")
    with pytest.raises(PatternError) as err:
        load_inventory(str(inv)).select("gpu[0:2]:!drained,!g1")
    assert str(err.value).endswith("(with a comma in the pattern, ':' does not separate terms, as in Ansible: write "
                                   "'gpu[0:2],!drained,!g1')"), err.value
    assert [h.name for h in load_inventory(str(inv)).select("gpu[0:2],!drained,!g1")] == ["g3"]


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


def test_known_hosts_option_naming_the_inventory_does_not_get_keys_written_into_it(tmp_path, watched_node):
    """``--known-hosts inventory.ini --accept-new-host-keys`` (two paths swapped): before, the run passed and the
    node's host key line was appended to the inventory, which the next run could no longer read."""
    node, _ = watched_node
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(node.inventory_line() + "\n")
    before = inv.read_text()
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", str(inv), "--accept-new-host-keys",
                     "-m", "health", "-k", "gpu_inventory", "--reports", str(tmp_path / "rep"))
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    assert f"ERROR: --known-hosts {inv}: is not a known_hosts file (line 1: 'w1 ansible_host=" in res.stderr, res.stderr
    assert inv.read_text() == before


@pytest.mark.parametrize("baseline", ["latest-pass", "20261130T000000Z"])
def test_a_baseline_without_a_history_is_refused(tmp_path, baseline):
    """``--baseline latest-pass --history none`` ran and listed no stand-out (nothing to compare with), exit 0;
    a run id said "no history database at none"."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text("h1 ansible_connection=local\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--baseline", baseline, "--history", "none", "-m", "health",
                     "--reports", str(tmp_path / "rep"))
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    assert (f"ERROR: --baseline {baseline} compares with runs of the history database, and --history none keeps "
            "none") in res.stderr, res.stderr


def test_one_ipv6_machine_written_two_ways_is_listed_once(tmp_path):
    """``2001:db8::1`` and ``2001:0db8:0:0::0001`` are one address: before, both hosts loaded and the machine was
    tested twice (two names for one node: the other node never tested)."""
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu]\na ansible_host=2001:db8::1\nb ansible_host=2001:0db8:0:0::0001\n")
    with pytest.raises(InventoryError) as err:
        load_inventory(str(inv))
    assert str(err.value) == f"{inv}: hosts a and b both resolve to 2001:0db8:0:0::0001:22; list each machine once"


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


def test_a_local_host_with_another_machines_address_is_refused(tmp_path):
    """``[all:vars] ansible_connection=local`` left in a fleet inventory: before, every node's tests ran on the
    controller and were filed under the node's name (16 nodes, none touched). An address of this machine
    (loopback), a name, or a replayed host stays allowed."""
    import socket
    far = "203.0.113.77"  # TEST-NET-3 (RFC 5737): on no interface of this machine, checked here
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s, pytest.raises(OSError):
        s.bind((far, 0))
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"[gpu]\nn1 ansible_host=127.0.0.5\nn2 ansible_host={far}\nn3 ansible_host=n3.example\n"
                   "[all:vars]\nansible_connection=local\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "-m", "health", "--reports", str(tmp_path / "rep"))
    assert res.returncode == 4, res.stdout[-2000:] + res.stderr[-2000:]
    assert (f"ERROR: {inv}:3: host n2: ansible_host {far} is another machine, but ansible_connection=local (at "
            f"{inv}:6) runs its probes on this controller") in res.stderr, res.stderr
    res = run_pytest(tmp_path, "--inventory", str(inv), "--limit", "n1,n3", "--list-hosts")
    assert res.returncode == 0 and "n1" in res.stdout and "n3" in res.stdout, res.stdout + res.stderr


def test_a_first_run_against_an_unknown_host_key_reads_once_in_the_summary(tmp_path, watched_node):
    """The first thing an operator meets on a new fleet: the host key not yet trusted. summary.md's host line
    repeated the same sentence for three tests, then "+9 more"; now the sentence once, with the test count."""
    node, _ = watched_node
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(node.inventory_line() + "\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "-m", "health", "--reports", str(rep), "--history", "none")
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    line = next(ln for ln in (rep / "summary.md").read_text().splitlines() if ln.startswith("- **ERROR** `w1`"))
    assert re.fullmatch(r"- \*\*ERROR\*\* `w1`: test_gpu_inventory and \d+ more tests: w1: unknown host key for "
                        r"\[127\.0\.0\.71\]:\d+ \(ssh-ed25519 SHA256:\S+\); to trust it on first use rerun with "
                        r"--accept-new-host-keys, or add it to known_hosts", line), line


def test_same_reason_once_keeps_other_reasons_in_order():
    from gpuaccept.reporting.verdicts import same_reason_once
    assert same_reason_once(["test_a: h: unreachable", "compute/bf16_tflops gpu0: 500 TFLOP/s vs min 600",
                             "test_b: h: unreachable", "test_c: other"]) == [
        "test_a and 1 more test: h: unreachable", "compute/bf16_tflops gpu0: 500 TFLOP/s vs min 600", "test_c: other"]
