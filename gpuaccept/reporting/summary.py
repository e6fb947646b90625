"""``summary.md``, the page a person reads first (pure): one verdict line per host, the failing GPUs, a per-GPU
table (figures against limits), failures, stand-outs and peer outliers (gpuaccept.judging.standouts),
skipped checks grouped by reason, and the counts per host and layer.
"""
from __future__ import annotations

from gpuaccept.judging import verdict_order
from gpuaccept.reporting.gputable import GpuTable
from gpuaccept.reporting.junit import incomplete_of
from gpuaccept.reporting.records import CaseRecord
from gpuaccept.reporting.tally import RunTally
from gpuaccept.reporting.text import count_text, fmt, limit_text
from gpuaccept.reporting.verdicts import interruption_text
from gpuaccept.reporting.verdicts import (action_hosts, action_text, failing_gpus_text,
                                         host_verdicts, line_text, same_reason_once, skip_groups,
                                         skip_who)

# summary.md's per-GPU table lists every GPU up to this many, else only the GPUs of hosts that did not pass
# (a page a person reads; results.json and report.html keep the rest). Chosen.
SUMMARY_MAX_GPU_ROWS = 1024


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
           f"profile `{meta.get('profile') or '-'}`, {count_text(len([h for h in hv if h != 'fleet']), 'host')}, {count_text(len(recs), 'test')}",
           ""]
    stop = interruption_text(meta)
    if stop:
        out[0:0] = [f"**INTERRUPTED** {stop}", ""]
    incomplete = incomplete_of(meta)
    if incomplete:  # before anything else: a reader (or a dashboard) of a run still going or killed sees it first
        out[0:0] = [f"**{incomplete}**", ""]
    out += _host_lines(hv, "**INCOMPLETE** " if incomplete else "**INTERRUPTED** " if stop else "", tally.gpu_judged)
    out += _next_steps(hv, hosts)
    out += ["", "## Slurm", ""] + [f"- repeating: {t}" for t in meta["repeating"]] if meta.get("repeating") else []
    out += _failing_gpus(hv)
    if meta.get("merge_notes"):  # gpuaccept.scaleout.merge: which run's records a host kept
        out += ["", "## Merged", ""] + [f"- {n}" for n in meta["merge_notes"]]
    out += _gpu_rows(hv, table if table is not None else GpuTable().add([f for r in recs for f in r.figures]))
    out += _unstable(tally.unstable)
    out += _failures(tally.bad)
    out += _standouts(slow or [])
    out += _skipped(tally)
    out += _counts(tally.counts)
    out += ["", "Every figure: `results.json`; plots: `report.html`."]
    return "\n".join(out) + "\n"


def _host_lines(hv: dict, head: str = "", judged: int | None = None) -> list[str]:
    """The run line (``head``, e.g. INTERRUPTED, then the tally of host verdicts and ``judged``: how many GPU
    figures were judged), then one line per host in the one verdict order (FAIL, ERROR, PASS, SKIP; by name;
    gpuaccept.judging.verdict_order)."""
    tally: dict[str, int] = {}
    for h, v in hv.items():
        if h != "fleet":
            tally[v["verdict"]] = tally.get(v["verdict"], 0) + 1
    out = [head + " ".join(f"**{k}** {tally[k]}" for k in verdict_order.ORDER if k in tally) + (
        " host" if sum(tally.values()) == 1 else " hosts")
           + (f", {judged} GPU figures judged" if judged is not None else ""), ""]
    # the fleet-wide tests (no host in their id) are no host: their line comes after the hosts'
    for h in sorted(hv, key=lambda h: (h == "fleet", verdict_order.sort_key(hv[h]["verdict"], h))):
        out.append(host_line(h, hv[h]))
    return out


def host_line(h: str, v: dict) -> str:
    """A host's verdict line of summary.md: verdict, name, first reasons, failing GPUs, for a FAIL whose fault
    blocked other tests "and N tests blocked", what to do next (gpuaccept.judging.actions) and the node shape
    judged (pure)."""
    reasons = v["reasons"]
    blocked = v.get("blocked", 0) if v["verdict"] == "FAIL" else 0
    if blocked:  # the proven fault is the reason; the tests it blocked are counted, not listed again
        reasons = [r for r in reasons if ": blocked by " not in r]
    grouped = same_reason_once(reasons)
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


def _next_steps(hv: dict, hosts: list[str]) -> list[str]:
    """The "Next steps" table: per action, strongest first, its hosts and the hosts-<action>.txt listing them."""
    lists = {a: hs for a, hs in action_hosts(hv, hosts).items() if hs}
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


def _failures(bad: list[CaseRecord]) -> list[str]:
    """Each failed or errored test (``bad``, in order) with its message (first line, then up to 20 more)."""
    if not bad:
        return []
    out = ["", "## Failures and errors", ""]
    for r in bad:
        first, *rest = (r.message or r.outcome).splitlines() or [r.outcome]
        out.append(f"- **{r.outcome.upper()}** `{r.nodeid}`: {first}")
        out += [f"  - {ln}" for ln in rest[:20]]
    return out


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
    """Outcomes per host and layer (``counts``: :attr:`RunTally.counts`)."""
    out = ["", "## Counts", "", "| host | layer | passed | failed | error | skipped |", "|---|---|---|---|---|---|"]
    for (host, layer), c in sorted(counts.items()):
        out.append(f"| {host} | {layer} | {c.get('passed', 0)} | {c.get('failed', 0)} | {c.get('error', 0)} "
                   f"| {c.get('skipped', 0)} |")
    return out
