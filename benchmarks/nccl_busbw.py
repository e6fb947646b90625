"""Fidelity of the all-reduce probe: our busbw next to a reference, size by size. Run on a GPU machine.

    python benchmarks/nccl_busbw.py                         # every GPU, 1 MiB .. 4 GiB by 4, like the suite
    python benchmarks/nccl_busbw.py --nccl-tests /opt/nccl-tests/build/all_reduce_perf
    python benchmarks/nccl_busbw.py --graph both            # also our probe without CUDA graphs
    python benchmarks/nccl_busbw.py --backend gloo --max-bytes 4194304    # CPU smoke test

Reference: nccl-tests' ``all_reduce_perf`` (``--nccl-tests PATH``, else the one on PATH), run as one process
driving every GPU (``-g N``) with the same sizes, iterations, warm-up and dtype, parsed from its table. Without
it, a plain torch loop: ``init_process_group`` + ``iters`` in-place ``dist.all_reduce`` calls between two CUDA
events, slowest rank, no graphs: the figure a naive torch benchmark gets (on 2xH200 about 18 GB/s busbw at
1 MiB where nccl-tests gets 46.5, measured 2026-11-29, see /work/shared/data/README.md).

Prints ``size | ours busbw | reference busbw | ratio`` for in-place (``ncclAllReduce`` itself) and out-of-place
(see the probe's docstring for how torch's API lets us measure it), in GB/s (1e9 B/s), busbw = algbw * 2(n-1)/n
(nccl-tests doc/PERFORMANCE.md). Writes everything to ``$OUT/nccl_busbw.json`` when ``OUT`` is set. The
environment is passed to both sides unchanged (keep ``NCCL_NVLS_ENABLE=0`` where the machine requires it).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gpuaccept.nccl_table import format_table, parse_table  # noqa: E402

PROBE = ROOT / "gpuaccept" / "probes" / "nccl_allreduce.py"
NCCL_TESTS_DTYPE = {"float32": "float", "float16": "half", "bfloat16": "bfloat16"}


def run_probe(args: dict, timeout: float) -> dict:
    """Our probe as the suite runs it: a subprocess printing one JSON document."""
    t = time.monotonic()
    p = subprocess.run([sys.executable, str(PROBE), json.dumps(args)], capture_output=True, text=True,
                       timeout=timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    doc = json.loads(lines[-1]) if lines else {"failed": True, "msg": "no output"}
    if p.returncode != 0 or doc.get("failed"):
        sys.stderr.write(p.stderr[-5000:])
        raise SystemExit(f"probe failed (rc {p.returncode}): {doc.get('msg')}")
    print(f"# probe ({'graph' if args.get('graph', True) else 'eager'}): {time.monotonic() - t:.1f} s", flush=True)
    return doc


def run_nccl_tests(exe: str, a, n: int, timeout: float) -> dict:
    """nccl-tests all_reduce_perf, one process, n GPUs (threads mode), same sizes/iters/warmup/dtype."""
    cmd = [exe, "-b", str(a.min_bytes), "-e", str(a.max_bytes), "-f", str(a.factor), "-g", str(n),
           "-n", str(a.iters), "-w", str(a.warmup), "-d", NCCL_TESTS_DTYPE[a.dtype], "-o", "sum", "-c", "1"]
    print("# reference:", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    sys.stdout.write("".join(f"#   {ln}\n" for ln in p.stdout.splitlines() if ln.startswith("#")))
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise SystemExit(f"all_reduce_perf failed (rc {p.returncode})")
    return {"kind": "nccl-tests all_reduce_perf", "cmd": cmd, "rows": parse_table(p.stdout), "stdout": p.stdout}


# ----------------------------------------------------------------------------- reference: plain torch loop

def _torch_ref_worker(spec: dict) -> None:
    import torch
    import torch.distributed as dist

    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    nccl = spec["backend"] == "nccl"
    dev = torch.device("cuda", rank) if nccl else torch.device("cpu")
    if nccl:
        torch.cuda.set_device(dev)
    dist.init_process_group(spec["backend"], timeout=datetime.timedelta(seconds=spec["timeout_s"]),
                            **({"device_id": dev} if nccl else {}))
    dtype = getattr(torch, spec["dtype"])
    elsize = torch.tensor([], dtype=dtype).element_size()
    buf = torch.zeros(spec["sizes"][-1] // elsize, dtype=dtype, device=dev)
    rows = []
    for nbytes in spec["sizes"]:
        x = buf[:nbytes // elsize]
        for _ in range(spec["warmup"]):
            dist.all_reduce(x)
        dist.barrier()
        if nccl:
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(spec["iters"]):
                dist.all_reduce(x)
            e.record()
            e.synchronize()
            sec = s.elapsed_time(e) / 1e3
        else:
            t = time.perf_counter()
            for _ in range(spec["iters"]):
                dist.all_reduce(x)
            sec = time.perf_counter() - t
        t = torch.tensor([sec / spec["iters"]], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        per_op = t.item()
        alg = nbytes / 1e9 / per_op
        rows.append({"bytes": nbytes, "ip_time_us": per_op * 1e6, "ip_algbw_gbps": alg,
                     "ip_busbw_gbps": alg * 2 * (n - 1) / n})
    if rank == 0:
        print("REF " + json.dumps(rows), flush=True)
    dist.destroy_process_group()


def run_torch_loop(a, n: int, sizes: list[int], timeout: float) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = {"backend": a.backend, "dtype": a.dtype, "sizes": sizes, "iters": a.iters, "warmup": a.warmup,
            "timeout_s": a.timeout}
    procs = []
    for r in range(n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(n),
                   LOCAL_RANK=str(r))
        procs.append(subprocess.Popen([sys.executable, __file__, "--torch-ref-worker", json.dumps(spec)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode for p in procs):
        sys.stderr.write("".join(err[-3000:] for _, err in outs))
        raise SystemExit("torch reference loop failed")
    line = next(ln for ln in outs[0][0].splitlines() if ln.startswith("REF "))
    return {"kind": "plain torch loop (eager in-place dist.all_reduce, events, slowest rank)", "rows": json.loads(line[4:])}


# --------------------------------------------------------------------------------------------------- main

def ratio(a, b):
    return round(a / b, 4) if a is not None and b else None


def compare(ours: dict, ref: dict, eager: dict | None) -> list[dict]:
    ref_by = {r["bytes"]: r for r in ref["rows"]}
    eager_by = {r["bytes"]: r for r in (eager or {}).get("rows", [])}
    out = []
    for r in ours["rows"]:
        rr = ref_by.get(r["bytes"], {})
        row = {"bytes": r["bytes"],
               "ours_ip_busbw_gbps": r["ip_busbw_gbps"], "ref_ip_busbw_gbps": rr.get("ip_busbw_gbps"),
               "ratio_ip": ratio(r["ip_busbw_gbps"], rr.get("ip_busbw_gbps")),
               "ours_oop_busbw_gbps": r["oop_busbw_gbps"], "ref_oop_busbw_gbps": rr.get("oop_busbw_gbps"),
               "ratio_oop": ratio(r["oop_busbw_gbps"], rr.get("oop_busbw_gbps")), "graph": r.get("graph")}
        if eager_by:
            row["ours_eager_ip_busbw_gbps"] = eager_by.get(r["bytes"], {}).get("ip_busbw_gbps")
        out.append(row)
    return out


def fmt(x, w=9, p=2):
    return f"{x:{w}.{p}f}" if isinstance(x, (int, float)) else f"{'-':>{w}}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    ap.add_argument("--world-size", type=int, default=None, help="default: every GPU (nccl), 2 (gloo)")
    ap.add_argument("--min-bytes", type=int, default=1 << 20)
    ap.add_argument("--max-bytes", type=int, default=4 << 30)
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--dtype", choices=sorted(NCCL_TESTS_DTYPE), default="float32")
    ap.add_argument("--oop", choices=["rs_ag", "copy"], default="rs_ag")
    ap.add_argument("--graph", choices=["true", "false", "both"], default="true",
                    help="our probe with CUDA graphs, without, or both (eager shown as an extra column)")
    ap.add_argument("--nccl-tests", metavar="PATH", help="all_reduce_perf binary (default: the one on PATH)")
    ap.add_argument("--timeout", type=int, default=120, help="per-collective watchdog, s")
    ap.add_argument("--deadline", type=int, default=580, help="wall-clock limit of each run, s")
    a = ap.parse_args()

    if a.world_size is None:
        if a.backend == "nccl":
            import torch
            a.world_size = torch.cuda.device_count()
        else:
            a.world_size = 2
    n = a.world_size
    args = {"backend": a.backend, "world_size": n, "min_bytes": a.min_bytes, "max_bytes": a.max_bytes,
            "factor": a.factor, "iters": a.iters, "warmup": a.warmup, "dtype": a.dtype, "timeout_s": a.timeout,
            "deadline_s": a.deadline, "oop": a.oop, "graph": a.graph != "false"}
    ours = run_probe(args, timeout=a.deadline + 30)
    eager = run_probe(dict(args, graph=False), timeout=a.deadline + 30) if a.graph == "both" else None
    print(f"# ours: {ours['backend']} x{n}, NCCL {ours.get('nccl_version')}, torch {ours.get('torch_version')}, "
          f"transports {ours.get('transport_classes')}, oop = {ours.get('oop_method')}")
    sys.stdout.write("".join(f"#   {ln}\n" for ln in format_table(ours).splitlines()))

    exe = a.nccl_tests or shutil.which("all_reduce_perf")
    if a.backend == "nccl" and exe:
        ref = run_nccl_tests(exe, a, n, timeout=a.deadline)
    else:
        if a.backend == "nccl":
            print("# all_reduce_perf not found (give --nccl-tests PATH): reference = plain torch loop")
        ref = run_torch_loop(a, n, [r["bytes"] for r in ours["rows"]], timeout=a.deadline)
    rows = compare(ours, ref, eager)

    print(f"# reference: {ref['kind']}")
    head = f"{'size (B)':>12} | {'ours ip':>9} | {'ref ip':>9} | {'ratio':>6} | {'ours oop':>9} | {'ref oop':>9} | {'ratio':>6}"
    if eager:
        head += f" | {'ours eager ip':>13}"
    print(head + "   (busbw, GB/s)")
    for r in rows:
        line = (f"{r['bytes']:>12} | {fmt(r['ours_ip_busbw_gbps'])} | {fmt(r['ref_ip_busbw_gbps'])} | "
                f"{fmt(r['ratio_ip'], 6, 3)} | {fmt(r['ours_oop_busbw_gbps'])} | {fmt(r['ref_oop_busbw_gbps'])} | "
                f"{fmt(r['ratio_oop'], 6, 3)}")
        if eager:
            line += f" | {fmt(r.get('ours_eager_ip_busbw_gbps'), 13)}"
        print(line)
    ratios = [r["ratio_ip"] for r in rows if r["ratio_ip"] is not None]
    summary = {"worst_ratio_ip": min(ratios) if ratios else None,
               "within_10pct_ip": all(x >= 0.9 for x in ratios) if ratios else None}
    print(f"# worst in-place ratio: {summary['worst_ratio_ip']}  (within 10%: {summary['within_10pct_ip']})")

    out = os.environ.get("OUT")
    if out:
        path = Path(out) / "nccl_busbw.json"
        path.write_text(json.dumps({"args": vars(a), "ours": ours, "ours_eager": eager, "reference": ref,
                                    "comparison": rows, "summary": summary}, indent=1))
        print(f"# wrote {path}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--torch-ref-worker":
        _torch_ref_worker(json.loads(sys.argv[2]))
    else:
        main()
