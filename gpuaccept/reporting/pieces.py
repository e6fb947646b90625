"""A whole-run file written from the byte ranges where each record's text already lies (results.jsonl, the JUnit
spools: gpuaccept.reporting.reporter), so that a rewrite copies bytes instead of serialising every record again."""
from __future__ import annotations

from gpuaccept.reporting.records import CaseRecord, record_json

# Whole-run files are copied from the per-record text in pieces of at most this many bytes (memory bound).
COPY_CHUNK = 8 << 20


def copy_pieces(out, src, pieces: list, lines: bool, sep: bytes = b",") -> None:
    """Write ``pieces`` to ``out`` separated by ``sep``. A piece is ``(span, x)``: ``span`` a byte range
    ``(start, end, ...)`` of ``src`` (with ``lines``: a results.jsonl span (line start, .., .., line end),
    copied without its newline), else ``x``, a CaseRecord (serialised now) or text. Adjacent spans are copied
    as one range in chunks of :data:`COPY_CHUNK` (newlines between lines become ``sep``: JSON text has no raw
    newline inside a line)."""
    first = True
    run: list[int] | None = None  # [start, end] of adjacent spans not yet copied

    def copy(a: int, b: int) -> None:
        src.seek(a)
        left = b - a
        while left > 0:
            data = src.read(min(COPY_CHUNK, left))
            if not data:
                raise OSError(f"{src.name}: shorter than expected")
            left -= len(data)
            if lines:
                data = data.replace(b"\n", sep)
                if left == 0 and data.endswith(sep):
                    data = data[:-len(sep)]
            out.write(data)

    for span, x in pieces:
        if span is not None:
            a, b = (span[0], span[3]) if lines else (span[0], span[1])
            if run is not None and run[1] == a and (lines or not sep):
                run[1] = b  # adjacent: one copy (a newline between lines becomes sep)
                continue
            if run is not None:
                copy(*run)
            if not first:
                out.write(sep)
            first, run = False, [a, b]
            continue
        if run is not None:
            copy(*run)
            run = None
        if not first:
            out.write(sep)
        first = False
        if isinstance(x, CaseRecord):
            hd, figs = record_json(x)
            x = hd + figs + "}"
        out.write(x.encode())
    if run is not None:
        copy(*run)

