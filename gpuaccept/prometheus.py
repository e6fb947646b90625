"""The run's figures for Prometheus, in node_exporter's textfile-collector format (``--prometheus-textfile``).

Written with ``prometheus_client``: a private ``CollectorRegistry`` and ``write_to_textfile``, which writes a
temporary file and renames it over the target, so the collector never reads half a file.

Metrics (all gauges):
- ``gpuaccept_<check>`` per numeric figure, labels host, gpu, pci_bus_id, serial, sku, unit (and ``extra`` for
  figures that repeat per message size or pair, e.g. ``bytes=4096``); the check name is sanitised to
  ``[a-zA-Z0-9_]``;
- ``gpuaccept_figure_pass`` 1/0 per judged figure (same labels plus check);
- ``gpuaccept_host_verdict`` per host: 0 PASS, 1 FAIL, 2 ERROR, 3 SKIP (label ``verdict`` spells it);
- ``gpuaccept_run_timestamp_seconds`` (start) and ``gpuaccept_run_duration_seconds``, label run_id.
"""
from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from .history import _num, check_of

VERDICT_CODE = {"PASS": 0, "FAIL": 1, "ERROR": 2, "SKIP": 3}
LABELS = ("host", "gpu", "pci_bus_id", "serial", "sku", "unit", "extra")


def metric_name(check: str) -> str:
    """``gpuaccept_<check>`` with every character outside ``[a-zA-Z0-9_]`` replaced by ``_``."""
    return "gpuaccept_" + re.sub(r"[^a-zA-Z0-9_]", "_", check)


def write_textfile(path: str, run_id: str, started: float, finished: float, figures: list[dict],
                   host_verdicts: dict[str, str]) -> None:
    """Write the run to ``path`` atomically (temp file + rename). Non-numeric figures are left out."""
    reg = CollectorRegistry()
    gauges: dict[str, Gauge] = {}
    passed = Gauge("gpuaccept_figure_pass", "1 when the figure is within its limit, 0 when not",
                   LABELS + ("check",), registry=reg)
    seen: set[tuple] = set()
    for f in figures:
        v = _num(f.get("value"))
        if v is None:
            continue
        name = metric_name(f["check"])
        if name not in gauges:
            gauges[name] = Gauge(name, f"gpuaccept figure {f['check']} (unit in label 'unit')", LABELS, registry=reg)
        extra = check_of(f)[len(f["check"]):].strip("[]")
        labels = {"host": str(f.get("host") or ""), "gpu": "" if f.get("gpu") is None else str(f["gpu"]),
                  "pci_bus_id": str(f.get("pci_bus_id") or ""), "serial": str(f.get("serial") or ""),
                  "sku": str(f.get("sku") or ""), "unit": str(f.get("unit") or ""), "extra": extra}
        key = (name, *labels.values())
        if key in seen:  # a figure recorded twice in one run: keep the first
            continue
        seen.add(key)
        gauges[name].labels(**labels).set(v)
        if f.get("verdict") in ("pass", "fail"):
            passed.labels(**labels, check=f["check"]).set(1 if f["verdict"] == "pass" else 0)
    hv = Gauge("gpuaccept_host_verdict", "host verdict: 0 PASS, 1 FAIL, 2 ERROR, 3 SKIP", ("host", "verdict"),
               registry=reg)
    for host, verdict in host_verdicts.items():
        hv.labels(host=host, verdict=verdict).set(VERDICT_CODE.get(verdict, 2))
    Gauge("gpuaccept_run_timestamp_seconds", "start of the run, Unix time", ("run_id",),
          registry=reg).labels(run_id=run_id).set(started)
    Gauge("gpuaccept_run_duration_seconds", "duration of the run, seconds", ("run_id",),
          registry=reg).labels(run_id=run_id).set(max(0.0, finished - started))
    write_to_textfile(path, reg)
