"""The `localspec` command line: the app and its commands."""

from __future__ import annotations

import inspect
import os
import re
import sys
from typing import Annotated

import rich.console
import typer
import typer.core
from typer._click import (
    exceptions as click_errors,  # typer's own copy of click: what it raises
)
from typer._click.utils import PacifyFlushWrapper

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


def _words_show_as_text(display_type_rich):
    """An argument of any number of words (`run`'s prompt, joined) is text to the person typing
    it, not the `<list[str]>` Typer would label it."""

    def display(self: typer.core.TyperArgument, ctx) -> str | None:
        return "<text>" if self.nargs == -1 else display_type_rich(self, ctx)

    return display


typer.core.TyperArgument.display_type_rich = _words_show_as_text(typer.core.TyperArgument.display_type_rich)


def _reader_left(_console: rich.console.Console) -> None:
    """Rich exits with code 1 when the reader of a table closes the pipe (`localspec models | head
    -1`); raised on, main() ends quietly with 0, as `head` expects of what it reads (`localspec run
    ... | head -1` too)."""
    raise BrokenPipeError


rich.console.Console.on_broken_pipe = _reader_left  # type: ignore[method-assign]

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
        bool,
        typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Lossless speculative decoding for local GGUF models (llama.cpp)."""


def _paragraphs(doc: str | None) -> str | None:
    """A docstring's paragraphs, each on one line: Rich keeps a docstring's line breaks, and a help
    line then breaks mid-sentence where the source did, not where the terminal ends."""
    if doc is None:
        return None
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(doc).split("\n\n"))


for command, name in (
    (run, None),
    (chat, None),
    (bench, None),
    (serve, None),
    (pull, None),
    (models, None),
    (rm, None),
    (config, None),
    (rpc_server, "rpc-server"),
):
    app.command(name=name, help=_paragraphs(command.__doc__))(command)
for habit in ("list", "ls"):  # ollama's names for `models`
    app.command(name=habit, hidden=True, help=_paragraphs(models.__doc__))(models)
app.add_typer(cache, name="cache")
app.add_typer(index, name="index")


# What ollama's commands are called here, for the people who type them out of habit (`list` and
# `ls` are commands of their own: they mean `models` and nothing else).
OLLAMA_HABITS = {
    "ps": "localspec keeps no model loaded between commands: `localspec models` lists what is pulled, "
    "`localspec serve` keeps one loaded",
    "show": "`localspec models` lists the models, `localspec config -m ALIAS` what one runs with",
    "delete": "`localspec rm ALIAS` deletes a pulled model",
    "remove": "`localspec rm ALIAS` deletes a pulled model",
    "stop": "a command stops with Ctrl-C; localspec leaves nothing running",
    "start": "`localspec serve` serves a model",
}


def _usage_error(e: click_errors.UsageError) -> str:
    """One line, as every other error: what was wrong, and where what it meant is listed."""
    command = e.ctx.command_path if e.ctx else "localspec"
    message = e.format_message()
    unknown = re.match(r"No such command '(.*)'\.", message)
    if unknown is None:
        return f"{message} (`{command} --help` lists the options)"
    habit = OLLAMA_HABITS.get(unknown[1].lower())
    return (
        f"no command {unknown[1]!r}: {habit}"
        if habit
        else f"{message} (`{command} --help` lists the commands)"
    )


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
        typer.echo(f"error: {_usage_error(e)}", err=True)
        code = 2
    except click_errors.ClickException as e:
        typer.echo(f"error: {e.format_message()}", err=True)
        code = e.exit_code
    except typer.Abort:
        typer.echo("error: interrupted", err=True)
        code = 130
    except BrokenPipeError:
        # Rich's, raised on (_reader_left): a table or help to a reader that left.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the last flush must not fail
        code = 0
    except SystemExit:
        # Click ends a plain write to a reader that left (EPIPE) with 1, its streams pacified first.
        if not isinstance(sys.stdout, PacifyFlushWrapper):
            raise
        code = 0
    sys.exit(code if isinstance(code, int) else 0)
