"""gpuaccept.scaleout.quarantine through the Slurm drain plan (pure): the reason a drained node carries is the first
reason of a finding whose action is the host's, never another finding's (a fleet-wide fix-config before it)."""
from __future__ import annotations

from gpuaccept.judging import actions
from gpuaccept.reporting.records import CaseRecord
from gpuaccept.reporting.verdicts import host_verdicts
from gpuaccept.scaleout import drain

CLEAN = {"confirmed": True, "gpu_conditions": "clean", "host_conditions": "clean"}


def test_the_drain_reason_quotes_the_finding_that_drains_the_host():
    same = {"host": "h-b", "gpu": None, "pci_bus_id": None, "serial": None, "check": "fleet_consistency",
            "line": "h-b: reports the same GPUs as h-a (one machine under two names?)",
            "action": actions.for_finding("test_fleet_consistency", "fleet_consistency").to_dict()}
    slow = {"host": "h-b", "gpu": 1, "pci_bus_id": "0000:07:00.0", "serial": "165", "check": "h2d_bw_gbps",
            "line": "h-b GPU 1 (0000:07:00.0, serial 165): h2d_bw_gbps 20 GB/s < min 50 GB/s (confirmed)",
            "action": actions.for_finding("test_pcie_bandwidth", "h2d_bw_gbps", 20.0, direction="min",
                                          evidence=CLEAN).to_dict()}
    recs = [CaseRecord("suites/test_health.py::test_fleet_consistency", "test_fleet_consistency", None, "health",
                       "failed", same["line"], 0.1, [], failures=[same]),
            CaseRecord("suites/test_memory.py::test_pcie_bandwidth[h-b]", "test_pcie_bandwidth[h-b]", "h-b", "memory",
                       "failed", slow["line"], 0.1, [], failures=[slow])]
    hv = host_verdicts(recs, ["h-b"])
    assert hv["h-b"]["action"]["action"] == "drain-rma"
    assert hv["h-b"]["reasons"][0].startswith("test_fleet_consistency")  # the order the records came in
    (step,) = drain.plan(hv, ["h-b"], "night1", "/r/night1", {"h-b": "h-b"}, None, True, False, {},
                         lambda *a: None)
    reason = next(a for a in step.command if a.startswith("Reason="))
    assert "drain-rma: test_pcie_bandwidth: h-b GPU 1 (0000:07:00.0, serial 165): h2d_bw_gbps 20 GB/s" in reason, reason
    assert "same GPUs" not in reason
