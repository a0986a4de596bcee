"""PyTorch profiler (Kineto) traces of a simulated training job, one gzip file per profiled rank.

:func:`write_traces` profiles a few consecutive optimizer steps in the middle of the baseline and
of the incident window (``torch.profiler.schedule(active=6)`` around them), for a few ranks, and
writes what ``torch.profiler.tensorboard_trace_handler`` would: ``traces/<window>/rank-<r>.pt.trace.json.gz``.
Every duration comes from the simulator's own step breakdown
(:class:`~perfkit.lab.sim.training_engine.TrainingRun`: data wait, compute and collective time of
each rank in each step), never from what a detector looks for. The layout of one step on one
rank, times from the step's start (``W``: data wait, ``C``: compute, ``D``: step)::

    CPU  ProfilerStep#N [0, D]
         enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__ [15, W - h2d]   the batch queue
         aten::to → cudaMemcpyAsync, then one cpu_op + cudaLaunchKernel per kernel (forward on the
         main thread, backward on the autograd thread), then aten::item → cudaStreamSynchronize
    GPU  stream 7:  Memcpy HtoD [.., W]; forward, recompute and backward kernels back to back
                    over [W, W + C - a]; the fused Adam kernel (a: its share) last, [D - a, D]
         stream 20: ZeRO-3 all-gathers / reduce-scatters (DDP: all-reduce buckets) hidden under
                    compute; the last collective [W + C - a, D - a]: the exposed communication, which on a
                    rank that reached it early includes waiting for the slowest rank (NCCL kernels
                    spin while they wait, so the wait is kernel time, as on real GPUs)

The schema is the real traces' (HTA's test traces, copied into ``tests/data/hta-traces/``; PyTorch 2.x Kineto JSON):
``schemaVersion``, ``deviceProperties``, ``distributedInfo`` (backend, rank, world_size,
pg_config, nccl_version), ``traceEvents`` of ``ph: X`` events in µs (integer ``ts``/``dur``),
``cat`` ``user_annotation`` / ``cpu_op`` / ``cuda_runtime`` / ``kernel`` / ``gpu_memcpy``, ``args``
with ``External id``, ``correlation``, ``stream``, ``device``, the ``ac2g`` flow pairs, the
``Trace`` span, ``process_name``/``thread_name`` metadata. Names are NCCL 2.21's
(``ncclDevKernel_*``, as the bundles' logs say NCCL 2.21.5), cuBLAS' Hopper GEMMs, FlashAttention-2's.

The same run gives the same bytes: integer µs, no randomness beyond the run's, gzip with mtime 0.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfkit.lab.sim.training_engine import Proc, TrainingRun
from perfkit.lab.sim.training_physics import H2D_S, comm_seconds

#: the scenarios whose bundles carry traces (the seed's DataLoader case and the 32 -> 64 GPU case);
#: a variant (another id) or another scenario writes none, so their bundles stay as they are
TRACED = frozenset({"dataloader-starvation", "allreduce-scaling-64gpu"})
PROFILE_STEPS = 6
"""Steps recorded per window: ``schedule(wait=.., warmup=1, active=6)``. HTA (and perfkit.traces)
leave the last out (its GPU work is usually cut off), so five steps are analysed."""
MAX_RANKS = 8
"""Ranks profiled: every rank of a one-node job; else the first four, the middle one and the last
(one trace per rank is what ``tensorboard_trace_handler`` writes; the bundle stays small)."""
COMPUTE_STREAM = 7  # the default stream as Kineto numbers it (the real fixtures' kernels run on 7)
COMM_STREAM = 20  # the process group's NCCL stream (a separate stream, so collectives overlap compute)
CHUNKS = 4
"""Layer groups the step is drawn in: the model's 32-80 layers folded into 4, each with its own
GEMMs, attention and collectives (a real step has thousands of kernels; 4 groups keep a rank's
trace near 50 kB gzipped while keeping the forward / recompute / backward order)."""
QUEUE_GET_US = 60
"""``__next__`` when the batch is already in the queue: a multiprocessing Queue.get and the pin
(tens of µs in real traces: the ``enumerate(DataLoader)`` ops of trace_diff/control are 71 µs)."""
CPU_OP_US = 35  # one aten op on the CPU: Python, dispatcher and allocator (real aten::mm: 20-60 µs)
LAUNCH_US = 7  # cudaLaunchKernel itself (~5-10 µs; HTA's outlier cut-off is 50 µs)
LOOKAHEAD = 3
"""How many kernels the CPU runs ahead of the GPU: FSDP's rate limiter (``limit_all_gathers``)
blocks the CPU once two all-gathers are in flight, so a ZeRO-3 step is launched a layer or so
ahead, far from the 1024-launch queue limit (HTA's ``CUDA_MAX_LAUNCH_QUEUE_PER_STREAM``)."""
OPTIMIZER_SHARE = 0.01
"""The fused Adam pass's share of compute: it streams ~16 bytes of state per local parameter at
HBM speed (training_physics.compute_seconds' optimizer term: 0.5-1.5 % of these steps)."""
NCCL_VERSION = (
    "2.21.5"  # what the simulated launch logs print (training_logs: "NCCL version 2.21.5+cuda12.4")
)

# Kernel names (demangled, as Kineto writes them). GEMMs: cuBLAS' sm90 kernels; attention:
# FlashAttention-2 (flash::flash_fwd_kernel / flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel);
# collectives: NCCL >= 2.19 names ncclDevKernel_<Coll>[_<Op>_<type>]_<ALGO>_<PROTO>.
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
FLASH_FWD = (
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
    "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, true, false, false, false, true, true, false, "
    "false>(flash::Flash_fwd_params)"
)
FLASH_BWD = (
    "void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, "
    "false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, false, "
    "false, false, false, true, false, false>(flash::Flash_bwd_params)"
)
ELEMENTWISE = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)"
)
ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
    "(at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, double*, double*>"
    "(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
    "FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, "
    "double, bool, double*, double*)"
)
NCCL_ARGS = "(ncclDevKernelArgsStorage<4096ul>)"
ALL_GATHER = f"ncclDevKernel_AllGather_RING_LL{NCCL_ARGS}"
REDUCE_SCATTER = f"ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL{NCCL_ARGS}"
ALL_REDUCE = f"ncclDevKernel_AllReduce_Sum_bf16_RING_LL{NCCL_ARGS}"
MEMCPY_H2D = "Memcpy HtoD (Pinned -> Device)"
LOADER_OP = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"

# one layer group's forward and backward: (kernel, CPU op, share of the pass's time). Shares follow
# the FLOPs of a Llama block at these sequence lengths: QKV/O and MLP GEMMs ~3/4, attention ~1/5.
FORWARD = (
    (GEMM, "aten::mm", 0.30),
    (FLASH_FWD, "flash_attn::_flash_attn_forward", 0.20),
    (GEMM, "aten::mm", 0.45),
    (ELEMENTWISE, "aten::add", 0.05),
)
BACKWARD = (
    (GEMM, "aten::mm", 0.45),
    (FLASH_BWD, "flash_attn::_flash_attn_backward", 0.25),
    (GEMM, "aten::mm", 0.25),
    (ELEMENTWISE, "aten::add", 0.05),
)
#: CUPTI callback ids of the runtime calls (cupti_runtime_cbid.h; the fixtures carry 211 and 41)
CBID = {
    "cudaLaunchKernel": 211,
    "cudaMemcpyAsync": 41,
    "cudaLaunchKernelExC": 430,
    "cudaStreamSynchronize": 131,
}
#: cudaGetDeviceProperties of the GPUs the simulator's clusters use (CUDA C Programming Guide,
#: "Compute Capabilities" table for 9.0; 132 SMs: NVIDIA H100 Tensor Core GPU Architecture, SXM5)
DEVICE_PROPERTIES: dict[str, dict[str, int]] = {
    "NVIDIA H100 80GB HBM3": {
        "computeMajor": 9,
        "computeMinor": 0,
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "warpSize": 32,
        "sharedMemPerBlock": 49152,
        "numSms": 132,
        "regsPerMultiprocessor": 65536,
        "sharedMemPerBlockOptin": 232448,
        "sharedMemPerMultiprocessor": 233472,
    },
}


#: launch configuration CUPTI reports per kernel (grid, block, registers per thread, static shared
#: memory): cuBLAS sm90 GEMMs one 128x256 tile per block of 2 warpgroups (+1 producer), persistent
#: over the 132 SMs; FlashAttention-2 one block of 4 warps per (query tile, head); NCCL one block of
#: 544 threads per channel (the fixtures' ncclKernel: 96 registers, block [544, 1, 1])
LAUNCH_SHAPES: dict[str, tuple[tuple[int, int, int], int, int, int]] = {
    "sm90_xmma": ((132, 1, 1), 384, 168, 213_504),
    "void flash::flash_fwd": ((32, 64, 1), 128, 255, 49_152),
    "void flash::flash_bwd": ((32, 64, 1), 256, 255, 98_304),
    "void at::native::vectorized": ((4096, 1, 1), 128, 32, 0),
    "void at::native::(anonymous": ((1024, 1, 1), 512, 64, 0),
    "nccl": ((16, 1, 1), 544, 96, 87_568),
}


def launch_shape(kernel: str) -> dict[str, Any]:
    """CUPTI's per-kernel args for ``kernel``: grid, block and the occupancy figures derived from
    them on an H100 (132 SMs, 64 warps and 64K registers per SM)."""
    grid, threads, regs, smem = next((v for k, v in LAUNCH_SHAPES.items() if kernel.startswith(k)), ((1, 1, 1), 32, 32, 0))  # fmt: skip
    blocks = grid[0] * grid[1] * grid[2]
    warps_per_block = -(-threads // 32)
    # resident blocks per SM: limited by warps (64) and registers (65536)
    fit = max(1, min(64 // warps_per_block, 65536 // max(regs * threads, 1)))
    per_sm = blocks / 132
    active = min(per_sm, fit) * warps_per_block
    return {
        "registers per thread": regs,
        "shared memory": smem,
        "blocks per SM": round(per_sm, 6),
        "warps per SM": round(per_sm * warps_per_block, 6),
        "grid": list(grid),
        "block": [threads, 1, 1],
        "est. achieved occupancy %": min(100, round(100 * active / 64)),
    }


def profiled_ranks(n: int) -> list[int]:
    """Which ranks of an ``n``-rank job write a trace (see :data:`MAX_RANKS`)."""
    if n <= MAX_RANKS:
        return list(range(n))
    return sorted({0, 1, 2, 3, n // 2, n - 1})


def profiled_steps(run: TrainingRun, window: tuple[float, float]) -> np.ndarray:
    """Row indices of :data:`PROFILE_STEPS` consecutive steps of one launch from the middle of
    ``window`` (scenario seconds); fewer when the window holds fewer, empty when under two."""
    mid = 0.5 * (window[0] + window[1])
    rows = np.flatnonzero((run.t_start >= mid) & (run.t_end <= window[1]))
    if rows.size < 2:
        rows = np.flatnonzero((run.t_start >= window[0]) & (run.t_end <= window[1]))
    if rows.size == 0:
        return rows
    first = int(rows[0])
    take = [first]
    for i in range(first + 1, min(first + PROFILE_STEPS, run.t_start.size)):
        if run.proc[i] != run.proc[first] or run.step[i] != run.step[i - 1] + 1 or run.t_end[i] > window[1]:
            break
        take.append(i)
    return np.asarray(take if len(take) >= 2 else [], dtype=np.int64)


@dataclass
class _Ids:
    """Per-rank counters: correlation ids (runtime call ↔ GPU event) and External ids (op ↔ launch)."""

    corr: int = 4096
    ext: int = 1

    def next_corr(self) -> int:
        self.corr += 1
        return self.corr

    def next_ext(self) -> int:
        self.ext += 1
        return self.ext


class _RankTrace:
    """The events of one rank over the profiled steps."""

    def __init__(self, run: TrainingRun, proc: Proc, rank: int, t0_us: int) -> None:
        sp = run.spec
        self.run, self.proc, self.rank = run, proc, rank
        self.gpn = sp.cluster.gpus_per_node
        self.dev = rank % self.gpn
        self.pid = proc.pid0 + self.dev  # the launch logs' pid of this local rank
        self.tid = self.pid
        self.autograd_tid = self.pid + 97  # the autograd engine's device thread runs backward ops
        self.t0_us = t0_us  # the scenario's start, µs since the epoch
        self.ids = _Ids()
        self.events: list[dict[str, Any]] = []
        self.zero3 = proc.setup.zero_stage == 3
        self.comm_s = comm_seconds(sp.model, proc.setup, sp.cluster, proc.transport)
        self.ranks_text = "[" + ", ".join(str(r) for r in range(proc.n)) + "]"
        su = proc.setup
        # the batch copied to the GPU: token ids (int64) and the decoded samples' bytes
        self.batch_bytes = int(su.micro_batch * su.grad_accum * (sp.model.seq_len * 8 + su.sample_bytes))

    def us(self, t: float) -> int:
        return self.t0_us + round(t * 1e6)

    # -- event builders ----------------------------------------------------------------------------

    def cpu(self, cat: str, name: str, ts: int, dur: int, tid: int, **args: Any) -> int:
        ext = self.ids.next_ext()
        ev = {"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": tid, "ts": ts, "dur": max(dur, 1)}
        ev["args"] = {"External id": ext, "Ev Idx": ext - 1, **args}
        self.events.append(ev)
        return ext

    def runtime(self, name: str, ts: int, ext: int, tid: int, dur: int = LAUNCH_US) -> int:
        corr = self.ids.next_corr()
        args = {"External id": ext, "cbid": CBID[name], "correlation": corr}
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": name,
                "pid": self.pid,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": args,
            }
        )
        return corr

    def gpu(self, cat: str, name: str, ts: int, dur: int, stream: int, corr: int, ext: int, launch: tuple[int, int], **args: Any) -> None:  # fmt: skip
        dur = max(dur, 1)
        ev_args: dict[str, Any] = {"External id": ext}
        if cat == "kernel":
            ev_args["queued"] = 0
        ev_args.update({"device": self.dev, "context": 1, "stream": stream, "correlation": corr})
        if cat == "kernel":
            ev_args.update(launch_shape(name))
        else:  # a copy: its size and the bandwidth it reached, as CUPTI reports them
            ev_args.update(
                {"bytes": self.batch_bytes, "memory bandwidth (GB/s)": self.batch_bytes / dur / 1e3}
            )
        ev_args.update(args)
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self.dev,
                "tid": stream,
                "ts": ts,
                "dur": dur,
                "args": ev_args,
            }
        )
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": launch[1], "ts": launch[0], "cat": "ac2g", "name": "ac2g"})  # fmt: skip
        self.events.append({"ph": "f", "id": corr, "pid": self.dev, "tid": stream, "ts": ts, "cat": "ac2g", "name": "ac2g", "bp": "e"})  # fmt: skip

    def launch(self, at: int, tid: int, op: str, kernel: str, gpu_ts: int, gpu_dur: int, stream: int, cat: str = "kernel", **args: Any) -> int:  # fmt: skip
        """A CPU op at ``at`` launching one GPU event that runs [gpu_ts, gpu_ts + gpu_dur] (it
        waits in the stream's queue until then; never before its launch returns). Returns when
        the op returns on the CPU."""
        ext = self.cpu("cpu_op", op, at, CPU_OP_US, tid)
        call_at = at + CPU_OP_US - LAUNCH_US - 3
        call = "cudaMemcpyAsync" if cat == "gpu_memcpy" else "cudaLaunchKernelExC" if kernel.startswith("nccl") else "cudaLaunchKernel"  # fmt: skip
        corr = self.runtime(call, call_at, ext, tid)
        assert gpu_ts > call_at + LAUNCH_US, "a GPU event cannot start before its launch returns"
        self.gpu(cat, kernel, gpu_ts, gpu_dur, stream, corr, ext, (call_at, tid), **args)
        return at + CPU_OP_US

    # -- one step ----------------------------------------------------------------------------------

    def step(self, i: int) -> None:
        run, r = self.run, self.rank
        s0, s1 = self.us(float(run.t_start[i])), self.us(float(run.t_end[i]))
        wait, comp = float(run.wait[i, r]), float(run.compute[i, r])
        w_end = s0 + round(wait * 1e6)
        c_end = min(w_end + round(comp * 1e6), s1)
        opt = round(OPTIMIZER_SHARE * (c_end - w_end))
        self.cpu("user_annotation", f"ProfilerStep#{int(run.step[i])}", s0, s1 - s0, self.tid)
        # the batch: the queue wait, then the pinned host-to-device copy (the simulator's h2d)
        h2d = round(H2D_S * 1e6)
        loader_end = s0 + 15 + max(w_end - s0 - h2d, 0) + QUEUE_GET_US
        self.cpu("user_annotation", LOADER_OP, s0 + 15, loader_end - s0 - 15, self.tid)
        copy_at = loader_end + 2  # the copy starts on the GPU as soon as its launch returns
        copy_ts = copy_at + CPU_OP_US - 2
        cursor = self.launch(copy_at, self.tid, "aten::to", MEMCPY_H2D, copy_ts, w_end - copy_ts,
                             COMPUTE_STREAM, cat="gpu_memcpy")  # fmt: skip
        # forward and backward over [W, W + C - opt], the collectives, then the optimizer, which
        # needs the reduced gradients: it runs after the last collective, at the end of the step
        kernels = self.compute_kernels(w_end, c_end - opt)
        comms = self.comm_kernels(i, w_end, c_end - opt, s1 - opt)
        adam: list[tuple[Any, ...]] = [
            (s1 - opt, opt, ADAM, "aten::_fused_adam_", COMPUTE_STREAM, "forward", {})
        ]
        # launched in GPU order, the CPU at most LOOKAHEAD kernels ahead of the GPU
        plan = sorted(kernels + comms + adam, key=lambda k: (k[0], k[4]))
        for k, (gpu_ts, dur, kernel, op, stream, phase, args) in enumerate(plan):
            tid = self.autograd_tid if phase == "backward" else self.tid
            at = max(cursor + 5, plan[k - LOOKAHEAD][0] if k >= LOOKAHEAD else 0)
            cursor = self.launch(at, tid, op, kernel, gpu_ts, dur, stream, **args)
        # loss.item(): the CPU waits for the GPU to finish the step
        ext = self.cpu("cpu_op", "aten::item", cursor, max(s1 - 5 - cursor, 1), self.tid)
        self.runtime("cudaStreamSynchronize", cursor + 4, ext, self.tid, dur=max(s1 - 10 - cursor, 1))

    def compute_kernels(self, start: int, end: int) -> list[tuple[Any, ...]]:
        """Forward, recompute (full activation checkpointing) and backward of each layer group,
        back to back on the compute stream over [start, end]."""
        recompute = self.proc.setup.recompute == "full"
        plan: list[tuple[str, str, float, str]] = []  # kernel, op, weight, phase
        for _ in range(CHUNKS):
            plan += [(k, op, w, "forward") for k, op, w in FORWARD]
        for _ in range(CHUNKS):
            if recompute:
                plan += [(k, op, w, "backward") for k, op, w in FORWARD]
            plan += [(k, op, 2.0 * w, "backward") for k, op, w in BACKWARD]  # backward: 2x forward FLOPs
        weights = np.array([p[2] for p in plan])
        edges = start + np.round(np.concatenate([[0.0], np.cumsum(weights / weights.sum())]) * (end - start))
        return [
            (int(a), int(b - a), kernel, op, COMPUTE_STREAM, phase, {})
            for (kernel, op, _, phase), a, b in zip(plan, edges[:-1], edges[1:], strict=True)
        ]

    def comm_kernels(self, i: int, w_end: int, c_end: int, done: int) -> list[tuple[Any, ...]]:
        """The collectives: those hidden under compute spread evenly over [w_end, c_end], the last
        one from the end of compute to ``done`` (exposed, and on early ranks the wait for the
        slowest)."""
        run, proc = self.run, self.proc
        n = proc.n
        params = run.spec.model.params
        comp = float(np.nanmean(run.compute[i, :n]))
        hidden = max(0.0, min(self.comm_s, proc.setup.overlap * comp))
        if (
            self.zero3
        ):  # FSDP: all-gather each group for forward and again for backward, reduce-scatter its grads
            names = [ALL_GATHER] * CHUNKS + [ALL_GATHER] * CHUNKS + [REDUCE_SCATTER] * (CHUNKS - 1)
            first = w_end
            last_name, last_coll = REDUCE_SCATTER, "_reduce_scatter_base"
        else:  # DDP / ZeRO 1-2: gradient buckets all-reduced during backward
            names = [ALL_REDUCE] * (2 * CHUNKS - 1)
            first = w_end + (c_end - w_end) // 3  # backward is the last two thirds of compute
            last_name, last_coll = ALL_REDUCE, "allreduce"
        span = max(c_end - first, 1)
        each = min(round(hidden * 1e6 / len(names)), int(0.9 * span / len(names)))
        out = []
        elems = int(params / (2 * CHUNKS))  # bf16 elements moved per collective (order of magnitude)
        for k, name in enumerate(names):
            coll = "_allgather_base" if "AllGather" in name else last_coll
            at = first + (k * span) // len(names)
            phase = "forward" if self.zero3 and k < CHUNKS else "backward"
            out.append(
                (
                    at,
                    max(each, 1),
                    name,
                    "record_param_comms",
                    COMM_STREAM,
                    phase,
                    self.nccl_args(coll, elems),
                )
            )
        out.append((c_end, max(done - c_end, 1), last_name, "record_param_comms", COMM_STREAM, "backward",
                    self.nccl_args(last_coll, elems)))  # fmt: skip
        return out

    def nccl_args(self, coll: str, elems: int) -> dict[str, Any]:
        n = self.proc.n
        in_elems = elems // n if coll == "_allgather_base" else elems
        out_elems = elems // n if coll == "_reduce_scatter_base" else elems
        return {
            "Collective name": coll,
            "In msg nelems": in_elems,
            "Out msg nelems": out_elems,
            "Group size": n,
            "dtype": "BFloat16",
            "In split size": "[]",
            "Out split size": "[]",
            "Process Group Name": "0",
            "Process Group Description": "default_pg",
            "Process Group Ranks": self.ranks_text,
        }

    # -- the document -----------------------------------------------------------------------------

    def document(self, rows: np.ndarray) -> dict[str, Any]:
        for i in rows:
            self.step(int(i))
        sp = self.run.spec
        first = min(e["ts"] for e in self.events)
        last = max(e["ts"] + e.get("dur", 0) for e in self.events)
        meta: list[dict[str, Any]] = []
        for pid, label in ((self.pid, "CPU"), (self.dev, f"GPU {self.dev}")):
            meta.append({"name": "process_name", "ph": "M", "ts": first, "pid": pid, "tid": 0, "args": {"name": "python3"}})  # fmt: skip
            meta.append({"name": "process_labels", "ph": "M", "ts": first, "pid": pid, "tid": 0, "args": {"labels": label}})  # fmt: skip
        for tid, label in ((self.tid, "thread " + str(self.tid) + " (python3)"), (self.autograd_tid, "thread " + str(self.autograd_tid) + " (pt_autograd_0)")):  # fmt: skip
            meta.append({"name": "thread_name", "ph": "M", "ts": first, "pid": self.pid, "tid": tid, "args": {"name": label}})  # fmt: skip
        for stream in (COMPUTE_STREAM, COMM_STREAM):
            meta.append({"name": "thread_name", "ph": "M", "ts": first, "pid": self.dev, "tid": stream, "args": {"name": f"stream {stream} "}})  # fmt: skip
        span = {"ph": "X", "cat": "Trace", "ts": first - 50, "dur": last - first + 100, "pid": "Spans",
                "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}}  # fmt: skip
        end = {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": last + 60}
        c = sp.cluster
        props = {"id": 0, "name": c.gpu, "totalGlobalMem": round(c.torch_capacity_gib * 2**30), **DEVICE_PROPERTIES.get(c.gpu, {})}  # fmt: skip
        n = self.proc.n
        return {
            "schemaVersion": 1,
            "deviceProperties": [{**props, "id": d} for d in range(min(n, self.gpn))],
            "distributedInfo": {
                "backend": "nccl",
                "rank": self.rank,
                "world_size": n,
                "pg_count": 1,
                "pg_config": [
                    {
                        "pg_name": "0",
                        "pg_desc": "default_pg",
                        "backend_config": "cuda:nccl",
                        "pg_size": n,
                        "ranks": list(range(n)),
                    }
                ],  # fmt: skip
                "nccl_version": NCCL_VERSION,
            },
            "record_shapes": 0,
            "traceEvents": [*meta, *self.events, span, end],
            "traceName": f"rank-{self.rank}.pt.trace.json",
            "displayTimeUnit": "ms",
        }


def _dump(doc: dict[str, Any]) -> bytes:
    """Kineto's layout: the header keys, then one event per line."""
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    lines = [json.dumps(e, separators=(", ", ": ")) for e in doc["traceEvents"]]
    text = json.dumps(head, indent=2)[:-2] + ',\n  "traceEvents": [\n  ' + ",\n  ".join(lines) + "\n]}\n"
    return text.encode("utf-8")


def rank_document(run: TrainingRun, rows: np.ndarray, rank: int) -> dict[str, Any]:
    """The Kineto trace (as a dict) of ``rank`` over the steps ``rows`` (one launch)."""
    proc = run.procs[int(run.proc[int(rows[0])])]
    t0 = round(run.spec.start.timestamp() * 1e6)
    return _RankTrace(run, proc, rank, t0).document(rows)


def write_traces(run: TrainingRun, out: Path) -> dict[str, int]:
    """Write ``out/traces/{baseline,incident}/rank-<r>.pt.trace.json.gz`` for the profiled steps of
    the baseline and incident windows. Returns files and bytes written."""
    sp = run.spec
    files = size = 0
    for label, window in (("baseline", sp.baseline), ("incident", sp.window)):
        rows = profiled_steps(run, window)
        if rows.size == 0:
            continue
        folder = out / "traces" / label
        folder.mkdir(parents=True, exist_ok=True)
        n = run.procs[int(run.proc[int(rows[0])])].n
        for rank in profiled_ranks(n):
            data = gzip.compress(_dump(rank_document(run, rows, rank)), compresslevel=9, mtime=0)
            (folder / f"rank-{rank}.pt.trace.json.gz").write_bytes(data)
            files += 1
            size += len(data)
    return {"trace_files": files, "trace_bytes": size}
