"""Reports of one run, written by the controller as results arrive.

``<dir>/results.jsonl``: one line per finished test, appended and flushed as it arrives (survives a kill).
``<dir>/results.json``: every figure and every test outcome (rewritten atomically, at most once a second
and at the end). ``<dir>/junit-<layer>.xml``: one testsuite per layer, one testcase per host x check,
figures as testcase properties (built with the junit-xml package). ``<dir>/summary.md``: the table a
person reads first. Records are self-describing (run id, host, layer, check) so that runs sharded over
Slurm or Kubernetes can be merged.
"""
from __future__ import annotations

import json
import os
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from typing import Any

from junit_xml import TestCase, TestSuite

LAYERS = ("health", "memory", "compute", "nvlink", "nccl", "gpudirect", "storage", "burnin")


@dataclass
class CaseRecord:
    """Outcome of one test: ``outcome`` is passed|failed|error|skipped; ``figures`` the records."""

    nodeid: str
    name: str
    host: str | None
    layer: str
    outcome: str
    message: str = ""
    duration_s: float = 0.0
    figures: list[dict] = field(default_factory=list)
    run_id: str = ""


def _atomic_write(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


class Reporter:
    """Writes the reports of one run into ``directory``. Call :meth:`add` per finished test,
    :meth:`expect` with the test ids that should run, :meth:`close` at the end (marks the missing)."""

    def __init__(self, directory: str, run_id: str, meta: dict[str, Any], previous: list[dict] | None = None):
        self.previous = previous or []
        self.dir = directory
        self.run_id = run_id
        self.meta = meta
        self.records: dict[str, CaseRecord] = {}
        self.expected: dict[str, tuple[str | None, str]] = {}
        self._last_flush = 0.0
        self.write_error: str | None = None  # first failure to write (full disk...), reported at the end
        os.makedirs(directory, exist_ok=True)
        self._jsonl = open(os.path.join(directory, "results.jsonl"), "a", encoding="utf-8")

    def _guard(self, what: str, fn) -> None:
        """Run a write; on OSError (disk full, folder gone) remember it and go on measuring: the records
        stay in memory and every later flush tries again."""
        try:
            fn()
        except OSError as e:
            if self.write_error is None:
                self.write_error = f"{self.dir}: cannot write {what}: {e.strerror or e}"

    def expect(self, nodeid: str, host: str | None, layer: str) -> None:
        """Declare a test that should produce a record (missing ones become errors at close)."""
        self.expected.setdefault(nodeid, (host, layer))

    def add(self, rec: CaseRecord) -> None:
        """Store a finished test; append it to results.jsonl now; refresh the other files (throttled)."""
        rec.run_id = self.run_id
        self.records[rec.nodeid] = rec

        def append():
            self._jsonl.write(json.dumps(asdict(rec), default=str) + "\n")
            self._jsonl.flush()
            os.fsync(self._jsonl.fileno())
        self._guard("results.jsonl", append)
        if time.monotonic() - self._last_flush > 1.0:
            self.flush()

    def close(self, missing_reason: str) -> None:
        """Mark expected tests that never reported as errors with ``missing_reason``; write everything."""
        for nodeid, (host, layer) in self.expected.items():
            if nodeid not in self.records:
                name = nodeid.split("::")[-1]
                self.add(CaseRecord(nodeid, name, host, layer, "error", f"not run: {missing_reason}"))
        self.flush()
        self._guard("results.jsonl", self._jsonl.close)

    # -- writers -----------------------------------------------------------------------------------
    def flush(self) -> None:
        """Rewrite results.json, junit-<layer>.xml and summary.md from the records so far."""
        self._guard("reports", self._write_all)

    def _write_all(self) -> None:
        self._last_flush = time.monotonic()
        recs = list(self.records.values())
        figures = [f for r in recs for f in r.figures]
        slow = outliers(figures, self.previous)
        _atomic_write(os.path.join(self.dir, "results.json"), json.dumps(
            {"run_id": self.run_id, **self.meta, "tests": [asdict(r) for r in recs], "figures": figures,
             "outliers": slow}, indent=1, default=str))
        for layer in sorted({r.layer for r in recs}):
            _atomic_write(os.path.join(self.dir, f"junit-{layer}.xml"),
                          junit_xml_text(layer, [r for r in recs if r.layer == layer]))
        _atomic_write(os.path.join(self.dir, "summary.md"), summary_markdown(self.run_id, self.meta, recs, slow))


def junit_xml_text(layer: str, recs: list[CaseRecord]) -> str:
    """One testsuite named ``layer``; a testcase per record; figures as ``<properties>`` per testcase."""
    cases = []
    for r in recs:
        tc = TestCase(r.name, classname=f"{layer}.{r.host or 'fleet'}", elapsed_sec=r.duration_s,
                      file=r.nodeid.split("::")[0])
        if r.outcome == "failed":
            tc.add_failure_info(message=r.message.splitlines()[0] if r.message else "failed", output=r.message)
        elif r.outcome == "error":
            tc.add_error_info(message=r.message.splitlines()[0] if r.message else "error", output=r.message)
        elif r.outcome == "skipped":
            tc.add_skipped_info(message=r.message)
        cases.append(tc)
    suite = TestSuite(layer, cases, timestamp=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()))
    root = ET.Element("testsuites")
    doc = suite.build_xml_doc()
    for el, r in zip(doc.findall("testcase"), recs):
        if r.figures:
            props = ET.Element("properties")
            for i, f in enumerate(r.figures):
                gpu = f"gpu{f['gpu']}." if f.get("gpu") is not None else ""
                ET.SubElement(props, "property", {"name": f"{gpu}{f['check']}",
                                                  "value": f"{f['value']} {f.get('unit') or ''}".strip()})
            el.insert(0, props)
    root.append(doc)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def _key(f: dict) -> tuple:
    return (f.get("host"), f.get("check"), f.get("gpu"), json.dumps((f.get("extra") or {}).get("pair")))


def outliers(figures: list[dict], previous: list[dict], peer_pct: float = 10.0, history_pct: float = 10.0,
             min_peers: int = 3) -> list[dict]:
    """Judged figures that stand out, even when they pass their limit (pure).

    ``peers``: worse than the median of the same check over every host and GPU of this run by more than
    ``peer_pct`` percent (only with at least ``min_peers`` figures). ``history``: worse than the same host,
    check and GPU in ``previous`` (the last run's figures) by more than ``history_pct`` percent. Only figures
    judged against a ``min`` limit (bandwidths, TFLOP/s: higher is better) are compared. Returns records
    ``{host, check, gpu, value, unit, against, reference, pct}``.
    """
    # throughput-like figures only (a "min" limit): error counts and percentages against a "max" limit are
    # small integers whose relative change means nothing (1 CRC error/s is "100% above" 0.5)
    judged = [f for f in figures if isinstance(f.get("limit"), dict) and "min" in f["limit"]
              and isinstance(f.get("value"), (int, float)) and not isinstance(f.get("value"), bool)]
    out: list[dict] = []
    by_check: dict[str, list[float]] = {}
    for f in judged:
        by_check.setdefault(f["check"], []).append(float(f["value"]))
    prev = {_key(f): f["value"] for f in previous if isinstance(f.get("value"), (int, float))}
    for f in judged:
        vals = by_check[f["check"]]
        refs = []
        if len(vals) >= min_peers:
            refs.append(("peers", sorted(vals)[len(vals) // 2], peer_pct))
        if _key(f) in prev:
            refs.append(("history", float(prev[_key(f)]), history_pct))
        for against, ref, pct in refs:
            if ref and (ref - f["value"]) / abs(ref) * 100.0 > pct:
                out.append({"host": f["host"], "check": f["check"], "gpu": f.get("gpu"), "value": f["value"],
                            "unit": f.get("unit"), "against": against, "reference": ref,
                            "pct": round(abs(ref - f["value"]) / abs(ref) * 100.0, 1)})
    return out


def load_previous_figures(directory: str | None) -> list[dict]:
    """Figures of an earlier run's results.json (empty when absent or unreadable)."""
    if not directory:
        return []
    try:
        with open(os.path.join(directory, "results.json"), encoding="utf-8") as f:
            return list(json.load(f).get("figures") or [])
    except (OSError, ValueError):
        return []


def summary_markdown(run_id: str, meta: dict, recs: list[CaseRecord], slow: list[dict] | None = None) -> str:
    """The human summary: counts per layer and host, failures first, then every judged figure per GPU."""
    out = [f"# gpuaccept run {run_id}", "",
           f"inventory `{meta.get('inventory')}`, limit `{meta.get('limit') or 'all'}`, "
           f"{len({r.host for r in recs if r.host})} hosts, {len(recs)} tests", ""]
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for r in recs:
        c = counts.setdefault((r.host or "fleet", r.layer), {})
        c[r.outcome] = c.get(r.outcome, 0) + 1
    out += ["| host | layer | passed | failed | error | skipped |", "|---|---|---|---|---|---|"]
    for (host, layer), c in sorted(counts.items()):
        out.append(f"| {host} | {layer} | {c.get('passed', 0)} | {c.get('failed', 0)} | {c.get('error', 0)} "
                   f"| {c.get('skipped', 0)} |")
    bad = [r for r in recs if r.outcome in ("failed", "error")]
    if bad:
        out += ["", "## Failures and errors", ""]
        for r in bad:
            first, *rest = (r.message or r.outcome).splitlines() or [r.outcome]
            out.append(f"- **{r.outcome.upper()}** `{r.nodeid}`: {first}")
            out += [f"  - {ln}" for ln in rest[:20]]
    if slow:
        out += ["", "## Stand-outs (within limits, but slower than peers or than the last run)", "",
                "| host | check | GPU | value | against | reference | worse by |", "|---|---|---|---|---|---|---|"]
        for o in slow:
            out.append(f"| {o['host']} | {o['check']} | {'' if o['gpu'] is None else o['gpu']} | {_fmt(o['value'])} "
                       f"{o.get('unit') or ''} | {o['against']} | {_fmt(o['reference'])} | {o['pct']}% |")
    skipped = [r for r in recs if r.outcome == "skipped"]
    if skipped:
        out += ["", "## Skipped", ""] + [f"- `{r.nodeid}`: {r.message}" for r in skipped]
    figs = [f for r in recs for f in r.figures if f.get("verdict") in ("pass", "fail") or f.get("gpu") is not None]
    if figs:
        out += ["", "## Figures", "", "| host | layer | check | GPU | PCI bus id | value | unit | limit | verdict |",
                "|---|---|---|---|---|---|---|---|---|"]
        for f in figs:
            lim = f.get("limit") or {}
            lim_s = " ".join(f"{'>=' if k == 'min' else '<='} {_fmt(v)}" for k, v in lim.items() if k in ("min", "max"))
            out.append(f"| {f['host']} | {f['layer']} | {f['check']} | {'' if f.get('gpu') is None else f['gpu']} "
                       f"| {f.get('pci_bus_id') or ''} | {_fmt(f['value'])} | {f.get('unit') or ''} | {lim_s} "
                       f"| {f['verdict']} |")
    return "\n".join(out) + "\n"
