"""Faults found by the sixth new-user trial (2026-11-30): an ML infrastructure engineer who knows nccl-tests
runs ``pytest -k nccl -s`` while debugging a slow job.

- The all-reduce failure line said ``allreduce_busbw_gbps 250 GB/s < min 310 GB/s``: not which row of the
  nccl-tests table (size, in-place or out-of-place column), not for which world size the floor was written,
  nor which threshold file it came from. It now reads like the table it is judged on.
- NCCL up to 2.21 or so says only ``NET/IB : No device found.`` when it finds no HCA (no ``NET/IB : Using``
  line) and prints its version bare (``NCCL version 2.19.3+cuda12.3``, no ``NCCL INFO`` prefix). gpuaccept read
  that as "IB not initialised", so a host whose inventory names an HCA (``nccl_ib_hca``) that is missing
  PASSED on such NCCL, and the version was unknown. Now it fails, in NCCL's words.
"""
from __future__ import annotations

from gpuaccept import nccl_judge
from gpuaccept.probes import _nccl_log
from gpuaccept.thresholds import load_sku_file
from project_helpers import REPO, alter, junit, replay_project, run_pytest
from test_field_logs import NCCL

H200 = REPO / "thresholds" / "h200-sxm-141gb.yaml"


# -- the failure line names the row, the world size and the threshold file --------------------------------

def test_size_text_is_bytes_with_the_binary_size():
    assert nccl_judge.size_text(4294967296) == "4294967296 B (4 GiB)"
    assert nccl_judge.size_text(1048576) == "1048576 B (1 MiB)"
    assert nccl_judge.size_text(1000) == "1000 B"
    assert nccl_judge.size_text(None) == "None B"


def test_floor_context_says_which_floor_of_the_file():
    limit = load_sku_file(str(H200)).limit("allreduce_busbw_gbps")  # min 300, min_by_world_size {2,4,8}
    row = {"bytes": 4294967296}
    assert nccl_judge.floor_context(row, 2, limit, "thresholds/h200-sxm-141gb.yaml") == (
        "in-place busbw at 4294967296 B (4 GiB), world size 2, Ring; floor for world size 2 from "
        "thresholds/h200-sxm-141gb.yaml")
    # 3 GPUs: the file has no floor for 3, so its plain min is used, and the line must not claim otherwise
    assert nccl_judge.floor_context(row, 3, limit, "f.yaml").endswith("world size 3, Ring; floor from f.yaml")


def test_slow_allreduce_failure_line_reads_like_the_table(tmp_path):
    """The 2xH200 capture, ALTERED: the 4 GiB in-place busbw (and algbw: world size 2, factor 1) set to 250
    GB/s, under the file's floor of 310 GB/s for world size 2."""
    def slow_4gib(doc):
        row = doc["rows"][-1]
        assert row["bytes"] == 4294967296
        row["ip_busbw_gbps"] = row["ip_algbw_gbps"] = 250.0

    inv = replay_project(tmp_path, alter(tmp_path, "nccl_allreduce", slow_4gib))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "nccl and not multinode",
                     "-s")
    case = next(c for c in junit(rep / "junit-nccl.xml") if c["name"].startswith("test_allreduce["))
    assert case["outcome"] == "failure", case
    assert case["message"] == (
        "h200-a: allreduce_busbw_gbps 250 GB/s < min 310 GB/s (in-place busbw at 4294967296 B (4 GiB), world "
        f"size 2, Ring; floor for world size 2 from {tmp_path / 'thresholds' / 'h200-sxm-141gb.yaml'})")
    # the row it names is the one -s printed: nccl-tests' columns, in-place busbw 250.00
    row = next(ln for ln in res.stdout.splitlines() if ln.lstrip().startswith("4294967296 "))
    assert row.split()[-3:] == ["250.00", "250.00", "0"]


# -- NCCL's "NET/IB : No device found." and its bare version line -----------------------------------------

def test_nccl_2_19_without_an_hca_is_read_as_no_device_with_its_version():
    got = _nccl_log.parse_nccl_log(NCCL["nccl-2.19-no-ib-device-socket-fallback"])
    assert (got["nccl_version"], got["nccl_version_full"]) == ("2.19.3", "2.19.3+cuda12.3")
    nd = got["net_devices"]
    assert nd["ib"] == [] and nd["ib_said"] == "NET/IB : No device found."
    assert nd["socket"] == [{"name": "ens7", "address": "10.128.0.32"}]
    assert nccl_judge.net_device_problems(nd, "mlx5_0", None) == [
        'NCCL found none of the IB devices nccl_ib_hca lists (mlx5_0): NCCL says "NET/IB : No device found."']
    assert nccl_judge.net_device_problems(nd, None, "ens7") == []  # no HCA asked for: nothing to fail


def test_a_torch_error_naming_the_nccl_version_is_not_the_version_line():
    # torch ends its NCCL errors with ", NCCL version 2.21.5": that is not NCCL's own version line
    got = _nccl_log.parse_nccl_log(NCCL["torch-internal-error-last-error-empty"])
    assert got["nccl_version"] is None


def test_missing_hca_on_older_nccl_fails_the_host(tmp_path):
    """The 2xH200 capture, ALTERED: its NCCL devices replaced by what the NCCL 2.19.3 field sample says (no
    HCA, Socket over ens7); the inventory names mlx5_0. Before: PASS (IB read as not initialised)."""
    def nccl_2_19(doc):
        doc["net_devices"] = _nccl_log.parse_net_devices(NCCL["nccl-2.19-no-ib-device-socket-fallback"])

    inv = replay_project(tmp_path, alter(tmp_path, "nccl_allreduce", nccl_2_19), "nccl_ib_hca=mlx5_0")
    rep = tmp_path / "rep"
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "test_allreduce and not multinode")
    case = next(c for c in junit(rep / "junit-nccl.xml") if c["name"].startswith("test_allreduce["))
    assert case["outcome"] == "failure", case
    assert case["message"] == ('h200-a: NCCL found none of the IB devices nccl_ib_hca lists (mlx5_0): NCCL says '
                               '"NET/IB : No device found."')
