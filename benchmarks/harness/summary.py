"""Interleaving, medians of paired ratios and the tables benchmarks print. The machines drift
10-20% within an hour: every mode runs beside the baseline on the same prompt in the same minutes,
and a ratio is taken per pair before the median."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
BASELINE = "baseline"


def with_baseline(modes: Sequence[str], baseline: str = BASELINE) -> list[str]:
    """The modes, the baseline first (added where missing): every ratio needs it."""
    return [baseline, *(m for m in modes if m != baseline)]


def interleaved(prompts: Iterable[T], modes: Sequence[str], repeat: int = 1) -> Iterator[tuple[T, int, str]]:
    """(prompt, repeat, mode) with every mode of a prompt and repeat run back to back."""
    for prompt in prompts:
        for r in range(repeat):
            for mode in modes:
                yield prompt, r, mode


def median(values: Iterable[float]) -> float:
    """The median (nan for none: a table shows a gap, not a crash)."""
    values = list(values)
    return statistics.median(values) if values else float("nan")


def paired_ratios(
    rows: Sequence[dict],
    pair: Callable[[dict], object],
    value: Callable[[dict], float],
    group: Callable[[dict], object] = lambda _r: "all",
    baseline: str = BASELINE,
) -> dict[object, dict[str, float]]:
    """Per group and mode, the median over pairs of value(row) / value(its baseline row), a pair
    being the rows with the same pair(row) (a prompt and repeat)."""
    base = {pair(r): value(r) for r in rows if r["mode"] == baseline}
    ratios: dict[object, dict[str, list[float]]] = {}
    for r in rows:
        b = base.get(pair(r))
        if b:
            ratios.setdefault(group(r), {}).setdefault(r["mode"], []).append(value(r) / b)
    return {g: {m: median(v) for m, v in by_mode.items()} for g, by_mode in ratios.items()}


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table (RESULTS.md's form); floats to two decimals."""
    cell = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def save(path: Path | None, rows: object) -> None:
    """Every row as JSON, where --json asked for it."""
    if path is not None:
        path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
