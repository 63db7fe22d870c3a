"""`localspec run`: one prompt, streamed."""

from __future__ import annotations

import secrets
import sys
import threading
from typing import Annotated

import typer

from localspec import defaults
from localspec.cli_options import (
    EXIT_INTERRUPTED, CtxOpt, DraftGpuLayersOpt, DraftMaxOpt, DraftMinOpt, DraftOpt, DraftPMinOpt, DraftPolicyOpt, DraftBranchesOpt, DraftPSplitOpt,
    DraftModeOpt, DraftThreadsOpt, GpuLayersOpt, LookupMaxOpt, LookupMinOpt, LookupOpt, MaxTokensOpt, MinPOpt,
    ModelArgs, ModelOpt, PromptOpt, RawOpt, SeedOpt, ShowAcceptedOpt, StopOpt, TempOpt, ThreadsOpt, TopKOpt, TopPOpt,
    VerboseOpt, fail, sigint_sets, user_errors,
)


def run(
    prompt: PromptOpt = None,
    model: ModelOpt = None,
    draft: DraftOpt = None,
    max_tokens: MaxTokensOpt = defaults.DEFAULT_MAX_TOKENS,
    temp: TempOpt = None,
    top_k: TopKOpt = None,
    top_p: TopPOpt = None,
    min_p: MinPOpt = None,
    seed: SeedOpt = None,
    stop: StopOpt = None,
    ctx: CtxOpt = None,
    threads: ThreadsOpt = None,
    draft_threads: DraftThreadsOpt = None,
    gpu_layers: GpuLayersOpt = None,
    draft_gpu_layers: DraftGpuLayersOpt = None,
    draft_max: DraftMaxOpt = None,
    draft_min: DraftMinOpt = None,
    draft_p_min: DraftPMinOpt = None,
    draft_policy: DraftPolicyOpt = None,
    draft_branches: DraftBranchesOpt = None,
    draft_p_split: DraftPSplitOpt = None,
    draft_mode: DraftModeOpt = None,
    lookup: LookupOpt = None,
    lookup_min: LookupMinOpt = None,
    lookup_max: LookupMaxOpt = None,
    raw: RawOpt = False,
    show_accepted: ShowAcceptedOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No summary line on stderr.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object (text, tokens, stop_reason, stats) instead of streaming.")] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Generate text with the target model, drafted by a small model or by prompt lookup."""
    from rich.console import Console

    from localspec.loader import load
    from localspec.prompt import prompt_tokens
    from localspec.render import collect, render_plain, result_json, summary_line
    from localspec.tui import LiveRenderer

    if prompt is None and not sys.stdin.isatty():
        prompt = sys.stdin.read()
    if not prompt:
        raise fail("no prompt: pass -p TEXT or pipe text on stdin")
    args = ModelArgs(
        model, draft, lookup, threads, draft_threads, gpu_layers, draft_gpu_layers, verbose,
        flags=dict(draft_max=draft_max, draft_min=draft_min, draft_p_min=draft_p_min, draft_policy=draft_policy, draft_branches=draft_branches, draft_p_split=draft_p_split, draft_mode=draft_mode, ctx=ctx, temp=temp,
                   top_k=top_k, top_p=top_p, min_p=min_p, lookup_min=lookup_min, lookup_max=lookup_max),
    )
    seed = seed if seed is not None else secrets.randbits(32)
    cancel = threading.Event()
    with user_errors():
        load_options, settings = args.prepare()
        config = settings.generation_config(max_tokens, seed, tuple(stop or ()))
        loaded = load(load_options, cancel)
        try:
            tokens = prompt_tokens(loaded.target, prompt, raw)
            with sigint_sets(cancel):
                events = loaded.engine.generate(tokens, config, cancel)
                if json_out:
                    done = collect(events)
                elif sys.stdout.isatty():
                    done = LiveRenderer(Console(), show_accepted).render(events)
                else:
                    done = render_plain(events)
        finally:
            loaded.close()
    done.stats.load_s = loaded.load_s
    if json_out:
        typer.echo(result_json(done, seed))
    elif not quiet:
        typer.echo(summary_line(done.stats, done.stop_reason), err=True)
    if done.stop_reason == "interrupted":
        raise typer.Exit(EXIT_INTERRUPTED)
