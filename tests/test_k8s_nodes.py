"""--k8s-cordon / --k8s-resume / --k8s-apply / --k8s-drain-pods inside real gpuaccept runs.

The real suite runs on a replayed fleet (the 2xH200 captures, altered the way each sick node reads, as
tests/test_slurm_drain.py does), one host per kind: a row-remap failure (drain-rma), an uncorrected ECC error
(reset-gpu), a foreign process on a GPU (an ERROR: rerun), a passing host, and a sick host whose node someone
else cordoned. No Kubernetes API server can run here, so ``kubectl`` on PATH is the recording stand-in of
tests/k8s_helpers.py, which keeps the Node objects in a file and changes them as the API server would: the dry
run prints the calls and makes none; ``--k8s-apply`` makes exactly the calls the dry run printed; ``--drain-max``
holds every cordon back; a resume follows only once the failed tests pass again; refusals are one line, exit 4,
before any node is touched; the calls made are kept in the history's ``k8s_events`` and a node cordoned again
within a day of its uncordon is "repeating".
"""
from __future__ import annotations

import shlex
import sqlite3
from pathlib import Path

from k8s_helpers import Kubectl, node
from project_helpers import DATA, alter, make_project, replay_folder, run_pytest

SELECTION = ["-m", "health", "-k", "not fleet_consistency and not xid_events"]


def _gpu1(change):
    def apply(doc):
        change(doc["gpus"][1])
    return apply


SICK = {  # host -> change to the gpu_inventory capture (None: as captured)
    "h-rma": _gpu1(lambda g: g["remapped_rows"].update(failure=True)),
    "h-reset": _gpu1(lambda g: g["ecc"].update(uncorrected_volatile=2)),
    "h-rerun": _gpu1(lambda g: g.update(compute_processes=[{"pid": 4711, "name": "python3"}])),
    "h-ops": _gpu1(lambda g: g["remapped_rows"].update(failure=True)),
    "h-ok": None,
}


def _captures(tmp_path: Path, name: str, change) -> Path:
    base = tmp_path / "caps" / name
    base.mkdir(parents=True)
    return replay_folder(base, alter(base, "gpu_inventory", change) if change else DATA)


def _project(tmp_path: Path, folders: dict[str, Path]) -> tuple[Path, Path]:
    project = tmp_path / "project"
    if not project.exists():
        project.mkdir()
        make_project(project, [], None, extra_suite="", name="test_zz_empty.py")
    inv = project / "inventory.ini"
    inv.write_text("[gpu]\n" + "".join(f"{h} ansible_connection=local gpuaccept_replay={d} gpu_sku=h200-sxm-141gb "
                                       f"gpus_per_node=2\n" for h, d in folders.items()))
    return project, inv


def _planned(rdir: Path) -> list[list[str]]:
    """The kubectl argv the run's k8s.txt prints (``  kubectl ...    # host: note``), less ``kubectl``."""
    out = []
    for ln in (rdir / "k8s.txt").read_text().splitlines():
        if ln.startswith("  kubectl "):
            out.append(shlex.split(ln.split("    # ", 1)[0])[1:])
    return out


def test_cordon_brake_apply_and_resume_in_real_runs(tmp_path):
    project, inv = _project(tmp_path, {h: _captures(tmp_path, h, c) for h, c in SICK.items()})
    kube = Kubectl(tmp_path / "kube", [node(h) for h in SICK if h != "h-ops"] + [node("h-ops", unschedulable=True)])
    runs = tmp_path / "reports"

    def run(name: str, *opts: str, limit: str | None = None, k: str | None = None):
        sel = SELECTION if k is None else ["-m", "health", "-k", k]
        res = run_pytest(project, "--inventory", str(inv), "--reports", str(runs / name), "--history", "none",
                         *(["--limit", limit] if limit else []), *opts, *sel, env=kube.env(), timeout=600)
        return res, res.stdout + res.stderr

    # 1. the dry run: the kubectl lines printed, none made (only the node list read)
    res, out = run("night0", "--k8s-cordon", "--k8s-resume", "--k8s-drain-pods", "--drain-max", "100%")
    assert res.returncode == 1, out[-4000:]
    print("\n".join(ln for ln in out.splitlines() if ln.startswith(("gpuaccept k8s", "  "))))  # closing-note evidence
    assert "gpuaccept k8s: dry run (--k8s-apply makes these calls)" in out, out[-4000:]
    planned = _planned(runs / "night0")
    by_node = {}
    for argv in planned:
        by_node.setdefault(argv[2] if argv[0] in ("taint", "label", "annotate") else argv[1], []).append(argv[0])
    assert by_node == {"h-rma": ["cordon", "taint", "label", "annotate", "drain"],
                       "h-reset": ["cordon", "taint", "label", "annotate", "drain"]}, planned
    assert ["taint", "nodes", "h-reset", "gpuaccept.io/health=reset-gpu:NoSchedule", "--overwrite"] in planned
    assert ["label", "nodes", "h-rma", "gpuaccept.io/verdict=FAIL", "gpuaccept.io/run-id=night0", "--overwrite"] in planned
    assert "  h-ops: cordoned by someone else (spec.unschedulable): left alone" in out
    assert kube.calls(changes_only=True) == [] and kube.cordoned() == {"h-ops"}

    # 2. the brake: --drain-max's default 10 % of 5 selected is 1 node; 2 would be cordoned, so none is
    res, out = run("night1", "--k8s-cordon", "--k8s-apply")
    assert res.returncode == 1, out[-4000:]
    brake = [ln for ln in out.splitlines() if "cordoned none" in ln]
    assert len(brake) == 1 and brake[0].startswith(
        "gpuaccept k8s: cordoned none: 2 of 5 selected nodes would be cordoned, above --drain-max 10% (1 node); "
        "most common among them: cause hardware (2 of 2)"), out[-3000:]
    assert "h-rma: not cordoned: held back by --drain-max" in out
    assert kube.calls(changes_only=True) == [] and kube.cordoned() == {"h-ops"}

    # 3. applied: exactly the calls the dry run printed (this run's id and folder in place of night0's)
    res, out = run("night2", "--k8s-cordon", "--k8s-resume", "--k8s-drain-pods", "--drain-max", "100%", "--k8s-apply")
    assert res.returncode == 1, out[-4000:]
    assert "gpuaccept k8s: calling kubectl" in out and " -- FAILED: " not in out, out[-4000:]
    want = [[a.replace("night0", "night2") for a in argv] for argv in planned]
    assert kube.calls(changes_only=True) == want
    assert kube.cordoned() == {"h-rma", "h-reset", "h-ops"}
    rma = kube.node("h-rma")
    assert rma["spec"]["taints"] == [{"key": "gpuaccept.io/health", "value": "drain-rma", "effect": "NoSchedule"}]
    assert rma["metadata"]["labels"] == {"gpuaccept.io/verdict": "FAIL", "gpuaccept.io/run-id": "night2"}
    reason = rma["metadata"]["annotations"]["gpuaccept.io/reason"]
    assert reason.startswith("gpuaccept night2: drain-rma: test_row_remapping: h-rma GPU 1 "), reason
    assert reason.endswith(f"(evidence {runs / 'night2'})")
    assert kube.node("h-ops")["metadata"]["annotations"] == {}  # someone else's cordon: untouched

    # 4. both repaired, rerun without test_row_remapping: h-reset passes test_ecc, which failed, and is put
    # back; h-rma did not run its failed test and stays cordoned
    _project(tmp_path, {h: _captures(tmp_path / "fixed", h, None) for h in ("h-rma", "h-reset")})
    kube.forget()
    res, out = run("night3", "--k8s-resume", "--k8s-apply", k="not fleet_consistency and not xid_events and not "
                   "row_remapping")
    assert res.returncode == 0, out[-4000:]
    assert "h-rma: not resumed: this run did not pass test_row_remapping, which failed in run night2" in out, out[-3000:]
    assert kube.calls(changes_only=True) == [
        ["uncordon", "h-reset"], ["taint", "nodes", "h-reset", "gpuaccept.io/health:NoSchedule-"],
        ["label", "nodes", "h-reset", "gpuaccept.io/verdict=PASS", "gpuaccept.io/run-id=night3", "--overwrite"],
        ["annotate", "nodes", "h-reset", "gpuaccept.io/reason-"]]
    assert kube.cordoned() == {"h-rma", "h-ops"}
    assert kube.node("h-reset")["spec"].get("taints") == [] and kube.node("h-reset")["metadata"]["annotations"] == {}

    # 5. the full rerun passes test_row_remapping too: h-rma is put back; h-ops stays someone else's
    kube.forget()
    res, out = run("night4", "--k8s-resume", "--k8s-apply")
    assert res.returncode == 0, out[-4000:]
    assert [c[:2] for c in kube.calls(changes_only=True)] == [["uncordon", "h-rma"], ["taint", "nodes"],
                                                              ["label", "nodes"], ["annotate", "nodes"]]
    assert kube.cordoned() == {"h-ops"}
    assert "h-ops" not in "".join(" ".join(c) for c in kube.calls())


def _unreachable_kubectl(folder: Path) -> Path:
    """A folder holding a ``kubectl`` that answers every call as kubectl does with a kubeconfig whose API server
    refuses the connection (its words, once per retry, rc 1)."""
    folder.mkdir(parents=True)
    said = "The connection to the server 127.0.0.1:6443 was refused - did you specify the right host or port?"
    (folder / "kubectl").write_text(f"#!/bin/sh\nfor i in 1 2 3 4 5; do echo '{said}' >&2; done\nexit 1\n")
    (folder / "kubectl").chmod(0o755)
    return folder


def test_refusals_are_one_line_exit_4_before_any_node_is_touched(tmp_path):
    project, inv = _project(tmp_path, {"h-rma": _captures(tmp_path, "h-rma", SICK["h-rma"])})
    kube = Kubectl(tmp_path / "kube", [node("h-rma")])
    cases = [
        ((["--k8s-apply"], kube.env()), "--k8s-apply: say --k8s-cordon or --k8s-resume (it makes their calls)"),
        ((["--k8s-drain-pods"], kube.env()), "--k8s-drain-pods: say --k8s-cordon (it drains the nodes it cordons)"),
        ((["--k8s-resume", "--drain-max", "3"], kube.env()), "--drain-max: say --slurm-drain or --k8s-cordon"),
        ((["--k8s-cordon", "--drain-max", "abc"], kube.env()), "--drain-max abc: expected a count of nodes"),
        ((["--k8s-cordon", "--k8s-apply"], {"PATH": str(tmp_path / "nothing")}),
         "--k8s-cordon/--k8s-resume: kubectl not found on PATH"),
        ((["--k8s-cordon", "--k8s-apply"], {"PATH": str(_unreachable_kubectl(tmp_path / "down"))}),
         "--k8s-apply: the Kubernetes API server does not list the nodes (kubectl get nodes: The connection to the "
         "server 127.0.0.1:6443 was refused - did you specify the right host or port?)"),
    ]
    for (opts, env), said in cases:
        rep = tmp_path / "rep"
        res = run_pytest(project, "--inventory", str(inv), "--reports", str(rep), "--history", "none", *opts,
                         *SELECTION, env=env, timeout=120)
        assert res.returncode == 4, (opts, res.stdout[-2000:] + res.stderr[-2000:])
        assert said in res.stderr and "Traceback" not in res.stdout + res.stderr, res.stderr
        assert len([ln for ln in res.stderr.splitlines() if said[:12] in ln]) == 1, res.stderr
        assert not rep.exists()  # no run began: nothing measured, no folder
    assert kube.calls() == []  # and kubectl was never called
    # the dry run without kubectl: it runs, says the API server was not reached, and exits as the run's own code
    res = run_pytest(project, "--inventory", str(inv), "--reports", str(tmp_path / "dry"), "--history", "none",
                     "--k8s-cordon", *SELECTION, env={"PATH": str(tmp_path / "nothing")}, timeout=300)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    assert "dry run (--k8s-apply makes these calls); the Kubernetes API server was not reached" in res.stdout
    assert "  kubectl cordon h-rma    # h-rma: drain-rma: cordon" in res.stdout, res.stdout[-3000:]


def test_a_node_cordoned_again_within_a_day_of_its_uncordon_is_repeating(tmp_path):
    kube = Kubectl(tmp_path / "kube", [node("h-rep")])
    sick, well = _captures(tmp_path, "sick", SICK["h-rma"]), _captures(tmp_path, "well", None)
    runs, hist = tmp_path / "reports", tmp_path / "history.sqlite"

    def night(name: str, caps: Path, *opts: str) -> str:
        project, inv = _project(tmp_path, {"h-rep": caps})
        res = run_pytest(project, "--inventory", str(inv), "--reports", str(runs / name), "--history", str(hist),
                         *opts, "--k8s-apply", "-m", "health", "-k", "row_remapping", env=kube.env(), timeout=300)
        out = res.stdout + res.stderr
        assert res.returncode == (1 if caps == sick else 0), out[-4000:]
        return out

    out = night("r1", sick, "--k8s-cordon")
    assert kube.cordoned() == {"h-rep"} and "repeating" not in out, out[-3000:]
    night("r2", well, "--k8s-resume")
    assert kube.cordoned() == set()
    out = night("r3", sick, "--k8s-cordon")
    assert kube.cordoned() == {"h-rep"}
    said = [ln for ln in out.splitlines() if "repeating:" in ln]
    print("\n".join(said))  # the closing note's evidence
    assert len(said) == 1 and said[0].startswith("gpuaccept k8s: repeating: h-rep cordoned again "), out[-3000:]
    assert " by run r2 (drain-rma: row remapping failure" in said[0], said[0]
    summary = (runs / "r3" / "summary.md").read_text()
    assert "- repeating: " + said[0].split("repeating: ", 1)[1] in summary.splitlines()
    assert "- **FAIL** `h-rep`" in summary
    con = sqlite3.connect(hist)
    rows = con.execute("SELECT run_id, host, node, event, action, cause, repeating, resumed_run FROM k8s_events "
                       "ORDER BY at").fetchall()
    assert rows == [("r1", "h-rep", "h-rep", "cordon", "drain-rma", "hardware", 0, None),
                    ("r2", "h-rep", "h-rep", "uncordon", None, None, 0, None),
                    ("r3", "h-rep", "h-rep", "cordon", "drain-rma", "hardware", 1, "r2")], rows
    assert con.execute("SELECT count(*) FROM slurm_events").fetchone() == (0,)  # Slurm's table stays its own
