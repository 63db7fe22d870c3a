"""Rich rendering of `localspec bench`: a progress bar while running, a table at the end."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from localspec.bench.results import BenchResult
from localspec.bench.suffix_costs import CACHE_SIZES
from localspec.cli.views.plain import description_column, plain, say


class BenchProgress:
    def __init__(self, total: int, quiet: bool = False) -> None:
        self._progress = Progress(
            TextColumn("[bold]bench"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            description_column(),
            console=Console(stderr=True),
            disable=quiet,
        )
        self._task = self._progress.add_task("", total=total)

    def __enter__(self) -> BenchProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def note(self, message: str) -> None:
        self._progress.update(self._task, description=message)

    def advance(self) -> None:
        self._progress.advance(self._task)


def _costs(costs: dict[str, float]) -> str:
    """'target 41/75 ms, draft 0.3+4.1/pass': one-token and mean-width target passes, draft calls."""
    target = [f"{v:.1f}" for k, v in costs.items() if k.startswith("target_")]
    parts = [f"target {'/'.join(target)}"] if target else []
    for key, v in costs.items():
        if key.endswith("_pass_ms"):
            source = key[: -len("_pass_ms")]
            parts.append(f"{source} {costs.get(source + '_call_ms', 0.0):.1f}+{v:.1f}/pass")
    return ", ".join(parts)


def render_table(result: BenchResult, simulated: str | None = None, console: Console | None = None) -> None:
    console = console or Console()
    title = "localspec bench (medians over prompts)"
    if simulated:
        title += f": SIMULATED under the {simulated} cost profile"
    table = Table(title=plain(title))
    columns = (
        "category",
        "mode",
        "prompts",
        "tok/s",
        "speedup",
        "first token",
        "end to end",
        "acceptance",
        "tokens/pass",
        "drafted steps",
        "draft len",
    )
    for col in columns:
        table.add_column(col, justify="left" if col in ("category", "mode") else "right")
    last = None
    for s in result.summaries():
        if last is not None and s.category != last:
            table.add_section()
        last = s.category
        table.add_row(
            *map(
                plain,
                (
                    s.category,
                    s.mode,
                    str(s.n_prompts),
                    f"{s.tokens_per_second:.1f}",
                    f"{s.speedup:.2f}x",
                    f"{s.first_token_s:.2f}s",
                    f"{s.end_to_end:.2f}x",
                    f"{s.acceptance_rate:.1%}" if s.mean_draft_length else "-",
                    f"{s.mean_tokens_per_step:.2f}",
                    f"{s.drafted_steps:.0%}" if s.mode != "baseline" else "-",
                    f"{s.mean_draft_length:.1f}" if s.mean_draft_length else "-",
                ),
            )
        )
    console.print(table)
    overall = [s for s in result.summaries() if s.category == "all" and s.mode != "baseline"]
    if overall:
        say(
            console,
            "costs decided from (ms at each mode's last prompt: one-token and mean-width target pass; "
            "draft call + per pass):",
        )
        for s in overall:
            say(console, f"  {s.mode}: {_costs(s.costs_ms)}")
    sc = result.suffix_costs
    if sc:
        steps = ", ".join(
            f"{sc[f'step_ms_{n}']:.2f} ms at {n:,} cached tokens (index built in {sc[f'build_s_{n}']:.2f} s)"
            for n in CACHE_SIZES
        )
        say(
            console,
            f"suffix: indexing {sc['index_ms_per_1k_tokens']:.1f} ms per 1k prompt tokens; a drafting step "
            f"{steps}",
        )
    notes = list(dict.fromkeys(n for sample in result.samples for n in sample.notes))
    for n in notes[:5]:
        say(console, f"auto: {n}")
    for t in result.ties:
        say(
            console,
            f"tie: {t['mode']} prompt {t['prompt_id']} token {t['index']} (logit margin {t['margin']:.4f})",
        )
    for m in result.mismatches:
        say(
            console,
            ("MISMATCH", "red"),
            f": {m['mode']} prompt {m['prompt_id']} token {m['index']}: {m['expected']} vs {m['got']} "
            f"(margin {m['margin']:.4f})",
        )
