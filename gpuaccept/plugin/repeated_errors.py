"""The terminal's ERRORS: a host's cause listed once, not once per test.

An unreachable host (or one whose key or login is refused, or where the probes could not be shipped) errors
every test that needs it with the same one-line cause: 12 health tests of 20 dead hosts would be 240 ERROR
sections and 240 short-summary lines saying 20 things. :class:`RepeatedErrors` shows, in pytest's ERRORS
section and its short test summary, the first test of each such cause, with a line naming how many more
tests and which ones erred with it. A host-wide cause (the connectivity class: unreachable, name not resolved,
host key, login) groups by its structured key, the host and the cause's kind (:data:`gpuaccept.causes.CAUSE_KEY`),
whatever the words ("written off at ..., not tried again this run: <the cause>" joins the first test's
"cannot connect ..."); any other gpuaccept error groups only with an earlier one word for word. Nothing else
changes: every test still counts in pytest's closing line and exit status, and every one is in the JUnit
reports, results.json and the summary. Failures (judged figures) are never grouped, nor errors of another kind
whose text differs (a probe that crashed on one test only).
"""
from __future__ import annotations

import pytest

from gpuaccept.causes import CAUSE_KEY
from gpuaccept.errors import ERROR_KEY, ERROR_KIND_KEY
from gpuaccept.reporting.records import case_name

#: test names listed in the "same error" line before it says "…"
NAMES_SHOWN = 5

#: cause classes that stop every test of a host alike: grouped by (host, class, kind), not by words
HOST_WIDE_CLASSES = frozenset({"connectivity"})


def group_key(rep) -> tuple | None:
    """What report ``rep`` groups by: ``("cause", host, class, kind)`` for a gpuaccept error whose first cause is
    host-wide (:data:`HOST_WIDE_CLASSES`) and names its host, else ``("words", text)`` for a gpuaccept error
    (:data:`ERROR_KEY` with an :data:`ERROR_KIND_KEY`), else None (never grouped)."""
    props = dict(getattr(rep, "user_properties", ()) or ())
    text = props.get(ERROR_KEY) if ERROR_KIND_KEY in props else None
    if not isinstance(text, str):
        return None
    causes = props.get(CAUSE_KEY)
    first = causes[0] if isinstance(causes, list) and causes else None
    if (isinstance(first, dict) and first.get("class") in HOST_WIDE_CLASSES and isinstance(first.get("host"), str)
            and isinstance(first.get("kind"), str)):
        return ("cause", first["host"], first["class"], first["kind"])
    return ("words", text)


def group(reports: list) -> tuple[list, dict[int, list]]:
    """``(shown, more)``: ``reports`` (pytest error reports, in order) without those whose :func:`group_key` is an
    earlier one's (one host's host-wide cause, or a gpuaccept error's words); ``more`` maps the ``id()`` of each
    shown report to the reports grouped under it."""
    shown: list = []
    more: dict[int, list] = {}
    first: dict[tuple, object] = {}
    for rep in reports:
        key = group_key(rep)
        if key is None or key not in first:
            shown.append(rep)
            if key is not None:
                first[key] = rep
            continue
        more.setdefault(id(first[key]), []).append(rep)
    return shown, more


def same_error_line(grouped: list, first=None) -> str:
    """The line under a shown error (``first``): how many tests more erred with it, the first :data:`NAMES_SHOWN`
    by name; "the same cause" when some of their words differ from ``first``'s."""
    names = [case_name(r.nodeid) for r in grouped]
    listed = ", ".join(names[:NAMES_SHOWN]) + (", …" if len(names) > NAMES_SHOWN else "")
    n = len(names)
    text = dict(getattr(first, "user_properties", ()) or ()).get(ERROR_KEY) if first is not None else None
    same = first is None or all(dict(getattr(r, "user_properties", ()) or ()).get(ERROR_KEY) == text for r in grouped)
    return (f"(the same {'error' if same else 'cause'} in {n} more test{'s' if n != 1 else ''}, not listed again: "
            f"{listed}; every test is in the reports)")


class RepeatedErrors:
    """The plugin: around pytest's terminal summary, the error list grouped (:func:`group`), then restored."""

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        errors = tr.stats.get("error")
        if not errors:
            return (yield)
        shown, more = group(errors)
        if not more:
            return (yield)
        saved = {}
        for rep in shown:
            if id(rep) in more:
                saved[id(rep)] = (rep, rep.longrepr)
                rep.longrepr = f"{rep.longrepr}\n{same_error_line(more[id(rep)], rep)}"
        tr.stats["error"] = shown
        try:
            return (yield)
        finally:
            tr.stats["error"] = errors  # pytest's closing line counts every test
            for rep, longrepr in saved.values():
                rep.longrepr = longrepr
