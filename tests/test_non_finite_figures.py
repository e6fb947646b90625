"""A probe document with a non-finite figure (NaN, Infinity: a timer that read 0 s) on a replayed 2xH200 node:
an ERROR naming the figure, and reports that strict JSON parsers can read."""
from __future__ import annotations

import json

import pytest

from project_helpers import alter, replay_project, run_pytest


def _strict(text: str):
    def refuse(token):
        raise ValueError(f"not JSON: {token}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_non_finite_hbm_figure_is_an_error_and_results_stay_json(tmp_path, value):
    """Found on 2026-11-30 (third trial): read_gbps Infinity PASSED the 4300 GB/s floor, NaN FAILED as slow HBM,
    and results.json / results.jsonl carried the tokens Infinity / NaN, which jq and JSON.parse refuse."""
    def change(doc):
        doc["gpus"][1]["read_gbps"] = value  # ALTERED: GPU 1's HBM read figure is not a number
    inv = replay_project(tmp_path, alter(tmp_path, "hbm_bandwidth", change))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "hbm_bandwidth")
    assert res.returncode == 1, res.stdout[-3000:]
    results = _strict((rep / "results.json").read_text())
    for line in (rep / "results.jsonl").read_text().splitlines():
        _strict(line)
    test = next(t for t in results["tests"] if "test_hbm_bandwidth" in t["nodeid"])
    assert test["outcome"] == "error", test
    assert f"hbm_read_bw_gbps: {value} is no measurement (limit >= 4300 GB/s)" in test["message"]
    fig = next(f for f in test["figures"] if f["check"] == "hbm_read_bw_gbps" and f["gpu"] == 1)
    assert fig["value"] == str(value) and fig["verdict"] == "error"
