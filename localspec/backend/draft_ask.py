"""What a drafter's pass asks of the model that runs it, beyond its tokens. A model of its own runs
every pass as asked and leaves the rest to the drafter; a server's lane (backend/lanes.py) shares
its passes with other requests', whose batch may decline a pass that is not worth its round
(backend/draft_rounds.py), and has its row's confidence computed on the lockstep's thread while
every lane waits: on the lanes' own threads, beside each other's Python, the same numpy took
0.4 ms a row where alone it takes 0.07 (benchmarks/RESULTS.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DraftAsk:
    offer: float = math.inf  # tokens the pass is expected to gain its generation; inf: it must run
    scored: bool = False  # its last row's top token and that token's probability wanted (ScoredRows)


ALWAYS = DraftAsk()


class ScoredRows(np.ndarray):
    """A pass's rows with their last row's top token and its probability under softmax (`top`, as
    backend/confidence.py's top_token gives them), computed where the pass ran."""

    top: tuple[int, float]

    @staticmethod
    def of(rows: np.ndarray, top: tuple[int, float]) -> ScoredRows:
        out = rows.view(ScoredRows)
        out.top = top
        return out
