"""What a drafter asks each step: how far it may draft, and whether each further token pays. A fixed
budget answers from --draft-max alone; an auto budget asks the controller (engine/controller.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from localspec.drafters.base import CatchUp, Draft, DraftKey
from localspec.engine.estimates import SourceEstimates
from localspec.engine.pricing import StepPrices


class Judge(Protocol):
    """What an auto budget asks (engine/controller.py's AutoController)."""

    def limit(
        self, key: DraftKey, cap: int, calibrated: bool, catch_up: CatchUp | None = None
    ) -> tuple[int, int]: ...

    def estimates(self, name: str) -> SourceEstimates: ...

    def prefers(self, found: DraftKey, length: int, other: DraftKey, cap: int) -> bool: ...

    def rate(self) -> float: ...


@dataclass
class FixedBudget:
    cap: int
    floor: int = 0
    asked: DraftKey | None = None  # a fixed length is nobody's verdict to record
    calibrates: bool = False

    def limit(self, key: DraftKey, calibrated: bool = False, catch_up: CatchUp | None = None) -> int:
        return self.cap

    def acceptance(self, key: DraftKey, confidence: float) -> float:
        return confidence

    def prefers(self, found: Draft, other: DraftKey) -> bool:
        return True  # llama.cpp's chain: the first drafter that finds anything drafts

    def keep(self, key: DraftKey, path_p: float, n: int) -> bool:
        return n <= self.cap

    def extend(self, key: DraftKey, path_p: float, n: int) -> bool:
        return n < self.cap

    def offer(self, key: DraftKey, path_p: float, n: int) -> float:
        return math.inf if n < self.cap else 0.0


@dataclass
class AutoBudget:
    controller: Judge
    prices: StepPrices  # the step's costs and estimates, looked up once (pricing.py)
    cap: int
    floor: int = 0  # --draft-min; raised for a step on trial or probing
    asked: DraftKey | None = None  # the drafter let draft this step, last asked
    calibrates: bool = True
    shared: bool = False  # its draft passes run in rounds with other generations' (offer)
    _rate_now: float | None = None

    def _rate(self) -> float:
        if self._rate_now is None:
            self._rate_now = self.controller.rate()
        return self._rate_now

    def limit(self, key: DraftKey, calibrated: bool = False, catch_up: CatchUp | None = None) -> int:
        k, floor = self.controller.limit(key, self.cap, calibrated, catch_up)
        if k:
            self.asked = key
            self.floor = max(self.floor, floor)
            return max(k, self.floor)
        return 0

    def acceptance(self, key: DraftKey, confidence: float) -> float:
        return self.controller.estimates(key.estimates).calibrated(confidence)

    def prefers(self, found: Draft, other: DraftKey) -> bool:
        return self.controller.prefers(found.key, len(found.tokens), other, self.cap)

    def keep(self, key: DraftKey, path_p: float, n: int) -> bool:
        if n <= self.floor:
            return True
        return n <= self.cap and self.prices.pays(key, path_p, n, n, self.cap, self._rate())

    def extend(self, key: DraftKey, path_p: float, n: int) -> bool:
        if n >= self.cap:
            return False
        if n < self.floor:
            return True
        return self.prices.pays(key, self._next(key, path_p, n), n + 1, n, self.cap, self._rate())

    def offer(self, key: DraftKey, path_p: float, n: int) -> float:
        """Alone, inf where `extend` says a further pass pays, else 0. Shared (a server's requests
        drafting together: backend/lockstep.py), the tokens this generation expects to gain by
        the pass, and the batch decides whether the round runs: a round of draft passes costs
        about the same however many requests draft in it, so a request whose next token would not
        pay for a round alone drafts on where others do."""
        if not self.shared or n >= self.cap or n < self.floor:
            return math.inf if self.extend(key, path_p, n) else 0.0
        rate = self._rate()
        worth = self.prices.worth(key, self._next(key, path_p, n), n + 1, n, self.cap, rate)
        return max(worth, 0.0) * rate

    def _next(self, key: DraftKey, path_p: float, n: int) -> float:
        """The path probability of the (n+1)-th token, before its confidence is known."""
        return path_p * self.prices.alphas(key.estimates, n + 1)[n]
