"""The Kubernetes inter-node all-reduce judged into the merged report (gpuaccept.scaleout.k8s.allreduce).

The Indexed Job's own command (from the generated allreduce.yaml) runs here as its pods would: one process per
completion index, JOB_COMPLETION_INDEX and NODE_NAME set as the Job controller and the downward API set them,
real torch gloo ranks meeting on loopback (the rendezvous address moved from the headless Service's name to
127.0.0.1; no API server runs here). The node Jobs' own scripts run the real suite on replayed 2xH200 captures.
``python -m gpuaccept.scaleout.k8s merge`` then judges the ranks' documents with the Slurm launcher's rule
(gpuaccept.scaleout.slurm_allreduce.judge_collective) into one fleet-wide test of the merged report.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import yaml

from gpuaccept.scaleout.k8s.__main__ import main as k8s_main
from gpuaccept.scaleout.k8s.allreduce import NODEID
from project_helpers import DATA, failed_hosts, replay_folder

#: small CPU sweep: each rank's probe ends in seconds; a rank left alone gives up after DEADLINE_S
DEADLINE_S = 15
AR_ARGS = {"backend": "gloo", "ranks_per_node": 1, "min_bytes": 1024, "max_bytes": 4096, "iters": 2, "warmup": 1,
           "deadline_s": DEADLINE_S, "timeout_s": DEADLINE_S}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _manifests(tmp_path: Path) -> Path:
    cap = replay_folder(tmp_path, DATA)
    inv = tmp_path / "inv.ini"
    common = f"gpuaccept_replay={cap} gpu_sku=h200-sxm-141gb gpus_per_node=2"
    inv.write_text(f"[gpu]\nn-a {common} k8s_node_name=node-a\nn-b {common} k8s_node_name=node-b\n")
    out = tmp_path / "m"
    assert k8s_main(["manifests", "--inventory", str(inv), "--image", "x", "--python", sys.executable, "--out",
                     str(out), "--run-id", "r1", "--allreduce", "--allreduce-args", json.dumps(AR_ARGS), "--", "-m",
                     "health", "-k", "row_remapping", "-p", "no:cacheprovider"]) == 0
    return out


def _rank(job: dict, index: int, node: str, root: Path, run: str, port: int) -> subprocess.Popen:
    """One pod of the Indexed Job: its container's command, the paths and the rendezvous moved under tmp."""
    argv = list(job["spec"]["template"]["spec"]["containers"][0]["command"])
    args = json.loads(argv[argv.index("--args") + 1])
    args.update(master_addr="127.0.0.1", master_port=port)
    argv[argv.index("--args") + 1] = json.dumps(args)
    argv[argv.index("--out") + 1] = str(root / run / "allreduce")
    return subprocess.Popen(argv, env={**os.environ, "JOB_COMPLETION_INDEX": str(index), "NODE_NAME": node},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _node_jobs(tmp_path: Path, out: Path, root: Path) -> None:
    """Each node Job's own script, run here with the container's paths moved under tmp (as test_k8s does)."""
    data = yaml.safe_load((out / "configmap.yaml").read_text())["data"]
    etc = tmp_path / "etc"
    for node in ("node-a", "node-b"):
        job = yaml.safe_load((out / f"job-{node}.yaml").read_text())
        (etc / node).mkdir(parents=True)
        (etc / node / "inventory.yml").write_text(data[f"inv-{node}.yml"])
        script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
        script = script.replace("/etc/gpuaccept", str(etc / node)).replace("/reports", str(root))
        res = subprocess.run(["/bin/sh", "-c", script], cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


def _allreduce(into: Path) -> dict:
    doc = json.loads((into / "results.json").read_text())
    (t,) = [t for t in doc["tests"] if t["nodeid"] == NODEID]
    return t


def test_the_indexed_jobs_ranks_are_judged_into_the_merged_report(tmp_path, capsys):
    out = _manifests(tmp_path)
    svc, job = yaml.safe_load_all((out / "allreduce.yaml").read_text())
    root = tmp_path / "reports"
    # r1: both pods ran and met; r2: the pod of index 0 never ran, index 1 waited for it until its deadline
    pair, alone = _free_port(), _free_port()
    procs = [_rank(job, 0, "node-a", root, "r1", pair), _rank(job, 1, "node-b", root, "r1", pair),
             _rank(job, 1, "node-b", root, "r2", alone)]
    _node_jobs(tmp_path, out, root)
    outs = [p.communicate(timeout=DEADLINE_S + 120) for p in procs]
    assert [p.returncode for p in procs[:2]] == [0, 0], outs
    shutil.copytree(root / "r1" / "nodes", root / "r2" / "nodes")  # the same node folders, collected twice

    # the ranks met: the collective passes, each host's ranks took part, the figure judged against the floor
    rc = k8s_main(["merge", str(root / "r1"), "--nodes-file", str(out / "nodes.txt"), "--min-busbw", "0.000001"])
    assert rc == 0, capsys.readouterr()
    t = _allreduce(root / "r1" / "merged")
    assert t["outcome"] == "passed" and t["host"] is None and t["layer"] == "nccl", t
    figs = {(f["host"], f["check"]): f for f in t["figures"]}
    assert figs[("fleet", "internode_busbw_gbps")]["verdict"] == "pass"
    assert figs[("fleet", "internode_busbw_gbps")]["value"] > 0
    assert figs[("fleet", "internode_busbw_gbps")]["limit"]["source"] == "merge --min-busbw"
    assert figs[("fleet", "internode_wrong_elements")]["value"] == 0
    assert {h for h, c in figs if c == "internode_rank_time_us"} == {"n-a", "n-b"}
    assert figs[("n-b", "internode_rank_time_us")]["extra"]["rank"] == "index-1"
    summary = (root / "r1" / "merged" / "summary.md").read_text()
    assert "- **PASS** `n-a`" in summary and "- **PASS** `n-b`" in summary, summary

    # the same documents under a floor they do not reach: the merged run fails on the figure, exit 1
    rc = k8s_main(["merge", str(root / "r1"), "--nodes-file", str(out / "nodes.txt"), "--into",
                   str(tmp_path / "high"), "--min-busbw", "1000000"])
    assert rc == 1
    t = _allreduce(tmp_path / "high")
    assert t["outcome"] == "failed" and "internode_busbw_gbps" in t["message"] and "< min 1e+06 GB/s" in t["message"]

    # index 0's pod left no document: blamed on the one node no rank document names (node-a, host n-a), an
    # ERROR with its cause; index 1, which only waited for it, is not blamed
    capsys.readouterr()
    rc = k8s_main(["merge", str(root / "r2"), "--nodes-file", str(out / "nodes.txt")])
    said = capsys.readouterr().out
    assert rc == 1 and "the all-reduce of" in said and ": error" in said, said
    t = _allreduce(root / "r2" / "merged")
    assert t["outcome"] == "error", t
    assert t["message"].startswith("n-a: its pod left no document (no "), t["message"]
    assert [(c["class"], c["kind"], c["host"]) for c in t["causes"]] == [("tool", "probe_crashed", "n-a")]
    assert t["action"]["action"] == "rerun"
    doc = json.loads((root / "r2" / "allreduce" / "rank-1.json").read_text())
    assert doc["node"] == "node-b" and json.loads(doc["stdout"].splitlines()[-1])["ok"] is False
    summary = (root / "r2" / "merged" / "summary.md").read_text()
    assert "- **ERROR** `n-a`" in summary and "- **PASS** `n-b`" in summary, summary
    listed = root / "r2" / "merged" / "failed-hosts.txt"
    assert failed_hosts(listed) == ["n-a"]  # rerun n-a, with its partner named for the fleet-wide test
    assert "# fleet-wide test_allreduce_multinode did not pass on: n-a n-b" in listed.read_text()

