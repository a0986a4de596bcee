"""The inference runbook's "Did the fix work?" section: the incident window against a window after the fix.

Wiring only: the comparison is :mod:`perfkit.analyses.compare`, its look
:mod:`perfkit.report.compare_view`. The runbook parameters it reads (kept in ``ctx.params``)::

    after_bundle = ""   # a bundle recorded after the fix (its incident.yaml window is the after window)
    after_start = ""    # or a window after the fix on this incident's own evidence (bundle or live)
    after_end = ""
    after_symptom = ""  # the metric the fix was for (ttft_p95 ...); empty: the one that worsened most
    after_accept = ""   # metrics whose regression is the fix's known cost, comma-separated

With none of ``after_bundle``, ``after_start`` and ``after_end`` the section says it is skipped and
records no finding. Called from the notebook as ``rb.verify_fix(ctx)``.
"""

from __future__ import annotations

from typing import Any

from perfkit.app.runbooks.context import Context, open_incident, section
from perfkit.errors import ConfigError
from perfkit.report.compare_view import TITLE, compare_section, skipped_section

PARAMETERS = ("after_bundle", "after_start", "after_end", "after_symptom", "after_accept")
MAX_TEXT = 1000
"""A parameter longer than any path, time or metric list is a mistake: refused, not read."""


def verify_fix(ctx: Context) -> Any:
    """Compare the incident window with the window after the fix; skipped when none is given."""
    if not any(str(ctx.params.get(k) or "").strip() for k in PARAMETERS[:3]):
        return skipped_section(
            "no after-fix evidence given: set after_bundle (a bundle recorded after the fix) or "
            "after_start/after_end (a window after the fix on this incident's evidence) to see whether it worked"
        )
    return _verify(ctx)


@section("verify_fix", TITLE)
def _verify(ctx: Context) -> Any:
    from perfkit.analyses.compare import judge
    from perfkit.analyses.compare_sides import window_side
    from perfkit.core.incident import make_window

    inc = ctx.incident
    assert inc is not None
    after_bundle, start, end, symptom, accept = (_text(ctx, k) for k in PARAMETERS)
    name = str(ctx.params.get("bundle") or ctx.params.get("prometheus_url") or "the incident")
    before = ctx.need(
        "verify_fix_before", lambda: window_side(ctx.engine, inc.window, name, baseline=inc.baseline)
    )
    if after_bundle:
        scope = {k: str(ctx.params.get(k) or "") for k in ("scope", "hosts")}  # the same workload after
        other = open_incident(after_bundle, start=start, end=end, **scope)
        if other.error or other.incident is None:
            raise ConfigError(f"after_bundle {after_bundle}: {other.error or 'no evidence loaded'}")
        engine, window, source = other.engine, other.incident.window, after_bundle
    else:
        window = make_window(start, end, what="after window (after_start, after_end)")
        engine, source = ctx.engine, f"{name}, {window.as_dict()['start']} to {window.as_dict()['end']}"
    after = window_side(engine, window, source)
    keys = [k.strip() for k in accept.split(",") if k.strip()]
    result = judge(before, after, symptom=symptom or "auto", accept=keys)
    if window.start < inc.window.end and window.end > inc.window.start and not after_bundle:
        result.notes.append(
            "the after window overlaps the incident window: part of the incident is on both sides"
        )
    ctx.results["verify_fix"] = result
    return compare_section(result, after_source=source)


def _text(ctx: Context, key: str) -> str:
    value = ctx.params.get(key)
    text = "" if value is None else str(value).strip()
    if len(text) > MAX_TEXT:
        raise ConfigError(f"{key}: {len(text)} characters, more than {MAX_TEXT}")
    return text
