"""Communication kernels HTA 0.5.0 does not know (issue 20 item 2): by default they are
COMMUNICATION; ``hta_compat=True`` (``perfkit trace --hta-compat``) gives HTA's exact classes.

Kernel names below are copied from where they come from (docs/traces.md lists each pattern's
upstream source): the B200 trace of tests/data/tracelens-traces/ (real), DeepSeek's published
H800 training profile (deepseek-ai/profile-data train.json: its names only; the file carries no
licence, so it is not in tests/data), DeepEP, vLLM, NVSHMEM and RCCL sources."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
import trace_synth as synth

from perfkit.traces import analyze
from perfkit.traces.breakdown import COMM_PATTERNS, COMMUNICATION, COMPUTATION, kernel_type

B200 = Path(__file__).resolve().parents[1] / "data" / "tracelens-traces" / "eager_trace.subset.json.gz"

COMM_NAMES = [
    # the B200 trace (PyTorch symmetric memory, NVLS multimem)
    "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long, "
    "unsigned long, unsigned int*, unsigned long, unsigned long, unsigned long)",
    # DeepSeek's H800 profile (their DeepEP build)
    "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, bool const*)",
    "void dpsk::ep::internode::dispatch<false, 8, false, 8>(int4*, float*, long*, float*)",
    "void dpsk::ep::internode::notify_dispatch<false, 8>(int const*, long*, int, int const*, int*)",
    # DeepEP (deep_ep::intranode / internode_ll kernels)
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*)",
    "void deep_ep::internode_ll::combine<7168, 9>(void*, int*, int, void const*, long const*)",
    # vLLM custom all-reduce
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
    "__nv_bfloat16*, int, int)",
    "void vllm::cross_device_reduce_2stage<c10::Half, 4>(vllm::RankData*, vllm::RankSignals, vllm::Signal*)",
    # NVSHMEM on-stream collectives (barrier_on_stream_kernel_threadgroup<SCOPE>), RCCL's MSCCL
    # (mscclKernel_<op>_<type>_<proto>)
    "void barrier_on_stream_kernel_threadgroup<(threadgroup_t)2>(int, int)",
    "mscclKernel_Sum_bf16_LL",
    # HCCL: the form traceinsight's ^hccl rule matches (no real HCCL trace was found)
    "hcclAllReduce",
]
COMPUTE_NAMES = [  # must stay COMPUTATION: names with dispatch, reduce, all, nccl-like words
    "void cub::DeviceReduceByKeyKernel<cub::DispatchReduceByKey<long*, long*, cub::ConstantInputIterator<int>>>",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>",
    "void moe::dev::routing::routingIndicesHistogramKernel<moe::dev::routing::KernelParams>(int)",
    "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char>(long const*)",
    "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(dpsk::grouped_gemm::Params)",
    "flash_fwd_kernel",
]


@pytest.mark.parametrize("name", COMM_NAMES)
def test_known_communication_kernels_are_communication_unless_hta_compat(name):
    assert kernel_type(name) == COMMUNICATION
    assert kernel_type(name, hta_compat=True) == COMPUTATION  # HTA 0.5.0 counts them as compute


@pytest.mark.parametrize("name", COMPUTE_NAMES)
def test_compute_kernels_stay_compute(name):
    assert kernel_type(name) == kernel_type(name, hta_compat=True) == COMPUTATION


def test_every_pattern_has_a_name_here_and_a_source():
    """A pattern added without an upstream name in COMM_NAMES fails here."""
    import re

    for label, pattern, source in COMM_PATTERNS:
        assert source and any(re.search(pattern, n) for n in COMM_NAMES), label


def _rounded_sum(path: Path, needle: str) -> float:
    """Sum of [ceil(ts), floor(ts + dur)] over the GPU kernels whose name holds ``needle``, read
    from the file (HTA's rounding for float µs)."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return float(
        sum(
            max(0, math.floor(e["ts"] + e["dur"]) - math.ceil(e["ts"]))
            for e in doc["traceEvents"]
            if e.get("cat") == "kernel" and needle in e["name"]
        )
    )


def test_the_b200_trace_counts_multimem_all_reduce_as_communication():
    """The real B200 vLLM trace: its multimem all-reduce kernels (2.1 ms, summed from the file
    here) are communication by default, computation under --hta-compat; NCCL's all-gather is
    communication in both. Nothing else moves."""
    want = _rounded_sum(B200, "multimem_all_reduce_kernel")
    nccl = _rounded_sum(B200, "ncclDevKernel")
    assert want > 2000 and nccl > 0
    ours = analyze(B200, whole_trace=True).as_dict()
    hta = analyze(B200, whole_trace=True, hta_compat=True).as_dict()
    top = {(k["kernel_type"], k["name"]): k["sum_us"] for k in ours["ranks"][0]["top_kernels"]}
    multimem = [v for (kind, n), v in top.items() if "multimem_all_reduce_kernel" in n]
    assert multimem == [want] and all(
        kind == COMMUNICATION for kind, n in top if "multimem_all_reduce_kernel" in n
    )
    comm_ours = sum(v["us"] for k, v in ours["kernel_types"].items() if COMMUNICATION in k)
    comm_hta = sum(v["us"] for k, v in hta["kernel_types"].items() if COMMUNICATION in k)
    assert comm_hta == pytest.approx(nccl, abs=1)
    assert comm_ours == pytest.approx(nccl + want, abs=2)  # the two do not overlap in this trace
    assert hta["ranks"][0]["compute_us"] - ours["ranks"][0]["compute_us"] == pytest.approx(want, abs=2)
    assert ours["kernel_classes"].startswith("HTA 0.5.0 plus") and "hta-compat" in hta["kernel_classes"]


def _deepep_events() -> list[dict]:
    """SYNTHETIC (the shape of DeepSeek's H800 profile, not its data): one step; on stream 7 a
    grouped GEMM [100, 700]; on stream 20 DeepEP dispatch [150, 350] and combine [500, 900],
    launched with cudaLaunchKernel. Communication 600 µs, 400 of it under the GEMM."""
    t0 = 1_700_000_000_000_000
    out: list[dict] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": t0, "dur": 1000},
    ]
    kernels = [
        (7, 100, 600, "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(x)"),
        (20, 150, 200, COMM_NAMES[2]),
        (20, 500, 400, COMM_NAMES[1]),
    ]
    for corr, (stream, at, dur, name) in enumerate(kernels, start=1):
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t0 + at - 30,
                    "dur": 5, "args": {"correlation": corr}})  # fmt: skip
        out.append({"ph": "X", "cat": "kernel", "name": name, "ts": t0 + at, "dur": dur,
                    "args": {"stream": stream, "correlation": corr}})  # fmt: skip
    return out


def test_synthetic_deepep_step_is_split_as_communication(tmp_path):
    """Worked by hand from _deepep_events: kernel time 800 (100 -> 900); busy 800, idle 0;
    compute = the GEMM, 600; communication 600, hidden under the GEMM for [150, 350] and
    [500, 700]: 400 of 600 = 66.67 %; non-compute 200 (combine alone after the GEMM). Under
    HTA's classes the DeepEP kernels are compute: compute 800, non-compute 0, no overlap."""
    path = synth.write(tmp_path / "dpsk.json", synth.document(_deepep_events(), world_size=1))
    r = analyze(path).as_dict()["ranks"][0]
    assert (r["kernel_time_us"], r["idle_us"], r["compute_us"], r["non_compute_us"]) == (800, 0, 600, 200)
    assert r["comm_comp_overlap_pct"] == 66.67
    h = analyze(path, hta_compat=True).as_dict()["ranks"][0]
    assert (h["compute_us"], h["non_compute_us"], h["comm_comp_overlap_pct"]) == (800, 0, None)
