"""The physics of one training step: pure functions of the spec (the scenarios and tests use them too).

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
"""

from __future__ import annotations

import math

from perfkit.lab.sim.training_model import Cluster, ModelShape, Setup

GIB = float(1 << 30)
MIB = float(1 << 20)
DDP_BUCKET_BYTES = 25 * MIB  # torch DDP's default bucket_cap_mb
H2D_S = 0.004  # pinned host->device copy of a batch


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
