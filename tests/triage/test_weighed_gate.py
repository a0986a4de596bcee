"""Issue 35, Why 1, told again on the simulator: a prefill/decode interference incident whose deciding
evidence is far past its cuts (stalls hundreds of times the baseline's, long prompts new, the
correlation's band far above the rule-out) while the TTFT median's "as usual" cut sits within its
noise. Before, the margin rule took the minimum over every cut of the row and read "leading, not
confirmed". Now the confirmatory cut is weighed: confirmed, the cut named.

And the same incident with the engine's settings unknown (its start-up lines gone): the held-back
physics applies wherever stalls that follow long prompts show prefills taking whole steps, not only
where chunked prefill is *known* off.

The batch tenant's long-prompt share is raised until the median of the requests no long prefill held
back sits at the cut; each case first checks it still tells that class (so a simulator change that
moves it away fails here, rather than passing for the wrong reason)."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest

from perfkit.lab.sim.bundle import generate
from perfkit.lab.sim.catalog import SCENARIOS
from perfkit.triage import thresholds as T
from perfkit.triage.table import triage_bundle

pytestmark = pytest.mark.slow


def _bundle(tmp_path, share_x: float, *, settings: bool = True):
    spec = SCENARIOS["tail-interference-batch-tenant"]()
    phases = tuple(replace(p, long_prompt_frac=p.long_prompt_frac * share_x) for p in spec.phases)
    out = tmp_path / f"tenant-{share_x}"
    shutil.rmtree(out, ignore_errors=True)
    generate(replace(spec, phases=phases), out)
    if not settings:  # the engine's start-up lines gone: chunked prefill unknown
        for log in (out / "logs").iterdir():
            lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
            kept = [x for x in lines if "chunked" not in x.lower() and "non-default args" not in x]
            log.write_text("".join(kept), encoding="utf-8")
    return out


def _tail(result):
    return next(r for r in result.results if r.row.direction == "prefill_decode_interference")


@pytest.mark.parametrize("share_x", [3.5, 3.7])  # the unheld median just under, and just over, 1.3x
def test_a_confirmatory_cut_within_its_noise_does_not_veto_evidence_far_past_its_cuts(tmp_path, share_x):
    result = triage_bundle(_bundle(tmp_path, share_x))
    tail = _tail(result)
    median = next(c for c in tail.detection.cuts if c.name == "MEDIAN_FINE_RATIO")
    assert median.margin < T.CONFIRM_MARGIN, f"no longer the class: the median cut is {median.margin:.1%} off"
    deciding = [c for c in (*tail.detection.cuts, *tail.verification.cuts) if c.name not in tail.row.confirms]
    assert min(c.margin for c in deciding) >= T.OUTWEIGH_MARGIN
    assert tail.verification.verdict == "confirmed" and result.top is tail, tail.verification.why
    assert tail.verification.why.startswith("confirmed; the confirmatory cut MEDIAN_FINE_RATIO")
    weighed = tail.verification.numbers["weighed"]
    assert [c["name"] for c in weighed["within_noise"]] == ["MEDIAN_FINE_RATIO"]
    direction = next(d for d in result.to_json()["directions"] if d["id"] == "prefill_decode_interference")
    assert direction["margin"]["cut"] == "MEDIAN_FINE_RATIO" and direction["margin"]["role"] == "confirms"
    assert direction["verification"]["weighed"]["within_noise"][0]["name"] == "MEDIAN_FINE_RATIO"


def test_with_the_engine_settings_unknown_stalls_that_follow_long_prompts_bring_the_held_back_median(
    tmp_path,
):
    result = triage_bundle(_bundle(tmp_path, 1.5, settings=False))
    tail = _tail(result)
    gates = {g.name: g for g in tail.gates}
    assert gates["chunked_prefill_off"].holds is None  # unknown: nothing read it
    assert gates["whole_prompt_prefills"].holds is True
    assert "new stalls follow long prompts" in gates["whole_prompt_prefills"].how
    ev = tail.detection.evidence
    # the window's median moved with the share held back; the median of the rest is as usual
    assert ev["ttft_p50_ratio"] > ev["ttft_p50_unheld_ratio"]
    assert ev["ttft_p50_unheld_ratio"] <= T.MEDIAN_FINE_RATIO * (1 - T.CONFIRM_MARGIN)
    assert tail.verification.verdict == "confirmed" and result.top is tail, tail.verification.why
