"""Run the suite on every node of a Slurm allocation, each node testing itself, then join the reports.

Inside an allocation (``salloc -N K`` or an ``sbatch`` script)::

    python -m gpuaccept.scaleout.slurm [--reports DIR] [--inventory OPERATOR.ini] -- <pytest arguments>

1. The allocation's nodes are ``scontrol show hostnames $SLURM_JOB_NODELIST`` (:func:`expand_hostlist`
   where ``scontrol`` is missing). With ``--inventory``, every node must be a host of that inventory (by
   name, short name or ``ansible_host``), else the run stops before any node is touched (exit 4).
2. For each node a one-host inventory ``DIR/inventories/<node>.yml`` is written: the node under its Slurm
   name with ``ansible_connection: local`` and, when the operator inventory lists it, every variable the
   operator gave it (groups kept, connection variables dropped).
3. ``srun --nodes=K --ntasks=K --ntasks-per-node=1`` starts one task per node; each runs
   ``python -m pytest --inventory DIR/inventories/<node>.yml --reports DIR/nodes/<node> <pytest arguments>``
   in the suite folder and records pytest's exit code in ``DIR/nodes/<node>/exitcode``.
4. The node folders are joined with ``python -m gpuaccept.scaleout.merge DIR/nodes/<node>... --into DIR/merged
   --run-id <basename of DIR> [--history H] [--host-error NODE=WHY...]`` when that module is installed
   (:func:`join_plan`: a killed node's partial folder is joined, a node with no results is an ERROR);
   otherwise the per-node folders are the result, and the launcher says so. The nodes run with ``--history
   none``; the joined run is recorded once in ``--history`` given after ``--`` (default
   ``reports/history.sqlite`` below the folder the launcher runs in, as a plain run's; a relative path is read from
   there too; ``none``: none).

Refused before srun (exit 4, one line): ``DIR`` holding an earlier launch, an ``--srun-arg`` that changes the
task layout (:func:`layout_arg`), a node matching several hosts of ``--inventory``; an srun that exits before
any node's task started (an ``--srun-arg`` srun does not know) is exit 4 too.

``<node>`` in a path is :func:`folder_name` of the Slurm node name: names never become paths unescaped.
``DIR`` (default ``reports/slurm-<SLURM_JOB_ID>``) must be on a filesystem every node sees. Every node
runs the same ``python`` (``sys.executable``) and suite folder, so both must be on a shared path or
identical on every node.

Exit code: the worst of the nodes' pytest exit codes (0 only when every node ran and passed); a node that
left no exit code, or whose pytest was killed by a signal, counts as 3 (its error is printed); 4 on bad input.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable, Mapping

import yaml

from gpuaccept.config.cmdline import OneLineParser
from gpuaccept.config.outputs import system_folder_problem

#: inventory variables that say how to reach a host: dropped from a node's own inventory (it tests itself)
CONNECTION_VARS = ("ansible_host", "ansible_port", "ansible_user", "ansible_ssh_private_key_file",
                   "ansible_ssh_known_hosts_file", "ansible_connection", "ansible_ssh_host", "ansible_ssh_port",
                   "ansible_ssh_user", "ansible_private_key_file", "ansible_ssh_common_args", "ansible_ssh_extra_args",
                   "ansible_become", "ansible_become_user", "ansible_become_method", "ansible_become_pass",
                   "ansible_become_password")
#: exit code of a bad input (pytest's usage error, as the suite uses it)
EXIT_BAD_INPUT = 4
#: exit code counted for a node that left no exit code (pytest's "internal error")
EXIT_NODE_MISSING = 3


class SlurmEnvError(ValueError):
    """The Slurm environment is missing or inconsistent (one line, naming the variable)."""


# ---------------------------------------------------------------------------------------------------------
# pure helpers
# ---------------------------------------------------------------------------------------------------------

def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise SlurmEnvError(f"hostlist {text!r}: ']' without '['")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if depth:
        raise SlurmEnvError(f"hostlist {text!r}: '[' without ']'")
    parts.append(cur)
    return [p for p in parts if p]


def _expand_one(name: str, whole: str) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", name)
    if not m:
        return [name]
    head, tail = name[:m.start()], name[m.end():]
    values = []
    for item in m.group(1).split(","):
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise SlurmEnvError(f"hostlist {whole!r}: bad range {item!r}")
        if not sep:
            values.append(lo)
            continue
        if int(hi) < int(lo):
            raise SlurmEnvError(f"hostlist {whole!r}: range {item!r} runs backwards")
        width = len(lo) if lo.startswith("0") else 0
        values += [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
    return [h for v in values for h in _expand_one(head + v + tail, whole)]


def expand_hostlist(text: str) -> list[str]:
    """Slurm's hostlist expression as names, in order (pure): ``n[1-3],gpu-[01-02,07]`` -> ``[n1, n2, n3,
    gpu-01, gpu-02, gpu-07]``. Zero-padded bounds keep their width; several bracket groups in one name
    expand as their product (``r[1-2]n[1-2]`` -> ``r1n1 r1n2 r2n1 r2n2``), as ``scontrol show hostnames``
    does (the tests compare the two on a real slurmctld). Raises SlurmEnvError on malformed input."""
    return [h for part in _split_top(text.strip()) for h in _expand_one(part, text)]


def folder_name(host: str) -> str:
    """``host`` as one safe path component (pure): letters, digits, ``.``, ``_`` and ``-`` kept, any other
    byte written ``%XX``; ``""``, ``.`` and ``..`` (and names starting with ``.``) get a leading ``%2E``
    instead of their dot, so a name can never climb out of its folder or hide."""
    out = "".join(ch if re.fullmatch(r"[A-Za-z0-9._-]", ch) else "".join(f"%{b:02X}" for b in ch.encode())
                  for ch in host)
    if out.startswith("."):
        out = "%2E" + out[1:]
    return out or "%00"


@dataclass(frozen=True)
class SlurmWorld:
    """Where this task stands in its Slurm step: ``master`` (the first node's name: node 0 hosts the
    rendezvous), ``node_rank`` (SLURM_NODEID), ``nnodes``, ``hosts`` (node names in node-rank order) and
    ``host`` (this node's name)."""

    master: str
    node_rank: int
    nnodes: int
    hosts: tuple[str, ...]
    host: str


def _int_env(env: Mapping[str, str], name: str) -> int:
    v = env.get(name)
    if v is None or not str(v).strip().isdigit():
        raise SlurmEnvError(f"{name}={v!r}: not set or not a non-negative integer (run inside srun)")
    return int(v)


def slurm_world(env: Mapping[str, str], expand: Callable[[str], list[str]] = expand_hostlist) -> SlurmWorld:
    """The rendezvous of an ``srun`` task from its ``SLURM_*`` variables (pure).

    Node list: ``SLURM_STEP_NODELIST`` (the step's nodes) else ``SLURM_JOB_NODELIST``, expanded by ``expand``
    (default :func:`expand_hostlist`; the launchers pass ``scontrol show hostnames``); node count:
    ``SLURM_STEP_NUM_NODES`` else ``SLURM_NNODES``; node rank: ``SLURM_NODEID``; this node: ``SLURMD_NODENAME``
    (else the list's entry at the node rank). Master: the list's first node.

    Raises SlurmEnvError when a variable is missing, the list's length is not the node count, the node rank
    is out of range, or SLURMD_NODENAME is not the list's entry at SLURM_NODEID (a world that would split)."""
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise SlurmEnvError("SLURM_JOB_NODELIST is not set: not inside a Slurm allocation (use salloc, sbatch)")
    hosts = tuple(expand(nodelist))
    nnodes = _int_env(env, "SLURM_STEP_NUM_NODES" if env.get("SLURM_STEP_NUM_NODES") else "SLURM_NNODES")
    rank = _int_env(env, "SLURM_NODEID")
    if len(hosts) != nnodes or len(set(hosts)) != nnodes:
        raise SlurmEnvError(f"node list {nodelist!r} names {len(set(hosts))} distinct node(s), "
                            f"the node count says {nnodes}")
    if rank >= nnodes:
        raise SlurmEnvError(f"SLURM_NODEID={rank} is not below the node count {nnodes}")
    host = env.get("SLURMD_NODENAME") or hosts[rank]
    if host != hosts[rank]:
        raise SlurmEnvError(f"SLURMD_NODENAME={host!r} but node {rank} of {nodelist!r} is {hosts[rank]!r}")
    return SlurmWorld(hosts[0], rank, nnodes, hosts, host)


def host_matches(inv, name: str) -> list:
    """The operator inventory's hosts that Slurm node ``name`` may be (pure): the host of that inventory name
    alone, else every host whose short name (before the first dot) or address (``ansible_host``, or the older
    ``ansible_ssh_host``, as the inventory resolved it) is ``name`` or its short name."""
    if name in inv.hosts:
        return [inv.hosts[name]]
    short = name.split(".")[0]
    return [h for h in inv.hosts.values()
            if h.name.split(".")[0] == short or h.address in (name, short)]


def find_host(inv, name: str):
    """The operator inventory's host for Slurm node ``name`` (pure): the one of :func:`host_matches`; None
    when none or several match."""
    hits = host_matches(inv, name)
    return hits[0] if len(hits) == 1 else None


def node_inventory(name: str, host=None) -> dict:
    """A one-host YAML inventory (as a dict) for node ``name`` testing itself (pure): ``ansible_connection:
    local``, plus, when ``host`` (an operator inventory's Host) is given, every variable of it except
    :data:`CONNECTION_VARS`, and its groups (so ``--limit group`` still selects it)."""
    hvars = {k: v for k, v in ((host.vars if host else {}) or {}).items() if k not in CONNECTION_VARS}
    hvars = json.loads(json.dumps(hvars, default=str))  # plain types only (str subclasses, tuples) for YAML
    hvars["ansible_connection"] = "local"
    doc: dict = {"all": {"hosts": {name: hvars}}}
    groups = [g for g in (host.groups if host else ()) if g not in ("all", "ungrouped")]
    if groups:
        doc["all"]["children"] = {g: {"hosts": {name: None}} for g in groups}
    return doc


def worst_exit(codes: Mapping[str, int | None]) -> int:
    """The launcher's exit code from the nodes' pytest exit codes (pure): a missing code (None) and a pytest
    killed by a signal (negative: the OOM killer's -9) count as :data:`EXIT_NODE_MISSING`; pytest's 5 (no
    tests collected) counts as 0 when another node ran tests, since a ``-k``/``--limit`` may leave some hosts
    out; else the largest."""
    vals = [EXIT_NODE_MISSING if c is None or int(c) < 0 else int(c) for c in codes.values()]
    if not vals:
        return EXIT_NODE_MISSING
    if any(v != 5 for v in vals):
        vals = [0 if v == 5 else v for v in vals]
    return max(vals)


# ---------------------------------------------------------------------------------------------------------
# Slurm commands
# ---------------------------------------------------------------------------------------------------------

def scontrol_hostnames(nodelist: str) -> list[str]:
    """``scontrol show hostnames NODELIST``; :func:`expand_hostlist` when scontrol is not on PATH."""
    exe = shutil.which("scontrol")
    if not exe:
        return expand_hostlist(nodelist)
    res = subprocess.run([exe, "show", "hostnames", nodelist], capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise SlurmEnvError(f"scontrol show hostnames {nodelist!r}: {(res.stderr.strip() or 'failed')}")
    return res.stdout.split()


def suite_root() -> str:
    """The folder holding ``suites/`` and its ``pytest.ini``: the package's parent when it has them (an
    editable install or a checkout), else the current directory."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return here if os.path.isdir(os.path.join(here, "suites")) else os.getcwd()


#: srun options that change which nodes run a task or how many tasks a node runs (srun(1)): the launcher sets
#: the layout (one task on every node of the allocation); given again through --srun-arg, srun takes the last
#: one, and two tasks on one node would write the same node folder, or a node would run nothing.
LAYOUT_LONG = ("--ntasks", "--ntasks-per-node", "--ntasks-per-socket", "--ntasks-per-core", "--nodes",
               "--nodelist", "--nodefile", "--exclude", "--relative", "--distribution", "--overcommit",
               "--multi-prog")
LAYOUT_SHORT = ("-n", "-N", "-w", "-F", "-x", "-r", "-m", "-O")
#: other srun long options sharing a prefix with a layout option (srun's getopt accepts a unique prefix)
_OTHER_LONG = ("--ntasks-per-gpu", "--exclusive", "--export", "--export-file", "--mpi", "--mem", "--mem-per-cpu",
               "--mem-per-gpu", "--mem-bind", "--overlap", "--oversubscribe", "--reservation", "--no-kill",
               "--nice", "--network", "--no-allocate")


def layout_arg(srun_args: list[str]) -> str | None:
    """The first of ``srun_args`` that sets one of :data:`LAYOUT_LONG`/:data:`LAYOUT_SHORT` (``--ntasks-per-node=2``,
    ``--ntasks-per-n=2`` as srun's getopt reads a unique prefix, ``-n4``, ``-N 2``), or None (pure)."""
    known = LAYOUT_LONG + _OTHER_LONG
    for a in srun_args:
        name = a.split("=", 1)[0]
        if name.startswith("--"):
            hits = [o for o in known if o.startswith(name)] if len(name) > 2 else []
            chosen = name if name in known else hits[0] if len(hits) == 1 else None
            if chosen in LAYOUT_LONG:
                return a
        elif name[:2] in LAYOUT_SHORT:
            return a
    return None


def take_history(pytest_args: list[str]) -> tuple[list[str], str | None]:
    """``pytest_args`` without ``--history PATH``/``--history=PATH``, and that PATH (None when not given;
    the last one when given twice, as pytest reads it) (pure). The nodes run with ``--history none`` and the
    launcher records the joined run once: a node's run id is its folder's name (``n1``, the same in every job,
    so each job's node run replaced the last one's in the database), and every node writing one SQLite file on
    a shared filesystem at once is what SQLite warns against."""
    rest, path, i = [], None, 0
    while i < len(pytest_args):
        a = pytest_args[i]
        if a == "--history" and i + 1 < len(pytest_args):
            path, i = pytest_args[i + 1], i + 2
            continue
        if a.startswith("--history="):
            path = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return rest, path


def _bad_input(msg: str) -> int:
    print(f"gpuaccept.scaleout.slurm: {msg}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" in argv:
        i = argv.index("--")
        own, rest = argv[:i], argv[i + 1:]
    else:
        own, rest = argv, []
    p = OneLineParser(prog="python -m gpuaccept.scaleout.slurm",
                                description="Run the gpuaccept suite on every node of this Slurm allocation.")
    p.add_argument("--reports", help="shared folder for the run (default reports/slurm-<SLURM_JOB_ID>)")
    p.add_argument("--inventory", help="operator inventory: each node's variables are copied from it")
    p.add_argument("--srun-arg", action="append", default=[], help="extra srun argument (repeatable)")
    p.add_argument("--task", action="store_true", help=argparse.SUPPRESS)  # one node's share, run by srun
    return p.parse_args(own), rest


def _task(run_dir: str, pytest_args: list[str]) -> int:
    """One node's share (inside srun): run pytest on this node's one-host inventory, record its exit code."""
    try:
        world = slurm_world(os.environ, scontrol_hostnames)
    except SlurmEnvError as e:
        return _bad_input(str(e))
    local = os.environ.get("SLURM_LOCALID", "0")
    if local != "0":  # a second task on this node (the step's layout was changed): it must not share the folder
        print(f"ERROR: {world.host}: task {os.environ.get('SLURM_PROCID', '?')} is local task {local} of this node; "
              "one task per node tests it (srun layout changed?): this task does nothing", file=sys.stderr)
        return EXIT_BAD_INPUT
    name = folder_name(world.host)
    out = os.path.join(run_dir, "nodes", name)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:  # the shared folder not mounted or not writable on this node: one line, not a traceback
        print(f"ERROR: {world.host}: cannot create its report folder {out}: {e.strerror or e}", file=sys.stderr)
        return EXIT_NODE_MISSING
    inv = os.path.join(run_dir, "inventories", name + ".yml")
    cmd = [sys.executable, "-m", "pytest", "--inventory", inv, "--reports", out, *pytest_args]
    print(f"{world.host}: {' '.join(cmd)}", flush=True)
    rc = subprocess.run(cmd, cwd=suite_root()).returncode
    with open(os.path.join(out, "exitcode"), "w") as f:
        f.write(f"{rc}\n")
    return rc


def earlier_run(run_dir: str) -> str | None:
    """What in ``run_dir`` shows an earlier launch (a node folder with an exit code or reports, a joined
    report), as a path; None when the folder is new or holds only inventories."""
    from gpuaccept.reporting.folder import holds_run
    nodes = os.path.join(run_dir, "nodes")
    try:
        names = sorted(os.listdir(nodes))
    except OSError:
        names = []
    for name in names:
        folder = os.path.join(nodes, name)
        found = "exitcode" if os.path.exists(os.path.join(folder, "exitcode")) else holds_run(folder) \
            if os.path.isdir(folder) else None
        if found:
            return os.path.join(folder, found)
    merged = os.path.join(run_dir, "merged")
    found = holds_run(merged) if os.path.isdir(merged) else None
    return os.path.join(merged, found) if found else None


def join_plan(nodes: list[str], codes: Mapping[str, int | None], run_dir: str,
              srun_rc: int) -> tuple[list[str], dict[str, str]]:
    """What to give ``gpuaccept.scaleout.merge`` after the step: ``(folders, host_errors)``. Every node folder holding
    readable results is joined, with or without an exit code (a killed task's tests stand, and merge marks a
    run that did not finish as an ERROR); a node with no readable results is an ERROR of its own naming why
    (its task never started, the shared folder was not writable there, pytest stopped on bad input), except
    a node whose pytest collected nothing (exit 5: a ``-k`` or ``--limit`` left it out), so no node of the
    allocation is silently missing from the joined report."""
    from gpuaccept.scaleout.merge import read_folder
    folders: list[str] = []
    errors: dict[str, str] = {}
    for n in nodes:
        folder = os.path.join(run_dir, "nodes", folder_name(n))
        code = codes.get(n)
        try:
            read_folder(folder)
        except (ValueError, OSError) as e:
            if code == 5:
                continue
            why = (f"no exit code and {e}" if code is None else f"pytest exited {code} and {e}")
            errors[n] = (f"no results from this node ({why}; srun rc {srun_rc}): its task did not start, "
                         f"could not write {folder}, or stopped before its first test; see the srun log")
            continue
        folders.append(folder)
    return folders, errors


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m gpuaccept.scaleout.slurm``; see the module docstring. Returns the exit code."""
    args, pytest_args = _parse(list(sys.argv[1:] if argv is None else argv))
    job = os.environ.get("SLURM_JOB_ID")
    if not job or not os.environ.get("SLURM_JOB_NODELIST"):
        return _bad_input("not inside a Slurm allocation (SLURM_JOB_ID/SLURM_JOB_NODELIST unset): "
                          "run it under salloc -N K or in an sbatch script")
    run_dir = os.path.abspath(args.reports or os.path.join("reports", f"slurm-{folder_name(job)}"))
    if args.task:
        return _task(run_dir, pytest_args)
    bad = layout_arg(args.srun_arg)
    if bad:
        return _bad_input(f"--srun-arg {bad}: sets which nodes run a task or how many; the launcher starts one "
                          "task on every node of the allocation (use salloc/sbatch -N/-w/-x to choose the nodes)")
    try:
        nodes = scontrol_hostnames(os.environ["SLURM_JOB_NODELIST"])
    except SlurmEnvError as e:
        return _bad_input(str(e))
    operator = None
    if args.inventory:
        from gpuaccept.errors import InventoryError
        from gpuaccept.config.inventory import load_inventory
        try:
            operator = load_inventory(args.inventory)
        except InventoryError as e:
            return _bad_input(str(e))
        several = {n: hits for n in nodes if len(hits := host_matches(operator, n)) > 1}
        if several:
            n, hits = next(iter(several.items()))
            return _bad_input(f"{args.inventory}: node {n} of the allocation matches {len(hits)} hosts of this "
                              f"inventory ({', '.join(h.name for h in hits[:5])}) by short name or ansible_host: "
                              f"name it as Slurm does" + (f" (and {len(several) - 1} more node(s) alike)"
                                                          if len(several) > 1 else ""))
        missing = [n for n in nodes if find_host(operator, n) is None]
        if missing:
            return _bad_input(f"{args.inventory}: node(s) {', '.join(missing)} of the allocation are not "
                              "hosts of this inventory (by name, short name or ansible_host)")
    why = system_folder_problem(run_dir)
    if why:
        return _bad_input(f"--reports {os.path.abspath(run_dir)}: {why}: give a new folder of the run's own")
    stale = earlier_run(run_dir)
    if stale:
        return _bad_input(f"--reports {run_dir} already holds a run ({stale}): give a new folder (the nodes "
                          "would refuse it one by one, or an old exit code would be read as this run's)")
    for sub in ("inventories", "nodes"):
        os.makedirs(os.path.join(run_dir, sub), exist_ok=True)
    for n in nodes:
        with open(os.path.join(run_dir, "inventories", folder_name(n) + ".yml"), "w") as f:
            yaml.safe_dump(node_inventory(n, find_host(operator, n) if operator else None), f, sort_keys=False)
    srun = shutil.which("srun")
    if not srun:
        return _bad_input("srun not found on PATH")
    pytest_args, history_arg = take_history(pytest_args)
    # relative to the folder the launcher runs in, as a plain run's --history and this launcher's --reports are
    history = None if (history_arg or "").lower() == "none" else os.path.abspath(
        history_arg or os.path.join("reports", "history.sqlite"))
    k = str(len(nodes))
    cmd = [srun, f"--nodes={k}", f"--ntasks={k}", "--ntasks-per-node=1", "--kill-on-bad-exit=0", "--label",
           *args.srun_arg, sys.executable, "-m", "gpuaccept.scaleout.slurm", "--task", "--reports", run_dir, "--",
           *pytest_args, "--history", "none"]
    print(f"gpuaccept.scaleout.slurm: {len(nodes)} node(s): {' '.join(nodes)}; reports in {run_dir}", flush=True)
    srun_rc = subprocess.run(cmd).returncode
    codes: dict[str, int | None] = {}
    for n in nodes:
        folder = os.path.join(run_dir, "nodes", folder_name(n))
        try:
            with open(os.path.join(folder, "exitcode")) as f:
                codes[n] = int(f.read().strip())
        except (OSError, ValueError):
            codes[n] = None
    if srun_rc != 0 and all(c is None for c in codes.values()) and not any(
            os.path.isdir(os.path.join(run_dir, "nodes", folder_name(n))) for n in nodes):
        return _bad_input(f"srun exited {srun_rc} before any node's task started (its error is above; check "
                          f"--srun-arg {' '.join(args.srun_arg) or '(none given)'}): no node was tested")
    for n in nodes:
        if codes[n] is None:
            print(f"ERROR: {n}: no exit code in {os.path.join(run_dir, 'nodes', folder_name(n))} (the node's task "
                  f"did not run to the end; srun rc {srun_rc})", file=sys.stderr)
    for n in nodes:
        c = codes[n]
        print(f"{n}: pytest exit code " + ("missing" if c is None else f"{c} (killed by signal {-c})" if c < 0
                                          else str(c)))
    rc = worst_exit(codes)
    merged = os.path.join(run_dir, "merged")
    if importlib.util.find_spec("gpuaccept.scaleout.merge") is None:
        print(f"gpuaccept.scaleout.slurm: gpuaccept.scaleout.merge is not installed: the per-node reports are in "
              f"{os.path.join(run_dir, 'nodes')}", file=sys.stderr)
        return rc
    folders, host_errors = join_plan(nodes, codes, run_dir, srun_rc)
    if not folders and not host_errors:
        print("gpuaccept.scaleout.slurm: no node folder to join (no node ran a test)", file=sys.stderr)
    else:
        if history:
            os.makedirs(os.path.dirname(history), exist_ok=True)
        mrc = subprocess.run([sys.executable, "-m", "gpuaccept.scaleout.merge", *folders, "--into", merged,
                              "--run-id", os.path.basename(run_dir), *(["--history", history] if history else []),
                              *(f"--host-error={h}={why}" for h, why in host_errors.items())]).returncode
        if mrc != 0:
            print(f"ERROR: gpuaccept.scaleout.merge exited {mrc}; the per-node reports are in "
                  f"{os.path.join(run_dir, 'nodes')}", file=sys.stderr)
            rc = max(rc, EXIT_NODE_MISSING)
        else:
            print(f"gpuaccept.scaleout.slurm: joined report in {merged}")
    return rc


if __name__ == "__main__":
    from gpuaccept.config.outputs import quiet_when_reader_closes
    sys.exit(quiet_when_reader_closes(main))  # a reader that closes (| head) ends the output, no traceback
