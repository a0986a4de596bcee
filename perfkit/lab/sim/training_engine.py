"""Play a :class:`~perfkit.lab.sim.training_model.TrainingSpec` forward, optimizer step by optimizer step.

:func:`simulate` runs every rank of every launch of the job through the physics of
:mod:`perfkit.lab.sim.training_physics` (DataLoader queues, compute, collectives, memory, loss),
with the spec's changes, phases, crashes and corrupted batches, and the failures and restarts they
cause; it returns a :class:`TrainingRun` (what happened, step by step), which
:mod:`perfkit.lab.sim.training_exporters` turns into scrapes. The log lines are written by
:class:`perfkit.lab.sim.training_logs._LauncherLogs`. The same spec and seed give the same run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from perfkit.lab.sim import training_frameworks as frameworks
from perfkit.lab.sim.training_logs import _LauncherLogs
from perfkit.lab.sim.training_model import Proc, Setup, TrainingSpec
from perfkit.lab.sim.training_physics import (
    GIB,
    H2D_S,
    batch_seconds,
    comm_bytes,
    comm_seconds,
    compute_seconds,
    memory_components,
    nodes_of,
    peak_bytes,
    state_bytes,
    transport_of,
)

LEAD_S = 60.0  # simulated before t=0 so the first scrape intervals are full
WARM_STEPS = 7_500  # steps a process running before the scenario has already made


# -- the simulation -----------------------------------------------------------------------------------


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
    scalars: list[tuple[str, float, int, float]] = field(
        default_factory=list
    )  # TensorBoard (tag, v, step, wall)

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


class _Sim(_LauncherLogs):
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
        self.scalars: list[tuple[str, float, int, float]] = []  # TensorBoard points (a framework's)

    # -- helpers --------------------------------------------------------------------------------

    def env(self, job: Setup, t: float) -> Setup:
        for ph in self.spec.phases:
            if ph.start_s <= t < ph.end_s:
                job = replace(job, **ph.set)
        return job

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
        The lognormal's own tail rarely reaches ``seq_len``; ``length_full_share`` adds the samples a
        real SFT mix truncates there (long documents), drawn apart so the lognormal stays as it was.
        """
        if env.packed:
            one = np.ones(n)
            return one, one, one
        g = np.random.default_rng([self.spec.seed, 2_000_003, step])
        draws = np.minimum(
            1.0,
            g.lognormal(math.log(env.length_median), env.length_sigma, (n, env.grad_accum, env.micro_batch)),
        )
        if env.length_full_share > 0:  # an SFT mix's long documents, truncated at seq_len
            full = np.random.default_rng([self.spec.seed, 2_000_029, step]).random(draws.shape)
            draws = np.where(full < env.length_full_share, 1.0, draws)
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
            if sp.framework != "perfkit":  # the framework's own lines (lab/sim/training_frameworks.py)
                iv = frameworks.interval(self.rows[-len(self.tps_window) :], n, m.params, self.c.peak_tflops)
                for text in frameworks.lines(
                    sp.framework, sp.at(out["t_end"]), iv, mem, self.c.torch_capacity_gib
                ):
                    self.log(out["t_end"], text)
                self.scalars += frameworks.scalars(sp.framework, sp.start.timestamp() + out["t_end"], iv, mem)
                self.tps_window = []
                return
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
            scalars=self.scalars,
        )


def simulate(spec: TrainingSpec) -> TrainingRun:
    """Play ``spec`` forward step by step (deterministic for its seed)."""
    return _Sim(spec).run()
