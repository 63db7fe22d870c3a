"""How many tokens to draft each step.

`fixed` drafts up to --draft-max every step (llama.cpp's behaviour). `auto` decides from what the
steps it ran measured: costs (engine/costs.py, timed per pass) and what each drafter's tokens
achieved (engine/estimates.py). Evidence comes first and is never assumed away:

- A drafter it has not seen yet drafts its first steps on trial (at least TRIAL_LENGTH tokens),
  so acceptance is learned before anything rests on it.
- Then each step drafts the length with the most expected tokens per second, costs and acceptance
  as measured so far; a draft model (which knows how sure it is) is judged token by token instead:
  a token is worth verifying while its calibrated chance of acceptance buys more than its extra
  cost would earn at the rate decoding reaches.
- Realized throughput has the last word: each step a drafter drafts is scored by the tokens it
  yielded beyond what the target alone would have in the same time, and a drafter whose recent
  steps fall short by more than their noise is benched, whatever the estimates promise (a clearly
  losing drafter within a few steps; a marginal one, which costs little either way, is not thrown
  out on one unlucky stretch); one whose estimates promise no gain sits out only if its steps
  have not beaten the target alone either (after a short trial the estimates still lean on their
  priors). Benched drafters are probed at growing intervals; a probe that beats
  the target alone (for prompt lookup, two in a row) starts a new trial, and one benched again
  before its steps came out ahead waits twice as long for its next probe (a draft model nearly as
  dear as its target, on the light testbed pair, won a probe on a lucky run eight steps after each
  pause and lost the steps that followed). A draft model's probe first reads what was generated
  while it sat out: where that costs more than a target pass and drafting could not pay it back
  over the answer (engine/reading.py), the probe waits, twice as long again (that draft read at a
  third of its target's one-token pass a token: full catch-ups cost a third of the time it sat
  out, however far apart). Prompt lookup is one
  drafter here: its match lengths learn acceptance apart but share the trial and the verdict; a
  length that does not pay sits out and is rechecked at growing intervals.
- Every REFRESH_STEPS drafted steps in a row, one plain step re-times the target alone.
- A drafter that must first read much (a draft model that has not read a long prompt yet) drafts
  only once what drafting can save over the rest of the answer (the tokens still expected, at the
  best rate its estimates promise, against the rate this generation reached without it) is
  READ_MARGIN times what the reading costs; until then it waits, and the target (or a drafter
  with nothing to read) goes on alone (engine/reading.py).
- Where a lookup's find and a draft model could both draft a step, the find gives way if the draft
  model promises more tokens per second (`prefers`).

The first two steps of a fresh engine are plain ones: they time the target alone (the faster of the
two, the first also paging in the weights); so are the first two once the context reaches a length
not timed yet (costs.py: a long context makes wide passes dearer). And the first step of every
generation drafts only what does not hold its first token back (FIRST_TOKEN_SLACK), so the first
token comes about as fast as without speculation in a chat's later turns and a server's later
requests too: drafted at will, it waited for the draft model to read the new prompt, for its passes
and for a wide verification (the heavy testbed pair in `bench`, whose engine outlives a prompt:
1.45x the target alone's first token), where one plain step more costs the answer about a target
pass less that pass's share of a drafted step. Decisions depend on timings, so a seeded run at
temp > 0 repeats only with --verify coupled (or in fixed mode); greedy output never depends on them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from localspec.drafters.base import CatchUp, DraftKey
from localspec.engine.budgets import AutoBudget
from localspec.engine.costs import LiveCosts
from localspec.engine.estimates import DECAY, MIN_EVIDENCE, Realized, SourceEstimates, expected_tokens
from localspec.engine.pricing import StepPrices
from localspec.engine.reading import Reading, ToRead

TRIAL_STEPS = 2  # steps a new drafter (or one whose probe won) drafts whatever the estimates say
TRIAL_LENGTH = 3  # tokens each of them drafts at least
PROBE_LENGTH = 2
FIRST_PROBE_AFTER = 8  # idle steps before a benched drafter is probed
# Prompt lookup's probes won in a row that start a new trial: lookup accepted a third of the time
# wins one probe in three (a match that happened to go on), and each trial it started cost more than
# the probes. A draft model's probe is its best guess: one win starts the trial.
LOOKUP_PROBE_WINS = 2
MAX_PROBE_INTERVAL = 64
# A lookup match length that sits out drafts a probe after this many of its matches (then twice as
# many, up to 4 * MAX_PROBE_INTERVAL): an engine outlives a text (a chat, a server), early misses too.
RECHECK_AFTER = 16
REFRESH_STEPS = 48
# A generation's first step drafts only what holds its first token back by at most this share of a
# one-token pass (the draft's reading and passes and the wider verification, at measured costs).
FIRST_TOKEN_SLACK = 0.1


@dataclass
class _Gate:
    """Whether a drafter drafts at all: its trial, its realized throughput, benching and probes.
    One per drafter: prompt lookup's match lengths share it (each has its own acceptance
    estimates), so a marginal lookup is tried, judged and benched once, not once per length."""

    trial: int = TRIAL_STEPS  # trial steps left
    benched: bool = False
    idle_steps: int = 0
    probe_interval: int = FIRST_PROBE_AFTER
    probing: bool = False
    wins: int = 0  # probes won in a row
    resumed: bool = False  # drafting again after a probe won, its steps not yet ahead
    realized: Realized = field(default_factory=Realized)


@dataclass
class AutoController:
    costs: LiveCosts = field(default_factory=LiveCosts)
    _gates: dict[str, _Gate] = field(default_factory=dict)  # per drafter
    _estimates: dict[str, SourceEstimates] = field(default_factory=dict)  # per kind of proposal
    # Decayed tokens and seconds of every step: the rate decoding reaches.
    _tokens: float = 0.0
    _seconds: float = 0.0
    _since_plain: int = 0
    remaining: float = 0.0  # tokens the answer is still expected to run (plan() sets it each step)
    _steps: int = 0  # steps planned in this generation
    _started: bool = False  # start() has begun a generation (a bare controller's steps have none)
    reading: Reading = field(default_factory=Reading)  # whether a drafter's first read pays
    # Lookup match lengths sitting out: matches since the last recheck, and the interval.
    _sat_out: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # why drafters were benched, newest last

    def gate(self, drafter: str) -> _Gate:
        return self._gates.setdefault(drafter, _Gate())

    def estimates(self, name: str) -> SourceEstimates:
        return self._estimates.setdefault(name, SourceEstimates())

    def prices(self) -> StepPrices:
        """Costs and estimates as they stand now (a step's budget keeps its own: pricing.py)."""
        return StepPrices(self.costs, self.estimates)

    def plain_rate(self) -> float:
        return 1.0 / self.costs.verify(1)  # asked every step: no StepPrices made for it

    def best_length(self, key: DraftKey, cap: int) -> int:
        return self.prices().best_length(key, cap)

    def rate(self) -> float:
        """Tokens per second a drafted token must beat: what decoding reached lately (at least the
        target alone's). Judging each token against the rate reached so far and drafting on
        while it beats it climbs to the best rate step by step (Dinkelbach's iteration); a rate
        promised by the estimates instead would stop drafts short whenever they are optimistic."""
        realized = self._tokens / self._seconds if self._seconds > 0 else 0.0
        return max(realized, self.plain_rate())

    def start(self) -> None:
        """A generation starts: a drafter that waited to read in the last one is judged anew."""
        self.reading.start()
        self._steps, self._started = 0, True

    def plan(self, cap: int, floor: int = 0, remaining: float = 0.0, shared: bool = False) -> AutoBudget:
        """A step's budget: drafters ask it how far to draft; it keeps which drafter it let draft
        (`asked`), for `record_step` to credit the step to. `remaining`: the tokens the answer is
        still expected to run, which reading a long context must pay back over; `shared`: other
        generations' drafts share its draft passes (AutoBudget.offer)."""
        self.remaining, self._steps = remaining, self._steps + 1
        return AutoBudget(self, self.prices(), cap, min(floor, cap), shared=shared)

    def limit(
        self, key: DraftKey, cap: int, calibrated: bool, catch_up: CatchUp | None = None
    ) -> tuple[int, int]:
        """(the most tokens `key` may draft this step, how many it must draft unconditionally)."""
        st = self.gate(key.drafter)
        st.probing = False
        if self._started and self._steps == 1:  # the generation's first step
            cap = self._opening_cap(key, cap, catch_up)
        if cap < 1 or not self.costs.anchored or self._since_plain >= REFRESH_STEPS:
            return 0, 0
        if catch_up is not None and not st.benched:
            if not self.reading.pays(self._to_read(key, cap, catch_up), self._steps, self.notes):
                return 0, 0
        if st.trial > 0:
            k, floor = (cap if calibrated else max(self.best_length(key, cap), TRIAL_LENGTH)), TRIAL_LENGTH
        elif st.benched:
            st.idle_steps += 1
            if st.idle_steps < st.probe_interval:
                return 0, 0
            st.idle_steps = 0
            if catch_up is not None and not self.reading.probe_pays(self._to_read(key, cap, catch_up)):
                st.probe_interval = min(st.probe_interval * 2, MAX_PROBE_INTERVAL)
                return 0, 0
            st.probing = True
            k, floor = (cap if calibrated else max(self.best_length(key, cap), PROBE_LENGTH)), PROBE_LENGTH
        else:
            best = self.best_length(key, cap)
            if best == 0 and not key.kind:
                if not st.realized.winning():
                    self._bench(key.drafter, "its estimated gain did not cover its cost")
                    return 0, 0
                # Estimates drawn from a short trial lean on their priors; steps that beat the
                # target alone outweigh them until the realized verdict turns.
                best = PROBE_LENGTH
            k, floor = (cap if calibrated else best), 0
            if best == 0:  # a lookup match length that does not pay: it sits out, and rechecks now and then
                wait = self._sat_out.setdefault(key.estimates, [0, RECHECK_AFTER])
                wait[0] += 1
                if wait[0] < wait[1]:
                    return 0, 0
                wait[:] = [0, min(2 * wait[1], 4 * MAX_PROBE_INTERVAL)]
                k, floor = PROBE_LENGTH, PROBE_LENGTH
            else:
                self._sat_out.pop(key.estimates, None)
        return min(k, cap), min(floor, cap)

    def _opening_cap(self, key: DraftKey, cap: int, catch_up: CatchUp | None) -> int:
        """The longest draft a generation's first step may verify without holding its first token
        back by more than FIRST_TOKEN_SLACK: on a GPU a lookup's find (a wide pass costs about a
        narrow one), on a CPU or with a draft model's reading and passes to wait for, none."""
        prices = self.prices()
        room = (1 + FIRST_TOKEN_SLACK) * prices.verify(1) - (self.costs.read(catch_up) if catch_up else 0.0)
        fits = (k for k in range(1, cap + 1) if prices.draft(key.drafter, k) + prices.verify(k + 1) <= room)
        return max(fits, default=0)

    def _to_read(self, key: DraftKey, cap: int, catch_up: CatchUp) -> ToRead:
        """What `key` must read before drafting, with its acceptance so far (where it has drafted
        enough to say) and the answer still expected."""
        est = self.estimates(key.estimates)
        alphas = est.alphas(cap) if est.reached else None
        return ToRead(self.costs, key.drafter, alphas, cap, catch_up, self.remaining)

    def prefers(self, found: DraftKey, length: int, other: DraftKey, cap: int) -> bool:
        """Whether a found draft of `length` tokens by `found` promises at least the tokens per
        second that `other` would reach drafting in its place (nothing, where it sits out or waits
        to read, decided or not). The found draft's cost is spent either way: only its
        verification counts."""
        st = self.gate(other.drafter)
        if st.benched or self.reading.holds(other.drafter):
            return True
        prices = self.prices()
        mine = expected_tokens(prices.alphas(found.estimates, length), length) / prices.verify(length + 1)
        return mine >= max(prices.rates(other, cap)[1:], default=0.0)

    def update(
        self, key: DraftKey, drafted: int, accepted: int, judged: Sequence[tuple[float, bool]] = ()
    ) -> None:
        """Learn from a verified draft of `key`: `judged` pairs each drafted token the target
        judged with its draft confidence and whether it was accepted."""
        if drafted:
            self.estimates(key.estimates).observe(drafted, accepted, judged)

    def record_step(self, asked: DraftKey | None, drafted: int, emitted: int, seconds: float) -> None:
        """Count a step (`drafted` tokens verified, `emitted` tokens, `seconds` for drafting and
        verification) towards realized throughput, and towards the verdict on `asked`, the drafter
        the step's budget let draft (its `asked`)."""
        plain = self.plain_rate()
        if asked is not None:
            st = self.gate(asked.drafter)
            st.realized.add(emitted, seconds, plain)
            if st.probing:
                self._after_probe(asked, emitted >= plain * seconds)
            elif st.trial > 0:
                st.trial -= 1
            elif st.realized.losing():
                self._bench(
                    asked.drafter,
                    f"its recent steps ran at {st.realized.rate():.1f} tok/s, the target alone at "
                    f"{plain:.1f}",
                )
            elif st.resumed and st.realized.steps >= MIN_EVIDENCE and st.realized.winning():
                st.resumed, st.probe_interval = False, FIRST_PROBE_AFTER
        self._since_plain = self._since_plain + 1 if drafted else 0
        self._tokens = self._tokens * DECAY + emitted
        self._seconds = self._seconds * DECAY + seconds
        self.reading.record(asked.drafter if asked else None, emitted, seconds)

    def _bench(self, drafter: str, why: str) -> None:
        st = self.gate(drafter)
        if not st.benched:
            # "paused", not "stopped": a probe may bring it back, and the steps before still count.
            self.notes.append(f"{drafter} paused: {why}")
        if st.resumed:  # what its winning probe promised did not last
            st.resumed, st.probe_interval = False, min(st.probe_interval * 2, MAX_PROBE_INTERVAL)
        st.benched, st.idle_steps = True, 0

    def _after_probe(self, key: DraftKey, won: bool) -> None:
        st = self.gate(key.drafter)
        st.probing, st.wins = False, st.wins + 1 if won else 0
        if st.wins >= (LOOKUP_PROBE_WINS if key.lookup else 1):
            # Fresh evidence from here: a trial, its realized throughput counted anew; the interval
            # goes back to FIRST_PROBE_AFTER once its steps come out ahead.
            st.benched, st.trial, st.wins, st.resumed = False, TRIAL_STEPS, 0, True
            st.realized.scale(0.2)
            self.notes.append(f"{key.drafter} resumed: a probe beat the target alone")
        elif won:
            st.idle_steps = st.probe_interval  # the next step probes again
        else:
            st.probe_interval = min(st.probe_interval * 2, MAX_PROBE_INTERVAL)
