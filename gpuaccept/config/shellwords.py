"""Shell-style word splitting of inventory text, in time linear in its length.

:func:`split_words` gives the words ``shlex.split(text, comments=...)`` gives (POSIX mode: ``'...'`` literal,
``"..."`` with ``\\`` escaping only ``\\`` and ``"``, a backslash outside quotes escaping the next character,
``#`` starting a comment outside quotes, also in the middle of a word), and raises the same ``ValueError``
texts ("No closing quotation", "No escaped character"). The standard library's ``shlex`` appends a token one
character at a time to an attribute (``self.token += c``), which CPython cannot extend in place: a quoted
value of 1 MB took minutes. Here the plain runs between the special characters are sliced out whole and
joined once. tests/test_fuzz_input.py compares the two on random lines.
"""
from __future__ import annotations

import re

__all__ = ["split_words"]

_SPACE = " \t\r\n"  # shlex.shlex.whitespace
_PLAIN = re.compile(r"[^ \t\r\n'\"\\#]+")  # a run of characters with no meaning of their own
_PLAIN_NO_COMMENT = re.compile(r"[^ \t\r\n'\"\\]+")
_IN_DOUBLE = re.compile(r'[^"\\]*')  # a run inside "...": up to the closing quote or a backslash


def split_words(text: str, comments: bool = True) -> list[str]:
    """The words of ``text`` as ``shlex.split(text, comments=comments)`` gives them; O(len(text)).

    Raises:
        ValueError: "No closing quotation" (a quote left open) or "No escaped character" (a backslash at the
            end), as shlex does.
    """
    plain = _PLAIN if comments else _PLAIN_NO_COMMENT
    out: list[str] = []
    cur: list[str] | None = None  # the pieces of the word being read; None between words
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in _SPACE:
            if cur is not None:
                out.append("".join(cur))
                cur = None
            i += 1
            continue
        if c == "#" and comments:
            break  # the rest of the line is a comment (shlex: in a word too, which then ends)
        if cur is None:
            cur = []
        if c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise ValueError("No closing quotation")
            cur.append(text[i + 1:end])
            i = end + 1
        elif c == '"':
            i = _double_quoted(text, i + 1, cur)
        elif c == "\\":
            if i + 1 >= n:
                raise ValueError("No escaped character")
            cur.append(text[i + 1])
            i += 2
        else:
            m = plain.match(text, i)
            cur.append(m.group())
            i = m.end()
    if cur is not None:
        out.append("".join(cur))
    return out


def _double_quoted(text: str, i: int, cur: list[str]) -> int:
    """Read ``"...`` from just after its opening quote into ``cur``; the index after the closing quote."""
    n = len(text)
    while True:
        m = _IN_DOUBLE.match(text, i)
        cur.append(m.group())
        i = m.end()
        if i >= n:
            raise ValueError("No closing quotation")
        if text[i] == '"':
            return i + 1
        if i + 1 >= n:  # a backslash as the last character, inside the quotes
            raise ValueError("No escaped character")
        nxt = text[i + 1]
        if nxt not in '\\"':  # in double quotes a backslash escapes only itself and the quote (POSIX shlex)
            cur.append("\\")
        cur.append(nxt)
        i += 2
