"""What the auto controller knows of a drafter, learned from the token stream alone.

Two estimates per drafter (per kind of proposal, for prompt lookup), and what its steps realized:
- per draft position, how likely a token there is accepted once all before it were. Acceptance
  comes in runs (a draft that got the first tokens right tends to get the next ones right too), so
  later positions get their own estimates instead of one rate for all;
- per confidence bucket, how often the target accepted a token the draft was that sure of
  (a draft model's confidence, calibrated)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

PRIOR_ALPHA = 0.6  # what a position is believed before any evidence
PRIOR_WEIGHT = 2.0  # pseudo-observations behind that belief
DECAY = 0.95  # per drafted step: recent behaviour counts most (about the last 20 steps)
# Draft confidences are calibrated per bucket; drafts worth having are mostly very sure, so the
# buckets are finest near 1.
CONFIDENCE_EDGES = (0.2, 0.4, 0.6, 0.75, 0.85, 0.9, 0.95, 0.98, 0.99, 0.995)
CALIBRATION_PRIOR = 2.0  # pseudo-observations of the broader estimate that every bucket keeps
# How well confidence predicts acceptance belongs to the model pair more than to the text: it is
# remembered longer than the per-position estimates.
CALIBRATION_DECAY = 0.98


def expected_tokens(alphas: Sequence[float], k: int) -> float:
    """Tokens emitted by a step that drafts k tokens: the accepted prefix plus the target's own
    token, position i being accepted with probability alphas[i] once all before it were."""
    total, p = 1.0, 1.0
    for i in range(k):
        p *= alphas[i]
        total += p
    return total


@dataclass
class SourceEstimates:
    # Per draft position i (0-based): decayed counts of drafts that reached it and were accepted there.
    reached: list[float] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)
    # Per confidence bucket: decayed counts of tokens the target judged, and of those it accepted.
    tried: list[float] = field(default_factory=lambda: [0.0] * (len(CONFIDENCE_EDGES) + 1))
    passed: list[float] = field(default_factory=lambda: [0.0] * (len(CONFIDENCE_EDGES) + 1))

    def alphas(self, k: int) -> list[float]:
        """Acceptance estimate at positions 0..k-1. Each later position is shrunk towards the one
        before it, so one that drafts have stopped reaching drifts back instead of keeping its
        last verdict for ever."""
        out, estimate = [], PRIOR_ALPHA
        for i in range(k):
            if i < len(self.reached):
                shrink = 0.0 if i == 0 else PRIOR_WEIGHT  # position 0 starts from fading pseudo-counts
                estimate = (self.accepted[i] + shrink * estimate) / (self.reached[i] + shrink)
            out.append(estimate)
        return out

    def overall(self) -> float:
        """Acceptance of a judged token over all confidences."""
        return (sum(self.passed) + CALIBRATION_PRIOR * PRIOR_ALPHA) / (sum(self.tried) + CALIBRATION_PRIOR)

    def calibrated(self, confidence: float) -> float:
        """A bucket's acceptance, shrunk towards the larger of the confidence and the acceptance over
        all buckets: a draft may agree with its target far more often than it is sure (a quant of
        the same model), so its rarely seen unsure buckets must not be judged by their confidence
        alone, while a sure token is taken at its word until the target says otherwise."""
        b = bisect_right(CONFIDENCE_EDGES, confidence)
        prior = max(confidence, self.overall())
        return (self.passed[b] + CALIBRATION_PRIOR * prior) / (self.tried[b] + CALIBRATION_PRIOR)

    def observe(self, drafted: int, accepted: int, judged: Sequence[tuple[float, bool]]) -> None:
        """A verified draft: its length, how many were accepted, and (confidence, accepted) for
        every token the target judged."""
        if not self.reached:
            self.reached, self.accepted = [PRIOR_WEIGHT], [PRIOR_WEIGHT * PRIOR_ALPHA]
        while len(self.reached) < drafted:
            self.reached.append(0.0)
            self.accepted.append(0.0)
        self.reached = [r * DECAY for r in self.reached]
        self.accepted = [a * DECAY for a in self.accepted]
        for i in range(min(accepted + 1, drafted)):
            self.reached[i] += 1.0
            if i < accepted:
                self.accepted[i] += 1.0
        if judged:
            self.tried = [t * CALIBRATION_DECAY for t in self.tried]
            self.passed = [a * CALIBRATION_DECAY for a in self.passed]
            for confidence, ok in judged:
                b = bisect_right(CONFIDENCE_EDGES, confidence)
                self.tried[b] += 1.0
                self.passed[b] += ok


REALIZED_DECAY = 0.85  # per asked step: realized throughput is judged on the last several
MIN_EVIDENCE = 3.0  # decayed asked steps before realized throughput can bench a drafter
# A drafter is benched when its mean excess over the target alone is below zero by this many
# standard errors.
LOSS_CONFIDENCE = 1.0


@dataclass
class Realized:
    """Decayed over the steps a drafter was asked to draft: their count, tokens and seconds, and the
    sum and sum of squares of each one's excess (tokens beyond what the target alone would have
    emitted in the same time)."""

    steps: float = 0.0
    tokens: float = 0.0
    seconds: float = 0.0
    excess: float = 0.0
    excess_sq: float = 0.0

    def add(self, tokens: int, seconds: float, plain_rate: float) -> None:
        d, x = REALIZED_DECAY, tokens - plain_rate * seconds
        self.steps, self.tokens, self.seconds = (
            self.steps * d + 1,
            self.tokens * d + tokens,
            self.seconds * d + seconds,
        )
        self.excess, self.excess_sq = self.excess * d + x, self.excess_sq * d + x * x

    def scale(self, factor: float) -> None:
        self.steps, self.tokens, self.seconds = (
            self.steps * factor,
            self.tokens * factor,
            self.seconds * factor,
        )
        self.excess, self.excess_sq = self.excess * factor, self.excess_sq * factor

    def losing(self) -> bool:
        """Whether these steps yield fewer tokens than the target alone would, beyond their noise."""
        if self.steps < MIN_EVIDENCE:
            return False
        mean = self.excess / self.steps
        var = max(self.excess_sq / self.steps - mean * mean, 0.0)
        return mean + LOSS_CONFIDENCE * (var / self.steps) ** 0.5 < 0

    def winning(self) -> bool:
        """Whether these steps yielded more tokens than the target alone would have, on average."""
        return self.steps > 0 and self.excess > 0

    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0
