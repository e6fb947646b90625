"""health layer, configuration drift: settings that make a healthy GPU slow (probe: gpu_inventory).

Pending mode changes, the enforced power limit and the application clocks, per GPU; judged by the pure
functions of gpuaccept/judging/drift.py. Clock locks and the power limit under load are judged in the compute layer.
"""
import pytest

from gpuaccept.judging import drift
from gpuaccept.runner.host import HostRunner

pytestmark = pytest.mark.health


def test_pending_modes(node: HostRunner, gpus, sku, verdicts):
    """No ECC, MIG, GPU operation mode or DRAM encryption change waiting for the next GPU reset."""
    for g in gpus:
        verdicts.apply(drift.pending_modes(g, sku), gpu=g)
    verdicts.finish()


def test_power_limit(node: HostRunner, gpus, sku, verdicts):
    """The enforced power limit is not below the inventory's gpu_power_limit_w, else NVML's default limit."""
    for g in gpus:
        verdicts.apply(drift.power_limit(g, sku, node.host.vars.get("gpu_power_limit_w")), gpu=g)
    verdicts.finish()


def test_application_clocks(node: HostRunner, gpus, sku, verdicts):
    """Application clocks (SM, memory) not below the GPU's default application clocks."""
    for g in gpus:
        verdicts.apply(drift.clocks(g, sku), gpu=g)
    verdicts.finish()
