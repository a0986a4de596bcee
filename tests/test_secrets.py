"""Secrets are references, never values: refused on input, scrubbed from every output file."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from perfkit.app.cli.main import cli
from perfkit.app.runner.run import execute
from perfkit.core.scrub import known_secrets, scrub, slug_like
from perfkit.core.secrets import (
    check_parameters,
    env_reference_error,
    parameter_warnings,
    resolve_secret,
)
from perfkit.errors import SecretLeak

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


@pytest.mark.slow
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
    assert sorted(p.name for p in out.iterdir() if p.is_file() and not p.name.startswith(".")) == [
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


# -- *_env parameters name a variable; they never hold its value (issue 7, row 4) -------------------

PASTED_TOKENS = [
    "sk-proj-abc123def456",
    "a94a8fe5ccb19ba61c4c0873d391e987982fbbd3",  # 40 hex, starts with a letter: a valid identifier
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
    "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "glsa1234567890abcdefABCDEF",  # base62, no underscore
    "AbCdEfGhIjKlMnOpQrStUvWxYz",  # mixed case, no digit, no underscore
    "Bearer abcdefgh12345678",
    "my secret value",
    "http://prom:9090",
]


@pytest.mark.parametrize("token", PASTED_TOKENS)
def test_env_reference_holding_a_token_is_refused_without_quoting_it(token):
    for name in ("prometheus_token_env", "prometheus_password_env", "loki_token_env"):
        with pytest.raises(SecretLeak) as err:
            check_parameters({name: token})
        message = str(err.value)
        assert name in message and "NAME" in message
        assert token not in message and token[:4] not in message


def test_env_reference_rejects_non_text_and_dollar_prefix():
    with pytest.raises(SecretLeak):
        check_parameters({"prometheus_token_env": 12345678901234})
    with pytest.raises(SecretLeak, match="without '\\$'"):
        check_parameters({"prometheus_token_env": "$PROM_TOKEN"})


@pytest.mark.parametrize(
    "name",
    ["PROM_TOKEN", "GRAFANA_API_KEY_2", "AWS_SECRET_ACCESS_KEY", "_PRIVATE", "prom_token", "OPENAI_API_KEY"],
)
def test_real_variable_names_pass(name):
    check_parameters({"prometheus_token_env": name, "prometheus_password_env": name})
    assert env_reference_error("prometheus_token_env", name) is None
    check_parameters({"prometheus_token_env": ""})


def test_resolve_secret_never_quotes_a_pasted_token():
    token = PASTED_TOKENS[1]
    with pytest.raises(SecretLeak) as err:
        resolve_secret(token)
    assert token[:3] not in str(err.value)


def test_parameter_warnings_name_references_that_point_at_nothing(tmp_path):
    secret_file = tmp_path / "token"
    secret_file.write_text("x")
    params = {
        "prometheus_token_env": "PROM_TOKEN",
        "prometheus_token_file": str(tmp_path / "missing"),
        "tls_ca_file": str(secret_file),
        "prometheus_basic_auth_user": "admin",
        "service": "chat",
    }
    warnings = parameter_warnings(params, environ={})
    assert warnings == [
        "prometheus_token_env: environment variable PROM_TOKEN is not set; the request goes without credentials",
        f"prometheus_token_file: {tmp_path / 'missing'} does not exist",
        "prometheus_basic_auth_user: no prometheus_password_env; basic auth goes without a password",
    ]
    assert parameter_warnings({"prometheus_token_env": "PROM_TOKEN"}, environ={"PROM_TOKEN": "t"}) == []
    odd = parameter_warnings({"prometheus_token_env": "abcdefghijklmnop_qrstuvwxyzabcdef"}, environ={})
    assert odd and "abcdefghijklmnop" not in odd[0]  # maybe a token after all: not echoed
    # without '_', a lower-case name is refused outright (a pasted token), so no warning names it
    assert env_reference_error("prometheus_token_env", "abcdefghijklmnopqrstuvwxyzabcdef")


# -- every secret of the environment is scrubbed, not only the referenced one (issue 7, row 6) ------

ENVIRON = {
    "OPENAI_KEY": "sk-proj-Zx81kQ0pLm3n",
    "DATABASE_URL": "postgres://app:hunter2pass@db.internal:5432/x",
    "GITHUB_TOKEN": "ghp_0123456789abcdefABCDEF0123456789abcd",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "SMTP_PASS": "c0rrect'horse\\battery\"staple",
    "SENTRY_DSN": "https://4f9e1c0b7d2a4e6f@o123.ingest.sentry.io/42",
    "SESSION_SIGNING": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",  # no secret name, looks like one
    "AUTH_MODE": "disabled",
    "API_KEY_HEADER": "X-Api-Key",
    "KEYCLOAK_PORT": "8443",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/home/perfkit",
    "LANG": "C.UTF-8",
    "GIT_AUTHOR_EMAIL": "oncall@example.com",
}
LEAKED = [
    "sk-proj-Zx81kQ0pLm3n",
    "hunter2pass",
    "ghp_0123456789abcdefABCDEF0123456789abcd",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "c0rrect'horse",
    "battery",
    "4f9e1c0b7d2a4e6f",
    "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
]


def environ_notebook(environ: dict[str, str]) -> dict:
    """An executed notebook whose cells printed the environment every way a person might."""
    from urllib.parse import quote

    return {
        "cells": [
            {
                "cell_type": "code",
                "source": ["import os\n", "print(os.environ)"],
                "outputs": [
                    {"output_type": "stream", "name": "stdout", "text": [f"environ({environ!r})\n"]},
                ],
            },
            {
                "cell_type": "code",
                "source": ["dict(os.environ)"],
                "outputs": [
                    {
                        "output_type": "execute_result",
                        "data": {
                            "text/plain": [repr(environ)],
                            "application/json": dict(environ),
                            "text/html": [
                                "<table>"
                                + "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in environ.items())
                                + "</table>"
                            ],
                        },
                    },
                ],
            },
            {
                "cell_type": "code",
                "source": ["%env"],
                "outputs": [
                    {
                        "output_type": "stream",
                        "name": "stdout",
                        "text": [f"{k}={v}\n" for k, v in environ.items()],
                    },
                    {
                        "output_type": "stream",
                        "name": "stdout",
                        "text": [f"?{k}={quote(v, safe='')}\n" for k, v in environ.items()],
                    },
                ],
            },
        ],
        "metadata": {"kernelspec": {"name": "python3"}},
    }


def test_notebook_printing_os_environ_is_fully_scrubbed():
    secrets = known_secrets({}, ENVIRON)
    clean, hits = scrub(environ_notebook(ENVIRON), secrets)
    text = json.dumps(clean, ensure_ascii=False)
    assert hits > 0
    for leaked in LEAKED:
        assert leaked not in text, leaked
        assert quote(leaked, safe="") not in text, leaked
    assert "c0rrect" not in text and "staple" not in text
    for kept in ("disabled", "X-Api-Key", "8443", "/usr/local/bin:/usr/bin:/bin", "/home/perfkit", "C.UTF-8"):
        assert kept in text, kept
    assert "oncall@example.com" in text  # AUTHOR is not AUTH
    assert clean["metadata"] == {"kernelspec": {"name": "python3"}}


def test_scrub_leaves_a_notebook_without_secrets_alone():
    nb = environ_notebook({"PATH": "/usr/bin", "HOME": "/root"})
    clean, hits = scrub(nb, known_secrets({}, ENVIRON))
    assert hits == 0 and clean == nb


ENV_LEAK_NOTEBOOK = {
    "cells": [
        {
            "id": "parameters",
            "cell_type": "code",
            "metadata": {"tags": ["parameters"]},
            "source": "service = 'chat'",
            "outputs": [],
            "execution_count": None,
        },
        {
            "id": "print-environ",
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": "import os\nprint(os.environ)\ndict(os.environ)",
        },
    ],
    "metadata": {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    },
    "nbformat": 4,
    "nbformat_minor": 5,
}


@pytest.mark.notebook
def test_a_cell_printing_os_environ_leaks_nothing(tmp_path, monkeypatch):
    for name in ("OPENAI_KEY", "DATABASE_URL", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "AUTH_MODE"):
        monkeypatch.setenv(name, ENVIRON[name])
    runbook = tmp_path / "env_leak.ipynb"
    runbook.write_text(json.dumps(ENV_LEAK_NOTEBOOK))
    out = tmp_path / "out"
    result = execute(str(runbook), out, {"service": "chat"})
    assert result.error is None, result.error
    assert "OPENAI_KEY" in result.notebook.read_text()  # the cell did print the environment
    for leaked in LEAKED[:4]:
        assert files_containing(out, leaked) == [], leaked
    assert "disabled" in result.notebook.read_text()


# -- short tokens are not variable names -----------------------------------------------------------

SHORT_TOKENS = [
    "a1b2c3d4e5f6a7b8c9d0",  # 20 hex
    "AKIAIOSFODNN7EXAMPLE",  # an AWS access key id: upper-case, but 20 characters
    "Summer2024x",  # a password: mixed case
    "kq3vz8wmx1rt7yhb2nd5lc0pfs9gj4ae",  # 32 lower-case characters and digits
    "tok_a1b2c3d4e5f6a7b8c9d0",  # a random part after an underscore
    "Xy_AbCdEfGhIjKlMnOpQr",  # a mixed-case part of 16+
]


@pytest.mark.parametrize("token", SHORT_TOKENS)
def test_short_tokens_are_refused_as_env_references(token):
    assert env_reference_error("prometheus_token_env", token) is not None
    with pytest.raises(SecretLeak) as err:
        check_parameters({"prometheus_password_env": token})
    assert token not in str(err.value) and token[:4] not in str(err.value)


@pytest.mark.parametrize("name", ["PROMTOKEN", "TOKEN2", "HF_TOKEN", "MY_PROM_TOKEN_FOR_STAGING_2", "a_b"])
def test_plain_variable_names_still_pass(name):
    assert env_reference_error("prometheus_token_env", name) is None


# -- a *_file reference that is no path is not echoed ---------------------------------------------


def test_a_file_reference_is_echoed_only_when_it_looks_like_a_path(tmp_path):
    token = "a1b2c3d4e5f6a7b8c9d0"
    warnings = parameter_warnings({"prometheus_token_file": token}, environ={})
    assert warnings == [
        "prometheus_token_file: the file reference does not exist (not shown: it may be the secret itself)"
    ]
    for path in (str(tmp_path / "missing"), "~/.secrets/prom-token-missing", "prom.token"):
        assert parameter_warnings({"prometheus_token_file": path}, environ={}) == [
            f"prometheus_token_file: {path} does not exist"
        ]


# -- PWD names hold passwords; PWD and OLDPWD are folders ------------------------------------------


def test_pwd_names_are_secret_names_but_the_shells_folders_are_not():
    environ = {
        "MYAPP_PWD": "hunter2hunter2",
        "DB_PWD": "Tr0ub4dor&3",
        "PWD": "/no/such/folder/perfkit-cwd",
        "OLDPWD": "/no/such/folder/perfkit-old",
    }
    secrets = known_secrets({}, environ)
    assert "hunter2hunter2" in secrets and "Tr0ub4dor&3" in secrets
    clean, _ = scrub({"t": repr(environ)}, secrets)
    assert "hunter2" not in clean["t"] and "Tr0ub4dor" not in clean["t"]
    assert "/no/such/folder/perfkit-cwd" in clean["t"] and "/no/such/folder/perfkit-old" in clean["t"]


# -- truncated secrets: no prefix survives --------------------------------------------------------

LONG_KEY = "sk-proj-Zx81kQ0pLm3nR7tY2uW9vB4cD6eF1gH5jK8mN0pQ"  # 48 characters


def test_a_truncated_secret_leaks_no_prefix():
    key = LONG_KEY + "AbCd"  # 52, as pandas shows it: 47 characters and '...'
    secrets = known_secrets({}, {"OPENAI_KEY": key})
    table = (
        "                        0                                                  1\n"
        f"0              OPENAI_KEY  {key[:47]}...\n"
        f"1                   OTHER  {key[:30]}\u2026 and {key[:20]}|\n"
        "2                    HOME  /home/perfkit\n"
    )
    clean, hits = scrub({"text/plain": [table]}, secrets)
    text = clean["text/plain"][0]
    assert hits == 3
    assert key[:12] not in text and "..." not in text and "\u2026" not in text
    assert "OPENAI_KEY  [redacted]\n" in text and "OTHER  [redacted] and [redacted]|" in text
    assert "/home/perfkit" in text
    # shorter than 12 characters: left (too likely to be ordinary text); short secrets: whole only
    assert scrub({"t": key[:11]}, secrets) == ({"t": key[:11]}, 0)
    assert scrub({"t": "abcdefghijkl"}, ["abcdefghijklmno"]) == ({"t": "abcdefghijkl"}, 0)


def test_a_truncated_url_secret_is_matched_after_its_scheme():
    environ = {"SENTRY_DSN": "https://4f9e1c0b7d2a4e6f1a2b@o123.ingest.sentry.io/42"}
    clean, _ = scrub({"t": "SENTRY_DSN  https://4f9e1c0b7d2a4e6f1a..."}, known_secrets({}, environ))
    assert "4f9e1c0b" not in clean["t"]
    clean, hits = scrub({"t": "see https://docs.sentry.io/platforms"}, known_secrets({}, environ))
    assert hits == 0


def test_scrub_stays_fast_on_a_large_notebook():
    import time

    secrets = known_secrets({}, {**ENVIRON, "OPENAI_KEY": LONG_KEY})
    cells = [
        {"outputs": [{"text": [f"line {i} of plain output, nothing secret here\n" * 20]}]}
        for i in range(5000)
    ]
    cells.append({"outputs": [{"text": [f"OPENAI_KEY  {LONG_KEY[:20]}..."]}]})  # every string is walked
    t0 = time.perf_counter()
    clean, hits = scrub({"cells": cells}, secrets)  # about 5 MB
    assert hits == 1 and time.perf_counter() - t0 < 5


# -- slug-like values found only by their variable's name are scrubbed only in context -------------

SLUG_ENV = {
    "VLLM_TOKENIZER": "llama-3.1-70b-instruct",
    "PROFILE_KEY": "inference_latency",
    "HF_TOKEN_MODEL": "meta-llama/Llama-3.1-8B",
    "SMTP_PASS": "correct-horse-battery-staple",  # a password name: scrubbed everywhere
    "PRIVATE_KEY_ID": "a94a8fe5-ccb1-9ba6-1c4c-0873d391e987",  # a UUID: not a slug, scrubbed everywhere
}


def test_slug_like():
    for slug in ("llama-3.1-70b-instruct", "inference_latency", "meta-llama/Llama-3.1-8B", "gpt-4o:latest"):
        assert slug_like(slug), slug
    for not_slug in (
        "a94a8fe5-ccb1-9ba6-1c4c-0873d391e987",
        "Zq7pL0-xWm3Rt9",
        "abc12-def34",
        "single",
        "sk-proj-abcdef",
        "http://prom:9090",
        "two words",
    ):
        assert not slug_like(not_slug), not_slug


def test_slug_values_are_scrubbed_only_after_their_variable_name():
    secrets = known_secrets({}, SLUG_ENV)
    assert sorted(secrets.contextual) == [
        ("HF_TOKEN_MODEL", "meta-llama/Llama-3.1-8B"),
        ("PROFILE_KEY", "inference_latency"),
        ("VLLM_TOKENIZER", "llama-3.1-70b-instruct"),
    ]
    assert "correct-horse-battery-staple" in secrets and SLUG_ENV["PRIVATE_KEY_ID"] in secrets
    printed = [
        f"environ({SLUG_ENV!r})",
        json.dumps(SLUG_ENV),
        *(f"{k}={v}" for k, v in SLUG_ENV.items()),
        *(f"{i:>3}  {k:<20} {v}" for i, (k, v) in enumerate(SLUG_ENV.items())),
        *(f"| {k} | {v} |" for k, v in SLUG_ENV.items()),
        "".join(f"<tr>\n  <td>{k}</td>\n  <td>{v}</td>\n</tr>" for k, v in SLUG_ENV.items()),
        *(f"export {k}='{v}'" for k, v in SLUG_ENV.items()),
        *(f"?{k}={quote(v, safe='')}" for k, v in SLUG_ENV.items()),
    ]
    kept = [
        "model: llama-3.1-70b-instruct, p95 TTFT 3.4 s",
        "runbook inference_latency v1.2.0",
        "served meta-llama/Llama-3.1-8B on 8 GPUs",
        "VLLM_TOKENIZER is set\nllama-3.1-70b-instruct is the model",  # not on the name's line
    ]
    clean, hits = scrub({"printed": printed, "kept": kept}, secrets)
    out = "\n".join(clean["printed"])
    for value in SLUG_ENV.values():
        assert value not in out and quote(value, safe="") not in out, value
    assert "VLLM_TOKENIZER=[redacted]" in out and "'PROFILE_KEY': '[redacted]'" in out
    assert '"HF_TOKEN_MODEL": "[redacted]"' in out and "<td>VLLM_TOKENIZER</td>\n  <td>[redacted]</td>" in out
    assert clean["kept"] == kept


def test_a_slug_named_by_a_reference_is_scrubbed_everywhere():
    secrets = known_secrets({"prometheus_token_env": "VLLM_TOKENIZER"}, SLUG_ENV)
    assert "llama-3.1-70b-instruct" in secrets
    assert ("VLLM_TOKENIZER", "llama-3.1-70b-instruct") not in secrets.contextual
    clean, _ = scrub({"t": "model llama-3.1-70b-instruct"}, secrets)
    assert clean == {"t": "model [redacted]"}


def test_scrub_takes_contextual_pairs_explicitly_and_plain_lists():
    clean, hits = scrub(
        ["PROFILE_KEY=inference_latency", "inference_latency"],
        ["zzzzzzzzzz"],
        contextual=[("PROFILE_KEY", "inference_latency")],
    )
    assert clean == ["PROFILE_KEY=[redacted]", "inference_latency"] and hits == 1


# -- perfkit postmortem scrubs the environment too -------------------------------------------------

API_KEY = "Zq7pL0xWm3Rt9Vb2Nc8Kd5Hf1"


def test_render_postmortem_scrubs_the_environment(tmp_path, monkeypatch):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from perfkit.core.findings import MIME, Finding
    from perfkit.report import render_postmortem

    monkeypatch.setenv("MY_API_KEY", API_KEY)
    monkeypatch.setenv("VLLM_TOKENIZER", "llama-3.1-70b-instruct")
    finding = Finding(
        "scope",
        "Scope",
        f"env printed: MY_API_KEY={API_KEY} VLLM_TOKENIZER=llama-3.1-70b-instruct; "
        f"model llama-3.1-70b-instruct; cut {API_KEY[:15]}...",
        data={"title": "Scope title", "incident": "INC-42", "service": "chat-api"},
    )
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cell = new_code_cell("perfkit.core.findings.record(finding)")
    cell.outputs = [new_output("display_data", data={MIME: finding.to_json(), "text/plain": ""})]
    broken = new_code_cell("raise RuntimeError()")
    broken.outputs = [
        new_output("error", ename="HTTPError", evalue=f"403 for key {API_KEY}", traceback=["HTTPError"])
    ]
    nb.cells = [cell, broken]
    path = tmp_path / "nb" / "inference_latency.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    paths = render_postmortem(path, tmp_path / "out")
    for name in ("markdown", "html", "findings"):
        text = paths[name].read_text(encoding="utf-8")
        assert "MY_API_KEY" in text, name  # the summary is there ...
        assert API_KEY[:12] not in text, name  # ... without the key, whole or cut
        assert "VLLM_TOKENIZER=[redacted]" in text and "model llama-3.1-70b-instruct" in text, name
