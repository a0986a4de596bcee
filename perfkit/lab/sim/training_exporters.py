"""Turn a simulated training run into what real exporters emit, scrape by scrape.

Scrapes every ``scrape_interval_s``: ``train_*`` for every rank of the observed nodes and local
rank 0 of the others; dcgm-exporter and node-exporter for the observed nodes (default: the first).
The node exporter's CPU count is ``Cluster.node_cpus``, a scaled-down host (real 8-GPU hosts have
96-224 threads): the simulator keeps the ratio of DataLoader demand to CPU capacity, not the count,
so bundles stay small (the IB collectors are left out for single-node jobs). The ``train_*``
names, types and help texts are those of :mod:`perfkit.sources.train_exporter`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from perfkit.lab.sim.series import SeriesSet
from perfkit.lab.sim.training_engine import WARM_STEPS, Proc, TrainingRun
from perfkit.lab.sim.training_physics import MIB
from perfkit.sources.train_exporter import METRICS as TRAIN_METRICS

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
    p: Proc | None  # a loop variable over procs, and alive_proc()'s answer below
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
    times = np.arange(0.213, sp.duration_s, si) if sp.framework == "perfkit" else np.zeros(0)
    for t in times:  # only perfkit's TrainMetrics exports train_*; a framework's job has its lines
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
                gauges = [
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
                for name, help_, v in gauges:
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
