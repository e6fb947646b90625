"""benchmarks/time_to_verdict.py: the peers' outputs it reads (captured runs in tests/data/peers)."""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import time_to_verdict as ttv

PEERS = Path(__file__).parent / "data" / "peers"


def test_mamf_finder_closing_lines():
    # mamf-finder since 2025 closes with the best mean, median and max over the shapes it tried
    fp8 = ttv.parse_mamf((PEERS / "h200-mamf-finder-fp8.log").read_text())
    assert fp8 == {"mean": 1251.5, "median": 1254.8, "max": 1269.9}
    bf16 = ttv.parse_mamf((PEERS / "mamf-finder-bf16.txt").read_bytes().decode())  # its \r kept, as a pipe gives it
    assert bf16["median"] == 663.7 and bf16["max"] >= bf16["median"]
    # the progress line before the closing block ("| best: ...(median)") is not the result
    assert ttv.parse_mamf((PEERS / "h200-mamf-finder-fp8.log").read_text().split("Tried 1 shapes")[0]) == {}
    # an older version's one line is its best single product
    assert ttv.parse_mamf("The best outcome was 1201.3 TFLOPS @ 8192x8192x8192") == {"max": 1201.3}


def test_mamf_median_sits_beside_the_product_median():
    # the product's fp8_tflops is a median of sustained products: paired with mamf-finder's median first
    assert ttv.PAIRS["mamf-fp8"][0] == ("median", "fp8_tflops")
    assert ttv.PAIRS["mamf-bf16"][0] == ("median", "bf16_tflops")


def test_babelstream_table_and_csv_agree():
    table = ttv.parse_babelstream((PEERS / "babelstream-table.txt").read_text())
    csv_ = ttv.parse_babelstream((PEERS / "babelstream-csv.txt").read_text())
    assert table["Dot"] == pytest.approx(4525.13, rel=1e-6) and table["Copy"] == pytest.approx(3984.21, rel=1e-6)
    assert csv_["Dot"] == pytest.approx(table["Dot"]) and csv_["Copy"] == pytest.approx(table["Copy"])
    assert ttv.parse_babelstream("no table here") == {}
    # BabelStream 6 on an H200 (its --csv after the CMake build), and the 4.x/5.x forms of the same figures
    h200 = ttv.parse_babelstream((PEERS / "h200-babelstream-csv.log").read_text())
    assert set(h200) >= {"Copy", "Dot", "Triad"} and 3500 < h200["Dot"] < 5000
    old_csv = "function,num_times,n_elements,sizeof,max_mbytes_per_sec,min_runtime\nDot,100,1,8,4525130.0,0.1\n"
    assert ttv.parse_babelstream(old_csv) == {"Dot": pytest.approx(4525.13)}
    mib = "Function    MiBytes/sec  Min (sec)   Max         Average\nDot         1048576.000  0.1 0.1 0.1\n"
    assert ttv.parse_babelstream(mib) == {"Dot": pytest.approx(2 ** 40 / 1e9)}


def test_nccl_tests_largest_size_in_place():
    got = ttv.parse_nccl_tests((PEERS / "nccl-tests-all_reduce_perf.txt").read_text())
    # the row's second busbw is the in-place one (out-of-place first, as nccl-tests' header says)
    assert got == {"busbw": 343.0, "avg_busbw": 342.742}


def test_unknown_peer_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="NAME=... with NAME one of"):
        ttv.peers(["stream=x"], [])
    with pytest.raises(SystemExit, match="--peer mamf-fp8="):
        ttv.peers([f"mamf-fp8={tmp_path / 'missing.log'}"], [])


def test_figure_table_gives_every_round_and_a_ratio_per_profile():
    peers = {"mamf-fp8": {"median": 1280.0, "max": 1290.0}}
    figures = {"quick": [{"fp8_tflops": 1313.0}, {"fp8_tflops": 1281.6}, {"fp8_tflops": 1290.0}],
               "standard": [{"fp8_tflops": 1270.0}]}
    lines = ttv.figure_table(peers, figures, ["quick", "standard"])
    row = next(line for line in lines if "| median |" in line)
    # every round's figure, and the median of the rounds (1290.0) over the peer's median per profile
    assert "1313.0, 1281.6, 1290.0 | 1.008x" in row
    assert "| 1270.0 | 0.992x |" in row
    # a peer figure without a product figure still shows, with no ratio; a pair with neither is left out
    assert not any("babelstream" in line for line in lines)
    only_peer = ttv.figure_table(peers, {"quick": [{}]}, ["quick"])
    assert any("| median | 1280.0 | fp8_tflops | - | - |" in line for line in only_peer)
