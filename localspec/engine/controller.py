"""How many tokens to draft each step.

`fixed` drafts up to --draft-max every step (llama.cpp's behaviour). `auto` estimates each drafter's
per-token acceptance rate from the token stream and, with the decode costs measured once for the
model pair, picks the draft length that maximises expected tokens per second: 0 when drafting does
not pay, probing again later. Its choices depend only on the token stream and the cached costs,
never on timings taken during the run, so a --seed run stays repeatable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from localspec.engine.costs import DecodeCosts

PRIOR_ACCEPTED = 1.2  # pseudo-counts: an optimistic start (acceptance 0.6) so drafting gets tried
PRIOR_REJECTED = 0.8
DECAY = 0.9  # per drafted step: recent behaviour counts most
FIRST_PROBE_AFTER = 4  # steps without drafting before a 1-token probe
MAX_PROBE_INTERVAL = 64
# Drafting must promise this much more than plain decoding: the measured costs carry some error,
# and a run must never end up slower than the target alone.
GAIN_MARGIN = 1.05
# Probing costs more than the probe itself (the draft must first catch up on every token generated
# since it last ran), so it is only worth it where good drafts would pay well.
PROBE_MARGIN = 1.25


class Budget(Protocol):
    def limit(self, source: str) -> int:
        """The most tokens `source` may draft this step."""


@dataclass
class FixedBudget:
    cap: int

    def limit(self, source: str) -> int:
        return self.cap


@dataclass
class _SourceState:
    accepted: float = PRIOR_ACCEPTED
    rejected: float = PRIOR_REJECTED
    idle_steps: int = 0
    probe_interval: int = FIRST_PROBE_AFTER
    probing: bool = False

    @property
    def alpha(self) -> float:
        return self.accepted / (self.accepted + self.rejected)


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens emitted by a step that drafts k tokens, each accepted with probability alpha
    (geometric: the accepted prefix plus the target's own token)."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


@dataclass
class AutoController:
    costs: DecodeCosts
    draft_max: int
    _states: dict[str, _SourceState] = field(default_factory=dict)

    def best_length(
        self, source: str, cap: int, context: int = 0, alpha: float | None = None, margin: float = GAIN_MARGIN
    ) -> int:
        if alpha is None:
            alpha = self._states.setdefault(source, _SourceState()).alpha
        best_k, best_rate = 0, margin / self.costs.verify(1, context)
        for k in range(1, min(cap, self.draft_max) + 1):
            rate = expected_tokens(alpha, k) / (self.costs.draft(source, k) + self.costs.verify(k + 1, context))
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k

    def budget(self, cap: int, context: int = 0) -> Budget:
        return _AutoBudget(self, cap, context)

    def limit(self, source: str, cap: int, context: int = 0) -> int:
        state = self._states.setdefault(source, _SourceState())
        k = self.best_length(source, cap, context)
        state.probing = False
        if k > 0 or cap < 1:
            return k
        if self.best_length(source, cap, context, alpha=1.0, margin=PROBE_MARGIN) == 0:
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
        state = self._states.setdefault(source, _SourceState())
        state.accepted = state.accepted * DECAY + accepted
        state.rejected = state.rejected * DECAY + (1.0 if accepted < drafted else 0.0)
        if self.best_length(source, self.draft_max) > 0:
            state.probe_interval = FIRST_PROBE_AFTER
        elif state.probing:
            # The probe did not change the verdict: wait longer before the next one.
            state.probe_interval = min(state.probe_interval * 2, MAX_PROBE_INTERVAL)
        state.probing = False

    def acceptance(self, source: str) -> float:
        return self._states.setdefault(source, _SourceState()).alpha


@dataclass
class _AutoBudget:
    controller: AutoController
    cap: int
    context: int

    def limit(self, source: str) -> int:
        return self.controller.limit(source, self.cap, self.context)
