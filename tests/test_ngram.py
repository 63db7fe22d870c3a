import numpy as np

from localspec.drafters.base import DraftSettings
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.budgets import FixedBudget
from localspec.sampling.dist import SamplingParams

GREEDY = SamplingParams(temperature=0.0)


def lookup(n_min: int, n_max: int) -> NgramDrafter:
    d = NgramDrafter()
    d.begin([], DraftSettings(lookup_min=n_min, lookup_max=n_max))
    return d


def propose(d: NgramDrafter, ctx: list[int], k: int) -> list[int]:
    return d.propose(ctx, FixedBudget(k), GREEDY, np.random.default_rng(0)).tokens


def test_longest_match_wins():
    d = lookup(1, 3)
    # "2 3" -> 7 earlier, but the longer "1 2 3" -> 9 exists: the longer match wins.
    ctx = [1, 2, 3, 9, 0, 5, 2, 3, 7, 1, 2, 3]
    assert propose(d, ctx, 1) == [9]


def test_most_recent_occurrence_wins():
    d = lookup(2, 2)
    ctx = [4, 5, 1, 4, 5, 2, 4, 5]
    assert propose(d, ctx, 1) == [2]


def test_proposal_stops_at_end_of_history():
    d = lookup(2, 2)
    ctx = [1, 2, 3, 4, 1, 2]
    assert propose(d, ctx, 10) == [3, 4, 1, 2]


def test_max_tokens_bounds_proposal():
    d = lookup(2, 2)
    assert propose(d, [1, 2, 3, 4, 5, 1, 2], 2) == [3, 4]


def test_min_bound_no_match_shorter_than_min():
    d = lookup(3, 4)
    assert propose(d, [7, 1, 2, 9, 1, 2], 3) == []  # only a 2-gram repeats


def test_max_bound_no_longer_than_max():
    d = lookup(1, 2)
    # a 3-gram "1 2 3" would point at 8, but n is capped at 2: "2 3" most recently -> 6
    ctx = [1, 2, 3, 8, 2, 3, 6, 1, 2, 3]
    assert propose(d, ctx, 1) == [6]


def test_index_is_incremental_and_resets_on_new_context():
    d = lookup(2, 2)
    ctx = [1, 2, 3]
    d.begin(ctx, DraftSettings(lookup_min=2, lookup_max=2))
    assert propose(d, ctx, 2) == []
    ctx += [1, 2]
    assert propose(d, ctx, 2) == [3, 1]
    assert propose(d, [5, 6, 5], 2) == []  # not a continuation: rebuilt from scratch
    assert propose(d, [5, 6, 5, 6], 2) == [5, 6]


def test_zero_budget_proposes_nothing_but_keeps_indexing():
    d = lookup(2, 2)
    assert propose(d, [1, 2, 3, 1], 0) == []
    assert propose(d, [1, 2, 3, 1, 2], 3) == [3, 1, 2]
