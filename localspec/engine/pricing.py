"""What a step's choices are priced at: the costs and acceptance estimates as they stand when the
step is planned. Neither changes until the step is recorded, and a draft model asks about every
token it drafts (`pays`, `worth`), each looking at every length up to the cap: looked up once a
step, these cost a server's lanes a fraction of the Python between their passes
(benchmarks/RESULTS.md)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from localspec.drafters.base import DraftKey
from localspec.engine.costs import LiveCosts
from localspec.engine.estimates import SourceEstimates, expected_tokens

# Expected gains carry estimation error; a length must promise this much over plain decoding.
GAIN_MARGIN = 1.02
# Near its optimum the rate curve is flat, and acceptance comes in runs the per-position estimates
# only partly capture: among lengths within this fraction of the best rate, the longest wins.
FLAT_TOLERANCE = 0.03


@dataclass
class StepPrices:
    costs: LiveCosts
    estimates: Callable[[str], SourceEstimates]
    _verify: dict[int, float] = field(default_factory=dict)  # by width
    _draft: dict[tuple[str, int], float] = field(default_factory=dict)  # by (drafter, passes)
    _alphas: dict[str, list[float]] = field(default_factory=dict)  # by estimates, the longest asked

    def verify(self, width: int) -> float:
        out = self._verify.get(width)
        if out is None:
            out = self._verify[width] = self.costs.verify(width)
        return out

    def draft(self, drafter: str, passes: int) -> float:
        out = self._draft.get((drafter, passes))
        if out is None:
            out = self._draft[drafter, passes] = self.costs.draft(drafter, passes)
        return out

    def alphas(self, name: str, k: int) -> list[float]:
        """The first k per-position acceptance estimates (a longer list's are the same first ones)."""
        out = self._alphas.get(name)
        if out is None or len(out) < k:
            out = self._alphas[name] = self.estimates(name).alphas(k)
        return out if len(out) == k else out[:k]

    def plain_rate(self) -> float:
        return 1.0 / self.verify(1)

    def rates(self, key: DraftKey, cap: int) -> list[float]:
        """Expected tokens per second drafting 0..cap tokens (0: plain, with GAIN_MARGIN to beat)."""
        alphas = self.alphas(key.estimates, cap)
        rates = [GAIN_MARGIN * self.plain_rate()]
        for k in range(1, cap + 1):
            rates.append(expected_tokens(alphas, k) / (self.draft(key.drafter, k) + self.verify(k + 1)))
        return rates

    def best_length(self, key: DraftKey, cap: int) -> int:
        """The k in [0, cap] with the most expected tokens per second."""
        rates = self.rates(key, cap)
        best = max(range(cap + 1), key=rates.__getitem__)
        if best == 0:
            return 0
        return max(k for k in range(1, cap + 1) if rates[k] >= rates[best] * (1 - FLAT_TOLERANCE))

    def pays(self, key: DraftKey, path_p: float, n: int, paid: int, cap: int, rate: float) -> bool:
        """Whether verifying draft tokens n..m pays for some m <= cap: token n is accepted (with all
        before it) with probability path_p, later ones as the per-position estimates say (runs of
        acceptance make later positions surer than a token's own confidence tells), and tokens
        past `paid` must still be drafted, each pass at what a pass that deep costs."""
        return self.worth(key, path_p, n, paid, cap, rate, charged=True) > 0

    def worth(
        self, key: DraftKey, path_p: float, n: int, paid: int, cap: int, rate: float, charged: bool = False
    ) -> float:
        """Seconds of this generation's time that verifying draft tokens n..m saves (the tokens it
        expects at `rate`, less what the wider verification costs, and if `charged` less the draft
        passes it still needs) for each draft pass it still needs (tokens past `paid`), at the
        best m <= cap (`pays` explains the odds); inf where it saves anything without a pass.
        Charged, it stops looking once one m saves anything."""
        alphas = self.alphas(key.estimates, cap)
        base, drafted = self.verify(n), self.draft(key.drafter, paid) if charged else 0.0
        best, gain, p = -math.inf, 0.0, path_p
        for m in range(n, cap + 1):
            gain += p
            net = gain / rate - (self.verify(m + 1) - base)
            if m <= paid and net > 0:
                return math.inf
            if m > paid:
                if charged:
                    net -= self.draft(key.drafter, m) - drafted
                best = max(best, net / (m - paid))
                if charged and best > 0:
                    return best
            p *= alphas[m] if m < cap else 0.0
        return best
