"""``perfkit bench``: a load test against an OpenAI-compatible streaming server.

The work is :func:`perfkit.loadgen.bench.run_bench`; this module turns options into a plan, runs the
calibration against ``perfkit lab serve`` (the lab's reference server), draws the progress line
and prints the result for people.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from perfkit.app.cli.options import MAX_SEED
from perfkit.app.runner.loadtest import (
    build_plan,
    calibration_against_lab,
    sweep_rates_option,
)
from perfkit.errors import ConfigError

MAX_PROMPT_TOKENS = 2**20  # perfkit.loadgen.shapes.MAX_PROMPT_TOKENS (not imported: numpy at startup)
MAX_OUTPUT_TOKENS = 2**18  # perfkit.loadgen.shapes.MAX_OUTPUT_TOKENS
EXIT_INVALID = 2  # the run is invalid (validity.valid false; every request failed is one)
EXIT_INTERRUPTED = 130  # Ctrl-C: the CLI's convention (128 + SIGINT)


class FiniteFloat(click.FloatRange):
    """``click.FloatRange`` that refuses NaN and infinity (a range check lets NaN through:
    every comparison with it is false). ``inf_ok``: the text ``inf`` is accepted as infinity
    (``--request-rate inf``: vLLM's spelling of a burst)."""

    def __init__(self, *args: Any, inf_ok: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inf_ok = inf_ok

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if self.inf_ok and isinstance(value, str) and value.strip().lower() in ("inf", "+inf", "infinity"):
            return math.inf
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            number = None
        if number is not None and not math.isfinite(number):
            self.fail(f"{str(value)[:20]!r} is not a finite number", param, ctx)
        return super().convert(value, param, ctx)


SLO_KEYS = ("ttft", "tpot", "e2el")  # judged per request (ITL is per token: no request SLO)


def _slo(pairs: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().lower().removesuffix("_ms")
        try:
            ms = float(value)
        except ValueError:
            ms = float("nan")
        if not sep or key not in SLO_KEYS or not (0 < ms < 3.6e6):
            raise ConfigError(
                f"--slo {pair[:60]!r}: expected one of {', '.join(SLO_KEYS)} = milliseconds, e.g. ttft=500"
            )
        out[key] = ms
    return out


class ProgressLine:
    """One line on stderr, redrawn twice a second: done/sent, rate, live p50/p99 TTFT, errors."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled = total, enabled
        self.console = Console(stderr=True)

    def __call__(self, snap: dict[str, Any]) -> None:
        if not self.enabled:
            return
        p50, p99 = snap.get("p50_ttft_ms"), snap.get("p99_ttft_ms")
        ttft = f"TTFT p50 {p50:.0f} ms p99 {p99:.0f} ms" if p50 is not None else "TTFT -"
        errs = snap["errors"]
        err = f"[red]{errs} errors[/]" if errs else "0 errors"
        self.console.print(
            f"{snap['done']}/{self.total} done, {snap['sent']} sent, {snap['rate']:.1f} req/s, "
            f"{snap['tokens_per_s']:.0f} tok/s, {ttft}, {err}",
            end="\r",
            highlight=False,
        )

    def close(self) -> None:
        if self.enabled:
            self.console.print()


def print_result(doc: dict[str, Any], out: Path, console: Console | None = None) -> None:
    """The first line says whether requests failed; percentiles come with the error rate beside them."""
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    errors = doc["errors"]
    sent = doc["completed"] + doc["failed"]
    if doc["failed"]:
        kinds = ", ".join(f"{k} {v}" for k, v in errors["by_kind"].items())
        console.print(
            f"[bold red]{doc['failed']} of {sent} requests failed[/] ({errors['rate']:.1%}: {escape(kinds)})"
        )
    else:
        console.print(f"[green]all {sent} requests completed[/]")
    if doc.get("interrupted"):
        console.print("[yellow]stopped before the plan's end: these are the requests measured so far[/]")
    v = doc["validity"]
    if not v["valid"]:
        console.print(f"[bold yellow]INVALID run:[/] {escape('; '.join(v['reasons']))}")
    table = Table(title=f"{escape(doc['meta']['model'])} @ {escape(doc['meta']['target'])}")
    for col in ("metric", "mean", "p50", "p90", "p99", "unit"):
        table.add_column(col, justify="right" if col not in ("metric", "unit") else "left")
    names = {
        "ttft": "TTFT",
        "tpot": "TPOT",
        "itl": "ITL (per token)",
        "itl_chunk": "ITL (per chunk)",
        "e2el": "E2E latency",
    }
    for key, label in names.items():
        p = doc["percentiles"].get(f"{key}_ms") or {}
        mean = doc.get(f"mean_{key}_ms")
        table.add_row(label, _f(mean), _f(p.get("50")), _f(p.get("90")), _f(p.get("99")), "ms")
    console.print(table)
    load = doc["load"]
    console.print(
        f"throughput {_f(doc.get('request_throughput'), 2)} req/s, {_f(doc.get('output_throughput'), 0)} output tok/s "
        f"(peak {_f(doc.get('max_output_tokens_per_s'))}/s), error rate {errors['rate']:.1%}; "
        f"tokens per chunk {_f((doc.get('tokens_per_chunk') or {}).get('mean'), 2)}"
    )
    lag = load.get("schedule_lag_ms") or {}
    requested = load.get("requested_rate")
    console.print(
        f"load: {load.get('shape')}"
        + (f", requested {requested:.2f} req/s" if requested else "")
        + (f", achieved {load['achieved_rate']:.2f} req/s" if load.get("achieved_rate") else "")
        + (f", schedule lag p90 {lag['90']:.1f} ms" if lag.get("90") is not None and requested else "")
    )
    gp = doc.get("goodput")
    if gp:
        slo = ", ".join(f"{k} <= {v:g} ms" for k, v in gp["slo_ms"].items())
        console.print(
            f"goodput {gp['requests_per_s']:.2f} req/s; SLO attainment {gp['attainment']:.1%} ({slo})"
        )
    for row in doc.get("client_vs_server") or []:
        flag = "  <- outside the engine (network, gateway, client)" if row["disagree"] else ""
        console.print(
            f"{row['metric']}: client {row['client_mean_ms']:.1f} ms, server {row['server_mean_ms']:.1f} ms, "
            f"gap {row['gap_ms']:+.1f} ms{flag}"
        )
    cal = v.get("calibration")
    if cal:
        console.print(
            f"client overhead (calibration): TTFT +{_f(cal.get('overhead_ttft_ms'), 1)} ms, "
            f"ITL +{_f(cal.get('overhead_itl_ms'), 2)} ms"
        )
    console.print(
        f"result: {out}  records: {out.with_name(doc['records'])}" if doc.get("records") else f"result: {out}"
    )


def print_sweep(sweep: dict[str, Any], out: Path, console: Console | None = None) -> None:
    """Latency and throughput per load level, the knee marked, and why it is the knee."""
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    knee = sweep.get("knee") or {}
    knee_file = (knee.get("point") or {}).get("result")
    table = Table(title="load sweep")
    for col in (
        "offered req/s",
        "achieved req/s",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "ITL p50 ms",
        "out tok/s",
        "errors",
        "",
    ):
        table.add_column(col, justify="right")
    for p in sweep["points"]:
        saturated = knee.get("next") is not None
        mark = ""
        if p["result"] == knee_file:
            mark = "[bold green]<- knee[/]" if saturated else "highest swept (knee above)"
        elif not p["valid"]:
            mark = "invalid"
        table.add_row(
            _f(p["offered_rate"], 2),
            _f(p["achieved_rate"], 2),
            _f(p["p50_ttft_ms"]),
            _f(p["p99_ttft_ms"]),
            _f(p["median_itl_ms"], 2),
            _f(p["output_throughput"], 0),
            f"{p['error_rate']:.1%}",
            mark,
        )
    console.print(table)
    if knee:
        console.print(f"knee: {escape(knee['reason'])}")
    console.print(f"sweep: {out} (each level's result beside it)")


def _f(v: Any, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


@click.command()
@click.option("--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:8000")
@click.option("--model", required=True, help="the model name the server serves")
@click.option(
    "--api-key-env", default=None, help="NAME of the env var holding the API key (never the key itself)"
)
@click.option(
    "--endpoint", type=click.Choice(["completions", "chat"]), default="completions", show_default=True
)
@click.option(
    "--concurrency",
    "--max-concurrency",
    "concurrency",
    type=click.IntRange(1, 10000),
    default=None,
    help="requests in flight (a cap with --rate)",
)
@click.option(
    "--rate",
    "--request-rate",
    "rate",
    type=FiniteFloat(0.001, 100000, inf_ok=True),
    default=None,
    help="arrivals per second (inf: every request at once, as --burst)",
)
@click.option(
    "--arrival", type=click.Choice(["poisson", "gamma", "constant"]), default="poisson", show_default=True
)
@click.option(
    "--burstiness",
    type=FiniteFloat(0.01, 100),
    default=1.0,
    show_default=True,
    help="gamma shape: below 1 burstier",
)
@click.option("--burst", is_flag=True, help="send every request at once")
@click.option(
    "--num-requests",
    "--num-prompts",
    "num_requests",
    type=click.IntRange(1, 10_000_000),
    default=None,
    help="requests to send  [default: 200; a replay: the whole trace]",
)
@click.option(
    "--prompt-tokens",
    "--random-input-len",
    "prompt_tokens",
    type=click.IntRange(1, MAX_PROMPT_TOKENS),
    default=128,
    show_default=True,
)
@click.option(
    "--output-tokens",
    "--random-output-len",
    "output_tokens",
    type=click.IntRange(1, MAX_OUTPUT_TOKENS),
    default=64,
    show_default=True,
)
@click.option(
    "--dataset-name",
    type=click.Choice(["random", "sharegpt"]),
    default=None,
    help="vLLM's names: random (the default: synthetic prompts) or sharegpt (with --dataset-path)",
)
@click.option(
    "--dataset-path",
    default=None,
    help="a local ShareGPT JSON file (--dataset-name sharegpt): each conversation's first human turn "
    "as the prompt, its reply's length as the output length (vLLM's rule)",
)
@click.option(
    "--replay", default=None, help="a request log (JSONL/CSV) or an incident bundle folder to replay"
)
@click.option(
    "--time-scale",
    type=FiniteFloat(0.001, 10000),
    default=1.0,
    show_default=True,
    help="replay speed-up",
)
@click.option(
    "--sweep", default=None, help="LOW:HIGH req/s: a run per rate, low to saturation; prints the knee"
)
@click.option(
    "--sweep-steps", type=click.IntRange(2, 100), default=6, show_default=True, help="load levels of a sweep"
)
@click.option("--duration", type=FiniteFloat(0.1, 86400), default=None, help="stop sending after S seconds")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True)
@click.option("--slo", multiple=True, help="an SLO for goodput, e.g. ttft=500 tpot=50 (ms); repeatable")
@click.option("--tokenizer", default=None, help="a local tokenizer.json for prompts of exact length")
@click.option("--metrics-url", default=None, help="the server's /metrics (default URL/metrics)")
@click.option("--no-metrics", is_flag=True, help="do not scrape the server's /metrics")
@click.option(
    "--calibrate/--no-calibrate",
    default=True,
    show_default=True,
    help="measure the client's own overhead first",
)
@click.option(
    "--self-check",
    is_flag=True,
    help="only measure the client's overhead at this load, against the lab server",
)
@click.option(
    "--timeout",
    type=FiniteFloat(0.1, 86400),
    default=600.0,
    show_default=True,
    help="seconds per request",
)
@click.option("--label", multiple=True, help="KEY=VALUE recorded in the result (version, config, hardware)")
@click.option(
    "-o",
    "--out",
    default="bench.json",
    show_default=True,
    help="the result FILE (a file here; other commands' -o is a folder): records beside it as STEM.requests.parquet",
)
@click.option("--force", is_flag=True, help="overwrite an existing result file and its records")
@click.option("--quiet", is_flag=True, help="no progress line")
@click.option(
    "--warmup",
    type=click.IntRange(0, 100000),
    default=8,
    show_default=True,
    help="requests sent first and not recorded (the server's cold start)",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="client processes (when one core cannot keep up: calibration says so)",
)
def bench(**o: Any) -> None:
    """Load-test an OpenAI-compatible streaming server; write a perfkit.bench/1 result.

    Exit 0: a valid run; 2: an invalid run (its validity says why: every request failed, the
    client's overhead, schedule lag) or unusable options; 130: stopped by Ctrl-C (the result holds
    what was measured). vLLM's option names are accepted: --request-rate, --num-prompts,
    --max-concurrency, --random-input-len, --random-output-len, --dataset-name, --dataset-path.
    """
    from perfkit.core.secrets import env_reference_error
    from perfkit.loadgen.bench import BenchOptions, check_metrics_url, check_url, run_bench, run_sweep
    from perfkit.loadgen.store import parse_labels

    if o["api_key_env"] and (message := env_reference_error("--api-key-env", o["api_key_env"])):
        raise ConfigError(message)  # never echoes the value: it may be the key itself
    url = check_url(o["url"])
    if o["metrics_url"]:
        o["metrics_url"] = check_metrics_url(o["metrics_url"])
    if o["rate"] is not None and math.isinf(o["rate"]):  # --request-rate inf: vLLM's burst
        if o["burst"]:
            raise ConfigError("--request-rate inf is --burst: give one of them")
        o["rate"], o["burst"] = None, True
    if sum(x is not None for x in (o["rate"], o["replay"], o["burst"] or None, o["sweep"])) > 1:
        raise ConfigError(
            "choose one load: --rate, --burst, --replay or --sweep (--concurrency may cap any of them)"
        )
    rates = sweep_rates_option(o["sweep"], o["sweep_steps"]) if o["sweep"] else None
    plan_args = dict(
        concurrency=o["concurrency"],
        rate=rates[0] if rates else o["rate"],
        burst=o["burst"],
        arrival=o["arrival"],
        burstiness=o["burstiness"],
        num_requests=o["num_requests"],
        prompt_tokens=o["prompt_tokens"],
        output_tokens=o["output_tokens"],
        replay=o["replay"],
        time_scale=o["time_scale"],
        duration=o["duration"],
        seed=o["seed"],
    )
    plan = build_plan(**plan_args)
    prompts, prompts_note, dataset = None, None, dataset_lengths(o, len(plan.at_s))
    if dataset is not None:
        prompts, p_len, o_len, prompts_note = dataset
        plan = replace(plan, prompt_tokens=p_len, output_tokens=o_len)
    api_key = None
    if o["api_key_env"]:
        api_key = os.environ.get(o["api_key_env"])
        if not api_key:
            raise ConfigError(f"--api-key-env {o['api_key_env']}: that environment variable is not set")
    opts = BenchOptions(
        url=url,
        model=o["model"],
        plan=plan,
        out=Path(o["out"]),
        endpoint=o["endpoint"],
        api_key=api_key,
        concurrency=o["concurrency"],
        duration_s=o["duration"],
        seed=o["seed"],
        slo_ms=_slo(o["slo"]),
        metrics_url="" if o["no_metrics"] else o["metrics_url"],
        tokenizer=o["tokenizer"],
        timeout_s=o["timeout"],
        labels=parse_labels(o["label"]),  # the store's rules: a result's labels must be storable
        overwrite=o["force"],
        workers=o["workers"],
        warmup=o["warmup"],
        prompts=prompts,
        prompts_note=prompts_note,
    )
    calibration = None
    if o["calibrate"] or o["self_check"]:
        calibration = calibration_against_lab(opts)
        click.echo(
            f"calibration: client overhead at this load TTFT +{calibration['overhead_ttft_ms']:.1f} ms, "
            f"ITL +{calibration['overhead_itl_ms']:.2f} ms ({calibration['requests']} requests against the lab server)",
            err=True,
        )
        if o["self_check"]:
            return
    line = ProgressLine(len(plan.at_s), enabled=not o["quiet"] and sys.stderr.isatty())
    try:
        if rates:
            sweep = run_sweep(
                opts,
                rates,
                lambda r: _with_lengths(build_plan(**{**plan_args, "rate": r}), dataset),
                line,
                calibration=calibration,
                announce=lambda text: click.echo(text, err=True),
            )
        else:
            doc = run_bench(opts, line, calibration=calibration)
    finally:
        line.close()
    if rates:
        print_sweep(sweep, opts.out)
        if sweep.get("interrupted"):
            click.echo("perfkit: interrupted (each level measured so far is written)", err=True)
            sys.exit(EXIT_INTERRUPTED)
        return
    print_result(doc, opts.out)
    sys.exit(exit_status(doc))


def dataset_lengths(o: dict[str, Any], n: int) -> tuple[list[str], Any, Any, str] | None:
    """``--dataset-name sharegpt --dataset-path FILE`` (vLLM's options): ``n`` prompts and their
    lengths (:func:`perfkit.loadgen.prompts.read_sharegpt`); None for synthetic prompts."""
    name, path = o.get("dataset_name"), o.get("dataset_path")
    if path and name != "sharegpt":
        raise ConfigError("--dataset-path is read with --dataset-name sharegpt")
    if name != "sharegpt":
        return None
    if not path:
        raise ConfigError("--dataset-name sharegpt needs --dataset-path FILE (a local ShareGPT JSON file)")
    if o.get("replay"):
        raise ConfigError("--replay sends its log's lengths: give it or --dataset-name sharegpt, not both")
    from perfkit.loadgen.prompts import read_sharegpt

    return read_sharegpt(path, n, o["seed"], o.get("tokenizer"))


def _with_lengths(plan: Any, dataset: tuple[list[str], Any, Any, str] | None) -> Any:
    if dataset is None:
        return plan
    n = len(plan.at_s)
    return replace(plan, prompt_tokens=dataset[1][:n], output_tokens=dataset[2][:n])


def exit_status(doc: dict[str, Any]) -> int:
    """130 when Ctrl-C stopped the run, 2 when it is invalid (said on stderr, with why), else 0."""
    if doc.get("interrupted"):
        click.echo("perfkit: interrupted: the result holds the requests measured so far", err=True)
        return EXIT_INTERRUPTED
    validity = doc.get("validity") or {}
    if not validity.get("valid", False):
        why = "; ".join(validity.get("reasons") or ["no reason recorded"])
        click.echo(f"perfkit: the run is INVALID: {why}", err=True)
        return EXIT_INVALID
    return 0
