"""Probe documents kept and read again: every document a run measures is saved as
``<folder>/<probe>-<args digest>.json`` (the run's ``probes/<host>`` folder); a host with ``gpuaccept_replay: DIR``
answers its probes from such a folder instead of running them."""
from __future__ import annotations

import hashlib
import json
import os

from gpuaccept.errors import ProbeError


def _probe_key(name: str, args: dict | None) -> str:
    digest = hashlib.sha1(json.dumps(args or {}, sort_keys=True).encode()).hexdigest()[:10]
    return f"{name}-{digest}"


#: probe -> the arguments that say when or for how long it ran, not what it measures: a replay matches a saved
#: document without them. xid_events' since_epoch is the clock at the test's start; nccl_allreduce's deadline_s
#: the runner's (gpuaccept.runner.host.probe_deadline, from --probe-timeout); burnin's seconds from
#: --burnin-minutes (its document carries seconds_requested and its windows, which the judging reads). Every other
#: argument must match.
REPLAY_TIME_ARGS = {"xid_events": ("since_epoch",), "nccl_allreduce": ("deadline_s",), "burnin": ("seconds",)}


def _replay_match(directory: str, name: str, args: dict | None) -> list[str]:
    """The saved documents of ``name`` in ``directory`` whose arguments equal ``args`` but for the probe's
    :data:`REPLAY_TIME_ARGS` (file names, sorted); a file that cannot be read is no match."""
    ignored = REPLAY_TIME_ARGS.get(name)
    if not ignored or not os.path.isdir(directory):
        return []
    want = {k: v for k, v in (args or {}).items() if k not in ignored}
    out = []
    for f in sorted(os.listdir(directory)):
        if not (f.startswith(name + "-") and f.endswith(".json")):
            continue
        try:
            with open(os.path.join(directory, f), encoding="utf-8") as fh:
                saved = json.load(fh)
        except (OSError, ValueError):
            continue
        got = saved.get("args") if isinstance(saved, dict) else None
        if isinstance(got, dict) and {k: v for k, v in got.items() if k not in ignored} == want:
            out.append(f)
    return out


def _folder_fd(directory: str) -> int:
    """An open descriptor of ``directory`` (``<report folder>/probes/<host>``), its last two parts made here
    when missing and opened without following a symlink: a ``probes`` or host entry that is a symlink (made by
    someone else under the report folder) raises OSError instead of sending the documents where it points.
    The report folder itself is the operator's (gpuaccept.config.outputs checked it)."""
    top, leaf = os.path.split(os.path.normpath(directory))
    base, mid = os.path.split(top)
    fd = os.open(base or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in (mid, leaf):
            try:
                os.mkdir(part, dir_fd=fd)
            except FileExistsError:
                pass
            sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd


def save_probe(directory: str, name: str, args: dict | None, doc: dict) -> None:
    """Keep a probe's document as ``<directory>/<name>-<args digest>.json`` (with its args), best effort.
    Nothing under the report folder is followed through a symlink (:func:`_folder_fd`; the file itself is
    created with O_NOFOLLOW and renamed into place): such a document is not kept."""
    try:
        fd = _folder_fd(directory)
    except OSError:
        return  # the figures still reach results.json; a full disk must not fail the measurement
    try:
        final = _probe_key(name, args) + ".json"
        tmp = final + ".tmp"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=fd)
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"probe": name, "args": args or {}, "doc": doc}, f, indent=1, default=str)
        os.replace(tmp, final, src_dir_fd=fd, dst_dir_fd=fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def replay_probe(host: str, directory: str, name: str, args: dict | None) -> dict:
    """The probe document saved for ``name`` with ``args``; for a probe of :data:`REPLAY_TIME_ARGS`, the one
    whose arguments match but for those (a saved xid_events window began at another time). A document saved
    with other arguments is another measurement and is never read in its place.

    Raises ProbeError naming the folder when there is none (or several match), and as a live probe would for a
    saved failure.
    """
    path = os.path.join(directory, _probe_key(name, args) + ".json")
    if not os.path.exists(path):
        saved = _replay_match(directory, name, args)
        if len(saved) != 1:
            raise ProbeError(host, f"{name}: no saved document for arguments {json.dumps(args or {}, sort_keys=True)} "
                                   f"in {directory} (replay)")
        path = os.path.join(directory, saved[0])
    try:
        with open(path, encoding="utf-8") as f:
            saved_doc = json.load(f)
        doc = saved_doc["doc"] if isinstance(saved_doc, dict) else None
    except (OSError, ValueError, KeyError) as e:
        raise ProbeError(host, f"{name}: saved document {path} unreadable: {type(e).__name__}: "
                               f"{str(e).splitlines()[0][:200]} (replay)") from None
    if not isinstance(doc, dict):
        raise ProbeError(host, f"{name}: saved document {path} holds no probe document (replay)")
    if doc.get("failed"):
        raise ProbeError(host, f"{name}: {doc.get('msg')} (replayed)")
    return doc
