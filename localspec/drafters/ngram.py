"""Prompt-lookup drafting: continue the context the way it continued after the same n-gram before.

An incremental index maps every n-gram (n in [n_min, n_max]) to the most recent position that
followed it, so a step costs O(n_max) dictionary work, not a rescan of the history."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.drafters.base import Draft
from localspec.sampling import SamplingParams

MISS_LIMIT = 3  # fully rejected proposals in a row before drafting pauses
MAX_PAUSE = 64  # steps; the pause doubles after every failed retry up to this


class NgramDrafter:
    name = "ngram"

    def __init__(self, n_min: int = 2, n_max: int = 4) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError("need 1 <= lookup-min <= lookup-max")
        self.n_min = n_min
        self.n_max = n_max
        self.begin(())

    def begin(self, context: Sequence[int]) -> None:
        self._tokens: list[int] = []
        self._index: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(self.n_min, self.n_max + 1)}
        self._misses = 0
        self._pause = 0
        self._pause_len = 1
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
            self.begin(context)  # not a continuation of what we indexed (a new conversation)
        else:
            self._extend(context)

    def lookup(self, context: Sequence[int], max_tokens: int) -> list[int]:
        """The tokens that followed the longest, most recent earlier occurrence of the context's suffix."""
        self._sync(context)
        tokens = self._tokens
        size = len(tokens)
        for n in range(min(self.n_max, size), self.n_min - 1, -1):
            pos = self._index[n].get(tuple(tokens[size - n :]))
            if pos is not None:
                return tokens[pos : min(pos + max_tokens, size)]
        return []

    def propose(
        self, context: Sequence[int], max_tokens: int, params: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        if self._pause > 0:
            self._pause -= 1
            self._sync(context)
            return Draft(source=self.name)
        return Draft(self.lookup(context, max_tokens), None, self.name)

    def feedback(self, draft: Draft, n_accepted: int) -> None:
        if n_accepted > 0:
            self._misses = 0
            self._pause_len = 1
            return
        self._misses += 1
        if self._misses >= MISS_LIMIT:
            # Verifying a rejected draft costs a wider target pass: back off, then probe again.
            self._pause = self._pause_len
            self._pause_len = min(self._pause_len * 2, MAX_PAUSE)
            self._misses = MISS_LIMIT - 1  # one more miss after the pause pauses again, for longer

    def close(self) -> None:
        return None
