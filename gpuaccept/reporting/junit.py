"""``junit-<layer>.xml`` as text (pure): one testsuite per layer, one testcase per host x check, the figures as
testcase properties (:func:`figure_properties`). Written in one pass, linear in the records; the
:class:`gpuaccept.reporting.reporter.Reporter` renders each record's <testcase> once, when it arrives.
"""
from __future__ import annotations

import re
import time

from gpuaccept.judging.standouts import distinguisher, prop_value
from gpuaccept.reporting.records import CaseRecord, record_action, case_file


def figure_properties(fleet_wide: bool, figures: list[dict]) -> list[tuple[str, str]]:
    """JUnit properties of one testcase's figures (pure): per figure ``<name>`` = value (a bare number where
    it is one), ``<name>.unit``, ``<name>.min`` / ``<name>.max`` (the limit) and ``<name>.verdict``.

    ``<name>`` is ``[<host>.][gpu<i>.]<check>``: the host in fleet-wide testcases, the GPU index for per-GPU
    figures; a figure whose name repeats within the testcase gets its scalar ``extra`` fields appended
    (``busbw_gbps[bytes=4096]``), and ``#2``, ``#3``... if it still repeats, so names are unique.
    """
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    base_count: dict[str, int] = {}
    bases = []
    for f in figures:
        host = f.get("host") or ""
        if fleet_wide and (f.get("extra") or {}).get("host"):
            host = f["extra"]["host"]
        prefix = (f"{host}." if fleet_wide and host and host != "fleet" else "") + \
                 (f"gpu{f['gpu']}." if f.get("gpu") is not None else "")
        base = f"{prefix}{f['check']}"
        bases.append(base)
        base_count[base] = base_count.get(base, 0) + 1
    for f, base in zip(figures, bases):
        name = base + (distinguisher(f) if base_count[base] > 1 else "")
        n, unique = 2, name
        while unique in seen:
            unique, n = f"{name}#{n}", n + 1
        seen.add(unique)
        out.append((unique, prop_value(f.get("value"))))
        if f.get("unit"):
            out.append((f"{unique}.unit", str(f["unit"])))
        for k in ("min", "max"):
            if isinstance(f.get("limit"), dict) and k in f["limit"]:
                out.append((f"{unique}.{k}", prop_value(f["limit"][k])))
        if f.get("verdict"):
            out.append((f"{unique}.verdict", str(f["verdict"])))
    return out


_XML_SPECIAL = re.compile(r'[\x00-\x1f&<>"]')
_XML_BAD = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _xml_text(v: str) -> str:
    if not _XML_SPECIAL.search(v):
        return v
    # characters XML 1.0 cannot carry (control bytes from a tool's output) become U+FFFD
    v = _XML_BAD.sub("\ufffd", v)
    return v.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _xml_attr(v: str) -> str:
    if not _XML_SPECIAL.search(v):
        return '"' + v + '"'
    return '"' + _xml_text(v).replace('"', "&quot;").replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#9;") + '"'


JUNIT_FOOTER = "  </testsuite>\n</testsuites>\n"


def junit_header(layer: str, recs: list[CaseRecord], hv: dict | None = None, meta: dict | None = None,
                 kept: dict | None = None) -> str:
    """The XML declaration and the opening of the testsuite named ``layer`` with its counts (ends in a newline).
    With ``hv`` (gpuaccept.reporting.verdicts.host_verdicts), the testsuite's properties carry
    ``gpuaccept.host_verdict.<host>`` for each host of the layer's records (the one verdict order,
    gpuaccept.judging.verdict_order) and, for an interrupted run (``meta``), ``gpuaccept.interrupted``.
    ``kept``: the layer's entry of :attr:`gpuaccept.reporting.tally.RunTally.layers` (its counts, durations and
    hosts, kept as the records arrived; ``recs`` is then unused). A run that has not finished (``meta["incomplete"]``:
    a periodic write, which is what a killed run leaves; gpuaccept.reporting.reporter.Reporter) says so in an XML
    comment at the top and in the property ``gpuaccept.incomplete``, and counts one more error, the testcase
    :func:`incomplete_testcase` the file ends with, so that a CI step counting errors does not read it as green."""
    from gpuaccept.reporting.verdicts import interruption_text
    if kept is None:
        from gpuaccept.reporting.tally import count_in_layer, layer_entry
        kept = layer_entry()
        for r in recs:
            count_in_layer(kept, r)
    counts = kept
    props = []
    if hv:
        for h in kept["hosts"]:
            if h in hv:
                props.append((f"gpuaccept.host_verdict.{h}", hv[h]["verdict"]))
    stop = interruption_text(meta or {})
    if stop:
        props.append(("gpuaccept.interrupted", f"INTERRUPTED {stop}"))
    incomplete = incomplete_of(meta)
    if incomplete:
        props.insert(0, ("gpuaccept.incomplete", incomplete))
    block = ("    <properties>\n" + "".join(f"      <property name={_xml_attr(n)} value={_xml_attr(v)} />\n"
                                           for n, v in props) + "    </properties>\n") if props else ""
    extra = 1 if incomplete else 0  # the incomplete_testcase
    # an XML comment may not hold "--" (nor end in "-")
    top = f"<!-- {_xml_text(incomplete).replace('--', '- -')} -->\n" if incomplete else ""
    return ("<?xml version='1.0' encoding='utf-8'?>\n" + top + "<testsuites>\n"
            f'  <testsuite name={_xml_attr(layer)} tests="{len(kept["recs"]) + extra}" failures="{counts["failed"]}" '
            f'errors="{counts["error"] + extra}" skipped="{counts["skipped"]}" time="{sum(kept["durations"]):.3f}" '
            f'timestamp="{time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())}">\n' + block)


def incomplete_of(meta: dict | None) -> str | None:
    """The text of ``meta["incomplete"]`` (a run that has not finished: gpuaccept.reporting.reporter), else None."""
    inc = (meta or {}).get("incomplete")
    return inc.get("text") if isinstance(inc, dict) else None


def incomplete_testcase(layer: str, meta: dict | None) -> str:
    """The <testcase> a JUnit file of a run that has not finished (``meta["incomplete"]``) ends with
    (``run_incomplete``, classname ``<layer>.run``): an error saying so, with how many of the layer's tests have no
    record yet; ``""`` for a run that finished."""
    incomplete = incomplete_of(meta)
    if not incomplete:
        return ""
    pending = int(((meta or {}).get("incomplete") or {}).get("pending", {}).get(layer, 0))
    why = f"{incomplete}; {pending} test{'s' if pending != 1 else ''} of this layer not finished"
    return (f'    <testcase name="run_incomplete" classname={_xml_attr(layer + ".run")} file="" time="0.000">\n'
            f'      <error type="incomplete" message={_xml_attr(why)}>{_xml_text(why)}</error>\n    </testcase>\n')


def action_properties(act: dict | None) -> list[tuple[str, str]]:
    """JUnit properties of a testcase's action (pure): ``gpuaccept.action`` and ``gpuaccept.action.<field>`` for
    cause (its class, gpuaccept.causes), kind, host (whose finding it is, in a fleet-wide test), reason, source,
    setting, command; none without an action."""
    if not act:
        return []
    return [("gpuaccept.action", str(act["action"]))] + [
        (f"gpuaccept.action.{k}", str(act[k])) for k in ("cause", "kind", "host", "reason", "source", "setting",
                                                         "command") if act.get(k)]


def junit_testcase(layer: str, r: CaseRecord) -> str:
    """One record's <testcase> element (classname ``<layer>.<host|fleet>``, figures as properties; see
    :func:`figure_properties`), indented, ending in a newline."""
    classname = f"{layer}.{r.host or 'fleet'}"
    out = [f'    <testcase name={_xml_attr(r.name)} classname={_xml_attr(classname)} '
           f'file={_xml_attr(case_file(r.nodeid))} time="{r.duration_s:.3f}">']
    props = action_properties(record_action(r)) + (figure_properties(r.host is None, r.figures) if r.figures else [])
    if props:
        out.append("      <properties>")
        out += [f"        <property name={_xml_attr(n)} value={_xml_attr(v)} />" for n, v in props]
        out.append("      </properties>")
    first = r.message.splitlines()[0] if r.message.strip() else r.outcome
    if r.outcome in ("failed", "error"):
        tag = "failure" if r.outcome == "failed" else "error"
        out.append(f'      <{tag} type="{tag}" message={_xml_attr(first)}>{_xml_text(r.message)}</{tag}>')
    elif r.outcome == "skipped":
        out.append(f'      <skipped type="skipped" message={_xml_attr(r.message)} />')
    out.append("    </testcase>\n")
    return "\n".join(out)


def junit_xml_text(layer: str, recs: list[CaseRecord], hv: dict | None = None, meta: dict | None = None) -> str:
    """One testsuite named ``layer``; a testcase per record (classname ``<layer>.<host|fleet>``); figures as
    ``<properties>`` (see :func:`figure_properties`). Written as text in one pass (linear in the records;
    ElementTree's indent and serialiser took seconds at 10,000 hosts). :class:`Reporter` writes the same text
    from each record's <testcase>, rendered once when the record arrives. ``hv``, ``meta``: the run's host
    verdicts and meta, for the testsuite's properties (:func:`junit_header`)."""
    return junit_header(layer, recs, hv, meta) + "".join(junit_testcase(layer, r) for r in recs) + \
        incomplete_testcase(layer, meta) + JUNIT_FOOTER
