"""The one rule that pairs torch (CUDA) devices with NVML GPUs: by PCI bus id (gpuaccept/probes/_nvml.py
pair_by_bus_id), never torch index i with NVML index i.

Before: pcie_link loaded torch device i and sampled NVML handle i. With CUDA_VISIBLE_DEVICES=1 torch device 0 is
the second GPU, so the probe loaded GPU 1 and read GPU 0's idle link (Gen1 in power saving): "pcie_gen 1 < min 5"
on a healthy card, drained for RMA. The bus ids below are the 2xH200 capture's (tests/data/h200x2-*.json) and, for
eight GPUs, an HGX H100 board's bus numbers (invented where marked).
"""
from __future__ import annotations

import pytest

from gpuaccept.probes._nvml import Pairing, pair_by_bus_id

NVML = ["00000000:00:06.0", "00000000:00:07.0"]  # the 2xH200 capture, NVML order
HGX = [f"00000000:{b}:00.0" for b in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")]  # invented: an 8-GPU board


def test_all_visible_in_nvml_order_pairs_index_with_index():
    p = pair_by_bus_id(list(NVML), NVML)
    assert p == Pairing(nvml_of={0: 0, 1: 1}, torch_of={0: 0, 1: 1}, hidden=[], unmatched=[])
    assert p.certain


def test_cuda_visible_devices_1_pairs_torch_0_with_nvml_1_and_hides_nvml_0():
    """The defect's case: torch sees one device, the second GPU."""
    p = pair_by_bus_id([NVML[1]], NVML)
    assert p.nvml_of == {0: 1} and p.torch_of == {1: 0}
    assert p.hidden == [0] and p.certain


def test_reordered_visible_devices_follow_the_bus_id():
    """CUDA_VISIBLE_DEVICES=1,0 (or CUDA_DEVICE_ORDER=FASTEST_FIRST ordering them otherwise): torch 0 is NVML 1."""
    assert pair_by_bus_id([NVML[1], NVML[0]], NVML).nvml_of == {0: 1, 1: 0}
    order = [5, 2, 7, 0]  # CUDA_VISIBLE_DEVICES naming 4 of 8 GPUs by UUID, in this order
    p = pair_by_bus_id([HGX[j] for j in order], HGX)
    assert p.nvml_of == {0: 5, 1: 2, 2: 7, 3: 0}
    assert p.hidden == [1, 3, 4, 6] and p.certain


@pytest.mark.parametrize("torch_form, nvml_form", [
    ("00000000:1B:00.0", "0000:1b:00.0"),   # NVML's form against sysfs's
    ("0000:1b:00.0", b"00000000:1B:00.0"),  # older pynvml returns bytes
    ("1b:00.0", "00000000:1B:00.0\x00"),    # no domain; NUL-padded char array
])
def test_bus_ids_are_compared_in_one_canonical_form(torch_form, nvml_form):
    p = pair_by_bus_id([torch_form], ["00000000:19:00.0", nvml_form])
    assert p.nvml_of == {0: 1} and p.hidden == [0]


def test_two_torch_devices_on_one_gpu_both_map_to_it():
    """MIG instances of one GPU share its bus id: both are that GPU; torch_of names the first."""
    p = pair_by_bus_id([NVML[0], NVML[0]], NVML)
    assert p.nvml_of == {0: 0, 1: 0} and p.torch_of == {0: 0}
    assert p.hidden == [1] and p.certain


def test_a_torch_device_without_a_known_bus_id_is_unmatched_and_hidden_is_uncertain():
    """A torch build without PCI ids in its device properties (and no UUID NVML knows): never guessed by index."""
    p = pair_by_bus_id([None, NVML[1]], NVML)
    assert p.nvml_of == {1: 1} and p.unmatched == [0]
    assert p.hidden == [0] and not p.certain
    assert pair_by_bus_id(["not a bus id"], NVML).unmatched == [0]


def test_a_gpu_nvml_has_no_bus_id_for_is_never_paired():
    """nvmlDeviceGetHandleByIndex refused (a lost GPU): None in NVML's list."""
    p = pair_by_bus_id([NVML[1]], [None, NVML[1]])
    assert p.nvml_of == {0: 1} and p.hidden == [0]


def test_no_torch_device_hides_every_gpu():
    """CUDA_VISIBLE_DEVICES="" (or -1): torch sees nothing."""
    p = pair_by_bus_id([], NVML)
    assert p.nvml_of == {} and p.hidden == [0, 1] and p.certain
