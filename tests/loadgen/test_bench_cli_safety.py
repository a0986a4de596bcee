"""``perfkit bench``'s command line against hostile options and inputs (issue 22; issue 21 item 7):
secrets in options never echoed, NaN refused, a replay log asking for absurd prompts or holding
absurd numbers, exit statuses (2 invalid, 130 Ctrl-C), and vLLM ``bench serve``'s option names."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from perfkit.app.cli.main import cli
from perfkit.lab.serve import serving

SECRET = "sk-proj-Zq81mXv0Lr5Tn2Bw7Kc4Hd9Fy3Gs6Pa"


def _run(*args: str):
    res = CliRunner().invoke(cli, ["bench", *args])
    return res, res.output + (str(res.exception) if res.exception and res.exit_code != 2 else "")


BASE = ("--model", "m", "--concurrency", "1", "--num-requests", "1", "--no-calibrate")


def test_an_api_key_given_as_its_env_var_name_is_refused_without_echoing_it(monkeypatch, tmp_path):
    """S1: it printed "--api-key-env sk-proj-...: that environment variable is not set"."""
    res, out = _run(
        "--url", "http://127.0.0.1:9", "--api-key-env", SECRET, *BASE, "-o", str(tmp_path / "r.json")
    )
    assert res.exit_code == 2 and SECRET not in out and SECRET[:12] not in out
    assert "environment variable" in out and "--api-key-env" in out
    monkeypatch.delenv("PERFKIT_TEST_UNSET_KEY", raising=False)
    res, out = _run(
        "--url",
        "http://127.0.0.1:9",
        "--api-key-env",
        "PERFKIT_TEST_UNSET_KEY",
        *BASE,
        "-o",
        str(tmp_path / "r.json"),
    )
    assert res.exit_code == 2 and "PERFKIT_TEST_UNSET_KEY: that environment variable is not set" in out


@pytest.mark.parametrize(
    "option, url",
    [
        ("--url", f"http://127.0.0.1:9?api_key={SECRET}"),
        ("--url", f"http://admin:{SECRET}@127.0.0.1:9"),
        ("--metrics-url", f"http://admin:{SECRET}@127.0.0.1:9/metrics"),
        ("--metrics-url", f"http://127.0.0.1:9/metrics?token={SECRET}"),
    ],
)
def test_credentials_in_a_url_are_refused_without_echoing_them(tmp_path, option, url):
    """S1, S2: --url's query was echoed whole; --metrics-url with user:password@ or ?token= was
    accepted and written into RESULT.json (server.metrics_url)."""
    base_url = url if option == "--url" else "http://127.0.0.1:9"
    extra = [option, url] if option != "--url" else []
    res, out = _run("--url", base_url, *BASE, *extra, "-o", str(tmp_path / "r.json"))
    assert res.exit_code == 2, out
    assert "credentials" in out and SECRET not in out and "admin" not in out
    assert not (tmp_path / "r.json").exists()


def test_the_api_refuses_a_metrics_url_with_credentials(tmp_path):
    from perfkit.errors import ConfigError
    from perfkit.loadgen.bench import BenchOptions, run_bench
    from perfkit.loadgen.shapes import concurrency_plan

    opts = BenchOptions(
        url="http://127.0.0.1:9",
        model="m",
        plan=concurrency_plan(1, 4, 4, 1),
        out=tmp_path / "r.json",
        metrics_url=f"http://127.0.0.1:9/metrics?token={SECRET}",
    )
    with pytest.raises(ConfigError) as err:
        run_bench(opts)
    assert SECRET not in str(err.value)
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    "option, value",
    [
        ("--timeout", "nan"),
        ("--rate", "nan"),
        ("--duration", "inf"),
        ("--time-scale", "NaN"),
        ("--burstiness", "nan"),
    ],
)
def test_nan_and_infinity_are_refused(tmp_path, option, value):
    """M6: click's FloatRange lets NaN through (every comparison with it is false)."""
    res, out = _run("--url", "http://127.0.0.1:9", *BASE, option, value, "-o", str(tmp_path / "r.json"))
    assert res.exit_code == 2 and "not a finite number" in out, out


@pytest.mark.parametrize("seed", ["-1", str(2**64)])
def test_a_seed_out_of_range_is_refused_without_a_traceback(tmp_path, seed):
    """C3: --seed -1 was a traceback from numpy's SeedSequence."""
    res, out = _run("--url", "http://127.0.0.1:9", *BASE, "--seed", seed, "-o", str(tmp_path / "r.json"))
    assert res.exit_code == 2 and "--seed" in out and "Traceback" not in out


def _log(tmp_path, lines: list[str]):
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    "bad, says",
    [
        (
            '{"arrival_s": 1, "prompt_tokens": 16777216, "output_tokens": 8}',
            "prompt_tokens is over the limit",
        ),
        (
            '{"arrival_s": 1, "prompt_tokens": 8, "output_tokens": 16777216}',
            "output_tokens is over the limit",
        ),
        ('{"arrival_s": 1, "prompt_tokens": ' + "9" * 4301 + ', "output_tokens": 8}', "not JSON"),
        ('{"arrival_s": 1e300, "prompt_tokens": 8, "output_tokens": 8}', "over a million days"),
        ('{"arrival_s": 1, "prompt_tokens": ' + "9" * 400 + ', "output_tokens": 8}', "not a number"),
    ],
)
def test_a_hostile_replay_line_is_one_line_naming_file_and_line(tmp_path, bad, says):
    """M5: 16.7 M-token prompts (30 requests: 3.86 GB, the event loop blocked 108 s); C3: a
    4,301-digit integer was a traceback (Python's int-str limit), 1e300 s printed a 300-digit
    day count."""
    path = _log(tmp_path, ['{"arrival_s": 0, "prompt_tokens": 8, "output_tokens": 8}', bad])
    res, out = _run("--url", "http://127.0.0.1:9", "--model", "m", "--replay", str(path), "--no-calibrate",
                    "-o", str(tmp_path / "r.json"))  # fmt: skip
    assert res.exit_code == 2, out
    line = out.strip().splitlines()[-1]
    assert f"{path}:2" in line and says in line and len(line) < 300, line


def test_every_request_failed_exits_2(tmp_path):
    """E4: 100 % failed requests exited 0."""
    with serving(ttft_ms=5, itl_ms=1, model="perfkit-lab", fail_rate=1.0) as url:
        res, out = _run("--url", url, "--model", "perfkit-lab", "--concurrency", "2", "--num-requests", "6",
                        "--output-tokens", "4", "--no-calibrate", "--warmup", "0", "-o", str(tmp_path / "r.json"))  # fmt: skip
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["failed"] == 6 and not doc["validity"]["valid"]
    assert res.exit_code == 2 and "INVALID" in out and "no request completed" in out


def test_vllm_option_names_are_accepted(tmp_path):
    """issue 21 item 7: vllm bench serve's --request-rate, --num-prompts, --max-concurrency,
    --random-input-len, --random-output-len, --dataset-name random."""
    with serving(ttft_ms=5, itl_ms=1, model="perfkit-lab") as url:
        res, out = _run("--url", url, "--model", "perfkit-lab", "--request-rate", "inf", "--num-prompts", "6",
                        "--max-concurrency", "3", "--random-input-len", "12", "--random-output-len", "5",
                        "--dataset-name", "random", "--no-calibrate", "--warmup", "0", "-o", str(tmp_path / "r.json"))  # fmt: skip
    assert res.exit_code == 0, out
    doc = json.loads((tmp_path / "r.json").read_text())
    load = doc["load"]
    assert (load["shape"], load["num_requests"], load["concurrency"]) == ("burst", 6, 3)
    assert (load["prompt_tokens"], load["output_tokens"]) == (12, 5)
    assert doc["total_output_tokens"] == 6 * 5


def test_ctrl_c_during_calibration_stops_the_run(tmp_path):
    """M7: Ctrl-C stopped the calibration and the full run started anyway. At 0.5 req/s the
    calibration sends 20 requests over 15 s: the signal lands in it (or before it: the same exit)."""
    out = tmp_path / "r.json"
    with serving(ttft_ms=5, itl_ms=1, model="perfkit-lab") as url:
        proc = subprocess.Popen(
            [sys.executable, "-m", "perfkit", "bench", "--url", url, "--model", "perfkit-lab", "--rate", "0.5",
             "--num-requests", "20", "--output-tokens", "4", "--warmup", "0", "--quiet", "-o", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        time.sleep(5.0)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert not out.exists() and b"interrupted" in output
