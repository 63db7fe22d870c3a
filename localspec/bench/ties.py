"""The tie rule for comparing greedy (or coupled) outputs: llama.cpp's batched (verification) and
single-token logits differ by ~1e-2 on CPU, so two greedy runs may part ways where the target's two
best tokens are that close. Any other difference is a bug. Coupled runs choose by log p + noise,
which moves by the same error divided by the temperature.

The error grows with the context the position attends to: at 4.4k tokens the target alone gave
another token with one thread than with two where its two best were 0.10 apart (the results' session
21: `git show 4c332a2:benchmarks/RESULTS.md`), and verification parted from it at 7k tokens by
0.07-0.08. Rounding over n summed terms grows as sqrt(n), so the tolerance does, from 0.05 up to 1k
tokens (0.10 at 4k, 0.13 at 7k)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from localspec.backend.model import Model

TIE_TOLERANCE = 0.05
TIE_CONTEXT = 1024  # the context up to which TIE_TOLERANCE holds


def tie_tolerance(context: int, scale: float = 1.0) -> float:
    """The largest logit margin that counts as a tie at a position after `context` tokens."""
    return TIE_TOLERANCE * math.sqrt(max(1.0, context / TIE_CONTEXT)) * scale


@dataclass(frozen=True)
class Divergence:
    index: int  # first position where the outputs differ
    expected: int | None  # token there in the reference output (None: it ended first)
    got: int | None
    margin: float  # |score(expected) - score(got)| under the target; inf when one output ended
    tolerance: float = TIE_TOLERANCE

    @property
    def is_tie(self) -> bool:
        return self.margin <= self.tolerance


def compare_greedy(
    target: Model,
    prompt: Sequence[int],
    expected: Sequence[int],
    got: Sequence[int],
    score: Callable[[np.ndarray, int], np.ndarray] | None = None,
    scale: float = 1.0,
) -> Divergence | None:
    """None when the outputs are identical, else where and how they first differ. `score` maps the
    target's logits at a position to what the choice maximised there (default: the logits), and
    `scale` the tie tolerance to it."""
    n = min(len(expected), len(got))
    first = next((i for i in range(n) if expected[i] != got[i]), None)
    if first is None:
        if len(expected) == len(got):
            return None
        # One run stopped earlier (a length limit or end of generation reached at another point).
        longer = expected if len(expected) > len(got) else got
        return Divergence(
            n, expected[n] if longer is expected else None, got[n] if longer is got else None, float("inf")
        )
    logits = target.sync([*prompt, *expected[:first]])
    scores = logits if score is None else score(logits, len(prompt) + first)
    a, b = expected[first], got[first]
    margin = abs(float(scores[a]) - float(scores[b]))
    tolerance = tie_tolerance(len(prompt) + first, scale)
    return Divergence(first, a, b, margin if np.isfinite(margin) else float("inf"), tolerance)
