"""What the auto controller knows of a drafter, learned from the token stream alone.

Three estimates per drafter (per kind of proposal, for prompt lookup):
- per draft position, how likely a token there is accepted once all before it were. Acceptance
  comes in runs (a draft that got the first tokens right tends to get the next ones right too), so
  later positions get their own estimates instead of one rate for all;
- per confidence bucket, how often the target accepted a token the draft was that sure of
  (a draft model's confidence, calibrated);
- for drafters asked step by step (draft models), the tokens and modelled seconds of the steps
  they were asked for: whether asking pays at all."""

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
# Before a drafter has been asked, asking is believed to beat plain decoding by this much, as one
# step's worth of evidence: the first steps try it.
ASK_PRIOR_GAIN = 1.2


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
    # Decayed tokens emitted and modelled seconds spent by the steps this drafter was asked for.
    asked_tokens: float = 0.0
    asked_seconds: float = 0.0

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

    def asked_rate(self, plain_step: float) -> float:
        """Tokens per second of the steps this drafter was asked for (plain_step: seconds of a
        target pass over one token, which scales the prior)."""
        return (self.asked_tokens + ASK_PRIOR_GAIN) / (self.asked_seconds + plain_step)

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

    def observe_asked(self, emitted: int, seconds: float) -> None:
        self.asked_tokens = self.asked_tokens * DECAY + emitted
        self.asked_seconds = self.asked_seconds * DECAY + seconds
