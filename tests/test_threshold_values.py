"""The values of a SKU threshold file typed at load (``expect:`` fields and check bounds, errors naming
file:line), every shipped file passing that check, and a file missing a dtype's limit judged as an error."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from project_helpers import DATA, outcomes, replay_project, run_pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("old,new,line,needle", [
    # a misspelt field: the requirement silently dropped (an unreadable ECC reading recorded, not failed)
    ("required_nvml: [ecc, remapped_rows,", "required_nvml: [ecc, remaped_rows,", 21,
     "expect.required_nvml: unknown field 'remaped_rows' (known: application_clocks, ecc,"),
    # quoted: text, so true: MIG expected on, every GPU test of a healthy card blocked by preflight
    ("mig_mode: false", 'mig_mode: "false"', 16, "expect.mig_mode: expected true or false, got str 'false'"),
    ("ecc: true", "ecc: yes please", 19, "expect.ecc: expected true or false, got str 'yes please'"),
    ("  pcie_gen: 5\n", "  pcie_gen: Gen5\n", 12, "expect.pcie_gen: expected a whole number >= 0, got 'Gen5'"),
    ("gpus_per_node: 8 ", "gpus_per_node: 8.5 ", 11, "expect.gpus_per_node: expected a whole number >= 0, got 8.5"),
    ("nccl_transport: P2P", "nccl_transport: [P2P]", 22, "expect.nccl_transport: expected text such as P2P"),
    # a negative floor passes every figure: the check switched off
    ("bf16_tflops: {min: 600,", "bf16_tflops: {min: -600,", 46, "checks.bf16_tflops.min: -600 is negative "
                                                                "(every figure would pass)"),
])
def test_threshold_file_expect_values_are_typed(tmp_path, old, new, line, needle):
    """Before: each of these loaded, and the judges read the value by its truth or not at all."""
    from gpuaccept.errors import ThresholdError
    from gpuaccept.config.thresholds import load_sku_file
    text = (REPO / "thresholds" / "h200-sxm-141gb.yaml").read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "h200-sxm-141gb.yaml"
    path.write_text(text.replace(old, new))
    with pytest.raises(ThresholdError) as err:
        load_sku_file(str(path))
    assert str(err.value).startswith(f"{path}:{line}: {needle}"), str(err.value)
    path.write_text(text)
    assert load_sku_file(str(path)).expect["mig_mode"] is False  # the file as shipped loads


def test_every_shipped_threshold_file_passes_the_typed_expect_check():
    from gpuaccept.config.thresholds import load_all
    assert len(load_all(str(REPO / "thresholds"))) >= 14


def test_sku_file_without_a_dtype_limit_is_an_error_not_an_unjudged_dtype(tmp_path):
    th = tmp_path / "th"
    shutil.copytree(REPO / "thresholds", th)
    p = th / "h200-sxm-141gb.yaml"
    p.write_text("\n".join(ln for ln in p.read_text().splitlines() if not ln.startswith("  bf16_tflops:")) + "\n")
    inv = replay_project(tmp_path, DATA)
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "--thresholds", str(th), "-k", "tensor_tflops")
    got = outcomes(rep)["test_tensor_tflops"]
    assert got["outcome"] == "error" and "no limit for check 'bf16_tflops'" in got["text"], got
