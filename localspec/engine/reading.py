"""Whether a drafter that must first read much (a draft model that has not read a long prompt yet)
should: only once what drafting can save over the rest of the answer (the tokens still expected, at
the best rate its estimates promise, against the rate this generation reached without it) is
READ_MARGIN times what the reading costs. Until then it waits, and the target (or a drafter with
nothing to read) goes on alone. A paused drafter's probe, which must first read what was generated
while it sat out, is weighed the same way (`probe_pays`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from localspec.drafters.base import CatchUp
from localspec.engine.costs import LiveCosts
from localspec.engine.estimates import DECAY, expected_tokens

# Before a draft model has drafted, what reading a long prompt can earn is priced at this acceptance
# per position: what a draft of its target's family reaches on a long context through its window
# (the good testbed draft 0.71 on a 2.5k-token prompt, 0.87 reading all of it); the trial's estimates
# take over once it drafts.
READ_PRIOR_ALPHA = 0.7
# What reading costs is measured; what it saves rests on estimates (the CPU's wide passes at a
# context length not drafted at yet, acceptance not seen yet): it must promise this much more.
READ_MARGIN = 1.5
# Wide passes are what drafting costs, and a CPU's grow with the context (on the testbed a 5-token
# pass cost 4.1x a one-token one after 4k tokens, against 2x at the start): where none has been timed
# at this context length yet, the decision waits this many steps for one (prompt lookup times them
# while the draft waits), then rests on the shape measured nearest.
READ_UNDECIDED_STEPS = 12


@dataclass(frozen=True)
class ToRead:
    """What a drafter must read before it drafts, and what that reading is weighed against."""

    costs: LiveCosts
    drafter: str
    alphas: Sequence[float] | None  # its acceptance per position, as estimated (None: it has not drafted)
    cap: int  # the most tokens a step may draft
    catch_up: CatchUp
    remaining: float  # tokens the answer is still expected to run

    @property
    def cost(self) -> float:
        return self.costs.read(self.catch_up)


@dataclass
class Reading:
    """The reading decisions of one generation at a time (`start` begins the next)."""

    waiting: set[str] = field(default_factory=set)  # drafters told this generation that reading does not pay
    undecided: set[str] = field(default_factory=set)  # drafters whose reading waits for a wide pass timed
    # This generation's steps, decayed as the controller's are, [tokens, seconds] by the drafter
    # asked ("": none): what decoding reaches without a drafter is the rest's. An earlier turn's
    # rate, or this one's steps the drafter drafted itself, would measure it against itself (a
    # draft that sat out a few steps mid-answer "saved ~0.0s" by catching up, waited, and fell
    # further behind).
    steps: dict[str, list[float]] = field(default_factory=dict)

    def start(self) -> None:
        """A generation starts: a drafter that waited to read in the last one is judged anew."""
        self.waiting.clear()
        self.undecided.clear()
        self.steps.clear()

    def record(self, drafter: str | None, emitted: int, seconds: float) -> None:
        """A step of this generation that `drafter` was asked to draft emitted `emitted` tokens
        in `seconds`."""
        for tally in self.steps.values():
            tally[0] *= DECAY
            tally[1] *= DECAY
        tally = self.steps.setdefault(drafter or "", [0.0, 0.0])
        tally[0] += emitted
        tally[1] += seconds

    def without(self, drafter: str) -> tuple[float, float]:
        """(tokens, seconds) of this generation's steps that `drafter` was not asked to draft."""
        others = [t for name, t in self.steps.items() if name != drafter]
        return sum(t[0] for t in others), sum(t[1] for t in others)

    def holds(self, drafter: str) -> bool:
        """Whether `drafter` waits to read, decided or not."""
        return drafter in self.waiting or drafter in self.undecided

    def pays(self, ask: ToRead, steps: int, notes: list[str]) -> bool:
        """Whether what `ask.drafter` can save over the `ask.remaining` tokens expected is
        READ_MARGIN times what reading `ask.catch_up` costs first (a reading no dearer than a target
        pass is left to the gate). Saved per token: what a token costs now (a one-token pass, or
        less where this generation's steps without it reached more tokens a second: prompt lookup
        drafting a copy) less the best cost per token its drafts promise at acceptances
        `ask.alphas` (None: it has not drafted; READ_PRIOR_ALPHA), once a wide pass has been timed
        at this context length (or READ_UNDECIDED_STEPS `steps` went by without one). A drafter
        that waits says why in `notes`, once a generation."""
        costs, drafter, reading = ask.costs, ask.drafter, ask.cost
        if reading <= costs.verify(1):
            return True
        if not costs.wide_timed and steps <= READ_UNDECIDED_STEPS:
            self.undecided.add(drafter)
            return False
        self.undecided.discard(drafter)
        saved = self._saving(ask)
        if saved > READ_MARGIN * reading:
            self.waiting.discard(drafter)
            return True
        if drafter not in self.waiting:
            self.waiting.add(drafter)
            notes.append(
                f"{drafter} waited: reading {ask.catch_up.tokens} tokens first (~{_seconds(reading)}) would "
                f"not pay {READ_MARGIN:g} times over: drafting saves ~{_seconds(max(saved, 0.0))} "
                f"over the ~{ask.remaining:.0f} tokens expected"
            )
        return False

    def probe_pays(self, ask: ToRead) -> bool:
        """Whether a benched drafter's probe, which must first read what was generated while it sat
        out, could pay that reading back READ_MARGIN times over the answer (or reads no more than
        a target pass costs). A draft nearly as dear as its target reads at a third of a one-token
        pass a token on the testbed's CPU: probes that read all they missed cost a third of the
        time they sat out, however far apart they are."""
        return ask.cost <= ask.costs.verify(1) or self._saving(ask) > READ_MARGIN * ask.cost

    def _saving(self, ask: ToRead) -> float:
        """Seconds drafting can save over the answer (`pays` explains how)."""
        costs, alphas = ask.costs, ask.alphas or [READ_PRIOR_ALPHA] * ask.cap
        per_token = min(
            (costs.draft(ask.drafter, k, ask.catch_up) + costs.verify(k + 1)) / expected_tokens(alphas, k)
            for k in range(1, ask.cap + 1)
        )
        tokens, seconds = self.without(ask.drafter)
        now = min(costs.verify(1), seconds / tokens) if tokens > 0 else costs.verify(1)
        return ask.remaining * (now - per_token)


def _seconds(x: float) -> str:
    """A note's seconds: a catch-up of a few tokens reads in milliseconds, a long prompt in seconds."""
    return f"{x:.1f}s" if x >= 1 else f"{x * 1e3:.0f} ms"
