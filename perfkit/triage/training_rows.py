"""The training rows of the triage table (DESIGN.md §5): GPU utilisation low with the host CPU or
the network busy, and an oscillating loss, each as a detector and a verification.
:mod:`perfkit.triage.rows` puts them in :data:`~perfkit.triage.rows.ROWS`.
"""

from __future__ import annotations

from typing import Any

from perfkit.triage import thresholds as T
from perfkit.triage.evidence import Evidence
from perfkit.triage.row_types import Detection, Verification, _clamp, _missing, _r

# -- gpu_low_* (training) ------------------------------------------------------------------------


def _gpu_low(ev: Evidence) -> tuple[bool | None, dict[str, Any]]:
    """GPU doing less useful work: utilisation under 50 %, or tensor activity down 20 % vs baseline.

    DCGM's GPU_UTIL counts a kernel as busy while NCCL spins waiting for peers, so a job stuck on
    data or communication can read 95 % util; the tensor pipes tell the truth."""
    util, tb, ti = ev.gpu.get("util_incident"), ev.gpu.get("tensor_baseline"), ev.gpu.get("tensor_incident")
    tensor_ratio = ti / tb if tb and ti is not None else None
    facts = {"gpu_util_avg_pct": _r(util, 1), "tensor_active_ratio": _r(tensor_ratio)}
    if util is None and tensor_ratio is None:
        return None, facts
    low = (util is not None and util < T.GPU_LOW_UTIL_PCT) or (
        tensor_ratio is not None and tensor_ratio <= 0.8
    )
    return low, facts


def detect_gpu_cpu(ev: Evidence) -> Detection:
    low, facts = _gpu_low(ev)
    busy, busiest, iowait = (
        ev.host.get("cpu_busy_incident"),
        ev.host.get("cpu_busy_max_incident"),
        ev.host.get("iowait_incident"),
    )
    facts.update({"cpu_busy_frac": _r(busy), "busiest_cpu_frac": _r(busiest), "iowait_frac": _r(iowait)})
    missing = _missing({"DCGM_FI_DEV_GPU_UTIL or tensor activity": low, "node_cpu_seconds_total": busy})
    if missing:
        return Detection(False, 0.0, facts, missing)
    assert busy is not None  # _missing() named it otherwise
    cpu_busy = (
        busy >= T.CPU_BUSY_FRAC or (busiest or 0) >= T.BUSIEST_CPU_FRAC or (iowait or 0) >= T.IOWAIT_FRAC
    )
    detected = bool(low) and cpu_busy
    return Detection(detected, 0.7 if detected else 0.0, facts)


def verify_gpu_cpu(ev: Evidence) -> Verification:
    t = ev.train
    share = (t.data_wait_share if t else {}) or {}
    b, i = share.get("baseline"), share.get("incident")
    numbers = {
        "data_wait_share_slowest_rank": {"baseline": _r(b), "incident": _r(i)},
        "dataloader_errors": ev.logs.get("dataloader_error", 0),
        "iowait_frac": _r(ev.host.get("iowait_incident")),
    }
    if i is None:
        return Verification(
            "inconclusive", "no train_data_wait_seconds: the data-wait share of the step is unknown", numbers
        )
    if i >= T.DATA_WAIT_SHARE and (b is None or i >= 3 * max(b, 1e-3)):
        why = f"the slowest rank waits for data {i:.0%} of each step (baseline {b or 0:.0%})"
        if numbers["dataloader_errors"]:
            why += f"; {numbers['dataloader_errors']} DataLoader errors in the logs"
        return Verification("confirmed", why, numbers)
    return Verification("ruled_out", f"data wait is {i:.0%} of the step on the slowest rank", numbers)


def detect_gpu_net(ev: Evidence) -> Detection:
    low, facts = _gpu_low(ev)
    t = ev.train
    comm = (t.comm_share if t else {}) or {}
    nb, ni = ev.host.get("net_bytes_per_s_baseline"), ev.host.get("net_bytes_per_s_incident")
    ib_b, ib_i = ev.host.get("ib_bytes_per_s_baseline"), ev.host.get("ib_bytes_per_s_incident")
    net_ratio = ni / nb if nb and ni is not None else None
    nccl = ev.logs.get("nccl_warn", 0) + ev.logs.get("nccl_timeout", 0) + ev.logs.get("nccl_error", 0)
    facts.update(
        {
            "network_ratio": _r(net_ratio),
            "ib_ratio": _r(ib_i / ib_b if ib_b and ib_i is not None else None),
            "comm_share": _r(comm.get("incident")),
            "nccl_warn_lines": nccl,
        }
    )
    if low is None:
        return Detection(False, 0.0, facts, ["DCGM_FI_DEV_GPU_UTIL or tensor activity"])
    busy = (net_ratio or 0) >= T.NET_RATIO or (comm.get("incident") or 0) >= T.COMM_SHARE or nccl > 0
    if not busy and net_ratio is None and not comm:
        return Detection(False, 0.0, facts, ["network throughput, train_comm_seconds or NCCL logs"])
    detected = bool(low) and busy
    return Detection(detected, 0.7 if detected else 0.0, facts)


def verify_gpu_net(ev: Evidence) -> Verification:
    t = ev.train
    comm = (t.comm_share if t else {}) or {}
    wait = (t.data_wait_share if t else {}) or {}
    b, i = comm.get("baseline"), comm.get("incident")
    nccl = ev.logs.get("nccl_warn", 0) + ev.logs.get("nccl_timeout", 0) + ev.logs.get("nccl_error", 0)
    numbers = {
        "comm_share": {"baseline": _r(b), "incident": _r(i)},
        "nccl_warn_or_timeout_lines": nccl,
        "data_wait_share_slowest_rank": _r(wait.get("incident")),
    }
    if (
        i is not None
        and (wait.get("incident") or 0) >= 0.8 * i
        and (wait.get("incident") or 0) >= T.DATA_WAIT_SHARE
    ):
        return Verification(
            "ruled_out",
            f"the collective time ({i:.0%} of the step) is ranks waiting for the "
            f"slowest rank's data ({wait['incident']:.0%} data wait): not the network",
            numbers,
        )
    if nccl:
        return Verification(
            "confirmed",
            f"{nccl} NCCL warnings/timeouts in the window"
            + (f"; exposed communication {i:.0%} of the step" if i is not None else ""),
            numbers,
        )
    if i is not None and i >= T.COMM_SHARE and (b is None or i >= 1.5 * b):
        return Verification(
            "confirmed", f"exposed communication is {i:.0%} of the step (baseline {b or 0:.0%})", numbers
        )
    if i is None:
        return Verification("inconclusive", "no NCCL lines and no train_comm_seconds to check", numbers)
    return Verification("ruled_out", f"exposed communication is {i:.0%} of the step", numbers)


# -- loss_oscillation → training_instability ------------------------------------------------------


def detect_loss(ev: Evidence) -> Detection:
    t = ev.train
    if not t or not t.present or not t.loss_roughness:
        return Detection(False, 0.0, {}, ["train_loss"])
    rb, ri = t.loss_roughness.get("baseline"), t.loss_roughness.get("incident")
    spikes = t.loss_spikes.get("incident") or 0
    ratio = ri / rb if rb and ri is not None else None
    facts = {"loss_roughness_ratio": _r(ratio), "loss_spikes": spikes}
    detected = (ratio or 0) >= T.LOSS_CV_RATIO or spikes >= 3
    return Detection(detected, _clamp((ratio or 1) / 6 + spikes / 10) if detected else 0.0, facts)


def verify_loss(ev: Evidence) -> Verification:
    t = ev.train
    wait, comm, step = t.data_wait_share, t.comm_share, t.step_s
    step_ratio = (
        step["incident"] / step["baseline"] if step.get("baseline") and step.get("incident") else None
    )
    numbers = {
        "loss_roughness": {k: _r(v, 4) for k, v in t.loss_roughness.items()},
        "loss_spikes": t.loss_spikes,
        "step_time_ratio": _r(step_ratio),
        "data_wait_share": _r(wait.get("incident")),
        "comm_share": _r(comm.get("incident")),
    }
    if step_ratio is not None and step_ratio >= 1.3:
        return Verification(
            "inconclusive",
            f"the loss moves while the step slowed {step_ratio:.2f}x: fix the "
            "pipeline first, then compare the loss on the same data",
            numbers,
        )
    return Verification(
        "confirmed",
        "the loss oscillates/spikes against the baseline at the same throughput "
        "and pipeline health: the optimisation itself (LR, warmup, data order) changed",
        numbers,
    )
