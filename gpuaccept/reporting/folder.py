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


# -- whether a folder's run is going on, finished or was killed ------------------------------------------------
#: held (flock) by a run's controller from its first test to its end, in its report folder: JSON of the run id, pid,
#: host name, start and history database. The kernel drops the lock when the controller dies, even on SIGKILL, so
#: a folder whose lock is free and whose results.json is not complete holds a killed run (:func:`find_killed`)
RUNNING_FILE = ".running"
#: what :data:`RUNNING_FILE` becomes once a killed run was found (by the next run on that controller or the merge):
#: found once, said once; the same JSON plus ``found_at`` and ``found_by``
KILLED_FILE = ".killed"
#: folders beside a run's own that :func:`find_killed` looks into at most (a folder of many runs: one failed open
#: each; chosen)
MAX_SIBLINGS = 10000


class RunLock:
    """The :data:`RUNNING_FILE` of a run's folder, held while the run goes: made under another name, locked, then
    renamed into place (never seen unlocked while its run lives). :meth:`release` at the end removes it."""

    def __init__(self, directory: str, info: dict):
        import fcntl
        self.path = os.path.join(directory, RUNNING_FILE)
        tmp = f"{self.path}.tmp{os.getpid()}"
        self.fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)  # not inherited by children (PEP 446)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            write_fully_fd(self.fd, json.dumps(info, default=str).encode())
            os.replace(tmp, self.path)
        except OSError:
            os.close(self.fd)
            remove_quietly(tmp)
            raise

    def release(self) -> None:
        """The run ended: remove the file, then drop the lock."""
        if self.fd is None:
            return
        remove_quietly(self.path)
        os.close(self.fd)
        self.fd = None


def write_fully_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _results_head(directory: str, limit: int = 64 << 20) -> bytes | None:
    """The start of ``directory``'s results.json up to its ``"tests":[`` (its meta and "complete"), read in pieces
    (a fleet's file holds GBs after it); None when it cannot be read."""
    try:
        with open(os.path.join(directory, "results.json"), "rb") as f:
            buf = b""
            while len(buf) < limit:
                piece = f.read(1 << 20)
                if not piece:
                    return buf
                buf += piece
                if b'"tests":[' in buf:
                    return buf
            return buf
    except OSError:
        return None


def run_finished(directory: str) -> bool:
    """Whether the run of ``directory`` wrote its final results.json (``"complete": true``; an interrupted run that
    ended did). Reads only the file's head: cheap on a fleet's GB file. A quote outside a JSON string is never
    escaped, so the pattern can only be the document's own key."""
    head = _results_head(directory)
    return bool(head) and (b',"complete":true,' in head or b'"complete": true' in head)


def _info(fd: int) -> dict:
    try:
        data = os.pread(fd, 1 << 16, 0)
        info = json.loads(data.decode("utf-8"))
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def run_state(directory: str) -> tuple[str, dict]:
    """``("finished" | "running" | "killed" | "unknown", info)`` of the run in ``directory``: finished by its
    results.json; running while its :data:`RUNNING_FILE` is locked (or held on another host: not ours to judge);
    killed when that lock is free, or when the folder has a :data:`KILLED_FILE` (found already); unknown
    otherwise (a folder of a release without the lock, killed or copied)."""
    import fcntl
    import socket
    if run_finished(directory):
        return "finished", {}
    try:
        with open(os.path.join(directory, KILLED_FILE), encoding="utf-8") as f:
            return "killed", json.load(f)
    except (OSError, ValueError):
        pass
    try:
        fd = os.open(os.path.join(directory, RUNNING_FILE), os.O_RDONLY)
    except OSError:
        return "unknown", {}
    try:
        info = _info(fd)
        if info.get("host") not in (None, socket.gethostname()):
            return "running", info  # another controller's run: a lock there is not seen here (NFS, Lustre)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return "running", info
        return "killed", info
    finally:
        os.close(fd)


def claim_killed(directory: str, found_by: str) -> dict | None:
    """When the run of ``directory`` was killed (its :data:`RUNNING_FILE` unlocked, by a controller of this host,
    and results.json not complete): rename that file :data:`KILLED_FILE` with ``found_at`` and ``found_by`` added
    (found once: a later look sees it as found) and return its info plus ``dir`` and ``last_record`` (results.jsonl's
    modification time); else None. A stale lock file of a finished run (killed between its last write and the
    file's removal) is removed."""
    import fcntl
    import socket
    import time
    path = os.path.join(directory, RUNNING_FILE)
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        info = _info(fd)
        if info.get("host") not in (None, socket.gethostname()):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # its run goes on
        if run_finished(directory):
            remove_quietly(path)
            return None
        try:
            last = os.path.getmtime(os.path.join(directory, "results.jsonl"))
        except OSError:
            last = None
        info.update(dir=os.path.abspath(directory), last_record=last, found_at=time.time(), found_by=found_by)
        try:
            atomic_write(os.path.join(directory, KILLED_FILE), json.dumps(info, default=str))
            remove_quietly(path)
        except OSError:
            return None  # a folder we cannot write: left for whoever can
        return info
    finally:
        os.close(fd)


def find_killed(parent: str, found_by: str, skip: str | None = None) -> list[dict]:
    """:func:`claim_killed` of each folder in ``parent`` (at most :data:`MAX_SIBLINGS`; ``skip``: the caller's own):
    the runs of this host whose controller died before their end, each found once. One failed open per folder
    without a lock file."""
    out = []
    mine = os.path.basename(os.path.normpath(skip)) if skip else None
    try:
        with os.scandir(parent) as it:
            for n, e in enumerate(it):
                if n >= MAX_SIBLINGS:
                    break
                try:
                    if e.name == mine or not e.is_dir(follow_symlinks=False):
                        continue
                except OSError:
                    continue
                found = claim_killed(e.path, found_by)
                if found is not None:
                    out.append(found)
    except OSError:
        pass
    return out
