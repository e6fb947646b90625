"""All-reduce figures, controller side (pure): nccl-tests' bandwidth formulas and its table layout.

Everything here follows nccl-tests (https://github.com/NVIDIA/nccl-tests):

* ``doc/PERFORMANCE.md``: algorithm bandwidth ``algbw = S / t`` (bytes over time); bus bandwidth for
  all-reduce ``busbw = algbw * 2(n-1)/n``, because a ring all-reduce makes each rank send and receive
  ``2(n-1)/n * S`` bytes, so busbw is comparable with the hardware's link bandwidth whatever n is.
* ``src/all_reduce.cu`` ``AllReduceGetBw``: ``algbw = bytes / 1.0E9 / sec``: GB/s with GB = 1e9 bytes.
* ``src/common.cu`` ``Reporter``/``BenchTime``: the printed table (columns, widths, time precision) and the
  closing "# Avg bus bandwidth" (mean busbw over every size, out-of-place and in-place).

The rows come from the ``nccl_allreduce`` probe's document (see ``gpuaccept/probes/nccl_allreduce.py``).
"""
from __future__ import annotations

import re

#: nccl-tests prints root -1 for all-reduce (it has none)
ALLREDUCE_ROOT = -1

_META = "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
_NAMES = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s"
_UNITS = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s"


class RowNotFound(LookupError):
    """No measured message size is at or below the one asked for."""


def algbw(nbytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes/s): ``nbytes / seconds / 1e9``.

    nccl-tests doc/PERFORMANCE.md ("algorithm bandwidth ... algbw = S / t") and src/all_reduce.cu
    ``AllReduceGetBw`` (``baseBw = count * typesize / 1.0E9 / sec``).
    """
    if seconds <= 0:
        raise ValueError(f"time must be > 0 s, got {seconds}")
    return nbytes / 1e9 / seconds


def busbw(algbw_gbps: float, world_size: int) -> float:
    """All-reduce bus bandwidth in GB/s: ``algbw * 2(n-1)/n`` (nccl-tests doc/PERFORMANCE.md, "AllReduce").

    nccl-tests applies this one factor whatever algorithm NCCL ran (``src/all_reduce.cu`` ``AllReduceGetBw``:
    ``factor = 2*(nranks - 1)/nranks``, NVIDIA/nccl-tests commit a0b82b2, read 2026-11-30): the factor is
    exact for Ring, while an NVLS (NVSwitch multicast) figure can exceed the one-way link rate, so a busbw is
    judged only against a floor for the algorithm that produced it (``gpuaccept.judging.nccl``). One rank gives
    0: nothing crosses a link. The node-side copy, ``probes/_allreduce_figures.py`` ``busbw_factor``, is the
    source; ``tests/test_nccl_probe.py`` holds this one to it. Raises ValueError for a world size < 1.
    """
    if world_size < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    return algbw_gbps * 2.0 * (world_size - 1) / world_size


def _time_str(us: float) -> str:
    """nccl-tests' time column: %7.0f from 10 ms, %7.1f from 100 us, else %7.2f."""
    if us >= 10000.0:
        return "%7.0f" % us
    if us >= 100.0:
        return "%7.1f" % us
    return "%7.2f" % us


def _result(row: dict, mode: str) -> str:
    wrong = row.get(f"{mode}_wrong")
    wrong_s = "%5s" % "N/A" if wrong is None else "%5d" % wrong
    return "  %7s  %6.2f  %6.2f  %s" % (_time_str(row[f"{mode}_time_us"]), row[f"{mode}_algbw_gbps"],
                                        row[f"{mode}_busbw_gbps"], wrong_s)


def format_row(row: dict) -> str:
    """One row as all_reduce_perf prints it (trailing spaces stripped)."""
    head = "%12d  %12d  %8s  %6s  %6d" % (row["bytes"], row["count"], row.get("type", "float"),
                                          row.get("redop", "sum"), ALLREDUCE_ROOT)
    return (head + _result(row, "oop") + _result(row, "ip")).rstrip()


def format_table(doc: dict) -> str:
    """The probe document's rows in nccl-tests ``all_reduce_perf``'s layout: its three header lines, one row per
    size (out-of-place then in-place: time us, algbw and busbw GB/s, #wrong), then "# Out of bounds values"
    and "# Avg bus bandwidth" (``doc["avg_busbw_gbps"]``, else the mean busbw of the rows). Lines are
    right-stripped; otherwise character for character as nccl-tests prints them."""
    rows = doc.get("rows", [])
    lines = [
        (_META % ("", "", "", "", "")).rstrip(),
        _NAMES % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                  "time", "algbw", "busbw", "#wrong"),
        (_UNITS % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
                   "")).rstrip(),
    ]
    lines += [format_row(r) for r in rows]
    errors = doc.get("wrong_total")
    if errors is None:
        errors = sum((r.get("oop_wrong") or 0) + (r.get("ip_wrong") or 0) for r in rows)
    avg = doc.get("avg_busbw_gbps")
    if avg is None:
        vals = [r[k] for r in rows for k in ("oop_busbw_gbps", "ip_busbw_gbps")]
        avg = sum(vals) / len(vals) if vals else 0.0
    # nccl-tests counts failing (size, mode) tests here; we print the wrong-element total (0 either way when OK)
    lines.append("# Out of bounds values : %d %s" % (errors, "FAILED" if errors else "OK"))
    lines.append("# Avg bus bandwidth    : %g" % avg)
    lines.append("#")
    return "\n".join(lines) + "\n"


_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)"
                  r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s*$")


def parse_table(text: str) -> list[dict]:
    """Rows of an nccl-tests ``all_reduce_perf`` output (or of :func:`format_table`), as probe-style rows.
    Lines that are not data rows (comments, NCCL INFO lines, warnings) are skipped. ``#wrong`` "N/A" -> None."""
    rows = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        g = m.groups()

        def wrong(s):
            return None if s == "N/A" else int(float(s))

        rows.append({"bytes": int(g[0]), "count": int(g[1]), "type": g[2], "redop": g[3],
                     "oop_time_us": float(g[5]), "oop_algbw_gbps": float(g[6]), "oop_busbw_gbps": float(g[7]),
                     "oop_wrong": wrong(g[8]), "ip_time_us": float(g[9]), "ip_algbw_gbps": float(g[10]),
                     "ip_busbw_gbps": float(g[11]), "ip_wrong": wrong(g[12])})
    return rows


def row_at(doc: dict, nbytes: int) -> dict:
    """The row measured at exactly ``nbytes``, else the largest measured size below it (a threshold written
    for 1 MiB is judged at 1 MiB, or at the nearest smaller size the sweep produced). Raises
    :class:`RowNotFound` when every measured size is larger, or there are no rows."""
    rows = doc.get("rows") or []
    below = [r for r in rows if r["bytes"] <= nbytes]
    if not below:
        sizes = sorted(r["bytes"] for r in rows)
        raise RowNotFound(f"no all-reduce row at or below {nbytes} B (measured sizes: "
                          f"{sizes[0]}..{sizes[-1]} B)" if sizes else f"no all-reduce rows (asked for {nbytes} B)")
    return max(below, key=lambda r: r["bytes"])
