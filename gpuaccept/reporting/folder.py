"""A run's report folder on disk: which files make a run (:data:`RUN_FILES`, :func:`holds_run`), writing a
file so that readers see the old or the new one (:func:`atomic_write`), and reading an earlier run's figures
(:func:`load_previous_figures`, the previous run of the stand-outs without a history database).
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import BinaryIO, Iterator

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


def load_previous_figures(directory: str | None) -> list[dict]:
    """Figures of an earlier run's results.json (empty when absent or unreadable)."""
    if not directory:
        return []
    try:
        with open(os.path.join(directory, "results.json"), encoding="utf-8") as f:
            return list(json.load(f).get("figures") or [])
    except (OSError, ValueError):
        return []

