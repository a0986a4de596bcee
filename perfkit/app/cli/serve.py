"""``perfkit lab serve``: the reference OpenAI-compatible streaming server (:mod:`perfkit.lab.serve`),
or with ``--engine-config FILE`` the simulated serving engine (:mod:`perfkit.lab.servesim.server`).

The ``serve`` command is attached to the ``lab`` group in :mod:`perfkit.app.cli.main`; ``python -m
perfkit.app.cli.serve`` runs it alone (how :func:`perfkit.lab.serve.serving` starts it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import click

from perfkit.app.cli.options import MAX_SEED
from perfkit.core.secrets import env_reference_error
from perfkit.errors import ConfigError, PerfkitError, SecretLeak

if TYPE_CHECKING:
    import socket

    from perfkit.lab.serve import ServeConfig

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


@click.command("serve")
@click.option("--ttft-ms", type=float, default=50.0, show_default=True, help="time to the first token, ms")
@click.option("--itl-ms", type=float, default=10.0, show_default=True, help="time between tokens, ms")
@click.option(
    "--tokens-per-chunk",
    type=int,
    default=1,
    show_default=True,
    help="tokens per streamed event; an event leaves when its last token is due",
)
@click.option(
    "--fail-rate", type=float, default=0.0, show_default=True, help="share of requests answered 500"
)
@click.option(
    "--stall-ms", type=float, default=0.0, show_default=True, help="pause before each middle chunk, ms"
)
@click.option("--close-rate", type=float, default=0.0, show_default=True, help="share of streams cut halfway")
@click.option(
    "--malformed-rate",
    type=float,
    default=0.0,
    show_default=True,
    help="share of streams with a non-JSON event",
)
@click.option(
    "--model",
    default="perfkit-lab",
    show_default=True,
    help="the served model name (with --engine-config: another name than the default renames its served_model_name)",
)
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="loopback only: any other address is refused"
)
@click.option("--port", type=int, default=8000, show_default=True, help="0 picks a free port (printed)")
@click.option(
    "--seed",
    type=click.IntRange(0, MAX_SEED),
    default=0,
    show_default=True,
    help="seed of the per-request fault draws",
)
@click.option(
    "--timing-log",
    default="",
    help="write each streamed request's X-Request-Id and the server's own TTFT (s, from arrival) to this new file",
)
@click.option(
    "--engine-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="simulate a vLLM-like engine described by this YAML file (the timing knobs above are then unused)",
)
@click.option(
    "--speed",
    type=float,
    default=1.0,
    show_default=True,
    help="with --engine-config: virtual time runs this many times faster than the wall clock (>= 1)",
)
@click.option(
    "--admin-token-env",
    default="PERFKIT_LAB_ADMIN_TOKEN",
    show_default=True,
    help="with --engine-config: the env var holding the bearer token of /admin/* (unset: admin disabled)",
)
@click.option(
    "--log-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="with --engine-config: append vLLM-style log lines here (default: stderr)",
)
def serve(**options: Any) -> None:
    """A tiny OpenAI-compatible streaming server with known timing and fault knobs, on 127.0.0.1.

    Token i of a request is due ttft + i*itl after it arrives (with K tokens per chunk the first is
    seen at ttft + (K-1)*itl); the server's "tokenizer" counts whitespace-separated words. Prints
    one line with the URL once it listens; stops on Ctrl-C or SIGTERM.

    With --engine-config FILE it simulates a serving engine instead (continuous batching, KV
    blocks, a roofline step time): vLLM's /metrics and stats log lines, faults switched at runtime
    through /admin/faults (perfkit.lab.servesim.server).
    """
    from perfkit.lab.serve import ServeConfig, banner

    sim = {key: options.pop(key) for key in ("engine_config", "speed", "admin_token_env", "log_file")}
    try:
        config = ServeConfig(**options)
        if sim["engine_config"] is None:
            run(config, on_ready=lambda url: click.echo(banner(config, url)))  # echo flushes
            return
        model = None if config.model == ServeConfig.model else config.model  # not the default: a rename
        run_sim(sim["engine_config"], config, model, **{k: v for k, v in sim.items() if k != "engine_config"})
    except PerfkitError as exc:
        click.echo(f"perfkit: {exc}", err=True)
        sys.exit(2)


class _Server(Protocol):
    async def start(self, sock: socket.socket | None = None) -> str: ...
    async def stop(self) -> None: ...


def run(config: ServeConfig, on_ready: Callable[[str], None]) -> None:
    """Serve ``config`` until SIGINT or SIGTERM; ``on_ready(url)`` once listening (uvloop when installed)."""
    from perfkit.lab.serve import ReferenceServer, bind

    _serve_forever(bind(config.port), lambda: ReferenceServer(config), on_ready)


def run_sim(
    path: Path,
    config: ServeConfig,
    model: str | None,
    *,
    speed: float,
    admin_token_env: str,
    log_file: Path | None,
) -> None:
    """Serve the engine of the YAML file ``path`` (``model``, when given, renames the served model)."""
    from perfkit.lab.serve import bind
    from perfkit.lab.servesim.config import load_config
    from perfkit.lab.servesim.server import SimServer, banner

    # never quote the value: a token pasted in place of its variable's name would land in the terminal
    message = env_reference_error("--admin-token-env", admin_token_env)
    if message or not _ENV_NAME.fullmatch(admin_token_env):
        raise SecretLeak(message or "--admin-token-env: the value is not an environment variable name")
    cfg = load_config(path)
    if model is not None:
        cfg = dataclasses.replace(cfg, served_model_name=model)  # ServeConfig checked the name
    token = os.environ.get(admin_token_env) or None
    log = None
    if log_file is not None:
        try:
            log = open(log_file, "a", encoding="utf-8")  # noqa: SIM115 - open for the server's life
        except OSError as exc:
            raise ConfigError(f"--log-file {log_file}: cannot open for writing ({exc.strerror})") from None
    try:
        sock = bind(config.port)

        def make() -> SimServer:
            return SimServer(cfg, speed=speed, seed=config.seed, admin_token=token, log=log)

        _serve_forever(
            sock, make, lambda url: click.echo(banner(cfg, url, speed, admin_token_env, bool(token)))
        )
    finally:
        if log is not None:
            log.close()


def _serve_forever(sock: socket.socket, make: Callable[[], _Server], on_ready: Callable[[str], None]) -> None:
    async def main() -> None:
        server, stop = make(), asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        on_ready(await server.start(sock))
        await stop.wait()
        await server.stop()

    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    with contextlib.suppress(ImportError):  # optional: the standard loop spends more CPU per chunk
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())


if __name__ == "__main__":
    serve(prog_name="perfkit lab serve")
