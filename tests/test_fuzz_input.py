"""Bad input never crashes or hangs: a seeded, bounded fuzz of inventories and threshold files.

Seeds are the repository's own inventories (``tests/inventories``, ``inventory/``) and threshold files
(``thresholds/``); each case applies one to three mutations of the kinds fuzzing found trouble with (host
ranges that expand to millions, alias bombs, deep nesting, .inf/.nan bounds, non-UTF-8 bytes, control
characters, mappings written as text in INI ``:vars``, duplicate keys, truncation, stray brackets and quotes).
A child process (its address space capped, each case under an alarm) reads every case the way
``pytest_configure`` does — :func:`load_inventory`, ``select``, :func:`hostvars.check_hosts`; or
:func:`load_sku_file` — and reports each outcome: accepted, refused with a ConfigError, or crashed/hung.
The test asserts no crash, no hang, and that every refusal is one line naming the file.

A few of the nastiest cases also go through the real plugin (``pytest --collect-only``): exit code 0 or 4,
no traceback.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SEED = 20261130
N_INVENTORIES = 160
N_THRESHOLDS = 90
CASE_ALARM_S = 20  # a case still running after this is a hang (the cap is for hangs, not a speed target)
MEMORY_CAP = 3 << 30  # bytes of address space for the child

BOMB = ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
        "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n")
SNIPPETS = [
    "node[0:99999999]", "n[0:9999]m[0:9999]", "x[1:3]y[a:z]", "[0:1]", "h[00:10]", "../../../x", "a/b", "..",
    "[2001:db8::12]:2200", "[2001:db8::12]:99999999", "ansible_host=10.0.0.[1:3]", "nccl_env=NCCL_X=1",
    "nccl_env={'A;touch /tmp/x': 1}", "storage_limits={'seq_raed_gbps': 1}", "storage_limits=12",
    "gpus_per_node=eight", "ansible_port=99999999999999999999", "x=" + "[" * 3000 + "]" * 3000,
    "x=" + "(" * 500 + "1" + ")" * 500, "x=" + "9" * 6000, "x=1e999", ".inf", "-.inf", ".nan", "1.0e+999",
    "{{ lookup('env','X') }}", "!vault |", "!unsafe x", "&a", "*a", "<<: *a", "? [a, b]\n: c", "- - - -",
    "[" * 400, "{" * 400, "]", "[g:children]", "[g:vars]", "[all:vars]", "[:]", "[g:x:y]", "=", "==", "'", '"',
    "\\", "\t", "\x00", "\x01", "\x1b[31m", "\x7f", "\u2028", "\ufeff", "\udcff", "ü", "#", ";", ":", "::",
    "gpu_sku=h300", "ansible_connection=docker", "ansible_group_priority=high", "children:", "hosts:", "vars:",
    "min: .inf", "max: .nan", "min: 1.0e+999", "unit: GB/s", "source:", "checks: [1, 2]", "detect: 5",
    "min_by_world_size: {2: .inf}", "memory_gib: [1]", "memory_gib: [b, a]", "sku: [1]", "9" * 5000,
    "!!python/object:os.system x", "!!binary x", "!!timestamp x", "!!set {a, b}", "!!float x", "0x" + "f" * 500,
]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    text = data.decode("utf-8", "surrogateescape")
    lines = text.splitlines(keepends=True) or [""]
    kind = rng.randrange(12)
    i = rng.randrange(len(lines) + 1)
    snippet = rng.choice(SNIPPETS)
    if kind == 0:  # insert a snippet as a line
        lines.insert(i, snippet + "\n")
    elif kind == 1:  # insert a snippet inside a line
        j = rng.randrange(len(lines))
        cut = rng.randrange(len(lines[j]) + 1)
        lines[j] = lines[j][:cut] + snippet + lines[j][cut:]
    elif kind == 2:  # duplicate a line (duplicate keys, hosts, sections)
        j = rng.randrange(len(lines))
        lines.insert(j, lines[j])
    elif kind == 3:  # delete a line
        if len(lines) > 1:
            del lines[rng.randrange(len(lines))]
    elif kind == 4:  # truncate
        text = "".join(lines)
        return text[: rng.randrange(len(text) + 1)].encode("utf-8", "surrogateescape")
    elif kind == 5:  # raw bytes, including invalid UTF-8
        raw = "".join(lines).encode("utf-8", "surrogateescape")
        k = rng.randrange(len(raw) + 1)
        return raw[:k] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4))) + raw[k:]
    elif kind == 6:  # an alias bomb appended
        lines.append("\n" + BOMB)
    elif kind == 7:  # deep nesting
        lines.insert(i, "x: " + "[" * rng.choice((100, 1000, 20000)) + "\n")
    elif kind == 8:  # swap a number for a non-finite or huge one
        text = "".join(lines)
        for num in sorted({w for w in text.split() if w.rstrip(",}]").replace(".", "", 1).isdigit()})[:5]:
            text = text.replace(num, rng.choice([".inf", "-.inf", ".nan", "1.0e+999", "9" * 5000, "1e999"]), 1)
        return text.encode("utf-8", "surrogateescape")
    elif kind == 9:  # a control character somewhere
        j = rng.randrange(len(lines))
        cut = rng.randrange(len(lines[j]) + 1)
        lines[j] = lines[j][:cut] + chr(rng.choice([0, 1, 7, 8, 11, 12, 27, 127])) + lines[j][cut:]
    elif kind == 10:  # indentation damage
        j = rng.randrange(len(lines))
        lines[j] = rng.choice(["", "  ", "\t", "      "]) + lines[j].lstrip()
    else:  # a range multiplied into a host line
        j = rng.randrange(len(lines))
        lines[j] = lines[j].replace("gpu", "gpu[0:999]x[0:999]", 1)
    return "".join(lines).encode("utf-8", "surrogateescape")


def _seeds(kind: str) -> list[Path]:
    if kind == "inventory":
        files = [p for p in sorted((REPO / "tests" / "inventories").rglob("*")) if p.is_file()
                 and "group_vars" not in p.parts and "host_vars" not in p.parts]
        return files + sorted((REPO / "inventory").glob("*.*"))
    return sorted((REPO / "thresholds").glob("*.yaml"))


def make_cases(folder: Path) -> list[dict]:
    """Write the seeded cases under ``folder``; each: {"kind", "path"}."""
    rng = random.Random(SEED)
    cases = []
    for kind, n in (("inventory", N_INVENTORIES), ("threshold", N_THRESHOLDS)):
        seeds = _seeds(kind)
        for i in range(n):
            seed = rng.choice(seeds)
            data = seed.read_bytes()
            for _ in range(rng.randrange(1, 4)):
                data = _mutate(rng, data)
            sub = folder / f"{kind}-{i:03d}"
            sub.mkdir(parents=True)
            if kind == "threshold":
                path = sub / seed.name  # the stem must equal the sku: keep the name
            else:
                path = sub / seed.name
                for vars_dir in ("group_vars", "host_vars"):  # keep the vars folders beside
                    if (seed.parent / vars_dir).is_dir() and rng.random() < 0.5:
                        _copy_tree(seed.parent / vars_dir, sub / vars_dir, rng)
            path.write_bytes(data)
            cases.append({"kind": kind, "path": str(path)})
    return cases


def _copy_tree(src: Path, dst: Path, rng: random.Random) -> None:
    for p in src.rglob("*"):
        target = dst / p.relative_to(src)
        if p.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            data = p.read_bytes()
            target.write_bytes(_mutate(rng, data) if rng.random() < 0.5 else data)


# Runs in the child: every case the way pytest_configure reads it; one JSON line per case.
CHILD = r"""
import json, resource, signal, sys, traceback
resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
from gpuaccept.errors import ConfigError
from gpuaccept.config.hostvars import check_hosts
from gpuaccept.config.inventory import load_inventory
from gpuaccept.config.thresholds import load_sku_file

class Hang(BaseException):
    pass

def alarm(signum, frame):
    raise Hang()

signal.signal(signal.SIGALRM, alarm)
for case in json.load(open(sys.argv[1])):
    signal.alarm(CASE_ALARM_S)
    try:
        if case["kind"] == "inventory":
            inv = load_inventory(case["path"])
            hosts = inv.select(None) if inv.hosts else []
            check_hosts(hosts, case["path"], ["h200-sxm-141gb"])
        else:
            load_sku_file(case["path"])
        out = {"outcome": "ok"}
    except ConfigError as err:
        out = {"outcome": "refused", "msg": str(err)}
    except Hang:
        out = {"outcome": "hang"}
    except BaseException:
        out = {"outcome": "crash", "msg": traceback.format_exc()[-2000:]}
    finally:
        signal.alarm(0)
    print(json.dumps({**case, **out}), flush=True)
""".replace("MEMORY_CAP", str(MEMORY_CAP)).replace("CASE_ALARM_S", str(CASE_ALARM_S))


def test_fuzzed_inventories_and_threshold_files(tmp_path):
    cases = make_cases(tmp_path / "cases")
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "cases.json")], capture_output=True,
                          text=True, timeout=CASE_ALARM_S * 10 + 5 * len(cases),
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    results = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert len(results) == len(cases), f"child stopped after {len(results)} cases: {proc.stderr[-3000:]}"
    bad = [r for r in results if r["outcome"] in ("crash", "hang")]
    assert not bad, "\n".join(f"{r['outcome']}: {r['path']}\n{r.get('msg', '')}" for r in bad[:5])
    for r in results:
        if r["outcome"] == "refused":
            msg = r["msg"]
            assert "\n" not in msg and "Traceback" not in msg, msg
            assert msg.startswith(os.path.dirname(r["path"])), msg  # names the file (or its vars file)
    counts = {k: sum(r["outcome"] == k for r in results) for k in ("ok", "refused")}
    assert counts["refused"] > len(cases) // 3 and counts["ok"] > 0, counts  # the mutations do bite


NASTY = [
    ("range", "[gpu]\nnode[0:99999999]\n"),
    ("two_ranges", "[gpu]\nn[0:9999]m[0:9999]\n"),
    ("bomb", "all:\n  vars:\n" + "".join("    " + ln + "\n" for ln in BOMB.splitlines())),
    ("ini_mapping_as_text", "[gpu]\nh1 ansible_connection=local\n[gpu:vars]\nnccl_env=NCCL_NVLS_ENABLE=0\n"),
    ("path_name", "[gpu]\n../../../x ansible_connection=local\n"),
    ("storage_typo", "[gpu]\nh1 ansible_connection=local storage_limits=\"{'seq_raed_gbps': 1}\"\n"),
]


@pytest.mark.parametrize("label,text", NASTY, ids=[n[0] for n in NASTY])
def test_plugin_exits_4_without_traceback(tmp_path, label, text):
    """Through the plugin, the cheap path: ``--collect-only``. Exit 4, one ERROR line naming the file."""
    inv = tmp_path / ("inventory.yml" if text.startswith("all:") else "inventory.ini")
    inv.write_text(text)
    for name in ("pytest.ini", "conftest.py"):
        (tmp_path / name).write_text((REPO / name).read_text())
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "test_x.py").write_text("def test_x(node):\n    node.run('true')\n")
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "--inventory", str(inv),
                          "--thresholds", str(REPO / "thresholds"), "--reports", str(tmp_path / "rep")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    out = res.stdout + res.stderr
    assert res.returncode == 4, out
    assert "Traceback" not in out
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("ERROR:")]
    assert len(err) == 1 and str(inv) in err[0], res.stderr


# -- inputs that take unbounded time --------------------------------------------------------
# The worst input of each kind a loading step met, at a size where the old code took from seconds to minutes.
# Each is loaded in one child process the way pytest_configure does (load, select with its --limit, the host
# variable check) and must end, accepted or refused with one line naming the file, within CPU_BOUND_S of CPU
# (process time, not wall: the machine may be loaded). Measured when written: each under 1.7 s of CPU on a
# loaded 2-core machine; the old code took 8.6 s to minutes.
CPU_BOUND_S = 8.0
MB = 1 << 20


def _worst_inputs() -> list[tuple[str, str, str | None]]:
    """(label, INI text, --limit or None)."""
    many = 10000
    return [
        ("quoted_1mb_value", '[g]\nh1 ansible_connection=local x="' + "a b " * (MB // 4) + '"\n', None),
        ("unquoted_1mb_vars_value", "[g]\nh1 ansible_connection=local\n[g:vars]\nx=" + "a b " * (MB // 4) + "\n",
         None),
        ("ssh_args_1mb", "[g]\nh1\n[g:vars]\nansible_ssh_common_args='" + "-o a=b " * (MB // 7) + "'\n", None),
        ("long_var_name", "[g]\nh1 ansible_connection=local " + "nccl_env" * (MB // 8) + "=1\n", None),
        ("children_20000", "[p:children]\n" + "".join(f"c{i}\n" for i in range(20000))
         + "".join(f"[c{i}]\nh{i} ansible_connection=local\n" for i in range(20000)), None),
        ("nested_chain_20000", "".join(f"[g{i}:children]\ng{i + 1}\n" for i in range(20000))
         + "[g20000]\nh1 ansible_connection=local\n", None),
        ("vars_only_sections_5000", "".join(f"[c{i}:vars]\nx=1\n" for i in range(5000))
         + "[p:children]\n" + "".join(f"c{i}\n" for i in range(5000))
         + "".join(f"[c{i}]\nh{i} ansible_connection=local\n" for i in range(5000)), None),
        ("operator_vars_10x10000", "[g]\n" + "".join(
            f"h{i} ansible_connection=local rack_slot={i} pdu_feed=a asset_tag=b row_label=c cooling_loop=d "
            f"switch_port=e bmc_address=f purchase_order=g warranty_end=h owner_team=i\n" for i in range(many)),
         "g"),
        ("regex_backtracking_40", "[g]\n" + "a" * 40 + " ansible_connection=local\n", "~(a|a)*b|" + "a" * 40),
        ("regex_nested_repeat_10000_hosts", "[g]\n" + "".join(f"{'a' * 30}{i} ansible_connection=local\n"
                                                               for i in range(many)), "~((a+)+)+b|g"),
    ]


WORST_CHILD = r"""
import json, signal, sys, time
from gpuaccept.errors import ConfigError
from gpuaccept.config.hostvars import check_hosts
from gpuaccept.config.inventory import load_inventory

def hang(signum, frame):
    raise TimeoutError()

signal.signal(signal.SIGALRM, hang)
for case in json.load(open(sys.argv[1])):
    signal.alarm(300)  # a hang, not a speed target: the assertion is on CPU seconds
    t0 = time.process_time()
    try:
        inv = load_inventory(case["path"])
        check_hosts(inv.select(case["limit"]), case["path"], None)
        out = {"outcome": "ok"}
    except ConfigError as err:
        out = {"outcome": "refused", "msg": str(err)}
    except TimeoutError:
        out = {"outcome": "hang"}
    signal.alarm(0)
    print(json.dumps({**case, **out, "cpu_s": time.process_time() - t0}), flush=True)
"""


def test_worst_inputs_load_in_bounded_cpu_time(tmp_path):
    cases = []
    for label, text, limit in _worst_inputs():
        path = tmp_path / label / "inventory.ini"
        path.parent.mkdir()
        path.write_text(text)
        cases.append({"label": label, "path": str(path), "limit": limit})
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    proc = subprocess.run([sys.executable, "-c", WORST_CHILD, str(tmp_path / "cases.json")], capture_output=True,
                          text=True, timeout=300 * len(cases), env={**os.environ, "PYTHONPATH": str(REPO)})
    results = {r["label"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert len(results) == len(cases), proc.stderr[-3000:]
    slow = {k: round(r["cpu_s"], 2) for k, r in results.items() if r["cpu_s"] > CPU_BOUND_S or r["outcome"] == "hang"}
    assert not slow, f"CPU seconds over {CPU_BOUND_S}: {slow}"
    for r in results.values():
        if r["outcome"] == "refused":
            assert "\n" not in r["msg"] and r["msg"].startswith(r["path"]), r["msg"][:300]
    # the kinds that are refused, and why; the others load
    assert results["nested_chain_20000"]["outcome"] == "refused" and "levels below all" in \
        results["nested_chain_20000"]["msg"]
    assert results["long_var_name"]["outcome"] == "ok"  # not taken for a typo of nccl_env: it is no typo
    assert results["operator_vars_10x10000"]["outcome"] == "ok"
    assert results["regex_backtracking_40"]["outcome"] == "ok"
    print({k: round(r["cpu_s"], 3) for k, r in results.items()})  # the CPU seconds, for the closing note


def test_shell_words_split_as_shlex_does():
    """gpuaccept.config.shellwords.split_words against the standard library's shlex.split on random lines of
    the characters that mean something to it: the same words, or the same error."""
    import shlex

    from gpuaccept.config.shellwords import split_words

    rng = random.Random(SEED)
    compared = 0
    for _ in range(20000):
        line = "".join(rng.choice("ab '\"\\#\t=") for _ in range(rng.randrange(14)))
        for comments in (True, False):
            try:
                want = ("ok", shlex.split(line, comments=comments))
            except ValueError as e:
                want = ("error", str(e))
            try:
                got = ("ok", split_words(line, comments))
            except ValueError as e:
                got = ("error", str(e))
            assert got == want, (line, comments)
            compared += 1
    assert compared == 40000
