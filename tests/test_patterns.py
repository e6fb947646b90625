"""gpuaccept.config.patterns, table-driven and against ``ansible --list-hosts --limit`` (test-only oracle)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaccept.errors import PatternError
from gpuaccept.config.inventory import load_inventory
from gpuaccept.config.patterns import parse_shard, select, shard, shard_of, split_pattern

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# ansible-core is a test dependency (pyproject.toml [test]): on PATH, or beside this interpreter in its venv
ANSIBLE = shutil.which("ansible") or shutil.which("ansible", path=os.path.dirname(sys.executable))

HOSTS = ["gpu01", "gpu02", "gpu03", "gpu04", "cpu01", "login.rack1", "db.rack2"]
GROUPS = {
    "all": HOSTS,
    "gpu": ["gpu01", "gpu02", "gpu03", "gpu04"],
    "rack1": ["gpu01", "gpu02", "login.rack1"],
    "rack2": ["gpu03", "gpu04", "db.rack2"],
    "drained": ["gpu02"],
    "spare": [],
    "cpu": ["cpu01"],
}

TABLE = [
    ("gpu", ["gpu01", "gpu02", "gpu03", "gpu04"]),
    ("gpu01", ["gpu01"]),
    ("gpu:!drained", ["gpu01", "gpu03", "gpu04"]),
    ("gpu,!drained", ["gpu01", "gpu03", "gpu04"]),
    ("!drained:gpu", ["gpu01", "gpu03", "gpu04"]),  # exclusions apply last, whatever their place
    ("gpu:&rack1", ["gpu01", "gpu02"]),
    ("&rack1", ["gpu01", "gpu02", "login.rack1"]),  # no plain term: start from all
    ("!gpu", ["cpu01", "login.rack1", "db.rack2"]),
    ("rack2,rack1", ["gpu01", "gpu02", "gpu03", "gpu04", "login.rack1", "db.rack2"]),  # inventory order
    ("gpu0*", ["gpu01", "gpu02", "gpu03", "gpu04"]),
    ("*.rack1", ["login.rack1"]),
    ("*", HOSTS),
    ("all", HOSTS),
    ("all:!spare", HOSTS),
    ("~gpu0[12]", ["gpu01", "gpu02"]),
    ("~.*\\.rack", ["login.rack1", "db.rack2"]),
    ("~.*rack", ["gpu01", "gpu02", "gpu03", "gpu04", "login.rack1", "db.rack2"]),  # groups rack1, rack2 too
    ("gpu0[!12]", ["gpu03", "gpu04"]),
    ("gpu[0]", ["gpu01"]),
    ("gpu[-1]", ["gpu04"]),
    ("gpu[1:2]", ["gpu02", "gpu03"]),
    ("gpu[2:]", ["gpu03", "gpu04"]),
    ("gpu[:1]", ["gpu01", "gpu02"]),
    ("gpu[0:99]", ["gpu01", "gpu02", "gpu03", "gpu04"]),
    ("gpu[1:3]:&rack2[0:1]", ["gpu03", "gpu04"]),
    (" gpu01 , cpu01 ", ["gpu01", "cpu01"]),
    ("rack*:&gpu:!~gpu0[34]", ["gpu01", "gpu02"]),
]


@pytest.mark.parametrize("pattern,expected", TABLE, ids=[t[0] for t in TABLE])
def test_select_table(pattern, expected):
    assert select(pattern, HOSTS, GROUPS) == expected


@pytest.mark.parametrize("pattern", [None, "", "  "])
def test_no_pattern_means_all(pattern):
    assert select(pattern, HOSTS, GROUPS) == HOSTS


SPLITS = [
    ("a,b", ["a", "b"]),
    ("a:b", ["a", "b"]),
    ("a:b,c", ["a:b", "c"]),
    ("g[1:3]:h", ["g[1:3]", "h"]),
    ("fe80::1", ["fe80::1"]),
    ("gpu01:22", ["gpu01:22"]),
    ("a,,b,", ["a", "b"]),
    ("&a:!b", ["&a", "!b"]),
]


@pytest.mark.parametrize("pattern,terms", SPLITS, ids=[s[0] for s in SPLITS])
def test_split(pattern, terms):
    assert split_pattern(pattern) == terms


ERRORS = [
    ("ghost", "term 'ghost' names no group or host in inv.ini"),
    ("gpu01,ghost", "term 'ghost' names no group or host"),
    ("gpu:&ghost", "--limit 'gpu:&ghost' matches no host"),  # ignored with a warning, then nothing is left
    ("spare", "--limit 'spare' matches no host in inv.ini"),
    ("gpu:&cpu", "matches no host"),
    ("drained:!gpu", "matches no host"),
    ("~gpu(", "bad regular expression"),
    ("gpu[7]", "index 7 is out of range"),
    ("gpu[1-2]", "[x-y] subscript was removed"),
    ("!", "empty term"),
    (",", "holds no term"),
    ("@retry.txt", "a host list file is read only as a term of its own"),  # its file not read: no hosts given for it
    ("gpu,!@retry.txt", "'!@retry.txt': a host list file is read only as a term of its own (@FILE, as Ansible; not after ! or &)"),
    ("GPU01", "names no group or host"),
    ("gpu0[34]", "names no group or host"),  # [digits] is a subscript of 'gpu0', as in Ansible  # case-sensitive, as in Ansible
    ("gpu01:22", "names no group or host"),
]


@pytest.mark.parametrize("pattern,needle", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(pattern, needle):
    with pytest.raises(PatternError) as exc:
        select(pattern, HOSTS, GROUPS, source="inv.ini")
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_a_host_list_file_among_other_terms_adds_its_hosts():
    """``rack2,@FILE`` and ``@FILE,rack2`` (Ansible reads a limit file's lines into the pattern wherever it is):
    the file's hosts and the other terms' together, in inventory order; an empty file adds none."""
    files = {"@lim.txt": ["gpu01"], "@empty.txt": []}
    assert select("rack2,@lim.txt", HOSTS, GROUPS, files=files) == ["gpu01"] + GROUPS["rack2"]
    assert select("@lim.txt,rack2", HOSTS, GROUPS, files=files) == select("rack2,@lim.txt", HOSTS, GROUPS, files=files)
    assert select("rack2,@empty.txt", HOSTS, GROUPS, files=files) == GROUPS["rack2"]
    assert select("@lim.txt,gpu,!gpu01", HOSTS, GROUPS, files=files) == ["gpu02", "gpu03", "gpu04"]


WARNED = [
    ("gpu:!ghost", ["gpu01", "gpu02", "gpu03", "gpu04"], ["!ghost"]),
    ("!ghost", HOSTS, ["!ghost"]),
    ("gpu:!drained:!ghost:!~ghost[0-9]", ["gpu01", "gpu03", "gpu04"], ["!ghost", "!~ghost[0-9]"]),
    ("rack1,&ghost,gpu01", None, ["&ghost"]),  # intersected with nothing: the selection is empty
    ("gpu:!drained", ["gpu01", "gpu03", "gpu04"], []),
]


@pytest.mark.parametrize("pattern,expected,ignored", WARNED, ids=[w[0] for w in WARNED])
def test_unmatched_exclusion_or_intersection_is_a_warning(pattern, expected, ignored):
    """As Ansible: an ``&``/``!`` term that names nothing is ignored with a warning (the README's own
    ``gpu:!drained`` used to exit 4 the day the drained group was deleted); the run goes on unless nothing
    is left."""
    warnings: list[str] = []
    if expected is None:  # the refusal itself names the term that emptied the selection
        with pytest.raises(PatternError, match=r"matches no host in inv.ini \(term '&ghost' names no group or host, "
                                               r"and intersecting with it leaves none\)"):
            select(pattern, HOSTS, GROUPS, source="inv.ini", warnings=warnings)
    else:
        assert select(pattern, HOSTS, GROUPS, source="inv.ini", warnings=warnings) == expected
    assert len(warnings) == len(ignored)
    for line, term in zip(warnings, ignored):
        assert f"term {term!r} names no group or host in inv.ini; ignoring it" in line and "\n" not in line


def test_inventory_select_names_the_file(tmp_path):
    path = tmp_path / "hosts.ini"
    path.write_text("[gpu]\ngpu[1:2]\n[drained]\n")
    inv = load_inventory(str(path))
    assert [h.name for h in inv.select("gpu:!drained")] == ["gpu1", "gpu2"]
    with pytest.raises(PatternError, match=f"--limit 'drained' matches no host in {path}"):
        inv.select("drained")


def test_select_on_empty_inventory_fails(tmp_path):
    path = tmp_path / "hosts.ini"
    path.write_text("")
    with pytest.raises(PatternError, match=f"^{path} lists no host$"):  # not "--limit 'all'", none was given
        load_inventory(str(path)).select(None)
    with pytest.raises(PatternError, match="--limit 'all' matches no host"):
        load_inventory(str(path)).select("all")


# ------------------------------------------------------------ oracle


@functools.lru_cache(maxsize=None)
def ansible_hosts(path: str, pattern: str) -> list[str]:
    assert ANSIBLE, "ansible not found (pip install -e '.[test]' installs ansible-core)"
    proc = subprocess.run([ANSIBLE, "all", "-i", path, "--list-hosts", "--limit", pattern],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].strip().startswith("hosts ("), proc.stdout
    return [l.strip() for l in lines[1:] if l.strip()]


ORACLE = [
    ("inventory/example.ini", ["all", "gpu:!drained", "rack2", "rack1:&drained", "~gpu00[1-4]", "gpu01*",
                               "gpu[3]", "gpu[2:5]", "rack2[-1]", "drained,rack1[0]", "*:!rack1"]),
    ("inventory/example.yml", ["all", "gpu:!drained", "rack*:!rack2", "gpu[10:]"]),
    ("tests/inventories/nested3.ini", ["all", "hall", "row_a", "hall:!row_a", "*sibling", "mid,rack_a1",
                                       "hall:&aa_sibling", "rack_a1[1]", "n0*:!rack_b1"]),
    ("tests/inventories/ungrouped.ini", ["all", "ungrouped", "!ungrouped", "loose*,workers", "empty,w01"]),
    ("tests/inventories/toplevel.yaml", ["all", "zone_a", "zone_*", "late:zone_b", "~[ab][0-9]"]),
    ("tests/inventories/cluster.yml", ["all", "gpu:!drained", "rack1:rack2", "gpu-special", "*-*,login01"]),
    ("tests/inventories/ranges.ini", ["all", "grid[1:4]", "cpu[5:]", "odd*:&odd[0:2]"]),
    ("tests/inventories/gv/hosts.ini", ["all", "gpu:!rack1", "rack2[0]"]),
    ("tests/inventories/ipv6.ini", ["gpu", "all:!gpu", "gpu:&other", "other:!n1", "2001:db8::12", "gpu[1:2]"]),
]
# Patterns with a term Ansible warns about ("Could not match supplied host pattern, ignoring: X") and goes on
WARN_ORACLE = [
    ("inventory/example.ini", "gpu:!ghost", ["ghost"]),
    ("inventory/example.ini", "gpu:!drained:!retired", ["retired"]),
    ("inventory/example.ini", "!nosuch*", ["nosuch*"]),
    ("tests/inventories/nested3.ini", "hall:!row_z", ["row_z"]),
]
# Subscripts only on groups whose order Ansible keeps stable: for a group with
# nested child groups, Ansible's own host order changes from run to run.
ORACLE_CASES = [(f, p) for f, ps in ORACLE for p in ps]


@pytest.mark.parametrize("path,pattern", ORACLE_CASES, ids=[f"{f}|{p}" for f, p in ORACLE_CASES])
def test_select_matches_ansible_limit(path, pattern):
    full = str(REPO / path)
    expected = ansible_hosts(full, pattern)
    assert expected, "oracle case must select something"
    assert [h.name for h in load_inventory(full).select(pattern)] == expected


@pytest.mark.parametrize("path,pattern,ignored", WARN_ORACLE, ids=[f"{f}|{p}" for f, p, _ in WARN_ORACLE])
def test_ignored_terms_match_ansible(path, pattern, ignored):
    """Same hosts as ``ansible --list-hosts --limit``, and a warning for the same terms Ansible warns about."""
    full = str(REPO / path)
    proc = subprocess.run([ANSIBLE, "all", "-i", full, "--list-hosts", "--limit", pattern],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stderr.split())
    for term in ignored:
        assert f"Could not match supplied host pattern, ignoring: {term}" in said, proc.stderr
    warnings: list[str] = []
    assert [h.name for h in load_inventory(full).select(pattern, warnings)] == ansible_hosts(full, pattern)
    assert [w.split("term ", 1)[1].split(" names")[0].strip("'")[1:] for w in warnings] == ignored


def test_ignored_exclusion_warns_and_runs(pytester):
    """End to end: ``--list-hosts --limit 'gpu:!drained'`` without a drained group lists the hosts, exit 0,
    with the warning on stderr."""
    pytester.makefile(".ini", pytest="[pytest]\ngpuaccept_suites = true\n")
    pytester.makefile(".ini", hosts="[gpu]\ng1 ansible_connection=local\ng2 ansible_connection=local\n")
    res = pytester.runpytest_subprocess("--inventory", "hosts.ini", "--limit", "gpu:!drained", "--list-hosts",
                                        "-p", "gpuaccept.plugin")
    assert res.ret == 0, res.stderr.str()
    assert "term '!drained' names no group or host" in res.stderr.str()
    assert "g1" in res.stdout.str() and "g2" in res.stdout.str()


# ------------------------------------------------------------ --shard


NAMES = [f"gpu{i:05d}" for i in range(4000)]


def test_shards_partition_the_selection():
    k = 7
    shards = [shard(NAMES, f"{i}/{k}") for i in range(1, k + 1)]
    assert sorted(h for s in shards for h in s) == sorted(NAMES)  # every host exactly once
    assert all(s == [h for h in NAMES if h in set(s)] for s in shards)  # inventory order kept
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) < 0.2 * len(NAMES) / k, sizes  # about 1/k each


def test_a_hosts_shard_depends_on_its_name_alone():
    whole = shard(NAMES, "2/5")
    part = shard(NAMES[::3] + ["other"], "2/5")
    assert [h for h in part if h in set(NAMES)] == [h for h in whole if h in set(NAMES[::3])]
    assert shard_of("gpu00042", 5) == shard_of("gpu00042", 5)
    # the hash is SHA-256, so the assignment is the same on every controller and Python version
    assert [shard_of(f"n{i}", 4) for i in range(8)] == [_sha_shard(f"n{i}", 4) for i in range(8)]
    assert shard(NAMES, None) == NAMES and shard(NAMES, "1/1") == NAMES


def _sha_shard(name: str, k: int) -> int:
    import hashlib
    return int(hashlib.sha256(name.encode()).hexdigest()[:16], 16) % k + 1


@pytest.mark.parametrize("spec", ["", "1", "0/4", "5/4", "a/b", "1/0", "-1/4", "1/4/2", " /4", "1/9999999"])
def test_bad_shard_spec(spec):
    with pytest.raises(PatternError, match="--shard"):
        parse_shard(spec)


def test_shard_option_splits_the_collected_tests(tmp_path):
    """Through the plugin (``--collect-only``, no node touched): shards 1/3..3/3 are disjoint and cover every
    selected host; a malformed --shard is exit 4."""
    inv = tmp_path / "inventory.ini"
    inv.write_text("[gpu]\n" + "".join(f"h{i:02d} ansible_connection=local\n" for i in range(12)) + "[drained]\nh03\n")
    for name in ("pytest.ini", "conftest.py"):
        (tmp_path / name).write_text((REPO / name).read_text())
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "test_x.py").write_text("def test_x(node):\n    pass\n")

    def collect(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "--inventory", str(inv),
                               "--thresholds", str(REPO / "thresholds"), "--reports", str(tmp_path / "rep"),
                               "--limit", "gpu:!drained", *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})

    seen: list[str] = []
    for i in (1, 2, 3):
        res = collect("--shard", f"{i}/3")
        assert res.returncode in (0, 5), res.stdout + res.stderr  # 5: an empty shard collects nothing
        seen += [ln.split("[")[1].rstrip("]") for ln in res.stdout.splitlines() if "::test_x[" in ln]
    assert sorted(seen) == [f"h{i:02d}" for i in range(12) if i != 3]
    bad = collect("--shard", "4/3")
    assert bad.returncode == 4 and "--shard '4/3'" in bad.stderr and "Traceback" not in bad.stderr


# -- ~ patterns: the linear matcher against Python's re ------------------------------------------
_ATOMS = ["a", "b", "-", ".", "\\.", "\\d", "\\w", "\\s", "\\D", "\\W", "[ab]", "[^a]", "[a-c0-9]", "[\\d-]", "[]a]",
          "[^]]", "^", "$", "\\A", "\\Z", "\\x61", "\\n", "1", "é", "{", "}", "[\\w.]", "\\-", "[\\n]"]
_QUANT = ["", "", "", "*", "+", "?", "*?", "+?", "??", "{2}", "{1,3}", "{,2}", "{2,}", "{0}", "{1,2}?", "{,}"]


def _random_pattern(rng, depth: int = 0) -> str:
    parts = []
    for _ in range(rng.randrange(1, 4)):
        if depth < 2 and rng.random() < 0.3:
            inner = "|".join(_random_pattern(rng, depth + 1) for _ in range(rng.randrange(1, 3)))
            atom = rng.choice(["(", "(?:", f"(?P<g{rng.randrange(10 ** 6)}>"]) + inner + ")"
        else:
            atom = rng.choice(_ATOMS)
        parts.append(atom + rng.choice(_QUANT))
    return "".join(parts)


def test_linear_regex_answers_as_python_re():
    """Random patterns of what the matcher reads, against random names: the same answer as ``re.match``.
    Python's re itself backtracks exponentially on some of them (which is the point): a pattern it does not
    answer within 2 s for all names is left out of the comparison."""
    import random
    import re
    import signal
    import warnings

    from gpuaccept.config.saferegex import compile_limit_regex

    class Slow(Exception):
        pass

    def slow(*_):
        raise Slow()

    rng = random.Random(20261201)
    names = ["".join(rng.choice("ab-1.é \n") for _ in range(rng.randrange(7))) for _ in range(60)]
    old = signal.signal(signal.SIGALRM, slow)
    compared = 0
    try:
        for _ in range(1500):
            pattern = _random_pattern(rng)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    rx = re.compile(pattern)
                except re.error:
                    continue
            signal.alarm(2)
            try:
                want = [bool(rx.match(n)) for n in names]
            except Slow:
                continue
            finally:
                signal.alarm(0)
            lin = compile_limit_regex(pattern)
            got = [lin.match(n) for n in names]
            assert got == want, (pattern, [n for n, g, w in zip(names, got, want) if g != w])
            compared += len(names)
    finally:
        signal.signal(signal.SIGALRM, old)
    assert compared > 30000, compared


@pytest.mark.parametrize("pattern,needle", [
    ("~(?i)gpu", "inline flags"), ("~(gpu)\\1", "back-reference"), ("~gpu(?=0)", "look-ahead"),
    ("~gpu(?<=u)", "look-behind"), ("~\\bgpu", "word-boundary"), ("~gpu0*+", "possessive"),
    ("~(?>gpu)", "atomic group"), ("~a{1000}{1000}", "multiple repeat"), ("~(a{100}){100}", "states"),
])
def test_limit_regex_constructs_refused(pattern, needle):
    with pytest.raises(PatternError) as e:
        select(pattern, HOSTS, GROUPS)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_limit_regex_backtracking_pattern_is_answered():
    """``~(a|a)*b`` against a host of 40 ``a`` ran for minutes in Python's re; here it is answered (no host
    ends in b, so only the other branch selects; a term that names nothing is refused) and the ordinary ~ terms
    select as before."""
    hosts = ["a" * 40, "gpu01", "gpu02", "cpu01"]
    groups = {"all": hosts, "gpu": ["gpu01", "gpu02"]}
    assert select("~(a|a)*b|gpu0[2-9]", hosts, groups) == ["gpu02"]
    with pytest.raises(PatternError, match="names no group or host"):
        select("~(a|a)*b", hosts, groups)
    assert select("~(a|a)*$", hosts, groups) == ["a" * 40]
    assert select("~(gpu|cpu)0\\d$:!gpu", hosts, groups) == ["cpu01"]


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
