"""Shared harness for node-side probes (standard library only).

A probe's ``main(args: dict) -> dict`` is wrapped by :func:`run`: arguments come as one JSON object in
``sys.argv[1]`` (or ``{}``), the result dict is printed as ONE JSON document on the last line of stdout,
logs go to stderr. Any exception (or a raised :class:`ProbeFailed`) prints
``{"failed": true, "msg": "..."}`` and exits with rc 1.

Live progress (optional, for probes that run minutes): :func:`progress` writes one line to stderr,

    GPUACCEPT-PROGRESS {"done": 720.0, "total": 3600.0, "gpus": {"0": {"bf16_tflops": 612.3, "temp_c": 65}},
                        "text": "..."}

that is :data:`PROGRESS_PREFIX` at the start of the line, then one JSON object on the same line. Every key is
optional: ``done``/``total`` seconds of the probe's own work, ``gpus`` per GPU (torch index or rank as a
string) figures named with their unit suffix (``_tflops`` TFLOP/s, ``_gbps`` GB/s, ``_c`` degrees C, ``_w`` W,
``_mhz`` MHz), ``text`` a short note. The controller (gpuaccept.transport.progress) shows the last such line of
each host on its progress display as it arrives; other stderr lines are logs as before, and the whole stderr
still reaches the controller at the end. One process per node writes them (the probe's parent, not its ranks).

Process name: :func:`run` (and each worker process a probe starts as a separate interpreter) names its process
:data:`PROCESS_NAME` first (:func:`name_process`), so that the kernel's lines about it, the NVIDIA driver's Xid
lines ``pid=N, name=COMM``, tell gpuaccept's probes from another application on the GPU. Only the name (comm)
changes: the command line, which the runner's ``pkill -f`` and the tests match, stays ``python3 probe.py ...``.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

#: start of a live progress line on stderr (the controller's gpuaccept.transport.progress.PREFIX is this)
PROGRESS_PREFIX = "GPUACCEPT-PROGRESS "
#: the task name (comm) of every probe process: what the kernel, ps and the NVIDIA driver's Xid lines call it. At most
#: 15 bytes: the kernel keeps TASK_COMM_LEN (16) bytes with the NUL (Linux include/linux/sched.h; proc(5),
#: /proc/[pid]/comm, which truncates a longer write)
PROCESS_NAME = "gpuaccept-probe"
# what /proc/self/comm read after run() named this process (None: not named, main called as a library)
_NAMED: list = [None]
# one write per line under a lock: threads' logs and progress lines never interleave within a line
_ERR_LOCK = threading.Lock()


class ProbeFailed(Exception):
    """Raise from a probe to fail with a clean one-line message (no traceback in ``msg``). ``missing_module``: the
    module the node's Python lacks, when that is why (the failure document's ``missing_module``: the controller
    reads it as the node's configuration, never as a crash); ``missing_program``: likewise a program the probe runs
    that is not on the node's PATH (``fio``); ``setup``: likewise any other state of the node's software or
    settings the probe recognised, as a kind (``driver_cuda_too_old``, ``kernel_log_unreadable``,
    ``fio_engine_missing``, ``import_broken``: the failure document's ``setup``, a row of gpuaccept/data/actions.yaml);
    ``ranks_failed``: the ranks of a collective the probe started hung, stalled or died, as facts (the failure
    document's ``ranks_failed``: ``{"outcome", "stage", "ranks"}``, _supervisor.ranks_failed)."""

    def __init__(self, msg: str, missing_module: str | None = None, missing_program: str | None = None,
                 setup: str | None = None, ranks_failed: dict | None = None):
        super().__init__(msg)
        self.missing_module = missing_module
        self.missing_program = missing_program
        self.setup = setup
        self.ranks_failed = ranks_failed


def sig(x: float, digits: int = 5) -> float:
    """``x`` rounded to ``digits`` significant digits (tiny cpu figures stay non-zero)."""
    return float(f"{x:.{digits}g}")


def reject_unknown(args: dict, known) -> None:
    """Fail with ``unknown argument(s): a, b`` when ``args`` has keys outside ``known`` (typos never pass)."""
    unknown = set(args) - set(known)
    if unknown:
        raise ProbeFailed(f"unknown argument(s): {', '.join(sorted(unknown))}")


def _err_line(text: str) -> None:
    with _ERR_LOCK:
        try:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # nobody reads stderr any more: the measurement goes on


def log(*parts) -> None:
    """Print a log line to stderr (never stdout, which carries the JSON document); one write per line."""
    _err_line(" ".join(str(p) for p in parts))


def progress(doc: dict) -> None:
    """Write ``doc`` as one live progress line on stderr (see the module docstring for its form)."""
    try:
        body = json.dumps(doc, separators=(",", ":"), allow_nan=False, default=str)
    except ValueError:  # a NaN or infinity: not worth a progress line
        return
    _err_line(PROGRESS_PREFIX + body)


def scratch_dir() -> str | None:
    """The folder for a probe's scratch files (rendezvous files, rank logs): the shipped folder this file was
    shipped into (``$TMPDIR/gpuaccept.<12 hex>``, gpuaccept.runner.agent.start_command), which the agent removes
    at the end of the run and the next run's sweep removes after a killed one, so nothing of a probe killed by
    SIGKILL stays in ``$TMPDIR``; None (tempfile's default) when the probe runs from anywhere else."""
    here = os.path.dirname(os.path.abspath(__file__))
    return here if os.path.basename(here).startswith("gpuaccept.") else None


def name_process(name: str = PROCESS_NAME) -> str | None:
    """Name this process ``name`` (written to ``/proc/self/comm``, proc(5)); returns what ``/proc/self/comm`` reads
    afterwards (the name in force, ``PROCESS_NAME`` where the write took), or None where there is no such file (not
    Linux). A write the kernel refuses (a read-only /proc) is ignored: the old name is returned. Threads started
    after the call carry the name too (a new thread copies its creator's comm). Never raises."""
    try:
        with open("/proc/self/comm", "w", encoding="utf-8") as f:
            f.write(name)
    except OSError:
        pass
    try:
        with open("/proc/self/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip() or None
    except OSError:
        return None


def own_name() -> str | None:
    """The name :func:`run` gave this process (what ``/proc/self/comm`` read after :func:`name_process`), or None
    where run() did not name it (a probe's ``main`` called as a library, by the tests) or the file could not be
    read."""
    return _NAMED[0]


def during_import(tb) -> bool:
    """Whether the traceback ``tb`` ends inside the import of a module other than the probes' own (a frame
    ``<module>`` of a file outside this folder: a library failing while it loads, ``import torch`` meeting a
    missing libcudart.so or an undefined NCCL symbol): the node's installed software, not the probe."""
    here = os.path.dirname(os.path.abspath(__file__))
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "<module>" and os.path.dirname(os.path.abspath(code.co_filename)) != here:
            return True
        tb = tb.tb_next
    return False


def emit(doc: dict) -> None:
    """Print ``doc`` as one JSON line on stdout."""
    sys.stdout.write(json.dumps(doc, default=str) + "\n")
    sys.stdout.flush()


def run(main) -> None:
    """Run ``main(args)`` as a probe: parse argv, emit the result or a failure document, exit."""
    t0 = time.time()
    _NAMED[0] = name_process()
    try:
        args = json.loads(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] else {}
        if not isinstance(args, dict):
            raise ProbeFailed("probe arguments must be a JSON object")
        doc = main(args)
        doc.setdefault("probe_seconds", round(time.time() - t0, 3))
        # how the probe's process started (the node-side agent says, _zygote.STARTED_ENV): "warm" (forked from the
        # agent's warm child, torch already imported), "fresh" (it imported what it needs itself)
        doc.setdefault("started", os.environ.get("GPUACCEPT_STARTED") or "fresh")
        emit(doc)
        sys.exit(0)
    except ProbeFailed as e:
        emit({"failed": True, "msg": str(e), **({"missing_module": e.missing_module} if e.missing_module else {}),
              **({"missing_program": e.missing_program} if e.missing_program else {}),
              **({"setup": e.setup} if e.setup else {}),
              **({"ranks_failed": e.ranks_failed} if e.ranks_failed else {})})
        sys.exit(1)
    except SystemExit:
        raise
    except BaseException as e:  # a crash: keep the traceback on stderr as evidence
        import traceback  # here: 5 ms of imports every probe start would pay for nothing

        traceback.print_exc()
        missing = e.name if isinstance(e, ModuleNotFoundError) and e.name else None
        broken = not missing and isinstance(e, (ImportError, OSError)) and during_import(e.__traceback__)
        emit({"failed": True, "msg": f"{type(e).__name__}: {e}".splitlines()[0][:500],
              **({"missing_module": missing.split(".")[0]} if missing else {}),
              **({"setup": "import_broken"} if broken else {})})
        sys.exit(1)
