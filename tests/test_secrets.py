"""Secrets are references, never values: refused on input, scrubbed from every output file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from perfkit.cli import cli
from perfkit.errors import SecretLeak
from perfkit.run import execute
from perfkit.secrets import check_parameters, known_secrets, scrub

REPO = Path(__file__).resolve().parents[1]
CANARY = "canary-9f8e7d6c5b4a39281706"


def files_containing(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def test_check_parameters_refuses_values_and_names_only_the_parameter():
    check_parameters({"prometheus_token_env": "PROM_TOKEN", "bundle": "data/scenarios/x"})
    with pytest.raises(SecretLeak) as err:
        check_parameters({"prometheus_token": CANARY})
    assert "prometheus_token" in str(err.value) and CANARY not in str(err.value)
    with pytest.raises(SecretLeak):
        check_parameters({"service": "Bearer abcdefgh12345678"})


def test_scrub_walks_nested_json():
    secrets = known_secrets({"prometheus_token_env": "MY_VAR"}, environ={"MY_VAR": CANARY})
    assert secrets == [CANARY]
    clean, hits = scrub({"a": [f"x{CANARY}y", {"b": CANARY}], "n": 3}, secrets)
    assert hits == 2 and CANARY not in str(clean) and clean["n"] == 3


@pytest.mark.notebook
def test_canary_never_reaches_out_even_when_user_code_prints_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_CANARY", CANARY)
    result = execute(
        str(REPO / "tests/data/leaky.ipynb"), tmp_path, {"prometheus_token_env": "PERFKIT_CANARY"}
    )
    assert result.error and "RuntimeError" in result.error  # the cell failed, and said so ...
    assert CANARY not in result.error  # ... without the token
    assert result.notebook.exists() and (tmp_path / "postmortem.html").exists()
    assert files_containing(tmp_path, CANARY) == []
    assert "[redacted]" in result.notebook.read_text()


@pytest.mark.notebook
def test_canary_in_environment_does_not_leak_from_the_runbook(tmp_path, monkeypatch):
    monkeypatch.setenv("PROM_TOKEN", CANARY)
    out = tmp_path / "out"
    res = CliRunner().invoke(
        cli,
        [
            "run",
            "inference_latency",
            "--bundle",
            str(REPO / "data/scenarios/release-regression"),
            "-o",
            str(out),
            "-p",
            "prometheus_token_env=PROM_TOKEN",
        ],
    )
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == [
        "findings.json",
        "inference_latency.ipynb",
        "postmortem.html",
        "postmortem.md",
    ]
    assert files_containing(out, CANARY) == []
    assert "PROM_TOKEN" in (out / "postmortem.md").read_text()  # the reference is shown


def test_cli_refuses_a_token_value(tmp_path):
    res = CliRunner().invoke(
        cli,
        [
            "run",
            "inference_latency",
            "--bundle",
            str(REPO / "data/scenarios/release-regression"),
            "-o",
            str(tmp_path),
            "-p",
            f"prometheus_token={CANARY}",
        ],
    )
    assert res.exit_code == 2
    assert "prometheus_token" in res.output and CANARY not in res.output
    assert not any(tmp_path.iterdir())
