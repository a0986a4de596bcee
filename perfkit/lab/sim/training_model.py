"""The training-job spec: what a simulated data-parallel training incident is made of.

A :class:`TrainingSpec` fixes the model (:class:`ModelShape`), the cluster (:class:`Cluster`),
the job's launch configuration and environment (:class:`Setup`) and the incident's story: changes
that relaunch the job with a new configuration (:class:`Change`: deploy, config, scale, rollback),
changes of the environment under a running job (:class:`Phase`: storage, InfiniBand), crashes
(:class:`Crash`) and notes. :mod:`perfkit.lab.sim.training_physics` says what one step costs,
:mod:`perfkit.lab.sim.training_engine` plays the spec forward and :mod:`perfkit.lab.sim.training`
writes it as a bundle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np

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
    length_full_share: float = 0.0  # unpacked: share of samples at seq_len (longer ones truncated to it)
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
    framework: str = "perfkit"  # whose lines tell it: perfkit (train_* + step line) | megatron | torchtitan | deepspeed | hf
    log_every: int = 10
    scrape_interval_s: float = 15.0
    observed_nodes: int = 1
    slo: dict[str, float] = field(default_factory=dict)
    answer: dict[str, Any] = field(default_factory=dict)
    difficulty: str = "medium"

    def at(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)


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
