import random

import pytest

from localspec.engine.controller import FIRST_PROBE_AFTER, PROBE_CATCH_UP, AutoController, FixedBudget
from localspec.engine.costs import MAX_CATCH_UP
from localspec.engine.estimates import expected_tokens
from localspec.engine.costs import DecodeCosts


def cpu_like() -> DecodeCosts:
    # A target pass over b tokens costs 1 + 0.3 (b - 1) single-token passes; draft tokens cost 1/6.
    return DecodeCosts({b: 1.0 + 0.3 * (b - 1) for b in (1, 2, 3, 4, 6, 8, 12, 16)}, draft_token={"draft-model": 1 / 6, "ngram": 0.0})


def test_expected_tokens():
    assert expected_tokens([0.0] * 5, 5) == 1.0
    assert expected_tokens([1.0] * 5, 5) == 6.0
    assert expected_tokens([0.5, 0.5], 2) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_tokens([0.5, 1.0, 0.2], 3) == pytest.approx(1 + 0.5 + 0.5 + 0.1)


def test_acceptance_is_estimated_per_position():
    ctl = AutoController(cpu_like(), draft_max=8)
    # Drafts that survive their first token run long: position 0 is unsure, later ones are safe.
    for _ in range(30):
        ctl.update("draft-model", 6, 0)
        ctl.update("draft-model", 6, 6)
    alphas = ctl.estimates("draft-model").alphas(6)
    assert alphas[0] == pytest.approx(0.5, abs=0.08)
    assert alphas[1] > 0.8 and all(a > 0.9 for a in alphas[2:])


def test_costs_interpolate_and_extrapolate():
    c = DecodeCosts({1: 1.0, 4: 2.5, 8: 4.5})
    assert c.verify(1) == 1.0 and c.verify(4) == 2.5
    assert c.verify(2) == pytest.approx(1.5)
    assert c.verify(10) == pytest.approx(5.5)


def test_costs_grow_with_context():
    c = DecodeCosts({1: 1.0, 8: 2.0}, {1: 1.5, 8: 4.0}, far_context=500)
    assert c.verify(8, 0) == 2.0 and c.verify(8, 500) == 4.0
    assert c.verify(8, 250) == pytest.approx(3.0)
    assert c.verify(8, 1000) == pytest.approx(6.0)


def test_long_context_shortens_drafts():
    c = DecodeCosts({1: 1.0, 2: 1.1, 4: 1.3, 8: 1.7}, {1: 1.2, 2: 2.0, 4: 2.6, 8: 3.8}, far_context=512, draft_token={"ngram": 0.0})
    ctl = AutoController(c, draft_max=7)
    for _ in range(20):
        ctl.update("ngram", 4, 1)
    assert ctl.best_length("ngram", 7, context=0) > ctl.best_length("ngram", 7, context=1024)


def test_high_acceptance_drafts_long_low_acceptance_stops():
    ctl = AutoController(cpu_like(), draft_max=16)
    for _ in range(30):
        ctl.update("draft-model", 8, 8)
    assert ctl.best_length("draft-model", 16) >= 8
    for _ in range(30):
        ctl.update("draft-model", 4, 0)
    assert ctl.best_length("draft-model", 16) == 0


def test_free_drafts_are_worth_more_than_costly_ones():
    costs = DecodeCosts({b: 1.0 + 0.1 * (b - 1) for b in (1, 2, 4, 8, 16)}, draft_token={"draft-model": 0.3, "ngram": 0.0})
    ctl = AutoController(costs, draft_max=16)
    rng = random.Random(0)
    for _ in range(60):
        accepted = next(i for i in range(9) if i == 8 or rng.random() > 0.8)  # per-token acceptance 0.8
        for source in ("ngram", "draft-model"):
            ctl.update(source, 8, accepted)
    assert ctl.best_length("ngram", 16) > ctl.best_length("draft-model", 16) > 0


def test_cheap_verification_drafts_to_the_cap():
    gpu_like = DecodeCosts({1: 1.0, 16: 1.05}, draft_token={"draft-model": 0.02})
    ctl = AutoController(gpu_like, draft_max=12)
    for _ in range(10):
        ctl.update("draft-model", 6, 6)
    assert ctl.best_length("draft-model", 12) == 12
    assert ctl.best_length("draft-model", 5) == 5  # never past the step's cap


def test_probes_after_idle_steps_and_backs_off():
    ctl = AutoController(cpu_like(), draft_max=8)
    for _ in range(30):
        ctl.update("ngram", 4, 0)
    budget = ctl.budget(8)
    limits = [budget.limit("ngram") for _ in range(FIRST_PROBE_AFTER)]
    assert limits[:-1] == [0] * (FIRST_PROBE_AFTER - 1) and limits[-1] == 1
    ctl.update("ngram", 1, 0)  # failed probe: the next one comes later
    ctl.record_step(1, 1)
    limits = [budget.limit("ngram") for _ in range(2 * FIRST_PROBE_AFTER)]
    assert limits.count(1) == 1 and limits[-1] == 1


def test_decisions_depend_only_on_the_stream():
    """Two controllers fed the same stream (drafts, verdicts, confidences and the steps' token
    counts) decide the same, and the decisions respond to the stream: a stream of rejections
    changes them."""

    def decisions(stream) -> list[tuple[int, int, bool]]:
        ctl = AutoController(cpu_like(), 8)
        seq = []
        for drafted, acc in stream:
            budget = ctl.budget(8, context=100)
            limit = budget.limit("draft-model", calibrated=True)
            seq.append((limit, budget.catch_up("draft-model"), budget.keep("draft-model", 0.7, 2)))
            judged = [(0.9, i < acc) for i in range(min(acc + 1, drafted))]
            if limit:
                ctl.update("draft-model", drafted, acc, judged)
            ctl.record_step(drafted if limit else 0, (acc if limit else 0) + 1, 100)
        return seq

    good = [(4, 4), (4, 3), (2, 2), (5, 4)] * 6
    bad = [(4, 0), (4, 0), (2, 0), (5, 0)] * 6
    assert decisions(good) == decisions(good)
    assert decisions(bad) == decisions(bad)
    assert decisions(good) != decisions(bad)
    assert any(limit == 0 for limit, _, _ in decisions(bad))  # rejections alone stop the asking


def test_fixed_budget_drafts_to_its_cap_and_never_below_its_floor():
    fixed = FixedBudget(5, floor=2)
    assert fixed.limit("anything") == 5 and fixed.limit("draft-model", calibrated=True) == 5
    assert fixed.floor == 2
    assert fixed.keep("draft-model", 0.0, 5) and not fixed.keep("draft-model", 1.0, 6)


def test_no_probing_when_even_perfect_drafts_cannot_pay():
    # A draft nearly as costly as the target (a model and its own light quant): never worth it.
    costly = DecodeCosts({1: 1.0, 2: 1.4, 4: 1.6, 9: 2.4}, draft_token={"draft-model": 0.7}, draft_catch_up={"draft-model": 0.5})
    ctl = AutoController(costly, draft_max=8)
    budget = ctl.budget(8)
    assert all(budget.limit("draft-model") == 0 for _ in range(200))


def test_confidence_is_calibrated_against_what_was_accepted():
    ctl = AutoController(cpu_like(), draft_max=8)
    budget = ctl.budget(8)
    assert budget.acceptance("draft-model", 0.9) == pytest.approx(0.9)  # no evidence yet: taken at its word
    for _ in range(40):
        # An over-confident draft: its 0.9-sure tokens are right half the time, its 0.999-sure ones always.
        ctl.update("draft-model", 4, 2, [(0.999, True), (0.9, True), (0.9, False)])
    assert budget.acceptance("draft-model", 0.9) == pytest.approx(0.5, abs=0.05)
    assert budget.acceptance("draft-model", 0.999) > 0.95


def test_sure_drafts_run_long_and_unsure_ones_stop():
    ctl = AutoController(cpu_like(), draft_max=16)
    for _ in range(30):
        ctl.update("draft-model", 8, 8)
    budget = ctl.budget(16)
    assert budget.limit("draft-model", calibrated=True) == 16  # drafting pays: the tokens decide how far
    assert budget.keep("draft-model", 0.99, 12) and budget.extend("draft-model", 0.99, 12)
    assert budget.keep("draft-model", 0.8, 12) and not budget.extend("draft-model", 0.8, 12)
    assert not budget.keep("draft-model", 0.05, 3)  # a long shot is not worth its verification
    assert not budget.extend("draft-model", 0.9, 16)  # never past the cap
    # A wider pass costs less where verification is cheap: the same long shot is worth it there.
    gpu = AutoController(DecodeCosts({1: 1.0, 32: 1.02}, draft_token={"draft-model": 0.01}), draft_max=16)
    for _ in range(30):
        gpu.update("draft-model", 8, 8)
    assert gpu.budget(16).keep("draft-model", 0.05, 3)


def test_a_draft_that_never_pays_stops_being_asked_and_probes_cheaply():
    ctl = AutoController(cpu_like(), draft_max=8)
    asked = []
    for _ in range(80):
        budget = ctl.budget(8)
        k = budget.limit("draft-model", calibrated=True)
        asked.append(k > 0)
        if k:
            # Each time it drafts nothing worth verifying: the step paid a draft pass for one token.
            assert not budget.keep("draft-model", 0.01, 1)
            if len(asked) > 20:
                assert budget.catch_up("draft-model") == PROBE_CATCH_UP  # by now every ask is a probe
        ctl.record_step(0, 1)
    assert asked[0] and sum(asked) < 10


def test_a_good_draft_is_asked_again_soon_after_a_bad_patch():
    ctl = AutoController(cpu_like(), draft_max=8)
    for _ in range(12):  # a bad patch: asked steps win nothing
        if ctl.budget(8).limit("draft-model", calibrated=True):
            ctl.update("draft-model", 4, 0)
        ctl.record_step(4, 1)
    assert ctl.budget(8).limit("draft-model", calibrated=True) == 0
    back = None
    for step in range(40):  # then every draft is right
        budget = ctl.budget(8)
        k = budget.limit("draft-model", calibrated=True)
        if k:
            ctl.update("draft-model", k, k)
            ctl.record_step(k, k + 1)
            if budget.catch_up("draft-model") == MAX_CATCH_UP:
                back = step
                break
        else:
            ctl.record_step(0, 1)
    assert back is not None and back < 20


def test_fixed_budget_keeps_everything_up_to_its_cap():
    fixed = FixedBudget(4)
    assert fixed.acceptance("draft-model", 0.3) == 0.3
    assert fixed.keep("draft-model", 0.0, 4) and not fixed.keep("draft-model", 1.0, 5)
    assert fixed.extend("draft-model", 0.0, 3) and not fixed.extend("draft-model", 1.0, 4)
