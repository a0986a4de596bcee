"""Training-job incidents (drills and embedded bundles), as :class:`~perfkit.lab.sim.training_model.TrainingSpec`.

Each story is told through the physics of :mod:`perfkit.lab.sim.training_physics` (what the job ran on and
what changed), never through the symptoms a detector looks for. Every spec runs 40 minutes:
baseline 01:00-16:00, incident window 20:00-40:00 (scenario time), a change or fault between.
The answer key (``answer``) is written for the seed's triage table (docs/bundle.md): the direction
id, the symptom id, the suspect version when a versioned deploy caused it, the evidence a good
investigation finds, and the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from perfkit.lab.sim.training_model import (
    Change,
    Cluster,
    Crash,
    LossCurve,
    ModelShape,
    Phase,
    Setup,
    TrainingSpec,
)

DURATION = 2400.0
BASELINE = (60.0, 960.0)
WINDOW = (1200.0, 2400.0)

LLAMA_8B = ModelShape("llama-3.1-8b", 8.03e9, 32, 4096, 8192)
LLAMA_70B = ModelShape("llama-3.1-70b", 70.6e9, 80, 8192, 4096)
# a vision-language model: 576 image tokens + text per sample, CPU-heavy image decode and augmentation
VLM_7B = ModelShape("llava-next-7b", 7.06e9, 32, 4096, 1024, vocab=32_064)
# a video-language model: 32 JPEG frames per clip, read as separate files
VIDEO_7B = ModelShape("video-llava-7b", 7.2e9, 32, 4096, 2048, vocab=32_064)

PRETRAIN_8B = Setup(
    gpus=8, micro_batch=1, zero_stage=3, mfu=0.5, overlap=0.5, num_workers=4, prefetch_factor=2
)
VLM_SETUP = Setup(
    gpus=8,
    micro_batch=16,
    zero_stage=3,
    recompute="full",
    mfu=0.45,
    num_workers=8,
    prefetch_factor=2,
    sample_cpu_s=0.38,  # decode a 1-2 MP JPEG, random-resized-crop, colour jitter, tokenize
    sample_files=1,
    sample_bytes=350e3,
)
VIDEO_SETUP = Setup(
    gpus=8,
    micro_batch=8,
    zero_stage=3,
    recompute="full",
    mfu=0.45,
    num_workers=8,
    prefetch_factor=2,
    sample_cpu_s=0.10,
    sample_files=32,
    sample_bytes=4.0e6,
)


def _start(day: int, hour: int) -> datetime:
    return datetime(2026, 12, day, hour, 0, tzinfo=UTC)


def dataloader_starvation() -> TrainingSpec:
    """Seed §4.2: workers cut 8 -> 2 after a worker was OOM-killed; the GPUs now wait for batches."""
    return TrainingSpec(
        id="dataloader-starvation",
        title="VLM pretraining throughput down by almost a third since the morning restart",
        brief="The multimodal pretraining job is making noticeably less progress per hour than yesterday. "
        "Nobody changed the model.",
        job="vlm-pretrain",
        model=VLM_7B,
        start=_start(1, 6),
        duration_s=DURATION,
        baseline=BASELINE,
        window=WINDOW,
        seed=20261201,
        setup=VLM_SETUP,
        initial_version="v0.14.2",
        crashes=(Crash(1030.0, rank=5),),
        changes=(
            Change(
                1110.0,
                "config",
                "dataloader.num_workers 8 -> 2 (host RAM pressure: a worker was OOM-killed)",
                set={"num_workers": 2},
            ),
        ),
        notes=((1050.0, "alert", "TrainingJobFailed vlm-pretrain: exit code 1"),),
        difficulty="easy",
        answer={
            "direction": "data_pipeline",
            "symptom": "gpu_low_cpu_busy",
            "suspect_version": None,
            "evidence": [
                "after the 06:20 relaunch the slowest rank waits ~30 % of every step for its batch (max over "
                "ranks of train_data_wait_seconds, under 1 % before); the other ranks see the same stall as "
                "collective wait in train_comm_seconds",
                "the relaunch applied dataloader.num_workers 8 -> 2 (config event after the worker OOM kill)",
                "16 host CPUs pinned at 100 % user (2 workers x 8 ranks) while the rest idle; tensor-core activity "
                "and power down a third, GPU_UTIL only dips because ranks spinning in NCCL count as busy",
                "per-GPU tokens/s down ~30 %; no NCCL warnings, network traffic unchanged",
            ],
            "fix": "restore num_workers (8) and fix the host-RAM cause instead: persistent_workers, "
            "no per-worker Python lists in the Dataset (copy-on-write growth), or pre-decoded/cached images",
        },
    )


def dataloader_slow_storage() -> TrainingSpec:
    """The dataset cache moved from node-local NVMe to a shared NFS: reads are throughput-capped."""
    return TrainingSpec(
        id="dataloader-slow-storage",
        title="Video model steps stretch with GPUs half idle",
        brief="Step time of the video-language training job grew sharply this afternoon. "
        "The job was not redeployed.",
        job="video-llava-train",
        model=VIDEO_7B,
        start=_start(3, 13),
        duration_s=DURATION,
        baseline=BASELINE,
        window=WINDOW,
        seed=20261203,
        setup=VIDEO_SETUP,
        initial_version="v2.2.0",
        phases=(Phase(1140.0, DURATION + 1, {"storage": "network"}),),
        notes=(
            (
                1100.0,
                "note",
                "storage: node-local dataset cache on gpu-a nodes retired; /datasets now served "
                "from the shared NFS filer",
            ),
            (1500.0, "note", "nightly eval sweep started on another partition"),
        ),
        difficulty="medium",
        answer={
            "direction": "data_pipeline",
            "symptom": "gpu_low_cpu_busy",
            "suspect_version": None,
            "evidence": [
                "from 13:19, with no deploy or config change, the slowest rank waits ~40 % of each step for data "
                "(max over ranks of train_data_wait_seconds; the others wait in the collective)",
                "CPU time moves from user to iowait: workers are blocked on reads, not computing",
                "eth0 receive rises to the filer's ~70 MB/s ceiling, the dataset now crosses the network",
                "storage note: node-local cache retired, /datasets served from NFS",
            ],
            "fix": "restore a node-local cache (or pre-stage shards to NVMe), pack frames into large "
            "sequential shards (WebDataset/tar) instead of 32 small files per clip, raise prefetch_factor",
        },
    )


def allreduce_scaling_64gpu() -> TrainingSpec:
    """Seed §4.1: 32 -> 64 GPUs; the job now spans two leaf switches and the spine is oversubscribed."""
    return TrainingSpec(
        id="allreduce-scaling-64gpu",
        title="70B run barely faster after doubling to 64 GPUs",
        brief="We doubled the 70B pretraining job from 32 to 64 GPUs to hit the deadline, but the run is "
        "nowhere near twice as fast.",
        job="llama70b-pretrain",
        model=LLAMA_70B,
        start=_start(7, 2),
        duration_s=DURATION,
        baseline=BASELINE,
        window=WINDOW,
        seed=20261207,
        setup=Setup(
            gpus=32, micro_batch=1, zero_stage=3, recompute="full", mfu=0.45, overlap=0.09, num_workers=4
        ),
        cluster=Cluster(spine_oversubscription=2.5),
        initial_version="v5.3.0",
        changes=(
            Change(
                1080.0,
                "scale",
                "resize llama70b-pretrain 32 -> 64 GPUs (4 -> 8 nodes), same per-GPU batch",
                set={"gpus": 64},
            ),
        ),
        ckpt_every=100,
        restart_s=150.0,
        difficulty="medium",
        answer={
            "direction": "network_communication",
            "symptom": "gpu_low_network_busy",
            "suspect_version": None,
            "evidence": [
                "exposed communication share of the step goes from ~15 % (32 GPUs) to ~35 % (64 GPUs)",
                "per-GPU tokens/s drops ~25 %: 2x the GPUs give ~1.5x the throughput (scaling efficiency ~0.76)",
                "tensor-core activity falls while GPU_UTIL stays high (NCCL kernels count as busy)",
                "no NCCL warnings, data wait unchanged: the collectives are slower, not failing; 8 nodes no "
                "longer fit under one leaf switch",
            ],
            "fix": "cut data-parallel traffic: tensor parallel inside the node + pipeline parallel across "
            "nodes, or HSDP (shard within a node, replicate across); place the job under one leaf or "
            "fix the spine oversubscription",
        },
    )


def nccl_socket_fallback() -> TrainingSpec:
    """The IB leaf goes down: a collective hangs to the watchdog, the relaunch comes up on NET/Socket."""
    return TrainingSpec(
        id="nccl-socket-fallback",
        title="Pretraining stalled, then crawling at a sixth of its speed",
        brief="The 16-GPU pretraining job stopped making progress for several minutes; it restarted on its "
        "own but is now far slower, even though the network team says everything is back.",
        job="llama8b-pretrain",
        model=LLAMA_8B,
        start=_start(9, 21),
        duration_s=DURATION,
        baseline=BASELINE,
        window=WINDOW,
        seed=20261209,
        setup=replace(PRETRAIN_8B, gpus=16, zero_stage=2),  # ZeRO-2: gradients all-reduced in 25 MiB buckets
        initial_version="v1.12.0",
        phases=(Phase(1150.0, 2050.0, {"ib_up": False}),),
        notes=(
            (
                1130.0,
                "note",
                "network maintenance: firmware upgrade on IB leaf ib-leaf-02 (rolling, no impact expected)",
            ),
            (1500.0, "alert", "TrainingStalled llama8b-pretrain: no step completed for 5m"),
            (2050.0, "note", "network maintenance complete: ib-leaf-02 ports active"),
        ),
        launcher="srun",
        difficulty="hard",
        answer={
            "direction": "network_communication",
            "symptom": "gpu_low_network_busy",
            "suspect_version": None,
            "evidence": [
                "NCCL WARN 'NET/IB : Got completion from peer ... with error 12' at 21:19 on the ranks with "
                "network peers, watchdog timeouts (ALLREDUCE, Timeout(ms)=600000) on the others at 21:29",
                "GPU_UTIL pinned at 100 % with zero tensor activity during the hang: NCCL kernels spinning",
                "the relaunch's NCCL init says 'NET/IB : No device found' and 'Using network Socket', "
                "channels 'via NET/Socket/0'",
                "after the relaunch exposed comm is ~80 % of the step, eth0 carries the all-reduce traffic and "
                "the IB port counters stay flat although the ports are active again",
            ],
            "fix": "relaunch the job now that IB is back (NCCL chooses the transport at init); set NCCL_NET=IB "
            "(or NCCL_IB_DISABLE=0 with a preflight check) so a missing fabric fails fast instead of "
            "falling back to sockets",
        },
    )


def loss_spikes_no_warmup() -> TrainingSpec:
    """A deploy raises the peak LR and drops the warmup that every relaunch relied on."""
    return TrainingSpec(
        id="loss-spikes-no-warmup",
        title="Training loss spiking after this morning's trainer release",
        brief="The loss curve of the 8B pretraining run looks ragged since this morning. Throughput is fine.",
        job="llama8b-pretrain",
        model=LLAMA_8B,
        start=_start(11, 9),
        duration_s=DURATION,
        baseline=BASELINE,
        window=WINDOW,
        seed=20261211,
        setup=PRETRAIN_8B,
        initial_version="v1.12.0",
        changes=(
            Change(
                1080.0,
                "deploy",
                "trainer v1.13.0: LR schedule refactor (cosine, peak from recipe defaults)",
                version="v1.13.0",
                set={"lr": 6e-4, "warmup_steps": 0},
            ),
            Change(1700.0, "config", "eval every 500 steps -> 1000 steps", relaunch=False),
        ),
        difficulty="medium",
        answer={
            "direction": "training_instability",
            "symptom": "loss_oscillation",
            "suspect_version": "v1.13.0",
            "evidence": [
                "loss variability (std of step-to-step loss) several times the baseline on the same data order",
                "repeated spikes that decay over tens of steps, the largest right after the v1.13.0 relaunch",
                "the periodic log shows lr jumping from 3.00e-04 to 6.00e-04 with no warmup after resume",
                "step time, data wait, comm share and GPU activity unchanged: the pipeline is healthy",
            ],
            "fix": "roll back the schedule (peak LR 3e-4) or restore warmup after every relaunch; then tune "
            "LR with a short sweep rather than a recipe default",
        },
    )


def loss_oscillation_data_order() -> TrainingSpec:
    """A deploy reads the shards in name order instead of shuffling: the loss walks source by source."""
    return TrainingSpec(
        id="loss-oscillation-data-order",
        title="Loss oscillating with a regular period since the data loader rewrite",
        brief="The loss of the 8B run goes up and down in waves of a few minutes. The team shipped a "
        "faster data reader today.",
        job="llama8b-pretrain",
        model=LLAMA_8B,
        start=_start(14, 10),
        duration_s=DURATION,
        baseline=BASELINE,
        window=WINDOW,
        seed=20261214,
        setup=PRETRAIN_8B,
        initial_version="v1.13.1",
        changes=(
            Change(
                1080.0,
                "deploy",
                "trainer v1.14.0: streaming shard reader (3x faster startup)",
                version="v1.14.0",
                set={"shuffle": False},
            ),
        ),
        difficulty="hard",
        answer={
            "direction": "training_instability",
            "symptom": "loss_oscillation",
            "suspect_version": "v1.14.0",
            "evidence": [
                "the loss moves in a square-ish wave with a period of ~300 steps (~5 min), absent before v1.14.0",
                "levels repeat each period: each plateau is one data source (code low, web high)",
                "a jump at every ~60-step shard boundary followed by a slow decline within the shard",
                "LR, step time, data wait and comm unchanged: not the optimizer, not the pipeline",
            ],
            "fix": "restore shuffling across shards (shuffle the shard list per epoch and use a sample "
            "shuffle buffer); compare with the baseline on the same data order",
        },
    )


def train_oom_batch_size() -> TrainingSpec:
    """Micro-batch 1 -> 2 on unpacked SFT data: long batches no longer fit; the job OOM-loops."""
    return TrainingSpec(
        id="train-oom-batch-size",
        title="SFT job restarting every few minutes",
        brief="The supervised fine-tuning job keeps restarting and has barely advanced since the last "
        "config change went in.",
        job="llama8b-sft",
        model=LLAMA_8B,
        start=_start(16, 15),
        duration_s=DURATION,
        baseline=BASELINE,
        window=WINDOW,
        seed=20261216,
        setup=Setup(
            gpus=8,
            micro_batch=1,
            grad_accum=8,
            zero_stage=3,
            mfu=0.5,
            num_workers=4,
            packed=False,
            length_median=0.15,
            length_sigma=0.45,
            length_full_share=0.0003,  # 3 in 10,000 samples truncated at seq_len: ~4 % of steps hold one
            lr=2e-5,
            lr_stable=1e-4,
            warmup_steps=50,
        ),
        initial_version="v0.9.4",
        changes=(
            Change(
                1080.0,
                "config",
                "train.micro_batch_size 1 -> 2 (better GPU efficiency); grad_accum unchanged",
                set={"micro_batch": 2},
            ),
        ),
        loss=LossCurve(l_inf=0.9, a=0.35, alpha=0.5, tokens_seen_b=0.4, noise=0.08),
        start_step=1800,
        ckpt_every=100,
        oom_retry_s=45.0,
        difficulty="easy",
        answer={
            "direction": "memory_oversubscription",
            "symptom": "oom",
            "suspect_version": None,
            "evidence": [
                "torch.OutOfMemoryError 'CUDA out of memory. Tried to allocate ...' on a rank every few minutes "
                "after the micro_batch_size 1 -> 2 config change",
                "each OOM tears the job down: train_* series gap, counters restart, the step counter goes back "
                "to the last checkpoint",
                "DCGM FB_USED climbs toward the 79 GiB capacity before the crashes (unpacked batches padded to the "
                "longest sample: activations + fp32 logits scale with micro-batch x length)",
                "estimate: weights+grads+optimizer 15 GiB (ZeRO-3 over 8), activations 34*s*b*h*L ~ 34 GiB per "
                "full-length sample plus 3.9 GiB of logits: two long samples do not fit",
            ],
            "fix": "revert micro_batch_size to 1 (raise grad_accum for the same global batch), or enable "
            "activation checkpointing, length-bucketed batches / sequence packing, chunked cross-entropy",
        },
    )


def train_healthy() -> TrainingSpec:
    """Control: a healthy run with a harmless sidecar deploy; nothing should be confirmed."""
    return TrainingSpec(
        id="train-healthy",
        title="Is the pretraining run slower today?",
        brief="A researcher thinks the 8B pretraining run is slower than usual today and asks for a check.",
        job="llama8b-pretrain",
        model=LLAMA_8B,
        start=_start(18, 8),
        duration_s=DURATION,
        baseline=BASELINE,
        window=WINDOW,
        seed=20261218,
        setup=PRETRAIN_8B,
        initial_version="v1.14.1",
        changes=(
            Change(
                1300.0, "deploy", "log shipping sidecar 3.2 -> 3.3", version="sidecar-3.3", relaunch=False
            ),
        ),
        notes=((1600.0, "note", "eval sweep started on another partition"),),
        difficulty="easy",
        answer={
            "direction": "none",
            "symptom": None,
            "suspect_version": None,
            "evidence": [
                "step time, data wait share, comm share and tokens/s match the baseline",
                "loss follows the same slow decline with the same variability",
                "no NCCL, OOM or DataLoader errors; the sidecar deploy did not relaunch the job",
            ],
            "fix": "none needed; report the per-GPU tokens/s and MFU against the baseline",
        },
    )


def train_loss_spike_healthy() -> TrainingSpec:
    """Control: one corrupted batch makes one isolated spike; the run recovers at once."""
    return TrainingSpec(
        id="train-loss-spike-healthy",
        title="Loss spike alert on the 8B run",
        brief="The loss alert fired once on the 8B pretraining run. Is the run unstable?",
        job="llama8b-pretrain",
        model=LLAMA_8B,
        start=_start(21, 3),
        duration_s=DURATION,
        baseline=BASELINE,
        window=WINDOW,
        seed=20261221,
        setup=PRETRAIN_8B,
        initial_version="v1.14.1",
        bad_batches=(1820.0,),
        notes=((1840.0, "alert", "TrainLossSpike llama8b-pretrain: loss 2x its 10-minute median"),),
        difficulty="medium",
        answer={
            "direction": "none",
            "symptom": None,
            "suspect_version": None,
            "evidence": [
                "one step's loss jumps at 03:30 (one rank's batch far above the others) and the curve is back "
                "within about a minute",
                "loss variability outside that step matches the baseline; LR and config unchanged",
                "pipeline healthy: step time, data wait and comm share as in the baseline",
            ],
            "fix": "none for the run; log and skip the offending batch (data quality check on that shard)",
        },
    )


TRAINING_SCENARIOS: dict[str, Callable[[], TrainingSpec]] = {
    s().id: s
    for s in (
        dataloader_starvation,
        dataloader_slow_storage,
        allreduce_scaling_64gpu,
        nccl_socket_fallback,
        loss_spikes_no_warmup,
        loss_oscillation_data_order,
        train_oom_batch_size,
        train_healthy,
        train_loss_spike_healthy,
    )
}
