"""Other serving engines' log lines, as :mod:`perfkit.sources.log_lines` reads them (issue 24).

**SGLang's scheduler lines** (sgl-project/sglang ``python/sglang/srt/managers/scheduler_metrics_mixin.py``,
``log_prefill_stats`` and ``log_decode_stats``; the record prefix is SGLang's ``[%Y-%m-%d %H:%M:%S TP0]``,
a timestamp :func:`~perfkit.sources.log_times.own_time` reads)::

    Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0
    Decode batch. #running-req: 1, #token: 45, token usage: 0.00, gen throughput (token/s): 5.81, #queue-req: 0

Newer SGLang writes ``Prefill batch,`` / ``Decode batch,`` and more fields between these (``cuda graph:
True``, ``#retracted-req``, ``pre-allocated usage``, ``#transfer-req`` ...): the fields are read by name,
in any order, and the unknown ones skipped. A decode line becomes a stats row (``running``,
``waiting`` from ``#queue-req``, KV usage from ``token usage``, generation throughput); a prefill line
one with its running and waiting counts and KV usage (no throughput: SGLang states none for prefills).

**trtllm-serve's command line**: a launcher's echo of ``trtllm-serve serve MODEL --max_batch_size 64
--max_num_tokens 8192 --kv_cache_free_gpu_memory_fraction 0.9 --enable_chunked_prefill`` (flag names:
NVIDIA/TensorRT-LLM ``tensorrt_llm/commands/serve.py``), read by :mod:`perfkit.sources.engine_config`.

**Rust's tracing-subscriber lines** (kind ``tracing``): Hugging Face TGI's launcher and router and NVIDIA
Dynamo's frontend log through ``tracing_subscriber::fmt`` (TGI ``launcher/src/main.rs`` ``.compact()``,
``router/src/logging.rs`` with file and line; Dynamo ``lib/runtime/src/logging.rs``), and Dynamo's Python
workers hand their records (vLLM's, SGLang's, their own) to the same formatter with ``module.funcName`` as
the target (``docs/observability/logging.md``). The line is an RFC 3339 UTC stamp, the level padded to
five characters, the spans and the target each closed by ``": "``, then the message::

    2025-09-02T15:50:01.770358Z  INFO main.get_engine_cache_info: Scheduler config values: {'max_num_seqs': 256, 'max_num_batched_tokens': 2048}
    2024-05-22T19:31:48.302239Z  INFO text_generation_router: router/src/main.rs:378: Connected
    2024-09-02T23:29:59.823812Z ERROR text_generation_launcher: Shard 0 failed to start
    2024-02-14T06:49:24.783316Z  INFO download: text_generation_launcher: Starting download process.

The message is what follows the target (and the router's ``file:line``), so a vLLM line through Dynamo's
handler (``INFO core.__init__: Initializing a V1 LLM engine (v0.10.1) with config: ...``) reads as vLLM's
own message does. Dynamo's JSONL format (``DYN_LOGGING_JSONL``) is a JSON line (kind ``json``).

**TensorRT-LLM's C++ logger** (kind ``trtllm``): ``[TensorRT-LLM][WARNING] message`` (``[TensorRT-LLM][INFO]
[RANK 0]`` with a rank; NVIDIA/TensorRT-LLM ``cpp/include/tensorrt_llm/common/logger.h``), no time of its
own: placed by its stamped neighbours (Triton's glog lines, :mod:`perfkit.sources.log_times`). Triton's
TensorRT-LLM backend says its settings in such lines (``model_instance_state.cc``), read by
:mod:`perfkit.sources.engine_config`.
"""

from __future__ import annotations

import re

import polars as pl

SGLANG_ARGS = "server_args=ServerArgs("  # SGLang's start-up line (sglang/srt/entrypoints/http_server.py)
_NUM = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|nan|inf)"
_BATCH = re.compile(r"\b(Prefill|Decode) batch[.,] ")
_FIELD = re.compile(rf"(#[a-z-]{{1,32}}|token usage|gen throughput \(token/s\)): ({_NUM})")
_MAX_REQS = 10**7  # far above any engine's batch or queue (SGLang's max_running_requests: thousands)
_MAX_FIELDS = 32  # SGLang's lines hold about a dozen
_TRTLLM_FLAG = re.compile(
    r"--(?:max[-_]batch[-_]size|max[-_]num[-_]tokens|kv[-_]cache[-_]free[-_]gpu[-_]memory[-_]fraction"
    r"|enable[-_]chunked[-_]prefill)\b"
)


def sglang_stats(text: str) -> tuple[str, float | None, float | None, int, int, float | None] | None:
    """(batch kind, prompt tokens/s, generation tokens/s, running, waiting, KV usage) of one SGLang
    scheduler line, or None when ``text`` is not one (or lacks its running and queue counts)."""
    m = _BATCH.search(text, 0, 4096)
    if m is None:
        return None
    fields: dict[str, float] = {}
    for k, f in enumerate(_FIELD.finditer(text, m.end(), m.end() + 2048)):
        if k >= _MAX_FIELDS:
            break
        try:
            fields.setdefault(f[1], float(f[2]))
        except ValueError:
            continue
    running, waiting = fields.get("#running-req"), fields.get("#queue-req")
    if running is None or waiting is None or not (0 <= running <= _MAX_REQS and 0 <= waiting <= _MAX_REQS):
        return None  # nan and inf fail the comparison too
    usage = fields.get("token usage")
    gen = fields.get("gen throughput (token/s)") if m[1] == "Decode" else None
    return (
        m[1].lower(),
        None,
        gen,
        int(running),
        int(waiting),
        usage if usage is not None and 0 <= usage <= 1.5 else None,
    )


_NEW_TOKENS = re.compile(r"#new-token: (\d{1,9})\b")
_NEW_SEQ = re.compile(r"#new-seq: (\d{1,7})\b")
_CACHED = re.compile(r"#cached-token: (\d{1,9})\b")
PREFILL_KIND = "sglang_prefill"  # the record kind of a prefill line (perfkit.sources.log_lines)


def prefill_tokens(message: str) -> int | None:
    """The tokens one SGLang prefill batch computed (``#new-token``), or None."""
    m = _NEW_TOKENS.search(message, 0, 4096) if "Prefill batch" in message[:4096] else None
    return int(m[1]) if m else None


def prefill_batches(records: pl.DataFrame | None) -> pl.DataFrame:
    """SGLang's prefill batches in log records (``perfkit.sources.logs``' records): ``ts``, ``new_tokens``,
    ``new_seq`` (the requests it prefilled, a chunked prompt's request counted again with each chunk)
    and ``cached_tokens`` (their prompt tokens the radix cache already held; both null where a line
    lacks the field), in time order; empty when the logs hold none. One batch is one engine step's
    prefill: a prompt SGLang did not chunk is one large batch, which every running decode waits for."""
    schema: dict[str, pl.DataType] = {
        "ts": pl.Datetime("ms", "UTC"), "new_tokens": pl.Int64(), "new_seq": pl.Int64(), "cached_tokens": pl.Int64()
    }  # fmt: skip
    empty = pl.DataFrame(schema=schema)
    if records is None or not records.height or "kind" not in records.columns:
        return empty
    rows = records.filter((pl.col("kind") == PREFILL_KIND) & pl.col("ts").is_not_null())
    if not rows.height:
        return empty
    out = rows.select(
        pl.col("ts").cast(pl.Datetime("ms", "UTC")),
        pl.col("message").str.extract(_NEW_TOKENS.pattern, 1).cast(pl.Int64).alias("new_tokens"),
        pl.col("message").str.extract(_NEW_SEQ.pattern, 1).cast(pl.Int64).alias("new_seq"),
        pl.col("message").str.extract(_CACHED.pattern, 1).cast(pl.Int64).alias("cached_tokens"),
    )
    return out.drop_nulls("new_tokens").sort("ts")


def is_trtllm_launch(text: str) -> bool:
    """A command line that starts ``trtllm-serve`` and sets one of the settings perfkit reads."""
    return "trtllm-serve" in text and "[--" not in text and _TRTLLM_FLAG.search(text, 0, 65536) is not None


# -- tracing-subscriber (TGI, Dynamo) -------------------------------------------------------------------
# "<RFC 3339 stamp> <level padded to 5> <spans and target, each closed by ': '><message>"
# (tracing-subscriber's fmt: " INFO", " WARN", "ERROR", "DEBUG", "TRACE"; one space after the stamp),
# behind srun --label's "0: " where a Slurm job ran it (Dynamo's multinode docs)
TRACING = re.compile(
    r"(?:\d{1,6}: )?(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)) {1,2}"
    r"(?P<level>TRACE|DEBUG|INFO|WARN|ERROR) (?P<rest>.*)"
)
# a span (with its fields), a target (Rust module path, Python module.funcName, TGI's "shard-manager")
# or the router's "file.rs:378", closed by ": ". Only the first part is taken as a target whatever it
# looks like; the parts after it only when they look like one (a path, a dotted name, an identifier
# with "_", "-" or "::"), so a message that starts "Cache config values: ..." keeps its words
_TRACING_PART = re.compile(r"[A-Za-z_][\w.:/-]{0,255}(?:\{[^{}]{0,512}\})?: ")
_TARGET_LIKE = re.compile(
    r"[\w-]{0,255}[._:/-][\w.:/-]{0,255}(?:\{[^{}]{0,512}\})?: |\S{1,255}\.rs:\d{1,9}: "
)
_MAX_TRACING_PARTS = 6


def tracing_line(text: str) -> tuple[str, str, str, str] | None:
    """(stamp, level, target, message) of a tracing-subscriber line, or None when ``text`` is not one."""
    m = TRACING.match(text)
    if m is None:
        return None
    rest, at = m["rest"], 0
    first = _TRACING_PART.match(rest)
    if first is None:
        return None  # no target: not this format
    at = first.end()
    for _ in range(_MAX_TRACING_PARTS):
        part = _TARGET_LIKE.match(rest, at)
        if part is None:
            break
        at = part.end()
    return m["ts"], m["level"], rest[: at - 2], rest[at:]


# -- TensorRT-LLM's C++ logger ---------------------------------------------------------------------------
TRTLLM_TAG = re.compile(r"\[TensorRT-LLM\]\[(TRACE|DEBUG|INFO|WARNING|ERROR)\](?:\[(?:RANK )?\d{1,6}\])? ?")


def trtllm_line(text: str) -> tuple[str, str] | None:
    """(level, message) of a line TensorRT-LLM's C++ logger wrote (``[TensorRT-LLM][WARNING] ...``), or
    None. The message keeps any further tags (an exception's text repeats the prefix)."""
    m = TRTLLM_TAG.match(text) if text.startswith("[TensorRT-LLM][") else None
    return (m[1], text[m.end() :]) if m else None
