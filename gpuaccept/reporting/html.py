"""``report.html``: one self-contained page per run that opens from disk with no network.

Rendered with Jinja2 (``gpuaccept/reporting/templates/report.html.j2``, autoescaped); plots are pygal charts rendered to
inline SVG with pygal's tooltip script left out (``js=[]``), so nothing is fetched at view time. Content: a
per-host verdict table, a host x check heatmap coloured by value/limit, for all-reduce busbw against message
size per host (x: log2 of the message size, labelled in bytes) with the floor drawn, and a per-GPU table with
sparklines of the same serial's earlier runs from the history database. The heatmap's cells
(gpuaccept.reporting.heatmap), the busbw tables and the failures come from the run's
:class:`gpuaccept.reporting.tally.RunTally`, kept as the records arrived (no figure is walked again at the end).
"""
from __future__ import annotations

import functools
import math
import os
import re
from typing import Any, Iterator

import jinja2

from gpuaccept.reporting.gputable import GpuTable
from gpuaccept.reporting.junit import incomplete_of
from gpuaccept.reporting.records import CaseRecord
from gpuaccept.reporting.tally import RunTally
from gpuaccept.reporting.text import fmt, limit_text
from gpuaccept.judging import verdict_order
from gpuaccept.reporting.verdicts import failing_gpus_text, host_verdicts, interruption_text, line_text, same_reason_once

# Sparklines and busbw plots are drawn for at most this many GPUs / hosts (a page of 10,000 hosts of plots
# is not read; the tables still list everything). Chosen.
MAX_SPARK_GPUS = 256
MAX_BUSBW_HOSTS = 64
# Above this many hosts (host and heatmap rows) or GPUs (GPU table rows) the page has rows only for hosts that
# did not pass; the passing hosts are named in one folded list (<details>) and counted (the page stays a few MB
# and opens at once at 10,000 hosts; results.json and summary.md have every host). Chosen.
MAX_ROWS = 1024
SPARK_CHECKS = 4  # sparklines for the first few judged per-GPU checks of the table

def _style():
    """pygal's chart style (pygal is imported here, not at module load, so that a missing plotting
    library costs report.html alone, never the run's other reports)."""
    from pygal.style import Style
    return Style(background="white", plot_background="white", font_family="sans-serif",
                 colors=("#1f6feb", "#b3261e", "#137333", "#8a1c7c", "#d97706"))


#: an absolute path of three or more parts (a replay folder, a report folder) in a message
_LONG_PATH = re.compile(r"(?<![\w.~])(?:/[^\s/:;,'\"()\[\]]+){3,}/?")


def short_paths(text: str) -> str:
    """``text`` with each absolute path of three or more parts cut to its last two (pure):
    ``"in /srv/reports/20261129T215000Z/probes/gpu-07 (replay)"`` -> ``"in …/probes/gpu-07 (replay)"``; the full
    text stays in results.json and summary.md."""
    def cut(m: re.Match) -> str:
        parts = [p for p in m.group(0).split("/") if p]
        return "…/" + "/".join(parts[-2:])
    return _LONG_PATH.sub(cut, str(text))


def standouts_once(standouts: list[dict]) -> list[dict]:
    """One row per stand-out figure (host, check, GPU) however many references it is worse than (pure): the
    references joined in ``against`` ("baseline 7.1%, previous 7.1%, fleet 6.0%"), the worst first; before, one
    slow GPU took three rows."""
    rows: dict[tuple, dict] = {}
    for o in standouts:
        key = (o.get("host"), o.get("check"), o.get("gpu"))
        row = rows.get(key)
        if row is None:
            rows[key] = row = {**o, "refs": []}
        row["refs"].append(o)
    out = []
    for row in rows.values():
        refs = sorted(row["refs"], key=lambda r: -(r.get("pct") or 0))
        worst = refs[0]
        out.append({**worst, "against": ", ".join(f"{r.get('against')} {r.get('pct')}%" for r in refs)})
    return out


def _size_label(log2b: float) -> str:
    b = 2 ** round(log2b)
    for unit, n in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= n:
            return f"{b // n} {unit}"
    return f"{b} B"


def busbw_plots(figures: list[dict], tally: RunTally | None = None) -> list[dict]:
    """Per host an XY chart of in-place busbw (GB/s) against log2(message bytes), with the busbw floor
    (``allreduce_busbw_gbps``' min limit) as a mark at the size it is judged at (the figure's ``bytes``): no
    floor applies at the other sizes. Inline SVG strings. ``tally``: the :class:`RunTally` of the run's records
    (their tables and floors, kept as they arrived; ``figures`` is then unused)."""
    if tally is None:
        tally = RunTally()
        tally.add_figures(figures)
    tables, floors = tally.busbw_tables, tally.busbw_floors
    out = []
    for host in sorted(tables)[:MAX_BUSBW_HOSTS]:
        pts = [(math.log2(r["bytes"]), float(r["ip_busbw_gbps"])) for r in tables[host]
               if isinstance(r, dict) and r.get("bytes") and isinstance(r.get("ip_busbw_gbps"), (int, float))]
        if not pts:
            continue
        import pygal
        chart = pygal.XY(js=[], style=_style(), width=560, height=300, show_legend=True, legend_at_bottom=True,
                         title=f"{host}: all-reduce busbw (in place)", x_title="message size (log scale)",
                         y_title="busbw GB/s", x_value_formatter=_size_label, explicit_size=True,
                         x_labels=sorted({round(x) for x, _ in pts})[::2], disable_xml_declaration=True,
                         include_x_axis=True)
        chart.add("busbw", pts)
        if host in floors:  # the floor applies at the judged size alone: a mark there, not a line across
            floor, at = floors[host]
            if isinstance(at, (int, float)) and at > 0:
                chart.add(f"floor {floor:g} GB/s at {_size_label(math.log2(at))}", [(math.log2(at), floor)],
                          stroke=False, dots_size=6)
        out.append({"host": host, "svg": chart.render(is_unicode=True)})
    return out


#: a sparkline's size in px (the page's ``.spark svg`` box) and its margin
SPARK_W, SPARK_H, SPARK_PAD = 120, 24, 2


def sparkline(values: list[float]) -> str:
    """A small inline SVG line of ``values`` (oldest first; non-numbers left out): :data:`SPARK_W` x
    :data:`SPARK_H` px, the line between the least and the most value, a dot at each, the values in its title (a
    tooltip). ``""`` for no value. Drawn here rather than by pygal: a pygal chart per cell cost 9 ms (Python 3.11,
    pygal 3.0), so the 4 sparklines per GPU of a 128-node, 8-GPU fleet cost 38 s of the run's end; this costs
    0.02 ms."""
    pts = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    if not pts:
        return ""
    lo, hi, n = min(pts), max(pts), len(pts)
    inner_w, inner_h = SPARK_W - 2 * SPARK_PAD, SPARK_H - 2 * SPARK_PAD
    xy = [(SPARK_PAD + inner_w * (i / (n - 1) if n > 1 else 0.5),
           SPARK_PAD + inner_h * (1 - ((v - lo) / (hi - lo) if hi > lo else 0.5))) for i, v in enumerate(pts)]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="1.5"/>' for x, y in xy)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{SPARK_W}" height="{SPARK_H}" '
            f'viewBox="0 0 {SPARK_W} {SPARK_H}" role="img"><title>{", ".join(f"{v:g}" for v in pts)}</title>'
            f'<polyline fill="none" stroke="#1f6feb" stroke-width="1.2" points="{line}"/>'
            f'<g fill="#1f6feb">{dots}</g></svg>')


def render(run_id: str, meta: dict, recs: list[CaseRecord], figures: list[dict], standouts: list[dict],
           history: dict[tuple, list[float]] | None = None, hv: dict | None = None,
           table: GpuTable | None = None, tally: RunTally | None = None) -> str:
    """The page as a string. ``history``: ``{(serial, host, gpu, check): [values oldest first]}``; ``hv``,
    ``table`` and ``tally``: :func:`host_verdicts` of ``recs``, the :class:`GpuTable` of ``figures`` and the
    :class:`RunTally` of ``recs`` when kept."""
    return "".join(pieces(run_id, meta, recs, figures, standouts, history, hv, table, tally))


def pieces(run_id: str, meta: dict, recs: list[CaseRecord], figures: list[dict], standouts: list[dict],
           history: dict[tuple, list[float]] | None = None, hv: dict | None = None,
           table: GpuTable | None = None, tally: RunTally | None = None) -> Iterator[str]:
    """:func:`render`'s page as the template makes it, piece by piece (written so, the page never lies whole in
    memory: at 1,000 hosts the page's pieces, its text and their UTF-8 copy added 25 MiB to the controller's peak,
    at the end of the run). Everything the page shows is worked out
    before this returns (a plotting library missing raises ImportError here); the iterator only fills in the
    template. A run that has not finished (``meta["incomplete"]``, gpuaccept.reporting.reporter): the page opens
    with it."""
    tally = tally if tally is not None else RunTally().add_all(recs)
    hosts = list(meta.get("hosts") or [])
    hv = hv if hv is not None else host_verdicts(recs, hosts)
    host_rows = [{"name": h, **hv[h], "failing_gpus": failing_gpus_text(hv[h]),
                  "blocked_text": (f"and {hv[h]['blocked']} test{'s' if hv[h]['blocked'] != 1 else ''} blocked"
                                   if hv[h]["verdict"] == "FAIL" and hv[h].get("blocked") else "")}
                 for h in sorted(hv, key=lambda h: verdict_order.sort_key(hv[h]["verdict"], h))]
    failing_gpus = [{"host": h, **g, "why": [short_paths(line_text(ln)) for ln in g["lines"]]}
                    for h in sorted(hv) for g in sorted((hv[h].get("gpus") or {}).values(), key=lambda g: str(g["gpu"]))]
    hosts_in: dict[str, int] = {}  # verdict -> hosts
    for h, v in hv.items():
        if h == "fleet":
            continue
        hosts_in[v["verdict"]] = hosts_in.get(v["verdict"], 0) + 1
    n_hosts = len([h for h in hv if h != "fleet"])
    passing: list[str] = []
    if len(host_rows) > MAX_ROWS:  # a fleet: a row per host that did not pass, the passing ones by name only
        passing = [r["name"] for r in host_rows if r["verdict"] == "PASS"]
        host_rows = [r for r in host_rows if r["verdict"] != "PASS"]
    table = table if table is not None else GpuTable().add(figures)
    left_out, total = 0, table.count()
    bad = {h for h, v in hv.items() if v["verdict"] != "PASS"}
    checks, rows = table.table(bad if total > MAX_ROWS else None)
    if total > MAX_ROWS:
        keep = rows  # the GPUs of hosts that did not pass (a failing figure makes its host fail)
        if len(keep) > MAX_ROWS:  # many hosts failed: the GPUs with a failing figure first, MAX_ROWS in all
            failing = [any(f.get("verdict") == "fail" for f in r["cells"].values()) for r in keep]
            keep = ([r for r, x in zip(keep, failing) if x] + [r for r, x in zip(keep, failing) if not x])[:MAX_ROWS]
        left_out, rows = total - len(keep), keep
    heat = tally.heat.result(only=bad if len(hv) > MAX_ROWS else None,
                             standouts={(str(o.get("host")), o.get("check")) for o in standouts})
    for r in host_rows:
        r["reasons"] = [short_paths(x) for x in same_reason_once(r["reasons"])]  # each cause once
    sparks: dict[tuple, str] = {}
    if history and len(rows) <= MAX_SPARK_GPUS:
        for key, vals in history.items():
            if len(vals) >= 2:
                sparks[key] = sparkline(vals)
    failures = [{"outcome": r.outcome, "nodeid": r.nodeid,
                 "first": short_paths((r.message.splitlines() or [r.outcome])[0] if r.message else r.outcome),
                 "rest": [short_paths(x) for x in (r.message or "").splitlines()[1:21]]}  # as summary.md, 20 at most
                for r in tally.bad]
    return _template().generate(
        run_id=run_id, meta=meta, hosts=host_rows, n_hosts=n_hosts, passing=passing, n_tests=len(recs),
        tally=[(k, hosts_in[k]) for k in verdict_order.ORDER if k in hosts_in], interrupted=interruption_text(meta),
        incomplete=incomplete_of(meta),
        heat=heat, left_out=left_out, max_rows=MAX_ROWS, busbw=busbw_plots(figures, tally),
        gpus={"checks": checks, "rows": rows}, sparks=sparks,
        standouts=standouts_once(standouts), failures=failures, failing_gpus=failing_gpus[:MAX_ROWS], fmt=fmt,
        limit_s=limit_text, short=short_paths)


def prepare() -> None:
    """Make the Jinja2 environment and compile report.html.j2 into its cache now (a run does it while its probes
    run: gpuaccept.plugin.finish.warm_up), so that writing the page later renders only."""
    _template()


def _template() -> jinja2.Template:
    """report.html.j2, compiled once per process and kept in :func:`_environment`'s cache."""
    return _environment().get_template("report.html.j2")


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """The Jinja2 environment of the templates folder, made once per process: its template cache keeps
    report.html.j2 compiled between the run's writes (the first, the periodic ones, the final one: each compiled
    it afresh before, ~0.1 s of the controller's CPU each; a template changed on disk is still read again, as
    Jinja2's loader checks its modification time)."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(os.path.dirname(__file__), "templates")),
                              autoescape=True, trim_blocks=True, lstrip_blocks=True)


def spark_keys(figures: list[dict], table: GpuTable | None = None) -> list[tuple[tuple[str, str, Any, str], dict]]:
    """``((serial, host, gpu, check), figure)`` of the per-GPU cells that get a sparkline (first few checks);
    ``table``: the :class:`GpuTable` of ``figures`` when kept."""
    table = table if table is not None else GpuTable().add(figures)
    if table.count() > MAX_SPARK_GPUS:
        return []
    checks, rows = table.table()
    return [((row["serial"] or "", row["host"], row["gpu"], c), row["cells"][c]) for row in rows
            for c in checks[:SPARK_CHECKS] if c in row["cells"]]
