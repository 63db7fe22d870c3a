"""Fewer threads while the machine is busy.

llama.cpp's CPU threads meet at a barrier after every graph node, so when another process takes
one of the cores a pass waits for the thread that lost it: on a 2-core laptop running a build, a
pass that took 0.1 s takes 2.6 s with 2 threads, and about 0.2 s with 1. A pass many times slower
than its estimate is that stall; the governor then tries one thread fewer and keeps whichever
count runs faster, judged on the target passes the engine times anyway (each divided by its
width's relative cost, so that passes of any width compare). While it runs fewer than the user's
count it tries one more now and then (less often after each try that failed), so an idle machine
gets its threads back. A try that meets a stall ends at once: a probe costs one slow pass."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

STALL = 2.5  # a pass this many times slower than its estimate (or than the fewer threads ran) stalled
STALLS = 2  # stalled passes in a row before one thread fewer is tried
TRIAL = 4  # passes a thread count is judged on
PROBE_EVERY = 24  # passes at a reduced count before one thread more is tried
MAX_BACKOFF = 16  # a failed try doubles the wait before the next, up to this many times PROBE_EVERY


@dataclass
class ThreadGovernor:
    most: int  # the user's count (by default the physical cores): never more
    apply: Callable[[int], None]  # sets the models' thread counts
    current: int = 0
    recent: dict[int, list[float]] = field(default_factory=dict)  # count -> its last passes' normalised seconds
    trying: int | None = None  # the count on trial, and the one to go back to
    back_to: int = 0
    left: int = 0  # passes left in the trial
    stalls: int = 0
    since: int = 0  # passes since the count last changed
    backoff: int = 1

    def __post_init__(self) -> None:
        self.current = self.current or self.most

    def _set(self, count: int) -> None:
        if count != self.current:
            self.current, self.since, self.stalls = count, 0, 0
            self.apply(count)

    def _try(self, count: int) -> None:
        self.trying, self.back_to, self.left = count, self.current, TRIAL
        self.recent[count] = []
        self._set(count)

    def _median(self, count: int) -> float:
        times = self.recent.get(count)
        return statistics.median(times) if times else float("inf")

    def observe(self, estimate: float, relative: float, seconds: float) -> None:
        """A target pass estimated at `estimate` seconds, `relative` times a one-token pass, took `seconds`."""
        unit = seconds / max(relative, 1e-9)
        times = self.recent.setdefault(self.current, [])
        times.append(unit)
        del times[:-TRIAL]
        self.since += 1
        if self.trying is not None:
            self._judge(unit)
        elif seconds > STALL * estimate and self.current > 1:
            self.stalls += 1
            if self.stalls >= STALLS:
                self._try(self.current - 1)
        else:
            self.stalls = 0
            if self.current < self.most and self.since >= PROBE_EVERY * self.backoff:
                self._try(self.current + 1)

    def _judge(self, unit: float) -> None:
        more = self.trying > self.back_to  # type: ignore[operator]
        self.left -= 1
        stalled = more and unit > STALL * self._median(self.back_to)
        if not stalled and self.left > 0:
            return
        keep = not stalled and self._median(self.current) < self._median(self.back_to)
        if more:
            self.backoff = 1 if keep else min(self.backoff * 2, MAX_BACKOFF)
        self.trying = None
        self._set(self.current if keep else self.back_to)
        self.since = 0
