"""The `localspec` command line."""

from __future__ import annotations

import contextlib
import secrets
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from localspec import defaults
from localspec.errors import LocalspecError

app = typer.Typer(
    help="Lossless speculative decoding for local GGUF models (llama.cpp).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXIT_INTERRUPTED = 130


@app.callback()
def root() -> None:
    """Lossless speculative decoding for local GGUF models (llama.cpp)."""


@contextlib.contextmanager
def sigint_sets(cancel: threading.Event) -> Iterator[None]:
    """While generating, Ctrl-C asks the engine to stop (and aborts a running llama_decode)
    instead of raising KeyboardInterrupt inside llama.cpp callbacks."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda _sig, _frame: cancel.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def resolve_draft(draft: str | None) -> Path | None:
    if draft is None or draft.lower() == "none":
        return None
    return Path(draft).expanduser()


@app.command()
def run(
    prompt: Annotated[str | None, typer.Option("-p", "--prompt", help="Prompt text (default: read stdin when it is not a terminal).")] = None,
    model: Annotated[str | None, typer.Option("-m", "--model", help="Target GGUF file (default: the embedded SmolLM2-135M demo model).")] = None,
    draft: Annotated[str | None, typer.Option("-d", "--draft", help="Draft GGUF of the same vocabulary, or 'none'.")] = None,
    max_tokens: Annotated[int, typer.Option("-n", "--max-tokens", help="Most tokens to generate.")] = defaults.DEFAULT_MAX_TOKENS,
    temp: Annotated[float, typer.Option("--temp", help="Temperature; 0 is greedy (output identical to the target alone).")] = 0.8,
    top_k: Annotated[int, typer.Option("--top-k", help="Top-k filter (0: off).")] = 40,
    top_p: Annotated[float, typer.Option("--top-p", help="Top-p (nucleus) filter (1: off).")] = 0.95,
    min_p: Annotated[float, typer.Option("--min-p", help="Min-p filter (0: off).")] = 0.05,
    seed: Annotated[int | None, typer.Option("--seed", help="Random seed: same command and machine, same output.")] = None,
    stop: Annotated[list[str] | None, typer.Option("--stop", help="Stop at this text (repeatable).")] = None,
    ctx: Annotated[int, typer.Option("--ctx", help="Context size in tokens (0: the model's, at most 4096).")] = 0,
    threads: Annotated[int | None, typer.Option("--threads", help="Target CPU threads (default: physical cores).")] = None,
    draft_threads: Annotated[int | None, typer.Option("--draft-threads", help="Draft CPU threads (default: physical cores).")] = None,
    gpu_layers: Annotated[int | None, typer.Option("--gpu-layers", help="Target layers on the GPU (default: all when llama.cpp has GPU offload, else 0).")] = None,
    draft_gpu_layers: Annotated[int | None, typer.Option("--draft-gpu-layers", help="Draft layers on the GPU (default as --gpu-layers).")] = None,
    draft_max: Annotated[int, typer.Option("--draft-max", help="Most tokens drafted per step.")] = defaults.DEFAULT_DRAFT_MAX,
    draft_min: Annotated[int, typer.Option("--draft-min", help="A shorter draft is not verified; the step decodes the target alone.")] = defaults.DEFAULT_DRAFT_MIN,
    draft_p_min: Annotated[float, typer.Option("--draft-p-min", help="Stop drafting when the draft's top token probability falls below this.")] = defaults.DEFAULT_DRAFT_P_MIN,
    lookup: Annotated[bool | None, typer.Option("--lookup/--no-lookup", help="Prompt-lookup (n-gram) drafting: on by default without a draft model; --lookup beside a draft model chains them.")] = None,
    lookup_min: Annotated[int, typer.Option("--lookup-min", help="Shortest n-gram looked up.")] = defaults.DEFAULT_LOOKUP_MIN,
    lookup_max: Annotated[int, typer.Option("--lookup-max", help="Longest n-gram looked up.")] = defaults.DEFAULT_LOOKUP_MAX,
    raw: Annotated[bool, typer.Option("--raw", help="Send the prompt as is, without the model's chat template.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object (text, tokens, stop_reason, stats) instead of streaming.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", help="Show llama.cpp's own logs.")] = False,
) -> None:
    """Generate text with the target model, drafted by a small model or by prompt lookup."""
    from localspec.engine.speculative import GenerationConfig
    from localspec.hardware import default_gpu_layers, physical_cores
    from localspec.loader import LoadOptions, load
    from localspec.prompt import prompt_tokens
    from localspec.render import collect, render_plain, result_json, summary_line
    from localspec.sampling import SamplingParams

    if prompt is None and not sys.stdin.isatty():
        prompt = sys.stdin.read()
    if not prompt:
        raise fail("no prompt: pass -p TEXT or pipe text on stdin")
    for name, value in (("--ctx", ctx), ("--lookup-min", lookup_min - 1), ("--draft-min", draft_min)):
        if value < 0:
            raise fail(f"{name} must not be negative")
    if lookup_max < lookup_min:
        raise fail("--lookup-max must be >= --lookup-min")
    if draft_p_min < 0 or draft_p_min > 1:
        raise fail("--draft-p-min must be in [0, 1]")
    for name, value in (("--threads", threads), ("--draft-threads", draft_threads)):
        if value is not None and value < 1:
            raise fail(f"{name} must be >= 1")
    seed = seed if seed is not None else secrets.randbits(32)
    config = GenerationConfig(
        max_tokens=max_tokens,
        sampling=SamplingParams(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p),
        seed=seed,
        stop=tuple(stop or ()),
        draft_max=draft_max,
        draft_min=draft_min,
    )
    cancel = threading.Event()
    try:
        config.validate()
        if model is None:
            model_path = defaults.embedded_model()
            what = "n-gram prompt lookup" if lookup is not False else "no drafting"
            if draft is None:
                typer.echo(f"using the embedded {defaults.EMBEDDED_NAME} with {what}", err=True)
        else:
            model_path = Path(model).expanduser()
        cores = physical_cores()
        gpu_default = default_gpu_layers()
        opts = LoadOptions(
            model=model_path,
            draft=resolve_draft(draft),
            lookup=lookup,
            n_ctx=ctx,
            threads=threads or cores,
            draft_threads=draft_threads or cores,
            gpu_layers=gpu_default if gpu_layers is None else gpu_layers,
            draft_gpu_layers=gpu_default if draft_gpu_layers is None else draft_gpu_layers,
            draft_max=draft_max,
            draft_p_min=draft_p_min,
            lookup_min=lookup_min,
            lookup_max=lookup_max,
            verbose=verbose,
        )
        loaded = load(opts, cancel)
        try:
            tokens = prompt_tokens(loaded.target, prompt, raw)
            with sigint_sets(cancel):
                events = loaded.engine.generate(tokens, config, cancel)
                done = collect(events) if json_out else render_plain(events)
        finally:
            loaded.close()
    except LocalspecError as e:
        raise fail(str(e), e.exit_code) from None
    except KeyboardInterrupt:
        raise fail("interrupted", EXIT_INTERRUPTED) from None
    done.stats.load_s = loaded.load_s
    if json_out:
        typer.echo(result_json(done, seed))
    else:
        typer.echo(summary_line(done.stats, done.stop_reason), err=True)
    if done.stop_reason == "interrupted":
        raise typer.Exit(EXIT_INTERRUPTED)


def main() -> None:
    app()
