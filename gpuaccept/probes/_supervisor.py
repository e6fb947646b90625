"""Rank supervisor (node side, stdlib only): start worker processes, watch them, kill them, say what happened.

Shipped beside the probes; used by ``nccl_allreduce.py`` for one node and for one host of a multi-node
collective alike, through one sequence, :func:`run_ranks`: start the ranks, supervise them until they all
finish, one fails, one stalls or the deadline passes, take each rank's report while it is still alive, kill
every rank's process group and reap it, then read the ranks' output and the result file.

Parent side: each worker runs in its own session (process group = its pid), so a kill reaches anything it
started; SIGTERM (+SIGCONT, so that a stopped rank sees it), then SIGKILL after :data:`KILL_GRACE_S`; a pid is
never signalled after it was reaped. Worker side (:func:`worker_main`): ``PR_SET_PDEATHSIG`` so a killed
probe takes its ranks with it, line-buffered C stdout (NCCL's INFO lines), a phase file
(:class:`Phase`) for the hang report, an optional heartbeat file for stall detection, and an exit without
interpreter teardown (NCCL/gloo threads can hang it).
"""
from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

try:
    from _nccl_log import nccl_warnings, socket_ifname_unmatched
    from _probe import log, name_process
except ImportError:  # imported as gpuaccept.probes._supervisor (tests of the pure functions)
    from ._nccl_log import nccl_warnings, socket_ifname_unmatched
    from ._probe import log, name_process

EXIT_ADDR_IN_USE = 98  # a worker's exit status when the rendezvous port is taken (errno EADDRINUSE is 98)
EXIT_SPLIT_WORLD = 3  # a worker's exit status when the world that formed is not the one expected (multi-node)
HEARTBEAT_S = 0.5  # each worker with a heartbeat touches its file this often
KILL_GRACE_S = 3.0  # SIGTERM, then SIGKILL this much later
#: a rank's stages, in order (:class:`Phase`): ``setup`` (its interpreter, torch, its CUDA context, libnccl: the
#: rank's own start), ``init`` (the rendezvous and the communicator: the collective forming over the node's GPUs
#: and links),
#: ``collective`` (buffers, the sizes measured, the teardown)
STAGES = ("setup", "init", "collective")
TEARDOWN_GRACE_S = 30.0  # ranks that reported "done" but do not exit within this are killed, result kept
POLL_S = 0.05


# ---------------------------------------------------------------------------------------------------------
# pure: texts and evidence
# ---------------------------------------------------------------------------------------------------------

def is_addr_in_use(text: str) -> bool:
    """Whether an error text says the rendezvous port is taken (torch TCPStore: ``EADDRINUSE``)."""
    t = text.lower()
    return "eaddrinuse" in t or "address already in use" in t or "errno 98" in t


#: a label line with nothing after it: torch ends an NCCL error with "Last error:" and NCCL's last error text,
#: which can be empty ("[rank1]: Last error:", vllm-project/vllm#10453)
_EMPTY_LABEL = re.compile(r"^(?:\[rank\d+\]:\s*)?Last error:\s*$")


def last_line(text: str) -> str:
    """The last non-empty line of a worker's output that is not an NCCL INFO line nor an empty ``Last error:``
    label (its error, usually)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "NCCL INFO" not in ln and not _EMPTY_LABEL.match(ln):
            return ln[:300]
    return lines[-1][:300] if lines else "(no output)"


#: NCCL WARN messages that name a fault of this rank's own host (CUDA, memory registration with the NIC): when
#: one comes before any network WARN, the rank failed locally even if its last words are a peer's socket closing
#: (NVIDIA/nccl#1485: "Cuda failure 'out of memory'" ... "socketProgress: Connection closed by remote peer")
_LOCAL_WARN = re.compile(r"cuda failure|cuda calloc|out of memory|unhandled cuda error|illegal memory access|"
                         r"call to ibv_\w+ failed", re.I)


def warn_note(line: str, warns: list[str], limit: int = 400) -> str:
    """``" [NCCL WARN: a; b]"``: NCCL's WARN messages (:func:`_nccl_log.nccl_warnings`) that ``line`` does not
    already hold, in order, cut to ``limit`` characters; ``""`` when there are none."""
    rest = [w for w in warns if w not in line]
    if not rest:
        return ""
    body = "; ".join(rest)
    return f" [NCCL WARN: {body[:limit] + ('...' if len(body) > limit else '')}]"


#: error texts of a rank that failed because of the network or of another rank (a consequence, not a cause)
_NET_ERROR = re.compile(r"connection (closed|reset|refused|timed out)|reset by peer|broken pipe|timed out|timeout|"
                        r"no route to host|network is unreachable|socket|gloo|tcpstore|store|recv|send|"
                        r"remote (process|error)|ncclRemoteError|DistNetworkError|DistStoreError|peer", re.I)
_IPV4 = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?![\d.])")
_IPV6 = re.compile(r"(?<![\w:.])\[?([0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:\.\d{1,3}){0,3})(?:%[\w.-]+)?\]?")


def normalize_address(addr: str) -> str:
    """An IP address in one spelling (``ipaddress``'s compressed form, zone id dropped; IPv4-mapped IPv6
    ``::ffff:a.b.c.d`` as ``a.b.c.d``); any other text unchanged."""
    a = str(addr).strip().strip("[]").split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(a)
    except ValueError:
        return str(addr)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        return str(ip.ipv4_mapped)
    return ip.compressed


def addresses_in(text: str) -> list[str]:
    """IPv4 and IPv6 addresses named in ``text``, normalised (:func:`normalize_address`), in order, once
    each; unspecified addresses (0.0.0.0, ::) left out."""
    out = [(m.start(), m.group(1)) for m in _IPV4.finditer(text)]
    for m in _IPV6.finditer(text):
        try:
            out.append((m.start(), str(ipaddress.IPv6Address(m.group(1)))))
        except ValueError:
            continue
    out = [a for _, a in sorted(out)]
    found = []
    for a in out:
        try:
            ip = ipaddress.ip_address(a)
        except ValueError:
            continue
        if ip.is_unspecified:
            continue
        n = normalize_address(a)
        if n not in found:
            found.append(n)
    return found


def rank_evidence(rc: int | None, state: str, heartbeat_age: float, stall_s: float | None, text: str) -> tuple:
    """``(kind, reason, addresses)`` for one local rank at the moment its host's probe decides:
    ``kind`` "local" (this host's own fault: the rank died of a signal, is stopped (T) or in uninterruptible
    sleep (D) with a heartbeat older than 5 s, its heartbeat is older than ``stall_s`` while it is not running,
    or it failed with an error that is not a network error, or NCCL WARNed of a local fault (CUDA failure,
    out of memory, a failed ibv_* call) before any network WARN, or NCCL read ``NCCL_SOCKET_IFNAME`` and found
    no such interface: :func:`_nccl_log.socket_ifname_unmatched`, named in the reason), "peer" (it failed with
    a network error; ``addresses`` are the IPv4/IPv6 addresses the error names, :func:`addresses_in`), "split_world",
    "addr_in_use", or None (running normally, or exited 0). The reason is ``"rc N: <last line>"`` followed by
    the rank's NCCL WARN messages that the last line does not hold (:func:`warn_note`)."""
    if rc is None:
        if state in ("T", "t"):
            return "local", f"process stopped (state {state}), heartbeat {heartbeat_age:.0f}s old", []
        if state == "D" and heartbeat_age > 10 * HEARTBEAT_S:
            return "local", f"process in uninterruptible sleep (D), heartbeat {heartbeat_age:.0f}s old", []
        if stall_s is not None and heartbeat_age > stall_s and state != "R":
            return "local", f"no heartbeat for {heartbeat_age:.0f}s (state {state})", []
        return None, "", []
    if rc == 0:
        return None, "", []
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return "local", f"died of {name}", []
    line = last_line(text)
    if rc == EXIT_SPLIT_WORLD:
        return "split_world", line, []
    if rc == EXIT_ADDR_IN_USE:
        return "addr_in_use", line, []
    warns = nccl_warnings(text.splitlines())
    why = f"rc {rc}: {line}{warn_note(line, warns)}"
    ifname = socket_ifname_unmatched(text.splitlines())
    if ifname:  # this host's own NCCL configuration, whatever socket error it ended in
        return "local", f"{why} ({ifname})", []
    first_local = next((i for i, w in enumerate(warns) if _LOCAL_WARN.search(w)), None)
    first_net = next((i for i, w in enumerate(warns) if _NET_ERROR.search(w)), None)
    if first_local is not None and (first_net is None or first_local < first_net):
        return "local", why, []
    if _NET_ERROR.search(line):
        return "peer", why, addresses_in(line)
    return "local", why, []


def ranks_failed(outcome: str, reports: list[dict]) -> dict:
    """The facts of ranks that hung, stalled or died (pure): ``{"outcome", "stage", "ranks"}``, ``outcome`` as
    :class:`Outcome` says it, ``ranks`` the deciding ranks' ``rank``, ``phase``, ``stage`` and ``rc`` from their
    reports (:meth:`Worker.report`; for a hang those with the lowest phase step, as :func:`hang_message` names
    them), ``stage`` the earliest of their stages (:data:`STAGES`; a report without one reads ``setup``)."""
    if outcome == "hung" and reports:
        low = min(r.get("step", -1) for r in reports)
        reports = [r for r in reports if r.get("step", -1) == low]
    ranks = [{"rank": r.get("rank"), "phase": r.get("phase"), "stage": r.get("stage") or STAGES[0], "rc": r.get("rc")}
             for r in reports]
    stage = min((r["stage"] for r in ranks), key=lambda x: STAGES.index(x) if x in STAGES else 0,
                default=STAGES[0])
    return {"outcome": outcome, "stage": stage, "ranks": ranks}


def hang_message(reports: list[dict], deadline_s: int, what: str = "all-reduce") -> str:
    """``"<what> hung: ranks [...] did not finish within Ns; killed all ranks; slowest: rank R in '<phase>'"``
    from the unfinished ranks' reports (:meth:`Worker.report`), naming those with the lowest phase step."""
    low = min(r.get("step", -1) for r in reports)
    slow = [f"rank {r['rank']} in '{r.get('phase')}'" + (" (process stopped)" if r.get("state") == "T" else "")
            for r in reports if r.get("step", -1) == low]
    return (f"{what} hung: ranks {[r['rank'] for r in reports]} did not finish within {deadline_s}s; "
            f"killed all ranks; slowest: {', '.join(slow)}")


# ---------------------------------------------------------------------------------------------------------
# parent: one worker process
# ---------------------------------------------------------------------------------------------------------

class Worker:
    """One rank's process (its own session), its log file, phase file and heartbeat file (``phase + .hb``)."""

    def __init__(self, rank: int, proc: subprocess.Popen, logpath: str, phasepath: str, local_rank: int | None = None):
        self.rank, self.proc, self.logpath, self.phasepath = rank, proc, logpath, phasepath
        self.local_rank = rank if local_rank is None else local_rank
        self.rc = None  # exit status once seen (negative: killed by that signal)
        self.seen_at = None
        self.reaped = False  # once reaped its pid may be reused: never signal it again
        self.started = time.monotonic()

    @classmethod
    def start(cls, rank: int, local_rank: int, argv: list[str], env: dict, base: str) -> "Worker":
        """Start ``argv`` in a new session with stdout+stderr to ``base.log``; phase file ``base.phase``."""
        with open(base + ".log", "wb") as logf:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True, close_fds=True)
        return cls(rank, proc, base + ".log", base + ".phase", local_rank)

    def heartbeat_age(self) -> float:
        """Seconds since the worker's heartbeat thread last touched its file (since spawn before the first)."""
        try:
            return max(0.0, time.time() - os.stat(self.phasepath + ".hb").st_mtime)
        except OSError:
            return time.monotonic() - self.started

    def peek(self):
        """Exit status if the process has ended, without reaping it (its pid stays ours until reaped)."""
        if self.rc is None:
            try:
                si = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                si = None
                if self.proc.returncode is not None:
                    self.rc = self.proc.returncode
            if si is not None and si.si_pid == self.proc.pid:
                self.rc = si.si_status if si.si_code == os.CLD_EXITED else -si.si_status
            if self.rc is not None:
                self.seen_at = time.monotonic()
        return self.rc

    def phase(self) -> dict:
        try:
            with open(self.phasepath) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {"step": -1, "phase": "starting (python/torch import)", "stage": STAGES[0]}

    def log_text(self, limit: int = 1 << 16) -> str:
        try:
            with open(self.logpath, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - limit))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def state(self) -> str:
        """Process state letter from /proc/<pid>/stat (R, S, D, T stopped, Z ...), or '?'."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return "?"

    def report(self, stall_s: float | None) -> dict:
        """This rank now: rank, local rank, rc, state, phase, its step and stage, heartbeat age (s), and the
        evidence (:func:`rank_evidence`) kind, reason and addresses. Take it before killing."""
        rc = self.peek()
        state = self.state() if rc is None else "exited"
        age = self.heartbeat_age()
        ph = self.phase()
        kind, reason, addrs = rank_evidence(rc, state, age, stall_s, self.log_text())
        return {"rank": self.rank, "local_rank": self.local_rank, "rc": rc, "state": state,
                "phase": ph.get("phase"), "step": ph.get("step", -1), "stage": ph.get("stage") or STAGES[0],
                "heartbeat_age_s": round(age, 1),
                "evidence": kind, "reason": reason, "addresses": addrs}

    def describe_exit(self) -> str:
        """``"rank R exited with rc X (SIGNAME): <its last line>"``."""
        rc, sig = self.rc, ""
        if rc is not None and rc < 0:
            try:
                sig = f" ({signal.Signals(-rc).name})"
            except ValueError:
                pass
        text = self.log_text()
        line = last_line(text)
        ifname = socket_ifname_unmatched(text.splitlines())
        return (f"rank {self.rank} exited with rc {rc}{sig}: {line}{warn_note(line, nccl_warnings(text.splitlines()))}"
                + (f" ({ifname})" if ifname else ""))


def _signal_groups(workers, sig) -> None:
    for w in workers:
        if w.reaped:
            continue
        try:
            os.killpg(w.proc.pid, sig)  # the group leader is unreaped, so its pid (= pgid) is still ours
        except (ProcessLookupError, PermissionError):
            pass


def kill_all(workers: list[Worker]) -> None:
    """SIGTERM (+SIGCONT) every worker's process group, SIGKILL after :data:`KILL_GRACE_S`, reap all.
    Idempotent."""
    live = [w for w in workers if not w.reaped and w.peek() is None]
    if live:
        _signal_groups(live, signal.SIGTERM)
        _signal_groups(live, signal.SIGCONT)
        end = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < end and any(w.peek() is None for w in live):
            time.sleep(POLL_S)
    _signal_groups(workers, signal.SIGKILL)  # stragglers and anything they started in their groups
    for w in workers:
        if w.reaped:
            continue
        try:
            w.proc.wait(timeout=10)
            w.reaped = True
        except subprocess.TimeoutExpired:  # unkillable (D state): report, do not hang
            log(f"rank {w.rank} (pid {w.proc.pid}) did not die after SIGKILL")


def _stalled(workers: list[Worker], stall_s: float | None) -> list[Worker]:
    """Running workers whose heartbeat is older than ``stall_s`` and whose process is not running (R)."""
    if stall_s is None:
        return []
    return [w for w in workers if w.rc is None and w.heartbeat_age() > stall_s and w.state() != "R"]


def supervise(workers: list[Worker], deadline: float, stall_s: float | None = None) -> tuple[str, list[Worker]]:
    """Wait for the workers. Returns ``("ok", [])`` (or ``("ok", ranks stuck in teardown)``),
    ``("addr_in_use", [])``, ``("failed", ranks ordered culprit first)``, ``("hung", unfinished ranks)`` or,
    with ``stall_s``, ``("stalled", stalled ranks)``. ``deadline`` is a ``time.monotonic()`` instant.
    Leaves every process unreaped for :func:`kill_all`."""
    done_since = None
    while True:
        for w in workers:
            w.peek()
        failed = [w for w in workers if w.rc not in (None, 0)]
        if failed:
            if any(w.rc == EXIT_ADDR_IN_USE for w in failed):
                return "addr_in_use", []
            # A port taken by a foreign listener can make another rank fail before rank 0 reports it.
            r0 = workers[0]
            if r0.rc is None and "rendezvous" in r0.phase().get("phase", ""):
                end = min(deadline, time.monotonic() + 3.0)
                while time.monotonic() < end and r0.peek() is None:
                    time.sleep(POLL_S)
                if r0.rc == EXIT_ADDR_IN_USE:
                    return "addr_in_use", []
            failed = [w for w in workers if w.rc not in (None, 0)]
            failed.sort(key=lambda w: (w.seen_at, 0 if w.rc < 0 else 1, w.rank))
            return "failed", failed
        running = [w for w in workers if w.rc is None]
        if not running:
            return "ok", []
        stalled = _stalled(running, stall_s)
        if stalled:
            return "stalled", stalled
        now = time.monotonic()
        if all(w.phase().get("phase") == "done" for w in running):
            done_since = done_since or now
            if now - done_since > TEARDOWN_GRACE_S:
                return "ok", running  # figures are in; the stuck teardown is killed
        if now >= deadline:
            return "hung", running
        time.sleep(POLL_S)


class Terminated(Exception):
    """The probe got SIGTERM, SIGHUP or SIGINT (the controller aborts, or the runner's timeout)."""


@contextlib.contextmanager
def terminate_on_signals():
    """Inside: SIGTERM, SIGHUP and SIGINT raise :class:`Terminated` (once: a second signal is ignored, so the
    clean-up runs to its end); the previous handlers come back on exit."""
    def on_signal(signum, _frame):
        for sig in old:
            signal.signal(sig, signal.SIG_IGN)
        raise Terminated(signal.Signals(signum).name)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@dataclass
class Outcome:
    """What :func:`run_ranks` saw. ``outcome``: ``ok`` | ``failed`` | ``hung`` | ``stalled`` | ``addr_in_use``
    | ``aborted`` (a :class:`Terminated` signal; ``signal`` names it). ``which``: the ranks that decided it
    (failed culprit first, unfinished, stalled, or when ok those killed in a stuck teardown). ``reports``:
    every rank's :meth:`Worker.report`, taken before the kill (empty when ok). ``texts``: every rank's output
    (the last ``log_limit`` bytes). ``result``: the result file's JSON when ok, else None with
    ``result_error``."""

    outcome: str
    workers: list[Worker] = field(default_factory=list)
    which: list[Worker] = field(default_factory=list)
    reports: list[dict] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    result: dict | None = None
    result_error: str = ""
    signal: str = ""


def run_ranks(start: Callable[[], list[Worker]], deadline: float, stall_s: float | None, result_path: str,
              log_limit: int = 1 << 26) -> Outcome:
    """The supervise-and-report sequence, for one node and for one host of a multi-node world alike:
    ``start()`` the workers, :func:`supervise` them until ``deadline`` (monotonic), take each rank's report
    while it is alive when the outcome is not ok, :func:`kill_all` (always, whatever happens), then read
    every rank's output and, when ok, the JSON result file at ``result_path``. Never raises for a rank's
    fault; a :class:`Terminated` signal (see :func:`terminate_on_signals`) gives outcome ``aborted``."""
    out = Outcome("aborted")
    try:
        out.workers = start()
        out.outcome, out.which = supervise(out.workers, deadline, stall_s)
    except Terminated as e:
        out.outcome, out.signal = "aborted", str(e)
    finally:
        if out.outcome != "ok":
            out.reports = [w.report(stall_s) for w in out.workers]
        kill_all(out.workers)
    out.texts = [w.log_text(limit=log_limit) for w in out.workers]
    if out.outcome == "ok":
        try:
            with open(result_path) as f:
                out.result = json.load(f)
        except (OSError, ValueError) as e:
            out.result_error = f"{e.__class__.__name__}: {e}"
    return out


# ---------------------------------------------------------------------------------------------------------
# worker side
# ---------------------------------------------------------------------------------------------------------

class Phase:
    """Progress of this rank for the parent's report: ``{"step", "phase", "stage"}`` written atomically.
    ``phase(what, stage)``: ``stage`` one of :data:`STAGES`, kept for the phases after it that name none.
    Raises ValueError for another stage."""

    def __init__(self, path: str):
        self.path, self.step, self.stage = path, 0, STAGES[0]

    def __call__(self, what: str, stage: str | None = None) -> None:
        if stage is not None:
            if stage not in STAGES:
                raise ValueError(f"stage {stage!r} is none of {STAGES}")
            self.stage = stage
        self.step += 1
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"step": self.step, "phase": what, "stage": self.stage}, f)
        os.replace(tmp, self.path)


def _libc():
    import ctypes
    return ctypes.CDLL(None, use_errno=True)


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL us when the probe dies (PR_SET_PDEATHSIG), then check it had not already."""
    try:
        _libc().prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(1)


def _line_buffer_c_stdout() -> None:
    """NCCL prints INFO lines with C stdio to stdout, block-buffered into our log file: make it line-buffered."""
    try:
        import ctypes
        libc = _libc()
        libc.setvbuf(ctypes.c_void_p.in_dll(libc, "stdout"), None, 1, 0)  # _IOLBF = 1
    except (OSError, AttributeError, ValueError):
        pass


def exit_now(code: int) -> None:
    """Leave without interpreter teardown (NCCL/gloo threads can hang it), flushing C and Python streams."""
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass
    try:
        _libc().fflush(None)
    except (OSError, AttributeError):
        pass
    os._exit(code)


def heartbeat(path: str) -> None:
    """Touch ``path`` every :data:`HEARTBEAT_S` seconds from a daemon thread (multi-node stall detection: a
    stopped or wedged process stops touching it; a rank blocked in a collective does not, torch releases
    the interpreter lock while it waits)."""
    import threading

    def beat():
        while True:
            try:
                with open(path, "a"):
                    os.utime(path)
            except OSError:
                pass
            time.sleep(HEARTBEAT_S)

    threading.Thread(target=beat, name="heartbeat", daemon=True).start()


def worker_main(spec: dict, body: Callable[[dict], None]) -> None:
    """A worker's whole life: take the probes' process name (``_probe.name_process``: the driver's Xid lines
    about a rank name it as gpuaccept's), die with the parent (``spec["parent_pid"]``), start the heartbeat when
    ``spec["heartbeat"]`` (file ``spec["phase_path"] + ".hb"``), line-buffer C stdout, run ``body(spec)``;
    exit 0, or 1 with the traceback on the log. A body may leave earlier with :func:`exit_now`."""
    name_process()
    _die_with_parent(spec["parent_pid"])
    if spec.get("heartbeat"):
        heartbeat(spec["phase_path"] + ".hb")
    _line_buffer_c_stdout()
    try:
        body(spec)
    except BaseException:
        import traceback
        traceback.print_exc()
        exit_now(1)
    exit_now(0)
