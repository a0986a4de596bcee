"""Training evidence, from the ``train_*`` series a training loop exports (the triage table's
training rows and the runbook's training section read it).

Per window: step time and exposed-communication share (averaged over ranks), the data-wait share
of the slowest rank (a synchronous job runs at its pace), tokens/s, and the loss curve's roughness. Roughness is robust on purpose: the median of the
absolute minute-to-minute changes of the loss (relative to its level) and the count of spikes
(points far above the rolling median), so one bad batch does not read as an oscillating loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from perfkit.core.incident import Incident
from perfkit.engine import signals as S

SPIKE_MADS = 6.0  # a loss point more than 6 MADs above its rolling median is a spike


@dataclass
class TrainingEvidence:
    present: bool
    step_s: dict[str, float | None] = field(default_factory=dict)
    data_wait_share: dict[str, float | None] = field(default_factory=dict)
    comm_share: dict[str, float | None] = field(default_factory=dict)
    tokens_per_s: dict[str, float | None] = field(default_factory=dict)
    loss_roughness: dict[str, float | None] = field(default_factory=dict)
    loss_spikes: dict[str, int | None] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def _share(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole else None


def loss_shape(values: np.ndarray) -> tuple[float | None, int]:
    """(roughness, spikes) of a loss series sampled at a fixed step."""
    v = values[np.isfinite(values)]
    if v.size < 8:
        return None, 0
    level = float(np.median(v))
    diffs = np.abs(np.diff(v))
    roughness = float(np.median(diffs) / level) if level else None
    k = 7
    pad = np.pad(v, k // 2, mode="edge")
    rolling = np.median(np.lib.stride_tricks.sliding_window_view(pad, k), axis=1)
    resid = v - rolling
    mad = float(np.median(np.abs(resid - np.median(resid)))) or 1e-12
    spikes = int(np.sum(resid > SPIKE_MADS * 1.4826 * mad))
    return roughness, spikes


def gather_training(engine: Any, inc: Incident) -> TrainingEvidence:
    if not S.resolve(engine, "train_step").found:
        return TrainingEvidence(False)
    ev = TrainingEvidence(True)
    for side, w in (("incident", inc.window), ("baseline", inc.baseline)):
        if w is None:
            continue
        step = S.gauge_stat(engine, "train_step", w, "avg", combine="avg")
        ev.step_s[side] = step
        # The slowest rank sets a synchronous job's pace: at each step take the rank that waited most.
        waits = S.gauge_series(engine, "train_data_wait", w, 15.0, combine="max")
        ev.data_wait_share[side] = _share(
            float(cast(float, waits["value"].mean())) if waits.height else None, step
        )
        ev.comm_share[side] = _share(S.gauge_stat(engine, "train_comm", w, "avg", combine="avg"), step)
        ev.tokens_per_s[side] = S.counter_rate(engine, "train_tokens", w)
        loss = S.gauge_series(engine, "train_loss", w, 60.0, combine="avg")
        if loss.height:
            ev.loss_roughness[side], ev.loss_spikes[side] = loss_shape(loss["value"].to_numpy())
    return ev
