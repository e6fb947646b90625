"""Signals a scenario sends to a run (a controller killed, a run interrupted, a rank frozen), and the seconds
until the node holds nothing of the run afterwards.

Read from /proc and ``nvidia-smi --query-compute-apps`` (none on a machine without it: no GPU, no compute
process). Nothing here decides a verdict: :class:`Signaller` sends each signal when its trigger is seen and
:func:`wait_clean` measures; benchmarks/scenarios/expect.py holds the figures against the scenario.
"""
from __future__ import annotations

import os
import re
import signal as _signal
import subprocess
import time

from benchmarks.scenarios.spec import Signal

#: the agent's working folder on a node (gpuaccept/runner/agent.py: ``$TMPDIR/gpuaccept.<12 hex>``)
AGENT_DIR = re.compile(r"/gpuaccept\.[0-9a-f]{12}(/|$)")
#: seconds the runner waits for a node to come clean after the last signal (chosen: 12x the 5 s promise of
#: probes/_watchdog.py CONTROLLER_GONE_CLEAN_S, so a slow clean-up is measured, not cut off)
CLEAN_WAIT_S = 60.0


def processes() -> dict[int, tuple[int, int, str, str]]:
    """Live processes: ``{pid: (ppid, pgid, state, command line)}`` (zombies left out)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if fields[0] != "Z":
            out[int(d)] = (int(fields[1]), int(fields[2]), fields[0], cmd)
    return out


def descendants(root: int, table: dict | None = None) -> set[int]:
    """``root`` and every live process below it."""
    table = processes() if table is None else table
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.add(p)
        todo += kids.get(p, [])
    return out & (set(table) | {root})


def agent_processes(table: dict | None = None) -> set[int]:
    """Processes whose working folder is a gpuaccept agent's (an SSH run's node side is no descendant of it)."""
    table = processes() if table is None else table
    out = set()
    for pid in table:
        try:
            if AGENT_DIR.search(os.readlink(f"/proc/{pid}/cwd")):
                out.add(pid)
        except OSError:
            continue
    return out


def gpu_apps() -> set[int]:
    """Pids of the compute processes on this machine's GPUs (``nvidia-smi --query-compute-apps=pid``); empty
    where nvidia-smi is missing or fails."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    return {int(x) for x in re.findall(r"^\s*(\d+)", out, re.M)}


def matching(text: str, within: set[int] | None = None, table: dict | None = None) -> list[int]:
    """Pids whose command line holds ``text`` (within ``within`` when given), oldest first (by pid)."""
    table = processes() if table is None else table
    me = os.getpid()
    return sorted(p for p, (_, _, _, cmd) in table.items() if text in cmd and p != me
                  and (within is None or p in within))


class Signaller:
    """The signals of one run: :meth:`poll` (called every 0.2 s while the run lives) sends each when its trigger
    is seen and its ``after_s`` have passed. ``sent``: text lines ("KILL to run pid N at 12.3 s"); ``t_last``:
    monotonic time of the last one, ``last_to_run`` whether it went to the run itself; ``tracked``: the pids of the run at each signal (for :func:`wait_clean`)."""

    def __init__(self, signals: list[Signal], proc: subprocess.Popen, jsonl: str, local: bool,
                 load_pids: set[int]):
        self.todo = list(signals)
        self.proc, self.jsonl, self.local, self.loads = proc, jsonl, local, load_pids
        self.t0 = time.monotonic()
        self.seen_at: dict[int, float] = {}
        self.sent: list[str] = []
        self.t_last: float | None = None
        self.last_to_run = False
        self.tracked: set[int] = set()

    def _scope(self, table: dict) -> set[int] | None:
        return descendants(self.proc.pid, table) if self.local else None

    def _triggered(self, s: Signal, table: dict) -> bool:
        from benchmarks.scenarios.execute import recorded
        if s.when == "start":
            return True
        if s.when == "gpu-busy":
            return bool(gpu_apps() - self.loads)
        if s.when.startswith("test:"):
            return recorded(self.jsonl, s.when[5:])
        return bool(matching(s.when[6:], self._scope(table), table))

    def poll(self) -> None:
        """Send every signal whose time has come (a target gone is noted, not an error)."""
        if not self.todo:
            return
        table = processes()
        now = time.monotonic()
        for i, s in enumerate(list(self.todo)):
            key = id(s)
            if key not in self.seen_at and self._triggered(s, table):
                self.seen_at[key] = now
            if key in self.seen_at and now - self.seen_at[key] >= s.after_s:
                self.todo.remove(s)
                self._send(s, table, now)

    def _send(self, s: Signal, table: dict, now: float) -> None:
        scope = self._scope(table)
        self.tracked |= (scope if self.local else agent_processes(table)) | (gpu_apps() - self.loads)
        if s.to == "run":
            target = [self.proc.pid]
        else:
            target = matching(s.to[6:], scope, table)[-1:]
        if not target:
            self.sent.append(f"{s.signal} to {s.to}: no such process at {now - self.t0:.1f} s")
            return
        try:
            os.kill(target[0], getattr(_signal, f"SIG{s.signal}"))
        except ProcessLookupError:
            self.sent.append(f"{s.signal} to {s.to}: pid {target[0]} gone at {now - self.t0:.1f} s")
            return
        self.sent.append(f"{s.signal} to {s.to} pid {target[0]} at {now - self.t0:.1f} s")
        self.t_last = time.monotonic()
        self.last_to_run = s.to == "run"


def wait_clean(tracked: set[int], since: float, load_pids: set[int], limit_s: float = CLEAN_WAIT_S,
               run_pid: int | None = None) -> float | None:
    """Seconds from monotonic time ``since`` until none of ``tracked`` (the run's processes when the last signal
    was sent: its descendants on a local connection, the agent folder's processes on SSH, and the compute
    processes on the GPUs) is alive, the run's controller ``run_pid`` left out (its parent reaps it), and no
    compute process other than the loads' is on a GPU; None when that is not so within ``limit_s`` s."""
    while True:
        table = processes()
        left = ((tracked - {run_pid}) & set(table)) | (gpu_apps() - load_pids)
        if not left:
            return time.monotonic() - since
        if time.monotonic() - since > limit_s:
            return None
        time.sleep(0.1)
