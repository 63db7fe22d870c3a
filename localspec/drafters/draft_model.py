"""A smaller model of the same family drafts autoregressively in its own KV cache."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.backend.model import Model
from localspec.drafters.base import Draft
from localspec.sampling import SamplingParams, distribution, max_prob, sample


class DraftModelDrafter:
    name = "draft-model"

    def __init__(self, model: Model, p_min: float = 0.0) -> None:
        self.model = model
        self.p_min = p_min

    def begin(self, context: Sequence[int]) -> None:
        self.model.sync(context)

    def propose(
        self, context: Sequence[int], max_tokens: int, params: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        # The cache keeps what earlier steps evaluated: only the tokens accepted since are new.
        logits = self.model.sync(context)
        draft = Draft(probs=None if params.greedy else [], source=self.name)
        for i in range(max_tokens):
            if params.greedy:
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

    def feedback(self, draft: Draft, n_accepted: int) -> None:
        return None

    def close(self) -> None:
        self.model.close()
