"""Command-line options and helpers shared by the commands."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from localspec.defaults import EMBEDDED_NAME
from localspec.errors import LocalspecError
from localspec.settings import FIELDS, RANDOM_SEED, Settings, value_types

if TYPE_CHECKING:
    from localspec.loader import ModelFiles

EXIT_INTERRUPTED = 130

# Options shared by run, chat and bench. A setting's flag and help come from the settings record
# (localspec/settings.py); a command's parameter has the setting's name, so `request` finds it.
# Help groups them in panels; short flags follow llama.cpp's where they clash with nothing here.
MODEL, DRAFTING, SAMPLING, PERFORMANCE, OUTPUT, SERVER = "Model", "Drafting", "Sampling", "Performance", "Output", "Server"
PANELS = {
    "max_tokens": SAMPLING, "temp": SAMPLING, "top_k": SAMPLING, "top_p": SAMPLING, "min_p": SAMPLING,
    "seed": SAMPLING, "stop": SAMPLING, "verify": SAMPLING, "ctx": MODEL, "threads": PERFORMANCE, "draft_threads": PERFORMANCE,
    "gpu_layers": PERFORMANCE, "draft_gpu_layers": PERFORMANCE, "slots": SERVER, "rpc": MODEL, "tensor_split": PERFORMANCE,
}


# What a setting's value looks like in --help: its choices, or what it is (a flag shows none).
METAVARS = {"stop": "TEXT", "rpc": "HOST:PORT,...", "tensor_split": "N,N,..."}


def _setting(name: str, *short: str, shown: Any = None) -> Any:
    about = Settings.about(name)
    default = getattr(Settings(), name) if shown is None else shown
    switch = value_types(name) == (bool,)
    flag = f"{about.flag}/--no-{about.key}" if switch else about.flag
    described = switch or default in (None, ()) or "default" in about.help
    text = about.help if described else f"{about.help.rstrip('.')} (default {default})."
    metavar = "|".join(about.choices) if about.choices else "" if switch else METAVARS.get(name)
    return typer.Option(*short, flag, help=text, rich_help_panel=PANELS.get(name, DRAFTING), metavar=metavar)


PromptOpt = Annotated[str | None, typer.Option("-p", "--prompt", metavar="TEXT", help="Prompt text (default: read stdin when it is not a terminal).", rich_help_panel=MODEL)]
ModelOpt = Annotated[str | None, typer.Option("-m", "--model", metavar="FILE|ALIAS", help="Target GGUF file or pulled alias (default: the embedded SmolLM2-135M demo model).", rich_help_panel=MODEL)]
DraftOpt = Annotated[str | None, typer.Option("-d", "-md", "--draft", metavar="FILE|none", help="Draft GGUF of the same vocabulary, or 'none'.", rich_help_panel=MODEL)]
MaxTokensOpt = Annotated[int | None, _setting("max_tokens", "-n")]
TempOpt = Annotated[float | None, _setting("temp")]
TopKOpt = Annotated[int | None, _setting("top_k")]
TopPOpt = Annotated[float | None, _setting("top_p")]
MinPOpt = Annotated[float | None, _setting("min_p")]
SeedOpt = Annotated[int | None, _setting("seed", "-s")]
StopOpt = Annotated[list[str] | None, _setting("stop")]
CtxOpt = Annotated[int | None, _setting("ctx", "-c")]
ThreadsOpt = Annotated[int | None, _setting("threads", "-t")]
DraftThreadsOpt = Annotated[int | None, _setting("draft_threads", "-td")]
GpuLayersOpt = Annotated[int | None, _setting("gpu_layers", "-ngl")]
DraftGpuLayersOpt = Annotated[int | None, _setting("draft_gpu_layers", "-ngld")]
DraftMaxOpt = Annotated[int | None, _setting("draft_max")]
DraftMinOpt = Annotated[int | None, _setting("draft_min")]
DraftPMinOpt = Annotated[float | None, _setting("draft_p_min")]
DraftModeOpt = Annotated[str | None, _setting("draft_mode")]
DraftPolicyOpt = Annotated[str | None, _setting("draft_policy")]
VerifyOpt = Annotated[str | None, _setting("verify")]
DraftBranchesOpt = Annotated[int | None, _setting("draft_branches")]
DraftPSplitOpt = Annotated[float | None, _setting("draft_p_split")]
LookupOpt = Annotated[bool | None, _setting("lookup")]
LookupMinOpt = Annotated[int | None, _setting("lookup_min")]
LookupMaxOpt = Annotated[int | None, _setting("lookup_max")]
LookupMethodOpt = Annotated[str | None, _setting("lookup_method")]
SuffixCacheOpt = Annotated[bool | None, _setting("suffix_cache")]
SuffixCacheSizeOpt = Annotated[int | None, _setting("suffix_cache_size")]
SlotsOpt = Annotated[int | None, _setting("slots")]
RpcOpt = Annotated[str | None, _setting("rpc")]
TensorSplitOpt = Annotated[str | None, _setting("tensor_split")]
ShowAcceptedOpt = Annotated[bool, typer.Option("--show-accepted", help="Colour the tokens that came from the draft (terminal only).", rich_help_panel=OUTPUT)]
RawOpt = Annotated[bool, typer.Option("--raw", help="Send the prompt as is, without the model's chat template.", rich_help_panel=MODEL)]
VerboseOpt = Annotated[bool, typer.Option("--verbose", help="Show llama.cpp's own logs.", rich_help_panel=OUTPUT)]


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


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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
    if threading.current_thread() is not threading.main_thread():
        yield stopped
        return

    def stop(sig: int, _frame: object) -> None:
        stopped.signal = sig
        cancel.set()

    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        yield stopped
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def request(
    given: Mapping[str, Any], notify: Callable[[str], None] = lambda m: typer.echo(m, err=True), **defaults_: Any
) -> tuple[ModelFiles, Settings]:
    """A command's parameters (its `locals()`, handed over once) as the files to load and the
    settings: flags given over LOCALSPEC_* variables over the command's own defaults (`defaults_`)
    over the alias's recommended settings over the config file over the built-in defaults."""
    from localspec.loader import resolve
    from localspec.user_config import pick, precedence, read_config, read_env

    config, env = read_config(notify=notify), read_env(notify=notify)
    model, _ = pick("model", given.get("model"), env, config)
    draft, _ = pick("draft", given.get("draft"), env, config)
    files, recommended = resolve(model, draft, notify)
    # --seed -1 asks for a random seed: the command's own (drawn and reported) serves.
    flags = {k: v for k, v in given.items() if k in FIELDS and v is not None and (k, v) != ("seed", RANDOM_SEED)}
    sources = precedence(config, recommended, env, defaults_, flags)
    settings = Settings().merged({k: v for _source, values in sources for k, v in values.items()})
    if model is None and files.draft is None:
        lookup = settings.lookup is not False
        method = "n-gram prompt lookup" if settings.lookup_method == "ngram" else "suffix lookup"
        notify(f"using the embedded {EMBEDDED_NAME} with {method if lookup else 'no drafting'}")
    return files, settings
