"""The GPU scenarios' runner: ``python -m benchmarks.scenarios [NAME ...] [--peers DIR] [--out DIR] [--list]``.

Run on the GPU machine from the repository root. Without names it runs every scenario not marked ``optional``
(benchmarks/scenarios/*.yaml), in name order, each after the scenarios its figures are compared with; names
run those (optional ones too). Reports go to ``--out`` (default ``$OUT``, else reports/scenarios), one folder per
scenario. It prints one table, scenario | run | expected | seen | holds / falls short / not run, and exits 1 when
one falls short, 0 otherwise; 4 (one line, nothing run) for an unknown name or a malformed scenario file; 130 when
interrupted (every load and run it started stopped by its process group first).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from benchmarks.scenarios.execute import gpu_count, machine_sku, on_sku, run_scenario
from benchmarks.scenarios.expect import Row
from benchmarks.scenarios.loads import ROOT
from benchmarks.scenarios.spec import Scenario, ScenarioError, load_dir

HERE = os.path.dirname(os.path.abspath(__file__))
WIDTHS = (28, 8, 60, 70)


def select(scenarios: list[Scenario], names: list[str]) -> list[Scenario]:
    """The scenarios to run, in order: ``names`` (all non-optional ones when empty), each preceded by the
    scenarios it compares figures with. Raises ScenarioError naming an unknown scenario."""
    by_name = {s.name: s for s in scenarios}
    for n in names:
        if n not in by_name:
            raise ScenarioError(f"{n}: no such scenario (known: {', '.join(sorted(by_name))})")
    chosen = [by_name[n] for n in names] if names else [s for s in scenarios if not s.optional]
    out: list[Scenario] = []

    def add(s: Scenario, seen: tuple = ()) -> None:
        for ref in s.references():
            if ref not in by_name:
                raise ScenarioError(f"{s.path}: figures.of: {ref!r} is no scenario")
            if ref not in seen and by_name[ref] not in out:
                add(by_name[ref], seen + (s.name,))
        if s not in out:
            out.append(s)
    for s in chosen:
        add(s)
    return out


def cell(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 1] + "…"


def table(rows: list[Row]) -> str:
    """The runner's table: one line per expectation."""
    head = ("scenario", "run", "expected", "seen")
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, WIDTHS)) + "  result"]
    for r in rows:
        word = "not run" if r.holds is None else "holds" if r.holds else "FALLS SHORT"
        lines.append("  ".join(cell(c, w).ljust(w) for c, w in zip((r.scenario, r.run, r.expected, r.seen), WIDTHS))
                     + "  " + word)
    return "\n".join(lines)


def _on_term(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """The runner (module docstring); returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scenarios", description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", metavar="NAME", help="scenarios to run (default: every non-optional one)")
    ap.add_argument("--peers", metavar="DIR", help="the peers' sources: babelstream/, mamf-finder.py, nccl-tests/")
    ap.add_argument("--out", metavar="DIR", help="where the reports go (default $OUT, else reports/scenarios)")
    ap.add_argument("--list", action="store_true", help="list the scenarios and what each proves, run nothing")
    ap.add_argument("--scenarios", metavar="DIR", default=HERE, help="the folder of scenario files")
    ap.add_argument("--gpus", type=int, default=None, help="GPUs to count (default: nvidia-smi -L)")
    ap.add_argument("--sku", help="the machine's gpuaccept SKU (default: detected from GPU 0 by the thresholds' "
                    "detect blocks); scenarios declaring another gpu_sku are run on it")
    a = ap.parse_args(argv)
    try:
        chosen = select(load_dir(a.scenarios), a.names)
    except ScenarioError as e:
        print(f"benchmarks.scenarios: {e}", file=sys.stderr)
        return 4
    if a.list:
        for s in chosen if a.names else load_dir(a.scenarios):
            print(f"{s.name:28} {s.gpus} GPU{'s' if s.gpus != 1 else ' '} {'optional' if s.optional else '        '} "
                  f"{s.claim}")
        return 0
    out = os.path.abspath(a.out or os.environ.get("OUT") or os.path.join(ROOT, "reports", "scenarios"))
    os.makedirs(out, exist_ok=True)
    n = gpu_count() if a.gpus is None else a.gpus
    sku = a.sku or (machine_sku() if n else None)
    print(f"# {len(chosen)} scenario(s) on {n} GPU(s) of SKU {sku or 'unknown'}, reports under {out}", flush=True)
    signal.signal(signal.SIGTERM, _on_term)
    rows: list[Row] = []
    refs: dict[str, dict] = {}
    try:
        for s in chosen:
            t = time.monotonic()
            got = run_scenario(on_sku(s, sku), out, n, refs, a.peers)
            rows += got
            verdict = "not run" if all(r.holds is None for r in got) else \
                "holds" if all(r.holds is not False for r in got) else "FALLS SHORT"
            print(f"# {s.name}: {verdict} ({time.monotonic() - t:.0f} s)", flush=True)
    except KeyboardInterrupt:
        print(table(rows))
        print("# interrupted: every load and run started was stopped", file=sys.stderr)
        return 130
    print(table(rows))
    short = [r for r in rows if r.holds is False]
    print(f"# {len(rows) - len(short)} of {len(rows)} expectations hold or were not run; {len(short)} fall short")
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())
