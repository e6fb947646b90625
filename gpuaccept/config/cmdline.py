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

    def parse_args(self, args=None, namespace=None):
        """argparse's ``parse_args``, but an option this parser does not know is named first: argparse would
        report a missing required option instead (``--bogus`` without ``--into``: "required: --into"), which sends
        the operator after the wrong argument. A parser with subcommands is left to argparse (their options are the
        subcommands')."""
        argv = sys.argv[1:] if args is None else list(args)
        unknown = self._unknown_options(argv)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return super().parse_args(argv, namespace)

    def _unknown_options(self, argv: list[str]) -> list[str]:
        """The words of ``argv`` (before ``--``) that look like options and name none of this parser's, nor a prefix
        of one where argparse accepts abbreviations; [] for a parser with subcommands."""
        if any(isinstance(a, argparse._SubParsersAction) for a in self._actions):
            return []
        known = list(self._option_string_actions)
        out = []
        for word in argv:
            if word == "--":
                break
            if not word.startswith("-") or word == "-" or _is_number(word):
                continue
            opt = word.split("=", 1)[0]
            if opt in known or (self.allow_abbrev and opt.startswith("--")
                                and any(k.startswith(opt) for k in known)):
                continue
            out.append(word)
        return out


def _is_number(word: str) -> bool:
    """Whether ``word`` reads as a number (a negative value, not an option)."""
    try:
        float(word)
    except ValueError:
        return False
    return True
