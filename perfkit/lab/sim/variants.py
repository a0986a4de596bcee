"""Variants of a simulated incident: the same fault, seen the way real evidence often arrives (issue 9).

Each variant takes a scenario spec (:class:`~perfkit.lab.sim.model.ScenarioSpec` or
:class:`~perfkit.lab.sim.training_model.TrainingSpec`), simulates it with the ordinary simulators and
writes a bundle whose ``answer.yaml`` keeps the base scenario's direction and adds ``variant:``:

``loose-window``
    The engineer's window starts long before the fault: the timeline is shifted by a healthy lead-in
    of ``(LOOSE_FACTOR - 1)`` times the fault's length, so the window (same end, same start offset)
    is :data:`LOOSE_FACTOR` times the fault and the baseline still sits just before the window. The
    wall-clock times of the story do not move (the scenario starts earlier), so the answer key's
    times stay true.
``shared-fleet``
    A fleet-wide Prometheus: a second, healthy workload (the healthy controls' physics, another model
    or training job, other hosts) simulated over the same time range and written into the same metric
    families. ``answer.yaml`` carries ``scope:``, the matchers that select the affected workload.
``restart``
    Mid-window the affected server (or training job) restarts: its counters start again from zero and
    its series continue under a new ``pod`` and ``instance`` after a gap of a scrape or two (a
    training relaunch takes as long as NCCL init and the checkpoint load take).

Labels. Prometheus adds target labels to what it scrapes; the plain simulators leave them out, and
these two variants add them to the workload's series (``vllm:*``, ``train_*``). In the shared fleet
the workload's exporter is scraped on its host, ``instance="<host>:<port>"``, the host being the one
the GPU and host exporters name (DCGM's ``Hostname``, the host part of node-exporter's
``instance``), so a scope can follow the workload to its hosts. In the restart variant the workload
runs in Kubernetes pods, scraped by pod discovery: ``instance="<pod IP>:<port>"`` and ``pod``, both
new after the restart. Nothing added names the fault.

The simulators' OpenMetrics text is rewritten line by line (relabel, merge); the result is as
deterministic as the simulators: the same spec, variant and seed give the same bytes.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from perfkit.errors import BundleError
from perfkit.lab.sim.model import Phase, Release, ScenarioSpec
from perfkit.lab.sim.training_model import Change, TrainingSpec

VARIANTS = ("loose-window", "shared-fleet", "restart")
LOOSE_FACTOR = 3.0
"""The loose window is this many times the fault's length (issue 9: a 90-minute lead-in before a
60-minute fault is 2.5x; an engineer who opens "the last few hours" gets more)."""
RESTART_GAP_SCRAPES = 1.5
"""A restarted inference server is down this many scrape intervals: one or two scrapes find nothing."""
RESTART_CLEARANCE_S = 180.0
"""A restart is placed at least 3 minutes from every other change of the story, so it stays its own event."""
WORKLOAD_PREFIXES = ("vllm:", "sglang:", "trtllm_", "train_")  # the workload's own series, any engine
FLEET_MODELS = ("llama-3.1-8b-instruct", "mistral-small-24b-instruct")
FLEET_JOBS = ("embed-finetune", "reranker-distill")

Spec = ScenarioSpec | TrainingSpec


# -- seeds -------------------------------------------------------------------------------------------


def other_seeds(seed: int, n: int) -> list[int]:
    """``n`` seeds derived from ``seed`` (deterministic, unrelated to it and to each other)."""
    out = []
    for k in range(n):
        digest = hashlib.sha256(f"perfkit-seed:{seed}:{k}".encode()).digest()
        out.append(int.from_bytes(digest[:4], "big") % 2_000_000_000 + 1)
    return out


def _token(*parts: object, n: int = 5) -> str:
    """A short deterministic pod-name suffix (the alphabet Kubernetes uses for generated names)."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:n])


def _pod_ip(*parts: object) -> str:
    d = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return f"10.{d[0] % 200 + 20}.{d[1]}.{d[2] % 250 + 2}"


# -- the OpenMetrics text, line by line -----------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+) (\S+)$")


@dataclass
class _Family:
    name: str
    header: list[str]
    samples: list[tuple[float, str, str, str, str]] = field(
        default_factory=list
    )  # ts, name, labels, value, ts text


def read_om(path: Path) -> list[_Family]:
    """The families of an OpenMetrics file the simulators wrote (timestamps required)."""
    families: list[_Family] = []
    text = path.read_text(encoding="utf-8")
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line == "# EOF":
            break
        if line.startswith("# TYPE "):
            parts = line.split(" ")
            if len(parts) != 4:
                raise BundleError("malformed # TYPE line", path=str(path), line=lineno)
            families.append(_Family(parts[2], [line]))
            continue
        if line.startswith("#"):
            if not families:
                raise BundleError("metadata before the first # TYPE line", path=str(path), line=lineno)
            families[-1].header.append(line)
            continue
        m = _SAMPLE.match(line)
        if m is None or not families:
            raise BundleError("not a timestamped sample line", path=str(path), line=lineno)
        try:
            ts = float(m.group(4))
        except ValueError:
            raise BundleError(
                f"timestamp {m.group(4)[:40]!r} is not a number", path=str(path), line=lineno
            ) from None
        families[-1].samples.append((ts, m.group(1), m.group(2) or "", m.group(3), m.group(4)))
    return families


def write_om(path: Path, families: list[_Family]) -> int:
    lines: list[str] = []
    for fam in families:
        lines.extend(fam.header)
        for _, sample, labels, value, ts_text in fam.samples:
            head = f"{sample}{{{labels}}}" if labels else sample
            lines.append(f"{head} {value} {ts_text}")
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def _labels_with(labels: str, extra: dict[str, str]) -> str:
    add = ",".join(f'{k}="{v}"' for k, v in extra.items())
    return f"{labels},{add}" if labels else add


_RANK = re.compile(r'(?:^|,)rank="(\d+)"')

Files = dict[str, list[_Family]]  # metrics/<name>.om -> its families


def load_metrics(metrics: Path) -> Files:
    return {path.name: read_om(path) for path in sorted(metrics.glob("*.om"))}


def save_metrics(metrics: Path, files: Files) -> int:
    return sum(write_om(metrics / name, families) for name, families in sorted(files.items()))


def relabel_workload(
    files: Files, life_at: Callable[[float], int], labels_for: Callable[[str, int], dict[str, str]]
) -> None:
    """Add target labels to every workload series (``vllm:*``, ``train_*``): the sample at ``ts``
    belongs to the ``life_at(ts)``-th life of the workload, and a series with label text ``labels``
    gets ``labels_for(labels, life)``."""
    memo: dict[tuple[str, int], str] = {}
    for families in files.values():
        for fam in families:
            if not fam.name.startswith(WORKLOAD_PREFIXES):
                continue
            relabelled = []
            for ts, sample, labels, value, ts_text in fam.samples:
                key = (labels, life_at(ts))
                text = memo.get(key)
                if text is None:
                    text = memo[key] = _labels_with(labels, labels_for(*key))
                relabelled.append((ts, sample, text, value, ts_text))
            fam.samples = relabelled


def merge_metrics(files: Files, other: Files) -> None:
    """``other``'s families written into ``files`` (same file names), each family's samples in time order."""
    for name, theirs in other.items():
        mine = files.setdefault(name, [])
        by_name = {f.name: f for f in mine}
        for fam in theirs:
            if fam.name in by_name:
                merged = by_name[fam.name]
                merged.samples = sorted([*merged.samples, *fam.samples], key=lambda s: s[0])  # stable
            else:
                mine.append(fam)
                by_name[fam.name] = fam


# -- the spec transformations ------------------------------------------------------------------------------


def _event_times(spec: Spec) -> list[float]:
    times = [at for at, _, _ in spec.notes]
    if isinstance(spec, ScenarioSpec):
        times += [r.at_s for r in spec.releases]
        times += [t for p in spec.phases for t in (p.start_s, p.end_s)]
    else:
        times += [c.at_s for c in spec.changes]
        times += [c.at_s for c in spec.crashes]
        times += [t for p in spec.phases for t in (p.start_s, p.end_s)]
        times += list(spec.bad_batches)
    return times


def shift(spec: Spec, lead_s: float) -> Spec:
    """The same story with ``lead_s`` more healthy time in front: every time of the story moves
    ``lead_s`` later and the scenario starts ``lead_s`` earlier (wall-clock times stay); the
    baseline keeps its offset from the (earlier) start."""
    common: dict[str, Any] = {
        "start": spec.start - timedelta(seconds=lead_s),
        "duration_s": spec.duration_s + lead_s,
        "notes": tuple((at + lead_s, kind, detail) for at, kind, detail in spec.notes),
    }
    if isinstance(spec, ScenarioSpec):
        return replace(
            spec,
            **common,
            releases=tuple(replace(r, at_s=r.at_s + lead_s) for r in spec.releases),
            phases=tuple(replace(p, start_s=p.start_s + lead_s, end_s=p.end_s + lead_s) for p in spec.phases),
        )
    return replace(
        spec,
        **common,
        changes=tuple(replace(c, at_s=c.at_s + lead_s) for c in spec.changes),
        crashes=tuple(replace(c, at_s=c.at_s + lead_s) for c in spec.crashes),
        phases=tuple(replace(p, start_s=p.start_s + lead_s, end_s=p.end_s + lead_s) for p in spec.phases),
        bad_batches=tuple(t + lead_s for t in spec.bad_batches),
    )


def loose_window(spec: Spec, factor: float = LOOSE_FACTOR) -> Spec:
    """The spec of the loose-window variant: a window ``factor`` times the fault's length.

    The fault is what the scenario's own window covers (each scenario's window opens at its fault);
    the new window opens ``(factor - 1)`` fault lengths earlier, over healthy time inserted before
    the story (what led up to the fault in the original stays where it was, just before it)."""
    w0, w1 = spec.window
    fault = min(w1, spec.duration_s) - w0
    lead = round((factor - 1.0) * fault)
    shifted = shift(spec, lead)
    return replace(shifted, window=(w0, min(w1, spec.duration_s) + lead))


def restart_time(spec: Spec) -> float:
    """Where the restart goes: inside the window, clear of the story's other changes."""
    w0, w1 = spec.window
    w1 = min(w1, spec.duration_s)
    events = _event_times(spec)
    for frac in (0.55, 0.45, 0.65, 0.35, 0.75):
        at = round(w0 + frac * (w1 - w0))
        if all(abs(at - t) >= RESTART_CLEARANCE_S for t in events):
            return float(at)
    return float(round(w0 + 0.55 * (w1 - w0)))


def _version_at(spec: ScenarioSpec, at: float) -> str:
    version = spec.initial_version
    for rel in sorted(spec.releases, key=lambda r: r.at_s):
        if rel.at_s <= at:
            version = rel.version
    return version


def with_restart(spec: Spec, at: float) -> Spec:
    """The spec with a restart at ``at`` that changes nothing else: an inference server restarting in
    place (no deploy event: the orchestrator restarted it), or a training job evicted and relaunched
    from its last checkpoint (the scheduler's note in the events, as a cluster scheduler logs it)."""
    if isinstance(spec, ScenarioSpec):
        pause = RESTART_GAP_SCRAPES * spec.scrape_interval_s
        rel = Release(at, _version_at(spec, at), "", kind="", restart=True, restart_pause_s=pause)
        return replace(spec, releases=tuple(sorted((*spec.releases, rel), key=lambda r: r.at_s)))
    note = Change(
        at,
        "note",
        f"{spec.job}: pods evicted and rescheduled by the cluster scheduler",
        set={},
        relaunch=True,
    )
    return replace(spec, changes=tuple(sorted((*spec.changes, note), key=lambda c: c.at_s)))


# -- target labels ----------------------------------------------------------------------------------------


def _host(spec: Spec, labels: str) -> str:
    """The host a workload series comes from (the name DCGM's Hostname and node-exporter use)."""
    if isinstance(spec, ScenarioSpec):
        return f"{spec.service}-0"
    m = _RANK.search(labels)
    node = int(m.group(1)) // spec.cluster.gpus_per_node if m else 0
    return f"{spec.cluster.hostname_prefix}{node + 1:02d}"


def _name(spec: Spec) -> str:
    return spec.service if isinstance(spec, ScenarioSpec) else spec.job


def _port(spec: Spec) -> int:
    return 8000 if isinstance(spec, ScenarioSpec) else 9400


def host_labels(spec: Spec, labels: str) -> dict[str, str]:
    """A scrape of the workload's exporter on its host: ``instance="<host>:<port>"``, the host being
    the one DCGM's ``Hostname`` and node-exporter's ``instance`` name (a static or host-network scrape)."""
    return {"instance": f"{_host(spec, labels)}:{_port(spec)}"}


def pod_labels(spec: Spec, labels: str, life: int) -> dict[str, str]:
    """A scrape of the workload's ``life``-th pod (Kubernetes pod discovery): ``instance="<pod IP>:<port>"``
    and ``pod``; a restarted pod comes back with a new name and a new address."""
    host = _host(spec, labels)
    pod = f"{_name(spec)}-{_token(spec.seed, _name(spec), life, n=9)}-{_token(spec.seed, host, life)}"
    return {"instance": f"{_pod_ip(spec.seed, host, life)}:{_port(spec)}", "pod": pod}


# -- writing ---------------------------------------------------------------------------------------------


def _generator(spec: Spec) -> Callable[..., dict[str, float]]:
    if isinstance(spec, ScenarioSpec):
        from perfkit.lab.sim.bundle import generate

        return generate
    from perfkit.lab.sim.training import generate as generate_training

    return generate_training


def _finish_answer(out: Path, variant: str, base: str, **extra: Any) -> None:
    path = out / "answer.yaml"
    answer = yaml.safe_load(path.read_text(encoding="utf-8"))
    answer.update({"variant": variant, "base_scenario": base, **extra})
    path.write_text(yaml.safe_dump(answer, sort_keys=False, allow_unicode=True), encoding="utf-8")


def _neighbour(spec: Spec) -> Spec:
    """A healthy workload beside the incident's: the healthy controls' physics, another model or job,
    other hosts, the same time range."""
    if isinstance(spec, ScenarioSpec):
        from perfkit.lab.sim.scenarios import healthy_busy_evening

        model = next(m for m in FLEET_MODELS if m != spec.model)
        base = healthy_busy_evening()
        return replace(
            base,
            id=f"{spec.id}-neighbour",
            service=f"{model.split('-')[0]}-serving",
            model=model,
            start=spec.start,
            duration_s=spec.duration_s,
            baseline=spec.baseline,
            window=spec.window,
            seed=other_seeds(spec.seed, 1)[0],
            phases=(Phase(0.4 * spec.duration_s, spec.duration_s, rate_mult=1.15),),
            legacy_metric_names=spec.legacy_metric_names,
            vllm_version=spec.vllm_version,
            dialect=spec.dialect,  # the fleet's other model runs on the same engine
            scrape_interval_s=spec.scrape_interval_s,
        )
    from perfkit.lab.sim.training_scenarios import train_healthy

    base_t = train_healthy()
    job = next(j for j in FLEET_JOBS if j != spec.job)
    prefix = next(p for p in ("gpu-b", "gpu-c") if p != spec.cluster.hostname_prefix)
    return replace(
        base_t,
        id=f"{spec.id}-neighbour",
        job=job,
        start=spec.start,
        duration_s=spec.duration_s,
        baseline=spec.baseline,
        window=spec.window,
        seed=other_seeds(spec.seed, 1)[0],
        changes=(),
        notes=(),
        cluster=replace(base_t.cluster, hostname_prefix=prefix),
        scrape_interval_s=spec.scrape_interval_s,
    )


def scope_of(spec: Spec) -> str:
    """The matchers that select the affected workload (what vLLM and the training exporter label)."""
    if isinstance(spec, ScenarioSpec):
        return f'{{model_name="{spec.model}"}}'
    return f'{{job="{spec.job}"}}'


def write_variant(variant: str, spec: Spec, out: Path) -> dict[str, float]:
    """Simulate ``spec`` as ``variant`` into bundle folder ``out``. Returns the simulators' facts."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: choose one of {', '.join(VARIANTS)}")
    out = Path(out)
    base_id = spec.id
    t0 = time.perf_counter()
    named = replace(spec, id=f"{base_id}-{variant}")
    if variant == "loose-window":
        facts = _generator(spec)(loose_window(named), out)
        _finish_answer(out, variant, base_id)
    elif variant == "restart":
        at = restart_time(named)
        restarted = with_restart(named, at)
        facts = _generator(spec)(restarted, out)
        split = restarted.start.timestamp() + at
        if isinstance(restarted, ScenarioSpec):
            split += RESTART_GAP_SCRAPES * restarted.scrape_interval_s  # the server is down until then
        files = load_metrics(out / "metrics")
        relabel_workload(
            files, lambda ts: int(ts >= split), lambda labels, life: pod_labels(restarted, labels, life)
        )
        facts["lines"] = save_metrics(out / "metrics", files)
        _finish_answer(out, variant, base_id)
    else:
        neighbour = _neighbour(named)
        facts = _generator(spec)(named, out)
        files = load_metrics(out / "metrics")
        relabel_workload(files, lambda ts: 0, lambda labels, life: host_labels(named, labels))
        with tempfile.TemporaryDirectory(prefix="perfkit-fleet-") as tmp:
            _generator(neighbour)(neighbour, Path(tmp))
            theirs = load_metrics(Path(tmp) / "metrics")
        relabel_workload(theirs, lambda ts: 0, lambda labels, life: host_labels(neighbour, labels))
        merge_metrics(files, theirs)
        facts["lines"] = save_metrics(out / "metrics", files)
        _finish_answer(out, variant, base_id, scope=scope_of(named))
    facts["variant_s"] = time.perf_counter() - t0
    return facts


def variant_writer(variant: str) -> Callable[[Spec, Path], dict[str, float]]:
    """A bundle writer with the simulators' signature ``(spec, out)`` for ``variant``."""

    def write(spec: Spec, out: Path) -> dict[str, float]:
        return write_variant(variant, spec, out)

    write.__name__ = f"write_{variant.replace('-', '_')}"
    return write
