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

    {"fio_version", "ioengine",
     "paths": [{"path", "ok", "error", "fstype", "mount_point", "mount_source",
                "free_bytes", "margin_bytes", "total_bytes", "numjobs", "iodepth",
                "seq_read_gbps", "seq_write_gbps", "rand_read_iops",
                "tests": {"seq_read": {"gbps", "iops", "io_bytes", "runtime_ms", "lat_mean_us",
                                       "started", "command"}, ...},
                "fio_messages": [...]}],
     "devices": [{"device", "ok", "error", "seq_read_gbps", "skipped"}]}

Units: GB/s = 1e9 B/s, from fio's ``bw_bytes`` (bytes per second over the job's runtime, summed over
the jobs by ``--group_reporting``); IOPS from fio's ``iops``. fio always runs with
``--output-format=json``; lines it prints before (or after) the JSON document, and its stderr, are
kept as ``fio_messages``. A job with a nonzero ``error`` fails its path with the errno and
``os.strerror``.

Order per path: (1) the mount holding the path is looked up in /proc/self/mountinfo (longest mount
point that prefixes the resolved path); tmpfs, ramfs, overlay, squashfs and fuse* fail the path
("not a block-backed filesystem (tmpfs)") before anything is written -- a RAM disk must never pass as
a drive; (2) free space (os.statvfs: f_bavail * f_frsize) minus the margin bounds the total size; with
less than 64 MiB of room the path fails ("not enough free space ..."); (3) fio writes its files in a
fresh ``<path>/.gpuaccept-<random>`` folder, removed in ``finally`` and on SIGTERM/SIGHUP (the runner
kills the process group with TERM first on timeout).

A failing path does not stop the others: its entry has ``ok: false`` and ``error``. The probe fails
as a whole only when fio is missing or the arguments are wrong.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import time

from _probe import ProbeFailed, log, reject_unknown, run

GIB = 1 << 30
MIB = 1 << 20
MIN_ROOM = 64 * MIB                      # less room than this is no useful test
NOT_BLOCK = ("tmpfs", "ramfs", "overlay", "squashfs", "devtmpfs")   # plus every fuse*
TESTS = ("seq_write", "seq_read", "rand_read")
RW = {"seq_write": "write", "seq_read": "read", "rand_read": "randread"}
ARG_KEYS = {"paths", "tests", "size", "runtime", "numjobs", "iodepth", "bs", "rand_bs", "ioengine", "direct",
            "min_free_bytes", "devices", "allow_destructive", "fio"}
WORKDIR_PREFIX = ".gpuaccept-"


class Terminated(ProbeFailed):
    """SIGTERM/SIGHUP arrived; raised from the signal handler so ``finally`` blocks clean up."""


def _on_signal(signum, _frame):
    for s in (signal.SIGTERM, signal.SIGHUP):  # a second signal must not interrupt the cleanup
        signal.signal(s, signal.SIG_IGN)
    raise Terminated(f"terminated by signal {signal.Signals(signum).name}; test files removed")


def install_signal_cleanup() -> None:
    """Turn SIGTERM and SIGHUP into a :class:`Terminated` exception (so ``finally`` runs)."""
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _on_signal)


# -- mounts and free space ------------------------------------------------------------------------
def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 ...)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> dict:
    """{"mount_point", "fstype", "source"} of the mount holding ``path`` (resolved): the longest
    mount point that is ``path`` or a parent of it; the last such line wins (over-mounts)."""
    real = os.path.realpath(path)
    best = None
    with open(mountinfo, encoding="utf-8", errors="replace") as f:
        for line in f:
            left, sep, right = line.partition(" - ")
            if not sep:
                continue
            fields = left.split()
            if len(fields) < 5:
                continue
            mp = _unescape(fields[4])
            if not (real == mp or real.startswith(mp.rstrip("/") + "/") or mp == "/"):
                continue
            rf = right.split()
            cand = {"mount_point": mp, "fstype": rf[0] if rf else "?", "source": _unescape(rf[1]) if len(rf) > 1 else ""}
            if best is None or len(mp) >= len(best["mount_point"]):
                best = cand
    if best is None:
        raise ProbeFailed(f"{path}: no mount found in {mountinfo}")
    return best


def not_block_backed(fstype: str) -> bool:
    """True for filesystems whose speed is not a drive's: RAM-backed, overlay, squashfs, FUSE."""
    return fstype in NOT_BLOCK or fstype.startswith("fuse")


def default_margin(st: os.statvfs_result) -> int:
    """max(5 GiB, 5 % of the filesystem's size)."""
    return max(5 * GIB, int(st.f_blocks * st.f_frsize * 0.05))


def plan_size(path: str, requested_total: int, margin: int | None) -> tuple[int, int, int]:
    """(total bytes to use, free bytes, margin bytes); raises ProbeFailed when there is no room for a
    useful test (< 64 MiB between free space and the margin)."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    m = default_margin(st) if margin is None else int(margin)
    room = free - m
    if room < MIN_ROOM:
        raise ProbeFailed(f"not enough free space on {path}: {free / GIB:.2f} GiB free, margin {m / GIB:.2f} GiB")
    return min(int(requested_total), room), free, m


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


def job_errors(doc: dict) -> list[str]:
    """"fio job NAME: errno N (strerror)" for every job whose ``error`` is nonzero."""
    out = []
    for job in doc.get("jobs") or []:
        err = job.get("error") or 0
        if err:
            out.append(f"fio job {job.get('jobname', '?')}: errno {err} ({os.strerror(int(err))})")
    return out


def summarize(doc: dict, direction: str) -> dict:
    """Figures of one group-reported fio run: ``direction`` "read" or "write"."""
    jobs = doc.get("jobs") or []
    bw = sum(float((j.get(direction) or {}).get("bw_bytes") or 0) for j in jobs)
    iops = sum(float((j.get(direction) or {}).get("iops") or 0) for j in jobs)
    io = sum(int((j.get(direction) or {}).get("io_bytes") or 0) for j in jobs)
    rt = max([int((j.get(direction) or {}).get("runtime") or 0) for j in jobs] or [0])
    lat = [float(((j.get(direction) or {}).get("lat_ns") or {}).get("mean") or 0) for j in jobs]
    return {"gbps": round(bw / 1e9, 4), "iops": round(iops, 1), "io_bytes": io, "runtime_ms": rt,
            "lat_mean_us": round(max(lat or [0]) / 1e3, 2)}


def run_fio(cmd: list[str], timeout: float) -> tuple[dict | None, list[str], int]:
    """Run fio; (JSON doc, messages, rc). subprocess.run kills and reaps fio if we are interrupted."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    doc, msgs = parse_fio_output(p.stdout, p.stderr)
    return doc, msgs, p.returncode


def fio_command(fio: str, test: str, directory: str | None, filename: str | None, *, bs, size: int,
                runtime: float, numjobs: int, iodepth: int, ioengine: str, direct: int, readonly: bool = False) -> list[str]:
    """The fio command line of one test (JSON output, group reporting, time based)."""
    cmd = [fio, "--output-format=json", "--group_reporting", f"--name={test}", f"--rw={RW[test]}", f"--bs={bs}",
           f"--size={size}", f"--numjobs={numjobs}", f"--iodepth={iodepth}", f"--ioengine={ioengine}",
           f"--direct={direct}", f"--runtime={runtime}", "--time_based"]
    if directory:
        cmd += [f"--directory={directory}", "--filename_format=gpuaccept.$jobnum"]
    if filename:
        cmd += [f"--filename={filename}"]
    if test == "seq_write":
        cmd += ["--end_fsync=1"]
    if test == "rand_read":
        cmd += ["--randrepeat=0", "--norandommap"]
    if readonly:
        cmd += ["--readonly"]
    return cmd


def make_workdir(path: str) -> str:
    """A fresh ``<path>/.gpuaccept-<random>`` folder (mode 0700)."""
    d = os.path.join(path, WORKDIR_PREFIX + secrets.token_hex(6))
    os.mkdir(d, 0o700)
    return d


def measure_path(path: str, a: dict, fio: str, engine: str) -> dict:
    """Measure one directory; the entry of ``paths`` in the output (never raises ProbeFailed for a
    problem of this path -- those become ``ok: false`` and ``error``; Terminated propagates)."""
    res: dict = {"path": path, "ok": False, "error": None, "fio_messages": [], "tests": {},
                 "seq_read_gbps": None, "seq_write_gbps": None, "rand_read_iops": None}
    if not os.path.isdir(path):
        res["error"] = f"{path}: no such directory"
        return res
    try:
        m = mount_of(path)
    except (OSError, ProbeFailed) as e:
        res["error"] = f"{path}: cannot read the mount table: {e}"
        return res
    res.update(fstype=m["fstype"], mount_point=m["mount_point"], mount_source=m["source"])
    if not_block_backed(m["fstype"]):
        res["error"] = f"{path}: not a block-backed filesystem ({m['fstype']})"
        return res
    numjobs, iodepth = int(a.get("numjobs", 4)), int(a.get("iodepth", 32))
    try:
        total, free, margin = plan_size(path, int(a.get("size", 4 * GIB)) * numjobs, a.get("min_free_bytes"))
    except ProbeFailed as e:
        res["error"] = str(e)
        return res
    unit = MIB if total >= MIB * numjobs else 4096      # whole MiB per job file when there is room
    per_job = max(unit, total // numjobs // unit * unit)
    res.update(free_bytes=free, margin_bytes=margin, total_bytes=per_job * numjobs, numjobs=numjobs, iodepth=iodepth)
    runtime = float(a.get("runtime", 20))
    work = None
    try:
        try:
            work = make_workdir(path)
        except OSError as e:
            res["error"] = f"{path}: cannot create a test folder: {e.strerror}"
            return res
        errors = []
        for test in a.get("tests") or TESTS:
            bs = a.get("rand_bs", 4096) if test == "rand_read" else a.get("bs", "1M")
            cmd = fio_command(fio, test, work, None, bs=bs, size=per_job, runtime=runtime, numjobs=numjobs,
                              iodepth=iodepth, ioengine=engine, direct=int(a.get("direct", 1)))
            started = time.time()
            log(f"{path}: {' '.join(cmd)}")
            try:
                doc, msgs, rc = run_fio(cmd, timeout=runtime * 3 + 600)
            except subprocess.TimeoutExpired:
                errors.append(f"fio {test} did not finish within {runtime * 3 + 600:.0f} s")
                break
            res["fio_messages"] += msgs
            if doc is None:
                errors.append(f"fio {test}: no JSON output (rc {rc}): {(msgs or ['no output'])[-1][:300]}")
                break
            errs = job_errors(doc)
            if errs:
                errors += errs
                break
            fig = summarize(doc, "write" if test == "seq_write" else "read")
            fig.update(started=round(started, 3), command=cmd)
            res["tests"][test] = fig
            if test == "rand_read":
                res["rand_read_iops"] = fig["iops"]
            else:
                res[f"{test}_gbps"] = fig["gbps"]
        res["ok"] = not errors
        res["error"] = f"{path}: " + "; ".join(errors) if errors else None
        return res
    finally:
        if work:
            shutil.rmtree(work, ignore_errors=True)


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
        res["error"] = f"{dev}: fio gave no JSON (rc {rc})"
    elif job_errors(doc):
        res["error"] = f"{dev}: " + "; ".join(job_errors(doc))
    else:
        res["seq_read_gbps"] = summarize(doc, "read")["gbps"]
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
        raise ProbeFailed(f"fio not installed (no '{a.get('fio', 'fio')}' on PATH)")
    version = subprocess.run([fio, "--version"], capture_output=True, text=True).stdout.strip()
    engine = a.get("ioengine") or ("libaio" if "libaio" in fio_engines(fio) else "psync")
    paths = [measure_path(p, a, fio, engine) for p in a.get("paths") or []]
    devices = []
    for dev in a.get("devices") or []:
        if not a.get("allow_destructive"):
            devices.append({"device": dev, "ok": True, "error": None, "seq_read_gbps": None,
                            "skipped": "raw device reads need storage_allow_destructive: true"})
        else:
            devices.append(read_device(dev, a, fio, "libaio" if engine == "libaio" else "psync"))
    return {"fio_version": version, "ioengine": engine, "paths": paths, "devices": devices}


if __name__ == "__main__":
    run(main)
