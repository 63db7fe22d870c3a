"""Costs learned from the steps run, the clocks that time them, cost profiles, and the draft's
catch-up window."""

import json

import pytest
from conftest import TinyModels, model_options
from cost_tables import live_costs

from localspec.backend.model import Model
from localspec.bench.profiles import FORMAT, RecordedProfile, load_profile
from localspec.drafters.view import DraftView
from localspec.engine.clock import DriftProfile, GpuProfile, SimulatedClock, WallClock
from localspec.engine.costs import LiveCosts
from localspec.errors import LocalspecError


def test_the_first_step_s_numbers_are_usable_at_once():
    costs = LiveCosts()
    assert costs.level is None
    costs.observe_verify(1, 0.04)
    assert costs.level is not None and costs.verify(1) == pytest.approx(0.04)
    assert costs.verify(5) > costs.verify(1)  # wider passes: a prior shape until one is seen
    costs.observe_verify(5, 0.10)
    assert costs.verify(5) == pytest.approx(0.10)
    assert costs.verify(3) == pytest.approx(0.07)  # between what was seen: interpolated


def test_a_busy_machine_moves_the_level_and_keeps_the_shape():
    costs = live_costs({1: 0.04, 2: 0.072, 9: 0.13})
    shape = costs.verify(2) / costs.verify(1)
    for _ in range(10):  # everything now takes 1.5x as long
        costs.observe_verify(9, 0.195)
        costs.observe_verify(1, 0.06)
    assert costs.verify(1) == pytest.approx(0.06, rel=0.05)
    assert costs.verify(2) / costs.verify(1) == pytest.approx(shape, rel=0.05)  # never seen busy, still right
    for _ in range(10):  # and idle again
        costs.observe_verify(9, 0.13)
        costs.observe_verify(1, 0.04)
    assert costs.verify(1) == pytest.approx(0.04, rel=0.05)


def test_a_width_timed_once_at_a_bad_moment_does_not_wall_off_wider_drafts():
    """Widths timed often fix the line; one timed once, slow, leans on it, and so do wider ones
    never timed (the trap: a 5-token pass priced at 2x its share stops every draft at 3 tokens,
    so no wider pass is ever timed to say otherwise)."""
    costs = live_costs({1: 0.030, 2: 0.036, 3: 0.042, 4: 0.048})  # 6 ms per extra token
    costs.observe_verify(5, 0.066)  # once, while something else ran: 18 ms over the 4-token pass
    assert costs.verify(5) - costs.verify(4) < 0.012
    assert costs.verify(9) - costs.verify(5) == pytest.approx(4 * 0.006, rel=0.25)
    for _ in range(12):  # timed again and again, the width's own figure wins
        costs.observe_verify(5, 0.054)
        costs.observe_verify(1, 0.030)
    assert costs.verify(5) == pytest.approx(0.054, rel=0.05)


def test_wider_passes_than_any_timed_grow_as_the_wide_ones_do():
    """A CPU's passes grow faster once wide (the testbed's 1-10 token passes below): a draft
    longer than any timed is priced by how the wide passes grow, not by the line through the
    one-token pass, which under-priced a 9-token pass by a quarter; flat passes stay flat."""
    cpu = {1: 40.8, 2: 46.0, 3: 55.5, 4: 68.0, 5: 83.2, 9: 130.2}
    costs = live_costs({b: cpu[b] / 1e3 for b in (1, 2, 3, 4)})
    assert costs.relative(9) == pytest.approx(cpu[9] / cpu[1], rel=0.08)
    chord = 1 + (cpu[4] / cpu[1] - 1) / 3 * 8  # what the line through (1, 1) and 4 tokens says
    assert costs.relative(9) > chord * 1.05
    flat = live_costs({1: 0.0084, 2: 0.00844, 3: 0.00848, 4: 0.00852})
    assert flat.relative(16) == pytest.approx(1 + 15 * 0.04 / 8.4, rel=0.02)
    noisy = live_costs({1: 0.040, 2: 0.0408, 3: 0.060})  # two near widths, the wider timed slow
    chord_slope = (0.02 * 1 + 0.5 * 2) / (1 + 4)
    beyond = noisy.relative(9) - noisy.relative(3)
    assert 6 * chord_slope < beyond <= 6 * 2 * chord_slope + 1e-9


def test_a_load_change_while_drafting_moves_the_level_not_the_shape():
    """Drafting, the target runs wide passes only; when another process takes the cores, each
    pass is as much off as the load: the level takes that, the shape keeps what it knew (a share
    of it would stay in the shape and misprice every step, and the speedup estimate, for good:
    a 3-token pass then read 1.92x a one-token pass here, not 1.6x)."""
    costs = live_costs({1: 0.01, 3: 0.016, 5: 0.022})
    for _ in range(30):
        costs.observe_verify(5, 0.066)
        costs.observe_verify(3, 0.048)
    assert costs.relative(3) == pytest.approx(1.6, rel=0.1) and costs.relative(5) == pytest.approx(
        2.2, rel=0.1
    )
    assert costs.verify(1) == pytest.approx(0.03, rel=0.1)


def test_an_outlier_moves_an_estimate_by_a_bounded_step():
    costs = live_costs({1: 0.04, 8: 0.1})
    costs.observe_verify(1, 4.0)  # the process was descheduled for a moment
    assert costs.verify(1) < 0.04 * 2


def test_the_shape_is_anchored_when_a_one_token_pass_comes_after_wider_ones():
    costs = LiveCosts()
    costs.observe_verify(5, 0.1)  # a fixed-mode engine's first step
    costs.observe_verify(1, 0.05)
    assert costs.verify(1) == pytest.approx(0.05)
    assert costs.verify(5) == pytest.approx(0.1)


def test_a_longer_context_is_timed_afresh_and_a_short_one_keeps_its_figures():
    costs = live_costs({1: 0.04, 3: 0.052})  # at the start of a text: a 3-token pass costs 1.3x
    costs.at(3000)  # attention over 3k tokens: every pass dearer, wide ones more so
    assert not costs.anchored and costs.verify(3) / costs.verify(1) == pytest.approx(1.3)  # a prior
    for seconds in (0.062, 0.06):
        costs.observe_verify(1, seconds)
    assert costs.anchored and costs.verify(1) == pytest.approx(0.06)
    assert costs.verify(3) / costs.verify(1) == pytest.approx(1.3)  # not measured here yet
    costs.observe_verify(3, 0.114)
    assert costs.verify(3) / costs.verify(1) == pytest.approx(1.9)
    costs.at(3500)  # the same span
    assert costs.anchored and costs.verify(3) == pytest.approx(0.114)
    costs.at(100)  # a new, short text
    assert costs.verify(1) == pytest.approx(0.04) and costs.verify(3) == pytest.approx(0.052)


def test_a_draft_call_is_priced_as_its_first_pass_and_each_later_one():
    """The first pass takes in the tokens accepted since the last call (on a CPU two tokens cost
    1.65x one): timed apart, the later passes are priced at what they cost, whatever lengths the
    calls had (a fit on pass count alone, from calls of one to three passes, priced each as dear
    as the first)."""
    costs = LiveCosts()
    for passes in (1, 2, 1, 3, 2, 1):
        first = 0.0185  # a two-token pass, with the call's overhead
        costs.observe_draft("draft-model", passes, first + 0.0112 * (passes - 1), first)
    assert costs.draft("draft-model", 6) == pytest.approx(0.0185 + 5 * 0.0112, rel=0.01)
    summary = costs.summary(5)
    assert summary["draft-model_call_ms"] == pytest.approx(18.5, rel=0.01) and summary[
        "draft-model_pass_ms"
    ] == pytest.approx(11.2, rel=0.01)
    # After a catch-up (left out), all the passes counted are later ones.
    costs.observe_draft("draft-model", 3, 3 * 0.0112)
    assert costs.draft("draft-model", 2) - costs.draft("draft-model", 1) == pytest.approx(0.0112, rel=0.01)
    costs.observe_draft("ngram", 0, 0.0001)
    assert costs.draft("ngram", 4) == pytest.approx(0.0001)  # prompt lookup runs no pass


def test_a_later_pass_is_priced_at_its_depth_where_the_drafter_timed_it_apart():
    """A chain of MTP heads re-reads the verified tokens at each head up to the last: its second and
    third passes cost more than deeper ones. Priced at one figure for every later pass, the dear
    ones set the price of all (and drafts stopped at two tokens)."""
    costs, uniform = LiveCosts(), LiveCosts()
    for _ in range(3):
        later = [0.004, 0.004, 0.003, 0.003, 0.003]
        costs.observe_draft("mtp", 6, 0.003 + sum(later), first=0.003, later=later)
        uniform.observe_draft("mtp", 6, 0.003 + sum(later), first=0.003)
    assert costs.draft("mtp", 1) == pytest.approx(0.003)
    assert costs.draft("mtp", 3) - costs.draft("mtp", 1) == pytest.approx(0.008)
    assert costs.draft("mtp", 6) - costs.draft("mtp", 3) == pytest.approx(0.009)
    assert costs.draft("mtp", 9) - costs.draft("mtp", 6) == pytest.approx(
        0.009
    )  # past the deepest: its figure
    assert uniform.draft("mtp", 3) - uniform.draft("mtp", 1) == pytest.approx(2 * 0.017 / 5)
    assert costs.draft("mtp", 6) == pytest.approx(uniform.draft("mtp", 6))  # the same call, split apart


def test_wall_clock_charges_what_was_measured_and_records_it():
    clock = WallClock({"format": FORMAT})
    assert clock.verify(3, 10, 0.02) == 0.02 and clock.draft("draft-model", 2, 0.01) == 0.01
    assert clock.record["verify"] == [[3, 10, 0.02]] and clock.record["draft"] == {"draft-model": [[2, 0.01]]}
    replay = RecordedProfile.from_record("x", clock.record)
    assert replay.verify(3, 0, 0.0) == 0.02 and replay.draft("draft-model", 2, 0.0) == pytest.approx(0.01)


def test_later_passes_split_a_charge_by_depth_only_where_the_wall_is_charged():
    """A profile prices every later pass alike: the wall's split of a simulated call would make its
    decisions depend on the machine's noise (and a simulated run no longer repeat)."""
    assert WallClock().later_passes([0.004, 0.003]) == [0.004, 0.003]
    assert SimulatedClock(GpuProfile()).later_passes([0.004, 0.003]) == []


def test_a_simulated_clock_charges_the_profile_and_keeps_its_own_time():
    gpu = GpuProfile(ratio=6)
    clock = SimulatedClock(gpu)
    charged = clock.verify(9, 0, measured=123.0)
    assert charged == pytest.approx(gpu.verify(9, 0, 0.0)) and clock.now() == charged
    assert gpu.verify(9, 0, 0) < 1.05 * gpu.verify(1, 0, 0)  # a GPU: wide passes cost about one token
    assert gpu.draft("draft-model", 1, 0) == pytest.approx(gpu.a / 6 + 1.5 * gpu.overhead)


def test_a_simulated_clock_charges_the_real_time_spent_outside_llama_cpp_too():
    import time

    gpu = GpuProfile(ratio=6)
    inside = [0.0]
    clock = SimulatedClock(gpu, inside=lambda: inside[0])
    clock.begin()
    time.sleep(0.05)  # the engine's own work
    assert clock.verify(1, 0, measured=0.0) >= gpu.verify(1, 0, 0.0) + 0.05
    start = time.perf_counter()
    time.sleep(0.05)
    inside[0] += time.perf_counter() - start  # a pass: the profile charges it, not the wall
    assert clock.verify(1, 0, measured=0.0) < gpu.verify(1, 0, 0.0) + 0.02


def test_drift_swings_costs_by_the_amplitude():
    drift = DriftProfile(GpuProfile())
    seen = [drift.verify(1, 0, t * 1e-3) / GpuProfile().verify(1, 0, 0) for t in range(1000)]
    assert min(seen) == pytest.approx(0.7, abs=0.02) and max(seen) == pytest.approx(1.3, abs=0.02)


def test_profiles_by_name_and_from_a_recorded_file(tmp_path):
    cpu = load_profile("cpu")
    assert cpu.verify(9, 0, 0) > 2 * cpu.verify(1, 0, 0)  # the 2-core testbed: wide passes are dear
    assert load_profile("gpu:12").ratio == 12
    assert load_profile("drift").name == "drift:cpu"
    path = tmp_path / "mine.json"
    path.write_text(
        json.dumps({"format": FORMAT, "verify": [[1, 0, 0.01], [1, 5, 0.03], [4, 0, 0.05]], "draft": {}})
    )
    mine = load_profile(str(path))
    assert mine.verify(1, 0, 0) == pytest.approx(0.02) and mine.verify(7, 0, 0) == pytest.approx(0.08)
    assert cpu.draft("tree", 3, 0) == cpu.draft("draft-model", 3, 0) > 0 and cpu.draft("ngram", 0, 0) == 0.0
    for bad in ("gpu:1", "gpu:x", "nosuch"):
        with pytest.raises(LocalspecError):
            load_profile(bad)
    path.write_text("{}")
    with pytest.raises(LocalspecError, match="not one `bench --record-costs` wrote"):
        load_profile(str(path))


def test_a_draft_that_sat_out_catches_up_on_every_token_it_missed(tiny: TinyModels):
    with Model(tiny.close, model_options()) as m:
        view = DraftView(m)
        prompt = list(range(10, 20))
        view.begin(prompt)
        generated = list(range(100, 140))
        passes = m.passes
        view.sync(prompt + generated)
        assert m.cached == prompt + generated and m.passes == passes + 1  # no hole, in one pass
        view.begin(prompt + [1])  # a new generation starts over from the real context
        view.sync(prompt + [1])
        assert m.cached == prompt + [1]


def test_catching_up_is_timed_apart_from_drafting(tiny: TinyModels):
    """What a draft evaluates after sitting out steps is no cost of drafting: the call's cost
    estimate and a probe's verdict leave it out (a probe charged with it would keep a good draft
    benched); the steady state's one or two tokens are the drafting's own."""
    with Model(tiny.close, model_options()) as m:
        view = DraftView(m)
        prompt = list(range(10, 20))
        view.begin(prompt)
        view.sync(prompt)  # its first sync reads the prompt: a catch-up too
        assert view.caught_up_s > 0.0
        view.sync(prompt + [100, 101])
        assert view.caught_up_s == 0.0
        view.sync(prompt + [100, 101, *range(102, 112)])
        assert view.caught_up_s > 0.0


def test_a_draft_accepted_whole_leaves_no_catch_up(tiny: TinyModels):
    """The draft's cache holds the tokens its passes evaluated while drafting: after a draft the
    target accepted whole, only its last token and the target's own are new (counted from the
    view instead, every such step was a catch-up, its cost left out of what drafting costs)."""
    with Model(tiny.close, model_options()) as m:
        view = DraftView(m)
        prompt = list(range(10, 20))
        view.begin(prompt)
        view.sync(prompt)
        m.prefill(prompt + [100, 101])  # drafting 100, 101, 102 evaluated the first two
        context = prompt + [100, 101, 102, 103]  # all three accepted, then the target's own
        assert view.behind(context) == 2 and view.catch_up(context) is None
        view.sync(context)
        assert view.caught_up_s == 0.0 and m.cached == context


def test_a_catch_up_is_priced_at_the_rate_the_last_one_read(tiny: TinyModels):
    """What a drafter that sat out must read first is priced (a probe weighs it) once a catch-up
    has been timed, even where the prompt was too short to time a reading."""
    with Model(tiny.close, model_options()) as m:
        view = DraftView(m)
        prompt = list(range(10, 20))
        view.begin(prompt)
        view.sync(prompt)  # a short prompt's reading: untimed
        assert view.catch_up(prompt + list(range(100, 110))) is None
        view.sync(prompt + list(range(100, 110)))
        rate = view.synced_s / 10
        later = view.catch_up(prompt + list(range(100, 116)))
        assert later is not None and later.tokens == 6 and later.token_s == pytest.approx(rate)


def test_a_slow_first_pass_that_paged_in_the_weights_does_not_set_the_figure():
    costs = LiveCosts()
    costs.observe_verify(1, 0.5)  # the process's first pass reads the weights from disk
    assert not costs.anchored
    costs.observe_verify(1, 0.05)
    assert costs.anchored and costs.verify(1) == pytest.approx(0.05)
    costs.observe_verify(9, 0.4)  # the first wide pass: its first kernels
    costs.observe_verify(9, 0.12)
    assert costs.verify(9) == pytest.approx(0.12)
