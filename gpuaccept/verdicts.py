"""Recording figures and judging them inside a suite test.

A :class:`Verdicts` is bound to one test item and one node. Every figure recorded becomes a record in
``results.json`` and a property of the JUnit testcase (carried in the item's ``user_properties``, which
pytest-xdist ships to the controller). :meth:`Verdicts.finish` fails the test with one line per figure
outside its limit, naming host, GPU index, PCI bus id, serial, figure, limit and unit.
"""
from __future__ import annotations

from typing import Any

import pytest

from .drift import bus_key, nvml_gpu_for
from .thresholds import Limit, judge

FIGURE_KEY = "gpuaccept.figure"


def gpu_label(gpu: dict | None) -> str:
    """``"GPU 3 (0000:19:00.0, serial 1650...)"`` from a probe's per-GPU dict; ``""`` for node figures."""
    if not gpu:
        return ""
    parts = [p for p in (gpu.get("pci_bus_id"), f"serial {gpu['serial']}" if gpu.get("serial") else None) if p]
    return f"GPU {gpu.get('index', '?')}" + (f" ({', '.join(parts)})" if parts else "")


class Verdicts:
    """Collects figures of one test. ``item``: the pytest item; ``host``: host name; ``layer``: marker.

    ``gpu_ids`` maps a GPU index to its identity (pci_bus_id, serial, uuid) from the health probe, so
    figures from any probe name the GPU the same way. A figure carrying a PCI bus id is attributed by it
    (NVML's index, serial, UUID of that bus id), never by a torch index, which follows CUDA_DEVICE_ORDER.
    """

    def __init__(self, item: pytest.Item, host: str, layer: str, gpu_ids: dict[int, dict] | None = None):
        self.item = item
        self.host = host
        self.layer = layer
        self.gpu_ids = gpu_ids or {}
        self.failures: list[str] = []

    def _gpu(self, gpu: dict | int | None) -> dict | None:
        if gpu is None:
            return None
        if isinstance(gpu, int):
            gpu = {"index": gpu}
        if bus_key(gpu.get("pci_bus_id")) is not None:  # by bus id: a torch index follows CUDA_DEVICE_ORDER
            ident = nvml_gpu_for(gpu, list(self.gpu_ids.values()))
            if ident is not None:
                return {k: ident.get(k) for k in ("index", "pci_bus_id", "serial", "uuid")}
            return {k: v for k, v in gpu.items() if k in ("index", "pci_bus_id", "serial", "uuid") and v is not None}
        ident = self.gpu_ids.get(gpu.get("index"), {})
        return {**{k: ident.get(k) for k in ("pci_bus_id", "serial", "uuid")}, **{k: v for k, v in gpu.items()
                if k in ("index", "pci_bus_id", "serial", "uuid") and v is not None}}

    def record(self, check: str, value: Any, unit: str = "", gpu: dict | int | None = None,
               limit: Limit | None = None, extra: dict | None = None) -> bool:
        """Record one figure; judge it when ``limit`` is given. Returns True when it passed (or unjudged)."""
        g = self._gpu(gpu)
        rec = {"host": self.host, "layer": self.layer, "test": self.item.originalname, "check": check,
               "gpu": g.get("index") if g else None, "pci_bus_id": g.get("pci_bus_id") if g else None,
               "serial": g.get("serial") if g else None, "value": value, "unit": limit.unit if limit else unit,
               "limit": None, "verdict": "recorded"}
        if extra:
            rec["extra"] = extra
        passed = True
        if limit is not None:
            v = judge(limit, value if isinstance(value, (int, float)) and not isinstance(value, bool) else None)
            rec["limit"] = {limit.direction: limit.bound, "source": limit.source}
            rec["verdict"] = "pass" if v.passed else "fail"
            passed = v.passed
            if not passed:
                where = f" {gpu_label(g)}" if g else ""
                self.failures.append(f"{self.host}{where}: {v.message}")
        self.item.user_properties.append((FIGURE_KEY, rec))
        return passed

    def apply(self, findings, gpu: dict | int | None = None) -> None:
        """Record each :class:`gpuaccept.health.Finding` (judging those with a limit) and add its failure."""
        for f in findings:
            self.record(f.check, f.value, f.unit, gpu=gpu, limit=f.limit, extra=f.extra)
            if f.failure:
                self.fail(f.failure, gpu=gpu)

    def fail(self, message: str, gpu: dict | int | None = None) -> None:
        """Add a failure that is not a figure against a limit (e.g. "row remap pending: reset needed")."""
        g = self._gpu(gpu)
        self.failures.append(f"{self.host}{' ' + gpu_label(g) if g else ''}: {message}")

    def finish(self) -> None:
        """Fail the test (one line per failure) if anything failed."""
        if self.failures:
            pytest.fail("\n".join(self.failures), pytrace=False)
