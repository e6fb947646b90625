"""The argument parser of gpuaccept's ``python -m gpuaccept...`` module commands (merge, drain, slurm, k8s, ...).

argparse's own refusal prints the whole usage and an error, then exits 2; gpuaccept's rule for bad operator
input is one line and exit 4 before anything is touched (docs/merge.md, docs/kubernetes.md). ``--help`` still
prints the help and exits 0 (argparse's own action, untouched here).
"""
from __future__ import annotations

import argparse
import sys

__all__ = ["EXIT_BAD_INPUT", "OneLineParser"]

#: exit code of bad operator input, the same as the gpuaccept command's (README "Exit codes")
EXIT_BAD_INPUT = 4


class OneLineParser(argparse.ArgumentParser):
    """argparse whose refusal (a missing or unknown argument, a value of the wrong type) is one line on stderr,
    ``<prog>: <argparse's message>``, and exit 4 (:data:`EXIT_BAD_INPUT`). Raises SystemExit(4) there."""

    def error(self, message: str):  # noqa: D401 (argparse's hook)
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
