"""Grouping and wording of verdicts (gpuaccept/reporting/verdicts.py): each test is read by the cause its action
follows."""
from __future__ import annotations

from gpuaccept.reporting.records import CaseRecord
from gpuaccept.reporting.verdicts import cause_key, failure_groups, first_cause


def _disturbed_and_full(host: str) -> CaseRecord:
    """fio's test on a host that was busy while it ran and whose folder filled up: two causes, the action the
    stronger one's (free-space over rerun)."""
    return CaseRecord(
        nodeid=f"suites/test_storage.py::test_local_storage_throughput[{host}]", name=f"test_local_storage_throughput[{host}]",
        host=host, layer="storage", outcome="error",
        message="disturbed: host busy: pid 30193 (python), 45 % of the CPUs\nnot enough free space on /data",
        action={"action": "free-space", "cause": "capacity", "kind": "free_space", "reason": "too little space"},
        causes=[{"class": "contention", "kind": "host_busy", "host": host, "check": "conditions"},
                {"class": "capacity", "kind": "free_space", "host": host, "check": None}])


def test_a_test_with_two_causes_is_read_by_the_one_its_action_follows():
    a, b = _disturbed_and_full("n1"), _disturbed_and_full("n2")
    assert first_cause(a, "n1")["kind"] == "free_space"
    (g,) = failure_groups([a, b])
    assert g["key"] == ("error", cause_key(first_cause(a, "n1")), None) and g["hosts"] == ["n1", "n2"]
    assert g["cause"]["class"] == "capacity"
    # a test without an action of its own: its first cause
    a.action = None
    assert first_cause(a, "n1")["kind"] == "host_busy"


def test_a_skip_reason_of_one_host_names_it():
    """Skips group across hosts with ``<host>`` in place of each one's name; a reason only one host has names it."""
    from gpuaccept.reporting.verdicts import skip_groups

    def skip(host: str, why: str) -> CaseRecord:
        return CaseRecord(nodeid=f"suites/test_gpudirect.py::test_rdma[{host}]", name=f"test_rdma[{host}]",
                          host=host, layer="gpudirect", outcome="skipped", message=why)
    groups = skip_groups([skip("n1", "n1: no ib_write_bw loopback ran"), skip("n2", "no NVMe on n2"),
                          skip("n3", "no NVMe on n3")])
    assert groups == {"no NVMe": (["n2", "n3"], 2), "n1: no ib_write_bw loopback ran": (["n1"], 1)}
