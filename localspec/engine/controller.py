"""How many tokens to draft each step.

`fixed` drafts up to --draft-max every step (llama.cpp's behaviour). `auto` estimates, for each
drafter and each draft position, how likely a drafted token is accepted once all before it were,
and with the decode costs measured once for the model pair picks the draft length that maximises
expected tokens per second: 0 when drafting does not pay, probing again later. Acceptance comes in
runs (a draft that got the first tokens right tends to get the next ones right too), so later
positions get their own estimates instead of one rate for all.

Its choices depend only on the token stream and the cached costs, never on timings taken during
the run, so a --seed run stays repeatable."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from localspec.engine.costs import DecodeCosts

PRIOR_ALPHA = 0.6  # optimistic enough at the start that drafting gets tried
PRIOR_WEIGHT = 2.0  # pseudo-observations a position starts with; they fade like real ones
DECAY = 0.95  # per drafted step: recent behaviour counts most (about the last 20 steps)
FIRST_PROBE_AFTER = 4  # steps without drafting before a 1-token probe
MAX_PROBE_INTERVAL = 64
# Drafting must promise this much more than plain decoding: the measured costs carry some error,
# and a run must never end up slower than the target alone.
GAIN_MARGIN = 1.05
# Probing costs more than the probe itself (the draft must first catch up on every token generated
# since it last ran), so it is only worth it where good drafts would pay well.
PROBE_MARGIN = 1.25
# Near its optimum the rate curve is flat, and acceptance comes in runs that the per-position
# estimates only partly capture: among lengths within this fraction of the best rate, the longest wins.
FLAT_TOLERANCE = 0.03


class Budget(Protocol):
    def limit(self, source: str) -> int:
        """The most tokens `source` may draft this step."""

    def split_threshold(self, source: str) -> float:
        """The least draft probability a side branch's token needs to be worth its cost."""


@dataclass
class FixedBudget:
    cap: int

    def limit(self, source: str) -> int:
        return self.cap

    def split_threshold(self, source: str) -> float:
        return 0.0


@dataclass
class _SourceState:
    # Per draft position i (0-based): decayed counts of drafts that reached it and were accepted there.
    reached: list[float] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)
    idle_steps: int = 0
    probe_interval: int = FIRST_PROBE_AFTER
    probing: bool = False

    def alphas(self, k: int) -> list[float]:
        """Acceptance estimate at positions 0..k-1; a position never reached takes the one before's."""
        out, estimate = [], PRIOR_ALPHA
        for i in range(k):
            if i < len(self.reached):
                estimate = self.accepted[i] / self.reached[i]
            out.append(estimate)
        return out

    def observe(self, drafted: int, accepted: int) -> None:
        while len(self.reached) < drafted:
            # A new position starts from the estimate of the one before, as a few pseudo-observations.
            prior = self.alphas(len(self.reached) + 1)[-1]
            self.reached.append(PRIOR_WEIGHT)
            self.accepted.append(PRIOR_WEIGHT * prior)
        self.reached = [r * DECAY for r in self.reached]
        self.accepted = [a * DECAY for a in self.accepted]
        for i in range(min(accepted + 1, drafted)):
            self.reached[i] += 1.0
            if i < accepted:
                self.accepted[i] += 1.0


def expected_tokens(alphas: Sequence[float], k: int) -> float:
    """Tokens emitted by a step that drafts k tokens: the accepted prefix plus the target's own
    token, position i being accepted with probability alphas[i] once all before it were."""
    total, p = 1.0, 1.0
    for i in range(k):
        p *= alphas[i]
        total += p
    return total


@dataclass
class AutoController:
    costs: DecodeCosts
    draft_max: int
    _states: dict[str, _SourceState] = field(default_factory=dict)

    def _state(self, source: str) -> _SourceState:
        return self._states.setdefault(source, _SourceState())

    def best_length(
        self, source: str, cap: int, context: int = 0, perfect: bool = False, margin: float = GAIN_MARGIN
    ) -> int:
        """The k in [0, cap] with the most expected tokens per second (perfect: as if every draft
        token were accepted)."""
        cap = min(cap, self.draft_max)
        alphas = [1.0] * cap if perfect else self._state(source).alphas(cap)
        rates = [margin / self.costs.verify(1, context)]
        for k in range(1, cap + 1):
            rates.append(expected_tokens(alphas, k) / (self.costs.draft(source, k, context) + self.costs.verify(k + 1, context)))
        best = max(range(cap + 1), key=rates.__getitem__)
        if best == 0:
            return 0
        return max(k for k in range(1, cap + 1) if rates[k] >= rates[best] * (1 - FLAT_TOLERANCE))

    def budget(self, cap: int, context: int = 0) -> Budget:
        return _AutoBudget(self, cap, context)

    def limit(self, source: str, cap: int, context: int = 0) -> int:
        state = self._state(source)
        k = self.best_length(source, cap, context)
        state.probing = False
        if k > 0 or cap < 1:
            return k
        if self.best_length(source, cap, context, perfect=True, margin=PROBE_MARGIN) == 0:
            return 0  # not even perfect drafts would pay well at these costs: nothing to probe for
        state.idle_steps += 1
        if state.idle_steps >= state.probe_interval:
            state.idle_steps = 0
            state.probing = True
            return 1  # a probe keeps the acceptance estimate alive
        return 0

    def update(self, source: str, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        state = self._state(source)
        state.observe(drafted, accepted)
        if self.best_length(source, self.draft_max) > 0:
            state.probe_interval = FIRST_PROBE_AFTER
        elif state.probing:
            # The probe did not change the verdict: wait longer before the next one.
            state.probe_interval = min(state.probe_interval * 2, MAX_PROBE_INTERVAL)
        state.probing = False

    def split_threshold(self, source: str, cap: int, context: int = 0) -> float:
        """A side-branch token costs a draft token and a wider target pass, and saves at most about
        one target pass if accepted: worth it only when its probability exceeds that cost ratio."""
        cap = max(1, min(cap, self.draft_max))
        marginal = self.costs.draft(source, cap + 1, context) - self.costs.draft(source, cap, context)
        marginal += (self.costs.verify(cap + 1, context) - self.costs.verify(1, context)) / cap
        return min(1.0, max(0.0, marginal / self.costs.verify(1, context)))

    def acceptance(self, source: str) -> float:
        return self._state(source).alphas(1)[0]


@dataclass
class _AutoBudget:
    controller: AutoController
    cap: int
    context: int

    def limit(self, source: str) -> int:
        return self.controller.limit(source, self.cap, self.context)

    def split_threshold(self, source: str) -> float:
        return self.controller.split_threshold(source, self.cap, self.context)
