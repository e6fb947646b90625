"""Replays of documents an older release saved (gpuaccept/runner/replay.py): a newer release reads a document
saved without an argument it now adds when the document shows the argument cannot change the figure judged,
and says so in the report; a quick-profile replay of a standard capture reads documents that differ only in
how long they measured; otherwise the error lists the saved arguments beside the asked ones.

The capture is tests/data/replay-h200x2 (2xH200 SXM, 2026-11-29/30) with its two 2026-11-30 all-reduce
documents taken out: what the release of 2026-11-29 saved (one sweep with NCCL's own algorithm choice, no
NCCL_ALGO pin and no at-size call)."""
from __future__ import annotations

import json
import shutil

import pytest

from gpuaccept.errors import ProbeError
from gpuaccept.runner.replay import DURATION_ARGS, compare, replay_probe, save_probe
from gpuaccept.reporting.folder import run_figures
from project_helpers import CAPTURE_NCCL, DATA, GPU_LAYERS, make_project, outcomes, run_pytest


def _release_0129(tmp_path):
    """The capture as the 2026-11-29 release left it: the 2026-11-30 all-reduce documents removed."""
    dst = tmp_path / "probes-20261129"
    shutil.copytree(DATA, dst)
    for f in dst.glob("nccl_allreduce-*.json"):
        if f.name != CAPTURE_NCCL:
            f.unlink()
    return dst


def _project(tmp_path, captures):
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    inv.write_text(f"h200-a ansible_connection=local gpuaccept_replay={captures} gpu_sku=h200-sxm-141gb "
                   "gpus_per_node=2\n")
    return inv


def test_a_sweep_saved_before_the_ring_pin_is_judged_and_the_report_says_why(tmp_path):
    """Before: ERROR "no saved document for arguments {... "env": {"NCCL_ALGO": "Ring"} ...}". The saved sweep
    ran with NCCL's own choice, which was Ring at every size (its algos), so the pin changes nothing; the
    at-size call reads the sweep's 4 GiB row."""
    inv = _project(tmp_path, _release_0129(tmp_path))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "test_allreduce")
    assert res.returncode == 0, res.stdout[-4000:]
    assert outcomes(rep)["test_allreduce"]["outcome"] == "passed"
    figs = run_figures(json.loads((rep / "results.json").read_text()))
    busbw = [f for f in figs if f["check"] == "allreduce_busbw_gbps"]
    saved = json.loads((DATA / CAPTURE_NCCL).read_text())["doc"]
    assert [f["value"] for f in busbw] == [saved["rows"][-1]["ip_busbw_gbps"]] and busbw[0]["verdict"] == "pass"
    notes = [f["value"] for f in figs if f["check"] == "replay_note"]
    assert any("NCCL_ALGO=Ring is pinned now; the saved sweep ran with NCCL's own choice, which was Ring at every "
               "size" in n and "(release before 0.1.0 (no release recorded))" in n for n in notes), notes
    assert any("sizes 4294967296..4294967296 B read from the saved sweep 1048576..4294967296 B" in n for n in notes)
    summary = (rep / "summary.md").read_text()
    assert "## Replayed from documents saved with other arguments" in summary
    assert "NCCL_ALGO=Ring is pinned now" in summary


def test_the_pin_is_refused_where_nccl_chose_another_algorithm(tmp_path):
    """A saved sweep where NCCL chose Tree at one size: the Ring pin could change that row, so the document is
    not used, and the error lists what was saved beside what was asked."""
    saved = json.loads((DATA / CAPTURE_NCCL).read_text())
    doc = saved["doc"]
    doc["rows"][2]["ip_algo"] = "TREE/SIMPLE"
    save_probe(str(tmp_path), "nccl_allreduce", saved["args"], doc)
    asked = {**saved["args"], "env": {"NCCL_ALGO": "Ring"}}
    with pytest.raises(ProbeError) as err:
        replay_probe("h200-a", str(tmp_path), "nccl_allreduce", asked)
    msg = str(err.value)
    assert f"no saved document for arguments {json.dumps(asked, sort_keys=True)[:160]}" in msg
    assert f"saved: {CAPTURE_NCCL}: " in msg
    assert 'env not saved (asked {"NCCL_ALGO": "Ring"})' in msg and "\n" not in msg


def test_no_saved_document_is_one_bounded_line(tmp_path):
    """Before: host_kernel_log's refusal held its ~4 KB of patterns twice (asked, then saved). Now: the probe,
    the asked arguments cut short, and per saved document only the keys that differ, each value cut short."""
    from gpuaccept.judging.host import probe_patterns
    patterns = probe_patterns()
    d = str(tmp_path)
    save_probe(d, "host_kernel_log", {"patterns": patterns, "since_epoch": 5.0, "sources": ["/a.log"]}, {"lines": 1})
    for n in range(5):  # more saved documents than a message lists
        save_probe(d, "host_kernel_log", {"patterns": patterns[n:], "sources": [f"/x{n}.log"]}, {"lines": 1})
    asked = {"patterns": patterns, "since_epoch": 9.0, "sources": ["/b.log"]}
    with pytest.raises(ProbeError) as err:
        replay_probe("gpu01", d, "host_kernel_log", asked)
    msg = str(err.value)
    assert len(json.dumps(patterns)) > 4000 and len(msg) < 1500 and "\n" not in msg, (len(msg), msg)
    assert msg.startswith("gpu01: host_kernel_log: no saved document for arguments {")
    assert 'sources: saved ["/a.log"], asked ["/b.log"]' in msg and "since_epoch" not in msg
    assert msg.count(patterns[-1]["id"]) == 0 and "| and 3 more" in msg
    # the time arguments: since_epoch of host_kernel_log, and any *_epoch of any probe, may differ
    assert replay_probe("gpu01", d, "host_kernel_log", {**asked, "sources": ["/a.log"]}) == {"lines": 1}
    assert compare("host_memory", {"read_epoch": 1.0}, {"read_epoch": 2.0}, {}) == ([], [], {})


def test_a_quick_profile_replay_of_a_standard_capture(tmp_path):
    """Before: --profile quick turned every replayed probe into "no saved document" (iters, seconds differ).
    Every GPU test judges the standard capture; each duration difference is noted, once per probe."""
    inv = _project(tmp_path, DATA)
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", GPU_LAYERS, "--profile", "quick")
    assert res.returncode == 0, res.stdout[-4000:]
    got = outcomes(rep)
    assert got["test_tensor_tflops"]["outcome"] == "passed" and got["test_allreduce"]["outcome"] == "passed"
    assert not [n for n, c in got.items() if c["outcome"] not in ("passed", "skipped")]
    notes = [f["value"] for f in run_figures(json.loads((rep / "results.json").read_text()))
             if f["check"] == "replay_note"]
    assert any(n.startswith("matmul_tflops:") and "asked min_seconds=0.5" in n for n in notes), notes
    assert any(n.startswith("pcie_link:") and "measured with seconds=1.5, asked seconds=0.6" in n for n in notes)
    assert len(notes) == len(set(notes))


def test_what_may_differ_is_what_a_profile_sets():
    """The duration arguments are the profiles' own keys (gpuaccept.config.profiles), not a second list."""
    from gpuaccept.config.profiles import PROFILES
    assert DURATION_ARGS["matmul_tflops"] == {k for p in PROFILES.values() for k in p.get("matmul_tflops", {})}
    notes, refused, _ = compare("pcie_bandwidth", {"device": "cuda", "mode": "both"},
                                {"device": "cuda", "mode": "both", "iters": 4}, {})
    assert refused == [] and notes == ["measured with iters=its default, asked iters=4 (how long, not what: --profile)"]
    notes, refused, _ = compare("pcie_bandwidth", {"device": "cuda", "mode": "both"}, {"device": "cuda", "mode": "h2d"}, {})
    assert refused == ['mode: saved "both", asked "h2d"'] and notes == []


def test_saved_documents_record_the_release(tmp_path):
    from gpuaccept import __version__
    save_probe(str(tmp_path), "pcie_link", {"seconds": 1.5}, {"gpus": []})
    (path,) = tmp_path.glob("pcie_link-*.json")
    assert json.loads(path.read_text())["release"] == __version__
