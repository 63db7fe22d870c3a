"""Repetition penalties, llama.cpp's (`llama_sampler_init_penalties`): each token seen in the last
`last_n` tokens of the context has its logit divided by `repeat` (multiplied where negative), then
lowered by `frequency` per occurrence and by `presence` once. They change the target's
distribution at a position by what precedes it, so in a verifying pass each row is penalised for
the draft tokens before it too, and the draft model drafts under the same penalties: p and q stay
the distributions really sampled from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localspec.config import defaults


@dataclass(frozen=True)
class Penalties:
    last_n: int = defaults.DEFAULT_REPEAT_LAST_N
    repeat: float = 1.0
    frequency: float = 0.0
    presence: float = 0.0

    @property
    def off(self) -> bool:
        return self.last_n == 0 or (self.repeat == 1.0 and self.frequency == 0.0 and self.presence == 0.0)

    def apply(self, logits: np.ndarray, history: Sequence[int]) -> None:
        """Penalise `logits` in place for the tokens of `history` (the context before the position)."""
        if self.off or not len(history):
            return
        ids, counts = np.unique(np.asarray(history[-self.last_n :], dtype=np.int64), return_counts=True)
        keep = ids < len(logits)
        ids, counts = ids[keep], counts[keep]
        x = logits[ids].astype(np.float64)
        x = np.where(x <= 0, x * self.repeat, x / self.repeat)
        logits[ids] = x - counts * self.frequency - self.presence

    def penalised(self, logits: np.ndarray, context: Sequence[int], drafted: Sequence[int]) -> np.ndarray:
        """A copy of `logits` (a model's buffer, left as it is) penalised for `context` and the
        tokens drafted after it."""
        if self.off:
            return logits
        out = logits.copy()
        self.apply(out, [*context[-self.last_n :], *drafted])
        return out
