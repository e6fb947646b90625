"""Every file the operator names is read within a bound of size, line length and time: :func:`read_bounded`.

``--limit=@/dev/zero`` once read until memory ran out (62 s, then the kernel's kill), ``@/dev/urandom`` for
115 s, and a FIFO nobody writes to blocked the run forever at ``open``. Every file gpuaccept reads because
the operator named it (the inventory, its group_vars/host_vars files, ``--limit=@FILE``, the threshold files
of ``--thresholds``, ``--site-thresholds``, ``--known-hosts``, the ssh config, the saved probe documents
of a replay) is read here instead:

* at most ``max_bytes`` bytes (:data:`MAX_BYTES` unless the caller states less) and no line longer than
  ``max_line`` bytes (:data:`MAX_LINE`), counted while reading, so ``/dev/zero`` is refused after
  ``max_line`` bytes, whatever its size;
* within ``timeout_s`` seconds (:data:`READ_TIMEOUT_S`) for anything that is not a regular file: it is
  opened without blocking (a FIFO without a writer would block at ``open``) and waited on with ``poll``
  against one deadline, so a FIFO that never writes, a writer that stops, or a terminal is refused in time;
  a pipe that does end (``--inventory <(ansible-inventory --list)``) is read as before.

A pipe can be read to its end once. The ``gpuaccept`` command reads the operator's files before pytest starts
(gpuaccept.cli.precheck) and pytest's plugin reads them again in the same process, so the command runs both
inside :func:`read_once`: there, what a file that is not a regular one held is kept, and a second read of that
file (the same device and inode) answers the kept bytes, checked against that read's own bounds. Nothing is
written anywhere; outside :func:`read_once` every read reads the file.

Past a bound the caller's :class:`~gpuaccept.errors.ConfigError` subclass is raised with one line naming the
file and the bound (``f: a line longer than 16 MiB (line 1); not an inventory file gpuaccept reads``), which
the plugin turns into exit 4 before any node is touched.
"""
from __future__ import annotations

import contextlib
import os
import select
import stat
import time
from typing import Iterator

from gpuaccept.errors import ConfigError
from gpuaccept.config.shown import shown_path

__all__ = ["MAX_BYTES", "MAX_LINE", "READ_TIMEOUT_S", "SMALL_BYTES", "SMALL_LINE", "read_bounded", "read_once",
           "size_text"]

#: largest file read, bytes: an inventory of 100,000 hosts with a few variables each is ~10 MB, a
#: failed-hosts.txt of as many hosts ~2 MB; a saved probe document (a burn-in's windows) a few MB
MAX_BYTES = 64 << 20
#: longest line, bytes: an inventory written as one line of JSON (``jq -c``) or a failed-hosts.txt fleet-wide
#: comment naming 100,000 hosts of up to 160 characters fits (the tests load a 1 MiB INI line); a line past
#: it is no text a person wrote, and it is where ``/dev/zero`` (no newline at all) is refused
MAX_LINE = 16 << 20
#: the bounds of a threshold file (``--thresholds DIR`` files, ``--site-thresholds``): the shipped ones are
#: 4 to 7 KB, so 1 MiB is 150 times the largest; lines of a few hundred bytes, 64 KiB at most
SMALL_BYTES = 1 << 20
SMALL_LINE = 64 << 10
#: seconds a file that is not a regular file (a pipe, a FIFO, a device) may take to be read to its end: an
#: inventory made on the fly (``--inventory <(ansible-inventory -i aws_ec2.yml --list)``) must have been
#: written by then; a slower generator's output is written to a file first. A regular file needs no
#: deadline: its size bounds its reading
READ_TIMEOUT_S = 10.0
#: bytes asked of one read
CHUNK = 1 << 20

#: inside :func:`read_once`: (st_dev, st_ino) of each file that is not a regular one -> the bytes read from it;
#: None outside
_KEPT: dict[tuple[int, int], bytes] | None = None


@contextlib.contextmanager
def read_once() -> Iterator[None]:
    """Within: a pipe, FIFO or device named more than once is read once (the first :func:`read_bounded` of it),
    later reads answered from memory (at most :data:`MAX_BYTES` per file, released on leaving). Used by the
    ``gpuaccept`` command around its pre-check and pytest's run; nests (an inner one shares the outer's)."""
    global _KEPT
    if _KEPT is not None:
        yield
        return
    _KEPT = {}
    try:
        yield
    finally:
        _KEPT = None


def size_text(n: int) -> str:
    """``64 MiB``, ``64 KiB``, ``512 bytes``: a bound as messages state it."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,} bytes"


def _a(what: str) -> str:
    """``what`` with its article: "an inventory file", "a threshold file"."""
    return ("an " if what[:1].lower() in "aeiou" else "a ") + what


def read_bounded(path: str, what: str = "file", error: type[ConfigError] = ConfigError, *,
                 max_bytes: int = MAX_BYTES, max_line: int = MAX_LINE, timeout_s: float = READ_TIMEOUT_S) -> bytes:
    """The bytes of ``path``, read within the bounds: at most ``max_bytes`` bytes, no line longer than
    ``max_line`` bytes, and, for a file that is not a regular one, its end reached within ``timeout_s``
    seconds. ``what`` names the kind of file in messages ("inventory file"). Inside :func:`read_once`, a file
    that is not a regular one and was read before answers what that read found.

    Raises ``error`` with one line beginning with the file's name: missing, a folder, unreadable, or past a
    bound (naming it); its ``why`` attribute holds the reason without the name, ``past_bound`` whether a
    bound refused it."""
    name = shown_path(path)
    kind = _a(what)

    def refuse(why: str, past_bound: bool = False) -> ConfigError:
        err = error(f"{name}: {why}")
        err.why = why  # the reason alone, for a caller that names the file its own way
        err.past_bound = past_bound  # a bound refused it (not a missing or unreadable file)
        return err

    deadline = time.monotonic() + timeout_s
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise refuse(f"no such {what}") from None
    except OSError as err:
        raise refuse(f"cannot read: {err.strerror or err}") from None
    try:
        st = os.fstat(fd)
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            raise refuse(f"is a directory, not {kind}")
        regular = stat.S_ISREG(mode)
        ident = (st.st_dev, st.st_ino)
        if not regular and _KEPT is not None and ident in _KEPT:
            _check_kept(_KEPT[ident], max_bytes, max_line, kind, refuse)
            return _KEPT[ident]
        if regular:
            os.set_blocking(fd, True)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        chunks: list[bytes] = []
        total = 0
        line_len = 0  # bytes of the line being read
        line_no = 1
        while True:
            left = deadline - time.monotonic()
            if left <= 0 and not regular:
                raise refuse(f"not read to its end within {timeout_s:g} s (a pipe or device that never "
                             f"ends, or that nothing writes to); not {kind} gpuaccept reads: write it to a file", True)
            if not regular and not poller.poll(max(1, int(left * 1000) + 1)):
                continue  # the deadline is checked above
            try:
                chunk = os.read(fd, min(CHUNK, max_bytes + 1 - total))
            except BlockingIOError:
                continue
            except OSError as err:
                raise refuse(f"cannot read: {err.strerror or err}") from None
            if not chunk:
                break
            parts = chunk.split(b"\n")
            longest = max(line_len + len(parts[0]), max(map(len, parts[1:]), default=0))
            if longest > max_line:
                at = line_no if line_len + len(parts[0]) > max_line else \
                    line_no + next(i for i, p in enumerate(parts[1:], 1) if len(p) > max_line)
                raise refuse(f"a line longer than {size_text(max_line)} (line {at}); not {kind} "
                             f"gpuaccept reads", True)
            line_len = line_len + len(parts[0]) if len(parts) == 1 else len(parts[-1])
            line_no += len(parts) - 1
            total += len(chunk)
            if total > max_bytes:
                raise refuse(f"larger than {size_text(max_bytes)}; not {kind} gpuaccept reads", True)
            chunks.append(chunk)
        data = b"".join(chunks)
        if not regular and _KEPT is not None:
            _KEPT[ident] = data
        return data
    finally:
        os.close(fd)


def _check_kept(data: bytes, max_bytes: int, max_line: int, kind: str, refuse) -> None:
    """The bounds of :func:`read_bounded` over bytes kept by :func:`read_once` (read first under another
    caller's bounds): raises ``refuse(why, True)`` past one."""
    if len(data) > max_bytes:
        raise refuse(f"larger than {size_text(max_bytes)}; not {kind} gpuaccept reads", True)
    for line_no, line in enumerate(data.split(b"\n"), 1):
        if len(line) > max_line:
            raise refuse(f"a line longer than {size_text(max_line)} (line {line_no}); not {kind} gpuaccept reads", True)
