"""What lanes' passes cost (backend/lanes.py): a model's passes by how many lanes shared them and
their cost by the tokens in them, and what a lane's draft-model passes cost the batch."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

FIT_PASSES = 64  # the latest passes a model's cost line is fitted to


@dataclass
class ModelPasses:
    """A model's passes through the lockstep: how many lanes shared each (for /metrics), and their
    cost as a line over the tokens in them, seconds = a + b * tokens, fitted by least squares to the
    latest FIT_PASSES: what a lane's extra tokens cost the batch."""

    lanes: Counter = field(default_factory=Counter)  # lanes in a pass -> passes
    seen: deque = field(default_factory=lambda: deque(maxlen=FIT_PASSES))  # (tokens, seconds)

    def add(self, lanes: int, tokens: int, seconds: float) -> None:
        self.lanes[lanes] += 1
        self.seen.append((tokens, seconds))

    def line(self) -> tuple[float, float] | None:
        """(a, b), or None until passes of two widths were seen."""
        if len({t for t, _ in self.seen}) < 2:
            return None
        t = np.array([t for t, _ in self.seen], float)
        s = np.array([s for _, s in self.seen], float)
        b = float(np.cov(t, s, bias=True)[0, 1] / np.var(t))
        b = max(b, 0.0)
        return max(float(s.mean() - b * t.mean()), 0.0), b


@dataclass
class DraftShare:
    """What a lane's draft-model passes cost the batch: each round of them held every lane
    generating, shared among the lanes drafting in it (the draft model's lane adds, the target's
    lane reads it for its engine)."""

    seconds: float = 0.0  # the rounds' time
    charged: float = 0.0  # their time times lanes held over lanes drafting

    def factor(self) -> float:
        """What the batch paid per second of the rounds since the last call (1: alone)."""
        out = self.charged / self.seconds if self.seconds > 0 else 1.0
        self.seconds = self.charged = 0.0
        return out
