"""The terminal's ERRORS: a host's cause listed once, not once per test.

An unreachable host (or one whose key or login is refused, or where the probes could not be shipped) errors
every test that needs it with the same one-line cause: 12 health tests of 20 dead hosts would be 240 ERROR
sections and 240 short-summary lines saying 20 things. :class:`RepeatedErrors` shows, in pytest's ERRORS
section and its short test summary, the first test of each such cause, with a line naming how many more
tests and which ones erred with it word for word. Nothing else changes: every test still counts in pytest's
closing line and exit status, and every one is in the JUnit reports, results.json and the summary. Failures
(judged figures) are never grouped, nor errors whose text differs (a probe that crashed on one test only).
"""
from __future__ import annotations

import pytest

from gpuaccept.errors import ERROR_KEY, ERROR_KIND_KEY
from gpuaccept.reporting.records import case_name

#: test names listed in the "same error" line before it says "…"
NAMES_SHOWN = 5


def group(reports: list) -> tuple[list, dict[int, list]]:
    """``(shown, more)``: ``reports`` (pytest error reports, in order) without those whose gpuaccept error text
    (:data:`ERROR_KEY`, with an :data:`ERROR_KIND_KEY`) is word for word an earlier one's; ``more`` maps the
    ``id()`` of each shown report to the reports grouped under it."""
    shown: list = []
    more: dict[int, list] = {}
    first: dict[str, object] = {}
    for rep in reports:
        props = dict(getattr(rep, "user_properties", ()) or ())
        text = props.get(ERROR_KEY) if ERROR_KIND_KEY in props else None
        if not isinstance(text, str) or text not in first:
            shown.append(rep)
            if isinstance(text, str):
                first[text] = rep
            continue
        more.setdefault(id(first[text]), []).append(rep)
    return shown, more


def same_error_line(grouped: list) -> str:
    """The line under a shown error: how many tests more erred with it, the first :data:`NAMES_SHOWN` by name."""
    names = [case_name(r.nodeid) for r in grouped]
    listed = ", ".join(names[:NAMES_SHOWN]) + (", …" if len(names) > NAMES_SHOWN else "")
    n = len(names)
    return (f"(the same error in {n} more test{'s' if n != 1 else ''}, not listed again: {listed}; "
            "every test is in the reports)")


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
                rep.longrepr = f"{rep.longrepr}\n{same_error_line(more[id(rep)])}"
        tr.stats["error"] = shown
        try:
            return (yield)
        finally:
            tr.stats["error"] = errors  # pytest's closing line counts every test
            for rep, longrepr in saved.values():
                rep.longrepr = longrepr
