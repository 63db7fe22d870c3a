"""A block drafter (DFlash, backend/dflash.py) drafts as a draft model does (drafters/draft_model.py:
the same rules for confidence, sampling, grammar and forced text), but one pass drafts all its
tokens: a call costs the same at any length (priced so), and no step drafts past the block. Within
a block's length of the context's end the block no longer fits, and the target goes on alone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localspec.backend.dflash import DFlashBlock
from localspec.backend.grammar import Grammar
from localspec.drafters.base import Budget, CatchUp, Draft, DraftKey
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.sampling.dist import SamplingParams


@dataclass
class _WithinBlock:
    """A step's budget, cut to the block's length (the rest asked of the step's own)."""

    budget: Budget
    most: int

    @property
    def floor(self) -> int:
        return min(self.budget.floor, self.most)

    @property
    def asked(self) -> DraftKey | None:
        return self.budget.asked

    @property
    def calibrates(self) -> bool:
        return self.budget.calibrates

    def limit(self, key: DraftKey, calibrated: bool = False, catch_up: CatchUp | None = None) -> int:
        return min(self.budget.limit(key, calibrated, catch_up), self.most)

    def acceptance(self, key: DraftKey, confidence: float) -> float:
        return self.budget.acceptance(key, confidence)

    def prefers(self, found: Draft, other: DraftKey) -> bool:
        return self.budget.prefers(found, other)

    def keep(self, key: DraftKey, path_p: float, n: int) -> bool:
        return n <= self.most and self.budget.keep(key, path_p, n)

    def extend(self, key: DraftKey, path_p: float, n: int) -> bool:
        return n < self.most and self.budget.extend(key, path_p, n)

    def offer(self, key: DraftKey, path_p: float, n: int) -> float:
        return self.budget.offer(key, path_p, n) if n < self.most else 0.0


class BlockDrafter(DraftModelDrafter):
    windowed = False  # the target's rows at every position: it sees all of the context

    def __init__(self, block: DFlashBlock) -> None:
        super().__init__(block, spelling=block.target)  # type: ignore[arg-type]
        self.name, self.key = block.kind, DraftKey(block.kind)

    def propose(
        self,
        context: Sequence[int],
        budget: Budget,
        params: SamplingParams,
        rng: np.random.Generator,
        grammar: Grammar | None = None,
    ) -> Draft:
        block: DFlashBlock = self.model  # type: ignore[assignment]
        if len(context) - 1 + block.block > block.target.n_ctx:
            return Draft(key=self.key)  # the block no longer fits the context: the target goes on alone
        draft = super().propose(context, _WithinBlock(budget, block.most), params, rng, grammar)
        draft.flat = True
        if draft.catch_up_s:
            # The sync that caught up also drafted the block: that pass is the call's own cost.
            draft.catch_up_s = max(draft.catch_up_s - block.block_s, 0.0)
        return draft
