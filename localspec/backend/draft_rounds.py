"""Whether a round of draft-model passes runs, for lanes drafting together (backend/lockstep.py).

A round of draft passes holds every lane generating (those done drafting wait with their
verification), and costs about the same however many lanes draft in it. So whether one more runs
is the batch's question, not each lane's: it runs where the tokens the lanes in it expect to gain
(each lane's offer: engine/budgets.py's AutoBudget.offer) are at least what the batch emits, at the
rate it reaches, in the time a round takes. Asked one by one, a lane whose next token would not pay
for a round alone stops, though the round runs anyway for another lane that goes on: rounds that
held two of eight lanes, and more rounds for the same tokens than drafting to one length
(benchmarks/RESULTS.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

DECAY = 0.95  # weight of the rounds before the latest, for the batch's rate and a round's time


@dataclass
class DraftRounds:
    """The batch's tokens a second lately, the seconds a round of draft passes took (from the round
    before it: the lanes' own Python between passes included), and the verdict on the next."""

    tokens: float = 0.0  # decayed sums over the rounds tallied (a request's prompt reads left out)
    seconds: float = 0.0
    draft_s: float | None = None  # a round of draft passes, decayed; None: none timed yet

    def takes(self, offers: Sequence[float]) -> bool:
        """Whether a round with these offers (tokens each lane expects to gain by it) runs: where
        one is unconditional (inf: a pass that must run, or a lane not sharing), or before a round
        was timed, yes."""
        if self.draft_s is None or self.seconds <= 0 or math.inf in offers:
            return True
        return sum(offers) >= self.draft_s * self.tokens / self.seconds

    def add(self, tokens: int, seconds: float, offered: bool) -> None:
        """A round took `seconds` and the lanes emitted `tokens` since the last; `offered`: a round
        of draft passes the lanes offered (one that `takes` decided)."""
        self.tokens = DECAY * self.tokens + tokens
        self.seconds = DECAY * self.seconds + seconds
        if offered:
            self.draft_s = seconds if self.draft_s is None else DECAY * self.draft_s + (1 - DECAY) * seconds
