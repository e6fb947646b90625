"""Report write cost at fleet scale: 10,000 hosts x 23 checks (issue 13.3). Prints a table.

    PYTHONPATH=. python benchmarks/report_scale.py [--hosts 10000] [--checks 23]

Per finished test only results.jsonl is appended (O(new result)); the whole-run files (results.json, JUnit per
layer, summary.md, failed-hosts.txt) are rewritten at most every FLUSH_MIN_S s and at most FLUSH_COST_RATIO x
their last cost, and once at the end. Measures: appending every record, one whole-run rewrite, report.html.
"""
import argparse
import tempfile
import time

from gpuaccept import html_report
from gpuaccept.report import LAYERS, CaseRecord, Reporter

ap = argparse.ArgumentParser()
ap.add_argument("--hosts", type=int, default=10000)
ap.add_argument("--checks", type=int, default=23)
a = ap.parse_args()
with tempfile.TemporaryDirectory() as d:
    hosts = [f"gpu{i:05d}" for i in range(a.hosts)]
    rep = Reporter(d, "bench", {"hosts": hosts, "inventory": "bench.ini"})
    t0 = time.perf_counter()
    for h in hosts:
        for c in range(a.checks):
            layer = LAYERS[c % len(LAYERS)]
            figs = [{"host": h, "layer": layer, "test": f"test_{c}", "check": f"check_{c}", "gpu": g,
                     "pci_bus_id": f"0000:{g:02x}:00.0", "serial": f"{h}-{g}", "value": 100.0 + g,
                     "unit": "GB/s", "limit": {"min": 90.0, "source": "bench"}, "verdict": "pass"} for g in range(8)]
            rep.add(CaseRecord(f"suites/test_{layer}.py::test_{c}[{h}]", f"test_{c}[{h}]", h, layer,
                               "failed" if (c == 0 and h.endswith("7")) else "passed", "", 0.1, figs))
    t_add = time.perf_counter() - t0
    n = len(rep.records)
    t0, c0 = time.perf_counter(), time.process_time()
    rep.flush(final=True)
    t_flush, c_flush = time.perf_counter() - t0, time.process_time() - c0
    recs = list(rep.records.values())
    figs = rep.figures()
    t0 = time.perf_counter()
    html = html_report.render("bench", rep.meta, recs, figs, [])
    t_html = time.perf_counter() - t0
    print(f"| hosts | checks | tests | figures | append all (s) | per test (us) | whole-run rewrite (s wall, s CPU) | report.html (s, MB) |")
    print(f"|---|---|---|---|---|---|---|---|")
    print(f"| {a.hosts} | {a.checks} | {n} | {len(figs)} | {t_add:.1f} | {t_add / n * 1e6:.0f} | {t_flush:.1f}, {c_flush:.1f} | "
          f"{t_html:.1f}, {len(html) / 1e6:.1f} |")
