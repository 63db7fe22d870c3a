"""Prompt-lookup drafting: continue the context the way it continued after the same n-gram before.

An incremental index maps every n-gram (n in [n_min, n_max]) to the most recent position that
followed it, so a step costs O(n_max) dictionary work, not a rescan of the history. Whether a
proposal is worth verifying is the draft-length controller's call (engine/controller.py), as for any
drafter."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.backend.grammar import Grammar
from localspec.drafters.base import Budget, Draft, DraftKey, DraftSettings
from localspec.sampling.dist import SamplingParams
from localspec.sampling.draws import Coupling


class NgramDrafter:
    name = "ngram"
    key = DraftKey("ngram", lookup=True)

    def __init__(self) -> None:
        self.begin((), DraftSettings())

    def begin(self, context: Sequence[int], settings: DraftSettings, coupling: Coupling | None = None) -> int:
        self.n_min, self.n_max = settings.lookup_min, settings.lookup_max
        self._restart(context)
        return 0

    def _restart(self, context: Sequence[int]) -> None:
        self._tokens: list[int] = []
        self._index: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(self.n_min, self.n_max + 1)
        }
        self._extend(context)

    def _extend(self, context: Sequence[int]) -> None:
        tokens = self._tokens
        start = len(tokens)
        tokens.extend(context[start:])
        for i in range(max(start, self.n_min), len(tokens)):
            for n, table in self._index.items():
                if i >= n:
                    table[tuple(tokens[i - n : i])] = i

    def _sync(self, context: Sequence[int]) -> None:
        known = len(self._tokens)
        if len(context) < known or (known and context[known - 1] != self._tokens[-1]):
            self._restart(context)  # not a continuation of what was indexed (a new conversation)
        else:
            self._extend(context)

    def match(self, context: Sequence[int]) -> tuple[int, int]:
        """(n, position) of the longest, most recent earlier occurrence of the context's last n
        tokens, the position being where its continuation starts; (0, -1) when none."""
        self._sync(context)
        tokens = self._tokens
        size = len(tokens)
        for n in range(min(self.n_max, size), self.n_min - 1, -1):
            pos = self._index[n].get(tuple(tokens[size - n :]))
            if pos is not None:
                return n, pos
        return 0, -1

    def propose(
        self,
        context: Sequence[int],
        budget: Budget,
        params: SamplingParams,
        rng: np.random.Generator,
        grammar: Grammar | None = None,
    ) -> Draft:
        n, pos = self.match(context)
        if not n:
            return Draft(key=self.key)
        # Longer matches predict better: the controller keeps an acceptance estimate per length.
        key = self.key.of_kind(f"{self.name}-{n}")
        limit = budget.limit(key)
        tokens = self._tokens[pos : min(pos + limit, len(self._tokens))] if limit > 0 else []
        return Draft(tokens, None, key)

    def end(self, context: Sequence[int]) -> None:
        return None

    def close(self) -> None:
        return None
