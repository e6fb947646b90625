"""The one place where gpuaccept turns words into a POSIX shell command line.

Every value that reaches a node's shell (an inventory var, a probe's JSON arguments, a folder name) is
quoted here with :func:`shlex.quote`, so the shell sees it as one word and runs nothing it holds: ``;``,
``|``, ``&``, ``$( )``, backquotes, redirections, globs, newlines and quotes stay text. Environment variable
*names* cannot be quoted (``env`` takes ``NAME=value`` as one word and a name is never expanded), so they
are checked instead: :data:`ENV_NAME` (POSIX's portable names, IEEE Std 1003.1 "Environment Variables":
letters, digits and underscore, not starting with a digit).

The transport wraps the finished command once more for its own process-group handling
(``gpuaccept.transport.ssh.wrap_command``); that wrapper passes the command as one quoted argument.
"""
from __future__ import annotations

import shlex
from typing import Any, Iterable, Mapping

from gpuaccept.config.hostvars import ENV_NAME, bad_env_name

__all__ = ["ENV_NAME", "bad_env_name", "command", "env_command", "interpreter_words", "quote"]


def interpreter_words(python: str) -> list[str]:
    """The words of an ``ansible_python_interpreter`` value, split as a POSIX shell splits them
    (:func:`shlex.split`): ``"/usr/bin/env python3"`` -> ``["/usr/bin/env", "python3"]``, as Ansible, which puts
    the value unquoted before its module's path, runs it; each word is then quoted like any other
    (:func:`command`), so the value's words are arguments, never shell syntax. A value shlex cannot split
    (an unclosed quote: refused at the inventory's load, gpuaccept.config.inventory.resolve) or that splits into
    nothing is one word."""
    try:
        words = shlex.split(str(python))
    except ValueError:
        return [str(python)]
    return words or [str(python)]


def quote(word: Any) -> str:
    """``word`` (made text with ``str``) as one shell word: ``"a b;c"`` -> ``'a b;c'``."""
    return shlex.quote(str(word))


def command(argv: Iterable[Any]) -> str:
    """A command line running ``argv`` (program, then arguments), every word quoted."""
    return " ".join(quote(w) for w in argv)


def env_command(env: Mapping[str, Any], argv: Iterable[Any], cwd: str | None = None, exec_: bool = False) -> str:
    """``cd CWD && env -- NAME=value ... PROGRAM ARGS...``, every value and word quoted; with ``exec_``,
    ``cd CWD && export NAME=value ... && exec PROGRAM ARGS...`` (the shell's own ``export`` and ``exec``: no
    ``env`` process, and the variables end with the shell the program replaces).

    ``env``: variable name -> value (made text with ``str``); ``argv``: the program and its arguments;
    ``cwd``: a folder to change to first (optional); ``exec_``: replace the shell (the program then leads
    the command's process group, as the node-side watchdog needs).

    Raises:
        ValueError: a name is not a portable variable name (:data:`ENV_NAME`). The inventory's names are
            checked at load (gpuaccept.config.hostvars), so this is the last line of defence, never an operator's
            first message.
    """
    words = []
    for name, value in env.items():
        why = bad_env_name(name)
        if why:
            raise ValueError(f"environment variable {why}")
        words.append(f"{name}={quote(value)}")
    if exec_:
        line = (f"export {' '.join(words)} && " if words else "") + "exec " + command(argv)
    else:
        line = " ".join(["env", "--", *words, command(argv)])
    return f"cd {quote(cwd)} && {line}" if cwd is not None else line
