"""Fewer threads while the machine is busy.

llama.cpp's CPU threads meet at a barrier after every graph node, so when another process takes
one of the cores a pass waits for the thread that lost it: on a 2-core laptop running a build a
pass may take many times as long with 2 threads as alone, and about twice with 1. The governor
tries one thread fewer when a pass stalls (many times its estimate), when passes run much slower
than this count ran before (the machine got busy), or early on when other processes keep a core
busy; it keeps whichever count runs faster, judged on the target passes the engine times anyway
(each divided by its width's relative cost, so that passes of any width compare). While it runs
fewer than the user's count it tries one more now and then (less often after each try that
failed), so an idle machine gets its threads back, and at once where other processes' load, read
every PROBE_EVERY passes, has fallen since the last reading: after a long busy spell the waits
have grown to hundreds of passes, which an idle machine would run at the reduced count. A try of
more threads ends at its first pass that is slower than fewer ran: on a machine still busy a
probe costs one slow pass."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

STALL = 2.5  # a pass this many times slower than its estimate (or than the fewer threads ran) stalled
STALLS = 2  # stalled passes in a row before one thread fewer is tried
SLOWER = 1.5  # TRIAL passes in a row this much slower than the count's best stretch: the machine got busy
TRIAL = 6  # passes a thread count is judged on
MARGIN = 0.95  # more threads are kept only if this much faster: on a busy machine they are close
ABORT = 1.2  # a try of more threads ends at the first pass this much slower than fewer ran
# The pass after which other processes' load (measured since the models began loading) is looked at:
START = 1
# at once, since on a busy core every pass at the full count may stall (300 ms against 50 here)
BUSY_ELSEWHERE = 0.5  # cores other processes keep busy that make fewer threads worth a try
PROBE_EVERY = 24  # passes at a reduced count before one thread more is tried
MAX_BACKOFF = 16  # a failed try doubles the wait before the next, up to this many times PROBE_EVERY


@dataclass
class ThreadGovernor:
    most: int  # the user's count (by default the physical cores): never more
    apply: Callable[[int], None]  # sets the models' thread counts
    others: Callable[[], float | None] = lambda: None  # cores other processes use (None: unknown)
    current: int = 0
    # Count -> its last passes' normalised seconds
    recent: dict[int, list[float]] = field(default_factory=dict)
    best: dict[int, float] = field(default_factory=dict)  # count -> the fastest median of TRIAL passes it ran
    trying: int | None = None  # the count on trial, and the one to go back to
    back_to: int = 0
    left: int = 0  # passes left in the trial
    stalls: int = 0
    since: int = 0  # passes since the count last changed
    seen: int = 0  # passes observed
    backoff: int = 1
    crowded: bool = False  # whether other processes kept a core busy at the last reading

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
        """A target pass estimated at `estimate` seconds, `relative` times a one-token pass, took
        `seconds`."""
        unit = seconds / max(relative, 1e-9)
        times = self.recent.setdefault(self.current, [])
        times.append(unit)
        del times[:-TRIAL]
        self.since += 1
        self.seen += 1
        if self.trying is not None:
            self._judge(unit)
            return
        if len(times) == TRIAL:
            self.best[self.current] = min(
                self.best.get(self.current, float("inf")), self._median(self.current)
            )
        self.stalls = self.stalls + 1 if seconds > STALL * estimate else 0
        if self.current > 1 and (self.stalls >= STALLS or self._slowed() or self._crowded()):
            self._try(self.current - 1)
        elif self.current < self.most and (self._calmed() or self.since >= PROBE_EVERY * self.backoff):
            self._try(self.current + 1)

    def _slowed(self) -> bool:
        # Every pass of the window: the count it would be judged against is then the slow one.
        times = self.recent[self.current]
        return len(times) == TRIAL and min(times) > SLOWER * self.best[self.current]

    def _crowded(self) -> bool:
        if self.seen != START or self.current < self.most:
            return False
        return self._read_others()

    def _calmed(self) -> bool:
        """At a reduced count, every PROBE_EVERY passes: whether the others' load, busy at the
        last reading, has fallen (the machine is idle again)."""
        if self.since % PROBE_EVERY:
            return False
        was = self.crowded
        return not self._read_others() and was

    def _read_others(self) -> bool:
        busy = self.others()
        if busy is not None:  # unknown: what was read last stands
            self.crowded = busy >= BUSY_ELSEWHERE
        return self.crowded

    def _judge(self, unit: float) -> None:
        more = self.trying > self.back_to  # type: ignore[operator]
        self.left -= 1
        stalled = more and unit > ABORT * self._median(self.back_to)
        if not stalled and self.left > 0:
            return
        tried, before = self._median(self.current), self._median(self.back_to)
        keep = not stalled and (tried < MARGIN * before if more else tried < before)
        if more:
            self.backoff = 1 if keep else min(self.backoff * 2, MAX_BACKOFF)
        elif not keep:
            self.best[self.back_to] = before  # slower is the new normal: no new try until it slows again
        self.trying = None
        self._set(self.current if keep else self.back_to)
        self.since = 0
