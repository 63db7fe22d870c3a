"""Drafters in turn (drafters/chain.py): under auto a lookup's find gives way to a draft model that
promises more; at a fixed length the first find drafts, as llama.cpp's chain does."""

from __future__ import annotations

import numpy as np
from cost_tables import live_costs

from localspec.drafters.base import Budget, CatchUp, Draft, DraftKey
from localspec.drafters.chain import ChainDrafter
from localspec.engine.budgets import FixedBudget
from localspec.engine.controller import AutoController
from localspec.sampling.dist import SamplingParams

CPU_LIKE = {b: 1.0 + 0.3 * (b - 1) for b in (1, 2, 3, 4, 6, 8, 12, 16, 17)}
FOUND = DraftKey("suffix", lookup=True).of_kind("suffix-4")
MODEL = DraftKey("draft-model")


class Finds:
    """A lookup that always finds the same four tokens."""

    name, key = "suffix", DraftKey("suffix", lookup=True)

    def propose(self, context, budget: Budget, params, rng, grammar=None) -> Draft:
        return Draft([1, 2, 3, 4], key=FOUND) if budget.limit(FOUND) else Draft(key=FOUND)


class Drafts:
    """A draft model that drafts whatever it is allowed, and counts the calls."""

    name, key = "draft-model", MODEL

    def __init__(self) -> None:
        self.calls = 0

    def propose(self, context, budget: Budget, params, rng, grammar=None) -> Draft:
        self.calls += 1
        k = budget.limit(MODEL, calibrated=True)
        return Draft([9] * min(k, 3), key=MODEL, confidences=[0.99] * min(k, 3))


def settled(lookup_accepts: int, model_accepts: int) -> AutoController:
    """Past their trials, lookup's finds and the draft model's drafts of 4 tokens accepted as given."""
    ctl = AutoController(live_costs(CPU_LIKE, {"draft-model": 0.05, "suffix": 0.0}))
    for name in ("draft-model", "suffix"):
        ctl.gate(name).trial = 0
    for _ in range(40):
        ctl.update(FOUND, 4, lookup_accepts)
        ctl.update(MODEL, 4, model_accepts)
    return ctl


def propose(budget: Budget) -> tuple[Draft, Drafts]:
    model = Drafts()
    chain = ChainDrafter([Finds(), model])
    return chain.propose([5, 6, 7], budget, SamplingParams(temperature=0.0), np.random.default_rng(0)), model


def test_a_find_that_is_rarely_accepted_gives_way_to_a_good_draft_model():
    draft, model = propose(settled(lookup_accepts=2, model_accepts=4).plan(8))
    assert draft.key == MODEL and model.calls == 1


def test_a_find_that_is_accepted_drafts_and_the_draft_model_is_not_asked():
    draft, model = propose(settled(lookup_accepts=4, model_accepts=1).plan(8))
    assert draft.key == FOUND and draft.tokens == [1, 2, 3, 4] and model.calls == 0


def test_a_paused_draft_model_never_takes_a_finds_place():
    ctl = settled(lookup_accepts=2, model_accepts=4)  # the find would give way to it drafting
    ctl.gate("draft-model").benched, ctl.gate("draft-model").idle_steps = True, 0
    draft, model = propose(ctl.plan(8))
    assert draft.key == FOUND and model.calls == 0


def test_at_a_fixed_length_the_first_find_drafts():
    draft, model = propose(FixedBudget(8))
    assert draft.key == FOUND and model.calls == 0


def test_a_find_drafts_while_the_draft_model_waits_to_read():
    ctl = AutoController(live_costs({1: 1.0}, {"suffix": 0.0}))  # no wide pass timed here yet
    ctl.costs.observe_prompt(2000, 100.0, 100.0)
    ctl.gate("suffix").trial = 0
    for _ in range(40):
        ctl.update(FOUND, 4, 2)
        ctl.update(MODEL, 4, 4)
    budget = ctl.plan(8, 0, 128)
    assert budget.limit(MODEL, calibrated=True, catch_up=CatchUp(1000, 0.005)) == 0  # undecided: it waits
    draft, model = propose(ctl.plan(8, 0, 128))
    assert draft.key == FOUND and model.calls == 0  # the find drafts, and times a wide pass
