"""Verdicts per host and per GPU from a run's records (pure): :func:`host_verdicts` (kept up to date record by
record in :class:`HostVerdicts`), the failing GPUs of a host (:func:`failing_gpus_text`), a host's reasons
with one cause said once (:func:`same_reason_once`, by the structured cause keys of :func:`reason_keys`), the
failed and errored tests grouped by cause across hosts (:func:`failure_groups`), the hosts failed-hosts.txt lists (:func:`failed_hosts`), and
each host's action (gpuaccept.judging.actions): said in a line (:func:`action_text`), listed per action
(:func:`action_hosts`, the hosts-<action>.txt files).
"""
from __future__ import annotations

import re

from gpuaccept.judging import actions, verdict_order
from gpuaccept.reporting.records import CaseRecord, record_action, case_name
from gpuaccept.reporting.text import count_text, fmt, gpu_text, limit_text


def _fleet_hosts_named(message: str, hosts: list[str], known: set | None = None) -> list[str]:
    """Hosts of the run named at the start of a line of a fleet-wide test's message (``"gpu-07: ..."``,
    the form every verdict message takes). ``known``: ``set(hosts)``, when kept."""
    known = set(hosts) if known is None else known
    out = []
    for ln in message.splitlines():
        m = re.match(r"\s*-?\s*([^\s:]+)[\s:]", ln)
        if m and m.group(1) in known and m.group(1) not in out:
            out.append(m.group(1))
    return out


#: how a test that did not finish reads (gpuaccept.plugin.reports: "not finished: run interrupted", "not run: ...";
#: an interrupted test: gpuaccept.runner.interrupt "interrupted (SIGTERM) while running on ...")
_UNFINISHED = re.compile(r"^(not finished: |not run: )|interrupted \(SIG[A-Z]+\)")


def unfinished(message: str, causes: list[dict] | None = None) -> bool:
    """True when a test did not finish (interrupted, never run, its worker died): one of its ``causes`` is of
    class ``interruption``; a record written before causes (``causes`` None): its message says so."""
    if causes is not None:
        return any(isinstance(c, dict) and c.get("class") == "interruption" for c in causes)
    return bool(_UNFINISHED.search(message or ""))


#: cause kinds of a test whose figures were kept but not judged (gpuaccept.judging.recorder.outcome)
KEPT_NOT_JUDGED = frozenset({"blocked", "disturbed", "host_busy"})


def _kinds(r: CaseRecord) -> set:
    """The cause kinds of record ``r``; for a record written before causes, read from its message's head."""
    if r.causes is not None:
        return {c.get("kind") for c in r.causes if isinstance(c, dict)}
    m = r.message or ""
    return {"blocked"} if m.startswith("blocked by ") else {"disturbed"} if m.startswith("disturbed: ") else set()


def host_verdicts(recs: list[CaseRecord], hosts: list[str] | None = None) -> dict[str, dict]:
    """Per host: ``{"verdict": PASS|FAIL|ERROR|SKIP, "reasons": [str], "counts": {outcome: n}, "action": dict |
    None, "findings": [action dict]}`` (pure): ``action`` the strongest of its findings'
    (gpuaccept.judging.actions.host_action), None when nothing failed or errored.

    The one verdict order (gpuaccept.judging.verdict_order): FAIL when any of its tests failed (a proven
    fault; the tests it blocked are counted in ``blocked``, "and N tests blocked"), else ERROR when any
    errored (not measured, with its cause), else PASS when any passed, else SKIP. ``shape``: the node shape
    its gpu_inventory test recorded (gpuaccept.judging.shape). A fleet-wide test that did not finish (an
    interrupted run) counts as an error of every selected host. Fleet-wide tests (no host in the id) count against the hosts their
    failure entries are filed under and their failure lines name, for the hosts with a figure in them when they passed (a host whose ranks took part in a
    passing inter-node all-reduce passed it), and appear under ``"fleet"`` too. Reasons: the first line of each failed/errored
    test's message, failing figures first (check, GPU, value vs limit); ``first_by_action``: for each action, the first
    reason of a test whose findings took that action (the line a drain or cordon quotes). See :class:`HostVerdicts`.
    """
    hv = HostVerdicts(hosts)
    for r in recs:
        hv.add(r)
    return hv.result()


def run_verdict(hv: dict[str, dict | str]) -> str:
    """The run's one verdict (pure) from its host verdicts ``hv`` (host -> verdict dict or word): the strongest
    host's in the verdict order (FAIL > ERROR > PASS > SKIP, gpuaccept.judging.verdict_order), the fleet
    pseudo-host counting only when it failed or errored; SKIP for none. The console's run line, the history's
    run row and a merge's run row all read it."""
    words = {h: (v["verdict"] if isinstance(v, dict) else v) for h, v in hv.items()}
    return verdict_order.strongest([w for h, w in words.items() if h != "fleet" or w in verdict_order.NOT_PASSED])


def judged_something(r: CaseRecord) -> bool:
    """Whether a passed test judged anything (pure): a figure against a limit (verdict pass, fail or unstable),
    or no figure at all (an operator's own ``assert``, testinfra-style, is the judgement). A test that only
    recorded figures (a CPU all-reduce's busbw with no SKU to judge it by, storage throughput without
    ``storage_limits``, the NCCL variables seen) judged nothing: its host is not PASS by it alone."""
    return not r.figures or any(f.get("verdict") in ("pass", "fail", "unstable") for f in r.figures)


def recorded_count(r: CaseRecord, host: str | None = None) -> int:
    """How many figures of record ``r`` were recorded without a limit (verdict ``recorded``; pure); ``host``: of a
    fleet-wide test, only that host's."""
    return sum(1 for f in r.figures if f.get("verdict") == "recorded" and (
        r.host is not None or host is None or f.get("host") == host))


def is_gpu_judged(f: dict) -> bool:
    """Whether figure ``f`` is a GPU's, judged against a limit (pass or fail) (pure)."""
    return f.get("gpu") is not None and f.get("verdict") in ("pass", "fail")


def gpu_figures_judged(recs: list[CaseRecord]) -> int:
    """How many figures of a GPU were judged against a limit in ``recs`` (:func:`is_gpu_judged`, pure)."""
    return sum(1 for r in recs for f in r.figures if is_gpu_judged(f))


def skip_reason(host: str | None, message: str) -> str:
    """A skip's reason with its host taken out, so that one reason groups across hosts (pure):
    ``"no NVIDIA GPU on gpu-07 (no driver)"`` -> ``"no NVIDIA GPU (no driver)"``; ``"no NVMe on gpu-07"`` ->
    ``"no NVMe"``; another mention of the host becomes ``<host>``."""
    why = " ".join(str(message or "skipped").split())
    if why.startswith("Skipped: "):
        why = why[len("Skipped: "):]
    if host:
        why = re.sub(rf"\s+(?:on|for) {re.escape(host)}(?![\w.-])", "", why)
        why = re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w.-])", "<host>", why)
    return why


def skip_groups(recs: list[CaseRecord]) -> dict[str, tuple[list[str], int]]:
    """Skipped tests grouped by reason across hosts and tests (pure): reason -> (hosts in order, tests), the
    reasons most hosts share first (``"no NVMe": (212 hosts, 212 tests)``). A reason of one host names it where
    it mentions it (:func:`skip_reason`'s ``<host>``: ``"gpu-07: no ib_write_bw loopback ran"``)."""
    groups: dict[str, tuple[list[str], list[int]]] = {}
    for r in recs:
        if r.outcome != "skipped":
            continue
        hs, n = groups.setdefault(skip_reason(r.host, r.message), ([], [0]))
        if (r.host or "fleet") not in hs:
            hs.append(r.host or "fleet")
        n[0] += 1
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1][0]), -kv[1][1][0]))
    out: dict[str, tuple[list[str], int]] = {}
    for why, (hs, n) in ordered:
        named = why.replace("<host>", hs[0]) if len(hs) == 1 and hs[0] != "fleet" else why
        out[named if named not in groups and named not in out else why] = (hs, n[0])
    return out


def skip_who(hs: list[str]) -> str:
    """Whom a :func:`skip_groups` entry's skips hit, for a reader (pure): ``"3 hosts"``, ``"1 host"``, ``"the
    fleet-wide tests"`` or ``"2 hosts and the fleet-wide tests"`` ("fleet" is no host)."""
    n = len([h for h in hs if h != "fleet"])
    who = [count_text(n, "host")] if n else []
    return " and ".join(who + (["the fleet-wide tests"] if "fleet" in hs else []))


#: the reason of a host whose passed tests judged nothing (its verdict SKIP, not PASS); :func:`nothing_judged`
NOTHING_MEASURED = "none judged against a limit"


def nothing_judged(recorded: int) -> str:
    """The reason of a host whose passed tests judged no figure: ``"2 figures recorded, none judged against a
    limit: the selected tests have no limit for them (limits come from a SKU threshold file: gpu_sku or an
    NVML-detected GPU; storage_limits; the inventory's own)"``: which of these applied is not known here (a
    selection of tests that only record, such as -k xid, says the same on a host whose SKU file applied)."""
    return (f"{count_text(recorded, 'figure')} recorded, {NOTHING_MEASURED}: the selected tests have no limit for "
            f"them (limits come from a SKU threshold file: gpu_sku or an NVML-detected GPU; storage_limits; the "
            f"inventory's own)")


class HostVerdicts:
    """:func:`host_verdicts` kept up to date record by record (:meth:`add`: O(the record), :meth:`result`:
    O(hosts)), so that a whole-run write does not walk every record again."""

    def __init__(self, hosts: list[str] | None = None):
        self.names = list(hosts or [])
        self.known = set(self.names)
        self.out: dict[str, dict] = {h: {"verdict": "SKIP", "reasons": [], "counts": {}} for h in self.names}
        self.seen: dict[str, set] = {}  # host -> GPU indices with a figure (how many GPUs the host showed)
        self.judged: dict[str, int] = {}  # host -> its passed tests that judged something (judged_something)
        self.recorded: dict[str, int] = {}  # host -> figures its passed tests recorded without a limit
        self.gpu_judged = 0  # figures of a GPU judged against a limit (pass or fail), the whole run
        self.elsewhere: list[tuple[set, str]] = []  # fleet-wide failures: (hosts filed, the reason for the others)

    def add(self, r: CaseRecord) -> None:
        """Count record ``r`` for its host (a fleet-wide test: for ``fleet`` and the hosts it names or that took
        part), with its reasons and the GPUs its failure lines name."""
        targets = [r.host] if r.host else ["fleet"]
        if not r.host and r.outcome == "error" and unfinished(r.message, r.causes):  # every host it held was cut off
            targets += [h for h in self.names if h not in targets]
        elif not r.host and r.outcome in ("failed", "error"):
            # a fleet-wide test blames only the hosts it proves something about (:func:`filed_hosts`)
            targets += filed_hosts(r, self.names, self.known)
            self.elsewhere.append((set(targets), elsewhere_text(r, targets[1:])))
        elif not r.host and r.outcome == "passed":  # the hosts that took part (a figure of theirs) passed it
            targets += sorted({f.get("host") for f in r.figures if f.get("host") in self.known})
        for e in r.failures:  # the GPUs that failed, by the GPU each failure line names
            h = e.get("host") if e.get("host") in self.known or r.host is None else r.host
            if h is None or e.get("gpu") is None:
                continue
            v = self.out.get(h)
            if v is None:
                v = self.out[h] = {"verdict": "SKIP", "reasons": [], "counts": {}}
            gpus = v.setdefault("gpus", {})
            g = gpus.setdefault(e["gpu"], {"gpu": e["gpu"], "pci_bus_id": None, "serial": None, "tests": [],
                                           "lines": []})
            g["pci_bus_id"] = g["pci_bus_id"] or e.get("pci_bus_id")
            g["serial"] = g["serial"] or e.get("serial")
            if r.name.split("[")[0] not in g["tests"]:
                g["tests"].append(r.name.split("[")[0])
            g["lines"].append(e["line"])
        self.gpu_judged += sum(1 for f in r.figures if f.get("gpu") is not None and f.get("verdict") in ("pass", "fail"))
        if r.outcome == "passed" and judged_something(r):
            for h in targets:
                self.judged[h] = self.judged.get(h, 0) + 1
        elif r.outcome == "passed":
            for h in targets:
                self.recorded[h] = self.recorded.get(h, 0) + recorded_count(r, h)
        if r.host is not None:
            seen = self.seen.setdefault(r.host, set())
            for f in r.figures:
                if f.get("gpu") is not None:
                    seen.add(f["gpu"])
                elif f.get("check") == "node_shape" and isinstance(f.get("value"), str):
                    self.out.setdefault(r.host, {"verdict": "SKIP", "reasons": [], "counts": {}})["shape"] = f["value"]
        act = record_action(r) if r.outcome in ("failed", "error") else None
        for h in targets:
            v = self.out.get(h)
            if v is None:
                v = self.out[h] = {"verdict": "SKIP", "reasons": [], "counts": {}}
            v["counts"][r.outcome] = v["counts"].get(r.outcome, 0) + 1
            kinds = _kinds(r) if r.outcome == "error" else set()
            if "blocked" in kinds:
                v["blocked"] = v.get("blocked", 0) + 1
            if act is not None:  # this host's own findings in a fleet-wide test, else the record's
                mine = []
                filed_fleet = r.host is None and h == "fleet" and len(targets) > 1  # findings filed under hosts
                if r.host is None and h != "fleet":
                    mine = _entry_actions(r, (h,)) + actions.cause_actions(r.causes, host=h)
                elif filed_fleet:  # the fleet line: its own findings only, never a filed host's
                    mine = _entry_actions(r, (None, "fleet")) + actions.cause_actions(
                        [c for c in r.causes or [] if isinstance(c, dict) and c.get("host") not in self.known])
                elif r.outcome == "failed":  # each failure entry with its GPU: a setting answers for its GPU only
                    mine = _entry_actions(r, (h, None))
                if mine or not filed_fleet:
                    v.setdefault("findings", []).extend(mine or [act])
            said = len(v["reasons"])
            if r.outcome in ("failed", "error"):
                figs = [f for f in r.figures if f.get("verdict") == "fail" and f.get("host") in (h, "fleet", None)]
                if kinds & KEPT_NOT_JUDGED:
                    figs = []  # kept figures of a blocked test are no reason: the blocker is (verdicts.outcome)
                for f in figs[:3]:
                    v["reasons"].append(f"{r.layer}/{f['check']}{gpu_text(f)}: {fmt(f['value'])} {f.get('unit') or ''} "
                                        f"vs {limit_text(f.get('limit'))}".replace("  ", " "))
                first = (r.message or r.outcome).splitlines()[0] if (r.message or "").strip() else r.outcome
                if not r.host and h != "fleet":  # a fleet-wide test: the line about this host, not another's
                    first = next((e["line"].splitlines()[0] for e in r.failures if e.get("host") == h and e.get("line")),
                                 None) or next((ln for ln in (r.message or "").splitlines()
                                                if _fleet_hosts_named(ln, [h])), first)
                if not figs:
                    v["reasons"].append(f"{r.name.split('[')[0]}: {first}")
            if act is not None and len(v["reasons"]) > said:  # the first reason of each action, for its drain line
                best = actions.strongest(mine or [act]) or act
                v.setdefault("first_by_action", {}).setdefault(best.get("action"), v["reasons"][said])

    def result(self) -> dict[str, dict]:
        """The verdicts so far, as :func:`host_verdicts` returns them (the same dict, updated in place)."""
        for v in self.out.values():
            v["verdict"] = verdict_order.from_counts(v["counts"])
            v["action"] = actions.host_action(v.get("findings") or [])
        for h, v in self.out.items():
            # the reason belongs to a SKIP only: result() runs again as records arrive, and a host that read
            # SKIP so far may fail later
            v["reasons"] = [x for x in v["reasons"] if NOTHING_MEASURED not in x]
            if v["verdict"] == "PASS" and not self.judged.get(h):
                v["verdict"] = "SKIP"  # nothing judged is not PASS: a pass that judged nothing leaves SKIP
                v["reasons"].append(nothing_judged(self.recorded.get(h, 0)))
            if v["verdict"] == "SKIP" and h != "fleet":  # why the fleet-wide tests it took part in judged it not
                v["reasons"] = [x for x in v["reasons"] if not x.startswith(ELSEWHERE)] + \
                    [why for filed, why in self.elsewhere if h not in filed and h in self.known]
            if v.get("gpus"):  # how many GPUs the host showed (a figure of theirs), when any did
                seen = self.seen.get(h, set())
                v["gpus_seen"] = len(seen | set(v["gpus"])) if seen else None
        return self.out


#: the head of a SKIP host's reason naming a fleet-wide test that failed or errored on another host's account
ELSEWHERE = "not judged by fleet-wide "


def elsewhere_text(r: CaseRecord, filed: list[str]) -> str:
    """The reason a host of the run that a failed or errored fleet-wide record does not blame reads while its
    verdict is SKIP (pure): ``"not judged by fleet-wide test_allreduce_multinode (ERROR filed under u2): u2:
    unreachable: ..."``, or ``"... (FAIL, no host singled out): ..."`` when the record names none of the run's
    hosts (``filed``: those it is filed under, :func:`filed_hosts`). The test judged no figure of this host, and
    found no fault of it either."""
    word = "FAIL" if r.outcome == "failed" else "ERROR"
    under = f" filed under {', '.join(filed[:5])}{f', +{len(filed) - 5} more' if len(filed) > 5 else ''}" if filed \
        else ", no host singled out"
    first = next((ln for ln in (r.message or "").splitlines() if ln.strip()), r.outcome)
    return f"{ELSEWHERE}{r.name.split('[')[0]} ({word}{under}): {first}"


def _entry_actions(r: CaseRecord, hosts: tuple) -> list[dict]:
    """The action of each failure entry of ``r`` filed under one of ``hosts``, with its GPU
    (gpuaccept.judging.actions.with_gpu: a setting answers for the figures of its own GPU only)."""
    return [actions.with_gpu(actions.entry_action(r.name, e), e) for e in r.failures or []
            if isinstance(e, dict) and e.get("host") in hosts]


def gpu_name(g: dict) -> str:
    """``"GPU 1 (00000000:00:07.0, serial 1650000000002)"`` of a failing-GPU entry of :func:`host_verdicts`."""
    parts = [p for p in (g.get("pci_bus_id"), f"serial {g['serial']}" if g.get("serial") else None) if p]
    return f"GPU {g['gpu']}" + (f" ({', '.join(parts)})" if parts else "")


def failing_gpus_text(v: dict) -> str:
    """The GPUs a host failed on, for its verdict line (pure): ``"1 of 8 GPUs failing: GPU 3 (0000:19:00.0,
    serial 1650...)"``; ``""`` when no failure line names a GPU (a node figure: the node at large)."""
    gpus = sorted((v.get("gpus") or {}).values(), key=lambda g: str(g["gpu"]))
    if not gpus:
        return ""
    of = f" of {v['gpus_seen']}" if v.get("gpus_seen") else ""
    return f"{len(gpus)}{of} GPU{'s' if len(gpus) > 1 or of else ''} failing: " + ", ".join(gpu_name(g) for g in gpus[:16]) + \
        (f", +{len(gpus) - 16} more" if len(gpus) > 16 else "")


def line_text(line: str) -> str:
    """A failure line without its ``host GPU i (bus, serial): `` head (the GPU verdict row names the GPU)."""
    head, sep, rest = line.partition("): ")
    return rest if sep and " GPU " in head else line


def same_reason_once(reasons: list[str], keys: dict[str, object] | None = None) -> list[str]:
    """A host's reasons with the tests that stopped for one same cause joined (pure): an unknown host key or an
    unreachable host makes every test of the host an ERROR with the same message, which read three times over
    before "+9 more". ``["test_a: box1: unreachable", "test_b: box1: unreachable"]`` ->
    ``["test_a and 1 more test: box1: unreachable"]``; other reasons are kept as they are, in order.

    ``keys`` (:func:`reason_keys`, one host's): test name -> the structured key of the test's cause on that host.
    A test with a key joins the first test of the same key whatever its words ("written off ..., not tried
    again this run: <the cause>", a fleet-wide test's "<host>: unreachable: <the cause>"): the first test's
    words are said, "and N more tests of the same cause" when the words of the others differ. A test without
    one (a record written before causes) joins only a test of the same words."""
    keys = keys or {}
    groups: dict[tuple, list] = {}  # grouping key -> [first words, test names, every test's words the same]
    out: list = []  # the groups (lists) and the reasons kept as they are, in first-seen order
    for r in reasons:
        name, sep, why = r.partition(": ")
        if not (sep and name.startswith("test_") and " " not in name):  # a figure's line, not a test's message
            out.append(r)
            continue
        gk = ("cause", keys[name]) if keys.get(name) is not None else ("words", why)
        g = groups.get(gk)
        if g is None:
            g = groups[gk] = [why, [], True]
            out.append(g)
        g[1].append(name)
        g[2] = g[2] and why == g[0]
    return [x if isinstance(x, str) else
            x[1][0] + (f" and {len(x[1]) - 1} more test{'s' if len(x[1]) > 2 else ''}" if len(x[1]) > 1 else "")
            + ("" if x[2] else " of the same cause") + f": {x[0]}" for x in out]


def first_cause(r: CaseRecord, host: str | None = None) -> dict | None:
    """The cause of record ``r`` about ``host`` that its action follows (pure): of a host's own test, among its
    causes naming that host or none, the one whose class and kind are its action's (a test both disturbed by a
    busy host and short of space reads free-space, and is that cause's). Else, of a failed test, whose findings'
    causes sit on its failure entries: the cause of the entry whose action is the strongest, or, for an entry
    without one, its action's class and kind with the entry's check. Else its first cause (of a fleet-wide test,
    the first filed under ``host``; ``host`` None: its first). None for a record without causes (passed,
    skipped, written before causes)."""
    mine = [c for c in r.causes or [] if isinstance(c, dict)
            and (host is None or c.get("host") == host or (r.host is not None and c.get("host") is None))]
    act = r.action if r.host is not None and isinstance(r.action, dict) else {}
    driving = next((c for c in mine if (c.get("class"), c.get("kind")) == (act.get("cause"), act.get("kind"))), None)
    if driving is not None:
        return driving
    if r.outcome == "failed" and r.causes is not None:  # a failure's findings carry their causes on their entries
        entries = [e for e in r.failures or [] if isinstance(e, dict) and isinstance(e.get("action"), dict)
                   and (host is None or e.get("host") in (host, None))]
        best = actions.strongest([e["action"] for e in entries])
        e = next((e for e in entries if e["action"] is best), None)
        if e is not None:
            if isinstance(e.get("cause"), dict):
                return e["cause"]
            return {"class": best.get("cause"), "kind": best.get("kind") or e.get("check"), "check": None,
                    "host": e.get("host")}
    return mine[0] if mine else None


def cause_key(c: dict | None) -> tuple | None:
    """The structured key a cause groups by (pure): ``(class, kind, check)``; None for no cause. Words are never
    read: two tests whose causes have one key failed for one reason, whatever their messages say."""
    if not isinstance(c, dict):
        return None
    return (c.get("class"), c.get("kind"), c.get("check"))


def reason_keys(bad: list[CaseRecord]) -> dict[str, dict[str, tuple]]:
    """Per host (``"fleet"`` for the fleet-wide tests), its failed and errored tests' names (as
    :class:`HostVerdicts` names them in its reasons) -> the :func:`cause_key` of each test's first cause about
    that host: what :func:`same_reason_once` groups a host line's reasons by (pure). A name two tests of a host
    share with different keys is left out (those join by their words)."""
    out: dict[str, dict[str, tuple | None]] = {}
    for r in bad:
        name = r.name.split("[")[0]
        if r.host:
            pairs = [(r.host, cause_key(first_cause(r, r.host)))]
        else:
            pairs = [("fleet", cause_key(first_cause(r)))] + [
                (c["host"], cause_key(c)) for c in r.causes or [] if isinstance(c, dict) and isinstance(c.get("host"), str)]
        for h, k in pairs:
            m = out.setdefault(h, {})
            if k is None or (name in m and m[name] != k):
                m[name] = None
            else:
                m.setdefault(name, k)
    return {h: {n: k for n, k in m.items() if k is not None} for h, m in out.items()}


#: evidence keys of a connectivity cause that name one thing across the network that several hosts can share (the
#: filesystem server the kernel log names: gpuaccept.judging.host netfs findings). Not "address": a name that does
#: not resolve carries the host's own address there
ACROSS_KEYS = ("server",)


def across(c: dict | None) -> str | None:
    """What a connectivity cause ``c`` names across the network, as ``"server 10.0.0.5"`` (the first of
    :data:`ACROSS_KEYS` its evidence holds), or None (another class, or no such evidence). Pure."""
    if not isinstance(c, dict) or c.get("class") != "connectivity" or not isinstance(c.get("evidence"), dict):
        return None
    return next((f"{k} {c['evidence'][k]}" for k in ACROSS_KEYS if c["evidence"].get(k)), None)


def failure_groups(bad: list[CaseRecord]) -> list[dict]:
    """Failed and errored tests grouped by cause (pure), failed groups first, each in order of its first test:
    ``{"outcome", "key", "cause", "hosts": [host, in order], "tests": n, "first": the first record, "records":
    [record] (a fleet-wide test's own entry only), "wordings": n}``.

    A host's test joins the tests, of any host, whose first cause has the same :func:`cause_key` and outcome
    (an unknown host key on 150 hosts x 12 tests is one group); a failed test, or a ``tool`` cause (a crash, a
    timeout: the test matters), also by test name; a record written before causes, by its message's first
    line with its host taken out (:func:`skip_reason`). A fleet-wide test (no host) is its own entry.
    ``wordings``: how many different first lines the group's messages have once the host's name is taken
    out (a host key's fingerprint, an address make one per host). ``across``: {what the hosts' connectivity
    causes name across the network (:func:`across`): [host]}, so that 12 hosts naming one filesystem server read
    as that server's, not as 12 nodes' faults."""
    groups: dict[tuple, dict] = {}
    words: dict[tuple, set] = {}
    for i, r in enumerate(bad):
        first = ((r.message or r.outcome).strip().splitlines() or [r.outcome])[0]
        c = first_cause(r, r.host) if r.host else None
        if not r.host:
            key: tuple = ("fleet", i)
        elif c is None:
            key = (r.outcome, None, skip_reason(r.host, first))
        else:
            test = r.name.split("[")[0] if r.outcome == "failed" or c.get("class") == "tool" else None
            key = (r.outcome, cause_key(c), test)
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"outcome": r.outcome, "key": key, "cause": c, "hosts": {}, "tests": 0, "first": r,
                               "records": [] if r.host else [r], "wordings": 0}
            words[key] = set()
        g["tests"] += 1
        if r.host:
            g["hosts"][r.host] = None
            if (far := across(c)) is not None:
                g.setdefault("across", {}).setdefault(far, {})[r.host] = None
        words[key].add(first.replace(r.host, "\0") if r.host else first)
    for k, g in groups.items():
        g["hosts"] = list(g["hosts"])
        g["wordings"] = len(words[k])
        g["across"] = {far: list(hs) for far, hs in (g.get("across") or {}).items()}
    return sorted(groups.values(), key=lambda g: g["outcome"] != "failed")


def action_text(act: dict | None) -> str:
    """A host's or record's action for a line a person reads (pure), with the class of its cause:
    ``"drain-rma [hardware] (row remapping failure: ...)"``, with a fix-config's setting and command: ``"fix-config
    [configuration] (power limit ...; enforced power limit: `nvidia-smi -i 0000:19:00.0 -pl 700`)"``; ``""``
    without one."""
    if not act:
        return ""
    how = "; ".join(p for p in (act.get("setting"), f"`{act['command']}`" if act.get("command") else None) if p)
    cls = f" [{act['cause']}]" if act.get("cause") else ""
    return f"{act['action']}{cls} ({act.get('reason', '')}{'; ' + how if how else ''})"


def _selection_order(hv: dict, hosts: list[str] | None) -> list[str]:
    """The selection's hosts in order, then any other host of ``hv`` by name ("fleet" is no host). O(hosts)."""
    listed = set(hosts or ())
    return list(hosts or []) + sorted(h for h in hv if h not in listed and h != "fleet")


def action_hosts(hv: dict, hosts: list[str] | None = None) -> dict[str, list[str]]:
    """Per action name (every one, weakest first): the hosts whose action it is, in selection order, as
    ``hosts-<action>.txt`` lists them (pure). ``hv``: :func:`host_verdicts`. "fleet" is no host."""
    order = _selection_order(hv, hosts)
    out: dict[str, list[str]] = {a: [] for a in actions.strength()}
    for h in order:
        act = (hv.get(h) or {}).get("action") if h != "fleet" else None
        if act and act.get("action") in out:
            out[act["action"]].append(h)
    return out


def failed_hosts(recs: list[CaseRecord], hosts: list[str] | None = None, hv: dict | None = None) -> list[str]:
    """Hosts (of the run's inventory selection) with a failure or an error, in selection order (pure), and every
    host of the run when a fleet-wide test failed or errored without filing its finding under any host (an
    all-reduce over them below its floor, no rank, pair or rail singled out): the test can only be repeated, or
    its culprit located, over all of them. ``hv``: :func:`host_verdicts` of the same records when already
    computed."""
    hv = hv if hv is not None else host_verdicts(recs, hosts)
    order = _selection_order(hv, hosts)
    known = set(hosts or [])
    if known and any(r.host is None and r.outcome in ("failed", "error") and not filed_hosts(r, hosts, known)
                     for r in recs):
        return [h for h in order if h != "fleet"]
    return [h for h in order if h in hv and h != "fleet" and hv[h]["verdict"] in verdict_order.NOT_PASSED]


def filed_hosts(r: CaseRecord, names: list[str], known: set) -> list[str]:
    """The hosts (of ``known``; ``names`` in selection order) a failed or errored fleet-wide record is counted
    against, each once (pure): those its failure entries and causes are filed under, and for a record written
    before causes those its message names (cut to its last 4,000 characters, so it alone can miss hosts).
    :class:`HostVerdicts` and :func:`failed_hosts` both read it."""
    filed = [e.get("host") for e in r.failures if e.get("host") in known] + \
        [c.get("host") for c in r.causes or [] if isinstance(c, dict) and c.get("host") in known]
    named = _fleet_hosts_named(r.message or "", names, known) if r.causes is None else []
    return list(dict.fromkeys(filed + named))


#: the comment failed-hosts.txt carries for each fleet-wide test that failed, with the hosts it ran on
#: (gpuaccept.config.limitfile.fleet_tests reads it back: a rerun of fewer hosts cannot repeat that test)
FLEET_LINE = "# fleet-wide {test} did not pass on: {hosts}"


def failed_hosts_text(recs: list[CaseRecord], hosts: list[str] | None = None, hv: dict | None = None) -> str:
    """failed-hosts.txt: the :func:`failed_hosts`, one a line, then a :data:`FLEET_LINE` comment per
    fleet-wide test that failed or errored, naming the selection it ran on (its partners). Pure."""
    bad = failed_hosts(recs, hosts, hv)
    return "".join(h + "\n" for h in bad) + (fleet_lines(recs, hosts) if bad else "")


def fleet_lines(recs: list[CaseRecord], hosts: list[str] | None) -> str:
    """The :data:`FLEET_LINE` comment of each fleet-wide test of ``recs`` that failed or errored, naming the hosts
    it ran on (pure), as failed-hosts.txt carries them: a rerun of fewer hosts from it, or from a hosts-<action>.txt
    beside it, cannot pass a comparison it does not repeat (gpuaccept.config.limitfile.fleet_tests). The hosts it
    ran on: where its figures name hosts of the selection ``hosts`` (an all-reduce's per-host figures: a replayed
    host that could not take part has none), those and the hosts its findings are filed under; else the whole
    selection."""
    out, known = [], set(hosts or [])
    for r in recs:
        if r.host is None and r.outcome in ("failed", "error") and hosts:
            took = {f.get("host") for f in r.figures} & known
            if took:
                took |= set(filed_hosts(r, hosts, known))
            out.append(FLEET_LINE.format(test=r.name.split("[")[0],
                                         hosts=" ".join([h for h in hosts if h in took] or hosts)) + "\n")
    return "".join(out)


def interruption_text(meta: dict) -> str:
    """``"by SIGTERM at 2026-12-01 23:40:02 UTC while running test_allreduce_multinode; 3 tests not finished"``
    from the run's ``meta["interruption"]`` (gpuaccept.plugin.reports), or ``""`` for a run that finished."""
    import time
    i = meta.get("interruption")
    if not isinstance(i, dict):
        return "by an interruption (the run did not finish)" if meta.get("interrupted") else ""
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(i["at"])) if isinstance(i.get("at"), (int, float)) else "?"
    running = [case_name(n) for n in i.get("running") or []]
    what = (f" while running {', '.join(running[:4])}{', ...' if len(running) > 4 else ''}" if running
            else " between tests")
    left = i.get("unfinished")
    return f"by {i.get('signal') or 'a signal'} at {at}{what}" + (
        f"; {left} test{'' if left == 1 else 's'} not finished" if left else "")

