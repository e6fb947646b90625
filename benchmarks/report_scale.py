"""Report write cost at fleet scale: 10,000 hosts x 23 checks x 8 GPUs. Prints a table.

    PYTHONPATH=. python benchmarks/report_scale.py [--hosts 10000] [--checks 23] [--prometheus]

Runs the plugin's own report path (gpuaccept.plugin.finish.finish_reports, the Reporter and the history sink) on
synthetic records: 8 judged per-GPU figures per test, one host in ten failing one check. Per finished test:
results.jsonl appended, the test's <testcase> spooled, its history rows made (O(new result)); the whole-run
files and the history rows so far are written at most every FLUSH_MIN_S s and at most every FLUSH_COST_RATIO x
the last rewrite's cost (counted here: rewrites, their share of the run); at the end finish_reports (the last
history rows and their stand-outs, results.json, JUnit per layer, summary.md, failed-hosts.txt, report.html,
optionally the Prometheus textfile, while a thread writes the run row and the latest values into the history).

The "before" row was measured on this machine (2 shared cores) with the same records through the end of a run
as commit 301c345 wrote it (all history rows inserted at the end, results.json and JUnit serialised from the
records), 2026-11-30; the numbers vary by a few tens of percent with the load of the machine.

The anchor (the target: the end within 1.2x of it) is a plain json.dumps of the same records written to one
file. Since the whole-run files count over a RunTally kept per record (gpuaccept.reporting.tally: summary.md's
counts, skips, unstable figures and failures, the JUnit headers, report.html's heatmap cells and busbw tables),
the GPU table is made once for summary.md and report.html, and the peer outliers sort each group once, the end
at 10,000 hosts took 14.3 s wall (history 2.3, files 6.3, html 1.2, then 4.3 s waiting for the history's run row
and latest values, written in a thread) and 20.2 s CPU against json.dumps 16.2 s (0.88x); commit 6ccbd8e,
measured right after it on the same machine: 16.4 s (2.9, 9.5, 2.9, waited 1.1) and 27.0 s CPU against 17.2 s
(0.96x), and earlier that day under more load 29.9 s (2.6, 20.6, 6.5) against 23.7 s (1.26x), 2026-12-02. The
history's thread (SQLite upserting ``latest`` from 1.84 M rows) is now the longest part of the end.
"""
import argparse
import os
import resource
import tempfile
import time

from gpuaccept.plugin import finish as reporting
import json

from gpuaccept.reporting.records import LAYERS, CaseRecord, record_dict
from gpuaccept.reporting.reporter import Reporter

ap = argparse.ArgumentParser()
ap.add_argument("--hosts", type=int, default=10000)
ap.add_argument("--checks", type=int, default=23)
ap.add_argument("--prometheus", action="store_true", help="also write the Prometheus textfile")
a = ap.parse_args()
with tempfile.TemporaryDirectory() as d:
    hosts = [f"gpu{i:05d}" for i in range(a.hosts)]
    rep = Reporter(os.path.join(d, "run"), "bench", {"hosts": hosts, "inventory": "bench.ini",
                                                     "host_sku": {h: "h200-sxm-141gb" for h in hosts}})
    hist = reporting.HistorySink(os.path.join(d, "history.sqlite"), "bench", time.time(), "standard")
    rep.sinks.append(hist)
    rewrites, rewrite_s = 0, 0.0
    t0 = time.perf_counter()
    for h in hosts:
        for c in range(a.checks):
            layer = LAYERS[c % len(LAYERS)]
            figs = [{"host": h, "layer": layer, "test": f"test_{c}", "check": f"check_{c}", "gpu": g,
                     "pci_bus_id": f"0000:{g:02x}:00.0", "serial": f"{h}-{g}", "value": 100.0 + g,
                     "unit": "GB/s", "limit": {"min": 90.0, "source": "bench"}, "verdict": "pass"} for g in range(8)]
            bad = c == 0 and h.endswith("7")
            if bad:
                figs[3].update(value=80.0, verdict="fail")
            before = rep.flush_total_s
            rep.add(CaseRecord(f"suites/test_{layer}.py::test_{c}[{h}]", f"test_{c}[{h}]", h, layer,
                               "failed" if bad else "passed", "GPU 3: check_0 80 < 90" if bad else "", 0.1, figs))
            if rep.flush_total_s != before:
                rewrites += 1
    t_run = time.perf_counter() - t0
    rewrite_s = rep.flush_total_s
    n = len(rep.records)
    parts: dict[str, float] = {}
    t0, c0 = time.perf_counter(), time.process_time()
    reporting.finish_reports(rep, hist, prometheus_path=os.path.join(d, "g.prom") if a.prometheus else None,
                             timings=parts)
    t_end, c_end = time.perf_counter() - t0, time.process_time() - c0
    # the anchor: a plain json.dumps of the same records, written to one file
    t0 = time.perf_counter()
    with open(os.path.join(d, "plain.json"), "w") as f:
        f.write(json.dumps([record_dict(r) for r in rep.records.values()]))
    t_plain = time.perf_counter() - t0
    assert rep.write_error is None, rep.write_error
    size = sum(os.path.getsize(os.path.join(rep.dir, f)) for f in os.listdir(rep.dir) if f != "results.jsonl")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print("| code | hosts | tests | figures | per test, incl. periodic rewrites (us) | periodic rewrites (n, % of run) "
          "| end of run: wall s (history, files, html) | end CPU s | whole-run files (MB) | peak RSS (GiB) "
          "| json.dumps of the records (s) | end / json.dumps |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    if a.hosts == 10000 and a.checks == 23:
        print("| before (301c345) | 10000 | 230000 | 1840000 | 129 (incl. its periodic rewrites; no history rows) | not counted "
              "| 154.3 (38.8, 100.4, 15.1) | 75.3 | - | 5.13 | - | - |")
        print("| before (figures listed twice) | 10000 | 230000 | 1840000 | - | - "
              "| 25.7 | - | 1500 | 2.17 | 13.0 | 1.98 |")
        print("| before (6ccbd8e: every figure walked again at the end) | 10000 | 230000 | 1840000 | 318 | 1, 1.5 % "
              "| 16.4 (2.9, 9.5, 2.9, waited for the history's end 1.1) | 27.0 | 1024 | 3.12 | 17.2 | 0.96 |")
    print(f"| this | {a.hosts} | {n} | {n * 8} | {t_run / n * 1e6:.0f} | {rewrites}, {100 * rewrite_s / t_run:.1f} % "
          f"| {t_end:.1f} ({parts.get('history', 0):.1f}, {parts.get('files', 0):.1f}, {parts.get('html', 0):.1f}"
          f"{', prometheus %.1f' % parts['prometheus'] if a.prometheus else ''}"
          f", waited for the history's end {parts.get('history end', 0):.1f}) | {c_end:.1f} | {size / 1e6:.0f} "
          f"| {rss:.2f} | {t_plain:.1f} | {t_end / t_plain:.2f} |")
