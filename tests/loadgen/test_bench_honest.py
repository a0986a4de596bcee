"""perfkit bench's pacing and its knee, against numbers computed from outside the load generator.

* An open-loop plan is rescaled so that its arrivals span exactly ``(n - 1) / rate``: the rate the
  client achieved (requests sent over the span of their send times) must be the requested rate, to
  within the client's schedule lag. Measured on the 2-core development machine under other work
  (2026-12-02, 9 runs of the three cases below): at most 0.73 % off, schedule lag at most 40 ms.
  The 10 % tolerance allows a 74 ms lag difference over the shortest span here (59 gaps at 80/s,
  0.74 s), near twice the worst lag seen; a pacing 10 % slow or fast fails, 1.9x fails by far.
* With ``--concurrency C`` capping the requests in flight and the lab server's fixed timing, the
  system can complete at most ``C / E2E`` requests/s, ``E2E = TTFT + (output_tokens - 1) x ITL``.
  A sweep with levels well below and well above that capacity must put its knee at the last level
  below it, saturated by throughput, and the level past it must achieve about the capacity.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from perfkit.app.cli.main import cli
from perfkit.lab.serve import serving
from perfkit.loadgen.bench import BenchOptions, run_bench
from perfkit.loadgen.shapes import rate_plan

TTFT_MS, ITL_MS = 50.0, 10.0


@pytest.fixture(scope="module")
def lab():
    with serving(ttft_ms=TTFT_MS, itl_ms=ITL_MS, model="perfkit-lab") as url:
        yield url


@pytest.mark.parametrize(("rate", "arrival"), [(30.0, "poisson"), (30.0, "constant"), (80.0, "gamma")])
def test_an_open_loop_rate_is_kept(lab, tmp_path, rate, arrival):
    n = 60
    plan = rate_plan(n, rate, 7, arrival=arrival, burstiness=0.5, prompt_tokens=8, output_tokens=5)
    doc = run_bench(BenchOptions(url=lab, model="perfkit-lab", plan=plan, out=tmp_path / "r.json"))
    load = doc["load"]
    assert load["shape"] == "rate" and load["requested_rate"] == rate
    assert doc["completed"] == n
    # the plan spans (n - 1) / rate seconds exactly: only the client's lag may move the achieved rate
    assert load["achieved_rate"] == pytest.approx(rate, rel=0.10), load
    assert load["schedule_lag_ms"]["90"] < 50.0, load


@pytest.mark.slow  # ~10-35 s: in make test-all and CI, not make test
def test_the_knee_sits_below_the_capacity_the_concurrency_cap_allows(lab, tmp_path):
    slots, output_tokens = 2, 4
    e2e_s = (TTFT_MS + (output_tokens - 1) * ITL_MS) / 1000  # 80 ms
    capacity = slots / e2e_s  # 25 requests/s
    out = tmp_path / "sweep.json"
    res = CliRunner().invoke(
        cli,
        [
            "bench", "--url", lab, "--model", "perfkit-lab", "--sweep", "8:36", "--sweep-steps", "3",
            "--concurrency", str(slots), "--num-requests", "60", "--prompt-tokens", "8",
            "--output-tokens", str(output_tokens), "--no-calibrate", "--quiet", "-o", str(out),
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    sweep = json.loads(out.read_text())
    offered = [round(p["offered_rate"], 6) for p in sweep["points"]]
    assert offered == pytest.approx([8.0, 16.970563, 36.0])  # 0.32x, 0.68x and 1.44x the capacity
    knee = sweep["knee"]
    assert knee["point"]["offered_rate"] == pytest.approx(16.970563), knee
    assert knee["point"]["offered_rate"] < capacity < knee["next"]["offered_rate"]
    assert knee["saturated_by"] == "throughput", knee
    # past the capacity the server completes about C / E2E requests/s (a little under: client overhead),
    # 0.64-0.69 of the offered 36/s: well under the knee's 90 %
    over = sweep["points"][2]
    assert 0.75 * capacity <= over["achieved_rate"] <= 1.05 * capacity, over
    assert "knee" in res.output, res.output
