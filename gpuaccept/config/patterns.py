"""Ansible host patterns, as used by ``--limit``.

A pattern is a list of terms separated by commas (``a,b``) or, when there is
no comma, by colons outside brackets (``a:b``). Each term is one of:

* a group or host name: ``gpu``, ``gpu001``, ``all``;
* a shell wildcard matched against group and host names: ``gpu*``, ``*.rack1``;
* a regular expression after ``~`` (``re.match``, so anchored at the start): ``~gpu0[12]``, matched by
  :mod:`gpuaccept.config.saferegex` in time linear in each name (Ansible's Python ``re`` backtracks:
  ``~(a|a)*b`` against 40 ``a`` ran for minutes); back-references, look-around and inline flags are refused;
* any of the above followed by a subscript picking hosts by position in what
  it matched: ``gpu[0]``, ``gpu[-1]``, ``gpu[1:3]`` (inclusive, like Ansible),
  ``gpu[2:]``, ``gpu[:3]``.

A term prefixed with ``&`` intersects, one prefixed with ``!`` excludes.
As in Ansible, the result is (union of plain terms, or every host if there
is none) ∩ every ``&`` term − every ``!`` term. As with Ansible's ``--limit``,
the hosts come back in inventory order.

Unmatched terms, as Ansible: an ``&`` or ``!`` term that names no group and
no host is a warning ("ignoring it") and the selection goes on without it, so
``gpu:!drained`` still runs the day the ``drained`` group is deleted; the
selection as a whole selecting nothing is an error. Two deliberate
differences with Ansible, both to avoid testing the wrong nodes silently: a
plain (positive) term that names nothing is an error (Ansible warns and
ignores it: a typo there would quietly test fewer nodes), and so is the
removed ``[x-y]`` subscript form.
Subscripts index the term's hosts in the order of ``groups`` (for a group:
its own hosts, then its child groups' level by level); Ansible's order is
the same for flat groups but not stable across runs for nested ones.
Note that, as in Ansible, ``gpu[01:04]`` is a *subscript* of whatever
``gpu`` matches when ``gpu`` names a group or host. When it names nothing,
``gpu[01:04]`` is read as a range of host names (gpu01..gpu04), as an
inventory would expand it (Ansible would warn and match nothing).
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import ipaddress
import re

from gpuaccept.errors import ConfigError, PatternError
from gpuaccept.config.hostranges import expand_hostname
from gpuaccept.config.saferegex import LinearRegex, UnsupportedRegex, compile_limit_regex
from gpuaccept.config.shown import shown

__all__ = ["parse_shard", "select", "shard", "shard_of", "split_pattern"]

_SUBSCRIPT = re.compile(r"^(?P<expr>.+)\[(?P<sub>[^\[\]]*)\]$")
_INDEX = re.compile(r"^-?\d+$")
_SLICE = re.compile(r"^(?P<start>\d*):(?P<end>\d*)$")
_WILD = re.compile(r"[*?\[]")
_HOST_PORT = re.compile(r"^[^:\[\]]+(?:\[[^\]]*\][^:\[\]]*)*:\d+$")


def split_pattern(pattern: str) -> list[str]:
    """Split a pattern string into its stripped, non-empty terms.

    Commas win over colons; colons inside ``[...]`` do not split. A pattern
    that is an IPv6 address or looks like ``host:port`` stays one term, as in
    Ansible (such a term then matches nothing and is reported).
    """
    if "," in pattern:
        parts = pattern.split(",")
    elif ":" not in pattern or _is_single_address(pattern):
        parts = [pattern]
    else:
        parts, depth, cur = [], 0, ""
        for ch in pattern:
            if ch == "[":
                depth += 1
            elif ch == "]":
                depth = max(depth - 1, 0)
            if ch == ":" and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def _is_single_address(pattern: str) -> bool:
    try:
        ipaddress.IPv6Address(pattern.strip("[]"))
        return True
    except ValueError:
        return bool(_HOST_PORT.match(pattern.strip()))


def _names_matching(expr: str, names) -> list[str]:
    """Names matched by a wildcard, or by a regex when expr starts with ``~``. ``names``: a list or a dict
    (keys); a name without wildcard characters is looked up, not scanned."""
    if not expr.startswith("~") and not _WILD.search(expr):
        return [expr] if expr in names else []
    if expr.startswith("~"):
        lin = _linear(expr)
        return [n for n in names if lin.match(n)]
    rx = re.compile(fnmatch.translate(expr))
    return [n for n in names if rx.match(n)]


@functools.lru_cache(maxsize=64)
def _linear(expr: str) -> LinearRegex:
    """The ``~`` term ``expr`` compiled for the linear matcher (:mod:`gpuaccept.config.saferegex`), once per
    pattern (its groups and its hosts share the states it builds). Raises PatternError."""
    try:
        return compile_limit_regex(expr[1:])
    except re.error as err:
        raise PatternError(f"bad regular expression {shown(expr)} in --limit: {err}") from None
    except UnsupportedRegex as err:
        raise PatternError(f"--limit term {shown(expr)}: not supported: {err}; gpuaccept matches ~ patterns without "
                           "backtracking, in time linear in each name (literals, ., classes, groups, |, repeats, "
                           "^ $ \\A \\Z)") from None


def _split_subscript(term: str) -> tuple[str, tuple[int, int | None] | int | None]:
    """``gpu[1:3]`` -> ("gpu", (1, 3)); ``gpu[-1]`` -> ("gpu", -1); else (term, None)."""
    if term.startswith("~"):
        return term, None
    m = _SUBSCRIPT.match(term)
    if not m:
        return term, None
    expr, sub = m.group("expr"), m.group("sub").strip()
    if _INDEX.match(sub):
        return expr, int(sub)
    s = _SLICE.match(sub)
    if s:
        return expr, (int(s.group("start") or 0), int(s.group("end")) if s.group("end") else None)
    if re.match(r"^\d*-\d*$", sub):
        raise PatternError(f"--limit term {shown(term)}: the [x-y] subscript was removed from Ansible; write [x:y] (inclusive)")
    return term, None  # a wildcard character class such as gpu0[12]


def _match_term(term: str, hosts: dict[str, None], groups: dict[str, list[str]]) -> tuple[bool, list[str]]:
    """Evaluate one term (without &/!). Returns (named_something, hosts in match order)."""
    expr, sub = _split_subscript(term)
    matched_groups = _names_matching(expr, groups)
    found: list[str] = []
    seen: set[str] = set()
    for g in matched_groups:
        for h in groups[g]:
            if h not in seen:
                seen.add(h)
                found.append(h)
    named = bool(matched_groups)
    if not matched_groups or expr.startswith("~") or any(c in expr for c in ".?*["):
        matched_hosts = _names_matching(expr, hosts)
        named = named or bool(matched_hosts)
        for h in matched_hosts:
            if h not in seen:
                seen.add(h)
                found.append(h)
    if sub is not None and not named:
        # Not Ansible: no group or host is called ``expr``, so read ``gpu[01:04]`` as the name range an
        # operator means (gpu01..gpu04), expanded like an inventory range.
        try:
            wanted = set(expand_hostname(term, "--limit"))
        except ConfigError:
            wanted = set()
        in_range = [h for h in hosts if h in wanted]
        return bool(in_range), in_range
    if sub is None:
        return named, found
    if isinstance(sub, int):
        if not -len(found) <= sub < len(found):
            raise PatternError(f"--limit term {shown(term)}: index {sub} is out of range ({len(found)} hosts)")
        return named, [found[sub]]
    start, end = sub
    return named, found[start:] if end is None else found[start:end + 1]


def select(pattern: str, hosts: list[str], groups: dict[str, list[str]], *, source: str | None = None,
           warnings: list[str] | None = None, files: dict[str, list[str]] | None = None) -> list[str]:
    """Hosts selected by an Ansible host pattern, in the order of ``hosts``.

    Args:
        pattern: e.g. ``"gpu:&rack1:!drained"``, ``"gpu0*,~cpu[0-9]+"``;
            None, "" or "all" select every host.
        hosts: every host name, in inventory order.
        groups: group name -> host names (transitive, including ``all``).
        source: the inventory file, named in error messages.
        warnings: where given, one line is appended per ``&``/``!`` term that
            names no group or host (the term is ignored, as Ansible does).
        files: ``@FILE`` term -> the host names that file lists (read by the caller,
            gpuaccept.config.limitfile); such a term adds those hosts, as Ansible
            adds a limit file's lines. Only a plain term: ``!@FILE`` and ``&@FILE``
            are refused, as Ansible reads no file there.

    Raises:
        PatternError: a term is malformed (bad regex, removed subscript form,
            index out of range), a plain term names no group or host, or the
            whole pattern selects no host.
    """
    where = f" in {source}" if source else ""
    if pattern is None or pattern.strip() in ("", "all", "*"):
        if not hosts:
            raise PatternError(f"{source or 'the inventory'} lists no host" if pattern is None or not pattern.strip()
                               else f"--limit {shown(pattern)} matches no host{where}: it lists none")
        return list(hosts)
    host_index = dict.fromkeys(hosts)
    union: set[str] = set()
    has_plain = False
    keep: set[str] | None = None
    drop: set[str] = set()
    terms = split_pattern(pattern)
    if not terms:
        raise PatternError(f"--limit {shown(pattern)} holds no term")
    for term in terms:
        op, body = (term[0], term[1:].strip()) if term[0] in "&!" else ("", term)
        if not body:
            raise PatternError(f"--limit {shown(pattern)}: empty term after {shown(op)}")
        if body.startswith("@"):
            if op or files is None or body not in files:
                raise PatternError(f"--limit {shown(pattern)}: {shown(op + body)}: a host list file is read only as a "
                                   f"term of its own (@FILE, as Ansible; not after ! or &)")
            union.update(files[body])
            has_plain = True
            continue
        named, found = _match_term(body, host_index, groups)
        if not named and op:
            if warnings is not None:
                warnings.append(f"--limit {shown(pattern)}: term {shown(op + body)} names no group or host{where}; "
                                f"ignoring it (as Ansible: \"Could not match supplied host pattern, ignoring: {body}\")")
            if op == "&":
                keep = set()  # Ansible intersects with the empty match: nothing is left
            continue
        if not named:
            hint = ""
            if "," in pattern and ":" in body and not _is_single_address(body):
                # Ansible splits on commas only when there is one: 'gpu:!drained' stays one name
                terms = [t for part in pattern.split(",") for t in split_pattern(part)]
                hint = f" (with a comma in the pattern, ':' does not separate terms, as in Ansible: write {shown(','.join(terms))})"
            raise PatternError(f"--limit {shown(pattern)}: term {shown(body)} names no group or host{where}{hint}")
        if op == "&":
            keep = set(found) if keep is None else keep & set(found)
        elif op == "!":
            drop.update(found)
        else:
            has_plain = True
            union.update(found)
    chosen = union if has_plain else set(hosts)
    if keep is not None:
        chosen &= keep
    chosen -= drop
    result = [h for h in hosts if h in chosen]
    if not result:
        empty = [t for t in terms if t[0] == "&" and not _match_term(t[1:].strip(), host_index, groups)[0]]
        why = f" (term {shown(empty[0])} names no group or host, and intersecting with it leaves none)" if empty else ""
        raise PatternError(f"--limit {shown(pattern)} matches no host{where}{why}")
    return result


def parse_shard(text: str) -> tuple[int, int]:
    """``--shard i/k`` as (i, k), 1 <= i <= k <= 100,000. Raises PatternError on anything else."""
    num, slash, den = (text or "").strip().partition("/")
    if not (slash and num.isdigit() and den.isdigit() and len(num) <= 6 and len(den) <= 6):
        raise PatternError(f"--shard {shown(text)}: expected i/k, e.g. 1/4 (shard 1 of 4)")
    i, k = int(num), int(den)
    if not 1 <= i <= k:
        raise PatternError(f"--shard {shown(text)}: i must be between 1 and k")
    return i, k


def shard_of(name: str, k: int) -> int:
    """The shard (1..k) that host ``name`` belongs to: a stable hash of the name (the first 8 bytes of its
    SHA-256, big-endian, modulo k, plus 1), the same on every controller, Python version and run."""
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big") % k + 1


def shard(names: list[str], spec: str | None) -> list[str]:
    """The hosts of ``names`` in shard ``spec`` (``"i/k"``), in their order; all of them when spec is None.

    Every host is in exactly one of the k shards, whatever the other hosts are (a host's shard depends on
    its name alone), so k controllers given the same inventory and ``--limit`` with ``--shard 1/k`` ..
    ``k/k`` cover the selection once. A shard may be empty. Raises PatternError for a malformed spec.
    """
    if spec is None:
        return list(names)
    i, k = parse_shard(spec)
    return [n for n in names if shard_of(n, k) == i]
