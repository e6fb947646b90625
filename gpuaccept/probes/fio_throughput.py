"""Filesystem throughput per directory with fio: sequential read/write GB/s and 4 KiB random-read IOPS.

Args (JSON object; only ``paths`` is required)::

    {"paths": ["/mnt/nvme0/scratch", ...],   # directories to test, one after another
     "tests": ["seq_write", "seq_read", "rand_read"],   # default all three, run in this order
     "size": 4294967296,        # bytes per fio job file (default 4 GiB); total = size * numjobs,
                                #   shrunk so free space stays above the margin
     "runtime": 20,             # seconds per test (fio --runtime --time_based)
     "numjobs": 4, "iodepth": 32,
     "bs": "1M",                # sequential block size (fio syntax)
     "rand_bs": 4096,           # random-read block size, bytes
     "ioengine": null,          # default libaio when this fio has it, else psync
     "direct": 1,               # O_DIRECT (page cache bypassed)
     "min_free_bytes": null,    # free-space margin; default max(5 GiB, 5 % of the filesystem)
     "devices": [],             # raw block devices to READ (fio --readonly); ignored unless
     "allow_destructive": false,  #   allow_destructive is true. Never written.
     "fio": "fio"}              # fio executable

Output::

    {"fio_version", "ioengine", "host_conditions",
     "paths": [{"path", "ok", "error", "failure", "fstype", "mount_point", "mount_source", "mount_root", "device", "root_fs",
                "free_bytes", "margin_bytes", "total_bytes", "numjobs", "iodepth",
                "seq_read_gbps", "seq_write_gbps", "rand_read_iops",
                "tests": {"seq_read": {"gbps", "iops", "io_bytes", "runtime_ms", "lat_mean_us",
                                       "started", "command"}, ...},
                "fio_messages": [...]}],
     "devices": [{"device", "ok", "error", "seq_read_gbps", "skipped"}]}

Units: GB/s = 1e9 B/s, from fio's ``bw_bytes`` (bytes per second over the job's runtime, summed over
the jobs by ``--group_reporting``); IOPS from fio's ``iops``. fio always runs with
``--output-format=json``; lines it prints before (or after) the JSON document, and its stderr, are
kept as ``fio_messages``. A job with a nonzero ``error`` fails its path with the errno,
``os.strerror`` and fio's own lines about it (``fio_error_detail``: e.g. "fio: looks like your file system does
not support direct=1/buffered=0", "fio: io_u error on file ...: read offset=..., buflen=...").

Order per path (the set-up is ``_storage.scratch``, shared with storage_to_gpu and gds): (1) the mount
holding the path is looked up in /proc/self/mountinfo (longest mount point that prefixes the resolved path)
and reported: ``mount_point``, ``mount_source``, ``fstype``, ``mount_root`` (the folder of the filesystem
mounted there), ``device`` (major:minor) and ``root_fs`` (the same filesystem as ``/``: the OS disk; the
controller fails such a path unless the inventory expects it, see gpuaccept/config/storage.py);
tmpfs, ramfs, overlay, squashfs and fuse* fail the path ("not a block-backed filesystem (tmpfs)") before
anything is written -- a RAM disk must never pass as a drive; (2) free space (os.statvfs: f_bavail *
f_frsize) minus the margin bounds the total size; with less than 64 MiB of room the path fails ("not
enough free space ..."); (3) fio writes its files in a fresh ``<path>/.gpuaccept-<random>`` folder, removed
in ``finally`` and on SIGTERM/SIGHUP (the runner kills the process group with TERM first on timeout).

A fio run stopped midway (fio killed by SIGTERM/SIGINT still prints the JSON of what it ran, error 0, and
exits 128) fails its path: ``cut_short``: nonzero exit or under 90 % of ``runtime``.

A failing path does not stop the others: its entry has ``ok: false``, ``error`` (a line for people) and
``failure`` (the fact, for the controller: ``{"reason": ...}``): the set-up's refusals of ``_storage.Refused``
(``free_space`` with ``free_bytes`` and ``need_bytes``, ``read_only`` with ``errno`` "EROFS" and ``seen_by``,
``not_writable``, ``placement``, ``not_block_backed``); a fio job's errno (``fio_errno``, with ``errno`` the
number and ``errno_name``; EROFS, ENOSPC and EDQUOT become ``read_only`` and ``free_space``, since the
filesystem, not the drive, refused); ``fio_timeout``, ``fio_no_output`` (with ``rc``), ``fio_cut_short`` (with
``rc``, ``ran_s``), ``fio_no_figure``. The probe fails as a whole only when fio is missing or the arguments are
wrong.

``host_conditions``: what else ran on the host while fio ran (``_hostwatch.Watch``, over every path and
device; fio and its job processes are the probe's own).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import time

from _hostwatch import Watch as HostWatch
from _probe import ProbeFailed, log, reject_unknown, run
from _storage import GIB, MIB, Refused, Terminated, errno_name, install_signal_cleanup, placement, read_only, scratch

TESTS = ("seq_write", "seq_read", "rand_read")
RW = {"seq_write": "write", "seq_read": "read", "rand_read": "randread"}
ARG_KEYS = {"paths", "tests", "size", "runtime", "numjobs", "iodepth", "bs", "rand_bs", "ioengine", "direct",
            "min_free_bytes", "devices", "allow_destructive", "fio"}
PLACEMENT_KEYS = ("mount_point", "mount_source", "fstype", "mount_root", "device", "root_fs")


# -- fio --------------------------------------------------------------------------------------------
def fio_engines(fio: str) -> set[str]:
    """I/O engines this fio build lists in ``fio --enghelp``."""
    try:
        out = subprocess.run([fio, "--enghelp"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {ln.strip() for ln in out.splitlines()[1:] if ln.strip()}


def parse_fio_output(stdout: str, stderr: str = "") -> tuple[dict | None, list[str]]:
    """(fio's JSON document or None, message lines): the document starts at the first line that is
    exactly "{"; other stdout lines and every stderr line are messages."""
    lines = stdout.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.rstrip() == "{"), None)
    msgs = [ln.rstrip("\n") for ln in (lines if start is None else lines[:start]) if ln.strip()]
    doc = None
    if start is not None:
        text = "".join(lines[start:])
        try:
            doc, end = json.JSONDecoder().raw_decode(text)
            msgs += [ln for ln in text[end:].splitlines() if ln.strip()]
        except ValueError:
            msgs += [ln.rstrip("\n") for ln in lines[start:] if ln.strip()][:50]
    msgs += [ln for ln in stderr.splitlines() if ln.strip()]
    return (doc if isinstance(doc, dict) else None), msgs


_FIO_PID_ERR = re.compile(r"^fio: pid=\S+, err=(\d+)/")   # "fio: pid=5509, err=5/file:io_u.c:1896, func=..."
_FIO_IO_U = re.compile(r"^fio: io_u error on file ")     # "... /dev/sdb: Input/output error: read offset=..., buflen=..."


def fio_error_detail(msgs: list[str], limit: int = 2) -> list[str]:
    """fio's own words about a failure, most telling first, at most ``limit`` lines: its explanations
    (``fio: looks like your file system does not support direct=1/buffered=0``), then the failed I/O (``fio:
    io_u error on file /dev/sdb: Input/output error: read offset=184912257024, buflen=4096``), then the
    ``fio: pid=..., err=N/file:..., func=..., error=...`` summary. ``msgs``: the message lines of
    :func:`parse_fio_output`; lines that do not start with ``fio:`` (job banners) are left out. Real
    samples: ``tests/data/field/fio-output.txt``."""
    lines = list(dict.fromkeys(m.strip() for m in msgs if m.strip().startswith("fio:")))
    hints = [m for m in lines if not _FIO_PID_ERR.match(m) and not _FIO_IO_U.match(m)]
    return (hints + [m for m in lines if _FIO_IO_U.match(m)] + [m for m in lines if _FIO_PID_ERR.match(m)])[:limit]


def job_errors(doc: dict, msgs: list[str] | None = None) -> list[str]:
    """One line ``"fio job NAME: errno N (strerror)"`` per job of fio's JSON document ``doc`` whose
    ``error`` (an errno, 0 when the job succeeded) is nonzero, followed by fio's own message lines about it
    (:func:`fio_error_detail` of ``msgs``: ``"...: errno 22 (Invalid argument): fio: looks like your file
    system does not support direct=1/buffered=0"``); ``[]`` when every job succeeded."""
    out = []
    detail = "; ".join(fio_error_detail(msgs or []))
    for job in doc.get("jobs") or []:
        err = job.get("error") or 0
        if err:
            out.append(f"fio job {job.get('jobname', '?')}: errno {err} ({os.strerror(int(err))})"
                       + (f": {detail}" if detail else ""))
    return out


def summarize(doc: dict, direction: str) -> dict:
    """The figures of one fio run from its JSON document.

    ``doc``: fio's ``--output-format=json`` document, ``{"jobs": [{"read": {...}, "write": {...}}, ...]}``;
    with ``--group_reporting`` (as every command here runs) ``jobs`` has one entry holding the whole group's
    sums. ``direction``: ``"read"`` or ``"write"``, the per-direction object read from each job. Fields used
    (fio ``stat.c`` ``add_ddir_status_json``): ``bw_bytes`` bytes/s, ``iops`` IO/s, ``io_bytes`` bytes,
    ``runtime`` milliseconds, ``lat_ns.mean`` nanoseconds (submission to completion).

    Returns ``{"gbps": float, "iops": float, "io_bytes": int, "runtime_ms": int, "lat_mean_us": float}``:
    ``gbps`` = sum over jobs of ``bw_bytes`` / 1e9 (GB/s, GB = 1e9 bytes, rounded to 4 decimals);
    ``iops`` = sum over jobs (1 decimal); ``io_bytes`` = sum; ``runtime_ms`` = the longest job's runtime;
    ``lat_mean_us`` = the largest job mean latency / 1e3 (µs, 2 decimals; with one group-reported job it is
    the group's mean). A job without the direction, or a document without jobs, counts as 0. Pure.

    Older fio: ``bw_bytes`` was added in fio 3.2 (axboe/fio PR #487, 2017-11; Ubuntu 18.04's fio 3.1 lacks it);
    before, only ``bw`` in KiB/s (1024 B/s, fio HOWTO "JSON output"), used then (``bw * 1024``). ``lat_ns``
    came with fio 3.0; before, ``lat`` in µs. A job of the direction with neither ``bw_bytes`` nor ``bw``
    gives ``gbps`` None (no figure can be read: the caller fails the path), never 0.
    """
    jobs = doc.get("jobs") or []
    per = [j.get(direction) for j in jobs if isinstance(j.get(direction), dict)]
    if any("bw_bytes" not in d and "bw" not in d for d in per):
        bw = None
    else:
        bw = sum(float(d["bw_bytes"]) if "bw_bytes" in d else float(d.get("bw") or 0) * 1024 for d in per)
    iops = sum(float((j.get(direction) or {}).get("iops") or 0) for j in jobs)
    io = sum(int((j.get(direction) or {}).get("io_bytes") or 0) for j in jobs)
    rt = max([int((j.get(direction) or {}).get("runtime") or 0) for j in jobs] or [0])
    lat = [float(((j.get(direction) or {}).get("lat_ns") or {}).get("mean") or 0)
           or float(((j.get(direction) or {}).get("lat") or {}).get("mean") or 0) * 1e3 for j in jobs]
    return {"gbps": None if bw is None else round(bw / 1e9, 4), "iops": round(iops, 1), "io_bytes": io, "runtime_ms": rt,
            "lat_mean_us": round(max(lat or [0]) / 1e3, 2)}


def run_fio(cmd: list[str], timeout: float) -> tuple[dict | None, list[str], int]:
    """Run the fio command line ``cmd`` with a wall-clock ``timeout`` (seconds) and return
    ``(JSON document or None, message lines, return code)`` as :func:`parse_fio_output` splits its output.
    Raises subprocess.TimeoutExpired past the timeout (subprocess.run kills and reaps fio first, and does so
    too when :class:`_storage.Terminated` interrupts the wait)."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    doc, msgs = parse_fio_output(p.stdout, p.stderr)
    return doc, msgs, p.returncode


def timed_start(doc: dict, fig: dict, launched: float) -> float:
    """Unix time (s) at which the timed part of a fio run began: fio's report time (``timestamp_ms``, written as
    the run ends) less the run's ``runtime_ms``, so that neither fio's start-up nor its laying out of the files
    counts; ``launched`` (the time before fio was started) where fio gives no ``timestamp_ms``. What the shared-
    filesystem aggregate compares between hosts (gpuaccept.judging.storage.Aggregate.not_concurrent): with the
    launch time, a host slower to lay out its files, or to start fio on a loaded node, read as a run apart."""
    ts, rt = doc.get("timestamp_ms"), fig.get("runtime_ms")
    if isinstance(ts, (int, float)) and not isinstance(ts, bool) and isinstance(rt, (int, float)) and ts > 0:
        return max(launched, ts / 1e3 - rt / 1e3)
    return launched


SHORT_RUN = 0.9   # a time-based job that ran less than this share of --runtime was stopped (fio runs it whole)


def cut_short(test: str, fig: dict, rc: int, runtime: float, msgs: list[str]) -> str | None:
    """Why the figures ``fig`` (:func:`summarize`) of a fio run that printed its JSON document are not a whole
    measurement, or None when they are. fio stopped by a signal (SIGTERM/SIGINT from an operator, an
    out-of-memory or job-control kill of the fio process alone) still prints the JSON of the part it ran,
    with every job's ``error`` 0, and exits with a nonzero status (128 after a signal: fio ``sig_int`` sets
    ``exit_value = 128``); those figures cover a partial run and must not pass as a measurement. Two signs,
    either enough: ``rc`` nonzero, or a time-based run (every command here is ``--time_based``) whose
    ``runtime_ms`` is under ``SHORT_RUN`` of the requested ``runtime`` seconds. ``msgs``: fio's message lines
    (their ``fio:`` lines, e.g. "fio: terminating on signal 15", are quoted). Pure."""
    ran_s = fig.get("runtime_ms", 0) / 1e3
    if rc == 0 and ran_s >= runtime * SHORT_RUN:
        return None
    detail = "; ".join(fio_error_detail(msgs))
    return (f"fio {test} was stopped after {ran_s:.1f} s of {runtime:g} s (exit status {rc})"
            + (f": {detail}" if detail else "") + ": figures of a partial run are not a measurement")


def fio_ms(seconds: float) -> str:
    """``seconds`` as a fio time value in whole milliseconds (``"1500ms"``): fio reads a bare number as whole
    seconds and drops the fraction (``--runtime=0.5`` ran a time-based job for 6 ms, ``1.5`` for 1 s,
    fio 3.33), while the ``ms`` suffix is exact (fio HOWTO, "Time values": suffixes d, h, m, s, ms, us)."""
    return f"{max(0, round(float(seconds) * 1000))}ms"


def fio_path(path: str) -> str:
    """``path`` as fio's ``--directory``/``--filename`` need it: every ``:`` escaped as ``\\:``. fio splits
    both options on ``:`` into several directories/files (fio HOWTO, "filename": "Each colon in the wanted
    path must be escaped with a ``\\`` character"; "directory": the same escape), so an unescaped
    ``/dev/disk/by-path/pci-0000:3b:00.0-nvme-1`` or ``/mnt/a:b`` names other paths than the one given."""
    return path.replace(":", "\\:")


def fio_command(fio: str, test: str, directory: str | None, filename: str | None, *, bs, size: int,
                runtime: float, numjobs: int, iodepth: int, ioengine: str, direct: int, readonly: bool = False) -> list[str]:
    """The fio command line (list of arguments) of one test: JSON output, group reporting, time based.

    ``test``: a key of ``RW`` (seq_write, seq_read, rand_read); ``directory``: where each job gets its file
    ``gpuaccept.<job number>``, or ``filename``: one file or block device shared by the jobs; ``bs``: block
    size in fio syntax (``"1M"`` or bytes); ``size``: bytes per job file; ``runtime``: seconds;
    ``direct``: 1 for O_DIRECT. seq_write ends with an fsync (``--end_fsync=1``) so the figure includes
    getting the data to the drive; rand_read does not repeat the random sequence (``--randrepeat=0``) or
    track covered blocks (``--norandommap``); ``readonly`` adds ``--readonly`` (fio refuses every write).
    """
    cmd = [fio, "--output-format=json", "--group_reporting", f"--name={test}", f"--rw={RW[test]}", f"--bs={bs}",
           f"--size={size}", f"--numjobs={numjobs}", f"--iodepth={iodepth}", f"--ioengine={ioengine}",
           f"--direct={direct}", f"--runtime={fio_ms(runtime)}", "--time_based"]
    if directory:
        cmd += [f"--directory={fio_path(directory)}", "--filename_format=gpuaccept.$jobnum"]
    if filename:
        cmd += [f"--filename={fio_path(filename)}"]
    if test == "seq_write":
        cmd += ["--end_fsync=1"]
    if test == "rand_read":
        cmd += ["--randrepeat=0", "--norandommap"]
    if readonly:
        cmd += ["--readonly"]
    return cmd


def measure_path(path: str, a: dict, fio: str, engine: str) -> dict:
    """Measure one directory; returns its entry of the output's ``paths`` (shape in the module docstring).

    ``a``: the probe's arguments (sizes, tests); ``fio``: the fio executable; ``engine``: fio ioengine.
    The mount holding ``path`` is reported first (``mount_point``, ``mount_source``, ``fstype``,
    ``mount_root``, ``device``, ``root_fs``, see ``_storage.placement``): the controller judges whether the
    path is where the inventory says. Never raises ProbeFailed for a problem of this path (those become
    ``ok: false`` and ``error``); :class:`_storage.Terminated` (SIGTERM/SIGHUP) propagates after the test
    folder is removed.
    """
    res: dict = {"path": path, "ok": False, "error": None, "failure": None, "fio_messages": [], "tests": {},
                 "seq_read_gbps": None, "seq_write_gbps": None, "rand_read_iops": None}
    where = placement(path)
    res.update({k: where[k] for k in PLACEMENT_KEYS})
    numjobs, iodepth = int(a.get("numjobs", 4)), int(a.get("iodepth", 32))
    try:
        with scratch(path, int(a.get("size", 4 * GIB)) * numjobs, a.get("min_free_bytes")) as s:
            total = s["bytes"]
            unit = MIB if total >= MIB * numjobs else 4096      # whole MiB per job file when there is room
            per_job = max(unit, total // numjobs // unit * unit)
            res.update(free_bytes=s["free_bytes"], margin_bytes=s["margin_bytes"], total_bytes=per_job * numjobs,
                       numjobs=numjobs, iodepth=iodepth)
            errors = _run_tests(path, s["workdir"], a, fio, engine, per_job, numjobs, iodepth, res)
    except Terminated:
        raise
    except ProbeFailed as e:
        res["error"] = str(e)
        res["failure"] = e.facts if isinstance(e, Refused) else {"reason": "setup"}
        return res
    res["ok"] = not errors
    res["error"] = f"{path}: " + "; ".join(errors) if errors else None
    return res


def _run_tests(path: str, work: str, a: dict, fio: str, engine: str, per_job: int, numjobs: int, iodepth: int,
               res: dict) -> list[str]:
    """Run the selected tests in ``work``, one after another, filling ``res`` (``failure``: the first failing
    test's fact, module docstring); the error lines (the first failing test stops the rest)."""
    runtime = float(a.get("runtime", 20))
    for test in a.get("tests") or TESTS:
        bs = a.get("rand_bs", 4096) if test == "rand_read" else a.get("bs", "1M")
        cmd = fio_command(fio, test, work, None, bs=bs, size=per_job, runtime=runtime, numjobs=numjobs,
                          iodepth=iodepth, ioengine=engine, direct=int(a.get("direct", 1)))
        started = time.time()
        log(f"{path}: {' '.join(cmd)}")
        try:
            doc, msgs, rc = run_fio(cmd, timeout=runtime * 3 + 600)
        except subprocess.TimeoutExpired:
            res["failure"] = {"reason": "fio_timeout", "test": test, "timeout_s": runtime * 3 + 600}
            return [f"fio {test} did not finish within {runtime * 3 + 600:.0f} s"]
        res["fio_messages"] += msgs
        if doc is None:
            missing = engine_missing(msgs)
            res["failure"] = ({"reason": "fio_engine_missing", "test": test, "engine": missing} if missing else
                              {"reason": "fio_no_output", "test": test, "rc": rc})
            return [f"fio {test}: no JSON output (rc {rc}): "
                    f"{'; '.join(fio_error_detail(msgs) or msgs[-1:] or ['no output'])[:300]}"]
        errs = job_errors(doc, msgs)
        if errs:
            res["failure"] = job_failure(path, test, doc, per_job * numjobs)
            return errs
        fig = summarize(doc, "write" if test == "seq_write" else "read")
        cut = cut_short(test, fig, rc, runtime, msgs)
        if cut:
            res["failure"] = {"reason": "fio_cut_short", "test": test, "rc": rc, "ran_s": fig["runtime_ms"] / 1e3}
            return [cut]
        if fig["gbps"] is None:
            res["failure"] = {"reason": "fio_no_figure", "test": test}
            return [f"fio {test}: its JSON gives neither bw_bytes nor bw for the job (fio "
                    f"{doc.get('fio version', '?')}): no figure can be read"]
        fig.update(started=round(timed_start(doc, fig, started), 3), command=cmd)
        res["tests"][test] = fig
        if test == "rand_read":
            res["rand_read_iops"] = fig["iops"]
        else:
            res[f"{test}_gbps"] = fig["gbps"]
    return []


#: fio's words for an I/O engine it cannot load (fio ioengines.c: "fio: engine %s not loadable"): the engine's
#: library (libaio, liburing) is not installed on the node
_ENGINE_MISSING = re.compile(r"engine (\S+) not loadable")


def engine_missing(msgs: list[str]) -> str | None:
    """The I/O engine fio said it could not load (its messages ``msgs``), or None. The one place fio's words
    for it are read."""
    for m in msgs:
        found = _ENGINE_MISSING.search(m or "")
        if found:
            return found.group(1)
    return None


def job_failure(path: str, test: str, doc: dict, total: int) -> dict:
    """The ``failure`` fact of a fio run whose job reported an errno: ``read_only`` when it is EROFS or the
    filesystem now reads ST_RDONLY (an ext4 error remounted it mid-run), ``free_space`` for ENOSPC or EDQUOT
    (``need_bytes``: the run's ``total`` bytes), else ``fio_errno`` with the number and its name."""
    import errno
    err = next((int(j.get("error")) for j in doc.get("jobs") or [] if j.get("error")), 0)
    ro = read_only(path)
    if err == errno.EROFS or ro is not None:
        return {**(ro.facts if ro is not None else {"reason": "read_only", "path": path, "read_only": True,
                                                     "errno": "EROFS", "seen_by": "fio"}), "test": test,
                "fio_errno": errno_name(err)}
    if err in (errno.ENOSPC, errno.EDQUOT):
        try:
            st = os.statvfs(path)
            free = st.f_bavail * st.f_frsize
        except OSError:
            free = None
        return {"reason": "free_space", "path": path, "free_bytes": free, "need_bytes": total, "margin_bytes": None,
                "errno": errno_name(err), "test": test}
    return {"reason": "fio_errno", "test": test, "errno": err, "errno_name": errno_name(err)}


def read_device(dev: str, a: dict, fio: str, engine: str) -> dict:
    """Sequential READ of a raw block device (fio --readonly: fio refuses any write)."""
    res: dict = {"device": dev, "ok": False, "error": None, "seq_read_gbps": None, "skipped": None}
    try:
        if not stat.S_ISBLK(os.stat(dev).st_mode):
            res["error"] = f"{dev}: not a block device"
            return res
    except OSError as e:
        res["error"] = f"{dev}: {e.strerror}"
        return res
    runtime = float(a.get("runtime", 20))
    cmd = fio_command(fio, "seq_read", None, dev, bs=a.get("bs", "1M"), size=int(a.get("size", 4 * GIB)),
                      runtime=runtime, numjobs=int(a.get("numjobs", 4)), iodepth=int(a.get("iodepth", 32)),
                      ioengine=engine, direct=1, readonly=True)
    doc, msgs, rc = run_fio(cmd, timeout=runtime * 3 + 600)
    res["fio_messages"] = msgs
    if doc is None:
        detail = fio_error_detail(msgs) or msgs[-1:]
        res["error"] = f"{dev}: fio gave no JSON (rc {rc})" + (f": {'; '.join(detail)[:300]}" if detail else "")
    elif job_errors(doc, msgs):
        res["error"] = f"{dev}: " + "; ".join(job_errors(doc, msgs))
    else:
        fig = summarize(doc, "read")
        cut = cut_short("seq_read", fig, rc, runtime, msgs)
        if cut:
            res["error"] = f"{dev}: {cut}"
        elif fig["gbps"] is None:
            res["error"] = f"{dev}: fio's JSON gives neither bw_bytes nor bw: no figure can be read"
        else:
            res["seq_read_gbps"] = fig["gbps"]
            res["ok"] = True
    return res


def main(a: dict) -> dict:
    reject_unknown(a, ARG_KEYS)
    bad = set(a.get("tests") or ()) - set(TESTS)
    if bad:
        raise ProbeFailed(f"unknown test(s): {', '.join(sorted(bad))} (known: {', '.join(TESTS)})")
    install_signal_cleanup()
    fio = shutil.which(a.get("fio", "fio"))
    if not fio:
        raise ProbeFailed(f"fio not installed (no '{a.get('fio', 'fio')}' on PATH)",
                          missing_program=os.path.basename(str(a.get("fio", "fio"))))
    version = subprocess.run([fio, "--version"], capture_output=True, text=True).stdout.strip()
    engine = a.get("ioengine") or ("libaio" if "libaio" in fio_engines(fio) else "psync")
    host = HostWatch().start()  # while fio runs; fio and its jobs are the probe's own
    try:
        paths = [measure_path(p, a, fio, engine) for p in a.get("paths") or []]
        devices = []
        for dev in a.get("devices") or []:
            if not a.get("allow_destructive"):
                devices.append({"device": dev, "ok": True, "error": None, "seq_read_gbps": None,
                                "skipped": "raw device reads need storage_allow_destructive: true"})
            else:
                devices.append(read_device(dev, a, fio, "libaio" if engine == "libaio" else "psync"))
    finally:
        host.stop()
    return {"fio_version": version, "ioengine": engine, "paths": paths, "devices": devices,
            "host_conditions": host.result()}


if __name__ == "__main__":
    run(main)
