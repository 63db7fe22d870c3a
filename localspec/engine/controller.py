"""How many tokens to draft each step.

`fixed` drafts up to --draft-max every step (llama.cpp's behaviour). `auto` learns from the token
stream what each drafter achieves (engine/estimates.py) and, with the decode costs measured once for
the model pair, drafts only where that beats plain decoding; when it does not, it probes again
later, the probe catching the draft up on only the last few tokens so that looking stays cheap.

A drafter that knows how sure it is (a draft model) is asked step by step whether asking pays (the
tokens its recent steps yielded against their modelled cost), then token by token whether to go on:
its confidence, calibrated against what the target accepted, gives each token the probability that
it and all before it get accepted, and a token is worth verifying while that probability buys more
than the extra cost would earn at the rate decoding already reaches. So confident stretches run
long and unsure ones stop early. Drafters without a confidence (prompt lookup) get a length from
the per-position estimates.

Its choices depend only on the token stream and the cached costs, never on timings taken during
the run, so a --seed run stays repeatable."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from localspec.drafters.base import Budget
from localspec.engine.costs import MAX_CATCH_UP, DecodeCosts
from localspec.engine.estimates import DECAY, SourceEstimates, expected_tokens

FIRST_PROBE_AFTER = 8  # steps without drafting before a probe
MAX_PROBE_INTERVAL = 64
# A probe can win back little, so the draft catches up on only this many of the tokens it missed.
PROBE_CATCH_UP = 4
# Drafting must promise this much more than plain decoding: the measured costs carry some error,
# and a run must never end up slower than the target alone.
GAIN_MARGIN = 1.05
# A draft model is asked only while its recent steps beat plain decoding by this much: measured
# in runs, its steps cost up to a tenth more than the cost model says (the draft runs right after
# wide target passes, with caches cold), which a smaller margin would turn into a loss.
ASK_MARGIN = 1.15
# Probing costs more than the probe itself (the draft must first catch up), so it is only worth it
# where good drafts would pay well.
PROBE_MARGIN = 1.25
# Near its optimum the rate curve is flat, and acceptance comes in runs that the per-position
# estimates only partly capture: among lengths within this fraction of the best rate, the longest wins.
FLAT_TOLERANCE = 0.03


@dataclass
class FixedBudget:
    cap: int
    floor: int = 0

    def limit(self, source: str, calibrated: bool = False) -> int:
        return self.cap

    def catch_up(self, source: str) -> int:
        return MAX_CATCH_UP

    def acceptance(self, source: str, confidence: float) -> float:
        return confidence

    def keep(self, source: str, path_p: float, n: int) -> bool:
        return n <= self.cap

    def extend(self, source: str, path_p: float, n: int) -> bool:
        return n < self.cap


@dataclass
class _Schedule:
    """When a drafter that does not pay is looked at again."""

    idle_steps: int = 0
    probe_interval: int = FIRST_PROBE_AFTER
    probing: bool = False


@dataclass
class AutoController:
    costs: DecodeCosts
    draft_max: int
    _estimates: dict[str, SourceEstimates] = field(default_factory=dict)
    _schedules: dict[str, _Schedule] = field(default_factory=dict)
    # Decayed tokens emitted and modelled seconds spent: the rate decoding reaches, which a drafted
    # token's expected gain must beat to be worth its cost.
    _tokens: float = 0.0
    _seconds: float = 0.0
    # Tokens generated so far, and the count when each source last ran: a draft model that sat out
    # must catch up before it drafts again, which its next step has to pay for.
    _generated: int = 0
    _synced_at: dict[str, int] = field(default_factory=dict)
    # The source allowed to draft this step, and how far behind it was.
    _asked: tuple[str, int] | None = None

    def estimates(self, source: str) -> SourceEstimates:
        return self._estimates.setdefault(source, SourceEstimates())

    def _behind(self, source: str) -> int:
        return self._generated - self._synced_at.get(source, 0)

    def _rates(self, source: str, cap: int, context: int, perfect: bool, margin: float) -> list[float]:
        alphas = [1.0] * cap if perfect else self.estimates(source).alphas(cap)
        behind = self._behind(source)
        rates = [margin / self.costs.verify(1, context)]
        for k in range(1, cap + 1):
            cost = self.costs.draft(source, k, context, behind) + self.costs.verify(k + 1, context)
            rates.append(expected_tokens(alphas, k) / cost)
        return rates

    def best_length(
        self, source: str, cap: int, context: int = 0, perfect: bool = False, margin: float = GAIN_MARGIN
    ) -> int:
        """The k in [0, cap] with the most expected tokens per second (perfect: as if every draft
        token were accepted)."""
        cap = min(cap, self.draft_max)
        rates = self._rates(source, cap, context, perfect, margin)
        best = max(range(cap + 1), key=rates.__getitem__)
        if best == 0:
            return 0
        return max(k for k in range(1, cap + 1) if rates[k] >= rates[best] * (1 - FLAT_TOLERANCE))

    def rate(self, source: str, cap: int, context: int = 0) -> float:
        """Tokens per second to beat: what decoding reaches lately, and at least what the
        per-position estimates promise for `source`."""
        promised = max(self._rates(source, min(cap, self.draft_max), context, False, 1.0))
        return max(promised, self._tokens / self._seconds) if self._seconds > 0 else promised

    def _pays_to_ask(self, source: str, cap: int, context: int, calibrated: bool) -> int:
        """How many tokens to allow `source` when it is not probing (0: drafting does not pay)."""
        if not calibrated:
            return self.best_length(source, cap, context)
        plain = self.costs.verify(1, context)
        return min(cap, self.draft_max) if self.estimates(source).asked_rate(plain) > ASK_MARGIN / plain else 0

    def budget(self, cap: int, context: int = 0, floor: int = 0) -> Budget:
        return _AutoBudget(self, cap, context, min(floor, cap))

    def limit(self, source: str, cap: int, context: int = 0, calibrated: bool = False) -> int:
        schedule = self._schedules.setdefault(source, _Schedule())
        schedule.probing = False
        k = self._pays_to_ask(source, cap, context, calibrated) if cap >= 1 else 0
        if k == 0 and cap >= 1 and self.best_length(source, cap, context, perfect=True, margin=PROBE_MARGIN) > 0:
            schedule.idle_steps += 1
            if schedule.idle_steps >= schedule.probe_interval:
                schedule.idle_steps = 0
                schedule.probing = True
                # A calibrated drafter's probe drafts while it is sure; another's is one token.
                k = min(cap, self.draft_max) if calibrated else 1
        if k > 0:
            self._asked = (source, self._behind(source))
            self._synced_at[source] = self._generated
        return k

    def catch_up(self, source: str) -> int:
        schedule = self._schedules.get(source)
        return PROBE_CATCH_UP if schedule and schedule.probing else MAX_CATCH_UP

    def pays(self, source: str, path_p: float, n: int, paid: int, cap: int, context: int, rate: float) -> bool:
        """Whether verifying draft tokens n..m pays for some m <= cap: token n is accepted (with all
        before it) with probability path_p, later ones as the per-position estimates say (runs of
        acceptance make later positions surer than a token's own confidence tells), and tokens
        past `paid` must still be drafted."""
        cap = min(cap, self.draft_max)
        alphas = self.estimates(source).alphas(cap)
        per_token = self.costs.draft(source, 2, context) - self.costs.draft(source, 1, context)
        base = self.costs.verify(n, context)
        gain, p = 0.0, path_p
        for m in range(n, cap + 1):
            gain += p
            cost = self.costs.verify(m + 1, context) - base + per_token * (m - paid)
            if gain > rate * cost:
                return True
            p *= alphas[m] if m < cap else 0.0
        return False

    def update(self, source: str, drafted: int, accepted: int, judged: Sequence[tuple[float, bool]] = ()) -> None:
        """Learn from a verified draft of `source`: `judged` pairs each drafted token the target
        judged with its draft confidence and whether it was accepted."""
        if drafted:
            self.estimates(source).observe(drafted, accepted, judged)

    def record_step(self, verified: int, emitted: int, context: int = 0) -> None:
        """Count a step (`verified` draft tokens, `emitted` tokens) and its modelled cost towards
        the rates that decide whether asking a drafter pays."""
        seconds = self.costs.verify(verified + 1, context)
        if self._asked is not None:
            asked, behind = self._asked
            self._asked = None
            # Asked, the drafter paid a pass even if it then drafted nothing.
            seconds += self.costs.draft(asked, max(verified, 1), context, behind)
            self.estimates(asked).observe_asked(emitted, seconds)
            self._reschedule(asked, emitted > 1)
        self._tokens = self._tokens * DECAY + emitted
        self._seconds = self._seconds * DECAY + seconds
        self._generated += emitted

    def _reschedule(self, source: str, gained: bool) -> None:
        schedule = self._schedules.setdefault(source, _Schedule())
        if not schedule.probing:
            # Drafting: should it stop, the first probe comes soon after.
            schedule.idle_steps, schedule.probe_interval = 0, FIRST_PROBE_AFTER
        elif gained:
            # The probe won something, but one step is thin evidence: look again at once, so that a
            # good draft that had a bad moment is back within a few steps.
            schedule.probe_interval = 1
        else:
            schedule.probe_interval = min(max(schedule.probe_interval, FIRST_PROBE_AFTER) * 2, MAX_PROBE_INTERVAL)
        schedule.probing = False


@dataclass
class _AutoBudget:
    controller: AutoController
    cap: int
    context: int
    floor: int = 0
    _rates: dict[str, float] = field(default_factory=dict)

    def _rate(self, source: str) -> float:
        if source not in self._rates:
            self._rates[source] = self.controller.rate(source, self.cap, self.context)
        return self._rates[source]

    def limit(self, source: str, calibrated: bool = False) -> int:
        k = self.controller.limit(source, self.cap, self.context, calibrated)
        return max(k, self.floor) if k else 0

    def catch_up(self, source: str) -> int:
        return self.controller.catch_up(source)

    def acceptance(self, source: str, confidence: float) -> float:
        return self.controller.estimates(source).calibrated(confidence)

    def keep(self, source: str, path_p: float, n: int) -> bool:
        if n <= self.floor:
            return True
        return n <= self.cap and self.controller.pays(source, path_p, n, n, self.cap, self.context, self._rate(source))

    def extend(self, source: str, path_p: float, n: int) -> bool:
        if n >= self.cap:
            return False
        if n < self.floor:
            return True
        p_next = path_p * self.controller.estimates(source).alphas(n + 1)[n]
        return self.controller.pays(source, p_next, n + 1, n, self.cap, self.context, self._rate(source))
