"""Lanes drafting together (`serve --parallel`): whether a round of draft passes runs is the batch's
decision (backend/draft_rounds.py), each lane offering what the pass is worth to it, and a lane's
row confidence is computed where its pass ran (backend/draft_ask.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cost_tables import live_costs
from test_parallel import in_lanes, laned

from localspec.backend.confidence import top_token
from localspec.backend.draft_ask import DraftAsk, ScoredRows
from localspec.backend.draft_rounds import DraftRounds
from localspec.backend.lanes import lanes_of
from localspec.backend.lockstep import Lockstep
from localspec.drafters.base import DraftKey
from localspec.engine.controller import AutoController

MODEL = DraftKey("draft-model")
GPU_LIKE = {1: 1.0, 2: 1.01, 3: 1.02, 4: 1.03, 6: 1.05, 8: 1.07, 9: 1.08}


def test_a_round_runs_where_the_lanes_offers_cover_what_the_batch_emits_in_its_time():
    rounds = DraftRounds()
    assert rounds.takes([0.1, 0.1])  # nothing timed yet: it runs, and is timed
    rounds.add(tokens=40, seconds=0.1, offered=False)  # the batch: 400 tokens a second
    assert rounds.takes([0.1])  # no round of offered passes timed yet
    rounds.add(tokens=0, seconds=0.005, offered=True)  # a round of draft passes: 5 ms, worth 2 tokens
    threshold = rounds.draft_s * rounds.tokens / rounds.seconds
    assert 1.0 < threshold < 2.5
    assert not rounds.takes([0.6, 0.6])  # two lanes that would each gain 0.6 tokens: not worth it
    assert rounds.takes([0.6, 0.6, 0.6, 0.6])  # four of them: the same round pays
    assert rounds.takes([0.0, math.inf])  # a pass that must run (a catch-up): the others join it


def test_alone_a_token_is_offered_whatever_it_costs_or_not_at_all_and_shared_for_what_it_gains():
    ctl = AutoController(live_costs(GPU_LIKE, {"draft-model": 0.3}))
    for _ in range(20):
        ctl.update(MODEL, 4, 3)
    alone, shared = ctl.plan(8), ctl.plan(8, shared=True)
    for p in (0.95, 0.5, 0.2, 0.05):
        assert alone.offer(MODEL, p, 2) == (math.inf if alone.extend(MODEL, p, 2) else 0.0)
    # A likely next token pays for a draft pass alone; an unlikely one does not, but still gains
    # something, which other lanes drafting in the same round may make worth it
    assert alone.offer(MODEL, 0.95, 2) == math.inf and alone.offer(MODEL, 0.2, 2) == 0.0
    sure, unsure = shared.offer(MODEL, 0.95, 2), shared.offer(MODEL, 0.2, 2)
    assert 0 < unsure < sure < math.inf
    assert shared.offer(MODEL, 0.95, 8) == 0.0  # at the cap, nothing more
    assert shared.offer(MODEL, 0.0, 2) == 0.0  # a token sure to be rejected gains nothing


def test_a_round_the_offers_do_not_cover_is_declined_and_its_lanes_go_on_to_verify(tiny):
    with laned(tiny.target, 2) as target, laned(tiny.close, 2) as draft:
        lockstep = Lockstep()
        targets = lanes_of(target, 2, lockstep)
        drafts = lanes_of(draft, 2, lockstep, targets)
        lockstep.draft_rounds = DraftRounds(tokens=100.0, seconds=1.0, draft_s=0.05)  # 5 tokens a round
        got: dict[str, object] = {}

        def lane(i: int, offer: float) -> None:
            got[f"draft{i}"] = drafts[i].decode([5 + i], all_logits=False, ask=DraftAsk(offer))
            got[f"verify{i}"] = targets[i].decode([4, 5 + i], all_logits=True)

        in_lanes(lockstep, lambda: lane(0, 1.0), lambda: lane(1, 2.0))  # 3 tokens offered: declined
        assert got["draft0"] is None and got["draft1"] is None
        assert drafts[0].cached == [] and drafts[1].cached == []
        assert got["verify0"] is not None and got["verify1"] is not None
        assert dict(lockstep.passes_of(target).lanes) == {2: 1}  # verified together, as before

        in_lanes(lockstep, lambda: lane(0, 1.0), lambda: lane(1, math.inf))  # one must run: both do
        assert got["draft0"] is not None and got["draft1"] is not None
        assert drafts[0].cached == [5] and drafts[1].cached == [6]
        assert dict(lockstep.passes_of(draft).lanes) == {2: 1}


def test_a_lanes_scored_row_carries_its_top_token_and_confidence(tiny):
    with laned(tiny.close, 2) as draft:
        lockstep = Lockstep()
        lane = lanes_of(draft, 2, lockstep)[0]
        got: dict[str, np.ndarray] = {}

        def generation() -> None:
            got["plain"] = np.array(lane.decode([1, 2, 3], all_logits=False))
            got["scored"] = lane.decode([4], all_logits=False, ask=DraftAsk(scored=True))

        in_lanes(lockstep, generation)
        assert not isinstance(got["plain"], ScoredRows)
        scored = got["scored"]
        assert isinstance(scored, ScoredRows)
        token, confidence = scored.top
        assert (token, confidence) == pytest.approx(top_token(np.asarray(scored)[-1]))
        assert 0 < confidence <= 1


def test_tokens_emitted_before_a_prompts_round_count_in_the_next_tallied_one():
    lockstep = Lockstep()
    lockstep.emitted(5)
    lockstep._tally(2, reading=True, offered=False)  # a request's prompt read: no way's time
    lockstep._tally(2, reading=False, offered=False)
    assert lockstep.draft_rounds.tokens == 5
