"""The serving simulator's core: hardware tables, configuration, roofline physics and vLLM's scheduling.

Expected values come from datasheets and shapes worked out here by hand (H100 SXM: 3.35 TB/s,
989.4 TFLOP/s dense bf16; Llama-3.1-8B: 32 layers, 8 KV heads of 128), never from the code's output.
"""

from __future__ import annotations

import statistics
import time

import pytest

from perfkit.core import hardware
from perfkit.errors import ConfigError
from perfkit.lab.servesim.config import SETTABLE, config_from_dict, load_config, with_changes
from perfkit.lab.servesim.core import EngineCore

H100_BW = 3.35e12
H100_BF16 = 989.4e12
LLAMA8_PARAMS = 8030261248
LLAMA8_EMB = 128256 * 4096


def cfg(**over):
    base = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "step_jitter": 0}
    return config_from_dict({**base, **over}, "test")


def run(core, until=None, now=0.0, arrivals=()):
    """Step ``core`` until idle (or ``until`` virtual s), adding ``arrivals`` (t, rid, prompt, out, kw) on time."""
    pending = sorted(arrivals, key=lambda a: a[0])
    steps = []
    while pending or core.busy:
        while pending and pending[0][0] <= now:
            t, rid, prompt, out, kw = pending.pop(0)
            core.add(rid, prompt, out, t, **kw)
        if not core.busy:
            now = pending[0][0]
            continue
        res = core.step(now)
        steps.append(res)
        now += res.duration_s if res.duration_s > 0 else 1e-3
        if until is not None and now > until:
            break
    return steps


def finished(steps):
    return {f.rid: f for s in steps for f in s.finished}


# -- hardware tables -------------------------------------------------------------------------------


def test_the_gpu_table_has_the_six_gpus_each_number_with_a_source():
    table = hardware.gpus()
    assert {"a100-sxm", "h100-sxm", "h200", "b200", "l40s", "mi300x"} <= set(table)
    for g in table.values():
        assert g.memory_gib > 0 and g.hbm_bytes_per_s > 0 and g.dense_flops["bf16"] > 0
        for cited in ("memory_gib", "hbm_bytes_per_s", "dense_flops"):
            assert g.sources[cited].startswith("https://"), (g.key, cited)
    # datasheet figures, dense (half the 2:4-sparse numbers the datasheets print)
    assert hardware.gpu("h100-sxm").dense_flops["bf16"] == pytest.approx(1979e12 / 2, rel=1e-3)
    assert hardware.gpu("NVIDIA H100 80GB HBM3").hbm_bytes_per_s == 3.35e12
    assert "fp8" not in hardware.gpu("a100").dense_flops  # Ampere has no FP8 tensor cores
    assert hardware.gpu("AMD Instinct MI300X").memory_gib == 192


def test_model_parameter_counts_follow_from_their_shapes():
    """params = 2 * vocab * hidden + layers * (attention + MLP + norms) + final norm (+ Qwen2's q/k/v biases)."""
    for m in hardware.models().values():
        kv = m.kv_heads * m.head_dim
        attn = 2 * m.hidden * m.heads * m.head_dim + 2 * m.hidden * kv
        bias = (m.heads * m.head_dim + 2 * kv) if m.key.startswith("qwen2") else 0
        layer = attn + bias + 3 * m.hidden * m.intermediate + 2 * m.hidden
        total = (1 if m.tied_embeddings else 2) * m.vocab * m.hidden + m.layers * layer + m.hidden
        assert m.params == total, m.key
    assert hardware.model("meta-llama/Llama-3.1-70B-Instruct").params == pytest.approx(70.55e9, rel=1e-3)


def test_kv_bytes_per_token_of_llama_8b():
    # 2 (K and V) * 32 layers * 8 KV heads * 128 dims * 2 bytes = 128 KiB
    assert hardware.model("llama-3.1-8b").kv_bytes_per_token() == 131072
    assert hardware.model("llama-3.1-8b").kv_bytes_per_token(1.0) == 65536


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown GPU 'v100'; known: a100-sxm, b200, h100-sxm"):
        hardware.gpu("v100")
    with pytest.raises(ConfigError, match=r"unknown model 'gpt-5'.*llama-3.1-8b"):
        hardware.model("gpt-5")


def test_a_bad_table_entry_names_the_file_entry_and_field(tmp_path):
    path = tmp_path / "gpus.yaml"
    path.write_text(
        "x1:\n  name: X\n  memory_gib: 80\n  hbm_bytes_per_s: 3.35e12\n"
        "  dense_flops: {bf16: 1.0e+15}\n  sources: {memory_gib: a, hbm_bytes_per_s: b, dense_flops: c}\n"
    )
    entry = hardware.read_table(path)["x1"]
    with pytest.raises(
        ConfigError, match=r"gpus.yaml: x1.hbm_bytes_per_s: expected a number.*write 3.35e\+12"
    ):
        hardware.parse_gpu("x1", entry, f"{path}: x1")
    entry["hbm_bytes_per_s"] = 3.35e12
    del entry["sources"]["dense_flops"]
    with pytest.raises(ConfigError, match=r"x1.sources.dense_flops: every number needs its source"):
        hardware.parse_gpu("x1", entry, f"{path}: x1")
    path.write_text("a: &a [1, 2]\nb: *a\n")
    with pytest.raises(ConfigError, match="aliases are not allowed"):
        hardware.read_table(path)
    path.write_text("a: " + "x" * (hardware.MAX_TABLE_BYTES + 10))
    with pytest.raises(ConfigError, match="KiB a hardware table may have"):
        hardware.read_table(path)


# -- configuration ---------------------------------------------------------------------------------


def test_kv_capacity_of_llama_8b_on_h100():
    """0.9 x 80 GiB - 14.96 GiB of weights - ~1.8 GiB reserved = ~55 GiB of 128 KiB tokens: ~450k tokens."""
    c = cfg()
    weights_gib = LLAMA8_PARAMS * 2 / 2**30
    kv_gib = 0.9 * 80 - weights_gib
    assert c.kv_capacity_tokens() < kv_gib * 2**30 / 131072  # the reserve takes its share
    assert c.kv_capacity_tokens() == pytest.approx((kv_gib - 1.8) * 2**30 / 131072, rel=0.02)
    assert c.num_gpu_blocks() == c.kv_capacity_tokens() // 16


@pytest.mark.parametrize(
    ("over", "pattern"),
    [
        ({"model": "llama-3.1-70b"}, r"test: model: weights 131.4 GiB .* exceed 0.9 x 80 GiB on h100-sxm \(tensor_parallel_size=1\)"),
        ({"block_size": 24}, r"test: block_size: 24 is not one of 8, 16, 32"),
        ({"max_model_len": 8200}, r"test: block_size: 16 does not divide max_model_len \(8200\)"),
        ({"gpu": "v100"}, r"test: gpu: unknown GPU 'v100'; known: a100-sxm"),
        ({"gpu_memory_utilization": 1.5}, r"test: gpu_memory_utilization: expected a number in \(0, 1\]"),
        ({"gpu_memory_utilization": 0.18}, r"test: model: weights .* exceed 0.18 x 80 GiB"),
        ({"gpu_memory_utilization": 0.21}, r"test: max_model_len: one 8192-token request needs 1.00 GiB"),
        ({"max_num_seqs": 0}, r"test: max_num_seqs: expected a positive integer, got 0"),
        ({"enable_chunked_prefill": False, "max_num_batched_tokens": 2048}, r"test: max_num_batched_tokens: 2048 is smaller than max_model_len"),
        ({"tensor_parallel_size": 3}, r"test: tensor_parallel_size: 3 must divide the model's 32 attention heads"),
        ({"max_num_sequences": 5}, r"test: unknown setting 'max_num_sequences'; known: .*max_num_seqs"),
        ({"gpu": "a100", "dtype": "fp8"}, r"test: dtype: a100-sxm has no fp8 tensor cores"),
        ({"compute_efficiency": 0}, r"test: compute_efficiency: expected a number in \[0.01, 1\]"),
        # M11: numbers no GPU server has, which made every request take for ever
        ({"compute_efficiency": 1e-300}, r"test: compute_efficiency: expected a number in \[0.01, 1\] .*got 1e-300"),
        ({"memory_efficiency": 1e-9}, r"test: memory_efficiency: expected a number in \[0.01, 1\]"),
        ({"step_overhead_s": 1e300}, r"test: step_overhead_s: expected a number in \[0, 0.5\] .*got 1e\+300"),
        ({"allreduce_latency_s": 5.0}, r"test: allreduce_latency_s: expected a number in \[0, 0.01\]"),
        ({"runtime_overhead_gib": 1e12}, r"test: runtime_overhead_gib: expected a number in \[0, 64\]"),
        ({"max_num_seqs": 10**9}, r"test: max_num_seqs: expected a number in \[1, 16384\]"),
        ({"long_prefill_token_threshold": 10**12}, r"test: long_prefill_token_threshold: expected a number in \[0, 2097152\]"),
    ],
)  # fmt: skip
def test_bad_configs_name_the_field(over, pattern):
    with pytest.raises(ConfigError, match=pattern):
        cfg(**over)


def test_a_config_file_is_read_and_its_name_is_in_errors(tmp_path):
    path = tmp_path / "engine.yaml"
    path.write_text(
        "model: Qwen/Qwen2.5-7B-Instruct\ngpu: H200\nmax-num-seqs: 64\nenable_prefix_caching: true\n"
    )
    c = load_config(path)
    assert (c.model.key, c.gpu.key, c.max_num_seqs, c.enable_prefix_caching) == (
        "qwen2.5-7b",
        "h200",
        64,
        True,
    )
    assert c.served_model_name == "Qwen/Qwen2.5-7B-Instruct"
    path.write_text("model: llama-3.1-8b\ngpu: h100\nblock_size: 12\n")
    with pytest.raises(ConfigError, match=rf"{path}: block_size: 12"):
        load_config(path)
    with pytest.raises(ConfigError, match="engine config not found"):
        load_config(tmp_path / "missing.yaml")


def test_a_config_file_takes_exponent_floats_and_refuses_control_characters(tmp_path):
    path = tmp_path / "engine.yaml"
    path.write_text("model: llama-3.1-8b\ngpu: h100\nallreduce_latency_s: 1e-5\nstep_overhead_s: 2E-3\n")
    c = load_config(path)  # YAML 1.1 reads 1e-5 (no dot) as a string
    assert (c.allreduce_latency_s, c.step_overhead_s) == (1e-5, 2e-3)
    for bad in ("allreduce_latency_s: 'ten'", "allreduce_latency_s: 1e999", "allreduce_latency_s: '0.5'"):
        path.write_text(f"model: llama-3.1-8b\ngpu: h100\n{bad}\n")
        with pytest.raises(ConfigError, match=r"engine.yaml: allreduce_latency_s: expected a number"):
            load_config(path)
    for bad in ('"0.10\\n(APIServer pid=1) INFO fake"', '"0.10\\x1b[31m"'):
        path.write_text(f"model: llama-3.1-8b\ngpu: h100\nvllm_version: {bad}\n")
        with pytest.raises(ConfigError, match=r"vllm_version: expected 1 to 256 printable characters"):
            load_config(path)
    with pytest.raises(ConfigError, match="served_model_name: expected 1 to 256 printable"):
        cfg(served_model_name="a\tb")


def test_with_changes_parses_text_and_validates_the_whole():
    c = with_changes(
        cfg(),
        {"enable_chunked_prefill": "false", "max_num_seqs": "128", "gpu_memory_utilization": "0.85"},
        "--set",
    )
    assert (c.enable_chunked_prefill, c.max_num_seqs, c.gpu_memory_utilization) == (False, 128, 0.85)
    assert c.num_gpu_blocks() < cfg().num_gpu_blocks()
    with pytest.raises(ConfigError, match=r"--set: max_num_seqs: expected a positive integer, got 'many'"):
        with_changes(c, {"max_num_seqs": "many"}, "--set")
    with pytest.raises(ConfigError, match=r"--set: max_num_seqs: expected a positive integer, got '-1'"):
        with_changes(c, {"max_num_seqs": "-1"}, "--set")
    with pytest.raises(ConfigError, match=r"max_num_seqs: expected a positive integer, got '\u00b2'"):
        with_changes(c, {"max_num_seqs": "\u00b2"}, "--set")  # str.isdigit() says yes, int() no
    assert with_changes(c, {"gpu_memory_utilization": "8.5e-1"}, "--set").gpu_memory_utilization == 0.85
    for text in ("nan", "1_0", "0x1", "1e999"):
        with pytest.raises(ConfigError, match="gpu_memory_utilization: expected a number"):
            with_changes(c, {"gpu_memory_utilization": text}, "--set")
    with pytest.raises(ConfigError, match=r"--set: compute_efficiency: cannot be changed; settable: "):
        with_changes(c, {"compute_efficiency": "0.9"}, "--set")
    with pytest.raises(
        ConfigError, match=r"--set: max_num_batched_tokens: 4096 is smaller than max_model_len"
    ):
        with_changes(c, {"max_num_batched_tokens": 4096}, "--set")
    assert "enable_chunked_prefill" in SETTABLE and "max_num_seqs" in SETTABLE


# -- roofline physics ------------------------------------------------------------------------------


def test_batch_one_decode_is_the_weights_over_the_bandwidth_plus_the_step_overhead():
    core = EngineCore(cfg())
    core.add("a", 16, 64, 0.0)
    itl = [g for s in run(core) for g in s.itl]
    # every weight but the embedding table is read once per token: 15.0 GB at 75 % of 3.35 TB/s, + 2 ms
    expected = (LLAMA8_PARAMS - LLAMA8_EMB) * 2 / (H100_BW * 0.75) + 0.002
    assert statistics.median(itl) == pytest.approx(expected, rel=0.03)
    # an H200 has the same FLOPs and 4.8 TB/s: the memory-bound part shrinks by 3.35/4.8
    h200 = EngineCore(cfg(gpu="h200"))
    h200.add("a", 16, 64, 0.0)
    itl200 = statistics.median(g for s in run(h200) for g in s.itl)
    assert (itl200 - 0.002) / (statistics.median(itl) - 0.002) == pytest.approx(3.35 / 4.8, rel=0.03)


def test_prefill_time_grows_about_linearly_with_the_prompt():
    """A prompt's prefill is compute-bound: 2 * 6.98e9 FLOPs per token at 50 % of 989 TFLOP/s."""
    ttft = {}
    for n in (1024, 2048, 4096):
        core = EngineCore(cfg(enable_chunked_prefill=False))
        core.add("p", n, 1, 0.0)
        ttft[n] = run(core)[0].duration_s - 0.002
    assert ttft[2048] / ttft[1024] == pytest.approx(2.0, rel=0.1)
    assert ttft[4096] / ttft[2048] == pytest.approx(2.0, rel=0.1)
    body = LLAMA8_PARAMS - 2 * LLAMA8_EMB
    assert ttft[4096] == pytest.approx(
        2 * body * 4096 / (H100_BF16 * 0.5), rel=0.15
    )  # attention adds a little


def _interference(chunked: bool) -> list[float]:
    over = {"enable_chunked_prefill": chunked}
    if chunked:
        over["max_num_batched_tokens"] = 1024
    core = EngineCore(cfg(**over))
    arrivals = [(0.0, f"s{i}", 100, 200, {}) for i in range(8)] + [(0.5, "long", 7000, 10, {})]
    steps = run(core, arrivals=arrivals)
    return [g for s in steps for g in s.itl]


def test_a_long_prompt_stalls_decodes_without_chunked_prefill_and_not_with_it():
    off, on = _interference(False), _interference(True)
    # 7,000 prompt tokens at ~2 * 7e9 FLOPs each, 50 % of 989 TFLOP/s: ~0.2 s in one V0 prefill step
    assert max(off) > 0.15
    # chunks of 1,024 tokens: ~30 ms of compute a step, decodes ride along every step
    assert max(on) < 0.06
    assert statistics.median(on) < 0.012 and statistics.median(off) < 0.012


def test_tensor_parallelism_splits_the_weights_and_pays_all_reduces():
    tpot = {}
    for tp in (2, 4):
        core = EngineCore(cfg(model="llama-3.1-70b", tensor_parallel_size=tp))
        core.add("a", 16, 32, 0.0)
        tpot[tp] = statistics.median(g for s in run(core) for g in s.itl)
    # 141 GB of weights over 2 GPUs at 75 % of 3.35 TB/s is 28 ms; over 4 GPUs 14 ms
    assert tpot[2] == pytest.approx(141.1e9 / 2 / (H100_BW * 0.75), rel=0.25)
    assert 1.4 < tpot[2] / tpot[4] < 2.0  # halving the weights per GPU, not the overhead and the all-reduces


# -- scheduling ------------------------------------------------------------------------------------


def test_max_num_seqs_caps_running_and_every_request_gets_its_tokens():
    core = EngineCore(cfg(max_num_seqs=8))
    arrivals = [(0.01 * i, f"r{i}", 50 + i, 20 + i % 7, {}) for i in range(40)]
    steps = run(core, arrivals=arrivals)
    assert max(s.num_running for s in steps) == 8
    done = finished(steps)
    assert len(done) == 40
    for i in range(40):
        f = done[f"r{i}"]
        assert f.output_tokens == 20 + i % 7 and f.prompt_tokens == 50 + i
        assert f.arrival <= f.scheduled <= f.first_token <= f.last_token
    assert sum(s.generation_tokens for s in steps) == sum(20 + i % 7 for i in range(40))
    assert core.kv_usage() == 0.0 and not core.busy


def test_kv_exhaustion_preempts_the_newest_and_recomputes_it():
    c = cfg(gpu="l40s", gpu_memory_utilization=0.5, max_model_len=4096)  # a few thousand blocks of KV
    capacity = c.kv_capacity_tokens()
    n = capacity // 1500 + 4  # more 1,500-token sequences than the cache holds at once
    core = EngineCore(c)
    steps = run(core, arrivals=[(0.0, f"r{i}", 500, 1000, {}) for i in range(n)])
    done = finished(steps)
    assert len(done) == n and all(f.output_tokens == 1000 for f in done.values())
    preempted = sum(s.preemptions for s in steps)
    assert preempted > 0 and preempted == sum(f.preemptions for f in done.values())
    # recompute: the prefill work exceeds the prompts, by the prompts and outputs of preempted requests
    assert sum(s.prefill_tokens for s in steps) > 500 * n
    assert max(s.kv_usage for s in steps) > 0.95
    # the newest admitted is the one preempted: the first request never is
    assert done["r0"].preemptions == 0


def test_prefix_caching_hits_with_shared_prefixes_and_not_without():
    def hit_rate(caching: bool, shared: bool) -> tuple[float, list[float]]:
        core = EngineCore(cfg(enable_prefix_caching=caching))
        arrivals = [
            (
                0.2 * i,
                f"r{i}",
                1100,
                8,
                {"prefix_key": "system" if shared else f"u{i}", "prefix_tokens": 1024},
            )
            for i in range(20)
        ]
        steps = run(core, arrivals=arrivals)
        queries = sum(s.prefix_queries for s in steps)
        hits = sum(s.prefix_hits for s in steps)
        done = finished(steps)
        return (hits / queries if queries else 0.0), [
            done[f"r{i}"].first_token - done[f"r{i}"].arrival for i in range(20)
        ]

    rate, ttft = hit_rate(True, True)
    assert rate == pytest.approx(19 * 1024 / (20 * 1100), rel=0.01)  # all but the first reuse 64 blocks
    assert max(ttft[1:]) < ttft[0] / 3  # 76 tokens computed instead of 1,100
    assert hit_rate(True, False)[0] == 0.0
    assert hit_rate(False, True)[0] == 0.0


def test_the_prefix_cache_evicts_least_recently_freed_blocks():
    """vLLM's free queue is FIFO: a freed cached block is evicted once every block freed before it has
    been allocated again, however few requests run at once."""
    c = cfg(gpu="l40s", gpu_memory_utilization=0.4, max_model_len=2048, enable_prefix_caching=True)
    blocks = c.num_gpu_blocks()
    per_small = -(-(200 + 4 - 1) // 16)  # a 200-token prompt and 4 tokens out hold 13 blocks

    def hits_after(small_requests: int) -> int:
        core = EngineCore(c)
        run(core, arrivals=[(0.0, "a", 1040, 4, {"prefix_key": "k", "prefix_tokens": 1024})])
        # one small request at a time: at most 13 blocks in use, but each allocation takes the queue's head
        run(core, now=1.0, arrivals=[(1.0 + 0.5 * i, f"f{i}", 200, 4, {}) for i in range(small_requests)])
        t = 2.0 + 0.5 * small_requests
        steps = run(core, now=t, arrivals=[(t, "b", 1040, 4, {"prefix_key": "k", "prefix_tokens": 1024})])
        return sum(s.prefix_hits for s in steps)

    assert (
        hits_after((blocks - 66 - 30) // per_small) == 1024
    )  # the queue's head not yet reached: k's 64 blocks hit
    assert (
        hits_after((blocks + 30) // per_small) == 0
    )  # every block freed before k's went first: k was evicted


def test_abort_frees_the_blocks():
    core = EngineCore(cfg())
    core.add("a", 4000, 100, 0.0)
    core.add("b", 100, 100, 0.0)
    core.step(0.0)
    assert core.kv_usage() > 0
    core.abort("a")
    core.abort("b")
    core.abort("never-seen")
    assert core.kv_usage() == 0.0 and not core.busy


def test_requests_over_max_model_len_are_refused():
    core = EngineCore(cfg(max_model_len=4096))
    with pytest.raises(ConfigError, match="exceeds max_model_len 4096"):
        core.add("a", 4000, 200, 0.0)
    with pytest.raises(ValueError):
        core.add("a", 0, 200, 0.0)
    core.add("a", 10, 10, 0.0)
    with pytest.raises(ValueError, match="duplicate"):
        core.add("a", 10, 10, 0.0)


# -- faults, reconfiguration, determinism, speed ---------------------------------------------------


def test_faults_slow_decode_slow_steps_and_take_kv_blocks():
    def median_itl(**faults) -> float:
        core = EngineCore(cfg())
        for k, v in faults.items():
            setattr(core.faults, k, v)
        core.add("a", 16, 40, 0.0)
        return statistics.median(g for s in run(core) for g in s.itl)

    base = median_itl()
    # decode's memory-bound part (~6 ms of the ~8 ms) doubles; the step overhead does not
    assert median_itl(decode_slowdown=2.0) == pytest.approx(2 * base - 0.002, rel=0.03)
    assert median_itl(step_slowdown=1.5) == pytest.approx(1.5 * base, rel=0.01)
    core = EngineCore(cfg())
    core.faults.kv_reserved_frac = 0.9
    core.add("a", 16, 4, 0.0)
    res = core.step(0.0)
    assert res.kv_usage >= 0.9
    core.faults.kv_reserved_frac = 0.0
    run(core, now=res.duration_s)
    assert core.kv_usage() == 0.0


def test_reconfigure_live_keeps_requests_and_applies_the_change():
    core = EngineCore(cfg(enable_chunked_prefill=False))
    arrivals = [(0.0, f"s{i}", 200, 300, {}) for i in range(16)]
    steps = run(core, until=0.5, arrivals=arrivals)
    now = steps[-1].start + steps[-1].duration_s
    core.reconfigure(
        with_changes(core.cfg, {"enable_chunked_prefill": "true", "gpu_memory_utilization": "0.5"}, "fix")
    )
    assert core.snapshot()["num_gpu_blocks"] == core.cfg.num_gpu_blocks() < cfg().num_gpu_blocks()
    steps += run(core, now=now)
    assert len(finished(steps)) == 16 and core.kv_usage() == 0.0
    core.reconfigure(with_changes(core.cfg, {"block_size": 32, "enable_prefix_caching": True}, "fix"))
    core.add("x", 100, 5, 10.0, prefix_key="k", prefix_tokens=64)
    assert len(finished(run(core, now=10.0))) == 1


def test_a_request_that_can_never_fit_a_config_change_is_dropped_and_the_rest_run_on():
    core = EngineCore(cfg())
    steps = run(core, until=0.05, arrivals=[(0.0, "long", 2, 8000, {}), (0.0, "short", 8, 100, {})])
    now = steps[-1].start + steps[-1].duration_s
    assert {r.rid for r in core.running} == {"long", "short"}
    # a smaller cache and context: "long" (8,002 tokens) can never fit again; "short" (108) can
    core.reconfigure(with_changes(core.cfg, {"max_model_len": 1024, "gpu_memory_utilization": 0.212}, "fix"))
    assert core.busy
    res = core.step(now)
    assert [rid for rid, _ in res.dropped] == ["long"]
    assert "8002 exceeds max_model_len 1024" in res.dropped[0][1]
    later = run(core, until=now + 60, now=now + res.duration_s, arrivals=[(now + 1, "later", 8, 16, {})])
    assert set(finished([res, *later])) == {"short", "later"} and not core.busy  # nothing hangs
    assert core.kv_usage() == 0.0 and not any(s.dropped for s in later)


def test_preemptions_of_a_live_reconfigure_are_in_the_next_step_result():
    core = EngineCore(cfg())
    arrivals = [(0.0, f"r{i}", 100, 50, {}) for i in range(3)]
    steps = run(core, until=0.05, arrivals=arrivals)
    assert len(core.running) == 3 and sum(s.preemptions for s in steps) == 0
    core.reconfigure(with_changes(core.cfg, {"block_size": 32}, "fix"))  # a new cache: all recomputed
    steps += run(core, now=steps[-1].start + steps[-1].duration_s)
    done = finished(steps)
    assert sum(s.preemptions for s in steps) == 3 == sum(f.preemptions for f in done.values())


def test_the_same_seed_gives_the_same_run_and_another_seed_another():
    def durations(seed: int) -> list[float]:
        core = EngineCore(config_from_dict({"model": "llama-3.1-8b", "gpu": "h100"}, "test"), seed=seed)
        return [
            s.duration_s for s in run(core, arrivals=[(0.05 * i, f"r{i}", 300, 30, {}) for i in range(30)])
        ]

    assert durations(7) == durations(7)
    assert durations(7) != durations(8)


def test_a_step_with_200_running_sequences_costs_well_under_a_millisecond():
    core = EngineCore(cfg(enable_prefix_caching=True))
    for i in range(200):
        core.add(f"r{i}", 300, 3000, 0.0, prefix_key=f"k{i % 4}", prefix_tokens=128)
    now = 0.0
    while any(r.outputs == 0 for r in core.running) or core.waiting:
        now += core.step(now).duration_s
    assert core.snapshot()["running"] == 200
    t0 = time.process_time()
    for _ in range(300):
        now += core.step(now).duration_s
    assert (time.process_time() - t0) / 300 < 1e-3
