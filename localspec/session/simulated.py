"""`serve --cost-profile`: a loaded server's engines and passes charged as a cost profile says they
would cost on another machine (a GPU's, where a pass of several requests' tokens costs about one
token's), so that what its decisions do there can be measured here: their own work (Python between
passes) still counts at its real cost, as `bench --cost-profile` counts it."""

from __future__ import annotations

from collections.abc import Callable

from localspec.engine.clock import CostProfile, SimulatedClock
from localspec.session.loader import Loaded


def simulate(loaded: Loaded, profile: CostProfile) -> None:
    """Charge `loaded`'s passes by `profile` from now on. The thread governor is off: it would
    choose threads by real time."""
    if loaded.lockstep is not None:
        loaded.lockstep.profile = profile
        for engine in loaded.lanes:
            lanes = [engine.target, getattr(engine.target, "partner", None)]
            engine.clock = SimulatedClock(
                profile, inside=_parked([lane for lane in lanes if lane is not None])
            )
    models = [m for m in (loaded.target, loaded.draft, loaded.target.head) if m is not None]
    loaded.engine.clock = SimulatedClock(profile, inside=lambda: sum(m.busy_s for m in models))
    loaded.engine.governor = None


def _parked(lanes: list) -> Callable[[], float]:
    """A lane engine's time inside llama.cpp: its thread's waits for its passes (its draft's too)."""
    return lambda: sum(lane.parked_s for lane in lanes)


def simulated_seconds(loaded: Loaded) -> float:
    """Seconds the server has generated for, as the profile's machine would count them."""
    if loaded.lockstep is not None:
        return loaded.lockstep.busy_s
    clock = loaded.engine.clock
    return clock.t if isinstance(clock, SimulatedClock) else 0.0
