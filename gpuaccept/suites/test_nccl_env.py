"""nccl layer: the NCCL environment on the node (probe: nccl_env).

A variable that switches a transport off or forces an algorithm (NCCL_P2P_DISABLE, NCCL_ALGO, ...) found in
the ranks' environment, a login shell's, a profile file, ~/.nccl.conf or /etc/nccl.conf, without the inventory
asking for it (``nccl_env``), fails naming the variable and where it came from. Judged by gpuaccept/judging/drift.py.
"""
import pytest

from gpuaccept.judging import drift
from gpuaccept.runner.host import HostRunner

pytestmark = pytest.mark.nccl


def test_nccl_environment(node: HostRunner, verdicts):
    """NCCL variables the ranks would see on this node, against the inventory's nccl_env."""
    doc = node.probe("nccl_env", {})
    verdicts.apply(drift.nccl_env(doc, drift.requested_nccl_env(node.host.vars)))
    verdicts.finish()
