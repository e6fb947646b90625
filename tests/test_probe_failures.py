"""How a probe says that the node's software or settings stopped it (gpuaccept/probes/_probe.py: the failure
document's ``setup``, ``missing_program``, ``missing_module``), and how the controller reads it
(gpuaccept/runner/parse.probe_error): configuration with its kind, never a crash to rerun. Real probe processes
with a real broken library on their path."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpuaccept.errors import NodeSetup, PackageMissing, ProbeError, RanksFailed
from gpuaccept.judging import actions
from gpuaccept.runner.parse import parse_probe_output, probe_error
from gpuaccept.transport import CommandResult
from project_helpers import REPO

PROBES = REPO / "gpuaccept" / "probes"


def _run(probe: str, pythonpath: str) -> CommandResult:
    """The probe run as the runner runs it (cwd its folder, JSON on its last stdout line when it gets that far)."""
    p = subprocess.run([sys.executable, f"{probe}.py", "{}"], cwd=PROBES, capture_output=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": pythonpath, "PYTHONDONTWRITEBYTECODE": "1"})
    assert p.returncode == 1, p.stdout[-1000:] + p.stderr[-1000:]
    return CommandResult(p.returncode, p.stdout, p.stderr, 0.0)


def _error(res: CommandResult, probe: str = "hbm_bandwidth") -> ProbeError:
    with pytest.raises(ProbeError) as ei:
        parse_probe_output("node-1", probe, res, sys.executable)
    return ei.value


@pytest.mark.parametrize("body", [
    "raise OSError('libcudart.so.12: cannot open shared object file: No such file or directory')",
    "raise ImportError('/site-packages/torch/lib/libtorch_cuda.so: undefined symbol: ncclCommWindowRegister')",
])
def test_a_library_that_fails_while_it_loads_is_the_nodes_software(tmp_path, body):
    """``import torch`` meeting a missing libcudart or an undefined NCCL symbol (a torch installed against other
    CUDA/NCCL wheels): the probe names the state import_broken; the controller: configuration, fix-config."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(body + "\n")
    err = _error(_run("hbm_bandwidth", str(tmp_path)))  # it dies at `import torch`, before it can write a document
    assert isinstance(err, NodeSetup) and (err.cause.cls, err.cause.kind) == ("configuration", "import_broken")
    assert actions.for_cause(err.cause).action == "fix-config"
    # a probe that imports inside main writes the document itself, with the same kind
    (tmp_path / "pynvml.py").write_text(body + "\n")
    res = _run("nvlink", str(tmp_path))
    doc = json.loads(res.stdout.decode().strip().splitlines()[-1])
    assert doc["setup"] == "import_broken" and isinstance(_error(res, "nvlink"), NodeSetup), doc


def test_a_module_that_is_not_there_stays_a_missing_package(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("import no_such_module_xyz\n")
    err = _error(_run("hbm_bandwidth", str(tmp_path)))
    assert isinstance(err, PackageMissing) and err.evidence["module"] == "no_such_module_xyz"


def test_an_error_of_the_probe_itself_is_still_its_own():
    """A failure that names no state of the node (no setup, no missing module or program) stays a probe error
    (tool); an unknown-looking setup word is not taken as a kind."""
    assert type(probe_error("n", "x: boom", "py")) is ProbeError
    assert type(probe_error("n", "x: boom", "py", None, None, "Not A Kind!")) is ProbeError


def test_ranks_that_failed_keep_their_facts():
    fact = {"outcome": "failed", "stage": "init", "ranks": [{"rank": 1, "phase": "ncclCommInitRank", "stage": "init",
                                                              "rc": 1}]}
    e = probe_error("n", "nccl_allreduce: rank 1 exited with rc 1: unhandled cuda error", "py", ranks_failed=fact)
    assert type(e) is RanksFailed and e.evidence == fact and e.cause.cls == "tool"
    # past the setup stage the facts decide, whatever library the last line names
    e = probe_error("n", "x: rank 0 exited with rc 1: OSError: libnccl-net.so: cannot open shared object file", "py",
                    ranks_failed={**fact, "stage": "collective"})
    assert type(e) is RanksFailed
    # at the setup stage the node's software is read first, as for any probe
    setup = {**fact, "stage": "setup"}
    e = probe_error("n", "x: rank 0 exited with rc 1: ImportError: libnccl.so.2: cannot open shared object file", "py",
                    ranks_failed=setup)
    assert type(e) is NodeSetup and e.cause.kind == "import_broken"
    assert type(probe_error("n", "x: rank 0 exited with rc 1: No module named 'torch'", "py",
                            ranks_failed=setup)) is PackageMissing
    assert type(probe_error("n", "x: rank 0 exited with rc -9 (SIGKILL): ", "py", ranks_failed=setup)) is RanksFailed
    # facts of another shape are no facts: a plain probe failure
    for bad in ({"outcome": "failed", "stage": "teardown"}, {"stage": "init"}, "init", ["init"]):
        assert type(probe_error("n", "x: boom", "py", ranks_failed=bad)) is ProbeError


def test_the_driver_older_than_torchs_cuda_build():
    sys.path.insert(0, str(PROBES))
    try:
        from _gpu import driver_too_old
    finally:
        sys.path.remove(str(PROBES))
    assert driver_too_old("12.8", 12040) is True and driver_too_old("12.4", 12080) is False
    assert driver_too_old("13.0", 13000) is False and driver_too_old(None, 12040) is False
    assert driver_too_old("12.8", None) is False
