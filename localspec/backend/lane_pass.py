"""What a lane (backend/lanes.py) asks of the lockstep that runs its passes (backend/lockstep.py): a
pass, its tokens and what comes back, and how passes pack into one llama_decode each."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from localspec.backend.draft_ask import ALWAYS, DraftAsk
from localspec.backend.lane_costs import DraftShare
from localspec.backend.model import Model


class Lane(Protocol):
    """What of a lane (backend/lanes.py) its passes read and tally."""

    base: Model  # the model whose sequence it is
    seq: int
    drafts: bool  # a draft model's lane: its passes run first
    share: DraftShare
    passes: int
    busy_s: float
    beside: int
    last: tuple[int, int, float]
    spread: bool


class PassCosts(Protocol):
    """What a cost profile (engine/clock.py's CostProfile) says passes cost on another machine."""

    def verify(self, batch: int, context: int, at: float) -> float: ...

    def draft(self, source: str, passes: int, at: float) -> float: ...


@dataclass(eq=False)
class Pass:
    lane: Lane
    tokens: Sequence[int]
    base: int  # the position of its first token
    every: bool  # rows for every token (else for the last only)
    rows: np.ndarray | None = None
    error: Exception | None = None
    done: bool = False
    call: Callable[[], None] | None = None  # not a pass: work on the lane's sequence (Lockstep.call)
    ask: DraftAsk = ALWAYS  # a draft pass's: what it is worth, whether its row is scored (draft_ask.py)
    declined: bool = False  # the batch did not run it
    top: tuple[int, float] | None = None  # its last row's top token and probability, if scored


def batches(passes: list[Pass], most: int) -> list[list[Pass]]:
    """Passes packed, in order, into batches of at most `most` tokens."""
    out: list[list[Pass]] = [[]]
    size = 0
    for p in passes:
        if out[-1] and size + len(p.tokens) > most:
            out.append([])
            size = 0
        out[-1].append(p)
        size += len(p.tokens)
    return out
