"""The Kubernetes manifests that run gpuaccept on each selected node (pure: documents as dicts; the CLI in
gpuaccept.scaleout.k8s.__main__ writes them as YAML).

- a ConfigMap ``gpuaccept-<run>``: one ``ansible_connection=local`` inventory per node (gpuaccept.scaleout.slurm
  .node_inventory: the operator's variables of that host, connection variables dropped) and the threshold files;
- per node, a Job pinned to that node only (node affinity on the field ``metadata.name``, as the DaemonSet
  controller pins its pods, so the scheduler still honours taints and resources), requesting every GPU of the
  node through the device plugin's resource (``nvidia.com/gpu`` unless the operator names another), tolerating
  the taints the operator names and gpuaccept's own ``gpuaccept.io/health`` taint (a node we took out must be
  testable to be put back), on the host's network, with the host paths the storage layer tests mounted at the
  same path; it runs ``<python> -m gpuaccept.cli --inventory ... --reports /reports/<run>/nodes/<node>
  --history none <pytest arguments>`` and writes pytest's exit code to ``exitcode`` beside the reports, the
  layout of the Slurm launcher (gpuaccept.scaleout.slurm), so the same merge joins them;
- with ``allreduce``: a headless Service and one Indexed Job across the selected nodes, one pod per node, rank
  from ``JOB_COMPLETION_INDEX``, rank 0 reached as ``<job>-0.<service>.<namespace>.svc`` (the Indexed Job's
  stable pod hostname under its subdomain).

Reports go to a PersistentVolumeClaim the operator made (ReadWriteMany: every node writes its own folder) or
to a hostPath on each node (collected with ``kubectl cp`` or by hand). Object names are DNS-1123 labels
(:func:`dns_label`); label values are Kubernetes label values (:func:`label_value`).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from gpuaccept.scaleout.slurm import folder_name
from gpuaccept.transport.shell import command as shell_command

#: the device plugin's resource for NVIDIA GPUs (NVIDIA k8s-device-plugin README, "nvidia.com/gpu")
GPU_RESOURCE = "nvidia.com/gpu"
#: gpuaccept's taint and label keys on a node (gpuaccept.scaleout.k8s.nodes); chosen
HEALTH_TAINT = "gpuaccept.io/health"
#: where the ConfigMap and the reports are mounted in the container; chosen
CONFIG_DIR, REPORTS_DIR = "/etc/gpuaccept", "/reports"
#: Kubernetes' limit on a ConfigMap's data (kubernetes.io/docs/concepts/configuration/configmap: "cannot exceed 1 MiB")
CONFIGMAP_MAX_BYTES = 1024 * 1024
#: taint effects (Kubernetes API, core/v1 Taint.effect)
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
#: inventory variables naming host paths the storage layer tests (gpuaccept.config.storage.VALIDATORS)
PATH_VARS = ("storage_paths", "fs_paths", "gds_paths", "storage_devices")
#: the all-reduce's rendezvous port on rank 0 (the node's network: hostNetwork); chosen, as torch's default 29500
ALLREDUCE_PORT = 29500

_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_RE = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                           r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def node_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a Kubernetes node name (a DNS-1123 subdomain: lower-case letters, digits, ``-``
    and ``.``, at most 253 characters), or None."""
    if not name or len(name) > 253 or not _SUBDOMAIN_RE.match(name):
        return "not a Kubernetes node name (lower-case letters, digits, '-' and '.', at most 253 characters)"
    return None


def k8s_node_name(host: str, host_vars: dict | None = None) -> str:
    """The Kubernetes node name of inventory host ``host``: its ``k8s_node_name`` var, else the host name."""
    given = (host_vars or {}).get("k8s_node_name")
    return str(given) if given else host


def dns_label(text: str) -> str:
    """``text`` as a DNS-1123 label (an object name, at most 63 characters, lower-case alphanumerics and
    ``-``) (pure). A name changed or cut on the way gets ``-`` and 8 hex digits of its SHA-1, so two nodes
    never share one."""
    clean = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")
    if clean == text and len(clean) <= 63:
        return clean
    tag = hashlib.sha1(text.encode()).hexdigest()[:8]
    return f"{clean[:63 - 9].rstrip('-')}-{tag}".lstrip("-")


def label_value(text: str) -> str:
    """``text`` as a Kubernetes label value (at most 63 characters: alphanumerics, ``-``, ``_``, ``.``, starting
    and ending alphanumeric) (pure): other characters made ``_``, cut at 63."""
    v = re.sub(r"[^A-Za-z0-9_.-]", "_", str(text))[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", v)


def parse_toleration(text: str) -> dict:
    """``KEY[=VALUE][:EFFECT]`` (kubectl taint's form) -> a core/v1 Toleration (pure): ``Equal`` with a
    value, ``Exists`` without; no effect: every effect. Raises ValueError with the phrase of the refusal."""
    spec, _, effect = text.rpartition(":") if ":" in text else (text, "", "")
    key, eq, value = spec.partition("=")
    if effect and effect not in EFFECTS:
        raise ValueError(f"effect {effect!r} is not one of {', '.join(EFFECTS)}")
    if not _QUALIFIED_RE.match(key) or len(key.rpartition("/")[0]) > 253:
        raise ValueError(f"key {key!r} is not a Kubernetes taint key (KEY[=VALUE][:EFFECT])")
    if eq and not _LABEL_VALUE_RE.match(value) or len(value) > 63:
        raise ValueError(f"value {value!r} is not a Kubernetes taint value")
    tol = {"key": key, "operator": "Equal" if eq else "Exists"}
    if eq:
        tol["value"] = value
    if effect:
        tol["effect"] = effect
    return tol


@dataclass(frozen=True)
class NodeSpec:
    """One node to test: ``host`` (inventory name), ``node`` (Kubernetes node name), ``gpus`` (all of them),
    ``inventory`` (its one-host inventory document) and ``paths`` (host paths to mount)."""

    host: str
    node: str
    gpus: int
    inventory: dict
    paths: tuple[str, ...] = ()


@dataclass
class Plan:
    """What the operator asked for: the run id, namespace, image and its Python, the GPU resource, the
    tolerations (core/v1 Toleration dicts), the reports volume (``("pvc", claim)`` or ``("hostPath", path)``),
    extra host paths, the pytest arguments (``-m`` and the like), the threshold files (name -> text) and
    the nodes."""

    run_id: str
    nodes: list[NodeSpec]
    image: str
    python: str = "python3"
    namespace: str = "default"
    gpu_resource: str = GPU_RESOURCE
    tolerations: list[dict] = field(default_factory=list)
    reports: tuple[str, str] = ("pvc", "gpuaccept-reports")
    host_paths: tuple[str, ...] = ()
    pytest_args: tuple[str, ...] = ()
    thresholds: dict[str, str] = field(default_factory=dict)
    privileged: bool = False


def _labels(plan: Plan, component: str, node: str | None = None) -> dict:
    out = {"app.kubernetes.io/name": "gpuaccept", "app.kubernetes.io/component": component,
           "gpuaccept.io/run-id": label_value(plan.run_id)}
    if node:
        out["gpuaccept.io/node"] = label_value(node)
    return out


def config_name(plan: Plan) -> str:
    """The ConfigMap's name: ``gpuaccept-<run>``."""
    return dns_label(f"gpuaccept-{plan.run_id}")


def _key(kind: str, name: str) -> str:
    """A ConfigMap key (``[-._a-zA-Z0-9]+``) for a file: ``inv-<folder name>.yml``, ``thr-<name>``."""
    return re.sub(r"[^-._a-zA-Z0-9]", "_", f"{kind}-{name}")


def configmap(plan: Plan) -> dict:
    """The ConfigMap: each node's inventory (YAML) and the threshold files. Raises ValueError when its data
    exceed :data:`CONFIGMAP_MAX_BYTES`."""
    import yaml
    data = {_key("inv", folder_name(n.node) + ".yml"): yaml.safe_dump(n.inventory, sort_keys=False)
            for n in plan.nodes}
    data.update({_key("thr", name): text for name, text in sorted(plan.thresholds.items())})
    size = sum(len(k.encode()) + len(v.encode()) for k, v in data.items())
    if size > CONFIGMAP_MAX_BYTES:
        raise ValueError(f"the ConfigMap would hold {size} bytes, above Kubernetes' 1 MiB: select fewer nodes "
                         "or fewer threshold files per set of manifests")
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": config_name(plan), "namespace": plan.namespace, "labels": _labels(plan, "config")},
            "data": data}


def _pin(nodes: list[str]) -> dict:
    """Required node affinity on the field ``metadata.name`` (the node's name, not a label that may differ)."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(nodes)}]}]}}}


def _tolerations(plan: Plan) -> list[dict]:
    own = {"key": HEALTH_TAINT, "operator": "Exists", "effect": "NoSchedule"}
    return list(plan.tolerations) + ([own] if own not in plan.tolerations else [])


def _volumes(plan: Plan, items: list[dict], paths: tuple[str, ...]) -> tuple[list[dict], list[dict]]:
    """(volumes, volumeMounts): the ConfigMap's ``items``, the reports volume, each host path at its path."""
    kind, where = plan.reports
    reports = {"persistentVolumeClaim": {"claimName": where}} if kind == "pvc" else \
        {"hostPath": {"path": where, "type": "DirectoryOrCreate"}}
    vols = [{"name": "config", "configMap": {"name": config_name(plan), "items": items}},
            {"name": "reports", **reports}]
    mounts = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
              {"name": "reports", "mountPath": REPORTS_DIR}]
    for i, p in enumerate(dict.fromkeys((*paths, *plan.host_paths))):
        vols.append({"name": f"host-{i}", "hostPath": {"path": p}})
        mounts.append({"name": f"host-{i}", "mountPath": p})
    return vols, mounts


def _container(plan: Plan, argv: list[str], gpus: int, mounts: list[dict], env: list[dict]) -> dict:
    c = {"name": "gpuaccept", "image": plan.image, "command": argv,
         "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}, *env],
         "resources": {"requests": {plan.gpu_resource: str(gpus)}, "limits": {plan.gpu_resource: str(gpus)}},
         "volumeMounts": mounts}
    if plan.privileged:
        c["securityContext"] = {"privileged": True}
    return c


def _pod(plan: Plan, labels: dict, affinity: dict, container: dict, vols: list[dict], **extra) -> dict:
    return {"metadata": {"labels": labels},
            "spec": {"restartPolicy": "Never", "hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet",
                     **extra, "affinity": affinity, "tolerations": _tolerations(plan), "containers": [container],
                     "volumes": vols}}


def node_dir(plan: Plan, node: str) -> str:
    """Where node ``node``'s pod writes its reports: ``/reports/<run>/nodes/<folder name of node>``."""
    return f"{REPORTS_DIR}/{folder_name(plan.run_id)}/nodes/{folder_name(node)}"


def node_job(plan: Plan, n: NodeSpec) -> dict:
    """The Job that runs the suite on node ``n`` alone (see the module docstring)."""
    inv_key = _key("inv", folder_name(n.node) + ".yml")
    items = [{"key": inv_key, "path": "inventory.yml"}] + [
        {"key": _key("thr", name), "path": f"thresholds/{name}"} for name in sorted(plan.thresholds)]
    vols, mounts = _volumes(plan, items, n.paths)
    out = node_dir(plan, n.node)
    run = [plan.python, "-m", "gpuaccept.cli", "--inventory", f"{CONFIG_DIR}/inventory.yml", "--reports", out,
           "--history", "none", *(["--thresholds", f"{CONFIG_DIR}/thresholds"] if plan.thresholds else []),
           *plan.pytest_args]
    script = (f"mkdir -p {shell_command([out])} && {shell_command(run)}; rc=$?; "
              f"echo \"$rc\" > {shell_command([out + '/exitcode'])}; exit \"$rc\"")
    labels = _labels(plan, "node", n.node)
    pod = _pod(plan, labels, _pin([n.node]), _container(plan, ["/bin/sh", "-c", script], n.gpus, mounts, []), vols)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": dns_label(f"gpuaccept-{plan.run_id}-{n.node}"), "namespace": plan.namespace,
                         "labels": labels, "annotations": {"gpuaccept.io/node-name": n.node, "gpuaccept.io/host": n.host}},
            "spec": {"backoffLimit": 0, "template": pod}}


def allreduce(plan: Plan, args: dict | None = None, port: int = ALLREDUCE_PORT) -> list[dict]:
    """The headless Service and the Indexed Job of the inter-node all-reduce over every node of ``plan``:
    ``completions`` = ``parallelism`` = the node count, one pod per node (pinned to the selected nodes, and
    no two on one node), each running ``python -m gpuaccept.scaleout.k8s rank`` (its rank from
    ``JOB_COMPLETION_INDEX``), rank 0 at ``<job>-0.<service>.<namespace>.svc``. ``args``: more probe arguments.
    Raises ValueError when the nodes declare different GPU counts (one pod template requests one count)."""
    counts = sorted({n.gpus for n in plan.nodes})
    if len(counts) != 1:
        raise ValueError(f"the all-reduce's nodes declare different GPU counts ({', '.join(map(str, counts))}): "
                         "select nodes of one shape")
    svc = dns_label(f"gpuaccept-{plan.run_id}-allreduce")
    job = dns_label(f"gpuaccept-{plan.run_id}-ar")
    k = len(plan.nodes)
    labels = _labels(plan, "allreduce")
    base = {"master_addr": f"{job}-0.{svc}.{plan.namespace}.svc", "master_port": port,
            "ranks_per_node": counts[0], "marker": f"gpuaccept-k8s-{label_value(plan.run_id)}", **(args or {})}
    argv = [plan.python, "-m", "gpuaccept.scaleout.k8s", "rank", "--nodes", str(k),
            "--out", f"{REPORTS_DIR}/{folder_name(plan.run_id)}/allreduce", "--args", json.dumps(base, sort_keys=True)]
    vols, mounts = _volumes(plan, [], ())
    vols, mounts = vols[1:], mounts[1:]  # no ConfigMap: the ranks read their arguments from the command
    spread = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}]}}
    pod = _pod(plan, labels, {**_pin([n.node for n in plan.nodes]), **spread},
               _container(plan, argv, counts[0], mounts, []), vols, subdomain=svc)
    return [{"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": svc, "namespace": plan.namespace, "labels": labels},
             "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": labels,
                      "ports": [{"name": "rendezvous", "port": port, "protocol": "TCP"}]}},
            {"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": job, "namespace": plan.namespace, "labels": labels},
             "spec": {"completionMode": "Indexed", "completions": k, "parallelism": k, "backoffLimit": 0,
                      "template": pod}}]
