"""``python -m gpuaccept.scaleout.k8s manifests|merge|rank``.

``manifests (--inventory FILE [--limit PATTERN] | --nodes a,b) --image IMAGE --out DIR [-m EXPR] ...``: the
YAML files that run gpuaccept on each selected node (gpuaccept.scaleout.k8s.manifests): ``DIR/configmap.yaml``,
``DIR/job-<node>.yaml`` per node, ``DIR/allreduce.yaml`` with ``--allreduce``, and ``DIR/nodes.txt`` (``host
node`` a line, read by ``merge``); ``kubectl apply -f DIR`` applies them. Bad input (an inventory error, a
pattern matching no host, a node name Kubernetes refuses, no GPU count, a bad toleration, DIR holding files):
one line, exit 4, nothing written.

``merge RUN_DIR [--nodes-file DIR/nodes.txt] [--into OUT] [--history PATH] [--min-busbw GB/s] [--at-bytes B]``:
the per-node folders the pods wrote (``RUN_DIR/nodes/<node>/``, on the volume or collected with ``kubectl cp``)
joined by gpuaccept.scaleout.merge into ``OUT`` (default ``RUN_DIR/merged``); a node of ``nodes.txt`` with no
readable folder is an ERROR of its own. The all-reduce's rank documents (``RUN_DIR/allreduce/``, when the
Indexed Job ran) are judged into it as the fleet-wide ``test_allreduce_multinode``
(gpuaccept.scaleout.k8s.allreduce; ``--min-busbw`` its floor). Exit: the worst of the nodes' pytest exit codes
(gpuaccept.scaleout.slurm.worst_exit), else 1 when the all-reduce did not pass; 4 on bad input.

``rank --nodes K --out DIR --args JSON``: one pod of the all-reduce's Indexed Job: its rank is
``JOB_COMPLETION_INDEX``; runs the ``nccl_allreduce`` probe in multi-node mode and keeps its share in
``DIR/rank-<index>.json`` (gpuaccept.scaleout.k8s.allreduce.rank_document: its node, exit code, output tails).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import yaml

from gpuaccept.config.cmdline import OneLineParser
from gpuaccept.errors import ConfigError
from gpuaccept.scaleout.k8s import manifests as mf
from gpuaccept.scaleout.slurm import EXIT_BAD_INPUT, folder_name, node_inventory, worst_exit

PROG = "python -m gpuaccept.scaleout.k8s"


def _bad(msg: str) -> int:
    print(f"{PROG}: {msg}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _manifest_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=f"{PROG} manifests", description="Kubernetes manifests running gpuaccept per node")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--inventory", help="operator inventory (its hosts' vars go into each node's inventory)")
    src.add_argument("--nodes", help="Kubernetes node names, comma-separated (no inventory)")
    p.add_argument("--limit", default=None, help="Ansible host pattern over --inventory")
    p.add_argument("-m", dest="marker", default=None, help="pytest marker expression run on every node")
    p.add_argument("--image", required=True, help="container image holding gpuaccept, torch and its Python")
    p.add_argument("--python", default="python3", help="the image's Python (default python3)")
    p.add_argument("--out", required=True, help="folder for the YAML files (new or empty)")
    p.add_argument("--run-id", default=None, help="run id (default k8s-<UTC time>)")
    p.add_argument("--namespace", default="default")
    p.add_argument("--gpu-resource", default=mf.GPU_RESOURCE, help=f"device plugin resource (default {mf.GPU_RESOURCE})")
    p.add_argument("--gpus", type=int, default=None, help="GPUs per node where the inventory has no gpus_per_node")
    p.add_argument("--toleration", action="append", default=[], metavar="KEY[=VALUE][:EFFECT]")
    p.add_argument("--tolerate-cordon", action="store_true",
                   help="tolerate node.kubernetes.io/unschedulable: test cordoned nodes (the rerun that resumes them)")
    rep = p.add_mutually_exclusive_group()
    rep.add_argument("--reports-pvc", default=None, metavar="CLAIM", help="reports on this PersistentVolumeClaim (ReadWriteMany)")
    rep.add_argument("--reports-hostpath", default=None, metavar="PATH", help="reports in this folder on each node")
    p.add_argument("--host-path", action="append", default=[], metavar="PATH", help="another host path to mount")
    p.add_argument("--thresholds", default=None, metavar="DIR", help="threshold files (*.yaml) to ship in the ConfigMap")
    p.add_argument("--allreduce", action="store_true", help="also the inter-node all-reduce (Indexed Job + Service)")
    p.add_argument("--allreduce-args", default="{}", metavar="JSON", help="more nccl_allreduce probe arguments")
    p.add_argument("--privileged", action="store_true", help="run the containers privileged")
    return p


def _specs(a: argparse.Namespace) -> list[mf.NodeSpec]:
    """The nodes to test from ``--inventory``/``--limit`` or ``--nodes``. Raises ConfigError (one line)."""
    if a.nodes is not None:
        names = [n.strip() for n in a.nodes.split(",") if n.strip()]
        if not names:
            raise ConfigError("--nodes: no node named")
        hosts = [(n, {}, None) for n in names]
    else:
        from gpuaccept.config.hostvars import check_host
        from gpuaccept.config.inventory import load_inventory
        inv = load_inventory(a.inventory)
        hosts = [(h.name, check_host(h, a.inventory), h) for h in inv.select(a.limit)]
    out, seen = [], {}
    for name, parsed, host in hosts:
        node = mf.k8s_node_name(name, parsed)
        why = mf.node_name_problem(node)
        if why:
            raise ConfigError(f"{a.inventory or '--nodes'}: host {name}: node name {node!r}: {why}"
                              + ("" if a.nodes else " (set k8s_node_name)"))
        if node in seen:
            raise ConfigError(f"{a.inventory}: hosts {seen[node]} and {name} are both Kubernetes node {node}")
        seen[node] = name
        gpus = parsed.get("gpus_per_node") or a.gpus
        if not gpus or int(gpus) < 1:
            raise ConfigError(f"{a.inventory or '--nodes'}: host {name}: no GPU count (set gpus_per_node, or give "
                              "--gpus N): its Job requests every GPU of the node")
        paths = tuple(str(p) for v in mf.PATH_VARS for p in (parsed.get(v) or []))
        out.append(mf.NodeSpec(name, node, int(gpus), node_inventory(name, host), paths))
    return out


def _thresholds(folder: str | None) -> dict[str, str]:
    if not folder:
        return {}
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith((".yaml", ".yml")))
        return {n: open(os.path.join(folder, n), encoding="utf-8").read() for n in names}
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--thresholds {folder}: {e}") from None


def build(a: argparse.Namespace) -> list[tuple[str, list[dict]]]:
    """The files to write as ``(name, documents)`` from the parsed arguments. Raises ConfigError (one line)."""
    try:
        tols = [mf.parse_toleration(t) for t in a.toleration]
        extra = json.loads(a.allreduce_args)
        if not isinstance(extra, dict):
            raise ValueError("--allreduce-args: not a JSON object")
    except ValueError as e:
        raise ConfigError(f"--toleration/--allreduce-args: {e}") from None
    if a.tolerate_cordon:
        tols.append({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"})
    for p in [a.reports_hostpath, *a.host_path]:
        if p is not None and not p.startswith("/"):
            raise ConfigError(f"host path {p!r}: not absolute")
    rid = a.run_id or time.strftime("k8s-%Y%m%dT%H%M%SZ", time.gmtime())
    if mf.label_value(rid) != rid:
        raise ConfigError(f"--run-id {rid!r}: use letters, digits, '-', '_' and '.' (at most 63)")
    plan = mf.Plan(rid, _specs(a), a.image, a.python, a.namespace, a.gpu_resource, tols,
                   ("hostPath", a.reports_hostpath) if a.reports_hostpath else ("pvc", a.reports_pvc or "gpuaccept-reports"),
                   tuple(a.host_path), tuple(["-m", a.marker] if a.marker else []) + tuple(a.pytest_args),
                   _thresholds(a.thresholds), a.privileged)
    try:
        files = [("configmap.yaml", [mf.configmap(plan)])]
        files += [(f"job-{folder_name(n.node)}.yaml", [mf.node_job(plan, n)]) for n in plan.nodes]
        if a.allreduce:
            if len(plan.nodes) < 2:
                raise ValueError("--allreduce needs two nodes or more")
            files.append(("allreduce.yaml", mf.allreduce(plan, extra)))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return files


class _Dumper(yaml.SafeDumper):
    """YAML without anchors and aliases (a person reads every field where it applies)."""

    def ignore_aliases(self, data) -> bool:
        return True


_Dumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def manifests_main(argv: list[str]) -> int:
    """The ``manifests`` command; see the module docstring."""
    own, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    a = _manifest_parser().parse_args(own)
    a.pytest_args = rest
    if os.path.isdir(a.out) and os.listdir(a.out):
        return _bad(f"--out {a.out}: not empty (give a new folder: an old Job file would be applied too)")
    try:
        files = build(a)
    except ConfigError as e:
        return _bad(str(e))
    os.makedirs(a.out, exist_ok=True)
    for name, docs in files:
        with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
            yaml.dump_all(docs, f, Dumper=_Dumper, sort_keys=False, width=120)
    nodes = [(d["metadata"]["annotations"]["gpuaccept.io/host"], d["metadata"]["annotations"]["gpuaccept.io/node-name"])
             for _, docs in files for d in docs if d["kind"] == "Job" and "annotations" in d["metadata"]]
    with open(os.path.join(a.out, "nodes.txt"), "w", encoding="utf-8") as f:
        f.write("".join(f"{h} {n}\n" for h, n in nodes))
    written = [name for name, _ in files] + ["nodes.txt"]  # every file of the folder, nodes.txt (read by merge) too
    print(f"{PROG}: {len(nodes)} node(s), {len(written)} file(s) in {a.out} ({len(files)} for kubectl, and "
          f"nodes.txt for merge): kubectl apply -f {a.out}")
    return 0


def merge_main(argv: list[str]) -> int:
    """The ``merge`` command; see the module docstring."""
    p = OneLineParser(prog=f"{PROG} merge", description="join the pods' report folders")
    p.add_argument("run_dir")
    p.add_argument("--nodes-file", default=None, help="nodes.txt of the manifests (default: the folders present)")
    p.add_argument("--into", default=None)
    p.add_argument("--history", default=None)
    p.add_argument("--min-busbw", type=float, default=None, metavar="GB/s",
                   help="floor of the all-reduce's in-place busbw (default: recorded, not judged)")
    p.add_argument("--at-bytes", type=int, default=None, metavar="B",
                   help="message size of the judged busbw (default: the largest)")
    a = p.parse_args(argv)
    if not os.path.isdir(a.run_dir):  # a typo: refused before anything is written (no RUN_DIR/merged made)
        return _bad(f"{a.run_dir}: {'not a folder' if os.path.lexists(a.run_dir) else 'no such folder'} (the run's "
                    "folder the pods wrote into, holding nodes/<node>/)")
    from gpuaccept.scaleout.k8s.allreduce import merge_record
    from gpuaccept.scaleout.merge import merge, read_folder
    nodes_dir = os.path.join(a.run_dir, "nodes")
    try:
        if a.nodes_file:
            with open(a.nodes_file, encoding="utf-8") as f:
                pairs = [tuple(ln.split()) for ln in f if ln.strip()]
            if any(len(pr) != 2 for pr in pairs):
                return _bad(f"{a.nodes_file}: expected 'host node' on every line")
        else:
            pairs = [(n, n) for n in sorted(os.listdir(nodes_dir))]
    except OSError as e:
        return _bad(f"{a.nodes_file or nodes_dir}: {e.strerror or e}")
    folders, errors, codes = [], {}, {}
    for host, node in pairs:
        folder = os.path.join(nodes_dir, folder_name(node))
        try:
            with open(os.path.join(folder, "exitcode"), encoding="utf-8") as f:
                codes[node] = int(f.read().strip())
        except (OSError, ValueError):
            codes[node] = None
        try:
            read_folder(folder)
        except (ValueError, OSError) as e:
            if codes[node] != 5:
                errors[host] = (f"no results from node {node}'s pod ({e}): its Job did not run, was not scheduled "
                                f"(kubectl describe job), or its folder was not collected into {nodes_dir}")
            continue
        folders.append(folder)
    into = a.into or os.path.join(a.run_dir, "merged")
    rid = os.path.basename(os.path.abspath(a.run_dir))
    ar = merge_record(a.run_dir, pairs, rid, a.min_busbw, a.at_bytes)
    try:
        merge(folders, into, a.history, run_id=rid, host_errors=errors, records=[ar] if ar else [])
    except (ValueError, ConfigError) as e:
        return _bad(str(e))
    print(f"{PROG}: joined report of {len(pairs)} node(s) in {into}"
          + (f"; the all-reduce of {a.run_dir}/allreduce: {ar.outcome}" if ar else ""))
    rc = worst_exit(codes)
    return rc if rc or ar is None or ar.outcome == "passed" else 1


def rank_main(argv: list[str], env=os.environ) -> int:
    """The ``rank`` command; see the module docstring."""
    from gpuaccept.scaleout.k8s.allreduce import rank_document
    from gpuaccept.scaleout.slurm import SlurmWorld
    from gpuaccept.scaleout.slurm_allreduce import PROBE_FILE, probe_args
    p = OneLineParser(prog=f"{PROG} rank")
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--args", required=True)
    a = p.parse_args(argv)
    idx = env.get("JOB_COMPLETION_INDEX", "")
    if not idx.isdigit() or int(idx) >= a.nodes:
        return _bad(f"JOB_COMPLETION_INDEX={idx!r}: not set or not below --nodes {a.nodes} (run in the Indexed Job)")
    base = json.loads(a.args)
    hosts = tuple(f"index-{i}" for i in range(a.nodes))
    world = SlurmWorld(base["master_addr"], int(idx), a.nodes, hosts, hosts[int(idx)])
    res = subprocess.run([sys.executable, PROBE_FILE, json.dumps(probe_args(base, world))], capture_output=True, text=True)
    sys.stderr.write(res.stderr)
    sys.stdout.write(res.stdout)
    os.makedirs(a.out, exist_ok=True)
    doc = rank_document(int(idx), env.get("NODE_NAME") or None, res.returncode, res.stdout, res.stderr, base)
    with open(os.path.join(a.out, f"rank-{int(idx)}.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(doc) + "\n")
    return res.returncode


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``manifests``, ``merge`` or ``rank``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cmds = {"manifests": manifests_main, "merge": merge_main, "rank": rank_main}
    if argv[:1] in (["-h"], ["--help"]):  # the commands and their arguments (each command has its own --help)
        print(__doc__.strip())
        return 0
    if not argv or argv[0] not in cmds:
        return _bad(f"say one of {', '.join(cmds)} (see docs/kubernetes.md)")
    return cmds[argv[0]](argv[1:])


if __name__ == "__main__":
    from gpuaccept.config.outputs import quiet_when_reader_closes
    sys.exit(quiet_when_reader_closes(main))  # a reader that closes (| head) ends the output, no traceback
