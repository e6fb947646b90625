"""Node-side bytecode cache: the shipped probe files compile once per node and Python, not once per run.

Every run writes the probe files into a fresh folder (``_agent.py``), so Python's own ``__pycache__`` (keyed by
the file's path and mtime) never hits, and the probes run with ``PYTHONDONTWRITEBYTECODE``. Compiling the agent and
a probe's helpers is most of the agent's own start on a node (28 ms of about 100 ms of CPU per host, measured with
benchmarks/fanout.py on 2 cores). Here the code objects are cached by the SHA-256 of the source and the
interpreter's magic number (``importlib.util.MAGIC_NUMBER``: one per bytecode format), in one folder per user:
``$TMPDIR/gpuaccept-bytecode-<euid>`` (``mkdir -m 700``). The cache is used only while that folder is a real
directory (not a link) owned by this user with no access for group or others, and each entry is read only when it is
a regular file owned by this user (``O_NOFOLLOW``); anything else compiles as before and writes nothing. Entries are
written atomically (a temporary name, then ``os.replace``); past :data:`KEEP` entries the oldest half is removed.
``GPUACCEPT_BYTECODE=off`` in the agent's environment turns it off.

Installed packages that ship no bytecode of their own (an image built with ``PYTHONDONTWRITEBYTECODE`` or ``pip
install --no-compile`` into a read-only prefix) compile every module from source at each import: torch's ~930
modules took 2.2 of its 4.9-6.1 s import on an H200 node whose torch had no ``__pycache__`` (2026-12-05). For such
a package :func:`use_tree` points ``sys.pycache_prefix`` at a second folder of this user's,
``$TMPDIR/gpuaccept-pycache-<euid>`` (same checks, and ``$TMPDIR`` itself sticky or closed to others, so that
the folder cannot be swapped under the process), before the warm child imports it: Python then keeps the bytecode
of every module that process and its forks import from then on below that folder (torch's, and once each the
standard library's and other packages' it reaches, whose own ``__pycache__`` a prefix makes Python pass by; a
mirror of the source paths, checked against each source's mtime and size as ``__pycache__`` is), and the next
run's import reads it. Past :data:`TREE_MAX` bytes the tree is removed and grows again. Where the package has its
own bytecode nothing changes and nothing is written.

:func:`install` puts a finder for the shipped ``_*.py`` helpers of a folder in front of ``sys.meta_path`` (a forked
probe inherits it); :func:`run_main` runs a probe file as ``__main__`` from cached code, as ``runpy.run_path``
does. Code objects carry the file's real path (``co_filename``), so tracebacks read as they did.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import marshal
import os
import stat
import sys
import types

#: entries kept before the oldest half is removed (a release changes a few files; about 60 files are shipped)
KEEP = 600
#: the agent's variable that turns the cache off ("off", "0", "no", "false")
ENV = "GPUACCEPT_BYTECODE"
#: bytes the bytecode tree of :func:`use_tree` may hold before it is removed (torch 2.11's import kept 24 MB in
#: 1023 files on Python 3.12, 2026-12-05: room for about 20 torch installs or versions; chosen)
TREE_MAX = 512 << 20

_dir: str | None = None


def folder() -> str | None:
    """The cache folder, made ``0700`` when missing; None when it is off, cannot be made, or is not a directory of
    this user's alone (a link, another owner, group or other access): then nothing is cached."""
    global _dir
    if _dir is None:
        _dir = _private("gpuaccept-bytecode") or ""
    return _dir or None


def _private(name: str) -> str | None:
    """``$TMPDIR/<name>-<euid>``, made ``0700`` when missing; None when the cache is off (:data:`ENV`), the folder
    cannot be made, or it is not a directory of this user's alone (a link, another owner, group or other
    access)."""
    if str(os.environ.get(ENV, "")).strip().lower() in ("off", "0", "no", "false"):
        return None
    d = os.path.join(_tmpdir(), f"{name}-{os.geteuid()}")
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(d)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077:
        return d
    return None


def use_tree(package: str) -> str | None:
    """Before importing ``package`` (an installed one: torch): where it ships no bytecode for this interpreter
    (no ``__pycache__`` entry of its ``__init__.py``), set ``sys.pycache_prefix`` to
    ``$TMPDIR/gpuaccept-pycache-<euid>`` (:func:`_private`) and let this process write bytecode
    (``sys.dont_write_bytecode = False``; below that folder only), and return the folder. For the rest of the
    process's life (and its forks) every module imported from source is read from and written to that tree.
    None, and nothing changed, when the package has its own bytecode, cannot be found, is not a source package,
    a prefix is already set (``PYTHONPYCACHEPREFIX``: the operator's), the probe cache (:func:`folder`) or the
    tree's folder is unusable or off, or ``$TMPDIR`` is open to others without the sticky bit. A tree past
    :data:`TREE_MAX` bytes is removed first."""
    if sys.pycache_prefix is not None:
        return None
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None) if spec is not None else None
    if not origin or not origin.endswith(".py") or not os.path.isfile(origin):
        return None
    try:
        own = importlib.util.cache_from_source(origin)
    except NotImplementedError:  # no cache tag: this interpreter writes no bytecode at all
        return None
    if os.path.exists(own) or folder() is None:  # no probe cache: the shipped files would be mirrored per run
        return None
    if not _closed(_tmpdir()):
        return None
    d = _private("gpuaccept-pycache")
    if d is None:
        return None
    if _tree_bytes(d) > TREE_MAX:
        import shutil

        shutil.rmtree(d, ignore_errors=True)  # never follows links; the tree grows again from this import
        d = _private("gpuaccept-pycache")
        if d is None:
            return None
    sys.pycache_prefix = d
    sys.dont_write_bytecode = False
    return d


def _tmpdir() -> str:
    """``$TMPDIR``, else /tmp: the folder both caches live in."""
    return os.environ.get("TMPDIR") or "/tmp"


def _closed(parent: str) -> bool:
    """Whether others cannot rename or replace entries of folder ``parent``: sticky, or not writable by group or
    others."""
    try:
        st = os.stat(parent)
    except OSError:
        return False
    return bool(st.st_mode & stat.S_ISVTX) or not st.st_mode & 0o022


def _tree_bytes(d: str) -> int:
    """Bytes of the regular files below ``d`` (links not followed)."""
    total = 0
    for root, _dirs, files in os.walk(d):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def code(path: str, source: bytes | None = None) -> types.CodeType:
    """The code object of the Python file ``path`` (its bytes ``source`` when already read): from the cache when an
    entry for this source and interpreter is there, else compiled (and the entry written). Raises OSError when
    ``path`` cannot be read, SyntaxError as ``compile`` does."""
    if source is None:
        with open(path, "rb") as f:
            source = f.read()
    d = folder()
    if d is None or not hasattr(types.CodeType, "replace"):
        return compile(source, path, "exec", dont_inherit=True)
    key = _digest(source) + importlib.util.MAGIC_NUMBER.hex()
    entry = os.path.join(d, key)
    try:
        fd = os.open(entry, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                with os.fdopen(os.dup(fd), "rb") as f:
                    return _at(marshal.loads(f.read()), path)
        finally:
            os.close(fd)
    except (OSError, ValueError, EOFError, TypeError):
        pass
    c = compile(source, "<gpuaccept>", "exec", dont_inherit=True)
    _write(d, key, marshal.dumps(c))
    return _at(c, path)


def _digest(source: bytes) -> str:
    """40 hex digits of the SHA-256 of ``source``: CPython's built-in ``_sha256``/``_sha2`` where present (no OpenSSL
    to load: about 5 ms less per agent start), else ``hashlib``."""
    try:
        import _sha2 as sha  # Python 3.12+
    except ImportError:
        try:
            import _sha256 as sha  # Python 3.11 and older
        except ImportError:
            import hashlib as sha
    return sha.sha256(source).hexdigest()[:40]


def _at(c: types.CodeType, path: str) -> types.CodeType:
    """``c`` and the code objects inside it with ``co_filename`` set to ``path``."""
    consts = tuple(_at(k, path) if isinstance(k, types.CodeType) else k for k in c.co_consts)
    return c.replace(co_filename=path, co_consts=consts)


def _write(d: str, key: str, data: bytes) -> None:
    """Write entry ``key`` atomically; past :data:`KEEP` entries remove the oldest half (best effort)."""
    tmp = os.path.join(d, f".{key}.{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(d, key))
        names = os.listdir(d)
        if len(names) > KEEP:
            aged = sorted(names, key=lambda n: _mtime(os.path.join(d, n)))
            for n in aged[: len(aged) // 2]:
                os.unlink(os.path.join(d, n))
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _mtime(p: str) -> float:
    try:
        return os.lstat(p).st_mtime
    except OSError:
        return 0.0


class _Loader(importlib.machinery.SourceFileLoader):
    """A source loader whose code comes from :func:`code` (the cache)."""

    def get_code(self, fullname):  # noqa: D102 - importlib's protocol
        return code(self.path, self.get_data(self.path))


class _Finder:
    """Finds the top-level modules whose file ``<name>.py`` lies in ``folder`` (the shipped helpers)."""

    def __init__(self, folder: str):
        self.folder = folder

    def find_spec(self, name, path=None, target=None):  # noqa: D102 - importlib's protocol
        if path is not None or "." in name:
            return None
        f = os.path.join(self.folder, name + ".py")
        if not os.path.isfile(f):
            return None
        return importlib.util.spec_from_file_location(name, f, loader=_Loader(name, f))


def install(where: str) -> None:
    """Import the modules of folder ``where`` through the cache (a finder first in ``sys.meta_path``); nothing
    when the cache is off or unusable (:func:`folder`)."""
    if folder() is not None and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(os.path.abspath(where)))


def run_main(path: str) -> None:
    """Run the Python file ``path`` as ``__main__`` (``__file__`` set, in ``sys.modules``), as
    ``runpy.run_path(path, run_name="__main__")`` does for a file, from cached code. Raises what the file raises
    (``SystemExit`` included)."""
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__cached__ = None  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    exec(code(path), main.__dict__)  # noqa: S102 - the shipped probe, as runpy would
