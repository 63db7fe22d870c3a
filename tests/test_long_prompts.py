"""Long prompts as the person waits (#49): a draft that must first read a long prompt drafts only
where drafting can pay that back over the answer, and the figures say what the whole wait was
against the target alone."""

from __future__ import annotations

import json
import random

import pytest
from cli_helpers import localspec
from conftest import TinyModels, model_options
from cost_tables import live_costs

from localspec.backend.model import Model
from localspec.cli.views.render import summary_line
from localspec.drafters.base import CatchUp, DraftKey
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.drafters.view import TIMED_TOKENS, WARM_TOKENS
from localspec.engine.accounting import expected_left
from localspec.engine.clock import GpuProfile, SimulatedClock
from localspec.engine.controller import AutoController
from localspec.engine.events import GenerationStats, drain
from localspec.engine.reading import READ_UNDECIDED_STEPS
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams

MODEL = DraftKey("draft-model")
# A CPU's passes: b tokens cost 1 + 0.3 (b - 1) one-token passes (seconds); the target's prompt
# pass reads a token in 0.05 s.
CPU_LIKE = {b: 1.0 + 0.3 * (b - 1) for b in (1, 2, 3, 4, 6, 8, 12, 16, 17)}
PROMPT_TOKEN_S = 0.05


def controller() -> AutoController:
    """Costs timed at this context length, no draft call timed yet: the first step a draft may draft."""
    ctl = AutoController(live_costs(CPU_LIKE))
    ctl.costs.observe_prompt(2000, 2000 * PROMPT_TOKEN_S, 2000 * PROMPT_TOKEN_S)
    return ctl


def drafts(ctl: AutoController, catch_up: CatchUp, remaining: float) -> int:
    return ctl.plan(8, 0, remaining).limit(MODEL, calibrated=True, catch_up=catch_up)


def next_turn(ctl: AutoController, catch_up: CatchUp, remaining: float) -> None:
    """A chat's next turn begins: its first step drafts nothing that would hold its first token
    back (a draft's reading least of all), and the reading is weighed from the second step on."""
    ctl.start()
    assert drafts(ctl, catch_up, remaining) == 0


# A draft reading a token at a tenth of the target's cost (the heavy testbed pair), and one nearly
# as dear as its target (the demo pair: the same model, quantized).
CHEAP, DEAR = PROMPT_TOKEN_S / 10, PROMPT_TOKEN_S * 0.8


def test_a_cheap_draft_reads_a_long_prompt_where_the_answer_pays_it_back():
    ctl = controller()
    assert drafts(ctl, CatchUp(1000, CHEAP), remaining=128) == 8  # 5 s of reading, ~20 s saved
    assert not ctl.notes


def test_a_short_answer_cannot_pay_for_reading_and_the_draft_waits_with_one_note():
    ctl = controller()
    assert drafts(ctl, CatchUp(1000, CHEAP), remaining=10) == 0
    assert drafts(ctl, CatchUp(1001, CHEAP), remaining=9) == 0
    assert len(ctl.notes) == 1 and ctl.notes[0].startswith(
        "draft-model waited: reading 1000 tokens first (~5.0s)"
    )
    next_turn(ctl, CatchUp(1000, CHEAP), remaining=10)  # the next generation says so again
    assert drafts(ctl, CatchUp(1000, CHEAP), remaining=10) == 0 and len(ctl.notes) == 2


def test_a_draft_as_dear_as_its_target_never_pays_for_reading_whatever_the_answer():
    # Priced at its reading's share of the target's prompt pass, it saves nothing per token: even
    # a perfect draft could not beat a target pass 1.3x the cost of one per drafted token.
    ctl = controller()
    assert drafts(ctl, CatchUp(1000, DEAR), remaining=100_000) == 0


def test_reading_must_beat_what_decoding_reaches_without_it_not_the_target_alone():
    # Reading that pays against the target alone (5 s for ~20 s saved over 128 tokens) waits while
    # prompt lookup copies the prompt at 3.5 tokens a pass's time: the draft would save ~1 s.
    ctl = controller()
    lookup = DraftKey("ngram", "ngram-4", lookup=True)
    for _ in range(40):
        ctl.record_step(lookup, 4, 4, 1.15)
    assert drafts(ctl, CatchUp(1000, CHEAP), remaining=128) == 0
    assert ctl.notes[-1].startswith("draft-model waited")
    # The next turn of a chat starts from the target alone's rate: the last turn's (the draft
    # model's own drafting, as often as not) says nothing of what this one reaches without it.
    next_turn(ctl, CatchUp(1000, CHEAP), remaining=128)
    assert drafts(ctl, CatchUp(1000, CHEAP), remaining=128) == 8


def test_a_draft_that_sat_out_mid_answer_is_not_measured_against_its_own_drafting():
    # Its own steps reached 4 tokens a pass's time; after a few steps it sat out, catching up
    # (400 tokens, 2 s) is weighed against what the others reached, the target alone's rate.
    ctl = controller()
    ctl.update(MODEL, 8, 8)
    for _ in range(40):
        ctl.record_step(MODEL, 4, 5, 1.25)
    for _ in range(3):
        ctl.record_step(None, 0, 1, 1.0)
    assert drafts(ctl, CatchUp(400, CHEAP), remaining=64) == 8 and not ctl.notes


def test_before_a_wide_pass_is_timed_at_this_length_the_reading_waits_for_one():
    ctl = AutoController(live_costs({1: 1.0}))  # one-token passes alone: the cost of drafting unknown
    ctl.costs.observe_prompt(2000, 2000 * PROMPT_TOKEN_S, 2000 * PROMPT_TOKEN_S)
    for _ in range(READ_UNDECIDED_STEPS):
        assert drafts(ctl, CatchUp(1000, CHEAP), remaining=128) == 0
    assert not ctl.notes  # undecided, not declined
    ctl.costs.observe_verify(5, 4.1)  # a CPU's 5-token pass after 4k tokens: drafting cannot pay
    assert drafts(ctl, CatchUp(1000, CHEAP), remaining=128) == 0 and ctl.notes[-1].startswith(
        "draft-model waited"
    )
    # A GPU's: no wide pass ever timed, then the nearest shape decides
    cheap = AutoController(live_costs({1: 1.0}))
    cheap.costs.observe_prompt(2000, 2000 * PROMPT_TOKEN_S, 2000 * PROMPT_TOKEN_S)
    assert [drafts(cheap, CatchUp(1000, CHEAP), remaining=512) for _ in range(READ_UNDECIDED_STEPS + 1)][
        -1
    ] == 8


def test_what_earlier_drafts_achieved_overrules_the_prior():
    ctl = controller()
    for _ in range(20):  # an earlier turn of the conversation: its drafts were mostly rejected
        ctl.update(MODEL, 4, 0)
    assert drafts(ctl, CatchUp(1000, CHEAP), remaining=128) == 0


def test_a_short_catch_up_is_cheap():
    assert drafts(controller(), CatchUp(3, CHEAP), remaining=5) == 8


def benched(ctl: AutoController) -> AutoController:
    """`ctl` with the draft model benched after a trial that accepted nearly everything, its probe
    due."""
    for _ in range(6):
        ctl.update(MODEL, 8, 8, [(0.9, True)] * 8)
    ctl.gate("draft-model").trial, ctl.gate("draft-model").benched = 0, True
    ctl.gate("draft-model").idle_steps = 10**6
    return ctl


def test_a_benched_drafters_probe_waits_where_reading_what_it_missed_cannot_pay():
    """A probe first reads what was generated while the drafter sat out: a draft nearly as dear as
    its target (read at a third of a one-token pass a token on the testbed) paid a third of the
    time it sat out at every probe, however far apart. Where drafting cannot save that reading
    back over the answer, the probe waits twice as long; a cheap reading probes at once."""
    ctl = benched(controller())
    ctl.costs.observe_draft("draft-model", 2, 1.6, first=0.8)  # each pass 0.8 of the target's
    interval = ctl.gate("draft-model").probe_interval
    assert drafts(ctl, CatchUp(40, DEAR), remaining=128) == 0
    assert ctl.gate("draft-model").probe_interval == 2 * interval and not ctl.gate("draft-model").probing
    assert drafts(ctl, CatchUp(40, DEAR), remaining=128) == 0 and not ctl.notes  # not due yet, no note
    # A cheap draft: a reading dearer than a target pass is paid back over a long answer, not a short one.
    cheap = benched(controller())
    cheap.costs.observe_draft("draft-model", 2, 0.2, first=0.1)
    assert drafts(cheap, CatchUp(40, PROMPT_TOKEN_S), remaining=2) == 0
    cheap.gate("draft-model").idle_steps = 10**6
    assert drafts(cheap, CatchUp(40, PROMPT_TOKEN_S), remaining=512) > 0 and cheap.gate("draft-model").probing
    # One that reads less than a target pass costs probes whatever the answer
    assert drafts(benched(controller()), CatchUp(16, CHEAP), remaining=1) > 0


def test_the_answer_expected_is_the_cap_without_history_else_about_what_answers_ran():
    assert expected_left(0, 128, []) == 128 and expected_left(100, 128, []) == 28
    assert expected_left(0, 512, [90, 100, 400]) == 100
    assert expected_left(80, 512, [90, 100, 400]) == 80  # it ran long: as long again, at least
    assert expected_left(500, 512, [100]) == 12 and expected_left(600, 512, [100]) == 0


def test_end_to_end_counts_the_drafts_load_and_reading_against_the_target_alone():
    stats = GenerationStats(
        drafter="draft-model", n_generated=60, n_steps=30, n_drafted=60, n_accepted=40, n_steps_drafted=30
    )
    stats.load_s, stats.draft_load_s = 10.0, 2.0
    stats.target_prompt_s, stats.prompt_s, stats.first_token_s = 40.0, 42.0, 42.5
    stats.elapsed_s, stats.alone_s, stats.steps_s = 10.0, 15.0, 10.0  # generation at 1.5x
    # Alone: 8 s loading, 40 s prompt, 15 s generation; here 10 + 42 + 10.
    assert stats.speedup_estimate == pytest.approx(1.5)
    assert stats.end_to_end_estimate == pytest.approx(63 / 62)
    line = summary_line(stats, "length")
    assert "~1.50x the target alone" in line and "first token 42.50s, end to end ~1.02x" in line
    assert stats.to_dict()["end_to_end_estimate"] == pytest.approx(1.016, abs=1e-3)
    stats.load_s = stats.draft_load_s = 0.0  # a chat's later turn: nothing loaded for it
    stats.prompt_s = 60.0  # a draft that read all of a long prompt
    assert stats.end_to_end_estimate == pytest.approx(55 / 70)
    assert "end to end ~0.79x" in summary_line(stats, "length")
    assert GenerationStats(drafter="draft-model").end_to_end_estimate == 0.0  # no step to judge from


@pytest.fixture(scope="module")
def long_prompt(tmp_path_factory) -> str:
    words = "the cat sat on the mat and the dog ran to the big red house in the sun".split()
    rng = random.Random(3)
    path = tmp_path_factory.mktemp("long") / "long.txt"
    path.write_text(" ".join(rng.choice(words) for _ in range(700)))  # ~1,400 tokens
    return str(path)


def test_a_draft_that_cannot_pay_for_reading_leaves_the_answer_to_the_target(
    tiny: TinyModels, long_prompt: str
):
    common = (
        "run",
        "-m",
        str(tiny.target),
        "-f",
        long_prompt,
        "--raw",
        "--ctx",
        "4096",
        "--temp",
        "0",
        "--json",
    )
    alone = json.loads(localspec(*common, "-n", "4", "-d", "none", "--no-lookup").stdout)
    res = localspec(*common, "-n", "4", "-d", str(tiny.close), "--no-lookup")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    # Two tokens left once the target alone is timed: the draft never reads its ~1,000 tokens.
    assert (
        out["tokens"] == alone["tokens"] and out["stats"]["n_drafted"] == 0 and not out["stats"]["drafters"]
    )
    # Loaded all the same (beside the target: what its load added may be nothing).
    assert out["stats"]["target_prompt_s"] <= out["stats"]["prompt_s"] and out["model_files"]["draft"] == str(
        tiny.close
    )
    # At a fixed length the draft reads it all and drafts from the first step, as llama.cpp's does.
    fixed = json.loads(
        localspec(*common, "-n", "4", "-d", str(tiny.close), "--no-lookup", "--draft-mode", "fixed").stdout
    )
    assert fixed["tokens"] == alone["tokens"] and fixed["stats"]["n_drafted"] > 0


def test_a_simulated_clock_prices_what_a_drafter_read_at_the_start_not_the_prompt_it_was_given(
    tiny: TinyModels, long_prompt: str
):
    # Prompt lookup only indexes the prompt; a lazy draft model reads ~36 of its ~1,000 tokens
    # first. Charging either for the whole prompt put 70 ms of a simulated GPU's 0.3 s before a
    # 7k-token prompt's first token that no pass spent.
    gpu = GpuProfile()
    config = GenerationConfig(max_tokens=2, sampling=SamplingParams(temperature=0.0))
    with (
        Model(tiny.target, model_options(n_ctx=4096)) as target,
        Model(tiny.close, model_options(n_ctx=4096)) as draft,
    ):
        prompt = target.tokenize(open(long_prompt).read())
        lookup = drain(
            SpeculativeEngine(target, NgramDrafter(), "ngram", SimulatedClock(gpu)).generate(prompt, config)
        ).stats
        assert lookup.prompt_s == lookup.target_prompt_s > 0
        lazy = drain(
            SpeculativeEngine(target, DraftModelDrafter(draft), "draft-model", SimulatedClock(gpu)).generate(
                prompt, config
            )
        ).stats
        read = lazy.prompt_s - lazy.target_prompt_s
        first = WARM_TOKENS + TIMED_TOKENS
        assert read == pytest.approx(
            gpu.verify(first, 0, 0) / gpu.verify(1, 0, 0) * gpu.draft("draft-model", 1, 0)
        )
