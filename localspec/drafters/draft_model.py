"""A smaller model of the same family drafts autoregressively in its own KV cache."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.backend.model import Model
from localspec.drafters.base import Draft
from localspec.engine.controller import Budget
from localspec.sampling import SamplingParams, distribution, max_prob, sample


DRAFT_POLICIES = ("sample", "greedy")


class DraftModelDrafter:
    """At temp > 0 the draft either samples from its own distribution q (verified with min(1, p/q))
    or proposes its argmax (verified as a one-hot draft, accepted with p(d)); both are exact."""

    name = "draft-model"

    def __init__(self, model: Model, p_min: float = 0.0, policy: str = "sample") -> None:
        if policy not in DRAFT_POLICIES:
            raise ValueError(f"draft policy must be one of {DRAFT_POLICIES}")
        self.model = model
        self.p_min = p_min
        self.policy = policy

    def begin(self, context: Sequence[int]) -> None:
        self.model.sync(context)

    def propose(
        self, context: Sequence[int], budget: Budget, params: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        greedy = params.greedy or self.policy == "greedy"
        draft = Draft(probs=None if greedy else [], source=self.name)
        max_tokens = budget.limit(self.name)
        if max_tokens < 1:
            return draft
        # The cache keeps what earlier steps evaluated: only the tokens accepted since are new.
        logits = self.model.sync(context)
        for i in range(max_tokens):
            if greedy:
                token = int(np.argmax(logits))
                if self.p_min > 0.0 and max_prob(logits) < self.p_min:
                    break
            else:
                q = distribution(logits, params)
                if self.p_min > 0.0 and q.max() < self.p_min:
                    break
                token = sample(q, rng)
                draft.probs.append(q)  # type: ignore[union-attr]
            draft.tokens.append(token)
            if i + 1 < max_tokens:
                logits = self.model.decode([token], all_logits=False)[0]  # type: ignore[index]
        return draft

    def close(self) -> None:
        self.model.close()
