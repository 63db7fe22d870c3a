"""The `localspec` command line: the app and its commands."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
import typer.core

from localspec import __version__
from localspec.cli.bench import bench
from localspec.cli.cache import cache
from localspec.cli.chat import chat
from localspec.cli.config import config
from localspec.cli.pull import models, pull, rm
from localspec.cli.rpc_server import rpc_server
from localspec.cli.run import run
from localspec.cli.serve import serve


def _flags_show_no_type(display_type_rich):
    """Typer labels every flag `<bool>` in --help, which reads as if it took a value (`--raw true`
    then fails): a flag shows no type, whoever declared it (--help and completion's too)."""

    def display(self: typer.core.TyperOption, ctx) -> str | None:
        return "" if self.is_flag and self.metavar is None else display_type_rich(self, ctx)

    return display


typer.core.TyperOption.display_type_rich = _flags_show_no_type(typer.core.TyperOption.display_type_rich)

app = typer.Typer(
    help="Lossless speculative decoding for local GGUF models (llama.cpp).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(given: bool) -> None:
    if given:
        typer.echo(f"localspec {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Lossless speculative decoding for local GGUF models (llama.cpp)."""


app.command()(run)
app.command()(chat)
app.command()(bench)
app.command()(serve)
app.command()(pull)
app.command()(models)
app.command()(rm)
app.command()(config)
app.command(name="rpc-server")(rpc_server)
app.add_typer(cache, name="cache")


def main() -> None:
    # What the model writes must never end a run: a stream that cannot encode a character (an
    # ASCII-only terminal) gets a replacement instead of raising.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    app()
