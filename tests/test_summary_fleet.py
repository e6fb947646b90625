"""summary.md at fleet size: one line per host with its first cause said once, identical
failures grouped once with the hosts they hit, and a page whose length grows with the distinct causes, not with
hosts x tests. Records are built in-process, as the plugin makes them for a host whose SSH host key is unknown
or whose name does not resolve (its later tests "written off", as gpuaccept.runner words them)."""
from __future__ import annotations

import re

from gpuaccept.reporting.records import CaseRecord
from gpuaccept.reporting.summary import summary_markdown
from gpuaccept.reporting.verdicts import failure_groups, reason_keys, same_reason_once

#: per layer, the test names a host's errors spread over (12 in all, as `-m "health or memory"` runs them)
TESTS = [("health", f"test_health_{i}") for i in range(8)] + [("memory", f"test_memory_{i}") for i in range(4)]


def _cause(i: int, h: str) -> tuple[str, dict]:
    """Host ``i``'s message and cause: the first half an unknown host key, the second a name that does not resolve."""
    if i % 2 == 0:
        return (f"{h}: unknown host key for [10.1.{i // 256}.{i % 256}]:22 (ssh-ed25519 SHA256:{i:043d}); to trust "
                "it on first use rerun with --accept-new-host-keys, or add it to known_hosts",
                {"class": "connectivity", "kind": "host_key", "host": h})
    return (f"{h}: cannot resolve {h}.example.invalid: Name or service not known",
            {"class": "connectivity", "kind": "name_unresolved", "host": h,
             "evidence": {"address": f"{h}.example.invalid"}})


def fleet(n_hosts: int, tests_per_host: int = 12, extra: list[CaseRecord] | None = None):
    hosts = [f"gpu-{i + 1:04d}" for i in range(n_hosts)]
    recs = []
    tests = (TESTS * (tests_per_host // len(TESTS) + 1))[:tests_per_host]
    for t, (layer, name) in enumerate(tests):
        name = name if t < len(TESTS) else f"{name}_{t}"
        for i, h in enumerate(hosts):
            msg, cause = _cause(i, h)
            if t >= 2:  # the transport writes a host off after its first failures: the same cause, other words
                msg = f"{h}: written off at 01:02:03 UTC, not tried again this run: {msg.split(': ', 1)[1]}"
            recs.append(CaseRecord(f"suites/test_{layer}.py::{name}[{h}]", f"{name}[{h}]", h, layer, "error", msg,
                                   0.01, causes=[dict(cause)]))
    recs += extra or []
    return hosts, recs + [CaseRecord(f"suites/test_health.py::test_ok[{h}]", f"test_ok[{h}]", h, "health", "skipped",
                                     f"no NVMe on {h}") for h in hosts]


def _summary(hosts, recs, **meta) -> str:
    return summary_markdown("run-300", {"hosts": hosts, "inventory": "fleet.ini", **meta}, recs)


def _section(md: str, title: str) -> str:
    return md.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_300_hosts_two_causes_are_two_entries_and_one_line_per_host():
    hosts, recs = fleet(300)
    md = _summary(hosts, recs)
    lines = md.splitlines()
    # the bound: 60 lines besides one per host; bytes: 8 KB besides a host line (its cause and its action, as
    # long as the message: an unknown host key's fingerprint makes it ~430 bytes)
    assert len(lines) < 60 + len(hosts), len(lines)
    host_lines = [ln for ln in lines if ln.startswith("- **ERROR** `gpu-")]
    assert len(host_lines) == 300
    assert len(md.encode()) < 8_000 + sum(len(ln.encode()) + 1 for ln in host_lines), len(md.encode())
    # each host line names its first cause once, with how many tests it stopped, and keeps its action's tail
    for i, ln in enumerate(sorted(host_lines)):
        h = f"gpu-{i + 1:04d}"
        assert ln.startswith(f"- **ERROR** `{h}`: test_health_0 and 11 more tests of the same cause: {h}: "), ln
        said = "unknown host key" if i % 2 == 0 else "cannot resolve"
        assert ln.count(said) == 1 and ln.count("written off") == 0, ln
        act = "fix-config** [connectivity]" if i % 2 == 0 else "check-network** [connectivity]"
        assert f" → **{act} (" in ln, ln
    # the failures: each cause once, with its host count, the list naming the hosts-<action>.txt of exactly them
    fails = _section(md, "Failures and errors")
    assert fails.count("unknown host key") == 1 and fails.count("cannot resolve") == 1, fails
    assert "- **ERROR** host_key [connectivity] → **fix-config** (the host's SSH key is unknown or changed): " \
           "150 hosts, 1800 tests: gpu-0001, gpu-0003," in fails, fails
    assert "- **ERROR** name_unresolved [connectivity] → **check-network** (the host name does not resolve: DNS, or " \
           "a typo in ansible_host): 150 hosts, 1800 tests: gpu-0002, gpu-0004," in fails, fails
    assert fails.count("… +142 more (list in `hosts-") == 2, fails
    assert "(list in `hosts-fix-config.txt`)" in fails and "(list in `hosts-check-network.txt`)" in fails
    assert len(fails.splitlines()) < 12, fails
    # what else a reader needs is still there: the next steps, the skips grouped, the counts per layer
    steps = _section(md, "Next steps")
    assert "| check-network | 150: gpu-0002," in steps and "| fix-config | 150: gpu-0001," in steps, steps
    assert "- no NVMe: 300 hosts (gpu-0001, " in _section(md, "Skipped")
    counts = _section(md, "Counts")
    assert "| 300 hosts: gpu-0001, gpu-0002, gpu-0003, … +297 more | health | 0 | 0 | 8 | 1 |" in counts, counts
    assert len(counts.splitlines()) < 10, counts


def test_the_page_grows_with_hosts_and_causes_not_with_tests():
    hosts, recs = fleet(300)
    base = _summary(hosts, recs)
    # twice the tests per host: the same lines; only the counts' digits change
    hosts2, recs2 = fleet(300, tests_per_host=24)
    more_tests = _summary(hosts2, recs2)
    assert len(more_tests.splitlines()) == len(base.splitlines())
    assert abs(len(more_tests) - len(base)) < 2 * 300 + 200
    # twice the hosts: one line more per host (each host's line), the failures section as long
    hosts3, recs3 = fleet(600)
    more_hosts = _summary(hosts3, recs3)
    assert len(more_hosts.splitlines()) == len(base.splitlines()) + 300
    assert len(_section(more_hosts, "Failures and errors").splitlines()) == \
        len(_section(base, "Failures and errors").splitlines())
    # a third cause (a probe that timed out on every host's test_memory_0): one entry more, not 300
    timeouts = [CaseRecord(f"suites/test_memory.py::test_memory_x[{h}]", f"test_memory_x[{h}]", h, "memory", "error",
                           f"{h}: probe hbm_bandwidth timed out after 600 s (killed)", 600.0,
                           causes=[{"class": "tool", "kind": "timeout", "host": h}]) for h in hosts]
    _, recs4 = fleet(300, extra=timeouts)
    third = _summary(hosts, recs4)
    fails = _section(third, "Failures and errors")
    assert fails.count("timed out after") == 1 and "- **ERROR** timeout [tool] in test_memory_x" in fails, fails
    assert len(fails.splitlines()) <= len(_section(base, "Failures and errors").splitlines()) + 3


def test_banners_and_a_small_run_keep_their_form():
    hosts, recs = fleet(4)
    md = _summary(hosts, recs, interruption={"signal": "SIGTERM", "at": 0, "running": [], "unfinished": 3})
    assert md.startswith("**INTERRUPTED** by SIGTERM at 1970-01-01 00:00:00 UTC between tests; 3 tests not finished")
    counts = _section(md, "Counts")
    assert "| gpu-0001 | health | 0 | 0 | 8 | 1 |" in counts  # a few hosts: a row per host and layer, as before


def test_records_without_causes_group_by_their_words_with_the_host_taken_out():
    """Records written before causes (results.json format 2, read back by a merge) join by their message's first
    line with the host's name taken out, never by more of their words."""
    recs = [CaseRecord(f"s/test_health.py::{t}[{h}]", f"{t}[{h}]", h, "health", "error", f"{h}: unreachable")
            for t in ("test_a", "test_b") for h in ("n1", "n2")]
    recs.append(CaseRecord("s/test_health.py::test_c[n1]", "test_c[n1]", "n1", "health", "error", "n1: crashed"))
    groups = failure_groups(recs)
    assert [(g["hosts"], g["tests"]) for g in groups] == [(["n1", "n2"], 4), (["n1"], 1)]
    # a host line: without keys, by words; with them, by cause
    reasons = ["test_a: n1: unreachable", "test_b: n1: written off: unreachable", "test_c: n1: crashed"]
    assert same_reason_once(reasons) == reasons
    keys = reason_keys([CaseRecord(f"s/test_health.py::{t}[n1]", f"{t}[n1]", "n1", "health", "error", "x",
                                   causes=[{"class": c, "kind": k, "host": "n1"}])
                        for t, c, k in (("test_a", "connectivity", "unreachable"), ("test_b", "connectivity",
                                                                                     "unreachable"),
                                        ("test_c", "tool", "probe_crashed"))])["n1"]
    assert same_reason_once(reasons, keys) == ["test_a and 1 more test of the same cause: n1: unreachable",
                                               "test_c: n1: crashed"]
    assert not re.search(r"\bwritten off\b", " ".join(same_reason_once(reasons, keys)))


def test_hosts_naming_one_filesystem_server_read_as_that_servers_cause_said_once():
    """Twelve hosts whose kernel logs say their NFS server stopped answering: one entry naming the server 9 of
    them share (and the 2 that share another), not 12 nodes' faults; a server named by one host alone is not
    raised as shared."""
    hosts = [f"gpu-{i:02d}" for i in range(12)]
    servers = ["10.0.0.5:/export"] * 9 + ["10.0.0.6:/scratch"] * 2 + [None]
    recs = [CaseRecord(f"suites/test_host.py::test_kernel_log[{h}]", f"test_kernel_log[{h}]", h, "host", "error",
                       f"{h}: kernel log: the network filesystem nfs, server {s}, stopped answering this node", 0.01,
                       causes=[{"class": "connectivity", "kind": "netfs_server_stalled", "host": h,
                                "evidence": {"filesystem": "nfs", "server": s}}]) for h, s in zip(hosts, servers)]
    md = _summary(hosts, recs)
    entry = _section(md, "Failures and errors")
    assert ("one cause outside these nodes: server 10.0.0.5:/export named by 9 hosts; server 10.0.0.6:/scratch named "
            "by 2 hosts (1 other host naming another or none)") in entry
    alone = _summary(hosts[:1], recs[:1])
    assert "outside these nodes" not in alone
