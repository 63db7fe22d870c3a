"""The engine's clock: what a step's passes cost, as measured or as a cost profile says.

The engine times every draft call and every verification itself and hands the measurement to the
clock, which answers what to charge. The wall clock charges what was measured (and can keep a
record of it for `bench --record-costs`); a simulated clock charges what a cost profile says a pass
of that size costs and keeps its own time, so real models (real logits, real acceptance) can be
replayed as if they ran on another machine: decisions and tokens/s under a GPU's costs, measured
on a CPU, deterministically."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def begin(self) -> None:
        """A generation's steps start (its prompt is evaluated)."""

    def prompt(self, tokens: int, measured: float) -> float:
        """Seconds to charge for evaluating `tokens` prompt tokens."""

    def read(self, source: str, tokens: int, measured: float) -> float:
        """Seconds to charge for drafter `source` reading (a part of) a prompt of `tokens` tokens."""

    def verify(self, batch: int, context: int, measured: float) -> float:
        """Seconds to charge for a target pass over `batch` tokens after `context` and its verification."""

    def draft(self, source: str, passes: int, measured: float) -> float:
        """Seconds to charge for a call to drafter `source` that ran `passes` draft-model passes."""

    def first_pass(self, source: str, measured: float) -> float:
        """Of a call already charged, the seconds of its first draft-model pass (nothing charged)."""

    def later_passes(self, measured: list[float]) -> list[float]:
        """Of a call already charged, its later passes' seconds as timed apart, where they tell how
        the charge splits (nothing charged); none where the clock charges them alike."""


@dataclass
class WallClock:
    """Real time. `record`, when given, collects every verification and draft call."""

    record: dict | None = None

    def now(self) -> float:
        return time.perf_counter()

    def begin(self) -> None:
        pass

    def prompt(self, tokens: int, measured: float) -> float:
        return measured

    def read(self, source: str, tokens: int, measured: float) -> float:
        return measured

    def verify(self, batch: int, context: int, measured: float) -> float:
        if self.record is not None:
            self.record.setdefault("verify", []).append([batch, context, round(measured, 7)])
        return measured

    def draft(self, source: str, passes: int, measured: float) -> float:
        if self.record is not None:
            self.record.setdefault("draft", {}).setdefault(source, []).append([passes, round(measured, 7)])
        return measured

    def first_pass(self, source: str, measured: float) -> float:
        return measured

    def later_passes(self, measured: list[float]) -> list[float]:
        return measured


class CostProfile(Protocol):
    """Seconds a pass costs on some machine, possibly changing with time (`at`: simulated seconds
    since the generation's first step, so that modes compared on the same prompt meet the same
    swings)."""

    name: str

    def verify(self, batch: int, context: int, at: float) -> float: ...

    def draft(self, source: str, passes: int, at: float) -> float: ...


@dataclass
class SimulatedClock:
    """With `inside` (the real seconds spent in llama.cpp so far), the real time spent outside it
    during a generation is charged as well: on a simulated GPU, where a pass takes milliseconds,
    the engine's own work per token is what decides. Without it (the tests) the clock is the
    profile's alone, and deterministic."""

    profile: CostProfile
    t: float = 0.0
    origin: float = 0.0  # when the current generation began
    inside: Callable[[], float] | None = None
    _marks: tuple[float, float] = (0.0, 0.0)  # real time and time inside llama.cpp when last charged

    def _outside(self) -> float:
        if self.inside is None:
            return 0.0
        real, inside = time.perf_counter(), self.inside()
        spent = (real - self._marks[0]) - (inside - self._marks[1])
        self._marks = (real, inside)
        return max(spent, 0.0)

    def now(self) -> float:
        self.t += self._outside()
        return self.t

    def begin(self) -> None:
        self._outside()
        self.origin = self.t

    def _charge(self, seconds: float) -> float:
        seconds += self._outside()
        self.t += seconds
        return seconds

    def prompt(self, tokens: int, measured: float) -> float:
        self._outside()  # rendering and tokenizing a prompt is no part of a step
        return self._charge(self.profile.verify(tokens, 0, self.t - self.origin) if tokens else 0.0)

    def read(self, source: str, tokens: int, measured: float) -> float:
        """A draft's reading, as the profile's target pass that wide scaled to a draft pass."""
        at = self.t - self.origin
        if not tokens:
            return self._charge(0.0)
        return self._charge(
            self.profile.verify(tokens, 0, at)
            / self.profile.verify(1, 0, at)
            * self.profile.draft(source, 1, at)
        )

    def verify(self, batch: int, context: int, measured: float) -> float:
        return self._charge(self.profile.verify(batch, context, self.t - self.origin))

    def draft(self, source: str, passes: int, measured: float) -> float:
        return self._charge(self.profile.draft(source, passes, self.t - self.origin))

    def first_pass(self, source: str, measured: float) -> float:
        return self.profile.draft(source, 1, self.t - self.origin)

    def later_passes(self, measured: list[float]) -> list[float]:
        return []  # a profile prices every later pass alike: the wall's split is no part of it


@dataclass(frozen=True)
class GpuProfile:
    """A GPU: a target pass of b tokens costs a + e*b with e << a (the weights are read once per
    pass whatever b is), a draft pass a/r, and every call a fixed overhead (Python, kernel launches)."""

    ratio: float = 6.0  # r: how much cheaper a draft pass is than a target pass
    a: float = 8e-3
    e: float = 4e-5
    overhead: float = 4e-4
    per_context: float = 2e-8  # attention: per token of context and batch token

    @property
    def name(self) -> str:
        return f"gpu:{self.ratio:g}"

    def verify(self, batch: int, context: int, at: float) -> float:
        return self.overhead + self.a + batch * (self.e + context * self.per_context)

    def draft(self, source: str, passes: int, at: float) -> float:
        return self.overhead / 2 + passes * (self.a / self.ratio + self.overhead)


@dataclass(frozen=True)
class DriftProfile:
    """Another profile whose target and draft costs swing by +-amplitude, out of step with each
    other (a busy core, thermal throttling, another process coming and going), a few times a run."""

    base: CostProfile
    amplitude: float = 0.3
    period: float = 40.0  # one-token target passes per swing of the target's costs

    @property
    def name(self) -> str:
        return f"drift:{self.base.name}"

    def _swing(self, at: float, periods: float, phase: float = 0.0) -> float:
        seconds = periods * self.base.verify(1, 0, 0.0)
        return 1.0 + self.amplitude * math.sin(2 * math.pi * (at / seconds + phase))

    def verify(self, batch: int, context: int, at: float) -> float:
        return self.base.verify(batch, context, at) * self._swing(at, self.period)

    def draft(self, source: str, passes: int, at: float) -> float:
        return self.base.draft(source, passes, at) * self._swing(at, self.period * 1.6, 0.3)
