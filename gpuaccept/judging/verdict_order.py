"""The one verdict order: FAIL > ERROR > PASS > SKIP, for a host, a run and every report. Pure.

- FAIL: a proven fault (a figure outside its limit, a health fault);
- ERROR: could not be measured, always with its cause (unreachable, crashed, timed out, interrupted, busy,
  blocked, disturbed, not rerun);
- PASS: measured and within limits;
- SKIP: not applicable to this node's shape.

A host with a proven fault is FAIL whatever else its tests say, so the verdict does not depend on which
layers were selected: a lost GPU fails its health tests and blocks (errors) the memory and compute tests,
and the host reads FAIL "and 4 tests blocked", under ``-m health`` as under the whole suite. The host line,
the run line, failed-hosts.txt, report.html, the JUnit ``gpuaccept.host_verdict`` properties and Prometheus
all take their verdict from here.
"""
from __future__ import annotations

#: strongest first
ORDER = ("FAIL", "ERROR", "PASS", "SKIP")

#: Prometheus ``gpuaccept_host_verdict`` value: the stronger the verdict, the higher, so that ``max`` over
#: hosts (or runs) keeps the order above
PROMETHEUS_CODE = {"SKIP": 0, "PASS": 1, "ERROR": 2, "FAIL": 3}

#: verdicts a rerun (failed-hosts.txt) must take up again
NOT_PASSED = ("FAIL", "ERROR")


def rank(verdict: str) -> int:
    """Position in :data:`ORDER` (0 strongest); an unknown word ranks as ERROR (never as a pass)."""
    return ORDER.index(verdict) if verdict in ORDER else ORDER.index("ERROR")


def strongest(verdicts) -> str:
    """The strongest of ``verdicts`` by :data:`ORDER`; SKIP for none."""
    return min(verdicts, key=rank, default="SKIP")


def from_counts(counts: dict) -> str:
    """A host's verdict from its tests' outcome counts (``{"failed": n, "error": n, "passed": n, "skipped":
    n}``): FAIL, else ERROR, else PASS, else SKIP."""
    return ("FAIL" if counts.get("failed") else "ERROR" if counts.get("error") else
            "PASS" if counts.get("passed") else "SKIP")


def sort_key(verdict: str, name: str) -> tuple[int, str]:
    """Hosts listed strongest verdict first, then by name."""
    return rank(verdict), name
