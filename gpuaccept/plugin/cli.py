"""The ``gpuaccept`` command: pytest with gpuaccept's plugin and the suites shipped in the package.

``gpuaccept --inventory prod.ini --limit 'gpu:!drained' -m health`` is ``pytest`` run with the plugin active
(``-o gpuaccept_suites=true``), the shipped suites collected when no test path is given
(``-o gpuaccept_packaged_suites=true``, gpuaccept.plugin.pytest_configure), and our quiet defaults in front of
the operator's arguments (:data:`DEFAULT_ARGS`; a later option of the operator's wins). Every pytest option
passes through unchanged; ``-i FILE`` is read as ``--inventory FILE``, as ``ansible -i``. Reports go to
``./reports`` of the folder it runs in. Exit codes are pytest's (bad input: 4).
"""
from __future__ import annotations

import sys

#: put before the operator's arguments: the plugin on, the shipped suites, no .pytest_cache in the operator's
#: folder, and pytest's own per-test lines kept out of the way (the same as the repository's pytest.ini addopts)
DEFAULT_ARGS = ["-p", "gpuaccept.plugin", "-o", "gpuaccept_suites=true", "-o", "gpuaccept_packaged_suites=true", "-p", "no:cacheprovider",
                "-W", "ignore:Module already imported so cannot be rewritten; gpuaccept:pytest.PytestAssertRewriteWarning",
                "-rfE"]


def translate(argv: list[str]) -> list[str]:
    """The operator's arguments as pytest's: ``-i X`` / ``-iX`` -> ``--inventory X``; the rest unchanged."""
    out: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--":
            out.append(a)
            out.extend(it)
            break
        if a == "-i":
            out.append("--inventory")
            out.append(next(it, ""))
        elif a.startswith("-i") and not a.startswith("--") and len(a) > 2:
            out.append("--inventory=" + a[2:])
        else:
            out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run pytest as described above; returns its exit code (0 all passed, 1 failures, 4 bad input, 5 none
    collected)."""
    import pytest
    args = translate(sys.argv[1:] if argv is None else argv)
    return int(pytest.main(DEFAULT_ARGS + args))


if __name__ == "__main__":  # python -m gpuaccept.plugin.cli
    sys.exit(main())
