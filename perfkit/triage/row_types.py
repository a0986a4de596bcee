"""The triage table's row types (:class:`Detection`, :class:`Verification`, :class:`Row`), the
record of every threshold comparison (:class:`Cut`), and the small helpers every row's detector and
verification share. :mod:`perfkit.triage.rows` re-exports the types.

Every comparison of a measured number with a threshold of :mod:`perfkit.triage.thresholds` goes
through :func:`at_least`, :func:`above`, :func:`at_most` or :func:`below`. A confirmatory comparison
(one that rules out another explanation rather than shows the row's: "the median is as usual") goes
through :func:`weigh` as well: within its noise it is weighed against how far the deciding evidence
is past its cuts, not taken as a veto. A yes/no fact a verdict depends on (chunked prefill off) is a
:class:`Gate`, recorded with the verdict (:mod:`perfkit.triage.conditions`). Each returns a
:class:`Test`: its truth and the :class:`Cut` behind it. :func:`any_of` and :func:`all_of` combine
tests and keep only the cuts that *decided* the combination (an ``or`` that came out true: the true
ones; came out false: all; an ``and`` that came out false: the false ones; true: all), so a
:class:`Detection` or :class:`Verification` carries in ``cuts`` the comparisons its outcome hangs
on, and how far each was from its cut-off (:attr:`Cut.margin`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from perfkit.triage import thresholds as T
from perfkit.triage.evidence import Evidence


@dataclass(frozen=True)
class Cut:
    """One comparison of a measured value with a threshold."""

    name: str  # the constant's name in perfkit/triage/thresholds.py, e.g. "TAIL_RATIO"
    value: float  # what was measured
    cutoff: float  # the threshold it was compared with
    passed: bool  # the comparison's outcome

    @property
    def margin(self) -> float:
        """|value − cutoff| / |cutoff|: how far (relative) the value was from flipping the outcome."""
        if self.cutoff == 0:
            return 0.0 if self.value == 0 else math.inf
        return abs(self.value - self.cutoff) / abs(self.cutoff)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": _r(self.value, 4),
            "cutoff": _r(self.cutoff, 4),
            "passed": self.passed,
            "margin": _r(self.margin, 3),
        }


@dataclass(frozen=True)
class Test:
    """The outcome of one comparison or of a combination, with the cuts that decided it."""

    ok: bool
    cuts: tuple[Cut, ...] = ()

    def __bool__(self) -> bool:
        return self.ok


#: a test on a number that is not there: false, decided by nothing that was measured
ABSENT = Test(False)


@dataclass(frozen=True)
class Gate:
    """A yes/no precondition a row's verdict depends on, as it was found (``holds`` None: unknown),
    and how it was known. :data:`perfkit.triage.conditions.PRECONDITIONS` names them."""

    name: str
    holds: bool | None
    how: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "holds": self.holds, "how": self.how}


def _threshold(name: str, cutoff: float | None) -> float:
    """The cut-off: ``cutoff`` when given (derived from the threshold ``name``), else the threshold.
    ``name`` must be a numeric constant of :mod:`perfkit.triage.thresholds` either way."""
    value = getattr(T, name, None)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise KeyError(f"perfkit.triage.thresholds has no numeric threshold {name!r}")
    return float(value if cutoff is None else cutoff)


def _compare(
    name: str, value: float | None, cutoff: float | None, op: Callable[[float, float], bool]
) -> Test:
    c = _threshold(name, cutoff)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ABSENT
    v = float(value)
    ok = bool(op(v, c))
    return Test(ok, (Cut(name, v, c, ok),))


def at_least(value: float | None, name: str, cutoff: float | None = None) -> Test:
    """``value >= thresholds.<name>`` (or ``>= cutoff``, a cut-off derived from that threshold, e.g.
    a multiple of the baseline's value). A missing value is false and records no cut."""
    return _compare(name, value, cutoff, lambda v, c: v >= c)


def above(value: float | None, name: str, cutoff: float | None = None) -> Test:
    """``value > thresholds.<name>``."""
    return _compare(name, value, cutoff, lambda v, c: v > c)


def at_most(value: float | None, name: str, cutoff: float | None = None) -> Test:
    """``value <= thresholds.<name>``."""
    return _compare(name, value, cutoff, lambda v, c: v <= c)


def below(value: float | None, name: str, cutoff: float | None = None) -> Test:
    """``value < thresholds.<name>``."""
    return _compare(name, value, cutoff, lambda v, c: v < c)


def _flat(tests: Iterable[Test]) -> list[Cut]:
    return [c for t in tests for c in t.cuts]


def _robustness(test: Test) -> float:
    """How far a test is from flipping: the smallest margin of its cuts (inf when none measured)."""
    return min((c.margin for c in _flat((test,))), default=math.inf)


def any_of(*tests: Test) -> Test:
    """``a or b or ...``: true if one is, decided by the true one furthest from its cut-off (the
    others being true as well changes nothing: the outcome holds while that one does); false,
    decided by all of them."""
    true = [t for t in tests if t.ok]
    if true:
        return Test(True, tuple(_flat((max(true, key=_robustness),))))
    return Test(False, tuple(_flat(tests)))


def all_of(*tests: Test) -> Test:
    """``a and b and ...``: false if one is, decided by the false one furthest from its cut-off;
    true, decided by all of them."""
    false = [t for t in tests if not t.ok]
    if false:
        return Test(False, tuple(_flat((max(false, key=_robustness),))))
    return Test(True, tuple(_flat(tests)))


def negate(test: Test) -> Test:
    """``not a``: decided by the same cuts."""
    return Test(not test.ok, test.cuts)


def weigh(confirm: Test, deciding: Test) -> Test:
    """A confirmatory test, weighed: one that fails only by cuts within their noise
    (:data:`~perfkit.triage.thresholds.CONFIRM_MARGIN` of their cut-offs) is no veto while the deciding
    evidence holds with every one of its cuts at least
    :data:`~perfkit.triage.thresholds.OUTWEIGH_MARGIN` past its cut-off: it passes, its cuts kept, so
    the verdict still says how close it came (:func:`perfkit.triage.table.settled`). Anything else is
    the test as it stands."""
    if confirm.ok or not confirm.cuts or not deciding.ok or not deciding.cuts:
        return confirm
    if any(c.margin >= T.CONFIRM_MARGIN for c in confirm.cuts):
        return confirm
    if _robustness(deciding) < T.OUTWEIGH_MARGIN:
        return confirm
    return Test(True, confirm.cuts)


def cuts_of(*tests: Test) -> list[Cut]:
    """The cuts of several tests that together decided an outcome (duplicates dropped, order kept)."""
    out: list[Cut] = []
    for c in _flat(tests):
        if c not in out:
            out.append(c)
    return out


@dataclass
class Detection:
    detected: bool
    strength: float  # 0-1
    evidence: dict[str, Any]
    missing: list[str] = field(default_factory=list)
    cuts: list[Cut] = field(default_factory=list)  # the threshold comparisons that decided ``detected``


@dataclass
class Verification:
    verdict: str  # confirmed | ruled_out | inconclusive
    why: str
    numbers: dict[str, Any]
    cuts: list[Cut] = field(default_factory=list)  # the threshold comparisons that decided ``verdict``


@dataclass(frozen=True)
class Figure:
    """A confirmed direction's evidence figure (:mod:`perfkit.report.evidence_figures`): its title, and
    either the series it draws (a function of :mod:`perfkit.analyses.evidence_series`, called with the
    engine, the span and ``per_token``) with their y-axis title, or none (``series=None``: drawn from
    the evidence itself, e.g. the interference bins or the shifts at the suspect deploy)."""

    title: str
    ytitle: str | None = None
    series: Callable[..., dict[str, Any]] | None = None
    scatter: bool = False
    """A relationship, drawn as one point per time step: the first series on the y-axis against the
    last on the x-axis, the baseline's points apart from the incident's (``ytitle`` is unused)."""


#: the workloads a row can be about
ABOUT = ("serving", "training", "any")


@dataclass(frozen=True)
class Row:
    """One row of the triage table, declared whole: what it is (symptom, how it is seen, direction,
    the check and the next step), the functions that detect and verify it, and everything the rest of
    perfkit reads about it (:mod:`perfkit.triage.rows` declares the rows; the import-time check there
    fails on a name that does not exist):

    * ``workload``: what the row is about (``serving``, ``training`` or ``any``);
    * ``reads``: the named quantities it reads (:mod:`perfkit.triage.quantities`);
    * ``decides``: the thresholds whose cuts decide its outcome (:mod:`perfkit.triage.thresholds`);
    * ``confirms``: confirmatory thresholds: cuts that rule out another explanation rather than show
      this one (e.g. "the median is as usual"); within their noise they are weighed against how far
      the deciding cuts are past theirs, not taken as a veto;
    * ``context``: thresholds only the row's why reads (no verdict hangs on them);
    * ``preconditions``: the recorded yes/no facts its verdicts depend on (``chunked_prefill_off``);
    * ``explains``: the directions a confirmed verdict of this row explains (their scores discounted);
    * ``figure``, ``action`` (the postmortem's alert to add), ``remedy`` (the what-if's remedy kind,
      :mod:`perfkit.app.whatif.remedy`) and ``remedy_target`` (the number the remedy must move);
    * ``doc``: the verification as docs/bundle.md's rows table gives it (default: ``check``).
    """

    symptom: str
    seen_as: str
    direction: str
    check: str
    next_step: str
    detect: Callable[[Evidence], Detection]
    verify: Callable[[Evidence], Verification]
    workload: str = "any"
    reads: tuple[str, ...] = ()
    decides: tuple[str, ...] = ()
    confirms: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    preconditions: tuple[str, ...] = ()
    explains: tuple[str, ...] = ()
    figure: Figure | None = None
    action: str = ""
    remedy: str | None = None
    remedy_target: str | None = None
    doc: str = ""

    @property
    def thresholds(self) -> tuple[str, ...]:
        """Every threshold the row compares with (deciding, confirmatory and context)."""
        return (*self.decides, *self.confirms, *self.context)

    def next_step_for(self, engine: str | None, workload: str | None = None) -> str:
        """The next step in the serving engine's own words (``{kv_knobs}`` ... filled by
        :func:`perfkit.engine.dialects.words`; every engine's where none is known)."""
        return engine_words(self.next_step, engine, workload)

    def action_for(self, engine: str | None, workload: str | None = None) -> str:
        """The postmortem's alert to add, in the engine's own words (its waiting gauge's name)."""
        return engine_words(self.action, engine, workload)


PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def engine_words(text: str, engine: str | None, workload: str | None = None) -> str:
    """``text`` with each ``{key}`` of :data:`perfkit.engine.dialects.WORDS` (and ``{waiting}``, the
    engine's waiting-requests gauge) in ``engine``'s words; other braces are left as they are."""
    from perfkit.engine import dialects

    said = dialects.words(engine, workload) | {"waiting": dialects.waiting_name(engine)}
    return PLACEHOLDER.sub(lambda m: said.get(m.group(1), m.group(0)), text)


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def _clamp(x: float) -> float:
    return max(0.0, min(1.0, x))


def _missing(ev_names: dict[str, Any]) -> list[str]:
    return [k for k, v in ev_names.items() if v is None]


def calm_text(load: float | None, waiting: float | None, kv: float | None) -> str:
    """What "calm" measured, by name: the average number of requests waiting, not the queue's tail
    (which long prefills themselves lengthen: the stage table may well say the queue owns the tail)."""
    shown = [
        text
        for value, text in (
            (load, f"load ({load or 0:.2f}x the baseline)"),
            (waiting, f"requests waiting (avg {waiting or 0:.2g})"),
            (kv, f"the KV cache (max {kv or 0:.0%})"),
        )
        if value is not None
    ]
    if not shown:
        return "no saturation was measured (load, requests waiting and the KV cache unknown)"
    listed = ", ".join(shown[:-1]) + " and " + shown[-1] if len(shown) > 1 else "".join(shown)
    return f"{listed} {'are' if len(shown) > 1 else 'is'} normal"


#: why a per-GPU estimate (the decode roofline, the KV/weights memory) cannot be made
NO_GPU_COUNT = (
    "the GPU count is not known (incident.yaml's hardware.count, or -p gpu_count=N): "
    "the per-GPU share of the weights and KV cache depends on it"
)
