"""gpuaccept.config.inventory, checked against ``ansible-inventory --list`` (test-only oracle)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaccept.errors import InventoryError
from gpuaccept.config.inventory import Host, load_inventory
from project_helpers import make_project, run_pytest

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "inventories"
REPO = HERE.parent
# ansible-core is a test dependency (pyproject.toml [test]): on PATH, or beside this interpreter in its venv
ANSIBLE_INVENTORY = (shutil.which("ansible-inventory")
                     or shutil.which("ansible-inventory", path=os.path.dirname(sys.executable)))

# Keys ansible-inventory may add on its own; none of them comes from the file.
ANSIBLE_ADDED = {"inventory_file", "inventory_dir", "inventory_hostname", "inventory_hostname_short",
                 "group_names", "groups", "playbook_dir", "omit", "ansible_version"}


def inventory_files() -> list[Path]:
    """Every inventory under tests/inventories (not the vars files), plus the shipped examples."""
    found = []
    for root, dirs, files in os.walk(FIXTURES):
        dirs[:] = sorted(d for d in dirs if d not in ("group_vars", "host_vars"))
        found += [Path(root) / f for f in sorted(files)]
    found += sorted((REPO / "inventory").glob("*.ini")) + sorted((REPO / "inventory").glob("*.yml"))
    return found


FILES = inventory_files()
IDS = [str(p.relative_to(REPO)) for p in FILES]


@functools.lru_cache(maxsize=None)
def oracle(path: str) -> tuple[dict, dict[str, set[str]]]:
    """(hostvars, group -> transitive host set) as ansible-inventory prints them."""
    assert ANSIBLE_INVENTORY, "ansible-inventory not found (pip install -e '.[test]' installs ansible-core)"
    proc = subprocess.run([ANSIBLE_INVENTORY, "-i", path, "--list"], capture_output=True, text=True,
                          env={**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    direct = {k: v for k, v in data.items() if k != "_meta"}

    def members(group: str) -> set[str]:
        entry = direct.get(group, {})
        hosts = set(entry.get("hosts", []))
        for child in entry.get("children", []):
            hosts |= members(child)
        return hosts

    return data["_meta"]["hostvars"], {g: members(g) for g in direct}


def test_fixture_set_is_big_enough():
    assert len([p for p in FILES if FIXTURES in p.parents]) >= 10


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_hosts_match_ansible(path):
    inv = load_inventory(str(path))
    _, groups = oracle(str(path))
    assert set(inv.hosts) == groups["all"]
    assert set(inv.groups["all"]) == groups["all"]
    assert len(inv.groups["all"]) == len(inv.hosts)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_groups_match_ansible(path):
    inv = load_inventory(str(path))
    _, groups = oracle(str(path))
    for name, hosts in groups.items():
        assert set(inv.groups[name]) == hosts, name
    for name, hosts in inv.groups.items():
        # ansible-inventory leaves out groups with no host; we keep them, empty.
        assert name in groups or hosts == [], name
    for host in inv.hosts.values():
        assert set(host.groups) == {g for g, hs in inv.groups.items() if host.name in hs}
        assert host.groups[0] == "all"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_vars_match_ansible(path):
    inv = load_inventory(str(path))
    hostvars, _ = oracle(str(path))
    for name, host in inv.hosts.items():
        expected = {k: v for k, v in hostvars.get(name, {}).items() if k not in ANSIBLE_ADDED}
        assert dict(host.vars) == expected, name


# ------------------------------------------------------------ specific values


def test_ranges_expand_like_ansible():
    inv = load_inventory(str(FIXTURES / "ranges.ini"))
    assert inv.groups["gpu"] == [f"gpu{n:03d}" for n in range(1, 13)]
    assert inv.groups["cpu"] == ["cpua", "cpub", "cpuc", "cpud", "cpue", "cpuX", "cpuY", "cpuZ"]
    assert inv.groups["odd"] == ["odd1", "odd3", "odd5", "odd7", "odd9", "odd11"]
    assert inv.groups["grid"] == ["r1na", "r1nb", "r1nc", "r2na", "r2nb", "r2nc"]
    assert inv.groups["fromzero"] == ["z0", "z1", "z2", "z3"]
    assert inv.groups["letters_step"] == ["la", "lf", "lk"]
    assert inv.groups["unpadded_end"] == ["u8", "u9", "u10", "u11"]


def test_inline_values_are_python_literals_or_text():
    v = load_inventory(str(FIXTURES / "children_vars.ini")).hosts
    assert v["gpu02"].vars["note"] == "two words" and v["gpu02"].vars["quoted"] == "single"
    assert v["gpu03"].vars["literal_list"] == [1, 2] and v["gpu03"].vars["literal_dict"] == {"a": 1}
    assert v["gpu03"].vars["flag"] is True and v["gpu03"].vars["nothing"] is None
    g4 = v["gpu04"].vars
    assert (g4["ratio"], g4["hexa"], g4["leading"], g4["yes_word"], g4["empty"], g4["hashed"]) == (1.5, 16, "010", "yes", "", "a # b")
    assert g4["gpus_per_node"] == 8 and g4["quoted_var"] == "quoted value" and g4["not_literal"] == "a # b"
    assert g4["concat"] == "xy" and g4["spaced"] == "several words here"


def test_host_connection_fields():
    inv = load_inventory(str(FIXTURES / "children_vars.ini"))
    g2 = inv.hosts["gpu02"]
    assert (g2.address, g2.port, g2.user, g2.connection, g2.python) == ("10.0.0.2", 2222, "root", "ssh", "python3")
    assert inv.hosts["gpu01"].user == "ops" and inv.hosts["login01"].user == "root"  # host over [all:vars]
    local = load_inventory(str(FIXTURES / "local.ini")).hosts
    assert local["localhost"].connection == "local" and local["also_local"].connection == "local"
    assert local["r1"].connection == "ssh" and local["r2"].connection == "ssh" and local["r2"].port == 2200
    assert local["r1"].key_file == os.path.expanduser("~/.ssh/id_gpu")
    assert local["r1"].vars["ansible_ssh_private_key_file"] == "~/.ssh/id_gpu"  # vars stay as Ansible has them


def test_port_suffix_and_ungrouped():
    inv = load_inventory(str(FIXTURES / "ungrouped.ini"))
    assert inv.hosts["loose02"].port == 2201 and inv.hosts["loose02"].address == "loose02"
    assert inv.groups["ungrouped"] == ["loose01", "loose02", "explicit01", "direct01"]
    assert "ungrouped" not in inv.hosts["moved01"].groups
    assert inv.groups["empty"] == []
    assert inv.hosts["w01"].python == "/usr/bin/python3"
    assert list(inv.hosts) == ["loose01", "loose02", "moved01", "direct01", "explicit01", "w01"]


def test_precedence_depth_priority_and_files():
    n = load_inventory(str(FIXTURES / "nested3.ini")).hosts
    assert n["n01"].vars["level"] == "rack_a1" and n["n03"].vars["level"] == "row_a" and n["n04"].vars["level"] == "hall"
    assert n["n01"].vars["sib"] == "zz"  # aa_sibling and zz_sibling at depth 1: alphabetical, later wins
    assert n["n04"].vars["sib"] == "mid"  # ansible_group_priority=10 beats the name order
    assert "ansible_group_priority" not in n["n04"].vars
    assert n["n04"].vars["owner"] == "zz_depth1"  # hall and zz_sibling both depth 1: name order
    assert n["n04"].vars["level"] == "hall"  # rack_b1 and row_b set no level; depth 3 and 2 don't matter
    g = load_inventory(str(FIXTURES / "gv" / "hosts.ini")).hosts
    assert g["gpu001"].vars["from"] == "host_file"
    assert g["gpu002"].vars["from"] == "all_file"  # group_vars/all beats [rack1:vars], as in Ansible
    assert g["gpu004"].vars["from"] == "host_json" and g["gpu004"].address == "10.9.0.4"
    assert g["gpu003"].vars["dir_order"] == "third" and g["gpu003"].vars["from_json"] is True
    assert "ignored" not in g["gpu001"].vars and "not" not in g["gpu003"].vars


def test_yaml_types_and_detection():
    c = load_inventory(str(FIXTURES / "cluster.yml")).hosts
    assert c["gpu001"].vars["tuned"] is True and c["gpu001"].vars["started"] == "2024-03-01"
    assert c["gpu-special"].port == 2222 and c["gpu-special"].address == "10.1.1.99"
    assert c["gpu005"].groups == ("all", "gpu", "rack2", "drained")
    assert load_inventory(str(FIXTURES / "noext" / "yamlhosts")).groups["gpu"] == ["y1", "y2"]
    assert load_inventory(str(FIXTURES / "noext" / "hosts")).groups["gpu"] == ["gpu1", "gpu2", "gpu3"]


def test_examples_describe_the_same_cluster():
    ini = load_inventory(str(REPO / "inventory" / "example.ini"))
    yml = load_inventory(str(REPO / "inventory" / "example.yml"))
    assert ini.hosts == yml.hosts
    assert len(ini.hosts) == 16 and ini.groups["drained"] == ["gpu007", "gpu013"]
    assert all(h.vars["gpu_sku"] == "h200-sxm-141gb" and h.vars["gpus_per_node"] == 8 for h in ini.hosts.values())


def test_localhost_inventory():
    inv = load_inventory(str(REPO / "inventory" / "localhost.ini"))
    assert inv.hosts == {"localhost": Host("localhost", "localhost", 22, None, None, "local", "python3",
                                           {"ansible_connection": "local"}, ("all", "ungrouped"))}
    text = (REPO / "inventory" / "localhost.ini").read_text().splitlines()
    assert [l for l in text if not l.startswith("#")] == ["localhost ansible_connection=local"]


def test_hosts_are_hashable():
    inv = load_inventory(str(FIXTURES / "cluster.yml"))
    assert len(set(inv.hosts.values())) == len(inv.hosts)


# ------------------------------------------------------------ errors


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def load_error(path: Path) -> str:
    with pytest.raises(InventoryError) as exc:
        load_inventory(str(path))
    msg = str(exc.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


INI_ERRORS = [
    ("h0\nh1 novalue\n", 2, "key=value"),
    ("[g:foo]\nh\n", 1, "unknown type"),
    ("[g\nh\n", 1, "malformed section"),
    ("[g]]\n", 1, "malformed section"),
    ("\n\nx[3:1]\n", 3, "begin is after end"),
    ("x[b:a]\n", 1, "begin is after end"),
    ("x[01:3]\n", 1, "same length"),
    ("x[a:3]\n", 1, "both be numbers"),
    ("x[1:5:0]\n", 1, "step"),
    ("x[3:]\n", 1, "no end"),
    ("x[1:3\n", 1, "unbalanced"),
    ("x[1]\n", 1, "begin:end"),
    ('h a="unterminated\n', 1, "cannot split"),
    ("[g:children]\nnowhere\n", 2, "nowhere"),
    ("[g]\nh\n[g:vars]\nnovalue\n", 4, "key=value"),
    ("[g]\nh\n[g:vars]\nansible_group_priority=high\n", 4, "ansible_group_priority"),
    ("h:abc:22x\n", 1, "bad host"),
    ("[g]\nh ansible_port=abc\n", 2, "host h ansible_port must be an integer"),
    ("[g]\nh\n[g:vars]\nansible_port=22x\n", 4, "host h ansible_port must be an integer"),
    ("h ansible_port=70000\n", 1, "not a TCP port"),
    ("h ansible_connection=docker\n", 1, "ansible_connection"),
    ("[g]\nh ansible_host='{{ lookup(\"env\", \"X\") }}'\n", 2, "var ansible_host holds a Jinja template"),
    ("[g]\nh\n[g:vars]\ngpu_sku={% if x %}a{% endif %}\n", 4, "var gpu_sku holds a Jinja template"),
    ("[g]\nh\n[g:vars]\nansible_user={{ who }}\n", 4, "gpuaccept does not render templates"),
    # Ansible keeps a range in a var as text and then fails to connect; refused, naming the host
    ("[g]\nn1 ansible_host=10.0.0.[1:3]\n", 2, "host n1 var ansible_host holds a host range"),
    ("[g]\nh\n[g:vars]\nnccl_master_addr=10.1.0.[01:04]\n", 4, "host h var nccl_master_addr holds a host range"),
    # host and group names become folder names in the reports and in group_vars/host_vars
    ("../../../x\n", 1, "slash"),
    ("[g]\na..b ansible_host=10.0.0.1\n", 2, "'..'"),
    ("[../x]\nh\n", 1, "bad group name"),
    ("[g]\nh\x01 x=1\n", 2, "control character U+0001"),
    ("[g]\nn1\n.  ansible_host=10.0.0.2\n", 3, "the reports' probes folder itself"),
    # the reports' name for the fleet-wide tests, also through a range
    ("[g]\nfleet ansible_host=10.0.0.1\n", 2, "'fleet' is reserved"),
    ("[g]\nflee[s:u]\n", 2, "'fleet' is reserved"),
    ("[g]\nh x=\x1b[31m\n", 2, "control character U+001B"),
    # expansion is counted before anything is built
    ("node[0:99999999]\n", 1, "more than 100,000 hosts"),
    ("\nn[0:999]x[0:999]\n", 2, "more than 100,000 hosts"),
    ("n[00000000000000000000:99999999999999999999]\n", 1, "more than 100,000 hosts"),
    # a key written twice
    ("h a=1 a=2\n", 1, "written twice"),
    ("[g]\nh\n[g:vars]\nx=1\ny=2\nx=3\n", 6, "sets x twice (first on line 4)"),
    # Ansible refuses these too
    ("[g:vars]\nx=1\n", 1, "defined nowhere"),
    ("h:99999999\n", 1, "not a TCP port"),
]


@pytest.mark.parametrize("text,line,needle", INI_ERRORS, ids=[e[2] + "-" + str(i) for i, e in enumerate(INI_ERRORS)])
def test_ini_errors_name_file_and_line(tmp_path, text, line, needle):
    path = write(tmp_path, "hosts.ini", text)
    msg = load_error(path)
    assert msg.startswith(f"{path}:{line}: "), msg
    assert needle in msg


YAML_ERRORS = [
    ("all:\n  hosts:\n    a: [1\n", 4, "YAML error"),
    ("all:\n  hosts:\n\tb:\n", 3, "YAML error"),
    ("- a\n- b\n", 1, "must be a mapping of group names"),
    ("gpu:\n  - h1\n", 1, "group gpu must be a mapping"),
    ("gpu:\n  host:\n    h1:\n", 2, "unknown key 'host'"),
    ("gpu:\n  hosts:\n    - h1\n", 2, "hosts of group gpu must be a mapping"),
    ("gpu:\n  hosts:\n    h1: fast\n", 3, "vars of host h1 must be a mapping"),
    ("gpu:\n  hosts:\n    h[5:1]:\n", 3, "begin is after end"),
    ("gpu:\n  vars:\n    x: 1\n  hosts:\n    h1:\n      ansible_port: [22]\n", 6, "host h1 ansible_port must be an integer"),
    ("gpu:\n  hosts:\n    h1:\n      ansible_host: \"{{ ip }}\"\n", 4, "var ansible_host holds a Jinja template"),
    ("gpu:\n  hosts:\n    h1:\n      secret: !vault |\n        $ANSIBLE_VAULT;1.1;AES256\n", 4, "!vault"),
    ("gpu:\n  children:\n    sub:\n      children:\n        gpu:\n", 0, "cycle"),
    ("all:\n  hosts:\n    h1:\n      a: 1\n      b: 2\n      a: 3\n", 6, "key 'a' written twice"),
    ("all:\n  children:\n    g:\n  children:\n    h:\n", 4, "key 'children' written twice"),
    ("all:\n  vars:\n    nccl_internode_busbw_gbps: .inf\n", 3, "not a finite number"),
    ("all:\n  vars:\n    x: [1, .nan]\n", 3, "not a finite number"),
    ("all:\n  hosts:\n    ../x:\n", 3, "slash"),
    ("all:\n  hosts:\n    \".\":\n", 3, "the reports' probes folder itself"),
    ("all:\n  children:\n    gpu:\n      hosts:\n        n1:\n        fleet:\n", 6, "'fleet' is reserved"),
    ("all:\n  hosts:\n    \"n\\x07\":\n", 3, "control character U+0007"),
    ("all:\n  hosts:\n    h[1:99999999]:\n", 3, "more than 100,000 hosts"),
    ("all:\n  hosts:\n    h1: {ansible_host: '10.0.0.[1:4]'}\n", 3, "holds a host range"),
    # a name that is its own address must be one ssh can be given; a '#' name is a comment in host lists
    ("all:\n  hosts:\n    ok:\n    \"n 1\":\n", 4, "a host name with whitespace"),
    # names a host list's line or a --limit pattern would split, whatever the address
    ("all:\n  hosts:\n    \"gpu 01\": {ansible_host: 10.0.0.1}\n", 3, "a host name with whitespace"),
    ("all:\n  hosts:\n    \"a,b\": {ansible_host: 10.0.0.1}\n", 3, "a host name with a comma"),
    ("all:\n  hosts:\n    \"-rf\":\n", 3, "starts with '-'"),
    ("all:\n  hosts:\n    \"-oProxyCommand=touch\":\n", 3, "'=' cannot be in a host name"),
    ("all:\n  hosts:\n    \"#dead\": {ansible_host: 10.0.0.1}\n", 3, "starting with '#'"),
    ("all: &a\n  children:\n    g: *a\n", 1, "alias refers to the mapping or list that contains it"),
    ("all:\n  vars:\n    x: " + "[" * 200 + "]" * 200 + "\n", 3, "nested deeper than"),
    ("all:\n  vars:\n    x: \x01\n", 3, "control character U+0001"),
    ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
     "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
     "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
     "h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\ni: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]\n", 1, "alias bomb"),
]


@pytest.mark.parametrize("text,line,needle", YAML_ERRORS, ids=[e[2] + "-" + str(i) for i, e in enumerate(YAML_ERRORS)])
def test_yaml_errors_name_file_and_line(tmp_path, text, line, needle):
    path = write(tmp_path, "hosts.yml", text)
    msg = load_error(path)
    assert msg.startswith(f"{path}:{line}: " if line else f"{path}: "), msg
    assert needle in msg


def test_missing_file(tmp_path):
    msg = load_error(tmp_path / "nope.ini")
    assert msg == f"{tmp_path / 'nope.ini'}: no such inventory file"


def test_directory_without_an_inventory_file_is_refused(tmp_path):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "README.md").write_text("notes\n")
    assert load_error(tmp_path) == f"{tmp_path}: an inventory folder with no inventory file in it"


def test_undecodable_file(tmp_path):
    path = write(tmp_path, "hosts.ini", b"[gpu]\n\xff\xfe\n")
    assert load_error(path).startswith(f"{path}:2: not UTF-8")


def test_unreadable_path(tmp_path):
    # A path through a plain file fails to open for root too (chmod would not).
    path = write(tmp_path, "hosts.ini", "h\n") / "inner.ini"
    assert load_error(path).startswith(f"{path}: cannot read: ")


def test_bad_group_vars_file_names_its_own_path_and_line(tmp_path):
    inv = write(tmp_path, "hosts.ini", "[gpu]\nh1\n")
    gv = write(tmp_path, "group_vars/gpu.yml", "a: 1\nb: [\n")
    msg = load_error(inv)
    assert msg.startswith(f"{gv}:") and "YAML error" in msg
    gv.write_text("- just\n- a list\n")
    assert load_error(inv) == f"{gv}:1: a vars file must be a mapping, got list"


def test_templated_var_from_host_vars_names_that_file(tmp_path):
    inv = write(tmp_path, "hosts.ini", "[gpu]\nh1\n")
    hv = write(tmp_path, "host_vars/h1/10-conn.yml", "x: 1\nansible_python_interpreter: '{{ py }}'\n")
    assert load_error(inv).startswith(f"{hv}:2: host h1 var ansible_python_interpreter holds a Jinja template")


def test_interpreter_with_arguments_is_split_as_a_shell_splits_it_and_an_unclosed_quote_is_refused(tmp_path):
    """``ansible_python_interpreter`` is a command, as Ansible runs it: ``/usr/bin/env python3`` loads (its words
    split where the command is made, gpuaccept.transport.shell.interpreter_words); a value a shell could not split
    (an unclosed quote) is refused at its file and line."""
    from gpuaccept.transport.shell import interpreter_words
    inv = load_inventory(str(write(tmp_path, "ok.yml", "all:\n  hosts:\n    h1:\n"
                                                       "      ansible_python_interpreter: /usr/bin/env python3\n")))
    assert interpreter_words(inv.hosts["h1"].python) == ["/usr/bin/env", "python3"]
    assert interpreter_words("/opt/py/bin/python3") == ["/opt/py/bin/python3"]
    hv = write(tmp_path, "host_vars/h2.yml", "ansible_python_interpreter: \"/usr/bin/env 'python3\"\n")
    msg = load_error(write(tmp_path, "bad.ini", "[gpu]\nh2\n"))
    assert msg.startswith(f"{hv}:1: host h2 var ansible_python_interpreter ") and "quotation" in msg, msg

def test_templates_elsewhere_are_kept(tmp_path):
    inv = load_inventory(str(write(tmp_path, "hosts.ini", "h1 motd='{{ greeting }}'\n")))
    assert inv.hosts["h1"].vars["motd"] == "{{ greeting }}"


def test_duplicate_address_is_refused(tmp_path):
    path = write(tmp_path, "hosts.ini", "[gpu]\ngpu01 ansible_host=10.0.0.1\ngpu02 ansible_host=10.0.0.1 ansible_port=22\n")
    msg = load_error(path)
    assert "gpu01" in msg and "gpu02" in msg and "10.0.0.1:22" in msg
    path = write(tmp_path, "h2.ini", "node-a\n[g]\nx ansible_host=NODE-A\n")
    assert load_error(path).startswith(f"{path}:3: hosts node-a (at {path}:1) and x both resolve to NODE-A:22")
    # the address and port given in the ssh arguments are the ones connected to (the inventory's own vars win)
    path = write(tmp_path, "h3.ini", '[gpu]\ns1 ansible_host=127.0.0.71 ansible_port=5000\n'
                                     'alias ansible_ssh_common_args="-o HostName=127.0.0.71 -p 5000"\n'
                                     'own ansible_host=10.0.0.9 ansible_ssh_common_args="-o HostName=127.0.0.71 -p 5000"\n')
    assert load_error(path).startswith(f"{path}:3: hosts s1 (at {path}:2) and alias both resolve to 127.0.0.71:5000")
    assert set(load_inventory(str(write(tmp_path, "h4.ini", '[gpu]\ns1 ansible_host=127.0.0.71 ansible_port=5000\n'
                                        'own ansible_host=10.0.0.9 ansible_ssh_common_args="-o HostName=127.0.0.71 '
                                        '-p 5000"\n'))).hosts) == {"s1", "own"}
    # the first -p wins, as ssh reads its options (common args before extra args)
    path = write(tmp_path, "h5.ini", '[gpu]\na ansible_ssh_common_args="-o HostName=10.0.0.1 -p 2201"\n'
                                     'b ansible_ssh_common_args="-o HostName=10.0.0.1 -p 2201" ansible_ssh_extra_args="-p 2202"\n')
    assert load_error(path).startswith(f"{path}:3: hosts a (at {path}:2) and b both resolve to 10.0.0.1:2201")
    assert set(load_inventory(str(write(tmp_path, "h6.ini", '[gpu]\na ansible_ssh_common_args="-o HostName=10.0.0.1 -p 2202"\n'
                                        'b ansible_ssh_common_args="-o HostName=10.0.0.1 -p 2201" '
                                        'ansible_ssh_extra_args="-p 2202"\n'))).hosts) == {"a", "b"}


def test_same_address_on_other_ports_or_local_is_allowed(tmp_path):
    inv = load_inventory(str(write(tmp_path, "hosts.ini",
                                   "a ansible_host=10.0.0.1\nb ansible_host=10.0.0.1 ansible_port=2222\n"
                                   "l1 ansible_connection=local\nl2 ansible_connection=local ansible_host=l1\n")))
    assert [(h.address, h.port) for h in inv.hosts.values()] == [("10.0.0.1", 22), ("10.0.0.1", 2222), ("l1", 22), ("l1", 22)]


def test_empty_inventory_has_no_hosts(tmp_path):
    inv = load_inventory(str(write(tmp_path, "hosts.ini", "# nothing yet\n")))
    assert inv.hosts == {} and inv.groups == {"all": [], "ungrouped": []}


# ------------------------------------------------------------ Ansible semantics


def test_bracket_ipv6_host_with_port():
    inv = load_inventory(str(FIXTURES / "ipv6.ini"))
    h = inv.hosts["2001:db8::12"]
    assert (h.address, h.port, h.vars["gpu_sku"]) == ("2001:db8::12", 2200, "h200-sxm-141gb")
    assert inv.hosts["2001:db8::13"].port == 22


def test_merge_keys_may_be_overridden():
    r1 = load_inventory(str(FIXTURES / "merge.yml")).hosts["r1"]
    assert (r1.vars["a"], r1.vars["b"]) == (1, 3)


@pytest.mark.parametrize("name,text,line", [
    ("hosts.ini", "[gpu]\nn1\ngpu ansible_host=192.0.2.20\n[other]\ngpu\n", 3),
    ("hosts.ini", "gpu\n[gpu]\nn1\n", 1),
    ("hosts.yml", "all:\n  children:\n    rack:\n      hosts:\n        rack: {ansible_host: 192.0.2.30}\n", 5),
])
def test_host_with_the_name_of_a_group_is_refused(tmp_path, name, text, line):
    """Ansible warns, then puts the host's inline vars on the group (checked: every host of group gpu gets
    ansible_host=192.0.2.20); gpuaccept refuses the clash, naming the host's line."""
    path = write(tmp_path, name, text)
    msg = load_error(path)
    assert msg.startswith(f"{path}:{line}: host ") and "has the name of a group" in msg, msg


def test_vars_keep_their_origin(tmp_path):
    inv = write(tmp_path, "hosts.ini", "[gpu]\nh1 a=1\n[gpu:vars]\nb=2\n")
    write(tmp_path, "host_vars/h1.yml", "c: 3\n")
    h = load_inventory(str(inv)).hosts["h1"]
    assert (h.where("a"), h.where("b")) == (f"{inv}:2", f"{inv}:4")
    assert h.where("c") == f"{tmp_path / 'host_vars' / 'h1.yml'}:1" and h.where("zz", "?") == "?"


def test_limit_is_100000_hosts(tmp_path):
    ok = load_inventory(str(write(tmp_path, "a.ini", "n[1:100000]\n")))
    assert len(ok.hosts) == 100_000
    msg = load_error(write(tmp_path, "b.ini", "n[1:60000]\n\nm[1:60000]\n"))
    assert msg.startswith(f"{tmp_path / 'b.ini'}:3: more than 100,000 hosts"), msg


def test_same_range_listed_twice_counts_once(tmp_path):
    inv = load_inventory(str(write(tmp_path, "a.ini", "[a]\nn[1:60000]\n[b]\nn[1:60000]\n")))
    assert len(inv.hosts) == 60_000 and len(inv.groups["b"]) == 60_000


def test_deep_children_chain_is_no_recursion(tmp_path):
    """A chain of groups as deep as gpuaccept reads (100 below all) resolves without recursion; a deeper one
    (3,000: each group walks its descendants, time quadratic in the chain) is refused at once, naming the
    line of the deepest group."""
    from gpuaccept.config.inventory.resolve import MAX_NESTING

    lines = ["[g0]", "h"] + [f"[g{i + 1}:children]\ng{i}" for i in range(MAX_NESTING - 1)]
    inv = load_inventory(str(write(tmp_path, "deep.ini", "\n".join(lines) + "\n")))
    assert inv.hosts["h"].groups[:3] == ("all", "g0", "g1") and len(inv.hosts["h"].groups) == MAX_NESTING + 1
    lines = ["[g0]", "h"] + [f"[g{i + 1}:children]\ng{i}" for i in range(3000)]
    msg = load_error(write(tmp_path, "deeper.ini", "\n".join(lines) + "\n"))
    assert msg.startswith(f"{tmp_path / 'deeper.ini'}:1: group g0 is nested 3001 levels below all; gpuaccept "
                          f"reads at most {MAX_NESTING}"), msg


# -- values that can only fail later, names that deceive ----------------------------------
@pytest.mark.parametrize("line,needle", [
    ("h1 ansible_host=$(id)", "ansible_host '$(id)': '$' cannot be in a host name or IP address"),
    ("h1 ansible_host=10.0.0.1;reboot", "';' cannot be in a host name"),
    ("h1 ansible_host=-oProxyCommand=x", "'=' cannot be in a host name"),
    ("h1 ansible_host=-evil", "starts with '-'"),
    ("h1 'ansible_host=a b'", "holds whitespace"),
    ("h1 ansible_user=$(id)", "ansible_user '$(id)': cannot be a user name"),
    ("h1 'ansible_user=ops team'", "cannot be a user name"),
    ("h1 ansible_user=-l", "cannot be a user name"),
    ("h1 ansible_port=２２", "must be an integer in ASCII digits, got '２２'"),
    ("h1:２２", "bad host 'h1:２２'"),
    ("h1 ansible_ssh_port=٢٢", "must be an integer in ASCII digits"),
    ("h\u202e1", "U+202E (RIGHT-TO-LEFT OVERRIDE)"),
    ("gpu\u200b01", "U+200B (ZERO WIDTH SPACE)"),
    ("gpu\u2066x\u2069", "U+2066"),
    ("gpu\ufeff1", "U+FEFF"),
])
def test_values_and_names_refused_at_load(tmp_path, line, needle):
    msg = load_error(write(tmp_path, "inv.ini", f"[gpu]\n{line}\n"))
    assert msg.startswith(f"{tmp_path / 'inv.ini'}:2: ") and needle in msg, msg


def test_bidi_control_in_a_group_name_refused(tmp_path):
    msg = load_error(write(tmp_path, "inv.ini", "[gpu\u202e]\nh1\n"))
    assert ":1: bad group name" in msg and "U+202E" in msg, msg


@pytest.mark.parametrize("line,user,address,port", [
    ("h1 ansible_host=fe80::1%eth0 ansible_user=svc$", "svc$", "fe80::1%eth0", 22),
    ("h1 ansible_host=node-1.example.com ansible_user=ops@CORP.EXAMPLE ansible_port=2222", "ops@CORP.EXAMPLE",
     "node-1.example.com", 2222),
    ("h1 ansible_host=10.0.0.1 ansible_user=CORP\\\\ops", "CORP\\ops", "10.0.0.1", 22),
    ("grüße01 ansible_user=jürgen", "jürgen", "grüße01", 22),  # other non-ASCII letters stay allowed
])
def test_real_addresses_and_users_load(tmp_path, line, user, address, port):
    h = next(iter(load_inventory(str(write(tmp_path, "inv.ini", f"[gpu]\n{line}\n"))).hosts.values()))
    assert (h.user, h.address, h.port) == (user, address, port)


def test_nccl_master_addr_must_be_an_address(tmp_path):
    from gpuaccept.config.hostvars import HostVarError, check_hosts

    inv = load_inventory(str(write(tmp_path, "inv.ini", "[gpu]\nh1 nccl_master_addr='a(b)'\n")))
    with pytest.raises(HostVarError, match=r"inv.ini:2: host h1 var nccl_master_addr: 'a\(b\)': '\(' cannot be"):
        check_hosts(inv.select(None), str(tmp_path / "inv.ini"))


def test_did_you_mean_is_asked_once_per_name(tmp_path):
    """2,000 hosts carrying the same ten variables of the operator's own: the near-miss check
    compares each name with gpuaccept's once, not once per host."""
    from gpuaccept.config import hostvars

    own = ("rack_slot", "pdu_feed", "asset_tag", "row_label", "cooling_loop", "switch_port", "bmc_address",
           "purchase_order", "warranty_end", "owner_team")
    text = "[gpu]\n" + "".join(f"g{i} ansible_connection=local " + " ".join(f"{v}={i}" for v in own) + "\n"
                               for i in range(2000))
    inv = load_inventory(str(write(tmp_path, "inv.ini", text)))
    hostvars._near_miss.cache_clear()
    hostvars.check_hosts(inv.select(None), str(tmp_path / "inv.ini"))
    info = hostvars._near_miss.cache_info()
    unknown = {v for h in inv.select(None) for v in h.vars if v not in hostvars.VARS}  # own + ansible_connection
    assert len(unknown) == len(own) + 1
    assert info.misses == len(unknown) and info.hits == len(unknown) * 1999, info


def test_a_semicolon_comment_after_a_host_says_how_to_write_it(tmp_path):
    """Ansible and gpuaccept both refuse ``n1 ansible_host=10.0.0.1 ; rack 3``; the line now says why."""
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu]\nn1 ansible_host=10.0.0.1 ; rack 3\n")
    with pytest.raises(InventoryError) as err:
        load_inventory(str(inv))
    assert str(err.value) == (f"{inv}:2: expected key=value host variable, got ';'; ';' starts a comment only at the "
                              f"start of a line (as in Ansible): write '#'")


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


def test_one_ipv6_machine_written_two_ways_is_listed_once(tmp_path):
    """``2001:db8::1`` and ``2001:0db8:0:0::0001`` are one address: before, both hosts loaded and the machine was
    tested twice (two names for one node: the other node never tested)."""
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu]\na ansible_host=2001:db8::1\nb ansible_host=2001:0db8:0:0::0001\n")
    with pytest.raises(InventoryError) as err:
        load_inventory(str(inv))
    assert str(err.value) == (f"{inv}:3: hosts a (at {inv}:2) and b both resolve to [2001:0db8:0:0::0001]:22; list each "
                              "machine once")


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
