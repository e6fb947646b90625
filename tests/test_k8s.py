"""Kubernetes: the manifests (validated by kubernetes-validate against the Kubernetes releases it ships),
the per-node Job's script run for real on replayed nodes and the pods' folders merged, and the kubectl node actions
(planned purely; applied through a recorded kubectl stand-in on PATH: no API server runs here)."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes_validate import utils as kv

from gpuaccept.scaleout.k8s.__main__ import main as k8s_main
from gpuaccept.scaleout.k8s.nodes import plan, run_step
from gpuaccept.scaleout.quarantine import earlier_results
from project_helpers import DATA, replay_folder

#: the Kubernetes releases every manifest is validated against (docs/kubernetes.md names them)
RELEASES = ("1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0", "1.35.0", "1.36.0", "1.37.0")


def _inventory(tmp_path: Path, extra: str = "") -> Path:
    inv = tmp_path / "inv.ini"
    inv.write_text("[gpu]\ngpu-01 gpus_per_node=8 storage_paths=/mnt/scratch\n"
                   "gpu-02.example.com gpus_per_node=8 k8s_node_name=gpu-02\n" + extra)
    return inv


def _make(tmp_path: Path, *extra: str, inv: Path | None = None) -> tuple[int, Path]:
    out = tmp_path / "manifests"
    rc = k8s_main(["manifests", "--inventory", str(inv or _inventory(tmp_path)), "-m", "health", "--image",
                   "registry.example.com/gpuaccept:0.1", "--out", str(out), "--run-id", "night1", "--namespace",
                   "gpuaccept", "--toleration", "nvidia.com/gpu:NoSchedule", "--toleration", "dedicated=gpu:NoExecute",
                   *extra])
    return rc, out


def _docs(out: Path) -> dict[str, list[dict]]:
    return {p.name: list(yaml.safe_load_all(p.read_text())) for p in sorted(out.glob("*.yaml"))}


def test_every_manifest_validates_on_every_release(tmp_path):
    rc, out = _make(tmp_path, "--allreduce")
    assert rc == 0
    docs = _docs(out)
    assert sorted(docs) == ["allreduce.yaml", "configmap.yaml", "job-gpu-01.yaml", "job-gpu-02.yaml"]
    for name, ds in docs.items():
        for d in ds:
            for release in RELEASES:
                kv.validate(d, release, strict=True)  # raises ValidationError on any unknown or wrong field
    bad = json.loads(json.dumps(docs["job-gpu-01.yaml"][0]))
    bad["spec"]["template"]["spec"]["hostNetwrk"] = True  # the validator does catch a misspelt field
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, RELEASES[-1], strict=True)
    assert (out / "nodes.txt").read_text() == "gpu-01 gpu-01\ngpu-02.example.com gpu-02\n"


def test_each_node_job_is_pinned_to_its_node_requests_every_gpu_and_tolerates(tmp_path):
    rc, out = _make(tmp_path, "--reports-hostpath", "/var/lib/gpuaccept")
    assert rc == 0
    docs = _docs(out)
    for file, node in (("job-gpu-01.yaml", "gpu-01"), ("job-gpu-02.yaml", "gpu-02")):
        (job,) = docs[file]
        pod = job["spec"]["template"]["spec"]
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        (c,) = pod["containers"]
        assert c["resources"]["limits"] == c["resources"]["requests"] == {"nvidia.com/gpu": "8"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        assert {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"} in pod["tolerations"]
        assert {"key": "gpuaccept.io/health", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        assert pod["hostNetwork"] is True and job["spec"]["backoffLimit"] == 0
        script = c["command"][2]
        assert f"--reports /reports/night1/nodes/{node} --history none -m health" in script
        vols = {v["name"]: v for v in pod["volumes"]}
        assert vols["reports"]["hostPath"] == {"path": "/var/lib/gpuaccept", "type": "DirectoryOrCreate"}
        assert [i["path"] for i in vols["config"]["configMap"]["items"]] == ["inventory.yml"]
    mounts = [m["mountPath"] for m in docs["job-gpu-01.yaml"][0]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]]
    assert "/mnt/scratch" in mounts  # the storage layer's path, on gpu-01 only
    (cm,) = docs["configmap.yaml"]
    inv2 = yaml.safe_load(cm["data"]["inv-gpu-02.yml"])
    assert inv2["all"]["hosts"]["gpu-02.example.com"]["ansible_connection"] == "local"


def test_the_indexed_allreduce_job_and_its_headless_service(tmp_path):
    rc, out = _make(tmp_path, "--allreduce")
    assert rc == 0
    svc, job = _docs(out)["allreduce.yaml"]
    assert svc["kind"] == "Service" and svc["spec"]["clusterIP"] == "None"
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 2
    pod = spec["template"]
    assert pod["spec"]["subdomain"] == svc["metadata"]["name"]
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    nodes = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchFields"][0]["values"]
    assert nodes == ["gpu-01", "gpu-02"]
    assert pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
        "topologyKey"] == "kubernetes.io/hostname"
    argv = pod["spec"]["containers"][0]["command"]
    args = json.loads(argv[argv.index("--args") + 1])
    assert args["master_addr"] == f"{job['metadata']['name']}-0.{svc['metadata']['name']}.gpuaccept.svc"
    assert args["master_port"] == svc["spec"]["ports"][0]["port"] and args["ranks_per_node"] == 8


@pytest.mark.parametrize("args, says", [
    (["--limit", "nosuch"], "nosuch"),
    (["--toleration", "nvidia.com/gpu:NoWay"], "effect 'NoWay' is not one of"),
    (["--reports-pvc", "a", "--reports-hostpath", "/x"], "not allowed with argument"),
    (["--run-id", "a b"], "--run-id 'a b'"),
    (["--allreduce", "--limit", "gpu-01"], "--allreduce needs two nodes"),
])
def test_bad_input_is_one_line_exit_4_and_writes_nothing(tmp_path, capsys, args, says):
    with pytest.raises(SystemExit) if "--reports-pvc" in args else _nothing():
        rc, out = _make(tmp_path, *args)
        assert rc == 4
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "manifests").exists()


def _nothing():
    import contextlib
    return contextlib.nullcontext()


@pytest.mark.parametrize("line, says", [("GPU_03 gpus_per_node=8\n", "not a Kubernetes node name"),
                                        ("gpu-03\n", "no GPU count")])
def test_an_inventory_host_kubernetes_cannot_run_is_refused(tmp_path, capsys, line, says):
    rc, _ = _make(tmp_path, inv=_inventory(tmp_path, line))
    err = capsys.readouterr().err
    assert rc == 4 and says in err and len(err.strip().splitlines()) == 1, err


def test_manifests_count_every_file_they_write(tmp_path, capsys):
    """Before: "4 file(s)" printed over a folder of 5 (nodes.txt not counted). After: the count is the folder's."""
    rc, out = _make(tmp_path, "--allreduce")
    said = capsys.readouterr().out
    n = len(list(out.iterdir()))
    assert rc == 0 and (out / "nodes.txt").exists() and n == 5
    assert f"{n} file(s) in {out}" in said, said


def test_help_is_shown_and_exits_0(capsys):
    """Before: ``python -m gpuaccept.scaleout.k8s --help`` was refused (exit 4, "say one of ...")."""
    for flag in ("--help", "-h"):
        assert k8s_main([flag]) == 0
        said = capsys.readouterr().out
        assert "manifests" in said and "merge" in said and "rank" in said, said
    assert k8s_main([]) == 4 and len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_merge_of_a_run_folder_that_is_not_one_is_refused_and_writes_nothing(tmp_path, capsys, kind):
    """Before: ``merge /nonexist --nodes-file nodes.txt`` made /nonexist/merged/ with every node ERROR, exit 3.
    After: a RUN_DIR that does not exist or is not a folder is one line, exit 4, nothing written."""
    _, out = _make(tmp_path)
    run = tmp_path / "night1"
    if kind == "file":
        run.write_text("not a folder\n")
    rc = k8s_main(["merge", str(run), "--nodes-file", str(out / "nodes.txt")])
    err = capsys.readouterr().err
    assert rc == 4 and str(run) in err and len(err.strip().splitlines()) == 1, err
    assert (not run.exists()) if kind == "missing" else run.read_text() == "not a folder\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["inv.ini", "manifests"] + (["night1"] if kind == "file" else []))


# -- the pods' folders, merged -------------------------------------------------------------------------------
def test_the_pods_folders_merge_into_one_report(tmp_path):
    """Each node Job's own shell script, run here with the container's paths moved under tmp (the ConfigMap's
    inventory as the pod would see it; the real suite on replayed 2xH200 captures): two nodes write their
    folders as the pods do, a third node's pod never ran; the merge joins them, the third an ERROR."""
    cap = replay_folder(tmp_path, DATA)
    inv = tmp_path / "inv.ini"
    common = f"gpuaccept_replay={cap} gpu_sku=h200-sxm-141gb gpus_per_node=2"
    inv.write_text(f"[gpu]\nn-a {common}\nn-b {common} k8s_node_name=node-b\nn-c {common}\n")
    out = tmp_path / "m"
    assert k8s_main(["manifests", "--inventory", str(inv), "-m", "health", "--image", "x", "--python", sys.executable,
                     "--out", str(out), "--run-id", "r1", "--", "-k", "not fleet_consistency", "-p",
                     "no:cacheprovider"]) == 0
    docs = _docs(out)
    data = docs["configmap.yaml"][0]["data"]
    root, etc = tmp_path / "reports", tmp_path / "etc"
    for node in ("n-a", "node-b"):
        (job,) = docs[f"job-{node}.yaml"]
        (etc / node).mkdir(parents=True)
        (etc / node / "inventory.yml").write_text(data[f"inv-{node}.yml"])
        script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
        script = script.replace("/etc/gpuaccept", str(etc / node)).replace("/reports", str(root))
        res = subprocess.run(["/bin/sh", "-c", script], cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        assert (root / "r1" / "nodes" / node / "exitcode").read_text() == "0\n"
    rc = k8s_main(["merge", str(root / "r1"), "--nodes-file", str(out / "nodes.txt")])
    assert rc == 3  # a node that left no exit code counts as 3 (gpuaccept.scaleout.slurm.worst_exit)
    merged = json.loads((root / "r1" / "merged" / "results.json").read_text())
    assert set(merged["hosts"]) >= {"n-a", "n-b"}
    summary = (root / "r1" / "merged" / "summary.md").read_text()
    assert "- **PASS** `n-a`" in summary and "- **PASS** `n-b`" in summary, summary
    assert "- **ERROR** `n-c`" in summary and "no results from node n-c's pod" in summary, summary
    assert (root / "r1" / "merged" / "failed-hosts.txt").read_text() == "n-c\n"


# -- node actions ------------------------------------------------------------------------------------------
def _v(verdict: str, action: str | None = None, cause: str | None = None) -> dict:
    return {"verdict": verdict, "reasons": [f"test_x: {verdict.lower()} reason"] if verdict != "PASS" else [],
            "action": {"action": action, "cause": cause, "reason": f"{action} reason"} if action else {}}


HV = {"h-rma": _v("FAIL", "drain-rma", "hardware"), "h-reset": _v("FAIL", "reset-gpu", "hardware"),
      "h-reboot": _v("ERROR", "reboot", "hardware"), "h-config": _v("FAIL", "fix-config", "configuration"),
      "h-rerun": _v("ERROR", "rerun", "contention"), "h-ok": _v("PASS"), "h-skip": _v("SKIP"),
      "h-ops": _v("FAIL", "drain-rma", "hardware"), "h-back": _v("PASS")}
HOSTS = list(HV)


def _node(name: str, unschedulable: bool = False, reason: str | None = None, taint: bool = False) -> dict:
    spec = {"unschedulable": True} if unschedulable else {}
    if taint:
        spec["taints"] = [{"key": "gpuaccept.io/health", "value": "drain-rma", "effect": "NoSchedule"}]
    return {"kind": "Node", "metadata": {"name": name, "annotations": {"gpuaccept.io/reason": reason} if reason else {}},
            "spec": spec}


def _cluster(earlier_dir: Path) -> dict:
    return {"kind": "List", "items": [_node(h) for h in HOSTS if h not in ("h-ops", "h-back")] + [
        _node("h-ops", unschedulable=True), _node("h-back", True, f"gpuaccept r0: drain-rma: x (evidence {earlier_dir})", True)]}


def _earlier(tmp_path: Path) -> Path:
    d = tmp_path / "reports" / "r0"
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps({"run_id": "r0", "tests": [
        {"name": "test_row_remapping[h-back]", "host": "h-back", "outcome": "failed"}]}))
    return d


def test_the_kubectl_plan_on_hosts_of_every_verdict(tmp_path):
    ev = _earlier(tmp_path)
    steps, line = plan(HV, HOSTS, "r1", "/rep/r1", {h: h for h in HOSTS}, _cluster(ev), True, True,
                       {"h-back": {"test_row_remapping"}, "h-ok": {"test_x"}}, earlier_results(str(tmp_path / "reports")),
                       drain_max="100%", drain_pods=True)
    assert line is None
    by = {s.host: s for s in steps}
    assert set(by) == {"h-rma", "h-reset", "h-reboot", "h-ops", "h-back"}  # config, rerun, PASS, SKIP: nothing
    rma = [shlex.join(c) for c in by["h-rma"].commands]
    assert rma[:3] == ["kubectl cordon h-rma",
                       "kubectl taint nodes h-rma gpuaccept.io/health=drain-rma:NoSchedule --overwrite",
                       "kubectl label nodes h-rma gpuaccept.io/verdict=FAIL gpuaccept.io/run-id=r1 --overwrite"]
    assert rma[3].startswith("kubectl annotate nodes h-rma 'gpuaccept.io/reason=gpuaccept r1: drain-rma: test_x: ")
    assert rma[4] == "kubectl drain h-rma --ignore-daemonsets --delete-emptydir-data --timeout=300s"
    assert ("kubectl", "label", "nodes", "h-reboot", "gpuaccept.io/verdict=ERROR", "gpuaccept.io/run-id=r1",
            "--overwrite") in by["h-reboot"].commands
    assert by["h-ops"].commands == () and "cordoned by someone else" in by["h-ops"].note
    assert [shlex.join(c) for c in by["h-back"].commands] == [
        "kubectl uncordon h-back", "kubectl taint nodes h-back gpuaccept.io/health:NoSchedule-",
        "kubectl label nodes h-back gpuaccept.io/verdict=PASS gpuaccept.io/run-id=r1 --overwrite",
        "kubectl annotate nodes h-back gpuaccept.io/reason-"]
    # without --k8s-drain-pods no pod is evicted; without the failed test passed again, no resume
    steps, _ = plan(HV, HOSTS, "r1", "/rep/r1", {h: h for h in HOSTS}, _cluster(ev), True, True, {},
                    earlier_results(str(tmp_path / "reports")), drain_max="100%")
    assert not [c for s in steps for c in s.commands if c[1] == "drain"]
    assert "did not pass test_row_remapping, which failed in run r0" in {s.host: s for s in steps}["h-back"].note


def test_the_brake_holds_every_cordon_back(tmp_path):
    steps, line = plan(HV, HOSTS, "r1", "/rep/r1", {h: h for h in HOSTS}, _cluster(_earlier(tmp_path)), True, False,
                       {}, earlier_results(str(tmp_path)))
    assert line.startswith("gpuaccept k8s: cordoned none: 3 of 9 selected nodes would be cordoned, above "
                           "--drain-max 10% (1 node); most common among them: cause hardware (3 of 3)"), line
    assert all(not s.commands for s in steps)


def test_apply_runs_kubectl_in_order_through_a_recorded_stand_in(tmp_path):
    """kubectl on PATH is a script that records its argv and answers get nodes from a file (no API server here)."""
    ev = _earlier(tmp_path)
    bin_dir, log, nodes = tmp_path / "bin", tmp_path / "kubectl.log", tmp_path / "nodes.json"
    bin_dir.mkdir()
    nodes.write_text(json.dumps(_cluster(ev)))
    exe = bin_dir / "kubectl"
    exe.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
                   f"if sys.argv[1:3] == ['get', 'nodes']:\n    print(open({str(nodes)!r}).read())\n"
                   "if sys.argv[1:3] == ['cordon', 'h-reset']:\n    sys.exit('error: node busy')\n")
    exe.chmod(0o755)
    rdir = tmp_path / "reports" / "r1"
    rdir.mkdir()
    said = []
    got = run_step(str(rdir), "r1", HV, HOSTS, [], {h: h for h in HOSTS}, True, False, True, kubectl=str(exe),
                   write=said.append, drain_max="5")
    calls = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert calls[0] == ["get", "nodes", "-o", "json"]
    assert calls[1:5] == [["cordon", "h-rma"],
                          ["taint", "nodes", "h-rma", "gpuaccept.io/health=drain-rma:NoSchedule", "--overwrite"],
                          ["label", "nodes", "h-rma", "gpuaccept.io/verdict=FAIL", "gpuaccept.io/run-id=r1", "--overwrite"],
                          calls[4]]
    assert calls[5] == ["cordon", "h-reset"] and calls[6] == ["cordon", "h-reboot"]  # h-reset's rest skipped
    assert not [c for c in calls if "h-ops" in c]  # someone else's cordon: untouched
    assert got.failed == 1 and not got.ok
    assert any("FAILED: error: node busy" in ln for ln in said) and "calling kubectl" in said[0]
    assert (rdir / "k8s.txt").read_text().splitlines() == said
