"""Operator input echoed in a refusal, shown safely: :func:`shown`.

A refusal names what it refuses (``host 'gpu-07x' is not in the inventory``), and what it names came from the
operator's files and options: a ``--limit=@/proc/self/environ`` line holds the whole environment with NUL
bytes, a line of 10 MB makes an error line of 10 MB, and ``ESC [2J`` or ``ESC ] 0; ... BEL`` clears the
terminal or retitles it when printed raw. Every refusal of :mod:`gpuaccept.config` that echoes such a value
goes through :func:`shown`: quoted as Python's ``repr`` quotes (so a short printable value reads exactly as
``{value!r}`` did), every control, format (bidirectional, zero-width) and separator character escaped
(``\\x1b``, ``\\x00``, ``\\u202e``), and cut to :data:`SHOWN_CHARS` characters with the total size said.
"""
from __future__ import annotations

from typing import Any

__all__ = ["SHOWN_CHARS", "shown", "shown_path"]

#: most characters of a value echoed in a refusal (its escapes counted): enough for any host name, group,
#: pattern term or variable value that a person reads and fixes, short enough that a refusal stays one line
#: of a terminal or CI log whatever the file held
SHOWN_CHARS = 100
#: most characters of a file name echoed (a path is longer than a value, and it is where the fix is made)
SHOWN_PATH_CHARS = 300


def _escaped_len(c: str) -> int:
    """Characters ``c`` takes inside ``repr`` quotes (1, or 2 to 10 for an escape)."""
    return 1 if c.isprintable() and c != "\\" else len(repr(c)) - 2


def _cut(text: str, limit: int) -> str:
    """The longest start of ``text`` whose escaped form takes at most ``limit`` characters (never inside an
    escape); looks at no more than ``limit`` characters of ``text``."""
    used = 0
    for i, c in enumerate(text[:limit]):
        used += _escaped_len(c)
        if used > limit:
            return text[:i]
    return text[:limit]


def _size(n: int, unit: str) -> str:
    return f"{n:,} {unit}"


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``value`` as a refusal shows it: text quoted and escaped as ``repr`` does, at most ``limit`` characters
    of it (escapes counted), then ``... (N characters, the first K shown)`` when it was cut. Bytes are shown as
    their UTF-8 text (undecodable bytes as ``\\xNN``) and counted in bytes; any other value as its ``repr``,
    cut the same way (its strings are escaped by ``repr`` itself). Takes time in ``limit``, not in the
    value's size (for text and bytes)."""
    if isinstance(value, (bytes, bytearray)):
        size, unit = len(value), "bytes"
        text = bytes(value[: limit * 4]).decode("utf-8", "backslashreplace")
        whole = size <= limit * 4
    elif isinstance(value, str):
        size, unit, text, whole = len(value), "characters", value, True
    else:
        r = repr(value)
        if len(r) <= limit:
            return r
        return f"{r[:limit]}... ({_size(len(r), 'characters')}, the first {limit} shown)"
    head = _cut(text, limit)
    if whole and len(head) == len(text):
        return repr(head)
    return f"{repr(head)}... ({_size(size, unit)}, the first {len(head):,} characters shown)"


def shown_path(path: Any, limit: int = SHOWN_PATH_CHARS) -> str:
    """A file name as messages begin with it (``<path>:<line>: ...``): unquoted, as given, when it holds only
    printable characters and is at most ``limit`` long; else escaped and cut as :func:`shown` does (without
    the quotes), so a name holding ``ESC`` cannot reach the terminal raw."""
    text = str(path)
    if len(text) <= limit and text.isprintable():
        return text
    head = _cut(text, limit)
    inner = repr(head)[1:-1]
    return inner if len(head) == len(text) else f"{inner}... ({len(text):,} characters)"
