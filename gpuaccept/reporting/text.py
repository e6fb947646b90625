"""How the pages a person reads write a figure (pure): a value (:func:`fmt`), a limit (:func:`limit_text`), a
figure's GPU (:func:`gpu_text`) and a count (:func:`count_text`), shared by summary.md, report.html, the terminal
and the host verdicts' reasons.
"""
from __future__ import annotations

from typing import Any


def count_text(n: int, noun: str) -> str:
    """A count with its noun for a page: ``1 host``, ``2 hosts``, ``0 tests``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def fmt(v: Any) -> str:
    """A value for a page: a float to 4 significant digits (whole from 1000 up), anything else as ``str``."""
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def gpu_text(f: dict) -> str:
    """``" GPU 3"`` for a per-GPU figure, ``""`` for a node figure."""
    return f" GPU {f['gpu']}" if f.get("gpu") is not None else ""


def limit_text(lim: dict | None) -> str:
    """A figure's limit as ``">= 4300"`` / ``"<= 85"`` (both when both), ``"-"`` when it has none."""
    lim = lim or {}
    return " ".join(f"{'>=' if k == 'min' else '<='} {fmt(v)}" for k, v in lim.items() if k in ("min", "max")) or "-"


def names_text(names: list[str], shown: int = 8) -> str:
    """The first ``shown`` of ``names`` for a line a person reads, ``"…"`` and how many more after them:
    ``"gpu-0001, gpu-0002, … +148 more"``."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f", … +{more} more" if more > 0 else "")
