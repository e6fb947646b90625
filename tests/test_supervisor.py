"""gpuaccept/probes/_supervisor.py: a rank's phase file and the facts of ranks that failed."""
from __future__ import annotations

import json

import pytest

from gpuaccept.probes import _supervisor as S


def test_phase_file_keeps_the_stage_until_another_is_named(tmp_path):
    path = str(tmp_path / "phase")
    phase = S.Phase(path)
    phase("importing torch", "setup")
    phase("loading libnccl")
    assert json.loads(open(path).read()) == {"step": 2, "phase": "loading libnccl", "stage": "setup"}
    phase("rendezvous / init_process_group", "init")
    phase("allocating", "collective")
    phase("1048576 B in-place")
    assert json.loads(open(path).read()) == {"step": 5, "phase": "1048576 B in-place", "stage": "collective"}
    with pytest.raises(ValueError, match="stage 'teardown' is none of"):
        phase("done", "teardown")


def test_ranks_failed_names_the_earliest_stage_of_the_deciding_ranks():
    reports = [{"rank": 0, "step": 7, "phase": "4 MiB in-place", "stage": "collective", "rc": None},
               {"rank": 1, "step": 2, "phase": "rendezvous / init_process_group", "stage": "init", "rc": 1},
               {"rank": 2, "step": -1, "phase": "starting (python/torch import)", "rc": None}]  # no phase file yet
    got = S.ranks_failed("failed", reports[:2])
    assert got == {"outcome": "failed", "stage": "init",
                   "ranks": [{"rank": 0, "phase": "4 MiB in-place", "stage": "collective", "rc": None},
                             {"rank": 1, "phase": "rendezvous / init_process_group", "stage": "init", "rc": 1}]}
    assert S.ranks_failed("failed", reports)["stage"] == "setup"  # a report without a stage reads setup
    hung = S.ranks_failed("hung", reports)  # a hang: the slowest ranks (lowest step) decide
    assert [r["rank"] for r in hung["ranks"]] == [2] and hung["stage"] == "setup"
    assert S.ranks_failed("stalled", [])["stage"] == "setup"
