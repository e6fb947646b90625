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
ini file other than ./pytest.ini, in this folder or above), it is left to pytest. Both read the operator's files
in one process, inside gpuaccept.config.bounded.read_once: a pipe or FIFO (``-i <(ansible-inventory ...)``) is
read to its end once, and pytest's plugin (and through it, under ``-n``, its workers) gets what was read.

The command speaks for itself before pytest does: ``gpuaccept --help`` is gpuaccept's usage and options
(:func:`help_text`; ``--help-pytest`` prints pytest's, every option of which passes through), ``--version``
gpuaccept's version, a mistyped option close to one of gpuaccept's is refused in one line with what was meant
(:func:`unknown_option`), and pytest's own usage lines name ``gpuaccept``, not ``pytest.main()``.
"""
from __future__ import annotations

import os
import sys

#: put before the operator's arguments: the plugin on, the shipped suites, no .pytest_cache in the operator's
#: folder, and pytest's own per-test lines kept out of the way (the same as the repository's pytest.ini addopts)
DEFAULT_ARGS = ["-p", "gpuaccept.plugin", "-o", "gpuaccept_suites=true", "-o", "gpuaccept_packaged_suites=true", "-p", "no:cacheprovider",
                "-W", "ignore:Module already imported so cannot be rewritten; gpuaccept:pytest.PytestAssertRewriteWarning",
                "-rfE"]


#: pytest's options that need its cache (the cacheprovider and stepwise plugins): given one, the command leaves
#: pytest's cache on (in ./.pytest_cache, as pytest keeps it) instead of refusing the option as unknown
CACHE_OPTIONS = frozenset({"--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first", "--cache-show",
                           "--cache-clear", "--lfnf", "--last-failed-no-failures", "--sw", "--stepwise", "--sw-skip",
                           "--stepwise-skip", "--sw-reset", "--stepwise-reset"})


def default_args(args: list[str]) -> list[str]:
    """:data:`DEFAULT_ARGS`, less ``-p no:cacheprovider`` where ``args`` give an option that needs the cache
    (:data:`CACHE_OPTIONS`: ``gpuaccept --lf`` was refused as an unrecognized argument)."""
    if not any(a.split("=", 1)[0] in CACHE_OPTIONS for a in _options_part(args)):
        return list(DEFAULT_ARGS)
    out = list(DEFAULT_ARGS)
    i = out.index("no:cacheprovider")
    del out[i - 1:i + 1]
    return out


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


class _Refused(Exception):
    """An argparse refusal, raised instead of printed (argparse prints its whole usage before the error)."""


def _parser(**kw):
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message):  # noqa: D102 - argparse's hook
            raise _Refused(message)
    return Parser(**kw)


def precheck(args: list[str], cwd: str | None = None) -> int | None:
    """gpuaccept's input checks without pytest: 4 (after one line on stderr) for bad input, 5 for a
    ``--limit=@FILE`` that lists no host (nothing to rerun), 0 after printing ``--list-hosts``, None to go on to pytest (input fine, or not this check's to judge)."""
    import shlex
    from gpuaccept.errors import ConfigError
    from gpuaccept.config import selection
    from gpuaccept.config.options import add_options
    cwd = cwd or os.getcwd()
    addopts = _ini_addopts(cwd)
    if addopts is None or NOT_A_RUN & set(args):
        return None
    words = shlex.split(os.environ.get("PYTEST_ADDOPTS", "")) + addopts + args
    parser = _parser(add_help=False, allow_abbrev=False)
    add_options(parser.add_argument)
    try:
        ns, _ = parser.parse_known_args(words)
    except _Refused as e:  # an option of gpuaccept's without its value (a value is read by its type: BadValue)
        sys.stderr.write(f"ERROR: {e}\n")
        return 4
    except SystemExit:  # anything else argparse refuses: pytest words it
        return None
    getoption = lambda name, default=None: getattr(ns, name, default)  # noqa: E731 - config.getoption's shape
    from pathlib import Path
    from gpuaccept.config.limitfile import NOTHING_TO_RERUN_EXIT, NothingToRerun
    try:
        sel = selection.select(getoption, Path(cwd), args)
    except NothingToRerun as e:  # a clean night's failed-hosts.txt: nothing to do, not bad input
        sys.stderr.write(f"gpuaccept: {e}\n")
        return NOTHING_TO_RERUN_EXIT
    except ConfigError as e:
        sys.stderr.write(f"ERROR: {e}\n")
        return 4
    if ns.list_hosts:  # else pytest runs and its plugin says the warnings, once
        for line in sel.warnings:
            sys.stderr.write(f"[WARNING] {line}\n")
        sys.stdout.write(selection.list_hosts_text(sel.hosts, getoption("sku", None)) + "\n")
        return 0
    return None


USAGE = "%(prog)s [-i INVENTORY] [--limit PATTERN] [gpuaccept and pytest options] [file_or_dir ...]"
DESCRIPTION = """\
Acceptance tests for GPU clusters: pytest with gpuaccept's plugin and the suites shipped in the package, run
from any folder. Reports go to ./reports/<UTC timestamp>, ./reports/latest the newest.

  gpuaccept -i lab.ini --list-hosts     the selected hosts, touching no node
  gpuaccept -i lab.ini -m health        the health layer
  gpuaccept -i lab.ini                  every layer but the burn-in (-m burnin runs it)"""
EPILOG = """\
Every pytest option works too (-m EXPR, -k EXPR, -x, --lf, -n N, --junitxml=FILE, ...): gpuaccept
--help-pytest lists them all. `pytest --pyargs gpuaccept ...` runs the same. Exit codes are pytest's: 0 passed,
1 failures, 2 interrupted, 4 bad input, 5 nothing collected (or --limit=@FILE lists no host: nothing to
rerun)."""


def help_text() -> str:
    """``gpuaccept --help``: the command's usage, then gpuaccept's options by group
    (gpuaccept.config.options.HELP_GROUPS), ``-i`` beside ``--inventory``, and where pytest's options are."""
    import argparse
    from gpuaccept.config.options import HELP_GROUPS, option_specs
    p = argparse.ArgumentParser(prog="gpuaccept", usage=USAGE, description=DESCRIPTION, epilog=EPILOG,
                                add_help=False, formatter_class=argparse.RawDescriptionHelpFormatter)
    specs = {flags[0].lstrip("-").replace("-", "_"): (flags, kw) for flags, kw in option_specs()}
    groups = {title: list(names) for title, names in HELP_GROUPS.items()}
    rest = [n for n in specs if not any(n in names for names in groups.values())]
    if rest:  # an option added without a group is still listed
        groups["other"] = rest
    for title, names in groups.items():
        g = p.add_argument_group(title)
        for name in names:
            flags, kw = specs[name]
            kw = {k: v for k, v in kw.items() if k in ("help", "metavar", "action")}
            if name == "inventory":
                flags, kw["metavar"] = ("-i", *flags), "INVENTORY"
            g.add_argument(*flags, **kw)
    g = p.add_argument_group("this command")
    g.add_argument("-h", "--help", action="store_true", help="this help")
    g.add_argument("--help-pytest", action="store_true", help="pytest's help: every option, gpuaccept's among them")
    g.add_argument("--version", action="store_true", help="gpuaccept's version, and pytest's and Python's")
    return p.format_help()


def version_text() -> str:
    """``gpuaccept --version``: ``gpuaccept 0.1.0 (pytest 9.2.0, Python 3.11.7)``."""
    import platform
    from importlib import metadata
    from gpuaccept import __version__
    try:
        pytest_version = metadata.version("pytest")
    except metadata.PackageNotFoundError:  # pragma: no cover - pytest is a dependency
        pytest_version = "?"
    return f"gpuaccept {__version__} (pytest {pytest_version}, Python {platform.python_version()})"


def _options_part(args: list[str]) -> list[str]:
    """``args`` up to ``--`` (after it, every word is a test path)."""
    return args[:args.index("--")] if "--" in args else args


#: how close (difflib's ratio) an unknown ``--word`` must be to one of gpuaccept's options to be taken for it
CLOSE = 0.8


def unknown_option(args: list[str], cwd: str | None = None) -> str | None:
    """The one-line refusal of a ``--word`` that is no option of gpuaccept's, pytest's or a plugin's but close
    to one of gpuaccept's (``--inventori``: "did you mean --inventory?"), or None. pytest's parser is built
    (:func:`pytest_long_options`) only when such a word is there, so a run without one pays nothing."""
    import difflib
    from gpuaccept.config.options import long_options
    ours = long_options()
    close = []
    for a in _options_part(args):
        word = a.split("=", 1)[0]
        if not word.startswith("--") or word == "--" or word in ours:
            continue
        near = difflib.get_close_matches(word, ours, n=1, cutoff=CLOSE)
        if near:
            close.append((word, near[0]))
    if not close:
        return None
    known = pytest_long_options(args)
    if known is None:
        return None  # pytest's parser could not be built here: pytest judges the option itself
    for word, near in close:
        if word not in known and not _conftest_mentions(word, cwd or os.getcwd()):
            return f"gpuaccept: unknown option {word} (did you mean {near}?)"
    return None


def pytest_long_options(args: list[str]) -> set[str] | None:
    """The long options pytest knows in this environment: its own and those of its plugins (pytest11 entry
    points, ``-p NAME``, ``PYTEST_PLUGINS``), from pytest's parser built as pytest builds it, without the rest of
    pytest's start (no ini file, conftest or collection; gpuaccept's plugin itself is not imported: its options
    are known). None where this pytest's parser could not be read (private parts of ``_pytest.config``)."""
    import shlex
    try:
        from _pytest.config import get_config
        config = get_config()
        pm = config.pluginmanager
        pm.set_blocked("gpuaccept.plugin")
        pm.consider_preparse(shlex.split(os.environ.get("PYTEST_ADDOPTS", "")) + _options_part(args),
                             exclude_only=False)
        if not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
            pm.load_setuptools_entrypoints("pytest11")
        pm.consider_env()
        parser = config._parser
        optparser = parser._getparser() if hasattr(parser, "_getparser") else parser.optparser
        return {s for s in optparser._option_string_actions if s.startswith("--")}
    except Exception:  # noqa: BLE001 - another pytest, a plugin failing to load: pytest's own start judges
        return None


def _conftest_mentions(word: str, cwd: str) -> bool:
    """Whether a conftest.py in ``cwd`` or a folder above names ``word`` (an option a conftest adds, which
    :func:`pytest_long_options` does not read)."""
    folder = os.path.abspath(cwd)
    while True:
        try:
            with open(os.path.join(folder, "conftest.py"), encoding="utf-8", errors="replace") as f:
                if word in f.read():
                    return True
        except OSError:
            pass
        parent = os.path.dirname(folder)
        if parent == folder:
            return False
        folder = parent


class _Named:
    """A plugin for this run only: pytest's usage lines (an option it refuses) name ``gpuaccept``, not
    ``pytest.main()``."""

    def pytest_addoption(self, parser) -> None:  # noqa: D102 - pytest's hook
        parser.prog = "gpuaccept"  # pytest 8 builds its argparse parser from it
        optparser = getattr(parser, "optparser", None)  # pytest 9 has built it already
        if optparser is not None:
            optparser.prog = "gpuaccept"


def main(argv: list[str] | None = None) -> int:
    """Run pytest as described above; returns its exit code (0 all passed, 1 failures, 4 bad input, 5 none
    collected). A reader of standard output that goes away (``gpuaccept --help | head -1``) ends the output
    quietly, no traceback: exit 1 where nothing else decided the code (a run's own output is cut by the plugin,
    gpuaccept.plugin.progress.PipeSafe, and the run goes on to its report files)."""
    from gpuaccept.config.outputs import quiet_when_reader_closes
    return quiet_when_reader_closes(_main, argv)


def _main(argv: list[str] | None) -> int:
    args = translate(sys.argv[1:] if argv is None else argv)
    head = _options_part(args)
    if "--version" in head or "-V" in head:
        sys.stdout.write(version_text() + "\n")
        return 0
    if "-h" in head or "--help" in head:
        sys.stdout.write(help_text())
        return 0
    if "--help-pytest" in head:
        import pytest
        return int(pytest.main(default_args(["--lf"]) + ["--help"], plugins=[_Named()]))  # the cache's options too
    why = unknown_option(args)
    if why:
        sys.stderr.write(why + "\n")
        return 4
    from gpuaccept.config.bounded import read_once
    with read_once():  # a pipe (-i <(...)) read by the pre-check is not read again, empty, by pytest's plugin
        early = precheck(args)
        if early is not None:
            return early
        import pytest
        return int(pytest.main(default_args(args) + args, plugins=[_Named()]))


if __name__ == "__main__":  # python -m gpuaccept.cli
    sys.exit(main())
