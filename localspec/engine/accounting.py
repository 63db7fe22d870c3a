"""What a generation's steps are worth against the target alone, and how long an answer is
expected to run: the figures the summary line, --json, bench and serve report, and the horizon
that reading a long prompt must pay back over (engine/controller.py)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from localspec.engine.costs import LiveCosts
from localspec.engine.events import GenerationStats
from localspec.engine.generation import StepCost


def price_steps(stats: GenerationStats, spent: Sequence[StepCost], costs: LiveCosts) -> None:
    """Each step against the target alone at its own moment: its tokens at what a one-token pass
    cost then (known once its width is timed, if only by this step), against what it took (a
    draft's reading of the prompt included)."""
    for step in spent:
        plain = costs.one_token_pass(step.span, step.width, step.verify_s)
        stats.alone_s += step.shown * plain
        stats.steps_s += step.step_s if plain else 0.0


def expected_left(generated: int, cap: int, ended: Sequence[int]) -> float:
    """Tokens an answer that has run `generated` tokens is still expected to run, `cap` at most.
    Without earlier answers that ended on their own (`ended`: their lengths), all of the cap; with
    them, about what they ran, and once it has outrun that, as many again as it has run (an
    answer that ran long tends to run longer)."""
    left = cap - generated
    if not ended or left <= 0:
        return max(left, 0)
    return min(left, max(statistics.median(ended) - generated, generated))
