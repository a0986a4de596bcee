"""What a row cannot check on the incident's serving engine, in words (issue 35: rows on every engine's
signals).

A row whose preferred signal is missing from a window says what is missing. Where the engine whose
series answered does not export that signal at all (its catalogue in :mod:`perfkit.engine.dialects`
has no name for it: TGI has no TTFT histogram, Dynamo's frontend no queue-time histogram), no capture
or window would bring it, and the row says so: "cannot check on TGI: it exports no TTFT histogram",
with the flag that turns it on where one does (SGLang's ``--collect-tokens-histogram``).
"""

from __future__ import annotations

from perfkit.engine.dialects import BY_NAME, Dialect
from perfkit.triage.evidence import Evidence

#: a signal as a person names what is missing
WHAT = {
    "ttft": "TTFT histogram",
    "itl": "inter-token-latency histogram",
    "tpot": "per-request TPOT histogram",
    "e2e": "request-latency histogram",
    "queue": "queue-time histogram",
    "prefill": "prefill-time histogram",
    "prompt_tokens": "prompt-length histogram",
    "waiting": "gauge of requests waiting",
    "running": "gauge of requests running",
    "kv_cache_usage": "KV-cache usage",
    "preemptions": "preemption counter",
    "prefix_cache_hits": "prefix-cache hit counter",
}

#: engines whose series are a router's, not the process that runs the model: its out-of-memory errors
#: are in the model's workers' logs (the catalogue's engine name → where they are)
MODEL_ELSEWHERE = {
    "dynamo": "its workers run the model, and their out-of-memory errors are in the workers' logs",
}

#: what :func:`cannot` begins with: the table gives such a gap verbatim, not as "missing ..."
CANNOT = "cannot check on "


def _exports(d: Dialect, signal: str) -> bool:
    return signal in d.histograms or signal in d.gauges or signal in d.counters


def lacking(ev: Evidence, *signals: str) -> list[str]:
    """Those of ``signals`` the incident's serving engine exports under no name ([] when the engine is
    unknown: then nothing is known to be lacking)."""
    d = BY_NAME.get(ev.serving_engine or "")
    return [s for s in signals if d is not None and not _exports(d, s)]


def cannot(ev: Evidence, *signals: str, every: bool = True) -> str | None:
    """``cannot check on ENGINE: it exports no X (and no Y)`` when the engine lacks ``signals`` (all of
    them, or with ``every=False`` any), with the flag that turns one on; None when it exports them (a
    gap in a window is then only missing evidence)."""
    lacks = lacking(ev, *signals)
    if not lacks or (every and len(lacks) < len(signals)):
        return None
    d = BY_NAME[ev.serving_engine or ""]
    flags = [d.flags[s] for s in lacks if s in d.flags]
    text = f"{CANNOT}{d.title}: it exports no {' and no '.join(WHAT.get(s, s) for s in lacks)}"
    return text + (f" ({'; '.join(flags)})" if flags else "")


def absent(ev: Evidence, signal: str) -> str:
    """Why ``signal``'s value is not in the evidence, in words: the engine exports none (:func:`cannot`),
    or only from a part of it that was not scraped (its catalogue's note: the Dynamo frontend's KV usage
    is its workers'), or the window holds none."""
    lack = cannot(ev, signal)
    if lack:
        return lack
    d = BY_NAME.get(ev.serving_engine or "")
    if d is not None and signal in d.flags:
        return f"{CANNOT}{d.title}: {d.flags[signal]}"
    return f"no {WHAT.get(signal, signal)} in the evidence"
