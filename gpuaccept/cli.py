"""The ``gpuaccept`` command: pytest with gpuaccept's plugin and the suites shipped in the package.

``gpuaccept --inventory prod.ini --limit 'gpu:!drained' -m health`` is ``pytest`` run with the plugin active
(``-o gpuaccept_suites=true``), the shipped suites collected when no test path is given
(``-o gpuaccept_packaged_suites=true``, gpuaccept.plugin.pytest_configure), and our quiet defaults in front of
the operator's arguments (:data:`DEFAULT_ARGS`; a later option of the operator's wins). Every pytest option
passes through unchanged; ``-i FILE`` is read as ``--inventory FILE``, as ``ansible -i``. Reports go to
``./reports`` of the folder it runs in. Exit codes are pytest's (bad input: 4).

Before pytest is even imported, :func:`precheck` reads gpuaccept's own options from the command line (and from
``PYTEST_ADDOPTS`` and ``./pytest.ini``'s addopts) and runs the same checks as the plugin
(gpuaccept.config.selection.select): bad input is refused, and ``--list-hosts`` answered, in a fraction of
pytest's start-up (benchmarks/refusal_cpu.py). Where pytest could read options this check cannot see (an
ini file other than ./pytest.ini, in this folder or above), it is left to pytest.
"""
from __future__ import annotations

import os
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


#: files pytest reads options from (rootdir discovery); only ./pytest.ini is read by :func:`precheck`
INI_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
#: arguments after which pytest does something else than run (help, version, plugin listings)
NOT_A_RUN = {"-h", "--help", "--version", "-V", "--fixtures", "--markers", "--trace-config", "--co",
             "--collect-only", "--setup-plan", "--fixtures-per-test"}


def _ini_addopts(cwd: str) -> list[str] | None:
    """The addopts of ``cwd/pytest.ini`` ([] without one); None where another ini file could set options
    (pytest would read it: the check is then pytest's alone)."""
    import configparser
    import shlex
    folder = os.path.abspath(cwd)
    while True:
        for name in INI_FILES:
            path = os.path.join(folder, name)
            if not os.path.isfile(path):
                continue
            if folder != os.path.abspath(cwd) or name != "pytest.ini":
                return None
            cp = configparser.ConfigParser(interpolation=None)
            try:
                cp.read(path, encoding="utf-8")
            except (configparser.Error, UnicodeDecodeError, OSError):
                return None
            return shlex.split(cp.get("pytest", "addopts", fallback=""))
        parent = os.path.dirname(folder)
        if parent == folder:
            return []
        folder = parent


def precheck(args: list[str], cwd: str | None = None) -> int | None:
    """gpuaccept's input checks without pytest: 4 (after one line on stderr) for bad input, 0 after printing
    ``--list-hosts``, None to go on to pytest (input fine, or not this check's to judge)."""
    import argparse
    import shlex
    from gpuaccept.errors import ConfigError
    from gpuaccept.config import selection
    from gpuaccept.config.options import add_options
    cwd = cwd or os.getcwd()
    addopts = _ini_addopts(cwd)
    if addopts is None or NOT_A_RUN & set(args):
        return None
    words = shlex.split(os.environ.get("PYTEST_ADDOPTS", "")) + addopts + args
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_options(parser.add_argument)
    try:
        ns, _ = parser.parse_known_args(words)
    except SystemExit:  # a value argparse refuses (--forks x): pytest words it
        return None
    getoption = lambda name, default=None: getattr(ns, name, default)  # noqa: E731 - config.getoption's shape
    from pathlib import Path
    try:
        sel = selection.select(getoption, Path(cwd), args)
    except ConfigError as e:
        sys.stderr.write(f"ERROR: {e}\n")
        return 4
    for line in sel.warnings:
        sys.stderr.write(f"[WARNING] {line}\n")
    if ns.list_hosts:
        sys.stdout.write(selection.list_hosts_text(sel.hosts) + "\n")
        return 0
    return None


def main(argv: list[str] | None = None) -> int:
    """Run pytest as described above; returns its exit code (0 all passed, 1 failures, 4 bad input, 5 none
    collected)."""
    args = translate(sys.argv[1:] if argv is None else argv)
    early = precheck(args)
    if early is not None:
        return early
    import pytest
    return int(pytest.main(DEFAULT_ARGS + args))


if __name__ == "__main__":  # python -m gpuaccept.cli
    sys.exit(main())
