"""A run's report folder on disk: which files make a run (:data:`RUN_FILES`, :func:`holds_run`), writing a
file so that readers see the old or the new one (:func:`atomic_write`, :func:`atomic_write_pieces`), and reading an earlier run's figures
(:func:`load_previous_figures`, the previous run of the stand-outs without a history database), and whether
its filesystem has room for a run (:func:`space_problem`).
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import BinaryIO, Iterable, Iterator

MiB = 1024 * 1024
#: Free space a run needs on its report filesystem, bytes: a fixed part for report.html (charts and tables),
#: summary.md and the host lists (chosen: 1 MiB, about 10 times what a one-host run writes), and a part per
#: selected test: the report files held about 6.5 KB per test when results.json listed figures twice (10,000
#: hosts x 23 tests x 8 GPUs: 1.5 GB; 1.0 GB of whole-run files beside results.jsonl since, measured with
#: benchmarks/report_scale.py), doubled because a whole-run file is rewritten beside its old copy before it
#: replaces it.
SPACE_BASE = 1 * MiB
SPACE_PER_TEST = 16 * 1024

#: results.json's shape: 3 gives each failed or errored test its ``causes`` (gpuaccept.causes) and each action its
#: ``cause`` class; 2 (until 2026-12-04) holds each figure once, in its test's record, without causes; 1 (until
#: 2026-12-02) also listed every figure again at the top level ("figures"). :func:`run_figures` reads all three,
#: and a record without causes gets its action as format 2 decided it (gpuaccept.judging.actions.for_case).
RESULTS_FORMAT = 3

# Files a run writes into its folder (a folder holding one of these already holds a run).
RUN_FILES = ("results.jsonl", "results.json", "summary.md", "failed-hosts.txt", "report.html")


def write_fully(f, data: bytes) -> None:
    """Write all of ``data`` to the unbuffered file ``f`` (a raw write may take part of it); OSError propagates."""
    view = memoryview(data)
    while view:
        view = view[f.write(view):]


@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content into: a temporary file beside it, renamed over ``path``
    when the block ends without an exception (readers see the old or the new file), removed when it raises
    (a full disk leaves no half-written temporary file beside the reports). OSError propagates."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise


def atomic_write(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_file`."""
    with atomic_file(path) as f:
        f.write(text.encode("utf-8"))


def atomic_write_pieces(path: str, pieces: Iterable[str], batch: int = 1 << 20) -> None:
    """Write the text ``pieces`` (UTF-8, in order) to ``path`` through :func:`atomic_file`, about ``batch``
    characters at a time: a page made piece by piece (report.html, gpuaccept.reporting.html.pieces) is never
    held whole, nor its encoded copy."""
    with atomic_file(path) as f:
        buf: list[str] = []
        n = 0
        for piece in pieces:
            buf.append(piece)
            n += len(piece)
            if n >= batch:
                f.write("".join(buf).encode("utf-8"))
                buf, n = [], 0
        f.write("".join(buf).encode("utf-8"))


def remove_quietly(path: str) -> None:
    """Remove the file at ``path``; a file already gone (or not removable) is no error."""
    try:
        os.unlink(path)
    except OSError:
        pass


def holds_run(directory: str) -> str | None:
    """The first run file found in ``directory`` (it already holds a run), else None."""
    for name in RUN_FILES:
        if os.path.exists(os.path.join(directory, name)):
            return name
    return None


def run_figures(doc: dict) -> list[dict]:
    """Every figure of a results.json document ``doc``, in test order: the tests' own (format 2), or the
    top-level "figures" list of a format-1 file."""
    if "figures" in doc:
        return list(doc.get("figures") or [])
    return [f for t in doc.get("tests") or [] for f in (t.get("figures") or [])]


def load_previous_figures(directory: str | None) -> list[dict]:
    """Figures of an earlier run's results.json, either format (empty when absent or unreadable)."""
    if not directory:
        return []
    try:
        with open(os.path.join(directory, "results.json"), encoding="utf-8") as f:
            return run_figures(json.load(f))
    except (OSError, ValueError, AttributeError, TypeError):
        return []


def space_needed(n_tests: int) -> int:
    """Bytes of free space a run of ``n_tests`` tests needs for its reports (:data:`SPACE_BASE` +
    :data:`SPACE_PER_TEST` per test)."""
    return SPACE_BASE + SPACE_PER_TEST * max(0, n_tests)


def space_problem(directory: str, n_tests: int) -> str | None:
    """Why the filesystem of ``directory`` cannot take the reports of ``n_tests`` tests (free space for an
    unprivileged writer, ``statvfs`` f_bavail, below :func:`space_needed`), else None. A filesystem that
    cannot be asked (statvfs fails) is no problem here: the writes say what is wrong."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    free, need = st.f_bavail * st.f_frsize, space_needed(n_tests)
    if free >= need:
        return None
    return (f"{free / MiB:.1f} MiB free on its filesystem, a run of {n_tests} test{'s' if n_tests != 1 else ''} "
            f"needs {need / MiB:.1f} MiB for its reports ({SPACE_BASE // MiB} MiB + {SPACE_PER_TEST // 1024} KiB "
            f"a test): free some space or give --reports on another filesystem")
