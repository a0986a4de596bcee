"""The incident simulator told by TGI, Dynamo (frontend alone, and with its vLLM workers) and Triton's
TensorRT-LLM backend (issue 35; perfkit.lab.sim.tellings): each telling writes exactly its engine's names,
types, labels and buckets, checked against the engines' real pages and name lists in tests/data/engines/
(SOURCES.md), reads back with its engine recognised, keeps the physics of the vLLM telling of the same
seed, and is byte-identical on rerun."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from perfkit.engine import dialects as reader
from perfkit.engine.local import LocalEngine
from perfkit.lab.sim.bundle import generate
from perfkit.lab.sim.catalog import SCENARIOS
from perfkit.lab.sim.engine import Engine
from perfkit.lab.sim.exporters import Recorder
from perfkit.lab.sim.telling_base import dynamo_log_buckets, le_text, linear_buckets, tgi_duration_buckets
from perfkit.lab.sim.telling_dynamo import FE_BUCKETS
from perfkit.lab.sim.tellings import TELLINGS
from perfkit.sources.bundle import load_bundle
from perfkit.triage.evidence import serving_engine

DATA = Path(__file__).resolve().parents[1] / "data" / "engines"
SCENARIO = "queueing-traffic-surge"
SECONDS = 240.0  # the story compressed: a few hundred requests, a second or two per telling
_TYPE = re.compile(r"^# TYPE (\S+) (\w+)$", re.MULTILINE)
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{([^}]*)\})? ", re.MULTILINE)


def spec(dialect: str):
    return replace(SCENARIOS[SCENARIO](), dialect=dialect)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tellings")
    return {d: _told(d, root / d) for d in ("vllm", *TELLINGS)}


def _told(dialect: str, out: Path) -> Path:
    generate(spec(dialect), out, duration_s=SECONDS)
    return out


def types_of(text: str) -> dict[str, str]:
    """family -> type, with a counter's family named as its samples are (``_total`` where the page has it)."""
    out = {}
    for fam, kind in _TYPE.findall(text):
        out[fam] = kind
    return out


def samples_of(text: str) -> dict[str, set[frozenset[str]]]:
    """sample name -> the label-key sets it is written with."""
    out: dict[str, set[frozenset[str]]] = {}
    for name, labels in _SAMPLE.findall(text):
        keys = frozenset(k for k, _ in re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"', labels or ""))
        out.setdefault(name, set()).add(keys)
    return out


def engine_text(bundle: Path) -> str:
    """Every engine-side metrics file of a bundle (not dcgm/node)."""
    return "".join(
        p.read_text(encoding="utf-8")
        for p in sorted((bundle / "metrics").glob("*.om"))
        if p.stem not in ("dcgm", "node")
    )


def family(sample: str, kind: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if kind == "histogram" and sample.endswith(suffix):
            return sample[: -len(suffix)]
    return sample


def le_values(text: str, name: str) -> list[str]:
    """The ``le`` values of the first series of histogram ``name`` in a page."""
    first = re.search(rf"^{re.escape(name)}_bucket\{{([^}}]*)\}}", text, re.MULTILINE)
    assert first, name
    rest = re.sub(r',?le="[^"]*"', "", first.group(1))
    values = []
    for labels in re.findall(rf"^{re.escape(name)}_bucket\{{([^}}]*)\}}", text, re.MULTILINE):
        if re.sub(r',?le="[^"]*"', "", labels) == rest:
            values.append(re.search(r'le="([^"]*)"', labels).group(1))
            if values[-1] == "+Inf":
                break
    return values


# -- TGI ----------------------------------------------------------------------------------------------------


def tgi_catalogue() -> dict[str, str]:
    """name -> type from tests/data/engines/tgi_names.md (TGI's docs table and its code-only names)."""
    text = (DATA / "tgi_names.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (tgi_\w+) \| (\w+)", text, re.MULTILINE)
    return {name: kind for name, kind in rows}


def test_tgi_writes_only_tgi_names_with_their_types_and_labels(bundles):
    text = engine_text(bundles["tgi"])
    assert not re.search(r"^(vllm:|sglang:|trtllm_|dynamo_|nv_)", text, re.MULTILINE)
    catalogue = tgi_catalogue()
    written = types_of(text)
    assert written and all(catalogue.get(f) == kind for f, kind in written.items()), {
        f: (kind, catalogue.get(f)) for f, kind in written.items() if catalogue.get(f) != kind
    }
    # no TTFT and no inter-token histogram: TGI exports neither
    assert not any("first_token" in f or "inter_token" in f for f in written)
    labels = samples_of(text)
    for sample, keysets in labels.items():
        base = family(sample, "histogram")
        want = (
            {"method"}
            if base.startswith("tgi_batch_")
            and base
            not in ("tgi_batch_current_size", "tgi_batch_current_max_tokens", "tgi_batch_max_total_tokens")
            else set()
        )
        for keys in keysets:
            assert set(keys) - {"le"} == want, (sample, keys)
    # counters carry no _total (metrics-exporter-prometheus 0.15)
    assert "tgi_request_success" in labels and not any(s.endswith("_total") for s in labels)


def test_tgi_buckets_are_the_routers():
    durations = tgi_duration_buckets()
    assert len(durations) == 35 and le_text(durations[0]) == "0.00015000000000000001"
    assert le_text(durations[2]) == "0.0003375" and 145 < durations[-1] < 147
    assert [le_text(b) for b in linear_buckets(32768)[:3]] == ["327.68", "655.36", "983.04"]


def test_tgi_request_times_add_up(bundles):
    text = (bundles["tgi"] / "metrics" / "tgi.om").read_text(encoding="utf-8")

    def last(sample: str) -> float:
        return float(re.findall(rf"^{sample} (\S+) ", text, re.MULTILINE)[-1])

    n = last("tgi_request_success")
    assert n == last("tgi_request_duration_count") == last("tgi_request_queue_duration_count") > 100
    total = last("tgi_request_duration_sum")
    parts = sum(last(f"tgi_request_{p}_duration_sum") for p in ("validation", "queue", "inference"))
    assert total == pytest.approx(parts, rel=1e-4)
    assert last("tgi_request_count") >= n


# -- Dynamo -------------------------------------------------------------------------------------------------


def test_dynamo_frontend_writes_the_real_frontends_names_types_and_buckets(bundles):
    real = (DATA / "dynamo_metrics_docs.txt").read_text(encoding="utf-8")
    text = engine_text(bundles["dynamo-frontend"])
    assert not re.search(r"^(vllm:|dynamo_component_|tgi_|nv_)", text, re.MULTILINE)  # the frontend alone
    real_types = {f.removesuffix("_total"): k for f, k in types_of(real).items()}
    written = types_of(text)
    assert written and all(real_types.get(f) == k for f, k in written.items())
    real_samples = samples_of(real)
    for sample, keysets in samples_of(text).items():
        assert sample in real_samples, sample
        assert keysets <= real_samples[sample], (sample, keysets, real_samples[sample])
    for name in FE_BUCKETS:
        assert le_values(text, name) == le_values(real, name), name
    # no queue-time histogram, no KV usage in the frontend's words
    assert not any("queue_time" in f or "kv_cache_usage" in f for f in written)


def test_dynamo_buckets_follow_generate_log_buckets():
    assert [le_text(b) for b in dynamo_log_buckets(1.0, 256.0, 10)][:4] == ["0", "1.9", "3.4", "6.3"]
    assert le_text(dynamo_log_buckets(50.0, 128000.0, 12)[-1]) == "130000"


def test_dynamo_with_workers_adds_the_workers_series_as_the_real_worker_writes_them(bundles):
    real = (DATA / "vllm_dynamo_worker_metrics.txt").read_text(encoding="utf-8")
    text = engine_text(bundles["dynamo"])
    real_samples = samples_of(real)
    worker = {s: k for s, k in samples_of(text).items() if s.startswith("dynamo_component_")}
    assert worker
    for sample, keysets in worker.items():
        assert sample in real_samples, sample
        assert keysets <= real_samples[sample], (sample, keysets)
    real_types = {f.removesuffix("_total"): k for f, k in types_of(real).items()}
    for fam, kind in types_of(text).items():
        if fam.startswith("dynamo_component_"):
            assert real_types[fam] == kind, fam
    assert le_values(text, "dynamo_component_request_duration_seconds") == le_values(
        real, "dynamo_component_request_duration_seconds"
    )
    # the worker's own vLLM series keep vLLM's labels (Dynamo adds none to them)
    vllm = samples_of(text)["vllm:num_requests_running"]
    assert vllm == real_samples["vllm:num_requests_running"] == {frozenset({"engine", "model_name"})}
    logs = {p.name for p in (bundles["dynamo"] / "logs").glob("*.log")}
    assert logs == {"dynamo-frontend.log", "dynamo-worker.log"}
    worker_log = (bundles["dynamo"] / "logs" / "dynamo-worker.log").read_text(encoding="utf-8")
    assert "INFO core.__init__: Initializing a V1 LLM engine" in worker_log
    assert "Avg prompt throughput" not in worker_log  # no periodic stats line before dynamo#6566


def test_dynamo_queued_counts_up_to_the_first_token_inflight_to_the_last(bundles):
    text = (bundles["dynamo-frontend"] / "metrics" / "dynamo-frontend.om").read_text(encoding="utf-8")
    queued = [float(v) for v in re.findall(r"^dynamo_frontend_queued_requests\{[^}]*\} (\S+) ", text, re.M)]
    inflight = [
        float(v) for v in re.findall(r"^dynamo_frontend_inflight_requests\{[^}]*\} (\S+) ", text, re.M)
    ]
    assert len(queued) == len(inflight) > 5
    assert all(0 <= q <= i for q, i in zip(queued, inflight, strict=True)) and max(inflight) > 0


# -- Triton -------------------------------------------------------------------------------------------------

#: the backend's families newer than the README page (custom_metrics_reporter.cc: per-request token histograms)
TRITON_NEWER = {"nv_llm_input_token_len": "histogram", "nv_llm_output_token_len": "histogram"}


def test_triton_writes_the_backends_names_types_and_label_values(bundles):
    real = (DATA / "triton_trtllm_metrics_docs.txt").read_text(encoding="utf-8")
    text = engine_text(bundles["triton"])
    assert not re.search(r"^(vllm:|tgi_|dynamo_|trtllm_)", text, re.MULTILINE)
    real_types = {**types_of(real), **TRITON_NEWER}
    written = types_of(text)
    assert written and all(real_types.get(f) == k for f, k in written.items()), written
    assert set(types_of(real)) <= set(written)  # every family of the recorded page
    for sample, keysets in samples_of(text).items():
        for keys in keysets:
            assert {"model", "version"} <= keys, sample
    pairs = set(re.findall(r'(request_type|kv_cache_block_type)="([^"]*)"', text))
    real_pairs = set(re.findall(r'(request_type|kv_cache_block_type)="([^"]*)"', real))
    assert real_pairs <= pairs and pairs - real_pairs <= {("kv_cache_block_type", "reused")}
    assert le_values(text, "nv_llm_input_token_len") == ["10", "50", "100", "500", "1000", "+Inf"]
    assert not any("first_response" in f or "inter_token" in f for f in written)  # no TTFT, no ITL


def test_triton_counts_microseconds_and_its_queue_is_tritons_own(bundles):
    text = (bundles["triton"] / "metrics" / "triton.om").read_text(encoding="utf-8")

    def last(name: str) -> float:
        return float(re.findall(rf"^{name}\{{[^}}]*\}} (\S+) ", text, re.MULTILINE)[-1])

    n = last("nv_inference_request_success")
    assert n > 100 and last("nv_inference_count") == n
    assert last("nv_inference_request_duration_us") > 1e6 * n * 0.1  # microseconds, not seconds
    assert last("nv_inference_queue_duration_us") < 100 * n  # handed to the executor at once
    assert last("nv_inference_compute_infer_duration_us") < last("nv_inference_request_duration_us")


# -- every telling ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "engine"),
    [("tgi", "tgi"), ("dynamo-frontend", "dynamo"), ("dynamo", "vllm"), ("triton", "triton")],
)
def test_the_bundle_reads_back_with_its_engine_recognised(bundles, dialect, engine):
    """The reader knows each telling's engine; Dynamo with its workers answers in the workers' vLLM
    names first (perfkit.engine.dialects: the frontends last)."""
    b = load_bundle(bundles[dialect])
    assert b.missing == []
    assert serving_engine(LocalEngine(b.store)) == engine
    own = {reader.dialect_of(n).name for n in b.store if reader.dialect_of(n) is not None}
    assert own == ({"vllm", "dynamo"} if dialect == "dynamo" else {engine})


def _records(dialect: str) -> tuple[np.ndarray, Recorder]:
    s = spec(dialect)
    s = replace(s, duration_s=SECONDS, phases=(), releases=())
    rng = np.random.default_rng(s.seed)
    rec = Recorder(s, rng)
    Engine(s, rec, rng).run()
    return np.asarray([r[:8] for r in rec.records], dtype=float), rec


@pytest.mark.parametrize("dialect", TELLINGS)
def test_same_seed_same_physics_as_the_vllm_telling(dialect):
    vllm, _ = _records("vllm")
    told, rec = _records(dialect)
    assert told.shape == vllm.shape and np.array_equal(told, vllm)
    assert rec.told is not None


def test_the_gpu_and_node_series_are_the_vllm_tellings(bundles):
    for target in ("dcgm.om", "node.om"):
        want = (bundles["vllm"] / "metrics" / target).read_bytes()
        for dialect in TELLINGS:
            assert (bundles[dialect] / "metrics" / target).read_bytes() == want, (dialect, target)


@pytest.mark.parametrize("dialect", TELLINGS)
def test_fixed_seed_gives_a_byte_identical_bundle(bundles, tmp_path, dialect):
    again = _told(dialect, tmp_path / "again")
    first = bundles[dialect]
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for rel in files:
        assert (first / rel).read_bytes() == (again / rel).read_bytes(), rel


def test_an_oom_crash_is_told_in_each_engines_lines(tmp_path):
    """The OOM scenario: TGI's shard error and PyTorch's line, Dynamo's worker through its log handler,
    Triton's TensorRT-LLM runtime error (no PyTorch there); the frontend alone logs no engine line."""
    want = {
        "tgi": ("tgi.log", "ERROR text_generation_launcher: Method Decode encountered an error."),
        "dynamo": ("dynamo-worker.log", "ERROR core.run_engine_core: EngineCore encountered a fatal error."),
        "triton": ("tritonserver.log", "CUDA runtime error in ::cudaMallocAsync"),
    }
    for dialect, (log, line) in want.items():
        out = tmp_path / dialect
        generate(replace(SCENARIOS["oom-sampler-kv-full"](), dialect=dialect), out, duration_s=240)
        text = (out / "logs" / log).read_text(encoding="utf-8")
        assert line in text, dialect
        assert ("torch.OutOfMemoryError: CUDA out of memory" in text) == (dialect != "triton")
    out = tmp_path / "fe"
    generate(replace(SCENARIOS["oom-sampler-kv-full"](), dialect="dynamo-frontend"), out, duration_s=240)
    assert "out of memory" not in (out / "logs" / "dynamo-frontend.log").read_text(encoding="utf-8")
