"""`localspec bench`: drafting modes against the target alone, on the same prompts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from localspec.cli_options import (
    CtxOpt, DraftGpuLayersOpt, DraftMaxOpt, DraftMinOpt, DraftOpt, DraftPMinOpt, DraftPolicyOpt, DraftBranchesOpt, DraftPSplitOpt, DraftThreadsOpt,
    GpuLayersOpt, LookupMaxOpt, LookupMinOpt, ModelArgs, ModelOpt, RawOpt, TempOpt, ThreadsOpt,
    VerboseOpt, fail, user_errors,
)

MODES = {
    "baseline": "the target alone",
    "draft": "draft model, fixed length (--draft-max every step, as llama.cpp)",
    "auto": "draft model, length chosen per step by the auto controller (the default of run)",
    "ngram": "prompt lookup, auto controller (the default of run without a draft model)",
    "chain": "prompt lookup first, then the draft model, auto controller",
    "tree": "draft tree (--draft-branches, --draft-p-split), auto controller",
    "tree-fixed": "draft tree, fixed length",
}


def bench(
    model: ModelOpt = None,
    draft: DraftOpt = None,
    prompts: Annotated[Path | None, typer.Option("--prompts", help="Spec-Bench style JSONL (category, turns[0]); default: a small built-in set.")] = None,
    category: Annotated[list[str] | None, typer.Option("--category", help="Only this category (repeatable).")] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many prompts per category (0: all).")] = 0,
    max_tokens: Annotated[int, typer.Option("-n", "--max-tokens", help="Tokens generated per prompt.")] = 128,
    modes: Annotated[str, typer.Option("--modes", help="Comma-separated: " + "; ".join(f"{k}: {v}" for k, v in MODES.items()) + ".")] = "",
    repeat: Annotated[int, typer.Option("--repeat", help="Runs per prompt and mode (medians are reported).")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as JSON (schema in README.md).")] = False,
    temp: TempOpt = 0.0,
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
    lookup_min: LookupMinOpt = None,
    lookup_max: LookupMaxOpt = None,
    raw: RawOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Measure tokens/sec, speedup and acceptance of each drafting mode against the target alone; greedy runs are checked token by token (exit code 1 on any difference that is not a tie)."""
    from localspec.bench import BASELINE, BenchResult, Mode, check_greedy, load_prompts, run_bench
    from localspec.bench_view import BenchProgress, render_table
    from localspec.drafters.chain import ChainDrafter
    from localspec.drafters.draft_model import DraftModelDrafter
    from localspec.drafters.ngram import NgramDrafter
    from localspec.drafters.tree import TreeDrafter
    from localspec.loader import load_models, measure_costs

    args = ModelArgs(
        model, draft, None, threads, draft_threads, gpu_layers, draft_gpu_layers, verbose,
        flags=dict(draft_max=draft_max, draft_min=draft_min, draft_p_min=draft_p_min, draft_policy=draft_policy, draft_branches=draft_branches, draft_p_split=draft_p_split, ctx=ctx, temp=temp,
                   lookup_min=lookup_min, lookup_max=lookup_max),
    )
    has_draft = draft is not None and draft.lower() != "none"
    chosen = [m.strip() for m in modes.split(",") if m.strip()] or (
        ["baseline", "draft", "auto", "ngram"] if has_draft else ["baseline", "ngram"]
    )
    unknown = [m for m in chosen if m not in MODES]
    if unknown:
        raise fail(f"unknown mode {unknown[0]!r}; choose from {', '.join(MODES)}")
    if not has_draft and {"draft", "auto", "chain", "tree", "tree-fixed"} & set(chosen):
        raise fail("modes 'draft', 'auto', 'chain' and 'tree' need a draft model (-d)")
    if {"tree", "tree-fixed"} & set(chosen) and (draft_branches or 1) < 2:
        raise fail("tree modes need --draft-branches N with N >= 2")
    if repeat < 1 or limit < 0:
        raise fail("--repeat must be >= 1 and --limit >= 0")
    if BASELINE not in chosen:
        chosen.insert(0, BASELINE)
    result = BenchResult()
    with user_errors():
        load_options, settings = args.prepare()
        config = settings.generation_config(max_tokens, seed=0)
        selected = load_prompts(prompts, category or (), limit)
        target, draft_model = load_models(load_options)
        try:
            lookup = lambda: NgramDrafter(settings.lookup_min, settings.lookup_max)  # noqa: E731
            model = lambda: DraftModelDrafter(draft_model, settings.draft_p_min, settings.draft_policy, target.n_vocab)  # noqa: E731
            tree = lambda: TreeDrafter(draft_model, settings.draft_p_split, settings.draft_branches, settings.draft_p_min, target.n_vocab)  # noqa: E731
            factories = {
                "baseline": lambda: Mode("baseline", None, "fixed"),
                "draft": lambda: Mode("draft", model(), "fixed"),
                "auto": lambda: Mode("auto", model(), "auto"),
                "ngram": lambda: Mode("ngram", lookup(), "auto"),
                "chain": lambda: Mode("chain", ChainDrafter([lookup(), model()]), "auto"),
                "tree": lambda: Mode("tree", tree(), "auto"),
                "tree-fixed": lambda: Mode("tree-fixed", tree(), "fixed"),
            }
            costs = measure_costs(target, draft_model, settings.draft_max)
            total = len(selected) * len(chosen) * repeat
            with BenchProgress(total, quiet=json_out) as progress:
                for sample in run_bench(target, [factories[m]() for m in chosen], selected, config, costs, repeat, raw, progress.note):
                    result.samples.append(sample)
                    progress.advance()
            if config.sampling.greedy:
                check_greedy(target, result)
        finally:
            if draft_model is not None:
                draft_model.close()
            target.close()
    if json_out:
        typer.echo(json.dumps(result.to_json()))
    else:
        render_table(result)
    if result.mismatches:
        raise typer.Exit(1)
