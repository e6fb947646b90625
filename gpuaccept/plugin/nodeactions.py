"""The node-action options checked before any node is touched (one line, exit 4): Slurm's ``--slurm-drain``,
``--slurm-resume``, ``--slurm-apply`` (gpuaccept.scaleout.drain) and Kubernetes' ``--k8s-cordon``,
``--k8s-resume``, ``--k8s-apply``, ``--k8s-drain-pods`` (gpuaccept.scaleout.k8s.nodes), and ``--drain-max``
over both."""
from __future__ import annotations

from typing import Any, Callable

from gpuaccept.errors import ConfigError


def check(getoption: Callable[[str], Any], worker: bool) -> None:
    """Refuse an apply without its action, ``--drain-max`` without a drain or cordon, ``--k8s-drain-pods``
    without ``--k8s-cordon``; with an apply (on the controller, not an xdist ``worker``), refuse a missing
    scontrol or controller (gpuaccept.scaleout.drain.check_ready) or kubectl (gpuaccept.scaleout.k8s.nodes
    .check_ready). Raises ConfigError (one line)."""
    slurm = getoption("slurm_drain") or getoption("slurm_resume")
    k8s = getoption("k8s_cordon") or getoption("k8s_resume")
    if getoption("slurm_apply") and not slurm:
        raise ConfigError("--slurm-apply: say --slurm-drain or --slurm-resume (it makes their calls)")
    if getoption("k8s_apply") and not k8s:
        raise ConfigError("--k8s-apply: say --k8s-cordon or --k8s-resume (it makes their calls)")
    if getoption("k8s_drain_pods") and not getoption("k8s_cordon"):
        raise ConfigError("--k8s-drain-pods: say --k8s-cordon (it drains the nodes it cordons)")
    if getoption("drain_max") is not None and not (getoption("slurm_drain") or getoption("k8s_cordon")):
        raise ConfigError("--drain-max: say --slurm-drain or --k8s-cordon (it limits their drains)")
    if worker:
        return
    if slurm and getoption("slurm_apply"):
        from gpuaccept.scaleout.drain import check_ready
        check_ready()  # --slurm-apply without scontrol or a controller: refused before any node is touched
    if k8s and getoption("k8s_apply"):
        from gpuaccept.scaleout.k8s.nodes import check_ready as kubectl_ready
        kubectl_ready()
