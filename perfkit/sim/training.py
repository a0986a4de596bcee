"""A seeded, step-level simulator of a data-parallel training job, written as an incident bundle.

A :class:`TrainingSpec` fixes the model (:class:`ModelShape`), the cluster (:class:`Cluster`),
the job's launch configuration and environment (:class:`Setup`) and the incident's story: changes
that relaunch the job with a new configuration (:class:`Change`: deploy, config, scale, rollback),
changes of the environment under a running job (:class:`Phase`: storage, InfiniBand), crashes
(:class:`Crash`) and notes. :func:`simulate` plays it forward optimizer step by optimizer step
for every rank; :func:`generate` writes the bundle (DESIGN.md §4) with the writer of
:mod:`perfkit.sim.bundle`. The same spec and seed give the same bytes.

Physics of one step (every rank ``r`` of ``N``; seconds)::

    compute_r   = tokens_r * F_tok * recompute / (peak_flops * mfu)          # PaLM App. B:
                  F_tok = 6 * params + 12 * layers * hidden * seq_len       # reference §4.1
    data_wait_r = max(0, batch_ready_r - step_start) + h2d                   # DataLoader queue
    comm        = bytes_on_wire / bus_bw + collectives * 2(N-1) * hop_latency
                  bytes_on_wire = 2(N-1)/N * 2*params  (all-reduce of bf16 grads, ZeRO 0-2)
                                = (2*accum+1)(N-1)/N * 2*params  (ZeRO-3/FSDP: all-gather x2, reduce-scatter)
    exposed     = max(0, comm - overlap * compute)    # buckets reduce while backward still runs
    step        = max_r(data_wait_r + compute_r) + exposed       # the collective waits for the slowest
    comm_r      = step - data_wait_r - compute_r       # what train_comm_seconds shows on rank r

* **DataLoader** (per rank): ``num_workers`` processes, each makes one batch in
  ``samples * (cpu_s + files * latency + bytes / stream_bw)``, and the node's storage bandwidth caps
  all workers together. Batch ``b`` is handed to worker ``b mod W`` when batch ``b - W*prefetch``
  is consumed (PyTorch keeps ``prefetch_factor * num_workers`` batches in flight), so prefetch
  hides up to ``prefetch * worker time`` of jitter, and only a supply rate below the consumption
  rate makes the step wait. CPU-bound workers pin their cores (node ``user`` time); workers blocked
  on network storage leave their cores idle with I/O pending (``iowait``) and pull the data
  through ``eth0``. In a synchronous job the slowest rank sets the pace: ranks whose queues are
  full reach the collective first and wait there, so a starved pipeline shows as data wait on the
  laggard (the max over ranks) and as ``train_comm_seconds`` on its peers.
* **Bus bandwidth**: NVLink inside a node; across nodes the node's NICs (``nics * nic_gbps *
  efficiency``, GPUDirect RDMA), divided by the spine oversubscription once the job spans more
  nodes than one leaf switch holds; over ``NET/Socket`` (InfiniBand down at launch) a single
  ``eth0``. NCCL picks its transport when the communicator is created: a job that fell back to
  Socket stays there until relaunched, even after the fabric is back. RDMA bypasses the kernel, so
  all-reduce traffic over IB shows in node-exporter's ``node_infiniband_port_data_*_bytes_total``
  (and ``node_infiniband_state_id``), not in ``node_network_*_bytes_total``; Socket traffic does
  show on ``eth0``. A collective in flight when IB fails errors on the ranks with network peers
  (``NET/IB : Got completion ... error 12``) and hangs on the others until the ProcessGroupNCCL
  watchdog's timeout.
* **GPU state** (dcgm-exporter): ``DCGM_FI_DEV_GPU_UTIL`` is the share of wall time a kernel ran,
  compute *or NCCL* (NCCL kernels spin while they wait for peers: a hung collective reads 100 %);
  ``PIPE_TENSOR_ACTIVE`` follows the compute share only. ``FB_USED`` is the caching allocator's
  reserve: weights + grads + optimizer states (ZeRO, reference §4.2) + the largest activations
  and logits seen so far in the process + CUDA context and NCCL buffers. A step whose peak does not
  fit in the capacity PyTorch reports (79.15 GiB on an H100 80GB) raises CUDA OOM.
* **Loss**: ``L_inf + A * (tokens_seen / 1e9) ** -alpha`` plus batch noise drawn from the data
  order (the same step sees the same batch after a restart), plus a domain offset per shard when
  shuffling is off (periodic oscillation), plus instability when the learning rate exceeds the
  edge of stability or a relaunch jumps to a higher LR without warmup: an AR(1) oscillation and
  spikes that decay over tens of steps. A corrupted batch raises one rank's loss for one step.
* **Restarts**: a relaunch (config change, crash, OOM, collective failure) loses the steps since
  the last checkpoint; counters restart at zero with the process; while a process is down its
  ``train_*`` series are absent and its GPUs idle.

Scrapes every ``scrape_interval_s``: ``train_*`` for every rank of the observed nodes and local
rank 0 of the others; dcgm-exporter and node-exporter for the observed nodes (default: the first).
The node exporter's CPU count is ``Cluster.node_cpus``, a scaled-down host (real 8-GPU hosts have
96-224 threads): the simulator keeps the ratio of DataLoader demand to CPU capacity, not the count,
so bundles stay small (the IB collectors are left out for single-node jobs). Logs are the first node's launcher output (``[rankN]:`` prefixes):
NCCL INFO/WARN, PyTorch ProcessGroupNCCL watchdog, DataLoader and CUDA OOM errors, and rank 0's
periodic step line (:data:`STEP_LINE`).
"""

from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from perfkit.frames import iso
from perfkit.sim.bundle import write_metrics
from perfkit.sim.exporters import SeriesSet
from perfkit.train_exporter import METRICS as TRAIN_METRICS

GIB = float(1 << 30)
MIB = float(1 << 20)
DDP_BUCKET_BYTES = 25 * MIB  # torch DDP's default bucket_cap_mb
H2D_S = 0.004  # pinned host->device copy of a batch
LEAD_S = 60.0  # simulated before t=0 so the first scrape intervals are full
WARM_STEPS = 7_500  # steps a process running before the scenario has already made

#: rank 0's periodic line; a parser can use this regex (groups: step, loss, lr, step_time, data_wait, tps)
STEP_LINE = (
    r"step (?P<step>\d+) \| loss (?P<loss>[-+0-9.naif]+) \| lr (?P<lr>\S+) \| step_time (?P<step_time>[0-9.]+)s"
    r" \| data_wait (?P<data_wait>[0-9.]+)s \| tokens/s (?P<tps>\S+)"
)


# -- the spec ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """What decides FLOPs and memory: parameter count and transformer shape."""

    name: str
    params: float
    layers: int
    hidden: int
    seq_len: int  # tokens per sample (packed sequence, or image + text tokens)
    vocab: int = 128_256


@dataclass(frozen=True)
class StorageProfile:
    latency_s: float  # per file opened and read
    stream_gbs: float  # one reader's throughput, GB/s
    node_cap_gbs: float  # all readers of a node together, GB/s
    network: bool  # reads cross eth0 (and leave cores in iowait)


@dataclass(frozen=True)
class Cluster:
    """The hardware: GPUs, fabric, host CPUs, storage. Defaults: 8x H100 SXM nodes, 8x 400G NDR IB."""

    gpu: str = "NVIDIA H100 80GB HBM3"
    gpus_per_node: int = 8
    peak_tflops: float = 989.4  # dense BF16
    hbm_tbs: float = 3.35
    torch_capacity_gib: float = 79.15  # what torch.cuda reports as total capacity
    fb_total_mib: int = 81559  # DCGM FB_USED + FB_FREE (the rest is FB_RESERVED)
    nvlink_busbw_gbs: float = 360.0  # all-reduce bus bandwidth inside a node
    nics_per_node: int = 8
    nic_gbps: float = 400.0
    ib_efficiency: float = 0.7
    socket_gbps: float = 100.0  # eth0
    socket_efficiency: float = 0.5
    nodes_per_leaf: int = 4
    spine_oversubscription: float = 2.5
    hop_latency_s: float = 4e-6  # per ring hop, IB
    socket_hop_latency_s: float = 40e-6
    node_cpus: int = 32
    usd_per_gpu_hour: float = 2.5
    hostname_prefix: str = "gpu-a"
    storage: dict[str, StorageProfile] = field(
        default_factory=lambda: {
            "local": StorageProfile(1.0e-4, 2.0, 12.0, False),  # node-local NVMe dataset cache
            "network": StorageProfile(5.0e-3, 0.15, 0.07, True),  # shared NFS under the cluster's load
        }
    )


@dataclass(frozen=True)
class Setup:
    """A job's launch configuration and its environment. Changes replace fields (see Change/Phase)."""

    gpus: int = 8
    micro_batch: int = 1  # samples per GPU per micro-step
    grad_accum: int = 1
    zero_stage: int = 3  # 0: DDP; 1-2: optimizer (and gradient) sharding; 3: FSDP
    recompute: str = "none"  # activation checkpointing: none | full
    mfu: float = 0.5  # model-FLOPs utilisation while kernels run
    overlap: float = 0.5  # share of compute time collectives can hide behind
    num_workers: int = 8
    prefetch_factor: int = 2
    packed: bool = True  # sequences packed to seq_len; else padded to the longest in the micro-batch
    length_median: float = 0.3  # unpacked: sample length as a fraction of seq_len (lognormal)
    length_sigma: float = 0.6
    lr: float = 3e-4
    lr_stable: float = 4.5e-4  # above this peak LR the run sits past the edge of stability
    warmup_steps: int = 200  # a launch with a new LR ramps to it over this many steps (0: jumps)
    shuffle: bool = True
    sample_cpu_s: float = 0.002  # core-seconds to decode/tokenize/augment one sample
    sample_files: int = 1
    sample_bytes: float = 32e3
    # environment (Phase changes these under a running job)
    storage: str = "local"
    ib_up: bool = True


@dataclass(frozen=True)
class Change:
    """At ``at_s`` the job is changed (and, by default, relaunched from its last checkpoint)."""

    at_s: float
    kind: str  # deploy | config | scale | rollback
    detail: str
    version: str = ""
    set: dict[str, Any] = field(default_factory=dict)  # Setup field -> new value
    relaunch: bool = True


@dataclass(frozen=True)
class Phase:
    """From ``start_s`` to ``end_s`` the environment differs (no event: the world changed, not the job)."""

    start_s: float
    end_s: float
    set: dict[str, Any] = field(default_factory=dict)  # storage, ib_up


@dataclass(frozen=True)
class Crash:
    """A DataLoader worker of ``rank`` is OOM-killed at ``at_s``; the job dies with it.

    It comes back ``relaunch_after_s`` later (the scheduler's retry), or with the next Change when None.
    """

    at_s: float
    rank: int = 3
    relaunch_after_s: float | None = None


@dataclass(frozen=True)
class LossCurve:
    l_inf: float = 1.55
    a: float = 1.6
    alpha: float = 0.28
    tokens_seen_b: float = 180.0  # billions of tokens before the scenario starts
    noise: float = 0.03  # std of one rank's batch loss around the curve
    domains: tuple[float, ...] = (0.22, -0.34, 0.06, -0.12, 0.18)  # offsets of the data sources
    shard_steps: int = 60  # unshuffled: consecutive steps drawn from one source
    spike_hazard: float = 0.03  # spikes per step at instability 1
    ref_tokens: float = 8192.0  # tokens per rank per step the noise figure is quoted at


@dataclass(frozen=True)
class TrainingSpec:
    id: str
    title: str
    brief: str
    job: str
    model: ModelShape
    start: datetime
    duration_s: float
    baseline: tuple[float, float]
    window: tuple[float, float]
    seed: int
    setup: Setup
    initial_version: str
    cluster: Cluster = field(default_factory=Cluster)
    changes: tuple[Change, ...] = ()
    phases: tuple[Phase, ...] = ()
    crashes: tuple[Crash, ...] = ()
    notes: tuple[tuple[float, str, str], ...] = ()  # (at_s, kind, detail): note/alert events
    bad_batches: tuple[float, ...] = ()  # times of single corrupted batches (one rank's loss jumps)
    loss: LossCurve = field(default_factory=LossCurve)
    start_step: int = 24_000
    ckpt_every: int = 500
    restart_s: float = 120.0  # relaunch to first step: scheduling, NCCL init, checkpoint load
    relaunch_down_s: float = 20.0  # of which no process exists
    oom_retry_s: float = 30.0  # the launcher's delay before it relaunches a crashed job
    nccl_timeout_s: float = 600.0  # ProcessGroupNCCL timeout (Timeout(ms)=600000)
    ib_error_s: float = 30.0  # IB retry exhaustion (NCCL_IB_TIMEOUT=20, retry 7) before the error
    launcher: str = "torchrun"  # torchrun (elastic agent tears ranks down) | srun (hung ranks wait)
    log_every: int = 10
    scrape_interval_s: float = 15.0
    observed_nodes: int = 1
    slo: dict[str, float] = field(default_factory=dict)
    answer: dict[str, Any] = field(default_factory=dict)
    difficulty: str = "medium"

    def at(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)


# -- physics (pure functions; the scenarios and tests use them too) -----------------------------


def flops_per_token(m: ModelShape, seq_len: float | None = None) -> float:
    """Training FLOPs per token, PaLM Appendix B: 6N + 12 L H Q T (H*Q = hidden)."""
    return 6.0 * m.params + 12.0 * m.layers * m.hidden * (m.seq_len if seq_len is None else seq_len)


def memory_components(m: ModelShape, s: Setup, frac: float = 1.0) -> dict[str, float]:
    """Bytes per GPU by component (reference §4.2): ZeRO-sharded model states, activations
    (Korthikanti: 34·s·b·h per layer with FlashAttention, 2·s·b·h with full recompute), fp32
    logits for the loss, CUDA context and NCCL buffers. ``frac``: padded length / seq_len."""
    psi, n, z = m.params, s.gpus, s.zero_stage
    sbh = m.seq_len * frac * s.micro_batch * m.hidden
    if s.recompute == "full":
        act = 2.0 * sbh * m.layers + 34.0 * sbh
    else:
        act = 34.0 * sbh * m.layers
    unsharded = 2 * 2 * 2 * psi / m.layers if z == 3 else 0.0  # FSDP: two layers gathered at once
    return {
        "weights": 2 * psi / (n if z == 3 else 1),
        "grads": 2 * psi / (n if z >= 2 else 1),
        "optimizer": 12 * psi / (n if z >= 1 else 1),
        "activations": act,
        "logits": 4.0 * m.seq_len * frac * s.micro_batch * m.vocab,
        "overhead": 0.75 * GIB + 1.25 * GIB + unsharded,
    }


def state_bytes(m: ModelShape, s: Setup) -> float:
    c = memory_components(m, s)
    return c["weights"] + c["grads"] + c["optimizer"] + c["overhead"]


def peak_bytes(m: ModelShape, s: Setup, frac: float = 1.0) -> float:
    return sum(memory_components(m, s, frac).values())


def compute_seconds(m: ModelShape, s: Setup, c: Cluster, frac: float = 1.0) -> float:
    tokens = s.micro_batch * s.grad_accum * m.seq_len * frac
    rf = 4.0 / 3.0 if s.recompute == "full" else 1.0
    flops = tokens * flops_per_token(m, m.seq_len * frac) * rf
    optimizer = 3.0 * (memory_components(m, s)["optimizer"] + 4 * m.params / s.gpus) / (c.hbm_tbs * 1e12)
    return flops / (c.peak_tflops * 1e12 * s.mfu) + optimizer


def nodes_of(s: Setup, c: Cluster) -> int:
    return max(1, math.ceil(s.gpus / c.gpus_per_node))


def comm_bytes(m: ModelShape, s: Setup) -> float:
    """Bytes each rank sends per optimizer step (= each node's inter-node traffic with ring collectives)."""
    n = s.gpus
    if n <= 1:
        return 0.0
    grad = 2.0 * m.params  # bf16
    rounds = (2 * s.grad_accum + 1) if s.zero_stage == 3 else 2
    return rounds * (n - 1) / n * grad


def bus_bandwidth(s: Setup, c: Cluster, transport: str) -> float:
    """Bytes/s of the collective's bus bandwidth for ``transport`` (NVLink, IB or Socket)."""
    nodes = nodes_of(s, c)
    nvlink = c.nvlink_busbw_gbs * 1e9
    if nodes == 1 or transport == "NVLink":
        return nvlink
    if transport == "Socket":
        net = c.socket_gbps / 8 * 1e9 * c.socket_efficiency
    else:
        net = c.nics_per_node * c.nic_gbps / 8 * 1e9 * c.ib_efficiency
        if nodes > c.nodes_per_leaf:
            net /= c.spine_oversubscription
    return min(nvlink, net)


def comm_seconds(m: ModelShape, s: Setup, c: Cluster, transport: str) -> float:
    n = s.gpus
    if n <= 1:
        return 0.0
    if s.zero_stage == 3:
        collectives = (2 * s.grad_accum + 1) * m.layers
    else:
        collectives = math.ceil(2.0 * m.params / DDP_BUCKET_BYTES)
    hop = c.socket_hop_latency_s if transport == "Socket" else c.hop_latency_s
    if nodes_of(s, c) == 1:
        hop = 1e-6
    return comm_bytes(m, s) / bus_bandwidth(s, c, transport) + collectives * 2 * (n - 1) * hop


def transport_of(s: Setup, c: Cluster) -> str:
    """The transport NCCL picks at communicator creation."""
    if nodes_of(s, c) == 1:
        return "NVLink"
    return "IB" if s.ib_up else "Socket"


def batch_seconds(m: ModelShape, s: Setup, c: Cluster) -> tuple[float, float]:
    """(seconds one worker needs for one batch, of which CPU core-seconds)."""
    prof = c.storage[s.storage]
    samples = s.micro_batch * s.grad_accum
    cpu = samples * s.sample_cpu_s
    io = samples * (s.sample_files * prof.latency_s + s.sample_bytes / (prof.stream_gbs * 1e9))
    ranks = min(s.gpus, c.gpus_per_node)
    floor = max(s.num_workers, 1) * ranks * samples * s.sample_bytes / (prof.node_cap_gbs * 1e9)
    return max(cpu + io, floor), cpu


def step_budget(m: ModelShape, s: Setup, c: Cluster, transport: str | None = None) -> dict[str, float]:
    """Steady-state expectation of one step (no jitter): compute, comm, exposed comm, data wait, shares."""
    transport = transport or transport_of(s, c)
    comp = compute_seconds(m, s, c)
    comm = comm_seconds(m, s, c, transport)
    exposed = max(0.0, comm - s.overlap * comp)
    per_batch, _ = batch_seconds(m, s, c)
    supply = per_batch / max(s.num_workers, 1) if s.num_workers else per_batch
    wait = max(0.0, supply - comp - exposed) + H2D_S if s.num_workers else per_batch + H2D_S
    step = wait + comp + exposed
    tokens = s.micro_batch * s.grad_accum * m.seq_len
    return {
        "compute_s": comp,
        "comm_s": comm,
        "exposed_comm_s": exposed,
        "data_wait_s": wait,
        "step_s": step,
        "comm_share": exposed / step,
        "data_wait_share": wait / step,
        "tokens_per_s_per_gpu": tokens / step,
        "mfu": tokens * flops_per_token(m) / step / (c.peak_tflops * 1e12),
        "peak_gib": peak_bytes(m, s) / GIB,
    }


# -- the simulation -----------------------------------------------------------------------------------


@dataclass
class Proc:
    """One launch of the job: every rank's process from launch to exit."""

    idx: int
    setup: Setup
    n: int
    transport: str
    t_launch: float  # processes exist from here (loading the checkpoint)
    t_first: float  # the first step may start
    t_exit: np.ndarray  # per rank; inf while alive
    states: float  # bytes of model states + overhead after loading
    pid0: int
    first_step: int
    worker_free: np.ndarray
    ring: np.ndarray
    loader_t0: float
    lr_from: float = 0.0  # the LR the previous launch ran at (a new LR is ramped from it)
    warm: bool = False  # running since before the scenario
    batches: int = 0
    hang: tuple[float, float] | None = None  # a collective that never completes: (start, end)


@dataclass
class TrainingRun:
    """What happened, step by step (arrays: steps x ranks, NaN where a rank did not exist)."""

    spec: TrainingSpec
    t_start: np.ndarray
    t_end: np.ndarray
    step: np.ndarray
    proc: np.ndarray
    wait: np.ndarray
    compute: np.ndarray
    comm: np.ndarray
    loss: np.ndarray  # per-rank (local) loss
    loss_global: np.ndarray
    lr: np.ndarray
    tokens: np.ndarray
    samples: np.ndarray
    peak: np.ndarray
    node: dict[str, np.ndarray]  # per-step amounts on node 0 (core-s, bytes)
    procs: list[Proc]
    segments: list[tuple[float, float, dict[str, float]]]  # startup/hang amounts on node 0
    logs: list[tuple[float, str]]

    def shares(self, t0: float, t1: float) -> dict[str, float]:
        """Mean shares of step time over steps that start in [t0, t1) (all ranks)."""
        sel = (self.t_start >= t0) & (self.t_start < t1)
        dur = (self.t_end - self.t_start)[sel]
        n = np.sum(~np.isnan(self.wait[sel]), axis=1)
        tokens = np.nansum(self.tokens[sel], axis=1)
        return {
            "steps": int(sel.sum()),
            "step_s": float(np.mean(dur)),
            "data_wait_share": float(np.nanmean(self.wait[sel]) / np.mean(dur)),
            "comm_share": float(np.nanmean(self.comm[sel]) / np.mean(dur)),
            "compute_share": float(np.nanmean(self.compute[sel]) / np.mean(dur)),
            "tokens_per_s_per_gpu": float(np.sum(tokens) / np.sum(dur) / np.mean(n)),
            "loss_mean": float(np.mean(self.loss_global[sel])),
        }


class _Sim:
    def __init__(self, spec: TrainingSpec) -> None:
        self.spec = spec
        self.c = spec.cluster
        self.m = spec.model
        self.rng = np.random.default_rng(spec.seed)
        gpus = [spec.setup.gpus, *(ch.set.get("gpus", 0) for ch in spec.changes)]
        self.nmax = int(max(gpus))
        self.gpn = self.c.gpus_per_node
        self.procs: list[Proc] = []
        self.rows: list[dict[str, Any]] = []
        self.segments: list[tuple[float, float, dict[str, float]]] = []
        self.logs: list[tuple[float, str]] = []
        self.inst_x = 0.0  # AR(1) oscillation state
        self.spikes: list[tuple[int, float]] = []  # (step it started, amplitude)
        self.bad = sorted(spec.bad_batches)
        self.tps_window: list[tuple[float, float]] = []

    # -- helpers --------------------------------------------------------------------------------

    def env(self, job: Setup, t: float) -> Setup:
        for ph in self.spec.phases:
            if ph.start_s <= t < ph.end_s:
                job = replace(job, **ph.set)
        return job

    def host(self, node: int) -> str:
        return f"{self.c.hostname_prefix}{node + 1:02d}"

    def log(self, t: float, line: str) -> None:
        self.logs.append((t, line))

    def stamp(self, t: float, kind: str) -> str:
        dt = self.spec.at(t)
        if kind == "glog":
            return f"{dt:%m%d %H:%M:%S}.{dt.microsecond:06d}"
        if kind == "nccl":
            return f"[{dt:%Y-%m-%d %H:%M:%S}]"
        return f"{dt:%Y-%m-%d %H:%M:%S},{dt.microsecond // 1000:03d}"

    def pylog(self, t: float, rank: int, level: str, where: str, msg: str) -> None:
        self.log(t, f"[rank{rank}]:[{self.stamp(t, 'py')}] [{level}] [{where}] {msg}")

    # -- launches ---------------------------------------------------------------------------------

    def launch(self, job: Setup, t_launch: float, t_first: float, step: int, warm: bool) -> Proc:
        env = self.env(job, max(t_launch, 0.0))
        n = job.gpus
        w = max(job.num_workers, 1)
        ring_len = max(job.num_workers * job.prefetch_factor, 1)
        proc = Proc(
            idx=len(self.procs),
            setup=job,
            n=n,
            transport=transport_of(env, self.c),
            t_launch=t_launch,
            t_first=t_first,
            t_exit=np.full(n, np.inf),
            states=state_bytes(self.m, job),
            pid0=41_200 + 211 * len(self.procs) + int(self.rng.integers(0, 90)),
            first_step=step,
            worker_free=np.full((n, w), -1e9 if warm else t_first - 1.0),
            ring=np.full((n, ring_len), -1e9 if warm else t_first - 1.0),
            loader_t0=-1e9 if warm else t_first - 1.0,
            lr_from=self.procs[-1].setup.lr if self.procs else job.lr,
        )
        if warm:
            proc.first_step = step - WARM_STEPS  # long past any warmup
            proc.warm = True
        self.procs.append(proc)
        self.tps_window = []
        if t_first > t_launch:
            self.segments.append((t_launch, t_first, {"main_user": 0.6 * min(n, self.gpn)}))
        self.nccl_init(proc, env, t_launch + min(8.0, 0.3 * (t_first - t_launch)))
        return proc

    def nccl_init(self, proc: Proc, env: Setup, t: float) -> None:
        """NCCL_DEBUG=INFO init lines of the first node's ranks (reference §5.1 formats)."""
        sp, c = self.spec, self.c
        n, host, tr = proc.n, self.host(0), proc.transport
        ip = "10.42.0.11"
        comm_id = int(self.rng.integers(1 << 40, 1 << 62))
        self.log(t - 2.0, f"[{self.stamp(t - 2.0, 'py')}] launcher: starting {n} ranks of {sp.job}")
        for lr in range(min(n, self.gpn)):
            r = lr
            pid = proc.pid0 + lr
            tid = pid + 61
            head = f"[rank{r}]:{host}:{pid}:{pid} [{lr}] NCCL INFO "
            headt = f"[rank{r}]:{host}:{pid}:{tid} [{lr}] NCCL INFO "
            self.log(t, head + f"Bootstrap : Using eth0:{ip}<0>")
            if r == 0:
                self.log(t, head + "NCCL version 2.21.5+cuda12.4")
            if tr == "Socket":
                self.log(t, headt + "NET/IB : No device found.")
                self.log(t, headt + f"NET/Socket : Using [0]eth0:{ip}<0>")
                self.log(t, headt + "Using network Socket")
            else:
                devs = " ".join(f"[{i}]mlx5_{i}:1/IB" for i in range(c.nics_per_node))
                self.log(t, headt + f"NET/IB : Using {devs} [RO]; OOB eth0:{ip}<0>")
                self.log(t, headt + "Using network IB")
            busid = 0x18000 + 0x11000 * lr
            ptr = 0x55D1C8A00000 + 0x1F0000 * lr + proc.idx * 0x100
            self.log(
                t,
                headt + f"comm 0x{ptr:x} rank {r} nranks {n} cudaDev {lr} nvmlDev {lr} busId {busid:x} "
                f"commId 0x{comm_id:x} - Init START",
            )
            if r == 0:
                order = " ".join(f"{i:3d}" for i in range(n))
                for ch in range(2):
                    self.log(t, headt + f"Channel {ch:02d}/02 : {order}")
            prev, nxt = (r - 1) % n, (r + 1) % n
            net = {"IB": f"NET/IB/{lr}/GDRDMA", "Socket": "NET/Socket/0"}.get(tr)
            for ch in range(2):
                if lr == 0 and n > self.gpn and net:
                    self.log(
                        t,
                        headt
                        + f"Channel {ch:02d}/0 : {prev}[{prev % self.gpn}] -> {r}[{lr}] [receive] via {net}",
                    )
                if lr == self.gpn - 1 and n > self.gpn and net:
                    self.log(
                        t,
                        headt + f"Channel {ch:02d}/0 : {r}[{lr}] -> {nxt}[{nxt % self.gpn}] [send] via {net}",
                    )
                else:
                    self.log(
                        t,
                        headt
                        + f"Channel {ch:02d}/0 : {r}[{lr}] -> {nxt}[{nxt % self.gpn}] via P2P/CUMEM/read",
                    )
            self.log(t + 1.2, headt + "Connected all rings")
            self.log(
                t + 1.3,
                headt + f"comm 0x{ptr:x} rank {r} nranks {n} cudaDev {lr} nvmlDev {lr} busId {busid:x} "
                f"commId 0x{comm_id:x} - Init COMPLETE",
            )

    def resume_step(self, step: int) -> int:
        return (step // self.spec.ckpt_every) * self.spec.ckpt_every

    def stop(self, proc: Proc, t: float, why: str) -> None:
        proc.t_exit = np.minimum(proc.t_exit, t)
        if why == "change":
            for lr in range(min(proc.n, self.gpn)):
                self.log(
                    t,
                    f"W{self.stamp(t, 'glog')} {proc.pid0 - 40} torch/distributed/elastic/agent/server/api.py:719] "
                    f"Sending process {proc.pid0 + lr} closing signal SIGTERM",
                )

    # -- one step ---------------------------------------------------------------------------------

    def data_rng(self, step: int) -> np.random.Generator:
        return np.random.default_rng([self.spec.seed, 1_000_003, step])

    def loader(self, proc: Proc, env: Setup, t: float) -> tuple[np.ndarray, float, float]:
        """Every rank's wait for its next batch; (waits, cpu core-s per batch, io worker-s per batch)."""
        n = proc.n
        per_batch, cpu = batch_seconds(self.m, env, self.c)
        jitter = self.rng.lognormal(0.0, 0.15, n)
        job = proc.setup
        b = proc.batches
        if job.num_workers == 0:
            wait = per_batch * jitter + H2D_S
        else:
            w = b % job.num_workers
            q = job.num_workers * job.prefetch_factor
            slot = b % q
            dispatch = proc.ring[:, slot] if b >= q else np.full(n, proc.loader_t0)
            start = np.maximum(proc.worker_free[:, w], dispatch)
            finish = start + per_batch * jitter
            proc.worker_free[:, w] = finish
            wait = np.maximum(0.0, finish - t) + H2D_S
            proc.ring[:, slot] = t + wait
        proc.batches += 1
        return wait, cpu, per_batch - cpu

    def lengths(self, env: Setup, step: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per rank, as fractions of seq_len: (largest padded micro-batch, mean padded, mean real length).

        Packed sequences are always full; unpacked micro-batches are padded to their longest sample.
        """
        if env.packed:
            one = np.ones(n)
            return one, one, one
        g = np.random.default_rng([self.spec.seed, 2_000_003, step])
        draws = np.minimum(
            1.0,
            g.lognormal(math.log(env.length_median), env.length_sigma, (n, env.grad_accum, env.micro_batch)),
        )
        padded = draws.max(axis=2)
        return padded.max(axis=1), padded.mean(axis=1), draws.mean(axis=(1, 2))

    def loss(self, env: Setup, proc: Proc, step: int, n: int, t: float) -> tuple[np.ndarray, float]:
        sp, lc = self.spec, self.spec.loss
        g = self.data_rng(step)
        tokens_step = env.gpus * env.micro_batch * env.grad_accum * self.m.seq_len
        seen = lc.tokens_seen_b + (step - sp.start_step) * tokens_step / 1e9
        base = lc.l_inf + lc.a * max(seen, 1.0) ** (-lc.alpha)
        k = step - proc.first_step
        lr = env.lr
        if env.warmup_steps > 0 and k < env.warmup_steps:
            lr = proc.lr_from + (env.lr - proc.lr_from) * (k + 1) / env.warmup_steps
        level = max(0.0, lr / env.lr_stable - 1.0) * 2.0
        if env.warmup_steps == 0 and env.lr > proc.lr_from:
            # an abrupt LR jump: Adam's moments were tuned to the old step size
            level += 0.8 * (env.lr / proc.lr_from - 1.0) * math.exp(-k / 120.0)
        # instability: an AR(1) oscillation and spikes that decay over tens of steps
        self.inst_x = 0.93 * self.inst_x + self.rng.standard_normal() * 0.02 * level
        if level > 0 and self.rng.random() < lc.spike_hazard * level**1.5:
            self.spikes.append((step, base * self.rng.uniform(0.05, 0.3) * min(1.0, level)))
        self.spikes = [(s0, a) for s0, a in self.spikes if step - s0 < 200 and step >= s0]
        spike = sum(a * math.exp(-(step - s0) / 18.0) for s0, a in self.spikes)
        drift = 0.05 * level
        # data order: a shuffled batch mixes every source; unshuffled steps walk shard by shard
        dom = np.asarray(lc.domains)
        if env.shuffle:
            order = 0.0
        else:
            shard = step // lc.shard_steps  # shards are read in name order: sources take turns
            d = shard % dom.size
            within = step - shard * lc.shard_steps
            order = dom[d] + 0.12 * math.exp(-within / 8.0) - 0.04 * (1 - math.exp(-within / 25.0))
        noise_scale = lc.noise * math.sqrt(lc.ref_tokens / max(tokens_step / env.gpus, 1.0))
        local = base + drift + order + spike + self.inst_x + g.standard_normal(n) * noise_scale
        while self.bad and self.bad[0] <= t:
            self.bad.pop(0)
            local[int(g.integers(0, n))] += base * 2.6  # a corrupted batch on one rank ...
            self.spikes.append((step + 1, base * 0.15))  # ... and the clipped update it caused decays
        return local, lr

    def step(self, proc: Proc, env: Setup, t: float, step: int) -> dict[str, Any]:
        m, c, n = self.m, self.c, proc.n
        wait, cpu_batch, io_batch = self.loader(proc, env, t)
        frac, mean_pad, real = self.lengths(env, step, n)
        if env.packed:
            comp = np.full(n, compute_seconds(m, env, c))
        else:
            comp = np.array([compute_seconds(m, env, c, float(f)) for f in mean_pad])
        comp = comp * (1.0 + 0.008 * self.rng.standard_normal(n))
        arrive = t + wait + comp
        comm_s = comm_seconds(m, env, c, proc.transport) * (1.0 + 0.03 * self.rng.standard_normal())
        exposed = max(0.0, comm_s - env.overlap * float(np.mean(comp)))
        peak = np.array([peak_bytes(m, env, float(f)) for f in frac])
        cap = c.torch_capacity_gib * GIB
        out: dict[str, Any] = {"wait": wait, "compute": comp, "frac": frac, "real": real, "peak": peak}
        if np.any(peak > cap):
            r = int(np.argmax(peak))
            out["kind"] = "oom"
            out["rank"] = r
            out["t_fail"] = float(t + wait[r] + 0.55 * comp[r])
            return out
        if proc.transport == "IB" and not env.ib_up:
            out["kind"] = "net_fail"
            out["t_hang"] = float(arrive.max())
            return out
        t_end = float(arrive.max() + exposed)
        out.update(kind="ok", t_end=t_end, comm=t_end - arrive, cpu_batch=cpu_batch, io_batch=io_batch)
        return out

    # -- failures -----------------------------------------------------------------------------------

    def oom_logs(self, proc: Proc, out: dict[str, Any], env: Setup) -> None:
        r = out["rank"]
        if r >= self.gpn:
            r = r % self.gpn  # the first node's log shows the torn-down ranks; show a local OOM
        t = out["t_fail"]
        cap = self.c.torch_capacity_gib * GIB
        comp = memory_components(self.m, env, float(out["frac"][r]))
        need = sum(comp.values())
        alloc = comp["logits"] if comp["logits"] > 0.5 * GIB else comp["activations"] / self.m.layers
        in_use = min(cap - 0.35 * GIB, need - alloc + 0.4 * GIB)
        free = cap - in_use
        if alloc <= free:
            alloc = free + 0.5 * GIB
        reserved_unalloc = 0.02 * in_use
        by_torch = in_use - comp["overhead"] + 1.25 * GIB - reserved_unalloc - 0.55 * GIB
        lines = [
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 418, in <module>',
            "    main()",
            '  File "/workspace/train.py", line 377, in main',
            "    loss = model(batch).loss",
            '  File "/usr/local/lib/python3.11/site-packages/torch/nn/functional.py", line 3494, in cross_entropy',
            "    return torch._C._nn.cross_entropy_loss(",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            f"{_size(alloc)}. GPU {r} has a total capacity of {_size(cap)} of which {_size(free)} is free. "
            f"Including non-PyTorch memory, this process has {_size(in_use)} memory in use. Of the allocated "
            f"memory {_size(by_torch)} is allocated by PyTorch, and {_size(reserved_unalloc)} is reserved by "
            "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
            "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        ]
        for line in lines:
            self.log(t, f"[rank{r}]: {line}")
        agent = proc.pid0 - 40
        for lr in range(min(proc.n, self.gpn)):
            if lr != r:
                self.log(
                    t + 1.0,
                    f"W{self.stamp(t + 1.0, 'glog')} {agent} torch/distributed/elastic/multiprocessing/api.py:897] "
                    f"Sending process {proc.pid0 + lr} closing signal SIGTERM",
                )
        self.log(
            t + 2.0,
            f"E{self.stamp(t + 2.0, 'glog')} {agent} torch/distributed/elastic/multiprocessing/api.py:869] "
            f"failed (exitcode: 1) local_rank: {r} (pid: {proc.pid0 + r}) of binary: /usr/bin/python3",
        )
        self.log(t + 2.0, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ")

    def crash_logs(self, proc: Proc, t: float, rank: int) -> None:
        r = rank % self.gpn
        pid = proc.pid0 + 900 + 7 * r
        lines = [
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 366, in main',
            "    for step, batch in enumerate(loader, start=start_step):",
            '  File "/usr/local/lib/python3.11/site-packages/torch/utils/data/_utils/signal_handling.py", '
            "line 73, in handler",
            "    _error_if_any_worker_fails()",
            f"RuntimeError: DataLoader worker (pid {pid}) is killed by signal: Killed. ",
        ]
        for line in lines:
            self.log(t, f"[rank{r}]: {line}")
        agent = proc.pid0 - 40
        self.log(
            t + 1.5,
            f"E{self.stamp(t + 1.5, 'glog')} {agent} torch/distributed/elastic/multiprocessing/api.py:869] "
            f"failed (exitcode: 1) local_rank: {r} (pid: {proc.pid0 + r}) of binary: /usr/bin/python3",
        )
        self.log(t + 1.5, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ")

    def net_fail(self, proc: Proc, t_hang: float, seq: int, t_stop: float) -> float:
        """IB gone under a running communicator: the ranks with NET connections get completion
        errors and die; the others spin in the collective until the watchdog's timeout. Returns exit time."""
        sp, host = self.spec, self.host(0)
        n = proc.n
        t_err = t_hang + sp.ib_error_s
        if proc.setup.zero_stage == 3:
            op, numel_in = "_REDUCE_SCATTER_BASE", int(self.m.params / self.m.layers)
            numel_out = numel_in // n
        else:
            op, numel_in = "ALLREDUCE", int(DDP_BUCKET_BYTES / 2)
            numel_out = numel_in
        net_ranks = [0, self.gpn - 1] if n > self.gpn else []
        exit_t = np.full(n, t_hang + sp.nccl_timeout_s + 0.12)
        for lr in net_ranks:
            if t_err >= t_stop:
                break
            pid, tid = proc.pid0 + lr, proc.pid0 + lr + 64
            peer = f"10.42.{1 if lr else (n - 1) // self.gpn}.11<{48133 + 17 * lr}>"
            warn = (
                f"NET/IB : Got completion from peer {peer} with error 12, opcode 0, len 0, vendor err 129 "
                f"({'Recv' if lr == 0 else 'Send'})"
            )
            self.log(
                t_err,
                f"[rank{lr}]:{self.stamp(t_err, 'nccl')} {host}:{pid}:{tid} [{lr}] transport/net_ib.cc:1696 "
                f"NCCL WARN {warn}",
            )
            for where in (
                "transport/net.cc:1134 -> 6",
                "proxy.cc:679 -> 6",
                "proxy.cc:858 -> 6 [Proxy Thread]",
            ):
                self.log(t_err, f"[rank{lr}]:{host}:{pid}:{tid} [{lr}] NCCL INFO {where}")
            for line in (
                "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
                "NCCLUtils.hpp:268, remote process exited or there was a network error, NCCL version 2.21.5",
                "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
                "prematurely.",
                "Last error:",
                warn,
            ):
                self.log(t_err + 0.4, f"[rank{lr}]: {line}")
            exit_t[lr] = t_err + 0.5
        if sp.launcher == "srun" and net_ranks and t_err < t_stop:
            self.log(t_err + 1.0, f"srun: error: {host}: tasks {_tasks(net_ranks)}: Exited with exit code 1")
        if sp.launcher == "torchrun" and net_ranks and t_err < t_stop:
            exit_t[:] = np.minimum(exit_t, t_err + 2.0)  # the elastic agent tears the group down
        t_to = t_hang + sp.nccl_timeout_s
        if t_to < t_stop:
            for lr in range(min(n, self.gpn)):
                if exit_t[lr] <= t_to:
                    continue
                ts = t_to + 0.001 * (37 + 13 * lr)
                head = f"[rank{lr}]:[E{self.stamp(ts, 'glog')} ProcessGroupNCCL.cpp:616] "
                ran = int(round((ts - t_hang) * 1000))
                self.log(
                    ts,
                    head
                    + f"[Rank {lr}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
                    f"OpType={op}, NumelIn={numel_in}, NumelOut={numel_out}, "
                    f"Timeout(ms)={int(sp.nccl_timeout_s * 1000)}) ran for {ran} milliseconds before timing out.",
                )
                self.log(
                    ts,
                    f"[rank{lr}]:[E{self.stamp(ts, 'glog')} ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID "
                    f"0(default_pg) Rank {lr}]  failure detected by watchdog at work sequence id: {seq} PG status: "
                    f"last enqueued work: {seq}, last completed work: {seq - 1}",
                )
                self.log(
                    ts,
                    f"[rank{lr}]:[E{self.stamp(ts, 'glog')} ProcessGroupNCCL.cpp:630] [Rank {lr}] Some NCCL "
                    "operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
                    "subsequent GPU operations might run on corrupted/incomplete data.",
                )
            if sp.launcher == "srun":
                hung = [lr for lr in range(min(n, self.gpn)) if exit_t[lr] > t_to]
                if hung:
                    self.log(t_to + 1.0, f"srun: error: {host}: tasks {_tasks(hung)}: Aborted (core dumped)")
        proc.hang = (t_hang, float(np.max(np.minimum(exit_t, t_stop))))
        proc.t_exit = np.minimum(exit_t, t_stop)
        return float(np.max(proc.t_exit))

    # -- the loop ------------------------------------------------------------------------------------

    def run(self) -> TrainingRun:
        sp = self.spec
        end = sp.duration_s
        job = sp.setup
        changes = sorted(sp.changes, key=lambda ch: ch.at_s)
        crashes = sorted(sp.crashes, key=lambda cr: cr.at_s)
        ci = ki = 0
        t = -LEAD_S  # the job ran before the scenario: start early so the first scrapes see steady state
        step = sp.start_step
        proc: Proc | None = self.launch(job, t - sp.restart_s, t, step, warm=True)
        seq = 48_000 + int(self.rng.integers(0, 2000))
        while t < end:
            nxt_change = changes[ci].at_s if ci < len(changes) else math.inf
            nxt_crash = crashes[ki].at_s if ki < len(crashes) else math.inf
            nxt = min(nxt_change, nxt_crash)
            if proc is None:  # down until the next change relaunches it
                if nxt_change == math.inf:
                    break
                t = max(t, nxt_change)
            if t >= nxt_crash and nxt_crash <= nxt_change:
                cr = crashes[ki]
                ki += 1
                if proc is not None:
                    self.crash_logs(proc, cr.at_s, cr.rank)
                    self.stop(proc, cr.at_s + 1.5, "crash")
                    proc = None
                    step = self.resume_step(step)
                    if cr.relaunch_after_s is not None:
                        t0 = cr.at_s + cr.relaunch_after_s
                        proc = self.launch(job, t0, t0 + sp.restart_s - sp.relaunch_down_s, step, warm=False)
                        t = proc.t_first
                continue
            if t >= nxt_change:
                ch = changes[ci]
                ci += 1
                job = replace(job, **ch.set)
                if ch.relaunch or proc is None:
                    if proc is not None:
                        self.stop(proc, ch.at_s, "change")
                    step = self.resume_step(step)
                    t0 = max(t, ch.at_s)
                    proc = self.launch(job, t0 + sp.relaunch_down_s, t0 + sp.restart_s, step, warm=False)
                    t = proc.t_first
                else:
                    proc.setup = job
                continue
            assert proc is not None
            env = self.env(job, t)
            out = self.step(proc, env, t, step)
            if out["kind"] == "ok":
                if out["t_end"] > nxt:  # killed mid-step by the change or crash
                    t = nxt
                    continue
                self.record(proc, env, t, step, out)
                t = out["t_end"]
                step += 1
                seq += 1
                continue
            if out["kind"] == "oom":
                t_fail = out["t_fail"]
                if t_fail > nxt:
                    t = nxt
                    continue
                self.oom_logs(proc, out, env)
                self.stop(proc, t_fail + 2.0, "oom")
                step = self.resume_step(step)
                t0 = t_fail + 2.0 + sp.oom_retry_s
                proc = self.launch(job, t0, t0 + sp.restart_s - sp.relaunch_down_s, step, warm=False)
                t = proc.t_first
                continue
            # net_fail: the collective hangs
            t_exit = self.net_fail(proc, out["t_hang"], seq, nxt)
            if t_exit >= nxt:
                t = nxt
                continue
            step = self.resume_step(step)
            t0 = t_exit + sp.oom_retry_s
            proc = self.launch(job, t0, t0 + sp.restart_s - sp.relaunch_down_s, step, warm=False)
            t = proc.t_first
        if proc is not None:
            proc.t_exit = np.minimum(proc.t_exit, max(end, t) + 3600.0)
        return self.finish()

    def record(self, proc: Proc, env: Setup, t: float, step: int, out: dict[str, Any]) -> None:
        sp, m = self.spec, self.m
        n = proc.n
        loss, lr = self.loss(env, proc, step, n, t)
        samples = np.full(n, float(env.micro_batch * env.grad_accum))
        tokens = samples * m.seq_len * out["real"] * (1.0 if env.packed else 0.96)
        g = min(n, self.gpn)
        prof = self.c.storage[env.storage]
        node_samples = float(samples[:g].sum())
        io_bytes = node_samples * env.sample_bytes if prof.network else 0.0
        wire = comm_bytes(m, env) if nodes_of(env, self.c) > 1 else 0.0
        row = {
            "t_start": t,
            "t_end": out["t_end"],
            "step": step,
            "proc": proc.idx,
            "wait": out["wait"],
            "compute": out["compute"],
            "comm": out["comm"],
            "loss": loss,
            "loss_global": float(np.mean(loss)),
            "lr": lr,
            "tokens": tokens,
            "samples": samples,
            "peak": out["peak"],
            # node 0, core-seconds and bytes of this step
            "main_user": float(np.sum(out["t_end"] - t - out["wait"][:g])) * 0.92,
            "worker_user": node_samples * env.sample_cpu_s,
            "worker_io": g * out["io_batch"],
            "workers": float(g * max(env.num_workers, 1)),
            "storage_bytes": io_bytes,
            "ib_bytes": wire if proc.transport == "IB" else 0.0,
            "socket_bytes": wire if proc.transport == "Socket" else 0.0,
        }
        self.rows.append(row)
        if step % sp.ckpt_every == 0 and step > proc.first_step:
            shard = 16.0 * m.params * min(n, self.gpn) / n
            write_s = shard / 2.0e9
            self.segments.append((out["t_end"], out["t_end"] + write_s, {"ckpt_bytes": shard}))
            self.pylog(out["t_end"], 0, "INFO", "checkpoint.py:212", f"saved checkpoint step_{step} (async)")
        self.tps_window.append((out["t_end"] - t, float(tokens.sum())))
        if step % sp.log_every == 0 and proc.t_exit[0] > out["t_end"]:
            dur = sum(d for d, _ in self.tps_window)
            tps = sum(k for _, k in self.tps_window) / dur if dur > 0 else 0.0
            mem = float(np.max(out["peak"][:g]) - memory_components(m, env)["overhead"] + 0.5 * GIB) / GIB
            self.pylog(
                out["t_end"],
                0,
                "INFO",
                "train.py:402",
                f"step {step} | loss {float(np.mean(loss)):.4f} | lr {lr:.2e} | step_time "
                f"{out['t_end'] - t:.2f}s | data_wait {float(out['wait'][0]):.2f}s | tokens/s {tps:.2e} | "
                f"mem {mem:.2f}GiB",
            )
            self.tps_window = []

    def finish(self) -> TrainingRun:
        rows, nmax = self.rows, self.nmax

        def mat(key: str) -> np.ndarray:
            outm = np.full((len(rows), nmax), np.nan)
            for i, r in enumerate(rows):
                v = r[key]
                outm[i, : v.size] = v
            return outm

        def vec(key: str) -> np.ndarray:
            return np.asarray([r[key] for r in rows], dtype=float)

        node_keys = (
            "main_user",
            "worker_user",
            "worker_io",
            "workers",
            "storage_bytes",
            "ib_bytes",
            "socket_bytes",
        )
        return TrainingRun(
            spec=self.spec,
            t_start=vec("t_start"),
            t_end=vec("t_end"),
            step=vec("step").astype(np.int64),
            proc=vec("proc").astype(np.int64),
            wait=mat("wait"),
            compute=mat("compute"),
            comm=mat("comm"),
            loss=mat("loss"),
            loss_global=vec("loss_global"),
            lr=vec("lr"),
            tokens=mat("tokens"),
            samples=mat("samples"),
            peak=mat("peak"),
            node={k: vec(k) for k in node_keys},
            procs=self.procs,
            segments=self.segments,
            logs=sorted(self.logs, key=lambda x: x[0]),
        )


def simulate(spec: TrainingSpec) -> TrainingRun:
    """Play ``spec`` forward step by step (deterministic for its seed)."""
    return _Sim(spec).run()


def _tasks(ranks: list[int]) -> str:
    """srun's task list: 1-6 for a run, 0,7 otherwise."""
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(str(r) for r in ranks)


def _size(b: float) -> str:
    """PyTorch's format_size: bytes, KiB, MiB or GiB with two decimals."""
    if b < 1024:
        return f"{int(b)} bytes"
    if b < MIB:
        return f"{b / 1024:.2f} KiB"
    if b < GIB:
        return f"{b / MIB:.2f} MiB"
    return f"{b / GIB:.2f} GiB"


# -- scrapes -------------------------------------------------------------------------------------------


def _cum(starts: np.ndarray, ends: np.ndarray, amounts: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Cumulative amount at each time in ``at``, each amount spread evenly over its [start, end)."""
    if starts.size == 0:
        return np.zeros_like(at)
    order = np.argsort(starts, kind="stable")
    s, e, a = starts[order], np.maximum(ends[order], starts[order]), amounts[order]
    done = np.concatenate([[0.0], np.cumsum(a)])
    # sorted, non-overlapping segments (the steps): a piecewise-linear interpolation is exact
    xp = np.empty(2 * s.size)
    fp = np.empty(2 * s.size)
    xp[0::2], xp[1::2] = s, e
    fp[0::2], fp[1::2] = done[:-1], done[1:]
    if np.all(np.diff(xp) >= 0):
        return np.interp(at, xp, fp, left=0.0, right=done[-1])
    total = np.zeros_like(at)  # overlapping (startups, checkpoint writes): integrate piece by piece
    for si, ei, ai in zip(s, e, a, strict=True):
        width = ei - si
        total += ai * (np.clip((at - si) / width, 0.0, 1.0) if width > 0 else (at >= si))
    return total


def _emit(run: TrainingRun) -> tuple[SeriesSet, list[str]]:
    sp, c = run.spec, run.spec.cluster
    rng = np.random.default_rng([sp.seed, 31])
    si = sp.scrape_interval_s
    out = SeriesSet()
    t0 = sp.start.timestamp()
    gpn = c.gpus_per_node
    procs = run.procs
    # when each proc's step rows begin and end
    bounds = {p.idx: np.flatnonzero(run.proc == p.idx) for p in procs}
    cum_tokens = np.zeros_like(run.tokens)
    cum_samples = np.zeros_like(run.samples)
    for p in procs:
        idx = bounds[p.idx]
        if idx.size:
            # a process that was running before the scenario has hours of tokens behind it
            before = WARM_STEPS if p.warm else 0
            cum_tokens[idx] = np.nancumsum(run.tokens[idx], axis=0) + before * run.tokens[idx[0]]
            cum_samples[idx] = np.nancumsum(run.samples[idx], axis=0) + before * run.samples[idx[0]]

    def alive_proc(t: float) -> Proc | None:
        for p in reversed(procs):
            if p.t_launch <= t < float(np.max(p.t_exit)):
                return p
        return None

    # -- train_* ------------------------------------------------------------------------------------
    times = np.arange(0.213, sp.duration_s, si)
    for t in times:
        p = alive_proc(t)
        if p is None:
            continue
        idx = bounds[p.idx]
        k = int(np.searchsorted(run.t_end[idx], t, side="right")) - 1 if idx.size else -1
        if k < 0:
            continue
        row = idx[k]
        ranks = [r for r in range(p.n) if r < gpn * sp.observed_nodes or r % gpn == 0]
        for r in ranks:
            if t >= p.t_exit[r]:
                continue
            labels = {"job": sp.job, "rank": str(r)}
            dur = run.t_end[row] - run.t_start[row]
            vals = {
                "train_step_duration_seconds": round(dur, 4),
                "train_data_wait_seconds": round(float(run.wait[row, r]), 4),
                "train_comm_seconds": round(float(run.comm[row, r]), 4),
                "train_loss": round(float(run.loss[row, r]), 4),
            }
            for name, v in vals.items():
                kind, help_ = TRAIN_METRICS[name]
                out.put(name, kind, help_, name, labels, t0 + t, v)
            for name, cum in (("train_tokens", cum_tokens), ("train_samples", cum_samples)):
                kind, help_ = TRAIN_METRICS[name]
                out.put(
                    f"{name}_total", kind, help_, f"{name}_total", labels, t0 + t, round(float(cum[row, r]))
                )

    # -- dcgm-exporter (observed nodes' GPUs) -------------------------------------------------------------
    times = np.arange(3.107, sp.duration_s, si)
    fb_cap = c.torch_capacity_gib * 1024
    for node in range(sp.observed_nodes):
        host = f"{c.hostname_prefix}{node + 1:02d}"
        for g in range(gpn):
            r = node * gpn + g
            valid = ~np.isnan(run.wait[:, r]) if r < run.wait.shape[1] else np.zeros(run.t_start.size, bool)
            ws = run.t_start[valid] + run.wait[valid, r]
            busy_c = _cum(ws, run.t_end[valid], run.t_end[valid] - ws, times) - _cum(
                ws, run.t_end[valid], run.t_end[valid] - ws, times - si
            )
            comp_c = _cum(ws, ws + run.compute[valid, r], run.compute[valid, r], times) - _cum(
                ws, ws + run.compute[valid, r], run.compute[valid, r], times - si
            )
            spin = np.zeros_like(times)
            for p in procs:
                if p.hang and r < p.n:
                    h0, h1 = p.hang[0], min(p.hang[1], float(p.t_exit[r]))
                    if h1 > h0:
                        spin += np.clip(np.minimum(times, h1) - np.maximum(times - si, h0), 0.0, None)
            busy = np.clip((busy_c + spin) / si, 0.0, 1.0)
            compute = np.clip(comp_c / si, 0.0, 1.0)
            labels = {
                "gpu": str(g),
                "UUID": f"GPU-{sp.seed % (1 << 32):08x}-{node:04x}-4c1e-9a7b-{g:012x}",
                "device": f"nvidia{g}",
                "modelName": c.gpu,
                "Hostname": host,
                "DCGM_FI_DRIVER_VERSION": "570.124.06",
            }
            peaks_rows = np.flatnonzero(valid)
            for i, t in enumerate(times):
                p = alive_proc(t)
                alive = p is not None and r < p.n and t < p.t_exit[r]
                jit = 1.0 + 0.015 * rng.standard_normal()
                if alive:
                    assert p is not None
                    mine = run.proc[peaks_rows] == p.idx
                    # the caching allocator keeps its peak; a long-running process has long reached it
                    sel = peaks_rows[mine if p.warm else mine & (run.t_end[peaks_rows] <= t)]
                    reserved = float(np.max(run.peak[sel, r])) if sel.size else p.states
                    used = min(fb_cap - 180, reserved / MIB * 1.015 + 420)
                else:
                    used = 0.0
                util = round(100 * busy[i] * (jit if busy[i] < 0.985 else 1.0)) if alive else 0
                util = min(100, max(0, util))
                tensor = min(1.0, compute[i] * p.setup.mfu * 1.15 * jit) if alive and p else 0.0
                spin_share = max(0.0, busy[i] - compute[i])
                power = (72 + 560 * compute[i] + 95 * spin_share) * jit if alive else 63 + rng.random()
                vals = [
                    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", util),
                    (
                        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                        "Ratio of time the graphics engine is active.",
                        round(min(1.0, busy[i] * 0.985), 4) if alive else 0.0,
                    ),
                    (
                        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                        "Ratio of cycles the tensor pipe is active.",
                        round(tensor, 4),
                    ),
                    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", round(used)),
                    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", round(fb_cap - used)),
                    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", round(min(power, 699.0), 1)),
                    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", 0),
                ]
                for name, help_, v in vals:
                    out.put(name, "gauge", help_, name, labels, t0 + t, v)

    # -- node-exporter (observed nodes; node 0's physics stands for each) ---------------------------------
    times = np.arange(7.911, sp.duration_s, si)
    seg_s = np.asarray([s for s, _, _ in run.segments], dtype=float)
    seg_e = np.asarray([e for _, e, _ in run.segments], dtype=float)

    def seg(key: str) -> np.ndarray:
        return np.asarray([a.get(key, 0.0) for _, _, a in run.segments], dtype=float)

    def interval(starts, ends, amounts) -> np.ndarray:
        return _cum(starts, ends, amounts, times) - _cum(starts, ends, amounts, times - si)

    ts, te = run.t_start, run.t_end
    main_user = interval(ts, te, run.node["main_user"]) + interval(seg_s, seg_e, seg("main_user"))
    worker_user = interval(ts, te, run.node["worker_user"])
    worker_io = interval(ts, te, run.node["worker_io"])
    workers = np.maximum(interval(ts, te, run.node["workers"] * (te - ts)) / si, 1.0)
    storage = interval(ts, te, run.node["storage_bytes"])
    ib = interval(ts, te, run.node["ib_bytes"])
    sock = interval(ts, te, run.node["socket_bytes"])
    ckpt = interval(seg_s, seg_e, seg("ckpt_bytes"))
    spin_cores = np.zeros_like(times)
    for p in procs:
        if p.hang:
            for r in range(min(p.n, gpn)):
                h0, h1 = p.hang[0], min(p.hang[1], float(p.t_exit[r]))
                if h1 > h0:
                    spin_cores += np.clip(np.minimum(times, h1) - np.maximum(times - si, h0), 0.0, None)
    ncpu = c.node_cpus
    cap = ncpu * si
    multi_node = any(p.n > gpn for p in procs)
    for node in range(sp.observed_nodes):
        cpu_tot = np.zeros((ncpu, 4))  # user, system, iowait, idle
        rx = tx = 0.0
        ib_rx = np.zeros(c.nics_per_node)
        ib_tx = np.zeros(c.nics_per_node)
        instance = f"{c.hostname_prefix}{node + 1:02d}:9100"
        for i, t in enumerate(times):
            p = alive_proc(t)
            user = main_user[i] + worker_user[i] + spin_cores[i] + 0.012 * cap
            system = 0.01 * cap + storage[i] / 1.5e9 + sock[i] / 2.0e9 + ckpt[i] / 4.0e9
            if p is not None:
                system += 0.02 * cap
            user, system = min(user, 0.97 * cap), min(system, 0.3 * cap)
            iowait = min(
                worker_io[i] * (0.9 if storage[i] > 0 else 0.02), max(0.0, cap - user - system) * 0.95
            )
            # CPU-bound workers pin their cores (CFS keeps a busy process on its core)
            duty = worker_user[i] / (workers[i] * si)
            pegged = int(round(workers[i])) if duty > 0.9 and workers[i] < ncpu - 2 else 0
            w = 1.0 + 0.08 * rng.standard_normal(ncpu)
            w = np.clip(w, 0.5, None)
            share = np.zeros((ncpu, 3))
            rest_user = max(0.0, user - pegged * si * 0.985)
            others = ncpu - pegged
            share[:pegged, 0] = si * 0.985
            share[pegged:, 0] = rest_user * w[pegged:] / w[pegged:].sum()
            share[:, 1] = system * w / w.sum()
            share[pegged:, 2] = iowait * w[pegged:] / w[pegged:].sum() if others else 0.0
            share = np.minimum(share, si)
            over = share.sum(axis=1) - si * 0.999
            share[:, 2] -= np.clip(over, 0.0, None)
            share = np.clip(share, 0.0, None)
            # A CPU has si seconds per scrape interval: never more busy time, so idle never goes backwards.
            total = share.sum(axis=1, keepdims=True)
            share = np.where(total > si, share * (si / np.maximum(total, 1e-12)), share)
            cpu_tot[:, :3] += share
            cpu_tot[:, 3] += np.clip(si - share.sum(axis=1), 0.0, None)
            for cpu in range(ncpu):
                for j, mode in enumerate(("user", "system", "iowait", "idle")):
                    out.put(
                        "node_cpu_seconds_total",
                        "counter",
                        "Seconds the CPUs spent in each mode.",
                        "node_cpu_seconds_total",
                        {"cpu": str(cpu), "mode": mode, "instance": instance},
                        t0 + t,
                        round(float(cpu_tot[cpu, j]), 2),
                    )
            rx += 1.6e6 * si + storage[i] + sock[i]
            tx += 0.9e6 * si + sock[i] + ckpt[i]
            for name, v in (
                ("node_network_receive_bytes_total", rx),
                ("node_network_transmit_bytes_total", tx),
            ):
                out.put(
                    name,
                    "counter",
                    "Network device statistic.",
                    name,
                    {"device": "eth0", "instance": instance},
                    t0 + t,
                    round(v),
                )
            env = run.spec.setup
            for ph in sp.phases:
                if ph.start_s <= t < ph.end_s:
                    env = replace(env, **ph.set)
            if not multi_node:  # NCCL stays on NVLink: leave the idle HCAs out (bundle size)
                continue
            ib_rx += ib[i] / c.nics_per_node
            ib_tx += ib[i] / c.nics_per_node
            for d in range(c.nics_per_node):
                labels = {"device": f"mlx5_{d}", "port": "1", "instance": instance}
                out.put(
                    "node_infiniband_port_data_received_bytes_total",
                    "counter",
                    "Number of data octets received on all links",
                    "node_infiniband_port_data_received_bytes_total",
                    labels,
                    t0 + t,
                    round(float(ib_rx[d])),
                )
                out.put(
                    "node_infiniband_port_data_transmitted_bytes_total",
                    "counter",
                    "Number of data octets transmitted on all links",
                    "node_infiniband_port_data_transmitted_bytes_total",
                    labels,
                    t0 + t,
                    round(float(ib_tx[d])),
                )
                out.put(
                    "node_infiniband_state_id",
                    "gauge",
                    "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer)",
                    "node_infiniband_state_id",
                    labels,
                    t0 + t,
                    4 if env.ib_up else 1,
                )
    return out, [line for _, line in run.logs]


# -- the bundle ------------------------------------------------------------------------------------


def compress(spec: TrainingSpec, duration_s: float) -> TrainingSpec:
    """The same story in ``duration_s`` (for tests): times, restarts, timeouts and checkpoints scaled."""
    k = duration_s / spec.duration_s
    return replace(
        spec,
        duration_s=duration_s,
        baseline=(spec.baseline[0] * k, spec.baseline[1] * k),
        window=(spec.window[0] * k, spec.window[1] * k),
        changes=tuple(replace(ch, at_s=ch.at_s * k) for ch in spec.changes),
        phases=tuple(replace(p, start_s=p.start_s * k, end_s=p.end_s * k) for p in spec.phases),
        crashes=tuple(
            replace(
                cr,
                at_s=cr.at_s * k,
                relaunch_after_s=None if cr.relaunch_after_s is None else cr.relaunch_after_s * k,
            )
            for cr in spec.crashes
        ),
        notes=tuple((at * k, kind, detail) for at, kind, detail in spec.notes),
        bad_batches=tuple(t * k for t in spec.bad_batches),
        restart_s=max(6.0, spec.restart_s * k),
        relaunch_down_s=max(2.0, spec.relaunch_down_s * k),
        oom_retry_s=max(2.0, spec.oom_retry_s * k),
        nccl_timeout_s=max(10.0, spec.nccl_timeout_s * k),
        ib_error_s=max(2.0, spec.ib_error_s * k),
        ckpt_every=max(20, int(spec.ckpt_every * k)),
    )


def generate(spec: TrainingSpec, out: Path, *, duration_s: float | None = None) -> dict[str, float]:
    """Simulate ``spec`` and write its bundle into ``out``; ``duration_s`` compresses the story (tests).

    Returns facts: simulate_s, write_s, lines (OpenMetrics), steps, bytes (all files).
    """
    if duration_s is not None and duration_s != spec.duration_s:
        spec = compress(spec, duration_s)
    t_begin = time.perf_counter()
    run = simulate(spec)
    sim_s = time.perf_counter() - t_begin
    series, log_lines = _emit(run)
    out = Path(out)
    (out / "metrics").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    n_lines = write_metrics(out / "metrics", series.values())
    (out / "logs" / "train.log").write_text("\n".join(log_lines) + "\n", encoding="utf-8")
    _write_events(spec, out)
    _write_incident(spec, out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {
        "simulate_s": sim_s,
        "write_s": time.perf_counter() - t_begin - sim_s,
        "lines": n_lines,
        "steps": int(run.t_start.size),
        "bytes": size,
    }


def _write_events(spec: TrainingSpec, out: Path) -> None:
    events = [(0.0, "note", spec.initial_version, f"training job {spec.job} running since before the window")]
    for ch in sorted(spec.changes, key=lambda c: c.at_s):
        events.append((ch.at_s, ch.kind, ch.version, ch.detail))
    events.extend((at, kind, "", detail) for at, kind, detail in spec.notes)
    events.sort(key=lambda e: e[0])
    with (out / "events.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["ts", "kind", "service", "version", "detail"])
        for at, kind, ver, detail in events:
            w.writerow([iso(spec.at(at)), kind, spec.job, ver, detail])


def _write_incident(spec: TrainingSpec, out: Path) -> None:
    gpus = spec.setup.gpus
    for ch in sorted(spec.changes, key=lambda c: c.at_s):
        if ch.at_s <= spec.window[1]:
            gpus = int(ch.set.get("gpus", gpus))
    incident = {
        "id": f"INC-{spec.start:%Y%m%d}-{spec.id}",
        "title": spec.title,
        "service": spec.job,
        "model": spec.model.name,
        "window": {
            "start": iso(spec.at(spec.window[0])),
            "end": iso(spec.at(min(spec.window[1], spec.duration_s))),
        },
        "baseline": {"start": iso(spec.at(spec.baseline[0])), "end": iso(spec.at(spec.baseline[1]))},
        "slo": dict(spec.slo),
        "hardware": {
            "gpu": spec.cluster.gpu,
            "count": gpus,
            "usd_per_gpu_hour": spec.cluster.usd_per_gpu_hour,
        },
        "generator": {
            "scenario": spec.id,
            "seed": spec.seed,
            "note": "simulated by perfkit.sim.training; see perfkit/sim/training.py",
        },
    }
    (out / "incident.yaml").write_text(yaml.safe_dump(incident, sort_keys=False), encoding="utf-8")
    answer = {"scenario": spec.id, "difficulty": spec.difficulty, "brief": spec.brief, **spec.answer}
    (out / "answer.yaml").write_text(
        yaml.safe_dump(answer, sort_keys=False, allow_unicode=True), encoding="utf-8"
    )
