"""The `localspec` command line: the app and its commands."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
import typer.core
from typer._click import (
    exceptions as click_errors,  # typer's own copy of click: what it raises
)

from localspec import __version__
from localspec.cli.bench import bench
from localspec.cli.cache import cache
from localspec.cli.chat import chat
from localspec.cli.config import config
from localspec.cli.index import index
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
        from localspec.backend.devices import build

        typer.echo(f"localspec {__version__} · {build()}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Lossless speculative decoding for local GGUF models (llama.cpp)."""


def _quiet_when_the_reader_leaves(command: Callable) -> Callable:
    """`localspec run ... | head -1`: a reader that stops reading ends the command quietly, with
    exit code 0, as `head` expects of what it reads."""

    @functools.wraps(command)
    def quiet(**kwargs: Any) -> Any:
        try:
            return command(**kwargs)
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's last flush must not fail again
            raise typer.Exit(0) from None

    return quiet


for command, name in ((run, None), (chat, None), (bench, None), (serve, None), (pull, None), (models, None), (rm, None), (config, None), (rpc_server, "rpc-server")):
    app.command(name=name)(_quiet_when_the_reader_leaves(command))
app.add_typer(cache, name="cache")
app.add_typer(index, name="index")


def main() -> None:
    # What the model writes must never end a run: a stream that cannot encode a character (an
    # ASCII-only terminal) gets a replacement instead of raising.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    try:
        code = app(standalone_mode=False)
    except click_errors.NoArgsIsHelpError as e:
        shown = e.ctx.get_help() if e.ctx else ""  # Rich prints the help itself and returns ""
        if shown:
            typer.echo(shown)
        code = 2
    except click_errors.UsageError as e:
        # One line, as every other error: what was wrong, and where the options are listed.
        command = e.ctx.command_path if e.ctx else "localspec"
        typer.echo(f"error: {e.format_message()} (`{command} --help` lists the options)", err=True)
        code = 2
    except click_errors.ClickException as e:
        typer.echo(f"error: {e.format_message()}", err=True)
        code = e.exit_code
    except typer.Abort:
        typer.echo("error: interrupted", err=True)
        code = 130
    sys.exit(code if isinstance(code, int) else 0)
