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


PROBE_S = 2.0  # seconds of a batch size's time each way in a trial
HOLD_S = 30.0  # seconds of a batch size's time a verdict holds before it is tried again


@dataclass
class _Tally:
    tokens: int = 0
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class _Trial:
    """One batch size's trials: drafting on against off, each for PROBE_S of its time."""

    on: _Tally = field(default_factory=_Tally)
    off: _Tally = field(default_factory=_Tally)
    drafting: bool = True  # what its lanes do now
    held: float = -1.0  # seconds left of a verdict (< 0: trying)

    def add(self, tokens: int, seconds: float) -> None:
        tally = self.on if self.drafting else self.off
        tally.tokens += tokens
        tally.seconds += seconds
        if self.held >= 0:
            self.held -= seconds
            if self.held < 0:  # tried again, the other way first
                self.on, self.off, self.drafting = _Tally(), _Tally(), not self.drafting
        elif tally.seconds >= PROBE_S:
            other = self.off if self.drafting else self.on
            if other.seconds < PROBE_S:
                self.drafting = not self.drafting
            else:
                self.drafting, self.held = self.on.rate >= self.off.rate, HOLD_S


class BatchGate:
    """Whether requests generated together draft, by batch size, measured: the batch's tokens a
    second with drafting on and off, taken turns of PROBE_S of that size's time each, the better
    kept for HOLD_S and then tried again. Everything a step costs counts (the passes, the draft's,
    every lane's Python between them), where pricing passes alone missed what made drafting lose on
    a CPU beside other requests. One request alone is the engine's own controller's to decide."""

    def __init__(self) -> None:
        self._trials: dict[int, _Trial] = {}

    def drafting(self, lanes: int) -> bool:
        return lanes <= 1 or self._trial(lanes).drafting

    def add(self, lanes: int, tokens: int, seconds: float) -> None:
        """`lanes` generating together emitted `tokens` in `seconds`."""
        if lanes > 1:
            self._trial(lanes).add(tokens, seconds)

    def _trial(self, lanes: int) -> _Trial:
        """A size's trials; a size not seen yet takes the verdict that a smaller size's loss or a
        larger size's win implies (drafting pays less as the batch grows), and is tried only
        where none does: as requests end one by one, each size on the way would otherwise pay
        for a trial of its own."""
        trial = self._trials.get(lanes)
        if trial is None:
            verdicts = {n: t.drafting for n, t in self._trials.items() if t.held >= 0}
            lost = any(n < lanes and not on for n, on in verdicts.items())
            won = any(n > lanes and on for n, on in verdicts.items())
            trial = _Trial(drafting=not lost, held=HOLD_S) if lost or won else _Trial()
            self._trials[lanes] = trial
        return trial
