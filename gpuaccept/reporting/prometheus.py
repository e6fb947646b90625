"""The run's figures for Prometheus, in node_exporter's textfile-collector format (``--prometheus-textfile``).

Written with ``prometheus_client``: a private ``CollectorRegistry`` holding one custom collector (metric
families made at collection, as prometheus_client documents for proxies/exporters) and ``write_to_textfile``,
which writes a temporary file and renames it over the target, so the collector never reads half a file.

Metrics (all gauges):
- ``gpuaccept_<check>`` per numeric figure, the check's first word (``seq_read_gbps`` of ``seq_read_gbps
  /scratch``) sanitised to ``[a-zA-Z0-9_]``, with the fixed labels :data:`LABELS`: host, gpu, pci_bus_id, serial,
  sku, unit; ``target``, the rest of the check (a storage path, an InfiniBand port, an NCCL variable); and what
  tells one figure of a check from another, :data:`MEASURED`: ``bytes`` (a message size), ``pair`` (a GPU pair),
  ``dtype``, ``method``, ``direction``, ``shape`` (``MxNxK``) — each "" where the figure has none. Nothing the
  run decides (the hosts of an all-reduce, a filesystem's options, a timestamp) is in a name or a label, so a
  series keeps its identity from night to night whatever hosts were selected;
- ``gpuaccept_figure_pass`` 1/0 per judged figure (same labels plus check);
- ``gpuaccept_host_verdict`` per host: 3 FAIL, 2 ERROR, 1 PASS, 0 SKIP, the one verdict order
  (gpuaccept.judging.verdict_order: ``max`` over hosts keeps it; label ``verdict`` spells it, label
  ``action`` names what to do next: rerun, free-space, fix-config, check-network, reset-gpu, reboot, drain-rma, or
  "none"; ``cause`` the class of its cause: hardware, configuration, contention, capacity, connectivity, tool,
  interruption, unverified, or "none");
- ``gpuaccept_last_run_timestamp_seconds`` per host (label host): the start of the run that tested it, Unix
  time, for "no acceptance run on this host for two days" alerts (``time() - ... > 172800``);
- ``gpuaccept_run_timestamp_seconds`` (start) and ``gpuaccept_run_duration_seconds``;
- ``gpuaccept_figures_not_exported``: figures left out above :data:`MAX_FIGURES` (passing hosts' first).

Series are stable from run to run: no label carries the run id (a new series every night made "time since the
last run" awkward to alert on); the run id is in the file's first comment line and in results.json.
"""
from __future__ import annotations

import re
from typing import Iterable

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.core import GaugeMetricFamily

from gpuaccept.judging import verdict_order
from gpuaccept.judging.readings import number

VERDICT_CODE = verdict_order.PROMETHEUS_CODE
# At most this many figures become series (two samples each: the value and figure_pass); above it, the
# figures of hosts that did not pass come first and the rest are counted in gpuaccept_figures_not_exported.
# prometheus_client's writer formats about 25,000 samples a second on the 2-core development machine
# (1.84 million figures: 70 s and a 600 MB file, which node_exporter would read at every scrape); 100,000
# figures: about 8 s and 30 MB. The history database keeps every figure. Chosen.
MAX_FIGURES = 100_000
#: the extras of a figure that say what was measured, each a label of every figure series ("" when absent)
MEASURED = ("bytes", "pair", "dtype", "method", "direction", "shape")
LABELS = ("host", "gpu", "pci_bus_id", "serial", "sku", "unit", "target") + MEASURED


def metric_name(check: str) -> str:
    """``gpuaccept_<first word of check>`` with every character outside ``[a-zA-Z0-9_]`` replaced by ``_``."""
    return "gpuaccept_" + re.sub(r"[^a-zA-Z0-9_]", "_", check.split(" ", 1)[0])


def measured_labels(f: dict) -> list[str]:
    """The :data:`MEASURED` label values of figure ``f`` (its ``extra``): a GPU pair ``[0, 1]`` as ``0-1``, an
    ``m``/``n``/``k`` matmul shape as ``8192x8192x8192``; "" for each it has not."""
    ex = f.get("extra") if isinstance(f.get("extra"), dict) else {}

    def text(v) -> str:
        if isinstance(v, (list, tuple)):
            return "-".join(str(x) for x in v)
        return "" if v is None or isinstance(v, dict) else str(v)
    shape = "x".join(str(ex[k]) for k in ("m", "n", "k")) if all(k in ex for k in ("m", "n", "k")) else ""
    return [text(ex.get(k)) for k in MEASURED[:-1]] + [shape]


def _cause(action: dict | str | None) -> str | None:
    """The cause class of a host's action (gpuaccept.judging.actions' dict), None for a bare name or none."""
    return action.get("cause") if isinstance(action, dict) else None


class _RunCollector:
    """The run's metric families, made when the registry is collected (a custom collector: one sample per
    figure, without the per-child lock and value object that ``Gauge.labels()`` keeps; at 1.84 million figures
    that is the difference between seconds and minutes, and gigabytes of memory)."""

    def __init__(self, run_id: str, started: float, finished: float, figures: list[dict],
                 host_verdicts: dict[str, str], left_out: int, host_actions: dict[str, str] | None = None,
                 earlier: dict[str, float] | None = None):
        self.args = (run_id, started, finished, figures, host_verdicts)
        self.left_out = left_out
        self.host_actions = host_actions or {}
        self.earlier = earlier or {}  # host -> its last run's start, from the file this one replaces (last_runs)

    def describe(self):
        return []  # names are not checked for clashes: the registry holds this collector alone

    def collect(self):
        _run_id, started, finished, figures, host_verdicts = self.args
        fams: dict[str, GaugeMetricFamily] = {}
        passed = GaugeMetricFamily("gpuaccept_figure_pass", "1 when the figure is within its limit, 0 when not",
                                   labels=LABELS + ("check",))
        seen: set[tuple] = set()
        for f in figures:
            v = number(f.get("value"))
            if v is None:
                continue
            name = metric_name(f["check"])
            fam = fams.get(name)
            if fam is None:
                fam = fams[name] = GaugeMetricFamily(name, f"gpuaccept figure {f['check'].split(' ', 1)[0]} (unit "
                                                           f"in label 'unit')", labels=LABELS)
            labels = [str(f.get("host") or ""), "" if f.get("gpu") is None else str(f["gpu"]),
                      str(f.get("pci_bus_id") or ""), str(f.get("serial") or ""), str(f.get("sku") or ""),
                      str(f.get("unit") or ""), f["check"].partition(" ")[2]] + measured_labels(f)
            key = (name, *labels)
            if key in seen:  # a figure recorded twice in one run: keep the first
                continue
            seen.add(key)
            fam.add_metric(labels, v)
            if f.get("verdict") in ("pass", "fail"):
                passed.add_metric(labels + [f["check"]], 1 if f["verdict"] == "pass" else 0)
        yield passed
        yield from fams.values()
        hv = GaugeMetricFamily("gpuaccept_host_verdict", "host verdict: 3 FAIL, 2 ERROR, 1 PASS, 0 SKIP",
                               labels=("host", "verdict", "action", "cause"))
        for host, verdict in host_verdicts.items():
            act = self.host_actions.get(host)
            name, cause = (act.get("action"), _cause(act)) if isinstance(act, dict) else (act, None)
            hv.add_metric([host, verdict, name or "none", cause or "none"], VERDICT_CODE.get(verdict, 2))
        yield hv
        last = GaugeMetricFamily("gpuaccept_last_run_timestamp_seconds", "start of the last run that tested the "
                                 "host, Unix time", labels=("host",))
        # a host this run did not test, or whose only findings are the run's interruption (its action's cause
        # class "interruption": interrupted, not run, not finished), keeps the start of the last run that did
        tested = {h for h in host_verdicts if h != "fleet" and _cause(self.host_actions.get(h)) != "interruption"}
        for host in tested:
            last.add_metric([host], started)
        for host, at in self.earlier.items():
            if host not in tested:
                last.add_metric([host], at)
        yield last
        fam = GaugeMetricFamily("gpuaccept_figures_not_exported", "figures of the run not written here (above the "
                                "limit: passing hosts' first; the history database has them)")
        fam.add_metric([], self.left_out)
        yield fam
        for name, doc, value in (("gpuaccept_run_timestamp_seconds", "start of the run, Unix time", started),
                                 ("gpuaccept_run_duration_seconds", "duration of the run, seconds",
                                  max(0.0, finished - started))):
            fam = GaugeMetricFamily(name, doc)
            fam.add_metric([], value)
            yield fam


def write_textfile(path: str, run_id: str, started: float, finished: float, figures: list[dict],
                   host_verdicts: dict[str, str], max_figures: int = MAX_FIGURES,
                   host_actions: dict[str, dict | str | None] | None = None,
                   inventory_hosts: Iterable[str] | None = None) -> None:
    """Write the run to ``path`` atomically (temp file + rename). Non-numeric figures are left out, and above
    ``max_figures`` (default :data:`MAX_FIGURES`) figures those of passing hosts first (counted in
    ``gpuaccept_figures_not_exported``). ``host_actions``: host -> its action (the dict of
    gpuaccept.judging.actions, or its name): the host verdict's ``action`` and ``cause`` labels, "none" without. ``run_id`` is written nowhere in the file: its series
    and HELP lines stay the same from run to run (docs/reports.md). The last-run timestamps of the file it
    replaces are kept for the hosts this run did not test (:func:`last_runs`) that are in ``inventory_hosts``
    (every host of the run's inventory; None: all of them): a host taken out of the inventory leaves the file,
    and the untested-for-two-days alert with it."""
    earlier = last_runs(path)
    if inventory_hosts is not None:
        known = set(inventory_hosts)
        earlier = {h: at for h, at in earlier.items() if h in known}
    left_out = 0
    if len(figures) > max_figures:
        bad = [f for f in figures if host_verdicts.get(str(f.get("host"))) != "PASS"]
        good = [f for f in figures if host_verdicts.get(str(f.get("host"))) == "PASS"]
        keep = (bad + good)[:max_figures]
        left_out, figures = len(figures) - len(keep), keep
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_RunCollector(run_id, started, finished, figures, host_verdicts, left_out, host_actions, earlier))
    write_to_textfile(path, reg)


#: a ``gpuaccept_last_run_timestamp_seconds`` sample line of the textfile: the host label (escaped as the text
#: format escapes it: backslash, double quote, newline) and the value
_LAST_RUN = re.compile(r'^gpuaccept_last_run_timestamp_seconds\{host="((?:[^"\\]|\\.)*)"\} (\S+)$')


def last_runs(path: str) -> dict[str, float]:
    """Per host, ``gpuaccept_last_run_timestamp_seconds`` of the textfile at ``path`` (the one a new run replaces),
    so that a ``--limit`` rerun keeps the hosts it does not test in the file, each with the start of the last run
    that tested it (the two-day alert of docs/reports.md). ``{}`` for no file, or one that cannot be read; lines
    read one at a time (the file may hold 100,000 figures)."""
    out: dict[str, float] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.startswith("gpuaccept_last_run_timestamp_seconds{"):
                    continue
                m = _LAST_RUN.match(line.rstrip("\n"))
                v = number(_float(m.group(2))) if m else None
                if m and v is not None:
                    host = re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(1))
                    out[host] = v
    except OSError:
        return {}
    return out


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
