"""Peers side by side: the reference tools operators know, run in the same scenario right after the product's
layer run, each figure's ratio (ours / theirs) held against a stated floor.

A scenario's ``peers`` list (its ``run`` is the product's run whose figures are compared)::

    - {peer: babelstream, figure: hbm_read_bw_gbps, floor: 0.97}        # BabelStream Dot, CUDA model, fp64, 2 GiB arrays
    - {peer: mamf-finder, dtype: bf16, figure: bf16_tflops, floor: 0.97}  # mamf-finder median at 8192^3
    - {peer: nccl-tests, figure: allreduce_busbw_gbps, floor: 0.90, gpus: 2}   # all_reduce_perf -g N at 4 GiB

The operator brings the sources (``--peers DIR``, default ``.peers`` in the repository root): ``DIR/babelstream``
(UoB-HPC/BabelStream, built here with CMake into the scenario's folder), ``DIR/mamf-finder.py`` (the single
script of stas00/ml-engineering, compute/accelerator/benchmarks), ``DIR/nccl-tests`` (NVIDIA/nccl-tests with
``build/all_reduce_perf`` built, or built here with ``make MPI=0``). A peer whose source is missing is a row "not
found: PATH" (not run). Units: GB/s = 1e9 B/s (BabelStream ``--gigabytes``), TFLOP/s = 1e12 FLOP/s (both count
2mnk), busbw as nccl-tests defines it.
"""
from __future__ import annotations

import json
import os
import shutil
import re
import statistics
import subprocess
import sys

from benchmarks.scenarios.expect import Row
from benchmarks.scenarios.loads import ROOT
from gpuaccept.judging.nccl_table import parse_table
from gpuaccept.reporting.folder import run_figures

PEERS = ("babelstream", "mamf-finder", "nccl-tests")
PEER_KEYS = {"peer", "figure", "floor", "dtype", "gpus"}
#: mamf-finder's dtype names (torch dtype attribute names) for ours
MAMF_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp8": "float8_e4m3fn", "tf32": "float32"}
#: BabelStream's array size, elements: 2**28 doubles = 2 GiB per array, as docs/fidelity.md's reference run
BABELSTREAM_ELEMENTS = 1 << 28
#: the all-reduce size compared, bytes: thresholds/h200-sxm-141gb.yaml's at_bytes for allreduce_busbw_gbps (4 GiB)
NCCL_BYTES = 4 << 30
#: seconds a peer's build or run may take (chosen: a BabelStream CUDA build is about a minute)
PEER_TIMEOUT_S = 300


def check_peers(peers: list) -> tuple[str, str] | None:
    """``(key suffix, what is wrong)`` of a malformed ``peers`` list (pure), None when well formed."""
    for i, p in enumerate(peers):
        if not isinstance(p, dict) or set(p) - PEER_KEYS:
            return f"[{i}]", f"{p!r}: keys are {', '.join(sorted(PEER_KEYS))}"
        if p.get("peer") not in PEERS:
            return f"[{i}].peer", f"{p.get('peer')!r} is none of {', '.join(PEERS)}"
        if not isinstance(p.get("figure"), str):
            return f"[{i}].figure", "missing: our figure compared (a check key)"
        if not isinstance(p.get("floor"), (int, float)) or isinstance(p.get("floor"), bool):
            return f"[{i}].floor", "missing: the lowest ratio ours / theirs that holds"
        if p["peer"] == "mamf-finder" and p.get("dtype") not in MAMF_DTYPES:
            return f"[{i}].dtype", f"{p.get('dtype')!r} is none of {', '.join(MAMF_DTYPES)}"
    return None


def ours(doc: dict | None, check: str, gpu: int | None = 0) -> float | None:
    """Our figure ``check`` in results.json ``doc``: GPU ``gpu``'s (None: a node figure), else the median."""
    vals = [f for f in run_figures(doc or {}) if f.get("check") == check and isinstance(f.get("value"), (int, float))]
    mine = [f["value"] for f in vals if f.get("gpu") == gpu]
    return float(mine[0]) if mine else (statistics.median(f["value"] for f in vals) if vals else None)


def babelstream_dot(text: str) -> float | None:
    """BabelStream's Dot bandwidth from its output, in the unit it was run with (GB/s under ``--gigabytes``):
    the ``--csv`` rows (function, num_times, n_elements, sizeof, max_<unit>_per_sec, ...; src/main.cpp
    fmt_csv) or the default table (Function, <unit>/s, Min (sec), Max, Average; fmt_cli). None without a Dot
    row."""
    for ln in text.splitlines():
        cells = ln.split(",")
        if len(cells) >= 5 and cells[0].strip() == "Dot":
            return float(cells[4])
        words = ln.split()
        if len(cells) == 1 and len(words) == 5 and words[0] == "Dot":
            try:
                return float(words[1])
            except ValueError:
                return None
    return None


def mamf_median(text: str) -> float | None:
    """mamf-finder's best median TFLOP/s (its closing line ``median: 663.7 TFLOPS @ ...``)."""
    m = re.search(r"^median:\s+([0-9.]+) TFLOPS", text, re.M)
    return float(m.group(1)) if m else None


def _run(argv: list[str], log: str, cwd: str | None = None, env: dict | None = None) -> tuple[int, str]:
    with open(log, "ab") as f:
        f.write(("$ " + " ".join(argv) + "\n").encode())
    try:
        p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=PEER_TIMEOUT_S,
                           start_new_session=True)
        rc, out = p.returncode, p.stdout + p.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        rc, out = -1, str(e)
    with open(log, "a", encoding="utf-8") as f:
        f.write(out)
    return rc, out


def theirs(p: dict, src: str, folder: str, n: int, env: dict) -> tuple[float | None, str]:
    """Run peer ``p`` from its source ``src``; ``(figure, note)`` (figure None: it failed, the note says how)."""
    log = os.path.join(folder, f"peer-{p['peer']}{'-' + p['dtype'] if p.get('dtype') else ''}.log")
    if p["peer"] == "babelstream":
        build = os.path.join(folder, "babelstream-build")
        exe = os.path.join(build, "babelstream")
        if not os.path.exists(exe):
            # BabelStream's cuda model asks for nvcc's path itself (CMAKE_CUDA_COMPILER), PATH alone is not read
            nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
            rc, out = _run(["cmake", f"-B{build}", f"-H{src}", "-DMODEL=cuda", "-DCMAKE_CUDA_ARCHITECTURES=90",
                            f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCUDA_ARCH=sm_90", "-DCMAKE_BUILD_TYPE=Release"],
                           log, env=env)
            rc = rc or _run(["cmake", "--build", build, "-j"], log, env=env)[0]
            if rc:
                return None, f"build failed (rc {rc}, {os.path.basename(log)})"
        # the executable is named after the model (cuda-stream); older releases called it babelstream
        exe = next((e for e in (os.path.join(build, "cuda-stream"), exe) if os.path.exists(e)), exe)
        rc, out = _run([exe, "--arraysize", str(BABELSTREAM_ELEMENTS), "--csv", "--gigabytes"], log, env=env)
        v = babelstream_dot(out)
        return v, "BabelStream Dot" if v else f"no Dot row (rc {rc})"
    if p["peer"] == "mamf-finder":
        rc, out = _run([sys.executable, src, "--m", "8192", "--n", "8192", "--k", "8192", "--dtype",
                        MAMF_DTYPES[p["dtype"]], "--output_file", log + ".out"], log, env=env)
        v = mamf_median(out)
        return v, f"mamf-finder {p['dtype']} median" if v else f"no median line (rc {rc})"
    exe = os.path.join(src, "build", "all_reduce_perf")
    if not os.path.exists(exe):
        rc, _ = _run(["make", "-j", "MPI=0", f"BUILDDIR={os.path.join(folder, 'nccl-tests-build')}"], log, cwd=src,
                     env=env)
        exe = os.path.join(folder, "nccl-tests-build", "all_reduce_perf")
        if rc or not os.path.exists(exe):
            return None, f"build failed (rc {rc}; give NCCL_HOME or a built build/all_reduce_perf)"
    rc, out = _run([exe, "-b", str(NCCL_BYTES), "-e", str(NCCL_BYTES), "-g", str(n), "-n", "20", "-w", "5"], log,
                   env=env)
    rows = parse_table(out)
    v = rows[-1].get("ip_busbw_gbps") if rows else None
    return v, "nccl-tests in-place busbw" if v else f"no table (rc {rc})"


def run_peers(sc, folder: str, n: int, peers_dir: str | None, env: dict) -> list[Row]:
    """The rows of ``sc.peers``, run after the scenario's product run into ``folder`` (module docstring)."""
    base = peers_dir or os.path.join(ROOT, ".peers")
    product = next((r for r in sc.runs if r.kind == "gpuaccept"), None)
    doc = None
    if product is not None:
        try:
            with open(os.path.join(folder, product.name, "results.json"), encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            doc = None
    rows, ratios = [], {}
    for p in sc.peers:
        label = f"{p['peer']}{' ' + p['dtype'] if p.get('dtype') else ''}"
        expected = f"{p['figure']} / {label} >= {p['floor']}"
        if n < int(p.get("gpus", 1)):
            rows.append(Row(sc.name, "peers", expected, f"needs {p['gpus']} GPUs: not run", None))
            continue
        src = os.path.join(base, {"babelstream": "babelstream", "mamf-finder": "mamf-finder.py",
                                  "nccl-tests": "nccl-tests"}[p["peer"]])
        if not os.path.exists(src):
            rows.append(Row(sc.name, "peers", expected, f"not found: {src}: not run", None))
            continue
        mine = ours(doc, p["figure"], None if p["peer"] == "nccl-tests" else 0)
        v, note = theirs(p, src, folder, n, env)
        if mine is None or not v:
            rows.append(Row(sc.name, "peers", expected, f"ours {mine}, theirs {v} ({note})", False))
            continue
        ratios[label] = {"ours": mine, "theirs": v, "ratio": mine / v, "floor": p["floor"], "what": note}
        rows.append(Row(sc.name, "peers", expected, f"{mine:.4g} / {v:.4g} = {mine / v:.3f} ({note})",
                        mine / v >= p["floor"]))
    with open(os.path.join(folder, "peers.json"), "w", encoding="utf-8") as f:
        json.dump(ratios, f, indent=1)
    return rows
