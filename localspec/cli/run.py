"""`localspec run`: one prompt, streamed."""

from __future__ import annotations

import secrets
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from localspec.cli.options import (
    MODEL,
    OUTPUT,
    SETTINGS,
    DraftOpt,
    ModelOpt,
    PromptOpt,
    RawOpt,
    ShowAcceptedOpt,
    VerboseOpt,
    fail,
    request,
    signals_stop,
    takes_settings,
    user_errors,
)
from localspec.errors import LocalspecError


@takes_settings()
def run(
    words: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="PROMPT",
            help="The prompt (or -p TEXT, -f FILE, or stdin), its words joined; `run MODEL PROMPT` names "
            "the model first (an alias or a .gguf file), as ollama's does.",
            show_default=False,
        ),
    ] = None,
    prompt: PromptOpt = None,
    file: Annotated[
        Path | None,
        typer.Option("-f", "--file", help="Read the prompt from this file.", rich_help_panel=MODEL),
    ] = None,
    model: ModelOpt = None,
    draft: DraftOpt = None,
    flags: dict = SETTINGS,
    raw: RawOpt = False,
    show_accepted: ShowAcceptedOpt = False,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="No summary line or notes on stderr.", rich_help_panel=OUTPUT),
    ] = False,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object (text, tokens, stop_reason, stats) instead of streaming.",
            rich_help_panel=OUTPUT,
        ),
    ] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Generate text with the target model, drafted by a small model or by prompt lookup."""
    from rich.console import Console

    from localspec.cli.views.loading import loading
    from localspec.cli.views.render import (
        collect,
        fit,
        render_plain,
        result_json,
        summary_line,
        terminal_width,
    )
    from localspec.cli.views.tui import LiveRenderer
    from localspec.session.generation import generation_config
    from localspec.session.loader import load
    from localspec.session.prompt import prompt_tokens, template_notice
    from localspec.text_input import from_arg, read_file, read_stdin

    with user_errors():
        model, text = _model_first(words or [], model, prompt is not None or file is not None)
    given_as = [name for name, value in (("PROMPT", text), ("-p", prompt), ("-f", file)) if value is not None]
    if len(given_as) > 1:
        raise fail(f"give the prompt once, not as {' and '.join(given_as)}")
    if file is not None:
        with user_errors():
            prompt = read_file(file, "prompt file")
    elif prompt is not None or text is not None:
        prompt = from_arg(prompt if prompt is not None else text, "the prompt")  # type: ignore[arg-type]
    elif not sys.stdin.isatty():
        prompt = read_stdin()
    if not prompt and given_as == [] and sys.stdin.isatty() and sys.stdout.isatty() and not json_out:
        # No prompt at a terminal: a conversation, as ollama does, with the same options.
        from localspec.cli.chat import chat

        chat(model=model, draft=draft, show_accepted=show_accepted, verbose=verbose, **flags)
        return
    if not prompt and words:  # the one word named the model
        raise fail(
            f'no prompt for {model}: give it after the model (localspec run {model} "PROMPT"), as -p TEXT, '
            "-f FILE, or on stdin"
        )
    if not prompt:
        raise fail("no prompt: give it as an argument, -p TEXT, -f FILE, or on stdin")
    cancel = threading.Event()
    with user_errors():
        notify = (lambda _m: None) if quiet else (lambda m: typer.echo(m, err=True))
        files, settings = request(model, draft, flags, notify, seed=secrets.randbits(32))
        if settings.draft_mode == "off":  # loading a draft it never uses cost 0.2-0.7 s of the wait
            files = files.without_drafter()
        config = generation_config(settings)
        with loading(files, shown=not quiet and not json_out):
            loaded = load(files, settings, cancel, verbose, notify=notify)
        try:
            notice = None if raw else template_notice(loaded.target)
            tokens = prompt_tokens(loaded.target, prompt, raw)
            with signals_stop(cancel) as stopped:
                events = loaded.engine.generate(tokens, config, cancel)
                if json_out:
                    done = collect(events)
                elif sys.stdout.isatty():
                    done = LiveRenderer(Console(), show_accepted).render(events)
                else:
                    done = render_plain(events)
        finally:
            loaded.close()
    done.stats.load_s, done.stats.draft_load_s = loaded.load_s, loaded.draft_load_s
    if json_out:
        typer.echo(result_json(done, settings.seed, loaded.files, settings))
    elif not quiet:
        if notice:
            typer.echo(f"note: {notice}", err=True)
        typer.echo(fit(summary_line(done.stats, done.stop_reason), terminal_width(sys.stderr)), err=True)
    if done.stop_reason == "interrupted":
        raise typer.Exit(stopped.exit_code)


def _model_first(
    words: list[str], model: str | None, prompt_elsewhere: bool
) -> tuple[str | None, str | None]:
    """(the model, the prompt's words joined) from `run`'s positional words: a first word that names
    a model (an alias, a .gguf) is the model where -m names none, as ollama users type it; where -m
    names one too and no other word is given, the person is asked what they meant."""
    from localspec.session.model_files import names_model

    if not words or not names_model(words[0]):
        return model, " ".join(words) or None
    if model is None:
        return words[0], " ".join(words[1:]) or None
    if len(words) == 1 and not prompt_elsewhere:
        raise LocalspecError(
            f"{words[0]!r} names a model, and -m names {model!r}: give the model once, or send "
            f"{words[0]!r} as the prompt with -p"
        )
    return model, " ".join(words)
