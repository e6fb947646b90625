"""One rank of the all-reduce probe (node side): a worker process of ``nccl_allreduce.py --worker '<spec>'``.

Shipped beside the probes and imported by ``nccl_allreduce.py``; :func:`run_rank` is what a worker runs (under
``_supervisor.worker_main``). The rank reports its phase (``_supervisor.Phase``) as it goes, and rank 0 (local
rank 0 in multi-node mode) writes the result file the probe reads. Method (nccl-tests ``src/common.cu``
``BenchTime`` and ``src/all_reduce.cu``):

api nccl (default on GPUs). Each worker imports torch, initialises CUDA on ``cuda:local_rank`` and loads libnccl
(``_nccl.pick_nccl_library``: the copy the process already maps, else an ``nvidia-nccl-cu*`` wheel's, else
``libnccl.so.2``). torch.distributed, with the gloo backend on the CPU, only carries the rendezvous (rank 0's
``ncclGetUniqueId`` is broadcast as 128 bytes) and the small CPU figures; the communicator is
``ncclCommInitRank`` and is finalised/destroyed at the end. Buffers are torch tensors (``data_ptr()``), the
stream one torch stream per rank made current for every torch op too. Out-of-place is ``ncclAllReduce(send,
recv, ...)`` with ``send != recv``, in-place the same with ``send == recv``: nccl-tests' two columns exactly.
Timing, as ``BenchTime`` without ``-G``: ``warmup`` calls, synchronise, one aligning ``ncclAllReduce`` of one
element, synchronise, then ``iters`` calls issued back to back and the stream's completion polled; time per op =
host elapsed / iters (``timer: events``: CUDA events around the same calls; both are recorded,
``*_event_time_us``). Each rank's time is kept (``*_rank_time_us``); the reported time is their AVERAGE, as
nccl-tests' default ``-a 1``.

api torch (gloo always; nccl on request or as the fallback): ``warmup`` collectives, then ``iters`` back-to-back
collectives; time per op = elapsed / iters. nccl: between two CUDA events on the issuing stream, started after
a tiny all-reduce that lines the ranks' GPUs up and a ~0.1 ms GPU spin so that the host has queued the work
before the clock starts; with ``graph`` the ``iters`` collectives are one CUDA graph, replayed once untimed and
once timed (nccl-tests ``-G``). gloo: host ``time.perf_counter`` around the loop, after a barrier. The reported
time is the MAXIMUM of the ranks' times (nccl-tests ``-a 3``; identical to ``-a 1`` when ranks agree).
Out-of-place: torch's public API has only the in-place ``all_reduce``; ``oop="rs_ag"`` (default) measures
``reduce_scatter_tensor(recv[rank shard] <- send)`` then an in-place ``all_gather_into_tensor(recv <- recv[rank
shard])`` (the same semantics and bytes on the wire as NCCL's ring all-reduce, two launches; counts padded to a
multiple of n), ``oop="copy"`` times ``recv.copy_(send); all_reduce(recv)``. The in-place column is the one to
compare with nccl-tests.

Both: iteration i works on the buffer at offset ``(i % (buffer/size)) * size``, as nccl-tests, so that consecutive
collectives do not reuse the same cache lines; each size's figure is the median of ``reps`` timed loops; the
sizes kept are those of which two buffers fit in free GPU memory (less ~1.5 GiB for NCCL, graphs and the check).
Correctness after timing: ``_allreduce_figures.fill_pattern`` / ``count_wrong`` around one more collective.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import time
from collections import Counter

try:
    from _allreduce_figures import DTYPES, GiB, count_wrong, fill_pattern
    from _nccl import NCCL_DTYPE, NCCL_SUM, NCCL_UNIQUE_ID_BYTES, NcclError, nccl_dtype_enum, pick_nccl_library
    from _nccl_world import all_gather_json, world_problems
    from _probe import log
    from _supervisor import EXIT_ADDR_IN_USE, EXIT_SPLIT_WORLD, Phase, exit_now, is_addr_in_use
except ImportError:  # imported as gpuaccept.probes._allreduce_rank
    from ._allreduce_figures import DTYPES, GiB, count_wrong, fill_pattern
    from ._nccl import NCCL_DTYPE, NCCL_SUM, NCCL_UNIQUE_ID_BYTES, NcclError, nccl_dtype_enum, pick_nccl_library
    from ._nccl_world import all_gather_json, world_problems
    from ._probe import log
    from ._supervisor import EXIT_ADDR_IN_USE, EXIT_SPLIT_WORLD, Phase, exit_now, is_addr_in_use


def run_rank(spec: dict) -> None:
    """One rank, start to end: set up the device (and libnccl), join the world, sweep the sizes, write the
    result (the writing rank), tear down. ``spec``: the worker's JSON spec (``nccl_allreduce._spawn``)."""
    phase = Phase(spec["phase_path"])
    phase("importing torch", "setup")
    r = Rank(spec, phase)
    r.join()
    r.allocate(r.fit_sizes())
    rows = r.sweep()
    if spec.get("writes_result", r.rank == 0):
        r.write_result(rows)
    phase("done")
    if r.lib is not None:
        r.sync()
        r.lib.destroy()
    r.dist.destroy_process_group()


class Rank:
    """This rank's device, libnccl (api nccl) and process group, and the sweep measured with them."""

    def __init__(self, spec: dict, phase: Phase):
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.spec, self.phase = torch, dist, spec, phase
        self.rank, self.n = spec["rank"], spec["world_size"]
        self.nccl = spec["backend"] == "nccl"
        self.dtype_name = spec["dtype"]
        self.dtype = getattr(torch, self.dtype_name)
        self.elsize = DTYPES[self.dtype_name][0]
        self.notes: list[str] = []
        self.lib = None
        self.stream_h = 0
        local_rank = spec.get("local_rank", self.rank)
        if self.nccl:
            phase(f"CUDA context on GPU {local_rank}")  # still setup: a driver too old, a device busy in an
            # exclusive mode or taken by another process fails here before any collective (NVML's health tests
            # judge a GPU that is gone)
            torch.cuda.set_device(local_rank)
            self.device = torch.device("cuda", local_rank)
            torch.zeros(1, device=self.device)  # CUDA context up before NCCL
            if spec["api"] == "nccl":
                phase("loading libnccl", "setup")
                self.lib = pick_nccl_library(self.notes)
                if self.lib is not None:
                    # a stream of our own, as nccl-tests; current for every torch op too, so fills and checks
                    # are ordered with the NCCL calls
                    stream = torch.cuda.Stream(self.device)
                    torch.cuda.set_stream(stream)
                    self.stream_h = stream.cuda_stream
        else:
            self.device = torch.device("cpu")
        self.api = "nccl" if self.lib is not None else "torch"
        # api nccl: torch.distributed only carries the rendezvous and the small CPU figures (gloo); NCCL is ours
        self.pg_backend = "gloo" if self.api == "nccl" else spec["backend"]
        self.ctl = torch.device("cpu") if self.api == "nccl" else self.device
        self.world = None
        self.sleep = getattr(torch.cuda, "_sleep", None)
        self.host_timer = spec.get("timer", "host") == "host"
        self.use_graph = spec["graph"]
        self.iters, self.warmup, self.reps = spec["iters"], spec["warmup"], spec.get("reps", 1)

    # -- the world -------------------------------------------------------------------------------------
    def join(self) -> None:
        """Rendezvous (exit EXIT_ADDR_IN_USE on a taken port), the multi-node world check (exit
        EXIT_SPLIT_WORLD on a split world), and with api nccl the communicator."""
        spec, dist, rank, n = self.spec, self.dist, self.rank, self.n
        self.phase("rendezvous / init_process_group", "init")
        kw = {"device_id": self.device} if self.pg_backend == "nccl" else {}
        try:
            dist.init_process_group(self.pg_backend, init_method="env://", rank=rank, world_size=n,
                                    timeout=datetime.timedelta(seconds=spec["timeout_s"]), **kw)
        except Exception as e:
            if is_addr_in_use(str(e)):
                log(f"rank {rank}: rendezvous port in use: {str(e).splitlines()[0]}")
                exit_now(EXIT_ADDR_IN_USE)
            raise
        if "nnodes" in spec:  # multi-node: the world that formed must be the one expected
            self._check_world()
        if self.lib is not None:
            self._init_comm()

    def _check_world(self) -> None:
        spec, dist, n = self.spec, self.dist, self.n
        self.phase("checking the world")
        me = {"rank": self.rank, "node_rank": spec["node_rank"], "host": spec["host"],
              "hostname": socket.gethostname(), "marker": spec["marker"]}
        world = self.world = all_gather_json(me, dist, self.torch)
        problems = world_problems(world, spec["hosts"], spec["ranks_per_node"], spec["marker"], n)
        if dist.get_world_size() != n:
            problems.insert(0, f"get_world_size() is {dist.get_world_size()}, expected {n}")
        if problems:
            log(f"split world: {'; '.join(problems)}")
            exit_now(EXIT_SPLIT_WORLD)
        names = Counter(w["hostname"] for w in world[::spec["ranks_per_node"]])
        shared = sorted(h for h, c in names.items() if c > 1)
        if shared:
            self.notes.append(f"several hosts report one hostname ({', '.join(shared)}): one kernel, several "
                              f"inventory names (a test rig or containers?)")

    def _init_comm(self) -> None:
        torch, lib = self.torch, self.lib
        self.phase("ncclGetUniqueId / broadcast")
        msg = torch.zeros(1 + NCCL_UNIQUE_ID_BYTES, dtype=torch.uint8)
        if self.rank == 0:
            try:
                uid = lib.unique_id_bytes()
                msg[1:] = torch.tensor(list(uid), dtype=torch.uint8)
                msg[0] = 1
            except NcclError as e:
                log(f"rank 0: {e}")
        self.dist.broadcast(msg, src=0)
        if int(msg[0]) != 1:
            raise RuntimeError("ncclGetUniqueId failed on rank 0")
        self.phase("ncclCommInitRank")
        lib.init_rank(self.n, bytes(msg[1:].tolist()), self.rank)

    # -- small collectives -----------------------------------------------------------------------------
    def sync(self) -> None:
        if self.nccl:
            self.torch.cuda.synchronize()

    def reduce_scalar(self, value: float, op, kind=None):
        """``value`` reduced over the ranks with ``op`` (a ``dist.ReduceOp``), as ``kind`` (default float64)."""
        torch = self.torch
        t = torch.tensor([value], dtype=torch.float64 if kind is None else kind, device=self.ctl)
        self.dist.all_reduce(t, op=op)
        return t.item()

    def per_rank(self, value: float) -> list[float]:
        """Every rank's ``value``, in rank order."""
        t = self.torch.zeros(self.n, dtype=self.torch.float64, device=self.ctl)
        t[self.rank] = value
        self.dist.all_reduce(t, op=self.dist.ReduceOp.SUM)
        return t.tolist()

    def padded(self, count: int) -> int:
        return -(-count // self.n) * self.n

    # -- buffers ---------------------------------------------------------------------------------------
    def fit_sizes(self) -> list[int]:
        """The spec's sizes of which two buffers fit, plus ~1.5 GiB for NCCL, graphs and check temporaries (the
        smallest free memory over the ranks); the others are dropped with a note. RuntimeError when none fits."""
        torch, dist = self.torch, self.dist
        sizes = list(self.spec["sizes"])
        if self.nccl:
            free_b, _ = torch.cuda.mem_get_info(self.device)
            fit = int(self.reduce_scalar(max(0, (free_b - 3 * GiB // 2) // 2), dist.ReduceOp.MIN, torch.int64))
            dropped = [s for s in sizes if s > fit]
            sizes = [s for s in sizes if s <= fit]
            if dropped:
                self.notes.append(f"sizes {dropped} skipped: two buffers do not fit in free GPU memory "
                                  f"(largest that fits: {fit} B)")
            if not sizes:
                raise RuntimeError(f"no message size fits in free GPU memory ({free_b} B free on GPU {self.rank})")
        return sizes

    def allocate(self, sizes: list[int]) -> None:
        """The send and receive buffers for ``sizes`` (bytes) and the one-element aligning tensor."""
        torch = self.torch
        self.sizes = sizes
        self.buf_elems = max(self.padded(s // self.elsize) for s in sizes)
        self.phase(f"allocating 2 x {self.buf_elems * self.elsize} B", "collective")
        self.send = torch.zeros(self.buf_elems, dtype=self.dtype, device=self.device)
        self.recv = torch.zeros(self.buf_elems, dtype=self.dtype, device=self.device)
        self.tiny = torch.zeros(1, dtype=torch.float32, device=self.device)

    # -- measuring -------------------------------------------------------------------------------------
    def make_op(self, mode: str, count: int):
        """``op(i, stream=None)``: collective number ``i`` of ``count`` elements, ``mode`` ``"oop"`` or ``"ip"``,
        at the i-th offset of the buffers (``stream``: the capturing stream of a CUDA graph, api nccl)."""
        dist, send, recv, n, rank = self.dist, self.send, self.recv, self.n, self.rank
        pc = self.padded(count)
        steps = max(1, self.buf_elems // pc)
        lib = self.lib
        if lib is not None:  # ncclAllReduce itself, as nccl-tests: in place send == recv, else send != recv
            ndt = nccl_dtype_enum(self.dtype_name)
            rb = recv.data_ptr()
            sb = rb if mode == "ip" else send.data_ptr()
            comm, ar, step_b, stream_h, dtype_name = lib.comm, lib.all_reduce, pc * self.elsize, self.stream_h, \
                self.dtype_name

            def op(i, stream=None):
                off = (i % steps) * step_b
                rc = ar(sb + off, rb + off, count, ndt, NCCL_SUM, comm, stream_h if stream is None else stream)
                if rc != 0:
                    raise lib.error(rc, f"ncclAllReduce({count} x {dtype_name})")
        elif mode == "ip":
            def op(i, stream=None):
                off = (i % steps) * pc
                dist.all_reduce(recv[off:off + count])
        elif self.spec["oop"] == "rs_ag":
            shard = pc // n

            def op(i, stream=None):
                off = (i % steps) * pc
                out = recv[off:off + pc]
                mine = out[rank * shard:(rank + 1) * shard]
                dist.reduce_scatter_tensor(mine, send[off:off + pc])
                dist.all_gather_into_tensor(out, mine)
        else:
            def op(i, stream=None):
                off = (i % steps) * pc
                out = recv[off:off + count]
                out.copy_(send[off:off + count])
                dist.all_reduce(out)
        return op

    def timed(self, fn) -> tuple[float, float | None]:
        """``(seconds, CUDA-event seconds or None)`` taken by ``fn`` on this rank, started with the ranks lined
        up. api nccl (nccl-tests BenchTime): one aligning all-reduce, stream synchronised, then the host clock
        (``timer`` host, the default, what nccl-tests reports) or CUDA events around the launches and the wait
        for the stream (polled, as nccl-tests' testStreamSynchronize)."""
        torch, dist = self.torch, self.dist
        if self.lib is not None:
            self.sync()
            self.lib.all_reduce_checked(self.tiny.data_ptr(), self.tiny.data_ptr(), 1, NCCL_DTYPE["float32"],
                                        self.stream_h)
            self.sync()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            t = time.perf_counter()
            fn()
            end.record()
            while not end.query():
                pass
            host = time.perf_counter() - t
            ev = start.elapsed_time(end) / 1e3
            return (host if self.host_timer else ev), ev
        if self.nccl:
            self.sync()
            dist.all_reduce(self.tiny)  # the GPUs leave this together...
            if self.sleep is not None:
                self.sleep(200_000)  # ...then spin ~0.1 ms while this host queues the timed work
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3, None
        dist.barrier()
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t, None

    def _graphed(self, op, mode: str, nbytes: int) -> tuple[float, float | None] | None:
        """The timed loop captured in one CUDA graph (nccl-tests ``-G``), or None when a rank's capture failed
        (every rank then falls back together, with a note)."""
        torch, iters = self.torch, self.iters
        g = torch.cuda.CUDAGraph()
        ok = 1
        try:
            with torch.cuda.graph(g, capture_error_mode="thread_local"):
                cap = torch.cuda.current_stream().cuda_stream  # the capturing stream
                for i in range(iters):
                    op(i, cap)
        except Exception as e:  # noqa: BLE001 - reported, and every rank falls back together
            ok = 0
            log(f"rank {self.rank}: CUDA graph capture failed at {nbytes} B: {e}")
        timing = None
        if int(self.reduce_scalar(ok, self.dist.ReduceOp.MIN)) == 1:
            g.replay()
            self.sync()
            timing = self.timed(g.replay)
        else:
            self.notes.append(f"CUDA graph capture failed at {nbytes} B {mode}; timed without graphs")
        del g
        return timing

    def measure(self, mode: str, count: int, nbytes: int):
        """One size and mode: ``(seconds per op, wrong elements over the ranks, graphed, every rank's us per op,
        CUDA-event seconds per op or None)``."""
        torch, dist, n, iters = self.torch, self.dist, self.n, self.iters
        op = self.make_op(mode, count)
        for i in range(self.warmup):
            op(i)
        self.sync()
        timing = self._graphed(op, mode, nbytes) if self.use_graph and nbytes <= self.spec["graph_max_bytes"] \
            else None
        graphed = timing is not None
        if timing is None:
            def loop():
                for i in range(iters):
                    op(i)
            # the median of ``reps`` timed loops: one loop of 20 small collectives lasts ~0.5 ms, where a
            # single scheduling hiccup moves the figure by 10% (nccl-tests itself swings that much run to run)
            samples = sorted((self.timed(loop) for _ in range(self.reps)), key=lambda se: se[0])
            timing = samples[len(samples) // 2]
        sec, ev = timing
        times = self.per_rank(sec / iters)
        # api nccl: the ranks' average, as nccl-tests' default -a 1; api torch: the slowest rank (-a 3)
        per_op = sum(times) / n if self.lib is not None else max(times)
        ev_op = sum(self.per_rank(ev / iters)) / n if ev is not None else None
        # correctness (nccl-tests CheckData): fresh inputs, one more collective at offset 0, compare
        send, recv = self.send, self.recv
        src = recv if mode == "ip" else send
        fill_pattern(src[:count], self.rank, n, self.dtype_name)
        if mode == "oop":
            recv[:self.padded(count)].fill_(-1)  # -1 is never an expected sum
            src[count:self.padded(count)].zero_()
        self.sync()
        dist.barrier()
        op(0)
        self.sync()
        wrong = int(self.reduce_scalar(count_wrong(recv[:count], n, self.dtype_name), dist.ReduceOp.SUM,
                                       torch.int64))
        send.zero_()  # timing data of the next size: zeros (no overflow to inf over repeated in-place sums)
        recv.zero_()
        return per_op, wrong, graphed, [round(t * 1e6, 3) for t in times], ev_op

    def sweep(self) -> list[dict]:
        """Every size, out-of-place then in-place: the result file's rows (seconds per op, wrong elements)."""
        rows = []
        for nbytes in self.sizes:
            count = nbytes // self.elsize
            nbytes = count * self.elsize
            self.phase(f"{nbytes} B out-of-place")
            oop_s, oop_wrong, g1, oop_rt, oop_ev = self.measure("oop", count, nbytes)
            self.phase(f"{nbytes} B in-place")
            ip_s, ip_wrong, g2, ip_rt, ip_ev = self.measure("ip", count, nbytes)
            row = {"bytes": nbytes, "count": count, "oop_s": oop_s, "ip_s": ip_s, "oop_wrong": oop_wrong,
                   "ip_wrong": ip_wrong, "graph": g1 and g2, "oop_rank_time_us": oop_rt, "ip_rank_time_us": ip_rt}
            if oop_ev is not None:
                row["oop_event_time_us"], row["ip_event_time_us"] = round(oop_ev * 1e6, 3), round(ip_ev * 1e6, 3)
            rows.append(row)
            if self.rank == 0:
                log(f"rank 0: {nbytes:>12} B  oop {oop_s * 1e6:10.2f} us  ip {ip_s * 1e6:10.2f} us  "
                    f"#wrong {oop_wrong}/{ip_wrong}{'  (graph)' if g1 and g2 else ''}")
        return rows

    def write_result(self, rows: list[dict]) -> None:
        """The result file the probe reads (``spec["result_path"]``, replaced atomically): rows, versions, how
        the time was taken, notes, the api that ran, the world (multi-node)."""
        torch, lib, use_graph = self.torch, self.lib, self.use_graph
        nccl_version = None
        if lib is not None:
            nccl_version = lib.version
            timing = (("host clock around iters ncclAllReduce launches and the stream's completion"
                       if self.host_timer else "CUDA events around iters ncclAllReduce calls")
                      + (" in one CUDA graph (nccl-tests -G)" if use_graph else "")
                      + ", after an aligning ncclAllReduce (nccl-tests BenchTime); average over ranks (-a 1)")
        else:
            if self.nccl:
                v = torch.cuda.nccl.version()
                nccl_version = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            timing = ("CUDA events around iters collectives" + (" in one CUDA graph" if use_graph else "")
                      if self.nccl else "time.perf_counter around iters collectives") + "; max over ranks"
        res = {"rows": rows, "torch_version": torch.__version__, "nccl_version": nccl_version,
               "timing": timing, "notes": self.notes, "api": self.api,
               "nccl_library": lib.path if lib is not None else None, "world": self.world}
        tmp = self.spec["result_path"] + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f)
        os.replace(tmp, self.spec["result_path"])
