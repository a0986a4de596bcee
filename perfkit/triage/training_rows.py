"""The training rows of the triage table (docs/bundle.md): GPU utilisation low with the host CPU or
the network busy, and an oscillating loss, each as a detector and a verification.
:mod:`perfkit.triage.rows` puts them in :data:`~perfkit.triage.rows.ROWS`.

Every comparison with a threshold goes through :mod:`perfkit.triage.row_types` (``at_least`` and
friends), so each Detection and Verification carries the cuts its outcome hung on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfkit.core.ratios import MAD_TO_SD
from perfkit.triage import thresholds as T
from perfkit.triage.evidence import Evidence
from perfkit.triage.quantities import value
from perfkit.triage.row_types import (
    Detection,
    Test,
    Verification,
    _r,
    above,
    all_of,
    any_of,
    at_least,
    at_most,
    below,
    cuts_of,
    negate,
)

# -- gpu_low_* (training) ------------------------------------------------------------------------


def _gpu_low(ev: Evidence) -> tuple[Test | None, dict[str, Any]]:
    """GPU doing less useful work: utilisation under 50 %, or tensor activity down a tenth vs the
    baseline (:data:`~perfkit.triage.thresholds.TENSOR_LOW_RATIO`: GPU_UTIL counts NCCL spinning as
    busy). None when neither is measured."""
    util, tensor_ratio = value(ev, "gpu_util_pct"), value(ev, "tensor_active_ratio")
    facts = {"gpu_util_avg_pct": _r(util, 1), "tensor_active_ratio": _r(tensor_ratio)}
    if util is None and tensor_ratio is None:
        return None, facts
    return any_of(below(util, "GPU_LOW_UTIL_PCT"), at_most(tensor_ratio, "TENSOR_LOW_RATIO")), facts


def _shares(side: dict[str, float | None] | None) -> tuple[float | None, float | None]:
    side = side or {}
    return side.get("baseline"), side.get("incident")


def _data_wait(ev: Evidence) -> Test | None:
    """The direct evidence: the slowest rank waits for its batch a real share of every step, and far
    more than in the baseline. None when train_data_wait_seconds is not exported."""
    i = value(ev, "data_wait_share")
    if i is None:
        return None
    share = at_least(i, "DATA_WAIT_SHARE")
    if value(ev, "data_wait_share_baseline") is None:
        return share
    return all_of(share, at_least(value(ev, "data_wait_rise"), "DATA_WAIT_RISE"))


def _unsteady(ev: Evidence) -> Test:
    """The seed's §4.1 sign of a starved GPU: the step time or the utilisation jumps from one scrape
    to the next, and more than the baseline's did."""
    t = ev.train
    if not t:
        return Test(False)
    jb, _ = _shares(t.step_jitter)
    sb, _ = _shares(t.util_swing_pct)
    jitter = at_least(value(ev, "step_jitter"), "STEP_JITTER")
    if jb is not None:
        jitter = all_of(jitter, at_least(value(ev, "step_jitter_rise"), "UNSTEADY_RISE"))
    swing = at_least(value(ev, "util_swing_pct"), "UTIL_SWING_PCT")
    if sb is not None:
        swing = all_of(swing, at_least(value(ev, "util_swing_rise"), "UNSTEADY_RISE"))
    return any_of(jitter, swing)


def detect_gpu_cpu(ev: Evidence) -> Detection:
    """GPU utilisation low, host CPU busy: the slowest rank's measured data wait (a real share of the
    step, and risen), else the GPU low with the host busy or the GPU fed unsteadily."""
    low, facts = _gpu_low(ev)
    t = ev.train
    busy, busiest, iowait = (
        value(ev, "cpu_busy_frac"),
        value(ev, "busiest_cpu_frac"),
        value(ev, "iowait_frac"),
    )
    wb, wi = _shares(t.data_wait_share if t else None)
    facts.update(
        {
            "data_wait_share_slowest_rank": {"baseline": _r(wb), "incident": _r(wi)},
            "cpu_busy_frac": _r(busy),
            "busiest_cpu_frac": _r(busiest),
            "iowait_frac": _r(iowait),
            "step_jitter": {k: _r(v) for k, v in (t.step_jitter if t else {}).items()},
            "gpu_util_swing_pct": {k: _r(v, 2) for k, v in (t.util_swing_pct if t else {}).items()},
        }
    )
    cpu_busy = any_of(
        at_least(busy, "CPU_BUSY_FRAC"),
        at_least(busiest, "BUSIEST_CPU_FRAC"),
        at_least(iowait, "IOWAIT_FRAC"),
    )
    unsteady = _unsteady(ev)
    support = [x for x in (cpu_busy, unsteady, low) if x is not None and x.ok]
    wait = _data_wait(ev)
    if wait is not None:
        # Measured data wait is the direct evidence; CPU, iowait, jitter and GPU activity support it.
        strength = T.DATA_PIPELINE_STRENGTH + T.SUPPORT_STRENGTH * len(support) if wait else 0.0
        return Detection(wait.ok, min(1.0, strength), facts, cuts=cuts_of(wait))
    # No data-wait timer: the seed's symptom itself, GPU low with the host busy or the GPU fed unsteadily.
    missing = [] if low is not None else ["DCGM_FI_DEV_GPU_UTIL or tensor activity"]
    if busy is None and not unsteady:
        missing.append("node_cpu_seconds_total or train_data_wait_seconds")
    if missing:
        return Detection(False, 0.0, facts, missing)
    assert low is not None
    decided = all_of(low, any_of(cpu_busy, unsteady))
    return Detection(decided.ok, T.DATA_PIPELINE_STRENGTH if decided else 0.0, facts, cuts=cuts_of(decided))


def verify_gpu_cpu(ev: Evidence) -> Verification:
    """Does the slowest rank wait for its data? The data-wait share decides; iowait or a pinned CPU
    says what starves the loader."""
    t = ev.train
    b, i = _shares(t.data_wait_share if t else None)
    iowait, busiest = value(ev, "iowait_frac"), value(ev, "busiest_cpu_frac")
    numbers = {
        "data_wait_share_slowest_rank": {"baseline": _r(b), "incident": _r(i)},
        "dataloader_errors": ev.logs.get("dataloader_error", 0),
        "iowait_frac": _r(iowait),
        "busiest_cpu_frac": _r(busiest),
        "step_jitter": {k: _r(v) for k, v in (t.step_jitter if t else {}).items()},
    }
    wait = _data_wait(ev)
    if wait is None:
        return Verification(
            "inconclusive",
            "no data-wait timer (train_data_wait_seconds, Megatron's batch-generator, torchtitan's "
            "data_loading): the data-wait share of the step is unknown",
            numbers,
        )
    if wait:
        why = f"the slowest rank waits for data {i:.0%} of each step (baseline {b or 0:.0%})"
        # What starves the loader: the disk/network (iowait) or the workers' CPU.
        if at_least(iowait, "IOWAIT_FRAC"):
            why += f"; {iowait:.0%} of CPU time is iowait: the workers wait on storage"
        elif at_least(busiest, "BUSIEST_CPU_FRAC"):
            why += f"; the busiest CPU is {busiest:.0%} busy: the workers are CPU-bound"
        if _unsteady(ev):
            why += "; the step time jumps from scrape to scrape (an unsteady supply)"
        if numbers["dataloader_errors"]:
            why += f"; {numbers['dataloader_errors']} DataLoader errors in the logs"
        return Verification("confirmed", why, numbers, cuts_of(wait))
    return Verification(
        "ruled_out", f"data wait is {i:.0%} of the step on the slowest rank", numbers, cuts_of(wait)
    )


def _comm_up(ev: Evidence) -> Test:
    """Exposed communication a real share of the step, and more of it than in the baseline."""
    share = at_least(value(ev, "comm_share"), "COMM_SHARE")
    if value(ev, "comm_share_baseline") is None:
        return share
    return all_of(share, at_least(value(ev, "comm_rise"), "COMM_RISE"))


def detect_gpu_net(ev: Evidence) -> Detection:
    """GPU utilisation low, network busy: exposed communication up or NCCL warnings (or, with no
    collective timer, the GPU low while the network is busy, not on a serving engine)."""
    low, facts = _gpu_low(ev)
    t = ev.train
    b, i = _shares(t.comm_share if t else None)
    net_ratio = value(ev, "network_ratio")
    nccl = value(ev, "nccl_lines")
    facts.update(
        {
            "network_ratio": _r(net_ratio),
            "ib_ratio": _r(value(ev, "ib_ratio")),
            "comm_share": {"baseline": _r(b), "incident": _r(i)},
            "nccl_warn_lines": nccl,
        }
    )
    warned = above(nccl, "NCCL_LINES")
    if i is not None:
        # The measured exposed-communication share is the direct evidence (GPU time lost to
        # collectives); NCCL warnings are direct too. GPU activity and eth0/IB bytes support them:
        # a node's network also carries checkpoints, logs and datasets.
        direct = any_of(_comm_up(ev), warned)
        return Detection(direct.ok, T.NETWORK_STRENGTH if direct else 0.0, facts, cuts=cuts_of(direct))
    # No train_comm_seconds: the seed's symptom itself, GPU low with the network busy. Not on a
    # serving engine (its request metrics present): there eth0 carries the clients' prompts and
    # tokens, and its bytes follow the traffic, not collectives.
    if low is None:
        return Detection(False, 0.0, facts, ["DCGM_FI_DEV_GPU_UTIL or tensor activity"])
    if net_ratio is None and not ev.logs:
        return Detection(False, 0.0, facts, ["network throughput, train_comm_seconds or NCCL logs"])
    serving = ev.rate("incident", "requests_per_s") is not None
    busy = Test(False) if serving else all_of(low, at_least(net_ratio, "NET_RATIO"))
    decided = any_of(warned, busy)
    return Detection(decided.ok, T.NETWORK_STRENGTH if decided else 0.0, facts, cuts=cuts_of(decided))


def verify_gpu_net(ev: Evidence) -> Verification:
    """Is the network the cause? Not when the collective time is ranks waiting for the slowest rank's
    data; NCCL warnings confirm; else the exposed-communication share decides."""
    t = ev.train
    b, i = _shares(t.comm_share if t else None)
    w = value(ev, "data_wait_share")
    nccl = value(ev, "nccl_lines")
    numbers = {
        "comm_share": {"baseline": _r(b), "incident": _r(i)},
        "nccl_warn_or_timeout_lines": nccl,
        "data_wait_share_slowest_rank": _r(w),
    }
    # The other ranks' time in the collective is them waiting for the slowest rank's batch.
    waiting_for_data = all_of(
        at_least(value(ev, "wait_over_comm"), "COMM_EXPLAINED_BY_WAIT"), at_least(w, "DATA_WAIT_SHARE")
    )
    if waiting_for_data:
        return Verification(
            "ruled_out",
            f"the collective time ({i:.0%} of the step) is ranks waiting for the "
            f"slowest rank's data ({w:.0%} data wait): not the network",
            numbers,
            cuts_of(waiting_for_data),
        )
    warned = above(nccl, "NCCL_LINES")
    if warned:
        return Verification(
            "confirmed",
            f"{nccl} NCCL warnings/timeouts in the window"
            + (f"; exposed communication {i:.0%} of the step (mean over ranks)" if i is not None else ""),
            numbers,
            cuts_of(negate(waiting_for_data), warned),
        )
    if i is None:
        return Verification("inconclusive", "no NCCL lines and no train_comm_seconds to check", numbers)
    comm_up = _comm_up(ev)
    if comm_up and w is None and detect_gpu_cpu(ev).detected:
        # Without a data-wait timer (DeepSpeed, the HF Trainer log none) ranks waiting in the
        # collective for a slow rank's batch look exactly like a slow network, and the host is busy
        # with data loading: the network is not shown to be the cause.
        return Verification(
            "inconclusive",
            f"exposed communication is {i:.0%} of the step, mean over ranks (baseline {b or 0:.0%}), but the host is busy "
            "feeding the GPUs and no data-wait timer is logged: ranks waiting in the collective for a "
            "slow rank's batch look the same",
            numbers,
            cuts_of(comm_up),
        )
    if comm_up:
        return Verification(
            "confirmed",
            f"exposed communication is {i:.0%} of the step, mean over ranks (baseline {b or 0:.0%})",
            numbers,
            cuts_of(negate(waiting_for_data), negate(warned), comm_up),
        )
    return Verification(
        "ruled_out",
        f"exposed communication is {i:.0%} of the step (baseline {b or 0:.0%})",
        numbers,
        cuts_of(comm_up),
    )


# -- loss_oscillation → training_instability ------------------------------------------------------


def _loss_tests(ev: Evidence) -> tuple[float | None, int, int, Test, Test]:
    """(roughness ratio, spikes, baseline spikes, rougher test, recurring-spikes test)."""
    t = ev.train
    spikes = value(ev, "loss_spikes")
    base_spikes = t.loss_spikes.get("baseline") or 0
    ratio = value(ev, "loss_roughness_ratio")
    rougher = at_least(ratio, "LOSS_ROUGHNESS_RATIO")
    recurring = at_least(value(ev, "loss_spikes_more"), "LOSS_SPIKES")  # more episodes than the baseline had
    return ratio, spikes, base_spikes, rougher, recurring


def detect_loss(ev: Evidence) -> Detection:
    """Training loss oscillates: a rougher loss than the baseline's, or any spike (what a loss alert
    fires on)."""
    t = ev.train
    if not t or not t.present or not t.loss_roughness:
        return Detection(False, 0.0, {}, ["train_loss"])
    ratio, spikes, _, rougher, _ = _loss_tests(ev)
    facts = {"loss_roughness_ratio": _r(ratio), "loss_spikes": spikes}
    # What the engineer (or a loss alert) sees: a rougher loss, or any spike.
    seen = any_of(rougher, above(spikes, "LOSS_SPIKE_ALERT"))
    strength = T.loss_strength(ratio, spikes) if seen else 0.0
    return Detection(seen.ok, strength, facts, cuts=cuts_of(seen))


def same_step_loss(ev: Evidence) -> tuple[float | None, int]:
    """The loss on the *same steps* before and in the incident window, when the evidence has step
    numbers: a job relaunched from a checkpoint replays the steps since it (the same batches: the
    data order is a function of the step), so a difference there is the optimisation's (or the
    data order's), not a different batch's.

    Reads ``TrainingEvidence.loss_by_step`` (``{"baseline": {step: loss}, "incident": {...}}``,
    rank-mean loss by optimizer step: "baseline" every step logged before the incident window, by
    whichever earlier launch ran it; "incident" those inside it), e.g. from a trainer's
    ``step N | loss X`` log lines (:func:`perfkit.analyses.training_evidence.loss_by_step`). Returns (the same-step difference relative to the loss level,
    divided by the baseline's roughness; shared steps), ``(None, n)`` when fewer than
    ``MIN_LOSS_POINTS`` steps are shared or nothing to divide by."""
    t = ev.train
    by_step = getattr(t, "loss_by_step", None) if t else None
    if not isinstance(by_step, dict):
        return None, 0
    b, i = by_step.get("baseline") or {}, by_step.get("incident") or {}
    shared = sorted(set(b) & set(i))
    rb = t.loss_roughness.get("baseline")
    if len(shared) < T.MIN_LOSS_POINTS or not rb:
        return None, len(shared)
    diff = np.array([i[s] - b[s] for s in shared], dtype=np.float64)
    level = float(np.median([b[s] for s in shared]))
    if level <= 0:
        return None, len(shared)
    # a shift (the loss higher on the same batches) and a scatter (some batches far off) both count
    spread = abs(float(np.median(diff))) + MAD_TO_SD * float(np.median(np.abs(diff - np.median(diff))))
    return spread / level / rb, len(shared)


def verify_loss(ev: Evidence) -> Verification:
    """Is the loss less stable than in the baseline *on the same data*? On the same steps when the
    evidence has step numbers for both windows (:func:`same_step_loss`); otherwise on the loss
    curve's trend: each window's robust scatter around its own linear trend, which compares
    different batches and holds only if both windows draw from the same shuffled mixture (said in
    the verdict); inconclusive when neither comparison can be made, or when the step time moved."""
    t = ev.train
    wait, comm = t.data_wait_share, t.comm_share
    step_ratio = value(ev, "step_time_ratio")
    ratio, spikes, base_spikes, rougher, recurring = _loss_tests(ev)
    same, shared = same_step_loss(ev)
    numbers = {
        "loss_roughness": {k: _r(v, 4) for k, v in t.loss_roughness.items()},
        "loss_roughness_ratio": _r(ratio),
        "loss_spikes": t.loss_spikes,
        "step_time_ratio": _r(step_ratio),
        "data_wait_share": _r(wait.get("incident")),
        "comm_share": _r(comm.get("incident")),
        "same_steps": shared,
        "same_step_difference_ratio": _r(same),
        "compared_on": "same steps" if same is not None else "trend" if ratio is not None else None,
    }
    slowed = at_least(step_ratio, "STEP_SLOWDOWN_RATIO")
    if slowed:
        return Verification(
            "inconclusive",
            f"the loss moves while the step slowed {step_ratio:.2f}x: fix the "
            "pipeline first, then compare the loss on the same data",
            numbers,
            cuts_of(slowed),
        )
    if same is not None:
        differs = at_least(same, "LOSS_ROUGHNESS_RATIO")
        if differs:
            return Verification(
                "confirmed",
                f"on the same {shared} steps (the same batches, replayed after a relaunch) the loss differs "
                f"from the baseline run's by {same:.1f}x the baseline's own scatter: the optimisation "
                "changed (LR, warmup, data order), not the data",
                numbers,
                cuts_of(negate(slowed), differs),
            )
        return Verification(
            "ruled_out",
            f"on the same {shared} steps the loss matches the baseline run's ({same:.2f}x its scatter): "
            "what moved is the data, not the optimisation",
            numbers,
            cuts_of(negate(slowed), differs),
        )
    if ratio is None:
        return Verification(
            "inconclusive",
            "no baseline loss to compare with (too few points in a window), and no step numbers to "
            "compare the same steps",
            numbers,
        )
    if not getattr(ev.train, "loss_by_step", None):
        why_not = "no step numbers to compare the same steps"
    elif shared < T.MIN_LOSS_POINTS:
        why_not = f"only {shared} step(s) logged in both windows (no relaunch replayed them)"
    else:
        why_not = "no baseline scatter to scale the same steps' difference by"
    basis = (
        "compared on the loss curve's trend (each window's scatter around its own trend, on different "
        f"batches: {why_not})"
    )
    unstable = any_of(rougher, recurring)
    if unstable:
        what = []
        if rougher:
            what.append(f"the loss scatters {ratio:.1f}x as much around its trend as in the baseline")
        if recurring:
            what.append(f"{spikes} spike episodes (baseline {base_spikes})")
        return Verification(
            "confirmed",
            "; ".join(what) + " at the same throughput and pipeline health: the optimisation itself "
            f"(LR, warmup, data order) changed; {basis}",
            numbers,
            cuts_of(negate(slowed), unstable),
        )
    return Verification(
        "ruled_out",
        f"the loss scatters as in the baseline ({ratio:.2f}x) and its {spikes} spike(s) are isolated: "
        f"the loss returns to its trend (a bad batch, not an instability); {basis}",
        numbers,
        cuts_of(negate(slowed), unstable),
    )
