"""The ``~regex`` terms of ``--limit``, matched in time linear in the name: no backtracking.

Ansible matches ``~`` patterns with Python's ``re.match``, which backtracks: ``~(a|a)*b`` against a host named
with 24 ``a`` took 15.8 s, with 40 longer than a minute. :func:`compile_limit_regex` reads the pattern (after
``re.compile`` has accepted it, so a malformed one gets Python's own message) into a Thompson automaton
and :meth:`LinearRegex.match` runs every state at once, one character at a time, building the deterministic
states it meets on the way (at most :data:`DFA_CACHE` of them, then it starts over): at most
``len(name) x states`` steps, whatever the pattern. Same answers as ``re.match`` (anchored at the start, a
match of any prefix), checked against it on random patterns by tests/test_patterns.py.

What it reads: literals and escapes (``\\.``, ``\\t``, ``\\x41``, ``\\u00e9``), ``.``, classes ``[a-z0-9_]``,
``[^...]`` with ``\\d \\w \\s \\D \\W \\S`` (Unicode, as Python's ``re``), groups ``(...)``, ``(?:...)``,
``(?P<name>...)``, alternation ``|``, the repeats ``* + ? {m} {m,} {,n} {m,n}`` and their lazy forms, anchors
``^ $ \\A \\Z``. Refused with a line saying so (exit 4): back-references, look-around, conditionals,
``\\b \\B``, inline flags such as ``(?i)``, possessive repeats and atomic groups: constructs no automaton
without backtracking has, and a host pattern does not need. Also refused: a pattern of more than
:data:`MAX_STATES` states (``{m,n}`` copies what it repeats).
"""
from __future__ import annotations

import re
import unicodedata
from typing import Callable

__all__ = ["LinearRegex", "UnsupportedRegex", "compile_limit_regex", "MAX_STATES"]

#: automaton states a pattern may need (chosen: ``~gpu[0-9]{1,5}`` needs 14; each step costs one pass over the
#: live states, so this bounds the cost per character)
MAX_STATES = 5000
#: deterministic states kept between names (chosen; memory about 100 bytes each plus the transitions)
DFA_CACHE = 20000
#: groups may nest this deep in a pattern (the reader recurses once per level)
MAX_NESTING = 100

_CHAR, _SPLIT, _EPS, _START, _END, _MATCH = range(6)
_COUNTED = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")


class UnsupportedRegex(ValueError):
    """A construct the linear matcher does not read (back-reference, look-around, flags...); ``str()`` says
    which, one line."""


# --------------------------------------------------------------------------------------------- the reader

def _category(letter: str) -> Callable[[str], bool]:
    """The test of ``\\d \\w \\s`` and their negations, as Python's ``re`` has them for text patterns
    (``_sre``: Py_UNICODE_ISDECIMAL, ISALNUM or ``_``, ISSPACE)."""
    base = {"d": str.isdecimal, "w": lambda c: c.isalnum() or c == "_", "s": str.isspace}[letter.lower()]
    return base if letter.islower() else (lambda c: not base(c))


class _Reader:
    """Recursive descent over a pattern ``re.compile`` accepted; builds the tree of tuples :func:`_emit` reads:
    ``("char", test)``, ``("seq", [..])``, ``("alt", [..])``, ``("rep", node, lo, hi or None)``, ``("start",)``,
    ``("end", 0 for $ or 1 for \\Z)``."""

    def __init__(self, text: str):
        self.s = text
        self.i = 0
        self.depth = 0

    def peek(self, k: int = 0) -> str:
        return self.s[self.i + k] if self.i + k < len(self.s) else ""

    def take(self) -> str:
        c = self.peek()
        self.i += 1
        return c

    def alternation(self) -> tuple:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def sequence(self) -> tuple:
        items = []
        while self.peek() not in ("", "|", ")"):
            atom = self.atom()
            items.append(self.repeats(atom))
        return ("seq", items)

    def repeats(self, atom: tuple) -> tuple:
        while True:
            c = self.peek()
            if c in ("*", "+", "?"):
                self.i += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
            elif c == "{" and self._counted() is not None:
                lo, hi, self.i = self._counted()
            else:
                return atom
            if self.peek() == "+":
                raise UnsupportedRegex("a possessive repeat (*+, ++, ?+, {m,n}+)")
            if self.peek() == "?":
                self.i += 1  # lazy: the same answer to "does it match", which is all --limit asks
            atom = ("rep", atom, lo, hi)

    def _counted(self) -> tuple[int, int | None, int] | None:
        """``{m}``, ``{m,}``, ``{,n}``, ``{m,n}`` at the cursor as (lo, hi, index after), else None (then the
        ``{`` is a literal, as in Python's reader)."""
        m = _COUNTED.match(self.s, self.i)
        if not m or m.group(0) == "{}":
            return None
        lo = int(m.group(1)) if m.group(1) else 0
        hi = (int(m.group(3)) if m.group(3) else None) if m.group(2) else lo
        return lo, hi, m.end()

    def atom(self) -> tuple:
        c = self.take()
        if c == "(":
            return self.group()
        if c == "[":
            return ("char", self.klass())
        if c == ".":
            return ("char", lambda ch: ch != "\n")
        if c == "^":
            return ("start",)
        if c == "$":
            return ("end", 0)  # passed at the end, or before a newline that ends the name
        if c == "\\":
            return self.escape()
        return ("char", c)

    def group(self) -> tuple:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise UnsupportedRegex(f"groups nested more than {MAX_NESTING} deep")
        if self.peek() == "?":
            if self.s.startswith("?:", self.i):
                self.i += 2
            elif self.s.startswith("?P<", self.i):
                self.i = self.s.index(">", self.i) + 1
            else:
                what = {"?=": "a look-ahead (?=...)", "?!": "a look-ahead (?!...)", "?<": "a look-behind",
                        "?P": "a back-reference (?P=name)", "?(": "a conditional (?(...)...)",
                        "?>": "an atomic group (?>...)", "?#": "a comment (?#...)"}.get(self.s[self.i:self.i + 2])
                raise UnsupportedRegex(what or "inline flags such as (?i)")
        inner = self.alternation()
        self.take()  # ")": re.compile checked the balance
        self.depth -= 1
        return inner

    def escape(self) -> tuple:
        c = self.take()
        if c in "dwsDWS":
            return ("char", _category(c))
        if c == "A":
            return ("start",)
        if c == "Z":
            return ("end", 1)  # passed at the very end only
        if c in "bB":
            raise UnsupportedRegex(f"the word-boundary assertion \\{c}")
        if c.isdigit() and c != "0":
            raise UnsupportedRegex(f"a back-reference or octal escape \\{c}")
        return ("char", self.escaped_char(c))

    def escaped_char(self, c: str) -> str:
        """The character an escape ``\\c...`` (``c`` taken) stands for, outside or inside a class."""
        simple = {"a": "\a", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
        if c in simple:
            return simple[c]
        if c in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[c]
            digits, self.i = self.s[self.i:self.i + width], self.i + width
            return chr(int(digits, 16))
        if c == "N":
            end = self.s.index("}", self.i)
            name, self.i = self.s[self.i + 1:end], end + 1
            return unicodedata.lookup(name)
        if c in "01234567":  # octal: \0, \0nn, or (in a class) up to three digits
            digits = c
            while len(digits) < 3 and self.peek() in tuple("01234567"):
                digits += self.take()
            return chr(int(digits, 8))
        return c  # an escaped punctuation character stands for itself

    def klass(self) -> Callable[[str], bool]:
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        chars: set[str] = set()
        ranges: list[tuple[str, str]] = []
        tests: list[Callable[[str], bool]] = []
        first = True
        while first or self.peek() != "]":
            first = False
            item = self._class_item()
            if callable(item):
                tests.append(item)
                continue
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                high = self._class_item()
                ranges.append((item, high))  # re.compile refused a range with a class at either end
            else:
                chars.add(item)
        self.i += 1  # "]"

        def test(ch: str) -> bool:
            hit = ch in chars or any(lo <= ch <= hi for lo, hi in ranges) or any(t(ch) for t in tests)
            return hit != negate
        return test

    def _class_item(self) -> str | Callable[[str], bool]:
        c = self.take()
        if c != "\\":
            return c
        e = self.take()
        if e in "dwsDWS":
            return _category(e)
        if e == "b":
            return "\b"  # in a class, \b is the backspace character (Python's re)
        return self.escaped_char(e)


# ----------------------------------------------------------------------------------------- the automaton

class _Builder:
    """Thompson's construction: states in parallel lists; a fragment is (start, [(state, slot) to patch])."""

    def __init__(self):
        self.kind: list[int] = []
        self.arg: list = []
        self.out: list[list[int]] = []

    def state(self, kind: int, arg=None, outs: int = 1) -> int:
        if len(self.kind) >= MAX_STATES:
            raise UnsupportedRegex(f"the pattern needs more than {MAX_STATES} states (a large {{m,n}} repeat?)")
        self.kind.append(kind)
        self.arg.append(arg)
        self.out.append([-1] * outs)
        return len(self.kind) - 1

    def patch(self, holes: list[tuple[int, int]], target: int) -> None:
        for s, slot in holes:
            self.out[s][slot] = target

    def emit(self, node: tuple) -> tuple[int, list[tuple[int, int]]]:
        kind = node[0]
        if kind in ("char", "start", "end"):
            arg = _test(node[1]) if kind == "char" else node[1] if kind == "end" else None
            s = self.state({"char": _CHAR, "start": _START, "end": _END}[kind], arg)
            return s, [(s, 0)]
        if kind == "seq":
            if not node[1]:
                s = self.state(_EPS)
                return s, [(s, 0)]
            start, holes = self.emit(node[1][0])
            for item in node[1][1:]:
                s, h = self.emit(item)
                self.patch(holes, s)
                holes = h
            return start, holes
        if kind == "alt":
            parts = [self.emit(b) for b in node[1]]
            start, holes = parts[-1][0], list(parts[-1][1])
            for s, h in reversed(parts[:-1]):
                split = self.state(_SPLIT, outs=2)
                self.out[split] = [s, start]
                start, holes = split, h + holes
            return start, holes
        return self.repeat(node[1], node[2], node[3])

    def repeat(self, node: tuple, lo: int, hi: int | None) -> tuple[int, list[tuple[int, int]]]:
        pieces: list[tuple[int, list[tuple[int, int]]]] = [self.emit(node) for _ in range(lo)]
        if hi is None:  # then a loop: split -> (node -> back to split) | out
            split = self.state(_SPLIT, outs=2)
            s, h = self.emit(node)
            self.out[split][0] = s
            self.patch(h, split)
            pieces.append((split, [(split, 1)]))
        else:
            for _ in range(hi - lo):  # each optional: split -> node | out
                split = self.state(_SPLIT, outs=2)
                s, h = self.emit(node)
                self.out[split][0] = s
                pieces.append((split, h + [(split, 1)]))
        if not pieces:
            s = self.state(_EPS)
            return s, [(s, 0)]
        start, holes = pieces[0]
        for s, h in pieces[1:]:
            self.patch(holes, s)
            holes = h
        return start, holes


def _test(arg) -> Callable[[str], bool]:
    return arg if callable(arg) else arg.__eq__


class LinearRegex:
    """A compiled ``~`` pattern. :meth:`match` answers ``re.match(pattern, name) is not None``."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        tree = _Reader(pattern).alternation()
        b = _Builder()
        start, holes = b.emit(tree)
        accept = b.state(_MATCH, outs=0)
        b.patch(holes, accept)
        self.kind, self.arg, self.out = b.kind, b.arg, b.out
        self._initial = self._closure([start], at_start=True)
        # the deterministic states met so far: id -> (automaton states, a match state among them, $ states)
        self._ids: dict[frozenset, int] = {}
        self._sets: list[tuple[frozenset, bool, list[int]]] = []
        self._next: dict[tuple[int, str], int] = {}
        self._generation = 0  # bumped when the cache starts over: ids taken before then mean nothing

    @property
    def states(self) -> int:
        """Automaton states (at most :data:`MAX_STATES`)."""
        return len(self.kind)

    def _closure(self, seeds, at_start: bool, at_end: int = 0) -> frozenset:
        """The states reached from ``seeds`` without reading a character: character and match states, and the
        ``$`` states not passed (kept, to be passed at the end). ``at_end``: 2 at the end of the name, 1 just
        before a newline that ends it (where ``$`` matches but ``\\Z`` does not), else 0."""
        kind, out, arg = self.kind, self.out, self.arg
        seen: set[int] = set()
        stack = list(seeds)
        keep = []
        while stack:
            s = stack.pop()
            if s in seen:
                continue
            seen.add(s)
            k = kind[s]
            if k == _SPLIT:
                stack.extend(out[s])
            elif k == _EPS or (k == _START and at_start) or (k == _END and at_end > arg[s]):
                stack.append(out[s][0])
            elif k != _START:
                keep.append(s)
        return frozenset(keep)

    def _intern(self, states: frozenset) -> int:
        got = self._ids.get(states)
        if got is None:
            if len(self._sets) >= DFA_CACHE:  # start over: memory stays bounded, each step at most O(states)
                self._ids.clear()
                self._sets.clear()
                self._next.clear()
                self._generation += 1
            got = self._ids[states] = len(self._sets)
            self._sets.append((states, any(self.kind[s] == _MATCH for s in states),
                               [s for s in states if self.kind[s] == _END]))
        return got

    def _ends_match(self, ends: list[int], at_start: bool, at_end: int) -> bool:
        return any(self.kind[s] == _MATCH for s in self._closure(ends, at_start, at_end))

    def match(self, name: str) -> bool:
        """Whether the pattern matches a prefix of ``name`` (``re.match``); O(len(name) x states)."""
        sid = self._intern(self._initial)
        last = len(name) - 1
        for pos, ch in enumerate(name):
            _, matched, ends = self._sets[sid]
            if matched or (ends and pos == last and ch == "\n" and self._ends_match(ends, pos == 0, 1)):
                return True
            key = (sid, ch)
            nxt = self._next.get(key)
            if nxt is None:
                kind, arg, out = self.kind, self.arg, self.out
                moved = [out[s][0] for s in self._sets[sid][0] if kind[s] == _CHAR and arg[s](ch)]
                generation = self._generation
                nxt = self._intern(self._closure(moved, at_start=False))
                if generation == self._generation:
                    self._next[key] = nxt
            if not self._sets[nxt][0]:
                return False  # no state left: nothing longer can match
            sid = nxt
        _, matched, ends = self._sets[sid]
        return matched or bool(ends) and self._ends_match(ends, last < 0, 2)


def compile_limit_regex(pattern: str) -> LinearRegex:
    """The ``~`` pattern ``pattern`` (without the ``~``) compiled for :meth:`LinearRegex.match`.

    Raises:
        re.error: the pattern is malformed (Python's own message).
        UnsupportedRegex: it holds a construct listed in the module's docstring, or needs more than
            :data:`MAX_STATES` states.
    """
    re.compile(pattern)
    return LinearRegex(pattern)
