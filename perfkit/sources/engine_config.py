"""The serving engine's settings, read from its own start-up log lines and its info metrics.

Six settings decide how a vLLM server trades latency for throughput (:data:`KEYS`):
``chunked_prefill`` (bool), ``max_num_batched_tokens`` (int, the per-step token budget),
``max_num_seqs`` (int, the most sequences in one batch), ``gpu_memory_utilization`` (float in
(0, 1], the share of GPU memory vLLM may take), ``prefix_caching`` (bool) and
``long_prefill_token_threshold`` (int, the most prompt tokens one request gets a step with chunked
prefill; vLLM's ``--long-prefill-token-threshold``, 0 and unset meaning no cap).

Where vLLM says them (upstream sources and versions in ``docs/formats.md``):

==========================  ==================================================================
line (the log record's      what it gives
``message``)
==========================  ==================================================================
engine config               ``Initializing a V1 LLM engine (v0.10.1) with config: model='…', …,
                            enable_prefix_caching=True, chunked_prefill_enabled=True, …``
                            (``VllmConfig.__str__``; V0 says ``a V0 LLM engine``, vLLM 0.6 ``an
                            LLM engine``). The chunked-prefill field is ``chunked_prefill_enabled=``
                            before vLLM PR #28735 (merged Nov 2025; so in 0.6.3, 0.8.5 and 0.10.1)
                            and ``enable_chunked_prefill=`` after it (0.33.0). No batch limit, no
                            memory fraction.
non-default args            ``non-default args: {'model': '…', 'max_num_seqs': 128,
                            'enable_chunked_prefill': False}``: only what the operator changed.
argparse namespace          ``args: Namespace(…, max_num_seqs=None, gpu_memory_utilization=0.9, …)``
                            (the OpenAI server of vLLM 0.6.3 and 0.8.5; 0.10.1 logs the non-default
                            args instead): every argument; ``None`` means "decided later", unknown.
chunked-prefill notice      ``Chunked prefill is enabled with max_num_batched_tokens=2048.``: chunked
                            prefill on, and the budget in force after vLLM's defaults applied.
launch line (kind           a launcher's or orchestrator's echo of the command that started vLLM
``vllm_launch``)            (``python -m vllm.entrypoints.openai.api_server --model m
                            --gpu-memory-utilization 0.8 --enable-prefix-caching``, a k8s ``vllm
                            serve m --enable-chunked-prefill --max_num_batched_tokens 1024`` args
                            list): the flags it sets (``--no-enable-…`` is False; ``_`` spellings too).
==========================  ==================================================================

Other engines say some of the same settings in lines of their own (each read wherever the log record's
``message`` starts with it, so behind a tracing-subscriber target too, :mod:`perfkit.sources.engine_lines`):

==========================  ==================================================================
Dynamo's vLLM worker        vLLM's engine-config line through Dynamo's handler (``INFO core.__init__:
                            Initializing a V1 LLM engine ...``), and ``Scheduler config values:
                            {'max_num_seqs': 256, 'max_num_batched_tokens': 2048}`` (the values in force,
                            ``get_engine_cache_info`` of ai-dynamo/dynamo ``components/src/dynamo/vllm/
                            main.py``; ``docs/observability/logging.md`` shows the line)
TGI                         the shard's ``Using prefix caching = True`` (``server/text_generation_server/
                            models/globals.py``, forwarded by the launcher); chunked prefill
                            (``PREFILL_CHUNKING``) is logged nowhere
Triton (TensorRT-LLM)       the backend's parameter warnings (``model_instance_state.cc``):
                            ``enable_chunked_context is set to true, will use context chunking ...`` (on),
                            ``enable_chunked_context is not specified, will be set to false.`` (off; an
                            explicit false logs nothing), ``enable_kv_cache_reuse is not specified, will
                            be set to true`` (prefix caching on; ``... to false`` in older backends)
==========================  ==================================================================

Only the last start of the server counts: the records are ordered by time (file order among equal
times); the last line of the five kinds above is the anchor, and the lines of its file from the
last start marker at or before it (a launch line, ``vLLM API server version …``, the non-default args
or the namespace line, together with the start markers of other kinds just before it: one start
prints each once) on are read, a later line winning for a key both give, so vLLM's own lines win
over the launcher's echo of its command. A setting the operator
left at its default is often in none of them: it is then absent, not guessed.

vLLM exports one configuration info metric, ``vllm:cache_config_info`` (a gauge set to 1 whose
labels are ``str()`` of every ``CacheConfig`` field, plus ``engine``): it gives
``gpu_memory_utilization`` and ``prefix_caching`` (:data:`INFO_METRICS`). vLLM 0.10.1 and 0.33.0
export no scheduler info metric, so the batch limits and chunked prefill come from logs only.

:func:`engine_config` merges both, logs first, and says where each value came from::

    {"chunked_prefill": {"value": False, "source": "log line vllm.log:12"},
     "gpu_memory_utilization": {"value": 0.9, "source": "metric vllm:cache_config_info"}}

Log lines and label values are hostile input: a value that is not a plain literal of the key's
type, or out of its physical range, is ignored; the scan of a line is linear and bounded.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple, cast

import polars as pl

from perfkit.core.frames import Window, to_ms
from perfkit.engine import ops
from perfkit.engine.signals import Engine, choose_step
from perfkit.sources.engine_lines import SGLANG_ARGS

#: the settings read, in the order results list them
KEYS = (
    "chunked_prefill",
    "max_num_batched_tokens",
    "max_num_seqs",
    "gpu_memory_utilization",
    "prefix_caching",
    "long_prefill_token_threshold",
)

#: vLLM's spellings of each setting (``VllmConfig.__str__``, engine arguments) → key
_ALIASES = {
    "chunked_prefill_enabled": "chunked_prefill",
    "enable_chunked_prefill": "chunked_prefill",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_num_seqs": "max_num_seqs",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "enable_prefix_caching": "prefix_caching",
    "long_prefill_token_threshold": "long_prefill_token_threshold",
}
#: info metric → {label: key}
INFO_METRICS: dict[str, dict[str, str]] = {
    "vllm:cache_config_info": {
        "enable_prefix_caching": "prefix_caching",
        "gpu_memory_utilization": "gpu_memory_utilization",
    },
}

_ENGINE_CONFIG = re.compile(r"Initializing (?:a V[01] |an )LLM engine \(v[^()\s]{1,64}\) with config: ")
_NON_DEFAULT = "non-default args: {"
_NAMESPACE = "args: Namespace("
_NOTICE = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d{1,10})\.")
_STARTED = "vLLM API server version "
_DYNAMO_SCHEDULER = "Scheduler config values: {"  # Dynamo's vLLM worker (get_engine_cache_info)
_TGI_PREFIX = re.compile(r"Using prefix caching = (True|False)\b")  # TGI's shard (models/globals.py)
#: Triton's TensorRT-LLM backend (model_instance_state.cc): the line's start → the settings it says
_TRITON_LINES = {
    "enable_chunked_context is set to true, will use context chunking": {"chunked_prefill": True},
    "enable_chunked_context is not specified, will be set to false.": {"chunked_prefill": False},
    "enable_kv_cache_reuse is not specified, will be set to true": {"prefix_caching": True},
    # an earlier backend, whose default was off, says so
    "enable_kv_cache_reuse is not specified, will be set to false": {"prefix_caching": False},
}
_LITERALS = [
    "with config: ",
    _NON_DEFAULT,
    _NAMESPACE,
    "Chunked prefill is enabled with",
    _STARTED,
    SGLANG_ARGS,
    _DYNAMO_SCHEDULER,
    "Using prefix caching = ",
    *_TRITON_LINES,
]
#: SGLang's ``ServerArgs`` fields (sglang/srt/server_args.py) → key; ``chunked_prefill_size`` is read apart
_SGLANG_ALIASES = {"max_running_requests": "max_num_seqs", "mem_fraction_static": "gpu_memory_utilization"}
#: trtllm-serve's flags (tensorrt_llm/commands/serve.py) → key. ``kv_cache_free_gpu_memory_fraction`` is
#: the share of the memory left after the weights that the KV cache takes: the same lever as vLLM's
#: ``gpu_memory_utilization``, measured from another base, so it is reported under its own name's key
_TRTLLM_ALIASES = {
    "max_batch_size": "max_num_seqs",
    "max_num_tokens": "max_num_batched_tokens",
    "kv_cache_free_gpu_memory_fraction": "gpu_memory_utilization",
    "enable_chunked_prefill": "chunked_prefill",
}

_LAUNCH = "vllm_launch"  # the record kind of a launcher's echo of vLLM's command line (log_lines)
_FLAG_TOKEN = re.compile(r"[^\s,\[\]\"'=]{1,256}")  # a launch line's words, quotes and "=" apart
_BOOLS = {"true": True, "false": False}

_KEY = re.compile(r"'?([A-Za-z_][A-Za-z0-9_]{0,63})'?(?:=|: )")
_INT = re.compile(r"\d{1,10}")
_FLOAT = re.compile(r"\d{0,3}(?:\.\d{1,17})?")
_MAX_INT = 2**31 - 1  # far above any real batch (vLLM's defaults: 256-1024 seqs, 2048-16384 tokens)
_MAX_SCAN = 256 * 2**10  # characters of one line scanned (log lines are capped at 64 KiB anyway)
_CLOSE = {"(": ")", "[": "]", "{": "}"}
_BEFORE_QUOTE = frozenset("=:[({, ")


class _Found(NamedTuple):
    value: bool | int | float
    source: str


# -- public ------------------------------------------------------------------------------------------


def engine_config_from_logs(records: pl.DataFrame | None) -> dict[str, object]:
    """The settings the last start of the engine logged, ``{key: value}`` for the keys found.

    ``records`` has :data:`~perfkit.core.frames.LOG_SCHEMA` (``read_logs(...).records``); the lines
    read and the rule for which start counts are in the module docstring.
    """
    found = _from_logs(records)
    return {key: found[key].value for key in KEYS if key in found}


def engine_config_from_metrics(engine: Engine, window: Window) -> dict[str, object]:
    """The settings vLLM's info metrics carry, ``{key: value}`` for the keys found.

    The series present at the window's end are read (an instant query: a series replaced at a
    restart has gone stale by then); when none is, those present at the last step of a range
    query over the window where any was. Series that disagree on a key (two replicas set
    differently) give no value for it.
    """
    found = _from_metrics(engine, window)
    return {key: found[key].value for key in KEYS if key in found}


def engine_config(
    records: pl.DataFrame | None, engine: Engine | None, window: Window
) -> dict[str, dict[str, object]]:
    """Both sources merged, the logs winning: ``{key: {"value": v, "source": where}}`` in
    :data:`KEYS` order, for the keys found; ``where`` is ``"log line FILE:LINE"`` or
    ``"metric NAME"``. Query errors of a live ``engine`` propagate."""
    found: dict[str, _Found] = {}
    if engine is not None:
        found.update(_from_metrics(engine, window))
    found.update(_from_logs(records))
    return {key: {"value": found[key].value, "source": found[key].source} for key in KEYS if key in found}


_VERSION = re.compile(r"vLLM API server version (v?\d[\w.+-]{0,40})|LLM engine \(v(\d[\w.+-]{0,40})\)")


def engine_version(records: pl.DataFrame | None) -> str | None:
    """The serving engine's version its last start logged (vLLM's ``vLLM API server version 0.10.1`` or
    ``Initializing a V1 LLM engine (v0.10.1)``); None when no line says it."""
    if records is None or not records.height:
        return None
    lines = records.filter(pl.col("message").str.contains("version |LLM engine \\(v")).sort(
        "ts", nulls_last=False
    )
    for msg in reversed(lines["message"].to_list()):
        m = _VERSION.search(str(msg)[:4096])
        if m:
            return (m[1] or m[2]).removeprefix("v")
    return None


# -- logs ------------------------------------------------------------------------------------------------


class _Line(NamedTuple):
    order: tuple[int, int, int]  # (has ts, ts ms, row): the records' time order, file order for ties
    source: str
    line: int
    message: str
    kind: str


def _from_logs(records: pl.DataFrame | None) -> dict[str, _Found]:
    if records is None or not records.height:
        return {}
    hits = (
        records.with_row_index("_row")
        .filter(
            pl.col("message").is_not_null()
            & (pl.col("message").str.contains_any(_LITERALS) | (pl.col("kind") == _LAUNCH))
        )
        .select("_row", "ts", "source", "line", "message", "kind")
    )
    lines = sorted(
        _Line(
            (ts is not None, to_ms(ts) if ts is not None else 0, row), str(src), int(no or 0), msg, str(kind)
        )
        for row, ts, src, no, msg, kind in hits.iter_rows()
    )
    settings = [ln for ln in lines if _settings(ln.message, ln.kind) is not None]
    if not settings:
        return {}
    anchor = settings[-1]
    own = [ln for ln in lines if ln.source == anchor.source and ln.order <= anchor.order]
    found: dict[str, _Found] = {}
    for ln in own[_start(own) :]:
        for key, value in (_settings(ln.message, ln.kind) or {}).items():
            found[key] = _Found(value, f"log line {ln.source}:{ln.line}")
    return found


def _start(own: list[_Line]) -> int:
    """Where the last start in ``own`` begins: its last start marker, and the markers just before it
    that one start prints earlier (the launcher's echo, then vLLM's version line, then its args)."""
    ranks = [_start_rank(ln) for ln in own]
    starts = [i for i, rank in enumerate(ranks) if rank is not None]
    if not starts:
        return 0
    first = starts[-1]
    while first > 0 and (before := ranks[first - 1]) is not None and before < cast(int, ranks[first]):
        first -= 1
    return first


def _start_rank(ln: _Line) -> int | None:
    """The order in which one start prints its markers (None: not a start marker)."""
    if ln.kind == _LAUNCH:
        return 0
    return (
        1
        if ln.message.startswith(_STARTED)
        else 2
        if ln.message.startswith((_NON_DEFAULT, _NAMESPACE)) or SGLANG_ARGS in ln.message
        else None
    )


def _settings(message: str, kind: str = "vllm") -> dict[str, bool | int | float] | None:
    """The settings one line states (maybe none), or None when it is not a settings line."""
    if kind == _LAUNCH:
        return _flags(message)
    at = message.find(SGLANG_ARGS, 0, 512)
    if at >= 0:
        return _sglang(message, at + len(SGLANG_ARGS))
    notice = _NOTICE.match(message)
    if notice is not None:
        tokens = _int_value(notice[1])
        return {"chunked_prefill": True, **({"max_num_batched_tokens": tokens} if tokens else {})}
    if message.startswith(_NON_DEFAULT):
        return _parse_items(message, len(_NON_DEFAULT), nested=True)
    if message.startswith(_DYNAMO_SCHEDULER):
        return _parse_items(message, len(_DYNAMO_SCHEDULER), nested=True)
    if (tgi := _TGI_PREFIX.match(message)) is not None:
        return {"prefix_caching": tgi[1] == "True"}
    for start, said in _TRITON_LINES.items():
        if message.startswith(start):
            return dict(said)
    if message.startswith(_NAMESPACE):
        return _parse_items(message, len(_NAMESPACE), nested=True)
    m = _ENGINE_CONFIG.match(message)
    if m is not None:
        return _parse_items(message, m.end(), nested=False)
    return None


def _parse_items(text: str, start: int, *, nested: bool) -> dict[str, bool | int | float]:
    """The known settings among the top-level ``key=value`` / ``'key': value`` items of ``text``
    from ``start`` (inside a ``{...}``/``(...)`` that a closer ends when ``nested``)."""
    out: dict[str, bool | int | float] = {}
    for item in _top_level_items(text, start, nested=nested):
        m = _KEY.match(item)
        key = _ALIASES.get(m[1]) if m else None
        if m is None or key is None:
            continue
        token = item[m.end() :].split(None, 1)[0] if item[m.end() :].strip() else ""
        value = _typed(key, token.rstrip("."))
        if value is not None:
            out[key] = value
    return out


def _sglang(text: str, start: int) -> dict[str, bool | int | float]:
    """The settings of SGLang's ``server_args=ServerArgs(...)`` line: ``chunked_prefill_size`` -1 (or 0)
    is chunked prefill off, a size is on with that per-step budget; ``disable_radix_cache`` is the prefix
    cache's negation; ``None`` (decided later) gives nothing."""
    out: dict[str, bool | int | float] = {}
    for item in _top_level_items(text, start, nested=True):
        m = _KEY.match(item)
        if m is None:
            continue
        token = item[m.end() :].strip().split(None, 1)[0] if item[m.end() :].strip() else ""
        if m[1] == "chunked_prefill_size":
            size = _int_value(token)
            if token in ("-1", "0"):
                out["chunked_prefill"] = False
            elif size is not None:
                out["chunked_prefill"], out["max_num_batched_tokens"] = True, size
        elif m[1] == "disable_radix_cache" and token in ("True", "False"):
            out["prefix_caching"] = token == "False"
        elif (key := _SGLANG_ALIASES.get(m[1])) is not None and (value := _typed(key, token)) is not None:
            out[key] = value
    return out


def _flags(text: str) -> dict[str, bool | int | float]:
    """The settings among the ``--flag value`` / ``--flag=value`` / bare ``--flag`` of a command line.
    trtllm-serve's chunked prefill is off unless ``--enable_chunked_prefill`` is given (its ``LlmArgs``
    default), but an ``--extra_llm_api_options`` file may turn it on: then it stays unknown."""
    out: dict[str, bool | int | float] = {}
    words = _FLAG_TOKEN.findall(text, 0, _MAX_SCAN)
    trtllm = "trtllm-serve" in words
    aliases = _TRTLLM_ALIASES if trtllm else _ALIASES
    if trtllm and "--extra_llm_api_options" not in words and "--extra-llm-api-options" not in words:
        out["chunked_prefill"] = False
    for i, word in enumerate(words):
        name = word[2:].replace("-", "_") if word.startswith("--") else ""
        negated = name.startswith("no_")
        key = aliases.get(name[3:] if negated else name)
        if key is None:
            continue
        after = words[i + 1] if i + 1 < len(words) else ""
        value: bool | int | float | None
        if key in ("chunked_prefill", "prefix_caching"):  # a bare flag is on; old vLLM took "True"/"False"
            value = False if negated else _BOOLS.get(after.lower(), True)
        else:
            value = None if negated else _typed(key, after)
        if value is not None:
            out[key] = value
    return out


def _top_level_items(text: str, start: int, *, nested: bool) -> Iterator[str]:
    """Items separated by commas outside brackets and quotes, stripped; one pass, bounded."""
    end = min(len(text), start + _MAX_SCAN)
    stack: list[str] = []
    quote = ""
    item_start = start
    i = start
    while i < end:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"" and (i == start or text[i - 1] in _BEFORE_QUOTE):
            quote = ch  # a Python repr string starts right after a delimiter; "o'clock" does not
        elif ch in _CLOSE:
            stack.append(_CLOSE[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
        elif not stack and ch in ")]}":
            if nested:
                break
        elif ch == "," and not stack:
            yield text[item_start:i].strip()
            item_start = i + 1
        i += 1
    yield text[item_start:i].strip()


def _typed(key: str, token: str) -> bool | int | float | None:
    """``token`` as the key's type, or None when it is not a plain, physically possible value."""
    if key in ("chunked_prefill", "prefix_caching"):
        return {"True": True, "False": False}.get(token)
    if key == "gpu_memory_utilization":
        if len(token) > 24 or not _FLOAT.fullmatch(token) or token in ("", "."):
            return None
        share = float(token)
        return share if 0 < share <= 1 else None  # vLLM refuses anything outside (0, 1]
    return _int_value(token)


def _int_value(token: str) -> int | None:
    if not _INT.fullmatch(token):
        return None
    value = int(token)
    return value if 0 < value <= _MAX_INT else None


# -- metrics ---------------------------------------------------------------------------------------------


def _from_metrics(engine: Engine, window: Window) -> dict[str, _Found]:
    found: dict[str, _Found] = {}
    for name, labels in INFO_METRICS.items():
        if not engine.has(name):
            continue
        frame = engine.instant(ops.Selector(name), window.end)
        if not frame.height:  # gone by the end (server down): the series of the last step it was seen
            frame = engine.range(ops.Selector(name), window.start, window.end, choose_step(window))
            if frame.height:
                frame = frame.filter(pl.col("ts") == pl.col("ts").max())
        for label, key in labels.items():
            if key in found or label not in frame.columns:
                continue
            typed = (_typed(key, str(v)[:64]) for v in frame[label].to_list() if v is not None)
            values = {v for v in typed if v is not None}
            if len(values) == 1:
                found[key] = _Found(values.pop(), f"metric {name}")
    return found
