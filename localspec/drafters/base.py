"""The drafter interface: given the context, propose tokens (and their draft probabilities)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from localspec.engine.controller import Budget
from localspec.sampling import SamplingParams


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    # The distribution each token was sampled from, when the drafter samples; None marks
    # deterministic proposals, which the target verifies as one-hot drafts.
    probs: list[np.ndarray] | None = None
    source: str = ""
    # For a draft tree: each token's parent (an earlier index, or -1 for the context's last token).
    # None means a chain, each token following the one before.
    parents: list[int] | None = None
    # How sure the drafter was of each token (its probability under the draft), for the
    # controller to calibrate; None when the drafter has no such measure.
    confidences: list[float] | None = None
    # What the draft-length controller learns acceptance for (a drafter may tell its kinds of
    # proposal apart); empty means the source.
    kind: str = ""

    @property
    def key(self) -> str:
        return self.kind or self.source

    def __len__(self) -> int:
        return len(self.tokens)


class Drafter(Protocol):
    name: str

    def begin(self, context: Sequence[int]) -> None:
        """A new generation starts from `context` (the whole prompt): index or prefill it."""

    def propose(
        self, context: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        """Propose up to budget.limit(self.name) tokens that continue `context`."""

    def close(self) -> None: ...
