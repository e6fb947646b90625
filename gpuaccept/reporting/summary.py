"""``summary.md``, the page a person reads first (pure): one verdict line per host, the failing GPUs, a per-GPU
table (figures against limits), failures, stand-outs and peer outliers (gpuaccept.judging.standouts),
skipped checks grouped by reason, and the counts per host and layer.
"""
from __future__ import annotations

from gpuaccept.judging import verdict_order
from gpuaccept.reporting.gputable import GpuTable
from gpuaccept.reporting.junit import incomplete_of
from gpuaccept.reporting.records import CaseRecord, record_action
from gpuaccept.reporting.tally import RunTally
from gpuaccept.reporting.text import count_text, fmt, limit_text, names_text
from gpuaccept.reporting.verdicts import interruption_text
from gpuaccept.reporting.verdicts import (action_hosts, action_text, cause_key, failing_gpus_text, failure_groups,
                                         host_verdicts, line_text, reason_keys,
                                         same_reason_once, skip_groups, skip_who)

# summary.md's per-GPU table lists every GPU up to this many, else only the GPUs of hosts that did not pass
# (a page a person reads; results.json and report.html keep the rest). Chosen.
SUMMARY_MAX_GPU_ROWS = 1024

# above this many hosts the "Counts" table has a row per layer and counts (the hosts with those counts), not one
# per host and layer, and above SUMMARY_MAX_COUNT_ROWS such rows one per layer (its hosts summed): the host lines
# say each host's verdict already. Chosen.
SUMMARY_MAX_COUNT_HOSTS = 8
SUMMARY_MAX_COUNT_ROWS = 64

# lines of a message said under its cause in "Failures and errors" after its first line. Chosen (was per test).
SUMMARY_MESSAGE_LINES = 20
# of a fleet-wide test's longer message (a line per host), the lines said after its first; its causes are said by
# kind with their hosts instead. Chosen.
SUMMARY_FLEET_LINES = 5


def summary_markdown(run_id: str, meta: dict, recs: list[CaseRecord], slow: list[dict] | None = None,
                     hv: dict | None = None, table: GpuTable | None = None, tally: RunTally | None = None) -> str:
    """The human summary: one verdict line per host with its first reasons, a per-GPU table (figures
    against limits), failures, stand-outs and fleet outliers, then counts per host and layer. ``slow``: the
    stand-out and peer-outlier records (gpuaccept.judging.standouts); ``hv`` (:func:`host_verdicts` of
    ``recs``), ``table`` (the :class:`GpuTable` of their figures) and ``tally`` (the
    :class:`gpuaccept.reporting.tally.RunTally` of ``recs``): kept, when given. A run that has not finished
    (``meta["incomplete"]``, gpuaccept.reporting.reporter) says so in the page's first line, in bold, and its run
    line begins **INCOMPLETE**."""
    hosts = list(meta.get("hosts") or [])
    hv = hv if hv is not None else host_verdicts(recs, hosts)
    tally = tally if tally is not None else RunTally().add_all(recs)
    out = [f"# gpuaccept run {run_id}", "",
           f"inventory `{meta.get('inventory')}`, limit `{meta.get('limit') or 'all'}`, "
           f"profile `{meta.get('profile') or '-'}`, {count_text(len([h for h in hv if h != 'fleet']), 'host')}, {count_text(len(recs), 'test')}"
           + (f", gpuaccept {meta['gpuaccept_version']}" if meta.get("gpuaccept_version") else ""),
           ""]
    stop = interruption_text(meta)
    if stop:
        out[0:0] = [f"**INTERRUPTED** {stop}", ""]
    incomplete = incomplete_of(meta)
    if incomplete:  # before anything else: a reader (or a dashboard) of a run still going or killed sees it first
        out[0:0] = [f"**{incomplete}**", ""]
    keys = reason_keys(tally.bad)  # each host line's tests grouped by their cause, not by their words
    out += _host_lines(hv, "**INCOMPLETE** " if incomplete else "**INTERRUPTED** " if stop else "", tally.gpu_judged,
                       keys)
    lists = action_hosts(hv, hosts)
    out += _next_steps(hv, hosts, lists)
    out += ["", "## Node actions", ""] + [f"- repeating: {t}" for t in meta["repeating"]] if meta.get("repeating") else []
    out += _failing_gpus(hv)
    if meta.get("merge_notes"):  # gpuaccept.scaleout.merge: which run's records a host kept
        out += ["", "## Merged", ""] + [f"- {n}" for n in meta["merge_notes"]]
    out += _gpu_rows(hv, table if table is not None else GpuTable().add([f for r in recs for f in r.figures]))
    out += _unstable(tally.unstable)
    out += _failures(tally.bad, lists)
    out += _standouts(slow or [])
    out += _skipped(tally)
    out += _counts(tally.counts)
    out += ["", "Every figure: `results.json`; plots: `report.html`."]
    return "\n".join(out) + "\n"


def _host_lines(hv: dict, head: str = "", judged: int | None = None, keys: dict | None = None) -> list[str]:
    """The run line (``head``, e.g. INTERRUPTED, then the tally of host verdicts and ``judged``: how many GPU
    figures were judged), then one line per host in the one verdict order (FAIL, ERROR, PASS, SKIP; by name;
    gpuaccept.judging.verdict_order). ``keys``: :func:`gpuaccept.reporting.verdicts.reason_keys` of the run's
    failed and errored records (each host's tests joined by cause)."""
    tally: dict[str, int] = {}
    for h, v in hv.items():
        if h != "fleet":
            tally[v["verdict"]] = tally.get(v["verdict"], 0) + 1
    counted = " ".join(f"**{k}** {tally[k]}" for k in verdict_order.ORDER if k in tally)
    out = [head + (counted + (" host" if sum(tally.values()) == 1 else " hosts") if counted else "no host")
           + (f", {judged} GPU figures judged" if judged is not None else ""), ""]
    # the fleet-wide tests (no host in their id) are no host: their line comes after the hosts'
    for h in sorted(hv, key=lambda h: (h == "fleet", verdict_order.sort_key(hv[h]["verdict"], h))):
        out.append(host_line(h, hv[h], (keys or {}).get(h)))
    return out


def host_line(h: str, v: dict, keys: dict | None = None) -> str:
    """A host's verdict line of summary.md: verdict, name, first reasons, failing GPUs, for a FAIL whose fault
    blocked other tests "and N tests blocked", what to do next (gpuaccept.judging.actions) and the node shape
    judged (pure). ``keys``: the host's test name -> cause key (:func:`gpuaccept.reporting.verdicts.reason_keys`):
    the tests of one cause are one reason, said once, whatever their words."""
    reasons = v["reasons"]
    blocked = v.get("blocked", 0) if v["verdict"] == "FAIL" else 0
    if blocked:  # the proven fault is the reason; the tests it blocked are counted, not listed again
        reasons = [r for r in reasons if ": blocked by " not in r]
    grouped = same_reason_once(reasons, keys)
    text = "; ".join(grouped[:3]) + (f"; +{len(grouped) - 3} more" if len(grouped) > 3 else "")
    gpus = failing_gpus_text(v)
    act = action_text(v.get("action"))  # "drain-rma (why)": what to do next (gpuaccept.judging.actions)
    name = f"- fleet-wide tests: **{v['verdict']}**" if h == "fleet" else f"- **{v['verdict']}** `{h}`"
    return (name + (f": {text}" if text else "") + (f" — {gpus}" if gpus else "")
            + (f" — and {blocked} test{'s' if blocked != 1 else ''} blocked" if blocked else "")
            + (f" → **{act.split(' ', 1)[0]}** {act.split(' ', 1)[1]}" if act else "")
            + (f" — shape judged: {v['shape']}" if v.get("shape") else ""))


def _unstable(unstable: list[dict]) -> list[str]:
    """Figures outside their limit once and within it when measured again (gpuaccept.judging.confirm): those
    judged ``unstable``, in order."""
    if not unstable:
        return []
    out = ["", "## Unstable figures (outside the limit once, within it when measured again)", "",
           "| host | GPU | check | first | second | limit |", "|---|---|---|---|---|---|"]
    for f in unstable:
        again = ((f.get("extra") or {}).get("confirmation") or {}).get("value")
        out.append(f"| {f.get('host')} | {'' if f.get('gpu') is None else f['gpu']} | {f['check']} | "
                   f"{fmt(f.get('value'))} {f.get('unit') or ''} | {fmt(again)} {f.get('unit') or ''} | "
                   f"{limit_text(f.get('limit'))} |")
    return out


def _next_steps(hv: dict, hosts: list[str], lists: dict[str, list[str]] | None = None) -> list[str]:
    """The "Next steps" table: per action, strongest first, its hosts and the hosts-<action>.txt listing them.
    ``lists``: :func:`action_hosts` of ``hv``, when kept."""
    lists = {a: hs for a, hs in (lists if lists is not None else action_hosts(hv, hosts)).items() if hs}
    if not lists:
        return []
    out = ["", "## Next steps", "", "| action | hosts | list |", "|---|---|---|"]
    for a in reversed(list(lists)):
        hs = lists[a]
        out.append(f"| {a} | {len(hs)}: {', '.join(hs[:8])}{', ...' if len(hs) > 8 else ''} | `hosts-{a}.txt` |")
    return out


def _failing_gpus(hv: dict) -> list[str]:
    """The "Failing GPUs" table (at most :data:`SUMMARY_MAX_GPU_ROWS` rows), or nothing."""
    failing = [(h, g) for h in sorted(hv) for g in sorted((hv[h].get("gpus") or {}).values(), key=lambda g: str(g["gpu"]))]
    if not failing:
        return []
    out = ["", "## Failing GPUs", "", "| host | GPU | PCI bus id | serial | verdict | tests | why |",
           "|---|---|---|---|---|---|---|"]
    for h, g in failing[:SUMMARY_MAX_GPU_ROWS]:
        why = "; ".join(line_text(ln) for ln in g["lines"][:6]) + \
            (f"; +{len(g['lines']) - 6} more" if len(g["lines"]) > 6 else "")
        out.append(f"| {h} | {g['gpu']} | {g.get('pci_bus_id') or ''} | {g.get('serial') or ''} | FAIL | "
                   f"{', '.join(g['tests'])} | {why.replace('|', '/')} |")
    if len(failing) > SUMMARY_MAX_GPU_ROWS:
        out.append(f"\n{len(failing) - SUMMARY_MAX_GPU_ROWS} more failing GPUs: results.json has them.")
    return out


def _gpu_rows(hv: dict, table: GpuTable) -> list[str]:
    """The "GPUs" table: every GPU, or above :data:`SUMMARY_MAX_GPU_ROWS` the GPUs of hosts that did not pass."""
    left_out, total = 0, table.count()
    if total > SUMMARY_MAX_GPU_ROWS:  # a fleet: the GPUs of hosts that did not pass
        checks, rows = table.table({h for h, v in hv.items() if v["verdict"] != "PASS"})
        left_out = total - len(rows)
    else:
        checks, rows = table.table()
    if not rows and not left_out:
        return []
    out = ["", "## GPUs", ""] + ([f"{left_out} GPUs of passing hosts not listed (results.json has them).", ""]
                                 if left_out else []) + [
        "| host | GPU | PCI bus id | serial | " + " | ".join(checks) + " |",
        "|---|---|---|---|" + "---|" * len(checks)]
    for row in rows:
        cells = []
        for c in checks:
            f = row["cells"].get(c)
            cells.append("" if f is None else (f"**{fmt(f['value'])} ✗** ({limit_text(f.get('limit'))})"
                                               if f["verdict"] == "fail" else
                                               f"{fmt(f['value'])} ({limit_text(f.get('limit'))})"))
        out.append(f"| {row['host']} | {row['gpu']} | {row['pci_bus_id'] or ''} | {row['serial'] or ''} | "
                   + " | ".join(cells) + " |")
    return out


def _failures(bad: list[CaseRecord], lists: dict[str, list[str]] | None = None) -> list[str]:
    """The failed and errored tests (``bad``, in order) by cause (:func:`gpuaccept.reporting.verdicts.failure_groups`):
    each cause once, with its outcome, class and kind, its action, how many hosts and tests it hit and the first
    hosts (naming the hosts-<action>.txt that lists exactly them, ``lists``: :func:`action_hosts`), then its
    first test's message (first line, then up to :data:`SUMMARY_MESSAGE_LINES` more) and how many different
    messages it had once the host's name is taken out. A fleet-wide test is said on its own. The length grows
    with the causes, not with hosts x tests: each test's message is in results.json and report.html."""
    if not bad:
        return []
    groups = failure_groups(bad)
    out = ["", "## Failures and errors", "",
           f"{count_text(len(bad), 'test')} by cause, {len(groups)} entr{'y' if len(groups) == 1 else 'ies'}, each "
           "with its first test's message (every test's: `results.json`, `report.html`)", ""]
    by_hosts = {tuple(hs): a for a, hs in (lists or {}).items() if hs}
    for g in groups:
        r = g["first"]
        first, *rest = (r.message or r.outcome).splitlines() or [r.outcome]
        if not r.host:  # a fleet-wide test: its message names the hosts, each with its own line
            out.append(f"- **{r.outcome.upper()}** `{r.nodeid}`: {first}")
            out += _fleet_causes(r)
            keep = SUMMARY_MESSAGE_LINES if len(rest) <= SUMMARY_MESSAGE_LINES else SUMMARY_FLEET_LINES
            out += [f"  - {ln}" for ln in rest[:keep]]
            if len(rest) > keep:
                out.append(f"  - +{len(rest) - keep} more lines (`results.json`; each host's line above)")
            continue
        c = g["cause"] or {}
        act = record_action(r)
        what = f"{c.get('kind')} [{c.get('class')}" + (f", {c['check']}" if c.get("check") else "") + "]" \
            if c else "no cause recorded"
        test = g["key"][2] if c and g["key"][2] else None
        hs = g["hosts"]
        listed = by_hosts.get(tuple(hs))
        out.append(f"- **{r.outcome.upper()}** {what}" + (f" in {test}" if test else "")
                   + (f" → **{act['action']}** ({act.get('reason', '')})" if act else "")
                   + f": {count_text(len(hs), 'host')}, {count_text(g['tests'], 'test')}: {names_text(hs)}"
                   + (f" (list in `hosts-{listed}.txt`)" if listed and len(hs) > 1 else ""))
        shared = {far: fh for far, fh in g["across"].items() if len(fh) > 1}
        if shared:  # several hosts naming one server: that server's fault, said once
            others = len(hs) - sum(len(fh) for fh in shared.values())
            out.append("  - one cause outside these nodes: " + "; ".join(
                f"{far} named by {count_text(len(fh), 'host')}" for far, fh in
                sorted(shared.items(), key=lambda kv: -len(kv[1]))[:SUMMARY_MESSAGE_LINES])
                + (f" ({count_text(others, 'other host')} naming another or none)" if others > 0 else ""))
        out.append(f"  - first, `{r.nodeid}`: {first}")
        out += [f"    - {ln}" for ln in rest[:SUMMARY_MESSAGE_LINES]]
        if g["wordings"] > 1:
            out.append(f"  - {g['wordings']} different messages with the host's name taken out: each host's line "
                       "above gives its own")
    return out


def _fleet_causes(r: CaseRecord) -> list[str]:
    """A fleet-wide test's causes by :func:`gpuaccept.reporting.verdicts.cause_key`, with the hosts each is filed
    under, as one line (``[]`` when they name fewer than 2 hosts): ``"  - causes: host_key [connectivity] on 3 hosts
    (n1, n2, n3); ..."``."""
    by: dict[tuple, dict] = {}
    for c in r.causes or []:
        if isinstance(c, dict) and isinstance(c.get("host"), str):
            by.setdefault(cause_key(c), {})[c["host"]] = None
    if sum(len(hs) for hs in by.values()) < 2:
        return []
    return ["  - causes: " + "; ".join(
        f"{k[1]} [{k[0]}" + (f", {k[2]}" if k[2] else "") + f"] on {count_text(len(hs), 'host')} ({names_text(list(hs))})"
        for k, hs in by.items())]


def _standouts(slow: list[dict]) -> list[str]:
    """The stand-outs (against a reference of the same GPU) and the peer outliers (``against: "fleet"``)."""
    out = []
    stand = [o for o in slow if o.get("against") != "fleet"]
    fleet = [o for o in slow if o.get("against") == "fleet"]
    if stand:
        out += ["", "## Stand-outs (within limits, but slower than before or than peers)", "",
                "| host | check | GPU | serial | value | against | reference | worse by |",
                "|---|---|---|---|---|---|---|---|"]
        for o in sorted(stand, key=lambda o: (str(o["host"]), o["check"], str(o.get("gpu")))):
            out.append(f"| {o['host']} | {o['check']} | {'' if o.get('gpu') is None else o['gpu']} | "
                       f"{o.get('serial') or ''} | {fmt(o['value'])} {o.get('unit') or ''} | {o['against']} | "
                       f"{fmt(o['reference'])} | {o['pct']}% |")
    if fleet:
        out += ["", "## Fleet outliers (below the median of the same SKU and check)", "",
                "| host | check | GPU | SKU | value | fleet median | below by | MADs |", "|---|---|---|---|---|---|---|---|"]
        for o in fleet:
            out.append(f"| {o['host']} | {o['check']} | {'' if o.get('gpu') is None else o['gpu']} | "
                       f"{o.get('sku') or ''} | {fmt(o['value'])} {o.get('unit') or ''} | {fmt(o['reference'])} | "
                       f"{o['pct']}% | {o.get('mads', '')} |")
    return out


def _skipped(tally: RunTally) -> list[str]:
    """The documents replayed from other arguments (gpuaccept.runner.replay's notes), then the skipped tests
    grouped by reason across hosts and tests (gpuaccept.reporting.verdicts.skip_groups), with the hosts (first 8)."""
    out: list[str] = []
    replayed = tally.replayed
    if replayed:
        out += ["", "## Replayed from documents saved with other arguments", ""]
        for note, hs in replayed.items():
            out.append(f"- {note} ({len(hs)} host{'s' if len(hs) != 1 else ''}: {', '.join(hs[:8])}"
                       f"{', ...' if len(hs) > 8 else ''})")
    skips = skip_groups(tally.skipped)
    if skips:
        out += ["", "## Skipped", ""]
        for why, (hs, tests) in skips.items():
            names = [h for h in hs if h != "fleet"]
            listed = f" ({', '.join(names[:8])}{', ...' if len(names) > 8 else ''})" if names else ""
            out.append(f"- {why}: {skip_who(hs)}{listed}, {count_text(tests, 'test')}")
    return out


def _counts(counts: dict[tuple[str, str], dict[str, int]]) -> list[str]:
    """Outcomes per host and layer (``counts``: :attr:`RunTally.counts`). Above :data:`SUMMARY_MAX_COUNT_HOSTS`
    hosts, the hosts of a layer with the same counts share a row (``"212 hosts: gpu-0001, ..."``), and when that
    still leaves more than :data:`SUMMARY_MAX_COUNT_ROWS` rows, a layer's hosts are summed in one row."""
    outcomes = ("passed", "failed", "error", "skipped")
    hosts = {h for h, _ in counts if h != "fleet"}
    rows: list[tuple[str, str, dict]] = [(h, lay, c) for (h, lay), c in sorted(counts.items())]
    if len(hosts) > SUMMARY_MAX_COUNT_HOSTS:
        same: dict[tuple, list[str]] = {}
        for h, lay, c in rows:
            same.setdefault((lay, h == "fleet") + tuple(c.get(k, 0) for k in outcomes), []).append(h)
        if len(same) > SUMMARY_MAX_COUNT_ROWS:  # hosts that differ everywhere: each layer summed
            same = {}
            for h, lay, c in rows:
                key = (lay, h == "fleet")
                same.setdefault(key, []).append(h)
            summed = {k: [sum(counts[(h, k[0])].get(o, 0) for h in hs) for o in outcomes] for k, hs in same.items()}
            same = {k + tuple(summed[k]): hs for k, hs in same.items()}
        rows = [(hs[0] if len(hs) == 1 else f"{len(hs)} hosts: {names_text(hs, 3)}", k[0],
                 dict(zip(outcomes, k[2:]))) for k, hs in sorted(same.items(), key=lambda kv: (kv[0][1], kv[0][0]))]
    out = ["", "## Counts", "", "| host | layer | passed | failed | error | skipped |", "|---|---|---|---|---|---|"]
    for host, layer, c in rows:
        out.append(f"| {host} | {layer} | {c.get('passed', 0)} | {c.get('failed', 0)} | {c.get('error', 0)} "
                   f"| {c.get('skipped', 0)} |")
    return out
