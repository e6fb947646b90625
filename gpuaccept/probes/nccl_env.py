#!/usr/bin/env python3
"""NCCL environment probe: every NCCL_* variable an NCCL rank on this node would see, and where it comes from.

Run on the node as ``python3 nccl_env.py '{}'``; the runner starts it as it starts the NCCL ranks, so its own
environment is the ranks' environment (without the variables the inventory adds). Standard library only.

Sources, in NCCL's order of precedence (NCCL ``src/misc/param.cc``: ``initEnvFunc`` reads ``$NCCL_CONF_FILE``,
or else ``~/.nccl.conf``, then ``/etc/nccl.conf``, each line ``NAME=VALUE`` (``#`` at the start: a comment) set
with ``setenv(name, value, 0)``, i.e. never over a variable already in the environment):

1. ``environment``: this process's environment;
2. ``NCCL_CONF_FILE`` (the file it names) or ``~/.nccl.conf`` (home directory of the user, from the password
   database, as NCCL's ``getpwuid``);
3. ``/etc/nccl.conf``.

Beside those, settings that reach jobs started from a login shell (sbatch scripts, mpirun): the environment of
``<login shell> -l -c`` (its additions over this process's) and ``NCCL_*=`` assignments in the profile files
(``/etc/environment``, ``/etc/profile``, ``/etc/profile.d/*.sh``, ``/etc/bash.bashrc``, ``~/.profile``,
``~/.bash_profile``, ``~/.bash_login``, ``~/.bashrc``), with file and line.

Args (JSON object, every key optional; the paths exist so tests can point at fixture files)::

    {"etc_nccl_conf": "/etc/nccl.conf", "home": "<home of the user>",
     "profile_files": [...],          # default: the list above, ~ expanded to "home"
     "login_shell": "/bin/bash" | false,   # default: the user's shell from the password database
     "timeout_s": 10}

Output::

    {"effective": {"NCCL_P2P_DISABLE": {"value": "1", "source": "/etc/nccl.conf", "path": "/etc/nccl.conf",
                                        "line": 3}, ...},
     "found": [{"name", "value", "source", "path", "line"}, ...],   # every setting seen, in every source
     "errors": [{"path", "error"}],   # a source that exists but cannot be read (never "no variables")
     "login_shell": "/bin/bash" | null, "cuda_device_order": str | null}
"""
from __future__ import annotations

import glob
import json
import os
import pwd
import re
import subprocess
import sys

from _probe import ProbeFailed, reject_unknown, run

ARG_KEYS = {"etc_nccl_conf", "home", "profile_files", "login_shell", "timeout_s"}
_ASSIGN = re.compile(r"^\s*(?:export\s+|declare\s+-x\s+|setenv\s+)?(NCCL_[A-Za-z0-9_]+)(?:=|\s+)(.*)$")
_MARK = "GPUACCEPT-NCCL-ENV:"


def parse_nccl_conf(text: str) -> list[tuple[int, str, str]]:
    """``(line number, name, value)`` for each setting of an nccl.conf, parsed as NCCL's ``setEnvFile`` does:
    a line starting with ``#`` is skipped, the name runs to the first ``=``, the value is the rest of the line
    (no quotes removed, no spaces stripped), a line without ``=`` is skipped."""
    out = []
    for n, line in enumerate(text.split("\n"), 1):
        if line.startswith("#") or "=" not in line:
            continue
        name, value = line.split("=", 1)
        if name:
            out.append((n, name, value))
    return out


def _unquote(v: str) -> str:
    """A shell word's value as written: ``"Ring" # note`` -> ``Ring``, ``1 # note`` -> ``1`` (no expansion)."""
    v = v.strip()
    if v[:1] in ("'", '"'):
        end = v.find(v[0], 1)
        return v[1:end] if end > 0 else v[1:]
    return re.split(r"\s+#", v, maxsplit=1)[0].strip()


def parse_profile(text: str) -> list[tuple[int, str, str]]:
    """``(line number, name, value)`` for each ``NCCL_X=...`` / ``export NCCL_X=...`` line of a shell profile
    or /etc/environment (csh ``setenv NCCL_X v`` too). Values are unquoted; expansions are left as written."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        m = _ASSIGN.match(line)
        if m:
            out.append((n, m.group(1), _unquote(m.group(2))))
    return out


def _read(path: str, errors: list) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as e:  # present but unreadable: say so, never "no variables"
        errors.append({"path": path, "error": e.strerror or str(e)})
        return None


def login_shell_env(shell: str, timeout: float, errors: list) -> dict | None:
    """The environment a login shell of ``shell`` gives (``shell -l -c``), or None when it cannot run.

    The shell runs this Python to print the environment as JSON after a marker, so whatever the profile
    scripts print on stdout is ignored."""
    code = f"import json,os;print({_MARK!r}+json.dumps(dict(os.environ)))"
    try:
        p = subprocess.run([shell, "-l", "-c", 'exec "$0" -c "$1"', sys.executable, code], capture_output=True,
                           text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        errors.append({"path": shell, "error": f"login shell: {type(e).__name__}: {e}"})
        return None
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(_MARK):
            try:
                return json.loads(line[len(_MARK):])
            except ValueError:
                break
    errors.append({"path": shell, "error": f"login shell gave no environment (rc {p.returncode}): "
                                           f"{p.stderr.strip()[-300:]}"})
    return None


def default_profile_files(home: str) -> list[str]:
    """Files whose NCCL_* assignments reach login shells (system-wide first, then the user's)."""
    return (["/etc/environment", "/etc/profile"] + sorted(glob.glob("/etc/profile.d/*.sh")) +
            ["/etc/bash.bashrc", "/etc/bashrc"] +
            [os.path.join(home, f) for f in (".profile", ".bash_profile", ".bash_login", ".bashrc")])


def main(args: dict) -> dict:
    reject_unknown(args, ARG_KEYS)
    try:
        user = pwd.getpwuid(os.getuid())
        home_default, shell_default = user.pw_dir, user.pw_shell
    except KeyError:
        home_default, shell_default = os.environ.get("HOME", ""), None
    home = args.get("home", home_default)
    etc_conf = args.get("etc_nccl_conf", "/etc/nccl.conf")
    shell = args.get("login_shell", shell_default)
    timeout = float(args.get("timeout_s", 10))
    profiles = args.get("profile_files")
    if profiles is None:
        profiles = default_profile_files(home)
    if not isinstance(profiles, list) or not all(isinstance(p, str) for p in profiles):
        raise ProbeFailed(f"profile_files must be a list of paths, got {profiles!r}")

    errors: list = []
    found: list = []
    effective: dict = {}

    def add(name, value, source, path=None, line=None, wins=True):
        entry = {"name": name, "value": value, "source": source, "path": path, "line": line}
        found.append(entry)
        if wins and name not in effective:  # NCCL: setenv(name, value, 0), the first source wins
            effective[name] = {k: entry[k] for k in ("value", "source", "path", "line")}

    env = dict(os.environ)
    for name in sorted(env):
        if name.startswith("NCCL_"):
            add(name, env[name], "environment")
    user_conf = env.get("NCCL_CONF_FILE") or None
    confs = [(user_conf, "NCCL_CONF_FILE")] if user_conf else [(os.path.join(home, ".nccl.conf"), "~/.nccl.conf")]
    confs.append((etc_conf, "/etc/nccl.conf"))
    for path, source in confs:
        text = _read(path, errors) if path else None
        for line, name, value in parse_nccl_conf(text or ""):
            add(name, value, source, path, line)

    if shell:
        login = login_shell_env(shell, timeout, errors)
        for name in sorted(login or {}):
            if name.startswith("NCCL_") and env.get(name) != login[name]:
                add(name, login[name], "login shell", shell, wins=False)
    for path in profiles:
        text = _read(path, errors)
        for line, name, value in parse_profile(text or ""):
            add(name, value, "profile file", path, line, wins=False)
    return {"effective": effective, "found": found, "errors": errors, "login_shell": shell or None,
            "cuda_device_order": env.get("CUDA_DEVICE_ORDER")}


if __name__ == "__main__":
    run(main)
