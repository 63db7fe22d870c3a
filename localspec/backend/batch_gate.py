"""How requests generated at once (backend/lanes.py) run, by how many there are, measured: the
batch's tokens a second each way, taken turns of PROBE_S of that batch size's time each, the best
kept for HOLD_S and then tried again.

The ways: DRAFT, every request's passes together and `auto` drafting in each; PLAIN, together
without drafting; TURNS, one request's pass at a time, each drafting as if alone. Everything a step
costs counts (the passes, the draft's, every request's Python between them): pricing passes alone
still drafted where drafting lost on a CPU beside other requests (benchmarks/RESULTS.md). Where a
pass of several tokens costs about as much as one (a GPU, a large model on a CPU), together wins;
where it costs nearly as much as the same tokens one by one (a compute-bound model on a CPU),
turns keep what each request's speculation earns alone, and every request still starts at once.
One request alone is the engine's own controller's to decide."""

from __future__ import annotations

from dataclasses import dataclass, field

DRAFT, PLAIN, TURNS = "draft", "plain", "turns"
WAYS = (DRAFT, PLAIN, TURNS)
PROBE_S = 2.0  # seconds of a batch size's time each way in a trial
# Seconds of a batch size's time a verdict holds before it is tried again: each trial spends 2 *
# PROBE_S on the ways that lose, under 4% of the time
HOLD_S = 120.0


@dataclass
class _Tally:
    tokens: int = 0
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class _Trial:
    """One batch size's trials: each way for PROBE_S of its time, then the best for HOLD_S."""

    way: str = DRAFT  # what its lanes do now
    tallies: dict[str, _Tally] = field(default_factory=dict)
    held: float = -1.0  # seconds left of a verdict (< 0: trying)

    def add(self, tokens: int, seconds: float) -> None:
        tally = self.tallies.setdefault(self.way, _Tally())
        tally.tokens += tokens
        tally.seconds += seconds
        if self.held >= 0:
            self.held -= seconds
            if self.held < 0:  # tried again, from another way than the verdict
                self.tallies = {}
                self.way = WAYS[(WAYS.index(self.way) + 1) % len(WAYS)]
        elif tally.seconds >= PROBE_S:
            untried = [w for w in WAYS if self.tallies.get(w, _Tally()).seconds < PROBE_S]
            if untried:
                self.way = untried[0]
            else:
                self.way, self.held = max(WAYS, key=lambda w: self.tallies[w].rate), HOLD_S


class BatchGate:
    """The way each batch size runs (module docstring)."""

    def __init__(self) -> None:
        self._trials: dict[int, _Trial] = {}

    def way(self, lanes: int) -> str:
        return DRAFT if lanes <= 1 else self._trial(lanes).way

    def add(self, lanes: int, tokens: int, seconds: float) -> None:
        """`lanes` generating together emitted `tokens` in `seconds`."""
        if lanes > 1:
            self._trial(lanes).add(tokens, seconds)

    def _trial(self, lanes: int) -> _Trial:
        """A size's trials; a size not seen yet takes PLAIN where a smaller size's verdict was
        PLAIN (batching pays more as the batch grows, drafting less), DRAFT where a larger size's
        was DRAFT, and is tried where neither holds: as requests end one by one, each size on the
        way would otherwise pay for trials of its own."""
        trial = self._trials.get(lanes)
        if trial is None:
            verdicts = {n: t.way for n, t in self._trials.items() if t.held >= 0}
            if any(n < lanes and way == PLAIN for n, way in verdicts.items()):
                trial = _Trial(PLAIN, held=HOLD_S)
            elif any(n > lanes and way == DRAFT for n, way in verdicts.items()):
                trial = _Trial(DRAFT, held=HOLD_S)
            else:
                trial = _Trial()
            self._trials[lanes] = trial
        return trial
