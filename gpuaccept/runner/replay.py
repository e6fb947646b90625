"""Saved probe documents: kept per run, and answered from in a replay (``gpuaccept_replay: DIR``).

Each document is saved as ``<dir>/<probe>-<args digest>.json`` holding ``{"probe", "args", "doc", "release"}``:
the arguments it was asked for and the gpuaccept release that asked (documents saved before releases were
recorded have no ``release``). A replay answers a probe from the document saved with the arguments it asks for
(:func:`replay_probe`). When there is none, a saved document whose arguments differ is still used where the
difference cannot change the figure judged, and the reason is handed back as a note for the report:

* the arguments that say *when* a probe ran (:data:`TIME_ARGS`, and any named ``*_epoch``: :func:`time_args`):
  ignored, as always;
* the arguments a ``--profile`` changes (:data:`DURATION_ARGS`, read from gpuaccept.config.profiles: iterations,
  seconds, warm-up): how long it measured, not what; a quick-profile replay of a standard capture reads its
  documents, noting "measured with iters=100, asked iters=10";
* an argument a newer release adds, where the saved document shows it would have changed nothing
  (:data:`ADDED_ARGS`): ``nccl_allreduce``'s ``env: {NCCL_ALGO: Ring}`` pin, when NCCL chose Ring at every size
  of the saved sweep;
* ``nccl_allreduce`` asked for sizes that a saved sweep measured (the at-size call of a newer release): the
  sweep's rows at those sizes.

Otherwise the error names the probe, the asked arguments and, for each saved document (:data:`LISTED_DOCUMENTS`
at most), the arguments that differ with both values (:data:`LISTED_KEYS` at most, each cut to
:data:`VALUE_CHARS`): one line of bounded length, whatever the arguments hold.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Callable

from gpuaccept import __version__
from gpuaccept.config.profiles import PROFILES
from gpuaccept.config.bounded import MAX_BYTES, read_bounded
from gpuaccept.config.shown import shown_path
from gpuaccept.errors import ConfigError, ProbeError, ReplayNotCaptured
from gpuaccept.runner.parse import probe_error

#: probe -> the arguments that say when or for how long it ran, not what it measures: a replay matches a saved
#: document without them, silently. xid_events' and host_kernel_log's since_epoch are the clock at the run's start
#: (less --xid-window: gpuaccept.runner.nodeclock.xid_args), so a replay of a run's own probes/<host> folder, later,
#: asks another; nccl_allreduce's deadline_s is the runner's (gpuaccept.runner.host.probe_deadline, from
#: --probe-timeout); burnin's seconds from --burnin-minutes (its document carries seconds_requested and its
#: windows, which the judging reads). Besides these, every argument named ``*_epoch`` (a point on a clock, by the
#: probes' rule that a key carries its unit) of any probe is one: :func:`time_args`.
TIME_ARGS = {"xid_events": ("since_epoch",), "host_kernel_log": ("since_epoch",), "nccl_allreduce": ("deadline_s",),
             "burnin": ("seconds",)}
REPLAY_TIME_ARGS = TIME_ARGS  # the name its callers know
#: the ending of an argument's name that makes it a time argument of any probe (seconds since the epoch)
EPOCH_SUFFIX = "_epoch"


def time_args(name: str, keys: set[str]) -> set[str]:
    """Of the argument names ``keys`` asked of or saved for probe ``name``, those a replay ignores: the probe's
    :data:`TIME_ARGS` and every name ending in :data:`EPOCH_SUFFIX`."""
    return set(TIME_ARGS.get(name, ())) | {k for k in keys if isinstance(k, str) and k.endswith(EPOCH_SUFFIX)}


#: probe -> the arguments a profile sets (gpuaccept.config.profiles.PROFILES): how long or how many times it
#: measures, the same sizes. A replay under another profile reads the document, with a note.
DURATION_ARGS: dict[str, set[str]] = {}
for _profile in PROFILES.values():
    for _probe, _args in _profile.items():
        DURATION_ARGS.setdefault(_probe, set()).update(_args)


def _algo_pin_changes_nothing(value: Any, doc: dict) -> str | None:
    """``env`` asked of nccl_allreduce by a release that pins NCCL_ALGO, against a sweep saved without it: the
    reason it changes nothing (NCCL chose that algorithm at every size), or None."""
    if not isinstance(value, dict) or set(value) != {"NCCL_ALGO"}:
        return None
    want = str(value["NCCL_ALGO"]).upper()
    rows = doc.get("rows") or []
    seen = [str(r.get(k) or "").upper() for r in rows if isinstance(r, dict) for k in ("oop_algo", "ip_algo")]
    seen += [str(a.get("algo") or "").upper() for a in doc.get("algos") or [] if isinstance(a, dict)]
    if not rows or not seen or not all(s.split("/")[0] == want for s in seen):
        return None
    return (f"NCCL_ALGO={value['NCCL_ALGO']} is pinned now; the saved sweep ran with NCCL's own choice, which was "
            f"{value['NCCL_ALGO']} at every size")


#: probe -> {argument a newer release adds: test(asked value, saved document) -> reason it changes nothing, or None}
ADDED_ARGS: dict[str, dict[str, Callable[[Any, dict], str | None]]] = {
    "nccl_allreduce": {"env": _algo_pin_changes_nothing},
}


#: largest saved document read in a replay, bytes: a capture of gpuaccept's own is at most a few MB (a
#: burn-in's windows, an all-reduce sweep); a file past it is no document gpuaccept saved
CAPTURE_MAX_BYTES = MAX_BYTES


def probe_key(name: str, args: dict | None) -> str:
    """``<probe>-<first 10 hex of the SHA-1 of the sorted-key JSON of args>``: the saved document's file stem."""
    digest = hashlib.sha1(json.dumps(args or {}, sort_keys=True).encode()).hexdigest()[:10]
    return f"{name}-{digest}"


_probe_key = probe_key  # the name its callers know


def _sizes(args: dict) -> list[int] | None:
    """The message sizes an nccl_allreduce sweep of ``args`` measures (min_bytes .. max_bytes by factor)."""
    lo, hi, f = args.get("min_bytes"), args.get("max_bytes"), args.get("factor", 2)
    if not all(isinstance(v, int) and v > 0 for v in (lo, hi, f)) or lo > hi or f < 2:
        return None
    out = [lo]
    while out[-1] * f <= hi:
        out.append(out[-1] * f)
    return out


#: most characters of one argument's value in a refusal (its JSON), of the asked arguments shown whole, of the saved
#: documents and differing keys listed: a "no saved document" line stays one line of a few hundred characters,
#: whatever the arguments hold (host_kernel_log's are ~4 KB of regular expressions)
VALUE_CHARS = 60
ASKED_CHARS = 160
LISTED_DOCUMENTS = 3
LISTED_KEYS = 3


def short(value: Any, limit: int = VALUE_CHARS) -> str:
    """``value``'s sorted-key JSON (control and non-ASCII characters escaped), cut to ``limit`` characters with
    ``... (N characters)`` after a cut one."""
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def compare(name: str, saved: dict, asked: dict, doc: dict) -> tuple[list[str], list[str], dict]:
    """How a document saved with ``saved`` arguments answers ``asked`` ones (pure): ``(notes, refusals, doc)``.
    ``refusals`` empty: usable, ``notes`` say why each difference changes nothing, ``doc`` is what to answer
    (the saved document, or its rows at the asked sizes). Else ``refusals`` say what differs."""
    notes, refusals = [], []
    ignored = time_args(name, set(saved) | set(asked))
    durations = DURATION_ARGS.get(name, set())
    added = ADDED_ARGS.get(name, {})
    size_keys = {"min_bytes", "max_bytes"} if name == "nccl_allreduce" else set()
    for key in sorted(set(saved) | set(asked)):
        if key in ignored or key in size_keys or saved.get(key, None) == asked.get(key, None) \
                and (key in saved) == (key in asked):
            continue
        if key in durations:
            notes.append(f"measured with {key}={saved.get(key, 'its default')}, asked {key}="
                         f"{asked.get(key, 'its default')} (how long, not what: --profile)")
        elif key not in saved and key in added and added[key](asked[key], doc):
            notes.append(added[key](asked[key], doc))
        elif key not in saved:
            refusals.append(f"{key} not saved (asked {short(asked[key])})")
        elif key not in asked:
            refusals.append(f"{key}={short(saved[key])} saved, not asked")
        else:
            refusals.append(f"{key}: saved {short(saved[key])}, asked {short(asked[key])}")
    if size_keys and not refusals and any(saved.get(k) != asked.get(k) for k in size_keys):
        want, have = _sizes(asked), _sizes(saved)
        rows = [r for r in doc.get("rows") or [] if isinstance(r, dict) and r.get("bytes") in (want or [])]
        if want and have and set(want) <= set(have) and len(rows) == len(want):
            notes.append(f"sizes {asked['min_bytes']}..{asked['max_bytes']} B read from the saved sweep "
                         f"{saved['min_bytes']}..{saved['max_bytes']} B (its rows at those sizes)")
            doc = {**doc, "rows": rows}
        else:
            refusals.append(f"sizes: saved {saved.get('min_bytes')}..{saved.get('max_bytes')} B, asked "
                            f"{asked.get('min_bytes')}..{asked.get('max_bytes')} B")
    return notes, refusals, doc


def _saved_documents(directory: str, name: str) -> list[tuple[str, dict]]:
    """(file name, saved record) of every readable saved document of ``name`` in ``directory``, sorted."""
    out = []
    if not os.path.isdir(directory):
        return out
    for f in sorted(os.listdir(directory)):
        if not (f.startswith(name + "-") and f.endswith(".json")):
            continue
        try:
            saved = json.loads(_read(os.path.join(directory, f)))
        except (OSError, ValueError):
            continue
        except ConfigError as e:
            if getattr(e, "past_bound", False):
                raise  # a capture past its bound is not passed over: replay_probe names it
            continue
        if isinstance(saved, dict) and isinstance(saved.get("args"), dict) and isinstance(saved.get("doc"), dict):
            out.append((f, saved))
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
    """Keep a probe's document as ``<directory>/<name>-<args digest>.json`` (with its args and this release), best
    effort.
    Nothing under the report folder is followed through a symlink (:func:`_folder_fd`; the file itself is
    created with O_NOFOLLOW and renamed into place): such a document is not kept."""
    try:
        fd = _folder_fd(directory)
    except OSError:
        return  # the figures still reach results.json; a full disk must not fail the measurement
    try:
        final = probe_key(name, args) + ".json"
        tmp = final + ".tmp"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=fd)
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"probe": name, "args": args or {}, "release": __version__, "doc": doc}, f, indent=1,
                      default=str)
        os.replace(tmp, final, src_dir_fd=fd, dst_dir_fd=fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def replay_probe(host: str, directory: str, name: str, args: dict | None, notes: list[str] | None = None) -> dict:
    """The probe document saved for ``name`` with ``args``, else the one saved document whose differences
    cannot change the figure judged (:func:`compare`; the fewest notes wins, a tie is no answer); each note
    is appended to ``notes`` as ``"<probe>: <file> (release R): <note>"``.

    Raises ProbeError naming the folder, the asked arguments and each saved document's arguments with what
    differs, when none answers; naming the file and the bound, for a saved document past a bound of
    :func:`_read`; and as a live probe would for a saved failure.
    """
    try:
        return _replay(host, directory, name, args, notes)
    except ConfigError as e:  # a saved document past a bound of gpuaccept.config.bounded.read_bounded
        raise ProbeError(host, f"{name}: {e} (replay)") from None


def _read(path: str) -> str:
    """A saved document's text, read within the bounds of :func:`gpuaccept.config.bounded.read_bounded`
    (:data:`CAPTURE_MAX_BYTES`, a line of ``MAX_LINE``, ``READ_TIMEOUT_S`` for a pipe or device: a capture
    folder holding ``/dev/zero`` or a FIFO must not hang or exhaust the run). Raises ConfigError past a bound
    (one line naming the file and the bound), ValueError for text that is not UTF-8."""
    return read_bounded(path, "saved probe document", ConfigError, max_bytes=CAPTURE_MAX_BYTES).decode("utf-8")


def _replay(host: str, directory: str, name: str, args: dict | None, notes: list[str] | None) -> dict:
    """:func:`replay_probe`, raising ConfigError for a saved document past a bound."""
    asked = args or {}
    path = os.path.join(directory, probe_key(name, asked) + ".json")
    found_notes: list[str] = []
    doc = None
    if not os.path.exists(path):
        usable, why_not = [], []
        for f, saved in _saved_documents(directory, name):
            n, refused, answer = compare(name, saved["args"], asked, saved["doc"])
            if refused:
                more = f"; and {len(refused) - LISTED_KEYS} more" if len(refused) > LISTED_KEYS else ""
                why_not.append((len(refused), f"{f}: {'; '.join(refused[:LISTED_KEYS])}{more}"))
            else:
                usable.append((len(n), f, saved, n, answer))
        usable.sort(key=lambda u: u[0])
        why_not = [text for _, text in sorted(why_not, key=lambda w: w[0])]  # the nearest saved documents first
        if not usable or (len(usable) > 1 and usable[0][0] == usable[1][0]):
            more = f" | and {len(why_not) - LISTED_DOCUMENTS} more" if len(why_not) > LISTED_DOCUMENTS else ""
            saved_part = (f"; saved: {' | '.join(why_not[:LISTED_DOCUMENTS])}{more}" if why_not else "") + (
                f"; {len([u for u in usable if u[0] == usable[0][0]])} saved documents answer it equally"
                if usable else "")
            raise ReplayNotCaptured(host, f"{name}: no saved document for arguments {short(asked, ASKED_CHARS)} "
                                          f"in {shown_path(directory)} (replay){saved_part}",
                                    {"probe": name, "folder": shown_path(directory)})
        _, f, saved, n, doc = usable[0]
        release = saved.get("release") or "before 0.1.0 (no release recorded)"
        found_notes = [f"{name}: {f} (release {release}): {x}" for x in n]
        path = os.path.join(directory, f)
    if doc is None:
        try:
            saved_doc = json.loads(_read(path))
            doc = saved_doc["doc"] if isinstance(saved_doc, dict) else None
        except (OSError, ValueError, KeyError) as e:
            raise ProbeError(host, f"{name}: saved document {path} unreadable: {type(e).__name__}: "
                                   f"{str(e).splitlines()[0][:200]} (replay)") from None
    if not isinstance(doc, dict):
        raise ProbeError(host, f"{name}: saved document {path} holds no probe document (replay)")
    if doc.get("failed"):
        raise probe_error(host, f"{name}: {doc.get('msg')} (replayed)", "the replayed node's python",
                          doc.get("missing_module"), doc.get("missing_program"), doc.get("setup"),
                          doc.get("ranks_failed"))
    if notes is not None:
        notes.extend(x for x in found_notes if x not in notes)
    return doc
