"""The auto controller's decisions, with injected costs."""

import random

import pytest
from cost_tables import live_costs

from localspec.drafters.base import Budget, DraftKey
from localspec.engine.budgets import FixedBudget
from localspec.engine.controller import (
    FIRST_PROBE_AFTER,
    LOOKUP_PROBE_WINS,
    MAX_PROBE_INTERVAL,
    PROBE_LENGTH,
    RECHECK_AFTER,
    REFRESH_STEPS,
    TRIAL_LENGTH,
    TRIAL_STEPS,
    AutoController,
)
from localspec.engine.estimates import expected_tokens

# A target pass over b tokens costs 1 + 0.3 (b - 1) one-token passes; a draft pass 1/6 of one.
CPU_LIKE = {b: 1.0 + 0.3 * (b - 1) for b in (1, 2, 3, 4, 6, 8, 12, 16, 17)}
GPU_LIKE = {1: 1.0, 2: 1.002, 17: 1.03, 33: 1.05}


MODEL = DraftKey("draft-model")
NGRAM = DraftKey("ngram", lookup=True)


def ngram(n: int) -> DraftKey:
    return NGRAM.of_kind(f"ngram-{n}")


_plans: dict[int, Budget] = {}


def plan(ctl: AutoController, cap: int, floor: int = 0) -> Budget:
    """A step's budget, as the engine asks for one; `record` credits the step to whom it let draft."""
    _plans[id(ctl)] = budget = ctl.plan(cap, floor)
    return budget


def record(ctl: AutoController, drafted: int, emitted: int, seconds: float) -> None:
    budget = _plans.pop(id(ctl), None)
    ctl.record_step(budget.asked if budget else None, drafted, emitted, seconds)


def settled(verify=CPU_LIKE, drafts=None) -> AutoController:
    """A controller that has timed these costs and whose drafters are past their trial."""
    ctl = AutoController(live_costs(verify, drafts if drafts is not None else {"draft-model": 1 / 6}))
    for name in ("draft-model", "ngram", "tree"):
        ctl.gate(name).trial = 0
    return ctl


def test_expected_tokens():
    assert expected_tokens([0.0] * 5, 5) == 1.0
    assert expected_tokens([1.0] * 5, 5) == 6.0
    assert expected_tokens([0.5, 0.5], 2) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_tokens([0.5, 1.0, 0.2], 3) == pytest.approx(1 + 0.5 + 0.5 + 0.1)


def test_acceptance_is_estimated_per_position():
    ctl = settled()
    # Drafts that survive their first token run long: position 0 is unsure, later ones are safe.
    for _ in range(30):
        ctl.update(MODEL, 6, 0)
        ctl.update(MODEL, 6, 6)
    alphas = ctl.estimates("draft-model").alphas(6)
    assert alphas[0] == pytest.approx(0.5, abs=0.08)
    assert alphas[1] > 0.8 and all(a > 0.9 for a in alphas[2:])


def test_a_fresh_controller_times_the_target_alone_first_then_drafts_on_trial():
    ctl = AutoController()
    for seconds in (3.0, 1.0):  # nothing timed yet: plain steps, the first slowed by paging in the weights
        assert plan(ctl, 8).limit(MODEL, calibrated=True) == 0
        ctl.costs.observe_verify(1, seconds)
        record(ctl, 0, 1, seconds)
    assert ctl.costs.verify(1) == 1.0
    # Even with dear verification and no evidence, the first steps draft at least TRIAL_LENGTH tokens.
    for _ in range(TRIAL_STEPS):
        budget = plan(ctl, 8)
        assert budget.limit(MODEL, calibrated=True) == 8 and budget.floor == TRIAL_LENGTH
        assert budget.keep(MODEL, 0.01, TRIAL_LENGTH) and budget.extend(MODEL, 0.01, TRIAL_LENGTH - 1)
        record(ctl, TRIAL_LENGTH, 1, 3.0)
    assert plan(ctl, 8).floor == 0


def test_a_trial_that_beat_the_target_alone_outweighs_estimates_still_leaning_on_their_priors():
    """A draft pass at 0.55 of a target pass (a quant drafting for its upcast): after two trial
    steps the per-position estimates still sit near their prior, and promise no gain. Steps that
    beat the target alone keep it drafting; steps that did not bench it."""
    for emitted, benched in ((4, False), (2, True)):
        ctl = AutoController(live_costs(CPU_LIKE, {"draft-model": 0.55}))
        for _ in range(TRIAL_STEPS):
            budget = plan(ctl, 8)
            assert budget.limit(MODEL, calibrated=True) == 8
            ctl.update(MODEL, TRIAL_LENGTH, emitted - 1)
            record(ctl, TRIAL_LENGTH, emitted, 3 * 0.55 + CPU_LIKE[4])  # 4 tokens: 1.13 a pass; 2: 0.56
        assert ctl.best_length(MODEL, 8) == 0  # what the estimates alone say
        assert (plan(ctl, 8).limit(MODEL, calibrated=True) == 0) == benched
        assert any("estimated gain" in n for n in ctl.notes) == benched


def test_high_acceptance_drafts_long_low_acceptance_stops():
    ctl = settled()
    for _ in range(30):
        ctl.update(MODEL, 8, 8)
    assert ctl.best_length(MODEL, 16) >= 8
    for _ in range(30):
        ctl.update(MODEL, 4, 0)
    assert ctl.best_length(MODEL, 16) == 0


def test_lookup_that_pays_on_a_short_text_sits_out_where_a_long_context_makes_wide_passes_dear():
    ctl = settled({1: 1.0, 2: 1.15, 3: 1.3, 4: 1.45, 5: 1.6})
    for _ in range(30):
        ctl.update(ngram(3), 2, 1)  # 35-50% acceptance
        ctl.update(ngram(3), 2, 0)
    assert ctl.best_length(ngram(3), 4) > 0
    ctl.costs.at(3000)
    assert plan(ctl, 4).limit(ngram(3)) == 0  # a context length not timed yet: plain steps first
    for b, seconds in ((1, 1.5), (1, 1.5), (2, 2.1), (3, 2.85), (4, 3.5), (5, 4.0)):
        ctl.costs.observe_verify(b, seconds)
    assert ctl.best_length(ngram(3), 4) == 0
    ctl.costs.at(200)
    assert ctl.best_length(ngram(3), 4) > 0


def test_free_drafts_are_worth_more_than_costly_ones():
    ctl = settled({b: 1.0 + 0.1 * (b - 1) for b in (1, 2, 4, 8, 16, 17)}, {"draft-model": 0.3, "ngram": 0.0})
    rng = random.Random(0)
    for _ in range(60):
        accepted = next(i for i in range(9) if i == 8 or rng.random() > 0.8)  # per-token acceptance 0.8
        for key in (NGRAM, MODEL):
            ctl.update(key, 8, accepted)
    assert ctl.best_length(NGRAM, 16) > ctl.best_length(MODEL, 16) > 0


def test_cheap_verification_drafts_to_the_cap():
    ctl = settled(GPU_LIKE, {"draft-model": 0.02})
    for _ in range(10):
        ctl.update(MODEL, 6, 6)
    assert ctl.best_length(MODEL, 12) == 12
    assert ctl.best_length(MODEL, 5) == 5  # never past the step's cap


def test_the_same_draft_drafts_longer_where_verification_is_cheap():
    lengths = {}
    for name, verify in (("cpu", CPU_LIKE), ("gpu", GPU_LIKE)):
        ctl = settled(verify)
        rng = random.Random(0)
        for _ in range(60):
            ctl.update(MODEL, 16, next(i for i in range(17) if i == 16 or rng.random() > 0.85))
        lengths[name] = ctl.best_length(MODEL, 16)
    assert lengths["gpu"] > lengths["cpu"] > 0


def test_realized_throughput_benches_a_drafter_that_loses_and_probes_it_less_and_less():
    ctl = settled(GPU_LIKE, {"draft-model": 0.02})
    for _ in range(10):
        ctl.update(MODEL, 8, 8)  # the estimates promise a lot
    asked = []
    for step in range(200):
        budget = plan(ctl, 8)
        k = budget.limit(MODEL, calibrated=True)
        asked.append(k > 0)
        if k and step > 10:
            assert ctl.gate("draft-model").probing  # by now every ask is a probe
        # ...but every drafted step takes 3 one-token passes for one token: slower than the target alone.
        record(ctl, 4 if k else 0, 1, 3.0 if k else 1.0)
    assert asked[:3] == [True] * 3 and sum(asked) < 12
    gaps = [i for i, a in enumerate(asked) if a]
    assert gaps[-1] - gaps[-2] > gaps[-3] - gaps[-4] >= FIRST_PROBE_AFTER
    assert any("tok/s" in n for n in ctl.notes)  # it says why


def test_a_probe_that_wins_starts_a_new_trial():
    ctl = settled()
    for _ in range(30):
        ctl.update(MODEL, 4, 0)
    assert plan(ctl, 8).limit(MODEL, calibrated=True) == 0  # the estimates say it does not pay
    for _step in range(FIRST_PROBE_AFTER * 2):
        budget = plan(ctl, 8)
        if budget.limit(MODEL, calibrated=True):
            break
        record(ctl, 0, 1, 1.0)
    else:
        pytest.fail("never probed")
    ctl.update(MODEL, 8, 8)
    record(ctl, 8, 9, 2.0)  # the probe: 9 tokens in the time of 2
    budget = plan(ctl, 8)
    assert budget.limit(MODEL, calibrated=True) == 8 and budget.floor == TRIAL_LENGTH


def test_a_drafter_that_loses_again_after_each_winning_probe_is_probed_less_and_less():
    """A draft nearly as dear as its target wins a probe on a lucky run and loses the steps after:
    each relapse doubles the wait for the next probe; once its steps come out ahead, the wait
    starts over."""
    ctl = settled()
    gate = ctl.gate("draft-model")
    for _ in range(30):
        ctl.update(MODEL, 4, 0)  # the estimates say it does not pay
    ahead = False

    def step() -> str:
        if not plan(ctl, 8).limit(MODEL, calibrated=True):
            record(ctl, 0, 1, 1.0)
            return "idle"
        if gate.probing:
            record(ctl, 8, 9, 2.0)  # the probe: 9 tokens in the time of 2
            return "probe"
        record(ctl, 4, 5 if ahead else 1, 3.0)  # the trial and the steps after it
        return "drafted"

    probes = [i for i in range(300) if step() == "probe"]
    gaps = [b - a for a, b in zip(probes, probes[1:], strict=False)]
    # (up to MAX_PROBE_INTERVAL)
    assert len(gaps) >= 4 and gaps[0] < gaps[1] < gaps[2] and gaps == sorted(gaps)
    assert gate.probe_interval == MAX_PROBE_INTERVAL
    ahead = True
    while gate.benched:
        step()
    for _ in range(20):
        step()
    assert not gate.benched and gate.probe_interval == FIRST_PROBE_AFTER


def test_prompt_lookup_needs_two_winning_probes_in_a_row_for_a_new_trial():
    ctl = settled()
    for _ in range(30):
        ctl.update(ngram(3), 4, 0)
    plan(ctl, 4).limit(ngram(3))
    record(ctl, 0, 1, 1.0)
    ctl.gate("ngram").trial, ctl.gate("ngram").benched = 0, True

    def probe(won: bool) -> None:
        while not plan(ctl, 4).limit(ngram(3)):
            record(ctl, 0, 1, 1.0)
        assert ctl.gate("ngram").probing
        record(ctl, 2, 3 if won else 1, 1.3)

    probe(True)  # a match that happened to go on
    # Probes again at once
    assert ctl.gate("ngram").benched and ctl.gate("ngram").idle_steps == ctl.gate("ngram").probe_interval
    probe(False)
    assert ctl.gate("ngram").benched and ctl.gate("ngram").wins == 0
    for _ in range(LOOKUP_PROBE_WINS):
        probe(True)
    assert not ctl.gate("ngram").benched and ctl.gate("ngram").trial == TRIAL_STEPS


def test_a_plain_step_retimes_the_target_after_a_long_drafted_run():
    ctl = settled()
    for _ in range(30):
        ctl.update(MODEL, 8, 8)
    limits = []
    for _ in range(REFRESH_STEPS + 2):
        k = plan(ctl, 8).limit(MODEL, calibrated=True)
        limits.append(k)
        record(ctl, k, k + 1, 2.0 if k else 1.0)
    assert limits[REFRESH_STEPS] == 0 and limits[REFRESH_STEPS + 1] > 0 and 0 not in limits[:REFRESH_STEPS]


def test_a_generation_s_first_step_drafts_only_what_does_not_hold_its_first_token_back():
    """A settled controller drafts at once mid-answer, but a new generation's first step (a chat's
    next turn, a server's next request) drafts only what costs at most FIRST_TOKEN_SLACK of a
    one-token pass more: on a CPU nothing (a wider pass is dearer), nor a draft model that must
    first run its passes; on a GPU a lookup's find (a wide pass costs about a narrow one)."""
    cpu = settled(CPU_LIKE, {"draft-model": 1 / 6, "ngram": 0.001})
    gpu = settled(GPU_LIKE, {"draft-model": 0.3, "ngram": 0.001})
    for ctl in (cpu, gpu):
        for _ in range(30):
            ctl.update(MODEL, 8, 8)
            ctl.update(ngram(3), 8, 8)
    for ctl, key, opening in ((cpu, MODEL, 0), (cpu, ngram(3), 0), (gpu, MODEL, 0), (gpu, ngram(3), 8)):
        for _ in range(2):
            ctl.start()
            limits = []
            for _ in range(3):
                limits.append(k := plan(ctl, 8).limit(key, calibrated=key == MODEL))
                record(ctl, k, k + 1, 2.0 if k else 1.0)
            assert limits[0] == opening and limits[1] > 0 and limits[2] > 0, (key, limits)


def test_fixed_budget_drafts_to_its_cap_and_never_below_its_floor():
    fixed = FixedBudget(5, floor=2)
    assert fixed.limit(DraftKey("anything")) == 5 and fixed.limit(MODEL, calibrated=True) == 5
    assert fixed.floor == 2
    assert fixed.keep(MODEL, 0.0, 5) and not fixed.keep(MODEL, 1.0, 6)
    assert fixed.acceptance(MODEL, 0.3) == 0.3
    assert fixed.extend(MODEL, 0.0, 4) and not fixed.extend(MODEL, 1.0, 5)


def test_confidence_is_calibrated_against_what_was_accepted():
    ctl = settled()
    budget = plan(ctl, 8)
    assert budget.acceptance(MODEL, 0.9) == pytest.approx(0.9)  # no evidence yet: taken at its word
    for _ in range(40):
        # An over-confident draft: its 0.9-sure tokens are right half the time, its 0.999-sure ones always.
        ctl.update(MODEL, 4, 2, [(0.999, True), (0.9, True), (0.9, False)])
    assert budget.acceptance(MODEL, 0.9) == pytest.approx(0.5, abs=0.05)
    assert budget.acceptance(MODEL, 0.999) > 0.95


def test_sure_drafts_run_long_and_unsure_ones_stop():
    ctl = settled()
    for _ in range(30):
        ctl.update(MODEL, 8, 8)
    record(ctl, 8, 9, CPU_LIKE[8] + 8 / 6)  # decoding reaches what 8-token drafts give
    budget = plan(ctl, 16)
    assert budget.limit(MODEL, calibrated=True) == 16  # drafting pays: the tokens decide how far
    assert budget.keep(MODEL, 0.99, 12) and budget.extend(MODEL, 0.99, 12)
    assert not budget.keep(MODEL, 0.05, 3)  # a long shot is not worth its verification
    assert not budget.extend(MODEL, 0.99, 16)  # never past the cap
    # A wider pass costs less where verification is cheap: the same long shot is worth it there.
    gpu = settled(GPU_LIKE, {"draft-model": 0.01})
    for _ in range(30):
        gpu.update(MODEL, 8, 8)
    assert plan(gpu, 16).keep(MODEL, 0.05, 3)


def test_dear_passes_up_to_a_depth_do_not_price_the_cheap_ones_after_it():
    """Passes timed apart by depth (a chain of MTP heads: dear to the last head, cheap after it):
    a token past the dear ones is worth its cheap pass where one price for every later pass (the
    same calls' mean) says stop."""
    ctls = [settled(drafts={}), settled(drafts={})]
    later = [1.0, 1.0, 0.05, 0.05, 0.05]
    for _ in range(4):
        ctls[0].costs.observe_draft("draft-model", 6, 0.1 + sum(later), first=0.1, later=later)
        ctls[1].costs.observe_draft("draft-model", 6, 0.1 + sum(later), first=0.1)
    for ctl in ctls:
        for _ in range(30):
            ctl.update(MODEL, 8, 8)
    by_depth, uniform = (plan(ctl, 16) for ctl in ctls)
    assert by_depth.extend(MODEL, 0.55, 4) and not uniform.extend(MODEL, 0.55, 4)
    assert not by_depth.extend(MODEL, 0.05, 4)  # a long shot is still not worth a cheap pass


def test_lookup_match_lengths_share_one_trial_and_one_verdict():
    ctl = AutoController(live_costs(CPU_LIKE, {"ngram": 0.0}))
    for seconds in (1.0, 1.0):
        ctl.costs.observe_verify(1, seconds)
        record(ctl, 0, 1, seconds)
    floors = []
    for kind in (ngram(2), ngram(3), ngram(4), ngram(2)):
        budget = plan(ctl, 8)
        budget.limit(kind)
        floors.append(budget.floor)
        record(ctl, 3, 1, 2.0)
    assert floors[:TRIAL_STEPS] == [TRIAL_LENGTH] * TRIAL_STEPS and floors[TRIAL_STEPS] == 0
    # Losing steps under any match length bench lookup as a whole.
    for step in range(20):
        kind = ngram(2 + step % 3)
        k = plan(ctl, 8).limit(kind)
        record(ctl, k, 1, 2.0 if k else 1.0)
    assert ctl.gate("ngram").benched and ctl.notes == [ctl.notes[0]] and ctl.notes[0].startswith("ngram ")


def test_a_lookup_match_length_that_does_not_pay_sits_out_and_rechecks_now_and_then():
    ctl = settled(drafts={"ngram": 0.0})
    for _ in range(30):
        ctl.update(ngram(2), 4, 0)  # short matches miss...
        ctl.update(ngram(4), 8, 8)  # ...long ones hit
    limits = []
    for _ in range(4 * RECHECK_AFTER):
        k = plan(ctl, 8).limit(ngram(2))
        limits.append(k)
        record(ctl, k, 1, 1.0)
    rechecks = [i for i, k in enumerate(limits) if k]
    # Less and less often
    assert rechecks == [RECHECK_AFTER - 1, 3 * RECHECK_AFTER - 1] and limits[rechecks[0]] == PROBE_LENGTH
    assert plan(ctl, 8).limit(ngram(4)) > 0 and not ctl.gate("ngram").benched  # lookup goes on


def test_a_step_is_credited_to_the_drafter_its_plan_let_draft():
    """plan -> propose -> record: the budget keeps whom it let draft; nothing else carries it."""
    ctl = settled(drafts={"draft-model": 1 / 6, "ngram": 0.0})
    budget = ctl.plan(8)
    assert budget.asked is None
    assert budget.limit(ngram(3)) > 0 and budget.asked == ngram(3)
    before = ctl.gate("ngram").realized.steps
    ctl.record_step(budget.asked, 3, 4, 1.0)
    assert ctl.gate("ngram").realized.steps > before and ctl.gate("draft-model").realized.steps == 0
    plain = ctl.plan(8)  # a plan no drafter drew on credits nobody
    ctl.record_step(plain.asked, 0, 1, 1.0)
    assert ctl.gate("draft-model").realized.steps == 0
    assert FixedBudget(4).asked is None
