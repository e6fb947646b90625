"""Where a run may write, checked before any node is touched: the ``--reports`` folder, and the files named by
``--history`` and ``--prometheus-textfile`` (:func:`check_output_file`).

A report folder is one the operator means for this run: new, or an existing folder that is empty (a fresh
filesystem's ``lost+found`` aside), and neither the root nor a system folder. So ``--reports=/`` (six files
written into ``/`` as root), ``--reports ~`` or ``--reports /etc/x`` are refused, and so is a folder holding
anything, a symlink above all: ``probes -> /elsewhere`` left in it would have sent every host's probe
documents elsewhere. What the run makes under the folder afterwards is opened without following symlinks
(gpuaccept.runner.host.save_probe).
"""
from __future__ import annotations

import os

from gpuaccept.errors import ConfigError

__all__ = ["CLOSED_READER_EXIT", "SYSTEM_TREES", "TOP_FOLDERS", "check_output_file", "check_report_folder",
           "quiet_when_reader_closes", "stdout_to_devnull", "system_folder_problem"]

#: folders of the operating system (the Filesystem Hierarchy Standard 3.0, chapters 3 and 6): neither they nor
#: any folder inside them is a report folder
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin",
                "/sys", "/usr")
#: shared top-level folders (FHS 3.0): a folder inside them is fine, the folder itself is not the run's
TOP_FOLDERS = ("/", "/home", "/media", "/mnt", "/opt", "/root", "/srv", "/tmp", "/var", "/var/lib", "/var/log",
               "/var/tmp")
#: entries an empty folder may hold: a fresh ext2/3/4 filesystem's own
_EMPTY_OK = ("lost+found",)


def _real(path: str) -> str:
    """``path`` absolute, with the symlinks of the part that exists resolved (the rest is created later)."""
    return os.path.realpath(os.path.abspath(os.path.expanduser(path)))


def system_tree(real: str) -> str | None:
    """The system folder (:data:`SYSTEM_TREES`) that the resolved path ``real`` is or lies inside, else None."""
    return next((t for t in SYSTEM_TREES if real == t or real.startswith(t + "/")), None)


def system_folder_problem(path: str) -> str | None:
    """Why ``path`` (resolved) is no folder a run should write its reports into, or None: the root, a system
    folder or one inside it (:data:`SYSTEM_TREES`), a shared top-level folder itself (:data:`TOP_FOLDERS`), or
    the home folder itself."""
    real = _real(path)
    where = f" ({real})" if real != os.path.abspath(path) else ""
    if real == "/":
        return f"is the root folder{where}"
    tree = system_tree(real)
    if tree:
        return f"is {'the' if real == tree else 'inside the'} system folder {tree}{where}"
    if real in TOP_FOLDERS or real == _real("~"):
        return f"is the shared folder {real} itself{where}; give a folder of its own inside it"
    return None


def check_report_folder(path: str, option: str = "--reports") -> None:
    """Refuse ``path`` as a run's report folder unless it is new, or an existing empty folder, and not the
    root or a system folder (:func:`system_folder_problem`).

    The caller says "already holds a run" first, for a folder holding a run's files (their names belong to
    gpuaccept.reporting.records).

    Raises:
        ConfigError: one line, ``<option> <path>: <why>``: the root or a system folder; not a folder; holding
            a symlink (names it and where it points: the run did not make it, and would follow it); holding
            anything else (names up to 5 entries).
    """
    shown = os.path.abspath(path)
    why = system_folder_problem(path)
    if why:
        raise ConfigError(f"{option} {shown}: {why}: give a new or empty folder of this run's own")
    if not os.path.lexists(shown):
        return
    if not os.path.isdir(shown):
        raise ConfigError(f"{option} {shown}: exists and is not a folder")
    try:
        names = sorted(n for n in os.listdir(shown) if n not in _EMPTY_OK)
    except OSError as e:
        raise ConfigError(f"{option} {shown}: cannot be read: {e.strerror or e}") from None
    if not names:
        return
    links = [n for n in names if os.path.islink(os.path.join(shown, n))]
    if links:
        target = os.readlink(os.path.join(shown, links[0]))
        raise ConfigError(f"{option} {shown}: holds a symlink {links[0]} -> {target} that this run did not make "
                          "(the reports would be written where it points); give a new or empty folder")
    listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    raise ConfigError(f"{option} {shown}: is not empty (holds {listed}); give a new or empty folder")


def check_output_file(path: str, option: str) -> None:
    """Refuse ``path`` as a file the run writes (``--history``, ``--prometheus-textfile``) when it lies in the
    root or a system folder (:data:`SYSTEM_TREES`; ``--history /etc/h.sqlite``) or exists as something other
    than a regular file (a folder, a FIFO, a block device: ``--prometheus-textfile /dev/sda`` would have been
    renamed over as root). Resolved through symlinks: a link to such a place is refused alike.

    Raises:
        ConfigError: one line, ``<option> <path>: <why>``.
    """
    import stat
    shown = os.path.abspath(os.path.expanduser(path))
    real = _real(path)
    folder = os.path.dirname(real)
    if folder == "/" or system_tree(folder):
        raise ConfigError(f"{option} {shown}: lies in {'the root folder' if folder == '/' else 'the system folder ' + folder}"
                          f"{f' ({real})' if real != shown else ''}: give a file in a folder of its own")
    try:
        mode = os.stat(real).st_mode
    except OSError:
        return  # new: made by the run
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode) else \
            "a character device" if stat.S_ISCHR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise ConfigError(f"{option} {shown}: is {kind}{f' ({real})' if real != shown else ''}, not a file the run may write")


def stdout_to_devnull() -> None:
    """Point standard output (file descriptor and all) at /dev/null: its reader went away (``| head -1``), and
    nothing is left for the flush at exit to fail on. Never raises."""
    import sys
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError):
        pass


#: exit code of a command whose standard output's reader went away before it had printed everything (its output
#: is cut: not a success), where nothing else decided the code; the ``gpuaccept`` command's own, gpuaccept.cli.main
CLOSED_READER_EXIT = 1


def quiet_when_reader_closes(main, *args, **kwargs) -> int:
    """``main(*args, **kwargs)``'s exit code, its standard output flushed before returning; where standard output's
    reader went away (``python -m gpuaccept.reporting.history --host gpu01 | head -10``), the output ends there
    without a traceback: standard output pointed at /dev/null (:func:`stdout_to_devnull`, so the interpreter's
    own flush at exit has nothing to fail on) and :data:`CLOSED_READER_EXIT` returned. The one wrapper of every
    ``python -m gpuaccept...`` command that prints (gpuaccept.cli, the history, merge, drain, k8s and Slurm
    commands). SystemExit (argparse's ``--help``) propagates after the flush, as does any other exception."""
    import sys
    try:
        try:
            code = main(*args, **kwargs)
        except SystemExit:  # argparse's --help and refusals exit from inside main: flushed here all the same
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # inside: the flush at exit would print the broken pipe
        return code
    except BrokenPipeError:
        stdout_to_devnull()
        return CLOSED_READER_EXIT
