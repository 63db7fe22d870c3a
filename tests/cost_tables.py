"""Simulated costs for tests: a target pass of b tokens costs verify[b] (interpolated), a draft
call `call` plus `per_pass` for each draft-model pass."""

from __future__ import annotations

from localspec.bench.profiles import RecordedProfile
from localspec.engine.clock import SimulatedClock
from localspec.engine.costs import LiveCosts


def profile(verify: dict[int, float], per_pass: float, call: float = 0.0) -> RecordedProfile:
    return RecordedProfile("test", verify, {"draft-model": (call, per_pass), "ngram": (call, 0.0)})


def clock(verify: dict[int, float], per_pass: float, call: float = 0.0) -> SimulatedClock:
    return SimulatedClock(profile(verify, per_pass, call))


def live_costs(verify: dict[int, float], drafts: dict[str, float] | None = None) -> LiveCosts:
    """LiveCosts that have seen every width of `verify` (one-token pass first) and, per drafter,
    calls of one and of three passes at `drafts[name]` a pass."""
    costs = LiveCosts()
    for b in sorted(verify):
        for _ in range(2):  # a width's figure is set by its first two passes
            costs.observe_verify(b, verify[b])
    for name, per_pass in (drafts or {}).items():
        for passes in (1, 3, 1, 3):
            costs.observe_draft(name, passes, per_pass * passes)
    return costs
