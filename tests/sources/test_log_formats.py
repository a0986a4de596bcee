"""Every log parser against the upstream format it claims (docs/formats.md).

Each sample is the upstream format string rendered with plausible values, byte for byte in its
fixed parts; the comment above it names the repository, file and version (tag, wheel or commit)
the format was read from. A test asserts on what perfkit parsed out of the line (kind, level,
time, figures, settings), never on text perfkit wrote.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from perfkit.core.frames import TS_DTYPE, MetricStore, Window, sort_series
from perfkit.engine.local import LocalEngine
from perfkit.sources.engine_config import engine_config, engine_config_from_logs, engine_config_from_metrics
from perfkit.sources.logs import LogResult, parse_lines

NOV30 = Window(datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 11, 30, 4, tzinfo=UTC))
AUG10 = Window(datetime(2026, 8, 10, tzinfo=UTC), datetime(2026, 8, 10, 6, tzinfo=UTC))


def at(hh: int, mm: int, ss: int, ms: int = 0, *, month: int = 11, day: int = 30) -> datetime:
    return datetime(2026, month, day, hh, mm, ss, ms * 1000, tzinfo=UTC)


def parse(*lines: str, window: Window = NOV30) -> LogResult:
    return parse_lines(lines, window=window, source="vllm.log")


def kinds(result: LogResult) -> list[tuple[object, ...]]:
    """(ts, line, kind, level) of every record."""
    return result.records.select("ts", "line", "kind", "level").rows()


def stats(result: LogResult) -> list[dict[str, object]]:
    return result.stats.to_dicts()


# -- vLLM stats lines -------------------------------------------------------------------------------


def test_vllm_v1_stats_line_v0_10_1():
    # vllm-project/vllm v0.10.1 (wheel, commit aab549870) vllm/v1/metrics/loggers.py:123
    # LoggingStatLogger.log, through vllm/logger.py _FORMAT and vllm/utils decorate_logs' prefix
    result = parse(
        "(APIServer pid=7) INFO 11-30 00:10:05 [loggers.py:123] Engine 000: Avg prompt throughput: "
        "1234.5 tokens/s, Avg generation throughput: 456.7 tokens/s, Running: 24 reqs, Waiting: 5 reqs, "
        "GPU KV cache usage: 73.1%, Prefix cache hit rate: 33.2%"
    )
    assert kinds(result) == [(at(0, 10, 5), 1, "vllm_stats", "INFO")]
    [row] = stats(result)
    assert (row["engine"], row["running"], row["waiting"], row["preemptions"]) == ("0", 24, 5, None)
    assert row["prompt_tokens_per_s"] == pytest.approx(1234.5)
    assert row["generation_tokens_per_s"] == pytest.approx(456.7)
    assert row["kv_cache_usage_frac"] == pytest.approx(0.731)
    assert row["prefix_cache_hit_frac"] == pytest.approx(0.332)


def test_vllm_v1_stats_line_v0_33_0_with_new_parts_and_aggregated_engines():
    # vllm-project/vllm v0.33.0 (wheel, commit 4ba787ec9) vllm/v1/metrics/loggers.py:335
    # LoggingStatLogger.log: optional "Deferred", "Preemptions" and "External prefix cache hit rate"
    # parts; AggregatedLoggingStatLogger.log_prefix "2 Engines Aggregated: "
    result = parse(
        "(APIServer pid=7) INFO 11-30 00:10:05 [loggers.py:335] Engine 001: Avg prompt throughput: 10.0 "
        "tokens/s, Avg generation throughput: 200.0 tokens/s, Running: 8 reqs, Waiting: 3 reqs, Deferred: "
        "1 reqs, Preemptions: 2, GPU KV cache usage: 91.5%, Prefix cache hit rate: 40.0%, External prefix "
        "cache hit rate: 5.0%",
        "(APIServer pid=7) INFO 11-30 00:10:15 [loggers.py:335] 2 Engines Aggregated: Avg prompt "
        "throughput: 20.0 tokens/s, Avg generation throughput: 400.0 tokens/s, Running: 16 reqs, Waiting: "
        "0 reqs, GPU KV cache usage: 50.0%",
    )
    assert [k[2] for k in kinds(result)] == ["vllm_stats", "vllm_stats"]
    first, aggregated = stats(result)
    assert (first["engine"], first["running"], first["waiting"], first["preemptions"]) == ("1", 8, 3, 2)
    assert first["kv_cache_usage_frac"] == pytest.approx(0.915)
    assert first["prefix_cache_hit_frac"] == pytest.approx(0.40)  # not the external cache's 5 %
    assert (aggregated["engine"], aggregated["running"]) == ("all", 16)
    assert aggregated["prefix_cache_hit_frac"] is None  # vLLM leaves the part out when no query ran


def test_vllm_v0_stats_lines_old_logging_format():
    # vllm-project/vllm v0.6.3 (wheel) vllm/engine/metrics.py:345 and :361 LoggingStatLogger.log (the
    # same two lines in v0.10.1's V0 engine), vllm/logger.py _FORMAT "%(levelname)s %(asctime)s
    # %(filename)s:%(lineno)d] %(message)s" (no bracket before the file name)
    result = parse(
        "INFO 11-30 00:10:05 metrics.py:345] Avg prompt throughput: 512.0 tokens/s, Avg generation "
        "throughput: 64.3 tokens/s, Running: 12 reqs, Swapped: 0 reqs, Pending: 7 reqs, GPU KV cache "
        "usage: 81.4%, CPU KV cache usage: 0.0%.",
        "INFO 11-30 00:10:05 metrics.py:361] Prefix cache hit rate: GPU: 45.67%, CPU: 0.00%",
    )
    assert kinds(result) == [(at(0, 10, 5), 1, "vllm_stats", "INFO"), (at(0, 10, 5), 2, "vllm", "INFO")]
    [row] = stats(result)
    assert (row["engine"], row["running"], row["waiting"]) == ("0", 12, 7)
    assert row["kv_cache_usage_frac"] == pytest.approx(0.814)  # the GPU figure, not the CPU one
    assert row["prefix_cache_hit_frac"] == pytest.approx(0.4567)  # from the line after it


def test_v0_prefix_line_far_from_its_stats_line_is_not_attached():
    result = parse(
        "INFO 11-30 00:10:05 metrics.py:345] Avg prompt throughput: 512.0 tokens/s, Avg generation "
        "throughput: 64.3 tokens/s, Running: 12 reqs, Swapped: 0 reqs, Pending: 7 reqs, GPU KV cache "
        "usage: 81.4%, CPU KV cache usage: 0.0%.",
        "INFO 11-30 00:10:15 metrics.py:361] Prefix cache hit rate: GPU: 45.67%, CPU: 0.00%",
    )
    assert stats(result)[0]["prefix_cache_hit_frac"] is None


def test_vllm_json_logging():
    # vllm-project/vllm v0.33.0 (wheel) vllm/logging_utils/formatter.py JSON_FORMAT "%(asctime)s
    # %(levelname)s %(name)s %(processName)s %(process)d %(message)s" through
    # pythonjsonlogger.jsonlogger.JsonFormatter (vllm/logger.py), one JSON object per line
    result = parse(
        '{"asctime": "2026-11-30 00:10:05,123", "levelname": "INFO", "name": "vllm.v1.metrics.loggers", '
        '"processName": "MainProcess", "process": 7, "message": "Engine 000: Avg prompt throughput: 0.0 '
        "tokens/s, Avg generation throughput: 88.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV "
        'cache usage: 2.5%, Prefix cache hit rate: 0.0%"}'
    )
    assert kinds(result) == [(at(0, 10, 5, 123), 1, "vllm_stats", "INFO")]
    assert stats(result)[0]["generation_tokens_per_s"] == pytest.approx(88.0)


# -- vLLM engine settings -----------------------------------------------------------------------------

# vllm-project/vllm v0.10.1 (wheel, commit aab549870) vllm/config/__init__.py VllmConfig.__str__,
# logged by vllm/v1/engine/core.py:74 "Initializing a V1 LLM engine (v%s) with config: %s"
# (compilation_config's JSON, a few KiB, shortened to its first fields)
CONFIG_0_10_1 = (
    "(EngineCore_0 pid=212) INFO 11-30 00:01:03 [core.py:74] Initializing a V1 LLM engine (v0.10.1) with "
    "config: model='meta-llama/Llama-3.1-8B-Instruct', speculative_config=None, "
    "tokenizer='meta-llama/Llama-3.1-8B-Instruct', skip_tokenizer_init=False, tokenizer_mode=auto, "
    "revision=None, override_neuron_config={}, tokenizer_revision=None, trust_remote_code=False, "
    "dtype=torch.bfloat16, max_seq_len=131072, download_dir=None, load_format=auto, "
    "tensor_parallel_size=1, pipeline_parallel_size=1, disable_custom_all_reduce=False, "
    "quantization=None, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, "
    "decoding_config=DecodingConfig(backend='auto', disable_fallback=False, disable_any_whitespace=False, "
    "disable_additional_properties=False, reasoning_backend=''), "
    "observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, "
    "otlp_traces_endpoint=None, collect_detailed_traces=None), seed=0, "
    "served_model_name=meta-llama/Llama-3.1-8B-Instruct, enable_prefix_caching=True, "
    "chunked_prefill_enabled=True, use_async_output_proc=True, pooler_config=None, "
    'compilation_config={"level":3,"debug_dump_path":"","cache_dir":"","backend":"","custom_ops":[],'
    '"splitting_ops":["vllm.unified_attention","vllm.unified_attention_with_output"],"use_inductor":true}'
)


def test_engine_config_line_v0_10_1():
    result = parse(CONFIG_0_10_1)
    assert kinds(result) == [(at(0, 1, 3), 1, "vllm", "INFO")]
    assert engine_config_from_logs(result.records) == {"chunked_prefill": True, "prefix_caching": True}


def test_engine_config_line_v0_33_0_says_enable_chunked_prefill():
    # vllm-project/vllm v0.33.0 (wheel, commit 4ba787ec9) vllm/config/vllm.py:2840 VllmConfig.__str__
    # (renamed by vLLM PR #28735, Nov 2025), logged by vllm/v1/engine/core.py:139; the fields between
    # tokenizer= and served_model_name=, and compilation_config= and kernel_config= after
    # pooler_config=, are left out here
    result = parse(
        "(EngineCore pid=3101) INFO 11-30 00:01:03 [core.py:139] Initializing a V1 LLM engine (v0.33.0) "
        "with config: model='Qwen/Qwen3-8B', speculative_config=None, tokenizer='Qwen/Qwen3-8B', "
        "served_model_name=Qwen/Qwen3-8B, enable_prefix_caching=False, enable_chunked_prefill=False, "
        "pooler_config=None"
    )
    assert engine_config_from_logs(result.records) == {"chunked_prefill": False, "prefix_caching": False}


def test_engine_config_line_v0_6_3_without_a_comma_after_the_chunked_flag():
    # vllm-project/vllm v0.6.3 (wheel) vllm/engine/llm_engine.py:237 "Initializing an LLM engine (v%s)
    # with config: ... num_scheduler_steps=%d, chunked_prefill_enabled=%s multi_step_stream_outputs=%s,
    # enable_prefix_caching=%s, ... mm_processor_kwargs=%s)"
    result = parse(
        "INFO 11-30 00:01:03 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: "
        "model='mistralai/Mistral-7B-Instruct-v0.3', speculative_config=None, tokenizer='mistralai/"
        "Mistral-7B-Instruct-v0.3', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
        "override_neuron_config=None, rope_scaling=None, rope_theta=None, tokenizer_revision=None, "
        "trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=32768, download_dir=None, "
        "load_format=LoadFormat.AUTO, tensor_parallel_size=1, pipeline_parallel_size=1, "
        "disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto, "
        "quantization_param_path=None, device_config=cuda, decoding_config=DecodingConfig("
        "guided_decoding_backend='outlines'), observability_config=ObservabilityConfig("
        "otlp_traces_endpoint=None, collect_model_forward_time=False, collect_model_execute_time=False), "
        "seed=0, served_model_name=mistralai/Mistral-7B-Instruct-v0.3, use_v2_block_manager=True, "
        "num_scheduler_steps=1, chunked_prefill_enabled=False multi_step_stream_outputs=True, "
        "enable_prefix_caching=True, use_async_output_proc=True, use_cached_outputs=True, "
        "mm_processor_kwargs=None)"
    )
    assert engine_config_from_logs(result.records) == {"chunked_prefill": False, "prefix_caching": True}


# vllm-project/vllm v0.10.1 (wheel) vllm/entrypoints/openai/api_server.py:1805 and
# vllm/entrypoints/utils.py:326 log_non_default_args "non-default args: %s" (a dict's repr)
VERSION_0_10_1 = "(APIServer pid=7) INFO 11-30 00:01:00 [api_server.py:1805] vLLM API server version 0.10.1"
NON_DEFAULT_0_10_1 = (
    "(APIServer pid=7) INFO 11-30 00:01:00 [utils.py:326] non-default args: {'model_tag': "
    "'meta-llama/Llama-3.1-8B-Instruct', 'host': '0.0.0.0', 'model': 'meta-llama/Llama-3.1-8B-Instruct', "
    "'max_model_len': 32768, 'gpu_memory_utilization': 0.92, 'enable_prefix_caching': True, "
    "'max_num_batched_tokens': 8192, 'max_num_seqs': 128, 'enable_chunked_prefill': True, "
    "'hf_overrides': {'rope_scaling': {'rope_type': 'yarn', 'factor': 4.0}}}"
)
# vllm-project/vllm v0.10.1 (wheel) vllm/config/scheduler.py:222 SchedulerConfig.__post_init__
NOTICE_0_10_1 = (
    "(APIServer pid=7) INFO 11-30 00:01:01 [scheduler.py:222] "
    "Chunked prefill is enabled with max_num_batched_tokens=8192."
)


def test_non_default_args_line_and_chunked_prefill_notice():
    result = parse(VERSION_0_10_1, NON_DEFAULT_0_10_1, NOTICE_0_10_1)
    assert [k[2:] for k in kinds(result)] == [("vllm", "INFO")] * 3
    assert engine_config_from_logs(result.records) == {
        "chunked_prefill": True,
        "max_num_batched_tokens": 8192,
        "max_num_seqs": 128,
        "gpu_memory_utilization": 0.92,
        "prefix_caching": True,
    }


def test_argparse_namespace_line():
    # vllm-project/vllm v0.6.3 (wheel) vllm/entrypoints/openai/api_server.py:529 logger.info("args: %s",
    # args); v0.8.5's api_server.py:1044 logs the same; every argument (abridged here to a few of
    # about 150), None where vLLM decides later
    result = parse(
        "INFO 11-30 00:01:00 api_server.py:529] args: Namespace(host=None, port=8000, "
        "uvicorn_log_level='info', allowed_origins=['*'], api_key=None, lora_modules=None, "
        "chat_template=None, response_role='assistant', ssl_keyfile=None, middleware=[], "
        "model='mistralai/Mistral-7B-Instruct-v0.3', tokenizer=None, dtype='auto', kv_cache_dtype='auto', "
        "max_model_len=None, block_size=16, enable_prefix_caching=False, swap_space=4, "
        "gpu_memory_utilization=0.9, num_gpu_blocks_override=None, max_num_batched_tokens=None, "
        "max_num_seqs=256, max_logprobs=20, disable_log_stats=False, quantization=None, "
        "enable_chunked_prefill=None, disable_log_requests=False)"
    )
    assert engine_config_from_logs(result.records) == {
        "max_num_seqs": 256,
        "gpu_memory_utilization": 0.9,
        "prefix_caching": False,
    }  # chunked prefill and the token budget were None: not known from this line


def test_only_the_last_start_of_the_server_counts():
    restart = [
        line.replace("pid=7", "pid=9").replace("00:01:0", "02:00:0")
        for line in (VERSION_0_10_1, NON_DEFAULT_0_10_1.replace("'max_num_seqs': 128, ", ""))
    ]
    result = parse(VERSION_0_10_1, NON_DEFAULT_0_10_1, NOTICE_0_10_1, CONFIG_0_10_1, *restart)
    config = engine_config(result.records, None, NOV30)
    assert "max_num_seqs" not in config  # the restart left it at its default: unknown, not 128
    assert config["max_num_batched_tokens"] == {"value": 8192, "source": "log line vllm.log:6"}
    assert config["chunked_prefill"] == {"value": True, "source": "log line vllm.log:6"}


def test_hostile_settings_are_ignored_and_scanning_is_bounded():
    odd = parse(
        "INFO 11-30 00:01:00 [utils.py:326] non-default args: {'gpu_memory_utilization': 1.5, "
        "'max_num_seqs': -3, 'max_num_batched_tokens': 99999999999, 'enable_prefix_caching': 'yes', "
        "'model': \"o'clock\", 'hf_overrides': {'max_num_seqs': 1}, 'enable_chunked_prefill': True}"
    )
    # out of range, not a literal of the key's type, or inside another argument's value
    assert engine_config_from_logs(odd.records) == {"chunked_prefill": True}
    built_to_hurt = parse(
        "INFO 11-30 00:01:01 [utils.py:326] non-default args: {'model': '" + "x'" * 30_000 + "}",
        "INFO 11-30 00:01:02 [core.py:74] Initializing a V1 LLM engine (v0.10.1) with config: "
        + "((((" * 15_000,
    )
    started = time.perf_counter()
    assert engine_config_from_logs(built_to_hurt.records) == {}
    assert time.perf_counter() - started < 1.0


# -- NCCL ---------------------------------------------------------------------------------------------


def test_nccl_info_and_warn_nccl_2_21_5():
    # NVIDIA/nccl v2.21.5-1 (ab2b89c4) src/debug.cc ncclDebugLog: "%s:%d:%d [%d] NCCL INFO " and
    # "\n%s:%d:%d [%d] %s:%d NCCL WARN "; messages from src/init.cc:1160 and src/transport/net_ib.cc:1909
    result = parse(
        "2026-11-30 02:00:00,000 INFO train.py:88 step 100",
        "node1:4242:4250 [0] NCCL INFO comm 0x55d0c8a04f20 rank 0 nRanks 16 nNodes 2 localRanks 8 "
        "localRank 0 MNNVL 0",
        "",
        "node1:4242:4251 [3] transport/net_ib.cc:1909 NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.2<44321> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.1 "
        "remoteGids::ffff:10.0.0.2",
    )
    assert kinds(result) == [
        (at(2, 0, 0), 2, "nccl_info", "INFO"),  # NCCL stamps nothing by default: the line before's time
        (at(2, 0, 0), 4, "nccl_warn", "WARNING"),
    ]


def test_nccl_warn_with_function_and_default_timestamp_nccl_2_30_7():
    # NVIDIA/nccl v2.30.7-1 (5067397c) src/debug.cc: NCCL_DEBUG_TIMESTAMP_LEVELS defaults to WARN with
    # NCCL_DEBUG_TIMESTAMP_FORMAT "[%F %T] "; "[%d] %s:%d (%s) NCCL WARN %s"; message from
    # src/transport/net_ib/p2p.cc:688; TRACE "[%d] %f %s:%d NCCL TRACE %s" (debug builds)
    result = parse(
        "[2026-11-30 02:00:07] node1:4242:4251 [3] transport/net_ib/p2p.cc:688 (ncclIbLogCompletionWithError) NCCL WARN "
        "NET/IB: Got completion from peer 10.0.0.2<44321> with status=IBV_WC_RETRY_EXC_ERR(12) "
        "opcode=IBV_WC_RECV(128) vendor_err=129  hca mlx5_0",
        "node1:4242:4250 [0] 1234.567890 ncclAllReduce:42 NCCL TRACE opCount 5 count 1048576",
    )
    assert kinds(result) == [
        (at(2, 0, 7), 1, "nccl_warn", "WARNING"),
        (at(2, 0, 7), 2, "nccl_info", "DEBUG"),
    ]


# -- PyTorch ------------------------------------------------------------------------------------------


def test_pytorch_nccl_watchdog_timeout_with_c10_timestamp():
    # pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp WorkNCCL::checkTimeout and
    # operator<<(WorkNCCL) ("WorkNCCL(", "SeqNum=", ", OpType=", ", Timeout(ms)=", "Watchdog caught
    # collective operation timeout: ", " milliseconds before timing out." and "[PG ID %d PG GUID" all in
    # the torch 2.14.1+cu130 wheel's libtorch_cuda.so); c10/util/Logging.cpp's "[E810 03:04:11.061727749
    # file:line] " prefix (the date as month * 100 + day) as torch 2.13.0 writes it; "[rank3]:" is
    # torchrun's per-rank prefix; the file:line values are illustrative
    result = parse(
        "[rank3]:[E810 03:04:11.061727749 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=78, OpType=ALLREDUCE, "
        "NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600096 milliseconds before timing out.",
        "[rank3]:[E1101 00:00:01.000000001 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        "ran for 600017 milliseconds before timing out.",
        window=AUG10,
    )
    assert kinds(result) == [
        (at(3, 4, 11, 61, month=8, day=10), 1, "nccl_timeout", "ERROR"),
        (datetime(2026, 11, 1, 0, 0, 1, tzinfo=UTC), 2, "nccl_timeout", "ERROR"),  # "E1101": 1 November
    ]


def test_pytorch_watchdog_timeout_without_c10_timestamp():
    # pytorch/pytorch c10/util/Logging.cpp (commit 178be9b4): the time part of MessageLogger's prefix
    # commented out, "[E ProcessGroupNCCL.cpp:475] "; the older "[Rank N] " log prefix
    result = parse(
        "2026-11-30 02:10:00,000 INFO train.py:88 step 100",
        "[E ProcessGroupNCCL.cpp:475] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) "
        "ran for 600012 milliseconds before timing out.",
    )
    assert kinds(result) == [(at(2, 10, 0), 2, "nccl_timeout", "ERROR")]  # the line before's time


def test_cuda_oom_torch_2_x_wording():
    # pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp TORCH_CHECK_WITH(OutOfMemoryError, ...) as in
    # the torch 2.14.1+cu130 wheel's libc10_cuda.so ("CUDA out of memory. Tried to allocate ", " has a
    # total capacity of ", " is free. ", " is reserved by PyTorch but unallocated."), raised in Python
    # as torch.OutOfMemoryError (torch >= 2.1)
    result = parse(
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 79.15 GiB of which 1.23 GiB is free. Process 12345 has 77.90 GiB memory in use. Of "
        "the allocated memory 75.20 GiB is allocated by PyTorch, and 1.10 GiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
        "Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-"
        "with-pytorch-cuda-alloc-conf)"
    )
    assert [k[2:] for k in kinds(result)] == [("cuda_oom", "ERROR")]


def test_cuda_oom_older_wordings():
    # pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp before torch 2.1: "CUDA out of memory. Tried
    # to allocate %s (GPU %d; %s total capacity; %s already allocated; %s free; %s reserved in total by
    # PyTorch)", a RuntimeError up to torch 1.12, torch.cuda.OutOfMemoryError in 1.13-2.0; and the CUDA
    # runtime's own cudaErrorMemoryAllocation text through c10's CUDA_CHECK
    result = parse(
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; "
        "14.56 GiB already allocated; 3.19 MiB free; 14.64 GiB reserved in total by PyTorch) If reserved "
        "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
        "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 3; 79.35 GiB "
        "total capacity; 76.02 GiB already allocated; 1.02 GiB free; 77.50 GiB reserved in total by PyTorch)",
        "RuntimeError: CUDA error: out of memory",
    )
    assert [k[2:] for k in kinds(result)] == [("cuda_oom", "ERROR")] * 3


# -- NVIDIA Xid ---------------------------------------------------------------------------------------


def test_nvidia_xid_from_syslog_journal_and_dmesg():
    # NVIDIA/open-gpu-kernel-modules 570.124.04 (129479b1) src/nvidia/src/kernel/gpu/rc/kernel_rc.c
    # XID_PRINT_WITH_ATTR: "NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s%s", without
    # "pid=.., name=.." when the process is unknown, " GPU-I:%02u GPU-CI:%02u" inside the parenthesis on
    # MIG; through syslog, journalctl -o short-precise, -o short-iso and dmesg (time since boot)
    result = parse(
        "Nov 30 02:10:01 gpu-node-3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, "
        "GPU has fallen off the bus.",
        "Nov 30 02:10:02.250001 gpu-node-3 kernel: NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:00): 31, "
        "pid=2211, name=python3, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 "
        "faulted @ 0x7f1c_2a000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
        "2026-11-30T02:10:03+0000 gpu-node-3 kernel: NVRM: Xid (PCI:0000:86:00): 48, An uncorrectable "
        "double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.",
        "[1234570.123456] NVRM: Xid (PCI:0000:86:00): 94, pid=4321, name=python3, Contained ECC error.",
    )
    assert kinds(result) == [
        (at(2, 10, 1), 1, "xid", "ERROR"),
        (at(2, 10, 2, 250), 2, "xid", "ERROR"),
        (at(2, 10, 3), 3, "xid", "ERROR"),
        (at(2, 10, 3), 4, "xid", "ERROR"),  # seconds since boot: the line before's time
    ]


def test_gpu_fallen_off_the_bus_without_an_xid():
    # NVIDIA/open-gpu-kernel-modules (1739a20e) src/nvidia/arch/nvalloc/unix/src/osinit.c osHandleGpuLost:
    # NV_DEV_PRINTF(NV_DBG_ERRORS, nv, "GPU has fallen off the bus.\n") and "GPU serial number is %s.\n",
    # NV_DEV_PRINTF's prefix "NVRM: GPU " NV_PCI_DEV_FMT ": " ("%04x:%02x:%02x.%x", kernel-open/common/inc/nv.h),
    # through syslog; the Xid 79 condition, named by no Xid; the serial-number line is no signal
    result = parse(
        "Nov 30 02:10:01 gpu-node-3 kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
        "Nov 30 02:10:01 gpu-node-3 kernel: NVRM: GPU 0000:3b:00.0: GPU serial number is 1650523012345.",
        "Nov 30 02:10:02 gpu-node-3 kernel: [drm] the bus is fine; nothing has fallen off the bus here",
    )
    assert kinds(result) == [(at(2, 10, 1), 1, "xid", "ERROR")]


# -- vLLM info metrics ----------------------------------------------------------------------------------

T0 = datetime(2026, 11, 30, tzinfo=UTC)
# vllm-project/vllm v0.10.1 / v0.33.0 (wheels) vllm/v1/metrics/loggers.py log_metrics_info: one
# "vllm:cache_config_info" gauge set to 1, labels = str() of every CacheConfig field (vllm/config/cache.py
# metrics_info) plus "engine" (abridged to a few fields here)
CACHE_INFO = {
    "block_size": "16",
    "cache_dtype": "auto",
    "calculate_kv_scales": "False",
    "enable_prefix_caching": "False",
    "engine": "0",
    "gpu_memory_utilization": "0.9",
    "num_gpu_blocks": "27438",
    "swap_space": "4",
}


def _series(labels: dict[str, str], start_s: int, end_s: int, step_s: int = 15) -> pl.DataFrame:
    ts = [T0 + timedelta(seconds=s) for s in range(start_s, end_s, step_s)]
    data = {**{k: [v] * len(ts) for k, v in labels.items()}, "ts": ts, "value": [1.0] * len(ts)}
    return pl.DataFrame(data).with_columns(pl.col("ts").cast(TS_DTYPE))


def _engine(*series: pl.DataFrame) -> LocalEngine:
    frame = sort_series(pl.concat(series))
    return LocalEngine(MetricStore({"vllm:cache_config_info": frame}, {"vllm:cache_config_info": "gauge"}))


def test_engine_config_from_the_cache_config_info_metric_after_a_restart():
    restarted = {**CACHE_INFO, "enable_prefix_caching": "True", "gpu_memory_utilization": "0.95"}
    engine = _engine(_series(CACHE_INFO, 0, 1800), _series(restarted, 1830, 3600))
    hour = Window(T0, T0 + timedelta(hours=1))
    assert engine_config_from_metrics(engine, hour) == {
        "gpu_memory_utilization": 0.95,
        "prefix_caching": True,
    }
    before = Window(T0, T0 + timedelta(seconds=1700))
    assert engine_config_from_metrics(engine, before) == {
        "gpu_memory_utilization": 0.9,
        "prefix_caching": False,
    }
    # the server gone before the window's end: the last configuration it reported
    later = Window(T0, T0 + timedelta(hours=2))
    assert engine_config_from_metrics(engine, later) == {
        "gpu_memory_utilization": 0.95,
        "prefix_caching": True,
    }


def test_engines_that_disagree_give_no_value_and_logs_win_over_metrics():
    other = {**CACHE_INFO, "engine": "1", "gpu_memory_utilization": "0.8"}
    engine = _engine(_series(CACHE_INFO, 0, 3600), _series(other, 0, 3600))
    hour = Window(T0, T0 + timedelta(hours=1))
    assert engine_config_from_metrics(engine, hour) == {"prefix_caching": False}
    logs = parse(VERSION_0_10_1, NON_DEFAULT_0_10_1.replace("00:01:00", "00:00:30"))
    merged = engine_config(logs.records, engine, hour)
    assert merged["prefix_caching"] == {"value": True, "source": "log line vllm.log:2"}
    assert merged["gpu_memory_utilization"] == {"value": 0.92, "source": "log line vllm.log:2"}
    only_metrics = engine_config(None, _engine(_series(CACHE_INFO, 0, 3600)), hour)
    assert only_metrics == {
        "gpu_memory_utilization": {"value": 0.9, "source": "metric vllm:cache_config_info"},
        "prefix_caching": {"value": False, "source": "metric vllm:cache_config_info"},
    }
    assert engine_config_from_metrics(LocalEngine(MetricStore()), hour) == {}


def test_the_simulators_start_up_lines_read_back_as_its_engine():
    """perfkit's simulator writes vLLM 0.10.1's lines (perfkit/lab/sim/exporters.py); what the
    parser reads back must be the engine the scenario ran, not a spelling only the simulator uses."""
    from pathlib import Path

    from perfkit.lab.sim.catalog import SCENARIOS
    from perfkit.sources.logs import read_logs

    repo = Path(__file__).resolve().parents[2]
    for name in ("p95-prefill-interference", "queueing-traffic-surge"):
        spec = SCENARIOS[name]()
        assert not spec.releases, "a release could change the engine; pick a scenario without one"
        engine = spec.engine
        window = Window(spec.start, spec.at(spec.duration_s))
        logs = read_logs(repo / "data" / "scenarios" / name / "logs" / "vllm.log", window=window)
        assert engine_config_from_logs(logs.records) == {
            "chunked_prefill": engine.chunked_prefill,
            "max_num_batched_tokens": engine.max_num_batched_tokens
            if engine.chunked_prefill
            else engine.max_prefill_tokens,
            "max_num_seqs": engine.max_num_seqs,
            "prefix_caching": engine.prefix_cache_hit_frac > 0,
        }
