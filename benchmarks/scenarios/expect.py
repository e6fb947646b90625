"""A run's expectations, checked against what it wrote: its report folder, read through gpuaccept's own readers
(gpuaccept.scaleout.merge.read_folder for the records of results.json format 1-3 and results.jsonl,
gpuaccept.reporting.verdicts.host_verdicts for the host verdict and action, gpuaccept.reporting.folder.run_figures
for the figures), or a standalone probe's JSON document.

Keys of a gpuaccept run's ``expect``::

    verdict: ERROR                         # the host's verdict (one host; several: the run's)
    action: {action: rerun, cause: contention}     # the host's action and its cause class ("rerun" alone: the action)
    never: [drain-rma, reset-gpu, reboot]  # actions no test and no host may carry
    none: [failed, error]                  # outcomes no test may have, besides those named under tests
    tests:
      test_pcie_bandwidth: {outcome: error, cause: contention, kind: host_busy, action: rerun,
                            message: ["disturbed: host busy"]}     # words the message holds
    figures:
      hbm_read_bw_gbps: {min: 4300, max: 5000, gpus: 1}            # every figure in range; at least `gpus` of them
      bf16_tflops: {of: healthy, within_pct: 5}                   # within 5 % of that scenario's median
    hosts: {name-a: {verdict: FAIL, action: ...}}  # each named host's verdict and action (several hosts)
    summary: ["## Stand-outs"]             # words summary.md holds
    one_card_per_gpu: true                 # every figure's GPU index carries one PCI bus id and serial run-wide
    exit: 2                                # the run's exit status (a signal: minus its number, -9 for KILL)
    interrupted: true                      # the report says the run was interrupted (results.json)
    node_clean_s: 5                        # seconds until no process of the run and no compute process on a GPU
                                           # is left: from the last signal when it went to the run itself,
                                           # else from the run's end (the runner measures it)

``outcome`` is a results.json outcome (passed, failed, error, skipped) or a list of them; a test's ``cause``,
``kind``, ``action`` and ``message`` are checked where it failed or errored (a finding's), so that ``[passed,
error]`` with ``cause: configuration`` reads "passes, or errs for the node's configuration". ``verdict`` with
several hosts holds when every host has it. Keys of a probe run's ``expect``: ``document: {dotted.key: {equals |
contains | min | max | len_min}}`` and ``failed: false``; of a command run's: ``exit`` and ``output`` (words its
output holds).

Each expectation gives one :class:`Row`: expected, seen, holds. Nothing here runs anything.
"""
from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass

from gpuaccept.reporting.folder import run_figures
from gpuaccept.reporting.verdicts import host_verdicts
from gpuaccept.scaleout.merge import read_folder

OUTCOMES = ("passed", "failed", "error", "skipped")
VERDICTS = ("PASS", "FAIL", "ERROR", "SKIP")
RUN_KEYS = {"verdict", "action", "never", "none", "tests", "figures", "hosts", "summary", "one_card_per_gpu",
            "exit", "interrupted", "node_clean_s"}
COMMAND_KEYS = {"exit", "output"}
HOST_KEYS = {"verdict", "action"}
TEST_KEYS = {"outcome", "cause", "kind", "action", "message"}
FIGURE_KEYS = {"min", "max", "of", "within_pct", "gpus"}
DOC_KEYS = {"equals", "contains", "min", "max", "len_min"}


@dataclass
class Row:
    """One line of the runner's table: ``expected`` and ``seen`` as short text; ``holds`` True, False (falls
    short) or None (not run: too few GPUs, a peer's source not found)."""

    scenario: str
    run: str
    expected: str
    seen: str
    holds: bool | None


def _outcomes(v) -> list:
    return v if isinstance(v, list) else [v]


def _words(v) -> bool:
    return isinstance(v, list) and all(isinstance(w, str) for w in v)


def _check_run_extras(expect: dict) -> tuple[str, str] | None:
    """The set-up-bound keys of a gpuaccept run's ``expect`` (hosts, summary, exit, interrupted, node_clean_s)."""
    for h, want in (expect.get("hosts") or {}).items():
        if not isinstance(want, dict) or not want or set(want) - HOST_KEYS:
            return f"hosts.{h}", f"{want!r}: keys are {', '.join(sorted(HOST_KEYS))}"
        if "verdict" in want and want["verdict"] not in VERDICTS:
            return f"hosts.{h}.verdict", f"{want['verdict']!r} is none of {', '.join(VERDICTS)}"
    if "summary" in expect and not _words(expect["summary"]):
        return "summary", "not a list of words"
    if "exit" in expect and (not isinstance(expect["exit"], int) or isinstance(expect["exit"], bool)):
        return "exit", f"{expect['exit']!r} is not an exit status"
    for k in ("interrupted", "one_card_per_gpu"):
        if k in expect and not isinstance(expect[k], bool):
            return k, f"{expect[k]!r} is not true or false"
    v = expect.get("node_clean_s")
    if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0):
        return "node_clean_s", f"{v!r} is not a number of seconds"
    return None


def check_spec(expect: dict, kind: str = "gpuaccept") -> tuple[str, str] | None:
    """``(key, what is wrong)`` of a malformed ``expect`` mapping (pure) of a run of ``kind`` (gpuaccept, probe,
    command), None when it is well formed."""
    if kind == "command":
        extra = sorted(set(expect) - COMMAND_KEYS)
        if extra:
            return extra[0], "unknown key for a command run (known: exit, output)"
        if "exit" in expect and not isinstance(expect["exit"], int):
            return "exit", f"{expect['exit']!r} is not an exit status"
        if "output" in expect and not _words(expect["output"]):
            return "output", "not a list of words"
        return None
    if kind == "probe":
        extra = sorted(set(expect) - {"document", "failed"})
        if extra:
            return extra[0], "unknown key for a probe run (known: document, failed)"
        for k, want in (expect.get("document") or {}).items():
            if not isinstance(want, dict) or not want or set(want) - DOC_KEYS:
                return f"document.{k}", f"{want!r}: give one of {', '.join(sorted(DOC_KEYS))}"
        return None
    extra = sorted(set(expect) - RUN_KEYS)
    if extra:
        return extra[0], f"unknown key (known: {', '.join(sorted(RUN_KEYS))})"
    if "verdict" in expect and expect["verdict"] not in VERDICTS:
        return "verdict", f"{expect['verdict']!r} is none of {', '.join(VERDICTS)}"
    for o in expect.get("none") or []:
        if o not in OUTCOMES:
            return "none", f"{o!r} is none of {', '.join(OUTCOMES)}"
    tests = expect.get("tests") or {}
    if not isinstance(tests, dict):
        return "tests", "not a mapping of test name to expectations"
    for name, want in tests.items():
        if not isinstance(want, dict) or set(want) - TEST_KEYS:
            return f"tests.{name}", f"{want!r}: keys are {', '.join(sorted(TEST_KEYS))}"
        bad = [o for o in _outcomes(want.get("outcome", "passed")) if o not in OUTCOMES]
        if bad:
            return f"tests.{name}.outcome", f"{bad[0]!r} is none of {', '.join(OUTCOMES)}"
        if not isinstance(want.get("message", []), list):
            return f"tests.{name}.message", "not a list of words"
    for check, want in (expect.get("figures") or {}).items():
        if not isinstance(want, dict) or not want or set(want) - FIGURE_KEYS:
            return f"figures.{check}", f"{want!r}: keys are {', '.join(sorted(FIGURE_KEYS))}"
        if isinstance(want.get("min"), str) and want["min"] != "floor":
            return f"figures.{check}.min", f"{want['min']!r}: a number, or 'floor' (the SKU file's)"
        if want.get("min") == "floor" and ("of" in want or "max" in want):
            return f"figures.{check}", "min: floor stands alone (no max, of or within_pct beside it)"
        if ("of" in want) != ("within_pct" in want):
            return f"figures.{check}", "of and within_pct go together"
    return _check_run_extras(expect)


def _action_text(act: dict | None) -> str:
    return f"{act.get('action')} [{act.get('cause', '?')}]" if act else "none"


def _record_action(r) -> dict | None:
    from gpuaccept.reporting.records import record_action
    return record_action(r)


def _first_line(text: str) -> str:
    return (text or "").splitlines()[0][:140] if text else ""


def _check_test(name: str, want: dict, recs: list) -> tuple[str, str, bool]:
    mine = [r for r in recs if r.name.split("[")[0] == name]
    outs = _outcomes(want.get("outcome", "passed"))
    expected = "/".join(outs)
    for k in ("cause", "kind", "action"):
        if k in want:
            expected += f" {k} {want[k]}"
    if want.get("message"):
        expected += " " + "; ".join(f"'{w}'" for w in want["message"])
    if not mine:
        return expected, "not in the report", False
    ok, seen = True, []
    for r in mine:
        causes = r.causes or []
        act = _record_action(r) or {}
        ok &= r.outcome in outs
        judged = r.outcome not in ("passed", "skipped")  # a cause, kind, action and words are a finding's
        ok &= not judged or "cause" not in want or any(c.get("class") == want["cause"] for c in causes) \
            or act.get("cause") == want["cause"]
        ok &= not judged or "kind" not in want or any(c.get("kind") == want["kind"] for c in causes)
        ok &= not judged or "action" not in want or act.get("action") == want["action"]
        ok &= not judged or all(w in (r.message or "") for w in want.get("message") or [])
        kinds = ",".join(sorted({str(c.get("kind")) for c in causes})) if causes else ""
        seen.append(f"{r.outcome} {_action_text(act) if act else ''} {kinds} {_first_line(r.message)}".replace("  ", " "))
    return expected, " | ".join(s.strip() for s in seen), ok


def _measured(doc: dict, check: str) -> list[dict]:
    """The figures of ``check`` in run ``doc`` that carry a number."""
    return [f for f in run_figures(doc) if f.get("check") == check
            and isinstance(f.get("value"), (int, float)) and not isinstance(f.get("value"), bool)]


def _figures(doc: dict, check: str) -> list[float]:
    return [float(f["value"]) for f in _measured(doc, check)]


def _check_figure(check: str, want: dict, doc: dict, refs: dict[str, dict]) -> tuple[str, str, bool]:
    vals = _figures(doc, check)
    if want.get("min") == "floor":  # at or above the floor of the SKU file the run judged the figure against
        floors = [(f.get("limit") or {}).get("min") for f in _measured(doc, check)]
        need = int(want.get("gpus", 1))
        ok = len(vals) >= need and all(isinstance(m, (int, float)) and v >= m for v, m in zip(vals, floors))
        return (f"{check} >= its SKU file's floor" + (f", at least {need}" if need != 1 else ""),
                ", ".join(f"{v:.4g} (floor {m})" for v, m in zip(vals, floors)) or "none", ok)
    lo, hi = want.get("min"), want.get("max")
    parts = []
    if want.get("of"):
        ref = refs.get(want["of"])
        ref_vals = _figures(ref, check) if ref else []
        if not ref_vals:
            return (f"{check} within {want['within_pct']} % of {want['of']}'s", f"no {check} in {want['of']}'s "
                    "report (run it in the same call)", False)
        mid = statistics.median(ref_vals)
        pct = float(want["within_pct"]) / 100.0
        lo = max(lo, mid * (1 - pct)) if lo is not None else mid * (1 - pct)
        hi = min(hi, mid * (1 + pct)) if hi is not None else mid * (1 + pct)
        parts.append(f"within {want['within_pct']} % of {want['of']}'s {mid:.4g}")
    if want.get("min") is not None or want.get("max") is not None:
        parts.append(f"[{want.get('min', '')} .. {want.get('max', '')}]")
    need = int(want.get("gpus", 1))
    expected = f"{check} " + " ".join(parts) + (f", at least {need}" if need != 1 else "")
    ok = len(vals) >= need and all((lo is None or v >= lo) and (hi is None or v <= hi) for v in vals)
    return expected, (", ".join(f"{v:.4g}" for v in vals) or "none"), ok


def _observed_rows(expect: dict, observed: dict) -> list[tuple[str, str, bool]]:
    """``exit`` and ``node_clean_s`` against what the runner saw: ``observed`` {"rc": int | None (stopped at its
    timeout), "clean_s": float | None (not clean within the wait), "signals": [text]}."""
    out = []
    if "exit" in expect:
        rc = observed.get("rc")
        out.append((f"exit status {expect['exit']}", "stopped at its timeout" if rc is None else str(rc),
                    rc == expect["exit"]))
    if "node_clean_s" in expect:
        sent = observed.get("signals") or []
        clean = observed.get("clean_s")
        seen = ("no signal was sent" if not sent else f"not clean after {observed.get('waited_s', '?')} s"
                if clean is None else f"clean {clean:.1f} s after {sent[-1]}")
        out.append((f"node clean within {expect['node_clean_s']} s of the last signal", seen,
                    bool(sent) and clean is not None and clean <= expect["node_clean_s"]))
    return out


def _cards(doc: dict) -> tuple[str, bool]:
    """Whether every figure's GPU index carries one (PCI bus id, serial) in run ``doc`` and no two indices share
    one; ``(seen text, holds)``."""
    by_index: dict = {}
    for f in run_figures(doc):
        if isinstance(f.get("gpu"), int) and f.get("pci_bus_id"):
            by_index.setdefault(f["gpu"], set()).add((str(f["pci_bus_id"]).lower(), f.get("serial")))
    if not by_index:
        return "no figure with a GPU index and bus id", False
    seen = "; ".join(f"GPU {i}: {', '.join(sorted(b for b, _ in v))}" for i, v in sorted(by_index.items()))
    buses = [b for v in by_index.values() for b, _ in v]
    return seen, all(len(v) == 1 for v in by_index.values()) and len(set(buses)) == len(buses)


def _host_rows(expect: dict, hv: dict) -> list[tuple[str, str, bool]]:
    out = []
    for h, want in (expect.get("hosts") or {}).items():
        got = hv.get(h)
        if "verdict" in want:
            out.append((f"{h} verdict {want['verdict']}", got["verdict"] if got else "not in the report",
                        bool(got) and got["verdict"] == want["verdict"]))
        if "action" in want:
            w = want["action"] if isinstance(want["action"], dict) else {"action": want["action"]}
            act = (got or {}).get("action") or {}
            out.append((f"{h} action {_action_text(w) if 'cause' in w else w['action']}", _action_text(act or None),
                        act.get("action") == w.get("action") and ("cause" not in w or act.get("cause") == w["cause"])))
    return out


def _extra_rows(expect: dict, folder: str, meta: dict, doc: dict, hv: dict,
                observed: dict) -> list[tuple[str, str, bool]]:
    """The rows of ``hosts``, ``summary``, ``one_card_per_gpu``, ``interrupted``, ``exit``, ``node_clean_s``."""
    out = _host_rows(expect, hv)
    if expect.get("summary"):
        try:
            with open(os.path.join(folder, "summary.md"), encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            text = ""
        missing = [w for w in expect["summary"] if w not in text]
        out.append(("summary.md holds " + "; ".join(f"'{w}'" for w in expect["summary"]),
                    "missing: " + "; ".join(missing) if missing else "all there", not missing))
    if "one_card_per_gpu" in expect:
        seen, ok = _cards(doc)
        out.append(("each GPU index one card run-wide" if expect["one_card_per_gpu"] else "cards mixed", seen,
                    ok == expect["one_card_per_gpu"]))
    if "interrupted" in expect:
        got = bool(meta.get("interrupted"))
        out.append((f"interrupted {str(expect['interrupted']).lower()}", f"interrupted {str(got).lower()}",
                    got == expect["interrupted"]))
    return out + _observed_rows(expect, observed)


def check_folder(scenario: str, run: str, expect: dict, folder: str, refs: dict[str, dict] | None = None,
                 observed: dict | None = None) -> list[Row]:
    """The rows of ``expect`` (a gpuaccept run's, module docstring) against the report ``folder``; ``refs``: the
    results.json documents of the scenarios named by ``of:``; ``observed``: what the runner saw of the run
    (:func:`_observed_rows`). A folder that cannot be read is one row that falls short, naming why (and the
    rows of ``exit`` and ``node_clean_s``, which need no folder)."""
    try:
        meta, recs = read_folder(folder)
        with open(os.path.join(folder, "results.json"), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        return [Row(scenario, run, "a report folder", f"unreadable: {e}"[:200], False)] + [
            Row(scenario, run, *r) for r in _observed_rows(expect, observed or {})]
    rows: list[Row] = []
    add = lambda e, s, ok: rows.append(Row(scenario, run, e, s, bool(ok)))  # noqa: E731
    hv = {h: v for h, v in host_verdicts(recs, meta.get("hosts") or None).items() if h != "fleet"}
    one = next(iter(hv.values())) if len(hv) == 1 else None
    if "verdict" in expect:
        seen = one["verdict"] if one else (",".join(f"{h}={v['verdict']}" for h, v in hv.items()) or "no host")
        add(f"host verdict {expect['verdict']}" if len(hv) < 2 else f"every host's verdict {expect['verdict']}",
            seen, bool(hv) and all(v["verdict"] == expect["verdict"] for v in hv.values()))
    if "action" in expect:
        want = expect["action"] if isinstance(expect["action"], dict) else {"action": expect["action"]}
        act = (one or {}).get("action") or {}
        ok = one is not None and act.get("action") == want.get("action") and (
            "cause" not in want or act.get("cause") == want["cause"])
        add(f"host action {_action_text(want) if 'cause' in want else want['action']}", _action_text(act or None), ok)
    if expect.get("never"):
        seen = sorted({a["action"] for a in [_record_action(r) for r in recs] + [v.get("action") for v in hv.values()]
                       if a and a.get("action") in expect["never"]})
        add(f"no action {'/'.join(expect['never'])}", ", ".join(seen) or "none of them", not seen)
    named = set((expect.get("tests") or {}))
    if expect.get("none"):
        bad = sorted(f"{r.name} {r.outcome}" for r in recs if r.outcome in expect["none"]
                     and r.name.split("[")[0] not in named)
        add(f"no other test {'/'.join(expect['none'])}", "; ".join(bad)[:200] or f"none ({len(recs)} tests)", not bad)
    for name, want in (expect.get("tests") or {}).items():
        e, s, ok = _check_test(name, want, recs)
        add(f"{name} {e}", s, ok)
    for check, want in (expect.get("figures") or {}).items():
        add(*_check_figure(check, want, doc, refs or {}))
    for e, s, ok in _extra_rows(expect, folder, meta, doc, hv, observed or {}):
        add(e, s, ok)
    if meta.get("interrupted") and not rows:
        add("a finished run", "interrupted", False)
    return rows


def check_command(scenario: str, run: str, expect: dict, rc: int | None, output: str) -> list[Row]:
    """The rows of a command run's ``expect`` (``exit``, ``output`` words) against its exit status ``rc`` (None:
    stopped at its timeout) and ``output``."""
    rows = []
    if "exit" in expect:
        rows.append(Row(scenario, run, f"exit status {expect['exit']}", "stopped at its timeout" if rc is None
                        else str(rc), rc == expect["exit"]))
    missing = [w for w in expect.get("output") or [] if w not in output]
    if expect.get("output"):
        rows.append(Row(scenario, run, "output holds " + "; ".join(f"'{w}'" for w in expect["output"]),
                        "missing: " + "; ".join(missing) if missing else f"all there ({len(output)} chars)",
                        not missing))
    return rows


def _dig(doc, dotted: str):
    for part in dotted.split("."):
        if isinstance(doc, dict):
            doc = doc.get(part)
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            return None
    return doc


def check_document(scenario: str, run: str, expect: dict, doc: dict | None) -> list[Row]:
    """The rows of a probe run's ``expect`` against its JSON document ``doc`` (None: it printed none)."""
    if doc is None:
        return [Row(scenario, run, "a probe document", "none printed", False)]
    rows = []
    if "failed" in expect:
        rows.append(Row(scenario, run, f"failed {expect['failed']}", f"failed {bool(doc.get('failed'))}: "
                        f"{str(doc.get('msg') or '')[:100]}", bool(doc.get("failed")) == bool(expect["failed"])))
    for key, want in (expect.get("document") or {}).items():
        v = _dig(doc, key)
        ok = True
        if "equals" in want:
            ok &= v == want["equals"]
        if "contains" in want:
            ok &= isinstance(v, str) and want["contains"] in v
        if "min" in want:
            ok &= isinstance(v, (int, float)) and v >= want["min"]
        if "max" in want:
            ok &= isinstance(v, (int, float)) and v <= want["max"]
        if "len_min" in want:
            ok &= isinstance(v, (list, dict)) and len(v) >= want["len_min"]
        shown = f"{len(v)} items" if isinstance(v, (list, dict)) and "len_min" in want else repr(v)[:100]
        rows.append(Row(scenario, run, f"{key} {json.dumps(want)}", shown, ok))
    return rows
