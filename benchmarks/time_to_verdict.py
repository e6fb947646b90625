#!/usr/bin/env python3
"""Time to verdict: per profile, a run's wall seconds and each probe's node-side seconds, with the peers' figures
beside the product's, so that a change is measured the same way each time.

    python benchmarks/time_to_verdict.py [--inventory INV] [--profiles quick,standard] [-m MARKERS] [--rounds N]
        [--peer NAME=FILE ...] [--peer-cmd NAME=COMMAND ...] [-- PYTEST ARGS]

For each profile and round it runs ``python -m pytest --profile P -m MARKERS --inventory INV`` from the
repository (a whole process, timed from outside: the operator's wall clock), then reads the probe documents the
run kept (``<reports>/probes/<host>/*.json``): each carries ``timing`` (HostRunner.probe_now: ``started`` and
``ended`` on the controller's clock, ``node_s``: the probe's seconds as the node's agent timed them, from fork to
exit). Printed per profile: wall seconds (min and median of the rounds), the controller's seconds before the
first probe starts and after the last one ends, and per probe the node-side seconds
(summed over the run's hosts, median of the rounds) and the controller's span for it. The product's figures are
read from each round's results.json (the best over hosts and GPUs of each check; every round printed, the median
of the rounds over the peer's figure per profile); the peers' from their own output,
given as a file or as a command run here (its wall seconds printed too):

- ``babelstream``: BabelStream's table (``Function MBytes/sec ...``, also GBytes/MiBytes/GiBytes) or its
  ``--csv`` output; Copy and Dot beside ``hbm_copy_bw_gbps`` and ``hbm_read_bw_gbps`` (GB/s = 1e9 B/s).
- ``mamf-bf16`` / ``mamf-fp8``: mamf-finder's closing ``median:`` and ``max:`` TFLOP/s beside ``bf16_tflops`` /
  ``fp8_tflops`` (a median of sustained products: like with like is mamf-finder's median; its max is its best
  single product).
- ``nccl-tests``: all_reduce_perf's table: the in-place busbw at the largest size beside
  ``allreduce_busbw_gbps``.

Each run gets an operator's shell: PYTHONDONTWRITEBYTECODE (set in some images and CI sandboxes, the GPU
machine's among them) is removed from its environment, so the controller's modules are compiled once and their
bytecode (and pytest's rewritten test modules) kept, as on an operator's machine; with it set, a checkout
compiles its ~700 modules at every run (about 1 s of an H200 machine's quick run, 2026-12-05).

On this machine (no GPU) the default inventory (inventory/localhost.ini, the controller itself) takes the CPU
path: the GPU tests skip after gpu_inventory and the wall and node seconds are those of the probes that ran; on
a GPU node the same command measures the GPU probes. Exit status 0, or 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the layers compared with the peers (matmul, PCIe, HBM, launch overhead, GDS, health)
DEFAULT_MARKERS = "health or memory or compute or gpudirect"
#: peer -> [(its figure, the product's check)] (each peer's figure beside the check it compares with)
PAIRS = {"babelstream": [("Copy", "hbm_copy_bw_gbps"), ("Dot", "hbm_read_bw_gbps")],
         "mamf-bf16": [("median", "bf16_tflops"), ("max", "bf16_tflops")],
         "mamf-fp8": [("median", "fp8_tflops"), ("max", "fp8_tflops")],
         "nccl-tests": [("busbw", "allreduce_busbw_gbps")]}
#: BabelStream's rate units, by their prefix as its table header or CSV column names them (``MBytes/sec``,
#: ``max_mbytes_per_sec`` in 4.x and 5.x; ``GB/s``, ``max_GB_per_sec`` in 6.x; --mibibytes: the binary ones)
#: -> bytes per unit
_RATE = {"mbytes": 1e6, "mb": 1e6, "gbytes": 1e9, "gb": 1e9,
         "mibytes": 2 ** 20, "mib": 2 ** 20, "gibytes": 2 ** 30, "gib": 2 ** 30}


def _rate_scale(unit: str) -> float | None:
    """Bytes per unit of a BabelStream rate unit (``GB/s``, ``MBytes/sec``, ``max_GB_per_sec``...), or None."""
    u = unit.lower().removeprefix("max_")
    for tail in ("_per_sec", "/sec", "/s"):
        u = u.removesuffix(tail)
    return _RATE.get(u)


def parse_babelstream(text: str) -> dict[str, float]:
    """BabelStream's output -> {function: GB/s (1e9)}, the best (max) rate of each kernel: its table (header
    ``Function <unit> Min (sec) ...``) or its ``--csv`` lines (header ``function,...,max_<unit>_per_sec,...``),
    the units of :data:`_RATE`, as versions 4 to 6 print them. Empty when neither is there."""
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("function,"):
            rows = csv.DictReader(io.StringIO("\n".join(lines[i:])))
            col = next((c for c in rows.fieldnames or [] if c.lower().startswith("max_") and _rate_scale(c)), None)
            if col is None:
                return {}
            out = {}
            for r in rows:
                try:
                    out[r["function"].capitalize()] = float(r[col]) * _rate_scale(col) / 1e9
                except (TypeError, ValueError):
                    continue
            return out
    out, scale = {}, None
    for ln in lines:
        words = ln.split()
        if words[:1] == ["Function"] and len(words) > 1:
            scale = _rate_scale(words[1])
        elif scale and len(words) >= 2 and re.fullmatch(r"[\d.]+", words[1]):
            out[words[0]] = float(words[1]) * scale / 1e9
    return out


def parse_mamf(text: str) -> dict[str, float]:
    """mamf-finder's output -> {"mean", "median", "max": TFLOP/s}: its closing lines ``mean:   N TFLOPS @ ...``,
    ``median: ...``, ``max: ...`` (the best over the shapes tried of each statistic of the per-product times;
    versions since January 2025), or ``max`` alone from an older version's "The best outcome was N TFLOPS";
    empty when the run printed neither (interrupted before its end)."""
    out = {k: float(v) for k, v in re.findall(r"^(mean|median|max):\s+([\d.]+) TFLOPS", text, re.M)}
    if not out:
        m = re.search(r"best outcome was\s*([\d.]+)\s*TFLOPS", text)
        out = {"max": float(m.group(1))} if m else {}
    return out


def parse_nccl_tests(text: str) -> dict[str, float]:
    """all_reduce_perf's output -> {"busbw": in-place busbw GB/s at the largest size, "avg_busbw": its "Avg bus
    bandwidth"}; rows are ``size count type redop root time algbw busbw #wrong time algbw busbw #wrong``."""
    out, largest = {}, -1
    for ln in text.splitlines():
        w = ln.split()
        if len(w) >= 13 and w[0].isdigit() and w[1].isdigit():
            try:
                if int(w[0]) >= largest:
                    largest, out["busbw"] = int(w[0]), float(w[11])
            except ValueError:
                continue
        m = re.search(r"Avg bus bandwidth\s*:\s*([\d.]+)", ln)
        if m:
            out["avg_busbw"] = float(m.group(1))
    return out


PARSERS = {"babelstream": parse_babelstream, "mamf-bf16": parse_mamf, "mamf-fp8": parse_mamf,
           "nccl-tests": parse_nccl_tests}


def probe_seconds(reports: Path) -> dict[str, dict[str, float]]:
    """{probe: {"node_s": summed over hosts and runs, "span_s": the controller's (ended - started) summed, "n"}}
    from the documents kept under ``reports/probes/<host>/`` (those without ``timing``, from before it was kept,
    are counted with 0 s)."""
    out: dict[str, dict[str, float]] = {}
    for f in sorted(reports.glob("probes/*/*.json")):
        try:
            kept = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        t = kept.get("timing") or {}
        row = out.setdefault(kept.get("probe", f.stem), {"node_s": 0.0, "span_s": 0.0, "n": 0})
        row["node_s"] += float(t.get("node_s") or 0)
        row["span_s"] += float(t.get("ended") or 0) - float(t.get("started") or 0)
        row["n"] += 1
    return out


def phases(reports: Path, started: float, ended: float) -> tuple[float, float] | None:
    """(seconds from the process's start to the first probe's start, seconds from the last probe's end to the
    process's exit), both on the controller's clock (``time.time()``; the documents' ``timing``); None when no
    document has timing."""
    spans = []
    for f in reports.glob("probes/*/*.json"):
        try:
            t = json.loads(f.read_text()).get("timing") or {}
        except (OSError, ValueError):
            continue
        if t.get("started") and t.get("ended"):
            spans.append((float(t["started"]), float(t["ended"])))
    if not spans:
        return None
    return min(a for a, _ in spans) - started, ended - max(b for _, b in spans)


def product_figures(reports: Path) -> dict[str, float]:
    """{check: best value} of the numeric figures in ``reports/results.json`` (the best over hosts and GPUs)."""
    try:
        doc = json.loads((reports / "results.json").read_text())
    except (OSError, ValueError):
        return {}
    best: dict[str, float] = {}
    for t in doc.get("tests", []):
        for f in t.get("figures", []):
            v = f.get("value")
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                best[f["check"]] = max(v, best.get(f["check"], v))
    return best


def figure_table(peer_figs: dict[str, dict[str, float]], figures: dict[str, list[dict[str, float]]],
                 profiles: list[str]) -> list[str]:
    """The markdown lines of the product's figures beside the peers' (pure): per profile every round's figure
    (``figures``: {profile: [{check: value} per round with a verdict]}) and the median of the rounds over the
    peer's figure. A pair with neither a peer figure nor a product figure is left out."""
    lines = ["## figures: product (best over hosts and GPUs, each round) beside the peers'",
             "| peer | peer figure | peer value | product check | "
             + " | ".join(f"{p} | {p} / peer" for p in profiles) + " |",
             "|---|---|---|---|" + "---|---|" * len(profiles)]
    for peer, pairs in PAIRS.items():
        for fig, check in pairs:
            pv = (peer_figs.get(peer) or {}).get(fig)
            mine = {p: [r[check] for r in figures.get(p, []) if r.get(check) is not None] for p in profiles}
            if pv is None and not any(mine.values()):
                continue
            cells = []
            for p in profiles:
                vals = mine[p]
                cells.append(", ".join(f"{v:.1f}" for v in vals) or "-")
                cells.append(f"{statistics.median(vals) / pv:.3f}x" if pv and vals else "-")
            lines.append(f"| {peer} | {fig} | {'-' if pv is None else f'{pv:.1f}'} | {check} | "
                         + " | ".join(cells) + " |")
    return lines


def run_profile(profile: str, inventory: str, markers: str, extra: list[str], work: Path, i: int) -> tuple:
    """One run: ``(wall s, rc, its reports folder, (s before the first probe, s after the last) or None)``."""
    rep = work / f"{profile}-{i}"
    # -c: the checkout's pytest.ini (its addopts load the plugin) whatever folder --reports names: pytest takes the
    # rootdir from the paths on the command line before it knows --reports takes one
    cmd = [sys.executable, "-m", "pytest", "-c", str(REPO / "pytest.ini"), "-q", "-p", "no:cacheprovider",
           "--inventory", inventory,
           "--profile", profile, "-m", markers, "--reports", str(rep), *extra]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # an operator's shell
    t0, w0 = time.perf_counter(), time.time()
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    wall, w1 = time.perf_counter() - t0, time.time()
    if res.returncode not in (0, 1):
        print(f"# {profile} run {i}: rc {res.returncode}: {(res.stdout + res.stderr)[-600:]}", file=sys.stderr)
    return wall, res.returncode, rep, phases(rep, w0, w1)


def peers(files: list[str], commands: list[str]) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """({peer: figures}, {peer: wall s of its command}) from ``NAME=FILE`` and ``NAME=COMMAND`` arguments.
    Raises SystemExit(2) for an unknown name or an unreadable file."""
    figs, walls = {}, {}
    for spec, is_cmd in [(s, False) for s in files] + [(s, True) for s in commands]:
        name, _, what = spec.partition("=")
        if name not in PARSERS or not what:
            raise SystemExit(f"--peer{'-cmd' if is_cmd else ''} {spec!r}: NAME=... with NAME one of "
                             f"{', '.join(PARSERS)}")
        if is_cmd:
            t0 = time.perf_counter()
            res = subprocess.run(what, shell=True, capture_output=True, text=True)
            walls[name] = time.perf_counter() - t0
            text = res.stdout + res.stderr
        else:
            try:
                text = Path(what).read_text(errors="replace")
            except OSError as e:
                raise SystemExit(f"--peer {spec}: {e.strerror or e}")
        figs[name] = PARSERS[name](text)
    return figs, walls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inventory", default=str(REPO / "inventory" / "localhost.ini"))
    ap.add_argument("--profiles", default="quick,standard")
    ap.add_argument("-m", dest="markers", default=DEFAULT_MARKERS)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--peer", action="append", default=[], metavar="NAME=FILE")
    ap.add_argument("--peer-cmd", action="append", default=[], metavar="NAME=COMMAND")
    ap.add_argument("--keep", help="keep the runs' report folders here (default: a temporary folder, removed)")
    ap.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments (e.g. --known-hosts FILE)")
    a = ap.parse_args(argv)
    profiles = [p for p in a.profiles.split(",") if p]
    peer_figs, peer_walls = peers(a.peer, a.peer_cmd)
    with tempfile.TemporaryDirectory(prefix="ttv-") as tmp:
        if a.keep:  # a folder of its own under --keep: a run refuses a report folder that holds an earlier run
            Path(a.keep).mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix="ttv-", dir=a.keep))
        else:
            work = Path(tmp)
        print(f"time to verdict: inventory {a.inventory}, -m {shlex.quote(a.markers)}, {a.rounds} round(s)")
        figures: dict[str, list[dict[str, float]]] = {}
        for prof in profiles:
            runs = [run_profile(prof, a.inventory, a.markers, a.pytest_args, work, i) for i in range(a.rounds)]
            every = ", ".join(f"{w:.2f} s (rc {rc})" for w, rc, _, _ in runs)
            runs = [r for r in runs if r[1] in (0, 1)]  # a verdict (pass or fail); a refused or broken run is none
            if not runs:
                print(f"\n## --profile {prof}: no round reached a verdict: {every}")
                continue
            walls = [w for w, _, _, _ in runs]
            per = [probe_seconds(rep) for _, _, rep, _ in runs]
            figures[prof] = [product_figures(rep) for _, _, rep, _ in runs]
            print(f"\n## --profile {prof}: wall {min(walls):.2f} s min, {statistics.median(walls):.2f} s median "
                  f"of the {len(runs)} round(s) with a verdict; each round: {every}")
            ends = [ph for _, _, _, ph in runs if ph]
            if ends:
                print(f"controller: {statistics.median(b for b, _ in ends):.2f} s from the start to the first probe, "
                      f"{statistics.median(a for _, a in ends):.2f} s from the last probe to the exit (median)")
            print("| probe | runs per round | node s (sum over hosts, median) | controller span s (median) |\n"
                  "|---|---|---|---|")
            names = sorted({p for d in per for p in d}, key=lambda p: -statistics.median(
                d.get(p, {}).get("node_s", 0.0) for d in per))
            for p in names:
                med = lambda k: statistics.median(d.get(p, {}).get(k, 0.0) for d in per)  # noqa: E731
                print(f"| {p} | {med('n'):g} | {med('node_s'):.2f} | {med('span_s'):.2f} |")
            print(f"| (all probes) | | {sum(statistics.median(d.get(p, {}).get('node_s', 0.0) for d in per) for p in names):.2f} | |")
        print("\n" + "\n".join(figure_table(peer_figs, figures, profiles)))
        for peer, w in peer_walls.items():
            print(f"{peer}: its command took {w:.2f} s wall")
        if not peer_figs:
            print("(no peer given: --peer NAME=FILE or --peer-cmd NAME=COMMAND, NAME one of "
                  f"{', '.join(PARSERS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
