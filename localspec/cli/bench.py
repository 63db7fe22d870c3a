"""`localspec bench`: drafting modes against the target alone, on the same prompts."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Annotated

import typer

from localspec.bench.runs import MODES
from localspec.cli.options import (
    BENCHMARK,
    SETTINGS,
    DraftOpt,
    ModelOpt,
    RawOpt,
    VerboseOpt,
    fail,
    request,
    takes_settings,
    user_errors,
)
from localspec.errors import LocalspecError

BENCH_MAX_TOKENS = 128


# Bench's modes set drafting and lookup; it measures at its own temperature and seed, unfiltered.
@takes_settings(
    exclude=(
        "top_k",
        "top_p",
        "min_p",
        "seed",
        "stop",
        "draft_mode",
        "lookup",
        "lookup_method",
        "suffix_cache",
        "suffix_cache_size",
        "datastore",
    )
)
def bench(
    model: ModelOpt = None,
    draft: DraftOpt = None,
    prompts: Annotated[
        Path | None,
        typer.Option(
            "--prompts", help="Spec-Bench style JSONL (category, turns[0]); default: a small built-in set."
        ),
    ] = None,
    category: Annotated[
        list[str] | None, typer.Option("--category", help="Only this category (repeatable).")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", help="At most this many prompts per category (0: all).")
    ] = 0,
    max_tokens: Annotated[
        int | None,
        typer.Option("-n", "--max-tokens", help=f"Tokens generated per prompt (default {BENCH_MAX_TOKENS})."),
    ] = None,
    modes: Annotated[
        str,
        typer.Option(
            "--modes",
            metavar="MODE,...",
            help="Comma-separated: "
            + "; ".join(f"{k}: {v[2]}" for k, v in MODES.items())
            + " (default: baseline,draft,auto,ngram with a draft model, baseline,ngram without).",
        ),
    ] = "",
    repeat: Annotated[
        int, typer.Option("--repeat", help="Runs per prompt and mode (medians are reported).")
    ] = 1,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the results as JSON (schema in docs/bench.md).")
    ] = False,
    temp: Annotated[
        float | None,
        typer.Option(
            "--temp",
            help="Temperature; at 0 (and with --verify coupled at any temperature) every mode is checked "
            "token by token against the baseline (default 0).",
        ),
    ] = None,
    cost_profile: Annotated[
        str | None,
        typer.Option(
            "--cost-profile",
            help="Replay the real models under simulated costs and report simulated tokens/s: cpu (the "
            "project's 2-core testbed), gpu[:R] (a GPU; draft passes R times cheaper, default 6), "
            "drift[:PROFILE] (costs swinging +-30%), or a FILE.json from --record-costs.",
            rich_help_panel=BENCHMARK,
        ),
    ] = None,
    record_costs: Annotated[
        Path | None,
        typer.Option(
            "--record-costs",
            help="Write every verification's and draft call's measured cost to FILE.json, to replay this "
            "machine elsewhere with --cost-profile FILE.json.",
            rich_help_panel=BENCHMARK,
        ),
    ] = None,
    flags: dict = SETTINGS,
    raw: RawOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Measure tokens/sec, speedup and acceptance of each drafting mode against the target alone;
    greedy runs are checked token by token (exit code 1 on any difference that is not a tie)."""
    from localspec.bench.profiles import FORMAT, load_profile
    from localspec.bench.results import BenchResult
    from localspec.bench.runs import (
        check_outputs,
        choose_modes,
        comparable,
        load_prompts,
        make_modes,
        run_bench,
        seeded,
    )
    from localspec.bench.suffix_costs import suffix_costs
    from localspec.cli.views.bench_view import BenchProgress, render_table
    from localspec.engine.clock import SimulatedClock, WallClock
    from localspec.json_file import write_json
    from localspec.session.generation import generation_config
    from localspec.session.model_files import ModelFiles
    from localspec.session.model_loading import load_models
    from localspec.session.prompt import prompt_tokens

    if repeat < 1 or limit < 0:
        raise fail("--repeat must be >= 1 and --limit >= 0")
    result = BenchResult()
    with user_errors():
        files, settings = request(model, draft, flags, temp=0.0, max_tokens=BENCH_MAX_TOKENS, seed=0)
        config = seeded(generation_config(settings))
        if cost_profile and record_costs:
            raise fail("--record-costs records real costs: it cannot go with --cost-profile")
        clock = (
            SimulatedClock(load_profile(cost_profile))
            if cost_profile
            else WallClock({"format": FORMAT} if record_costs else None)
        )
        selected = load_prompts(prompts, category or (), limit)
        target, draft_model, _ = load_models(
            files, settings, threading.Event(), verbose, notify=lambda m: typer.echo(m, err=True)
        )
        files = ModelFiles.of(target, draft_model)
        if isinstance(clock, SimulatedClock):
            models = [m for m in (target, draft_model, target.head) if m is not None]
            clock.inside = lambda: sum(m.busy_s for m in models)
        try:
            # A drafter in a file of its own (EAGLE-3, DFlash, Gemma 4's assistant) drafts where a draft
            # model would; the target's own heads also as "mtp".
            heads = target.head is not None and target.head.kind == "mtp"
            chosen = choose_modes(
                [m.strip() for m in modes.split(",") if m.strip()],
                draft_model is not None or (target.head is not None and not heads),
                heads,
            )
            bench_modes = make_modes(chosen, target, draft_model, settings)
            total = len(selected) * len(chosen) * repeat
            with BenchProgress(total, quiet=json_out) as progress:
                fresh = [m for m in (target, draft_model) if m is not None]
                for sample in run_bench(
                    target, bench_modes, selected, config, clock, repeat, raw, progress.note, fresh
                ):
                    result.samples.append(sample)
                    progress.advance()
            if "suffix" in chosen:
                result.suffix_costs = suffix_costs([prompt_tokens(target, p.text, raw) for p in selected])
            if comparable(config):
                check_outputs(target, result, config)
            if isinstance(clock, WallClock) and clock.record is not None and record_costs is not None:
                try:
                    write_json(record_costs, clock.record)
                except OSError as e:
                    raise LocalspecError(f"cannot write {record_costs}: {e.strerror or e}") from None
        finally:
            if draft_model is not None:
                draft_model.close()
            target.close()
    simulated = clock.profile.name if isinstance(clock, SimulatedClock) else None
    if json_out:
        from localspec.cli.views.render import provenance

        typer.echo(json.dumps({**result.to_json(), "cost_profile": simulated, **provenance(files, settings)}))
    else:
        render_table(result, simulated)
    if result.mismatches:
        raise typer.Exit(1)
