"""What a draft model has been shown of the context.

A draft model that sat out some steps (drafting did not pay, or prompt lookup drafted instead) must
evaluate every token generated meanwhile before it can draft again. Past a few tokens that catch-up
costs more than the probe it serves can win back: with a poor draft, catching up on everything made
runs a few percent slower than the target alone. So the draft skips all but the newest few missing
tokens (as many as the budget allows); the text it sees has a hole, which can only make its
guesses a little worse, and the target verifies every guess anyway."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.backend.model import Model, common_prefix


class DraftView:
    def __init__(self, model: Model) -> None:
        self.model = model
        self.tokens: list[int] = []  # the draft's version of the context
        self.seen = 0  # how much of the real context it accounts for

    def begin(self, context: Sequence[int]) -> None:
        """A new generation: the draft evaluates the whole prompt (reusing what its cache shares)."""
        self.tokens, self.seen = list(context), len(context)
        self.model.sync(self.tokens)

    def sync(self, context: Sequence[int], window: int) -> np.ndarray:
        """Bring the draft up to `context` (a continuation of what it saw), evaluating at most
        `window` of the tokens it lacks; the logits after it."""
        if len(context) < self.seen:
            self.begin(context)
        self.tokens.extend(context[self.seen :])
        self.seen = len(context)
        cached = common_prefix(self.model.cached, self.tokens)
        if len(self.tokens) - cached > window:
            del self.tokens[cached : len(self.tokens) - window]
        return self.model.sync(self.tokens)
