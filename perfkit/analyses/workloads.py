"""Which workloads the evidence holds: the models a fleet's serving engines serve (vLLM, SGLang,
TensorRT-LLM, Dynamo, TGI: :mod:`perfkit.engine.dialects`) and the training jobs, with their series
counts, hosts and traffic, and the ``--scope`` that selects each.

A workload is a serving model (``model_name``, the label vLLM, SGLang and TensorRT-LLM put on every
series; ``job`` where a server has none) on one engine, or a training job (``job``). Replicas of one
model on several hosts are one workload; the same model on two engines is two. Engine-agnostic: a
bundle's local engine and a live Prometheus answer the same queries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from perfkit.core.frames import Window
from perfkit.core.incident import Incident
from perfkit.core.scope import HOST_LABELS, escape, host_keys
from perfkit.engine import dialects, ops
from perfkit.engine import signals as S
from perfkit.errors import PerfkitError

#: families that say a training job exists (first found is counted), with its traffic counters
TRAINING = ("train_step_duration_seconds", "train_loss")
TRAINING_TRAFFIC = ("train_tokens_total", "train_samples_total")


def serving_marks(d: dialects.Dialect) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """An engine's (marks, traffic counters): its running gauge or request histograms' ``_count``, and
    what counts its requests."""
    counts = tuple(f"{b}_count" for sig in ("e2e", "ttft") for b in d.histograms.get(sig, ()))
    running = tuple(dialects.family(n) for n in d.gauges.get("running", ()))
    done = tuple(dialects.family(n) for n in d.counters.get("request_success", ()))
    return running + counts, counts + done


IDENTITY = ("model_name", "job")  # the label that names a serving workload, in order of preference


@dataclass
class Workload:
    kind: str  # serving | training
    label: str  # model_name or job
    value: str
    series: int  # series of the catalogue's families carrying this workload
    hosts: list[str] = field(default_factory=list)
    traffic: float | None = None
    traffic_unit: str = ""
    engine: str | None = None  # the serving engine (perfkit.engine.dialects); None for training

    @property
    def scope(self) -> str:
        return f'{{{self.label}="{escape(self.value)}"}}'

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "label": self.label,
            "value": self.value,
            "series": self.series,
            "hosts": self.hosts,
            "traffic": self.traffic,
            "traffic_unit": self.traffic_unit,
            "scope": self.scope,
            "engine": self.engine,
        }


def describe(workload: Mapping[str, Any]) -> str:
    """A workload (its ``as_dict()``) in words: ``serving, 21 series, 3.25 req/s, hosts gpu-01``."""
    traffic = workload.get("traffic")
    rate = f"{traffic:.3g} {workload.get('traffic_unit', '')}" if traffic is not None else "no traffic"
    hosts = ", ".join(workload.get("hosts") or [])
    d = dialects.BY_NAME.get(str(workload.get("engine")))
    kind = f"{workload.get('kind')} on {d.title}" if d else workload.get("kind")
    where = f"hosts {hosts}" if hosts else "no host label on its series"
    return f"{kind}, {workload.get('series')} series, {rate}, {where}"


def _families(d: dialects.Dialect | None) -> list[str]:
    """The catalogue's families of one engine (``d``) or of training jobs (None), histograms by ``_count``."""
    if d is not None:
        names = [dialects.family(n) for group in (d.gauges, d.counters) for ns in group.values() for n in ns]
        return sorted(set(names) | {f"{b}_count" for bases in d.histograms.values() for b in bases})
    names = [
        n for names in (*S.GAUGES.values(), *S.COUNTERS.values()) for n in names if n.startswith("train_")
    ]
    return names


def _count_by(engine: S.Engine, metric: str, by: tuple[str, ...], window: Window) -> list[dict[str, Any]]:
    last = ops.over_time("last", ops.Selector(metric), window.seconds)
    return list(engine.instant(ops.aggregate("count", last, *by), window.end).iter_rows(named=True))


def window_has_samples(engine: S.Engine, window: Window, names: Iterable[str] | None = None) -> bool:
    """Whether any series of ``names`` (default: every family the signal catalogue reads) has a
    sample in ``window``: a live window with none is the wrong window or scope, not an incident
    whose every row is inconclusive. Stops at the first family found."""
    for name in sorted(S.catalogue_families() if names is None else names):
        if engine.has(name) and _count_by(engine, name, (), window):
            return True
    return False


def find_workloads(engine: S.Engine, window: Window) -> list[Workload]:
    """Every workload with series in ``window``, busiest first."""
    found: dict[tuple[str, str, str, str], Workload] = {}
    groups: list[tuple[str, dialects.Dialect | None, tuple[str, ...], tuple[str, ...], str]] = [
        ("serving", d, *serving_marks(d), "req/s") for d in dialects.DIALECTS
    ]
    groups.append(("training", None, TRAINING, TRAINING_TRAFFIC, "tokens/s"))
    for kind, d, marks, traffic, unit in groups:
        mark = next((m for m in marks if engine.has(m)), None)
        if mark is None:
            continue
        tag = d.name if d else ""
        rows = _count_by(engine, mark, (*IDENTITY, "instance", *HOST_LABELS), window)
        label = next(
            (lab for lab in (IDENTITY if kind == "serving" else ("job",)) if any(r.get(lab) for r in rows)),
            None,
        )
        if label is None:
            continue
        for row in rows:
            value = str(row.get(label) or "")
            w = found.setdefault(
                (kind, tag, label, value), Workload(kind, label, value, 0, engine=d.name if d else None)
            )
            w.hosts = sorted(set(w.hosts) | host_keys(row))
        for name in _families(d):
            if engine.has(name):
                for row in _count_by(engine, name, (label,), window):
                    key = (kind, tag, label, str(row.get(label) or ""))
                    if key in found:
                        found[key].series += int(row["value"])
        counter = next((c for c in traffic if engine.has(c)), None)
        if counter is not None:
            expr = ops.aggregate("sum", ops.rate(ops.Selector(counter), window.seconds), label)
            for row in engine.instant(expr, window.end).iter_rows(named=True):
                key = (kind, tag, label, str(row.get(label) or ""))
                if key in found:
                    found[key].traffic = float(row["value"])
                    found[key].traffic_unit = (
                        unit if kind == "serving" or "tokens" in counter else "samples/s"
                    )
    return sorted(found.values(), key=lambda w: (w.kind, -(w.traffic or 0), w.value))


#: dcgm-exporter's families that carry ``modelName`` (the device name nvidia-smi prints), first found used
GPU_MARKS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_SM_CLOCK")
GPU_NAME_LABEL = "modelName"
MODEL_LABEL = "model_name"


@dataclass(frozen=True)
class Identity:
    """What the evidence itself says the workload runs on: the served model (vLLM's ``model_name``
    label) and the GPU (dcgm-exporter's ``modelName``), each only when exactly one value is in the
    (scoped) evidence; ``notes`` say why one is not known."""

    model: str | None
    gpu: str | None
    notes: tuple[str, ...] = ()


def identify(engine: S.Engine, window: Window) -> Identity:
    """The served model and the GPU the evidence names in ``window`` (see :class:`Identity`). Several
    values (a shared Prometheus, no scope) name none: a guess would put another workload's model
    under this one's numbers."""
    found: dict[str, str | None] = {}
    notes: list[str] = []
    every_engine = tuple(m for d in dialects.DIALECTS for m in serving_marks(d)[0])
    for what, marks, label in (("model", every_engine, MODEL_LABEL), ("GPU", GPU_MARKS, GPU_NAME_LABEL)):
        mark = next((m for m in marks if engine.has(m)), None)
        seen = {str(r.get(label) or "") for r in _count_by(engine, mark, (label,), window)} if mark else set()
        values = sorted(v for v in seen if _is_name(v))
        if len(values) < len(seen - {""}):
            notes.append(
                f"a {label} value that is no name (control characters, or over {MAX_NAME} characters) was left out"
            )
        found[what] = values[0] if len(values) == 1 else None
        if len(values) > 1:
            shown = ", ".join(repr(v[:80]) for v in values[:4]) + (" ..." if len(values) > 4 else "")
            notes.append(
                f"{len(values)} values of {label} in the evidence ({shown}): set scope to one workload"
            )
    return Identity(found["model"], found["GPU"], tuple(notes))


MAX_NAME = 200  # a served model's or a GPU's name; a label value longer than this names neither


def _is_name(value: str) -> bool:
    return 0 < len(value) <= MAX_NAME and value.isprintable()


def fill_identity(engine: S.Engine, incident: Incident) -> str:
    """Give ``incident`` the model and GPU :func:`identify` reads from the evidence where it names
    neither (incident.yaml and the parameters win); returns what was read, and why not, in words
    (empty when nothing was needed). A source that fails leaves the incident as it was: the
    analyses that need a model say so."""
    if incident.model and incident.hardware.gpu != "unknown":
        return ""
    try:
        who = identify(engine, incident.window)
    except PerfkitError:
        return ""
    said = []
    if not incident.model and who.model:
        incident.model = who.model
        said.append(f"model {who.model!r} from the model_name label")
    if incident.hardware.gpu == "unknown" and who.gpu:
        incident.hardware.gpu = who.gpu
        said.append(f"GPU {who.gpu!r} from DCGM's modelName label")
    return "; ".join([*said, *who.notes])
