"""TGI's, Dynamo's and Triton's log lines (issue 35): real lines from the engines' own documentation
(tests/data/engines/SOURCES.md), and lines composed from the format strings of the engines' source where
no real one is published under a licence we can copy."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from perfkit.core.frames import Window
from perfkit.sources.engine_config import engine_config_from_logs, engine_version
from perfkit.sources.engine_lines import tracing_line, trtllm_line
from perfkit.sources.logs import parse_lines

DATA = Path(__file__).resolve().parents[1] / "data" / "engines"


def _parse(lines: list[str], year: int = 2025, source: str = "engine.log"):
    window = Window(datetime(year, 1, 1, tzinfo=UTC), datetime(year, 12, 31, tzinfo=UTC))
    return parse_lines(lines, window=window, source=source)


def _real(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()


def test_tracing_subscriber_lines_are_records_at_their_own_time():
    """Dynamo's worker and frontend lines and TGI's router line (tracing-subscriber's format, the
    documented ones): every line a record at its stamp, its level, its message without the target."""
    lines = _real("tracing_log_lines.txt")
    got = _parse(lines)
    assert got.unknown == 0 and got.records.height == len(lines)
    rows = got.records.rows(named=True)
    assert rows[0]["kind"] == "tracing" and rows[0]["level"] == "INFO"
    assert rows[0]["ts"] == datetime(2025, 9, 2, 15, 50, 1, 770000, tzinfo=UTC)
    assert rows[0]["message"] == "VllmWorker for Qwen/Qwen3-0.6B has been initialized"
    # Dynamo's JSONL lines ("time", "level", "message") are JSON records
    assert [r["kind"] for r in rows[5:10]] == ["json"] * 5
    # behind srun --label's "0: " (Dynamo's multinode docs), the frontend's Rust targets
    assert rows[10]["message"] == "Watching for remote model at models"
    assert rows[11]["message"].startswith("Starting HTTP service on: 0.0.0.0:8000")
    assert rows[12]["ts"] == datetime(2025, 6, 13, 2, 46, 35, 40000, tzinfo=UTC)
    # TGI's router writes the file and line after its target
    assert rows[13]["message"] == "Connected" and rows[13]["ts"].year == 2024
    assert got.notes == []  # every line carries its own time


@pytest.mark.parametrize(
    ("line", "level", "target", "message"),
    [
        # tracing-subscriber pads the level to five characters: ERROR and DEBUG take one space after the stamp
        (
            "2026-11-25T13:23:19.914252Z ERROR text_generation_launcher: Shard 0 crashed",
            "ERROR",
            "text_generation_launcher",
            "Shard 0 crashed",
        ),
        # TGI's launcher (compact format): a span before the target
        (
            "2026-11-25T13:00:00.000000Z  INFO shard-manager: text_generation_launcher: Starting shard rank=0",
            "INFO",
            "shard-manager: text_generation_launcher",
            "Starting shard rank=0",
        ),
        # a message with a colon of its own keeps it
        (
            "2025-09-02T15:50:01.770316Z  INFO main.get_engine_cache_info: Cache config values: {'num_gpu_blocks': 1}",
            "INFO",
            "main.get_engine_cache_info",
            "Cache config values: {'num_gpu_blocks': 1}",
        ),
    ],
)
def test_tracing_line_parts(line, level, target, message):
    assert tracing_line(line)[1:] == (level, target, message)


@pytest.mark.parametrize(
    "line",
    [
        "2025-09-02 15:50:01,770 INFO main.init: Python logging's default stamp, not tracing's",
        "2025-09-02T15:50:01Z  INFO no target here",
        "2025-09-02T15:50:01Z NOTICE target: not a tracing level",
    ],
)
def test_not_tracing_lines(line):
    assert tracing_line(line) is None


def test_dynamo_worker_settings_from_its_lines():
    """Dynamo's vLLM worker: the scheduler values it logs (the documented line), and vLLM's engine-config
    line handed to Dynamo's formatter (``INFO core.__init__: ...``, composed of the documented stamp and
    target form around vLLM's own message), read as vLLM's own line is."""
    readable = _real("tracing_log_lines.txt")[:5]
    assert engine_config_from_logs(_parse(readable).records) == {
        "max_num_batched_tokens": 2048,
        "max_num_seqs": 256,
    }
    jsonl = _real("tracing_log_lines.txt")[5:10]
    assert engine_config_from_logs(_parse(jsonl).records) == {
        "max_num_batched_tokens": 2048,
        "max_num_seqs": 256,
    }
    engine = (
        "2025-09-02T15:49:58.120911Z  INFO core.__init__: Initializing a V1 LLM engine (v0.10.1) with config: "
        "model='Qwen/Qwen3-0.6B', speculative_config=None, tokenizer='Qwen/Qwen3-0.6B', dtype=torch.bfloat16, "
        "max_seq_len=40960, tensor_parallel_size=1, seed=0, served_model_name=Qwen/Qwen3-0.6B, "
        "enable_prefix_caching=True, chunked_prefill_enabled=False, use_async_output_proc=True"
    )
    records = _parse([engine, *readable]).records
    assert engine_config_from_logs(records) == {
        "chunked_prefill": False,
        "max_num_batched_tokens": 2048,
        "max_num_seqs": 256,
        "prefix_caching": True,
    }
    assert engine_version(records) == "0.10.1"


def test_tgi_prefix_caching_from_its_shard_line():
    """TGI's shard says ``Using prefix caching = False`` (models/globals.py), forwarded by the launcher."""
    lines = [
        "2026-11-25T13:00:00.300000Z  INFO text_generation_launcher: Using prefix caching = False",
        "2026-11-25T13:00:00.300000Z  INFO text_generation_launcher: Using Attention = flashinfer",
    ]
    assert engine_config_from_logs(_parse(lines, 2026).records) == {"prefix_caching": False}


# TensorRT-LLM's C++ logger prefix (cpp/include/tensorrt_llm/common/logger.h: "%s[%s] " of "[TensorRT-LLM]"
# and the level), its CUDA check (cudaUtils.h: "[TensorRT-LLM][ERROR] CUDA runtime error in %s: %s") on
# the allocation in tllmBuffers.h, and the executor's wrapper (executor.cpp: "Encountered an error in
# forwardAsync function: "): the line NVIDIA/TensorRT-LLM#2335 and #3636 show
TRTLLM_OOM = (
    "[TensorRT-LLM][ERROR] Encountered an error in forwardAsync function: [TensorRT-LLM][ERROR] CUDA runtime "
    "error in ::cudaMallocAsync(ptr, n, mMemPool->getPool(), mCudaStream->get()): out of memory "
    "(/src/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:125)"
)


@pytest.mark.parametrize(
    "line",
    [
        TRTLLM_OOM,
        # the model's load, before the memory pool (tllmBuffers.h's older allocation)
        "[TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mCudaStream->get()): out of memory "
        "(/app/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:112)",
    ],
)
def test_tensorrt_llm_out_of_memory_is_a_cuda_oom(line):
    got = _parse([line])
    assert got.records["kind"].to_list() == ["cuda_oom"] and got.records["level"].to_list() == ["ERROR"]


@pytest.mark.parametrize(
    "line",
    [
        "[TensorRT-LLM][ERROR] CUDA runtime error in cudaMemcpyAsync(dst, src.data(), n): invalid argument",
        "[TensorRT-LLM][WARNING] the KV cache may run out of memory if max_tokens_in_paged_kv_cache is large",
    ],
)
def test_other_tensorrt_llm_errors_are_not(line):
    assert "cuda_oom" not in _parse([line]).records["kind"].to_list()


def test_triton_lines_placed_by_its_glog_stamps_and_its_settings():
    """Triton's glog lines (a real start of Triton with the TensorRT-LLM backend) carry the time; the
    backend's ``[TensorRT-LLM][...]`` lines carry none and take the stamp of the line before; its
    parameter warnings (model_instance_state.cc) say chunked context and KV-cache reuse."""
    glog = _real("triton_log_lines.txt")
    lines = [
        glog[0],
        "[TensorRT-LLM][WARNING] enable_chunked_context is not specified, will be set to false.",
        "[TensorRT-LLM][WARNING] enable_kv_cache_reuse is not specified, will be set to true",
        glog[1],
        glog[2],
        TRTLLM_OOM,
    ]
    got = _parse(lines, 2025, "tritonserver.log")
    records = got.records
    assert records["kind"].to_list() == ["trtllm", "trtllm", "cuda_oom"]
    assert records["level"].to_list() == ["WARNING", "WARNING", "ERROR"]
    first, last = (datetime(2025, 5, 3, 22, 1, 25, ms, tzinfo=UTC) for ms in (210000, 254000))
    assert records["ts"].to_list() == [first, first, last]
    assert records.filter(pl.col("kind") == "trtllm")["message"][0].startswith("enable_chunked_context")
    assert got.notes and "tritonserver.log: 2 lines without a time of their own" in got.notes[0]
    assert "1 line after the last timestamped line" in got.notes[0]  # the OOM: Triton logged nothing after it
    assert engine_config_from_logs(records) == {"chunked_prefill": False, "prefix_caching": True}
    on = "[TensorRT-LLM][WARNING] enable_chunked_context is set to true, will use context chunking (requires building the model with use_paged_context_fmha)."
    assert engine_config_from_logs(_parse([glog[0], on]).records) == {"chunked_prefill": True}


def test_trtllm_line_with_a_rank():
    assert trtllm_line("[TensorRT-LLM][INFO][3] Loaded engine size: 777 MiB") == (
        "INFO",
        "Loaded engine size: 777 MiB",
    )
    assert trtllm_line("[TRT-LLM] [I] the Python logger, not this one") is None


@pytest.mark.parametrize(
    "line",
    [
        "CUDA runtime error in " * 2900 + " out of memory",
        "[TensorRT-LLM][ERROR] CUDA runtime error in " + "(" * 65000 + ": out of memory",
        "2025-09-02T15:50:01Z  INFO " + "a.b: " * 13000,
        "2025-09-02T15:50:01Z  INFO a: " + "-" * 65000 + ": ",
        "2025-09-02T15:50:01Z  INFO a{" + "x{" * 30000,
    ],
)
def test_hostile_lines_are_read_in_linear_time(line):
    """Log lines are hostile input (a 64 KiB line): the new patterns never rescan a line from every position."""
    import time

    start = time.perf_counter()
    _parse([line])
    assert time.perf_counter() - start < 1.0
