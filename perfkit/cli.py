"""The ``perfkit`` command line."""

from __future__ import annotations

import click

from perfkit import __version__


@click.group()
@click.version_option(__version__, prog_name="perfkit")
def cli() -> None:
    """perfkit: performance-incident runbooks and postmortems for LLM serving and training."""


def main() -> None:
    cli()
