"""Reading executed notebooks back: parameters, redaction, timings and cell errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from report_fixtures import CANARY, finding_output

from perfkit.core.findings import MIME, Finding
from perfkit.errors import ConfigError
from perfkit.report.notebook import (
    looks_like_secret,
    read_executed_notebook,
    redact_parameters,
    redact_text,
    secret_values,
)


def test_parameters_from_cells_when_papermill_metadata_is_absent(write_notebook: Callable[..., Path]) -> None:
    path = write_notebook(
        [Finding("scope", "Scope", "s")],
        parameters_source='url = "http://127.0.0.1:9090"\nsince: str = "2h"\nsteps = [1, 2]\nnow = make_now()\n',
        injected_source='since = "30m"\nbearer_token = "Bearer abcdefgh12345678"\n',
    )
    nb = read_executed_notebook(path)
    assert nb.parameters == {
        "url": "http://127.0.0.1:9090",
        "since": "30m",  # the injected value overrides the default
        "steps": [1, 2],
        "bearer_token": "Bearer abcdefgh12345678",
    }
    assert nb.redacted_parameters()["bearer_token"] == "[redacted]"
    assert "abcdefgh12345678" not in repr(nb)


def test_papermill_metadata_overrides_cells(write_notebook: Callable[..., Path]) -> None:
    path = write_notebook([], papermill_params={"since": "6h", "extra": 3})
    nb = read_executed_notebook(path)
    assert nb.parameters["since"] == "6h"
    assert nb.parameters["extra"] == 3
    assert nb.parameters["prometheus_url"] == "http://127.0.0.1:9090"
    assert nb.executed_start == "2026-11-30T05:30:00.000000"


def test_runbook_identity_hash_durations_and_problems(write_notebook: Callable[..., Path]) -> None:
    path = write_notebook(
        [Finding("scope", "Scope", "s"), Finding("gpu", "GPU state", "g")],
        name="training_step.ipynb",
        error=("ValueError", "bad window\nsecond line"),
    )
    nb = read_executed_notebook(path)
    assert nb.runbook == "training_step"  # the file stem when metadata.perfkit is absent
    assert nb.runbook_version == "unknown"
    assert len(nb.sha256) == 64
    assert set(nb.findings) == {"scope", "gpu"}
    assert [c.index for c in nb.cell_durations] == [1, 3, 5, 7]
    assert nb.total_duration_s == pytest.approx(0.75 + 1.25 + 1.75 + 2.25)
    assert nb.cell_durations[1].label == "cell 3 · Scope"
    assert nb.cell_durations[0].label == "cell 1 · [parameters]"
    [problem] = nb.problems
    assert (problem.index, problem.ename, problem.evalue) == (7, "ValueError", "bad window\nsecond line")
    assert problem.label == "cell 7 · Broken section"


def test_runbook_metadata(write_notebook: Callable[..., Path]) -> None:
    path = write_notebook([], perfkit_meta={"runbook": "inference_latency", "runbook_version": "2.0"})
    nb = read_executed_notebook(path)
    assert (nb.runbook, nb.runbook_version) == ("inference_latency", "2.0")


def test_finding_payload_as_string_and_last_one_wins(tmp_path: Path) -> None:
    first = Finding("baseline", "Baseline", "first").to_json()
    second = Finding("baseline", "Baseline", "second").to_json()
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "source": "",
                "outputs": [finding_output(Finding(**_args(first)))],
            },
            {
                "cell_type": "code",
                "metadata": {},
                "source": ["x = 1\n", "y = 2"],
                "outputs": [
                    {"output_type": "display_data", "metadata": {}, "data": {MIME: json.dumps(second)}}
                ],
            },
        ],
    }
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb))
    assert read_executed_notebook(path).findings["baseline"].summary == "second"


def _args(payload: dict) -> dict:
    return {k: payload[k] for k in ("key", "title", "summary")}


def test_malformed_finding_is_a_config_error(tmp_path: Path) -> None:
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "outputs": [{"output_type": "display_data", "data": {MIME: {"title": "x"}}}],
            }
        ]
    }
    path = tmp_path / "bad_finding.ipynb"
    path.write_text(json.dumps(nb))
    with pytest.raises(ConfigError, match=r"bad_finding\.ipynb: malformed perfkit finding"):
        read_executed_notebook(path)


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("prometheus_token", CANARY, "[redacted]"),
        ("prometheus_token_env", "PROM_TOKEN", "PROM_TOKEN"),
        ("loki_password_file", "/run/secrets/loki", "/run/secrets/loki"),
        ("DB_PASSWORD", "hunter2", "[redacted]"),
        ("client_secret", 12345, "[redacted]"),
        ("openai_apikey", "x", "[redacted]"),
        ("api_key", "x", "[redacted]"),
        ("auth_header", "x", "[redacted]"),
        ("gcp_credentials", "x", "[redacted]"),
        ("author", "alice", "alice"),
        ("since", "2h", "2h"),
        ("header", "Bearer abc.def.ghi", "[redacted]"),
        ("key", "sk-live-123", "[redacted]"),
        ("gh", "ghp_abcdef", "[redacted]"),
        ("slack", "xoxb-123-456", "[redacted]"),
        ("jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", "[redacted]"),
        ("opaque", CANARY, "[redacted]"),
        ("scenario", "p95-prefill-interference", "p95-prefill-interference"),
        (
            "bundle",
            "data/scenarios/abc123secretvalue0123456789",
            "data/scenarios/abc123secretvalue0123456789",
        ),
        ("url", "http://127.0.0.1:9090/api/v1", "http://127.0.0.1:9090/api/v1"),
        ("incident", "INC-2026-11-30-0001", "INC-2026-11-30-0001"),
        ("empty_token", "", ""),
    ],
)
def test_redact_parameters(name: str, value: object, shown: object) -> None:
    assert redact_parameters({name: value}) == {name: shown}


def test_redaction_reaches_nested_values() -> None:
    params = {"sources": [{"url": "http://x", "token": "t0ken-value"}, "Bearer zzzzzzzzzz"], "retries": 3}
    assert redact_parameters(params) == {
        "sources": [{"url": "http://x", "token": "[redacted]"}, "[redacted]"],
        "retries": 3,
    }
    assert set(secret_values(params)) == {"t0ken-value", "Bearer zzzzzzzzzz"}


def test_looks_like_secret_is_not_fooled_by_plain_words() -> None:
    assert not looks_like_secret("inference_latency_with_long_name")
    assert not looks_like_secret("806e1c82-4b1f-4c3a-9d2e-1234567890ab")
    assert looks_like_secret("A1b2C3d4E5f6G7h8I9j0K1l2M3")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("401 for Authorization: Bearer abcdefgh12345678", "401 for Authorization: [redacted]"),
        ("bad token=abc123secretvalue0123456789xyz", "bad [redacted]"),
        ("key sk-proj-abcd1234 rejected", "key [redacted] rejected"),
        (
            "prompt tokens per second 123; token budget exceeded",
            "prompt tokens per second 123; token budget exceeded",
        ),
    ],
)
def test_redact_text(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_a_section_that_caught_its_own_failure_is_a_problem(write_notebook: Callable[..., Path]) -> None:
    """The SGLang telling's fix prediction could not draw request lengths: its cell ran cleanly (the
    section caught it and said why), and Provenance said "Problems: none". It lists it now."""
    from perfkit.report.document import provenance

    failed = Finding(
        "predicted_fix",
        "The fix, predicted by a calibrated replay",
        "could not complete: no sglang:prompt_tokens_histogram histogram: cannot draw request lengths",
        status="error",
    )
    nb = read_executed_notebook(write_notebook([Finding("scope", "Scope", "s"), failed]))
    assert nb.problems == []  # no cell raised
    [problem] = provenance(nb)["problems"]
    assert problem["label"] == "section The fix, predicted by a calibrated replay"
    assert problem["ename"] == "could not complete"
    assert problem["evalue"].startswith("no sglang:prompt_tokens_histogram histogram")
    assert (
        provenance(read_executed_notebook(write_notebook([Finding("scope", "Scope", "s")])))["problems"] == []
    )


def test_a_table_with_a_header_and_no_rows_is_not_drawn(write_notebook: Callable[..., Path]) -> None:
    """The loss-spike postmortem's "Trigger / lead-up" showed a bare header (ts, series, before, ...)
    under "no significant shift": the summary says it, an empty grid adds nothing."""
    from perfkit.report.document import build_document

    empty = Finding("changes", "What changed", "no significant shift in the watched series",
                    table={"columns": ["ts", "series", "before", "after"], "rows": []})  # fmt: skip
    full = Finding("gpu", "GPU state", "g", table={"columns": ["gpu"], "rows": [["0"]]})
    doc = build_document(read_executed_notebook(write_notebook([empty, full])))
    assert doc.changes is not None and doc.changes.table is None
    assert doc.views["gpu"].table == {"columns": ["gpu"], "rows": [["0"]]}
