"""Drills for new SREs: embedded incidents served as if live, graded against their answer keys.

A trainee sees a neutral id (``drill-07``, :mod:`perfkit.app.drills.ids`), the brief and the
difficulty; the evidence folder, the incident id and the runbook name neither the scenario nor a
direction (:mod:`perfkit.app.drills.evidence`) until :func:`check` has graded an answer. The
instructor's view, :func:`answers`, keeps the names.

A scenario's own name is accepted wherever an id is (``drill start kv-prefix-cache-thrash``): who
types it knows it already. Everything then written and printed is labelled with what was typed,
so the id of a name is never shown; the scan still removes every *other* scenario name and every
direction from the copy.

Starting is two steps, so a live mode can put its own server between them: :func:`prepare`
(the neutral evidence folder) and :func:`write_runbook` (the parameterized runbook, with the
bundle's parameters or a live source's); :func:`start` does both.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfkit.app.drills.grading import read_answer
from perfkit.app.drills.ids import REGISTRY, assign, number_of
from perfkit.app.runner.embedded import scenario_dirs
from perfkit.core.resources import SCENARIOS
from perfkit.errors import ConfigError
from perfkit.triage.rows import ROWS

# SCENARIOS: a checkout's; an installed wheel lists its specs instead
DIRECTIONS = tuple(r.direction for r in ROWS)
#: ids of the triage table a drill's evidence must not carry: directions and symptoms. A symptom
#: id that is a plain word (``oom``) is what the evidence itself says ("CUDA OOM"), not a spoiler
TABLE_IDS = tuple(
    sorted(
        {r.direction for r in ROWS} | {str(r.symptom) for r in ROWS if r.symptom and "_" in str(r.symptom)}
    )
)
#: where ``drill start`` puts a drill without ``-o``: ``out/drills/<label>``
DEFAULT_FOLDER = Path("out/drills")
_ORDER = {"easy": 0, "medium": 1, "hard": 2}


@dataclass
class Drill:
    name: str  # the scenario: shown to a trainee only once an answer is graded
    difficulty: str
    brief: str
    path: Path
    id: str = ""  # drill-07 (perfkit.app.drills.ids)


def drills(root: Path = SCENARIOS) -> list[Drill]:
    """Every drill with its id, difficulty and brief: from the bundles' answer keys under ``root``,
    or, where there are none (an installed wheel), from the embedded scenarios' specs; their
    bundles are simulated into the user cache when a drill starts. Easy first, then by id."""
    out = []
    dirs = scenario_dirs(root)
    if dirs:
        for folder in dirs:
            a = read_answer(folder)
            out.append(
                Drill(folder.name, str(a.get("difficulty", "medium")), str(a.get("brief", "")), folder)
            )
    elif root == SCENARIOS:
        from perfkit.app.runner.embedded import cache_root, specs

        for name, (spec, _) in specs().items():
            s = spec()
            out.append(Drill(name, str(s.difficulty), str(s.brief), cache_root() / name))
    ids = assign(d.name for d in out)
    for d in out:
        d.id = ids[d.name]
    return sorted(out, key=lambda x: (_ORDER.get(x.difficulty, 3), number_of(x.id) or 0))


def resolve(text: str, root: Path = SCENARIOS) -> tuple[Drill, str]:
    """The drill ``text`` names (an id as typed, ``drill-7`` too, or a scenario's name) and the
    label to show for it: the canonical id, or the name when a name was typed. Its bundle is
    simulated first where the library has none (an installed wheel)."""
    number = number_of(text)
    for d in drills(root):
        if (number is not None and number_of(d.id) == number) or d.name == text.strip():
            label = d.id if number is not None else d.name
            if not (d.path / "answer.yaml").is_file():
                from perfkit.app.runner.embedded import embedded_bundle

                d.path = embedded_bundle(d.name)
            return d, label
    raise ConfigError(f"no drill {text!r}: the drills are drill-01, drill-02 ... (perfkit drill list)")


def find(name: str, root: Path = SCENARIOS) -> Drill:
    return resolve(name, root)[0]


def answer_of(drill: Drill) -> dict[str, Any]:
    """The answer key of ``drill`` without simulating its bundle: answer.yaml where it is, else
    the embedded spec's (what the simulator writes into answer.yaml)."""
    if (drill.path / "answer.yaml").is_file():
        return read_answer(drill.path)
    from perfkit.app.runner.embedded import specs

    spec = specs()[drill.name][0]()
    return {"scenario": drill.name, "difficulty": spec.difficulty, "brief": spec.brief, **spec.answer}


def answers(root: Path = SCENARIOS) -> list[tuple[Drill, dict[str, Any]]]:
    """The instructor's view: every drill with its answer key (scenario, direction, version ...)."""
    return [(d, answer_of(d)) for d in drills(root)]


@dataclass
class Prepared:
    """A drill's folder once its evidence is in place, before its runbook is written."""

    drill: Drill
    label: str  # what the trainee sees: the id (or the scenario name they typed)
    folder: Path
    bundle: Path  # folder/evidence
    runbook: str  # inference_latency or training_step
    params: dict[str, Any]  # the runbook parameters for the bundle: bundle, scope/hosts
    dropped: list[str] = field(default_factory=list)  # binary files left out: they named the answer
    scenarios: tuple[str, ...] = ()  # every scenario name the evidence must not carry


def prepare(
    name: str,
    out: Path | None = None,
    *,
    root: Path = SCENARIOS,
    scope: dict[str, str] | None = None,
) -> Prepared:
    """Copy drill ``name``'s incident into ``out`` (default ``out/drills/<label>``) as
    ``evidence/``: without its answer key, and with nothing that names the scenario or a
    direction. ``scope``: the ``scope``/``hosts`` runbook parameters; by default the scope a fleet
    drill's answer key names (the workload the page was about, not the answer)."""
    from perfkit.app.drills.evidence import Leaks, copy_neutral

    drill, label = resolve(name, root)
    folder = out if out is not None else DEFAULT_FOLDER / label
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ConfigError(f"{folder}: not empty (a drill starts in a fresh folder)")
    answer = read_answer(drill.path)
    scenarios = tuple(
        sorted(
            {d.name for d in drills(root)}
            | set(REGISTRY.values())
            | {str(answer.get(k)) for k in ("scenario", "base_scenario") if answer.get(k)}
        )
    )
    bundle = folder / "evidence"
    copied = copy_neutral(drill.path, bundle, Leaks.of(scenarios, TABLE_IDS, label), label)
    given = {k: v for k, v in (scope or {}).items() if v}
    if not given and answer.get("scope"):  # a fleet drill: the workload in trouble is part of the page
        given = {"scope": str(answer["scope"])}
    params = {"bundle": str(bundle.resolve()), **given}
    return Prepared(drill, label, folder, bundle, runbook_for(bundle), params, copied.dropped, scenarios)


def write_runbook(prepared: Prepared, params: dict[str, Any] | None = None) -> Path:
    """``<folder>/<runbook>.ipynb``, parameterized with ``params`` (default: the bundle's), from a
    copy of the runbook whose cells name no scenario. Returns its path."""
    from perfkit.app.drills.evidence import Leaks, neutral_runbook
    from perfkit.app.runner.lab_open import write_parameterized
    from perfkit.app.runner.run import find_runbook

    leaks = Leaks.of(prepared.scenarios, TABLE_IDS, prepared.label)
    with tempfile.TemporaryDirectory(prefix="perfkit-drill-") as tmp:
        template = neutral_runbook(find_runbook(prepared.runbook), Path(tmp), leaks)
        return write_parameterized(
            str(template), prepared.folder, prepared.params if params is None else params
        )


def start(
    name: str, out: Path, *, root: Path = SCENARIOS, scope: dict[str, str] | None = None
) -> tuple[Path, Path]:
    """:func:`prepare` then :func:`write_runbook` with the bundle's parameters.

    Returns (bundle copy, runbook path)."""
    prepared = prepare(name, out, root=root, scope=scope)
    return prepared.bundle, write_runbook(prepared)


def runbook_for(bundle: Path) -> str:
    """training_step for a training job's bundle (its loop exports train_*), else inference_latency."""
    for om in sorted((bundle / "metrics").glob("*.om")):
        with om.open("r", encoding="utf-8", errors="replace") as fh:
            if "train_step_duration_seconds" in fh.read(1 << 20):
                return "training_step"
    return "inference_latency"


def live_runbook(
    drill: Drill, label: str, folder: Path, state: dict[str, Any], root: Path
) -> tuple[Path, dict[str, Any]]:
    """A live drill's ``evidence/incident.yaml`` (its windows on the drill clock, naming no answer)
    and runbook, parameterized for its live Prometheus; the parameters go into its state too."""
    import yaml

    from perfkit.app.drills.evidence import Leaks
    from perfkit.app.drills.live_state import iso_at, stamp, write_state
    from perfkit.sources.incident_file import read_incident

    recorded = read_incident(drill.path / "incident.yaml")
    answer = answer_of(drill)
    plan = state["plan"]
    names = {d.name for d in drills(root)} | set(REGISTRY.values())
    names |= {str(answer[k]) for k in ("scenario", "base_scenario") if answer.get(k)}
    leaks = Leaks.of(names, TABLE_IDS, label)
    window = {"start": iso_at(state, plan["window"][0]), "end": iso_at(state, plan["window"][1])}
    baseline = {"start": iso_at(state, plan["baseline"][0]), "end": iso_at(state, plan["baseline"][1])}
    incident = {
        "id": f"INC-{stamp(state, plan['window'][0]):%Y%m%d}-{label}",
        "title": leaks.text(str(answer.get("brief") or recorded.title)),
        "service": recorded.service,
        "model": state["model"],
        "window": window,
        "baseline": baseline,
        "slo": dict(recorded.slo),
        "hardware": {
            "gpu": state["gpu"],
            "count": state["gpus"],
            "usd_per_gpu_hour": recorded.hardware.usd_per_gpu_hour,
        },
    }
    (folder / "evidence" / "incident.yaml").write_text(yaml.safe_dump(incident, sort_keys=False))
    params: dict[str, Any] = {
        "bundle": "",
        "prometheus_url": state["urls"]["prometheus"],
        "start": window["start"],
        "end": window["end"],
        "baseline_start": baseline["start"],
        "baseline_end": baseline["end"],
        "service": recorded.service,
        "logs": str((folder / "evidence" / "logs").resolve()),
        "release_metric": "build_info:version",
    }
    params.update(
        {
            f"slo_{k}": v
            for k, v in recorded.slo.items()
            if k in ("ttft_p95_s", "tpot_p95_s", "itl_p95_s", "e2e_p99_s")
        }
    )
    params["gpu_count"] = state["gpus"]  # the tensor-parallel size: the decode roofline needs it
    if recorded.hardware.usd_per_gpu_hour:
        params["usd_per_gpu_hour"] = recorded.hardware.usd_per_gpu_hour
    state["params"] = params
    write_state(folder, state)
    scenarios = tuple(sorted(names))
    prepared = Prepared(drill, label, folder, folder / "evidence", "inference_latency", params, [], scenarios)
    return write_runbook(prepared, params), params


@dataclass
class Grade:
    correct: bool
    version_correct: bool | None
    answer: dict[str, Any]
    found: dict[str, Any]  # what perfkit's triage found (rank 1 and its verification)
    drill: Drill | None = None
    label: str = ""


def check(
    name: str,
    direction: str,
    version: str | None = None,
    *,
    root: Path = SCENARIOS,
    live_params: dict[str, Any] | None = None,
) -> Grade:
    """Grade ``direction`` (and ``version``) for drill ``name``; the answer key comes back in the
    grade, for the caller to show after the verdict. An unknown direction is refused first. The
    triage quoted is the recorded incident's, or, for a live drill (``live_params``: its runbook
    parameters), the live Prometheus' when it answers."""
    if direction not in (*DIRECTIONS, "none"):
        raise ConfigError(f"unknown direction {direction!r}: one of {', '.join(DIRECTIONS)} or none")
    drill, label = resolve(name, root)
    answer = read_answer(drill.path)
    correct = direction == answer["direction"]
    want_version = answer.get("suspect_version")
    version_correct = None if want_version is None else (version == want_version)
    found = None
    if live_params is not None:  # a live drill: what the triage sees on its live Prometheus
        found = live_found(live_params)
    if found is None:
        from perfkit.triage.table import triage_bundle

        scope = answer.get("scope")  # a fleet drill: which workload was paged about, as grading passes it
        found = triage_found(triage_bundle(drill.path, scope=str(scope) if scope else None))
        if live_params is not None:
            found["source"] = "the recorded incident (the live Prometheus did not answer)"
    return Grade(correct and version_correct is not False, version_correct, answer, found, drill, label)


def triage_found(result: Any) -> dict[str, Any]:
    """What perfkit's triage concluded: rank 1 (None when it was ruled out: then every row was) and
    its verification, the suspect version, and the rows that apply to the workload but could not be
    checked (``inconclusive``: (direction, why)), so "every direction ruled out" is said only when
    it is true."""
    top = result.top
    if top is not None and top.verification.verdict == "ruled_out":
        top = None
    open_rows = [
        (r.row.direction, r.verification.why)
        for r in result.results
        if r.verification.verdict == "inconclusive" and getattr(r, "applies", True) and r is not top
    ]
    return {
        "direction": top.row.direction if top else None,
        "verdict": top.verification.verdict if top else None,
        "why": top.verification.why if top else "",
        "check": top.row.check if top else "",
        "suspect_version": result.suspect_version,
        "inconclusive": open_rows,
        "source": "",
    }


def live_found(params: dict[str, Any]) -> dict[str, Any] | None:
    """:func:`triage_found` on a live drill's Prometheus with its runbook parameters (what the
    trainee's ``perfkit run`` saw); None when that Prometheus does not answer."""
    from perfkit.app.drills.live_state import http
    from perfkit.errors import PerfkitError
    from perfkit.sources.live import IncidentParams, open_live
    from perfkit.triage.table import triage_evidence

    try:
        if http(f"{params.get('prometheus_url')}/-/ready", timeout=2.0)[0] != 200:
            return None
        wanted = IncidentParams.from_mapping(params)
        incident = wanted.incident()
        ev = open_live(wanted.live_config(), incident)
        result = triage_evidence(
            ev.engine, incident, events=ev.events, logs=ev.logs, missing=ev.missing, notes=ev.notes
        )
    except (PerfkitError, OSError):
        return None
    return {**triage_found(result), "source": f"the live Prometheus ({params.get('prometheus_url')})"}
