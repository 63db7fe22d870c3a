"""Drafters in turn, the first that drafts anything drafting the step: llama.cpp's chain (prompt
lookup first, the draft model whenever lookup has nothing, or, under auto, whenever the draft
model promises more than lookup's find), or a draft model with prompt lookup behind it (lookup
whenever the draft model does not draft)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.backend.grammar import Grammar
from localspec.drafters.base import Budget, Draft, Drafter, DraftKey, DraftSettings
from localspec.sampling.dist import SamplingParams
from localspec.sampling.draws import Coupling


class ChainDrafter:
    def __init__(self, drafters: Sequence[Drafter], name: str = "chain") -> None:
        self.drafters = list(drafters)
        self.name, self.key = name, DraftKey(name)

    def begin(self, context: Sequence[int], settings: DraftSettings, coupling: Coupling | None = None) -> int:
        return sum(d.begin(context, settings, coupling) for d in self.drafters)

    def propose(
        self,
        context: Sequence[int],
        budget: Budget,
        params: SamplingParams,
        rng: np.random.Generator,
        grammar: Grammar | None = None,
    ) -> Draft:
        draft = Draft(key=self.key)
        for i, d in enumerate(self.drafters):
            draft = d.propose(context, budget, params, rng, grammar)
            if not draft.tokens:
                continue
            # A lookup's find gives way where the next drafter promises more (auto's estimates: a
            # datastore's chance match on an unrelated prompt against a good draft model).
            later = self.drafters[i + 1 :]
            if (
                not later
                or not draft.key.lookup
                or draft.probs is not None
                or budget.prefers(draft, later[0].key)
            ):
                break
        return draft

    def end(self, context: Sequence[int]) -> None:
        for d in self.drafters:
            d.end(context)

    def close(self) -> None:
        for d in self.drafters:
            d.close()
