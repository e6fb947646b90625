"""A site's own limits, layered over the threshold files (``--site-thresholds FILE``).

A site that wants a stricter HBM floor, or a looser one for a cooling-limited hall, writes only what it
changes, per SKU, and keeps the shipped files (and their updates) for everything else::

    # site-limits.yaml
    h200-sxm-141gb:
      checks:
        hbm_read_bw_gbps: {min: 4450, source: "hall B acceptance, 64 nodes measured 2026-11"}
        temp_c: {max: 80, source: "hall B: HBM slowdown seen at 83 C"}

Each entry needs its bound (``min`` or ``max``, as the check's direction) and a ``source``; ``unit`` may be
left out (the check's unit) but when given must be the check's. A check the shipped file does not set may
be added. The entry replaces the shipped one as a whole (``at_bytes`` is kept from the shipped entry when the
site gives none). A failure line names the site file and line as the limit's origin
(``[limit: site-limits.yaml:4 checks.hbm_read_bw_gbps, over h200-sxm-141gb.yaml]``).
"""
from __future__ import annotations

from dataclasses import replace

from gpuaccept.errors import ThresholdError
from gpuaccept.config import thresholds as th
from gpuaccept.config.bounded import SMALL_BYTES, SMALL_LINE
from gpuaccept.config.shown import shown
from gpuaccept.config.yamlload import YamlMap, load_file

SKU_KEYS = {"checks"}


def layer_site(path: str, specs: dict[str, th.SkuSpec]) -> dict[str, th.SkuSpec]:
    """``specs`` (sku -> SkuSpec, from :func:`gpuaccept.config.thresholds.load_all`) with the checks of the site
    file ``path`` replacing or adding theirs; new SkuSpec objects, ``specs`` itself is left as it was.

    Raises ThresholdError ``"<path>:<line>: <what>"`` for a SKU that is not among ``specs``, a key other than
    ``checks``, or a check entry that a threshold file could not hold (unknown check, wrong unit, no source,
    a bound of the wrong direction; see gpuaccept.config.thresholds)."""
    doc = load_file(path, ThresholdError, "site threshold file", max_bytes=SMALL_BYTES, max_line=SMALL_LINE)
    if not isinstance(doc, dict) or not doc:
        raise ThresholdError(f"{path}: expected a mapping of SKU name to {{checks: ...}}")
    out = dict(specs)
    for sku, body in doc.items():
        line = doc.lines.get(sku, 0) if isinstance(doc, YamlMap) else 0
        if sku not in specs:
            raise ThresholdError(f"{path}:{line}: unknown SKU {shown(sku)} (known: {', '.join(sorted(specs))})")
        if not isinstance(body, dict):
            raise ThresholdError(f"{path}:{line}: {sku}: expected a mapping with 'checks'")
        for key in body:
            if key not in SKU_KEYS:
                raise th._err(path, f"unknown key {shown(f'{sku}.{key}')} (a site file changes only 'checks')", body, key)
        checks = body.get("checks") or {}
        if not isinstance(checks, dict):
            raise th._err(path, f"{sku}.checks: expected a mapping", body, "checks")
        spec = specs[sku]
        merged = dict(spec.checks)
        for check, entry in checks.items():
            merged[check] = _site_limit(path, spec, check, entry, checks)
        out[sku] = replace(spec, checks=merged)
    return out


def _site_limit(path: str, spec: th.SkuSpec, check: str, entry, checks) -> th.Limit:
    """One site entry as a Limit of ``spec``'s SKU, with ``site`` = ``"<path>:<line>"`` (its provenance)."""
    if isinstance(entry, dict) and check in th.CHECKS and "unit" not in entry:
        filled = YamlMap()
        filled.update(entry)
        filled.line, filled.lines = getattr(entry, "line", 0), dict(getattr(entry, "lines", {}))
        filled["unit"] = th.CHECKS[check][0]
        entry = filled
    limit = th._load_check(path, spec.sku, check, entry, checks)
    shipped = spec.checks.get(check)
    if limit.at_bytes is None and shipped is not None and shipped.at_bytes is not None:
        limit = replace(limit, at_bytes=shipped.at_bytes)
    line = checks.lines.get(check, 0) if isinstance(checks, YamlMap) else 0
    return replace(limit, site=f"{path}:{line}" if line else path)
