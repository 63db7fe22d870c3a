"""Drafters in turn, the first that drafts anything drafting the step: llama.cpp's chain (prompt
lookup first, the draft model whenever lookup has nothing), or a draft model with prompt lookup
behind it (lookup whenever the draft model does not draft)."""

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

    def begin(self, context: Sequence[int], settings: DraftSettings, coupling: Coupling | None = None) -> None:
        for d in self.drafters:
            d.begin(context, settings, coupling)

    def propose(
        self, context: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator, grammar: Grammar | None = None
    ) -> Draft:
        draft = Draft(key=self.key)
        for d in self.drafters:
            draft = d.propose(context, budget, params, rng, grammar)
            if draft.tokens:
                break
        return draft

    def end(self, context: Sequence[int]) -> None:
        for d in self.drafters:
            d.end(context)

    def close(self) -> None:
        for d in self.drafters:
            d.close()
