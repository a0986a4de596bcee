"""Options several commands share: the live sources and the incident (``run``, ``triage``,
``capture``), and the workload scope (``lab up``, ``drill start``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

MAX_SEED = 2**63 - 1
"""The largest ``--seed`` any command takes (numpy's and Python's generators take 0..2**63-1)."""


def live_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Options naming live sources and the incident (shared by run, triage and capture).

    Each option's name in the command's keyword arguments is the runbook parameter it stands for,
    so :func:`_incident_params` reads them all into one
    :class:`~perfkit.sources.live.IncidentParams`.
    """
    opts = [
        click.option("--prometheus", "prometheus_url", default="", help="Prometheus-compatible API base URL"),
        click.option(
            "--token-env",
            "prometheus_token_env",
            default="",
            help="name of the env var holding the bearer token",
        ),
        click.option(
            "--token-file", "prometheus_token_file", default="", help="file holding the bearer token"
        ),
        click.option(
            "--basic-auth-user",
            "prometheus_basic_auth_user",
            default="",
            help="basic auth user (the password comes from --password-env)",
        ),
        click.option(
            "--password-env",
            "prometheus_password_env",
            default="",
            help="name of the env var holding the basic-auth password",
        ),
        click.option(
            "--timeout",
            "timeout_s",
            default=30.0,
            show_default=True,
            type=click.FloatRange(min=0.1, max=3600),
            help="seconds one HTTP request may take; retries stay within 4x that",
        ),
        click.option("--ca-file", "tls_ca_file", default="", help="CA bundle for https sources"),
        click.option("--alertmanager", "alertmanager_url", default="", help="Alertmanager base URL"),
        click.option("--logs", "logs", multiple=True, help="log file or glob (repeatable)"),
        click.option("--deploys", default="", help="deploy history: events.csv, JSON or YAML"),
        click.option("--git-repo", default="", help="a repository whose tags in the window are releases"),
        click.option("--release-metric", default="", help="METRIC:LABEL whose label changes are releases"),
        click.option("--start", default="", help="incident window start (UTC ISO 8601)"),
        click.option("--end", default="", help="incident window end"),
        click.option("--since", default="", help="instead of --start/--end: the last 2h, 90m, 1d"),
        click.option("--baseline-start", default=""),
        click.option("--baseline-end", default=""),
        click.option("--service", default=""),
        click.option(
            "--scope",
            default="",
            help="the affected workload as PromQL label matchers, e.g. '{model_name=\"llama-70b\"}' "
            "(GPU and host series are narrowed to its hosts)",
        ),
        click.option(
            "--hosts",
            default="",
            help="the workload's hosts (comma-separated), when the host join finds none",
        ),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def scope_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--scope``/``--hosts`` for commands that print or write runbook parameters (lab up, drill)."""
    fn = click.option("--hosts", default="", help="the workload's hosts, comma-separated")(fn)
    return click.option(
        "--scope", default="", help="the affected workload as PromQL label matchers, e.g. '{job=\"train\"}'"
    )(fn)


def scoped_incident(incident: Any, scope: str, hosts: str) -> Any:
    """``incident`` with the command line's scope (checked now, so a typo fails before anything starts)."""
    from dataclasses import replace

    from perfkit.core.scope import parse_scope

    parse_scope(scope or incident.scope, hosts or incident.hosts)
    return replace(incident, scope=scope or incident.scope, hosts=hosts or incident.hosts)
