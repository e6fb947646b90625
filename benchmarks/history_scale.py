"""History database at fleet scale: 1,000 simulated runs of 100 hosts x 8 GPUs. Prints a table.

    PYTHONPATH=. python benchmarks/history_scale.py [--runs 1000] [--hosts 100] [--checks 10]

Each GPU records ``--checks`` judged throughput figures per run (a nightly standard run judges about 10 per
GPU: HBM read/write/copy, PCIe H2D/D2H, bf16/fp16/tf32/fp8/fp64 TFLOP/s). Measures the time to record a run
(one transaction), the stand-out look-up for the next run, and the file size.
"""
import argparse
import os
import random
import tempfile
import time

from gpuaccept.reporting import history

ap = argparse.ArgumentParser()
ap.add_argument("--runs", type=int, default=1000)
ap.add_argument("--hosts", type=int, default=100)
ap.add_argument("--checks", type=int, default=10)
a = ap.parse_args()
rnd = random.Random(1)
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "history.sqlite")
    con = history.connect(path)
    t_rec = []
    for r in range(a.runs):
        figs = [{"host": f"gpu{h:03d}", "layer": "memory", "test": "t", "check": f"check_{c}", "gpu": g,
                 "pci_bus_id": f"0000:{g:02x}:00.0", "serial": f"S{h:03d}{g}", "sku": "h200-sxm-141gb",
                 "value": 1000.0 * rnd.uniform(0.95, 1.05), "unit": "GB/s", "limit": {"min": 900.0}, "verdict": "pass"}
                for h in range(a.hosts) for g in range(8) for c in range(a.checks)]
        t0 = time.perf_counter()
        history.record_run(con, {"run_id": f"r{r:04d}", "started": 1.7e9 + r * 86400, "profile": "standard"}, [],
                           figs, {f"gpu{h:03d}": "PASS" for h in range(a.hosts)})
        t_rec.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    refs = history.references(con, figs, "latest-pass")
    history.standouts(figs, refs)
    t_ref = time.perf_counter() - t0
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = os.path.getsize(path)
    t0 = time.perf_counter()
    rows = history.figures_over_time(con, serial="S0420")
    t_cli = time.perf_counter() - t0
    print("| runs | hosts x GPUs | figures/run | rows | record one run (s, median / last) | stand-out look-up (s) "
          "| one GPU over time (s) | DB size (MB) |")
    print("|---|---|---|---|---|---|---|---|")
    n = len(figs)
    print(f"| {a.runs} | {a.hosts} x 8 | {n} | {a.runs * n} | {sorted(t_rec)[len(t_rec) // 2]:.2f} / {t_rec[-1]:.2f} "
          f"| {t_ref:.2f} | {t_cli:.3f} ({len(rows)} rows) | {size / 1e6:.0f} |")
