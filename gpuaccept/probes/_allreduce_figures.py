"""The all-reduce probe's figures (node side, stdlib only but for the torch tensors handed in): message sizes,
algbw/busbw, and the correctness pattern.

Shipped beside the probes and imported by ``nccl_allreduce.py`` and its rank (``_allreduce_rank.py``).

* algbw = bytes / time (GB/s, GB = 1e9 bytes); busbw = algbw * 2(n-1)/n, nccl-tests ``doc/PERFORMANCE.md``
  ("AllReduce": each rank sends and receives 2(n-1)/n of the data; busbw compares with the link's speed).
  One rank: busbw 0 (nothing crosses a link). :func:`busbw_factor` is the source of the factor; the
  controller's ``gpuaccept.judging.nccl_table.busbw`` is held to it by a test.
* Correctness (nccl-tests ``CheckData``): each rank fills its input with ``c_rank * (i % m)`` (``c_rank = rank +
  1``, or 1 for large n) chosen so that every partial sum is an integer exactly representable in the dtype
  whatever the reduction order (<= 2**24 float32, 2048 float16, 256 bfloat16); the output of one more collective
  is compared element by element on the device with the expected sum (NaN counts as wrong).
"""
from __future__ import annotations

MiB = 1 << 20
GiB = 1 << 30

#: element size (bytes), nccl-tests' type name, largest integer exactly representable (2**(mantissa bits+1))
DTYPES = {
    "float32": (4, "float", 1 << 24),
    "float16": (2, "half", 1 << 11),
    "bfloat16": (2, "bfloat16", 1 << 8),
}
CHECK_CHUNK = 1 << 24  # elements per chunk when filling / checking (bounds temporaries to ~128 MiB int64)


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """Message sizes in bytes: ``min, min*factor, ...`` up to ``max`` inclusive (nccl-tests ``-b -e -f``)."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError(f"need 1 <= min_bytes <= max_bytes, got {min_bytes}..{max_bytes}")
    if min_bytes == max_bytes:
        return [min_bytes]
    if factor < 2:
        raise ValueError(f"factor must be an integer >= 2, got {factor}")
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= factor
    return sizes


def busbw_factor(world_size: int) -> float:
    """All-reduce bus-bandwidth factor 2(n-1)/n (nccl-tests doc/PERFORMANCE.md); 0 for one rank."""
    return 2.0 * (world_size - 1) / world_size


def make_row(nbytes: int, count: int, type_name: str, world_size: int, oop_s: float, ip_s: float,
             oop_wrong, ip_wrong, graph: bool) -> dict:
    """One table row from per-op times in seconds: time in us, algbw = bytes/time and busbw = algbw*2(n-1)/n
    in GB/s (1e9 bytes/s), as nccl-tests ``AllReduceGetBw``."""
    row = {"bytes": nbytes, "count": count, "type": type_name, "redop": "sum"}
    for mode, sec, wrong in (("oop", oop_s, oop_wrong), ("ip", ip_s, ip_wrong)):
        alg = nbytes / 1e9 / sec if sec > 0 else 0.0
        row[f"{mode}_time_us"] = round(sec * 1e6, 3)
        row[f"{mode}_algbw_gbps"] = round(alg, 6)
        row[f"{mode}_busbw_gbps"] = round(alg * busbw_factor(world_size), 6)
        row[f"{mode}_wrong"] = wrong
    row["graph"] = graph
    return row


def avg_busbw(rows: list[dict]) -> float:
    """nccl-tests' "Avg bus bandwidth": mean busbw over every size, out-of-place and in-place (GB/s)."""
    vals = [r[k] for r in rows for k in ("oop_busbw_gbps", "ip_busbw_gbps") if r.get(k) is not None]
    return round(sum(vals) / len(vals), 6) if vals else 0.0


def pattern_params(world_size: int, dtype: str) -> tuple[int, bool, int]:
    """``(m, rank_scaled, total)`` of the correctness pattern: rank r holds ``c_r * (i % m)`` with
    ``c_r = r + 1`` if ``rank_scaled`` else 1, so the expected sum is ``total * (i % m)``. Chosen so that
    ``total * (m - 1)`` (the largest partial sum in any reduction order) is exactly representable."""
    exact = DTYPES[dtype][2]
    tri = world_size * (world_size + 1) // 2
    scaled = tri <= exact // 2
    total = tri if scaled else world_size
    m = min(251, exact // total + 1)
    if m < 2:
        raise ValueError(f"world size {world_size} too large for an exact {dtype} check")
    return m, scaled, total


def pattern_chunk(torch, start: int, stop: int, coeff: int, m: int, dtype, device):
    """Elements ``start..stop`` of ``coeff * (i % m)`` as a tensor of ``dtype`` (exact integers)."""
    idx = torch.arange(start, stop, device=device, dtype=torch.int64)
    return (torch.remainder(idx, m) * coeff).to(dtype)


def fill_pattern(buf, rank: int, world_size: int, dtype: str) -> None:
    """Fill 1-D ``buf`` with rank ``rank``'s input pattern (see :func:`pattern_params`)."""
    import torch
    m, scaled, _ = pattern_params(world_size, dtype)
    coeff = rank + 1 if scaled else 1
    for s in range(0, buf.numel(), CHECK_CHUNK):
        e = min(s + CHECK_CHUNK, buf.numel())
        buf[s:e].copy_(pattern_chunk(torch, s, e, coeff, m, buf.dtype, buf.device))


def count_wrong(result, world_size: int, dtype: str) -> int:
    """Number of elements of 1-D ``result`` that differ from the expected all-reduce sum of every rank's
    :func:`fill_pattern` (compared on ``result``'s device, chunk by chunk; NaN counts as wrong)."""
    import torch
    m, _, total = pattern_params(world_size, dtype)
    wrong = torch.zeros((), dtype=torch.int64, device=result.device)
    for s in range(0, result.numel(), CHECK_CHUNK):
        e = min(s + CHECK_CHUNK, result.numel())
        exp = pattern_chunk(torch, s, e, total, m, result.dtype, result.device)
        wrong += (result[s:e] != exp).sum()
    return int(wrong.item())
