"""The serving simulator told by Hugging Face TGI, NVIDIA Dynamo (its frontend alone, or with its vLLM
workers scraped) and Triton's TensorRT-LLM backend: each engine's own ``/metrics`` names, types, labels,
units and buckets, and only what that engine exports, from the same simulated requests.

The engine underneath is :mod:`perfkit.lab.sim.engine`, unchanged: a telling is a second recorder the
:class:`~perfkit.lab.sim.exporters.Recorder` feeds (requests arriving, first tokens, decode intervals,
finished requests, engine steps, restarts) and asks at each scrape of the engine target. It draws no
random numbers, so a seed gives the same requests, the same steps and the same GPU and node series in
every dialect. Where an engine's clock starts before the engine's (TGI's validation, Dynamo's frontend
tokenising and routing a request) the telling adds that time to what the engine measured, as a fixed
cost (:func:`validation_s`, :func:`frontend_in_s`), never to the engine's own physics.

``tgi``
    Text Generation Inference's router (``huggingface/text-generation-inference`` at db931fcf, 3.3.6-dev0,
    2026-01-08: ``router/src/server.rs``, ``backends/v3/src/{backend,queue,lib}.rs``,
    ``router/src/validation.rs``), exported by the ``metrics-exporter-prometheus`` crate 0.15.3 (its
    ``Cargo.lock``): no labels on request series, ``method`` on batch series, counters without
    ``_total``, a family only once the router has touched it. Buckets from ``server.rs``: every name
    ending in ``duration`` 35 buckets, 0.0001 x 1.5^k (k = 1..35); ``tgi_request_input_length`` 100 of
    ``max_input_tokens / 100``, ``tgi_request_generated_tokens`` 100 of ``max_total_tokens / 100``.
    No TTFT, no inter-token histogram, no KV usage (only ``tgi_batch_current_max_tokens`` against
    ``tgi_batch_max_total_tokens``). Its ``tgi_request_mean_time_per_token_duration`` is inference time
    (prefill included) over generated tokens (``server.rs``). Left out: ``tgi_batch_next_size`` (1,024
    buckets a scrape), ``tgi_request_max_new_tokens`` (the client's cap, which the simulation has no
    notion of), ``tgi_batch_decode_duration``/``filter_duration``/``concat*`` (router-side work the
    simulation does not time), the per-request ``Success`` log line with its timings.
``dynamo-frontend``
    NVIDIA Dynamo's OpenAI frontend alone (``ai-dynamo/dynamo`` ``lib/llm/src/http/service/metrics.rs``,
    the version of the recorded ``docs/observability/metrics_examples/fe.log`` at ce30a764, whose buckets
    it reproduces: ``generate_log_buckets`` rounded to two significant figures, defaults request duration
    1-256 s x 10, input tokens 50-128,000 x 12, output tokens 50-32,000 x 10, TTFT 0.001-480 s x 18, ITL
    0.001-2 s x 13). ``model`` label lower-cased on request series, the display name on the
    ``dynamo_frontend_model_*`` gauges; ``queued_requests`` counts requests from arrival to their first
    token, ``inflight_requests`` to their last; ITL is observed once per token (a chunk's interval over
    its tokens). No queue-time histogram, no KV usage, no engine log line.
``dynamo``
    The frontend above plus its vLLM worker's system port (``docs/observability/metrics_examples/vllm.log``
    at a7b23c00): ``dynamo_component_*`` with ``dynamo_namespace``/``dynamo_component``/
    ``dynamo_endpoint``/``model`` labels, the ``kvstats`` gauges, and vLLM's own ``vllm:*`` series with
    vLLM's labels (Dynamo adds none to them), written by the Recorder as in the ``vllm`` telling. The
    worker's log is vLLM's lines through Dynamo's Rust log handler (``2026-...Z  INFO core.__init__:
    ...``, ``dynamo/runtime/logging.py``: target ``module.funcName``), with no periodic stats line: Dynamo
    started calling ``do_log_stats`` only in ai-dynamo/dynamo#6566 (2026-02-25), after this version.
``triton``
    Triton Inference Server with the TensorRT-LLM C++ backend's inflight batcher
    (``NVIDIA/TensorRT-LLM`` ``triton_backend/inflight_batcher_llm/src/custom_metrics_reporter`` and
    ``model_instance_state.cc``; ``triton-inference-server/server`` ``docs/user_guide/metrics.md``):
    ``nv_inference_*`` cumulative counters in microseconds and ``nv_trt_llm_*`` gauges from the executor's
    iteration stats, labels ``model="tensorrt_llm"``, ``version="1"`` (the ``tensorrt_llm`` model only: an
    ensemble's preprocessing/postprocessing/ensemble series are not written). What the backend reports
    fixes what the counters mean: a request reaches the executor at once, so
    ``nv_inference_queue_duration_us`` is Triton's own scheduler queue (microseconds) and the executor's
    waiting is inside ``compute_infer``; ``request_type="active"`` is every request the executor holds
    (waiting ones too) and ``"waiting"`` is active less scheduled. No TTFT, no inter-token latency.

The lab never imports a detector: these are the engines' formats, not the triage table's reading of them.
"""

from __future__ import annotations

from perfkit.lab.sim.telling_base import Recorder, Telling
from perfkit.lab.sim.telling_dynamo import Dynamo
from perfkit.lab.sim.telling_tgi import TGI
from perfkit.lab.sim.telling_triton import Triton

TELLINGS = ("tgi", "dynamo-frontend", "dynamo", "triton")

#: the log file each telling's engine writes (logs/<name>.log), and the frontend's beside Dynamo's worker
LOG_FILE = {
    "tgi": "tgi",
    "dynamo-frontend": "dynamo-frontend",
    "dynamo": "dynamo-worker",
    "triton": "tritonserver",
}


def telling_for(rec: Recorder) -> Telling | None:
    """The dialect's telling, or None for the dialects :mod:`perfkit.lab.sim.dialects` writes itself."""
    dialect = rec.spec.dialect
    if dialect == "tgi":
        return TGI(rec)
    if dialect in ("dynamo-frontend", "dynamo"):
        return Dynamo(rec, workers=dialect == "dynamo")
    if dialect == "triton":
        return Triton(rec)
    return None
