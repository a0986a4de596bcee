"""The neutral ids trainees see for drills (``drill-07``), fixed once and for all.

A drill's id must not name its scenario (``kv-prefix-cache-thrash`` tells the answer), and must
name the same drill on every machine and in every release, so an instructor can say "everyone do
drill-07" and a trainee's notes stay valid. Hence a frozen registry rather than a computed order:

* :data:`REGISTRY` maps each id to the scenario folder it names. An entry is never renumbered,
  and an id is never reused (a scenario removed from the library retires its id); a new scenario
  is appended with the next free number.
* The first 25 were numbered by difficulty (easy, medium, hard, as their answer keys say), and
  within a difficulty shuffled by hand so that a variant bundle never sits next to its base (the
  loose-window, shared-fleet and restart variants share their base's brief) and two drills with the
  same direction rarely do: neighbours must not hint at each other's answers.
* A scenario not yet registered (added to ``data/scenarios`` without an entry here) still gets an
  id, after the registry's last number, in the order of the scenarios' names: a stop-gap that may
  shift when another unregistered one is added. ``tests/test_drills.py`` fails until every
  shipped scenario is registered.

Reading this file tells the mapping, as reading ``data/scenarios/*/answer.yaml`` tells the answers:
drills keep honest trainees from being told, they do not lock anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

PREFIX = "drill-"

#: drill id → scenario (a folder of ``data/scenarios`` or an embedded scenario's name).
REGISTRY: dict[str, str] = {
    # easy
    "drill-01": "queueing-traffic-surge",
    "drill-02": "dataloader-starvation",
    "drill-03": "healthy-decoy-deploy",
    "drill-04": "train-oom-batch-size-restart",
    "drill-05": "healthy-busy-evening",
    "drill-06": "dataloader-starvation-loose-window",
    "drill-07": "train-healthy",
    "drill-08": "train-oom-batch-size",
    # medium
    "drill-09": "release-regression",
    "drill-10": "dataloader-slow-storage",
    "drill-11": "decode-thermal-throttle",
    "drill-12": "oom-sampler-kv-full",
    "drill-13": "allreduce-scaling-64gpu",
    "drill-14": "decode-slow-node-swap",
    "drill-15": "loss-spikes-no-warmup",
    "drill-16": "train-loss-spike-healthy",
    "drill-17": "release-regression-prefill",
    # hard
    "drill-18": "nccl-socket-fallback-shared-fleet",
    "drill-19": "tail-interference-batch-tenant",
    "drill-20": "kv-prefix-cache-thrash",
    "drill-21": "loss-oscillation-data-order",
    "drill-22": "nccl-socket-fallback",
    "drill-23": "surge-overlapping-deploy",
    "drill-24": "p95-prefill-interference",
    "drill-25": "kv-pressure-shared-gpu",
    # after-fix bundles (perfkit/lab/sim/fixed_scenarios.py): healthy controls, answer none
    "drill-26": "p95-prefill-interference-chunked",
    "drill-27": "release-regression-rolled-back",
    # append new scenarios here, with the next number
}

_ID = re.compile(r"drill-0*(\d{1,6})", re.IGNORECASE)


def format_id(number: int) -> str:
    """``drill-07``: two digits at least, so ids sort as their numbers up to 99."""
    return f"{PREFIX}{number:02d}"


def number_of(text: str) -> int | None:
    """The number of a drill id as typed (``drill-07``, ``drill-7``, ``DRILL-007``), else None."""
    m = _ID.fullmatch(text.strip())
    return int(m.group(1)) if m else None


def assign(names: Iterable[str]) -> dict[str, str]:
    """scenario → id for ``names``: the registry's id for a registered scenario; for the others,
    numbers after the registry's last, in the order of their names."""
    by_name = {name: drill for drill, name in REGISTRY.items()}
    wanted = sorted(set(names))
    out = {name: by_name[name] for name in wanted if name in by_name}
    last = max((number_of(drill) or 0) for drill in REGISTRY)
    for name in wanted:
        if name not in out:
            last += 1
            out[name] = format_id(last)
    return out


def unregistered(names: Iterable[str]) -> list[str]:
    """The scenarios among ``names`` that :data:`REGISTRY` does not name (they need an entry)."""
    known = set(REGISTRY.values())
    return sorted(set(names) - known)
