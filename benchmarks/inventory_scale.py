"""Inventory scale: parse an INI inventory and select ``gpu:!rack050``, ours beside Ansible's tools.

    python benchmarks/inventory_scale.py                 # 1,000 and 10,000 hosts, 0 and 10 operator vars, 5 rounds
    python benchmarks/inventory_scale.py --hosts 1000 10000 30000 --operator-vars 0 1 10 --rounds 3

The inventory is generated (one host per line with its ``ansible_host`` and ``--operator-vars`` variables of the
operator's own, ``rack_slot=``, ``pdu_feed=``... that gpuaccept does not know, 100 racks ``[rack000]``..
``[rack099]``, every rack a child of ``[gpu]``, ``[gpu:vars]`` and ``[all:vars]``), written to a temporary
folder, then:

* ``ours (in process)``: ``load_inventory(path).select("gpu:!rack050")`` and the host variable check the
  plugin runs on the selection (``hostvars.check_hosts``, whose did-you-mean check sees the operator's
  variables), import excluded (best of rounds);
* ``ours (process)``: a fresh ``python -c`` doing the same, interpreter start and import included;
* ``pytest --list-hosts``: the whole command an operator runs (``python -m pytest --inventory FILE --limit
  'gpu:!rack050' --list-hosts`` in this repository: start, plugin, thresholds, load, select, checks, output);
* ``ansible-inventory --list`` and ``ansible -i FILE 'gpu:!rack050' --list-hosts``, found on PATH or beside
  this interpreter (skipped with a note when absent).

Prints one table of seconds (best and median over the rounds) and the ratio of each to ours in process.
The targets: ``ours (in process)`` <= 0.3 s at 10,000 hosts, linear in the inventory's size, and
``pytest --list-hosts`` with ten operator variables faster than ``ansible --list-hosts``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gpuaccept.config.hostvars import check_hosts  # noqa: E402
from gpuaccept.config.inventory import load_inventory  # noqa: E402

PATTERN = "gpu:!rack050"
#: variables of the operator's own (names gpuaccept does not know, 6 letters or more: the did-you-mean check
#: looks at each)
OPERATOR_VARS = ("rack_slot", "pdu_feed", "asset_tag", "row_label", "cooling_loop", "switch_port", "bmc_address",
                 "purchase_order", "warranty_end", "owner_team")


def _load_select_check(path: str) -> None:
    hosts = load_inventory(path).select(PATTERN)
    check_hosts(hosts, path, None)


def write_inventory(path: Path, n_hosts: int, n_vars: int = 1) -> None:
    """An INI inventory of ``n_hosts`` hosts (a multiple of 100) in 100 racks (rack000..rack099), all under
    ``gpu``, each host with ``n_vars`` (at most 10) of :data:`OPERATOR_VARS` on its line."""
    lines = ["[all:vars]", "ansible_user=root", "ansible_python_interpreter=/usr/bin/python3", ""]
    racks, per_rack = 100, n_hosts // 100
    for r in range(racks):
        lines.append(f"[rack{r:03d}]")
        for i in range(r * per_rack, (r + 1) * per_rack):
            own = "".join(f" {v}={i % 100}" for v in OPERATOR_VARS[:n_vars])
            lines.append(f"gpu{i:05d} ansible_host=10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}{own}")
        lines.append("")
    lines.append("[gpu:children]")
    lines += [f"rack{r:03d}" for r in range(racks)]
    lines += ["", "[gpu:vars]", "gpu_sku=h200-sxm-141gb", "gpus_per_node=8", "nccl_env={'NCCL_NVLS_ENABLE': '0'}", ""]
    path.write_text("\n".join(lines))


def _tool(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path=os.path.dirname(sys.executable))


def _timed(fn, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd,
                         env={**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true", "PYTHONPATH": str(ROOT)})
    if res.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {res.stderr.strip()[-300:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--operator-vars", type=int, nargs="+", default=[0, 10], choices=range(len(OPERATOR_VARS) + 1),
                    help="variables of the operator's own per host (default: 0 and 10)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-ansible", action="store_true", help="time ours only")
    ap.add_argument("--no-ansible-inventory", action="store_true",
                    help="leave out ansible-inventory --list (the slowest column)")
    a = ap.parse_args()
    if any(n % 100 for n in a.hosts):
        ap.error("--hosts: give multiples of 100 (100 racks)")
    inv_tool, ans_tool = (None, None) if a.no_ansible else (_tool("ansible-inventory"), _tool("ansible"))
    if a.no_ansible_inventory:
        inv_tool = None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in a.hosts:
            for nv in a.operator_vars:
                path = Path(tmp) / f"hosts{n}-{nv}.ini"
                write_inventory(path, n, nv)
                rows += _measure(path, n, nv, a.rounds, inv_tool, ans_tool)
    print("| hosts | operator vars | what | best s | median s | x ours (in process) |\n|---|---|---|---|---|---|")
    for n, nv, label, best, med, ratio in rows:
        print(f"| {n:,} | {nv} | {label} | {best:.3f} | {med:.3f} | {ratio:.1f} |")
    if not inv_tool and not a.no_ansible and not a.no_ansible_inventory:
        print("ansible-inventory not found on PATH: Ansible's columns left out")


def _measure(path: Path, n: int, nv: int, rounds: int, inv_tool: str | None, ans_tool: str | None) -> list[tuple]:
    """The rows of one inventory: (hosts, operator vars, what, best s, median s, x ours in process)."""
    picked = load_inventory(str(path)).select(PATTERN)
    expect = n - n // 100
    assert len(picked) == expect, (len(picked), expect)
    code = ("import sys; from gpuaccept.config.hostvars import check_hosts; "
            "from gpuaccept.config.inventory import load_inventory; "
            f"check_hosts(load_inventory(sys.argv[1]).select({PATTERN!r}), sys.argv[1], None)")
    runs = {"ours (in process)": _timed(lambda: _load_select_check(str(path)), rounds),
            "ours (process)": _timed(lambda: _run([sys.executable, "-c", code, str(path)]), rounds),
            "pytest --list-hosts": _timed(lambda: _run([sys.executable, "-m", "pytest", "--inventory", str(path),
                                                        f"--limit={PATTERN}", "--list-hosts", "-q"], cwd=ROOT),
                                          rounds)}
    if inv_tool:
        runs["ansible-inventory --list"] = _timed(lambda: _run([inv_tool, "-i", str(path), "--list"]), rounds)
    if ans_tool:
        runs["ansible --list-hosts"] = _timed(lambda: _run([ans_tool, "-i", str(path), PATTERN, "--list-hosts"]),
                                              rounds)
    base = min(runs["ours (in process)"])
    return [(n, nv, label, min(ts), statistics.median(ts), min(ts) / base) for label, ts in runs.items()]


if __name__ == "__main__":
    main()
