"""Host name ranges as Ansible writes them (``gpu[001:128]``, ``n[a:f]``, ``n[1:10:2]``), and host-name checks.

Shared by the inventory readers and the ``--limit`` patterns; it imports nothing else of gpuaccept's but
its errors, so neither of those imports the other for it.

A range expands to at most :data:`MAX_HOSTS` names, counted before any name is built: ``node[0:99999999]``
or two ranges multiplied are refused at once, in constant memory.
"""
from __future__ import annotations

import re
import unicodedata
import string

from gpuaccept.errors import InventoryError
from gpuaccept.config.shown import shown

__all__ = ["MAX_HOSTS", "RANGE", "bad_name_reason", "count", "expand_hostname", "looks_like_range"]

#: most hosts one inventory (or one range) may hold; stated in docs/inventory.md (what is refused up front)
MAX_HOSTS = 100_000

RANGE = re.compile(r"\[([^\[\]]*)\]")
# an Ansible range inside a value: [1:3], [01:10:2], [a:f]
_RANGE_IN_VALUE = re.compile(r"\[(?:\d*:\d+|[A-Za-z]?:[A-Za-z])(?::\d+)?\]")
#: Unicode general categories refused in host and group names (Unicode 15 chapter 4.5): Cf format (U+200B..U+200F,
#: U+202A..U+202E, U+2066..U+2069, U+FEFF), Zl and Zp separators, Co private use, Cn unassigned, Cs surrogates
_DECEPTIVE_CATEGORIES = frozenset({"Cf", "Zl", "Zp", "Co", "Cn", "Cs"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _spec(spec: str, pattern: str, where: str) -> tuple[range | None, str | None, int]:
    """(numeric range or None, letters or None, zero-pad width) for one ``begin:end[:step]``."""
    def bad(why: str) -> InventoryError:
        return InventoryError(f"{where}: bad host range [{spec}] in {shown(pattern)}: {why}")

    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise bad("expected [begin:end] or [begin:end:step]")
    beg, end = parts[0].strip(), parts[1].strip()
    step_s = parts[2].strip() if len(parts) == 3 else "1"
    if not step_s.isdigit() or len(step_s) > 9 or int(step_s) == 0:
        raise bad("step must be a positive integer")
    step = int(step_s)
    if not end:
        raise bad("no end value")
    beg = beg or "0"
    letters = string.ascii_letters
    if len(beg) == 1 and len(end) == 1 and beg in letters and end in letters:
        i, j = letters.index(beg), letters.index(end)
        if i > j:
            raise bad("begin is after end")
        return None, letters[i: j + 1: step], 0
    if not (beg.isascii() and end.isascii() and beg.isdigit() and end.isdigit()):
        raise bad("begin and end must both be numbers or both single letters")
    if len(beg) > 18 or len(end) > 18:
        raise bad(f"more than {MAX_HOSTS:,} hosts")
    if int(beg) > int(end):
        raise bad("begin is after end")
    width = len(beg) if beg.startswith("0") and len(beg) > 1 else 0
    if width and len(end) != width:
        raise bad("zero-padded begin and end must have the same length")
    return range(int(beg), int(end) + 1, step), None, width


def count(pattern: str, where: str) -> int:
    """How many names ``pattern`` expands to, without building them. Raises InventoryError on a
    malformed range."""
    n = 1
    for m in RANGE.finditer(pattern):
        nums, letters, _ = _spec(m.group(1), pattern, where)
        n *= len(nums) if nums is not None else len(letters or "")
    if n == 1 and ("[" in RANGE.sub("", pattern) or "]" in RANGE.sub("", pattern)):
        raise InventoryError(f"{where}: bad host range in {shown(pattern)}: unbalanced brackets")
    return n


def expand_hostname(pattern: str, where: str, limit: int = MAX_HOSTS) -> list[str]:
    """Expand every ``[begin:end[:step]]`` range of a host name, leftmost outermost.

    ``gpu[001:003]`` -> gpu001, gpu002, gpu003; ``n[a:c]`` -> na, nb, nc;
    ``n[1:7:3]`` -> n1, n4, n7. ``where`` (``file:line``) prefixes errors.
    Raises InventoryError on a malformed range and when the names would number more than ``limit``
    (counted first, so the refusal costs no memory).
    """
    parts = RANGE.split(pattern)  # text, spec, text, spec, ..., text
    if len(parts) == 1:
        if "[" in pattern or "]" in pattern:
            raise InventoryError(f"{where}: bad host range in {shown(pattern)}: unbalanced brackets")
        return [pattern]
    for text in parts[0::2]:
        if "[" in text or "]" in text:
            raise InventoryError(f"{where}: bad host range in {shown(pattern)}: unbalanced brackets")
    values: list[list[str]] = []
    total = 1
    for spec in parts[1::2]:
        nums, letters, width = _spec(spec, pattern, where)
        vals = len(nums) if nums is not None else len(letters or "")
        total *= vals
        if total > limit:
            raise InventoryError(f"{where}: host range {shown(pattern)} expands to more than {limit:,} hosts "
                                 f"(gpuaccept's limit per inventory)")
        values.append([str(x).zfill(width) for x in nums] if nums is not None else list(letters or ""))
    names = [parts[0]]
    for spec_vals, tail in zip(values, parts[2::2]):
        names = [head + v + tail for head in names for v in spec_vals]
    return names


def looks_like_range(value: str) -> bool:
    """True when ``value`` holds an Ansible host range (``10.0.0.[1:3]``), which only host names expand."""
    return bool(_RANGE_IN_VALUE.search(value))


#: longest host name, bytes of UTF-8: it becomes a folder name in the reports (``probes/<host>/``), and file
#: systems hold names of at most 255 bytes (NAME_MAX); a DNS name is at most 253 characters
MAX_NAME_BYTES = 255


def bad_name_reason(name: str, host: bool = True) -> str | None:
    """Why ``name`` cannot be a host name, or None. A host name becomes a folder name in the reports
    (``probes/<host>/``), so ``/``, ``\\``, ``..``, control characters and the empty name are refused, and a
    leading ``#`` (a comment in the host lists --limit @FILE reads), whitespace and a comma in a host's
    name (``host``; a group's keeps them: they separate the names of a host list's line and of a --limit
    pattern); it is
    shown in terminals and reports, so are the characters of Unicode categories :data:`_DECEPTIVE_CATEGORIES`
    (bidirectional controls such as U+202E, zero-width characters, the BOM, line and paragraph separators,
    private-use and unassigned code points). Other non-ASCII letters are fine."""
    if not name.strip():
        return "an empty host name"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return (f"a host name of {len(name.encode('utf-8', 'surrogatepass')):,} bytes, longer than {MAX_NAME_BYTES} "
                f"(it becomes a folder name in the reports)")
    if name.strip() == ".":
        return "a host name '.' (it would be the reports' probes folder itself)"
    if "/" in name or "\\" in name:
        return "a host name with a slash (it would become a path in the reports)"
    if ".." in name:
        return "a host name with '..' (it would become a path in the reports)"
    if name.startswith("#"):
        return ("a host name starting with '#' (host lists such as failed-hosts.txt, read by --limit @FILE, take such "
                "a line as a comment: a rerun would leave the host out)")
    if host and any(ch.isspace() for ch in name):
        return ("a host name with whitespace (a host list such as failed-hosts.txt names the hosts of a fleet-wide "
                "test on one line, space-separated, and a --limit pattern cannot hold it unquoted: a rerun would "
                "read two hosts)")
    if host and "," in name:
        return "a host name with a comma (a --limit pattern separates hosts by commas: it could not be named alone)"
    m = _CONTROL.search(name)
    if m:
        return f"a host name with control character U+{ord(m.group()):04X}"
    if not name.isascii():
        for ch in name:  # bidirectional controls (U+202E reorders the text after it), zero-width and other
            if unicodedata.category(ch) in _DECEPTIVE_CATEGORIES:  # format characters, unassigned code points
                what = unicodedata.name(ch, "unassigned")
                return (f"a host name with U+{ord(ch):04X} ({what}), an invisible or text-reordering character "
                        "(it would reorder or hide text in terminals, test ids and summary.md)")
    return None
