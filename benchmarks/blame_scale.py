#!/usr/bin/env python3
"""Pairwise blame at scale, from the pure planner alone (gpuaccept.judging.multinode): how many rounds until
every bad host is named, by fleet size and number of bad hosts.

    python benchmarks/blame_scale.py [TRIALS]        # default 50 seeded trials per cell

A simulated pair passes when neither host is bad (a bad host drags its pair's busbw under the floor), as a
slow NIC or cable does. Rounds stop when no host is unresolved, or at 16. Prints the median and worst rounds,
and whether every bad host was named and no good host was (it never is: a host that passed once is good).
"""
from __future__ import annotations

import random
import statistics
import sys

from gpuaccept.judging.multinode import PairResult, next_pairs, pairwise_status, random_pairs

MAX_ROUNDS = 16


def trial(n: int, bad: int, seed: int) -> tuple[int, bool]:
    rng = random.Random(seed)
    hosts = [f"h{i:04d}" for i in range(n)]
    sick = set(rng.sample(hosts, bad))
    history: list[PairResult] = []
    pairs, _ = random_pairs(hosts, rng)
    for rnd in range(1, MAX_ROUNDS + 1):
        for a, b in pairs:
            ok = a not in sick and b not in sick
            history.append(PairResult(rnd, (a, b), 100.0 if ok else 10.0, ok, "" if ok else "slow"))
        st = pairwise_status(hosts, history)
        if not st["unresolved"]:
            return rnd, set(st["named"]) == sick
        pairs = next_pairs(hosts, history, rng)
    st = pairwise_status(hosts, history)
    return MAX_ROUNDS, set(st["named"]) == sick and not st["unresolved"]


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    print(f"pairwise blame, pure planner, {trials} seeded trials per cell")
    print("| hosts | bad | rounds (median) | rounds (worst) | all bad named, no good named |")
    print("|---|---|---|---|---|")
    for n in (64, 256, 1024):
        for bad in (1, 2, 8):
            got = [trial(n, bad, seed) for seed in range(trials)]
            rounds = [r for r, _ in got]
            exact = sum(ok for _, ok in got)
            print(f"| {n} | {bad} | {statistics.median(rounds):g} | {max(rounds)} | {exact}/{trials} |")


if __name__ == "__main__":
    main()
