"""gpuaccept.plugin.repeated_errors: a host's error cause listed once in the terminal, every test still counted, whatever
the words of each test's error."""
from __future__ import annotations

import re
import socket
import subprocess
from types import SimpleNamespace

from project_helpers import junit, make_project, run_pytest

from gpuaccept.causes import CAUSE_KEY
from gpuaccept.errors import ERROR_KEY, ERROR_KIND_KEY
from gpuaccept.plugin.repeated_errors import NAMES_SHOWN, group, same_error_line


def _rep(nodeid: str, text: str | None, kind: str | None = "HostUnreachable"):
    props = ([(ERROR_KEY, text)] if text is not None else []) + ([(ERROR_KIND_KEY, kind)] if kind else [])
    return SimpleNamespace(nodeid=nodeid, user_properties=props, longrepr=text)


def test_only_word_for_word_repeats_of_a_gpuaccept_error_are_grouped():
    a1, a2, a3 = (_rep(f"s.py::t{i}[a]", "a: cannot connect") for i in range(3))
    b1 = _rep("s.py::t0[b]", "b: cannot connect")
    crash = _rep("s.py::t4[a]", "a: probe gpu_inventory crashed")
    plain1, plain2 = _rep("s.py::t5[a]", None, None), _rep("s.py::t6[a]", None, None)  # pytest's own errors
    untyped = _rep("s.py::t7[a]", "a: cannot connect", None)  # no error kind: not ours, never grouped
    shown, more = group([a1, b1, a2, crash, plain1, a3, plain2, untyped])
    assert shown == [a1, b1, crash, plain1, plain2, untyped]
    assert more == {id(a1): [a2, a3]}


def test_the_same_error_line_names_the_tests_and_stops_at_a_few():
    reps = [_rep(f"suites/test_health.py::test_{i}[h]", "x") for i in range(NAMES_SHOWN + 2)]
    line = same_error_line(reps)
    assert line.startswith(f"(the same error in {NAMES_SHOWN + 2} more tests, not listed again: test_0[h], ")
    assert f"test_{NAMES_SHOWN - 1}[h], …;" in line and f"test_{NAMES_SHOWN}[h]" not in line
    assert same_error_line(reps[:1]).startswith("(the same error in 1 more test, not listed again: test_0[h];")


def _closed_port(address: str) -> int:
    s = socket.socket()
    s.bind((address, 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connections are refused
    return port


def _unreachable_run(tmp_path, name: str, first: int, n: int) -> tuple[subprocess.CompletedProcess, int, int]:
    """``-m health`` over ``n`` hosts ``<name>0..`` on loopback addresses 127.0.0.<first>.., each a port nothing
    listens on: ``(the finished run, errors, errors per host)``, once its exit (1) and its count of errors (the same number
    per host, more than one) are checked."""
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    lines = []
    for i in range(n):
        address = f"127.0.0.{first + i}"
        lines.append(f"{name}{i} ansible_host={address} ansible_port={_closed_port(address)}\n")
    inv.write_text("[gpu]\n" + "".join(lines))
    res = run_pytest(tmp_path, "--inventory", str(inv), "-m", "health", "--reports", str(tmp_path / "rep"))
    out = res.stdout
    assert res.returncode == 1, out[-3000:] + res.stderr[-2000:]
    errors = int(re.search(r"(\d+) errors? in ", out).group(1))
    per_host = errors // n
    assert errors == n * per_host and per_host > 1, out[-2000:]
    return res, errors, per_host


def test_unreachable_hosts_are_listed_once_each_and_every_test_still_counts(tmp_path):
    res, errors, per_host = _unreachable_run(tmp_path, "dead", 61, 3)
    out = res.stdout
    sections = re.findall(r"_ ERROR at \w+ of (\S+) _", out)
    assert sorted(s[s.index("[") + 1:-1] for s in sections) == ["dead0", "dead1", "dead2"], sections
    sections_text, summary = out.split("short test summary info", 1)  # the summary's width varies by terminal
    assert sections_text.count(f"(the same error in {per_host - 1} more tests, not listed again:") == 3, out[-3000:]
    assert len(re.findall(r"^ERROR ", summary, re.M)) == 3, summary
    cases = [c for f in (tmp_path / "rep").glob("junit-*.xml") for c in junit(f) if c["outcome"] == "error"]
    assert len(cases) == errors  # the reports keep every test
    assert "Traceback" not in out + res.stderr


def test_an_ipv6_named_host_keeps_its_whole_name_in_the_terminal_and_the_reports(tmp_path):
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"[gpu]\nfe80::62 ansible_host=127.0.0.64 ansible_port={_closed_port('127.0.0.64')}\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "-m", "health", "--reports", str(tmp_path / "rep"))
    out = res.stdout
    assert res.returncode == 1, out[-3000:] + res.stderr[-2000:]
    assert re.search(r"the same error in \d+ more tests, not listed again: test_\w+\[fe80::62\]", out), out[-3000:]
    cases = [c for f in (tmp_path / "rep").glob("junit-*.xml") for c in junit(f)
             if not c["classname"].endswith(".fleet")]  # the fleet-wide tests name no host
    assert cases and all(re.fullmatch(r"test_\w+\[fe80::62\]", c["name"]) for c in cases), [c["name"] for c in cases]
    assert all(c["classname"].endswith(".fe80::62") for c in cases), [c["classname"] for c in cases]
    assert "Traceback" not in out + res.stderr


def _caused(nodeid, text, cause=None, kind="HostUnreachable"):
    props = [(ERROR_KEY, text), (ERROR_KIND_KEY, kind)] + ([(CAUSE_KEY, [cause])] if cause else [])
    return SimpleNamespace(nodeid=nodeid, user_properties=props, longrepr=text)


def test_one_host_wide_cause_groups_whatever_the_words():
    unreach = {"class": "connectivity", "kind": "unreachable", "host": "a"}
    a1 = _caused("s.py::t0[a]", "a: cannot connect to [10.0.0.1]:22: Connection refused", unreach)
    a2 = _caused("s.py::t1[a]", "a: written off at 01:02:03 UTC, not tried again this run: cannot connect", unreach)
    a3 = _caused("s.py::t2[a]", "a: written off at 01:02:04 UTC, not tried again this run: cannot connect", unreach)
    b1 = _caused("s.py::t0[b]", "b: written off at 01:02:03 UTC, not tried again this run: cannot connect",
              {"class": "connectivity", "kind": "unreachable", "host": "b"})
    key_a = _caused("s.py::t3[a]", "a: unknown host key", {"class": "connectivity", "kind": "host_key", "host": "a"})
    # probe crashes are not host-wide: grouped only word for word
    c1 = _caused("s.py::t4[a]", "a: probe x crashed", {"class": "tool", "kind": "probe_crashed", "host": "a"}, "ProbeError")
    c2 = _caused("s.py::t5[a]", "a: probe y crashed", {"class": "tool", "kind": "probe_crashed", "host": "a"}, "ProbeError")
    shown, more = group([a1, a2, b1, key_a, a3, c1, c2])
    assert shown == [a1, b1, key_a, c1, c2]
    assert more == {id(a1): [a2, a3]}
    assert same_error_line(more[id(a1)], a1).startswith("(the same cause in 2 more tests, not listed again: t1[a], t2[a];")


def test_two_unreachable_hosts_read_once_each_in_the_terminal(tmp_path):
    res, errors, per_host = _unreachable_run(tmp_path, "gone", 66, 2)
    out = res.stdout
    sections_text, summary = out.split("short test summary info", 1)
    sections = re.findall(r"_ ERROR at \w+ of (\S+) _", sections_text)
    assert sorted(s[s.index("[") + 1:-1] for s in sections) == ["gone0", "gone1"], sections
    for host in ("gone0", "gone1"):
        assert len(re.findall(rf"^ERROR \S+\[{host}\]", summary, re.M)) == 1, summary
        assert len(re.findall(rf"^E?\s*{host}: ", sections_text, re.M)) == 1, sections_text[-3000:]
    assert len(re.findall(rf"\(the same (error|cause) in {per_host - 1} more tests, not listed again:",
                          sections_text)) == 2, sections_text[-3000:]
    cases = [c for f in (tmp_path / "rep").glob("junit-*.xml") for c in junit(f) if c["outcome"] == "error"]
    assert len(cases) == errors
