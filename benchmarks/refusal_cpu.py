"""CPU time of a refusal and of ``--list-hosts``: what an operator waits for before a bad input's one line.

    python benchmarks/refusal_cpu.py                      # this checkout, 5 rounds
    python benchmarks/refusal_cpu.py --tree /work/main    # another checkout (before/after), same cases
    python benchmarks/refusal_cpu.py --hosts 10 10000

Each case is a fresh process, run two ways: ``python -m pytest ...`` and the ``gpuaccept`` command
(``python -m gpuaccept.cli ...``, whose check runs before pytest is imported; "n/a" in a tree without it), in a temporary project (pytest.ini,
conftest.py and suites/ of the tree, an inventory of N local hosts), with PYTHONPATH set to the tree; its CPU time (user + system, of the
process and its children, from ``resource.getrusage(RUSAGE_CHILDREN)``) is taken per round. Cases: a mistyped
inventory var (exit 4), an unknown ``--limit`` term (exit 4), a bad ``--probe-timeout`` (exit 4), a threshold
file with a mistyped check (exit 4), ``--list-hosts`` (exit 0), and ``import gpuaccept.plugin`` alone. Prints
one table: median and best CPU seconds over the rounds, and the exit code seen. The target: <= 0.5 s for the
refusals and for ``--list-hosts`` of 10 hosts, on the 2-core development machine, and linear to 10,000 hosts.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def project(tree: Path, base: Path, n_hosts: int) -> Path:
    """A project in ``base`` laid out like the checkout ``tree``, with an inventory of ``n_hosts`` local hosts."""
    base.mkdir(parents=True, exist_ok=True)
    for name in ("pytest.ini", "conftest.py"):
        shutil.copy(tree / name, base / name)
    shutil.copytree(tree / "suites", base / "suites", dirs_exist_ok=True)
    shutil.copytree((tree / "thresholds").resolve(), base / "thresholds", dirs_exist_ok=True)
    (base / "hosts.ini").write_text("[gpu]\n" + "".join(f"n{i:05d} ansible_connection=local\n"
                                                       for i in range(n_hosts)))
    (base / "typo.ini").write_text("[gpu]\nn1 ansible_connection=local gpus_per_nodes=8\n")
    bad = base / "badthresholds"
    shutil.copytree(base / "thresholds", bad, dirs_exist_ok=True)
    f = bad / "h200-sxm-141gb.yaml"
    f.write_text(f.read_text().replace("hbm_read_bw_gbps:", "hbm_raed_bw_gbps:"))
    return base


def cpu_of(cmd: list[str], cwd: Path, env: dict) -> tuple[float, int]:
    """CPU seconds (user + system) of ``cmd`` run to its end, and its exit code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", default=str(ROOT), help="checkout to measure (default: this one)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--hosts", type=int, nargs="+", default=[10, 10000], help="inventory sizes for --list-hosts")
    a = ap.parse_args()
    tree = Path(a.tree).resolve()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    has_cli = (tree / "gpuaccept" / "cli.py").exists()
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for n in a.hosts:
            base = project(tree, Path(tmp) / f"p{n}", n)
            cases = [(f"--list-hosts, {n} hosts", ["--inventory", "hosts.ini", "--list-hosts"])]
            if n == a.hosts[0]:
                cases = [("refuse: mistyped inventory var", ["--inventory", "typo.ini"]),
                         ("refuse: --limit term names nothing", ["--inventory", "hosts.ini", "--limit", "ghost"]),
                         ("refuse: --probe-timeout -1", ["--inventory", "hosts.ini", "--probe-timeout", "-1"]),
                         ("refuse: mistyped threshold check", ["--inventory", "hosts.ini", "--thresholds",
                                                               "badthresholds"])] + cases
                rows.append(("import gpuaccept.plugin",
                             _measure([sys.executable, "-c", "import gpuaccept.plugin"], base, env, a.rounds), None))
            for label, args in cases:
                rows.append((label, _measure([sys.executable, "-m", "pytest", *args], base, env, a.rounds),
                             _measure([sys.executable, "-m", "gpuaccept.cli", *args], base, env, a.rounds)
                             if has_cli else None))
    print(f"tree {tree}, {a.rounds} rounds, CPU seconds (user + system) of a fresh process, median (best) [exit]")
    print(f"{'case':38} {'python -m pytest':>24} {'gpuaccept':>24}")
    for label, py, cli in rows:
        print(f"{label:38} {_cell(py):>24} {_cell(cli):>24}")


def _measure(cmd: list[str], cwd: Path, env: dict, rounds: int) -> tuple[float, float, int]:
    """(median, best) CPU seconds of ``cmd`` over ``rounds`` runs after a warm-up one, and its last exit code."""
    cpu_of(cmd, cwd, env)  # warm-up: the page cache
    got = [cpu_of(cmd, cwd, env) for _ in range(rounds)]
    secs = [c for c, _ in got]
    return statistics.median(secs), min(secs), got[-1][1]


def _cell(m: tuple[float, float, int] | None) -> str:
    return "n/a" if m is None else f"{m[0]:.3f} ({m[1]:.3f}) [{m[2]}]"


if __name__ == "__main__":
    main()
