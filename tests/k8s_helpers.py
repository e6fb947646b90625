"""Helpers of the Kubernetes tests: a recording ``kubectl`` on PATH (no API server can run on the machines these
tests run on), and the node list it answers from. Test files import these from here, never from
one another.

The stand-in is a Python script: every call appends its argv (JSON, one line) to a log; ``get nodes -o json``
prints the node list file; ``cordon``/``uncordon``, ``taint nodes``, ``label nodes`` and ``annotate nodes`` change
that file the way the API server would change the Node objects (``spec.unschedulable``, ``spec.taints``,
``metadata.labels``, ``metadata.annotations``), so that a later run reads what an earlier one did; ``drain``
changes nothing. A node not in the file is refused as kubectl does (``Error from server (NotFound)``, rc 1); a
node listed in ``fail_on`` refuses every call naming it (rc 1).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

_SCRIPT = r'''#!{python}
import json, sys
LOG, NODES, FAIL = {log!r}, {nodes!r}, {fail!r}
args = sys.argv[1:]
with open(LOG, "a") as f:
    f.write(json.dumps(args) + "\n")
doc = json.load(open(NODES))
by = {{n["metadata"]["name"]: n for n in doc["items"]}}
if args[:3] == ["get", "nodes", "-o"]:
    print(json.dumps(doc))
    sys.exit(0)
verb = args[0]
name = args[2] if verb in ("taint", "label", "annotate") else args[1]
if name in FAIL:
    sys.exit(f"error: node {{name}}: refused")
node = by.get(name)
if node is None:
    sys.exit(f'Error from server (NotFound): nodes "{{name}}" not found')
meta, spec = node.setdefault("metadata", {{}}), node.setdefault("spec", {{}})
if verb in ("cordon", "uncordon"):
    spec["unschedulable"] = verb == "cordon"
    if verb == "uncordon":
        spec.pop("unschedulable")
elif verb == "taint":
    spec_text = args[3]
    key = spec_text.split("=")[0].split(":")[0]
    taints = [t for t in spec.get("taints") or [] if t["key"] != key]
    if not spec_text.endswith("-"):
        kv, effect = spec_text.rsplit(":", 1)
        taints.append({{"key": key, "value": kv.partition("=")[2], "effect": effect}})
    spec["taints"] = taints
elif verb in ("label", "annotate"):
    field = meta.setdefault("labels" if verb == "label" else "annotations", {{}})
    for kv in args[3:]:
        if kv.startswith("--"):
            continue
        if kv.endswith("-") and "=" not in kv:
            field.pop(kv[:-1], None)
        else:
            k, _, v = kv.partition("=")
            field[k] = v
json.dump(doc, open(NODES, "w"))
'''


def node(name: str, unschedulable: bool = False, annotations: dict | None = None, taints: list | None = None) -> dict:
    """A Node object as ``kubectl get nodes -o json`` lists it (the fields gpuaccept reads)."""
    spec: dict = {"unschedulable": True} if unschedulable else {}
    if taints:
        spec["taints"] = list(taints)
    return {"kind": "Node", "metadata": {"name": name, "annotations": dict(annotations or {}), "labels": {}},
            "spec": spec}


class Kubectl:
    """A recording ``kubectl`` in ``folder/bin`` answering from ``folder/nodes.json`` (see the module docstring)."""

    def __init__(self, folder: Path, nodes: list[dict], fail_on: tuple[str, ...] = ()):
        self.bin = folder / "bin"
        self.bin.mkdir(parents=True)
        self.log, self.nodes_file = folder / "kubectl.log", folder / "nodes.json"
        self.nodes_file.write_text(json.dumps({"kind": "List", "apiVersion": "v1", "items": nodes}))
        exe = self.bin / "kubectl"
        exe.write_text(_SCRIPT.format(python=sys.executable, log=str(self.log), nodes=str(self.nodes_file),
                                      fail=list(fail_on)))
        exe.chmod(0o755)

    def env(self) -> dict:
        """The environment of a run that finds this kubectl first on PATH."""
        return {"PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}"}

    def calls(self, changes_only: bool = False) -> list[list[str]]:
        """Every call so far (argv less ``kubectl``), in order; ``changes_only``: without ``get nodes``."""
        out = [json.loads(ln) for ln in self.log.read_text().splitlines()] if self.log.exists() else []
        return [c for c in out if not (changes_only and c[:2] == ["get", "nodes"])]

    def forget(self) -> None:
        """Start the call log afresh (the node list stays as the calls left it)."""
        if self.log.exists():
            self.log.unlink()

    def node(self, name: str) -> dict:
        """Node ``name`` as the calls so far left it."""
        return next(n for n in json.loads(self.nodes_file.read_text())["items"] if n["metadata"]["name"] == name)

    def cordoned(self) -> set[str]:
        """The nodes whose ``spec.unschedulable`` is set."""
        return {n["metadata"]["name"] for n in json.loads(self.nodes_file.read_text())["items"]
                if (n.get("spec") or {}).get("unschedulable")}
