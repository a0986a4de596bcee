"""``perfkit lab serve``: the reference OpenAI-compatible streaming server (:mod:`perfkit.lab.serve`).

The ``serve`` command is attached to the ``lab`` group in :mod:`perfkit.app.cli`; ``python -m
perfkit.app.serve_cli`` runs it alone (how :func:`perfkit.lab.serve.serving` starts it).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from perfkit.errors import PerfkitError

if TYPE_CHECKING:
    from perfkit.lab.serve import ServeConfig


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
@click.option("--model", default="perfkit-lab", show_default=True, help="the served model name")
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="loopback only: any other address is refused"
)
@click.option("--port", type=int, default=8000, show_default=True, help="0 picks a free port (printed)")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the per-request fault draws")
def serve(**options: object) -> None:
    """A tiny OpenAI-compatible streaming server with known timing and fault knobs, on 127.0.0.1.

    Token i of a request is due ttft + i*itl after it arrives (with K tokens per chunk the first is
    seen at ttft + (K-1)*itl); the server's "tokenizer" counts whitespace-separated words. Prints
    one line with the URL once it listens; stops on Ctrl-C or SIGTERM.
    """
    from perfkit.lab.serve import ServeConfig, banner

    try:
        config = ServeConfig(**options)  # type: ignore[arg-type]
        run(config, on_ready=lambda url: click.echo(banner(config, url)))  # echo flushes
    except PerfkitError as exc:
        click.echo(f"perfkit: {exc}", err=True)
        sys.exit(2)


def run(config: ServeConfig, on_ready: Callable[[str], None]) -> None:
    """Serve ``config`` until SIGINT or SIGTERM; ``on_ready(url)`` once listening (uvloop when installed)."""
    from perfkit.lab.serve import ReferenceServer, bind

    sock = bind(config.port)

    async def main() -> None:
        server, stop = ReferenceServer(config), asyncio.Event()
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
