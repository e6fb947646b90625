"""Host keys of one SSH connection: the known_hosts files read and written, and the unknown-key policy.

:class:`KnownHosts` reads ``~/.ssh/known_hosts`` and the extra files (``--known-hosts``, the host's
``Host.known_hosts``) as OpenSSH would, ``@revoked`` marks included, and appends keys accepted on first use;
:class:`HostKeyPolicy` refuses an unknown key unless new keys are accepted. Errors are HostKeyError naming the host.
"""
from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import logging
import os
import threading

from gpuaccept.config.sshlib import import_paramiko

paramiko = import_paramiko()
from paramiko.hostkeys import HostKeyEntry  # noqa: E402 - after paramiko's import without Invoke

from gpuaccept.errors import HostKeyError
from gpuaccept.transport.shell import quote as _quote

log = logging.getLogger("gpuaccept.transport.ssh")


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style ``SHA256:<base64>`` fingerprint of ``key``."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _read(path: str, host_name: str) -> tuple[list[tuple[str, paramiko.PKey]], dict[str, str]]:
    """The entries of known_hosts file ``path`` as ``(host name or hashed |1| name, key)`` pairs in file order, and
    its ``@revoked`` keys (base64 -> path:line); skipped as :meth:`KnownHosts.load` says. Missing file: nothing.
    Raises HostKeyError naming ``host_name`` when the file exists but cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except FileNotFoundError:
        return [], {}
    except OSError as e:
        raise HostKeyError(host_name, f"cannot read known_hosts file {path}: {e.strerror or e}") from None
    entries: list[tuple[str, paramiko.PKey]] = []
    revoked: dict[str, str] = {}
    for lineno, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@"):
            fields = line.split()
            if fields[0] == "@revoked" and len(fields) >= 4:
                revoked[fields[3]] = f"{path}:{lineno}"
            continue
        try:
            entry = HostKeyEntry.from_line(line, lineno)
        except Exception as e:
            log.debug("%s:%d: skipped known_hosts line: %s", path, lineno, e)
            continue
        if entry is None or entry.key is None:
            continue
        entries += [(h, entry.key) for h in entry.hostnames if not any(c in h for c in "*?!")]
    return entries, revoked


#: path -> (its stat signature, :func:`_read` of it): each known_hosts file parsed once while it is unchanged
_PARSED: dict[str, tuple[tuple, tuple[list, dict]]] = {}
_PARSED_LOCK = threading.Lock()


def _parsed(path: str, host_name: str) -> tuple[list[tuple[str, paramiko.PKey]], dict[str, str]]:
    """:func:`_read` of ``path``, cached while its inode, size and modification time stay the same (a key accepted
    on first use, appended by :meth:`KnownHosts.record`, changes them: the file is read again). Raises as
    :func:`_read`."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return [], {}
    except OSError:
        return _read(path, host_name)  # raises HostKeyError naming the host, as before
    sig = (st.st_ino, st.st_size, st.st_mtime_ns)
    with _PARSED_LOCK:
        hit = _PARSED.get(path)
        if hit is None or hit[0] != sig:
            hit = _PARSED[path] = (sig, _read(path, host_name))
    return hit[1]


def _matches(name: str, entry: str) -> bool:
    """Whether known_hosts host field ``entry`` (plain, or hashed ``|1|salt|hash``) names ``name``, as paramiko's
    ``HostKeys.lookup`` compares them."""
    if entry.startswith("|1|") and not name.startswith("|1|"):
        return hmac.compare_digest(paramiko.HostKeys.hash_host(name, entry), entry)
    return entry == name


class KnownHosts:
    """The known_hosts files of one host's connections.

    ``host_name``: the inventory host (named in errors and log lines); ``extra``: paths of extra files
    (``--known-hosts``, then the host's ``Host.known_hosts``; ``~`` expanded), read besides
    ``~/.ssh/known_hosts``. :attr:`files`: the files read, in order; :attr:`target`: the file newly accepted
    keys are appended to (the first extra file, else ``~/.ssh/known_hosts``).
    """

    def __init__(self, host_name: str, extra: list[str]):
        self.host_name = host_name
        extra = [os.path.expanduser(str(p)) for p in extra if p]
        user_file = os.path.expanduser("~/.ssh/known_hosts")
        self.files = [user_file] + [p for p in extra if p != user_file]
        self.target = extra[0] if extra else user_file

    def load_into(self, into: paramiko.HostKeys, names: tuple[str, ...] | None = None) -> dict[str, str]:
        """Add every file's entries to ``into`` (:meth:`load`); returns the ``@revoked`` keys (base64 -> path:line).
        ``names``: only the entries for these names (as paramiko looks a server up: ``address`` on port 22, else
        ``[address]:port``; plain or hashed ``|1|`` entries), each file parsed once per run while it is unchanged
        (:func:`_parsed`): a connection reads the one name it is checked under, so 128 hosts in one known_hosts
        file no longer cost 128 x 128 key parses and paramiko's linear ``HostKeys.add`` per entry (0.6 s of the
        controller's CPU at 128 loopback nodes). None: every entry, read now."""
        revoked: dict[str, str] = {}
        for path in self.files:
            if names is None:
                self.load(path, into, revoked)
                continue
            entries, marks = _parsed(path, self.host_name)
            revoked.update(marks)
            for hostname, key in entries:
                if any(_matches(n, hostname) for n in names):
                    into.add(hostname, key.get_name(), key)
        return revoked

    def load(self, path: str, into: paramiko.HostKeys, revoked: dict[str, str]) -> None:
        """Add the plain and hashed entries of known_hosts file ``path`` to ``into``; record
        ``@revoked`` keys (base64 -> path) in ``revoked``. Skips ``@cert-authority`` lines, wildcard
        patterns and malformed lines (paramiko would refuse the whole file). Missing file: nothing.
        Raises HostKeyError when the file exists but cannot be read."""
        entries, marks = _read(path, self.host_name)
        revoked.update(marks)
        for hostname, key in entries:
            into.add(hostname, key.get_name(), key)

    def changed_key_message(self, display: str, hostkey_name: str, got: paramiko.PKey,
                            expected: paramiko.PKey) -> str:
        """The operator's line for a host key that changed: both fingerprints and the ``ssh-keygen -R ... -f FILE``
        that removes the old key from each file holding it (``display``: ``[address]:port``; ``hostkey_name``: the
        name known_hosts files it under). The file is always named: the files whose entry for the name is the
        expected key, else those with any entry for it, else :attr:`target`."""
        cmd = f"ssh-keygen -R {_quote(hostkey_name)}"
        fixes = " and ".join(f"{cmd} -f {_quote(path)}" for path in self.files_holding(hostkey_name, expected))
        return (
            f"host key for {display} CHANGED (server offers {got.get_name()} {fingerprint(got)}, "
            f"known_hosts has {fingerprint(expected)}); possible man-in-the-middle; remove the old key "
            f"with {fixes} if the change is expected"
        )

    def files_holding(self, hostkey_name: str, key: paramiko.PKey) -> list[str]:
        """The files (in :attr:`files` order) whose entry for ``hostkey_name`` is ``key``; else those with any
        entry for the name; else [:attr:`target`]. Never empty."""
        exact: list[str] = []
        named: list[str] = []
        for path in self.files:
            hk = paramiko.HostKeys()
            try:
                self.load(path, hk, {})
            except HostKeyError:
                continue
            found = hk.lookup(hostkey_name)
            if not found:
                continue
            named.append(path)
            if any(k.asbytes() == key.asbytes() for k in found.values()):
                exact.append(path)
        return exact or named or [self.target]

    def record(self, hostname: str, key: paramiko.PKey) -> None:
        """Append ``hostname key`` to :attr:`target` (locked; skipped if already there). A file that cannot be
        written is logged, not raised: the key is trusted for this run all the same."""
        path = self.target
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        try:
            parent = os.path.dirname(path) or "."
            if not os.path.isdir(parent):
                os.makedirs(parent, mode=0o700, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "r+b") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                f.seek(0)
                existing = f.read()
                if line.encode() in existing.splitlines(keepends=True) or (
                    line.encode().rstrip(b"\n") in existing.splitlines()
                ):
                    return
                prefix = b"\n" if existing and not existing.endswith(b"\n") else b""
                f.write(prefix + line.encode())
                f.flush()
            log.warning("%s: accepted new host key %s for %s into %s", self.host_name, fingerprint(key), hostname, path)
        except OSError as e:
            log.warning("%s: accepted host key for %s but could not record it in %s: %s", self.host_name, hostname,
                        path, e)


class HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Unknown host key: refuse (HostKeyError naming ``host_name`` and ``display``), or with ``accept_new``
    accept it and record it in ``known`` (:meth:`KnownHosts.record`)."""

    def __init__(self, host_name: str, display: str, accept_new: bool, known: KnownHosts):
        self.host_name, self.display, self.accept_new, self.known = host_name, display, accept_new, known

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if not self.accept_new:
            raise HostKeyError(
                self.host_name,
                f"unknown host key for {self.display} ({key.get_name()} {fingerprint(key)}); to trust it on "
                f"first use rerun with --accept-new-host-keys, or add it to known_hosts",
            )
        self.known.record(hostname, key)
        client.get_host_keys().add(hostname, key.get_name(), key)
