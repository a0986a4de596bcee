"""The runbooks read the served model and the GPU from the evidence's own labels when incident.yaml
(or live parameters) name neither: vLLM's ``model_name``, dcgm-exporter's ``modelName``. Several
workloads in one Prometheus name none until a scope picks one."""

from __future__ import annotations

import re

from fleet import MODEL, OTHER_MODEL, fleet_bundle

from perfkit.app.runbooks.inference import open_incident, scope
from perfkit.triage.table import triage_bundle


def _unnamed(tmp_path, *, gpu_of_other: str | None = None, count: bool = True):
    """The fleet bundle with incident.yaml's model and GPU removed (a capture that did not know
    them); ``gpu_of_other``: the second host's GPUs are of that kind."""
    root = fleet_bundle(tmp_path)
    inc = root / "incident.yaml"
    text = re.sub(r"^model: .*\n", "", inc.read_text(), flags=re.M)
    text = re.sub(r"^  gpu: .*\n", "", text, flags=re.M)
    inc.write_text(text if count else re.sub(r"^  count: .*\n", "", text, flags=re.M))
    if gpu_of_other:
        dcgm = root / "metrics" / "dcgm.om"
        lines = [
            ln.replace('modelName="NVIDIA H100 80GB HBM3"', f'modelName="{gpu_of_other}"')
            if 'Hostname="other-0"' in ln
            else ln
            for ln in dcgm.read_text().splitlines()
        ]
        dcgm.write_text("\n".join(lines) + "\n")
    return root


def test_one_workload_in_scope_names_its_model_and_gpu(tmp_path):
    root = _unnamed(tmp_path)
    ctx = open_incident(str(root), scope=f'{{model_name="{MODEL}"}}')
    assert ctx.error is None, ctx.error
    assert ctx.incident.model == MODEL and ctx.incident.hardware.gpu == "NVIDIA H100 80GB HBM3"
    rows = dict(scope(ctx).table.rows())
    assert rows["model"] == MODEL and "NVIDIA H100 80GB HBM3" in rows["hardware"]
    assert "from the model_name label" in rows["read from the evidence"]
    # perfkit triage (the seam drills grade through) reads the same, and the decode row has a roofline
    directions = triage_bundle(root, scope=f'{{model_name="{MODEL}"}}').to_json()["directions"]
    decode = next(d for d in directions if d["id"] == "decode_efficiency")
    roofline = decode["verification"]["decode_roofline"]
    assert roofline["incident"]["model"] == "qwen3-32b" and roofline["incident"]["gpu"] == "h100-sxm", (
        roofline
    )
    unscoped = triage_bundle(root).to_json()["directions"]  # two models: no guess
    decode = next(d for d in unscoped if d["id"] == "decode_efficiency")
    assert "no model named" in decode["verification"]["decode_roofline"]["unavailable"]


def test_several_workloads_name_no_model_and_say_why(tmp_path):
    ctx = open_incident(str(_unnamed(tmp_path, gpu_of_other="NVIDIA A100-SXM4-80GB")))
    assert ctx.error is None, ctx.error
    assert ctx.incident.model is None and ctx.incident.hardware.gpu == "unknown"
    said = dict(scope(ctx).table.rows())["read from the evidence"]
    assert "2 values of model_name" in said and repr(MODEL) in said and repr(OTHER_MODEL) in said
    assert "2 values of modelName" in said and "set scope" in said


def test_incident_yaml_wins_over_the_labels(tmp_path):
    root = fleet_bundle(tmp_path)  # incident.yaml names qwen3-32b on H100s
    ctx = open_incident(str(root), scope=f'{{model_name="{OTHER_MODEL}"}}')
    assert ctx.error is None, ctx.error
    assert ctx.incident.model == MODEL and "identified" not in ctx.results


def test_without_a_gpu_count_the_roofline_is_not_guessed(tmp_path):
    # the model and GPU come from the labels, but a host's GPUs say nothing of the tensor-parallel
    # size: a 1-GPU roofline of a 70B on 4 GPUs would be wrong by 4x, so it is not computed
    root = _unnamed(tmp_path, count=False)
    directions = triage_bundle(root, scope=f'{{model_name="{MODEL}"}}').to_json()["directions"]
    decode = next(d for d in directions if d["id"] == "decode_efficiency")
    assert "gpu_count" in decode["verification"]["decode_roofline"]["unavailable"]
